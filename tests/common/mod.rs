//! Helpers shared by the integration tests: running the scanprof binary and reading its NDJSON,
//! guards that end (by pid) and reap the processes a test started, the check that no scanprof
//! BPF program outlives a run, and the mutex that keeps timing-sensitive tests apart.
//!
//! Everything here fails loudly: a privileged test that cannot do its work panics with a message
//! saying why, it never skips.

#![allow(dead_code)]

pub mod precision;
pub mod prometheus;
pub mod test_lab;
pub mod unishape;

// Not every module of the test binary uses the lab by this name.
#[allow(unused_imports)]
pub use test_lab::TestLab;

use std::collections::{BTreeSet, HashMap};
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::Value;

use scanprof::analysis::Summary;

/// The scanprof binary cargo built for these tests.
pub fn scanprof_bin() -> &'static str {
    env!("CARGO_BIN_EXE_scanprof")
}

/// The binary's canonical path: what /proc/PID/exe (and so `processes[].exe`) names.
pub fn scanprof_exe() -> String {
    std::fs::canonicalize(scanprof_bin())
        .unwrap_or_else(|e| panic!("cannot resolve {}: {e}", scanprof_bin()))
        .display()
        .to_string()
}

/// Fails the test unless it runs as root: these tests load BPF programs and build network
/// namespaces. CI runs them as root, so this is a failure there, never a skip. Private: a test
/// starts with [`privileged`], which also checks at its end that scanprof released its programs.
fn require_root() {
    if !nix::unistd::geteuid().is_root() {
        panic!(
            "the privileged tests need root (they load BPF programs and create network \
             namespaces); CI runs them as root. Run: sudo -E cargo test --test it"
        );
    }
}

/// Fails unless the scanner `name` is installed (scripts/setup installs masscan, zmap, nmap and
/// hping3): the tests that run one never skip.
pub fn require_scanner(name: &str) {
    let found = ["/usr/bin", "/usr/sbin", "/bin", "/sbin"]
        .iter()
        .any(|d| std::path::Path::new(d).join(name).exists());
    assert!(
        found,
        "{name} is not installed: run scripts/setup (it installs masscan zmap nmap hping3)"
    );
}

/// A wait of `d`, stretched by SCANPROF_TEST_PATIENCE (a factor, at least 1; default 1):
/// scripts/kernel-matrix runs tests in emulated VMs (QEMU TCG), several times slower than this
/// machine. It stretches how long a test waits for a process or a line, never a measured figure.
pub fn patience(d: Duration) -> Duration {
    let factor = std::env::var("SCANPROF_TEST_PATIENCE")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|f| f.is_finite() && *f >= 1.0)
        .unwrap_or(1.0);
    d.mul_f64(factor)
}

static SERIAL: Mutex<()> = Mutex::new(());

/// Serializes the tests of one binary: they measure rates on a small machine, BPF tracepoints
/// are global, and the check that no scanprof program remains loaded is only meaningful while no
/// other test of this process runs scanprof. A panicking holder does not poison it for the rest.
/// Private, as [`require_root`] is: tests take it through [`privileged`].
fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What every privileged test starts with: root (it fails, never skips, without it), one such
/// test at a time in this binary, and the scanprof BPF programs loaded before it, so that its
/// end can check that scanprof released its own ([`Privileged::assert_released`]).
pub struct Privileged {
    _serial: MutexGuard<'static, ()>,
    bpf: BpfBaseline,
}

/// Starts a privileged test (see [`Privileged`]).
pub fn privileged() -> Privileged {
    require_root();
    let serial = serial();
    Privileged {
        _serial: serial,
        bpf: BpfBaseline::take(),
    }
}

impl Privileged {
    /// Asserts that every scanprof program loaded since the test started is gone again.
    #[track_caller]
    pub fn assert_released(&self, after: &str) {
        self.bpf.assert_released(after);
    }
}

/// CLOCK_MONOTONIC in ns: the clock of the lab sink's timestamps and of the BPF side.
pub fn monotonic_ns() -> u64 {
    scanprof::system::monotonic_ns()
}

/// |got - want| / want
pub fn rel_err(got: f64, want: f64) -> f64 {
    (got - want).abs() / want.abs()
}

/// Asserts that `got` is within `tol` (a fraction, 0.01 = 1%) of `want`.
#[track_caller]
pub fn assert_within(what: &str, got: f64, want: f64, tol: f64) {
    let err = rel_err(got, want);
    assert!(
        err <= tol,
        "{what}: {got:.3} is {:.3}% off {want:.3} (allowed {:.2}%)",
        err * 100.0,
        tol * 100.0
    );
}

/// `ip netns exec NS argv...` as an argument vector (for `scanprof run -- ...`).
pub fn in_netns(ns: &str, argv: &[String]) -> Vec<String> {
    let mut v: Vec<String> = vec!["ip".into(), "netns".into(), "exec".into(), ns.into()];
    v.extend(argv.iter().cloned());
    v
}

