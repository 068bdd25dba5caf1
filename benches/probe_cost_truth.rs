//! Whether scanprof's probe-cost figure tells the truth: the slowdown and CPU share it reports
//! beside the ones measured without it, for senders that are busy, paced, asleep and blocked.
//!
//! `cargo bench --bench probe_cost_truth` (as root). Inside private network-namespace labs that
//! the bench creates and deletes (also on panic or Ctrl-C), with a busy unrelated syscall loop
//! beside (`dd bs=1`: two syscalls a byte, the case where the old figure charged every other
//! process's syscalls to the target), each mode's reference sender runs alone and under
//! `scanprof run`, interleaved, for ROUNDS rounds:
//!
//! - busy: `send --rate 0`, as fast as its CPU allows;
//! - paced: `send --rate 20000 --pacer clock`, busy-waiting on the clock between packets;
//! - sleeping: `send --rate 2000 --pacer sleep`, asleep between packets;
//! - blocked: `send --rate 0` into a 2 Mbit/s tbf with a deep queue: it blocks in sendto.
//!
//! Printed per mode (medians): the rate and CPU ns per packet alone and under scanprof, the
//! measured slowdown (alone / under - 1) and CPU share (1 - alone / under CPU per packet), and
//! what scanprof reported over the run: its share of the target's on-CPU time, the "at least N%
//! faster" that share implies, whether it raised the alert, the ticks that did, and the tax on
//! the rest of the machine. Figures, not assertions: they move with the machine and its load.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use nix::sys::signal::Signal;
use scanprof::netlab::{self, Lab, LabConfig, TbfConfig};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_scanprof");
const PORT: u16 = 9000;
/// Rounds per mode (each: alone, then under scanprof, or the other way round on odd rounds).
const ROUNDS: usize = 3;
/// Seconds per send.
const SECONDS: f64 = 2.0;
/// How much longer than its own bound any child may run before the bench kills it.
const GRACE: Duration = Duration::from_secs(30);

/// A sender to measure.
struct Mode {
    name: &'static str,
    /// `send` arguments after --to/--duration/--json
    args: &'static [&'static str],
    /// whether it sends into the bottleneck lab
    bottleneck: bool,
}

const MODES: [Mode; 4] = [
    Mode {
        name: "busy",
        args: &["--rate", "0"],
        bottleneck: false,
    },
    Mode {
        name: "paced",
        args: &["--rate", "20000", "--pacer", "clock"],
        bottleneck: false,
    },
    Mode {
        name: "sleeping",
        args: &["--rate", "2000", "--pacer", "sleep"],
        bottleneck: false,
    },
    Mode {
        name: "blocked",
        args: &["--rate", "0"],
        bottleneck: true,
    },
];

/// One send's figures.
#[derive(Default, Clone)]
struct Round {
    pps: f64,
    cpu_ns_per_packet: f64,
    /// scanprof's, over the run (None alone)
    share: Option<f64>,
    alert: bool,
    alert_ticks: usize,
    ticks: usize,
    machine_cpu_share: Option<f64>,
    no_share: Option<String>,
}

fn send_args(lab: &Lab, mode: &Mode) -> Vec<String> {
    let mut a: Vec<String> = [
        "send",
        "--to",
        &format!("{}:{PORT}", lab.target_addr),
        "--duration",
        &SECONDS.to_string(),
        "--json",
    ]
    .map(String::from)
    .to_vec();
    a.extend(mode.args.iter().map(|s| s.to_string()));
    a
}

/// The sender's own `--json` report: the JSON line that has `achieved_pps` and no `type`.
fn sender_report(text: &str) -> Option<Value> {
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .rfind(|v| v.get("type").is_none() && v.get("achieved_pps").is_some())
}

fn of_report(r: &Value) -> Round {
    Round {
        pps: r["achieved_pps"].as_f64().unwrap_or(0.0),
        cpu_ns_per_packet: r["cpu_ns_per_packet"].as_f64().unwrap_or(0.0),
        ..Default::default()
    }
}

fn alone(lab: &Lab, mode: &Mode) -> Round {
    let cmd = lab.command_in_sender(BIN, &send_args(lab, mode));
    let (status, out, err) = run_capture(
        cmd,
        "sender",
        Signal::SIGTERM,
        Duration::from_secs_f64(SECONDS) + GRACE,
    );
    assert!(status.success(), "sender failed: {status}\n{out}\n{err}");
    of_report(&sender_report(&out).unwrap_or_else(|| panic!("no sender report:\n{out}\n{err}")))
}

