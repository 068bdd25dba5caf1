//! Global sysctls a lab changes for its run, restored even when scanprof is killed.
//!
//! A scenario that must change a value no namespace has its own copy of (nf_conntrack_max is
//! global on 6.1 to 6.18) restores it when the scenario ends, on error and on panic. A SIGKILL
//! leaves no chance for that, so before the change the old value is written to a record file
//! named after the lab's pid, and the record goes when the value is back. The next lab, as it
//! removes the namespaces of dead labs, puts back every value whose lab is gone.

use std::fs::DirBuilder;
use std::io::Write;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::{ensure, Context, Result};

/// Where the records live: root's, 0700, gone at reboot (as the values are).
const RECORD_DIR: &str = "/run/scanprof-lab";

/// A global sysctl set for the run; the old value comes back with `restore` or on drop.
#[derive(Debug)]
pub struct SysctlHold {
    /// under /proc/sys
    path: PathBuf,
    saved: String,
    record: Option<PathBuf>,
}

impl SysctlHold {
    /// Sets `path` (under /proc/sys) to `value`, after recording its current value.
    pub fn set(path: &str, value: &str) -> Result<SysctlHold> {
        Self::set_in(Path::new(RECORD_DIR), path, value)
    }

    fn set_in(dir: &Path, path: &str, value: &str) -> Result<SysctlHold> {
        ensure!(is_sysctl_path(path), "{path} is not a sysctl under /proc/sys");
        let saved = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {path}"))?
            .trim()
            .to_string();
        let record = write_record(dir, path, &saved)?;
        let hold = SysctlHold {
            path: PathBuf::from(path),
            saved,
            record: Some(record),
        };
        std::fs::write(path, value).with_context(|| format!("cannot write {value} to {path}"))?;
        Ok(hold)
    }

    /// The value before the run.
    pub fn saved(&self) -> &str {
        &self.saved
    }

    /// Puts the old value back and removes the record.
    pub fn restore(mut self) -> Result<()> {
        self.put_back()
    }

    fn put_back(&mut self) -> Result<()> {
        let Some(record) = self.record.take() else {
            return Ok(());
        };
        std::fs::write(&self.path, &self.saved).with_context(|| {
            format!(
                "cannot restore {} to {}: set it with sysctl (record kept in {})",
                self.path.display(),
                self.saved,
                record.display()
            )
        })?;
        let _ = std::fs::remove_file(record);
        Ok(())
    }
}

impl Drop for SysctlHold {
    fn drop(&mut self) {
        if let Err(e) = self.put_back() {
            eprintln!("scanprof: {e:#}");
        }
    }
}

/// Puts back the values that labs of scanprof processes no longer running left changed, e.g.
/// a lab killed with SIGKILL. Returns (sysctl, value restored) for each.
pub fn restore_dead_holds() -> Vec<(String, String)> {
    restore_dead_in(Path::new(RECORD_DIR), |pid| {
        Path::new(&format!("/proc/{pid}")).exists()
    })
}

fn restore_dead_in(dir: &Path, alive: impl Fn(u32) -> bool) -> Vec<(String, String)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut done = Vec::new();
    let mut records: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
    records.sort();
    for record in records {
        let Some(pid) = record_pid(&record) else {
            continue;
        };
        if pid == std::process::id() || alive(pid) {
            continue;
        }
        // Only a regular file is read: a link planted in the directory is not followed.
        let regular = std::fs::symlink_metadata(&record).is_ok_and(|m| m.file_type().is_file());
        let parsed = regular
            .then(|| std::fs::read_to_string(&record).ok())
            .flatten()
            .and_then(|t| parse_record(&t));
        match parsed {
            Some((path, value)) if std::fs::write(&path, &value).is_ok() => {
                let _ = std::fs::remove_file(&record);
                done.push((path, value));
            }
            Some((path, value)) => eprintln!(
                "scanprof: could not restore {path} to {value}, left changed by a lab that is gone: \
                 set it with sysctl, then remove {}",
                record.display()
            ),
            None => eprintln!(
                "scanprof: {} is no record of a lab's sysctl: remove it",
                record.display()
            ),
        }
    }
    done
}

/// `{pid}-{n}`: the lab's pid and a counter.
fn record_pid(record: &Path) -> Option<u32> {
    let name = record.file_name()?.to_str()?;
    let (pid, n) = name.split_once('-')?;
    n.parse::<u32>().ok()?;
    pid.parse().ok()
}

/// A record is two lines: the sysctl's path and the value to put back.
fn parse_record(text: &str) -> Option<(String, String)> {
    let mut lines = text.lines();
    let (path, value) = (lines.next()?, lines.next()?);
    let value_ok = !value.is_empty() && value.len() <= 4096;
    (is_sysctl_path(path) && value_ok && lines.next().is_none())
        .then(|| (path.to_string(), value.to_string()))
}

