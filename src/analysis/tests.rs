//! Unit tests of the pure analysis: fixed `CounterSample`s with explicit timestamps go through
//! `Analyzer::tick` and `Analyzer::summary`, and every expected number below is worked out by
//! hand in the comments next to it.

use super::*;
use crate::collect::family::ProcessInfo;
use crate::collect::hist::Histogram;
use crate::collect::{
    CounterSample, DeviceCounters, DropClass, DropCount, QueueDepth, ThreadCounters, TimeBudget,
};

/// CLOCK_MONOTONIC at attach: not 0, so code that confuses "since attach" with "since boot" shows.
const START: u64 = 10_000_000_000;
const SEC: u64 = 1_000_000_000;
const MS: u64 = 1_000_000;

fn assert_close(actual: f64, expected: f64) {
    let tolerance = 1e-9 * expected.abs().max(1.0);
    assert!((actual - expected).abs() <= tolerance, "{actual} != {expected}");
}

/// Builds one cumulative `CounterSample` taken at an explicit time.
struct SampleBuilder(CounterSample);

fn sample(t_ns: u64) -> SampleBuilder {
    SampleBuilder(CounterSample {
        t_ns,
        ..Default::default()
    })
}

impl SampleBuilder {
    fn thread(mut self, th: ThreadCounters) -> Self {
        self.0.threads.push(th);
        self
    }

    fn device(mut self, d: DeviceCounters) -> Self {
        self.0.devices.push(d);
        self
    }

    fn drops(mut self, d: DropCount) -> Self {
        self.0.drops.push(d);
        self
    }

    fn queue(mut self, device: &str, netns: u32, qlen_max: u64, backlog_max: u64) -> Self {
        self.0.queues.push(QueueDepth {
            device: device.to_string(),
            netns,
            qlen_max,
            backlog_max,
        });
        self
    }

    fn process(mut self, pid: u32, ppid: u32, comm: &str) -> Self {
        self.0.processes.push(ProcessInfo {
            pid,
            ppid,
            comm: comm.to_string(),
            exe: format!("/usr/bin/{comm}"),
            root: ppid == 1,
            alive: true,
            exit_code: None,
            role: None,
            start_s: None,
            exit_s: None,
            open_files_limit: None,
        });
        self
    }

    fn build(self) -> CounterSample {
        self.0
    }
}

/// A thread that sent `packets` packets, one per call, the first at `first_ns`, the latest at
/// `last_ns`.
fn sender(pid: u32, tid: u32, packets: u64, first_ns: u64, last_ns: u64) -> ThreadCounters {
    ThreadCounters {
        tid,
        pid,
        calls: packets,
        packets,
        bytes: packets * 60,
        first_send_ns: first_ns,
        last_send_ns: last_ns,
        ..Default::default()
    }
}

/// Stage counters of the device `name` (ifindex, netns) for one family pid, or everyone's (None).
fn device(name: &str, ifindex: u32, netns: u32, pid: Option<u32>) -> DeviceCounters {
    DeviceCounters {
        device: name.to_string(),
        ifindex,
        netns,
        pid,
        ..Default::default()
    }
}

fn drop_count(class: DropClass, reason: &str, location: &str, pid: Option<u32>, count: u64) -> DropCount {
    DropCount {
        reason: reason.to_string(),
        location: location.to_string(),
        device: Some("eth0".to_string()),
        ifindex: 2,
        netns: 1,
        class,
        pid,
        count,
    }
}

fn summary_of(a: &Analyzer, last: &CounterSample) -> Summary {
    a.summary(last, EndReason::Duration, Vec::new(), Vec::new())
}

fn stage<'a>(snap: &'a Snapshot, name: &str) -> &'a Stage {
    snap.stages
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no stage {name}"))
}

/// Cumulative counters for the funnel test: (calls, packets, dev queued, qdisc enqueued,
/// qdisc dequeued, driver accepted, target drops).
fn funnel_sample(t_ns: u64, c: [u64; 7]) -> CounterSample {
    let [calls, packets, queued, enqueued, dequeued, xmit_ok, target_drops] = c;
    sample(t_ns)
        .thread(ThreadCounters {
            calls,
            ..sender(100, 101, packets, START + 1, t_ns - 1)
        })
        .device(DeviceCounters {
            queued,
            enqueued,
            dequeued,
            xmit_ok,
            ..device("eth0", 2, 1, Some(100))
        })
        .drops(drop_count(
            DropClass::TargetLoss,
            "QDISC_DROP",
            "__dev_queue_xmit+0x7a",
            Some(100),
            target_drops,
        ))
        .build()
}

#[test]
fn tick_rates_every_stage_in_order_against_requested() {
    let mut a = Analyzer::new(Some(2000.0), START);
    let s1 = funnel_sample(START + SEC, [250, 500, 500, 500, 490, 480, 5]);
    let s2 = funnel_sample(START + 2 * SEC, [750, 1500, 1500, 1400, 1300, 1200, 15]);

    let first = a.tick(&s1, &[]);
    // the first tick runs from attach: everything counted so far, over 1 s
    assert_eq!(first.tick, 1);
    assert_close(first.interval_s, 1.0);
    assert_close(first.achieved_pps, 500.0);

    let snap = a.tick(&s2, &[]);
    assert_eq!(snap.tick, 2);
    assert_close(snap.t_s, 2.0);
    assert_close(snap.interval_s, 1.0);
    // 1500 - 500 packets in 1 s, against 2000 requested
    assert_close(snap.achieved_pps, 1000.0);
    assert_close(snap.ratio.unwrap(), 0.5);

    let names: Vec<StageName> = snap.stages.iter().map(|s| s.name).collect();
    assert_eq!(names, STAGES);
    let counts: Vec<u64> = snap.stages.iter().map(|s| s.count).collect();
    assert_eq!(counts, [500, 1000, 1000, 900, 810, 720, 10]);
    let totals: Vec<u64> = snap.stages.iter().map(|s| s.total).collect();
    assert_eq!(totals, [750, 1500, 1500, 1400, 1300, 1200, 15]);
    for (st, count) in snap
        .stages
        .iter()
        .zip([500.0, 1000.0, 1000.0, 900.0, 810.0, 720.0, 10.0])
    {
        assert_close(st.pps, count);
        assert_close(st.ratio.unwrap(), count / 2000.0);
    }
}

#[test]
fn tick_divides_by_the_interval_between_samples() {
    // samples 250 ms apart: 300 packets is 1200 pps
    let mut a = Analyzer::new(Some(1000.0), START);
    a.tick(
        &sample(START + SEC)
            .thread(sender(100, 101, 700, START + 1, START + SEC))
            .build(),
        &[],
    );
    let snap = a.tick(
        &sample(START + SEC + 250 * MS)
            .thread(sender(100, 101, 1000, START + 1, START + SEC + 249 * MS))
            .build(),
        &[],
    );
    assert_close(snap.interval_s, 0.25);
    assert_close(snap.achieved_pps, 1200.0);
    assert_close(snap.ratio.unwrap(), 1.2);
    assert_close(stage(&snap, "syscall_packets").pps, 1200.0);
    assert_eq!(stage(&snap, "syscall_packets").count, 300);
}

