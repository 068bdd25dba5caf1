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

use crate::analysis::kernel::KernelLack;
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
    /// with `--device-stages auto`: the family's rate above which the device stages are
    /// sampled (`--sample-above`)
    pub sample_above_pps: f64,
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

impl SessionConfig {
    /// Whether the session launches its target (a command) rather than attaching to pids.
    fn launches(&self) -> bool {
        matches!(self.target, Target::Command(_))
    }
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
        s.profile.wait.clone(),
        s.profile.reads_replies,
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

/// The collection thread: set-up, dropping privileges, the tick loop, the end. Each is a step
/// of its own below; this only orders them and reports a failed set-up to [`start`].
fn collect(
    cfg: SessionConfig,
    stop: Arc<AtomicBool>,
    tx: Sender<Update>,
    ready: Sender<anyhow::Result<BTreeMap<u32, String>>>,
) -> anyhow::Result<Option<std::process::ExitStatus>> {
    let mut launched = None;
    let mut tails = Vec::new();
    let (readings_tx, readings) = mpsc::channel();
    let set_up = set_up(&cfg, &mut launched, &mut tails, &readings_tx)
        .and_then(|s| launched.as_mut().map_or(Ok(()), Launched::release).map(|()| s));
    let (collector, start_ns, lacks) = match set_up {
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
    let probes = collector.probes().status().to_vec();
    // Set-up is done (probes loaded, the command launched with the privileges it was given):
    // this thread, which attaches uprobes to later members, keeps only what that needs.
    let dropped = crate::system::privileges::drop_to(&privileges_to_keep(
        cfg.keep_also,
        cfg.scanner.as_ref().is_some_and(|s| !s.profile.probes.is_empty()),
        cfg.bpf_stats,
        cfg.run_as.is_some(),
    ))
    .err();
    let warnings = start_warnings(&probes, &lacks, dropped.map(|e| e.to_string()));
    let _ = tx.send(Update::Started {
        processes: collector.family.members().to_vec(),
        probes: probes.clone(),
        clocks: crate::system::ClockReadings::at(start_ns),
    });
    let _ = ready.send(Ok(collector.drop_reasons().clone()));
    mark("probes active, command released");

    let mut run = Run::new(&cfg, collector, start_ns, warnings);
    run.analyzer.set_kernel_lacks(lacks);
    let (end_reason, mut last) = run.tick_loop(&stop, &tx, &readings);
    if let Some(l) = launched.as_mut() {
        last = run.end_launched(l);
    }
    let summary = run.summary(last, end_reason, tails, &readings, probes);
    let _ = tx.send(Update::Done(Box::new(summary)));
    // The probes detach here, when the collector (and its ProbeSet) is dropped.
    drop(run);
    Ok(launched.and_then(|l| l.status))
}

/// Set-up: the target named (a command started and held before its exec), the scanner's
/// status files tailed, the family found, the probes loaded and attached, and the scanner's
/// uprobes. The collector, the run's start (ns, CLOCK_MONOTONIC), and what the kernel lacks.
fn set_up(
    cfg: &SessionConfig,
    launched: &mut Option<Launched>,
    tails: &mut Vec<crate::collect::status_file::StatusTail>,
    readings: &Sender<crate::collect::output::OutputEvent>,
) -> anyhow::Result<(Collector, u64, Vec<KernelLack>)> {
    mark("collection thread started");
    let roots = name_target(cfg, launched, readings)?;
    mark("target named (run: command started, held before its exec)");
    tails.extend(tail_status_files(cfg, readings));
    let family = find_family(cfg, &roots)?;
    mark("family discovered in /proc");
    let (probes, features) = ProbeSet::load_detecting(&cfg.probe_options)?;
    mark("probes loaded and attached");
    let start_ns = monotonic_ns();
    let lacks = kernel_lacks(&features);
    let mut collector = Collector::new(probes, family, features.drop_reasons, start_ns)?;
    collector.set_rx_sk(features.kfree_skb_rx_sk);
    collector.set_bpf_policy(cfg.bpf_stats);
    collector.sample_device_stages_above(cfg.sample_above_pps);
    mark("family registered with the probes");
    if let Some(sc) = &cfg.scanner {
        collector.set_scanner(
            sc.profile.clone(),
            &sc.per_packet,
            sc.anchor_exe.as_deref(),
            cfg.launches(),
        );
        mark("scanner profile's uprobes attached");
    }
    Ok((collector, start_ns, lacks))
}

/// What the running kernel lacks that the probes measure with, from its features: what the
/// run's warnings, `doctor` and the diagnosis say cannot be judged on it.
pub fn kernel_lacks(features: &crate::probes::KernelFeatures) -> Vec<KernelLack> {
    KernelLack::ALL
        .into_iter()
        .filter(|l| match l {
            KernelLack::DropReasons => !features.kfree_skb_reason,
            KernelLack::QdiscEnqueue => !features.has_tracepoint("qdisc_enqueue"),
            KernelLack::AttachCookie => !features.attach_cookie,
            KernelLack::SockFromFile => !features.sock_from_file,
        })
        .collect()
}

/// The family's roots: the pids attached to, or the launched command's (started here, held
/// before its exec, with its output streams read for the scanner's status).
fn name_target(
    cfg: &SessionConfig,
    launched: &mut Option<Launched>,
    readings: &Sender<crate::collect::output::OutputEvent>,
) -> anyhow::Result<Vec<u32>> {
    let argv = match &cfg.target {
        Target::Pids(pids) => return Ok(pids.clone()),
        Target::Command(argv) => argv,
    };
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
        readings,
    )?;
    let pid = l.child.id();
    *launched = Some(l);
    Ok(vec![pid])
}

/// The scanner's status files, tailed from before the command runs (run) or from now
/// (attach). A file that cannot be read is a warning.
fn tail_status_files(
    cfg: &SessionConfig,
    readings: &Sender<crate::collect::output::OutputEvent>,
) -> Vec<crate::collect::status_file::StatusTail> {
    use crate::collect::status_file::{StartAt, StatusTail};
    let start = if cfg.launches() {
        StartAt::Beginning
    } else {
        StartAt::Now
    };
    let mut tails = Vec::new();
    for (at, reader) in status_readers(cfg.scanner.as_ref(), cfg.launches()) {
        if let StatusAt::File { open, .. } = at {
            match StatusTail::start(open, reader, start, readings.clone()) {
                Ok(t) => tails.push(t),
                Err(e) => eprintln!("scanprof: warning: cannot read the scanner's status file: {e}"),
            }
        }
    }
    tails
}

/// The process family: a launched command is held before its exec (it has no descendants to
/// look for); attached pids bring their descendants. What a launched command forks must not
/// outlive scanprof (SIGKILL included), so a watchdog guards it; never for attached processes,
/// which scanprof did not start.
fn find_family(cfg: &SessionConfig, roots: &[u32]) -> anyhow::Result<ProcessTable> {
    if !cfg.launches() {
        return ProcessTable::discover(roots);
    }
    let mut family = ProcessTable::roots(roots)?;
    match crate::system::watchdog::Watchdog::start() {
        Ok(w) => family.guard_with(w),
        Err(e) => eprintln!(
            "scanprof: warning: no watchdog ({e}): if scanprof is killed, what the command forked keeps running"
        ),
    }
    Ok(family)
}

/// The capabilities the collection thread keeps after set-up: [`KEPT`], the caller's `also`,
/// and what the run still does: attach the profile's uprobes to later members (`uprobes`),
/// switch BPF statistics on and off each tick (a sampled policy), end a command launched as
/// another user (`user_command`).
///
/// [`KEPT`]: crate::system::privileges::KEPT
fn privileges_to_keep(
    also: &[crate::system::caps::Cap],
    uprobes: bool,
    bpf_stats: crate::collect::bpf_time::StatsPolicy,
    user_command: bool,
) -> Vec<crate::system::caps::Cap> {
    use crate::system::privileges::{FOR_BPF_STATS, FOR_UPROBES, FOR_USER_COMMAND, KEPT};
    let mut keep = KEPT.to_vec();
    keep.extend_from_slice(also);
    if uprobes {
        keep.push(FOR_UPROBES);
    }
    if matches!(bpf_stats, crate::collect::bpf_time::StatsPolicy::Sampled { .. }) {
        keep.push(FOR_BPF_STATS);
    }
    if user_command {
        keep.push(FOR_USER_COMMAND);
    }
    keep
}

/// The warnings every tick carries from the start: each probe that did not attach, what the
/// kernel lacks and cannot be judged without it, and privileges that could not be dropped (the
/// error's text).
fn start_warnings(probes: &[ProbeStatus], lacks: &[KernelLack], not_dropped: Option<String>) -> Vec<String> {
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
    warnings.extend(lacks.iter().map(|l| l.warning()));
    if let Some(e) = not_dropped {
        warnings.push(format!(
            "could not drop privileges after setup ({e}): the run goes on with every capability"
        ));
    }
    warnings
}

/// Adds a warning unless it is there already.
fn add_once(warnings: &mut Vec<String>, w: String) {
    if !warnings.contains(&w) {
        warnings.push(w);
    }
}

/// The end-of-run warning for probe records the ring buffer had no room for, if any.
fn lost_records_warning(lost_events: u64) -> Option<String> {
    (lost_events > 0).then(|| {
        format!(
            "{lost_events} probe records were lost (ring buffer full): process events, blocking events and dropped-packet headers may be incomplete"
        )
    })
}

/// The end-of-run warning for dropped packets' headers beyond what the run keeps, if any.
fn headers_over_cap_warning(h: &crate::collect::headers::DroppedHeaders) -> Option<String> {
    (h.over_cap > 0).then(|| {
        format!(
            "{} headers of dropped packets were not kept (scanprof keeps at most {} per run): \
             the pcapng has the first ones",
            h.over_cap,
            crate::collect::headers::MAX_HEADERS
        )
    })
}

/// Why the run ends after a tick, if it does: the stop flag first, then the duration, then a
/// family with no process left.
fn end_reason(stopped: bool, duration_over: bool, any_alive: bool) -> Option<EndReason> {
    if stopped {
        Some(EndReason::Interrupted)
    } else if duration_over {
        Some(EndReason::Duration)
    } else if !any_alive {
        Some(EndReason::FamilyExited)
    } else {
        None
    }
}

/// The longest the tick loop sleeps at once, ns: the ring buffer is drained and the stop flag
/// seen at least this often.
const LONGEST_WAIT_NS: u64 = 50_000_000;

/// The tick loop's clock: when the next tick is due and when `--duration` ends the run, on the
/// timestamps it is given (ns, CLOCK_MONOTONIC).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TickClock {
    /// ns between ticks (at least 1 ms)
    interval_ns: u64,
    /// when the next tick is due, ns
    next_tick: u64,
    /// when the duration ends the run, ns
    end_ns: Option<u64>,
}

