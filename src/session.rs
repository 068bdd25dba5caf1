//! A profiling session: finds or launches the target, loads the probes, and runs the collection
//! thread that owns them. The thread sends `Update`s (ticks, then the summary) over a channel;
//! whoever renders them owns its own state. Ends on --duration, when the whole family has exited,
//! or when the stop flag is raised (Ctrl-C/SIGTERM), and always with a summary. It sits above
//! the layers it joins (probes -> collect -> analysis) and below the views and commands, so
//! that collect never imports analysis.

use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{bail, Context};
use nix::sys::signal::Signal;

use crate::analysis::{Analyzer, EndReason, Snapshot, Summary};
use crate::collect::family::{ProcessInfo, ProcessTable};
use crate::collect::{Collector, CounterSample, FamilyEvent};
use crate::probes::{ProbeOptions, ProbeSet, ProbeStatus};
use crate::system::monotonic_ns;
use crate::system::startup::mark;

/// What to profile.
#[derive(Debug, Clone)]
pub enum Target {
    /// running processes and their families
    Pids(Vec<u32>),
    /// a command to start once every probe is attached: its words as given, in bytes (a file
    /// name need not be UTF-8); [`lossy_words`] for the text that recognises and names it
    Command(Vec<std::ffi::OsString>),
}

/// A command's words as text, for recognising its scanner and naming it: a byte that is not
/// UTF-8 reads as U+FFFD (the command itself is started with its words unchanged).
pub fn lossy_words(argv: &[std::ffi::OsString]) -> Vec<String> {
    argv.iter().map(|w| w.to_string_lossy().into_owned()).collect()
}

/// Where a launched command's output goes, so that it cannot garble scanprof's own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommandOutput {
    /// the command shares scanprof's stdout and stderr (text output)
    Inherit,
    /// its stdout goes to scanprof's stderr (stdout carries NDJSON)
    StdoutToStderr,
    /// stdout and stderr go to this file (the terminal view owns the screen)
    File(std::path::PathBuf),
}

#[derive(Debug, Clone)]
pub struct SessionConfig {
    pub target: Target,
    /// where a launched command's output goes
    pub command_output: CommandOutput,
    /// length of a tick
    pub interval: Duration,
    /// end the run after this long
    pub duration: Option<Duration>,
    /// packets per second the scanner was asked for, if known
    pub requested_pps: Option<f64>,
    /// outputs a relay writes each packet it reads to (`--relay-fanout`)
    pub relay_fanout: Option<u32>,
    /// the machine's own figure at that rate, measured before the run
    pub baseline: Option<crate::analysis::Baseline>,
    pub probe_options: ProbeOptions,
    /// when the kernel's BPF run-time statistics are on (the probes' own cost)
    pub bpf_stats: crate::collect::bpf_time::StatsPolicy,
    /// the scanner's profile, and what its command line says
    pub scanner: Option<ScannerSetup>,
    /// the user a launched command runs as (`--user`); None: scanprof's own user and
    /// privileges, as the user gave them
    pub run_as: Option<crate::system::child::RunAs>,
    /// capabilities kept after setup besides what the rest of the run needs
    /// (src/system/privileges.rs): `lab` keeps [`FOR_LAB`](crate::system::privileges::FOR_LAB)
    /// to read its namespaces' counters and tear them down at the end
    pub keep_also: &'static [crate::system::caps::Cap],
}

/// The scanner profile a session applies.
#[derive(Debug, Clone)]
pub struct ScannerSetup {
    pub profile: crate::wrappers::ScannerProfile,
    pub per_packet: crate::collect::uprobes::PerPacket,
    /// the requested rate as the scanner's command line says
    pub argv_rate: crate::analysis::ArgvRate,
    /// the user named the profile (`--profile`): only its processes are the scanner
    pub explicit: bool,
    /// executable of the process attached to or launched: the profile's `paths` are relative
    /// to its directory
    pub anchor_exe: Option<std::path::PathBuf>,
    /// the scanner's machine-readable status its command line turns on (`[[status]]`)
    pub status: Vec<StatusSetup>,
}

