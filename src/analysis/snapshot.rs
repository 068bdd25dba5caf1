//! The types every view renders: one `Snapshot` per tick and one `Summary` at the end of a run.
//! The terminal view, the text report, the NDJSON stream and exported bundles all take these,
//! so they cannot disagree. docs/events.md documents every field and unit.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use super::probe_cost::{NoShare, ProbeCost, ProgramCost, PROBE_COST_ALERT};
pub use super::receive::{
    Capacity, LineRate, OncpuSource, ReceiveCost, ReceiveView, ThreadReceiveCost, RECV_STAGES,
};
pub use super::scanner::*;
pub use super::stage::*;
use super::stats::RunStats;
pub use super::verdict::Verdict;
use crate::collect::family::ProcessInfo;
use crate::collect::{Health, QueueDepth, TimeBudget};
use crate::wrappers::PacerKind;

/// Version of the JSON layout of `Snapshot` and `Summary`; bumped on any incompatible change.
/// 2: a sample's drop rows carry the drops of its tick only (1: every row, counts since attach).
pub const SCHEMA_VERSION: u32 = 2;

/// The family's connect(2) calls on TCP sockets over the run: a connect scanner's connection
/// attempts. They are also its send calls (the funnel's `send_calls`), and the SYNs they sent
/// its packets (`syscall_packets`), so a connect scanner's achieved pps is connection attempts
/// per second.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct ConnectView {
    /// connect calls on TCP sockets, failed ones included
    pub attempts: u64,
    /// attempts whose SYN went out (returned 0, EINPROGRESS, or an answer to the SYN)
    pub syns: u64,
    /// of those, calls that returned the answer itself: ECONNREFUSED (a closed port's RST),
    /// ETIMEDOUT, EHOSTUNREACH; a scan's normal outcomes, not failures
    pub answered: u64,
    /// attempts that failed before their SYN (EADDRNOTAVAIL, ENETUNREACH...): in the summary's
    /// failed_calls and errors
    pub failed: u64,
    /// attempts per second over the send window
    pub attempts_pps: f64,
    /// whether connection attempts are most of the family's send calls: its packets are SYNs
    /// and the views name its rate "connection attempts/s"
    pub connect_scanner: bool,
    /// SYNs the kernel sent again for these attempts (its TCP timer, for a connect not answered
    /// in time: tcp_syn_retries, the first after 1 s): packets on the wire beyond `syns` that no
    /// call of the family sent, so neither in `syns` nor in the send calls' rates; None when
    /// they were not counted (the program is not attached, or a bundle older than it)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_syn_retransmits: Option<u64>,
}

impl ConnectView {
    /// The view of `c` among `send_calls` send calls over a `window_s`-second send window, with
    /// the kernel's SYN retransmissions for them; None when the family made no connection
    /// attempt.
    pub fn of(
        c: &crate::collect::ConnectCounters,
        send_calls: u64,
        window_s: f64,
        kernel_syn_retransmits: Option<u64>,
    ) -> Option<ConnectView> {
        (c.calls > 0).then(|| ConnectView {
            kernel_syn_retransmits,
            attempts: c.calls,
            syns: c.syns,
            answered: c.answered,
            failed: c.calls.saturating_sub(c.syns),
            attempts_pps: if window_s > 0.0 {
                c.calls as f64 / window_s
            } else {
                0.0
            },
            connect_scanner: c.calls * 2 > send_calls,
        })
    }
}

/// Where a thread's time went over an interval, as fractions of the interval (sum <= 1).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct BudgetShares {
    pub send: f64,
    pub blocked_send: f64,
    pub sleep: f64,
    pub preempted: f64,
    pub other: f64,
}

impl BudgetShares {
    pub fn of(b: &TimeBudget, interval_ns: u64) -> BudgetShares {
        let d = interval_ns.max(1) as f64;
        BudgetShares {
            send: b.send_ns as f64 / d,
            blocked_send: b.blocked_send_ns as f64 / d,
            sleep: b.sleep_ns as f64 / d,
            preempted: b.preempted_ns as f64 / d,
            other: b.other_ns as f64 / d,
        }
    }
}

