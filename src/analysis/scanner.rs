//! What a scanner's own functions told scanprof, through the uprobes its profile names
//! (`wrappers/*.toml`): the requested rate and where each figure for it came from, its clock
//! calibrations, its work units, the messages between its processes and its own claims about its
//! rate. Built by `ScannerModel` from the records the probes stream; rendered by every view.

use serde::{Deserialize, Serialize};

use crate::units::whole_or;

/// Everything the profile let scanprof read from the scanner itself.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ScannerView {
    /// profile name (`unicornscan`, `zmap`, `generic`...)
    pub profile: String,
    /// family members the profile recognised, with their roles
    pub roles: Vec<RoleView>,
    pub requested: RequestedView,
    /// every probe of the profile and what became of it
    pub probes: Vec<UprobeView>,
    pub calibrations: Vec<CalibrationView>,
    pub work_units: Vec<WorkUnitView>,
    /// messages between family members, by sender, direction and type
    pub ipc: Vec<IpcView>,
    /// the scanner's own figures beside scanprof's
    pub claims: Vec<ClaimView>,
    /// what could not be read and why (a symbol missing from a stripped binary...)
    pub notes: Vec<String>,
    /// the pacing modes the profile knows, each by the calibration probe that runs when the
    /// scanner uses it: the mode in use is the one whose probe calibrated
    #[serde(default)]
    pub pacers: Vec<PacerView>,
    /// what the scanner does after its last probe, as its profile says (masscan's `--wait`,
    /// zmap's cooldown); None when the profile does not say
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait: Option<String>,
    /// true when the profile says its tool reads no answers to what it sends (`reads_replies =
    /// false`: the reference sender, tcpreplay, iperf3), so its unanswered packets are no loss;
    /// false for a scanner, and in bundles from before this was recorded
    #[serde(default)]
    pub expects_no_replies: bool,
}

impl ScannerView {
    /// Whether the profile is the fallback one ([`GENERIC_PROFILE`]): a family no profile
    /// recognised, not a scanner.
    ///
    /// [`GENERIC_PROFILE`]: crate::wrappers::GENERIC_PROFILE
    pub fn is_generic(&self) -> bool {
        self.profile == crate::wrappers::GENERIC_PROFILE
    }
}

/// How a pacer waits out the rest of a packet's slot: declared by the profile (wrappers).
pub use crate::wrappers::PacerWait;

/// The unit of a delay the scanner derived: declared by the profile (wrappers).
pub use crate::wrappers::DelayUnit;

/// What a requested figure means (`exact`, `cap`, `floor`...): declared by the profile.
pub use crate::wrappers::RateKind;

/// What a probed function means (`rate_setup`, `ipc_send`...): declared by the profile.
pub use crate::wrappers::ProbeRole;

/// Where a rate source's figure comes from: given, observed, or a profile default.
pub use crate::wrappers::RateOrigin;

/// One of the scanner's pacing modes, as its profile names it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PacerView {
    /// the calibration probe that runs when this mode is used (`gtod_init_tslot`)
    pub probe: String,
    /// what people call it (`gettimeofday busy-wait`)
    pub name: String,
    /// the scanner option that selects it (`-d 2`)
    pub option: Option<String>,
    pub waits: PacerWait,
}

impl ScannerView {
    /// The pacing mode the run used: the one whose calibration probe ran last.
    pub fn pacer_in_use(&self) -> Option<&PacerView> {
        let last = self.calibrations.last()?;
        self.pacers.iter().find(|p| p.probe == last.probe)
    }
}

/// A family member and the role its profile gives it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoleView {
    pub pid: u32,
    pub comm: String,
    /// `master`, `sender`, `listener`, `scanner`...
    pub role: String,
}

/// The kind of the IPC counted from send syscalls on unix sockets in a process whose messages no
/// profile probe decoded.
pub const UNDECODED_IPC: &str = "unix socket (undecoded: no ipc probe of the profile fired in this process)";

/// The rate the scanner was asked for, from every source that names it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RequestedView {
    /// packets per second the run is compared with (None: unlimited or unknown)
    pub pps: Option<f64>,
    /// `exact`, `cap`, `floor`, `unlimited`, `unknown`
    pub kind: RateKind,
    /// a floor given beside a cap (nmap --min-rate)
    pub floor_pps: Option<f64>,
    /// where the figure comes from: `--requested`, argv, config, work units, rate-setup calls
    pub sources: Vec<RateSource>,
    /// set when two given or observed sources disagree by more than 1%, saying which (a
    /// profile default disagrees with nothing)
    pub conflict: Option<String>,
    /// what the scanner's rate counts, when each target gets more than one packet (zmap `-P`,
    /// unicornscan's `repeats`): the rate per target beside the packet rate
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit: Option<RateUnitView>,
    /// the concurrency window the rate comes from, for a scanner paced by attempts in flight
    /// rather than a rate option (RustScan's `-b` and `-t`)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<WindowView>,
}

/// A concurrency window: attempts in flight at once and how long each may take.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WindowView {
    /// attempts (connects) in flight at once
    pub concurrency: f64,
    /// how long one attempt may take, ms
    pub timeout_ms: f64,
    /// how the two were read (`argv: -b 200, argv: -t 500 ms`)
    pub source: String,
}

/// What a scanner's rate counts when each target gets several packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RateCounts {
    /// the rate counts targets: each gets N packets, so the packet rate is N x the rate
    /// (zmap's `-r` with `-P N`)
    Targets,
    /// the rate counts packets: each target gets N of them, so targets are covered at the
    /// rate / N (unicornscan's `repeats`)
    Packets,
}

/// The scanner's rate in its own unit and in packets.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RateUnitView {
    pub counts: RateCounts,
    /// packets each target gets
    pub packets_per_target: f64,
    /// where that figure comes from (`argv: -P 4`, `work unit 1: repeats=3`)
    pub source: String,
    /// packets per second the scanner's own settings ask for (not `--requested`)
    pub packet_pps: f64,
    /// targets per second those settings mean: packet_pps / packets_per_target
    pub target_pps: f64,
}

