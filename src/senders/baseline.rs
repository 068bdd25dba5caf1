//! The baseline measurement: what this machine lets the reference sender do before any scanner
//! is blamed. Runs `scanprof send --json` (one subprocess per cell, through
//! `system::child::run_to_end`) over a matrix of pacers x rates and of send methods at full
//! speed, against a receiver on loopback and one in a private lab, and collects the rows beside
//! the machine facts. `scanprof baseline` orchestrates it and `views::baseline` renders it;
//! `run --baseline` takes one cell ([`baseline_at`]).

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::path::Path;
use std::process::{Command, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use nix::sys::socket::{setsockopt, sockopt};
use serde::{Deserialize, Serialize};

use super::methods::MethodKind;
use crate::analysis::Baseline;
use crate::netlab::{Lab, LabConfig, UdpSink};
use crate::system::machine::{Calibration, MachineFacts};
use crate::wrappers::PacerKind;

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
pub const MAX_SECONDS: f64 = 60.0;

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
    pacer: Option<PacerKind>,
    method: MethodKind,
    /// packets per second; 0 = unlimited
    rate: f64,
}

/// The fields of `scanprof send --json` that baseline uses. Every field has a default, so the
/// report of an older sender (without pacer, lateness, CPU or calibration) still parses.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct SenderReport {
    pub pacer: Option<PacerKind>,
    pub slot: Option<String>,
    pub method: Option<MethodKind>,
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
    /// datagrams the kernel dropped at the receiver's socket (its buffer full)
    receiver_dropped: Option<u64>,
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
    pub pacer: PacerKind,
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
    /// datagrams the kernel dropped at the receiver's socket, its buffer full (the receiver fell
    /// behind): sent = receiver_packets + receiver_dropped when nothing else lost any
    pub receiver_dropped: Option<u64>,
    /// why the cell has no figures (the sender's own message when it failed)
    pub error: Option<String>,
}

