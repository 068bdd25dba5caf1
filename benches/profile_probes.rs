//! What the scanner profile's uprobes cost the profiled sender (`wrappers/scanprof-send.toml`).
//!
//! `cargo bench --bench profile_probes` (as root; about 2.5 minutes after the build). Two parts,
//! each in interleaved rounds (the order rotates every round) and summarised as medians, every
//! figure against a baseline measured in the same run:
//!
//! 1. The DEFAULT profile probes (the rare ones: `init_slot`, `calibrate`) on the reference sender
//!    paced at 10,000 pps with the tsc pacer: its achieved rate (a) alone, (b) under
//!    `scanprof run` with its profile (recognised from the command; default probes), (c) under
//!    `scanprof run --profile generic` (tracepoints only, no uprobe), so that b/c is the cost of
//!    the uprobes alone and c/a that of the tracepoints. Target: b/a >= 0.99.
//! 2. The cost of one hit of a per-packet probe (`send`, which has a uretprobe because it
//!    declares `ret`: one hit is an entry trap plus a return trap), from runs under
//!    `scanprof run` with and without `--per-packet send`, two ways:
//!    - (i) at 10,000 pps from the sender's own CPU ns per packet: extra ns per hit =
//!      (cpu_with - cpu_without) * packets_with / hits. The sleep pacer is used here: the
//!      busy-waiting pacers (tsc, clock) burn the whole slot, so their CPU per packet is
//!      1e9/rate whatever the probe costs.
//!    - (ii) at full speed (`--rate 0`) from the achieved rate: extra ns per hit =
//!      (1e9/rate_with - 1e9/rate_without) / (hits / packets).
//!
//! The sender is started directly by `scanprof run` (not through `ip netns exec` or another
//! wrapper): scanprof recognises the profile from the command it launches and attaches the rare
//! probes to that executable before it starts. Traffic goes to 127.0.0.1 only, to a UDP socket
//! this bench binds and never reads (once its buffer is full the kernel drops: the same cheap
//! path in every mode). Every send is bounded by `--duration`; every child is ended by its own
//! pid if it outlives its bound, on panic or on Ctrl-C; the bench creates no namespace.

mod common;

use std::net::UdpSocket;
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use nix::sys::signal::Signal;
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_scanprof");

/// Part 1: paced rate, rounds, seconds per send.
const P1_RATE: u32 = 10_000;
const P1_ROUNDS: usize = 5;
const P1_SECONDS: f64 = 3.0;
/// Part 2 (i): paced rate (sleep pacer), rounds, seconds per send.
const P2_RATE: u32 = 10_000;
const P2_ROUNDS: usize = 7;
const P2_SECONDS: f64 = 2.5;
/// Part 2 (ii): full speed, rounds, seconds per send.
const P3_ROUNDS: usize = 7;
const P3_SECONDS: f64 = 2.5;
/// The per-packet probe measured in part 2.
const PROBE: &str = "send";
/// How much longer than its own bound any child may run before the bench kills it.
const GRACE: Duration = Duration::from_secs(30);

/// The sender's own `--json` report: the JSON line that has `achieved_pps` and no `type`.
fn sender_report(text: &str) -> Option<Value> {
    text.lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v.get("type").is_none() && v.get("achieved_pps").is_some())
}

fn num(v: &Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("no number `{key}` in {v}"))
}

/// scanprof's `summary` line (read as JSON values: only the fields this bench prints).
fn summary_of(stdout: &str) -> Value {
    let line = stdout
        .lines()
        .find(|l| l.starts_with(r#"{"type":"summary""#))
        .unwrap_or_else(|| panic!("no summary in scanprof's output:\n{stdout}"));
    serde_json::from_str(line).expect("parsing scanprof's summary")
}

/// One entry of `summary.scanner.probes`.
#[derive(Debug, Clone, Default)]
struct ProbeFig {
    name: String,
    attached: bool,
    hits: u64,
    inside_ns: u64,
}

/// (profile name, its probes) from a summary; ("", []) when there is no scanner section.
fn probes_of(summary: &Value) -> (String, Vec<ProbeFig>) {
    let scanner = &summary["scanner"];
    let profile = scanner["profile"].as_str().unwrap_or("").to_string();
    let probes = scanner["probes"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|p| ProbeFig {
                    name: p["name"].as_str().unwrap_or("?").to_string(),
                    attached: p["attached"].as_bool().unwrap_or(false),
                    hits: p["hits"].as_u64().unwrap_or(0),
                    inside_ns: p["inside_ns"].as_u64().unwrap_or(0),
                })
                .collect()
        })
        .unwrap_or_default();
    (profile, probes)
}

