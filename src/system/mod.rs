//! Facts about the host gathered without BPF: independent counters (tc, ip) that tests and the
//! lab compare scanprof's figures with, the machine's facts, and the clock every part shares.

pub mod caps;
pub mod child;
pub mod machine;
pub mod netstat;
pub mod privileges;

/// CLOCK_MONOTONIC now, in ns: the clock `bpf_ktime_get_ns()` reads, so the probes' timestamps,
/// the collector's ticks, the pacers and the lab receiver all compare directly.
pub fn monotonic_ns() -> u64 {
    // CLOCK_MONOTONIC always exists on Linux, so the error arm cannot happen.
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map_or(0, |t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
}
