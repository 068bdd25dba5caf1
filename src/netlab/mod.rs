//! A private network lab: two fresh network namespaces (sender and target) joined by a veth
//! pair, optionally shaped by tbf on the sender side. Tests and experiments send reference
//! traffic through it and compare the profiler against a sink and the kernel's own counters;
//! nothing in the root namespace is touched, and everything is deleted again on drop.

use std::fs::File;
use std::io::{ErrorKind, IoSliceMut};
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use nix::sched::{setns, CloneFlags};
use nix::sys::socket::{recvmsg, setsockopt, sockopt, ControlMessageOwned, MsgFlags};
use nix::sys::time::TimeSpec;
use nix::time::{clock_gettime, ClockId};
use serde::Serialize;

use crate::system::monotonic_ns;
use crate::system::netstat::{self, LinkStats, QdiscStats};

/// Labs created so far by this process; numbers them so their names differ.
static LABS_CREATED: AtomicU32 = AtomicU32::new(0);
/// Where `ip netns add` leaves its namespace handles.
const NETNS_DIR: &str = "/run/netns";
/// Longest network device name (IFNAMSIZ less the terminating NUL).
const MAX_IFNAME: usize = 15;
const SENDER: Endpoint = Endpoint {
    addr: Ipv4Addr::new(10, 99, 0, 1),
    mac: "02:99:00:00:00:01",
};
const TARGET: Endpoint = Endpoint {
    addr: Ipv4Addr::new(10, 99, 0, 2),
    mac: "02:99:00:00:00:02",
};
/// Receive buffer the sink asks for, in bytes.
const SINK_RCVBUF: usize = 8 << 20;
/// How long the sink blocks in recv before looking at its stop flag.
const SINK_POLL: Duration = Duration::from_millis(50);

/// One end of the veth pair. The MACs are fixed so that both ends get permanent neighbour
/// entries and no ARP runs in the lab.
struct Endpoint {
    addr: Ipv4Addr,
    mac: &'static str,
}

/// A token bucket filter for the sender's veth: `tc qdisc add dev X root tbf rate R burst B limit L`.
#[derive(Debug)]
pub struct TbfConfig {
    /// tc rate, e.g. "1mbit"
    pub rate: String,
    /// tc bucket size, e.g. "4kb"
    pub burst: String,
    /// tc queue limit, e.g. "8kb"
    pub limit: String,
}

/// How to build a lab; the default is an unshaped veth pair.
#[derive(Default)]
pub struct LabConfig {
    pub tbf: Option<TbfConfig>,
}

/// Two namespaces joined by a veth pair, 10.99.0.1/24 (sender) to 10.99.0.2/24 (target).
/// IPv6 is off and neighbours are static, so the only traffic is what the user sends.
pub struct Lab {
    pub sender_ns: String,
    pub target_ns: String,
    /// veth end in the sender namespace
    pub sender_dev: String,
    /// veth end in the target namespace
    pub target_dev: String,
    pub sender_addr: Ipv4Addr,
    pub target_addr: Ipv4Addr,
    /// namespaces created and not yet deleted
    live_namespaces: Vec<String>,
    /// deletes the namespaces if scanprof dies before it does ([`Lab::create_watched`])
    watchdog: Option<crate::system::watchdog::Watchdog>,
}

/// One end of the lab.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Sender,
    Target,
}

/// A UDP receiver in the target namespace, counting datagrams on its own thread until stopped.
pub struct UdpSink {
    stop: Arc<AtomicBool>,
    packets: Arc<AtomicU64>,
    /// None once joined
    thread: Option<JoinHandle<SinkReport>>,
}

