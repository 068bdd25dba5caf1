//! The SVG plots of a trace bundle, drawn by hand from the `Recording` (no plotting crate): the
//! funnel's rates tick by tick against the requested rate, with the blocked episodes and the
//! ticks that lost packets marked, and the CDF of the inter-send gaps, by count and by the time
//! they took, against the requested slot. Each is a self-contained SVG 1.1 document that report.md links
//! and any browser opens. Pure: no clock, no I/O.

use std::fmt::Write as _;

use super::Recording;
use crate::analysis::StageName;
use crate::units::{plain, si};

/// Canvas size, px.
const WIDTH: f64 = 880.0;
const HEIGHT: f64 = 450.0;
/// The plot area inside the canvas, px (the legend sits right of it).
const PLOT_LEFT: f64 = 80.0;
const PLOT_RIGHT: f64 = 600.0;
const PLOT_TOP: f64 = 40.0;
const PLOT_BOTTOM: f64 = 390.0;
const LEGEND_X: f64 = 615.0;
/// Width of a legend label's character at the 12 px font, px (a generous average for sans-serif
/// text: the longest label must end inside the canvas).
const LEGEND_CHAR_PX: f64 = 7.0;
/// Longest legend label that fits, characters.
const LEGEND_MAX_CHARS: usize = ((WIDTH - LEGEND_X - 30.0 - 8.0) / LEGEND_CHAR_PX) as usize;

/// The series of the rates plot: (element id, legend label, stage name, colour).
const RATE_SERIES: [(&str, &str, StageName, &str); 3] = [
    (
        "achieved",
        "achieved (syscall_packets)",
        StageName::SyscallPackets,
        "#1f77b4",
    ),
    (
        "dev_xmit",
        "dev_xmit (driver accepted)",
        StageName::DevXmit,
        "#2ca02c",
    ),
    ("target_drops", "target_drops", StageName::TargetDrops, "#d62728"),
];
const REQUESTED_COLOUR: &str = "#555555";
/// Shading of the time a sender thread was blocked inside a send call.
const BLOCKED_COLOUR: &str = "#ff7f0e";
/// Band over the ticks that lost packets.
const LOSS_COLOUR: &str = "#d62728";
/// Height of that band at the top of the plot area, px.
const LOSS_BAND_PX: f64 = 8.0;
/// Shading of the ticks whose rate is not judged: before the first send, the partial last
/// sending tick, a wait for late replies, the end.
const NOT_SENDING_COLOUR: &str = "#999999";

/// How a legend entry is drawn.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Key {
    Line,
    Dashed,
    /// a filled box, for shaded stretches of time
    Area,
}

/// Rate over time of the family's packets through the send syscalls (achieved), the driver
/// (dev_xmit) and the target's drops, one point per tick at the middle of the tick, with the
/// requested rate as a dashed line. Only whole ticks of sending are points (`judges_rate`):
/// the ticks before the first send, after the last (a scanner's wait for late replies) and the
/// partial last sending tick are shaded instead, so that they never draw a collapse of the rate.
/// A recording without ticks gives the empty frame with a "no data" note.
pub fn rates_svg(rec: &Recording) -> String {
    let mut svg = Svg::new("Packets per second over the run");
    let requested = rec
        .summary
        .as_ref()
        .and_then(|s| s.requested_pps)
        .or_else(|| rec.ticks.iter().find_map(|t| t.requested_pps))
        .filter(|r| r.is_finite() && *r > 0.0);
    if rec.ticks.is_empty() {
        let x = Axis::linear(0.0, 1.0, PLOT_LEFT, PLOT_RIGHT);
        let y = Axis::linear(0.0, 1.0, PLOT_BOTTOM, PLOT_TOP);
        svg.axes(&x, &y, "seconds since attach", "packets per second", si);
        svg.note("no data: the recording has no ticks");
        return svg.finish();
    }
    let series: Vec<Vec<(f64, f64)>> = RATE_SERIES
        .iter()
        .map(|(_, _, stage, _)| {
            rec.ticks
                .iter()
                .filter(|t| t.judges_rate())
                .map(|t| {
                    let pps = t.stages.iter().find(|s| s.name == *stage).map_or(0.0, |s| s.pps);
                    ((t.t_s - t.interval_s / 2.0).max(0.0), finite_or_zero(pps))
                })
                .collect()
        })
        .collect();
    let t_max = rec.ticks.iter().map(|t| t.t_s).fold(0.0, f64::max);
    let y_max = series
        .iter()
        .flatten()
        .map(|p| p.1)
        .chain(requested)
        .fold(0.0, f64::max);
    let x = Axis::linear(0.0, t_max, PLOT_LEFT, PLOT_RIGHT);
    let y = Axis::linear(0.0, y_max * 1.05, PLOT_BOTTOM, PLOT_TOP);
    svg.axes(&x, &y, "seconds since attach", "packets per second", si);
    if let Some(r) = requested {
        let py = y.px(r);
        let _ = writeln!(
            svg.body,
            r#"<line id="requested" x1="{PLOT_LEFT:.1}" y1="{py:.1}" x2="{PLOT_RIGHT:.1}" y2="{py:.1}" stroke="{REQUESTED_COLOUR}" stroke-width="1.5" stroke-dasharray="6,4"/>"#
        );
    }
    let blocked = blocked_spans(rec, &x);
    svg.spans("blocked", BLOCKED_COLOUR, 0.25, PLOT_TOP, PLOT_BOTTOM, &blocked);
    let idle = not_sending_spans(rec, &x);
    svg.spans(
        "not_sending",
        NOT_SENDING_COLOUR,
        0.2,
        PLOT_TOP,
        PLOT_BOTTOM,
        &idle,
    );
    let losses = loss_spans(rec, &x);
    svg.spans(
        "lost",
        LOSS_COLOUR,
        0.8,
        PLOT_TOP,
        PLOT_TOP + LOSS_BAND_PX,
        &losses,
    );
    for ((id, _, _, colour), points) in RATE_SERIES.iter().zip(&series) {
        svg.polyline(id, colour, points.iter().map(|(t, v)| (x.px(*t), y.px(*v))));
    }
    let mut legend: Vec<(String, &str, Key)> = RATE_SERIES
        .iter()
        .map(|(_, label, _, colour)| (label.to_string(), *colour, Key::Line))
        .collect();
    if let Some(r) = requested {
        legend.push((
            format!("requested ({} pps)", si(r)),
            REQUESTED_COLOUR,
            Key::Dashed,
        ));
    }
    if !blocked.is_empty() {
        let n: usize = blocked.iter().map(|s| s.count).sum();
        legend.push((format!("blocked in send ({n} ep.)"), BLOCKED_COLOUR, Key::Area));
    }
    if !losses.is_empty() {
        legend.push(("ticks that lost packets".into(), LOSS_COLOUR, Key::Area));
    }
    if !idle.is_empty() {
        legend.push(("not sending or partial".into(), NOT_SENDING_COLOUR, Key::Area));
    }
    svg.legend(&legend);
    if series[0].is_empty() {
        svg.note("no whole tick of sending");
    }
    svg.finish()
}