/// A scanner's machine-readable status, and where scanprof reads it.
#[derive(Debug, Clone)]
pub struct StatusSetup {
    pub rule: crate::wrappers::StatusRule,
    pub at: StatusAt,
    /// packets per target (zmap's `-P`), for the rule's per-target fields
    pub per_target: f64,
}

/// Where a status is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StatusAt {
    /// a file: the path scanprof opens (`/proc/PID/cwd/...` when attached), and as the command
    /// line gave it
    File { open: std::path::PathBuf, shown: String },
    /// a stream of the launched command
    Stream(crate::wrappers::OutputStream),
    /// not readable by scanprof: why
    Unreadable(String),
}

impl StatusSetup {
    /// What it is, for notes and claims: `zmap --status-updates-file z.csv`.
    pub fn label(&self) -> String {
        match &self.at {
            StatusAt::File { shown, .. } => format!("{} {shown}", self.rule.what),
            StatusAt::Stream(crate::wrappers::OutputStream::Stdout) => format!("{} (stdout)", self.rule.what),
            StatusAt::Stream(crate::wrappers::OutputStream::Stderr) => format!("{} (stderr)", self.rule.what),
            StatusAt::Unreadable(_) => self.rule.what.clone(),
        }
    }
}

/// The figures a run reads from the scanner's output, in claim-index order: the profile's status
/// lines (`[[claim]]`), then the fields of each readable status; and each status's first index.
fn claim_specs(sc: &ScannerSetup, launched: bool) -> (Vec<crate::analysis::ClaimSpec>, Vec<Option<usize>>) {
    use crate::analysis::{ClaimSource, ClaimSpec};
    let mut specs: Vec<ClaimSpec> = sc
        .profile
        .claims
        .iter()
        .map(|c| ClaimSpec::status_line(&c.what))
        .collect();
    let mut bases = Vec::new();
    for st in &sc.status {
        if matches!(st.at, StatusAt::Unreadable(_)) {
            bases.push(None);
            continue;
        }
        bases.push(Some(specs.len()));
        let label = st.label();
        for f in &st.rule.fields {
            let per = if f.per_target && st.per_target != 1.0 {
                format!(" x {} probes per target", st.per_target)
            } else {
                String::new()
            };
            specs.push(ClaimSpec {
                what: format!("{label}: {}{per}, {}", f.key, f.figure.describe()),
                source: ClaimSource::StatusFile,
                figure: f.figure,
                totals_comparable: launched,
            });
        }
    }
    (specs, bases)
}

/// What the collection thread reports, in order: Started, Tick..., Done.
#[derive(Debug)]
pub enum Update {
    Started {
        processes: Vec<ProcessInfo>,
        probes: Vec<ProbeStatus>,
        /// the clocks at attach: `monotonic_ns` is the zero of every `_s` time of the run
        clocks: crate::system::ClockReadings,
    },
    Tick(Box<Snapshot>),
    Done(Box<Summary>),
}

/// A running session: the updates, and the thread that produces them.
pub struct Session {
    pub updates: Receiver<Update>,
    /// the kernel's drop-reason names (number -> name), read with its features at load: a
    /// bundle keeps them for its bpftrace script
    pub drop_reasons: BTreeMap<u32, String>,
    thread: JoinHandle<anyhow::Result<Option<std::process::ExitStatus>>>,
}

impl Session {
    /// Waits for the collection thread: how a launched command ended (None when attached), or
    /// the thread's error if it failed after start-up.
    pub fn join(self) -> anyhow::Result<Option<std::process::ExitStatus>> {
        match self.thread.join() {
            Ok(r) => r,
            Err(_) => bail!("the collection thread panicked"),
        }
    }
}

