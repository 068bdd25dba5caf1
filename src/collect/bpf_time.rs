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
    /// their time as the program timed it, ns
    #[serde(default)]
    pub target_ns: u64,
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
    /// per program, sorted by name
    pub programs: Vec<ProgramRun>,
}

/// Opens and closes the measurement windows and keeps their sums.
#[derive(Debug)]
pub struct BpfMeter {
    policy: StatsPolicy,
    /// (CLOCK_MONOTONIC ns it opened, the counters then)
    window: Option<(u64, Vec<ProgramRuntime>)>,
    /// per program: runs, run time ns, target runs, target ns
    totals: BTreeMap<String, [u64; 4]>,
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
        self.window = Some((now_ns, stats.read()));
    }

    /// Closes the open window at `now_ns` and adds what it counted; statistics go off again
    /// when sampling (never when the sysctl holds them).
    fn close(&mut self, stats: &mut BpfStats, now_ns: u64) {
        let Some((opened, before)) = self.window.take() else {
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
        for a in after {
            let b = before
                .iter()
                .find(|b| b.name == a.name)
                .map_or([0; 4], |b| [b.run_cnt, b.run_time_ns, b.target_runs, b.target_ns]);
            let now = [a.run_cnt, a.run_time_ns, a.target_runs, a.target_ns];
            let e = self.totals.entry(a.name).or_default();
            for (sum, (n, b)) in e.iter_mut().zip(now.into_iter().zip(b)) {
                *sum += n.saturating_sub(b);
            }
        }
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
            programs: self
                .totals
                .iter()
                .map(|(name, [runs, ns, target_runs, target_ns])| ProgramRun {
                    name: name.clone(),
                    runs: *runs,
                    run_time_ns: *ns,
                    target_runs: *target_runs,
                    target_ns: *target_ns,
                })
                .collect(),
        })
    }
}
