//! `scanprof sweep`: runs a command once per requested rate (the rate substituted for `{}`),
//! each step a bounded profiled session as `run` makes it, and shows the steps side by side
//! with the knee (analysis::knee). With `--lab`, it makes a private lab first and sends the
//! reference sender (or runs the command) in it, taking the lab's own counts around each step.

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::{bail, Context};

use crate::analysis::knee::{geometric_rates, knee, LabCounts, SweepStep, KEEP_TOLERANCE};
use crate::cli::{RunOptions, Scenario, SweepOptions, MAX_SWEEP_STEPS};
use crate::netlab::{Lab, LabConfig, TbfConfig, UdpSink};
use crate::session::{self, Target, Update};
use crate::views::export::{bundle, plots, Recording};
use crate::views::sweep::{self as view, SweepSummary};

/// Seconds a lab step may outlast the sender's own --duration before the session ends it.
const LAB_GRACE_S: f64 = 10.0;
/// UDP port of the lab receiver.
const SINK_PORT: u16 = 9000;
/// Where the rate goes in the command.
const RATE_SLOT: &str = "{}";
/// Where the lab's receiver address goes in a command run in the lab.
const TARGET_SLOT: &str = "{target}";
/// The sweep bundle's files (each step's event stream is `step-NN-RATEpps.ndjson`).
pub const SWEEP_EVENTS: &str = "sweep.ndjson";
pub const SWEEP_MD: &str = "sweep.md";
pub const SWEEP_SVG: &str = "sweep.svg";

/// The rates to request, in order: `--rates`, or `--from/--to/--steps`; every one checked
/// against `--max-rate`, which only a lab sweep may leave out.
pub fn plan(o: &SweepOptions) -> anyhow::Result<Vec<f64>> {
    let rates = match (o.from, o.to, o.steps) {
        (Some(f), Some(t), Some(n)) => {
            if t < f {
                bail!("--to ({t}) is below --from ({f}): give the lowest rate first");
            }
            geometric_rates(f, t, n as usize)
        }
        _ => o.rates.clone(),
    };
    if rates.is_empty() {
        bail!("no rates to sweep: give --rates A,B,... or --from A --to B --steps N");
    }
    if rates.len() > MAX_SWEEP_STEPS {
        bail!(
            "{} rates is more than the {MAX_SWEEP_STEPS} steps a sweep may have",
            rates.len()
        );
    }
    match o.max_rate {
        Some(max) => {
            let over: Vec<String> = rates
                .iter()
                .filter(|r| **r > max)
                .map(|r| r.to_string())
                .collect();
            if !over.is_empty() {
                bail!(
                    "rate(s) {} exceed --max-rate {max}: the sweep never requests more than \
                     --max-rate; raise it or leave those rates out",
                    over.join(", ")
                );
            }
        }
        None if !o.lab => bail!(
            "--max-rate PPS is required unless the sweep sends into a lab it makes (--lab): it is \
             the most the sweep will ever ask the command for, checked before anything runs"
        ),
        None => {}
    }
    if o.command.is_empty() && !o.lab {
        bail!(
            "give the command after `--`, with {{}} where the rate goes (or --lab for the reference sender)"
        );
    }
    if !o.command.is_empty() && !o.command.iter().any(|w| w.contains(RATE_SLOT)) {
        bail!(
            "the command has no {{}}: put {{}} where the rate goes, e.g. \
             `scanprof sweep --rates 1000,5000 --max-rate 5000 -- masscan --rate {{}} ...`"
        );
    }
    if !o.lab && o.command.iter().any(|w| w.contains(TARGET_SLOT)) {
        bail!("{{target}} names the lab's receiver: it needs --lab");
    }
    Ok(rates)
}

/// The rate as the command line gets it: a whole number when it is one.
fn rate_word(r: f64) -> String {
    if r.fract() == 0.0 {
        format!("{r:.0}")
    } else {
        r.to_string()
    }
}

