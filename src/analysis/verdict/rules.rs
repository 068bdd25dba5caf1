//! The rule table: one row per `Cause`, naming the function that writes its verdicts. A rate
//! rule judges the send rate against the requested one (`Judgement`: which case the run is in,
//! and the gap's split when there is a gap); a loss rule judges what became of the packets
//! (the measured `Facts`). A new cause is one function, one row here and its tests.

use super::facts::Facts;
use super::judgement::Judgement;
use super::{claims, gap, loss, not_judged, rate_unit, receive, relay, replies, rings};
use super::{Cause, Verdict};

/// A rule judging the send rate.
pub(super) type RateRule = fn(&Judgement) -> Option<Verdict>;

/// A rule judging what became of the packets: one verdict, or several (one per device...).
#[derive(Clone, Copy)]
pub(super) enum LossRule {
    One(fn(&Facts) -> Option<Verdict>),
    Many(fn(&Facts) -> Vec<Verdict>),
}

/// One cause and the rules that write it: most have one of the two; `conntrack_full` has both
/// (refused sends are judged with the rate, netfilter drops after sending with the losses).
pub(super) struct Rule {
    pub(super) cause: Cause,
    pub(super) rate: Option<RateRule>,
    pub(super) loss: Option<LossRule>,
}

const fn rate(cause: Cause, rule: RateRule) -> Rule {
    Rule {
        cause,
        rate: Some(rule),
        loss: None,
    }
}

const fn loss(cause: Cause, rule: LossRule) -> Rule {
    Rule {
        cause,
        rate: None,
        loss: Some(rule),
    }
}

use LossRule::{Many, One};

/// Every cause's rules. The order is no ranking (`super::rank` orders the verdicts by share,
/// confidence and `Cause::tie_rank`): rows follow `Cause::ALL`.
pub(super) const RULES: &[Rule] = &[
    rate(Cause::NoGap, gap::no_gap),
    rate(Cause::GapUnknown, gap::gap_unknown),
    rate(Cause::Bottleneck, gap::bottleneck),
    rate(Cause::AboveRequested, gap::above_requested),
    rate(Cause::SendErrors, gap::send_errors),
    rate(Cause::CpuBound, gap::cpu_bound),
    rate(Cause::ProbeCost, gap::probe_cost),
    Rule {
        cause: Cause::ConntrackFull,
        rate: Some(gap::conntrack_refused),
        loss: Some(One(loss::conntrack_drops)),
    },
    rate(Cause::CgroupThrottled, gap::cgroup_throttled),
    rate(Cause::Steal, gap::steal),
    rate(Cause::BlockedSend, gap::blocked_send),
    rate(Cause::Preempted, gap::preempted),
    rate(Cause::Miscalibrated, gap::miscalibrated),
    rate(Cause::PacingCoarse, gap::pacing_coarse),
    rate(Cause::IdleWaits, gap::idle_waits),
    rate(Cause::FdLimit, gap::fd_limit),
    rate(Cause::UnitIdle, gap::unit_idle),
    rate(Cause::UnitSetup, gap::unit_setup),
    rate(Cause::Unexplained, gap::unexplained),
    rate(Cause::NeverSent, gap::never_sent),
    rate(Cause::RateUnit, rate_unit::rate_unit),
    rate(Cause::ClaimMismatch, claims::claim_mismatch),
    loss(Cause::QdiscDrop, One(loss::qdisc_drop)),
    loss(Cause::NeighFailed, Many(loss::neigh_failed)),
    loss(Cause::NoRoute, One(loss::no_route)),
    loss(Cause::Filtered, One(loss::filtered)),
    loss(Cause::DeviceDrop, One(loss::device_drop)),
    loss(Cause::TargetDrop, One(loss::target_drop)),
    loss(Cause::DeviceRefused, Many(loss::device_refused)),
    loss(Cause::ReplySocketBuffer, One(loss::reply_socket_buffer)),
    loss(Cause::ReplyBacklog, One(loss::reply_backlog)),
    loss(Cause::ReplyCapture, One(loss::reply_capture)),
    loss(Cause::ReplyDrop, One(loss::reply_drop)),
    loss(Cause::MeasurementFault, One(loss::measurement_fault)),
    loss(Cause::RcvbufOverflow, One(receive::rcvbuf_overflow)),
    loss(Cause::BacklogOverflow, One(receive::backlog_overflow)),
    loss(Cause::ReceiverCpuBound, One(receive::receiver_cpu_bound)),
    loss(Cause::ReceiverKeepsUp, One(receive::receiver_keeps_up)),
    loss(Cause::RingFull, One(rings::ring_full)),
    loss(Cause::LostBeyondHost, One(replies::lost_beyond_host)),
    loss(Cause::RelayEgressBound, One(relay::relay_egress_bound)),
    loss(Cause::RelayKernelDrops, One(relay::relay_kernel_drops)),
    loss(Cause::RelayOwnDrops, One(relay::relay_own_drops)),
    loss(Cause::NotJudgedHere, Many(not_judged::not_judged_here)),
];

/// Every rate rule's verdicts, in table order.
pub(super) fn rate_verdicts(j: &Judgement) -> Vec<Verdict> {
    RULES
        .iter()
        .filter_map(|rule| Some((rule.cause, rule.rate?)))
        .filter_map(|(cause, judge)| judge(j).inspect(|v| check(cause, v)))
        .collect()
}

/// Every loss rule's verdicts, in table order.
pub(super) fn loss_verdicts(f: &Facts) -> Vec<Verdict> {
    let mut out = Vec::new();
    for rule in RULES {
        let found = match rule.loss {
            None => continue,
            Some(One(judge)) => judge(f).into_iter().collect(),
            Some(Many(judge)) => judge(f),
        };
        for v in &found {
            check(rule.cause, v);
        }
        out.extend(found);
    }
    out
}

/// A rule writes its own cause only: the table says which function writes what.
fn check(cause: Cause, v: &Verdict) {
    debug_assert_eq!(
        v.cause, cause,
        "the rule row of {cause} wrote a {} verdict",
        v.cause
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cause without a rule row is never written; a cause with two rows is written twice.
    #[test]
    fn every_cause_has_exactly_one_rule_row() {
        for &c in Cause::ALL {
            let rows = RULES.iter().filter(|r| r.cause == c).count();
            assert_eq!(rows, 1, "{c} has {rows} rule rows in rules::RULES (one expected)");
        }
        for r in RULES {
            assert!(Cause::ALL.contains(&r.cause), "{} is not in Cause::ALL", r.cause);
            assert!(
                r.rate.is_some() || r.loss.is_some(),
                "the rule row of {} names no rule",
                r.cause
            );
        }
        assert_eq!(RULES.len(), Cause::ALL.len());
    }

    /// A rate rule writes the kinds its cause has; a loss rule writes losses (`verdict`
    /// checks each verdict's kind against `Cause::kinds`).
    #[test]
    fn a_loss_rule_is_for_a_loss_cause() {
        for r in RULES.iter().filter(|r| r.loss.is_some()) {
            assert!(
                r.cause.kinds().contains(&super::super::Kind::Loss),
                "{} has a loss rule but is no loss cause (Cause::kinds)",
                r.cause
            );
        }
    }
}
