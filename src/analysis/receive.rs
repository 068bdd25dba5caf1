//! The receive funnel: what the family read through its receive syscalls and what died on the
//! way to its sockets before the read, over a tick or the run. Pure: it takes the cumulative
//! `CounterSample`s the send funnel takes and puts a `ReceiveView` on the Snapshot and Summary,
//! present only when the family receives.

use serde::{Deserialize, Serialize};

use super::stage::{DropRow, Stage, StageName};
use crate::collect::udp_refused::{self, UdpRefusal};
use crate::collect::{
    CounterSample, DropClass, RecvClassCounters, RecvCounters, ThreadCounters, ThreadCpuTime,
};
use crate::system::machine::ReceiveTunables;

/// Stage names of the receive funnel, in the order a packet for the family meets them: dropped
/// before the read (at its socket, in a backlog, in a packet socket's ring), the calls that read,
/// and the messages they returned.
pub const RECV_STAGES: [StageName; 3] = [StageName::RecvDrops, StageName::RecvCalls, StageName::RecvPackets];

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
    /// what reading cost, per thread that read packets in the interval, most packets first
    #[serde(default)]
    pub threads: Vec<ThreadReceiveCost>,
    /// what reading cost over all those threads together, with the capacity it implies; None
    /// when fewer than `MIN_COST_PACKETS` were read in the interval (and in bundles older than
    /// it)
    #[serde(default)]
    pub cost: Option<ReceiveCost>,
    /// the packets read by class of length (`--recv-classes`) and what handling each class
    /// cost; empty when packets are not classed
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub classes: Vec<ReceiveClass>,
    /// the family's packet sockets (a TPACKET ring or a receive queue): frames queued to each
    /// and dropped at it because it was full (`rings::RING_STAGES` are their sums); empty when
    /// it holds none
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rings: Vec<super::rings::RingView>,
    /// datagrams the family's UDP sockets refused in the interval, counted where the kernel
    /// refuses them (udp:udp_fail_queue_rcv_skb, with the socket in hand): the same drops as
    /// `drops`' SOCKET_RCVBUFF and PROTO_MEM rows at UDP sockets, counted apart; None when that
    /// program is not attached
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp_refused: Option<UdpRefusedCounts>,
}

/// Datagrams the family's UDP sockets refused over an interval, by why.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UdpRefusedCounts {
    /// refused because the socket's receive buffer was full (`Udp: RcvbufErrors`), packets
    pub rcvbuf: u64,
    /// refused for the protocol's memory limit (`Udp: MemErrors`), packets
    pub memory: u64,
}

/// The UDP refusals between `prev` (None: since attach) and `now`; None when `now` has no
/// count (the program is not attached).
fn udp_refused_between(now: &CounterSample, prev: Option<&CounterSample>) -> Option<UdpRefusedCounts> {
    let count = |s: &CounterSample, kind| {
        s.udp_refused
            .as_deref()
            .map_or(0, |r| udp_refused::total(r, kind))
    };
    now.udp_refused.as_ref()?;
    let delta = |kind| count(now, kind).saturating_sub(prev.map_or(0, |p| count(p, kind)));
    Some(UdpRefusedCounts {
        rcvbuf: delta(UdpRefusal::Rcvbuf),
        memory: delta(UdpRefusal::Memory),
    })
}

/// One class of the packets read (by length): how many, and the on-CPU time from each read's
/// return to the thread's next receive call (handling it), over the interval.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReceiveClass {
    /// smallest message of the class, bytes (inclusive)
    pub min_bytes: u32,
    /// the next class's smallest, bytes (exclusive); None for the last class
    pub below_bytes: Option<u32>,
    /// messages of the class read in the interval (single-message reads only)
    pub packets: u64,
    /// per second over the interval
    pub pps: f64,
    /// bytes of those messages
    pub bytes: u64,
    /// on CPU handling them (from each read's return to the next receive call), ns
    pub oncpu_ns: u64,
    /// `oncpu_ns / packets`, ns; None without packets
    pub ns_per_packet: Option<f64>,
    /// the class's share of the classed packets, and of their handling time (0..1)
    pub packet_share: f64,
    pub oncpu_share: f64,
}

/// Whether the family read packets in the view's interval or lost some before its read.
pub fn active(r: &ReceiveView) -> bool {
    r.count(StageName::RecvPackets) > 0 || r.count(StageName::RecvDrops) > 0
}

