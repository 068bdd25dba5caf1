//! The disturbances a scenario puts on the sender, and the watch on it: stalls (SIGSTOP,
//! SIGCONT through a pidfd), a CPU hog on its CPU, and its scheduler statistics.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use nix::sched::{sched_setaffinity, CpuSet};
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::waitpid;
use nix::unistd::{fork, ForkResult, Pid};
use serde::Serialize;

use super::scenario::Stall;
use crate::system::monotonic_ns;

/// Stops and continues the sender (SIGSTOP, SIGCONT) on a schedule, through a pidfd so that
/// no other process can ever be signalled; always leaves it continued.
pub struct Staller {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<u64>>,
}

impl Staller {
    pub fn start(stall: Stall, sender: SenderId) -> anyhow::Result<Staller> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("lab-staller".into())
            .spawn(move || {
                // Stopping the lab's own sender (same user) needs no privilege.
                let _ = crate::system::privileges::drop_to(&[]);
                let Some(pidfd) = wait_for_sender(&flag, &sender) else {
                    return 0;
                };
                let mut stops = 0;
                let run = stall.every.saturating_sub(stall.pause);
                while !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(run);
                    if flag.load(Ordering::Relaxed) || !pidfd.signal(libc::SIGSTOP) {
                        break;
                    }
                    stops += 1;
                    std::thread::sleep(stall.pause);
                    if !pidfd.signal(libc::SIGCONT) {
                        break;
                    }
                }
                pidfd.signal(libc::SIGCONT);
                stops
            })
            .context("cannot start the staller thread")?;
        Ok(Staller {
            stop,
            thread: Some(thread),
        })
    }

    /// Stops stalling (the sender is left continued) and returns how often it was stopped.
    pub fn finish(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().and_then(|t| t.join().ok()).unwrap_or(0)
    }
}

impl Drop for Staller {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A pidfd: a handle on one process that a reused pid can never redirect.
struct PidFd(std::os::fd::OwnedFd);

impl PidFd {
    pub fn open(pid: u32) -> Option<PidFd> {
        // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
        if fd < 0 {
            return None;
        }
        // SAFETY: `fd` was just returned by pidfd_open and is owned by nothing else.
        Some(PidFd(unsafe { std::os::fd::FromRawFd::from_raw_fd(fd as i32) }))
    }

    /// Sends `sig`; false once the process is gone.
    pub fn signal(&self, sig: libc::c_int) -> bool {
        use std::os::fd::AsRawFd;
        // SAFETY: the descriptor is a valid pidfd; no siginfo is passed.
        let r = unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                self.0.as_raw_fd(),
                sig,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            )
        };
        r == 0
    }
}

/// How to tell the sender among this process's children: the command name of the scanprof
/// binary it runs (after `ip netns exec`, `setsid`, `nice` and `taskset` have exec'd it), and
/// not the hog (a fork of this process, with the same name).
#[derive(Debug, Clone)]
pub struct SenderId {
    comm: String,
    hog: Option<u32>,
}

impl SenderId {
    pub fn new(exe: &std::path::Path, hog: Option<u32>) -> SenderId {
        let name = exe
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        // The kernel keeps the first 15 bytes of the file name (TASK_COMM_LEN - 1).
        let comm = name.bytes().take(15).map(char::from).collect();
        SenderId { comm, hog }
    }

    pub fn is(&self, pid: u32) -> bool {
        Some(pid) != self.hog
            && std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim_end() == self.comm)
    }
}

/// The sender once it runs, held by a pidfd and checked to be our child after opening it.
fn wait_for_sender(stop: &AtomicBool, sender: &SenderId) -> Option<PidFd> {
    while !stop.load(Ordering::Relaxed) {
        for pid in children_of_self() {
            if !sender.is(pid) {
                continue;
            }
            let Some(fd) = PidFd::open(pid) else { continue };
            // Opened after the check: still our child running the sender, so the pidfd is its.
            if sender.is(pid) && children_of_self().contains(&pid) {
                return Some(fd);
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    None
}

/// Follows the sender's scheduler statistics while the run goes on: every 20 ms, the
/// /proc/PID/schedstat of the sender (see [`SenderId`]). Keeps the last reading.
pub struct SchedWatch {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Option<SchedStat>>>,
}

/// One reading of /proc/PID/schedstat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchedStat {
    /// ns on CPU
    pub(super) cpu_ns: u64,
    /// ns runnable, waiting for a CPU
    pub(super) run_delay_ns: u64,
}

impl SchedWatch {
    const POLL: Duration = Duration::from_millis(20);

    pub fn start(sender: SenderId) -> anyhow::Result<SchedWatch> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("lab-schedstat".into())
            .spawn(move || {
                // /proc/PID/schedstat is readable by everyone.
                let _ = crate::system::privileges::drop_to(&[]);
                let mut last = None;
                while !flag.load(Ordering::Relaxed) {
                    for pid in children_of_self() {
                        if !sender.is(pid) {
                            continue;
                        }
                        if let Some(s) = std::fs::read_to_string(format!("/proc/{pid}/schedstat"))
                            .ok()
                            .and_then(|t| parse_schedstat(&t))
                        {
                            last = Some(s);
                        }
                    }
                    std::thread::sleep(Self::POLL);
                }
                last
            })
            .context("cannot start the schedstat watcher")?;
        Ok(SchedWatch {
            stop,
            thread: Some(thread),
        })
    }

    /// The last reading (None if the sender was never seen).
    pub fn finish(mut self) -> Option<SchedStat> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take()?.join().ok().flatten()
    }
}

