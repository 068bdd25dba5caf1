//! scanprof's own BPF programs' run time, as the kernel's run-time statistics count it, summed
//! into cumulative counters for the `CounterSample`: per program, over the windows in which the
//! statistics were on, with the time those windows covered. The analysis scales them to the
//! interval and divides by the target's packets and time; nothing here divides. Beside the
//! kernel's figures, each program's runs on the family's threads and their time, as the programs
//! timed them over the same windows (`ProgramRun::target_runs`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::probes::{BpfStats, ProbeSet, ProgramRuntime};

/// How much of the run the statistics covered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StatsCoverage {
    /// on the whole time: figures are counted
    Continuous,
    /// on for a slice of each tick only: figures are scaled up from the slices
    Sampled,
}

/// Who kept the kernel's statistics on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StatsHolder {
    /// scanprof, through BPF_ENABLE_STATS, and only while it measures
    Scanprof,
    /// the machine's sysctl `kernel.bpf_stats_enabled = 1`, set by someone else (scanprof reads
    /// continuously then: the cost is paid anyway, and it never turns off what it did not turn on)
    Sysctl,
}

/// When scanprof turns statistics on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatsPolicy {
    /// never: no BPF run-time figures
    Off,
    /// for the last 1/`divisor` of each tick
    Sampled { divisor: u32 },
    /// the whole run
    Continuous,
}

impl StatsPolicy {
    /// Statistics on for the last tenth of each tick. Measured here (docs/benchmarks.md): with
    /// them on all the time, a full-speed sender under scanprof spent 8-9% more CPU per packet
    /// (+690 to +775 ns) and kept 0.86-0.88 of its rate.
    pub const DEFAULT: StatsPolicy = StatsPolicy::Sampled { divisor: 10 };
}

/// One program's runs and run time, cumulative over the measured windows.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProgramRun {
    /// object.program, e.g. `send_path.on_dev_queue`
    pub name: String,
    /// runs counted while statistics were on
    pub runs: u64,
    /// time the program ran while statistics were on, ns
    pub run_time_ns: u64,
    /// of those runs, the ones on a family thread (the task on the CPU was one of the
    /// target's), as the program counted them; 0 in bundles written before they were counted
    #[serde(default)]
    pub target_runs: u64,
    /// their time as the program timed it, less the timing's own floor (`timing_floor_ns`), ns
    #[serde(default)]
    pub target_ns: u64,
    /// what the timing itself counted in those runs, taken off `target_ns`: each window's target
    /// runs times the floor measured as it closed (`BpfStats::timing_floor_ns`), ns; 0 in bundles
    /// written before it was (their `target_ns` has it in)
    #[serde(default)]
    pub timing_floor_ns: u64,
}

/// scanprof's BPF run time so far, cumulative since attach.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BpfRunTime {
    pub coverage: StatsCoverage,
    pub holder: StatsHolder,
    /// wall time the statistics were on and measured (summed over the windows), ns
    pub measured_ns: u64,
    /// whether the programs timed their runs on the family's threads in those windows
    /// (`ProgramRun::target_runs`); false in bundles written before they did
    #[serde(default)]
    pub target_timed: bool,
    /// whether every window's timed runs had the timing's own floor taken off
    /// (`ProgramRun::timing_floor_ns`); false where it could not be measured (a kernel that
    /// cannot test-run the floor's program) and in bundles written before it was
    #[serde(default)]
    pub timing_floor: bool,
    /// per program, sorted by name
    pub programs: Vec<ProgramRun>,
}

/// Opens and closes the measurement windows and keeps their sums.
#[derive(Debug)]
pub struct BpfMeter {
    policy: StatsPolicy,
    /// the window open now, if any
    window: Option<Window>,
    /// per program: runs, run time ns, target runs, target ns less the floor, the floor's ns
    totals: BTreeMap<String, [u64; 5]>,
    /// whether every window closed so far had the timing's floor measured
    floor_every_window: bool,
    measured_ns: u64,
    holder: StatsHolder,
    /// whether any window was sampled rather than continuous
    sampled: bool,
    /// why statistics could not be turned on (then they are not tried again)
    pub error: Option<String>,
}

