//! The time-stamp counter for the `tsc` pacer: rdtsc, the classic calibration against a ~100 ms
//! nanosleep, and the frequency the kernel itself uses to turn TSC cycles into ns (a host fact,
//! read by [`crate::system::tsc_freq::kernel_tsc_hz`]). [`TscClock`] maps the counter onto
//! the CLOCK_MONOTONIC timeline so the pacer can use it like any other [`Clock`].

use std::time::Duration;

use serde::Serialize;

use super::pacing::Clock;
use crate::system::monotonic_ns;
use crate::system::tsc_freq::kernel_tsc_hz;

/// How long the classic calibration sleeps between its two (CLOCK_MONOTONIC, TSC) samples.
pub const CALIBRATION_SLEEP: Duration = Duration::from_millis(100);

/// Where the `tsc` pacer's frequency comes from (`--tsc-source`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum TscSource {
    /// rdtsc across a ~100 ms nanosleep, like the classic harness.
    Calibrate = 0,
    /// The kernel's own TSC frequency (the calibration still runs, to show its error).
    Kernel = 1,
}

impl TscSource {
    pub fn name(self) -> &'static str {
        match self {
            TscSource::Calibrate => "calibrate",
            TscSource::Kernel => "kernel",
        }
    }
}

/// The TSC frequency a run used and how it was found (`calibration` in the JSON report).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Calibration {
    /// "calibrate" or "kernel": which of the two frequencies the pacer used
    pub source: String,
    /// TSC cycles per second the pacer used
    pub tsc_hz: f64,
    /// the kernel's TSC cycles per second (None if it could not be read)
    pub kernel_tsc_hz: Option<f64>,
    /// (calibrated - kernel) / kernel, in parts per million (None if the kernel's is unknown)
    pub error_ppm: Option<f64>,
    /// ns the calibration took
    pub took_ns: u64,
    /// how much longer than asked each slot was on CLOCK_MONOTONIC because of the frequency the
    /// pacer used: (tsc_hz / the TSC's rate against CLOCK_MONOTONIC over the run - 1), in parts
    /// per million (None until the run ends, or when it lasted under a millisecond). A deadline
    /// pacer's rate falls short of the request by this much however well it keeps its schedule
    pub slot_error_ppm: Option<f64>,
}

impl Calibration {
    /// CLOCK_MONOTONIC ns per ns of the pacer's TSC clock over the run (1 until measured).
    pub fn monotonic_ns_per_pacer_ns(&self) -> f64 {
        1.0 + self.slot_error_ppm.unwrap_or(0.0) * 1e-6
    }

    /// Sets [`Calibration::slot_error_ppm`] from the TSC's rate against CLOCK_MONOTONIC over the
    /// run that began at `run_start`.
    pub fn measure_run(&mut self, run_start: &TscMark) {
        self.slot_error_ppm = run_start
            .hz_since()
            .map(|run_hz| (self.tsc_hz / run_hz - 1.0) * 1e6);
    }
}

/// A paired (CLOCK_MONOTONIC, TSC) reading: the TSC's rate against CLOCK_MONOTONIC from it to a
/// later one is what a TSC-paced second really lasted.
#[derive(Debug, Clone, Copy)]
pub struct TscMark {
    ns: u64,
    tsc: u64,
}

impl TscMark {
    pub fn now() -> TscMark {
        let (ns, tsc) = paired_sample();
        TscMark { ns, tsc }
    }

    /// TSC cycles per CLOCK_MONOTONIC second from this mark to now; None under a millisecond,
    /// where the two reads' own spread (tens of ns) would be more than a part in 10^5.
    pub fn hz_since(&self) -> Option<f64> {
        let now = TscMark::now();
        (now.ns.saturating_sub(self.ns) >= 1_000_000).then(|| self.hz_to(&now))
    }

    /// TSC cycles per CLOCK_MONOTONIC second from this mark to `later`.
    fn hz_to(&self, later: &TscMark) -> f64 {
        later.tsc.saturating_sub(self.tsc) as f64 * 1e9 / later.ns.saturating_sub(self.ns).max(1) as f64
    }
}

/// Whether this machine has a TSC the pacer can use (x86-64 only).
pub fn available() -> bool {
    cfg!(target_arch = "x86_64")
}

/// The time-stamp counter (0 where there is none).
#[inline(always)]
pub fn rdtsc() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: rdtsc has no memory effects; every x86-64 CPU has it.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        0
    }
}

