//! `scanprof baseline`: what this machine can do before any scanner is blamed. Runs the reference
//! sender (`scanprof send --json`, one subprocess per cell) over a matrix of pacers x rates and of
//! send methods at full speed, against loopback and a private lab it creates and removes, counts
//! what a receiver got, and prints it beside the machine facts of `crate::system::machine`.

use std::collections::BTreeMap;
use std::io::Read;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::path::Path;
use std::process::{Command, ExitCode, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::analysis::Baseline;
use anyhow::{bail, ensure, Context, Result};
use nix::sys::signal::{kill, Signal};
use nix::sys::socket::{setsockopt, sockopt};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};

use crate::cli::BaselineOptions;
use crate::lab::{Lab, LabConfig, UdpSink};
use crate::system::machine::{Calibration, MachineFacts};

/// UDP port of the lab receiver.
const LAB_PORT: u16 = 9000;
/// Receive buffer of the loopback receiver, in bytes (SO_RCVBUFFORCE, else as far as rmem_max allows).
const LOOPBACK_RCVBUF: usize = 32 << 20;
/// How long a receiver blocks in recv before looking at its stop flag.
const SINK_POLL: Duration = Duration::from_millis(50);
/// Time a sender may take beyond its --duration (start-up, TSC calibration) before it is killed.
const CELL_GRACE: Duration = Duration::from_secs(15);
/// Time a sender has to end after SIGTERM before it gets SIGKILL.
const TERM_GRACE: Duration = Duration::from_secs(3);
/// Longest --seconds accepted per cell.
const MAX_SECONDS: f64 = 60.0;

/// Where a cell's packets go.
#[derive(Clone, Copy)]
enum Place<'a> {
    /// 127.0.0.1, a receiver socket of this process
    Loopback,
    /// the lab's target address, a receiver in the target namespace
    Lab(&'a Lab),
}

/// One sender run: which pacer (None: the sender's default), method and rate.
#[derive(Debug, Clone)]
struct Cell {
    pacer: Option<String>,
    method: String,
    /// packets per second; 0 = unlimited
    rate: f64,
}

/// The fields of `scanprof send --json` that baseline uses. Every field has a default, so the
/// report of an older sender (without pacer, lateness, CPU or calibration) still parses.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct SenderReport {
    pub pacer: Option<String>,
    pub slot: Option<String>,
    pub method: Option<String>,
    /// None (or 0 from older senders) when unlimited
    pub requested_pps: Option<f64>,
    pub sent: u64,
    pub failed: u64,
    /// errno name -> failed calls
    pub errors: BTreeMap<String, u64>,
    pub achieved_pps: f64,
    /// achieved / requested; None when unlimited
    pub accuracy: Option<f64>,
    pub elapsed_ns: u64,
    pub lateness_ns: Option<Spread>,
    pub gap_ns: Option<Spread>,
    pub cpu_ns_per_packet: Option<f64>,
    pub calibration: Option<Calibration>,
}

/// A distribution summary from the sender's report, in ns.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct Spread {
    pub mean: Option<f64>,
    pub p50: Option<f64>,
    pub p99: Option<f64>,
    pub min: Option<f64>,
    pub max: Option<f64>,
}

/// What one cell measured: the sender's report (or why there is none) and the receiver's count.
#[derive(Debug, Default)]
struct CellResult {
    report: Option<SenderReport>,
    error: Option<String>,
    /// datagrams the receiver counted
    received: Option<u64>,
    /// user + system CPU time of the sender process (getrusage of reaped children), in ns
    cpu_ns: Option<u64>,
    /// the cell was cut short by Ctrl-C / SIGTERM
    interrupted: bool,
}

/// One line of a pacer table.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PacerRow {
    /// "loopback" or "lab"
    pub target: String,
    pub pacer: String,
    /// the sender's slot model ("per-packet", "deadline"); None from a sender without one
    pub slot: Option<String>,
    /// packets per second asked for; None = unlimited
    pub requested_pps: Option<f64>,
    /// packets per second between the first and last send, as the sender measured
    pub achieved_pps: Option<f64>,
    /// achieved / requested (the sender's figure, or computed when it has none); None when unlimited
    pub accuracy: Option<f64>,
    /// 99th percentile of how late a packet left against its slot, in ns; None when unlimited
    pub p99_lateness_ns: Option<f64>,
    /// packets the kernel accepted from the sender
    pub sent: Option<u64>,
    /// send calls that failed
    pub failed: Option<u64>,
    /// datagrams the receiver counted
    pub receiver_packets: Option<u64>,
    /// why the cell has no figures (the sender's own message when it failed)
    pub error: Option<String>,
}

/// One line of the send-method table (unlimited rate).
#[derive(Debug, Clone, Default, Serialize)]
pub struct MethodRow {
    pub target: String,
    pub method: String,
    /// packets per second at full speed
    pub max_pps: Option<f64>,
    /// CPU time per packet as the sender measured it, in ns
    pub cpu_ns_per_packet: Option<f64>,
    /// the sender process's user + system CPU time (getrusage) per packet sent, in ns
    pub rusage_cpu_ns_per_packet: Option<f64>,
    pub sent: Option<u64>,
    pub failed: Option<u64>,
    /// errno name -> failed send calls
    pub errors: BTreeMap<String, u64>,
    pub receiver_packets: Option<u64>,
    pub error: Option<String>,
}

