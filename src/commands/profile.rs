//! `scanprof attach` and `scanprof run`: a session rendered headless, as NDJSON or text.

use std::io::Write;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};

use crate::analysis::ArgvRate;
use crate::cli::{BpfStatsArg, RunOptions};
use crate::collect::bpf_time::StatsPolicy;
use crate::collect::family::ProcessInfo;
use crate::collect::uprobes::PerPacket;
use crate::probes::{ProbeOptions, ProbeStatus};
use crate::session::{
    self, CommandOutput, ScannerSetup, SessionConfig, StatusAt, StatusSetup, Target, Update,
};
use crate::views::export::spool::SpooledRecording;
use crate::views::export::{bundle, Meta, Recording};
use crate::views::metrics::{Exporter, MetricsTargets, RunLabels};
use crate::views::{json, text};
use crate::wrappers::{requested_rate, OutputStream, ProfileSet, ScannerProfile, StatusLocation};
use std::path::{Path, PathBuf};

/// Raised by SIGINT, SIGTERM or SIGHUP (a closed terminal or SSH session): the session ends,
/// ends a launched command, detaches the probes and still writes its summary and bundle.
pub fn stop_flag() -> anyhow::Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ] {
        signal_hook::flag::register(sig, Arc::clone(&stop)).context("installing signal handlers")?;
    }
    Ok(stop)
}

pub fn session_config(target: Target, opts: &RunOptions, output: Output) -> anyhow::Result<SessionConfig> {
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
    let run_as = match (&opts.user, &target) {
        (None, _) => None,
        (Some(_), Target::Pids(_)) => bail!(
            "--user applies to a command scanprof starts (run, or record with a command); \
             attached processes keep their own user"
        ),
        (Some(user), Target::Command(_)) => Some(crate::system::child::RunAs::lookup(user)?),
    };
    let scanner = scanner_setup(&target, opts)?;
    let mut probe_options = ProbeOptions::default();
    for (map, entries) in &opts.map_size {
        probe_options.map_sizes.set(map, *entries);
    }
    if opts.recv_classes.len() > crate::probes::RECV_CLASSES - 1 {
        bail!(
            "--recv-classes takes at most {} lengths ({} classes); got {}",
            crate::probes::RECV_CLASSES - 1,
            crate::probes::RECV_CLASSES,
            opts.recv_classes.len()
        );
    }
    if opts.recv_classes.windows(2).any(|w| w[0] >= w[1]) {
        bail!(
            "--recv-classes lengths must ascend (each class begins where the one before ends): got {:?}",
            opts.recv_classes
        );
    }
    probe_options.recv_class_bounds = opts.recv_classes.clone();
    Ok(SessionConfig {
        command_output: match output {
            Output::Text | Output::Quiet => CommandOutput::Inherit,
            Output::Json => CommandOutput::StdoutToStderr,
            Output::Tui => match &target {
                Target::Command(_) => CommandOutput::File(command_log()?),
                Target::Pids(_) => CommandOutput::Inherit,
            },
        },
        target,
        interval: Duration::from_secs_f64(opts.interval),
        duration: opts.duration.map(Duration::from_secs_f64),
        requested_pps: opts.requested,
        relay_fanout: opts.relay_fanout,
        baseline: None,
        probe_options,
        bpf_stats: match opts.bpf_stats {
            BpfStatsArg::Sampled => StatsPolicy::DEFAULT,
            BpfStatsArg::Always => StatsPolicy::Continuous,
            BpfStatsArg::Off => StatsPolicy::Off,
        },
        scanner,
        run_as,
        keep_also: &[],
    })
}

