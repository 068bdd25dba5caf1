//! What scanprof's own BPF programs cost, over a tick or the run: from two cumulative
//! `BpfRunTime` readings (the kernel's run-time statistics, summed by collect), the target's
//! packets and its threads' on-CPU time over the same interval. Sampled readings are scaled up
//! to the interval. Pure: no clock, every time comes in with the samples.

use serde::{Deserialize, Serialize};

use crate::collect::bpf_time::{BpfRunTime, StatsCoverage, StatsHolder};
use crate::collect::ThreadCounters;

/// Probes taking more than this share of the target's on-CPU time are called out in every view
/// and weighed by the diagnosis (the `probe_cost` cause).
pub const PROBE_COST_ALERT: f64 = 0.05;

/// One program's share of the cost over the interval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProgramCost {
    /// object.program, e.g. `send_path.on_dev_queue`
    pub name: String,
    /// runs counted while statistics were on (not scaled)
    pub runs: u64,
    /// run time counted while statistics were on, ns (not scaled)
    pub run_time_ns: u64,
    /// run_time_ns / runs, ns; None without runs
    pub ns_per_run: Option<f64>,
    /// the program's run time over the interval (scaled to it) per target packet, ns; None
    /// without packets
    pub ns_per_packet: Option<f64>,
}

/// scanprof's BPF programs' cost over a tick or the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeCost {
    /// counted the whole time, or sampled for part of it and scaled up
    pub coverage: StatsCoverage,
    /// who kept the kernel's statistics on
    pub holder: StatsHolder,
    /// share of the interval the statistics were on (1 = all of it)
    pub measured_share: f64,
    /// run time of all of scanprof's programs over the interval, on every CPU and in every
    /// context (the target's syscalls, softirqs, other processes' syscalls), ns; scaled up by
    /// 1 / measured_share
    pub bpf_ns: f64,
    /// the target's packets through its send syscalls over the interval
    pub packets: u64,
    /// bpf_ns / packets, ns; None without packets
    pub ns_per_packet: Option<f64>,
    /// on-CPU time of the target's threads over the interval (inside and outside send
    /// syscalls), ns
    pub target_oncpu_ns: u64,
    /// bpf_ns / target_oncpu_ns: the share of the target's on-CPU time the probes took, an upper
    /// bound (runs in other tasks count too); None without target on-CPU time
    pub share_of_target: Option<f64>,
    /// share_of_target above PROBE_COST_ALERT
    pub alert: bool,
    /// per program, most costly first
    pub programs: Vec<ProgramCost>,
}

/// On-CPU time of every thread in `now` since `prev` (by pid and tid; a thread new since then
/// counts whole), ns.
pub fn target_oncpu_ns(now: &[ThreadCounters], prev: Option<&[ThreadCounters]>) -> u64 {
    now.iter()
        .map(|t| {
            let before = prev
                .and_then(|p| p.iter().find(|o| o.tid == t.tid && o.pid == t.pid))
                .map_or(0, |b| b.budget.send_ns + b.budget.other_ns);
            (t.budget.send_ns + t.budget.other_ns).saturating_sub(before)
        })
        .sum()
}

impl ProbeCost {
    /// The cost over an interval of `interval_ns` ending with reading `now`, since `prev` (None:
    /// since attach). None when the statistics measured nothing in it.
    pub fn of(
        now: &BpfRunTime,
        prev: Option<&BpfRunTime>,
        interval_ns: u64,
        packets: u64,
        target_oncpu_ns: u64,
    ) -> Option<ProbeCost> {
        let measured_ns = now.measured_ns.saturating_sub(prev.map_or(0, |p| p.measured_ns));
        if measured_ns == 0 || interval_ns == 0 {
            return None;
        }
        // A window may overhang the interval by the time between the sample and the window's
        // reads: never scale down.
        let measured_share = (measured_ns as f64 / interval_ns as f64).min(1.0);
        let scale = 1.0 / measured_share;
        let per_packet = |ns: f64| (packets > 0).then(|| ns / packets as f64);
        let mut programs: Vec<ProgramCost> = now
            .programs
            .iter()
            .map(|p| {
                let (runs0, ns0) = prev
                    .and_then(|q| q.programs.iter().find(|o| o.name == p.name))
                    .map_or((0, 0), |o| (o.runs, o.run_time_ns));
                let runs = p.runs.saturating_sub(runs0);
                let run_time_ns = p.run_time_ns.saturating_sub(ns0);
                ProgramCost {
                    name: p.name.clone(),
                    runs,
                    run_time_ns,
                    ns_per_run: (runs > 0).then(|| run_time_ns as f64 / runs as f64),
                    ns_per_packet: per_packet(run_time_ns as f64 * scale),
                }
            })
            .filter(|p| p.runs > 0)
            .collect();
        programs.sort_by(|a, b| {
            b.run_time_ns
                .cmp(&a.run_time_ns)
                .then_with(|| a.name.cmp(&b.name))
        });
        let bpf_ns = programs.iter().map(|p| p.run_time_ns).sum::<u64>() as f64 * scale;
        let share_of_target = (target_oncpu_ns > 0).then(|| bpf_ns / target_oncpu_ns as f64);
        Some(ProbeCost {
            coverage: if measured_share >= 0.999 {
                now.coverage
            } else {
                StatsCoverage::Sampled
            },
            holder: now.holder,
            measured_share,
            bpf_ns,
            packets,
            ns_per_packet: per_packet(bpf_ns),
            target_oncpu_ns,
            share_of_target,
            alert: share_of_target.is_some_and(|s| s > PROBE_COST_ALERT),
            programs,
        })
    }

