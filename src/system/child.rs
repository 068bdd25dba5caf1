//! Children scanprof starts die with it: the launched command, the lab's sender and helpers,
//! baseline senders. PR_SET_PDEATHSIG sends them SIGKILL when scanprof goes, SIGKILL of
//! scanprof included, so nothing it started is left running orphaned.
//!
//! The signal fires when the *thread* that started the child ends, so a child must be started
//! from a thread that outlives it (scanprof's collection thread or its main thread).
//!
//! Ending a child on purpose is done here too, once: [`end_child`] asks it to end (SIGTERM, or
//! the signal given), waits a grace period, then SIGKILLs it and reaps it; [`ChildGuard`] does
//! that when dropped. Only the child's own pid is signalled there; [`end_family`] ends a whole
//! family known by pid (a launched command's: src/session.rs) the same way.

use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// How often [`end_child`] looks whether the child has ended during its grace period.
const POLL: Duration = Duration::from_millis(20);

/// Ends `child` if it still runs: `polite` to its pid, up to `grace` for it to exit, then
/// SIGKILL; reaps it either way. Returns its exit status (None only if waiting failed). A child
/// that has already exited is only reaped, never signalled.
pub fn end_child(child: &mut Child, polite: Signal, grace: Duration) -> Option<ExitStatus> {
    if let Ok(Some(status)) = child.try_wait() {
        return Some(status);
    }
    let pid = Pid::from_raw(child.id() as i32);
    let _ = kill(pid, polite);
    let deadline = Instant::now() + grace;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(POLL),
            _ => break,
        }
    }
    let _ = kill(pid, Signal::SIGKILL);
    child.wait().ok()
}

/// Ends a family of processes known by pid, as a signal to a process group would, but also
/// reaching members that left the group (`setsid`, a daemon's double fork): `polite` to every
/// member, up to `grace` for them to end, then SIGKILL to those left, until none is. `members`
/// is asked again at every step (every [`POLL`]) for the members alive now, so that one
/// forked meanwhile is ended too; it should reap what it can, so that an ended member no
/// longer counts. A pid is signalled only while it is the process first seen under it (same
/// start time), never one that reused it. The SIGKILL passes stop after `grace` too, even if a
/// member is still listed (one that cannot die, or a pid now another process's).
pub fn end_family(mut members: impl FnMut() -> Vec<u32>, polite: Signal, grace: Duration) {
    // pid -> start time when it was first signalled
    let mut seen: std::collections::BTreeMap<u32, u64> = std::collections::BTreeMap::new();
    for sig in [polite, Signal::SIGKILL] {
        let deadline = Instant::now() + grace;
        let mut asked: Vec<u32> = Vec::new();
        loop {
            let live = members();
            if live.is_empty() {
                return;
            }
            // Politely once each; SIGKILL at every pass (a member may have been stopped).
            for &pid in live.iter().filter(|p| **p > 1) {
                if sig != Signal::SIGKILL && asked.contains(&pid) {
                    continue;
                }
                let Some(start) = start_time(pid) else {
                    continue; // gone
                };
                if *seen.entry(pid).or_insert(start) == start {
                    let _ = kill(Pid::from_raw(pid as i32), sig);
                }
                asked.push(pid);
            }
            if Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(POLL);
        }
    }
}

/// The start time of `pid` in clock ticks since boot (/proc/PID/stat field 22): with the pid,
/// it names one process, never a later one that reused the pid. None when it is gone.
pub fn start_time(pid: u32) -> Option<u64> {
    procfs::process::Process::new(pid as i32)
        .ok()?
        .stat()
        .ok()
        .map(|s| s.starttime)
}

/// A child process that is ended (by [`end_child`]: SIGTERM, the grace period, SIGKILL) and
/// reaped when the guard is dropped, so a failing caller leaves nothing running.
#[derive(Debug)]
pub struct ChildGuard {
    child: Child,
    polite: Signal,
    grace: Duration,
    status: Option<ExitStatus>,
}

impl ChildGuard {
    /// Guards `child`: asked to end with `polite`, given `grace` before SIGKILL.
    pub fn new(child: Child, polite: Signal, grace: Duration) -> ChildGuard {
        ChildGuard {
            child,
            polite,
            grace,
            status: None,
        }
    }

    /// The child's pid.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// The child itself (to take its pipes).
    pub fn child_mut(&mut self) -> &mut Child {
        &mut self.child
    }

    /// Its exit status if it has exited (and is then reaped), without waiting.
    pub fn try_wait(&mut self) -> std::io::Result<Option<ExitStatus>> {
        if self.status.is_none() {
            self.status = self.child.try_wait()?;
        }
        Ok(self.status)
    }

