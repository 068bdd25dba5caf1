//! Connection tracking in the family's network namespaces: how many entries each namespace's
//! table holds (the `entries` column of /proc/PID/net/stat/nf_conntrack, which is that
//! namespace's `net.netfilter.nf_conntrack_count`) against the limit,
//! `net.netfilter.nf_conntrack_max`. The limit is one value for every namespace (read-only
//! outside the initial one on kernels 6.1 to 6.18), so it is read here, in scanprof's own.
//! Only the count is read: the table's drop counters are left to independent checks.

use serde::{Deserialize, Serialize};

const CONNTRACK_MAX: &str = "/proc/sys/net/netfilter/nf_conntrack_max";

/// The conntrack table of one network namespace of the family, at one instant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConntrackTable {
    /// network namespace inode, as the drop rows name it
    pub netns: u32,
    /// a family process in that namespace
    pub pid: u32,
    /// entries in the namespace's table (nf_conntrack_count)
    pub count: u64,
    /// net.netfilter.nf_conntrack_max; None when unreadable
    pub max: Option<u64>,
    /// where the family's packets went (addresses, or the prefix holding them), read when the
    /// table is full: what a NOTRACK rule for the scan matches
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub destinations: Vec<String>,
}

impl ConntrackTable {
    /// Whether the table holds FULL_SHARE of its maximum or more.
    pub fn nearly_full(&self) -> bool {
        self.max
            .is_some_and(|m| m > 0 && self.count as f64 >= FULL_SHARE * m as f64)
    }
}

/// A table holding this share of its maximum or more is full: once the kernel has had to
/// refuse an entry, it evicts unassured ones from 95% on.
pub const FULL_SHARE: f64 = 0.95;

/// Destinations named one by one up to this many; more are named by the prefix holding them.
const MAX_NAMED: usize = 4;

/// The addresses a rule should match: up to MAX_NAMED of them as they are, more as the
/// shortest prefix holding them all (`10.99.0.0/24`).
pub fn summarize(addrs: &[std::net::Ipv4Addr]) -> Vec<String> {
    let mut a: Vec<u32> = addrs.iter().map(|x| u32::from(*x)).collect();
    a.sort_unstable();
    a.dedup();
    match a.len() {
        0 => Vec::new(),
        n if n <= MAX_NAMED => a
            .iter()
            .map(|x| std::net::Ipv4Addr::from(*x).to_string())
            .collect(),
        _ => {
            let (lo, hi) = (a[0], a[a.len() - 1]);
            let len = (lo ^ hi).leading_zeros();
            let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
            vec![format!("{}/{len}", std::net::Ipv4Addr::from(lo & mask))]
        }
    }
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
            destinations: Vec::new(),
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
    fn destinations_are_named_or_summed_up_as_a_prefix() {
        let ip = |s: &str| s.parse::<std::net::Ipv4Addr>().unwrap();
        assert_eq!(summarize(&[ip("10.99.0.2"), ip("10.99.0.2")]), vec!["10.99.0.2"]);
        let many: Vec<_> = (1..=20).map(|i| std::net::Ipv4Addr::new(192, 0, 2, i)).collect();
        assert_eq!(summarize(&many), vec!["192.0.2.0/27"]);
        let wide = [
            ip("10.0.0.1"),
            ip("10.0.0.2"),
            ip("10.0.1.1"),
            ip("10.3.0.1"),
            ip("10.1.0.0"),
        ];
        assert_eq!(summarize(&wide), vec!["10.0.0.0/14"]);
        assert!(summarize(&[]).is_empty());
    }

    #[test]
    fn this_process_has_a_network_namespace() {
        assert!(netns_of(std::process::id()).is_some());
    }
}
