//! A launched command's whole family ends with scanprof, SIGKILL of scanprof included, and a
//! lab's namespaces are removed.
//!
//! PR_SET_PDEATHSIG (src/system/child.rs) ends the command scanprof started, but not what the
//! command forked: a scanner's sender and listener children, a shell's background jobs. Those
//! are reparented and run on. So `run` also starts a watchdog: `scanprof watchdog`, a separate
//! process reading a pipe from scanprof. scanprof writes each family member to it as the member
//! appears (pid and start time), and `done` when the run has ended normally. If the pipe closes
//! without `done`, scanprof died: the watchdog sends SIGKILL to every member that is still the
//! same process (same start time, so never to a pid reused by somebody else), newest first, and
//! exits. Attached runs have no watchdog: scanprof never ends processes it did not start.
//!
//! `lab` and `sweep` start one more (`scanprof watchdog --namespaces`), told each network
//! namespace as the lab creates it (`netns NAME`): if scanprof dies, it deletes them (and with
//! them the lab's veths), as `ip netns delete` does. A lab with a cgroup of its own
//! (`cgroup-throttled`) starts a third (`--cgroups`), told the cgroup (`cgroup PATH`), which it
//! removes then.
//!
//! A watchdog keeps only what its work needs as soon as it starts (it lives for the whole run,
//! as root): CAP_KILL for a family (members may run as another user, `--user`),
//! CAP_SYS_ADMIN for namespaces (unmounting their handles), CAP_DAC_OVERRIDE for cgroups (an
//! rmdir in a cgroupfs directory of mode 0555); no_new_privs is set and every other capability
//! leaves its effective, permitted and bounding sets.

use std::io::{BufRead, Write};
use std::process::{Child, ChildStdin, Command, ExitCode, Stdio};

use crate::system::caps::{self, Cap};
use crate::system::child::start_time;

/// What a watchdog looks after, and so the one capability it keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Watches {
    /// a launched command's family: SIGKILL to each member still alive
    Family,
    /// a lab's network namespaces: deleted
    Namespaces,
    /// a lab's cgroups: removed
    Cgroups,
}

impl Watches {
    /// The capabilities the watchdog keeps: CAP_KILL to signal members that may run as another
    /// user (`--user`); CAP_SYS_ADMIN to unmount a namespace's handle in /run/netns (its
    /// unlink needs none for root, who owns the directory); CAP_DAC_OVERRIDE to remove a
    /// cgroup from a hierarchy root of mode 0555 (cgroup v1).
    pub fn keeps(self) -> &'static [Cap] {
        match self {
            Watches::Family => &[caps::CAP_KILL],
            Watches::Namespaces => &[caps::CAP_SYS_ADMIN],
            Watches::Cgroups => &[caps::CAP_DAC_OVERRIDE],
        }
    }
}

/// scanprof's side: the watchdog process and the pipe to it.
#[derive(Debug)]
pub struct Watchdog {
    child: Child,
    pipe: Option<ChildStdin>,
}

/// The watchdog this process was started as (`scanprof watchdog`, `--namespaces` or
/// `--cgroups`, exactly as [`Watchdog::start_for`] starts it), or None. `main` asks before
/// parsing the command line: the watchdog is no clap subcommand, so no `--help`, manual page
/// or shell completion offers it.
pub fn requested() -> Option<Watches> {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    match args.iter().map(|a| a.to_str()).collect::<Vec<_>>().as_slice() {
        [Some("watchdog")] => Some(Watches::Family),
        [Some("watchdog"), Some("--namespaces")] => Some(Watches::Namespaces),
        [Some("watchdog"), Some("--cgroups")] => Some(Watches::Cgroups),
        _ => None,
    }
}

impl Watchdog {
    /// Starts `scanprof watchdog` (this same executable) with a pipe on its stdin, for a
    /// launched command's family.
    pub fn start() -> std::io::Result<Watchdog> {
        Watchdog::start_for(Watches::Family)
    }

    /// Starts `scanprof watchdog --namespaces`, for a lab's namespaces.
    pub fn start_for_namespaces() -> std::io::Result<Watchdog> {
        Watchdog::start_for(Watches::Namespaces)
    }

    /// Starts `scanprof watchdog --cgroups`, for a lab's cgroup.
    pub fn start_for_cgroups() -> std::io::Result<Watchdog> {
        Watchdog::start_for(Watches::Cgroups)
    }