/// One thread that sent packets.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThreadView {
    pub tid: u32,
    pub pid: u32,
    pub comm: String,
    pub calls: u64,
    pub packets: u64,
    /// packets per second over the interval
    pub pps: f64,
    pub failed_calls: u64,
    pub errors: BTreeMap<String, u64>,
    /// time spent in each state over the interval, ns
    pub budget: TimeBudget,
    pub shares: BudgetShares,
    /// in the run's summary only: the budget over the thread's own send window (its first
    /// packet to its last), without the time before (start-up, calibration) and after
    #[serde(default)]
    pub send_window_budget: Option<TimeBudget>,
    /// send syscall duration quantiles, ns
    pub latency_p50_ns: Option<f64>,
    pub latency_p99_ns: Option<f64>,
    /// in a tick: the send the thread is blocked in at the tick's end, if it is
    #[serde(default)]
    pub blocked_now: Option<BlockedNowView>,
}

/// A send blocked at the end of a tick, seen while the block lasts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BlockedNowView {
    /// seconds since attach when the thread blocked
    pub since_s: f64,
    /// seconds it has been blocked so far
    pub blocked_s: f64,
    /// innermost kernel function below the scheduler, e.g. `sock_alloc_send_pskb`
    pub wait_site: String,
}

/// A device's traffic over the interval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceView {
    pub device: String,
    pub netns: u32,
    /// the family's packets through dev_queue_xmit, per second
    pub target_queued_pps: f64,
    /// the family's packets the driver accepted, per second
    pub target_xmit_pps: f64,
    /// every packet the driver accepted, per second
    pub all_xmit_pps: f64,
    /// driver refusals (NETDEV_TX_BUSY or errors) of any packet in the interval
    pub xmit_refused: u64,
    pub qlen_max: Option<u64>,
    pub backlog_max_bytes: Option<u64>,
    pub neigh_started: u64,
    pub neigh_queued: u64,
    pub neigh_resolved: u64,
    pub neigh_failed: u64,
    /// kind of the device's root qdisc as the probes first saw it (`tbf`, `pfifo_fast`,
    /// `noqueue`...); None when not read
    #[serde(default)]
    pub qdisc: Option<String>,
}

/// Time blocked inside send syscalls at one kernel wait site.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BlockSiteView {
    pub pid: u32,
    pub wait_site: String,
    pub stack: Vec<String>,
    /// seconds blocked in the interval (since attach, in the summary)
    pub blocked_s: f64,
    pub episodes: u64,
    /// share of the family's blocked-in-send time
    pub share: f64,
}

/// One stretch of time a thread spent blocked inside a send syscall.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EpisodeView {
    pub pid: u32,
    pub tid: u32,
    /// seconds since attach when it blocked
    pub start_s: f64,
    pub duration_ns: u64,
    pub wait_site: String,
}

/// Inter-send gaps of the family's sender threads.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GapView {
    pub count: u64,
    /// exact mean gap, ns
    pub mean_ns: Option<f64>,
    pub p50_ns: Option<f64>,
    pub p99_ns: Option<f64>,
    /// 1 / requested rate, ns
    pub slot_ns: Option<f64>,
    /// buckets [low_ns, high_ns, count]
    pub histogram: Vec<(u64, u64, u64)>,
}

/// What the family was doing in a tick, from its counters (`Analyzer::tick` decides it, once,
/// for every view). Only a whole tick of sending has its rate judged (`Snapshot::judges_rate`):
/// a scanner waiting for late replies sends nothing by design.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunPhase {
    /// no send call since attach yet (loading targets, calibrating, resolving)
    Starting,
    /// send calls in the tick, or a sender blocked inside one at its end
    #[default]
    Sending,
    /// no send call in the tick after having sent, with the family alive: a scanner's wait for
    /// late replies (masscan `--wait`, zmap `--cooldown-time`, unicornscan's listener timeout)
    /// or a pause
    Waiting,
    /// the family has exited, and sent nothing in the tick
    Ended,
}