/// One line of the send-method table (unlimited rate).
#[derive(Debug, Clone, Default, Serialize)]
pub struct MethodRow {
    pub target: String,
    pub method: MethodKind,
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
    /// as in [`PacerRow::receiver_dropped`]
    pub receiver_dropped: Option<u64>,
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

/// What to measure: the pacer x rate cells (method sendto), then the send methods at full
/// speed, each for `seconds`, at each of `targets` ("loopback", "lab") in order.
#[derive(Debug, Clone)]
pub struct Matrix {
    pub pacers: Vec<PacerKind>,
    /// packets per second; 0 = unlimited
    pub rates: Vec<f64>,
    pub methods: Vec<MethodKind>,
    pub targets: Vec<String>,
    /// seconds each cell sends for
    pub seconds: f64,
}

/// Runs the whole matrix (`exe` is the scanprof binary whose `send` runs each cell) until done
/// or `stop` is raised; a lab is created for the "lab" target and removed again.
pub fn measure(exe: &Path, o: &Matrix, stop: &AtomicBool) -> Result<BaselineReport> {
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
            "loopback" => run_matrix(exe, Place::Loopback, o, stop, &mut report),
            "lab" => match Lab::create_watched(&LabConfig::default()) {
                Ok(lab) => {
                    report
                        .machine
                        .add_interface(Some(&lab.sender_ns), &lab.sender_dev);
                    run_matrix(exe, Place::Lab(&lab), o, stop, &mut report);
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
    Ok(report)
}

/// One short measurement at `rate` with `pacer` in a fresh lab (for `attach/run --baseline`).
pub fn baseline_at(rate: f64, pacer: PacerKind, seconds: f64) -> Result<Baseline> {
    ensure!(rate.is_finite() && rate >= 0.0, "rate must be >= 0, not {rate}");
    ensure!(
        seconds.is_finite() && seconds > 0.0 && seconds <= MAX_SECONDS,
        "seconds must be in (0, {MAX_SECONDS}], not {seconds}"
    );
    let exe = std::env::current_exe().context("finding the scanprof binary")?;
    let lab = Lab::create_watched(&LabConfig::default())?;
    let cell = Cell {
        pacer: Some(pacer),
        method: MethodKind::Sendto,
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
        pacer,
        achieved_pps: report.achieved_pps,
        accuracy: accuracy(&report, rate),
        p99_lateness_ns: report.lateness_ns.as_ref().and_then(|l| l.p99),
        receiver_packets: r.received.unwrap_or(0),
        sent: report.sent,
    })
}
/// Runs every pacer cell, then every method cell, at `place`, until done or stopped.
fn run_matrix(exe: &Path, place: Place, o: &Matrix, stop: &AtomicBool, out: &mut BaselineReport) {
    let target = place.name();
    for &pacer in &o.pacers {
        for &rate in &o.rates {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            let cell = Cell {
                pacer: Some(pacer),
                method: MethodKind::Sendto,
                rate,
            };
            let r = run_cell(exe, place, &cell, o.seconds, stop);
            adopt_calibration(&mut out.machine, &r);
            out.pacer_rows.push(pacer_row(target, pacer, rate, r));
        }
    }
    for &method in &o.methods {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let cell = Cell {
            pacer: None,
            method,
            rate: 0.0,
        };
        let r = run_cell(exe, place, &cell, o.seconds, stop);
        out.method_rows.push(method_row(target, method, r));
    }
}

/// Rows that say why a whole target could not be measured.
fn error_rows(target: &str, o: &Matrix, why: &str, out: &mut BaselineReport) {
    for &pacer in &o.pacers {
        for &rate in &o.rates {
            let r = CellResult {
                error: Some(why.to_string()),
                ..CellResult::default()
            };
            out.pacer_rows.push(pacer_row(target, pacer, rate, r));
        }
    }
    for &method in &o.methods {
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

fn pacer_row(target: &str, pacer: PacerKind, rate: f64, r: CellResult) -> PacerRow {
    let mut row = PacerRow {
        target: target.into(),
        pacer,
        requested_pps: requested(rate),
        receiver_packets: r.received,
        receiver_dropped: r.receiver_dropped,
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
        if rate > 0.0 && s.pacer.is_some_and(|p| p != pacer) && row.error.is_none() {
            row.error = Some(format!(
                "the sender paced with {:?}",
                s.pacer.map(PacerKind::as_str)
            ));
        }
    }
    if r.interrupted && row.error.is_none() {
        row.error = Some("interrupted".into());
    }
    row
}

fn method_row(target: &str, method: MethodKind, r: CellResult) -> MethodRow {
    let mut row = MethodRow {
        target: target.into(),
        method,
        receiver_packets: r.received,
        receiver_dropped: r.receiver_dropped,
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
        if s.method.is_some_and(|m| m != method) && row.error.is_none() {
            row.error = Some(format!(
                "the sender used method {:?}",
                s.method.map(MethodKind::as_str)
            ));
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
    if let Some(p) = cell.pacer {
        args.extend(["--pacer".into(), p.to_string()]);
    }
    // The sender's default method is sendto: name it only when it differs, so that a pacer cell
    // depends on no more of the sender's flags than it must.
    if cell.method != MethodKind::Sendto {
        args.extend(["--method".into(), cell.method.to_string()]);
    }
    if cell.method == MethodKind::Packet {
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
    let run = crate::system::child::run_to_end(place.command(exe, &args), limit, TERM_GRACE, stop);
    // Stops at the first lull after the sender has ended: what was in flight is counted.
    let (received, dropped) = receiver.stop();
    let mut r = CellResult {
        received: Some(received),
        receiver_dropped: Some(dropped),
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
/// A cell's receiver.
enum Receiver {
    Loopback(LoopbackSink),
    Lab(UdpSink),
}

impl Receiver {
    /// Datagrams received, counted until the first lull after this call, and the ones the
    /// kernel dropped at the receiver's socket by then.
    fn stop(self) -> (u64, u64) {
        match self {
            Receiver::Loopback(s) => s.stop(),
            Receiver::Lab(s) => {
                let r = s.stop();
                (r.packets, r.dropped)
            }
        }
    }
}

/// A UDP receiver on 127.0.0.1 (ephemeral port) counting datagrams on its own thread.
struct LoopbackSink {
    port: u16,
    stop: Arc<AtomicBool>,
    /// None once joined; gives (received, dropped at the socket)
    thread: Option<JoinHandle<(u64, u64)>>,
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
                    (n, crate::system::socket_drops(&socket).unwrap_or(0))
                }
            })
            .context("cannot start the receiver thread")?;
        Ok(LoopbackSink {
            port,
            stop,
            thread: Some(thread),
        })
    }

    fn stop(mut self) -> (u64, u64) {
        self.finish()
    }

    fn finish(&mut self) -> (u64, u64) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().map_or((0, 0), |t| t.join().unwrap_or((0, 0)))
    }
}

impl Drop for LoopbackSink {
    fn drop(&mut self) {
        self.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `scanprof send --json` of the sender before the pacer rewrite.
    const OLD_SENDER: &str = r#"{"sent":2000,"failed":0,"errors":{},"first_ns":100,"last_ns":1999000100,"elapsed_ns":2000000000,"achieved_pps":1000.5,"requested_pps":1000.0}"#;
    /// A report in the new contract's shape.
    const NEW_SENDER: &str = r#"{"pacer":"tsc","slot":"per-packet","method":"sendto","requested_pps":1000.0,"sent":2000,"failed":1,"errors":{"ENOBUFS":1},"achieved_pps":999.9,"accuracy":0.9999,"first_ns":1,"last_ns":2,"elapsed_ns":3,"lateness_ns":{"mean":900.0,"p50":800.0,"p99":4100.0,"max":90000.0},"gap_ns":{"mean":1000000.0,"p50":1000000.0,"p99":1004000.0,"min":996000.0,"max":1090000.0},"cpu_ns_per_packet":1830.5,"calibration":{"source":"calibrate","tsc_hz":2445430000.0,"kernel_tsc_hz":2445428000.0,"error_ppm":0.8,"took_ns":100000000}}"#;

    fn cell(rate: f64, pacer: Option<PacerKind>, method: MethodKind) -> Cell {
        Cell { pacer, method, rate }
    }

    #[test]
    fn old_and_new_sender_reports_parse() {
        let old = parse_sender_output(&format!("noise\n{OLD_SENDER}\n")).unwrap_or_default();
        assert_eq!((old.sent, old.achieved_pps), (2000, 1000.5));
        assert!(old.lateness_ns.is_none() && old.calibration.is_none() && old.pacer.is_none());
        assert_eq!(accuracy(&old, 1000.0), Some(1.0005));
        let new = parse_sender_output(NEW_SENDER).unwrap_or_default();
        assert_eq!(
            (new.pacer, new.method),
            (Some(PacerKind::Tsc), Some(MethodKind::Sendto))
        );
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
        let a = sender_args(
            &cell(1000.0, Some(PacerKind::Clock), MethodKind::Sendto),
            to,
            2.0,
            "lo",
        );
        assert_eq!(
            a.join(" "),
            "send --to 127.0.0.1:4000 --rate 1000 --duration 2 --json --pacer clock"
        );
        let a = sender_args(&cell(0.0, None, MethodKind::Packet), to, 1.5, "spv1-0s");
        assert_eq!(
            a.join(" "),
            "send --to 127.0.0.1:4000 --rate 0 --duration 1.5 --json --method packet --dev spv1-0s"
        );
        let a = sender_args(&cell(0.0, None, MethodKind::Sendmmsg), to, 1.0, "lo");
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
        let row = pacer_row("lab", PacerKind::Tsc, 1000.0, r);
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
        assert_eq!(
            pacer_row("lab", PacerKind::Clock, 1000.0, r).error.as_deref(),
            Some("the sender paced with Some(\"tsc\")")
        );

        let r = CellResult {
            report: parse_sender_output(OLD_SENDER),
            received: Some(2000),
            cpu_ns: Some(4_000_000),
            ..CellResult::default()
        };
        let row = method_row("loopback", MethodKind::Sendto, r);
        assert_eq!((row.max_pps, row.cpu_ns_per_packet), (Some(1000.5), None));
        assert_eq!(row.rusage_cpu_ns_per_packet, Some(2000.0));
        let r = CellResult {
            report: parse_sender_output(NEW_SENDER),
            ..CellResult::default()
        };
        assert_eq!(
            method_row("loopback", MethodKind::Raw, r).error.as_deref(),
            Some("the sender used method Some(\"sendto\")")
        );
    }

    /// Every send method writes and parses its name; an unknown one is refused by name.
    #[test]
    fn send_methods_are_named_once() {
        for m in MethodKind::ALL {
            assert_eq!(m.as_str().parse::<MethodKind>(), Ok(m));
            assert_eq!(serde_json::to_string(&m).ok(), Some(format!("\"{m}\"")));
        }
        assert_eq!(
            "sendmsg".parse::<MethodKind>(),
            Err(super::super::methods::UnknownMethod("sendmsg".into()))
        );
        assert_eq!(format!("{:<9}|", MethodKind::Raw), "raw      |");
    }
}
