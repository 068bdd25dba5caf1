//! The diagnosis scenario suite (issue 5): each test stages one known fault with
//! `scanprof lab SCENARIO --json` (the reference sender in a namespace lab the command creates
//! and removes), and checks that the top verdict of the relevant kind names the staged cause
//! and, where the truth is measurable, that its share is within 10 points of it. The truth is
//! computed here from the counters the lab line reports and scanprof does not use: the
//! namespaces' SNMP counters, tc's qdisc counters and the sender's /proc/PID/schedstat.
//!
//! They need root (BPF, namespaces) and fail, never skip, without it; they run one at a time.
//! Each sends for 4 s, bounded in count and time, into its own lab only.
//!
//! Run: `cargo test --test it diagnosis_suite::`

use crate::common;

use std::time::Duration;

use serde_json::Value;

use common::*;
use scanprof::analysis::verdict::{Cause, Confidence, Kind};
use scanprof::analysis::Summary;
use scanprof::collect::DropClass;

/// Seconds each scenario's sender runs.
const SEND_S: f64 = 4.0;
/// Longest one `scanprof lab` may take (set-up, the run, the drain, tear-down).
const LAB_TIMEOUT: Duration = Duration::from_secs(40);
/// How close a verdict's share must be to the measured truth (10 points).
const TOLERANCE: f64 = 0.10;

/// One `scanprof lab SCENARIO --json` run: its summary and its `lab` line.
struct LabRun {
    summary: Summary,
    lab: Value,
    context: String,
}

/// `test` checks, once the lab process has ended, that it released its BPF programs.
fn run_lab(test: &Privileged, scenario: &str) -> LabRun {
    let args: Vec<String> = ["lab", scenario, "--json", "--duration", &SEND_S.to_string()]
        .map(String::from)
        .to_vec();
    let done = Proc::scanprof(&args).finish(LAB_TIMEOUT);
    done.assert_success();
    test.assert_released(&format!("scanprof lab {scenario}"));
    // The lab's namespaces are named after the lab process: none may be left.
    let prefix = format!("sp{}-", done.pid);
    let left: Vec<String> = std::fs::read_dir("/run/netns")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&prefix))
                .collect()
        })
        .unwrap_or_default();
    assert!(left.is_empty(), "lab namespaces left behind: {left:?}");
    let mut labs = done.of_type("lab");
    assert_eq!(labs.len(), 1, "expected one lab line\n{}", done.context());
    // Every line of the report true (issue 28): the whole verdict and warning list printed,
    // none of the mechanisms the checker knows.
    precision::assert_precise_run(&format!("lab {scenario}"), &done);
    suite_row(scenario, &labs[0]);
    LabRun {
        summary: done.summary(),
        lab: labs.pop().unwrap(),
        context: done.context(),
    }
}

/// Prints the scenario's row of docs/diagnosis.md's suite table from the lab line's own check
/// (what `scanprof lab --suite` prints): expected cause, top verdict of that kind, its share,
/// the truth, and whether they match.
fn suite_row(scenario: &str, lab: &Value) {
    let c = &lab["check"];
    let pct = |v: &Value| {
        v.as_f64()
            .map_or("-".to_string(), |x| format!("{:.1}%", x * 100.0))
    };
    println!(
        "suite row: | {scenario} | {} `{}` | `{}` ({}) | {} | {} | {} |",
        c["expected_kind"].as_str().unwrap_or("-"),
        c["expected_cause"].as_str().unwrap_or("-"),
        c["top_cause"].as_str().unwrap_or("-"),
        c["top_confidence"].as_str().unwrap_or("-"),
        pct(&c["top_share"]),
        pct(&c["truth"]),
        if c["ok"].as_bool() == Some(true) {
            "yes"
        } else {
            "no"
        }
    );
}

impl LabRun {
    fn f64(&self, key: &str) -> f64 {
        self.lab[key]
            .as_f64()
            .unwrap_or_else(|| panic!("lab line without {key}: {}", self.lab))
    }

