//! Attaching to a sender that is already sending (issue 21). The headline use of scanprof is
//! `attach -p PID` to a scanner mid-scan; the other privileged tests attach before the first
//! packet, which hid a socket cache that, once it had judged a socket "not the family's" before
//! the family was registered, never recovered (every stage after the syscall read 0).
//!
//! Each test starts a sender in a lab, lets it send for about a second, attaches, and compares
//! every stage after the send syscall with the packets the syscalls accepted after attach, and
//! the drops with `tc` or with the receiving side. Independent counts: the lab receiver, `tc -s
//! qdisc` of the sender's veth, the sender's own report.

use crate::common;

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::Value;

use common::*;
use scanprof::analysis::verdict::Cause;
use scanprof::analysis::Summary;
use scanprof::collect::DropClass;
use scanprof::netlab::{Side, TbfConfig, UdpSink};

const PORT: u16 = 9000;
const PORT_LATE: u16 = 9001;
const CLOSED_PORT: u16 = 9;
const RUN_TIMEOUT: Duration = Duration::from_secs(40);
/// How long the sender has been sending when scanprof attaches.
const SENDING_BEFORE_ATTACH: Duration = Duration::from_secs(1);
/// How long scanprof watches a sender before the test ends the sender (stretched by
/// SCANPROF_TEST_PATIENCE: an emulated VM sends fewer packets per second).
const ATTACHED_BEFORE_END: Duration = Duration::from_secs(2);

/// Starts `argv` in the lab's sender namespace and returns once it has sent for about
/// SENDING_BEFORE_ATTACH, as `watch` (a receiver, or None for a closed port) or the clock says.
fn sending(lab: &TestLab, argv: &[String], watch: Option<&UdpSink>) -> Proc {
    let mut sender = Proc::spawn("sender", lab.lab.command_in_sender(&argv[0], &argv[1..]), false);
    if let Some(sink) = watch {
        let wait = patience(Duration::from_secs(5));
        let deadline = Instant::now() + wait;
        while sink.packets_so_far() == 0 {
            assert!(
                Instant::now() < deadline,
                "the sender sent nothing within {wait:?}"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    std::thread::sleep(SENDING_BEFORE_ATTACH);
    assert!(sender.running(), "the sender ended before scanprof attached");
    sender
}

/// `tc -s qdisc` of the sender veth's root, read every few milliseconds in a thread: (packets
/// handed to the qdisc so far = sent + dropped + queued, drops so far).
struct TcSampler {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<Vec<(u64, u64)>>,
}

impl TcSampler {
    fn start(lab: &TestLab) -> TcSampler {
        let (ns, dev) = (lab.lab.sender_ns.clone(), lab.lab.sender_dev.clone());
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut samples = Vec::new();
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                let root = scanprof::system::netstat::qdisc_stats(Some(&ns), &dev)
                    .unwrap_or_else(|e| panic!("tc qdisc show failed: {e:#}"))
                    .into_iter()
                    .find(|q| q.parent.is_none())
                    .expect("no root qdisc on the sender's veth");
                samples.push((root.sent_packets + root.drops + root.qlen, root.drops));
            }
            samples
        });
        TcSampler { stop, thread }
    }

    fn stop(self) -> Vec<(u64, u64)> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.join().expect("the tc sampler panicked")
    }
}

/// tc's drop count at the moment `handed` packets had reached the qdisc, interpolated between
/// the samples around it.
fn drops_when_handed(samples: &[(u64, u64)], handed: u64) -> u64 {
    let after = samples
        .iter()
        .position(|s| s.0 >= handed)
        .unwrap_or_else(|| panic!("tc never saw {handed} packets: {:?}", samples.last()));
    assert!(after > 0, "tc's first sample is already past {handed} packets");
    let (a, b) = (samples[after - 1], samples[after]);
    let f = (handed - a.0) as f64 / (b.0 - a.0).max(1) as f64;
    a.1 + (f * (b.1 - a.1) as f64).round() as u64
}

/// `scanprof attach -p PID --json --duration D`, started (its `started` line read).
fn attach(pid: u32, duration_s: u32) -> Proc {
    let mut p = Proc::scanprof(&[
        "attach".to_string(),
        "-p".into(),
        pid.to_string(),
        "--json".into(),
        "--duration".into(),
        duration_s.to_string(),
    ]);
    p.wait_for_json("started", patience(Duration::from_secs(20)));
    p
}

fn count(s: &Summary, stage: &str) -> u64 {
    *s.stage_counts
        .get(stage)
        .unwrap_or_else(|| panic!("no {stage} in {:?}", s.stage_counts))
}

