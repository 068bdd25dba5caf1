//! `scanprof recv`: the reference UDP receiver. It binds a port, asks for the receive buffer it
//! is given, reads one datagram per recvfrom (paced when asked, to stage a listener that falls
//! behind) until its duration ends, and reports its own count: the figure scanprof's receive
//! funnel is held against (`scanprof lab rcvbuf-overflow`, tests/receive_funnel.rs).

use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use nix::sys::socket::{getsockopt, setsockopt, sockopt};
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
}

pub fn run(o: &RecvOptions) -> Result<ExitCode> {
    let addr = SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, o.port);
    let socket = UdpSocket::bind(addr).with_context(|| {
        format!(
            "cannot bind UDP port {}: is another receiver on it? Choose another --port",
            o.port
        )
    })?;
    if let Some(b) = o.rcvbuf {
        setsockopt(&socket, sockopt::RcvBuf, &b).context("cannot set SO_RCVBUF")?;
    }
    let rcvbuf = getsockopt(&socket, sockopt::RcvBuf).context("cannot read SO_RCVBUF")? as u64;
    socket.set_read_timeout(Some(POLL))?;
    let report = receive(&socket, o, rcvbuf)?;
    let line = format!(
        "received {} datagrams ({} bytes) on port {} in {:.3} s; SO_RCVBUF {} bytes",
        report.packets, report.bytes, report.port, report.duration_s, report.rcvbuf
    );
    println!("{line}");
    if let Some(path) = &o.report {
        let text = serde_json::to_string(&report)?;
        std::fs::write(path, text)
            .with_context(|| format!("cannot write the report to {}", path.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Reads until the duration ends; with a read rate, the k-th read is not before k / rate.
fn receive(socket: &UdpSocket, o: &RecvOptions, rcvbuf: u64) -> Result<RecvReport> {
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(o.duration);
    let slot = o.read_rate.map(|r| Duration::from_secs_f64(1.0 / r));
    let mut buf = vec![0u8; 65_536];
    let mut report = RecvReport {
        rcvbuf,
        port: o.port,
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
    report.duration_s = start.elapsed().as_secs_f64();
    Ok(report)
}