impl RunPhase {
    /// The name the JSON and the views use.
    pub fn as_str(self) -> &'static str {
        match self {
            RunPhase::Starting => "starting",
            RunPhase::Sending => "sending",
            RunPhase::Waiting => "waiting",
            RunPhase::Ended => "ended",
        }
    }
}

impl std::fmt::Display for RunPhase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

/// Everything known at one tick; what the live views draw.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    pub schema_version: u32,
    /// tick number, from 1
    pub tick: u64,
    /// seconds since attach at the end of the tick
    pub t_s: f64,
    /// length of the tick, s
    pub interval_s: f64,
    /// what the family was doing in the tick (bundles older than the field read `sending`)
    #[serde(default)]
    pub phase: RunPhase,
    /// a sending tick whose rate covers time the family did not send in: it stopped sending
    /// before the tick's end, or the tick is shorter than the interval (the last one); its rate
    /// is not judged and the plots do not draw it as a rate
    #[serde(default)]
    pub partial: bool,
    /// seconds since attach of the family's latest packet send, None before the first
    #[serde(default)]
    pub last_send_s: Option<f64>,
    pub requested_pps: Option<f64>,
    /// packets per second through the family's send syscalls in this tick
    pub achieved_pps: f64,
    pub ratio: Option<f64>,
    pub stages: Vec<Stage>,
    pub processes: Vec<ProcessInfo>,
    pub threads: Vec<ThreadView>,
    pub drops: Vec<DropRow>,
    pub devices: Vec<DeviceView>,
    /// with `--device-stages sampled`, what the device stages' windows covered of this tick:
    /// the device-stage figures (dev_queue, qdisc_*, dev_xmit, the device rows) are estimates
    /// then; None when they are counted (and in bundles older than the field)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_sampling: Option<crate::collect::device_window::DeviceSampling>,
    pub block_sites: Vec<BlockSiteView>,
    pub gap: GapView,
    /// blocking episodes inside send that ended in this tick (1 ms or longer)
    pub episodes: Vec<EpisodeView>,
    /// per-tick achieved pps statistics over the complete ticks so far
    pub rate_stats: Option<RunStats>,
    pub health: Health,
    /// scanprof's own cost over the tick
    pub cost: Cost,
    /// what the scanner's own functions said, when a profile with probes applies
    #[serde(default)]
    pub scanner: Option<ScannerView>,
    /// the receive funnel over the tick, when the family receives (absent otherwise)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receive: Option<ReceiveView>,
    /// the reply funnel over the tick: probes sent, replies arrived, delivered, dropped here
    /// (absent when the reply counter is not attached, or nothing was sent or arrived)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replies: Option<super::replies::ReplyFunnel>,
    /// what bounds the family from outside its code over the interval: CPU quotas of its
    /// cgroups, steal time on its CPUs, conntrack tables (absent when none applies)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<LimitsView>,
    /// whether connection attempts (connect on TCP sockets) are most of the family's send calls
    /// since attach: its packets are then SYNs, and achieved_pps connection attempts per second
    #[serde(default)]
    pub connect_scanner: bool,
    /// what the running kernel lacks that scanprof measures with (`KernelLack`): each names the
    /// figures missing and what cannot be judged on it (absent when it lacks nothing)
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kernel_lacks: Vec<super::kernel::KernelLack>,
    /// ranked causes of the gap and of the losses so far, most important first
    #[serde(default)]
    pub verdicts: Vec<Verdict>,
    pub warnings: Vec<String>,
}

/// What scanprof itself costs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Cost {
    /// CPU scanprof's own process used, as a fraction of one core
    pub cpu: f64,
    /// probe hits that did work for scanprof, per second
    pub probe_hits_per_s: f64,
    /// what scanprof's BPF programs cost, charged to the target and to others (kernel run-time
    /// statistics); None when they were not measured
    #[serde(default)]
    pub bpf: Option<ProbeCost>,
}

