//! The reference UDP traffic source: a paced sender whose behaviour is known, so what the
//! profiler reports for a real scanner can be checked against it. `scanprof send` drives it,
//! and the lab tests run it inside a private namespace against `crate::lab`'s sink.
//! It only ever sends to loopback or to the lab range (see [`is_safe_destination`]).

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use nix::errno::Errno;
use nix::sys::socket::{sendto, setsockopt, sockopt, MsgFlags, SockaddrIn, SockaddrLike};
use nix::sys::time::TimeSpec;
use nix::time::{clock_gettime, clock_nanosleep, ClockId, ClockNanosleepFlags};
use serde::Serialize;

use crate::lab;

const NS_PER_S: u64 = 1_000_000_000;
/// Deadlines further away than this are slept towards, nearer ones busy-waited (ns).
const SLEEP_THRESHOLD_NS: u64 = 200_000;
/// A sleep ends this long before the deadline; the busy-wait absorbs the wake-up latency (ns).
const SPIN_MARGIN_NS: u64 = 50_000;
/// Longest single sleep, so a stop request is seen promptly at low rates (ns).
const MAX_SLEEP_NS: u64 = 10_000_000;
/// Bytes of the big-endian sequence number at the start of every payload.
const SEQ_BYTES: usize = 8;
/// Largest UDP payload over IPv4, in bytes.
const MAX_PAYLOAD: usize = 65_507;
/// Most messages one sendmmsg call takes (the kernel's UIO_MAXIOV).
const MAX_BATCH: u32 = 1024;

/// The system call that hands packets to the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendMethod {
    /// One sendto(2) per packet.
    Sendto,
    /// sendmmsg(2) with `batch` packets per call. All packets of a batch are due together, at
    /// the due time of the batch's first packet, so the rate holds per batch, not per packet.
    Sendmmsg { batch: u32 },
}

/// What to send, where, how fast and for how long.
#[derive(Debug, Clone)]
pub struct UdpSendConfig {
    pub to: SocketAddrV4,
    /// packets per second; 0 = as fast as possible
    pub rate: f64,
    /// packets to send; at least one of `count` and `duration` must be set
    pub count: Option<u64>,
    /// longest time to send for
    pub duration: Option<Duration>,
    /// UDP payload bytes (8..=65507: the first 8 carry the sequence number)
    pub size: usize,
    /// SO_SNDBUF to request in bytes (SO_SNDBUFFORCE falling back to SO_SNDBUF); None = kernel default
    pub sndbuf: Option<usize>,
    pub method: SendMethod,
    /// source port to bind (0 = any)
    pub src_port: u16,
}

/// What happened during one [`run`].
#[derive(Debug, Clone, Default, Serialize)]
pub struct SendReport {
    /// packets the kernel accepted
    pub sent: u64,
    /// send calls that failed (each failure is one packet, not retried)
    pub failed: u64,
    /// errno name ("ENOBUFS", "EAGAIN", ...) -> failed calls
    pub errors: BTreeMap<String, u64>,
    /// CLOCK_MONOTONIC ns when the first successful send call returned (0 if none)
    pub first_ns: u64,
    /// CLOCK_MONOTONIC ns when the last successful send call returned (0 if none)
    pub last_ns: u64,
    /// ns from the start of the schedule to the end of the run
    pub elapsed_ns: u64,
    /// packets per second between first and last send: (sent-1)/(last-first); 0 if sent < 2
    pub achieved_pps: f64,
    /// packets per second asked for (0 = as fast as possible)
    pub requested_pps: f64,
}

impl UdpSendConfig {
    /// Checks the configuration without touching the network.
    pub fn validate(&self) -> Result<()> {
        ensure!(
            self.count.is_some() || self.duration.is_some(),
            "a send needs a bound: set a packet count, a duration or both"
        );
        ensure!(
            is_safe_destination(*self.to.ip()),
            "refusing to send to {}: only 127.0.0.0/8 and the lab range 10.99.0.0/24 are allowed",
            self.to.ip()
        );
        ensure!(
            self.rate.is_finite() && self.rate >= 0.0,
            "rate must be a finite number of packets per second >= 0, not {}",
            self.rate
        );
        ensure!(
            (SEQ_BYTES..=MAX_PAYLOAD).contains(&self.size),
            "payload size must be {SEQ_BYTES}..={MAX_PAYLOAD} bytes, not {}",
            self.size
        );
        if let SendMethod::Sendmmsg { batch } = self.method {
            ensure!(
                (1..=MAX_BATCH).contains(&batch),
                "sendmmsg batch must be 1..={MAX_BATCH}, not {batch}"
            );
        }
        Ok(())
    }
}