/// The classes of the packets read between `prev` (None: since attach) and `now`, summed over
/// the family's threads; empty when packets are not classed.
pub fn receive_classes(
    now: &CounterSample,
    prev: Option<&CounterSample>,
    interval_s: f64,
) -> Vec<ReceiveClass> {
    let bounds = &now.recv_class_bounds;
    if bounds.is_empty() {
        return Vec::new();
    }
    let mut sums = vec![RecvClassCounters::default(); bounds.len() + 1];
    for t in &now.threads {
        let before = prev.and_then(|p| p.threads.iter().find(|b| b.tid == t.tid && b.pid == t.pid));
        for (c, now_c) in t.recv_classes.iter().enumerate().take(sums.len()) {
            let d = match before.and_then(|b| b.recv_classes.get(c)) {
                Some(b) => now_c.saturating_sub(b),
                None => *now_c,
            };
            sums[c].packets += d.packets;
            sums[c].bytes += d.bytes;
            sums[c].oncpu_ns += d.oncpu_ns;
        }
    }
    let packets: u64 = sums.iter().map(|c| c.packets).sum();
    let oncpu: u64 = sums.iter().map(|c| c.oncpu_ns).sum();
    let interval_s = interval_s.max(1e-9);
    sums.iter()
        .enumerate()
        .map(|(c, k)| ReceiveClass {
            min_bytes: if c == 0 { 0 } else { bounds[c - 1] },
            below_bytes: bounds.get(c).copied(),
            packets: k.packets,
            pps: k.packets as f64 / interval_s,
            bytes: k.bytes,
            oncpu_ns: k.oncpu_ns,
            ns_per_packet: (k.packets > 0).then(|| k.oncpu_ns as f64 / k.packets as f64),
            packet_share: k.packets as f64 / packets.max(1) as f64,
            oncpu_share: k.oncpu_ns as f64 / oncpu.max(1) as f64,
        })
        .collect()
}

impl ReceiveClass {
    /// The class's lengths in words: `< 256 bytes`, `256-1023 bytes`, `>= 1024 bytes`.
    pub fn label(&self) -> String {
        match (self.min_bytes, self.below_bytes) {
            (0, Some(b)) => format!("< {b} bytes"),
            (a, Some(b)) => format!("{a}-{} bytes", b.saturating_sub(1)),
            (a, None) => format!(">= {a} bytes"),
        }
    }
}

/// Bytes a frame carries on Ethernet besides its IP packet: header (14), frame check sequence
/// (4), preamble and start delimiter (8), inter-frame gap (12).
pub const ETHERNET_OVERHEAD_BYTES: f64 = 38.0;
/// Headers of a UDP datagram on IPv4 that a UDP socket's read does not return (IP 20, UDP 8).
pub const UDP_IPV4_HEADER_BYTES: f64 = 28.0;
/// The line rates the capacity is figured for, bits per second.
pub const LINE_RATES_BPS: [f64; 2] = [1e9, 10e9];

/// Fewer packets read than this (by a thread, or by all together, in the interval) give no cost
/// per packet and no capacity: the time of a thread that read a handful of packets (a control
/// connection's one read) is mostly not reading, and a line rate extrapolated from it is
/// nonsense (155,116 us a packet, 276,994 CPUs at 1 Gbit/s, from one read).
pub const MIN_COST_PACKETS: u64 = 200;

/// Where a receive cost's on-CPU time comes from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OncpuSource {
    /// the kernel's own run time of the threads (/proc/PID/task/TID/schedstat, read each tick)
    #[default]
    Kernel,
    /// scanprof's scheduler probes (the thread budget's `send_ns + other_ns`), when the kernel's
    /// figure is missing for a thread (no CONFIG_SCHED_INFO, or it began to read this tick)
    SchedulerProbes,
}