/// What a reference sender reached on this machine at the target's requested rate, measured
/// in a private lab by `attach/run --baseline` (see `scanprof baseline`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Baseline {
    /// packets per second asked for; 0 = unlimited
    pub rate: f64,
    /// the reference sender's pacer (`--baseline-pacer`)
    pub pacer: PacerKind,
    /// packets per second between the first and last send
    pub achieved_pps: f64,
    /// achieved / requested; None when unlimited
    pub accuracy: Option<f64>,
    /// 99th percentile lateness against the slot, in ns (None from a sender that has none)
    pub p99_lateness_ns: Option<f64>,
    /// datagrams the lab receiver counted
    pub receiver_packets: u64,
    /// packets the kernel accepted from the sender
    pub sent: u64,
}

/// Why the run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EndReason {
    Duration,
    FamilyExited,
    Interrupted,
}

/// The whole run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub schema_version: u32,
    pub end_reason: EndReason,
    /// seconds from attach to the end of the run
    pub duration_s: f64,
    /// seconds from the family's first to its last packet send
    pub send_window_s: f64,
    /// seconds since attach of the family's first and latest packet send (None when it sent
    /// none, and in summaries older than them)
    #[serde(default)]
    pub first_send_s: Option<f64>,
    #[serde(default)]
    pub last_send_s: Option<f64>,
    /// what the family was doing when the run ended: `ended` once it exited, `waiting` when it
    /// was alive and had stopped sending, `sending`, or `starting` when it never sent
    #[serde(default)]
    pub phase: RunPhase,
    pub requested_pps: Option<f64>,
    /// packets per second that left through the family's send syscalls, over the send window
    pub achieved_pps: f64,
    /// what a reference sender reached on this machine at the requested rate (`--baseline`)
    pub baseline_pps: Option<f64>,
    pub baseline: Option<Baseline>,
    pub ratio: Option<f64>,
    pub packets: u64,
    pub bytes: u64,
    pub send_calls: u64,
    pub failed_calls: u64,
    pub errors: BTreeMap<String, u64>,
    /// stage name -> events per second over the send window
    pub stages: BTreeMap<StageName, f64>,
    /// stage name -> events over the run
    pub stage_counts: BTreeMap<StageName, u64>,
    /// statistics of the per-tick achieved pps over ticks wholly inside the send window
    pub rate_stats: Option<RunStats>,
    pub drops: Vec<DropRow>,
    pub processes: Vec<ProcessInfo>,
    /// sender threads over the run
    pub threads: Vec<ThreadView>,
    /// the sender threads' time, summed, ns
    pub budget: TimeBudget,
    pub block_sites: Vec<BlockSiteView>,
    pub gap: GapView,
    pub latency_p50_ns: Option<f64>,
    pub latency_p99_ns: Option<f64>,
    pub devices: Vec<DeviceView>,
    /// with `--device-stages sampled`, what the device stages' windows covered of the run: the
    /// device-stage figures are estimates then; None when they are counted (and in bundles
    /// older than the field)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_sampling: Option<crate::collect::device_window::DeviceSampling>,
    pub queues: Vec<QueueDepth>,
    pub lost_events: u64,
    pub health: Health,
    /// scanprof's own cost over the run
    pub cost: Cost,
    pub probes: Vec<crate::probes::ProbeStatus>,
    /// what the scanner's own functions said, when a profile applies
    #[serde(default)]
    pub scanner: Option<ScannerView>,
    /// the family's connection attempts (connect scanners), when it made any (absent in
    /// summaries older than them)
    #[serde(default)]
    pub connect: Option<ConnectView>,
    /// the receive funnel over the run (rates over its duration), when the family receives
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receive: Option<ReceiveView>,
    /// seconds of the ticks in which the family read packets or lost some before its read:
    /// the time the run's receive verdicts judge its load over (a run that outlasts its
    /// traffic would otherwise spread the load over idle time); absent when it received none
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receive_active_s: Option<f64>,
    /// the reply funnel over the run: probes sent, replies arrived, delivered, dropped here
    /// (absent when the reply counter is not attached, or nothing was sent or arrived)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replies: Option<super::replies::ReplyFunnel>,
    /// what bounds the family from outside its code over the interval: CPU quotas of its
    /// cgroups, steal time on its CPUs, conntrack tables (absent when none applies)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<LimitsView>,
    /// the relay funnel over the run, when the family both reads and sends packets
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relay: Option<RelayView>,
    /// what the running kernel lacks that scanprof measures with (`KernelLack`): each names the
    /// figures missing and what cannot be judged on it (absent when it lacks nothing)
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kernel_lacks: Vec<super::kernel::KernelLack>,
    /// ranked causes of the gap and of the losses, most important first
    #[serde(default)]
    pub verdicts: Vec<Verdict>,
    pub warnings: Vec<String>,
    /// headers of the family's dropped packets (sampled): written as a pcapng (`--pcap`, the
    /// bundle's drops.pcapng), not into the JSON, so empty in a summary read back
    #[serde(skip)]
    pub dropped_headers: crate::collect::headers::DroppedHeaders,
}

