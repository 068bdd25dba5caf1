//! `scanprof lab [SCENARIO]`: builds a private two-namespace lab, stages a known situation with the
//! reference sender, profiles it under `run`, prints what scanprof saw beside independent counts
//! (the receiver, tc, the namespaces' SNMP counters) and whether the diagnosis named the staged
//! cause, and removes the lab. `--suite` runs every scenario in turn as a child process and
//! tabulates the verdicts against the known causes (docs/diagnosis.md, "Scenario suite results").

use std::net::{SocketAddr, SocketAddrV4, UdpSocket};
use std::process::{Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::ValueEnum;
use nix::sched::{sched_getaffinity, sched_setaffinity, CpuSet};
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::waitpid;
use nix::unistd::{fork, ForkResult, Pid};
use serde::{Deserialize, Serialize};

use crate::analysis::verdict::{Cause, Confidence, Kind, UnknownCause};
use crate::analysis::Summary;
use crate::cli::{LabOptions, RunOptions, Scenario};
use crate::collect::DropClass;
use crate::lab::{Lab, LabConfig, SinkReport, TbfConfig};
use crate::session::Target;
use crate::system::monotonic_ns;
use crate::system::netstat::{self, QdiscStats};
use crate::units::pct;
use crate::views::json;

/// UDP port of the lab receiver; the closed-port scenario aims at a port nobody listens on.
const SINK_PORT: u16 = 9000;
/// First TCP port of the listeners a SYN scan finds open.
const OPEN_TCP_BASE: u16 = 20_000;
const CLOSED_PORT: u16 = 9;
/// A verdict's share must be this close to the measured truth (a fraction: 10 points).
pub const SHARE_TOLERANCE: f64 = 0.10;
/// Seconds the run may outlast the sender's --duration before the session ends it.
const RUN_GRACE_S: f64 = 30.0;
/// Niceness of the sender and of its scheduling group (except against the hog): with autogroup
/// scheduling, a session's tasks share one weight, so the sender gets a session of its own
/// (`setsid`) whose group weighs ~87x a normal one; builds and tests on a shared machine then
/// take little of the sender's CPU.
const SENDER_NICE: &str = "-20";

/// A scenario's staging: the link, the sender's flags, its default rate, and what the
/// diagnosis must find.
pub struct Staging {
    pub tbf: Option<TbfConfig>,
    /// aim at an unused address of the lab subnet instead of the target
    pub unanswered: bool,
    pub rate: f64,
    pub size: usize,
    pub sndbuf: Option<usize>,
    pub port: u16,
    pub sink: bool,
    /// further `scanprof send` flags: pacer, slot model, send method, fault injection
    pub flags: &'static [&'static str],
    /// a CPU-bound hog process pinned to the sender's CPU for the run
    pub hog: bool,
    /// neighbour resolution in the sender namespace gives up after ~100 ms instead of ~3 s, so
    /// that the packets waiting for it die within the run (a per-namespace setting)
    pub fast_neighbour_failure: bool,
    /// the target sends every packet back to the sender (instead of the counting receiver)
    pub echo: bool,
    /// the sender is stopped (SIGSTOP) for `pause` out of every `every` (then SIGCONT)
    pub stall: Option<Stall>,
    /// a listener in the target namespace (`scanprof recv`) is what is profiled, and the
    /// sender runs beside it unprofiled (instead of the counting receiver)
    pub listener: Option<Listener>,
    /// the sender is nmap's connect scan of ports 1 to rate x duration (see [`connect_argv`]),
    /// profiled with the nmap profile, instead of the reference sender
    pub connect_scan: bool,
    /// instead of the reference sender, `nmap -sS` of this many TCP ports of the target, each
    /// with a listener the lab opens there (at `--rate` as nmap's --max-rate)
    pub syn_scan_ports: Option<u16>,
    /// instead of the reference sender, a process family that never sends (see
    /// [`NEVER_STARTED_SCRIPT`]), profiled with the generic profile
    pub never_sends: bool,
    /// connection tracking on in the sender namespace, its table filled up to this many free
    /// entries (see [`ConntrackFill`])
    pub conntrack_free: Option<u64>,
    /// the sender runs in a cgroup of its own with this CPU quota, in CPUs (see [`CpuQuota`])
    pub cpu_quota: Option<f64>,
    pub expect: Expectation,
}

/// The profiled listener of a receive scenario.
#[derive(Debug, Clone, Copy)]
pub struct Listener {
    /// SO_RCVBUF it asks for, bytes (None: the kernel's default)
    pub rcvbuf: Option<usize>,
    /// datagrams per second it reads at most (None: as fast as they come)
    pub read_rate: Option<f64>,
    /// it is a responder with two kinds of packet (`scanprof recv --respond`), fed by two
    /// senders, one per kind
    pub respond: Option<super::lab_fixtures::Respond>,
    /// it is the packet relay (`scanprof relay`) reading the target's veth, not `scanprof recv`
    pub relay: Option<super::lab_fixtures::Relay>,
}

/// Stops of the sender: `pause` out of every `every`.
#[derive(Debug, Clone, Copy)]
pub struct Stall {
    pub every: Duration,
    pub pause: Duration,
}

/// The cause a scenario stages: the top verdict of `kind` must name `cause`.
#[derive(Debug, Clone, Copy)]
pub struct Expectation {
    /// `gap` or `loss`
    pub kind: Kind,
    /// a `Verdict::cause`, or no loss at all
    pub cause: Expected,
    /// how the share the verdict should explain is measured without scanprof
    pub truth: Truth,
}

/// What a scenario expects the diagnosis to say: a cause, or that nothing was lost (a finding
/// of the suite, not a cause the diagnosis writes). Written as the cause's name, or `no_loss`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expected {
    /// the top verdict of the expected kind names this cause
    Cause(Cause),
    /// nothing is lost: no loss verdict comes first, and the loss verdicts' shares sum to the
    /// truth (about 0)
    NoLoss,
}

impl Expected {
    /// The name in the suite's JSON and table: the cause's, or `no_loss`.
    pub fn as_str(self) -> &'static str {
        match self {
            Expected::Cause(c) => c.as_str(),
            Expected::NoLoss => "no_loss",
        }
    }
}

impl std::fmt::Display for Expected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Expected {
    type Err = UnknownCause;

    fn from_str(s: &str) -> Result<Expected, UnknownCause> {
        match s {
            "no_loss" => Ok(Expected::NoLoss),
            _ => s.parse().map(Expected::Cause),
        }
    }
}

impl Serialize for Expected {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Expected {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Expected, D::Error> {
        let name = String::deserialize(d)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}

/// The share a scenario's verdict should explain, from counters scanprof does not use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Truth {
    /// The gap, 1 - delivered / (requested x duration): delivered is the IP packets the target
    /// namespace received (its `Ip: InReceives`). The staged fault is the only cause of it.
    Gap,
    /// tc's drops / (sent + drops) at the sender's root qdisc: the share of the packets handed
    /// to the qdisc that it dropped (or refused, for a packet socket's ENOBUFS).
    QdiscDrops,
    /// 1 - delivered / sent: delivered as for `Gap`, sent the UDP datagrams the sender
    /// namespace sent (its `Udp: OutDatagrams` and `SndbufErrors`).
    Undelivered,
    /// The gap as for `Gap`, less the time the sender waited for a CPU behind other tasks (its
    /// run-queue delay in /proc/PID/schedstat, over the duration): on a shared machine other
    /// tasks take a part of the gap that the staged fault did not.
    GapLessRunDelay,
    /// Replies the sender namespace's UDP sockets dropped for a full receive buffer (its
    /// `Udp: RcvbufErrors`) / the datagrams it sent (`Udp: OutDatagrams` and `SndbufErrors`).
    ReplyDrops,
    /// Datagrams the target namespace dropped for a full receive buffer (its `Udp:
    /// RcvbufErrors`) / those that reached its sockets (`Udp: InDatagrams`, counted as they are
    /// read, + `RcvbufErrors`).
    ListenerDrops,
    /// The gap in connection attempts, 1 - SYNs / (requested x duration): the SYNs are the
    /// sender namespace's `Tcp: ActiveOpens` (one per connect that sent its SYN).
    SynGap,
    /// 1 - answers/probes: answers the target namespace's TCP segments out (`Tcp: OutSegs`)
    /// plus the lab echo's replies; probes the packets the sender's veth transmitted (`ip -s
    /// link`) less those the sender namespace's kernel made itself (`Tcp: OutSegs`, `Icmp:
    /// OutMsgs`: its RSTs and port unreachables).
    Unanswered,
    /// The gap over the sender's own window, for a run too short for `Gap` (it sends its
    /// count and stops before the duration): 1 - received rate / requested, the received rate
    /// (packets - 1) / (last - first) from the kernel's receive timestamps of the lab receiver
    /// in the target namespace. For the short-miscalibration scenario it should also be close
    /// to 1 - 1/skew by construction.
    ReceiverGap,
    /// The packets the sender namespace's conntrack refused (the `drop` column of its
    /// /proc/net/stat/nf_conntrack) / (requested x duration).
    ConntrackDrops,
    /// The relay's lost packets, by its own count: (dropped by the kernel before its read,
    /// PACKET_STATISTICS tp_drops, + read and dropped for lack of a buffer) / what reached its
    /// socket (tp_packets, dropped ones included).
    RelayLoss,
}

impl Truth {
    fn basis(self) -> &'static str {
        match self {
            Truth::Gap => "1 - delivered/(requested x duration), target namespace Ip InReceives",
            Truth::QdiscDrops => "tc drops/(sent + drops) at the sender's root qdisc",
            Truth::Undelivered => "1 - delivered/sent, target Ip InReceives over sender Udp OutDatagrams + SndbufErrors",
            Truth::ReplyDrops => "sender namespace Udp RcvbufErrors/(OutDatagrams + SndbufErrors)",
            Truth::ListenerDrops => "target namespace Udp RcvbufErrors/(InDatagrams + RcvbufErrors)",
            Truth::SynGap => "1 - SYNs/(requested x duration), sender namespace Tcp ActiveOpens",
            Truth::Unanswered => {
                "1 - answers/probes, target Tcp OutSegs + echoed over sender veth tx packets - sender Tcp OutSegs - Icmp OutMsgs"
            }
            Truth::GapLessRunDelay => {
                "1 - delivered/(requested x duration) - run-queue delay/duration, target Ip InReceives and the sender's /proc/PID/schedstat"
            }
            Truth::ReceiverGap => {
                "1 - received rate/requested, the lab receiver's (packets - 1)/(last - first) by the kernel's receive timestamps"
            }
            Truth::ConntrackDrops => "conntrack drops/(requested x duration), sender namespace /proc/net/stat/nf_conntrack",
            Truth::RelayLoss => "(kernel drops + pool drops)/packets that reached it, the relay's own PACKET_STATISTICS and counts",
        }
    }
}

