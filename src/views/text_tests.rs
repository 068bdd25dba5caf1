//! Unit tests of the text report and the tick line, rendered from fixed `Summary`/`Snapshot`
//! values built here field by field (no probes, no clock).
//!
//! Golden snapshot: `full_report_matches_the_committed_snapshot` compares the whole report of
//! `fixed_summary()` with tests/snapshots/summary.txt. After an intended change to the report,
//! rewrite it with `UPDATE_SNAPSHOTS=1 cargo test --lib views::text`, read the diff, commit it.

use std::collections::BTreeMap;

use super::*;
use crate::analysis::stats::RunStats;
use crate::analysis::{
    BlockSiteView, BudgetShares, DeviceView, DropRow, GapView, Snapshot, Summary, ThreadView,
};
use crate::collect::family::ProcessInfo;
use crate::collect::{Health, QueueDepth, TimeBudget};
use crate::probes::ProbeStatus;

const MS: u64 = 1_000_000;

fn drop_row(class: DropClass, reason: &str, location: &str, pid: Option<u32>, count: u64) -> DropRow {
    DropRow {
        reason: reason.to_string(),
        location: location.to_string(),
        device: Some("eth0".to_string()),
        netns: 1,
        class,
        pid,
        count,
        rate: count as f64 / 3.0,
    }
}

/// A 3 s run of a scanner asked for 2000 pps that sent 3000 packets in a 2 s send window.
fn fixed_summary() -> Summary {
    // stage -> count over the run; the rate is count / 2 s
    let counts = [
        ("send_calls", 1600),
        ("syscall_packets", 3000),
        ("dev_queue", 3000),
        ("qdisc_enqueue", 2900),
        ("qdisc_dequeue", 2800),
        ("dev_xmit", 2800),
        ("target_drops", 48),
    ];
    Summary {
        duration_s: 3.0,
        send_window_s: 2.0,
        requested_pps: Some(2000.0),
        achieved_pps: 1500.0,
        ratio: Some(0.75),
        packets: 3000,
        bytes: 180_000,
        send_calls: 1600,
        failed_calls: 4,
        errors: BTreeMap::from([("EAGAIN".to_string(), 1), ("ENOBUFS".to_string(), 3)]),
        stages: counts
            .iter()
            .map(|(n, c)| (n.parse().unwrap(), *c as f64 / 2.0))
            .collect(),
        stage_counts: counts.iter().map(|(n, c)| (n.parse().unwrap(), *c)).collect(),
        rate_stats: Some(RunStats {
            n: 2,
            median: 1500.0,
            mean: 1500.0,
            outliers: 0,
            uncertainty: 3.5,
            p95: 1504.5,
            p99: 1504.9,
            min: 1495.0,
            max: 1505.0,
            modes: None,
            ticks_per_sample: 1,
        }),
        drops: vec![
            drop_row(DropClass::TargetLoss, "QDISC_DROP", "__dev_queue_xmit+0x7a", Some(4242), 48),
            drop_row(DropClass::Expected, "NO_SOCKET", "tcp_v4_rcv+0x1e4", Some(4242), 900),
            drop_row(DropClass::Unrelated, "NO_SOCKET", "udp_queue_rcv_one_skb+0x3a", None, 1000),
            drop_row(DropClass::Unrelated, "NETFILTER_DROP", "nf_hook_slow+0x9c", None, 2000),
        ],
        processes: vec![
            ProcessInfo {
                pid: 4242,
                ppid: 1,
                comm: "zmap".to_string(),
                exe: "/usr/sbin/zmap".to_string(),
                root: true,
                alive: false,
                exit_code: Some(256), // exit(1)
                role: None,
                start_s: None,
                exit_s: None,
                open_files_limit: None,
            },
            ProcessInfo {
                pid: 4250,
                ppid: 4242,
                comm: "zmap-recv".to_string(),
                exe: "/usr/sbin/zmap".to_string(),
                root: false,
                alive: false,
                exit_code: Some(9), // SIGKILL
                role: None,
                start_s: None,
                exit_s: None,
                open_files_limit: None,
            },
        ],
        // 2 s of sender time: 30% / 12.5% / 45% / 2.5% / 10%
        budget: TimeBudget {
            send_ns: 600 * MS,
            blocked_send_ns: 250 * MS,
            sleep_ns: 900 * MS,
            preempted_ns: 50 * MS,
            other_ns: 200 * MS,
            wakeup_wait_ns: None,
        },
        block_sites: vec![
            BlockSiteView {
                pid: 4242,
                wait_site: "sock_alloc_send_pskb".to_string(),
                stack: vec![
                    "schedule_timeout+0x1a".to_string(),
                    "sock_alloc_send_pskb+0x2b4".to_string(),
                ],
                blocked_s: 0.2,
                episodes: 12,
                share: 0.8,
            },
            BlockSiteView {
                pid: 4242,
                wait_site: "__lock_sock".to_string(),
                stack: vec!["__lock_sock+0x70".to_string()],
                blocked_s: 0.05,
                episodes: 3,
                share: 0.2,
            },
        ],
        gap: GapView {
            count: 2999,
            mean_ns: Some(666_888.0),
            p50_ns: Some(500_000.0),
            p99_ns: Some(2_500_000.0),
            slot_ns: Some(500_000.0),
            histogram: vec![(491_520, 524_288, 2500), (2_359_296, 2_621_440, 499)],
        },
        latency_p50_ns: Some(1_500.0),
        latency_p99_ns: Some(48_000.0),
        devices: vec![DeviceView {
            device: "eth0".to_string(),
            netns: 1,
            target_queued_pps: 1000.0,
            target_xmit_pps: 933.3,
            all_xmit_pps: 1200.0,
            xmit_refused: 0,
            qlen_max: Some(64),
            backlog_max_bytes: Some(9600),
            neigh_started: 1,
            neigh_queued: 3,
            neigh_resolved: 1,
            neigh_failed: 0,
            qdisc: None,
        }],
        queues: vec![
            QueueDepth {
                device: "eth0".to_string(),
                netns: 1,
                qlen_max: 64,
                backlog_max: 9600,
            },
            QueueDepth {
                device: "lo".to_string(),
                netns: 1,
                qlen_max: 0,
                backlog_max: 0,
            },
        ],
        lost_events: 2,
        health: Health {
            lost_events: 2,
            ..Default::default()
        },
        probes: vec![ProbeStatus {
            name: "drops.on_kfree_skb".to_string(),
            attached: false,
            error: Some("tracepoint skb:kfree_skb not found".to_string()),
        }],
        warnings: vec![
            "probe drops.on_kfree_skb unavailable (tracepoint skb:kfree_skb not found): its figures are missing from this run".to_string(),
            "2 probe records were lost (ring buffer full): process and blocking events may be incomplete".to_string(),
        ],
        ..Summary::for_tests()
    }
}

