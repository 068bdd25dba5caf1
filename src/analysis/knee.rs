//! A rate sweep's analysis: one `SweepStep` per requested rate, made from that step's run
//! `Summary` (what `scanprof sweep` shows and exports), and the knee of the sweep: the highest
//! rate kept within 2% with no loss, what made the first rate above it fail (the rate off by
//! more than 2%, target packets lost) and the verdict of that failure that appears or grows
//! there. Pure: no clock, no I/O; the command fills in the lab's independent counts when it has
//! them.

use serde::{Deserialize, Serialize};

use super::verdict::{loss_share, Cause, Confidence, Kind, NO_GAP_TOLERANCE};
use super::{BudgetShares, DropRow, EndReason, StageName, Summary, Verdict};
use crate::collect::DropClass;

/// A step is kept when achieved is within this fraction of requested (the verdicts' own
/// "no significant gap" tolerance: 2%) and nothing of the target's was lost.
pub const KEEP_TOLERANCE: f64 = NO_GAP_TOLERANCE;
/// A cause's share must rise by at least this much (absolute, 0.01 = 1 point of the requested
/// rate or of the packets sent) above the knee to count as grown.
pub const GROWTH_MIN: f64 = 0.01;

/// Packets lost at one place for one reason over a step (the drop table's rows of the target's
/// own packets and of its replies, summed over devices, namespaces and processes).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LossRow {
    /// `target_loss` (the target's outgoing packets) or `reply_loss` (replies to it)
    pub class: DropClass,
    /// the kernel's drop reason, e.g. `QDISC_DROP`
    pub reason: String,
    /// the kernel function that freed the packets: the stage where they died
    pub location: String,
    /// packets over the step
    pub count: u64,
}

/// A verdict as a sweep shows it: its cause, kind and share.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VerdictBrief {
    pub cause: Cause,
    /// `gap` or `loss`
    pub kind: Kind,
    /// 0..1, as in the verdict object (a share of the requested rate, or of the packets sent)
    pub share: f64,
    /// `strong` or `weak`
    pub confidence: Confidence,
}

impl VerdictBrief {
    fn of(v: &Verdict) -> VerdictBrief {
        VerdictBrief {
            cause: v.cause,
            kind: v.kind,
            share: v.share,
            confidence: v.confidence,
        }
    }
}

/// Counts of a lab the sweep made, taken around the step without scanprof's probes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LabCounts {
    /// datagrams the lab receiver counted
    pub receiver_packets: u64,
    /// packets the sender veth's root qdisc sent (`tc -s qdisc`)
    pub qdisc_sent: u64,
    /// packets it dropped (`tc -s qdisc`)
    pub qdisc_drops: u64,
}

/// One requested rate of a sweep: a bounded profiled run, summed up.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepStep {
    /// 1-based, in the order run
    pub step: usize,
    /// packets per second substituted for `{}`
    pub requested_pps: f64,
    /// packets per second through the family's send syscalls over its send window
    pub achieved_pps: f64,
    /// achieved / requested
    pub ratio: f64,
    /// seconds from attach to the end of the step
    pub duration_s: f64,
    /// seconds from the first to the last packet sent
    pub send_window_s: f64,
    /// packets through the send syscalls over the step
    pub packets: u64,
    /// the family's packets the driver accepted over the step (the funnel's `dev_xmit`)
    pub xmit_packets: u64,
    /// messages the family read through its receive syscalls over the step (the receive
    /// funnel's `recv_packets`; 0 when it has none)
    #[serde(default)]
    pub received_packets: u64,
    /// received_packets / packets: what came back per packet sent; None when the family received
    /// nothing through its receive syscalls (or sent nothing)
    #[serde(default)]
    pub received_per_packet: Option<f64>,
    /// replies that arrived at the host from the addresses the family sent to over the step
    /// (the summary's reply funnel, `arrived_total`), whatever the family reads them with (a
    /// receive syscall or a packet socket's ring); None when the reply counter was not attached
    #[serde(default)]
    pub replies_arrived: Option<u64>,
    /// replies_arrived / packets (the reply funnel's `reply_ratio`); None without the reply
    /// counter or without packets
    #[serde(default)]
    pub reply_ratio: Option<f64>,
    /// packets handed to the kernel over the step: those the send syscalls accepted and those
    /// of failed send calls (a loss share's denominator, as in the verdicts)
    #[serde(default)]
    pub handed_packets: u64,
    /// the target's own packets dropped after it sent them (class `target_loss`), over the step
    pub lost: u64,
    /// lost / handed_packets, at most 1 (`verdict::loss_share`, the verdicts' definition; 0
    /// without packets)
    pub loss_share: f64,
    /// lost packets by class, reason and place, largest first
    pub losses: Vec<LossRow>,
    /// the sending threads' time over their send windows, as fractions of it (sum <= 1);
    /// None when no thread sent
    pub budget: Option<BudgetShares>,
    /// scanprof's own process CPU over the step, a fraction of one core
    pub scanprof_cpu: f64,
    /// share of the target's on-CPU time scanprof's BPF programs took (an upper bound); None
    /// when not measured
    pub bpf_share_of_target: Option<f64>,
    /// scanprof's BPF run time per packet sent, ns; None when not measured
    pub bpf_ns_per_packet: Option<f64>,
    /// the run's verdicts, ranked; the first is the top verdict
    pub verdicts: Vec<VerdictBrief>,
    /// within KEEP_TOLERANCE of requested and nothing lost
    pub kept: bool,
    pub end_reason: EndReason,
    /// the lab's own counts over the step, when the sweep made the lab
    pub lab: Option<LabCounts>,
}

