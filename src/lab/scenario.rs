//! The lab's scenarios: each one's staging (the link, the sender's flags, its default rate, the
//! helpers and disturbances it needs) and what the diagnosis must find, with the measured
//! truth it is held against (docs/diagnosis.md, "Scenario suite results").

use std::time::Duration;

use clap::ValueEnum;
use serde::{Deserialize, Serialize};

use crate::analysis::verdict::{Cause, Kind, UnknownCause};
use crate::cli::Scenario;
use crate::netlab::{Lab, TbfConfig};

/// UDP port of the lab receiver; the closed-port scenario aims at a port nobody listens on.
pub const SINK_PORT: u16 = 9000;
/// First TCP port of the listeners a SYN scan finds open.
pub const OPEN_TCP_BASE: u16 = 20_000;
pub const CLOSED_PORT: u16 = 9;
/// Seconds the run may outlast the sender's --duration before the session ends it.
pub const RUN_GRACE_S: f64 = 30.0;
/// Niceness of the sender and of its scheduling group (except against the hog): with autogroup
/// scheduling, a session's tasks share one weight, so the sender gets a session of its own
/// (`setsid`) whose group weighs ~87x a normal one; builds and tests on a shared machine then
/// take little of the sender's CPU.
pub const SENDER_NICE: &str = "-20";

/// A scenario's staging: the link, the sender's flags, its default rate, and what the
/// diagnosis must find.
#[derive(Debug)]
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
    /// instead of the reference sender, `nmap -sU` of this many closed UDP ports of the target
    /// (at `--rate` as nmap's --min-rate and --max-rate), whose namespace answers at most one
    /// probe a second after a burst (its ICMP rate limit): see [`UDP_SCAN_ICMP`]
    pub udp_scan_ports: Option<u16>,
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
    pub respond: Option<super::reference::Respond>,
    /// it is the packet relay (`scanprof relay`) reading the target's veth, not `scanprof recv`
    pub relay: Option<super::reference::Relay>,
    /// it is the packet-socket reader (`scanprof ring-recv`) reading the target's veth through a
    /// TPACKET ring, not `scanprof recv`
    pub ring: Option<super::reference::Ring>,
    /// `scanprof recv`'s worker threads, each on its own SO_REUSEPORT socket and fed by a
    /// sender of its own (1: one socket, one sender)
    pub workers: usize,
}

impl Listener {
    /// `scanprof recv` with the kernel's buffer, reading as fast as datagrams come, one worker:
    /// what each receive scenario changes one thing of.
    pub const PLAIN: Listener = Listener {
        rcvbuf: None,
        read_rate: None,
        respond: None,
        relay: None,
        ring: None,
        workers: 1,
    };
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
    /// tp_drops/tp_packets of the packet-socket reader's ring (its own PACKET_STATISTICS)
    RingDrops,
    /// The probes the target did not answer / the probes that reached it: the ICMP errors its
    /// namespace held back (`Icmp: OutRateLimitHost + OutRateLimitGlobal`) over the datagrams
    /// that met a closed port there (`Udp: NoPorts`).
    HeldBack,
}

impl Truth {
    pub fn basis(self) -> &'static str {
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
            Truth::RingDrops => "tp_drops/tp_packets, the ring reader's own PACKET_STATISTICS",
            Truth::HeldBack => "target Icmp OutRateLimitHost + OutRateLimitGlobal over its Udp NoPorts",
        }
    }
}

/// What `scanprof lab` stages for scenario `s`.
///
/// A new scenario is registered here: its variant in the group of its kind of situation (the
/// compiler names a variant left out), and its staging as an arm of that group's function.
pub fn staging(s: Scenario) -> Staging {
    use Scenario::*;
    let base = healthy();
    match s {
        Healthy => base,
        QdiscDrop | Blocking | UnresolvedNeighbour | SendErrors | ConntrackFull => on_the_path(s, base),
        CpuBound | CoarsePacing | Preemption | Miscalibrated | Stalls | ShortMiscalibration
        | CgroupThrottled | NeverStarted => in_the_sender(s, base),
        ClosedPort | ReplyDrop | ConnectScan | KernelReply | SocketClosePurge | RepliesLost => {
            scans_and_replies(s, base)
        }
        RcvbufOverflow | ResponderKinds | ReceiverCpuBound | Relay | ReceiverWorkers | RingFull => {
            at_the_receiver(s, base)
        }
    }
}

