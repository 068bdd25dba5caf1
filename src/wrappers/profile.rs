//! The scanner-profile schema: serde types for `wrappers/<scanner>.toml`, parsed strictly (unknown
//! keys are errors, `schema = 1` is checked first) and validated. A profile is data only: how to
//! recognise the scanner's processes, how to read its requested rate, and which functions to
//! uprobe and decode. `super::rate` interprets `[rate]`; the uprobe side reads `[[probe]]`.

use serde::Deserialize;

/// The only profile schema version this build reads.
pub const SCHEMA_VERSION: u32 = 1;

/// Why a profile was refused. Every message names the profile and the key (and, from the TOML
/// parser, the line and column).
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// The text is not valid TOML, or a key is unknown, missing or of the wrong type.
    #[error("profile {origin}: {message}")]
    Toml {
        /// Where the text came from (file name or `<text>`).
        origin: String,
        /// The parser's message, with line, column and key.
        message: String,
    },
    /// `schema` is missing or not a version this build reads.
    #[error("profile {origin}, key 'schema' (line {line}): {message}")]
    Schema {
        /// Where the text came from.
        origin: String,
        /// 1-based line of the `schema` key, 0 if absent.
        line: usize,
        /// What is wrong and what to do.
        message: String,
    },
    /// The keys parse, but their values contradict each other.
    #[error("profile '{profile}', key '{key}': {message}")]
    Invalid {
        /// The profile's `name`.
        profile: String,
        /// Dotted path of the offending key, e.g. `probe[2].buffer.len_arg`.
        key: String,
        /// What is wrong.
        message: String,
    },
}

/// One scanner's profile, the contents of one `wrappers/<scanner>.toml`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScannerProfile {
    /// Schema version; must equal [`SCHEMA_VERSION`].
    pub schema: u32,
    /// Short name (`unicornscan`, `masscan`, ...), unique in a `ProfileSet`.
    pub name: String,
    /// One line for people: which scanner and versions the facts come from.
    pub description: String,
    /// True for the generic profile that recognises any process no other profile claims.
    #[serde(default)]
    pub fallback: bool,
    /// The scanner's processes and their roles, in matching order.
    #[serde(default, rename = "process")]
    pub processes: Vec<ProcessRule>,
    /// How to read the requested rate from the command line and config file.
    pub rate: RateRules,
    /// Functions to uprobe.
    #[serde(default, rename = "probe")]
    pub probes: Vec<Probe>,
    /// Names of IPC message types, by the value of a probe's `type` argument (`4 = "WORKUNIT"`).
    #[serde(default)]
    pub message_types: std::collections::BTreeMap<String, String>,
    /// The scanner's own rate figures in its output (a status line), read when scanprof
    /// launches it.
    #[serde(default, rename = "claim")]
    pub claims: Vec<OutputClaim>,
    /// The scanner's machine-readable status (a file or stream its command line turns on), read
    /// while it runs.
    #[serde(default, rename = "status")]
    pub status: Vec<super::status::StatusRule>,
    /// What the scanner does after its last probe, in words (masscan's `--wait`, zmap's
    /// cooldown): the name of the run's waiting phase in the views and the trace.
    #[serde(default)]
    pub wait: Option<String>,
    /// Whether the tool reads answers to what it sends, as a scanner does (default true). False
    /// for senders that expect none (the reference sender, tcpreplay, iperf3's datagrams): what
    /// goes unanswered is then no loss, and `lost_beyond_host` is not judged.
    #[serde(default = "reads_replies_by_default")]
    pub reads_replies: bool,
}

/// A profile that does not say reads replies: scanners do.
fn reads_replies_by_default() -> bool {
    true
}

/// A rate the scanner prints about itself, found with a regular expression in its output.
/// Lines end at `\n` or `\r` (status lines that overwrite themselves).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputClaim {
    /// Short name (`status_rate`).
    pub name: String,
    /// `stdout` or `stderr`.
    pub stream: String,
    /// Regular expression: group 1 is the number; an optional group 2 is its unit, a key of
    /// `units`.
    pub pattern: String,
    /// Multiplier from the number to packets per second (when there is no unit group).
    #[serde(default = "one")]
    pub scale: f64,
    /// Multipliers by unit as printed (`"Kp/s" = 1000`).
    #[serde(default)]
    pub units: std::collections::BTreeMap<String, f64>,
    /// What the figure is, for people (`masscan's status rate: send calls per second`).
    pub what: String,
}