pub fn staging(s: Scenario) -> Staging {
    let tbf = |rate: &str, limit: &str| {
        Some(TbfConfig {
            rate: rate.into(),
            burst: "4kb".into(),
            limit: limit.into(),
        })
    };
    let expect = |kind, cause, truth| Expectation {
        kind,
        cause: Expected::Cause(cause),
        truth,
    };
    let no_loss = |truth| Expectation {
        kind: Kind::Loss,
        cause: Expected::NoLoss,
        truth,
    };
    let base = Staging {
        tbf: None,
        unanswered: false,
        rate: 10_000.0,
        size: 64,
        sndbuf: None,
        port: SINK_PORT,
        sink: true,
        flags: &[],
        hog: false,
        fast_neighbour_failure: false,
        echo: false,
        stall: None,
        listener: None,
        connect_scan: false,
        syn_scan_ports: None,
        never_sends: false,
        conntrack_free: None,
        cpu_quota: None,
        expect: expect(Kind::Gap, Cause::NoGap, Truth::Gap),
    };
    match s {
        Scenario::Healthy => base,
        // 5000 pps x 512 B = 20 Mbit/s into a 2 Mbit/s bucket with a 10 kB queue.
        Scenario::QdiscDrop => Staging {
            tbf: tbf("2mbit", "10kb"),
            rate: 5_000.0,
            size: 512,
            expect: expect(Kind::Loss, Cause::QdiscDrop, Truth::QdiscDrops),
            ..base
        },
        // NO_SOCKET drops at the target are what probes to a closed port produce: no loss.
        Scenario::ClosedPort => Staging {
            rate: 2_000.0,
            port: CLOSED_PORT,
            sink: false,
            ..base
        },
        // 2000 pps x 1000 B into 2 Mbit/s with a deep queue: the small send buffer fills and sendto blocks.
        Scenario::Blocking => Staging {
            tbf: tbf("2mbit", "2mb"),
            rate: 2_000.0,
            size: 1000,
            sndbuf: Some(16_384),
            expect: expect(Kind::Gap, Cause::BlockedSend, Truth::GapLessRunDelay),
            ..base
        },
        // ARP for it gets no answer inside the lab: each resolution fails after ~100 ms and the
        // packets queued behind it die.
        Scenario::UnresolvedNeighbour => Staging {
            unanswered: true,
            rate: 200.0,
            sink: false,
            fast_neighbour_failure: true,
            expect: expect(Kind::Loss, Cause::NeighFailed, Truth::Undelivered),
            ..base
        },
        // sendto tops out near 220k pps on the project's machines (docs/senders.md).
        Scenario::CpuBound => Staging {
            rate: 1_000_000.0,
            expect: expect(Kind::Gap, Cause::CpuBound, Truth::GapLessRunDelay),
            ..base
        },
        // A sleep wakes ~90 us late (50 us of timer slack, then the wake-up); with per-packet
        // slots of 100 us every late wake-up is lost: about half of the rate.
        Scenario::CoarsePacing => Staging {
            flags: &["--pacer", "sleep", "--slot", "per-packet"],
            expect: expect(Kind::Gap, Cause::PacingCoarse, Truth::GapLessRunDelay),
            ..base
        },
        // The hog takes about half of the CPU both are pinned to; per-packet slots never make
        // the time up.
        Scenario::Preemption => Staging {
            flags: &["--pacer", "clock", "--slot", "per-packet"],
            hog: true,
            expect: expect(Kind::Gap, Cause::Preempted, Truth::Gap),
            ..base
        },
        // 5000 pps x 106 B frames = 4.2 Mbit/s into 1 Mbit/s with a queue of ~2 frames: the
        // packet socket gets ENOBUFS for every frame the qdisc cannot take.
        Scenario::SendErrors => Staging {
            tbf: tbf("1mbit", "256"),
            rate: 5_000.0,
            flags: &["--method", "packet"],
            expect: expect(Kind::Gap, Cause::SendErrors, Truth::QdiscDrops),
            ..base
        },
        // Slots 1.5x too long: a third of the requested rate is missing. The truth is the whole
        // gap: the tsc pacer's deadline slots make up a wait for a CPU at the next slot, so time
        // behind other tasks costs this sender no packets (one loaded run: 0.675 s of run-queue
        // delay in 4 s, and still 666.7 pps of 1000, the skew's exact 1/1.5).
        Scenario::Miscalibrated => Staging {
            rate: 1_000.0,
            flags: &["--pacer", "tsc", "--calibration-skew", "1.5"],
            expect: expect(Kind::Gap, Cause::Miscalibrated, Truth::Gap),
            ..base
        },
        // The sender's socket holds ~200 kB of replies, then drops every further one.
        Scenario::ReplyDrop => Staging {
            rate: 2_000.0,
            sink: false,
            echo: true,
            expect: expect(Kind::Loss, Cause::ReplySocketBuffer, Truth::ReplyDrops),
            ..base
        },
        // 20 ms stopped in every 100 ms: a fifth of the time, lost with per-packet slots.
        Scenario::Stalls => Staging {
            rate: 2_000.0,
            flags: &["--pacer", "clock", "--slot", "per-packet"],
            stall: Some(Stall {
                every: Duration::from_millis(100),
                pause: Duration::from_millis(20),
            }),
            expect: expect(Kind::Gap, Cause::IdleWaits, Truth::GapLessRunDelay),
            ..base
        },
        // 5000 pps into a listener that reads 1000/s from an 8 kB buffer (4096 doubled): about
        // four in five datagrams die at its socket.
        Scenario::RcvbufOverflow => Staging {
            rate: 5_000.0,
            sink: false,
            listener: Some(Listener {
                rcvbuf: Some(4096),
                read_rate: Some(1_000.0),
                respond: None,
                relay: None,
            }),
            expect: expect(Kind::Loss, Cause::RcvbufOverflow, Truth::ListenerDrops),
            ..base
        },
        // 500 connects/s to closed ports: nothing in the way, every SYN answered by a RST.
        Scenario::ConnectScan => Staging {
            rate: 500.0,
            sink: false,
            connect_scan: true,
            expect: expect(Kind::Gap, Cause::NoGap, Truth::SynGap),
            ..base
        },
        // 400 SYNs at 400 pps, all answered; the sender's kernel RSTs every SYN-ACK (nmap's raw
        // socket is no TCP socket), and the target drops those RSTs: replies, not lost probes.
        Scenario::KernelReply => Staging {
            rate: 400.0,
            sink: false,
            syn_scan_ports: Some(400),
            expect: no_loss(Truth::Unanswered),
            ..base
        },
        // 20 pps for the run (100 frames in 5 s; the socket's 8 MiB receive buffer holds ~7,000),
        // each echoed back and queued unread on the sending packet socket until it closes.
        Scenario::SocketClosePurge => Staging {
            rate: 20.0,
            sink: false,
            echo: true,
            flags: &["--method", "packet", "--keep-replies"],
            expect: no_loss(Truth::Unanswered),
            ..base
        },
        // 12 packets, each slot 200 ms where 1000 pps needs 1 ms: the tsc pacer busy-waits
        // through 2.2 s and sends 0.5% of the rate. The profile reads the delay it derived.
        Scenario::ShortMiscalibration => Staging {
            rate: 1_000.0,
            flags: &["--pacer", "tsc", "--calibration-skew", "200", "--count", "12"],
            expect: expect(Kind::Gap, Cause::Miscalibrated, Truth::ReceiverGap),
            ..base
        },
        // Nothing is sent: the whole requested rate is missing, and the verdict must say what
        // the family did instead (its members' exits), not that a probe is missing.
        Scenario::NeverStarted => Staging {
            rate: 1_000.0,
            sink: true,
            never_sends: true,
            expect: expect(Kind::Gap, Cause::NeverSent, Truth::Gap),
            ..base
        },
        // Two senders at 2,000 pps each, 64- and 512-byte datagrams, into a responder that works
        // ~200 ns on the short ones and ~8 us on the long ones, then replies to a closed port:
        // it keeps up, and scanprof's cost per class must match its own per kind.
        Scenario::ResponderKinds => Staging {
            rate: 2_000.0,
            sink: false,
            flags: &["--pacer", "sleep"],
            listener: Some(Listener {
                rcvbuf: None,
                read_rate: None,
                respond: Some(super::lab_fixtures::RESPONDER),
                relay: None,
            }),
            expect: expect(Kind::Loss, Cause::ReceiverKeepsUp, Truth::ListenerDrops),
            ..base
        },
        // The same senders at 5,000 pps each into a responder that works 100 us and 200 us: it
        // needs ~1.6 CPUs with one thread, so its socket buffer overflows.
        Scenario::ReceiverCpuBound => Staging {
            rate: 5_000.0,
            sink: false,
            flags: &["--pacer", "sleep"],
            listener: Some(Listener {
                rcvbuf: None,
                read_rate: None,
                respond: Some(super::lab_fixtures::SLOW_RESPONDER),
                relay: None,
            }),
            expect: expect(Kind::Loss, Cause::ReceiverCpuBound, Truth::ListenerDrops),
            ..base
        },
        // 1000 pps cycling over 4 ports, one flow each; the table has room for 2 more entries:
        // the first two flows get them, the other two are refused at every packet (half).
        Scenario::ConntrackFull => Staging {
            rate: 1_000.0,
            flags: &["--ports", "4"],
            conntrack_free: Some(2),
            expect: expect(Kind::Gap, Cause::ConntrackFull, Truth::ConntrackDrops),
            ..base
        },
        // A busy-waiting pacer uses a whole CPU; 0.3 CPU lets it run 30 ms of every 100 ms, and
        // per-packet slots lose the other 70.
        Scenario::CgroupThrottled => Staging {
            flags: &["--pacer", "clock", "--slot", "per-packet"],
            cpu_quota: Some(0.3),
            expect: expect(Kind::Gap, Cause::CgroupThrottled, Truth::Gap),
            ..base
        },
        // The reference sender as fast as it goes (~200k pps here) into a relay that writes
        // each packet to lo three times through a 20 Mbit/s tbf (~24k frames/s, 8k packets/s
        // relayed): the outputs refuse most writes, the pool runs out, and the relay drops.
        Scenario::Relay => Staging {
            rate: 0.0,
            sink: false,
            listener: Some(Listener {
                rcvbuf: None,
                read_rate: None,
                respond: None,
                relay: Some(super::lab_fixtures::RELAY),
            }),
            expect: expect(Kind::Loss, Cause::RelayEgressBound, Truth::RelayLoss),
            ..base
        },
    }
}

/// The family of the never-started scenario: a shell that forks two children which exit with
/// status 3 (after 0.5 s) and 4 (after 1 s) without sending anything, waits for them, and exits
/// with status 1, as a scanner whose workers fail at start-up.
pub const NEVER_STARTED_SCRIPT: &str =
    "worker() { sleep \"$1\"; exit \"$2\"; }; worker 0.5 3 & worker 1 4 & wait; exit 1";

/// `ip netns exec SENDER sh -c NEVER_STARTED_SCRIPT scanner`: in the sender namespace, bounded
/// by the script itself (about 1 s), sending nothing.
fn never_started_argv(lab: &Lab) -> Vec<String> {
    [
        "ip",
        "netns",
        "exec",
        &lab.sender_ns,
        "sh",
        "-c",
        NEVER_STARTED_SCRIPT,
        "scanner",
    ]
    .map(String::from)
    .to_vec()
}

/// The scanner profile of a connect scan's sender.
const CONNECT_SCAN_PROFILE: &str = "nmap";

/// `nmap -sT -n -Pn --disable-arp-ping --max-retries 0 --min-rate R --max-rate R -p1-N TARGET`
/// with N = rate x duration (at most 65535): one connect(2) per port of the target, whose
/// closed ports answer each SYN with a RST; no host discovery, no ARP, no retry.
pub(crate) fn connect_argv(lab: &Lab, rate: f64, duration_s: f64) -> Vec<String> {
    let ports = ((rate * duration_s).round() as u64).clamp(1, 65_535);
    let rate = format!("{rate}");
    [
        "nmap",
        "-sT",
        "-n",
        "-Pn",
        "--disable-arp-ping",
        "--max-retries",
        "0",
        "--min-rate",
        &rate,
        "--max-rate",
        &rate,
        &format!("-p1-{ports}"),
        &lab.target_addr.to_string(),
    ]
    .map(String::from)
    .to_vec()
}

/// The name a scenario has on the command line (`qdisc-drop`).
pub fn scenario_name(s: Scenario) -> String {
    s.to_possible_value()
        .map_or_else(|| format!("{s:?}"), |v| v.get_name().to_string())
}

/// An address of the lab subnet that no host has (the lab pins its two hosts' neighbours).
fn unanswered_address(lab: &Lab) -> std::net::Ipv4Addr {
    let [a, b, c, _] = lab.target_addr.octets();
    std::net::Ipv4Addr::new(a, b, c, 77)
}

/// What the lab measured beside scanprof.
#[derive(Debug, Serialize)]
pub struct LabReport {
    pub scenario: String,
    pub requested_pps: f64,
    /// seconds the sender was asked to send for
    pub duration_s: f64,
    /// the receiver in the target namespace
    pub receiver: Option<SinkReport>,
    pub receiver_pps: Option<f64>,
    /// tc's view of the sender's qdisc after the run
    pub qdisc: Vec<QdiscStats>,
    /// IP packets the target namespace received (`Ip: InReceives`)
    pub target_ip_in: Option<u64>,
    /// UDP datagrams the sender namespace sent (`Udp: OutDatagrams` + `SndbufErrors`, which
    /// counts those a qdisc dropped; not raw or packet sockets)
    pub sender_udp_out: Option<u64>,
    /// UDP datagrams the sender namespace dropped for a full receive buffer (`Udp: RcvbufErrors`)
    pub sender_rcvbuf_errors: Option<u64>,
    /// replies the target's echo sent back
    pub echoed: Option<u64>,
    /// UDP datagrams read from the target namespace's sockets (`Udp: InDatagrams`) and dropped
    /// there for a full receive buffer (`Udp: RcvbufErrors`)
    pub target_udp_in: Option<u64>,
    pub target_rcvbuf_errors: Option<u64>,
    /// TCP connections the sender namespace opened, one per SYN sent by a connect (`Tcp:
    /// ActiveOpens`), and scanprof's count of them (connect scenarios; null otherwise)
    pub sender_tcp_active_opens: Option<u64>,
    pub scanprof_connect_syns: Option<u64>,
    /// TCP segments the target namespace sent (`Tcp: OutSegs`: its SYN-ACKs to a SYN scan)
    pub target_tcp_out: Option<u64>,
    /// packets the sender namespace's kernel made itself (`Tcp: OutSegs` + `Icmp: OutMsgs`:
    /// its RSTs to SYN-ACKs, its port unreachables)
    pub sender_kernel_out: Option<u64>,
    /// packets the sender's veth transmitted (`ip -s link`)
    pub sender_link_tx: Option<u64>,
    /// the profiled listener's own count (receive scenarios)
    pub listener: Option<super::recv::RecvReport>,
    /// the profiled relay's own count (the relay scenario)
    #[serde(skip_serializing_if = "Option::is_none")]
    pub relay: Option<super::relay::RelayReport>,
    /// scanprof's receive funnel over the run: messages the family's receive calls read, and
    /// its SOCKET_RCVBUFF drops before the read (receive scenarios; null when it saw none)
    pub scanprof_recv_packets: Option<u64>,
    pub scanprof_rcvbuf_drops: Option<u64>,
    /// times the sender was stopped
    pub stalls: Option<u64>,
    /// the CPU hog of the preemption scenario
    pub hog: Option<HogReport>,
    /// the sender's last /proc/PID/schedstat reading: s on CPU, s runnable waiting for a CPU
    pub sender_cpu_s: Option<f64>,
    pub sender_run_delay_s: Option<f64>,
    /// scanprof's figures, for comparison
    pub scanprof_packets: u64,
    pub scanprof_achieved_pps: f64,
    pub scanprof_target_drops: u64,
    /// how `check.truth` was measured
    pub truth_kind: Truth,
    /// whether the diagnosis named the staged cause (and, where the scenario has a fixture
    /// that counts for itself, whether scanprof's figures matched it: `fixture_checks`)
    pub check: DiagnosisCheck,
    /// scanprof's figures against the fixture's own counters (responder, relay scenarios)
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fixture_checks: Vec<super::lab_fixtures::FixtureCheck>,
    /// packets the sender namespace's conntrack refused (its /proc/net/stat/nf_conntrack
    /// `drop`; conntrack scenarios only)
    pub sender_ct_drops: Option<u64>,
    /// how the conntrack table was filled and the global limit set and restored
    pub conntrack: Option<ConntrackReport>,
    /// the sender's cgroup and its own throttling counters
    pub cgroup: Option<CgroupReport>,
}

