//! Causes of packets lost after they were sent: the family's own packets dropped in the kernel
//! (class `target_loss`) by where and why, drivers refusing packets, neighbour resolutions that
//! failed, and replies lost on their way in (class `reply_loss`). Each share is dropped / sent.

use super::facts::{caveat_lines, Dropped, Facts};
use super::units::{pct, pps};
use super::{verdict, Cause, Confidence, Kind, Verdict, MIN_DROPS, MIN_SHARE, WEAK_SHARE};
use crate::analysis::kernel::KernelLack;
use crate::analysis::snapshot::DeviceView;
use crate::collect::DropClass;

/// A refused packet share of the device's traffic above which the family is its main sender.
const MAIN_SENDER: f64 = 0.9;

/// The family's drop rows of one group, largest first: those the receive rules diagnose (a
/// family that reads: shares of what reached it, the receive sysctls) and a relay's drops before
/// its read (its funnel's kernel drops, `relay`) left out.
fn group_rows<'f, 'a>(f: &'f Facts<'a>, g: Group) -> Vec<&'f Dropped<'a>> {
    let reads = super::receive::reader(f).is_some();
    let mut rows: Vec<&Dropped> = f
        .drops
        .iter()
        .filter(|d| d.count > 0 && Group::of(d) == Some(g) && !unreasoned(f, d))
        .filter(|d| !(reads && d.row.class == DropClass::ReplyLoss && super::receive::handles(&d.row.reason)))
        .filter(|d| !(f.relay.is_some() && d.row.class == DropClass::ReplyLoss))
        .collect();
    rows.sort_by_key(|d| std::cmp::Reverse(d.count));
    rows
}

/// Whether a drop row is one of the family's (its packet, or a reply to it) that the kernel
/// gave no reason for and whose place names no group (a qdisc, a device, a neighbour...): on a
/// kernel without drop reasons it may be a probe or reply meeting a closed port (NO_SOCKET,
/// expected) as well as a loss, so no loss rule takes it; `not_judged_here` names it.
pub(super) fn unreasoned(f: &Facts, d: &Dropped) -> bool {
    f.lacks(KernelLack::DropReasons)
        && d.row.reason == "NOT_SPECIFIED"
        && matches!(Group::of(d), Some(Group::TargetOther | Group::ReplyOther))
}

/// The family's drop rows `unreasoned` takes, largest first (a relay's drops before its read
/// left out, as the loss rules leave them to the relay verdicts).
pub(super) fn unreasoned_rows<'f, 'a>(f: &'f Facts<'a>) -> Vec<&'f Dropped<'a>> {
    let mut rows: Vec<&Dropped> = f
        .drops
        .iter()
        .filter(|d| d.count > 0 && unreasoned(f, d))
        .filter(|d| !(f.relay.is_some() && d.row.class == DropClass::ReplyLoss))
        .collect();
    rows.sort_by_key(|d| std::cmp::Reverse(d.count));
    rows
}

/// Whether a device's qdisc, and so whether it requeued what the driver refused, is unknown:
/// the kernel has no qdisc_enqueue tracepoint (no queue depth is seen) and the probes did not
/// read the device's root qdisc as `noqueue`.
pub(super) fn requeue_unknown(f: &Facts, d: &DeviceView) -> bool {
    f.lacks(KernelLack::QdiscEnqueue) && d.qlen_max.is_none() && d.qdisc.as_deref() != Some("noqueue")
}

/// The verdict of one group's drop rows, if any.
fn group_verdict(f: &Facts, g: Group) -> Option<Verdict> {
    let rows = group_rows(f, g);
    (!rows.is_empty()).then(|| g.verdict(f, &rows))
}

pub(super) fn qdisc_drop(f: &Facts) -> Option<Verdict> {
    group_verdict(f, Group::Qdisc)
}

