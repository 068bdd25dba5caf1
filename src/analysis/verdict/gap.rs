//! Causes of the gap between requested and achieved send rate: the overall judgement (no gap,
//! no requested rate, above it) and one rule per cause the time model (`split`) finds, each
//! writing its verdict's sentence, evidence and next step; `rules::RULES` lists them.

use super::claims::{conntrack_refused_as_loss, retried, send_errors_as_loss, send_errors_text, top_errno};
use super::facts::{caveat_lines, per_packet, Facts};
use super::judgement::{Case, Judgement};
use super::split::{Calibration, Split, MIN_GAPS};
use super::units::{dur, pct, pps, secs, signed_pct};
use super::{
    verdict, Cause, Kind, Verdict, CALIBRATION_TOLERANCE_PCT, MIN_DROPS, MIN_SHARE, NO_GAP_TOLERANCE,
    WEAK_SHARE,
};
use crate::analysis::scanner::{IpcDirection, ProbeRole, RateKind, WindowView};
use crate::analysis::snapshot::PacerWait;
use crate::collect::family::ProcessInfo;
use crate::collect::DropClass;
use crate::wrappers::PacerKind;

/// No requested rate to judge against: said, unless the family only receives (it never called
/// a send, so it has no send rate to judge).
pub(super) fn gap_unknown(j: &Judgement) -> Option<Verdict> {
    let f = j.f;
    let only_receives = f.packets_total == 0 && f.calls == 0 && super::receive::reader(f).is_some();
    (matches!(j.case, Case::Unrequested) && !only_receives).then(|| gap_unknown_verdict(f))
}

/// No finite requested rate: what bounds the rate.
pub(super) fn bottleneck(j: &Judgement) -> Option<Verdict> {
    matches!(j.case, Case::Unrequested).then_some(())?;
    bottleneck_verdict(j.f)
}

/// scanprof's own probes, with the gap's split when there is one (nothing sent: no finding).
pub(super) fn probe_cost(j: &Judgement) -> Option<Verdict> {
    match &j.case {
        Case::Unrequested | Case::NoGap { .. } => probe_cost_verdict(j.f, None),
        Case::Gap { r, split } => probe_cost_verdict(j.f, Some((split, *r))),
        Case::NeverSent { .. } => None,
    }
}

/// Achieved above the requested rate, unless that rate is a floor.
pub(super) fn above_requested(j: &Judgement) -> Option<Verdict> {
    let Case::NoGap { r } = j.case else { return None };
    is_above(j.f, r).then(|| above_requested_verdict(j.f, r, j.calibration.as_ref()))
}

/// Within tolerance of the requested rate, and no packet of the family dropped.
pub(super) fn no_gap(j: &Judgement) -> Option<Verdict> {
    let Case::NoGap { r } = j.case else { return None };
    (!is_above(j.f, r) && !has_target_losses(j.f)).then(|| no_gap_verdict(j.f, r, j.calibration.as_ref()))
}

/// A gap, and nothing sent at all.
pub(super) fn never_sent(j: &Judgement) -> Option<Verdict> {
    let Case::NeverSent { r } = j.case else {
        return None;
    };
    Some(never_sent_verdict(j.f, r))
}

/// Above the requested rate by more than the tolerance, where that rate is no floor.
fn is_above(f: &Facts, r: f64) -> bool {
    let floor = f.requested_view.is_some_and(|v| v.kind == RateKind::Floor);
    f.achieved / r > 1.0 + NO_GAP_TOLERANCE && !floor
}

/// scanprof's own probes: with a gap, the part of the sender's on-CPU excess their BPF run time
/// explains (`split.probe_cost`), named when at least MIN_SHARE; without one (no requested rate,
/// or none missed), a finding of share 0 on the alert (more than PROBE_COST_ALERT of a busy
/// target's on-CPU time), since the rate it reached is then partly scanprof's doing. Only the
/// programs' runs on the target's threads count; an interval without a share gets no finding.
fn probe_cost_verdict(f: &Facts, split: Option<(&Split, f64)>) -> Option<Verdict> {
    let p = f.probe?;
    let share = split.map_or(0.0, |(s, _)| s.probe_cost);
    if share < MIN_SHARE && !p.alert {
        return None;
    }
    let per_packet = p.target_ns_per_packet.filter(|_| p.share_of_target.is_some())?;
    let mut evidence = Vec::new();
    if let Some((s, r)) = split {
        evidence.push(rate_line(f, r));
        evidence.push(format!(
            "costs {} of the requested rate, of a {} gap",
            pct(share),
            pct(s.gap)
        ));
        evidence.push(format!(
            "the probes' BPF run time is {} of the sender threads' time ({} per packet): without it the \
             sender would reach about {}",
            pct(s.f_probe),
            dur(per_packet),
            pps(f.achieved / (1.0 - s.f_probe).max(0.01))
        ));
    }
    evidence.push(format!(
        "scanprof's BPF programs ran {} per target packet on the target's threads, {} ({}, {})",
        dur(per_packet),
        p.share_text(),
        p.coverage_text(),
        p.timed_text()
    ));
    if let Some(tax) = p.machine_text() {
        evidence.push(format!("apart from the target: {tax}"));
    }
    for prog in p.programs.iter().take(3) {
        if let (Some(pp), Some(pr)) = (prog.target_ns_per_packet, prog.ns_per_run) {
            evidence.push(format!(
                "{}: {} per packet on the target's threads, {} a run (all runs)",
                prog.name,
                dur(pp),
                dur(pr)
            ));
        }
    }
    evidence.push(
        "the figure is the programs' run time only: the kernel's dispatch to them costs more on top"
            .to_string(),
    );
    caveat_lines(f, &mut evidence);
    let sentence = match split {
        Some(_) => format!(
            "scanprof's own probes slow the sender: their {} per packet of run time explain at least {} of \
             the requested rate (the kernel's dispatch to them comes on top), a part of the gap the scanner \
             would not have without scanprof.",
            dur(per_packet),
            pct(share)
        ),
        None if f.requested.is_some() => format!(
            "scanprof's own probes take {} of the target's on-CPU time ({} per packet), yet it kept up with \
             the requested rate: they cost it CPU time, not rate.",
            p.share_of_target.map_or("?".to_string(), pct),
            dur(per_packet)
        ),
        None => format!(
            "scanprof's own probes take {} of the target's on-CPU time ({} per packet): if it sends as fast \
             as its CPU allows, the rate it reached is lower than it would be unmeasured.",
            p.share_of_target.map_or("?".to_string(), pct),
            dur(per_packet)
        ),
    };
    let weak = f.thin() || (split.is_some() && share < WEAK_SHARE);
    Some(verdict(
        Cause::ProbeCost,
        Kind::Gap,
        sentence,
        share,
        evidence,
        "Compare with the scanner's rate unmeasured (its own report, or `scanprof baseline` for this machine); \
         the probes' cost per packet is in the report's cost line and per program in the JSON (cost.bpf)."
            .to_string(),
        weak,
    ))
}

fn has_target_losses(f: &Facts) -> bool {
    f.drops
        .iter()
        .any(|d| d.row.class == DropClass::TargetLoss && d.count > 0)
}

/// The first evidence line of every gap verdict.
fn rate_line(f: &Facts, r: f64) -> String {
    format!(
        "requested {}, achieved {} {} ({} of requested)",
        pps(r),
        pps(f.achieved),
        f.over(),
        pct(f.achieved / r)
    )
}

