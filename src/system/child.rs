//! Children scanprof starts die with it: the launched command, the lab's sender and helpers,
//! baseline senders. PR_SET_PDEATHSIG sends them SIGKILL when scanprof goes, SIGKILL of
//! scanprof included, so nothing it started is left running orphaned.
//!
//! The signal fires when the *thread* that started the child ends, so a child must be started
//! from a thread that outlives it (scanprof's collection thread or its main thread).

use std::os::unix::process::CommandExt;
use std::process::Command;

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
    use super::*;

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
        // SAFETY: waitpid on our own child's pid with a valid out-pointer; bounded by the
        // child's 30 s sleep at worst.
        let started = std::time::Instant::now();
        let r = unsafe { libc::waitpid(pid as libc::pid_t, &mut status, 0) };
        assert_eq!(r, pid as libc::pid_t);
        assert!(libc::WIFSIGNALED(status), "status {status:#x}");
        assert_eq!(libc::WTERMSIG(status), libc::SIGKILL);
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
    }
}
