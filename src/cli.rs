//! The command line: clap derive types only. Every subcommand's behaviour lives in
//! src/commands; the flag groups shared by attach and run are defined once here.

use std::net::SocketAddrV4;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

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
        #[command(flatten)]
        run: RunOptions,
    },
    /// Start a command once every probe is attached and profile it and its children.
    /// If the run ends first (--duration, Ctrl-C), the command is sent SIGTERM.
    Run {
        #[command(flatten)]
        run: RunOptions,
        /// The command and its arguments, after `--`.
        #[arg(last = true, required = true, value_name = "COMMAND")]
        command: Vec<String>,
    },
    /// Profile like attach (with -p) or run (with a command), and write a trace bundle to -o.
    Record {
        /// Directory to write the bundle into (created if missing).
        #[arg(short, long, value_name = "DIR")]
        output: std::path::PathBuf,
        /// Process to profile, with its threads and children (repeatable); or give a command.
        #[arg(short, long = "pid", value_name = "PID", allow_negative_numbers = true)]
        pids: Vec<u32>,
        #[command(flatten)]
        run: RunOptions,
        /// The command to start and profile, after `--` (instead of -p).
        #[arg(last = true, value_name = "COMMAND")]
        command: Vec<String>,
    },
    /// Re-render a bundle's report (no root needed): text, markdown or JSON.
    Report {
        /// A bundle directory, or its events.ndjson.
        #[arg(value_name = "PATH")]
        path: std::path::PathBuf,
        /// Output format.
        #[arg(long, value_enum, default_value_t = ReportFormat::Text)]
        format: ReportFormat,
    },
    /// Check what this machine's kernel and privileges allow, and what to do about it.
    Doctor {
        /// Print the checks as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Reference UDP sender: paced packets to loopback or a lab address (traffic source).
    Send(SendOptions),
    /// Set up a private network-namespace lab, profile a reference sender in it, remove it.
    Lab(LabOptions),
    /// Measure what this machine allows a sender: pacers x rates and send methods at full
    /// speed, against loopback and a private lab it creates and removes, plus the host facts.
    Baseline(BaselineOptions),
}

