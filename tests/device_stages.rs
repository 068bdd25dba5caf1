//! `--device-stages sampled` (issue 32 item 3): the device-stage programs run only in a window
//! at the start of each tick, their counts are scaled to the tick and marked as estimates, while
//! the syscall stage and the drops stay counted. The reference sender sends a bounded count to
//! a closed port on loopback (every packet a `NO_SOCKET` drop at `lo`, or before 5.17 a
//! `NOT_SPECIFIED` one at `__udp4_lib_rcv`, attributed to the family only through
//! net_dev_start_xmit's mark, which stays attached). Independent counts: the
//! sender's own report (`sent`), and the programs' run counts from the kernel's statistics for
//! the same run (`--bpf-stats always`).
//!
//! Run: `cargo test --test it device_stages:: -- --test-threads=1`

use crate::common;

use std::time::Duration;

use common::*;
use scanprof::analysis::verdict::Cause;
use scanprof::analysis::{DropRow, StageName};
use scanprof::collect::device_window::{DeviceSampling, SLOW_SWITCH_SHARE};
use scanprof::collect::DropClass;

const RATE: u64 = 5_000;
const COUNT: u64 = 40_000;
const RUN_TIMEOUT: Duration = Duration::from_secs(90);

/// Relative error allowed between the scaled estimate and the syscall count over the ticks the
/// sender spent wholly sending. The family's rows are scaled by its syscall packets (the ratio
/// estimate: -0.1% seen here); the bound, and its reasoning below, are from the scaling by
/// time that came before (still used for a window with few of the family's sends). A window of a 1 s tick is 100 ms: 500 packets at 5,000 pps, and
/// about 3,000 over the six or so full ticks of the run. A paced sender's packets are not a
/// Poisson stream (their count in a window is nearly fixed), so 3/sqrt(3000) = 5.5% already
/// covers counting noise with room; what moves an estimate more is the sender's own stalls at
/// a window's edges on this loaded 2-vCPU machine (the deadline-slot pacer catches up in a
/// burst: a 20 ms stall at an edge moves 100 packets, 3% of the windows' total). 15% holds both
/// with margin, and still fails an unscaled count (10% of the truth) or a double-scaled one.
const STEADY_TOLERANCE: f64 = 0.15;

/// Family packets a run behind a tbf may show as unrelated because the kernel skipped
/// net_dev_start_xmit's program for them (never marked, so they match no packet the family sent):
/// 0 to 6 of 12,000 seen on a 6.18 VM. scanprof counts and says them (`unmatched_on_path`); the
/// bound catches a marking defect, such as a stale note taken at every window's edge (~14 windows
/// here, each misreading a packet).
const UNMATCHED_BOUND: u64 = 12;

fn stage(counts: &[(StageName, u64)], name: StageName) -> u64 {
    counts.iter().find(|(n, _)| *n == name).map_or(0, |(_, c)| *c)
}

/// The family's drops at the closed port, by the running kernel's reasons.
fn closed_port_drops(s: &scanprof::analysis::Summary) -> u64 {
    let reasons = kernel_has_drop_reasons();
    s.drops
        .iter()
        .filter(|d| is_closed_port_drop(d, reasons))
        .map(|d| d.count)
        .sum()
}

