//! The diagnosis: from a tick's Snapshot (live) or the run's Summary, the ranked causes of the
//! gap between requested and achieved send rate (kind `gap`) and of packets lost after they were
//! sent (kind `loss`). Pure: figures in, verdicts out. `facts` reads either input into one shape,
//! `split` divides the gap among its causes, `judgement` says which case the rate is in, `rules` lists every cause's rule (in `gap`, `claims`,
//! `loss`, `receive`, `relay`, `rings`...); docs/diagnosis.md states every rule and threshold.

mod cause;
mod claims;
mod facts;
mod gap;
mod judgement;
mod limits;
mod listing;
mod loss;
mod not_judged;
mod rate_unit;
mod receive;
mod relay;
mod replies;
mod rings;
mod rules;
mod split;
mod units;

#[cfg(test)]
mod tests;

use serde::{Deserialize, Serialize};

use super::snapshot::{Snapshot, Summary};
pub use cause::{Cause, Confidence, Kind, UnknownCause};
use facts::Facts;
pub use listing::{Listing, LISTED_SHARE};

/// One cause, with the share it explains, the numbers behind it and what to do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// stable identifier, e.g. `cpu_bound`, `qdisc_drop`, `no_gap` (see docs/diagnosis.md)
    pub cause: Cause,
    /// `gap` (requested vs achieved send rate) or `loss` (packets lost after sending); a field
    /// of its own because `send_errors` and `conntrack_full` can be either (`Cause::kinds`)
    pub kind: Kind,
    /// one sentence a user understands
    pub sentence: String,
    /// 0..1. For `gap`: the part of the requested rate this cause cost, so that the time-based
    /// shares add up to the gap, 1 - achieved/requested (0.45 of a 0.75 gap: 45 of the 75
    /// missing percent); 0 for findings that explain none of it (`no_gap`, `claim_mismatch`...).
    /// For `loss`: the dropped packets as a share of the packets handed to the kernel
    /// (`loss_share`: sent + failed sends).
    pub share: f64,
    /// the numbers behind it, each with its unit
    pub evidence: Vec<String>,
    /// the next thing to try: a sysctl, a scanner option, an experiment
    pub next_step: String,
    /// `strong` or `weak` (short run, few packets, a small share, or an inferred cause)
    pub confidence: Confidence,
}

#[cfg(test)]
impl Verdict {
    /// A verdict with no sentence, evidence or advice: for tests of ranking and listing.
    pub fn bare(cause: Cause, kind: Kind, share: f64, confidence: Confidence) -> Verdict {
        Verdict {
            cause,
            kind,
            sentence: String::new(),
            share,
            evidence: Vec::new(),
            next_step: String::new(),
            confidence,
        }
    }
}

/// Achieved within this fraction of requested (either way) is no significant gap.
pub const NO_GAP_TOLERANCE: f64 = 0.02;
/// A time-based cause with a smaller share is not named at all.
pub const MIN_SHARE: f64 = 0.01;
/// A cause with a smaller share is named with `weak` confidence.
pub const WEAK_SHARE: f64 = 0.05;
/// Fewer packets than this (in the tick or the run) make every verdict `weak`.
pub const MIN_PACKETS: u64 = 200;
/// Fewer drops than this make a loss verdict `weak`.
pub const MIN_DROPS: u64 = 10;
/// A run whose send window is shorter than this, in seconds, gives `weak` verdicts.
pub const MIN_WINDOW_S: f64 = 1.0;
/// A tick shorter than this, in seconds, gives `weak` verdicts.
pub const MIN_TICK_S: f64 = 0.5;
/// A scanner calibration whose slot is off by more than this, in percent, is mis-calibrated.
pub const CALIBRATION_TOLERANCE_PCT: f64 = 2.0;
/// A scanner's own figure further than this from the measurement, in percent, disagrees.
pub const CLAIM_TOLERANCE_PCT: f64 = 5.0;

/// A loss share, the one definition the loss verdicts, a sweep's steps and `compare` use:
/// packets lost over the packets handed to the kernel (accepted by the send syscalls, plus the
/// failed send calls, whose packets the kernel refused or dropped), at most 1 (drops of packets
/// the send syscalls did not count, a relay's say, are capped rather than read above 100%).
pub fn loss_share(lost: u64, handed: u64) -> f64 {
    lost as f64 / handed.max(lost).max(1) as f64
}

/// What a loss share is of, as the views name its denominator.
pub const LOSS_SHARE_OF: &str = "of the packets handed to the kernel (sent + failed sends)";

