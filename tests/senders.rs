//! Privileged tests of the reference sender (`scanprof send`): every pacer and every send method
//! sends short bounded bursts into a private namespace lab, and what the sender reports is
//! checked against the lab's UDP receiver and the target veth's own counter.
//!
//! They need root (namespaces, raw and packet sockets) and fail, never skip, without it.
//! Run: `cargo test --test it senders::`

use crate::common;

use std::time::Duration;

use serde_json::Value;

use common::*;
use scanprof::netlab::{Lab, LabConfig, Side, SinkReport};

/// UDP port of the lab receiver.
const PORT: u16 = 9100;
/// Longest a sender process may run.
const TIMEOUT: Duration = Duration::from_secs(30);

/// A lab for one test, deleted (and checked gone) at the end.
struct SenderLab {
    lab: Lab,
    names: Vec<String>,
}

impl SenderLab {
    fn new() -> SenderLab {
        let lab = Lab::create(&LabConfig::default())
            .unwrap_or_else(|e| panic!("cannot create the namespace lab: {e:#}"));
        let names = vec![lab.sender_ns.clone(), lab.target_ns.clone()];
        SenderLab { lab, names }
    }

    /// Runs `scanprof send --to TARGET:PORT --rate R --count N --duration 10 --json EXTRA...` in
    /// the sender namespace while the lab receiver counts; returns the report and the count.
    fn send(&self, rate: u32, count: u64, extra: &[&str]) -> (Value, SinkReport) {
        let sink = self
            .lab
            .udp_sink(PORT)
            .unwrap_or_else(|e| panic!("cannot start the lab receiver: {e:#}"));
        let to = format!("{}:{PORT}", self.lab.target_addr);
        let mut argv = sender_argv(&to, f64::from(rate), count, 10.0, extra);
        let program = argv.remove(0);
        let cmd = self.lab.command_in_sender(&program, &argv);
        let done = Proc::spawn("scanprof send", cmd, false).finish(TIMEOUT);
        done.assert_success();
        let received = sink.stop();
        assert_eq!(
            received.untimed, 0,
            "datagrams without a kernel timestamp: {received:?}"
        );
        let objects = done.objects();
        assert_eq!(objects.len(), 1, "one JSON object expected\n{}", done.context());
        (objects[0].clone(), received)
    }

    fn destroy(self) {
        self.lab
            .destroy()
            .unwrap_or_else(|e| panic!("lab teardown failed: {e:#}"));
        assert_namespaces_gone(&self.names);
    }
}

/// Everything sent arrived and nothing failed, and the sender's rate is its schedule's, checked by
/// what holds on a busy machine too (issue 29): a deadline pacer never starts a slot early on its
/// own clock, so its rate (the packets before its last call over the time from slot 0's due time
/// to that call's start, `rate_window_ns`) is never above the request, and falls below it by no
/// more than its own latest start explains (the last call was due (sent-1)/rate after slot 0 and
/// started at most `lateness_ns.max` after it was due). The tsc pacer's clock is its calibrated
/// TSC: its ns last `1 + slot_error_ppm / 10^6` CLOCK_MONOTONIC ns (the TSC's rate over the run),
/// which scales both bounds. The receiver's span from the first datagram to the last (kernel
/// timestamps) is the sender's from its first call's return to its last call's, give or take the
/// two calls' own durations. Whether the machine keeps the rate is a figure of scheduling:
/// `cargo bench --bench senders` measures it.
#[track_caller]
fn assert_exact_and_on_schedule(what: &str, report: &Value, rx: &SinkReport, rate: u32, count: u64) {
    assert_eq!(
        (u64_of(report, "sent"), u64_of(report, "failed")),
        (count, 0),
        "{what}: {report}"
    );
    assert_eq!(rx.packets, count, "{what}: the receiver got {rx:?}; {report}");
    let rate = f64::from(rate);
    // CLOCK_MONOTONIC ns per ns of the pacer's clock; the rate window is put in CLOCK_MONOTONIC
    // with it, from two paired (CLOCK_MONOTONIC, TSC) readings tens of ns wide.
    let scale = 1.0 + report["calibration"]["slot_error_ppm"].as_f64().unwrap_or(0.0) * 1e-6;
    let achieved = f64_of(report, "achieved_pps");
    assert!(
        achieved <= rate / scale * (1.0 + 1e-6),
        "{what}: {achieved:.3} pps is above the request of {rate} on the pacer's clock: it ran \
         ahead; {report}"
    );
    let window_ns = u64_of(report, "rate_window_ns") as f64;
    let latest_due_ns = (count - 1) as f64 * 1e9 / rate;
    let late_max_ns = u64_of(&report["lateness_ns"], "max") as f64;
    assert!(
        window_ns <= (latest_due_ns + late_max_ns) * scale + 1_000.0,
        "{what}: the last call started {window_ns} ns into the schedule, later than its latest due \
         time ({latest_due_ns} ns) plus the latest start the sender measured ({late_max_ns} ns), \
         times {scale} for the pacer's clock; {report}"
    );
    assert_within(
        &format!("{what}: accuracy = achieved / requested"),
        f64_of(report, "accuracy"),
        achieved / rate,
        1e-9,
    );
    let tx_span_ns = u64_of(report, "last_ns").saturating_sub(u64_of(report, "first_ns")) as f64;
    let rx_span_ns = rx.last_ns.saturating_sub(rx.first_ns) as f64;
    assert!(
        (rx_span_ns - tx_span_ns).abs() <= CALL_SPAN_NS,
        "{what}: the receiver's span {rx_span_ns} ns against the sender's {tx_span_ns} ns; {rx:?}; {report}"
    );
}

