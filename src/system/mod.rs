//! Facts about the host gathered without BPF: independent counters (tc, ip) that tests and the
//! lab compare scanprof's figures with, the machine's facts, and the clock every part shares.

pub mod caps;
pub mod child;
pub mod conntrack;
pub mod cpu_limits;
pub mod machine;
pub mod netstat;
pub mod perf_counter;
pub mod privileges;
pub mod tsc_freq;
pub mod user_files;
pub mod watchdog;

/// Where tracefs is mounted: its own mount point, or under debugfs on older set-ups. The probes
/// look a tracepoint up there (per-syscall hooks, perf's count of kfree_skb).
pub const TRACEFS_ROOTS: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

/// CLOCK_MONOTONIC now, in ns: the clock `bpf_ktime_get_ns()` reads, so the probes' timestamps,
/// the collector's ticks, the pacers and the lab receiver all compare directly.
pub fn monotonic_ns() -> u64 {
    clock_ns(nix::time::ClockId::CLOCK_MONOTONIC)
}

/// A clock now, in ns; 0 if the kernel lacks it (MONOTONIC, BOOTTIME and REALTIME always exist).
fn clock_ns(id: nix::time::ClockId) -> u64 {
    nix::time::clock_gettime(id).map_or(0, |t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
}

/// The three clocks a trace viewer may align on, read back to back at one moment (within a
/// few microseconds of each other): a trace in the BPF side's clock (MONOTONIC) declares it
/// and the others, so that Perfetto can place it beside traces in BOOTTIME or wall-clock time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ClockReadings {
    /// CLOCK_MONOTONIC, ns: the clock of every BPF timestamp (`bpf_ktime_get_ns()`)
    pub monotonic_ns: u64,
    /// CLOCK_BOOTTIME, ns (MONOTONIC plus the time spent suspended): Perfetto's default clock
    pub boottime_ns: u64,
    /// CLOCK_REALTIME, ns since the Unix epoch
    pub realtime_ns: u64,
}

/// Readings of each clock's offset from MONOTONIC that [`ClockReadings::at`] keeps the tightest
/// of.
const OFFSET_TRIES: usize = 8;

impl ClockReadings {
    /// The clocks at the CLOCK_MONOTONIC time `monotonic_ns` (the moment the caller took as its
    /// zero, a little earlier): each other clock is read between two MONOTONIC readings, and
    /// its offset from MONOTONIC (against their midpoint) applied to `monotonic_ns`. The offset's
    /// error is at most half the time between the two MONOTONIC readings, so of
    /// [`OFFSET_TRIES`] readings the one with the shortest such window is kept: a thread
    /// preempted between two reads (a busy machine) widens one window, not all of them.
    pub fn at(monotonic_ns: u64) -> ClockReadings {
        use nix::time::ClockId;
        let offset = |id: ClockId| -> i128 {
            let read = || {
                let before = clock_ns(ClockId::CLOCK_MONOTONIC);
                let x = clock_ns(id);
                let after = clock_ns(ClockId::CLOCK_MONOTONIC);
                let off = i128::from(x) - (i128::from(before) + i128::from(after)) / 2;
                (after.saturating_sub(before), off)
            };
            (0..OFFSET_TRIES)
                .map(|_| read())
                .min_by_key(|&(window, _)| window)
                .map_or(0, |(_, off)| off)
        };
        let moved = |off: i128| u64::try_from(i128::from(monotonic_ns) + off).unwrap_or(0);
        ClockReadings {
            monotonic_ns,
            boottime_ns: moved(offset(ClockId::CLOCK_BOOTTIME)),
            realtime_ns: moved(offset(ClockId::CLOCK_REALTIME)),
        }
    }
}

/// Datagrams the kernel dropped at a socket so far (its `sk_drops`, from SO_MEMINFO, Linux
/// 4.12+): for UDP, the ones that found its receive buffer full, the count a receiver that falls
/// behind has lost. A receiver counts what it read; this is what it could not.
pub fn socket_drops(socket: &impl std::os::fd::AsRawFd) -> std::io::Result<u64> {
    let mut meminfo = [0u32; libc::SK_MEMINFO_DROPS as usize + 1];
    let mut len = std::mem::size_of_val(&meminfo) as libc::socklen_t;
    // SAFETY: the fd is the caller's open socket; `meminfo` and `len` are live locals and `len`
    // says how many bytes `meminfo` holds (the kernel writes at most that many).
    let rc = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_MEMINFO,
            meminfo.as_mut_ptr().cast::<libc::c_void>(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(u64::from(meminfo[libc::SK_MEMINFO_DROPS as usize]))
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

#[cfg(test)]
mod tests {
    use super::*;

    /// 200 datagrams of 1,000 bytes into a loopback socket of the smallest receive buffer,
    /// unread: the kernel keeps a few and drops the rest at the socket, and every one is either
    /// read or counted there.
    #[test]
    fn a_sockets_drops_and_what_it_read_add_up_to_what_was_sent() {
        use std::net::UdpSocket;
        let rx = UdpSocket::bind("127.0.0.1:0").expect("bind");
        nix::sys::socket::setsockopt(&rx, nix::sys::socket::sockopt::RcvBuf, &1).expect("SO_RCVBUF");
        rx.set_nonblocking(true).expect("nonblocking");
        let tx = UdpSocket::bind("127.0.0.1:0").expect("bind");
        assert_eq!(socket_drops(&rx).expect("SO_MEMINFO"), 0);
        for _ in 0..200 {
            tx.send_to(&[0u8; 1000], rx.local_addr().expect("addr"))
                .expect("send");
        }
        let mut buf = [0u8; 2048];
        let mut read = 0u64;
        while rx.recv(&mut buf).is_ok() {
            read += 1;
        }
        let dropped = socket_drops(&rx).expect("SO_MEMINFO");
        assert!(dropped > 0 && read > 0, "read {read}, dropped {dropped}");
        assert_eq!(read + dropped, 200, "read {read}, dropped {dropped}");
    }

    #[test]
    fn clock_readings_keep_boottime_at_or_after_monotonic_and_realtime_near_now() {
        for _ in 0..1000 {
            let m = monotonic_ns();
            let c = ClockReadings::at(m);
            assert_eq!(c.monotonic_ns, m);
            // BOOTTIME = MONOTONIC + time suspended: never behind, to the reading's error.
            assert!(c.boottime_ns + 1_000 >= m, "{c:?}");
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let c = ClockReadings::at(monotonic_ns());
        assert!(now.abs_diff(c.realtime_ns) < 1_000_000_000, "{c:?} vs {now}");
    }
}