/// Drops waiting for neighbour resolution; without any, failed resolutions seen on a device
/// (share 0, one per device).
pub(super) fn neigh_failed(f: &Facts) -> Vec<Verdict> {
    match group_verdict(f, Group::Neighbour) {
        Some(v) => vec![v],
        None => neighbour_failed_unseen(f),
    }
}

pub(super) fn no_route(f: &Facts) -> Option<Verdict> {
    group_verdict(f, Group::Route)
}

/// Drops by a filter, unless the namespace's conntrack table was full and netfilter dropped
/// packets: `conntrack_drops` then names them.
pub(super) fn filtered(f: &Facts) -> Option<Verdict> {
    if conntrack_filled(f).is_some() {
        return None;
    }
    group_verdict(f, Group::Filter)
}

/// Packets netfilter dropped while the namespace's conntrack table was full: the table refused
/// their flows, no rule did. The filter group's verdict, told as the table's.
pub(super) fn conntrack_drops(f: &Facts) -> Option<Verdict> {
    let (table, dropped) = conntrack_filled(f)?;
    let mut v = group_verdict(f, Group::Filter)?;
    let refused = f.errors.get("EPERM").copied().unwrap_or(0);
    let (sentence, evidence, next) = super::limits::conntrack_text(f, table, refused, dropped);
    v.cause = Cause::ConntrackFull;
    v.sentence = sentence;
    v.evidence
        .splice(0..0, evidence.into_iter().filter(|e| !e.starts_with("caveat: ")));
    v.next_step = next;
    Some(v)
}

/// A full conntrack table and the netfilter drops of its time, when there were any.
fn conntrack_filled<'f>(f: &'f Facts) -> Option<(&'f crate::analysis::snapshot::ConntrackView, u64)> {
    let table = super::limits::full_table(f)?;
    let dropped = super::limits::netfilter_drops(f);
    (dropped > 0).then_some((table, dropped))
}

pub(super) fn device_drop(f: &Facts) -> Option<Verdict> {
    group_verdict(f, Group::Device)
}

pub(super) fn target_drop(f: &Facts) -> Option<Verdict> {
    group_verdict(f, Group::TargetOther)
}

pub(super) fn reply_socket_buffer(f: &Facts) -> Option<Verdict> {
    group_verdict(f, Group::ReplySocket)
}

pub(super) fn reply_backlog(f: &Facts) -> Option<Verdict> {
    group_verdict(f, Group::ReplyBacklog)
}

pub(super) fn reply_capture(f: &Facts) -> Option<Verdict> {
    group_verdict(f, Group::ReplyCapture)
}

pub(super) fn reply_drop(f: &Facts) -> Option<Verdict> {
    group_verdict(f, Group::ReplyOther)
}

/// Packets the send syscalls accepted that no later stage saw, no drop explains and no qdisc
/// holds: the kernel does not lose packets silently, so this is a fault of the measurement
/// (packets not attributed to the family after the syscall, or the device probes missing), said
/// as such rather than read as "nothing was lost".
pub(super) fn measurement_fault(f: &Facts) -> Option<Verdict> {
    let unseen = f.unseen_after_send()?;
    let a = f.after_send?;
    let evidence = vec![
        format!("{} packets accepted by the family's send syscalls {}", f.packets, f.over()),
        format!(
            "after them: {} through dev_queue_xmit, {} transmitted by a driver, {} dropped, {} queued for a neighbour",
            a.dev_queue, a.dev_xmit, a.target_drops, a.neigh_queued
        ),
        format!(
            "{unseen} packets ({}) were seen by no stage after the syscall",
            pct(unseen as f64 / f.packets.max(1) as f64)
        ),
    ];
    // Strong whatever the interval's caveats: any unseen packet past the edges is a fault.
    Some(finish(
        f,
        Cause::MeasurementFault,
        format!(
            "scanprof cannot follow {unseen} of the family's packets past the send syscall: what \
             happened to them after sending (sent, queued or dropped) is not known, so no loss \
             figure {} can be trusted.",
            f.over()
        ),
        unseen as f64 / f.packets.max(1) as f64,
        evidence,
        "Check the run's warnings and `scanprof doctor` for device probes that did not attach; \
         if they are attached, this is a scanprof bug: report it with the bundle (`--export DIR`)."
            .to_string(),
        false,
    ))
}

