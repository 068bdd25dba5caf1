//! The family's outside limits over an interval, from the cumulative readings of two samples:
//! each cgroup quota's throttling, steal time on its CPUs, and the conntrack tables' fill. The
//! run's figures are the ticks' added up ([`LimitsRun`]), so that a cgroup the family joins
//! during the run counts from the tick it joined in.

use std::collections::BTreeMap;

use super::snapshot::{CgroupThrottleView, ConntrackView, LimitsView, StealView};
use crate::collect::CounterSample;

/// The limits between two samples, `interval_ns` apart. A cgroup absent from `prev` was joined
/// in between: it counts from zero, its throttled time at most the interval.
pub fn between(now: &CounterSample, prev: Option<&CounterSample>, interval_ns: u64) -> LimitsView {
    let interval_ns = interval_ns.max(1);
    let cgroups = now
        .cgroups
        .iter()
        .map(|c| {
            let before = prev.and_then(|p| {
                p.cgroups
                    .iter()
                    .find(|b| b.version == c.version && b.path == c.path)
            });
            let (periods, throttled_periods, throttled_ns) = match before {
                Some(b) => (
                    c.nr_periods.saturating_sub(b.nr_periods),
                    c.nr_throttled.saturating_sub(b.nr_throttled),
                    c.throttled_ns.saturating_sub(b.throttled_ns),
                ),
                None => {
                    let most_periods = interval_ns / (c.period_us.max(1) * 1000) + 1;
                    (
                        c.nr_periods.min(most_periods),
                        c.nr_throttled.min(most_periods),
                        c.throttled_ns.min(interval_ns),
                    )
                }
            };
            CgroupThrottleView {
                version: c.version,
                path: c.path.clone(),
                pids: c.pids.clone(),
                cpus: c.cpus(),
                quota_us: c.quota_us,
                period_us: c.period_us,
                periods,
                throttled_periods,
                throttled_s: throttled_ns as f64 / 1e9,
            }
        })
        .collect();
    let steal = match (&now.steal, prev.and_then(|p| p.steal.as_ref())) {
        (Some(n), Some(p)) if n.cpus == p.cpus => {
            let ns = n.steal_ns.saturating_sub(p.steal_ns);
            Some(StealView {
                cpus: n.cpus.clone(),
                steal_s: ns as f64 / 1e9,
                share: ns as f64 / (interval_ns as f64 * n.cpus.len().max(1) as f64),
            })
        }
        _ => None,
    };
    let conntrack = now
        .conntrack
        .iter()
        .map(|t| ConntrackView {
            netns: t.netns,
            pid: t.pid,
            count: t.count,
            peak: t.count,
            max: t.max,
            destinations: t.destinations.clone(),
        })
        .collect();
    LimitsView {
        cgroups,
        steal,
        conntrack,
    }
}

/// The run's limits: the ticks' views added up.
#[derive(Debug, Clone, Default)]
pub struct LimitsRun {
    cgroups: BTreeMap<(u8, String), CgroupThrottleView>,
    steal: Option<(Vec<u32>, f64)>,
    conntrack: BTreeMap<u32, ConntrackView>,
}

impl LimitsRun {
    /// Adds one interval's view.
    pub fn add(&mut self, v: &LimitsView) {
        for c in &v.cgroups {
            let e = self
                .cgroups
                .entry((c.version, c.path.clone()))
                .or_insert_with(|| CgroupThrottleView {
                    periods: 0,
                    throttled_periods: 0,
                    throttled_s: 0.0,
                    ..c.clone()
                });
            e.periods += c.periods;
            e.throttled_periods += c.throttled_periods;
            e.throttled_s += c.throttled_s;
            e.quota_us = c.quota_us;
            e.period_us = c.period_us;
            e.cpus = c.cpus;
            for p in &c.pids {
                if !e.pids.contains(p) {
                    e.pids.push(*p);
                }
            }
        }
        if let Some(s) = &v.steal {
            let e = self.steal.get_or_insert_with(|| (s.cpus.clone(), 0.0));
            e.0 = s.cpus.clone();
            e.1 += s.steal_s;
        }
        for t in &v.conntrack {
            let e = self.conntrack.entry(t.netns).or_insert_with(|| t.clone());
            e.peak = e.peak.max(t.peak);
            e.count = t.count;
            e.max = t.max.or(e.max);
            if !t.destinations.is_empty() {
                e.destinations = t.destinations.clone();
            }
        }
    }

