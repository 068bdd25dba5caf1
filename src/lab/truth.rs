//! The lab's truth: independent counts taken around a run (the namespaces' SNMP counters, the
//! links, the qdisc, the sender's scheduling), the share of the requested rate they say went
//! missing, and the check of scanprof's diagnosis against it; the lab's report.

use serde::{Deserialize, Serialize};

use super::cgroup::CgroupReport;
use super::conntrack::{conntrack_stat, ConntrackReport};
use super::disturb::HogReport;
use super::scenario::{Expectation, Expected, Truth};
use crate::analysis::verdict::{Cause, Confidence, Kind};
use crate::analysis::Summary;
use crate::netlab::{Lab, SinkReport};
use crate::system::netstat::{self, QdiscStats};

/// A verdict's share must be this close to the measured truth (a fraction: 10 points).
pub const SHARE_TOLERANCE: f64 = 0.10;

/// What the lab measured beside scanprof.
#[derive(Debug, Serialize)]
pub struct LabReport {
    pub scenario: String,
    pub requested_pps: f64,
    /// seconds the sender was asked to send for
    pub duration_s: f64,
    /// the receiver in the target namespace
    pub receiver: Option<SinkReport>,
    pub receiver_pps: Option<f64>,
    /// tc's view of the sender's qdisc after the run
    pub qdisc: Vec<QdiscStats>,
    /// IP packets the target namespace received (`Ip: InReceives`)
    pub target_ip_in: Option<u64>,
    /// UDP datagrams the sender namespace sent (`Udp: OutDatagrams` + `SndbufErrors`, which
    /// counts those a qdisc dropped; not raw or packet sockets)
    pub sender_udp_out: Option<u64>,
    /// UDP datagrams the sender namespace dropped for a full receive buffer (`Udp: RcvbufErrors`)
    pub sender_rcvbuf_errors: Option<u64>,
    /// replies the target's echo sent back
    pub echoed: Option<u64>,
    /// UDP datagrams read from the target namespace's sockets (`Udp: InDatagrams`) and dropped
    /// there for a full receive buffer (`Udp: RcvbufErrors`)
    pub target_udp_in: Option<u64>,
    pub target_rcvbuf_errors: Option<u64>,
    /// TCP connections the sender namespace opened, one per SYN sent by a connect (`Tcp:
    /// ActiveOpens`), and scanprof's count of them (connect scenarios; null otherwise)
    pub sender_tcp_active_opens: Option<u64>,
    pub scanprof_connect_syns: Option<u64>,
    /// TCP segments the target namespace sent (`Tcp: OutSegs`: its SYN-ACKs to a SYN scan)
    pub target_tcp_out: Option<u64>,
    /// packets the sender namespace's kernel made itself (`Tcp: OutSegs` + `Icmp: OutMsgs`:
    /// its RSTs to SYN-ACKs, its port unreachables)
    pub sender_kernel_out: Option<u64>,
    /// packets the sender's veth transmitted (`ip -s link`)
    pub sender_link_tx: Option<u64>,
    /// the profiled listener's own count (receive scenarios)
    pub listener: Option<super::reference::recv::RecvReport>,
    /// the profiled relay's own count (the relay scenario)
    #[serde(skip_serializing_if = "Option::is_none")]
    pub relay: Option<super::reference::relay::RelayReport>,
    /// the profiled ring reader's own count and PACKET_STATISTICS (the ring-full scenario)
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ring: Option<super::reference::ring_recv::RingRecvReport>,
    /// scanprof's receive funnel over the run: messages the family's receive calls read, and
    /// its SOCKET_RCVBUFF drops before the read (receive scenarios; null when it saw none)
    pub scanprof_recv_packets: Option<u64>,
    pub scanprof_rcvbuf_drops: Option<u64>,
    /// times the sender was stopped
    pub stalls: Option<u64>,
    /// the CPU hog of the preemption scenario
    pub hog: Option<HogReport>,
    /// the sender's last /proc/PID/schedstat reading: s on CPU, s runnable waiting for a CPU
    pub sender_cpu_s: Option<f64>,
    pub sender_run_delay_s: Option<f64>,
    /// scanprof's figures, for comparison
    pub scanprof_packets: u64,
    pub scanprof_achieved_pps: f64,
    pub scanprof_target_drops: u64,
    /// how `check.truth` was measured
    pub truth_kind: Truth,
    /// whether the diagnosis named the staged cause (and, where the scenario has a fixture
    /// that counts for itself, whether scanprof's figures matched it: `fixture_checks`)
    pub check: DiagnosisCheck,
    /// scanprof's figures against the fixture's own counters (responder, relay scenarios)
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fixture_checks: Vec<super::reference::FixtureCheck>,
    /// packets the sender namespace's conntrack refused (its /proc/net/stat/nf_conntrack
    /// `drop`; conntrack scenarios only)
    pub sender_ct_drops: Option<u64>,
    /// how the conntrack table was filled and the global limit set and restored
    pub conntrack: Option<ConntrackReport>,
    /// the sender's cgroup and its own throttling counters
    pub cgroup: Option<CgroupReport>,
}

