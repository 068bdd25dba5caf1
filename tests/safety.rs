//! Safe to run as root, and nothing lost or left behind whatever happens (issue 14): planted
//! symlinks, hostile bundles, signals, exit statuses, orphans and leftover namespaces. Tests that
//! load BPF or create namespaces need root and fail (never skip) without it; the hostile-bundle
//! tests need no privilege.

mod common;

use std::fs;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A directory of this test's own under /tmp, removed when dropped (also on failure).
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let d = std::env::temp_dir().join(format!("scanprof-safety-{}-{tag}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        TempDir(d)
    }
    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// What a finished child did: exit status, its stderr, its peak resident memory.
struct Outcome {
    status: std::process::ExitStatus,
    stdout: String,
    stderr: String,
    /// peak RSS of the child, KiB (getrusage via wait4, for this child alone)
    max_rss_kib: i64,
}

/// Runs `cmd` with stdout and stderr in files, waits at most `timeout` (then SIGKILL to its
/// pid, and a panic), and reaps it with wait4 to read its own peak RSS.
fn run_bounded(mut cmd: Command, timeout: Duration, out_dir: &Path) -> Outcome {
    let (o, e) = (out_dir.join("stdout"), out_dir.join("stderr"));
    cmd.stdin(Stdio::null())
        .stdout(fs::File::create(&o).unwrap())
        .stderr(fs::File::create(&e).unwrap());
    let child = cmd.spawn().unwrap();
    let pid = child.id() as libc::pid_t;
    let deadline = Instant::now() + timeout;
    let mut status = 0;
    // SAFETY: rusage is plain old data; zeroed is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: wait4 on our own child's pid with valid out-pointers.
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        if r == pid {
            break;
        }
        assert!(r == 0, "wait4: {}", std::io::Error::last_os_error());
        if Instant::now() > deadline {
            // SAFETY: kill and waitpid on the pid of the child this function started.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            panic!(
                "{cmd:?} still ran after {timeout:?} (killed)\nstderr: {}",
                fs::read_to_string(&e).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Outcome {
        status: std::process::ExitStatus::from_raw(status),
        stdout: fs::read_to_string(&o).unwrap_or_default(),
        stderr: fs::read_to_string(&e).unwrap_or_default(),
        max_rss_kib: usage.ru_maxrss,
    }
}

fn report(path: &Path, format: &str, out: &Path) -> Outcome {
    let mut cmd = Command::new(common::scanprof_bin());
    cmd.args(["report", "--format", format]).arg(path);
    run_bounded(cmd, Duration::from_secs(20), out)
}

// ---- 4. hostile bundles for `scanprof report` ------------------------------------------------

/// events.ndjson linking to an endless device, or a FIFO nobody writes: a clear error at once
/// (exit 2), no hang, no growth.
#[test]
fn report_refuses_links_devices_and_fifos_quickly() {
    let t = TempDir::new("hostile");
    let out = t.path().join("out");
    fs::create_dir_all(&out).unwrap();
    let cases: [(&str, &str); 4] = [
        ("zero", "symbolic link"),
        ("urandom", "symbolic link"),
        ("fifo", "a FIFO"),
        ("device", "a character device"),
    ];
    for (case, says) in cases {
        let bundle = t.path().join(case);
        fs::create_dir_all(&bundle).unwrap();
        let events = bundle.join("events.ndjson");
        let arg = match case {
            "zero" => {
                std::os::unix::fs::symlink("/dev/zero", &events).unwrap();
                bundle.clone()
            }
            "urandom" => {
                std::os::unix::fs::symlink("/dev/urandom", &events).unwrap();
                bundle.clone()
            }
            "fifo" => {
                nix::unistd::mkfifo(&events, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
                bundle.clone()
            }
            _ => PathBuf::from("/dev/zero"),
        };
        for format in ["text", "md", "json"] {
            let started = Instant::now();
            let r = report(&arg, format, &out);
            assert_eq!(r.status.code(), Some(2), "{case} {format}: {}", r.stderr);
            assert!(r.stderr.contains(says), "{case} {format}: {}", r.stderr);
            assert!(r.stderr.contains("regular file"), "{case} {format}: {}", r.stderr);
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "{case}: {:?}",
                started.elapsed()
            );
            assert!(r.max_rss_kib < 64 << 10, "{case}: peak RSS {} KiB", r.max_rss_kib);
        }
    }
}

/// A file over the size cap is refused with the cap named; a large garbage file under it (one
/// 48 MiB line, then half a million short garbage lines) is read with bounded memory and a
/// bounded list of problems.
#[test]
fn report_memory_stays_bounded_on_large_garbage() {
    let t = TempDir::new("garbage");
    let out = t.path().join("out");
    fs::create_dir_all(&out).unwrap();

    let huge = t.path().join("huge");
    fs::create_dir_all(&huge).unwrap();
    let f = fs::File::create(huge.join("events.ndjson")).unwrap();
    f.set_len(300 << 20).unwrap(); // sparse: no disk used
    drop(f);
    let r = report(&huge, "text", &out);
    assert_eq!(r.status.code(), Some(2), "{}", r.stderr);
    assert!(r.stderr.contains("over the 256 MiB"), "{}", r.stderr);
    assert!(r.max_rss_kib < 64 << 10, "peak RSS {} KiB", r.max_rss_kib);

    let garbage = t.path().join("garbage");
    fs::create_dir_all(&garbage).unwrap();
    {
        use std::io::Write;
        let mut w = std::io::BufWriter::new(fs::File::create(garbage.join("events.ndjson")).unwrap());
        let block = vec![b'x'; 1 << 20];
        for _ in 0..48 {
            w.write_all(&block).unwrap();
        }
        w.write_all(b"\n").unwrap();
        // One real event, so the report goes on (exit 3: lines skipped).
        w.write_all(
            b"{\"type\":\"meta\",\"command_line\":[\"scanprof\"],\"version\":\"0\",\"started_at\":\"\",\"hostname\":\"h\",\"kernel\":\"k\"}\n",
        )
        .unwrap();
        for i in 0..500_000u32 {
            writeln!(w, "garbage line {i} {{not json").unwrap();
        }
    }
    for format in ["text", "md", "json"] {
        let r = report(&garbage, format, &out);
        // Nothing but a meta line is readable: every format says so alike (exit 2).
        assert_eq!(r.status.code(), Some(2), "{format}: {}", r.stderr);
        assert!(
            r.stderr.contains("neither a summary nor a tick"),
            "{format}: {}",
            r.stderr
        );
        assert!(
            r.max_rss_kib < 64 << 10,
            "{format}: peak RSS {} KiB",
            r.max_rss_kib
        );
    }
}

/// A bundle with only a meta line: the same exit status (2) and message in every format.
#[test]
fn a_meta_only_bundle_fails_alike_in_every_format() {
    let t = TempDir::new("meta-only");
    let out = t.path().join("out");
    fs::create_dir_all(&out).unwrap();
    let b = t.path().join("b");
    fs::create_dir_all(&b).unwrap();
    fs::write(
        b.join("events.ndjson"),
        "{\"type\":\"meta\",\"command_line\":[\"scanprof\"],\"version\":\"0\",\"started_at\":\"\",\"hostname\":\"h\",\"kernel\":\"k\"}\n",
    )
    .unwrap();
    for format in ["text", "md", "json"] {
        let r = report(&b, format, &out);
        assert_eq!(r.status.code(), Some(2), "{format}: {}", r.stderr);
        assert!(
            r.stderr.contains("neither a summary nor a tick"),
            "{format}: {}",
            r.stderr
        );
        assert!(r.stdout.is_empty(), "{format}: {}", r.stdout);
    }
}
