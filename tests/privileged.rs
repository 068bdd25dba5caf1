//! Privileged end-to-end tests: the scanprof binary profiling the reference sender in private
//! network-namespace labs, every figure checked against an independent count (the lab's UDP
//! receiver, tc, ip -s link, bpftrace, the sender's own report, or a known fixture count).
//!
//! They need root (BPF, namespaces) and fail, never skip, without it: CI runs them as root.
//! Traffic goes only into labs these tests create, every send is bounded in count and time,
//! and the tests run one at a time (`common::serial`), since tracepoints are global and rates
//! are measured on a small machine.
//!
//! Run: `cargo test --test it privileged:: -- --test-threads=2`

use crate::common;

use std::process::Command;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::Value;

use common::*;
use scanprof::analysis::{EndReason, Summary};
use scanprof::collect::DropClass;
use scanprof::netlab::{Side, SinkReport, TbfConfig};

/// UDP port of the lab receiver.
const PORT: u16 = 9000;
/// A port nobody listens on in the target namespace.
const CLOSED_PORT: u16 = 9;
/// Longest any scanprof process of these tests may run: longer than a run's --duration (both
/// stretched by SCANPROF_TEST_PATIENCE), so that a run ends by itself before the test ends it.
const RUN_TIMEOUT: Duration = Duration::from_secs(45);
/// A run's --duration: a bound on runs whose family ends first, stretched in slow VMs
/// (scripts/kernel-matrix), where the launched sender can take most of 30 s to start.
const RUN_DURATION: Duration = Duration::from_secs(30);