fn one() -> f64 {
    1.0
}

/// One process of a scanner: how to recognise it and which role it plays.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessRule {
    /// Role of the process (`master`, `sender`, `listener`, `scanner`...).
    pub role: String,
    /// Executable names (basename of /proc/PID/exe) or absolute paths.
    #[serde(default)]
    pub exe: Vec<String>,
    /// `comm` values (compared on the kernel's 15-byte truncation).
    #[serde(default)]
    pub comm: Vec<String>,
    /// When not empty, the process is this one only if the first argument after the executable
    /// is one of these (`scanprof send`, not `scanprof recv`): recognition then needs the
    /// command line, and a process known only by its exe or comm is not matched.
    #[serde(default)]
    pub subcommand: Vec<String>,
    /// Role of the process that starts this one, if not the user.
    #[serde(default)]
    pub parent: Option<String>,
    /// Free text: how it is started (fork + execve, environment, privileges).
    #[serde(default)]
    pub note: Option<String>,
    /// Threads with a role of their own.
    #[serde(default, rename = "thread")]
    pub threads: Vec<ThreadRule>,
    /// Where the executable usually is, absolute or relative to the directory of the executable
    /// of the process scanprof attached to or launched (`../libexec/unicornscan/unisend`). Rare
    /// probes are attached to these files before the process exists, so that a child exec'd
    /// after start-up is probed from its first instruction.
    #[serde(default)]
    pub paths: Vec<String>,
}

/// A thread with a role inside a process (e.g. masscan's TX thread).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ThreadRule {
    /// Role of the thread (`tx`, `rx`, `status`, `monitor`...).
    pub role: String,
    /// How to tell it apart from its siblings (threads often share the process's comm).
    pub pick: ThreadPick,
    /// With `pick = "comm"`: the thread's comm.
    #[serde(default)]
    pub comm: Option<String>,
    /// Free text for people.
    #[serde(default)]
    pub note: Option<String>,
}

/// How a thread is picked out among its siblings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ThreadPick {
    /// The main thread (tid == tgid).
    Main,
    /// The thread that issues the send syscalls.
    Sends,
    /// The thread that receives replies.
    Receives,
    /// By its own comm (`comm` key).
    Comm,
    /// None of the above: any other thread.
    Other,
}

/// Which code interprets `[rate]`: the generic option table, or that plus a grammar of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RateModel {
    /// Only the `[[rate.option]]` and `[[rate.multiplier]]` tables.
    Options,
    /// The tables plus unicornscan's mode strings (`-mT500`, `-mA100+T500`) and per-target modes
    /// (`host:mT500,ports`): one work unit per phase or target.
    Unicornscan,
}

/// What a requested figure means. The default is `unknown`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RateKind {
    /// The scanner paces at this rate.
    Exact,
    /// An upper bound (nmap `--max-rate`).
    Cap,
    /// A lower bound (nmap `--min-rate`).
    Floor,
    /// No pacing: as fast as possible.
    Unlimited,
    /// No requested rate could be read.
    #[default]
    Unknown,
}

impl std::fmt::Display for RateKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl RateKind {
    /// The kind as profiles and the JSON output write it.
    pub fn as_str(self) -> &'static str {
        match self {
            RateKind::Exact => "exact",
            RateKind::Cap => "cap",
            RateKind::Floor => "floor",
            RateKind::Unlimited => "unlimited",
            RateKind::Unknown => "unknown",
        }
    }
}

