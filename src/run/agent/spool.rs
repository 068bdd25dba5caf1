//! The agent's spool: one directory per run (`<spool>/<run id>/`: the bundle, the metrics file,
//! the attach log and `run.json`), and its retention by count, size and age. Which runs go is
//! decided by a pure function ([`to_prune`]); only directories that hold a `run.json` are ever
//! removed, so a spool pointed at the wrong directory loses nothing else.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

/// The file that marks a directory of the spool as a run's.
pub const RUN_FILE: &str = "run.json";

/// What the agent records of a run in its directory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// the run id (the directory's name, and the metrics' `run_id` label)
    pub id: String,
    /// the scanner process followed
    pub pid: u32,
    /// the profile attach was given, if any
    pub profile: Option<String>,
    /// why it was followed (`profile`, `command`, `cgroup`) and what matched
    pub followed: String,
    /// its command line
    pub argv: Vec<String>,
    /// when the agent saw it exec, seconds since the Unix epoch
    pub started_unix_s: f64,
    /// when its attach ended, seconds since the Unix epoch; None while it runs
    pub ended_unix_s: Option<f64>,
    /// attach's exit code, once ended
    pub exit_code: Option<i32>,
}

/// One run directory as retention sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct SpoolEntry {
    pub id: String,
    /// bytes of its files
    pub bytes: u64,
    /// when it ended; None while it runs (a live run is never pruned)
    pub ended: Option<SystemTime>,
}

/// The spool's limits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Retention {
    /// ended runs kept at most
    pub runs: usize,
    /// bytes of ended runs kept at most
    pub bytes: u64,
    /// how long an ended run is kept
    pub age: Duration,
}

/// The ended runs to remove so that the rest keep within `limits` at `now`: the newest ended runs
/// are kept while they fit (count, bytes, age), and every run older than the first that does not
/// fit goes. Live runs stay and do not count.
pub fn to_prune(entries: &[SpoolEntry], limits: Retention, now: SystemTime) -> Vec<String> {
    let mut ended: Vec<&SpoolEntry> = entries.iter().filter(|e| e.ended.is_some()).collect();
    // Newest first: the kept ones are a prefix.
    ended.sort_by(|a, b| b.ended.cmp(&a.ended).then_with(|| b.id.cmp(&a.id)));
    let mut kept_bytes = 0u64;
    let mut full = false;
    let mut out = Vec::new();
    for (i, e) in ended.iter().enumerate() {
        let age = e
            .ended
            .and_then(|t| now.duration_since(t).ok())
            .unwrap_or_default();
        // Once one run does not fit, every older one goes too: what is kept is the newest runs.
        full =
            full || i >= limits.runs || kept_bytes.saturating_add(e.bytes) > limits.bytes || age > limits.age;
        if full {
            out.push(e.id.clone());
        } else {
            kept_bytes += e.bytes;
        }
    }
    out
}

/// Bytes of the regular files under `dir` (symbolic links are not followed).
pub fn size_of_dir(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => size_of_dir(&e.path()),
            Ok(t) if t.is_file() => e.metadata().map_or(0, |m| m.len()),
            _ => 0,
        })
        .sum()
}

/// The runs in `spool` (directories holding a `run.json`), with their records.
pub fn scan(spool: &Path) -> Vec<(PathBuf, RunRecord)> {
    let Ok(entries) = std::fs::read_dir(spool) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| {
            let text = crate::system::user_files::read_text(
                &e.path().join(RUN_FILE),
                1 << 20,
                crate::system::user_files::Links::Refuse,
            )
            .ok()?;
            let rec: RunRecord = serde_json::from_str(&text).ok()?;
            (rec.id == e.file_name().to_string_lossy()).then(|| (e.path(), rec))
        })
        .collect()
}

/// Writes a run's record into its directory (replaced whole).
pub fn write_record(dir: &Path, rec: &RunRecord) -> std::io::Result<()> {
    let text = serde_json::to_string_pretty(rec).map_err(std::io::Error::other)?;
    crate::system::user_files::replace(&dir.join(RUN_FILE), 0o644, text.as_bytes())
}

/// The time `unix_s` seconds after the epoch.
pub fn from_unix_s(unix_s: f64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs_f64(unix_s.max(0.0))
}

/// Seconds since the epoch at `t`.
pub fn unix_s(t: SystemTime) -> f64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: &str, bytes: u64, ended_s_ago: Option<u64>, now: SystemTime) -> SpoolEntry {
        SpoolEntry {
            id: id.into(),
            bytes,
            ended: ended_s_ago.map(|s| now - Duration::from_secs(s)),
        }
    }

    #[test]
    fn the_oldest_ended_runs_go_first_and_live_runs_stay() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let limits = Retention {
            runs: 2,
            bytes: 1000,
            age: Duration::from_secs(3600),
        };
        let runs = [
            entry("live", 10_000, None, now),
            entry("new", 100, Some(10), now),
            entry("mid", 100, Some(20), now),
            entry("old", 100, Some(30), now),
        ];
        assert_eq!(to_prune(&runs, limits, now), vec!["old".to_string()]);
        // Bytes: the newest that fit are kept, the rest go.
        let big = [
            entry("a", 600, Some(1), now),
            entry("b", 600, Some(2), now),
            entry("c", 100, Some(3), now),
        ];
        assert_eq!(
            to_prune(&big, Retention { runs: 10, ..limits }, now),
            vec!["b", "c"]
        );
        // Age.
        let aged = [
            entry("fresh", 1, Some(10), now),
            entry("stale", 1, Some(7200), now),
        ];
        assert_eq!(to_prune(&aged, limits, now), vec!["stale"]);
    }

    #[test]
    fn only_directories_with_a_run_record_of_their_name_are_runs() {
        let dir = std::env::temp_dir().join(format!("scanprof-spool-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("r1")).unwrap();
        std::fs::create_dir_all(dir.join("other")).unwrap();
        std::fs::create_dir_all(dir.join("r2")).unwrap();
        let rec = |id: &str| RunRecord {
            id: id.into(),
            pid: 7,
            profile: Some("zmap".into()),
            followed: "profile zmap".into(),
            argv: vec!["zmap".into()],
            started_unix_s: 1.0,
            ended_unix_s: None,
            exit_code: None,
        };
        write_record(&dir.join("r1"), &rec("r1")).unwrap();
        // A record naming another directory is not this directory's.
        write_record(&dir.join("r2"), &rec("r9")).unwrap();
        std::fs::write(dir.join("other/file"), b"12345").unwrap();
        let found = scan(&dir);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].1, rec("r1"));
        assert_eq!(size_of_dir(&dir.join("other")), 5);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