/// The scanner profile for a target: `--profile` (a name or a file), else the profile that
/// recognises a word of the command line (after wrappers such as `ip netns exec NS`) or the
/// attached process's executable, else the generic fallback. The requested rate is read from the
/// scanner's part of the command line with the profile's semantics.
fn scanner_setup(target: &Target, opts: &RunOptions) -> anyhow::Result<Option<ScannerSetup>> {
    let set = ProfileSet::builtin().context("reading the built-in profiles")?;
    let (argv, exe) = target_argv(target);
    let explicit;
    let (profile, at) = match &opts.profile {
        Some(name) if name.ends_with(".toml") || name.contains('/') => {
            let text = std::fs::read_to_string(name).with_context(|| format!("reading profile {name}"))?;
            explicit = ScannerProfile::parse_named(&text, name)?;
            let at = set
                .find_in_argv(&argv)
                .filter(|(p, _)| p.name == explicit.name)
                .map_or(0, |(_, i)| i);
            (&explicit, at)
        }
        Some(name) => {
            let p = set.get(name).with_context(|| {
                let names: Vec<&str> = set.profiles().iter().map(|p| p.name.as_str()).collect();
                format!(
                    "no profile called {name}: use one of {} or a .toml file",
                    names.join(", ")
                )
            })?;
            // The scanner's words start at the first one this profile recognises.
            let at = argv
                .iter()
                .position(|w| {
                    let base = w.rsplit('/').next().unwrap_or(w);
                    p.processes
                        .iter()
                        .any(|r| r.exe.iter().any(|e| e == base || e == w))
                })
                .unwrap_or(0);
            (p, at)
        }
        None => match set.find_in_argv(&argv) {
            Some(found) => found,
            None => {
                let exe_name = exe.as_ref().map(|e| e.display().to_string()).unwrap_or_default();
                match set.recognise(&exe_name, "") {
                    Some((p, _)) => (p, 0),
                    None => return Ok(None),
                }
            }
        },
    };
    let words = &argv[at.min(argv.len())..];
    let rate = requested_rate(profile, words, None);
    let anchor_exe = exe.or_else(|| words.first().and_then(|w| which(w)));
    let per_packet = match opts.per_packet.as_deref() {
        None => PerPacket::Off,
        Some("all") => PerPacket::All,
        Some(list) => {
            let names: Vec<String> = list.split(',').map(|n| n.trim().to_string()).collect();
            for n in &names {
                if !profile.probes.iter().any(|p| &p.name == n && p.per_packet) {
                    let known: Vec<&str> = profile
                        .probes
                        .iter()
                        .filter(|p| p.per_packet)
                        .map(|p| p.name.as_str())
                        .collect();
                    bail!(
                        "--per-packet {n}: profile {} has no per-packet probe of that name (it has: {})",
                        profile.name,
                        if known.is_empty() {
                            "none".to_string()
                        } else {
                            known.join(", ")
                        }
                    );
                }
            }
            PerPacket::Named(names)
        }
    };
    Ok(Some(ScannerSetup {
        profile: profile.clone(),
        per_packet,
        argv_rate: ArgvRate {
            pps: rate.pps,
            kind: Some(rate.kind),
            floor_pps: rate.floor_pps,
            provenance: rate.provenance,
            conflicts: rate.conflicts,
            per_target: rate.per_target_source.map(|text| (rate.per_target, text)),
        },
        anchor_exe,
        status: status_setups(profile, words, target, rate.per_target),
    }))
}

/// The machine-readable statuses (`[[status]]`) the scanner's words turn on, and where scanprof
/// reads each: a file named relative to the scanner's working directory (for `run` scanprof's
/// own, which the command inherits; for `attach` the process's, through /proc/PID/cwd and
/// /proc/PID/root so that its mount namespace counts), or a stream only `run` can read.
fn status_setups(
    profile: &ScannerProfile,
    words: &[String],
    target: &Target,
    per_target: f64,
) -> Vec<StatusSetup> {
    profile
        .status
        .iter()
        .filter_map(|rule| {
            let at = match (rule.locate(words)?, target) {
                (StatusLocation::File(shown), Target::Command(_)) => {
                    let p = PathBuf::from(&shown);
                    let open = if p.is_absolute() {
                        p
                    } else {
                        std::env::current_dir().map(|d| d.join(&p)).unwrap_or(p)
                    };
                    StatusAt::File { open, shown }
                }
                (StatusLocation::File(shown), Target::Pids(pids)) => {
                    let open = match shown.strip_prefix('/') {
                        Some(abs) => PathBuf::from(format!("/proc/{}/root", pids[0])).join(abs),
                        None => PathBuf::from(format!("/proc/{}/cwd", pids[0])).join(&shown),
                    };
                    StatusAt::File { open, shown }
                }
                (StatusLocation::Stream(s), Target::Command(_)) => StatusAt::Stream(s),
                (StatusLocation::Stream(s), Target::Pids(_)) => StatusAt::Unreadable(format!(
                    "written to the scanner's {}, which only `scanprof run` can read (attach sees no one's output)",
                    match s {
                        OutputStream::Stdout => "stdout",
                        OutputStream::Stderr => "stderr",
                    }
                )),
            };
            Some(StatusSetup {
                rule: rule.clone(),
                at,
                per_target,
            })
        })
        .collect()
}

