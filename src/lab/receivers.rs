//! What runs in the lab's target namespace beside the sink: the profiled listener of a receive
//! scenario (with the sender that feeds it), the echo that answers the sender, and TCP
//! listeners a SYN scan finds open.

use std::net::{SocketAddr, SocketAddrV4, UdpSocket};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use super::scenario::{Listener, OPEN_TCP_BASE};
use crate::netlab::Lab;
use crate::system::netstat::{self};
use crate::system::user_files::Links;

/// The profiled listener of a receive scenario (`scanprof recv` in the target namespace) and
/// the reference sender feeding it, started on a thread of its own once the port is bound.
pub struct ListenerRun {
    /// the listener's command line: what the session launches and profiles
    pub(super) argv: Vec<String>,
    /// where the listener writes its own count
    report: std::path::PathBuf,
    /// the sender's thread: its exit status, None when it was never started
    sender: Option<std::thread::JoinHandle<anyhow::Result<Option<std::process::ExitStatus>>>>,
    stop: Arc<AtomicBool>,
}

/// Longest the listener waits for its first datagram once bound (its `--wait-first`, less the
/// send's duration).
const LISTENER_FIRST_WAIT: Duration = Duration::from_secs(30);
/// The listener receives this much longer than the sender sends, s.
const LISTENER_EXTRA_S: f64 = 1.0;
/// The most bytes of a listener's report read back (one JSON object of counters: a few KiB).
const MAX_REPORT_BYTES: u64 = 1 << 20;

impl ListenerRun {
    pub fn start(
        lab: &Lab,
        l: Listener,
        port: u16,
        exe: &std::path::Path,
        duration_s: f64,
        send_argvs: Vec<Vec<String>>,
    ) -> anyhow::Result<ListenerRun> {
        let report = std::env::temp_dir().join(format!(
            "scanprof-lab-listener-{}-{}.json",
            std::process::id(),
            lab.target_ns
        ));
        let _ = std::fs::remove_file(&report);
        let mut argv: Vec<String> = ["ip", "netns", "exec", &lab.target_ns].map(String::from).to_vec();
        if let Some(r) = l.relay {
            r.stage_egress(lab)?;
            argv.push(exe.display().to_string());
            argv.extend(r.relay_args(&lab.target_dev, duration_s + LISTENER_EXTRA_S, &report));
        } else if let Some(r) = l.ring {
            argv.push(exe.display().to_string());
            argv.extend(r.ring_args(&lab.target_dev, duration_s + LISTENER_EXTRA_S, &report));
        } else if l.respond.is_some_and(|r| r.realtime) {
            argv.extend(super::reference::REALTIME.map(String::from));
        }
        // Which socket the feed waits for: a packet socket (the relay, the ring reader), or
        // `scanprof recv`'s UDP port.
        let packet_socket = l.relay.is_some() || l.ring.is_some();
        if !packet_socket {
            argv.push(exe.display().to_string());
            argv.extend(
                [
                    "recv",
                    "--port",
                    &port.to_string(),
                    "--duration",
                    &(duration_s + LISTENER_EXTRA_S).to_string(),
                    "--report",
                    &report.display().to_string(),
                ]
                .map(String::from),
            );
            // The feed starts once the port is bound, which can take seconds more (an emulated
            // guest starting the sender): the listener's duration runs from its first datagram.
            argv.extend([
                "--wait-first".to_string(),
                (LISTENER_FIRST_WAIT.as_secs_f64() + duration_s).to_string(),
            ]);
            if let Some(b) = l.rcvbuf {
                argv.extend(["--rcvbuf".to_string(), b.to_string()]);
            }
            if let Some(r) = l.read_rate {
                argv.extend(["--read-rate".to_string(), r.to_string()]);
            }
            if let Some(r) = l.respond {
                argv.extend(r.recv_args());
            }
            if l.workers > 1 {
                argv.extend(["--workers".to_string(), l.workers.to_string()]);
            }
        }
        let workers = l.workers;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let ns = lab.target_ns.clone();
        let sender = std::thread::Builder::new()
            .name("lab-listener-feed".into())
            .spawn(move || -> anyhow::Result<Option<std::process::ExitStatus>> {
                // Every worker's socket bound: a datagram sent earlier would go to the first.
                // Waited for until the run ends (`finish`), however long scanprof takes to load
                // its probes before it starts the listener: a fixed wait from here ran out under
                // an emulated kernel on a loaded machine (6.1 in the kernel matrix: 111 s).
                while !(if packet_socket {
                    packet_socket_open(&ns)
                } else {
                    udp_sockets_bound(&ns, port) >= workers
                }) {
                    if flag.load(Ordering::Relaxed) {
                        return Ok(None);
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
                let mut children = Vec::new();
                for send_argv in &send_argvs {
                    let mut cmd = Command::new(&send_argv[0]);
                    cmd.args(&send_argv[1..])
                        .stdin(Stdio::null())
                        .stdout(Stdio::null())
                        .stderr(Stdio::null());
                    crate::system::child::die_with_parent(&mut cmd);
                    children.push(
                        cmd.spawn()
                            .with_context(|| format!("cannot start the sender `{}`", send_argv.join(" ")))?,
                    );
                }
                // Every sender waited for; the status of the first that failed, else the last.
                let mut status = None;
                for mut c in children {
                    let s = c.wait().context("cannot wait for a sender")?;
                    if status.is_none_or(|st: std::process::ExitStatus| st.success()) {
                        status = Some(s);
                    }
                }
                Ok(status)
            })
            .context("cannot start the listener's sender thread")?;
        Ok(ListenerRun {
            argv,
            report,
            sender: Some(sender),
            stop,
        })
    }

    /// Waits for the sender and reads the listener's own count.
    pub fn finish(self) -> anyhow::Result<super::reference::recv::RecvReport> {
        let text = self.finish_text()?;
        serde_json::from_str(&text).context("the listener's report is not JSON")
    }

    /// Waits for the sender and reads the listener's report as it wrote it.
    pub fn finish_text(mut self) -> anyhow::Result<String> {
        self.stop.store(true, Ordering::Relaxed);
        let sent = match self.sender.take().map(|t| t.join()) {
            Some(Ok(r)) => r?,
            _ => None,
        };
        anyhow::ensure!(
            sent.is_some(),
            "the listener never bound its port, so the sender was not started"
        );
        // In a directory others can write (/tmp): a link or FIFO planted there is not read.
        crate::system::user_files::read_text(&self.report, MAX_REPORT_BYTES, Links::Refuse)
            .with_context(|| format!("the listener wrote no report to {}", self.report.display()))
    }
}

impl Drop for ListenerRun {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.sender.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.report);
    }
}

