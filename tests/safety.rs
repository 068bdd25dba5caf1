//! Safe to run as root, and nothing lost or left behind whatever happens (issue 14): planted
//! symlinks, hostile bundles, signals, exit statuses, orphans and leftover namespaces. Tests that
//! load BPF or create namespaces need root and fail (never skip) without it; the hostile-bundle
//! tests need no privilege.

use crate::common;

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
    /// peak RSS of the child, KiB: its own from [`run_bounded_rss`]; from [`run_bounded`],
    /// wait4's figure, which also holds the test process's own peak at the spawn (below)
    max_rss_kib: i64,
}

/// Runs `cmd` with stdout and stderr in files, waits at most `timeout` (then SIGKILL to its
/// pid, and a panic), and reaps it with wait4 to read its own peak RSS.
fn run_bounded(mut cmd: Command, timeout: Duration, out_dir: &Path) -> Outcome {
    let (o, e) = (out_dir.join("stdout"), out_dir.join("stderr"));
    cmd.stdin(Stdio::null())
        .stdout(fs::File::create(&o).unwrap())
        .stderr(fs::File::create(&e).unwrap());
    // Reaped below by wait4 (which also gives its own peak RSS), not by Child::wait.
    #[allow(clippy::zombie_processes)]
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
            // Its own children first ([`run_bounded_rss`]'s GNU time has one), by their pids.
            let children = fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
            for c in children
                .split_whitespace()
                .filter_map(|c| c.parse::<libc::pid_t>().ok())
            {
                // SAFETY: kill of a child of the child this function started.
                unsafe { libc::kill(c, libc::SIGKILL) };
            }
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
    let outcome = Outcome {
        status: std::process::ExitStatus::from_raw(status),
        stdout: fs::read_to_string(&o).unwrap_or_default(),
        stderr: fs::read_to_string(&e).unwrap_or_default(),
        max_rss_kib: usage.ru_maxrss,
    };
    // The figures docs/testing.md's table of bad inputs quotes (with --nocapture).
    let words: Vec<String> = std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|a| a.to_string_lossy().chars().take(60).collect())
        .collect();
    eprintln!(
        "figures: `{}` -> {}, {:.2} s, peak RSS {} KiB; stderr: {}",
        words.join(" "),
        outcome.status,
        (timeout.saturating_sub(deadline.saturating_duration_since(Instant::now()))).as_secs_f64(),
        outcome.max_rss_kib,
        outcome
            .stderr
            .lines()
            .next()
            .unwrap_or("")
            .chars()
            .take(160)
            .collect::<String>()
    );
    outcome
}

/// [`run_bounded`] under GNU time (`/usr/bin/time -f %M`), for the child's own peak RSS. wait4's
/// ru_maxrss of a child this process spawns is at least this process's own peak at the spawn:
/// std spawns with vfork, and exec records the peak of the memory the child leaves, this
/// process's, in the child's maxrss. In one test binary (issue 29), whose process grows with
/// every module's tests, a `scanprof report` that refused its input at once "peaked" at
/// 184,664 KiB, this process's figure. GNU time starts small and forks the command: its figure
/// is the command's own.
fn run_bounded_rss(cmd: Command, timeout: Duration, out_dir: &Path) -> Outcome {
    let time = Path::new("/usr/bin/time");
    assert!(
        time.is_file(),
        "{} missing: apt-get install time (scripts/setup does)",
        time.display()
    );
    let rss = out_dir.join("peak-rss");
    let mut timed = Command::new(time);
    timed
        .args(["-f", "%M", "-o"])
        .arg(&rss)
        .arg("--")
        .arg(cmd.get_program())
        .args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => timed.env(k, v),
            None => timed.env_remove(k),
        };
    }
    if let Some(d) = cmd.get_current_dir() {
        timed.current_dir(d);
    }
    let mut outcome = run_bounded(timed, timeout, out_dir);
    // "Command exited with non-zero status N" comes first when it did: the figure is last.
    let text = fs::read_to_string(&rss).unwrap_or_default();
    outcome.max_rss_kib = text
        .lines()
        .last()
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or_else(|| panic!("GNU time wrote no peak RSS to {}: {text:?}", rss.display()));
    eprintln!(
        "figures: peak RSS of the command itself {} KiB",
        outcome.max_rss_kib
    );
    outcome
}

/// The peak RSS the memory bounds below are held to is the command's own, however large this
/// process (every module's tests, one binary) has grown: with 96 MiB touched here first,
/// wait4's figure for `scanprof --version` is at least that, GNU time's well under 64 MiB.
#[test]
fn the_peak_rss_measured_is_the_commands_own() {
    let t = TempDir::new("peak-rss");
    let mut ballast = vec![0u8; 96 << 20];
    for page in ballast.chunks_mut(4096) {
        page[0] = 1;
    }
    std::hint::black_box(&ballast);
    let version = || {
        let mut cmd = Command::new(common::scanprof_bin());
        cmd.arg("--version");
        cmd
    };
    let inherited = run_bounded(version(), Duration::from_secs(20), t.path());
    let own = run_bounded_rss(version(), Duration::from_secs(20), t.path());
    drop(ballast);
    assert_eq!(own.status.code(), Some(0), "{}", own.stderr);
    assert!(
        inherited.max_rss_kib >= 96 << 10,
        "wait4 gave {} KiB: the test process's peak no longer shows in it",
        inherited.max_rss_kib
    );
    assert!(own.max_rss_kib < 64 << 10, "peak RSS {} KiB", own.max_rss_kib);
}

fn report(path: &Path, format: &str, out: &Path) -> Outcome {
    let mut cmd = Command::new(common::scanprof_bin());
    cmd.args(["report", "--format", format]).arg(path);
    run_bounded_rss(cmd, Duration::from_secs(20), out)
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

// ---- privileged: the real binary with BPF ----------------------------------------------------

use common::{privileged, root_pid, Proc};
use nix::sys::signal::Signal;

fn scanprof(args: &[&str]) -> Command {
    let mut cmd = Command::new(common::scanprof_bin());
    cmd.args(args);
    cmd
}

fn pid_alive(pid: u32) -> bool {
    // A zombie still has /proc/PID; its state is Z.
    fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rfind(')').map(|i| s[i + 2..].starts_with('Z')))
        .is_some_and(|zombie| !zombie)
}

/// Item 1: `record -o DIR` into a directory where events.ndjson and report.md link to a victim
/// file: refused (not empty) without --force; with --force the links are replaced, the victim
/// keeps its contents.
#[test]
fn record_never_writes_through_planted_symlinks() {
    let test = privileged();
    let t = TempDir::new("planted-record");
    let dir = t.path().join("bundle");
    fs::create_dir_all(&dir).unwrap();
    let victim = t.path().join("victim");
    fs::write(&victim, "precious\n").unwrap();
    for name in ["events.ndjson", "report.md", "gaps.svg", ".events.ndjson.partial"] {
        std::os::unix::fs::symlink(&victim, dir.join(name)).unwrap();
    }
    let d = dir.to_str().unwrap();
    let r = run_bounded(
        scanprof(&["record", "-o", d, "--json", "--", "true"]),
        Duration::from_secs(60),
        t.path(),
    );
    assert_eq!(r.status.code(), Some(2), "{}", r.stderr);
    assert!(
        r.stderr.contains("is not empty") && r.stderr.contains("--force"),
        "{}",
        r.stderr
    );
    assert!(
        !r.stdout.contains("\"started\""),
        "the run started before the refusal"
    );
    let r = run_bounded(
        scanprof(&["record", "-o", d, "--force", "--json", "--", "true"]),
        Duration::from_secs(60),
        t.path(),
    );
    assert_eq!(r.status.code(), Some(0), "{}", r.stderr);
    assert_eq!(
        fs::read_to_string(&victim).unwrap(),
        "precious\n",
        "the victim was written"
    );
    for name in ["events.ndjson", "report.md"] {
        assert!(
            fs::symlink_metadata(dir.join(name))
                .unwrap()
                .file_type()
                .is_file(),
            "{name}"
        );
    }
    assert!(!dir.join(".events.ndjson.partial").exists());
    test.assert_released("the test's scanprof processes ended");
}

