//! `scanprof agent`: a long-running service that follows every exec on the host
//! (probes::exec_watch) and, for each scanner that starts (config.rs says which), runs
//! `scanprof attach` on its family in a child process until the family exits: one run id, one
//! spool directory (spool.rs: the bundle, the metrics file, the attach log, run.json) per run.
//! It serves one exposition of every live run and of each ended run's final metrics for the
//! retention window, beside its own (`scanprof_agent_*`). Steps: [`Agent::set_up`], then
//! [`Agent::step`] (execs, ended runs, retention, the exposition) until stopped, SIGHUP
//! reloading the file ([`Agent::reload`]); [`Agent::stop`] ends every run and detaches.

pub mod config;
pub mod spool;

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context;
use nix::sys::signal::Signal;

use crate::probes::exec_watch::{ExecRecord, ExecWatch};
use crate::system::caps::{self, Cap};
use crate::system::child::{die_with_parent, end_child};
use crate::views::metrics::{merge, AgentStats, Server};
use crate::wrappers::ProfileSet;
use config::{cgroup_v2, follows, AgentConfig, Exec, Followed};
use spool::{Retention, RunRecord, SpoolEntry};

/// How long one step waits for execs.
const POLL: Duration = Duration::from_millis(250);
/// How often the spool's retention is applied.
const PRUNE_EVERY: Duration = Duration::from_secs(10);
/// Ended runs whose final metrics are served at most, whatever the window.
const MAX_RETAINED: usize = 256;
/// How long a run's attach has to write its summary and bundle when the agent stops.
const STOP_GRACE: Duration = Duration::from_secs(15);
/// Ancestors looked at to see whether an exec is inside a followed family.
const MAX_DEPTH: usize = 64;
/// Bytes of a run's metrics file read, at most.
const MAX_METRICS_BYTES: u64 = 4 << 20;

/// What the agent keeps after setup: what the `attach` runs it starts need (they inherit the
/// bounding set: KEPT, CAP_SYS_ADMIN for uprobes and BPF statistics, CAP_DAC_OVERRIDE for
/// bundles, CAP_KILL, and CAP_SETPCAP for them to drop their own), and nothing else
/// (CAP_NET_ADMIN, CAP_NET_RAW, CAP_SETUID... go).
pub const AGENT_KEEPS: [Cap; 9] = [
    caps::CAP_BPF,
    caps::CAP_PERFMON,
    caps::CAP_SYS_PTRACE,
    caps::CAP_DAC_READ_SEARCH,
    caps::CAP_SYSLOG,
    caps::CAP_SYS_ADMIN,
    caps::CAP_DAC_OVERRIDE,
    caps::CAP_KILL,
    caps::CAP_SETPCAP,
];

/// A run being followed.
struct Live {
    record: RunRecord,
    dir: PathBuf,
    child: Child,
    /// the scanner's start time (/proc/PID/stat), so that a reused pid is not taken for it
    start_time: Option<u64>,
}

/// An ended run whose final metrics are still served.
struct Retained {
    ended: Instant,
    text: String,
}

/// The agent's state.
pub struct Agent {
    cfg: AgentConfig,
    config_path: Option<PathBuf>,
    overrides: Overrides,
    set: ProfileSet,
    watch: ExecWatch,
    server: Option<Server>,
    served: Arc<Mutex<String>>,
    live: Vec<Live>,
    retained: VecDeque<Retained>,
    stats: AgentStats,
    exe: PathBuf,
    last_prune: Option<Instant>,
}

/// Settings the command line gives, which win over the file's (also after a reload).
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub spool: Option<PathBuf>,
    pub metrics: Option<std::net::SocketAddr>,
    pub max_runs: Option<usize>,
}

impl Overrides {
    fn apply(&self, mut cfg: AgentConfig) -> AgentConfig {
        if let Some(s) = &self.spool {
            cfg.spool = s.clone();
        }
        if let Some(m) = self.metrics {
            cfg.metrics = Some(m);
        }
        if let Some(n) = self.max_runs {
            cfg.max_runs = n;
        }
        cfg
    }
}