impl SweepStep {
    /// The step at `requested_pps` from its run's summary.
    pub fn of(step: usize, requested_pps: f64, s: &Summary) -> SweepStep {
        let ratio = if requested_pps > 0.0 {
            s.achieved_pps / requested_pps
        } else {
            0.0
        };
        let mut losses: Vec<LossRow> = Vec::new();
        for d in s
            .drops
            .iter()
            .filter(|d| matches!(d.class, DropClass::TargetLoss | DropClass::ReplyLoss))
        {
            match losses
                .iter_mut()
                .find(|l| l.class == d.class && l.reason == d.reason && l.location == d.location)
            {
                Some(l) => l.count += d.count,
                None => losses.push(LossRow {
                    class: d.class,
                    reason: d.reason.clone(),
                    location: d.location.clone(),
                    count: d.count,
                }),
            }
        }
        losses.sort_by(|a, b| b.count.cmp(&a.count).then(a.reason.cmp(&b.reason)));
        let lost = DropRow::sum_of(&s.drops, DropClass::TargetLoss);
        let budget = s.send_window_budget().or_else(|| {
            let any = s.threads.iter().any(|t| t.packets > 0);
            any.then_some(s.budget)
        });
        let budget = budget
            .filter(|b| b.total_ns() > 0)
            .map(|b| BudgetShares::of(&b, b.total_ns()));
        let kept = s.packets > 0 && (ratio - 1.0).abs() <= KEEP_TOLERANCE && lost == 0;
        let handed = s.packets + s.failed_calls;
        let received = s.receive.as_ref().map_or(0, |r| r.count(StageName::RecvPackets));
        SweepStep {
            step,
            requested_pps,
            achieved_pps: s.achieved_pps,
            ratio,
            duration_s: s.duration_s,
            send_window_s: s.send_window_s,
            packets: s.packets,
            xmit_packets: s.stage_counts.get(&StageName::DevXmit).copied().unwrap_or(0),
            received_packets: received,
            received_per_packet: received_per_packet(received, s.packets),
            replies_arrived: s.replies.as_ref().map(|r| r.arrived_total),
            reply_ratio: s.replies.as_ref().and_then(|r| r.reply_ratio),
            handed_packets: handed,
            lost,
            loss_share: loss_share(lost, handed),
            losses,
            budget,
            scanprof_cpu: s.cost.cpu,
            bpf_share_of_target: s.cost.bpf.as_ref().and_then(|b| b.share_of_target),
            bpf_ns_per_packet: s.cost.bpf.as_ref().and_then(|b| b.ns_per_packet),
            verdicts: s.verdicts.iter().map(VerdictBrief::of).collect(),
            kept,
            end_reason: s.end_reason,
            lab: None,
        }
    }

    /// The top verdict, if any.
    pub fn top(&self) -> Option<&VerdictBrief> {
        self.verdicts.first()
    }