#[test]
fn no_requested_rate_means_no_ratio() {
    let mut a = Analyzer::new(None, START);
    a.tick(
        &sample(START + SEC)
            .thread(sender(100, 101, 500, START + 1, START + SEC - 1))
            .build(),
        &[],
    );
    let last = sample(START + 2 * SEC)
        .thread(sender(100, 101, 1500, START + 1, START + 2 * SEC - 1))
        .build();
    let snap = a.tick(&last, &[]);
    assert_close(snap.achieved_pps, 1000.0);
    assert_eq!(snap.ratio, None);
    assert!(snap.stages.iter().all(|s| s.ratio.is_none()));
    assert_eq!(snap.gap.slot_ns, None);

    let sum = summary_of(&a, &last);
    assert!(sum.achieved_pps > 0.0);
    assert_eq!(sum.ratio, None);
    assert_eq!(sum.gap.slot_ns, None);

    // a requested rate of 0 is no rate to compare against either
    let mut zero = Analyzer::new(Some(0.0), START);
    assert_eq!(zero.tick(&last, &[]).ratio, None);
}

#[test]
fn summary_rate_uses_the_stretched_send_window() {
    // 2000 packets at 1000 pps in 1000 sendmmsg calls of two, one call every 2 ms: the first at
    // +0.5 s, the last 999 intervals later. window = 1.998 s * 1000 / 999 = 2.000 s, so the rate
    // is exactly 1000 (not 2000 / 1.998, and not 2000 over the 3 s run).
    let a = Analyzer::new(Some(1250.0), START);
    let first = START + 500 * MS;
    let last = first + 1998 * MS;
    let s = sample(START + 3 * SEC)
        .thread(ThreadCounters {
            calls: 1000, // sendmmsg, two packets a call
            ..sender(100, 101, 2000, first, last)
        })
        .device(DeviceCounters {
            queued: 2000,
            enqueued: 1900,
            dequeued: 1800,
            xmit_ok: 1700,
            ..device("eth0", 2, 1, Some(100))
        })
        .drops(drop_count(
            DropClass::TargetLoss,
            "QDISC_DROP",
            "__dev_queue_xmit+0x7a",
            Some(100),
            100,
        ))
        .build();
    let sum = summary_of(&a, &s);
    assert_close(sum.duration_s, 3.0);
    assert_close(sum.send_window_s, 2.0);
    assert_eq!(
        sum.achieved_pps, 1000.0,
        "N packets over a (N-1)/R span give exactly R"
    );
    assert_close(sum.ratio.unwrap(), 0.8);
    assert_eq!(sum.packets, 2000);
    assert_eq!(sum.send_calls, 1000);
    assert_eq!(sum.bytes, 120_000);

    let expected = [
        ("send_calls", 1000, 500.0),
        ("syscall_packets", 2000, 1000.0),
        ("dev_queue", 2000, 1000.0),
        ("qdisc_enqueue", 1900, 950.0),
        ("qdisc_dequeue", 1800, 900.0),
        ("dev_xmit", 1700, 850.0),
        ("target_drops", 100, 50.0),
    ];
    assert_eq!(sum.stages.len(), STAGES.len());
    assert_eq!(sum.stage_counts.len(), STAGES.len());
    for (name, count, pps) in expected {
        assert_eq!(sum.stage_counts[name], count, "{name}");
        assert_close(sum.stages[name], pps);
    }
    // The drop table's rate is over the same window as the funnel's target_drops: 100 drops in
    // the 2 s send window are 50/s in both (the drop row read 33.3/s, over the 3 s run).
    let row = &sum.drops[0];
    assert_eq!(row.count, 100);
    assert_close(row.rate, sum.stages["target_drops"]);
}

#[test]
fn summary_with_fewer_than_two_packets_has_no_rate() {
    let a = Analyzer::new(Some(1000.0), START);
    let one = sample(START + 2 * SEC)
        .thread(sender(100, 101, 1, START + SEC, START + SEC))
        .device(DeviceCounters {
            queued: 1,
            xmit_ok: 1,
            ..device("eth0", 2, 1, Some(100))
        })
        .build();
    let sum = summary_of(&a, &one);
    assert_eq!(sum.packets, 1);
    assert_eq!(sum.stage_counts["dev_xmit"], 1);
    assert_eq!(sum.achieved_pps, 0.0);
    assert_eq!(sum.send_window_s, 0.0);
    assert_eq!(sum.ratio, Some(0.0));
    assert!(sum.stages.values().all(|pps| *pps == 0.0), "{:?}", sum.stages);
    assert_close(sum.duration_s, 2.0);

    let none = sample(START + 2 * SEC).thread(sender(100, 101, 0, 0, 0)).build();
    let sum = summary_of(&a, &none);
    assert_eq!(sum.achieved_pps, 0.0);
    assert_eq!(sum.send_window_s, 0.0);
    assert_eq!(sum.rate_stats, None);
}

#[test]
fn rate_stats_use_only_ticks_inside_the_send_window() {
    // 1000 pps from +0.5 s (packet i at +0.5 s + i ms) to +4.499 s: 4000 packets. Ticks end at
    // +1..+5 s and hold 500, 1000, 1000, 1000, 500 packets; the first and last ticks are partial.
    let mut a = Analyzer::new(Some(1000.0), START);
    let first = START + 500 * MS;
    let cumulative = [
        (1, 500, START + 999 * MS),
        (2, 1500, START + 1999 * MS),
        (3, 2500, START + 2999 * MS),
        (4, 3500, START + 3999 * MS),
        (5, 4000, START + 4499 * MS),
    ];
    let samples: Vec<CounterSample> = cumulative
        .iter()
        .map(|&(k, packets, last_ns)| {
            sample(START + k * SEC)
                .thread(sender(100, 101, packets, first, last_ns))
                .build()
        })
        .collect();
    let snaps: Vec<Snapshot> = samples.iter().map(|s| a.tick(s, &[])).collect();
    let per_tick: Vec<f64> = snaps.iter().map(|s| s.achieved_pps).collect();
    assert_eq!(per_tick, [500.0, 1000.0, 1000.0, 1000.0, 500.0]);

    let sum = summary_of(&a, &samples[4]);
    let stats = sum.rate_stats.expect("three complete ticks");
    assert_eq!(stats.n, 3);
    assert_eq!(stats.median, 1000.0);
    assert_eq!(stats.min, 1000.0, "a partial tick was counted");
    assert_eq!(stats.max, 1000.0);
    // the window is 3.999 s * 4000 / 3999 = 4 s
    assert_eq!(sum.achieved_pps, 1000.0);
    // the last tick's snapshot sees the same send window
    assert_eq!(snaps[4].rate_stats.as_ref().map(|s| s.n), Some(3));
}