/// How far the receiver's first-to-last span may be from the sender's: a datagram is stamped
/// inside the send call that carries it, the sender's times are those calls' returns, so the two
/// spans differ by the first and the last call's durations: microseconds, or a scheduler slice or
/// two when the sender is preempted inside a call (a few ms beside a CPU hog).
const CALL_SPAN_NS: f64 = 20e6;

#[test]
fn every_pacer_keeps_its_schedule_at_1k_and_10k_pps_into_a_lab() {
    let test = privileged();
    let lab = SenderLab::new();
    for pacer in ["tsc", "clock", "sleep"] {
        for (rate, count) in [(1_000u32, 1_000u64), (10_000, 5_000)] {
            let what = format!("--pacer {pacer} at {rate} pps");
            let (report, rx) = lab.send(rate, count, &["--pacer", pacer]);
            assert_eq!(report["pacer"], pacer, "{report}");
            assert_eq!(report["slot"], "deadline", "{report}");
            assert_exact_and_on_schedule(&what, &report, &rx, rate, count);
            // One call a packet: the calls' starts span (count-1) mean gaps, from the first
            // call's start (due at the schedule's start, at most the latest lateness after it)
            // to the last call's (the end of the rate window), on the pacer's clock.
            let scale = 1.0 + report["calibration"]["slot_error_ppm"].as_f64().unwrap_or(0.0) * 1e-6;
            let starts_span_ns = f64_of(&report["gap_ns"], "mean") * (count - 1) as f64 * scale;
            let window_ns = u64_of(&report, "rate_window_ns") as f64;
            let late_max_ns = u64_of(&report["lateness_ns"], "max") as f64;
            assert!(
                starts_span_ns <= window_ns + 1_000.0 && starts_span_ns + late_max_ns + 1_000.0 >= window_ns,
                "{what}: the calls' starts span {starts_span_ns} ns, the rate window {window_ns} ns, \
                 the latest start {late_max_ns} ns; {report}"
            );
            let cal = &report["calibration"];
            if pacer == "tsc" {
                assert_eq!(cal["source"], "calibrate", "{report}");
                assert!(
                    f64_of(cal, "tsc_hz") > 1e8 && u64_of(cal, "took_ns") >= 100_000_000,
                    "{cal}"
                );
                // Calibrated over 100 ms against CLOCK_MONOTONIC with readings tens of ns
                // wide, the TSC clock keeps its second over the run to well under a ppm here;
                // 100 ppm is room for a reading a hog stretched, and fails a wrong conversion.
                assert!(f64_of(cal, "slot_error_ppm").abs() < 100.0, "{cal}");
            } else {
                assert!(cal.is_null(), "{report}");
            }
        }
    }
    lab.destroy();
    test.assert_released("the test's scanprof processes ended");
}

