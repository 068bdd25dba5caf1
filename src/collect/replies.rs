//! Replies that arrived at the host for the family's flows (probes/replies.bpf.c): packets from
//! an address the family sent to, on a device its packets used, counted by kind before any socket,
//! ring or drop sees them. Cumulative since attach; `analysis::replies` makes the reply funnel.

use serde::{Deserialize, Serialize};

/// Packets that arrived from the family's destinations since attach, by kind (enum
/// sp_reply_kind in probes/include/wire.h), summed over CPUs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplyCounts {
    /// TCP SYN+ACK (an open port), packets
    pub tcp_synack: u64,
    /// TCP RST (a closed port), packets
    pub tcp_rst: u64,
    /// other TCP with ACK or FIN (a connection's own traffic), packets
    pub tcp_other: u64,
    /// ICMP or ICMPv6 destination unreachable, packets
    pub icmp_unreachable: u64,
    /// ICMP or ICMPv6 echo reply, packets
    pub icmp_echo_reply: u64,
    /// other ICMP errors and replies (time exceeded, timestamp reply...), packets
    pub icmp_other: u64,
    /// UDP, packets
    pub udp: u64,
    /// any other protocol, packets
    pub other: u64,
    /// UDP on a loopback device, where a probe and its reply have the same addresses: not told
    /// apart, so not counted as replies, packets
    pub udp_loopback: u64,
}

impl ReplyCounts {
    /// From the probe's per-kind counters, in enum sp_reply_kind's order.
    pub fn from_kinds(k: &[u64; crate::probes::REPLY_KINDS]) -> ReplyCounts {
        ReplyCounts {
            tcp_synack: k[0],
            tcp_rst: k[1],
            tcp_other: k[2],
            icmp_unreachable: k[3],
            icmp_echo_reply: k[4],
            icmp_other: k[5],
            udp: k[6],
            other: k[7],
            udp_loopback: k[8],
        }
    }

    /// Replies of every kind counted as such (not `udp_loopback`), packets.
    pub fn total(&self) -> u64 {
        self.tcp_synack
            + self.tcp_rst
            + self.tcp_other
            + self.icmp_unreachable
            + self.icmp_echo_reply
            + self.icmp_other
            + self.udp
            + self.other
    }

    /// The counts since `before` (each kind, saturating: a counter never goes back).
    pub fn since(&self, before: &ReplyCounts) -> ReplyCounts {
        ReplyCounts {
            tcp_synack: self.tcp_synack.saturating_sub(before.tcp_synack),
            tcp_rst: self.tcp_rst.saturating_sub(before.tcp_rst),
            tcp_other: self.tcp_other.saturating_sub(before.tcp_other),
            icmp_unreachable: self.icmp_unreachable.saturating_sub(before.icmp_unreachable),
            icmp_echo_reply: self.icmp_echo_reply.saturating_sub(before.icmp_echo_reply),
            icmp_other: self.icmp_other.saturating_sub(before.icmp_other),
            udp: self.udp.saturating_sub(before.udp),
            other: self.other.saturating_sub(before.other),
            udp_loopback: self.udp_loopback.saturating_sub(before.udp_loopback),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_map_in_wire_order_and_loopback_udp_is_no_reply() {
        let c = ReplyCounts::from_kinds(&[1, 2, 3, 4, 5, 6, 7, 8, 100]);
        assert_eq!(
            (c.tcp_synack, c.icmp_unreachable, c.udp, c.udp_loopback),
            (1, 4, 7, 100)
        );
        assert_eq!(c.total(), 36);
        let later = ReplyCounts { tcp_rst: 12, ..c };
        assert_eq!(
            later.since(&c),
            ReplyCounts {
                tcp_rst: 10,
                ..Default::default()
            }
        );
    }
}
