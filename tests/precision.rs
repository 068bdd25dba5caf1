//! The report-precision checker (tests/common/precision.rs) on summaries crafted with each
//! mechanism of issue 28 that made a real run's report false: each check must fail on its
//! defect (so that a lab or scanner test calling `assert_precise` can fail), and none on a
//! clean run. Unprivileged, no traffic.
//!
//! Run: `cargo test --test it precision::`

use crate::common;

use std::collections::BTreeMap;

use serde_json::{json, Value};

use common::precision::{findings, step_findings, Check};
use scanprof::analysis::verdict::{Cause, Confidence, Kind, Verdict};
use scanprof::analysis::{DeviceView, DropRow, EndReason, GapView, RunPhase, Summary, SCHEMA_VERSION};
use scanprof::collect::{DropClass, Health, QueueDepth, TimeBudget};

/// A clean 10 s run at 1,000 pps that kept up, from a generic sender on eth0.
fn clean() -> Summary {
    Summary {
        schema_version: SCHEMA_VERSION,
        end_reason: EndReason::Duration,
        duration_s: 10.0,
        send_window_s: 10.0,
        first_send_s: Some(0.0),
        last_send_s: Some(10.0),
        phase: RunPhase::Ended,
        kernel_lacks: Vec::new(),
        requested_pps: Some(1000.0),
        achieved_pps: 1000.0,
        baseline_pps: None,
        baseline: None,
        ratio: Some(1.0),
        packets: 10_000,
        bytes: 420_000,
        send_calls: 10_000,
        failed_calls: 0,
        errors: BTreeMap::new(),
        stages: BTreeMap::new(),
        stage_counts: BTreeMap::new(),
        rate_stats: None,
        drops: Vec::new(),
        processes: Vec::new(),
        threads: Vec::new(),
        budget: TimeBudget::default(),
        block_sites: Vec::new(),
        gap: GapView::default(),
        latency_p50_ns: None,
        latency_p99_ns: None,
        devices: vec![serde_json::from_value(json!({
            "device": "eth0", "netns": 1, "target_queued_pps": 1000.0, "target_xmit_pps": 1000.0,
            "all_xmit_pps": 1000.0, "xmit_refused": 0, "qlen_max": null, "backlog_max_bytes": null,
            "neigh_started": 0, "neigh_queued": 0, "neigh_resolved": 0, "neigh_failed": 0
        }))
        .map(|d: DeviceView| d)
        .expect("a device view")],
        device_sampling: None,
        queues: Vec::new(),
        lost_events: 0,
        health: Health::default(),
        cost: Default::default(),
        probes: Vec::new(),
        scanner: None,
        connect: None,
        receive: None,
        receive_active_s: None,
        limits: None,
        relay: None,
        replies: None,
        verdicts: vec![verdict(Cause::NoGap, Kind::Gap, 0.0, Confidence::Strong)],
        warnings: Vec::new(),
        dropped_headers: Default::default(),
    }
}

fn verdict(cause: Cause, kind: Kind, share: f64, confidence: Confidence) -> Verdict {
    Verdict {
        cause,
        kind,
        sentence: format!("{} sentence", cause.as_str()),
        share,
        evidence: Vec::new(),
        next_step: String::new(),
        confidence,
    }
}

/// `s` with a JSON patch applied to its serialized form (for the views with many fields).
fn patched(s: &Summary, patch: impl FnOnce(&mut Value)) -> Summary {
    let mut v = serde_json::to_value(s).expect("serialize");
    patch(&mut v);
    serde_json::from_value(v).expect("the patched summary deserializes")
}

/// The probes' cost with `share` of the target's on-CPU time, a target busy `busy` of the time.
fn probe_cost(share: Option<f64>, no_share: Option<&str>, busy: f64, alert: bool) -> Value {
    json!({
        "coverage": "continuous", "holder": "scanprof", "measured_share": 1.0,
        "bpf_ns": 1.0e9, "target_timed": true, "target_bpf_ns": 1.0e8, "timing_ns": 0.0,
        "machine_bpf_ns": 9.0e8, "machine_cpu_share": 0.09, "packets": 10000,
        "ns_per_packet": 100000.0, "target_ns_per_packet": 10000.0,
        "target_oncpu_ns": 1_000_000_000u64, "target_oncpu_share": busy, "target_busy_share": busy,
        "share_of_target": share, "no_share": no_share, "alert": alert, "programs": []
    })
}

