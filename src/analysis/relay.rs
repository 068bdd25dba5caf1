//! The relay funnel: for a family declared a relay (`--relay-fanout N`: it writes each packet
//! it reads to N outputs) that reads packets and sends them on, the ingress read rate
//! against the egress send rate, the amplification (egress / ingress), and where the
//! difference went: dropped by the kernel before the read (at the family's sockets), read but
//! never forwarded (the relay's own drops: reads x fan-out - sends, when the fan-out is known),
//! and egress refused (ENOBUFS, EAGAIN) or blocked. The thread time budget says whether the
//! relay's threads spend their CPU sending or not (reading and their own work). Pure: it reads
//! the run's Summary figures, and makes the Summary's `RelayView` (declared with the Summary
//! in snapshot.rs, so that the two modules do not import each other).

pub use super::snapshot::RelayView;
use super::snapshot::{StageName, Summary};
use crate::collect::TimeBudget;

/// Send errors of an egress the kernel refused for now (a full qdisc, a full socket buffer): a
/// relay retries them.
pub const REFUSED_ERRNOS: [&str; 2] = ["ENOBUFS", "EAGAIN"];

/// The relay funnel of a run: None unless the family is declared a relay (a fan-out) and both
/// read and sent packets. A scanner that reads its replies is no relay: without the
/// declaration, its replies and probes are not a funnel.
pub fn relay_view(s: &Summary, fanout: Option<u32>) -> Option<RelayView> {
    let fanout = fanout.filter(|&n| n > 0)?;
    let r = s.receive.as_ref()?;
    let read = r.count(StageName::RecvPackets);
    if read == 0 || s.packets == 0 {
        return None;
    }
    let secs = s.duration_s.max(1e-9);
    let kernel_drops = r.count(StageName::RecvDrops);
    let mut reasons: Vec<(String, u64)> = Vec::new();
    for d in &r.drops {
        match reasons.iter_mut().find(|(n, _)| *n == d.reason) {
            Some((_, c)) => *c += d.count,
            None => reasons.push((d.reason.clone(), d.count)),
        }
    }
    reasons.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let unsent = (read * u64::from(fanout)).saturating_sub(s.packets);
    let b: TimeBudget = s.budget;
    let busy = b.send_ns + b.blocked_send_ns + b.other_ns;
    Some(RelayView {
        fanout,
        read,
        read_pps: read as f64 / secs,
        sent: s.packets,
        sent_pps: s.packets as f64 / secs,
        amplification: s.packets as f64 / read as f64,
        kernel_drops,
        kernel_drop_reasons: reasons,
        kernel_drops_seen: r.socket_drops_seen,
        arrived: read + kernel_drops,
        unsent,
        own_drops: unsent / u64::from(fanout),
        refused: REFUSED_ERRNOS
            .iter()
            .map(|e| s.errors.get(*e).copied().unwrap_or(0))
            .sum(),
        send_ns: b.send_ns,
        blocked_send_ns: b.blocked_send_ns,
        other_ns: b.other_ns,
        sleep_ns: b.sleep_ns,
        egress_time_share: (b.send_ns + b.blocked_send_ns) as f64 / busy.max(1) as f64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::receive::ReceiveView;
    use crate::analysis::snapshot::{DropRow, Stage};
    use crate::collect::DropClass;

    pub(crate) fn relay_summary(
        read: u64,
        kernel_drops: u64,
        sent: u64,
        refused: u64,
        budget: TimeBudget,
    ) -> Summary {
        let (_, mut s) = crate::views::fixtures::rich_run();
        let stage = |name: &str, n: u64| Stage {
            name: name.parse().unwrap(),
            count: n,
            pps: 0.0,
            total: n,
            ratio: None,
        };
        s.duration_s = 2.0;
        s.packets = sent;
        s.errors = [("ENOBUFS".to_string(), refused), ("EPERM".to_string(), 5)].into();
        s.budget = budget;
        let row = |reason: &str, count| DropRow {
            reason: reason.into(),
            location: "packet_rcv".into(),
            device: None,
            netns: 1,
            class: DropClass::ReplyLoss,
            pid: Some(7),
            count,
            rate: 0.0,
        };
        s.receive = Some(ReceiveView {
            stages: vec![
                stage("recv_drops", kernel_drops),
                stage("recv_calls", read),
                stage("recv_packets", read),
            ],
            socket_drops_seen: true,
            drops: vec![
                row("PACKET_SOCK_ERROR", kernel_drops - 10),
                row("CPU_BACKLOG", 4),
                row("CPU_BACKLOG", 6),
            ],
            ..Default::default()
        });
        s
    }

    #[test]
    fn the_funnel_splits_what_arrived_into_forwarded_own_drops_and_kernel_drops() {
        let budget = TimeBudget {
            send_ns: 600,
            blocked_send_ns: 150,
            other_ns: 250,
            sleep_ns: 7,
            ..Default::default()
        };
        // 1,000 read, 200 dropped before the read, 2,400 sent of the 3,000 a 1 -> 3 fan-out
        // calls for: 200 packets read and never forwarded.
        let s = relay_summary(1_000, 200, 2_400, 900, budget);
        let v = relay_view(&s, Some(3)).expect("the family reads and sends");
        assert_eq!(
            (v.read, v.sent, v.kernel_drops, v.arrived),
            (1_000, 2_400, 200, 1_200)
        );
        assert_eq!((v.read_pps, v.sent_pps), (500.0, 1_200.0));
        assert!((v.amplification - 2.4).abs() < 1e-12);
        assert_eq!((v.unsent, v.own_drops), (600, 200));
        assert_eq!(v.refused, 900, "ENOBUFS counted, EPERM not");
        assert_eq!(
            v.kernel_drop_reasons,
            [
                ("PACKET_SOCK_ERROR".to_string(), 190),
                ("CPU_BACKLOG".to_string(), 10)
            ]
        );
        assert!((v.egress_time_share - 0.75).abs() < 1e-12);
        assert!(v.kernel_drops_seen);
        // Not declared a relay (a scanner reading its replies): no relay funnel.
        assert_eq!(relay_view(&s, None), None);
        assert_eq!(relay_view(&s, Some(0)), None);
        // More sent than the fan-out calls for: nothing unsent.
        let s = relay_summary(1_000, 200, 3_500, 0, budget);
        assert_eq!(relay_view(&s, Some(3)).unwrap().own_drops, 0);
    }

    #[test]
    fn no_relay_funnel_without_both_reads_and_sends() {
        let s = relay_summary(1_000, 200, 0, 0, TimeBudget::default());
        assert_eq!(relay_view(&s, Some(3)), None);
        let mut s = relay_summary(1_000, 200, 10, 0, TimeBudget::default());
        s.receive = None;
        assert_eq!(relay_view(&s, Some(3)), None);
    }
}
