//! A session run to its end and shown as asked: NDJSON, text, the live view, with its
//! Prometheus metrics and its bundle (`--export`, the view's `e` key) and `--pcap`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use anyhow::{bail, Context};

use super::Output;
use crate::collect::family::ProcessInfo;
use crate::probes::ProbeStatus;
use crate::session::{self, CommandOutput, SessionConfig, Target, Update};
use crate::system::caps::Cap;
use crate::system::privileges;
use crate::views::export::spool::SpooledRecording;
use crate::views::export::{bundle, Meta, Recording};
use crate::views::metrics::{Exporter, MetricsTargets, RunLabels};
use crate::views::{json, text};
use crate::wrappers::ProfileSet;

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
        command_line: std::env::args_os()
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
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
        exported_mid_run: false,
    }
}

/// Writes `rec` as a bundle, with this machine's facts and capability checks.
pub fn export(rec: &Recording, target: &ExportTarget) -> anyhow::Result<Vec<PathBuf>> {
    let extras = bundle::Extras {
        machine: serde_json::to_value(crate::system::machine::MachineFacts::gather()).ok(),
        checks: Some(super::checks::checks_json()),
        redact: target.redact,
    };
    bundle::write(&target.dir, rec, &extras)
}

/// scanprof's stderr lines as written to a terminal it shares with the scanner: each starts at
/// the line's start on a cleared line (`\r`, erase line), so that a scanner's status line that
/// ended in `\r` (masscan's) is replaced whole rather than overwritten in part and merged with
/// the tick line; the scanner's next status then comes on the line after.
fn own_lines(text: &str) -> String {
    text.split_inclusive('\n')
        .map(|l| format!("\r\x1b[K{l}"))
        .collect()
}

/// The view's `e` key's bundle directory, in the current directory: named after what runs and
/// the UTC time, `scanprof-masscan-20261128T171502Z` (`scanprof-pid4242-...` for attach).
fn default_export_dir(target: &Target, now: std::time::SystemTime) -> PathBuf {
    let what = match target {
        Target::Command(argv) => command_words(&crate::session::lossy_words(argv))
            .first()
            .map(|w| w.rsplit('/').next().unwrap_or(w).to_string())
            .unwrap_or_default(),
        Target::Pids(pids) => pids.first().map(|p| format!("pid{p}")).unwrap_or_default(),
    };
    // Only letters, digits, `.`, `_` and `-` from a command's name: it is a directory name.
    let what: String = what
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .take(32)
        .collect();
    let what = if what.is_empty() || what.starts_with('.') {
        "run".to_string()
    } else {
        what
    };
    let time: String = humantime::format_rfc3339_seconds(now)
        .to_string()
        .chars()
        .filter(|c| !matches!(c, '-' | ':'))
        .collect();
    PathBuf::from(format!("scanprof-{what}-{time}"))
}

/// How the live view is shown.
#[derive(Debug, Clone, Default)]
pub struct ViewOptions {
    /// the run's name in the view's title (the lab names its scenario); None: `run` and the
    /// command's own words, or `attach` and the pids
    pub title: Option<String>,
    /// close the view when the run ends by itself (`--exit-at-end`)
    pub exit_at_end: bool,
}

/// Runs a session to its end, showing it as asked; returns everything it produced.
pub fn render(
    cfg: SessionConfig,
    output: Output,
    stop: Arc<AtomicBool>,
    export_to: Option<&ExportTarget>,
) -> anyhow::Result<Rendered> {
    render_with(
        cfg,
        output,
        stop,
        export_to,
        &MetricsTargets::default(),
        ViewOptions::default(),
    )
}

