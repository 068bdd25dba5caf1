//! Privileged test of the probes' own cost (issue 12, "the true cost, live"): the BPF run time per
//! target packet scanprof reports, against what the kernel's statistics say through an
//! independent reader, `bpftool -j prog show` (run_time_ns of scanprof's programs over the
//! packets the sender says it sent), for the same run.
//!
//! Needs root (BPF, the sysctl) and fails, never skips, without it: CI runs it as root. Traffic
//! goes only to 127.0.0.1 (a closed port), bounded in count and time. The sysctl it sets
//! (`kernel.bpf_stats_enabled`) is restored by a guard, also when the test fails.
//!
//! Run: `cargo test --release --test it probe_cost:: -- --test-threads=1`

use crate::common;

use std::collections::HashSet;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use common::*;
use scanprof::analysis::verdict::Cause;
use scanprof::analysis::Snapshot;
use scanprof::collect::bpf_time::{StatsCoverage, StatsHolder};

/// The program on the raw `sys_enter` hook, where the default `--syscall-hooks all` puts the
/// send path's entry code (`--syscall-hooks per-call` puts it on `send_path.on_sys_enter`).
const RAW_ENTER: &str = "send_path.on_raw_enter";

const SYSCTL: &str = "/proc/sys/kernel/bpf_stats_enabled";
/// Longest a scanprof run of this test may take.
const RUN_TIMEOUT: Duration = Duration::from_secs(30);
/// Packets the sender may send at most (it stops after 2 s otherwise).
const COUNT: u64 = 400_000;

/// Sets `kernel.bpf_stats_enabled` and puts the old value back when dropped (a failing
/// assertion included).
struct StatsSysctl {
    old: String,
}

impl StatsSysctl {
    fn set(value: &str) -> StatsSysctl {
        let old = std::fs::read_to_string(SYSCTL)
            .unwrap_or_else(|e| panic!("cannot read {SYSCTL}: {e}"))
            .trim()
            .to_string();
        std::fs::write(SYSCTL, value).unwrap_or_else(|e| panic!("cannot write {SYSCTL}: {e}"));
        StatsSysctl { old }
    }
}

impl Drop for StatsSysctl {
    fn drop(&mut self) {
        if let Err(e) = std::fs::write(SYSCTL, &self.old) {
            eprintln!("could not restore {SYSCTL} to {}: {e}", self.old);
        }
    }
}

/// Processes other than `ours` (and this test) that hold the kernel's BPF statistics on through
/// a BPF_ENABLE_STATS descriptor (`anon_inode:bpf-stats`: another scanprof, bpftop...), or the
/// sysctl, seen by a thread that looks every 5 ms until dropped. The kernel counts every
/// program's run time while anyone holds them on, ours included, so what bpftool reads of our
/// programs then exceeds what our scanprof's own windows counted (issue 29 section 2: another
/// scanprof's sampled windows broke the upper bound below).
struct OtherStatsHolders {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    seen: Option<std::thread::JoinHandle<Vec<String>>>,
}

impl OtherStatsHolders {
    fn watch(ours: u32) -> OtherStatsHolders {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = std::sync::Arc::clone(&stop);
        let me = std::process::id();
        let seen = std::thread::spawn(move || {
            let mut seen = std::collections::BTreeSet::new();
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                if std::fs::read_to_string(SYSCTL).is_ok_and(|v| v.trim() == "1") {
                    seen.insert("the sysctl kernel.bpf_stats_enabled = 1".to_string());
                }
                for pid in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
                    let Some(pid) = pid.file_name().to_str().and_then(|p| p.parse::<u32>().ok()) else {
                        continue;
                    };
                    if pid == ours || pid == me {
                        continue;
                    }
                    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
                        .into_iter()
                        .flatten()
                        .flatten();
                    if fds
                        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
                        .any(|l| l.as_os_str() == "anon_inode:bpf-stats")
                    {
                        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
                        seen.insert(format!("pid {pid} ({})", comm.trim()));
                    }
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            seen.into_iter().collect()
        });
        OtherStatsHolders {
            stop,
            seen: Some(seen),
        }
    }

    /// Who else held statistics on while watched.
    fn finish(mut self) -> Vec<String> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.seen.take().and_then(|h| h.join().ok()).unwrap_or_default()
    }
}