    /// 1 - delivered / (requested x duration): the gap, delivered being the IP packets the
    /// target namespace received.
    fn gap_truth(&self) -> f64 {
        let delivered = self.f64("target_ip_in");
        let asked = self.f64("requested_pps") * self.f64("duration_s");
        (1.0 - delivered / asked).clamp(0.0, 1.0)
    }

    /// The gap less the sender's own run-queue delay (other tasks' part of it).
    fn gap_less_run_delay(&self) -> f64 {
        (self.gap_truth() - self.f64("sender_run_delay_s") / self.f64("duration_s")).max(0.0)
    }

    /// tc's drops / (sent + drops) at the sender's root qdisc.
    fn qdisc_drop_truth(&self) -> f64 {
        let root = self.root_qdisc();
        let (sent, drops) = (
            root["sent_packets"].as_f64().unwrap(),
            root["drops"].as_f64().unwrap(),
        );
        drops / (sent + drops).max(1.0)
    }

    fn root_qdisc(&self) -> &Value {
        self.lab["qdisc"]
            .as_array()
            .and_then(|q| q.iter().find(|q| q["parent"].is_null()))
            .unwrap_or_else(|| panic!("no root qdisc in {}", self.lab))
    }

    /// The top verdict of `kind` (verdicts come ranked).
    fn top(&self, kind: Kind) -> &scanprof::analysis::verdict::Verdict {
        self.summary
            .verdicts
            .iter()
            .find(|v| v.kind == kind)
            .unwrap_or_else(|| {
                panic!(
                    "no {kind} verdict: {:#?}\n{}",
                    self.summary.verdicts, self.context
                )
            })
    }

    /// The top verdict of `kind` names `cause`, and its share is within 10 points of `truth`.
    #[track_caller]
    fn assert_diagnosis(&self, kind: Kind, cause: Cause, truth: Option<f64>) {
        let top = self.top(kind);
        let all: Vec<String> = self
            .summary
            .verdicts
            .iter()
            .map(|v| format!("{} {} {:.3} {}", v.kind, v.cause, v.share, v.confidence))
            .collect();
        assert_eq!(
            top.cause, cause,
            "the top {kind} verdict names {} instead of {cause}: {all:?}\n{}",
            top.sentence, self.lab
        );
        if let Some(t) = truth {
            // A gap less the run-queue delay is all of the sender's own time, the probes' runs
            // on its threads included, which scanprof names apart (probe_cost): both together
            // are what that truth measures.
            let probes: f64 = if self.lab["truth_kind"] == "gap_less_run_delay" && cause != Cause::ProbeCost {
                self.summary
                    .verdicts
                    .iter()
                    .filter(|v| v.kind == Kind::Gap && v.cause == Cause::ProbeCost)
                    .map(|v| v.share)
                    .sum()
            } else {
                0.0
            };
            assert!(
                (top.share + probes - t).abs() <= TOLERANCE,
                "{cause} explains {:.3} (+ {probes:.3} probe_cost), the measured truth is {t:.3}: more than 10 points apart; {all:?}\n{}",
                top.share,
                self.lab
            );
        }
        // The lab's own check says the same.
        assert_eq!(self.lab["check"]["top_cause"], cause.as_str(), "{}", self.lab);
    }

    /// The busiest sender thread's time over its own send window.
    fn sender_budget(&self) -> scanprof::collect::TimeBudget {
        let t = self
            .summary
            .threads
            .iter()
            .max_by_key(|t| t.packets)
            .unwrap_or_else(|| panic!("no sender thread\n{}", self.context));
        t.send_window_budget
            .unwrap_or_else(|| panic!("no send-window budget: {t:?}"))
    }

    fn loss_verdicts(&self) -> Vec<Cause> {
        self.summary
            .verdicts
            .iter()
            .filter(|v| v.kind == Kind::Loss && v.share > 0.0)
            .map(|v| v.cause)
            .collect()
    }
}