/// The reference sender: `scanprof send --to ADDR:PORT --rate R --count N --duration D --json`,
/// bounded in count and in time, plus `extra` flags.
pub fn sender_argv(to: &str, rate: f64, count: u64, duration_s: f64, extra: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = vec![
        scanprof_bin().into(),
        "send".into(),
        "--to".into(),
        to.into(),
        "--rate".into(),
        rate.to_string(),
        "--count".into(),
        count.to_string(),
        "--duration".into(),
        duration_s.to_string(),
        "--json".into(),
    ];
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

/// The tolerance of a comparison of rates timed on different clocks (scanprof's BPF clock, the
/// lab receiver's receive timestamps, the sender's own clock, this test's polls): `tol` on a
/// machine, at least 5% in an emulated VM (`SCANPROF_TEST_EMULATED=1`, set by
/// scripts/kernel-matrix). There, under host load, the guest's clocks disagree by about 1% (one
/// 6.1 guest timed the same 16,000 packets at 2042.6 pps by the sender's clock, 2036.6 by the
/// receiver's and 2014.7 by scanprof's), and a window a test reads from its own polls slips by
/// tens of ms against scanprof's ticks (a blocked sender's steady rate: 235.7 pps over ticks,
/// 226.7 over the polls, in a 6.12 guest). Counts are compared exactly everywhere.
pub fn cross_clock(tol: f64) -> f64 {
    if std::env::var_os("SCANPROF_TEST_EMULATED").is_some_and(|v| v == "1") {
        tol.max(0.05)
    } else {
        tol
    }
}

/// The integer `key` of a JSON object, or a panic that shows the object.
pub fn u64_of(v: &Value, key: &str) -> u64 {
    v[key]
        .as_u64()
        .unwrap_or_else(|| panic!("no integer `{key}` in {v}"))
}

/// The number `key` of a JSON object, or a panic that shows the object.
pub fn f64_of(v: &Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("no number `{key}` in {v}"))
}

/// Quotes `s` for /bin/sh.
pub fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

pub fn sh_join(argv: &[String]) -> String {
    argv.iter().map(|a| sh_quote(a)).collect::<Vec<_>>().join(" ")
}

/// Lines a reader thread has read so far, and whether it reached end of file.
struct Pipe {
    lines: Receiver<String>,
    eof: bool,
}

impl Pipe {
    fn start(reader: impl Read + Send + 'static, name: String) -> Pipe {
        let (tx, lines) = mpsc::channel();
        std::thread::Builder::new()
            .name(name)
            .spawn(move || {
                for line in BufReader::new(reader).lines() {
                    match line {
                        Ok(l) => {
                            if tx.send(l).is_err() {
                                return;
                            }
                        }
                        Err(_) => return,
                    }
                }
            })
            .expect("cannot start a pipe reader thread");
        Pipe { lines, eof: false }
    }

    /// The next line, None at end of file; Err on timeout.
    fn next(&mut self, timeout: Duration) -> Result<Option<String>, ()> {
        if self.eof {
            return Ok(None);
        }
        match self.lines.recv_timeout(timeout) {
            Ok(l) => Ok(Some(l)),
            Err(RecvTimeoutError::Disconnected) => {
                self.eof = true;
                Ok(None)
            }
            Err(RecvTimeoutError::Timeout) => Err(()),
        }
    }

    /// Everything until end of file, waiting at most `patience` (a grandchild may hold the pipe).
    fn drain(&mut self, patience: Duration, into: &mut Vec<String>) {
        let deadline = Instant::now() + patience;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.next(left.max(Duration::from_millis(1))) {
                Ok(Some(l)) => into.push(l),
                Ok(None) | Err(()) => return,
            }
            if Instant::now() >= deadline {
                return;
            }
        }
    }
}

/// A process this test started, with its stdout and stderr read on threads. Dropping it ends
/// the process if it still runs (SIGTERM to its pid, SIGKILL after 3 s) and reaps it, so a
/// failing test leaves nothing behind. Only this pid is ever signalled.
pub struct Proc {
    pub name: String,
    child: Option<Child>,
    stdin: Option<ChildStdin>,
    stdout: Pipe,
    stderr: Pipe,
    /// stdout lines read so far
    pub lines: Vec<String>,
    stderr_lines: Vec<String>,
}

