//! `scanprof recv`: the reference UDP receiver. It binds a port, asks for the receive buffer it
//! is given, reads one datagram per recvfrom (paced when asked, to stage a listener that falls
//! behind) until its duration ends, and reports its own count: the figure scanprof's receive
//! funnel is held against (`scanprof lab rcvbuf-overflow`, tests/receive_funnel.rs). With
//! `--workers N`, N threads each read their own SO_REUSEPORT socket and count their own packets
//! and CPU time (tests/receive_cost.rs holds scanprof's receive cost against them). With
//! `--respond BYTES` it is a UDP responder with two kinds of packet, cheap (shorter than BYTES)
//! and costly, each given its own amount of work and a reply, and each worker counts its packets
//! and handling time per kind (`scanprof lab responder-kinds` holds scanprof's per-class cost
//! against them).

use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::AsRawFd;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use nix::sys::socket::{getsockopt, setsockopt, sockopt};
use nix::sys::time::TimeValLike;
use nix::time::{clock_gettime, ClockId};
use serde::{Deserialize, Serialize};

use crate::cli::RecvOptions;

/// How long one recvfrom waits before the receiver looks at the clock again.
const POLL: Duration = Duration::from_millis(50);

/// What the receiver read, by its own count.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RecvReport {
    /// datagrams read
    pub packets: u64,
    /// their payload bytes
    pub bytes: u64,
    /// the socket's receive buffer as the kernel set it (SO_RCVBUF read back: twice what was
    /// asked, within net.core.rmem_max), bytes
    pub rcvbuf: u64,
    pub port: u16,
    /// seconds it received for
    pub duration_s: f64,
    /// each worker thread's own count, in the order of their sockets (absent in reports older
    /// than it)
    #[serde(default)]
    pub workers: Vec<WorkerReport>,
}

/// One worker thread: its socket's datagrams and its own CPU time.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkerReport {
    /// its thread id (as scanprof's thread rows name it)
    pub tid: u32,
    /// datagrams it read
    pub packets: u64,
    /// their payload bytes
    pub bytes: u64,
    /// its thread's CPU time (CLOCK_THREAD_CPUTIME_ID) from its start to its end, ns
    pub cpu_ns: u64,
    /// with --respond: per kind (cheap, then costly), what it handled
    #[serde(default)]
    pub kinds: Vec<KindReport>,
    /// times the thread was switched out involuntarily (preempted; getrusage RUSAGE_THREAD):
    /// a preemption inside a handling is counted in its handling time
    #[serde(default)]
    pub preempted: u64,
}

/// One kind of packet a responder handles: its own count and time.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct KindReport {
    /// datagrams of the kind read
    pub packets: u64,
    /// their payload bytes
    pub bytes: u64,
    /// time from each one's read returning to the next read (its work and its reply), summed,
    /// by CLOCK_MONOTONIC (a vDSO read of ~25 ns; the thread CPU clock is a syscall of ~800 ns
    /// here, more than the cheap kind's work), ns
    pub handled_ns: u64,
    /// replies sent
    pub replies: u64,
}