/// The CPU hog: where it ran and what it took.
#[derive(Debug, Clone, Serialize)]
pub struct HogReport {
    pub pid: u32,
    /// the CPU it and the sender were pinned to
    pub cpu: usize,
    /// CPU time it used, s
    pub cpu_s: f64,
}

/// The top verdict of the expected kind against the staged cause and the measured truth.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DiagnosisCheck {
    pub expected_kind: Kind,
    pub expected_cause: Expected,
    /// the first verdict of the expected kind (the verdicts come ranked)
    pub top_cause: Option<Cause>,
    /// its share: of the requested rate (gap) or of the packets sent (loss)
    pub top_share: Option<f64>,
    pub top_confidence: Option<Confidence>,
    /// the top verdict overall, whatever its kind
    pub first_cause: Option<Cause>,
    pub cause_matches: bool,
    /// the share the verdict should explain, measured without scanprof
    pub truth: Option<f64>,
    pub truth_basis: String,
    /// |top_share - truth| <= 0.10 (None when there is no truth or no verdict)
    pub share_within: Option<bool>,
    /// the cause matches and the share is within 10 points of a measured truth
    pub ok: bool,
}

/// Compares the summary's verdicts with what the scenario staged.
pub fn check(expect: &Expectation, s: &Summary, truth: Option<f64>) -> DiagnosisCheck {
    let cause = match expect.cause {
        Expected::NoLoss => return check_no_loss(expect, &s.verdicts, truth),
        Expected::Cause(cause) => cause,
    };
    let top = s.verdicts.iter().find(|v| v.kind == expect.kind);
    let cause_matches = top.is_some_and(|v| v.cause == cause);
    let share_within = match (top, truth) {
        (Some(v), Some(t)) => Some((v.share - t).abs() <= SHARE_TOLERANCE + 1e-9),
        _ => None,
    };
    DiagnosisCheck {
        expected_kind: expect.kind,
        expected_cause: expect.cause,
        top_cause: top.map(|v| v.cause),
        top_share: top.map(|v| v.share),
        top_confidence: top.map(|v| v.confidence),
        first_cause: s.verdicts.first().map(|v| v.cause),
        cause_matches,
        truth,
        truth_basis: expect.truth.basis().to_string(),
        share_within,
        ok: cause_matches && share_within == Some(true),
    }
}

/// A scenario in which nothing is lost: the top verdict overall must not be a loss verdict (one
/// of kind `loss` with a share: `receiver_keeps_up`, of share 0, says nothing was lost), and the
/// loss verdicts' shares, summed (0 without any), must be within 10 points of the truth.
/// `top_cause` is then the top verdict overall, `top_share` that sum.
fn check_no_loss(
    expect: &Expectation,
    verdicts: &[crate::analysis::verdict::Verdict],
    truth: Option<f64>,
) -> DiagnosisCheck {
    let first = verdicts.first();
    let cause_matches = first.is_none_or(|v| v.kind != Kind::Loss || v.share <= 0.0);
    let lost = verdicts
        .iter()
        .filter(|v| v.kind == Kind::Loss)
        .fold(0.0, |sum, v| sum + v.share);
    let share_within = truth.map(|t| (lost - t).abs() <= SHARE_TOLERANCE + 1e-9);
    DiagnosisCheck {
        expected_kind: expect.kind,
        expected_cause: expect.cause,
        top_cause: first.map(|v| v.cause),
        top_share: Some(lost),
        top_confidence: first.map(|v| v.confidence),
        first_cause: first.map(|v| v.cause),
        cause_matches,
        truth,
        truth_basis: expect.truth.basis().to_string(),
        share_within,
        ok: cause_matches && share_within == Some(true),
    }
}

/// Independent counts taken around the run.
#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    target_ip_in: Option<u64>,
    sender_udp_out: Option<u64>,
    /// UDP datagrams the sender namespace dropped for a full receive buffer
    sender_rcvbuf_errors: Option<u64>,
    /// UDP datagrams read from the target namespace's sockets, and dropped at them
    target_udp_in: Option<u64>,
    target_rcvbuf_errors: Option<u64>,
    /// the sender namespace's TCP connections that sent their SYN (`Tcp: ActiveOpens`)
    sender_tcp_active_opens: Option<u64>,
    /// the sender's run-queue delay over the run, s
    run_delay_s: Option<f64>,
    /// TCP segments the target namespace sent (`Tcp: OutSegs`)
    target_tcp_out: Option<u64>,
    /// packets the sender namespace's kernel made: `Tcp: OutSegs` + `Icmp: OutMsgs`
    sender_kernel_out: Option<u64>,
    /// packets the sender's veth transmitted
    sender_link_tx: Option<u64>,
    /// replies the lab echo sent (set after the run)
    echoed: Option<u64>,
    /// the lab receiver's rate by its kernel receive timestamps, pps (set after the run)
    receiver_pps: Option<f64>,
    /// packets the sender namespace's conntrack refused (`drop` of /proc/net/stat/nf_conntrack)
    sender_ct_drops: Option<u64>,
    /// the relay's lost share by its own count (set after the run; Truth::RelayLoss)
    relay_lost_share: Option<f64>,
}

impl Counts {
    fn read(lab: &Lab) -> Counts {
        let sender = snmp(&lab.sender_ns);
        let target = snmp(&lab.target_ns);
        let target_count =
            |proto: &str, field: &str| target.as_deref().and_then(|t| snmp_counter(t, proto, field));
        Counts {
            target_ip_in: target_count("Ip", "InReceives"),
            target_udp_in: target_count("Udp", "InDatagrams"),
            target_rcvbuf_errors: target_count("Udp", "RcvbufErrors"),
            // A datagram a qdisc dropped counts as a send-buffer error, not as sent.
            sender_udp_out: sender.as_deref().and_then(|t| {
                Some(snmp_counter(t, "Udp", "OutDatagrams")? + snmp_counter(t, "Udp", "SndbufErrors")?)
            }),
            sender_rcvbuf_errors: sender
                .as_deref()
                .and_then(|t| snmp_counter(t, "Udp", "RcvbufErrors")),
            sender_tcp_active_opens: sender
                .as_deref()
                .and_then(|t| snmp_counter(t, "Tcp", "ActiveOpens")),
            run_delay_s: None,
            target_tcp_out: target_count("Tcp", "OutSegs"),
            sender_kernel_out: sender
                .as_deref()
                .and_then(|t| Some(snmp_counter(t, "Tcp", "OutSegs")? + snmp_counter(t, "Icmp", "OutMsgs")?)),
            sender_link_tx: lab.link(crate::lab::Side::Sender).ok().map(|l| l.tx_packets),
            echoed: None,
            receiver_pps: None,
            sender_ct_drops: netstat::run_in_netns(
                Some(&lab.sender_ns),
                "cat",
                &["/proc/net/stat/nf_conntrack"],
            )
            .ok()
            .and_then(|t| conntrack_stat(&t, "drop")),
            relay_lost_share: None,
        }
    }

    fn since(self, before: Counts) -> Counts {
        let d = |a: Option<u64>, b: Option<u64>| Some(a?.saturating_sub(b.unwrap_or(0)));
        Counts {
            target_ip_in: d(self.target_ip_in, before.target_ip_in),
            sender_udp_out: d(self.sender_udp_out, before.sender_udp_out),
            sender_rcvbuf_errors: d(self.sender_rcvbuf_errors, before.sender_rcvbuf_errors),
            target_udp_in: d(self.target_udp_in, before.target_udp_in),
            target_rcvbuf_errors: d(self.target_rcvbuf_errors, before.target_rcvbuf_errors),
            sender_tcp_active_opens: d(self.sender_tcp_active_opens, before.sender_tcp_active_opens),
            run_delay_s: self.run_delay_s,
            target_tcp_out: d(self.target_tcp_out, before.target_tcp_out),
            sender_kernel_out: d(self.sender_kernel_out, before.sender_kernel_out),
            sender_link_tx: d(self.sender_link_tx, before.sender_link_tx),
            echoed: self.echoed,
            receiver_pps: self.receiver_pps,
            sender_ct_drops: d(self.sender_ct_drops, before.sender_ct_drops),
            relay_lost_share: self.relay_lost_share,
        }
    }
}

/// /proc/net/snmp as seen inside namespace `ns`.
fn snmp(ns: &str) -> Option<String> {
    netstat::run_in_netns(Some(ns), "cat", &["/proc/net/snmp"]).ok()
}

/// One counter of /proc/net/snmp, whose lines come in pairs: `Proto: Name...`, `Proto: value...`.
pub fn snmp_counter(text: &str, proto: &str, field: &str) -> Option<u64> {
    let prefix = format!("{proto}:");
    let mut lines = text.lines().filter(|l| l.starts_with(&prefix));
    let names = lines.next()?;
    let values = lines.next()?;
    let at = names.split_whitespace().position(|n| n == field)?;
    values.split_whitespace().nth(at)?.parse().ok()
}

/// The truth a scenario's verdict is held to, from the counts the lab took.
fn measured_truth(t: Truth, rate: f64, duration_s: f64, counts: Counts, qdisc: &[QdiscStats]) -> Option<f64> {
    let share = |part: f64, whole: f64| (whole > 0.0).then(|| (part / whole).clamp(0.0, 1.0));
    match t {
        Truth::Gap => {
            let delivered = counts.target_ip_in? as f64;
            share(delivered, rate * duration_s).map(|d| 1.0 - d)
        }
        Truth::QdiscDrops => {
            let root = qdisc.iter().find(|q| q.parent.is_none())?;
            share(root.drops as f64, (root.sent_packets + root.drops) as f64)
        }
        Truth::Undelivered => {
            let delivered = counts.target_ip_in? as f64;
            share(delivered, counts.sender_udp_out? as f64).map(|d| 1.0 - d)
        }
        Truth::ReplyDrops => share(counts.sender_rcvbuf_errors? as f64, counts.sender_udp_out? as f64),
        Truth::ListenerDrops => {
            let dropped = counts.target_rcvbuf_errors?;
            share(dropped as f64, (counts.target_udp_in? + dropped) as f64)
        }
        Truth::SynGap => {
            let syns = counts.sender_tcp_active_opens? as f64;
            share(syns, rate * duration_s).map(|d| 1.0 - d)
        }
        Truth::Unanswered => {
            let answers = counts.target_tcp_out? + counts.echoed.unwrap_or(0);
            let probes = counts.sender_link_tx?.saturating_sub(counts.sender_kernel_out?);
            share(answers as f64, probes as f64).map(|a| 1.0 - a)
        }
        Truth::GapLessRunDelay => {
            let gap = 1.0 - share(counts.target_ip_in? as f64, rate * duration_s)?;
            let waited = share(counts.run_delay_s?, duration_s)?;
            Some((gap - waited).max(0.0))
        }
        Truth::ReceiverGap => share(counts.receiver_pps?, rate).map(|r| 1.0 - r),
        Truth::ConntrackDrops => share(counts.sender_ct_drops? as f64, rate * duration_s),
        Truth::RelayLoss => counts.relay_lost_share,
    }
}

/// The profiled listener of a receive scenario (`scanprof recv` in the target namespace) and
/// the reference sender feeding it, started on a thread of its own once the port is bound.
struct ListenerRun {
    /// the listener's command line: what the session launches and profiles
    argv: Vec<String>,
    /// where the listener writes its own count
    report: std::path::PathBuf,
    /// the sender's thread: its exit status, None when it was never started
    sender: Option<std::thread::JoinHandle<anyhow::Result<Option<std::process::ExitStatus>>>>,
    stop: Arc<AtomicBool>,
}

/// Longest the sender waits for the listener to bind its port.
const LISTENER_BIND_WAIT: Duration = Duration::from_secs(30);
/// The listener receives this much longer than the sender sends, s.
const LISTENER_EXTRA_S: f64 = 1.0;