/// The report line that starts (after indentation) with `prefix`.
fn line_of<'a>(report: &'a str, prefix: &str) -> &'a str {
    report
        .lines()
        .find(|l| l.trim_start().starts_with(prefix))
        .unwrap_or_else(|| panic!("no line starting with {prefix:?} in:\n{report}"))
}

/// The report is its sections, each rendered alone, in reading order: the headline, the
/// verdicts, the drops, the family, the funnel, the time, the cost, then the warnings.
#[test]
fn the_summary_is_its_sections_in_reading_order() {
    let mut s = fixed_summary();
    s.verdicts = crate::views::fixtures::verdicts_beyond_five();
    let r = Report::new(&s);
    let section = |draw: &dyn Fn(&mut String)| {
        let mut o = String::new();
        draw(&mut o);
        visible_lines(o)
    };
    let parts = [
        section(&|o| headline(o, &s, &r)),
        section(&|o| verdict_section(o, &r.verdicts)),
        section(&|o| drops_section(o, &s, &r)),
        section(&|o| family_section(o, &r)),
        section(&|o| funnel_section(o, &s, &r)),
        section(&|o| time_section(o, &s, &r)),
        section(&|o| cost_section(o, &s)),
    ];
    let whole = summary(&s);
    let mut at = 0;
    for (i, part) in parts.iter().enumerate() {
        assert!(!part.is_empty(), "section {i} is empty");
        let found = whole[at..]
            .find(part.as_str())
            .unwrap_or_else(|| panic!("section {i} not in order in the summary:\n{part}\n---\n{whole}"));
        at += found + part.len();
    }
    assert!(
        parts[0].starts_with("scanprof: run of 3.00 s ended"),
        "{}",
        parts[0]
    );
    assert!(parts[2].starts_with("\ndrops:\n"), "{}", parts[2]);
    assert!(parts[3].starts_with("\nprocess family:\n"), "{}", parts[3]);
    assert!(
        parts[4].starts_with("\nfunnel (per second over the send window):\n"),
        "{}",
        parts[4]
    );
    assert!(parts[6].starts_with("\nscanprof's own cost: "), "{}", parts[6]);
}

/// A run that dropped nothing of the target's says so in its drops section, and nothing else.
#[test]
fn the_drops_section_of_a_run_without_drops_says_none() {
    let s = Summary::for_tests();
    let mut o = String::new();
    drops_section(&mut o, &s, &Report::new(&s));
    assert_eq!(
        o,
        "\ndrops:\n  none of the target's packets or replies were dropped\n"
    );
}

#[test]
fn report_states_requested_and_achieved_with_percentage() {
    let r = summary(&fixed_summary());
    assert!(
        r.contains("requested 2000 pps, achieved 1500.0 pps (75.0%): 3000 packets in a 2.000 s send window, 1600 send calls, 4 failed"),
        "{r}"
    );
    assert!(
        r.contains("run of 3.00 s ended: the requested duration elapsed"),
        "{r}"
    );
    assert!(r.contains("send errors: EAGAIN 1, ENOBUFS 3"), "{r}");
    assert!(
        r.contains("per-tick rate over 2 complete ticks: median 1500.0 +/- 3.5, mean 1500.0 (0 outliers left out), p95 1504.5, p99 1504.9, min 1495.0, max 1505.0"),
        "{r}"
    );
}

#[test]
fn bimodal_tick_rates_are_shown_as_two_modes_not_a_centre() {
    // A sender blocked for seconds at a time: 22 ticks stalled near zero, 18 sending near 415
    // pps; the run achieved 186.8 pps. A median of 11.5 and a mean of 1.0 describe neither.
    let mut samples: Vec<f64> = (0..22).map(|i| [0.0, 1.0, 11.5, 13.0][i % 4]).collect();
    samples.extend((0..18).map(|i| 405.0 + (i % 5) as f64 * 5.0));
    let mut s = fixed_summary();
    s.achieved_pps = 186.8;
    s.rate_stats = crate::analysis::stats::RunStats::from_samples(&samples);
    let r = summary(&s);
    let line = line_of(&r, "per-tick rate");
    assert_eq!(
        line,
        "per-tick rate over 40 complete ticks is bimodal, so no centre describes it: sending 45% of the ticks at median 415.0 pps (405.0 to 425.0), stalled 55% at median 1.0 pps (0.0 to 13.0)"
    );
    assert!(!r.contains("outliers left out"), "{r}");
}

#[test]
fn report_without_requested_rate_says_so_and_has_no_percentages() {
    let s = Summary {
        requested_pps: None,
        ratio: None,
        ..fixed_summary()
    };
    let r = summary(&s);
    assert!(
        r.contains("requested rate unknown (--requested PPS), achieved 1500.0 pps: 3000 packets"),
        "{r}"
    );
    assert!(!line_of(&r, "syscall_packets").contains('%'), "{r}");
}

#[test]
fn report_lists_every_stage_with_rate_count_and_share_of_requested() {
    let r = summary(&fixed_summary());
    let funnel = r
        .find("funnel (per second over the send window):")
        .expect("funnel header");
    let mut at = funnel;
    for (name, pps, count, pct) in [
        ("send_calls", "800.0 /s", "1600", "40.0%"),
        ("syscall_packets", "1500.0 /s", "3000", "75.0%"),
        ("dev_queue", "1500.0 /s", "3000", "75.0%"),
        ("qdisc_enqueue", "1450.0 /s", "2900", "72.5%"),
        ("qdisc_dequeue", "1400.0 /s", "2800", "70.0%"),
        ("dev_xmit", "1400.0 /s", "2800", "70.0%"),
        ("target_drops", "24.0 /s", "48", "1.2%"),
    ] {
        let line = line_of(&r, name);
        let fields: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(fields[0], name);
        assert_eq!(format!("{} {}", fields[1], fields[2]), pps, "{line}");
        assert_eq!(fields[3], count, "{line}");
        assert_eq!(fields[4], pct, "{line}");
        // in STAGES order
        let pos = r.find(line).unwrap();
        assert!(pos > at, "{name} out of order:\n{r}");
        at = pos;
    }
}