#[test]
fn sampled_device_stages_are_scaled_estimates_while_syscalls_and_drops_stay_exact() {
    let test = privileged();
    let (run, sent) = loopback_run(&["--device-stages", "sampled", "--bpf-stats", "always"], COUNT);
    let s = run.summary();
    let ctx = run.context();
    precision::assert_precise(
        "sampled_device_stages_are_scaled_estimates_while_syscalls_and_drops_stay_exact",
        &s,
        &run.of_type("sample"),
    );

    // The syscall stage and the drops: counted, exactly the sender's packets. Without drop
    // reasons (before 5.17) the closed port's drops are the family's NOT_SPECIFIED drops at
    // __udp4_lib_rcv, classed as its loss, and the run says it cannot judge them.
    assert_eq!(s.stage_counts[&StageName::SyscallPackets], sent, "{ctx}");
    let reasons = kernel_has_drop_reasons();
    let closed = closed_port_drops(&s);
    assert_eq!(
        closed, sent,
        "every probe to the closed port is the family's drop there\n{ctx}"
    );
    let lost = DropRow::sum_of(&s.drops, DropClass::TargetLoss);
    if reasons {
        assert_eq!(lost, 0, "{ctx}");
    } else {
        assert_eq!(lost, closed, "no loss but the closed port's drops\n{ctx}");
        assert_closed_port_not_judged(&s, closed);
    }

    // The device stages: sampled, with the coverage of windows of a tenth of each tick.
    let sampling = s
        .device_sampling
        .unwrap_or_else(|| panic!("no device_sampling in the summary\n{ctx}"));
    let coverage = sampling.coverage();
    assert!(
        coverage > 0.0 && coverage < 1.0,
        "coverage {coverage} of {sampling:?}\n{ctx}"
    );
    assert!(sampling.windows >= 5, "{sampling:?}\n{ctx}");
    let ticks = run.of_type("sample");
    let per_tick: Vec<DeviceSampling> = ticks
        .iter()
        .map(|t| {
            serde_json::from_value(t["device_sampling"].clone())
                .unwrap_or_else(|e| panic!("every tick says its device stages were sampled: {e}\n{ctx}"))
        })
        .collect();
    // Each tick says what its own windows covered. The first window opens at attach and closes
    // at the first tick, so it also covers the run's start (7 s of 15 in an emulated 5.10
    // guest); every later one is the first tenth of its tick, stretched by the attaches and
    // detaches (~12 ms each there), and by a collector that comes late to close it (one of 723
    // ms of a 981 ms tick in a 6.1 guest under CI's load, 2026-11-30): the median tick's.
    let mut after_first: Vec<f64> = per_tick[1..]
        .iter()
        .filter(|t| t.elapsed_ns > 0)
        .map(|t| t.covered_ns as f64 / t.elapsed_ns as f64)
        .collect();
    after_first.sort_by(f64::total_cmp);
    let median = after_first.get(after_first.len() / 2).copied().unwrap_or(0.0);
    assert!(
        (0.05..0.3).contains(&median),
        "windows of a tenth of each tick after the first: the median {median:.3} of {after_first:?} \
         ({:?}; the run: {sampling:?})\n{ctx}",
        &per_tick[1..]
    );
    assert!(
        s.verdicts
            .iter()
            .any(|v| v.cause == Cause::NotJudgedHere && v.sentence.contains("device stages were sampled")),
        "the diagnosis says what it did not judge: {:?}",
        s.verdicts
    );
    assert!(
        !s.verdicts.iter().any(|v| v.cause == Cause::MeasurementFault),
        "an estimate is never a measurement fault: {:?}",
        s.verdicts
    );

    // The estimate, over the ticks the sender spent wholly sending (its first and last tick
    // hold its start and end, which a window at the tick's start sees or misses whole).
    let mut steady: Vec<(u64, u64)> = Vec::new();
    for t in &ticks {
        let counts = tick_stages(t);
        let syscall = stage(&counts, StageName::SyscallPackets);
        let full = !t["partial"].as_bool().unwrap_or(false)
            && syscall as f64 >= 0.95 * RATE as f64 * t["interval_s"].as_f64().unwrap_or(1.0);
        if full {
            steady.push((syscall, stage(&counts, StageName::DevQueue)));
        }
    }
    // drop the first full tick too: the sender may have started inside it after its window
    let steady = &steady[1.min(steady.len())..];
    assert!(steady.len() >= 3, "too few full ticks: {steady:?}\n{ctx}");
    let (exact, est): (u64, u64) = steady.iter().fold((0, 0), |(a, b), (x, y)| (a + x, b + y));
    let err = (est as f64 - exact as f64) / exact as f64;
    eprintln!(
        "sampled dev_queue over {} full ticks: estimate {est}, syscall packets {exact} ({:+.1}%); \
         run: estimate {}, sent {sent}; coverage {:.3} (the median tick after the first {median:.3}), {} windows, attach+detach {:.0} us a window",
        steady.len(),
        err * 100.0,
        s.stage_counts[&StageName::DevQueue],
        coverage,
        sampling.windows,
        sampling.switch_ns_per_window().unwrap_or(0.0) / 1e3
    );
    // The windows' edges are known to within the attach and detach calls: when those take more
    // than a few percent of the windows (tens of ms each where the kernel is emulated: 132 ms a
    // window against ~121 ms covered in a 5.10 guest under TCG, the estimate 35% low), the run
    // says the estimates are uncertain by that share instead of being held to the tolerance.
    let switch_share = sampling.switch_share();
    let slow = s
        .warnings
        .iter()
        .find(|w| w.starts_with("attaching and detaching the sampled device-stage programs took"));
    eprintln!(
        "attach+detach {:.1}% of the windows' time; warning: {slow:?}",
        switch_share * 100.0
    );
    if switch_share <= SLOW_SWITCH_SHARE {
        assert!(slow.is_none(), "{:?}\n{ctx}", s.warnings);
        assert!(
            err.abs() <= STEADY_TOLERANCE,
            "estimate {est} against {exact} over {steady:?}: {:+.1}% (tolerance {:.0}%)\n{ctx}",
            err * 100.0,
            STEADY_TOLERANCE * 100.0
        );
    } else {
        assert!(
            slow.is_some(),
            "no warning of the slow attaches ({:.1}% of the windows' time): {:?}\n{ctx}",
            switch_share * 100.0,
            s.warnings
        );
    }
    let run_ratio = s.stage_counts[&StageName::DevQueue] as f64 / sent as f64;
    assert!(
        (0.5..1.5).contains(&run_ratio),
        "the run's estimate is of the packets' order: {run_ratio}\n{ctx}"
    );

    // The kernel's own run counts for the same run: the windowed programs ran for a fraction
    // of the packets (on lo, every probe and every ICMP reply to it passes dev_queue: twice the
    // packets when exact), while net_dev_start_xmit, which the drops need, ran for each.
    let bpf = s
        .cost
        .bpf
        .as_ref()
        .unwrap_or_else(|| panic!("no BPF statistics\n{ctx}"));
    let runs = |name: &str| bpf.programs.iter().find(|p| p.name == name).map_or(0, |p| p.runs);
    let (queue, xmit, start) = (
        runs("netdev.on_dev_queue"),
        runs("netdev.on_dev_xmit"),
        runs("netdev.on_dev_start_xmit"),
    );
    eprintln!("runs: on_dev_queue {queue}, on_dev_xmit {xmit}, on_dev_start_xmit {start}, packets {sent}");
    assert!(
        queue > 0 && xmit > 0,
        "the windows counted: {queue} {xmit}\n{ctx}"
    );
    assert!(
        (queue as f64) < 0.5 * sent as f64 && (xmit as f64) < 0.5 * sent as f64,
        "device programs ran {queue} and {xmit} times for {sent} packets\n{ctx}"
    );
    assert!(
        start >= sent,
        "net_dev_start_xmit stays attached: {start} runs\n{ctx}"
    );
    test.assert_released("the sampled run");
}