fn baseline_line(f: &Facts) -> Option<String> {
    let b = f.baseline?;
    Some(match b.accuracy {
        Some(a) => format!(
            "the reference sender ({} pacer) reached {} at this rate on this machine ({} of requested)",
            b.pacer,
            pps(b.achieved_pps),
            pct(a)
        ),
        None => format!(
            "the reference sender reached {} on this machine",
            pps(b.achieved_pps)
        ),
    })
}

/// The requested rate is a cap: going slower may be the scanner's own choice.
fn is_cap(f: &Facts) -> bool {
    f.requested_view.is_some_and(|v| v.kind == RateKind::Cap)
}

fn gap_unknown_verdict(f: &Facts) -> Verdict {
    let unlimited = f.requested_view.is_some_and(|v| v.kind == RateKind::Unlimited);
    let sentence = if unlimited {
        format!(
            "The scanner was asked to send as fast as it can, so there is no requested rate to fall short of; it reached {}.",
            pps(f.achieved)
        )
    } else {
        format!(
            "No requested rate is known, so the gap between requested and achieved cannot be judged; the scanner reached {}.",
            pps(f.achieved)
        )
    };
    let mut evidence = vec![format!("achieved {} {}", pps(f.achieved), f.over())];
    if let Some(v) = f.requested_view {
        evidence.push(format!(
            "the scanner's profile reads the requested rate as `{}`",
            v.kind
        ));
        for s in v.sources.iter().take(3) {
            evidence.push(format!("rate source: {}", s.source));
        }
    }
    let next_step = if unlimited {
        "To find where it tops out, compare with the reference sender unpaced: `scanprof send --rate 0`."
            .to_string()
    } else {
        "Pass the rate the scanner was asked for with `--requested PPS` to judge the gap.".to_string()
    };
    verdict(
        Cause::GapUnknown,
        Kind::Gap,
        sentence,
        0.0,
        evidence,
        next_step,
        true,
    )
}

/// Where a sender with no finite requested rate spends its time: the part that bounds its rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bound {
    /// on the CPU inside its send syscalls (the kernel's send path)
    SendSyscall,
    /// off the CPU inside its send syscalls (buffer space, a lock)
    BlockedInSend,
    /// on the CPU outside its send syscalls (its own code, other syscalls)
    OwnCode,
    /// asleep or waiting of its own accord outside send
    Waiting,
    /// runnable, waiting for a CPU
    Preempted,
}

/// With no finite requested rate there is no gap to split, but the time budget still says what
/// limits the rate: the largest of its parts (in the send syscall, blocked in it, own code,
/// waiting, preempted), with the ceiling it implies and the machine's own (a baseline) if known.
fn bottleneck_verdict(f: &Facts) -> Option<Verdict> {
    let t = &f.time;
    let total = t.total();
    if total <= 0.0 || f.packets == 0 {
        return None;
    }
    let parts = [
        (Bound::SendSyscall, t.send),
        (Bound::BlockedInSend, t.blocked),
        (Bound::OwnCode, t.other),
        (Bound::Waiting, t.sleep),
        (Bound::Preempted, t.preempted),
    ];
    let (bound, ns) = parts
        .iter()
        .copied()
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .unwrap_or((Bound::SendSyscall, 0.0));
    let share = ns / total;
    let per = |x: f64| per_packet(x, f.packets);
    let senders = t.senders.max(1) as f64;
    let on_cpu = t.send + t.other;
    // One packet's time on the CPU bounds each thread at 1 / that time.
    let cpu_ceiling = (on_cpu > 0.0).then(|| 1e9 * senders * f.packets as f64 / on_cpu);
    let mut evidence = vec![
        format!("achieved {} {}, with no finite requested rate", pps(f.achieved), f.over()),
        format!(
            "sender threads' time: in send syscalls on the CPU {} ({} per packet), blocked in them {}, own code and \
             other syscalls {} ({} per packet), asleep {}, waiting for a CPU {}",
            pct(t.send / total),
            per(t.send),
            pct(t.blocked / total),
            pct(t.other / total),
            per(t.other),
            pct(t.sleep / total),
            pct(t.preempted / total)
        ),
    ];
    if let Some(l) = f.latency_p50_ns {
        evidence.push(format!("median send syscall {}", dur(l)));
    }
    if let Some(c) = cpu_ceiling {
        evidence.push(format!(
            "{} on the CPU per packet over {} sender thread(s): at most about {} without any wait",
            per(on_cpu),
            t.senders.max(1),
            pps(c)
        ));
    }
    if let Some(b) = f.baseline {
        let unpaced = if b.rate > 0.0 {
            format!("at {}", pps(b.rate))
        } else {
            "unpaced".to_string()
        };
        evidence.push(format!(
            "the reference sender reached {} {unpaced} on this machine: the scanner reached {} of it",
            pps(b.achieved_pps),
            pct(f.achieved / b.achieved_pps.max(f64::MIN_POSITIVE))
        ));
    }
    let (sentence, next) = match bound {
        Bound::SendSyscall => (
            format!(
                "What limits the rate is the send syscall: the sender spends {} of its time inside it on the CPU \
                 ({} per packet), the kernel's send path for each packet.",
                pct(share),
                per(ns)
            ),
            "Send with fewer syscalls per packet (sendmmsg, an AF_PACKET TX ring with PACKET_QDISC_BYPASS) or from \
             more threads, or shorten the kernel's path (netfilter rules, tc filters and the qdisc on the device); \
             `perf top -p PID` shows where the syscall's time goes."
                .to_string(),
        ),
        Bound::BlockedInSend => (
            format!(
                "What limits the rate is waiting inside the send calls: the sender is blocked in them {} of its \
                 time ({} per packet), for buffer space or a lock (see the block sites).",
                pct(share),
                per(ns)
            ),
            "The block sites name what the send waits for: send-buffer space means a slower queue below (`tc -s \
             qdisc show dev DEV`, the link's speed); a lock, one socket per thread."
                .to_string(),
        ),
        Bound::OwnCode => (
            format!(
                "What limits the rate is the sender's own code: {} of its time on the CPU outside its send calls \
                 ({} per packet).",
                pct(share),
                per(ns)
            ),
            "Profile its code (`perf record -g -p PID`): packet building, checksums, target generation; or spread \
             the scan over more sender threads."
                .to_string(),
        ),
        Bound::Waiting => (
            format!(
                "The sender is not sending flat out: it waits of its own accord {} of its time ({} per packet), \
                 so it paces itself or waits for something.",
                pct(share),
                per(ns)
            ),
            "Pass the rate it was asked for (`--requested PPS`) to judge its pacing; `offcputime -p PID` shows \
             what it waits for."
                .to_string(),
        ),
        Bound::Preempted => (
            format!(
                "What limits the rate is other tasks taking the sender's CPU: it waits for a CPU {} of its time \
                 ({} per packet).",
                pct(share),
                per(ns)
            ),
            "Give the sender a CPU of its own (`taskset -cp N PID`) or a higher priority (`chrt -f -p 10 PID`); \
             `perf sched timehist -p PID` shows what runs instead."
                .to_string(),
        ),
    };
    caveat_lines(f, &mut evidence);
    Some(verdict(
        Cause::Bottleneck,
        Kind::Gap,
        sentence,
        0.0,
        evidence,
        next,
        f.thin(),
    ))
}