impl TickClock {
    fn new(start_ns: u64, interval: Duration, duration: Option<Duration>) -> TickClock {
        let interval_ns = interval.as_nanos().max(1_000_000) as u64;
        TickClock {
            interval_ns,
            next_tick: start_ns + interval_ns,
            end_ns: duration.map(|d| start_ns + d.as_nanos() as u64),
        }
    }

    /// Whether the duration is over at `now`.
    fn ended(&self, now: u64) -> bool {
        self.end_ns.is_some_and(|e| now >= e)
    }

    /// Whether the loop stops waiting at `now`: the tick is due, or the duration over.
    fn due(&self, now: u64) -> bool {
        now >= self.next_tick || self.ended(now)
    }

    /// How long to sleep at `now`, ns: until the tick, the end, or the BPF statistics window
    /// that opens at `opens_at`, whichever is first, and never more than [`LONGEST_WAIT_NS`].
    fn wait_ns(&self, now: u64, opens_at: Option<u64>) -> u64 {
        self.next_tick
            .saturating_sub(now)
            .min(self.end_ns.map_or(u64::MAX, |e| e.saturating_sub(now)))
            .min(opens_at.filter(|at| *at > now).map_or(u64::MAX, |at| at - now))
            .min(LONGEST_WAIT_NS)
    }