/// The causes over one tick, for the live view. A tick whose rate measures no sending (before
/// the first send, after the last, or partly: `Snapshot::judges_rate`) gets no gap verdict:
/// its phase says what the family did.
pub fn for_snapshot(s: &Snapshot) -> Vec<Verdict> {
    let mut verdicts = diagnose(&Facts::of_snapshot(s));
    if !s.judges_rate() {
        verdicts.retain(|v| v.kind != Kind::Gap);
    }
    verdicts
}

/// The causes over the whole run.
pub fn for_summary(s: &Summary) -> Vec<Verdict> {
    diagnose(&Facts::of_summary(s))
}

fn diagnose(f: &Facts) -> Vec<Verdict> {
    // A --requested off from the scanner's own packet rate by its packets per target was given
    // in the other unit: judge the rate against the scanner's packet rate, and say so.
    let (mut gap, has_gap) = match f.requested.and_then(|r| Some((r, rate_unit::mismatch(f, r)?))) {
        Some((r, p)) => {
            let mut own = f.clone();
            own.requested = Some(p);
            let judged = rules::rate_verdicts(&judgement::Judgement::of(&own));
            (
                rate_unit::rejudged(f, r, p, judged),
                1.0 - f.achieved / r >= NO_GAP_TOLERANCE,
            )
        }
        None => {
            let j = judgement::Judgement::of(f);
            (rules::rate_verdicts(&j), j.has_gap())
        }
    };
    let mut loss = rules::loss_verdicts(f);
    // A relay retries the sends its outputs refused: those refusals, and the qdisc drops
    // behind them, are no loss of their own; the relay verdicts say what was lost.
    if relay::refusals_cover_qdisc_drops(f) {
        loss.retain(|v| v.cause != Cause::QdiscDrop);
    }
    if relay::refusals_cover_failed_sends(f) {
        gap.retain(|v| !(v.cause == Cause::SendErrors && v.kind == Kind::Loss));
    }
    // Packets lost on their way out (a driver refusing them with no qdisc to requeue, say)
    // rule out "no significant gap" as surely as drops do; so do outgoing packets whose fate
    // this kernel cannot judge (`not_judged_here`): "lost none" would be a guess.
    if loss.iter().any(loss::is_outgoing) || not_judged::outgoing(f) {
        gap.retain(|v| v.cause != Cause::NoGap);
    }
    // A sender's receive side comes after its rate's verdicts where it says nothing of that
    // rate (no rate asked for, or nothing lost): `receive::ranks_after_the_rate`.
    let (first, later): (Vec<Verdict>, Vec<Verdict>) = rank(gap, loss, has_gap)
        .into_iter()
        .partition(|v| !receive::ranks_after_the_rate(f, v));
    first.into_iter().chain(later).collect()
}

/// A measurement fault first (it says which figures not to trust), then gap verdicts then loss
/// verdicts when there is a gap, loss first otherwise; by share within each kind, larger first,
/// then strong before weak, then a fixed order of causes. A weak verdict at 0.0% (not
/// `Verdict::listed`) comes after all of them: it never ranks above a strong one.
fn rank(gap: Vec<Verdict>, loss: Vec<Verdict>, has_gap: bool) -> Vec<Verdict> {
    let order = |v: &Verdict| -> u8 {
        if !v.listed() {
            3
        } else if v.cause == Cause::MeasurementFault {
            0
        } else if (v.kind == Kind::Gap) == has_gap {
            1
        } else {
            2
        }
    };
    let mut all: Vec<Verdict> = gap.into_iter().chain(loss).collect();
    all.sort_by(|a, b| {
        order(a)
            .cmp(&order(b))
            .then(b.share.total_cmp(&a.share))
            .then((a.confidence != Confidence::Strong).cmp(&(b.confidence != Confidence::Strong)))
            .then(a.cause.tie_rank().cmp(&b.cause.tie_rank()))
            .then(a.cause.as_str().cmp(b.cause.as_str()))
    });
    all
}

/// Builds a verdict; `weak` decides the confidence together with the share threshold.
fn verdict(
    cause: Cause,
    kind: Kind,
    sentence: String,
    share: f64,
    evidence: Vec<String>,
    next_step: String,
    weak: bool,
) -> Verdict {
    debug_assert!(
        cause.kinds().contains(&kind),
        "{cause} is not a {kind} cause (Cause::kinds)"
    );
    Verdict {
        cause,
        kind,
        sentence,
        share: share.clamp(0.0, 1.0),
        evidence,
        next_step,
        confidence: if weak {
            Confidence::Weak
        } else {
            Confidence::Strong
        },
    }
}