/// The relay funnel over the run (`analysis::relay::relay_view` makes it).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RelayView {
    /// outputs each packet read is written to (`--relay-fanout`)
    pub fanout: u32,
    /// packets the family read (ingress), and per second over the run
    pub read: u64,
    pub read_pps: f64,
    /// packets the family sent (egress), and per second over the run
    pub sent: u64,
    pub sent_pps: f64,
    /// `sent / read`; with a fan-out of N, N means every packet read was forwarded
    pub amplification: f64,
    /// packets for the family dropped by the kernel before its read (the receive funnel's
    /// `recv_drops`: at its sockets, e.g. PACKET_SOCK_ERROR, SOCKET_RCVBUFF, or in a backlog)
    pub kernel_drops: u64,
    /// the reasons of those drops, most first: (reason, packets)
    pub kernel_drop_reasons: Vec<(String, u64)>,
    /// whether the kernel names the socket a packet was dropped at (6.8 and newer): false, and
    /// drops at the relay's own sockets (a full packet socket) are not in `kernel_drops`
    #[serde(default)]
    pub kernel_drops_seen: bool,
    /// packets that reached the family: `read + kernel_drops`
    pub arrived: u64,
    /// sends the fan-out called for and that did not happen: `read x fanout - sent`
    pub unsent: u64,
    /// the relay's own drops, in packets read: `unsent / fanout`, rounded down
    pub own_drops: u64,
    /// send calls the kernel refused (ENOBUFS, EAGAIN): egress refused
    pub refused: u64,
    /// time of the threads that sent, ns: on CPU in send calls, blocked in them, on CPU
    /// elsewhere (reading and the relay's own work), and asleep or waiting elsewhere
    pub send_ns: u64,
    pub blocked_send_ns: u64,
    pub other_ns: u64,
    pub sleep_ns: u64,
    /// the share of the threads' busy time (on CPU, or blocked in a send) spent sending:
    /// `(send + blocked_send) / (send + blocked_send + other)`
    pub egress_time_share: f64,
}

/// What a family's achieved rate counts: packets, or a connect scanner's connection attempts
/// (the SYNs of its connect calls).
pub fn rate_unit(connect_scanner: bool) -> &'static str {
    if connect_scanner {
        "connection attempts/s"
    } else {
        "pps"
    }
}

