//! Independent counters from iproute2: qdisc statistics (`tc -s -j qdisc show`) and
//! link statistics (`ip -s -j link show`), optionally read inside a named network namespace.
//! The profiler compares its BPF-derived numbers against these, and the test lab uses them
//! to see where packets went (sent by the qdisc, dropped by it, received by the peer).

use std::process::Command;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

/// One qdisc of a device, as reported by `tc -s qdisc show`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct QdiscStats {
    /// qdisc type, e.g. "tbf", "noqueue", "pfifo"
    pub kind: String,
    /// handle such as "8001:"
    pub handle: String,
    /// parent class such as "8001:1"; None for the root qdisc
    pub parent: Option<String>,
    /// bytes the qdisc passed on to the device
    pub sent_bytes: u64,
    /// packets the qdisc passed on to the device
    pub sent_packets: u64,
    /// packets the qdisc dropped
    pub drops: u64,
    /// times the qdisc held a packet back because it was over its limit (shaping)
    pub overlimits: u64,
    /// packets handed back to the qdisc by the driver
    pub requeues: u64,
    /// bytes queued at the time of the reading
    pub backlog_bytes: u64,
    /// packets queued at the time of the reading
    pub qlen: u64,
}

/// Counters of one network device, as reported by `ip -s link show`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct LinkStats {
    pub ifname: String,
    pub ifindex: u32,
    /// kind of the root qdisc, e.g. "tbf", "noqueue"
    pub qdisc: String,
    /// device transmit queue length, in packets
    pub txqlen: u64,
    pub tx_packets: u64,
    pub tx_bytes: u64,
    /// packets dropped on transmit
    pub tx_dropped: u64,
    pub tx_errors: u64,
    pub rx_packets: u64,
    pub rx_bytes: u64,
    /// packets dropped on receive
    pub rx_dropped: u64,
}

/// The fields of one `tc -j` qdisc object that we use; tc omits some for some kinds.
#[derive(Deserialize, Default)]
#[serde(default)]
struct TcQdisc {
    kind: String,
    handle: String,
    parent: Option<String>,
    bytes: u64,
    packets: u64,
    drops: u64,
    overlimits: u64,
    requeues: u64,
    backlog: u64,
    qlen: u64,
}