/// One source of the requested rate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RateSource {
    /// how it was read: `argv: -r 1000`, `work unit 1 sent to unisend: pps=1000`,
    /// `init_tslot(1000, delay_type=1)`
    pub source: String,
    /// packets per second it names (None: it says "unlimited" or carries no figure)
    pub pps: Option<f64>,
    /// seconds since attach when it was seen (None for the command line and config)
    pub at_s: Option<f64>,
    /// `given` (a command line, a config file), `observed` (seen at run time) or `default`
    /// (the profile's figure for a scanner given no rate: compared with nothing)
    #[serde(default)]
    pub origin: RateOrigin,
    /// the process whose own command line it was read from (the one that runs the scanner,
    /// behind any wrapper); None when it was read from the command scanprof was given
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process: Option<RateProcess>,
}

/// A process a figure was read from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RateProcess {
    pub pid: u32,
    pub comm: String,
}

impl RateSource {
    /// How every view names it: how it was read, and for a profile default that it is one (a
    /// default is compared with no other source).
    pub fn described(&self) -> String {
        match self.origin {
            RateOrigin::Default => format!(
                "{} [the profile's default, not asked for: compared with no other source]",
                self.source
            ),
            RateOrigin::Given | RateOrigin::Observed => self.source.clone(),
        }
    }
}

/// One probe of the profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UprobeView {
    pub name: String,
    /// `rate_setup`, `calibration`, `ipc_send`, `pace_wait`...
    pub role: ProbeRole,
    pub symbol: String,
    /// the file the probe is on (executable or library), once found
    pub binary: Option<String>,
    pub per_packet: bool,
    pub attached: bool,
    /// family processes it is attached for
    pub pids: Vec<u32>,
    /// calls seen from the family
    pub hits: u64,
    /// returns of those calls (a call in progress, or a probe attached without its return, has
    /// none yet)
    #[serde(default)]
    pub returns: u64,
    /// time from entry to return, summed over the calls that returned, ns
    pub inside_ns: u64,
    /// why it is not attached, or what it costs
    pub note: Option<String>,
}

/// One clock calibration or rate setup with a derived delay.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CalibrationView {
    pub pid: u32,
    pub tid: u32,
    /// the probe (function) that calibrated
    pub probe: String,
    /// seconds since attach when it started
    pub start_s: f64,
    /// how long the calibration took, ms (None until it returned)
    pub duration_ms: Option<f64>,
    /// the rate it calibrated for
    pub pps: Option<f64>,
    /// the per-packet delay it derived, as the scanner stores it
    pub delay: Option<f64>,
    /// unit of `delay`: `tsc_cycles`, `ns`, `us`, `s`
    pub delay_unit: Option<DelayUnit>,
    /// that delay in ns
    pub delay_ns: Option<f64>,
    /// the slot the rate asks for: 1e9 / pps, ns
    pub slot_ns: Option<f64>,
    /// (delay_ns / slot_ns - 1) * 100: positive means slots too long, a rate too low
    pub error_pct: Option<f64>,
}

/// One unit of work the scanner handed to a sender, from hand-over to done.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkUnitView {
    /// 1-based, in hand-over order
    pub index: u32,
    pub sender_pid: Option<u32>,
    /// rate the unit asks for
    pub pps: Option<f64>,
    /// seconds since attach: handed over, rate set up, calibrated, first and last packet, done
    pub handed_s: Option<f64>,
    pub setup_s: Option<f64>,
    pub calibrated_s: Option<f64>,
    pub first_send_s: Option<f64>,
    pub last_send_s: Option<f64>,
    pub done_s: Option<f64>,
    /// packets the sender's send syscalls accepted during the unit
    pub packets: Option<u64>,
    /// packets / (last - first send) stretched by one gap
    pub achieved_pps: Option<f64>,
    /// hand-over to first packet, ms (IPC, setup, calibration)
    pub setup_ms: Option<f64>,
    /// previous unit done to this one handed over, ms
    pub idle_before_ms: Option<f64>,
    /// the sender's own figures for the unit (WORKDONE)
    pub claimed_pps: Option<f64>,
    pub claimed_packets: Option<u64>,
    /// handed over before attach: only its end (done) was seen, so its hand-over, set-up and
    /// packets are not known (absent when false)
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub before_attach: bool,
}

/// Messages one family member sent or received, by kind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IpcView {
    pub pid: u32,
    pub comm: String,
    /// `send` or `recv`
    pub direction: IpcDirection,
    /// message type as the profile decodes it (`type 4`), or `UNDECODED_IPC` when only the
    /// send syscalls on unix sockets are seen (in a process no ipc probe decoded)
    pub kind: String,
    pub messages: u64,
    pub bytes: u64,
    /// seconds since attach of the first and last one (None from syscall counts)
    pub first_s: Option<f64>,
    pub last_s: Option<f64>,
}

/// A figure the scanner gives about itself, beside what scanprof measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClaimView {
    /// what the figure is: `WORKDONE from unisend, unit 1: pps`
    pub what: String,
    pub claimed: f64,
    pub measured: Option<f64>,
    /// (claimed / measured - 1) * 100
    pub diff_pct: Option<f64>,
    /// where scanprof read it (None in bundles written before claims said so)
    #[serde(default)]
    pub source: Option<ClaimSource>,
    /// what kind of figure it is (None for the work-unit reports of a probe)
    #[serde(default)]
    pub figure: Option<StatusFigure>,
    /// the span the claim speaks of, which `measured` covers too (None when nothing was
    /// measured beside it, and in bundles written before claims carried it)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<ClaimWindow>,
}

/// The span a claim speaks of: a work unit's send window (its set-up returned to its end), or
/// the family's. A claim is compared only with what was measured over the same span.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ClaimWindow {
    /// seconds since attach at its start and end
    pub from_s: f64,
    pub to_s: f64,
    /// the work unit whose send window it is (1-based); absent: the family's send window
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit: Option<u32>,
}

impl ClaimWindow {
    /// For people: `work unit 1's send window (0.15-2.43 s)`.
    pub fn label(&self) -> String {
        let what = match self.unit {
            Some(i) => format!("work unit {i}'s send window"),
            None => "the family's send window".to_string(),
        };
        format!("{what} ({:.2}-{:.2} s)", self.from_s, self.to_s)
    }