#[test]
fn healthy_run_has_no_significant_gap() {
    let test = privileged();
    let run = run_lab(&test, "healthy");
    let truth = run.gap_truth();
    assert!(
        truth < 0.02,
        "the healthy sender fell short by {truth:.3}: {}",
        run.lab
    );
    run.assert_diagnosis(Kind::Gap, Cause::NoGap, Some(truth));
    assert_eq!(run.summary.verdicts[0].cause, Cause::NoGap);
    assert!(run.loss_verdicts().is_empty(), "{:?}", run.summary.verdicts);
}

#[test]
fn qdisc_drops_are_the_loss_and_their_share_matches_tc() {
    let test = privileged();
    let run = run_lab(&test, "qdisc-drop");
    let truth = run.qdisc_drop_truth();
    assert!(truth > 0.5, "the tbf dropped too little to test: {}", run.lab);
    run.assert_diagnosis(Kind::Loss, Cause::QdiscDrop, Some(truth));
}

#[test]
fn closed_port_drops_are_expected_not_loss() {
    let test = privileged();
    let run = run_lab(&test, "closed-port");
    let expected: u64 = run
        .summary
        .drops
        .iter()
        .filter(|d| d.class == DropClass::Expected && d.reason == "NO_SOCKET")
        .map(|d| d.count)
        .sum();
    assert!(
        expected >= run.summary.packets * 9 / 10,
        "{:?}",
        run.summary.drops
    );
    run.assert_diagnosis(Kind::Gap, Cause::NoGap, Some(run.gap_truth()));
    assert!(run.loss_verdicts().is_empty(), "{:?}", run.summary.verdicts);
}

#[test]
fn blocking_in_send_is_named_with_its_wait_site() {
    let test = privileged();
    let run = run_lab(&test, "blocking");
    let truth = run.gap_less_run_delay();
    assert!(truth > 0.5, "the sender was not held back: {}", run.lab);
    run.assert_diagnosis(Kind::Gap, Cause::BlockedSend, Some(truth));
    assert!(
        run.top(Kind::Gap).sentence.contains("sock_alloc_send_pskb"),
        "{}",
        run.top(Kind::Gap).sentence
    );
}

#[test]
fn unresolved_neighbour_losses_are_named_neigh_failed() {
    let test = privileged();
    let run = run_lab(&test, "unresolved-neighbour");
    // No host has the address: not one packet reached the target namespace.
    let sent = run.f64("sender_udp_out");
    assert!(sent > 500.0, "{}", run.lab);
    assert_eq!(run.f64("target_ip_in"), 0.0, "{}", run.lab);
    run.assert_diagnosis(Kind::Loss, Cause::NeighFailed, Some(1.0));
}

#[test]
fn a_rate_beyond_the_machine_is_cpu_bound() {
    let test = privileged();
    let run = run_lab(&test, "cpu-bound");
    let truth = run.gap_less_run_delay();
    assert!(
        run.gap_truth() > 0.5,
        "the sender kept up with 1M pps?: {}",
        run.lab
    );
    run.assert_diagnosis(Kind::Gap, Cause::CpuBound, Some(truth));
}

#[test]
fn a_sleeping_pacer_with_per_packet_slots_is_coarse_pacing() {
    let test = privileged();
    let run = run_lab(&test, "coarse-pacing");
    let truth = run.gap_less_run_delay();
    assert!(
        run.gap_truth() > 0.15,
        "the sleep pacer kept its rate: {}",
        run.lab
    );
    run.assert_diagnosis(Kind::Gap, Cause::PacingCoarse, Some(truth));
    // The sleeping pacer waits for a CPU after its wake-ups, not after preemption: nearly all
    // of its runnable time follows a wake-up.
    let b = run.sender_budget();
    let woken = b.wakeup_wait_ns.expect("the wake-up wait is measured");
    assert!(
        woken as f64 >= 0.9 * b.preempted_ns as f64 && b.preempted_ns > 0,
        "runnable after wake-ups {woken} of {} ns",
        b.preempted_ns
    );
}