/// `template` with `{}` replaced by the rate (and `{target}` by `target`).
pub fn substitute(template: &[String], rate: f64, target: Option<&str>) -> Vec<String> {
    template
        .iter()
        .map(|w| {
            let w = match target {
                Some(t) => w.replace(TARGET_SLOT, t),
                None => w.clone(),
            };
            w.replace(RATE_SLOT, &rate_word(rate))
        })
        .collect()
}

/// The lab a sweep makes, and where its sender runs.
struct SweepLab {
    lab: Lab,
    /// keeps this process's threads off the sender's CPU while it lives
    placement: crate::lab::sender::Placement,
    exe: std::path::PathBuf,
}

impl SweepLab {
    fn create(o: &SweepOptions) -> anyhow::Result<SweepLab> {
        for ns in crate::netlab::remove_dead_labs() {
            eprintln!("scanprof: removed namespace {ns}, left by a lab whose scanprof is gone");
        }
        let tbf = o.tbf_rate.as_ref().map(|r| TbfConfig {
            rate: r.clone(),
            burst: o.tbf_burst.clone(),
            limit: o.tbf_limit.clone(),
        });
        let lab = Lab::create_watched(&LabConfig { tbf })?;
        Ok(SweepLab {
            lab,
            placement: crate::lab::sender::Placement::choose()?,
            exe: std::env::current_exe().context("finding the scanprof binary")?,
        })
    }

    /// The step's command: the reference sender at `rate` for `duration_s`, or the user's
    /// command inside the sender namespace.
    fn argv(&self, o: &SweepOptions, rate: f64) -> Vec<String> {
        if o.command.is_empty() {
            let mut stage = crate::lab::scenario::staging(Scenario::Healthy);
            stage.size = o.size as usize;
            stage.port = SINK_PORT;
            crate::lab::sender::sender_argv(
                &self.lab,
                &stage,
                self.placement.sender_cpu,
                &self.exe,
                rate,
                o.duration,
            )
        } else {
            let target = self.lab.target_addr.to_string();
            let mut argv: Vec<String> = ["ip", "netns", "exec", &self.lab.sender_ns]
                .map(String::from)
                .to_vec();
            argv.extend(substitute(&o.command, rate, Some(&target)));
            argv
        }
    }

    /// The root qdisc's (sent, drops) so far.
    fn qdisc(&self) -> (u64, u64) {
        self.lab
            .sender_qdisc()
            .ok()
            .and_then(|q| q.into_iter().find(|q| q.parent.is_none()))
            .map_or((0, 0), |q| (q.sent_packets, q.drops))
    }
}

/// Runs one step: a session on `argv` at `rate`, its updates taken into a Recording (every
/// tick when the sweep exports, else the latest).
/// Where a step stands in the sweep: shown on stderr while it runs when stderr is a terminal.
struct StepPlace {
    /// 1-based
    step: usize,
    of: usize,
    live: bool,
}