    /// Whether `other` is the same span, up to `tolerance` of the longer one's length at either
    /// end (a unit's send window starts as its set-up returns, the family's at its first packet
    /// just after).
    pub fn same_span(&self, from_s: f64, to_s: f64, tolerance: f64) -> bool {
        let len = (self.to_s - self.from_s).max(to_s - from_s).max(0.0);
        let slack = len * tolerance;
        (self.from_s - from_s).abs() <= slack && (self.to_s - to_s).abs() <= slack
    }
}

/// Where a claim was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClaimSource {
    /// a message the scanner sent between its processes, read by a uprobe (a work unit's report)
    Probe,
    /// a human-readable status line in its output, matched by a profile's `[[claim]]` pattern
    StatusLine,
    /// its machine-readable status (a file or stream of a profile's `[[status]]`)
    StatusFile,
}

impl ClaimSource {
    /// Short label for people.
    pub fn label(self) -> &'static str {
        match self {
            ClaimSource::Probe => "probe",
            ClaimSource::StatusLine => "status line",
            ClaimSource::StatusFile => "status file",
        }
    }
}

/// One figure the scanner's output gives, as the model is told about it before the run.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimSpec {
    /// what it is, for people (`zmap --status-updates-file: sent-total`)
    pub what: String,
    pub source: ClaimSource,
    pub figure: StatusFigure,
    /// the scanner counts totals from its own start, which scanprof saw (it launched it); false
    /// when attached mid-run: totals are then shown without a measured figure beside them
    pub totals_comparable: bool,
}

impl ClaimSpec {
    /// A rate in a human-readable status line (`[[claim]]`).
    pub fn status_line(what: &str) -> ClaimSpec {
        ClaimSpec {
            what: what.to_string(),
            source: ClaimSource::StatusLine,
            figure: StatusFigure::Rate,
            totals_comparable: false,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The model: from the probes' calls to the view.

use std::collections::{BTreeMap, BTreeSet};

pub use crate::wrappers::StatusFigure;

use crate::collect::family::ProcessInfo;
use crate::collect::uprobes::{ProbeCall, UprobeState};
use crate::collect::ThreadCounters;

/// The requested rate as the scanner's command line (and config) say, from the profile's `[rate]`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ArgvRate {
    pub pps: Option<f64>,
    /// what the figure means, as the profile's `[rate]` reads the command line; None when
    /// nothing was read
    pub kind: Option<RateKind>,
    pub floor_pps: Option<f64>,
    /// how it was read, step by step (`argv: -r 1000`)
    pub provenance: Vec<String>,
    /// given on the command line or in the config, or the profile's default
    pub origin: RateOrigin,
    pub conflicts: Vec<String>,
    /// packets each target gets when the rate read counts targets (zmap `-P`), and that
    /// multiplier as written (`-P 4`); None when the rate counts packets
    pub per_target: Option<(f64, String)>,
    /// the process whose command line it was read from, once the family's execs showed which
    /// process runs the scanner (src/wrappers/exec.rs); None: the command scanprof was given
    pub process: Option<RateProcess>,
    /// the concurrency window the rate was derived from (`[rate.window]`), when it was
    pub window: Option<WindowView>,
}

impl ArgvRate {
    /// The rate a profile's `[rate]` rules read from a command line, and the process whose
    /// command line it was (None: the command scanprof was given).
    pub fn read(rate: &crate::wrappers::RequestedRate, process: Option<RateProcess>) -> ArgvRate {
        ArgvRate {
            pps: rate.pps,
            kind: Some(rate.kind),
            floor_pps: rate.floor_pps,
            provenance: rate.provenance.clone(),
            origin: rate.origin,
            conflicts: rate.conflicts.clone(),
            per_target: rate.per_target_source.clone().map(|text| (rate.per_target, text)),
            process,
            window: rate.window.as_ref().map(|w| WindowView {
                concurrency: w.concurrency,
                timeout_ms: w.timeout_ms,
                source: w.source.clone(),
            }),
        }
    }
}

/// Which way a message went, from the member that counted it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IpcDirection {
    /// received (an `ipc_recv` probe); ordered first, as the names are
    Recv,
    /// sent (an `ipc_send` probe, or a send syscall on a unix socket)
    Send,
}

impl IpcDirection {
    /// The stable name, as in the JSON: `recv` or `send`.
    pub fn as_str(self) -> &'static str {
        match self {
            IpcDirection::Recv => "recv",
            IpcDirection::Send => "send",
        }
    }
}

impl std::fmt::Display for IpcDirection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Messages of one kind from one process: (pid, direction, kind).
type IpcKey = (u32, IpcDirection, String);
/// (messages, bytes, first ns, last ns)
type IpcCount = (u64, u64, u64, u64);

/// What a run's probe calls add up to. Fed in time order, one tick's calls at a time.
#[derive(Debug, Clone)]
pub struct ScannerModel {
    profile: String,
    message_types: BTreeMap<String, String>,
    /// `--requested`, which wins over everything the scanner says
    explicit: Option<f64>,
    argv: ArgvRate,
    /// TSC frequency, to turn a delay in cycles into time
    tsc_hz: Option<f64>,
    /// CLOCK_MONOTONIC ns at attach
    start_ns: u64,
    /// rate sources seen at run time: (source, pps, ns, unit index)
    runtime: Vec<(String, Option<f64>, u64, Option<usize>)>,
    calibrations: Vec<CalibrationView>,
    /// open calibrations by (tid, probe): index into `calibrations`
    open: BTreeMap<(u32, String), usize>,
    units: Vec<Unit>,
    ipc: BTreeMap<IpcKey, IpcCount>,
    /// what each of the figures read from the scanner's output is
    output_claims: Vec<ClaimSpec>,
    /// (claim, value, ns) read from the scanner's output
    readings: Vec<(usize, f64, u64)>,
    /// the latest reading of each total (claim -> (value, ns)): kept apart from `readings`,
    /// which stop growing at their bound, so the last line always counts
    latest: BTreeMap<usize, (f64, u64)>,
    /// what could not be read from the scanner's status (bounded)
    output_notes: Vec<String>,
    /// the profile's pacing modes
    pacers: Vec<PacerView>,
    /// the profile's words for the scanner's wait after its last probe
    pub(super) wait: Option<String>,
    /// the profile says its tool reads no answers (`ScannerProfile::reads_replies` false)
    pub(super) expects_no_replies: bool,
}