/// The top verdict of the expected kind against the staged cause and the measured truth.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DiagnosisCheck {
    pub expected_kind: Kind,
    pub expected_cause: Expected,
    /// the first verdict of the expected kind (the verdicts come ranked)
    pub top_cause: Option<Cause>,
    /// its share: of the requested rate (gap) or of the packets sent (loss)
    pub top_share: Option<f64>,
    pub top_confidence: Option<Confidence>,
    /// the top verdict overall, whatever its kind
    pub first_cause: Option<Cause>,
    pub cause_matches: bool,
    /// the share the verdict should explain, measured without scanprof
    pub truth: Option<f64>,
    pub truth_basis: String,
    /// the probes' share of the gap (`probe_cost`), added to `top_share` before it is compared
    /// with a truth that counts all of the sender's own time (`gap_less_run_delay`: the probes
    /// run on its threads, and scanprof names their part apart); None otherwise
    #[serde(default)]
    pub probe_share: Option<f64>,
    /// |top_share (+ probe_share) - truth| <= 0.10 (None when there is no truth or no verdict)
    pub share_within: Option<bool>,
    /// the cause matches and the share is within 10 points of a measured truth
    pub ok: bool,
}

/// Compares the summary's verdicts with what the scenario staged.
pub fn check(expect: &Expectation, s: &Summary, truth: Option<f64>) -> DiagnosisCheck {
    let cause = match expect.cause {
        Expected::NoLoss => return check_no_loss(expect, &s.verdicts, truth),
        Expected::Cause(cause) => cause,
    };
    let top = s.verdicts.iter().find(|v| v.kind == expect.kind);
    let cause_matches = top.is_some_and(|v| v.cause == cause);
    // A gap less the run-queue delay is all of the sender's own time, its probes' included:
    // scanprof splits that into the staged cause and probe_cost (issue 28), so the two together
    // are what the truth measures (under load the probes' part grows: cpu_bound 0.479 and
    // probe_cost 0.142 against a truth of 0.618).
    let probe_share = (expect.truth == Truth::GapLessRunDelay && cause != Cause::ProbeCost)
        .then(|| {
            s.verdicts
                .iter()
                .filter(|v| v.kind == Kind::Gap && v.cause == Cause::ProbeCost)
                .map(|v| v.share)
                .sum::<f64>()
        })
        .filter(|p| *p > 0.0);
    let share_within = match (top, truth) {
        (Some(v), Some(t)) => {
            Some((v.share + probe_share.unwrap_or(0.0) - t).abs() <= SHARE_TOLERANCE + 1e-9)
        }
        _ => None,
    };
    DiagnosisCheck {
        expected_kind: expect.kind,
        expected_cause: expect.cause,
        top_cause: top.map(|v| v.cause),
        top_share: top.map(|v| v.share),
        top_confidence: top.map(|v| v.confidence),
        first_cause: s.verdicts.first().map(|v| v.cause),
        cause_matches,
        truth,
        truth_basis: expect.truth.basis().to_string(),
        probe_share,
        share_within,
        ok: cause_matches && share_within == Some(true),
    }
}