/// A command's executable, as the shell would find it.
fn which(cmd: &str) -> Option<PathBuf> {
    if cmd.contains('/') {
        return std::fs::canonicalize(cmd).ok();
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(cmd))
        .find(|p| p.is_file())
        .and_then(|p| std::fs::canonicalize(p).ok())
}

/// How a session is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    Json,
    Text,
    /// text, the summary only (-q)
    Quiet,
    /// the live terminal view, then the text summary
    Tui,
}

impl Output {
    /// NDJSON if asked; else the terminal view when stdout is a terminal and it was not refused.
    pub fn choose(json: bool, no_tui: bool) -> Output {
        use std::io::IsTerminal;
        if json {
            Output::Json
        } else if !no_tui && std::io::stdout().is_terminal() {
            Output::Tui
        } else {
            Output::Text
        }
    }
}

/// The machine's own figure at the requested rate, measured before attaching (or launching):
/// loopback and lab traffic only, never toward the scanner's targets. The rate is --requested,
/// else the scanner's own as its profile finds it (an exact rate or a cap).
fn measure_baseline(
    opts: &RunOptions,
    scanner: Option<&ScannerSetup>,
) -> anyhow::Result<crate::analysis::Baseline> {
    let argv_rate = scanner.map(|s| &s.argv_rate).filter(|r| {
        r.pps.is_some()
            && matches!(
                r.kind,
                Some(crate::wrappers::RateKind::Exact | crate::wrappers::RateKind::Cap)
            )
    });
    let (rate, source) = match (opts.requested, argv_rate) {
        (Some(rate), _) => (rate, "--requested".to_string()),
        (None, Some(r)) => (
            r.pps.unwrap_or_default(),
            r.provenance
                .first()
                .cloned()
                .unwrap_or_else(|| "the command line".into()),
        ),
        (None, None) => bail!(
            "--baseline needs a rate to measure at: give --requested PPS (the scanner's profile \
             finds no exact rate or cap for it)"
        ),
    };
    if !matches!(opts.baseline_pacer.as_str(), "tsc" | "clock" | "sleep") {
        bail!(
            "--baseline-pacer must be tsc, clock or sleep, not {:?}",
            opts.baseline_pacer
        );
    }
    eprintln!(
        "scanprof: measuring this machine's baseline first: {} pacing at {rate} pps ({source}) for {} s in a private lab",
        opts.baseline_pacer, opts.baseline_seconds
    );
    crate::senders::baseline::baseline_at(rate, &opts.baseline_pacer, opts.baseline_seconds)
        .context("measuring the baseline (--baseline)")
}

/// Where a launched command's output goes while the terminal view owns the screen: `command.log`
/// in a new private directory (mkdtemp, mode 0700), so no name in the shared temporary directory
/// can be planted in advance. The file itself is created by the launch with O_EXCL|O_NOFOLLOW.
pub fn command_log() -> anyhow::Result<PathBuf> {
    let template = std::env::temp_dir().join("scanprof-XXXXXX");
    let dir = nix::unistd::mkdtemp(&template).with_context(|| {
        format!(
            "creating a private directory for the command's output ({})",
            template.display()
        )
    })?;
    Ok(dir.join("command.log"))
}

/// Where and how to write a bundle.
#[derive(Debug, Clone)]
pub struct ExportTarget {
    /// opened (and checked empty, or cleared with --force) before the run starts
    pub dir: bundle::BundleDir,
    pub redact: bool,
}

impl ExportTarget {
    /// Opens `dir` for a bundle before anything runs, so that a directory that cannot take it
    /// is refused at once, not after the run.
    pub fn open(dir: &Path, redact: bool, force: bool) -> anyhow::Result<ExportTarget> {
        Ok(ExportTarget {
            dir: bundle::BundleDir::open(dir, force)?,
            redact,
        })
    }
}