fn run_step(
    o: &SweepOptions,
    argv: Vec<String>,
    rate: f64,
    stop: &Arc<AtomicBool>,
    keep_ticks: bool,
    place: &StepPlace,
) -> anyhow::Result<Recording> {
    let run_opts = RunOptions {
        interval: o.interval,
        duration: Some(if o.lab && o.command.is_empty() {
            o.duration + LAB_GRACE_S
        } else {
            o.duration
        }),
        requested: Some(rate),
        profile: o
            .profile
            .clone()
            .or_else(|| (o.lab && o.command.is_empty()).then(|| "scanprof-send".to_string())),
        per_packet: None,
        json: true,
        no_tui: true,
        exit_at_end: false,
        baseline: false,
        baseline_pacer: crate::wrappers::PacerKind::Tsc,
        baseline_seconds: 2.0,
        export: None,
        force: false,
        redact: false,
        pcap: None,
        map_size: Vec::new(),
        bpf_stats: crate::cli::BpfStatsArg::Sampled,
        syscall_hooks: crate::cli::SyscallHooksArg::PerCall,
        device_stages: crate::cli::DeviceStagesArg::Exact,
        sample_above: None,
        recv_classes: Vec::new(),
        relay_fanout: None,
        quiet: false,
        metrics: None,
        metrics_file: None,
        metrics_linger: 0.0,
        run_id: None,
        user: None,
    };
    // The command's stdout goes to stderr: stdout carries the sweep's table or NDJSON.
    let cfg = crate::run::session_config(
        Target::Command(argv.into_iter().map(Into::into).collect()),
        &run_opts,
        crate::run::Output::Json,
    )?;
    let mut rec = Recording::new(crate::run::render::meta_now());
    let session = session::start(cfg, Arc::clone(stop))?;
    rec.meta.drop_reasons = session.drop_reasons.clone();
    for u in session.updates.iter() {
        if let Update::Started { probes, .. } = &u {
            for p in probes.iter().filter(|p| !p.attached) {
                eprintln!(
                    "scanprof: warning: probe {} unavailable: {}",
                    p.name,
                    p.error.as_deref().unwrap_or("?")
                );
            }
        }
        if let (true, Update::Tick(snap)) = (place.live, &u) {
            // One line, rewritten in place (\r, then erase to its end).
            eprint!(
                "\r{}\x1b[K",
                view::running_line(
                    place.step,
                    place.of,
                    rate,
                    snap.t_s,
                    run_opts.duration.unwrap_or(o.duration),
                    snap.achieved_pps
                )
            );
        }
        if keep_ticks {
            rec.apply(&u);
        } else {
            rec.apply_latest(&u);
        }
    }
    if place.live {
        eprint!("\r\x1b[K");
    }
    session.join()?;
    rec.summary.as_ref().context("the step ended without a summary")?;
    Ok(rec)
}

/// The sweep bundle: each step's events as it ends, and sweep.ndjson, sweep.md and sweep.svg
/// rewritten after every step (so an interrupted sweep leaves a whole bundle of what ran).
struct SweepBundle {
    dir: bundle::BundleDir,
    meta: crate::views::export::Meta,
}

impl SweepBundle {
    fn step(&self, s: &SweepStep, rec: &Recording) -> anyhow::Result<()> {
        let name = format!("step-{:02}-{}pps.ndjson", s.step, rate_word(s.requested_pps));
        self.dir
            .write_file(&name, bundle::events_ndjson(rec).as_bytes())?;
        Ok(())
    }

    fn sweep(&self, steps: &[SweepStep], sum: &SweepSummary) -> anyhow::Result<()> {
        let mut events = crate::views::json::line("meta", &self.meta) + "\n";
        for s in steps {
            events += &(view::step_line(s) + "\n");
        }
        events += &(view::summary_line(sum) + "\n");
        self.dir.write_file(SWEEP_EVENTS, events.as_bytes())?;
        let points: Vec<(f64, f64, f64)> = steps
            .iter()
            .map(|s| {
                let lost_pps = if s.send_window_s > 0.0 {
                    s.lost as f64 / s.send_window_s
                } else {
                    0.0
                };
                (s.requested_pps, s.achieved_pps, lost_pps)
            })
            .collect();
        self.dir
            .write_file(SWEEP_SVG, plots::sweep_svg(&points).as_bytes())?;
        self.dir
            .write_file(SWEEP_MD, view::table_md(steps, sum, Some(SWEEP_SVG)).as_bytes())?;
        Ok(())
    }
}

