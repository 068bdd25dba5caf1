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
    /// its soft limit on open files (RLIMIT_NOFILE, from /proc/PID/limits), read each tick while
    /// it lives; None when unread (or unlimited)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_files_limit: Option<u64>,
}

/// A process's soft limit on open files, from /proc/PID/limits; None when it is gone, the
/// line is unreadable or the limit is `unlimited`.
pub fn open_files_limit(pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/limits")).ok()?;
    let line = text.lines().find(|l| l.starts_with("Max open files"))?;
    line.trim_start_matches("Max open files")
        .split_whitespace()
        .next()?
        .parse()
        .ok()
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
    /// for a launched command: ends the family if scanprof dies (src/system/watchdog.rs)
    watchdog: Option<crate::system::watchdog::Watchdog>,
}

impl ProcessTable {
    /// The given processes and every descendant they have now, read from /proc.
    /// Fails with a message naming a pid that does not exist.
    pub fn discover(roots: &[u32]) -> anyhow::Result<ProcessTable> {
        let mut table = ProcessTable::roots(roots)?;
        for pid in descendants(roots) {
            if let Ok(p) = Process::new(pid as i32) {
                if let Ok(info) = info_of(&p, false) {
                    table.insert(info);
                }
            }
        }
        Ok(table)
    }