fn no_gap_verdict(f: &Facts, r: f64, calibration: Option<&Calibration>) -> Verdict {
    let after = if f.unseen_after_send().is_some() {
        "; what became of its packets after sending is not known (see measurement_fault)"
    } else {
        " and lost no packets after sending them"
    };
    let sentence = format!(
        "No significant gap: the scanner reached {} of the {} it was asked for ({}){after}.",
        pps(f.achieved),
        pps(r),
        pct(f.achieved / r)
    );
    let mut evidence = vec![
        rate_line(f, r),
        format!("{} packets sent {}", f.packets, f.over()),
    ];
    evidence.extend(baseline_line(f));
    if let Some(c) = calibration.filter(|c| c.error_pct.abs() > CALIBRATION_TOLERANCE_PCT) {
        evidence.push(format!(
            "its calibration is off by {} yet the rate holds: the slot may be corrected elsewhere",
            signed_pct(c.error_pct)
        ));
    }
    caveat_lines(f, &mut evidence);
    verdict(
        Cause::NoGap,
        Kind::Gap,
        sentence,
        0.0,
        evidence,
        "Nothing to fix at this rate; raise the requested rate to find where the gap opens.".to_string(),
        f.thin(),
    )
}

fn above_requested_verdict(f: &Facts, r: f64, calibration: Option<&Calibration>) -> Verdict {
    let over = f.achieved / r - 1.0;
    let sentence = if is_cap(f) {
        format!(
            "The scanner sends {} above its cap: {} against a cap of {}.",
            pct(over),
            pps(f.achieved),
            pps(r)
        )
    } else {
        format!(
            "The scanner sends faster than asked: {} against {} requested ({} above).",
            pps(f.achieved),
            pps(r),
            pct(over)
        )
    };
    let mut evidence = vec![rate_line(f, r)];
    if let Some(c) = calibration.filter(|c| c.error_pct < -CALIBRATION_TOLERANCE_PCT) {
        evidence.push(format!(
            "{}: its slot is {} against the {} a rate of {} needs ({}): slots too short{}",
            c.probe,
            c.delay_ns.map_or("?".to_string(), dur),
            c.slot_ns.map_or("?".to_string(), dur),
            pps(r),
            signed_pct(c.own_error_pct),
            if c.count > 1 {
                format!(
                    " (median of its {} calibrations {})",
                    c.count,
                    signed_pct(c.error_pct)
                )
            } else {
                String::new()
            }
        ));
    }
    caveat_lines(f, &mut evidence);
    verdict(
        Cause::AboveRequested,
        Kind::Gap,
        sentence,
        0.0,
        evidence,
        "Check that --requested (or the rate read from the scanner's command line) is the rate it was given; \
         if it is, its pacing runs fast: check its clock calibration against the kernel's TSC frequency \
         (`dmesg | grep -i tsc`)."
            .to_string(),
        f.thin(),
    )
}

impl Split {
    /// Preempted time that made no gap longer, when there was some.
    fn absorbed_line(&self) -> Option<String> {
        (self.f_absorbed >= 0.005).then(|| {
            format!(
                "a further {} of its time preempted inside waits, at no cost to the rate (no gap longer for it)",
                pct(self.f_absorbed)
            )
        })
    }

    /// A verdict of the gap's split: named when its share is at least `min_share(cause)`, with
    /// the rate and the share it costs first, and the lines every split cause carries.
    #[allow(clippy::too_many_arguments)]
    fn verdict(
        &self,
        f: &Facts,
        r: f64,
        cause: Cause,
        share: f64,
        sentence: String,
        mut evidence: Vec<String>,
        next: String,
        weak: bool,
    ) -> Option<Verdict> {
        if share < min_share(cause) || share <= 0.0 {
            return None;
        }
        evidence.insert(0, rate_line(f, r));
        evidence.insert(
            1,
            format!(
                "costs {} of the requested rate, of a {} gap",
                pct(share),
                pct(self.gap)
            ),
        );
        if is_cap(f) {
            evidence.push("the requested rate is a cap: the scanner may choose to go slower".to_string());
        }
        if self.cpu_not_limiting > 0.0 && cause != Cause::CpuBound {
            evidence.push(format!(
                "on the CPU {} of its time, off the CPU of its own accord {} of its time (asleep or blocked \
                 in send): its CPU time did not make the gaps",
                pct(self.f_send + self.f_other - self.f_spin.unwrap_or(0.0)),
                pct(self.f_sleep + self.f_blocked)
            ));
        }
        caveat_lines(f, &mut evidence);
        let weak = weak || f.thin() || share < WEAK_SHARE || is_cap(f);
        Some(verdict(cause, Kind::Gap, sentence, share, evidence, next, weak))
    }
}

/// The smallest share at which a cause of the split is named. The estimates from the time
/// budget need MIN_SHARE to stand out of its noise; the time between work units is measured
/// from their boundaries (exact spans with no packet in them, less one ordinary gap), so it is
/// named at any share: a fixed pause is a smaller share of a run that preemption stretched, not
/// a less certain one. Below WEAK_SHARE it is weak, as every cause is.
fn min_share(cause: Cause) -> f64 {
    match cause {
        Cause::UnitIdle | Cause::UnitSetup => 0.0,
        _ => MIN_SHARE,
    }
}

/// The part of the failed sends' share a full conntrack table refused (EPERM): that table's.
fn conntrack_part<'f>(
    f: &'f Facts,
    s: &Split,
) -> Option<(f64, u64, &'f crate::analysis::snapshot::ConntrackView)> {
    let (refused, table) = super::limits::conntrack_refused(f)?;
    let share = s.send_errors * (refused as f64 / f.failed_calls.max(1) as f64).min(1.0);
    Some((share, refused, table))
}

/// Sends a full conntrack table refused: with a gap, that table's part of step 1 (the failed
/// sends); without one, a loss.
pub(super) fn conntrack_refused(j: &Judgement) -> Option<Verdict> {
    let f = j.f;
    match &j.case {
        Case::Gap { r, split: s } if s.send_errors > 0.0 => {
            let (share, refused, table) = conntrack_part(f, s)?;
            let dropped = super::limits::netfilter_drops(f);
            let (sentence, evidence, next) = super::limits::conntrack_text(f, table, refused, dropped);
            s.verdict(
                f,
                *r,
                Cause::ConntrackFull,
                share,
                sentence,
                evidence,
                next,
                refused < MIN_DROPS,
            )
        }
        Case::Unrequested | Case::NoGap { .. } => conntrack_refused_as_loss(f),
        _ => None,
    }
}

/// Failed sends: with a gap, their part of it (step 1, less a full conntrack table's); without
/// one, a loss.
pub(super) fn send_errors(j: &Judgement) -> Option<Verdict> {
    let f = j.f;
    match &j.case {
        Case::Gap { r, split: s } if s.send_errors > 0.0 => {
            let errors_share = s.send_errors - conntrack_part(f, s).map_or(0.0, |c| c.0);
            if errors_share <= 0.0 {
                return None;
            }
            let (sentence, evidence, next) = send_errors_text(f);
            let weak = f.failed_calls < MIN_DROPS || retried(top_errno(f));
            s.verdict(
                f,
                *r,
                Cause::SendErrors,
                errors_share,
                sentence,
                evidence,
                next,
                weak,
            )
        }
        Case::Unrequested | Case::NoGap { .. } => send_errors_as_loss(f),
        _ => None,
    }
}