/// A stretch of the time axis to shade, px, with what it holds.
#[derive(Debug, Clone, PartialEq)]
struct Span {
    x0: f64,
    x1: f64,
    /// episodes or ticks merged into it
    count: usize,
    /// tooltip text
    title: String,
}

/// The blocked-in-send episodes of every tick (at least 1 ms each) as shaded stretches, merged
/// where they touch on the canvas (thousands of short episodes would be thousands of boxes),
/// each at least a pixel wide so that a short one stays visible.
fn blocked_spans(rec: &Recording, x: &Axis) -> Vec<Span> {
    let mut eps: Vec<(f64, f64, &str)> = rec
        .ticks
        .iter()
        .flat_map(|t| &t.episodes)
        .filter(|e| e.start_s.is_finite())
        .map(|e| {
            (
                e.start_s,
                e.start_s + e.duration_ns as f64 / 1e9,
                e.wait_site.as_str(),
            )
        })
        .collect();
    eps.sort_by(|a, b| a.0.total_cmp(&b.0));
    /// Episodes merged so far into one stretch.
    struct Merged<'a> {
        x0: f64,
        x1: f64,
        count: usize,
        blocked_s: f64,
        sites: Vec<&'a str>,
    }
    let mut spans: Vec<Merged> = Vec::new();
    for (t0, t1, site) in eps {
        let (x0, x1) = (x.px(t0), x.px(t1).max(x.px(t0) + 1.0));
        match spans.last_mut() {
            Some(last) if x0 <= last.x1 + 0.5 => {
                last.x1 = last.x1.max(x1);
                last.count += 1;
                last.blocked_s += t1 - t0;
                if !last.sites.contains(&site) {
                    last.sites.push(site);
                }
            }
            _ => spans.push(Merged {
                x0,
                x1,
                count: 1,
                blocked_s: t1 - t0,
                sites: vec![site],
            }),
        }
    }
    spans
        .into_iter()
        .map(|m| Span {
            x0: m.x0,
            x1: m.x1,
            count: m.count,
            title: format!(
                "blocked in send: {} episode{}, {} s in all, at {}",
                m.count,
                if m.count == 1 { "" } else { "s" },
                plain(m.blocked_s),
                m.sites.join(", ")
            ),
        })
        .collect()
}

/// The ticks whose rate is not judged (not a whole tick of sending), consecutive ones merged,
/// each titled with the phases it holds.
fn not_sending_spans(rec: &Recording, x: &Axis) -> Vec<Span> {
    let mut spans: Vec<(f64, f64, Vec<String>)> = Vec::new();
    let mut count = Vec::new();
    for t in rec.ticks.iter().filter(|t| !t.judges_rate()) {
        let (t0, t1) = ((t.t_s - t.interval_s).max(0.0), t.t_s);
        let what = if t.partial {
            "partial".to_string()
        } else {
            t.phase.to_string()
        };
        match spans.last_mut() {
            Some(last) if (t0 - last.1).abs() < 1e-6 => {
                last.1 = t1;
                if !last.2.contains(&what) {
                    last.2.push(what);
                }
                *count.last_mut().expect("one count per span") += 1;
            }
            _ => {
                spans.push((t0, t1, vec![what]));
                count.push(1);
            }
        }
    }
    spans
        .into_iter()
        .zip(count)
        .map(|((t0, t1, phases), count)| Span {
            x0: x.px(t0),
            x1: x.px(t1).max(x.px(t0) + 1.0),
            count,
            title: format!(
                "{} from {} s to {} s: no rate drawn",
                phases.join(", "),
                plain(t0),
                plain(t1)
            ),
        })
        .collect()
}

/// The ticks in which the family's packets were lost (target_drops), consecutive ones merged,
/// as a band along the top of the plot: a loss too small to see on the rate axis still shows.
fn loss_spans(rec: &Recording, x: &Axis) -> Vec<Span> {
    let mut spans: Vec<(f64, f64, usize, f64, f64, f64)> = Vec::new();
    for t in &rec.ticks {
        let lost = t
            .stages
            .iter()
            .find(|s| s.name == StageName::TargetDrops)
            .map_or(0.0, |s| finite_or_zero(s.pps) * t.interval_s);
        if lost < 0.5 {
            continue;
        }
        let (t0, t1) = ((t.t_s - t.interval_s).max(0.0), t.t_s);
        match spans.last_mut() {
            Some(last) if (t0 - last.4).abs() < 1e-6 => {
                last.1 = x.px(t1);
                last.2 += 1;
                last.4 = t1;
                last.5 += lost;
            }
            _ => spans.push((x.px(t0), x.px(t1).max(x.px(t0) + 1.0), 1, t0, t1, lost)),
        }
    }
    spans
        .into_iter()
        .map(|(x0, x1, count, t0, t1, lost)| Span {
            x0,
            x1,
            count,
            title: format!(
                "{} packets lost from {} s to {} s",
                lost.round(),
                plain(t0),
                plain(t1)
            ),
        })
        .collect()
}