/// The healthy run every scenario starts from: 10,000 pps of 64-byte datagrams to a sink,
/// nothing in the way, no gap expected.
fn healthy() -> Staging {
    Staging {
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
        udp_scan_ports: None,
        never_sends: false,
        conntrack_free: None,
        cpu_quota: None,
        expect: expect(Kind::Gap, Cause::NoGap, Truth::Gap),
    }
}

/// A tbf on the target's link: `rate`, a 4 kB burst, a queue of `limit`.
fn tbf(rate: &str, limit: &str) -> Option<TbfConfig> {
    Some(TbfConfig {
        rate: rate.into(),
        burst: "4kb".into(),
        limit: limit.into(),
    })
}

/// The diagnosis must find `cause` as a verdict of `kind`, held against `truth`.
fn expect(kind: Kind, cause: Cause, truth: Truth) -> Expectation {
    Expectation {
        kind,
        cause: Expected::Cause(cause),
        truth,
    }
}

/// The diagnosis must find no loss; `truth` is what is counted instead.
fn no_loss(truth: Truth) -> Expectation {
    Expectation {
        kind: Kind::Loss,
        cause: Expected::NoLoss,
        truth,
    }
}

/// The scenarios of the path to the target: the link's queue, the neighbour, the send buffer, the conntrack table.
fn on_the_path(s: Scenario, base: Staging) -> Staging {
    match s {
        // 5000 pps x 512 B = 20 Mbit/s into a 2 Mbit/s bucket with a 10 kB queue.
        Scenario::QdiscDrop => Staging {
            tbf: tbf("2mbit", "10kb"),
            rate: 5_000.0,
            size: 512,
            expect: expect(Kind::Loss, Cause::QdiscDrop, Truth::QdiscDrops),
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
        // 5000 pps x 106 B frames = 4.2 Mbit/s into 1 Mbit/s with a queue of ~2 frames: the
        // packet socket gets ENOBUFS for every frame the qdisc cannot take.
        Scenario::SendErrors => Staging {
            tbf: tbf("1mbit", "256"),
            rate: 5_000.0,
            flags: &["--method", "packet"],
            expect: expect(Kind::Gap, Cause::SendErrors, Truth::QdiscDrops),
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
        _ => base,
    }
}

/// The scenarios of the sender's own time: its CPU, its pacer and slots, the CPU it is given.
fn in_the_sender(s: Scenario, base: Staging) -> Staging {
    match s {
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
        // 12 packets, each slot 200 ms where 1000 pps needs 1 ms: the tsc pacer busy-waits
        // through 2.2 s and sends 0.5% of the rate. The profile reads the delay it derived.
        Scenario::ShortMiscalibration => Staging {
            rate: 1_000.0,
            flags: &["--pacer", "tsc", "--calibration-skew", "200", "--count", "12"],
            expect: expect(Kind::Gap, Cause::Miscalibrated, Truth::ReceiverGap),
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
        // Nothing is sent: the whole requested rate is missing, and the verdict must say what
        // the family did instead (its members' exits), not that a probe is missing.
        Scenario::NeverStarted => Staging {
            rate: 1_000.0,
            sink: true,
            never_sends: true,
            expect: expect(Kind::Gap, Cause::NeverSent, Truth::Gap),
            ..base
        },
        _ => base,
    }
}

/// The scenarios of a scan's probes and the replies to them: closed ports, connects, SYNs, replies the sender's socket keeps.
fn scans_and_replies(s: Scenario, base: Staging) -> Staging {
    match s {
        // NO_SOCKET drops at the target are what probes to a closed port produce: no loss.
        Scenario::ClosedPort => Staging {
            rate: 2_000.0,
            port: CLOSED_PORT,
            sink: false,
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
        // 1,000 probes/s to 2,000 closed ports: the target answers a burst, then one a second.
        Scenario::RepliesLost => Staging {
            rate: 1_000.0,
            sink: false,
            udp_scan_ports: Some(2_000),
            expect: expect(Kind::Loss, Cause::LostBeyondHost, Truth::HeldBack),
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
        _ => base,
    }
}

/// The scenarios of a receiver in the target namespace: its buffer, its CPU, its workers, its ring, a relay.
fn at_the_receiver(s: Scenario, base: Staging) -> Staging {
    match s {
        // 5000 pps into a listener that reads 1000/s from an 8 kB buffer (4096 doubled): about
        // four in five datagrams die at its socket.
        Scenario::RcvbufOverflow => Staging {
            rate: 5_000.0,
            sink: false,
            listener: Some(Listener {
                rcvbuf: Some(4096),
                read_rate: Some(1_000.0),
                ..Listener::PLAIN
            }),
            expect: expect(Kind::Loss, Cause::RcvbufOverflow, Truth::ListenerDrops),
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
                respond: Some(super::reference::RESPONDER),
                ..Listener::PLAIN
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
                respond: Some(super::reference::SLOW_RESPONDER),
                ..Listener::PLAIN
            }),
            expect: expect(Kind::Loss, Cause::ReceiverCpuBound, Truth::ListenerDrops),
            ..base
        },
        // The reference sender as fast as it goes (~200k pps here) into a relay that writes
        // each packet to lo three times through a 20 Mbit/s tbf (~24k frames/s, 8k packets/s
        // relayed): the outputs refuse most writes, the pool runs out, and the relay drops.
        Scenario::Relay => Staging {
            rate: 0.0,
            sink: false,
            listener: Some(Listener {
                relay: Some(super::reference::RELAY),
                ..Listener::PLAIN
            }),
            expect: expect(Kind::Loss, Cause::RelayEgressBound, Truth::RelayLoss),
            ..base
        },
        // 2 workers (--workers sets it), each fed 5,000 pps from a source port of its own: each
        // keeps up.
        Scenario::ReceiverWorkers => Staging {
            rate: 5_000.0,
            sink: false,
            flags: &["--pacer", "sleep"],
            listener: Some(Listener {
                workers: super::reference::RECEIVER_WORKERS,
                ..Listener::PLAIN
            }),
            expect: expect(Kind::Loss, Cause::ReceiverKeepsUp, Truth::ListenerDrops),
            ..base
        },
        // 2,000 pps into an 8-frame ring read at 200 frames/s: ~90% of the frames find it full.
        Scenario::RingFull => Staging {
            rate: 2_000.0,
            sink: false,
            listener: Some(Listener {
                ring: Some(super::reference::RING),
                ..Listener::PLAIN
            }),
            expect: expect(Kind::Loss, Cause::RingFull, Truth::RingDrops),
            ..base
        },
        _ => base,
    }
}

impl Staging {
    /// The staging with its receiver's worker threads set to `workers` (`lab --workers`), which
    /// only the receiver-workers scenario takes.
    pub fn with_workers(mut self, scenario: Scenario, workers: Option<usize>) -> anyhow::Result<Staging> {
        let Some(n) = workers else {
            return Ok(self);
        };
        match self.listener.as_mut() {
            Some(l) if scenario == Scenario::ReceiverWorkers => l.workers = n,
            _ => anyhow::bail!(
                "--workers sets the worker threads of the receiver-workers scenario's receiver: \
                 give it with `scanprof lab receiver-workers`, or leave it out"
            ),
        }
        Ok(self)
    }
}

/// The family of the never-started scenario: a shell that forks two children which exit with
/// status 3 (after 0.5 s) and 4 (after 1 s) without sending anything, waits for them, and exits
/// with status 1, as a scanner whose workers fail at start-up.
pub const NEVER_STARTED_SCRIPT: &str =
    "worker() { sleep \"$1\"; exit \"$2\"; }; worker 0.5 3 & worker 1 4 & wait; exit 1";

/// `ip netns exec SENDER sh -c NEVER_STARTED_SCRIPT scanner`: in the sender namespace, bounded
/// by the script itself (about 1 s), sending nothing.
pub fn never_started_argv(lab: &Lab) -> Vec<String> {
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
pub const CONNECT_SCAN_PROFILE: &str = "nmap";

/// `nmap -sT -n -Pn --disable-arp-ping --max-retries 0 --min-rate R --max-rate R -p1-N TARGET`
/// with N = rate x duration (at most 65535): one connect(2) per port of the target, whose
/// closed ports answer each SYN with a RST; no host discovery, no ARP, no retry.
pub fn connect_argv(lab: &Lab, rate: f64, duration_s: f64) -> Vec<String> {
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

/// The target namespace's ICMP settings for a UDP scan (`sysctl -w` inside it): an error to one
/// host at most once per 1000 ms after a burst (the kernel's default, whatever the host's), for
/// destination unreachable among others (the default mask).
pub const UDP_SCAN_ICMP: [&str; 2] = ["net.ipv4.icmp_ratelimit=1000", "net.ipv4.icmp_ratemask=6168"];

/// The name a scenario has on the command line (`qdisc-drop`).
pub fn scenario_name(s: Scenario) -> String {
    s.to_possible_value()
        .map_or_else(|| format!("{s:?}"), |v| v.get_name().to_string())
}

/// An address of the lab subnet that no host has (the lab pins its two hosts' neighbours).
pub fn unanswered_address(lab: &Lab) -> std::net::Ipv4Addr {
    let [a, b, c, _] = lab.target_addr.octets();
    std::net::Ipv4Addr::new(a, b, c, 77)
}

#[cfg(test)]
mod tests {
    use super::*;
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
        // miscalibrated slot of a 4 s run and of a 12-packet one) or by the receiver's workers
        // (a responder that keeps up, and a receiver of several workers that does).
        let mut causes: Vec<String> = Scenario::value_variants()
            .iter()
            .map(|s| staging(*s))
            .filter(|s| s.expect.cause != Expected::Cause(Cause::NoGap) && s.expect.cause != Expected::NoLoss)
            .map(|s| {
                let workers = s.listener.map_or(1, |l| l.workers);
                format!("{} ({:?}, {workers} worker(s))", s.expect.cause, s.expect.truth)
            })
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

    /// Each scenario but the healthy one is staged by the group it is dispatched to: one
    /// dispatched to a group without its arm would run as the healthy run.
    #[test]
    fn every_scenario_is_staged_by_its_group() {
        let healthy = format!("{:?}", healthy());
        assert_eq!(format!("{:?}", staging(Scenario::Healthy)), healthy);
        for s in Scenario::value_variants()
            .iter()
            .filter(|s| **s != Scenario::Healthy)
        {
            assert_ne!(
                format!("{:?}", staging(*s)),
                healthy,
                "{s:?} is staged as the healthy run"
            );
        }
    }

    #[test]
    fn only_the_receiver_workers_scenario_takes_a_worker_count() {
        let workers = |s: Scenario, n| {
            staging(s)
                .with_workers(s, n)
                .map(|st| st.listener.map(|l| l.workers))
        };
        assert_eq!(workers(Scenario::ReceiverWorkers, None).unwrap(), Some(2));
        assert_eq!(workers(Scenario::ReceiverWorkers, Some(4)).unwrap(), Some(4));
        assert_eq!(workers(Scenario::Healthy, None).unwrap(), None);
        for s in [Scenario::Healthy, Scenario::RcvbufOverflow] {
            let e = workers(s, Some(4)).unwrap_err().to_string();
            assert!(e.contains("scanprof lab receiver-workers"), "{e}");
        }
    }
}
