//! The report-precision checker (issue 28): every lab scenario and real-scanner test passes its
//! summary (and its ticks) through `assert_precise`, which prints the whole verdict and warning
//! list and fails on any line of a mechanism issue 28 found false on real scanners. One named
//! check per mechanism; tests/precision.rs shows each one failing on a summary with its defect.

use std::fmt;

use serde_json::Value;

use scanprof::analysis::knee::VerdictBrief;
use scanprof::analysis::probe_cost::{ALERT_MIN_ONCPU_SHARE, PROBE_COST_ALERT};
use scanprof::analysis::scanner::RateOrigin;
use scanprof::analysis::verdict::{Cause, Confidence, Kind, Verdict};
use scanprof::analysis::{StageName, Summary};
use scanprof::collect::DropClass;

/// The mechanisms of issue 28 a report line must not show (its items 1-3 and 5-11; item 4, the
/// reply funnel, adds lines rather than removing false ones).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// item 1: the probes' share of the target is a share of its on-CPU time (at most all of
    /// it), absent with its reason, and alerts only for a target busy on a CPU
    ProbeCostOnBusyTarget,
    /// item 2: a sender's own outgoing frames are no replies, and a loss of replies never ranks
    /// above the rate limit of a run that asked for no rate or read no replies
    OwnFramesAreNoReplies,
    /// item 3: receive verdicts only where the family's receiving is material, never as the top
    /// verdict of a sending family, never beside a loss verdict about its receiving
    ReceiverWhereMaterial,
    /// item 5: a scanner run behind wrappers gets its own profile, not `generic`
    ScannerBehindWrapper,
    /// item 6: only given or observed rate sources disagree, never a profile's default
    NoDefaultDisagrees,
    /// item 7: ticks outside a whole stretch of sending carry no rate verdict
    NoRateVerdictOffSending,
    /// item 8: no weak 0.0% verdict ranks above one every view shows
    ListingOrder,
    /// item 9: one loss share, a share of the packets handed to the kernel: between 0 and 1
    OneLossShare,
    /// item 10: queues and losses are the family's own: devices its packets used, no packet
    /// its destination's own TCP stack took, no other namespace's loopback
    OnlyTheFamilysThings,
    /// item 11: the smaller lines (a connect scan's answers counted where they arrive)
    SmallerLines,
}

impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// One false line found: its mechanism and what was seen.
#[derive(Debug, Clone)]
pub struct Finding {
    pub check: Check,
    pub detail: String,
}

/// Every finding of `s` and of its `ticks` (the run's `sample` JSON lines, one a tick; empty when a test has
/// none).
pub fn findings(s: &Summary, ticks: &[Value]) -> Vec<Finding> {
    let mut out = Vec::new();
    let mut add = |check: Check, detail: String| out.push(Finding { check, detail });
    probe_cost_on_busy_target(s, &mut add);
    own_frames_are_no_replies(s, &mut add);
    receiver_where_material(s, &mut add);
    scanner_behind_wrapper(s, &mut add);
    no_default_disagrees(s, &mut add);
    no_rate_verdict_off_sending(ticks, &mut add);
    let briefs: Vec<VerdictBrief> = s.verdicts.iter().map(brief).collect();
    listing_order(&briefs, &mut add);
    one_loss_share(&briefs, &mut add);
    only_the_familys_things(s, &mut add);
    smaller_lines(s, &mut add);
    out
}