/// Whether a loss verdict is about the scanner's own outgoing packets, certainly lost.
pub(super) fn is_outgoing(v: &Verdict) -> bool {
    let maybe_requeued = v.cause == Cause::DeviceRefused && v.confidence != Confidence::Strong;
    v.share > 0.0
        && !v.cause.is_reply_loss()
        // frames a packet-socket ring missed had reached the family: replies, not its packets
        && v.cause != Cause::RingFull
        && !super::receive::is_receive(v.cause)
        && !super::relay::is_relay(v.cause)
        && v.cause != Cause::SendErrors
        && v.cause != Cause::MeasurementFault
        && !maybe_requeued
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Group {
    Qdisc,
    Neighbour,
    Route,
    Filter,
    Device,
    TargetOther,
    ReplySocket,
    ReplyBacklog,
    ReplyCapture,
    ReplyOther,
}

impl Group {
    /// Where a drop row belongs; None for drops that are no loss (expected, reply_side,
    /// unrelated).
    fn of(d: &Dropped) -> Option<Group> {
        let (reason, loc) = (d.row.reason.as_str(), d.row.location.as_str());
        let at = |names: &[&str]| names.iter().any(|n| loc.contains(n));
        match d.row.class {
            DropClass::TargetLoss => Some(
                if reason.starts_with("QDISC")
                    || reason.starts_with("FQ_")
                    || reason.starts_with("CAKE_")
                    // Without drop reasons (kernels before 5.17) the location says it: the
                    // qdisc path, or kfree_skb_list, with which 5.10's __dev_xmit_skb frees the
                    // packets its qdisc dropped (kfree_skb's caller is then kfree_skb_list).
                    || (reason == "NOT_SPECIFIED"
                        && at(&[
                            "kfree_skb_list",
                            "__dev_queue_xmit",
                            "qdisc",
                            "tbf_",
                            "pfifo",
                            "sch_",
                            "htb_",
                            "netem_",
                            "fq_",
                        ]))
                {
                    Group::Qdisc
                } else if reason.starts_with("NEIGH_") || at(&["neigh_"]) {
                    Group::Neighbour
                } else if reason.contains("NOROUTES") || reason == "IP_OUTNOROUTES" {
                    Group::Route
                } else if matches!(
                    reason,
                    "NETFILTER_DROP"
                        | "TC_EGRESS"
                        | "TC_INGRESS"
                        | "BPF_CGROUP_EGRESS"
                        | "XDP"
                        | "SECURITY_HOOK"
                ) {
                    Group::Filter
                } else if matches!(
                    reason,
                    "DEV_READY" | "DEV_HDR" | "FULL_RING" | "TAP_TXFILTER" | "TAP_FILTER"
                ) || (reason == "NOT_SPECIFIED" && loc.contains("xmit"))
                {
                    Group::Device
                } else {
                    Group::TargetOther
                },
            ),
            DropClass::ReplyLoss => Some(
                if matches!(
                    reason,
                    "SOCKET_RCVBUFF" | "PROTO_MEM" | "SOCKET_BACKLOG" | "SOCKET_RCV_SHUTDOWN"
                ) {
                    Group::ReplySocket
                } else if reason == "CPU_BACKLOG" {
                    Group::ReplyBacklog
                } else if at(&["packet_rcv", "tpacket_rcv"])
                    || reason.starts_with("PACKET_")
                    || reason == "FULL_RING"
                {
                    Group::ReplyCapture
                } else {
                    Group::ReplyOther
                },
            ),
            DropClass::Expected | DropClass::ReplySide | DropClass::Unrelated => None,
        }
    }

    fn verdict(self, f: &Facts, rows: &[&Dropped]) -> Verdict {
        let count: u64 = rows.iter().map(|d| d.count).sum();
        let sent = handed(f);
        let share = super::loss_share(count, sent);
        let top = rows[0].row;
        let dev = top.device.clone().unwrap_or_else(|| "DEV".to_string());
        let where_ = format!(
            "{} at {}{}",
            top.reason,
            top.location,
            top.device.as_ref().map_or(String::new(), |d| format!(" on {d}"))
        );
        let reply = matches!(
            self,
            Group::ReplySocket | Group::ReplyBacklog | Group::ReplyCapture | Group::ReplyOther
        );
        let mut evidence = vec![if reply {
            format!(
                "{count} replies dropped {}, against {sent} packets sent ({})",
                f.over(),
                pct(share)
            )
        } else {
            format!(
                "{count} of {sent} packets handed to the kernel dropped {} ({}){}",
                f.over(),
                pct(share),
                if f.failed_calls > 0 {
                    format!(
                        "; {} of them failed sends, counted as handed over",
                        f.failed_calls
                    )
                } else {
                    String::new()
                },
            ) + &if f.syn_retransmits > 0 {
                format!(
                    "; {} of them the kernel's SYN retransmissions for unanswered connects (its TCP timer's, not the scanner's sends)",
                    f.syn_retransmits
                )
            } else {
                String::new()
            }
        }];
        for d in rows.iter().take(3) {
            evidence.push(d.evidence());
        }
        let (cause, sentence, next) = match self {
            Group::Qdisc => {
                if let Some(d) = f.devices.iter().find(|d| Some(&d.device) == top.device.as_ref()) {
                    if let Some(q) = d.qlen_max {
                        evidence.push(format!(
                            "deepest queue on {}: {q} packets, {} bytes",
                            d.device,
                            d.backlog_max_bytes.unwrap_or(0)
                        ));
                    }
                }
                if let Some(l) = f.left_pps {
                    evidence.push(format!("{} left the machine (driver accepted) {}", pps(l), f.over()));
                }
                let carry = f.left_pps.map_or(String::new(), |l| format!(" (about {} went through)", pps(l)));
                let kind = qdisc_kind(f, top.device.as_deref(), top.netns);
                if let Some(k) = kind {
                    evidence.push(format!("root qdisc of {dev}: {k}"));
                }
                let what = match (kind, QdiscRole::of(kind)) {
                    (Some(k), QdiscRole::Shaper) => {
                        format!("the {k} qdisc, which limits the rate to the one it is configured with")
                    }
                    (Some(k), _) => format!("the {k} queueing discipline"),
                    (None, _) => "the queueing discipline".to_string(),
                };
                (
                    Cause::QdiscDrop,
                    format!(
                        "{} of the sent packets ({count}) were dropped by {what} ({where_}): the path is narrower than the rate the scanner sends at.",
                        pct(share)
                    ),
                    queue_advice(&dev, kind, &carry),
                )
            }
            Group::Neighbour => {
                for d in f.devices.iter().filter(|d| d.neigh_started + d.neigh_failed + d.neigh_queued > 0) {
                    evidence.push(neighbour_line(d));
                }
                let (why, next) = match top.reason.as_str() {
                    "NEIGH_QUEUEFULL" => (
                        "more packets waited for address resolution than the neighbour queue holds",
                        format!(
                            "Raise the queue of packets waiting for resolution: sysctl net.ipv4.neigh.{dev}.unres_qlen_bytes \
                             (net.ipv6.neigh.{dev}.unres_qlen_bytes for IPv6)."
                        ),
                    ),
                    "NEIGH_CREATEFAIL" | "NEIGH_DEAD" => (
                        "no neighbour entry could be made for them (neighbour table full?)",
                        "Raise the neighbour table's size: sysctl net.ipv4.neigh.default.gc_thresh3 (and gc_thresh2)."
                            .to_string(),
                    ),
                    _ => (
                        "address resolution failed: the next hop never answered ARP or neighbour discovery",
                        format!(
                            "`ip neigh show dev {dev}` and `ip route get ADDR`: check that the next hop (the target on \
                             a local network, else its gateway) answers; scanning unused local addresses loses these by design."
                        ),
                    ),
                };
                (
                    Cause::NeighFailed,
                    format!(
                        "{} of the sent packets ({count}) died waiting for their next hop's address on {dev}: {why}.",
                        pct(share)
                    ),
                    next,
                )
            }
            Group::Route => (
                Cause::NoRoute,
                format!("{} of the sent packets ({count}) had no route ({where_}).", pct(share)),
                "`ip route get ADDR` for a target: add the missing route or fix the source address.".to_string(),
            ),
            Group::Filter => (
                Cause::Filtered,
                format!(
                    "{} of the sent packets ({count}) were dropped by a filter on the way out ({where_}).",
                    pct(share)
                ),
                format!(
                    "Look at the rules that match the scan's packets: `nft list ruleset`, `iptables -S OUTPUT`, \
                     `tc filter show dev {dev} egress`."
                ),
            ),
            Group::Device => (
                Cause::DeviceDrop,
                format!(
                    "{} of the sent packets ({count}) were dropped at the device ({where_}).",
                    pct(share)
                ),
                format!(
                    "`ip -s link show dev {dev}` and `ethtool -S {dev}`: if its TX ring is full, enlarge it \
                     (`ethtool -G {dev} tx N`) or send slower."
                ),
            ),
            Group::TargetOther => (
                Cause::TargetDrop,
                format!(
                    "{} of the sent packets ({count}) were dropped after sending ({where_}).",
                    pct(share)
                ),
                format!(
                    "Look up SKB_DROP_REASON_{} in the kernel's include/net/dropreason-core.h and the code at {}.",
                    top.reason, top.location
                ),
            ),
            Group::ReplySocket => (
                Cause::ReplySocketBuffer,
                {
                    if let Some(t) = f.receive.map(|r| r.tunables) {
                        let show = |v: Option<u64>| v.map_or("unknown".to_string(), |v| v.to_string());
                        evidence.push(format!(
                            "net.core.rmem_max = {}, net.core.rmem_default = {} bytes; the family never read from the socket",
                            show(t.rmem_max),
                            show(t.rmem_default)
                        ));
                    }
                    format!(
                        "Replies were lost at the scanner's own socket ({where_}): {count} of them, its receive buffer was full."
                    )
                },
                "Raise the scanner's receive buffer (SO_RCVBUF; sysctl net.core.rmem_max and net.core.rmem_default), \
                 or have it read replies faster."
                    .to_string(),
            ),
            Group::ReplyBacklog => (
                Cause::ReplyBacklog,
                format!(
                    "Replies were lost in the CPU's input backlog before any socket saw them ({count}, {where_})."
                ),
                "Raise sysctl net.core.netdev_max_backlog, and spread receive processing over CPUs (RPS).".to_string(),
            ),
            Group::ReplyCapture => (
                Cause::ReplyCapture,
                format!("Replies were lost at the scanner's capture ring ({count}, {where_}): it was full."),
                "Give the capture a larger buffer (libpcap's buffer size, the TPACKET ring) or a tighter capture filter."
                    .to_string(),
            ),
            Group::ReplyOther => (
                Cause::ReplyDrop,
                format!("Replies to the scanner were dropped on their way in ({count}, {where_})."),
                format!(
                    "Look up SKB_DROP_REASON_{} in the kernel's include/net/dropreason-core.h and the code at {}.",
                    top.reason, top.location
                ),
            ),
        };
        let weak = count < MIN_DROPS || f.thin() || share < WEAK_SHARE;
        finish(f, cause, sentence, share, evidence, next, weak)
    }
}

/// Packets handed to the kernel for the scanner: those it sent, those of failed sends (a packet
/// socket's ENOBUFS is a qdisc drop of a packet the syscall did not count), and the SYNs the
/// kernel retransmitted for its unanswered connects (dropped on the way like its own): a loss
/// share's denominator (`super::loss_share`).
fn handed(f: &Facts) -> u64 {
    f.packets + f.failed_calls + f.syn_retransmits
}

fn neighbour_line(d: &crate::analysis::snapshot::DeviceView) -> String {
    format!(
        "{}: {} resolutions started, {} packets queued waiting, {} resolved, {} failed",
        d.device, d.neigh_started, d.neigh_queued, d.neigh_resolved, d.neigh_failed
    )
}

fn finish(
    f: &Facts,
    cause: Cause,
    sentence: String,
    share: f64,
    mut evidence: Vec<String>,
    next: String,
    weak: bool,
) -> Verdict {
    caveat_lines(f, &mut evidence);
    verdict(cause, Kind::Loss, sentence, share, evidence, next, weak)
}

/// Drivers that refused packets (busy or error) when no drop at the device was seen: a qdisc
/// requeues what its driver refuses, so they are a loss only where there is no qdisc.
pub(super) fn device_refused(f: &Facts) -> Vec<Verdict> {
    if !group_rows(f, Group::Device).is_empty() {
        return Vec::new();
    }
    f.devices
        .iter()
        .filter(|d| d.xmit_refused > 0)
        .filter_map(|d| {
            let sent = handed(f);
            let share = super::loss_share(d.xmit_refused, sent);
            let unknown = requeue_unknown(f, d);
            let no_qdisc = d.qlen_max.is_none() && !unknown;
            let mostly_ours = d.all_xmit_pps > 0.0 && d.target_xmit_pps >= MAIN_SENDER * d.all_xmit_pps;
            if share < MIN_SHARE && d.xmit_refused < MIN_DROPS {
                return None;
            }
            let mut evidence = vec![
                format!(
                    "{} refusals by the driver of {} {}, against {} packets sent",
                    d.xmit_refused,
                    d.device,
                    f.over(),
                    f.packets
                ),
                format!(
                    "the family's packets are {} of what the driver accepted",
                    pct(d.target_xmit_pps / d.all_xmit_pps.max(f64::MIN_POSITIVE))
                ),
            ];
            evidence.push(if unknown {
                format!(
                    "whether a qdisc on {} requeued the refused packets cannot be judged on this \
                     kernel: it has {}",
                    d.device,
                    KernelLack::QdiscEnqueue.facility()
                )
            } else if no_qdisc {
                "no qdisc seen on the device: a refused packet is dropped".to_string()
            } else {
                "the device has a qdisc, which requeues refused packets: they may have left later".to_string()
            });
            if let Some(sampling) = f.device_sampling {
                evidence.push(format!(
                    "the refusals are an estimate: the device stages were {} ({})",
                    sampling.label(),
                    sampling.option()
                ));
            }
            let weak = !(no_qdisc && mostly_ours)
                || d.xmit_refused < MIN_DROPS
                || f.thin()
                || share < WEAK_SHARE
                || f.device_sampling.is_some();
            Some(finish(
                f,
                Cause::DeviceRefused,
                format!(
                    "The driver of {} refused {}{} packets (busy or error){}.",
                    d.device,
                    if f.device_sampling.is_some() { "about " } else { "" },
                    d.xmit_refused,
                    if no_qdisc { ", and with no qdisc to requeue them they were lost" } else { "" }
                ),
                share,
                evidence,
                format!(
                    "`ip -s link show dev {0}` and `ethtool -S {0}`: enlarge the TX ring (`ethtool -G {0} tx N`), or \
                     for a veth, make the far side read faster.",
                    d.device
                ),
                weak,
            ))
        })
        .collect()
}

/// Neighbour resolutions that failed with no neighbour drop seen: evidence without a count.
fn neighbour_failed_unseen(f: &Facts) -> Vec<Verdict> {
    f.devices
        .iter()
        .filter(|d| d.neigh_failed > 0)
        .map(|d| {
            finish(
                f,
                Cause::NeighFailed,
                format!(
                    "Address resolution failed {} times on {} for the scanner's packets; the packets queued behind it \
                     were probably lost, though no drop was seen.",
                    d.neigh_failed, d.device
                ),
                0.0,
                vec![neighbour_line(d)],
                format!(
                    "`ip neigh show dev {}`: check that the next hop answers ARP or neighbour discovery.",
                    d.device
                ),
                true,
            )
        })
        .collect()
}

/// What a queueing discipline does with a sender faster than its device, by the qdisc's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum QdiscRole {
    /// limits the rate to a configured one (tbf, htb, hfsc, cbq, cake): the rate is the
    /// bottleneck, and a longer queue only delays the drops
    Shaper,
    /// a plain queue whose length is the device's txqueuelen (pfifo_fast)
    TxQueue,
    /// a queue with a limit of its own, often with active queue management (pfifo, bfifo,
    /// fq_codel, fq, sfq, codel, pie, red, netem...): txqueuelen does not set it
    OwnLimit,
    /// the kind was not read (or is a multiqueue root whose children do the queueing)
    Unknown,
}