    /// The next tick after one taken at `now`: one interval on, or one interval after `now`
    /// when the loop fell behind by more than an interval (ticks are not made up).
    fn advance(&mut self, now: u64) {
        self.next_tick += self.interval_ns;
        if self.next_tick <= now {
            self.next_tick = now + self.interval_ns;
        }
    }
}

/// What the collection thread holds from the first tick to the summary.
struct Run {
    collector: Collector,
    analyzer: Analyzer,
    /// the scanner recognised among the family's images (src/wrappers/exec.rs), if profiled
    choice: Option<crate::wrappers::ScannerChoice>,
    /// the warnings of every tick from now on
    warnings: Vec<String>,
    clock: TickClock,
}

impl Run {
    /// The analysis set up for the run, the scanner followed in the family found at attach,
    /// and the baseline sample taken at `start_ns`.
    fn new(cfg: &SessionConfig, collector: Collector, start_ns: u64, warnings: Vec<String>) -> Run {
        let mut analyzer = Analyzer::new(cfg.requested_pps, start_ns);
        analyzer.set_baseline(cfg.baseline.clone());
        analyzer.set_relay_fanout(cfg.relay_fanout);
        if let Some(sc) = &cfg.scanner {
            analyzer.set_scanner(scanner_model(sc, cfg.requested_pps, cfg.launches(), start_ns));
        }
        let choice = cfg.scanner.as_ref().and_then(|sc| {
            let set = crate::wrappers::ProfileSet::builtin().ok()?;
            Some(crate::wrappers::ScannerChoice::new(
                set,
                sc.explicit.then(|| sc.profile.clone()),
            ))
        });
        let clock = TickClock::new(start_ns, cfg.interval, cfg.duration);
        let mut run = Run {
            collector,
            analyzer,
            choice,
            warnings,
            clock,
        };
        // Attached: the family found at start may already run the scanner behind a wrapper.
        if !cfg.launches() {
            run.follow_found();
        }
        run.analyzer.baseline(run.collector.sample(start_ns));
        run.analyzer.set_interval(run.clock.interval_ns);
        run
    }