/// Starts a session. Returns once the probes are attached (and a launched command released),
/// or with the error that prevented it: a missing pid, no permission, no BTF.
pub fn start(cfg: SessionConfig, stop: Arc<AtomicBool>) -> anyhow::Result<Session> {
    let (tx, updates) = mpsc::channel();
    let (ready_tx, ready_rx) = mpsc::channel::<anyhow::Result<BTreeMap<u32, String>>>();
    let thread = std::thread::Builder::new()
        .name("scanprof-collect".into())
        .spawn(move || collect(cfg, stop, tx, ready_tx))
        .context("starting the collection thread")?;
    match ready_rx.recv() {
        Ok(Ok(drop_reasons)) => Ok(Session {
            updates,
            drop_reasons,
            thread,
        }),
        Ok(Err(e)) => {
            let _ = thread.join();
            Err(e)
        }
        Err(_) => match thread.join() {
            Ok(Err(e)) => Err(e),
            _ => bail!("the collection thread ended before it started"),
        },
    }
}

/// A launched command held before exec until the probes are attached.
struct Launched {
    child: Child,
    release: Option<OwnedFd>,
    /// how it ended, once reaped
    status: Option<std::process::ExitStatus>,
    /// the threads reading its output (status lines and status streams)
    readers: Vec<std::thread::JoinHandle<()>>,
}

