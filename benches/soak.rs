//! Does a long run grow? Figures printed against issue 14's targets, not asserted.
//!
//! `cargo bench --bench soak` (as root; BPF). Two runs, side by side:
//!
//! (a) `scanprof run --json --export DIR -- scanprof send --to 127.0.0.1:PORT --rate 2000
//!     --duration SECONDS --pacer sleep` for `SOAK_MINUTES` (default 60): scanprof's VmRSS read
//!     from /proc every 10 s, and the bytes of its JSON `sample` lines per minute of the run
//!     (by each sample's `t_s`). Targets: RSS growth <= 2 MB, and the JSON bytes per minute of
//!     the last 10 minutes within 10% of the first 10's.
//! (b) the same at `--interval 0.01` for `SOAK_FAST_MINUTES` (default 10). Target: RSS growth
//!     <= 5 MB.
//!
//! RSS growth is the last reading while the command still sends minus the first (at 10 s, after
//! start-up), and a reading every 5 minutes is printed; the peak over scanprof's whole life (wait4's ru_maxrss) is printed beside it,
//! since the bundle is rendered from the spooled ticks after the command ends. Short durations (`SOAK_MINUTES=2
//! SOAK_FAST_MINUTES=1`) check that the bench works; every figure says the duration it covers.
//! `SOAK_PARTS=a` or `b` runs one part; `SOAK_SCANPROF=PATH` measures that binary (a copy of
//! this build's, say, so that a rebuild meanwhile cannot touch it). Bundles go to a new directory under `SOAK_DIR` (default
//! the temporary directory) and are kept; their paths are printed.
//!
//! Traffic only to 127.0.0.1, to a closed UDP port (each packet is then a NO_SOCKET drop, so
//! the drop table is exercised), bounded by the sender's `--duration`. Every child is ended by
//! its own pid on the way out, also on panic or Ctrl-C.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use nix::sys::signal::Signal;

/// The scanprof measured: this build's, or `SOAK_SCANPROF` (a copy, so that a rebuild during
/// an hour's soak cannot replace the binary under it).
fn bin() -> String {
    std::env::var("SOAK_SCANPROF").unwrap_or_else(|_| env!("CARGO_BIN_EXE_scanprof").to_string())
}
const RATE: u32 = 2000;
const RSS_EVERY: Duration = Duration::from_secs(10);

fn minutes(var: &str, default: f64) -> f64 {
    match std::env::var(var) {
        Ok(v) => v
            .parse::<f64>()
            .ok()
            .filter(|m| m.is_finite() && *m > 0.0)
            .unwrap_or_else(|| panic!("{var}={v:?}: give a positive number of minutes")),
        Err(_) => default,
    }
}

/// A UDP port on 127.0.0.1 that nothing listens on (bound, then released).
fn closed_port() -> u16 {
    let s = std::net::UdpSocket::bind("127.0.0.1:0").expect("binding a UDP port on 127.0.0.1");
    s.local_addr().expect("local address").port()
}

/// Reaps `pid` if it has exited: its exit status and its peak RSS in KiB over its whole life,
/// the bundle's rendering after the command included (wait4's ru_maxrss).
fn reap(pid: u32) -> Option<(std::process::ExitStatus, u64)> {
    use std::os::unix::process::ExitStatusExt;
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to fill in.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: wait4 with valid pointers to the two out-parameters, for our own child.
    let r = unsafe { libc::wait4(pid as libc::pid_t, &mut status, libc::WNOHANG, &mut usage) };
    match r {
        0 => None,
        r if r == pid as libc::pid_t => Some((
            std::process::ExitStatus::from_raw(status),
            usage.ru_maxrss.max(0) as u64,
        )),
        _ => panic!(
            "waiting for scanprof (pid {pid}): {}",
            std::io::Error::last_os_error()
        ),
    }
}