/// The requested-rate rules of a scanner.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateRules {
    /// Which code interprets these rules.
    pub kind: RateModel,
    /// The scanner's built-in rate when nothing is given (in `default_unit`).
    #[serde(default)]
    pub default: Option<f64>,
    /// Unit of `default`; `pps` unless told.
    #[serde(default = "RateUnit::pps")]
    pub default_unit: RateUnit,
    /// What the default means; `unknown` when there is none.
    #[serde(default = "RateKind::unknown")]
    pub default_kind: RateKind,
    /// Free text shown with the default (why there is or is no default).
    #[serde(default)]
    pub default_note: Option<String>,
    /// Config-file key holding the rate in packets per second (`pps` in unicorn.conf); the
    /// command line wins over it.
    #[serde(default)]
    pub config_key: Option<String>,
    /// With `kind = "unicornscan"`: the flags that take a mode string.
    #[serde(default)]
    pub mode_flags: Vec<String>,
    /// Bytes per packet on the wire (with preamble, FCS, gap) for converting `bits_per_s`.
    #[serde(default)]
    pub wire_bytes: Option<f64>,
    /// Why `wire_bytes` has this value.
    #[serde(default)]
    pub wire_bytes_note: Option<String>,
    /// Whether `default` counts targets per second (multiplied by `[[rate.multiplier]]`).
    #[serde(default)]
    pub default_per_target: bool,
    /// Free text, copied into every result's provenance (e.g. masscan's RST budget).
    #[serde(default)]
    pub note: Option<String>,
    /// Options that set the rate.
    #[serde(default, rename = "option")]
    pub options: Vec<RateOption>,
    /// Options that multiply a per-target rate into packets (zmap `-P`).
    #[serde(default, rename = "multiplier")]
    pub multipliers: Vec<RateMultiplier>,
    /// A scanner paced by how many attempts it keeps in flight and how long it waits for each
    /// (RustScan's `-b` and `-t`), not by a rate option: the rate it implies when no option sets one.
    #[serde(default)]
    pub window: Option<RateWindow>,
}

/// A concurrency window: at most `concurrency` attempts (connects, probes) in flight at once,
/// each given up after `timeout_ms`. Every slot then starts at least one attempt per timeout, so
/// the window implies concurrency x 1000 / timeout_ms attempts per second when no target
/// answers, and more when targets answer sooner (a closed port's RST ends its connect at once).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateWindow {
    /// Attempts in flight at once (RustScan `-b`, `--batch-size`).
    pub concurrency: WindowOption,
    /// How long one attempt may take, in milliseconds (RustScan `-t`, `--timeout`).
    pub timeout_ms: WindowOption,
    /// What the implied rate means: `floor` (answers only make it faster) unless told.
    #[serde(default = "RateKind::floor")]
    pub kind: RateKind,
    /// Free text, added to the provenance when the window gives the rate.
    #[serde(default)]
    pub note: Option<String>,
}

/// One number of a `[rate.window]`: its spellings and the scanner's default.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WindowOption {
    /// Spellings (`-b`, `--batch-size`); the last one given wins.
    pub flags: Vec<String>,
    /// The scanner's value when none is given.
    pub default: f64,
}

/// One command-line option that sets the rate.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateOption {
    /// Spellings: `-r`, `--pps`. Long ones also match `--pps=N`, short ones `-rN`.
    pub flags: Vec<String>,
    /// What follows the flag.
    #[serde(default = "ValueForm::number")]
    pub takes: ValueForm,
    /// Unit of the value (for `takes = "none"`: of `value`).
    #[serde(default = "RateUnit::pps")]
    pub unit: RateUnit,
    /// What the rate means.
    #[serde(default = "RateKind::exact")]
    pub kind: RateKind,
    /// Meaning of a value of 0, if special (`unlimited`).
    #[serde(default)]
    pub zero: Option<RateKind>,
    /// The value counts targets per second: multiply by the `[[rate.multiplier]]` options.
    #[serde(default)]
    pub per_target: bool,
    /// The scanner refuses this option together with another rate option (zmap `-r` and `-B`).
    #[serde(default)]
    pub alone: bool,
    /// Wins over options of lower priority whatever their order (hping3 `--flood`); among equal
    /// priorities the last one on the command line wins.
    #[serde(default)]
    pub priority: u8,
    /// With `takes = "none"`: the value the flag stands for, in `unit`.
    #[serde(default)]
    pub value: Option<f64>,
    /// Free text for people (what the scanner does with it).
    #[serde(default)]
    pub note: Option<String>,
}

/// What follows a rate flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ValueForm {
    /// A number (bits-per-second values may end in K, M or G).
    Number,
    /// hping3's interval: `uN` microseconds, `N` seconds.
    Interval,
    /// Nothing: the flag alone (`--fast`, `--flood`).
    None,
}

/// The name of the fallback profile (wrappers/generic.toml): the profile of a family no other
/// profile recognises, which is no scanner (a unit test holds it to the built-in fallback).
pub const GENERIC_PROFILE: &str = "generic";

