//! What scanprof's own BPF programs cost, over a tick or the run: from two cumulative
//! `BpfRunTime` readings (the kernel's run-time statistics, summed by collect, and each
//! program's own timing of its runs on the family's threads), the target's packets and its
//! threads' on-CPU time over the same interval. What the target pays (runs on its threads) is
//! kept apart from the tax on the rest of the machine (every other run: other processes'
//! syscalls and switches, packets handled in other tasks' time). Sampled readings are scaled up
//! to the interval. Pure: no clock, every time comes in with the samples.

use serde::{Deserialize, Serialize};

use crate::collect::bpf_time::{BpfRunTime, StatsCoverage, StatsHolder};
use crate::collect::ThreadCounters;
use crate::units::{duration, pct};

/// Probes taking more than this share of the target's on-CPU time are called out in every view
/// and weighed by the diagnosis (the `probe_cost` cause), when the target is busy sending
/// (ALERT_MIN_ONCPU_SHARE).
pub const PROBE_COST_ALERT: f64 = 0.05;

/// Below this share of the interval on a CPU (the target's threads summed), the interval has no
/// share of the target's time: statistics sampled for a tenth of it would scale a few runs up
/// into a figure of noise, and a target that barely ran is not slowed by anything it ran.
pub const MIN_TARGET_ONCPU_SHARE: f64 = 0.02;

/// Below this many target packets over the interval, no share of the target's time either:
/// the probes' cost is a cost per packet sent.
pub const MIN_SHARE_PACKETS: u64 = 100;

/// The alert needs the target's threads on a CPU, or runnable waiting for one, at least this
/// share of the interval (summed): only a sender that wants a CPU all the time can be slowed by
/// the probes' CPU time. One that sleeps, waits for a pacer or blocks in its sends absorbs it in
/// its waits.
pub const ALERT_MIN_ONCPU_SHARE: f64 = 0.5;

/// Why an interval has no share of the target's time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NoShare {
    /// the readings come from a scanprof whose programs did not time their runs on the
    /// target's threads (a bundle written before they did)
    NotTimed,
    /// the target's threads ran on a CPU less than MIN_TARGET_ONCPU_SHARE of the interval
    LittleTargetCpu,
    /// the target sent fewer than MIN_SHARE_PACKETS packets over the interval
    FewPackets,
}

