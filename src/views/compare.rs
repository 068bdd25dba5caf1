//! How `scanprof compare` shows a `Comparison`: a table of figures (A, B, B - A) and the causes
//! that appeared, grew, shrank or went away, as text, markdown or one JSON object.

use std::fmt::Write as _;

use serde::Serialize;

use crate::analysis::compare::{CauseChange, CauseRow, Comparison};
use crate::analysis::verdict::LOSS_SHARE_OF;
use crate::views::json;

/// A number as a table shows it: whole numbers plain, fractions below 1 to four places.
fn num(v: Option<f64>) -> String {
    match v {
        None => "-".into(),
        Some(v) if v.fract() == 0.0 && v.abs() < 1e15 => format!("{v:.0}"),
        Some(v) if v.abs() < 10.0 => format!("{v:.4}"),
        Some(v) => format!("{v:.1}"),
    }
}

/// A difference with its sign.
fn signed(v: Option<f64>) -> String {
    match v {
        Some(d) if d > 0.0 => format!("+{}", num(Some(d))),
        other => num(other),
    }
}

fn change_word(c: CauseChange) -> &'static str {
    match c {
        CauseChange::Appeared => "appeared",
        CauseChange::Grew => "grew",
        CauseChange::Shrank => "shrank",
        CauseChange::WentAway => "went away",
        CauseChange::Same => "same",
    }
}

fn share(v: Option<f64>) -> String {
    crate::units::or_dash(v, crate::units::pct)
}

/// One cause as a sentence: `qdisc_drop (loss) appeared: - -> 37.9%`.
fn cause_line(r: &CauseRow) -> String {
    format!(
        "{}{} ({}) {}: {} -> {}",
        r.at_pps
            .map_or(String::new(), |p| format!("at {} pps: ", num(Some(p)))),
        r.cause,
        r.kind,
        change_word(r.change),
        share(r.a_share),
        share(r.b_share)
    )
}

/// What `loss_share` is of, when a row shows one (the verdicts' definition).
fn loss_share_note(c: &Comparison) -> Option<String> {
    c.figures
        .iter()
        .any(|f| f.figure.ends_with("loss_share"))
        .then(|| format!("loss_share: lost / handed_packets, the share {LOSS_SHARE_OF}, as in the verdicts"))
}

/// The comparison as text.
pub fn text(c: &Comparison, a: &str, b: &str) -> String {
    let mut o = format!("compare  A: {a}\n         B: {b}\n\n");
    let w = c.figures.iter().map(|f| f.figure.len()).max().unwrap_or(6).max(6);
    let cells: Vec<[String; 3]> = c
        .figures
        .iter()
        .map(|f| [num(f.a), num(f.b), signed(f.diff)])
        .collect();
    let cw: Vec<usize> = (0..3)
        .map(|i| cells.iter().map(|r| r[i].len()).chain([5]).max().unwrap_or(5))
        .collect();
    let _ = writeln!(
        o,
        "  {:<w$}  {:>a$}  {:>b$}  {:>d$}",
        "figure",
        "A",
        "B",
        "B - A",
        a = cw[0],
        b = cw[1],
        d = cw[2]
    );
    for (f, r) in c.figures.iter().zip(&cells) {
        let _ = writeln!(
            o,
            "  {:<w$}  {:>a$}  {:>b$}  {:>d$}",
            f.figure,
            r[0],
            r[1],
            r[2],
            a = cw[0],
            b = cw[1],
            d = cw[2]
        );
    }
    if let Some(n) = loss_share_note(c) {
        let _ = writeln!(o, "  ({n})");
    }
    o += "\ncauses (verdict shares, A -> B):\n";
    if c.causes.is_empty() {
        o += "  none named in either\n";
    }
    for r in &c.causes {
        let _ = writeln!(o, "  {}", cause_line(r));
    }
    if !c.unmatched_rates.is_empty() {
        let r: Vec<String> = c.unmatched_rates.iter().map(|p| num(Some(*p))).collect();
        let _ = writeln!(o, "rates only one sweep ran (not compared): {}", r.join(", "));
    }
    o
}

/// The comparison as markdown.
pub fn markdown(c: &Comparison, a: &str, b: &str) -> String {
    let esc = |s: &str| s.replace('|', "\\|");
    let mut o = format!("# Comparison\n\n- A: `{}`\n- B: `{}`\n\n", esc(a), esc(b));
    o += "| figure | A | B | B - A |\n|---|---:|---:|---:|\n";
    for f in &c.figures {
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} |",
            esc(&f.figure),
            num(f.a),
            num(f.b),
            signed(f.diff)
        );
    }
    if let Some(n) = loss_share_note(c) {
        let _ = writeln!(o, "\n{n}.");
    }
    o += "\n## Causes\n\n| cause | kind | at | A | B | change |\n|---|---|---:|---:|---:|---|\n";
    for r in &c.causes {
        let _ = writeln!(
            o,
            "| `{}` | {} | {} | {} | {} | {} |",
            esc(r.cause.as_str()),
            r.kind,
            r.at_pps.map_or("-".into(), |p| num(Some(p))),
            share(r.a_share),
            share(r.b_share),
            change_word(r.change)
        );
    }
    if !c.unmatched_rates.is_empty() {
        let r: Vec<String> = c.unmatched_rates.iter().map(|p| num(Some(*p))).collect();
        let _ = writeln!(o, "\nRates only one sweep ran (not compared): {}.", r.join(", "));
    }
    o
}

#[derive(Serialize)]
struct Labelled<'a> {
    a: &'a str,
    b: &'a str,
    #[serde(flatten)]
    comparison: &'a Comparison,
}

/// The comparison as one NDJSON `compare` line.
pub fn json_line(c: &Comparison, a: &str, b: &str) -> String {
    json::line("compare", &Labelled { a, b, comparison: c })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::compare::runs;

    fn pair() -> Comparison {
        let (_, a) = crate::views::fixtures::rich_run();
        let mut b = a.clone();
        b.achieved_pps += 50.0;
        b.verdicts
            .retain(|v| v.kind != crate::analysis::verdict::Kind::Loss);
        runs(&a, &b)
    }

    #[test]
    fn text_and_markdown_show_each_figure_and_cause() {
        let c = pair();
        let t = text(&c, "before", "after");
        assert!(t.contains("A: before") && t.contains("B: after"), "{t}");
        assert!(
            t.lines()
                .any(|l| l.trim_start().starts_with("achieved_pps") && l.ends_with("+50.0")),
            "{t}"
        );
        let md = markdown(&c, "before", "after");
        assert!(
            md.contains("| achieved_pps |") && md.contains("| +50.0 |"),
            "{md}"
        );
        // The loss share's denominator is named under the figures, in both.
        let note = "loss_share: lost / handed_packets, the share of the packets handed to the kernel (sent + failed sends)";
        assert!(t.contains(note) && md.contains(note), "{t}\n{md}");
        for r in &c.causes {
            assert!(t.contains(&cause_line(r)), "{t}");
            assert!(md.contains(&format!("| `{}` |", r.cause)), "{md}");
        }
        if c.causes.iter().any(|r| r.change == CauseChange::WentAway) {
            assert!(t.contains("went away"), "{t}");
        }
    }

    #[test]
    fn every_compare_json_key_is_documented_in_events_md() {
        let mut c = pair();
        c.unmatched_rates.push(1.0);
        c.causes[0].at_pps = Some(1000.0);
        let keys = crate::views::json::documented_keys(&[json_line(&c, "a", "b")], "compare");
        assert!(keys.contains("figures") && keys.contains("a_share"));
    }
}