#[derive(Debug, Clone, Default)]
struct Unit {
    view: WorkUnitView,
    /// packets per target the unit asks for (unicornscan's `repeats`), when decoded
    repeats: Option<f64>,
    /// the sender thread's packet count when sending began
    packets_at_start: Option<u64>,
    /// when sending began (set-up returned), ns
    start_ns: Option<u64>,
    /// the latest packet send seen while the unit ran, ns
    last_pkt_ns: u64,
}

impl ScannerModel {
    pub fn new(
        profile: &str,
        message_types: BTreeMap<String, String>,
        explicit: Option<f64>,
        argv: ArgvRate,
        tsc_hz: Option<f64>,
        start_ns: u64,
    ) -> ScannerModel {
        ScannerModel {
            profile: profile.to_string(),
            message_types,
            explicit,
            argv,
            tsc_hz,
            start_ns,
            runtime: Vec::new(),
            calibrations: Vec::new(),
            open: BTreeMap::new(),
            units: Vec::new(),
            ipc: BTreeMap::new(),
            output_claims: Vec::new(),
            readings: Vec::new(),
            latest: BTreeMap::new(),
            output_notes: Vec::new(),
            pacers: Vec::new(),
            wait: None,
            expects_no_replies: false,
        }
    }

    /// The process that runs the scanner was seen (at an exec, or at attach): its profile and
    /// the rate its own command line asks for replace what the command scanprof was given said.
    pub fn scanner_process(
        &mut self,
        profile: &str,
        message_types: BTreeMap<String, String>,
        argv: ArgvRate,
    ) {
        self.profile = profile.to_string();
        self.message_types = message_types;
        self.argv = argv;
    }

    /// The profile's words for the scanner's wait after its last probe (`ScannerProfile::wait`).
    pub fn with_wait(mut self, wait: Option<String>) -> ScannerModel {
        self.wait = wait;
        self
    }

    /// Whether the profile's tool reads answers to what it sends
    /// (`ScannerProfile::reads_replies`).
    pub fn with_reads_replies(mut self, reads_replies: bool) -> ScannerModel {
        self.expects_no_replies = !reads_replies;
        self
    }

    /// The profile's pacing modes (`[probe.pacer]` of its calibration probes).
    pub fn with_pacers(mut self, pacers: Vec<PacerView>) -> ScannerModel {
        self.pacers = pacers;
        self
    }

    /// Names the figures read from the scanner's output (its `[[claim]]` status lines, then the
    /// fields of its `[[status]]`), by index.
    pub fn with_output_claims(mut self, specs: Vec<ClaimSpec>) -> ScannerModel {
        self.output_claims = specs;
        self
    }

    /// A figure the scanner wrote about itself: claim `claim` (an index into the specs) is
    /// `value` at `ts_ns`.
    pub fn output_reading(&mut self, claim: usize, value: f64, ts_ns: u64) {
        let Some(spec) = self.output_claims.get(claim) else {
            return;
        };
        if spec.figure == StatusFigure::Rate {
            if self.readings.len() < 100_000 {
                self.readings.push((claim, value, ts_ns));
            }
        } else {
            self.latest.insert(claim, (value, ts_ns));
        }
    }

    /// Something in the scanner's status could not be read (a garbage line, a missing file).
    pub fn output_note(&mut self, note: String) {
        if self.output_notes.len() < 20 && !self.output_notes.contains(&note) {
            self.output_notes.push(note);
        }
    }

    /// The scanner's printed figures: the median of the readings in the second half of the
    /// family's send window (status rates are smoothed, start from zero and fall to zero while
    /// the scanner waits for late replies), beside the rate its send syscalls achieved.
    fn output_claim_views(&self, threads: &[ThreadCounters]) -> Vec<ClaimView> {
        let senders: Vec<&ThreadCounters> = threads.iter().filter(|t| t.packets > 0).collect();
        let packets: u64 = senders.iter().map(|t| t.packets).sum();
        let failed: u64 = threads.iter().map(|t| t.failed_calls).sum();
        let first = senders.iter().map(|t| t.first_send_ns).min().unwrap_or(0);
        let last = senders.iter().map(|t| t.last_send_ns).max().unwrap_or(0);
        let measured =
            (packets > 1 && last > first).then(|| (packets - 1) as f64 * 1e9 / (last - first) as f64);
        let diff = |claimed: f64, m: Option<f64>| m.filter(|m| *m > 0.0).map(|m| (claimed / m - 1.0) * 100.0);
        self.output_claims
            .iter()
            .enumerate()
            .filter_map(|(i, spec)| {
                if spec.figure != StatusFigure::Rate {
                    let (claimed, at_ns) = *self.latest.get(&i)?;
                    // A total is set beside scanprof's only when both count the same span: from
                    // the scanner's start (scanprof launched it) to after its last send (a
                    // scanner may stop writing its status before its last packets: zmap 2.1.1
                    // into a tbf wrote 25 of its 64 targets last).
                    let stale = packets > 0 && at_ns < last;
                    let measured = match spec.figure {
                        _ if !spec.totals_comparable || stale => None,
                        StatusFigure::Sent => Some(packets as f64),
                        StatusFigure::SendFailures => Some(failed as f64),
                        StatusFigure::PcapDrops | StatusFigure::Rate => None,
                    };
                    let since = if !spec.totals_comparable {
                        format!(
                            "last reading, at {:.1} s; counted from the scanner's start, not from attach",
                            self.secs(at_ns)
                        )
                    } else if stale && spec.figure != StatusFigure::PcapDrops {
                        format!(
                            "last reading, at {:.1} s, before the last send at {:.1} s: not comparable",
                            self.secs(at_ns),
                            self.secs(last)
                        )
                    } else {
                        format!("last reading, at {:.1} s", self.secs(at_ns))
                    };
                    // Totals count from the scanner's start (scanprof launched it) to the reading.
                    let window = measured.map(|_| ClaimWindow {
                        from_s: 0.0,
                        to_s: self.secs(at_ns),
                        unit: None,
                    });
                    return Some(ClaimView {
                        what: format!("{} ({since})", spec.what),
                        claimed,
                        measured,
                        diff_pct: diff(claimed, measured),
                        source: Some(spec.source),
                        figure: Some(spec.figure),
                        window,
                    });
                }
                let mine: Vec<(f64, u64)> = self
                    .readings
                    .iter()
                    .filter(|r| r.0 == i)
                    .map(|r| (r.1, r.2))
                    .collect();
                if mine.is_empty() {
                    return None;
                }
                // Readings while sending, from the middle of the window on (one second of slack
                // at the end: a status line comes once a second).
                let mid = first + (last.saturating_sub(first)) / 2;
                let mut late: Vec<f64> = mine
                    .iter()
                    .filter(|r| last > first && r.1 >= mid && r.1 <= last + 1_000_000_000)
                    .map(|r| r.0)
                    .collect();
                let whole = late.is_empty();
                if whole {
                    late = mine.iter().map(|r| r.0).collect();
                }
                late.sort_by(|a, b| a.total_cmp(b));
                let claimed = late[late.len() / 2];
                let which = if whole {
                    format!("median of all {} readings", mine.len())
                } else {
                    format!(
                        "median of {} readings in the second half of sending, of {}",
                        late.len(),
                        mine.len()
                    )
                };
                Some(ClaimView {
                    what: format!("{} ({which})", spec.what),
                    claimed,
                    measured,
                    diff_pct: diff(claimed, measured),
                    source: Some(spec.source),
                    figure: Some(spec.figure),
                    window: measured.map(|_| ClaimWindow {
                        from_s: self.secs(first),
                        to_s: self.secs(last),
                        unit: None,
                    }),
                })
            })
            .collect()
    }