/// One program's share of the cost over the interval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProgramCost {
    /// object.program, e.g. `send_path.on_dev_queue`
    pub name: String,
    /// runs counted while statistics were on (not scaled), for every task and packet
    pub runs: u64,
    /// run time counted while statistics were on, ns (not scaled)
    pub run_time_ns: u64,
    /// run_time_ns / runs, ns; None without runs
    pub ns_per_run: Option<f64>,
    /// the program's run time over the interval (scaled to it) per target packet, ns; None
    /// without packets
    pub ns_per_packet: Option<f64>,
    /// of `runs`, the runs on the target's threads (counted by the program; not scaled)
    #[serde(default)]
    pub target_runs: u64,
    /// their time as the program timed their bodies, ns (not scaled)
    #[serde(default)]
    pub target_run_time_ns: u64,
    /// those runs' share by runs of the untimed rest of run_time_ns (their entries and exits
    /// around the timed bodies: mostly the timing's own clock reads), ns (not scaled)
    #[serde(default)]
    pub timing_ns: u64,
    /// target_run_time_ns scaled to the interval, per target packet, ns; None without packets
    /// or without timing
    #[serde(default)]
    pub target_ns_per_packet: Option<f64>,
    /// of `timing_ns`, what the timing counted inside the target's timed runs (their runs times
    /// the floor measured at each window), taken off target_run_time_ns; ns (not scaled)
    #[serde(default)]
    pub timing_floor_ns: u64,
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
    /// whether the programs timed their runs on the target's threads (false: a bundle written
    /// before they did; the target_ and machine_ figures are then None)
    #[serde(default)]
    pub target_timed: bool,
    /// what the target pays: run time of the programs' runs on the target's threads (the task
    /// on the CPU was one of them, so the run was part of its on-CPU time): runs counted, bodies
    /// timed by the programs themselves, less what the timing counts around an empty body
    /// (`timing_floor_ns_per_run`; left in where it was not measured); ns, scaled like bpf_ns
    #[serde(default)]
    pub target_bpf_ns: Option<f64>,
    /// the target's runs' untimed entries and exits (their share by runs of each program's
    /// run time outside the timed bodies) and the timing floor taken off the timed bodies: the
    /// timing's own two clock reads, mostly; scanprof's cost of measuring, paid only while the
    /// statistics are on; ns, scaled
    #[serde(default)]
    pub timing_ns: Option<f64>,
    /// what the timing counts around an empty body, taken off each timed run: ns a run,
    /// averaged over the interval's timed runs (each window's measured as it closed); None where
    /// no window measured it (`BpfRunTime::timing_floor`), and then target_bpf_ns has it in
    #[serde(default)]
    pub timing_floor_ns_per_run: Option<f64>,
    /// the tax on the rest of the machine: bpf_ns - target_bpf_ns - timing_ns, the runs in every
    /// other task or context (other processes' syscalls and switches, the target's packets
    /// handled outside its threads' time), ns
    #[serde(default)]
    pub machine_bpf_ns: Option<f64>,
    /// machine_bpf_ns over the interval: the share of one CPU it took
    #[serde(default)]
    pub machine_cpu_share: Option<f64>,
    /// the target's packets through its send syscalls over the interval
    pub packets: u64,
    /// bpf_ns / packets: every program's run time, wherever it ran, per target packet, ns;
    /// None without packets
    pub ns_per_packet: Option<f64>,
    /// target_bpf_ns / packets, ns; None without packets or without timing
    #[serde(default)]
    pub target_ns_per_packet: Option<f64>,
    /// on-CPU time of the target's threads over the interval (inside and outside send
    /// syscalls), ns
    pub target_oncpu_ns: u64,
    /// target_oncpu_ns over the interval (threads summed: above 1 with several busy threads)
    #[serde(default)]
    pub target_oncpu_share: f64,
    /// the target's threads' time on a CPU or runnable waiting for one (preempted), over the
    /// interval (threads summed): how busy it was, whatever the machine's load let it run
    #[serde(default)]
    pub target_busy_share: f64,
    /// target_bpf_ns / target_oncpu_ns: the share of the target's on-CPU time the probes took on
    /// its threads; None when `no_share` says why
    pub share_of_target: Option<f64>,
    /// why share_of_target is None
    #[serde(default)]
    pub no_share: Option<NoShare>,
    /// share_of_target above PROBE_COST_ALERT while target_busy_share was at least
    /// ALERT_MIN_ONCPU_SHARE
    pub alert: bool,
    /// the device-stage programs `--device-stages sampled` attaches for the first tenth of each
    /// tick ran outside the statistics' windows (the last tenth), so none of these figures has
    /// them: set when both are sampled (counted statistics have them)
    #[serde(default)]
    pub device_stages_uncounted: bool,
    /// per program, most costly first
    pub programs: Vec<ProgramCost>,
}

/// The target's threads' time over an interval, ns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TargetTime {
    /// on a CPU (inside and outside send syscalls)
    pub oncpu_ns: u64,
    /// runnable, waiting for a CPU (preempted)
    pub waiting_ns: u64,
}

/// On-CPU time of every thread in `now` since `prev` (by pid and tid; a thread new since then
/// counts whole), ns.
pub fn target_oncpu_ns(now: &[ThreadCounters], prev: Option<&[ThreadCounters]>) -> u64 {
    target_time(now, prev).oncpu_ns
}

/// On-CPU and preempted time of every thread in `now` since `prev` (as target_oncpu_ns).
pub fn target_time(now: &[ThreadCounters], prev: Option<&[ThreadCounters]>) -> TargetTime {
    let mut out = TargetTime::default();
    for t in now {
        let before = prev.and_then(|p| p.iter().find(|o| o.tid == t.tid && o.pid == t.pid));
        let oncpu = |c: &ThreadCounters| c.budget.send_ns + c.budget.other_ns;
        out.oncpu_ns += oncpu(t).saturating_sub(before.map_or(0, oncpu));
        out.waiting_ns += t
            .budget
            .preempted_ns
            .saturating_sub(before.map_or(0, |b| b.budget.preempted_ns));
    }
    out
}

