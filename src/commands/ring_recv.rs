//! `scanprof ring-recv`: the reference packet-socket reader. It binds an AF_PACKET socket to a
//! device with a TPACKET_V2 receive ring of the size it is given (as libpcap, masscan and zmap
//! read replies: from shared memory, without a syscall per frame), reads frames from the ring,
//! paced when asked so that the ring fills, and reports its own count and the socket's
//! PACKET_STATISTICS: the truth scanprof's ring stages (`ring_queued`, `ring_drops`) and the
//! `ring_full` verdict are held against (tests/ring_funnel.rs).
//!
//! With `SCANPROF_RING_RECV_STATS_MS=N` in its environment, a second thread also reads
//! PACKET_STATISTICS every N ms while it reads, as libpcap's `pcap_stats` does in zmap's monitor
//! thread: each read clears the kernel's counters, and the report's counts are the sums of every
//! read (those and the final one). (An environment variable, not a flag: the flags live in
//! src/cli.rs.)

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::cli::RingRecvOptions;

/// Bytes per ring frame: a whole Ethernet frame with the TPACKET_V2 header fits.
const FRAME_SIZE: u32 = 2048;
/// Bytes per ring block: a page, two frames.
const BLOCK_SIZE: u32 = 4096;
/// How long one poll waits for a frame before the reader looks at the clock again.
const POLL_MS: i32 = 50;
/// The environment variable that makes a thread read PACKET_STATISTICS every N ms (1 to 60000).
pub const STATS_MS_ENV: &str = "SCANPROF_RING_RECV_STATS_MS";

/// What the reader took from its ring, by its own count, and the kernel's statistics of its
/// socket (PACKET_STATISTICS: read once after it stopped reading and lingered, and every
/// `SCANPROF_RING_RECV_STATS_MS` while it read; the counts are the sums of every read, since each
/// clears the kernel's counters).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RingRecvReport {
    /// the device it was bound to
    pub dev: String,
    /// frames in its ring, and bytes per frame
    pub frames: u32,
    pub frame_size: u32,
    /// frames it read from the ring
    pub read: u64,
    /// PACKET_STATISTICS: frames that reached the socket (queued + dropped, as the kernel
    /// reports them) and frames dropped because the ring was full
    pub tp_packets: u64,
    pub tp_drops: u64,
    /// tp_packets - tp_drops: frames the kernel queued to the ring
    pub queued: u64,
    /// PACKET_STATISTICS reads summed above: the periodic ones and the final one
    pub statistics_reads: u64,
    /// seconds it read for
    pub duration_s: f64,
}

/// A socket option set with setsockopt(SOL_PACKET).
fn set_packet_opt<T>(fd: &OwnedFd, opt: libc::c_int, value: &T, what: &str) -> Result<()> {
    // SAFETY: `value` is a live T of size_of::<T>() bytes for the call's duration; the kernel
    // only reads it.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_PACKET,
            opt,
            (value as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        bail!(
            "setting {what} on the packet socket: {}",
            std::io::Error::last_os_error()
        );
    }
    Ok(())
}