/// What reading packets cost a thread, or a set of threads, over an interval: its on-CPU time
/// per packet read: everything the thread ran, user code and syscalls, not only the receive
/// calls. `user` and `system` are the kernel's own split of it (utime, stime), in clock-tick steps.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReceiveCost {
    /// threads counted: 1 for a thread, the threads that read packets for the whole
    pub workers: usize,
    /// messages read in the interval
    pub packets: u64,
    /// messages read per second over the interval
    pub pps: f64,
    /// bytes those messages carried
    pub bytes: u64,
    /// on CPU over the interval, ns (from `oncpu_source`)
    pub oncpu_ns: u64,
    /// where `oncpu_ns` comes from
    pub oncpu_source: OncpuSource,
    /// on CPU over the interval by scanprof's scheduler probes (the budget's `send_ns +
    /// other_ns`), ns: beside the kernel's figure, it shows what the probes miss (a few us
    /// per wake-up, measured here)
    pub probes_oncpu_ns: u64,
    /// runnable but waiting for a CPU over the interval, by scanprof's scheduler probes, ns
    /// (absent in bundles older than it)
    #[serde(default)]
    pub runq_ns: u64,
    /// `oncpu_ns / packets`, ns; None under `MIN_COST_PACKETS` packets
    pub ns_per_packet: Option<f64>,
    /// user and system CPU time over the interval (/proc utime and stime), ns; None when not read
    pub user_ns: Option<u64>,
    pub system_ns: Option<u64>,
    /// `user_ns / packets` and `system_ns / packets`, ns
    pub user_ns_per_packet: Option<f64>,
    pub system_ns_per_packet: Option<f64>,
    /// the share of a CPU needed to read a full line of such packets, at 1 and 10 Gbit/s;
    /// None under `MIN_COST_PACKETS` packets
    pub capacity: Option<Capacity>,
}

/// One thread's receive cost.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ThreadReceiveCost {
    pub tid: u32,
    pub pid: u32,
    #[serde(flatten)]
    pub cost: ReceiveCost,
}

/// CPU needed to read a full line of packets of the measured mean size at the measured cost.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Capacity {
    /// mean IP packet, bytes: mean bytes read + 28 (IPv4 and UDP headers, which a UDP socket's
    /// read does not return)
    pub packet_bytes: f64,
    /// the same on the wire, bytes: + 38 (Ethernet header, FCS, preamble, inter-frame gap)
    pub wire_bytes: f64,
    /// one row per line rate (`LINE_RATES_BPS`)
    pub line_rates: Vec<LineRate>,
}

/// One line rate and the CPU its packets need.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LineRate {
    /// bits per second
    pub bps: f64,
    /// packets per second at that rate: `bps / (8 x wire_bytes)`
    pub pps: f64,
    /// CPUs needed: `pps x ns_per_packet / 1e9` (1.0 = one CPU busy all the time)
    pub cpus: f64,
    /// the share of one worker's CPU when the packets are spread evenly: `cpus / workers`
    /// (above 1.0: these workers cannot keep up)
    pub cpus_per_worker: f64,
}

/// The capacity a cost per packet and a mean message size imply, for `workers` threads.
pub fn capacity(ns_per_packet: f64, mean_read_bytes: f64, workers: usize) -> Capacity {
    let packet_bytes = mean_read_bytes + UDP_IPV4_HEADER_BYTES;
    let wire_bytes = packet_bytes + ETHERNET_OVERHEAD_BYTES;
    let line_rates = LINE_RATES_BPS
        .iter()
        .map(|&bps| {
            let pps = bps / (8.0 * wire_bytes);
            let cpus = pps * ns_per_packet / 1e9;
            LineRate {
                bps,
                pps,
                cpus,
                cpus_per_worker: cpus / workers.max(1) as f64,
            }
        })
        .collect();
    Capacity {
        packet_bytes,
        wire_bytes,
        line_rates,
    }
}

/// Totals of one or more threads over an interval, before dividing.
#[derive(Default)]
struct CostSums {
    workers: usize,
    packets: u64,
    bytes: u64,
    /// the scheduler probes' on-CPU time
    probes_oncpu_ns: u64,
    /// and their time waiting for a CPU
    runq_ns: u64,
    /// the kernel's figures; None when missing for any thread
    cpu: Option<ThreadCpuTime>,
}

impl CostSums {
    fn add(&mut self, o: &CostSums) {
        // The kernel's figures hold for the whole only when every thread has them.
        self.cpu = match (self.workers, self.cpu, o.cpu) {
            (0, _, c) => c,
            (_, Some(a), Some(b)) => Some(ThreadCpuTime {
                oncpu_ns: a.oncpu_ns.zip(b.oncpu_ns).map(|(x, y)| x + y),
                user_ns: a.user_ns + b.user_ns,
                system_ns: a.system_ns + b.system_ns,
            }),
            _ => None,
        };
        self.workers += o.workers;
        self.packets += o.packets;
        self.bytes += o.bytes;
        self.probes_oncpu_ns += o.probes_oncpu_ns;
        self.runq_ns += o.runq_ns;
    }