/// What a [`UdpSink`] received.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SinkReport {
    pub packets: u64,
    /// UDP payload bytes
    pub bytes: u64,
    /// CLOCK_MONOTONIC ns at which the kernel received the first datagram (0 if none)
    pub first_ns: u64,
    /// CLOCK_MONOTONIC ns at which the kernel received the last datagram (0 if none)
    pub last_ns: u64,
    /// datagrams that came without a kernel timestamp, timed when read instead (none expected)
    pub untimed: u64,
    /// datagrams the kernel dropped at the sink's socket (its receive buffer full: the sink fell
    /// behind), read when it stopped; sent = `packets` + `dropped` when nothing else lost any
    pub dropped: u64,
    /// CLOCK_MONOTONIC ns at which the kernel received each datagram, in ascending order, for a
    /// sink asked to keep them ([`Lab::udp_sink_keeping_arrivals`]); empty otherwise
    #[serde(skip)]
    pub arrivals: Vec<u64>,
}

impl Lab {
    /// Creates both namespaces and the veth pair, addresses them and brings everything up, then
    /// adds the tbf if asked. On failure whatever was made is deleted again, and the error names
    /// the failing command and its stderr.
    pub fn create(cfg: &LabConfig) -> Result<Lab> {
        Lab::create_with(cfg, None)
    }

    /// [`Lab::create`], with a watchdog (`scanprof watchdog --namespaces`, src/system/watchdog.rs)
    /// told each namespace before it is made: if scanprof dies (SIGKILL) before it deletes them,
    /// the watchdog does. For the scanprof binary only (`lab`, `sweep`): the watchdog is this
    /// same executable. Without a watchdog (it could not start) a warning says so and the lab
    /// goes on; the next `lab` removes what a killed one left.
    pub fn create_watched(cfg: &LabConfig) -> Result<Lab> {
        let watchdog = match crate::system::watchdog::Watchdog::start_for_namespaces() {
            Ok(w) => Some(w),
            Err(e) => {
                eprintln!(
                    "scanprof: warning: no watchdog for the lab's namespaces ({e}): if scanprof is killed, they stay until the next `scanprof lab`"
                );
                None
            }
        };
        Lab::create_with(cfg, watchdog)
    }

    fn create_with(cfg: &LabConfig, watchdog: Option<crate::system::watchdog::Watchdog>) -> Result<Lab> {
        use crate::system::caps::{self, CAP_NET_ADMIN, CAP_SYS_ADMIN};
        let missing = caps::missing(&[CAP_SYS_ADMIN, CAP_NET_ADMIN]);
        ensure!(
            missing.is_empty(),
            "a private lab needs root: it creates network namespaces, a veth pair and qdiscs \
             (missing {}). Run scanprof with sudo",
            caps::names(&missing)
        );
        let pid = std::process::id();
        let n = LABS_CREATED.fetch_add(1, Ordering::Relaxed);
        let mut lab = Lab {
            sender_ns: format!("sp{pid}-{n}s"),
            target_ns: format!("sp{pid}-{n}t"),
            sender_dev: format!("spv{pid}-{n}s"),
            target_dev: format!("spv{pid}-{n}t"),
            sender_addr: SENDER.addr,
            target_addr: TARGET.addr,
            live_namespaces: Vec::new(),
            watchdog,
        };
        ensure!(
            lab.sender_dev.len() <= MAX_IFNAME,
            "device name {} is longer than {MAX_IFNAME} bytes",
            lab.sender_dev
        );
        // From here on, an early return drops `lab`, which deletes what exists so far.
        let (sender_ns, target_ns) = (lab.sender_ns.clone(), lab.target_ns.clone());
        for ns in [&sender_ns, &target_ns] {
            // Told first: scanprof killed while `ip netns add` runs leaves nothing either.
            if let Some(w) = lab.watchdog.as_mut() {
                w.watch_namespace(ns);
            }
            netstat::run_in_netns(None, "ip", &["netns", "add", ns])?;
            lab.live_namespaces.push(ns.clone());
            // Before the veth exists, so it never gets an IPv6 address (no DAD, RS or MLD).
            netstat::run_in_netns(
                Some(ns),
                "sysctl",
                &[
                    "-qw",
                    "net.ipv6.conf.all.disable_ipv6=1",
                    "net.ipv6.conf.default.disable_ipv6=1",
                ],
            )?;
        }
        #[rustfmt::skip]
        netstat::run_in_netns(None, "ip", &[
            "link", "add", &lab.sender_dev, "netns", &sender_ns, "address", SENDER.mac,
            "type", "veth", "peer", "name", &lab.target_dev, "netns", &target_ns, "address", TARGET.mac,
        ])?;
        address_side(&sender_ns, &lab.sender_dev, &SENDER, &TARGET)?;
        address_side(&target_ns, &lab.target_dev, &TARGET, &SENDER)?;
        if let Some(tbf) = &cfg.tbf {
            #[rustfmt::skip]
            netstat::run_in_netns(Some(&sender_ns), "tc", &[
                "qdisc", "add", "dev", &lab.sender_dev, "root", "tbf",
                "rate", &tbf.rate, "burst", &tbf.burst, "limit", &tbf.limit,
            ])?;
        }
        Ok(lab)
    }