/// The labels of a run's metrics: its scanner profile, and the shard its command line names.
fn metrics_labels(cfg: &SessionConfig) -> RunLabels {
    let scanner = cfg
        .scanner
        .as_ref()
        .map_or(crate::wrappers::GENERIC_PROFILE, |s| s.profile.name.as_str());
    RunLabels::of(scanner, &super::target_argv(&cfg.target).0)
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

/// [`render`], also serving or writing Prometheus metrics of the run as it goes, with the live
/// view shown as `view` says (its title, whether it closes when the run ends). The steps: bind
/// the metrics listener, start the session, drop what setup needed, show the run live or write
/// it headless, then join the session and finish the metrics and the bundle.
pub fn render_with(
    cfg: SessionConfig,
    output: Output,
    stop: Arc<AtomicBool>,
    export_to: Option<&ExportTarget>,
    metrics: &MetricsTargets,
    view: ViewOptions,
) -> anyhow::Result<Rendered> {
    let ViewOptions { title, exit_at_end } = view;
    // The listener is bound before the run starts: a port in use stops it here.
    let exporter = start_metrics(metrics, &cfg)?;
    let command_log = match &cfg.command_output {
        CommandOutput::File(path) => Some(path.clone()),
        _ => None,
    };
    let command = launched_words(&cfg.target);
    let title = title.unwrap_or_else(|| default_title(&cfg.target, command.as_deref()));
    let mut rec = Recorder::for_run(output, export_to)?;
    let keep_also = cfg.keep_also;
    crate::system::startup::mark("options and scanner profile read");
    let target_of_run = cfg.target.clone();
    let mut session = session::start(cfg, Arc::clone(&stop))?;
    rec.meta_mut().drop_reasons = session.drop_reasons.clone();
    // The metrics take every update before the views do.
    let metrics_tap = exporter.map(|e| tap_metrics(&mut session, e));
    // This thread renders and writes the bundle.
    if let Err(e) = privileges::drop_to(&privileges_after_setup(output, export_to, keep_also)) {
        eprintln!("scanprof: warning: could not drop privileges after setup ({e})");
    }
    // An error of the view or of the output is reported after the summary and the bundle.
    let late_error = if output == Output::Tui {
        let live = LiveView {
            title,
            exit_at_end,
            target: &target_of_run,
        };
        show_live(&session.updates, &mut rec, &stop, export_to, live)?
    } else {
        write_headless(&session.updates, &mut rec, output, &stop, command.as_deref())
    };
    let status = session.join()?;
    let summary = rec
        .latest()
        .summary
        .as_ref()
        .context("the session ended without a summary")?;
    if output == Output::Tui {
        print_after_view(summary, command_log.as_deref());
    }
    let exporter = finish_metrics(metrics_tap);
    finish_export(&mut rec, export_to)?;
    linger(exporter.as_ref(), metrics.linger);
    if let Some(e) = late_error {
        return Err(e);
    }
    Ok(Rendered {
        rec: rec.into_latest(),
        status,
    })
}

/// Binds the metrics listener or opens the textfile, when any is asked for, and says where the
/// listener serves.
fn start_metrics(metrics: &MetricsTargets, cfg: &SessionConfig) -> anyhow::Result<Option<Exporter>> {
    if !metrics.any() {
        return Ok(None);
    }
    let e = Exporter::start(metrics, metrics_labels(cfg))?;
    if let Some(addr) = e.local_addr() {
        eprintln!("scanprof: metrics at http://{addr}/metrics");
    }
    Ok(Some(e))
}

/// A launched command's words as a person reads them (see [`command_words`]); None when
/// attached.
fn launched_words(target: &Target) -> Option<String> {
    match target {
        Target::Command(argv) => Some(command_words(&crate::session::lossy_words(argv)).join(" ")),
        Target::Pids(_) => None,
    }
}

/// The live view's title when none is given: `run` and the command's words, or `attach` and
/// the pids.
fn default_title(target: &Target, command: Option<&str>) -> String {
    match target {
        Target::Pids(pids) => format!("attach {pids:?}"),
        Target::Command(_) => format!("run {}", command.unwrap_or_default()),
    }
}

/// Puts the metrics tap between the session and the views: it passes every update on.
fn tap_metrics(session: &mut session::Session, exporter: Exporter) -> std::thread::JoinHandle<Exporter> {
    let (_, own) = std::sync::mpsc::channel();
    let (rx, handle) = crate::views::metrics::tap(std::mem::replace(&mut session.updates, own), exporter);
    session.updates = rx;
    handle
}

/// The capabilities this thread keeps once set-up is done: CAP_DAC_OVERRIDE besides the
/// usual ones only if the bundle goes into a directory someone else owns (or the view's `e`
/// key may make one here).
fn privileges_after_setup(output: Output, export_to: Option<&ExportTarget>, keep_also: &[Cap]) -> Vec<Cap> {
    let mut keep = privileges::KEPT.to_vec();
    keep.extend_from_slice(keep_also);
    if output == Output::Tui || export_to.is_some_and(|t| !t.dir.owned_by_me()) {
        keep.push(privileges::FOR_BUNDLE);
    }
    keep
}

/// What the live view shows besides the updates.
struct LiveView<'a> {
    title: String,
    exit_at_end: bool,
    /// what runs: it names the `e` key's bundle directory
    target: &'a Target,
}