pub fn run(o: &RecvOptions) -> Result<ExitCode> {
    let sockets = bind(o)?;
    let rcvbuf = getsockopt(&sockets[0], sockopt::RcvBuf).context("cannot read SO_RCVBUF")? as u64;
    anyhow::ensure!(
        o.work_ns.len() == 2,
        "--work-ns takes two figures, the cheap kind's and the costly kind's work in ns (e.g. 200,8000); got {}",
        o.work_ns.len()
    );
    let work = o.respond.map(|_| Work::calibrate(&o.work_ns)).transpose()?;
    let start = Instant::now();
    let work = work.as_ref();
    let workers: Vec<WorkerReport> = std::thread::scope(|scope| {
        let handles: Vec<_> = sockets
            .iter()
            .enumerate()
            .map(|(i, socket)| {
                std::thread::Builder::new()
                    .name(format!("recv-worker-{i}"))
                    .spawn_scoped(scope, move || receive(socket, o, start, work))
                    .context("cannot start a receive worker thread")
            })
            .collect::<Result<_>>()?;
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .map_err(|_| anyhow::anyhow!("a receive worker thread panicked"))?
            })
            .collect::<Result<Vec<_>>>()
    })?;
    let report = RecvReport {
        packets: workers.iter().map(|w| w.packets).sum(),
        bytes: workers.iter().map(|w| w.bytes).sum(),
        rcvbuf,
        port: o.port,
        duration_s: start.elapsed().as_secs_f64(),
        workers,
    };
    let line = format!(
        "received {} datagrams ({} bytes) on port {} in {:.3} s; SO_RCVBUF {} bytes",
        report.packets, report.bytes, report.port, report.duration_s, report.rcvbuf
    );
    println!("{line}");
    for (i, w) in report.workers.iter().enumerate() {
        for (k, kind) in w.kinds.iter().enumerate() {
            println!(
                "  worker {i}, {} kind: {} datagrams, {} replies, {:.0} ns handling each",
                ["cheap", "costly"][k.min(1)],
                kind.packets,
                kind.replies,
                kind.handled_ns as f64 / kind.packets.max(1) as f64
            );
        }
    }
    if report.workers.len() > 1 {
        for (i, w) in report.workers.iter().enumerate() {
            println!(
                "  worker {i} (tid {}): {} datagrams, {:.3} s CPU{}",
                w.tid,
                w.packets,
                w.cpu_ns as f64 / 1e9,
                if w.packets > 0 {
                    format!(", {:.0} ns each", w.cpu_ns as f64 / w.packets as f64)
                } else {
                    String::new()
                }
            );
        }
    }
    if let Some(path) = &o.report {
        let text = serde_json::to_string(&report)?;
        std::fs::write(path, text)
            .with_context(|| format!("cannot write the report to {}", path.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// One socket per worker, bound in order to the port (SO_REUSEPORT when there are several), with
/// the group's datagrams spread by source port: worker `sport % N` gets them.
fn bind(o: &RecvOptions) -> Result<Vec<UdpSocket>> {
    let addr = SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, o.port);
    let n = o.workers;
    let mut sockets = Vec::with_capacity(n);
    for _ in 0..n {
        let fd = nix::sys::socket::socket(
            nix::sys::socket::AddressFamily::Inet,
            nix::sys::socket::SockType::Datagram,
            nix::sys::socket::SockFlag::SOCK_CLOEXEC,
            None,
        )
        .context("cannot create a UDP socket")?;
        if n > 1 {
            setsockopt(&fd, sockopt::ReusePort, &true).context("cannot set SO_REUSEPORT")?;
        }
        if let Some(b) = o.rcvbuf {
            setsockopt(&fd, sockopt::RcvBuf, &b).context("cannot set SO_RCVBUF")?;
        }
        nix::sys::socket::bind(fd.as_raw_fd(), &nix::sys::socket::SockaddrIn::from(addr)).with_context(
            || {
                format!(
                    "cannot bind UDP port {}: is another receiver on it? Choose another --port",
                    o.port
                )
            },
        )?;
        let socket = UdpSocket::from(fd);
        socket.set_read_timeout(Some(POLL))?;
        sockets.push(socket);
    }
    if n > 1 {
        spread_by_source_port(&sockets[0], n as u32)?;
    }
    Ok(sockets)
}

/// Attaches a classic BPF program to the port's SO_REUSEPORT group that picks socket
/// `source port % n` (sockets are numbered in the order they were bound), so that the sender
/// decides which worker reads a flow, instead of the kernel's hash of the 4-tuple.
fn spread_by_source_port(socket: &UdpSocket, n: u32) -> Result<()> {
    // The program sees the datagram's payload at offset 0 (the UDP header is pulled): the
    // source port is read relative to the network header, 20 bytes in (IPv4 without options).
    const SKF_NET_OFF: i32 = -0x100000;
    let prog = [
        bpf_stmt(
            libc::BPF_LD | libc::BPF_H | libc::BPF_ABS,
            (SKF_NET_OFF + 20) as u32,
        ),
        bpf_stmt(libc::BPF_ALU | libc::BPF_MOD | libc::BPF_K, n),
        bpf_stmt(libc::BPF_RET | libc::BPF_A, 0),
    ];
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: `fprog` points at `prog`, which outlives the call; the kernel copies the program.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_REUSEPORT_CBPF,
            &fprog as *const libc::sock_fprog as *const libc::c_void,
            std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error())
            .context("cannot attach the SO_REUSEPORT program that spreads datagrams by source port");
    }
    Ok(())
}

