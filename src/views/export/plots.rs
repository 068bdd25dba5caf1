//! The SVG plots of a trace bundle, drawn by hand from the `Recording` (no plotting crate): the
//! funnel's rates tick by tick against the requested rate, and the CDF of the inter-send gaps
//! against the requested slot. Each is a self-contained SVG 1.1 document that report.md links
//! and any browser opens. Pure: no clock, no I/O.

use std::fmt::Write as _;

use super::Recording;

/// Canvas size, px.
const WIDTH: f64 = 800.0;
const HEIGHT: f64 = 450.0;
/// The plot area inside the canvas, px (the legend sits right of it).
const PLOT_LEFT: f64 = 80.0;
const PLOT_RIGHT: f64 = 600.0;
const PLOT_TOP: f64 = 40.0;
const PLOT_BOTTOM: f64 = 390.0;
const LEGEND_X: f64 = 620.0;

/// The series of the rates plot: (element id, legend label, stage name, colour).
const RATE_SERIES: [(&str, &str, &str, &str); 3] = [
    (
        "achieved",
        "achieved (syscall_packets)",
        "syscall_packets",
        "#1f77b4",
    ),
    ("dev_xmit", "dev_xmit (driver accepted)", "dev_xmit", "#2ca02c"),
    ("target_drops", "target_drops", "target_drops", "#d62728"),
];
const REQUESTED_COLOUR: &str = "#555555";

/// Rate over time of the family's packets through the send syscalls (achieved), the driver
/// (dev_xmit) and the target's drops, one point per tick at the middle of the tick, with the
/// requested rate as a dashed line. A recording without ticks gives the empty frame with a
/// "no data" note.
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
    for ((id, _, _, colour), points) in RATE_SERIES.iter().zip(&series) {
        svg.polyline(id, colour, points.iter().map(|(t, v)| (x.px(*t), y.px(*v))));
    }
    let mut legend: Vec<(&str, &str, bool)> = RATE_SERIES
        .iter()
        .map(|(_, label, _, colour)| (*label, *colour, false))
        .collect();
    let requested_label = requested.map(|r| format!("requested ({} pps)", si(r)));
    if let Some(l) = &requested_label {
        legend.push((l, REQUESTED_COLOUR, true));
    }
    svg.legend(&legend);
    svg.finish()
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
    // The CDF as points: 0 at the first bucket's low edge, then each bucket's high edge at the
    // fraction of gaps up to it; flat across empty stretches between buckets.
    let mut points: Vec<(f64, f64)> = vec![(us(buckets[0].0), 0.0)];
    let mut seen = 0u64;
    let mut prev_high = buckets[0].0;
    for (low, high, count) in &buckets {
        if *low > prev_high {
            points.push((us(*low), seen as f64 / total as f64));
        }
        seen += count;
        points.push((us(*high), seen as f64 / total as f64));
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
        "Inter-send gaps: cumulative distribution (log scale)"
    } else {
        "Inter-send gaps: cumulative distribution"
    };
    let mut svg = Svg::new(title);
    svg.axes(&x, &y, "gap between sends (µs)", "fraction of gaps", plain);
    svg.polyline(
        "gap_cdf",
        RATE_SERIES[0].3,
        points.iter().map(|(u, f)| (x.px(*u), y.px(*f))),
    );
    let mut legend = vec![("gaps up to x", RATE_SERIES[0].3, false)];
    let slot_label = slot_us.map(|s| format!("requested slot ({} µs)", plain(s)));
    if let (Some(s), Some(label)) = (slot_us, &slot_label) {
        let px = x.px(s);
        let _ = writeln!(
            svg.body,
            r#"<line id="slot" x1="{px:.1}" y1="{PLOT_TOP:.1}" x2="{px:.1}" y2="{PLOT_BOTTOM:.1}" stroke="{REQUESTED_COLOUR}" stroke-width="1.5" stroke-dasharray="6,4"/>"#
        );
        legend.push((label, REQUESTED_COLOUR, true));
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
        ("achieved (send syscalls)", RATE_SERIES[0].3, false),
        ("achieved less lost", RATE_SERIES[1].3, false),
        ("lost (target_loss)", RATE_SERIES[2].3, false),
        ("ideal: achieved = requested", REQUESTED_COLOUR, true),
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

/// A number with up to three decimals, trailing zeros removed.
fn plain(v: f64) -> String {
    let s = format!("{v:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" {
        "0".into()
    } else {
        s.to_string()
    }
}

/// A rate with an SI suffix: 2500 -> "2.5k".
fn si(v: f64) -> String {
    let a = v.abs();
    if a >= 1e9 {
        format!("{}G", plain(v / 1e9))
    } else if a >= 1e6 {
        format!("{}M", plain(v / 1e6))
    } else if a >= 1e3 {
        format!("{}k", plain(v / 1e3))
    } else {
        plain(v)
    }
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

    /// Legend entries: (label, colour, dashed).
    fn legend(&mut self, entries: &[(&str, &str, bool)]) {
        let _ = writeln!(self.body, r#"<g id="legend">"#);
        for (i, (label, colour, dashed)) in entries.iter().enumerate() {
            let y = PLOT_TOP + 10.0 + i as f64 * 20.0;
            let dash = if *dashed { r#" stroke-dasharray="6,4""# } else { "" };
            let _ = writeln!(
                self.body,
                r#"<line x1="{LEGEND_X:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="{colour}" stroke-width="2"{dash}/>"#,
                LEGEND_X + 24.0
            );
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
                name: name.to_string(),
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
        assert!(svg.contains(r#"viewBox="0 0 800 450""#));
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