    /// The given processes alone: a command launched and held before its exec has no
    /// descendants yet, so no walk of /proc is needed to find them.
    pub fn roots(roots: &[u32]) -> anyhow::Result<ProcessTable> {
        let mut table = ProcessTable::default();
        for &pid in roots {
            let p = Process::new(pid as i32).map_err(|_| {
                anyhow::anyhow!("no process with pid {pid}: check it with `ps -p {pid}` (it may have exited)")
            })?;
            table.insert(info_of(&p, true)?);
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

    /// Hands every member, now and later, to `w`, which ends them if scanprof dies.
    pub fn guard_with(&mut self, mut w: crate::system::watchdog::Watchdog) {
        for m in self.members.iter().filter(|m| m.alive) {
            w.watch(m.pid);
        }
        self.watchdog = Some(w);
    }

    /// The run ended normally: the watchdog, if any, exits without ending anything.
    pub fn unguard(&mut self) {
        if let Some(w) = self.watchdog.take() {
            w.done();
        }
    }

    /// A member forked a new process, `at_s` seconds after attach.
    pub fn forked(&mut self, pid: u32, ppid: u32, comm: &str, at_s: f64) {
        if let Some(w) = self.watchdog.as_mut() {
            w.watch(pid);
        }
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
            open_files_limit: None,
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

/// A process's command line (argv[0] included) from /proc/PID/cmdline; None when it is gone or
/// has none (a kernel thread, a zombie).
pub fn command_line(pid: u32) -> Option<Vec<String>> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let argv: Vec<String> = raw
        .split(|b| *b == 0)
        .filter(|w| !w.is_empty())
        .map(|w| String::from_utf8_lossy(w).into_owned())
        .collect();
    (!argv.is_empty()).then_some(argv)
}

/// Every descendant the processes `roots` have now, parents before children. With
/// CONFIG_PROC_CHILDREN, from each family thread's `children` file: the work grows with the
/// family, not with the machine. Without it (this kernel), from one pass over /proc reading
/// each process's parent from its `stat` (about 6 us a process).
fn descendants(roots: &[u32]) -> Vec<u32> {
    let own = std::process::id();
    if std::path::Path::new(&format!("/proc/{own}/task/{own}/children")).exists() {
        descendants_by_children_files(roots)
    } else {
        descendants_by_scan(roots)
    }
}

/// `descendants` from each family thread's `children` file (CONFIG_PROC_CHILDREN).
fn descendants_by_children_files(roots: &[u32]) -> Vec<u32> {
    let own = std::process::id();
    let mut known: BTreeSet<u32> = roots.iter().copied().collect();
    let mut found = Vec::new();
    let mut queue: Vec<u32> = roots.to_vec();
    while let Some(pid) = queue.pop() {
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
            .into_iter()
            .flatten();
        for task in tasks.filter_map(Result::ok) {
            let Ok(text) = std::fs::read_to_string(task.path().join("children")) else {
                continue;
            };
            for child in text.split_whitespace().filter_map(|c| c.parse::<u32>().ok()) {
                // scanprof itself is never a member, nor anything it started that is not a root.
                if child != own && known.insert(child) {
                    found.push(child);
                    queue.push(child);
                }
            }
        }
    }
    found
}

/// `descendants` from one pass over /proc (kernels without CONFIG_PROC_CHILDREN).
fn descendants_by_scan(roots: &[u32]) -> Vec<u32> {
    let own = std::process::id();
    let mut known: BTreeSet<u32> = roots.iter().copied().collect();
    let mut found = Vec::new();
    let parents: Vec<(u32, u32)> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| Some((pid, parent_of(pid)?)))
        .collect();
    loop {
        // scanprof itself is never a member, nor, through it, anything it started.
        let new: Vec<u32> = parents
            .iter()
            .filter(|(pid, ppid)| known.contains(ppid) && !known.contains(pid) && *pid != own)
            .map(|(pid, _)| *pid)
            .collect();
        if new.is_empty() {
            return found;
        }
        known.extend(new.iter().copied());
        found.extend(new);
    }
}

/// A process's parent, from /proc/PID/stat (None if it is gone).
fn parent_of(pid: u32) -> Option<u32> {
    let mut buf = [0u8; 512];
    let n = std::fs::File::open(format!("/proc/{pid}/stat"))
        .and_then(|mut f| std::io::Read::read(&mut f, &mut buf))
        .ok()?;
    parent_in_stat(&buf[..n])
}

/// The parent pid in the text of /proc/PID/stat: "PID (COMM) STATE PPID ...", where COMM may
/// itself hold spaces and parentheses (the last ')' ends it).
fn parent_in_stat(stat: &[u8]) -> Option<u32> {
    let close = stat.iter().rposition(|b| *b == b')')?;
    let rest = std::str::from_utf8(&stat[close + 1..]).ok()?;
    rest.split_whitespace().nth(1)?.parse().ok()
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
        open_files_limit: None,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn open_files_limit_is_the_soft_rlimit_nofile() {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes one rlimit into the struct it is given, which lives here.
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
        assert_eq!(super::open_files_limit(std::process::id()), Some(lim.rlim_cur));
        assert_eq!(super::open_files_limit(u32::MAX), None, "no such process");
    }

    use super::*;

    #[test]
    fn the_parent_is_read_after_the_last_parenthesis_of_the_command_name() {
        assert_eq!(parent_in_stat(b"1234 (sleep) S 99 1234 1 0 -1"), Some(99));
        assert_eq!(parent_in_stat(b"1234 (a) b (c) R 7 1 1 0"), Some(7));
        assert_eq!(parent_in_stat(b"1234 (no end"), None);
    }

    /// A shell with two children and a grandchild: every descendant is found, parents first,
    /// and nothing else (this test's own process is the shell's parent, not a member).
    #[test]
    fn every_descendant_of_a_root_is_found_and_nothing_else() {
        use std::io::BufRead;
        let mut sh = std::process::Command::new("sh")
            .args([
                "-c",
                "sleep 5 & sh -c 'sleep 5 & echo grandchild $!; wait' & echo inner $!; wait",
            ])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("sh");
        // The inner shell's pid and its child's, as the shells print them (in either order).
        let mut out = std::io::BufReader::new(sh.stdout.take().expect("stdout"));
        let mut pids = vec![0u32; 2];
        for _ in 0..2 {
            let mut line = String::new();
            out.read_line(&mut line).expect("read");
            let (what, pid) = line.trim().split_once(' ').expect("WHAT PID");
            pids[usize::from(what == "grandchild")] = pid.parse().expect("a pid");
        }
        let root = sh.id();
        // Both ways, while the tree stands still (every process in it sleeps).
        let found = descendants(&[root]);
        let mut by_files = descendants_by_children_files(&[root]);
        let mut by_scan = descendants_by_scan(&[root]);
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(root as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        for pid in found.iter().chain(pids.iter()) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(*pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        let _ = sh.wait();
        // sh's two children (sleep, the inner sh) and the inner sh's sleep.
        assert_eq!(found.len(), 3, "{found:?} (inner sh and its sleep: {pids:?})");
        for pid in &pids {
            assert!(found.contains(pid), "{pid} missing from {found:?}");
        }
        let inner = found.iter().position(|p| *p == pids[0]).expect("inner sh");
        let grandchild = found.iter().position(|p| *p == pids[1]).expect("its sleep");
        assert!(inner < grandchild, "a parent comes before its child: {found:?}");
        assert!(!found.contains(&std::process::id()));
        by_files.sort_unstable();
        by_scan.sort_unstable();
        // Without CONFIG_PROC_CHILDREN there are no children files to compare with.
        if !by_files.is_empty() {
            assert_eq!(by_files, by_scan, "children files and the /proc scan disagree");
        }
        assert_eq!(by_scan.len(), 3, "the /proc scan: {by_scan:?}");
    }
}