impl Launched {
    /// Starts `/bin/sh` that waits on a pipe, then execs the command in the same process, so
    /// the pid the probes follow is the command's pid from its first instruction.
    fn spawn(
        argv: &[std::ffi::OsString],
        output: &CommandOutput,
        run_as: Option<&crate::system::child::RunAs>,
        claims: &[crate::wrappers::OutputClaim],
        mut status: Vec<(
            crate::wrappers::OutputStream,
            crate::collect::output::StatusReader,
        )>,
        readings: &Sender<crate::collect::output::OutputEvent>,
    ) -> anyhow::Result<Launched> {
        if argv.is_empty() {
            bail!("no command given: use `scanprof run -- COMMAND [ARGS...]`");
        }
        if !is_executable_command(&argv[0]) {
            bail!(
                "command not found or not executable: {} (give a path, or a name on PATH)",
                std::path::Path::new(&argv[0]).display()
            );
        }
        let (gate_rd, gate_wr) =
            nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).context("creating a pipe")?;
        let rd = gate_rd.as_raw_fd();
        let mut cmd = Command::new("/bin/sh");
        cmd.arg("-c")
            .arg("IFS= read -r _ <&3 || exit 111; exec 3<&-; exec \"$@\"")
            .arg("scanprof-run")
            .args(argv);
        // SAFETY: dup2 and fcntl are async-signal-safe; the closure touches no other state.
        // The child gets the gate as fd 3 without O_CLOEXEC (dup2 to itself would keep the flag).
        unsafe {
            cmd.pre_exec(move || {
                let r = if rd == 3 {
                    libc::fcntl(3, libc::F_SETFD, 0)
                } else {
                    libc::dup2(rd, 3)
                };
                if r < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        // --user: the command's credentials change before the parent-death signal is set,
        // since a change of user clears that signal.
        if let Some(user) = run_as {
            user.apply(&mut cmd);
        }
        // SIGKILL of scanprof must not leave the command running orphaned. This thread (the
        // collection thread) outlives the command: it ends and reaps it in finish().
        crate::system::child::die_with_parent(&mut cmd);
        let mut log = None;
        match output {
            CommandOutput::Inherit => {}
            CommandOutput::StdoutToStderr => {
                cmd.stdout(std::io::stderr());
            }
            CommandOutput::File(path) => {
                // A new file only, never through a symlink, readable by its owner only.
                let file = crate::system::user_files::create_new(path, 0o600)
                    .with_context(|| format!("creating {} for the command's output", path.display()))?;
                cmd.stdout(file.try_clone()?).stderr(file.try_clone()?);
                log = Some(file);
            }
        }
        // A stream the profile reads rate figures from goes through scanprof on its way.
        use crate::collect::output::{tee, Matcher};
        let (out_m, err_m) = (
            Matcher::for_stream(claims, "stdout"),
            Matcher::for_stream(claims, "stderr"),
        );
        use crate::wrappers::OutputStream;
        let mut take = |which: OutputStream| {
            status
                .iter()
                .position(|(s, _)| *s == which)
                .map(|i| status.remove(i).1)
        };
        let (out_s, err_s) = (take(OutputStream::Stdout), take(OutputStream::Stderr));
        if out_m.is_some() || out_s.is_some() {
            cmd.stdout(std::process::Stdio::piped());
        }
        if err_m.is_some() || err_s.is_some() {
            cmd.stderr(std::process::Stdio::piped());
        }
        let mut child = cmd
            .spawn()
            .with_context(|| format!("starting {}", std::path::Path::new(&argv[0]).display()))?;
        drop(gate_rd);
        let dest = |is_stdout: bool| -> anyhow::Result<Box<dyn std::io::Write + Send>> {
            Ok(match (output, &log) {
                (CommandOutput::File(_), Some(f)) => Box::new(f.try_clone()?),
                (CommandOutput::Inherit, _) if is_stdout => Box::new(std::io::stdout()),
                _ => Box::new(std::io::stderr()),
            })
        };
        let mut readers = Vec::new();
        if let Some(pipe) = child.stdout.take() {
            readers.push(
                tee(pipe, dest(true)?, out_m, out_s, readings.clone())
                    .context("reading the command's output")?,
            );
        }
        if let Some(pipe) = child.stderr.take() {
            readers.push(
                tee(pipe, dest(false)?, err_m, err_s, readings.clone())
                    .context("reading the command's output")?,
            );
        }
        Ok(Launched {
            child,
            release: Some(gate_wr),
            status: None,
            readers,
        })
    }

    fn release(&mut self) -> anyhow::Result<()> {
        if let Some(fd) = self.release.take() {
            nix::unistd::write(&fd, b"go\n").context("releasing the launched command")?;
        }
        Ok(())
    }

    /// Ends the command if it outlived the run: SIGTERM, then SIGKILL after 2 s. Reaps it, and
    /// waits (up to 2 s: something it forked may hold its output open) for the readers of its
    /// output to reach the end, so that its last status line counts.
    fn finish(&mut self) {
        self.end();
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        while self.readers.iter().any(|h| !h.is_finished()) && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        for h in std::mem::take(&mut self.readers) {
            if h.is_finished() {
                let _ = h.join();
            }
        }
    }

    /// Reaps the command if it has exited, without waiting.
    fn reap(&mut self) {
        if self.status.is_none() {
            self.status = self.child.try_wait().ok().flatten();
        }
    }

    fn end(&mut self) {
        self.release = None;
        if self.status.is_some() {
            return;
        }
        self.status =
            crate::system::child::end_child(&mut self.child, Signal::SIGTERM, Duration::from_secs(2));
    }
}

/// Ends what is left of a launched command's family when the run ends, however it ends
/// (duration, Ctrl-C, SIGTERM, SIGHUP, the command's own exit): the command and every process
/// it forked that the probes' fork records made a member, even one that left its process group
/// or session, get SIGTERM, then SIGKILL after 2 s ([`end_family`]). Forks that happen
/// meanwhile are read from the probes at each step and ended too. Only for a command scanprof
/// launched: an attached family is never signalled.
///
/// [`end_family`]: crate::system::child::end_family
fn end_launched_family(collector: &mut Collector, l: &mut Launched) {
    l.release = None;
    crate::system::child::end_family(
        || {
            collector.poll_events();
            l.reap();
            collector.family.reap_vanished();
            collector.family.alive().map(|m| m.pid).collect()
        },
        Signal::SIGTERM,
        Duration::from_secs(2),
    );
}

/// A reader for each readable status of the scanner, with where it is read.
fn status_readers(
    sc: Option<&ScannerSetup>,
    launched: bool,
) -> Vec<(StatusAt, crate::collect::output::StatusReader)> {
    let Some(sc) = sc else {
        return Vec::new();
    };
    let (_, bases) = claim_specs(sc, launched);
    sc.status
        .iter()
        .zip(bases)
        .filter_map(|(st, base)| {
            Some((
                st.at.clone(),
                crate::collect::output::StatusReader {
                    parser: crate::wrappers::StatusParser::new(&st.rule, st.per_target),
                    base: base?,
                    what: st.label(),
                },
            ))
        })
        .collect()
}

/// A family process now runs `exe` (an exec, or found at attach). When it is the scanner's
/// process (src/wrappers/exec.rs) the analysis takes its profile and the rate its own command
/// line asks for, with its pid and comm. The uprobes stay those of the profile chosen at start
/// (attaching others here, inside the loop that reads exit records, delayed them past the
/// process's end). A command line that could not be read (the process had exited) chooses
/// nothing.
fn follow_scanner(
    choice: &mut Option<crate::wrappers::ScannerChoice>,
    analyzer: &mut Analyzer,
    pid: u32,
    comm: &str,
    exe: &str,
    argv: Option<&[String]>,
) {
    let (Some(choice), Some(argv)) = (choice.as_mut(), argv) else {
        return;
    };
    let Some(s) = choice.exec(crate::wrappers::Image { pid, comm, exe, argv }) else {
        return;
    };
    let process = crate::analysis::RateProcess {
        pid: s.pid,
        comm: s.comm.clone(),
    };
    analyzer.scanner_process(
        &s.profile.name,
        s.profile.message_types.clone(),
        crate::analysis::ArgvRate::read(&s.rate, Some(process)),
    );
}

/// Whether `cmd` names an executable file: a path, or a name found on PATH.
fn is_executable_command(cmd: &std::ffi::OsStr) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let executable = |p: &std::path::Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if cmd.as_encoded_bytes().contains(&b'/') {
        return executable(std::path::Path::new(cmd));
    }
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| executable(&dir.join(cmd))))
}

