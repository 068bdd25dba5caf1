//! What the benches share: their children, ended by pid however the bench ends; reading a
//! command's output; medians and figures for people.

#![allow(dead_code)]

use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// Set by SIGINT/SIGTERM: the bench stops at the next step and unwinds, ending its children (and
/// deleting its labs).
pub static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Turns SIGINT and SIGTERM into INTERRUPTED (checked between steps by check_interrupted), so
/// that a bench stopped with Ctrl-C still ends its children and deletes its labs.
pub fn watch_signals() {
    let flag = std::sync::Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, std::sync::Arc::clone(&flag)).expect("signal handler");
    }
    std::thread::spawn(move || loop {
        if flag.load(Ordering::Relaxed) {
            INTERRUPTED.store(true, Ordering::Relaxed);
        }
        std::thread::sleep(Duration::from_millis(50));
    });
}

pub fn check_interrupted() {
    if INTERRUPTED.load(Ordering::Relaxed) {
        panic!("interrupted: stopping (children are ended and labs deleted on the way out)");
    }
}

/// A child the bench started. Dropping it while it still runs signals it (by its own pid),
/// waits up to 3 s, then SIGKILLs it, and reaps it.
pub struct Proc {
    pub child: Child,
    pub name: String,
    /// signal that asks it to finish cleanly
    pub polite: Signal,
}

impl Proc {
    pub fn spawn(mut cmd: Command, name: &str, polite: Signal) -> Proc {
        let child = cmd.spawn().unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        Proc {
            child,
            name: name.to_string(),
            polite,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn signal(&self, sig: Signal) {
        let _ = kill(Pid::from_raw(self.child.id() as i32), sig);
    }

    /// Waits for it to exit by itself within `limit`; panics (and the drop ends it) otherwise,
    /// or at once when the bench is interrupted.
    pub fn wait(&mut self, limit: Duration) -> std::process::ExitStatus {
        let deadline = Instant::now() + limit;
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => return status,
                Ok(None) if Instant::now() < deadline => {
                    check_interrupted();
                    std::thread::sleep(Duration::from_millis(20));
                }
                Ok(None) => panic!("{} (pid {}) still runs after {limit:?}", self.name, self.pid()),
                Err(e) => panic!("waiting for {}: {e}", self.name),
            }
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        scanprof::system::child::end_child(&mut self.child, self.polite, Duration::from_secs(3));
    }
}

/// Reads a pipe to its end on a thread.
pub fn drain(mut pipe: impl Read + Send + 'static) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = pipe.read_to_string(&mut s);
        s
    })
}

/// Runs `cmd` to its end (asking it to end with `polite`, then killing it, after `limit`) and
/// returns its exit status, stdout and stderr.
pub fn run_capture(
    mut cmd: Command,
    name: &str,
    polite: Signal,
    limit: Duration,
) -> (std::process::ExitStatus, String, String) {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut p = Proc::spawn(cmd, name, polite);
    let out = drain(p.child.stdout.take().unwrap());
    let err = drain(p.child.stderr.take().unwrap());
    let status = p.wait(limit);
    (status, out.join().unwrap(), err.join().unwrap())
}

pub fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// 1234567.8 -> "1,234,568"
pub fn thousands(x: f64) -> String {
    let digits = format!("{:.0}", x.abs());
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if x < 0.0 && out.chars().any(|c| c != '0' && c != ',') {
        format!("-{out}")
    } else {
        out
    }
}

/// Empty BPF programs held attached to some hooks by scripts/hold-empty-hooks while this lives:
/// what those hooks cost a packet before any program body runs (the floor of a mode that uses
/// them). Dropping it ends the holder by its pid, which detaches them.
pub struct EmptyHooks {
    holder: Proc,
}

impl EmptyHooks {
    /// Attaches empty programs to `sections` (libbpf section names, as
    /// scanprof::probes::hook_sections gives them) and returns once every one is attached.
    pub fn attach(sections: &[String]) -> EmptyHooks {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/hold-empty-hooks");
        let mut cmd = Command::new(script);
        cmd.args(sections)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut holder = Proc::spawn(cmd, "hold-empty-hooks", Signal::SIGTERM);
        let stdout = holder.child.stdout.take().expect("piped stdout");
        let stderr = drain(holder.child.stderr.take().expect("piped stderr"));
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufRead::lines(std::io::BufReader::new(stdout)).map_while(Result::ok) {
                if line.trim() == "attached" {
                    let _ = tx.send(());
                }
            }
        });
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            check_interrupted();
            if rx.recv_timeout(Duration::from_millis(100)).is_ok() {
                return EmptyHooks { holder };
            }
            let exited = holder.child.try_wait().ok().flatten();
            if exited.is_some() || Instant::now() > deadline {
                holder.signal(Signal::SIGTERM);
                let _ = holder.wait(Duration::from_secs(10));
                panic!(
                    "empty programs on {} hooks did not attach ({}): {}",
                    sections.len(),
                    exited.map_or("timed out".to_string(), |s| s.to_string()),
                    stderr.join().unwrap_or_default()
                );
            }
        }
    }
}