/// Prints the whole verdict and warning list of `s`, then fails on any finding.
pub fn assert_precise(what: &str, s: &Summary, ticks: &[Value]) {
    println!(
        "{what}: {} verdicts, {} warnings",
        s.verdicts.len(),
        s.warnings.len()
    );
    for (i, v) in s.verdicts.iter().enumerate() {
        println!(
            "  {}. [{} {} {:.1}% {}] {}",
            i + 1,
            v.kind,
            v.cause.as_str(),
            v.share * 100.0,
            v.confidence,
            v.sentence
        );
    }
    for w in &s.warnings {
        println!("  warning: {w}");
    }
    let found = findings(s, ticks);
    assert!(
        found.is_empty(),
        "{what}: {} false report lines:\n{}",
        found.len(),
        found
            .iter()
            .map(|f| format!("  {}: {}", f.check, f.detail))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// `assert_precise` on a finished scanprof run: its summary and its ticks.
pub fn assert_precise_run(what: &str, run: &super::Finished) {
    assert_precise(what, &run.summary(), &run.of_type("sample"));
}

fn about_receiving(c: Cause) -> bool {
    c.is_reply_loss()
        || matches!(
            c,
            Cause::RingFull
                | Cause::RcvbufOverflow
                | Cause::BacklogOverflow
                | Cause::ReceiverKeepsUp
                | Cause::ReceiverCpuBound
        )
}

fn receiver_verdict(c: Cause) -> bool {
    matches!(c, Cause::ReceiverKeepsUp | Cause::ReceiverCpuBound)
}

/// Packets the family read: by receive calls, and incoming frames queued to the packet sockets
/// it reads.
fn packets_read(s: &Summary) -> u64 {
    s.receive.as_ref().map_or(0, |r| {
        let calls: u64 = r
            .stages
            .iter()
            .filter(|st| st.name == StageName::RecvPackets)
            .map(|st| st.total)
            .sum();
        let rings: u64 = r
            .rings
            .iter()
            .filter(|g| g.read || g.owner_reads > 0)
            .map(|g| g.queued_total.saturating_sub(g.outgoing_total))
            .sum();
        calls + rings
    })
}

/// A family whose job is sending: it sent, and it is a scanner or sent more than it read.
fn sends_for_a_living(s: &Summary) -> bool {
    let scanner = s.scanner.as_ref().is_some_and(|sc| sc.profile != "generic");
    s.packets > 0 && (scanner || s.packets > packets_read(s))
}

fn probe_cost_on_busy_target(s: &Summary, add: &mut impl FnMut(Check, String)) {
    let c = Check::ProbeCostOnBusyTarget;
    let Some(b) = &s.cost.bpf else {
        if s.verdicts.iter().any(|v| v.cause == Cause::ProbeCost) {
            add(c, "a probe_cost verdict with no measured probe cost".into());
        }
        return;
    };
    match (b.share_of_target, b.no_share) {
        (Some(x), _) if !(0.0..=1.0).contains(&x) => add(
            c,
            format!("share_of_target {x:.2}: a share of the target's on-CPU time is at most all of it"),
        ),
        (Some(x), Some(why)) => add(c, format!("share_of_target {x:.3} beside no_share {why:?}")),
        (None, None) => add(c, "no share_of_target and no no_share saying why".into()),
        _ => {}
    }
    if b.alert {
        let share = b.share_of_target.unwrap_or(0.0);
        if share <= PROBE_COST_ALERT || b.target_busy_share < ALERT_MIN_ONCPU_SHARE {
            add(
                c,
                format!(
                    "probe-cost alert with the probes at {:.1}% of a target busy {:.1}% of the time",
                    share * 100.0,
                    b.target_busy_share * 100.0
                ),
            );
        }
    }
    if s.verdicts.iter().any(|v| v.cause == Cause::ProbeCost) && b.share_of_target.is_none() {
        add(
            c,
            format!(
                "a probe_cost verdict where the target has no share ({:?})",
                b.no_share
            ),
        );
    }
}

fn own_frames_are_no_replies(s: &Summary, add: &mut impl FnMut(Check, String)) {
    let c = Check::OwnFramesAreNoReplies;
    if let Some(r) = &s.receive {
        for g in &r.rings {
            // The copies of outgoing frames are of the frames that reached the socket (queued,
            // or dropped at a full ring), never more; a closed socket too (its counters are read
            // at its close). One whose counts lost a clear (`clears`) has lower bounds.
            let reached = g.queued_total + g.dropped_total;
            if g.clears == 0 && g.outgoing_total > reached {
                add(
                    c,
                    format!(
                        "socket fd {} of pid {}: {} outgoing frames of {reached} that reached it",
                        g.fd, g.pid, g.outgoing_total
                    ),
                );
            }
        }
    }
    // A run that asked for no rate, or read no replies: the rate's limit leads.
    if s.requested_pps.is_none() || packets_read(s) == 0 {
        let first_rate = s
            .verdicts
            .iter()
            .position(|v| v.kind == Kind::Gap && (v.share > 0.0 || v.cause == Cause::Bottleneck));
        let first_reply = s
            .verdicts
            .iter()
            .position(|v| about_receiving(v.cause) && v.cause != Cause::ReceiverKeepsUp);
        if let (Some(rate), Some(reply)) = (first_rate, first_reply) {
            if reply < rate && sends_for_a_living(s) {
                add(
                    c,
                    format!(
                        "{} ranks above the rate's limit {} in a run that asked for {}",
                        s.verdicts[reply].cause.as_str(),
                        s.verdicts[rate].cause.as_str(),
                        if s.requested_pps.is_none() {
                            "no rate"
                        } else {
                            "no replies to be read"
                        }
                    ),
                );
            }
        }
    }
}

fn receiver_where_material(s: &Summary, add: &mut impl FnMut(Check, String)) {
    let c = Check::ReceiverWhereMaterial;
    if let Some(first) = s.verdicts.first() {
        if receiver_verdict(first.cause) && sends_for_a_living(s) {
            add(
                c,
                format!(
                    "{} is the top verdict of a family whose job is sending",
                    first.cause.as_str()
                ),
            );
        }
    }
    let keeps_up = s.verdicts.iter().any(|v| v.cause == Cause::ReceiverKeepsUp);
    if let Some(loss) = s
        .verdicts
        .iter()
        .find(|v| about_receiving(v.cause) && !receiver_verdict(v.cause) && v.share > 0.0)
    {
        if keeps_up {
            add(
                c,
                format!(
                    "receiver_keeps_up beside {} about the same receiving",
                    loss.cause.as_str()
                ),
            );
        }
    }
    let by_calls: u64 = s.receive.as_ref().map_or(0, |r| {
        r.stages
            .iter()
            .filter(|st| matches!(st.name, StageName::RecvPackets | StageName::RecvDrops))
            .map(|st| st.total)
            .sum()
    });
    if by_calls == 0 {
        for v in s.verdicts.iter().filter(|v| receiver_verdict(v.cause)) {
            add(
                c,
                format!(
                    "{} where no packet reached a receive call (what it read went through a ring, or nothing): {}",
                    v.cause.as_str(),
                    v.sentence
                ),
            );
        }
    }
}

/// The shipped profiles a process's own name selects (every profile but the fallback and
/// scanprof's own reference sender, which runs as `scanprof`).
fn scanner_names() -> Vec<String> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("wrappers");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.strip_suffix(".toml").map(String::from)
        })
        .filter(|n| n != "generic" && n != "scanprof-send")
        .collect();
    names.sort();
    names
}