impl ListenerRun {
    fn start(
        lab: &Lab,
        l: Listener,
        port: u16,
        exe: &std::path::Path,
        duration_s: f64,
        send_argvs: Vec<Vec<String>>,
    ) -> anyhow::Result<ListenerRun> {
        let report = std::env::temp_dir().join(format!(
            "scanprof-lab-listener-{}-{}.json",
            std::process::id(),
            lab.target_ns
        ));
        let _ = std::fs::remove_file(&report);
        let mut argv: Vec<String> = ["ip", "netns", "exec", &lab.target_ns].map(String::from).to_vec();
        if let Some(r) = l.relay {
            r.stage_egress(lab)?;
            argv.push(exe.display().to_string());
            argv.extend(r.relay_args(&lab.target_dev, duration_s + LISTENER_EXTRA_S, &report));
        } else if l.respond.is_some_and(|r| r.realtime) {
            argv.extend(super::lab_fixtures::REALTIME.map(String::from));
        }
        if l.relay.is_none() {
            argv.push(exe.display().to_string());
            argv.extend(
                [
                    "recv",
                    "--port",
                    &port.to_string(),
                    "--duration",
                    &(duration_s + LISTENER_EXTRA_S).to_string(),
                    "--report",
                    &report.display().to_string(),
                ]
                .map(String::from),
            );
            if let Some(b) = l.rcvbuf {
                argv.extend(["--rcvbuf".to_string(), b.to_string()]);
            }
            if let Some(r) = l.read_rate {
                argv.extend(["--read-rate".to_string(), r.to_string()]);
            }
            if let Some(r) = l.respond {
                argv.extend(r.recv_args());
            }
        }
        let relay = l.relay.is_some();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let ns = lab.target_ns.clone();
        let sender = std::thread::Builder::new()
            .name("lab-listener-feed".into())
            .spawn(move || -> anyhow::Result<Option<std::process::ExitStatus>> {
                let deadline = std::time::Instant::now() + LISTENER_BIND_WAIT;
                while !(if relay {
                    packet_socket_open(&ns)
                } else {
                    udp_port_bound(&ns, port)
                }) {
                    if flag.load(Ordering::Relaxed) || std::time::Instant::now() >= deadline {
                        return Ok(None);
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
                let mut children = Vec::new();
                for send_argv in &send_argvs {
                    let mut cmd = Command::new(&send_argv[0]);
                    cmd.args(&send_argv[1..])
                        .stdin(Stdio::null())
                        .stdout(Stdio::null())
                        .stderr(Stdio::null());
                    crate::system::child::die_with_parent(&mut cmd);
                    children.push(
                        cmd.spawn()
                            .with_context(|| format!("cannot start the sender `{}`", send_argv.join(" ")))?,
                    );
                }
                // Every sender waited for; the status of the first that failed, else the last.
                let mut status = None;
                for mut c in children {
                    let s = c.wait().context("cannot wait for a sender")?;
                    if status.is_none_or(|st: std::process::ExitStatus| st.success()) {
                        status = Some(s);
                    }
                }
                Ok(status)
            })
            .context("cannot start the listener's sender thread")?;
        Ok(ListenerRun {
            argv,
            report,
            sender: Some(sender),
            stop,
        })
    }

    /// Waits for the sender and reads the listener's own count.
    fn finish(self) -> anyhow::Result<super::recv::RecvReport> {
        let text = self.finish_text()?;
        serde_json::from_str(&text).context("the listener's report is not JSON")
    }

    /// Waits for the sender and reads the listener's report as it wrote it.
    fn finish_text(mut self) -> anyhow::Result<String> {
        self.stop.store(true, Ordering::Relaxed);
        let sent = match self.sender.take().map(|t| t.join()) {
            Some(Ok(r)) => r?,
            _ => None,
        };
        anyhow::ensure!(
            sent.is_some(),
            "the listener never bound its port, so the sender was not started"
        );
        std::fs::read_to_string(&self.report)
            .with_context(|| format!("the listener wrote no report to {}", self.report.display()))
    }
}

impl Drop for ListenerRun {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.sender.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.report);
    }
}

/// Whether a packet socket is open in namespace `ns` (its /proc/net/packet lists one).
fn packet_socket_open(ns: &str) -> bool {
    netstat::run_in_netns(Some(ns), "cat", &["/proc/net/packet"]).is_ok_and(|t| t.lines().count() > 1)
}

/// Whether a UDP socket is bound to `port` in namespace `ns` (its /proc/net/udp).
fn udp_port_bound(ns: &str, port: u16) -> bool {
    netstat::run_in_netns(Some(ns), "cat", &["/proc/net/udp"]).is_ok_and(|t| udp_table_has_port(&t, port))
}

/// Whether a /proc/net/udp table lists a socket bound to local `port`.
fn udp_table_has_port(table: &str, port: u16) -> bool {
    let want = format!(":{port:04X}");
    table
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().nth(1))
        .any(|local| local.ends_with(&want))
}

/// Sends every datagram that reaches the target's `port` back to the lab sender it came from,
/// on its own thread, until stopped; counts the replies.
struct Echo {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<u64>>,
}

impl Echo {
    fn start(lab: &Lab, port: u16) -> anyhow::Result<Echo> {
        let addr = SocketAddrV4::new(lab.target_addr, port);
        let sender = lab.sender_addr;
        let socket = lab.in_target(move || -> anyhow::Result<UdpSocket> {
            let socket = UdpSocket::bind(addr).with_context(|| format!("cannot bind {addr}"))?;
            socket.set_read_timeout(Some(Duration::from_millis(50)))?;
            Ok(socket)
        })??;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("lab-echo".into())
            .spawn(move || {
                // Answering on a bound socket needs no privilege.
                let _ = crate::system::privileges::drop_to(&[]);
                let (mut buf, mut sent) = (vec![0u8; 65_536], 0u64);
                while !flag.load(Ordering::Relaxed) {
                    // Replies go back into the lab only: to the sender's address, nowhere else.
                    if let Ok((n, SocketAddr::V4(from))) = socket.recv_from(&mut buf) {
                        if *from.ip() == sender && socket.send_to(&buf[..n], from).is_ok() {
                            sent += 1;
                        }
                    }
                }
                sent
            })
            .context("cannot start the echo thread")?;
        Ok(Echo {
            stop,
            thread: Some(thread),
        })
    }

    /// Stops the echo and returns the replies it sent.
    fn finish(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().and_then(|t| t.join().ok()).unwrap_or(0)
    }
}

impl Drop for Echo {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Stops and continues the sender (SIGSTOP, SIGCONT) on a schedule, through a pidfd so that
/// no other process can ever be signalled; always leaves it continued.
struct Staller {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<u64>>,
}

impl Staller {
    fn start(stall: Stall, sender: SenderId) -> anyhow::Result<Staller> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("lab-staller".into())
            .spawn(move || {
                // Stopping the lab's own sender (same user) needs no privilege.
                let _ = crate::system::privileges::drop_to(&[]);
                let Some(pidfd) = wait_for_sender(&flag, &sender) else {
                    return 0;
                };
                let mut stops = 0;
                let run = stall.every.saturating_sub(stall.pause);
                while !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(run);
                    if flag.load(Ordering::Relaxed) || !pidfd.signal(libc::SIGSTOP) {
                        break;
                    }
                    stops += 1;
                    std::thread::sleep(stall.pause);
                    if !pidfd.signal(libc::SIGCONT) {
                        break;
                    }
                }
                pidfd.signal(libc::SIGCONT);
                stops
            })
            .context("cannot start the staller thread")?;
        Ok(Staller {
            stop,
            thread: Some(thread),
        })
    }

    /// Stops stalling (the sender is left continued) and returns how often it was stopped.
    fn finish(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().and_then(|t| t.join().ok()).unwrap_or(0)
    }
}

impl Drop for Staller {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A pidfd: a handle on one process that a reused pid can never redirect.
struct PidFd(std::os::fd::OwnedFd);

impl PidFd {
    fn open(pid: u32) -> Option<PidFd> {
        // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
        if fd < 0 {
            return None;
        }
        // SAFETY: `fd` was just returned by pidfd_open and is owned by nothing else.
        Some(PidFd(unsafe { std::os::fd::FromRawFd::from_raw_fd(fd as i32) }))
    }

    /// Sends `sig`; false once the process is gone.
    fn signal(&self, sig: libc::c_int) -> bool {
        use std::os::fd::AsRawFd;
        // SAFETY: the descriptor is a valid pidfd; no siginfo is passed.
        let r = unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                self.0.as_raw_fd(),
                sig,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            )
        };
        r == 0
    }
}

/// How to tell the sender among this process's children: the command name of the scanprof
/// binary it runs (after `ip netns exec`, `setsid`, `nice` and `taskset` have exec'd it), and
/// not the hog (a fork of this process, with the same name).
#[derive(Debug, Clone)]
struct SenderId {
    comm: String,
    hog: Option<u32>,
}

impl SenderId {
    fn new(exe: &std::path::Path, hog: Option<u32>) -> SenderId {
        let name = exe
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        // The kernel keeps the first 15 bytes of the file name (TASK_COMM_LEN - 1).
        let comm = name.bytes().take(15).map(char::from).collect();
        SenderId { comm, hog }
    }

    fn is(&self, pid: u32) -> bool {
        Some(pid) != self.hog
            && std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim_end() == self.comm)
    }
}

/// The sender once it runs, held by a pidfd and checked to be our child after opening it.
fn wait_for_sender(stop: &AtomicBool, sender: &SenderId) -> Option<PidFd> {
    while !stop.load(Ordering::Relaxed) {
        for pid in children_of_self() {
            if !sender.is(pid) {
                continue;
            }
            let Some(fd) = PidFd::open(pid) else { continue };
            // Opened after the check: still our child running the sender, so the pidfd is its.
            if sender.is(pid) && children_of_self().contains(&pid) {
                return Some(fd);
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    None
}

/// Follows the sender's scheduler statistics while the run goes on: every 20 ms, the
/// /proc/PID/schedstat of the sender (see [`SenderId`]). Keeps the last reading.
struct SchedWatch {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Option<SchedStat>>>,
}

/// One reading of /proc/PID/schedstat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct SchedStat {
    /// ns on CPU
    cpu_ns: u64,
    /// ns runnable, waiting for a CPU
    run_delay_ns: u64,
}

impl SchedWatch {
    const POLL: Duration = Duration::from_millis(20);

    fn start(sender: SenderId) -> anyhow::Result<SchedWatch> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("lab-schedstat".into())
            .spawn(move || {
                // /proc/PID/schedstat is readable by everyone.
                let _ = crate::system::privileges::drop_to(&[]);
                let mut last = None;
                while !flag.load(Ordering::Relaxed) {
                    for pid in children_of_self() {
                        if !sender.is(pid) {
                            continue;
                        }
                        if let Some(s) = std::fs::read_to_string(format!("/proc/{pid}/schedstat"))
                            .ok()
                            .and_then(|t| parse_schedstat(&t))
                        {
                            last = Some(s);
                        }
                    }
                    std::thread::sleep(Self::POLL);
                }
                last
            })
            .context("cannot start the schedstat watcher")?;
        Ok(SchedWatch {
            stop,
            thread: Some(thread),
        })
    }

    /// The last reading (None if the sender was never seen).
    fn finish(mut self) -> Option<SchedStat> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take()?.join().ok().flatten()
    }
}

impl Drop for SchedWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Pids of this process's children, from every thread's /proc/self/task/TID/children.
fn children_of_self() -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|c| {
            c.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

/// `cpu_ns run_delay_ns timeslices`
fn parse_schedstat(text: &str) -> Option<SchedStat> {
    let mut f = text.split_whitespace().map(|v| v.parse::<u64>().ok());
    Some(SchedStat {
        cpu_ns: f.next()??,
        run_delay_ns: f.next()??,
    })
}

/// A CPU-bound process pinned to one CPU, for at most a bounded time; ended by its pid.
struct Hog {
    pid: Pid,
    cpu: usize,
}

impl Hog {
    /// Forks a child that pins itself to `cpu` and spins until `for_s` seconds have passed.
    fn start(cpu: usize, for_s: f64) -> anyhow::Result<Hog> {
        let end_ns = monotonic_ns().saturating_add((for_s * 1e9) as u64);
        let parent = std::process::id() as libc::pid_t;
        // SAFETY: the child only makes system calls (prctl, capset, sched_setaffinity,
        // clock_gettime) and _exit: it takes no lock and allocates nothing, so the parent's
        // other threads, absent from the child, cannot leave it stuck.
        match unsafe { fork() }.context("cannot fork the CPU hog")? {
            ForkResult::Child => {
                if !crate::system::child::set_parent_death_signal(parent) {
                    // SAFETY: as below: scanprof is gone, so the hog ends at once.
                    unsafe { libc::_exit(0) }
                }
                // It only spins: no privilege (system calls only, as fork requires here).
                let _ = crate::system::privileges::drop_all_in_forked_child();
                let mut set = CpuSet::new();
                if set.set(cpu).is_ok() {
                    let _ = sched_setaffinity(Pid::from_raw(0), &set);
                }
                while monotonic_ns() < end_ns {
                    std::hint::spin_loop();
                }
                // SAFETY: ends the child at once, running no destructor or atexit handler of
                // the parent's state.
                unsafe { libc::_exit(0) }
            }
            ForkResult::Parent { child } => Ok(Hog { pid: child, cpu }),
        }
    }

    /// CPU time the hog used so far, s (utime + stime from /proc/PID/stat).
    fn cpu_s(&self) -> f64 {
        let ticks = || -> Option<u64> {
            let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid)).ok()?;
            let mut f = stat[stat.rfind(')')? + 2..].split_whitespace();
            let utime: u64 = f.nth(11)?.parse().ok()?;
            let stime: u64 = f.next()?.parse().ok()?;
            Some(utime + stime)
        };
        // SAFETY: sysconf has no memory effects.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
        ticks().map_or(0.0, |t| t as f64 / hz)
    }

    fn stop(self) -> HogReport {
        let report = HogReport {
            pid: self.pid.as_raw() as u32,
            cpu: self.cpu,
            cpu_s: self.cpu_s(),
        };
        drop(self);
        report
    }
}