#[test]
fn no_qdisc_note_only_when_nothing_was_enqueued() {
    let with_qdisc = summary(&fixed_summary());
    assert!(!with_qdisc.contains("no queueing qdisc"), "{with_qdisc}");

    let mut s = fixed_summary();
    for stage in ["qdisc_enqueue", "qdisc_dequeue"] {
        s.stage_counts.insert(stage.parse().unwrap(), 0);
        s.stages.insert(stage.parse().unwrap(), 0.0);
    }
    let r = summary(&s);
    assert!(
        line_of(&r, "qdisc_enqueue").ends_with("(no queueing qdisc on the path)"),
        "{r}"
    );
    assert!(
        line_of(&r, "qdisc_dequeue").ends_with("(no queueing qdisc on the path)"),
        "{r}"
    );
    assert!(!line_of(&r, "dev_xmit").contains("qdisc"), "{r}");
    assert_eq!(r.matches("(no queueing qdisc on the path)").count(), 2);

    // packets went into a qdisc that released none (all dropped or still queued): it is there
    let mut s = fixed_summary();
    s.stage_counts.insert(StageName::QdiscDequeue, 0);
    s.stages.insert(StageName::QdiscDequeue, 0.0);
    let r = summary(&s);
    assert!(!r.contains("no queueing qdisc"), "{r}");
}

#[test]
fn drop_rows_name_class_reason_location_device_and_pid() {
    let r = summary(&fixed_summary());
    // The class as every other view names it (it read `TargetLoss`, Rust's name, before).
    let line = line_of(&r, "target_loss");
    let fields: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(
        fields,
        [
            "target_loss",
            "QDISC_DROP",
            "48",
            "at",
            "__dev_queue_xmit+0x7a",
            "dev",
            "eth0",
            "pid",
            "4242"
        ]
    );
    assert!(line_of(&r, "expected").contains("NO_SOCKET"), "{r}");
    assert!(!r.contains("TargetLoss"), "{r}");
    // somebody else's drops are one sum, not rows
    assert!(!r.contains("Unrelated"), "{r}");
    assert!(!r.contains("nf_hook_slow"), "{r}");
    assert!(
        r.contains("  (and 3000 drops of other processes' packets on this machine)"),
        "{r}"
    );
    assert!(!r.contains("none of the target's packets"), "{r}");
}

#[test]
fn drop_rows_without_device_or_pid_show_dashes() {
    let mut s = fixed_summary();
    s.drops = vec![DropRow {
        device: None,
        pid: None,
        ..drop_row(
            DropClass::ReplyLoss,
            "SOCKET_RCVBUFF",
            "udp_queue_rcv_one_skb+0x3a",
            None,
            5,
        )
    }];
    let r = summary(&s);
    assert!(
        line_of(&r, "reply_loss").ends_with("at udp_queue_rcv_one_skb+0x3a  dev -  pid -"),
        "{r}"
    );
    assert!(!r.contains("drops of other processes"), "{r}");
}

#[test]
fn only_unrelated_drops_means_none_of_the_targets() {
    let mut s = fixed_summary();
    s.drops.retain(|d| d.class == DropClass::Unrelated);
    let r = summary(&s);
    assert!(
        r.contains("  none of the target's packets or replies were dropped"),
        "{r}"
    );
    assert!(r.contains("(and 3000 drops of other processes' packets"), "{r}");
}

#[test]
fn the_time_budget_shown_is_the_send_windows_when_measured() {
    // The whole-run budget is the fixture's; the one sending thread's own send window is 1 s:
    // 50% sending, 20% sleeping, 20% waiting for a CPU (15% after wake-ups), 10% other.
    let mut s = fixed_summary();
    let window = TimeBudget {
        send_ns: 500 * MS,
        blocked_send_ns: 0,
        sleep_ns: 200 * MS,
        preempted_ns: 200 * MS,
        other_ns: 100 * MS,
        wakeup_wait_ns: Some(150 * MS),
    };
    s.threads = vec![ThreadView {
        tid: 4242,
        pid: 4242,
        comm: "sender".into(),
        calls: 1000,
        packets: 1000,
        pps: 1000.0,
        failed_calls: 0,
        errors: BTreeMap::new(),
        budget: s.budget,
        shares: BudgetShares::default(),
        send_window_budget: Some(window),
        latency_p50_ns: None,
        latency_p99_ns: None,
        blocked_now: None,
    }];
    let r = summary(&s);
    assert!(
        r.contains("sender threads' time over their send windows: sending 50.0% | blocked in send 0.0% | sleeping 20.0% | waiting for a CPU 20.0% (15.0% after wake-ups) | other (user code, pacing) 10.0%"),
        "{r}"
    );
}

#[test]
fn report_shows_time_budget_wait_sites_gaps_and_latency() {
    let r = summary(&fixed_summary());
    assert!(
        r.contains("sender threads' time since attach: sending 30.0% | blocked in send 12.5% | sleeping 45.0% | waiting for a CPU 2.5% | other (user code, pacing) 10.0%"),
        "{r}"
    );
    assert!(
        r.contains("  blocked in send 0.200 s at sock_alloc_send_pskb (pid 4242, 12 episodes, 80.0% of blocked time)"),
        "{r}"
    );
    assert!(
        r.contains("  blocked in send 0.050 s at __lock_sock (pid 4242, 3 episodes, 20.0% of blocked time)"),
        "{r}"
    );
    assert!(
        r.contains("inter-send gap: mean 666.9 us, p50 500.0 us, p99 2.500 ms (requested slot 500.0 us)"),
        "{r}"
    );
    assert!(
        r.contains("send syscall duration: p50 1.5 us, p99 48.0 us"),
        "{r}"
    );
    assert!(
        r.contains("qdisc on eth0 peaked at 64 packets / 9600 bytes queued"),
        "{r}"
    );
    assert!(!r.contains("qdisc on lo"), "{r}");
    assert!(
        r.contains("neighbour resolution on eth0: 1 started, 3 packets queued, 1 resolved, 0 failed"),
        "{r}"
    );
}