/// Whether the sender may send to `ip`: loopback (127.0.0.0/8) or the lab range 10.99.0.0/24,
/// which `crate::lab` only ever configures inside namespaces it creates. Anything else could
/// leave the machine. [`run`] further refuses the lab range unless the sending thread is in a
/// lab namespace, since elsewhere it would follow the default route.
pub fn is_safe_destination(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    ip.is_loopback() || (a, b, c) == (10, 99, 0)
}

/// CLOCK_MONOTONIC now, in ns: the clock shared by the pacer, the lab sink and the BPF side.
pub fn monotonic_ns() -> u64 {
    // CLOCK_MONOTONIC always exists on Linux, so the error arm cannot happen.
    clock_gettime(ClockId::CLOCK_MONOTONIC)
        .map_or(0, |ts| ts.tv_sec() as u64 * NS_PER_S + ts.tv_nsec() as u64)
}

/// Sends `cfg.to` paced UDP datagrams on a blocking socket until the count or the duration is
/// reached or `stop` is set. Packet k (counting from 0, failed ones included) is due at
/// start + k/rate; a failed send is counted and not retried.
pub fn run(cfg: &UdpSendConfig, stop: &AtomicBool) -> Result<SendReport> {
    cfg.validate()?;
    if !cfg.to.ip().is_loopback() && !lab::thread_in_lab_namespace()? {
        bail!(
            "refusing to send to {} outside a lab namespace: elsewhere the lab range would follow the default route",
            cfg.to.ip()
        );
    }
    let socket = UdpSocket::bind(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, cfg.src_port))
        .with_context(|| format!("cannot bind UDP source port {}", cfg.src_port))?;
    if let Some(bytes) = cfg.sndbuf {
        setsockopt(&socket, sockopt::SndBufForce, &bytes)
            .or_else(|_| setsockopt(&socket, sockopt::SndBuf, &bytes))
            .with_context(|| format!("cannot set SO_SNDBUF to {bytes} bytes"))?;
    }
    let batch = match cfg.method {
        SendMethod::Sendto => 1,
        SendMethod::Sendmmsg { batch } => batch as usize,
    };
    let mut datagrams = Datagrams::new(batch, cfg.size, cfg.to);
    let fd = socket.as_raw_fd();
    let mut report = SendReport {
        requested_pps: cfg.rate,
        ..SendReport::default()
    };
    let start = monotonic_ns();
    let end = cfg
        .duration
        .map(|d| start.saturating_add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)));
    let mut seq = 0u64;
    loop {
        let n = cfg.count.map_or(batch, |c| (c - seq).min(batch as u64) as usize);
        if n == 0 || stop.load(Ordering::Relaxed) {
            break;
        }
        let due = if cfg.rate > 0.0 {
            start.saturating_add((seq as f64 * NS_PER_S as f64 / cfg.rate) as u64)
        } else {
            start
        };
        if end.is_some_and(|end| due.max(monotonic_ns()) >= end) || !wait_until(due, stop) {
            break;
        }
        let mut done = 0;
        while done < n {
            let result = match cfg.method {
                SendMethod::Sendto => datagrams.sendto(fd, seq + done as u64),
                SendMethod::Sendmmsg { .. } => datagrams.sendmmsg(fd, seq + done as u64, n - done),
            };
            match result {
                Ok(accepted) => {
                    report.count_sent(accepted as u64, monotonic_ns());
                    done += accepted;
                }
                Err(errno) => {
                    report.count_failure(errno);
                    done += 1;
                }
            }
        }
        seq += n as u64;
    }
    report.finish(start, monotonic_ns());
    Ok(report)
}

impl SendReport {
    fn count_sent(&mut self, packets: u64, now_ns: u64) {
        if self.sent == 0 {
            self.first_ns = now_ns;
        }
        self.last_ns = now_ns;
        self.sent += packets;
    }

