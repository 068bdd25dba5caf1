//! How `scanprof compare` shows a `Comparison`: a table of figures (A, B, B - A) and the causes
//! that appeared, grew, shrank or went away, as text, markdown or one JSON object.

use std::fmt::Write as _;

use serde::Serialize;

use crate::analysis::compare::{CauseChange, CauseRow, Comparison, FigureRow};
use crate::analysis::verdict::LOSS_SHARE_OF;
use crate::views::json;

/// What one side of a comparison was: where its bundle is, the command line that recorded it
/// and the scanner it profiled (from the bundle's meta line and summary).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Side {
    /// the bundle as named on the command line
    pub path: String,
    /// scanprof's command line that wrote the bundle (empty when its meta line was unreadable)
    pub command_line: Vec<String>,
    /// the scanner profile the run used (`masscan`, `generic`...); none for a sweep or a run
    /// no profile applied to
    pub profile: Option<String>,
    /// the command names of the processes named at attach or started (`masscan`), as recorded
    pub scanner: Vec<String>,
}

impl Side {
    /// The lines under the bundle's name: its command line and scanner, each shown as
    /// [`visible`](crate::views::report::visible) (a bundle's strings may hold anything).
    fn described(&self) -> Vec<String> {
        use crate::views::report::visible;
        let mut o = Vec::new();
        if !self.command_line.is_empty() {
            o.push(format!("command: {}", visible(&self.command_line.join(" "))));
        }
        let scanner = self
            .scanner
            .iter()
            .map(|c| visible(c).into_owned())
            .collect::<Vec<_>>();
        match (&self.profile, scanner.is_empty()) {
            (Some(p), false) => o.push(format!(
                "scanner: {} (profile {})",
                scanner.join(", "),
                visible(p)
            )),
            (Some(p), true) => o.push(format!("scanner: profile {}", visible(p))),
            (None, false) => o.push(format!("scanner: {}", scanner.join(", "))),
            (None, true) => {}
        }
        o
    }
}

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

/// A row's three cells (A, B, B - A), an estimate marked `≈` (so is a difference with one).
fn cells(f: &FigureRow) -> [String; 3] {
    let mark = |estimate: bool, v: Option<f64>, cell: String| {
        if estimate && v.is_some() {
            format!("≈{cell}")
        } else {
            cell
        }
    };
    [
        mark(f.a_estimate, f.a, num(f.a)),
        mark(f.b_estimate, f.b, num(f.b)),
        mark(f.a_estimate || f.b_estimate, f.diff, signed(f.diff)),
    ]
}