/// The receive ring, mapped; unmapped on drop.
struct Ring {
    base: *mut u8,
    len: usize,
    frames: u32,
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: base and len are the mapping mmap returned, not unmapped elsewhere.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

impl Ring {
    /// The status word of frame `i` (the first field of its tpacket2_hdr), shared with the kernel.
    fn status(&self, i: u32) -> &std::sync::atomic::AtomicU32 {
        // SAFETY: frame i < frames lies inside the mapping (frames * FRAME_SIZE bytes), is
        // FRAME_SIZE-aligned (so 4-aligned), and the kernel and this reader access its status
        // word atomically (the kernel with smp_wmb/READ_ONCE): an AtomicU32 view of it is sound
        // for as long as the mapping lives, which outlives the borrow of self.
        unsafe {
            &*self
                .base
                .add((i % self.frames) as usize * FRAME_SIZE as usize)
                .cast::<std::sync::atomic::AtomicU32>()
        }
    }
}

/// Opens the socket bound to `dev` with a TPACKET_V2 ring of `frames` frames, mapped.
fn open(dev: &str, frames: u32) -> Result<(OwnedFd, Ring)> {
    let name = CString::new(dev).context("the device name has a NUL byte")?;
    // SAFETY: name is a valid NUL-terminated string for the call.
    let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
    if ifindex == 0 {
        bail!("no device named {dev} in this network namespace: give --dev a device `ip link` lists");
    }
    let proto = (libc::ETH_P_ALL as u16).to_be();
    // SAFETY: plain socket(2); the descriptor is owned right after.
    let raw = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, libc::c_int::from(proto)) };
    if raw < 0 {
        bail!(
            "opening a packet socket: {} (needs CAP_NET_RAW: run as root)",
            std::io::Error::last_os_error()
        );
    }
    // SAFETY: raw is a new descriptor nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let version = libc::tpacket_versions::TPACKET_V2 as libc::c_int;
    set_packet_opt(&fd, libc::PACKET_VERSION, &version, "PACKET_VERSION (TPACKET_V2)")?;
    let req = libc::tpacket_req {
        tp_block_size: BLOCK_SIZE,
        tp_block_nr: frames * FRAME_SIZE / BLOCK_SIZE,
        tp_frame_size: FRAME_SIZE,
        tp_frame_nr: frames,
    };
    set_packet_opt(&fd, libc::PACKET_RX_RING, &req, "PACKET_RX_RING")?;
    let len = (frames * FRAME_SIZE) as usize;
    // SAFETY: maps the ring the kernel just set up on fd, len bytes, shared; checked below.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            0,
        )
    };
    if base == libc::MAP_FAILED {
        bail!("mapping the packet ring: {}", std::io::Error::last_os_error());
    }
    let ring = Ring {
        base: base.cast(),
        len,
        frames,
    };
    // SAFETY: sockaddr_ll is plain data; all-zero is a valid value, then filled in.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = proto;
    sll.sll_ifindex = ifindex as i32;
    // SAFETY: sll is a live sockaddr_ll of the length given.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&sll as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        bail!(
            "binding the packet socket to {dev}: {}",
            std::io::Error::last_os_error()
        );
    }
    Ok((fd, ring))
}

/// PACKET_STATISTICS of the socket (clears the kernel's counters).
fn statistics(fd: &OwnedFd) -> Result<libc::tpacket_stats> {
    let mut st = libc::tpacket_stats {
        tp_packets: 0,
        tp_drops: 0,
    };
    let mut len = std::mem::size_of::<libc::tpacket_stats>() as libc::socklen_t;
    // SAFETY: st and len are live and sized for the kernel to write.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_PACKET,
            libc::PACKET_STATISTICS,
            (&mut st as *mut libc::tpacket_stats).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        bail!("reading PACKET_STATISTICS: {}", std::io::Error::last_os_error());
    }
    Ok(st)
}

/// Sums of PACKET_STATISTICS reads: (reads, tp_packets, tp_drops).
#[derive(Debug, Clone, Copy, Default)]
struct StatsSum {
    reads: u64,
    packets: u64,
    drops: u64,
}

impl StatsSum {
    fn add(&mut self, st: &libc::tpacket_stats) {
        self.reads += 1;
        self.packets += u64::from(st.tp_packets);
        self.drops += u64::from(st.tp_drops);
    }
}

/// The period of the statistics thread from the environment, None when unset.
fn stats_period() -> Result<Option<Duration>> {
    let Some(v) = std::env::var_os(STATS_MS_ENV) else {
        return Ok(None);
    };
    let v = v.to_string_lossy();
    match v.trim().parse::<u64>() {
        Ok(ms @ 1..=60_000) => Ok(Some(Duration::from_millis(ms))),
        _ => bail!("{STATS_MS_ENV}={v}: give a period in milliseconds, 1 to 60000, or unset it"),
    }
}