impl Proc {
    /// Starts `cmd` with stdout and stderr captured; stdin is a pipe if `stdin` is set, else null.
    pub fn spawn(name: &str, mut cmd: Command, stdin: bool) -> Proc {
        // The tests' safety net: `scanprof send` anywhere below sends only to loopback and the
        // labs (a user's scanprof sends where its user names).
        cmd.env("SCANPROF_SEND_LOCAL_ONLY", "1");
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).stdin(if stdin {
            Stdio::piped()
        } else {
            Stdio::null()
        });
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name} ({cmd:?}): {e}"));
        let stdout = Pipe::start(child.stdout.take().unwrap(), format!("{name}-stdout"));
        let stderr = Pipe::start(child.stderr.take().unwrap(), format!("{name}-stderr"));
        Proc {
            name: name.to_string(),
            stdin: child.stdin.take(),
            child: Some(child),
            stdout,
            stderr,
            lines: Vec::new(),
            stderr_lines: Vec::new(),
        }
    }

    /// `scanprof ARGS...`
    pub fn scanprof(args: &[String]) -> Proc {
        let mut cmd = Command::new(scanprof_bin());
        cmd.args(args);
        Proc::spawn(
            &format!("scanprof {}", args.first().map_or("", |s| s)),
            cmd,
            false,
        )
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("process already reaped").id()
    }

    pub fn write_stdin(&mut self, text: &str) {
        let stdin = self.stdin.as_mut().expect("stdin was not piped");
        stdin
            .write_all(text.as_bytes())
            .and_then(|()| stdin.flush())
            .unwrap_or_else(|e| panic!("cannot write to {}'s stdin: {e}", self.name));
    }

    /// Sends `sig` to this process (by its pid) if it has not been reaped.
    pub fn signal(&mut self, sig: Signal) {
        if let Some(child) = self.child.as_mut() {
            if matches!(child.try_wait(), Ok(None)) {
                let _ = kill(Pid::from_raw(child.id() as i32), sig);
            }
        }
    }

    pub fn running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// Reads stdout until a line satisfies `pred` and returns it; panics (with what was seen) on
    /// end of file or after `timeout`.
    pub fn wait_for_line(&mut self, what: &str, timeout: Duration, pred: impl Fn(&str) -> bool) -> String {
        let timeout = patience(timeout);
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.stdout.next(left.max(Duration::from_millis(1))) {
                Ok(Some(line)) => {
                    self.lines.push(line.clone());
                    if pred(&line) {
                        return line;
                    }
                }
                Ok(None) => {
                    let context = self.context_now();
                    panic!("{} ended its output before {what}\n{context}", self.name)
                }
                Err(()) => {
                    let context = self.context_now();
                    panic!("{} printed no {what} within {timeout:?}\n{context}", self.name)
                }
            }
        }
    }

    /// Reads stdout until the NDJSON object of type `kind` and returns it.
    pub fn wait_for_json(&mut self, kind: &str, timeout: Duration) -> Value {
        let line = self.wait_for_line(&format!("`{kind}` line"), timeout, |l| {
            json_type(l).as_deref() == Some(kind)
        });
        serde_json::from_str(&line).unwrap()
    }

    /// Waits for the process to exit (calling `each_poll` every ~5 ms meanwhile), then collects
    /// the rest of its output. Panics, ending the process, if it runs longer than `timeout`.
    pub fn finish_polling(mut self, timeout: Duration, mut each_poll: impl FnMut()) -> Finished {
        let timeout = patience(timeout);
        let deadline = Instant::now() + timeout;
        let status = loop {
            let child = self.child.as_mut().unwrap();
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) => {}
                Err(e) => panic!("cannot wait for {}: {e}", self.name),
            }
            if Instant::now() > deadline {
                // Drop ends it; say what it printed and where each of its threads waits.
                let context = self.context_now();
                let stuck = where_it_waits(self.pid());
                panic!(
                    "{} still ran after {timeout:?}; ended it\n{stuck}{context}",
                    self.name
                );
            }
            each_poll();
            // Keep the pipes flowing so the child never blocks on a full pipe.
            while let Ok(Some(l)) = self.stdout.next(Duration::from_millis(0)) {
                self.lines.push(l);
            }
            while let Ok(Some(l)) = self.stderr.next(Duration::from_millis(0)) {
                self.stderr_lines.push(l);
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        let pid = self.child.take().unwrap().id();
        self.stdout.drain(Duration::from_secs(2), &mut self.lines);
        self.stderr.drain(Duration::from_secs(2), &mut self.stderr_lines);
        Finished {
            name: self.name.clone(),
            pid,
            status,
            lines: std::mem::take(&mut self.lines),
            stderr: self.stderr_lines.join("\n"),
            stderr_lines: std::mem::take(&mut self.stderr_lines),
        }
    }

    pub fn finish(self, timeout: Duration) -> Finished {
        self.finish_polling(timeout, || {})
    }

    /// Ends an independent tracer (bpftrace) whose result is what it prints at exit (its maps),
    /// and returns that output: SIGINT, then SIGTERM every second until it exits or `timeout`
    /// (stretched by `patience`) passes, when it panics as `finish` does.
    ///
    /// One signal is not enough. bpftrace's handler only sets a flag, and its poll loop (0.17,
    /// Debian 12's) reads the flag only when the signal interrupts `epoll_wait`: one that lands
    /// while it attaches, or between two of its 100 ms waits (a CPU hog keeps it runnable there
    /// for milliseconds), is lost, and it polls on for ever in `do_epoll_wait` (stop 36's CI
    /// on 6.12, and a run beside the hog, 2026-11-29). SIGTERM, not SIGINT, is what is sent
    /// again: bpftrace sets SIGINT back to its default (exit without printing) once it prints
    /// its maps, and keeps its handler for SIGTERM.
    pub fn interrupt_tracer(mut self, timeout: Duration) -> Finished {
        self.signal(Signal::SIGINT);
        // `finish_polling` polls only while the child is unreaped, so its pid is still its own.
        let pid = Pid::from_raw(self.pid() as i32);
        let mut next = Instant::now() + Duration::from_secs(1);
        self.finish_polling(timeout, || {
            if Instant::now() >= next {
                let _ = kill(pid, Signal::SIGTERM);
                next += Duration::from_secs(1);
            }
        })
    }

    /// For a helper whose output the test has already read (an independent counter such as
    /// bpftrace): sends `sig` and gives it `grace` (stretched by `patience`) to exit. Returns
    /// whether it did; if not, says on stderr where each of its threads waits, and ends it (Drop).
    /// How fast a helper tears down is not what a test measures, so this does not fail it.
    pub fn stop(mut self, sig: Signal, grace: Duration) -> bool {
        self.signal(sig);
        let deadline = Instant::now() + patience(grace);
        while Instant::now() < deadline {
            if !self.running() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!(
            "{} still ran {:?} after {sig}; ending it\n{}",
            self.name,
            patience(grace),
            where_it_waits(self.pid())
        );
        false
    }

    fn context_now(&mut self) -> String {
        while let Ok(Some(l)) = self.stderr.next(Duration::from_millis(20)) {
            self.stderr_lines.push(l);
        }
        format!(
            "--- stdout (last lines) ---\n{}\n--- stderr ---\n{}",
            tail(&self.lines, 5),
            self.stderr_lines.join("\n")
        )
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        scanprof::system::child::end_child(&mut child, Signal::SIGTERM, Duration::from_secs(3));
    }
}