    pub fn set_start(&mut self, start_ns: u64) {
        self.start_ns = start_ns;
    }

    fn secs(&self, ns: u64) -> f64 {
        ns.saturating_sub(self.start_ns) as f64 / 1e9
    }

    /// The rate the run is compared with: `--requested`, else what the scanner set up last
    /// (its current work unit), else its command line.
    pub fn requested_pps(&self) -> Option<f64> {
        if self.explicit.is_some() {
            return self.explicit;
        }
        self.units
            .iter()
            .rev()
            .find_map(|u| u.view.pps)
            .or_else(|| self.runtime.iter().rev().find_map(|r| r.1))
            .or(self.argv.pps)
    }

    /// Takes one tick's calls, in time order.
    pub fn ingest(&mut self, calls: &[ProbeCall]) {
        for c in calls {
            match (c.role, c.entry) {
                (ProbeRole::IpcSend, true) => self.message(c, IpcDirection::Send),
                (ProbeRole::WorkUnit, true) => self.work_unit(c),
                (ProbeRole::IpcRecv, true) => self.message(c, IpcDirection::Recv),
                (ProbeRole::RateSetup, true) => self.rate_setup(c),
                (ProbeRole::RateSetup, false) => self.setup_done(c),
                (ProbeRole::Calibration, true) => self.calibration_start(c),
                (ProbeRole::Calibration, false) => {
                    self.calibration_end(c);
                    self.setup_done(c);
                }
                _ => {}
            }
        }
    }

    fn message(&mut self, c: &ProbeCall, direction: IpcDirection) {
        let kind = match c.values.get("type") {
            Some(t) => {
                let t = *t as i64;
                self.message_types
                    .get(&t.to_string())
                    .cloned()
                    .unwrap_or_else(|| format!("type {t}"))
            }
            None => c.probe.clone(),
        };
        // The same message type can go to different members (unicornscan's WORKUNIT to its
        // sender and to its listener): say which, when the profile tells.
        let kind = match &c.recipient {
            Some(r) => format!("{kind} to {r}"),
            None => kind,
        };
        let bytes = c
            .values
            .get("len")
            .or(c.values.get("bytes"))
            .copied()
            .unwrap_or(0.0) as u64;
        let e = self
            .ipc
            .entry((c.pid, direction, kind.clone()))
            .or_insert((0, 0, c.ts_ns, c.ts_ns));
        e.0 += 1;
        e.1 += bytes;
        e.3 = c.ts_ns;
        if direction != IpcDirection::Send {
            return;
        }
        if let Some(pps) = c.values.get("pps").copied() {
            let index = self.units.len() as u32 + 1;
            self.units.push(Unit {
                view: WorkUnitView {
                    index,
                    pps: Some(pps),
                    handed_s: Some(self.secs(c.ts_ns)),
                    ..Default::default()
                },
                repeats: c.values.get("repeats").copied().filter(|r| *r >= 1.0),
                ..Default::default()
            });
            self.runtime.push((
                format!(
                    "work unit {index} ({kind}) from pid {}: pps={}",
                    c.pid,
                    whole_or(pps, 3)
                ),
                Some(pps),
                c.ts_ns,
                Some(self.units.len() - 1),
            ));
        }
        let claimed_pps = c.values.get("reported_pps").copied();
        let claimed_packets = c.values.get("packets_sent").copied();
        if claimed_pps.is_some() || claimed_packets.is_some() {
            let done_s = self.secs(c.ts_ns);
            let pick = self
                .units
                .iter()
                .rposition(|u| u.view.done_s.is_none() && u.view.sender_pid == Some(c.pid))
                .or_else(|| self.units.iter().rposition(|u| u.view.done_s.is_none()));
            // The unit in progress at attach: its hand-over came before the probes, its end is
            // the first one seen. It is a unit of the table too (its completion is counted).
            let pick = pick.or_else(|| {
                self.units.is_empty().then(|| {
                    self.units.push(Unit {
                        view: WorkUnitView {
                            index: 1,
                            sender_pid: Some(c.pid),
                            before_attach: true,
                            ..Default::default()
                        },
                        ..Default::default()
                    });
                    0
                })
            });
            if let Some(i) = pick {
                let u = &mut self.units[i];
                u.view.done_s = Some(done_s);
                u.view.sender_pid.get_or_insert(c.pid);
                u.view.claimed_pps = claimed_pps;
                u.view.claimed_packets = claimed_packets.map(|p| p as u64);
                if let Some(p0) = u.packets_at_start {
                    u.view.packets = Some(c.packets.saturating_sub(p0));
                }
                u.last_pkt_ns = c.last_pkt_ns;
                if let Some(start) = u.start_ns {
                    let span = c.ts_ns.saturating_sub(start) as f64 / 1e9;
                    if span > 0.0 {
                        u.view.achieved_pps = u.view.packets.map(|p| p as f64 / span);
                    }
                }
            }
        }
    }