/// Item 7: `run -- cmd` exits with the command's status, 128 + the signal when a signal ended it.
#[test]
fn run_passes_the_commands_exit_status_on() {
    let test = privileged();
    let t = TempDir::new("status");
    for (script, want) in [
        ("exit 0", 0),
        ("exit 3", 3),
        ("kill -KILL $$", 137),
        ("kill -SEGV $$", 139),
    ] {
        let r = run_bounded(
            scanprof(&["run", "--json", "--", "sh", "-c", script]),
            Duration::from_secs(60),
            t.path(),
        );
        assert_eq!(r.status.code(), Some(want), "{script}: {}", r.stderr);
        assert!(r.stdout.contains("\"summary\""), "{script}: no summary");
    }
    test.assert_released("the test's scanprof processes ended");
}

/// Item 5: SIGHUP (a closed terminal) ends scanprof like SIGTERM: the summary and the bundle are
/// written and the launched command is ended (exit status: the command's, 143 for SIGTERM).
#[test]
fn sighup_ends_the_run_with_summary_bundle_and_no_orphan() {
    let test = privileged();
    let t = TempDir::new("sighup");
    let dir = t.path().join("bundle");
    let d = dir.to_str().unwrap().to_string();
    let args: Vec<String> = ["run", "--json", "--export", &d, "--", "sleep", "60"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let mut p = Proc::scanprof(&args);
    let started = p.wait_for_json("started", Duration::from_secs(30));
    let sleeper = root_pid(&started);
    assert!(pid_alive(sleeper));
    p.signal(Signal::SIGHUP);
    let f = p.finish(Duration::from_secs(15));
    assert_eq!(f.status.code(), Some(143), "{}", f.context());
    let summary = f.summary_json();
    assert_eq!(summary["end_reason"], "interrupted", "{summary}");
    assert!(dir.join("events.ndjson").is_file(), "no bundle\n{}", f.context());
    assert!(!pid_alive(sleeper), "the launched command outlived scanprof");
    test.assert_released("the test's scanprof processes ended");
}

/// Item 6: SIGKILL of scanprof: the launched command dies with it (PR_SET_PDEATHSIG), also when it
/// runs as another user (a change of user clears the parent-death signal, so it is set after).
#[test]
fn sigkill_of_scanprof_leaves_no_orphan() {
    let test = privileged();
    for user in [None, Some("nobody")] {
        sigkill_leaves_no_orphan(user);
    }
    test.assert_released("the test's scanprof processes ended");
}

fn sigkill_leaves_no_orphan(user: Option<&str>) {
    let mut args: Vec<String> = vec!["run".into(), "--json".into()];
    if let Some(u) = user {
        args.extend(["--user".into(), u.into()]);
    }
    args.extend(["--".into(), "sleep".into(), "60".into()]);
    let mut p = Proc::scanprof(&args);
    let started = p.wait_for_json("started", Duration::from_secs(30));
    let sleeper = root_pid(&started);
    assert!(pid_alive(sleeper));
    p.signal(Signal::SIGKILL);
    let _ = p.finish(Duration::from_secs(10));
    let deadline = Instant::now() + Duration::from_secs(3);
    while pid_alive(sleeper) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let orphan = pid_alive(sleeper);
    if orphan {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(sleeper as i32), Signal::SIGKILL);
    }
    assert!(
        !orphan,
        "the launched command {sleeper} (--user {user:?}) outlived a SIGKILLed scanprof"
    );
}

/// Item 6: SIGKILL of scanprof: what the launched command forked dies too (the watchdog), not only
/// the command. The shell forks a sleeper and writes its pid; scanprof is killed; the sleeper,
/// reparented when the shell died, must be gone.
#[test]
fn sigkill_of_scanprof_ends_what_the_command_forked() {
    let test = privileged();
    let file = std::env::temp_dir().join(format!("scanprof-forked-{}", std::process::id()));
    let _ = std::fs::remove_file(&file);
    let script = format!("sleep 120 & echo $! > {}; wait", file.display());
    let args: Vec<String> = ["run", "--json", "--", "sh", "-c", &script]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let mut p = Proc::scanprof(&args);
    let started = p.wait_for_json("started", Duration::from_secs(30));
    let shell = root_pid(&started);
    let deadline = Instant::now() + Duration::from_secs(10);
    let forked = loop {
        if let Some(pid) = std::fs::read_to_string(&file)
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok())
        {
            break pid;
        }
        assert!(Instant::now() < deadline, "the shell wrote no pid");
        std::thread::sleep(Duration::from_millis(20));
    };
    let _ = std::fs::remove_file(&file);
    // scanprof learns of the fork from its probe: give the record a moment to arrive.
    std::thread::sleep(Duration::from_millis(500));
    assert!(pid_alive(forked));
    p.signal(Signal::SIGKILL);
    let _ = p.finish(Duration::from_secs(10));
    let deadline = Instant::now() + Duration::from_secs(3);
    while (pid_alive(forked) || pid_alive(shell)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let orphans: Vec<u32> = [shell, forked].into_iter().filter(|p| pid_alive(*p)).collect();
    for pid in &orphans {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(*pid as i32), Signal::SIGKILL);
    }
    assert!(
        orphans.is_empty(),
        "{orphans:?} outlived a SIGKILLed scanprof (shell {shell}, its child {forked})"
    );
    test.assert_released("the test's scanprof processes ended");
}

/// A user and a group this test made, deleted when dropped (also on failure).
struct UserGuard {
    user: String,
    group: String,
}

impl UserGuard {
    /// A new user whose primary group is nogroup and who is also in a new group of its own.
    fn new() -> UserGuard {
        let id = std::process::id();
        let g = UserGuard {
            user: format!("sp-u{id}"),
            group: format!("sp-g{id}"),
        };
        let ok = |mut c: Command| c.status().map(|s| s.success()).unwrap_or(false);
        let mut groupadd = Command::new("groupadd");
        groupadd.arg(&g.group);
        assert!(ok(groupadd), "groupadd {} failed", g.group);
        let mut useradd = Command::new("useradd");
        useradd
            .args([
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
                "--gid",
                "nogroup",
            ])
            .args(["--groups", &g.group, &g.user]);
        assert!(ok(useradd), "useradd {} failed", g.user);
        g
    }

    /// `id OPTION USER`, as a number.
    fn id(&self, option: &str, of: &str) -> u32 {
        let out = Command::new("id").args([option, of]).output().unwrap();
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("id {option} {of}: {out:?}"))
    }
}

impl UserGuard {
    /// The gid of the test's own group (`getent group`).
    fn gid(&self) -> u32 {
        let out = Command::new("getent")
            .args(["group", &self.group])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .split(':')
            .nth(2)
            .and_then(|g| g.trim().parse().ok())
            .unwrap_or_else(|| panic!("getent group {}: {out:?}", self.group))
    }
}

impl Drop for UserGuard {
    fn drop(&mut self) {
        let _ = Command::new("userdel").arg(&self.user).status();
        let _ = Command::new("groupdel").arg(&self.group).status();
    }
}

/// The status lines (Uid, Gid, Groups, CapEff) the launched command printed of itself.
fn status_lines(stdout: &str) -> std::collections::BTreeMap<String, String> {
    stdout
        .lines()
        .filter_map(|l| l.split_once(":\t"))
        .filter(|(k, _)| ["Uid", "Gid", "Groups", "CapEff"].contains(k))
        .map(|(k, v)| (k.to_string(), v.split_whitespace().collect::<Vec<_>>().join(" ")))
        .collect()
}

