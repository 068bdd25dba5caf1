//! The command line: clap derive types only. Every subcommand's behaviour lives in
//! src/commands; the flag groups shared by attach and run are defined once here.

use std::net::SocketAddrV4;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::wrappers::PacerKind;

/// Longest run, send or lab that a `--duration` may ask for: 30 days, in seconds.
pub const MAX_DURATION_S: f64 = 30.0 * 86_400.0;
/// Longest tick: an hour.
pub const MAX_INTERVAL_S: f64 = 3_600.0;
/// Shortest tick the session keeps up with.
pub const MIN_INTERVAL_S: f64 = 0.01;
/// Highest packet rate a flag may name: 1e9 packets per second (no host sends that).
pub const MAX_PPS: f64 = 1e9;
/// Largest UDP payload over IPv4.
pub const MAX_UDP_PAYLOAD: usize = 65_507;

/// A number from the command line: finite, and within `lo..=hi` (or above `lo` when `lo_open`).
/// Every numeric flag goes through one of these at parse time, so no value reaches
/// `Duration::from_secs_f64` or an allocation that could panic.
fn number_in(s: &str, lo: f64, lo_open: bool, hi: f64, unit: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number ({unit})"))?;
    let low_ok = if lo_open { v > lo } else { v >= lo };
    if !v.is_finite() || !low_ok || v > hi {
        let low = if lo_open {
            format!("more than {lo}")
        } else {
            format!("at least {lo}")
        };
        return Err(format!(
            "{s} is out of range: give {low} and at most {hi} ({unit})"
        ));
    }
    // "-0" is 0, not a negative zero carried on.
    Ok(if v == 0.0 { 0.0 } else { v })
}

/// `--duration`, `--seconds`, `--baseline-seconds`: more than 0, at most 30 days.
pub fn parse_duration_s(s: &str) -> Result<f64, String> {
    number_in(s, 0.0, true, MAX_DURATION_S, "seconds")
}

/// `ring-recv --linger`: 0 to 60 seconds.
pub fn parse_linger_s(s: &str) -> Result<f64, String> {
    number_in(s, 0.0, false, 60.0, "seconds")
}

/// `--metrics-linger`: 0 to 3600 seconds.
pub fn parse_metrics_linger_s(s: &str) -> Result<f64, String> {
    number_in(s, 0.0, false, 3600.0, "seconds")
}

/// `--interval`: 0.01 to 3600 seconds.
pub fn parse_interval_s(s: &str) -> Result<f64, String> {
    number_in(s, MIN_INTERVAL_S, false, MAX_INTERVAL_S, "seconds")
}

/// `--seconds` and `--baseline-seconds` of a baseline cell: more than 0, at most 60.
pub fn parse_baseline_s(s: &str) -> Result<f64, String> {
    number_in(s, 0.0, true, 60.0, "seconds")
}

/// `--requested`, `lab --rate`: more than 0 packets per second.
pub fn parse_positive_pps(s: &str) -> Result<f64, String> {
    number_in(s, 0.0, true, MAX_PPS, "packets per second")
}

/// `send --rate`, `baseline --rates`: packets per second, 0 for as fast as possible.
pub fn parse_pps_or_unlimited(s: &str) -> Result<f64, String> {
    number_in(
        s,
        0.0,
        false,
        MAX_PPS,
        "packets per second; 0 = as fast as possible",
    )
}

/// `--map-size NAME=ENTRIES`: a map's name and 1 to `MAX_MAP_ENTRIES` entries (bytes for a ring
/// buffer). Whether the probes have a resizable map of that name is checked when they load.
pub fn parse_map_size(s: &str) -> Result<(String, u32), String> {
    let (name, n) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?}: give MAP=ENTRIES, e.g. threads=4096"))?;
    let name = name.trim();
    if !crate::probes::RESIZABLE.contains(&name) {
        return Err(format!(
            "{name:?} is no map scanprof can resize: one of {}",
            crate::probes::RESIZABLE.join(", ")
        ));
    }
    let max = crate::probes::MAX_MAP_ENTRIES;
    let n: u32 = n
        .trim()
        .parse()
        .ok()
        .filter(|n| (1..=max).contains(n))
        .ok_or_else(|| format!("{n:?} is out of range: give 1 to {max} entries for map {name}"))?;
    Ok((name.to_string(), n))
}

/// `--calibration-skew`: 0.25 to 1000 (slots at most 4x too short, at most 1000x too long).
pub fn parse_skew(s: &str) -> Result<f64, String> {
    use crate::senders::engine::{MAX_CALIBRATION_SKEW, MIN_CALIBRATION_SKEW};
    number_in(s, MIN_CALIBRATION_SKEW, false, MAX_CALIBRATION_SKEW, "a factor")
}

// The examples each subcommand's --help ends with (a unit test parses every one of them).
const ATTACH_EXAMPLES: &str = "Examples:
  scanprof attach -p 4242                       # live view of a running scanner and its family
  scanprof attach -p 4242 -d 30 --json          # NDJSON: a sample per tick, then the summary
  scanprof attach -p 4242 -o bundle/            # also write a trace bundle for a bug report
  scanprof attach -p 4242 --metrics 127.0.0.1:9477   # Prometheus metrics while it runs";
const RUN_EXAMPLES: &str = "Examples:
  scanprof run -- masscan --rate 1000 -p80 10.0.0.0/24
  scanprof run -q --no-tui -d 60 -- zmap -r 5000 -p 80 10.0.0.0/16   # only the summary
  scanprof run --baseline -- masscan --rate 20000 -p80 10.0.0.0/16   # beside this machine's own rate
  scanprof run --profile zmap --per-packet synscan_make_packet -- ip netns exec NS zmap -r 100 -p 80 10.1.0.0/24";
const RECORD_EXAMPLES: &str = "Examples:
  scanprof record -o bundle/ -p 4242
  scanprof record -o bundle/ -- unicornscan -r 1000 10.0.0.0/24:80
  scanprof report bundle/ --format md           # re-render it later, anywhere, without root";
const REPORT_EXAMPLES: &str = "Examples:
  scanprof report bundle/
  scanprof report bundle/events.ndjson --format json";
const DOCTOR_EXAMPLES: &str = "Examples:
  scanprof doctor
  scanprof doctor --json";
const COMPLETIONS_EXAMPLES: &str = "Examples:
  scanprof completions bash > /etc/bash_completion.d/scanprof
  scanprof completions zsh > \"${fpath[1]}/_scanprof\"
  scanprof completions fish > ~/.config/fish/completions/scanprof.fish";
const MAN_EXAMPLES: &str = "Examples:
  scanprof man > /usr/local/share/man/man1/scanprof.1
  scanprof man attach | man -l -";
const SEND_EXAMPLES: &str = "Examples:
  scanprof send --to 127.0.0.1:9000 --rate 5000 --count 10000 --pacer tsc
  scanprof send --to 127.0.0.1:9000 --rate 0 -d 2 --method sendmmsg --batch 32";
const RECV_EXAMPLES: &str = "Examples:
  scanprof recv --port 9000 --duration 10
  scanprof run -- scanprof recv --port 9000 --rcvbuf 4096 --read-rate 500 -d 5   # a listener that falls behind
  scanprof run -- scanprof recv --port 9000 --workers 4 -d 10   # 4 SO_REUSEPORT workers: worker = source port mod 4
  scanprof run --recv-classes 256 -- scanprof recv --port 9000 --respond 256 --reply-port 9 -d 10   # a responder: cost per class of length";
const RELAY_EXAMPLES: &str = "Examples:
  scanprof relay --in eth1 --out lo --out lo --out lo -d 10 --report relay.json
  scanprof run --relay-fanout 3 -- scanprof relay --in eth1 --out lo --out lo --out lo --pool 64 -d 10   # the relay funnel";
const RING_RECV_EXAMPLES: &str = "Examples:
  scanprof ring-recv --dev eth0 --frames 64 --duration 10
  scanprof run -- scanprof ring-recv --dev veth1 --frames 8 --read-rate 200 -d 3 --linger 1.5   # a ring that fills: ring_full";
const LAB_EXAMPLES: &str = "Examples:
  scanprof lab                                  # the healthy lab at 10,000 pps in the live view
  scanprof lab qdisc-drop --no-tui              # a staged fault, profiled and diagnosed
  scanprof lab --suite                          # every scenario: the top verdict against the cause";
const BASELINE_EXAMPLES: &str = "Examples:
  scanprof baseline
  scanprof baseline --rates 1000,10000,0 --json";