    /// What made the step fail, if it was not kept: the keep criteria it crossed.
    pub fn failure(&self) -> Option<StepFailure> {
        if self.kept {
            return None;
        }
        Some(StepFailure {
            ratio: self.ratio,
            off_rate: self.packets == 0 || (self.ratio - 1.0).abs() > KEEP_TOLERANCE,
            lost: self.lost,
            loss_share: self.loss_share,
            top_loss: self
                .losses
                .iter()
                .find(|l| l.class == DropClass::TargetLoss)
                .map(|l| l.reason.clone()),
        })
    }
}

/// Why a step was not kept: the criteria it crossed, with their figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepFailure {
    /// achieved / requested at the step
    pub ratio: f64,
    /// the rate criterion crossed: achieved off requested by more than KEEP_TOLERANCE (or
    /// nothing sent)
    pub off_rate: bool,
    /// the loss criterion: the target's own packets lost after sending (0: not crossed)
    pub lost: u64,
    /// lost / the packets handed to the kernel (`verdict::loss_share`)
    pub loss_share: f64,
    /// the kernel drop reason of the largest of those losses (`QDISC_DROP`)
    pub top_loss: Option<String>,
}

impl StepFailure {
    /// Whether a verdict speaks to a criterion this step crossed: a gap verdict to a rate off
    /// requested, a loss of the target's own outgoing packets (the drop rows `lost` counts) to
    /// packets lost. A reply lost at the listener, a receiver's or a relay's verdict, failed no
    /// step.
    fn explained_by(&self, v: &VerdictBrief) -> bool {
        match v.kind {
            Kind::Gap => self.off_rate && !is_judgement(v.cause),
            Kind::Loss => self.lost > 0 && is_target_loss(v.cause),
        }
    }
}

/// Causes whose verdict counts the drop rows of the target's own outgoing packets (class
/// `target_loss`): what a step's `lost` counts.
fn is_target_loss(cause: Cause) -> bool {
    matches!(
        cause,
        Cause::QdiscDrop
            | Cause::NeighFailed
            | Cause::NoRoute
            | Cause::Filtered
            | Cause::DeviceDrop
            | Cause::TargetDrop
            | Cause::ConntrackFull
            | Cause::SendErrors
    )
}

/// A reply ratio this much lower at the fastest step than at the slowest is a fall.
pub const REPLY_RATIO_FALL: f64 = 0.1;

/// The slowest and the fastest step with a reply ratio (by requested rate), when the ratio at
/// the fastest is lower by `REPLY_RATIO_FALL` or more: a path (or a target) that answers less as
/// the rate rises. None with fewer than two such steps, or no such fall.
pub fn reply_ratio_fall(steps: &[SweepStep]) -> Option<(&SweepStep, &SweepStep)> {
    let with: Vec<&SweepStep> = steps.iter().filter(|s| s.reply_ratio.is_some()).collect();
    let slowest = with
        .iter()
        .min_by(|a, b| a.requested_pps.total_cmp(&b.requested_pps))?;
    let fastest = with
        .iter()
        .max_by(|a, b| a.requested_pps.total_cmp(&b.requested_pps))?;
    let (lo, hi) = (slowest.reply_ratio?, fastest.reply_ratio?);
    (fastest.requested_pps > slowest.requested_pps && hi < lo * (1.0 - REPLY_RATIO_FALL))
        .then_some((*slowest, *fastest))
}

/// Packets received per packet sent; None when nothing was received (or nothing sent).
pub fn received_per_packet(received: u64, sent: u64) -> Option<f64> {
    (received > 0 && sent > 0).then(|| received as f64 / sent as f64)
}

/// How a cause differs above the knee.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    /// not among the knee step's verdicts
    Appeared,
    /// its share rose by GROWTH_MIN or more
    Grew,
}

/// What changed from the knee to the first rate above it that was not kept.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Change {
    pub cause: Cause,
    pub kind: Kind,
    pub how: ChangeKind,
    /// its share at the knee (None: not named there, or no rate was kept)
    pub share_at_knee: Option<f64>,
    /// its share at the first rate above
    pub share_above: f64,
}

