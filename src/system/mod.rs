//! Facts about the host gathered without BPF: independent counters (tc, ip) that tests and the
//! lab compare scanprof's figures with, the machine's facts, and the clock every part shares.

pub mod caps;
pub mod child;
pub mod machine;
pub mod netstat;
pub mod privileges;
pub mod watchdog;

/// CLOCK_MONOTONIC now, in ns: the clock `bpf_ktime_get_ns()` reads, so the probes' timestamps,
/// the collector's ticks, the pacers and the lab receiver all compare directly.
pub fn monotonic_ns() -> u64 {
    // CLOCK_MONOTONIC always exists on Linux, so the error arm cannot happen.
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map_or(0, |t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
}

/// CLOCK_REALTIME minus CLOCK_MONOTONIC now, in ns: adds to a probe's timestamp to give wall
/// time (e.g. for a pcapng, whose readers show dates).
pub fn realtime_offset_ns() -> i128 {
    let real = nix::time::clock_gettime(nix::time::ClockId::CLOCK_REALTIME)
        .map_or(0, |t| t.tv_sec() as i128 * 1_000_000_000 + t.tv_nsec() as i128);
    real - monotonic_ns() as i128
}

pub mod startup {
    //! Start-up timing under `SCANPROF_DEBUG`: one stderr line per phase of attaching
    //! (`scanprof: timing: probes loaded at +84.1 ms (+52.3)`), counted from `begin()` (called
    //! first thing in main), so the time from start to probes active can be read off a run.

    use std::sync::atomic::{AtomicU64, Ordering};

    static BEGIN_NS: AtomicU64 = AtomicU64::new(0);
    static LAST_NS: AtomicU64 = AtomicU64::new(0);

    /// Marks the start of the process (main's first line).
    pub fn begin() {
        let now = super::monotonic_ns();
        BEGIN_NS.store(now, Ordering::Relaxed);
        LAST_NS.store(now, Ordering::Relaxed);
    }

    /// Prints how long after `begin()` the phase `what` ended, and how long it took since the
    /// previous mark, when SCANPROF_DEBUG is set.
    pub fn mark(what: &str) {
        if std::env::var_os("SCANPROF_DEBUG").is_none() {
            return;
        }
        let now = super::monotonic_ns();
        let begin = BEGIN_NS.load(Ordering::Relaxed);
        let last = LAST_NS.swap(now, Ordering::Relaxed);
        if begin == 0 {
            return;
        }
        eprintln!(
            "scanprof: timing: {what} at +{:.1} ms (+{:.1})",
            now.saturating_sub(begin) as f64 / 1e6,
            now.saturating_sub(last) as f64 / 1e6
        );
    }
}