#[test]
fn live_rate_stats_are_recomputed_twice_a_second_and_the_summarys_always() {
    // 10 ms ticks for 3 s at 1000 pps, 10 packets a tick from the first: the live statistics
    // sort every tick so far, so a tick repeats them unless half a second has passed since
    // they were computed (a 2-hour run at 10 ms ticks sorted 720,000 rates a hundred times a
    // second).
    let mut a = Analyzer::new(Some(1000.0), START);
    let tick = 10 * MS;
    let samples: Vec<CounterSample> = (1..=300u64)
        .map(|k| {
            sample(START + k * tick)
                .thread(sender(100, 101, 10 * k, START, START + k * tick - MS))
                .build()
        })
        .collect();
    let ns: Vec<usize> = samples
        .iter()
        .map(|s| a.tick(s, &[]).rate_stats.map_or(0, |r| r.n))
        .collect();
    let changes: Vec<usize> = (1..ns.len()).filter(|&i| ns[i] != ns[i - 1]).collect();
    assert_eq!(changes, [50, 100, 150, 200, 250], "live n by tick: {ns:?}");
    // Each recomputation sees every complete tick so far.
    assert_eq!(ns[250], 250);
    let sum = summary_of(&a, &samples[299]);
    assert_eq!(sum.rate_stats.map(|r| r.n), Some(299), "the summary's are fresh");
}

#[test]
fn only_target_loss_counts_as_target_drops_and_rates_come_from_deltas() {
    const QDISC: &str = "__dev_queue_xmit+0x7a";
    const NF: &str = "nf_hook_slow+0x9c";
    const RCV: &str = "tcp_v4_rcv+0x1e4";
    let mut a = Analyzer::new(Some(1000.0), START);
    let s1 = sample(START + SEC)
        .thread(sender(100, 101, 1000, START + 1, START + SEC - 1))
        .drops(drop_count(
            DropClass::TargetLoss,
            "QDISC_DROP",
            QDISC,
            Some(100),
            10,
        ))
        .drops(drop_count(
            DropClass::TargetLoss,
            "NETFILTER_DROP",
            NF,
            Some(100),
            2,
        ))
        .drops(drop_count(DropClass::Expected, "NO_SOCKET", RCV, Some(100), 50))
        .drops(drop_count(DropClass::Unrelated, "NO_SOCKET", RCV, None, 1000))
        .build();
    // 0.5 s later; rows in another order, and a new reply-loss row whose key differs from the
    // expected row's by the class alone
    let s2 = sample(START + SEC + 500 * MS)
        .thread(sender(100, 101, 1500, START + 1, START + SEC + 499 * MS))
        .drops(drop_count(DropClass::Unrelated, "NO_SOCKET", RCV, None, 3000))
        .drops(drop_count(DropClass::ReplyLoss, "NO_SOCKET", RCV, Some(100), 7))
        .drops(drop_count(DropClass::Expected, "NO_SOCKET", RCV, Some(100), 150))
        .drops(drop_count(
            DropClass::TargetLoss,
            "NETFILTER_DROP",
            NF,
            Some(100),
            4,
        ))
        .drops(drop_count(
            DropClass::TargetLoss,
            "QDISC_DROP",
            QDISC,
            Some(100),
            30,
        ))
        .build();
    let snap1 = a.tick(&s1, &[]);
    assert_eq!(stage(&snap1, "target_drops").count, 12);
    let snap = a.tick(&s2, &[]);

    // (30 + 4) - (10 + 2) = 22 target drops in 0.5 s
    let td = stage(&snap, "target_drops");
    assert_eq!(td.count, 22);
    assert_eq!(td.total, 34);
    assert_close(td.pps, 44.0);

    let rate = |class: DropClass, reason: &str| {
        snap.drops
            .iter()
            .find(|d| d.class == class && d.reason == reason)
            .map(|d| (d.count, d.rate))
            .unwrap()
    };
    let (count, r) = rate(DropClass::TargetLoss, "QDISC_DROP");
    assert_eq!(count, 20, "a sample's count is the drops of its tick");
    assert_close(r, 40.0); // (30 - 10) / 0.5
    assert_close(rate(DropClass::TargetLoss, "NETFILTER_DROP").1, 4.0);
    assert_close(rate(DropClass::Expected, "NO_SOCKET").1, 200.0); // (150 - 50) / 0.5
    assert_close(rate(DropClass::Unrelated, "NO_SOCKET").1, 4000.0); // (3000 - 1000) / 0.5
    assert_close(rate(DropClass::ReplyLoss, "NO_SOCKET").1, 14.0); // new: 7 / 0.5

    let sum = summary_of(&a, &s2);
    assert_eq!(sum.stage_counts["target_drops"], 34);
    let order: Vec<(DropClass, u64)> = sum.drops.iter().map(|d| (d.class, d.count)).collect();
    assert_eq!(
        order,
        [
            (DropClass::TargetLoss, 30),
            (DropClass::TargetLoss, 4),
            (DropClass::Expected, 150),
            (DropClass::ReplyLoss, 7),
            (DropClass::Unrelated, 3000),
        ]
    );
    // over the 1.5 s run
    assert_close(sum.drops[0].rate, 20.0);
    assert_close(sum.drops[4].rate, 2000.0);
}

/// The counters of the first sample (stamped with the moment of attach, read after a launched
/// command was released) belong to the first tick: the ticks' packets and drops add up to the
/// summary's totals. Fails when the first sample's counters are subtracted.
#[test]
fn the_ticks_add_up_to_the_summary_whatever_the_first_sample_read() {
    let mut a = Analyzer::new(Some(1000.0), START);
    let at = |t_ns: u64, packets: u64, qdisc: u64| {
        sample(t_ns)
            .thread(sender(100, 101, packets, START + 1, t_ns.max(START + 2) - 1))
            .drops(drop_count(
                DropClass::TargetLoss,
                "QDISC_DROP",
                "__dev_queue_xmit+0x7a",
                Some(100),
                qdisc,
            ))
            .build()
    };
    // Read at attach's stamp, but after 40 packets and 3 drops of the released command.
    a.baseline(at(START, 40, 3));
    let t1 = a.tick(&at(START + SEC, 1040, 503), &[]);
    let last = at(START + 2 * SEC, 2040, 1003);
    let t2 = a.tick(&last, &[]);
    let sum = summary_of(&a, &last);
    let drops: u64 = [&t1, &t2]
        .iter()
        .flat_map(|t| t.drops.iter())
        .map(|d| d.count)
        .sum();
    let packets: u64 = [&t1, &t2].iter().map(|t| stage(t, "syscall_packets").count).sum();
    assert_eq!((drops, packets), (1003, 2040), "ticks vs totals");
    assert_eq!(sum.drops[0].count, 1003);
    assert_eq!(sum.packets, 2040);
}

/// A sample holds the drops of its tick only: a row with no new drops is left out (so samples
/// do not grow with the drop sites a run has seen), while the summary keeps every row's total.
#[test]
fn samples_carry_the_drops_of_their_tick_and_the_summary_the_totals() {
    const QDISC: &str = "__dev_queue_xmit+0x7a";
    const RCV: &str = "tcp_v4_rcv+0x1e4";
    let mut a = Analyzer::new(Some(1000.0), START);
    let at = |t_ns: u64, qdisc: u64, unrelated: u64| {
        sample(t_ns)
            .thread(sender(100, 101, t_ns / 1_000_000, START + 1, t_ns - 1))
            .drops(drop_count(
                DropClass::TargetLoss,
                "QDISC_DROP",
                QDISC,
                Some(100),
                qdisc,
            ))
            .drops(drop_count(
                DropClass::Unrelated,
                "NO_SOCKET",
                RCV,
                None,
                unrelated,
            ))
            .build()
    };
    let _ = a.tick(&at(START + SEC, 10, 5), &[]);
    let only_qdisc = a.tick(&at(START + 2 * SEC, 25, 5), &[]);
    let rows: Vec<(&str, u64)> = only_qdisc
        .drops
        .iter()
        .map(|d| (d.reason.as_str(), d.count))
        .collect();
    assert_eq!(rows, [("QDISC_DROP", 15)]);
    let last = at(START + 3 * SEC, 25, 5);
    let quiet = a.tick(&last, &[]);
    assert!(quiet.drops.is_empty(), "{:?}", quiet.drops);
    let sum = summary_of(&a, &last);
    let totals: Vec<(&str, u64)> = sum.drops.iter().map(|d| (d.reason.as_str(), d.count)).collect();
    assert_eq!(totals, [("QDISC_DROP", 25), ("NO_SOCKET", 5)]);
}

