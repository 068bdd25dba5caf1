//! The units the verdicts' sentences and evidence write numbers in: those of every view
//! (`crate::units`, a leaf module any layer may use), under the short names the rules use.

pub(super) use crate::units::{duration as dur, pct, pps, secs, signed_pct};
