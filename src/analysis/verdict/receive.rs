//! Causes on the receive side of a family that reads (it called a receive syscall): its socket's
//! receive buffer overflowed (`rcvbuf_overflow`), a CPU's input backlog overflowed before the
//! socket (`backlog_overflow`), or it kept up (`receiver_keeps_up`). Each share is the drops as
//! a share of the packets that reached the family (read + dropped before the read). They apply
//! only where the family's receive calls are material (at least `MIN_PACKETS` packets read or
//! dropped before the read): a family that reads less (one read on a control socket, a scan
//! that read nothing) gets the `reply_*` verdicts of `loss` for its drops instead.

use super::facts::Facts;
use super::units::{pct, pps};
use super::{verdict, Cause, Kind, Verdict, MIN_DROPS, MIN_PACKETS};
use crate::analysis::receive::ReceiveView;
use crate::analysis::snapshot::{DropRow, StageName};

/// Drop reasons of a full socket: its receive buffer, the protocol's memory, its backlog.
pub(super) const SOCKET_REASONS: [&str; 3] = ["SOCKET_RCVBUFF", "PROTO_MEM", "SOCKET_BACKLOG"];
/// Drop reason of a full per-CPU input backlog (netdev_max_backlog).
pub(super) const BACKLOG_REASON: &str = "CPU_BACKLOG";
/// What the kernel charges a datagram beyond its payload (the skb and its head), bytes: the
/// socket buffer fills by this much more per packet than the bytes read say.
const SKB_OVERHEAD: u64 = 768;

/// The family's receive funnel when it makes receive calls on datagram or packet sockets and
/// they are material: at least `MIN_PACKETS` packets reached them in the interval (read by a receive syscall, or dropped at its sockets
/// before the read). The rules here apply, and `loss` leaves the matching `reply_*` drops to
/// them. Stream reads (a TCP control connection) and calls that read nothing are no receiving
/// to judge; frames read through a TPACKET ring take no syscall and are `ring_full`'s.
pub(super) fn reader<'a>(f: &Facts<'a>) -> Option<&'a ReceiveView> {
    f.receive.filter(|r| {
        let called = r
            .stages
            .iter()
            .any(|s| s.name == StageName::RecvCalls && s.total > 0);
        called && syscall_packets(r) >= MIN_PACKETS
    })
}

/// Packets that reached the family's receive calls in the interval: read, or dropped at its
/// sockets before the read.
fn syscall_packets(r: &ReceiveView) -> u64 {
    r.count(StageName::RecvPackets) + r.count(StageName::RecvDrops)
}

pub(super) fn rcvbuf_overflow(f: &Facts) -> Option<Verdict> {
    rcvbuf_overflow_of(f, reader(f)?)
}

pub(super) fn backlog_overflow(f: &Facts) -> Option<Verdict> {
    backlog_overflow_of(f, reader(f)?)
}

pub(super) fn receiver_cpu_bound(f: &Facts) -> Option<Verdict> {
    cpu_bound_of(f, reader(f)?)
}

/// The receiver kept up: when none of the other receive rules found anything.
pub(super) fn receiver_keeps_up(f: &Facts) -> Option<Verdict> {
    let r = reader(f)?;
    if cpu_bound_of(f, r).is_some()
        || rcvbuf_overflow_of(f, r).is_some()
        || backlog_overflow_of(f, r).is_some()
    {
        return None;
    }
    keeps_up(f, r)
}

fn rows<'a>(r: &'a ReceiveView, reasons: &[&str]) -> Vec<&'a DropRow> {
    let mut rows: Vec<&DropRow> = r
        .drops
        .iter()
        .filter(|d| reasons.contains(&d.reason.as_str()))
        .collect();
    rows.sort_by_key(|d| std::cmp::Reverse(d.count));
    rows
}

/// The evidence lines every receiver verdict starts with: the funnel's figures.
fn funnel_lines(f: &Facts, r: &ReceiveView, dropped: u64) -> Vec<String> {
    let read = r.count(StageName::RecvPackets);
    let over = if f.live { "in this tick" } else { "over the run" };
    // Over the run, a rate is over the ticks the family received in (`receive_s`).
    let per_s = |n: u64| {
        let rate = pps(n as f64 / f.receive_s.max(1e-9));
        if f.live {
            rate
        } else {
            format!("{rate} while receiving")
        }
    };
    vec![
        format!(
            "{read} packets read by {} receive calls {over} ({}), {} calls found nothing to read",
            r.count(StageName::RecvCalls),
            per_s(read),
            r.failed_calls
        ),
        format!(
            "{dropped} packets for the family dropped before its read {over} ({}): {} of the {} that reached it",
            per_s(dropped),
            pct(dropped as f64 / (read + dropped).max(1) as f64),
            read + dropped
        ),
    ]
}