#[test]
fn report_shows_family_lost_records_and_warnings() {
    let r = summary(&fixed_summary());
    let root = line_of(&r, "pid 4242");
    assert!(
        root.contains("zmap") && root.ends_with("[exited 1, target]"),
        "{root}"
    );
    assert!(line_of(&r, "pid 4250").ends_with("[killed by signal 9]"), "{r}");
    assert!(r.contains("lost probe records: 2\n"), "{r}");
    assert!(r.contains("scanprof's own cost: 0.0% of a CPU"), "{r}");
    let warnings: Vec<&str> = r.lines().filter(|l| l.starts_with("warning: ")).collect();
    assert_eq!(
        warnings,
        [
            "warning: probe drops.on_kfree_skb unavailable (tracepoint skb:kfree_skb not found): its figures are missing from this run",
            "warning: 2 probe records were lost (ring buffer full): process and blocking events may be incomplete",
        ]
    );
}

fn snapshot(requested_pps: Option<f64>, achieved_pps: f64, drops: Vec<DropRow>) -> Snapshot {
    Snapshot {
        tick: 3,
        t_s: 3.0,
        requested_pps,
        achieved_pps,
        ratio: requested_pps.map(|r| achieved_pps / r),
        drops,
        ..Snapshot::for_tests()
    }
}

#[test]
fn tick_line_with_requested_rate_and_target_drops() {
    let drops = vec![
        DropRow {
            rate: 10.0,
            ..drop_row(
                DropClass::TargetLoss,
                "QDISC_DROP",
                "__dev_queue_xmit+0x7a",
                Some(4242),
                30,
            )
        },
        DropRow {
            rate: 2.5,
            ..drop_row(
                DropClass::TargetLoss,
                "NETFILTER_DROP",
                "nf_hook_slow+0x9c",
                Some(4242),
                8,
            )
        },
        // not the target's packets: not in the line
        DropRow {
            rate: 100.0,
            ..drop_row(
                DropClass::Expected,
                "NO_SOCKET",
                "tcp_v4_rcv+0x1e4",
                Some(4242),
                300,
            )
        },
    ];
    let line = tick_line(&snapshot(Some(2000.0), 1500.0, drops));
    assert_eq!(
        line,
        "[    3.0 s] achieved     1500.0 pps of 2000 requested ( 75.0%), target packets dropped 12.5/s"
    );
}

#[test]
fn tick_line_without_requested_rate() {
    let line = tick_line(&snapshot(None, 987.04, Vec::new()));
    assert_eq!(line, "[    3.0 s] achieved      987.0 pps");
}

#[test]
fn full_report_matches_the_committed_snapshot() {
    let rendered = summary(&fixed_summary());
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots/summary.txt");
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some_and(|v| v == "1") {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &rendered).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; create it with UPDATE_SNAPSHOTS=1 cargo test --lib views::text",
            path.display()
        )
    });
    assert!(
        rendered == committed,
        "the report differs from {} (if intended, rerun with UPDATE_SNAPSHOTS=1 and commit the diff)\n--- committed\n{committed}\n--- rendered\n{rendered}",
        path.display()
    );
}

#[test]
fn baseline_is_set_beside_the_targets_figure() {
    let (_, mut s) = crate::views::fixtures::rich_run();
    let r = summary(&s);
    let line = r
        .lines()
        .find(|l| l.starts_with("baseline on this machine"))
        .expect("a baseline line");
    assert!(
        line.contains("a tsc-paced reference sender reached 100.0 pps at 100 requested"),
        "{line}"
    );
    assert!(
        line.contains(&format!("the target reached {:.1}% of that", s.achieved_pps)),
        "{line}"
    );
    assert!(
        line.contains("(200 sent, 200 received in a private lab)"),
        "{line}"
    );
    s.baseline = None;
    assert!(!summary(&s).contains("baseline on this machine"));
}

#[test]
fn report_shows_the_scanners_own_view_and_the_diagnosis() {
    let (_, s) = crate::views::fixtures::rich_run();
    let r = summary(&s);
    for want in [
        "scanner (profile unicornscan): requested rate 100 pps (exact)",
        "  from --requested 100",
        "  from argv: -r 100",
        "  from work unit 1 (WORKUNIT) from pid 6: pps=100, to sender (pid 7)",
        "  calibration tsc_init_tslot in pid 7 at 0.011 s took 100.0 ms, derived delay 10100000 tsc_cycles = 10.100 ms per packet against a slot of 10.000 ms: error +1.00%",
        "  ipc: sender (pid 7) send type 5 x1 (16 bytes)",
        "  ipc: ? (pid 6) send WORKUNIT x1 (700 bytes)",
        "\ndiagnosis:\n  1. [",
    ] {
        assert!(r.contains(want), "missing {want:?} in\n{r}");
    }
    assert!(r.contains("    #1   pid 7"), "work-unit line:\n{r}");
}

#[test]
fn work_unit_moments_not_seen_are_a_dash_without_a_unit() {
    // It read "handed - s ... done - s".
    let (_, mut s) = crate::views::fixtures::rich_run();
    let sc = s.scanner.as_mut().expect("the rich run has a scanner");
    sc.work_units = vec![crate::analysis::scanner::WorkUnitView {
        index: 1,
        handed_s: Some(0.25),
        ..Default::default()
    }];
    let r = summary(&s);
    let line = line_of(&r, "#1");
    assert!(
        line.contains("handed 0.250 s, set up -, sending -, done -:"),
        "{line}"
    );
    assert!(!line.contains("- s"), "{line}");
}