/// One (CLOCK_MONOTONIC ns, TSC) pair: the TSC read midway through the clock read, taking the
/// tightest of a few tries so a preemption between the reads does not skew it.
fn paired_sample() -> (u64, u64) {
    let mut best = (u64::MAX, 0, 0);
    for _ in 0..7 {
        let before = rdtsc();
        let ns = monotonic_ns();
        let after = rdtsc();
        let window = after.saturating_sub(before);
        if window < best.0 {
            best = (window, ns, before + window / 2);
        }
    }
    (best.1, best.2)
}

/// The classic calibration: TSC cycles across a `sleep` nanosleep divided by the
/// CLOCK_MONOTONIC ns it took. Returns (cycles per second, ns the calibration took).
pub fn calibrate(sleep: Duration) -> (f64, u64) {
    let started = monotonic_ns();
    let mark = TscMark::now();
    std::thread::sleep(sleep);
    let hz = mark.hz_to(&TscMark::now());
    (hz, monotonic_ns().saturating_sub(started))
}

/// Calibrates and reads the kernel's frequency; the pacer uses the one `source` names.
/// `skew` is fault injection (`scanprof send --calibration-skew`): the calibration's result is
/// taken as `skew` times what it measured (1.0: as measured), so that with `source` `Calibrate`
/// the pacer's slots come out `skew` times too long, and `error_ppm` shows the error.
/// Fails if `source` is `Kernel` and the kernel's frequency is unknown, or there is no TSC.
pub fn calibration(source: TscSource, skew: f64) -> anyhow::Result<Calibration> {
    anyhow::ensure!(
        available(),
        "the tsc pacer needs an x86-64 TSC: use --pacer clock"
    );
    let (measured, took_ns) = calibrate(CALIBRATION_SLEEP);
    let calibrated = measured * skew;
    let kernel = kernel_tsc_hz();
    let tsc_hz = match (source, kernel) {
        (TscSource::Calibrate, _) => calibrated,
        (TscSource::Kernel, Some(hz)) => hz,
        (TscSource::Kernel, None) => anyhow::bail!(
            "the kernel's TSC frequency is unknown here (no perf_event time fields, no tsc_freq_khz, \
             no fixed cpu MHz in /proc/cpuinfo): use --tsc-source calibrate"
        ),
    };
    Ok(Calibration {
        source: source.name().to_string(),
        tsc_hz,
        kernel_tsc_hz: kernel,
        error_ppm: kernel.map(|k| (calibrated - k) / k * 1e6),
        took_ns,
        slot_error_ppm: None,
    })
}

/// The TSC mapped onto CLOCK_MONOTONIC: ns = base_ns + (rdtsc - base_tsc) / hz. Any error in
/// the frequency makes the pacer's notion of a second off by that much, which the report's
/// accuracy (measured on CLOCK_MONOTONIC) shows.
#[derive(Debug, Clone, Copy)]
pub struct TscClock {
    base_ns: u64,
    base_tsc: u64,
    ns_per_cycle: f64,
}

impl TscClock {
    /// A clock anchored now, ticking at `tsc_hz`.
    pub fn new(tsc_hz: f64) -> TscClock {
        let (base_ns, base_tsc) = paired_sample();
        TscClock {
            base_ns,
            base_tsc,
            ns_per_cycle: 1e9 / tsc_hz,
        }
    }
}

impl Clock for TscClock {
    #[inline(always)]
    fn now_ns(&mut self) -> u64 {
        self.base_ns + (rdtsc().saturating_sub(self.base_tsc) as f64 * self.ns_per_cycle) as u64
    }

    fn sleep_until(&mut self, deadline_ns: u64) {
        let left = deadline_ns.saturating_sub(self.now_ns());
        std::thread::sleep(Duration::from_nanos(left));
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    #[test]
    fn calibration_agrees_with_the_kernel_when_it_is_known() {
        let (hz, took_ns) = calibrate(Duration::from_millis(20));
        assert!(hz > 1e8 && hz < 1e10, "{hz}");
        assert!(took_ns >= 20_000_000, "{took_ns}");
        if let Some(kernel) = kernel_tsc_hz() {
            // 20 ms on a busy shared machine: within 0.5%.
            assert!(
                ((hz - kernel) / kernel).abs() < 5e-3,
                "calibrated {hz} vs kernel {kernel}"
            );
        }
    }

    #[test]
    fn the_tsc_clock_follows_clock_monotonic() {
        let (hz, _) = calibrate(Duration::from_millis(20));
        let mut clock = TscClock::new(hz);
        std::thread::sleep(Duration::from_millis(20));
        let (tsc_ns, mono_ns) = (clock.now_ns(), monotonic_ns());
        assert!(tsc_ns.abs_diff(mono_ns) < 500_000, "tsc {tsc_ns} mono {mono_ns}");
    }
}