/// The family's packets after attach reach every stage after the syscall: dev_queue equals the
/// packets the send syscalls accepted, and so do the packets a driver transmitted plus the
/// family's drops before the device (those in the sender's namespace: a loss at the receiver,
/// such as a full socket buffer, is of a packet the device had already transmitted), give or
/// take the sends in flight when the family was registered (a call that entered before it is
/// not counted at the syscall, yet its packet may be at the device when another thread's call
/// has registered the socket) and, at the driver, the packets a qdisc held at attach
/// (`queued_at_attach`: they leave it while scanprof watches).
fn assert_whole_funnel(s: &Summary, lab: &TestLab, what: &str, queued_at_attach: u64) {
    let packets = count(s, "syscall_packets");
    let slack = in_flight_slack(packets);
    let before_device = target_loss(s, lab.sender_netns);
    for (stage, n, slack) in [
        ("dev_queue", count(s, "dev_queue"), slack),
        (
            "dev_xmit + the sender side's target loss",
            count(s, "dev_xmit") + before_device,
            slack + queued_at_attach,
        ),
    ] {
        assert!(
            n.abs_diff(packets) <= slack,
            "{what}: {stage} {n} vs {packets} packets through the send syscalls (slack {slack}): {:?}",
            s.stage_counts
        );
    }
    let after_device = target_loss(s, lab.target_netns);
    assert!(
        after_device <= count(s, "dev_xmit"),
        "{what}: {after_device} packets lost at the receiver, more than the {} transmitted",
        count(s, "dev_xmit")
    );
    let fault: Vec<_> = s
        .verdicts
        .iter()
        .filter(|v| v.cause == Cause::MeasurementFault)
        .collect();
    assert!(fault.is_empty(), "{what}: {fault:#?}");
}

/// Packets whose send entered before the family was registered and that a stage after the
/// syscall may still see: a handful at the boundary.
/// The family's packets lost (class target_loss) in network namespace `netns`, by the drop rows.
fn target_loss(s: &Summary, netns: u32) -> u64 {
    s.drops
        .iter()
        .filter(|d| d.netns == netns && d.class == DropClass::TargetLoss)
        .map(|d| d.count)
        .sum()
}

fn in_flight_slack(packets: u64) -> u64 {
    2 + packets / 2000
}

/// The sender's packets sent between attaching the programs and registering the family: nobody's
/// at every stage (not counted at the syscall either), so a drop of one is an `unrelated` row.
/// A few milliseconds of sending, more on a loaded machine (57 of 10,123 drops seen under CI's
/// load); attribution broken as in issue 21 makes it all of them.
fn before_registration(packets: u64) -> u64 {
    in_flight_slack(packets).max(packets / 50)
}