#[test]
fn report_gives_the_probes_cost_per_packet_what_it_covers_and_the_alert_above_five_percent() {
    // The fixture counts, in a tenth of each tick, 0.3 runs of 200 ns and 0.1 of 500 ns per packet:
    // scaled to the run, 600 + 500 ns per packet, of which 200 + 500 ns on the target's threads.
    let (mut tick, mut s) = crate::views::fixtures::rich_run();
    let r = summary(&s);
    assert!(
        r.contains("scanprof's BPF programs on the target's threads: 700 ns per target packet, 0.0% of the target's on-CPU time (sampled 10% of the time;"),
        "{r}"
    );
    assert!(
        r.contains("  tax on the rest of the machine: 80.0 us of BPF run time outside the target's threads"),
        "{r}"
    );
    assert!(
        r.contains("  per packet, all runs: send_path.on_sys_enter 600 ns, 200 ns on the target's threads (200 ns a run), netdev.on_dev_queue 500 ns, 500 ns on the target's threads (500 ns a run)"),
        "{r}"
    );
    assert!(!r.contains("WARNING"), "{r}");
    let line = tick_line(&tick);
    assert!(
        line.contains(", probes on target threads 700 ns per packet, 0.0% of the target's on-CPU time (sampled 10% of the time), tax on the rest of the machine 0.0% of a CPU"),
        "{line}"
    );
    let b = s.cost.bpf.as_mut().expect("measured");
    b.share_of_target = Some(0.25);
    b.alert = true;
    let r = summary(&s);
    assert!(
        r.contains("WARNING: scanprof's probes take 25.0% of the target's on-CPU time (700 ns per packet on its threads, their run time; the kernel's dispatch to them costs more on top): a target that sends as fast as its CPU allows is at least 33% faster without scanprof"),
        "{r}"
    );
    // A tick without a share says why, and never warns.
    let b = tick.cost.bpf.as_mut().expect("measured");
    b.share_of_target = None;
    b.no_share = Some(crate::analysis::NoShare::FewPackets);
    b.packets = 40;
    b.alert = false;
    let line = tick_line(&tick);
    assert!(
        line.contains("no share of the target's time (it sent 40 packets, under 100)"),
        "{line}"
    );
    assert!(!line.contains("PROBES TAKE"), "{line}");
}

#[test]
fn every_evidence_line_of_a_verdict_is_shown_and_long_ones_wrap() {
    // The report cut the evidence at 4 lines: the line that explained a weak verdict and the
    // neighbour-queue count were only in the JSON.
    let mut s = fixed_summary();
    let long = format!(
        "line 6: the neighbour queue held {} packets while {}",
        41,
        "the address resolved, ".repeat(6)
    );
    s.verdicts = vec![crate::analysis::Verdict {
        cause: crate::analysis::verdict::Cause::CpuBound,
        kind: crate::analysis::verdict::Kind::Gap,
        sentence: "The sender is busy in its own code.".into(),
        share: 0.25,
        evidence: vec![
            "line 1".into(),
            "line 2".into(),
            "line 3".into(),
            "line 4".into(),
            "line 5: weak because the run was short".into(),
            long.clone(),
        ],
        next_step: "profile the sender".into(),
        confidence: crate::analysis::verdict::Confidence::Weak,
    }];
    let r = summary(&s);
    for want in [
        "line 1",
        "line 4",
        "       - line 5: weak because the run was short",
        "       - line 6: the neighbour queue held 41 packets",
    ] {
        assert!(r.contains(want), "missing {want:?} in\n{r}");
    }
    // The long line wraps under its bullet, every word kept, no row wider than the limit.
    let start = r.find("- line 6").expect("line 6");
    let rows: Vec<&str> = r[start - 7..]
        .lines()
        .take_while(|l| !l.contains("next:"))
        .collect();
    assert!(rows.len() >= 2, "{rows:?}");
    assert!(
        rows[1..]
            .iter()
            .all(|l| l.starts_with("         ") && !l.trim().starts_with('-')),
        "{rows:?}"
    );
    assert!(
        rows.iter()
            .all(|l| l.chars().count() <= 9 + super::EVIDENCE_WIDTH),
        "{rows:?}"
    );
    let words: Vec<&str> = rows
        .iter()
        .flat_map(|l| l.trim_start_matches([' ', '-']).split_whitespace())
        .collect();
    assert_eq!(words, long.split_whitespace().collect::<Vec<_>>());
    assert!(r.find("line 6").unwrap() < r.find("next: profile the sender").unwrap());
}

#[test]
fn wrapping_never_cuts_a_word() {
    assert_eq!(super::wrap_words("aaa bbb ccc", 7), ["aaa bbb", "ccc"]);
    assert_eq!(
        super::wrap_words("a 123456789012 b", 5),
        ["a", "123456789012", "b"]
    );
    assert_eq!(super::wrap_words("", 5), [""]);
}

#[test]
fn drop_rows_in_several_namespaces_name_theirs() {
    // Three NO_SOCKET rows at one location on different devices read alike without them.
    let mut s = fixed_summary();
    let at = |device: &str, netns: u32, count: u64| DropRow {
        device: Some(device.into()),
        netns,
        ..drop_row(
            DropClass::Expected,
            "NO_SOCKET",
            "__udp4_lib_rcv+0x7b4",
            Some(7),
            count,
        )
    };
    s.drops = vec![
        at("spv7503-0t", 4026532301, 30),
        at("lo", 4026532301, 20),
        at("eth0", 4026531840, 10),
    ];
    let r = summary(&s);
    for want in [
        "at __udp4_lib_rcv+0x7b4  dev spv7503-0t  netns 4026532301  pid 7",
        "at __udp4_lib_rcv+0x7b4  dev lo  netns 4026532301  pid 7",
        "at __udp4_lib_rcv+0x7b4  dev eth0  netns 4026531840  pid 7",
    ] {
        assert!(r.contains(want), "missing {want:?} in\n{r}");
    }
    // One namespace: the device alone, as before.
    for d in &mut s.drops {
        d.netns = 1;
    }
    let r = summary(&s);
    assert!(!r.contains("netns"), "{r}");
    assert!(r.contains("dev spv7503-0t  pid 7"), "{r}");
}