    fn cost(&self, interval_s: f64) -> ReceiveCost {
        let per = |ns: u64| (self.packets >= MIN_COST_PACKETS).then(|| ns as f64 / self.packets as f64);
        let (oncpu_ns, oncpu_source) = match self.cpu.and_then(|c| c.oncpu_ns) {
            Some(ns) => (ns, OncpuSource::Kernel),
            None => (self.probes_oncpu_ns, OncpuSource::SchedulerProbes),
        };
        let ns_per_packet = per(oncpu_ns);
        ReceiveCost {
            workers: self.workers,
            packets: self.packets,
            pps: self.packets as f64 / interval_s,
            bytes: self.bytes,
            oncpu_ns,
            oncpu_source,
            probes_oncpu_ns: self.probes_oncpu_ns,
            runq_ns: self.runq_ns,
            ns_per_packet,
            user_ns: self.cpu.map(|c| c.user_ns),
            system_ns: self.cpu.map(|c| c.system_ns),
            user_ns_per_packet: self.cpu.and_then(|c| per(c.user_ns)),
            system_ns_per_packet: self.cpu.and_then(|c| per(c.system_ns)),
            capacity: ns_per_packet
                .map(|ns| capacity(ns, self.bytes as f64 / self.packets as f64, self.workers)),
        }
    }
}

/// One thread's figures between `before` (None: since attach) and `now`.
fn thread_sums(now: &ThreadCounters, before: Option<&ThreadCounters>) -> CostSums {
    let zero = ThreadCounters::default();
    let b = before.unwrap_or(&zero);
    let budget = now.budget.saturating_sub(&b.budget);
    let cpu = match (now.cpu, before.map(|b| b.cpu)) {
        (Some(n), None) => Some(n),
        (Some(n), Some(Some(p))) => Some(n.saturating_sub(&p)),
        // First read this tick (the thread began to receive): the time before it is unknown.
        _ => None,
    };
    CostSums {
        workers: 1,
        packets: now.recv.packets.saturating_sub(b.recv.packets),
        bytes: now.recv.bytes.saturating_sub(b.recv.bytes),
        probes_oncpu_ns: budget.send_ns + budget.other_ns,
        runq_ns: budget.preempted_ns,
        cpu,
    }
}

/// The receive cost per thread that read packets between `prev` (None: since attach) and
/// `now`, most packets first, and over all of them.
pub fn receive_costs(
    now: &CounterSample,
    prev: Option<&CounterSample>,
    interval_s: f64,
) -> (Vec<ThreadReceiveCost>, Option<ReceiveCost>) {
    let interval_s = interval_s.max(1e-9);
    let mut all = CostSums::default();
    let mut threads = Vec::new();
    for t in &now.threads {
        let before = prev.and_then(|p| p.threads.iter().find(|b| b.tid == t.tid && b.pid == t.pid));
        let sums = thread_sums(t, before);
        if sums.packets == 0 {
            continue;
        }
        all.add(&sums);
        threads.push(ThreadReceiveCost {
            tid: t.tid,
            pid: t.pid,
            cost: sums.cost(interval_s),
        });
    }
    threads.sort_by_key(|t| (std::cmp::Reverse(t.cost.packets), t.tid));
    let total = (all.packets >= MIN_COST_PACKETS).then(|| all.cost(interval_s));
    (threads, total)
}

fn yes() -> bool {
    true
}

