//! `scanprof attach` and `scanprof run`: a session rendered headless, as NDJSON or text.

use std::io::Write;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};

use crate::analysis::Summary;
use crate::cli::RunOptions;
use crate::collect::session::{self, SessionConfig, Target, Update};
use crate::probes::ProbeOptions;
use crate::views::{json, text};

/// Raised by SIGINT or SIGTERM: the session ends and still writes its summary.
pub fn stop_flag() -> anyhow::Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop)).context("installing signal handlers")?;
    }
    Ok(stop)
}

pub fn session_config(target: Target, opts: &RunOptions) -> anyhow::Result<SessionConfig> {
    if !(opts.interval.is_finite() && opts.interval >= 0.01) {
        bail!("--interval must be at least 0.01 seconds");
    }
    if let Some(d) = opts.duration {
        if !(d.is_finite() && d > 0.0) {
            bail!("--duration must be a positive number of seconds");
        }
    }
    if let Some(r) = opts.requested {
        if !(r.is_finite() && r > 0.0) {
            bail!("--requested must be a positive packets-per-second figure");
        }
    }
    Ok(SessionConfig {
        target,
        interval: Duration::from_secs_f64(opts.interval),
        duration: opts.duration.map(Duration::from_secs_f64),
        requested_pps: opts.requested,
        probe_options: ProbeOptions::default(),
    })
}

/// Runs a session to its end, printing as it goes; returns the summary.
pub fn render(cfg: SessionConfig, json_out: bool, stop: Arc<AtomicBool>) -> anyhow::Result<Summary> {
    let session = session::start(cfg, stop)?;
    let mut stdout = std::io::stdout().lock();
    let mut summary = None;
    for update in session.updates.iter() {
        match update {
            Update::Started { processes, probes } => {
                if json_out {
                    let started = serde_json::json!({ "processes": processes, "probes": probes });
                    writeln!(stdout, "{}", json::line("started", &started))?;
                } else {
                    let attached = probes.iter().filter(|p| p.attached).count();
                    eprintln!(
                        "scanprof: {attached} of {} probes attached; following {} process(es): {}",
                        probes.len(),
                        processes.len(),
                        processes
                            .iter()
                            .map(|p| format!("{} ({})", p.pid, p.comm))
                            .collect::<Vec<_>>()
                            .join(", ")
                    );
                    for p in probes.iter().filter(|p| !p.attached) {
                        eprintln!(
                            "scanprof: warning: probe {} unavailable: {}",
                            p.name,
                            p.error.as_deref().unwrap_or("?")
                        );
                    }
                }
            }
            Update::Tick(s) => {
                if json_out {
                    writeln!(stdout, "{}", json::line("sample", &*s))?;
                } else {
                    eprintln!("{}", text::tick_line(&s));
                }
            }
            Update::Done(s) => {
                if json_out {
                    writeln!(stdout, "{}", json::line("summary", &*s))?;
                } else {
                    write!(stdout, "{}", text::summary(&s))?;
                }
                summary = Some(*s);
            }
        }
        stdout.flush()?;
    }
    session.join()?;
    summary.context("the session ended without a summary")
}

pub fn run(target: Target, opts: &RunOptions) -> anyhow::Result<ExitCode> {
    let cfg = session_config(target, opts)?;
    render(cfg, opts.json, stop_flag()?)?;
    Ok(ExitCode::SUCCESS)
}