impl Drop for OtherStatsHolders {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(h) = self.seen.take() {
            let _ = h.join();
        }
    }
}

/// Removes a file of the test when dropped.
struct TempFile(std::path::PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// `scanprof run --json [extra] -- sh -c 'SENDER; bpftool -j prog show > OUT'`: the full-speed
/// reference sender to 127.0.0.1:9 (closed), then bpftool, inside the profiled family, reads
/// every program's statistics while scanprof is still attached (the run ends when the family
/// exits, a few ms later). Returns the run, the program ids scanprof held and bpftool's list.
fn profiled_run(extra: &[&str], out: &TempFile) -> (Finished, HashSet<u64>, Vec<Value>, Vec<String>) {
    let sender = sender_argv("127.0.0.1:9", 0.0, COUNT, 2.0, &[]);
    let script = format!(
        "{} 1>&2; bpftool -j prog show > {}",
        sh_join(&sender),
        sh_quote(&out.0.display().to_string())
    );
    let mut args: Vec<String> = ["run", "--json", "--duration", "30"].map(String::from).to_vec();
    args.extend(extra.iter().map(|s| s.to_string()));
    args.extend(["--", "sh", "-c", &script].map(String::from));
    let mut run = Proc::scanprof(&args);
    let others = OtherStatsHolders::watch(run.pid());
    run.wait_for_json("started", Duration::from_secs(20));
    // The programs this scanprof holds (program and link fds), told apart from any other
    // scanprof on the machine by the holding pid.
    let pid = run.pid();
    let ours: HashSet<u64> = bpf_prog_holders()
        .into_iter()
        .filter(|(_, pids)| pids.contains(&pid))
        .map(|(id, _)| id)
        .collect();
    let finished = run.finish(RUN_TIMEOUT);
    let others = others.finish();
    finished.assert_success();
    let text = std::fs::read_to_string(&out.0)
        .unwrap_or_else(|e| panic!("bpftool wrote no program list ({e})\n{}", finished.context()));
    let progs: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("bpftool's JSON: {e}: {text}"));
    let progs = progs.as_array().expect("bpftool's program list").clone();
    assert!(!ours.is_empty(), "found no program held by scanprof (pid {pid})");
    (finished, ours, progs, others)
}

/// (name, run_cnt, run_time_ns) of the programs in `ours`, from bpftool's list.
fn bpftool_stats(progs: &[Value], ours: &HashSet<u64>) -> Vec<(String, u64, u64)> {
    progs
        .iter()
        .filter(|p| p["id"].as_u64().is_some_and(|id| ours.contains(&id)))
        .map(|p| {
            (
                p["name"].as_str().unwrap_or("?").to_string(),
                p["run_cnt"].as_u64().unwrap_or(0),
                p["run_time_ns"].as_u64().unwrap_or(0),
            )
        })
        .collect()
}