impl Snapshot {
    /// The unit of achieved_pps as the views name it.
    pub fn rate_unit(&self) -> &'static str {
        rate_unit(self.connect_scanner)
    }

    /// Whether the tick's rate measures sending: a whole tick of the sending phase. Only such a
    /// tick gets rate verdicts, a point on the rate charts and the metrics' achieved rate.
    pub fn judges_rate(&self) -> bool {
        self.phase == RunPhase::Sending && !self.partial
    }

    /// What the family did in a tick whose rate is not judged, in words (None for a whole
    /// sending tick): the phase, the latest send, and the replies read in the tick.
    pub fn phase_text(&self) -> Option<String> {
        if self.judges_rate() {
            return None;
        }
        let last = self.last_send_s.map(|t| {
            format!(
                "last send at {t:.2} s, {:.2} s before the tick's end",
                (self.t_s - t).max(0.0)
            )
        });
        let mut text = match self.phase {
            RunPhase::Starting => "starting: no send call since attach yet".to_string(),
            RunPhase::Sending => format!(
                "partial tick: {}; its rate is not judged",
                last.clone()
                    .unwrap_or_else(|| format!("{:.2} s long", self.interval_s))
            ),
            RunPhase::Waiting => format!(
                "not sending ({}, or paused){}",
                self.scanner
                    .as_ref()
                    .and_then(|sc| sc.wait.as_deref())
                    .unwrap_or("waiting for late replies"),
                last.as_ref().map(|l| format!(": {l}")).unwrap_or_default()
            ),
            RunPhase::Ended => "ended: the family has exited".to_string(),
        };
        if let Some(r) = &self.receive {
            let read = r
                .stages
                .iter()
                .find(|s| s.name == StageName::RecvPackets)
                .map_or(0, |s| s.count);
            let queued: u64 = r.rings.iter().map(|g| g.queued).sum();
            text.push_str(&format!("; {read} packets read in the tick"));
            if !r.rings.is_empty() {
                text.push_str(&format!(", {queued} frames queued to its packet sockets"));
            }
        }
        Some(text)
    }
}

impl Summary {
    /// The unit of achieved_pps as the views name it.
    pub fn rate_unit(&self) -> &'static str {
        rate_unit(self.connect.is_some_and(|c| c.connect_scanner))
    }

    /// The sending threads' budgets over their own send windows, summed; None when a sending
    /// thread has none (a bundle recorded before they existed).
    pub fn send_window_budget(&self) -> Option<TimeBudget> {
        let mut sum = TimeBudget::default();
        let mut any = false;
        for t in self.threads.iter().filter(|t| t.packets > 0) {
            sum.add(&t.send_window_budget?);
            any = true;
        }
        any.then_some(sum)
    }
}

/// What bounds the family from outside its own code over an interval (a tick, or the run): the
/// CPU quotas of its cgroups and how often they throttled it, the time the hypervisor stole from
/// its CPUs, and the conntrack tables of its network namespaces.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LimitsView {
    /// cgroups with a CPU quota holding family processes (their own or an ancestor)
    #[serde(default)]
    pub cgroups: Vec<CgroupThrottleView>,
    /// steal time on the CPUs the family may run on
    #[serde(default)]
    pub steal: Option<StealView>,
    /// the conntrack tables of the family's network namespaces that hold entries
    #[serde(default)]
    pub conntrack: Vec<ConntrackView>,
}

impl LimitsView {
    pub fn is_empty(&self) -> bool {
        self.cgroups.is_empty() && self.steal.is_none() && self.conntrack.is_empty()
    }
}

/// A cgroup's CPU quota and its throttling over the interval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CgroupThrottleView {
    /// 1 (v1 `cpu` controller) or 2 (unified hierarchy)
    pub version: u8,
    /// path in its hierarchy, as /proc/PID/cgroup names it
    pub path: String,
    /// the family's processes in it or below it
    pub pids: Vec<u32>,
    /// the quota in CPUs (quota / period: 0.3 is 30% of one CPU)
    pub cpus: f64,
    /// CPU time allowed per period, us
    pub quota_us: u64,
    /// the period, us
    pub period_us: u64,
    /// periods with runnable tasks in the interval
    pub periods: u64,
    /// periods in which the quota ran out, in the interval
    pub throttled_periods: u64,
    /// time its tasks were throttled in the interval, s (summed over CPUs; a cgroup the family
    /// joined during the interval counts from zero, at most the interval's length)
    pub throttled_s: f64,
}