/// Item 3: `run --user USER`: the command runs as that user, with its primary group and its
/// supplementary groups from the user database, and no capabilities; scanprof still attaches
/// (the run is profiled). Without --user the command keeps scanprof's user (root here).
#[test]
fn run_user_starts_the_command_as_that_user_with_its_groups() {
    let test = privileged();
    let t = TempDir::new("user");
    let who = UserGuard::new();
    let show = "grep -E '^(Uid|Gid|Groups|CapEff):' /proc/self/status";
    let r = run_bounded(
        scanprof(&["run", "--no-tui", "--user", &who.user, "--", "sh", "-c", show]),
        Duration::from_secs(60),
        t.path(),
    );
    assert_eq!(r.status.code(), Some(0), "{}", r.stderr);
    assert!(r.stderr.contains("probes attached"), "{}", r.stderr);
    let uid = who.id("-u", &who.user);
    let (nogroup, own) = (who.id("-g", &who.user), who.gid());
    let mut groups = [nogroup, own];
    groups.sort_unstable();
    let seen = status_lines(&r.stdout);
    let want: std::collections::BTreeMap<String, String> = [
        ("Uid", format!("{uid} {uid} {uid} {uid}")),
        ("Gid", format!("{nogroup} {nogroup} {nogroup} {nogroup}")),
        ("Groups", format!("{} {}", groups[0], groups[1])),
        ("CapEff", "0000000000000000".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    assert_eq!(seen, want, "stdout:\n{}\nstderr:\n{}", r.stdout, r.stderr);

    let r = run_bounded(
        scanprof(&["run", "--no-tui", "--", "sh", "-c", show]),
        Duration::from_secs(60),
        t.path(),
    );
    assert_eq!(
        status_lines(&r.stdout).get("Uid").map(String::as_str),
        Some("0 0 0 0"),
        "{}",
        r.stdout
    );

    // At the end of the run (--duration) scanprof ends the other user's command (SIGTERM).
    let started = Instant::now();
    let r = run_bounded(
        scanprof(&[
            "run",
            "--json",
            "--duration",
            "1",
            "--user",
            &who.user,
            "--",
            "sleep",
            "30",
        ]),
        Duration::from_secs(60),
        t.path(),
    );
    assert_eq!(r.status.code(), Some(143), "{}", r.stderr);
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "the command was not ended: {:?}",
        started.elapsed()
    );

    // attach follows processes as they are: --user is refused there, as is an unknown user.
    let r = run_bounded(
        scanprof(&[
            "attach",
            "-p",
            &std::process::id().to_string(),
            "--user",
            "nobody",
        ]),
        Duration::from_secs(30),
        t.path(),
    );
    assert_eq!(r.status.code(), Some(2), "{}", r.stderr);
    assert!(r.stderr.contains("--user applies to a command"), "{}", r.stderr);
    let r = run_bounded(
        scanprof(&["run", "--user", "sp-no-such-user", "--", "true"]),
        Duration::from_secs(30),
        t.path(),
    );
    assert!(r.stderr.contains("no such user"), "{}", r.stderr);
    test.assert_released("the test's scanprof processes ended");
}

/// Deletes the named namespaces if they still exist (a test's own, also on failure).
struct NetnsGuard(Vec<String>);

impl Drop for NetnsGuard {
    fn drop(&mut self) {
        for ns in &self.0 {
            if Path::new("/run/netns").join(ns).exists() {
                let _ = Command::new("ip").args(["netns", "delete", ns]).status();
            }
        }
    }
}

/// Item 6: A lab killed with SIGKILL together with its namespace watchdog (as `kill -9` of every
/// scanprof process would): its sender dies with it; its namespaces stay (nothing could remove
/// them), and the next `lab` removes them, and only them: a namespace of a live pid and one that
/// merely looks alike stay.
#[test]
fn a_killed_lab_leaves_no_sender_and_the_next_lab_removes_its_namespaces() {
    let test = privileged();
    let args: Vec<String> = ["lab", "healthy", "--json", "--duration", "30"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let mut p = Proc::scanprof(&args);
    let lab_pid = p.pid();
    let (s, tns) = (format!("sp{lab_pid}-0s"), format!("sp{lab_pid}-0t"));
    // A live process's namespace (this test's) and a look-alike of a dead pid's: both stay.
    let live = format!("sp{}-97s", std::process::id());
    let look_alike = format!("sp{lab_pid}-0x");
    let _guard = NetnsGuard(vec![s.clone(), tns.clone(), live.clone(), look_alike.clone()]);
    let started = p.wait_for_json("started", Duration::from_secs(30));
    let sender = root_pid(&started);
    assert!(Path::new("/run/netns").join(&s).exists(), "no lab namespace {s}");
    // The namespace watchdog first: alone, it would delete the namespaces (issue 33 item 9).
    let dogs = watchdogs_of(lab_pid);
    let ns_dog = dogs.iter().find(|(_, ns)| *ns).map(|(pid, _)| *pid);
    let ns_dog = ns_dog.unwrap_or_else(|| panic!("no namespace watchdog among {dogs:?}"));
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(ns_dog as i32), Signal::SIGKILL);
    assert!(
        gone_within(ns_dog, Duration::from_secs(3)),
        "watchdog {ns_dog} survived SIGKILL"
    );
    p.signal(Signal::SIGKILL);
    let _ = p.finish(Duration::from_secs(10));
    let deadline = Instant::now() + Duration::from_secs(3);
    while pid_alive(sender) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        !pid_alive(sender),
        "the lab's sender {sender} outlived a SIGKILLed lab"
    );
    assert!(
        Path::new("/run/netns").join(&s).exists(),
        "expected the killed lab's namespace"
    );
    for ns in [&live, &look_alike] {
        let st = Command::new("ip").args(["netns", "add", ns]).status().unwrap();
        assert!(st.success(), "ip netns add {ns}");
    }
    let t = TempDir::new("next-lab");
    let r = run_bounded(
        scanprof(&["lab", "healthy", "--json", "--duration", "0.5"]),
        Duration::from_secs(60),
        t.path(),
    );
    assert_eq!(r.status.code(), Some(0), "{}", r.stderr);
    for ns in [&s, &tns] {
        assert!(!Path::new("/run/netns").join(ns).exists(), "{ns} left behind");
        assert!(
            r.stderr.contains(&format!("removed namespace {ns}")),
            "{}",
            r.stderr
        );
    }
    for ns in [&live, &look_alike] {
        assert!(Path::new("/run/netns").join(ns).exists(), "{ns} was removed");
    }
    test.assert_released("the test's scanprof processes ended");
}

/// Item 10: Pid 1, kernel threads and scanprof itself are refused as targets, with what to do.
#[test]
fn attach_refuses_init_kernel_threads_and_itself() {
    let t = TempDir::new("targets");
    for (pid, says) in [("1", "--allow-system"), ("2", "kernel thread")] {
        for sub in ["attach", "record"] {
            let mut args = vec![sub, "-p", pid, "--json", "--duration", "1"];
            let o = t.path().join("b");
            let o = o.to_str().unwrap();
            if sub == "record" {
                args.extend(["-o", o]);
            }
            let r = run_bounded(scanprof(&args), Duration::from_secs(20), t.path());
            assert_eq!(r.status.code(), Some(2), "{sub} -p {pid}: {}", r.stderr);
            assert!(r.stderr.contains(says), "{sub} -p {pid}: {}", r.stderr);
            assert!(r.stdout.is_empty(), "{sub} -p {pid} started: {}", r.stdout);
        }
    }
}

/// Unmounts a tmpfs this test mounted, also on failure.
struct MountGuard(PathBuf);

impl Drop for MountGuard {
    fn drop(&mut self) {
        let _ = nix::mount::umount2(&self.0, nix::mount::MntFlags::MNT_DETACH);
    }
}

/// Item 11: A full disk: the bundle write fails with a message naming the file, and no partial
/// events.ndjson is left for `report` to call "cut short".
#[test]
fn a_full_disk_says_the_write_failed_and_leaves_no_partial_file() {
    let test = privileged();
    let t = TempDir::new("full-disk");
    let mnt = t.path().join("small");
    fs::create_dir_all(&mnt).unwrap();
    nix::mount::mount(
        Some("tmpfs"),
        &mnt,
        Some("tmpfs"),
        nix::mount::MsFlags::empty(),
        Some("size=8k"),
    )
    .expect("mounting a small tmpfs");
    let _m = MountGuard(mnt.clone());
    let dir = mnt.join("bundle");
    let d = dir.to_str().unwrap();
    let r = run_bounded(
        scanprof(&[
            "run",
            "--json",
            "--interval",
            "0.05",
            "--export",
            d,
            "--",
            "sleep",
            "1",
        ]),
        Duration::from_secs(60),
        t.path(),
    );
    assert_eq!(r.status.code(), Some(2), "{}", r.stderr);
    assert!(
        r.stderr.contains("events.ndjson failed") && r.stderr.contains("no partial file"),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("No space left"), "{}", r.stderr);
    let left: Vec<String> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(left.is_empty(), "left in the bundle directory: {left:?}");
    test.assert_released("the test's scanprof processes ended");
}

