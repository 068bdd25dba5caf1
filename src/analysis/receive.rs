//! The receive funnel: what the family read through its receive syscalls and what died on the
//! way to its sockets before the read, over a tick or the run. Pure: it takes the cumulative
//! `CounterSample`s the send funnel takes and puts a `ReceiveView` on the Snapshot and Summary,
//! present only when the family receives.

use serde::{Deserialize, Serialize};

use super::snapshot::{DropRow, Stage};
use crate::collect::{CounterSample, DropClass, RecvCounters};
use crate::system::machine::ReceiveTunables;

/// Stage names of the receive funnel, in the order a packet for the family meets them: dropped
/// before the read (at its socket, in a backlog, in a packet socket's ring), the calls that read,
/// and the messages they returned.
pub const RECV_STAGES: [&str; 3] = ["recv_drops", "recv_calls", "recv_packets"];

/// The family's receive side over a tick (in a Snapshot) or over the run (in the Summary).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReceiveView {
    /// `RECV_STAGES`: recv_drops (packets), recv_calls (calls on datagram and packet sockets,
    /// failed ones included), recv_packets (messages those calls read); each with its count in
    /// the interval, per second, and since attach
    pub stages: Vec<Stage>,
    /// receive calls that failed in the interval (EAGAIN on a non-blocking socket, mostly)
    pub failed_calls: u64,
    /// bytes of the messages read in the interval
    pub bytes: u64,
    /// receive calls on stream sockets (TCP) in the interval, and the bytes they read
    pub stream_calls: u64,
    pub stream_bytes: u64,
    /// packets for the family dropped before its read in the interval (class `reply_loss`: at
    /// its socket, such as SOCKET_RCVBUFF, or on the way, such as CPU_BACKLOG), by reason,
    /// location, device and namespace
    pub drops: Vec<DropRow>,
    /// the receive sysctls as last read (net.core.rmem_max, rmem_default, netdev_max_backlog)
    pub tunables: ReceiveTunables,
    /// whether every drop at the family's sockets is seen as its (the kernel names the
    /// receiving socket of a drop, 6.8 and newer); false: only replies to addresses it sent to
    #[serde(default = "yes")]
    pub socket_drops_seen: bool,
}

fn yes() -> bool {
    true
}

impl ReceiveView {
    /// The count of one stage (0 when absent).
    pub fn count(&self, stage: &str) -> u64 {
        self.stages
            .iter()
            .find(|s| s.name == stage)
            .map_or(0, |s| s.count)
    }

    /// Drops before the read with this reason (`SOCKET_RCVBUFF`).
    pub fn drops_of(&self, reason: &str) -> u64 {
        self.drops
            .iter()
            .filter(|d| d.reason == reason)
            .map(|d| d.count)
            .sum()
    }
}

/// The family's receive counters, summed over its threads.
fn recv_totals(s: &CounterSample) -> RecvCounters {
    let mut r = RecvCounters::default();
    for t in &s.threads {
        r.add(&t.recv);
    }
    r
}

fn drops_before_read(s: &CounterSample) -> u64 {
    s.drops
        .iter()
        .filter(|d| d.class == DropClass::ReplyLoss)
        .map(|d| d.count)
        .sum()
}

