//! One shape for a tick's Snapshot and the run's Summary: the figures the verdict rules read,
//! over one interval (the tick, or the run's send window), and the caveats that make every
//! verdict over it `weak`.

use std::collections::BTreeMap;

use super::units::{dur, pct, secs};
use super::{MIN_PACKETS, MIN_TICK_S, MIN_WINDOW_S};
use crate::analysis::kernel::KernelLack;
use crate::analysis::snapshot::{
    Baseline, BlockSiteView, DeviceView, DropRow, GapView, LimitsView, ProbeCost, ReceiveView, RequestedView,
    ScannerView, Snapshot, StageName, Summary, ThreadView,
};
use crate::collect::family::ProcessInfo;
use crate::collect::TimeBudget;
use crate::wrappers::PacerKind;

/// A thread that sent fewer than this share of the interval's packets is not a sender thread
/// for the time model (a resolver or a listener that sent a handful).
const SENDER_MIN_PACKET_SHARE: f64 = 0.01;
/// Thread time covering less than this share of senders x interval: the budget is partial.
const MIN_COVERAGE: f64 = 0.8;

/// The sender threads' time over the interval, ns, summed over the threads.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct ThreadTime {
    /// on CPU inside send syscalls
    pub send: f64,
    /// off CPU of its own accord inside send syscalls
    pub blocked: f64,
    /// off CPU of its own accord elsewhere
    pub sleep: f64,
    /// runnable, waiting for a CPU
    pub preempted: f64,
    /// the part of `preempted` right after wake-ups (not added to the total again); None when
    /// not measured
    pub wakeup: Option<f64>,
    /// on CPU outside send syscalls
    pub other: f64,
    /// sender threads summed
    pub senders: usize,
    /// thread time counted / (senders x interval)
    pub coverage: f64,
}

impl ThreadTime {
    pub fn total(&self) -> f64 {
        self.send + self.blocked + self.sleep + self.preempted + self.other
    }

    fn add(&mut self, b: &TimeBudget) {
        self.send += b.send_ns as f64;
        self.blocked += b.blocked_send_ns as f64;
        self.sleep += b.sleep_ns as f64;
        self.preempted += b.preempted_ns as f64;
        if let Some(w) = b.wakeup_wait_ns {
            *self.wakeup.get_or_insert(0.0) += w.min(b.preempted_ns) as f64;
        }
        self.other += b.other_ns as f64;
    }
}

/// Share of the packets sent that may go unseen after the send syscalls before the funnel is
/// called impossible (sends on stream sockets are not one packet each, for one).
const UNSEEN_SHARE: f64 = 0.1;
/// Fewer unseen packets than this are never called a fault.
const UNSEEN_MIN: u64 = 50;

/// The family's packets the stages after the send syscalls saw, in the interval: every packet a
/// send syscall accepted reaches one of them (a device, a neighbour's queue, or a drop).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct AfterSend {
    pub dev_queue: u64,
    pub dev_xmit: u64,
    /// the family's own packets dropped (class target_loss)
    pub target_drops: u64,
    /// packets queued waiting for a neighbour entry
    pub neigh_queued: u64,
}

impl AfterSend {
    /// Packets accepted by the send syscalls that no later stage saw: a device that bypasses
    /// the queue still transmits, so the larger of the two device counts is taken.
    pub fn unseen(&self, packets: u64) -> u64 {
        let seen = self.dev_queue.max(self.dev_xmit) + self.target_drops + self.neigh_queued;
        packets.saturating_sub(seen)
    }
}

/// A drop row with its count over the interval.
#[derive(Debug, Clone, Copy)]
pub(super) struct Dropped<'a> {
    pub row: &'a DropRow,
    pub count: u64,
}

impl Dropped<'_> {
    /// The row as a line of evidence: `QDISC_DROP at __dev_queue_xmit+0x7a on eth0: 48`.
    pub fn evidence(&self) -> String {
        let on = self
            .row
            .device
            .as_ref()
            .map_or(String::new(), |x| format!(" on {x}"));
        format!("{} at {}{on}: {}", self.row.reason, self.row.location, self.count)
    }
}

