//! `scanprof agent`'s configuration (a TOML file, read at start and again on SIGHUP) and which
//! exec'd processes it follows: pure, so that the rules are tested without a kernel. A process
//! is followed when a profile recognises it as a scanner the user starts (every profile's
//! binaries, or only the profiles the file names), when it runs one of the file's `commands`,
//! or when it lives in one of the file's cgroups.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::wrappers::ProfileSet;

/// Everything the agent is told, with its defaults.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AgentConfig {
    /// the directory each run's bundle, metrics and log go into (one directory per run)
    pub spool: PathBuf,
    /// serve every live run's and each recently ended run's metrics here (`/metrics`)
    pub metrics: Option<SocketAddr>,
    /// runs followed at once, at most; a scanner that starts while this many are followed is
    /// counted (`scanprof_agent_runs_refused_total{why="busy"}`) and not followed
    pub max_runs: usize,
    /// length of a run's tick, seconds (as `attach --interval`)
    pub interval: f64,
    /// the profiles whose scanners are followed (default: every profile but `generic`)
    pub profiles: Option<Vec<String>>,
    /// executables followed besides the profiles' (a basename or a full path)
    pub commands: Vec<String>,
    /// cgroup v2 paths (as /proc/PID/cgroup shows them, e.g. `/system.slice/scans.slice`): every
    /// process exec'd in one of them, or below, is followed
    pub cgroups: Vec<String>,
    /// ended runs kept in the spool, at most (the oldest go first)
    pub keep_runs: usize,
    /// bytes of ended runs kept in the spool, at most
    pub keep_bytes: u64,
    /// seconds an ended run is kept in the spool, at most
    pub keep_s: f64,
    /// seconds an ended run's final metrics are still served after it ended (its `run_id`
    /// series go away after that)
    pub ended_metrics_s: f64,
}

impl Default for AgentConfig {
    fn default() -> AgentConfig {
        AgentConfig {
            spool: PathBuf::from("/var/lib/scanprof/runs"),
            metrics: None,
            max_runs: 4,
            interval: 1.0,
            profiles: None,
            commands: Vec::new(),
            cgroups: Vec::new(),
            keep_runs: 100,
            keep_bytes: 1 << 30,
            keep_s: 7.0 * 86_400.0,
            ended_metrics_s: 600.0,
        }
    }
}

impl AgentConfig {
    /// Parses a configuration file's text and checks its values against `set`'s profiles.
    pub fn parse(text: &str, set: &ProfileSet) -> Result<AgentConfig, String> {
        let cfg: AgentConfig = toml::from_str(text).map_err(|e| e.to_string())?;
        cfg.check(set)?;
        Ok(cfg)
    }

    /// Whether every value is one the agent can use.
    pub fn check(&self, set: &ProfileSet) -> Result<(), String> {
        if self.max_runs == 0 || self.max_runs > 64 {
            return Err(format!("max_runs = {}: give 1 to 64", self.max_runs));
        }
        if !(self.interval.is_finite() && (0.01..=3600.0).contains(&self.interval)) {
            return Err(format!("interval = {}: give 0.01 to 3600 seconds", self.interval));
        }
        for (name, v) in [("keep_s", self.keep_s), ("ended_metrics_s", self.ended_metrics_s)] {
            if !(v.is_finite() && (0.0..=366.0 * 86_400.0).contains(&v)) {
                return Err(format!("{name} = {v}: give 0 to 31622400 seconds"));
            }
        }
        if self.spool.as_os_str().is_empty() || !self.spool.is_absolute() {
            return Err(format!("spool = {:?}: give an absolute directory", self.spool));
        }
        for p in self.profiles.iter().flatten() {
            if set.get(p).is_none() {
                let known: Vec<&str> = set.profiles().iter().map(|p| p.name.as_str()).collect();
                return Err(format!(
                    "profiles: no profile {p:?} (known: {})",
                    known.join(", ")
                ));
            }
        }
        for c in &self.cgroups {
            if !c.starts_with('/') {
                return Err(format!("cgroups: {c:?} is no cgroup path (they start with /)"));
            }
        }
        Ok(())
    }

    /// How long an ended run's final metrics are served.
    pub fn ended_metrics(&self) -> Duration {
        Duration::from_secs_f64(self.ended_metrics_s)
    }
}

/// A process as an exec shows it, with what the agent read from /proc about it.
#[derive(Debug, Clone, Copy)]
pub struct Exec<'a> {
    /// the file it runs
    pub exe: &'a str,
    /// its comm after the exec
    pub comm: &'a str,
    /// its command line, argv[0] included
    pub argv: &'a [String],
    /// its cgroup v2 path (the `0::` line of /proc/PID/cgroup), empty when unknown
    pub cgroup: &'a str,
}

/// Why a process is followed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Followed {
    /// a profile recognises it as its scanner: the profile's name
    Profile(String),
    /// it runs one of the configuration's `commands`
    Command(String),
    /// it lives in one of the configuration's `cgroups`
    Cgroup(String),
}

impl Followed {
    /// The profile `attach` is given: the recognised one, or none (attach recognises or falls
    /// back to `generic` itself).
    pub fn profile(&self) -> Option<&str> {
        match self {
            Followed::Profile(p) => Some(p),
            _ => None,
        }
    }
}