    /// Follows the scanner in each live member of the family found at attach.
    fn follow_found(&mut self) {
        let found: Vec<(u32, String, String)> = self
            .collector
            .family
            .alive()
            .map(|m| (m.pid, m.comm.clone(), m.exe.clone()))
            .collect();
        for (pid, comm, exe) in found {
            let argv = crate::collect::family::command_line(pid);
            follow_scanner(
                &mut self.choice,
                &mut self.analyzer,
                pid,
                &comm,
                &exe,
                argv.as_deref(),
            );
        }
    }

    /// Drains the probes' records; an exec may be the scanner's (its profile and rate follow).
    /// Whether a member exited.
    fn poll_family(&mut self) -> bool {
        let mut exited = false;
        for e in self.collector.poll_events() {
            match e {
                FamilyEvent::Exited { .. } => exited = true,
                FamilyEvent::Execed {
                    pid,
                    comm,
                    path,
                    argv,
                } => follow_scanner(
                    &mut self.choice,
                    &mut self.analyzer,
                    pid,
                    &comm,
                    &path,
                    argv.as_deref(),
                ),
                _ => {}
            }
        }
        exited
    }

    /// Ticks until the run ends: why it ended, and the last sample.
    fn tick_loop(
        &mut self,
        stop: &AtomicBool,
        tx: &Sender<Update>,
        readings: &Receiver<crate::collect::output::OutputEvent>,
    ) -> (EndReason, CounterSample) {
        let mut first_tick = true;
        loop {
            self.wait_for_tick(stop);
            self.collector.family.reap_vanished();
            let now = monotonic_ns();
            let last = self.tick(now, tx, readings);
            if first_tick {
                mark("first tick sent");
                first_tick = false;
            }
            self.clock.advance(now);
            let stopped = stop.load(Ordering::Relaxed);
            if let Some(r) = end_reason(stopped, self.clock.ended(now), self.collector.family.any_alive()) {
                return (r, last);
            }
        }
    }