fn probe<'a>(probes: &'a [ProbeFig], name: &str) -> &'a ProbeFig {
    probes
        .iter()
        .find(|p| p.name == name)
        .unwrap_or_else(|| panic!("no probe `{name}` in the summary: {probes:?}"))
}

/// "init_slot 1, calibrate 1" (attached probes only; "none" when no uprobe was attached).
fn hits_line(probes: &[ProbeFig]) -> String {
    let v: Vec<String> = probes
        .iter()
        .filter(|p| p.attached)
        .map(|p| format!("{} {}", p.name, p.hits))
        .collect();
    if v.is_empty() {
        "no uprobe attached".to_string()
    } else {
        v.join(", ")
    }
}

/// `scanprof send` arguments aimed at the bench's receiver.
fn send_args(port: u16, rate: u32, pacer: Option<&str>, seconds: f64) -> Vec<String> {
    let mut a: Vec<String> = vec![
        "send".into(),
        "--to".into(),
        format!("127.0.0.1:{port}"),
        "--rate".into(),
        rate.to_string(),
        "--duration".into(),
        seconds.to_string(),
        "--json".into(),
    ];
    if let Some(p) = pacer {
        a.extend(["--pacer".to_string(), p.to_string()]);
    }
    a
}

/// The sender alone; returns its report.
fn send_alone(args: &[String], seconds: f64) -> Value {
    let mut cmd = Command::new(BIN);
    cmd.args(args);
    let (status, out, err) = run_capture(
        cmd,
        "sender",
        Signal::SIGINT,
        Duration::from_secs_f64(seconds) + GRACE,
    );
    assert!(status.success(), "sender failed: {status}\n{out}\n{err}");
    sender_report(&out).unwrap_or_else(|| panic!("no sender report:\n{out}\n{err}"))
}

/// `scanprof run --json [run_opts] -- scanprof send ...` (scanprof launches the sender itself
/// and attaches before its first instruction); returns the sender's report and the summary.
fn send_under_scanprof(run_opts: &[&str], args: &[String], seconds: f64) -> (Value, Value) {
    let bound = (seconds + GRACE.as_secs_f64()).to_string();
    let mut cmd = Command::new(BIN);
    cmd.args(["run", "--json", "--duration", &bound])
        .args(run_opts)
        .arg("--")
        .arg(BIN)
        .args(args);
    let (status, out, err) = run_capture(
        cmd,
        "scanprof run",
        Signal::SIGINT,
        Duration::from_secs_f64(seconds) + GRACE * 2,
    );
    assert!(
        status.success(),
        "scanprof run {run_opts:?} failed: {status}\n{err}"
    );
    // Under `run --json` the command's stdout goes to scanprof's stderr (stdout is NDJSON only).
    let report = sender_report(&err).unwrap_or_else(|| panic!("no sender report:\n{out}\n{err}"));
    (report, summary_of(&out))
}

fn pause() {
    std::thread::sleep(Duration::from_millis(200));
    check_interrupted();
}