/// Whether a packet socket is open in namespace `ns` (its /proc/net/packet lists one).
fn packet_socket_open(ns: &str) -> bool {
    netstat::run_in_netns(Some(ns), "cat", &["/proc/net/packet"]).is_ok_and(|t| t.lines().count() > 1)
}

/// How many UDP sockets are bound to `port` in namespace `ns` (its /proc/net/udp): a
/// SO_REUSEPORT group has one per worker.
fn udp_sockets_bound(ns: &str, port: u16) -> usize {
    netstat::run_in_netns(Some(ns), "cat", &["/proc/net/udp"]).map_or(0, |t| udp_table_sockets(&t, port))
}

/// The sockets a /proc/net/udp table lists bound to local `port`.
fn udp_table_sockets(table: &str, port: u16) -> usize {
    let want = format!(":{port:04X}");
    table
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().nth(1))
        .filter(|local| local.ends_with(&want))
        .count()
}

/// Sends every datagram that reaches the target's `port` back to the lab sender it came from,
/// on its own thread, until stopped; counts the replies.
pub struct Echo {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<u64>>,
}

impl Echo {
    pub fn start(lab: &Lab, port: u16) -> anyhow::Result<Echo> {
        let addr = SocketAddrV4::new(lab.target_addr, port);
        let sender = lab.sender_addr;
        let socket = lab.in_target(move || -> anyhow::Result<UdpSocket> {
            let socket = UdpSocket::bind(addr).with_context(|| format!("cannot bind {addr}"))?;
            socket.set_read_timeout(Some(Duration::from_millis(50)))?;
            Ok(socket)
        })??;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("lab-echo".into())
            .spawn(move || {
                // Answering on a bound socket needs no privilege.
                let _ = crate::system::privileges::drop_to(&[]);
                let (mut buf, mut sent) = (vec![0u8; 65_536], 0u64);
                while !flag.load(Ordering::Relaxed) {
                    // Replies go back into the lab only: to the sender's address, nowhere else.
                    if let Ok((n, SocketAddr::V4(from))) = socket.recv_from(&mut buf) {
                        if *from.ip() == sender && socket.send_to(&buf[..n], from).is_ok() {
                            sent += 1;
                        }
                    }
                }
                sent
            })
            .context("cannot start the echo thread")?;
        Ok(Echo {
            stop,
            thread: Some(thread),
        })
    }

    /// Stops the echo and returns the replies it sent.
    pub fn finish(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().and_then(|t| t.join().ok()).unwrap_or(0)
    }
}

impl Drop for Echo {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// `ports` TCP listeners on the target's address from OPEN_TCP_BASE, bound in its namespace:
/// nmap finds them open. They accept nothing (a SYN scan completes no connection).
pub fn open_tcp_listeners(lab: &Lab, ports: u16) -> anyhow::Result<Vec<std::net::TcpListener>> {
    let addr = lab.target_addr;
    lab.in_target(move || -> anyhow::Result<Vec<std::net::TcpListener>> {
        (0..ports)
            .map(|i| {
                let at = SocketAddrV4::new(addr, OPEN_TCP_BASE + i);
                std::net::TcpListener::bind(at).with_context(|| format!("cannot listen on {at}"))
            })
            .collect()
    })?
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn a_bound_port_is_found_in_proc_net_udp() {
        let table = "   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n\
                     \x20 12: 00000000:2328 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 91234 2 0000000000000000 0\n";
        assert_eq!(udp_table_sockets(table, 9000), 1);
        assert_eq!(udp_table_sockets(table, 9001), 0);
        assert_eq!(udp_table_sockets(table, 0x0023), 0);
        // A SO_REUSEPORT group of two workers: two rows on the port.
        let group = format!("{table}\x20 13: 00000000:2328 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 91235 2 0000000000000000 0\n");
        assert_eq!(udp_table_sockets(&group, 9000), 2);
    }
}