fn bpf_stmt(code: u32, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    }
}

/// This thread's CPU time so far, ns (0 if the clock cannot be read).
fn thread_cpu_ns() -> u64 {
    clock_gettime(ClockId::CLOCK_THREAD_CPUTIME_ID).map_or(0, |t| t.num_nanoseconds().max(0) as u64)
}

/// A responder's work: a spin of a fixed number of steps per kind, its steps per ns measured on
/// the thread CPU clock at start-up.
struct Work {
    /// steps for the cheap kind, then the costly
    steps: [u64; 2],
}

impl Work {
    fn calibrate(ns: &[u64]) -> Result<Work> {
        const PROBE: u64 = 2_000_000;
        // The fastest of a few trials: the others were preempted.
        let per_step = (0..5)
            .map(|_| {
                let t0 = thread_cpu_ns();
                spin(PROBE);
                thread_cpu_ns().saturating_sub(t0) as f64 / PROBE as f64
            })
            .fold(f64::INFINITY, f64::min);
        anyhow::ensure!(
            per_step.is_finite() && per_step > 0.0,
            "cannot calibrate the responder's work: the thread CPU clock did not move"
        );
        let steps = |i: usize| (ns.get(i).copied().unwrap_or(0) as f64 / per_step).round() as u64;
        Ok(Work {
            steps: [steps(0), steps(1)],
        })
    }
}

/// `steps` rounds of arithmetic the compiler cannot remove.
fn spin(steps: u64) -> u64 {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for i in 0..steps {
        x = std::hint::black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(i));
    }
    x
}

/// Involuntary context switches of the calling thread so far.
fn preemptions() -> u64 {
    // SAFETY: getrusage writes only into the struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) } != 0 {
        return 0;
    }
    ru.ru_nivcsw.max(0) as u64
}

/// Reads until the duration ends; with a read rate, the k-th read is not before k / rate. A
/// responder (`work`) handles each datagram by its kind and replies.
fn receive(socket: &UdpSocket, o: &RecvOptions, start: Instant, work: Option<&Work>) -> Result<WorkerReport> {
    let preempted_start = preemptions();
    let cpu_start = thread_cpu_ns();
    let end = start + Duration::from_secs_f64(o.duration);
    let slot = o.read_rate.map(|r| Duration::from_secs_f64(1.0 / r));
    let mut buf = vec![0u8; 65_536];
    let mut report = WorkerReport {
        tid: nix::unistd::gettid().as_raw() as u32,
        ..Default::default()
    };
    if work.is_some() {
        report.kinds = vec![KindReport::default(); 2];
    }
    // The kind being handled since when: closed at the top of the loop, just before the next read.
    let mut handling: Option<(usize, Instant)> = None;
    let mut due = start;
    loop {
        let now = Instant::now();
        if let Some((kind, since)) = handling.take() {
            report.kinds[kind].handled_ns += now.saturating_duration_since(since).as_nanos() as u64;
        }
        if now >= end {
            break;
        }
        if let Some(slot) = slot {
            if due > now {
                std::thread::sleep((due - now).min(end - now));
                continue;
            }
            due += slot;
        }
        match socket.recv_from(&mut buf) {
            Ok((n, from)) => {
                report.packets += 1;
                report.bytes += n as u64;
                if let (Some(w), Some(split)) = (work, o.respond) {
                    let since = Instant::now();
                    let kind = usize::from(n >= split);
                    std::hint::black_box(spin(w.steps[kind]));
                    let mut to = from;
                    if let Some(p) = o.reply_port {
                        to.set_port(p);
                    }
                    let k = &mut report.kinds[kind];
                    k.packets += 1;
                    k.bytes += n as u64;
                    if socket.send_to(&buf[..n], to).is_ok() {
                        k.replies += 1;
                    }
                    handling = Some((kind, since));
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                // Nothing came within the poll: the slot is not used up.
                if slot.is_some() {
                    due = Instant::now();
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e).context("recvfrom failed"),
        }
    }
    report.cpu_ns = thread_cpu_ns().saturating_sub(cpu_start);
    report.preempted = preemptions().saturating_sub(preempted_start);
    Ok(report)
}