/// Item 11: Without root, `lab` says it needs root and `send --method packet` names CAP_NET_RAW.
#[test]
fn unprivileged_commands_say_which_privilege_they_need() {
    let test = privileged();
    let t = TempDir::new("nobody");
    let nobody = |args: &[&str]| {
        let mut cmd = Command::new("setpriv");
        cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(common::scanprof_bin())
            .args(args)
            .current_dir("/");
        run_bounded(cmd, Duration::from_secs(20), t.path())
    };
    let r = nobody(&["lab", "healthy", "--duration", "1"]);
    assert_eq!(r.status.code(), Some(2), "{}", r.stderr);
    assert!(r.stderr.contains("needs root"), "{}", r.stderr);
    assert!(!r.stderr.contains("make-shared"), "{}", r.stderr);
    for method in ["packet", "raw"] {
        let r = nobody(&["send", "--to", "127.0.0.1:9", "--count", "1", "--method", method]);
        assert_eq!(r.status.code(), Some(2), "{method}: {}", r.stderr);
        assert!(r.stderr.contains("CAP_NET_RAW"), "{method}: {}", r.stderr);
        assert!(!r.stderr.contains("route_localnet"), "{method}: {}", r.stderr);
    }
    // Everything that makes a lab (baseline's lab cells, run --baseline) says so too.
    let r = nobody(&["run", "--baseline", "--requested", "100", "--", "true"]);
    assert_eq!(r.status.code(), Some(2), "{}", r.stderr);
    assert!(
        r.stderr.contains("needs root") && !r.stderr.contains("make-shared"),
        "{}",
        r.stderr
    );
    let r = nobody(&[
        "baseline",
        "--targets",
        "lab",
        "--seconds",
        "1",
        "--pacers",
        "clock",
        "--rates",
        "100",
        "--methods",
        "sendto",
    ]);
    assert!(
        r.stdout.contains("needs root") || r.stderr.contains("needs root"),
        "{}\n{}",
        r.stdout,
        r.stderr
    );
    assert!(
        !r.stdout.contains("make-shared") && !r.stderr.contains("make-shared"),
        "{}",
        r.stdout
    );
    let r = nobody(&["lab", "--rate", "0"]);
    assert_eq!(r.status.code(), Some(2), "{}", r.stderr);
    assert!(
        r.stderr.contains("--rate") && !r.stderr.contains("--requested"),
        "{}",
        r.stderr
    );
    test.assert_released("the test's scanprof processes ended");
}

/// The capability sets of every thread of process `pid` are within `kept`, but for the
/// collection thread, which may also hold `collector_extra`; each thread has no_new_privs.
/// Returns the number of threads and whether the collection thread was among them.
fn assert_thread_caps(pid: u32, kept: u64, collector_extra: u64) -> (usize, bool) {
    use scanprof::system::caps::parse_set;
    let (mut threads, mut collector) = (0, false);
    for task in fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let status = fs::read_to_string(task.unwrap().path().join("status")).unwrap();
        threads += 1;
        let name = status
            .lines()
            .find_map(|l| l.strip_prefix("Name:\t"))
            .unwrap_or("");
        let is_collector = name.starts_with("scanprof-collec");
        collector |= is_collector;
        let allowed = if is_collector {
            kept | collector_extra
        } else {
            kept
        };
        for key in ["CapEff", "CapPrm", "CapBnd"] {
            let set = parse_set(&status, key).unwrap();
            assert_eq!(
                set & !allowed,
                0,
                "a thread holds {key} {set:x} beyond {allowed:x}\n{status}"
            );
        }
        assert!(status.contains("NoNewPrivs:\t1"), "{status}");
    }
    (threads, collector)
}

/// Item 3: During an attach, every thread of scanprof holds at most the kept capabilities (CapEff,
/// CapPrm and CapBnd from /proc/PID/task/*/status) with no_new_privs, but for the collection
/// thread, which keeps CAP_SYS_ADMIN too while it samples the kernel's BPF statistics
/// (`--bpf-stats sampled`, the default) and nothing more with `--bpf-stats always`; the run still
/// completes with a summary. A command scanprof launches keeps the capabilities it was given.
#[test]
fn after_setup_scanprof_keeps_only_the_capabilities_it_needs() {
    use scanprof::system::caps::parse_set;
    use scanprof::system::privileges::{mask, FOR_BPF_STATS, KEPT};
    let test = privileged();
    let full = parse_set(&fs::read_to_string("/proc/self/status").unwrap(), "CapEff").unwrap();
    let kept = mask(&KEPT);
    assert_ne!(
        full & !kept,
        0,
        "this test needs more capabilities than the kept set"
    );

    for (stats, collector_extra) in [("sampled", mask(&[FOR_BPF_STATS])), ("always", 0)] {
        let mut sleeper = Command::new("sleep").arg("30").spawn().unwrap();
        let spid = sleeper.id().to_string();
        let args: Vec<String> = [
            "attach",
            "-p",
            &spid,
            "--json",
            "--duration",
            "4",
            "--bpf-stats",
            stats,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let mut p = Proc::scanprof(&args);
        let _ = p.wait_for_json("started", Duration::from_secs(30));
        let pid = p.pid();
        let main = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let (threads, collector) = assert_thread_caps(pid, kept, collector_extra);
        assert!(threads >= 2, "expected the main and the collection thread");
        assert!(
            collector,
            "--bpf-stats {stats}: no collection thread among {threads}"
        );
        assert_eq!(parse_set(&main, "CapEff").unwrap(), kept & full, "{main}");
        let f = p.finish(Duration::from_secs(30));
        let _ = sleeper.kill();
        let _ = sleeper.wait();
        assert_eq!(f.status.code(), Some(0), "{}", f.context());
        let summary = f.summary_json();
        assert_eq!(summary["end_reason"], "duration", "{summary}");
    }

    // A launched command keeps what the user gave it (it starts before the drop).
    let args: Vec<String> = ["run", "--json", "--", "sleep", "30"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let mut p = Proc::scanprof(&args);
    let started = p.wait_for_json("started", Duration::from_secs(30));
    let child = root_pid(&started);
    let status = fs::read_to_string(format!("/proc/{child}/status")).unwrap();
    assert_eq!(parse_set(&status, "CapEff").unwrap(), full, "{status}");
    let own = fs::read_to_string(format!("/proc/{}/status", p.pid())).unwrap();
    assert_eq!(parse_set(&own, "CapEff").unwrap() & !kept, 0, "{own}");
    p.signal(Signal::SIGTERM);
    let f = p.finish(Duration::from_secs(15));
    assert_eq!(f.status.code(), Some(143), "{}", f.context());
    test.assert_released("the test's scanprof processes ended");
}

/// Item 3: `lab` too: once its run is set up, its main and collection threads hold at most the kept
/// set and what reading its namespaces' counters and deleting them needs (FOR_LAB), with
/// no_new_privs; its helper threads (the sink, the echo, the staller, the schedstat reader) and
/// its CPU hog hold nothing; and it still reads its counters and deletes its namespaces at the
/// end. Before, a lab kept every capability of root for its whole run.
#[test]
fn a_lab_keeps_only_what_its_counters_and_teardown_need() {
    use scanprof::system::caps::parse_set;
    use scanprof::system::privileges::{mask, FOR_LAB, KEPT};
    let test = privileged();
    let allowed = mask(&KEPT) | mask(&FOR_LAB);
    // preemption has the hog, stalls the staller, reply-drop the echo; all a sink and schedstat.
    for scenario in ["preemption", "stalls", "reply-drop"] {
        let args: Vec<String> = ["lab", scenario, "--json", "--duration", "3"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let mut p = Proc::scanprof(&args);
        let lab_pid = p.pid();
        let namespaces = vec![format!("sp{lab_pid}-0s"), format!("sp{lab_pid}-0t")];
        let _guard = NetnsGuard(namespaces.clone());
        let started = p.wait_for_json("started", Duration::from_secs(30));
        let sender = root_pid(&started);
        let (threads, collector) = assert_thread_caps(lab_pid, allowed, 0);
        assert!(collector, "{scenario}: no collection thread among {threads}");
        let (mut helpers, mut hogs) = (Vec::new(), 0);
        for task in fs::read_dir(format!("/proc/{lab_pid}/task")).unwrap() {
            let path = task.unwrap().path();
            let Ok(status) = fs::read_to_string(path.join("status")) else {
                continue; // a thread that ended meanwhile
            };
            let name = status
                .lines()
                .find_map(|l| l.strip_prefix("Name:\t"))
                .unwrap_or("")
                .to_string();
            if name.starts_with("sink-") || name.starts_with("lab-") {
                for key in ["CapEff", "CapPrm"] {
                    assert_eq!(
                        parse_set(&status, key),
                        Some(0),
                        "{scenario}: {name} {key}\n{status}"
                    );
                }
                helpers.push(name);
            }
            // The hog is a child forked without exec; the sender is the other child.
            let children = fs::read_to_string(path.join("children")).unwrap_or_default();
            for child in children.split_whitespace().filter_map(|c| c.parse::<u32>().ok()) {
                if child == sender {
                    continue;
                }
                let cmd = fs::read(format!("/proc/{child}/cmdline")).unwrap_or_default();
                let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
                // Forked without exec, the hog has the lab's command line (the watchdog and the
                // ip and tc runs have their own).
                if cmd.contains(&format!("lab {scenario}")) {
                    let st = fs::read_to_string(format!("/proc/{child}/status")).unwrap();
                    assert_eq!(parse_set(&st, "CapEff"), Some(0), "{scenario}: the hog\n{st}");
                    assert!(st.contains("NoNewPrivs:\t1"), "{scenario}: the hog\n{st}");
                    hogs += 1;
                }
            }
        }
        assert_eq!(hogs, usize::from(scenario == "preemption"), "{scenario}: hogs");
        assert!(
            helpers.iter().any(|h| h.starts_with("lab-schedstat")),
            "{scenario}: no lab helper thread found: {helpers:?}"
        );
        let f = p.finish(Duration::from_secs(60));
        assert_eq!(f.status.code(), Some(0), "{scenario}: {}", f.context());
        let lab = f.of_type("lab");
        assert_eq!(lab.len(), 1, "{scenario}: no lab report\n{}", f.context());
        assert!(
            lab[0]["receiver"].is_object() || lab[0]["qdisc"].is_array(),
            "{scenario}: the lab read no counter: {}",
            lab[0]
        );
        for ns in &namespaces {
            assert!(
                !Path::new("/run/netns").join(ns).exists(),
                "{scenario}: {ns} left behind"
            );
        }
    }
    test.assert_released("the test's scanprof processes ended");
}

/// A reader that goes away (stdout closed: `scanprof run --json ... | head -1`): the run ends
/// as on a signal, the launched command is ended, the bundle is still written, and scanprof
/// exits 2 saying the output write failed.
#[test]
fn a_closed_stdout_ends_the_run_and_still_writes_the_bundle() {
    let test = privileged();
    let t = TempDir::new("closed-stdout");
    let dir = t.path().join("bundle");
    let mut child = scanprof(&["run", "--json", "--interval", "0.2", "--export"])
        .arg(&dir)
        .args(["--", "sleep", "30"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(fs::File::create(t.path().join("stderr")).unwrap())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    std::io::BufRead::read_line(&mut out, &mut first).unwrap();
    let started: serde_json::Value = serde_json::from_str(&first).unwrap();
    assert_eq!(started["type"], "started", "{first}");
    let sleeper = root_pid(&started);
    drop(out); // the reader goes away
    let deadline = Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("scanprof still ran 15 s after its stdout closed");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stderr = fs::read_to_string(t.path().join("stderr")).unwrap();
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("writing the output"), "{stderr}");
    assert!(dir.join("events.ndjson").is_file(), "no bundle\n{stderr}");
    assert!(!pid_alive(sleeper), "the launched command outlived the run");
    test.assert_released("the test's scanprof processes ended");
}

// ---- issue 33: nothing left running, no more privilege than needed ---------------------------

/// The pid of a running (not zombie) process whose parent is `ppid` and whose name is `comm`,
/// waiting up to 10 s for it to appear (found by a pass over /proc).
fn child_named(ppid: u32, comm: &str) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let found = fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .find(|pid| {
                let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
                    return false;
                };
                let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
                    return false;
                };
                let rest: Vec<&str> = stat[close + 2..].split_whitespace().collect();
                &stat[open + 1..close] == comm && rest.get(1) == Some(&ppid.to_string().as_str())
            });
        if let Some(pid) = found {
            if pid_alive(pid) {
                return pid;
            }
        }
        assert!(Instant::now() < deadline, "no {comm} child of {ppid} appeared");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Processes a test started (through scanprof), SIGKILLed by pid if they still run when the
/// guard drops: a failing assertion leaves none of them behind.
struct EndOnDrop(Vec<u32>);

impl Drop for EndOnDrop {
    fn drop(&mut self) {
        for &pid in &self.0 {
            if pid_alive(pid) {
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), Signal::SIGKILL);
            }
        }
    }
}