#[test]
fn reported_bpf_cost_per_packet_matches_bpftools_run_time_for_the_same_run() {
    let test = privileged();
    let out = TempFile(std::env::temp_dir().join(format!("scanprof-probe-cost-{}.json", std::process::id())));

    // 1. Statistics on machine-wide (as a user's sysctl would have them): scanprof must only
    //    read them, count the whole run, and agree with bpftool.
    let (finished, ours, progs, _) = {
        let _on = StatsSysctl::set("1");
        profiled_run(&[], &out)
    };
    let sent = finished.sender_report()["sent"]
        .as_u64()
        .expect("the sender's `sent`");
    assert!(
        sent >= 10_000,
        "the sender sent only {sent} packets\n{}",
        finished.context()
    );
    let summary = finished.summary();
    precision::assert_precise(
        "reported_bpf_cost_per_packet_matches_bpftools_run_time_for_the_same_run",
        &summary,
        &finished.of_type("sample"),
    );
    let bpf = summary
        .cost
        .bpf
        .as_ref()
        .unwrap_or_else(|| panic!("no cost.bpf in the summary\n{}", finished.context()));
    assert_eq!(bpf.holder, StatsHolder::Sysctl, "{bpf:#?}");
    assert_eq!(bpf.coverage, StatsCoverage::Continuous, "{bpf:#?}");
    assert_eq!(
        summary.packets, sent,
        "scanprof's packet count against the sender's"
    );
    let stats = bpftool_stats(&progs, &ours);
    let bpftool_ns: u64 = stats.iter().map(|s| s.2).sum();
    let bpftool_per_packet = bpftool_ns as f64 / sent as f64;
    let reported = bpf.ns_per_packet.expect("ns_per_packet");
    eprintln!(
        "BPF cost per packet over {sent} packets: scanprof {reported:.0} ns, bpftool {bpftool_per_packet:.0} ns \
         (run_time_ns {bpftool_ns}); bpftool per program (name, run_cnt, run_time_ns): {stats:?}; \
         scanprof per program: {:?}",
        bpf.programs
            .iter()
            .map(|p| (p.name.as_str(), p.runs, p.run_time_ns))
            .collect::<Vec<_>>()
    );
    assert!(
        bpftool_ns > 0,
        "bpftool saw no run time with the statistics on: {stats:?}"
    );
    assert_within(
        "BPF ns per packet, scanprof against bpftool",
        reported,
        bpftool_per_packet,
        0.25,
    );
    // What the target paid is the programs' runs on its threads: part of all the runs, and
    // every send's sys_enter among them (the whole run was timed: statistics on throughout).
    let target_ns = bpf.target_bpf_ns.expect("target_bpf_ns");
    assert!(target_ns > 0.0 && target_ns <= bpf.bpf_ns, "{bpf:#?}");
    for p in &bpf.programs {
        assert!(
            p.target_runs <= p.runs && p.target_run_time_ns <= p.run_time_ns,
            "{p:#?}"
        );
    }
    let enter = bpf
        .programs
        .iter()
        .find(|p| p.name == RAW_ENTER)
        .unwrap_or_else(|| panic!("{RAW_ENTER} did not run: {:#?}", bpf.programs));
    assert!(
        enter.target_runs >= sent,
        "{} sys_enter runs on the family's threads for {sent} sends",
        enter.target_runs
    );
    // What the timing counts around an empty body was measured as each window opened and
    // taken off the timed runs: the target's figure is the bodies', the timing's has the rest.
    let floor = bpf
        .timing_floor_ns_per_run
        .unwrap_or_else(|| panic!("no timing floor measured: {bpf:#?}"));
    eprintln!("timing floor: {floor:.1} ns a timed run");
    assert!((1.0..20_000.0).contains(&floor), "{floor} ns");
    assert!(
        enter.timing_floor_ns > 0 && enter.target_run_time_ns + enter.timing_floor_ns <= enter.run_time_ns,
        "{enter:#?}"
    );
    let timing = bpf.timing_ns.expect("timing_ns");
    let floors: u64 = bpf.programs.iter().map(|p| p.timing_floor_ns).sum();
    assert!(timing >= floors as f64, "timing {timing} ns, floors {floors} ns");
    // And the share of the target's time is that run time over its threads' on-CPU time.
    let share = bpf.share_of_target.expect("share_of_target");
    assert_within(
        "share of the target's on-CPU time",
        share,
        target_ns / bpf.target_oncpu_ns as f64,
        1e-9,
    );

    // 2. Statistics off machine-wide: scanprof samples them itself (a tenth of each tick), says
    //    so, and leaves them off. bpftool then sees only what scanprof's windows counted.
    let _off = StatsSysctl::set("0");
    let (finished, ours, progs, others) = profiled_run(&[], &out);
    let summary = finished.summary();
    precision::assert_precise(
        "reported_bpf_cost_per_packet_matches_bpftools_run_time_for_the_same_run",
        &summary,
        &finished.of_type("sample"),
    );
    let bpf = summary.cost.bpf.as_ref().expect("cost.bpf when sampled");
    assert_eq!(bpf.holder, StatsHolder::Scanprof, "{bpf:#?}");
    assert_eq!(bpf.coverage, StatsCoverage::Sampled, "{bpf:#?}");
    assert!(
        (0.04..=0.2).contains(&bpf.measured_share),
        "measured {:.3} of the run, not about a tenth",
        bpf.measured_share
    );
    // The windows' counts are what bpftool counted (statistics were on only in them), up to a
    // window bpftool's read fell into.
    let counted_ns: u64 = bpf.programs.iter().map(|p| p.run_time_ns).sum();
    let bpftool_ns: u64 = bpftool_stats(&progs, &ours).iter().map(|s| s.2).sum();
    assert!(counted_ns > 0, "{bpf:#?}");
    // bpftool counted at least scanprof's windows, whoever else held statistics on.
    assert!(
        bpftool_ns + bpftool_ns / 10 >= counted_ns,
        "scanprof counted {counted_ns} ns in its windows, bpftool only {bpftool_ns} ns"
    );
    // And no more than them when nobody else held statistics on; while another process did
    // (another scanprof's windows, a sysctl set by someone else), the kernel also counted our
    // programs in its windows, which scanprof rightly does not count as its own measurement.
    if others.is_empty() {
        assert!(
            counted_ns + counted_ns / 2 >= bpftool_ns,
            "scanprof counted {counted_ns} ns in its windows, bpftool {bpftool_ns} ns, and nobody else held statistics on"
        );
    } else {
        eprintln!(
            "statistics were also held on by {} during the sampled run: bpftool's {bpftool_ns} ns of our programs \
             include their windows; only scanprof's {counted_ns} ns <= bpftool's is checked",
            others.join(", ")
        );
    }
    // Scaled up by the share of the run the windows covered, over this run's packets. (How the
    // sampled figure compares with part 1's counted one is a comparison of two runs, which moves
    // with the machine's load: 1,028 against 2,525 ns once, at 114k and 214k pps. It is printed,
    // and measured in `cargo bench --bench probe_cost_truth`, not asserted.)
    let sampled = bpf.ns_per_packet.expect("ns_per_packet");
    eprintln!("sampled BPF cost per packet: {sampled:.0} ns (counted run: {reported:.0} ns)");
    assert_within(
        "bpf_ns, the windows' run time scaled by the share they covered",
        bpf.bpf_ns,
        counted_ns as f64 / bpf.measured_share,
        1e-6,
    );
    assert_within(
        "ns_per_packet, bpf_ns over the run's packets",
        sampled,
        bpf.bpf_ns / bpf.packets as f64,
        1e-9,
    );
    // scanprof left the sysctl as it was (it holds statistics through its own descriptor),
    // unless someone else set it meanwhile (seen by the watch).
    if !others.iter().any(|o| o.contains("sysctl")) {
        assert_eq!(std::fs::read_to_string(SYSCTL).unwrap().trim(), "0");
    }
    drop(_off);
    test.assert_released("the probe-cost runs");
}

