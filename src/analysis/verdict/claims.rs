//! What the scanner says about itself against what was measured: failed sends it may count as
//! sent, and its own figures (claims) that disagree with scanprof's.

use super::facts::{caveat_lines, Facts};
use super::judgement::Judgement;
use super::loss::{qdisc_kind, queue_advice};
use super::units::{pps, signed_pct};
use super::{verdict, Cause, Kind, Verdict, CLAIM_TOLERANCE_PCT, MIN_DROPS, MIN_SHARE, WEAK_SHARE};
use crate::analysis::snapshot::ClaimView;
use crate::collect::DropClass;
use crate::units::whole_or_tenths;

/// Failed sends: the sentence, evidence and next step, for the gap or the loss verdict.
pub(super) fn send_errors_text(f: &Facts) -> (String, Vec<String>, String) {
    let mut errors: Vec<(&String, &u64)> = f.errors.iter().collect();
    errors.sort_by(|a, b| b.1.cmp(a.1));
    let names: Vec<String> = errors.iter().take(3).map(|(k, v)| format!("{k} x{v}")).collect();
    let counted = counted_as_sent(f);
    let top = errors.first().map_or("", |(k, _)| k.as_str());
    let sentence = format!(
        "{} send calls failed {} ({}): those packets never left{}.",
        f.failed_calls,
        f.over(),
        if names.is_empty() {
            "errno unknown".to_string()
        } else {
            names.join(", ")
        },
        if counted.is_some() {
            ", yet the scanner counts them as sent"
        } else if retried(top) {
            " unless the scanner sends them again"
        } else {
            ""
        }
    );
    let mut evidence = vec![format!(
        "{} of {} send calls failed {}",
        f.failed_calls,
        f.calls,
        f.over()
    )];
    evidence.extend(counted);
    let enobufs = f.errors.get("ENOBUFS").copied().unwrap_or(0);
    let qdisc_drops: u64 = f
        .drops
        .iter()
        .filter(|d| d.row.class == DropClass::TargetLoss && d.row.reason.starts_with("QDISC"))
        .map(|d| d.count)
        .sum();
    if enobufs > 0 && qdisc_drops > 0 {
        evidence.push(format!(
            "{qdisc_drops} qdisc drops at the same time: ENOBUFS is the qdisc refusing the packet"
        ));
    }
    // The device of the largest qdisc drop (the queue that refused), else the first one.
    let qdisc_row = f
        .drops
        .iter()
        .filter(|d| d.row.class == DropClass::TargetLoss && d.row.reason.starts_with("QDISC"))
        .max_by_key(|d| d.count)
        .map(|d| d.row);
    let (dev, kind) = match qdisc_row.and_then(|r| r.device.as_deref().map(|d| (d, r.netns))) {
        Some((d, netns)) => (d, qdisc_kind(f, Some(d), netns)),
        None => match f.devices.first() {
            Some(d) => (d.device.as_str(), d.qdisc.as_deref()),
            None => ("DEV", None),
        },
    };
    let next = match top {
        "ENOBUFS" => format!(
            "The device's queue refused the packets (ENOBUFS). {} A scanner should count a failed send as not sent.",
            queue_advice(dev, kind, "")
        ),
        "EAGAIN" | "EWOULDBLOCK" => "The non-blocking socket's send buffer is full: the scanner should wait for \
                                     POLLOUT, or use a larger SO_SNDBUF (sysctl net.core.wmem_max)."
            .to_string(),
        "EPERM" | "EACCES" => "A firewall rule rejects the packets: `nft list ruleset`, `iptables -S OUTPUT`.".to_string(),
        "EMSGSIZE" => format!("The packets are larger than the path's MTU: `ip link show dev {dev}`."),
        "ENETUNREACH" | "EHOSTUNREACH" => "No route to the targets: `ip route get ADDR`.".to_string(),
        _ => "Look the errno up in the send syscall's manual page (`man 2 sendto`).".to_string(),
    };
    (sentence, evidence, next)
}

