//! After setup, `attach`, `run` and `record` give up every capability the rest of the run does
//! not need: the probes are loaded, the command is launched (it keeps what the user gave it),
//! and what remains is attaching uprobes to family members that appear later, reading their
//! /proc files, naming kernel addresses, and writing the bundle. Capabilities are per thread on
//! Linux, so every thread of scanprof that exists then drops them itself.

use crate::system::caps::{self, Cap};

/// What the rest of a run needs:
/// CAP_BPF and CAP_PERFMON attach uprobes to members that appear later; CAP_SYS_PTRACE and
/// CAP_DAC_READ_SEARCH read their /proc/PID/{exe,maps,root} (any owner); CAP_SYSLOG reads real
/// addresses from /proc/kallsyms to name drop locations (perf_event_paranoid > 1).
pub const KEPT: [Cap; 5] = [
    caps::CAP_BPF,
    caps::CAP_PERFMON,
    caps::CAP_SYS_PTRACE,
    caps::CAP_DAC_READ_SEARCH,
    caps::CAP_SYSLOG,
];

/// Kept as well by the collection thread when the scanner's profile has uprobes: attaching a
/// uprobe to one process (perf_event_open with its pid, as a member appears or execs) fails
/// with EACCES on kernel 6.18 without it, CAP_BPF + CAP_PERFMON + CAP_SYS_PTRACE
/// notwithstanding (measured: tests/scanner_profiles.rs's hand-over test).
pub const FOR_UPROBES: Cap = caps::CAP_SYS_ADMIN;

/// Kept as well by the collection thread while it samples the kernel's BPF run-time statistics
/// (collect::bpf_time): turning them on for each tick's slice is BPF_ENABLE_STATS, which needs
/// CAP_SYS_ADMIN. Keeping them on the whole run instead would need it only once, but costs a
/// full-speed sender about 8-14% of its rate here (docs/benchmarks.md).
pub const FOR_BPF_STATS: Cap = caps::CAP_SYS_ADMIN;

/// Kept as well by the collection thread when the launched command runs as another user
/// (`--user`): ending it (SIGTERM at the end of a run) and its parent-death SIGKILL when scanprof
/// is killed are signals to another user's process, which the kernel refuses without it.
pub const FOR_USER_COMMAND: Cap = caps::CAP_KILL;

/// Kept as well by the thread that writes a bundle into a directory it does not own (or the
/// live view's `e` key, which makes its directory in the current one).
pub const FOR_BUNDLE: Cap = caps::CAP_DAC_OVERRIDE;

/// Kept as well by `lab`'s main and collection threads: after the run the lab reads the
/// counters of its namespaces (`ip netns exec`: setns and a private /sys mount, CAP_SYS_ADMIN)
/// and deletes its veths and namespaces (CAP_NET_ADMIN, and CAP_SYS_ADMIN to unmount them).
pub const FOR_LAB: [Cap; 2] = [caps::CAP_SYS_ADMIN, caps::CAP_NET_ADMIN];
/// `lab`'s main and collection threads in a scenario with a cgroup of its own
/// (cgroup-throttled) keep CAP_DAC_OVERRIDE as well: removing the cgroup after the run is an
/// rmdir in a cgroupfs directory of mode 0555.
pub const FOR_LAB_CGROUP: [Cap; 3] = [caps::CAP_SYS_ADMIN, caps::CAP_NET_ADMIN, caps::CAP_DAC_OVERRIDE];

/// The mask of `set`.
pub fn mask(set: &[Cap]) -> u64 {
    set.iter().fold(0, |m, c| m | 1u64 << c.0)
}

/// What the calling thread holds after [`drop_to`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dropped {
    pub effective: u64,
    pub bounding_dropped: bool,
}