/// A scenario in which nothing is lost: the top verdict overall must not be a loss verdict (one
/// of kind `loss` with a share: `receiver_keeps_up`, of share 0, says nothing was lost), and the
/// loss verdicts' shares, summed (0 without any), must be within 10 points of the truth.
/// `top_cause` is then the top verdict overall, `top_share` that sum.
fn check_no_loss(
    expect: &Expectation,
    verdicts: &[crate::analysis::verdict::Verdict],
    truth: Option<f64>,
) -> DiagnosisCheck {
    let first = verdicts.first();
    let cause_matches = first.is_none_or(|v| v.kind != Kind::Loss || v.share <= 0.0);
    let lost = verdicts
        .iter()
        .filter(|v| v.kind == Kind::Loss)
        .fold(0.0, |sum, v| sum + v.share);
    let share_within = truth.map(|t| (lost - t).abs() <= SHARE_TOLERANCE + 1e-9);
    DiagnosisCheck {
        expected_kind: expect.kind,
        expected_cause: expect.cause,
        top_cause: first.map(|v| v.cause),
        top_share: Some(lost),
        top_confidence: first.map(|v| v.confidence),
        first_cause: first.map(|v| v.cause),
        cause_matches,
        truth,
        truth_basis: expect.truth.basis().to_string(),
        probe_share: None,
        share_within,
        ok: cause_matches && share_within == Some(true),
    }
}

/// Independent counts taken around the run.
#[derive(Debug, Default, Clone, Copy)]
pub struct Counts {
    pub(super) target_ip_in: Option<u64>,
    pub(super) sender_udp_out: Option<u64>,
    /// UDP datagrams the sender namespace dropped for a full receive buffer
    pub(super) sender_rcvbuf_errors: Option<u64>,
    /// UDP datagrams read from the target namespace's sockets, and dropped at them
    pub(super) target_udp_in: Option<u64>,
    pub(super) target_rcvbuf_errors: Option<u64>,
    /// the sender namespace's TCP connections that sent their SYN (`Tcp: ActiveOpens`)
    pub(super) sender_tcp_active_opens: Option<u64>,
    /// the sender's run-queue delay over the run, s
    pub(super) run_delay_s: Option<f64>,
    /// TCP segments the target namespace sent (`Tcp: OutSegs`)
    pub(super) target_tcp_out: Option<u64>,
    /// packets the sender namespace's kernel made: `Tcp: OutSegs` + `Icmp: OutMsgs`
    pub(super) sender_kernel_out: Option<u64>,
    /// packets the sender's veth transmitted
    pub(super) sender_link_tx: Option<u64>,
    /// replies the lab echo sent (set after the run)
    pub(super) echoed: Option<u64>,
    /// the lab receiver's rate by its kernel receive timestamps, pps (set after the run)
    pub(super) receiver_pps: Option<f64>,
    /// packets the sender namespace's conntrack refused (`drop` of /proc/net/stat/nf_conntrack)
    pub(super) sender_ct_drops: Option<u64>,
    /// the relay's lost share by its own count (set after the run; Truth::RelayLoss)
    pub(super) relay_lost_share: Option<f64>,
    /// the ring's dropped share by its socket's own statistics (set after the run;
    /// Truth::RingDrops)
    pub(super) ring_drop_share: Option<f64>,
    /// datagrams that met a closed port in the target namespace (`Udp: NoPorts`), the ICMP
    /// destination unreachables it sent (`Icmp: OutDestUnreachs`) and those its rate limit held
    /// back (`Icmp: OutRateLimitHost + OutRateLimitGlobal`); those the sender namespace took in
    /// (`Icmp: InDestUnreachs`)
    pub(super) target_udp_noports: Option<u64>,
    pub(super) target_icmp_unreach_out: Option<u64>,
    pub(super) target_icmp_held_back: Option<u64>,
    pub(super) sender_icmp_unreach_in: Option<u64>,
}

