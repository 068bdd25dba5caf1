//! Causes of a relay's losses (a family that reads packets and sends them on): its egress is the
//! bottleneck (`relay_egress_bound`: the outputs refuse sends, or sending takes most of its
//! time, and it drops what it cannot pass on), the kernel drops packets before its read while
//! reading takes its time (`relay_kernel_drops`), or it drops packets it read without sending
//! them while egress takes them (`relay_own_drops`). Each share is the packets lost as a share of
//! those that reached the relay (read + dropped before the read). From the run's relay funnel.

use super::facts::Facts;
use super::units::pct;
use super::{verdict, Cause, Kind, Verdict, MIN_DROPS, MIN_PACKETS};
use crate::analysis::snapshot::RelayView;
use crate::collect::DropClass;

/// Share of its busy time (on CPU, or blocked in a send) a relay must spend sending for its
/// egress to be the bottleneck without refusals.
pub(super) const EGRESS_TIME_SHARE: f64 = 0.5;

/// The relay funnel when it lost packets (to the kernel before its read, or its own).
fn losing<'a>(f: &Facts<'a>) -> Option<&'a RelayView> {
    f.relay.filter(|v| v.kernel_drops + v.own_drops > 0)
}

/// A relay that lost packets while its egress was the bottleneck: that alone is said.
pub(super) fn relay_egress_bound(f: &Facts) -> Option<Verdict> {
    let v = losing(f).filter(|v| egress_bound(v))?;
    Some(egress(f, v, v.own_drops))
}

/// Packets lost to the kernel before the relay's read, but for those at a full socket buffer or
/// backlog: the receive rules' verdicts have them already (`rcvbuf_overflow`,
/// `receiver_cpu_bound`...), with their sysctls, and they are not said twice.
pub(super) fn relay_kernel_drops(f: &Facts) -> Option<Verdict> {
    let v = losing(f).filter(|v| !egress_bound(v))?;
    let unclaimed: u64 = v
        .kernel_drop_reasons
        .iter()
        .filter(|(r, _)| !super::receive::handles(r))
        .map(|(_, n)| n)
        .sum();
    (unclaimed > 0).then(|| kernel(f, v, unclaimed))
}

/// Packets the relay read and dropped itself.
pub(super) fn relay_own_drops(f: &Facts) -> Option<Verdict> {
    let v = losing(f).filter(|v| !egress_bound(v) && v.own_drops > 0)?;
    Some(own_drops(f, v, v.own_drops))
}

/// Egress is the bottleneck: the outputs refused sends while packets were lost, or sending took
/// most of the relay's busy time.
fn egress_bound(v: &RelayView) -> bool {
    v.refused > 0 || v.egress_time_share >= EGRESS_TIME_SHARE
}

/// The funnel's figures, first lines of every relay verdict.
fn funnel_lines(f: &Facts, v: &RelayView) -> Vec<String> {
    let mut out = vec![
        format!(
            "ingress: {} packets read ({:.0}/s); egress: {} sent ({:.0}/s); amplification {:.2} of a 1 -> {} fan-out",
            v.read, v.read_pps, v.sent, v.sent_pps, v.amplification, v.fanout,
        ),
        format!(
            "{} packets reached the relay {}: {} dropped by the kernel before its read{}, {} read and never forwarded ({} sends missing)",
            v.arrived,
            f.over(),
            v.kernel_drops,
            reasons(v),
            v.own_drops,
            v.unsent
        ),
    ];
    let busy = v.send_ns + v.blocked_send_ns + v.other_ns;
    out.push(format!(
        "its sending threads' busy time: {} on CPU sending, {} blocked in sends, {} on CPU otherwise (reading, its own work); egress refused {} sends (ENOBUFS, EAGAIN)",
        pct(v.send_ns as f64 / busy.max(1) as f64),
        pct(v.blocked_send_ns as f64 / busy.max(1) as f64),
        pct(v.other_ns as f64 / busy.max(1) as f64),
        v.refused
    ));
    out
}

fn reasons(v: &RelayView) -> String {
    if v.kernel_drop_reasons.is_empty() {
        return String::new();
    }
    let list: Vec<String> = v
        .kernel_drop_reasons
        .iter()
        .take(3)
        .map(|(r, n)| format!("{r} {n}"))
        .collect();
    format!(" ({})", list.join(", "))
}

fn weak(v: &RelayView, lost: u64) -> bool {
    lost < MIN_DROPS || v.arrived < MIN_PACKETS
}

