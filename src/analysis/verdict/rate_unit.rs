//! The rate set for the wrong unit: a scanner whose rate counts targets while each target gets
//! N packets (zmap's `-r` with `-P N`: the packet rate is N x the rate), or counts packets while
//! each target gets N of them (unicornscan's `repeats`: targets are covered at the rate / N).
//! With the multiplier from the profile (`scanner.requested.unit`), the rate is shown per target
//! beside the packet rate; a `--requested` off from the scanner's packet rate by exactly N was
//! given in the other unit, and the run is judged against the scanner's packet rate instead.

use super::facts::{caveat_lines, Facts};
use super::judgement::Judgement;
use super::units::{pct, pps};
use super::{verdict, Cause, Kind, Verdict, NO_GAP_TOLERANCE};
use crate::analysis::snapshot::{RateCounts, RateUnitView};

/// Packet rates this close (a share of the larger) are the same rate.
const SAME: f64 = NO_GAP_TOLERANCE;

fn same(a: f64, b: f64) -> bool {
    (a - b).abs() <= SAME * a.abs().max(b.abs())
}

/// The scanner's rate in its own unit, when the profile knows a multiplier above 1.
fn unit<'a>(f: &Facts<'a>) -> Option<&'a RateUnitView> {
    f.requested_view?
        .unit
        .as_ref()
        .filter(|u| u.packets_per_target > 1.0 && u.packet_pps > 0.0)
}

/// The packet rate the scanner's own settings ask for, when the rate compared with (`r`,
/// `--requested`) is off from it by the multiplier either way: `r` was given in the other unit.
pub(super) fn mismatch(f: &Facts, r: f64) -> Option<f64> {
    let u = unit(f)?;
    let (p, n) = (u.packet_pps, u.packets_per_target);
    if same(r, p) {
        return None;
    }
    (same(r * n, p) || same(r, p * n)).then_some(p)
}

/// "zmap's rate counts targets: each target gets 4 packets (argv: -P 4)".
fn counts_text(f: &Facts, u: &RateUnitView) -> String {
    let who = f.scanner.map_or("the scanner", |v| v.profile.as_str());
    match u.counts {
        RateCounts::Targets => format!(
            "{who}'s rate counts targets, not packets: each target gets {} packets ({})",
            u.packets_per_target, u.source
        ),
        RateCounts::Packets => format!(
            "{who}'s rate counts packets, not targets: each target gets {} of them ({})",
            u.packets_per_target, u.source
        ),
    }
}

/// The figures of both units: asked and achieved, in packets and targets per second.
fn figures(f: &Facts, u: &RateUnitView) -> Vec<String> {
    let n = u.packets_per_target;
    vec![
        format!(
            "the scanner's settings: {} targets/s x {n} packets per target = {} ({})",
            fmt(u.target_pps),
            pps(u.packet_pps),
            u.source
        ),
        format!(
            "achieved {} {} = {} targets/s ({} of the {} targets/s asked)",
            pps(f.achieved),
            f.over(),
            fmt(f.achieved / n),
            pct(f.achieved / u.packet_pps),
            fmt(u.target_pps)
        ),
    ]
}