/// Options shared by `attach` and `run`.
#[derive(Debug, Clone, Args)]
pub struct RunOptions {
    /// Length of a tick in seconds: rates and views update this often.
    #[arg(long, default_value_t = 1.0, value_name = "SECONDS")]
    pub interval: f64,
    /// End the run after this many seconds (default: when the target's family exits, or Ctrl-C).
    #[arg(long, value_name = "SECONDS")]
    pub duration: Option<f64>,
    /// The packets per second the scanner was asked for (default: read from the scanner's
    /// command line and its own rate-setup functions, as its profile says).
    #[arg(long, value_name = "PPS")]
    pub requested: Option<f64>,
    /// Scanner profile: unicornscan, masscan, zmap, nmap, hping3, scanprof-send, generic, or a
    /// profile file (.toml). Default: recognised from the target's command line and executable.
    #[arg(long, value_name = "NAME|FILE")]
    pub profile: Option<String>,
    /// Switch on the profile's per-packet uprobes: all of them, or the probes named
    /// (comma-separated). Each hit costs the scanner about 14 us on this class of machine.
    #[arg(long, value_name = "PROBES", num_args = 0..=1, default_missing_value = "all")]
    pub per_packet: Option<String>,
    /// Print NDJSON (one `sample` object per tick, a `summary` at the end) instead of text.
    #[arg(long)]
    pub json: bool,
    /// Plain text instead of the live terminal view (the default when stdout is a terminal).
    #[arg(long)]
    pub no_tui: bool,
    /// Before attaching, measure what a reference sender reaches at the requested rate on this
    /// machine (in a private lab), and show it beside the target's figure. The rate is
    /// --requested, else the exact rate or cap the scanner's profile finds for it (its command
    /// line, its config file, or the scanner's default); stderr names which.
    #[arg(long)]
    pub baseline: bool,
    /// Pacer of the --baseline sender: tsc, clock, sleep (match the scanner's pacing class).
    #[arg(long, default_value = "tsc", value_name = "PACER")]
    pub baseline_pacer: String,
    /// Seconds the --baseline sender runs.
    #[arg(long, default_value_t = 2.0, value_name = "SECONDS")]
    pub baseline_seconds: f64,
    /// Also write a trace bundle (events, Perfetto trace, report.md, plots, bpftrace script) here.
    #[arg(long, value_name = "DIR")]
    pub export: Option<std::path::PathBuf>,
    /// In bundles, replace IP addresses and the host name with consistent stand-ins.
    #[arg(long)]
    pub redact: bool,
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
    /// Destination: 127.0.0.0/8 or the lab range 10.99.0.0/24 only.
    #[arg(long, value_name = "ADDR:PORT")]
    pub to: SocketAddrV4,
    /// Packets per second, a whole number; 0 sends as fast as possible (pacer none).
    #[arg(long, default_value_t = 1000.0, value_name = "PPS")]
    pub rate: f64,
    /// Number of packets to send.
    #[arg(long, value_name = "N")]
    pub count: Option<u64>,
    /// Seconds to send for.
    #[arg(long, value_name = "SECONDS")]
    pub duration: Option<f64>,
    /// UDP payload size in bytes.
    #[arg(long, default_value_t = 64, value_name = "BYTES")]
    pub size: usize,
    /// Socket send buffer to request, bytes (default: the kernel's).
    #[arg(long, value_name = "BYTES")]
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
    /// Packets per sendmmsg call (or per TX ring flush with --method packet --ring).
    #[arg(long, default_value_t = 32)]
    pub batch: u32,
    /// With --method packet: send through a PACKET_TX_RING, --batch frames per flush.
    #[arg(long)]
    pub ring: bool,
    /// With --method packet: the egress interface (default: the route's).
    #[arg(long, value_name = "IFACE")]
    pub dev: Option<String>,
    /// Source port to bind (0: any).
    #[arg(long, default_value_t = 0)]
    pub src_port: u16,
    /// Fault injection for the tsc pacer: take F times the calibrated TSC frequency, so that
    /// every slot lasts F times 1/rate (a mis-calibrated pacer; 0.25..=4, default 1: none).
    #[arg(long, default_value_t = 1.0, value_name = "F")]
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
    /// Seconds the reference sender runs.
    #[arg(long, default_value_t = 5.0, value_name = "SECONDS")]
    pub duration: f64,
    /// Packets per second the reference sender is asked for (default depends on the scenario).
    #[arg(long, value_name = "PPS")]
    pub rate: Option<f64>,
    /// Length of a tick in seconds.
    #[arg(long, default_value_t = 1.0, value_name = "SECONDS")]
    pub interval: f64,
    /// Print NDJSON instead of text (the lab's own checks come as a `lab` object last; with
    /// --suite, one `suite` object).
    #[arg(long)]
    pub json: bool,
    /// Plain text instead of the live terminal view (the default when stdout is a terminal).
    #[arg(long)]
    pub no_tui: bool,
    /// Also write a trace bundle of the run here (and where the view's `e` key writes).
    #[arg(long, value_name = "DIR")]
    pub export: Option<std::path::PathBuf>,
    /// Scanner profile to profile the reference sender with (a name or a .toml file).
    #[arg(long, default_value = "scanprof-send", value_name = "NAME|FILE")]
    pub profile: String,
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
        value_name = "LIST"
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
    /// Seconds each cell sends for.
    #[arg(long, default_value_t = 2.0, value_name = "SECONDS")]
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

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("scanprof").chain(args.iter().copied()))
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
            Command::Attach { pids, run } => {
                assert_eq!(pids, vec![10, 20]);
                assert_eq!(run.requested, Some(1000.0));
                assert!(run.json);
                assert_eq!(run.interval, 1.0);
            }
            other => panic!("parsed as {other:?}"),
        }
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
}
