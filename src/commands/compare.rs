//! `scanprof compare A B`: reads two bundles with the bundle reader `report` uses (regular
//! files only, size-capped, unreadable lines named and skipped), compares them
//! (analysis::compare) and prints the comparison as text, markdown or JSON. No root needed.
//! A bundle is a run's (events.ndjson) or a sweep's (sweep.ndjson); both must be of one kind.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context};
use serde_json::Value;

use crate::analysis::compare::{self, Comparison};
use crate::analysis::knee::SweepStep;
use crate::analysis::Summary;
use crate::cli::ReportFormat;
use crate::views::compare as view;
use crate::views::export::bundle;

/// The most bytes of a sweep.ndjson that compare reads (50 steps take well under 1 MiB).
pub const MAX_SWEEP_BYTES: u64 = 16 << 20;

/// What a bundle holds.
enum Loaded {
    Run(Box<Summary>),
    Sweep {
        steps: Vec<SweepStep>,
        knee_pps: Option<f64>,
    },
}

/// A bundle as compare read it: its figures, and what it was (command line, scanner).
struct Bundle {
    loaded: Loaded,
    side: view::Side,
}

/// The sweep.ndjson of `path`, if it is a sweep bundle (a directory holding one as a regular
/// file, or the file itself).
fn sweep_file(path: &Path) -> Option<PathBuf> {
    let file = if path.is_dir() {
        path.join(super::sweep::SWEEP_EVENTS)
    } else {
        path.to_path_buf()
    };
    let is_sweep = file.file_name().is_some_and(|n| n == super::sweep::SWEEP_EVENTS);
    (is_sweep && std::fs::symlink_metadata(&file).is_ok_and(|m| !m.is_dir())).then_some(file)
}

/// Reads a sweep's steps and knee; lines it cannot take are named on stderr and skipped.
fn read_sweep(file: &Path) -> anyhow::Result<(Loaded, Vec<String>)> {
    let mut text = String::new();
    bundle::open_regular(file, MAX_SWEEP_BYTES)?
        .read_to_string(&mut text)
        .with_context(|| format!("reading {} (not UTF-8 text?)", file.display()))?;
    let mut steps = Vec::new();
    let mut knee_pps = None;
    let mut summary_seen = false;
    let mut command_line = Vec::new();
    for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let parsed: Result<Value, _> = serde_json::from_str(line);
        let kind = parsed
            .as_ref()
            .ok()
            .and_then(|v| v.get("type")?.as_str().map(String::from));
        match (kind.as_deref(), parsed) {
            (Some("sweep_step"), Ok(v)) => match serde_json::from_value::<SweepStep>(v) {
                Ok(s) => steps.push(s),
                Err(e) => eprintln!(
                    "scanprof: {} line {}: a sweep_step scanprof cannot read: {e}",
                    file.display(),
                    n + 1
                ),
            },
            (Some("sweep"), Ok(v)) => {
                summary_seen = true;
                knee_pps = v.pointer("/knee/knee_pps").and_then(Value::as_f64);
            }
            (Some("meta"), Ok(v)) => {
                command_line = serde_json::from_value::<crate::views::export::Meta>(v)
                    .map(|m| m.command_line)
                    .unwrap_or_default();
            }
            _ => eprintln!(
                "scanprof: {} line {}: not a sweep line (skipped)",
                file.display(),
                n + 1
            ),
        }
    }
    if steps.is_empty() {
        bail!("{} holds no sweep step", file.display());
    }
    if !summary_seen {
        // A sweep cut short before its summary line: the knee from the steps there are.
        knee_pps = crate::analysis::knee::knee(&steps).knee_pps;
    }
    Ok((Loaded::Sweep { steps, knee_pps }, command_line))
}

fn load(path: &Path) -> anyhow::Result<Bundle> {
    let mut side = view::Side {
        path: path.display().to_string(),
        ..view::Side::default()
    };
    if let Some(file) = sweep_file(path) {
        let (loaded, command_line) = read_sweep(&file)?;
        side.command_line = command_line;
        return Ok(Bundle { loaded, side });
    }
    let (rec, issues) = bundle::read(path)?;
    for i in &issues {
        eprintln!("scanprof: {i}");
    }
    let summary = rec.summary.with_context(|| {
        format!(
            "{} has no summary (the run was cut short before it ended): nothing to compare",
            path.display()
        )
    })?;
    side.command_line = rec.meta.command_line.clone();
    side.profile = summary.scanner.as_ref().map(|s| s.profile.clone());
    side.scanner = rec
        .processes
        .iter()
        .filter(|p| p.root)
        .map(|p| p.comm.clone())
        .collect();
    Ok(Bundle {
        loaded: Loaded::Run(Box::new(summary)),
        side,
    })
}