#[test]
fn the_receive_funnel_is_reported_only_when_the_family_receives() {
    use crate::analysis::{DropRow, ReceiveView, Stage};
    let plain = summary(&fixed_summary());
    assert!(!plain.contains("receive funnel"), "{plain}");
    let stage = |name: &str, count: u64| Stage {
        name: name.parse().unwrap(),
        count,
        pps: count as f64 / 3.0,
        total: count,
        ratio: None,
    };
    let s = Summary {
        receive: Some(ReceiveView {
            stages: vec![
                stage("recv_drops", 900),
                stage("recv_calls", 150),
                stage("recv_packets", 120),
            ],
            failed_calls: 30,
            bytes: 12_000,
            drops: vec![DropRow {
                reason: "SOCKET_RCVBUFF".into(),
                location: "udp_queue_rcv_one_skb+0x437".into(),
                device: Some("veth1".into()),
                netns: 4026532001,
                class: crate::collect::DropClass::ReplyLoss,
                pid: Some(7),
                count: 900,
                rate: 300.0,
            }],
            ..Default::default()
        }),
        ..fixed_summary()
    };
    let r = summary(&s);
    assert!(r.contains("receive funnel (per second over the run):"), "{r}");
    assert_eq!(
        line_of(&r, "recv_drops"),
        "  recv_drops              300.0 /s          900"
    );
    assert_eq!(
        line_of(&r, "recv_calls"),
        "  recv_calls               50.0 /s          150  (30 failed: nothing to read)"
    );
    assert_eq!(
        line_of(&r, "recv_packets"),
        "  recv_packets             40.0 /s          120  (12000 bytes)"
    );
    assert!(
        r.contains("dropped before the read: 900 SOCKET_RCVBUFF at udp_queue_rcv_one_skb+0x437 (pid 7, netns 4026532001)"),
        "{r}"
    );
}

#[test]
fn the_kernel_s_syn_retransmissions_are_their_own_row_and_not_the_scanner_s_sends() {
    use crate::analysis::ConnectView;
    let view = ConnectView {
        attempts: 100,
        syns: 100,
        answered: 0,
        failed: 0,
        attempts_pps: 500.0,
        connect_scanner: true,
        kernel_syn_retransmits: Some(200),
    };
    let mut s = Summary {
        connect: Some(view),
        ..fixed_summary()
    };
    s.stage_counts.insert(StageName::SyscallPackets, 100);
    s.stages.insert(StageName::SyscallPackets, 500.0);
    let r = summary(&s);
    assert!(
        r.contains("0 failed before their SYN; kernel SYN retransmissions 200 (the TCP timer's, for connects not answered in time: not the scanner's sends, not in its rate)"),
        "{r}"
    );
    let lines: Vec<&str> = r.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.trim_start().starts_with("syscall_packets"))
        .unwrap_or_else(|| panic!("no syscall_packets row: {r}"));
    let row = lines[at + 1];
    assert!(row.trim_start().starts_with("syn_retransmits"), "{r}");
    assert!(
        row.contains(" 200  (kernel SYN retransmissions over the run"),
        "{row}"
    );
    // none sent, or not counted: no row, and the connect line says nothing of them
    for n in [Some(0), None] {
        let s = Summary {
            connect: Some(ConnectView {
                kernel_syn_retransmits: n,
                ..view
            }),
            ..s.clone()
        };
        let r = summary(&s);
        assert!(!r.contains("syn_retransmits "), "{r}");
        assert_eq!(r.contains("kernel SYN retransmissions 0"), n.is_some(), "{r}");
    }
}

#[test]
fn a_connect_scanner_s_rate_is_named_connection_attempts() {
    use crate::analysis::ConnectView;
    let plain = summary(&fixed_summary());
    assert!(!plain.contains("connection attempts"), "{plain}");
    let view = ConnectView {
        attempts: 1000,
        syns: 990,
        answered: 20,
        failed: 10,
        attempts_pps: 500.0,
        connect_scanner: true,
        kernel_syn_retransmits: None,
    };
    let s = Summary {
        connect: Some(view),
        ..fixed_summary()
    };
    let r = summary(&s);
    assert!(r.contains("achieved 1500.0 connection attempts/s ("), "{r}");
    assert!(!r.contains(" pps ("), "{r}");
    assert!(
        r.contains("connection attempts (connect on TCP sockets): 1000 (500.0/s), 990 SYNs sent (20 answered within the call: refused, timed out or unreachable; 970 returned before their answer (a non-blocking connect: its answer, read later, is not counted here)), 10 failed before their SYN"),
        "{r}"
    );
    // nmap -sT's 2000 non-blocking connects, every one refused after its call returned: the
    // line read "2000 SYNs sent (0 returned the answer: refused ...)".
    let all_refused = Summary {
        connect: Some(ConnectView {
            attempts: 2000,
            syns: 2000,
            answered: 0,
            failed: 0,
            ..view
        }),
        ..fixed_summary()
    };
    let r = summary(&all_refused);
    assert!(!r.contains("0 returned the answer"), "{r}");
    assert!(
        r.contains("2000 SYNs sent (0 answered within the call: refused, timed out or unreachable; 2000 returned before their answer (a non-blocking connect: its answer, read later, is not counted here))"),
        "{r}"
    );
    // a few connects beside many sends: the rate stays packets per second
    let s = Summary {
        connect: Some(ConnectView {
            connect_scanner: false,
            kernel_syn_retransmits: None,
            ..view
        }),
        ..fixed_summary()
    };
    let r = summary(&s);
    assert!(!r.contains("connection attempts/s"), "{r}");
    assert!(
        r.contains("connection attempts (connect on TCP sockets): 1000"),
        "{r}"
    );
}

#[test]
fn a_connect_scanner_s_tick_line_counts_connection_attempts() {
    let mut s = snapshot(Some(500.0), 498.0, Vec::new());
    assert!(tick_line(&s).contains("498.0 pps"), "{}", tick_line(&s));
    s.connect_scanner = true;
    let line = tick_line(&s);
    assert!(
        line.contains("498.0 connection attempts/s of 500 requested"),
        "{line}"
    );
}

