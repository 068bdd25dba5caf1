//! The time-stamp counter for the `tsc` pacer: rdtsc, the classic calibration against a ~100 ms
//! nanosleep, and the frequency the kernel itself uses to turn TSC cycles into ns (read without
//! root from a perf_event mmap page, see [`kernel_tsc_hz`]). [`TscClock`] maps the counter onto
//! the CLOCK_MONOTONIC timeline so the pacer can use it like any other [`Clock`].

use std::time::Duration;

use serde::Serialize;

use super::pacing::Clock;
use crate::system::monotonic_ns;

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
    let (ns0, tsc0) = paired_sample();
    std::thread::sleep(sleep);
    let (ns1, tsc1) = paired_sample();
    let hz = tsc1.saturating_sub(tsc0) as f64 * 1e9 / ns1.saturating_sub(ns0).max(1) as f64;
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
    })
}

/// The first bytes of `struct perf_event_attr` (PERF_ATTR_SIZE_VER0, 64 bytes): all the
/// kernel needs for a software event.
#[repr(C)]
#[derive(Default)]
struct PerfEventAttr {
    kind: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    /// disabled, inherit, pinned, exclusive, exclude_user, exclude_kernel, exclude_hv, ...
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    config1: u64,
}

const PERF_TYPE_SOFTWARE: u32 = 1;
const PERF_COUNT_SW_DUMMY: u64 = 9;
const EXCLUDE_KERNEL: u64 = 1 << 5;
const EXCLUDE_HV: u64 = 1 << 6;
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 8;
/// Offsets in `struct perf_event_mmap_page` (include/uapi/linux/perf_event.h).
const PAGE_LOCK: usize = 8;
const PAGE_CAPABILITIES: usize = 40;
const PAGE_TIME_SHIFT: usize = 50;
const PAGE_TIME_MULT: usize = 52;
/// `cap_user_time`: time_mult and time_shift convert TSC cycles to ns.
const CAP_USER_TIME: u64 = 1 << 3;

/// The TSC frequency the kernel converts cycles with, in Hz, if it can be read without root:
///
/// 1. perf_event_open(2) of a software event on this thread (allowed at perf_event_paranoid <= 2
///    with exclude_kernel), mmap of its first page: when `cap_user_time` is set, the kernel
///    publishes `ns = cycles * time_mult >> time_shift`, so Hz = 1e9 * 2^time_shift / time_mult.
///    x86 sets it only when sched_clock is the native TSC one: not in KVM guests (kvm-clock).
/// 2. /sys/devices/system/cpu/cpu0/tsc_freq_khz, where a kernel provides it.
/// 3. /proc/cpuinfo's "cpu MHz" when it is the kernel's `cpu_khz` (1 kHz resolution): x86 prints
///    cpu_khz there when it has neither APERF/MPERF nor cpufreq to show a live frequency, and with
///    `tsc_known_freq` or `constant_tsc` that is the TSC frequency the kernel uses (typical of VMs).
pub fn kernel_tsc_hz() -> Option<f64> {
    perf_page_tsc_hz()
        .or_else(|| {
            let khz = std::fs::read_to_string("/sys/devices/system/cpu/cpu0/tsc_freq_khz").ok()?;
            Some(khz.trim().parse::<f64>().ok()? * 1e3)
        })
        .or_else(cpuinfo_tsc_hz)
}

fn cpuinfo_tsc_hz() -> Option<f64> {
    if std::path::Path::new("/sys/devices/system/cpu/cpu0/cpufreq").exists() {
        return None;
    }
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    let field = |name: &str| {
        info.lines()
            .find(|l| l.split(':').next().is_some_and(|k| k.trim() == name))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
    };
    let flags = field("flags")?;
    let flags: Vec<&str> = flags.split_whitespace().collect();
    let fixed_tsc = flags.contains(&"tsc_known_freq") || flags.contains(&"constant_tsc");
    if !fixed_tsc || flags.contains(&"aperfmperf") {
        return None;
    }
    Some(field("cpu MHz")?.parse::<f64>().ok()? * 1e6)
}

/// The TSC frequency the kernel publishes in a perf mmap page for user-space time conversion
/// (needs `cap_user_time`: set only when sched_clock is the TSC, not in KVM guests).
pub fn perf_page_tsc_hz() -> Option<f64> {
    let attr = PerfEventAttr {
        kind: PERF_TYPE_SOFTWARE,
        size: std::mem::size_of::<PerfEventAttr>() as u32,
        config: PERF_COUNT_SW_DUMMY,
        flags: EXCLUDE_KERNEL | EXCLUDE_HV,
        ..PerfEventAttr::default()
    };
    // SAFETY: attr is a valid perf_event_attr of the size it claims; pid 0 (this thread),
    // cpu -1 (any), no group. The returned fd is closed below.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            &attr as *const PerfEventAttr,
            0,
            -1,
            -1,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    if fd < 0 {
        return None;
    }
    let fd = fd as libc::c_int;
    // SAFETY: sysconf has no memory effects.
    let page_size = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).ok()?;
    // SAFETY: maps the event's first (metadata) page read-only; unmapped below.
    let page = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            page_size,
            libc::PROT_READ,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    let hz = if page == libc::MAP_FAILED {
        None
    } else {
        let base = page.cast::<u8>();
        // SAFETY: the offsets are inside the mapped page and aligned for their types; the
        // kernel updates the page concurrently, so every read is volatile and the seqlock
        // (`lock`) is checked around them.
        let read = |off: usize| unsafe { std::ptr::read_volatile(base.add(off).cast::<u32>()) };
        let mut result = None;
        for _ in 0..100 {
            let seq = read(PAGE_LOCK);
            std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
            let caps = u64::from(read(PAGE_CAPABILITIES));
            let shift = read(PAGE_TIME_SHIFT - 2) >> 16; // u16 at offset 50
            let mult = read(PAGE_TIME_MULT);
            std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
            if read(PAGE_LOCK) == seq {
                if caps & CAP_USER_TIME != 0 {
                    result = crate::system::machine::tsc_hz_from_perf_page(mult, shift as u16);
                }
                break;
            }
        }
        // SAFETY: page was mapped above with this size and is not used afterwards.
        unsafe { libc::munmap(page, page_size) };
        result
    };
    // SAFETY: fd was opened above and is closed once.
    unsafe { libc::close(fd) };
    hz
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