/// Behind a tbf that holds packets (a sender slightly faster than the bucket), packets are
/// queued at `net_dev_queue` and sent by a later dequeue, often outside the window their
/// queueing was in (or queued outside one and sent inside): `net_dev_start_xmit` then finds no
/// valid note (`dev_note_gen` bumped at each detach) and looks the owner up, so every probe that
/// reached the closed port in the target namespace is still the family's expected drop, and the
/// qdisc's drops are the family's loss as `tc` counts them.
#[test]
fn behind_a_queue_the_drops_stay_exact_across_the_windows() {
    let test = privileged();
    let lab = TestLab::new(Some(scanprof::netlab::TbfConfig {
        rate: "1500kbit".into(),
        burst: "4kb".into(),
        limit: "30kb".into(),
    }));
    // 2,000 pps of 106-byte frames is 1.7 Mbit/s into a 1.5 Mbit/s bucket: the queue fills
    // and holds packets for the rest of the send (a few may be dropped when it is full)
    const N: u64 = 12_000;
    let sender = sender_argv(&lab.to(9), 2000.0, N, 15.0, &["--pacer", "sleep"]);
    let mut args: Vec<String> = [
        "run",
        "--json",
        "--duration",
        "60",
        "--device-stages",
        "sampled",
        "--",
    ]
    .map(String::from)
    .to_vec();
    // the family stays 1 s after the sender: the queue (30 kB, ~0.2 s at the bucket's rate)
    // drains while scanprof is attached, so every probe has met its fate by the run's end
    let script = format!("{} 1>&2; sleep 1", sh_join(&sender));
    let family = ["sh".to_string(), "-c".into(), script];
    args.extend(in_netns(&lab.lab.sender_ns, &family));
    let run = Proc::scanprof(&args).finish(RUN_TIMEOUT);
    run.assert_success();
    let root = lab.drained_root_qdisc();
    let no_ports = scanprof::lab::truth::snmp(&lab.lab.target_ns)
        .and_then(|t| scanprof::lab::truth::snmp_counter(&t, "Udp", "NoPorts"))
        .expect("the target's Udp NoPorts");
    let sent = run.sender_report()["sent"].as_u64().expect("the sender's `sent`");
    let s = run.summary();
    let ctx = run.context();
    assert!(s.device_sampling.is_some(), "{ctx}");
    assert_eq!(s.stage_counts[&StageName::SyscallPackets], sent, "{ctx}");
    let sum = |f: &dyn Fn(&scanprof::analysis::DropRow) -> bool| -> u64 {
        s.drops.iter().filter(|d| f(d)).map(|d| d.count).sum()
    };
    // Without drop reasons (before 5.17): the closed port's drops are NOT_SPECIFIED at
    // __udp4_lib_rcv, the qdisc's NOT_SPECIFIED at kfree_skb_list (where 5.10's __dev_xmit_skb
    // frees what its qdisc dropped), both classed as the family's loss.
    let reasons = kernel_has_drop_reasons();
    let closed_port = |d: &scanprof::analysis::DropRow| {
        lab.at(scanprof::netlab::Side::Target, d) && is_closed_port_drop(d, reasons)
    };
    let expected = sum(&closed_port);
    let qdisc = sum(&|d| {
        d.class == DropClass::TargetLoss
            && if reasons {
                d.reason == "QDISC_DROP"
            } else {
                d.reason == "NOT_SPECIFIED" && d.location.starts_with("kfree_skb_list")
            }
    });
    let misread_rows: Vec<_> = s
        .drops
        .iter()
        .filter(|d| lab.inside(d) && matches!(d.class, DropClass::ReplySide | DropClass::Unrelated))
        .collect();
    let misread: u64 = misread_rows.iter().map(|d| d.count).sum();
    let closed_port_reason = if reasons { "NO_SOCKET" } else { "NOT_SPECIFIED" };
    let no_socket_elsewhere = sum(&|d| d.reason == closed_port_reason && !closed_port(d));
    let h = &s.health;
    let (hits, undelivered) = (
        h.drop_hits
            .expect("perf's count of kfree_skb (root may always open it)"),
        h.drops_undelivered.expect("the drops the kernel did not deliver"),
    );
    eprintln!(
        "behind a tbf: sent {sent}, expected at the target {expected}, qdisc drops {qdisc} (tc {}), \
         other rows in the lab {misread}, unmatched on the family's path {}; requeues {}; target's \
         Udp NoPorts {no_ports}; kfree_skb hits {hits}, program runs {}, undelivered {undelivered} \
         (scanprof's {closed_port_reason} elsewhere {no_socket_elsewhere})",
        root.drops, h.unmatched_on_path, root.requeues, h.drop_runs
    );
    // A family packet shown as somebody else's is one scanprof could not match to a packet the
    // family sent, and it says how many (a packet whose net_dev_start_xmit run the kernel
    // skipped was never marked): every such row is declared, and there are few.
    assert_eq!(
        misread, h.unmatched_on_path,
        "the family's packets read as somebody else's in the lab, against those scanprof declared \
         unmatched: {misread_rows:#?}\n{ctx}"
    );
    assert!(
        h.unmatched_on_path <= UNMATCHED_BOUND,
        "{} packets on the family's path matched none it sent\n{ctx}",
        h.unmatched_on_path
    );
    assert_eq!(qdisc, root.drops, "the qdisc's drops as tc counts them\n{ctx}");
    // The kernel's own counters: every probe was dropped at the qdisc or met the closed port.
    assert_eq!(
        no_ports + root.drops,
        sent,
        "the kernel's counters of the lab\n{ctx}"
    );
    // Every closed-port drop at the target is in the expected row, or among the unmatched, or
    // among the drops the kernel did not give scanprof's program, which perf's count of the
    // tracepoint shows (a stale note's headers would misread a packet at every window's edge, and
    // a windowed net_dev_start_xmit nine in ten).
    let missing = no_ports
        .checked_sub(expected + misread)
        .unwrap_or_else(|| panic!("more closed-port drops than the target's NoPorts {no_ports}\n{ctx}"));
    assert!(
        missing <= undelivered,
        "{missing} of the target's {no_ports} closed-port drops are in no row, and scanprof says \
         {undelivered} were not delivered; the drop rows: {:#?}\n{ctx}",
        s.drops
    );
    // The undelivered figure is perf's count less the program's runs, never more than the hits.
    assert!(
        undelivered <= hits && h.drop_runs >= hits - undelivered,
        "{h:?}\n{ctx}"
    );
    test.assert_released("the sampled run behind a tbf");
    lab.destroy();
}