    /// A unit of work starts in the calling process (zmap's `shard_init`, one per send thread):
    /// a new unit, set up there; a `pps` among its values is a rate source.
    fn work_unit(&mut self, c: &ProbeCall) {
        let index = self.units.len() as u32 + 1;
        let pps = c.values.get("pps").copied();
        self.units.push(Unit {
            view: WorkUnitView {
                index,
                pps,
                sender_pid: Some(c.pid),
                handed_s: Some(self.secs(c.ts_ns)),
                setup_s: Some(self.secs(c.ts_ns)),
                ..Default::default()
            },
            packets_at_start: Some(c.packets),
            start_ns: Some(c.ts_ns),
            ..Default::default()
        });
        if let Some(p) = pps {
            self.runtime.push((
                format!("{} in pid {}: pps={}", c.probe, c.pid, whole_or(p, 3)),
                Some(p),
                c.ts_ns,
                Some(self.units.len() - 1),
            ));
        }
    }

    fn rate_setup(&mut self, c: &ProbeCall) {
        let args: Vec<String> = c
            .values
            .iter()
            .filter(|(k, _)| k.as_str() != "bytes")
            .map(|(k, v)| format!("{k}={}", whole_or(*v, 3)))
            .collect();
        let pps = c.values.get("pps").copied();
        let setup_s = self.secs(c.ts_ns);
        let pending = self
            .units
            .iter()
            .rposition(|u| u.view.setup_s.is_none() && u.view.done_s.is_none());
        let i = match pending {
            Some(i) => i,
            None => {
                let index = self.units.len() as u32 + 1;
                self.units.push(Unit {
                    view: WorkUnitView {
                        index,
                        pps,
                        ..Default::default()
                    },
                    ..Default::default()
                });
                self.units.len() - 1
            }
        };
        let u = &mut self.units[i];
        u.view.setup_s = Some(setup_s);
        u.view.sender_pid = Some(c.pid);
        u.view.pps = u.view.pps.or(pps);
        u.packets_at_start = Some(c.packets);
        self.runtime.push((
            format!("{}({}) in pid {}", c.probe, args.join(", "), c.pid),
            pps,
            c.ts_ns,
            Some(i),
        ));
    }

    /// Set-up or calibration returned: sending starts now.
    fn setup_done(&mut self, c: &ProbeCall) {
        if let Some(u) = self
            .units
            .iter_mut()
            .rev()
            .find(|u| u.view.sender_pid == Some(c.pid) && u.view.done_s.is_none())
        {
            let s = c.ts_ns.saturating_sub(self.start_ns) as f64 / 1e9;
            u.view.calibrated_s = Some(s);
            u.packets_at_start = Some(c.packets);
            u.start_ns = Some(c.ts_ns);
        }
    }

    fn calibration_start(&mut self, c: &ProbeCall) {
        let pps = c.values.get("pps").copied().or_else(|| {
            self.units
                .iter()
                .rev()
                .find(|u| u.view.sender_pid == Some(c.pid))
                .and_then(|u| u.view.pps)
        });
        self.calibrations.push(CalibrationView {
            pid: c.pid,
            tid: c.tid,
            probe: c.probe.clone(),
            start_s: self.secs(c.ts_ns),
            duration_ms: None,
            pps,
            delay: None,
            delay_unit: None,
            delay_ns: None,
            slot_ns: pps.filter(|p| *p > 0.0).map(|p| 1e9 / p),
            error_pct: None,
        });
        self.open
            .insert((c.tid, c.probe.clone()), self.calibrations.len() - 1);
    }

    fn calibration_end(&mut self, c: &ProbeCall) {
        let Some(i) = self.open.remove(&(c.tid, c.probe.clone())) else {
            return;
        };
        let tsc_hz = self.tsc_hz;
        let cal = &mut self.calibrations[i];
        cal.duration_ms = Some(c.inside_ns as f64 / 1e6);
        let delay = c
            .values
            .get("delay")
            .copied()
            .or(c.ret.filter(|_| !c.values.contains_key("delay")));
        let unit = DelayUnit::ALL
            .into_iter()
            .find(|u| c.values.contains_key(&format!("delay_unit_{}", u.as_str())));
        if let (Some(d), Some(unit)) = (delay, unit) {
            cal.delay = Some(d);
            cal.delay_unit = Some(unit);
            cal.delay_ns = unit.to_ns(d, tsc_hz);
            if let (Some(dn), Some(slot)) = (cal.delay_ns, cal.slot_ns) {
                cal.error_pct = Some((dn / slot - 1.0) * 100.0);
            }
        }
    }