/// Each thread of `pid`: its name, state, the kernel function it sleeps in and its kernel stack
/// (root reads it), so a test whose child hangs says where: in the child's own code (state R or
/// a user-space wait) or in the kernel (and in which call).
fn where_it_waits(pid: u32) -> String {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return format!("--- pid {pid}: gone before its threads could be read ---\n");
    };
    let mut out = format!("--- where pid {pid} waits ---\n");
    for task in tasks.flatten() {
        let dir = task.path();
        let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap_or_default();
        let state = read("status")
            .lines()
            .find_map(|l| l.strip_prefix("State:").map(|s| s.trim().to_string()))
            .unwrap_or_default();
        out += &format!(
            "thread {} ({}): {state}, wchan {}\n",
            task.file_name().to_string_lossy(),
            read("comm").trim(),
            read("wchan").trim()
        );
        for frame in read("stack").lines().take(12) {
            out += &format!("    {frame}\n");
        }
    }
    out
}

fn tail(lines: &[String], n: usize) -> String {
    lines[lines.len().saturating_sub(n)..]
        .iter()
        .map(|l| {
            if l.len() > 600 {
                format!("{}...", &l[..600])
            } else {
                l.clone()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The `type` field of an NDJSON line, if the line is a JSON object that has one.
pub fn json_type(line: &str) -> Option<String> {
    let v: Value = serde_json::from_str(line).ok()?;
    v.get("type")?.as_str().map(String::from)
}

/// Parses NDJSON output: the JSON objects in order, and the lines that are not JSON (output of
/// the profiled command, which shares scanprof's stdout).
pub fn parse_ndjson(lines: &[String]) -> (Vec<Value>, Vec<String>) {
    let mut objects = Vec::new();
    let mut text = Vec::new();
    for line in lines {
        match serde_json::from_str::<Value>(line) {
            Ok(v) if v.is_object() => objects.push(v),
            _ => text.push(line.clone()),
        }
    }
    (objects, text)
}

/// A process that has exited, with everything it printed.
pub struct Finished {
    pub name: String,
    pub pid: u32,
    pub status: ExitStatus,
    /// stdout, by line
    pub lines: Vec<String>,
    pub stderr_lines: Vec<String>,
    /// stderr, whole
    pub stderr: String,
}

impl Finished {
    /// What to print when an assertion about this run fails.
    pub fn context(&self) -> String {
        format!(
            "{} exited with {}\n--- stdout (last lines) ---\n{}\n--- stderr ---\n{}",
            self.name,
            self.status,
            tail(&self.lines, 4),
            self.stderr
        )
    }

    #[track_caller]
    pub fn assert_success(&self) {
        assert!(self.status.success(), "{}", self.context());
    }

    pub fn objects(&self) -> Vec<Value> {
        parse_ndjson(&self.lines).0
    }

    /// stdout lines that are not JSON
    pub fn text(&self) -> Vec<String> {
        parse_ndjson(&self.lines).1
    }

    /// scanprof's NDJSON objects of type `kind`
    pub fn of_type(&self, kind: &str) -> Vec<Value> {
        self.objects()
            .into_iter()
            .filter(|v| v.get("type").and_then(Value::as_str) == Some(kind))
            .collect()
    }

    /// The one `summary` object.
    #[track_caller]
    pub fn summary_json(&self) -> Value {
        let mut s = self.of_type("summary");
        assert_eq!(
            s.len(),
            1,
            "expected exactly one summary line\n{}",
            self.context()
        );
        s.pop().unwrap()
    }

    /// The summary, parsed into the product's own type: every field present and well typed.
    #[track_caller]
    pub fn summary(&self) -> Summary {
        let v = self.summary_json();
        serde_json::from_value(v).unwrap_or_else(|e| {
            panic!(
                "the summary line is incomplete or malformed: {e}\n{}",
                self.context()
            )
        })
    }

    #[track_caller]
    pub fn started(&self) -> Value {
        let mut s = self.of_type("started");
        assert_eq!(
            s.len(),
            1,
            "expected exactly one started line\n{}",
            self.context()
        );
        s.pop().unwrap()
    }

    /// The reference sender's own JSON reports (`scanprof send --json`: objects with `sent`),
    /// on stdout or stderr.
    pub fn sender_reports(&self) -> Vec<Value> {
        self.objects()
            .into_iter()
            .chain(parse_ndjson(&self.stderr_lines).0)
            .filter(|v| v.get("type").is_none() && v.get("sent").is_some())
            .collect()
    }

    /// The single sender report.
    #[track_caller]
    pub fn sender_report(&self) -> Value {
        let mut r = self.sender_reports();
        assert_eq!(
            r.len(),
            1,
            "expected one report of the sender\n{}",
            self.context()
        );
        r.pop().unwrap()
    }

    /// The value of a `key=value` line the profiled shell printed (on stdout or stderr).
    #[track_caller]
    pub fn shell_var(&self, key: &str) -> u32 {
        shell_var(&self.lines, key)
            .or_else(|| shell_var(&self.stderr_lines, key))
            .unwrap_or_else(|| panic!("no `{key}=` line\n{}", self.context()))
    }
}

/// The value of the first `key=NUMBER` line.
pub fn shell_var(lines: &[String], key: &str) -> Option<u32> {
    let prefix = format!("{key}=");
    lines
        .iter()
        .find_map(|l| l.strip_prefix(&prefix)?.trim().parse().ok())
}

/// Fails unless every probe in a `started` line attached: these tests need the whole set.
#[track_caller]
pub fn assert_all_probes_attached(started: &Value) {
    let probes = started["probes"].as_array().expect("started line without probes");
    assert!(!probes.is_empty(), "no probes in {started}");
    // On a kernel older than 5.15 (5.10 in the kernel matrix) a program whose tracepoint or
    // helper the kernel lacks is not loaded, and says so ("kernel R has no X, so P is not
    // loaded"): that is the degraded output, checked here instead. From 5.15 on nothing a
    // program needs is missing, so there any unattached program fails.
    let old_kernel = kernel_version().is_some_and(|v| v < (5, 15));
    let lacks = |p: &Value| {
        let name = p["name"].as_str().unwrap_or_default();
        let error = p["error"].as_str().unwrap_or_default();
        old_kernel
            && error.starts_with("kernel ")
            && error.contains(" has no ")
            && error.contains(&format!(", so {name} is not loaded; missing without it: "))
    };
    // Which syscall hooks the run used (SCANPROF_SYSCALL_HOOKS changes the default): in the log
    // of every privileged test, so a run under the per-call hooks shows that it was one.
    let syscall_programs: Vec<&str> = probes
        .iter()
        .filter(|p| p["attached"] == Value::Bool(true))
        .filter_map(|p| p["name"].as_str())
        .filter(|n| n.starts_with("send_path.on_sys_") || n.starts_with("send_path.on_raw_"))
        .collect();
    eprintln!("syscall programs attached: {}", syscall_programs.join(", "));
    let missing: Vec<String> = probes
        .iter()
        .filter(|p| p["attached"] != Value::Bool(true) && !lacks(p))
        .map(|p| format!("{}: {}", p["name"], p["error"]))
        .collect();
    assert!(missing.is_empty(), "BPF probes failed to attach: {missing:?}");
}

/// The running kernel's (major, minor), from uname's release.
pub fn kernel_version() -> Option<(u32, u32)> {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").ok()?;
    let mut nums = release
        .trim()
        .split(|c: char| !c.is_ascii_digit())
        .map(|n| n.parse().ok());
    Some((nums.next()??, nums.next()??))
}

/// The pid of the root process of a `started` line (the launched command or the -p pid).
pub fn root_pid(started: &Value) -> u32 {
    let roots: Vec<u32> = started["processes"]
        .as_array()
        .expect("started line without processes")
        .iter()
        .filter(|p| p["root"] == Value::Bool(true))
        .map(|p| p["pid"].as_u64().unwrap() as u32)
        .collect();
    assert_eq!(roots.len(), 1, "expected one root process in {started}");
    roots[0]
}

/// Field 22 of /proc/PID/stat (start time in clock ticks): with the pid, identifies a process.
pub fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // comm may contain spaces: the fields after it follow the last ')'.
    let after = &stat[stat.rfind(')')? + 2..];
    after.split_whitespace().nth(19)?.parse().ok()
}

/// Whether the process (pid, start time) still exists (a zombie counts as existing).
pub fn process_exists(pid: u32, started_at: u64) -> bool {
    start_time(pid) == Some(started_at)
}

/// BPF programs currently loaded whose name marks them as scanprof's (`on_*`: on_sys_enter,
/// on_kfree_skb, ...), as (id, name), from `bpftool -j prog show`.
pub fn scanprof_programs() -> Vec<(u64, String)> {
    let out = Command::new("bpftool")
        .args(["-j", "prog", "show"])
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run bpftool (needed to check that no BPF program is left loaded): {e}")
        });
    assert!(out.status.success(), "bpftool -j prog show failed: {out:?}");
    let progs: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "bpftool printed no JSON: {e}: {}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    progs
        .as_array()
        .expect("bpftool's prog list is not an array")
        .iter()
        .filter_map(|p| {
            let name = p.get("name")?.as_str()?;
            name.starts_with("on_")
                .then(|| (p.get("id").and_then(Value::as_u64).unwrap_or(0), name.to_string()))
        })
        .collect()
}

/// For each BPF program id, the pids holding a file descriptor to it (the program itself or a
/// link attaching it), from /proc/*/fd and /proc/*/fdinfo.
pub fn bpf_prog_holders() -> HashMap<u64, Vec<u32>> {
    let mut holders: HashMap<u64, Vec<u32>> = HashMap::new();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return holders;
    };
    for entry in procs.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(entry.path().join("fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            let is_bpf = std::fs::read_link(fd.path())
                .is_ok_and(|t| t.to_string_lossy().starts_with("anon_inode:bpf"));
            if !is_bpf {
                continue;
            }
            let info = entry.path().join("fdinfo").join(fd.file_name());
            let prog_id = std::fs::read_to_string(info).ok().and_then(|text| {
                text.lines()
                    .find_map(|l| l.strip_prefix("prog_id:")?.trim().parse::<u64>().ok())
            });
            if let Some(id) = prog_id {
                holders.entry(id).or_default().push(pid);
            }
        }
    }
    holders
}