/// Unit of a rate value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RateUnit {
    /// Packets per second.
    Pps,
    /// Bits per second on the wire, divided by `wire_bytes * 8`.
    BitsPerS,
    /// A period between packets in microseconds.
    PeriodUs,
    /// A period between packets in seconds.
    PeriodS,
}

/// An option that multiplies a per-target rate (zmap `-P`: probes per target).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateMultiplier {
    /// Spellings (`-P`, `--probes`).
    pub flags: Vec<String>,
    /// Value when absent.
    pub default: f64,
    /// Free text for people.
    #[serde(default)]
    pub note: Option<String>,
}

/// One function to uprobe.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Probe {
    /// Name of the probe (unique in the profile), carried in the attach cookie.
    pub name: String,
    /// Process role whose executable holds the symbol, or an absolute path.
    pub binary: String,
    /// Shared library holding the symbol instead (file name or path), e.g. `libdumbnet.so.1`.
    #[serde(default)]
    pub library: Option<String>,
    /// Symbol name as in `.dynsym`/`.symtab` (mangled for C++).
    pub symbol: String,
    /// `symbol` is a C++ function's demangled name without its parameter list
    /// (`PacketRateMeter::update`): the attach side picks the mangled symbol that demangles to it.
    #[serde(default)]
    pub demangled: bool,
    /// What the function means for the profiler.
    pub role: ProbeRole,
    /// Fires for every packet: costly (2.6 to 3.9 us a hit here), so off unless asked for.
    #[serde(default)]
    pub per_packet: bool,
    /// Register arguments to capture.
    #[serde(default)]
    pub args: Vec<ProbeArg>,
    /// Return value to capture (a uretprobe), if any.
    #[serde(default)]
    pub ret: Option<ArgType>,
    /// Bytes behind a pointer argument to capture and decode.
    #[serde(default)]
    pub buffer: Option<ProbeBuffer>,
    /// Who receives the message (`ipc_send`), by its arguments or buffer fields; first match.
    #[serde(default, rename = "recipient")]
    pub recipients: Vec<Recipient>,
    /// Global variables to read from the process when the function returns (a calibration's
    /// result). Needs the symbol in `.symtab` or `.dynsym`.
    #[serde(default, rename = "read")]
    pub reads: Vec<ProbeRead>,
    /// The pacing mode a calibration probe belongs to: the mode in use is the one whose probe
    /// ran, so advice can name the others in the scanner's own terms.
    #[serde(default)]
    pub pacer: Option<Pacer>,
    /// Free text for people.
    #[serde(default)]
    pub note: Option<String>,
}

/// A pacing mode of the scanner, named on the calibration probe that runs when it is used.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pacer {
    /// What people call it (`TSC busy-wait`).
    pub name: String,
    /// The scanner option that selects it (`-d 1`).
    #[serde(default)]
    pub option: Option<String>,
    /// `spin` (busy-wait) or `sleep`.
    pub waits: PacerWait,
}

/// How a pacer waits out the rest of a packet's slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PacerWait {
    /// on the CPU, reading a clock or a counter until the slot is over
    Spin,
    /// off the CPU (nanosleep, a timer)
    Sleep,
}

/// A global variable read when a probed function returns.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProbeRead {
    /// Name shown in events (`delay` is the per-packet delay a calibration derived).
    pub name: String,
    /// The variable's symbol, in the probe's binary.
    pub symbol: String,
    /// How to read it.
    #[serde(rename = "type")]
    pub ty: ArgType,
    /// What a unit of it is: `tsc_cycles`, `ns`, `us` or `s`.
    #[serde(default)]
    pub unit: Option<DelayUnit>,
}

/// The unit of a delay a scanner derives and stores (a global a probe reads at return).
/// Serde writes and reads its name; the profile's `unit` and the JSON's `delay_unit` are it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, Deserialize)]
#[serde(rename_all = "snake_case", try_from = "String")]
pub enum DelayUnit {
    /// cycles of the TSC, converted with the TSC frequency
    TscCycles,
    /// nanoseconds
    Ns,
    /// microseconds
    Us,
    /// seconds
    S,
}

impl DelayUnit {
    /// Every unit, in code order.
    pub const ALL: [DelayUnit; 4] = [DelayUnit::TscCycles, DelayUnit::Ns, DelayUnit::Us, DelayUnit::S];