fn under_scanprof(lab: &Lab, mode: &Mode) -> Round {
    let mut cmd = Command::new(BIN);
    cmd.args([
        "run",
        "--json",
        "--duration",
        &(SECONDS + GRACE.as_secs_f64()).to_string(),
        "--",
        "ip",
        "netns",
        "exec",
        &lab.sender_ns,
        BIN,
    ])
    .args(send_args(lab, mode));
    let (status, out, err) = run_capture(
        cmd,
        "scanprof run",
        Signal::SIGTERM,
        Duration::from_secs_f64(SECONDS) + GRACE * 2,
    );
    assert!(status.success(), "scanprof run failed: {status}\n{err}");
    // Under `run --json` the command's stdout goes to scanprof's stderr.
    let mut r = of_report(&sender_report(&err).unwrap_or_else(|| panic!("no sender report:\n{err}")));
    for line in out.lines() {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let bpf = &v["cost"]["bpf"];
        match v["type"].as_str() {
            Some("sample") if bpf.is_object() => {
                r.ticks += 1;
                if bpf["alert"].as_bool() == Some(true) {
                    r.alert_ticks += 1;
                }
            }
            Some("summary") => {
                r.share = bpf["share_of_target"].as_f64();
                r.alert = bpf["alert"].as_bool() == Some(true);
                r.machine_cpu_share = bpf["machine_cpu_share"].as_f64();
                r.no_share = bpf["no_share"].as_str().map(String::from);
            }
            _ => {}
        }
    }
    r
}

/// A busy loop of syscalls outside the family: `dd bs=1` copies /dev/zero to /dev/null a byte
/// (a read and a write) at a time until the bench ends it.
fn syscall_loop() -> Proc {
    let mut cmd = Command::new("dd");
    cmd.args(["if=/dev/zero", "of=/dev/null", "bs=1"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    Proc::spawn(cmd, "dd syscall loop", Signal::SIGTERM)
}

fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

fn measure(lab: &Lab, mode: &Mode) {
    let mut a = Vec::new();
    let mut b = Vec::new();
    for round in 0..ROUNDS {
        check_interrupted();
        // Interleaved, the order flipped every other round.
        if round % 2 == 0 {
            a.push(alone(lab, mode));
            b.push(under_scanprof(lab, mode));
        } else {
            b.push(under_scanprof(lab, mode));
            a.push(alone(lab, mode));
        }
    }
    let med = |v: &[Round], f: fn(&Round) -> f64| median(&v.iter().map(f).collect::<Vec<_>>());
    let (pps_a, pps_b) = (med(&a, |r| r.pps), med(&b, |r| r.pps));
    let (cpu_a, cpu_b) = (med(&a, |r| r.cpu_ns_per_packet), med(&b, |r| r.cpu_ns_per_packet));
    let shares: Vec<f64> = b.iter().filter_map(|r| r.share).collect();
    let share = (!shares.is_empty()).then(|| median(&shares));
    let machine: Vec<f64> = b.iter().filter_map(|r| r.machine_cpu_share).collect();
    println!(
        "{:<9} rate {:>9.0} alone, {:>9.0} under ({:+.0} pps); CPU/packet {:>7.0} ns alone, {:>7.0} ns under",
        mode.name,
        pps_a,
        pps_b,
        pps_b - pps_a,
        cpu_a,
        cpu_b
    );
    println!(
        "          measured: {} faster without scanprof, probes' share of its CPU {} | reported: share {}, \
         'at least {} faster', alert {}/{} runs, {} of {} ticks | tax on the rest of the machine {} of a CPU",
        pct(pps_a / pps_b.max(1.0) - 1.0),
        pct(1.0 - cpu_a / cpu_b.max(1.0)),
        share.map_or_else(
            || format!(
                "none ({})",
                b.iter().find_map(|r| r.no_share.clone()).unwrap_or_default()
            ),
            pct
        ),
        share.map_or("-".into(), |s| pct(1.0 / (1.0 - s.min(0.99)) - 1.0)),
        b.iter().filter(|r| r.alert).count(),
        b.len(),
        b.iter().map(|r| r.alert_ticks).sum::<usize>(),
        b.iter().map(|r| r.ticks).sum::<usize>(),
        if machine.is_empty() {
            "-".into()
        } else {
            pct(median(&machine))
        }
    );
}

fn main() {
    watch_signals();
    let t0 = Instant::now();
    println!(
        "scanprof probe-cost truth bench: binary {BIN}; {ROUNDS} interleaved rounds of {SECONDS} s per mode, \
         a `dd bs=1` syscall loop running beside"
    );
    let mut dd = syscall_loop();
    {
        let lab = Lab::create(&LabConfig::default()).expect("creating the lab");
        let sink = lab.udp_sink(PORT).expect("starting the receiver");
        for mode in MODES.iter().filter(|m| !m.bottleneck) {
            measure(&lab, mode);
        }
        let _ = sink.stop();
        lab.destroy().expect("deleting the lab");
    }
    {
        // A bottleneck with a deep queue: the sender's socket buffer fills and it blocks.
        let tbf = TbfConfig {
            rate: "2mbit".into(),
            burst: "4kb".into(),
            limit: "2mb".into(),
        };
        let lab = Lab::create(&LabConfig { tbf: Some(tbf) }).expect("creating the bottleneck lab");
        let sink = lab.udp_sink(PORT).expect("starting the receiver");
        for mode in MODES.iter().filter(|m| m.bottleneck) {
            measure(&lab, mode);
        }
        let _ = sink.stop();
        lab.destroy().expect("deleting the lab");
    }
    dd.signal(Signal::SIGTERM);
    let _ = dd.wait(Duration::from_secs(5));
    let left = netlab::leftover_namespaces();
    println!(
        "lab namespaces left: {} | bench took {:.0} s",
        if left.is_empty() {
            "none".to_string()
        } else {
            left.join(" ")
        },
        t0.elapsed().as_secs_f64()
    );
}