pub(super) fn cpu_bound(j: &Judgement) -> Option<Verdict> {
    let (s, r) = j.split().filter(|(s, _)| s.cpu > 0.0)?;
    let f = j.f;
    let calibration = j.calibration.as_ref();
    let slot = 1e9 / r * f.time.senders.max(1) as f64;
    let on_cpu = s.f_send + s.f_other - s.f_spin.unwrap_or(0.0);
    let on_cpu_ns = on_cpu * s.thread_ns / s.attempts.max(1) as f64;
    let mut evidence = vec![
        format!(
            "on CPU {} per packet: {} inside send syscalls, {} outside",
            dur(on_cpu_ns),
            s.per_packet(s.f_send),
            s.per_packet(s.f_other - s.f_spin.unwrap_or(0.0))
        ),
        format!(
            "slot {} per packet and sender thread ({} over {} thread(s))",
            dur(slot),
            pps(r),
            f.time.senders.max(1)
        ),
        format!("asleep {} of its time", pct(s.f_sleep)),
    ];
    if let Some(spin) = s.f_spin {
        evidence.push(format!(
            "pacing loop (pace_wait probe) {} per packet, not counted as work",
            s.per_packet(spin)
        ));
    }
    if let Some(l) = f.latency_p50_ns {
        evidence.push(format!("median send syscall {}", dur(l)));
    }
    evidence.extend(baseline_line(f));
    // Without a probe on its pacing loop, with no calibration figure and no sleep, a busy
    // waiting pacer with too long a slot would look the same.
    let ambiguous =
        s.f_spin.is_none() && calibration.is_none() && s.f_sleep < WEAK_SHARE && s.f_send < s.sigma;
    if ambiguous {
        evidence.push(
                "no probe on its pacing loop: if it busy-waits to pace, a slot longer than 1/requested looks the same"
                    .to_string(),
            );
    }
    let max_pps = 1e9 * f.time.senders.max(1) as f64 / on_cpu_ns.max(1.0);
    s.verdict(f, r, Cause::CpuBound,
            s.cpu,
            format!(
                "The sender is CPU-bound: it needs {} of CPU per packet against a slot of {}, so it cannot keep up with {}.",
                dur(on_cpu_ns),
                dur(slot),
                pps(r)
            ),
            evidence,
            format!(
                "Cut the per-packet work: batch the sends (sendmmsg, an AF_PACKET TX ring), spread the scan \
                 over more sender threads, or request at most {} (what its CPU time per packet allows); \
                 {}.",
                pps(max_pps),
                reference_comparison(f, r)
            ),
            ambiguous,
        )
}

pub(super) fn blocked_send(j: &Judgement) -> Option<Verdict> {
    let (s, r) = j.split().filter(|(s, _)| s.blocked > 0.0)?;
    let f = j.f;
    let (sentence, evidence, next) = blocked_text(f, s);
    s.verdict(
        f,
        r,
        Cause::BlockedSend,
        s.blocked,
        sentence,
        evidence,
        next,
        false,
    )
}

pub(super) fn preempted(j: &Judgement) -> Option<Verdict> {
    let (s, r) = j.split().filter(|(s, _)| s.preempted > 0.0)?;
    let f = j.f;
    let mut evidence = vec![
        format!(
            "runnable but waiting for a CPU {} of its time, {} per packet",
            pct(s.f_preempted),
            s.per_packet(s.f_preempted)
        ),
        format!("on CPU {} of its time", pct(s.f_send + s.f_other - s.f_absorbed)),
    ];
    evidence.extend(s.absorbed_line());
    evidence.extend(baseline_line(f));
    s.verdict(f, r, Cause::Preempted,
            s.preempted,
            format!(
                "Other tasks take the sender's CPU: it waits {} per packet to run again, time its pacing never makes up.",
                s.per_packet(s.f_preempted)
            ),
            evidence,
            "Give the sender a CPU of its own: pin it to an idle CPU (`taskset -cp N PID`) or raise its \
             priority (`chrt -f -p 10 PID`, `renice -n -10 -p PID`); `perf sched timehist -p PID` shows \
             what runs instead. A pacer with deadline slots would catch the time up."
                .to_string(),
            false,
        )
}

pub(super) fn cgroup_throttled(j: &Judgement) -> Option<Verdict> {
    let (s, r) = j.split().filter(|(s, _)| s.throttled > 0.0)?;
    let f = j.f;
    let (sentence, evidence, next) = super::limits::throttled_text(f, s, r);
    s.verdict(
        f,
        r,
        Cause::CgroupThrottled,
        s.throttled,
        sentence,
        evidence,
        next,
        false,
    )
}

pub(super) fn steal(j: &Judgement) -> Option<Verdict> {
    let (s, r) = j.split().filter(|(s, _)| s.steal > 0.0)?;
    let f = j.f;
    let (sentence, evidence, next) = super::limits::steal_text(f, s);
    s.verdict(f, r, Cause::Steal, s.steal, sentence, evidence, next, false)
}

pub(super) fn miscalibrated(j: &Judgement) -> Option<Verdict> {
    let (s, r) = j.split().filter(|(s, _)| s.miscalibrated > 0.0)?;
    let f = j.f;
    let calibration = j.calibration.as_ref();
    let (sentence, mut evidence, next, weak) = match calibration {
        Some(c) => {
            let mut evidence = vec![format!(
                "{}: slot {} where {} needs {} ({})",
                c.probe,
                c.delay_ns.map_or("?".to_string(), dur),
                pps(r),
                c.slot_ns.map_or("?".to_string(), dur),
                signed_pct(c.own_error_pct)
            )];
            if c.count > 1 {
                evidence.push(format!(
                    "{} calibrations, median error {}, {} spent calibrating",
                    c.count,
                    signed_pct(c.error_pct),
                    dur(c.duration_ms * 1e6)
                ));
            }
            (
                    format!(
                        "The scanner's pacing slot is {} too long: its calibration ({}) derived a slot that does not match {}.",
                        signed_pct(c.error_pct),
                        c.probe,
                        pps(r)
                    ),
                    evidence,
                    calibration_next(f, r),
                    false,
                )
        }
        None => {
            let mean = s.mean_gap_ns.unwrap_or(0.0);
            let mut evidence = vec![format!(
                "mean gap {} against {} expected ({:.3}x), p50 {}, p99 {}",
                dur(mean),
                dur(s.expected_gap_ns),
                mean / s.expected_gap_ns,
                f.gap.p50_ns.map_or("?".to_string(), dur),
                f.gap.p99_ns.map_or("?".to_string(), dur)
            )];
            let spinning = s.busy_wait_inferred;
            evidence.push(if spinning {
                    format!(
                        "on the CPU outside its send calls {} per packet ({} in them), asleep {}: a busy-waiting pacer",
                        s.per_packet(s.f_other),
                        s.per_packet(s.f_send),
                        pct(s.f_sleep)
                    )
                } else {
                    format!(
                        "the sender works {} and waits {} of its time",
                        pct(s.f_send + s.f_other - s.f_spin.unwrap_or(0.0)),
                        pct(s.f_sleep + s.f_spin.unwrap_or(0.0))
                    )
                });
            evidence.push("no calibration figure from the scanner: inferred from the gaps".to_string());
            if f.gap.count < MIN_GAPS {
                evidence.push(format!(
                    "only {} gaps measured, each {:.0}x the slot: too far beyond it for any packet's work",
                    f.gap.count,
                    mean / s.expected_gap_ns
                ));
            }
            evidence.extend(s.absorbed_line());
            let how = if spinning {
                "while the sender spins on the CPU between packets"
            } else {
                "while the sender mostly waits"
            };
            (
                format!(
                    "The pacing slot looks mis-derived: the gaps are a steady {:.2}x the {} slot {how}.",
                    mean / s.expected_gap_ns,
                    dur(s.expected_gap_ns)
                ),
                evidence,
                calibration_next(f, r),
                true,
            )
        }
    };
    evidence.extend(pacer_line(f));
    s.verdict(
        f,
        r,
        Cause::Miscalibrated,
        s.miscalibrated,
        sentence,
        evidence,
        next,
        weak,
    )
}

