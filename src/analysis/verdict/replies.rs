//! `lost_beyond_host`: a scanner's probes went unanswered at this host while nothing here
//! dropped the replies that did arrive. The figures are the reply funnel's (`ReplyFunnel`):
//! probes sent, replies that arrived from the addresses the family sent to (counted on arrival,
//! before any socket or ring), what its sockets took and what was dropped here. The share is the
//! unanswered probes over the probes sent. It applies only to a family that reads replies (a
//! receive call on a datagram or packet socket since attach, or a packet socket it reads): a
//! flood that reads nothing expects no answer; nor does a sender whose profile says it reads no
//! replies (`reads_replies = false`: the reference sender, tcpreplay, iperf3), even when a
//! sniffer of its own reads its packet socket.

use super::facts::Facts;
use super::units::{pct, pps};
use super::{verdict, Cause, Kind, Verdict, MIN_DROPS, MIN_PACKETS, MIN_SHARE, WEAK_SHARE};
use crate::analysis::replies::ReplyFunnel;
use crate::analysis::snapshot::StageName;

/// Linux's defaults for the ICMP errors a host sends (net.ipv4.icmp_ratelimit, ms between two
/// to one destination after a burst of 6; net.ipv4.icmp_msgs_per_sec, for all destinations).
const ICMP_RATELIMIT_MS: u32 = 1000;
const ICMP_MSGS_PER_SEC: u32 = 1000;

/// Whether the family reads replies: it made a receive call on a datagram or packet socket
/// since attach, or holds a packet socket it reads (a ring, or a queue it read).
fn reads_replies(f: &Facts) -> bool {
    f.receive.is_some_and(|r| {
        r.stages
            .iter()
            .any(|s| s.name == StageName::RecvCalls && s.total > 0)
            || r.rings.iter().any(|v| v.is_reader())
    })
}

pub(super) fn lost_beyond_host(f: &Facts) -> Option<Verdict> {
    let r: &ReplyFunnel = f.replies?;
    // A sender whose profile expects no answers (the reference sender, tcpreplay, iperf3) lost
    // nothing when none came, even with a sniffer of its own in the family.
    let expects_replies = f.scanner.is_none_or(|s| !s.expects_no_replies);
    if !expects_replies || !reads_replies(f) || r.probes == 0 {
        return None;
    }
    // Probes dropped on this host (a lab's target namespace is on it) are the other loss
    // verdicts': only what no drop here accounts for went missing beyond it.
    let share = r.beyond_host_share();
    if r.beyond_host < MIN_DROPS || share < MIN_SHARE {
        return None;
    }
    let over = f.over();
    let per_s = |n: u64| pps(n as f64 / f.receive_s.max(1e-9));
    let a = &r.arrived;
    let here = match (r.probes_dropped_here, r.dropped_here) {
        (0, 0) => "none dropped here".to_string(),
        (p, d) => {
            format!("beside the {p} probes and {d} replies dropped on this host (the other loss verdicts)")
        }
    };
    let sentence = format!(
        "{} of {} probes unanswered {over} ({}), {here}: the loss is beyond this host (or the probes met no host, or a filter that drops silently).",
        r.beyond_host,
        r.probes,
        pct(share)
    );
    let mut evidence = vec![
        format!(
            "{} probes sent {over}; {} replies arrived at this host from the addresses they went to ({}, {} per probe): {} SYN-ACK, {} RST, {} other TCP, {} ICMP unreachable, {} echo reply, {} other ICMP, {} UDP, {} other",
            r.probes,
            r.arrived_total,
            per_s(r.arrived_total),
            r.reply_ratio.map_or("-".to_string(), |x| format!("{x:.3}")),
            a.tcp_synack,
            a.tcp_rst,
            a.tcp_other,
            a.icmp_unreachable,
            a.icmp_echo_reply,
            a.icmp_other,
            a.udp,
            a.other
        ),
        format!(
            "{} packets delivered to the family's sockets and packet rings {over}; {} replies dropped on this host before its read; {} of the family's probes dropped on this host after sending",
            r.delivered, r.dropped_here, r.probes_dropped_here
        ),
    ];
    if a.udp_loopback > 0 {
        evidence.push(format!(
            "{} UDP packets on a loopback device are not counted as replies: there a probe and its reply carry the same addresses",
            a.udp_loopback
        ));
    }
    let mut step = String::new();
    // ICMP errors answer UDP probes to closed ports, and a Linux target rate-limits them.
    if a.icmp_unreachable > 0 && a.icmp_unreachable * 4 >= r.arrived_total {
        evidence.push(format!(
            "{} of the replies were ICMP unreachable ({}): the answer to a UDP probe of a closed port, which the target rate-limits",
            a.icmp_unreachable,
            per_s(a.icmp_unreachable)
        ));
        step.push_str(&format!(
            "A Linux target sends ICMP errors to one source at most once per net.ipv4.icmp_ratelimit ms ({ICMP_RATELIMIT_MS} by default, after a burst of 6) and at most net.ipv4.icmp_msgs_per_sec ({ICMP_MSGS_PER_SEC}) in all: a UDP scan of closed ports gets no more answers than that, whatever its rate; scan slower, or read silence as open|filtered. "
        ));
    }
    step.push_str(
        "Check the path beyond this host: run `scanprof sweep` over a range of rates and see whether the reply ratio falls as the rate rises (a policer, a full queue or a rate limit on the path loses more at higher rates); a ratio that stays low at every rate is silence (no host, a filter), not loss.",
    );
    Some(verdict(
        Cause::LostBeyondHost,
        Kind::Loss,
        sentence,
        share,
        evidence,
        step,
        f.thin() || r.probes < MIN_PACKETS || share < WEAK_SHARE,
    ))
}