/// What the rules read.
#[derive(Debug, Clone)]
pub(super) struct Facts<'a> {
    /// a tick (true) or the whole run
    pub live: bool,
    /// packets per second asked for
    pub requested: Option<f64>,
    pub requested_view: Option<&'a RequestedView>,
    /// packets per second through the send syscalls over the interval
    pub achieved: f64,
    /// length of the interval the rates are over, s
    pub window_s: f64,
    /// seconds since attach at the end of the interval (live only)
    pub end_s: Option<f64>,
    /// seconds since attach at the start and end of the interval: the tick, or the run's send
    /// window (None in summaries written before they carried it)
    pub span_s: Option<(f64, f64)>,
    /// packets the send syscalls accepted in the interval
    pub packets: u64,
    /// send calls in the interval, failed ones included
    pub calls: u64,
    pub failed_calls: u64,
    /// SYNs the kernel retransmitted for the family's unanswered connects (its TCP timer, no
    /// call of the family): on the wire and dropped on the way like its packets, so part of what
    /// a loss share is taken of. Over the run in a summary; 0 in a tick, which does not carry it
    pub syn_retransmits: u64,
    /// failed sends by errno name, in the interval
    pub errors: BTreeMap<String, u64>,
    pub time: ThreadTime,
    pub gap: &'a GapView,
    pub block_sites: &'a [BlockSiteView],
    pub drops: Vec<Dropped<'a>>,
    pub devices: &'a [DeviceView],
    pub scanner: Option<&'a ScannerView>,
    /// the pacer in use when the run is scanprof's own reference sender (`scanprof send`),
    /// read once from its profile's option text (`--pacer tsc`)
    pub reference_pacer: Option<PacerKind>,
    /// the family's processes, with their exits
    pub processes: &'a [ProcessInfo],
    pub baseline: Option<&'a Baseline>,
    /// packets since attach (uprobe figures are since attach too)
    pub packets_total: u64,
    /// packets per second the drivers accepted (what left the machine), when measured
    pub left_pps: Option<f64>,
    /// send syscall duration, median, ns
    pub latency_p50_ns: Option<f64>,
    /// the family's packets at the stages after the send syscalls, in the interval; None when
    /// the device stages were not measured or were sampled (`device_sampling`: estimates cannot
    /// show a packet unseen after the syscall)
    pub after_send: Option<AfterSend>,
    /// with `--device-stages sampled`, what the device stages' windows covered: their figures
    /// (`devices`, the dev_queue and dev_xmit stages) are estimates, and what needs them exact
    /// is not judged (not_judged.rs)
    pub device_sampling: Option<crate::collect::device_window::DeviceSampling>,
    /// what scanprof's own BPF programs cost over the interval (or the run), when measured
    pub probe: Option<&'a ProbeCost>,
    /// why every verdict over this interval is weak
    pub caveats: Vec<String>,
    /// the receive funnel over the interval, when the family receives
    pub receive: Option<&'a ReceiveView>,
    /// length of the interval the receive funnel covers, s (the tick, or the whole run)
    pub receive_s: f64,
    /// what bounds the family from outside its code (cgroup quotas, steal, conntrack tables)
    pub limits: Option<&'a LimitsView>,
    /// time the sender threads waited for their cgroups' CPU quota, ns, summed over them (each
    /// at most its own window); None when no sender is in a cgroup with a quota
    pub throttled_ns: Option<f64>,
    /// the relay funnel (the run's only), when the family reads and sends
    pub relay: Option<&'a crate::analysis::snapshot::RelayView>,
    /// the reply funnel over the interval, when the reply counter was attached
    pub replies: Option<&'a crate::analysis::replies::ReplyFunnel>,
    /// what the running kernel lacks that the probes measure with
    pub kernel_lacks: &'a [KernelLack],
}

