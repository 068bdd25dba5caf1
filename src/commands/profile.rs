//! `scanprof attach`, `run` and `record`: a session rendered headless, as NDJSON or text, or
//! in the live view; the run machinery they share with `lab` and `sweep` is `crate::run`.

use std::process::ExitCode;

use anyhow::bail;

use crate::cli::RunOptions;
use crate::run::render::{check_pcap_path, write_pcap};
use crate::run::{exit_code_of, measure_baseline, refused_target, render_with, session_config, stop_flag};
use crate::run::{ExportTarget, Output};
use crate::session::Target;
use crate::views::metrics::MetricsTargets;

/// `scanprof attach -p PID...`.
pub fn attach(pids: &[u32], allow_system: bool, opts: &RunOptions) -> anyhow::Result<ExitCode> {
    for &pid in pids {
        if let Some(why) = refused_target(pid, allow_system) {
            bail!("{why}");
        }
    }
    run(Target::Pids(pids.to_vec()), opts)
}

/// `scanprof record -o DIR`: attach (with -p) or run (with a command), always exporting.
pub fn record(
    pids: &[u32],
    allow_system: bool,
    command: &[std::ffi::OsString],
    opts: &RunOptions,
) -> anyhow::Result<ExitCode> {
    if opts.export.is_none() {
        bail!("record writes a bundle: give its directory with -o DIR");
    }
    for &pid in pids {
        if let Some(why) = refused_target(pid, allow_system) {
            bail!("{why}");
        }
    }
    let target = match (pids.is_empty(), command.is_empty()) {
        (false, true) => Target::Pids(pids.to_vec()),
        (true, false) => Target::Command(command.to_vec()),
        _ => bail!("give either -p PID (to attach) or `-- COMMAND` (to run), not both or neither"),
    };
    run(target, opts)
}

pub fn run(target: Target, opts: &RunOptions) -> anyhow::Result<ExitCode> {
    let output = if opts.quiet && !opts.json {
        Output::Quiet
    } else {
        Output::choose(opts.json, opts.no_tui)
    };
    let mut cfg = session_config(target, opts, output)?;
    if opts.baseline {
        cfg.baseline = Some(measure_baseline(opts, cfg.scanner.as_ref())?);
    }
    let export_to = opts
        .export
        .as_ref()
        .map(|dir| ExportTarget::open(dir, opts.redact, opts.force))
        .transpose()?;
    let metrics = MetricsTargets {
        listen: opts.metrics,
        file: opts.metrics_file.clone(),
        linger: std::time::Duration::from_secs_f64(opts.metrics_linger),
        run_id: opts.run_id.clone(),
    };
    if let Some(path) = &opts.pcap {
        check_pcap_path(path)?;
    }
    let rendered = render_with(
        cfg,
        output,
        stop_flag()?,
        export_to.as_ref(),
        &metrics,
        crate::run::ViewOptions {
            title: None,
            exit_at_end: opts.exit_at_end,
        },
    )?;
    if let (Some(path), Some(summary)) = (&opts.pcap, &rendered.rec.summary) {
        write_pcap(path, summary)?;
    }
    Ok(exit_code_of(rendered.status))
}
