//! A CPU quota on the sender: a cgroup made for the run, the sender moved into it once it
//! starts, removed afterwards.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use serde::Serialize;

use super::disturb::{children_of_self, SenderId};

/// A cgroup of the lab's own with a CPU quota: in the unified hierarchy when its cpu controller
/// is enabled there, else in the v1 `cpu` hierarchy. Removed by `finish` and on drop (its
/// processes moved back to the hierarchy's root first).
pub struct CpuQuota {
    version: u8,
    dir: std::path::PathBuf,
    /// the hierarchy root's cgroup.procs
    root_procs: std::path::PathBuf,
    quota_us: u64,
    removed: bool,
    /// removes the cgroup if scanprof dies before it does (src/system/watchdog.rs)
    watchdog: Option<crate::system::watchdog::Watchdog>,
}

/// The sender's cgroup and its own counters after the run.
#[derive(Debug, Clone, Serialize)]
pub struct CgroupReport {
    pub version: u8,
    /// path in its hierarchy
    pub path: String,
    pub quota_us: u64,
    pub period_us: u64,
    /// periods, throttled periods and throttled time, s, from its cpu.stat
    pub nr_periods: u64,
    pub nr_throttled: u64,
    pub throttled_s: f64,
    /// whether the sender was moved into it
    pub sender_moved: bool,
}

/// The quota's period, us.
const QUOTA_PERIOD_US: u64 = 100_000;
static QUOTAS_CREATED: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

impl CpuQuota {
    pub fn create(cpus: f64) -> anyhow::Result<CpuQuota> {
        use crate::system::cpu_limits::CgroupMounts;
        let mounts = CgroupMounts::read();
        let name = format!(
            "scanprof-lab-{}-{}",
            std::process::id(),
            QUOTAS_CREATED.fetch_add(1, Ordering::Relaxed)
        );
        let quota_us = ((cpus * QUOTA_PERIOD_US as f64).round() as u64).max(1000);
        let v2 = mounts
            .v2
            .as_ref()
            .map(|(point, _)| std::path::PathBuf::from(point))
            .filter(|p| {
                let has_cpu = |f: &str| {
                    std::fs::read_to_string(p.join(f)).is_ok_and(|t| t.split_whitespace().any(|c| c == "cpu"))
                };
                has_cpu("cgroup.controllers") && has_cpu("cgroup.subtree_control")
            });
        let (version, root) = match (v2, &mounts.v1_cpu) {
            (Some(root), _) => (2, root),
            (None, Some((point, _))) => (1, std::path::PathBuf::from(point)),
            (None, None) => bail!(
                "no cgroup hierarchy with the cpu controller: neither cgroup2 with cpu in its root's \
                 cgroup.subtree_control nor a v1 cpu mount (see /proc/self/mountinfo)"
            ),
        };
        let dir = root.join(&name);
        // Told first: scanprof killed right after the mkdir leaves no cgroup either.
        let watchdog = match crate::system::watchdog::Watchdog::start_for_cgroups() {
            Ok(mut w) => {
                w.watch_cgroup(&dir);
                Some(w)
            }
            Err(e) => {
                eprintln!("scanprof: warning: no watchdog for the lab's cgroup ({e}): if scanprof is killed, it stays");
                None
            }
        };
        if let Err(e) = std::fs::create_dir(&dir) {
            if let Some(w) = watchdog {
                w.done();
            }
            return Err(e).with_context(|| format!("cannot create the cgroup {}", dir.display()));
        }
        let q = CpuQuota {
            version,
            dir,
            root_procs: root.join("cgroup.procs"),
            quota_us,
            removed: false,
            watchdog,
        };
        let write = |file: &str, value: String| {
            std::fs::write(q.dir.join(file), &value)
                .with_context(|| format!("cannot write {value} to {}", q.dir.join(file).display()))
        };
        if version == 2 {
            write("cpu.max", format!("{quota_us} {QUOTA_PERIOD_US}"))?;
        } else {
            write("cpu.cfs_period_us", QUOTA_PERIOD_US.to_string())?;
            write("cpu.cfs_quota_us", quota_us.to_string())?;
        }
        Ok(q)
    }

    /// Moves the sender into the cgroup as soon as it runs, from a thread of its own.
    pub fn take_sender(&self, sender: SenderId) -> anyhow::Result<QuotaMover> {
        let procs = self.dir.join("cgroup.procs");
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("lab-quota".into())
            .spawn(move || {
                // Writing a pid into a root-owned cgroup.procs needs root's uid, no capability.
                let _ = crate::system::privileges::drop_to(&[]);
                while !flag.load(Ordering::Relaxed) {
                    if let Some(pid) = children_of_self().into_iter().find(|p| sender.is(*p)) {
                        return std::fs::write(&procs, pid.to_string()).is_ok();
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
                false
            })
            .context("cannot start the cgroup thread")?;
        Ok(QuotaMover {
            stop,
            thread: Some(thread),
        })
    }

    /// The cgroup's own counters, then the cgroup removed.
    pub fn finish(mut self, moved: Option<bool>) -> anyhow::Result<CgroupReport> {
        let stat = std::fs::read_to_string(self.dir.join("cpu.stat"))
            .ok()
            .and_then(|t| crate::system::cpu_limits::parse_cpu_stat(&t))
            .unwrap_or_default();
        let report = CgroupReport {
            version: self.version,
            path: format!(
                "/{}",
                self.dir
                    .file_name()
                    .map_or(String::new(), |n| n.to_string_lossy().into_owned())
            ),
            quota_us: self.quota_us,
            period_us: QUOTA_PERIOD_US,
            nr_periods: stat.0,
            nr_throttled: stat.1,
            throttled_s: stat.2 as f64 / 1e9,
            sender_moved: moved.unwrap_or(false),
        };
        self.remove()?;
        Ok(report)
    }

    pub fn remove(&mut self) -> anyhow::Result<()> {
        if self.removed {
            return Ok(());
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        loop {
            // Whatever is left in it (the sender, should it still run) goes back to the root.
            if let Ok(pids) = std::fs::read_to_string(self.dir.join("cgroup.procs")) {
                for pid in pids.split_whitespace() {
                    let _ = std::fs::write(&self.root_procs, pid);
                }
            }
            match std::fs::remove_dir(&self.dir) {
                Ok(()) => {
                    self.removed = true;
                    self.release_watchdog();
                    return Ok(());
                }
                Err(e) if std::time::Instant::now() >= deadline => {
                    self.release_watchdog();
                    return Err(e)
                        .with_context(|| format!("cannot remove the cgroup {}", self.dir.display()));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }
}

impl CpuQuota {
    /// Removed here, or the failure reported: the watchdog has nothing left to do.
    fn release_watchdog(&mut self) {
        if let Some(w) = self.watchdog.take() {
            w.done();
        }
    }
}

impl Drop for CpuQuota {
    fn drop(&mut self) {
        if let Err(e) = self.remove() {
            eprintln!("scanprof: {e:#}");
        }
    }
}

/// The thread that moves the sender into its cgroup.
pub struct QuotaMover {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<bool>>,
}

impl QuotaMover {
    /// Whether the sender was moved.
    pub fn finish(mut self) -> bool {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().and_then(|t| t.join().ok()).unwrap_or(false)
    }
}

impl Drop for QuotaMover {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