    fn count_failure(&mut self, errno: Errno) {
        self.failed += 1;
        *self.errors.entry(format!("{errno:?}")).or_default() += 1;
    }

    fn finish(&mut self, start_ns: u64, now_ns: u64) {
        self.elapsed_ns = now_ns.saturating_sub(start_ns);
        let span_ns = self.last_ns.saturating_sub(self.first_ns);
        if self.sent >= 2 && span_ns > 0 {
            self.achieved_pps = (self.sent - 1) as f64 * NS_PER_S as f64 / span_ns as f64;
        }
    }
}

/// Waits until CLOCK_MONOTONIC reaches `deadline_ns`: sleeps (absolute, at most MAX_SLEEP_NS at
/// a time) while the deadline is more than SLEEP_THRESHOLD_NS away, then busy-waits.
/// Returns false if `stop` was set before the deadline.
fn wait_until(deadline_ns: u64, stop: &AtomicBool) -> bool {
    loop {
        let now = monotonic_ns();
        if now >= deadline_ns {
            return true;
        }
        if deadline_ns - now <= SLEEP_THRESHOLD_NS {
            std::hint::spin_loop();
            continue;
        }
        if stop.load(Ordering::Relaxed) {
            return false;
        }
        let wake = (deadline_ns - SPIN_MARGIN_NS).min(now + MAX_SLEEP_NS);
        // An early return (EINTR) just means another pass through the loop.
        let _ = clock_nanosleep(
            ClockId::CLOCK_MONOTONIC,
            ClockNanosleepFlags::TIMER_ABSTIME,
            &TimeSpec::from(Duration::from_nanos(wake)),
        );
    }
}

/// One batch worth of payload buffers, plus the sendmmsg header arrays, which are pointed at
/// the buffers right before each call.
struct Datagrams {
    payloads: Vec<Vec<u8>>,
    iovecs: Vec<libc::iovec>,
    headers: Vec<libc::mmsghdr>,
    dest: SockaddrIn,
}