impl Drop for Hog {
    fn drop(&mut self) {
        let _ = kill(self.pid, Signal::SIGKILL);
        let _ = waitpid(self.pid, None);
    }
}

/// Where the run's tasks go: the sender on a CPU of its own (the last this process may use),
/// the lab's own threads (receiver, profiler) on the others, so that the scenario's fault is
/// the only thing slowing the sender. Undone on drop.
pub(crate) struct Placement {
    pub(crate) sender_cpu: usize,
    /// this thread's affinity before, restored on drop (None: nothing was changed)
    saved: Option<CpuSet>,
}

impl Placement {
    /// Moves the calling thread (and so the threads and children it starts later) off the
    /// sender's CPU, when there is another CPU to go to.
    pub(crate) fn choose() -> anyhow::Result<Placement> {
        let allowed =
            sched_getaffinity(Pid::from_raw(0)).context("cannot read this process's CPU affinity")?;
        let cpus: Vec<usize> = (0..CpuSet::count())
            .filter(|&c| allowed.is_set(c).unwrap_or(false))
            .collect();
        let sender_cpu = *cpus.last().context("no CPU in this process's affinity mask")?;
        if cpus.len() < 2 {
            return Ok(Placement {
                sender_cpu,
                saved: None,
            });
        }
        let mut others = allowed;
        others.unset(sender_cpu).context("cannot build a CPU mask")?;
        sched_setaffinity(Pid::from_raw(0), &others)
            .context("cannot move the lab's threads off the sender's CPU")?;
        Ok(Placement {
            sender_cpu,
            saved: Some(allowed),
        })
    }
}

impl Drop for Placement {
    fn drop(&mut self) {
        if let Some(set) = &self.saved {
            let _ = sched_setaffinity(Pid::from_raw(0), set);
        }
    }
}

/// The sender's command line: `ip netns exec` into the sender namespace, its own session and
/// scheduling group at nice -20 (unless the hog is the fault), pinned to `cpu`, then
/// `scanprof send` with the scenario's flags.
pub(crate) fn sender_argv(
    lab: &Lab,
    stage: &Staging,
    cpu: usize,
    exe: &std::path::Path,
    rate: f64,
    duration_s: f64,
) -> Vec<String> {
    let mut argv: Vec<String> = vec!["ip".into(), "netns".into(), "exec".into(), lab.sender_ns.clone()];
    // Only the staged fault should slow the sender: unless the hog is that fault, the sender
    // outweighs other work on the machine for its CPU.
    if !stage.hog {
        let lift = format!("echo {SENDER_NICE} > /proc/self/autogroup 2>/dev/null; exec \"$@\"");
        argv.extend(
            [
                "setsid",
                "sh",
                "-c",
                &lift,
                "scanprof-lab",
                "nice",
                "-n",
                SENDER_NICE,
            ]
            .map(String::from),
        );
    }
    argv.extend(["taskset".to_string(), "-c".to_string(), cpu.to_string()]);
    if stage.connect_scan {
        argv.extend(connect_argv(lab, rate, duration_s));
        return argv;
    }
    argv.push(exe.display().to_string());
    argv.extend(
        [
            "send",
            "--to",
            &format!(
                "{}:{}",
                if stage.unanswered {
                    unanswered_address(lab)
                } else {
                    lab.target_addr
                },
                stage.port
            ),
            "--rate",
            &rate.to_string(),
            "--duration",
            &duration_s.to_string(),
            "--size",
            &stage.size.to_string(),
        ]
        .map(String::from),
    );
    if let Some(b) = stage.sndbuf {
        argv.extend(["--sndbuf".to_string(), b.to_string()]);
    }
    argv.extend(stage.flags.iter().map(|f| f.to_string()));
    argv
}

/// `ip netns exec SENDER taskset -c CPU nmap -sS ... -p BASE-(BASE+ports-1) TARGET`: one SYN
/// per port, to the lab's target only (--disable-arp-ping: no ARP request first, even with -Pn).
fn syn_scan_argv(lab: &Lab, ports: u16, cpu: usize, rate: f64) -> Vec<String> {
    let last = OPEN_TCP_BASE + ports.saturating_sub(1);
    #[rustfmt::skip]
    let argv = [
        "ip", "netns", "exec", &lab.sender_ns, "taskset", "-c", &cpu.to_string(),
        "nmap", "-sS", "-n", "-Pn", "--disable-arp-ping", "--max-retries", "0",
        "--max-rate", &format!("{}", rate.round().max(1.0)),
        "-p", &format!("{OPEN_TCP_BASE}-{last}"), &lab.target_addr.to_string(),
    ];
    argv.map(String::from).to_vec()
}

/// `ports` TCP listeners on the target's address from OPEN_TCP_BASE, bound in its namespace:
/// nmap finds them open. They accept nothing (a SYN scan completes no connection).
fn open_tcp_listeners(lab: &Lab, ports: u16) -> anyhow::Result<Vec<std::net::TcpListener>> {
    let addr = lab.target_addr;
    lab.in_target(move || -> anyhow::Result<Vec<std::net::TcpListener>> {
        (0..ports)
            .map(|i| {
                let at = SocketAddrV4::new(addr, OPEN_TCP_BASE + i);
                std::net::TcpListener::bind(at).with_context(|| format!("cannot listen on {at}"))
            })
            .collect()
    })?
}

/// The live view's title: the scenario and the reference sender's own command (`scanprof send
/// --to ...`), not the wrappers that place it in the lab (`ip netns exec`, `setsid sh -c`,
/// `nice`, `taskset`); the binary by its name, not its build path.
fn lab_title(scenario: Scenario, sender_argv: &[String]) -> String {
    let mut words = crate::run::render::command_words(sender_argv);
    if let Some(exe) = words.first_mut() {
        if let Some(name) = exe.rsplit('/').next() {
            *exe = name.to_string();
        }
    }
    format!("lab {}: {}", scenario_name(scenario), words.join(" "))
}

pub fn run(o: &LabOptions) -> anyhow::Result<ExitCode> {
    if o.suite {
        return suite(o);
    }
    if !(o.duration.is_finite() && o.duration > 0.0) {
        bail!("--duration must be a positive number of seconds");
    }
    {
        use crate::system::caps::{self, CAP_BPF, CAP_NET_ADMIN, CAP_PERFMON, CAP_SYS_ADMIN};
        let missing = caps::missing(&[CAP_SYS_ADMIN, CAP_NET_ADMIN, CAP_BPF, CAP_PERFMON]);
        if !missing.is_empty() {
            bail!(
                "scanprof lab needs root: it creates network namespaces, veths and qdiscs and \
                 loads BPF programs (missing {}). Run it with sudo",
                caps::names(&missing)
            );
        }
    }
    // Labs of scanprof processes that were killed (SIGKILL leaves no chance to clean up).
    for ns in crate::lab::remove_dead_labs() {
        eprintln!("scanprof: removed namespace {ns}, left by a lab whose scanprof is gone");
    }
    for (sysctl, value) in crate::lab::sysctl::restore_dead_holds() {
        eprintln!("scanprof: restored {sysctl} to {value}, left changed by a lab whose scanprof is gone");
    }
    // Before the lab exists: a bundle directory that cannot take the bundle is refused first.
    let export_to = o
        .export
        .as_ref()
        .map(|dir| crate::run::ExportTarget::open(dir, false, o.force))
        .transpose()?;
    let mut stage = staging(o.scenario);
    let rate = o.rate.unwrap_or(stage.rate);
    let exe = match &o.sender_exe {
        Some(p) => p.clone(),
        None => std::env::current_exe().context("finding the scanprof binary")?,
    };
    let lab = Lab::create(&LabConfig {
        tbf: stage.tbf.take(),
    })?;
    if stage.fast_neighbour_failure {
        let dev = &lab.sender_dev;
        #[rustfmt::skip]
        netstat::run_in_netns(Some(&lab.sender_ns), "sysctl", &[
            "-qw",
            &format!("net.ipv4.neigh.{dev}.mcast_solicit=1"),
            &format!("net.ipv4.neigh.{dev}.ucast_solicit=0"),
            &format!("net.ipv4.neigh.{dev}.retrans_time_ms=100"),
        ])?;
    }
    // Both undone on drop, also on an error or a panic: the global conntrack limit restored,
    // the cgroup removed.
    let conntrack = stage
        .conntrack_free
        .map(|free| ConntrackFill::start(&lab, free))
        .transpose()?;
    let quota = stage.cpu_quota.map(CpuQuota::create).transpose()?;
    let placement = Placement::choose()?;
    // Started before any thread of ours (the sink, the session), and bounded like the run.
    let hog = if stage.hog {
        Some(Hog::start(placement.sender_cpu, o.duration + RUN_GRACE_S)?)
    } else {
        None
    };
    let sink = if stage.sink {
        Some(lab.udp_sink(stage.port)?)
    } else {
        None
    };
    let echo = if stage.echo {
        Some(Echo::start(&lab, stage.port)?)
    } else {
        None
    };
    // Held open until the lab is gone: a SYN to any of them is answered with a SYN-ACK.
    let _listeners = stage
        .syn_scan_ports
        .map(|n| open_tcp_listeners(&lab, n))
        .transpose()?;
    let before = Counts::read(&lab);
    let send_argv = match stage.syn_scan_ports {
        Some(n) => syn_scan_argv(&lab, n, placement.sender_cpu, rate),
        None if stage.never_sends => never_started_argv(&lab),
        None => sender_argv(&lab, &stage, placement.sender_cpu, &exe, rate, o.duration),
    };
    // A receive scenario profiles the listener; the sender starts beside it, unprofiled, once
    // the listener's port is bound.
    let listening = stage
        .listener
        .map(|l| {
            let argvs = match l.respond {
                Some(r) => r.sender_argvs(&send_argv),
                None => vec![send_argv.clone()],
            };
            ListenerRun::start(&lab, l, stage.port, &exe, o.duration, argvs)
        })
        .transpose()?;
    let argv = listening.as_ref().map_or(send_argv, |l| l.argv.clone());
    let run_opts = RunOptions {
        interval: o.interval,
        // The sender ends itself; this bounds the run if it hangs.
        duration: Some(o.duration + RUN_GRACE_S),
        // A listener is asked for no send rate: its funnel is the receive side. nmap's
        // --max-rate is a cap, not a rate asked for.
        requested: (listening.is_none() && stage.syn_scan_ports.is_none()).then_some(rate),
        // The reference sender's profile fits `scanprof send`, not the listener or nmap.
        profile: Some(if listening.is_some() || stage.never_sends {
            "generic".to_string()
        } else if stage.connect_scan {
            CONNECT_SCAN_PROFILE.to_string()
        } else if stage.syn_scan_ports.is_some() {
            "nmap".to_string()
        } else {
            o.profile.clone()
        }),
        per_packet: None,
        json: o.json,
        no_tui: o.no_tui,
        quiet: false,
        baseline: false,
        baseline_pacer: "tsc".into(),
        baseline_seconds: 2.0,
        export: o.export.clone(),
        force: o.force,
        redact: false,
        pcap: None,
        metrics: o.metrics,
        metrics_file: o.metrics_file.clone(),
        map_size: Vec::new(),
        bpf_stats: crate::cli::BpfStatsArg::Sampled,
        user: None,
        recv_classes: stage
            .listener
            .and_then(|l| l.respond)
            .map_or_else(Vec::new, |r| vec![r.split as u32]),
        relay_fanout: stage.listener.and_then(|l| l.relay).map(|r| r.outputs as u32),
    };
    let hog_pid = hog.as_ref().map(|h| h.pid.as_raw() as u32);
    let sender = SenderId::new(&exe, hog_pid);
    let mover = quota
        .as_ref()
        .map(|q| q.take_sender(sender.clone()))
        .transpose()?;
    let watch = SchedWatch::start(sender.clone())?;
    let staller = stage.stall.map(|st| Staller::start(st, sender)).transpose()?;
    let output = crate::run::Output::choose(o.json, o.no_tui);
    let argv_shown = argv.clone();
    let mut cfg = crate::run::session_config(Target::Command(argv), &run_opts, output)?;
    // After the run this thread reads the lab's counters and deletes its namespaces.
    cfg.keep_also = if quota.is_some() {
        &crate::system::privileges::FOR_LAB_CGROUP
    } else {
        &crate::system::privileges::FOR_LAB
    };
    let metrics = crate::views::metrics::MetricsTargets {
        listen: o.metrics,
        file: o.metrics_file.clone(),
    };
    let stop = crate::run::stop_flag()?;
    let title = lab_title(o.scenario, &argv_shown);
    let rec = crate::run::render_with(cfg, output, stop, export_to.as_ref(), &metrics, Some(title))?.rec;
    let summary = rec.summary.context("the run ended without a summary")?;
    let sched = watch.finish();
    let stalls = staller.map(Staller::finish);
    let hog = hog.map(Hog::stop);
    let moved = mover.map(QuotaMover::finish);
    drop(placement);
    // Let the last packets drain through the lab before reading the independent counters.
    std::thread::sleep(Duration::from_millis(300));
    let receiver = sink.map(|s| s.stop());
    let echoed = echo.map(Echo::finish);
    let (listener, relay_own) = match (stage.listener.and_then(|l| l.relay), listening) {
        (Some(_), Some(l)) => {
            let text = l.finish_text()?;
            let own: super::relay::RelayReport =
                serde_json::from_str(&text).context("the relay's report is not JSON")?;
            (None, Some(own))
        }
        (_, l) => (l.map(ListenerRun::finish).transpose()?, None),
    };
    let qdisc = lab.sender_qdisc().unwrap_or_default();
    let mut counts = Counts::read(&lab).since(before);
    counts.run_delay_s = sched.map(|s| s.run_delay_ns as f64 / 1e9);
    counts.echoed = echoed;
    counts.receiver_pps = receiver.as_ref().and_then(SinkReport::pps);
    let conntrack = conntrack.map(ConntrackFill::finish).transpose()?;
    let cgroup = quota.map(|q| q.finish(moved)).transpose()?;
    counts.relay_lost_share = relay_own.as_ref().map(super::lab_fixtures::relay_lost_share);
    let truth = measured_truth(stage.expect.truth, rate, o.duration, counts, &qdisc);
    let fixture_checks = match (stage.listener.and_then(|l| l.respond), &listener, &relay_own) {
        (Some(r), Some(own), _) => super::lab_fixtures::responder_checks(own, &summary, r.realtime),
        (_, _, Some(own)) => super::lab_fixtures::relay_checks(own, &summary),
        _ => Vec::new(),
    };
    let mut check = check(&stage.expect, &summary, truth);
    check.ok &= fixture_checks.iter().all(|c| c.ok);
    let report = LabReport {
        scenario: scenario_name(o.scenario),
        requested_pps: rate,
        duration_s: o.duration,
        receiver_pps: receiver.as_ref().and_then(|r| r.pps()),
        receiver,
        qdisc,
        target_ip_in: counts.target_ip_in,
        sender_udp_out: counts.sender_udp_out,
        sender_rcvbuf_errors: counts.sender_rcvbuf_errors,
        target_udp_in: counts.target_udp_in,
        target_rcvbuf_errors: counts.target_rcvbuf_errors,
        sender_tcp_active_opens: counts.sender_tcp_active_opens.filter(|_| stage.connect_scan),
        scanprof_connect_syns: summary.connect.map(|c| c.syns),
        target_tcp_out: counts.target_tcp_out,
        sender_kernel_out: counts.sender_kernel_out,
        sender_link_tx: counts.sender_link_tx,
        listener,
        relay: relay_own,
        scanprof_recv_packets: summary.receive.as_ref().map(|r| r.count("recv_packets")),
        scanprof_rcvbuf_drops: summary.receive.as_ref().map(|r| r.drops_of("SOCKET_RCVBUFF")),
        echoed,
        stalls,
        hog,
        sender_cpu_s: sched.map(|s| s.cpu_ns as f64 / 1e9),
        sender_run_delay_s: counts.run_delay_s,
        scanprof_packets: summary.packets,
        scanprof_achieved_pps: summary.achieved_pps,
        scanprof_target_drops: summary
            .drops
            .iter()
            .filter(|d| d.class == DropClass::TargetLoss)
            .map(|d| d.count)
            .sum(),
        truth_kind: stage.expect.truth,
        check,
        fixture_checks,
        sender_ct_drops: counts.sender_ct_drops.filter(|_| conntrack.is_some()),
        conntrack,
        cgroup,
    };
    lab.destroy()?;
    if o.json {
        println!("{}", json::line("lab", &report));
    } else {
        print!("{}", lab_text(&report));
    }
    Ok(ExitCode::SUCCESS)
}