fn drop_lines(rows: &[&DropRow], evidence: &mut Vec<String>) {
    for d in rows.iter().take(3) {
        evidence.push(format!(
            "{} at {} (pid {}, netns {}): {}",
            d.reason,
            d.location,
            d.pid.map_or("-".to_string(), |p| p.to_string()),
            d.netns,
            d.count
        ));
    }
}

fn weak(r: &ReceiveView, dropped: u64) -> bool {
    dropped < MIN_DROPS || r.count(StageName::RecvPackets) + dropped < MIN_PACKETS
}

/// A power of two at least `n`, at least 1 MiB: a buffer size people type.
fn buffer_figure(n: u64) -> u64 {
    n.max(1 << 20).next_power_of_two()
}

/// The family's packets dropped for some reasons before its read.
struct DroppedBeforeRead {
    dropped: u64,
    /// packets the family read
    read: u64,
    /// of what arrived (read + dropped)
    share: f64,
    /// the funnel's lines and the drop rows
    evidence: Vec<String>,
}

/// The drops at `reasons` before the family's read, with their evidence; None when there are
/// none.
fn dropped_before_read(f: &Facts, r: &ReceiveView, reasons: &[&str]) -> Option<DroppedBeforeRead> {
    let rows = rows(r, reasons);
    let dropped: u64 = rows.iter().map(|d| d.count).sum();
    if dropped == 0 {
        return None;
    }
    let read = r.count(StageName::RecvPackets);
    let mut evidence = funnel_lines(f, r, dropped);
    drop_lines(&rows, &mut evidence);
    Some(DroppedBeforeRead {
        dropped,
        read,
        share: dropped as f64 / (read + dropped).max(1) as f64,
        evidence,
    })
}

/// The family's socket buffer overflowed (SOCKET_RCVBUFF and kin): what it asked for, what the
/// sysctls allow, and the buffer that would hold a second of what was dropped.
fn rcvbuf_overflow_of(f: &Facts, r: &ReceiveView) -> Option<Verdict> {
    let DroppedBeforeRead {
        dropped,
        read,
        share,
        mut evidence,
    } = dropped_before_read(f, r, &SOCKET_REASONS)?;
    let t = r.tunables;
    let show = |v: Option<u64>| v.map_or("unknown".to_string(), |v| format!("{v} bytes"));
    evidence.push(format!(
        "net.core.rmem_max = {} (the largest SO_RCVBUF a socket may set), net.core.rmem_default = {} (a new socket's buffer)",
        show(t.rmem_max),
        show(t.rmem_default)
    ));
    let bytes_per_packet = r.bytes.checked_div(read).unwrap_or(0) + SKB_OVERHEAD;
    let drop_pps = dropped as f64 / f.receive_s.max(1e-9);
    let figure = buffer_figure((drop_pps * bytes_per_packet as f64).ceil() as u64);
    evidence.push(format!(
        "a second of the dropped packets takes ~{figure} bytes of buffer ({} x ~{bytes_per_packet} bytes each, payload and skb)",
        pps(drop_pps)
    ));
    let sysctl = match t.rmem_max {
        Some(m) if m >= figure => format!("net.core.rmem_max ({m}) already allows it"),
        Some(m) => format!("raise net.core.rmem_max from {m} to at least {figure} first (`sysctl -w net.core.rmem_max={figure}`): SO_RCVBUF is capped there"),
        None => format!("net.core.rmem_max must allow it (`sysctl -w net.core.rmem_max={figure}`)"),
    };
    let keep_up = if share > 0.5 {
        " More than half of what arrived was dropped: the reader is slower than the traffic, so a buffer only delays the drops; read in batches (recvmmsg) or from more threads."
    } else {
        ""
    };
    Some(verdict(
        Cause::RcvbufOverflow,
        Kind::Loss,
        format!(
            "The family's receive buffer was too small: {dropped} packets ({}) were dropped at its socket before it read them.",
            pct(share)
        ),
        share,
        evidence,
        format!("Set SO_RCVBUF to {figure} on the receiving socket; {sysctl}.{keep_up}"),
        weak(r, dropped),
    ))
}