/// A busy loop of syscalls outside the family, ended (by its pid) when dropped.
struct SyscallLoop(std::process::Child);

impl SyscallLoop {
    /// `dd bs=1` from /dev/zero to /dev/null: a read and a write a byte, as fast as it can.
    fn start() -> SyscallLoop {
        let child = Command::new("dd")
            .args(["if=/dev/zero", "of=/dev/null", "bs=1"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("starting dd");
        SyscallLoop(child)
    }
}

impl Drop for SyscallLoop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Issue 28: a sender asleep between its packets, profiled while another process makes
/// syscalls as fast as it can. The syscall programs run for every one of them; none of that is
/// the sender's. No tick and not the run may warn that the probes slow it, nor name probe_cost.
#[test]
fn a_sleeping_sender_beside_a_busy_syscall_loop_is_never_warned_about() {
    let test = privileged();
    let _off = StatsSysctl::set("0");
    let _busy = SyscallLoop::start();
    // 2,000 pps for 3 s, asleep between packets (clock_nanosleep), to a closed loopback port;
    // statistics counted the whole run, so every tick has its figure.
    let sender = sender_argv("127.0.0.1:9", 2000.0, 6000, 3.0, &["--pacer", "sleep"]);
    let mut args: Vec<String> = ["run", "--json", "--bpf-stats", "always", "--duration", "30", "--"]
        .map(String::from)
        .to_vec();
    args.extend(sender);
    let finished = Proc::scanprof(&args).finish(RUN_TIMEOUT);
    finished.assert_success();
    let summary = finished.summary();
    precision::assert_precise(
        "a_sleeping_sender_beside_a_busy_syscall_loop_is_never_warned_about",
        &summary,
        &finished.of_type("sample"),
    );
    let bpf = summary.cost.bpf.as_ref().expect("cost.bpf");
    let machine = bpf.machine_bpf_ns.expect("machine_bpf_ns");
    let target = bpf.target_bpf_ns.expect("target_bpf_ns");
    eprintln!(
        "sleeping sender beside dd: target {:.2} ms of BPF on its threads, {:.1} ms on a CPU ({:?}), \
         machine tax {:.1} ms; the old figure (all runs over its time) would be {:.0}%",
        target / 1e6,
        bpf.target_oncpu_ns as f64 / 1e6,
        bpf.share_of_target,
        machine / 1e6,
        bpf.bpf_ns / bpf.target_oncpu_ns.max(1) as f64 * 100.0
    );
    // The loop's syscalls ran the programs outside the family: that is the machine's tax.
    assert!(machine > 0.0, "{bpf:#?}");
    let enter = bpf
        .programs
        .iter()
        .find(|p| p.name == RAW_ENTER)
        .unwrap_or_else(|| panic!("{RAW_ENTER} did not run: {:#?}", bpf.programs));
    assert!(enter.runs > enter.target_runs, "{enter:#?}");
    assert!(!bpf.alert, "the run warned: {bpf:#?}");
    assert!(
        summary.verdicts.iter().all(|v| v.cause != Cause::ProbeCost),
        "{:#?}",
        summary.verdicts
    );
    let ticks = finished.of_type("sample");
    assert!(ticks.len() >= 2, "{}", finished.context());
    for t in ticks {
        let tick: Snapshot = serde_json::from_value(t).expect("a tick line");
        let b = tick
            .cost
            .bpf
            .as_ref()
            .expect("every tick measured (--bpf-stats always)");
        assert!(!b.alert, "tick {} warned: {b:#?}", tick.tick);
        assert!(
            tick.verdicts.iter().all(|v| v.cause != Cause::ProbeCost),
            "tick {} named probe_cost: {:#?}",
            tick.tick,
            tick.verdicts
        );
    }
    drop(_busy);
    drop(_off);
    test.assert_released("the sleeping sender's run");
}

/// Issue 32: with the per-syscall tracepoints (`--syscall-hooks per-call`), a family making syscalls scanprof
/// does not read (getppid, 200,000 of them) runs no syscall program for them: the family's runs
/// of send_path's syscall programs (timed per program on its threads, the whole run) are its few
/// reads, writes and closes at start-up. With `--syscall-hooks all` (the raw sys_enter/sys_exit)
/// every one of its syscalls runs them: at least the 200,000 calls, which shows what the first
/// half would count if the raw hooks were still attached.
#[test]
fn a_family_making_other_syscalls_runs_no_syscall_program() {
    let test = privileged();
    const CALLS: u64 = 200_000;
    let script = format!("import os\nfor _ in range({CALLS}): os.getppid()");
    let family_runs = |hooks: &str, prog: &str| -> u64 {
        let args: Vec<String> = [
            "run",
            "--json",
            "--bpf-stats",
            "always",
            "--syscall-hooks",
            hooks,
            "--duration",
            "30",
            "--",
            "python3",
            "-c",
            &script,
        ]
        .map(String::from)
        .to_vec();
        let finished = Proc::scanprof(&args).finish(RUN_TIMEOUT);
        finished.assert_success();
        let summary = finished.summary();
        let bpf = summary.cost.bpf.as_ref().expect("cost.bpf (--bpf-stats always)");
        bpf.programs
            .iter()
            .find(|p| p.name == prog)
            .unwrap_or_else(|| panic!("{prog} not among {bpf:#?}"))
            .target_runs
    };
    let per_call = family_runs("per-call", "send_path.on_sys_enter");
    let all = family_runs("all", "send_path.on_raw_enter");
    eprintln!("family runs of the syscall entry program: per-call {per_call}, all {all} ({CALLS} getppid)");
    assert!(
        all >= CALLS,
        "the raw hook ran {all} times on the family's threads, fewer than its {CALLS} calls"
    );
    assert!(
        per_call < CALLS / 10,
        "the per-syscall entry program ran {per_call} times on a family that made {CALLS} getppid calls"
    );
    test.assert_released("the getppid family's runs");
}

#[test]
fn bpftool_is_there() {
    // The comparison above needs bpftool: a missing one is a failure, not a skip.
    let ok = Command::new("bpftool")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(ok, "bpftool is needed (scripts/setup installs it)");
}