    /// The run's view over `duration_s`; None when nothing applied.
    pub fn view(&self, duration_s: f64) -> Option<LimitsView> {
        let v = LimitsView {
            cgroups: self.cgroups.values().cloned().collect(),
            steal: self.steal.as_ref().map(|(cpus, s)| StealView {
                cpus: cpus.clone(),
                steal_s: *s,
                share: s / (duration_s.max(1e-9) * cpus.len().max(1) as f64),
            }),
            conntrack: self.conntrack.values().cloned().collect(),
        };
        (!v.is_empty()).then_some(v)
    }
}

/// A tick's view, None when nothing applies (no quota, no conntrack entries, no steal figure).
pub fn tick_view(v: LimitsView) -> Option<LimitsView> {
    (!v.is_empty()).then_some(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::system::conntrack::ConntrackTable;
    use crate::system::cpu_limits::{CgroupCpu, CpuSteal};

    fn cg(periods: u64, throttled: u64, ns: u64) -> CgroupCpu {
        CgroupCpu {
            version: 1,
            path: "/lab".into(),
            pids: vec![7],
            quota_us: 30_000,
            period_us: 100_000,
            nr_periods: periods,
            nr_throttled: throttled,
            throttled_ns: ns,
        }
    }

    fn sample(t_ns: u64, cgroups: Vec<CgroupCpu>, steal_ns: u64, ct: u64) -> CounterSample {
        CounterSample {
            t_ns,
            cgroups,
            steal: Some(CpuSteal {
                cpus: vec![0, 1],
                steal_ns,
            }),
            conntrack: vec![ConntrackTable {
                netns: 5,
                pid: 7,
                count: ct,
                max: Some(64),
                destinations: Vec::new(),
            }],
            ..Default::default()
        }
    }

    #[test]
    fn throttling_and_steal_are_counted_between_samples() {
        let a = sample(1_000_000_000, vec![cg(10, 7, 700_000_000)], 0, 10);
        let b = sample(2_000_000_000, vec![cg(20, 14, 1_400_000_000)], 100_000_000, 64);
        let v = between(&b, Some(&a), 1_000_000_000);
        assert_eq!(v.cgroups.len(), 1);
        let c = &v.cgroups[0];
        assert_eq!((c.periods, c.throttled_periods), (10, 7));
        assert!((c.throttled_s - 0.7).abs() < 1e-9);
        assert!((c.cpus - 0.3).abs() < 1e-9);
        let s = v.steal.unwrap();
        assert!((s.share - 0.05).abs() < 1e-9, "{s:?}");
        assert!(v.conntrack[0].full());
        // A cgroup joined in the tick counts from zero, at most the tick: a day-old cgroup's
        // history is not this tick's.
        let old = sample(
            2_000_000_000,
            vec![cg(900_000, 800_000, 80_000_000_000_000)],
            0,
            10,
        );
        let v = between(&old, Some(&a.clone().tap_no_cgroups()), 1_000_000_000);
        assert!((v.cgroups[0].throttled_s - 1.0).abs() < 1e-9);
        assert_eq!(v.cgroups[0].periods, 11);
        assert!(!v.conntrack[0].full());
    }

    #[test]
    fn the_run_adds_the_ticks_up_and_keeps_the_peak() {
        let a = sample(1_000_000_000, vec![cg(10, 7, 700_000_000)], 0, 64);
        let b = sample(2_000_000_000, vec![cg(20, 14, 1_400_000_000)], 0, 64);
        let c = sample(3_000_000_000, vec![cg(30, 21, 2_100_000_000)], 0, 3);
        let mut run = LimitsRun::default();
        run.add(&between(&a, None, 1_000_000_000));
        run.add(&between(&b, Some(&a), 1_000_000_000));
        run.add(&between(&c, Some(&b), 1_000_000_000));
        let v = run.view(3.0).unwrap();
        assert_eq!(v.cgroups[0].throttled_periods, 21);
        assert!((v.cgroups[0].throttled_s - 2.1).abs() < 1e-9);
        assert_eq!((v.conntrack[0].peak, v.conntrack[0].count), (64, 3));
        assert!(v.conntrack[0].full());
        assert!(LimitsRun::default().view(1.0).is_none());
    }

    trait NoCgroups {
        fn tap_no_cgroups(self) -> Self;
    }
    impl NoCgroups for CounterSample {
        fn tap_no_cgroups(mut self) -> Self {
            self.cgroups.clear();
            self
        }
    }
}