/// Share of a CPU per reading thread that reading all that arrived must need: more is CPU-bound.
pub(super) const NEEDED_SHARE: f64 = 0.8;
/// Share of the interval a reading thread must have wanted a CPU (on one, or waiting for one):
/// a reader that sleeps by design (paced) is not CPU-bound. Half, not all: over a run, the time
/// before the first packet and after the last counts too.
pub(super) const BUSY_SHARE: f64 = 0.5;

/// The readers are CPU-bound: what arrived (read + dropped before the read) at the measured
/// cost per packet read needs more CPU than the reading threads have, and they wanted a CPU for
/// most of the interval (on one, or runnable waiting for one: other tasks took the rest). The
/// drops at the socket are then the symptom, the readers' CPU the cause.
fn cpu_bound_of(f: &Facts, r: &ReceiveView) -> Option<Verdict> {
    let cost = r.cost.as_ref()?;
    let ns = cost.ns_per_packet?;
    let DroppedBeforeRead {
        dropped,
        read,
        share,
        mut evidence,
    } = dropped_before_read(f, r, &[&SOCKET_REASONS[..], &[BACKLOG_REASON]].concat())?;
    let secs = f.receive_s.max(1e-9);
    let workers = cost.workers.max(1) as f64;
    let oncpu = cost.oncpu_ns as f64 / (secs * 1e9 * workers);
    let waiting = cost.runq_ns as f64 / (secs * 1e9 * workers);
    let busy = oncpu + waiting;
    let arrived_pps = (read + dropped) as f64 / secs;
    let needed = arrived_pps * ns / 1e9;
    if busy < BUSY_SHARE || needed <= workers * NEEDED_SHARE {
        return None;
    }
    evidence.push(format!(
        "{} on CPU per packet read ({} thread(s)); {} each thread was on a CPU {} of the time and waited for one {}",
        super::units::dur(ns),
        cost.workers,
        if f.live { "in this tick" } else { "over the run" },
        pct(oncpu),
        pct(waiting)
    ));
    evidence.push(format!(
        "reading all that arrived ({}) at that cost takes {needed:.2} CPUs; the readers have {workers:.0}",
        pps(arrived_pps)
    ));
    if let Some(c) = r
        .classes
        .iter()
        .filter(|c| c.packets > 0)
        .max_by(|a, b| a.oncpu_share.total_cmp(&b.oncpu_share))
    {
        evidence.push(format!(
            "the costliest class, {}, takes {} of the handling time ({} each, {} of the packets)",
            c.label(),
            pct(c.oncpu_share),
            c.ns_per_packet.map_or("-".to_string(), super::units::dur),
            pct(c.packet_share)
        ));
    }
    let more = (needed / NEEDED_SHARE).ceil().max(workers + 1.0);
    // Most of its wanting was waiting: other tasks hold the CPU it runs on.
    let crowded = if waiting > oncpu {
        format!(
            " It waited for a CPU more than it ran ({} against {}): give it a CPU of its own first (`taskset -cp N PID`, or a higher priority).",
            pct(waiting),
            pct(oncpu)
        )
    } else {
        String::new()
    };
    Some(verdict(
        Cause::ReceiverCpuBound,
        Kind::Loss,
        format!(
            "The family's receiver is CPU-bound: reading what arrived needs {needed:.2} CPUs at {} per packet, so {dropped} packets ({}) were dropped before it read them.",
            super::units::dur(ns),
            pct(share)
        ),
        share,
        evidence,
        format!(
            "Spread the reads over about {more:.0} threads (SO_REUSEPORT sockets, or RSS/RPS queues) or make each packet cheaper (batch reads with recvmmsg, less work per packet); a larger receive buffer only delays the drops.{crowded}"
        ),
        weak(r, dropped),
    ))
}