pub fn run(o: &SweepOptions) -> anyhow::Result<ExitCode> {
    let rates = plan(o)?;
    {
        use crate::system::caps::{self, CAP_BPF, CAP_NET_ADMIN, CAP_PERFMON, CAP_SYS_ADMIN};
        let mut need = vec![CAP_BPF, CAP_PERFMON];
        if o.lab {
            need.extend([CAP_SYS_ADMIN, CAP_NET_ADMIN]);
        }
        let missing = caps::missing(&need);
        if !missing.is_empty() {
            bail!(
                "scanprof sweep needs root: it loads BPF programs{} (missing {}). Run it with sudo",
                if o.lab {
                    " and creates network namespaces"
                } else {
                    ""
                },
                caps::names(&missing)
            );
        }
    }
    // Before anything runs: a directory that cannot take the bundle is refused first.
    let export = o
        .export
        .as_ref()
        .map(|d| {
            Ok::<_, anyhow::Error>(SweepBundle {
                dir: bundle::BundleDir::open(d, false)?,
                meta: crate::run::render::meta_now(),
            })
        })
        .transpose()?;
    let stop = crate::run::stop_flag()?;
    let lab = if o.lab { Some(SweepLab::create(o)?) } else { None };
    let mut steps: Vec<SweepStep> = Vec::new();
    let mut failure = None;
    let summary_of = |steps: &[SweepStep], interrupted: bool| SweepSummary {
        requested_rates: rates.clone(),
        steps_run: steps.len(),
        interrupted,
        step_duration_s: o.duration,
        max_rate: o.max_rate,
        keep_tolerance: KEEP_TOLERANCE,
        knee: knee(steps),
    };
    let mut stdout = std::io::stdout().lock();
    for (i, &rate) in rates.iter().enumerate() {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let argv = match &lab {
            Some(l) => l.argv(o, rate),
            None => substitute(&o.command, rate, None),
        };
        if !o.quiet {
            eprintln!(
                "scanprof sweep: step {}/{} at {} pps for {} s: {}",
                i + 1,
                rates.len(),
                rate_word(rate),
                o.duration,
                argv.join(" ")
            );
        }
        let before = lab.as_ref().map(SweepLab::qdisc);
        let sink: Option<UdpSink> = match &lab {
            Some(l) if o.command.is_empty() => Some(l.lab.udp_sink(SINK_PORT)?),
            _ => None,
        };
        let place = StepPlace {
            step: i + 1,
            of: rates.len(),
            live: !o.quiet && std::io::stderr().is_terminal(),
        };
        let rec = match run_step(o, argv, rate, &stop, export.is_some(), &place) {
            Ok(rec) => rec,
            Err(e) => {
                failure = Some(e.context(format!("step {} at {} pps", i + 1, rate_word(rate))));
                break;
            }
        };
        let Some(summary) = rec.summary.as_ref() else {
            break;
        };
        let mut step = SweepStep::of(i + 1, rate, summary);
        if let (Some(l), Some((sent0, drops0))) = (&lab, before) {
            // The last packets drain through the tbf's queue (10 kB at 2 Mbit/s: 40 ms).
            std::thread::sleep(std::time::Duration::from_millis(200));
            let (sent, drops) = l.qdisc();
            step.lab = Some(LabCounts {
                receiver_packets: sink.map(|s| s.stop().packets).unwrap_or(0),
                qdisc_sent: sent.saturating_sub(sent0),
                qdisc_drops: drops.saturating_sub(drops0),
            });
        }
        if !o.quiet {
            eprintln!("{}", view::progress_line(&step, rates.len()));
        }
        if o.json {
            let _ = writeln!(stdout, "{}", view::step_line(&step));
            let _ = stdout.flush();
        }
        steps.push(step);
        if let Some(b) = &export {
            let interrupted = stop.load(Ordering::Relaxed);
            b.step(steps.last().expect("just pushed"), &rec)?;
            b.sweep(&steps, &summary_of(&steps, interrupted))?;
        }
    }
    let interrupted = stop.load(Ordering::Relaxed);
    let sum = summary_of(&steps, interrupted);
    if o.json {
        let _ = writeln!(stdout, "{}", view::summary_line(&sum));
    } else {
        let _ = write!(stdout, "{}", view::table_text(&steps, &sum));
    }
    let _ = stdout.flush();
    drop(stdout);
    if let Some(b) = &export {
        b.sweep(&steps, &sum)?;
        eprintln!(
            "scanprof: sweep bundle written to {} ({} step streams, {SWEEP_EVENTS}, {SWEEP_MD}, {SWEEP_SVG})",
            b.dir.path.display(),
            steps.len()
        );
    }
    if let Some(l) = lab {
        drop(l.placement);
        l.lab.destroy()?;
    }
    if let Some(e) = failure {
        return Err(e.context("the sweep stopped; the table above holds the steps before it"));
    }
    Ok(if interrupted {
        ExitCode::from(130)
    } else {
        ExitCode::SUCCESS
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn opts(args: &[&str]) -> SweepOptions {
        let cli = crate::cli::Cli::try_parse_from(["scanprof", "sweep"].iter().chain(args.iter()).copied())
            .unwrap();
        match cli.command {
            crate::cli::Command::Sweep(o) => o,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_rate_goes_where_the_braces_are() {
        let t: Vec<String> = ["masscan", "--rate", "{}", "--banner={}x", "{target}"]
            .map(String::from)
            .to_vec();
        assert_eq!(
            substitute(&t, 5000.0, Some("10.99.0.2")),
            ["masscan", "--rate", "5000", "--banner=5000x", "10.99.0.2"]
        );
        assert_eq!(substitute(&t, 2.5, None)[2], "2.5");
    }

    #[test]
    fn max_rate_is_required_without_a_lab_and_never_exceeded() {
        let e = plan(&opts(&["--rates", "1000,5000", "--", "x", "{}"])).unwrap_err();
        assert!(e.to_string().contains("--max-rate"), "{e}");
        let e = plan(&opts(&[
            "--rates",
            "1000,5000",
            "--max-rate",
            "4000",
            "--",
            "x",
            "{}",
        ]))
        .unwrap_err();
        assert!(
            e.to_string().contains("5000") && e.to_string().contains("exceed"),
            "{e}"
        );
        assert_eq!(
            plan(&opts(&[
                "--rates",
                "1000,5000",
                "--max-rate",
                "5000",
                "--",
                "x",
                "{}"
            ]))
            .unwrap(),
            [1000.0, 5000.0]
        );
        // A lab sweep's traffic cannot leave the lab: no --max-rate needed, but it is kept.
        assert_eq!(
            plan(&opts(&["--lab", "--rates", "100,200"])).unwrap(),
            [100.0, 200.0]
        );
        assert!(plan(&opts(&["--lab", "--rates", "100,200", "--max-rate", "150"])).is_err());
        let geo = plan(&opts(&[
            "--lab", "--from", "1000", "--to", "16000", "--steps", "5",
        ]))
        .unwrap();
        assert_eq!(geo, [1000.0, 2000.0, 4000.0, 8000.0, 16000.0]);
    }

    #[test]
    fn a_command_without_braces_or_a_lab_slot_without_a_lab_is_refused() {
        let e = plan(&opts(&["--rates", "10", "--max-rate", "10", "--", "x", "5"])).unwrap_err();
        assert!(e.to_string().contains("no {}"), "{e}");
        let e = plan(&opts(&[
            "--rates",
            "10",
            "--max-rate",
            "10",
            "--",
            "x",
            "{}",
            "{target}",
        ]))
        .unwrap_err();
        assert!(e.to_string().contains("--lab"), "{e}");
        assert!(plan(&opts(&["--rates", "10", "--max-rate", "10"])).is_err());
        // clap: --rates and --from exclude each other; --tbf-rate needs --lab.
        let parse =
            |a: &[&str]| crate::cli::Cli::try_parse_from(["scanprof", "sweep"].iter().chain(a).copied());
        assert!(parse(&["--rates", "1", "--from", "1", "--to", "2", "--steps", "2", "--lab"]).is_err());
        assert!(parse(&["--rates", "1", "--tbf-rate", "2mbit"]).is_err());
        assert!(parse(&["--lab", "--from", "1", "--to", "2", "--steps", "1"]).is_err());
    }
}
