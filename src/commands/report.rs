//! `scanprof report PATH`: re-renders a bundle's summary as text, markdown or JSON, without root
//! and without the machine it was recorded on. Lines it cannot read are named on stderr; what
//! it can read is still reported.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;

use crate::cli::ReportFormat;
use crate::views::export::{bundle, markdown, Recording};
use crate::views::{json, text};

pub fn run(path: &Path, format: ReportFormat) -> anyhow::Result<ExitCode> {
    let (rec, issues) = bundle::read(path)?;
    // Each line that could not be read is named first, also when nothing is left to report:
    // a summary that did not decode is why there is none.
    for i in &issues {
        eprintln!("scanprof: {i}");
    }
    // Checked before the report is printed: every format fails alike on a bundle with nothing
    // to report.
    if rec.summary.is_none() && rec.ticks.is_empty() {
        let why = if issues.is_empty() {
            "the run ended before its first tick, or the file is not a whole recording"
        } else {
            "the lines named above could not be read"
        };
        anyhow::bail!(
            "{} holds neither a summary nor a tick ({why}): nothing to report",
            path.display()
        );
    }
    if !issues.is_empty() {
        eprintln!(
            "scanprof: {} line(s) skipped; the report covers what could be read",
            issues.iter().map(|i| i.lines).sum::<usize>()
        );
    }
    print!("{}", render(&rec, path, format)?);
    Ok(if issues.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(3)
    })
}

/// The report in the asked format; without a summary (a run cut short), the last tick.
pub fn render(rec: &Recording, path: &Path, format: ReportFormat) -> anyhow::Result<String> {
    let dir = if path.is_dir() {
        path
    } else {
        path.parent().unwrap_or(Path::new("."))
    };
    Ok(match format {
        ReportFormat::Json => match &rec.summary {
            Some(s) => json::line("summary", s) + "\n",
            None => json::line("sample", rec.ticks.last().context("the bundle holds no tick")?) + "\n",
        },
        ReportFormat::Text => match &rec.summary {
            Some(s) => text::summary(s),
            None => {
                let last = rec
                    .ticks
                    .last()
                    .context("the bundle holds neither a summary nor a tick")?;
                let why = if rec.meta.exported_mid_run {
                    "it was written from the live view (`e`) while the run went on"
                } else {
                    "the run was cut short"
                };
                format!(
                    "no summary in this bundle ({why}); its last tick of {}:\n{}\n",
                    rec.ticks.len(),
                    text::tick_line(last)
                )
            }
        },
        ReportFormat::Md => {
            let system = bundle::read_system(dir);
            let part = |k: &str| {
                system
                    .as_ref()
                    .and_then(|s| s.get(k))
                    .filter(|v| !v.is_null())
                    .cloned()
            };
            let plots: Vec<(&str, &str)> = [
                (bundle::RATES_SVG, "packets per second over time, per stage"),
                (
                    bundle::GAPS_SVG,
                    "inter-send gaps against the requested slot (CDF)",
                ),
            ]
            .into_iter()
            // Only plots that are regular files of this bundle (not links out of it).
            .filter(|(f, _)| std::fs::symlink_metadata(dir.join(f)).is_ok_and(|m| m.is_file()))
            .collect();
            if rec.summary.is_none() && rec.ticks.is_empty() {
                anyhow::bail!("the bundle holds neither a summary nor a tick");
            }
            markdown::report_md(rec, part("machine").as_ref(), part("checks").as_ref(), &plots)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bundle the live view's `e` key wrote mid-run has no summary by design: the text and
    /// markdown reports say so, not that the run was cut short; one without the mark still is.
    #[test]
    fn a_bundle_exported_mid_run_is_not_called_cut_short() {
        let mut rec = crate::views::fixtures::rich_recording();
        rec.summary = None;
        let path = Path::new("/nonexistent-bundle/events.ndjson");
        let cut = render(&rec, path, ReportFormat::Text).unwrap();
        assert!(cut.contains("(the run was cut short)"), "{cut}");
        rec.meta.exported_mid_run = true;
        let mid = render(&rec, path, ReportFormat::Text).unwrap();
        assert!(
            mid.contains("written from the live view (`e`) while the run went on")
                && !mid.contains("cut short"),
            "{mid}"
        );
        let md = render(&rec, path, ReportFormat::Md).unwrap();
        assert!(
            md.contains("written from the live view (`e`) while the run went on"),
            "{md}"
        );
        // The mark survives the bundle's events.ndjson.
        let line = crate::views::json::line("meta", &rec.meta);
        assert!(line.contains("\"exported_mid_run\":true"), "{line}");
    }
}