/// An absolute path under /proc/sys with no `..`: a record cannot name another file.
fn is_sysctl_path(path: &str) -> bool {
    path.strip_prefix("/proc/sys/").is_some_and(|rest| {
        !rest.is_empty() && rest.split('/').all(|c| !c.is_empty() && c != ".." && c != ".")
    })
}

fn write_record(dir: &Path, path: &str, saved: &str) -> Result<PathBuf> {
    static N: AtomicU32 = AtomicU32::new(0);
    DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("cannot create {}", dir.display()))?;
    let record = dir.join(format!(
        "{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    // O_EXCL | O_NOFOLLOW: never through a file or link already there.
    let mut f = crate::system::user_files::create_new(&record, 0o600)
        .with_context(|| format!("cannot create {}", record.display()))?;
    f.write_all(format!("{path}\n{saved}\n").as_bytes())
        .and_then(|()| f.sync_all())
        .with_context(|| format!("cannot write {}", record.display()))?;
    Ok(record)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("scanprof-sysctl-test-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn only_absolute_paths_under_proc_sys_are_sysctls() {
        assert!(is_sysctl_path("/proc/sys/net/netfilter/nf_conntrack_max"));
        for bad in [
            "/proc/sys/",
            "/proc/sys/../../etc/passwd",
            "/proc/sys/net//x",
            "/etc/passwd",
            "proc/sys/net/x",
            "/proc/sys/./x",
        ] {
            assert!(!is_sysctl_path(bad), "{bad}");
        }
    }

    #[test]
    fn a_record_is_two_lines_of_a_sysctl_and_a_value() {
        assert_eq!(
            parse_record("/proc/sys/net/netfilter/nf_conntrack_max\n262144\n"),
            Some(("/proc/sys/net/netfilter/nf_conntrack_max".into(), "262144".into()))
        );
        assert_eq!(parse_record("/etc/shadow\nx\n"), None);
        assert_eq!(parse_record("/proc/sys/a/b\n"), None);
        assert_eq!(parse_record("/proc/sys/a/b\n1\nextra\n"), None);
        assert_eq!(record_pid(Path::new("/run/scanprof-lab/4242-0")), Some(4242));
        assert_eq!(record_pid(Path::new("/run/scanprof-lab/notes")), None);
    }

    /// The value a dead lab left is put back and its record removed; a live lab's stays, and a
    /// planted link or a record naming a file outside /proc/sys is not acted on.
    #[test]
    fn a_dead_labs_record_is_put_back_and_a_live_ones_kept() {
        let dir = tmp("dead");
        std::fs::create_dir_all(&dir).unwrap();
        // A value to restore that is no sysctl: the function writes only paths under
        // /proc/sys, so a record pointing at a temp file must be refused, not written.
        let victim = dir.join("victim");
        std::fs::write(&victim, "untouched").unwrap();
        std::fs::write(dir.join("999999-0"), format!("{}\n0\n", victim.display())).unwrap();
        std::os::unix::fs::symlink(&victim, dir.join("999998-0")).unwrap();
        std::fs::write(dir.join("1-0"), "/proc/sys/net/netfilter/nf_conntrack_max\n64\n").unwrap();
        let done = restore_dead_in(&dir, |pid| pid == 1);
        assert!(done.is_empty(), "{done:?}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "untouched");
        assert!(dir.join("1-0").exists(), "a live lab's record is kept");
        assert!(
            dir.join("999999-0").exists(),
            "a refused record is left for the user"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Root only (writes a real sysctl, restored): a hold set and dropped without `restore`
    /// (as a panic would) puts the value back; a record left as if by a SIGKILL'd lab (dead pid)
    /// is restored by the next lab and removed.
    #[test]
    fn a_hold_restores_on_drop_and_a_killed_labs_value_comes_back() {
        assert!(
            nix::unistd::geteuid().is_root(),
            "needs root, as the lab's other tests: run as root (CI does)"
        );
        // A harmless global sysctl that exists on every kernel here.
        let path = "/proc/sys/kernel/printk_ratelimit_burst";
        let before = std::fs::read_to_string(path).unwrap().trim().to_string();
        let changed = if before == "11" { "12" } else { "11" };
        let dir = tmp("hold");
        {
            let hold = SysctlHold::set_in(&dir, path, changed).unwrap();
            assert_eq!(hold.saved(), before);
            assert_eq!(std::fs::read_to_string(path).unwrap().trim(), changed);
            assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
        }
        assert_eq!(std::fs::read_to_string(path).unwrap().trim(), before);
        assert_eq!(
            std::fs::read_dir(&dir).unwrap().count(),
            0,
            "the record goes with the value"
        );
        // A lab killed with the value changed: its record names a pid that no longer runs.
        std::fs::write(path, changed).unwrap();
        std::fs::write(dir.join("999999-7"), format!("{path}\n{before}\n")).unwrap();
        let done = restore_dead_in(&dir, |_| false);
        let restored = std::fs::read_to_string(path).unwrap().trim().to_string();
        std::fs::write(path, &before).unwrap();
        assert_eq!(done, vec![(path.to_string(), before.clone())]);
        assert_eq!(restored, before);
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
