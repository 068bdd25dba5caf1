//! The TSC frequency the kernel itself converts cycles with, read without root: a host fact
//! that the machine facts (`machine.rs`) report and the reference sender's `tsc` pacer
//! (`senders::tsc`) uses. Kept here, below both, so that neither imports the other.

use super::perf_counter::{PerfEventAttr, PERF_FLAG_FD_CLOEXEC};

const PERF_TYPE_SOFTWARE: u32 = 1;
const PERF_COUNT_SW_DUMMY: u64 = 9;
const EXCLUDE_KERNEL: u64 = 1 << 5;
const EXCLUDE_HV: u64 = 1 << 6;
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
                    result = tsc_hz_from_perf_page(mult, shift as u16);
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

/// TSC Hz from a perf mmap page's conversion: ns = cycles * time_mult >> time_shift, so
/// Hz = 1e9 * 2^time_shift / time_mult. None if `time_mult` is 0.
pub fn tsc_hz_from_perf_page(time_mult: u32, time_shift: u16) -> Option<f64> {
    (time_mult > 0 && time_shift < 64).then(|| 1e9 * (1u128 << time_shift) as f64 / time_mult as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perf_page_conversion_gives_hz() {
        // 2445.428 MHz: the kernel's cyc2ns for it has shift 31 and mult round(2^31 * 1e9 / f).
        let f = 2_445_428_000.0;
        let mult = ((1u64 << 31) as f64 * 1e9 / f).round() as u32;
        let hz = tsc_hz_from_perf_page(mult, 31).unwrap_or_default();
        assert!((hz - f).abs() / f < 1e-6, "{hz}");
        assert_eq!(tsc_hz_from_perf_page(0, 31), None);
        assert_eq!(tsc_hz_from_perf_page(1, 64), None);
    }
}