const SWEEP_EXAMPLES: &str = "Examples:
  scanprof sweep --lab --tbf-rate 22mbit --rates 1000,2000,4000,8000,16000 --duration 3
  scanprof sweep --rates 1000,5000,20000 --max-rate 20000 --duration 10 -- masscan --rate {} -p80 10.0.0.0/24
  scanprof sweep --lab --from 1000 --to 64000 --steps 7 --json --export sweep/";
const AGENT_EXAMPLES: &str = "Examples:
  scanprof agent --config /etc/scanprof/agent.toml
  scanprof agent --spool /var/lib/scanprof/runs --metrics 127.0.0.1:9477
  scanprof agent --spool /tmp/scanprof-runs --metrics 127.0.0.1:0 --max-runs 2";
const COMPARE_EXAMPLES: &str = "Examples:
  scanprof compare before/ after/
  scanprof compare sweep-vm/ sweep-metal/ --format md";

#[derive(Debug, Parser)]
#[command(
    name = "scanprof",
    version,
    about = "eBPF profiler for packet scanners: requested vs achieved packets per second, where the time went and where packets were dropped",
    long_about = None
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Profile running processes (and their whole process family) by pid.
    #[command(after_help = ATTACH_EXAMPLES)]
    Attach {
        /// Process to profile, with its threads and children (repeatable).
        #[arg(
            short,
            long = "pid",
            required = true,
            value_name = "PID",
            allow_negative_numbers = true
        )]
        pids: Vec<u32>,
        /// Allow pid 1 (its family is the whole system) and kernel threads as targets; they
        /// are refused otherwise. scanprof's own process is never followed.
        #[arg(long)]
        allow_system: bool,
        #[command(flatten)]
        run: RunOptions,
    },
    /// Start a command once every probe is attached and profile it and its children.
    /// If the run ends first (--duration, Ctrl-C, SIGTERM, SIGHUP), the command is sent SIGTERM;
    /// if scanprof is killed, the command and what it forked get SIGKILL. Exit status: the command's, or 128+N
    /// when signal N ended it (as `time` and `strace` do).
    #[command(after_help = RUN_EXAMPLES)]
    Run {
        #[command(flatten)]
        run: RunOptions,
        /// The command and its arguments, after `--`.
        #[arg(last = true, required = true, value_name = "COMMAND")]
        command: Vec<std::ffi::OsString>,
    },
    /// Profile like attach (with -p) or run (with a command), and write a trace bundle to -o DIR
    /// (required: created if missing; must be empty unless --force).
    /// With a command, the exit status is the command's (128+N for signal N), as for run.
    #[command(after_help = RECORD_EXAMPLES)]
    Record {
        /// Process to profile, with its threads and children (repeatable); or give a command.
        #[arg(short, long = "pid", value_name = "PID", allow_negative_numbers = true)]
        pids: Vec<u32>,
        /// Allow pid 1 and kernel threads as targets (see attach).
        #[arg(long)]
        allow_system: bool,
        #[command(flatten)]
        run: RunOptions,
        /// The command to start and profile, after `--` (instead of -p).
        #[arg(last = true, value_name = "COMMAND")]
        command: Vec<std::ffi::OsString>,
    },
    /// Re-render a bundle's report (no root needed): text, markdown or JSON.
    #[command(after_help = REPORT_EXAMPLES)]
    Report {
        /// A bundle directory, or its events.ndjson.
        #[arg(value_name = "PATH")]
        path: std::path::PathBuf,
        /// Output format.
        #[arg(long, value_enum, default_value_t = ReportFormat::Text)]
        format: ReportFormat,
    },
    /// Check what this machine's kernel and privileges allow, and what to do about it.
    #[command(after_help = DOCTOR_EXAMPLES)]
    Doctor {
        /// Print the checks as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print a shell completion script: bash, zsh or fish.
    #[command(after_help = COMPLETIONS_EXAMPLES)]
    Completions {
        /// The shell to complete for.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff), of scanprof or of one subcommand.
    #[command(after_help = MAN_EXAMPLES)]
    Man {
        /// A subcommand (default: scanprof itself).
        #[arg(value_name = "SUBCOMMAND")]
        subcommand: Option<String>,
    },
    /// Reference UDP sender: paced packets to the address you name (traffic source, and what
    /// this machine can do). Without --count or --duration: 1000 packets in at most 10 s.
    #[command(after_help = SEND_EXAMPLES)]
    Send(SendOptions),
    /// Reference UDP receiver: counts the datagrams that reach a port, reading them one
    /// recvfrom at a time, as fast as they come or paced (a listener to profile, and the count
    /// to hold scanprof's receive funnel against).
    #[command(after_help = RECV_EXAMPLES)]
    Recv(RecvOptions),
    /// Reference packet relay: reads IP packets from a packet socket on one interface and
    /// writes each to every --out interface (1 -> N fan-out) from a fixed pool of buffers,
    /// single-threaded; counts what it read, forwarded and dropped for lack of a buffer (a
    /// relay to profile, and the counts to hold scanprof's relay funnel against).
    #[command(after_help = RELAY_EXAMPLES)]
    Relay(RelayOptions),
    /// Reference packet-socket reader: an AF_PACKET socket on a device with a TPACKET_V2
    /// receive ring of the size you give, read from shared memory as libpcap does, paced when
    /// asked so that the ring fills; reports its own count and the socket's PACKET_STATISTICS.
    #[command(after_help = RING_RECV_EXAMPLES)]
    RingRecv(RingRecvOptions),
    /// Set up a private network-namespace lab, profile a reference sender in it, remove it.
    #[command(after_help = LAB_EXAMPLES)]
    Lab(LabOptions),
    /// Measure what this machine allows a sender: pacers x rates and send methods at full
    /// speed, against loopback and a private lab it creates and removes, plus the host facts.
    #[command(after_help = BASELINE_EXAMPLES)]
    Baseline(BaselineOptions),
    /// Run a command at a series of requested rates (each substituted for `{}`), each step a
    /// bounded profiled run, and find the knee: the highest rate kept within 2% with no loss,
    /// and what appears above it. With --lab and no command: the reference sender into a
    /// private lab the sweep makes (optionally shaped by a tbf). Ctrl-C ends the current step
    /// with its summary and prints the table so far.
    #[command(after_help = SWEEP_EXAMPLES)]
    Sweep(SweepOptions),
    /// Follow every scanner that starts on this host, as a service (deploy/scanprof-agent.service):
    /// each scanner a profile recognises (or a command or cgroup the config names) is attached
    /// to as it execs, until its family exits, and gets a run id and a directory in the spool
    /// (bundle, metrics, log). Serves every live run's metrics and each ended run's final ones
    /// for a retention window at --metrics (docs/metrics.md). SIGHUP reloads the config (live
    /// runs go on); SIGINT or SIGTERM ends every run (their bundles are written) and detaches.
    #[command(after_help = AGENT_EXAMPLES)]
    Agent(AgentOptions),
    /// Set two bundles (of `record`/`--export`, or of `sweep --export`) side by side: rates,
    /// funnels, time budgets, drops and verdicts, their differences, and which causes appeared,
    /// grew, shrank or went away. No root needed.
    #[command(after_help = COMPARE_EXAMPLES)]
    Compare {
        /// The first bundle (the "before"): a directory, or its events.ndjson / sweep.ndjson.
        #[arg(value_name = "A")]
        a: std::path::PathBuf,
        /// The second bundle (the "after").
        #[arg(value_name = "B")]
        b: std::path::PathBuf,
        /// Output format.
        #[arg(long, value_enum, default_value_t = ReportFormat::Text)]
        format: ReportFormat,
    },
}

/// `scanprof agent`'s options: the config file, and the settings the command line overrides.
#[derive(Debug, Clone, Args)]
pub struct AgentOptions {
    /// The configuration file (TOML; deploy/agent.toml is an example with every setting). Read
    /// again on SIGHUP. Default: the built-in defaults with the flags below.
    #[arg(long, value_name = "FILE")]
    pub config: Option<std::path::PathBuf>,
    /// The spool directory: one directory per run (default /var/lib/scanprof/runs). Wins over
    /// the file's `spool`.
    #[arg(long, value_name = "DIR")]
    pub spool: Option<std::path::PathBuf>,
    /// Serve the metrics of every run at http://ADDR:PORT/metrics (port 0 picks one, named on
    /// stderr). Wins over the file's `metrics`.
    #[arg(long, value_name = "ADDR:PORT")]
    pub metrics: Option<std::net::SocketAddr>,
    /// Runs followed at once, at most (1 to 64; default 4). Wins over the file's `max_runs`.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=64))]
    pub max_runs: Option<u16>,
}

/// Options shared by `attach` and `run`.
#[derive(Debug, Clone, Args)]
pub struct RunOptions {
    /// Length of a tick in seconds (0.01 to 3600): rates and views update this often.
    #[arg(short, long, default_value_t = 1.0, value_name = "SECONDS", value_parser = parse_interval_s, allow_negative_numbers = true)]
    pub interval: f64,
    /// End the run after this many seconds, at most 30 days (default: when the target's family
    /// exits, or Ctrl-C).
    #[arg(short, long, value_name = "SECONDS", value_parser = parse_duration_s, allow_negative_numbers = true)]
    pub duration: Option<f64>,
    /// The packets per second the scanner was asked for (default: read from the scanner's
    /// command line and its own rate-setup functions, as its profile says).
    #[arg(long, value_name = "PPS", value_parser = parse_positive_pps, allow_negative_numbers = true)]
    pub requested: Option<f64>,
    /// Scanner profile: a built-in one (unicornscan, masscan, zmap, nmap, hping3, rustscan, naabu,
    /// the test tools tcpreplay and iperf3, scanprof-send, generic) or a profile file (.toml).
    /// Default: recognised from the target's command line and executable.
    #[arg(long, value_name = "NAME|FILE")]
    pub profile: Option<String>,
    /// Switch on the profile's per-packet uprobes: all of them, or the probes named
    /// (comma-separated). Each hit costs the scanner 2.6 to 3.9 us here (docs/benchmarks.md).
    #[arg(long, value_name = "PROBES", num_args = 0..=1, default_missing_value = "all")]
    pub per_packet: Option<String>,
    /// Print NDJSON (one `sample` object per tick, a `summary` at the end) instead of text.
    #[arg(long)]
    pub json: bool,
    /// Plain text instead of the live terminal view (the default when stdout is a terminal).
    #[arg(long)]
    pub no_tui: bool,
    /// Close the live view as soon as the run ends by itself (--duration, the target exited)
    /// and print the summary, instead of keeping the ended view until q (for scripts and
    /// recorded terminals).
    #[arg(long)]
    pub exit_at_end: bool,
    /// Print only the summary (and warnings): no line per tick or at start (text output).
    #[arg(short, long)]
    pub quiet: bool,
    /// Before attaching, measure what a reference sender reaches at the requested rate on this
    /// machine (in a private lab), and show it beside the target's figure. The rate is
    /// --requested, else the exact rate or cap the scanner's profile finds for it (its command
    /// line, its config file, or the scanner's default); stderr names which.
    #[arg(long)]
    pub baseline: bool,
    /// Pacer of the --baseline sender: tsc, clock, sleep (match the scanner's pacing class).
    #[arg(long, default_value = "tsc", value_name = "PACER", value_parser = baseline_pacer)]
    pub baseline_pacer: PacerKind,
    /// Seconds the --baseline sender runs (at most 60).
    #[arg(long, default_value_t = 2.0, value_name = "SECONDS", value_parser = parse_baseline_s, allow_negative_numbers = true)]
    pub baseline_seconds: f64,
    /// Also write a trace bundle (events, Perfetto trace, report.md, plots, bpftrace script) here.
    /// The directory must be new or empty (checked before the run starts), unless --force.
    #[arg(short = 'o', long, visible_alias = "output", value_name = "DIR")]
    pub export: Option<std::path::PathBuf>,
    /// Write the bundle (-o, --export) into a directory that is not empty: the files of an
    /// earlier bundle in it are removed first; other files are left alone.
    #[arg(long)]
    pub force: bool,
    /// In bundles, replace IP addresses and the host name with consistent stand-ins (a redacted
    /// bundle has no drops.pcapng: its packet headers hold addresses).
    #[arg(long)]
    pub redact: bool,
    /// Write the headers of the family's dropped packets (target_loss, reply_loss, expected,
    /// reply_side) to this pcapng file at the end: the first 128 bytes from the network header (LINKTYPE_RAW),
    /// each packet commented with its drop reason, location, device, namespace, pid and comm;
    /// a drop-table row's first 64 drops on each CPU, then 1 in 256 (stated in the file).
    /// Bundles (-o) hold the same file as drops.pcapng (unless --redact).
    #[arg(long, value_name = "FILE")]
    pub pcap: Option<std::path::PathBuf>,
    /// Serve Prometheus metrics at http://ADDR:PORT/metrics while the run lasts, e.g.
    /// 127.0.0.1:9477 (docs/metrics.md). Port 0 picks a free port (named on stderr).
    #[arg(long, value_name = "ADDR:PORT")]
    pub metrics: Option<std::net::SocketAddr>,
    /// Write the same metrics to this file after every tick, replaced whole each time (for
    /// node_exporter's textfile collector: a .prom file in its directory).
    #[arg(long, value_name = "PATH")]
    pub metrics_file: Option<std::path::PathBuf>,
    /// After the run ends, keep serving its final metrics (--metrics) for this many seconds
    /// (0 to 3600), so that a scrape interval longer than the run still sees its end
    /// (`scanprof_run_ended`, the final totals and verdicts). A second Ctrl-C or SIGTERM ends it.
    #[arg(long, default_value_t = 0.0, value_name = "SECONDS", value_parser = parse_metrics_linger_s,
          allow_negative_numbers = true, requires = "metrics")]
    pub metrics_linger: f64,
    /// The run id label on every metric (set by `scanprof agent` for the runs it starts).
    #[arg(long, hide = true, value_name = "ID")]
    pub run_id: Option<String>,
    /// Size a BPF map before it is created (repeatable): MAP=ENTRIES. Defaults fit a scanner
    /// family in under 16 MB of locked memory (threads=1024, flows=16384, ...: docs/probes.md);
    /// a run whose map filled says which one to raise, e.g. `--map-size threads=4096`.
    /// Ring buffers (events, calls) take bytes. `scanprof doctor` shows each map's memory.
    #[arg(long = "map-size", value_name = "MAP=ENTRIES", value_parser = parse_map_size)]
    pub map_size: Vec<(String, u32)>,
    /// When to measure the probes' own BPF run time (kernel BPF statistics, which slow every BPF
    /// program on the machine while on): sampled (the last tenth of each tick, scaled up),
    /// always (counted the whole run; costs a full-speed sender about 8-14% of its rate here), off.
    /// When `kernel.bpf_stats_enabled` is already 1, scanprof counts the whole run anyway.
    #[arg(long, value_enum, default_value_t = BpfStatsArg::Sampled)]
    pub bpf_stats: BpfStatsArg,
    /// Where the probes see the family's syscalls: all (the raw sys_enter/sys_exit hooks, which
    /// every syscall of every process passes; each run costs less dispatch) or per-call (the
    /// tracepoints of the calls scanprof reads: sends, receives, bind, setsockopt, getsockopt,
    /// close, dup; every other syscall on the machine runs no program; needs tracefs; not yet
    /// exact for a family clearing its packet-socket statistics often: docs/benchmarks.md).
    /// SCANPROF_SYSCALL_HOOKS sets it when the option is not given.
    #[arg(long, value_enum, default_value_t = SyscallHooksArg::All, env = "SCANPROF_SYSCALL_HOOKS")]
    pub syscall_hooks: SyscallHooksArg,
    /// How the device stages (dev_queue, qdisc_enqueue, qdisc_dequeue, dev_xmit) are counted:
    /// exact (their programs run for every packet), sampled (attached only for the first
    /// tenth of each tick, so outside it a packet runs none of them; their counts are scaled
    /// by tick / window and shown as estimates, "≈ ... (sampled)"), or auto (exact until a
    /// tick in which the family sends faster than --sample-above, then sampled while it does
    /// and counted whole again after a tick at or below it, which the figures say). Drops, the
    /// syscall stage and the drops' attribution stay exact either way; verdicts that need exact
    /// device counts say they were not judged (docs/probes.md).
    #[arg(long, value_enum, default_value_t = DeviceStagesArg::Exact)]
    pub device_stages: DeviceStagesArg,
    /// With --device-stages auto (refused without it): the family's send rate, packets a second
    /// over a tick, above which the device stages are sampled [default: 50000]. At the default,
    /// their programs' run time alone is about 1.5% of a CPU on the development machine (~300 ns
    /// a packet; docs/benchmarks.md).
    #[arg(long, value_name = "PPS", value_parser = parse_positive_rate)]
    pub sample_above: Option<f64>,
    /// Run the launched command as this user (name or uid), with its groups from the user
    /// database, like `strace -u`; scanprof keeps its own privileges. Without it the command
    /// runs with the privileges scanprof was given (as root, when scanprof runs as root).
    #[arg(long, value_name = "USER")]
    pub user: Option<String>,
    /// Class the packets the family reads by length and show what handling each class costs:
    /// the lengths (bytes read, 1-65535, ascending, at most 3) at which the next class begins.
    /// `--recv-classes 256`: under 256 bytes, and 256 or more. The on-CPU time from a read's
    /// return to the thread's next receive call is charged to the class of what it read
    /// (single-message reads; a recvmmsg batch is not classed).
    #[arg(long, value_name = "BYTES,...", value_delimiter = ',', value_parser = parse_class_bound)]
    pub recv_classes: Vec<u32>,
    /// The family is a relay that writes each packet it reads to N outputs (1 to 64): the
    /// summary gets a relay funnel (ingress against egress, the kernel's drops before the read,
    /// its own drops: reads x N - sends, egress refused) and the relay verdicts.
    #[arg(long, value_name = "N",
          value_parser = clap::builder::RangedU64ValueParser::<u32>::new().range(1..=64))]
    pub relay_fanout: Option<u32>,
}