fn fmt(v: f64) -> String {
    if (v - v.round()).abs() < 0.05 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// The run judged against the scanner's own packet rate `p`, with `r` given in the other unit:
/// the gap verdicts' shares become parts of `r` (times p / r when p is below it), and
/// `rate_unit` takes the rest of the gap, 1 - p / r (0 when p is above r: nothing is missing).
pub(super) fn rejudged(f: &Facts, r: f64, p: f64, mut out: Vec<Verdict>) -> Vec<Verdict> {
    let Some(u) = unit(f) else { return out };
    // Judged against p, the run's own finding about the unit is this verdict's to make.
    out.retain(|v| v.cause != Cause::RateUnit);
    let k = (p / r).min(1.0);
    for v in out.iter_mut().filter(|v| v.kind == Kind::Gap) {
        v.share *= k;
    }
    let share = (1.0 - p / r).max(0.0);
    let n = u.packets_per_target;
    let wrong_way = if r > p {
        format!(
            "the {} pps asked of scanprof are {n}x the scanner's packet rate: its {} targets/s are {} at {n} \
             packets each",
            fmt(r),
            fmt(u.target_pps),
            pps(p)
        )
    } else {
        format!(
            "the {} pps asked of scanprof are the scanner's target rate, and its packet rate is {n}x that: {}",
            fmt(r),
            pps(p)
        )
    };
    let sentence = format!(
        "The rate was set for the wrong unit: {}, so {wrong_way}; judged against {}, it sent {}.",
        counts_text(f, u),
        pps(p),
        pps(f.achieved)
    );
    let mut evidence = vec![format!(
        "requested {} (--requested), the scanner's settings ask for {} packets: {}x apart",
        pps(r),
        pps(p),
        if r > p { r / p } else { p / r }
    )];
    evidence.extend(figures(f, u));
    if share > 0.0 {
        evidence.push(format!(
            "costs {} of the requested rate: the packets the scanner was never asked for",
            pct(share)
        ));
    }
    caveat_lines(f, &mut evidence);
    let next = format!(
        "Compare in one unit: pass `--requested {:.0}` (packets per second), or, to send {} packets per second, \
         ask the scanner for {} targets/s at {n} packets per target.",
        p,
        fmt(r),
        fmt(r / n)
    );
    out.push(verdict(
        Cause::RateUnit,
        Kind::Gap,
        sentence,
        share,
        evidence,
        next,
        f.thin(),
    ));
    out
}

/// The rate per target beside the packet rate (share 0), whenever a rate was requested; when the
/// request was in the other unit, `rejudged` writes this cause instead.
pub(super) fn rate_unit(j: &Judgement) -> Option<Verdict> {
    finding(j.f, j.case.requested()?)
}

/// Without a mismatch: the rate per target beside the packet rate (share 0), for a rate that
/// counts targets (its packet rate is N times the figure asked). A rate that counts packets
/// already is the packet rate the run is judged by: a repeat count (unicornscan's `repeats`)
/// beside an explicit per-packet rate misleads nobody, and says nothing.
fn finding(f: &Facts, r: f64) -> Option<Verdict> {
    let u = unit(f).filter(|u| u.counts == RateCounts::Targets)?;
    if !same(r, u.packet_pps) {
        return None;
    }
    let n = u.packets_per_target;
    let sentence = match u.counts {
        RateCounts::Targets => format!(
            "{}, so the {} targets/s asked are {} of packets; it sent {}, {} targets/s.",
            counts_text(f, u),
            fmt(u.target_pps),
            pps(u.packet_pps),
            pps(f.achieved),
            fmt(f.achieved / n)
        ),
        RateCounts::Packets => format!(
            "{}, so {} covers {} targets/s; it sent {}, {} targets/s.",
            counts_text(f, u),
            pps(u.packet_pps),
            fmt(u.target_pps),
            pps(f.achieved),
            fmt(f.achieved / n)
        ),
    };
    let mut evidence = figures(f, u);
    caveat_lines(f, &mut evidence);
    let next = match u.counts {
        RateCounts::Targets => format!(
            "To send {} packets per second, ask for {} targets/s; the link must carry {n}x the target rate.",
            pps(u.packet_pps),
            fmt(u.target_pps)
        ),
        RateCounts::Packets => format!(
            "To cover {} targets per second with {n} packets each, ask for {}.",
            fmt(u.packet_pps),
            pps(u.packet_pps * n)
        ),
    };
    Some(verdict(
        Cause::RateUnit,
        Kind::Gap,
        sentence,
        0.0,
        evidence,
        next,
        f.thin(),
    ))
}