#[test]
fn device_views_split_the_target_from_everyone() {
    let mut a = Analyzer::new(Some(1000.0), START);
    let s1 = sample(START + SEC)
        .thread(sender(100, 101, 100, START + 1, START + SEC - 1))
        .device(DeviceCounters {
            queued: 100,
            xmit_ok: 90,
            neigh_started: 1,
            neigh_queued: 3,
            neigh_resolved: 1,
            ..device("eth0", 2, 1, Some(100))
        })
        .device(DeviceCounters {
            xmit_ok: 5000,
            xmit_busy: 2,
            xmit_err: 1,
            queued: 5100,
            neigh_queued: 40,
            ..device("eth0", 2, 1, None)
        })
        .device(DeviceCounters {
            xmit_ok: 100,
            ..device("lo", 1, 1, None)
        })
        .build();
    // 2 s later; a second family process (pid 200) now sends through eth0 too
    let s2 = sample(START + 3 * SEC)
        .thread(sender(100, 101, 1100, START + 1, START + 3 * SEC - 1))
        .thread(sender(200, 201, 400, START + 2 * SEC, START + 3 * SEC - 1))
        .device(DeviceCounters {
            queued: 1100,
            xmit_ok: 1090,
            xmit_busy: 50, // only everyone's row says what the driver refused
            neigh_started: 2,
            neigh_queued: 5,
            neigh_resolved: 2,
            ..device("eth0", 2, 1, Some(100))
        })
        .device(DeviceCounters {
            queued: 400,
            xmit_ok: 300,
            ..device("eth0", 2, 1, Some(200))
        })
        .device(DeviceCounters {
            xmit_ok: 9000,
            xmit_busy: 5,
            xmit_err: 2,
            queued: 9500,
            neigh_queued: 90,
            ..device("eth0", 2, 1, None)
        })
        .device(DeviceCounters {
            xmit_ok: 300,
            ..device("lo", 1, 1, None)
        })
        // same ifindex in another namespace, nobody of the family on it
        .device(DeviceCounters {
            xmit_ok: 70,
            ..device("eth0", 2, 7, None)
        })
        .queue("eth0", 7, 99, 9900)
        .queue("eth0", 1, 12, 1800)
        .build();
    a.tick(&s1, &[]);
    let snap = a.tick(&s2, &[]);

    assert_eq!(snap.devices.len(), 1, "{:?}", snap.devices);
    let d = &snap.devices[0];
    assert_eq!((d.device.as_str(), d.netns), ("eth0", 1));
    assert_close(d.target_queued_pps, 700.0); // (1100 + 400 - 100) / 2
    assert_close(d.target_xmit_pps, 650.0); // (1090 + 300 - 90) / 2
    assert_close(d.all_xmit_pps, 2000.0); // (9000 - 5000) / 2
    assert_eq!(d.xmit_refused, 4); // (5 + 2) - (2 + 1)
    assert_eq!(d.qlen_max, Some(12));
    assert_eq!(d.backlog_max_bytes, Some(1800));
    assert_eq!(
        (d.neigh_started, d.neigh_queued, d.neigh_resolved, d.neigh_failed),
        (1, 2, 1, 0)
    );
    // the funnel counts the family's rows only
    assert_eq!(stage(&snap, "dev_queue").count, 1400);
    assert_eq!(stage(&snap, "dev_xmit").count, 1300);

    let sum = summary_of(&a, &s2);
    assert_eq!(sum.devices.len(), 1);
    assert_close(sum.devices[0].target_xmit_pps, 1390.0 / 3.0);
    assert_eq!(sum.devices[0].xmit_refused, 7);
    // Issue 28 item 10: the queues listed are those the family's packets used; eth0 of
    // namespace 7 (another process's device) is not one.
    let queues: Vec<(&str, u32, u64)> = sum
        .queues
        .iter()
        .map(|q| (q.device.as_str(), q.netns, q.qlen_max))
        .collect();
    assert_eq!(queues, [("eth0", 1, 12)]);
}

#[test]
fn device_without_target_packets_has_no_view() {
    let mut a = Analyzer::new(None, START);
    let s = sample(START + SEC)
        .thread(sender(100, 101, 10, START + 1, START + 2))
        .device(DeviceCounters {
            xmit_ok: 500,
            ..device("eth0", 2, 1, None)
        })
        .build();
    let snap = a.tick(&s, &[]);
    assert!(snap.devices.is_empty(), "{:?}", snap.devices);
    assert_eq!(stage(&snap, "dev_xmit").total, 0);
    assert!(summary_of(&a, &s).devices.is_empty());
}

#[test]
fn tick_budget_is_the_delta_and_shares_are_of_the_interval() {
    let ms = |send, blocked_send, sleep, preempted, other| TimeBudget {
        send_ns: send * MS,
        blocked_send_ns: blocked_send * MS,
        sleep_ns: sleep * MS,
        preempted_ns: preempted * MS,
        other_ns: other * MS,
        wakeup_wait_ns: None,
    };
    let mut a = Analyzer::new(Some(1000.0), START);
    let s1 = sample(START + SEC)
        .thread(ThreadCounters {
            budget: ms(100, 50, 300, 20, 30),
            ..sender(100, 101, 1000, START + 1, START + SEC - 1)
        })
        .build();
    // 2 s later
    let s2 = sample(START + 3 * SEC)
        .thread(ThreadCounters {
            budget: ms(500, 250, 1100, 120, 430),
            ..sender(100, 101, 3000, START + 1, START + 3 * SEC - 1)
        })
        // sent nothing: not a sender, its time is not the senders' time
        .thread(ThreadCounters {
            tid: 102,
            pid: 100,
            budget: ms(0, 0, 3000, 0, 0),
            ..Default::default()
        })
        // a sender that appeared during the tick
        .thread(ThreadCounters {
            budget: ms(10, 0, 0, 0, 20),
            ..sender(100, 103, 5, START + 2 * SEC, START + 2 * SEC + 4 * MS)
        })
        .build();
    a.tick(&s1, &[]);
    let snap = a.tick(&s2, &[]);

    assert_eq!(snap.threads.len(), 2, "{:?}", snap.threads);
    let t = snap.threads.iter().find(|t| t.tid == 101).unwrap();
    assert_eq!(t.budget, ms(400, 200, 800, 100, 400));
    // of the 2 s interval, not of the 1.9 s accounted
    let sh = t.shares;
    assert_close(sh.send, 0.2);
    assert_close(sh.blocked_send, 0.1);
    assert_close(sh.sleep, 0.4);
    assert_close(sh.preempted, 0.05);
    assert_close(sh.other, 0.2);
    let total = sh.send + sh.blocked_send + sh.sleep + sh.preempted + sh.other;
    assert!(total <= 1.0 && (total - 0.95).abs() < 1e-9, "{total}");
    assert_close(t.pps, 1000.0);

    let new = snap.threads.iter().find(|t| t.tid == 103).unwrap();
    assert_eq!(new.budget, ms(10, 0, 0, 0, 20));
    assert_close(new.shares.other, 0.01);

    // the run: both senders' time, summed; thread shares over the 3 s since attach
    let sum = summary_of(&a, &s2);
    assert_eq!(sum.budget, ms(510, 250, 1100, 120, 450));
    let t = sum.threads.iter().find(|t| t.tid == 101).unwrap();
    assert_close(t.shares.sleep, 1100.0 / 3000.0);
    assert_eq!(t.packets, 3000);
}