impl ReceiveView {
    /// The count of one stage (0 when absent).
    pub fn count(&self, stage: StageName) -> u64 {
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
    if !r.any() && d == 0 && now.packet_rings.is_empty() {
        return None;
    }
    let rings = super::rings::ring_views(now, prev);
    let (r0, d0) = prev.map_or((RecvCounters::default(), 0), |p| {
        (recv_totals(p), drops_before_read(p))
    });
    let interval_s = interval_s.max(1e-9);
    let (threads, cost) = receive_costs(now, prev, interval_s);
    let stage = |name: StageName, total: u64, before: u64| {
        let count = total.saturating_sub(before);
        Stage {
            name,
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
        ]
        .into_iter()
        .chain(
            (!rings.is_empty())
                .then(|| {
                    // What the family reads: a socket nobody reads is listed, not counted.
                    let sum = |f: fn(&super::rings::RingView) -> u64| {
                        rings.iter().filter(|v| v.is_reader()).map(f).sum::<u64>()
                    };
                    let (queued, dropped) = (sum(|v| v.queued_total), sum(|v| v.dropped_total));
                    let (queued0, dropped0) = (queued - sum(|v| v.queued), dropped - sum(|v| v.dropped));
                    [
                        stage(super::rings::RING_STAGES[0], queued, queued0),
                        stage(super::rings::RING_STAGES[1], dropped, dropped0),
                    ]
                })
                .into_iter()
                .flatten(),
        )
        .collect(),
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
        udp_refused: udp_refused_between(now, prev),
        threads,
        cost,
        classes: receive_classes(now, prev, interval_s),
        rings,
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
        assert_eq!(v.count(StageName::RecvCalls), 1000);
        assert_eq!(v.count(StageName::RecvPackets), 900);
        assert_eq!(v.count(StageName::RecvDrops), 800);
        let packets = &v.stages[2];
        assert_eq!((packets.total, packets.pps), (990, 450.0));
        assert_eq!((v.failed_calls, v.bytes), (100, 90_000));
        assert_eq!(v.drops.len(), 1);
        assert_eq!(v.drops_of("SOCKET_RCVBUFF"), 800);
        assert_eq!(v.drops_of("NO_SOCKET"), 0);
        // Since attach (the summary): the totals themselves.
        let run = receive_view(&now, None, 3.0, &rows).expect("the family receives");
        assert_eq!(
            (run.count(StageName::RecvPackets), run.count(StageName::RecvDrops)),
            (990, 850)
        );
    }

    #[test]
    fn drops_at_a_socket_the_family_never_read_make_a_funnel() {
        let s = sample(1_000_000_000, RecvCounters::default(), 5);
        let v = receive_view(&s, None, 1.0, &[]).expect("drops before a read");
        assert_eq!(
            (v.count(StageName::RecvDrops), v.count(StageName::RecvPackets)),
            (5, 0)
        );
    }

    /// The UDP refusals are the interval's, by kind, over the family's processes; absent when
    /// the program is not attached.
    #[test]
    fn udp_refusals_are_the_intervals_by_kind() {
        use crate::collect::udp_refused::UdpRefused;
        let refused = |pid, kind, refused| UdpRefused {
            pid,
            netns: 1,
            kind,
            refused,
            moved: 0,
        };
        let r = RecvCounters {
            calls: 10,
            packets: 10,
            ..Default::default()
        };
        let mut prev = sample(1_000_000_000, r, 0);
        let mut now = sample(2_000_000_000, r, 0);
        assert_eq!(
            receive_view(&now, None, 1.0, &[]).expect("receives").udp_refused,
            None
        );
        prev.udp_refused = Some(vec![refused(7, UdpRefusal::Rcvbuf, 100)]);
        now.udp_refused = Some(vec![
            refused(7, UdpRefusal::Rcvbuf, 350),
            refused(7, UdpRefusal::Memory, 2),
            refused(8, UdpRefusal::Rcvbuf, 50),
        ]);
        let tick = receive_view(&now, Some(&prev), 1.0, &[]).expect("receives");
        assert_eq!(
            tick.udp_refused,
            Some(UdpRefusedCounts {
                rcvbuf: 300,
                memory: 2
            })
        );
        let run = receive_view(&now, None, 2.0, &[]).expect("receives");
        assert_eq!(
            run.udp_refused,
            Some(UdpRefusedCounts {
                rcvbuf: 400,
                memory: 2
            })
        );
    }

    /// A reading thread: `probes_ns` on CPU by the scheduler probes, and the kernel's
    /// (on-CPU, user, system) when read.
    fn worker(tid: u32, packets: u64, probes_ns: u64, cpu: Option<(u64, u64, u64)>) -> ThreadCounters {
        ThreadCounters {
            tid,
            pid: 7,
            recv: RecvCounters {
                calls: packets,
                packets,
                bytes: packets * 100,
                ..Default::default()
            },
            budget: crate::collect::TimeBudget {
                other_ns: probes_ns,
                ..Default::default()
            },
            cpu: cpu.map(|(oncpu, user_ns, system_ns)| ThreadCpuTime {
                oncpu_ns: Some(oncpu),
                user_ns,
                system_ns,
            }),
            ..Default::default()
        }
    }

    fn at(t_ns: u64, threads: Vec<ThreadCounters>) -> CounterSample {
        CounterSample {
            t_ns,
            threads,
            ..Default::default()
        }
    }

    #[test]
    fn the_cost_per_packet_is_each_threads_oncpu_time_over_its_packets_in_the_interval() {
        let prev = at(
            1_000_000_000,
            vec![
                worker(1, 1_000, 2_000_000, Some((3_000_000, 1_000_000, 2_000_000))),
                worker(2, 500, 1_000_000, Some((1_000_000, 0, 0))),
            ],
        );
        let now = at(
            3_000_000_000,
            vec![
                // 20,000 packets in 2 s on 20 ms of CPU by the kernel (the probes saw 15 ms):
                // 1,000 ns each, a third of it user.
                worker(1, 21_000, 17_000_000, Some((23_000_000, 7_666_666, 15_333_334))),
                // 10,000 packets; the kernel's figure was not read this time: the probes' 30 ms.
                worker(2, 10_500, 31_000_000, None),
                // Never read a packet: not a worker.
                worker(3, 0, 50_000_000, Some((50_000_000, 0, 50_000_000))),
            ],
        );
        let v = receive_view(&now, Some(&prev), 2.0, &[]).expect("the family receives");
        assert_eq!(v.threads.len(), 2);
        let t1 = &v.threads[0].cost;
        assert_eq!((v.threads[0].tid, t1.packets, t1.pps), (1, 20_000, 10_000.0));
        assert_eq!(
            (t1.oncpu_source, t1.oncpu_ns, t1.probes_oncpu_ns),
            (OncpuSource::Kernel, 20_000_000, 15_000_000)
        );
        assert_eq!(t1.ns_per_packet, Some(1_000.0));
        assert_eq!((t1.user_ns, t1.system_ns), (Some(6_666_666), Some(13_333_334)));
        assert!((t1.user_ns_per_packet.unwrap() - 333.3).abs() < 0.1);
        let t2 = &v.threads[1].cost;
        assert_eq!(
            (t2.oncpu_source, t2.ns_per_packet),
            (OncpuSource::SchedulerProbes, Some(3_000.0))
        );
        assert_eq!(t2.user_ns, None);
        // One thread without the kernel's figures: the whole takes the probes' for all.
        let all = v.cost.as_ref().expect("packets were read");
        assert_eq!((all.workers, all.packets, all.oncpu_ns), (2, 30_000, 45_000_000));
        assert_eq!(
            (all.oncpu_source, all.user_ns),
            (OncpuSource::SchedulerProbes, None)
        );
        assert_eq!(all.ns_per_packet, Some(1_500.0));
        // Since attach (the summary): the sample's totals.
        let run = receive_view(&now, None, 3.0, &[]).unwrap();
        assert_eq!(run.threads[0].cost.ns_per_packet, Some(23_000_000.0 / 21_000.0));
        assert_eq!(run.threads[0].cost.user_ns, Some(7_666_666));
        // Both with the kernel's figures: the sums.
        let both = at(
            3_000_000_000,
            vec![
                worker(1, 21_000, 17_000_000, Some((23_000_000, 7_666_666, 15_333_334))),
                worker(2, 10_500, 31_000_000, Some((31_000_000, 1_000_000, 29_000_000))),
            ],
        );
        let v = receive_view(&both, Some(&prev), 2.0, &[]).unwrap();
        let all = v.cost.as_ref().unwrap();
        assert_eq!(
            (all.oncpu_source, all.oncpu_ns, all.probes_oncpu_ns),
            (OncpuSource::Kernel, 50_000_000, 45_000_000)
        );
        assert_eq!((all.user_ns, all.system_ns), (Some(7_666_666), Some(42_333_334)));
    }

    #[test]
    fn a_handful_of_reads_gives_no_cost_per_packet_and_no_capacity() {
        // iperf3 -u: one read on its control connection, the thread 155 ms on a CPU sending.
        let now = at(
            1_000_000_000,
            vec![worker(1, 1, 155_116_000, Some((155_116_000, 0, 155_116_000)))],
        );
        let v = receive_view(&now, None, 1.0, &[]).expect("the family received");
        assert_eq!(v.cost, None, "{v:#?}");
        assert_eq!(v.threads.len(), 1);
        let t = &v.threads[0].cost;
        assert_eq!((t.packets, t.ns_per_packet, t.capacity.as_ref()), (1, None, None));
        assert_eq!(t.system_ns_per_packet, None);
        // From MIN_COST_PACKETS on, both.
        let now = at(
            1_000_000_000,
            vec![worker(1, MIN_COST_PACKETS, 200_000, Some((200_000, 0, 200_000)))],
        );
        let v = receive_view(&now, None, 1.0, &[]).unwrap();
        let all = v.cost.expect("enough packets");
        assert_eq!(all.ns_per_packet, Some(1_000.0));
        assert!(all.capacity.is_some());
    }

    #[test]
    fn capacity_counts_packets_on_the_wire_with_udp_ip_and_ethernet_framing() {
        // 100 bytes read: a 128-byte IP packet, 166 bytes on the wire.
        let c = capacity(1_000.0, 100.0, 2);
        assert_eq!((c.packet_bytes, c.wire_bytes), (128.0, 166.0));
        let g1 = &c.line_rates[0];
        assert_eq!(g1.bps, 1e9);
        assert!((g1.pps - 753_012.05).abs() < 0.01, "{g1:?}");
        // 753,012 pps at 1 us each: 0.75 of a CPU, 0.38 of each of the two workers.
        assert!((g1.cpus - 0.753_012).abs() < 1e-6, "{g1:?}");
        assert!((g1.cpus_per_worker - 0.376_506).abs() < 1e-6, "{g1:?}");
        let g10 = &c.line_rates[1];
        assert!((g10.pps - 7_530_120.48).abs() < 0.01 && (g10.cpus - 7.530_120).abs() < 1e-6);
        // Full-size frames: 1472 bytes read are a 1500-byte packet, 1538 on the wire.
        let big = capacity(1_000.0, 1472.0, 1);
        assert!((big.line_rates[0].pps - 81_274.38).abs() < 0.01);
    }

    #[test]
    fn classes_sum_each_class_over_threads_in_the_interval_with_shares_and_labels() {
        let class = |packets, oncpu_ns| RecvClassCounters {
            packets,
            bytes: packets * 64,
            oncpu_ns,
        };
        let thread = |tid, classes: Vec<RecvClassCounters>| ThreadCounters {
            tid,
            pid: 7,
            recv_classes: classes,
            ..Default::default()
        };
        let bounds = vec![256, 1024];
        let prev = CounterSample {
            t_ns: 1_000_000_000,
            threads: vec![thread(
                1,
                vec![class(100, 1_000_000), class(10, 1_000_000), class(0, 0)],
            )],
            recv_class_bounds: bounds.clone(),
            ..Default::default()
        };
        let now = CounterSample {
            t_ns: 3_000_000_000,
            threads: vec![
                // +900 cheap at 1 us, +90 mid at 10 us
                thread(
                    1,
                    vec![class(1_000, 1_900_000), class(100, 1_900_000), class(0, 0)],
                ),
                // new this interval: all of it counts
                thread(2, vec![class(1_000, 1_000_000), class(0, 0), class(10, 500_000)]),
            ],
            recv_class_bounds: bounds,
            ..Default::default()
        };
        let c = receive_classes(&now, Some(&prev), 2.0);
        assert_eq!(c.len(), 3);
        assert_eq!((c[0].packets, c[0].oncpu_ns), (1_900, 1_900_000));
        assert_eq!(c[0].ns_per_packet, Some(1_000.0));
        assert_eq!((c[0].pps, c[1].ns_per_packet), (950.0, Some(10_000.0)));
        assert_eq!((c[2].packets, c[2].ns_per_packet), (10, Some(50_000.0)));
        assert!((c[0].packet_share - 1_900.0 / 2_000.0).abs() < 1e-12);
        assert!((c[2].oncpu_share - 0.5 / 3.3).abs() < 1e-12);
        assert_eq!(
            c.iter().map(ReceiveClass::label).collect::<Vec<_>>(),
            ["< 256 bytes", "256-1023 bytes", ">= 1024 bytes"]
        );
        // Not classed: no classes.
        let plain = CounterSample {
            recv_class_bounds: Vec::new(),
            ..now
        };
        assert!(receive_classes(&plain, None, 1.0).is_empty());
    }
}