    /// Sends `sig` to the child's pid, unless it has been reaped already.
    pub fn signal(&self, sig: Signal) {
        if self.status.is_none() {
            let _ = kill(Pid::from_raw(self.child.id() as i32), sig);
        }
    }

    /// Ends it now if it still runs ([`end_child`]) and returns its exit status.
    pub fn end(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = end_child(&mut self.child, self.polite, self.grace);
        }
        self.status
    }

    /// Ends it at once with SIGKILL, no grace, and returns its exit status.
    pub fn kill(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = end_child(&mut self.child, Signal::SIGKILL, Duration::ZERO);
        }
        self.status
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        self.end();
    }
}

/// Arranges for `cmd`'s process to get SIGKILL when the starting thread (scanprof) ends. If
/// scanprof already died between fork and exec, the child ends itself at once.
pub fn die_with_parent(cmd: &mut Command) -> &mut Command {
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: prctl, getppid and _exit are async-signal-safe; the closure touches no other
    // state of the parent.
    unsafe {
        cmd.pre_exec(move || {
            if !set_parent_death_signal(parent) {
                libc::_exit(137);
            }
            Ok(())
        });
    }
    cmd
}

/// A child run to its end by [`run_to_end`].
#[derive(Debug)]
pub struct Finished {
    pub status: ExitStatus,
    pub stdout: String,
    /// its stderr, after a line saying so when it was killed for overrunning its time
    pub stderr: String,
    /// user + system CPU time of the child (getrusage of reaped children), in ns
    pub cpu_ns: Option<u64>,
    /// `stop` was raised while it ran (it was asked to end)
    pub interrupted: bool,
}

/// Starts `cmd` (stdin null, stdout and stderr captured, dying with scanprof) and waits for it
/// to end: when `stop` is raised it is ended by [`end_child`] (SIGTERM, `grace`, SIGKILL); past
/// `limit` it gets SIGKILL at once. Reaped either way; only this child's pid is signalled.
pub fn run_to_end(
    mut cmd: Command,
    limit: Duration,
    grace: Duration,
    stop: &std::sync::atomic::AtomicBool,
) -> anyhow::Result<Finished> {
    use anyhow::Context;
    use std::sync::atomic::Ordering;
    cmd.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let cpu_before = children_cpu_ns();
    die_with_parent(&mut cmd);
    let child = cmd.spawn().with_context(|| format!("cannot start {cmd:?}"))?;
    let mut guard = ChildGuard::new(child, Signal::SIGTERM, grace);
    let stdout = read_on_thread(guard.child_mut().stdout.take());
    let stderr = read_on_thread(guard.child_mut().stderr.take());
    let deadline = Instant::now() + limit;
    let mut killed_for_time = false;
    let mut interrupted = false;
    let status = loop {
        if let Some(status) = guard.try_wait().context("waiting for the child")? {
            break Some(status);
        }
        if stop.load(Ordering::Relaxed) {
            interrupted = true;
            break guard.end();
        }
        if Instant::now() > deadline {
            killed_for_time = true;
            break guard.kill();
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let status = status.context("waiting for the child")?;
    let cpu_ns = match (cpu_before, children_cpu_ns()) {
        (Some(a), Some(b)) => b.checked_sub(a),
        _ => None,
    };
    let stdout = stdout.join().unwrap_or_default();
    let mut stderr = stderr.join().unwrap_or_default();
    if killed_for_time {
        stderr = format!("did not end within {limit:?}; killed\n{stderr}");
    }
    Ok(Finished {
        status,
        stdout,
        stderr,
        cpu_ns,
        interrupted: interrupted || stop.load(Ordering::Relaxed),
    })
}

/// Reads a pipe to its end on a thread (lossy UTF-8).
fn read_on_thread(pipe: Option<impl std::io::Read + Send + 'static>) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        if let Some(mut p) = pipe {
            let _ = p.read_to_end(&mut bytes);
        }
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

/// User + system CPU time of this process's reaped children so far, in ns.
fn children_cpu_ns() -> Option<u64> {
    // SAFETY: an all-zero rusage is a valid value of this plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes one rusage into the valid, exclusively borrowed `usage`.
    if unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) } != 0 {
        return None;
    }
    let ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1_000;
    Some(ns(usage.ru_utime) + ns(usage.ru_stime))
}

/// In a child just forked from `parent`: asks for SIGKILL when the parent's thread ends.
/// Returns false when the parent is already gone (the child should end itself).
/// Only async-signal-safe calls: usable between fork and exec.
pub fn set_parent_death_signal(parent: libc::pid_t) -> bool {
    // SAFETY: prctl(PR_SET_PDEATHSIG) takes a signal number and touches no memory; getppid
    // has no side effects.
    unsafe {
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) != 0 {
            return true; // not fatal: the child still runs, only without the guard
        }
        libc::getppid() == parent
    }
}