impl Counts {
    pub fn read(lab: &Lab) -> Counts {
        let sender = snmp(&lab.sender_ns);
        let target = snmp(&lab.target_ns);
        let target_count =
            |proto: &str, field: &str| target.as_deref().and_then(|t| snmp_counter(t, proto, field));
        Counts {
            target_ip_in: target_count("Ip", "InReceives"),
            target_udp_in: target_count("Udp", "InDatagrams"),
            target_rcvbuf_errors: target_count("Udp", "RcvbufErrors"),
            // A datagram a qdisc dropped counts as a send-buffer error, not as sent.
            sender_udp_out: sender.as_deref().and_then(|t| {
                Some(snmp_counter(t, "Udp", "OutDatagrams")? + snmp_counter(t, "Udp", "SndbufErrors")?)
            }),
            sender_rcvbuf_errors: sender
                .as_deref()
                .and_then(|t| snmp_counter(t, "Udp", "RcvbufErrors")),
            sender_tcp_active_opens: sender
                .as_deref()
                .and_then(|t| snmp_counter(t, "Tcp", "ActiveOpens")),
            run_delay_s: None,
            target_tcp_out: target_count("Tcp", "OutSegs"),
            sender_kernel_out: sender
                .as_deref()
                .and_then(|t| Some(snmp_counter(t, "Tcp", "OutSegs")? + snmp_counter(t, "Icmp", "OutMsgs")?)),
            sender_link_tx: lab.link(crate::netlab::Side::Sender).ok().map(|l| l.tx_packets),
            echoed: None,
            receiver_pps: None,
            sender_ct_drops: netstat::run_in_netns(
                Some(&lab.sender_ns),
                "cat",
                &["/proc/net/stat/nf_conntrack"],
            )
            .ok()
            .and_then(|t| conntrack_stat(&t, "drop")),
            relay_lost_share: None,
            ring_drop_share: None,
            target_udp_noports: target_count("Udp", "NoPorts"),
            target_icmp_unreach_out: target_count("Icmp", "OutDestUnreachs"),
            target_icmp_held_back: target.as_deref().and_then(|t| {
                Some(
                    snmp_counter(t, "Icmp", "OutRateLimitHost")?
                        + snmp_counter(t, "Icmp", "OutRateLimitGlobal")?,
                )
            }),
            sender_icmp_unreach_in: sender
                .as_deref()
                .and_then(|t| snmp_counter(t, "Icmp", "InDestUnreachs")),
        }
    }

    pub fn since(self, before: Counts) -> Counts {
        let d = |a: Option<u64>, b: Option<u64>| Some(a?.saturating_sub(b.unwrap_or(0)));
        Counts {
            target_ip_in: d(self.target_ip_in, before.target_ip_in),
            sender_udp_out: d(self.sender_udp_out, before.sender_udp_out),
            sender_rcvbuf_errors: d(self.sender_rcvbuf_errors, before.sender_rcvbuf_errors),
            target_udp_in: d(self.target_udp_in, before.target_udp_in),
            target_rcvbuf_errors: d(self.target_rcvbuf_errors, before.target_rcvbuf_errors),
            sender_tcp_active_opens: d(self.sender_tcp_active_opens, before.sender_tcp_active_opens),
            run_delay_s: self.run_delay_s,
            target_tcp_out: d(self.target_tcp_out, before.target_tcp_out),
            sender_kernel_out: d(self.sender_kernel_out, before.sender_kernel_out),
            sender_link_tx: d(self.sender_link_tx, before.sender_link_tx),
            echoed: self.echoed,
            receiver_pps: self.receiver_pps,
            sender_ct_drops: d(self.sender_ct_drops, before.sender_ct_drops),
            relay_lost_share: self.relay_lost_share,
            ring_drop_share: self.ring_drop_share,
            target_udp_noports: d(self.target_udp_noports, before.target_udp_noports),
            target_icmp_unreach_out: d(self.target_icmp_unreach_out, before.target_icmp_unreach_out),
            target_icmp_held_back: d(self.target_icmp_held_back, before.target_icmp_held_back),
            sender_icmp_unreach_in: d(self.sender_icmp_unreach_in, before.sender_icmp_unreach_in),
        }
    }
}