/// What `scanprof baseline --json` prints.
#[derive(Debug, Clone, Default, Serialize)]
pub struct BaselineReport {
    pub machine: MachineFacts,
    pub pacer_rows: Vec<PacerRow>,
    pub method_rows: Vec<MethodRow>,
    /// seconds each cell sent for
    pub seconds_per_cell: f64,
    /// the matrix was cut short by Ctrl-C / SIGTERM
    pub interrupted: bool,
}

pub fn run(o: &BaselineOptions) -> Result<ExitCode> {
    validate(o)?;
    let exe = std::env::current_exe().context("finding the scanprof binary")?;
    let stop = super::profile::stop_flag()?;
    let mut report = BaselineReport {
        machine: MachineFacts::gather(),
        seconds_per_cell: o.seconds,
        ..BaselineReport::default()
    };
    for target in &o.targets {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        match target.as_str() {
            "loopback" => run_matrix(&exe, Place::Loopback, o, &stop, &mut report),
            "lab" => match Lab::create(&LabConfig::default()) {
                Ok(lab) => {
                    report
                        .machine
                        .add_interface(Some(&lab.sender_ns), &lab.sender_dev);
                    run_matrix(&exe, Place::Lab(&lab), o, &stop, &mut report);
                    if let Err(e) = lab.destroy() {
                        report.machine.warnings.push(format!("{e:#}"));
                    }
                }
                Err(e) => error_rows(target, o, &format!("cannot create the lab: {e:#}"), &mut report),
            },
            other => bail!("unknown target {other:?}: use loopback or lab"),
        }
    }
    report.interrupted = stop.load(Ordering::Relaxed);
    if o.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print!("{}", render_text(&report, &o.pacers));
    }
    Ok(ExitCode::SUCCESS)
}

/// One measurement at `rate` with `pacer` (method sendto) in a fresh lab that is removed again.
/// One short measurement at `rate` with `pacer` in a fresh lab (for `attach/run --baseline`).
pub fn baseline_at(rate: f64, pacer: &str, seconds: f64) -> Result<Baseline> {
    ensure!(rate.is_finite() && rate >= 0.0, "rate must be >= 0, not {rate}");
    ensure!(
        seconds.is_finite() && seconds > 0.0 && seconds <= MAX_SECONDS,
        "seconds must be in (0, {MAX_SECONDS}], not {seconds}"
    );
    let exe = std::env::current_exe().context("finding the scanprof binary")?;
    let lab = Lab::create(&LabConfig::default())?;
    let cell = Cell {
        pacer: Some(pacer.to_string()),
        method: "sendto".into(),
        rate,
    };
    let r = run_cell(&exe, Place::Lab(&lab), &cell, seconds, &AtomicBool::new(false));
    lab.destroy()?;
    let Some(report) = r.report else {
        bail!(
            "baseline at {rate} pps with the {pacer} pacer: {}",
            r.error.unwrap_or_else(|| "no report".into())
        );
    };
    Ok(Baseline {
        rate,
        pacer: pacer.to_string(),
        achieved_pps: report.achieved_pps,
        accuracy: accuracy(&report, rate),
        p99_lateness_ns: report.lateness_ns.as_ref().and_then(|l| l.p99),
        receiver_packets: r.received.unwrap_or(0),
        sent: report.sent,
    })
}

fn validate(o: &BaselineOptions) -> Result<()> {
    ensure!(
        o.seconds.is_finite() && o.seconds > 0.0 && o.seconds <= MAX_SECONDS,
        "--seconds must be more than 0 and at most {MAX_SECONDS}"
    );
    for r in &o.rates {
        ensure!(
            r.is_finite() && *r >= 0.0,
            "--rates: {r} is not a rate (packets per second >= 0; 0 = unlimited)"
        );
    }
    ensure!(
        !o.targets.is_empty(),
        "--targets: name at least one of loopback, lab"
    );
    Ok(())
}

/// Runs every pacer cell, then every method cell, at `place`, until done or stopped.
fn run_matrix(exe: &Path, place: Place, o: &BaselineOptions, stop: &AtomicBool, out: &mut BaselineReport) {
    let target = place.name();
    for pacer in &o.pacers {
        for &rate in &o.rates {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            let cell = Cell {
                pacer: Some(pacer.clone()),
                method: "sendto".into(),
                rate,
            };
            let r = run_cell(exe, place, &cell, o.seconds, stop);
            adopt_calibration(&mut out.machine, &r);
            out.pacer_rows.push(pacer_row(target, pacer, rate, r));
        }
    }
    for method in &o.methods {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let cell = Cell {
            pacer: None,
            method: method.clone(),
            rate: 0.0,
        };
        let r = run_cell(exe, place, &cell, o.seconds, stop);
        out.method_rows.push(method_row(target, method, r));
    }
}

