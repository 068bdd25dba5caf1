//! A launched command's whole family ends with scanprof, SIGKILL of scanprof included.
//!
//! PR_SET_PDEATHSIG (src/system/child.rs) ends the command scanprof started, but not what the
//! command forked: a scanner's sender and listener children, a shell's background jobs. Those
//! are reparented and run on. So `run` also starts a watchdog: `scanprof watchdog`, a separate
//! process reading a pipe from scanprof. scanprof writes each family member to it as the member
//! appears (pid and start time), and `done` when the run has ended normally. If the pipe closes
//! without `done`, scanprof died: the watchdog sends SIGKILL to every member that is still the
//! same process (same start time, so never to a pid reused by somebody else), newest first, and
//! exits. Attached runs have no watchdog: scanprof never ends processes it did not start.

use std::io::{BufRead, Write};
use std::process::{Child, ChildStdin, Command, ExitCode, Stdio};

/// scanprof's side: the watchdog process and the pipe to it.
#[derive(Debug)]
pub struct Watchdog {
    child: Child,
    pipe: Option<ChildStdin>,
}

impl Watchdog {
    /// Starts `scanprof watchdog` (this same executable) with a pipe on its stdin.
    pub fn start() -> std::io::Result<Watchdog> {
        let mut child = Command::new("/proc/self/exe")
            .arg("watchdog")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()?;
        let pipe = child.stdin.take();
        Ok(Watchdog { child, pipe })
    }

    /// A new family member: ended by the watchdog if scanprof dies. A process already gone
    /// (no start time to read) needs no watching.
    pub fn watch(&mut self, pid: u32) {
        let Some(start) = start_time(pid) else {
            return;
        };
        if let Some(pipe) = self.pipe.as_mut() {
            // One short line per write: atomic on a pipe. A watchdog that is gone is no error.
            let _ = pipe.write_all(format!("{pid} {start}\n").as_bytes());
        }
    }

    /// The run ended normally: the watchdog exits without ending anything.
    pub fn done(mut self) {
        if let Some(mut pipe) = self.pipe.take() {
            let _ = pipe.write_all(b"done\n");
        }
        let _ = self.child.wait();
    }
}

impl Drop for Watchdog {
    /// Without `done` (an error ended the run early), the closed pipe has the watchdog end the
    /// family, as if scanprof had died.
    fn drop(&mut self) {
        if self.pipe.take().is_some() {
            let _ = self.child.wait();
        }
    }
}

/// The start time of `pid` in clock ticks since boot (/proc/PID/stat field 22).
fn start_time(pid: u32) -> Option<u64> {
    procfs::process::Process::new(pid as i32)
        .ok()?
        .stat()
        .ok()
        .map(|s| s.starttime)
}

/// `scanprof watchdog`: reads members from `input` until `done` (exit 0) or the end of input
/// (scanprof is gone: each member that is still the same process gets SIGKILL, newest first).
/// Returns how many it ended.
pub fn serve(input: impl BufRead) -> usize {
    let mut members: Vec<(u32, u64)> = Vec::new();
    for line in input.lines() {
        let Ok(line) = line else { break };
        if line == "done" {
            return 0;
        }
        let mut words = line.split_whitespace();
        if let (Some(Ok(pid)), Some(Ok(start))) = (
            words.next().map(str::parse::<u32>),
            words.next().map(str::parse::<u64>),
        ) {
            members.push((pid, start));
        }
    }
    let mut ended = 0;
    for &(pid, start) in members.iter().rev() {
        if pid > 1 && start_time(pid) == Some(start) {
            let sent = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
            ended += usize::from(sent.is_ok());
        }
    }
    ended
}

/// The watchdog process's main: it ignores the terminal's SIGINT and SIGHUP (they end scanprof
/// normally, which then says `done`), and serves its stdin.
pub fn run() -> ExitCode {
    use nix::sys::signal::{signal, SigHandler, Signal};
    for sig in [Signal::SIGINT, Signal::SIGHUP] {
        // SAFETY: installing SIG_IGN runs no handler code.
        let _ = unsafe { signal(sig, SigHandler::SigIgn) };
    }
    let ended = serve(std::io::stdin().lock());
    if ended > 0 {
        eprintln!("scanprof watchdog: scanprof ended without finishing its run; ended {ended} process(es) of the command it started");
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sleeper() -> Child {
        Command::new("sleep").arg("30").spawn().unwrap()
    }

    #[test]
    fn done_ends_nothing_and_the_end_of_input_ends_every_member() {
        let mut a = sleeper();
        let mut b = sleeper();
        let lines = |pids: &[u32], done: bool| {
            let mut s: String = pids
                .iter()
                .map(|p| format!("{p} {}\n", start_time(*p).unwrap()))
                .collect();
            if done {
                s += "done\n";
            }
            s
        };
        let input = lines(&[a.id(), b.id()], true);
        assert_eq!(serve(input.as_bytes()), 0);
        assert!(a.try_wait().unwrap().is_none() && b.try_wait().unwrap().is_none());

        let input = lines(&[a.id(), b.id()], false);
        assert_eq!(serve(input.as_bytes()), 2);
        for c in [&mut a, &mut b] {
            use std::os::unix::process::ExitStatusExt;
            assert_eq!(c.wait().unwrap().signal(), Some(libc::SIGKILL));
        }
    }

    #[test]
    fn a_member_whose_pid_now_names_another_process_is_left_alone() {
        let mut c = sleeper();
        // Its start time as recorded differs: a later process that got the same pid.
        let input = format!("{} {}\n", c.id(), start_time(c.id()).unwrap() + 1);
        assert_eq!(serve(input.as_bytes()), 0);
        assert!(c.try_wait().unwrap().is_none());
        let _ = c.kill();
        let _ = c.wait();
        // Garbage and pid 1 are never signalled.
        assert_eq!(serve("x y\n1 0\n\n".as_bytes()), 0);
    }
}