    /// Its name in profiles and in the JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            DelayUnit::TscCycles => "tsc_cycles",
            DelayUnit::Ns => "ns",
            DelayUnit::Us => "us",
            DelayUnit::S => "s",
        }
    }

    /// `d` of this unit in ns; None for TSC cycles without a known frequency (`tsc_hz`, Hz).
    pub fn to_ns(self, d: f64, tsc_hz: Option<f64>) -> Option<f64> {
        match self {
            DelayUnit::TscCycles => tsc_hz.filter(|h| *h > 0.0).map(|h| d * 1e9 / h),
            DelayUnit::Ns => Some(d),
            DelayUnit::Us => Some(d * 1e3),
            DelayUnit::S => Some(d * 1e9),
        }
    }
}

impl std::fmt::Display for DelayUnit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

impl TryFrom<String> for DelayUnit {
    type Error = String;

    fn try_from(u: String) -> Result<DelayUnit, String> {
        DelayUnit::ALL
            .into_iter()
            .find(|d| d.as_str() == u)
            .ok_or_else(|| format!("'{u}': use tsc_cycles, ns, us or s"))
    }
}

/// What a probed function means. Serde writes the names profiles use (`rate_setup`...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProbeRole {
    /// Sets up the pacing for a rate (once per run or work unit).
    RateSetup,
    /// Calibrates a clock or delay.
    Calibration,
    /// Starts or hands over a unit of work.
    WorkUnit,
    /// Sends an IPC message.
    IpcSend,
    /// Receives an IPC message.
    IpcRecv,
    /// Sends a packet.
    Send,
    /// Waits for a packet's slot.
    PaceWait,
    /// Starts a packet's slot.
    SlotStart,
    /// Builds a packet.
    Build,
    /// The sender's or scanner's main loop.
    MainLoop,
    /// Updates the scanner's own rate meter.
    RateMeter,
    /// Receives or handles a reply.
    Receive,
}

impl ProbeRole {
    /// The role as profiles and the JSON output write it (`rate_setup`, `ipc_send`...).
    pub fn as_str(self) -> &'static str {
        match self {
            ProbeRole::RateSetup => "rate_setup",
            ProbeRole::Calibration => "calibration",
            ProbeRole::WorkUnit => "work_unit",
            ProbeRole::IpcSend => "ipc_send",
            ProbeRole::IpcRecv => "ipc_recv",
            ProbeRole::Send => "send",
            ProbeRole::PaceWait => "pace_wait",
            ProbeRole::SlotStart => "slot_start",
            ProbeRole::Build => "build",
            ProbeRole::MainLoop => "main_loop",
            ProbeRole::RateMeter => "rate_meter",
            ProbeRole::Receive => "receive",
        }
    }
}

impl std::fmt::Display for ProbeRole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A captured register argument.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProbeArg {
    /// Name shown in events.
    pub name: String,
    /// 0-based index in the calling convention (x86-64: rdi, rsi, rdx, rcx, r8, r9).
    pub reg: u8,
    /// How to read the register.
    #[serde(rename = "type")]
    pub ty: ArgType,
}

/// Type of a captured value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ArgType {
    /// Unsigned 8-bit.
    U8,
    /// Unsigned 16-bit.
    U16,
    /// Unsigned 32-bit.
    U32,
    /// Unsigned 64-bit.
    U64,
    /// Signed 32-bit.
    I32,
    /// Signed 64-bit.
    I64,
    /// IEEE 754 single precision (buffer fields only: floats do not travel in integer registers).
    F32,
    /// A pointer (shown in hex).
    Ptr,
}

impl ArgType {
    /// Size in bytes when read from memory.
    pub fn size(self) -> usize {
        match self {
            ArgType::U8 => 1,
            ArgType::U16 => 2,
            ArgType::U32 | ArgType::I32 | ArgType::F32 => 4,
            ArgType::U64 | ArgType::I64 | ArgType::Ptr => 8,
        }
    }
}

/// Bytes behind a pointer argument, decoded as fields.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProbeBuffer {
    /// Register index of the pointer.
    pub ptr_arg: u8,
    /// Register index of the length, if any (else `max_bytes` are read).
    #[serde(default)]
    pub len_arg: Option<u8>,
    /// Bytes to copy at most.
    pub max_bytes: u32,
    /// Fields to decode.
    #[serde(default, rename = "field")]
    pub fields: Vec<BufferField>,
}