    /// Sleeps in short steps until the tick is due, the stop flag is raised, the duration ends
    /// or the whole family has exited, draining the probes' records and opening the tick's BPF
    /// statistics window for its last slice. Wakes at once on an exec: the new image may need
    /// the profile's uprobes.
    fn wait_for_tick(&mut self, stop: &AtomicBool) {
        let mut exited = false;
        loop {
            exited |= self.poll_family();
            let now = monotonic_ns();
            if self.clock.due(now) || stop.load(Ordering::Relaxed) {
                return;
            }
            if exited {
                self.collector.family.reap_vanished();
                if !self.collector.family.any_alive() {
                    return;
                }
            }
            let mut opens_at = self
                .collector
                .bpf_window_opens_at(self.clock.next_tick, self.clock.interval_ns);
            if opens_at.is_some_and(|at| now >= at) {
                self.collector.open_bpf_window(now);
            }
            // The device-stage window (`--device-stages sampled`) opened at the tick's start.
            let closes_at = self.collector.device_window_closes_at(self.clock.interval_ns);
            if closes_at.is_some_and(|at| now >= at) {
                self.collector.close_device_window();
            } else if let Some(at) = closes_at {
                opens_at = Some(opens_at.map_or(at, |o| o.min(at)));
            }
            self.collector
                .wait(Duration::from_nanos(self.clock.wait_ns(now, opens_at)));
        }
    }

    /// One tick at `now`: the sample, the warnings it raises (kept for the rest of the run),
    /// the scanner's output read so far, and the Snapshot sent. The sample.
    fn tick(
        &mut self,
        now: u64,
        tx: &Sender<Update>,
        readings: &Receiver<crate::collect::output::OutputEvent>,
    ) -> CounterSample {
        let last = self.collector.sample(now);
        if let Some(e) = self.collector.bpf_stats_error() {
            let w = format!(
                "BPF run-time statistics could not be turned on ({e}): the probes' own cost is not measured"
            );
            add_once(&mut self.warnings, w);
        }
        if let Some(e) = self.collector.device_window_error() {
            let w = format!(
                "a device-stage window could not be opened ({e}): the device stages are not counted from then on"
            );
            add_once(&mut self.warnings, w);
        }
        if let Some(w) = self.collector.receive_warning(&last) {
            add_once(&mut self.warnings, w);
        }
        self.analyzer.output_readings(readings.try_iter());
        let mut tick_warnings = self.warnings.clone();
        tick_warnings.extend(self.collector.full_map_warnings(&last.health));
        tick_warnings.extend(last.health.delivery_warnings(&last.skipped_runs));
        tick_warnings.extend(last.device_sampling.and_then(|d| d.slow_switch_warning()));
        let _ = tx.send(Update::Tick(Box::new(self.analyzer.tick(&last, &tick_warnings))));
        last
    }

    /// The end of a launched command: its family ended, and what it sent between the last tick
    /// and its end taken into the run. The last sample.
    fn end_launched(&mut self, l: &mut Launched) -> CounterSample {
        end_launched_family(&mut self.collector, l);
        l.finish();
        self.poll_family();
        self.collector.family.reap_vanished();
        let last = self.collector.sample(monotonic_ns());
        self.analyzer.absorb(&last);
        last
    }