pub(super) fn pacing_coarse(j: &Judgement) -> Option<Verdict> {
    let (s, r) = j.split().filter(|(s, _)| s.pacing > 0.0)?;
    let f = j.f;
    let sleeps = s.f_sleep >= s.f_spin.unwrap_or(0.0);
    let mut evidence = vec![format!(
        "median gap {} against {} expected per send call (mean {})",
        f.gap.p50_ns.map_or("?".to_string(), dur),
        dur(s.expected_gap_ns),
        s.mean_gap_ns.map_or("?".to_string(), dur)
    )];
    evidence.push(match s.f_spin {
        Some(spin) => format!(
            "asleep {}, in its pacing loop {} of its time",
            pct(s.f_sleep),
            pct(spin)
        ),
        None => format!("asleep {} of its time", pct(s.f_sleep)),
    });
    evidence.extend(s.absorbed_line());
    if s.f_wakeup > 0.0 {
        evidence.push(format!(
            "woken but waiting for a CPU {} per packet after its sleeps: part of each wake-up's lateness",
            s.per_packet(s.f_wakeup)
        ));
    }
    let no_gaps = f.gap.count < MIN_GAPS || f.gap.p50_ns.is_none();
    if no_gaps {
        evidence.push(format!("only {} gaps measured", f.gap.count));
    }
    let slot = dur(s.expected_gap_ns);
    let (sentence, mut next) = match s.pacing_pattern(f, sleeps) {
            PacingPattern::Batching(p50) => (
                format!(
                    "Pacing is too coarse: the sender sends in bursts (median gap {}, shorter than the {slot} slot) \
                     and waits between them past the slots, so the bursts fall short of the rate.",
                    dur(p50)
                ),
                pacing_next(f, r, sleeps),
            ),
            PacingPattern::WorkOnTop(work_ns) => {
                evidence.push(format!(
                    "work {} per packet (on CPU outside its waits) against an excess of {} per gap: the waits are on time",
                    dur(work_ns),
                    s.mean_gap_ns
                        .map_or("?".to_string(), |m| dur(m - s.expected_gap_ns))
                ));
                (
                    format!(
                        "Pacing is too coarse: the sender waits a whole slot after each packet's work, so its {} of work \
                         per packet comes on top of the {slot} period, and each gap is {} instead of {slot}.",
                        dur(work_ns),
                        f.gap.p50_ns.map_or("longer".to_string(), dur)
                    ),
                    "Time the slots from their start, not from the end of the work: sleep to an absolute deadline \
                     (`clock_nanosleep(TIMER_ABSTIME)` on the previous deadline plus the period), or subtract the \
                     time the packet took from the wait."
                        .to_string(),
                )
            }
            PacingPattern::LateWakeUps => {
                let how = if sleeps {
                    "its sleeps end late"
                } else {
                    "its waits end late"
                };
                (
                    format!(
                        "Pacing is too coarse: the sender waits past its slots ({how}), so each gap is {} instead of {slot}.",
                        f.gap.p50_ns.map_or("longer".to_string(), dur),
                    ),
                    pacing_next(f, r, sleeps),
                )
            }
        };
    if next.is_empty() {
        next = pacing_next(f, r, sleeps);
    }
    s.verdict(
        f,
        r,
        Cause::PacingCoarse,
        s.pacing,
        sentence,
        evidence,
        next,
        no_gaps,
    )
}

/// A scanner paced by a concurrency window (`[rate.window]`) whose open-file limit is below
/// the window: the lowest limit among the processes its profile recognised, and that process.
fn fd_short<'f>(f: &'f Facts) -> Option<(u64, &'f WindowView, &'f ProcessInfo)> {
    let w = f.scanner?.requested.window.as_ref()?;
    let (limit, p) = f
        .processes
        .iter()
        .filter(|p| p.role.is_some())
        .filter_map(|p| Some((p.open_files_limit?, p)))
        .min_by_key(|(l, _)| *l)?;
    ((limit as f64) < w.concurrency).then_some((limit, w, p))
}

/// `fd_limit`: the stalls of a window-paced scanner whose open-file limit is below its window.
/// Each attempt in flight holds a socket, so the scanner can keep no more attempts in flight
/// than it may open files (RustScan shrinks its batch to fit); while targets do not answer,
/// every slot waits out the timeout and the rate is at most limit x 1000 / timeout.
pub(super) fn fd_limit(j: &Judgement) -> Option<Verdict> {
    let (limit, w, p) = fd_short(j.f)?;
    let (s, r) = j.split().filter(|(s, _)| s.stalls > 0.0)?;
    let f = j.f;
    let most = limit as f64 * 1000.0 / w.timeout_ms;
    let sentence = format!(
        "{} (pid {}) may open {limit} files, fewer than the {:.0} attempts its window keeps in flight: it waits for sockets to free, so while targets do not answer it reaches at most {} of the {} asked for.",
        p.comm,
        p.pid,
        w.concurrency,
        pps(most),
        pps(r)
    );
    let evidence = vec![
        format!(
            "window: {:.0} in flight, {:.0} ms each ({}): {} while no target answers",
            w.concurrency,
            w.timeout_ms,
            w.source,
            pps(w.concurrency * 1000.0 / w.timeout_ms)
        ),
        format!(
            "open-file limit (RLIMIT_NOFILE, soft) of {} (pid {}): {limit}: at most {limit} x 1000 / {:.0} ms = {}",
            p.comm,
            p.pid,
            w.timeout_ms,
            pps(most)
        ),
        format!(
            "gaps: median {}, p99 {}; asleep {} of its time",
            f.gap.p50_ns.map_or("?".to_string(), dur),
            f.gap.p99_ns.map_or("?".to_string(), dur),
            pct(s.f_sleep)
        ),
    ];
    s.verdict(
        f,
        r,
        Cause::FdLimit,
        s.stalls,
        sentence,
        evidence,
        format!(
            "Raise the scanner's open-file limit above its window ({:.0}): `ulimit -n N` in the shell that starts it, `prlimit --nofile=N --pid {}`, or the scanner's own option (RustScan `--ulimit N`); or ask for a window below the limit.",
            w.concurrency, p.pid
        ),
        f.gap.count < MIN_GAPS,
    )
}