impl ProbeCost {
    /// The cost over an interval of `interval_ns` ending with reading `now`, since `prev` (None:
    /// since attach), with the target's `packets` and `target` time over it. None when the
    /// statistics measured nothing in it.
    pub fn of(
        now: &BpfRunTime,
        prev: Option<&BpfRunTime>,
        interval_ns: u64,
        packets: u64,
        target: TargetTime,
    ) -> Option<ProbeCost> {
        let target_oncpu_ns = target.oncpu_ns;
        let measured_ns = now.measured_ns.saturating_sub(prev.map_or(0, |p| p.measured_ns));
        if measured_ns == 0 || interval_ns == 0 {
            return None;
        }
        // A window may overhang the interval by the time between the sample and the window's
        // reads: never scale down.
        let measured_share = (measured_ns as f64 / interval_ns as f64).min(1.0);
        let scale = 1.0 / measured_share;
        let timed = now.target_timed;
        let per_packet = |ns: f64| (packets > 0).then(|| ns / packets as f64);
        let mut programs: Vec<ProgramCost> = now
            .programs
            .iter()
            .map(|p| {
                let before = prev.and_then(|q| q.programs.iter().find(|o| o.name == p.name));
                let since = |f: fn(&crate::collect::bpf_time::ProgramRun) -> u64| {
                    f(p).saturating_sub(before.map_or(0, f))
                };
                let runs = since(|r| r.runs);
                let run_time_ns = since(|r| r.run_time_ns);
                let target_runs = since(|r| r.target_runs).min(runs);
                let target_run_time_ns = since(|r| r.target_ns).min(run_time_ns);
                // What the timing counted inside the timed runs (taken off their time by the
                // collector): the timing's own, like the rest of its clock reads below.
                let floor_ns = since(|r| r.timing_floor_ns).min(run_time_ns - target_run_time_ns);
                // The untimed rest of the kernel's run time: every run's entry and exit around
                // a timed body, other tasks' runs whole. The target's runs' share of it by runs
                // is mostly the timing's own clock reads, paid only while measuring.
                let untimed = run_time_ns - target_run_time_ns - floor_ns;
                let timing_ns = if runs > 0 {
                    (untimed as u128 * target_runs as u128 / runs as u128) as u64 + floor_ns
                } else {
                    floor_ns
                };
                ProgramCost {
                    name: p.name.clone(),
                    runs,
                    run_time_ns,
                    ns_per_run: (runs > 0).then(|| run_time_ns as f64 / runs as f64),
                    ns_per_packet: per_packet(run_time_ns as f64 * scale),
                    target_runs,
                    target_run_time_ns,
                    timing_ns,
                    target_ns_per_packet: per_packet(target_run_time_ns as f64 * scale).filter(|_| timed),
                    timing_floor_ns: floor_ns,
                }
            })
            .filter(|p| p.runs > 0)
            .collect();
        // What was taken off a timed run on average: None where nothing was (no floor measured
        // in any window; a window that could not measure it took nothing off, and lowers it)
        let timed_runs: u64 = programs.iter().map(|p| p.target_runs).sum();
        let floors: u64 = programs.iter().map(|p| p.timing_floor_ns).sum();
        let timing_floor_ns_per_run = (timed && timed_runs > 0 && (now.timing_floor || floors > 0))
            .then(|| floors as f64 / timed_runs as f64);
        programs.sort_by(|a, b| {
            b.run_time_ns
                .cmp(&a.run_time_ns)
                .then_with(|| a.name.cmp(&b.name))
        });
        let bpf_ns = programs.iter().map(|p| p.run_time_ns).sum::<u64>() as f64 * scale;
        let target_bpf_ns =
            timed.then(|| programs.iter().map(|p| p.target_run_time_ns).sum::<u64>() as f64 * scale);
        let timing_ns = timed.then(|| programs.iter().map(|p| p.timing_ns).sum::<u64>() as f64 * scale);
        let machine_bpf_ns = target_bpf_ns
            .zip(timing_ns)
            .map(|(t, m)| (bpf_ns - t - m).max(0.0));
        let target_oncpu_share = target_oncpu_ns as f64 / interval_ns as f64;
        let target_busy_share = (target_oncpu_ns + target.waiting_ns) as f64 / interval_ns as f64;
        let no_share = if !timed {
            Some(NoShare::NotTimed)
        } else if target_oncpu_share < MIN_TARGET_ONCPU_SHARE {
            Some(NoShare::LittleTargetCpu)
        } else if packets < MIN_SHARE_PACKETS {
            Some(NoShare::FewPackets)
        } else {
            None
        };
        let share_of_target = match (no_share, target_bpf_ns) {
            (None, Some(t)) => Some(t / target_oncpu_ns as f64),
            _ => None,
        };
        Some(ProbeCost {
            coverage: if measured_share >= 0.999 {
                now.coverage
            } else {
                StatsCoverage::Sampled
            },
            holder: now.holder,
            measured_share,
            bpf_ns,
            target_timed: timed,
            target_bpf_ns,
            timing_ns,
            timing_floor_ns_per_run,
            machine_bpf_ns,
            machine_cpu_share: machine_bpf_ns.map(|m| m / interval_ns as f64),
            packets,
            ns_per_packet: per_packet(bpf_ns),
            target_ns_per_packet: target_bpf_ns.and_then(per_packet),
            target_oncpu_ns,
            target_oncpu_share,
            target_busy_share,
            share_of_target,
            no_share,
            alert: share_of_target.is_some_and(|s| s > PROBE_COST_ALERT)
                && target_busy_share >= ALERT_MIN_ONCPU_SHARE,
            programs,
            device_stages_uncounted: false,
        })
    }