impl Datagrams {
    fn new(batch: usize, size: usize, dest: SocketAddrV4) -> Self {
        let iovec = libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        };
        // SAFETY: mmsghdr is a C struct of integers and raw pointers; all-zero bytes are a valid
        // value (null pointers, zero lengths), and every pointer is set before use.
        let header: libc::mmsghdr = unsafe { std::mem::zeroed() };
        Self {
            payloads: vec![vec![0; size]; batch],
            iovecs: vec![iovec; batch],
            headers: vec![header; batch],
            dest: SockaddrIn::from(dest),
        }
    }

    /// Writes sequence numbers first_seq.. into the first `n` payloads.
    fn stamp(&mut self, first_seq: u64, n: usize) {
        for (seq, payload) in (first_seq..).zip(&mut self.payloads[..n]) {
            payload[..SEQ_BYTES].copy_from_slice(&seq.to_be_bytes());
        }
    }

    /// Sends packet `seq` with one sendto; Ok(1) once the kernel took it.
    fn sendto(&mut self, fd: RawFd, seq: u64) -> nix::Result<usize> {
        self.stamp(seq, 1);
        sendto(fd, &self.payloads[0], &self.dest, MsgFlags::empty()).map(|_| 1)
    }

    /// Sends packets first_seq..first_seq+n with one sendmmsg; Ok(k) when the kernel took the
    /// first k. A short count means message k failed without an errno: the caller sends the rest
    /// again, so that failure is reported by the next call.
    fn sendmmsg(&mut self, fd: RawFd, first_seq: u64, n: usize) -> nix::Result<usize> {
        self.stamp(first_seq, n);
        for (iovec, payload) in self.iovecs.iter_mut().zip(&mut self.payloads[..n]) {
            *iovec = libc::iovec {
                iov_base: payload.as_mut_ptr().cast(),
                iov_len: payload.len(),
            };
        }
        let iovecs = self.iovecs.as_mut_ptr();
        for (i, header) in self.headers[..n].iter_mut().enumerate() {
            let header = &mut header.msg_hdr;
            header.msg_name = self.dest.as_ptr().cast_mut().cast();
            header.msg_namelen = self.dest.len();
            header.msg_iov = iovecs.wrapping_add(i);
            header.msg_iovlen = 1;
        }
        // SAFETY: headers[..n] point at iovecs[..n], payloads[..n] and dest, all owned by self
        // and left untouched until the call returns; n <= headers.len() <= MAX_BATCH.
        let accepted = unsafe { libc::sendmmsg(fd, self.headers.as_mut_ptr(), n as u32, 0) };
        match Errno::result(accepted)? {
            // The kernel returns an error rather than 0 for a non-empty batch.
            0 => Err(Errno::UnknownErrno),
            k => Ok(k as usize),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use super::*;

    fn config(to: SocketAddrV4) -> UdpSendConfig {
        UdpSendConfig {
            to,
            rate: 1000.0,
            count: Some(10),
            duration: None,
            size: 64,
            sndbuf: None,
            method: SendMethod::Sendto,
            src_port: 0,
        }
    }

    #[test]
    fn safe_destinations_are_loopback_and_lab_range_only() {
        for ip in [
            "127.0.0.1",
            "127.255.255.254",
            "10.99.0.1",
            "10.99.0.2",
            "10.99.0.255",
        ] {
            assert!(is_safe_destination(ip.parse().expect("literal")), "{ip}");
        }
        for ip in [
            "10.99.1.1",
            "10.98.0.2",
            "10.0.0.1",
            "192.168.1.1",
            "8.8.8.8",
            "0.0.0.0",
        ] {
            assert!(!is_safe_destination(ip.parse().expect("literal")), "{ip}");
        }
    }

    #[test]
    fn a_send_needs_a_count_or_a_duration() {
        let mut cfg = config(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 9));
        cfg.count = None;
        let err = run(&cfg, &AtomicBool::new(false)).expect_err("unbounded send accepted");
        assert!(format!("{err:#}").contains("bound"), "{err:#}");
        cfg.duration = Some(Duration::from_millis(1));
        assert!(cfg.validate().is_ok());
    }

    #[test]
    fn unsafe_destination_is_refused() {
        let cfg = config(SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 1), 9));
        let err = run(&cfg, &AtomicBool::new(false)).expect_err("unsafe destination accepted");
        assert!(format!("{err:#}").contains("refusing"), "{err:#}");
    }

    #[test]
    fn lab_range_is_refused_outside_a_lab() {
        let cfg = config(SocketAddrV4::new(Ipv4Addr::new(10, 99, 0, 2), 9));
        let err = run(&cfg, &AtomicBool::new(false)).expect_err("lab range from the host");
        assert!(format!("{err:#}").contains("outside a lab namespace"), "{err:#}");
    }

    #[test]
    fn bad_sizes_and_batches_are_refused() {
        let mut cfg = config(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 9));
        cfg.size = 4;
        assert!(cfg.validate().is_err());
        cfg.size = 64;
        cfg.method = SendMethod::Sendmmsg { batch: 0 };
        assert!(cfg.validate().is_err());
        cfg.rate = f64::NAN;
        cfg.method = SendMethod::Sendmmsg { batch: 8 };
        assert!(cfg.validate().is_err());
    }

    /// Loopback only: every packet of a paced sendmmsg run reaches a local socket, in order.
    #[test]
    fn sendmmsg_on_loopback_delivers_numbered_packets() -> Result<()> {
        let sink = UdpSocket::bind("127.0.0.1:0")?;
        sink.set_read_timeout(Some(Duration::from_secs(1)))?;
        let SocketAddr::V4(to) = sink.local_addr()? else {
            bail!("IPv4 socket with a non-IPv4 address");
        };
        let mut cfg = config(to);
        cfg.count = Some(50);
        cfg.rate = 5000.0;
        cfg.method = SendMethod::Sendmmsg { batch: 8 };
        let report = run(&cfg, &AtomicBool::new(false))?;
        assert_eq!((report.sent, report.failed), (50, 0));
        let mut buf = [0u8; 128];
        for expected in 0..50u64 {
            let len = sink.recv(&mut buf)?;
            assert_eq!(len, 64);
            assert_eq!(buf[..8], expected.to_be_bytes());
        }
        Ok(())
    }
}