/// CPU time `pid` has used (user + system), s.
fn cpu_s(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let mut f = stat[stat.rfind(')')? + 2..].split_whitespace().skip(11);
    let (utime, stime): (f64, f64) = (f.next()?.parse().ok()?, f.next()?.parse().ok()?);
    // SAFETY: sysconf has no memory arguments.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Some((utime + stime) / hz)
}

/// (VmRSS, VmHWM) of `pid` in KiB, None once it is gone.
fn rss_kib(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| -> Option<u64> {
        status
            .lines()
            .find(|l| l.starts_with(name))?
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

struct Part {
    name: &'static str,
    minutes: f64,
    /// --interval, s
    interval: f64,
    /// RSS growth target, bytes
    rss_target: f64,
    /// whether the JSON bytes per minute are judged
    judge_json: bool,
}

/// What one part measured.
#[derive(Default)]
struct Measured {
    /// (seconds since start, VmRSS KiB)
    rss: Vec<(f64, u64)>,
    /// (seconds since start, CPU seconds used), at the same readings
    cpu: Vec<(f64, f64)>,
    /// VmHWM at the last reading
    hwm_kib: u64,
    /// peak RSS over the whole life of scanprof, from wait4
    peak_kib: u64,
    /// bytes of sample lines per minute of the run (by t_s)
    bytes_per_minute: Vec<u64>,
    samples: u64,
    exit: Option<std::process::ExitStatus>,
    stderr: String,
    bundle: PathBuf,
}

fn log(out: &Mutex<()>, text: &str) {
    let _g = out.lock().unwrap_or_else(|e| e.into_inner());
    println!("{text}");
    let _ = std::io::stdout().flush();
}

fn run_part(part: &Part, dir: &Path, out: &Mutex<()>) -> Measured {
    let seconds = (part.minutes * 60.0).round().max(1.0) as u64;
    let bundle = dir.join(format!("bundle-{}", part.name));
    let port = closed_port();
    let bin = bin();
    let mut cmd = Command::new(&bin);
    cmd.args(["run", "--json", "--export"])
        .arg(&bundle)
        .args([
            "--interval",
            &part.interval.to_string(),
            "--",
            &bin,
            "send",
            "--to",
        ])
        .arg(format!("127.0.0.1:{port}"))
        .args(["--rate", &RATE.to_string(), "--duration", &seconds.to_string()])
        .args(["--pacer", "sleep"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    log(
        out,
        &format!(
            "part {}: {} min at --interval {} -> {} (pid below)",
            part.name,
            part.minutes,
            part.interval,
            bundle.display()
        ),
    );
    let t0 = Instant::now();
    let mut p = Proc::spawn(cmd, "scanprof run", Signal::SIGINT);
    let pid = p.pid();
    log(out, &format!("part {}: scanprof pid {pid}", part.name));
    let per_minute = Arc::new(Mutex::new((Vec::<u64>::new(), 0u64)));
    let stdout = p.child.stdout.take().expect("stdout");
    let counts = Arc::clone(&per_minute);
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if !line.starts_with(r#"{"type":"sample""#) {
                continue;
            }
            let t_s = serde_json::from_str::<serde_json::Value>(&line)
                .ok()
                .and_then(|v| v["t_s"].as_f64())
                .unwrap_or(0.0);
            let minute = (t_s / 60.0).floor().max(0.0) as usize;
            let mut c = counts.lock().unwrap_or_else(|e| e.into_inner());
            if c.0.len() <= minute {
                c.0.resize(minute + 1, 0);
            }
            c.0[minute] += line.len() as u64 + 1;
            c.1 += 1;
        }
    });
    let err = drain(p.child.stderr.take().expect("stderr"));
    let mut m = Measured {
        bundle,
        ..Default::default()
    };
    let limit = Duration::from_secs(seconds + 600);
    let mut next = t0 + RSS_EVERY;
    let mut last_minute_logged = 0u64;
    loop {
        check_interrupted();
        if let Some((status, maxrss)) = reap(pid) {
            m.exit = Some(status);
            m.peak_kib = maxrss;
            break;
        }
        if t0.elapsed() > limit {
            panic!("scanprof (pid {pid}) still runs after {limit:?}");
        }
        if Instant::now() >= next {
            next += RSS_EVERY;
            let t = t0.elapsed().as_secs_f64();
            if let Some((rss, hwm)) = rss_kib(pid) {
                // Only while the command still sends: after it, scanprof renders the bundle.
                if t <= seconds as f64 {
                    m.rss.push((t, rss));
                    m.hwm_kib = hwm;
                    if let Some(c) = cpu_s(pid) {
                        m.cpu.push((t, c));
                    }
                }
                let minute = (t / 60.0) as u64;
                if minute > last_minute_logged {
                    last_minute_logged = minute;
                    let bytes = per_minute
                        .lock()
                        .map(|c| c.0.get(minute as usize - 1).copied().unwrap_or(0))
                        .unwrap_or(0);
                    log(
                        out,
                        &format!(
                            "part {} at {:6.0} s: VmRSS {rss} KiB (first {} KiB), VmHWM {hwm} KiB; minute {} had {bytes} bytes of samples",
                            part.name,
                            t,
                            m.rss.first().map_or(rss, |f| f.1),
                            minute
                        ),
                    );
                }
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    reader.join().expect("stdout reader");
    m.stderr = err.join().unwrap_or_default();
    let c = per_minute.lock().unwrap_or_else(|e| e.into_inner());
    m.bytes_per_minute = c.0.clone();
    m.samples = c.1;
    m
}

fn met(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "NOT met"
    }
}

fn kib(x: f64) -> String {
    format!("{} KiB", thousands(x))
}

fn report(part: &Part, m: &Measured, out: &Mutex<()>) {
    let mut o = String::new();
    use std::fmt::Write as _;
    let _ = writeln!(
        o,
        "\n== part {}: {} min of `scanprof run --json --export --interval {}` over `scanprof send --rate {RATE} --pacer sleep` to a closed port on 127.0.0.1",
        part.name, part.minutes, part.interval
    );
    let _ = writeln!(
        o,
        "scanprof exit: {:?}; {} sample lines on stdout; bundle {}",
        m.exit.map(|s| s.to_string()),
        m.samples,
        m.bundle.display()
    );
    let warnings: Vec<&str> = m
        .stderr
        .lines()
        .filter(|l| l.contains("warning") || l.contains("error"))
        .collect();
    for w in warnings.iter().take(5) {
        let _ = writeln!(o, "  stderr: {w}");
    }
    match (m.rss.first(), m.rss.last()) {
        (Some(first), Some(last)) => {
            let growth = last.1 as f64 - first.1 as f64;
            let max = m.rss.iter().map(|r| r.1).max().unwrap_or(0);
            let _ = writeln!(
                o,
                "RSS: {} at {:.0} s, {} at {:.0} s (max {} over {} readings every 10 s); growth {} over {:.1} min; target <= {}: {}",
                kib(first.1 as f64),
                first.0,
                kib(last.1 as f64),
                last.0,
                kib(max as f64),
                m.rss.len(),
                kib(growth),
                (last.0 - first.0) / 60.0,
                kib(part.rss_target / 1024.0),
                met(growth * 1024.0 <= part.rss_target)
            );
            // One reading per 5 minutes of the run (the first at or after each mark): whether
            // it is flat after warm-up, at a glance.
            let per5: Vec<String> = (0..)
                .map(|k| k as f64 * 300.0)
                .take_while(|mark| *mark <= last.0)
                .filter_map(|mark| m.rss.iter().find(|r| r.0 >= mark.max(first.0)))
                .map(|r| format!("{:.0} min {}", r.0 / 60.0, kib(r.1 as f64)))
                .collect();
            let _ = writeln!(o, "RSS every 5 min: {}", per5.join(", "));
            let _ = writeln!(
                o,
                "peak RSS: {} while the command sent (VmHWM at the last reading), {} over scanprof's whole life (wait4), the bundle's rendering after the command included",
                kib(m.hwm_kib as f64),
                kib(m.peak_kib as f64)
            );
        }
        _ => {
            let _ = writeln!(o, "RSS: no readings (the run ended within 10 s)");
        }
    }
    // scanprof's CPU over the first and the last minute of readings: does a tick cost more as
    // the run goes on?
    if m.cpu.len() >= 12 {
        let share = |a: (f64, f64), b: (f64, f64)| (b.1 - a.1) / (b.0 - a.0) * 100.0;
        let n = m.cpu.len();
        let _ = writeln!(
            o,
            "scanprof CPU: {:.1}% of a core over the first minute of readings, {:.1}% over the last",
            share(m.cpu[0], m.cpu[6]),
            share(m.cpu[n - 7], m.cpu[n - 1])
        );
    }
    // Whole minutes of the send only: the last minute of samples may be partial.
    let whole = ((part.minutes * 60.0) as usize / 60).min(m.bytes_per_minute.len());
    let per_min = &m.bytes_per_minute[..whole];
    let span = 10.min(whole / 2);
    if span == 0 {
        let _ = writeln!(o, "JSON bytes per minute: fewer than 2 whole minutes, not judged");
    } else {
        let mean = |v: &[u64]| v.iter().sum::<u64>() as f64 / v.len() as f64;
        let first = mean(&per_min[..span]);
        let last = mean(&per_min[whole - span..]);
        let change = last / first - 1.0;
        let verdict = if part.judge_json {
            format!("target within 10%: {}", met(change.abs() <= 0.10))
        } else {
            "not a target of this part".to_string()
        };
        let _ = writeln!(
            o,
            "JSON sample bytes per minute: first {span} min {} (minutes 1-{span}), last {span} min {} (minutes {}-{whole}); change {:+.2}%; {verdict}",
            thousands(first),
            thousands(last),
            whole - span + 1,
            change * 100.0
        );
        let _ = writeln!(
            o,
            "  per minute: {}",
            per_min
                .iter()
                .map(|b| thousands(*b as f64))
                .collect::<Vec<_>>()
                .join(" ")
        );
    }
    log(out, &o);
}

fn main() {
    assert!(nix::unistd::geteuid().is_root(), "this bench needs root (BPF)");
    watch_signals();
    let parts_wanted = std::env::var("SOAK_PARTS").unwrap_or_else(|_| "a,b".into());
    let mut parts = Vec::new();
    if parts_wanted.contains('a') {
        parts.push(Part {
            name: "a",
            minutes: minutes("SOAK_MINUTES", 60.0),
            interval: 1.0,
            rss_target: 2.0 * 1024.0 * 1024.0,
            judge_json: true,
        });
    }
    if parts_wanted.contains('b') {
        parts.push(Part {
            name: "b",
            minutes: minutes("SOAK_FAST_MINUTES", 10.0),
            interval: 0.01,
            rss_target: 5.0 * 1024.0 * 1024.0,
            judge_json: false,
        });
    }
    let base = std::env::var_os("SOAK_DIR").map_or_else(std::env::temp_dir, PathBuf::from);
    let dir = nix::unistd::mkdtemp(&base.join("scanprof-soak-XXXXXX")).expect("a directory for the bundles");
    let out = Mutex::new(());
    let when = std::process::Command::new("date")
        .arg("-u")
        .arg("+%Y-%m-%dT%H:%M:%SZ")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    log(
        &out,
        &format!(
            "soak of {} started {when}; MB here = 1024 KiB; bundles in {}",
            bin(),
            dir.display()
        ),
    );
    std::thread::scope(|s| {
        let handles: Vec<_> = parts
            .iter()
            .map(|part| {
                let (dir, out) = (&dir, &out);
                s.spawn(move || {
                    let m = run_part(part, dir, out);
                    report(part, &m, out);
                })
            })
            .collect();
        for h in handles {
            if h.join().is_err() {
                log(&out, "a part failed (see above)");
            }
        }
    });
}