/// Rows that say why a whole target could not be measured.
fn error_rows(target: &str, o: &BaselineOptions, why: &str, out: &mut BaselineReport) {
    for pacer in &o.pacers {
        for &rate in &o.rates {
            let r = CellResult {
                error: Some(why.to_string()),
                ..CellResult::default()
            };
            out.pacer_rows.push(pacer_row(target, pacer, rate, r));
        }
    }
    for method in &o.methods {
        let r = CellResult {
            error: Some(why.to_string()),
            ..CellResult::default()
        };
        out.method_rows.push(method_row(target, method, r));
    }
}

/// The first sender calibration seen becomes a machine fact.
fn adopt_calibration(machine: &mut MachineFacts, r: &CellResult) {
    if machine.sender_calibration.is_none() {
        machine.sender_calibration = r.report.as_ref().and_then(|s| s.calibration.clone());
    }
}

fn requested(rate: f64) -> Option<f64> {
    (rate > 0.0).then_some(rate)
}

/// The sender's accuracy, or achieved / requested when the sender gives none; None when unlimited.
fn accuracy(s: &SenderReport, rate: f64) -> Option<f64> {
    requested(rate)?;
    s.accuracy
        .or_else(|| (s.sent >= 2 && s.achieved_pps > 0.0).then(|| s.achieved_pps / rate))
}

fn pacer_row(target: &str, pacer: &str, rate: f64, r: CellResult) -> PacerRow {
    let mut row = PacerRow {
        target: target.into(),
        pacer: pacer.into(),
        requested_pps: requested(rate),
        receiver_packets: r.received,
        error: r.error,
        ..PacerRow::default()
    };
    if let Some(s) = r.report {
        row.achieved_pps = Some(s.achieved_pps);
        row.accuracy = accuracy(&s, rate);
        // An unpaced run has no slots to be late for (the sender reports 0).
        row.p99_lateness_ns = requested(rate).and(s.lateness_ns.as_ref().and_then(|l| l.p99));
        row.sent = Some(s.sent);
        row.failed = Some(s.failed);
        row.slot = s.slot.clone();
        // Unpaced (rate 0) runs may report pacer "none" whatever was asked.
        if rate > 0.0 && s.pacer.as_deref().is_some_and(|p| p != pacer) && row.error.is_none() {
            row.error = Some(format!("the sender paced with {:?}", s.pacer));
        }
    }
    if r.interrupted && row.error.is_none() {
        row.error = Some("interrupted".into());
    }
    row
}

fn method_row(target: &str, method: &str, r: CellResult) -> MethodRow {
    let mut row = MethodRow {
        target: target.into(),
        method: method.into(),
        receiver_packets: r.received,
        error: r.error,
        ..MethodRow::default()
    };
    if let Some(s) = r.report {
        row.max_pps = Some(s.achieved_pps);
        row.cpu_ns_per_packet = s.cpu_ns_per_packet;
        row.rusage_cpu_ns_per_packet = r
            .cpu_ns
            .filter(|_| s.sent > 0)
            .map(|ns| ns as f64 / s.sent as f64);
        row.sent = Some(s.sent);
        row.failed = Some(s.failed);
        row.errors = s.errors;
        if s.method.as_deref().is_some_and(|m| m != method) && row.error.is_none() {
            row.error = Some(format!("the sender used method {:?}", s.method));
        }
    }
    if r.interrupted && row.error.is_none() {
        row.error = Some("interrupted".into());
    }
    row
}

impl Place<'_> {
    fn name(&self) -> &'static str {
        match self {
            Place::Loopback => "loopback",
            Place::Lab(_) => "lab",
        }
    }

    /// The device a packet socket sends on.
    fn device(&self) -> &str {
        match self {
            Place::Loopback => "lo",
            Place::Lab(lab) => &lab.sender_dev,
        }
    }

    /// Starts a fresh receiver and returns the address to send to.
    fn receiver(&self) -> Result<(SocketAddrV4, Receiver)> {
        match self {
            Place::Loopback => {
                let sink = LoopbackSink::start()?;
                Ok((
                    SocketAddrV4::new(Ipv4Addr::LOCALHOST, sink.port),
                    Receiver::Loopback(sink),
                ))
            }
            Place::Lab(lab) => {
                let sink = lab.udp_sink(LAB_PORT)?;
                Ok((SocketAddrV4::new(lab.target_addr, LAB_PORT), Receiver::Lab(sink)))
            }
        }
    }

    /// `exe args...`, in the lab's sender namespace for the lab.
    fn command(&self, exe: &Path, args: &[String]) -> Command {
        match self {
            Place::Loopback => {
                let mut c = Command::new(exe);
                c.args(args);
                c
            }
            Place::Lab(lab) => lab.command_in_sender(&exe.display().to_string(), args),
        }
    }
}

/// The `scanprof send` arguments of a cell (without the program name).
fn sender_args(cell: &Cell, to: SocketAddrV4, seconds: f64, device: &str) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "send".into(),
        "--to".into(),
        to.to_string(),
        "--rate".into(),
        cell.rate.to_string(),
        "--duration".into(),
        seconds.to_string(),
        "--json".into(),
    ];
    if let Some(p) = &cell.pacer {
        args.extend(["--pacer".into(), p.clone()]);
    }
    // The sender's default method is sendto: name it only when it differs, so that a pacer cell
    // depends on no more of the sender's flags than it must.
    if cell.method != "sendto" {
        args.extend(["--method".into(), cell.method.clone()]);
    }
    if cell.method == "packet" {
        args.extend(["--dev".into(), device.into()]);
    }
    args
}