fn scanner_behind_wrapper(s: &Summary, add: &mut impl FnMut(Check, String)) {
    let names = scanner_names();
    for p in &s.processes {
        let exe = std::path::Path::new(&p.exe)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let Some(name) = names.iter().find(|n| **n == p.comm || **n == exe) else {
            continue;
        };
        let profile = s.scanner.as_ref().map(|sc| sc.profile.as_str());
        if profile != Some(name.as_str()) {
            add(
                Check::ScannerBehindWrapper,
                format!(
                    "pid {} runs {name} but the run's profile is {}",
                    p.pid,
                    profile.unwrap_or("none")
                ),
            );
            return;
        }
    }
}

fn no_default_disagrees(s: &Summary, add: &mut impl FnMut(Check, String)) {
    let Some(sc) = &s.scanner else { return };
    let Some(conflict) = &sc.requested.conflict else {
        return;
    };
    let rates: Vec<f64> = sc
        .requested
        .sources
        .iter()
        .filter(|src| src.origin != RateOrigin::Default)
        .filter_map(|src| src.pps)
        .collect();
    let lo = rates.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = rates.iter().copied().fold(0.0, f64::max);
    if rates.len() < 2 || hi <= lo * 1.01 {
        add(
            Check::NoDefaultDisagrees,
            format!(
                "sources disagree ({conflict}) with fewer than two given or observed rates apart: {rates:?}"
            ),
        );
    }
}

fn no_rate_verdict_off_sending(ticks: &[Value], add: &mut impl FnMut(Check, String)) {
    for t in ticks {
        let phase = t["phase"].as_str().unwrap_or("sending");
        let partial = t["partial"].as_bool().unwrap_or(false);
        if phase == "sending" && !partial {
            continue;
        }
        let gap: Vec<&str> = t["verdicts"]
            .as_array()
            .map(|v| {
                v.iter()
                    .filter(|v| v["kind"] == "gap")
                    .filter_map(|v| v["cause"].as_str())
                    .collect()
            })
            .unwrap_or_default();
        if !gap.is_empty() {
            add(
                Check::NoRateVerdictOffSending,
                format!(
                    "tick {} ({phase}{}) carries rate verdicts {gap:?}",
                    t["tick"],
                    if partial { ", partial" } else { "" }
                ),
            );
        }
    }
}