/// A UDP scan's reply funnel against the namespaces' own counters (the replies-lost scenario):
/// probes against the datagrams that met a closed port at the target, replies arrived against
/// the unreachables it sent and those the sender's namespace took in, unanswered against those
/// its rate limit held back, delivered (what the scanner's packet socket took) against those
/// taken in, and dropped here against what was sent less what was taken in. Each exact.
pub fn reply_checks(counts: &Counts, summary: &Summary) -> Vec<super::reference::FixtureCheck> {
    use super::reference::FixtureCheck;
    let r = summary.replies.as_ref();
    let of = |f: fn(&crate::analysis::replies::ReplyFunnel) -> u64| r.map(|r| f(r) as f64);
    let count = |c: Option<u64>| c.unwrap_or(0) as f64;
    let (sent, taken_in) = (
        count(counts.target_icmp_unreach_out),
        count(counts.sender_icmp_unreach_in),
    );
    vec![
        FixtureCheck::new(
            "probes (target Udp NoPorts)",
            count(counts.target_udp_noports),
            of(|r| r.probes),
            0.0,
        ),
        FixtureCheck::new(
            "replies arrived (target Icmp OutDestUnreachs)",
            sent,
            of(|r| r.arrived_total),
            0.0,
        ),
        FixtureCheck::new(
            "replies arrived (sender Icmp InDestUnreachs)",
            taken_in,
            of(|r| r.arrived_total),
            0.0,
        ),
        FixtureCheck::new(
            "unanswered (target Icmp OutRateLimitHost + OutRateLimitGlobal)",
            count(counts.target_icmp_held_back),
            of(|r| r.unanswered),
            0.0,
        ),
        FixtureCheck::new(
            "delivered (sender Icmp InDestUnreachs)",
            taken_in,
            of(|r| r.delivered),
            0.0,
        ),
        FixtureCheck::new(
            "dropped here (target OutDestUnreachs - sender InDestUnreachs)",
            (sent - taken_in).max(0.0),
            of(|r| r.dropped_here),
            0.0,
        ),
    ]
}

/// /proc/net/snmp as seen inside namespace `ns`.
pub fn snmp(ns: &str) -> Option<String> {
    netstat::run_in_netns(Some(ns), "cat", &["/proc/net/snmp"]).ok()
}

/// One counter of /proc/net/snmp, whose lines come in pairs: `Proto: Name...`, `Proto: value...`.
pub fn snmp_counter(text: &str, proto: &str, field: &str) -> Option<u64> {
    let prefix = format!("{proto}:");
    let mut lines = text.lines().filter(|l| l.starts_with(&prefix));
    let names = lines.next()?;
    let values = lines.next()?;
    let at = names.split_whitespace().position(|n| n == field)?;
    values.split_whitespace().nth(at)?.parse().ok()
}