/// `--recv-classes`: one bound, 1 to 65535 bytes.
pub fn parse_class_bound(s: &str) -> Result<u32, String> {
    s.trim()
        .parse::<u32>()
        .ok()
        .filter(|n| (1..=65_535).contains(n))
        .ok_or_else(|| format!("{s:?} is not a length: give 1 to 65535 bytes"))
}

/// `--syscall-hooks`: where the syscall programs hook (probes::SyscallHooks).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SyscallHooksArg {
    PerCall,
    All,
}

/// `--device-stages`: how the device stages are counted (probes::DeviceStages).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DeviceStagesArg {
    Exact,
    Sampled,
    Auto,
}

/// `--sample-above`'s default, packets a second.
pub const DEFAULT_SAMPLE_ABOVE_PPS: f64 = 50_000.0;

/// A rate that is a finite number above 0.
fn parse_positive_rate(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!(
            "{s:?} is not a rate above 0 (packets a second, e.g. 50000)"
        )),
    }
}

/// `--bpf-stats`: when scanprof keeps the kernel's BPF run-time statistics on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BpfStatsArg {
    Sampled,
    Always,
    Off,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ReportFormat {
    Text,
    Md,
    Json,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SendMethodArg {
    /// sendto(2) on a UDP socket, one packet per call.
    Sendto,
    /// sendto(2) on a raw IP socket (IP and UDP headers built by the sender; needs CAP_NET_RAW).
    Raw,
    /// sendmmsg(2) on a UDP socket, --batch packets per call.
    Sendmmsg,
    /// An AF_PACKET socket (Ethernet frames; with --ring, a PACKET_TX_RING; needs CAP_NET_RAW).
    Packet,
}

/// How `scanprof send` waits for each packet's due time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PacerArg {
    /// Busy-wait on rdtsc with a calibrated TSC frequency.
    Tsc,
    /// Busy-wait on CLOCK_MONOTONIC.
    Clock,
    /// clock_nanosleep to each absolute due time.
    Sleep,
    /// No pacing.
    None,
}