#[test]
fn the_receive_cost_is_reported_per_thread_and_in_all_with_the_capacity() {
    use crate::analysis::receive::capacity;
    use crate::analysis::{ReceiveCost, ReceiveView, ThreadReceiveCost};
    let cost = |workers: usize, packets: u64, ns: f64, split: Option<(f64, f64)>| ReceiveCost {
        workers,
        packets,
        pps: packets as f64 / 10.0,
        bytes: packets * 100,
        oncpu_ns: (packets as f64 * ns) as u64,
        oncpu_source: crate::analysis::OncpuSource::Kernel,
        probes_oncpu_ns: (packets as f64 * ns * 0.7) as u64,
        runq_ns: 0,
        ns_per_packet: Some(ns),
        user_ns: split.map(|(u, _)| (packets as f64 * u) as u64),
        system_ns: split.map(|(_, s)| (packets as f64 * s) as u64),
        user_ns_per_packet: split.map(|(u, _)| u),
        system_ns_per_packet: split.map(|(_, s)| s),
        capacity: Some(capacity(ns, 100.0, workers)),
    };
    let s = Summary {
        receive: Some(ReceiveView {
            threads: vec![
                ThreadReceiveCost {
                    tid: 11,
                    pid: 10,
                    cost: cost(1, 60_000, 2_000.0, Some((500.0, 1_500.0))),
                },
                ThreadReceiveCost {
                    tid: 12,
                    pid: 10,
                    cost: cost(1, 40_000, 2_500.0, Some((500.0, 2_000.0))),
                },
            ],
            cost: Some(cost(2, 100_000, 2_200.0, Some((500.0, 1_700.0)))),
            ..Default::default()
        }),
        ..fixed_summary()
    };
    let r = summary(&s);
    assert!(r.contains("cost per packet read"), "{r}");
    // 2 us a packet at 753,012 pps (1 Gbit/s of 100-byte datagrams): 1.51 CPUs.
    assert_eq!(
        line_of(&r, "tid 11"),
        "    tid 11            60000         6000      2.00      0.50      1.50       1.51      15.06"
    );
    assert_eq!(
        line_of(&r, "all (2)"),
        "    all (2)          100000        10000      2.20      0.50      1.70       1.66      16.57"
    );
    assert!(
        r.contains("capacity at 128-byte packets (166 on the wire; pps = bits / (8 x (packet + 38))): 1 Gbit/s = 753012 pps: 1.66 CPUs, 0.83 of each of 2 workers; 10 Gbit/s = 7530120 pps: 16.57 CPUs, 8.28 of each of 2 workers"),
        "{r}"
    );
}

#[test]
fn drop_rows_list_the_targets_losses_first_as_the_markdown_does() {
    // The Summary orders rows by count: here an expected row before the target's loss. Both
    // reports order by class (views::report), the text leaving other processes' rows out.
    let mut s = fixed_summary();
    s.drops = vec![
        drop_row(
            DropClass::Unrelated,
            "NETFILTER_DROP",
            "nf_hook_slow+0x9c",
            None,
            2000,
        ),
        drop_row(
            DropClass::Expected,
            "NO_SOCKET",
            "tcp_v4_rcv+0x1e4",
            Some(4242),
            900,
        ),
        drop_row(
            DropClass::ReplyLoss,
            "SOCKET_RCVBUFF",
            "udp_queue_rcv_one_skb+0x437",
            Some(4242),
            70,
        ),
        drop_row(
            DropClass::TargetLoss,
            "QDISC_DROP",
            "__dev_queue_xmit+0x7a",
            Some(4242),
            48,
        ),
    ];
    let r = summary(&s);
    let rows: Vec<&str> = r
        .lines()
        .skip_while(|l| *l != "drops:")
        .skip(1)
        .take(3)
        .map(|l| l.split_whitespace().next().unwrap_or(""))
        .collect();
    assert_eq!(rows, ["target_loss", "reply_loss", "expected"], "{r}");
    assert!(
        r.contains("(and 2000 drops of other processes' packets on this machine)"),
        "{r}"
    );
}

#[test]
fn the_relay_funnel_is_in_the_text_report() {
    let mut s = fixed_summary();
    s.relay = Some(crate::analysis::relay::RelayView {
        fanout: 3,
        read: 10_000,
        read_pps: 5_000.0,
        sent: 18_000,
        sent_pps: 9_000.0,
        amplification: 1.8,
        kernel_drops: 2_000,
        kernel_drop_reasons: vec![("PACKET_SOCK_ERROR".into(), 2_000)],
        kernel_drops_seen: true,
        arrived: 12_000,
        unsent: 12_000,
        own_drops: 4_000,
        refused: 50_000,
        send_ns: 600,
        blocked_send_ns: 0,
        other_ns: 400,
        sleep_ns: 0,
        egress_time_share: 0.6,
    });
    let r = summary(&s);
    assert!(r.contains("relay funnel (over the run):"), "{r}");
    assert!(
        r.contains(
            "ingress read 10000 (5000.0 /s) | egress sent 18000 (9000.0 /s) | amplification 1.80 of 1 -> 3"
        ),
        "{r}"
    );
    assert!(
        r.contains("of 12000 that reached it: 2000 dropped by the kernel before the read (PACKET_SOCK_ERROR 2000) | 4000 read and never forwarded (12000 sends missing) | egress refused 50000 sends"),
        "{r}"
    );
    assert!(
        r.contains("sending 60.0% | blocked in sends 0.0% | reading and its own work 40.0%"),
        "{r}"
    );
}

#[test]
fn every_strong_or_share_bearing_verdict_is_shown_and_the_rest_counted() {
    // A list of the first five hid a strong ring_full (921 replies lost) sixth.
    let mut s = fixed_summary();
    s.verdicts = crate::views::fixtures::verdicts_beyond_five();
    let r = summary(&s);
    for v in &s.verdicts[..6] {
        assert!(r.contains(&v.sentence), "{} missing:\n{r}", v.cause);
        assert!(r.contains(&v.next_step), "{} missing:\n{r}", v.cause);
    }
    assert!(
        r.contains("  6. [loss 8.9%] The listener missed 921 replies."),
        "{r}"
    );
    for v in &s.verdicts[6..] {
        assert!(!r.contains(&v.sentence), "{} shown:\n{r}", v.cause);
    }
    assert!(
        r.contains("  2 more at 0.0%, with weak evidence: claim_mismatch, steal (each in full in the JSON)"),
        "{r}"
    );
}