    /// A Command that runs `program args` inside the sender namespace (via `ip netns exec <ns> program args...`).
    pub fn command_in_sender(&self, program: &str, args: &[String]) -> Command {
        command_in(&self.sender_ns, program, args)
    }

    /// A Command that runs `program args` inside the target namespace (via `ip netns exec <ns> program args...`).
    pub fn command_in_target(&self, program: &str, args: &[String]) -> Command {
        command_in(&self.target_ns, program, args)
    }

    /// Runs `f` on a new thread that has joined the target namespace (setns on that thread
    /// only) and returns its result; a panic in `f` is passed on to the caller.
    pub fn in_target<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> Result<T> {
        run_in_namespace(&self.target_ns, f)
    }

    /// Runs `f` on a new thread that has joined the sender namespace (setns on that thread
    /// only) and returns its result; a panic in `f` is passed on to the caller.
    pub fn in_sender<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> Result<T> {
        run_in_namespace(&self.sender_ns, f)
    }

    /// Starts a UDP receiver on target_addr:`port`. The socket is created on a thread that joined
    /// the target namespace and gets an 8 MiB receive buffer (SO_RCVBUFFORCE, else SO_RCVBUF as
    /// far as rmem_max allows); a separate thread counts datagrams until [`UdpSink::stop`].
    ///
    /// Each datagram is timed by the kernel as it arrives (SO_TIMESTAMPNS), not when the
    /// counting thread gets to it, so a receiver that is scheduled late on a busy machine still
    /// measures the rate at which the packets came.
    pub fn udp_sink(&self, port: u16) -> Result<UdpSink> {
        self.start_sink(port, false)
    }

    /// [`Lab::udp_sink`] that also keeps every datagram's arrival time
    /// ([`SinkReport::arrivals`]), so that a rate can be taken over any run of the packets, such as
    /// the ones a profiler counted (8 bytes a datagram: for counts of thousands, not millions).
    pub fn udp_sink_keeping_arrivals(&self, port: u16) -> Result<UdpSink> {
        self.start_sink(port, true)
    }

    fn start_sink(&self, port: u16, keep_arrivals: bool) -> Result<UdpSink> {
        let addr = SocketAddrV4::new(self.target_addr, port);
        let socket = self.in_target(move || -> Result<UdpSocket> {
            let socket = UdpSocket::bind(addr).with_context(|| format!("cannot bind {addr}"))?;
            setsockopt(&socket, sockopt::RcvBufForce, &SINK_RCVBUF)
                .or_else(|_| setsockopt(&socket, sockopt::RcvBuf, &SINK_RCVBUF))
                .context("cannot size the sink's receive buffer")?;
            setsockopt(&socket, sockopt::ReceiveTimestampns, &true)
                .context("cannot ask for receive timestamps (SO_TIMESTAMPNS)")?;
            socket.set_read_timeout(Some(SINK_POLL))?;
            Ok(socket)
        })??;
        let stop = Arc::new(AtomicBool::new(false));
        let packets = Arc::new(AtomicU64::new(0));
        let thread = std::thread::Builder::new()
            .name(format!("sink-{port}"))
            .spawn({
                let (stop, packets) = (Arc::clone(&stop), Arc::clone(&packets));
                move || {
                    // Counting what a bound socket receives needs no privilege.
                    let _ = crate::system::privileges::drop_to(&[]);
                    count_datagrams(&socket, &stop, &packets, keep_arrivals)
                }
            })
            .context("cannot start the sink thread")?;
        Ok(UdpSink {
            stop,
            packets,
            thread: Some(thread),
        })
    }