/// Shows the run in the live view until it ends or the user quits, then takes what the view did
/// not (the summary included). The view's own error (its terminal closed) is returned as a
/// value, to be reported after the summary and the bundle.
fn show_live(
    updates: &std::sync::mpsc::Receiver<Update>,
    rec: &mut Recorder,
    stop: &Arc<AtomicBool>,
    export_to: Option<&ExportTarget>,
    live: LiveView,
) -> anyhow::Result<Option<anyhow::Error>> {
    // Without --export, the `e` key's directory is made (new) at the first press.
    let key_target = std::cell::RefCell::new(export_to.cloned());
    let on_export = |r: &mut SpooledRecording| export_on_key(&mut key_target.borrow_mut(), live.target, r);
    let Recorder::Spooled(spooled) = rec else {
        bail!("the live view records into a spool");
    };
    let view = crate::views::tui::run(updates, live.title, live.exit_at_end, stop, spooled, &on_export);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    // Whatever the view did not take, the summary included, is still in the channel.
    for u in updates.iter() {
        rec.apply(&u);
    }
    Ok(view.err())
}

/// The view's `e` key: writes the recording so far into `slot`'s directory (made at the first
/// press when there is none, named by [`default_export_dir`]); returns the line the view shows.
fn export_on_key(slot: &mut Option<ExportTarget>, target: &Target, r: &mut SpooledRecording) -> String {
    if slot.is_none() {
        match ExportTarget::open(
            &default_export_dir(target, std::time::SystemTime::now()),
            false,
            false,
        ) {
            Ok(t) => *slot = Some(t),
            Err(e) => return format!("export failed: {e:#}"),
        }
    }
    let Some(target) = slot.as_ref() else {
        return "export failed: no bundle directory".to_string();
    };
    // Written mid-run: the bundle says so, and `report` then says why it has no summary.
    let whole = r.whole().map(|mut whole| {
        if whole.summary.is_none() {
            whole.meta.exported_mid_run = true;
        }
        whole
    });
    match whole.and_then(|whole| export(&whole, target)) {
        Ok(files) => format!(
            "bundle written to {} ({} files)",
            target.dir.path.display(),
            files.len()
        ),
        Err(e) => format!("export failed: {e:#}"),
    }
}

/// After the live view closed: the summary, and where the command's own output went. The
/// terminal may be gone (SIGHUP): a failed print must not stop the bundle.
fn print_after_view(summary: &crate::analysis::Summary, command_log: Option<&Path>) {
    let mut stdout = std::io::stdout().lock();
    let _ = write!(stdout, "{}", text::summary(summary));
    if let Some(log) = command_log {
        let _ = writeln!(stdout, "the command's own output is in {}", log.display());
    }
}

/// Writes every update as it comes, NDJSON or text, until the session's channel closes. A
/// failed write (a closed pipe or terminal) ends the run like a signal: the session still ends
/// the command, detaches and writes the bundle; the error is returned, to be reported after.
fn write_headless(
    updates: &std::sync::mpsc::Receiver<Update>,
    rec: &mut Recorder,
    output: Output,
    stop: &Arc<AtomicBool>,
    command: Option<&str>,
) -> Option<anyhow::Error> {
    let mut stdout = std::io::stdout().lock();
    let mut write_error: Option<std::io::Error> = None;
    for update in updates.iter() {
        rec.apply(&update);
        let stderr_terminal = {
            use std::io::IsTerminal;
            std::io::stderr().is_terminal()
        };
        let (out, err) = update_lines(update, output == Output::Json, command);
        if let Some(e) = err.filter(|_| output != Output::Quiet) {
            let e = if stderr_terminal { own_lines(&e) } else { e };
            let _ = std::io::stderr().write_all(e.as_bytes());
        }
        if let (Some(o), None) = (out, &write_error) {
            if let Err(e) = stdout.write_all(o.as_bytes()).and_then(|()| stdout.flush()) {
                stop.store(true, std::sync::atomic::Ordering::Relaxed);
                write_error = Some(e);
            }
        }
    }
    write_error.map(|e| {
        anyhow::Error::new(e)
            .context("writing the output (the run was ended; the bundle, if asked, was written)")
    })
}