#[test]
fn a_cpu_hog_on_the_senders_cpu_is_preemption() {
    let test = privileged();
    let run = run_lab(&test, "preemption");
    let hog = &run.lab["hog"];
    assert!(
        hog["cpu_s"].as_f64().unwrap_or(0.0) > 1.0,
        "the hog did not run: {hog}"
    );
    // The hog was ended by its pid: no process with its pid runs the lab's command line.
    let pid = hog["pid"].as_u64().unwrap();
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    assert!(
        !String::from_utf8_lossy(&cmdline).contains("preemption"),
        "the hog {pid} outlived the lab"
    );
    let truth = run.gap_truth();
    assert!(truth > 0.2, "the hog took too little: {}", run.lab);
    run.assert_diagnosis(Kind::Gap, Cause::Preempted, Some(truth));
    // The spinning pacer never sleeps: its runnable time is preemption by the hog, none of it
    // after a wake-up.
    let b = run.sender_budget();
    let woken = b.wakeup_wait_ns.expect("the wake-up wait is measured");
    assert!(
        (woken as f64) <= 0.05 * b.preempted_ns as f64,
        "runnable after wake-ups {woken} of {} ns",
        b.preempted_ns
    );
}

#[test]
fn enobufs_from_a_packet_socket_are_send_errors() {
    let test = privileged();
    let run = run_lab(&test, "send-errors");
    // Every ENOBUFS is a frame the tbf refused: tc's drops are the failed sends.
    let enobufs = run.summary.errors.get("ENOBUFS").copied().unwrap_or(0);
    let drops = run.root_qdisc()["drops"].as_u64().unwrap();
    assert!(enobufs > 1000, "{:?}", run.summary.errors);
    assert_eq!(enobufs, drops, "{}", run.lab);
    run.assert_diagnosis(Kind::Gap, Cause::SendErrors, Some(run.qdisc_drop_truth()));
}

#[test]
fn a_skewed_tsc_calibration_is_miscalibration() {
    let test = privileged();
    let run = run_lab(&test, "miscalibrated");
    // Slots 1.5x too long: two thirds of the requested rate.
    assert_within(
        "achieved",
        run.summary.achieved_pps,
        run.f64("requested_pps") / 1.5,
        0.03,
    );
    run.assert_diagnosis(Kind::Gap, Cause::Miscalibrated, Some(run.gap_less_run_delay()));
}

#[test]
fn replies_overflowing_the_senders_socket_are_reply_losses() {
    let test = privileged();
    let run = run_lab(&test, "reply-drop");
    let (dropped, sent) = (run.f64("sender_rcvbuf_errors"), run.f64("sender_udp_out"));
    assert!(dropped > sent / 2.0, "{}", run.lab);
    run.assert_diagnosis(Kind::Loss, Cause::ReplySocketBuffer, Some(dropped / sent));
}

#[test]
fn a_sender_stopped_outside_its_pacing_idles() {
    let test = privileged();
    let run = run_lab(&test, "stalls");
    assert!(run.f64("stalls") >= 30.0, "{}", run.lab);
    let truth = run.gap_less_run_delay();
    assert!(truth > 0.1, "the stops cost too little: {}", run.lab);
    run.assert_diagnosis(Kind::Gap, Cause::IdleWaits, Some(truth));
}

#[test]
fn a_listener_with_a_tiny_receive_buffer_overflows_it() {
    let test = privileged();
    let run = run_lab(&test, "rcvbuf-overflow");
    let (dropped, read) = (run.f64("target_rcvbuf_errors"), run.f64("target_udp_in"));
    assert!(dropped > read, "the listener kept up: {}", run.lab);
    run.assert_diagnosis(
        Kind::Loss,
        Cause::RcvbufOverflow,
        Some(dropped / (dropped + read)),
    );
}