/// Where the tsc pacer's frequency comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TscSourceArg {
    /// rdtsc across a ~100 ms nanosleep.
    Calibrate,
    /// The kernel's TSC frequency (perf_event mmap page, without root).
    Kernel,
}

/// When each packet is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SlotArg {
    /// One period after the previous packet actually started: lost time is never made up.
    PerPacket,
    /// Start + k periods: late packets are caught up.
    Deadline,
}

#[derive(Debug, Clone, Args)]
pub struct SendOptions {
    /// Destination: any IPv4 address you name (said on stderr before sending when it is not
    /// this machine's loopback or a scanprof lab); with SCANPROF_SEND_LOCAL_ONLY=1, loopback and
    /// the lab range 10.99.0.0/24 only.
    #[arg(long, value_name = "ADDR:PORT")]
    pub to: SocketAddrV4,
    /// Packets per second, a whole number; 0 sends as fast as possible (pacer none).
    #[arg(long, default_value_t = 1000.0, value_name = "PPS", value_parser = parse_pps_or_unlimited, allow_negative_numbers = true)]
    pub rate: f64,
    /// Number of packets to send.
    #[arg(long, value_name = "N", allow_negative_numbers = true,
          value_parser = clap::builder::RangedI64ValueParser::<u64>::new().range(0..))]
    pub count: Option<u64>,
    /// Seconds to send for (at most 30 days).
    #[arg(short, long, value_name = "SECONDS", value_parser = parse_duration_s, allow_negative_numbers = true)]
    pub duration: Option<f64>,
    /// UDP payload size in bytes, 8 to 65507 (the first 8 carry the packet's sequence number).
    #[arg(long, default_value_t = 64, value_name = "BYTES",
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new()
              .range(crate::senders::methods::SEQ_BYTES as u64..=MAX_UDP_PAYLOAD as u64))]
    pub size: usize,
    /// Socket send buffer to request, bytes, up to 1 GiB (default: the kernel's).
    #[arg(long, value_name = "BYTES",
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1 << 30))]
    pub sndbuf: Option<usize>,
    /// How to wait for each packet's due time (--rate 0 forces none).
    #[arg(long, value_enum, default_value_t = PacerArg::Clock)]
    pub pacer: PacerArg,
    /// Where the tsc pacer's TSC frequency comes from.
    #[arg(long, value_enum, default_value_t = TscSourceArg::Calibrate)]
    pub tsc_source: TscSourceArg,
    /// When each packet is due: per-packet slots (lost time is lost) or a deadline schedule.
    #[arg(long, value_enum, default_value_t = SlotArg::Deadline)]
    pub slot: SlotArg,
    /// Send syscall to use.
    #[arg(long, value_enum, default_value_t = SendMethodArg::Sendto)]
    pub method: SendMethodArg,
    /// Packets per sendmmsg call (or per TX ring flush with --method packet --ring), 1 to 1024.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub batch: u32,
    /// With --method packet: send through a PACKET_TX_RING, --batch frames per flush.
    #[arg(long)]
    pub ring: bool,
    /// With --method packet: the egress interface (default: the route's).
    #[arg(long, value_name = "IFACE")]
    pub dev: Option<String>,
    /// With --method packet: the socket also receives every frame of its namespace and never
    /// reads them, so the replies are still queued, unread, when it closes (a lab fault).
    #[arg(long, hide = true)]
    pub keep_replies: bool,
    /// Source port to bind (0: any).
    #[arg(long, default_value_t = 0)]
    pub src_port: u16,
    /// Destination ports: packet i goes to --to's port + (i mod N), as a scanner probes N ports
    /// (each port its own flow); 1 to 4096, sendto and sendmmsg only.
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=4096))]
    pub ports: u16,
    /// Fault injection for the tsc pacer: take F times the calibrated TSC frequency, so that
    /// every slot lasts F times 1/rate (a mis-calibrated pacer; 0.25..=1000, default 1: none).
    /// Slots may be far too long (a short run of a slot derived wildly wrong), never more than
    /// 4 times too short.
    #[arg(long, default_value_t = 1.0, value_name = "F", value_parser = parse_skew, allow_negative_numbers = true)]
    pub calibration_skew: f64,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Scenario {
    /// A paced sender with nothing in its way: achieved should equal requested.
    Healthy,
    /// A tbf qdisc with a small queue on the sender's link: QDISC_DROP losses.
    QdiscDrop,
    /// Probes to a port where nothing listens: expected NO_SOCKET drops, not loss.
    ClosedPort,
    /// A small send buffer behind a slow qdisc with a long queue: the sender blocks in send.
    Blocking,
    /// Packets to a lab address nobody answers ARP for: they wait for resolution, then
    /// NEIGH_FAILED drops.
    UnresolvedNeighbour,
    /// A rate far above what the machine can send (sendto at 1M pps): the sender is CPU-bound.
    CpuBound,
    /// The sleep pacer with per-packet slots at 10k pps: every wake-up is late, never made up.
    CoarsePacing,
    /// A CPU hog pinned to the sender's CPU, per-packet slots: the time it takes is lost.
    Preemption,
    /// AF_PACKET sends into a tbf with a tiny queue: ENOBUFS for every packet over its rate.
    SendErrors,
    /// The tsc pacer with its calibrated frequency skewed 1.5x: slots 50% too long.
    Miscalibrated,
    /// The target echoes every packet back to a sender that never reads: the replies overflow
    /// its socket's receive buffer (SOCKET_RCVBUFF).
    ReplyDrop,
    /// The sender is stopped (SIGSTOP) for 20 ms of every 100 ms, per-packet slots: it waits
    /// outside its pacing, and the time is lost.
    Stalls,
    /// A listener with a tiny receive buffer (SO_RCVBUF 4096) that reads 1,000 datagrams/s, fed
    /// 5,000 pps by the reference sender: what it cannot hold its socket drops (SOCKET_RCVBUFF).
    /// The listener is what is profiled.
    RcvbufOverflow,
    /// nmap's connect scan (`nmap -sT`, --max-rate and --min-rate at the rate) of closed ports
    /// 1 to rate x duration: every packet is the SYN of a connect(2), answered by a RST.
    ConnectScan,
    /// nmap -sS of 400 TCP ports of the target, each with a listener: every SYN is answered,
    /// and the sender host's kernel answers each SYN-ACK with a RST of its own. No loss.
    KernelReply,
    /// A packet socket that also receives (every frame), sending 20 pps to an echo and never
    /// reading: the replies are still queued when it closes (QUEUE_PURGE). No loss.
    SocketClosePurge,
    /// nmap -sU of 2,000 closed UDP ports of the target at 1,000 pps, whose namespace sends an
    /// ICMP port unreachable at most once a second after a burst (icmp_ratelimit 1000): most
    /// probes go unanswered beyond this host. The reply funnel's probes, replies arrived,
    /// delivered and dropped here must equal the namespaces' own SNMP counters; the top loss
    /// verdict is lost_beyond_host with the share the target held back.
    RepliesLost,
    /// A short run of 12 packets whose tsc pacer derived its slot 200x too long
    /// (`--calibration-skew 200` at 1000 pps): 200 ms gaps for a 1 ms slot.
    ShortMiscalibration,
    /// A scanner-like process family that never sends: a shell forks two children that exit
    /// with status 3 and 4 after 0.5 and 1 s, then exits with status 1 itself.
    NeverStarted,
    /// A UDP responder (`scanprof recv --respond`, SCHED_FIFO) with two kinds of packet, 64-byte
    /// ones (~200 ns of work) and 512-byte ones (~8 us), each answered, fed 2,000 pps of each
    /// by two reference senders; profiled with `--recv-classes 256`. It keeps up; scanprof's
    /// packets and cost per class must match the responder's own count and time per kind.
    ResponderKinds,
    /// The responder of responder-kinds with 100 us and 200 us of work, fed 5,000 pps of each
    /// kind: it needs more than its one CPU, and its socket buffer overflows (SOCKET_RCVBUFF).
    ReceiverCpuBound,
    /// Connection tracking on in the sender namespace and its table full (the global
    /// nf_conntrack_max lowered for the run, restored after): the sender's flows to 2 of its 4
    /// ports are refused, EPERM from sendto and NETFILTER_DROP.
    ConntrackFull,
    /// The sender in a cgroup with a CPU quota of 0.3 CPU, busy-waiting with per-packet slots:
    /// throttled 70% of each period, the time is lost.
    CgroupThrottled,
    /// A single-threaded packet relay (`scanprof relay`, 64 buffers, 1 -> 3 fan-out to lo
    /// through a 20 Mbit/s tbf) fed by the reference sender as fast as it goes: its outputs
    /// refuse most writes, its pool runs out and the kernel drops at its socket. scanprof's
    /// relay funnel must match its own counts within 1%.
    Relay,
    /// A UDP receiver with 2 SO_REUSEPORT workers (`scanprof recv --workers 2`; `--workers`
    /// sets 1 to 64), each fed 5,000 pps by a reference sender of its own (a worker per source
    /// port). It keeps up; scanprof's packets read, in all and per worker thread, must equal
    /// each worker's own count.
    ReceiverWorkers,
    /// A packet-socket reader (`scanprof ring-recv`) with a TPACKET_V2 ring of 8 frames that
    /// reads 200 frames/s, fed 2,000 pps: its ring is full most of the time. scanprof's ring
    /// stages must equal the socket's own PACKET_STATISTICS, and the top loss verdict is
    /// ring_full with the share tp_drops/tp_packets.
    RingFull,
}