/// Whether `pid` is this test process or one of its descendants.
pub fn is_ours(pid: u32) -> bool {
    let me = std::process::id();
    let mut p = pid;
    for _ in 0..64 {
        if p == me {
            return true;
        }
        match parent_of(p) {
            Some(pp) if pp > 0 => p = pp,
            _ => return false,
        }
    }
    false
}

fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 2..]
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// The scanprof programs loaded when a test began. Programs loaded later must be gone once the
/// test's scanprof processes are, unless a process outside this test holds them: the machine
/// may run someone else's scanprof meanwhile (a benchmark, a lab), whose programs carry the same
/// names. (Program ids only grow, so ids in the baseline are never this test's.)
pub struct BpfBaseline {
    before: BTreeSet<u64>,
}

impl BpfBaseline {
    pub fn take() -> BpfBaseline {
        BpfBaseline {
            before: scanprof_programs().into_iter().map(|(id, _)| id).collect(),
        }
    }

    /// Asserts that no scanprof program loaded since the baseline is still loaded, other than
    /// programs held only by processes outside this test; waits up to 3 s for the kernel to
    /// release them after the last scanprof process exited.
    #[track_caller]
    pub fn assert_released(&self, after: &str) {
        let deadline = Instant::now() + Duration::from_secs(3);
        loop {
            let new: Vec<(u64, String)> = scanprof_programs()
                .into_iter()
                .filter(|(id, _)| !self.before.contains(id))
                .collect();
            let holders = if new.is_empty() {
                HashMap::new()
            } else {
                bpf_prog_holders()
            };
            let left: Vec<(u64, String, Vec<u32>)> = new
                .into_iter()
                .map(|(id, name)| (id, name, holders.get(&id).cloned().unwrap_or_default()))
                // Held by nobody (leaked) or by a process of this test: ours, and still loaded.
                .filter(|(_, _, pids)| pids.is_empty() || pids.iter().any(|p| is_ours(*p)))
                .collect();
            if left.is_empty() {
                return;
            }
            if Instant::now() > deadline {
                panic!(
                    "scanprof BPF programs are still loaded after {after} (id, name, holding pids): {left:?}"
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// The inode of the network namespace `ip netns` calls `name` (what drop rows call `netns`).
pub fn netns_inode(name: &str) -> u32 {
    use std::os::unix::fs::MetadataExt;
    let path = format!("/run/netns/{name}");
    let ino = std::fs::metadata(&path)
        .unwrap_or_else(|e| panic!("cannot stat {path}: {e}"))
        .ino();
    u32::try_from(ino).unwrap_or_else(|_| panic!("netns inode {ino} does not fit u32"))
}

/// Asserts that none of `names` (a lab's namespaces) is among this process's leftover labs.
#[track_caller]
pub fn assert_namespaces_gone(names: &[String]) {
    let left = scanprof::netlab::leftover_namespaces();
    let ours: Vec<&String> = left.iter().filter(|n| names.contains(n)).collect();
    assert!(ours.is_empty(), "lab namespaces left behind: {ours:?}");
}

/// Packets per second between times `from_ns` and `to_ns` from (time, count) samples: the
/// first sample at or after `from_ns` and the last at or before `to_ns`.
pub fn rate_between(samples: &[(u64, u64)], from_ns: u64, to_ns: u64) -> Option<f64> {
    let a = samples.iter().find(|(t, _)| *t >= from_ns)?;
    let b = samples.iter().rev().find(|(t, _)| *t <= to_ns)?;
    (b.0 > a.0).then(|| (b.1 - a.1) as f64 * 1e9 / (b.0 - a.0) as f64)
}

/// The number of the kfree_skb drop reason `name` on the running kernel, from the tracepoint's
/// format file (reason numbers differ between kernels).
pub fn drop_reason_number(name: &str) -> u32 {
    let format = kfree_skb_format();
    let needle = format!("\"{name}\" }}");
    let at = format
        .find(&needle)
        .unwrap_or_else(|| panic!("drop reason {name} not in the kfree_skb format"));
    let open = format[..at].rfind('{').unwrap();
    format[open + 1..at]
        .trim()
        .trim_end_matches(',')
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("cannot parse the number of {name}: {e}"))
}

/// The kfree_skb tracepoint's format, from tracefs.
fn kfree_skb_format() -> String {
    let paths = [
        "/sys/kernel/tracing/events/skb/kfree_skb/format",
        "/sys/kernel/debug/tracing/events/skb/kfree_skb/format",
    ];
    paths
        .iter()
        .find_map(|p| std::fs::read_to_string(p).ok())
        .unwrap_or_else(|| {
            panic!("cannot read the kfree_skb tracepoint format (is tracefs mounted?): {paths:?}")
        })
}

/// Whether the kernel's kfree_skb passes a drop reason (5.17 and later), read from the
/// tracepoint's own format in tracefs: not from scanprof, whose detection it checks. Without
/// one, drops are counted by location only (`NOT_SPECIFIED`) and a closed port's `NO_SOCKET` is
/// not told from a loss: the tests assert that degraded output (and that scanprof says so).
pub fn kernel_has_drop_reasons() -> bool {
    // 5.17's `field:enum skb_drop_reason reason;`; 5.10 has skbaddr, location, protocol only.
    kfree_skb_format().contains(" reason;")
}

/// A probe's drop at a closed UDP port as this kernel shows it: `NO_SOCKET`, an expected drop;
/// without drop reasons (before 5.17), `NOT_SPECIFIED` at `__udp4_lib_rcv`, which scanprof cannot
/// tell from a loss and so classes as the sender's (`assert_closed_port_not_judged`).
pub fn is_closed_port_drop(d: &scanprof::analysis::DropRow, reasons: bool) -> bool {
    use scanprof::collect::DropClass;
    if reasons {
        d.class == DropClass::Expected && d.reason == "NO_SOCKET"
    } else {
        d.class == DropClass::TargetLoss
            && d.reason == "NOT_SPECIFIED"
            && d.location.starts_with("__udp4_lib_rcv")
    }
}

/// A kernel without drop reasons: the run says it lacks them (`kernel_lacks`, a warning), names
/// the `dropped` packets it cannot judge in a `not_judged_here` verdict, and calls none of them a
/// `target_drop` (a loss it cannot know).
pub fn assert_closed_port_not_judged(s: &scanprof::analysis::Summary, dropped: u64) {
    use scanprof::analysis::kernel::KernelLack;
    use scanprof::analysis::verdict::Cause;
    assert!(
        s.kernel_lacks.contains(&KernelLack::DropReasons),
        "{:?}",
        s.kernel_lacks
    );
    assert!(
        s.warnings
            .iter()
            .any(|w| w.starts_with("this kernel has no drop reasons")
                && w.contains("cannot be judged on this kernel")),
        "{:?}",
        s.warnings
    );
    let n = s
        .verdicts
        .iter()
        .find(|v| v.cause == Cause::NotJudgedHere && v.sentence.contains("closed port"))
        .unwrap_or_else(|| panic!("no not_judged_here verdict for the drops: {:#?}", s.verdicts));
    // Those drops, and any reply of the family's dropped with no reason (an ICMP error).
    let counted: u64 = n
        .sentence
        .split(' ')
        .next()
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    assert!(counted >= dropped, "{dropped} drops, {}", n.sentence);
    assert!(
        n.evidence
            .iter()
            .any(|e| e.contains("at __udp4_lib_rcv") && e.ends_with("(target_loss)")),
        "{:?}",
        n.evidence
    );
    assert!(
        s.verdicts
            .iter()
            .all(|v| v.cause != Cause::TargetDrop && v.cause != Cause::NoGap),
        "{:#?}",
        s.verdicts
    );
}

/// Network namespaces with `lo` up, deleted when dropped.
pub struct Namespaces(Vec<String>);

impl Namespaces {
    pub fn new(names: &[String]) -> Namespaces {
        let mut made = Namespaces(Vec::new());
        for n in names {
            run_ok(&["ip", "netns", "add", n]);
            made.0.push(n.clone());
            run_ok(&["ip", "-n", n, "link", "set", "lo", "up"]);
        }
        made
    }

    /// Deletes the namespaces now and asserts that none is left (`ip netns` keeps each as
    /// /run/netns/NAME); a test that fails before this still deletes them, on drop.
    #[track_caller]
    pub fn destroy(mut self) {
        let names = std::mem::take(&mut self.0);
        for n in &names {
            run_ok(&["ip", "netns", "del", n]);
        }
        let left: Vec<&String> = names
            .iter()
            .filter(|n| std::path::Path::new("/run/netns").join(n).exists())
            .collect();
        assert!(left.is_empty(), "namespaces left behind: {left:?}");
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for n in &self.0 {
            let _ = Command::new("ip").args(["netns", "del", n]).status();
        }
    }
}

/// Runs argv, panicking when it cannot start or fails.
pub fn run_ok(argv: &[&str]) {
    let ok = Command::new(argv[0])
        .args(&argv[1..])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "{argv:?} failed");
}

/// The kernel text symbol containing `addr` as "name+0xoff" (what ksym/%pS print), from
/// /proc/kallsyms.
pub fn kallsyms_resolve(addr: u64) -> Option<String> {
    let text = std::fs::read_to_string("/proc/kallsyms").ok()?;
    let mut best: Option<(u64, &str)> = None;
    for line in text.lines() {
        let mut f = line.split_whitespace();
        let (Some(a), Some(kind), Some(name)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        if !matches!(kind, "t" | "T") {
            continue;
        }
        let Ok(a) = u64::from_str_radix(a, 16) else {
            continue;
        };
        if a <= addr && best.is_none_or(|(b, _)| a > b) {
            best = Some((a, name));
        }
    }
    let (a, name) = best?;
    (a != 0).then(|| format!("{name}+{:#x}", addr - a))
}

/// The function part of a "function+0xoffset" location.
pub fn function_of(location: &str) -> &str {
    location.split('+').next().unwrap_or(location)
}

/// A UDP receiver on `port` in the lab's target namespace.
pub fn lab_sink(lab: &scanprof::netlab::Lab, port: u16) -> scanprof::netlab::UdpSink {
    lab.udp_sink(port)
        .unwrap_or_else(|e| panic!("cannot start the lab receiver: {e:#}"))
}

/// Stops a lab receiver once what is in flight has arrived. Every datagram carried the kernel's
/// receive timestamp, so the receiver's rate does not depend on when its thread ran.
pub fn stop_sink(sink: scanprof::netlab::UdpSink) -> scanprof::netlab::SinkReport {
    std::thread::sleep(Duration::from_millis(100));
    let report = sink.stop();
    assert_eq!(
        report.untimed, 0,
        "datagrams without a kernel timestamp: {report:?}"
    );
    report
}

/// The harness's own behaviour, driven by stand-ins for the tools it runs.
mod harness {
    use super::Proc;
    use std::process::Command;
    use std::time::Duration;

    /// A stand-in for bpftrace 0.17 that lost its SIGINT (one that landed between two of its
    /// waits): it ignores SIGINT and, on SIGTERM, prints its map and exits. One SIGINT and a
    /// wait, what the tests did before, ends with "still ran after 10s".
    #[test]
    fn a_tracer_that_lost_its_exit_signal_is_sent_another_and_its_maps_are_kept() {
        let script = "trap '' INT; trap 'echo \"@n: 7\"; exit 0' TERM; \
                      echo 'Attaching 1 probe...'; while :; do sleep 0.05; done";
        let mut command = Command::new("sh");
        command.args(["-c", script]);
        let mut tracer = Proc::spawn("stand-in tracer", command, false);
        tracer.wait_for_line("`Attaching` line", Duration::from_secs(10), |l| {
            l.starts_with("Attaching")
        });
        let done = tracer.interrupt_tracer(Duration::from_secs(10));
        done.assert_success();
        assert_eq!(done.lines, ["Attaching 1 probe...", "@n: 7"]);
    }
}