/// The stage counts of one tick record: (name, count).
fn tick_stages(t: &serde_json::Value) -> Vec<(StageName, u64)> {
    t["stages"]
        .as_array()
        .expect("stages")
        .iter()
        .map(|st| {
            (
                st["name"].as_str().expect("name").parse().expect("a stage"),
                st["count"].as_u64().expect("count"),
            )
        })
        .collect()
}

/// `scanprof run --json --interval 1 FLAGS` over the reference sender at RATE to the closed
/// port on loopback, `count` packets, which it must have sent.
fn loopback_run(flags: &[&str], count: u64) -> (Finished, u64) {
    let sender = sender_argv("127.0.0.1:9", RATE as f64, count, 20.0, &["--pacer", "sleep"]);
    let run = scanprof_run(flags, sender);
    let sent = run.sender_report()["sent"].as_u64().expect("the sender's `sent`");
    assert_eq!(sent, count, "the sender sent its count\n{}", run.context());
    (run, sent)
}

/// `scanprof run --json --duration 60 --interval 1 FLAGS -- COMMAND`, which must succeed.
fn scanprof_run(flags: &[&str], command: Vec<String>) -> Finished {
    let mut args: Vec<String> = ["run", "--json", "--duration", "60", "--interval", "1"]
        .iter()
        .chain(flags)
        .chain(&["--"])
        .map(|a| a.to_string())
        .collect();
    args.extend(command);
    let run = Proc::scanprof(&args).finish(RUN_TIMEOUT);
    run.assert_success();
    run
}