/// Errors a sender commonly retries: the packet may have left on a later call.
pub(super) fn retried(errno: &str) -> bool {
    matches!(errno, "EAGAIN" | "EWOULDBLOCK" | "EINTR")
}

/// The most frequent errno of the failed sends.
pub(super) fn top_errno<'f>(f: &'f Facts) -> &'f str {
    f.errors
        .iter()
        .max_by_key(|(_, n)| **n)
        .map_or("", |(k, _)| k.as_str())
}

/// Evidence that the scanner's own counters include its failed sends.
fn counted_as_sent(f: &Facts) -> Option<String> {
    if f.failed_calls == 0 || f.packets == 0 {
        return None;
    }
    let failed_pct = f.failed_calls as f64 / f.packets as f64 * 100.0;
    f.scanner?.claims.iter().find_map(|c| {
        let diff = c.diff_pct?;
        (diff >= 0.5 * failed_pct).then(|| {
            format!(
                "{}: {} claimed against {} measured ({}), about what the failed sends add ({})",
                c.what,
                whole_or_tenths(c.claimed),
                c.measured.map_or("?".to_string(), whole_or_tenths),
                signed_pct(diff),
                signed_pct(failed_pct)
            )
        })
    })
}

/// Sends a full conntrack table refused when there is no gap to charge them to: that table's
/// loss.
pub(super) fn conntrack_refused_as_loss(f: &Facts) -> Option<Verdict> {
    if f.failed_calls == 0 {
        return None;
    }
    let (refused, table) = super::limits::conntrack_refused(f)?;
    let (sentence, evidence, next) =
        super::limits::conntrack_text(f, table, refused, super::limits::netfilter_drops(f));
    let share = super::loss_share(refused, f.packets + f.failed_calls);
    let weak = refused < MIN_DROPS || f.thin() || share < WEAK_SHARE;
    Some(verdict(
        Cause::ConntrackFull,
        Kind::Loss,
        sentence,
        share,
        evidence,
        next,
        weak,
    ))
}

/// Failed sends when there is no gap to charge them to: packets the scanner meant to send that
/// never left, as a loss (unless a full conntrack table refused them: its loss).
pub(super) fn send_errors_as_loss(f: &Facts) -> Option<Verdict> {
    if f.failed_calls == 0 || super::limits::conntrack_refused(f).is_some() {
        return None;
    }
    let share = super::loss_share(f.failed_calls, f.packets + f.failed_calls);
    let (sentence, mut evidence, next) = send_errors_text(f);
    caveat_lines(f, &mut evidence);
    let weak = f.failed_calls < MIN_DROPS || f.thin() || share < WEAK_SHARE || retried(top_errno(f));
    (share >= MIN_SHARE || f.failed_calls >= MIN_DROPS).then(|| {
        verdict(
            Cause::SendErrors,
            Kind::Loss,
            sentence,
            share,
            evidence,
            next,
            weak,
        )
    })
}

/// Two spans whose ends are within this share of their length are one window (a unit's send
/// window starts as its set-up returns, the family's at its first packet just after).
const SAME_WINDOW: f64 = 0.02;

/// The span of a claim, for a sentence: ` over work unit 1's send window (0.15-2.43 s)`, or
/// nothing when the claim does not say (a bundle written before claims carried it).
fn over_window(c: &ClaimView) -> String {
    c.window.map_or(String::new(), |w| format!(" over {}", w.label()))
}