/// Where and when this recording is being made.
pub fn meta_now() -> Meta {
    Meta {
        command_line: std::env::args().collect(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        started_at: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        hostname: nix::unistd::gethostname()
            .map(|h| h.to_string_lossy().into_owned())
            .unwrap_or_default(),
        kernel: nix::sys::utsname::uname()
            .map(|u| u.release().to_string_lossy().into_owned())
            .unwrap_or_default(),
        // Filled from the session (`Session::drop_reasons`): reading the kernel's BTF here
        // would add a parse to start-up that the probe loading already does.
        drop_reasons: Default::default(),
    }
}

/// Writes `rec` as a bundle, with this machine's facts and capability checks.
pub fn export(rec: &Recording, target: &ExportTarget) -> anyhow::Result<Vec<PathBuf>> {
    let extras = bundle::Extras {
        machine: serde_json::to_value(crate::system::machine::MachineFacts::gather()).ok(),
        checks: Some(super::doctor::checks_json()),
        redact: target.redact,
    };
    bundle::write(&target.dir, rec, &extras)
}

/// A bundle directory named after the time, in the current directory (the view's `e` key).
fn default_export_dir() -> PathBuf {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    PathBuf::from(format!("scanprof-bundle-{secs}"))
}

/// Runs a session to its end, showing it as asked; returns everything it produced.
pub fn render(
    cfg: SessionConfig,
    output: Output,
    stop: Arc<AtomicBool>,
    export_to: Option<&ExportTarget>,
) -> anyhow::Result<Rendered> {
    render_with(cfg, output, stop, export_to, &MetricsTargets::default(), None)
}

/// The labels of a run's metrics: its scanner profile, and the shard its command line names.
fn metrics_labels(cfg: &SessionConfig) -> RunLabels {
    let scanner = cfg
        .scanner
        .as_ref()
        .map_or("generic", |s| s.profile.name.as_str());
    RunLabels::of(scanner, &target_argv(&cfg.target).0)
}

/// The target's command line, and for an attached process its executable: the command to
/// launch, or the first pid's /proc/PID/cmdline and exe.
fn target_argv(target: &Target) -> (Vec<String>, Option<PathBuf>) {
    match target {
        Target::Command(argv) => (argv.clone(), None),
        Target::Pids(pids) => {
            let pid = pids[0];
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let argv = cmdline
                .split(|b| *b == 0)
                .filter(|w| !w.is_empty())
                .map(|w| String::from_utf8_lossy(w).into_owned())
                .collect();
            (argv, std::fs::read_link(format!("/proc/{pid}/exe")).ok())
        }
    }
}

/// The line that opens a headless run on stderr: the probes attached and what is followed. A
/// launched command is named by its own words: when this is printed its process may still be a
/// wrapper (`sh`, `ip`) that has not exec'd the command yet, so its name would mislead.
fn started_line(probes: &[ProbeStatus], processes: &[ProcessInfo], command: Option<&str>) -> String {
    let attached = probes.iter().filter(|p| p.attached).count();
    let followed = match (command, processes) {
        (Some(c), [root, ..]) => format!(
            "following pid {} running `{c}` and the processes it starts",
            root.pid
        ),
        (Some(c), []) => format!("following `{c}` and the processes it starts"),
        (None, _) => format!(
            "following {} process(es): {}",
            processes.len(),
            processes
                .iter()
                .map(|p| format!("{} ({})", p.pid, p.comm))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    format!(
        "scanprof: {attached} of {} probes attached; {followed}\n",
        probes.len()
    )
}

/// The words of a launched command a person reads: the scanner's own, without the wrappers
/// that only place or schedule it (`ip netns exec NS`, `setsid`, `nice`, `taskset`,
/// `sh -c '... exec "$@"'`), found as `scanner_setup` finds the scanner's words.
pub(crate) fn command_words(argv: &[String]) -> Vec<String> {
    match ProfileSet::builtin() {
        Ok(set) => set.scanner_words(argv),
        Err(_) => crate::wrappers::skip_wrappers(argv),
    }
}

/// [`render`], also serving or writing Prometheus metrics of the run as it goes. `title` names
/// the run in the live view (the lab names its scenario); None: `run` and the command's own
/// words, or `attach` and the pids.
pub fn render_with(
    cfg: SessionConfig,
    output: Output,
    stop: Arc<AtomicBool>,
    export_to: Option<&ExportTarget>,
    metrics: &MetricsTargets,
    title: Option<String>,
) -> anyhow::Result<Rendered> {
    // The listener is bound before the run starts: a port in use stops it here.
    let exporter = if metrics.any() {
        let e = Exporter::start(metrics, metrics_labels(&cfg))?;
        if let Some(addr) = e.local_addr() {
            eprintln!("scanprof: metrics at http://{addr}/metrics");
        }
        Some(e)
    } else {
        None
    };
    let command_log = match &cfg.command_output {
        CommandOutput::File(path) => Some(path.clone()),
        _ => None,
    };
    let command = match &cfg.target {
        Target::Command(argv) => Some(command_words(argv).join(" ")),
        Target::Pids(_) => None,
    };
    let title = title.unwrap_or_else(|| match &cfg.target {
        Target::Pids(pids) => format!("attach {pids:?}"),
        Target::Command(_) => format!("run {}", command.as_deref().unwrap_or_default()),
    });
    // The ticks go to a private spool file as they come (a bundle needs them all, memory
    // keeps the latest): with a bundle to write, and in the live view, whose `e` key can
    // write one at any time.
    let mut rec = if export_to.is_some() || output == Output::Tui {
        Recorder::Spooled(SpooledRecording::new(Recording::new(meta_now()))?)
    } else {
        Recorder::Latest(Recording::new(meta_now()))
    };
    let keep_also = cfg.keep_also;
    crate::system::startup::mark("options and scanner profile read");
    let mut session = session::start(cfg, Arc::clone(&stop))?;
    rec.meta_mut().drop_reasons = session.drop_reasons.clone();
    // The metrics take every update before the views do.
    let metrics_tap = exporter.map(|e| {
        let (_, own) = std::sync::mpsc::channel();
        let (rx, handle) = crate::views::metrics::tap(std::mem::replace(&mut session.updates, own), e);
        session.updates = rx;
        handle
    });
    {
        // This thread renders and writes the bundle: CAP_DAC_OVERRIDE only if the bundle goes
        // into a directory someone else owns (or the view's `e` key may make one here).
        use crate::system::privileges::{drop_to, FOR_BUNDLE, KEPT};
        let mut keep = KEPT.to_vec();
        keep.extend_from_slice(keep_also);
        if output == Output::Tui || export_to.is_some_and(|t| !t.dir.owned_by_me()) {
            keep.push(FOR_BUNDLE);
        }
        if let Err(e) = drop_to(&keep) {
            eprintln!("scanprof: warning: could not drop privileges after setup ({e})");
        }
    }
    if output == Output::Tui {
        // Without --export, the `e` key's directory is made (new) at the first press.
        let key_target = std::cell::RefCell::new(export_to.cloned());
        let on_export = |r: &mut SpooledRecording| -> String {
            let mut slot = key_target.borrow_mut();
            if slot.is_none() {
                match ExportTarget::open(&default_export_dir(), false, false) {
                    Ok(t) => *slot = Some(t),
                    Err(e) => return format!("export failed: {e:#}"),
                }
            }
            let Some(target) = slot.as_ref() else {
                return "export failed: no bundle directory".to_string();
            };
            match r.whole().and_then(|whole| export(&whole, target)) {
                Ok(files) => format!(
                    "bundle written to {} ({} files)",
                    target.dir.path.display(),
                    files.len()
                ),
                Err(e) => format!("export failed: {e:#}"),
            }
        };
        // A view that fails (its terminal closed) still ends the session with a summary and
        // a bundle; its error is reported after them.
        let Recorder::Spooled(spooled) = &mut rec else {
            bail!("the live view records into a spool");
        };
        let view = crate::views::tui::run(&session.updates, title, &stop, spooled, &on_export);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        // Whatever the view did not take, the summary included, is still in the channel.
        for u in session.updates.iter() {
            rec.apply(&u);
        }
        let status = session.join()?;
        let summary = rec
            .latest()
            .summary
            .as_ref()
            .context("the session ended without a summary")?;
        // The terminal may be gone (SIGHUP): a failed print must not stop the bundle.
        let mut stdout = std::io::stdout().lock();
        let _ = write!(stdout, "{}", text::summary(summary));
        if let Some(log) = &command_log {
            let _ = writeln!(stdout, "the command's own output is in {}", log.display());
        }
        drop(stdout);
        finish_metrics(metrics_tap);
        finish_export(&mut rec, export_to)?;
        view?;
        return Ok(Rendered {
            rec: rec.into_latest(),
            status,
        });
    }
    let json_out = output == Output::Json;
    let mut stdout = std::io::stdout().lock();
    // A failed write (a closed pipe or terminal) ends the run like a signal: the session still
    // ends the command, detaches and writes the bundle; the error is reported after that.
    let mut write_error: Option<std::io::Error> = None;
    for update in session.updates.iter() {
        rec.apply(&update);
        let (out, err): (Option<String>, Option<String>) = match update {
            Update::Started {
                processes,
                probes,
                clocks,
            } => {
                if json_out {
                    let started =
                        serde_json::json!({ "processes": processes, "probes": probes, "clocks": clocks });
                    (Some(json::line("started", &started) + "\n"), None)
                } else {
                    let mut e = started_line(&probes, &processes, command.as_deref());
                    for p in probes.iter().filter(|p| !p.attached) {
                        e += &format!(
                            "scanprof: warning: probe {} unavailable: {}\n",
                            p.name,
                            p.error.as_deref().unwrap_or("?")
                        );
                    }
                    (None, Some(e))
                }
            }
            Update::Tick(s) => {
                if json_out {
                    (Some(json::line("sample", &*s) + "\n"), None)
                } else {
                    (None, Some(text::tick_line(&s) + "\n"))
                }
            }
            Update::Done(s) => {
                if json_out {
                    (Some(json::line("summary", &*s) + "\n"), None)
                } else {
                    (Some(text::summary(&s)), None)
                }
            }
        };
        if let Some(e) = err.filter(|_| output != Output::Quiet) {
            let _ = std::io::stderr().write_all(e.as_bytes());
        }
        if let (Some(o), None) = (out, &write_error) {
            if let Err(e) = stdout.write_all(o.as_bytes()).and_then(|()| stdout.flush()) {
                stop.store(true, std::sync::atomic::Ordering::Relaxed);
                write_error = Some(e);
            }
        }
    }
    let status = session.join()?;
    rec.latest()
        .summary
        .as_ref()
        .context("the session ended without a summary")?;
    finish_metrics(metrics_tap);
    finish_export(&mut rec, export_to)?;
    if let Some(e) = write_error {
        return Err(anyhow::Error::new(e)
            .context("writing the output (the run was ended; the bundle, if asked, was written)"));
    }
    Ok(Rendered {
        rec: rec.into_latest(),
        status,
    })
}

/// How a session's updates are kept: the latest tick in memory, and with a bundle possible,
/// every tick in a spool file.
enum Recorder {
    Latest(Recording),
    Spooled(SpooledRecording),
}

impl Recorder {
    /// Takes one update. A tick the spool cannot take is said once on stderr; the bundle then
    /// fails with the same message, the run goes on.
    fn apply(&mut self, update: &Update) {
        match self {
            Recorder::Latest(r) => r.apply_latest(update),
            Recorder::Spooled(s) => {
                if let Err(e) = s.apply(update) {
                    eprintln!("scanprof: warning: {e:#}");
                }
            }
        }
    }

    /// Where and when the recording is made.
    fn meta_mut(&mut self) -> &mut Meta {
        match self {
            Recorder::Latest(r) => &mut r.meta,
            Recorder::Spooled(s) => &mut s.latest.meta,
        }
    }

    fn latest(&self) -> &Recording {
        match self {
            Recorder::Latest(r) => r,
            Recorder::Spooled(s) => &s.latest,
        }
    }

    fn into_latest(self) -> Recording {
        match self {
            Recorder::Latest(r) => r,
            Recorder::Spooled(s) => s.latest,
        }
    }
}

/// What a rendered session produced.
pub struct Rendered {
    /// what the views received: the latest tick and the summary
    pub rec: Recording,
    /// how a launched command ended (None when attached to running processes)
    pub status: Option<std::process::ExitStatus>,
}

/// scanprof's exit code for a launched command's status, as `time` and `strace` pass it on:
/// its exit code, or 128 + the signal that killed it. Attached runs (no command) exit 0.
pub fn exit_code_of(status: Option<std::process::ExitStatus>) -> ExitCode {
    use std::os::unix::process::ExitStatusExt;
    match status {
        None => ExitCode::SUCCESS,
        Some(s) => match (s.code(), s.signal()) {
            (Some(c), _) => ExitCode::from(c.clamp(0, 255) as u8),
            (None, Some(sig)) => ExitCode::from((128 + sig).clamp(0, 255) as u8),
            (None, None) => ExitCode::FAILURE,
        },
    }
}

/// Waits for the metrics tap (it has passed the summary on) and reports a failed file write.
fn finish_metrics(tap: Option<std::thread::JoinHandle<Exporter>>) {
    let exporter = tap.and_then(|t| t.join().ok());
    if let Some(e) = exporter.as_ref().and_then(|e| e.file_error.as_ref()) {
        eprintln!("scanprof: warning: {e}");
    }
}

fn finish_export(rec: &mut Recorder, export_to: Option<&ExportTarget>) -> anyhow::Result<()> {
    if let Some(t) = export_to {
        let Recorder::Spooled(spooled) = rec else {
            bail!("a run with a bundle records into a spool");
        };
        let files = spooled
            .whole()
            .and_then(|whole| export(&whole, t))
            .with_context(|| format!("writing the bundle to {}", t.dir.path.display()))?;
        eprintln!(
            "scanprof: bundle written to {} ({} files); `scanprof report {}` re-renders it",
            t.dir.path.display(),
            files.len(),
            t.dir.path.display()
        );
    }
    Ok(())
}

/// Refuses a `--pcap` path whose directory does not exist (or is a directory itself) before
/// anything runs, rather than after a long run.
fn check_pcap_path(path: &Path) -> anyhow::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if !dir.is_dir() {
        bail!(
            "--pcap {}: the directory {} does not exist: create it or give another path",
            path.display(),
            dir.display()
        );
    }
    if path.is_dir() {
        bail!("--pcap {} is a directory: give a file name", path.display());
    }
    Ok(())
}

/// Writes the run's dropped-packet headers to `path` (`--pcap`), replacing it whole, and says
/// how many of the family's drops they are.
fn write_pcap(path: &Path, summary: &crate::analysis::Summary) -> anyhow::Result<()> {
    let mut bytes = Vec::new();
    let written = crate::views::export::pcap::write(&mut bytes, summary)?;
    crate::views::metrics::write_atomically(path, &bytes)
        .with_context(|| format!("writing the pcapng to {}", path.display()))?;
    eprintln!(
        "scanprof: pcapng written to {}: {} packet headers of the family's {} drops ({})",
        path.display(),
        written.packets,
        written.family_drops,
        summary
            .dropped_headers
            .sampling
            .map_or("no sampling rule".to_string(), |s| format!(
                "sampled: a row's first {} drops on each CPU, then 1 in {}",
                s.first, s.every
            )),
    );
    Ok(())
}

/// Why `pid` is not a target to attach to: scanprof itself, pid 1 (whose family is every
/// process) or a kernel thread, unless `allow_system`; None when it is fine (or gone: the
/// session then says it does not exist).
pub fn refused_target(pid: u32, allow_system: bool) -> Option<String> {
    if pid == std::process::id() {
        return Some(format!("pid {pid} is scanprof itself: give the scanner's pid"));
    }
    if allow_system {
        return None;
    }
    if pid == 1 {
        return Some(
            "pid 1 is init: its family is every process on the machine (scanprof included). \
             Give the scanner's pid, or --allow-system to follow the whole system"
                .to_string(),
        );
    }
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    if is_kernel_thread(&stat) {
        return Some(format!(
            "pid {pid} is a kernel thread: it sends no packets of a scanner (and pid 2 is the \
             parent of every kernel thread). Give the scanner's pid, or --allow-system"
        ));
    }
    None
}

/// Whether a /proc/PID/stat line is a kernel thread's: PF_KTHREAD in its flags (field 9).
pub fn is_kernel_thread(stat: &str) -> bool {
    const PF_KTHREAD: u64 = 0x0020_0000;
    stat.rfind(')')
        .and_then(|i| stat[i + 1..].split_whitespace().nth(6))
        .and_then(|f| f.parse::<u64>().ok())
        .is_some_and(|flags| flags & PF_KTHREAD != 0)
}

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
    command: &[String],
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
    };
    if let Some(path) = &opts.pcap {
        check_pcap_path(path)?;
    }
    let rendered = render_with(cfg, output, stop_flag()?, export_to.as_ref(), &metrics, None)?;
    if let (Some(path), Some(summary)) = (&opts.pcap, &rendered.rec.summary) {
        write_pcap(path, summary)?;
    }
    Ok(exit_code_of(rendered.status))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where a status file is read: for `run` against scanprof's working directory (which the
    /// command inherits), for `attach` through the process's own cwd and root; a stream of an
    /// attached process cannot be read and says so.
    #[test]
    fn a_status_file_is_found_relative_to_the_scanners_working_directory() {
        let set = ProfileSet::builtin().unwrap();
        let words = |l: &str| -> Vec<String> { l.split_whitespace().map(str::to_string).collect() };
        let zmap = set.get("zmap").unwrap();
        let attach = Target::Pids(vec![4242]);
        let at = |argv: &str, t: &Target| status_setups(zmap, &words(argv), t, 4.0);
        let rel = at("zmap -P 4 -u s.csv 10.0.0.0/8", &attach);
        assert_eq!(rel.len(), 1);
        assert_eq!(
            rel[0].at,
            StatusAt::File {
                open: PathBuf::from("/proc/4242/cwd/s.csv"),
                shown: "s.csv".into()
            }
        );
        assert_eq!(rel[0].per_target, 4.0);
        let abs = at("zmap --status-updates-file=/var/tmp/s.csv", &attach);
        assert_eq!(
            abs[0].at,
            StatusAt::File {
                open: PathBuf::from("/proc/4242/root/var/tmp/s.csv"),
                shown: "/var/tmp/s.csv".into()
            }
        );
        let run = Target::Command(words("zmap -u s.csv"));
        let launched = at("zmap -u s.csv", &run);
        let StatusAt::File { open, .. } = &launched[0].at else {
            panic!("{launched:?}")
        };
        assert_eq!(open, &std::env::current_dir().unwrap().join("s.csv"));
        assert!(at("zmap -r 10 10.0.0.0/8", &run).is_empty());

        let masscan = set.get("masscan").unwrap();
        let stream = status_setups(masscan, &words("masscan 10.0.0.1 --status-ndjson"), &attach, 1.0);
        let StatusAt::Unreadable(why) = &stream[0].at else {
            panic!("{stream:?}")
        };
        assert!(why.contains("only `scanprof run` can read"), "{why}");
        let run = status_setups(masscan, &words("masscan 10.0.0.1 --status-ndjson"), &run, 1.0);
        assert_eq!(run[0].at, StatusAt::Stream(OutputStream::Stderr));
    }

    #[test]
    fn a_pcap_path_without_its_directory_is_refused_before_the_run() {
        let e = check_pcap_path(Path::new("/nonexistent-scanprof-dir/d.pcapng")).unwrap_err();
        assert!(e.to_string().contains("does not exist: create it"), "{e}");
        let e = check_pcap_path(&std::env::temp_dir()).unwrap_err();
        assert!(e.to_string().contains("is a directory"), "{e}");
        check_pcap_path(&std::env::temp_dir().join("d.pcapng")).unwrap();
        check_pcap_path(Path::new("d.pcapng")).unwrap();
    }

    #[test]
    fn a_launched_command_is_named_by_its_own_words_not_its_wrappers_or_their_comm() {
        // It read "following 1 process(es): 4242 (sh)": the root had not exec'd the command yet.
        let argv: Vec<String> = [
            "ip",
            "netns",
            "exec",
            "ns1",
            "sh",
            "-c",
            "exec masscan -p80 10.0.0.1 --rate 100",
        ]
        .map(String::from)
        .to_vec();
        let words = command_words(&argv).join(" ");
        assert_eq!(words, "masscan -p80 10.0.0.1 --rate 100");
        let sh = ProcessInfo {
            pid: 4242,
            ppid: 1,
            comm: "sh".into(),
            exe: "/bin/sh".into(),
            root: true,
            alive: true,
            exit_code: None,
            role: None,
            start_s: None,
            exit_s: None,
        };
        let probes = vec![ProbeStatus {
            name: "send_path".into(),
            attached: true,
            error: None,
        }];
        let line = started_line(&probes, std::slice::from_ref(&sh), Some(&words));
        assert_eq!(
            line,
            "scanprof: 1 of 1 probes attached; following pid 4242 running `masscan -p80 10.0.0.1 --rate 100` and the processes it starts\n"
        );
        assert!(!line.contains("(sh)"));
        // Attached processes are named as they are.
        let line = started_line(&probes, &[sh], None);
        assert!(line.ends_with("following 1 process(es): 4242 (sh)\n"), "{line}");
    }

    #[test]
    fn init_kernel_threads_and_scanprof_itself_are_refused_as_targets() {
        let init = refused_target(1, false).expect("pid 1 accepted");
        assert!(init.contains("--allow-system"), "{init}");
        assert!(refused_target(1, true).is_none());
        // kthreadd (pid 2) is a kernel thread on every Linux.
        let kthreadd = refused_target(2, false).expect("pid 2 accepted");
        assert!(kthreadd.contains("kernel thread"), "{kthreadd}");
        let own = refused_target(std::process::id(), true).expect("scanprof itself accepted");
        assert!(own.contains("scanprof itself"), "{own}");
        // An ordinary process is fine.
        let child = std::process::Command::new("sleep").arg("5").spawn().unwrap();
        assert_eq!(refused_target(child.id(), false), None);
        let mut child = child;
        let _ = child.kill();
        let _ = child.wait();
    }

    #[test]
    fn the_kernel_thread_flag_is_read_after_the_command_name() {
        // comm may hold spaces and parentheses; flags is the 9th field.
        let kthread = "2 (kthreadd) S 0 0 0 0 -1 2129984 0 0";
        let user = "42 (a) b (c) S 1 42 42 0 -1 4194560 0 0";
        assert!(is_kernel_thread(kthread));
        assert!(!is_kernel_thread(user));
    }
}