#[derive(Debug, Clone, Args)]
pub struct RecvOptions {
    /// UDP port to receive on (every address of the namespace it runs in).
    #[arg(long, value_name = "PORT")]
    pub port: u16,
    /// Socket receive buffer to ask for with SO_RCVBUF, bytes, up to 1 GiB (the kernel doubles
    /// it, within net.core.rmem_max; default: the kernel's).
    #[arg(long, value_name = "BYTES",
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1 << 30))]
    pub rcvbuf: Option<usize>,
    /// Datagrams per second to read at most (a slow listener); default: as fast as they come.
    #[arg(long, value_name = "PPS", value_parser = parse_positive_pps, allow_negative_numbers = true)]
    pub read_rate: Option<f64>,
    /// Seconds to receive for (at most 30 days), from the bind, or with --wait-first from the
    /// first datagram read.
    #[arg(short, long, default_value_t = 10.0, value_name = "SECONDS", value_parser = parse_duration_s, allow_negative_numbers = true)]
    pub duration: f64,
    /// Wait at most SECONDS for the first datagram and count --duration from it (a receiver
    /// started before its sender); with none by then, end.
    #[arg(long, value_name = "SECONDS", value_parser = parse_duration_s, allow_negative_numbers = true)]
    pub wait_first: Option<f64>,
    /// Worker threads, 1 to 64, each reading its own socket on the port (SO_REUSEPORT): a
    /// datagram goes to worker (source port mod N), so senders choose the worker by their
    /// source port. Each counts its own datagrams and CPU time.
    #[arg(long, default_value_t = 1, value_name = "N",
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=64))]
    pub workers: usize,
    /// Also write what was received as JSON to this file (`packets`, `bytes`, `rcvbuf`, and
    /// per worker `tid`, `packets`, `bytes`, `cpu_ns`, and with --respond its `kinds`).
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
    /// Respond to every datagram (a UDP responder): those shorter than BYTES are the cheap
    /// kind, the others the costly kind; each gets its kind's work (--work-ns) and then a reply
    /// (the datagram sent back). Each worker counts its packets per kind and the time it spent
    /// handling them (CLOCK_MONOTONIC from the read's return to the next read).
    #[arg(long, value_name = "BYTES",
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=65_535))]
    pub respond: Option<usize>,
    /// With --respond: the work each kind gets, ns of CPU (cheap,costly), each 0 to 1 s.
    #[arg(long, value_name = "NS,NS", value_delimiter = ',', default_values_t = [200u64, 8_000],
          value_parser = clap::builder::RangedU64ValueParser::<u64>::new().range(0..=1_000_000_000))]
    pub work_ns: Vec<u64>,
    /// With --respond: send replies to this port of the datagram's source (default: its source
    /// port), e.g. a closed one, so that a sender that never reads does not fill its socket.
    #[arg(long, value_name = "PORT", requires = "respond")]
    pub reply_port: Option<u16>,
}

#[derive(Debug, Clone, Args)]
pub struct RelayOptions {
    /// Interface to read from: every IPv4 packet it receives (not those it sends) is read by
    /// a packet socket (AF_PACKET, SOCK_DGRAM, ETH_P_IP) bound to it.
    #[arg(long = "in", value_name = "DEV")]
    pub input: String,
    /// Interface to write each packet to, once per --out (repeat it: three --out make a 1 -> 3
    /// fan-out; the same interface may be named more than once). Each output is its own packet
    /// socket; frames are addressed to the output interface's own address, so on `lo` they come
    /// back to the namespace's own stack.
    #[arg(long = "out", value_name = "DEV", required = true)]
    pub outputs: Vec<String>,
    /// Buffers in the pool, 1 to 65536: a packet read takes one and keeps it until all its
    /// writes are done (a write refused with ENOBUFS or EAGAIN is retried later); a packet read
    /// when none is free is dropped.
    #[arg(long, default_value_t = 64, value_name = "N",
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=65_536))]
    pub pool: usize,
    /// Receive buffer of the reading socket to ask for with SO_RCVBUF, bytes, up to 1 GiB
    /// (default: the kernel's).
    #[arg(long, value_name = "BYTES",
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1 << 30))]
    pub rcvbuf: Option<usize>,
    /// Seconds to relay for (at most 30 days); then it stops reading and finishes the writes
    /// it holds (for at most 1 s more).
    #[arg(short, long, default_value_t = 10.0, value_name = "SECONDS", value_parser = parse_duration_s, allow_negative_numbers = true)]
    pub duration: f64,
    /// Also write its counts as JSON to this file (`received`, `forwarded`, `writes`,
    /// `refused_writes`, `pool_drops`, `abandoned_writes`, `kernel_drops`, ...).
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
}