#[test]
fn a_connect_scan_s_syns_are_its_packets() {
    let test = privileged();
    let run = run_lab(&test, "connect-scan");
    // The SYNs: the sender namespace's TCP ActiveOpens, the capture-free count of them.
    let opens = run.f64("sender_tcp_active_opens");
    let asked = run.f64("requested_pps") * run.f64("duration_s");
    assert!(opens >= asked * 0.5, "nmap sent too few SYNs: {}", run.lab);
    let s = &run.summary;
    let c = s.connect.expect("a connect scan has a connect view");
    assert!(c.connect_scanner, "{c:?}");
    assert_eq!(
        c.syns as f64, opens,
        "scanprof's SYNs vs Tcp ActiveOpens\n{}",
        run.lab
    );
    assert_eq!(s.packets, c.syns, "a connect scan's packets are its SYNs");
    assert_eq!(c.failed, 0, "{c:?}");
    assert!(
        s.verdicts.iter().all(|v| v.cause != Cause::NeverSent),
        "{:#?}",
        s.verdicts
    );
    run.assert_diagnosis(
        Kind::Gap,
        Cause::NoGap,
        Some((1.0 - opens / asked).clamp(0.0, 1.0)),
    );
}

impl LabRun {
    /// 1 - answers / probes, from the lab line's independent counts: answers the target's TCP
    /// segments out plus the echo's replies, probes the sender veth's transmitted packets less
    /// those its kernel made itself (RSTs, port unreachables).
    fn unanswered_truth(&self) -> f64 {
        let answers = self.f64("target_tcp_out") + self.lab["echoed"].as_f64().unwrap_or(0.0);
        let probes = self.f64("sender_link_tx") - self.f64("sender_kernel_out");
        (1.0 - answers / probes.max(1.0)).clamp(0.0, 1.0)
    }

    fn drops_of(&self, class: DropClass, reason: &str) -> u64 {
        self.summary
            .drops
            .iter()
            .filter(|d| d.class == class && d.reason == reason)
            .map(|d| d.count)
            .sum()
    }

    /// Nothing the family sent was lost: no target_loss row, no loss verdict with a share, the
    /// top verdict is not a loss, and the lab's check (loss shares summed against the truth)
    /// holds.
    #[track_caller]
    fn assert_no_loss(&self, truth: f64) {
        let lost: Vec<_> = self
            .summary
            .drops
            .iter()
            .filter(|d| d.class == DropClass::TargetLoss)
            .collect();
        assert!(lost.is_empty(), "target_loss rows: {lost:?}\n{}", self.lab);
        assert!(
            self.loss_verdicts().is_empty(),
            "{:#?}\n{}",
            self.summary.verdicts,
            self.lab
        );
        let first = self.summary.verdicts.first();
        assert!(
            first.is_none_or(|v| v.kind != Kind::Loss || v.share <= 0.0),
            "top verdict {first:?}"
        );
        assert!(
            truth <= TOLERANCE,
            "truth {truth:.3}: the lab lost packets\n{}",
            self.lab
        );
        let check = &self.lab["check"];
        assert_eq!(check["expected_cause"], "no_loss", "{}", self.lab);
        assert!(
            (check["truth"].as_f64().unwrap() - truth).abs() < 1e-9,
            "{}",
            self.lab
        );
        assert!(
            check["top_share"].as_f64().unwrap() <= truth + TOLERANCE,
            "{}",
            self.lab
        );
        assert_eq!(check["ok"], true, "{}", self.lab);
    }
}

/// Issue 13 item 1: a SYN scan of open ports. The sender host's kernel answers every SYN-ACK
/// with a RST (nmap's raw socket is no TCP socket) and the target drops those RSTs
/// (NOT_SPECIFIED at tcp_v4_rcv): they match the scan's address pair but were never sent by
/// nmap, so they are reply_side, not the "target_loss" that once read as 83% of the probes lost.
#[test]
fn a_syn_scans_kernel_made_rsts_are_reply_side_not_loss() {
    let test = privileged();
    require_scanner("nmap");
    let run = run_lab(&test, "kernel-reply");
    // The sender namespace's kernel made one RST per SYN-ACK (its Tcp OutSegs).
    let kernel_rsts = run.f64("sender_kernel_out") as u64;
    let probes = run.f64("sender_link_tx") as u64 - kernel_rsts;
    assert!(probes >= 360 && kernel_rsts >= 360, "{}", run.lab);
    let reply_side = run.drops_of(DropClass::ReplySide, "NOT_SPECIFIED");
    assert!(
        reply_side >= kernel_rsts * 9 / 10 && reply_side <= kernel_rsts,
        "{reply_side} reply_side drops for {kernel_rsts} kernel RSTs: {:?}",
        run.summary.drops
    );
    run.assert_no_loss(run.unanswered_truth());
}