impl QdiscRole {
    pub(super) fn of(kind: Option<&str>) -> QdiscRole {
        match kind {
            Some("tbf" | "htb" | "hfsc" | "cbq" | "cake") => QdiscRole::Shaper,
            Some("pfifo_fast") => QdiscRole::TxQueue,
            None | Some("" | "mq" | "mqprio" | "multiq" | "noqueue" | "noop") => QdiscRole::Unknown,
            Some(_) => QdiscRole::OwnLimit,
        }
    }
}

/// The root qdisc kind of the device a drop row names, as the probes read it.
pub(super) fn qdisc_kind<'f>(f: &'f Facts, device: Option<&str>, netns: u32) -> Option<&'f str> {
    let device = device?;
    f.devices
        .iter()
        .find(|d| d.device == device && d.netns == netns)
        .or_else(|| f.devices.iter().find(|d| d.device == device))
        .and_then(|d| d.qdisc.as_deref())
}

/// What to do about a queue that overflows on `dev`, by its root qdisc's kind: a shaper's rate,
/// a pfifo_fast's txqueuelen, another queue's own limit. `carry` says what went through.
pub(super) fn queue_advice(dev: &str, kind: Option<&str>, carry: &str) -> String {
    match (kind, QdiscRole::of(kind)) {
        (Some(k), QdiscRole::Shaper) => {
            let classes = if matches!(k, "htb" | "hfsc" | "cbq") {
                format!(" and `tc -s class show dev {dev}` (the rate of the class the scan's packets fall in)")
            } else {
                String::new()
            };
            format!(
                "The {k} qdisc on {dev} shapes to its configured rate, and that rate is the bottleneck: a longer \
                 queue (txqueuelen, its limit) only delays the drops. `tc -s qdisc show dev {dev}`{classes}: raise \
                 its rate if the path really carries more, or request no more than that rate{carry}."
            )
        }
        (Some(k), QdiscRole::TxQueue) => format!(
            "`tc -s qdisc show dev {dev}`: {k} holds at most the device's txqueuelen packets. If the drops come in \
             bursts the device then catches up with, raise it (`ip link set dev {dev} txqueuelen N`); if the device \
             is slower than the scanner all along, request no more than it carries{carry}."
        ),
        (Some(k), QdiscRole::OwnLimit) => format!(
            "`tc -s qdisc show dev {dev}`: the {k} qdisc drops past its own limit (or by its queue management), \
             which txqueuelen does not set. If the drops come in bursts, raise its limit (`tc qdisc change dev {dev} \
             root {k} limit N`); if the device is slower than the scanner all along, request no more than it \
             carries{carry}."
        ),
        _ => format!(
            "`tc -s qdisc show dev {dev}`: its rate or limit is below what the scanner sends; raise them \
             (or the device's txqueuelen), or request no more than the path carries{carry}."
        ),
    }
}