/// Where a sweep stops keeping up.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Knee {
    /// the highest requested rate kept, below the first rate that was not (None: not even the
    /// lowest rate was kept)
    pub knee_pps: Option<f64>,
    /// the first rate above it that was not kept (None: every rate swept was kept)
    pub above_pps: Option<f64>,
    /// what made that rate fail: the keep criteria it crossed
    #[serde(default)]
    pub failure: Option<StepFailure>,
    /// the first verdict of that rate speaking to a criterion it crossed (a gap verdict for a
    /// rate off requested, a loss of the target's own packets for packets lost) that appeared or
    /// grew, compared with the knee
    pub change: Option<Change>,
    /// rates above the first failure that were kept again (noise, or a limit that comes and
    /// goes): the knee is still the rate below the first failure
    pub kept_again: Vec<f64>,
}

/// Causes that name no change of behaviour (the overall judgement).
fn is_judgement(cause: Cause) -> bool {
    matches!(cause, Cause::NoGap)
}

/// The knee of `steps` (any order; taken by requested rate).
pub fn knee(steps: &[SweepStep]) -> Knee {
    let mut by_rate: Vec<&SweepStep> = steps.iter().collect();
    by_rate.sort_by(|a, b| a.requested_pps.total_cmp(&b.requested_pps));
    let first_fail = by_rate.iter().position(|s| !s.kept);
    let (below, above) = match first_fail {
        None => (by_rate.last().copied(), None),
        Some(0) => (None, Some(by_rate[0])),
        Some(i) => (Some(by_rate[i - 1]), Some(by_rate[i])),
    };
    let failure = above.and_then(|a| a.failure());
    let change = above.zip(failure.as_ref()).and_then(|(a, fail)| {
        a.verdicts.iter().filter(|v| fail.explained_by(v)).find_map(|v| {
            let at_knee = below.and_then(|b| b.verdicts.iter().find(|k| k.cause == v.cause));
            let how = match at_knee {
                None => ChangeKind::Appeared,
                Some(k) if v.share >= k.share + GROWTH_MIN => ChangeKind::Grew,
                Some(_) => return None,
            };
            Some(Change {
                cause: v.cause,
                kind: v.kind,
                how,
                share_at_knee: at_knee.map(|k| k.share),
                share_above: v.share,
            })
        })
    });
    let kept_again = first_fail
        .map(|i| {
            by_rate[i + 1..]
                .iter()
                .filter(|s| s.kept)
                .map(|s| s.requested_pps)
                .collect()
        })
        .unwrap_or_default();
    Knee {
        knee_pps: below.map(|s| s.requested_pps),
        above_pps: above.map(|s| s.requested_pps),
        failure,
        change,
        kept_again,
    }
}