#[test]
fn gap_view_comes_from_deltas() {
    let gaps = |list: &[(u64, u64)]| {
        let mut h = Histogram::default();
        for &(value, times) in list {
            for _ in 0..times {
                h.record(value);
            }
        }
        h
    };
    let mut a = Analyzer::new(Some(2000.0), START);
    // thread 101: 10 gaps of 1000 ns in tick 1, 10 more of 2000 ns in tick 2;
    // thread 102: 5 gaps of 4000 ns in tick 1, 5 more of 8000 ns in tick 2.
    let t101 = |gap: Histogram, gap_sum_ns, gap_count, packets| ThreadCounters {
        gap,
        gap_sum_ns,
        gap_count,
        ..sender(100, 101, packets, START + 1, START + 100)
    };
    let t102 = |gap: Histogram, gap_sum_ns, gap_count, packets| ThreadCounters {
        gap,
        gap_sum_ns,
        gap_count,
        ..sender(100, 102, packets, START + 1, START + 100)
    };
    let s1 = sample(START + SEC)
        .thread(t101(gaps(&[(1000, 10)]), 10_000, 10, 11))
        .thread(t102(gaps(&[(4000, 5)]), 20_000, 5, 6))
        .build();
    // listed in another order: threads are matched by id, not by position
    let s2 = sample(START + 2 * SEC)
        .thread(t102(gaps(&[(4000, 5), (8000, 5)]), 60_000, 10, 11))
        .thread(t101(gaps(&[(1000, 10), (2000, 10)]), 30_000, 20, 21))
        .build();
    a.tick(&s1, &[]);
    let g = a.tick(&s2, &[]).gap;
    // tick 2: 10 x 2000 + 5 x 8000 = 60000 ns over 15 gaps
    assert_eq!(g.count, 15);
    assert_eq!(g.mean_ns, Some(4000.0));
    // 2000 ns lies in the bucket [1920, 2048), 8000 ns in [7680, 8192)
    assert_eq!(g.histogram, [(1920, 2048, 10), (7680, 8192, 5)]);
    // rank 7.5 of 15 falls in the first bucket: 1920 + 128 * 7.5 / 10
    assert_close(g.p50_ns.unwrap(), 2016.0);
    // rank 14.85: 7680 + 512 * 4.85 / 5
    assert_close(g.p99_ns.unwrap(), 7680.0 + 512.0 * 4.85 / 5.0);
    assert_eq!(g.slot_ns, Some(500_000.0));

    // the run: 10000 + 20000 + 20000 + 40000 = 90000 ns over 30 gaps
    let g = summary_of(&a, &s2).gap;
    assert_eq!(g.count, 30);
    assert_eq!(g.mean_ns, Some(3000.0));
    // 1000 ns lies in [960, 1024), 4000 ns in [3840, 4096)
    assert_eq!(
        g.histogram,
        [
            (960, 1024, 10),
            (1920, 2048, 10),
            (3840, 4096, 5),
            (7680, 8192, 5)
        ]
    );
    // rank 15 of 30: 5 into the second bucket's 10, 1920 + 128 * 5 / 10
    assert_close(g.p50_ns.unwrap(), 1984.0);
    assert_eq!(g.slot_ns, Some(500_000.0));
}

#[test]
fn exited_threads_still_count_and_new_threads_count_from_zero() {
    let mut a = Analyzer::new(Some(1000.0), START);
    let s1 = sample(START + SEC)
        .thread(sender(100, 101, 100, START + 1, START + SEC - 1))
        .thread(sender(100, 102, 200, START + 1, START + SEC - 1))
        .build();
    let s2 = sample(START + 2 * SEC)
        .thread(sender(100, 101, 600, START + 1, START + 2 * SEC - 1))
        // exited during the tick: final counters, kept by the collector
        .thread(ThreadCounters {
            exited: true,
            ..sender(100, 102, 500, START + 1, START + SEC + 300 * MS)
        })
        // started during the tick, never seen before
        .thread(sender(100, 103, 150, START + SEC + 500 * MS, START + 2 * SEC - 1))
        .build();
    a.tick(&s1, &[]);
    let snap = a.tick(&s2, &[]);
    // (600 + 500 + 150) - (100 + 200)
    assert_close(snap.achieved_pps, 950.0);
    assert_eq!(stage(&snap, "syscall_packets").count, 950);
    assert_eq!(stage(&snap, "send_calls").count, 950);
    let packets = |tid: u32| snap.threads.iter().find(|t| t.tid == tid).map(|t| t.packets);
    assert_eq!(packets(101), Some(500));
    assert_eq!(packets(102), Some(300));
    assert_eq!(packets(103), Some(150));

    let sum = summary_of(&a, &s2);
    assert_eq!(sum.packets, 1250);
    assert_eq!(sum.threads.len(), 3);
}

#[test]
fn packets_of_family_processes_add_up() {
    let mut a = Analyzer::new(Some(1000.0), START);
    // two processes at 500 pps each, interleaved: A at +0.5 s + 2i ms, B 1 ms after A.
    // Together: 2000 packets from +0.5 s to +2.499 s, so the window is 2 s and the rate 1000.
    let s1 = sample(START + SEC)
        .process(100, 1, "scanner")
        .process(200, 100, "worker")
        .thread(sender(100, 101, 250, START + 500 * MS, START + 998 * MS))
        .thread(sender(200, 201, 250, START + 501 * MS, START + 999 * MS))
        .build();
    let s2 = sample(START + 3 * SEC)
        .process(100, 1, "scanner")
        .process(200, 100, "worker")
        .thread(sender(100, 101, 1000, START + 500 * MS, START + 2498 * MS))
        .thread(sender(200, 201, 1000, START + 501 * MS, START + 2499 * MS))
        .build();
    a.tick(&s1, &[]);
    let snap = a.tick(&s2, &[]);
    // (1000 + 1000) - (250 + 250) in 2 s
    assert_close(snap.achieved_pps, 750.0);
    let comm = |tid: u32| snap.threads.iter().find(|t| t.tid == tid).map(|t| t.comm.clone());
    assert_eq!(comm(101).as_deref(), Some("scanner"));
    assert_eq!(comm(201).as_deref(), Some("worker"));

    let sum = summary_of(&a, &s2);
    assert_eq!(sum.packets, 2000);
    assert_close(sum.send_window_s, 2.0);
    assert_eq!(sum.achieved_pps, 1000.0);
    assert_eq!(sum.processes.len(), 2);
}