impl Drop for SchedWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Pids of this process's children, from every thread's /proc/self/task/TID/children.
pub fn children_of_self() -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|c| {
            c.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

/// `cpu_ns run_delay_ns timeslices`
fn parse_schedstat(text: &str) -> Option<SchedStat> {
    let mut f = text.split_whitespace().map(|v| v.parse::<u64>().ok());
    Some(SchedStat {
        cpu_ns: f.next()??,
        run_delay_ns: f.next()??,
    })
}

/// A CPU-bound process pinned to one CPU, for at most a bounded time; ended by its pid.
pub struct Hog {
    pub(super) pid: Pid,
    cpu: usize,
}

impl Hog {
    /// Forks a child that pins itself to `cpu` and spins until `for_s` seconds have passed.
    pub fn start(cpu: usize, for_s: f64) -> anyhow::Result<Hog> {
        let end_ns = monotonic_ns().saturating_add((for_s * 1e9) as u64);
        let parent = std::process::id() as libc::pid_t;
        // SAFETY: the child only makes system calls (prctl, capset, sched_setaffinity,
        // clock_gettime) and _exit: it takes no lock and allocates nothing, so the parent's
        // other threads, absent from the child, cannot leave it stuck.
        match unsafe { fork() }.context("cannot fork the CPU hog")? {
            ForkResult::Child => {
                if !crate::system::child::set_parent_death_signal(parent) {
                    // SAFETY: as below: scanprof is gone, so the hog ends at once.
                    unsafe { libc::_exit(0) }
                }
                // It only spins: no privilege (system calls only, as fork requires here).
                let _ = crate::system::privileges::drop_all_in_forked_child();
                let mut set = CpuSet::new();
                if set.set(cpu).is_ok() {
                    let _ = sched_setaffinity(Pid::from_raw(0), &set);
                }
                while monotonic_ns() < end_ns {
                    std::hint::spin_loop();
                }
                // SAFETY: ends the child at once, running no destructor or atexit handler of
                // the parent's state.
                unsafe { libc::_exit(0) }
            }
            ForkResult::Parent { child } => Ok(Hog { pid: child, cpu }),
        }
    }

    /// CPU time the hog used so far, s (utime + stime from /proc/PID/stat).
    pub fn cpu_s(&self) -> f64 {
        let ticks = || -> Option<u64> {
            let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid)).ok()?;
            let mut f = stat[stat.rfind(')')? + 2..].split_whitespace();
            let utime: u64 = f.nth(11)?.parse().ok()?;
            let stime: u64 = f.next()?.parse().ok()?;
            Some(utime + stime)
        };
        // SAFETY: sysconf has no memory effects.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
        ticks().map_or(0.0, |t| t as f64 / hz)
    }

    pub fn stop(self) -> HogReport {
        let report = HogReport {
            pid: self.pid.as_raw() as u32,
            cpu: self.cpu,
            cpu_s: self.cpu_s(),
        };
        drop(self);
        report
    }
}

impl Drop for Hog {
    fn drop(&mut self) {
        let _ = kill(self.pid, Signal::SIGKILL);
        let _ = waitpid(self.pid, None);
    }
}

/// The CPU hog: where it ran and what it took.
#[derive(Debug, Clone, Serialize)]
pub struct HogReport {
    pub pid: u32,
    /// the CPU it and the sender were pinned to
    pub cpu: usize,
    /// CPU time it used, s
    pub cpu_s: f64,
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn the_sender_is_known_by_its_binarys_command_name() {
        let id = SenderId::new(std::path::Path::new("/tmp/scanprof-release-build"), Some(7));
        assert_eq!(id.comm, "scanprof-releas");
        assert_eq!(
            SenderId::new(std::path::Path::new("target/debug/scanprof"), None).comm,
            "scanprof"
        );
        assert!(!id.is(7), "the hog is never the sender");
    }

    #[test]
    fn schedstat_gives_cpu_and_run_delay() {
        assert_eq!(
            parse_schedstat("561238 1377409 1\n"),
            Some(SchedStat {
                cpu_ns: 561238,
                run_delay_ns: 1377409
            })
        );
        assert_eq!(parse_schedstat("12\n"), None);
    }
}
