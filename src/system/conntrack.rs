//! Connection tracking in the family's network namespaces: how many entries each namespace's
//! table holds (the `entries` column of /proc/PID/net/stat/nf_conntrack, which is that
//! namespace's `net.netfilter.nf_conntrack_count`) against the limit,
//! `net.netfilter.nf_conntrack_max`. The limit is one value for every namespace (read-only
//! outside the initial one on kernels 6.1 to 6.18), so it is read here, in scanprof's own.
//! Only the count is read: the table's drop counters are left to independent checks.

use serde::{Deserialize, Serialize};

const CONNTRACK_MAX: &str = "/proc/sys/net/netfilter/nf_conntrack_max";

/// The conntrack table of one network namespace of the family, at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConntrackTable {
    /// network namespace inode, as the drop rows name it
    pub netns: u32,
    /// a family process in that namespace
    pub pid: u32,
    /// entries in the namespace's table (nf_conntrack_count)
    pub count: u64,
    /// net.netfilter.nf_conntrack_max; None when unreadable
    pub max: Option<u64>,
}

/// The `entries` column of /proc/net/stat/nf_conntrack (hex; every CPU's row repeats it).
pub fn parse_entries(stat: &str) -> Option<u64> {
    let mut lines = stat.lines();
    let header = lines.next()?;
    let at = header.split_whitespace().position(|c| c == "entries")?;
    let row = lines.next()?;
    u64::from_str_radix(row.split_whitespace().nth(at)?, 16).ok()
}

/// The network namespace inode of a process (`net:[4026531833]`).
pub fn netns_of(pid: u32) -> Option<u32> {
    let link = std::fs::read_link(format!("/proc/{pid}/ns/net")).ok()?;
    let s = link.to_str()?;
    s.strip_prefix("net:[")?
        .strip_suffix(']')?
        .parse::<u64>()
        .ok()
        .map(|v| v as u32)
}

/// The tables of the namespaces `pids` are in, one per namespace, those holding entries only
/// (a namespace without connection tracking has none). Empty without conntrack in the kernel.
pub fn read_tables(pids: &[u32]) -> Vec<ConntrackTable> {
    let mut out: Vec<ConntrackTable> = Vec::new();
    let mut max: Option<Option<u64>> = None;
    for &pid in pids {
        let Some(netns) = netns_of(pid) else { continue };
        if out.iter().any(|t| t.netns == netns) {
            continue;
        }
        let Some(count) = std::fs::read_to_string(format!("/proc/{pid}/net/stat/nf_conntrack"))
            .ok()
            .and_then(|t| parse_entries(&t))
        else {
            continue;
        };
        if count == 0 {
            continue;
        }
        let max = *max.get_or_insert_with(|| {
            std::fs::read_to_string(CONNTRACK_MAX)
                .ok()
                .and_then(|t| t.trim().parse().ok())
        });
        out.push(ConntrackTable {
            netns,
            pid,
            count,
            max,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_entries_column_is_the_namespaces_count() {
        let stat = "entries  clashres found new invalid ignore delete chainlength insert insert_failed drop early_drop icmp_error  expect_new expect_create expect_delete search_restart\n\
                    00000040  00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 000000c8 00000000 00000000  00000000 00000000 00000000 00000000\n\
                    00000040  00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000  00000000 00000000 00000000 00000000\n";
        assert_eq!(parse_entries(stat), Some(64));
        // 6.1's header has no clashres column; entries is still the first.
        let old = "entries  searched found new invalid ignore delete delete_list insert insert_failed drop early_drop icmp_error  expect_new expect_create expect_delete search_restart\n\
                   0000000a  00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000  00000000 00000000 00000000 00000000\n";
        assert_eq!(parse_entries(old), Some(10));
        assert_eq!(parse_entries("garbage\n"), None);
    }

    #[test]
    fn this_process_has_a_network_namespace() {
        assert!(netns_of(std::process::id()).is_some());
    }
}