/// Whether the agent follows the process `exec` shows, and why. A wrapper (`sh`, `ip netns
/// exec`, `timeout`) is not followed itself: the scanner it execs or starts is, at its own exec.
pub fn follows(cfg: &AgentConfig, set: &ProfileSet, exec: Exec<'_>) -> Option<Followed> {
    let named = |p: &str| {
        cfg.profiles
            .as_ref()
            .is_none_or(|names| names.iter().any(|n| n == p))
    };
    if let Some(p) = set
        .profiles()
        .iter()
        .filter(|p| !p.fallback && named(&p.name))
        .find(|p| p.started_as(exec.exe, exec.comm, exec.argv))
    {
        return Some(Followed::Profile(p.name.clone()));
    }
    let base = exec.exe.rsplit('/').next().unwrap_or(exec.exe);
    if let Some(c) = cfg
        .commands
        .iter()
        .find(|c| !exec.exe.is_empty() && (c.as_str() == exec.exe || c.as_str() == base))
    {
        return Some(Followed::Command(c.clone()));
    }
    cfg.cgroups
        .iter()
        .find(|c| under_cgroup(exec.cgroup, c))
        .map(|c| Followed::Cgroup(c.clone()))
}

/// Whether cgroup path `path` is `dir` or below it (`/a/b` is under `/a`, `/ab` is not).
fn under_cgroup(path: &str, dir: &str) -> bool {
    let dir = dir.trim_end_matches('/');
    !path.is_empty()
        && (dir.is_empty() || path == dir || path.strip_prefix(dir).is_some_and(|r| r.starts_with('/')))
}

/// The cgroup v2 path in the text of /proc/PID/cgroup (its `0::PATH` line), empty when none.
pub fn cgroup_v2(text: &str) -> &str {
    text.lines().find_map(|l| l.strip_prefix("0::")).unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    fn exec<'a>(exe: &'a str, argv: &'a [String], cgroup: &'a str) -> Exec<'a> {
        let comm = exe.rsplit('/').next().unwrap_or(exe);
        Exec {
            exe,
            comm: &comm[..comm.len().min(15)],
            argv,
            cgroup,
        }
    }

    #[test]
    fn every_profiles_scanners_are_followed_and_wrappers_are_not() {
        let set = ProfileSet::builtin().unwrap();
        let cfg = AgentConfig::default();
        let zmap = words("zmap --shards 2 --shard 0 -p 80 10.0.0.0/24");
        assert_eq!(
            follows(&cfg, &set, exec("/usr/sbin/zmap", &zmap, "/user.slice")),
            Some(Followed::Profile("zmap".into()))
        );
        let masscan = words("masscan --rate 1000 -p80 10.0.0.0/24");
        assert_eq!(
            follows(&cfg, &set, exec("/usr/bin/masscan", &masscan, "")),
            Some(Followed::Profile("masscan".into()))
        );
        // The wrappers that start a scanner are not followed themselves.
        for (exe, argv) in [
            ("/usr/bin/sh", "sh -c exec zmap -p 80 10.0.0.1"),
            ("/usr/bin/ip", "ip netns exec lab zmap -p 80 10.0.0.1"),
            ("/usr/bin/timeout", "timeout 10 masscan -p80 10.0.0.1"),
            ("/usr/bin/bash", "bash"),
        ] {
            assert_eq!(follows(&cfg, &set, exec(exe, &words(argv), "")), None, "{argv}");
        }
        // The generic fallback never makes every exec a scanner.
        assert_eq!(follows(&cfg, &set, exec("/usr/bin/ls", &words("ls"), "")), None);
    }

    #[test]
    fn the_file_narrows_the_profiles_and_adds_commands_and_cgroups() {
        let set = ProfileSet::builtin().unwrap();
        let cfg = AgentConfig::parse(
            r#"
            spool = "/tmp/spool"
            profiles = ["masscan"]
            commands = ["myscan", "/opt/bin/other"]
            cgroups = ["/system.slice/scans.slice"]
            "#,
            &set,
        )
        .unwrap();
        let zmap = words("zmap -p 80 10.0.0.1");
        assert_eq!(follows(&cfg, &set, exec("/usr/sbin/zmap", &zmap, "")), None);
        let argv = words("myscan x");
        assert_eq!(
            follows(&cfg, &set, exec("/usr/local/bin/myscan", &argv, "")),
            Some(Followed::Command("myscan".into()))
        );
        assert_eq!(
            follows(&cfg, &set, exec("/opt/bin/other", &argv, "")),
            Some(Followed::Command("/opt/bin/other".into()))
        );
        assert_eq!(follows(&cfg, &set, exec("/usr/bin/other", &argv, "")), None);
        let job = "/system.slice/scans.slice/job-4.scope";
        assert_eq!(
            follows(&cfg, &set, exec("/usr/bin/python3", &argv, job)),
            Some(Followed::Cgroup("/system.slice/scans.slice".into()))
        );
        assert_eq!(
            follows(
                &cfg,
                &set,
                exec("/usr/bin/python3", &argv, "/system.slice/scans.slicer")
            ),
            None
        );
    }

    #[test]
    fn a_bad_file_is_refused_with_what_to_change() {
        let set = ProfileSet::builtin().unwrap();
        let err = |t: &str| AgentConfig::parse(t, &set).unwrap_err();
        assert!(err("max_runs = 0").contains("max_runs"));
        assert!(err("profiles = [\"zmapp\"]").contains("zmapp"));
        assert!(err("spool = \"runs\"").contains("absolute"));
        assert!(err("cgroups = [\"scans\"]").contains("cgroup path"));
        assert!(
            err("retention = 3").contains("retention"),
            "unknown keys are refused"
        );
        assert_eq!(AgentConfig::parse("", &set).unwrap(), AgentConfig::default());
    }

    #[test]
    fn the_cgroup_v2_line_is_read() {
        assert_eq!(
            cgroup_v2("0::/system.slice/x.service\n"),
            "/system.slice/x.service"
        );
        assert_eq!(cgroup_v2("12:cpu:/x\n"), "");
    }
}