/// The receive funnel between `prev` (None: since attach) and `now`, over `interval_s`;
/// `drops` are the interval's drop rows (all classes: the `reply_loss` ones are kept). None when
/// the family has not received and nothing for it was dropped before a read.
pub fn receive_view(
    now: &CounterSample,
    prev: Option<&CounterSample>,
    interval_s: f64,
    drops: &[DropRow],
) -> Option<ReceiveView> {
    let (r, d) = (recv_totals(now), drops_before_read(now));
    if !r.any() && d == 0 {
        return None;
    }
    let (r0, d0) = prev.map_or((RecvCounters::default(), 0), |p| {
        (recv_totals(p), drops_before_read(p))
    });
    let interval_s = interval_s.max(1e-9);
    let stage = |name: &str, total: u64, before: u64| {
        let count = total.saturating_sub(before);
        Stage {
            name: name.to_string(),
            count,
            pps: count as f64 / interval_s,
            total,
            ratio: None,
        }
    };
    Some(ReceiveView {
        stages: vec![
            stage(RECV_STAGES[0], d, d0),
            stage(RECV_STAGES[1], r.calls, r0.calls),
            stage(RECV_STAGES[2], r.packets, r0.packets),
        ],
        failed_calls: r.failed_calls.saturating_sub(r0.failed_calls),
        bytes: r.bytes.saturating_sub(r0.bytes),
        stream_calls: r.stream_calls.saturating_sub(r0.stream_calls),
        stream_bytes: r.stream_bytes.saturating_sub(r0.stream_bytes),
        drops: drops
            .iter()
            .filter(|d| d.class == DropClass::ReplyLoss && d.count > 0)
            .cloned()
            .collect(),
        tunables: now.tunables,
        socket_drops_seen: now.socket_drops_seen,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collect::{DropCount, ThreadCounters};

    fn sample(t_ns: u64, recv: RecvCounters, rcvbuf_drops: u64) -> CounterSample {
        CounterSample {
            t_ns,
            threads: vec![ThreadCounters {
                tid: 7,
                pid: 7,
                recv,
                ..Default::default()
            }],
            drops: vec![DropCount {
                reason: "SOCKET_RCVBUFF".into(),
                location: "__udp_enqueue_schedule_skb+0x1a0".into(),
                device: None,
                ifindex: 0,
                netns: 4026532000,
                class: DropClass::ReplyLoss,
                pid: Some(7),
                count: rcvbuf_drops,
            }],
            ..Default::default()
        }
    }

    fn row(reason: &str, class: DropClass, count: u64) -> DropRow {
        DropRow {
            reason: reason.into(),
            location: "x".into(),
            device: None,
            netns: 1,
            class,
            pid: Some(7),
            count,
            rate: count as f64,
        }
    }

    #[test]
    fn a_family_that_never_receives_has_no_receive_funnel() {
        let s = sample(1_000_000_000, RecvCounters::default(), 0);
        assert_eq!(receive_view(&s, None, 1.0, &[]), None);
    }

    #[test]
    fn the_funnel_counts_the_interval_and_keeps_only_drops_before_the_read() {
        let r = |calls, failed, packets| RecvCounters {
            calls,
            failed_calls: failed,
            packets,
            bytes: packets * 100,
            stream_calls: 0,
            stream_bytes: 0,
        };
        let prev = sample(1_000_000_000, r(100, 10, 90), 50);
        let now = sample(3_000_000_000, r(1100, 110, 990), 850);
        let rows = [
            row("SOCKET_RCVBUFF", DropClass::ReplyLoss, 800),
            row("NO_SOCKET", DropClass::Expected, 9),
            row("QDISC_DROP", DropClass::TargetLoss, 3),
        ];
        let v = receive_view(&now, Some(&prev), 2.0, &rows).expect("the family receives");
        assert_eq!(v.count("recv_calls"), 1000);
        assert_eq!(v.count("recv_packets"), 900);
        assert_eq!(v.count("recv_drops"), 800);
        let packets = &v.stages[2];
        assert_eq!((packets.total, packets.pps), (990, 450.0));
        assert_eq!((v.failed_calls, v.bytes), (100, 90_000));
        assert_eq!(v.drops.len(), 1);
        assert_eq!(v.drops_of("SOCKET_RCVBUFF"), 800);
        assert_eq!(v.drops_of("NO_SOCKET"), 0);
        // Since attach (the summary): the totals themselves.
        let run = receive_view(&now, None, 3.0, &rows).expect("the family receives");
        assert_eq!((run.count("recv_packets"), run.count("recv_drops")), (990, 850));
    }

    #[test]
    fn drops_at_a_socket_the_family_never_read_make_a_funnel() {
        let s = sample(1_000_000_000, RecvCounters::default(), 5);
        let v = receive_view(&s, None, 1.0, &[]).expect("drops before a read");
        assert_eq!((v.count("recv_drops"), v.count("recv_packets")), (5, 0));
    }
}