fn lab_text(r: &LabReport) -> String {
    let mut o = format!("lab ({}): independent counts beside scanprof's\n", r.scenario);
    if let Some(rx) = &r.receiver {
        o += &format!(
            "  receiver in the target namespace: {} packets, {:.1} pps | scanprof: {} packets, {:.1} pps\n",
            rx.packets,
            r.receiver_pps.unwrap_or(0.0),
            r.scanprof_packets,
            r.scanprof_achieved_pps
        );
    }
    for q in r.qdisc.iter().filter(|q| q.parent.is_none()) {
        o += &format!(
            "  tc qdisc {} on the sender's link: {} sent, {} dropped | scanprof: {} of the target's packets dropped\n",
            q.kind, q.sent_packets, q.drops, r.scanprof_target_drops
        );
    }
    let uses = |t: &[Truth]| t.contains(&r.truth_kind);
    if let (true, Some(out), Some(inn)) = (
        uses(&[Truth::Gap, Truth::Undelivered, Truth::GapLessRunDelay]),
        r.sender_udp_out,
        r.target_ip_in,
    ) {
        o += &format!("  SNMP: the sender namespace sent {out} UDP datagrams, the target namespace received {inn} IP packets\n");
    }
    if let Some(opens) = r.sender_tcp_active_opens {
        o += &format!(
            "  SNMP: the sender namespace opened {opens} TCP connections (ActiveOpens: SYNs sent) | scanprof: {} SYNs, {} packets\n",
            r.scanprof_connect_syns.unwrap_or(0),
            r.scanprof_packets
        );
    }
    if let (Some(echoed), Some(dropped)) = (r.echoed, r.sender_rcvbuf_errors) {
        o += &format!("  echo: {echoed} replies sent back; the sender namespace dropped {dropped} for a full receive buffer\n");
    }
    if let Some(l) = &r.listener {
        let opt = |v: Option<u64>| v.map_or("-".to_string(), |v| v.to_string());
        o += &format!(
            "  listener (SO_RCVBUF {} bytes) read {} datagrams by its own count | SNMP of the target namespace: {} read (InDatagrams), {} dropped for a full buffer (RcvbufErrors) | scanprof: {} read, {} SOCKET_RCVBUFF\n",
            l.rcvbuf,
            l.packets,
            opt(r.target_udp_in),
            opt(r.target_rcvbuf_errors),
            opt(r.scanprof_recv_packets),
            opt(r.scanprof_rcvbuf_drops)
        );
    }
    for c in &r.fixture_checks {
        o += &format!("  {}\n", c.line());
    }
    if let Some(n) = r.stalls {
        o += &format!("  the sender was stopped {n} times\n");
    }
    if let (true, Some(cpu), Some(delay)) = (
        uses(&[Truth::GapLessRunDelay]),
        r.sender_cpu_s,
        r.sender_run_delay_s,
    ) {
        o += &format!(
            "  /proc/PID/schedstat of the sender: {cpu:.3} s on CPU, {delay:.3} s waiting for a CPU\n"
        );
    }
    if let Some(c) = &r.conntrack {
        o += &format!(
            "  conntrack: nf_conntrack_max {} for the run (restored to {}), {} tracked TCP connections held, {} entries free | the sender namespace's conntrack refused {} packets\n",
            c.max_set,
            c.saved_max,
            c.held,
            c.free,
            r.sender_ct_drops.map_or("-".to_string(), |d| d.to_string())
        );
    }
    if let Some(c) = &r.cgroup {
        o += &format!(
            "  cgroup v{} {} (quota {} us per {} us): throttled in {} of {} periods, {:.3} s by its own count\n",
            c.version, c.path, c.quota_us, c.period_us, c.nr_throttled, c.nr_periods, c.throttled_s
        );
    }
    if let Some(h) = &r.hog {
        o += &format!(
            "  CPU hog (pid {}) pinned with the sender to CPU {}: {:.2} s of CPU\n",
            h.pid, h.cpu, h.cpu_s
        );
    }
    let c = &r.check;
    o += &format!(
        "  diagnosis: top {} verdict `{}`{}, staged `{}`{}: {}\n",
        c.expected_kind,
        c.top_cause.map_or("none", Cause::as_str),
        match (c.top_share, &c.top_confidence) {
            (Some(s), Some(conf)) => format!(" ({}, {conf})", pct(s)),
            _ => String::new(),
        },
        c.expected_cause,
        c.truth.map_or(String::new(), |t| format!("; truth {}", pct(t))),
        if c.ok {
            "right"
        } else if !c.cause_matches {
            "WRONG CAUSE"
        } else if c.truth.is_none() {
            "TRUTH NOT MEASURED"
        } else if c.share_within == Some(true) {
            "FIXTURE'S FIGURES OFF"
        } else {
            "SHARE OFF BY MORE THAN 10 POINTS"
        }
    );
    o
}

/// One scenario of the suite.
#[derive(Debug, Clone, Serialize)]
pub struct SuiteRow {
    pub scenario: String,
    pub check: Option<DiagnosisCheck>,
    /// why the scenario produced no check (the child failed)
    pub error: Option<String>,
}

impl SuiteRow {
    fn ok(&self) -> bool {
        self.check.as_ref().is_some_and(|c| c.ok)
    }
}