    /// The view as of `threads` (the sample's thread counters) and `processes`.
    pub fn view(
        &self,
        states: &[UprobeState],
        processes: &[ProcessInfo],
        threads: &[ThreadCounters],
    ) -> ScannerView {
        let comm = |pid: u32| {
            processes
                .iter()
                .rev()
                .find(|p| p.pid == pid)
                .map(|p| p.comm.clone())
                .unwrap_or_else(|| "?".to_string())
        };
        let roles = processes
            .iter()
            .filter_map(|p| {
                p.role.as_ref().map(|r| RoleView {
                    pid: p.pid,
                    comm: p.comm.clone(),
                    role: r.clone(),
                })
            })
            .collect();

        let mut units: Vec<WorkUnitView> = Vec::new();
        let mut prev_done: Option<f64> = None;
        for u in &self.units {
            let mut v = u.view.clone();
            // A unit still running, or one whose end the scanner does not announce: count its
            // packets from the sender's threads.
            if v.done_s.is_none() {
                if let (Some(pid), Some(p0)) = (v.sender_pid, u.packets_at_start) {
                    let (packets, last) = threads
                        .iter()
                        .filter(|t| t.pid == pid)
                        .fold((0u64, 0u64), |(p, l), t| (p + t.packets, l.max(t.last_send_ns)));
                    let sent = packets.saturating_sub(p0);
                    v.packets = Some(sent);
                    if let (Some(start), true) = (u.start_ns, sent > 1) {
                        let span = last.saturating_sub(start) as f64 / 1e9;
                        if span > 0.0 {
                            v.achieved_pps = Some((sent - 1) as f64 / span);
                        }
                        v.last_send_s = Some(self.secs(last));
                    }
                }
            } else if u.last_pkt_ns > 0 {
                v.last_send_s = Some(self.secs(u.last_pkt_ns));
            }
            v.first_send_s = v
                .calibrated_s
                .or(v.setup_s)
                .filter(|_| v.packets.unwrap_or(0) > 0);
            let began = v.handed_s.or(v.setup_s);
            v.setup_ms = match (began, v.calibrated_s) {
                (Some(b), Some(c)) => Some((c - b) * 1e3),
                _ => None,
            };
            v.idle_before_ms = match (prev_done, began) {
                (Some(d), Some(b)) => Some((b - d) * 1e3),
                _ => None,
            };
            prev_done = v.done_s.or(prev_done);
            units.push(v);
        }

        let mut claims = Vec::new();
        for v in &units {
            let who = v.sender_pid.map(&comm).unwrap_or_else(|| "the sender".into());
            // The unit's report speaks of the unit, and its packets and rate were measured over
            // its send window: set-up returned to its end (WORKDONE), or to its last packet.
            let window = match (v.calibrated_s, v.done_s.or(v.last_send_s)) {
                (Some(from_s), Some(to_s)) if to_s > from_s => Some(ClaimWindow {
                    from_s,
                    to_s,
                    unit: Some(v.index),
                }),
                _ => None,
            };
            if let Some(c) = v.claimed_pps {
                claims.push(ClaimView {
                    what: format!("pps {who} reported for work unit {}", v.index),
                    claimed: c,
                    measured: v.achieved_pps,
                    diff_pct: v.achieved_pps.filter(|m| *m > 0.0).map(|m| (c / m - 1.0) * 100.0),
                    source: Some(ClaimSource::Probe),
                    figure: Some(StatusFigure::Rate),
                    window: window.filter(|_| v.achieved_pps.is_some()),
                });
            }
            if let Some(c) = v.claimed_packets {
                claims.push(ClaimView {
                    what: format!("packets {who} reported for work unit {}", v.index),
                    claimed: c as f64,
                    measured: v.packets.map(|p| p as f64),
                    diff_pct: v
                        .packets
                        .filter(|m| *m > 0)
                        .map(|m| (c as f64 / m as f64 - 1.0) * 100.0),
                    source: Some(ClaimSource::Probe),
                    figure: Some(StatusFigure::Sent),
                    window: window.filter(|_| v.packets.is_some()),
                });
            }
        }

        claims.extend(self.output_claim_views(threads));

        let mut ipc: Vec<IpcView> = self
            .ipc
            .iter()
            .map(|((pid, dir, kind), (n, bytes, first, last))| IpcView {
                pid: *pid,
                comm: comm(*pid),
                direction: *dir,
                kind: kind.clone(),
                messages: *n,
                bytes: *bytes,
                first_s: Some(self.secs(*first)),
                last_s: Some(self.secs(*last)),
            })
            .collect();
        // Sends on unix sockets counted by the syscall probes, for the processes whose messages
        // no ipc probe decoded (a process whose messages were decoded would be counted twice).
        let decoded: BTreeSet<u32> = self
            .ipc
            .keys()
            .filter(|(_, dir, _)| *dir == IpcDirection::Send)
            .map(|(pid, _, _)| *pid)
            .collect();
        let mut by_pid: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
        for t in threads
            .iter()
            .filter(|t| t.ipc_calls > 0 && !decoded.contains(&t.pid))
        {
            let e = by_pid.entry(t.pid).or_default();
            e.0 += t.ipc_calls;
            e.1 += t.ipc_bytes;
        }
        for (pid, (n, bytes)) in by_pid {
            ipc.push(IpcView {
                pid,
                comm: comm(pid),
                direction: IpcDirection::Send,
                kind: UNDECODED_IPC.into(),
                messages: n,
                bytes,
                first_s: None,
                last_s: None,
            });
        }

        let packets: u64 = threads.iter().map(|t| t.packets).sum();
        let probes: Vec<UprobeView> = states
            .iter()
            .map(|s| UprobeView {
                name: s.name.clone(),
                role: s.role,
                symbol: s.symbol.clone(),
                binary: s.binary.clone(),
                per_packet: s.per_packet,
                attached: s.attached,
                pids: s.pids.clone(),
                hits: s.hits,
                returns: s.returns,
                inside_ns: s.inside_ns,
                note: match (&s.note, s.per_packet && s.attached) {
                    (None, true) => Some(per_packet_cost(s.hits, packets)),
                    (note, _) => note.clone(),
                },
            })
            .collect();
        let notes = states
            .iter()
            .filter(|s| s.enabled && !s.attached)
            .filter_map(|s| s.note.clone())
            .chain(self.output_notes.iter().cloned())
            .collect();

        ScannerView {
            profile: self.profile.clone(),
            roles,
            requested: self.requested_view(&comm),
            probes,
            calibrations: self.calibrations.clone(),
            work_units: units,
            ipc,
            claims,
            notes,
            pacers: self.pacers.clone(),
            wait: self.wait.clone(),
            expects_no_replies: self.expects_no_replies,
        }
    }