    /// The run's Summary from its last sample: the status files' last lines (written as the
    /// scanner ended) and the records streamed while it ended still belong to it.
    fn summary(
        &mut self,
        mut last: CounterSample,
        end_reason: EndReason,
        tails: Vec<crate::collect::status_file::StatusTail>,
        readings: &Receiver<crate::collect::output::OutputEvent>,
        probes: Vec<ProbeStatus>,
    ) -> Summary {
        for t in tails {
            t.finish();
        }
        self.analyzer.output_readings(readings.try_iter());
        self.collector.poll_events();
        let mut warnings = std::mem::take(&mut self.warnings);
        warnings.extend(lost_records_warning(last.health.lost_events));
        warnings.extend(self.collector.full_map_warnings(&last.health));
        warnings.extend(last.health.delivery_warnings(&last.skipped_runs));
        warnings.extend(self.collector.drop_check_warning());
        warnings.extend(self.collector.skipped_check_warning());
        warnings.extend(last.device_sampling.and_then(|d| d.slow_switch_warning()));
        last.processes = self.collector.processes(&last.threads);
        self.collector.family.unguard();
        let dropped_headers = self.collector.take_dropped_headers();
        if let Some(w) = self.collector.headers_warning() {
            warnings.push(format!("{w}; {} headers were not kept", dropped_headers.over_cap));
        } else {
            warnings.extend(headers_over_cap_warning(&dropped_headers));
        }
        let mut summary = self.analyzer.summary(&last, end_reason, probes, warnings);
        summary.dropped_headers = dropped_headers;
        summary
    }
}