    /// The qdiscs of the sender's veth (`tc -s -j qdisc show dev sender_dev`, in the sender namespace).
    pub fn sender_qdisc(&self) -> Result<Vec<QdiscStats>> {
        netstat::qdisc_stats(Some(&self.sender_ns), &self.sender_dev)
    }

    /// Counters of one veth end (`ip -s -j link show dev X`, in that end's namespace).
    pub fn link(&self, side: Side) -> Result<LinkStats> {
        match side {
            Side::Sender => netstat::link_stats(Some(&self.sender_ns), &self.sender_dev),
            Side::Target => netstat::link_stats(Some(&self.target_ns), &self.target_dev),
        }
    }

    /// Deletes both namespaces (and with them the veth pair), reporting what could not be deleted.
    pub fn destroy(mut self) -> Result<()> {
        self.delete_namespaces()
    }

    fn delete_namespaces(&mut self) -> Result<()> {
        let failures: Vec<String> = self
            .live_namespaces
            .drain(..)
            .filter_map(|ns| netstat::run_in_netns(None, "ip", &["netns", "delete", &ns]).err())
            .map(|err| format!("{err:#}"))
            .collect();
        // Deleted here (or reported): the watchdog has nothing left to do.
        if let Some(w) = self.watchdog.take() {
            w.done();
        }
        ensure!(
            failures.is_empty(),
            "lab teardown incomplete: {}",
            failures.join("; ")
        );
        Ok(())
    }
}

impl Drop for Lab {
    /// Best-effort teardown; [`Lab::destroy`] is the one that reports errors.
    fn drop(&mut self) {
        let _ = self.delete_namespaces();
    }
}

impl UdpSink {
    /// Datagrams received so far.
    pub fn packets_so_far(&self) -> u64 {
        self.packets.load(Ordering::Relaxed)
    }

    /// Stops counting at the first 50 ms lull after this call (so datagrams already queued are
    /// counted) and returns the totals.
    pub fn stop(mut self) -> SinkReport {
        match self.finish() {
            Some(Ok(report)) => report,
            Some(Err(panic)) => std::panic::resume_unwind(panic),
            None => SinkReport::default(),
        }
    }

    /// Asks the thread to stop and joins it; None if that was done before.
    fn finish(&mut self) -> Option<std::thread::Result<SinkReport>> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().map(JoinHandle::join)
    }
}

impl Drop for UdpSink {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}

impl SinkReport {
    /// packets per second between the first and the last datagram: (packets-1)/(last-first);
    /// None if fewer than 2 packets arrived
    pub fn pps(&self) -> Option<f64> {
        let span_ns = self.last_ns.checked_sub(self.first_ns)?;
        (self.packets >= 2 && span_ns > 0).then(|| (self.packets - 1) as f64 * 1e9 / span_ns as f64)
    }

    /// packets per second over the last `n` datagrams received, (n-1)/(last-first) of their
    /// arrival times, for a sink that kept them; None if it kept fewer than `n`, or `n` < 2
    pub fn pps_of_last(&self, n: u64) -> Option<f64> {
        let from = self.arrivals.len().checked_sub(usize::try_from(n).ok()?)?;
        self.pps_of_run(from, n)
    }

    /// packets per second over the `n` datagrams from the first that arrived at or after
    /// `from_ns` (CLOCK_MONOTONIC), (n-1)/(last-first) of their arrival times, for a sink that
    /// kept them; None if fewer than `n` arrived from then on, or `n` < 2
    pub fn pps_from(&self, from_ns: u64, n: u64) -> Option<f64> {
        self.pps_of_run(self.arrivals.partition_point(|&t| t < from_ns), n)
    }