#[test]
fn tick_lists_only_threads_that_sent_in_the_interval() {
    // A thread that exited and made no call in the tick is not listed in it.
    let mut a = Analyzer::new(Some(1000.0), START);
    let s1 = sample(START + SEC)
        .thread(sender(100, 101, 500, START + 1, START + SEC - 1))
        .thread(sender(100, 102, 500, START + 1, START + SEC - 1))
        .build();
    let s2 = sample(START + 2 * SEC)
        .thread(sender(100, 101, 1500, START + 1, START + 2 * SEC - 1))
        // exited during tick 1's aftermath: no call and no packet in tick 2
        .thread(ThreadCounters {
            exited: true,
            ..sender(100, 102, 500, START + 1, START + SEC - 1)
        })
        .build();
    a.tick(&s1, &[]);
    let snap = a.tick(&s2, &[]);
    let tids: Vec<u32> = snap.threads.iter().map(|t| t.tid).collect();
    assert_eq!(tids, [101]);
}

/// A block in progress (issue 17: a sender blocked 2.6 s at a time was named only once a block
/// ended): the tick in the middle of it shows the thread blocked now, since when and where, and
/// its site's time so far; the tick it ends in adds only the rest, so the site's time adds up to
/// the block's length across the ticks, and the summary has no block "now".
#[test]
fn a_block_in_progress_is_shown_at_its_site_from_its_first_tick() {
    use crate::collect::{BlockSite, BlockedNow};
    let site = |blocked_ns: u64, episodes: u64, in_progress: u64| BlockSite {
        pid: 100,
        wait_site: "sock_alloc_send_pskb".into(),
        stack: vec!["sock_alloc_send_pskb+0x2a".into(), "udp_sendmsg+0x5".into()],
        blocked_ns,
        episodes,
        in_progress,
    };
    let mut a = Analyzer::new(Some(1000.0), START);
    // Tick 1: sending. Tick 2: blocked since +1.4 s (0.6 s so far). Tick 3: the block ended at
    // +3.0 s (1.6 s in all, the probes' site total).
    let mut t1 = sender(100, 101, 1000, START, START + 999 * MS);
    t1.budget.send_ns = SEC;
    let mut t2 = sender(100, 101, 1400, START, START + 1400 * MS);
    t2.budget = TimeBudget {
        send_ns: 400 * MS,
        blocked_send_ns: 600 * MS,
        ..t1.budget
    };
    t2.budget.send_ns += SEC;
    t2.blocked_now = Some(BlockedNow {
        since_ns: START + 1400 * MS,
        wait_site: "sock_alloc_send_pskb".into(),
    });
    let mut t3 = sender(100, 101, 1400, START, START + 1400 * MS);
    t3.budget = TimeBudget {
        blocked_send_ns: 1600 * MS,
        ..t2.budget
    };
    let s1 = sample(START + SEC).thread(t1).build();
    let mut s2 = sample(START + 2 * SEC).thread(t2).build();
    s2.block_sites = vec![site(600 * MS, 0, 1)];
    let mut s3 = sample(START + 3 * SEC).thread(t3).build();
    s3.block_sites = vec![site(1600 * MS, 1, 0)];
    a.tick(&s1, &[]);
    let mid = a.tick(&s2, &[]);
    let now = mid.threads[0].blocked_now.as_ref().expect("blocked now");
    assert_close(now.since_s, 1.4);
    assert_close(now.blocked_s, 0.6);
    assert_eq!(now.wait_site, "sock_alloc_send_pskb");
    assert_eq!(mid.block_sites.len(), 1, "{:?}", mid.block_sites);
    assert_eq!(mid.block_sites[0].wait_site, "sock_alloc_send_pskb");
    assert_close(mid.block_sites[0].blocked_s, 0.6);
    let end = a.tick(&s3, &[]);
    assert_eq!(end.threads[0].blocked_now, None);
    assert_close(end.block_sites[0].blocked_s, 1.0);
    assert_eq!(end.block_sites[0].episodes, 1);
    let sum = summary_of(&a, &s3);
    assert!(sum.threads.iter().all(|t| t.blocked_now.is_none()));
    assert_close(sum.block_sites[0].blocked_s, 1.6);
}

#[test]
fn a_connect_scanner_s_attempts_are_its_send_calls_and_its_syns_its_packets() {
    // nmap -sT at 500 attempts/s for 2 s: 1000 connects on TCP sockets, 990 sent their SYN (20
    // of them came back ECONNREFUSED inside the call), 10 failed before it (EADDRNOTAVAIL).
    let mut a = Analyzer::new(Some(500.0), START);
    let th = ThreadCounters {
        calls: 1000,
        failed_calls: 10,
        errors: [("EADDRNOTAVAIL".to_string(), 10)].into(),
        connect: crate::collect::ConnectCounters {
            calls: 1000,
            syns: 990,
            answered: 20,
        },
        ..sender(100, 101, 990, START + 1, START + 2 * SEC)
    };
    let last = sample(START + 2 * SEC).thread(th).build();
    assert!(a.tick(&last, &[]).connect_scanner, "the tick names the rate too");
    let s = summary_of(&a, &last);
    assert_eq!(s.rate_unit(), "connection attempts/s");
    let c = s.connect.expect("a connect view");
    assert_eq!((c.attempts, c.syns, c.answered, c.failed), (1000, 990, 20, 10));
    assert!(c.connect_scanner);
    assert_eq!(s.stage_counts["send_calls"], 1000);
    assert_eq!(s.stage_counts["syscall_packets"], 990);
    assert!(
        s.achieved_pps > 480.0 && s.achieved_pps < 500.0,
        "{}",
        s.achieved_pps
    );
    assert_eq!(s.errors["EADDRNOTAVAIL"], 10);
    assert!(!s.errors.contains_key("ECONNREFUSED"), "{:?}", s.errors);
    assert!(
        s.verdicts
            .iter()
            .all(|v| v.cause != crate::analysis::verdict::Cause::NeverSent),
        "{:#?}",
        s.verdicts
    );
    // a sender that made a few connects among many sends is not a connect scanner
    let th = ThreadCounters {
        calls: 1000,
        connect: crate::collect::ConnectCounters {
            calls: 3,
            syns: 3,
            answered: 0,
        },
        ..sender(100, 101, 1000, START + 1, START + 2 * SEC)
    };
    let last = sample(START + 2 * SEC).thread(th).build();
    assert!(!Analyzer::new(Some(500.0), START).tick(&last, &[]).connect_scanner);
    let s = summary_of(&a, &last);
    assert!(!s.connect.expect("a connect view").connect_scanner);
    assert_eq!(s.rate_unit(), "pps");
    // and one that made none has no view
    let th = sender(100, 101, 1000, START + 1, START + 2 * SEC);
    assert_eq!(
        summary_of(&a, &sample(START + 2 * SEC).thread(th).build()).connect,
        None
    );
}