/// The scanner's model for the analysis: its profile, the rate its command line asks for, the
/// figures read from its output, its pacers, and why a status cannot be read.
fn scanner_model(
    sc: &ScannerSetup,
    requested_pps: Option<f64>,
    launched: bool,
    start_ns: u64,
) -> crate::analysis::ScannerModel {
    let tsc_hz = crate::system::tsc_freq::kernel_tsc_hz().or_else(crate::system::tsc_freq::perf_page_tsc_hz);
    let (specs, _) = claim_specs(sc, launched);
    let pacers = sc
        .profile
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
        .collect();
    let mut model = crate::analysis::ScannerModel::new(
        &sc.profile.name,
        sc.profile.message_types.clone(),
        requested_pps,
        sc.argv_rate.clone(),
        tsc_hz,
        start_ns,
    )
    .with_output_claims(specs)
    .with_wait(sc.profile.wait.clone())
    .with_reads_replies(sc.profile.reads_replies)
    .with_pacers(pacers);
    for st in &sc.status {
        if let StatusAt::Unreadable(why) = &st.at {
            model.output_note(format!("{}: {why}", st.rule.what));
        }
    }
    model
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// The tick loop's clock: a tick one interval after the start, the wait bounded by the
    /// tick, the duration's end, the statistics window and 50 ms; a late tick is not made up.
    #[test]
    fn the_tick_clock_is_due_at_the_interval_and_waits_for_the_nearest_event() {
        let ms = 1_000_000;
        let mut c = TickClock::new(
            1_000 * ms,
            Duration::from_millis(500),
            Some(Duration::from_millis(1_200)),
        );
        assert_eq!(c.next_tick, 1_500 * ms);
        assert_eq!(c.end_ns, Some(2_200 * ms));
        assert!(!c.due(1_499 * ms));
        assert!(c.due(1_500 * ms));
        assert_eq!(c.wait_ns(1_400 * ms, None), 50 * ms, "never longer than 50 ms");
        assert_eq!(c.wait_ns(1_480 * ms, None), 20 * ms, "until the tick");
        assert_eq!(
            c.wait_ns(1_440 * ms, Some(1_450 * ms)),
            10 * ms,
            "until the window opens"
        );
        assert_eq!(
            c.wait_ns(1_480 * ms, Some(1_450 * ms)),
            20 * ms,
            "a window already open"
        );
        c.advance(1_500 * ms);
        assert_eq!(c.next_tick, 2_000 * ms);
        c.advance(2_700 * ms);
        assert_eq!(c.next_tick, 3_200 * ms, "one interval after a late tick");
        assert_eq!(c.wait_ns(2_190 * ms, None), 10 * ms, "until the duration ends");
        assert!(!c.ended(2_199 * ms));
        assert!(c.ended(2_200 * ms) && c.due(2_200 * ms));
        let short = TickClock::new(0, Duration::from_micros(10), None);
        assert_eq!(short.interval_ns, ms, "ticks are at least 1 ms apart");
        assert_eq!(short.end_ns, None);
    }

    /// The stop flag ends a run before its duration, and the duration before the family's end.
    #[test]
    fn the_end_reason_is_the_stop_then_the_duration_then_the_family() {
        assert_eq!(end_reason(true, true, false), Some(EndReason::Interrupted));
        assert_eq!(end_reason(false, true, false), Some(EndReason::Duration));
        assert_eq!(end_reason(false, false, false), Some(EndReason::FamilyExited));
        assert_eq!(end_reason(false, false, true), None);
    }

    /// After set-up the thread keeps the base set, the caller's, and one capability per thing
    /// the rest of the run still does.
    #[test]
    fn privileges_kept_after_set_up_are_what_the_run_still_needs() {
        use crate::collect::bpf_time::StatsPolicy;
        use crate::system::privileges::{FOR_LAB, FOR_USER_COMMAND, KEPT};
        assert_eq!(
            privileges_to_keep(&[], false, StatsPolicy::Off, false),
            KEPT.to_vec()
        );
        assert_eq!(
            privileges_to_keep(&[], false, StatsPolicy::Continuous, false),
            KEPT.to_vec()
        );
        let all = privileges_to_keep(&FOR_LAB, true, StatsPolicy::Sampled { divisor: 10 }, true);
        assert_eq!(all.len(), KEPT.len() + FOR_LAB.len() + 3);
        assert!(FOR_LAB.iter().all(|c| all.contains(c)));
        assert_eq!(all.last(), Some(&FOR_USER_COMMAND));
    }

    /// Each probe that did not attach is a warning naming it and why; a failed privilege drop
    /// says the run goes on with every capability; a warning is added once.
    #[test]
    fn start_and_end_warnings_name_what_is_missing() {
        let mut probes = vec![
            ProbeStatus {
                name: "send_path".into(),
                attached: true,
                error: None,
            },
            ProbeStatus {
                name: "rings".into(),
                attached: false,
                error: Some("no BTF".into()),
            },
        ];
        assert_eq!(
            start_warnings(&probes, &[], None),
            ["probe rings unavailable (no BTF): its figures are missing from this run"]
        );
        probes[1].error = None;
        let w = start_warnings(&probes, &[], Some("EPERM".into()));
        assert_eq!(w.len(), 2);
        assert!(w[0].contains("(unknown error)"), "{w:?}");
        assert!(
            w[1].starts_with("could not drop privileges after setup (EPERM)"),
            "{w:?}"
        );
        // What the kernel lacks: one line each, saying what cannot be judged on it.
        let w = start_warnings(
            &probes[..1],
            &[KernelLack::DropReasons, KernelLack::AttachCookie],
            None,
        );
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(w[0].starts_with("this kernel has no drop reasons"), "{w:?}");
        assert!(
            w[0].contains("NO_SOCKET") && w[0].contains("cannot be judged on this kernel"),
            "{w:?}"
        );
        assert!(w[1].contains("bpf_get_attach_cookie"), "{w:?}");
        let mut once = Vec::new();
        add_once(&mut once, "a".into());
        add_once(&mut once, "a".into());
        assert_eq!(once, ["a"]);
        assert_eq!(lost_records_warning(0), None);
        assert!(lost_records_warning(7).is_some_and(|w| w.starts_with("7 probe records were lost")));
        let mut h = crate::collect::headers::DroppedHeaders::default();
        assert_eq!(headers_over_cap_warning(&h), None);
        h.over_cap = 3;
        assert!(headers_over_cap_warning(&h).is_some_and(|w| w.starts_with("3 headers of dropped packets")));
    }

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
