//! Fixed runs for view tests: a Snapshot and Summary with something in every table, built
//! through the real Analyzer so that the views see what a run would give them.

use crate::collect::hist::Histogram;

/// A run with something in every table, so that every field appears: its last Snapshot and
/// its Summary.
pub fn rich_run() -> (crate::analysis::Snapshot, crate::analysis::Summary) {
    let (mut ticks, summary) = rich_ticks();
    (ticks.pop().expect("three ticks"), summary)
}

/// Every Snapshot of the fixed run (three ticks of 1 s at 100 pps), and its Summary.
pub fn rich_ticks() -> (Vec<crate::analysis::Snapshot>, crate::analysis::Summary) {
    use crate::analysis::{Analyzer, EndReason};
    use crate::collect::bpf_time::{BpfRunTime, ProgramRun, StatsCoverage, StatsHolder};
    use crate::collect::family::ProcessInfo;
    use crate::collect::*;
    let thread = |packets: u64, t: u64| ThreadCounters {
        tid: 7,
        pid: 7,
        calls: packets + 1,
        packets,
        bytes: packets * 64,
        failed_calls: 1,
        errors: [("ENOBUFS".to_string(), 1)].into(),
        latency: Histogram::from_buckets(&[0, 0, 5]),
        // Gaps around the 10 ms slot: most on time, a tenth of them late.
        gap: {
            let mut h = Histogram::default();
            for i in 0..packets {
                h.record(if i % 10 == 9 { 14_000_000 } else { 10_000_000 });
            }
            h
        },
        gap_sum_ns: packets * 10_400_000,
        gap_count: packets,
        first_send_ns: 1,
        last_send_ns: t,
        budget: TimeBudget {
            send_ns: t / 2,
            other_ns: t / 2,
            ..Default::default()
        },
        ..Default::default()
    };
    let sample = |t: u64, packets: u64| CounterSample {
        t_ns: t,
        device_sampling: None,
        skipped_runs: Vec::new(),
        processes: vec![ProcessInfo {
            pid: 7,
            ppid: 1,
            comm: "sender".into(),
            exe: "/bin/sender".into(),
            root: true,
            alive: true,
            exit_code: None,
            role: Some("sender".into()),
            start_s: None,
            exit_s: None,
            open_files_limit: Some(1024),
        }],
        threads: vec![thread(packets, t)],
        drops: vec![DropCount {
            reason: "QDISC_DROP".into(),
            location: "__dev_queue_xmit+0x1".into(),
            device: Some("veth0".into()),
            ifindex: 2,
            netns: 1,
            class: DropClass::TargetLoss,
            pid: Some(7),
            count: packets / 2,
        }],
        devices: vec![DeviceCounters {
            device: "veth0".into(),
            ifindex: 2,
            netns: 1,
            pid: Some(7),
            queued: packets,
            ..Default::default()
        }],
        queues: vec![QueueDepth {
            device: "veth0".into(),
            netns: 1,
            qlen_max: 3,
            backlog_max: 300,
        }],
        block_sites: vec![BlockSite {
            pid: 7,
            wait_site: "sock_alloc_send_pskb".into(),
            stack: vec!["sock_alloc_send_pskb+0x1".into()],
            blocked_ns: t / 4,
            episodes: 3,
            in_progress: 0,
        }],
        health: Health::default(),
        self_cpu_ns: t / 100,
        episodes: vec![BlockEpisode {
            pid: 7,
            tid: 7,
            start_ns: t - 500_000_000,
            duration_ns: 2_000_000,
            wait_site: "sock_alloc_send_pskb".into(),
        }],
        calls: if t == 1_000_000_000 {
            scanner_calls()
        } else {
            Vec::new()
        },
        uprobes: vec![crate::collect::uprobes::UprobeState {
            name: "init_tslot".into(),
            role: crate::wrappers::ProbeRole::RateSetup,
            symbol: "init_tslot".into(),
            binary: Some("/bin/sender".into()),
            per_packet: false,
            enabled: true,
            attached: true,
            pids: vec![7],
            hits: 1,
            returns: 1,
            inside_ns: 100_000_000,
            note: None,
        }],
        // BPF statistics on for a tenth of the time: 3 syscall-program runs of 200 ns and one
        // device-program run of 500 ns per packet counted in the slices (1.1 us per packet, of
        // which 700 ns on the target's threads).
        bpf: Some(BpfRunTime {
            coverage: StatsCoverage::Sampled,
            holder: StatsHolder::Scanprof,
            measured_ns: t / 10,
            target_timed: true,
            timing_floor: false,
            // The device program ran on the target's threads for every packet; the syscall
            // program for one call in three (the others were other processes' syscalls).
            programs: vec![
                ProgramRun {
                    name: "netdev.on_dev_queue".into(),
                    runs: packets / 10,
                    run_time_ns: packets / 10 * 500,
                    target_runs: packets / 10,
                    target_ns: packets / 10 * 500,
                    timing_floor_ns: 0,
                },
                ProgramRun {
                    name: "send_path.on_sys_enter".into(),
                    runs: packets * 3 / 10,
                    run_time_ns: packets * 3 / 10 * 200,
                    target_runs: packets / 10,
                    target_ns: packets / 10 * 200,
                    timing_floor_ns: 0,
                },
            ],
        }),
        tunables: Default::default(),
        socket_drops_seen: true,
        recv_class_bounds: Vec::new(),
        cgroups: Vec::new(),
        steal: None,
        conntrack: Vec::new(),
        packet_rings: Vec::new(),
        replies: None,
        udp_refused: None,
        syn_retransmits: None,
    };
    let mut a = Analyzer::new(Some(100.0), 0);
    a.set_scanner(crate::analysis::ScannerModel::new(
        "unicornscan",
        [("4".to_string(), "WORKUNIT".to_string())].into_iter().collect(),
        Some(100.0),
        crate::analysis::ArgvRate {
            // Not unicornscan's (it has a rate option): here so that every field is printed.
            window: Some(crate::analysis::scanner::WindowView {
                concurrency: 200.0,
                timeout_ms: 500.0,
                source: "argv: -b 200, argv: -t 500 ms".into(),
            }),
            pps: Some(100.0),
            kind: Some(crate::wrappers::RateKind::Exact),
            floor_pps: None,
            provenance: vec!["argv: -r 100".into()],
            origin: crate::wrappers::RateOrigin::Given,
            conflicts: vec![],
            per_target: None,
            process: None,
        },
        Some(1e9),
        0,
    ));
    let mut ticks = vec![
        a.tick(&sample(1_000_000_000, 100), &[]),
        a.tick(&sample(2_000_000_000, 200), &[]),
    ];
    let last = sample(3_000_000_000, 300);
    ticks.push(a.tick(&last, &["a warning".into()]));
    let probes = vec![crate::probes::ProbeStatus {
        name: "drops.on_kfree_skb".into(),
        attached: true,
        error: None,
    }];
    a.set_baseline(Some(crate::analysis::Baseline {
        rate: 100.0,
        pacer: crate::wrappers::PacerKind::Tsc,
        achieved_pps: 100.0,
        accuracy: Some(1.0),
        p99_lateness_ns: Some(2_000.0),
        receiver_packets: 200,
        sent: 200,
    }));
    (ticks, a.summary(&last, EndReason::Duration, probes, vec![]))
}