/// Every stage serializes as its `as_str` name and reads back from it; the names are unique
/// and every funnel's list is made of them.
#[test]
fn stage_names_serialize_as_their_names() {
    let mut seen = std::collections::BTreeSet::new();
    for &n in StageName::ALL {
        assert_eq!(serde_json::to_string(&n).unwrap(), format!("\"{}\"", n.as_str()));
        assert_eq!(serde_json::from_str::<StageName>(&format!("\"{n}\"")).unwrap(), n);
        assert_eq!(n.as_str().parse::<StageName>(), Ok(n));
        assert!(seen.insert(n.as_str()), "{n} twice");
    }
    let listed = STAGES.len() + RECV_STAGES.len() + super::rings::RING_STAGES.len();
    assert_eq!(listed, StageName::ALL.len());
}

/// A map keyed by stages writes its keys in alphabetical order, as the map keyed by strings
/// did (the Summary's `stages` and `stage_counts`), and a stage pads as a string does.
#[test]
fn stage_maps_keep_the_keys_in_name_order() {
    let map: BTreeMap<StageName, u64> = StageName::ALL.iter().map(|&n| (n, 1)).collect();
    let by_name: BTreeMap<&str, u64> = StageName::ALL.iter().map(|n| (n.as_str(), 1)).collect();
    assert_eq!(
        serde_json::to_string(&map).unwrap(),
        serde_json::to_string(&by_name).unwrap()
    );
    assert_eq!(map["dev_xmit"], 1);
    assert_eq!(format!("[{:<12}]", StageName::DevXmit), "[dev_xmit    ]");
    assert_eq!(format!("[{:>10}]", StageName::RingDrops), "[ring_drops]");
}

/// A name that is no stage is refused, named, with where the stages are listed.
#[test]
fn an_unknown_stage_name_is_refused_by_name() {
    let err = "dev_xmitt".parse::<StageName>().unwrap_err().to_string();
    assert_eq!(
        err,
        "unknown stage 'dev_xmitt': see docs/events.md for the stages"
    );
    let err = serde_json::from_str::<StageName>("\"dev_xmitt\"")
        .unwrap_err()
        .to_string();
    assert!(err.contains("dev_xmitt") && err.contains("`dev_xmit`"), "{err}");
}

/// A scan of 1,000 pps requested that reaches 800, seen tick by tick: a tick before its first
/// send, three whole ticks of sending, a last sending tick that stops 0.4 s before its end, five
/// ticks of waiting for late replies with the family alive, and its exit half a tick later.
/// Only the whole sending ticks judge the rate; the summary's verdicts come from the send window
/// whatever followed it.
#[test]
fn a_run_has_phases_and_only_whole_sending_ticks_judge_the_rate() {
    use crate::analysis::verdict::{Cause, Kind};
    let ms = |send: u64, sleep: u64, other: u64| TimeBudget {
        send_ns: send * MS,
        sleep_ns: sleep * MS,
        other_ns: other * MS,
        ..Default::default()
    };
    // Cumulative counters: packets, the latest send, the run's budget, the send window's.
    let at = |t_ns: u64,
              packets: u64,
              last_ns: u64,
              budget: TimeBudget,
              window: Option<TimeBudget>,
              alive: bool| {
        let mut s = sample(t_ns).process(100, 1, "scan").build();
        s.processes[0].alive = alive;
        let th = if packets == 0 {
            ThreadCounters {
                tid: 101,
                pid: 100,
                budget,
                ..Default::default()
            }
        } else {
            ThreadCounters {
                budget,
                window_budget: window,
                exited: !alive,
                ..sender(100, 101, packets, START + SEC + MS, last_ns)
            }
        };
        s.threads.push(th);
        s
    };
    let mut a = Analyzer::new(Some(1000.0), START);
    a.set_interval(SEC);
    a.baseline(sample(START).process(100, 1, "scan").build());
    let mut samples = vec![at(START + SEC, 0, 0, ms(0, 0, 1000), None, true)];
    for k in 1..=3u64 {
        samples.push(at(
            START + (k + 1) * SEC,
            800 * k,
            START + (k + 1) * SEC - MS,
            ms(300 * k, 0, 1000 + 700 * k),
            Some(ms(300 * k, 0, 700 * k)),
            true,
        ));
    }
    // Sending stops at 4.6 s: 480 packets in the tick's first 0.6 s.
    let window = ms(1080, 0, 2520);
    samples.push(at(
        START + 5 * SEC,
        2880,
        START + 4600 * MS,
        ms(1080, 400, 3520),
        Some(window),
        true,
    ));
    for k in 1..=5u64 {
        samples.push(at(
            START + (5 + k) * SEC,
            2880,
            START + 4600 * MS,
            ms(1080, 400 + 1000 * k, 3520),
            Some(window),
            true,
        ));
    }
    samples.push(at(
        START + 10_500 * MS,
        2880,
        START + 4600 * MS,
        ms(1080, 5900, 3520),
        Some(window),
        false,
    ));

    let mut ticks = Vec::new();
    let mut before_idle = None;
    for (i, s) in samples.iter().enumerate() {
        ticks.push(a.tick(s, &[]));
        if i == 4 {
            before_idle = Some(summary_of(&a, s));
        }
    }
    let phases: Vec<(RunPhase, bool)> = ticks.iter().map(|t| (t.phase, t.partial)).collect();
    let mut expected = vec![(RunPhase::Starting, false)];
    expected.extend([(RunPhase::Sending, false); 3]);
    expected.push((RunPhase::Sending, true));
    expected.extend([(RunPhase::Waiting, false); 5]);
    expected.push((RunPhase::Ended, false));
    assert_eq!(phases, expected);

    // The whole sending ticks judge the 20% gap; no other tick carries a gap verdict.
    for t in &ticks[1..4] {
        assert!(t.judges_rate());
        assert!(
            t.verdicts.iter().any(|v| v.kind == Kind::Gap),
            "tick {}: {:?}",
            t.tick,
            t.verdicts
        );
        assert_close(t.achieved_pps, 800.0);
    }
    for t in ticks.iter().filter(|t| !t.judges_rate()) {
        let gap: Vec<_> = t.verdicts.iter().filter(|v| v.kind == Kind::Gap).collect();
        assert!(gap.is_empty(), "tick {} ({}): {gap:?}", t.tick, t.phase);
        assert!(t.verdicts.iter().all(|v| v.cause != Cause::Unexplained));
        assert!(t.phase_text().is_some());
    }
    // The partial tick's rate is what it counted, and says why it is not judged.
    assert_close(ticks[4].achieved_pps, 480.0);
    let partial = ticks[4].phase_text().unwrap();
    assert!(
        partial.contains("last send at 4.60 s, 0.40 s before the tick's end"),
        "{partial}"
    );
    let waiting = ticks[7].phase_text().unwrap();
    assert!(
        waiting.starts_with("not sending (waiting for late replies, or paused): last send at 4.60 s"),
        "{waiting}"
    );
    assert_eq!(ticks[7].last_send_s, Some(4.6));
    assert_eq!(ticks[0].last_send_s, None);

    // The run: its verdicts from the send window, as they were before the idle ticks.
    let before = before_idle.unwrap();
    let after = a.summary(&samples[10], EndReason::FamilyExited, Vec::new(), Vec::new());
    let judged = |s: &Summary| -> Vec<(Cause, Kind, String)> {
        s.verdicts
            .iter()
            .map(|v| (v.cause, v.kind, format!("{:.4}", v.share)))
            .collect()
    };
    assert!(!after.verdicts.is_empty());
    assert_eq!(judged(&after), judged(&before));
    assert!(
        after.verdicts.iter().all(|v| v.cause != Cause::Unexplained),
        "{:?}",
        after.verdicts
    );
    assert_eq!(after.phase, RunPhase::Ended);
    assert_eq!(before.phase, RunPhase::Sending);
    assert_eq!((after.first_send_s, after.last_send_s), (Some(1.001), Some(4.6)));
    // 2,880 packets over 1.001 s to 4.6 s, stretched by one interval: 800 pps.
    assert!((after.achieved_pps - 800.0).abs() < 0.5, "{}", after.achieved_pps);
}