/// The comparison of the bundles at `a` and `b`, and what each was.
pub fn comparison(a: &Path, b: &Path) -> anyhow::Result<(Comparison, view::Side, view::Side)> {
    let (ba, bb) = (load(a)?, load(b)?);
    let c = match (ba.loaded, bb.loaded) {
        (Loaded::Run(x), Loaded::Run(y)) => compare::runs(&x, &y),
        (
            Loaded::Sweep {
                steps: sa,
                knee_pps: ka,
            },
            Loaded::Sweep {
                steps: sb,
                knee_pps: kb,
            },
        ) => compare::sweeps(&sa, ka, &sb, kb),
        _ => bail!(
            "{} and {} are not of one kind: compare two runs' bundles or two sweeps' bundles",
            a.display(),
            b.display()
        ),
    };
    Ok((c, ba.side, bb.side))
}

pub fn run(a: &Path, b: &Path, format: ReportFormat) -> anyhow::Result<ExitCode> {
    let (c, na, nb) = comparison(a, b)?;
    print!(
        "{}",
        match format {
            ReportFormat::Text => view::text(&c, &na, &nb),
            ReportFormat::Md => view::markdown(&c, &na, &nb),
            ReportFormat::Json => view::json_line(&c, &na, &nb) + "\n",
        }
    );
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::views::export::{bundle, Meta, Recording};

    fn tempdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("scanprof-compare-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    /// Two bundles written by the bundle writer and compared through the files.
    #[test]
    fn two_written_bundles_compare_to_their_summaries_figures() {
        let rec = crate::views::fixtures::rich_recording();
        let mut other = rec.clone();
        let s = other.summary.as_mut().unwrap();
        s.achieved_pps *= 0.5;
        let (da, db) = (tempdir("a"), tempdir("b"));
        for (d, r) in [(&da, &rec), (&db, &other)] {
            let dir = bundle::BundleDir::open(d, false).unwrap();
            dir.write_file(bundle::EVENTS, bundle::events_ndjson(r).as_bytes())
                .unwrap();
        }
        let (c, sa, _) = comparison(&da, &db).unwrap();
        assert_eq!(sa.command_line, rec.meta.command_line);
        assert_eq!(
            sa.profile,
            rec.summary
                .as_ref()
                .unwrap()
                .scanner
                .as_ref()
                .map(|s| s.profile.clone())
        );
        let ach = c.figures.iter().find(|f| f.figure == "achieved_pps").unwrap();
        let (x, y) = (
            rec.summary.as_ref().unwrap().achieved_pps,
            other.summary.as_ref().unwrap().achieved_pps,
        );
        assert_eq!((ach.a, ach.b, ach.diff), (Some(x), Some(y), Some(y - x)));
        // A run against a sweep is refused; a symlinked events file is not followed.
        let sweep = tempdir("s");
        std::fs::create_dir_all(&sweep).unwrap();
        let (_, s) = crate::views::fixtures::rich_run();
        let step = SweepStep::of(1, 100.0, &s);
        let text = format!(
            "{}\n{}\n",
            crate::views::json::line("meta", &Meta::default()),
            crate::views::sweep::step_line(&step)
        );
        std::fs::write(sweep.join("sweep.ndjson"), text).unwrap();
        let e = comparison(&da, &sweep).unwrap_err();
        assert!(e.to_string().contains("not of one kind"), "{e}");
        let (c, _, _) = comparison(&sweep, &sweep).unwrap();
        assert!(c.causes.iter().all(|r| r.change == compare::CauseChange::Same));
        let link = tempdir("l");
        std::fs::create_dir_all(&link).unwrap();
        std::os::unix::fs::symlink(da.join(bundle::EVENTS), link.join(bundle::EVENTS)).unwrap();
        let e = comparison(&link, &db).unwrap_err();
        assert!(format!("{e:#}").contains("symbolic link"), "{e:#}");
        let empty = Recording::new(Meta::default());
        let dir = bundle::BundleDir::open(&tempdir("e"), false).unwrap();
        dir.write_file(bundle::EVENTS, bundle::events_ndjson(&empty).as_bytes())
            .unwrap();
        assert!(comparison(&dir.path, &db).is_err());
        for d in [da, db, sweep, link, dir.path.clone()] {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}