/// A tick's rate at the syscall stage, packets a second.
fn syscall_pps(t: &serde_json::Value) -> f64 {
    t["stages"]
        .as_array()
        .expect("stages")
        .iter()
        .find(|st| st["name"] == "syscall_packets")
        .and_then(|st| st["pps"].as_f64())
        .expect("the syscall stage's pps")
}

/// `--device-stages auto` (issue 32 item 3, "chosen automatically above a rate"): the device
/// stages are counted exactly until a tick in which the family sends faster than
/// `--sample-above`, then sampled, and the run says when and why; the ticks before keep exact
/// counts and the syscall stage and drops stay exact throughout.
#[test]
fn auto_counts_the_device_stages_until_the_rate_passes_its_limit_then_samples() {
    let test = privileged();
    // 5,000 pps against a limit of 2,000: sampling begins at the first tick that sent a
    // second's worth at that rate (the sender may start late in the first one)
    let (run, sent) = loopback_run(&["--device-stages", "auto", "--sample-above", "2000"], COUNT);
    let s = run.summary();
    let ctx = run.context();
    assert_eq!(s.stage_counts[&StageName::SyscallPackets], sent, "{ctx}");
    let closed = closed_port_drops(&s);
    assert_eq!(
        closed, sent,
        "every probe is the family's drop at the closed port\n{ctx}"
    );

    let sampling = s
        .device_sampling
        .unwrap_or_else(|| panic!("the run sampled, and says so: no device_sampling\n{ctx}"));
    let auto = sampling
        .auto
        .unwrap_or_else(|| panic!("the run says when and why sampling began: {sampling:?}\n{ctx}"));
    assert_eq!(auto.above_pps, 2000.0, "{ctx}");
    assert!(
        auto.pps > 2000.0 && auto.pps < 2.0 * RATE as f64,
        "{auto:?}\n{ctx}"
    );
    assert!(
        sampling.label().starts_with("counted for ") && sampling.label().contains("--sample-above 2000"),
        "{}",
        sampling.label()
    );

    // The ticks: exact (no device_sampling) up to the switch, sampled after it. An exact tick's
    // dev_queue is its syscall count but for the packets sent between the collector's reads of
    // the two maps (more when a loaded machine preempts the collector between them); the whole
    // run's exact equality is the next test's.
    let ticks = run.of_type("sample");
    let first_sampled = ticks
        .iter()
        .position(|t| !t["device_sampling"].is_null())
        .unwrap_or_else(|| panic!("no tick sampled\n{ctx}"));
    assert!(first_sampled >= 1, "the first tick is counted exactly\n{ctx}");
    for (before, t) in ticks[first_sampled..].iter().zip(&ticks[first_sampled + 1..]) {
        assert!(
            !t["device_sampling"].is_null() || syscall_pps(before) <= 2000.0,
            "once sampling, a tick is counted whole only after one at most at the limit\n{ctx}"
        );
    }
    let (mut exact_syscall, mut exact_queue) = (0, 0);
    for t in &ticks[..first_sampled] {
        let c = tick_stages(t);
        exact_syscall += stage(&c, StageName::SyscallPackets);
        exact_queue += stage(&c, StageName::DevQueue);
    }
    assert!(
        exact_syscall > 0,
        "packets were counted exactly before the switch\n{ctx}"
    );
    assert!(
        exact_queue.abs_diff(exact_syscall) <= 2 + exact_syscall / 50,
        "the exact ticks' dev_queue {exact_queue} against their syscall packets {exact_syscall}\n{ctx}"
    );
    eprintln!(
        "auto: sampling began after {:.2} s at {:.0} pps (limit {}), {} ticks exact ({exact_syscall} \
         packets), {} sampled; the run's dev_queue {} for {sent} sent; {}",
        auto.exact_ns as f64 / 1e9,
        auto.pps,
        auto.above_pps,
        first_sampled,
        ticks.len() - first_sampled,
        s.stage_counts[&StageName::DevQueue],
        sampling.label()
    );
    // The run's dev_queue: exact part plus estimates (held to the estimate test's tolerance
    // when the windows' edges are known well, else the run warns).
    let err = s.stage_counts[&StageName::DevQueue] as f64 / sent as f64 - 1.0;
    if sampling.switch_share() <= SLOW_SWITCH_SHARE {
        assert!(err.abs() <= STEADY_TOLERANCE, "dev_queue {err:+.3} off\n{ctx}");
    } else {
        assert!(
            s.warnings
                .iter()
                .any(|w| w.starts_with("attaching and detaching the sampled device-stage programs took")),
            "{:?}\n{ctx}",
            s.warnings
        );
    }
    assert!(
        s.verdicts
            .iter()
            .any(|v| v.cause == Cause::NotJudgedHere && v.sentence.contains("device stages were sampled")),
        "the diagnosis says what it did not judge: {:?}",
        s.verdicts
    );
    test.assert_released("the auto run that sampled");
}