/// Runs one sender to its end and counts what its receiver got. Failures land in the result.
fn run_cell(exe: &Path, place: Place, cell: &Cell, seconds: f64, stop: &AtomicBool) -> CellResult {
    let (to, receiver) = match place.receiver() {
        Ok(x) => x,
        Err(e) => {
            return CellResult {
                error: Some(format!("cannot start the receiver: {e:#}")),
                ..CellResult::default()
            }
        }
    };
    let args = sender_args(cell, to, seconds, place.device());
    let limit = Duration::from_secs_f64(seconds) + CELL_GRACE;
    let run = run_sender(place.command(exe, &args), limit, stop);
    // Stops at the first lull after the sender has ended: what was in flight is counted.
    let received = receiver.stop();
    let mut r = CellResult {
        received: Some(received),
        ..CellResult::default()
    };
    match run {
        Ok(run) => {
            r.cpu_ns = run.cpu_ns;
            r.interrupted = run.interrupted;
            match parse_sender_output(&run.stdout) {
                Some(report) if run.status.success() => r.report = Some(report),
                _ => r.error = Some(failure_message(run.status, &run.stderr)),
            }
        }
        Err(e) => r.error = Some(format!("{e:#}")),
    }
    r
}

/// The last line of `stdout` that is a JSON sender report.
fn parse_sender_output(stdout: &str) -> Option<SenderReport> {
    stdout
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str::<SenderReport>(l.trim()).ok())
}

/// What to show for a sender that failed: its first line of stderr (clap and scanprof put the
/// reason there) and the exit status.
fn failure_message(status: ExitStatus, stderr: &str) -> String {
    let reason = stderr
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("no report on stdout");
    let reason = ["error: ", "scanprof: "]
        .iter()
        .fold(reason, |r, prefix| r.strip_prefix(prefix).unwrap_or(r));
    format!("sender {status}: {reason}")
}

/// A finished sender process.
struct SenderRun {
    status: ExitStatus,
    stdout: String,
    stderr: String,
    /// user + system CPU of the process, in ns
    cpu_ns: Option<u64>,
    interrupted: bool,
}

/// Starts `cmd`, waits for it (SIGTERM when `stop` is set, SIGKILL past `limit`), reaps it and
/// returns its output and CPU time. Only this child's pid is ever signalled.
fn run_sender(mut cmd: Command, limit: Duration, stop: &AtomicBool) -> Result<SenderRun> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let cpu_before = children_cpu_ns();
    crate::system::child::die_with_parent(&mut cmd);
    let mut child = cmd.spawn().with_context(|| format!("cannot start {cmd:?}"))?;
    let pid = Pid::from_raw(i32::try_from(child.id()).context("pid out of range")?);
    let stdout = read_on_thread(child.stdout.take());
    let stderr = read_on_thread(child.stderr.take());
    let deadline = Instant::now() + limit;
    let mut termed_at: Option<Instant> = None;
    let mut killed_for_time = false;
    let status = loop {
        if let Some(status) = child.try_wait().context("waiting for the sender")? {
            break status;
        }
        let now = Instant::now();
        if termed_at.is_none() && stop.load(Ordering::Relaxed) {
            let _ = kill(pid, Signal::SIGTERM);
            termed_at = Some(now);
        }
        let overdue = now > deadline || termed_at.is_some_and(|t| now > t + TERM_GRACE);
        if overdue && !killed_for_time {
            let _ = kill(pid, Signal::SIGKILL);
            killed_for_time = now > deadline;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let cpu_ns = match (cpu_before, children_cpu_ns()) {
        (Some(a), Some(b)) => b.checked_sub(a),
        _ => None,
    };
    let stdout = stdout.join().unwrap_or_default();
    let mut stderr = stderr.join().unwrap_or_default();
    if killed_for_time {
        stderr = format!("did not end within {limit:?}; killed\n{stderr}");
    }
    Ok(SenderRun {
        status,
        stdout,
        stderr,
        cpu_ns,
        interrupted: termed_at.is_some() || stop.load(Ordering::Relaxed),
    })
}

fn read_on_thread(pipe: Option<impl Read + Send + 'static>) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(mut p) = pipe {
            let mut bytes = Vec::new();
            let _ = p.read_to_end(&mut bytes);
            text = String::from_utf8_lossy(&bytes).into_owned();
        }
        text
    })
}

/// User + system CPU time of this process's reaped children so far, in ns.
fn children_cpu_ns() -> Option<u64> {
    // SAFETY: an all-zero rusage is a valid value of this plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes one rusage into the valid, exclusively borrowed `usage`.
    if unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) } != 0 {
        return None;
    }
    let ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1_000;
    Some(ns(usage.ru_utime) + ns(usage.ru_stime))
}

/// A cell's receiver.
enum Receiver {
    Loopback(LoopbackSink),
    Lab(UdpSink),
}

impl Receiver {
    /// Datagrams received, counted until the first lull after this call.
    fn stop(self) -> u64 {
        match self {
            Receiver::Loopback(s) => s.stop(),
            Receiver::Lab(s) => s.stop().packets,
        }
    }
}

