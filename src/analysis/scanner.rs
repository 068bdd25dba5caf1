//! What a scanner's own functions told scanprof, through the uprobes its profile names
//! (`wrappers/*.toml`): the requested rate and where each figure for it came from, its clock
//! calibrations, its work units, the messages between its processes and its own claims about its
//! rate. Built by `ScannerModel` from the records the probes stream; rendered by every view.

use serde::{Deserialize, Serialize};

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
}

/// A family member and the role its profile gives it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoleView {
    pub pid: u32,
    pub comm: String,
    /// `master`, `sender`, `listener`, `scanner`...
    pub role: String,
}

/// The rate the scanner was asked for, from every source that names it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RequestedView {
    /// packets per second the run is compared with (None: unlimited or unknown)
    pub pps: Option<f64>,
    /// `exact`, `cap`, `floor`, `unlimited`, `unknown`
    pub kind: String,
    /// a floor given beside a cap (nmap --min-rate)
    pub floor_pps: Option<f64>,
    /// where the figure comes from: `--requested`, argv, config, work units, rate-setup calls
    pub sources: Vec<RateSource>,
    /// set when two sources disagree by more than 1%, saying which
    pub conflict: Option<String>,
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
}

/// One probe of the profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UprobeView {
    pub name: String,
    /// `rate_setup`, `calibration`, `ipc_send`, `pace_wait`...
    pub role: String,
    pub symbol: String,
    /// the file the probe is on (executable or library), once found
    pub binary: Option<String>,
    pub per_packet: bool,
    pub attached: bool,
    /// family processes it is attached for
    pub pids: Vec<u32>,
    /// calls seen from the family
    pub hits: u64,
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
    /// unit of `delay`: `tsc_cycles`, `ns`, `us`
    pub delay_unit: Option<String>,
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
}

/// Messages one family member sent or received, by kind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IpcView {
    pub pid: u32,
    pub comm: String,
    /// `send` or `recv`
    pub direction: String,
    /// message type as the profile decodes it (`type 4`), or `unix socket` when only the
    /// send syscalls on unix sockets are seen
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
}