#[test]
fn attached_mid_send_without_a_qdisc_every_stage_counts_the_packets() {
    let test = privileged();
    let lab = TestLab::new(None);
    let sink = lab.sink(PORT);

    // scanprof stays attached until the sender exits: its last sample then reads quiet counters
    // (a sample reads the thread table and the device table one after the other, and under
    // load a sender still sending fills that gap with packets one table has and the other not).
    // The sender is ended (SIGTERM: it stops and reports what it sent) 2 s after scanprof has
    // attached, however long attaching took: seconds in an emulated VM under load, where a
    // sender with a fixed length had ended before scanprof attached.
    let argv = sender_argv(&lab.to(PORT), 20_000.0, 20_000 * 600, 600.0, &[]);
    let mut sender = sending(&lab, &argv, Some(&sink));
    let scanprof = attach(sender.pid(), 600);
    std::thread::sleep(patience(ATTACHED_BEFORE_END));
    assert!(sender.running(), "the sender ended by itself");
    sender.signal(Signal::SIGTERM);
    let sender = sender.finish(Duration::from_secs(15));
    let run = scanprof.finish(RUN_TIMEOUT);
    let rx = stop_sink(sink);
    run.assert_success();
    sender.assert_success();
    assert_all_probes_attached(&run.started());

    let s = run.summary();
    precision::assert_precise(
        "attached_mid_send_without_a_qdisc_every_stage_counts_the_packets",
        &s,
        &run.of_type("sample"),
    );
    eprintln!(
        "no qdisc: stages {:?}; receiver {} of the sender's {}",
        s.stage_counts,
        rx.packets,
        sender.sender_report()["sent"]
    );
    assert!(
        count(&s, "syscall_packets") > 20_000,
        "too few packets to test with: {:?}",
        s.stage_counts
    );
    // The receiver had every packet of the attached window but those lost on its side (in an
    // emulated VM a receiver falls behind 20,000 pps: 18,810 of 215,023 lost to it once).
    let lost_at_receiver = target_loss(&s, lab.target_netns);
    assert!(
        count(&s, "syscall_packets") - lost_at_receiver <= rx.packets,
        "the receiver had {} packets, fewer than the attached window's {} less {lost_at_receiver} lost at it",
        rx.packets,
        count(&s, "syscall_packets")
    );
    assert_whole_funnel(&s, &lab, "no qdisc", 0);
    // Already the first tick: the sockets that existed at attach are known before its first
    // packet is judged (issue 13: 420 of 4,840 at dev_queue in one first tick).
    let first = &run.of_type("sample")[0];
    let tick = |stage: &str| {
        first["stages"]
            .as_array()
            .and_then(|a| a.iter().find(|st| st["name"] == stage))
            .and_then(|st| st["count"].as_u64())
            .unwrap_or_else(|| panic!("no {stage} in the first sample: {first}"))
    };
    let (sent, queued) = (tick("syscall_packets"), tick("dev_queue"));
    eprintln!("no qdisc, first tick: {sent} packets at the syscall, {queued} at dev_queue");
    assert!(sent > 0, "the first tick saw no packet: {first}");
    // The first tick is read while the sender sends: besides the sends in flight at
    // registration, the packets sent between reading the thread table and the device table
    // are in one and not yet the other (14 of 22,971 in a 6.1 guest), so 1% more slack. The
    // fault it guards against was thousands off (420 of 4,840; 11 of 6,070).
    let slack = in_flight_slack(sent) + sent / 100;
    assert!(
        queued.abs_diff(sent) <= slack,
        "first tick: dev_queue {queued} vs {sent} packets through the send syscalls (slack {slack})"
    );
    let lab_loss: Vec<_> = s
        .drops
        .iter()
        .filter(|d| d.netns == lab.sender_netns && d.class == DropClass::TargetLoss)
        .collect();
    assert!(lab_loss.is_empty(), "the sender side lost packets: {lab_loss:?}");

    drop(run);
    test.assert_released("scanprof attach");
    lab.destroy();
}

#[test]
fn attached_mid_send_behind_a_tbf_the_qdisc_drops_are_the_senders_and_equal_tc() {
    let test = privileged();
    let lab = TestLab::new(Some(TbfConfig {
        rate: "2mbit".into(),
        burst: "4kb".into(),
        limit: "10kb".into(),
    }));
    let sink = lab.sink(PORT);

    // 5000 pps x 512 B = 20 Mbit/s into a 2 Mbit/s bucket: ~90% dropped, for 5 s. scanprof
    // attaches after 1 s and ends when the sender exits, so the attached window holds the
    // sender's last `syscall_packets` packets; tc, sampled all along, says how many drops it
    // had counted when the packet before them reached the qdisc.
    // In an emulated VM attaching takes seconds: the send lasts as much longer as the waits do.
    let send_s = patience(Duration::from_secs(5)).as_secs_f64();
    let argv = sender_argv(
        &lab.to(PORT),
        5000.0,
        (5000.0 * send_s) as u64,
        send_s,
        &["--size", "512"],
    );
    let tc = TcSampler::start(&lab);
    let sender = sending(&lab, &argv, Some(&sink));
    let run = attach(sender.pid(), 30).finish(RUN_TIMEOUT);
    let sender = sender.finish(Duration::from_secs(15));
    std::thread::sleep(Duration::from_millis(100));
    let samples = tc.stop();
    let _ = stop_sink(sink);
    run.assert_success();
    sender.assert_success();
    assert_all_probes_attached(&run.started());

    let sent = sender.sender_report()["sent"]
        .as_u64()
        .expect("sender report without sent");
    let before = sent - count(&run.summary(), "syscall_packets");
    let tc_window = samples.last().map_or(0, |l| l.1) - drops_when_handed(&samples, before);
    let s = run.summary();
    precision::assert_precise(
        "attached_mid_send_behind_a_tbf_the_qdisc_drops_are_the_senders_and_equal_tc",
        &s,
        &run.of_type("sample"),
    );
    let pid = sender.pid;
    let qdisc: Vec<_> = s
        .drops
        .iter()
        .filter(|d| lab.at(Side::Sender, d) && d.reason == "QDISC_DROP")
        .collect();
    let ours: u64 = qdisc
        .iter()
        .filter(|d| d.class == DropClass::TargetLoss && d.pid == Some(pid))
        .map(|d| d.count)
        .sum();
    eprintln!(
        "tbf: scanprof {ours} QDISC_DROP of pid {pid}, tc {tc_window} over the attached window \
         (from {before} of {sent} packets; {} tc samples); rows {qdisc:?}",
        samples.len()
    );
    assert!(
        tc_window > 5_000,
        "the tbf dropped too little to test with: {tc_window}"
    );
    // Every QDISC_DROP on the lab's veth is the sender's own loss, but for those sent before the
    // sender was registered (they are nobody's at any stage).
    let not_ours: u64 = qdisc
        .iter()
        .filter(|d| !(d.class == DropClass::TargetLoss && d.pid == Some(pid)))
        .map(|d| d.count)
        .sum();
    assert!(
        not_ours <= before_registration(ours),
        "{not_ours} QDISC_DROP not the sender's loss: {qdisc:?}"
    );
    assert_within(
        "QDISC_DROP vs tc over the attached window",
        ours as f64,
        tc_window as f64,
        0.01,
    );
    // The tbf's 10 kB queue holds at most 20 of these 512-byte datagrams at attach.
    assert_whole_funnel(&s, &lab, "tbf", 20);
    let top = s.verdicts.first().map(|v| v.cause.as_str());
    assert!(
        s.verdicts.iter().any(|v| v.cause == Cause::QdiscDrop),
        "no qdisc_drop verdict (top {top:?}): {:#?}",
        s.verdicts
    );

    drop(run);
    test.assert_released("scanprof attach");
    lab.destroy();
}