/// Cumulative distribution of the gaps between consecutive sends of a thread, from the
/// Summary's gap histogram (uniform within each bucket), x in microseconds on a log scale when
/// the range spans more than two decades, with the requested slot as a vertical line. None when
/// the recording has no summary or no gaps.
pub fn gap_cdf_svg(rec: &Recording) -> Option<String> {
    let gap = &rec.summary.as_ref()?.gap;
    let mut buckets: Vec<(u64, u64, u64)> = gap
        .histogram
        .iter()
        .copied()
        .filter(|b| b.2 > 0 && b.1 >= b.0)
        .collect();
    buckets.sort_unstable();
    let total: u64 = buckets.iter().map(|b| b.2).sum();
    if total == 0 {
        return None;
    }
    let us = |ns: u64| ns as f64 / 1e3;
    let slot_us = gap.slot_ns.filter(|s| s.is_finite() && *s > 0.0).map(|s| s / 1e3);
    // Each gap's length, from its bucket's middle: a few long stalls hold most of the time
    // though they are a sliver of the gaps.
    let time = |b: &(u64, u64, u64)| b.2 as f64 * (b.0 as f64 + b.1 as f64) / 2.0;
    let total_time: f64 = buckets.iter().map(time).sum::<f64>().max(f64::MIN_POSITIVE);
    // The CDFs as points: 0 at the first bucket's low edge, then each bucket's high edge at the
    // fraction of gaps (of their time) up to it; flat across empty stretches between buckets.
    let mut points: Vec<(f64, f64)> = vec![(us(buckets[0].0), 0.0)];
    let mut time_points: Vec<(f64, f64)> = vec![(us(buckets[0].0), 0.0)];
    let (mut seen, mut seen_time) = (0u64, 0.0);
    let mut prev_high = buckets[0].0;
    for b in &buckets {
        let (low, high, count) = b;
        if *low > prev_high {
            points.push((us(*low), seen as f64 / total as f64));
            time_points.push((us(*low), seen_time / total_time));
        }
        seen += count;
        seen_time += time(b);
        points.push((us(*high), seen as f64 / total as f64));
        time_points.push((us(*high), (seen_time / total_time).min(1.0)));
        prev_high = *high;
    }
    let lo = points
        .iter()
        .map(|p| p.0)
        .chain(slot_us)
        .fold(f64::INFINITY, f64::min);
    let hi = points.iter().map(|p| p.0).chain(slot_us).fold(0.0, f64::max);
    let smallest_positive = points
        .iter()
        .map(|p| p.0)
        .chain(slot_us)
        .filter(|v| *v > 0.0)
        .fold(f64::INFINITY, f64::min);
    let x = if smallest_positive.is_finite() && hi / smallest_positive > 100.0 {
        Axis::log(smallest_positive, hi, PLOT_LEFT, PLOT_RIGHT)
    } else {
        Axis::linear(lo, hi.max(lo + 1e-3), PLOT_LEFT, PLOT_RIGHT)
    };
    let y = Axis::fixed(0.0, 1.0, 0.25, PLOT_BOTTOM, PLOT_TOP);
    let title = if x.log {
        "Inter-send gaps up to x: share of the gaps and of their time (log scale)"
    } else {
        "Inter-send gaps up to x: share of the gaps and of their time"
    };
    let mut svg = Svg::new(title);
    svg.axes(&x, &y, "gap between sends (µs)", "cumulative share", plain);
    svg.polyline(
        "gap_cdf",
        RATE_SERIES[0].3,
        points.iter().map(|(u, f)| (x.px(*u), y.px(*f))),
    );
    svg.polyline(
        "gap_time",
        BLOCKED_COLOUR,
        time_points.iter().map(|(u, f)| (x.px(*u), y.px(*f))),
    );
    let mut legend = vec![
        ("of the gaps".to_string(), RATE_SERIES[0].3, Key::Line),
        ("of the time between sends".to_string(), BLOCKED_COLOUR, Key::Line),
    ];
    if let Some(s) = slot_us {
        let px = x.px(s);
        let _ = writeln!(
            svg.body,
            r#"<line id="slot" x1="{px:.1}" y1="{PLOT_TOP:.1}" x2="{px:.1}" y2="{PLOT_BOTTOM:.1}" stroke="{REQUESTED_COLOUR}" stroke-width="1.5" stroke-dasharray="6,4"/>"#
        );
        legend.push((
            format!("requested slot ({} µs)", plain(s)),
            REQUESTED_COLOUR,
            Key::Dashed,
        ));
    }
    svg.legend(&legend);
    Some(svg.finish())
}

/// A rate sweep (`scanprof sweep`): achieved packets per second against requested, one point
/// per step, with the ideal line (achieved = requested, dashed), what was left after the
/// target's losses (achieved less lost), and the loss rate. `steps` are (requested, achieved,
/// lost per second); an empty sweep gives the empty frame with a "no data" note.
pub fn sweep_svg(steps: &[(f64, f64, f64)]) -> String {
    let mut svg = Svg::new("Rate sweep: achieved against requested");
    let mut pts: Vec<(f64, f64, f64)> = steps
        .iter()
        .map(|(r, a, l)| (finite_or_zero(*r), finite_or_zero(*a), finite_or_zero(*l)))
        .collect();
    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    let top = pts
        .iter()
        .flat_map(|p| [p.0, p.1, p.2])
        .fold(0.0, f64::max)
        .max(1.0);
    let x = Axis::linear(0.0, top * 1.05, PLOT_LEFT, PLOT_RIGHT);
    let y = Axis::linear(0.0, top * 1.05, PLOT_BOTTOM, PLOT_TOP);
    svg.axes(&x, &y, "requested packets per second", "packets per second", si);
    if pts.is_empty() {
        svg.note("no data: no step ran");
        return svg.finish();
    }
    let _ = writeln!(
        svg.body,
        r#"<line id="ideal" x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{REQUESTED_COLOUR}" stroke-width="1.5" stroke-dasharray="6,4"/>"#,
        x.px(0.0),
        y.px(0.0),
        x.px(x.max.min(y.max)),
        y.px(x.max.min(y.max))
    );
    /// (element id, colour, points)
    type Series<'a> = (&'a str, &'a str, Vec<(f64, f64)>);
    let series: [Series; 3] = [
        (
            "achieved",
            RATE_SERIES[0].3,
            pts.iter().map(|p| (p.0, p.1)).collect(),
        ),
        (
            "delivered",
            RATE_SERIES[1].3,
            pts.iter().map(|p| (p.0, (p.1 - p.2).max(0.0))).collect(),
        ),
        ("lost", RATE_SERIES[2].3, pts.iter().map(|p| (p.0, p.2)).collect()),
    ];
    for (id, colour, points) in &series {
        svg.polyline(id, colour, points.iter().map(|(r, v)| (x.px(*r), y.px(*v))));
        for (r, v) in points {
            let _ = writeln!(
                svg.body,
                r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{colour}"/>"#,
                x.px(*r),
                y.px(*v)
            );
        }
    }
    svg.legend(&[
        ("achieved (send syscalls)".into(), RATE_SERIES[0].3, Key::Line),
        ("achieved less lost".into(), RATE_SERIES[1].3, Key::Line),
        ("lost (target_loss)".into(), RATE_SERIES[2].3, Key::Line),
        (
            "ideal: achieved = requested".into(),
            REQUESTED_COLOUR,
            Key::Dashed,
        ),
    ]);
    svg.finish()
}

fn finite_or_zero(v: f64) -> f64 {
    if v.is_finite() {
        v
    } else {
        0.0
    }
}

/// A value axis: data range, pixel range and tick positions.
struct Axis {
    min: f64,
    max: f64,
    log: bool,
    /// pixel of `min` and of `max`
    pix: (f64, f64),
    ticks: Vec<f64>,
}

impl Axis {
    /// A linear axis from `min` to `max` widened to round tick values (about five ticks).
    fn linear(min: f64, max: f64, pix_min: f64, pix_max: f64) -> Axis {
        let (min, max) = if max > min { (min, max) } else { (min, min + 1.0) };
        let step = nice_step((max - min) / 5.0);
        let lo = (min / step).floor() * step;
        let hi = (max / step).ceil() * step;
        Axis::fixed(lo, hi, step, pix_min, pix_max)
    }

    /// A linear axis with exactly this range and tick step.
    fn fixed(min: f64, max: f64, step: f64, pix_min: f64, pix_max: f64) -> Axis {
        let n = ((max - min) / step).round() as usize;
        Axis {
            min,
            max,
            log: false,
            pix: (pix_min, pix_max),
            ticks: (0..=n).map(|i| min + i as f64 * step).collect(),
        }
    }

    /// A base-10 log axis over whole decades around [min, max] (both > 0).
    fn log(min: f64, max: f64, pix_min: f64, pix_max: f64) -> Axis {
        let lo = min.log10().floor() as i32;
        let hi = (max.log10().ceil() as i32).max(lo + 1);
        Axis {
            min: 10f64.powi(lo),
            max: 10f64.powi(hi),
            log: true,
            pix: (pix_min, pix_max),
            ticks: (lo..=hi).map(|e| 10f64.powi(e)).collect(),
        }
    }