    /// Marks the figures as lacking the sampled device stages' programs when the statistics
    /// were sampled too (`device_stages_sampled`: the interval had `--device-stages sampled`
    /// windows): the two kinds of windows never overlap.
    pub fn with_device_stages(mut self, device_stages_sampled: bool) -> ProbeCost {
        self.device_stages_uncounted = device_stages_sampled && self.coverage == StatsCoverage::Sampled;
        self
    }

    /// What the figure covers, for every view: "counted", "sampled 10% of the time", or that
    /// and "without the sampled device stages' programs (...)".
    pub fn coverage_text(&self) -> String {
        let mut text = match self.coverage {
            StatsCoverage::Continuous => "counted".to_string(),
            StatsCoverage::Sampled => format!("sampled {:.0}% of the time", self.measured_share * 100.0),
        };
        if self.device_stages_uncounted {
            text += ", without the sampled device stages' programs (attached at each tick's start, \
                     outside these windows)";
        }
        text
    }

    /// How the target's figure was timed, for every view: "timed by the programs, less 36 ns a
    /// run of the timing's own clock reads", or where that floor was not measured "timed by the
    /// programs, the timing's own clock reads included".
    pub fn timed_text(&self) -> String {
        match self.timing_floor_ns_per_run {
            Some(f) => format!("timed by the programs, less {f:.0} ns a run of the timing's own clock reads"),
            None => "timed by the programs, the timing's own clock reads included".to_string(),
        }
    }

    /// The share of the target's time, or why there is none, for every view: "12.0% of the
    /// target's on-CPU time" or "no share of the target's time: ...".
    pub fn share_text(&self) -> String {
        if let Some(s) = self.share_of_target {
            return format!("{} of the target's on-CPU time", pct(s));
        }
        let why = match self.no_share {
            Some(NoShare::NotTimed) | None => {
                "this recording's programs did not time their runs on the target's threads".to_string()
            }
            Some(NoShare::LittleTargetCpu) => format!(
                "its threads ran {} on a CPU, {} of the interval, under {}",
                duration(self.target_oncpu_ns as f64),
                pct(self.target_oncpu_share),
                pct(MIN_TARGET_ONCPU_SHARE)
            ),
            Some(NoShare::FewPackets) => {
                format!("it sent {} packets, under {MIN_SHARE_PACKETS}", self.packets)
            }
        };
        format!("no share of the target's time ({why})")
    }