/// A packet socket of pid 42 with `queued` frames since attach, `outgoing` of them its own.
fn ring(queued: u64, dropped: u64, outgoing: u64, read: bool) -> Value {
    json!({
        "pid": 42, "fd": 3, "inode": 100, "kind": "tpacket_v2", "ring_bytes": 4194304,
        "frames": 32, "rcvbuf": 212992, "ifindex": 2, "queued": queued, "dropped": dropped,
        "queued_total": queued, "dropped_total": dropped, "clears": 0, "owner_reads": 0,
        "read": read, "open": true, "outgoing": outgoing, "outgoing_total": outgoing,
        "sees_outgoing": true, "filtered": false
    })
}

fn receive(stages: Value, rings: Vec<Value>) -> Value {
    json!({
        "stages": stages, "failed_calls": 0, "bytes": 0, "stream_calls": 0, "stream_bytes": 0,
        "drops": [], "tunables": {}, "socket_drops_seen": true, "threads": [], "cost": null,
        "classes": [], "rings": rings
    })
}

fn stage(name: &str, total: u64) -> Value {
    json!({"name": name, "count": total, "pps": total as f64 / 10.0, "total": total, "ratio": null})
}

fn checks(s: &Summary, ticks: &[Value]) -> Vec<Check> {
    let f = findings(s, ticks);
    for x in &f {
        println!("{}: {}", x.check, x.detail);
    }
    f.into_iter().map(|f| f.check).collect()
}

#[track_caller]
fn only(s: &Summary, ticks: &[Value], check: Check) {
    let found = checks(s, ticks);
    assert!(!found.is_empty(), "{check} found nothing");
    assert!(
        found.iter().all(|c| *c == check),
        "{found:?}, expected only {check}"
    );
}

#[test]
fn a_clean_run_has_no_finding() {
    assert_eq!(checks(&clean(), &[]), Vec::<Check>::new());
}

/// Item 1: `scanprof_bpf_share_of_target` 65.36 on an idle tick, "PROBES SLOW THE TARGET"
/// for a masscan asleep 87% of the time (main before the cost split).
#[test]
fn probe_cost_charged_to_an_idle_target_is_found() {
    let s = patched(&clean(), |v| {
        v["cost"]["bpf"] = probe_cost(Some(65.36), None, 0.02, true)
    });
    only(&s, &[], Check::ProbeCostOnBusyTarget);
    // The split's answer: no share for the idle target, said why, no alert.
    let s = patched(&clean(), |v| {
        v["cost"]["bpf"] = probe_cost(None, Some("little_target_cpu"), 0.02, false)
    });
    assert_eq!(checks(&s, &[]), Vec::<Check>::new());
    // A 6% share of a target asleep 87% of the time: no alert either.
    let s = patched(&clean(), |v| {
        v["cost"]["bpf"] = probe_cost(Some(0.06), None, 0.13, true)
    });
    only(&s, &[], Check::ProbeCostOnBusyTarget);
}

/// Item 2: hping3's own 1.2 million SYNs looped back to its sniffer made ring_full 99.9% the
/// top verdict above the send syscall's limit in a run that asked for no rate.
#[test]
fn a_flood_s_own_frames_as_replies_are_found() {
    let mut s = clean();
    s.requested_pps = None;
    s.ratio = None;
    s.verdicts = vec![
        verdict(Cause::RingFull, Kind::Loss, 0.999, Confidence::Strong),
        verdict(Cause::Bottleneck, Kind::Gap, 0.0, Confidence::Strong),
    ];
    only(&s, &[], Check::OwnFramesAreNoReplies);
    // A socket whose outgoing copies exceed the frames that reached it.
    let s = patched(&clean(), |v| {
        v["receive"] = receive(json!([]), vec![ring(100, 0, 200, true)])
    });
    only(&s, &[], Check::OwnFramesAreNoReplies);
    // Copies that a full ring dropped are outgoing copies too (a flood's sniffer, hping3's
    // socket): 200 of 100 queued and 150 dropped is no finding.
    let s = patched(&clean(), |v| {
        v["receive"] = receive(json!([]), vec![ring(100, 150, 200, true)])
    });
    let f = findings(&s, &[]);
    assert!(f.is_empty(), "{f:?}");
}