impl BpfMeter {
    pub fn new(policy: StatsPolicy) -> BpfMeter {
        BpfMeter {
            policy,
            window: None,
            totals: BTreeMap::new(),
            measured_ns: 0,
            holder: StatsHolder::Scanprof,
            sampled: false,
            error: None,
            floor_every_window: true,
        }
    }

    fn continuous(&self) -> bool {
        self.holder == StatsHolder::Sysctl || self.policy == StatsPolicy::Continuous
    }

    /// When the window of the tick that ends at `tick_end_ns` (of length `interval_ns`) opens,
    /// while none is open; None when no window is due (off, continuous, or open already: while
    /// the sysctl holds statistics on, the window stays open from sample to sample).
    pub fn opens_at(&self, tick_end_ns: u64, interval_ns: u64) -> Option<u64> {
        match self.policy {
            StatsPolicy::Sampled { divisor } if self.window.is_none() => {
                Some(tick_end_ns.saturating_sub(interval_ns / divisor.max(1) as u64))
            }
            _ => None,
        }
    }

    /// Opens a window at `now_ns`: statistics on (unless the sysctl holds them), counters read.
    pub fn open(&mut self, stats: &mut BpfStats, now_ns: u64) {
        if self.policy == StatsPolicy::Off || self.window.is_some() {
            return;
        }
        self.holder = if BpfStats::machine_wide() {
            StatsHolder::Sysctl
        } else {
            StatsHolder::Scanprof
        };
        if self.holder == StatsHolder::Scanprof {
            if let Err(e) = stats.turn_on() {
                // Said once (a run warning); not tried again every tick.
                self.error = Some(e.to_string());
                self.policy = StatsPolicy::Off;
                return;
            }
        }
        stats.time_target(true);
        self.window = Some(Window {
            opened_ns: now_ns,
            before: stats.read(),
        });
    }

    /// Closes the open window at `now_ns` and adds what it counted; statistics go off again
    /// when sampling (never when the sysctl holds them).
    fn close(&mut self, stats: &mut BpfStats, now_ns: u64) {
        let Some(Window {
            opened_ns: opened,
            before,
        }) = self.window.take()
        else {
            return;
        };
        let after = stats.read();
        if !self.continuous() {
            stats.time_target(false);
            stats.turn_off();
            self.sampled = true;
        }
        // The window ends once its counters are read, not at the tick's `now_ns`, which the
        // collector read before a tick's work: on a loaded machine that work took long enough
        // that the kernel counted 3.4x the window's length, and the probes' share of the
        // target's time read 339% (a sampled window scaled up by interval / window).
        let now_ns = now_ns.max(crate::system::monotonic_ns());
        self.measured_ns += now_ns.saturating_sub(opened);
        // What the timing counted of itself in each timed run, measured now that the window's
        // counters are read (its 31 test runs in no window's time)
        let floor_ns = stats.timing_floor_ns();
        self.floor_every_window &= floor_ns.is_some();
        add_window(&mut self.totals, &before, after, floor_ns.unwrap_or(0));
    }

    /// The counters as of a sample at `now_ns`: closes the open window (opening the next at once
    /// when measuring continuously). None when statistics were never on.
    pub fn sample(&mut self, probes: &mut ProbeSet, now_ns: u64) -> Option<BpfRunTime> {
        self.close(probes.bpf_stats(), now_ns);
        if self.policy == StatsPolicy::Continuous || BpfStats::machine_wide() {
            self.open(probes.bpf_stats(), now_ns);
        }
        if self.measured_ns == 0 && self.totals.is_empty() {
            return None;
        }
        Some(BpfRunTime {
            coverage: if self.sampled {
                StatsCoverage::Sampled
            } else {
                StatsCoverage::Continuous
            },
            holder: self.holder,
            measured_ns: self.measured_ns,
            target_timed: true,
            timing_floor: self.floor_every_window,
            programs: self
                .totals
                .iter()
                .map(
                    |(name, [runs, ns, target_runs, target_ns, floor_ns])| ProgramRun {
                        name: name.clone(),
                        runs: *runs,
                        run_time_ns: *ns,
                        target_runs: *target_runs,
                        target_ns: *target_ns,
                        timing_floor_ns: *floor_ns,
                    },
                )
                .collect(),
        })
    }
}