    /// Pixel of a data value (clamped into the axis range).
    fn px(&self, v: f64) -> f64 {
        let f = if self.log {
            let v = v.max(self.min);
            (v.log10() - self.min.log10()) / (self.max.log10() - self.min.log10())
        } else {
            (v - self.min) / (self.max - self.min)
        };
        self.pix.0 + f.clamp(0.0, 1.0) * (self.pix.1 - self.pix.0)
    }
}

/// 1, 2 or 5 times a power of ten, nearest to `raw`.
fn nice_step(raw: f64) -> f64 {
    if !(raw.is_finite() && raw > 0.0) {
        return 1.0;
    }
    let mag = 10f64.powf(raw.log10().floor());
    let norm = raw / mag;
    let f = if norm < 1.5 {
        1.0
    } else if norm < 3.0 {
        2.0
    } else if norm < 7.0 {
        5.0
    } else {
        10.0
    };
    f * mag
}

/// `s` cut to `max` characters, the last of them "…", when longer.
fn elide(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// Escapes text for XML character data and attribute values.
fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            // Not allowed in XML 1.0 at all.
            c if (c as u32) < 0x20 && !matches!(c, '\t' | '\n' | '\r') => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// An SVG document being written.
struct Svg {
    body: String,
}

impl Svg {
    fn new(title: &str) -> Svg {
        let mut body = String::new();
        let _ = writeln!(body, r#"<?xml version="1.0" encoding="UTF-8" standalone="no"?>"#);
        let _ = writeln!(
            body,
            r#"<svg xmlns="http://www.w3.org/2000/svg" version="1.1" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">"#
        );
        let t = xml_escape(title);
        let _ = writeln!(body, "<title>{t}</title>");
        let _ = writeln!(
            body,
            r#"<rect x="0" y="0" width="{WIDTH}" height="{HEIGHT}" fill="white"/>"#
        );
        let _ = writeln!(
            body,
            r#"<text x="{:.1}" y="24" text-anchor="middle" font-size="15">{t}</text>"#,
            (PLOT_LEFT + PLOT_RIGHT) / 2.0
        );
        Svg { body }
    }

    /// Frame, grid lines, ticks, tick labels and axis titles.
    fn axes(&mut self, x: &Axis, y: &Axis, x_title: &str, y_title: &str, y_label: fn(f64) -> String) {
        let b = &mut self.body;
        let _ = writeln!(b, r##"<g id="axes" stroke="#000000" stroke-width="1">"##);
        let _ = writeln!(
            b,
            r#"<rect x="{PLOT_LEFT:.1}" y="{PLOT_TOP:.1}" width="{:.1}" height="{:.1}" fill="none"/>"#,
            PLOT_RIGHT - PLOT_LEFT,
            PLOT_BOTTOM - PLOT_TOP
        );
        for v in &x.ticks {
            let px = x.px(*v);
            let _ = writeln!(
                b,
                r##"<line x1="{px:.1}" y1="{PLOT_TOP:.1}" x2="{px:.1}" y2="{PLOT_BOTTOM:.1}" stroke="#dddddd"/>"##
            );
            let _ = writeln!(
                b,
                r#"<line x1="{px:.1}" y1="{PLOT_BOTTOM:.1}" x2="{px:.1}" y2="{:.1}"/>"#,
                PLOT_BOTTOM + 5.0
            );
        }
        for v in &y.ticks {
            let py = y.px(*v);
            let _ = writeln!(
                b,
                r##"<line x1="{PLOT_LEFT:.1}" y1="{py:.1}" x2="{PLOT_RIGHT:.1}" y2="{py:.1}" stroke="#dddddd"/>"##
            );
            let _ = writeln!(
                b,
                r#"<line x1="{:.1}" y1="{py:.1}" x2="{PLOT_LEFT:.1}" y2="{py:.1}"/>"#,
                PLOT_LEFT - 5.0
            );
        }
        let _ = writeln!(b, "</g>");
        let _ = writeln!(b, r#"<g id="tick-labels">"#);
        for v in &x.ticks {
            let _ = writeln!(
                b,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
                x.px(*v),
                PLOT_BOTTOM + 18.0,
                xml_escape(&plain(*v))
            );
        }
        for v in &y.ticks {
            let _ = writeln!(
                b,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
                PLOT_LEFT - 8.0,
                y.px(*v) + 4.0,
                xml_escape(&y_label(*v))
            );
        }
        let _ = writeln!(b, "</g>");
        let _ = writeln!(
            b,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            (PLOT_LEFT + PLOT_RIGHT) / 2.0,
            PLOT_BOTTOM + 40.0,
            xml_escape(x_title)
        );
        let (cx, cy) = (20.0, (PLOT_TOP + PLOT_BOTTOM) / 2.0);
        let _ = writeln!(
            b,
            r#"<text x="{cx:.1}" y="{cy:.1}" text-anchor="middle" transform="rotate(-90 {cx:.1} {cy:.1})">{}</text>"#,
            xml_escape(y_title)
        );
    }

    fn polyline(&mut self, id: &str, colour: &str, points: impl Iterator<Item = (f64, f64)>) {
        let pts: Vec<String> = points.map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
        let _ = writeln!(
            self.body,
            r#"<polyline id="{}" fill="none" stroke="{colour}" stroke-width="2" points="{}"/>"#,
            xml_escape(id),
            pts.join(" ")
        );
    }

    /// Shaded stretches of the time axis from `y0` to `y1` px, each with its tooltip, in a group
    /// `id` (none when there are none).
    fn spans(&mut self, id: &str, colour: &str, opacity: f64, y0: f64, y1: f64, spans: &[Span]) {
        if spans.is_empty() {
            return;
        }
        let _ = writeln!(
            self.body,
            r#"<g id="{id}" fill="{colour}" fill-opacity="{opacity}" stroke="none">"#
        );
        for s in spans {
            let _ = writeln!(
                self.body,
                r#"<rect x="{:.1}" y="{y0:.1}" width="{:.1}" height="{:.1}"><title>{}</title></rect>"#,
                s.x0,
                (s.x1 - s.x0).max(1.0),
                y1 - y0,
                xml_escape(&s.title)
            );
        }
        let _ = writeln!(self.body, "</g>");
    }

    /// Legend entries: (label, colour, how drawn). A label longer than the space right of the
    /// plot ends in "…" rather than past the canvas.
    fn legend(&mut self, entries: &[(String, &str, Key)]) {
        let _ = writeln!(self.body, r#"<g id="legend">"#);
        for (i, (label, colour, key)) in entries.iter().enumerate() {
            let y = PLOT_TOP + 10.0 + i as f64 * 20.0;
            let label = &elide(label, LEGEND_MAX_CHARS);
            match key {
                Key::Line | Key::Dashed => {
                    let dash = if *key == Key::Dashed {
                        r#" stroke-dasharray="6,4""#
                    } else {
                        ""
                    };
                    let _ = writeln!(
                        self.body,
                        r#"<line x1="{LEGEND_X:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="{colour}" stroke-width="2"{dash}/>"#,
                        LEGEND_X + 24.0
                    );
                }
                Key::Area => {
                    let _ = writeln!(
                        self.body,
                        r#"<rect x="{LEGEND_X:.1}" y="{:.1}" width="24" height="10" fill="{colour}" fill-opacity="0.5"/>"#,
                        y - 5.0
                    );
                }
            }
            let _ = writeln!(
                self.body,
                r#"<text x="{:.1}" y="{:.1}">{}</text>"#,
                LEGEND_X + 30.0,
                y + 4.0,
                xml_escape(label)
            );
        }
        let _ = writeln!(self.body, "</g>");
    }

    fn note(&mut self, text: &str) {
        let _ = writeln!(
            self.body,
            r##"<text id="note" x="{:.1}" y="{:.1}" text-anchor="middle" font-size="16" fill="#777777">{}</text>"##,
            (PLOT_LEFT + PLOT_RIGHT) / 2.0,
            (PLOT_TOP + PLOT_BOTTOM) / 2.0,
            xml_escape(text)
        );
    }

    fn finish(mut self) -> String {
        self.body.push_str("</svg>\n");
        self.body
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::{GapView, Snapshot, Stage};
    use crate::views::fixtures::rich_recording;

    /// A small well-formedness check: one root `svg` element with the SVG namespace, every tag
    /// closed in order, attributes quoted, no bare `<` or `&` in text or attribute values.
    fn well_formed(doc: &str) -> Result<(), String> {
        let mut stack: Vec<String> = Vec::new();
        let mut roots = 0;
        let mut rest = doc;
        let check_text = |t: &str| -> Result<(), String> {
            let mut parts = t.split('&');
            parts.next();
            for p in parts {
                let entity = p.split(';').next().unwrap_or("");
                let ok = p.contains(';')
                    && (["amp", "lt", "gt", "quot", "apos"].contains(&entity) || entity.starts_with('#'));
                if !ok {
                    return Err(format!("bare & in {t:?}"));
                }
            }
            if t.contains('<') {
                return Err(format!("bare < in {t:?}"));
            }
            Ok(())
        };
        while let Some(i) = rest.find('<') {
            check_text(&rest[..i])?;
            if stack.is_empty() && !rest[..i].trim().is_empty() {
                return Err(format!("text outside the root: {:?}", &rest[..i]));
            }
            rest = &rest[i..];
            if let Some(r) = rest.strip_prefix("<?") {
                let end = r.find("?>").ok_or("unclosed <?")?;
                rest = &r[end + 2..];
                continue;
            }
            if let Some(r) = rest.strip_prefix("<!--") {
                let end = r.find("-->").ok_or("unclosed comment")?;
                rest = &r[end + 3..];
                continue;
            }
            let end = rest.find('>').ok_or("unclosed tag")?;
            let tag = &rest[1..end];
            rest = &rest[end + 1..];
            if let Some(name) = tag.strip_prefix('/') {
                let open = stack.pop().ok_or(format!("</{name}> closes nothing"))?;
                if open != name.trim() {
                    return Err(format!("</{name}> closes <{open}>"));
                }
                continue;
            }
            let self_closing = tag.ends_with('/');
            let tag = tag.trim_end_matches('/');
            let name_end = tag.find(char::is_whitespace).unwrap_or(tag.len());
            let name = &tag[..name_end];
            if name.is_empty()
                || !name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == ':')
            {
                return Err(format!("bad element name in <{tag}>"));
            }
            // Attributes: name="value" pairs, each name once.
            let mut attrs = tag[name_end..].trim();
            let mut names = Vec::new();
            while !attrs.is_empty() {
                let eq = attrs
                    .find("=\"")
                    .ok_or(format!("unquoted attribute in <{tag}>"))?;
                let an = attrs[..eq].trim();
                if an.is_empty() || an.contains(char::is_whitespace) || names.contains(&an) {
                    return Err(format!("bad or repeated attribute {an:?} in <{tag}>"));
                }
                names.push(an);
                let after = &attrs[eq + 2..];
                let close = after
                    .find('"')
                    .ok_or(format!("unterminated attribute in <{tag}>"))?;
                check_text(&after[..close])?;
                attrs = after[close + 1..].trim_start();
            }
            if stack.is_empty() {
                roots += 1;
                if name != "svg" || !tag.contains(r#"xmlns="http://www.w3.org/2000/svg""#) {
                    return Err(format!(
                        "root is not an svg element with the SVG namespace: <{tag}>"
                    ));
                }
            }
            if !self_closing {
                stack.push(name.to_string());
            }
        }
        check_text(rest)?;
        if !rest.trim().is_empty() {
            return Err(format!("text after the root: {rest:?}"));
        }
        if !stack.is_empty() {
            return Err(format!("unclosed elements: {stack:?}"));
        }
        if roots != 1 {
            return Err(format!("{roots} root elements"));
        }
        Ok(())
    }

    /// The value of attribute `attr` of the element with id `id`.
    fn attr_of<'a>(svg: &'a str, id: &str, attr: &str) -> Option<&'a str> {
        let start = svg.find(&format!(r#"id="{id}""#))?;
        let tag_start = svg[..start].rfind('<')?;
        let tag_end = start + svg[start..].find('>')?;
        let tag = &svg[tag_start..tag_end];
        let key = format!(r#" {attr}=""#);
        let v = &tag[tag.find(&key)? + key.len()..];
        Some(&v[..v.find('"')?])
    }

    fn points(svg: &str, id: &str) -> Vec<(f64, f64)> {
        attr_of(svg, id, "points")
            .unwrap_or_else(|| panic!("no polyline {id} in\n{svg}"))
            .split(' ')
            .map(|p| {
                let (x, y) = p.split_once(',').expect("x,y");
                (x.parse().expect("x"), y.parse().expect("y"))
            })
            .collect()
    }

    fn tick(n: u64, pps: [f64; 3], requested: Option<f64>) -> Snapshot {
        let mut s = rich_recording().ticks[0].clone();
        s.tick = n;
        s.t_s = n as f64;
        s.interval_s = 1.0;
        s.requested_pps = requested;
        s.stages = ["syscall_packets", "dev_xmit", "target_drops"]
            .iter()
            .zip(pps)
            .map(|(name, pps)| Stage {
                name: name.parse().unwrap(),
                count: pps as u64,
                pps,
                total: 0,
                ratio: None,
            })
            .collect();
        s
    }

    #[test]
    fn well_formedness_check_catches_broken_documents() {
        let ok = r#"<?xml version="1.0"?><svg xmlns="http://www.w3.org/2000/svg"><g a="1"><text>x &amp; y</text></g><line/></svg>"#;
        assert_eq!(well_formed(ok), Ok(()));
        for bad in [
            r#"<svg xmlns="http://www.w3.org/2000/svg"><g></svg>"#,
            r#"<svg xmlns="http://www.w3.org/2000/svg"><g></text></svg>"#,
            r#"<svg xmlns="http://www.w3.org/2000/svg"><text>a & b</text></svg>"#,
            r#"<svg xmlns="http://www.w3.org/2000/svg"><text a=1>x</text></svg>"#,
            r#"<svg xmlns="http://www.w3.org/2000/svg"><text a="1" a="2">x</text></svg>"#,
            r#"<svg><g/></svg>"#,
            r#"<svg xmlns="http://www.w3.org/2000/svg"/><svg xmlns="http://www.w3.org/2000/svg"/>"#,
        ] {
            assert!(well_formed(bad).is_err(), "accepted {bad}");
        }
    }

    #[test]
    fn rates_plot_has_one_polyline_per_series_and_the_requested_line() {
        let rec = rich_recording();
        let svg = rates_svg(&rec);
        assert_eq!(well_formed(&svg), Ok(()), "{svg}");
        assert!(svg.contains(r#"viewBox="0 0 880 450""#));
        assert_eq!(svg.matches("<polyline").count(), 3);
        for id in ["achieved", "dev_xmit", "target_drops"] {
            assert_eq!(points(&svg, id).len(), rec.ticks.len(), "{id}");
        }
        assert!(attr_of(&svg, "requested", "stroke-dasharray").is_some());
        for label in [
            "achieved (syscall_packets)",
            "dev_xmit (driver accepted)",
            "target_drops",
            "requested (100 pps)",
        ] {
            assert!(
                svg.contains(&format!(">{label}</text>")),
                "legend {label:?} missing"
            );
        }
        assert!(svg.contains(">seconds since attach</text>") && svg.contains(">packets per second</text>"));
        assert!(!svg.contains("no data"));
    }

    #[test]
    fn rates_plot_puts_points_and_the_requested_rate_where_they_belong() {
        let mut rec = rich_recording();
        rec.summary = None;
        rec.ticks = vec![
            tick(1, [500.0, 450.0, 50.0], Some(1000.0)),
            tick(2, [1000.0, 900.0, 100.0], Some(1000.0)),
            tick(3, [800.0, 800.0, 0.0], Some(1000.0)),
            tick(4, [600.0, 600.0, 0.0], Some(1000.0)),
        ];
        let svg = rates_svg(&rec);
        assert_eq!(well_formed(&svg), Ok(()), "{svg}");
        // y: 0..1050 rounded up to 0..1200 (ticks of 200); 1000 pps is 1000/1200 of 350 px up.
        let y_1000 = PLOT_BOTTOM - 1000.0 / 1200.0 * (PLOT_BOTTOM - PLOT_TOP);
        assert_eq!(format!("{y_1000:.1}"), "98.3");
        assert_eq!(attr_of(&svg, "requested", "y1"), Some("98.3"));
        assert_eq!(attr_of(&svg, "requested", "y2"), Some("98.3"));
        // x: 0..4 s; the points sit at the middle of each tick.
        let achieved = points(&svg, "achieved");
        assert_eq!(achieved.len(), 4);
        let x_of = |t: f64| PLOT_LEFT + t / 4.0 * (PLOT_RIGHT - PLOT_LEFT);
        assert!((achieved[1].0 - x_of(1.5)).abs() < 0.06, "{achieved:?}");
        assert!((achieved[1].1 - y_1000).abs() < 0.06, "{achieved:?}");
        assert_eq!(points(&svg, "target_drops")[2].1, PLOT_BOTTOM);
        for label in ["0", "200", "1k", "1.2k"] {
            assert!(
                svg.contains(&format!(r#"text-anchor="end">{label}</text>"#)),
                "y label {label}"
            );
        }
        for label in ["0", "1", "2", "3", "4"] {
            assert!(
                svg.contains(&format!(r#"text-anchor="middle">{label}</text>"#)),
                "x label {label}"
            );
        }

        // Without a requested rate: no dashed line, no legend entry.
        for t in &mut rec.ticks {
            t.requested_pps = None;
        }
        let svg = rates_svg(&rec);
        assert!(attr_of(&svg, "requested", "y1").is_none());
        assert!(!svg.contains("requested ("));
    }

    /// A scan's start, its partial last sending tick and its wait for late replies are no
    /// rate: rates.svg drew them as a collapse to 600 and 0 pps; they are shaded instead.
    #[test]
    fn the_rates_plot_draws_only_whole_sending_ticks_and_shades_the_others() {
        use crate::analysis::RunPhase;
        let mut rec = rich_recording();
        rec.summary = None;
        let with = |n: u64, pps: f64, phase: RunPhase, partial: bool| Snapshot {
            phase,
            partial,
            ..tick(n, [pps, pps, 0.0], Some(1000.0))
        };
        rec.ticks = vec![with(1, 0.0, RunPhase::Starting, false)];
        rec.ticks
            .extend((2..=4).map(|n| with(n, 1000.0, RunPhase::Sending, false)));
        rec.ticks.push(with(5, 600.0, RunPhase::Sending, true));
        rec.ticks
            .extend((6..=8).map(|n| with(n, 0.0, RunPhase::Waiting, false)));
        let svg = rates_svg(&rec);
        assert_eq!(well_formed(&svg), Ok(()), "{svg}");
        let achieved = points(&svg, "achieved");
        assert_eq!(achieved.len(), 3, "{achieved:?}");
        let y_1000 = attr_of(&svg, "requested", "y1").unwrap().parse::<f64>().unwrap();
        assert!(
            achieved.iter().all(|p| (p.1 - y_1000).abs() < 0.06),
            "{achieved:?}"
        );
        let x_of = |t: f64| PLOT_LEFT + t / 8.0 * (PLOT_RIGHT - PLOT_LEFT);
        assert!((achieved[0].0 - x_of(1.5)).abs() < 0.06, "{achieved:?}");
        // Two shaded stretches: the first tick, and the partial tick with the wait after it.
        let group = &svg[svg.find(r#"<g id="not_sending""#).expect("no shading")..];
        let group = &group[..group.find("</g>").unwrap()];
        assert_eq!(group.matches("<rect").count(), 2, "{group}");
        assert!(
            group.contains("<title>starting from 0 s to 1 s: no rate drawn</title>"),
            "{group}"
        );
        assert!(
            group.contains("<title>partial, waiting from 4 s to 8 s: no rate drawn</title>"),
            "{group}"
        );
        assert!(svg.contains(">not sending or partial</text>"));
        assert!(!svg.contains("no whole tick of sending"));
    }

    #[test]
    fn empty_recording_gives_a_frame_with_a_no_data_note() {
        let rec = Recording::default();
        let svg = rates_svg(&rec);
        assert_eq!(well_formed(&svg), Ok(()), "{svg}");
        assert!(svg.contains(">no data: the recording has no ticks</text>"));
        assert_eq!(svg.matches("<polyline").count(), 0);
        assert_eq!(gap_cdf_svg(&rec), None);
    }

    #[test]
    fn gap_cdf_ends_at_one_with_the_slot_line() {
        let rec = rich_recording();
        let svg = gap_cdf_svg(&rec).expect("the fixture has gaps");
        assert_eq!(well_formed(&svg), Ok(()), "{svg}");
        let gap = &rec.summary.as_ref().expect("summary").gap;
        let pts = points(&svg, "gap_cdf");
        // One point per bucket edge, plus the start, plus the start of each stretch after an
        // empty one.
        let mut h = gap.histogram.clone();
        h.sort_unstable();
        let breaks = h.windows(2).filter(|w| w[1].0 > w[0].1).count();
        assert_eq!(pts.len(), 1 + h.len() + breaks, "{pts:?} from {h:?}");
        assert_eq!(pts[0].1, PLOT_BOTTOM, "starts at 0");
        assert_eq!(pts.last().map(|p| p.1), Some(PLOT_TOP), "ends at 1.0");
        assert!(
            pts.windows(2).all(|w| w[1].0 >= w[0].0 && w[1].1 <= w[0].1),
            "not monotone: {pts:?}"
        );
        // The slot (10 ms) lies between the 10 ms and 14 ms buckets of the fixture.
        let slot_x: f64 = attr_of(&svg, "slot", "x1")
            .expect("slot line")
            .parse()
            .expect("x");
        assert!(
            pts[0].0 <= slot_x && slot_x < pts[pts.len() - 1].0,
            "{slot_x} {pts:?}"
        );
        assert!(svg.contains("requested slot (10000 µs)"));
        assert!(svg.contains("gap between sends (µs)"));
    }

    #[test]
    fn gap_cdf_positions_on_linear_and_log_scales() {
        let mut rec = rich_recording();
        let set = |rec: &mut Recording, histogram: Vec<(u64, u64, u64)>, slot: Option<f64>| {
            if let Some(s) = rec.summary.as_mut() {
                s.gap = GapView {
                    count: histogram.iter().map(|b| b.2).sum(),
                    slot_ns: slot,
                    histogram,
                    ..Default::default()
                };
            }
        };
        // Linear: 100..200 us, a quarter below 150 us; axis 100..200 (ticks of 20).
        set(
            &mut rec,
            vec![(100_000, 150_000, 1), (150_000, 200_000, 3)],
            Some(120_000.0),
        );
        let svg = gap_cdf_svg(&rec).expect("gaps");
        assert_eq!(well_formed(&svg), Ok(()), "{svg}");
        assert!(!svg.contains("log scale"));
        let pts = points(&svg, "gap_cdf");
        assert_eq!(pts.len(), 3);
        let span = PLOT_RIGHT - PLOT_LEFT;
        let height = PLOT_BOTTOM - PLOT_TOP;
        assert_eq!(pts[0], (PLOT_LEFT, PLOT_BOTTOM));
        assert!((pts[1].0 - (PLOT_LEFT + span / 2.0)).abs() < 0.06);
        assert!((pts[1].1 - (PLOT_BOTTOM - height / 4.0)).abs() < 0.06);
        assert_eq!(pts[2], (PLOT_RIGHT, PLOT_TOP));
        let slot_x: f64 = attr_of(&svg, "slot", "x1").expect("slot").parse().expect("x");
        assert!((slot_x - (PLOT_LEFT + span * 0.2)).abs() < 0.06, "{slot_x}");

        // Log: 1 us .. 1 ms spans three decades; an empty stretch between buckets stays flat.
        set(&mut rec, vec![(1_000, 2_000, 2), (500_000, 1_000_000, 2)], None);
        let svg = gap_cdf_svg(&rec).expect("gaps");
        assert_eq!(well_formed(&svg), Ok(()), "{svg}");
        assert!(svg.contains("(log scale)"));
        assert!(attr_of(&svg, "slot", "x1").is_none());
        let pts = points(&svg, "gap_cdf");
        assert_eq!(pts.len(), 4, "{pts:?}");
        assert_eq!(pts[0].0, PLOT_LEFT, "1 us is the first decade's start");
        assert_eq!(pts[3], (PLOT_RIGHT, PLOT_TOP), "1000 us is the last decade's end");
        let decade = span / 3.0;
        assert!(
            (pts[1].0 - (PLOT_LEFT + 2f64.log10() * decade)).abs() < 0.06,
            "{pts:?}"
        );
        assert_eq!(pts[1].1, pts[2].1, "flat between the buckets");
        assert!(
            (pts[2].0 - (PLOT_LEFT + (500f64).log10() * decade)).abs() < 0.06,
            "{pts:?}"
        );
        for label in ["1", "10", "100", "1000"] {
            assert!(
                svg.contains(&format!(r#"text-anchor="middle">{label}</text>"#)),
                "{label}"
            );
        }

        // No gaps (or only empty buckets): no plot.
        set(&mut rec, vec![], Some(1000.0));
        assert_eq!(gap_cdf_svg(&rec), None);
        set(&mut rec, vec![(1_000, 2_000, 0)], None);
        assert_eq!(gap_cdf_svg(&rec), None);
    }

    /// The issue's run: 13 stalls of 2.66 s among ~11,000 gaps of ~1 ms held 80% of the time;
    /// by count the curve is at 0.999 from the slot on, by time it stays near 0.2 until the
    /// stalls.
    #[test]
    fn the_gap_time_curve_shows_where_the_time_went() {
        let mut rec = rich_recording();
        if let Some(s) = rec.summary.as_mut() {
            s.gap = GapView {
                count: 11_013,
                slot_ns: Some(1e6),
                histogram: vec![(900_000, 1_100_000, 11_000), (2_500_000_000, 2_800_000_000, 13)],
                ..Default::default()
            };
        }
        let svg = gap_cdf_svg(&rec).expect("gaps");
        assert_eq!(well_formed(&svg), Ok(()), "{svg}");
        let y = Axis::fixed(0.0, 1.0, 0.25, PLOT_BOTTOM, PLOT_TOP);
        let share = |py: f64| (PLOT_BOTTOM - py) / (PLOT_BOTTOM - PLOT_TOP);
        let (by_count, by_time) = (points(&svg, "gap_cdf"), points(&svg, "gap_time"));
        assert_eq!(by_count.len(), by_time.len());
        // After the 1 ms bucket (and across the empty stretch up to the stalls' bucket).
        assert!(share(by_count[1].1) > 0.998, "{by_count:?}");
        let time_share = 11_000.0 * 1e6 / (11_000.0 * 1e6 + 13.0 * 2.65e9);
        assert!(
            (share(by_time[1].1) - time_share).abs() < 0.003,
            "{by_time:?} vs {time_share}"
        );
        assert_eq!(by_time[2].1, by_time[1].1, "flat up to the stalls");
        assert_eq!(by_time.last().map(|p| p.1), Some(y.px(1.0)));
        for label in [
            "of the gaps",
            "of the time between sends",
            "requested slot (1000 µs)",
        ] {
            assert!(svg.contains(&format!(">{label}</text>")), "legend {label:?}");
        }
    }

    /// Blocked episodes shade the rate plot where they happened (merged where they touch on the
    /// canvas, with their count and wait site in the tooltip), and the ticks that lost packets
    /// are a band along the top, consecutive ticks one band.
    #[test]
    fn the_rates_plot_marks_blocked_episodes_and_ticks_that_lost_packets() {
        use crate::analysis::EpisodeView;
        let mut rec = rich_recording();
        rec.summary = None;
        rec.ticks = (1..=8)
            .map(|n| {
                let lost = if matches!(n, 2 | 3 | 6) { 40.0 } else { 0.0 };
                let mut t = tick(n, [1000.0, 1000.0 - lost, lost], Some(1000.0));
                t.episodes.clear();
                t
            })
            .collect();
        let ep = |start_s: f64, ms: u64| EpisodeView {
            pid: 7,
            tid: 7,
            start_s,
            duration_ns: ms * 1_000_000,
            wait_site: "sock_alloc_send_pskb".into(),
        };
        // One long episode at 1.5 s, and two short ones 1 ms apart at 5 s: one box of two.
        rec.ticks[2].episodes = vec![ep(1.5, 1200)];
        rec.ticks[5].episodes = vec![ep(5.0, 2), ep(5.003, 2)];
        let svg = rates_svg(&rec);
        assert_eq!(well_formed(&svg), Ok(()), "{svg}");
        let group = |id: &str| -> Vec<String> {
            let start = svg.find(&format!(r#"<g id="{id}""#)).expect("group");
            let end = start + svg[start..].find("</g>").expect("end");
            svg[start..end]
                .match_indices("<rect ")
                .map(|(i, _)| {
                    svg[start + i..start + i + svg[start + i..].find("</rect>").unwrap()].to_string()
                })
                .collect()
        };
        let num = |r: &str, a: &str| -> f64 {
            let k = format!(r#" {a}=""#);
            let v = &r[r.find(&k).unwrap() + k.len()..];
            v[..v.find('"').unwrap()].parse().unwrap()
        };
        let x_of = |t: f64| PLOT_LEFT + t / 8.0 * (PLOT_RIGHT - PLOT_LEFT);
        let blocked = group("blocked");
        assert_eq!(blocked.len(), 2, "{blocked:?}");
        assert!((num(&blocked[0], "x") - x_of(1.5)).abs() < 0.06);
        assert!((num(&blocked[0], "width") - (x_of(2.7) - x_of(1.5))).abs() < 0.11);
        assert!(blocked[0].contains("1 episode, 1.2 s in all, at sock_alloc_send_pskb"));
        assert!(
            blocked[1].contains("2 episodes, 0.004 s in all"),
            "{}",
            blocked[1]
        );
        let lost = group("lost");
        assert_eq!(lost.len(), 2, "ticks 2-3 and tick 6: {lost:?}");
        assert!((num(&lost[0], "x") - x_of(1.0)).abs() < 0.06);
        assert!((num(&lost[0], "width") - (x_of(3.0) - x_of(1.0))).abs() < 0.11);
        assert!(lost[0].contains("80 packets lost from 1 s to 3 s"), "{}", lost[0]);
        assert_eq!(num(&lost[1], "height"), LOSS_BAND_PX);
        for label in ["blocked in send (3 ep.)", "ticks that lost packets"] {
            assert!(svg.contains(&format!(">{label}</text>")), "legend {label:?}");
        }
        // Nothing to mark: no group, no legend entry.
        for t in &mut rec.ticks {
            t.episodes.clear();
            t.stages.retain(|s| s.name != "target_drops");
        }
        let svg = rates_svg(&rec);
        assert!(!svg.contains(r#"id="blocked""#) && !svg.contains(r#"id="lost""#));
        assert!(!svg.contains("blocked in send") && !svg.contains("lost packets"));
    }

    /// Every legend label of every plot fits right of the plot at the legend's character width
    /// ("achieved (syscall_packet" was cut at the canvas edge); a longer one would end in "…".
    #[test]
    fn legend_labels_fit_on_the_canvas() {
        let rec = rich_recording();
        let docs = [
            rates_svg(&rec),
            gap_cdf_svg(&rec).expect("gaps"),
            sweep_svg(&[(1000.0, 990.0, 10.0), (200_000.0, 150_000.0, 2_000.0)]),
        ];
        for svg in &docs {
            let start = svg.find(r#"<g id="legend">"#).expect("legend");
            let legend = &svg[start..start + svg[start..].find("</g>").unwrap()];
            for part in legend.split("<text ").skip(1) {
                let label = &part[part.find('>').unwrap() + 1..part.find("</text>").unwrap()];
                let x: f64 = part["x=\"".len()..].split('"').next().unwrap().parse().unwrap();
                let end = x + label.chars().count() as f64 * LEGEND_CHAR_PX;
                assert!(end <= WIDTH, "{label:?} ends at {end} px of {WIDTH}");
            }
        }
        assert_eq!(elide("abcdef", 4), "abc…");
        assert_eq!(elide("abc", 4), "abc");
    }

    /// The plots render to PNG with librsvg (`rsvg-convert`, installed by scripts/setup), at
    /// the canvas size: a renderer's view of the documents, not only this module's. With
    /// SCANPROF_KEEP_PLOTS set the PNGs stay in the temporary directory printed, to be looked at.
    #[test]
    fn the_plots_render_to_png_with_librsvg() {
        let dir = std::env::temp_dir().join(format!("scanprof-plots-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let rec = rich_recording();
        let docs = [
            ("rates", rates_svg(&rec)),
            ("gaps", gap_cdf_svg(&rec).expect("gaps")),
            (
                "sweep",
                sweep_svg(&[(1000.0, 990.0, 10.0), (5000.0, 4000.0, 100.0)]),
            ),
            ("empty", rates_svg(&Recording::default())),
        ];
        for (name, svg) in docs {
            let (svg_path, png_path) = (dir.join(format!("{name}.svg")), dir.join(format!("{name}.png")));
            std::fs::write(&svg_path, svg).unwrap();
            let out = std::process::Command::new("rsvg-convert")
                .arg("-o")
                .arg(&png_path)
                .arg(&svg_path)
                .output()
                .unwrap_or_else(|e| panic!("rsvg-convert ({e}): install librsvg2-bin (scripts/setup does)"));
            assert!(
                out.status.success() && out.stderr.is_empty(),
                "{name}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let png = std::fs::read(&png_path).unwrap();
            assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "{name}: not a PNG");
            let be = |i: usize| u32::from_be_bytes([png[i], png[i + 1], png[i + 2], png[i + 3]]);
            assert_eq!(
                (be(16), be(20)),
                (WIDTH as u32, HEIGHT as u32),
                "{name}: IHDR size"
            );
        }
        if std::env::var_os("SCANPROF_KEEP_PLOTS").is_some() {
            eprintln!("PNGs in {}", dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&dir);
        }
    }

    #[test]
    fn text_is_escaped() {
        assert_eq!(xml_escape(r#"a<b>&"c'"#), "a&lt;b&gt;&amp;&quot;c&apos;");
        assert_eq!(si(2500.0), "2.5k");
        assert_eq!(si(1_000_000.0), "1M");
        assert_eq!(plain(0.25), "0.25");
        assert_eq!(nice_step(210.0), 200.0);
        assert_eq!(nice_step(0.9), 1.0);
    }

    #[test]
    fn the_sweep_plot_has_the_ideal_line_and_three_series() {
        let svg = sweep_svg(&[
            (1000.0, 999.0, 0.0),
            (4000.0, 3990.0, 0.0),
            (8000.0, 7990.0, 3000.0),
        ]);
        well_formed(&svg).unwrap();
        for id in ["ideal", "achieved", "delivered", "lost"] {
            assert!(svg.contains(&format!(r#"id="{id}""#)), "{id}");
        }
        assert_eq!(svg.matches("<circle").count(), 9);
        let empty = sweep_svg(&[]);
        well_formed(&empty).unwrap();
        assert!(empty.contains("no data"));
    }
}