#[test]
fn every_send_method_is_counted_by_the_receiver_and_the_veth() {
    let test = privileged();
    let lab = SenderLab::new();
    let (rate, count) = (10_000u32, 3_000u64);
    let methods: [&[&str]; 5] = [
        &["--method", "sendto"],
        &["--method", "raw"],
        &["--method", "sendmmsg", "--batch", "16"],
        &["--method", "packet"],
        &["--method", "packet", "--ring", "--batch", "16"],
    ];
    for extra in methods {
        let what = extra.join(" ");
        let rx_before = lab.lab.link(Side::Target).expect("ip -s link").rx_packets;
        let (report, rx) = lab.send(rate, count, extra);
        assert_eq!(report["method"], extra[1], "{report}");
        assert_exact_and_on_schedule(&what, &report, &rx, rate, count);
        // The lab is quiet (no ARP, no IPv6): the target veth saw exactly these packets.
        let rx_after = lab.lab.link(Side::Target).expect("ip -s link").rx_packets;
        assert_eq!(rx_after - rx_before, count, "{what}: veth rx");
    }
    lab.destroy();
    test.assert_released("the test's scanprof processes ended");
}

/// The slot models differ visibly: with the sleep pacer at 10k pps (100 us slots) each wake-up
/// is tens of us late; per-packet slots lose that time for good, deadline slots make it up.
#[test]
fn per_packet_slots_fall_short_where_deadline_slots_catch_up() {
    let test = privileged();
    let lab = SenderLab::new();
    let (rate, count) = (10_000u32, 5_000u64);
    let (deadline, rx) = lab.send(rate, count, &["--pacer", "sleep", "--slot", "deadline"]);
    assert_exact_and_on_schedule("deadline slots", &deadline, &rx, rate, count);
    let (per_packet, rx) = lab.send(rate, count, &["--pacer", "sleep", "--slot", "per-packet"]);
    assert_eq!(per_packet["slot"], "per-packet");
    assert_eq!(
        (u64_of(&per_packet, "sent"), rx.packets),
        (count, count),
        "{per_packet}"
    );
    let lateness = f64_of(&per_packet["lateness_ns"], "mean");
    let accuracy = f64_of(&per_packet, "accuracy");
    // Each slot lasts a period plus its lateness: accuracy ~ period / (period + lateness).
    let expected = 1e5 / (1e5 + lateness);
    assert!(accuracy < 0.99, "per-packet slots kept the rate: {per_packet}");
    assert_within(
        "per-packet accuracy vs period/(period+lateness)",
        accuracy,
        expected,
        0.02,
    );
    lab.destroy();
    test.assert_released("the test's scanprof processes ended");
}

#[test]
fn an_unlimited_send_reports_no_accuracy_and_matches_the_receiver() {
    let test = privileged();
    let lab = SenderLab::new();
    let (report, rx) = lab.send(0, 4_000, &["--method", "sendmmsg"]);
    assert_eq!(report["pacer"], "none");
    assert!(
        report["requested_pps"].is_null() && report["accuracy"].is_null(),
        "{report}"
    );
    assert_eq!((u64_of(&report, "sent"), u64_of(&report, "failed")), (4_000, 0));
    assert_eq!(rx.packets, 4_000, "{rx:?}");
    assert!(f64_of(&report, "achieved_pps") > 10_000.0, "{report}");
    lab.destroy();
    test.assert_released("the test's scanprof processes ended");
}