    fn start_for(watches: Watches) -> std::io::Result<Watchdog> {
        let mut cmd = Command::new("/proc/self/exe");
        cmd.arg("watchdog");
        match watches {
            Watches::Family => {}
            Watches::Namespaces => {
                cmd.arg("--namespaces");
            }
            Watches::Cgroups => {
                cmd.arg("--cgroups");
            }
        }
        let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::null()).spawn()?;
        let pipe = child.stdin.take();
        Ok(Watchdog { child, pipe })
    }

    /// The watchdog's pid.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// A new family member: ended by the watchdog if scanprof dies. A process already gone
    /// (no start time to read) needs no watching.
    pub fn watch(&mut self, pid: u32) {
        let Some(start) = start_time(pid) else {
            return;
        };
        self.send(&format!("{pid} {start}\n"));
    }

    /// A network namespace just created (its name in /run/netns): deleted by the watchdog if
    /// scanprof dies.
    pub fn watch_namespace(&mut self, name: &str) {
        self.send(&format!("netns {name}\n"));
    }

    /// A cgroup directory just made (its absolute path under /sys/fs/cgroup): removed by the
    /// watchdog if scanprof dies.
    pub fn watch_cgroup(&mut self, dir: &std::path::Path) {
        self.send(&format!("cgroup {}\n", dir.display()));
    }

    fn send(&mut self, line: &str) {
        if let Some(pipe) = self.pipe.as_mut() {
            // One short line per write: atomic on a pipe. A watchdog that is gone is no error.
            let _ = pipe.write_all(line.as_bytes());
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

/// What a watchdog did when scanprof was gone.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Ended {
    /// members that were sent SIGKILL
    pub processes: usize,
    /// namespaces deleted, by name
    pub namespaces: Vec<String>,
    /// cgroups removed, by path
    pub cgroups: Vec<String>,
}

/// `scanprof watchdog`: reads members (`PID START`) and namespaces (`netns NAME`) from `input`
/// until `done` (nothing to do) or the end of input (scanprof is gone: each member that is
/// still the same process gets SIGKILL, newest first; then each namespace is deleted).
pub fn serve(input: impl BufRead) -> Ended {
    let mut members: Vec<(u32, u64)> = Vec::new();
    let mut namespaces: Vec<String> = Vec::new();
    let mut cgroups: Vec<String> = Vec::new();
    for line in input.lines() {
        let Ok(line) = line else { break };
        if line == "done" {
            return Ended::default();
        }
        if let Some(name) = line.strip_prefix("netns ") {
            namespaces.push(name.to_string());
            continue;
        }
        if let Some(path) = line.strip_prefix("cgroup ") {
            cgroups.push(path.to_string());
            continue;
        }
        let mut words = line.split_whitespace();
        if let (Some(Ok(pid)), Some(Ok(start))) = (
            words.next().map(str::parse::<u32>),
            words.next().map(str::parse::<u64>),
        ) {
            members.push((pid, start));
        }
    }
    let mut ended = Ended::default();
    for &(pid, start) in members.iter().rev() {
        if pid > 1 && start_time(pid) == Some(start) {
            let sent = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
            ended.processes += usize::from(sent.is_ok());
        }
    }
    for name in namespaces {
        match delete_namespace(&name) {
            Ok(()) => ended.namespaces.push(name),
            Err(e) => eprintln!("scanprof watchdog: cannot delete the namespace {name}: {e}"),
        }
    }
    for path in cgroups {
        match remove_cgroup(&path, std::time::Duration::from_secs(3)) {
            Ok(()) => ended.cgroups.push(path),
            Err(e) => eprintln!("scanprof watchdog: cannot remove the cgroup {path}: {e}"),
        }
    }
    ended
}

/// Where cgroup hierarchies are mounted.
const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// Removes the cgroup directory `path`, retrying for up to `patience` while processes in it
/// (killed with scanprof) are still leaving. Only an absolute path under /sys/fs/cgroup with
/// no `..` is accepted.
fn remove_cgroup(path: &str, patience: std::time::Duration) -> std::io::Result<()> {
    use std::path::{Component, Path};
    let p = Path::new(path);
    let plain = p.is_absolute()
        && p.starts_with(CGROUP_ROOT)
        && p != Path::new(CGROUP_ROOT)
        && p.components()
            .all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
    if !plain {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a cgroup path",
        ));
    }
    let deadline = std::time::Instant::now() + patience;
    loop {
        match std::fs::remove_dir(p) {
            // EBUSY while a process is still in it
            Err(e) if e.kind() != std::io::ErrorKind::NotFound && std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            done => return done,
        }
    }
}