/// The scanner's own figures against scanprof's: one verdict naming those that differ by more
/// than the tolerance, and rate claims above what left the machine. Each claim is set beside a
/// measurement over its own window: its `measured` figure is; the devices' count covers the
/// interval only, so a claim about another span (one work unit of several, in the run or in a
/// tick) is not compared with it, and the verdict says so.
pub(super) fn claim_mismatch(j: &Judgement) -> Option<Verdict> {
    let f = j.f;
    let v = f.scanner?;
    let off = |c: &&ClaimView| c.diff_pct.is_some_and(|d| d.abs() > CLAIM_TOLERANCE_PCT);
    let mut differing: Vec<&ClaimView> = v.claims.iter().filter(off).collect();
    differing.sort_by(|a, b| {
        b.diff_pct
            .unwrap_or(0.0)
            .abs()
            .total_cmp(&a.diff_pct.unwrap_or(0.0).abs())
    });
    let left = f.left_pps;
    // The interval's span the devices' count covers; a claim with no window of its own (a bundle
    // written before claims carried one) is taken as the interval's, as it was then.
    let same_window = |c: &&ClaimView| match (c.window, f.span_s) {
        (None, _) => true,
        (Some(w), Some((from_s, to_s))) => w.same_span(from_s, to_s, SAME_WINDOW),
        (Some(_), None) => false,
    };
    let above: Vec<&ClaimView> = v
        .claims
        .iter()
        // A rate claim (bundles written before claims carried their figure: by its name).
        .filter(|c| match c.figure {
            Some(f) => f == crate::wrappers::StatusFigure::Rate,
            None => c.what.contains("pps"),
        })
        .filter(|c| left.is_some_and(|l| c.claimed > l * (1.0 + CLAIM_TOLERANCE_PCT / 100.0)))
        .collect();
    let (above_left, other_window): (Vec<&ClaimView>, Vec<&ClaimView>) =
        above.into_iter().partition(same_window);
    if differing.is_empty() && above_left.is_empty() {
        return None;
    }
    let sentence = match differing.first() {
        Some(c) => format!(
            "The scanner's own figures disagree with the measurement: {} says {}, scanprof measured {}{} ({}).",
            c.what,
            whole_or_tenths(c.claimed),
            c.measured.map_or("?".to_string(), whole_or_tenths),
            over_window(c),
            signed_pct(c.diff_pct.unwrap_or(0.0))
        ),
        None => format!(
            "The scanner's own rate is more than what left the machine: {} says {}, but {} left through the devices {}.",
            above_left[0].what,
            pps(above_left[0].claimed),
            pps(left.unwrap_or(0.0)),
            above_left[0]
                .window
                .map_or(f.over().to_string(), |w| format!("over the same span, {}", w.label()))
        ),
    };
    let mut evidence: Vec<String> = differing
        .iter()
        .take(5)
        .map(|c| {
            format!(
                "{}: claimed {}, measured {}{} ({})",
                c.what,
                whole_or_tenths(c.claimed),
                c.measured.map_or("?".to_string(), whole_or_tenths),
                over_window(c),
                signed_pct(c.diff_pct.unwrap_or(0.0))
            )
        })
        .collect();
    if let (Some(l), Some(c)) = (left, above_left.first()) {
        evidence.push(format!(
            "{} left the machine (driver accepted) {}, against {} claimed ({})",
            pps(l),
            f.over(),
            pps(c.claimed),
            signed_pct((c.claimed / l - 1.0) * 100.0)
        ));
    }
    for c in other_window.iter().take(3) {
        let interval = f
            .span_s
            .map_or(String::new(), |(a, b)| format!(" ({a:.2}-{b:.2} s)"));
        evidence.push(format!(
            "{}: {} pps{}, not compared with what left through the devices: they are counted {}{} only",
            c.what,
            whole_or_tenths(c.claimed),
            over_window(c),
            f.over(),
            interval
        ));
    }
    if f.failed_calls > 0 {
        evidence.push(format!("{} send calls failed {}", f.failed_calls, f.over()));
    }
    caveat_lines(f, &mut evidence);
    Some(verdict(
        Cause::ClaimMismatch,
        Kind::Gap,
        sentence,
        0.0,
        evidence,
        "Trust the measured figure, counted at the send syscalls and the devices: the scanner's own counter is \
         taken elsewhere (before failed sends, before a qdisc drops packets, or from its schedule); `ip -s link` \
         gives an independent count."
            .to_string(),
        f.thin(),
    ))
}
