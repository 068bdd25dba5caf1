//! `scanprof recv`: the reference UDP receiver. It binds a port, asks for the receive buffer it
//! is given, reads one datagram per recvfrom (paced when asked, to stage a listener that falls
//! behind) until its duration ends, and reports its own count: the figure scanprof's receive
//! funnel is held against (`scanprof lab rcvbuf-overflow`, tests/receive_funnel.rs). With
//! `--workers N`, N threads each read their own SO_REUSEPORT socket and count their own packets
//! and CPU time (tests/receive_cost.rs holds scanprof's receive cost against them).

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
}

pub fn run(o: &RecvOptions) -> Result<ExitCode> {
    let sockets = bind(o)?;
    let rcvbuf = getsockopt(&sockets[0], sockopt::RcvBuf).context("cannot read SO_RCVBUF")? as u64;
    let start = Instant::now();
    let workers: Vec<WorkerReport> = std::thread::scope(|scope| {
        let handles: Vec<_> = sockets
            .iter()
            .enumerate()
            .map(|(i, socket)| {
                std::thread::Builder::new()
                    .name(format!("recv-worker-{i}"))
                    .spawn_scoped(scope, move || receive(socket, o, start))
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

/// Reads until the duration ends; with a read rate, the k-th read is not before k / rate.
fn receive(socket: &UdpSocket, o: &RecvOptions, start: Instant) -> Result<WorkerReport> {
    let cpu_start = thread_cpu_ns();
    let end = start + Duration::from_secs_f64(o.duration);
    let slot = o.read_rate.map(|r| Duration::from_secs_f64(1.0 / r));
    let mut buf = vec![0u8; 65_536];
    let mut report = WorkerReport {
        tid: nix::unistd::gettid().as_raw() as u32,
        ..Default::default()
    };
    let mut due = start;
    loop {
        let now = Instant::now();
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
            Ok((n, _)) => {
                report.packets += 1;
                report.bytes += n as u64;
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
    Ok(report)
}