/// A UDP receiver on 127.0.0.1 (ephemeral port) counting datagrams on its own thread.
struct LoopbackSink {
    port: u16,
    stop: Arc<AtomicBool>,
    /// None once joined
    thread: Option<JoinHandle<u64>>,
}

impl LoopbackSink {
    fn start() -> Result<LoopbackSink> {
        let socket = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).context("cannot bind 127.0.0.1")?;
        setsockopt(&socket, sockopt::RcvBufForce, &LOOPBACK_RCVBUF)
            .or_else(|_| setsockopt(&socket, sockopt::RcvBuf, &LOOPBACK_RCVBUF))
            .context("cannot size the loopback receiver's buffer")?;
        socket.set_read_timeout(Some(SINK_POLL))?;
        let port = socket.local_addr()?.port();
        let stop = Arc::new(AtomicBool::new(false));
        let count = Arc::new(AtomicU64::new(0));
        let thread = std::thread::Builder::new()
            .name("baseline-sink".into())
            .spawn({
                let stop = Arc::clone(&stop);
                move || {
                    let mut buf = vec![0u8; 65_536];
                    let mut n = 0u64;
                    loop {
                        match socket.recv(&mut buf) {
                            Ok(_) => n += 1,
                            // A timeout: nothing is queued, so stop here if asked.
                            Err(_) if stop.load(Ordering::Relaxed) => break,
                            Err(_) => {}
                        }
                    }
                    count.store(n, Ordering::Relaxed);
                    n
                }
            })
            .context("cannot start the receiver thread")?;
        Ok(LoopbackSink {
            port,
            stop,
            thread: Some(thread),
        })
    }

    fn stop(mut self) -> u64 {
        self.finish()
    }

    fn finish(&mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().map_or(0, |t| t.join().unwrap_or(0))
    }
}

impl Drop for LoopbackSink {
    fn drop(&mut self) {
        self.finish();
    }
}

// Text rendering ------------------------------------------------------------------------------