/// Part 1.
fn part1(port: u16) {
    println!(
        "== Part 1: the default profile probes (rare: init_slot, calibrate) on `send --rate {} --pacer tsc`, \
         sendto, 64 B, {P1_SECONDS} s per run, {P1_ROUNDS} interleaved rounds",
        thousands(P1_RATE as f64)
    );
    println!(
        "   (a) alone | (b) scanprof run (profile recognised: scanprof-send, default probes) | \
         (c) scanprof run --profile generic (tracepoints only)"
    );
    let args = send_args(port, P1_RATE, Some("tsc"), P1_SECONDS);
    let (mut a, mut b, mut c) = (Vec::new(), Vec::new(), Vec::new());
    let (mut ba, mut ca, mut bc) = (Vec::new(), Vec::new(), Vec::new());
    let mut b_hits = Vec::new();
    for round in 0..P1_ROUNDS {
        let (mut ra, mut rb, mut rc) = (0.0, 0.0, 0.0);
        let (mut hb, mut pc) = (String::new(), String::new());
        for k in 0..3 {
            match (round + k) % 3 {
                0 => ra = num(&send_alone(&args, P1_SECONDS), "achieved_pps"),
                1 => {
                    let (r, s) = send_under_scanprof(&[], &args, P1_SECONDS);
                    rb = num(&r, "achieved_pps");
                    let (profile, probes) = probes_of(&s);
                    assert_eq!(profile, "scanprof-send", "the sender was not recognised");
                    for p in &probes {
                        if p.name == "wait_slot" || p.name == PROBE {
                            assert!(!p.attached, "per-packet probe {} attached by default", p.name);
                        }
                    }
                    hb = format!("profile {profile}: {}", hits_line(&probes));
                    b_hits.push(probes);
                }
                _ => {
                    let (r, s) = send_under_scanprof(&["--profile", "generic"], &args, P1_SECONDS);
                    rc = num(&r, "achieved_pps");
                    let (profile, probes) = probes_of(&s);
                    assert!(
                        probes.iter().all(|p| !p.attached),
                        "--profile generic attached uprobes: {probes:?}"
                    );
                    pc = format!("profile {profile}: {}", hits_line(&probes));
                }
            }
            pause();
        }
        println!(
            "  round {}: (a) {:>10.2} pps | (b) {:>10.2} pps (b/a {:.5}) | (c) {:>10.2} pps (c/a {:.5}) | b/c {:.5}   [(b) {hb}; (c) {pc}]",
            round + 1,
            ra,
            rb,
            rb / ra,
            rc,
            rc / ra,
            rb / rc
        );
        a.push(ra);
        b.push(rb);
        c.push(rc);
        ba.push(rb / ra);
        ca.push(rc / ra);
        bc.push(rb / rc);
    }
    let (ma, mb, mc) = (median(&a), median(&b), median(&c));
    println!(
        "  median: (a) alone {ma:.2} pps | (b) default profile probes {mb:.2} pps | (c) generic {mc:.2} pps"
    );
    println!(
        "  ratios of the medians: b/a = {:.5} ({:+.3}%) | c/a = {:.5} ({:+.3}%) | b/c (the uprobes alone) = {:.5} ({:+.3}%)",
        mb / ma,
        (mb / ma - 1.0) * 100.0,
        mc / ma,
        (mc / ma - 1.0) * 100.0,
        mb / mc,
        (mb / mc - 1.0) * 100.0
    );
    println!(
        "  median of the per-round ratios: b/a = {:.5} | c/a = {:.5} | b/c = {:.5}",
        median(&ba),
        median(&ca),
        median(&bc)
    );
    let names = ["init_slot", "calibrate"];
    let per_probe: Vec<String> = names
        .iter()
        .map(|n| {
            let hits: Vec<String> = b_hits.iter().map(|ps| probe(ps, n).hits.to_string()).collect();
            let inside: Vec<f64> = b_hits.iter().map(|ps| probe(ps, n).inside_ns as f64).collect();
            format!(
                "{n} [{}] (median time inside {:.3} ms)",
                hits.join(", "),
                median(&inside) / 1e6
            )
        })
        .collect();
    println!("  probe hits per (b) run: {}", per_probe.join("; "));
    let cost = (1.0 - mb / ma) * 100.0;
    println!(
        "  verdict: the default profile probes cost the sender {cost:.3}% of its rate (target < 1%: {})",
        if cost < 1.0 { "met" } else { "NOT met" }
    );
}

/// One run of part 2: the sender's report and the per-packet probe's figures.
struct P2Run {
    pps: f64,
    cpu_ns: f64,
    sent: f64,
    hits: u64,
    inside_ns: u64,
}