/// A CPU's input backlog overflowed before the packets reached the family's socket.
fn backlog_overflow_of(f: &Facts, r: &ReceiveView) -> Option<Verdict> {
    let DroppedBeforeRead {
        dropped,
        share,
        mut evidence,
        ..
    } = dropped_before_read(f, r, &[BACKLOG_REASON])?;
    let now = r.tunables.netdev_max_backlog;
    evidence.push(format!(
        "net.core.netdev_max_backlog = {} packets per CPU",
        now.map_or("unknown".to_string(), |v| v.to_string())
    ));
    let figure = now.map_or(4096, |v| (v * 4).next_power_of_two());
    Some(verdict(
        Cause::BacklogOverflow,
        Kind::Loss,
        format!(
            "A CPU's input backlog overflowed: {dropped} packets for the family ({}) were dropped before any socket saw them.",
            pct(share)
        ),
        share,
        evidence,
        format!(
            "Raise net.core.netdev_max_backlog{} to {figure} (`sysctl -w net.core.netdev_max_backlog={figure}`), and spread receive processing over CPUs (RPS: /sys/class/net/DEV/queues/rx-0/rps_cpus).",
            now.map_or(String::new(), |v| format!(" from {v}"))
        ),
        weak(r, dropped),
    ))
}

/// The family read everything that reached it: nothing dropped before its read. Not claimed
/// where the kernel cannot name the socket a drop was at (before 6.8): drops there are unseen;
/// nor with fewer than `MIN_PACKETS` read (nothing to judge); nor where its packet sockets'
/// rings took more incoming frames than its receive calls read (the ring is the path it reads
/// by, and its calls say nothing of it), or dropped incoming ones (`ring_full` is about the
/// same receiver).
fn keeps_up(f: &Facts, r: &ReceiveView) -> Option<Verdict> {
    if !r.drops.is_empty() || !r.socket_drops_seen {
        return None;
    }
    let read = r.count(StageName::RecvPackets);
    let readers = || r.rings.iter().filter(|v| v.is_reader());
    let ring_frames: u64 = readers().map(|v| v.incoming()).sum();
    if read < MIN_PACKETS || ring_frames > read || readers().any(|v| v.incoming_dropped() > 0) {
        return None;
    }
    Some(verdict(
        Cause::ReceiverKeepsUp,
        Kind::Loss,
        format!(
            "The family's receiver kept up: it read {read} packets and none for it was dropped before its read."
        ),
        0.0,
        funnel_lines(f, r, 0),
        "Nothing to tune on the receive side.".to_string(),
        false,
    ))
}

/// Whether a drop row is one the rules here diagnose for a family that reads.
pub(super) fn handles(reason: &str) -> bool {
    SOCKET_REASONS.contains(&reason) || reason == BACKLOG_REASON
}

/// Whether a verdict ranks after the rate verdicts: one about the family's receiving (this
/// module's, `ring_full`, the `reply_*` losses) in a family whose job is sending, when the run
/// asked for no rate (a loss of replies is then no reason its rate is what it is: the rate's
/// limit comes first) or when it found nothing lost (`receiver_keeps_up`: a sender's receive
/// side is never its headline).
pub(super) fn ranks_after_the_rate(f: &Facts, v: &super::Verdict) -> bool {
    let about_receiving = is_receive(v.cause)
        || v.cause.is_reply_loss()
        || v.cause == Cause::RingFull
        || v.cause == Cause::LostBeyondHost;
    about_receiving && sends_for_a_living(f) && (f.requested.is_none() || v.share == 0.0)
}

/// Whether the family's job is sending: it sent packets in the interval, and it is a scanner
/// (a profile other than `generic`) or sent more than it read (by receive calls, or incoming
/// frames queued to the rings it reads, at least: a ring it never reads queues a few). A
/// responder answering what it reads sends no more than it reads: its receiving is its job.
pub(super) fn sends_for_a_living(f: &Facts) -> bool {
    let scanner = f.scanner.is_some_and(|s| !s.is_generic());
    let read = f.receive.map_or(0, |r| {
        r.count(StageName::RecvPackets)
            + r.rings
                .iter()
                .filter(|v| v.is_reader())
                .map(|v| v.queued.saturating_sub(v.outgoing))
                .sum::<u64>()
    });
    f.packets > 0 && (scanner || f.packets > read)
}

/// Whether a verdict is one of this module's (about the receive side, not the packets sent).
pub(super) fn is_receive(cause: Cause) -> bool {
    matches!(
        cause,
        Cause::RcvbufOverflow | Cause::BacklogOverflow | Cause::ReceiverKeepsUp | Cause::ReceiverCpuBound
    )
}