/// A tick outside a whole stretch of sending says what the family did, never a rate verdict's
/// "achieved ... (61.6%)": the partial last sending tick keeps its count but says it is not
/// judged, a waiting tick says when the last send was and what it read.
#[test]
fn tick_lines_follow_the_run_phase() {
    use crate::analysis::RunPhase;
    let partial = Snapshot {
        phase: RunPhase::Sending,
        partial: true,
        last_send_s: Some(2.6),
        ..snapshot(Some(5000.0), 3079.5, Vec::new())
    };
    assert_eq!(
        tick_line(&partial),
        "[    3.0 s] achieved     3079.5 pps of 5000 requested ( 61.6%) (partial tick: last send at 2.60 s, \
         0.40 s before the tick's end; its rate is not judged)"
    );
    let waiting = Snapshot {
        phase: RunPhase::Waiting,
        last_send_s: Some(2.6),
        t_s: 6.0,
        receive: Some(crate::analysis::ReceiveView {
            stages: vec![crate::analysis::Stage {
                name: crate::analysis::StageName::RecvPackets,
                count: 3,
                pps: 3.0,
                total: 40,
                ratio: None,
            }],
            ..Default::default()
        }),
        ..snapshot(Some(5000.0), 0.0, Vec::new())
    };
    assert_eq!(
        tick_line(&waiting),
        "[    6.0 s] not sending (waiting for late replies, or paused): last send at 2.60 s, 3.40 s before \
         the tick's end; 3 packets read in the tick"
    );
    // A profile that says what its scanner's wait is names it.
    let masscan = Snapshot {
        scanner: Some(crate::analysis::ScannerView {
            profile: "masscan".into(),
            wait: Some("masscan's --wait for late replies (10 s by default)".into()),
            ..Default::default()
        }),
        ..waiting.clone()
    };
    assert_eq!(
        tick_line(&masscan),
        "[    6.0 s] not sending (masscan's --wait for late replies (10 s by default), or paused): last send at \
         2.60 s, 3.40 s before the tick's end; 3 packets read in the tick"
    );
    let starting = Snapshot {
        phase: RunPhase::Starting,
        ..snapshot(Some(5000.0), 0.0, Vec::new())
    };
    assert_eq!(
        tick_line(&starting),
        "[    3.0 s] starting: no send call since attach yet"
    );
    let ended = Snapshot {
        phase: RunPhase::Ended,
        ..snapshot(Some(5000.0), 0.0, Vec::new())
    };
    assert_eq!(tick_line(&ended), "[    3.0 s] ended: the family has exited");

    let run = Summary {
        duration_s: 9.0,
        first_send_s: Some(0.1),
        last_send_s: Some(2.6),
        phase: RunPhase::Ended,
        ..Summary::for_tests()
    };
    assert_eq!(
        phase_line(&run).as_deref(),
        Some(
            "sent from 0.10 s to 2.60 s after attach; 6.40 s later the family exited (rates and verdicts \
             are over the send window)"
        )
    );
}

/// The reply funnel of a scan that got 7 answers to 1,010 probes: every figure, its kinds, and
/// what is not counted.
#[test]
fn the_summary_shows_the_reply_funnel() {
    let arrived = crate::collect::replies::ReplyCounts {
        tcp_rst: 5,
        icmp_unreachable: 2,
        udp_loopback: 4,
        ..Default::default()
    };
    let s = Summary {
        replies: Some(crate::analysis::replies::ReplyFunnel {
            probes: 1010,
            arrived,
            arrived_total: 7,
            reply_ratio: Some(7.0 / 1010.0),
            unanswered: 1003,
            probes_dropped_here: 3,
            beyond_host: 1000,
            delivered: 6,
            dropped_here: 1,
        }),
        ..Summary::for_tests()
    };
    let t = crate::views::text::summary(&s);
    assert!(t.contains("reply funnel (over the run):"), "{t}");
    assert!(
        t.contains("  replies arrived                 7  (0.007 per probe"),
        "{t}"
    );
    assert!(t.contains("    by kind: 5 RST, 2 ICMP unreachable"), "{t}");
    assert!(t.contains("not counted: 4 UDP on loopback"), "{t}");
    assert!(
        t.contains(
            "  unanswered                   1003  (3 of them probes dropped on this host, 1000 beyond it)"
        ),
        "{t}"
    );
    assert!(!crate::views::text::summary(&Summary::for_tests()).contains("reply funnel"));
}

/// The report leads with the answer (issue 33 item 11): requested against achieved, the
/// verdicts and where packets were lost come before the process family, the funnels and the
/// time budget (the verdicts came after the family and the scanner's tables, the drops after
/// the funnel, the budget and the gaps).
#[test]
fn the_answer_leads_the_report_the_detail_follows() {
    let mut s = fixed_summary();
    s.verdicts = crate::views::fixtures::verdicts_beyond_five();
    let r = summary(&s);
    let order = [
        "scanprof: run of",
        "requested 2000 pps, achieved 1500.0 pps",
        "\ndiagnosis:",
        "\ndrops:",
        "\nprocess family:",
        "\nfunnel (per second over the send window):",
        "\nsender threads' time",
        "\nscanprof's own cost",
    ];
    let pos: Vec<usize> = order
        .iter()
        .map(|h| r.find(h).unwrap_or_else(|| panic!("{h:?} missing:\n{r}")))
        .collect();
    assert!(pos.windows(2).all(|w| w[0] < w[1]), "out of order {pos:?}:\n{r}");
}

#[test]
fn sampled_device_stages_are_marked_as_estimates_and_the_others_are_not() {
    let mut s = fixed_summary();
    let exact = summary(&s);
    assert!(!exact.contains("≈") && !exact.contains("sampled"), "{exact}");
    s.device_sampling = Some(crate::collect::device_window::DeviceSampling::tenth_of_each_second(3));
    let r = summary(&s);
    for stage in ["dev_queue", "qdisc_enqueue", "qdisc_dequeue", "dev_xmit"] {
        let line = line_of(&r, stage);
        assert!(line.contains("≈ "), "{line}");
        assert!(line.ends_with("(sampled 10% of the time, scaled)"), "{line}");
    }
    for stage in ["send_calls", "syscall_packets", "target_drops"] {
        let line = line_of(&r, stage);
        assert!(!line.contains('≈') && !line.contains("sampled"), "{line}");
    }
}