#[derive(Debug, Clone, Args)]
pub struct RingRecvOptions {
    /// Device to bind to (in the network namespace it runs in), e.g. a lab's veth.
    #[arg(long, value_name = "NAME")]
    pub dev: String,
    /// Frames in the receive ring (2048 bytes each, two per 4096-byte block): an even number,
    /// 2 to 65536.
    #[arg(long, default_value_t = 64, value_name = "N",
          value_parser = clap::builder::RangedU64ValueParser::<u32>::new().range(2..=65_536))]
    pub frames: u32,
    /// Frames per second to read at most (a reader that falls behind); default: as they come.
    #[arg(long, value_name = "PPS", value_parser = parse_positive_pps, allow_negative_numbers = true)]
    pub read_rate: Option<f64>,
    /// Seconds to read for (at most 30 days).
    #[arg(short, long, default_value_t = 10.0, value_name = "SECONDS", value_parser = parse_duration_s, allow_negative_numbers = true)]
    pub duration: f64,
    /// Seconds to hold the socket open after reading stops, before reading PACKET_STATISTICS
    /// (which clears the kernel's counters): a profiler's sample then sees the final counts.
    /// With `--end close`: seconds to stay alive after closing it unread. 0 to 60.
    #[arg(long, default_value_t = 0.0, value_name = "SECONDS", value_parser = parse_linger_s, allow_negative_numbers = true)]
    pub linger: f64,
    /// Also read PACKET_STATISTICS every this many milliseconds while reading (1 to 60000), from
    /// a second thread, as libpcap's `pcap_stats` does in zmap's monitor thread: each read clears
    /// the kernel's counters, and the counts reported are the sums of every read.
    #[arg(long, value_name = "MS",
          value_parser = clap::builder::RangedU64ValueParser::<u64>::new().range(1..=60_000))]
    pub stats_every: Option<u64>,
    /// How the socket ends once reading (and lingering) stops: `read` reads PACKET_STATISTICS
    /// first; `close` closes it unread (close(2)) and then lingers instead; `exit` leaves it
    /// open, unread, for the process's exit to close. Unread, the counts since the last
    /// statistics read are known only from the device: `dev_rx` and `dev_tx`.
    #[arg(long, value_enum, default_value_t = RingEnd::Read, value_name = "HOW")]
    pub end: RingEnd,
    /// Also write the counts as JSON to this file (`read`, `tp_packets`, `tp_drops`, `queued`,
    /// `statistics_reads`, `dev_rx`, `dev_tx`, `frames`, `frame_size`, `dev`, `duration_s`).
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
}

/// How `scanprof ring-recv` ends its socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RingEnd {
    /// read PACKET_STATISTICS after lingering, then close
    Read,
    /// close it unread, then linger
    Close,
    /// leave it unread and open for the process's exit to close
    Exit,
}

#[derive(Debug, Clone, Args)]
pub struct LabOptions {
    /// What to stage in the lab.
    #[arg(value_enum, default_value_t = Scenario::Healthy)]
    pub scenario: Scenario,
    /// Run every scenario in turn (each as `scanprof lab SCENARIO --json`) and print a table of
    /// the expected cause against the top verdict; exit 1 if a verdict names the wrong cause or
    /// its share is more than 10 points off the measured truth.
    #[arg(long, conflicts_with_all = ["scenario", "export", "rate"])]
    pub suite: bool,
    /// Seconds the reference sender runs (at most 30 days).
    #[arg(short, long, default_value_t = 5.0, value_name = "SECONDS", value_parser = parse_duration_s, allow_negative_numbers = true)]
    pub duration: f64,
    /// Packets per second the reference sender is asked for, more than 0 (default depends on
    /// the scenario).
    #[arg(long, value_name = "PPS", value_parser = parse_positive_pps, allow_negative_numbers = true)]
    pub rate: Option<f64>,
    /// Length of a tick in seconds (0.01 to 3600).
    #[arg(short, long, default_value_t = 1.0, value_name = "SECONDS", value_parser = parse_interval_s, allow_negative_numbers = true)]
    pub interval: f64,
    /// Print NDJSON instead of text (the lab's own checks come as a `lab` object last; with
    /// --suite, one `suite` object).
    #[arg(long)]
    pub json: bool,
    /// Plain text instead of the live terminal view (the default when stdout is a terminal).
    #[arg(long)]
    pub no_tui: bool,
    /// Close the live view as soon as the run ends and print the summary and the lab's checks,
    /// instead of keeping the ended view until q.
    #[arg(long, conflicts_with = "suite")]
    pub exit_at_end: bool,
    /// Print only the summary and the lab's checks (and warnings): no line per tick or at start
    /// (text output).
    #[arg(short, long, conflicts_with = "suite")]
    pub quiet: bool,
    /// Also write a trace bundle of the run here (and where the view's `e` key writes). The
    /// directory must be new or empty, unless --force.
    #[arg(short = 'o', long, visible_alias = "output", value_name = "DIR")]
    pub export: Option<std::path::PathBuf>,
    /// Write the headers of the lab sender's dropped packets to this pcapng file at the end, as
    /// `run --pcap` does (each packet commented with its drop reason, location and device).
    #[arg(long, value_name = "FILE", conflicts_with = "suite")]
    pub pcap: Option<std::path::PathBuf>,
    /// Write the --export bundle into a directory that is not empty (an earlier bundle's files
    /// in it are removed first; other files are left alone).
    #[arg(long, requires = "export")]
    pub force: bool,
    /// Scanner profile to profile the reference sender with (a name or a .toml file).
    #[arg(long, default_value = "scanprof-send", value_name = "NAME|FILE")]
    pub profile: String,
    /// Serve Prometheus metrics of the lab's run at http://ADDR:PORT/metrics (as for run).
    #[arg(long, value_name = "ADDR:PORT")]
    pub metrics: Option<std::net::SocketAddr>,
    /// Write the same metrics to this file after every tick (as for run).
    #[arg(long, value_name = "PATH")]
    pub metrics_file: Option<std::path::PathBuf>,
    /// Worker threads of the receiver-workers scenario's receiver, 1 to 64 (default 2).
    #[arg(long, value_name = "N", conflicts_with = "suite",
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=64))]
    pub workers: Option<usize>,
    /// Path of the scanprof binary to run as the sender (default: this one).
    #[arg(long, hide = true)]
    pub sender_exe: Option<PathBuf>,
}

/// Options of `scanprof baseline`.
#[derive(Debug, Clone, Args)]
pub struct BaselineOptions {
    /// Rates for each pacer, packets per second, comma-separated; 0 = unlimited.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "100,1000,10000,100000,0",
        value_name = "LIST",
        value_parser = parse_pps_or_unlimited,
        allow_negative_numbers = true
    )]
    pub rates: Vec<f64>,
    /// Pacers of the reference sender to measure, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "tsc,clock,sleep",
        value_name = "LIST",
        value_parser = ["tsc", "clock", "sleep", "none"]
    )]
    pub pacers: Vec<String>,
    /// Send methods to measure at full speed, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "sendto,raw,sendmmsg,packet",
        value_name = "LIST",
        value_parser = ["sendto", "raw", "sendmmsg", "packet"]
    )]
    pub methods: Vec<String>,
    /// Seconds each cell sends for (at most 60).
    #[arg(long, default_value_t = 2.0, value_name = "SECONDS", value_parser = parse_baseline_s, allow_negative_numbers = true)]
    pub seconds: f64,
    /// Where to send: 127.0.0.1 and/or a private namespace lab, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "loopback,lab",
        value_name = "LIST",
        value_parser = ["loopback", "lab"]
    )]
    pub targets: Vec<String>,
    /// Print one JSON object {machine, pacer_rows, method_rows} instead of tables.
    #[arg(long)]
    pub json: bool,
}

/// Most steps a sweep may have.
pub const MAX_SWEEP_STEPS: usize = 50;