/// The whole report as text: machine facts, one table per pacer (in `pacers` order), the
/// method table.
pub fn render_text(r: &BaselineReport, pacers: &[String]) -> String {
    let mut o = machine_text(&r.machine);
    for pacer in pacers {
        let rows: Vec<&PacerRow> = r.pacer_rows.iter().filter(|x| &x.pacer == pacer).collect();
        if rows.is_empty() {
            continue;
        }
        let slot = rows.iter().find_map(|x| x.slot.as_deref());
        o += &format!(
            "\npacer {pacer} (sendto, {}{} s per cell)\n",
            slot.map_or(String::new(), |s| format!("slot {s}, ")),
            r.seconds_per_cell
        );
        o += &format!(
            "  {:<9} {:>10} {:>12} {:>9} {:>11} {:>21}\n",
            "target", "requested", "achieved", "accuracy", "p99 late", "received/sent"
        );
        for x in rows {
            let rate = x.requested_pps.map_or("unlimited".into(), |p| format!("{p:.0}"));
            if let (Some(e), None) = (&x.error, x.sent) {
                o += &format!("  {:<9} {:>10}   error: {e}\n", x.target, rate);
                continue;
            }
            o += &format!(
                "  {:<9} {:>10} {:>12} {:>9} {:>11} {:>21}{}\n",
                x.target,
                rate,
                opt(x.achieved_pps, |v| format!("{v:.1}")),
                opt(x.accuracy, |v| format!("{:.2}%", v * 100.0)),
                opt(x.p99_lateness_ns, duration_text),
                received_text(x.receiver_packets, x.sent),
                x.error.as_ref().map_or(String::new(), |e| format!("  ({e})")),
            );
        }
    }
    if !r.method_rows.is_empty() {
        o += &format!(
            "\nsend methods at full speed ({} s per cell)\n",
            r.seconds_per_cell
        );
        o += &format!(
            "  {:<9} {:<9} {:>12} {:>11} {:>11} {:>21}  {}\n",
            "target", "method", "max pps", "CPU ns/pkt", "rusage ns", "received/sent", "errors"
        );
        for x in &r.method_rows {
            if let (Some(e), None) = (&x.error, x.sent) {
                o += &format!("  {:<9} {:<9}   error: {e}\n", x.target, x.method);
                continue;
            }
            let errors = if x.errors.is_empty() {
                "-".to_string()
            } else {
                x.errors
                    .iter()
                    .map(|(k, v)| format!("{k} {v}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            o += &format!(
                "  {:<9} {:<9} {:>12} {:>11} {:>11} {:>21}  {errors}{}\n",
                x.target,
                x.method,
                opt(x.max_pps, |v| format!("{v:.0}")),
                opt(x.cpu_ns_per_packet, |v| format!("{v:.0}")),
                opt(x.rusage_cpu_ns_per_packet, |v| format!("{v:.0}")),
                received_text(x.receiver_packets, x.sent),
                x.error.as_ref().map_or(String::new(), |e| format!("  ({e})")),
            );
        }
    }
    if r.interrupted {
        o += "\ninterrupted: the matrix was cut short\n";
    }
    o
}

fn machine_text(m: &MachineFacts) -> String {
    let yes = |b: bool| if b { "yes" } else { "no" };
    let mut o = String::from("machine\n");
    o += &format!(
        "  CPU          {} ({} CPUs); TSC constant {}, nonstop {}, known frequency {}\n",
        m.cpu_model,
        m.nproc,
        yes(m.constant_tsc),
        yes(m.nonstop_tsc),
        yes(m.tsc_known_freq)
    );
    o += &format!(
        "  clocksource  {} (available: {})\n",
        m.clocksource,
        m.available_clocksources.join(" ")
    );
    o += &format!("  kernel       {}\n", m.kernel_release);
    o += &format!(
        "  kernel TSC   {} ({})\n",
        opt(m.kernel_tsc_hz, |hz| format!("{:.3} MHz", hz / 1e6)),
        m.kernel_tsc_source
    );
    match &m.sender_calibration {
        Some(c) => {
            o += &format!(
                "  sender TSC   {}: {} beside the kernel's {} ({} ppm), took {}\n",
                if c.source.is_empty() { "?" } else { &c.source },
                opt(c.tsc_hz, |hz| format!("{:.3} MHz", hz / 1e6)),
                opt(c.kernel_tsc_hz.or(m.kernel_tsc_hz), |hz| format!(
                    "{:.3} MHz",
                    hz / 1e6
                )),
                opt(c.error_ppm, |p| format!("{p:+.1}")),
                opt(c.took_ns.map(|n| n as f64), duration_text),
            );
        }
        None => o += "  sender TSC   - (no --pacer tsc cell reported a calibration)\n",
    }
    if let Some(n) = &m.nanosleep {
        o += &format!(
            "  nanosleep    {} asked: overshoot median {}, p99 {}, max {} ({} sleeps)\n",
            duration_text(n.requested_ns as f64),
            duration_text(n.median_ns as f64),
            duration_text(n.p99_ns as f64),
            duration_text(n.max_ns as f64),
            n.samples
        );
    }
    let sysctls: Vec<String> = m.sysctls.iter().map(|(k, v)| format!("{k} = {v}")).collect();
    o += &format!("  sysctls      {}\n", sysctls.join(", "));
    for i in &m.interfaces {
        o += &format!(
            "  interface    {} ({}): qdisc {}, txqueuelen {}\n",
            i.ifname, i.namespace, i.qdisc, i.txqueuelen
        );
    }
    for w in &m.warnings {
        o += &format!("  warning      {w}\n");
    }
    o
}

fn opt<T>(v: Option<T>, f: impl Fn(T) -> String) -> String {
    v.map_or_else(|| "-".to_string(), f)
}

/// "received/sent", with " !" when they differ.
fn received_text(received: Option<u64>, sent: Option<u64>) -> String {
    match (received, sent) {
        (Some(r), Some(s)) => format!("{r}/{s}{}", if r == s { "" } else { " !" }),
        (Some(r), None) => format!("{r}/-"),
        (None, Some(s)) => format!("-/{s}"),
        (None, None) => "-".into(),
    }
}

/// ns as "850 ns", "12.3 us", "4.56 ms".
fn duration_text(ns: f64) -> String {
    if ns < 1e3 {
        format!("{ns:.0} ns")
    } else if ns < 1e6 {
        format!("{:.1} us", ns / 1e3)
    } else {
        format!("{:.2} ms", ns / 1e6)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::system::machine::{InterfaceFacts, NanosleepOvershoot};

    /// `scanprof send --json` of the sender before the pacer rewrite.
    const OLD_SENDER: &str = r#"{"sent":2000,"failed":0,"errors":{},"first_ns":100,"last_ns":1999000100,"elapsed_ns":2000000000,"achieved_pps":1000.5,"requested_pps":1000.0}"#;
    /// A report in the new contract's shape.
    const NEW_SENDER: &str = r#"{"pacer":"tsc","slot":"per-packet","method":"sendto","requested_pps":1000.0,"sent":2000,"failed":1,"errors":{"ENOBUFS":1},"achieved_pps":999.9,"accuracy":0.9999,"first_ns":1,"last_ns":2,"elapsed_ns":3,"lateness_ns":{"mean":900.0,"p50":800.0,"p99":4100.0,"max":90000.0},"gap_ns":{"mean":1000000.0,"p50":1000000.0,"p99":1004000.0,"min":996000.0,"max":1090000.0},"cpu_ns_per_packet":1830.5,"calibration":{"source":"calibrate","tsc_hz":2445430000.0,"kernel_tsc_hz":2445428000.0,"error_ppm":0.8,"took_ns":100000000}}"#;

    fn cell(rate: f64, pacer: Option<&str>, method: &str) -> Cell {
        Cell {
            pacer: pacer.map(String::from),
            method: method.into(),
            rate,
        }
    }

    #[test]
    fn old_and_new_sender_reports_parse() {
        let old = parse_sender_output(&format!("noise\n{OLD_SENDER}\n")).unwrap_or_default();
        assert_eq!((old.sent, old.achieved_pps), (2000, 1000.5));
        assert!(old.lateness_ns.is_none() && old.calibration.is_none() && old.pacer.is_none());
        assert_eq!(accuracy(&old, 1000.0), Some(1.0005));
        let new = parse_sender_output(NEW_SENDER).unwrap_or_default();
        assert_eq!(new.pacer.as_deref(), Some("tsc"));
        assert_eq!(new.lateness_ns.and_then(|l| l.p99), Some(4100.0));
        assert_eq!(new.cpu_ns_per_packet, Some(1830.5));
        assert_eq!(
            new.calibration.and_then(|c| c.kernel_tsc_hz),
            Some(2_445_428_000.0)
        );
        assert_eq!(
            accuracy(&parse_sender_output(NEW_SENDER).unwrap_or_default(), 1000.0),
            Some(0.9999)
        );
        assert_eq!(accuracy(&old, 0.0), None);
        assert!(parse_sender_output("error: unexpected argument\n").is_none());
        assert!(parse_sender_output("").is_none());
    }

    #[test]
    fn unlimited_contract_report_with_nulls_parses() {
        let s = r#"{"pacer":"none","requested_pps":null,"accuracy":null,"sent":5,"achieved_pps":1.0,"calibration":null}"#;
        let r = parse_sender_output(s).unwrap_or_default();
        assert_eq!((r.requested_pps, r.accuracy, r.sent), (None, None, 5));
    }

    #[test]
    fn sender_arguments_follow_the_contract() {
        let to = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 4000);
        let a = sender_args(&cell(1000.0, Some("clock"), "sendto"), to, 2.0, "lo");
        assert_eq!(
            a.join(" "),
            "send --to 127.0.0.1:4000 --rate 1000 --duration 2 --json --pacer clock"
        );
        let a = sender_args(&cell(0.0, None, "packet"), to, 1.5, "spv1-0s");
        assert_eq!(
            a.join(" "),
            "send --to 127.0.0.1:4000 --rate 0 --duration 1.5 --json --method packet --dev spv1-0s"
        );
        let a = sender_args(&cell(0.0, None, "sendmmsg"), to, 1.0, "lo");
        assert!(a.ends_with(&["--method".into(), "sendmmsg".into()]), "{a:?}");
    }

    #[test]
    fn a_failed_sender_is_named_by_its_first_stderr_line() {
        use std::os::unix::process::ExitStatusExt;
        let status = ExitStatus::from_raw(2 << 8);
        let m = failure_message(
            status,
            "\nerror: unexpected argument '--pacer' found\n\nUsage: scanprof send\n",
        );
        assert_eq!(m, "sender exit status: 2: unexpected argument '--pacer' found");
        assert_eq!(
            failure_message(status, ""),
            "sender exit status: 2: no report on stdout"
        );
        assert_eq!(
            failure_message(status, "scanprof: cannot open a raw IP socket\n"),
            "sender exit status: 2: cannot open a raw IP socket"
        );
    }

    #[test]
    fn rows_take_the_sender_figures_and_the_receiver_count() {
        let r = CellResult {
            report: parse_sender_output(NEW_SENDER),
            received: Some(1999),
            cpu_ns: Some(4_000_000),
            ..CellResult::default()
        };
        let row = pacer_row("lab", "tsc", 1000.0, r);
        assert_eq!(row.requested_pps, Some(1000.0));
        assert_eq!((row.accuracy, row.p99_lateness_ns), (Some(0.9999), Some(4100.0)));
        assert_eq!(
            (row.sent, row.receiver_packets, row.error),
            (Some(2000), Some(1999), None)
        );
        // The sender says it paced with tsc, but clock was asked for.
        let r = CellResult {
            report: parse_sender_output(NEW_SENDER),
            ..CellResult::default()
        };
        assert!(pacer_row("lab", "clock", 1000.0, r).error.is_some());

        let r = CellResult {
            report: parse_sender_output(OLD_SENDER),
            received: Some(2000),
            cpu_ns: Some(4_000_000),
            ..CellResult::default()
        };
        let row = method_row("loopback", "sendto", r);
        assert_eq!((row.max_pps, row.cpu_ns_per_packet), (Some(1000.5), None));
        assert_eq!(row.rusage_cpu_ns_per_packet, Some(2000.0));
    }

    fn sample_report() -> BaselineReport {
        let machine = MachineFacts {
            cpu_model: "AMD EPYC".into(),
            nproc: 2,
            constant_tsc: true,
            nonstop_tsc: true,
            tsc_known_freq: true,
            clocksource: "tsc".into(),
            available_clocksources: vec!["tsc".into(), "kvm-clock".into()],
            kernel_tsc_hz: Some(2_445_428_000.0),
            kernel_tsc_source: "kernel log".into(),
            sender_calibration: None,
            nanosleep: Some(NanosleepOvershoot {
                requested_ns: 50_000,
                samples: 200,
                median_ns: 58_100,
                p99_ns: 120_000,
                max_ns: 1_500_000,
            }),
            sysctls: [("net.core.wmem_max".to_string(), 4_194_304)].into(),
            kernel_release: "6.18.44".into(),
            interfaces: vec![InterfaceFacts {
                namespace: "root".into(),
                ifname: "lo".into(),
                qdisc: "noqueue".into(),
                txqueuelen: 1000,
            }],
            warnings: vec![],
        };
        BaselineReport {
            machine,
            pacer_rows: vec![
                PacerRow {
                    target: "lab".into(),
                    pacer: "clock".into(),
                    slot: Some("per-packet".into()),
                    requested_pps: Some(1000.0),
                    achieved_pps: Some(1000.02),
                    accuracy: Some(1.00002),
                    p99_lateness_ns: Some(12_345.0),
                    sent: Some(2000),
                    failed: Some(0),
                    receiver_packets: Some(2000),
                    error: None,
                },
                PacerRow {
                    target: "lab".into(),
                    pacer: "clock".into(),
                    requested_pps: None,
                    receiver_packets: Some(0),
                    error: Some("sender exit status: 2: unexpected argument '--pacer' found".into()),
                    ..PacerRow::default()
                },
            ],
            method_rows: vec![MethodRow {
                target: "loopback".into(),
                method: "sendmmsg".into(),
                max_pps: Some(412_345.6),
                cpu_ns_per_packet: Some(2100.0),
                rusage_cpu_ns_per_packet: Some(2350.4),
                sent: Some(824_000),
                failed: Some(3),
                errors: [("EAGAIN".to_string(), 3)].into(),
                receiver_packets: Some(823_990),
                error: None,
            }],
            seconds_per_cell: 2.0,
            interrupted: false,
        }
    }

    #[test]
    fn text_report_shows_machine_pacer_and_method_tables() {
        let text = render_text(&sample_report(), &["tsc".into(), "clock".into()]);
        let expected = "\
machine
  CPU          AMD EPYC (2 CPUs); TSC constant yes, nonstop yes, known frequency yes
  clocksource  tsc (available: tsc kvm-clock)
  kernel       6.18.44
  kernel TSC   2445.428 MHz (kernel log)
  sender TSC   - (no --pacer tsc cell reported a calibration)
  nanosleep    50.0 us asked: overshoot median 58.1 us, p99 120.0 us, max 1.50 ms (200 sleeps)
  sysctls      net.core.wmem_max = 4194304
  interface    lo (root): qdisc noqueue, txqueuelen 1000

pacer clock (sendto, slot per-packet, 2 s per cell)
  target     requested     achieved  accuracy    p99 late         received/sent
  lab             1000       1000.0   100.00%     12.3 us             2000/2000
  lab        unlimited   error: sender exit status: 2: unexpected argument '--pacer' found

send methods at full speed (2 s per cell)
  target    method         max pps  CPU ns/pkt   rusage ns         received/sent  errors
  loopback  sendmmsg        412346        2100        2350       823990/824000 !  EAGAIN 3
";
        assert_eq!(text, expected, "\n{text}");
    }

    #[test]
    fn json_report_has_the_three_parts() -> Result<()> {
        let v: serde_json::Value = serde_json::to_value(sample_report())?;
        for key in ["machine", "pacer_rows", "method_rows"] {
            assert!(v.get(key).is_some(), "{key} missing: {v}");
        }
        assert_eq!(v["pacer_rows"][1]["requested_pps"], serde_json::Value::Null);
        assert_eq!(v["machine"]["sysctls"]["net.core.wmem_max"], 4_194_304);
        Ok(())
    }

    fn parse(args: &[&str]) -> Result<BaselineOptions> {
        use clap::Parser;
        let cli = crate::cli::Cli::try_parse_from(["scanprof", "baseline"].iter().chain(args))?;
        match cli.command {
            crate::cli::Command::Baseline(o) => Ok(o),
            other => bail!("parsed as {other:?}"),
        }
    }

    #[test]
    fn options_default_to_the_full_matrix() -> Result<()> {
        let o = parse(&[])?;
        assert_eq!(o.rates, vec![100.0, 1000.0, 10_000.0, 100_000.0, 0.0]);
        assert_eq!(o.pacers, vec!["tsc", "clock", "sleep"]);
        assert_eq!(o.methods, vec!["sendto", "raw", "sendmmsg", "packet"]);
        assert_eq!(o.targets, vec!["loopback", "lab"]);
        assert_eq!((o.seconds, o.json), (2.0, false));
        Ok(())
    }

    #[test]
    fn options_take_comma_lists_and_refuse_unknown_names() -> Result<()> {
        let o = parse(&[
            "--rates",
            "1000,0",
            "--pacers",
            "clock",
            "--methods",
            "sendto",
            "--seconds",
            "1",
            "--targets",
            "lab",
            "--json",
        ])?;
        assert_eq!(
            (o.rates, o.pacers, o.methods),
            (
                vec![1000.0, 0.0],
                vec!["clock".to_string()],
                vec!["sendto".to_string()]
            )
        );
        assert_eq!(
            (o.seconds, o.targets, o.json),
            (1.0, vec!["lab".to_string()], true)
        );
        assert!(parse(&["--pacers", "rdtsc"]).is_err());
        assert!(parse(&["--methods", "sendfile"]).is_err());
        assert!(parse(&["--targets", "10.0.0.1"]).is_err());
        // Refused by the parser now (cli's value parsers), before validate sees them.
        assert!(parse(&["--rates=-5"]).is_err());
        assert!(parse(&["--seconds", "0"]).is_err());
        assert!(parse(&["--seconds", "600"]).is_err());
        Ok(())
    }
}