/// What one update prints headless: (stdout, stderr). NDJSON puts every update on stdout; text
/// puts the started line, its probe warnings and the tick lines on stderr, the summary on
/// stdout.
fn update_lines(update: Update, json_out: bool, command: Option<&str>) -> (Option<String>, Option<String>) {
    match update {
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
                let mut e = started_line(&probes, &processes, command);
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
    }
}

/// Whether a run's ticks go to a private spool file as they come: with a bundle to write, and
/// in the live view.
fn spools(output: Output, export_to: Option<&ExportTarget>) -> bool {
    export_to.is_some() || output == Output::Tui
}

/// How a session's updates are kept: the latest tick in memory, and with a bundle possible,
/// every tick in a spool file.
enum Recorder {
    Latest(Recording),
    Spooled(SpooledRecording),
}

impl Recorder {
    /// A spool with a bundle to write and in the live view, whose `e` key can write one at any
    /// time (a bundle needs every tick, memory keeps the latest); the latest tick otherwise.
    fn for_run(output: Output, export_to: Option<&ExportTarget>) -> anyhow::Result<Recorder> {
        Ok(if spools(output, export_to) {
            Recorder::Spooled(SpooledRecording::new(Recording::new(meta_now()))?)
        } else {
            Recorder::Latest(Recording::new(meta_now()))
        })
    }

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

/// Waits for the metrics tap (it has passed the summary on) and reports a failed file write.
fn finish_metrics(tap: Option<std::thread::JoinHandle<Exporter>>) -> Option<Exporter> {
    let exporter = tap.and_then(|t| t.join().ok());
    if let Some(e) = exporter.as_ref().and_then(|e| e.file_error.as_ref()) {
        eprintln!("scanprof: warning: {e}");
    }
    exporter
}

/// `--metrics-linger`: the server answers with the run's final exposition for `linger` after
/// the run (and its bundle) is done; a new SIGINT or SIGTERM ends the wait early (the flag that
/// ended the run may already be up, so a fresh one is listened to).
fn linger(exporter: Option<&Exporter>, linger: std::time::Duration) {
    let Some(e) = exporter.filter(|e| e.local_addr().is_some() && !linger.is_zero()) else {
        return;
    };
    let again = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        if signal_hook::flag::register(sig, Arc::clone(&again)).is_err() {
            return;
        }
    }
    eprintln!(
        "scanprof: serving the run's final metrics for {:.0} s more (Ctrl-C ends it)",
        linger.as_secs_f64()
    );
    e.linger(linger, &again);
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
pub fn check_pcap_path(path: &Path) -> anyhow::Result<()> {
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
pub fn write_pcap(path: &Path, summary: &crate::analysis::Summary) -> anyhow::Result<()> {
    let mut bytes = Vec::new();
    let written = crate::views::export::pcap::write(&mut bytes, summary)?;
    crate::system::user_files::replace(path, 0o644, &bytes)
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

#[cfg(test)]
mod tests {
    /// On a shared terminal every line scanprof writes starts on a cleared line of its own:
    /// after a scanner's `rate: 1.00-kpps ... \r` status the tick line is not merged into it.
    #[test]
    fn own_lines_start_on_a_cleared_line() {
        let ticks = "t=1.0s achieved 1000\nt=2.0s achieved 999\n";
        let shown = own_lines(ticks);
        assert_eq!(
            shown,
            "\r\x1b[Kt=1.0s achieved 1000\n\r\x1b[Kt=2.0s achieved 999\n"
        );
        // What a terminal shows after the scanner's status line and then scanprof's lines: the
        // status line is cleared before each tick line, whole.
        let screen = format!("rate:  1.00-kpps, 50.00% done, waiting 0-secs, found=0       \r{shown}");
        for line in screen.split('\n').filter(|l| !l.is_empty()) {
            let visible = line.rsplit("\r\x1b[K").next().unwrap();
            assert!(visible.starts_with("t="), "{line:?}");
        }
    }

    /// The `e` key's bundle is named after the command (its wrappers left out) or the pid, and
    /// the UTC time: `scanprof-masscan-20261128T171502Z`, never a bare epoch number.
    #[test]
    fn the_views_bundle_is_named_after_the_command_and_the_utc_time() {
        let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_795_886_102);
        let cmd = |words: &[&str]| Target::Command(words.iter().map(Into::into).collect());
        assert_eq!(
            default_export_dir(&cmd(&["/usr/bin/masscan", "--rate", "1000"]), at),
            PathBuf::from("scanprof-masscan-20261128T171502Z")
        );
        assert_eq!(
            default_export_dir(&Target::Pids(vec![4242]), at),
            PathBuf::from("scanprof-pid4242-20261128T171502Z")
        );
        assert_eq!(
            default_export_dir(&cmd(&["./a b/../x;y"]), at),
            PathBuf::from("scanprof-x_y-20261128T171502Z")
        );
    }

    use super::*;

    /// Headless, each update goes where its format says: NDJSON, every update on stdout as one
    /// line of its type; text, the started line with a warning per unattached probe and the
    /// tick lines on stderr, the summary on stdout.
    #[test]
    fn each_update_prints_its_lines_on_the_stream_its_format_says() {
        let (tick, summary) = crate::views::fixtures::rich_run();
        let probe = |name: &str, error: Option<&str>| ProbeStatus {
            name: name.into(),
            attached: error.is_none(),
            error: error.map(Into::into),
        };
        let started = || Update::Started {
            processes: Vec::new(),
            probes: vec![
                probe("drops.on_kfree_skb", None),
                probe("sched.on_switch", Some("no BTF")),
            ],
            clocks: crate::system::ClockReadings::at(7),
        };
        assert_eq!(
            update_lines(started(), false, Some("masscan -p80")),
            (
                None,
                Some(
                    "scanprof: 1 of 2 probes attached; following `masscan -p80` and the processes \
                     it starts\nscanprof: warning: probe sched.on_switch unavailable: no BTF\n"
                        .to_string()
                )
            )
        );
        assert_eq!(
            update_lines(Update::Tick(Box::new(tick.clone())), false, None),
            (None, Some(text::tick_line(&tick) + "\n"))
        );
        assert_eq!(
            update_lines(Update::Done(Box::new(summary.clone())), false, None),
            (Some(text::summary(&summary)), None)
        );
        let json = [
            (started(), "started"),
            (Update::Tick(Box::new(tick)), "sample"),
            (Update::Done(Box::new(summary)), "summary"),
        ];
        for (update, kind) in json {
            let (out, err) = update_lines(update, true, Some("masscan -p80"));
            assert_eq!(err, None, "{kind}");
            let out = out.unwrap_or_default();
            assert_eq!(out.matches('\n').count(), 1, "{kind}: {out}");
            let v: serde_json::Value = serde_json::from_str(&out).unwrap();
            assert_eq!(v["type"], kind);
        }
    }

    /// The live view's title names what runs, by the command's own words or by the pids.
    #[test]
    fn the_default_title_names_the_command_or_the_pids() {
        let cmd = Target::Command(
            ["ip", "netns", "exec", "lab", "masscan", "-p80"]
                .map(Into::into)
                .to_vec(),
        );
        let words = launched_words(&cmd);
        assert_eq!(words.as_deref(), Some("masscan -p80"));
        assert_eq!(default_title(&cmd, words.as_deref()), "run masscan -p80");
        let pids = Target::Pids(vec![4242, 4243]);
        assert_eq!(launched_words(&pids), None);
        assert_eq!(default_title(&pids, None), "attach [4242, 4243]");
    }

    /// After set-up the rendering thread keeps the usual capabilities and the command's extra
    /// ones; CAP_DAC_OVERRIDE only where it may write a bundle (the live view's `e` key); and
    /// it spools the ticks only where a bundle may be written.
    #[test]
    fn only_a_run_that_may_write_a_bundle_keeps_dac_override_and_spools() {
        let extra = [crate::system::caps::CAP_NET_ADMIN];
        let text = privileges_after_setup(Output::Text, None, &extra);
        let mut want = privileges::KEPT.to_vec();
        want.push(crate::system::caps::CAP_NET_ADMIN);
        assert_eq!(text, want);
        want.push(privileges::FOR_BUNDLE);
        assert_eq!(privileges_after_setup(Output::Tui, None, &extra), want);
        assert!(spools(Output::Tui, None));
        for output in [Output::Text, Output::Json, Output::Quiet] {
            assert!(!spools(output, None), "{output:?}");
            assert!(!privileges_after_setup(output, None, &[]).contains(&privileges::FOR_BUNDLE));
        }
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
            open_files_limit: None,
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
}