/// Item 3: receiver_keeps_up as the top verdict of a UDP port scan that read 0 packets, and
/// right under ring_full 79.6% about the same listener.
#[test]
fn receive_verdicts_where_receiving_is_no_job_are_found() {
    let mut s = patched(&clean(), |v| {
        v["receive"] = receive(json!([stage("recv_calls", 1), stage("recv_packets", 0)]), vec![])
    });
    s.verdicts = vec![
        verdict(Cause::ReceiverKeepsUp, Kind::Loss, 0.0, Confidence::Weak),
        verdict(Cause::NoGap, Kind::Gap, 0.0, Confidence::Strong),
    ];
    let found = checks(&s, &[]);
    assert!(found.contains(&Check::ReceiverWhereMaterial), "{found:?}");
    // beside a loss verdict about the same receiver
    let mut s = patched(&clean(), |v| {
        v["receive"] = receive(
            json!([stage("recv_calls", 5000), stage("recv_packets", 20000)]),
            vec![ring(47_862, 12_000, 0, true)],
        )
    });
    s.packets = 10;
    s.verdicts = vec![
        verdict(Cause::RingFull, Kind::Loss, 0.796, Confidence::Strong),
        verdict(Cause::ReceiverKeepsUp, Kind::Loss, 0.0, Confidence::Strong),
    ];
    only(&s, &[], Check::ReceiverWhereMaterial);
}

/// Item 5: `sh -c '... exec ip netns exec NS masscan ...'` gave profile generic.
#[test]
fn a_scanner_behind_a_wrapper_left_generic_is_found() {
    let s = patched(&clean(), |v| {
        v["processes"] = json!([
            {"pid": 10, "ppid": 1, "comm": "sh", "exe": "/usr/bin/dash", "root": true, "alive": false,
             "exit_code": 0, "role": null},
            {"pid": 11, "ppid": 10, "comm": "masscan", "exe": "/usr/bin/masscan", "root": false,
             "alive": false, "exit_code": 0, "role": null}
        ]);
        v["scanner"] = json!({"profile": "generic", "roles": [], "requested": null, "probes": [],
            "calibrations": [], "work_units": [], "ipc": [], "claims": [], "notes": [], "pacers": []});
        v["scanner"]["requested"] =
            json!({"pps": null, "kind": "unknown", "floor_pps": null, "sources": [], "conflict": null});
    });
    only(&s, &[], Check::ScannerBehindWrapper);
    let s = patched(&s, |v| v["scanner"]["profile"] = json!("masscan"));
    assert_eq!(checks(&s, &[]), Vec::<Check>::new());
}

/// Item 6: `--requested 50000` beside the profile's default of 100 pps raised SOURCES
/// DISAGREE.
#[test]
fn a_default_that_disagrees_is_found() {
    let scanner = |origin: &str| {
        json!({"profile": "masscan", "roles": [], "probes": [], "calibrations": [], "work_units": [],
        "ipc": [], "claims": [], "notes": [], "pacers": [],
        "requested": {"pps": 50000.0, "kind": "exact", "floor_pps": null, "conflict": "--requested 50000 against argv 100",
            "sources": [
                {"source": "--requested", "pps": 50000.0, "at_s": null, "origin": "given"},
                {"source": "profile default", "pps": 100.0, "at_s": null, "origin": origin}
            ]}})
    };
    let s = patched(&clean(), |v| v["scanner"] = scanner("default"));
    only(&s, &[], Check::NoDefaultDisagrees);
    let s = patched(&clean(), |v| v["scanner"] = scanner("given"));
    assert_eq!(checks(&s, &[]), Vec::<Check>::new());
}