/// Issue 33 item 7: a run keeps at most MAX_TICK_RATES per-tick rates, however many ticks it
/// has (one per tick for the whole run grew a 10 ms run's memory by ~150 KB a minute). Past
/// the bound, neighbouring ticks are merged in pairs; the windows still cover every tick, and
/// each window's rate is its packets over its time.
#[test]
fn the_per_tick_rates_kept_stay_bounded_and_cover_the_whole_run() {
    let mut r = TickRates::default();
    let tick = 10 * MS;
    // Five times the bound and a bit: 10 ms ticks, alternately 1,000 and 3,000 pps.
    let n = 5 * MAX_TICK_RATES as u64 + 3;
    for k in 0..n {
        r.push(TickRate {
            start_ns: START + k * tick,
            end_ns: START + (k + 1) * tick,
            pps: if k % 2 == 0 { 1000.0 } else { 3000.0 },
        });
        assert!(
            r.windows().len() <= MAX_TICK_RATES,
            "{} rates kept after {} ticks",
            r.windows().len(),
            k + 1
        );
    }
    assert_eq!(r.ticks(), n, "every tick is counted");
    // At 65,536 ticks the rates are merged to windows of 2, at 131,072 to windows of 4, at
    // 262,144 to windows of 8: 327,683 ticks are 40,960 windows of 8 and 3 ticks filling one.
    assert_eq!(r.per_kept, 8);
    let w = r.windows();
    assert_eq!(w.len() as u64, n / 8);
    // The windows tile the run from its first tick, without gap or overlap.
    assert_eq!(w[0].start_ns, START);
    for pair in w.windows(2) {
        assert_eq!(pair[0].end_ns, pair[1].start_ns);
        assert_eq!(pair[1].end_ns - pair[1].start_ns, 8 * tick);
    }
    // Each window of equal-length ticks is their mean rate: 2,000 pps.
    assert!(w.iter().all(|t| (t.pps - 2000.0).abs() < 1e-9), "{:?}", &w[..4]);
    // The leftover ticks are still filling a window, not in the statistics.
    assert_eq!(r.filling.map(|(_, k)| k), Some(n % 8));
}

/// Unequal windows merge by time: 10 ms at 1,000 pps and 30 ms at 3,000 pps are 100 packets
/// in 40 ms, 2,500 pps.
#[test]
fn merged_ticks_are_their_packets_over_their_time() {
    let a = TickRate {
        start_ns: START,
        end_ns: START + 10 * MS,
        pps: 1000.0,
    };
    let b = TickRate {
        start_ns: START + 10 * MS,
        end_ns: START + 40 * MS,
        pps: 3000.0,
    };
    let m = a.merged(b);
    assert_eq!((m.start_ns, m.end_ns), (START, START + 40 * MS));
    assert!((m.pps - 2500.0).abs() < 1e-9, "{}", m.pps);
}

/// Issue 29: the run's receive verdicts judge the family's load over the ticks it received in
/// (`receive_active_s`), not over a run that outlasts its traffic.
#[test]
fn the_summary_counts_the_time_the_family_received_in() {
    let reader = |t_ns: u64, packets: u64| {
        sample(t_ns)
            .thread(ThreadCounters {
                pid: 7,
                tid: 7,
                recv: crate::collect::RecvCounters {
                    calls: packets,
                    packets,
                    bytes: packets * 64,
                    ..Default::default()
                },
                ..Default::default()
            })
            .0
    };
    let mut a = Analyzer::new(None, START);
    // Nothing in the first second, 100 read in each of the next two, nothing in the last.
    let samples: Vec<CounterSample> = [0, 100, 200, 200]
        .iter()
        .enumerate()
        .map(|(i, &n)| reader(START + (i as u64 + 1) * SEC, n))
        .collect();
    for s in &samples {
        a.tick(s, &[]);
    }
    let run = a.summary(&samples[3], EndReason::Duration, Vec::new(), Vec::new());
    assert_close(run.duration_s, 4.0);
    assert_eq!(run.receive_active_s, Some(2.0));
    // A family that never received has none.
    let mut quiet = Analyzer::new(None, START);
    let s = sample(START + SEC).0;
    quiet.tick(&s, &[]);
    let run = quiet.summary(&s, EndReason::Duration, Vec::new(), Vec::new());
    assert_eq!(run.receive_active_s, None);
}

/// `--device-stages sampled` attaches its windowed programs at each tick's start, and sampled BPF
/// statistics are on for its last tenth: no figure of the probes' cost has those programs, and
/// the tick's and the run's cost say so. Counted statistics (someone's sysctl) have them.
#[test]
fn sampled_statistics_beside_sampled_device_stages_say_the_device_programs_are_not_in_them() {
    use crate::collect::bpf_time::{BpfRunTime, ProgramRun, StatsCoverage, StatsHolder};
    use crate::collect::device_window::DeviceSampling;
    let reading = |coverage, measured_ns, runs| BpfRunTime {
        coverage,
        holder: StatsHolder::Scanprof,
        measured_ns,
        target_timed: true,
        timing_floor: false,
        programs: vec![ProgramRun {
            name: "send_path.on_sys_enter_sendto".into(),
            runs,
            run_time_ns: runs * 300,
            target_runs: runs,
            target_ns: runs * 250,
            timing_floor_ns: 0,
        }],
    };
    let windows = DeviceSampling::tenth_of_each_second;
    for (coverage, devices, uncounted) in [
        (StatsCoverage::Sampled, true, true),
        (StatsCoverage::Sampled, false, false),
        (StatsCoverage::Continuous, true, false),
    ] {
        let mut a = Analyzer::new(Some(1000.0), START);
        let measured = if coverage == StatsCoverage::Sampled {
            100 * MS
        } else {
            SEC
        };
        let at = |k: u64| {
            let mut s = sample(START + k * SEC)
                .thread(sender(7, 7, 1000 * k, START + MS, START + k * SEC - MS))
                .build();
            s.bpf = Some(reading(coverage, k * measured, 1000 * k));
            s.device_sampling = devices.then(|| windows(k));
            s
        };
        let (s1, s2) = (at(1), at(2));
        a.tick(&s1, &[]);
        let tick = a.tick(&s2, &[]);
        let run = summary_of(&a, &s2);
        for (what, cost) in [("tick", &tick.cost), ("run", &run.cost)] {
            let b = cost.bpf.as_ref().unwrap_or_else(|| panic!("{what}: no BPF cost"));
            assert_eq!(
                b.device_stages_uncounted, uncounted,
                "{what} {coverage:?} {devices}"
            );
            assert_eq!(
                b.coverage_text()
                    .contains("without the sampled device stages' programs"),
                uncounted,
                "{what}: {}",
                b.coverage_text()
            );
        }
    }
}