pub(super) fn idle_waits(j: &Judgement) -> Option<Verdict> {
    // A window-paced scanner short of open files stalls for that reason: `fd_limit` names it.
    if fd_short(j.f).is_some() {
        return None;
    }
    let (s, r) = j.split().filter(|(s, _)| s.stalls > 0.0)?;
    let f = j.f;
    let mut evidence = vec![format!(
        "gaps: median {}, mean {}, p99 {}, against {} expected",
        f.gap.p50_ns.map_or("?".to_string(), dur),
        s.mean_gap_ns.map_or("?".to_string(), dur),
        f.gap.p99_ns.map_or("?".to_string(), dur),
        dur(s.expected_gap_ns)
    )];
    evidence.push(format!("asleep {} of its time", pct(s.f_sleep)));
    let ipc = ipc_messages(f);
    if ipc > 0 {
        evidence.push(format!("{ipc} messages between the scanner's processes"));
    }
    let sentence = if s.attempts == 0 {
        format!(
            "The sender sent nothing {}: it waited (asleep {} of its time) rather than send.",
            f.over(),
            pct(s.f_sleep)
        )
    } else {
        format!(
                "The sender stops to wait outside its pacing: most gaps are near the slot, but some stall (p99 {}).",
                f.gap.p99_ns.map_or("?".to_string(), dur)
            )
    };
    s.verdict(f, r, Cause::IdleWaits,
            s.stalls,
            sentence,
            evidence,
            "Find what the sender waits for between sends (`offcputime -p PID` from bcc, `perf trace -s -p PID`); \
             if it waits for another of the scanner's processes, that process is the bottleneck."
                .to_string(),
            f.gap.count < MIN_GAPS,
        )
}

pub(super) fn unit_idle(j: &Judgement) -> Option<Verdict> {
    let (s, r) = j.split().filter(|(s, _)| s.unit_idle > 0.0)?;
    let f = j.f;
    let (n, idle_ms, _) = unit_sums(f);
    let mut evidence = vec![
        format!(
            "{} idle between work units {} ({} hand-overs), of {} sender time",
            dur(s.units.idle_seen_ns),
            f.over(),
            s.units.spans,
            dur(s.thread_ns)
        ),
        format!("{n} work units, {} idle before them in all", dur(idle_ms * 1e6)),
    ];
    let ipc = ipc_messages(f);
    if ipc > 0 {
        evidence.push(format!("{ipc} messages between the scanner's processes"));
    }
    s.verdict(f, r, Cause::UnitIdle,
            s.unit_idle,
            format!(
                "The sender sits idle between work units: {} passed {} between one unit's last packet and the next unit's hand-over.",
                dur(s.units.idle_seen_ns),
                f.over()
            ),
            evidence,
            "Give the sender fewer, larger work units (fewer separate targets or modes), or look at what the \
             master does before it hands over the next one (the IPC table)."
                .to_string(),
            false,
        )
}

pub(super) fn unit_setup(j: &Judgement) -> Option<Verdict> {
    let (s, r) = j.split().filter(|(s, _)| s.unit_setup > 0.0)?;
    let f = j.f;
    let calibration = j.calibration.as_ref();
    let (n, _, setup_ms) = unit_sums(f);
    let mut evidence = vec![
        format!(
            "{} of set-up inside the interval over {} hand-overs, {} each",
            dur(s.units.setup_seen_ns),
            s.units.spans,
            dur(s.units.setup_seen_ns / s.units.spans.max(1) as f64)
        ),
        format!(
            "{n} work units, {} of set-up (hand-over to first packet) in all",
            dur(setup_ms * 1e6)
        ),
    ];
    if let Some(c) = calibration.filter(|c| c.duration_ms > 0.0) {
        evidence.push(format!(
            "{} spent in {} calibration(s)",
            dur(c.duration_ms * 1e6),
            c.count
        ));
    }
    s.verdict(
        f,
        r,
        Cause::UnitSetup,
        s.unit_setup,
        format!(
            "Every work unit pays a set-up before its first packet (IPC, rate set-up, calibration): {} each.",
            dur(s.units.setup_seen_ns / s.units.spans.max(1) as f64)
        ),
        evidence,
        "Fewer, larger work units amortise the set-up; a clock calibration per unit could be done once."
            .to_string(),
        false,
    )
}

/// What of the gap the time budget leaves unexplained, when at least MIN_SHARE.
pub(super) fn unexplained(j: &Judgement) -> Option<Verdict> {
    let (s, r) = j.split().filter(|(s, _)| s.unexplained >= MIN_SHARE)?;
    let f = j.f;
    let mut evidence = vec![rate_line(f, r)];
    if s.thread_ns <= 0.0 {
        evidence.push("no time budget for the sender threads (is the sched probe attached?)".to_string());
    }
    caveat_lines(f, &mut evidence);
    Some(verdict(
        Cause::Unexplained,
        Kind::Gap,
        format!(
            "{} of the requested rate is missing for a reason scanprof cannot see {}.",
            pct(s.unexplained),
            f.over()
        ),
        s.unexplained,
        evidence,
        "Check the run's warnings and `scanprof doctor` for probes this kernel lacks, then run again."
            .to_string(),
        true,
    ))
}