/// Every scenario in turn, each as `scanprof lab SCENARIO --json` (its own process, BPF set
/// and lab), then the table.
fn suite(o: &LabOptions) -> anyhow::Result<ExitCode> {
    let exe = match &o.sender_exe {
        Some(p) => p.clone(),
        None => std::env::current_exe().context("finding the scanprof binary")?,
    };
    let scenarios = Scenario::value_variants();
    let mut rows = Vec::new();
    for (i, s) in scenarios.iter().enumerate() {
        let name = scenario_name(*s);
        eprintln!("scanprof lab --suite: {name} ({} of {})", i + 1, scenarios.len());
        let mut cmd = Command::new(&exe);
        crate::system::child::die_with_parent(&mut cmd);
        cmd.args(["lab", &name, "--json", "--duration", &o.duration.to_string()])
            .args(["--interval", &o.interval.to_string(), "--profile", &o.profile])
            .stdin(Stdio::null());
        if let Some(p) = &o.sender_exe {
            cmd.arg("--sender-exe").arg(p);
        }
        let out = cmd
            .output()
            .with_context(|| format!("cannot run {}", exe.display()))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let lab_line = stdout
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|v| v.get("type").and_then(|t| t.as_str()) == Some("lab"));
        let check = lab_line
            .and_then(|v| v.get("check").cloned())
            .and_then(|c| serde_json::from_value::<DiagnosisCheck>(c).ok());
        let error = match (&check, out.status.success()) {
            (Some(_), true) => None,
            _ => {
                let stderr = String::from_utf8_lossy(&out.stderr);
                let tail: Vec<&str> = stderr.lines().rev().take(3).collect();
                Some(format!(
                    "`scanprof lab {name}` exited with {}: {}",
                    out.status,
                    tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
                ))
            }
        };
        rows.push(SuiteRow {
            scenario: name,
            check,
            error,
        });
    }
    let all_ok = rows.iter().all(SuiteRow::ok);
    if o.json {
        let value = serde_json::json!({ "ok": all_ok, "duration_s": o.duration, "rows": rows });
        println!("{}", json::line("suite", &value));
    } else {
        print!("{}", suite_table(&rows));
    }
    Ok(if all_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The suite's result as a markdown table (the form docs/diagnosis.md keeps).
pub fn suite_table(rows: &[SuiteRow]) -> String {
    let mut o = String::from(
        "| scenario | expected cause | top verdict of that kind | share | truth | match |\n\
         |---|---|---|---:|---:|---|\n",
    );
    for r in rows {
        let Some(c) = &r.check else {
            o += &format!(
                "| {} | | error: {} | | | no |\n",
                r.scenario,
                r.error.as_deref().unwrap_or("no result")
            );
            continue;
        };
        let verdict = match (&c.top_cause, &c.top_confidence) {
            (Some(cause), Some(conf)) => format!("`{cause}` ({conf})"),
            _ => "none".to_string(),
        };
        let verdict = match &c.first_cause {
            Some(first) if Some(first) != c.top_cause.as_ref() => {
                format!("{verdict}; first overall `{first}`")
            }
            _ => verdict,
        };
        let ok = match (c.cause_matches, c.share_within) {
            (true, Some(true)) if !c.ok => "cause yes, fixture's figures off",
            (true, Some(true)) => "yes",
            (true, Some(false)) => "cause yes, share no",
            (true, None) => "cause yes, truth not measured",
            (false, _) => "no",
        };
        o += &format!(
            "| {} | {} `{}` | {} | {} | {} | {} |\n",
            r.scenario,
            c.expected_kind,
            c.expected_cause,
            verdict,
            c.top_share.map_or("-".to_string(), pct),
            c.truth.map_or("-".to_string(), pct),
            ok
        );
    }
    let failed = rows.iter().filter(|r| !r.ok()).count();
    o += &format!(
        "\n{} of {} scenarios diagnosed right (cause named, share within {:.0} points of the truth)\n",
        rows.len() - failed,
        rows.len(),
        SHARE_TOLERANCE * 100.0
    );
    o
}

/// One column of /proc/net/stat/nf_conntrack, summed over the CPUs' rows (hex; `entries` is
/// the same in every row and is not summed).
fn conntrack_stat(text: &str, column: &str) -> Option<u64> {
    let mut lines = text.lines();
    let at = lines.next()?.split_whitespace().position(|c| c == column)?;
    let rows: Vec<u64> = lines
        .filter_map(|l| u64::from_str_radix(l.split_whitespace().nth(at)?, 16).ok())
        .collect();
    match column {
        "entries" => rows.first().copied(),
        _ => (!rows.is_empty()).then(|| rows.iter().sum()),
    }
}

const CONNTRACK_MAX: &str = "/proc/sys/net/netfilter/nf_conntrack_max";
/// The global limit the conntrack scenario sets for its run.
const CONNTRACK_LAB_MAX: u64 = 64;
/// TCP port of the target's listener the tracked connections go to.
const CONNTRACK_FILL_PORT: u16 = 7000;

/// Connection tracking on in the sender namespace (an nftables rule on `ct state`), and its
/// table filled: `net.netfilter.nf_conntrack_max` is one value for every namespace (read-only
/// outside the initial one on kernels 6.1 to 6.18), so the global value is lowered to
/// CONNTRACK_LAB_MAX for the run, then max - free TCP connections (assured entries, never
/// evicted) are opened and held. Refused when another namespace tracks connections, whose new
/// connections the low limit would refuse too. The saved limit is restored by `finish`, and on
/// drop (an error or a panic, through its [`SysctlHold`](crate::lab::sysctl::SysctlHold)); after
/// a SIGKILL of scanprof the next `scanprof lab` restores it.
struct ConntrackFill {
    /// the global limit lowered for the run (declared first: restored before the connections
    /// close)
    max: Option<crate::lab::sysctl::SysctlHold>,
    held: Vec<std::net::TcpStream>,
    _listener: Option<std::net::TcpListener>,
    free: u64,
}

/// What the conntrack scenario set up.
#[derive(Debug, Clone, Serialize)]
pub struct ConntrackReport {
    /// the global nf_conntrack_max before the run, restored after it
    pub saved_max: u64,
    /// the value set for the run
    pub max_set: u64,
    /// tracked TCP connections held open through the run
    pub held: usize,
    /// entries left free for the sender's flows
    pub free: u64,
}

impl ConntrackFill {
    fn start(lab: &Lab, free: u64) -> anyhow::Result<ConntrackFill> {
        let read_max = || -> anyhow::Result<u64> {
            let t = std::fs::read_to_string(CONNTRACK_MAX).with_context(|| {
                format!("cannot read {CONNTRACK_MAX}: is connection tracking in this kernel?")
            })?;
            t.trim().parse().context("nf_conntrack_max is not a number")
        };
        read_max()?; // connection tracking is in this kernel, its limit a number
        let sender_netns = netns_id_of(&lab.sender_ns);
        if let Some((netns, pid, entries)) = other_tracking_namespace(sender_netns) {
            bail!(
                "connection tracking holds {entries} entries in network namespace {netns} (pid {pid}): \
                 lowering the global nf_conntrack_max for this scenario would refuse its new connections too; \
                 run it where nothing else tracks connections"
            );
        }
        for args in [
            &["add", "table", "ip", "scanprof_lab"][..],
            &[
                "add",
                "chain",
                "ip",
                "scanprof_lab",
                "out",
                "{ type filter hook output priority 0 ; }",
            ],
            &[
                "add",
                "rule",
                "ip",
                "scanprof_lab",
                "out",
                "ct",
                "state",
                "new",
                "accept",
            ],
        ] {
            netstat::run_in_netns(Some(&lab.sender_ns), "nft", args).context(
                "cannot turn connection tracking on in the lab's sender namespace (is nftables installed? \
                 scripts/setup installs it)",
            )?;
        }
        let mut fill = ConntrackFill {
            max: None,
            held: Vec::new(),
            _listener: None,
            free,
        };
        fill.max = Some(crate::lab::sysctl::SysctlHold::set(
            CONNTRACK_MAX,
            &CONNTRACK_LAB_MAX.to_string(),
        )?);
        let at = SocketAddrV4::new(lab.target_addr, CONNTRACK_FILL_PORT);
        fill._listener = Some(lab.in_target(move || std::net::TcpListener::bind(at))??);
        let n = CONNTRACK_LAB_MAX.saturating_sub(free) as usize;
        fill.held = lab.in_sender(move || -> std::io::Result<Vec<std::net::TcpStream>> {
            (0..n).map(|_| std::net::TcpStream::connect(at)).collect()
        })??;
        // The final ACK of each handshake makes its entry assured; wait until all are counted.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            let count = netstat::run_in_netns(Some(&lab.sender_ns), "cat", &["/proc/net/stat/nf_conntrack"])
                .ok()
                .and_then(|t| conntrack_stat(&t, "entries"));
            if count == Some(n as u64) {
                break;
            }
            anyhow::ensure!(
                std::time::Instant::now() < deadline,
                "the sender namespace's conntrack table holds {count:?} entries, not the {n} connections opened"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(fill)
    }

    /// Restores the global limit and closes the connections.
    fn finish(mut self) -> anyhow::Result<ConntrackReport> {
        let max = self.max.take().context("the conntrack limit was never set")?;
        let saved_max = max.saved().parse().unwrap_or(0);
        max.restore()?;
        Ok(ConntrackReport {
            saved_max,
            max_set: CONNTRACK_LAB_MAX,
            held: std::mem::take(&mut self.held).len(),
            free: self.free,
        })
    }
}

/// The network namespace inode of a named lab namespace.
fn netns_id_of(ns: &str) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(format!("/run/netns/{ns}"))
        .ok()
        .map(|m| m.ino())
}

/// A network namespace other than `except` whose conntrack table holds entries: (inode, a pid
/// in it, entries), from every process's /proc/PID/net/stat/nf_conntrack.
fn other_tracking_namespace(except: Option<u64>) -> Option<(u64, u32, u64)> {
    let mut seen = std::collections::BTreeSet::new();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Some(netns) = crate::system::conntrack::netns_of(pid).map(u64::from) else {
            continue;
        };
        if Some(netns) == except || !seen.insert(netns) {
            continue;
        }
        let entries = std::fs::read_to_string(format!("/proc/{pid}/net/stat/nf_conntrack"))
            .ok()
            .and_then(|t| conntrack_stat(&t, "entries"))
            .unwrap_or(0);
        if entries > 0 {
            return Some((netns, pid, entries));
        }
    }
    None
}

/// A cgroup of the lab's own with a CPU quota: in the unified hierarchy when its cpu controller
/// is enabled there, else in the v1 `cpu` hierarchy. Removed by `finish` and on drop (its
/// processes moved back to the hierarchy's root first).
pub(crate) struct CpuQuota {
    version: u8,
    dir: std::path::PathBuf,
    /// the hierarchy root's cgroup.procs
    root_procs: std::path::PathBuf,
    quota_us: u64,
    removed: bool,
}

/// The sender's cgroup and its own counters after the run.
#[derive(Debug, Clone, Serialize)]
pub struct CgroupReport {
    pub version: u8,
    /// path in its hierarchy
    pub path: String,
    pub quota_us: u64,
    pub period_us: u64,
    /// periods, throttled periods and throttled time, s, from its cpu.stat
    pub nr_periods: u64,
    pub nr_throttled: u64,
    pub throttled_s: f64,
    /// whether the sender was moved into it
    pub sender_moved: bool,
}

/// The quota's period, us.
const QUOTA_PERIOD_US: u64 = 100_000;
static QUOTAS_CREATED: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

impl CpuQuota {
    pub(crate) fn create(cpus: f64) -> anyhow::Result<CpuQuota> {
        use crate::system::cpu_limits::CgroupMounts;
        let mounts = CgroupMounts::read();
        let name = format!(
            "scanprof-lab-{}-{}",
            std::process::id(),
            QUOTAS_CREATED.fetch_add(1, Ordering::Relaxed)
        );
        let quota_us = ((cpus * QUOTA_PERIOD_US as f64).round() as u64).max(1000);
        let v2 = mounts
            .v2
            .as_ref()
            .map(|(point, _)| std::path::PathBuf::from(point))
            .filter(|p| {
                let has_cpu = |f: &str| {
                    std::fs::read_to_string(p.join(f)).is_ok_and(|t| t.split_whitespace().any(|c| c == "cpu"))
                };
                has_cpu("cgroup.controllers") && has_cpu("cgroup.subtree_control")
            });
        let (version, root) = match (v2, &mounts.v1_cpu) {
            (Some(root), _) => (2, root),
            (None, Some((point, _))) => (1, std::path::PathBuf::from(point)),
            (None, None) => bail!(
                "no cgroup hierarchy with the cpu controller: neither cgroup2 with cpu in its root's \
                 cgroup.subtree_control nor a v1 cpu mount (see /proc/self/mountinfo)"
            ),
        };
        let dir = root.join(&name);
        std::fs::create_dir(&dir).with_context(|| format!("cannot create the cgroup {}", dir.display()))?;
        let q = CpuQuota {
            version,
            dir,
            root_procs: root.join("cgroup.procs"),
            quota_us,
            removed: false,
        };
        let write = |file: &str, value: String| {
            std::fs::write(q.dir.join(file), &value)
                .with_context(|| format!("cannot write {value} to {}", q.dir.join(file).display()))
        };
        if version == 2 {
            write("cpu.max", format!("{quota_us} {QUOTA_PERIOD_US}"))?;
        } else {
            write("cpu.cfs_period_us", QUOTA_PERIOD_US.to_string())?;
            write("cpu.cfs_quota_us", quota_us.to_string())?;
        }
        Ok(q)
    }