    /// The rate over `n` kept arrivals from index `from`.
    fn pps_of_run(&self, from: usize, n: u64) -> Option<f64> {
        let n = usize::try_from(n).ok().filter(|&n| n >= 2)?;
        let run = self.arrivals.get(from..from.checked_add(n)?)?;
        let span_ns = run.last()?.checked_sub(run[0]).filter(|&s| s > 0)?;
        Some((n - 1) as f64 * 1e9 / span_ns as f64)
    }
}

/// Namespaces of this process's labs that still exist: the `ip netns list` entries (files in
/// /run/netns) starting with `sp{pid}-`. An unreadable or missing /run/netns counts as none.
pub fn leftover_namespaces() -> Vec<String> {
    let prefix = format!("sp{}-", std::process::id());
    let Ok(entries) = std::fs::read_dir(NETNS_DIR) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter(|name| name.starts_with(&prefix))
        .collect();
    names.sort();
    names
}

/// Whether the calling thread is in a namespace some [`Lab`] created (of any process): its
/// network namespace is one of the /run/netns entries named `sp{pid}-...`.
pub fn thread_in_lab_namespace() -> Result<bool> {
    let netns_id = |path: &Path| std::fs::metadata(path).map(|m| (m.dev(), m.ino()));
    let own = netns_id(Path::new("/proc/thread-self/ns/net"))
        .context("cannot identify this thread's network namespace")?;
    let entries = match std::fs::read_dir(NETNS_DIR) {
        Ok(entries) => entries,
        Err(err) if err.kind() == ErrorKind::NotFound => return Ok(false),
        Err(err) => return Err(err).context(format!("cannot list {NETNS_DIR}")),
    };
    for entry in entries {
        let entry = entry.with_context(|| format!("cannot list {NETNS_DIR}"))?;
        // A namespace deleted since the listing no longer matters: skip it.
        if is_lab_name(&entry.file_name().to_string_lossy())
            && netns_id(&entry.path()).is_ok_and(|id| id == own)
        {
            return Ok(true);
        }
    }
    Ok(false)
}

/// The pid in a lab namespace name of exactly the form `sp{pid}-{n}s` or `sp{pid}-{n}t`
/// (nothing else a user or another tool might have named alike).
fn lab_name_pid(name: &str) -> Option<u32> {
    let (pid, rest) = name.strip_prefix("sp")?.split_once('-')?;
    let n = rest.strip_suffix('s').or_else(|| rest.strip_suffix('t'))?;
    let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    (digits(pid) && digits(n)).then(|| pid.parse().ok()).flatten()
}

/// Deletes the namespaces (and with them their veths) that labs of scanprof processes that
/// no longer exist left behind, e.g. a lab killed with SIGKILL. Only names of scanprof's own
/// pattern `sp{pid}-{n}{s|t}`, and only when no process `pid` exists (a live process, even an
/// unrelated one that reused the pid, keeps its namespaces). Returns the names deleted.
pub fn remove_dead_labs() -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(NETNS_DIR) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter(|name| {
            lab_name_pid(name)
                .is_some_and(|pid| pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists())
        })
        .collect();
    names.sort();
    names.retain(|ns| netstat::run_in_netns(None, "ip", &["netns", "delete", ns]).is_ok());
    names
}

/// Whether `name` has the form of a lab namespace name, `sp{pid}-{n}{s|t}`.
fn is_lab_name(name: &str) -> bool {
    name.strip_prefix("sp")
        .and_then(|rest| rest.split_once('-'))
        .is_some_and(|(pid, _)| pid.parse::<u32>().is_ok())
}

/// Addresses one veth end, brings it and lo up, and pins the peer's MAC (no ARP).
fn address_side(ns: &str, dev: &str, own: &Endpoint, peer: &Endpoint) -> Result<()> {
    let (addr, peer_addr) = (format!("{}/24", own.addr), peer.addr.to_string());
    #[rustfmt::skip]
    let steps: [&[&str]; 4] = [
        &["addr", "add", &addr, "dev", dev],
        &["link", "set", "lo", "up"],
        &["link", "set", dev, "up"],
        &["neigh", "add", &peer_addr, "lladdr", peer.mac, "dev", dev, "nud", "permanent"],
    ];
    for args in steps {
        netstat::run_in_netns(Some(ns), "ip", args)?;
    }
    Ok(())
}