fn p2_run(per_packet: bool, args: &[String], seconds: f64) -> P2Run {
    let opts: &[&str] = if per_packet { &["--per-packet", PROBE] } else { &[] };
    let (r, s) = send_under_scanprof(opts, args, seconds);
    let (_, probes) = probes_of(&s);
    let p = probe(&probes, PROBE);
    assert_eq!(
        p.attached, per_packet,
        "probe {PROBE}: attached {} with per_packet {per_packet}",
        p.attached
    );
    if let Some(w) = probes.iter().find(|p| p.name == "wait_slot") {
        assert!(!w.attached, "wait_slot attached without being asked for");
    }
    P2Run {
        pps: num(&r, "achieved_pps"),
        cpu_ns: num(&r, "cpu_ns_per_packet"),
        sent: num(&r, "sent"),
        hits: p.hits,
        inside_ns: p.inside_ns,
    }
}

/// The packets sent before the per-packet probe was attached, as ms of the run: scanprof
/// attaches per-packet probes when it sees the exec (the rare ones ahead of it), so the first
/// packets are not probed.
fn unprobed_ms(w: &P2Run) -> f64 {
    (w.sent - w.hits as f64).max(0.0) / w.pps * 1e3
}

/// Rounds of (without, with) `--per-packet send`, order alternating.
fn p2_rounds(args: &[String], rounds: usize, seconds: f64) -> Vec<(P2Run, P2Run)> {
    let mut out = Vec::new();
    for round in 0..rounds {
        let (mut without, mut with) = (None, None);
        for k in 0..2 {
            if (round + k) % 2 == 0 {
                without = Some(p2_run(false, args, seconds));
            } else {
                with = Some(p2_run(true, args, seconds));
            }
            pause();
        }
        out.push((without.unwrap(), with.unwrap()));
    }
    out
}

/// Part 2 (i): CPU ns per packet at a paced rate.
fn part2_cpu(port: u16) {
    println!(
        "\n== Part 2 (i): one `{PROBE}` hit (uprobe + uretprobe), from the sender's CPU ns per packet: \
         `send --rate {} --pacer sleep`, {P2_SECONDS} s per run, {P2_ROUNDS} rounds, \
         under scanprof run without / with `--per-packet {PROBE}`",
        thousands(P2_RATE as f64)
    );
    let args = send_args(port, P2_RATE, Some("sleep"), P2_SECONDS);
    let runs = p2_rounds(&args, P2_ROUNDS, P2_SECONDS);
    let mut per_hit = Vec::new();
    for (i, (wo, w)) in runs.iter().enumerate() {
        let extra = (w.cpu_ns - wo.cpu_ns) * w.sent / w.hits.max(1) as f64;
        per_hit.push(extra);
        println!(
            "  round {}: without {:>6.0} CPU ns/pkt ({:.1} pps) | with {:>6.0} CPU ns/pkt ({:.1} pps), {} packets, {} hits ({:.1}%; ~{:.0} ms unprobed), {:.0} ns inside per call | extra {:>6.0} ns per hit",
            i + 1,
            wo.cpu_ns,
            wo.pps,
            w.cpu_ns,
            w.pps,
            thousands(w.sent),
            thousands(w.hits as f64),
            w.hits as f64 / w.sent * 100.0,
            unprobed_ms(w),
            w.inside_ns as f64 / w.hits.max(1) as f64,
            extra
        );
    }
    let m_wo = median(&runs.iter().map(|r| r.0.cpu_ns).collect::<Vec<_>>());
    let m_w = median(&runs.iter().map(|r| r.1.cpu_ns).collect::<Vec<_>>());
    let hits_per_pkt = median(
        &runs
            .iter()
            .map(|r| r.1.hits as f64 / r.1.sent)
            .collect::<Vec<_>>(),
    );
    println!(
        "  median CPU ns per packet: without {m_wo:.0} | with {m_w:.0} | {:.3} hits per packet (median)",
        hits_per_pkt
    );
    println!(
        "  extra CPU per `{PROBE}` hit (entry + return): {:.0} ns from the medians | {:.0} ns median of the rounds \
         (= {:.1}% of the 100 us slot at 10k pps)",
        (m_w - m_wo) / hits_per_pkt,
        median(&per_hit),
        median(&per_hit) / (1e9 / P2_RATE as f64) * 100.0
    );
}