    /// Moves the sender into the cgroup as soon as it runs, from a thread of its own.
    fn take_sender(&self, sender: SenderId) -> anyhow::Result<QuotaMover> {
        let procs = self.dir.join("cgroup.procs");
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("lab-quota".into())
            .spawn(move || {
                // Writing a pid into a root-owned cgroup.procs needs root's uid, no capability.
                let _ = crate::system::privileges::drop_to(&[]);
                while !flag.load(Ordering::Relaxed) {
                    if let Some(pid) = children_of_self().into_iter().find(|p| sender.is(*p)) {
                        return std::fs::write(&procs, pid.to_string()).is_ok();
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
                false
            })
            .context("cannot start the cgroup thread")?;
        Ok(QuotaMover {
            stop,
            thread: Some(thread),
        })
    }

    /// The cgroup's own counters, then the cgroup removed.
    fn finish(mut self, moved: Option<bool>) -> anyhow::Result<CgroupReport> {
        let stat = std::fs::read_to_string(self.dir.join("cpu.stat"))
            .ok()
            .and_then(|t| crate::system::cpu_limits::parse_cpu_stat(&t))
            .unwrap_or_default();
        let report = CgroupReport {
            version: self.version,
            path: format!(
                "/{}",
                self.dir
                    .file_name()
                    .map_or(String::new(), |n| n.to_string_lossy().into_owned())
            ),
            quota_us: self.quota_us,
            period_us: QUOTA_PERIOD_US,
            nr_periods: stat.0,
            nr_throttled: stat.1,
            throttled_s: stat.2 as f64 / 1e9,
            sender_moved: moved.unwrap_or(false),
        };
        self.remove()?;
        Ok(report)
    }

    fn remove(&mut self) -> anyhow::Result<()> {
        if self.removed {
            return Ok(());
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        loop {
            // Whatever is left in it (the sender, should it still run) goes back to the root.
            if let Ok(pids) = std::fs::read_to_string(self.dir.join("cgroup.procs")) {
                for pid in pids.split_whitespace() {
                    let _ = std::fs::write(&self.root_procs, pid);
                }
            }
            match std::fs::remove_dir(&self.dir) {
                Ok(()) => {
                    self.removed = true;
                    return Ok(());
                }
                Err(e) if std::time::Instant::now() >= deadline => {
                    return Err(e).with_context(|| format!("cannot remove the cgroup {}", self.dir.display()))
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }
}

impl Drop for CpuQuota {
    fn drop(&mut self) {
        if let Err(e) = self.remove() {
            eprintln!("scanprof: {e:#}");
        }
    }
}

/// The thread that moves the sender into its cgroup.
struct QuotaMover {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<bool>>,
}

impl QuotaMover {
    /// Whether the sender was moved.
    fn finish(mut self) -> bool {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().and_then(|t| t.join().ok()).unwrap_or(false)
    }
}

impl Drop for QuotaMover {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SNMP: &str = "Ip: Forwarding DefaultTTL InReceives InHdrErrors\n\
                        Ip: 1 64 29977 0\n\
                        Icmp: InMsgs InErrors\n\
                        Icmp: 0 0\n\
                        Udp: InDatagrams NoPorts InErrors OutDatagrams\n\
                        Udp: 0 0 0 513\n";

    #[test]
    fn the_lab_title_names_the_scenario_and_the_senders_own_command() {
        // It read `ip netns exec sp7503-0s setsid sh -c echo -20 > /proc/self/autogroup ...`.
        // The wrappers as `sender_argv` writes them (a Lab needs root to exist).
        let lift = format!("echo {SENDER_NICE} > /proc/self/autogroup 2>/dev/null; exec \"$@\"");
        let send =
            "/work/x/target/release/scanprof send --to 10.99.0.2:9000 --rate 5000 --duration 3 --size 64";
        let mut argv: Vec<String> = [
            "ip",
            "netns",
            "exec",
            "sp7503-0s",
            "setsid",
            "sh",
            "-c",
            &lift,
            "scanprof-lab",
        ]
        .map(String::from)
        .to_vec();
        argv.extend(["nice", "-n", SENDER_NICE, "taskset", "-c", "1"].map(String::from));
        argv.extend(send.split(' ').map(String::from));
        let want = "lab qdisc-drop: scanprof send --to 10.99.0.2:9000 --rate 5000 --duration 3 --size 64";
        assert_eq!(lab_title(Scenario::QdiscDrop, &argv), want);
        // With the hog (no niceness lift): the same.
        let mut hog: Vec<String> = ["ip", "netns", "exec", "sp7503-0s", "taskset", "-c", "1"]
            .map(String::from)
            .to_vec();
        hog.extend(send.split(' ').map(String::from));
        assert_eq!(lab_title(Scenario::QdiscDrop, &hog), want);
    }

    #[test]
    fn snmp_counters_are_read_by_protocol_and_name() {
        assert_eq!(snmp_counter(SNMP, "Ip", "InReceives"), Some(29977));
        assert_eq!(snmp_counter(SNMP, "Udp", "OutDatagrams"), Some(513));
        assert_eq!(snmp_counter(SNMP, "Udp", "Nope"), None);
        assert_eq!(snmp_counter(SNMP, "Tcp", "InSegs"), None);
    }

    #[test]
    fn the_sender_is_known_by_its_binarys_command_name() {
        let id = SenderId::new(std::path::Path::new("/tmp/scanprof-release-build"), Some(7));
        assert_eq!(id.comm, "scanprof-releas");
        assert_eq!(
            SenderId::new(std::path::Path::new("target/debug/scanprof"), None).comm,
            "scanprof"
        );
        assert!(!id.is(7), "the hog is never the sender");
    }

    #[test]
    fn schedstat_gives_cpu_and_run_delay() {
        assert_eq!(
            parse_schedstat("561238 1377409 1\n"),
            Some(SchedStat {
                cpu_ns: 561238,
                run_delay_ns: 1377409
            })
        );
        assert_eq!(parse_schedstat("12\n"), None);
    }

    #[test]
    fn a_bound_port_is_found_in_proc_net_udp() {
        let table = "   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n\
                     \x20 12: 00000000:2328 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 91234 2 0000000000000000 0\n";
        assert!(udp_table_has_port(table, 9000));
        assert!(!udp_table_has_port(table, 9001));
        assert!(!udp_table_has_port(table, 0x0023));
    }

    #[test]
    fn truths_come_from_the_independent_counts() {
        let counts = Counts {
            target_ip_in: Some(2500),
            sender_udp_out: Some(10_000),
            sender_rcvbuf_errors: Some(9_000),
            target_udp_in: Some(1_000),
            target_rcvbuf_errors: Some(3_000),
            sender_tcp_active_opens: Some(4_000),
            run_delay_s: Some(0.5),
            target_tcp_out: Some(380),
            sender_kernel_out: Some(400),
            sender_link_tx: Some(800),
            echoed: None,
            receiver_pps: None,
            sender_ct_drops: Some(2_000),
            relay_lost_share: Some(0.25),
        };
        let relay = measured_truth(Truth::RelayLoss, 1000.0, 5.0, counts, &[]).unwrap();
        assert!((relay - 0.25).abs() < 1e-9, "{relay}");
        let gap = measured_truth(Truth::Gap, 1000.0, 5.0, counts, &[]).unwrap();
        assert!((gap - 0.5).abs() < 1e-9, "{gap}");
        let rest = measured_truth(Truth::GapLessRunDelay, 1000.0, 5.0, counts, &[]).unwrap();
        assert!((rest - 0.4).abs() < 1e-9, "{rest}");
        let undelivered = measured_truth(Truth::Undelivered, 1000.0, 5.0, counts, &[]).unwrap();
        assert!((undelivered - 0.75).abs() < 1e-9, "{undelivered}");
        let replies = measured_truth(Truth::ReplyDrops, 1000.0, 5.0, counts, &[]).unwrap();
        assert!((replies - 0.9).abs() < 1e-9, "{replies}");
        let listener = measured_truth(Truth::ListenerDrops, 1000.0, 5.0, counts, &[]).unwrap();
        assert!((listener - 0.75).abs() < 1e-9, "{listener}");
        let syns = measured_truth(Truth::SynGap, 1000.0, 5.0, counts, &[]).unwrap();
        assert!((syns - 0.2).abs() < 1e-9, "{syns}");
        let tbf = QdiscStats {
            kind: "tbf".into(),
            sent_packets: 300,
            drops: 700,
            ..QdiscStats::default()
        };
        let drops = measured_truth(Truth::QdiscDrops, 1000.0, 5.0, counts, &[tbf]).unwrap();
        assert!((drops - 0.7).abs() < 1e-9, "{drops}");
        assert_eq!(measured_truth(Truth::QdiscDrops, 1000.0, 5.0, counts, &[]), None);
        // 400 probes (800 out, 400 of them the kernel's RSTs), 380 answered.
        let unanswered = measured_truth(Truth::Unanswered, 1000.0, 5.0, counts, &[]).unwrap();
        assert!((unanswered - 0.05).abs() < 1e-9, "{unanswered}");
        // The echo's replies are answers too.
        let echo = Counts {
            target_tcp_out: Some(0),
            sender_kernel_out: Some(0),
            sender_link_tx: Some(100),
            echoed: Some(100),
            ..counts
        };
        assert_eq!(measured_truth(Truth::Unanswered, 20.0, 5.0, echo, &[]), Some(0.0));
        // 2000 refused of 1000 pps x 5 s asked.
        let ct = measured_truth(Truth::ConntrackDrops, 1000.0, 5.0, counts, &[]).unwrap();
        assert!((ct - 0.4).abs() < 1e-9, "{ct}");
    }

    #[test]
    fn an_expectation_is_written_as_the_cause_name_or_no_loss() {
        for (e, name) in [
            (Expected::NoLoss, "no_loss"),
            (Expected::Cause(Cause::QdiscDrop), "qdisc_drop"),
        ] {
            assert_eq!(serde_json::to_string(&e).unwrap(), format!("\"{name}\""));
            assert_eq!(
                serde_json::from_str::<Expected>(&format!("\"{name}\"")).unwrap(),
                e
            );
            assert_eq!(e.to_string(), name);
        }
        assert!(serde_json::from_str::<Expected>("\"no_such\"").is_err());
    }

    #[test]
    fn every_scenario_stages_a_distinct_cause_or_a_healthy_run() {
        // A cause may be staged twice only in two regimes told apart by their truth (the
        // miscalibrated slot of a 4 s run and of a 12-packet one).
        let mut causes: Vec<String> = Scenario::value_variants()
            .iter()
            .map(|s| staging(*s).expect)
            .filter(|e| e.cause != Expected::Cause(Cause::NoGap) && e.cause != Expected::NoLoss)
            .map(|e| format!("{} ({:?})", e.cause, e.truth))
            .collect();
        let n = causes.len();
        causes.sort();
        causes.dedup();
        assert_eq!(causes.len(), n, "two scenarios stage the same cause: {causes:?}");
        assert!(n >= 8, "{causes:?}");
        assert_eq!(
            staging(Scenario::Healthy).expect.cause,
            Expected::Cause(Cause::NoGap)
        );
        assert_eq!(
            scenario_name(Scenario::UnresolvedNeighbour),
            "unresolved-neighbour"
        );
    }

    fn verdict(kind: Kind, cause: Cause, share: f64) -> crate::analysis::verdict::Verdict {
        crate::analysis::verdict::Verdict {
            kind,
            cause,
            sentence: String::new(),
            share,
            evidence: Vec::new(),
            next_step: String::new(),
            confidence: Confidence::Weak,
        }
    }

    #[test]
    fn a_no_loss_scenario_fails_on_a_loss_verdict_first_or_a_loss_share_off_the_truth() {
        let expect = staging(Scenario::KernelReply).expect;
        assert_eq!(expect.cause, Expected::NoLoss);
        // Nothing lost: no_gap first, receiver_keeps_up (share 0) does not count as loss.
        let v = vec![
            verdict(Kind::Loss, Cause::ReceiverKeepsUp, 0.0),
            verdict(Kind::Gap, Cause::NoGap, 0.0),
        ];
        let c = check_no_loss(&expect, &v, Some(0.0));
        assert!(c.ok, "{c:?}");
        assert_eq!(c.top_cause, Some(Cause::ReceiverKeepsUp));
        // The kernel's RSTs read as lost probes (the bug): a loss verdict comes first.
        let v = vec![
            verdict(Kind::Loss, Cause::TargetDrop, 0.83),
            verdict(Kind::Gap, Cause::NoGap, 0.0),
        ];
        let c = check_no_loss(&expect, &v, Some(0.0));
        assert!(!c.ok && !c.cause_matches, "{c:?}");
        // A loss ranked after a gap verdict still counts in the share.
        let v = vec![
            verdict(Kind::Gap, Cause::CpuBound, 0.3),
            verdict(Kind::Loss, Cause::TargetDrop, 0.5),
        ];
        let c = check_no_loss(&expect, &v, Some(0.0));
        assert!(c.cause_matches && c.share_within == Some(false) && !c.ok, "{c:?}");
        // No truth measured: not ok.
        assert!(!check_no_loss(&expect, &[], None).ok);
    }

    #[test]
    fn the_suite_table_says_what_matched() {
        let c = DiagnosisCheck {
            expected_kind: Kind::Gap,
            expected_cause: Expected::Cause(Cause::Preempted),
            top_cause: Some(Cause::Preempted),
            top_share: Some(0.45),
            top_confidence: Some(Confidence::Strong),
            first_cause: Some(Cause::Preempted),
            cause_matches: true,
            truth: Some(0.5),
            truth_basis: Truth::Gap.basis().into(),
            share_within: Some(true),
            ok: true,
        };
        let wrong = DiagnosisCheck {
            top_cause: Some(Cause::CpuBound),
            first_cause: Some(Cause::CpuBound),
            cause_matches: false,
            ok: false,
            ..c.clone()
        };
        let rows = [
            SuiteRow {
                scenario: "preemption".into(),
                check: Some(c),
                error: None,
            },
            SuiteRow {
                scenario: "cpu-bound".into(),
                check: Some(wrong),
                error: None,
            },
            SuiteRow {
                scenario: "blocking".into(),
                check: None,
                error: Some("exited with 1".into()),
            },
        ];
        let t = suite_table(&rows);
        assert!(
            t.contains("| preemption | gap `preempted` | `preempted` (strong) | 45.0% | 50.0% | yes |"),
            "{t}"
        );
        assert!(
            t.contains("| cpu-bound | gap `preempted` | `cpu_bound` (strong) | 45.0% | 50.0% | no |"),
            "{t}"
        );
        assert!(
            t.contains("| blocking | | error: exited with 1 | | | no |"),
            "{t}"
        );
        assert!(t.contains("1 of 3 scenarios diagnosed right"), "{t}");
    }

    #[test]
    fn a_short_run_is_judged_over_the_receivers_own_window() {
        // 12 packets 200 ms apart at 1000 pps asked: the receiver's timestamps give 5 pps over
        // its 2.2 s, whatever the lab's duration; the count over the duration would not.
        let counts = Counts {
            target_ip_in: Some(12),
            receiver_pps: Some(5.0),
            ..Counts::default()
        };
        let t = measured_truth(Truth::ReceiverGap, 1000.0, 4.0, counts, &[]).unwrap();
        assert!((t - 0.995).abs() < 1e-9, "{t}");
        let none = Counts::default();
        assert_eq!(measured_truth(Truth::ReceiverGap, 1000.0, 4.0, none, &[]), None);
        let short = staging(Scenario::ShortMiscalibration);
        assert_eq!(short.expect.cause, Expected::Cause(Cause::Miscalibrated));
        // At most 20 packets, each slot far beyond the one asked for.
        let count = short
            .flags
            .iter()
            .position(|f| *f == "--count")
            .map(|i| short.flags[i + 1]);
        assert!(
            count.and_then(|c| c.parse::<u32>().ok()).is_some_and(|c| c <= 20),
            "{:?}",
            short.flags
        );
    }

    #[test]
    fn the_never_started_family_sends_nothing_and_its_members_fail() {
        let stage = staging(Scenario::NeverStarted);
        assert!(stage.never_sends);
        assert_eq!(
            (stage.expect.cause, stage.expect.truth),
            (Expected::Cause(Cause::NeverSent), Truth::Gap)
        );
        // Nothing arrived: the whole requested rate is missing.
        let counts = Counts {
            target_ip_in: Some(0),
            ..Counts::default()
        };
        assert_eq!(measured_truth(Truth::Gap, 1000.0, 4.0, counts, &[]), Some(1.0));
        // The script itself: two children with non-zero statuses, a parent that fails too.
        let out = Command::new("sh")
            .args(["-c", NEVER_STARTED_SCRIPT, "scanner"])
            .status()
            .expect("sh runs");
        assert_eq!(out.code(), Some(1));
    }
}