fn strings<const N: usize>(a: [&str; N]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

/// `scanprof run --json --duration 30 [extra...] -- argv...` (the duration stretched by
/// SCANPROF_TEST_PATIENCE)
fn run_args(extra: &[&str], argv: &[String]) -> Vec<String> {
    let mut v = strings(["run", "--json", "--duration"]);
    v.push(patience(RUN_DURATION).as_secs().to_string());
    v.extend(extra.iter().map(|s| s.to_string()));
    v.push("--".into());
    v.extend(argv.iter().cloned());
    v
}

/// The command line `scanprof run` launches for `argv` in the lab's sender namespace:
/// `ip netns exec NS sh -c 'exec "$@" 1>&2' sh argv...`. The shell execs the sender in the same
/// process (so the launched pid is the sender's), with its stdout on stderr: a command's stdout
/// is scanprof's stdout, and output written while scanprof writes an NDJSON line can end up
/// inside that line (see `ndjson_lines_stay_whole_when_the_command_prints`).
fn launched_in(lab: &TestLab, argv: &[String]) -> Vec<String> {
    let mut v = strings(["sh", "-c", "exec \"$@\" 1>&2", "sh"]);
    v.extend(argv.iter().cloned());
    in_netns(&lab.lab.sender_ns, &v)
}

fn receiver_pps(rx: &SinkReport) -> f64 {
    rx.pps()
        .unwrap_or_else(|| panic!("the receiver got too few packets: {rx:?}"))
}

/// The pids of the threads that sent packets.
fn sending_pids(s: &Summary) -> Vec<u32> {
    let mut pids: Vec<u32> = s
        .threads
        .iter()
        .filter(|t| t.packets > 0)
        .map(|t| t.pid)
        .collect();
    pids.sort();
    pids.dedup();
    pids
}

/// Common checks on a sender process in `processes`: it ran the scanprof binary and exited 0.
#[track_caller]
fn assert_sender_process(s: &Summary, pid: u32) -> &scanprof::collect::family::ProcessInfo {
    let p = s
        .processes
        .iter()
        .find(|p| p.pid == pid)
        .unwrap_or_else(|| panic!("pid {pid} missing from processes: {:?}", s.processes));
    assert_eq!(p.exe, scanprof_exe(), "exe of the sender {p:?}");
    assert_eq!(p.comm, "scanprof", "{p:?}");
    p
}

/// The runs of scanprof's programs the kernel skipped are counted where the kernel counts them
/// (recursion_misses, Linux 5.12 and later), with a warning naming the programs when there are
/// any; an older kernel's summary says it cannot count them.
fn assert_skipped_runs_are_counted_or_said(s: &Summary) {
    let counts = kernel_version().is_some_and(|v| v >= (5, 12));
    let said = |start: &str| s.warnings.iter().any(|w| w.starts_with(start));
    eprintln!("skipped runs: {:?}", s.health.skipped_runs);
    match s.health.skipped_runs {
        Some(n) => {
            assert!(counts, "a kernel before 5.12 counted {n} skipped runs");
            assert_eq!(
                n > 0,
                said(&format!("the kernel skipped {n} runs")),
                "{:?}",
                s.warnings
            );
        }
        None => {
            assert!(!counts, "the summary has no count of the runs the kernel skipped");
            assert!(
                said("this kernel does not count the runs of scanprof's programs it skips"),
                "{:?}",
                s.warnings
            );
        }
    }
}

// 1. ------------------------------------------------------------------------------------------

/// `run` launches the sender: scanprof counts exactly the packets the receiver got, at the
/// receiver's rate, and names the launched process and its executable.
#[test]
fn launch_counts_every_packet_at_the_receivers_rate() {
    let test = privileged();
    let lab = TestLab::new(None);
    let sink = lab.sink(PORT);
    const RATE: f64 = 2000.0;
    // 2 s of packets; under an emulator (SCANPROF_TEST_PATIENCE) longer, so that the delivery
    // delay of the first and last packets (~10 ms there) stays small against the window.
    let send_s = patience(Duration::from_secs(2)).as_secs_f64();
    let count = (RATE * send_s) as u64;

    // The tsc pacer: it calibrates (sleeping 100 ms) before its first packet.
    let sender = sender_argv(&lab.to(PORT), RATE, count, send_s + 3.0, &["--pacer", "tsc"]);
    let args = run_args(&["--requested", "2000"], &launched_in(&lab, &sender));
    let run = Proc::scanprof(&args).finish(RUN_TIMEOUT);
    let rx = stop_sink(sink);

    run.assert_success();
    assert_all_probes_attached(&run.started());
    let root = root_pid(&run.started());
    let s = run.summary();
    let sent = run.sender_report();
    eprintln!(
        "launch: scanprof {} packets at {:.2} pps; receiver {} packets at {:.2} pps; sender says {} at {:.2}",
        s.packets,
        s.achieved_pps,
        rx.packets,
        receiver_pps(&rx),
        sent["sent"],
        sent["achieved_pps"]
    );

    assert_eq!(s.end_reason, EndReason::FamilyExited);
    assert_eq!(s.requested_pps, Some(RATE));
    assert_skipped_runs_are_counted_or_said(&s);
    // The fixture: the sender sent COUNT and the quiet lab delivered them all.
    assert_eq!((u64_of(&sent, "sent"), u64_of(&sent, "failed")), (count, 0));
    assert_eq!(rx.packets, count, "the lab lost packets: {rx:?}");
    assert_eq!(s.packets, rx.packets, "scanprof's packets vs the receiver's");
    assert_eq!(s.failed_calls, 0);
    assert_within(
        "achieved_pps vs the receiver's pps",
        s.achieved_pps,
        receiver_pps(&rx),
        cross_clock(0.01),
    );

    // `ip netns exec` execs the sender in the launched process: one process, scanprof's binary.
    assert_eq!(s.processes.len(), 1, "{:?}", s.processes);
    let p = assert_sender_process(&s, root);
    assert!(p.root && !p.alive, "{p:?}");
    assert_eq!(p.exit_code, Some(0), "{p:?}");
    assert_eq!(sending_pids(&s), vec![root]);

    // The sender's budget over its own send window: as long as the window, and without the
    // 100 ms the tsc pacer sleeps calibrating before its first packet, which the whole-run
    // budget has.
    assert_eq!(sent["pacer"], "tsc", "{sent}");
    let t = &s.threads[0];
    let window = t.send_window_budget.expect("a send-window budget");
    let window_ns = s.send_window_s * 1e9;
    eprintln!(
        "whole-run budget {:?}\nsend-window budget {window:?}\ncontext switches the kernel gave no program: {}, unplaced {} ns",
        t.budget, s.health.missed_switches, s.health.unplaced_ns
    );
    // The budget covers the window, less at most the time the run says it could not place (a
    // context switch no program was given: on this project's 6.18 guests, every switch away
    // from a thread of the sandbox's pid 1).
    let total = window.total_ns() as f64;
    assert!(
        total <= window_ns * 1.01 && total >= window_ns * 0.99 - s.health.unplaced_ns as f64,
        "the send-window budget ({total} ns) covers the send window ({window_ns} ns) less the \
         unplaced {} ns, within 1%",
        s.health.unplaced_ns
    );
    if s.health.unplaced_ns > 0 {
        let said = format!(
            "the kernel gave scanprof no event for {} context switches",
            s.health.missed_switches
        );
        assert!(
            s.warnings.iter().any(|w| w.starts_with(&said)),
            "{:?}",
            s.warnings
        );
    }
    let calibration_sleep = t.budget.sleep_ns.saturating_sub(window.sleep_ns);
    assert!(
        calibration_sleep >= 95_000_000,
        "the calibration's sleep should lie outside the window: {calibration_sleep} ns"
    );

    drop(run);
    test.assert_released("scanprof run");
    lab.destroy();
}

// 2. ------------------------------------------------------------------------------------------

/// `attach -p` to a sender that is already running: the rate scanprof measures over its window
/// equals the receiver's over the same packets, and its count fits what the receiver got while
/// scanprof was running.
///
/// The sender sends until this test ends it by pid once scanprof has ended (an 8 s count-bound
/// send ended first beside a CPU hog at load ~13, scanprof taking 8.1 s). The receiver's rate is
/// taken over the packets scanprof counted: `s.packets` arrivals from the first at or after
/// scanprof's first counted send (CLOCK_MONOTONIC: `started`'s clock plus `first_send_s`), not
/// over a window this test timed around the run, which under load began and ended at other
/// moments than scanprof's sends.
#[test]
fn attach_to_a_running_sender_measures_the_receivers_rate() {
    let test = privileged();
    let lab = TestLab::new(None);
    let sink = lab.sink_keeping_arrivals(PORT);
    const RATE: f64 = 2000.0;

    // Bounds only (the test ends it): 60 s. scanprof attaches after ~0.5 s of it for 2 s.
    let argv = sender_argv(&lab.to(PORT), RATE, 120_000, 60.0, &[]);
    let mut sender = Proc::spawn("sender", lab.lab.command_in_sender(&argv[0], &argv[1..]), false);
    let deadline = Instant::now() + patience(Duration::from_secs(5));
    while sink.packets_so_far() == 0 {
        assert!(Instant::now() < deadline, "the sender sent nothing within 5 s");
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(500));

    let before = sink.packets_so_far();
    let pid = sender.pid().to_string();
    let attach = Proc::scanprof(&strings([
        "attach",
        "-p",
        &pid,
        "--json",
        "--duration",
        "2",
        "--requested",
        "2000",
    ]));
    let run = attach.finish(RUN_TIMEOUT);
    let after = sink.packets_so_far();
    assert!(sender.running(), "the sender ended before scanprof did");
    sender.signal(Signal::SIGTERM);
    let sender = sender.finish(Duration::from_secs(15));
    let rx = stop_sink(sink);

    run.assert_success();
    sender.assert_success();
    assert_all_probes_attached(&run.started());
    let s = run.summary();
    let attach_ns = u64_of(&run.started()["clocks"], "monotonic_ns");
    let first_send_ns = attach_ns + (s.first_send_s.expect("scanprof counted a send") * 1e9) as u64;
    let rx_same = rx.pps_from(first_send_ns, s.packets).unwrap_or_else(|| {
        panic!(
            "fewer than {} packets arrived from scanprof's first send on",
            s.packets
        )
    });
    eprintln!(
        "attach: scanprof {} packets in {:.3} s at {:.2} pps; receiver {:.2} pps over the same \
         packets, {:.2} pps over the whole send",
        s.packets,
        s.duration_s,
        s.achieved_pps,
        rx_same,
        receiver_pps(&rx)
    );

    assert_eq!(s.end_reason, EndReason::Duration);
    assert_eq!(root_pid(&run.started()), sender.pid);
    let p = assert_sender_process(&s, sender.pid);
    assert!(
        p.root && p.alive,
        "the sender was still running at the end: {p:?}"
    );
    assert_eq!(sending_pids(&s), vec![sender.pid]);
    assert_eq!(
        rx.packets,
        u64_of(&sender.sender_report(), "sent"),
        "the receiver's count against the sender's"
    );

    assert_within(
        "achieved_pps vs the receiver's pps over the packets scanprof counted",
        s.achieved_pps,
        rx_same,
        0.01,
    );
    // It counted only packets sent while attached: no more than the receiver got meanwhile...
    assert!(
        s.packets <= after - before,
        "scanprof counted {} packets, the receiver got only {} while scanprof ran",
        s.packets,
        after - before
    );
    // ...and every one sent between its first and last counted send: as many as arrived between
    // those two moments, give or take the packet at each end (each arrives a little after its
    // send's syscall entry, which is what scanprof times).
    let last_send_ns = attach_ns + (s.last_send_s.expect("scanprof counted a send") * 1e9) as u64;
    let arrived = rx
        .arrivals
        .iter()
        .filter(|&&t| (first_send_ns..=last_send_ns).contains(&t))
        .count() as u64;
    assert!(
        s.packets + 1 >= arrived && s.packets <= arrived + 1,
        "scanprof counted {} sends from its first to its last, the receiver got {arrived} then",
        s.packets
    );

    drop(run);
    test.assert_released("scanprof attach");
    lab.destroy();
}

// 3. ------------------------------------------------------------------------------------------

/// The shell script for a parent that forks a child which sends: the child prints its pid and
/// execs the sender; `; echo done` keeps the parent from exec'ing the child itself. Launched by
/// `scanprof run`, everything goes to stderr (see `launched_in`); to be attached to, it waits
/// for a line on stdin before it forks.
fn forking_script(sender: &[String], launched: bool) -> String {
    let child = format!("echo child=$$; exec {}", sh_join(sender));
    format!(
        "{}echo sh=$$; {}sh -c {}; echo done",
        if launched { "exec 1>&2; " } else { "" },
        if launched { "" } else { "read go; " },
        sh_quote(&child)
    )
}

/// `run` of a shell that forks the sender: the child appears in `processes` with the shell as
/// its parent, and its packets are counted.
#[test]
fn run_follows_a_forked_child_and_counts_its_packets() {
    let test = privileged();
    let lab = TestLab::new(None);
    let sink = lab.sink(PORT);
    const COUNT: u64 = 1500;

    // 1.5 s of packets, bounded by 5 s (stretched in slow VMs, where the sender needs longer).
    let bound_s = patience(Duration::from_secs(5)).as_secs_f64();
    let sender = sender_argv(&lab.to(PORT), 1000.0, COUNT, bound_s, &[]);
    let sh = strings(["sh", "-c"])
        .into_iter()
        .chain([forking_script(&sender, true)])
        .collect::<Vec<_>>();
    let run = Proc::scanprof(&run_args(&[], &in_netns(&lab.lab.sender_ns, &sh))).finish(RUN_TIMEOUT);
    let rx = stop_sink(sink);

    run.assert_success();
    assert_all_probes_attached(&run.started());
    let s = run.summary();
    let (sh_pid, child_pid) = (run.shell_var("sh"), run.shell_var("child"));
    eprintln!(
        "fork (run): sh {sh_pid}, child {child_pid}; scanprof {} packets at {:.2} pps, receiver {} at {:.2} pps",
        s.packets,
        s.achieved_pps,
        rx.packets,
        receiver_pps(&rx)
    );

    assert_eq!(s.end_reason, EndReason::FamilyExited);
    assert_ne!(sh_pid, child_pid);
    assert_eq!(
        root_pid(&run.started()),
        sh_pid,
        "the launched process is the shell"
    );
    let child = assert_sender_process(&s, child_pid);
    assert_eq!(child.ppid, sh_pid, "{child:?}");
    assert!(!child.root, "{child:?}");
    assert_eq!(child.exit_code, Some(0), "{child:?}");
    assert_eq!(sending_pids(&s), vec![child_pid], "the packets are the child's");
    assert!(
        run.stderr_lines.iter().any(|l| l == "done"),
        "the shell did not go on after the child"
    );

    assert_eq!(rx.packets, COUNT);
    assert_eq!(u64_of(&run.sender_report(), "sent"), COUNT);
    assert_eq!(s.packets, rx.packets, "scanprof's packets vs the receiver's");
    assert_within(
        "achieved_pps vs the receiver's pps",
        s.achieved_pps,
        receiver_pps(&rx),
        cross_clock(0.01),
    );

    drop(run);
    test.assert_released("scanprof run");
    lab.destroy();
}

/// `attach` to a shell before it forks the sender (it waits on its stdin, which the test feeds
/// only after scanprof has started): the later child is followed and its packets counted.
#[test]
fn attach_follows_a_child_forked_after_attach() {
    let test = privileged();
    let lab = TestLab::new(None);
    let sink = lab.sink(PORT);
    const COUNT: u64 = 1500;

    let sender = sender_argv(&lab.to(PORT), 1000.0, COUNT, 5.0, &[]);
    let script = [forking_script(&sender, false)];
    let mut parent = Proc::spawn(
        "forking shell",
        lab.lab
            .command_in_sender("sh", &["-c".to_string(), script[0].clone()]),
        true,
    );
    let sh_line = parent.wait_for_line("sh= line", Duration::from_secs(5), |l| l.starts_with("sh="));
    let sh_pid: u32 = sh_line["sh=".len()..].parse().unwrap();
    assert_eq!(sh_pid, parent.pid(), "ip netns exec should exec the shell");

    let mut attach = Proc::scanprof(&strings([
        "attach",
        "-p",
        &sh_pid.to_string(),
        "--json",
        "--duration",
        "20",
    ]));
    let started = attach.wait_for_json("started", Duration::from_secs(15));
    assert_all_probes_attached(&started);
    let at_start: Vec<u64> = started["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["pid"].as_u64().unwrap())
        .collect();
    assert_eq!(
        at_start,
        vec![sh_pid as u64],
        "the shell has no child yet: {started}"
    );
    assert_eq!(sink.packets_so_far(), 0);

    parent.write_stdin("go\n");
    let run = attach.finish(RUN_TIMEOUT);
    let parent = parent.finish(Duration::from_secs(10));
    let rx = stop_sink(sink);

    run.assert_success();
    parent.assert_success();
    let s = run.summary();
    let child_pid = parent.shell_var("child");
    eprintln!(
        "fork (attach): sh {sh_pid}, child {child_pid}; scanprof {} packets at {:.2} pps, receiver {} at {:.2} pps",
        s.packets,
        s.achieved_pps,
        rx.packets,
        receiver_pps(&rx)
    );

    assert_eq!(s.end_reason, EndReason::FamilyExited);
    let child = assert_sender_process(&s, child_pid);
    assert_eq!(child.ppid, sh_pid, "{child:?}");
    assert!(!child.root, "{child:?}");
    assert_eq!(sending_pids(&s), vec![child_pid], "the packets are the child's");

    assert_eq!(rx.packets, COUNT);
    assert_eq!(u64_of(&parent.sender_report(), "sent"), COUNT);
    assert_eq!(s.packets, rx.packets, "scanprof's packets vs the receiver's");
    assert_within(
        "achieved_pps vs the receiver's pps",
        s.achieved_pps,
        receiver_pps(&rx),
        cross_clock(0.01),
    );

    drop(run);
    test.assert_released("scanprof attach");
    lab.destroy();
}

// 4. ------------------------------------------------------------------------------------------

/// bpftrace's own view of QDISC_DROP drops: (pid, function, location address, count), each
/// address named by /proc/kallsyms.
/// The line bpftrace prints after each periodic print of its map, with the time it printed it.
const BPFTRACE_PRINTED: &str = "-- map printed at";

/// The first map bpftrace printed after `after_ns` (CLOCK_MONOTONIC, bpftrace's `nsecs`): its
/// print event follows the time on its marker line, so that map was read after `after_ns`.
fn bpftrace_map_after(bpftrace: &mut Proc, after_ns: u64) -> Vec<(u32, String, u64, u64)> {
    let printed_at = |l: &str| {
        l.strip_prefix(BPFTRACE_PRINTED)
            .and_then(|t| t.trim().parse::<u64>().ok())
    };
    bpftrace.wait_for_line("map printed after the fixture", Duration::from_secs(10), |l| {
        printed_at(l).is_some_and(|t| t > after_ns)
    });
    // The lines of that print: back from its marker to the one before.
    let lines = &bpftrace.lines;
    let end = lines.len() - 1;
    let start = lines[..end]
        .iter()
        .rposition(|l| printed_at(l).is_some())
        .map_or(0, |i| i + 1);
    parse_bpftrace_map(&lines[start..end])
}

fn parse_bpftrace_map(lines: &[String]) -> Vec<(u32, String, u64, u64)> {
    lines
        .iter()
        .filter_map(|l| {
            let (key, count) = l.strip_prefix("@[")?.split_once("]: ")?;
            let (pid, addr) = key.split_once(", ")?;
            let addr = u64::from_str_radix(addr.trim().trim_start_matches("0x"), 16).ok()?;
            // Named here from /proc/kallsyms, not by bpftrace's ksym(): at SIGINT that named
            // each key from kallsyms inside bpftrace, which under an emulator (a 6.12 guest in
            // scripts/kernel-matrix) outlasted the test's 120 s wait once.
            let loc = kallsyms_resolve(addr).unwrap_or_else(|| panic!("{addr:#x} not in /proc/kallsyms"));
            Some((
                pid.trim().parse().ok()?,
                function_of(&loc).to_string(),
                addr,
                count.trim().parse().ok()?,
            ))
        })
        .collect()
}

/// A tbf with a small queue: scanprof's QDISC_DROP rows for the sender add up to tc's drop
/// counter, and their location is where bpftrace, watching the same tracepoint, sees them.
#[test]
fn qdisc_drops_match_tc_and_bpftrace() {
    let test = privileged();
    let lab = TestLab::new(Some(TbfConfig {
        rate: "2mbit".into(),
        burst: "4kb".into(),
        limit: "10kb".into(),
    }));
    let sink = lab.sink(PORT);
    const COUNT: u64 = 10_000;

    // bpftrace watches kfree_skb for QDISC_DROP (its number read from this kernel) on its own.
    // A kernel without drop reasons (before 5.17) has no `reason` field: every drop is counted,
    // and the qdisc's are told by their place, kfree_skb_list (with which 5.10's
    // __dev_xmit_skb frees what its qdisc dropped), as scanprof's NOT_SPECIFIED rows are.
    let reasons = kernel_has_drop_reasons();
    let (reason_name, filter) = if reasons {
        (
            "QDISC_DROP",
            format!("/args->reason == {}/ ", drop_reason_number("QDISC_DROP")),
        )
    } else {
        ("NOT_SPECIFIED", String::new())
    };
    let qdisc_place = |location: &str| reasons || function_of(location) == "kfree_skb_list";
    // Every second bpftrace prints its map, then a line with the time (CLOCK_MONOTONIC) after
    // which it read it: the test reads the first map read after its fixture ended, and does
    // not depend on how long bpftrace takes to tear down at exit (in an emulated guest of
    // scripts/kernel-matrix it outlasted 120 s once, 2026-11-28 22:56 UTC, while in the same guest
    // alone it exits in 4-7 s).
    let script = format!(
        "tracepoint:skb:kfree_skb {filter}{{ @[pid, args->location] = count(); }} \
         interval:s:1 {{ print(@); printf(\"{BPFTRACE_PRINTED} %llu\\n\", nsecs); }}"
    );
    let mut bpftrace = Proc::spawn(
        "bpftrace",
        {
            let mut c = Command::new("bpftrace");
            c.args(["-e", &script]);
            c
        },
        false,
    );
    bpftrace.wait_for_line("`Attaching` line", Duration::from_secs(20), |l| {
        l.starts_with("Attaching")
    });
    std::thread::sleep(Duration::from_millis(500));
    assert!(bpftrace.running(), "bpftrace ended early");

    // 5000 pps x 512 B = 20 Mbit/s into a 2 Mbit/s bucket with a 10 kB queue, for 2 s. The
    // bound (the sender stops at its COUNT, so it costs nothing when the machine keeps up) is
    // stretched in slow VMs (scripts/kernel-matrix), where the sender needs longer for its
    // COUNT (a 6.12 guest on a host at load 9 sent 839 in 20 s); it still sends far above the
    // bucket's rate there.
    let bound_s = patience(Duration::from_secs(15)).as_secs_f64();
    let sender = sender_argv(&lab.to(PORT), 5000.0, COUNT, bound_s, &["--size", "512"]);
    let run =
        Proc::scanprof(&run_args(&["--requested", "5000"], &launched_in(&lab, &sender))).finish(RUN_TIMEOUT);
    let tbf = lab.drained_root_qdisc();
    let rx = stop_sink(sink);
    let seen = bpftrace_map_after(&mut bpftrace, monotonic_ns());
    let bt_printed = std::mem::take(&mut bpftrace.lines);
    bpftrace.stop(Signal::SIGINT, Duration::from_secs(10));

    run.assert_success();
    assert_all_probes_attached(&run.started());
    let s = run.summary();
    let pid = root_pid(&run.started());
    let ours: Vec<_> = s
        .drops
        .iter()
        .filter(|d| lab.at(Side::Sender, d) && d.reason == reason_name && qdisc_place(&d.location))
        .collect();
    let scanprof_drops: u64 = ours.iter().map(|d| d.count).sum();
    let bt_ours: Vec<_> = seen
        .iter()
        .filter(|(p, func, ..)| *p == pid && qdisc_place(func))
        .collect();
    let bt_drops: u64 = bt_ours.iter().map(|e| e.3).sum();
    eprintln!(
        "qdisc: tc dropped {} and sent {}; scanprof {} {reason_name} drops at {:?}; bpftrace {} drops at {:?}; receiver {}",
        tbf.drops,
        tbf.sent_packets,
        scanprof_drops,
        ours.iter().map(|d| &d.location).collect::<Vec<_>>(),
        bt_drops,
        bt_ours
            .iter()
            .map(|e| (&e.1, format!("{:#x}", e.2)))
            .collect::<Vec<_>>(),
        rx.packets
    );

    // The fixture: every packet sent is either dropped by tbf or delivered.
    assert_eq!(tbf.kind, "tbf");
    assert_eq!(u64_of(&run.sender_report(), "sent"), COUNT);
    assert_eq!(s.packets, COUNT);
    assert_eq!(tbf.sent_packets, rx.packets, "{tbf:?} {rx:?}");
    assert_eq!(tbf.drops + rx.packets, COUNT, "{tbf:?} {rx:?}");
    assert!(
        tbf.drops > COUNT / 2,
        "the tbf dropped too little to test with: {tbf:?}"
    );

    // scanprof's count against tc's: the lab's QDISC_DROP drops, all the sender's own loss.
    assert!(
        !ours.is_empty(),
        "no {reason_name} rows of the qdisc on the sender's veth: {:?}",
        s.drops
    );
    assert!(
        ours.iter()
            .all(|d| d.class == DropClass::TargetLoss && d.pid == Some(pid)),
        "{reason_name} drops not the target's loss (pid {pid}): {ours:?}"
    );
    // With or without reasons, the diagnosis names the qdisc.
    assert!(
        s.verdicts
            .iter()
            .any(|v| v.cause == scanprof::analysis::verdict::Cause::QdiscDrop),
        "{:#?}",
        s.verdicts
    );
    assert_within(
        "the qdisc's drops vs tc's drops",
        scanprof_drops as f64,
        tbf.drops as f64,
        0.01,
    );
    let lab_loss: u64 = s
        .drops
        .iter()
        .filter(|d| lab.inside(d) && d.class == DropClass::TargetLoss)
        .map(|d| d.count)
        .sum();
    assert_eq!(
        lab_loss, scanprof_drops,
        "other target_loss rows in the lab: {:?}",
        s.drops
    );

    // Where: bpftrace saw the same drops (same count, so it watched the whole run) at the same
    // kernel address, which /proc/kallsyms names exactly as scanprof does ("function+0xoffset").
    assert!(
        !seen.is_empty(),
        "bpftrace's last map before the fixture's end held no drop\n{}",
        bt_printed.join("\n")
    );
    assert_within(
        "bpftrace's drops vs tc's drops",
        bt_drops as f64,
        tbf.drops as f64,
        0.01,
    );
    let mut bt_locations: Vec<String> = bt_ours
        .iter()
        .map(|(_, _, addr, _)| {
            kallsyms_resolve(*addr).unwrap_or_else(|| panic!("{addr:#x} not in /proc/kallsyms"))
        })
        .collect();
    let mut locations: Vec<String> = ours.iter().map(|d| d.location.clone()).collect();
    bt_locations.sort();
    bt_locations.dedup();
    locations.sort();
    locations.dedup();
    assert_eq!(locations, bt_locations, "scanprof's drop locations vs bpftrace's");

    drop(run);
    test.assert_released("scanprof run");
    lab.destroy();
}

// 5. ------------------------------------------------------------------------------------------

/// Probes to a closed port: every one is an expected NO_SOCKET drop at the target attributed to
/// the sender, as many as the target's veth received, and none is counted as loss.
#[test]
fn closed_port_probes_are_expected_drops_not_loss() {
    let test = privileged();
    let lab = TestLab::new(None);
    const COUNT: u64 = 4000;

    // 2 s of probes, bounded by 5 s (stretched in slow VMs, where the sender needs longer).
    let bound_s = patience(Duration::from_secs(5)).as_secs_f64();
    let sender = sender_argv(&lab.to(CLOSED_PORT), 2000.0, COUNT, bound_s, &[]);
    let run =
        Proc::scanprof(&run_args(&["--requested", "2000"], &launched_in(&lab, &sender))).finish(RUN_TIMEOUT);
    std::thread::sleep(Duration::from_millis(100));
    let target_link = lab
        .lab
        .link(Side::Target)
        .unwrap_or_else(|e| panic!("ip -s link failed: {e:#}"));

    run.assert_success();
    assert_all_probes_attached(&run.started());
    let s = run.summary();
    let pid = root_pid(&run.started());
    // Without drop reasons (before 5.17) the closed port's drops are counted by location only,
    // as NOT_SPECIFIED at __udp4_lib_rcv, and cannot be told from a loss: the drop program
    // classes them as the sender's loss, and the diagnosis says it cannot judge them.
    let reasons = kernel_has_drop_reasons();
    let closed_port = if reasons { "NO_SOCKET" } else { "NOT_SPECIFIED" };
    let ours: Vec<_> = s
        .drops
        .iter()
        .filter(|d| lab.at(Side::Target, d) && d.reason == closed_port)
        .collect();
    let no_socket: u64 = ours.iter().map(|d| d.count).sum();
    eprintln!(
        "closed port: scanprof {} {closed_port} drops ({:?}); target veth received {}; sender sent {}",
        no_socket,
        ours.iter().map(|d| &d.location).collect::<Vec<_>>(),
        target_link.rx_packets,
        run.sender_report()["sent"]
    );

    assert_eq!(u64_of(&run.sender_report(), "sent"), COUNT);
    assert_eq!(s.packets, COUNT);
    // The quiet lab: the target's veth received exactly the probes.
    assert_eq!(target_link.rx_packets, COUNT, "{target_link:?}");
    assert_eq!(
        no_socket, target_link.rx_packets,
        "{closed_port} drops vs the target's received packets"
    );
    if !reasons {
        assert!(
            ours.iter().all(|d| d.location.starts_with("__udp4_lib_rcv")
                && d.class == DropClass::TargetLoss
                && d.pid == Some(pid)),
            "NOT_SPECIFIED drops at the target not at __udp4_lib_rcv, of pid {pid}: {ours:?}"
        );
        assert_closed_port_not_judged(&s, no_socket);
        drop(run);
        test.assert_released("scanprof run");
        lab.destroy();
        return;
    }
    assert!(
        ours.iter()
            .all(|d| d.class == DropClass::Expected && d.pid == Some(pid)),
        "NO_SOCKET drops at the target not expected drops of pid {pid}: {ours:?}"
    );
    // None of the lab's drops is loss. (Rows of other namespaces are left out: scanprof
    // wrongly claims other labs' drops to 10.99.0.2 as the target's, see
    // `drops_in_another_namespace_are_not_the_targets_loss`.)
    let loss: Vec<_> = s
        .drops
        .iter()
        .filter(|d| lab.inside(d) && d.class != DropClass::Expected)
        .collect();
    assert!(loss.is_empty(), "closed-port probes counted as loss: {loss:?}");

    drop(run);
    test.assert_released("scanprof run");
    lab.destroy();
}

// 6. ------------------------------------------------------------------------------------------

/// A small send buffer behind a slow tbf with a deep queue: the sender blocks in sendto.
/// scanprof finds the wait site, shows most of the sender's time blocked, and measures the
/// bottleneck rate the receiver sees.
#[test]
fn blocking_send_is_found_and_measured() {
    let test = privileged();
    // The `blocking` lab scenario: 2000 pps x 1000 B into 2 Mbit/s, 2 MB queue, 16 kB sndbuf.
    let lab = TestLab::new(Some(TbfConfig {
        rate: "2mbit".into(),
        burst: "4kb".into(),
        limit: "2mb".into(),
    }));
    let sink = lab.sink(PORT);
    const RATE: f64 = 2000.0;

    // 5 s: the steady part must be long against the sender's bursts (below). Under an emulator
    // (SCANPROF_TEST_PATIENCE) a tick's collection can take most of the 0.5 s interval, so fewer
    // ticks fit in 5 s: the send lasts longer, and the count limit (never reached: the tbf lets
    // ~250 pps through) with it.
    let send_s = patience(Duration::from_secs(5)).as_secs_f64();
    let sender = sender_argv(
        &lab.to(PORT),
        RATE,
        (RATE * send_s * 2.0) as u64,
        send_s,
        &["--size", "1000", "--sndbuf", "16384"],
    );
    let args = run_args(
        &["--requested", "2000", "--interval", "0.5"],
        &launched_in(&lab, &sender),
    );
    let mut counts = Vec::new();
    let run = Proc::scanprof(&args).finish_polling(RUN_TIMEOUT, || {
        counts.push((monotonic_ns(), sink.packets_so_far()))
    });
    let tbf = lab.drained_root_qdisc();
    let rx = stop_sink(sink);

    run.assert_success();
    assert_all_probes_attached(&run.started());
    let s = run.summary();
    let pid = root_pid(&run.started());
    let sent = run.sender_report();
    let stats = s
        .rate_stats
        .as_ref()
        .expect("no rate_stats: no complete tick inside the send window");
    // scanprof's steady rate: the per-tick achieved_pps of the 0.5 s ticks from 0.5 s after the
    // first packet to 1 s before the end (the first tick with packets holds the start-up burst,
    // the last two the end of the send),
    // weighted by tick length. A blocked sender wakes when half its send buffer has drained and
    // then sends ~8 packets at once, so a window's count is off by up to 8 packets at its ends:
    // over ~4 s (960 packets) that is < 0.9%.
    let samples = run.of_type("sample");
    assert!(
        samples.len() >= 10,
        "{} samples in a {send_s} s send, intervals {:?} s",
        samples.len(),
        samples
            .iter()
            .map(|t| f64_of(t, "interval_s"))
            .collect::<Vec<_>>()
    );
    // The ticks before the first packet (the launched command starting: ~1 s under an emulator)
    // are not part of the send either.
    let first_sending = samples
        .iter()
        .position(|t| f64_of(t, "achieved_pps") > 0.0)
        .expect("no tick with packets");
    assert!(first_sending + 3 < samples.len(), "{} samples", samples.len());
    let middle = &samples[first_sending + 1..samples.len() - 2];
    let steady_s: f64 = middle.iter().map(|t| f64_of(t, "interval_s")).sum();
    let steady_pps = middle
        .iter()
        .map(|t| f64_of(t, "achieved_pps") * f64_of(t, "interval_s"))
        .sum::<f64>()
        / steady_s;
    // The receiver's rate over the same window as those ticks (CLOCK_MONOTONIC: attach plus
    // their t_s), from the test's polls of its count. Over another window the two agree only
    // while the rate is steady: on a loaded emulator (5.10 under TCG) the sender cannot keep
    // the tbf's rate and its rate wanders, and 0.5 s trimmed differently at each end was 10.8%
    // off. A packet reaches the receiver ~the sender's buffer (~16 packets) later, at both ends.
    let attach_ns = run.started()["clocks"]["monotonic_ns"]
        .as_u64()
        .expect("no clocks.monotonic_ns in the started line");
    let at_s = |s: f64| attach_ns + (s * 1e9) as u64;
    let first_tick = &middle[0];
    let window = (
        at_s(f64_of(first_tick, "t_s") - f64_of(first_tick, "interval_s")),
        at_s(f64_of(&middle[middle.len() - 1], "t_s")),
    );
    let rx_steady = rate_between(&counts, window.0, window.1).expect("too few receiver samples");
    let elapsed_ns = u64_of(&sent, "elapsed_ns");
    let blocked_share = s.budget.blocked_send_ns as f64 / s.budget.total_ns() as f64;
    eprintln!(
        "blocking: achieved {:.2} pps (sender says {:.2}) of {RATE}; steady {:.2} pps over {:.1} s \
         (rate_stats mean {:.2} of {} ticks) vs receiver {:.2}; receiver overall {:.2}; \
         blocked {:.3} s = {:.1}% of the budget, sender ran {:.3} s; sites {:?}",
        s.achieved_pps,
        f64_of(&sent, "achieved_pps"),
        steady_pps,
        steady_s,
        stats.mean,
        stats.n,
        rx_steady,
        receiver_pps(&rx),
        s.budget.blocked_send_ns as f64 / 1e9,
        blocked_share * 100.0,
        elapsed_ns as f64 / 1e9,
        s.block_sites
            .iter()
            .map(|b| (&b.wait_site, b.blocked_s))
            .collect::<Vec<_>>()
    );

    // Nothing lost: the sender is slowed down instead.
    assert_eq!(tbf.drops, 0, "{tbf:?}");
    assert_eq!(s.packets, rx.packets, "scanprof's packets vs the receiver's");
    assert_eq!(u64_of(&sent, "sent"), rx.packets);
    assert!(
        s.achieved_pps < 0.25 * RATE,
        "achieved {} pps is not far below the requested {RATE}",
        s.achieved_pps
    );
    // The rate, in steady state, is the bottleneck's, as the receiver sees it.
    assert!(stats.n >= 3, "too few steady ticks: {stats:?}");
    assert!(steady_s > 3.5, "steady window of {steady_s} s");
    assert_within(
        "steady achieved pps vs the receiver's",
        steady_pps,
        rx_steady,
        cross_clock(0.01),
    );
    // Over the whole send window (first to last send) the rate is higher than the receiver's
    // over a short run, for two reasons that fade with the run's length: the first ~16 packets
    // fill the empty socket buffer at once, and scanprof times a send at syscall entry, so the
    // window ends when the last sendto starts waiting (the sender wakes only when half the
    // buffer has drained, ~33 ms here), not when it returns (the sender's own clock). Seen here:
    // 246.2 pps by scanprof, 243.5 by the sender, 240.9 at the receiver, 240.0 steady over 3 s;
    // 243.7, 242.1, 240.5 and 240.0 over 5 s.
    assert_within(
        "achieved_pps vs the sender's own",
        s.achieved_pps,
        f64_of(&sent, "achieved_pps"),
        cross_clock(0.02),
    );
    assert_within(
        "achieved_pps vs the receiver's",
        s.achieved_pps,
        receiver_pps(&rx),
        0.05,
    );

    // Where it waited: the socket send path waiting for send-buffer space.
    let top = s
        .block_sites
        .iter()
        .max_by(|a, b| a.blocked_s.total_cmp(&b.blocked_s))
        .unwrap_or_else(|| panic!("no block_sites: {:?}", s.budget));
    assert_eq!(top.wait_site, "sock_alloc_send_pskb", "{top:?}");
    assert_eq!(top.pid, pid, "{top:?}");
    for frame in ["udp_sendmsg", "__sys_sendto"] {
        assert!(
            top.stack.iter().any(|f| function_of(f) == frame),
            "{frame} not on the blocking stack {:?}",
            top.stack
        );
    }
    // How long: most of the sender's time, by scanprof's budget and by the sender's own clock.
    assert!(
        blocked_share > 0.5,
        "blocked share {blocked_share:.3}: {:?}",
        s.budget
    );
    assert!(
        s.budget.blocked_send_ns as f64 > 0.5 * elapsed_ns as f64,
        "blocked {} ns of the sender's {elapsed_ns} ns",
        s.budget.blocked_send_ns
    );
    let sites_s: f64 = s.block_sites.iter().map(|b| b.blocked_s).sum();
    assert_within(
        "block sites' time vs blocked_send_ns",
        sites_s * 1e9,
        s.budget.blocked_send_ns as f64,
        0.01,
    );

    drop(run);
    test.assert_released("scanprof run");
    lab.destroy();
}

/// A block in progress is named while it lasts (issue 17 item 2: a sender blocked 2.6 s at a
/// time was named only after each block ended). A 4 kB send buffer behind a 16 kbit/s tbf: the
/// 1000-byte packets leave it two a second, so each send blocks for about a second. With 0.25 s
/// ticks, ticks inside a block show the thread blocked now at `sock_alloc_send_pskb` for longer
/// than the tick, and their block table (and a blocked_send verdict) name the site although no
/// block ended in them.
#[test]
fn a_block_in_progress_is_named_before_it_ends() {
    let test = privileged();
    let lab = TestLab::new(Some(TbfConfig {
        rate: "16kbit".into(),
        burst: "4kb".into(),
        limit: "200kb".into(),
    }));
    let sink = lab.sink(PORT);
    let send_s = patience(Duration::from_secs(5)).as_secs_f64();
    let sender = sender_argv(
        &lab.to(PORT),
        1000.0,
        200,
        send_s,
        &["--size", "1000", "--sndbuf", "4096"],
    );
    let args = run_args(
        &["--requested", "1000", "--interval", "0.25"],
        &launched_in(&lab, &sender),
    );
    let run = Proc::scanprof(&args).finish(RUN_TIMEOUT);
    let _ = stop_sink(sink);
    run.assert_success();
    assert_all_probes_attached(&run.started());
    let samples = run.of_type("sample");
    // Ticks inside a block that began before them.
    let inside: Vec<(&Value, &Value)> = samples
        .iter()
        .filter_map(|s| {
            let th = s["threads"]
                .as_array()?
                .iter()
                .find(|t| t["blocked_now"]["blocked_s"].as_f64() > s["interval_s"].as_f64())?;
            Some((s, th))
        })
        .collect();
    eprintln!(
        "block in progress: {} of {} ticks inside a block; {:?}",
        inside.len(),
        samples.len(),
        inside
            .iter()
            .map(|(s, th)| (s["t_s"].as_f64(), th["blocked_now"]["blocked_s"].as_f64()))
            .collect::<Vec<_>>()
    );
    assert!(inside.len() >= 2, "no tick inside a block: {:#?}", samples.last());
    for (s, th) in &inside {
        assert_eq!(th["blocked_now"]["wait_site"], "sock_alloc_send_pskb", "{s}");
    }
    // A tick in which no block ended still names the site, with the time blocked so far.
    let named: Vec<&Value> = inside
        .iter()
        .filter_map(|(s, _)| {
            s["block_sites"].as_array()?.iter().find(|b| {
                b["wait_site"] == "sock_alloc_send_pskb"
                    && b["episodes"] == 0
                    && b["blocked_s"].as_f64() > Some(0.2)
            })
        })
        .collect();
    assert!(
        !named.is_empty(),
        "no tick named the site of a block in progress: {inside:#?}"
    );
    for (s, _) in &inside {
        for v in s["verdicts"].as_array().into_iter().flatten() {
            if v["cause"] == "blocked_send" {
                let text = v.to_string();
                assert!(
                    text.contains("sock_alloc_send_pskb") && !text.contains("stacks are attached"),
                    "a blocked_send verdict inside a block: {v:#}"
                );
            }
        }
    }
    drop(run);
    test.assert_released("scanprof run");
    lab.destroy();
}

// 7. ------------------------------------------------------------------------------------------

/// The pid of a process that has just exited and been reaped.
fn vanished_pid() -> u32 {
    let mut c = Command::new("true").spawn().expect("cannot run true");
    let pid = c.id();
    c.wait().unwrap();
    assert!(start_time(pid).is_none(), "pid {pid} was reused at once");
    pid
}

/// `attach -p` a pid that does not exist: non-zero exit, a message naming the pid, no summary.
#[test]
fn attach_to_a_missing_pid_fails_naming_it() {
    let test = privileged();
    let pid = vanished_pid();

    let run = Proc::scanprof(&strings([
        "attach",
        "-p",
        &pid.to_string(),
        "--json",
        "--duration",
        "2",
    ]))
    .finish(RUN_TIMEOUT);
    eprintln!("attach -p {pid}: {} / {}", run.status, run.stderr);

    assert!(!run.status.success(), "{}", run.context());
    assert!(
        run.stderr.contains(&format!("pid {pid}")) && run.stderr.contains("no process"),
        "the message does not name pid {pid}: {}",
        run.context()
    );
    assert!(run.of_type("summary").is_empty(), "{}", run.context());
    test.assert_released("a failed attach");
}

/// `run` of a command that does not exist: non-zero exit and a message naming the command,
/// before any BPF program is loaded.
#[test]
fn run_of_a_missing_command_fails_naming_it() {
    let test = privileged();

    let run = Proc::scanprof(&run_args(&[], &strings(["/nonexistent/cmd"]))).finish(RUN_TIMEOUT);
    eprintln!("run -- /nonexistent/cmd: {} / {}", run.status, run.stderr);

    assert!(!run.status.success(), "{}", run.context());
    assert!(
        run.stderr.contains("/nonexistent/cmd") && run.stderr.contains("not found"),
        "no clear message naming the missing command: {}",
        run.context()
    );
    assert!(run.of_type("summary").is_empty(), "{}", run.context());
    test.assert_released("run of a missing command");
}

/// `attach` to a sender that finishes before --duration: the run ends when it exits, with a
/// complete summary and exit 0, having counted what was sent while attached.
///
/// The sender sends until this test ends it (SIGTERM to its pid, which it answers by stopping
/// between two packets) a second's worth of packets after scanprof said `started`, so it is
/// sending while scanprof attaches on any load (a 3 s count-bound send ended before scanprof
/// started beside a CPU hog at load 10). The rate is held to the receiver's over the same
/// packets, the last ones scanprof counted, by their arrival times: a window that began when
/// this test read `started` began later than scanprof's first counted send by however long the
/// test took to be scheduled.
#[test]
fn attach_ends_with_a_summary_when_the_target_exits() {
    let test = privileged();
    let lab = TestLab::new(None);
    let sink = lab.sink_keeping_arrivals(PORT);
    // Bounds only (the test ends it): 60 s at 1,000 pps.
    let argv = sender_argv(&lab.to(PORT), 1000.0, 60_000, 60.0, &[]);
    let mut sender = Proc::spawn("sender", lab.lab.command_in_sender(&argv[0], &argv[1..]), false);
    let wait_for = |packets: u64, what: &str| {
        let deadline = Instant::now() + patience(Duration::from_secs(15));
        while sink.packets_so_far() < packets {
            assert!(
                Instant::now() < deadline,
                "the receiver got no {what} within 15 s"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    wait_for(100, "first 100 packets");
    let before = sink.packets_so_far();
    let mut attach = Proc::scanprof(&strings([
        "attach",
        "-p",
        &sender.pid().to_string(),
        "--json",
        "--duration",
        "40",
    ]));
    let started = attach.wait_for_json("started", Duration::from_secs(30));
    let at_started = sink.packets_so_far();
    wait_for(at_started + 1000, "1,000 packets after scanprof started");
    sender.signal(Signal::SIGTERM);
    let run = attach.finish(RUN_TIMEOUT);
    let sender = sender.finish(Duration::from_secs(10));
    let rx = stop_sink(sink);

    run.assert_success();
    sender.assert_success();
    assert_all_probes_attached(&started);
    let s = run.summary();
    let sent = u64_of(&sender.sender_report(), "sent");
    // scanprof's rate is (packets - 1) / (first to last counted send): the receiver's over the
    // same packets, the last `s.packets` that arrived (one flow over a veth keeps its order).
    let rx_attached = rx
        .pps_of_last(s.packets)
        .unwrap_or_else(|| panic!("scanprof counted {} of the receiver's {}", s.packets, rx.packets));
    eprintln!(
        "target exits: scanprof {} packets (receiver had {before}..{at_started} of {sent} before attach), \
         {:.2} pps vs receiver {:.2} over the same packets ({:.2} overall)",
        s.packets,
        s.achieved_pps,
        rx_attached,
        receiver_pps(&rx),
    );

    // Ended by the target's exit, not by --duration.
    assert_eq!(s.end_reason, EndReason::FamilyExited);
    let p = assert_sender_process(&s, sender.pid);
    assert!(!p.alive && p.exit_code == Some(0), "{p:?}");
    assert_eq!(rx.packets, sent, "the receiver's count against the sender's");
    // Counted from attach on: between the receiver's count before scanprof started and its count
    // once scanprof said it had started (a packet or two may be in flight).
    assert!(
        s.packets <= sent - before && s.packets + 2 >= sent - at_started,
        "scanprof counted {}: expected {}..={}",
        s.packets,
        sent - at_started,
        sent - before
    );
    assert_within(
        "achieved_pps vs the receiver's pps over the packets scanprof counted",
        s.achieved_pps,
        rx_attached,
        0.01,
    );

    drop(run);
    test.assert_released("scanprof attach");
    lab.destroy();
}

/// SIGINT to scanprof during `run`: a complete summary with end_reason "interrupted", exit 0,
/// and the launched command is ended and gone.
#[test]
fn sigint_during_run_ends_with_a_summary_and_stops_the_command() {
    let test = privileged();
    let lab = TestLab::new(None);
    let sink = lab.sink(PORT);

    // Would send for 20 s; scanprof is interrupted after about 1 s of it.
    let sender = sender_argv(&lab.to(PORT), 1000.0, 20_000, 20.0, &[]);
    let mut scanprof = Proc::scanprof(&run_args(&[], &launched_in(&lab, &sender)));
    // 30 s (stretched in slow VMs): loading and verifying the probes there took over 60 s of
    // a 5.10 guest starved by its host (2026-11-28, host load ~10).
    let started = scanprof.wait_for_json("started", Duration::from_secs(30));
    assert_all_probes_attached(&started);
    let launched = root_pid(&started);
    let launched_at = start_time(launched).expect("the launched command is already gone");
    // About 1 s of packets before the signal (longer under an emulator, as the launch test).
    let before_signal = (1000.0 * patience(Duration::from_secs(1)).as_secs_f64()) as u64;
    let deadline = Instant::now() + patience(Duration::from_secs(5));
    while sink.packets_so_far() < before_signal {
        assert!(Instant::now() < deadline, "the sender sent too little within 5 s");
        std::thread::sleep(Duration::from_millis(5));
    }
    let at_signal = sink.packets_so_far();
    scanprof.signal(Signal::SIGINT);
    let t0 = Instant::now();
    let run = scanprof.finish(RUN_TIMEOUT);
    let ended_after = t0.elapsed();
    let rx = stop_sink(sink);

    run.assert_success();
    let s = run.summary();
    let sent = run.sender_report();
    eprintln!(
        "SIGINT: ended {:.2} s after the signal; scanprof {} packets at {:.2} pps; receiver had {at_signal} \
         at the signal, {} in all at {:.2} pps; sender sent {}",
        ended_after.as_secs_f64(),
        s.packets,
        s.achieved_pps,
        rx.packets,
        receiver_pps(&rx),
        sent["sent"]
    );

    assert_eq!(s.end_reason, EndReason::Interrupted);
    assert!(
        ended_after < Duration::from_secs(5),
        "scanprof took {ended_after:?} to stop"
    );
    assert!(
        !process_exists(launched, launched_at),
        "the launched command (pid {launched}) is still there"
    );
    let p = assert_sender_process(&s, launched);
    assert!(!p.alive, "{p:?}");
    // The sender, told to stop (SIGTERM from scanprof), reports what it sent, all received.
    assert_eq!(u64_of(&sent, "sent"), rx.packets);
    assert!(rx.packets < 20_000, "the sender was not stopped early");
    // The summary's last sample is taken after the command was ended: every packet it sent,
    // also those between the signal and its end, is counted.
    assert!(
        s.packets == rx.packets && s.packets >= at_signal,
        "scanprof counted {}; the receiver had {at_signal} at the signal and {} in all",
        s.packets,
        rx.packets
    );
    // The same packets on both sides, first to last: the receiver's times are the kernel's
    // receive timestamps (the moment this test saw the count at the signal is not a packet's
    // time: it lags by a poll and by scheduling, ~10 ms under an emulator).
    assert_within(
        "achieved_pps vs the receiver's pps",
        s.achieved_pps,
        receiver_pps(&rx),
        cross_clock(0.01),
    );

    drop(run);
    test.assert_released("an interrupted scanprof run");
    lab.destroy();
}

// Product bugs since fixed, kept as regression tests ---------------------------------------------

/// Drops of somebody else's packets in another namespace are not the target's loss, even when
/// they go to an address the target sends to. The bug: drops.bpf.c fell back to the `flows`
/// map, keyed by destination address alone, for any packet whose socket was not the target's,
/// so another lab's tbf drops to 10.99.0.2 were `target_loss` of the profiled sender. Fixed:
/// an unowned packet is matched by address only in a namespace the family's traffic reached,
/// and only on a device the family's packets used (drops.bpf.c).
#[test]
fn drops_in_another_namespace_are_not_the_targets_loss() {
    let test = privileged();
    let lab = TestLab::new(None);
    let sink = lab.sink(PORT);
    // A second lab with a small queue, same addresses; its sender is not profiled.
    let other = TestLab::new(Some(TbfConfig {
        rate: "1mbit".into(),
        burst: "4kb".into(),
        limit: "8kb".into(),
    }));

    let sender = sender_argv(&lab.to(PORT), 1000.0, 2000, 5.0, &[]);
    let mut scanprof = Proc::scanprof(&run_args(&[], &launched_in(&lab, &sender)));
    let started = scanprof.wait_for_json("started", Duration::from_secs(15));
    assert_all_probes_attached(&started);
    let deadline = Instant::now() + patience(Duration::from_secs(5));
    while sink.packets_so_far() < 100 {
        assert!(Instant::now() < deadline, "the profiled sender sent nothing");
        std::thread::sleep(Duration::from_millis(5));
    }
    // 3000 packets as fast as possible into 1 Mbit/s: ~2990 QDISC_DROPs in the other lab.
    let argv = sender_argv(&other.to(PORT), 0.0, 3000, 5.0, &["--size", "1000"]);
    let foreign = Proc::spawn(
        "foreign sender",
        other.lab.command_in_sender(&argv[0], &argv[1..]),
        false,
    )
    .finish(Duration::from_secs(10));
    foreign.assert_success();
    let run = scanprof.finish(RUN_TIMEOUT);
    let foreign_tbf = other.drained_root_qdisc();
    let rx = stop_sink(sink);

    run.assert_success();
    let s = run.summary();
    assert_eq!(s.packets, rx.packets);
    assert!(
        foreign_tbf.drops > 1000,
        "the other lab dropped too little: {foreign_tbf:?}"
    );
    let claimed: Vec<_> = s
        .drops
        .iter()
        .filter(|d| d.class != DropClass::Unrelated && !lab.inside(d))
        .collect();
    assert!(
        claimed.is_empty(),
        "drops in another namespace ({} by its tbf) claimed as the target's: {claimed:?}",
        foreign_tbf.drops
    );

    drop(run);
    test.assert_released("scanprof run");
    other.destroy();
    lab.destroy();
}

/// `run --json` output stays NDJSON while the launched command writes to the same stdout: every
/// line is a whole JSON object. The bug (about 1 run in 6): the command wrote to the same
/// stdout, and its output landing between an NDJSON line and its newline (two write(2) calls)
/// was glued to scanprof's line; most likely when the run ends by SIGINT, as the SIGTERMed
/// sender prints its report. Fixed: under `--json` a launched command's stdout goes to
/// scanprof's stderr (`CommandOutput::StdoutToStderr`), never to the NDJSON stream.
#[test]
fn ndjson_lines_stay_whole_when_the_command_prints() {
    let test = privileged();
    let lab = TestLab::new(None);
    let sink = lab.sink(PORT);
    let mut broken = Vec::new();
    for i in 0..12u64 {
        // The sender prints its JSON report on stdout when scanprof ends it.
        let sender = sender_argv(&lab.to(PORT), 1000.0, 10_000, 10.0, &[]);
        let mut scanprof = Proc::scanprof(&run_args(&[], &in_netns(&lab.lab.sender_ns, &sender)));
        scanprof.wait_for_json("started", Duration::from_secs(15));
        std::thread::sleep(Duration::from_millis(1000 + 17 * i));
        scanprof.signal(Signal::SIGINT);
        let run = scanprof.finish(RUN_TIMEOUT);
        run.assert_success();
        broken.extend(
            run.lines
                .iter()
                .filter(|l| !serde_json::from_str::<Value>(l).is_ok_and(|v| v.is_object()))
                .map(|l| {
                    format!(
                        "run {i}: {} ... {}",
                        &l[..l.len().min(40)],
                        &l[l.len().saturating_sub(120)..]
                    )
                }),
        );
    }
    drop(sink);
    assert!(broken.is_empty(), "lines that are not JSON objects: {broken:#?}");
    test.assert_released("scanprof run");
    lab.destroy();
}