/// Issue 13 item 1: replies left unread on a packet socket when it closes are purged
/// (QUEUE_PURGE at skb_queue_purge_reason): delivered, not lost; no_gap stands.
#[test]
fn replies_purged_when_a_socket_closes_are_reply_side_not_loss() {
    let test = privileged();
    let run = run_lab(&test, "socket-close-purge");
    let echoed = run.f64("echoed") as u64;
    assert!(echoed >= 70, "{}", run.lab);
    let purged = run.drops_of(DropClass::ReplySide, "QUEUE_PURGE");
    assert!(
        purged >= echoed * 9 / 10,
        "{purged} replies purged as reply_side for {echoed} echoed: {:?}",
        run.summary.drops
    );
    run.assert_no_loss(run.unanswered_truth());
    run.assert_diagnosis(Kind::Gap, Cause::NoGap, Some(run.gap_truth()));
}

/// Issue 13 item 3: a 12-packet run whose tsc pacer derived its slot 200x too long (200 ms gaps
/// for a 1 ms slot) is `miscalibrated`, judged from the delay the profile reads, not `cpu_bound`
/// (the sender spins on the CPU through each slot: "200 ms of CPU per packet"). The truth is the
/// lab receiver's own rate by its kernel timestamps; by construction 1 - 1/200.
#[test]
fn a_short_run_with_a_slot_far_too_long_is_miscalibrated() {
    let test = privileged();
    let run = run_lab(&test, "short-miscalibration");
    let rx = &run.lab["receiver"];
    let packets = rx["packets"].as_u64().unwrap_or(0);
    assert!(
        (2..=20).contains(&packets),
        "{packets} packets: a short run of at most 20\n{}",
        run.lab
    );
    assert_eq!(run.summary.packets, packets, "{}", run.lab);
    // The receiver's own rate, by the kernel's receive timestamps.
    let (first, last) = (rx["first_ns"].as_f64().unwrap(), rx["last_ns"].as_f64().unwrap());
    let rx_pps = (packets - 1) as f64 * 1e9 / (last - first);
    let truth = 1.0 - rx_pps / run.f64("requested_pps");
    assert!(
        (truth - (1.0 - 1.0 / 200.0)).abs() < 0.01,
        "the 200x slots should leave 0.5% of the rate, the receiver saw {rx_pps:.2} pps"
    );
    run.assert_diagnosis(Kind::Gap, Cause::Miscalibrated, Some(truth));
    assert!(
        !run.summary.verdicts.iter().any(|v| v.cause == Cause::CpuBound),
        "{:#?}",
        run.summary.verdicts
    );
    let mis = run.top(Kind::Gap);
    assert!(
        mis.evidence.iter().any(|e| e.contains("tsc_slot: slot")),
        "judged from the calibration read: {:?}",
        mis.evidence
    );
    // The advice does not send a tsc-paced run to the tsc pacer.
    assert!(!mis.next_step.contains("--pacer tsc`"), "{}", mis.next_step);
}

/// Issue 13 item 4: a family whose members exit with errors before sending anything is
/// `never_sent` with 100% of the rate missing (the target namespace received nothing), and the
/// verdict says what was seen: no packet, each member's exit status, no probe blamed.
#[test]
fn a_family_that_never_starts_sending_says_what_its_members_did() {
    let test = privileged();
    let run = run_lab(&test, "never-started");
    assert_eq!(run.f64("target_ip_in"), 0.0, "{}", run.lab);
    assert_eq!(run.summary.packets, 0);
    run.assert_diagnosis(Kind::Gap, Cause::NeverSent, Some(run.gap_truth()));
    let v = run.top(Kind::Gap);
    assert_eq!(v.confidence, Confidence::Strong, "{v:?}");
    let text = format!("{} {:?}", v.sentence, v.evidence);
    for status in [
        "exited with status 3",
        "exited with status 4",
        "exited with status 1",
    ] {
        assert!(text.contains(status), "{status} missing: {text}");
    }
    assert!(text.contains("no packet"), "{text}");
    assert!(!text.contains("sched probe"), "{text}");
    assert!(
        text.contains("IPC between its processes not counted"),
        "the generic profile has no IPC probes: {text}"
    );
}