/// A field at an offset inside a captured buffer.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BufferField {
    /// Name shown in events.
    pub name: String,
    /// Byte offset from the start of the buffer.
    pub offset: u32,
    /// How to read it (little-endian).
    #[serde(rename = "type")]
    pub ty: ArgType,
    /// Decode only when another value equals something (e.g. message type 4).
    #[serde(default)]
    pub condition: Option<FieldCondition>,
}

/// Decode a field only when `field` (an argument or an earlier field) equals `equals`, or is one
/// of `one_of` (a set of magics). Exactly one of the two is given.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FieldCondition {
    /// Name of an argument or of another buffer field.
    pub field: String,
    /// Value it must have.
    #[serde(default)]
    pub equals: Option<u64>,
    /// Values it may have (a message kind's magics).
    #[serde(default)]
    pub one_of: Vec<u64>,
}

impl FieldCondition {
    /// Whether `value` (an argument or field as decoded; None when absent) meets the condition.
    pub fn holds(&self, value: Option<f64>) -> bool {
        let Some(v) = value else { return false };
        match self.equals {
            Some(e) => v == e as f64,
            None => self.one_of.iter().any(|e| v == *e as f64),
        }
    }
}

/// Which family member receives a message, from its decoded arguments or fields (unicornscan's
/// master sends type-4 work units to both its sender and its listener; the unit's magic says
/// which). A message no rule matches has no known recipient.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Recipient {
    /// Process role of the recipient (`sender`, `listener`).
    pub role: String,
    /// When a message goes to that role.
    pub when: FieldCondition,
}

impl RateUnit {
    fn pps() -> Self {
        RateUnit::Pps
    }
}

impl RateKind {
    fn unknown() -> Self {
        RateKind::Unknown
    }
    fn exact() -> Self {
        RateKind::Exact
    }
    fn floor() -> Self {
        RateKind::Floor
    }
}

impl ValueForm {
    fn number() -> Self {
        ValueForm::Number
    }
}

/// 1-based line of the first line that sets `key` at top level, 0 if none.
fn line_of(text: &str, key: &str) -> usize {
    text.lines()
        .position(|l| {
            let l = l.trim_start();
            l.strip_prefix(key)
                .is_some_and(|rest| rest.trim_start().starts_with('='))
        })
        .map_or(0, |i| i + 1)
}

impl ScannerProfile {
    /// Parses and validates a profile; errors call it `<text>`.
    pub fn parse(text: &str) -> Result<ScannerProfile, ProfileError> {
        Self::parse_named(text, "<text>")
    }

    /// Like [`ScannerProfile::parse`], with the file name used in error messages.
    pub fn parse_named(text: &str, origin: &str) -> Result<ScannerProfile, ProfileError> {
        // The parser's message and where, without its quote of the line: the file may be
        // anything `--profile` was pointed at (/etc/shadow), not a profile.
        // A value the profile's types refuse is in valid TOML: then its key is named too.
        let toml_err = |valid_toml: bool| {
            move |e: toml::de::Error| ProfileError::Toml {
                origin: origin.to_string(),
                message: match e.span() {
                    Some(span) => {
                        let before = &text[..span.start.min(text.len())];
                        let line = before.matches('\n').count() + 1;
                        let start = before.rfind('\n').map_or(0, |i| i + 1);
                        let column = before.len() - start + 1;
                        let key = text[start..]
                            .lines()
                            .next()
                            .and_then(|l| l.split_once('='))
                            .map(|(k, _)| k.trim())
                            .filter(|k| valid_toml && !k.is_empty())
                            .map(|k| format!(", key {k}"))
                            .unwrap_or_default();
                        format!("line {line}, column {column}{key}: {}", e.message().trim_end())
                    }
                    None => e.message().trim_end().to_string(),
                },
            }
        };
        // The version first, so an old or new profile fails on `schema`, not on some key.
        let table: toml::Table = toml::from_str(text).map_err(toml_err(false))?;
        let line = line_of(text, "schema");
        match table.get("schema") {
            None => {
                return Err(ProfileError::Schema {
                    origin: origin.to_string(),
                    line,
                    message: format!("missing: add `schema = {SCHEMA_VERSION}` as the first line"),
                })
            }
            Some(toml::Value::Integer(v)) if *v == i64::from(SCHEMA_VERSION) => {}
            Some(other) => {
                return Err(ProfileError::Schema {
                    origin: origin.to_string(),
                    line,
                    message: format!(
                        "{other} is not supported: this scanprof reads schema = {SCHEMA_VERSION} only"
                    ),
                })
            }
        }
        let profile: ScannerProfile = toml::from_str(text).map_err(toml_err(true))?;
        profile.validate()?;
        Ok(profile)
    }