/// A measurement window while it is open.
#[derive(Debug)]
struct Window {
    /// CLOCK_MONOTONIC ns it opened
    opened_ns: u64,
    /// every program's counters then
    before: Vec<ProgramRuntime>,
}

/// Adds what one window counted, `after` less `before` per program, to `totals` (runs, run time,
/// target runs, target ns, floor ns). Of the target runs' timed ns, `floor_ns` a run is the
/// timing's own and goes to the fifth total: what the target pays is the rest.
fn add_window(
    totals: &mut BTreeMap<String, [u64; 5]>,
    before: &[ProgramRuntime],
    after: Vec<ProgramRuntime>,
    floor_ns: u64,
) {
    for a in after {
        let b = before
            .iter()
            .find(|b| b.name == a.name)
            .map_or([0; 4], |b| [b.run_cnt, b.run_time_ns, b.target_runs, b.target_ns]);
        let now = [a.run_cnt, a.run_time_ns, a.target_runs, a.target_ns];
        let [runs, run_ns, target_runs, target_ns] = [0, 1, 2, 3].map(|i| now[i].saturating_sub(b[i]));
        let floor = target_runs.saturating_mul(floor_ns).min(target_ns);
        let e = totals.entry(a.name).or_default();
        for (sum, n) in e
            .iter_mut()
            .zip([runs, run_ns, target_runs, target_ns - floor, floor])
        {
            *sum += n;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counters(name: &str, [run_cnt, run_time_ns, target_runs, target_ns]: [u64; 4]) -> ProgramRuntime {
        ProgramRuntime {
            name: name.into(),
            run_cnt,
            run_time_ns,
            target_runs,
            target_ns,
        }
    }

    /// A window adds what each program counted in it; of its target runs' timed ns, the floor
    /// measured as it closed (times those runs) goes to the timing's own total, never more than
    /// they timed, and a window without a floor takes nothing off.
    #[test]
    fn a_window_takes_the_timing_floor_off_its_target_runs_only() {
        let mut totals = BTreeMap::new();
        let before = vec![
            counters("a.x", [10, 1_000, 5, 400]),
            counters("b.y", [0, 0, 0, 0]),
        ];
        let after = vec![
            counters("a.x", [110, 11_000, 105, 8_400]),
            counters("b.y", [50, 2_000, 2, 60]),
            counters("c.z", [7, 700, 0, 0]),
        ];
        add_window(&mut totals, &before, after, 35);
        // a.x: 100 target runs timed 8,000 ns: 3,500 are the timing's
        assert_eq!(totals["a.x"], [100, 10_000, 100, 4_500, 3_500]);
        // b.y: 2 runs timed 60 ns, under 2 x 35: all of it the timing's, never below zero
        assert_eq!(totals["b.y"], [50, 2_000, 2, 0, 60]);
        // c.z: no target runs, nothing taken off (a program first seen in the window)
        assert_eq!(totals["c.z"], [7, 700, 0, 0, 0]);
        // a second window, no floor measured: added as counted
        let next = vec![counters("a.x", [210, 21_000, 205, 16_400])];
        add_window(
            &mut totals,
            &[counters("a.x", [110, 11_000, 105, 8_400])],
            next,
            0,
        );
        assert_eq!(totals["a.x"], [200, 20_000, 200, 12_500, 3_500]);
    }
}