/// Waits up to `within` for `pid` to be gone; SIGKILLs it (a process this test started, by its
/// pid) if it is not, and says whether it was gone.
fn gone_within(pid: u32, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while pid_alive(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let alive = pid_alive(pid);
    if alive {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), Signal::SIGKILL);
    }
    !alive
}

/// Issue 33 item 3: what a launched command forked ends with the run, whichever way the run ends:
/// `--duration`, SIGINT, SIGTERM, SIGHUP. `sh -c 'sleep 31 & exec sleep 32'`: the shell forks
/// `sleep 31`, then becomes `sleep 32`; at the end both get SIGTERM (exit status 143, the
/// command's). Before, only the command's own pid was signalled and `sleep 31` ran on.
#[test]
fn a_launched_commands_forked_children_end_with_the_run() {
    let test = privileged();
    for ending in ["duration", "SIGINT", "SIGTERM", "SIGHUP"] {
        let duration = if ending == "duration" { "2" } else { "60" };
        let args: Vec<String> = [
            "run",
            "--json",
            "--duration",
            duration,
            "--",
            "sh",
            "-c",
            "sleep 31 & exec sleep 32",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let mut p = Proc::scanprof(&args);
        let started = p.wait_for_json("started", Duration::from_secs(30));
        let root = root_pid(&started);
        // Forked before the exec: the child of the process that is now `sleep 32`.
        let forked = child_named(root, "sleep");
        let _leftovers = EndOnDrop(vec![forked, root]);
        let sig = match ending {
            "SIGINT" => Some(Signal::SIGINT),
            "SIGTERM" => Some(Signal::SIGTERM),
            "SIGHUP" => Some(Signal::SIGHUP),
            _ => None,
        };
        if let Some(sig) = sig {
            p.signal(sig);
        }
        let f = p.finish(Duration::from_secs(30));
        let forked_gone = gone_within(forked, Duration::from_secs(2));
        let root_gone = gone_within(root, Duration::from_secs(2));
        assert!(
            forked_gone && root_gone,
            "{ending}: left running: forked sleep {forked} ({}), command {root} ({})\n{}",
            !forked_gone,
            !root_gone,
            f.context()
        );
        assert_eq!(f.status.code(), Some(143), "{ending}: {}", f.context());
        let want = if sig.is_some() { "interrupted" } else { "duration" };
        assert_eq!(f.summary_json()["end_reason"], want, "{ending}");
    }
    test.assert_released("the test's scanprof processes ended");
}

/// The watchdog children of scanprof process `pid`: (pid, whether it watches namespaces).
fn watchdogs_of(pid: u32) -> Vec<(u32, bool)> {
    fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|c| {
            fs::read_to_string(format!("/proc/{c}/stat")).is_ok_and(|s| {
                s.rfind(')')
                    .and_then(|i| s[i + 2..].split_whitespace().nth(1).map(|p| p == pid.to_string()))
                    .unwrap_or(false)
            })
        })
        .filter_map(|c| {
            let cmd = fs::read(format!("/proc/{c}/cmdline")).ok()?;
            let words: Vec<String> = cmd
                .split(|b| *b == 0)
                .map(|w| String::from_utf8_lossy(w).into_owned())
                .collect();
            (words.get(1).map(String::as_str) == Some("watchdog"))
                .then(|| (c, words.iter().any(|w| w == "--namespaces")))
        })
        .collect()
}