/// Weak at 0.0%: counted, not shown, by every view (the views' `Verdict::listed`, restated).
/// A verdict as the listing checks need it: a run's verdict, or a sweep step's (whose lines
/// carry only these fields).
fn brief(v: &Verdict) -> VerdictBrief {
    VerdictBrief {
        cause: v.cause,
        kind: v.kind,
        share: v.share,
        confidence: v.confidence,
    }
}

fn unlisted(v: &VerdictBrief) -> bool {
    v.confidence == Confidence::Weak && v.share < 0.0005
}

fn listing_order(verdicts: &[VerdictBrief], add: &mut impl FnMut(Check, String)) {
    if let Some(i) = verdicts.iter().position(unlisted) {
        if let Some(after) = verdicts[i..].iter().find(|v| !unlisted(v)) {
            add(
                Check::ListingOrder,
                format!(
                    "weak 0.0% {} ranks above {} ({:.1}%, {})",
                    verdicts[i].cause.as_str(),
                    after.cause.as_str(),
                    after.share * 100.0,
                    after.confidence
                ),
            );
        }
    }
}

fn one_loss_share(verdicts: &[VerdictBrief], add: &mut impl FnMut(Check, String)) {
    for v in verdicts {
        if !(0.0..=1.0).contains(&v.share) {
            add(
                Check::OneLossShare,
                format!("{} {} share {:.3} is no share", v.kind, v.cause.as_str(), v.share),
            );
        }
    }
}

/// The checks that apply to a `sweep_step` JSON line: its loss share is a share of the packets
/// handed to the kernel (at most 1), its verdicts are shares and ranked as every view lists them.
pub fn step_findings(step: &Value) -> Vec<Finding> {
    let mut out = Vec::new();
    let mut add = |check: Check, detail: String| out.push(Finding { check, detail });
    let rate = &step["requested_pps"];
    if let Some(x) = step["loss_share"].as_f64() {
        if !(0.0..=1.0).contains(&x) {
            add(
                Check::OneLossShare,
                format!("sweep step at {rate} pps: loss_share {x:.3}"),
            );
        }
    }
    let verdicts: Vec<VerdictBrief> = step
        .get("verdicts")
        .map(|v| serde_json::from_value(v.clone()).expect("a sweep step's verdicts"))
        .unwrap_or_default();
    listing_order(&verdicts, &mut add);
    one_loss_share(&verdicts, &mut add);
    out
}

fn only_the_familys_things(s: &Summary, add: &mut impl FnMut(Check, String)) {
    let c = Check::OnlyTheFamilysThings;
    let used = |dev: &str| s.devices.iter().any(|d| d.device == dev);
    for q in &s.queues {
        if !used(&q.device) {
            add(
                c,
                format!(
                    "queue of {} listed, a device the family's packets never used",
                    q.device
                ),
            );
        }
    }
    for d in s.drops.iter().filter(|d| d.class == DropClass::TargetLoss) {
        if d.reason == "NOT_SPECIFIED" && d.location.starts_with("tcp_v4_rcv") {
            add(
                c,
                format!(
                    "{} packets its destination's own TCP stack took (NOT_SPECIFIED at {}) counted as loss",
                    d.count, d.location
                ),
            );
        }
        if d.device.as_deref() == Some("lo") && !used("lo") {
            add(
                c,
                format!(
                    "{} {} drops on lo in netns {} charged to a family that never used lo",
                    d.count, d.reason, d.netns
                ),
            );
        }
    }
}

fn smaller_lines(s: &Summary, add: &mut impl FnMut(Check, String)) {
    // A connect scan whose SYNs were all answered (refused, timed out) but whose count of
    // answers says none: the answers of non-blocking connects arrive after the call.
    if let Some(c) = &s.connect {
        if c.answered > c.syns {
            add(
                Check::SmallerLines,
                format!("{} answers counted for {} SYNs", c.answered, c.syns),
            );
        }
    }
    let text = scanprof::views::text::summary(s);
    for line in text.lines() {
        if line.contains("SYNs sent (0 returned the answer") {
            add(
                Check::SmallerLines,
                format!("the connect line counts no answer: {line}"),
            );
        }
    }
}