impl<'a> Facts<'a> {
    /// scanprof's BPF run time on the target's threads over the interval's packets, ns: the
    /// probes' ns per packet on those threads (of the tick, or of the run) times the interval's
    /// packets. Their runs for the rest of the machine never count. None when not measured, or
    /// when the interval has no share of the target's time (too little on a CPU, too few
    /// packets, not timed).
    pub fn probe_ns(&self) -> Option<f64> {
        let p = self.probe?;
        p.share_of_target?;
        Some(p.target_ns_per_packet? * self.packets as f64)
    }

    pub fn of_snapshot(s: &'a Snapshot) -> Facts<'a> {
        let stage = |name: StageName| s.stages.iter().find(|st| st.name == name);
        let thread_packets: u64 = s.threads.iter().map(|t| t.packets).sum();
        let packets = stage(StageName::SyscallPackets).map_or(thread_packets, |st| st.count);
        let calls = stage(StageName::SendCalls)
            .map_or_else(|| s.threads.iter().map(|t| t.calls).sum(), |st| st.count);
        let interval_ns = s.interval_s * 1e9;

        let min_packets = ((packets as f64 * SENDER_MIN_PACKET_SHARE).ceil() as u64).max(1);
        let mut time = ThreadTime::default();
        let mut sender_windows: Vec<(u32, f64)> = Vec::new();
        for t in &s.threads {
            // A sender blocked in send for most of the tick sends nothing in it, yet it is the
            // sender whose time matters; in a tick without any packet, every listed thread (a
            // live one that sent before) is a sender that stopped.
            let blocked_all_tick = t.packets == 0 && t.budget.blocked_send_ns as f64 >= 0.5 * interval_ns;
            if t.packets >= min_packets || blocked_all_tick || packets == 0 {
                time.add(&t.budget);
                time.senders += 1;
                sender_windows.push((t.pid, interval_ns));
            }
        }
        time.coverage = coverage(&time, interval_ns);

        let mut caveats = Vec::new();
        if s.tick <= 1 {
            caveats.push("first tick: it includes the start-up".to_string());
        }
        if s.interval_s < MIN_TICK_S {
            caveats.push(format!("a tick of only {}", secs(s.interval_s)));
        }
        if packets < MIN_PACKETS {
            caveats.push(format!("only {packets} packets in this tick"));
        }
        common_caveats(
            &mut caveats,
            &time,
            s.health.threads_untracked,
            s.scanner.as_ref(),
        );

        let busiest: Option<&ThreadView> = s.threads.iter().max_by_key(|t| t.packets);
        Facts {
            live: true,
            requested: requested(s.requested_pps, s.scanner.as_ref()),
            requested_view: s.scanner.as_ref().map(|v| &v.requested),
            achieved: s.achieved_pps,
            window_s: s.interval_s,
            end_s: Some(s.t_s),
            span_s: Some((s.t_s - s.interval_s, s.t_s)),
            packets,
            calls,
            failed_calls: s.threads.iter().map(|t| t.failed_calls).sum(),
            syn_retransmits: 0,
            errors: merged_errors(&s.threads),
            time,
            gap: &s.gap,
            block_sites: &s.block_sites,
            drops: s
                .drops
                .iter()
                .map(|row| Dropped {
                    row,
                    count: (row.rate * s.interval_s).round().max(0.0) as u64,
                })
                .collect(),
            devices: &s.devices,
            scanner: s.scanner.as_ref(),
            reference_pacer: reference_pacer(s.scanner.as_ref()),
            processes: &s.processes,
            baseline: None,
            packets_total: stage(StageName::SyscallPackets).map_or(packets, |st| st.total),
            left_pps: stage(StageName::DevXmit)
                .map(|st| st.pps)
                .filter(|p| *p > 0.0 && s.device_sampling.is_none()),
            latency_p50_ns: busiest.and_then(|t| t.latency_p50_ns),
            device_sampling: s.device_sampling,
            after_send: stage(StageName::DevQueue)
                .filter(|_| s.device_sampling.is_none())
                .map(|dev_queue| AfterSend {
                    dev_queue: dev_queue.count,
                    dev_xmit: stage(StageName::DevXmit).map_or(0, |st| st.count),
                    target_drops: stage(StageName::TargetDrops).map_or(0, |st| st.count),
                    neigh_queued: s.devices.iter().map(|d| d.neigh_queued).sum(),
                }),
            probe: s.cost.bpf.as_ref(),
            caveats,
            receive: s.receive.as_ref(),
            receive_s: s.interval_s,
            limits: s.limits.as_ref(),
            throttled_ns: throttled_wait(s.limits.as_ref(), &sender_windows),
            relay: None,
            replies: s.replies.as_ref(),
            kernel_lacks: &s.kernel_lacks,
        }
    }

    pub fn of_summary(s: &'a Summary) -> Facts<'a> {
        let window_s = if s.send_window_s > 0.0 {
            s.send_window_s
        } else {
            s.duration_s
        };
        let window_ns = window_s * 1e9;
        let min_packets = ((s.packets as f64 * SENDER_MIN_PACKET_SHARE).ceil() as u64).max(1);
        let mut time = ThreadTime::default();
        let mut sender_windows: Vec<(u32, f64)> = Vec::new();
        let senders: Vec<&ThreadView> = s.threads.iter().filter(|t| t.packets >= min_packets).collect();
        if senders.is_empty() {
            if s.budget.total_ns() > 0 {
                time.add(&within(&s.budget, window_ns));
                time.senders = 1;
            }
            time.coverage = coverage(&time, window_ns);
        } else {
            // The time the budgets should cover: each thread's own send window, or the family's.
            let mut windows_ns = 0.0;
            for t in senders {
                // The thread's own send window when the probes measured it (its length is that
                // budget's total); else its whole-run budget cut to the family's window.
                let budget = match t.send_window_budget.filter(|b| b.total_ns() > 0) {
                    Some(b) => {
                        windows_ns += b.total_ns() as f64;
                        b
                    }
                    None => {
                        windows_ns += window_ns;
                        within(&t.budget, window_ns)
                    }
                };
                time.add(&budget);
                time.senders += 1;
                sender_windows.push((t.pid, budget.total_ns() as f64));
            }
            time.coverage = if windows_ns > 0.0 {
                time.total() / windows_ns
            } else {
                0.0
            };
        }

        let mut caveats = Vec::new();
        if s.send_window_s < MIN_WINDOW_S {
            caveats.push(format!("a send window of only {}", secs(s.send_window_s)));
        }
        if s.packets < MIN_PACKETS {
            caveats.push(format!("only {} packets in the run", s.packets));
        }
        common_caveats(
            &mut caveats,
            &time,
            s.health.threads_untracked,
            s.scanner.as_ref(),
        );

        Facts {
            live: false,
            requested: requested(s.requested_pps, s.scanner.as_ref()),
            requested_view: s.scanner.as_ref().map(|v| &v.requested),
            achieved: s.achieved_pps,
            window_s,
            end_s: None,
            span_s: s.first_send_s.zip(s.last_send_s),
            packets: s.packets,
            calls: s.send_calls,
            failed_calls: s.failed_calls,
            syn_retransmits: s.connect.and_then(|c| c.kernel_syn_retransmits).unwrap_or(0),
            errors: s.errors.clone(),
            time,
            gap: &s.gap,
            block_sites: &s.block_sites,
            drops: s
                .drops
                .iter()
                .map(|row| Dropped {
                    row,
                    count: row.count,
                })
                .collect(),
            devices: &s.devices,
            scanner: s.scanner.as_ref(),
            reference_pacer: reference_pacer(s.scanner.as_ref()),
            processes: &s.processes,
            baseline: s.baseline.as_ref(),
            packets_total: s.packets,
            left_pps: s
                .stages
                .get(&StageName::DevXmit)
                .copied()
                .filter(|p| *p > 0.0 && s.device_sampling.is_none()),
            latency_p50_ns: s.latency_p50_ns,
            device_sampling: s.device_sampling,
            after_send: s
                .stage_counts
                .get(&StageName::DevQueue)
                .filter(|_| s.device_sampling.is_none())
                .map(|dev_queue| AfterSend {
                    dev_queue: *dev_queue,
                    dev_xmit: s.stage_counts.get(&StageName::DevXmit).copied().unwrap_or(0),
                    target_drops: s.stage_counts.get(&StageName::TargetDrops).copied().unwrap_or(0),
                    neigh_queued: s.devices.iter().map(|d| d.neigh_queued).sum(),
                }),
            probe: s.cost.bpf.as_ref(),
            caveats,
            receive: s.receive.as_ref(),
            // over the ticks it received in: a run that outlasts its traffic (a lab's, longer
            // on a busy machine) would spread its load over idle time
            receive_s: s.receive_active_s.unwrap_or(s.duration_s),
            limits: s.limits.as_ref(),
            throttled_ns: throttled_wait(s.limits.as_ref(), &sender_windows),
            relay: s.relay.as_ref(),
            replies: s.replies.as_ref(),
            kernel_lacks: &s.kernel_lacks,
        }
    }

    /// Whether the running kernel lacks `l` (`KernelLack`): what needs it cannot be judged.
    pub fn lacks(&self, l: KernelLack) -> bool {
        self.kernel_lacks.contains(&l)
    }

    /// Whether anything makes every verdict over this interval weak.
    pub fn thin(&self) -> bool {
        !self.caveats.is_empty()
    }

    /// Packets the send syscalls accepted that no stage after them saw, when they are too many
    /// to be packets in flight at the interval's edges: every accepted packet reaches a device,
    /// a neighbour's queue or a drop, so such a funnel is scanprof's fault, not the scanner's.
    pub fn unseen_after_send(&self) -> Option<u64> {
        let unseen = self.after_send?.unseen(self.packets);
        let floor = (self.packets as f64 * UNSEEN_SHARE).max(UNSEEN_MIN as f64);
        (unseen as f64 >= floor).then_some(unseen)
    }

    /// "in this tick" or "over the run", for sentences.
    pub fn over(&self) -> &'static str {
        if self.live {
            "in this tick"
        } else {
            "over the run"
        }
    }
}

/// `--requested` (or what the Analyzer was given), else the rate the scanner's profile read.
/// The profile of scanprof's own reference sender (`scanprof send`).
const REFERENCE_PROFILE: &str = "scanprof-send";

/// The reference sender's pacer in use, when the run is the reference sender itself: from the
/// option its profile gives the pacing mode whose calibration ran (`--pacer tsc`).
fn reference_pacer(scanner: Option<&ScannerView>) -> Option<PacerKind> {
    let v = scanner.filter(|v| v.profile == REFERENCE_PROFILE)?;
    PacerKind::of_options(v.pacer_in_use()?.option.as_deref()?)
}

fn requested(given: Option<f64>, scanner: Option<&ScannerView>) -> Option<f64> {
    given
        .or_else(|| scanner.and_then(|v| v.requested.pps))
        .filter(|r| r.is_finite() && *r > 0.0)
}

fn coverage(time: &ThreadTime, interval_ns: f64) -> f64 {
    if time.senders == 0 || interval_ns <= 0.0 {
        return 0.0;
    }
    time.total() / (time.senders as f64 * interval_ns)
}

fn common_caveats(
    caveats: &mut Vec<String>,
    time: &ThreadTime,
    untracked: u64,
    scanner: Option<&ScannerView>,
) {
    if untracked > 0 {
        caveats.push(format!(
            "{untracked} threads of the family were not tracked (thread map full: raise it with \
             --map-size threads=ENTRIES)"
        ));
    }
    if time.senders > 0 && time.coverage < MIN_COVERAGE {
        caveats.push(format!(
            "the sender threads' time covers only {} of the interval",
            pct(time.coverage)
        ));
    }
    if let Some(c) = scanner.and_then(|v| v.requested.conflict.as_ref()) {
        caveats.push(format!("the requested rate is uncertain: {c}"));
    }
}

fn merged_errors(threads: &[ThreadView]) -> BTreeMap<String, u64> {
    let mut errors = BTreeMap::new();
    for t in threads {
        for (k, v) in &t.errors {
            *errors.entry(k.clone()).or_default() += v;
        }
    }
    errors
}

/// A whole-run thread budget cut to the send window, for a thread without its own send-window
/// budget (a bundle recorded before it existed): a thread's time beyond the window's length lies
/// outside it (waiting to start, waiting for replies at the end) and is taken from sleep first,
/// then from its on-CPU time outside send, then the rest.
fn within(b: &TimeBudget, window_ns: f64) -> TimeBudget {
    let mut excess = (b.total_ns() as f64 - window_ns).max(0.0) as u64;
    let mut out = *b;
    for field in [
        &mut out.sleep_ns,
        &mut out.other_ns,
        &mut out.preempted_ns,
        &mut out.blocked_send_ns,
        &mut out.send_ns,
    ] {
        let take = excess.min(*field);
        *field -= take;
        excess -= take;
    }
    out.wakeup_wait_ns = out.wakeup_wait_ns.map(|w| w.min(out.preempted_ns));
    out
}

/// The time the sender threads waited for their cgroups' quota, ns, summed over the threads:
/// per thread, the most any cgroup holding it made it wait, at most its window. A throttled
/// period leaves a cgroup's k busy threads waiting (period - quota/k) each once the quota is
/// spent; the kernel's own throttled time is taken when larger (on 6.18 it counts from when the
/// throttled task is dequeued at its return to user space, a part of that wait).
/// `senders` are (pid, window ns) of each sender thread.
fn throttled_wait(
    limits: Option<&crate::analysis::snapshot::LimitsView>,
    senders: &[(u32, f64)],
) -> Option<f64> {
    let cgroups: Vec<&crate::analysis::snapshot::CgroupThrottleView> = limits?
        .cgroups
        .iter()
        .filter(|c| senders.iter().any(|(pid, _)| c.pids.contains(pid)))
        .collect();
    if cgroups.is_empty() {
        return None;
    }
    let mut sum = 0.0;
    for (pid, window_ns) in senders {
        let most = cgroups
            .iter()
            .filter(|c| c.pids.contains(pid))
            .map(|c| {
                let k = senders.iter().filter(|(p, _)| c.pids.contains(p)).count().max(1) as f64;
                let per_period_ns = (c.period_us as f64 - c.quota_us as f64 / k).max(0.0) * 1e3;
                (c.throttled_s * 1e9 / k).max(c.throttled_periods as f64 * per_period_ns)
            })
            .fold(0.0, f64::max);
        sum += most.min(*window_ns);
    }
    Some(sum)
}

/// Adds the interval's caveats to a verdict's evidence.
pub(super) fn caveat_lines(f: &Facts, evidence: &mut Vec<String>) {
    for c in &f.caveats {
        evidence.push(format!("caveat: {c}"));
    }
}

/// The time a figure in ns takes per packet, for evidence.
pub(super) fn per_packet(ns: f64, packets: u64) -> String {
    dur(ns / packets.max(1) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_budget_beyond_the_send_window_comes_out_of_sleep_first() {
        let b = TimeBudget {
            send_ns: 100,
            blocked_send_ns: 50,
            sleep_ns: 300,
            preempted_ns: 20,
            other_ns: 530,
            wakeup_wait_ns: None,
        };
        // 1000 ns of thread time over a 600 ns window: 400 ns outside, 300 from sleep, 100 other.
        let w = within(&b, 600.0);
        assert_eq!(
            (w.sleep_ns, w.other_ns, w.send_ns, w.blocked_send_ns),
            (0, 430, 100, 50)
        );
        assert_eq!(w.total_ns(), 600);
        assert_eq!(within(&b, 2000.0), b);
    }
}