/// Where `ip netns add` leaves a namespace's handle.
const NETNS_DIR: &str = "/run/netns";

/// Deletes the network namespace `name` as `ip netns delete` does: unmounts its handle in
/// /run/netns (detached: processes still in it keep it until they end) and removes the file.
/// A name that is not one plain file name in /run/netns is refused.
fn delete_namespace(name: &str) -> std::io::Result<()> {
    if name.is_empty() || name == "." || name == ".." || name.contains('/') || name.contains('\0') {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a namespace name",
        ));
    }
    let path = std::path::Path::new(NETNS_DIR).join(name);
    let c_path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: umount2 reads one NUL-terminated path that lives for the call. Failure (not
    // mounted any more) is not fatal: the file is removed either way, as ip does.
    let _ = unsafe { libc::umount2(c_path.as_ptr(), libc::MNT_DETACH) };
    std::fs::remove_file(&path)
}

/// The watchdog process's main: it keeps only what its work needs ([`Watches::keeps`], with
/// no_new_privs), ignores the terminal's SIGINT and SIGHUP (they end scanprof normally, which
/// then says `done`), and serves its stdin.
pub fn run(watches: Watches) -> ExitCode {
    use nix::sys::signal::{signal, SigHandler, Signal};
    if let Err(e) = crate::system::privileges::drop_to(watches.keeps()) {
        eprintln!("scanprof watchdog: warning: could not drop its capabilities ({e}): it runs on with them");
    }
    for sig in [Signal::SIGINT, Signal::SIGHUP] {
        // SAFETY: installing SIG_IGN runs no handler code.
        let _ = unsafe { signal(sig, SigHandler::SigIgn) };
    }
    let ended = serve(std::io::stdin().lock());
    if ended.processes > 0 {
        eprintln!(
            "scanprof watchdog: scanprof ended without finishing its run; ended {} process(es) of the command it started",
            ended.processes
        );
    }
    if !ended.cgroups.is_empty() {
        eprintln!(
            "scanprof watchdog: scanprof ended without removing its lab; removed the cgroup(s) {}",
            ended.cgroups.join(", ")
        );
    }
    if !ended.namespaces.is_empty() {
        eprintln!(
            "scanprof watchdog: scanprof ended without removing its lab; deleted the namespace(s) {}",
            ended.namespaces.join(", ")
        );
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

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
        assert_eq!(serve(input.as_bytes()), Ended::default());
        assert!(a.try_wait().unwrap().is_none() && b.try_wait().unwrap().is_none());

        let input = lines(&[a.id(), b.id()], false);
        assert_eq!(serve(input.as_bytes()).processes, 2);
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
        assert_eq!(serve(input.as_bytes()).processes, 0);
        assert!(c.try_wait().unwrap().is_none());
        let _ = c.kill();
        let _ = c.wait();
        // Garbage and pid 1 are never signalled.
        assert_eq!(serve("x y\n1 0\n\n".as_bytes()), Ended::default());
    }

    /// Only a plain name in /run/netns is ever deleted, and only a cgroup directory under
    /// /sys/fs/cgroup removed: a path that climbs out, a nested name or an empty one is refused
    /// before anything is touched.
    #[test]
    fn a_name_or_path_that_is_not_the_labs_own_kind_is_refused() {
        for bad in ["", ".", "..", "../etc/passwd", "a/b", "/run/netns/x", "a\0b"] {
            let e = delete_namespace(bad).unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{bad:?}");
        }
        // A name that was never created is an error, and no name is claimed deleted.
        let input = "netns scanprof-test-no-such-namespace\n";
        assert_eq!(serve(input.as_bytes()).namespaces, Vec::<String>::new());
        // Cgroups alike: only a directory under /sys/fs/cgroup, never one that climbs out.
        for bad in [
            "",
            "relative/x",
            "/sys/fs/cgroup",
            "/sys/fs/cgroup/../../tmp",
            "/tmp/x",
        ] {
            let e = remove_cgroup(bad, Duration::ZERO).unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{bad:?}");
        }
    }
}