/// Item 7: every tick of a scanner's wait for late replies read "unexplained 100%", the partial
/// last tick "cpu_bound 70.9%".
#[test]
fn rate_verdicts_off_the_sending_phase_are_found() {
    let tick = |n: u64, phase: &str, partial: bool, cause: &str| {
        json!({"type": "sample", "tick": n, "phase": phase, "partial": partial,
               "verdicts": [{"cause": cause, "kind": "gap", "share": 1.0}]})
    };
    let ticks = [
        tick(1, "sending", false, "no_gap"),
        tick(2, "sending", true, "cpu_bound"),
        tick(3, "waiting", false, "unexplained"),
    ];
    let found = checks(&clean(), &ticks);
    assert_eq!(found, vec![Check::NoRateVerdictOffSending; 2]);
}

/// Item 8: a weak 0.0% "missed 2 replies" ranked first, above a strong verdict.
#[test]
fn a_weak_zero_verdict_above_a_strong_one_is_found() {
    let mut s = clean();
    s.verdicts
        .insert(0, verdict(Cause::RingFull, Kind::Loss, 0.0002, Confidence::Weak));
    only(&s, &[], Check::ListingOrder);
}

/// Item 9: "lost 47,140 (497.4%)" in the sweep table beside 83.3% in the verdicts.
#[test]
fn a_loss_share_above_one_is_found() {
    let mut s = clean();
    s.verdicts
        .push(verdict(Cause::QdiscDrop, Kind::Loss, 4.974, Confidence::Strong));
    only(&s, &[], Check::OneLossShare);
    let step = json!({"requested_pps": 20000.0, "loss_share": 4.974, "verdicts": []});
    assert_eq!(step_findings(&step).len(), 1);
    let step = json!({"requested_pps": 20000.0, "loss_share": 0.833, "verdicts": [
        serde_json::to_value(verdict(Cause::QdiscDrop, Kind::Loss, 0.833, Confidence::Strong)).unwrap()
    ]});
    assert!(step_findings(&step).is_empty());
}

/// Item 10: root-namespace devices the family never used under queues, 5 `lo` NO_SOCKET drops
/// of the root namespace charged to a scanner in another, 31 probes its target's own TCP took.
#[test]
fn other_processes_things_in_the_run_are_found() {
    let drop_row = |reason: &str, location: &str, device: &str, count: u64| DropRow {
        reason: reason.into(),
        location: location.into(),
        device: Some(device.into()),
        netns: 1,
        class: DropClass::TargetLoss,
        pid: Some(42),
        count,
        rate: count as f64 / 10.0,
    };
    let mut s = clean();
    s.queues = vec![QueueDepth {
        device: "docker0".into(),
        netns: 1,
        qlen_max: 3,
        backlog_max: 300,
    }];
    s.drops = vec![
        drop_row("NO_SOCKET", "__udp4_lib_rcv+0x1", "lo", 5),
        drop_row("NOT_SPECIFIED", "tcp_v4_rcv+0x2b", "eth0", 31),
    ];
    let found = checks(&s, &[]);
    assert_eq!(found, vec![Check::OnlyTheFamilysThings; 3], "{found:?}");
}

/// Item 11: "2000 SYNs sent (0 returned the answer: refused ...)" when all 2000 were refused.
#[test]
fn a_connect_line_counting_no_answer_is_found() {
    let s = patched(&clean(), |v| {
        v["connect"] = json!({"attempts": 2000, "syns": 2000, "answered": 2001, "failed": 0,
            "attempts_pps": 200.0, "connect_scanner": true})
    });
    only(&s, &[], Check::SmallerLines);
    // The line as it reads now for 2000 non-blocking connects, all refused after the call.
    let s = patched(&clean(), |v| {
        v["connect"] = json!({"attempts": 2000, "syns": 2000, "answered": 0, "failed": 0,
            "attempts_pps": 200.0, "connect_scanner": true})
    });
    assert_eq!(checks(&s, &[]), Vec::<Check>::new());
}