    fn requested_view(&self, comm: &dyn Fn(u32) -> String) -> RequestedView {
        let mut sources = Vec::new();
        if let Some(r) = self.explicit {
            sources.push(RateSource {
                source: format!("--requested {}", whole_or(r, 3)),
                pps: Some(r),
                at_s: None,
                origin: RateOrigin::Given,
                process: None,
            });
        }
        let argv_text = self.argv.provenance.join("; ");
        if !argv_text.is_empty() || self.argv.pps.is_some() {
            sources.push(RateSource {
                source: if argv_text.is_empty() {
                    "argv".into()
                } else {
                    argv_text
                },
                pps: self.argv.pps,
                at_s: None,
                origin: self.argv.origin,
                process: self.argv.process.clone(),
            });
        }
        for (text, pps, ns, unit) in self.runtime.iter().take(64) {
            // Name the receiver of a work unit once it is known.
            let text = match unit.and_then(|i| self.units.get(i)) {
                Some(u) if text.starts_with("work unit") => match u.view.sender_pid {
                    Some(p) => format!("{text}, to {} (pid {p})", comm(p)),
                    None => text.clone(),
                },
                _ => text.clone(),
            };
            sources.push(RateSource {
                source: text,
                pps: *pps,
                at_s: Some(self.secs(*ns)),
                origin: RateOrigin::Observed,
                process: None,
            });
        }
        let pps = self.requested_pps();
        let kind = match self.argv.kind {
            _ if self.explicit.is_some() => RateKind::Exact,
            None if !self.runtime.is_empty() => RateKind::Exact,
            None => RateKind::Unknown,
            Some(k) => k,
        };
        RequestedView {
            pps,
            kind,
            floor_pps: self.argv.floor_pps,
            conflict: self.conflict(&sources),
            sources,
            unit: self.rate_unit(),
            window: self.argv.window.clone(),
        }
    }

    /// What the scanner's rate counts, when each target gets more than one packet: the latest
    /// work unit's `repeats` (its rate counts packets), else the command line's multiplier of a
    /// rate that counts targets.
    fn rate_unit(&self) -> Option<RateUnitView> {
        let from_unit = self.units.iter().rev().find_map(|u| {
            let (pps, n) = (u.view.pps?, u.repeats?);
            Some(RateUnitView {
                counts: RateCounts::Packets,
                packets_per_target: n,
                source: format!("work unit {}: repeats={}", u.view.index, whole_or(n, 3)),
                packet_pps: pps,
                target_pps: pps / n,
            })
        });
        let unit = from_unit.or_else(|| {
            let (n, text) = self.argv.per_target.clone()?;
            let pps = self.argv.pps?;
            Some(RateUnitView {
                counts: RateCounts::Targets,
                packets_per_target: n,
                source: format!("argv: {text}"),
                packet_pps: pps,
                target_pps: pps / n,
            })
        })?;
        (unit.packets_per_target > 1.0 && unit.packet_pps > 0.0).then_some(unit)
    }

    /// The first disagreement beyond 1% between sources that name the same rate: the command
    /// line against what the scanner set up, and a work unit against its own set-up. Only given
    /// and observed figures disagree: a profile default is what the scanner does when nobody
    /// asks, so `--requested` or a rate set up at run time overrides it and contradicts nothing.
    fn conflict(&self, sources: &[RateSource]) -> Option<String> {
        let differ = |a: f64, b: f64| (a - b).abs() > 0.01 * a.abs().max(b.abs());
        let mut said: Vec<String> = self.argv.conflicts.clone();
        let fixed: Vec<&RateSource> = sources
            .iter()
            .filter(|s| s.at_s.is_none() && s.pps.is_some() && s.origin != RateOrigin::Default)
            .collect();
        for (i, a) in fixed.iter().enumerate() {
            for b in &fixed[i + 1..] {
                if differ(a.pps.unwrap(), b.pps.unwrap()) {
                    said.push(format!(
                        "{} says {} pps but {} says {}",
                        a.source,
                        whole_or(a.pps.unwrap(), 3),
                        b.source,
                        whole_or(b.pps.unwrap(), 3)
                    ));
                }
            }
        }
        let argv_exact = self.argv.pps.filter(|_| {
            self.argv.origin != RateOrigin::Default
                && matches!(self.argv.kind, Some(RateKind::Exact | RateKind::Cap))
        });
        for (text, pps, _, unit) in &self.runtime {
            let Some(p) = pps else { continue };
            if let Some(a) = argv_exact {
                if differ(a, *p) {
                    said.push(format!(
                        "the command line asks for {} pps but {text} says {}",
                        whole_or(a, 3),
                        whole_or(*p, 3)
                    ));
                }
            }
            if let Some(u) = unit.and_then(|i| self.units.get(i)) {
                if let Some(up) = u.view.pps.filter(|up| differ(*up, *p)) {
                    said.push(format!(
                        "work unit {} asks for {} pps but {text} says {}",
                        u.view.index,
                        whole_or(up, 3),
                        whole_or(*p, 3)
                    ));
                }
            }
        }
        said.dedup();
        (!said.is_empty()).then(|| said.join("; "))
    }
}

/// What a per-packet probe costs the scanner: its hits per packet times the cost of a hit
/// measured by benches/profile_probes.rs (docs/benchmarks.md).
fn per_packet_cost(hits: u64, packets: u64) -> String {
    let per_packet = if packets > 0 {
        hits as f64 / packets as f64
    } else {
        0.0
    };
    format!(
        "per-packet probe: {hits} hits ({per_packet:.2} per packet); a hit with its return costs the \
         scanner about {:.1}-{:.1} us of CPU on the machines measured (docs/benchmarks.md), so about \
         {:.1}-{:.1} us per packet",
        UPROBE_HIT_NS.0 / 1e3,
        UPROBE_HIT_NS.1 / 1e3,
        per_packet * UPROBE_HIT_NS.0 / 1e3,
        per_packet * UPROBE_HIT_NS.1 / 1e3
    )
}

/// CPU cost of one uprobe hit with its return, ns: the range benches/profile_probes.rs measured
/// on the reference sender (2026-11-21). Functions whose first instruction the kernel cannot
/// emulate cost more (a single-stepped first instruction costs several times the measured 2.6 to 3.9 us).
pub const UPROBE_HIT_NS: (f64, f64) = (2_600.0, 3_900.0);

/// A number as people write it: no trailing `.0`.
#[cfg(test)]
#[path = "scanner_tests.rs"]
mod tests;
