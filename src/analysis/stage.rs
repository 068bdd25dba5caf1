//! The stages of the funnels and the drop table's rows: the names every figure per stage is
//! keyed by, and the rows both a tick and the run list. Below `snapshot.rs` (which re-exports
//! them with the Snapshot and Summary) and `receive.rs`, which both use them.

use serde::{Deserialize, Serialize};

use crate::collect::DropClass;

/// Declares `StageName` once: each variant with its stable name, so that the list of stages,
/// their names and `StageName::ALL` cannot drift apart.
macro_rules! stage_names {
    ($($(#[doc = $doc:literal])* $variant:ident = $name:literal;)+) => {
        /// A stage of the send funnel (`STAGES`), the receive funnel (`RECV_STAGES`) or of the
        /// family's packet sockets (`rings::RING_STAGES`). Serde writes it as its snake_case
        /// name (docs/events.md), so the JSON is the same as when stages were strings. Ordered,
        /// compared and hashed as its name is, so that a `BTreeMap` keyed by it keeps its keys
        /// in alphabetical order and can be looked up by name (`map["dev_xmit"]`).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
        #[serde(rename_all = "snake_case")]
        pub enum StageName {
            $($(#[doc = $doc])* $variant,)+
        }

        impl StageName {
            /// Every stage, in declaration order.
            pub const ALL: &'static [StageName] = &[$(StageName::$variant),+];

            /// Whether the stage is a qdisc's (`qdisc_enqueue`, `qdisc_dequeue`): empty when no
            /// queueing qdisc is on the path.
            pub fn is_qdisc(self) -> bool {
                matches!(self, StageName::QdiscEnqueue | StageName::QdiscDequeue)
            }

            /// Whether the stage is counted by a device-stage program (`dev_queue`, the qdisc
            /// stages, `dev_xmit`): an estimate with `--device-stages sampled`.
            pub fn is_device(self) -> bool {
                matches!(
                    self,
                    StageName::DevQueue
                        | StageName::QdiscEnqueue
                        | StageName::QdiscDequeue
                        | StageName::DevXmit
                )
            }

            /// The stable name: the JSON's, and the views'.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(StageName::$variant => $name,)+
                }
            }
        }
    };
}

stage_names! {
    /// send calls of the family (connect calls for a connect scanner)
    SendCalls = "send_calls";
    /// packets the send syscalls accepted
    SyscallPackets = "syscall_packets";
    /// packets queued to a device
    DevQueue = "dev_queue";
    /// packets a qdisc took
    QdiscEnqueue = "qdisc_enqueue";
    /// packets a qdisc released
    QdiscDequeue = "qdisc_dequeue";
    /// packets the driver accepted
    DevXmit = "dev_xmit";
    /// the family's outgoing packets dropped
    TargetDrops = "target_drops";
    /// packets for the family dropped before its read
    RecvDrops = "recv_drops";
    /// receive calls on datagram and packet sockets
    RecvCalls = "recv_calls";
    /// messages those calls read
    RecvPackets = "recv_packets";
    /// frames queued to the family's packet sockets
    RingQueued = "ring_queued";
    /// frames dropped at them because they were full
    RingDrops = "ring_drops";
}

impl PartialOrd for StageName {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for StageName {
    /// By name, as the strings were: the Summary's maps keep their JSON key order.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl std::hash::Hash for StageName {
    /// As the name hashes, which `Borrow<str>` requires.
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_str().hash(state)
    }
}

impl std::borrow::Borrow<str> for StageName {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl PartialEq<str> for StageName {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for StageName {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl std::fmt::Display for StageName {
    /// The name, padded as a string is (`{:<16}` in the text report's funnel).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

/// A name that is no stage scanprof counts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown stage '{0}': see docs/events.md for the stages")]
pub struct UnknownStage(pub String);

impl std::str::FromStr for StageName {
    type Err = UnknownStage;

    fn from_str(s: &str) -> Result<StageName, UnknownStage> {
        StageName::ALL
            .iter()
            .copied()
            .find(|n| n.as_str() == s)
            .ok_or_else(|| UnknownStage(s.to_string()))
    }
}

/// Stage names, in the order a packet passes them.
pub const STAGES: [StageName; 7] = [
    StageName::SendCalls,
    StageName::SyscallPackets,
    StageName::DevQueue,
    StageName::QdiscEnqueue,
    StageName::QdiscDequeue,
    StageName::DevXmit,
    StageName::TargetDrops,
];

/// One stage of the funnel over a tick or a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stage {
    pub name: StageName,
    /// events in the interval (calls for send_calls, packets otherwise)
    pub count: u64,
    /// events per second over the interval
    pub pps: f64,
    /// events since attach
    pub total: u64,
    /// pps / requested pps, when a rate was requested
    pub ratio: Option<f64>,
}

/// One row of the drop table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DropRow {
    pub reason: String,
    pub location: String,
    pub device: Option<String>,
    pub netns: u32,
    pub class: DropClass,
    pub pid: Option<u32>,
    /// drops in the tick (a sample holds only rows with drops in its tick); in the summary,
    /// drops over the run
    pub count: u64,
    /// drops per second over the interval (in the summary: over the send window, the funnel's
    /// window, or over the run when nothing was sent)
    pub rate: f64,
}

impl DropRow {
    /// The packets of `rows` in `class`: `DropRow::sum_of(&s.drops, DropClass::TargetLoss)` is
    /// the family's lost packets.
    pub fn sum_of(rows: &[DropRow], class: DropClass) -> u64 {
        rows.iter().filter(|d| d.class == class).map(|d| d.count).sum()
    }
}
