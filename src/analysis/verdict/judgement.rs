//! What the rate rules read: the requested rate's case (none, never sent, a gap with its split,
//! no gap), with the facts it is judged on and the scanner's calibrations. Computed once per
//! diagnosis, before any rule runs.

use super::facts::Facts;
use super::split::{Calibration, Split};
use super::NO_GAP_TOLERANCE;

/// Which case the send rate is in, against the requested rate as judged.
pub(super) enum Case {
    /// no requested rate to compare with
    Unrequested,
    /// a gap, and nothing sent at all: no time model applies
    NeverSent { r: f64 },
    /// a gap, split among its causes
    Gap { r: f64, split: Box<Split> },
    /// no significant gap (within `NO_GAP_TOLERANCE`, or above the requested rate)
    NoGap { r: f64 },
}

impl Case {
    /// The requested rate judged against, pps.
    pub(super) fn requested(&self) -> Option<f64> {
        match self {
            Case::Unrequested => None,
            Case::NeverSent { r } | Case::Gap { r, .. } | Case::NoGap { r } => Some(*r),
        }
    }
}

/// What the rate rules read: the facts the rate is judged on, its case and the scanner's
/// calibrations.
pub(super) struct Judgement<'j, 'a> {
    /// the facts, with the requested rate as judged (the scanner's own packet rate when
    /// `--requested` was given in the other unit: `rate_unit`)
    pub(super) f: &'j Facts<'a>,
    pub(super) case: Case,
    pub(super) calibration: Option<Calibration>,
}

impl<'j, 'a> Judgement<'j, 'a> {
    pub(super) fn of(f: &'j Facts<'a>) -> Judgement<'j, 'a> {
        let calibration = Calibration::of(f);
        let case = match f.requested {
            None => Case::Unrequested,
            Some(r) => {
                let has_gap = 1.0 - f.achieved / r >= NO_GAP_TOLERANCE;
                // Nothing sent since attach, not even a failed call (in a tick: and no thread
                // listed that could be a sender gone quiet): say what was seen.
                if has_gap && f.packets_total == 0 && f.calls == 0 && (!f.live || f.time.senders == 0) {
                    Case::NeverSent { r }
                } else if has_gap {
                    Case::Gap {
                        r,
                        split: Box::new(Split::of(f, r, calibration.as_ref())),
                    }
                } else {
                    Case::NoGap { r }
                }
            }
        };
        Judgement { f, case, calibration }
    }

    /// Whether there is a gap (which puts the gap verdicts first).
    pub(super) fn has_gap(&self) -> bool {
        matches!(self.case, Case::NeverSent { .. } | Case::Gap { .. })
    }

    /// The gap's split and the requested rate, when there is a gap to split.
    pub(super) fn split(&self) -> Option<(&Split, f64)> {
        match &self.case {
            Case::Gap { r, split } => Some((split.as_ref(), *r)),
            _ => None,
        }
    }
}