fn collect(
    cfg: SessionConfig,
    stop: Arc<AtomicBool>,
    tx: Sender<Update>,
    ready: Sender<anyhow::Result<BTreeMap<u32, String>>>,
) -> anyhow::Result<Option<std::process::ExitStatus>> {
    let mut launched = None;
    let mut tails: Vec<crate::collect::status_file::StatusTail> = Vec::new();
    let (readings_tx, readings) = mpsc::channel();
    let mut setup = || -> anyhow::Result<(Collector, u64)> {
        mark("collection thread started");
        let roots = match &cfg.target {
            Target::Pids(pids) => pids.clone(),
            Target::Command(argv) => {
                let claims = cfg
                    .scanner
                    .as_ref()
                    .map(|s| s.profile.claims.clone())
                    .unwrap_or_default();
                let streams = status_readers(cfg.scanner.as_ref(), true)
                    .into_iter()
                    .filter_map(|(at, r)| match at {
                        StatusAt::Stream(s) => Some((s, r)),
                        _ => None,
                    })
                    .collect();
                let l = Launched::spawn(
                    argv,
                    &cfg.command_output,
                    cfg.run_as.as_ref(),
                    &claims,
                    streams,
                    &readings_tx,
                )?;
                let pid = l.child.id();
                launched = Some(l);
                vec![pid]
            }
        };
        mark("target named (run: command started, held before its exec)");
        // Status files are tailed from before the command runs (run) or from now (attach).
        let launched_cmd = matches!(cfg.target, Target::Command(_));
        for (at, reader) in status_readers(cfg.scanner.as_ref(), launched_cmd) {
            if let StatusAt::File { open, .. } = at {
                let start = if launched_cmd {
                    crate::collect::status_file::StartAt::Beginning
                } else {
                    crate::collect::status_file::StartAt::Now
                };
                match crate::collect::status_file::StatusTail::start(open, reader, start, readings_tx.clone())
                {
                    Ok(t) => tails.push(t),
                    Err(e) => eprintln!("scanprof: warning: cannot read the scanner's status file: {e}"),
                }
            }
        }
        // A launched command is held before its exec: it has no descendants to look for.
        let mut family = match cfg.target {
            Target::Command(_) => ProcessTable::roots(&roots)?,
            Target::Pids(_) => ProcessTable::discover(&roots)?,
        };
        // What the command forks must not outlive scanprof either (SIGKILL included); never
        // for attached processes, which scanprof did not start.
        if matches!(cfg.target, Target::Command(_)) {
            match crate::system::watchdog::Watchdog::start() {
                Ok(w) => family.guard_with(w),
                Err(e) => eprintln!(
                    "scanprof: warning: no watchdog ({e}): if scanprof is killed, what the command forked keeps running"
                ),
            }
        }
        mark("family discovered in /proc");
        let (probes, features) = ProbeSet::load_detecting(&cfg.probe_options)?;
        mark("probes loaded and attached");
        let start_ns = monotonic_ns();
        let mut collector = Collector::new(probes, family, features.drop_reasons, start_ns)?;
        collector.set_rx_sk(features.kfree_skb_rx_sk);
        collector.set_bpf_policy(cfg.bpf_stats);
        mark("family registered with the probes");
        if let Some(sc) = &cfg.scanner {
            let launched = matches!(cfg.target, Target::Command(_));
            collector.set_scanner(
                sc.profile.clone(),
                &sc.per_packet,
                sc.anchor_exe.as_deref(),
                launched,
            );
            mark("scanner profile's uprobes attached");
        }
        Ok((collector, start_ns))
    };
    let setup = setup();
    let (mut collector, start_ns) = match setup {
        Ok(v) => v,
        Err(e) => {
            if let Some(l) = launched.as_mut() {
                l.finish();
            }
            let msg = format!("{e:#}");
            let _ = ready.send(Err(e));
            bail!(msg);
        }
    };
    if let Some(l) = launched.as_mut() {
        if let Err(e) = l.release() {
            l.finish();
            let msg = format!("{e:#}");
            let _ = ready.send(Err(e));
            bail!(msg);
        }
    }
    let probes = collector.probes().status().to_vec();
    // Set-up is done (probes loaded, the command launched with the privileges it was given):
    // this thread, which attaches uprobes to later members, keeps only what that needs.
    let dropped = {
        use crate::system::privileges::{drop_to, FOR_BPF_STATS, FOR_UPROBES, FOR_USER_COMMAND, KEPT};
        let mut keep = KEPT.to_vec();
        keep.extend_from_slice(cfg.keep_also);
        if cfg.scanner.as_ref().is_some_and(|s| !s.profile.probes.is_empty()) {
            keep.push(FOR_UPROBES);
        }
        if matches!(
            cfg.bpf_stats,
            crate::collect::bpf_time::StatsPolicy::Sampled { .. }
        ) {
            keep.push(FOR_BPF_STATS);
        }
        if cfg.run_as.is_some() {
            keep.push(FOR_USER_COMMAND);
        }
        drop_to(&keep).err()
    };
    let mut warnings: Vec<String> = probes
        .iter()
        .filter(|p| !p.attached)
        .map(|p| {
            format!(
                "probe {} unavailable ({}): its figures are missing from this run",
                p.name,
                p.error.as_deref().unwrap_or("unknown error")
            )
        })
        .collect();
    if let Some(e) = dropped {
        warnings.push(format!(
            "could not drop privileges after setup ({e}): the run goes on with every capability"
        ));
    }
    let _ = tx.send(Update::Started {
        processes: collector.family.members().to_vec(),
        probes: probes.clone(),
        clocks: crate::system::ClockReadings::at(start_ns),
    });
    let _ = ready.send(Ok(collector.drop_reasons().clone()));
    mark("probes active, command released");

    let mut analyzer = Analyzer::new(cfg.requested_pps, start_ns);
    analyzer.set_baseline(cfg.baseline.clone());
    analyzer.set_relay_fanout(cfg.relay_fanout);
    if let Some(sc) = &cfg.scanner {
        let tsc_hz =
            crate::system::tsc_freq::kernel_tsc_hz().or_else(crate::system::tsc_freq::perf_page_tsc_hz);
        let (specs, _) = claim_specs(sc, matches!(cfg.target, Target::Command(_)));
        let mut model = crate::analysis::ScannerModel::new(
            &sc.profile.name,
            sc.profile.message_types.clone(),
            cfg.requested_pps,
            sc.argv_rate.clone(),
            tsc_hz,
            start_ns,
        )
        .with_output_claims(specs)
        .with_pacers(
            sc.profile
                .probes
                .iter()
                .filter_map(|p| {
                    p.pacer.as_ref().map(|pc| crate::analysis::PacerView {
                        probe: p.name.clone(),
                        name: pc.name.clone(),
                        option: pc.option.clone(),
                        waits: pc.waits,
                    })
                })
                .collect(),
        );
        for st in &sc.status {
            if let StatusAt::Unreadable(why) = &st.at {
                model.output_note(format!("{}: {why}", st.rule.what));
            }
        }
        analyzer.set_scanner(model);
    }
    let launched_cmd = matches!(cfg.target, Target::Command(_));
    let mut choice = cfg.scanner.as_ref().and_then(|sc| {
        let set = crate::wrappers::ProfileSet::builtin().ok()?;
        Some(crate::wrappers::ScannerChoice::new(
            set,
            sc.explicit.then(|| sc.profile.clone()),
        ))
    });
    // Attached: the family found at start may already run the scanner behind a wrapper.
    if !launched_cmd {
        let found: Vec<(u32, String, String)> = collector
            .family
            .alive()
            .map(|m| (m.pid, m.comm.clone(), m.exe.clone()))
            .collect();
        for (pid, comm, exe) in found {
            let argv = crate::collect::family::command_line(pid);
            follow_scanner(&mut choice, &mut analyzer, pid, &comm, &exe, argv.as_deref());
        }
    }
    analyzer.baseline(collector.sample(start_ns));
    let interval_ns = cfg.interval.as_nanos().max(1_000_000) as u64;
    analyzer.set_interval(interval_ns);
    let end_ns = cfg.duration.map(|d| start_ns + d.as_nanos() as u64);
    let mut next_tick = start_ns + interval_ns;
    let mut last: CounterSample;
    let mut first_tick = true;
    let end_reason = loop {
        // Sleep in short steps: the ring buffer is drained and the stop flag seen promptly.
        let mut exited = false;
        loop {
            for e in collector.poll_events() {
                match e {
                    FamilyEvent::Exited { .. } => exited = true,
                    FamilyEvent::Execed {
                        pid,
                        comm,
                        path,
                        argv,
                    } => follow_scanner(&mut choice, &mut analyzer, pid, &comm, &path, argv.as_deref()),
                    _ => {}
                }
            }
            let now = monotonic_ns();
            if now >= next_tick || stop.load(Ordering::Relaxed) || end_ns.is_some_and(|e| now >= e) {
                break;
            }
            if exited {
                collector.family.reap_vanished();
                if !collector.family.any_alive() {
                    break;
                }
            }
            // The BPF statistics window of this tick opens for its last slice.
            let opens_at = collector.bpf_window_opens_at(next_tick, interval_ns);
            if opens_at.is_some_and(|at| now >= at) {
                collector.open_bpf_window(now);
            }
            let wait = (next_tick - now)
                .min(end_ns.map_or(u64::MAX, |e| e.saturating_sub(now)))
                .min(opens_at.filter(|at| *at > now).map_or(u64::MAX, |at| at - now));
            // Wakes at once on an exec: the new image may need the profile's uprobes.
            collector.wait(Duration::from_nanos(wait.min(50_000_000)));
        }
        collector.family.reap_vanished();
        let now = monotonic_ns();
        last = collector.sample(now);
        if let Some(e) = collector.bpf_stats_error() {
            let w = format!(
                "BPF run-time statistics could not be turned on ({e}): the probes' own cost is not measured"
            );
            if !warnings.contains(&w) {
                warnings.push(w);
            }
        }
        if let Some(w) = collector.receive_warning(&last) {
            if !warnings.contains(&w) {
                warnings.push(w);
            }
        }
        analyzer.output_readings(readings.try_iter());
        let mut tick_warnings = warnings.clone();
        tick_warnings.extend(collector.full_map_warnings(&last.health));
        let _ = tx.send(Update::Tick(Box::new(analyzer.tick(&last, &tick_warnings))));
        if first_tick {
            mark("first tick sent");
            first_tick = false;
        }
        next_tick += interval_ns;
        if next_tick <= now {
            next_tick = now + interval_ns;
        }
        if stop.load(Ordering::Relaxed) {
            break EndReason::Interrupted;
        }
        if end_ns.is_some_and(|e| now >= e) {
            break EndReason::Duration;
        }
        if !collector.family.any_alive() {
            break EndReason::FamilyExited;
        }
    };
    if let Some(l) = launched.as_mut() {
        end_launched_family(&mut collector, l);
        l.finish();
        // What the command sent between the last tick and its end still belongs to the run.
        for e in collector.poll_events() {
            if let FamilyEvent::Execed {
                pid,
                comm,
                path,
                argv,
            } = e
            {
                follow_scanner(&mut choice, &mut analyzer, pid, &comm, &path, argv.as_deref());
            }
        }
        collector.family.reap_vanished();
        last = collector.sample(monotonic_ns());
        analyzer.absorb(&last);
    }
    // The status files' last lines (written as the scanner ended) still belong to the run.
    for t in tails {
        t.finish();
    }
    analyzer.output_readings(readings.try_iter());
    // Records streamed while the run ended (an exit) still belong to it.
    collector.poll_events();
    let mut final_warnings = warnings;
    if last.health.lost_events > 0 {
        final_warnings.push(format!(
            "{} probe records were lost (ring buffer full): process events, blocking events and dropped-packet headers may be incomplete",
            last.health.lost_events
        ));
    }
    final_warnings.extend(collector.full_map_warnings(&last.health));
    last.processes = collector.processes(&last.threads);
    collector.family.unguard();
    let dropped_headers = collector.take_dropped_headers();
    if let Some(w) = collector.headers_warning() {
        final_warnings.push(format!("{w}; {} headers were not kept", dropped_headers.over_cap));
    } else if dropped_headers.over_cap > 0 {
        final_warnings.push(format!(
            "{} headers of dropped packets were not kept (scanprof keeps at most {} per run): \
             the pcapng has the first ones",
            dropped_headers.over_cap,
            crate::collect::headers::MAX_HEADERS
        ));
    }
    let mut summary = analyzer.summary(&last, end_reason, probes, final_warnings);
    summary.dropped_headers = dropped_headers;
    let _ = tx.send(Update::Done(Box::new(summary)));
    // The probes detach here, when the collector (and its ProbeSet) is dropped.
    drop(collector);
    Ok(launched.and_then(|l| l.status))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// The live view's command log: a fresh private directory each time (0700), and the file
    /// is created new: a symlink planted at its name is refused, never followed.
    #[test]
    fn the_command_log_is_private_and_never_follows_a_planted_symlink() {
        let log = crate::run::command_log().unwrap();
        let dir = log.parent().unwrap().to_path_buf();
        let other = crate::run::command_log().unwrap();
        assert_ne!(log, other, "two runs share a log path");
        let _ = std::fs::remove_dir(other.parent().unwrap());
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "{}", dir.display());
        assert!(!log
            .to_string_lossy()
            .contains(&format!("scanprof-{}-command.log", std::process::id())));

        let victim = dir.join("victim");
        std::fs::write(&victim, "precious\n").unwrap();
        std::os::unix::fs::symlink(&victim, &log).unwrap();
        let (tx, _rx) = mpsc::channel();
        let err = Launched::spawn(
            &["true".into()],
            &CommandOutput::File(log.clone()),
            None,
            &[],
            Vec::new(),
            &tx,
        )
        .err()
        .expect("a planted symlink was followed");
        assert!(format!("{err:#}").contains("command's output"), "{err:#}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");

        std::fs::remove_file(&log).unwrap();
        let mut l = Launched::spawn(
            &["true".into()],
            &CommandOutput::File(log.clone()),
            None,
            &[],
            Vec::new(),
            &tx,
        )
        .unwrap();
        l.finish();
        let mode = std::fs::metadata(&log).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