/// The fields of one `ip -j link` object that we use.
#[derive(Deserialize, Default)]
#[serde(default)]
struct IpLink {
    ifname: String,
    ifindex: u32,
    qdisc: String,
    txqlen: u64,
    /// older iproute2 prints "stats" instead of "stats64"
    #[serde(alias = "stats")]
    stats64: IpLinkStats,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct IpLinkStats {
    rx: IpLinkCounters,
    tx: IpLinkCounters,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct IpLinkCounters {
    bytes: u64,
    packets: u64,
    errors: u64,
    dropped: u64,
}

/// All qdiscs of `dev` (root first, then children), read in `netns` (None = current namespace).
pub fn qdisc_stats(netns: Option<&str>, dev: &str) -> Result<Vec<QdiscStats>> {
    let text = run_in_netns(netns, "tc", &["-s", "-j", "qdisc", "show", "dev", dev])?;
    parse_qdisc_json(&text).with_context(|| format!("parsing tc qdisc output for {dev}"))
}

/// Counters of `dev`, read in `netns` (None = current namespace).
pub fn link_stats(netns: Option<&str>, dev: &str) -> Result<LinkStats> {
    let text = run_in_netns(netns, "ip", &["-s", "-j", "link", "show", "dev", dev])?;
    parse_link_json(&text).with_context(|| format!("parsing ip link output for {dev}"))
}

/// Parses the output of `tc -s -j qdisc show dev X`.
pub fn parse_qdisc_json(text: &str) -> Result<Vec<QdiscStats>> {
    let qdiscs: Vec<TcQdisc> = serde_json::from_str(text).context("tc qdisc JSON")?;
    Ok(qdiscs
        .into_iter()
        .map(|q| QdiscStats {
            kind: q.kind,
            handle: q.handle,
            parent: q.parent,
            sent_bytes: q.bytes,
            sent_packets: q.packets,
            drops: q.drops,
            overlimits: q.overlimits,
            requeues: q.requeues,
            backlog_bytes: q.backlog,
            qlen: q.qlen,
        })
        .collect())
}

/// Parses the output of `ip -s -j link show dev X` (an array holding one device).
pub fn parse_link_json(text: &str) -> Result<LinkStats> {
    let links: Vec<IpLink> = serde_json::from_str(text).context("ip link JSON")?;
    let Some(link) = links.into_iter().next() else {
        bail!("ip link printed no device");
    };
    let (rx, tx) = (link.stats64.rx, link.stats64.tx);
    Ok(LinkStats {
        ifname: link.ifname,
        ifindex: link.ifindex,
        qdisc: link.qdisc,
        txqlen: link.txqlen,
        tx_packets: tx.packets,
        tx_bytes: tx.bytes,
        tx_dropped: tx.dropped,
        tx_errors: tx.errors,
        rx_packets: rx.packets,
        rx_bytes: rx.bytes,
        rx_dropped: rx.dropped,
    })
}

/// Runs `program` (`ip`, `tc`, `sysctl`, ...) with `args`, inside `netns` via
/// `ip netns exec` when given, and returns its stdout. The error names the command line,
/// its exit status and its stderr.
pub fn run_in_netns(netns: Option<&str>, program: &str, args: &[&str]) -> Result<String> {
    let mut words: Vec<&str> = match netns {
        Some(ns) => vec!["ip", "netns", "exec", ns, program],
        None => vec![program],
    };
    words.extend_from_slice(args);
    let line = words.join(" ");
    let out = Command::new(words[0])
        .args(&words[1..])
        .output()
        .with_context(|| format!("cannot run `{line}`"))?;
    if !out.status.success() {
        bail!(
            "`{line}` failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    String::from_utf8(out.stdout).with_context(|| format!("`{line}` printed non-UTF-8 output"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `tc -s -j qdisc show dev X` on a lab veth with tbf (1mbit, burst 4kb, limit 8kb) and a
    /// pfifo child, after a burst of 1000-byte datagrams (iproute2 6.1, kernel 6.18).
    const TBF_WITH_CHILD: &str = r#"[{"kind":"tbf","handle":"8001:","root":true,"refcnt":3,"options":{"rate":125000,"burst":4096,"lat":32768},"bytes":12000,"packets":18,"drops":289,"overlimits":311,"requeues":0,"backlog":0,"qlen":0},{"kind":"pfifo","handle":"10:","parent":"8001:1","options":{"limit":5},"bytes":0,"packets":0,"drops":0,"overlimits":0,"requeues":0,"backlog":0,"qlen":0}]"#;

    /// The same tbf while packets were still queued.
    const TBF_BACKLOGGED: &str = r#"[{"kind":"tbf","handle":"8001:","root":true,"refcnt":3,"options":{"rate":125000,"burst":4096,"lat":32768},"bytes":5748,"packets":12,"drops":289,"overlimits":301,"requeues":0,"backlog":6252,"qlen":6}]"#;

    /// `ip -s -j link show dev X` on the tbf side of a lab veth pair.
    const VETH_LINK: &str = r#"[{"ifindex":6,"link_index":5,"ifname":"capvs","flags":["BROADCAST","MULTICAST","UP","LOWER_UP"],"mtu":1500,"qdisc":"tbf","operstate":"UP","linkmode":"DEFAULT","group":"default","txqlen":1000,"link_type":"ether","address":"fe:bc:00:7f:4b:87","broadcast":"ff:ff:ff:ff:ff:ff","link_netnsid":1,"stats64":{"rx":{"bytes":4098,"packets":13,"errors":0,"dropped":0,"over_errors":0,"multicast":0},"tx":{"bytes":6880,"packets":14,"errors":0,"dropped":0,"carrier_errors":0,"collisions":0}}}]"#;

    #[test]
    fn parses_tbf_with_child_qdisc() -> Result<()> {
        let qdiscs = parse_qdisc_json(TBF_WITH_CHILD)?;
        assert_eq!(qdiscs.len(), 2);
        let (root, child) = (&qdiscs[0], &qdiscs[1]);
        assert_eq!((root.kind.as_str(), root.handle.as_str()), ("tbf", "8001:"));
        assert_eq!(root.parent, None);
        assert_eq!((root.sent_bytes, root.sent_packets), (12000, 18));
        assert_eq!((root.drops, root.overlimits, root.requeues), (289, 311, 0));
        assert_eq!(child.kind, "pfifo");
        assert_eq!(child.parent.as_deref(), Some("8001:1"));
        Ok(())
    }

    #[test]
    fn parses_backlog() -> Result<()> {
        let qdiscs = parse_qdisc_json(TBF_BACKLOGGED)?;
        assert_eq!((qdiscs[0].backlog_bytes, qdiscs[0].qlen), (6252, 6));
        Ok(())
    }

    #[test]
    fn parses_noqueue_and_tolerates_missing_fields() -> Result<()> {
        let qdiscs = parse_qdisc_json(r#"[{"kind":"noqueue","handle":"0:","root":true}]"#)?;
        assert_eq!(qdiscs[0].kind, "noqueue");
        assert_eq!(qdiscs[0].sent_packets, 0);
        assert!(parse_qdisc_json("[]")?.is_empty());
        Ok(())
    }

    #[test]
    fn parses_link() -> Result<()> {
        let link = parse_link_json(VETH_LINK)?;
        assert_eq!((link.ifname.as_str(), link.ifindex), ("capvs", 6));
        assert_eq!((link.qdisc.as_str(), link.txqlen), ("tbf", 1000));
        assert_eq!((link.tx_packets, link.tx_bytes), (14, 6880));
        assert_eq!((link.rx_packets, link.rx_bytes), (13, 4098));
        assert_eq!((link.tx_dropped, link.tx_errors, link.rx_dropped), (0, 0, 0));
        Ok(())
    }

    #[test]
    fn rejects_empty_or_broken_link_output() {
        assert!(parse_link_json("[]").is_err());
        assert!(parse_link_json("Cannot find device").is_err());
    }
}
