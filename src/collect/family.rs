//! The target's process family as user space knows it: discovered from /proc at attach, then
//! kept current by the fork/exec/exit records the probes stream. Feeds `processes` in every
//! Snapshot and tells the session when the whole family is gone.

use std::collections::BTreeSet;

use procfs::process::Process;
use serde::{Deserialize, Serialize};

/// One process of the family.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessInfo {
    pub pid: u32,
    pub ppid: u32,
    pub comm: String,
    /// executable path, as /proc/PID/exe or the exec record named it
    pub exe: String,
    /// named by the user (`-p`, or the command of `run`) rather than found as a descendant
    pub root: bool,
    pub alive: bool,
    /// exit status as the kernel reports it (signal in the low 7 bits), once exited
    pub exit_code: Option<i32>,
    /// role the scanner profile gives it (`master`, `sender`...), if a profile recognised it
    #[serde(default)]
    pub role: Option<String>,
    /// seconds since attach when it was forked, from the fork record (None: it existed at attach)
    #[serde(default)]
    pub start_s: Option<f64>,
    /// seconds since attach when its last thread exited, from the exit record
    #[serde(default)]
    pub exit_s: Option<f64>,
}

/// A thread of a family process that exists at attach time.
#[derive(Debug, Clone, Copy)]
pub struct ThreadId {
    pub tid: u32,
    pub tgid: u32,
}

/// Every family member seen during the run, alive or not.
#[derive(Debug, Default)]
pub struct ProcessTable {
    members: Vec<ProcessInfo>,
}

impl ProcessTable {
    /// The given processes and every descendant they have now, read from /proc.
    /// Fails with a message naming a pid that does not exist.
    pub fn discover(roots: &[u32]) -> anyhow::Result<ProcessTable> {
        let mut table = ProcessTable::default();
        for &pid in roots {
            let p = Process::new(pid as i32).map_err(|_| {
                anyhow::anyhow!("no process with pid {pid}: check it with `ps -p {pid}` (it may have exited)")
            })?;
            table.insert(info_of(&p, true)?);
        }
        // Descendants: walk /proc once, then close the set over parent links.
        let all: Vec<(u32, u32)> = procfs::process::all_processes()?
            .filter_map(|p| p.ok())
            .filter_map(|p| Some((p.pid as u32, p.stat().ok()?.ppid as u32)))
            .collect();
        let mut known: BTreeSet<u32> = roots.iter().copied().collect();
        loop {
            // scanprof itself (a descendant of pid 1) is never a member, nor, through it,
            // anything it started that is not a root.
            let own = std::process::id();
            let found: Vec<u32> = all
                .iter()
                .filter(|(pid, ppid)| known.contains(ppid) && !known.contains(pid) && *pid != own)
                .map(|(pid, _)| *pid)
                .collect();
            if found.is_empty() {
                break;
            }
            for pid in found {
                known.insert(pid);
                if let Ok(p) = Process::new(pid as i32) {
                    if let Ok(info) = info_of(&p, false) {
                        table.insert(info);
                    }
                }
            }
        }
        Ok(table)
    }

    /// Threads of the live members, from /proc/PID/task.
    pub fn threads(&self) -> Vec<ThreadId> {
        self.alive()
            .filter_map(|m| Process::new(m.pid as i32).ok().map(|p| (m.pid, p)))
            .flat_map(|(tgid, p)| {
                p.tasks()
                    .into_iter()
                    .flatten()
                    .filter_map(|t| t.ok())
                    .map(move |t| ThreadId {
                        tid: t.tid as u32,
                        tgid,
                    })
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    pub fn insert(&mut self, info: ProcessInfo) {
        if let Some(old) = self.live_mut(info.pid) {
            *old = info;
        } else {
            self.members.push(info);
        }
    }

    /// A member forked a new process, `at_s` seconds after attach.
    pub fn forked(&mut self, pid: u32, ppid: u32, comm: &str, at_s: f64) {
        let parent_exe = self.live(ppid).map(|m| m.exe.clone()).unwrap_or_default();
        let exe = Process::new(pid as i32)
            .and_then(|p| p.exe())
            .map(|e| e.display().to_string())
            .unwrap_or(parent_exe);
        self.insert(ProcessInfo {
            pid,
            ppid,
            comm: comm.to_string(),
            exe,
            root: false,
            alive: true,
            exit_code: None,
            role: None,
            start_s: Some(at_s),
            exit_s: None,
        });
    }

    /// A member exec'd `path`.
    pub fn execed(&mut self, pid: u32, comm: &str, path: &str) {
        if let Some(m) = self.live_mut(pid) {
            m.comm = comm.to_string();
            m.exe = Process::new(pid as i32)
                .and_then(|p| p.exe())
                .map(|e| e.display().to_string())
                .unwrap_or_else(|_| path.to_string());
        }
    }

    /// A member's last thread exited, `at_s` seconds after attach.
    pub fn exited(&mut self, pid: u32, exit_code: i32, at_s: f64) {
        if let Some(m) = self.live_mut(pid) {
            m.alive = false;
            m.exit_code = Some(exit_code);
            m.exit_s = Some(at_s);
        }
    }

    /// Marks members whose process is gone without an exit record (e.g. exited before attach
    /// completed) as exited.
    pub fn reap_vanished(&mut self) {
        for m in self.members.iter_mut().filter(|m| m.alive) {
            let gone = match Process::new(m.pid as i32).and_then(|p| p.stat()) {
                Ok(stat) => stat.state == 'Z' || stat.state == 'X',
                Err(_) => true,
            };
            if gone {
                m.alive = false;
            }
        }
    }

    pub fn alive(&self) -> impl Iterator<Item = &ProcessInfo> {
        self.members.iter().filter(|m| m.alive)
    }

    pub fn any_alive(&self) -> bool {
        self.alive().next().is_some()
    }

    pub fn members(&self) -> &[ProcessInfo] {
        &self.members
    }

    pub fn live(&self, pid: u32) -> Option<&ProcessInfo> {
        self.members.iter().find(|m| m.alive && m.pid == pid)
    }

    fn live_mut(&mut self, pid: u32) -> Option<&mut ProcessInfo> {
        self.members.iter_mut().find(|m| m.alive && m.pid == pid)
    }
}

fn info_of(p: &Process, root: bool) -> anyhow::Result<ProcessInfo> {
    let stat = p.stat()?;
    Ok(ProcessInfo {
        pid: p.pid as u32,
        ppid: stat.ppid as u32,
        comm: stat.comm,
        exe: p.exe().map(|e| e.display().to_string()).unwrap_or_default(),
        root,
        alive: true,
        exit_code: None,
        role: None,
        start_s: None,
        exit_s: None,
    })
}