/// The truth a scenario's verdict is held to, from the counts the lab took.
pub fn measured_truth(
    t: Truth,
    rate: f64,
    duration_s: f64,
    counts: Counts,
    qdisc: &[QdiscStats],
) -> Option<f64> {
    let share = |part: f64, whole: f64| (whole > 0.0).then(|| (part / whole).clamp(0.0, 1.0));
    match t {
        Truth::Gap => {
            let delivered = counts.target_ip_in? as f64;
            share(delivered, rate * duration_s).map(|d| 1.0 - d)
        }
        Truth::QdiscDrops => {
            let root = qdisc.iter().find(|q| q.parent.is_none())?;
            share(root.drops as f64, (root.sent_packets + root.drops) as f64)
        }
        Truth::Undelivered => {
            let delivered = counts.target_ip_in? as f64;
            share(delivered, counts.sender_udp_out? as f64).map(|d| 1.0 - d)
        }
        Truth::ReplyDrops => share(counts.sender_rcvbuf_errors? as f64, counts.sender_udp_out? as f64),
        Truth::ListenerDrops => {
            let dropped = counts.target_rcvbuf_errors?;
            share(dropped as f64, (counts.target_udp_in? + dropped) as f64)
        }
        Truth::SynGap => {
            let syns = counts.sender_tcp_active_opens? as f64;
            share(syns, rate * duration_s).map(|d| 1.0 - d)
        }
        Truth::Unanswered => {
            let answers = counts.target_tcp_out? + counts.echoed.unwrap_or(0);
            let probes = counts.sender_link_tx?.saturating_sub(counts.sender_kernel_out?);
            share(answers as f64, probes as f64).map(|a| 1.0 - a)
        }
        Truth::GapLessRunDelay => {
            let gap = 1.0 - share(counts.target_ip_in? as f64, rate * duration_s)?;
            let waited = share(counts.run_delay_s?, duration_s)?;
            Some((gap - waited).max(0.0))
        }
        Truth::ReceiverGap => share(counts.receiver_pps?, rate).map(|r| 1.0 - r),
        Truth::ConntrackDrops => share(counts.sender_ct_drops? as f64, rate * duration_s),
        Truth::RelayLoss => counts.relay_lost_share,
        Truth::RingDrops => counts.ring_drop_share,
        Truth::HeldBack => share(
            counts.target_icmp_held_back? as f64,
            counts.target_udp_noports? as f64,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::verdict::{Cause, Kind};

    /// Issue 29 section 2: the cpu-bound scenario under load, as measured on this branch: the
    /// truth (gap less run-queue delay, 0.618) is the sender's whole time on a CPU, which
    /// scanprof splits into cpu_bound (0.479) and the probes' share on its threads (probe_cost,
    /// 0.142). Compared alone, cpu_bound was 14 points off and the check failed.
    #[test]
    fn the_probes_share_counts_toward_a_truth_of_the_senders_whole_time() {
        use crate::analysis::verdict::{Confidence, Verdict};
        let expect = Expectation {
            kind: Kind::Gap,
            cause: Expected::Cause(Cause::CpuBound),
            truth: Truth::GapLessRunDelay,
        };
        let s = Summary {
            verdicts: vec![
                Verdict::bare(Cause::CpuBound, Kind::Gap, 0.479, Confidence::Strong),
                Verdict::bare(Cause::ProbeCost, Kind::Gap, 0.142, Confidence::Strong),
                Verdict::bare(Cause::TargetDrop, Kind::Loss, 0.838, Confidence::Strong),
            ],
            ..Summary::for_tests()
        };
        let c = check(&expect, &s, Some(0.618));
        assert_eq!(c.top_share, Some(0.479));
        assert_eq!(c.probe_share, Some(0.142));
        assert_eq!((c.share_within, c.ok), (Some(true), true), "{c:?}");
        // A truth that is not the sender's whole time (the gap itself) takes no probe share.
        let gap = Expectation {
            truth: Truth::Gap,
            ..expect
        };
        let c = check(&gap, &s, Some(0.479));
        assert_eq!((c.probe_share, c.share_within), (None, Some(true)));
        // Without a probe_cost verdict, nothing is added.
        let alone = Summary {
            verdicts: vec![Verdict::bare(
                Cause::CpuBound,
                Kind::Gap,
                0.60,
                Confidence::Strong,
            )],
            ..Summary::for_tests()
        };
        let c = check(&expect, &alone, Some(0.618));
        assert_eq!((c.probe_share, c.share_within), (None, Some(true)));
    }
    use crate::cli::Scenario;
    use crate::lab::scenario::{staging, NEVER_STARTED_SCRIPT};
    use std::process::Command;
    const SNMP: &str = "Ip: Forwarding DefaultTTL InReceives InHdrErrors\n\
                        Ip: 1 64 29977 0\n\
                        Icmp: InMsgs InErrors\n\
                        Icmp: 0 0\n\
                        Udp: InDatagrams NoPorts InErrors OutDatagrams\n\
                        Udp: 0 0 0 513\n";

    #[test]
    fn snmp_counters_are_read_by_protocol_and_name() {
        assert_eq!(snmp_counter(SNMP, "Ip", "InReceives"), Some(29977));
        assert_eq!(snmp_counter(SNMP, "Udp", "OutDatagrams"), Some(513));
        assert_eq!(snmp_counter(SNMP, "Udp", "Nope"), None);
        assert_eq!(snmp_counter(SNMP, "Tcp", "InSegs"), None);
    }

    /// The replies-lost scenario's checks: each reply-funnel figure against its namespace
    /// counter, exact; one figure off (a reply nmap's ring missed) fails that check alone, and a
    /// run without a reply funnel fails them all.
    #[test]
    fn the_reply_funnel_is_held_to_the_namespaces_counters_exactly() {
        let counts = Counts {
            target_udp_noports: Some(2_012),
            target_icmp_unreach_out: Some(7),
            target_icmp_held_back: Some(2_005),
            sender_icmp_unreach_in: Some(7),
            ..Counts::default()
        };
        let (_, mut summary) = crate::views::fixtures::rich_run();
        summary.replies = Some(crate::analysis::replies::ReplyFunnel {
            probes: 2_012,
            arrived_total: 7,
            unanswered: 2_005,
            beyond_host: 2_005,
            delivered: 7,
            dropped_here: 0,
            ..Default::default()
        });
        let ok = |s: &Summary| reply_checks(&counts, s).iter().map(|c| c.ok).collect::<Vec<_>>();
        assert_eq!(ok(&summary), [true; 6]);
        if let Some(r) = summary.replies.as_mut() {
            r.delivered = 6;
        }
        assert_eq!(ok(&summary), [true, true, true, true, false, true]);
        summary.replies = None;
        assert_eq!(ok(&summary), [false; 6]);
    }

    #[test]
    fn truths_come_from_the_independent_counts() {
        let counts = Counts {
            target_ip_in: Some(2500),
            sender_udp_out: Some(10_000),
            sender_rcvbuf_errors: Some(9_000),
            target_udp_in: Some(1_000),
            target_rcvbuf_errors: Some(3_000),
            sender_tcp_active_opens: Some(4_000),
            run_delay_s: Some(0.5),
            target_tcp_out: Some(380),
            sender_kernel_out: Some(400),
            sender_link_tx: Some(800),
            echoed: None,
            receiver_pps: None,
            sender_ct_drops: Some(2_000),
            relay_lost_share: Some(0.25),
            ring_drop_share: Some(0.875),
            target_udp_noports: Some(2_012),
            target_icmp_unreach_out: Some(7),
            target_icmp_held_back: Some(2_005),
            sender_icmp_unreach_in: Some(7),
        };
        let held = measured_truth(Truth::HeldBack, 1000.0, 2.0, counts, &[]).unwrap();
        assert!((held - 2_005.0 / 2_012.0).abs() < 1e-12, "{held}");
        let ring = measured_truth(Truth::RingDrops, 1000.0, 5.0, counts, &[]).unwrap();
        assert!((ring - 0.875).abs() < 1e-9, "{ring}");
        let relay = measured_truth(Truth::RelayLoss, 1000.0, 5.0, counts, &[]).unwrap();
        assert!((relay - 0.25).abs() < 1e-9, "{relay}");
        let gap = measured_truth(Truth::Gap, 1000.0, 5.0, counts, &[]).unwrap();
        assert!((gap - 0.5).abs() < 1e-9, "{gap}");
        let rest = measured_truth(Truth::GapLessRunDelay, 1000.0, 5.0, counts, &[]).unwrap();
        assert!((rest - 0.4).abs() < 1e-9, "{rest}");
        let undelivered = measured_truth(Truth::Undelivered, 1000.0, 5.0, counts, &[]).unwrap();
        assert!((undelivered - 0.75).abs() < 1e-9, "{undelivered}");
        let replies = measured_truth(Truth::ReplyDrops, 1000.0, 5.0, counts, &[]).unwrap();
        assert!((replies - 0.9).abs() < 1e-9, "{replies}");
        let listener = measured_truth(Truth::ListenerDrops, 1000.0, 5.0, counts, &[]).unwrap();
        assert!((listener - 0.75).abs() < 1e-9, "{listener}");
        let syns = measured_truth(Truth::SynGap, 1000.0, 5.0, counts, &[]).unwrap();
        assert!((syns - 0.2).abs() < 1e-9, "{syns}");
        let tbf = QdiscStats {
            kind: "tbf".into(),
            sent_packets: 300,
            drops: 700,
            ..QdiscStats::default()
        };
        let drops = measured_truth(Truth::QdiscDrops, 1000.0, 5.0, counts, &[tbf]).unwrap();
        assert!((drops - 0.7).abs() < 1e-9, "{drops}");
        assert_eq!(measured_truth(Truth::QdiscDrops, 1000.0, 5.0, counts, &[]), None);
        // 400 probes (800 out, 400 of them the kernel's RSTs), 380 answered.
        let unanswered = measured_truth(Truth::Unanswered, 1000.0, 5.0, counts, &[]).unwrap();
        assert!((unanswered - 0.05).abs() < 1e-9, "{unanswered}");
        // The echo's replies are answers too.
        let echo = Counts {
            target_tcp_out: Some(0),
            sender_kernel_out: Some(0),
            sender_link_tx: Some(100),
            echoed: Some(100),
            ..counts
        };
        assert_eq!(measured_truth(Truth::Unanswered, 20.0, 5.0, echo, &[]), Some(0.0));
        // 2000 refused of 1000 pps x 5 s asked.
        let ct = measured_truth(Truth::ConntrackDrops, 1000.0, 5.0, counts, &[]).unwrap();
        assert!((ct - 0.4).abs() < 1e-9, "{ct}");
    }

    fn verdict(kind: Kind, cause: Cause, share: f64) -> crate::analysis::verdict::Verdict {
        crate::analysis::verdict::Verdict::bare(cause, kind, share, Confidence::Weak)
    }

    #[test]
    fn a_no_loss_scenario_fails_on_a_loss_verdict_first_or_a_loss_share_off_the_truth() {
        let expect = staging(Scenario::KernelReply).expect;
        assert_eq!(expect.cause, Expected::NoLoss);
        // Nothing lost: no_gap first, receiver_keeps_up (share 0) does not count as loss.
        let v = vec![
            verdict(Kind::Loss, Cause::ReceiverKeepsUp, 0.0),
            verdict(Kind::Gap, Cause::NoGap, 0.0),
        ];
        let c = check_no_loss(&expect, &v, Some(0.0));
        assert!(c.ok, "{c:?}");
        assert_eq!(c.top_cause, Some(Cause::ReceiverKeepsUp));
        // The kernel's RSTs read as lost probes (the bug): a loss verdict comes first.
        let v = vec![
            verdict(Kind::Loss, Cause::TargetDrop, 0.83),
            verdict(Kind::Gap, Cause::NoGap, 0.0),
        ];
        let c = check_no_loss(&expect, &v, Some(0.0));
        assert!(!c.ok && !c.cause_matches, "{c:?}");
        // A loss ranked after a gap verdict still counts in the share.
        let v = vec![
            verdict(Kind::Gap, Cause::CpuBound, 0.3),
            verdict(Kind::Loss, Cause::TargetDrop, 0.5),
        ];
        let c = check_no_loss(&expect, &v, Some(0.0));
        assert!(c.cause_matches && c.share_within == Some(false) && !c.ok, "{c:?}");
        // No truth measured: not ok.
        assert!(!check_no_loss(&expect, &[], None).ok);
    }

    #[test]
    fn a_short_run_is_judged_over_the_receivers_own_window() {
        // 12 packets 200 ms apart at 1000 pps asked: the receiver's timestamps give 5 pps over
        // its 2.2 s, whatever the lab's duration; the count over the duration would not.
        let counts = Counts {
            target_ip_in: Some(12),
            receiver_pps: Some(5.0),
            ..Counts::default()
        };
        let t = measured_truth(Truth::ReceiverGap, 1000.0, 4.0, counts, &[]).unwrap();
        assert!((t - 0.995).abs() < 1e-9, "{t}");
        let none = Counts::default();
        assert_eq!(measured_truth(Truth::ReceiverGap, 1000.0, 4.0, none, &[]), None);
        let short = staging(Scenario::ShortMiscalibration);
        assert_eq!(short.expect.cause, Expected::Cause(Cause::Miscalibrated));
        // At most 20 packets, each slot far beyond the one asked for.
        let count = short
            .flags
            .iter()
            .position(|f| *f == "--count")
            .map(|i| short.flags[i + 1]);
        assert!(
            count.and_then(|c| c.parse::<u32>().ok()).is_some_and(|c| c <= 20),
            "{:?}",
            short.flags
        );
    }

    #[test]
    fn the_never_started_family_sends_nothing_and_its_members_fail() {
        let stage = staging(Scenario::NeverStarted);
        assert!(stage.never_sends);
        assert_eq!(
            (stage.expect.cause, stage.expect.truth),
            (Expected::Cause(Cause::NeverSent), Truth::Gap)
        );
        // Nothing arrived: the whole requested rate is missing.
        let counts = Counts {
            target_ip_in: Some(0),
            ..Counts::default()
        };
        assert_eq!(measured_truth(Truth::Gap, 1000.0, 4.0, counts, &[]), Some(1.0));
        // The script itself: two children with non-zero statuses, a parent that fails too.
        let out = Command::new("sh")
            .args(["-c", NEVER_STARTED_SCRIPT, "scanner"])
            .status()
            .expect("sh runs");
        assert_eq!(out.code(), Some(1));
    }
}