/// Part 2 (ii): achieved rate at full speed.
fn part2_rate(port: u16) {
    println!(
        "\n== Part 2 (ii): one `{PROBE}` hit from the achieved rate at full speed: `send --rate 0`, \
         {P3_SECONDS} s per run, {P3_ROUNDS} rounds, under scanprof run without / with `--per-packet {PROBE}`"
    );
    let args = send_args(port, 0, None, P3_SECONDS);
    let runs = p2_rounds(&args, P3_ROUNDS, P3_SECONDS);
    let (mut per_hit, mut per_hit_cpu) = (Vec::new(), Vec::new());
    for (i, (wo, w)) in runs.iter().enumerate() {
        let hpp = w.hits as f64 / w.sent;
        let extra_pkt = 1e9 / w.pps - 1e9 / wo.pps;
        let extra = extra_pkt / hpp;
        let extra_cpu = (w.cpu_ns - wo.cpu_ns) * w.sent / w.hits.max(1) as f64;
        per_hit.push(extra);
        per_hit_cpu.push(extra_cpu);
        println!(
            "  round {}: without {:>7} pps | with {:>7} pps ({:.3}), {} packets, {} hits ({:.1}%; ~{:.0} ms unprobed), {:.0} ns inside per call | +{:.0} ns per packet = {:.0} ns per hit | CPU {:.0} -> {:.0} ns/pkt = {:.0} ns per hit; sender on CPU {:.0}% / {:.0}%",
            i + 1,
            thousands(wo.pps),
            thousands(w.pps),
            w.pps / wo.pps,
            thousands(w.sent),
            thousands(w.hits as f64),
            hpp * 100.0,
            unprobed_ms(w),
            w.inside_ns as f64 / w.hits.max(1) as f64,
            extra_pkt,
            extra,
            wo.cpu_ns,
            w.cpu_ns,
            extra_cpu,
            wo.cpu_ns * wo.pps / 1e7,
            w.cpu_ns * w.pps / 1e7
        );
    }
    let m_wo = median(&runs.iter().map(|r| r.0.pps).collect::<Vec<_>>());
    let m_w = median(&runs.iter().map(|r| r.1.pps).collect::<Vec<_>>());
    let hpp = median(
        &runs
            .iter()
            .map(|r| r.1.hits as f64 / r.1.sent)
            .collect::<Vec<_>>(),
    );
    let extra_pkt = 1e9 / m_w - 1e9 / m_wo;
    println!(
        "  median: without {} pps | with {} pps | ratio {:.3} | {:.3} hits per packet",
        thousands(m_wo),
        thousands(m_w),
        m_w / m_wo,
        hpp
    );
    println!(
        "  extra per `{PROBE}` hit (entry + return): {:.0} ns from the medians (+{:.0} ns per packet) | {:.0} ns median of the rounds | \
         by CPU ns per packet: {:.0} ns median of the rounds",
        extra_pkt / hpp,
        extra_pkt,
        median(&per_hit),
        median(&per_hit_cpu)
    );
}

fn main() {
    assert!(nix::unistd::geteuid().is_root(), "this bench needs root (BPF)");
    watch_signals();
    let t0 = Instant::now();
    println!("scanprof profile-probes bench: binary {BIN}");
    // The receiver: bound, never read (the kernel drops once its buffer is full).
    let sink = UdpSocket::bind("127.0.0.1:0").expect("binding the receiver on 127.0.0.1");
    let port = sink.local_addr().expect("receiver address").port();
    println!("receiver: 127.0.0.1:{port} (bound, never read)\n");

    part1(port);
    part2_cpu(port);
    part2_rate(port);

    drop(sink);
    println!("\nbench took {:.0} s", t0.elapsed().as_secs_f64());
}