    /// The tax on the rest of the machine, for every view: "tax on the rest of the machine:
    /// 1.2 ms of BPF run time in other tasks, 0.1% of a CPU"; None without timing.
    pub fn machine_text(&self) -> Option<String> {
        let ns = self.machine_bpf_ns?;
        Some(format!(
            "tax on the rest of the machine: {} of BPF run time outside the target's threads (other \
             processes' syscalls and switches, packets handled in other tasks' time), {} of a CPU",
            duration(ns),
            pct(self.machine_cpu_share.unwrap_or(0.0))
        ))
    }

    /// The plain sentence every view shows when the probes take more than PROBE_COST_ALERT of
    /// the target's time while it was busy on a CPU; None otherwise.
    pub fn alert_text(&self) -> Option<String> {
        let share = self.share_of_target.filter(|_| self.alert)?;
        let ns = self.target_ns_per_packet?;
        Some(format!(
            "scanprof's probes take {:.1}% of the target's on-CPU time ({ns:.0} ns per packet on its threads, \
             their run time; the kernel's dispatch to them costs more on top): a target that sends as fast as \
             its CPU allows is at least {:.0}% faster without scanprof",
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

    const SECOND: u64 = 1_000_000_000;

    fn oncpu(ns: u64) -> TargetTime {
        TargetTime {
            oncpu_ns: ns,
            waiting_ns: 0,
        }
    }
    const MS: u64 = 1_000_000;

    /// A reading with per program (name, runs, run ns, target runs, target ns).
    fn timed(
        coverage: StatsCoverage,
        measured_ns: u64,
        programs: &[(&str, u64, u64, u64, u64)],
    ) -> BpfRunTime {
        BpfRunTime {
            coverage,
            holder: StatsHolder::Scanprof,
            measured_ns,
            target_timed: true,
            timing_floor: false,
            programs: programs
                .iter()
                .map(|(n, runs, ns, truns, tns)| ProgramRun {
                    name: n.to_string(),
                    runs: *runs,
                    run_time_ns: *ns,
                    target_runs: *truns,
                    target_ns: *tns,
                    timing_floor_ns: 0,
                })
                .collect(),
        }
    }

    /// Every run on the target's threads.
    fn reading(coverage: StatsCoverage, measured_ns: u64, programs: &[(&str, u64, u64)]) -> BpfRunTime {
        let all: Vec<_> = programs.iter().map(|(n, r, ns)| (*n, *r, *ns, *r, *ns)).collect();
        timed(coverage, measured_ns, &all)
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
        let c = ProbeCost::of(&now, Some(&prev), SECOND, 100_000, oncpu(600 * MS)).unwrap();
        assert_eq!(c.coverage, StatsCoverage::Sampled);
        assert!((c.measured_share - 0.1).abs() < 1e-12);
        // 20 ms in the slice -> 200 ms over the tick -> 2,000 ns per packet, a third of the
        // target's 600 ms on CPU.
        assert!((c.bpf_ns - 200_000_000.0).abs() < 1e-3, "{}", c.bpf_ns);
        assert!((c.ns_per_packet.unwrap() - 2000.0).abs() < 1e-9);
        assert!((c.target_ns_per_packet.unwrap() - 2000.0).abs() < 1e-9);
        assert!((c.share_of_target.unwrap() - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(c.machine_bpf_ns, Some(0.0));
        assert!(c.alert);
        assert_eq!(c.coverage_text(), "sampled 10% of the time");
        // With --device-stages sampled, the windowed programs ran in none of these windows.
        let d = c.clone().with_device_stages(true);
        assert!(d.device_stages_uncounted);
        assert_eq!(
            d.coverage_text(),
            "sampled 10% of the time, without the sampled device stages' programs (attached at each \
             tick's start, outside these windows)"
        );
        // Most costly first; per-run figures are not scaled, per-packet ones are.
        assert_eq!(c.programs[0].name, "a.x");
        assert_eq!(c.programs[0].runs, 50_000);
        assert!((c.programs[0].ns_per_run.unwrap() - 200.0).abs() < 1e-9);
        assert!((c.programs[0].ns_per_packet.unwrap() - 1000.0).abs() < 1e-9);
        assert!((c.programs[1].ns_per_run.unwrap() - 500.0).abs() < 1e-9);
        let sum: f64 = c.programs.iter().filter_map(|p| p.ns_per_packet).sum();
        assert!((sum - c.ns_per_packet.unwrap()).abs() < 1e-9);
    }

    /// What the timing counted inside the timed runs (the collector took it off their time) is
    /// the timing's cost, not the target's: the target's figure and its share leave it out,
    /// the timing's figure has it, the sum of the two is the same, and every view says how
    /// much a run was taken off. Without a floor measured, the views say it is left in.
    #[test]
    fn the_timing_floor_goes_to_the_timings_cost_and_the_views_say_how_much() {
        let mut now = timed(
            StatsCoverage::Continuous,
            SECOND,
            // 100,000 runs, all on the target's threads: 10 ms by the kernel, 6.5 ms timed
            // bodies after 3.5 ms (35 ns a run) were taken off as the timing's own
            &[("a.x", 100_000, 10 * MS, 100_000, 6_500_000)],
        );
        now.programs[0].timing_floor_ns = 3_500_000;
        now.timing_floor = true;
        let c = ProbeCost::of(&now, None, SECOND, 100_000, oncpu(500 * MS)).unwrap();
        assert_eq!(c.target_bpf_ns, Some(6_500_000.0));
        assert!((c.target_ns_per_packet.unwrap() - 65.0).abs() < 1e-9);
        assert!((c.share_of_target.unwrap() - 0.013).abs() < 1e-12);
        assert_eq!(c.timing_ns, Some(3_500_000.0));
        assert_eq!(c.machine_bpf_ns, Some(0.0));
        assert_eq!(c.programs[0].timing_floor_ns, 3_500_000);
        assert_eq!(c.timing_floor_ns_per_run, Some(35.0));
        assert_eq!(
            c.timed_text(),
            "timed by the programs, less 35 ns a run of the timing's own clock reads"
        );
        // A kernel where the floor could not be measured: the timed figure has it in, said.
        now.programs[0].timing_floor_ns = 0;
        now.programs[0].target_ns = 10 * MS;
        now.timing_floor = false;
        let c = ProbeCost::of(&now, None, SECOND, 100_000, oncpu(500 * MS)).unwrap();
        assert_eq!(c.target_bpf_ns, Some(10_000_000.0));
        assert_eq!(c.timing_floor_ns_per_run, None);
        assert_eq!(
            c.timed_text(),
            "timed by the programs, the timing's own clock reads included"
        );
    }

    #[test]
    fn a_continuous_run_is_counted_not_scaled_and_below_the_alert_it_stays_quiet() {
        let now = reading(
            StatsCoverage::Continuous,
            3 * SECOND,
            &[("a.x", 300_000, 30_000_000)],
        );
        let c = ProbeCost::of(&now, None, 3 * SECOND, 300_000, oncpu(SECOND)).unwrap();
        assert_eq!(c.coverage, StatsCoverage::Continuous);
        assert_eq!(c.coverage_text(), "counted");
        // Counted statistics have the sampled device stages' programs whenever they ran.
        assert!(!c.clone().with_device_stages(true).device_stages_uncounted);
        assert!((c.ns_per_packet.unwrap() - 100.0).abs() < 1e-9);
        assert!((c.share_of_target.unwrap() - 0.03).abs() < 1e-12);
        assert!(!c.alert);
        assert_eq!(c.alert_text(), None);
    }

    #[test]
    fn nothing_measured_gives_no_figure_and_no_packets_no_per_packet_figure() {
        let r = reading(StatsCoverage::Sampled, 5, &[("a.x", 10, 100)]);
        assert_eq!(ProbeCost::of(&r, Some(&r), SECOND, 10, oncpu(10)), None);
        let c = ProbeCost::of(&r, None, 50, 0, oncpu(0)).unwrap();
        assert_eq!(c.ns_per_packet, None);
        assert_eq!(c.target_ns_per_packet, None);
        assert_eq!(c.share_of_target, None);
        assert!(!c.alert);
    }

    #[test]
    fn the_alert_says_how_much_faster_the_target_would_be() {
        // A full-speed sender: on a CPU 95% of the second, 200,000 packets; 190 ms of the
        // programs' runs on its threads (20%).
        let now = reading(StatsCoverage::Continuous, SECOND, &[("a.x", 600_000, 190 * MS)]);
        let c = ProbeCost::of(&now, None, SECOND, 200_000, oncpu(950 * MS)).unwrap();
        let text = c.alert_text().expect("20% is above the alert");
        assert!(text.contains("20.0% of the target's on-CPU time"), "{text}");
        assert!(text.contains("950 ns per packet on its threads"), "{text}");
        assert!(text.contains("at least 25% faster without scanprof"), "{text}");
    }

    // The ticks of issue 28: machine-wide runs (another process's syscall loop) must never be
    // charged to the target, and a target that is not busy on a CPU never raises the alert.

    /// Programs of a tick in which another process's syscalls ran the syscall exit program
    /// `machine_ms` ms, and the target's own syscalls the entry program `target_ms` ms.
    fn busy_machine(machine_ms: u64, target_ms: u64) -> BpfRunTime {
        timed(
            StatsCoverage::Continuous,
            SECOND,
            &[
                (
                    "send_path.on_sys_enter",
                    10_000,
                    target_ms * MS,
                    10_000,
                    target_ms * MS,
                ),
                ("send_path.on_sys_exit", 5_000_000, machine_ms * MS, 0, 0),
            ],
        )
    }

    #[test]
    fn the_timings_own_cost_is_charged_to_neither_the_target_nor_the_machine() {
        // 1,000 runs, 100 of them the target's with 20 us of timed bodies; the kernel counted
        // 100 us in all: of the 80 us untimed (entries, exits, the clock reads, other runs'
        // early exits), the target's tenth by runs, 8 us, is the timing's; 72 us the machine's.
        let r = timed(
            StatsCoverage::Continuous,
            SECOND,
            &[("a.x", 1000, 100_000, 100, 20_000)],
        );
        let c = ProbeCost::of(&r, None, SECOND, 1000, oncpu(500 * MS)).unwrap();
        assert_eq!(c.programs[0].target_run_time_ns, 20_000);
        assert_eq!(c.programs[0].timing_ns, 8_000);
        assert_eq!(c.target_bpf_ns, Some(20_000.0));
        assert_eq!(c.timing_ns, Some(8_000.0));
        assert_eq!(c.machine_bpf_ns, Some(72_000.0));
    }

    #[test]
    fn a_busy_sender_that_waits_for_a_cpu_on_a_loaded_machine_is_alerted() {
        // On a CPU 14% of the tick, runnable waiting for one 80%: it wants a CPU all the time.
        let c = ProbeCost::of(
            &busy_machine(0, 20),
            None,
            SECOND,
            20_000,
            TargetTime {
                oncpu_ns: 140 * MS,
                waiting_ns: 800 * MS,
            },
        )
        .unwrap();
        assert!((c.target_busy_share - 0.94).abs() < 1e-9);
        assert!(c.alert, "{c:?}");
    }

    #[test]
    fn an_idle_tick_has_no_share_and_no_alert_and_the_machine_tax_is_apart() {
        // The target ran 1 ms and sent nothing; the machine's syscalls ran the programs 650 ms
        // (the old figure: 65,000% of the target's time).
        let c = ProbeCost::of(&busy_machine(650, 0), None, SECOND, 0, oncpu(MS)).unwrap();
        assert_eq!(c.share_of_target, None);
        assert_eq!(c.no_share, Some(NoShare::LittleTargetCpu));
        assert!(!c.alert);
        assert_eq!(c.alert_text(), None);
        assert_eq!(c.target_bpf_ns, Some(0.0));
        assert!((c.machine_bpf_ns.unwrap() - 650e6).abs() < 1.0);
        assert!((c.machine_cpu_share.unwrap() - 0.65).abs() < 1e-9);
        let why = c.share_text();
        assert!(why.starts_with("no share of the target's time (its threads ran 1.000 ms on a CPU, 0.1% of the interval, under 2.0%)"), "{why}");
        let tax = c.machine_text().unwrap();
        assert!(tax.starts_with("tax on the rest of the machine: 650"), "{tax}");
        assert!(tax.ends_with("65.0% of a CPU"), "{tax}");
    }

    #[test]
    fn a_sleeping_sender_is_charged_its_own_runs_only_and_never_alerted() {
        // On a CPU 8.5% of the tick (asleep 91.5%), 2,000 packets; its own runs 2 ms, the
        // machine's 500 ms. Share: 2 / 85 ms. Even at 20 ms of its own (23%), no alert: it
        // absorbs the probes' time in its sleep.
        let c = ProbeCost::of(&busy_machine(500, 2), None, SECOND, 2000, oncpu(85 * MS)).unwrap();
        assert!((c.share_of_target.unwrap() - 2.0 / 85.0).abs() < 1e-9);
        assert!(!c.alert);
        let c = ProbeCost::of(&busy_machine(500, 20), None, SECOND, 2000, oncpu(85 * MS)).unwrap();
        assert!((c.share_of_target.unwrap() - 20.0 / 85.0).abs() < 1e-9);
        assert!(!c.alert, "not busy on a CPU: no alert");
        assert_eq!(c.alert_text(), None);
    }

    #[test]
    fn a_blocked_sender_is_not_alerted_and_too_few_packets_give_no_share() {
        // Blocked in its sends: on a CPU 3% of the tick, 40 packets.
        let c = ProbeCost::of(&busy_machine(300, 3), None, SECOND, 40, oncpu(30 * MS)).unwrap();
        assert_eq!(c.no_share, Some(NoShare::FewPackets));
        assert_eq!(c.share_of_target, None);
        assert!(!c.alert);
        assert_eq!(
            c.share_text(),
            "no share of the target's time (it sent 40 packets, under 100)"
        );
    }

    #[test]
    fn a_paced_sender_gets_its_share_without_an_alert() {
        // Paced: on a CPU 30% of the tick, 50,000 packets, 24 ms of its own runs (8%).
        let c = ProbeCost::of(&busy_machine(100, 24), None, SECOND, 50_000, oncpu(300 * MS)).unwrap();
        assert!((c.share_of_target.unwrap() - 0.08).abs() < 1e-9);
        assert!(!c.alert);
    }

    #[test]
    fn a_full_speed_sender_above_the_threshold_is_alerted_on_its_own_runs() {
        // On a CPU 99% of the tick: 300 ms of its own runs (30.3%), 200 ms machine-wide beside.
        let c = ProbeCost::of(&busy_machine(200, 300), None, SECOND, 250_000, oncpu(990 * MS)).unwrap();
        assert!((c.share_of_target.unwrap() - 300.0 / 990.0).abs() < 1e-9);
        assert!(c.alert);
        assert!((c.target_ns_per_packet.unwrap() - 1200.0).abs() < 1e-9);
        assert!((c.ns_per_packet.unwrap() - 2000.0).abs() < 1e-9);
        assert!(c.alert_text().unwrap().contains("at least 43% faster"));
        // Below the threshold, the same busy sender is quiet.
        let c = ProbeCost::of(&busy_machine(200, 30), None, SECOND, 250_000, oncpu(990 * MS)).unwrap();
        assert!(!c.alert);
    }

    #[test]
    fn readings_without_target_timing_give_no_target_figures() {
        // A bundle written before the programs timed the target's runs.
        let mut r = reading(StatsCoverage::Continuous, SECOND, &[("a.x", 10_000, 500 * MS)]);
        r.target_timed = false;
        let c = ProbeCost::of(&r, None, SECOND, 100_000, oncpu(900 * MS)).unwrap();
        assert_eq!(c.no_share, Some(NoShare::NotTimed));
        assert_eq!(
            (c.share_of_target, c.target_bpf_ns, c.machine_bpf_ns),
            (None, None, None)
        );
        assert!(!c.alert);
        assert_eq!(c.machine_text(), None);
        // Such a bundle's JSON still reads.
        let old = r#"{"coverage":"continuous","holder":"scanprof","measured_ns":5,
            "programs":[{"name":"a.x","runs":1,"run_time_ns":2}]}"#;
        let back: BpfRunTime = serde_json::from_str(old).expect("an old reading reads");
        assert!(!back.target_timed);
        assert_eq!(back.programs[0].target_runs, 0);
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