/// Reduces the calling thread to `keep` (at most what it has): sets no_new_privs, clears the
/// ambient set, drops every other capability from the bounding set (when it holds
/// CAP_SETPCAP to do so), and sets the permitted and effective sets to `keep`, the inheritable
/// set to nothing. Threads and processes it starts afterwards inherit this.
pub fn drop_to(keep: &[Cap]) -> std::io::Result<Dropped> {
    let keep = mask(keep);
    let last_cap: u32 = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(40);
    // SAFETY: prctl with integer arguments only; no memory is passed.
    unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // Fails with EINVAL on kernels without ambient capabilities: nothing to clear then.
        let _ = libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
    }
    let can_drop_bounding = caps::effective() & (1u64 << caps::CAP_SETPCAP.0) != 0;
    if can_drop_bounding {
        for cap in (0..=last_cap.min(63)).filter(|c| keep & (1u64 << c) == 0) {
            // SAFETY: prctl with integer arguments only.
            if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) } != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
    }
    set_capabilities(keep & caps::effective())?;
    Ok(Dropped {
        effective: caps::thread_effective(),
        bounding_dropped: can_drop_bounding,
    })
}

/// Gives up every capability and sets no_new_privs, in a child between fork and its end:
/// system calls only, no allocation or lock (the parent's other threads are absent from the
/// child). The bounding set stays (reducing it needs /proc/sys/kernel/cap_last_cap), which
/// no_new_privs makes moot for a child that never executes anything.
pub fn drop_all_in_forked_child() -> std::io::Result<()> {
    // SAFETY: prctl with integer arguments only; no memory is passed.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    set_capabilities(0)
}

/// Sets the calling thread's permitted and effective capabilities to `want` and its inheritable
/// set to nothing (capset(2), version 3: no allocation, safe after fork).
fn set_capabilities(want: u64) -> std::io::Result<()> {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: libc::c_int,
    }
    #[repr(C)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;
    let header = Header {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let data = [
        Data {
            effective: want as u32,
            permitted: want as u32,
            inheritable: 0,
        },
        Data {
            effective: (want >> 32) as u32,
            permitted: (want >> 32) as u32,
            inheritable: 0,
        },
    ];
    // SAFETY: capset(2) reads one header and two data structs (version 3), both live for the
    // call; pid 0 is the calling thread.
    let r = unsafe { libc::syscall(libc::SYS_capset, &header as *const Header, data.as_ptr()) };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The names of the capabilities in `m`, for messages (`doctor`).
pub fn names(m: u64) -> String {
    let all = [
        caps::CAP_DAC_OVERRIDE,
        caps::CAP_DAC_READ_SEARCH,
        caps::CAP_KILL,
        caps::CAP_NET_ADMIN,
        caps::CAP_NET_RAW,
        caps::CAP_SETPCAP,
        caps::CAP_SYS_ADMIN,
        caps::CAP_SYS_PTRACE,
        caps::CAP_SYSLOG,
        caps::CAP_PERFMON,
        caps::CAP_BPF,
    ];
    let n: Vec<&str> = all
        .iter()
        .filter(|c| m & (1u64 << c.0) != 0)
        .map(|c| c.1)
        .collect();
    n.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On a thread of its own (capabilities are per thread): after the drop the thread holds
    /// at most the kept set, its bounding set is reduced, and no_new_privs is on.
    #[test]
    fn a_thread_keeps_only_what_it_asked_for() {
        let (dropped, status) = std::thread::spawn(|| {
            let d = drop_to(&KEPT).expect("dropping capabilities");
            let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
            (d, status)
        })
        .join()
        .unwrap();
        let eff = caps::parse_set(&status, "CapEff").unwrap();
        let prm = caps::parse_set(&status, "CapPrm").unwrap();
        assert_eq!(eff & !mask(&KEPT), 0, "CapEff {eff:x}");
        assert_eq!(prm & !mask(&KEPT), 0, "CapPrm {prm:x}");
        assert_eq!(dropped.effective, eff);
        assert!(status.contains("NoNewPrivs:\t1"), "{status}");
        if dropped.bounding_dropped {
            let bnd = caps::parse_set(&status, "CapBnd").unwrap();
            assert_eq!(bnd & !mask(&KEPT), 0, "CapBnd {bnd:x}");
        }
        // This (the test's) thread is untouched.
        let own = std::fs::read_to_string("/proc/thread-self/status").unwrap();
        assert!(!own.contains("NoNewPrivs:\t1") || caps::effective() == 0);
    }

    #[test]
    fn names_list_the_set_bits() {
        assert_eq!(
            names(mask(&[caps::CAP_BPF, caps::CAP_PERFMON])),
            "CAP_PERFMON, CAP_BPF"
        );
    }
}