/// The user a launched command runs as (`run --user`, like `strace -u`): its uid, primary gid
/// and supplementary groups, read from the user database before the fork.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunAs {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    /// supplementary groups, the primary group included
    pub groups: Vec<u32>,
}

impl RunAs {
    /// Looks `user` up by name, or by uid when it is a number.
    pub fn lookup(user: &str) -> anyhow::Result<RunAs> {
        use nix::unistd::{Uid, User};
        let found = match user.parse::<u32>() {
            Ok(uid) => User::from_uid(Uid::from_raw(uid)),
            Err(_) => User::from_name(user),
        }
        .map_err(|e| anyhow::anyhow!("looking up the user {user:?}: {e}"))?;
        let Some(u) = found else {
            anyhow::bail!(
                "--user {user}: no such user in the user database (give a name or uid that `id` knows)"
            );
        };
        let name = std::ffi::CString::new(u.name.clone())
            .map_err(|_| anyhow::anyhow!("--user {user}: the user's name holds a NUL byte"))?;
        let groups = nix::unistd::getgrouplist(&name, u.gid)
            .map_err(|e| anyhow::anyhow!("reading the groups of user {}: {e}", u.name))?;
        Ok(RunAs {
            name: u.name,
            uid: u.uid.as_raw(),
            gid: u.gid.as_raw(),
            groups: groups.into_iter().map(|g| g.as_raw()).collect(),
        })
    }