#[test]
fn attached_mid_send_to_a_closed_port_the_drops_are_expected() {
    let test = privileged();
    let lab = TestLab::new(None);

    // Attached until the sender exits, as above.
    let argv = sender_argv(&lab.to(CLOSED_PORT), 5000.0, 20_000, 4.0, &[]);
    let sender = sending(&lab, &argv, None);
    let run = attach(sender.pid(), 30).finish(RUN_TIMEOUT);
    let sender = sender.finish(Duration::from_secs(15));
    run.assert_success();
    sender.assert_success();
    assert_all_probes_attached(&run.started());

    let s = run.summary();
    precision::assert_precise(
        "attached_mid_send_to_a_closed_port_the_drops_are_expected",
        &s,
        &run.of_type("sample"),
    );
    let pid = sender.pid;
    let packets = count(&s, "syscall_packets");
    let no_socket: Vec<_> = s
        .drops
        .iter()
        .filter(|d| lab.at(Side::Target, d) && d.reason == "NO_SOCKET")
        .collect();
    let expected: u64 = no_socket
        .iter()
        .filter(|d| d.class == DropClass::Expected && d.pid == Some(pid))
        .map(|d| d.count)
        .sum();
    let others: u64 = no_socket.iter().map(|d| d.count).sum::<u64>() - expected;
    eprintln!("closed port: {expected} NO_SOCKET at the target for {packets} packets; rows {no_socket:?}");
    // The sender's expected drops, but for those sent before the sender was registered
    // (nobody's at any stage: unrelated).
    assert!(
        others <= before_registration(packets),
        "{others} NO_SOCKET at the target not the sender's expected drops: {no_socket:?}"
    );
    assert!(
        expected.abs_diff(packets) <= in_flight_slack(packets),
        "{expected} NO_SOCKET drops vs {packets} packets sent after attach"
    );
    assert_whole_funnel(&s, &lab, "closed port", 0);
    let loss: Vec<_> = s
        .drops
        .iter()
        .filter(|d| lab.inside(d) && matches!(d.class, DropClass::TargetLoss | DropClass::ReplyLoss))
        .collect();
    assert!(loss.is_empty(), "closed-port probes counted as loss: {loss:?}");

    drop(run);
    test.assert_released("scanprof attach");
    lab.destroy();
}

/// A sender with two sockets open before attach and a third opened after it, taking turns at
/// 2000 packets per second for 5 s; the third sends to its own port, so its receiver counts
/// only packets sent after attach.
const TWO_SOCKETS_AND_A_LATE_ONE: &str = r#"
import json, socket, sys, time
dst, port, late_port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
socks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(2)]
late = None
sent = [0, 0, 0]
t0 = time.monotonic()
n = 0
while time.monotonic() - t0 < 5.0 and n < 12000:
    if late is None and time.monotonic() - t0 > 2.5:
        late = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        socks.append(late)
    i = n % len(socks)
    socks[i].sendto(b"x" * 64, (dst, late_port if socks[i] is late else port))
    sent[i] += 1
    n += 1
    wait = t0 + n / 2000.0 - time.monotonic()
    if wait > 0:
        time.sleep(wait)