/// `--device-stages auto` follows the rate both ways: a family that sends fast, then slowly,
/// has its device stages sampled while fast and counted whole again once a tick was at or below
/// `--sample-above`, and the run says for how long each.
#[test]
fn auto_counts_whole_again_once_the_rate_falls_to_its_limit() {
    let test = privileged();
    const FAST: u64 = 15_000; // 3 s at RATE (5,000 pps), above the limit of 2,000
    const SLOW: u64 = 2_500; // 5 s at 500 pps
    let fast = sender_argv("127.0.0.1:9", RATE as f64, FAST, 20.0, &["--pacer", "sleep"]);
    let slow = sender_argv("127.0.0.1:9", 500.0, SLOW, 20.0, &["--pacer", "sleep"]);
    let script = format!("{} && exec {}", fast.join(" "), slow.join(" "));
    let run = scanprof_run(
        &["--device-stages", "auto", "--sample-above", "2000"],
        vec!["sh".into(), "-c".into(), script],
    );
    let s = run.summary();
    let ctx = run.context();
    let sent: u64 = run
        .sender_reports()
        .iter()
        .map(|r| r["sent"].as_u64().expect("a sender's `sent`"))
        .sum();
    assert_eq!(sent, FAST + SLOW, "both senders sent their counts\n{ctx}");
    assert_eq!(s.stage_counts[&StageName::SyscallPackets], sent, "{ctx}");
    assert_eq!(
        closed_port_drops(&s),
        sent,
        "every probe is the family's drop\n{ctx}"
    );

    // The ticks: sampled while fast, then, from the tick after one at or below the limit, counted
    // whole (no device_sampling), each one's dev_queue its syscall packets.
    let ticks = run.of_type("sample");
    let first_sampled = ticks
        .iter()
        .position(|t| !t["device_sampling"].is_null())
        .unwrap_or_else(|| panic!("no tick sampled while the family sent 5,000 pps\n{ctx}"));
    let whole: Vec<&serde_json::Value> = ticks[first_sampled..]
        .iter()
        .skip_while(|t| !t["device_sampling"].is_null())
        .collect();
    assert!(
        whole.len() >= 2,
        "the slow phase's ticks are counted whole again: {} of {} after the first sampled\n{ctx}",
        whole.len(),
        ticks.len() - first_sampled
    );
    for t in &whole {
        assert!(t["device_sampling"].is_null(), "whole from then on: {t}\n{ctx}");
        let c = tick_stages(t);
        let (syscall, queue) = (
            stage(&c, StageName::SyscallPackets),
            stage(&c, StageName::DevQueue),
        );
        assert!(
            queue.abs_diff(syscall) <= 2 + syscall / 50,
            "a tick counted whole: dev_queue {queue}, syscall packets {syscall}\n{ctx}"
        );
    }

    let sampling = s
        .device_sampling
        .unwrap_or_else(|| panic!("the run sampled, and says so\n{ctx}"));
    assert!(sampling.auto.is_some(), "{sampling:?}\n{ctx}");
    assert!(
        sampling.whole_ns >= 2_000_000_000 && sampling.elapsed_ns >= 1_000_000_000,
        "{sampling:?}\n{ctx}"
    );
    assert!(
        sampling.label().contains(" counted whole, scaled"),
        "{}",
        sampling.label()
    );
    let err = s.stage_counts[&StageName::DevQueue] as f64 / sent as f64 - 1.0;
    if sampling.switch_share() <= SLOW_SWITCH_SHARE {
        assert!(err.abs() <= STEADY_TOLERANCE, "dev_queue {err:+.3} off\n{ctx}");
    }
    eprintln!(
        "auto both ways: {} ticks, sampled from tick {first_sampled}, {} counted whole after; the \
         run's dev_queue {} for {sent} sent; {}",
        ticks.len(),
        whole.len(),
        s.stage_counts[&StageName::DevQueue],
        sampling.label()
    );
    test.assert_released("the auto run that went back to counting");
}

/// Below its limit, `--device-stages auto` is exact mode: no sampling said, every stage counted.
#[test]
fn auto_below_its_limit_counts_every_packet() {
    let test = privileged();
    let (run, sent) = loopback_run(&["--device-stages", "auto", "--sample-above", "1000000"], 10_000);
    let s = run.summary();
    let ctx = run.context();
    assert_eq!(s.device_sampling, None, "{ctx}");
    assert!(
        run.of_type("sample")
            .iter()
            .all(|t| t["device_sampling"].is_null()),
        "{ctx}"
    );
    assert_eq!(s.stage_counts[&StageName::SyscallPackets], sent, "{ctx}");
    assert_eq!(
        s.stage_counts[&StageName::DevQueue],
        sent,
        "every packet counted at dev_queue\n{ctx}"
    );
    assert!(
        !s.verdicts
            .iter()
            .any(|v| v.cause == Cause::NotJudgedHere && v.sentence.contains("device stages were sampled")),
        "{:?}",
        s.verdicts
    );
    test.assert_released("the auto run that stayed exact");
}