/// Reads and checks the configuration: the file's (or the defaults), then the command line's.
pub fn load_config(
    path: Option<&Path>,
    overrides: &Overrides,
    set: &ProfileSet,
) -> anyhow::Result<AgentConfig> {
    let cfg = match path {
        Some(p) => {
            let text =
                crate::system::user_files::read_text(p, 1 << 20, crate::system::user_files::Links::Follow)
                    .with_context(|| format!("reading the agent's configuration {}", p.display()))?;
            AgentConfig::parse(&text, set).map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?
        }
        None => AgentConfig::default(),
    };
    let cfg = overrides.apply(cfg);
    cfg.check(set).map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(cfg)
}

fn now_unix_s() -> f64 {
    spool::unix_s(SystemTime::now())
}

/// A run id: the UTC time the scanner was seen and its pid (`20261128T165501Z-4242`).
fn run_id(at: SystemTime, pid: u32) -> String {
    let t = humantime::format_rfc3339_seconds(at).to_string();
    format!("{}-{pid}", t.replace(['-', ':'], ""))
}

/// The command line of `pid` (/proc/PID/cmdline), empty when unreadable.
fn cmdline(pid: u32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            b.split(|&c| c == 0)
                .filter(|w| !w.is_empty())
                .map(|w| String::from_utf8_lossy(w).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// The parent of `pid`, from /proc/PID/stat.
fn parent_of(pid: u32) -> Option<u32> {
    let p = procfs::process::Process::new(pid as i32).ok()?.stat().ok()?.ppid;
    u32::try_from(p).ok()
}

impl Agent {
    /// Reads the configuration, makes the spool, binds the metrics port, loads the exec
    /// watcher; then gives up every capability the runs do not need.
    pub fn set_up(config_path: Option<PathBuf>, overrides: Overrides) -> anyhow::Result<Agent> {
        let set = ProfileSet::builtin().context("reading the built-in scanner profiles")?;
        let cfg = load_config(config_path.as_deref(), &overrides, &set)?;
        std::fs::create_dir_all(&cfg.spool)
            .with_context(|| format!("making the spool directory {}", cfg.spool.display()))?;
        let served = Arc::new(Mutex::new(String::new()));
        let server = cfg
            .metrics
            .map(|addr| Server::start(addr, Arc::clone(&served)))
            .transpose()?;
        if let Some(s) = &server {
            eprintln!("scanprof agent: metrics at http://{}/metrics", s.addr());
        }
        let watch = ExecWatch::start().context("loading the exec watcher (probes/exec_watch.bpf.c)")?;
        if let Err(e) = crate::system::privileges::drop_to(&AGENT_KEEPS) {
            eprintln!("scanprof agent: warning: could not drop privileges after setup ({e})");
        }
        let mut agent = Agent {
            cfg,
            config_path,
            overrides,
            set,
            watch,
            server,
            served,
            live: Vec::new(),
            retained: VecDeque::new(),
            stats: AgentStats {
                started_unix_s: now_unix_s(),
                ..AgentStats::default()
            },
            exe: std::env::current_exe().context("finding scanprof's own executable")?,
            last_prune: None,
        };
        agent.close_stale_runs();
        agent.refresh();
        eprintln!(
            "scanprof agent: following scanners as they start (at most {} at once); runs go to {}",
            agent.cfg.max_runs,
            agent.cfg.spool.display()
        );
        Ok(agent)
    }

    /// The address the metrics server listens on.
    pub fn metrics_addr(&self) -> Option<std::net::SocketAddr> {
        self.server.as_ref().map(Server::addr)
    }

    /// Runs an earlier agent left marked live (it was killed) are marked ended now.
    fn close_stale_runs(&mut self) {
        for (dir, mut rec) in spool::scan(&self.cfg.spool) {
            if rec.ended_unix_s.is_none() {
                rec.ended_unix_s = Some(now_unix_s());
                let _ = spool::write_record(&dir, &rec);
            }
        }
    }

    /// One step: the execs since the last step, the runs that ended, retention, the exposition.
    pub fn step(&mut self) {
        let execs = self.watch.poll(POLL);
        self.stats.execs += execs.len() as u64;
        self.stats.execs_lost = self.watch.lost();
        for e in execs {
            self.on_exec(&e);
        }
        self.reap();
        let now = Instant::now();
        let window = self.cfg.ended_metrics();
        while self
            .retained
            .front()
            .is_some_and(|r| now.duration_since(r.ended) > window)
            || self.retained.len() > MAX_RETAINED
        {
            self.retained.pop_front();
        }
        if self
            .last_prune
            .is_none_or(|t| now.duration_since(t) >= PRUNE_EVERY)
        {
            self.prune();
            self.last_prune = Some(now);
        }
        self.refresh();
    }

    /// An exec: follows the process if it is a scanner outside every followed family.
    fn on_exec(&mut self, e: &ExecRecord) {
        if e.tgid == std::process::id() || self.inside_followed_family(e) {
            return;
        }
        let argv = cmdline(e.tgid);
        let exe = std::fs::read_link(format!("/proc/{}/exe", e.tgid))
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_else(|_| e.path.clone());
        let cgroup_text = std::fs::read_to_string(format!("/proc/{}/cgroup", e.tgid)).unwrap_or_default();
        let exec = Exec {
            exe: &exe,
            comm: &e.comm,
            argv: &argv,
            cgroup: cgroup_v2(&cgroup_text),
        };
        let Some(why) = follows(&self.cfg, &self.set, exec) else {
            return;
        };
        if self.live.len() >= self.cfg.max_runs {
            self.stats.refused_busy += 1;
            eprintln!(
                "scanprof agent: not following pid {} ({}): {} runs followed already (max_runs)",
                e.tgid, e.comm, self.cfg.max_runs
            );
            return;
        }
        match self.start_run(e.tgid, &argv, &why) {
            Ok(live) => {
                eprintln!(
                    "scanprof agent: run {} follows pid {} ({})",
                    live.record.id, e.tgid, live.record.followed
                );
                self.stats.runs_started += 1;
                self.stats.last_run_start_unix_s = Some(live.record.started_unix_s);
                self.live.push(live);
            }
            Err(err) => {
                self.stats.refused_failed += 1;
                eprintln!("scanprof agent: could not follow pid {}: {err:#}", e.tgid);
            }
        }
    }

    /// Whether the exec'ing process is a followed scanner itself (an exec in place) or below
    /// one (its family is followed by that run already).
    fn inside_followed_family(&self, e: &ExecRecord) -> bool {
        let followed = |pid: u32| {
            self.live.iter().any(|l| {
                l.record.pid == pid
                    && (l.start_time.is_none() || l.start_time == crate::system::child::start_time(pid))
            })
        };
        let mut pid = e.tgid;
        let mut parent = Some(e.ppid);
        for _ in 0..MAX_DEPTH {
            if followed(pid) {
                return true;
            }
            match parent.take().or_else(|| parent_of(pid)) {
                Some(p) if p > 1 && p != pid => pid = p,
                _ => return false,
            }
        }
        false
    }

    /// Starts `scanprof attach` on `pid` in a run directory of its own.
    fn start_run(&self, pid: u32, argv: &[String], why: &Followed) -> anyhow::Result<Live> {
        let at = SystemTime::now();
        let id = run_id(at, pid);
        let dir = self.cfg.spool.join(&id);
        std::fs::create_dir(&dir).with_context(|| format!("making the run directory {}", dir.display()))?;
        let record = RunRecord {
            id: id.clone(),
            pid,
            profile: why.profile().map(String::from),
            followed: match why {
                Followed::Profile(p) => format!("profile {p}"),
                Followed::Command(c) => format!("command {c}"),
                Followed::Cgroup(c) => format!("cgroup {c}"),
            },
            argv: argv.to_vec(),
            started_unix_s: spool::unix_s(at),
            ended_unix_s: None,
            exit_code: None,
        };
        spool::write_record(&dir, &record)?;
        let log = crate::system::user_files::create_new(&dir.join("attach.log"), 0o644)?;
        let mut cmd = Command::new(&self.exe);
        cmd.arg("attach")
            .arg("-p")
            .arg(pid.to_string())
            .arg("--quiet")
            .arg("--no-tui")
            .arg("--interval")
            .arg(self.cfg.interval.to_string())
            .arg("-o")
            .arg(dir.join("bundle"))
            .arg("--metrics-file")
            .arg(dir.join("metrics.prom"))
            .arg("--run-id")
            .arg(&id);
        if let Some(p) = why.profile() {
            cmd.arg("--profile").arg(p);
        }
        cmd.stdin(Stdio::null()).stdout(log.try_clone()?).stderr(log);
        die_with_parent(&mut cmd);
        let child = cmd.spawn().context("starting scanprof attach")?;
        Ok(Live {
            record,
            dir,
            child,
            start_time: crate::system::child::start_time(pid),
        })
    }

    /// Runs whose attach has ended: their record closed, their final metrics kept for the window.
    fn reap(&mut self) {
        let mut i = 0;
        while i < self.live.len() {
            match self.live[i].child.try_wait() {
                Ok(Some(status)) => {
                    let live = self.live.swap_remove(i);
                    self.close(live, status.code());
                }
                _ => i += 1,
            }
        }
    }

    fn close(&mut self, mut live: Live, code: Option<i32>) {
        live.record.ended_unix_s = Some(now_unix_s());
        live.record.exit_code = code;
        let _ = spool::write_record(&live.dir, &live.record);
        let text = read_metrics(&live.dir);
        // An attach that could not follow the process (it exited before the probes were up)
        // leaves no end in its metrics: counted as a failed start, and not served.
        let followed = text.contains("scanprof_run_ended{");
        if followed {
            self.stats.runs_ended += 1;
        } else {
            self.stats.refused_failed += 1;
        }
        if followed && !self.cfg.ended_metrics().is_zero() {
            self.retained.push_back(Retained {
                ended: Instant::now(),
                text,
            });
        }
        eprintln!(
            "scanprof agent: run {} ended (attach exit {}); `scanprof report {}` shows it",
            live.record.id,
            code.map_or("by signal".to_string(), |c| c.to_string()),
            live.dir.join("bundle").display()
        );
    }

    /// Applies the spool's retention to ended runs.
    fn prune(&mut self) {
        let runs = spool::scan(&self.cfg.spool);
        let entries: Vec<SpoolEntry> = runs
            .iter()
            .map(|(dir, rec)| SpoolEntry {
                id: rec.id.clone(),
                bytes: spool::size_of_dir(dir),
                ended: rec.ended_unix_s.map(spool::from_unix_s),
            })
            .collect();
        let limits = Retention {
            runs: self.cfg.keep_runs,
            bytes: self.cfg.keep_bytes,
            age: Duration::from_secs_f64(self.cfg.keep_s),
        };
        let gone = spool::to_prune(&entries, limits, SystemTime::now());
        for id in &gone {
            // Never a live run's directory (to_prune keeps them), never one without run.json.
            if let Some((dir, _)) = runs.iter().find(|(_, r)| &r.id == id) {
                if let Err(e) = std::fs::remove_dir_all(dir) {
                    eprintln!("scanprof agent: warning: removing {}: {e}", dir.display());
                }
            }
        }
        self.stats.spool_bytes = entries
            .iter()
            .filter(|e| !gone.contains(&e.id))
            .map(|e| e.bytes)
            .sum();
    }

    /// The exposition served: every live run's latest metrics, each retained run's final ones,
    /// and the agent's own.
    fn refresh(&mut self) {
        self.stats.runs_live = self.live.len() as u64;
        self.stats.runs_retained = self.retained.len() as u64;
        let live: Vec<String> = self.live.iter().map(|l| read_metrics(&l.dir)).collect();
        let own = self.stats.render();
        let mut texts: Vec<&str> = live.iter().map(String::as_str).collect();
        texts.extend(self.retained.iter().map(|r| r.text.as_str()));
        texts.push(&own);
        let text = merge(&texts);
        *self.served.lock().unwrap_or_else(PoisonError::into_inner) = text;
    }

    /// SIGHUP: reads the configuration again. Live runs go on; the spool and the metrics
    /// address stay as they were (a change of either is named, not applied).
    pub fn reload(&mut self) {
        match load_config(self.config_path.as_deref(), &self.overrides, &self.set) {
            Ok(mut cfg) => {
                if cfg.spool != self.cfg.spool || cfg.metrics != self.cfg.metrics {
                    eprintln!(
                        "scanprof agent: the spool and the metrics address change only at a restart: kept {} and {:?}",
                        self.cfg.spool.display(),
                        self.cfg.metrics
                    );
                    cfg.spool = self.cfg.spool.clone();
                    cfg.metrics = self.cfg.metrics;
                }
                self.cfg = cfg;
                self.stats.reloads += 1;
                eprintln!(
                    "scanprof agent: configuration reloaded; {} runs go on",
                    self.live.len()
                );
            }
            Err(e) => {
                self.stats.reloads_failed += 1;
                eprintln!("scanprof agent: configuration not reloaded (the old one stays): {e:#}");
            }
        }
    }

    /// Ends every run (its attach gets SIGTERM and writes its summary and bundle), closes
    /// their records; the exec watcher detaches and the server stops when the agent drops.
    pub fn stop(mut self) {
        let live = std::mem::take(&mut self.live);
        for mut l in live {
            let status = end_child(&mut l.child, Signal::SIGTERM, STOP_GRACE);
            self.close(l, status.and_then(|s| s.code()));
        }
    }
}

/// A run's metrics file, empty when absent or unreadable.
fn read_metrics(dir: &Path) -> String {
    crate::system::user_files::read_text(
        &dir.join("metrics.prom"),
        MAX_METRICS_BYTES,
        crate::system::user_files::Links::Refuse,
    )
    .unwrap_or_default()
}

/// Runs the agent until SIGINT or SIGTERM; SIGHUP reloads its configuration.
pub fn run(config_path: Option<PathBuf>, overrides: Overrides) -> anyhow::Result<()> {
    let stop = Arc::new(AtomicBool::new(false));
    let hup = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop)).context("installing signal handlers")?;
    }
    signal_hook::flag::register(signal_hook::consts::SIGHUP, Arc::clone(&hup))
        .context("installing signal handlers")?;
    let mut agent = Agent::set_up(config_path, overrides)?;
    while !stop.load(Ordering::Relaxed) {
        if hup.swap(false, Ordering::Relaxed) {
            agent.reload();
        }
        agent.step();
    }
    eprintln!("scanprof agent: stopping: ending {} run(s)", agent.live.len());
    agent.stop();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_ids_name_the_time_and_pid() {
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        assert_eq!(run_id(at, 4242), "20270115T080000Z-4242");
    }

    #[test]
    fn the_command_lines_settings_win_over_the_files_and_are_checked() {
        let set = ProfileSet::builtin().unwrap();
        let o = Overrides {
            max_runs: Some(9),
            spool: Some("/tmp/x".into()),
            metrics: None,
        };
        let cfg = load_config(None, &o, &set).unwrap();
        assert_eq!((cfg.max_runs, cfg.spool.as_path()), (9, Path::new("/tmp/x")));
        let bad = Overrides {
            max_runs: Some(0),
            ..o
        };
        assert!(load_config(None, &bad, &set).is_err());
    }
}
