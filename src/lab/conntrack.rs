//! A full conntrack table in the sender's namespace: the global limit lowered for the run
//! (restored by a `SysctlHold`) and the table filled before the sender starts.

use std::net::SocketAddrV4;
use std::time::Duration;

use anyhow::{bail, Context};
use serde::Serialize;

use crate::netlab::Lab;
use crate::system::netstat::{self};

/// One column of /proc/net/stat/nf_conntrack, summed over the CPUs' rows (hex; `entries` is
/// the same in every row and is not summed).
pub fn conntrack_stat(text: &str, column: &str) -> Option<u64> {
    let mut lines = text.lines();
    let at = lines.next()?.split_whitespace().position(|c| c == column)?;
    let rows: Vec<u64> = lines
        .filter_map(|l| u64::from_str_radix(l.split_whitespace().nth(at)?, 16).ok())
        .collect();
    match column {
        "entries" => rows.first().copied(),
        _ => (!rows.is_empty()).then(|| rows.iter().sum()),
    }
}

pub const CONNTRACK_MAX: &str = "/proc/sys/net/netfilter/nf_conntrack_max";
/// The global limit the conntrack scenario sets for its run.
const CONNTRACK_LAB_MAX: u64 = 64;
/// TCP port of the target's listener the tracked connections go to.
const CONNTRACK_FILL_PORT: u16 = 7000;

/// Connection tracking on in the sender namespace (an nftables rule on `ct state`), and its
/// table filled: `net.netfilter.nf_conntrack_max` is one value for every namespace (read-only
/// outside the initial one on kernels 6.1 to 6.18), so the global value is lowered to
/// CONNTRACK_LAB_MAX for the run, then max - free TCP connections (assured entries, never
/// evicted) are opened and held. Refused when another namespace tracks connections, whose new
/// connections the low limit would refuse too. The saved limit is restored by `finish`, and on
/// drop (an error or a panic, through its [`SysctlHold`](super::sysctl::SysctlHold)); after
/// a SIGKILL of scanprof the next `scanprof lab` restores it.
pub struct ConntrackFill {
    /// the global limit lowered for the run (declared first: restored before the connections
    /// close)
    max: Option<super::sysctl::SysctlHold>,
    held: Vec<std::net::TcpStream>,
    _listener: Option<std::net::TcpListener>,
    free: u64,
}

/// What the conntrack scenario set up.
#[derive(Debug, Clone, Serialize)]
pub struct ConntrackReport {
    /// the global nf_conntrack_max before the run, restored after it
    pub saved_max: u64,
    /// the value set for the run
    pub max_set: u64,
    /// tracked TCP connections held open through the run
    pub held: usize,
    /// entries left free for the sender's flows
    pub free: u64,
}

impl ConntrackFill {
    pub fn start(lab: &Lab, free: u64) -> anyhow::Result<ConntrackFill> {
        let read_max = || -> anyhow::Result<u64> {
            let t = std::fs::read_to_string(CONNTRACK_MAX).with_context(|| {
                format!("cannot read {CONNTRACK_MAX}: is connection tracking in this kernel?")
            })?;
            t.trim().parse().context("nf_conntrack_max is not a number")
        };
        read_max()?; // connection tracking is in this kernel, its limit a number
        let sender_netns = netns_id_of(&lab.sender_ns);
        if let Some((netns, pid, entries)) = other_tracking_namespace(sender_netns) {
            bail!(
                "connection tracking holds {entries} entries in network namespace {netns} (pid {pid}): \
                 lowering the global nf_conntrack_max for this scenario would refuse its new connections too; \
                 run it where nothing else tracks connections"
            );
        }
        for args in [
            &["add", "table", "ip", "scanprof_lab"][..],
            &[
                "add",
                "chain",
                "ip",
                "scanprof_lab",
                "out",
                "{ type filter hook output priority 0 ; }",
            ],
            &[
                "add",
                "rule",
                "ip",
                "scanprof_lab",
                "out",
                "ct",
                "state",
                "new",
                "accept",
            ],
        ] {
            netstat::run_in_netns(Some(&lab.sender_ns), "nft", args).context(
                "cannot turn connection tracking on in the lab's sender namespace (is nftables installed? \
                 scripts/setup installs it)",
            )?;
        }
        let mut fill = ConntrackFill {
            max: None,
            held: Vec::new(),
            _listener: None,
            free,
        };
        fill.max = Some(super::sysctl::SysctlHold::set(
            CONNTRACK_MAX,
            &CONNTRACK_LAB_MAX.to_string(),
        )?);
        let at = SocketAddrV4::new(lab.target_addr, CONNTRACK_FILL_PORT);
        fill._listener = Some(lab.in_target(move || std::net::TcpListener::bind(at))??);
        let n = CONNTRACK_LAB_MAX.saturating_sub(free) as usize;
        fill.held = lab.in_sender(move || -> std::io::Result<Vec<std::net::TcpStream>> {
            (0..n).map(|_| std::net::TcpStream::connect(at)).collect()
        })??;
        // The final ACK of each handshake makes its entry assured; wait until all are counted.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            let count = netstat::run_in_netns(Some(&lab.sender_ns), "cat", &["/proc/net/stat/nf_conntrack"])
                .ok()
                .and_then(|t| conntrack_stat(&t, "entries"));
            if count == Some(n as u64) {
                break;
            }
            anyhow::ensure!(
                std::time::Instant::now() < deadline,
                "the sender namespace's conntrack table holds {count:?} entries, not the {n} connections opened"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(fill)
    }

    /// Restores the global limit and closes the connections.
    pub fn finish(mut self) -> anyhow::Result<ConntrackReport> {
        let max = self.max.take().context("the conntrack limit was never set")?;
        let saved_max = max.saved().parse().unwrap_or(0);
        max.restore()?;
        Ok(ConntrackReport {
            saved_max,
            max_set: CONNTRACK_LAB_MAX,
            held: std::mem::take(&mut self.held).len(),
            free: self.free,
        })
    }
}

/// The network namespace inode of a named lab namespace.
fn netns_id_of(ns: &str) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(format!("/run/netns/{ns}"))
        .ok()
        .map(|m| m.ino())
}

/// A network namespace other than `except` whose conntrack table holds entries: (inode, a pid
/// in it, entries), from every process's /proc/PID/net/stat/nf_conntrack.
fn other_tracking_namespace(except: Option<u64>) -> Option<(u64, u32, u64)> {
    let mut seen = std::collections::BTreeSet::new();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Some(netns) = crate::system::conntrack::netns_of(pid).map(u64::from) else {
            continue;
        };
        if Some(netns) == except || !seen.insert(netns) {
            continue;
        }
        let entries = std::fs::read_to_string(format!("/proc/{pid}/net/stat/nf_conntrack"))
            .ok()
            .and_then(|t| conntrack_stat(&t, "entries"))
            .unwrap_or(0);
        if entries > 0 {
            return Some((netns, pid, entries));
        }
    }
    None
}