print(json.dumps({"sent": n, "per_socket": sent}))
"#;

#[test]
fn attached_mid_send_with_two_sockets_and_one_opened_later_every_stage_counts() {
    let test = privileged();
    let lab = TestLab::new(None);
    let sink = lab.sink(PORT);
    let late_sink = lab.sink(PORT_LATE);

    let addr = lab.lab.target_addr.to_string();
    let argv: Vec<String> = [
        "python3",
        "-c",
        TWO_SOCKETS_AND_A_LATE_ONE,
        addr.as_str(),
        &PORT.to_string(),
        &PORT_LATE.to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let sender = sending(&lab, &argv, Some(&sink));
    let run = attach(sender.pid(), 30).finish(RUN_TIMEOUT);
    let sender = sender.finish(Duration::from_secs(15));
    let rx = stop_sink(sink);
    let late_rx = stop_sink(late_sink);
    run.assert_success();
    sender.assert_success();
    assert_all_probes_attached(&run.started());

    let s = run.summary();
    precision::assert_precise(
        "attached_mid_send_with_two_sockets_and_one_opened_later_every_stage_counts",
        &s,
        &run.of_type("sample"),
    );
    let report: Value = sender
        .lines
        .iter()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("no report from the python sender\n{}", sender.context()));
    eprintln!(
        "two sockets and a late one: stages {:?}; sender {report}; receivers {} + {} (late socket)",
        s.stage_counts, rx.packets, late_rx.packets
    );
    let packets = count(&s, "syscall_packets");
    assert!(
        late_rx.packets > 1000,
        "the late socket sent too little: {late_rx:?}"
    );
    assert!(
        packets > late_rx.packets + 2000,
        "too few packets after attach: {packets}"
    );
    assert!(packets <= rx.packets + late_rx.packets);
    assert_whole_funnel(&s, &lab, "two sockets and a late one", 0);

    drop(run);
    test.assert_released("scanprof attach");
    lab.destroy();
}

/// Every map of probes/include/shared.h is one map in the kernel while scanprof runs: the
/// map ids behind scanprof's file descriptors (/proc/PID/fdinfo), named by `bpftool map show`,
/// have one id per name. Before the shared-map list was derived from the objects, `sock_gen`
/// and `last_sock` were loaded once per object (six of each).
#[test]
fn every_map_declared_in_shared_h_is_loaded_once() {
    let test = privileged();
    let mut target = Proc::spawn(
        "sleep",
        {
            let mut c = std::process::Command::new("sleep");
            c.arg("30");
            c
        },
        false,
    );
    // Attached until told to stop: bpftool must find every map while scanprof holds it.
    let mut scanprof = attach(target.pid(), 60);
    let mut ids: Vec<u64> = std::fs::read_dir(format!("/proc/{}/fdinfo", scanprof.pid()))
        .expect("cannot list scanprof's fdinfo")
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path()).ok())
        .filter_map(|info| {
            info.lines()
                .find_map(|l| l.strip_prefix("map_id:").map(|v| v.trim().parse().unwrap()))
        })
        .collect();
    ids.sort_unstable();
    ids.dedup();
    let mut by_name: std::collections::BTreeMap<String, Vec<u64>> = Default::default();
    for id in &ids {
        let out = std::process::Command::new("bpftool")
            .args(["-j", "map", "show", "id", &id.to_string()])
            .output()
            .expect("cannot run bpftool");
        assert!(
            out.status.success(),
            "bpftool map show id {id}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "bpftool map show id {id}: {e}: {}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
        by_name
            .entry(v["name"].as_str().unwrap_or("").to_string())
            .or_default()
            .push(*id);
    }
    scanprof.signal(nix::sys::signal::Signal::SIGINT);
    let run = scanprof.finish(RUN_TIMEOUT);
    target.signal(nix::sys::signal::Signal::SIGKILL);
    let _ = target.finish(Duration::from_secs(5));
    run.assert_success();
    eprintln!("scanprof's maps: {by_name:?}");

    for name in [
        "family",
        "threads",
        "target_socks",
        "flows",
        "target_devs",
        "events",
        "health",
        "sock_gen",
        "last_sock",
    ] {
        assert!(
            by_name.contains_key(name),
            "no map {name} among scanprof's: {by_name:?}"
        );
    }
    let twice: Vec<_> = by_name
        .iter()
        .filter(|(name, ids)| !name.contains('.') && ids.len() > 1)
        .collect();
    assert!(twice.is_empty(), "maps loaded more than once: {twice:?}");
    drop(run);
    test.assert_released("scanprof attach");
}