fn command_in(ns: &str, program: &str, args: &[String]) -> Command {
    let mut command = Command::new("ip");
    command.args(["netns", "exec", ns, program]).args(args);
    command
}

fn run_in_namespace<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> Result<T> {
    let path = format!("{NETNS_DIR}/{ns}");
    let netns = File::open(&path).with_context(|| format!("cannot open {path}"))?;
    let thread = std::thread::Builder::new()
        .spawn(move || -> Result<T> {
            setns(&netns, CloneFlags::CLONE_NEWNET)?;
            Ok(f())
        })
        .context("cannot start a thread")?;
    match thread.join() {
        Ok(result) => result.with_context(|| format!("cannot join network namespace {ns}")),
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// The sink loop: counts datagrams (and keeps their arrival times if asked) until `stop` is set
/// and a receive times out.
fn count_datagrams(
    socket: &UdpSocket,
    stop: &AtomicBool,
    packets: &AtomicU64,
    keep_arrivals: bool,
) -> SinkReport {
    let mut report = SinkReport::default();
    let mut buf = vec![0u8; 65_536];
    let mut cmsg = nix::cmsg_space!(TimeSpec);
    let clocks = RealtimeToMonotonic::now();
    loop {
        let mut iov = [IoSliceMut::new(&mut buf)];
        let received =
            recvmsg::<()>(socket.as_raw_fd(), &mut iov, Some(&mut cmsg), MsgFlags::empty()).map(|msg| {
                let kernel_ns = msg.cmsgs().ok().into_iter().flatten().find_map(|c| match c {
                    ControlMessageOwned::ScmTimestampns(ts) => Some(clocks.convert(ts)),
                    _ => None,
                });
                (msg.bytes, kernel_ns)
            });
        match received {
            Ok((len, kernel_ns)) => {
                // Without a timestamp (not seen on Linux) the moment of reading stands in.
                let at = kernel_ns.unwrap_or_else(|| {
                    report.untimed += 1;
                    monotonic_ns()
                });
                report.first_ns = if report.packets == 0 {
                    at
                } else {
                    report.first_ns.min(at)
                };
                report.last_ns = report.last_ns.max(at);
                if keep_arrivals {
                    report.arrivals.push(at);
                }
                report.packets += 1;
                report.bytes += len as u64;
                packets.store(report.packets, Ordering::Relaxed);
            }
            // A timeout (or EINTR): nothing is queued, so this is the moment to stop if asked.
            Err(_) if stop.load(Ordering::Relaxed) => {
                report.arrivals.sort_unstable();
                // Nothing is queued: every datagram that reached the socket was read or dropped.
                report.dropped = crate::system::socket_drops(socket).unwrap_or(0);
                return report;
            }
            Err(_) => {}
        }
    }
}

/// Converts the kernel's CLOCK_REALTIME receive timestamps to CLOCK_MONOTONIC, with the offset
/// between the two clocks read once, when the sink starts (a sink lives seconds, in which the
/// offset moves by microseconds at most).
struct RealtimeToMonotonic {
    offset_ns: i128,
}

impl RealtimeToMonotonic {
    fn now() -> Self {
        let realtime = clock_gettime(ClockId::CLOCK_REALTIME).map_or(0, |t| timespec_ns(&t));
        RealtimeToMonotonic {
            offset_ns: realtime - i128::from(monotonic_ns()),
        }
    }

    fn convert(&self, realtime: TimeSpec) -> u64 {
        u64::try_from(timespec_ns(&realtime) - self.offset_ns).unwrap_or(0)
    }
}

fn timespec_ns(t: &TimeSpec) -> i128 {
    i128::from(t.tv_sec()) * 1_000_000_000 + i128::from(t.tv_nsec())
}

/// These need root (CI runs them as root). A lab that cannot be created fails the test.
#[cfg(test)]
mod tests {
    use std::sync::{Mutex, MutexGuard, PoisonError};
    use std::time::Instant;

    use super::*;
    use crate::senders::udp::{self, SendMethod, UdpSendConfig};

    /// Lab tests run one at a time: they measure rates on a small machine, and each checks that
    /// no lab namespace of this process is left afterwards.
    static ONE_LAB_AT_A_TIME: Mutex<()> = Mutex::new(());

    fn one_lab_at_a_time() -> MutexGuard<'static, ()> {
        ONE_LAB_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn send_config(lab: &Lab, port: u16, rate: f64, count: u64, size: usize) -> UdpSendConfig {
        UdpSendConfig {
            to: SocketAddrV4::new(lab.target_addr, port),
            rate,
            count: Some(count),
            duration: Some(Duration::from_secs(5)),
            size,
            sndbuf: None,
            method: SendMethod::Sendto,
            src_port: 0,
        }
    }

    fn assert_within_1_percent(what: &str, pps: f64, expected: f64) {
        let error = (pps - expected).abs() / expected;
        assert!(
            error < 0.01,
            "{what}: {pps:.1} pps is {:.2}% off {expected}",
            error * 100.0
        );
    }

    #[test]
    fn the_rate_of_the_last_packets_is_taken_over_their_own_arrivals() {
        // Two packets 1 ms apart, then five 0.1 ms apart: the last five came at 10,000 pps.
        let r = SinkReport {
            packets: 7,
            first_ns: 0,
            last_ns: 2_400_000,
            arrivals: vec![
                0, 1_000_000, 2_000_000, 2_100_000, 2_200_000, 2_300_000, 2_400_000,
            ],
            ..SinkReport::default()
        };
        assert_eq!(r.pps_of_last(5), Some(10_000.0));
        assert_eq!(r.pps_of_last(7), r.pps(), "all of them: the whole run's rate");
        assert_eq!(r.pps_of_last(8), None, "more than it kept");
        assert_eq!(r.pps_of_last(1), None, "one packet has no rate");
        // From the first arrival at or after 1.5 ms: the five at 0.1 ms.
        assert_eq!(r.pps_from(1_500_000, 5), Some(10_000.0));
        assert_eq!(
            r.pps_from(2_000_000, 5),
            Some(10_000.0),
            "an arrival at the time counts"
        );
        assert_eq!(r.pps_from(0, 2), Some(1_000.0));
        assert_eq!(r.pps_from(1_500_000, 6), None, "only five arrived from then on");
    }

    #[test]
    fn paced_udp_arrives_complete_at_the_requested_rate() -> Result<()> {
        let _serial = one_lab_at_a_time();
        let lab = Lab::create(&LabConfig::default())?;
        let sink = lab.udp_sink(9000)?;
        let cfg = send_config(&lab, 9000, 2000.0, 2000, 64);
        let sent = lab.in_sender(move || udp::run(&cfg, &AtomicBool::new(false)))??;
        let received = sink.stop();

        assert_eq!((sent.sent, sent.failed), (2000, 0), "{sent:?}");
        assert_eq!(received.packets, 2000, "{received:?}");
        // Every datagram was timed by the kernel as it arrived.
        assert_eq!(received.untimed, 0, "{received:?}");
        assert!(
            received.first_ns > 0 && received.last_ns > received.first_ns,
            "{received:?}"
        );
        assert_within_1_percent("sender", sent.achieved_pps, 2000.0);
        assert_within_1_percent("sink", received.pps().unwrap_or(0.0), 2000.0);
        // The lab is quiet (no ARP, no IPv6): the target's veth saw exactly our packets.
        assert_eq!(lab.link(Side::Target)?.rx_packets, 2000);

        drop(lab);
        assert_eq!(leftover_namespaces(), Vec::<String>::new());
        Ok(())
    }

    /// Observed (kernel 6.18): tbf 1mbit/4kb/8kb passes ~5 packets at once, queues ~7 and drops
    /// the other ~2988 of 3000. UDP ignores the qdisc's drop verdict, so the sender sees every
    /// packet accepted and is not slowed down: the loss shows only in tc's counters.
    #[test]
    fn tbf_drops_are_invisible_to_the_sender_but_counted_by_tc() -> Result<()> {
        let _serial = one_lab_at_a_time();
        let tbf = TbfConfig {
            rate: "1mbit".into(),
            burst: "4kb".into(),
            limit: "8kb".into(),
        };
        let lab = Lab::create(&LabConfig { tbf: Some(tbf) })?;
        let sink = lab.udp_sink(9000)?;
        let cfg = send_config(&lab, 9000, 0.0, 3000, 1000);
        let sent = lab.in_sender(move || udp::run(&cfg, &AtomicBool::new(false)))??;
        // Let the tbf drain its queue (8 kB at 1 Mbit/s takes ~65 ms).
        let patience = Instant::now() + Duration::from_secs(2);
        let tbf = loop {
            let qdiscs = lab.sender_qdisc()?;
            let root = qdiscs.into_iter().next().context("no qdisc on the sender veth")?;
            if root.qlen == 0 || Instant::now() > patience {
                break root;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let received = sink.stop();

        assert_eq!((sent.sent, sent.failed), (3000, 0), "{sent:?}");
        assert!(
            sent.elapsed_ns < 1_000_000_000,
            "the sender was held back: {sent:?}"
        );
        assert_eq!(tbf.kind, "tbf");
        assert_eq!(tbf.qlen, 0, "tbf still queued packets: {tbf:?}");
        assert!(tbf.drops > 2900, "{tbf:?}");
        assert_eq!(tbf.sent_packets, received.packets, "{tbf:?} {received:?}");
        assert_eq!(tbf.drops + received.packets, sent.sent, "{tbf:?} {received:?}");
        Ok(())
    }

    #[test]
    fn a_failed_create_names_the_command_and_leaves_nothing() {
        let _serial = one_lab_at_a_time();
        let tbf = TbfConfig {
            rate: "fast".into(),
            burst: "4kb".into(),
            limit: "8kb".into(),
        };
        let Err(err) = Lab::create(&LabConfig { tbf: Some(tbf) }) else {
            panic!("a tbf with rate \"fast\" was accepted");
        };
        let message = format!("{err:#}");
        assert!(
            message.contains("tc qdisc add") && message.contains("rate fast"),
            "{message}"
        );
        assert_eq!(leftover_namespaces(), Vec::<String>::new());
    }

    #[test]
    fn each_side_sees_only_its_own_namespace() -> Result<()> {
        let _serial = one_lab_at_a_time();
        let lab = Lab::create(&LabConfig::default())?;
        let args = ["-br".to_string(), "addr".to_string()];
        let out = lab.command_in_target("ip", &args).output()?;
        let addrs = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{out:?}");
        assert!(
            addrs.contains(&lab.target_dev) && addrs.contains("10.99.0.2/24"),
            "{addrs}"
        );
        assert!(!addrs.contains(&lab.sender_dev), "{addrs}");
        assert_eq!(addrs.lines().count(), 2, "only lo and the veth: {addrs}");

        assert!(!thread_in_lab_namespace()?);
        assert!(lab.in_sender(thread_in_lab_namespace)??);
        let sender_addr = lab.sender_addr;
        let bound = lab.in_sender(move || UdpSocket::bind((sender_addr, 0)).is_ok())?;
        assert!(bound, "the sender address is not local in the sender namespace");
        lab.destroy()?;
        assert_eq!(leftover_namespaces(), Vec::<String>::new());
        Ok(())
    }

    #[test]
    fn only_scanprofs_own_lab_names_are_taken_for_leftovers() {
        assert_eq!(lab_name_pid("sp1234-0s"), Some(1234));
        assert_eq!(lab_name_pid("sp1234-12t"), Some(1234));
        for other in [
            "sp1234-0",
            "sp-0s",
            "spx-0s",
            "sp1234-0x",
            "spv1234-0s",
            "sp12a-0s",
            "sp1234-s",
            "myns",
            "sp1234-0s-extra",
        ] {
            assert_eq!(lab_name_pid(other), None, "{other}");
        }
    }
}