/// Options of `scanprof sweep`.
#[derive(Debug, Clone, Args)]
pub struct SweepOptions {
    /// Requested rates, packets per second, comma-separated, each substituted for `{}` in the
    /// command (at most 50).
    #[arg(long, value_delimiter = ',', value_name = "LIST", value_parser = parse_positive_pps,
          allow_negative_numbers = true, conflicts_with_all = ["from", "to", "steps"],
          required_unless_present = "from")]
    pub rates: Vec<f64>,
    /// Lowest rate of a geometric series (with --to and --steps).
    #[arg(long, value_name = "PPS", value_parser = parse_positive_pps, allow_negative_numbers = true,
          requires_all = ["to", "steps"])]
    pub from: Option<f64>,
    /// Highest rate of a geometric series.
    #[arg(long, value_name = "PPS", value_parser = parse_positive_pps, allow_negative_numbers = true,
          requires = "from")]
    pub to: Option<f64>,
    /// Number of rates from --from to --to, in equal ratios (2 to 50).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(2..=50), requires = "from")]
    pub steps: Option<u32>,
    /// The sweep never requests more than this many packets per second: a rate above it is
    /// refused before anything runs. Required unless --lab (whose traffic cannot leave the lab).
    #[arg(long, value_name = "PPS", value_parser = parse_positive_pps, allow_negative_numbers = true)]
    pub max_rate: Option<f64>,
    /// Seconds each step runs (at most 30 days): the command is ended after it, as `run
    /// --duration` does; the lab's reference sender sends for exactly this long.
    #[arg(short, long, default_value_t = 5.0, value_name = "SECONDS", value_parser = parse_duration_s, allow_negative_numbers = true)]
    pub duration: f64,
    /// Length of a tick in seconds (0.01 to 3600).
    #[arg(short, long, default_value_t = 1.0, value_name = "SECONDS", value_parser = parse_interval_s, allow_negative_numbers = true)]
    pub interval: f64,
    /// Make a private two-namespace lab for the sweep (removed at the end). Without a command,
    /// the reference sender (`scanprof send`) sends into it; with one, the command runs in the
    /// lab's sender namespace, where `{target}` is the lab's receiver address.
    #[arg(long)]
    pub lab: bool,
    /// Shape the lab's sender link with a tbf of this tc rate (e.g. 2mbit, 20mbit).
    #[arg(long, value_name = "RATE", requires = "lab")]
    pub tbf_rate: Option<String>,
    /// The tbf's bucket (tc burst).
    #[arg(long, default_value = "4kb", value_name = "SIZE", requires = "tbf_rate")]
    pub tbf_burst: String,
    /// The tbf's queue (tc limit).
    #[arg(long, default_value = "10kb", value_name = "SIZE", requires = "tbf_rate")]
    pub tbf_limit: String,
    /// UDP payload bytes of the lab's reference sender, 8 to 1472 (the first 8 carry the
    /// packet's sequence number).
    #[arg(long, default_value_t = 512, value_name = "BYTES",
          value_parser = clap::value_parser!(u16).range(crate::senders::methods::SEQ_BYTES as i64..=1472))]
    pub size: u16,
    /// Scanner profile (a name or a .toml file); default: recognised from the command line.
    #[arg(long, value_name = "NAME|FILE")]
    pub profile: Option<String>,
    /// Print NDJSON: one `sweep_step` object per step, then one `sweep` object.
    #[arg(long)]
    pub json: bool,
    /// Print only the table (or NDJSON) and warnings: no line on stderr as each step starts and
    /// ends.
    #[arg(short, long)]
    pub quiet: bool,
    /// Write a sweep bundle here: each step's event stream, sweep.ndjson, sweep.md and
    /// sweep.svg (achieved against requested, the ideal line, loss). The directory must be new
    /// or empty.
    #[arg(short = 'o', long, value_name = "DIR")]
    pub export: Option<PathBuf>,
    /// The command, after `--`, with `{}` where the rate goes (and `{target}` with --lab).
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// `--baseline-pacer`: a pacer of the reference sender that paces (not `none`).
fn baseline_pacer(s: &str) -> Result<PacerKind, String> {
    match s.parse::<PacerKind>() {
        Ok(p) if p != PacerKind::None => Ok(p),
        _ => Err(format!("must be tsc, clock or sleep, not {s:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn map_sizes_are_name_and_entries_within_range() {
        assert_eq!(parse_map_size("threads=4096"), Ok(("threads".into(), 4096)));
        assert_eq!(parse_map_size(" flows = 65536 "), Ok(("flows".into(), 65536)));
        for bad in [
            "threads",
            "=5",
            "threads=0",
            "threads=-1",
            "threads=x",
            "a b=5",
            "threads=99999999999",
        ] {
            assert!(parse_map_size(bad).is_err(), "{bad} accepted");
        }
        let max = crate::probes::MAX_MAP_ENTRIES;
        assert!(parse_map_size(&format!("events={max}")).is_ok());
        assert!(parse_map_size(&format!("events={}", max + 1)).is_err());
        let cli = parse(&[
            "attach",
            "-p",
            "5",
            "--map-size",
            "threads=2048",
            "--map-size",
            "flows=100",
        ])
        .unwrap();
        match cli.command {
            Command::Attach { run, .. } => assert_eq!(
                run.map_size,
                [("threads".to_string(), 2048), ("flows".to_string(), 100)]
            ),
            other => panic!("{other:?}"),
        }
    }

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("scanprof").chain(args.iter().copied()))
    }

    /// `--baseline-pacer` is a pacer that paces, parsed into the pacer type once: `none` and
    /// unknown names are refused by the parser, naming the three it takes.
    #[test]
    fn the_baseline_pacer_is_a_pacer_that_paces() {
        let pacer = |args: &[&str]| match parse(args).map(|c| c.command) {
            Ok(Command::Attach { run, .. }) => Ok(run.baseline_pacer),
            Ok(other) => panic!("{other:?}"),
            Err(e) => Err(e.to_string()),
        };
        assert_eq!(pacer(&["attach", "-p", "10"]), Ok(PacerKind::Tsc));
        assert_eq!(
            pacer(&["attach", "-p", "10", "--baseline-pacer", "sleep"]),
            Ok(PacerKind::Sleep)
        );
        for bad in ["none", "rdtsc"] {
            let err = pacer(&["attach", "-p", "10", "--baseline-pacer", bad]).unwrap_err();
            assert!(
                err.contains("--baseline-pacer") && err.contains("must be tsc, clock or sleep"),
                "{err}"
            );
        }
    }

    #[test]
    fn attach_takes_several_pids_and_run_options() {
        let cli = parse(&[
            "attach",
            "-p",
            "10",
            "--pid",
            "20",
            "--requested",
            "1000",
            "--json",
        ])
        .unwrap();
        match cli.command {
            Command::Attach { pids, run, .. } => {
                assert_eq!(pids, vec![10, 20]);
                assert_eq!(run.requested, Some(1000.0));
                assert!(run.json);
                assert_eq!(run.interval, 1.0);
            }
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn attach_and_run_take_a_pcap_file() {
        let cli = parse(&["attach", "-p", "10", "--pcap", "drops.pcapng"]).unwrap();
        match cli.command {
            Command::Attach { run, .. } => assert_eq!(run.pcap, Some("drops.pcapng".into())),
            other => panic!("parsed as {other:?}"),
        }
        let cli = parse(&["run", "--pcap", "/tmp/d.pcapng", "--", "masscan"]).unwrap();
        match cli.command {
            Command::Run { run, .. } => assert_eq!(run.pcap, Some("/tmp/d.pcapng".into())),
            other => panic!("parsed as {other:?}"),
        }
        assert!(
            parse(&["run", "--pcap", "--", "masscan"]).is_err(),
            "--pcap needs a file"
        );
    }

    #[test]
    fn attach_requires_a_pid() {
        assert!(parse(&["attach"]).is_err());
    }

    #[test]
    fn run_takes_the_command_after_double_dash() {
        let cli = parse(&["run", "--duration", "3", "--", "masscan", "--rate", "-1"]).unwrap();
        match cli.command {
            Command::Run { run, command } => {
                assert_eq!(run.duration, Some(3.0));
                assert_eq!(command, vec!["masscan", "--rate", "-1"]);
            }
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn negative_pid_is_read_as_a_bad_value_not_as_a_flag() {
        let err = parse(&["attach", "-p", "-1"]).unwrap_err();
        assert_eq!(err.kind(), clap::error::ErrorKind::ValueValidation, "{err}");
    }

    #[test]
    fn lab_defaults_to_the_healthy_scenario() {
        match parse(&["lab"]).unwrap().command {
            Command::Lab(o) => {
                assert_eq!(o.scenario, Scenario::Healthy);
                assert!(!o.suite);
                assert_eq!(o.profile, "scanprof-send");
            }
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn lab_suite_takes_no_scenario() {
        match parse(&["lab", "--suite", "--duration", "4", "--json"])
            .unwrap()
            .command
        {
            Command::Lab(o) => assert!(o.suite && o.json && o.duration == 4.0),
            other => panic!("parsed as {other:?}"),
        }
        assert!(parse(&["lab", "--suite", "blocking"]).is_err());
        match parse(&["lab", "send-errors"]).unwrap().command {
            Command::Lab(o) => assert_eq!(o.scenario, Scenario::SendErrors),
            other => panic!("parsed as {other:?}"),
        }
    }

    /// `--profile`'s help names every built-in profile (the list build.rs makes from wrappers/).
    #[test]
    fn profile_help_names_every_built_in_profile() {
        use clap::CommandFactory;
        let cmd = Cli::command();
        let mut helps = Vec::new();
        for sub in cmd.get_subcommands() {
            for arg in sub.get_arguments().filter(|a| a.get_long() == Some("profile")) {
                let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
                // The scanner's profile (attach, run...), not `--profile` of other commands.
                if help.starts_with("Scanner profile: a built-in one") {
                    helps.push(help);
                }
            }
        }
        assert!(!helps.is_empty(), "no --profile flag found");
        let set = crate::wrappers::ProfileSet::builtin().unwrap();
        for help in &helps {
            for p in set.profiles() {
                assert!(
                    help.contains(p.name.as_str()),
                    "--profile's help leaves out {}: {help}",
                    p.name
                );
            }
        }
    }

    /// Property-style: every flag of every subcommand that takes a value, fed many numeric
    /// strings (huge, tiny, NaN, inf, negative, 1e308, "-0", overflowing integers...) through
    /// the clap parser: nothing panics, a refusal names the flag, and every seconds or rate
    /// value that is accepted converts to a Duration without panic.
    #[test]
    fn no_numeric_input_to_any_flag_panics() {
        use clap::CommandFactory;
        let mut inputs: Vec<String> = [
            "0",
            "-0",
            "0.0",
            "-0.0",
            "1",
            "-1",
            "0.001",
            "0.01",
            "1e-300",
            "5e-324",
            "1e20",
            "1e308",
            "1.8e308",
            "-1e308",
            "1e309",
            "inf",
            "-inf",
            "+inf",
            "infinity",
            "NaN",
            "nan",
            "-nan",
            "18446744073709551615",
            "18446744073709551616",
            "4294967296",
            "-9223372036854775808",
            "99999999999999999999999999",
            "3600",
            "3600.0001",
            "2592000",
            "2592001",
            "1000000000",
            "1000000001",
            "65507",
            "65508",
            "0x10",
            "1_000",
            " 5",
            "5 ",
            "",
            ".",
            "-",
            "e",
            "1e",
            "--",
            "2.5",
            "0.25",
            "4",
            "4.5",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        // A deterministic spread of magnitudes and signs on top.
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..200 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let mant = (x % 10_000) as f64 / 100.0;
            let exp = (x >> 20) % 640;
            let sign = if x & 1 == 0 { "" } else { "-" };
            inputs.push(format!("{sign}{mant}e{}", exp as i64 - 320));
        }
        let required: &[(&str, &[&str])] = &[
            ("attach", &["-p", "4242"]),
            ("run", &["--", "true"]),
            ("record", &["-o", "/nonexistent/b", "--", "true"]),
            ("report", &["/nonexistent/b"]),
            ("send", &["--to", "127.0.0.1:9", "--count", "1"]),
            ("recv", &["--port", "9000"]),
            ("relay", &["--in", "lo", "--out", "lo"]),
            ("ring-recv", &["--dev", "lo"]),
            ("lab", &[]),
            ("baseline", &[]),
            ("doctor", &[]),
            ("sweep", &["--lab", "--rates", "1000"]),
            ("compare", &["/nonexistent/a", "/nonexistent/b"]),
            ("agent", &[]),
            ("completions", &["bash"]),
            ("man", &[]),
        ];
        let root = Cli::command();
        let mut flags_tried = 0;
        for sub in root.get_subcommands() {
            let name = sub.get_name();
            let base = required
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, a)| *a)
                .unwrap_or_else(|| panic!("no required arguments listed for subcommand {name}"));
            for arg in sub.get_arguments() {
                let Some(long) = arg.get_long() else { continue };
                if !arg.get_action().takes_values() || long == "help" {
                    continue;
                }
                flags_tried += 1;
                for v in &inputs {
                    let flag = format!("--{long}={v}");
                    let mut argv = vec!["scanprof", name, flag.as_str()];
                    // Flags that need a partner (e.g. --force with --export) get it.
                    argv.extend(base.iter().copied());
                    let parsed = std::panic::catch_unwind(|| Cli::try_parse_from(&argv));
                    let parsed = parsed.unwrap_or_else(|_| panic!("{argv:?} panicked in the parser"));
                    match parsed {
                        Ok(cli) => durations_of(&cli),
                        Err(e) => {
                            let msg = e.to_string();
                            if e.kind() == clap::error::ErrorKind::ValueValidation {
                                assert!(msg.contains(&format!("--{long}")), "{argv:?}: {msg}");
                            }
                        }
                    }
                }
            }
        }
        assert!(flags_tried >= 30, "only {flags_tried} flags found");
    }

    /// Converts every seconds value of a parsed command line as the commands do.
    fn durations_of(cli: &Cli) {
        use std::time::Duration;
        let run = |r: &RunOptions| {
            let _ = Duration::from_secs_f64(r.interval);
            let _ = r.duration.map(Duration::from_secs_f64);
            let _ = Duration::from_secs_f64(r.baseline_seconds);
            let _ = Duration::from_secs_f64(r.metrics_linger);
            if let Some(rq) = r.requested {
                assert!(rq.is_finite() && rq > 0.0);
            }
        };
        match &cli.command {
            Command::Attach { run: r, .. } | Command::Run { run: r, .. } | Command::Record { run: r, .. } => {
                run(r)
            }
            Command::Send(o) => {
                let _ = o.duration.map(Duration::from_secs_f64);
                assert!(o.rate.is_finite() && o.rate >= 0.0);
                assert!(o.size <= MAX_UDP_PAYLOAD);
            }
            Command::Recv(o) => {
                let _ = Duration::from_secs_f64(o.duration);
                assert!(o.read_rate.is_none_or(|r| r.is_finite() && r > 0.0));
            }
            Command::Relay(o) => {
                let _ = Duration::from_secs_f64(o.duration);
                assert!(!o.outputs.is_empty() && o.pool >= 1);
            }
            Command::RingRecv(o) => {
                let _ = Duration::from_secs_f64(o.duration + o.linger);
                assert!(o.read_rate.is_none_or(|r| r.is_finite() && r > 0.0));
            }
            Command::Lab(o) => {
                let _ = Duration::from_secs_f64(o.duration + 10.0);
                let _ = Duration::from_secs_f64(o.interval);
                assert!(o.rate.is_none_or(|r| r.is_finite() && r > 0.0));
            }
            Command::Baseline(o) => {
                let _ = Duration::from_secs_f64(o.seconds * 2.0 + 10.0);
                assert!(o.rates.iter().all(|r| r.is_finite() && *r >= 0.0));
            }
            Command::Sweep(o) => {
                let _ = Duration::from_secs_f64(o.duration + 10.0);
                let _ = Duration::from_secs_f64(o.interval);
                assert!(o.rates.iter().all(|r| r.is_finite() && *r > 0.0));
                assert!(o.max_rate.is_none_or(|r| r.is_finite() && r > 0.0));
            }
            Command::Report { .. }
            | Command::Doctor { .. }
            | Command::Compare { .. }
            | Command::Agent(_)
            | Command::Completions { .. }
            | Command::Man { .. } => {}
        }
    }

    #[test]
    fn out_of_range_numbers_are_refused_naming_the_flag_and_the_range() {
        for (args, flag, says) in [
            (
                &["run", "--duration", "1e20", "--", "true"][..],
                "--duration",
                "at most 2592000",
            ),
            (
                &["run", "--interval", "NaN", "--", "true"],
                "--interval",
                "out of range",
            ),
            (&["lab", "--rate", "0"], "--rate", "more than 0"),
            (&["lab", "--interval", "1e20"], "--interval", "at most 3600"),
            (
                &["send", "--to", "127.0.0.1:9", "--duration=-1"],
                "--duration",
                "more than 0",
            ),
            (
                &["send", "--to", "127.0.0.1:9", "--size", "100000"],
                "--size",
                "65507",
            ),
            (
                &["send", "--to", "127.0.0.1:9", "--size", "4"],
                "--size",
                "8..=65507",
            ),
            (
                &["send", "--to", "127.0.0.1:9", "--count", "-1"],
                "--count",
                "-1 is not in 0..",
            ),
            (
                &["run", "--map-size", "nosuch=5", "--", "true"],
                "--map-size",
                "no map scanprof can resize",
            ),
            (&["baseline", "--seconds", "inf"], "--seconds", "out of range"),
            (&["baseline", "--rates", "100,-5"], "--rates", "at least 0"),
        ] {
            let err = parse(args).unwrap_err().to_string();
            assert!(err.contains(flag) && err.contains(says), "{args:?}: {err}");
        }
        match parse(&["send", "--to", "127.0.0.1:9", "--rate", "-0", "--count", "1"])
            .unwrap()
            .command
        {
            Command::Send(o) => assert!(o.rate == 0.0 && o.rate.is_sign_positive()),
            other => panic!("parsed as {other:?}"),
        }
    }
}