/// Devices where the family's packets were dropped in a qdisc: where egress refused them.
fn qdisc_devices(f: &Facts) -> Vec<String> {
    let mut devs: Vec<String> = f
        .drops
        .iter()
        .filter(|d| d.row.class == DropClass::TargetLoss && d.row.reason == "QDISC_DROP" && d.count > 0)
        .filter_map(|d| d.row.device.clone())
        .collect();
    devs.sort();
    devs.dedup();
    devs
}

fn egress(f: &Facts, v: &RelayView, own: u64) -> Verdict {
    let lost = v.kernel_drops + own;
    let share = lost as f64 / v.arrived.max(1) as f64;
    let mut evidence = funnel_lines(f, v);
    let devs = qdisc_devices(f);
    let next = if v.refused > 0 {
        let at = if devs.is_empty() {
            "the output devices".to_string()
        } else {
            devs.join(", ")
        };
        evidence.push(format!(
            "the qdisc of {at} dropped the refused sends (QDISC_DROP): a refused send is retried, so it is no loss of its own"
        ));
        format!(
            "The outputs take fewer packets than ingress x fan-out: raise their capacity (the qdisc on {at}: its rate and limit, `tc -s qdisc show dev DEV`; or a faster link), or lower the fan-out or the ingress rate. A larger buffer pool or receive buffer only delays the drops."
        )
    } else {
        format!(
            "The sends take its CPU ({} of its busy time): make each cheaper or fewer (batch them with sendmmsg, a PACKET_TX_RING, PACKET_QDISC_BYPASS), or spread the relay over threads (PACKET_FANOUT on the input). A larger receive buffer only delays the drops.",
            pct(v.egress_time_share)
        )
    };
    let why = if v.refused > 0 {
        format!("its outputs refused {} sends", v.refused)
    } else {
        format!("sending took {} of its busy time", pct(v.egress_time_share))
    };
    verdict(
        Cause::RelayEgressBound,
        Kind::Loss,
        format!(
            "The relay's egress is its bottleneck: {why}, and {lost} of the {} packets that reached it ({}) were lost: {} by the kernel before its read, {own} read and never forwarded.",
            v.arrived,
            pct(share),
            v.kernel_drops
        ),
        share,
        evidence,
        next,
        weak(v, lost),
    )
}

fn kernel(f: &Facts, v: &RelayView, dropped: u64) -> Verdict {
    let share = dropped as f64 / v.arrived.max(1) as f64;
    verdict(
        Cause::RelayKernelDrops,
        Kind::Loss,
        format!(
            "The relay reads slower than packets arrive: the kernel dropped {} of the {} that reached it ({}) before its read, while its egress kept up.",
            dropped,
            v.arrived,
            pct(share)
        ),
        share,
        funnel_lines(f, v),
        format!(
            "Reading takes its time ({} of it busy outside sends): read more per call (a PACKET_RX_RING with TPACKET_V3, or recvmmsg), spread the input over threads (PACKET_FANOUT), and give the input socket a larger receive buffer or ring for bursts (SO_RCVBUF, within net.core.rmem_max).",
            pct(1.0 - v.egress_time_share)
        ),
        weak(v, dropped),
    )
}

fn own_drops(f: &Facts, v: &RelayView, own: u64) -> Verdict {
    let share = own as f64 / v.arrived.max(1) as f64;
    verdict(
        Cause::RelayOwnDrops,
        Kind::Loss,
        format!(
            "The relay dropped {own} packets it had read ({}) without forwarding them, while its outputs refused nothing: its own drops (an exhausted buffer pool, or its logic).",
            pct(share)
        ),
        share,
        funnel_lines(f, v),
        "Look at what makes it drop: a buffer pool that runs out in bursts needs more buffers (or a shorter hold per packet); a filter or a queue limit in the relay is by design."
            .to_string(),
        weak(v, own),
    )
}

/// Whether the family's qdisc drops are the sends its relay had refused (and retried): not
/// losses of their own, so the `qdisc_drop` verdict does not claim them.
pub(super) fn refusals_cover_qdisc_drops(f: &Facts) -> bool {
    let Some(v) = f.relay else {
        return false;
    };
    let qdisc: u64 = f
        .drops
        .iter()
        .filter(|d| d.row.class == DropClass::TargetLoss && d.row.reason == "QDISC_DROP")
        .map(|d| d.count)
        .sum();
    v.refused > 0 && qdisc <= v.refused
}

/// Whether the family's failed sends are all refusals its relay retried (ENOBUFS, EAGAIN): not
/// packets that never left, so `send_errors` claims no loss for them.
pub(super) fn refusals_cover_failed_sends(f: &Facts) -> bool {
    f.relay
        .is_some_and(|v| v.refused > 0 && f.failed_calls <= v.refused)
}

/// Whether a verdict is one of this module's.
pub(super) fn is_relay(cause: Cause) -> bool {
    cause.is_relay()
}
