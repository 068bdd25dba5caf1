//! The diagnosis: from a run's figures, the ranked causes of the gap between requested and
//! achieved rate and of packets lost after they were sent. Pure; see docs/diagnosis.md.

use serde::{Deserialize, Serialize};

/// One cause, with the share it explains, the numbers behind it and what to do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// stable identifier, e.g. `cpu_bound`, `qdisc_drop`, `no_gap`
    pub cause: String,
    /// `gap` (requested vs achieved send rate) or `loss` (packets lost after sending)
    pub kind: String,
    /// one sentence a user understands
    pub sentence: String,
    /// share of the gap (or of the sent packets, for losses) it explains, 0..1
    pub share: f64,
    /// the numbers behind it
    pub evidence: Vec<String>,
    /// the next thing to try
    pub next_step: String,
    /// `strong` or `weak`
    pub confidence: String,
}

use super::snapshot::{Snapshot, Summary};

/// The causes over one tick, for the live view.
pub fn for_snapshot(_s: &Snapshot) -> Vec<Verdict> {
    Vec::new()
}

/// The causes over the whole run.
pub fn for_summary(_s: &Summary) -> Vec<Verdict> {
    Vec::new()
}
