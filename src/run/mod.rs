//! The run machinery that `run`, `attach`, `record`, `lab` and `sweep` share: the session's
//! configuration from the options (the scanner's profile, its status sources, the baseline),
//! the signals that end a run, which processes may be attached to, and the exit code a
//! launched command passes on. `render` runs a session to its end and shows it; `checks` is
//! what the machine allows (`scanprof doctor`, and every bundle's checks.json).

pub mod agent;
pub mod checks;
pub mod render;

pub use render::{render, render_with, ExportTarget, Rendered, ViewOptions};

use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};

use crate::analysis::ArgvRate;
use crate::cli::{BpfStatsArg, DeviceStagesArg, RunOptions, SyscallHooksArg};
use crate::collect::bpf_time::StatsPolicy;
use crate::collect::uprobes::PerPacket;
use crate::probes::{DeviceStages, ProbeOptions, SyscallHooks};
use crate::session::{CommandOutput, ScannerSetup, SessionConfig, StatusAt, StatusSetup, Target};
use crate::wrappers::{requested_rate, OutputStream, ProfileSet, ScannerProfile, StatusLocation};
use std::path::{Path, PathBuf};

use crate::system::user_files::{read_text, Links};

/// The most bytes of a profile file read (the built-in ones are a few KiB).
const MAX_PROFILE_BYTES: u64 = 1 << 20;

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
    if let (Some(pps), false) = (opts.sample_above, opts.device_stages == DeviceStagesArg::Auto) {
        use clap::ValueEnum;
        bail!(
            "--sample-above {pps} sets the rate at which --device-stages auto starts sampling; \
             with --device-stages {} it would change nothing: add --device-stages auto, or leave \
             --sample-above out",
            opts.device_stages
                .to_possible_value()
                .map_or_else(String::new, |v| v.get_name().to_string())
        );
    }
    probe_options.recv_class_bounds = opts.recv_classes.clone();
    probe_options.syscall_hooks = match opts.syscall_hooks {
        SyscallHooksArg::PerCall => SyscallHooks::PerCall,
        SyscallHooksArg::All => SyscallHooks::All,
    };
    probe_options.device_stages = match opts.device_stages {
        DeviceStagesArg::Exact => DeviceStages::Exact,
        DeviceStagesArg::Sampled => DeviceStages::Sampled,
        DeviceStagesArg::Auto => DeviceStages::Auto,
    };
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
        sample_above_pps: opts.sample_above.unwrap_or(crate::cli::DEFAULT_SAMPLE_ABOVE_PPS),
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
            let text = read_text(Path::new(name), MAX_PROFILE_BYTES, Links::Follow)
                .with_context(|| format!("reading profile {name}"))?;
            explicit = ScannerProfile::parse_named(&text, name)?;
            let at = set
                .find_in_argv(&argv)
                .filter(|(p, _)| p.name == explicit.name)
                .map(|(_, i)| i);
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
            let at = argv.iter().position(|w| {
                let base = w.rsplit('/').next().unwrap_or(w);
                p.processes
                    .iter()
                    .any(|r| r.exe.iter().any(|e| e == base || e == w))
            });
            (p, at)
        }
        None => match set.find_in_argv(&argv) {
            Some((p, at)) => (p, Some(at)),
            None => {
                let exe_name = exe.as_ref().map(|e| e.display().to_string()).unwrap_or_default();
                match set.recognise(&exe_name, "") {
                    // An attached process its profile knows: its own command line.
                    Some((p, _)) if !p.fallback => (p, Some(0)),
                    Some((p, _)) => (p, None),
                    None => return Ok(None),
                }
            }
        },
    };
    // The scanner's words: from the word its profile recognises, else after the wrappers. When
    // a wrapper hides them (a shell script), nothing here is the scanner's: its rate is read
    // from its own process when the family's execs show it (session::follow_scanner).
    let (words, hidden) = match at {
        Some(at) => (argv[at.min(argv.len())..].to_vec(), false),
        None => crate::wrappers::strip_wrappers(&argv),
    };
    let words: &[String] = if hidden { &[] } else { &words };
    let rate = requested_rate(profile, words, None);
    let argv_rate = if hidden {
        ArgvRate {
            provenance: vec![format!(
                "the command starts its sender through `{}`: the rate is read from the sender's own command line when a profile recognises its process (else give --requested)",
                argv.iter().take(2).cloned().collect::<Vec<_>>().join(" ")
            )],
            ..ArgvRate::default()
        }
    } else {
        ArgvRate::read(&rate, None)
    };
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
        argv_rate,
        explicit: opts.profile.is_some(),
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
pub fn measure_baseline(
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
    let pacer = opts.baseline_pacer;
    eprintln!(
        "scanprof: measuring this machine's baseline first: {} pacing at {rate} pps ({source}) for {} s in a private lab",
        pacer, opts.baseline_seconds
    );
    crate::senders::baseline::baseline_at(rate, pacer, opts.baseline_seconds)
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

/// The target's command line, and for an attached process its executable: the command to
/// launch, or the first pid's /proc/PID/cmdline and exe.
pub(crate) fn target_argv(target: &Target) -> (Vec<String>, Option<PathBuf>) {
    match target {
        Target::Command(argv) => (crate::session::lossy_words(argv), None),
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

/// Why `pid` is not a target to attach to: scanprof itself, pid 1 (whose family is every
/// process) or a kernel thread, unless `allow_system`; None when it is fine (or gone: the
/// session then says it does not exist).
pub fn refused_target(pid: u32, allow_system: bool) -> Option<String> {
    if pid == std::process::id() {
        return Some(format!("pid {pid} is scanprof itself: give the scanner's pid"));
    }
    if has_exited(pid) {
        return Some(format!(
            "pid {pid} has exited (a zombie: its parent has not reaped it yet), so it sends \
             nothing: give the pid of a running scanner"
        ));
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

/// Whether every thread of `pid` has exited (state Z or X in /proc/PID/task/*/stat): a zombie.
/// A leader that exited while its other threads run shows Z too, but is no zombie. False when
/// the process is gone (the session says so) or cannot be read.
fn has_exited(pid: u32) -> bool {
    let state = |stat: &str| {
        stat.rfind(')')
            .and_then(|i| stat[i + 1..].split_whitespace().next().map(String::from))
    };
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    let mut any = false;
    for t in tasks.flatten() {
        let Ok(stat) = std::fs::read_to_string(t.path().join("stat")) else {
            continue;
        };
        any = true;
        if !matches!(state(&stat).as_deref(), Some("Z" | "X")) {
            return false;
        }
    }
    any
}

/// Whether a /proc/PID/stat line is a kernel thread's: PF_KTHREAD in its flags (field 9).
pub fn is_kernel_thread(stat: &str) -> bool {
    const PF_KTHREAD: u64 = 0x0020_0000;
    stat.rfind(')')
        .and_then(|i| stat[i + 1..].split_whitespace().nth(6))
        .and_then(|f| f.parse::<u64>().ok())
        .is_some_and(|flags| flags & PF_KTHREAD != 0)
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
        let run = Target::Command(words("zmap -u s.csv").into_iter().map(Into::into).collect());
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

    /// The run options of `scanprof run [EXTRA...] -- true`.
    fn run_options(extra: &[&str]) -> RunOptions {
        use clap::Parser;
        let argv = ["scanprof", "run"].iter().chain(extra).chain(&["--", "true"]);
        match crate::cli::Cli::try_parse_from(argv).unwrap().command {
            crate::cli::Command::Run { run, .. } => run,
            other => panic!("{other:?}"),
        }
    }

    /// `--sample-above` only sets auto's limit: given with another `--device-stages` it would
    /// change nothing, so it is refused rather than silently ignored.
    #[test]
    fn sample_above_is_refused_without_device_stages_auto() {
        let target = || Target::Command(vec!["true".into()]);
        for stages in [&[][..], &["--device-stages", "sampled"][..]] {
            let extra: Vec<&str> = stages.iter().copied().chain(["--sample-above", "2000"]).collect();
            let err = session_config(target(), &run_options(&extra), Output::Quiet)
                .err()
                .unwrap_or_else(|| panic!("{extra:?} was accepted"))
                .to_string();
            assert!(err.contains("add --device-stages auto"), "{err}");
            let named = stages.get(1).copied().unwrap_or("exact");
            assert!(err.contains(&format!("with --device-stages {named} ")), "{err}");
        }
        let auto = |extra: &[&str]| session_config(target(), &run_options(extra), Output::Quiet).unwrap();
        let cfg = auto(&["--device-stages", "auto", "--sample-above", "2000"]);
        assert_eq!(cfg.sample_above_pps, 2000.0);
        let cfg = auto(&["--device-stages", "auto"]);
        assert_eq!(cfg.sample_above_pps, crate::cli::DEFAULT_SAMPLE_ABOVE_PPS);
    }

    /// Issue 28 item 5: a scanner started by a shell script. The launch's own words are the
    /// shell's: they neither give a rate (masscan's default 100 pps was read from them with
    /// `--profile masscan`) nor a scanner; the rate waits for the scanner's own process.
    #[test]
    fn a_scanner_behind_a_shell_script_takes_no_rate_from_the_scripts_words() {
        let script = "ip link set lo up; exec ip netns exec lab masscan --rate 50000 -p80 10.9.0.2";
        let target = Target::Command(vec!["sh".into(), "-c".into(), script.into()]);
        for extra in [&[][..], &["--profile", "masscan"][..]] {
            let sc = scanner_setup(&target, &run_options(extra)).unwrap().unwrap();
            assert_eq!(sc.explicit, !extra.is_empty());
            assert_eq!(sc.argv_rate.pps, None, "{extra:?}: {:?}", sc.argv_rate);
            assert_eq!(sc.argv_rate.kind, None, "{extra:?}");
            assert!(
                sc.argv_rate.provenance[0].contains("the sender's own command line"),
                "{:?}",
                sc.argv_rate.provenance
            );
        }
        // Wrappers it sees through still give the scanner's words, and its rate.
        let target = Target::Command(
            "timeout 60 ip netns exec lab masscan --rate 700 10.9.0.2"
                .split(' ')
                .map(std::ffi::OsString::from)
                .collect(),
        );
        let sc = scanner_setup(&target, &run_options(&[])).unwrap().unwrap();
        assert_eq!(
            (sc.profile.name.as_str(), sc.argv_rate.pps),
            ("masscan", Some(700.0))
        );
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