/// Issue 13, causes: a full conntrack table in the sender's namespace. The lab lowers the global
/// nf_conntrack_max to 64 for the run (restored after: asserted here), holds 62 tracked TCP
/// connections and lets the reference sender cycle over 4 ports: 2 flows get the last entries,
/// the other 2 are refused at every packet (EPERM, NETFILTER_DROP). Truth: the sender
/// namespace's own conntrack `drop` counter over requested x duration; scanprof reads only the
/// table's entries.
#[test]
fn a_full_conntrack_table_is_conntrack_full_and_its_share_matches_the_kernels_drops() {
    let test = privileged();
    let max_path = "/proc/sys/net/netfilter/nf_conntrack_max";
    let before = std::fs::read_to_string(max_path).expect("conntrack in this kernel");
    let run = run_lab(&test, "conntrack-full");
    assert_eq!(
        std::fs::read_to_string(max_path).unwrap(),
        before,
        "the global nf_conntrack_max was not restored"
    );
    let ct = &run.lab["conntrack"];
    assert_eq!(
        ct["saved_max"].as_u64().unwrap().to_string(),
        before.trim(),
        "{}",
        run.lab
    );
    let refused = run.f64("sender_ct_drops");
    let truth = refused / (run.f64("requested_pps") * run.f64("duration_s"));
    assert!(truth > 0.3, "the table refused too little to test: {}", run.lab);
    run.assert_diagnosis(Kind::Gap, Cause::ConntrackFull, Some(truth));
    // Every refused packet is a failed send and a NETFILTER_DROP of the sender's own.
    let eperm = run.summary.errors.get("EPERM").copied().unwrap_or(0);
    assert_eq!(eperm as f64, refused, "{:?}\n{}", run.summary.errors, run.lab);
    let loss = run.top(Kind::Loss);
    assert_eq!(loss.cause, Cause::ConntrackFull, "{:#?}", run.summary.verdicts);
    let gap = run.top(Kind::Gap);
    assert!(
        gap.next_step.contains("notrack") && gap.next_step.contains("nf_conntrack_max"),
        "{}",
        gap.next_step
    );
}