/// What `≈` means, when a row has one.
fn estimate_note(c: &Comparison) -> Option<String> {
    let sides: Vec<&str> = [
        ("A", c.figures.iter().any(|f| f.a_estimate)),
        ("B", c.figures.iter().any(|f| f.b_estimate)),
    ]
    .into_iter()
    .filter_map(|(side, any)| any.then_some(side))
    .collect();
    (!sides.is_empty()).then(|| {
        format!(
            "≈: an estimate: {} counted the device stages in sampled windows (--device-stages sampled, or auto above its rate) and scaled them to the run",
            sides.join(" and ")
        )
    })
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
pub fn text(c: &Comparison, a: &Side, b: &Side) -> String {
    let mut o = String::new();
    for (label, side) in [("compare  A", a), ("         B", b)] {
        let _ = writeln!(o, "{label}: {}", crate::views::report::visible(&side.path));
        for line in side.described() {
            let _ = writeln!(o, "            {line}");
        }
    }
    o.push('\n');
    let w = c.figures.iter().map(|f| f.figure.len()).max().unwrap_or(6).max(6);
    let cells: Vec<[String; 3]> = c.figures.iter().map(cells).collect();
    let cw: Vec<usize> = (0..3)
        .map(|i| {
            cells
                .iter()
                .map(|r| r[i].chars().count())
                .chain([5])
                .max()
                .unwrap_or(5)
        })
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
    for n in [loss_share_note(c), estimate_note(c)].into_iter().flatten() {
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
pub fn markdown(c: &Comparison, a: &Side, b: &Side) -> String {
    let esc = |s: &str| {
        crate::views::report::visible(s)
            .replace('|', "\\|")
            .replace('`', "'")
    };
    let mut o = String::from("# Comparison\n\n");
    for (label, side) in [("A", a), ("B", b)] {
        let _ = writeln!(o, "- {label}: `{}`", esc(&side.path));
        for line in side.described() {
            let (what, value) = line.split_once(": ").unwrap_or(("", &line));
            let _ = writeln!(o, "  - {what}: `{}`", esc(value));
        }
    }
    o.push('\n');
    o += "| figure | A | B | B - A |\n|---|---:|---:|---:|\n";
    for f in &c.figures {
        let [a, b, d] = cells(f);
        let _ = writeln!(o, "| {} | {a} | {b} | {d} |", esc(&f.figure));
    }
    for n in [loss_share_note(c), estimate_note(c)].into_iter().flatten() {
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
    /// what each side was: its command line, profile and scanner
    a_run: &'a Side,
    b_run: &'a Side,
    #[serde(flatten)]
    comparison: &'a Comparison,
}

/// The comparison as one NDJSON `compare` line.
pub fn json_line(c: &Comparison, a: &Side, b: &Side) -> String {
    json::line(
        "compare",
        &Labelled {
            a: &a.path,
            b: &b.path,
            a_run: a,
            b_run: b,
            comparison: c,
        },
    )
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

    fn sides() -> (Side, Side) {
        let side = |path: &str, rate: &str, profile: Option<&str>| Side {
            path: path.into(),
            command_line: ["scanprof", "record", "-o", path, "--", "masscan", "--rate", rate]
                .map(String::from)
                .to_vec(),
            profile: profile.map(String::from),
            scanner: vec!["masscan".into()],
        };
        (
            side("before", "1000", Some("masscan")),
            side("after", "20000\x1b]0;t\x07", None),
        )
    }

    /// Each side is named by its command line and scanner, not only its directory; a
    /// bundle's strings are shown, not sent to the terminal.
    #[test]
    fn both_sides_are_named_by_command_line_and_scanner() {
        let c = pair();
        let (a, b) = sides();
        let t = text(&c, &a, &b);
        assert!(
            t.contains("command: scanprof record -o before -- masscan --rate 1000\n"),
            "{t}"
        );
        assert!(t.contains("scanner: masscan (profile masscan)\n"), "{t}");
        assert!(
            t.contains("--rate 20000\\u{1b}]0;t\\u{7}\n") && t.contains("scanner: masscan\n"),
            "{t}"
        );
        let md = markdown(&c, &a, &b);
        assert!(
            md.contains("  - command: `scanprof record -o after -- masscan --rate 20000\\u{1b}]0;t\\u{7}`"),
            "{md}"
        );
        assert!(md.contains("  - scanner: `masscan (profile masscan)`"), "{md}");
        let j = json_line(&c, &a, &b);
        assert!(
            j.contains("\"a_run\":{") && j.contains("\"profile\":\"masscan\""),
            "{j}"
        );
        assert!(!t.contains('\x1b') && !md.contains('\x1b'), "{t}{md}");
    }

    #[test]
    fn text_and_markdown_show_each_figure_and_cause() {
        let c = pair();
        let (a, b) = sides();
        let t = text(&c, &a, &b);
        assert!(t.contains("A: before") && t.contains("B: after"), "{t}");
        assert!(
            t.lines()
                .any(|l| l.trim_start().starts_with("achieved_pps") && l.ends_with("+50.0")),
            "{t}"
        );
        let md = markdown(&c, &a, &b);
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

    /// A run that sampled its device stages (B here) has estimates at those stages: each such
    /// value and its difference is marked `≈` and the note says whose; the syscall stage and
    /// every other figure stay plain, and A's values too.
    #[test]
    fn a_sampled_runs_device_stage_figures_are_marked_as_estimates() {
        let (_, a) = crate::views::fixtures::rich_run();
        let mut b = a.clone();
        b.device_sampling = Some(crate::collect::device_window::DeviceSampling::tenth_of_each_second(3));
        let c = runs(&a, &b);
        let device: Vec<&FigureRow> = c.figures.iter().filter(|f| f.b_estimate).collect();
        let names: Vec<&str> = device.iter().map(|f| f.figure.as_str()).collect();
        assert!(
            names.contains(&"stage.dev_xmit_pps") && names.contains(&"xmit_packets"),
            "{names:?}"
        );
        assert!(
            !names
                .iter()
                .any(|n| n.contains("syscall") || n.contains("send_calls")),
            "{names:?}"
        );
        assert!(c.figures.iter().all(|f| !f.a_estimate), "{c:?}");
        let (sa, sb) = sides();
        let t = text(&c, &sa, &sb);
        let line = |name: &str| {
            t.lines()
                .find(|l| l.trim_start().starts_with(&format!("{name} ")))
                .unwrap_or_else(|| panic!("no {name} in {t}"))
                .to_string()
        };
        let xmit = line("xmit_packets");
        assert_eq!(xmit.matches('≈').count(), 2, "B and B - A: {xmit}");
        assert!(!line("stage.syscall_packets_pps").contains('≈'), "{t}");
        let note = "≈: an estimate: B counted the device stages in sampled windows (--device-stages sampled, or auto above its rate) and scaled them to the run";
        assert!(t.contains(note), "{t}");
        let md = markdown(&c, &sa, &sb);
        assert!(md.contains(note) && md.contains("| xmit_packets | "), "{md}");
        assert!(json_line(&c, &sa, &sb).contains("\"b_estimate\":true"));
        // Neither sampled: no mark, no note.
        let plain = text(&runs(&a, &a), &sa, &sb);
        assert!(!plain.contains('≈'), "{plain}");
    }

    #[test]
    fn every_compare_json_key_is_documented_in_events_md() {
        let mut c = pair();
        c.unmatched_rates.push(1.0);
        c.causes[0].at_pps = Some(1000.0);
        let (a, b) = sides();
        let keys = crate::views::json::documented_keys(&[json_line(&c, &a, &b)], "compare");
        assert!(keys.contains("figures") && keys.contains("a_share"));
    }
}
