//! How long scanprof takes to start watching: figures printed, not asserted.
//!
//! `cargo bench --bench attach` (as root; about a minute after the build). In interleaved rounds
//! (the order rotates every round; medians at the end):
//!
//! 1. `scanprof attach -p PID --json` on a sleeping process: from the start of scanprof to its
//!    `started` line (every probe attached and the family registered: probes active), and to its
//!    first `sample` line (the first tick; `--interval` is 1 s).
//! 2. The same with 1,000 more sleeping processes on the machine (started by the bench): the
//!    time must not grow with the machine's process count.
//! 3. `scanprof run --json -- date +%s%N`: from the start of scanprof to the command's exec, as
//!    the command itself reads CLOCK_REALTIME.
//!
//! With `SCANPROF_BEFORE=/path/to/an/older/scanprof`, each round measures that binary too, so a
//! change is measured against the old build in the same run. A last run with `SCANPROF_DEBUG=1`
//! prints where the time goes (scanprof's own timing lines, one per phase).
//!
//! No traffic. Every child is ended by its own pid on the way out, also on panic or Ctrl-C.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::*;
use nix::sys::signal::Signal;

const BIN: &str = env!("CARGO_BIN_EXE_scanprof");
const ROUNDS: usize = 9;
/// Sleeping processes added for part 2.
const CROWD: usize = 1_000;
const LIMIT: Duration = Duration::from_secs(30);

fn sleeper() -> Proc {
    let mut c = Command::new("sleep");
    c.arg("600").stdin(Stdio::null()).stdout(Stdio::null());
    Proc::spawn(c, "sleep", Signal::SIGKILL)
}

/// `BIN attach -p PID --json --duration SECONDS`.
fn attach_command(bin: &str, pid: u32, seconds: &str) -> Command {
    let mut cmd = Command::new(bin);
    cmd.args(["attach", "-p", &pid.to_string(), "--json", "--duration", seconds]);
    cmd
}

/// ms from the start of `scanprof attach` to its `started` line and to its first `sample` line.
fn attach_once(bin: &str) -> (f64, f64) {
    let target = sleeper();
    let mut cmd = attach_command(bin, target.pid(), "1.3");
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let t0 = Instant::now();
    let mut p = Proc::spawn(cmd, "scanprof attach", Signal::SIGINT);
    let (tx, rx) = mpsc::channel();
    let out = p.child.stdout.take().expect("stdout");
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send((Instant::now(), line)).is_err() {
                return;
            }
        }
    });
    let (mut started, mut tick) = (None, None);
    while tick.is_none() {
        check_interrupted();
        let (at, line) = rx
            .recv_timeout(LIMIT)
            .unwrap_or_else(|_| panic!("{bin} attach printed no sample line within {LIMIT:?}"));
        let ms = at.duration_since(t0).as_secs_f64() * 1e3;
        if line.starts_with(r#"{"type":"started""#) {
            started = Some(ms);
        } else if line.starts_with(r#"{"type":"sample""#) {
            tick = Some(ms);
        }
    }
    let status = p.wait(LIMIT);
    assert!(status.success(), "{bin} attach failed: {status}");
    (
        started.expect("a started line before the first sample"),
        tick.unwrap_or_default(),
    )
}

/// ms from the start of `scanprof run` to the exec of its command.
fn run_once(bin: &str) -> f64 {
    let mut cmd = Command::new(bin);
    cmd.args(["run", "--json", "--duration", "5", "--", "date", "+%s%N"]);
    let t0 = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_nanos();
    // Under --json the command's stdout goes to scanprof's stderr.
    let (status, _, err) = run_capture(cmd, "scanprof run", Signal::SIGINT, LIMIT);
    assert!(status.success(), "{bin} run failed: {status}\n{err}");
    let at: u128 = err
        .lines()
        .find_map(|l| l.trim().parse().ok().filter(|n: &u128| *n > t0))
        .unwrap_or_else(|| panic!("no time printed by the command in:\n{err}"));
    (at - t0) as f64 / 1e6
}

#[derive(Default)]
struct Figures {
    active: Vec<f64>,
    tick: Vec<f64>,
    crowd_active: Vec<f64>,
    exec: Vec<f64>,
}

fn main() {
    assert!(nix::unistd::geteuid().is_root(), "this bench needs root (BPF)");
    watch_signals();
    let t0 = Instant::now();
    let mut bins = vec![("this build", BIN.to_string())];
    if let Ok(before) = std::env::var("SCANPROF_BEFORE") {
        bins.push(("SCANPROF_BEFORE", before));
    }
    for (what, bin) in &bins {
        println!("{what}: {bin}");
    }
    let processes = std::fs::read_dir("/proc")
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
                .count()
        })
        .unwrap_or(0);
    println!("processes on the machine: {processes}; {ROUNDS} rounds\n");

    let mut figures: Vec<Figures> = bins.iter().map(|_| Figures::default()).collect();
    for round in 0..ROUNDS {
        let mut order: Vec<usize> = (0..bins.len()).collect();
        order.rotate_left(round % bins.len());
        for &i in &order {
            let (active, tick) = attach_once(&bins[i].1);
            let exec = run_once(&bins[i].1);
            println!(
                "round {}: {:<15} attach -> probes active {active:6.1} ms, -> first tick {tick:7.1} ms; run -> exec {exec:6.1} ms",
                round + 1,
                bins[i].0
            );
            figures[i].active.push(active);
            figures[i].tick.push(tick);
            figures[i].exec.push(exec);
        }
    }

    println!("\nwith {CROWD} more sleeping processes:");
    let crowd: Vec<Proc> = (0..CROWD).map(|_| sleeper()).collect();
    for round in 0..ROUNDS.min(5) {
        let mut order: Vec<usize> = (0..bins.len()).collect();
        order.rotate_left(round % bins.len());
        for &i in &order {
            let (active, _) = attach_once(&bins[i].1);
            println!(
                "round {}: {:<15} attach -> probes active {active:6.1} ms",
                round + 1,
                bins[i].0
            );
            figures[i].crowd_active.push(active);
        }
    }
    drop(crowd);

    println!("\nmedians:");
    println!(
        "| build | attach -> probes active | attach -> first tick | attach -> active, {CROWD} more processes | run -> exec |"
    );
    println!("|---|---:|---:|---:|---:|");
    for (i, (what, _)) in bins.iter().enumerate() {
        let f = &figures[i];
        println!(
            "| {what} | {:.0} ms | {:.0} ms | {:.0} ms | {:.0} ms |",
            median(&f.active),
            median(&f.tick),
            median(&f.crowd_active),
            median(&f.exec)
        );
    }

    println!("\nwhere the time goes (this build, SCANPROF_DEBUG=1: libbpf's debug log is printed too):");
    let target = sleeper();
    let mut cmd = attach_command(BIN, target.pid(), "1.2");
    cmd.env("SCANPROF_DEBUG", "1");
    let (status, _, err) = run_capture(cmd, "scanprof attach", Signal::SIGINT, LIMIT);
    assert!(status.success(), "attach with SCANPROF_DEBUG failed: {status}");
    for line in err.lines().filter(|l| l.starts_with("scanprof: timing:")) {
        println!("  {}", line.trim_start_matches("scanprof: timing: "));
    }
    drop(target);
    println!("\nbench took {:.0} s", t0.elapsed().as_secs_f64());
}
