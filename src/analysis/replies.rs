//! The reply funnel of a scanner: the probes it sent, the replies that arrived at the host from
//! the addresses it sent to (by kind), what its sockets and rings took, and the replies dropped
//! here before it read them, over a tick or the run. Pure: it takes the cumulative
//! `CounterSample`s and the interval's `ReceiveView`, and puts a `ReplyFunnel` on the Snapshot
//! and the Summary when the reply counter was attached.

use serde::{Deserialize, Serialize};

use super::receive::ReceiveView;
use super::stage::{DropRow, StageName};
use crate::collect::replies::ReplyCounts;
use crate::collect::{CounterSample, DropClass};

/// Probes sent, replies arrived, delivered and dropped here, over a tick or the run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReplyFunnel {
    /// packets the family's send syscalls accepted in the interval (its probes); over the run,
    /// with the kernel's SYN retransmissions of its connects (`connect.kernel_syn_retransmits`)
    pub probes: u64,
    /// packets that arrived at the host in the interval from addresses the family sent to, on
    /// a device its packets used, by kind (counted before any socket, ring or drop)
    pub arrived: ReplyCounts,
    /// `arrived.total()`: the replies of every kind, packets
    pub arrived_total: u64,
    /// replies that arrived per probe sent, `arrived_total / probes`; None without probes in
    /// the interval (a reply to a probe of an earlier interval can push it above 1)
    pub reply_ratio: Option<f64>,
    /// probes no reply arrived for: `probes - arrived_total` (0 when more arrived)
    pub unanswered: u64,
    /// the family's own packets dropped on this host after sending in the interval (class
    /// `target_loss`, in any of its namespaces: a lab's target namespace too)
    pub probes_dropped_here: u64,
    /// unanswered probes that no drop on this host accounts for, `unanswered -
    /// probes_dropped_here`: lost beyond this host, or never answered there
    pub beyond_host: u64,
    /// packets the family's sockets took in the interval: read by its receive calls, plus the
    /// incoming frames queued to the packet sockets it reads (whatever they are: not only
    /// replies)
    pub delivered: u64,
    /// packets for the family dropped on this host before its read in the interval: drops of
    /// class `reply_loss` (its socket's buffer, a backlog...) plus the incoming frames its
    /// packet sockets dropped because their ring was full
    pub dropped_here: u64,
}

impl ReplyFunnel {
    /// The probes unanswered beyond this host as a share of the probes sent (0..1); 0 without
    /// probes.
    pub fn beyond_host_share(&self) -> f64 {
        self.beyond_host as f64 / self.probes.max(1) as f64
    }
}

/// The reply funnel between `prev` (None: since attach) and `now`, with `probes` the family's
/// packets sent in the interval, `receive` the interval's receive funnel and `drops` its drop
/// rows. None when the
/// reply counter was not attached, or when nothing was sent and nothing arrived.
pub fn reply_funnel(
    now: &CounterSample,
    prev: Option<&CounterSample>,
    probes: u64,
    receive: Option<&ReceiveView>,
    drops: &[DropRow],
) -> Option<ReplyFunnel> {
    let counts = now.replies?;
    let before = prev.and_then(|p| p.replies).unwrap_or_default();
    let arrived = counts.since(&before);
    let arrived_total = arrived.total();
    if probes == 0 && arrived_total == 0 {
        return None;
    }
    let (delivered, dropped_here) = receive.map_or((0, 0), |r| {
        let readers = || r.rings.iter().filter(|v| v.is_reader());
        let ring_taken: u64 = readers().map(|v| v.incoming() - v.incoming_dropped()).sum();
        let ring_dropped: u64 = readers().map(|v| v.incoming_dropped()).sum();
        let socket_dropped: u64 = r.drops.iter().map(|d| d.count).sum();
        (
            r.count(StageName::RecvPackets) + ring_taken,
            socket_dropped + ring_dropped,
        )
    });
    let probes_dropped_here = DropRow::sum_of(drops, DropClass::TargetLoss);
    let unanswered = probes.saturating_sub(arrived_total);
    Some(ReplyFunnel {
        probes,
        arrived,
        arrived_total,
        reply_ratio: (probes > 0).then(|| arrived_total as f64 / probes as f64),
        unanswered,
        probes_dropped_here,
        beyond_host: unanswered.saturating_sub(probes_dropped_here),
        delivered,
        dropped_here,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::stage::Stage;

    fn sample(rst: u64, udp_loopback: u64) -> CounterSample {
        CounterSample {
            replies: Some(ReplyCounts {
                tcp_rst: rst,
                udp_loopback,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn the_funnel_counts_the_interval_and_leaves_loopback_udp_out() {
        let (before, now) = (sample(100, 5), sample(107, 50));
        let recv = ReceiveView {
            stages: vec![Stage {
                name: StageName::RecvPackets,
                count: 6,
                pps: 0.0,
                total: 6,
                ratio: None,
            }],
            drops: vec![crate::analysis::stage::DropRow {
                reason: "SOCKET_RCVBUFF".into(),
                location: "sock_queue_rcv_skb".into(),
                device: None,
                netns: 1,
                class: crate::collect::DropClass::ReplyLoss,
                pid: Some(7),
                count: 1,
                rate: 1.0,
            }],
            ..Default::default()
        };
        let mut lost = recv.drops[0].clone();
        lost.class = DropClass::TargetLoss;
        lost.count = 3;
        let f = reply_funnel(&now, Some(&before), 1010, Some(&recv), &[lost]).unwrap();
        assert_eq!(
            (f.arrived_total, f.unanswered, f.delivered, f.dropped_here),
            (7, 1003, 6, 1)
        );
        assert_eq!((f.probes_dropped_here, f.beyond_host), (3, 1000));
        assert_eq!(f.arrived.udp_loopback, 45);
        assert!((f.reply_ratio.unwrap() - 7.0 / 1010.0).abs() < 1e-12);
        // Nothing sent and nothing arrived: no funnel; no counter: none either.
        assert_eq!(reply_funnel(&before, Some(&before), 0, None, &[]), None);
        assert_eq!(
            reply_funnel(&CounterSample::default(), None, 1010, None, &[]),
            None
        );
        // Replies after the last probe: counted, with no ratio.
        let late = reply_funnel(&now, Some(&before), 0, None, &[]).unwrap();
        assert_eq!(
            (late.arrived_total, late.reply_ratio, late.unanswered),
            (7, None, 0)
        );
    }
}
