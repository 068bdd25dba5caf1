//! Privileged tests against bpftrace as the independent counter. The bundle's bpftrace script
//! (src/views/export/recount.rs): generated from a real run's summary, run by bpftrace beside a
//! second run of the same kind, it must count what scanprof counts: the family's packets and the
//! target's QDISC_DROP drops at the qdisc. And the time budget's wait for a CPU after wake-ups,
//! against a bpftrace script that times each wake-up to its switch-in.
//!
//! Needs root (BPF, namespaces) and fails, never skips, without it. Traffic goes only into the
//! namespace lab the test creates (removed on drop), every send is bounded in time and count,
//! and only the processes the test started are signalled, by pid.
//!
//! Run: `cargo test --test it recount::`

use crate::common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use common::*;
use scanprof::analysis::Summary;
use scanprof::collect::DropClass;
use scanprof::netlab::{Lab, LabConfig, TbfConfig};
use scanprof::probes::KernelFeatures;
use scanprof::views::export::recount::bpftrace_script;
use scanprof::views::export::{Meta, Recording};

/// UDP port of the lab receiver.
const PORT: u16 = 9000;
/// The reference sender's rate (pps), packet size (bytes) and length (s): 20 Mbit/s into a
/// 2 Mbit/s token bucket with a 10 kB queue, so most packets are QDISC_DROPs.
const RATE: u64 = 5000;
const SIZE: u64 = 512;
const SECONDS: u64 = 2;
/// The rate of a sender outside the family, of the same name, sending at the same time.
const OUTSIDER_RATE: u64 = 2000;
/// Longest any scanprof process of this test may run.
const RUN_TIMEOUT: Duration = Duration::from_secs(30);
/// The end bpftrace is given instead of the script's default, so that SIGINT ends it.
const BPFTRACE_LIMIT_S: u64 = 120;

