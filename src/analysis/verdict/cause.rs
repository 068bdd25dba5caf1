//! The typed names of a verdict: its `Cause`, its `Kind` (gap or loss) and its `Confidence`.
//! Serde writes each as the snake_case name docs/diagnosis.md and docs/events.md use, so the
//! JSON is the same as when they were strings; the ranking's fixed order of causes is here.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Declares `Cause` once: each variant with its stable name, the kinds it is reported as and its
/// rank among verdicts of equal share, so that the list of causes, their names, `Cause::ALL` and
/// the ranking cannot drift apart. The rule that writes each cause is its row in `rules::RULES`.
macro_rules! causes {
    ($($(#[doc = $doc:literal])* $variant:ident = $name:literal, [$($kind:ident),+], $rank:literal;)+) => {
        /// What a verdict names: one variant per cause the diagnosis writes (docs/diagnosis.md).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[serde(rename_all = "snake_case")]
        pub enum Cause {
            $($(#[doc = $doc])* $variant,)+
        }

        impl Cause {
            /// Every cause, in declaration order.
            pub const ALL: &'static [Cause] = &[$(Cause::$variant),+];

            /// The stable name: the JSON's `cause`, and the name docs/diagnosis.md gives it.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Cause::$variant => $name,)+
                }
            }

            /// The kinds a verdict of this cause is written as. `send_errors` and
            /// `conntrack_full` are a part of the gap when there is one and a loss otherwise,
            /// which is why `Verdict::kind` is a field and not derived from the cause.
            pub fn kinds(self) -> &'static [Kind] {
                match self {
                    $(Cause::$variant => &[$(Kind::$kind),+],)+
                }
            }

            /// Among verdicts of equal share (share-0 findings mostly), lower first: the
            /// overall judgement (0 a measurement fault, 1 whether there is a gap, 2 what bounds
            /// an unpaced rate, 3 a slot or unit set wrong, 4 a scanner's own figure or the
            /// receiver's CPU) before the rest (5).
            pub fn tie_rank(self) -> u8 {
                match self {
                    $(Cause::$variant => $rank,)+
                }
            }
        }
    };
}

causes! {
    /// achieved within `NO_GAP_TOLERANCE` of requested, and no target loss
    NoGap = "no_gap", [Gap], 1;
    /// no requested rate to compare with
    GapUnknown = "gap_unknown", [Gap], 1;
    /// no finite requested rate: what bounds the rate
    Bottleneck = "bottleneck", [Gap], 2;
    /// achieved more than 2% above requested
    AboveRequested = "above_requested", [Gap], 2;
    /// failed send calls: a part of the gap, or a loss without one
    SendErrors = "send_errors", [Gap, Loss], 5;
    /// the sender's on-CPU time per packet exceeds the slot
    CpuBound = "cpu_bound", [Gap], 5;
    /// scanprof's own BPF programs' run time
    ProbeCost = "probe_cost", [Gap], 5;
    /// a full conntrack table refused the family's flows: a part of the gap, or a loss
    ConntrackFull = "conntrack_full", [Gap, Loss], 5;
    /// a cgroup CPU quota throttled the sender
    CgroupThrottled = "cgroup_throttled", [Gap], 5;
    /// hypervisor steal while the sender ran
    Steal = "steal", [Gap], 5;
    /// time blocked in the send syscalls
    BlockedSend = "blocked_send", [Gap], 5;
    /// runnable but not running
    Preempted = "preempted", [Gap], 5;
    /// the pacer's calibration is off
    Miscalibrated = "miscalibrated", [Gap], 3;
    /// the pacer wakes late or paces coarsely
    PacingCoarse = "pacing_coarse", [Gap], 5;
    /// stalls outside the pacing
    IdleWaits = "idle_waits", [Gap], 5;
    /// a window-paced scanner's open-file limit below its window (its stalls)
    FdLimit = "fd_limit", [Gap], 5;
    /// time between scanner work units
    UnitIdle = "unit_idle", [Gap], 5;
    /// set-up before each work unit's first packet
    UnitSetup = "unit_setup", [Gap], 5;
    /// a gap and no time budget to explain it
    Unexplained = "unexplained", [Gap], 1;
    /// a gap and nothing sent at all
    NeverSent = "never_sent", [Gap], 1;
    /// the request was given in the other unit (targets against packets)
    RateUnit = "rate_unit", [Gap], 3;
    /// a scanner's own figure disagrees with the measurement
    ClaimMismatch = "claim_mismatch", [Gap], 4;
    /// drops in a queueing discipline
    QdiscDrop = "qdisc_drop", [Loss], 5;
    /// drops waiting for neighbour resolution
    NeighFailed = "neigh_failed", [Loss], 5;
    /// drops for want of a route
    NoRoute = "no_route", [Loss], 5;
    /// drops by a filter (netfilter, tc, BPF, XDP, LSM)
    Filtered = "filtered", [Loss], 5;
    /// drops at the device
    DeviceDrop = "device_drop", [Loss], 5;
    /// any other drop of the family's outgoing packets
    TargetDrop = "target_drop", [Loss], 5;
    /// packets the driver refused
    DeviceRefused = "device_refused", [Loss], 5;
    /// replies dropped at a full socket receive buffer
    ReplySocketBuffer = "reply_socket_buffer", [Loss], 5;
    /// replies dropped at the CPU backlog
    ReplyBacklog = "reply_backlog", [Loss], 5;
    /// replies dropped by the capture (packet socket, TPACKET ring)
    ReplyCapture = "reply_capture", [Loss], 5;
    /// any other reply loss
    ReplyDrop = "reply_drop", [Loss], 5;
    /// packets the send syscalls accepted that no later stage saw: the figures are wrong
    MeasurementFault = "measurement_fault", [Loss], 0;
    /// a receiver's socket buffer overflowed
    RcvbufOverflow = "rcvbuf_overflow", [Loss], 5;
    /// a receiver's CPU backlog overflowed
    BacklogOverflow = "backlog_overflow", [Loss], 5;
    /// the receiver needs more CPU than its reading threads have (ranked before
    /// `rcvbuf_overflow` and `backlog_overflow`, whose drops it is the cause of)
    ReceiverCpuBound = "receiver_cpu_bound", [Loss], 4;
    /// the receiver read everything that arrived
    ReceiverKeepsUp = "receiver_keeps_up", [Loss], 5;
    /// frames dropped at a family packet socket's full TPACKET ring (or receive queue)
    RingFull = "ring_full", [Loss], 5;
    /// a scanner's probes unanswered at this host while nothing dropped the replies here: the
    /// loss (or the silence) is beyond this host
    LostBeyondHost = "lost_beyond_host", [Loss], 5;
    /// a relay's outputs refuse or its sends take its time: egress is its bottleneck
    RelayEgressBound = "relay_egress_bound", [Loss], 5;
    /// a relay that keeps up with egress loses packets to the kernel before its read
    RelayKernelDrops = "relay_kernel_drops", [Loss], 5;
    /// a relay that keeps up with egress drops packets it read (its own buffer pool)
    RelayOwnDrops = "relay_own_drops", [Loss], 5;
    /// a question of the run that needs what the running kernel lacks (`KernelLack`): said
    /// to be not judged here, and why, instead of guessed
    NotJudgedHere = "not_judged_here", [Gap, Loss], 4;
}

impl Cause {
    /// Whether this is a loss of replies to the scanner (the `reply_*` causes), not of its own
    /// outgoing packets.
    pub fn is_reply_loss(self) -> bool {
        matches!(
            self,
            Cause::ReplySocketBuffer | Cause::ReplyBacklog | Cause::ReplyCapture | Cause::ReplyDrop
        )
    }

    /// Whether this is a verdict of the relay funnel (`relay_*`).
    pub fn is_relay(self) -> bool {
        matches!(
            self,
            Cause::RelayEgressBound | Cause::RelayKernelDrops | Cause::RelayOwnDrops
        )
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A name that is no cause the diagnosis writes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown cause '{0}': see docs/diagnosis.md for the causes")]
pub struct UnknownCause(pub String);

impl FromStr for Cause {
    type Err = UnknownCause;

    fn from_str(s: &str) -> Result<Cause, UnknownCause> {
        Cause::ALL
            .iter()
            .copied()
            .find(|c| c.as_str() == s)
            .ok_or_else(|| UnknownCause(s.to_string()))
    }
}

/// What a verdict explains. Ordered as the names are (`gap` before `loss`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// a cause of the gap between requested and achieved send rate
    Gap,
    /// a cause of packets lost after they were sent
    Loss,
}

impl Kind {
    /// The stable name, as in the JSON: `gap` or `loss`.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Gap => "gap",
            Kind::Loss => "loss",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How far a verdict's evidence carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Confidence {
    /// the evidence is direct and large enough
    Strong,
    /// the evidence is thin (short run, few packets), small or inferred
    Weak,
}

impl Confidence {
    /// The stable name, as in the JSON: `strong` or `weak`.
    pub fn as_str(self) -> &'static str {
        match self {
            Confidence::Strong => "strong",
            Confidence::Weak => "weak",
        }
    }
}

impl fmt::Display for Confidence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_the_serde_names_and_parse_back() {
        for &c in Cause::ALL {
            assert_eq!(serde_json::to_string(&c).unwrap(), format!("\"{}\"", c.as_str()));
            assert_eq!(c.as_str().parse::<Cause>(), Ok(c));
            assert_eq!(c.to_string(), c.as_str());
        }
        for k in [Kind::Gap, Kind::Loss] {
            assert_eq!(serde_json::to_string(&k).unwrap(), format!("\"{k}\""));
        }
        for c in [Confidence::Strong, Confidence::Weak] {
            assert_eq!(serde_json::to_string(&c).unwrap(), format!("\"{c}\""));
        }
        assert_eq!(serde_json::to_string(&Cause::NoGap).unwrap(), "\"no_gap\"");
        assert_eq!(
            serde_json::to_string(&Cause::ReceiverCpuBound).unwrap(),
            "\"receiver_cpu_bound\""
        );
        let err = "no_loss".parse::<Cause>().unwrap_err();
        assert!(err.to_string().contains("docs/diagnosis.md"), "{err}");
    }

    /// A new cause without its row in docs/diagnosis.md fails here.
    #[test]
    fn every_cause_is_documented_in_diagnosis_md() {
        let doc = include_str!("../../../docs/diagnosis.md");
        let missing: Vec<&str> = Cause::ALL
            .iter()
            .map(|c| c.as_str())
            .filter(|name| !doc.contains(&format!("| `{name}` |")))
            .collect();
        assert!(
            missing.is_empty(),
            "causes without a rule row in docs/diagnosis.md: {missing:?}"
        );
    }

    /// The verdict object's `cause` row in docs/events.md lists every cause too.
    #[test]
    fn every_cause_is_listed_in_the_cause_row_of_events_md() {
        let doc = include_str!("../../../docs/events.md");
        let row = doc
            .lines()
            .find(|l| l.starts_with("| `cause` | | stable identifier."))
            .expect("docs/events.md has the verdict object's `cause` row");
        let missing: Vec<&str> = Cause::ALL
            .iter()
            .map(|c| c.as_str())
            .filter(|name| !row.contains(&format!("`{name}`")))
            .collect();
        assert!(
            missing.is_empty(),
            "causes missing from docs/events.md's cause row: {missing:?}"
        );
    }

    /// And a rule row in docs/diagnosis.md names a cause the code has.
    #[test]
    fn every_rule_row_of_diagnosis_md_is_a_cause() {
        let doc = include_str!("../../../docs/diagnosis.md");
        let mut in_rules = false;
        let mut unknown = Vec::new();
        for line in doc.lines() {
            if line.starts_with("## ") {
                in_rules = line.ends_with(" rules") && !line.contains("verdict rules");
            }
            if !in_rules {
                continue;
            }
            if let Some(rest) = line.strip_prefix("| `") {
                let name = rest.split('`').next().unwrap_or("");
                if name.parse::<Cause>().is_err() {
                    unknown.push(name.to_string());
                }
            }
        }
        assert!(
            unknown.is_empty(),
            "rule rows of docs/diagnosis.md that are no Cause: {unknown:?}"
        );
    }
}