/// A work unit of 100 pps handed from pid 6 to pid 7, set up, calibrated and reported done.
fn scanner_calls() -> Vec<crate::collect::uprobes::ProbeCall> {
    let call = |probe: &str, role: &str, pid: u32, ms: u64, entry: bool, values: &[(&str, f64)]| {
        crate::collect::uprobes::ProbeCall {
            probe: probe.into(),
            role: serde_json::from_value(role.into()).expect("a probe role"),
            pid,
            tid: pid,
            ts_ns: ms * 1_000_000,
            entry,
            values: values.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            ret: None,
            inside_ns: if entry { 0 } else { 100_000_000 },
            packets: if ms > 900 { 90 } else { 0 },
            last_pkt_ns: if ms > 900 { 990_000_000 } else { 0 },
            recipient: None,
        }
    };
    vec![
        call(
            "send_message",
            "ipc_send",
            6,
            10,
            true,
            &[("type", 4.0), ("len", 700.0), ("pps", 100.0)],
        ),
        call(
            "init_tslot",
            "rate_setup",
            7,
            11,
            true,
            &[("pps", 100.0), ("delay_type", 1.0)],
        ),
        call("tsc_init_tslot", "calibration", 7, 11, true, &[("pps", 100.0)]),
        call(
            "tsc_init_tslot",
            "calibration",
            7,
            111,
            false,
            &[("delay", 1.01e7), ("delay_unit_tsc_cycles", 1.0)],
        ),
        call("init_tslot", "rate_setup", 7, 111, false, &[]),
        call(
            "send_message",
            "ipc_send",
            7,
            999,
            true,
            &[
                ("type", 5.0),
                ("len", 16.0),
                ("reported_pps", 100.0),
                ("packets_sent", 90.0),
            ],
        ),
    ]
}