/// Issue 13, causes: the sender's cgroup CPU quota. The lab moves the busy-waiting sender
/// (per-packet slots) into a cgroup of its own with 0.3 CPU and removes it after. Truth: the
/// quota's share from the cgroup's own cpu.stat (its throttled periods x (period - quota) over
/// its periods), at most the gap from the target namespace's delivered count; the verdict is
/// the quota's, not preemption, and first whenever the quota took more than the rest of the gap.
#[test]
fn a_cgroup_cpu_quota_is_cgroup_throttled_not_preemption() {
    let test = privileged();
    let run = run_lab(&test, "cgroup-throttled");
    let cg = &run.lab["cgroup"];
    assert_eq!(cg["sender_moved"], true, "{}", run.lab);
    // The expectation is the kernel's own count for this run, the cgroup's cpu.stat: in each of
    // its nr_throttled periods the sender, having used its quota, waited for the next period
    // (period - quota at most: less where other tasks had already held it off the CPU in that
    // period). On 6.18 throttled_usec counts only from the throttled task's dequeue at its
    // return to user space (~10 of the 70 ms seen here), so the periods are the count to use.
    // The rest of the gap is not the quota's: on a busy machine other tasks take the sender's
    // CPU in periods it never reaches its quota (seen: throttled in 34 of 45 periods, a gap of
    // 70.1% of which the quota's 52.9%, scanprof's cgroup_throttled 53.5%).
    let (periods, throttled) = (
        cg["nr_periods"].as_u64().unwrap(),
        cg["nr_throttled"].as_u64().unwrap(),
    );
    let (quota_us, period_us) = (
        cg["quota_us"].as_u64().unwrap(),
        cg["period_us"].as_u64().unwrap(),
    );
    assert!(throttled > 0, "the quota never throttled the sender: {}", run.lab);
    let quota_truth = (throttled * period_us.saturating_sub(quota_us)) as f64 / (periods * period_us) as f64;
    let gap = run.gap_truth();
    eprintln!(
        "cgroup-throttled: throttled in {throttled} of {periods} periods: the quota's share \
         {quota_truth:.3} of a gap of {gap:.3}"
    );
    assert!(
        quota_truth <= gap + TOLERANCE,
        "the kernel's throttled periods ({quota_truth:.3}) exceed the delivered gap ({gap:.3}): {}",
        run.lab
    );
    if quota_truth > gap - quota_truth {
        // The quota took more of the sender's time than everything else together: first.
        run.assert_diagnosis(Kind::Gap, Cause::CgroupThrottled, Some(quota_truth));
    } else {
        // Other tasks took more: the quota's part is still named, at its share.
        let v = run
            .summary
            .verdicts
            .iter()
            .find(|v| v.kind == Kind::Gap && v.cause == Cause::CgroupThrottled)
            .unwrap_or_else(|| panic!("no cgroup_throttled verdict: {:#?}", run.summary.verdicts));
        assert!(
            (v.share - quota_truth).abs() <= TOLERANCE,
            "cgroup_throttled explains {:.3}, the kernel's throttled periods {quota_truth:.3}: {}",
            v.share,
            run.lab
        );
    }
    // The cgroup is gone.
    let path = cg["path"].as_str().unwrap();
    for root in ["/sys/fs/cgroup/cpu", "/sys/fs/cgroup", "/sys/fs/cgroup/unified"] {
        assert!(
            !std::path::Path::new(&format!("{root}{path}")).exists(),
            "cgroup {root}{path} left behind"
        );
    }
}

/// A lab killed with SIGKILL while it holds the global nf_conntrack_max lowered cannot restore
/// it; the next `scanprof lab` does, from the record the first one left (src/lab/sysctl.rs).
/// Without the record the limit stays at 64 for every namespace on the machine.
#[test]
fn a_conntrack_lab_killed_with_sigkill_has_its_limit_restored_by_the_next_lab() {
    let test = privileged();
    let max_path = "/proc/sys/net/netfilter/nf_conntrack_max";
    let before = std::fs::read_to_string(max_path).expect("conntrack in this kernel");
    /// The test's own safety net: the limit goes back whatever the assertions find.
    struct Restore(&'static str, String);
    impl Drop for Restore {
        fn drop(&mut self) {
            let _ = std::fs::write(self.0, &self.1);
        }
    }
    let _restore = Restore(max_path, before.clone());
    let args: Vec<String> = ["lab", "conntrack-full", "--json", "--duration", "4"]
        .map(String::from)
        .to_vec();
    let mut lab = Proc::scanprof(&args);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while std::fs::read_to_string(max_path).unwrap().trim() != "64" {
        assert!(
            std::time::Instant::now() < deadline,
            "the lab never lowered nf_conntrack_max"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    lab.signal(nix::sys::signal::Signal::SIGKILL);
    let _ = lab.finish(Duration::from_secs(10));
    assert_eq!(
        std::fs::read_to_string(max_path).unwrap().trim(),
        "64",
        "a SIGKILL leaves the limit lowered: nothing else to test"
    );
    let next = run_lab(&test, "healthy");
    assert_eq!(
        std::fs::read_to_string(max_path).unwrap(),
        before,
        "the next lab did not restore nf_conntrack_max\n{}",
        next.context
    );
    assert!(
        next.context
            .contains(&format!("restored {max_path} to {}", before.trim())),
        "{}",
        next.context
    );
}