/// Asserts a watchdog's effective, permitted and bounding sets are exactly `want` (as far as
/// this test's own sets reach) with no_new_privs, waiting up to 3 s for it to have dropped.
fn assert_watchdog_caps(pid: u32, want: u64, what: &str) {
    use scanprof::system::caps::parse_set;
    let own = parse_set(&fs::read_to_string("/proc/self/status").unwrap(), "CapEff").unwrap();
    let deadline = Instant::now() + Duration::from_secs(3);
    let status = loop {
        let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        if status.contains("NoNewPrivs:\t1") || Instant::now() > deadline {
            break status;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    for key in ["CapEff", "CapPrm", "CapBnd"] {
        assert_eq!(
            parse_set(&status, key),
            Some(want & own),
            "{what}: watchdog {pid} {key}\n{status}"
        );
    }
    assert!(
        status.contains("NoNewPrivs:\t1"),
        "{what}: watchdog {pid}\n{status}"
    );
}

/// Issue 33 item 4: the watchdog `run` starts keeps CAP_KILL alone (effective, permitted and
/// bounding sets) with no_new_privs for the whole run, and still ends what the command forked
/// when scanprof is killed. Before, it ran as root with every capability.
#[test]
fn the_run_watchdog_keeps_only_cap_kill() {
    use scanprof::system::caps::CAP_KILL;
    use scanprof::system::privileges::mask;
    let test = privileged();
    let args: Vec<String> = [
        "run",
        "--json",
        "--duration",
        "60",
        "--",
        "sh",
        "-c",
        "sleep 33 & exec sleep 34",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut p = Proc::scanprof(&args);
    let started = p.wait_for_json("started", Duration::from_secs(30));
    let root = root_pid(&started);
    let forked = child_named(root, "sleep");
    let _leftovers = EndOnDrop(vec![forked, root]);
    let dogs = watchdogs_of(p.pid());
    assert_eq!(dogs.len(), 1, "expected one watchdog: {dogs:?}");
    assert!(!dogs[0].1, "the run's watchdog watches namespaces: {dogs:?}");
    assert_watchdog_caps(dogs[0].0, mask(&[CAP_KILL]), "run");
    // With only CAP_KILL it still does its work: SIGKILL of scanprof, and the fork is ended.
    std::thread::sleep(Duration::from_millis(300));
    p.signal(Signal::SIGKILL);
    let _ = p.finish(Duration::from_secs(10));
    let forked_gone = gone_within(forked, Duration::from_secs(3));
    let root_gone = gone_within(root, Duration::from_secs(3));
    assert!(
        forked_gone && root_gone,
        "outlived a SIGKILLed scanprof: forked {forked} ({}), command {root} ({})",
        !forked_gone,
        !root_gone
    );
    test.assert_released("the test's scanprof processes ended");
}

/// Issue 33 items 9 and 4: SIGKILL of `scanprof lab` mid-run leaves neither of the namespaces it
/// made (named `sp{pid}-0s` and `sp{pid}-0t` after its pid, src/netlab) within a few
/// seconds: its namespace watchdog deletes them; that watchdog keeps CAP_SYS_ADMIN alone, with
/// no_new_privs, and the lab's family watchdog CAP_KILL alone. Before, both namespaces stayed
/// until the next `lab`.
#[test]
fn a_killed_lab_leaves_no_namespace_behind() {
    use scanprof::system::caps::{CAP_KILL, CAP_SYS_ADMIN};
    use scanprof::system::privileges::mask;
    let test = privileged();
    let args: Vec<String> = ["lab", "healthy", "--json", "--duration", "30"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let mut p = Proc::scanprof(&args);
    let lab_pid = p.pid();
    let names = vec![format!("sp{lab_pid}-0s"), format!("sp{lab_pid}-0t")];
    let _guard = NetnsGuard(names.clone());
    let started = p.wait_for_json("started", Duration::from_secs(30));
    let sender = root_pid(&started);
    for ns in &names {
        assert!(Path::new("/run/netns").join(ns).exists(), "no lab namespace {ns}");
    }
    let dogs = watchdogs_of(lab_pid);
    assert_eq!(
        dogs.len(),
        2,
        "expected a family and a namespace watchdog: {dogs:?}"
    );
    for (dog, namespaces) in &dogs {
        if *namespaces {
            assert_watchdog_caps(*dog, mask(&[CAP_SYS_ADMIN]), "lab namespaces");
        } else {
            assert_watchdog_caps(*dog, mask(&[CAP_KILL]), "lab family");
        }
    }
    p.signal(Signal::SIGKILL);
    let _ = p.finish(Duration::from_secs(10));
    let deadline = Instant::now() + Duration::from_secs(5);
    let left = loop {
        let left: Vec<&String> = names
            .iter()
            .filter(|ns| Path::new("/run/netns").join(ns).exists())
            .collect();
        if left.is_empty() || Instant::now() > deadline {
            break left;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(left.is_empty(), "{left:?} left behind by a SIGKILLed lab");
    assert!(
        gone_within(sender, Duration::from_secs(3)),
        "the lab's sender {sender} outlived it"
    );
    for (dog, _) in dogs {
        assert!(
            gone_within(dog, Duration::from_secs(3)),
            "watchdog {dog} still runs"
        );
    }
    test.assert_released("the test's scanprof processes ended");
}

/// The option a watchdog was started with (`--namespaces`, `--cgroups`), if any.
fn watchdog_option(pid: u32) -> Option<String> {
    let cmd = fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    cmd.split(|b| *b == 0)
        .nth(2)
        .filter(|w| !w.is_empty())
        .map(|w| String::from_utf8_lossy(w).into_owned())
}

/// Removes the named cgroup directories if they still exist (a test's lab's, also on failure).
struct CgroupGuard(Vec<PathBuf>);

impl Drop for CgroupGuard {
    fn drop(&mut self) {
        for dir in &self.0 {
            let _ = fs::remove_dir(dir);
        }
    }
}

/// Issue 33 item 9: `lab cgroup-throttled` killed with SIGKILL mid-run leaves no cgroup: its
/// cgroup watchdog (CAP_DAC_OVERRIDE alone, with no_new_privs) removes `scanprof-lab-PID-0`
/// once the killed sender has left it, and its namespace watchdog the namespaces. Before, the
/// cgroup stayed for good (the next lab removes only namespaces).
#[test]
fn a_killed_throttled_lab_leaves_no_cgroup_behind() {
    use scanprof::system::caps::CAP_DAC_OVERRIDE;
    use scanprof::system::privileges::mask;
    let test = privileged();
    let args: Vec<String> = ["lab", "cgroup-throttled", "--json", "--duration", "30"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let mut p = Proc::scanprof(&args);
    let lab_pid = p.pid();
    let names = vec![format!("sp{lab_pid}-0s"), format!("sp{lab_pid}-0t")];
    let _netns = NetnsGuard(names.clone());
    // Where CpuQuota makes it: the unified hierarchy or the v1 cpu one.
    let candidates: Vec<PathBuf> = [
        "/sys/fs/cgroup",
        "/sys/fs/cgroup/unified",
        "/sys/fs/cgroup/cpu",
        "/sys/fs/cgroup/cpu,cpuacct",
    ]
    .iter()
    .map(|root| Path::new(root).join(format!("scanprof-lab-{lab_pid}-0")))
    .collect();
    let _cgroups = CgroupGuard(candidates.clone());
    let _ = p.wait_for_json("started", Duration::from_secs(30));
    let dir = candidates
        .iter()
        .find(|d| d.is_dir())
        .unwrap_or_else(|| panic!("no lab cgroup among {candidates:?}"))
        .clone();
    let dogs = watchdogs_of(lab_pid);
    let cg_dog = dogs
        .iter()
        .map(|(d, _)| *d)
        .find(|d| watchdog_option(*d).as_deref() == Some("--cgroups"))
        .unwrap_or_else(|| panic!("no cgroup watchdog among {dogs:?}"));
    assert_watchdog_caps(cg_dog, mask(&[CAP_DAC_OVERRIDE]), "lab cgroup");
    p.signal(Signal::SIGKILL);
    let _ = p.finish(Duration::from_secs(10));
    let deadline = Instant::now() + Duration::from_secs(6);
    while (dir.exists() || names.iter().any(|ns| Path::new("/run/netns").join(ns).exists()))
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!dir.exists(), "{} left behind by a SIGKILLed lab", dir.display());
    for ns in &names {
        assert!(!Path::new("/run/netns").join(ns).exists(), "{ns} left behind");
    }
    for (dog, _) in dogs {
        assert!(
            gone_within(dog, Duration::from_secs(3)),
            "watchdog {dog} still runs"
        );
    }
    test.assert_released("the test's scanprof processes ended");
}

/// Issue 33 item 3, the other side: `attach` never ends a family it did not start. The test's
/// own `sh -c 'sleep 35 & exec sleep 36'` is attached to for 2 s; after the run both the
/// command and what it forked still run (the test then ends them, by pid).
#[test]
fn attach_leaves_the_family_it_attached_to_running() {
    let test = privileged();
    let mut shell = Command::new("sh")
        .args(["-c", "sleep 35 & exec sleep 36"])
        .spawn()
        .unwrap();
    let root = shell.id();
    let forked = child_named(root, "sleep");
    let _leftovers = EndOnDrop(vec![forked, root]);
    let spid = root.to_string();
    let args: Vec<String> = ["attach", "-p", &spid, "--json", "--duration", "2"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let p = Proc::scanprof(&args);
    let f = p.finish(Duration::from_secs(30));
    assert_eq!(f.status.code(), Some(0), "{}", f.context());
    assert_eq!(f.summary_json()["end_reason"], "duration");
    let (root_alive, forked_alive) = (pid_alive(root), pid_alive(forked));
    let _ = shell.kill();
    let _ = shell.wait();
    assert!(
        root_alive && forked_alive,
        "attach ended processes it did not start: command {root} alive {root_alive}, forked {forked} alive {forked_alive}"
    );
    test.assert_released("the test's scanprof processes ended");
}

// ---- issue 33: safe with anything it is handed ------------------------------------------------

/// A name that is not UTF-8 (legal on Linux): 0xff and 0xfe are never UTF-8.
fn non_utf8(prefix: &str) -> std::ffi::OsString {
    use std::os::unix::ffi::OsStringExt;
    let mut b = prefix.as_bytes().to_vec();
    b.extend_from_slice(b"\xff\xfe");
    std::ffi::OsString::from_vec(b)
}

/// Item 5: a file name that is not UTF-8 is a file name like any other: `report` reads the
/// bundle there (and says what is wrong with it), it does not panic (exit 101).
#[test]
fn a_non_utf8_file_name_is_read_not_a_panic() {
    let t = TempDir::new("non-utf8");
    let b = t.path().join(non_utf8("bundle-"));
    fs::create_dir_all(&b).unwrap();
    fs::write(
        b.join("events.ndjson"),
        "{\"type\":\"meta\",\"command_line\":[\"scanprof\"],\"version\":\"0\",\"started_at\":\"\",\"hostname\":\"h\",\"kernel\":\"k\"}\n",
    )
    .unwrap();
    for args in [
        vec!["report"],
        vec!["report", "--format", "md"],
        vec!["--version", "report"],
    ] {
        let mut cmd = scanprof(&args);
        cmd.arg(&b);
        let r = run_bounded(cmd, Duration::from_secs(20), t.path());
        assert_ne!(r.status.code(), Some(101), "{args:?} panicked: {}", r.stderr);
        if args[0] == "report" {
            assert_eq!(r.status.code(), Some(2), "{args:?}: {}", r.stderr);
            assert!(
                r.stderr.contains("neither a summary nor a tick"),
                "{args:?}: {}",
                r.stderr
            );
        }
    }
}

/// Item 5: a launched command's arguments reach it byte for byte, whatever their encoding.
#[test]
fn run_passes_non_utf8_arguments_on_unchanged() {
    let test = privileged();
    let t = TempDir::new("non-utf8-run");
    let out = t.path().join("got");
    let word = non_utf8("word-");
    let mut cmd = scanprof(&[
        "run",
        "--no-tui",
        "--quiet",
        "--",
        "/bin/sh",
        "-c",
        "printf %s \"$1\" > \"$2\"",
        "sh",
    ]);
    cmd.arg(&word).arg(&out);
    let r = run_bounded(cmd, Duration::from_secs(60), t.path());
    assert_eq!(r.status.code(), Some(0), "{}", r.stderr);
    use std::os::unix::ffi::OsStrExt;
    assert_eq!(fs::read(&out).unwrap(), word.as_bytes());
    test.assert_released("the test's scanprof processes ended");
}

/// Runs `cmd` with umask 0, so that the mode a file is created with shows whole.
fn with_umask_0(mut cmd: Command) -> Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: umask is async-signal-safe and touches only the child's own state.
    unsafe {
        cmd.pre_exec(|| {
            libc::umask(0);
            Ok(())
        });
    }
    cmd
}

/// A report path that is a planted link to a victim file: the link is replaced by the report,
/// the victim keeps its contents, and the report is not writable by group or others.
fn assert_report_replaces_planted_link(what: &str, args: &[&str]) {
    let t = TempDir::new(&format!("planted-{what}"));
    let victim = t.path().join("victim");
    fs::write(&victim, "precious\n").unwrap();
    let link = t.path().join("report.json");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let mut cmd = scanprof(args);
    cmd.arg("--report").arg(&link);
    let r = run_bounded(with_umask_0(cmd), Duration::from_secs(30), t.path());
    assert_eq!(r.status.code(), Some(0), "{what}: {}", r.stderr);
    assert_eq!(
        fs::read_to_string(&victim).unwrap(),
        "precious\n",
        "{what} wrote through the link"
    );
    let meta = fs::symlink_metadata(&link).unwrap();
    assert!(
        meta.file_type().is_file(),
        "{what}: the report is not a regular file"
    );
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(meta.permissions().mode() & 0o777, 0o644, "{what}: report mode");
    let v: serde_json::Value = serde_json::from_str(&fs::read_to_string(&link).unwrap()).unwrap();
    assert!(v.is_object(), "{what}: {v}");
    let left: Vec<_> = fs::read_dir(t.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name())
        .filter(|n| n.to_string_lossy().contains("partial"))
        .collect();
    assert!(left.is_empty(), "{what} left {left:?}");
}

/// Item 1: `recv --report LINK` (no privilege needed).
#[test]
fn recv_report_never_writes_through_a_planted_link() {
    let port = std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let port = port.to_string();
    assert_report_replaces_planted_link("recv", &["recv", "--port", &port, "--duration", "0.2"]);
}

/// Item 1: `ring-recv --report LINK` and `relay --report LINK`, which `lab` runs as root.
#[test]
fn ring_recv_and_relay_reports_never_write_through_a_planted_link() {
    let test = privileged();
    assert_report_replaces_planted_link("ring-recv", &["ring-recv", "--dev", "lo", "--duration", "0.2"]);
    assert_report_replaces_planted_link(
        "relay",
        &["relay", "--in", "lo", "--out", "lo", "--duration", "0.2"],
    );
    test.assert_released("the test's scanprof processes ended");
}

/// Item 2: `--profile` naming an endless device or a FIFO nobody writes: refused at once with
/// what it is (exit 2), with bounded memory, before the run starts.
#[test]
fn a_profile_that_is_a_device_or_fifo_is_refused_at_once() {
    let test = privileged();
    let t = TempDir::new("profile-device");
    let fifo = t.path().join("fifo.toml");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let fifo = fifo.to_str().unwrap().to_string();
    for (profile, says) in [
        ("/dev/zero", "a character device"),
        ("/dev/urandom", "a character device"),
        (fifo.as_str(), "a FIFO"),
    ] {
        let started = Instant::now();
        let r = run_bounded_rss(
            scanprof(&[
                "run",
                "--no-tui",
                "--duration",
                "1",
                "--profile",
                profile,
                "--",
                "true",
            ]),
            Duration::from_secs(20),
            t.path(),
        );
        assert_eq!(r.status.code(), Some(2), "{profile}: {}", r.stderr);
        assert!(
            r.stderr.contains(says) && r.stderr.contains("regular file"),
            "{profile}: {}",
            r.stderr
        );
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{profile}: {:?}",
            started.elapsed()
        );
        assert!(
            r.max_rss_kib < 128 << 10,
            "{profile}: peak RSS {} KiB",
            r.max_rss_kib
        );
    }
    test.assert_released("the test's scanprof processes ended");
}

/// Item 6: a bundle from someone else whose strings (comm, executable, host name, command
/// line) hold escape sequences and line breaks: `report` shows them as `\u{1b}` in text and
/// markdown, never sends them to the terminal, and a line break in a name cannot forge a line
/// of the report. (`views::text_tests` and the markdown tests cover every other string.)
#[test]
fn report_shows_escape_sequences_from_a_bundle_instead_of_sending_them() {
    let test = privileged();
    let t = TempDir::new("escapes");
    let out = t.path().join("out");
    fs::create_dir_all(&out).unwrap();
    let b = t.path().join("b");
    let r = run_bounded(
        scanprof(&["record", "--json", "-o", b.to_str().unwrap(), "--", "true"]),
        Duration::from_secs(60),
        t.path(),
    );
    assert_eq!(r.status.code(), Some(0), "{}", r.stderr);
    let evil = "\x1b]0;pwned\x07\x1b[2J\u{9b}31m\u{202e}";
    let events = b.join("events.ndjson");
    let mut changed = 0;
    let lines: Vec<String> = fs::read_to_string(&events)
        .unwrap()
        .lines()
        .map(|l| {
            let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
            match v["type"].as_str() {
                Some("meta") => {
                    v["hostname"] = format!("host{evil}").into();
                    v["command_line"]
                        .as_array_mut()
                        .unwrap()
                        .push(format!("arg{evil}").into());
                    changed += 1;
                }
                Some("summary") => {
                    for p in v["processes"].as_array_mut().unwrap() {
                        p["comm"] = format!("true{evil}\nverdict: all is well").into();
                        p["exe"] = format!("/bin/x{evil}").into();
                        changed += 1;
                    }
                }
                _ => {}
            }
            v.to_string()
        })
        .collect();
    assert!(changed >= 2, "no meta or no process in the summary");
    fs::write(&events, lines.join("\n") + "\n").unwrap();
    for format in ["text", "md"] {
        let r = report(&b, format, &out);
        assert_eq!(r.status.code(), Some(0), "{format}: {}", r.stderr);
        let sent: Vec<char> = r
            .stdout
            .chars()
            .filter(|c| (c.is_control() && *c != '\n') || ('\u{202a}'..='\u{202e}').contains(c))
            .collect();
        assert!(sent.is_empty(), "{format} sends {sent:?} to the terminal");
        assert!(
            r.stdout.contains("\\u{1b}]0;pwned\\u{7}"),
            "{format}:\n{}",
            r.stdout
        );
        assert!(
            !r.stdout
                .lines()
                .any(|l| l.trim_start().starts_with("verdict: all is well")),
            "{format}: a comm forged a line:\n{}",
            r.stdout
        );
    }
    test.assert_released("the test's scanprof processes ended");
}

/// Item 8: lines that are valid JSON but do not decode, and a layout newer than this
/// scanprof's: `report` names each line ("FILE line N: problem") before it says nothing is
/// left to report, in every format; it said only "holds neither a summary nor a tick".
#[test]
fn report_names_each_line_that_does_not_decode() {
    let t = TempDir::new("undecodable");
    let out = t.path().join("out");
    fs::create_dir_all(&out).unwrap();
    let b = t.path().join("b");
    fs::create_dir_all(&b).unwrap();
    fs::write(
        b.join("events.ndjson"),
        "{\"type\":\"meta\",\"command_line\":[\"scanprof\"],\"version\":\"0\",\"started_at\":\"\",\"hostname\":\"h\",\"kernel\":\"k\"}\n\
         {\"type\":\"sample\",\"schema_version\":2,\"tick\":-1}\n\
         {\"type\":\"sample\",\"schema_version\":999,\"tick\":1}\n\
         {\"type\":\"summary\",\"schema_version\":2,\"duration_s\":1e300,\"send_calls\":18446744073709551616}\n",
    )
    .unwrap();
    for format in ["text", "md", "json"] {
        let r = report(&b, format, &out);
        assert_eq!(r.status.code(), Some(2), "{format}: {}", r.stderr);
        let file = b.join("events.ndjson").display().to_string();
        for (line, says) in [
            (2, "a \"sample\" line scanprof cannot read"),
            (3, "a \"sample\" line of schema_version 999"),
            (4, "a \"summary\" line scanprof cannot read"),
        ] {
            assert!(
                r.stderr.contains(&format!("{file} line {line}: {says}")),
                "{format}: line {line}: {}",
                r.stderr
            );
        }
        assert!(
            r.stderr.contains("the lines named above could not be read"),
            "{format}: {}",
            r.stderr
        );
        assert!(r.stdout.is_empty(), "{format}: {}", r.stdout);
    }
}

/// Item 10: a zombie (exited, not reaped) is refused before anything loads, naming what it is;
/// it was accepted, gave one tick and "family exited", exit 0.
#[test]
fn attach_refuses_a_zombie() {
    let test = privileged();
    let t = TempDir::new("zombie");
    // A child of this test that exits and is reaped only at the end: a zombie meanwhile.
    let mut child = Command::new("true").spawn().unwrap();
    let pid = child.id();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !fs::read_to_string(format!("/proc/{pid}/stat"))
        .unwrap()
        .contains(") Z ")
    {
        assert!(Instant::now() < deadline, "pid {pid} never became a zombie");
        std::thread::sleep(Duration::from_millis(10));
    }
    let r = run_bounded(
        scanprof(&["attach", "-p", &pid.to_string(), "--duration", "2", "--no-tui"]),
        Duration::from_secs(30),
        t.path(),
    );
    child.wait().unwrap();
    assert_eq!(r.status.code(), Some(2), "{}\n{}", r.stdout, r.stderr);
    assert!(
        r.stderr.contains(&format!("pid {pid} has exited (a zombie")),
        "{}",
        r.stderr
    );
    test.assert_released("the test's scanprof processes ended");
}

/// Item 10: a TOML error names the line and column, and quotes nothing of a file that
/// `--profile` named (it quoted the file's first line, whatever the file was).
#[test]
fn a_profile_error_quotes_nothing_of_the_file() {
    let test = privileged();
    let t = TempDir::new("profile-quote");
    let f = t.path().join("p.toml");
    fs::write(&f, "root:$6$secret-hash:19000:0:99999:7:::\nmore secret\n").unwrap();
    let r = run_bounded(
        scanprof(&[
            "run",
            "--no-tui",
            "--duration",
            "1",
            "--profile",
            f.to_str().unwrap(),
            "--",
            "true",
        ]),
        Duration::from_secs(30),
        t.path(),
    );
    assert_eq!(r.status.code(), Some(2), "{}", r.stderr);
    assert!(r.stderr.contains("line 1, column"), "{}", r.stderr);
    assert!(!r.stderr.contains("secret"), "{}", r.stderr);
    test.assert_released("the test's scanprof processes ended");
}

/// Item 10: the internal `watchdog` subcommand is in no --help, manual page or completion
/// script, and `man watchdog` is refused like any unknown name.
#[test]
fn the_internal_watchdog_is_offered_nowhere() {
    let t = TempDir::new("watchdog-hidden");
    for args in [
        vec!["--help"],
        vec!["help"],
        vec!["man"],
        vec!["completions", "bash"],
        vec!["completions", "zsh"],
        vec!["completions", "fish"],
    ] {
        let r = run_bounded(scanprof(&args), Duration::from_secs(20), t.path());
        assert_eq!(r.status.code(), Some(0), "{args:?}: {}", r.stderr);
        assert!(!r.stdout.contains("watchdog"), "{args:?} offers the watchdog");
    }
    let r = run_bounded(scanprof(&["man", "watchdog"]), Duration::from_secs(20), t.path());
    assert_eq!(r.status.code(), Some(2), "{}", r.stderr);
    assert!(r.stderr.contains("no subcommand watchdog"), "{}", r.stderr);
}

/// Item 10: `--map-size` naming no resizable map is refused by the parser, the flag and the
/// maps named once (it printed "os error 22" twice, after loading the probes).
#[test]
fn a_map_size_for_no_map_is_refused_once_by_the_parser() {
    let t = TempDir::new("map-size");
    let r = run_bounded(
        scanprof(&["attach", "-p", "1", "--map-size", "nosuch=5"]),
        Duration::from_secs(20),
        t.path(),
    );
    assert_eq!(r.status.code(), Some(2), "{}", r.stderr);
    assert!(
        r.stderr.contains("--map-size") && r.stderr.contains("no map scanprof can resize"),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("threads"), "{}", r.stderr);
    assert!(!r.stderr.contains("os error"), "{}", r.stderr);
}