/// The fixed run as a bundle would hold it.
pub fn rich_recording() -> crate::views::export::Recording {
    use crate::views::export::{Meta, Recording};
    let (ticks, summary) = rich_ticks();
    Recording {
        meta: Meta {
            command_line: [
                "scanprof",
                "run",
                "--requested",
                "100",
                "--",
                "sender",
                "--to",
                "10.99.0.2:9000",
            ]
            .map(String::from)
            .to_vec(),
            version: "0.1.0".into(),
            started_at: "2026-11-21T06:00:00Z".into(),
            hostname: "lab-host".into(),
            kernel: "6.18.44".into(),
            drop_reasons: [(2, "NOT_SPECIFIED"), (3, "NO_SOCKET"), (5, "QDISC_DROP")]
                .map(|(n, name)| (n, name.to_string()))
                .into(),
            exported_mid_run: false,
        },
        processes: ticks[0].processes.clone(),
        probes: summary.probes.clone(),
        // A host up for about 2.8 hours, suspended for 5 s once, at 06:00:00 UTC.
        clocks: Some(crate::system::ClockReadings {
            monotonic_ns: 10_000_000_000_000,
            boottime_ns: 10_005_000_000_000,
            realtime_ns: 1_795_240_800_000_000_000,
        }),
        ticks,
        summary: Some(summary),
    }
}

/// Eight ranked verdicts: five share-bearing ones, a strong `ring_full` sixth (the one a list of
/// the first five hid), then two weak ones at 0.0% that every view counts instead of showing.
pub fn verdicts_beyond_five() -> Vec<crate::analysis::Verdict> {
    use crate::analysis::verdict::{Cause, Confidence, Kind};
    use Confidence::{Strong, Weak};
    // A table, one verdict a row.
    #[rustfmt::skip]
    let rows = [
        (Cause::CpuBound, Kind::Gap, 0.40, Strong, "The sender is CPU-bound."),
        (Cause::Preempted, Kind::Gap, 0.10, Weak, "The sender waits for a CPU."),
        (Cause::IdleWaits, Kind::Gap, 0.05, Weak, "The sender stalls outside its pacing."),
        (Cause::PacingCoarse, Kind::Gap, 0.02, Weak, "The pacer wakes late."),
        (Cause::UnitIdle, Kind::Gap, 0.01, Weak, "Work units wait between them."),
        (Cause::RingFull, Kind::Loss, 0.089, Strong, "The listener missed 921 replies."),
        (Cause::ClaimMismatch, Kind::Gap, 0.0, Weak, "The scanner's own figures disagree."),
        (Cause::Steal, Kind::Gap, 0.0, Weak, "The hypervisor stole time."),
    ];
    rows.into_iter()
        .map(
            |(cause, kind, share, confidence, sentence)| crate::analysis::Verdict {
                cause,
                kind,
                sentence: sentence.into(),
                share,
                evidence: vec![format!("evidence of {cause}")],
                next_step: format!("next step of {cause}"),
                confidence,
            },
        )
        .collect()
}