/// `n` rates from `from` to `to` (both included) in equal ratios, rounded to whole packets per
/// second (scanners take whole rates), without repeats.
pub fn geometric_rates(from: f64, to: f64, n: usize) -> Vec<f64> {
    if n <= 1 {
        return vec![from.round().max(1.0)];
    }
    let mut v: Vec<f64> = (0..n)
        .map(|i| {
            let r = from * (to / from).powf(i as f64 / (n - 1) as f64);
            r.round().max(1.0)
        })
        .collect();
    v.dedup();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(rate: f64, achieved: f64, lost: u64, verdicts: &[(Cause, Kind, f64)]) -> SweepStep {
        SweepStep {
            step: 0,
            requested_pps: rate,
            achieved_pps: achieved,
            ratio: achieved / rate,
            duration_s: 3.0,
            send_window_s: 3.0,
            packets: (achieved * 3.0) as u64,
            handed_packets: (achieved * 3.0) as u64,
            xmit_packets: 0,
            received_packets: 0,
            received_per_packet: None,
            replies_arrived: None,
            reply_ratio: None,
            lost,
            loss_share: 0.0,
            losses: Vec::new(),
            budget: None,
            scanprof_cpu: 0.0,
            bpf_share_of_target: None,
            bpf_ns_per_packet: None,
            verdicts: verdicts
                .iter()
                .map(|(c, k, s)| VerdictBrief {
                    cause: *c,
                    kind: *k,
                    share: *s,
                    confidence: Confidence::Strong,
                })
                .collect(),
            kept: (achieved / rate - 1.0).abs() <= KEEP_TOLERANCE && lost == 0,
            end_reason: EndReason::FamilyExited,
            lab: None,
        }
    }

    #[test]
    fn the_knee_is_the_last_kept_rate_and_the_loss_that_appears_above_it_is_named() {
        let steps = vec![
            step(1000.0, 999.0, 0, &[(Cause::NoGap, Kind::Gap, 0.0)]),
            step(2000.0, 1990.0, 0, &[(Cause::NoGap, Kind::Gap, 0.0)]),
            step(4000.0, 3985.0, 0, &[(Cause::NoGap, Kind::Gap, 0.0)]),
            step(8000.0, 7990.0, 9000, &[(Cause::QdiscDrop, Kind::Loss, 0.37)]),
            step(16000.0, 15900.0, 30000, &[(Cause::QdiscDrop, Kind::Loss, 0.68)]),
        ];
        let k = knee(&steps);
        assert_eq!(k.knee_pps, Some(4000.0));
        assert_eq!(k.above_pps, Some(8000.0));
        let c = k.change.expect("no change named");
        assert_eq!((c.cause, c.how), (Cause::QdiscDrop, ChangeKind::Appeared));
        assert_eq!((c.share_at_knee, c.share_above), (None, 0.37));
        assert!(k.kept_again.is_empty());
    }

    #[test]
    fn a_rate_short_by_more_than_2_percent_ends_the_knee_and_a_grown_cause_is_named() {
        let steps = vec![
            step(
                10_000.0,
                9_950.0,
                0,
                &[
                    (Cause::NoGap, Kind::Gap, 0.0),
                    (Cause::Preempted, Kind::Gap, 0.004),
                ],
            ),
            // 2.5% short: not kept, although nothing was lost.
            step(
                20_000.0,
                19_500.0,
                0,
                &[
                    (Cause::CpuBound, Kind::Gap, 0.02),
                    (Cause::Preempted, Kind::Gap, 0.005),
                ],
            ),
            step(40_000.0, 30_000.0, 0, &[(Cause::CpuBound, Kind::Gap, 0.25)]),
        ];
        let k = knee(&steps);
        assert_eq!((k.knee_pps, k.above_pps), (Some(10_000.0), Some(20_000.0)));
        assert_eq!(k.change.as_ref().map(|c| c.cause), Some(Cause::CpuBound));
        // A cause present at the knee counts only if it grew by a point or more.
        let steps = vec![
            step(10_000.0, 9_950.0, 0, &[(Cause::Preempted, Kind::Gap, 0.004)]),
            step(20_000.0, 18_000.0, 0, &[(Cause::Preempted, Kind::Gap, 0.1)]),
        ];
        let c = knee(&steps).change.unwrap();
        assert_eq!((c.how, c.share_at_knee), (ChangeKind::Grew, Some(0.004)));
        let steps = vec![
            step(10_000.0, 9_950.0, 0, &[(Cause::Preempted, Kind::Gap, 0.095)]),
            step(20_000.0, 18_000.0, 0, &[(Cause::Preempted, Kind::Gap, 0.1)]),
        ];
        assert_eq!(knee(&steps).change, None);
    }

    #[test]
    fn the_knee_names_the_verdict_of_what_made_the_step_fail() {
        // Kept at 1000 pps; at 2000, 12 QDISC_DROPs (a batch overflowing a 10-packet queue)
        // failed the step, while the listener's ring missed 1.6% of the replies: the knee
        // names the qdisc drops, the loss that crossed the step's criterion.
        let mut fail = step(
            2000.0,
            1995.0,
            12,
            &[
                (Cause::RingFull, Kind::Loss, 0.016),
                (Cause::QdiscDrop, Kind::Loss, 0.002),
            ],
        );
        fail.losses = vec![LossRow {
            class: DropClass::TargetLoss,
            reason: "QDISC_DROP".into(),
            location: "__dev_queue_xmit".into(),
            count: 12,
        }];
        let steps = vec![step(1000.0, 1000.0, 0, &[(Cause::NoGap, Kind::Gap, 0.0)]), fail];
        let k = knee(&steps);
        let f = k.failure.as_ref().expect("the step above failed");
        assert_eq!(
            (f.off_rate, f.lost, f.top_loss.as_deref()),
            (false, 12, Some("QDISC_DROP"))
        );
        let c = k.change.expect("a change named");
        assert_eq!(
            (c.cause, c.how, c.share_above),
            (Cause::QdiscDrop, ChangeKind::Appeared, 0.002)
        );
        // A rate off requested with nothing lost: a gap verdict, never a loss that appeared.
        let steps = vec![
            step(1000.0, 1000.0, 0, &[]),
            step(
                2000.0,
                1500.0,
                0,
                &[
                    (Cause::RingFull, Kind::Loss, 0.3),
                    (Cause::CpuBound, Kind::Gap, 0.25),
                ],
            ),
        ];
        assert_eq!(knee(&steps).change.map(|c| c.cause), Some(Cause::CpuBound));
    }

    #[test]
    fn a_steps_loss_share_is_the_verdicts_of_the_packets_handed_to_the_kernel() {
        // 9,478 packets accepted and 47,140 failed sends whose packets the qdisc dropped:
        // 83.3% of the packets handed to the kernel, as the qdisc_drop verdict says, not the
        // 497.4% of the packets accepted.
        let mut s = Summary::for_tests();
        s.packets = 9_478;
        s.failed_calls = 47_140;
        s.send_calls = 9_478 + 47_140;
        s.achieved_pps = 1000.0;
        s.drops = vec![crate::analysis::DropRow {
            reason: "QDISC_DROP".into(),
            location: "__dev_queue_xmit".into(),
            device: Some("veth0".into()),
            netns: 1,
            class: DropClass::TargetLoss,
            pid: None,
            count: 47_140,
            rate: 0.0,
        }];
        let st = SweepStep::of(1, 1000.0, &s);
        assert_eq!((st.lost, st.handed_packets), (47_140, 56_618));
        assert!(
            (st.loss_share - 47_140.0 / 56_618.0).abs() < 1e-12,
            "{}",
            st.loss_share
        );
        assert_eq!(crate::units::pct(st.loss_share), "83.3%");
        let v = crate::analysis::verdict::for_summary(&s);
        let q = v
            .iter()
            .find(|v| v.cause == Cause::QdiscDrop)
            .expect("qdisc_drop");
        assert_eq!(q.share, st.loss_share, "one definition: {q:#?}");
        // Drops above what was handed over (a relay's packets the syscalls never counted) are
        // capped at all of them, in the step as in the verdicts.
        assert_eq!(loss_share(50, 10), 1.0);
        assert_eq!(loss_share(0, 0), 0.0);
    }

    #[test]
    fn every_rate_kept_no_rate_kept_and_a_rate_kept_again() {
        let all = vec![step(100.0, 100.0, 0, &[]), step(200.0, 199.0, 0, &[])];
        let k = knee(&all);
        assert_eq!((k.knee_pps, k.above_pps, k.change), (Some(200.0), None, None));
        let none = vec![
            step(200.0, 100.0, 0, &[(Cause::BlockedSend, Kind::Gap, 0.5)]),
            step(100.0, 99.5, 3, &[(Cause::QdiscDrop, Kind::Loss, 0.01)]),
        ];
        let k = knee(&none);
        assert_eq!((k.knee_pps, k.above_pps), (None, Some(100.0)));
        assert_eq!(k.change.unwrap().how, ChangeKind::Appeared);
        let again = vec![
            step(100.0, 100.0, 0, &[]),
            step(200.0, 150.0, 0, &[]),
            step(400.0, 400.0, 0, &[]),
        ];
        let k = knee(&again);
        assert_eq!((k.knee_pps, k.kept_again), (Some(100.0), vec![400.0]));
    }

    #[test]
    fn a_step_is_made_from_its_summary() {
        let (_, mut s) = crate::views::fixtures::rich_run();
        s.achieved_pps = 990.0;
        let st = SweepStep::of(2, 1000.0, &s);
        assert_eq!(st.ratio, 0.99);
        let lost = DropRow::sum_of(&s.drops, DropClass::TargetLoss);
        assert_eq!(st.lost, lost);
        assert_eq!(st.kept, s.packets > 0 && lost == 0);
        assert_eq!(st.verdicts.len(), s.verdicts.len());
        if let Some(b) = st.budget {
            let sum = b.send + b.blocked_send + b.sleep + b.preempted + b.other;
            assert!((sum - 1.0).abs() < 1e-9, "{b:?}");
        }
    }

    #[test]
    fn the_reply_ratio_comes_from_the_reply_funnel_ring_listeners_too_and_its_fall_is_found() {
        let (_, mut s) = crate::views::fixtures::rich_run();
        s.packets = 4000;
        // A ring listener: no receive syscalls, the replies counted on arrival.
        s.receive = None;
        s.replies = Some(crate::analysis::replies::ReplyFunnel {
            probes: 4000,
            arrived_total: 3600,
            reply_ratio: Some(0.9),
            ..Default::default()
        });
        let slow = SweepStep::of(1, 1000.0, &s);
        assert_eq!(
            (slow.received_per_packet, slow.replies_arrived, slow.reply_ratio),
            (None, Some(3600), Some(0.9))
        );
        s.replies.as_mut().unwrap().reply_ratio = Some(0.5);
        let fast = SweepStep::of(2, 8000.0, &s);
        let both = [fast, slow.clone()];
        let (lo, hi) = reply_ratio_fall(&both).expect("a fall");
        assert_eq!((lo.requested_pps, hi.requested_pps), (1000.0, 8000.0));
        // A ratio that stays (within 10%) is no fall; a single step neither.
        s.replies.as_mut().unwrap().reply_ratio = Some(0.85);
        assert!(reply_ratio_fall(&[slow.clone(), SweepStep::of(2, 8000.0, &s)]).is_none());
        assert!(reply_ratio_fall(&[slow]).is_none());
        // Without the reply counter: null, and an older line without the keys still reads.
        s.replies = None;
        let line = serde_json::to_value(SweepStep::of(1, 1000.0, &s)).unwrap();
        assert!(
            line["reply_ratio"].is_null() && line["replies_arrived"].is_null(),
            "{line}"
        );
        let mut old = line.as_object().unwrap().clone();
        old.remove("reply_ratio");
        old.remove("replies_arrived");
        let back: SweepStep = serde_json::from_value(serde_json::Value::Object(old)).unwrap();
        assert_eq!((back.replies_arrived, back.reply_ratio), (None, None));
    }

    #[test]
    fn replies_per_packet_come_from_the_receive_funnel_and_are_null_without_it() {
        let (_, mut s) = crate::views::fixtures::rich_run();
        s.packets = 4000;
        s.receive = None;
        let st = SweepStep::of(1, 1000.0, &s);
        assert_eq!((st.received_packets, st.received_per_packet), (0, None));
        let stage = |name: &str, count: u64| crate::analysis::snapshot::Stage {
            name: name.parse().unwrap(),
            count,
            pps: 0.0,
            total: count,
            ratio: None,
        };
        s.receive = Some(crate::analysis::receive::ReceiveView {
            stages: vec![
                stage("recv_drops", 7),
                stage("recv_calls", 3100),
                stage("recv_packets", 3000),
            ],
            ..Default::default()
        });
        let st = SweepStep::of(1, 1000.0, &s);
        assert_eq!((st.received_packets, st.received_per_packet), (3000, Some(0.75)));
        // A funnel with drops before the read but nothing read: null, not 0.
        s.receive.as_mut().unwrap().stages[2].count = 0;
        assert_eq!(SweepStep::of(1, 1000.0, &s).received_per_packet, None);
        assert_eq!(received_per_packet(5, 0), None);
        // The JSON line carries it, null when absent; an older line without it still reads.
        let line = serde_json::to_value(SweepStep::of(1, 1000.0, &s)).unwrap();
        assert!(line["received_per_packet"].is_null(), "{line}");
        let mut old = line.as_object().unwrap().clone();
        old.remove("received_per_packet");
        old.remove("received_packets");
        let back: SweepStep = serde_json::from_value(serde_json::Value::Object(old)).unwrap();
        assert_eq!((back.received_packets, back.received_per_packet), (0, None));
    }

    #[test]
    fn geometric_rates_span_the_range_in_equal_ratios() {
        assert_eq!(
            geometric_rates(1000.0, 16000.0, 5),
            vec![1000.0, 2000.0, 4000.0, 8000.0, 16000.0]
        );
        assert_eq!(geometric_rates(10.0, 10.0, 3), vec![10.0]);
        assert_eq!(geometric_rates(100.0, 1000.0, 2), vec![100.0, 1000.0]);
    }
}