/// Hypervisor steal on the family's CPUs over the interval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StealView {
    /// the CPUs the family may run on
    pub cpus: Vec<u32>,
    /// steal time on them in the interval, s, summed over them
    pub steal_s: f64,
    /// steal_s / (CPUs x interval): the share of their time the hypervisor took
    pub share: f64,
}

/// The conntrack table of one network namespace of the family.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConntrackView {
    /// network namespace inode
    pub netns: u32,
    /// a family process in that namespace
    pub pid: u32,
    /// entries at the end of the interval
    pub count: u64,
    /// most entries read at any sample of the interval
    pub peak: u64,
    /// net.netfilter.nf_conntrack_max (one value for every namespace)
    pub max: Option<u64>,
    /// where the family's packets went, read when the table was full (addresses, or the prefix
    /// holding them)
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub destinations: Vec<String>,
}

impl ConntrackView {
    /// Whether the table was at its limit at some sample: at least 95% of the maximum
    /// (`system::conntrack::FULL_SHARE`).
    pub fn full(&self) -> bool {
        self.max
            .is_some_and(|m| m > 0 && self.peak as f64 >= crate::system::conntrack::FULL_SHARE * m as f64)
    }
}

/// Empty runs for unit tests: `Summary { field: x, ..Summary::for_tests() }` names only what a
/// test is about, so a new field of Summary or Snapshot is added here, once, not in every test.
#[cfg(test)]
impl Summary {
    /// A run of 0 s that sent nothing: every figure 0, every list empty, every option None.
    pub fn for_tests() -> Summary {
        Summary {
            schema_version: SCHEMA_VERSION,
            end_reason: EndReason::Duration,
            duration_s: 0.0,
            send_window_s: 0.0,
            first_send_s: None,
            last_send_s: None,
            phase: RunPhase::Ended,
            requested_pps: None,
            achieved_pps: 0.0,
            baseline_pps: None,
            baseline: None,
            ratio: None,
            packets: 0,
            bytes: 0,
            send_calls: 0,
            failed_calls: 0,
            errors: BTreeMap::new(),
            stages: BTreeMap::new(),
            stage_counts: BTreeMap::new(),
            rate_stats: None,
            drops: Vec::new(),
            processes: Vec::new(),
            threads: Vec::new(),
            budget: TimeBudget::default(),
            block_sites: Vec::new(),
            gap: GapView::default(),
            latency_p50_ns: None,
            latency_p99_ns: None,
            devices: Vec::new(),
            device_sampling: None,
            queues: Vec::new(),
            lost_events: 0,
            health: Health::default(),
            cost: Cost::default(),
            probes: Vec::new(),
            scanner: None,
            connect: None,
            receive: None,
            receive_active_s: None,
            replies: None,
            limits: None,
            relay: None,
            kernel_lacks: Vec::new(),
            verdicts: Vec::new(),
            warnings: Vec::new(),
            dropped_headers: Default::default(),
        }
    }
}

#[cfg(test)]
impl Snapshot {
    /// Tick 1 of 1 s that saw nothing: every figure 0, every list empty, every option None.
    pub fn for_tests() -> Snapshot {
        Snapshot {
            schema_version: SCHEMA_VERSION,
            tick: 1,
            t_s: 1.0,
            interval_s: 1.0,
            phase: RunPhase::Sending,
            partial: false,
            last_send_s: None,
            requested_pps: None,
            achieved_pps: 0.0,
            ratio: None,
            stages: Vec::new(),
            processes: Vec::new(),
            threads: Vec::new(),
            drops: Vec::new(),
            devices: Vec::new(),
            device_sampling: None,
            block_sites: Vec::new(),
            gap: GapView::default(),
            episodes: Vec::new(),
            rate_stats: None,
            health: Health::default(),
            cost: Cost::default(),
            scanner: None,
            receive: None,
            replies: None,
            limits: None,
            connect_scanner: false,
            kernel_lacks: Vec::new(),
            verdicts: Vec::new(),
            warnings: Vec::new(),
        }
    }
}