    /// Arranges for `cmd` to run as this user: setgroups, setgid, setuid in the child before
    /// exec. Changing user clears the child's capabilities (it keeps none across a setuid from
    /// root) and its parent-death signal, so this must come before [`die_with_parent`].
    pub fn apply(&self, cmd: &mut Command) {
        let (uid, gid, groups) = (self.uid, self.gid, self.groups.clone());
        // SAFETY: setgroups, setgid and setuid are async-signal-safe system calls; the closure
        // reads only the values moved into it and allocates nothing.
        unsafe {
            cmd.pre_exec(move || {
                if libc::setgroups(groups.len(), groups.as_ptr()) != 0
                    || libc::setgid(gid) != 0
                    || libc::setuid(uid) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;

    use super::*;

    fn sh(script: &str) -> Child {
        Command::new("sh").args(["-c", script]).spawn().unwrap()
    }

    #[test]
    fn run_to_end_captures_output_and_kills_an_overrun() {
        use std::sync::atomic::AtomicBool;
        let no = AtomicBool::new(false);
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo out; echo err >&2; exit 4"]);
        let f = run_to_end(cmd, Duration::from_secs(10), Duration::from_secs(1), &no).unwrap();
        assert_eq!(
            (f.status.code(), f.stdout.as_str(), f.stderr.as_str()),
            (Some(4), "out\n", "err\n")
        );
        assert!(!f.interrupted);
        let mut cmd = Command::new("sleep");
        cmd.arg("30");
        let started = Instant::now();
        let f = run_to_end(cmd, Duration::from_millis(200), Duration::from_secs(1), &no).unwrap();
        assert_eq!(f.status.signal(), Some(libc::SIGKILL));
        assert!(
            f.stderr.starts_with("did not end within 200ms; killed"),
            "{}",
            f.stderr
        );
        assert!(started.elapsed() < Duration::from_secs(5));
        // Stopped: asked to end (SIGTERM) and reported as interrupted.
        let stop = AtomicBool::new(true);
        let mut cmd = Command::new("sleep");
        cmd.arg("30");
        let f = run_to_end(cmd, Duration::from_secs(10), Duration::from_secs(2), &stop).unwrap();
        assert_eq!(f.status.signal(), Some(libc::SIGTERM));
        assert!(f.interrupted);
    }

    #[test]
    fn a_child_that_obeys_sigterm_ends_by_it_within_the_grace() {
        let started = Instant::now();
        let status = end_child(&mut sh("exec sleep 30"), Signal::SIGTERM, Duration::from_secs(5));
        assert_eq!(status.and_then(|s| s.signal()), Some(libc::SIGTERM));
        assert!(
            started.elapsed() < Duration::from_secs(4),
            "{:?}",
            started.elapsed()
        );
    }

    #[test]
    fn a_child_that_ignores_sigterm_gets_sigkill_after_the_grace() {
        // The shell ignores TERM and tells us so before the test signals it.
        let mut child = Command::new("sh")
            .args(["-c", "trap '' TERM; echo ready; while :; do sleep 1; done"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut ready = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut ready,
        )
        .unwrap();
        let started = Instant::now();
        let status = end_child(&mut child, Signal::SIGTERM, Duration::from_millis(300));
        let took = started.elapsed();
        assert_eq!(status.and_then(|s| s.signal()), Some(libc::SIGKILL));
        assert!(
            took >= Duration::from_millis(300),
            "killed before the grace: {took:?}"
        );
    }

    #[test]
    fn an_exited_child_is_reaped_not_signalled() {
        let mut child = sh("exit 3");
        std::thread::sleep(Duration::from_millis(200));
        let status = end_child(&mut child, Signal::SIGTERM, Duration::from_secs(1));
        assert_eq!(status.and_then(|s| s.code()), Some(3));
    }

    #[test]
    fn a_dropped_guard_ends_and_reaps_its_child() {
        let guard = ChildGuard::new(sh("exec sleep 30"), Signal::SIGTERM, Duration::from_secs(2));
        let pid = guard.id() as libc::pid_t;
        drop(guard);
        // Reaped: the pid is no child of ours any more.
        let mut st = 0;
        // SAFETY: waitpid with WNOHANG on a pid and a valid out-pointer.
        let r = unsafe { libc::waitpid(pid, &mut st, libc::WNOHANG) };
        assert_eq!(r, -1, "the guard left its child unreaped");
    }

    /// Whether `pid` runs (a zombie does not).
    fn running(pid: u32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| s.rfind(')').map(|i| !s[i + 2..].starts_with('Z')))
            .unwrap_or(false)
    }

    /// A shell's background job outlives the shell's own end (it is reparented): ending the
    /// family ends it too, by SIGTERM, and a member that ignores SIGTERM by SIGKILL after the
    /// grace. The members are the pids this test started (the shell and the job it printed).
    #[test]
    fn ending_a_family_ends_every_member_and_sigkills_the_stubborn_ones() {
        for (job, want) in [
            ("sleep 30", libc::SIGTERM),
            ("trap '' TERM; while :; do sleep 1; done", libc::SIGKILL),
        ] {
            let mut shell = Command::new("sh")
                .args(["-c", &format!("sh -c \"{job}\" & echo $!; exec sleep 30")])
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            let mut line = String::new();
            std::io::BufRead::read_line(
                &mut std::io::BufReader::new(shell.stdout.take().unwrap()),
                &mut line,
            )
            .unwrap();
            let forked: u32 = line.trim().parse().unwrap();
            // Give the job's shell time to set its trap.
            std::thread::sleep(Duration::from_millis(300));
            let root = shell.id();
            let mut root_status = None;
            let grace = Duration::from_millis(500);
            let started = Instant::now();
            end_family(
                || {
                    if root_status.is_none() {
                        root_status = shell.try_wait().unwrap();
                    }
                    [root, forked]
                        .into_iter()
                        .filter(|p| (*p != root || root_status.is_none()) && running(*p))
                        .collect()
                },
                Signal::SIGTERM,
                grace,
            );
            let took = started.elapsed();
            let _ = shell.wait(); // reaped in the closure already: its status, cached
            let forked_alive = running(forked);
            if forked_alive {
                let _ = kill(Pid::from_raw(forked as i32), Signal::SIGKILL);
            }
            assert!(!forked_alive, "{job}: the forked member outlived end_family");
            assert_eq!(root_status.and_then(|s| s.signal()), Some(libc::SIGTERM), "{job}");
            if want == libc::SIGKILL {
                assert!(took >= grace, "{job}: SIGKILL before the grace: {took:?}");
            }
            assert!(took < Duration::from_secs(4), "{job}: {took:?}");
        }
    }

    /// A child started with the guard from a thread that then ends is killed with it: the
    /// same mechanism that ends the launched command when scanprof is killed.
    #[test]
    fn a_guarded_child_dies_with_the_thread_that_started_it() {
        let pid = std::thread::spawn(|| {
            let mut cmd = Command::new("sleep");
            cmd.arg("30");
            die_with_parent(&mut cmd);
            let child = cmd.spawn().unwrap();
            let pid = child.id();
            std::mem::forget(child); // reaped below by pid
            pid
        })
        .join()
        .unwrap();
        let mut status = 0;
        let started = std::time::Instant::now();
        // SAFETY: waitpid on our own child's pid with a valid out-pointer; bounded by the
        // child's 30 s sleep at worst.
        let r = unsafe { libc::waitpid(pid as libc::pid_t, &mut status, 0) };
        assert_eq!(r, pid as libc::pid_t);
        assert!(libc::WIFSIGNALED(status), "status {status:#x}");
        assert_eq!(libc::WTERMSIG(status), libc::SIGKILL);
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
    }
}