/// Reads PACKET_STATISTICS every `period` until `stop`, summing what the reads return.
fn read_statistics(fd: &OwnedFd, period: Duration, stop: &std::sync::atomic::AtomicBool) -> Result<StatsSum> {
    use std::sync::atomic::Ordering;
    let mut sum = StatsSum::default();
    let start = Instant::now();
    while !stop.load(Ordering::Acquire) {
        let due = start + period.mul_f64((sum.reads + 1) as f64);
        let now = Instant::now();
        if due > now {
            std::thread::sleep((due - now).min(Duration::from_millis(POLL_MS as u64)));
            continue;
        }
        sum.add(&statistics(fd)?);
    }
    Ok(sum)
}

/// Reads frames from the ring until `duration` ends, at most `read_rate` per second.
fn read_ring(fd: &OwnedFd, ring: &Ring, duration: Duration, read_rate: Option<f64>) -> u64 {
    use std::sync::atomic::Ordering;
    let start = Instant::now();
    let end = start + duration;
    let slot = read_rate.map(|r| Duration::from_secs_f64(1.0 / r));
    let (mut head, mut read) = (0u32, 0u64);
    loop {
        let now = Instant::now();
        if now >= end {
            return read;
        }
        if let Some(slot) = slot {
            let due = start + slot.mul_f64(read as f64);
            if due > now {
                std::thread::sleep((due.min(end)) - now);
                continue;
            }
        }
        let status = ring.status(head);
        if status.load(Ordering::Acquire) & libc::TP_STATUS_USER != 0 {
            // The frame is ours: count it and hand it back to the kernel.
            status.store(libc::TP_STATUS_KERNEL, Ordering::Release);
            head = (head + 1) % ring.frames;
            read += 1;
            continue;
        }
        let mut pfd = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let wait = POLL_MS.min(end.saturating_duration_since(now).as_millis().max(1) as i32);
        // SAFETY: pfd is one live pollfd.
        unsafe { libc::poll(&mut pfd, 1, wait) };
    }
}

pub fn run(o: &RingRecvOptions) -> Result<ExitCode> {
    if o.frames % (BLOCK_SIZE / FRAME_SIZE) != 0 {
        bail!(
            "--frames must be even (two {FRAME_SIZE}-byte frames per {BLOCK_SIZE}-byte block): give {}",
            o.frames + 1
        );
    }
    let period = stats_period()?;
    let (fd, ring) = open(&o.dev, o.frames)?;
    let started = Instant::now();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (read, mut sum) = std::thread::scope(|scope| -> Result<(u64, StatsSum)> {
        let (fd, stop) = (&fd, &stop);
        let stats = period.map(|p| scope.spawn(move || read_statistics(fd, p, stop)));
        let read = read_ring(fd, &ring, Duration::from_secs_f64(o.duration), o.read_rate);
        stop.store(true, std::sync::atomic::Ordering::Release);
        let sum = match stats {
            Some(h) => h
                .join()
                .map_err(|_| anyhow::anyhow!("the PACKET_STATISTICS thread panicked"))??,
            None => StatsSum::default(),
        };
        Ok((read, sum))
    })?;
    let duration_s = started.elapsed().as_secs_f64();
    // Held open, not read, so that a profiler's sample sees the socket's final counts before
    // the statistics read below clears them.
    std::thread::sleep(Duration::from_secs_f64(o.linger));
    sum.add(&statistics(&fd)?);
    let report = RingRecvReport {
        dev: o.dev.clone(),
        frames: o.frames,
        frame_size: FRAME_SIZE,
        read,
        tp_packets: sum.packets,
        tp_drops: sum.drops,
        queued: sum.packets.saturating_sub(sum.drops),
        statistics_reads: sum.reads,
        duration_s,
    };
    drop(ring);
    println!(
        "ring-recv: {} frames read from a {}-frame TPACKET_V2 ring on {} in {:.2} s; kernel ({} PACKET_STATISTICS read{}): {} frames reached the socket, {} queued, {} dropped (ring full)",
        report.read,
        report.frames,
        report.dev,
        duration_s,
        report.statistics_reads,
        if report.statistics_reads == 1 { "" } else { "s" },
        report.tp_packets,
        report.queued,
        report.tp_drops
    );
    if let Some(path) = &o.report {
        std::fs::write(path, serde_json::to_string(&report)?)
            .with_context(|| format!("writing the report to {}", path.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}