    /// Checks what serde cannot: references between keys and value ranges.
    fn validate(&self) -> Result<(), ProfileError> {
        let bad = |key: String, message: String| ProfileError::Invalid {
            profile: self.name.clone(),
            key,
            message,
        };
        if self.name.trim().is_empty() {
            return Err(bad("name".into(), "must not be empty".into()));
        }
        if let Some(w) = &self.rate.window {
            for (key, v) in [("concurrency", &w.concurrency), ("timeout_ms", &w.timeout_ms)] {
                if !(v.default.is_finite() && v.default > 0.0) {
                    return Err(bad(
                        format!("rate.window.{key}.default"),
                        "must be a number above 0".into(),
                    ));
                }
                if v.flags.is_empty() {
                    return Err(bad(
                        format!("rate.window.{key}.flags"),
                        "needs at least one spelling".into(),
                    ));
                }
            }
        }
        let roles: Vec<&str> = self.processes.iter().map(|p| p.role.as_str()).collect();
        for (i, p) in self.processes.iter().enumerate() {
            if !self.fallback && p.exe.is_empty() && p.comm.is_empty() {
                return Err(bad(
                    format!("process[{i}]"),
                    "needs `exe` or `comm` to be recognised".into(),
                ));
            }
            if let Some(parent) = &p.parent {
                if !roles.contains(&parent.as_str()) {
                    return Err(bad(
                        format!("process[{i}].parent"),
                        format!("no process has role '{parent}'"),
                    ));
                }
            }
            for (j, t) in p.threads.iter().enumerate() {
                if (t.pick == ThreadPick::Comm) != t.comm.is_some() {
                    return Err(bad(
                        format!("process[{i}].thread[{j}].comm"),
                        "`comm` is required with pick = \"comm\" and only then".into(),
                    ));
                }
            }
        }
        let r = &self.rate;
        if r.kind == RateModel::Unicornscan && r.mode_flags.is_empty() {
            return Err(bad(
                "rate.mode_flags".into(),
                "kind = \"unicornscan\" needs mode flags".into(),
            ));
        }
        for (i, o) in r.options.iter().enumerate() {
            if o.flags.is_empty() || o.flags.iter().any(|f| !f.starts_with('-')) {
                return Err(bad(
                    format!("rate.option[{i}].flags"),
                    "needs flags starting with '-'".into(),
                ));
            }
            let needs_value = o.takes == ValueForm::None && o.kind != RateKind::Unlimited;
            if needs_value != o.value.is_some() {
                return Err(bad(
                    format!("rate.option[{i}].value"),
                    "`value` is required with takes = \"none\" (unless kind = \"unlimited\") and only then"
                        .into(),
                ));
            }
            if o.unit == RateUnit::BitsPerS && r.wire_bytes.is_none() {
                return Err(bad(
                    "rate.wire_bytes".into(),
                    "needed to convert bits_per_s to packets".into(),
                ));
            }
        }
        if r.default_unit == RateUnit::BitsPerS && r.wire_bytes.is_none() {
            return Err(bad(
                "rate.wire_bytes".into(),
                "needed to convert bits_per_s to packets".into(),
            ));
        }
        for (i, c) in self.claims.iter().enumerate() {
            if c.stream != "stdout" && c.stream != "stderr" {
                return Err(bad(format!("claim[{i}].stream"), "stdout or stderr".into()));
            }
            match regex::Regex::new(&c.pattern) {
                Ok(re) if re.captures_len() >= 2 => {}
                Ok(_) => {
                    return Err(bad(
                        format!("claim[{i}].pattern"),
                        "needs a capture group for the number".into(),
                    ))
                }
                Err(e) => return Err(bad(format!("claim[{i}].pattern"), e.to_string())),
            }
        }
        for (i, st) in self.status.iter().enumerate() {
            let key = |k: &str| format!("status[{i}].{k}");
            match (st.file_flags.is_empty(), st.switch_flags.is_empty(), st.stream) {
                (false, true, None) | (true, false, Some(_)) => {}
                _ => {
                    return Err(bad(
                        key("file_flags"),
                        "give file_flags (options naming the file), or switch_flags with stream".into(),
                    ))
                }
            }
            if st.fields.is_empty() {
                return Err(bad(key("field"), "at least one field".into()));
            }
            for (j, f) in st.fields.iter().enumerate() {
                if st.fields[..j].iter().any(|g| g.figure == f.figure) {
                    return Err(bad(
                        key(&format!("field[{j}].figure")),
                        "another field of this status gives the same figure".into(),
                    ));
                }
                if f.key.is_empty() {
                    return Err(bad(key(&format!("field[{j}].key")), "empty".into()));
                }
            }
        }
        for key in self.message_types.keys() {
            if key.parse::<u64>().is_err() {
                return Err(bad(
                    format!("message_types.{key}"),
                    "keys are message type numbers".into(),
                ));
            }
        }
        let mut names: Vec<&str> = Vec::new();
        for (i, p) in self.probes.iter().enumerate() {
            if names.contains(&p.name.as_str()) {
                return Err(bad(
                    format!("probe[{i}].name"),
                    format!("'{}' used twice", p.name),
                ));
            }
            names.push(&p.name);
            if !p.binary.starts_with('/') && !roles.contains(&p.binary.as_str()) {
                return Err(bad(
                    format!("probe[{i}].binary"),
                    format!("'{}' is neither an absolute path nor a process role", p.binary),
                ));
            }
            for (j, a) in p.args.iter().enumerate() {
                if a.reg > 5 {
                    return Err(bad(
                        format!("probe[{i}].args[{j}].reg"),
                        "register index 0..=5".into(),
                    ));
                }
                if a.ty == ArgType::F32 {
                    return Err(bad(
                        format!("probe[{i}].args[{j}].type"),
                        "f32 is for buffer fields".into(),
                    ));
                }
            }
            if let Some(b) = &p.buffer {
                let arg_names: Vec<&str> = p.args.iter().map(|a| a.name.as_str()).collect();
                if b.ptr_arg > 5 || b.len_arg.is_some_and(|l| l > 5) {
                    return Err(bad(format!("probe[{i}].buffer"), "register index 0..=5".into()));
                }
                for (j, f) in b.fields.iter().enumerate() {
                    if f.offset as usize + f.ty.size() > b.max_bytes as usize {
                        return Err(bad(
                            format!("probe[{i}].buffer.field[{j}].offset"),
                            format!("'{}' ends beyond max_bytes = {}", f.name, b.max_bytes),
                        ));
                    }
                    if let Some(c) = &f.condition {
                        let earlier = b.fields[..j].iter().any(|g| g.name == c.field);
                        if !earlier && !arg_names.contains(&c.field.as_str()) {
                            return Err(bad(
                                format!("probe[{i}].buffer.field[{j}].condition.field"),
                                format!("'{}' is neither an argument nor an earlier field", c.field),
                            ));
                        }
                        if c.equals.is_some() != c.one_of.is_empty() {
                            return Err(bad(
                                format!("probe[{i}].buffer.field[{j}].condition"),
                                "give `equals` or `one_of`, not both".into(),
                            ));
                        }
                    }
                }
            }
            for (j, r) in p.recipients.iter().enumerate() {
                let known = p.args.iter().any(|a| a.name == r.when.field)
                    || p.buffer
                        .as_ref()
                        .is_some_and(|b| b.fields.iter().any(|f| f.name == r.when.field));
                if !known {
                    return Err(bad(
                        format!("probe[{i}].recipient[{j}].when.field"),
                        format!("'{}' is neither an argument nor a buffer field", r.when.field),
                    ));
                }
                if r.when.equals.is_some() != r.when.one_of.is_empty() {
                    return Err(bad(
                        format!("probe[{i}].recipient[{j}].when"),
                        "give `equals` or `one_of`, not both".into(),
                    ));
                }
                if !roles.contains(&r.role.as_str()) {
                    return Err(bad(
                        format!("probe[{i}].recipient[{j}].role"),
                        format!("no process has role '{}'", r.role),
                    ));
                }
            }
        }
        Ok(())
    }
}