    /// What the figure covers, for every view: "counted", or "sampled 10% of the time".
    pub fn coverage_text(&self) -> String {
        match self.coverage {
            StatsCoverage::Continuous => "counted".to_string(),
            StatsCoverage::Sampled => format!("sampled {:.0}% of the time", self.measured_share * 100.0),
        }
    }

    /// The plain sentence every view shows when the probes take more than PROBE_COST_ALERT of
    /// the target's time; None below it. Without packets sent there is no send rate to slow:
    /// the sentence then gives the times only, since the share is an upper bound that the runs
    /// for every other process on the machine fill when the target itself barely ran.
    pub fn alert_text(&self) -> Option<String> {
        let share = self.share_of_target.filter(|_| self.alert)?;
        let Some(ns) = self.ns_per_packet else {
            return Some(format!(
                "scanprof's probes ran {:.1} ms, {:.1}% of the target's {:.1} ms on a CPU: an upper \
                 bound, their runs for every other process on the machine count too; the target sent \
                 no packets, so no send rate was slowed",
                self.bpf_ns / 1e6,
                share * 100.0,
                self.target_oncpu_ns as f64 / 1e6,
            ));
        };
        Some(format!(
            "scanprof's probes take {:.1}% of the target's on-CPU time ({ns:.0} ns per packet): measuring \
             costs the target that much CPU; a target that sends as fast as its CPU allows is up to \
             {:.0}% faster without scanprof",
            share * 100.0,
            (1.0 / (1.0 - share.min(0.99)) - 1.0) * 100.0
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collect::bpf_time::ProgramRun;
    use crate::collect::TimeBudget;

    fn reading(coverage: StatsCoverage, measured_ns: u64, programs: &[(&str, u64, u64)]) -> BpfRunTime {
        BpfRunTime {
            coverage,
            holder: StatsHolder::Scanprof,
            measured_ns,
            programs: programs
                .iter()
                .map(|(n, runs, ns)| ProgramRun {
                    name: n.to_string(),
                    runs: *runs,
                    run_time_ns: *ns,
                })
                .collect(),
        }
    }

    #[test]
    fn a_sampled_tick_is_scaled_to_the_tick_and_divided_by_its_packets() {
        // Tick of 1 s, statistics on for its last 100 ms: 50,000 runs of 200 ns and 20,000 of
        // 500 ns counted in the slice (20 ms of BPF time), 100,000 packets in the tick.
        let prev = reading(
            StatsCoverage::Sampled,
            100_000_000,
            &[("a.x", 1000, 200_000), ("b.y", 10, 5000)],
        );
        let now = reading(
            StatsCoverage::Sampled,
            200_000_000,
            &[("a.x", 51_000, 10_200_000), ("b.y", 20_010, 10_005_000)],
        );
        let c = ProbeCost::of(&now, Some(&prev), 1_000_000_000, 100_000, 400_000_000).unwrap();
        assert_eq!(c.coverage, StatsCoverage::Sampled);
        assert!((c.measured_share - 0.1).abs() < 1e-12);
        // 20 ms in the slice -> 200 ms over the tick -> 2,000 ns per packet, half the target's
        // 400 ms on CPU.
        assert!((c.bpf_ns - 200_000_000.0).abs() < 1e-3, "{}", c.bpf_ns);
        assert!((c.ns_per_packet.unwrap() - 2000.0).abs() < 1e-9);
        assert!((c.share_of_target.unwrap() - 0.5).abs() < 1e-12);
        assert!(c.alert);
        assert_eq!(c.coverage_text(), "sampled 10% of the time");
        // Most costly first; per-run figures are not scaled, per-packet ones are.
        assert_eq!(c.programs[0].name, "a.x");
        assert_eq!(c.programs[0].runs, 50_000);
        assert!((c.programs[0].ns_per_run.unwrap() - 200.0).abs() < 1e-9);
        assert!((c.programs[0].ns_per_packet.unwrap() - 1000.0).abs() < 1e-9);
        assert!((c.programs[1].ns_per_run.unwrap() - 500.0).abs() < 1e-9);
        let sum: f64 = c.programs.iter().filter_map(|p| p.ns_per_packet).sum();
        assert!((sum - c.ns_per_packet.unwrap()).abs() < 1e-9);
    }

    #[test]
    fn a_continuous_run_is_counted_not_scaled_and_below_the_alert_it_stays_quiet() {
        let now = reading(
            StatsCoverage::Continuous,
            3_000_000_000,
            &[("a.x", 300_000, 30_000_000)],
        );
        let c = ProbeCost::of(&now, None, 3_000_000_000, 300_000, 1_000_000_000).unwrap();
        assert_eq!(c.coverage, StatsCoverage::Continuous);
        assert_eq!(c.coverage_text(), "counted");
        assert!((c.ns_per_packet.unwrap() - 100.0).abs() < 1e-9);
        assert!((c.share_of_target.unwrap() - 0.03).abs() < 1e-12);
        assert!(!c.alert);
        assert_eq!(c.alert_text(), None);
    }

    #[test]
    fn nothing_measured_gives_no_figure_and_no_packets_no_per_packet_figure() {
        let r = reading(StatsCoverage::Sampled, 5, &[("a.x", 10, 100)]);
        assert_eq!(ProbeCost::of(&r, Some(&r), 1_000_000_000, 10, 10), None);
        let c = ProbeCost::of(&r, None, 50, 0, 0).unwrap();
        assert_eq!(c.ns_per_packet, None);
        assert_eq!(c.share_of_target, None);
        assert!(!c.alert);
    }

    #[test]
    fn the_alert_says_how_much_faster_the_target_would_be() {
        let now = reading(StatsCoverage::Continuous, 1_000, &[("a.x", 10, 200)]);
        let c = ProbeCost::of(&now, None, 1_000, 1, 1_000).unwrap();
        let text = c.alert_text().expect("20% is above the alert");
        assert!(text.contains("20.0% of the target's on-CPU time"), "{text}");
        assert!(text.contains("200 ns per packet"), "{text}");
        assert!(text.contains("up to 25% faster without scanprof"), "{text}");
    }

    #[test]
    fn without_packets_the_alert_gives_the_times_and_claims_no_speed_up() {
        // A family that sent nothing and ran 2 ms while the probes ran 0.6 ms machine-wide.
        let now = reading(
            StatsCoverage::Continuous,
            1_000_000_000,
            &[("a.x", 3000, 600_000)],
        );
        let c = ProbeCost::of(&now, None, 1_000_000_000, 0, 2_000_000).unwrap();
        assert!(c.alert);
        let text = c.alert_text().expect("30% is above the alert");
        assert!(
            text.contains("ran 0.6 ms, 30.0% of the target's 2.0 ms on a CPU"),
            "{text}"
        );
        assert!(text.contains("sent no packets"), "{text}");
        assert!(!text.contains("faster"), "{text}");
    }

    #[test]
    fn target_time_is_on_cpu_time_since_the_previous_sample() {
        let th = |tid: u32, send: u64, other: u64, sleep: u64| ThreadCounters {
            tid,
            pid: 1,
            budget: TimeBudget {
                send_ns: send,
                other_ns: other,
                sleep_ns: sleep,
                ..Default::default()
            },
            ..Default::default()
        };
        let prev = vec![th(1, 100, 50, 1000)];
        let now = vec![th(1, 400, 150, 9000), th(2, 30, 20, 5)];
        assert_eq!(target_oncpu_ns(&now, Some(&prev)), 300 + 100 + 50);
        assert_eq!(target_oncpu_ns(&now, None), 550 + 50);
    }
}