/// A file this test wrote, removed on drop.
struct TempFile(PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// `scanprof run --json --no-tui --requested R --duration 30 -- ip netns exec NS scanprof send ...`
fn run_args(lab: &Lab) -> Vec<String> {
    let to = format!("{}:{PORT}", lab.target_addr);
    #[rustfmt::skip]
    let args = [
        "run", "--json", "--no-tui", "--requested", &RATE.to_string(), "--duration", "30", "--",
        "ip", "netns", "exec", &lab.sender_ns,
        scanprof_bin(), "send", "--to", &to, "--rate", &RATE.to_string(), "--size", &SIZE.to_string(),
        "--duration", &(SECONDS + 2).to_string(), "--count", &(RATE * SECONDS).to_string(),
    ];
    args.iter().map(|s| s.to_string()).collect()
}

fn run_scanprof(lab: &Lab) -> Summary {
    let run = Proc::scanprof(&run_args(lab)).finish(RUN_TIMEOUT);
    run.assert_success();
    assert_all_probes_attached(&run.started());
    run.summary()
}

/// `bpftrace -f json SCRIPT [ROOT]`, once its probes are attached.
fn bpftrace_attached(script: &std::path::Path, root: Option<u32>) -> Proc {
    let mut command = Command::new("bpftrace");
    command.arg("-f").arg("json").arg(script);
    command.args(root.map(|pid| pid.to_string()));
    let mut bpftrace = Proc::spawn("bpftrace", command, false);
    bpftrace.wait_for_line("attached_probes line", Duration::from_secs(30), |l| {
        l.contains("\"attached_probes\"")
    });
    assert!(bpftrace.running(), "bpftrace ended early");
    bpftrace
}

/// The maps bpftrace printed with `-f json` at exit, by name; multi-key maps have their keys
/// joined with commas.
fn bpftrace_maps(lines: &[String]) -> BTreeMap<String, BTreeMap<String, u64>> {
    let mut maps = BTreeMap::new();
    for line in lines {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if v["type"] != "map" {
            continue;
        }
        for (name, entries) in v["data"].as_object().into_iter().flatten() {
            let entries: BTreeMap<String, u64> = match entries {
                Value::Object(m) => m
                    .iter()
                    .map(|(k, n)| {
                        (
                            k.clone(),
                            n.as_u64().unwrap_or_else(|| panic!("{name}[{k}] = {n}")),
                        )
                    })
                    .collect(),
                Value::Number(n) => [(String::new(), n.as_u64().unwrap_or(0))].into(),
                other => panic!("unexpected map value {other} in {line}"),
            };
            maps.insert(name.clone(), entries);
        }
    }
    maps
}

/// Sum over a map's entries whose comma-separated key satisfies `pred`.
fn sum_where(map: Option<&BTreeMap<String, u64>>, pred: impl Fn(&[&str]) -> bool) -> u64 {
    map.into_iter()
        .flatten()
        .filter(|(k, _)| pred(&k.split(',').collect::<Vec<_>>()))
        .map(|(_, n)| n)
        .sum()
}

#[test]
fn bpftrace_script_recounts_packets_and_qdisc_drops() {
    let test = privileged();
    let lab = Lab::create(&LabConfig {
        tbf: Some(TbfConfig {
            rate: "2mbit".into(),
            burst: "4kb".into(),
            limit: "10kb".into(),
        }),
    })
    .unwrap_or_else(|e| panic!("cannot create the namespace lab: {e:#}"));
    let sink = lab
        .udp_sink(PORT)
        .unwrap_or_else(|e| panic!("cannot start the lab receiver: {e:#}"));

    // 1. A first run gives the Recording a bundle would hold; the script is made from it.
    let first = run_scanprof(&lab);
    let mut command_line = vec!["scanprof".to_string()];
    command_line.extend(run_args(&lab));
    let rec = Recording {
        meta: Meta {
            command_line,
            version: env!("CARGO_PKG_VERSION").into(),
            drop_reasons: KernelFeatures::detect().drop_reasons,
            ..Default::default()
        },
        processes: first.processes.clone(),
        probes: first.probes.clone(),
        clocks: None,
        ticks: Vec::new(),
        summary: Some(first.clone()),
    };
    let script = bpftrace_script(&rec);
    let comms: Vec<String> = first.processes.iter().map(|p| p.comm.clone()).collect();
    assert!(
        comms.iter().any(|c| c == "scanprof"),
        "the sender is not in the family: {comms:?}"
    );
    // The script ends itself after the recorded run's duration rounded up; this test starts
    // bpftrace before a second run and ends it with SIGINT, so it raises that limit.
    let default_end = format!("interval:s:{}\n", first.duration_s.ceil() as u64);
    assert_eq!(
        script.matches(&default_end).count(),
        1,
        "no {default_end:?} in\n{script}"
    );
    let script = script.replace(&default_end, &format!("interval:s:{BPFTRACE_LIMIT_S}\n"));
    let file = TempFile(std::env::temp_dir().join(format!("scanprof-recount-{}.bt", std::process::id())));
    std::fs::write(&file.0, &script).unwrap_or_else(|e| panic!("cannot write {:?}: {e}", file.0));

    // 2. bpftrace runs the script alone, given the pid of a shell that then starts a second run
    // of the same kind: the family is the shell's. At the same time another shell, outside it,
    // runs a sender of the same name (scanprof) to a closed port on 127.0.0.1: a filter on names
    // would count its packets too.
    let second_run = format!(
        "read go && exec {}",
        sh_join(&{
            let mut argv = vec![scanprof_bin().to_string()];
            argv.extend(run_args(&lab));
            argv
        })
    );
    let mut launcher = Command::new("sh");
    launcher.arg("-c").arg(&second_run);
    let mut launcher = Proc::spawn("launcher shell", launcher, true);
    let bpftrace = bpftrace_attached(&file.0, Some(launcher.pid()));
    let outsider_argv = sender_argv(
        "127.0.0.1:9",
        OUTSIDER_RATE as f64,
        OUTSIDER_RATE * SECONDS,
        SECONDS as f64 + 1.0,
        &[],
    );
    let mut outsider = Command::new("sh");
    outsider
        .arg("-c")
        .arg(format!("sleep 0.5; {}", sh_join(&outsider_argv)));
    let outsider = Proc::spawn("outsider shell", outsider, false);
    launcher.write_stdin("go\n");
    let second_run = launcher.finish(RUN_TIMEOUT);
    second_run.assert_success();
    assert_all_probes_attached(&second_run.started());
    let second = second_run.summary();
    let outsider = outsider.finish(RUN_TIMEOUT);
    outsider.assert_success();
    let outsider_sent = u64_of(&outsider.sender_report(), "sent");
    // Let the last drops and sends land, then stop bpftrace (our pid only): it prints its maps.
    std::thread::sleep(Duration::from_millis(300));
    let bpftrace = bpftrace.interrupt_tracer(Duration::from_secs(20));
    let received = sink.stop();
    assert!(bpftrace.status.success(), "{}", bpftrace.context());
    let maps = bpftrace_maps(&bpftrace.lines);

    // scanprof's figures of the second run.
    let family: Vec<&str> = comms.iter().map(String::as_str).collect();
    let qdisc_reason = drop_reason_number("QDISC_DROP").to_string();
    let ours: Vec<_> = second
        .drops
        .iter()
        .filter(|d| d.class == DropClass::TargetLoss && d.reason == "QDISC_DROP")
        .collect();
    let scanprof_drops: u64 = ours.iter().map(|d| d.count).sum();
    let mut functions: Vec<&str> = ours.iter().map(|d| function_of(&d.location)).collect();
    functions.sort();
    functions.dedup();

    // bpftrace's: packets of the family's comms; QDISC_DROPs at the same functions, in the
    // family's context (comm-filtered, as the script does) and machine-wide.
    let bt_packets = sum_where(maps.get("@packets"), |k| family.contains(&k[0]));
    let bt_family_drops = sum_where(maps.get("@family_drops"), |k| {
        family.contains(&k[0]) && k[1] == qdisc_reason && k[2] == "QDISC_DROP" && functions.contains(&k[3])
    });
    let bt_all_drops = sum_where(maps.get("@drops"), |k| {
        k[0] == qdisc_reason && k[1] == "QDISC_DROP" && functions.contains(&k[2])
    });
    let bt_errors = sum_where(maps.get("@errors"), |k| family.contains(&k[0]));
    // Every entry is the family's: none of the outsider's packets.
    let bt_packets_all = sum_where(maps.get("@packets"), |_| true);
    eprintln!(
        "recount: scanprof packets {} (first run {}), failed calls {}, target_loss QDISC_DROP {} at {:?}; \
         bpftrace packets {} (all entries {}), errors {}, QDISC_DROP in the family's context {}, \
         machine-wide {}; receiver {}; outsider sent {outsider_sent}\nmaps: {maps:?}",
        second.packets,
        first.packets,
        second.failed_calls,
        scanprof_drops,
        ours.iter().map(|d| &d.location).collect::<Vec<_>>(),
        bt_packets,
        bt_packets_all,
        bt_errors,
        bt_family_drops,
        bt_all_drops,
        received.packets,
    );

    // The fixture did its job: packets sent, most of them dropped at the qdisc.
    assert_eq!(second.packets, RATE * SECONDS, "the sender's packets");
    assert!(
        scanprof_drops > second.packets / 2,
        "the tbf dropped too little to test with: {:?}",
        second.drops
    );
    assert!(!functions.is_empty());
    // The independent counts agree with scanprof's.
    assert!(
        bt_packets > 0,
        "bpftrace counted no packets\n{}",
        bpftrace.context()
    );
    assert_within(
        "bpftrace's packets vs scanprof's",
        bt_packets as f64,
        second.packets as f64,
        0.01,
    );
    // The outsider sent while bpftrace counted, under the family's name, and was not counted.
    assert_eq!(outsider_sent, OUTSIDER_RATE * SECONDS, "the outsider's packets");
    assert_eq!(
        bt_packets_all, bt_packets,
        "packets outside the family were counted"
    );
    assert_within(
        "bpftrace's QDISC_DROPs in the family's context vs scanprof's target_loss QDISC_DROPs",
        bt_family_drops as f64,
        scanprof_drops as f64,
        0.01,
    );
    // kfree_skb is global: other processes' drops may add to the machine-wide count, never
    // take from it.
    assert!(
        bt_all_drops >= bt_family_drops,
        "machine-wide {bt_all_drops} < family {bt_family_drops}"
    );
    assert_eq!(bt_errors, second.failed_calls, "failed send calls");

    drop(file);
    let names = vec![lab.sender_ns.clone(), lab.target_ns.clone()];
    lab.destroy()
        .unwrap_or_else(|e| panic!("lab teardown failed: {e:#}"));
    assert_namespaces_gone(&names);
    test.assert_released("the test's scanprof processes ended");
}

/// From each `sched_wakeup` of a `scanprof` thread to its next switch-in, summed per tid; a wake-up
/// of a thread still on its CPU (it never slept) is forgotten at its switch-out.
const WAKEUP_WAIT_BT: &str = r#"
tracepoint:sched:sched_wakeup /args->comm == "scanprof"/ { @woken[args->pid] = nsecs; }
tracepoint:sched:sched_switch {
  delete(@woken[args->prev_pid]);
  if (@woken[args->next_pid] != 0) {
    @wait_ns[args->next_pid] = @wait_ns[args->next_pid] + (nsecs - @woken[args->next_pid]);
    @wakeups[args->next_pid] = @wakeups[args->next_pid] + 1;
    delete(@woken[args->next_pid]);
  }
}
END { clear(@woken); }
"#;

/// A sleeping pacer (per-packet slots, 5000 pps) waits for a CPU after each of its wake-ups:
/// scanprof's `wakeup_wait_ns` for the sender thread equals bpftrace's sum (within 5%, or 2 us
/// per wake-up).
#[test]
fn the_wait_for_a_cpu_after_wake_ups_matches_bpftrace() {
    let test = privileged();
    let lab = Lab::create(&LabConfig::default())
        .unwrap_or_else(|e| panic!("cannot create the namespace lab: {e:#}"));
    let sink = lab
        .udp_sink(PORT)
        .unwrap_or_else(|e| panic!("cannot start the lab receiver: {e:#}"));
    let file = TempFile(std::env::temp_dir().join(format!("scanprof-wakeup-{}.bt", std::process::id())));
    std::fs::write(&file.0, WAKEUP_WAIT_BT).unwrap_or_else(|e| panic!("cannot write {:?}: {e}", file.0));
    let bpftrace = bpftrace_attached(&file.0, None);

    let to = format!("{}:{PORT}", lab.target_addr);
    let count = 10_000u64;
    #[rustfmt::skip]
    let args: Vec<String> = [
        "run", "--json", "--no-tui", "--duration", "30", "--",
        "ip", "netns", "exec", &lab.sender_ns,
        scanprof_bin(), "send", "--to", &to, "--rate", "5000", "--count", &count.to_string(),
        "--duration", "5", "--pacer", "sleep", "--slot", "per-packet",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let run = Proc::scanprof(&args).finish(RUN_TIMEOUT);
    std::thread::sleep(Duration::from_millis(200));
    let bpftrace = bpftrace.interrupt_tracer(Duration::from_secs(20));
    let received = sink.stop();
    run.assert_success();
    assert!(bpftrace.status.success(), "{}", bpftrace.context());
    let summary = run.summary();
    let maps = bpftrace_maps(&bpftrace.lines);

    assert_eq!(summary.packets, count, "the sender's packets");
    assert_eq!(received.packets, count, "the receiver's count");
    let sender = summary
        .threads
        .iter()
        .max_by_key(|t| t.packets)
        .expect("a sender thread");
    let tid = sender.tid.to_string();
    let bt_wait = maps
        .get("@wait_ns")
        .and_then(|m| m.get(&tid))
        .copied()
        .unwrap_or(0);
    let bt_wakeups = maps
        .get("@wakeups")
        .and_then(|m| m.get(&tid))
        .copied()
        .unwrap_or(0);
    let b = &sender.budget;
    let woken = b.wakeup_wait_ns.expect("the wake-up wait is measured");
    eprintln!(
        "wake-up wait of tid {tid}: scanprof {woken} ns of {} ns runnable; bpftrace {bt_wait} ns over {bt_wakeups} wake-ups",
        b.preempted_ns
    );
    // A sleep per packet: about one wake-up per packet.
    assert!(bt_wakeups >= count * 9 / 10, "bpftrace saw {bt_wakeups} wake-ups");
    // Both programs run on the same tracepoints, one after the other: each wake-up's two
    // timestamps differ by up to the other program's run time at each end (about 1 us under
    // load). So the two sums agree within 5%, or within 2 us per wake-up.
    let diff = (woken as f64 - bt_wait as f64).abs();
    assert!(
        diff <= 0.05 * bt_wait as f64 || diff <= 2_000.0 * bt_wakeups as f64,
        "scanprof's wake-up wait {woken} ns vs bpftrace's {bt_wait} ns: {:.0} ns per wake-up apart",
        diff / bt_wakeups.max(1) as f64
    );

    drop(file);
    let names = vec![lab.sender_ns.clone(), lab.target_ns.clone()];
    lab.destroy()
        .unwrap_or_else(|e| panic!("lab teardown failed: {e:#}"));
    assert_namespaces_gone(&names);
    test.assert_released("the test's scanprof processes ended");
}