/// A scanner that has sent nothing since attach and made no send call: what its processes did
/// (which exited, with what status and when) and how many IPC messages passed between them.
fn never_sent_verdict(f: &Facts, r: f64) -> Verdict {
    let exited: Vec<&ProcessInfo> = f.processes.iter().filter(|p| !p.alive).collect();
    let member = |p: &ProcessInfo| match &p.role {
        Some(role) => format!("{} (pid {}, {role})", p.comm, p.pid),
        None => format!("{} (pid {})", p.comm, p.pid),
    };
    let how = |p: &ProcessInfo| {
        let status = match p.exit_code {
            Some(c) if c & 0x7f != 0 => format!("was killed by signal {}", c & 0x7f),
            Some(c) => format!("exited with status {}", (c >> 8) & 0xff),
            None => "exited".to_string(),
        };
        match p.exit_s {
            Some(t) => format!("{status} at {} after attach", secs(t)),
            None => status,
        }
    };
    let mut evidence = vec![
        rate_line(f, r),
        "no packet and no send call since attach".to_string(),
    ];
    for p in f.processes {
        evidence.push(if p.alive {
            format!("{}: still running", member(p))
        } else {
            format!("{}: {}", member(p), how(p))
        });
    }
    // A count of 0 says something only where the profile watches the scanner's IPC.
    let ipc = match f.scanner {
        Some(v) if watches_ipc(v) => {
            let n = ipc_messages(f);
            evidence.push(format!("{n} IPC messages sent between the scanner's processes"));
            Some(n)
        }
        Some(v) => {
            evidence.push(format!(
                "IPC between its processes not counted (the `{}` profile has no IPC probe attached)",
                v.profile
            ));
            None
        }
        None => {
            evidence.push("IPC between its processes not counted (no scanner profile applies)".to_string());
            None
        }
    };
    let members = if exited.is_empty() {
        format!(
            "its {} still running",
            if f.processes.len() == 1 {
                "process is"
            } else {
                "processes are"
            }
        )
    } else {
        exited
            .iter()
            .take(4)
            .map(|p| format!("{} {}", member(p), how(p)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let sentence = format!(
        "The scanner never started sending: no packet {}{}; {members}{}.",
        if f.live { "since attach" } else { "over the run" },
        if f.live {
            ""
        } else {
            " (100% of the requested rate missing)"
        },
        match ipc {
            Some(0) => ", with no IPC message between its processes".to_string(),
            Some(n) => format!(", after {n} IPC messages between its processes"),
            None => String::new(),
        }
    );
    let waited = ipc.is_some().then(|| handshake_wait(f)).flatten();
    let next = if let Some(w) = waited {
        format!(
            "Its start-up handshake hung: {w}. Find why that member never answered: its own output, and \
             whether it started at all (a missing binary, privileges it could not get)."
        )
    } else if exited.iter().any(|p| p.exit_code.is_some_and(|c| c != 0)) {
        "A member exited with an error before sending: read the scanner's own output (stderr, its log) for why; \
         at start-up that is usually a socket it could not open, an IPC path it could not bind, or privileges it \
         could not get or drop. Run it again by hand with its verbose option."
            .to_string()
    } else {
        "It sent nothing while its processes ran: check its targets and options (an empty target list, a rate of 0, \
         a dry-run mode), and its own output."
            .to_string()
    };
    // What was seen is certain over a run; a tick may be the start-up.
    verdict(
        Cause::NeverSent,
        Kind::Gap,
        sentence,
        1.0 - f.achieved / r,
        evidence,
        next,
        f.live,
    )
}

/// Whether the profile has an IPC probe attached: only then is a count of messages (0 too) seen.
/// Which member waited for which, from the IPC the profile's probes decoded, for a family that
/// never sent: the members still running that sent messages (each with its last one) waited
/// for those still running that sent none. None without a timed message, or when every member
/// still running sent one (then nothing says who waited: the evidence lists the counts).
fn handshake_wait(f: &Facts) -> Option<String> {
    let v = f.scanner?;
    let last_sent = |pid: u32| {
        v.ipc
            .iter()
            .filter(|i| i.pid == pid && i.direction == IpcDirection::Send)
            .filter_map(|i| Some((i, i.last_s?)))
            .max_by(|a, b| a.1.total_cmp(&b.1))
    };
    let alive: Vec<&ProcessInfo> = f.processes.iter().filter(|p| p.alive).collect();
    let waiting: Vec<String> = alive
        .iter()
        .filter_map(|p| {
            let (m, at) = last_sent(p.pid)?;
            Some(format!(
                "{} (pid {}, its last message {} at {})",
                p.comm,
                p.pid,
                m.kind,
                secs(at)
            ))
        })
        .collect();
    let silent: Vec<String> = alive
        .iter()
        .filter(|p| last_sent(p.pid).is_none())
        .map(|p| format!("{} (pid {})", p.comm, p.pid))
        .collect();
    if waiting.is_empty() || silent.is_empty() {
        return None;
    }
    Some(format!(
        "{} waited for {}, which sent no message",
        waiting.join(" and "),
        silent.join(" and ")
    ))
}

fn watches_ipc(v: &crate::analysis::snapshot::ScannerView) -> bool {
    v.probes
        .iter()
        .any(|p| p.attached && matches!(p.role, ProbeRole::IpcSend | ProbeRole::IpcRecv))
}

fn ipc_messages(f: &Facts) -> u64 {
    f.scanner.map_or(0, |v| {
        v.ipc
            .iter()
            .filter(|i| i.direction == IpcDirection::Send)
            .map(|i| i.messages)
            .sum()
    })
}

/// (work units, idle before them in ms, set-up in ms), over all units.
fn unit_sums(f: &Facts) -> (usize, f64, f64) {
    let Some(v) = f.scanner else { return (0, 0.0, 0.0) };
    let idle = v.work_units.iter().filter_map(|u| u.idle_before_ms).sum();
    let setup = v.work_units.iter().filter_map(|u| u.setup_ms).sum();
    (v.work_units.len(), idle, setup)
}

fn blocked_text(f: &Facts, s: &Split) -> (String, Vec<String>, String) {
    // One line per wait site (a site can come with several stacks).
    let mut sites: Vec<(&str, f64, f64, u64)> = Vec::new();
    for b in f.block_sites {
        match sites.iter_mut().find(|x| x.0 == b.wait_site) {
            Some(x) => {
                x.1 += b.blocked_s;
                x.2 += b.share;
                x.3 += b.episodes;
            }
            None => sites.push((&b.wait_site, b.blocked_s, b.share, b.episodes)),
        }
    }
    sites.sort_by(|a, b| b.1.total_cmp(&a.1));
    let mut evidence = vec![format!(
        "blocked inside send syscalls {} of its time, {} per packet",
        pct(s.f_blocked),
        s.per_packet(s.f_blocked)
    )];
    for (site, blocked_s, share, episodes) in sites.iter().take(3) {
        evidence.push(format!(
            "{site}: {} blocked ({} of the blocked time, {episodes} episode(s))",
            secs(*blocked_s),
            pct(*share)
        ));
    }
    let deepest = f
        .devices
        .iter()
        .filter(|d| d.qlen_max.unwrap_or(0) > 0)
        .max_by_key(|d| d.qlen_max.unwrap_or(0));
    if let Some(d) = deepest {
        evidence.push(format!(
            "deepest qdisc queue on {}: {} packets, {} bytes",
            d.device,
            d.qlen_max.unwrap_or(0),
            d.backlog_max_bytes.unwrap_or(0)
        ));
    }
    // Packets parked while their next hop's address resolves still count against the socket's
    // send buffer: an unanswered resolution fills it as surely as a slow queue.
    let unresolved = f
        .devices
        .iter()
        .filter(|d| d.neigh_queued > 0 && d.neigh_failed + d.neigh_started > d.neigh_resolved)
        .max_by_key(|d| d.neigh_queued);
    if let Some(d) = unresolved {
        evidence.push(format!(
            "{}: {} packets queued waiting for address resolution, {} resolutions failed",
            d.device, d.neigh_queued, d.neigh_failed
        ));
    }
    let dev = deepest
        .or(unresolved)
        .or_else(|| f.devices.first())
        .map_or("DEV".to_string(), |d| d.device.clone());
    let site = sites.first().map(|b| b.0).unwrap_or("");
    let (what, mut next) = wait_site_meaning(site, &dev, f.requested.unwrap_or(0.0));
    if let Some(d) = unresolved.filter(|_| site.contains("sock_alloc_send") || site.contains("wmem")) {
        next = format!(
            "The buffer fills with packets waiting for their next hop's address on {}: check that it answers \
             (`ip neigh show dev {}`, `ip route get ADDR`); see the neighbour loss verdict.",
            d.device, d.device
        );
    }
    let sentence = if site.is_empty() {
        format!(
            "The sender blocks inside its send calls, {} per packet, and its pacing never makes that time up.",
            s.per_packet(s.f_blocked)
        )
    } else {
        format!(
            "The sender blocks inside its send calls, {} per packet, mostly in {site} ({what}); its pacing never makes that time up.",
            s.per_packet(s.f_blocked)
        )
    };
    (sentence, evidence, next)
}

/// What a kernel wait site inside a send means, and what to do about it.
fn wait_site_meaning(site: &str, dev: &str, r: f64) -> (String, String) {
    let has = |names: &[&str]| names.iter().any(|n| site.contains(n));
    if has(&[
        "sock_alloc_send",
        "sock_wait_for_wmem",
        "sk_stream_wait_memory",
        "wait_for_wmem",
    ]) {
        (
            "waiting for socket send-buffer space: the packets already sent sit in a queue below that drains slower than it sends".to_string(),
            format!(
                "Look at the queue the packets wait in: `tc -s qdisc show dev {dev}` and the link's speed; if that path \
                 is narrower than {}, request no more than it carries. A larger send buffer (SO_SNDBUF, sysctl \
                 net.core.wmem_max and net.core.wmem_default) only absorbs bursts.",
                pps(r)
            ),
        )
    } else if has(&["lock_sock", "__lock_sock"]) {
        (
            "waiting for the socket's lock, held by another thread".to_string(),
            "Give each sending thread a socket of its own.".to_string(),
        )
    } else if has(&["tpacket", "packet_snd", "wait_for_completion"]) {
        (
            "waiting for the packet socket's TX ring frames to be sent".to_string(),
            format!("Use a larger TX ring, and check the device's queue (`tc -s qdisc show dev {dev}`)."),
        )
    } else if has(&["mutex", "rtnl", "rwsem", "down_"]) {
        (
            "waiting for a kernel lock".to_string(),
            "Look at the block site's kernel stack to see which lock, and who else takes it.".to_string(),
        )
    } else if has(&["alloc_pages", "reclaim", "compact"]) {
        (
            "waiting for memory".to_string(),
            "Check the machine's free memory and reclaim activity (`vmstat 1`).".to_string(),
        )
    } else if site.is_empty() {
        (
            String::new(),
            "The block site table (kernel stacks) names what the send waits for; check that the sched probe's stacks are attached."
                .to_string(),
        )
    } else {
        (
            format!("waiting in {site}"),
            format!("Read the kernel stack of the `{site}` block site to see what the send waits for."),
        )
    }
}

/// The scanner's other pacing modes, in its own terms (`unicornscan: \`-d 2\` (gettimeofday
/// busy-wait)`), never the one in use; `waits` keeps only those that wait that way. None when
/// the profile names no pacers.
fn other_pacers(f: &Facts, waits: Option<PacerWait>) -> Option<String> {
    let v = f.scanner?;
    let in_use = v.pacer_in_use().map(|p| p.probe.as_str());
    let others: Vec<String> = v
        .pacers
        .iter()
        .filter(|p| Some(p.probe.as_str()) != in_use && waits.is_none_or(|w| p.waits == w))
        .map(|p| match &p.option {
            Some(o) => format!("`{o}` ({})", p.name),
            None => p.name.clone(),
        })
        .collect();
    (!others.is_empty()).then(|| format!("{}: {}", v.profile, others.join(" or ")))
}

/// The pacing mode in use, for evidence.
fn pacer_line(f: &Facts) -> Option<String> {
    let p = f.scanner?.pacer_in_use()?;
    Some(match &p.option {
        Some(o) => format!("pacer in use: {} (`{o}`)", p.name),
        None => format!("pacer in use: {}", p.name),
    })
}

/// `scanprof send` at this rate with its tsc pacer, to show what this machine does: unless the
/// run is that already, then `scanprof baseline`, which measures every pacer.
fn reference_comparison(f: &Facts, r: f64) -> String {
    if f.reference_pacer == Some(PacerKind::Tsc) {
        format!(
            "`scanprof baseline --rates {r:.0}` shows what this machine does at this rate with each pacer"
        )
    } else {
        format!("`scanprof send --rate {r:.0} --pacer tsc` shows what this machine does at this rate")
    }
}

fn calibration_next(f: &Facts, r: f64) -> String {
    if f.reference_pacer == Some(PacerKind::Tsc) {
        // The reference sender on its tsc pacer: not "use the tsc pacer", but where its
        // frequency comes from, or a pacer that reads the clock.
        return format!(
            "Check the calibration against the kernel's TSC frequency (`dmesg | grep -i tsc`): take the kernel's \
             frequency instead of calibrating (`scanprof send --rate {r:.0} --pacer tsc --tsc-source kernel`), or \
             pace by reading the clock (`--pacer clock`)."
        );
    }
    let mut next = match other_pacers(f, None) {
        Some(others) => format!(
            "Check the scanner's clock calibration (the slot it derived against the one the rate needs; \
             `dmesg | grep -i tsc` for a TSC), or pace another way ({others})"
        ),
        None => "Check the scanner's clock calibration against the kernel's TSC frequency (`dmesg | grep -i tsc`), \
                 or use a pacer that reads a clock rather than a calibrated count"
            .to_string(),
    };
    next.push_str(&format!(
        "; `scanprof send --rate {r:.0} --pacer tsc --tsc-source kernel` paces with the kernel's frequency for comparison."
    ));
    next
}

fn pacing_next(f: &Facts, r: f64, sleeps: bool) -> String {
    let mut next = if sleeps {
        "Pace with a finer wait: a busy-wait pacer, or sleeps to absolute deadlines (clock_nanosleep with \
         TIMER_ABSTIME) that make late wake-ups up"
            .to_string()
    } else {
        "Pace to absolute deadlines so that a late slot is caught up, rather than one slot after the last packet"
            .to_string()
    };
    if let Some(others) = other_pacers(f, Some(PacerWait::Spin)).filter(|_| sleeps) {
        next.push_str(&format!(" ({others}, instead of sleeping)"));
    }
    next.push_str(&format!(
        "; `scanprof send --rate {r:.0} --pacer sleep --slot per-packet` reproduces the effect, `--slot deadline` removes it."
    ));
    next
}

/// What a pacing excess looks like, for its sentence.
enum PacingPattern {
    /// Most gaps are far shorter than the slot (median gap, ns): bursts, then long waits.
    Batching(f64),
    /// The waits are on time but start after each packet's work (work per packet, ns): the
    /// period is timed from the end of the work, so the work adds to it.
    WorkOnTop(f64),
    /// The waits themselves end late (a sleep's wake-up latency, timer granularity).
    LateWakeUps,
}

impl Split {
    /// Which pattern the gap histogram and the time budget show. Batching: the median gap under
    /// half the slot. Work on top: a sleeping pacer whose work per packet (on CPU outside its
    /// pacing loop) is at least half the excess per gap, with wake-ups not late by more than
    /// the work. Else the wake-ups are late.
    fn pacing_pattern(&self, f: &Facts, sleeps: bool) -> PacingPattern {
        if let Some(p50) = f.gap.p50_ns.filter(|p| *p < 0.5 * self.expected_gap_ns) {
            return PacingPattern::Batching(p50);
        }
        let work = (self.f_send + self.f_other - self.f_spin.unwrap_or(0.0)).max(0.0);
        let work_ns = work * self.thread_ns / self.attempts.max(1) as f64;
        let wakeup_ns = self.f_wakeup * self.thread_ns / self.attempts.max(1) as f64;
        let excess_ns = self.mean_gap_ns.map(|m| m - self.expected_gap_ns);
        match excess_ns {
            Some(e) if sleeps && e > 0.0 && work_ns >= 0.5 * e && wakeup_ns < work_ns => {
                PacingPattern::WorkOnTop(work_ns)
            }
            _ => PacingPattern::LateWakeUps,
        }
    }
}