/// The exported pacing and send functions are in the binary's symbol table, for uprobes.
#[test]
fn the_sender_symbols_are_exported() {
    let out = std::process::Command::new("nm")
        .arg(scanprof_bin())
        .output()
        .unwrap_or_else(|e| panic!("cannot run nm: {e}"));
    let symbols = String::from_utf8_lossy(&out.stdout);
    for name in [
        "scanprof_sender_init_slot",
        "scanprof_sender_calibrate",
        "scanprof_sender_wait_slot",
        "scanprof_sender_send",
        "scanprof_sender_tsc_slot",
    ] {
        assert!(
            symbols.lines().any(|l| l.ends_with(&format!(" T {name}"))),
            "{name} is not a global text symbol of {}",
            scanprof_bin()
        );
    }
    // The delay scanprof_sender_tsc_slot derives, read by the profile at its return.
    let global = "scanprof_sender_tsc_delay";
    assert!(
        symbols
            .lines()
            .any(|l| l.ends_with(&format!(" B {global}")) || l.ends_with(&format!(" D {global}"))),
        "{global} is not a global data symbol of {}",
        scanprof_bin()
    );
}

/// A network namespace of this test's own, deleted on drop.
struct PrivateNetns(String);

impl PrivateNetns {
    fn new(suffix: &str) -> PrivateNetns {
        let name = format!("sp{}-{suffix}", std::process::id());
        let ip = |args: &[&str]| {
            let out = std::process::Command::new("ip").args(args).output().expect("ip");
            assert!(
                out.status.success(),
                "ip {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        ip(&["netns", "add", &name]);
        let ns = PrivateNetns(name.clone());
        ip(&["-n", &name, "link", "set", "lo", "up"]);
        ns
    }

    fn lo_tx_packets(&self) -> u64 {
        let out = std::process::Command::new("ip")
            .args(["-n", &self.0, "-s", "-j", "link", "show", "lo"])
            .output()
            .expect("ip");
        let v: Value = serde_json::from_slice(&out.stdout).expect("ip -j output");
        v[0]["stats64"]["tx"]["packets"].as_u64().expect("tx packets")
    }
}

impl Drop for PrivateNetns {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip")
            .args(["netns", "delete", &self.0])
            .status();
    }
}

/// `scanprof send` sends to the address its user names, beyond loopback and the labs: here
/// 192.0.2.1 (a documentation address) on the loopback device of a namespace this test makes,
/// so that nothing leaves it. It says what it will send first. Held to local destinations
/// (SCANPROF_SEND_LOCAL_ONLY=1, as the tests' other sends are), it refuses the same address.
#[test]
fn a_named_address_beyond_loopback_is_sent_to_after_saying_what_goes_out() {
    let test = privileged();
    let ns = PrivateNetns::new("named");
    let add = std::process::Command::new("ip")
        .args(["-n", &ns.0, "addr", "add", "192.0.2.1/32", "dev", "lo"])
        .status()
        .expect("ip");
    assert!(add.success());
    let send = |local_only: bool| {
        let mut cmd = std::process::Command::new("ip");
        cmd.args([
            "netns",
            "exec",
            &ns.0,
            scanprof_bin(),
            "send",
            "--to",
            "192.0.2.1:9",
        ]);
        cmd.args(["--rate", "1000", "--count", "20", "--json"]);
        if local_only {
            cmd.env("SCANPROF_SEND_LOCAL_ONLY", "1");
        } else {
            cmd.env_remove("SCANPROF_SEND_LOCAL_ONLY");
        }
        cmd.output().expect("scanprof send")
    };
    let before = ns.lo_tx_packets();
    let out = send(false);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let report: Value = serde_json::from_slice(&out.stdout).expect("one JSON report");
    let sent_on_lo = ns.lo_tx_packets() - before;
    eprintln!(
        "named address: {stderr}sent {} (lo tx +{sent_on_lo})",
        report["sent"]
    );
    assert!(
        stderr.contains(
            "scanprof send: sending UDP to 192.0.2.1:9: up to 20 packets of 64 payload bytes, at 1000 pps"
        ),
        "{stderr}"
    );
    assert_eq!((u64_of(&report, "sent"), u64_of(&report, "failed")), (20, 0));
    // The datagrams (and the port-unreachable replies) stayed on the namespace's lo.
    assert!(sent_on_lo >= 20, "lo sent {sent_on_lo}");

    let refused = send(true);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success());
    assert!(stderr.contains("refusing to send to 192.0.2.1"), "{stderr}");
    test.assert_released("the test's scanprof processes ended");
}
