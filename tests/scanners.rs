//! Debian's scanners under `scanprof run`: masscan, zmap, nmap and hping3, each at two requested
//! rates, sending from the sender namespace of a private lab (`scanprof::netlab::Lab`) to its target
//! namespace. Every figure is checked against an independent count: a packet socket on the
//! sender's veth (outgoing frames, kernel timestamps) and the veth's own `tx_packets`. What
//! scanprof must get right: the packets and the achieved rate over the send window, the profile,
//! the requested rate read from the scanner's command line by its own semantics (zmap's `-r`
//! times `-P`, nmap's `--max-rate` a cap, hping3's `-i uN` a period), and the profile's uprobes:
//! the ones whose symbols are in the stripped binary's `.dynsym` attach and fire (the per-packet
//! ones with `--per-packet`), and every attached probe fires. Command lines, figures and quirks:
//! docs/scanners-lab.md.
//!
//! Root only (BPF, namespaces) and the four Debian packages (scripts/setup installs them); they
//! fail, never skip, without them. Traffic goes only to the lab's target namespace (zmap's
//! targets are addresses that namespace owns); every scan is bounded in packets (a fixed port or
//! target list, `-c`) and in time (`--duration`, the test's timeout). The namespaces go with the
//! lab, also when a test fails.
//!
//! `SCANPROF_SCANNERS_LAB_ONLY=1` runs the scanners without scanprof and checks only the lab's
//! counts: the way to re-measure the figures in docs/scanners-lab.md.
//!
//! Run: `cargo test --test it scanners:: -- --skip modern_scanners::` (a filter is a substring)

use crate::common;

use std::collections::BTreeMap;
use std::io;
use std::mem::{size_of, size_of_val};
use std::net::{SocketAddrV4, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::Value;

use common::*;
use scanprof::analysis::StageName;
use scanprof::netlab::{Lab, LabConfig, Side, TbfConfig};

/// Longest a scan (with scanprof around it) may take before the test ends it.
const RUN_TIMEOUT: Duration = Duration::from_secs(25);
/// A port nobody listens on in the target namespace: SYNs get RSTs, UDP gets ICMP.
const CLOSED_PORT: u16 = 9;
/// Where masscan's wake-up datagrams go in the sender namespace (a socket takes them).
const NUDGE_PORT: u16 = 9999;
/// zmap's targets: 128 addresses the target namespace owns (local routes), all in the lab's /24.
const ZMAP_TARGETS: [&str; 2] = ["10.99.0.64/26", "10.99.0.128/26"];
const ZMAP_TARGET_COUNT: u64 = 128;
/// zmap's `--seed`: any fixed value makes its walk repeat (see [`zmap`]).
const ZMAP_SEED: &str = "29";

fn lab_only() -> bool {
    std::env::var_os("SCANPROF_SCANNERS_LAB_ONLY").is_some_and(|v| v != "0" && !v.is_empty())
}

fn strings(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

// ---- the lab ----------------------------------------------------------------------------------

/// A lab of this test, with the names to check for afterwards. Dropping it (a failing test)
/// ends whatever still runs in its sender namespace (by pid: only this test starts processes
/// there; masscan never ends on its own on a quiet link) and deletes the namespaces, and with
/// them the veth pair and every route added here.
struct ScanLab {
    /// None once destroyed
    lab: Option<Lab>,
    names: Vec<String>,
    /// inode of the sender namespace
    sender_netns: u64,
    /// MAC address of the target's veth end: the "router" masscan and zmap send to
    target_mac: String,
}

impl ScanLab {
    fn new() -> ScanLab {
        ScanLab::with(LabConfig::default())
    }

    fn with(config: LabConfig) -> ScanLab {
        let lab = Lab::create(&config).unwrap_or_else(|e| panic!("cannot create the namespace lab: {e:#}"));
        let names = vec![lab.sender_ns.clone(), lab.target_ns.clone()];
        let sender_netns = netns_inode(&lab.sender_ns) as u64;
        let out = lab
            .command_in_target("ip", &strings(&["-j", "link", "show", "dev", &lab.target_dev]))
            .output()
            .unwrap_or_else(|e| panic!("cannot run ip link: {e}"));
        assert!(out.status.success(), "ip link show failed: {out:?}");
        let links: Value = serde_json::from_slice(&out.stdout).expect("ip -j link printed no JSON");
        let target_mac = links[0]["address"]
            .as_str()
            .unwrap_or_else(|| panic!("no address in {links}"))
            .to_string();
        ScanLab {
            lab: Some(lab),
            names,
            sender_netns,
            target_mac,
        }
    }

    fn lab(&self) -> &Lab {
        self.lab.as_ref().expect("the lab was destroyed")
    }

    /// Makes the target namespace own `prefix` too (a local route), so that a scan of it only
    /// reaches hosts of this lab.
    fn own(&self, prefix: &str) {
        let args = strings(&["route", "add", "local", prefix, "dev", "lo"]);
        let out = self
            .lab()
            .command_in_target("ip", &args)
            .output()
            .unwrap_or_else(|e| panic!("cannot run ip route: {e}"));
        assert!(
            out.status.success(),
            "ip route add local {prefix} failed: {out:?}"
        );
    }

    fn tx_packets(&self) -> u64 {
        self.lab()
            .link(Side::Sender)
            .unwrap_or_else(|e| panic!("ip -s link of the sender veth failed: {e:#}"))
            .tx_packets
    }

    fn rx_packets(&self) -> u64 {
        self.lab()
            .link(Side::Sender)
            .unwrap_or_else(|e| panic!("ip -s link of the sender veth failed: {e:#}"))
            .rx_packets
    }

    fn target(&self) -> String {
        self.lab().target_addr.to_string()
    }

    /// Processes in the sender namespace: started by this test (through scanprof), since only
    /// this test knows the namespace.
    fn pids_inside(&self) -> Vec<i32> {
        let want = format!("net:[{}]", self.sender_netns);
        let Ok(procs) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        procs
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
            .filter(|pid| {
                std::fs::read_link(format!("/proc/{pid}/ns/net")).is_ok_and(|l| l.to_string_lossy() == want)
            })
            .collect()
    }

    fn destroy(mut self) {
        let left = self.pids_inside();
        assert!(
            left.is_empty(),
            "processes still run in the sender namespace: {left:?}"
        );
        let names = self.names.clone();
        self.lab
            .take()
            .unwrap()
            .destroy()
            .unwrap_or_else(|e| panic!("lab teardown failed: {e:#}"));
        assert_namespaces_gone(&names);
    }
}

impl Drop for ScanLab {
    fn drop(&mut self) {
        if self.lab.is_none() {
            return;
        }
        for pid in self.pids_inside() {
            let _ =
                nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
        }
        // Lab's own Drop deletes the namespaces.
    }
}

// ---- the independent count: a packet socket on the sender's veth -----------------------------

/// What the capture saw leave the sender's veth.
#[derive(Debug, Clone, Default)]
struct CaptureReport {
    /// outgoing frames
    packets: u64,
    /// kernel timestamps (CLOCK_REALTIME, ns) of the first and last frame
    first_ns: u64,
    last_ns: u64,
    /// the same from CLOCK_MONOTONIC when the capture thread read them
    user_first_ns: u64,
    user_last_ns: u64,
    /// frames by length
    sizes: BTreeMap<usize, u64>,
    /// every outgoing frame's kernel timestamp (CLOCK_REALTIME, ns), in order seen
    times: FrameTimes,
    /// frames that came in to the sender (replies), not counted in `packets`
    incoming: u64,
    /// of those, IPv4 TCP segments with RST or SYN+ACK set: the replies a SYN scan's listener
    /// (zmap's pcap filter) keeps
    incoming_tcp_replies: u64,
    /// frames the kernel dropped because the capture's buffer was full
    drops: u32,
}

/// Frame timestamps; shown by their count in a failure message, not one by one.
#[derive(Clone, Default)]
struct FrameTimes(Vec<u64>);

impl std::fmt::Debug for FrameTimes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "[{} timestamps]", self.0.len())
    }
}

impl CaptureReport {
    /// (packets - 1) / (last - first): the rate over the send window, as scanprof defines it
    fn pps(&self) -> f64 {
        let span = self.last_ns.saturating_sub(self.first_ns);
        assert!(
            self.packets >= 2 && span > 0,
            "the capture saw too few packets: {self:?}"
        );
        (self.packets - 1) as f64 * 1e9 / span as f64
    }

    fn span_s(&self) -> f64 {
        self.last_ns.saturating_sub(self.first_ns) as f64 / 1e9
    }
}

/// An AF_PACKET socket bound to the sender's veth in the sender namespace, counting outgoing
/// frames with their kernel timestamps on its own thread.
struct TxCapture {
    stop: Arc<AtomicBool>,
    seen: Arc<AtomicU64>,
    thread: Option<JoinHandle<CaptureReport>>,
}

impl TxCapture {
    fn start(lab: &Lab) -> TxCapture {
        let dev = lab.sender_dev.clone();
        let fd = lab
            .in_sender(move || packet_socket(&dev))
            .unwrap_or_else(|e| panic!("cannot enter the sender namespace: {e:#}"))
            .unwrap_or_else(|e| panic!("cannot open the capture socket: {e}"));
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(AtomicU64::new(0));
        let thread = std::thread::Builder::new()
            .name("tx-capture".into())
            .spawn({
                let (stop, seen) = (Arc::clone(&stop), Arc::clone(&seen));
                move || capture_loop(fd, &stop, &seen)
            })
            .expect("cannot start the capture thread");
        TxCapture {
            stop,
            seen,
            thread: Some(thread),
        }
    }

    fn packets_so_far(&self) -> u64 {
        self.seen.load(Ordering::Relaxed)
    }

    /// Stops at the first 50 ms lull and returns what was seen.
    fn stop(mut self) -> CaptureReport {
        std::thread::sleep(Duration::from_millis(100));
        self.stop.store(true, Ordering::Relaxed);
        match self.thread.take().unwrap().join() {
            Ok(r) => r,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }
}

impl Drop for TxCapture {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn set_int_opt(fd: RawFd, level: libc::c_int, name: libc::c_int, value: libc::c_int) -> io::Result<()> {
    let v = value;
    // SAFETY: a valid fd and a c_int of the size given.
    cvt(unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&v as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    })
    .map(|_| ())
}

/// The capture socket: every frame of `dev`, 16 MiB of buffer, kernel timestamps, 50 ms reads.
/// Call it on a thread in the sender namespace (the device index is looked up there).
fn packet_socket(dev: &str) -> io::Result<OwnedFd> {
    let proto = (libc::ETH_P_ALL as u16).to_be();
    // SAFETY: plain syscalls; the fd is owned from here on.
    let fd = unsafe {
        OwnedFd::from_raw_fd(cvt(libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            proto as libc::c_int,
        ))?)
    };
    let name = std::ffi::CString::new(dev).unwrap();
    // SAFETY: a NUL-terminated name.
    let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
    if ifindex == 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: sockaddr_ll is plain data.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = proto;
    sll.sll_ifindex = ifindex as i32;
    // SAFETY: a valid fd and a sockaddr_ll of the size given.
    cvt(unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&sll as *const libc::sockaddr_ll).cast(),
            size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    })?;
    let raw = fd.as_raw_fd();
    set_int_opt(raw, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, 16 << 20)
        .or_else(|_| set_int_opt(raw, libc::SOL_SOCKET, libc::SO_RCVBUF, 16 << 20))?;
    set_int_opt(raw, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1)?;
    let timeout = libc::timeval {
        tv_sec: 0,
        tv_usec: 50_000,
    };
    // SAFETY: a valid fd and a timeval.
    cvt(unsafe {
        libc::setsockopt(
            raw,
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&timeout as *const libc::timeval).cast(),
            size_of::<libc::timeval>() as libc::socklen_t,
        )
    })?;
    // Reset the drop counter (reading PACKET_STATISTICS clears it).
    let _ = packet_drops(raw);
    Ok(fd)
}

/// Frames the kernel dropped on this packet socket since the last call.
fn packet_drops(fd: RawFd) -> io::Result<u32> {
    // SAFETY: tpacket_stats is plain data.
    let mut st: libc::tpacket_stats = unsafe { std::mem::zeroed() };
    let mut len = size_of::<libc::tpacket_stats>() as libc::socklen_t;
    // SAFETY: a valid fd and a buffer of the size given.
    cvt(unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_PACKET,
            libc::PACKET_STATISTICS,
            (&mut st as *mut libc::tpacket_stats).cast(),
            &mut len,
        )
    })?;
    Ok(st.tp_drops)
}

/// Whether an Ethernet frame is an IPv4 TCP segment with RST, or SYN and ACK, set.
fn is_tcp_reply(frame: &[u8]) -> bool {
    let ip = 14;
    if frame.len() < ip + 20 || frame[12..14] != [0x08, 0x00] || frame[ip + 9] != 6 {
        return false;
    }
    let flags = ip + usize::from(frame[ip] & 0xf) * 4 + 13;
    frame
        .get(flags)
        .is_some_and(|f| f & 0x04 != 0 || f & 0x12 == 0x12)
}

fn capture_loop(fd: OwnedFd, stop: &AtomicBool, seen: &AtomicU64) -> CaptureReport {
    let mut report = CaptureReport::default();
    let mut buf = [0u8; 128];
    let mut control = [0u64; 16];
    loop {
        // SAFETY: plain data, filled in below.
        let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        // SAFETY: plain data, filled in below.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_name = (&mut addr as *mut libc::sockaddr_ll).cast();
        msg.msg_namelen = size_of::<libc::sockaddr_ll>() as libc::socklen_t;
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = size_of_val(&control);
        // SAFETY: every pointer in msg points at a live buffer of the length given.
        let n = unsafe { libc::recvmsg(fd.as_raw_fd(), &mut msg, libc::MSG_TRUNC) };
        if n < 0 {
            // A timeout (or EINTR): nothing is queued, so this is the moment to stop if asked.
            if stop.load(Ordering::Relaxed) {
                report.drops = packet_drops(fd.as_raw_fd()).unwrap_or(u32::MAX);
                return report;
            }
            continue;
        }
        let user_ns = monotonic_ns();
        if addr.sll_pkttype != libc::PACKET_OUTGOING {
            report.incoming += 1;
            report.incoming_tcp_replies += u64::from(is_tcp_reply(&buf[..(n as usize).min(buf.len())]));
            continue;
        }
        let mut kernel_ns = None;
        // SAFETY: the cmsg macros walk the control buffer recvmsg filled in.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_TIMESTAMPNS {
                    let ts: libc::timespec = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                    kernel_ns = Some(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64);
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
        }
        let ts = kernel_ns.expect("no SCM_TIMESTAMPNS on a captured frame");
        if report.packets == 0 {
            report.first_ns = ts;
            report.user_first_ns = user_ns;
        }
        report.last_ns = ts;
        report.user_last_ns = user_ns;
        report.packets += 1;
        report.times.0.push(ts);
        *report.sizes.entry(n as usize).or_default() += 1;
        seen.store(report.packets, Ordering::Relaxed);
    }
}

// ---- masscan's wake-up call -----------------------------------------------------------------

/// masscan 1.3.2 with libpcap 1.10 (TPACKET_V3) never ends on a quiet link: its receive thread
/// returns from pcap only when a frame arrives, and the main thread waits for it. Once its
/// last packet has left (and its `--wait` is over), a datagram every 250 ms from the target
/// namespace to a socket in the sender namespace (so that nothing answers it) lets it exit.
struct Nudger {
    /// takes the datagrams in the sender namespace
    _sink: UdpSocket,
    from: UdpSocket,
    to: SocketAddrV4,
    last: Option<Instant>,
    sent: u32,
}

impl Nudger {
    const EVERY: Duration = Duration::from_millis(250);
    /// 20 s of nudges at most
    const MAX: u32 = 80;

    fn new(lab: &Lab) -> Nudger {
        let to = SocketAddrV4::new(lab.sender_addr, NUDGE_PORT);
        let sink = lab
            .in_sender(move || UdpSocket::bind(to))
            .expect("cannot enter the sender namespace")
            .unwrap_or_else(|e| panic!("cannot bind {to} in the sender namespace: {e}"));
        let target = lab.target_addr;
        let from = lab
            .in_target(move || UdpSocket::bind(SocketAddrV4::new(target, 0)))
            .expect("cannot enter the target namespace")
            .unwrap_or_else(|e| panic!("cannot bind a socket in the target namespace: {e}"));
        Nudger {
            _sink: sink,
            from,
            to,
            last: None,
            sent: 0,
        }
    }

    /// Sends the next datagram if the scan is over and it is time.
    fn poll(&mut self, scan_over: bool) {
        let due = self.last.is_none_or(|t| t.elapsed() >= Self::EVERY);
        if scan_over && due && self.sent < Self::MAX {
            let _ = self.from.send_to(b"wake up", self.to);
            self.last = Some(Instant::now());
            self.sent += 1;
        }
    }
}

// ---- the scans --------------------------------------------------------------------------------

/// One scanner run: its command line and everything known about it in advance.
struct Scan {
    /// scanprof profile name, also the executable
    profile: &'static str,
    /// the scanner's argv, program first
    argv: Vec<String>,
    /// packets it sends: every scan here sends an exact number
    packets: u64,
    /// the requested rate by the scanner's own semantics, and its kind
    requested_pps: f64,
    kind: &'static str,
    /// the profile's probes whose symbols the Debian binary exports (docs/scanners-lab.md)
    present: &'static [&'static str],
    /// probes of the profile on a shared library the scanner loads: (probe, library file prefix)
    in_library: &'static [(&'static str, &'static str)],
    /// hit counts where the scan fixes them, as (probe, fewest, most)
    exact_hits: Vec<(&'static str, u64, u64)>,
    /// run with `--per-packet` (all per-packet probes on)
    per_packet: bool,
    /// masscan: wake its receive thread once the scan is over
    nudge: bool,
    /// scanprof --duration: a bound only, every scan ends well before it
    bound_s: f64,
    /// a connect scan: its packets are the SYNs of its connect calls, which the summary's
    /// `connect` object counts as connection attempts (null for every other scan)
    connect_scan: bool,
}

/// Probes in each profile that are in the binary; the rest must report attached=false.
const MASSCAN_PROBES: &[&str] = &[];
const ZMAP_PROBES: &[&str] = &[
    "send_run",
    "shard_init",
    "synscan_make_packet",
    "shard_get_next_ip",
    "handle_packet",
];
const NMAP_PROBES: &[&str] = &[
    "ultra_scan",
    "sendIPScanProbe",
    "send_ip_packet_sd",
    "PacketRateMeter_update",
];
const HPING3_PROBES: &[&str] = &[];

/// `masscan 10.99.0.2 -p1-PORTS --rate RATE --interface DEV --router-mac MAC --wait 1 --noreset`:
/// one SYN per port; --noreset keeps it from answering the target's RSTs with RSTs of its own
/// (which come out of the same --rate budget).
fn masscan(lab: &ScanLab, rate: u32, ports: u32) -> Scan {
    let argv = strings(&[
        "masscan",
        &lab.target(),
        &format!("-p1-{ports}"),
        "--rate",
        &rate.to_string(),
        "--interface",
        &lab.lab().sender_dev,
        "--router-mac",
        &lab.target_mac,
        "--wait",
        "1",
        "--noreset",
    ]);
    Scan {
        profile: "masscan",
        argv,
        packets: ports as u64,
        requested_pps: rate as f64,
        kind: "exact",
        present: MASSCAN_PROBES,
        in_library: &[("pcap_sendpacket", "libpcap.so")],
        exact_hits: Vec::new(),
        per_packet: false,
        nudge: true,
        bound_s: 20.0,
        connect_scan: false,
    }
}

/// `zmap -r TARGETS_PER_S -P PROBES ...` over the 128 addresses the target namespace owns: zmap
/// paces targets and sends each one its -P probes back to back, so the rate is r x P.
fn zmap(lab: &ScanLab, targets_per_s: u32, probes: u32, per_packet: bool) -> Scan {
    for prefix in ZMAP_TARGETS {
        lab.own(prefix);
    }
    let mut argv = strings(&[
        "zmap",
        "-i",
        &lab.lab().sender_dev,
        "-S",
        &lab.lab().sender_addr.to_string(),
        "-G",
        &lab.target_mac,
        "-b",
        "/dev/null",
        "-p",
        &CLOSED_PORT.to_string(),
        "-c",
        "0",
        "-q",
        "--disable-syslog",
        "-r",
        &targets_per_s.to_string(),
        "-P",
        &probes.to_string(),
        // zmap starts its cyclic walk at a random point: the seed fixes the walk, so a run's
        // calls (shard_get_next_ip below) and zmap 2.1.1's own assertion in
        // constraint_lookup_index, which aborted one run before it sent anything, repeat.
        "--seed",
        ZMAP_SEED,
    ]);
    argv.extend(strings(&ZMAP_TARGETS));
    let packets = ZMAP_TARGET_COUNT * probes as u64;
    Scan {
        profile: "zmap",
        argv,
        packets,
        requested_pps: (targets_per_s * probes) as f64,
        kind: "exact",
        present: ZMAP_PROBES,
        in_library: &[],
        exact_hits: vec![
            ("send_run", 1, 1),
            ("shard_init", 1, 1),
            ("synscan_make_packet", packets, packets),
            // One per target after the first (shard_get_cur_ip gives that) and the call that
            // finds the shard done; one more when the start of zmap's cyclic walk is not a valid
            // address and shard_init steps on (seen both ways before the seed was pinned; with
            // ZMAP_SEED 128 here).
            ("shard_get_next_ip", ZMAP_TARGET_COUNT, ZMAP_TARGET_COUNT + 1),
        ],
        per_packet,
        nudge: false,
        bound_s: 15.0,
        connect_scan: false,
    }
}

/// `nmap -sS -n -Pn --disable-arp-ping --max-retries 0 --max-rate RATE -p1-PORTS 10.99.0.2`:
/// one SYN per port and nothing else (--disable-arp-ping drops the ARP request nmap sends
/// first even with -Pn).
fn nmap(lab: &ScanLab, rate: u32, ports: u32, per_packet: bool) -> Scan {
    let argv = strings(&[
        "nmap",
        "-sS",
        "-n",
        "-Pn",
        "--disable-arp-ping",
        "--max-retries",
        "0",
        "--max-rate",
        &rate.to_string(),
        &format!("-p1-{ports}"),
        &lab.target(),
    ]);
    let n = ports as u64;
    Scan {
        profile: "nmap",
        argv,
        packets: n,
        requested_pps: rate as f64,
        kind: "cap",
        present: NMAP_PROBES,
        in_library: &[],
        exact_hits: vec![
            ("ultra_scan", 1, 1),
            ("sendIPScanProbe", n, n),
            ("send_ip_packet_sd", n, n),
            ("PacketRateMeter_update", n, n),
        ],
        per_packet,
        nudge: false,
        bound_s: 15.0,
        connect_scan: false,
    }
}

/// `nmap -sT -n -Pn --disable-arp-ping --max-retries 0 --max-rate RATE -p1-PORTS 10.99.0.2`:
/// one connect(2) per port, each one SYN that the target's closed port answers with a RST (the
/// kernel sends it, not nmap: no raw socket, no per-packet nmap function).
fn nmap_connect(lab: &ScanLab, rate: u32, ports: u32) -> Scan {
    let mut scan = nmap(lab, rate, ports, false);
    scan.argv[1] = "-sT".into();
    scan.exact_hits = vec![("ultra_scan", 1, 1)];
    scan.connect_scan = true;
    scan
}

/// `hping3 --udp -p 9 -i uPERIOD -c COUNT -q 10.99.0.2`: one datagram per timer period.
fn hping3(lab: &ScanLab, period_us: u32, count: u32) -> Scan {
    let argv = strings(&[
        "hping3",
        "--udp",
        "-p",
        &CLOSED_PORT.to_string(),
        "-i",
        &format!("u{period_us}"),
        "-c",
        &count.to_string(),
        "-q",
        &lab.target(),
    ]);
    Scan {
        profile: "hping3",
        argv,
        packets: count as u64,
        requested_pps: 1e6 / period_us as f64,
        kind: "exact",
        present: HPING3_PROBES,
        in_library: &[],
        exact_hits: Vec::new(),
        per_packet: false,
        nudge: false,
        bound_s: 15.0,
        connect_scan: false,
    }
}

/// `ip netns exec NS sh -c 'exec "$@" 1>&2' sh argv...`: the scanner in the sender namespace
/// (same pid: ip and sh exec it), its stdout on stderr, since scanprof's stdout carries NDJSON.
fn in_sender(lab: &ScanLab, argv: &[String]) -> Vec<String> {
    let mut v = strings(&["sh", "-c", "exec \"$@\" 1>&2", "sh"]);
    v.extend(argv.iter().cloned());
    in_netns(&lab.lab().sender_ns, &v)
}

fn f64_at(v: &Value, what: &str) -> f64 {
    v.as_f64()
        .unwrap_or_else(|| panic!("{what} is not a number: {v}"))
}

/// Runs `build`'s scan in a fresh lab, under scanprof unless lab-only, and checks everything.
fn run_scan(build: impl FnOnce(&ScanLab) -> Scan) {
    let test = privileged();
    let lab = ScanLab::new();
    let scan = build(&lab);
    require_scanner(scan.profile);

    let capture = TxCapture::start(lab.lab());
    let mut nudger = scan.nudge.then(|| Nudger::new(lab.lab()));
    let (tx_before, rx_before) = (lab.tx_packets(), lab.rx_packets());
    let started = Instant::now();
    let launched = in_sender(&lab, &scan.argv);
    let proc = if lab_only() {
        let mut cmd = std::process::Command::new(&launched[0]);
        cmd.args(&launched[1..]);
        Proc::spawn(scan.profile, cmd, false)
    } else {
        let bound = scan.bound_s.to_string();
        let mut args = strings(&["run", "--json", "--profile", scan.profile, "--duration", &bound]);
        if scan.per_packet {
            args.push("--per-packet".into());
        }
        args.push("--".into());
        args.extend(launched);
        Proc::scanprof(&args)
    };
    let expected = scan.packets;
    let run = proc.finish_polling(RUN_TIMEOUT, || {
        if let Some(n) = nudger.as_mut() {
            n.poll(capture.packets_so_far() >= expected);
        }
    });
    let wall_s = started.elapsed().as_secs_f64();
    let cap = capture.stop();
    let (tx, rx) = (lab.tx_packets() - tx_before, lab.rx_packets() - rx_before);
    drop(nudger);

    eprintln!(
        "{} at {} pps requested ({}): {} frames captured (veth tx {tx}, by size {:?}); whole run {wall_s:.2} s",
        scan.profile, scan.requested_pps, scan.kind, cap.packets, cap.sizes,
    );

    // The scan itself, by the lab's counts.
    run.assert_success();
    assert_eq!(cap.drops, 0, "the capture lost frames: {cap:?}");
    assert_eq!(
        tx,
        scan.packets,
        "veth tx_packets: the scan sent another number of packets\n{}",
        run.context()
    );
    assert_eq!(cap.packets, tx, "the capture and the veth disagree: {cap:?}");
    let independent = cap.pps();
    let user_span_ns = cap.user_last_ns.saturating_sub(cap.user_first_ns).max(1);
    eprintln!(
        "{}: {:.1} pps over {:.3} s from the first to the last frame (capture thread's clock: {:.1})",
        scan.profile,
        independent,
        cap.span_s(),
        (cap.packets - 1) as f64 * 1e9 / user_span_ns as f64,
    );

    if !lab_only() {
        check_scanprof(&run, &scan, independent);
        if scan.profile == "hping3" {
            check_hping3_socket(&run, tx, rx);
        }
        drop(run);
        test.assert_released("scanprof run");
    }
    lab.destroy();
}

/// hping3's libpcap socket, bound to the sender's veth for every protocol and open from before
/// its first probe until after the last reply (it closes at its exit, after scanprof's last
/// sample): every frame the veth sent (a copy of each probe) and received (each RST) reached
/// it, and scanprof counts them all, the copies apart. It counted 879 of 2,000 while a socket's
/// counters were lost at its close.
#[track_caller]
fn check_hping3_socket(run: &Finished, tx: u64, rx: u64) {
    let summary = run.summary();
    let receive = summary
        .receive
        .as_ref()
        .unwrap_or_else(|| panic!("no receive funnel for hping3\n{}", run.context()));
    let rings: Vec<_> = receive.rings.iter().filter(|r| !r.filtered).collect();
    assert_eq!(rings.len(), 1, "hping3's packet sockets: {:#?}", receive.rings);
    let ring = rings[0];
    eprintln!(
        "hping3's socket: {} queued + {} dropped, {} outgoing copies; the veth sent {tx}, received {rx}",
        ring.queued_total, ring.dropped_total, ring.outgoing_total
    );
    assert_eq!(ring.queued_total + ring.dropped_total, tx + rx, "{ring:?}");
    assert_eq!(ring.outgoing_total, tx, "{ring:?}");
    assert_eq!(ring.clears, 0, "{ring:?}");
}

/// scanprof's summary against the scan and the independent count.
#[track_caller]
fn check_scanprof(run: &Finished, scan: &Scan, independent_pps: f64) {
    let s = run.summary_json();
    precision::assert_precise_run(&format!("{} at {} pps", scan.profile, scan.requested_pps), run);
    let achieved = f64_at(&s["achieved_pps"], "achieved_pps");
    eprintln!(
        "scanprof: {} packets, achieved {achieved:.1} pps over {} s; requested {}",
        s["packets"], s["send_window_s"], s["requested_pps"]
    );
    assert_eq!(s["end_reason"], "family_exited", "{}", run.context());
    assert_eq!(
        s["packets"].as_u64(),
        Some(scan.packets),
        "scanprof's packets vs the veth's"
    );
    assert_within(
        "achieved_pps vs the capture's (packets - 1) / (last - first)",
        achieved,
        independent_pps,
        0.01,
    );

    // Connection attempts: each of a connect scan's packets is the SYN of a connect call.
    let c = &s["connect"];
    if scan.connect_scan {
        assert_eq!(c["attempts"].as_u64(), Some(scan.packets), "connect: {c}");
        assert_eq!(c["syns"].as_u64(), Some(scan.packets), "connect: {c}");
        assert_eq!(c["failed"].as_u64(), Some(0), "connect: {c}");
        assert_eq!(c["connect_scanner"], true, "connect: {c}");
        assert_eq!(s["send_calls"].as_u64(), Some(scan.packets), "{s}");
        assert_eq!(s["failed_calls"].as_u64(), Some(0), "{s}");
    } else {
        assert!(
            c.is_null(),
            "a scan without connect calls has a connect object: {c}"
        );
    }

    // ---- the `scanner` object (pending contract) ----
    let sc = &s["scanner"];
    assert!(sc.is_object(), "no scanner object in the summary: {s}");
    eprintln!("scanner: {sc:#}");
    assert_eq!(sc["profile"], scan.profile);
    // The requested rate, read from argv by the scanner's semantics (no --requested given).
    let req = &sc["requested"];
    assert_eq!(f64_at(&req["pps"], "requested.pps"), scan.requested_pps, "{req}");
    assert_eq!(req["kind"], scan.kind, "{req}");
    assert!(req["conflict"].is_null(), "{req}");
    let sources = req["sources"]
        .as_array()
        .unwrap_or_else(|| panic!("no sources: {req}"));
    assert!(
        sources
            .iter()
            .any(|src| src["source"].as_str().is_some_and(|t| t.starts_with("argv"))),
        "the rate comes from argv: {sources:?}"
    );
    assert_eq!(
        f64_at(&s["requested_pps"], "requested_pps"),
        scan.requested_pps,
        "the summary's requested_pps is filled from argv"
    );

    // The probes: those in .dynsym attach (per-packet ones only with --per-packet) and fire;
    // every attached probe fires; the rest say why not.
    let probes = sc["probes"]
        .as_array()
        .unwrap_or_else(|| panic!("no probes: {sc}"));
    let binary = scanner_path(scan.profile);
    let mut names: Vec<&str> = Vec::new();
    for p in probes {
        let name = p["name"]
            .as_str()
            .unwrap_or_else(|| panic!("probe without a name: {p}"));
        names.push(name);
        let attached = p["attached"] == true;
        let per_packet = p["per_packet"] == true;
        let hits = p["hits"].as_u64().unwrap_or_else(|| panic!("no hits: {p}"));
        if attached {
            assert!(hits > 0, "{name} is attached but never fired: {p}");
        } else {
            assert!(
                p["note"].is_string(),
                "{name} is not attached and says not why: {p}"
            );
        }
        let library = scan
            .in_library
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, lib)| *lib);
        if let (Some(lib), true) = (library, scan.per_packet || !per_packet) {
            assert!(attached, "{name} (in {lib}) is not attached: {p}");
            let on = p["binary"].as_str().unwrap_or("");
            assert!(
                on.contains(&format!("/{lib}")),
                "{name} is attached to {on}, not {lib}: {p}"
            );
        }
        if scan.present.contains(&name) && (!per_packet || scan.per_packet) {
            assert!(attached, "{name} is in {binary}'s .dynsym but not attached: {p}");
            let on = p["binary"].as_str().unwrap_or("");
            assert!(
                on.ends_with(&format!("/{}", scan.profile)) || on == binary,
                "{name} is attached to {on}, not {binary}: {p}"
            );
        }
        if per_packet && !scan.per_packet {
            assert!(!attached, "per-packet probes are off without --per-packet: {p}");
        }
        if !scan.present.contains(&name) && library.is_none() {
            assert!(
                !attached,
                "{name} is not in {binary}'s .dynsym, yet attached: {p}"
            );
        }
    }
    for name in scan.present {
        assert!(
            names.contains(name),
            "probe {name} missing from the scanner object: {names:?}"
        );
    }
    // Hit counts the scan fixes. The probes of the launched scanner's executable are attached to
    // the file before it runs (the launched process is `ip`, which execs it later), so every
    // call is seen, per-packet ones included.
    for (name, fewest, most) in &scan.exact_hits {
        let p = probes.iter().find(|p| p["name"] == *name).unwrap();
        if p["attached"] != true {
            continue;
        }
        let hits = p["hits"].as_u64().unwrap();
        assert!(
            (*fewest..=*most).contains(&hits),
            "{name}: {hits} hits, expected {fewest}..={most}: {p}"
        );
    }
}

/// Where Debian installs the scanner.
fn scanner_path(name: &str) -> String {
    ["/usr/bin", "/usr/sbin"]
        .iter()
        .map(|d| format!("{d}/{name}"))
        .find(|p| std::path::Path::new(p).exists())
        .unwrap_or_else(|| format!("/usr/bin/{name}"))
}

// ---- masscan: --rate is an exact packet rate ---------------------------------------------------

#[test]
fn masscan_at_500_pps() {
    run_scan(|lab| masscan(lab, 500, 1000));
}

/// masscan exports nothing; its one probe is libpcap's pcap_sendpacket, per packet, in a library
/// it dlopens after start-up: found in the library directories and attached to the pid at exec.
#[test]
fn masscan_at_2000_pps_with_its_libpcap_probe() {
    run_scan(|lab| {
        let mut scan = masscan(lab, 2000, 4000);
        scan.per_packet = true;
        // Every call: the probe goes on the library file ahead of the launch (the exec's own
        // link takes over), so no call comes before it. Attached only when masscan's exec
        // record was read, it missed masscan's first calls on a busy machine (issue 29: 3,739
        // of 4,000; 3,999 once in CI): scanprof undercounted, the expectation was right.
        scan.exact_hits = vec![("pcap_sendpacket", 4000, 4000)];
        scan
    });
}

/// Issue 28 item 5: masscan started by a shell script that execs `ip netns exec NS masscan`, with
/// no `--profile`. The command scanprof was given is the shell's (no scanner word in it); the
/// profile and the requested rate come from the process that runs masscan, at its exec: profile
/// masscan, 500 pps from masscan's own argv (naming that process), and no `above_requested`
/// (before, the run said `generic` with no rate; with `--profile masscan` it read masscan's
/// default 100 pps from the shell's words and judged the scan 400% above it).
#[test]
fn masscan_behind_a_shell_script_is_recognised_at_its_own_exec() {
    let test = privileged();
    require_scanner("masscan");
    let lab = ScanLab::new();
    let scan = masscan(&lab, 500, 300);
    let capture = TxCapture::start(lab.lab());
    let mut nudger = Nudger::new(lab.lab());
    let script = format!(
        ": start; exec ip netns exec {} {} 1>&2",
        lab.lab().sender_ns,
        scan.argv.join(" ")
    );
    for extra in [&[][..], &["--profile", "masscan"][..]] {
        let before = capture.packets_so_far();
        let mut args = strings(&["run", "--json", "--duration", "20"]);
        args.extend(strings(extra));
        args.extend(strings(&["--", "sh", "-c", &script]));
        let run = Proc::scanprof(&args).finish_polling(RUN_TIMEOUT, || {
            nudger.poll(capture.packets_so_far() >= before + scan.packets)
        });
        run.assert_success();
        let s = run.summary_json();
        precision::assert_precise_run(
            "masscan_behind_a_shell_script_is_recognised_at_its_own_exec",
            &run,
        );
        assert_eq!(
            capture.packets_so_far() - before,
            scan.packets,
            "the capture saw another number of SYNs"
        );
        assert_eq!(
            s["packets"].as_u64(),
            Some(scan.packets),
            "{extra:?}: {}",
            run.context()
        );
        let sc = &s["scanner"];
        assert_eq!(sc["profile"], "masscan", "{extra:?}: {sc:#}");
        let req = &sc["requested"];
        assert_eq!(req["pps"].as_f64(), Some(500.0), "{extra:?}: {req:#}");
        assert_eq!(req["kind"], "exact", "{req:#}");
        assert_eq!(s["requested_pps"].as_f64(), Some(500.0), "{extra:?}");
        // Read from masscan's process: the launched process (sh, then ip, then masscan).
        let masscan_pid = s["processes"]
            .as_array()
            .and_then(|ps| ps.iter().find(|p| p["comm"] == "masscan"))
            .and_then(|p| p["pid"].as_u64())
            .unwrap_or_else(|| panic!("no masscan process: {}", s["processes"]));
        let from = req["sources"]
            .as_array()
            .and_then(|v| v.iter().find(|src| src["pps"].as_f64() == Some(500.0)))
            .unwrap_or_else(|| panic!("no source of 500 pps: {req:#}"));
        assert_eq!(from["process"]["comm"], "masscan", "{from}");
        assert_eq!(from["process"]["pid"].as_u64(), Some(masscan_pid), "{from}");
        assert!(
            !s.to_string().contains("above_requested"),
            "{extra:?}: {:#}",
            s["verdicts"]
        );
        drop(run);
    }
    // attach: to a shell that runs masscan as its child (no exec): the wrapper's pid is the
    // target, its words hide the scanner, and masscan is found among the family at start.
    let before = capture.packets_so_far();
    let child_script = format!(
        ": start; ip netns exec {} {} 1>&2; :",
        lab.lab().sender_ns,
        scan.argv.join(" ")
    );
    let mut cmd = std::process::Command::new("sh");
    cmd.args(["-c", &child_script]);
    let sh = Proc::spawn("sh", cmd, false);
    let sh_pid = sh.pid();
    let deadline = Instant::now() + Duration::from_secs(10);
    while capture.packets_so_far() == before {
        assert!(Instant::now() < deadline, "masscan sent nothing within 10 s");
        std::thread::sleep(Duration::from_millis(5));
    }
    let attach = Proc::scanprof(&strings(&[
        "attach",
        "-p",
        &sh_pid.to_string(),
        "--json",
        "--duration",
        "20",
    ]));
    let run = attach.finish_polling(RUN_TIMEOUT, || {
        nudger.poll(capture.packets_so_far() >= before + scan.packets)
    });
    let sh = sh.finish(RUN_TIMEOUT);
    run.assert_success();
    sh.assert_success();
    let s = run.summary_json();
    precision::assert_precise_run(
        "masscan_behind_a_shell_script_is_recognised_at_its_own_exec",
        &run,
    );
    let sc = &s["scanner"];
    assert_eq!(sc["profile"], "masscan", "attach: {sc:#}");
    assert_eq!(sc["requested"]["pps"].as_f64(), Some(500.0), "attach: {sc:#}");
    let from = sc["requested"]["sources"]
        .as_array()
        .and_then(|v| v.iter().find(|src| src["pps"].as_f64() == Some(500.0)))
        .unwrap_or_else(|| panic!("no source of 500 pps: {sc:#}"));
    assert_eq!(from["process"]["comm"], "masscan", "{from}");
    assert_ne!(
        from["process"]["pid"].as_u64(),
        Some(sh_pid as u64),
        "read from the shell: {from}"
    );
    // The rate the run is judged against is masscan's (attached mid-scan, a window of a
    // fraction of a second may still read a few percent above it: that is the measurement's).
    assert_eq!(s["requested_pps"].as_f64(), Some(500.0), "attach");
    drop(run);
    drop(nudger);
    let _ = capture.stop();
    test.assert_released("scanprof run");
    lab.destroy();
}

/// Issue 28 item 10: masscan's own RSTs that reach the target's TCP stack. masscan scans 40
/// ports the target listens on from an address of the lab's subnet no host owns (`--source-ip
/// 10.99.0.99`), so the sender namespace's kernel cannot answer the SYN-ACKs (it drops them,
/// IP_INADDRERRORS) and only masscan does, with an RST per port from its own TX budget. The
/// target's TCP frees each RST at tcp_v4_rcv (NOT_SPECIFIED, the half-open connection it
/// reset): the scan's normal outcome, class `expected`, never `target_loss` (before the fix the
/// 40 were the scanner's loss).
#[test]
fn masscans_rsts_that_reach_the_targets_tcp_are_expected_not_loss() {
    const PORTS: u16 = 40;
    let test = privileged();
    require_scanner("masscan");
    let lab = ScanLab::new();
    let target = lab.lab().target_addr;
    let listeners = lab
        .lab()
        .in_target(move || {
            (80..80 + PORTS)
                .map(|p| std::net::TcpListener::bind((target, p)))
                .collect::<io::Result<Vec<_>>>()
        })
        .expect("cannot enter the target namespace")
        .unwrap_or_else(|e| panic!("cannot listen in the target namespace: {e}"));
    let capture = TxCapture::start(lab.lab());
    let mut nudger = Nudger::new(lab.lab());
    let masscan = strings(&[
        "masscan",
        &lab.target(),
        &format!("-p80-{}", 80 + PORTS - 1),
        "--rate",
        "100",
        "--interface",
        &lab.lab().sender_dev,
        "--router-mac",
        &lab.target_mac,
        "--source-ip",
        "10.99.0.99",
        "--wait",
        "1",
    ]);
    let mut args = strings(&["run", "--json", "--duration", "20", "--"]);
    args.extend(in_sender(&lab, &masscan));
    // SYNs and RSTs leave: 2 per port (and masscan's ARP answers for its address).
    let run = Proc::scanprof(&args).finish_polling(RUN_TIMEOUT, || {
        nudger.poll(capture.packets_so_far() >= 2 * PORTS as u64)
    });
    drop(nudger);
    let _ = capture.stop();
    drop(listeners);
    run.assert_success();
    let s = run.summary_json();
    precision::assert_precise_run(
        "masscans_rsts_that_reach_the_targets_tcp_are_expected_not_loss",
        &run,
    );
    let drops = s["drops"].as_array().unwrap_or_else(|| panic!("no drops: {s}"));
    let at_target_tcp: Vec<&Value> = drops
        .iter()
        .filter(|d| {
            d["device"] == lab.lab().target_dev.as_str()
                && d["location"]
                    .as_str()
                    .is_some_and(|l| l.starts_with("tcp_v4_rcv"))
        })
        .collect();
    let expected: u64 = at_target_tcp
        .iter()
        .filter(|d| d["class"] == "expected" && d["reason"] == "NOT_SPECIFIED")
        .map(|d| d["count"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(
        expected, PORTS as u64,
        "one RST per port reached the target's TCP: {drops:#?}"
    );
    let loss: Vec<&Value> = drops.iter().filter(|d| d["class"] == "target_loss").collect();
    assert!(loss.is_empty(), "the scanner lost nothing on the way: {loss:#?}");
    drop(run);
    test.assert_released("scanprof run");
    lab.destroy();
}

#[test]
fn masscan_at_10000_pps() {
    run_scan(|lab| masscan(lab, 10_000, 20_000));
}

/// masscan already scanning when scanprof attaches (its AF_PACKET socket carries packets before
/// the probes exist): every packet its send syscalls accepted while attached reaches dev_queue
/// and a driver, and no more of them than the capture saw meanwhile.
#[test]
fn masscan_attached_mid_scan_counts_every_stage() {
    let test = privileged();
    let lab = ScanLab::new();
    let scan = masscan(&lab, 2000, 14_000);
    require_scanner(scan.profile);

    let capture = TxCapture::start(lab.lab());
    let mut nudger = Nudger::new(lab.lab());
    let launched = in_sender(&lab, &scan.argv);
    let mut cmd = std::process::Command::new(&launched[0]);
    cmd.args(&launched[1..]);
    let masscan = Proc::spawn("masscan", cmd, false);
    let deadline = Instant::now() + Duration::from_secs(10);
    while capture.packets_so_far() == 0 {
        assert!(Instant::now() < deadline, "masscan sent nothing within 10 s");
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_secs(1));
    let before = capture.packets_so_far();
    // Attached until masscan exits (woken by the nudger once its scan is over), so that the last
    // sample reads quiet counters.
    let attach = Proc::scanprof(&strings(&[
        "attach",
        "-p",
        &masscan.pid().to_string(),
        "--json",
        "--profile",
        "masscan",
        "--duration",
        "20",
    ]));
    let run = attach.finish_polling(RUN_TIMEOUT, || {
        nudger.poll(capture.packets_so_far() >= scan.packets)
    });
    let during = capture.packets_so_far() - before;
    let masscan = masscan.finish(RUN_TIMEOUT);
    let cap = capture.stop();
    run.assert_success();
    masscan.assert_success();

    let s = run.summary_json();
    precision::assert_precise_run("masscan_attached_mid_scan_counts_every_stage", &run);
    let at = |k: &str| {
        s["stage_counts"][k]
            .as_u64()
            .unwrap_or_else(|| panic!("no {k} in {s}"))
    };
    let packets = at("syscall_packets");
    eprintln!(
        "masscan attached mid-scan: stages {}; capture {during} frames while scanprof ran, {} in all",
        s["stage_counts"], cap.packets
    );
    assert_eq!(
        cap.packets, scan.packets,
        "the scan sent another number of packets"
    );
    assert!(packets > 3000, "too few packets while attached: {packets}");
    assert!(
        packets <= during,
        "{packets} packets counted, the capture saw {during} meanwhile"
    );
    let slack = 2 + packets / 2000;
    for stage in ["dev_queue", "dev_xmit"] {
        assert!(
            at(stage).abs_diff(packets) <= slack,
            "{stage} {} vs {packets} packets through masscan's send syscalls: {}",
            at(stage),
            s["stage_counts"]
        );
    }
    let causes: Vec<&str> = s["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v["cause"].as_str())
        .collect();
    assert!(!causes.contains(&"measurement_fault"), "{causes:?}");
    drop(run);
    test.assert_released("scanprof attach");
    lab.destroy();
}

// ---- zmap: -r targets per second times -P probes ------------------------------------------------

#[test]
fn zmap_at_500_pps_with_per_packet_probes() {
    run_scan(|lab| zmap(lab, 125, 4, true));
}

#[test]
fn zmap_at_10000_pps() {
    run_scan(|lab| zmap(lab, 125, 80, false));
}

// ---- nmap: --max-rate is a cap -----------------------------------------------------------------

#[test]
fn nmap_at_500_pps_with_per_packet_probes() {
    run_scan(|lab| nmap(lab, 500, 1000, true));
}

#[test]
fn nmap_at_10000_pps() {
    run_scan(|lab| nmap(lab, 10_000, 20_000, false));
}

/// A connect scan (issue 13 item 9): scanprof's packets are the SYNs the capture saw leave, one
/// per connect call, and its achieved rate is theirs.
#[test]
fn nmap_connect_scan_at_500_pps_counts_its_syns() {
    run_scan(|lab| nmap_connect(lab, 500, 1000));
}

// ---- hping3: -i uN is a timer period ------------------------------------------------------------

#[test]
fn hping3_at_500_pps() {
    run_scan(|lab| hping3(lab, 2000, 1000));
}

#[test]
fn hping3_at_2000_pps() {
    run_scan(|lab| hping3(lab, 500, 4000));
}

// ---- a real scanner into a narrow path: the diagnosis, and its own figure against ours ---------

/// masscan at 20,000 pps into a 2 Mbit/s token bucket with an 8 kB queue on the sender's veth:
/// about 4,000 frames a second fit. masscan ignores the ENOBUFS its sends get back and keeps
/// printing the rate of its calls. scanprof must say where the packets went (the qdisc, and the
/// sends the kernel refused) and set masscan's status rate beside what left the machine.
#[test]
fn masscan_into_a_narrow_tbf_is_diagnosed_and_its_own_rate_contradicted() {
    let test = privileged();
    require_scanner("masscan");
    let lab = ScanLab::with(LabConfig {
        tbf: Some(TbfConfig {
            rate: "2mbit".into(),
            burst: "4kb".into(),
            limit: "8kb".into(),
        }),
    });
    let (rate, ports) = (20_000u32, 60_000u32);
    let scan = masscan(&lab, rate, ports);
    let capture = TxCapture::start(lab.lab());
    let mut nudger = Nudger::new(lab.lab());
    let started = Instant::now();
    let mut args = strings(&["run", "--json", "--profile", "masscan", "--duration", "20", "--"]);
    args.extend(in_sender(&lab, &scan.argv));
    // The scan takes ports / rate seconds plus masscan's --wait; then it needs a nudge to exit.
    let over_after = Duration::from_secs_f64(ports as f64 / rate as f64 + 1.5);
    let run =
        Proc::scanprof(&args).finish_polling(RUN_TIMEOUT, || nudger.poll(started.elapsed() >= over_after));
    let cap = capture.stop();
    drop(nudger);
    run.assert_success();
    let s = run.summary_json();
    precision::assert_precise_run(
        "masscan_into_a_narrow_tbf_is_diagnosed_and_its_own_rate_contradicted",
        &run,
    );
    let verdicts = s["verdicts"].as_array().expect("verdicts").clone();
    eprintln!("capture: {} frames at {:.1} pps", cap.packets, cap.pps());
    eprintln!("verdicts: {:#}", Value::Array(verdicts.clone()));
    eprintln!("claims: {:#}", s["scanner"]["claims"]);

    // What left the machine: the capture on the veth, after the tbf.
    let wire = cap.pps();
    assert!(
        wire < 6_000.0,
        "the token bucket should hold the wire rate near 4k: {wire:.0}"
    );
    // masscan's own figure: the rate of its send calls, near the 20k it was asked for.
    let claims = s["scanner"]["claims"].as_array().expect("claims");
    let status = claims
        .iter()
        .find(|c| {
            c["what"]
                .as_str()
                .is_some_and(|w| w.starts_with("masscan's status rate"))
        })
        .unwrap_or_else(|| panic!("masscan's status line was not read: {claims:?}"));
    let claimed = f64_at(&status["claimed"], "claimed");
    assert!(
        claimed > 3.0 * wire,
        "masscan claims {claimed:.0} pps while {wire:.0} left"
    );
    let measured = f64_at(&status["measured"], "measured");
    assert_within("the claim's measured side vs the capture", measured, wire, 0.05);

    // The diagnosis: the top cause is the narrow path (the qdisc dropping, or refusing the
    // sends with ENOBUFS), and masscan's figure is called out as contradicted.
    let causes: Vec<&str> = verdicts.iter().filter_map(|v| v["cause"].as_str()).collect();
    assert!(
        matches!(causes.first(), Some(&"qdisc_drop") | Some(&"send_errors")),
        "top verdict should be the narrow path: {causes:?}"
    );
    assert!(
        causes.contains(&"claim_mismatch"),
        "masscan's figure disagrees: {causes:?}"
    );
    drop(run);
    test.assert_released("scanprof run");
    lab.destroy();
}

// ---- a sweep of a real scanner: every step against the capture ---------------------------------

/// masscan's requested rates in the sweep: two below what the 2 Mbit/s tbf passes of its
/// 60-byte SYNs (~4,000 a second, as in the test above), one well above it.
const SWEEP_RATES: [u32; 3] = [1000, 2500, 10_000];
/// Seconds per step (`sweep --duration`): masscan's 65,535 ports take longer at every rate, so
/// each step is ended by the sweep (SIGTERM) after this long.
const SWEEP_STEP_S: u32 = 3;

/// The root qdisc's drops on the sender's veth so far (`tc -s qdisc`).
fn root_qdisc_drops(lab: &ScanLab) -> u64 {
    lab.lab()
        .sender_qdisc()
        .unwrap_or_else(|e| panic!("tc -s qdisc of the sender veth failed: {e:#}"))
        .into_iter()
        .find(|q| q.parent.is_none())
        .map_or(0, |q| q.drops)
}

/// Where `steps` runs of frames end, by their ascending kernel timestamps: at the `steps - 1`
/// longest silences (a step's next masscan starts hundreds of ms after the last one ended,
/// while a step's own frames are at most a few ms apart), then at the end.
fn step_bounds(times: &[u64], steps: usize) -> Vec<usize> {
    let mut gaps: Vec<(u64, usize)> = times
        .windows(2)
        .enumerate()
        .map(|(i, w)| (w[1].saturating_sub(w[0]), i + 1))
        .collect();
    gaps.sort_by(|a, b| b.cmp(a));
    let mut bounds: Vec<usize> = gaps.iter().take(steps.saturating_sub(1)).map(|g| g.1).collect();
    bounds.sort_unstable();
    bounds.push(times.len());
    bounds
}

/// (frames - 1) / (last - first) over some of the capture's frame timestamps.
fn pps_of(times: &[u64]) -> f64 {
    let (Some(first), Some(last)) = (times.first(), times.last()) else {
        return 0.0;
    };
    if times.len() < 2 || last <= first {
        return 0.0;
    }
    (times.len() - 1) as f64 * 1e9 / (last - first) as f64
}

/// `scanprof sweep --rates 1000,2500,10000 --max-rate 10000 --duration 3 --profile masscan
/// --json -- <sender namespace> masscan ... --rate {} ...` into a lab whose sender veth is a
/// 2 Mbit/s tbf. Each step is checked, as its `sweep_step` line arrives, against the frames the
/// capture saw leave the veth in that step (after the tbf) and tc's drops in it: below the
/// tbf's rate the step's achieved rate is the capture's and it is kept; above it what left is
/// near the tbf's rate, the qdisc dropped or refused the rest, the step is not kept, and the
/// knee is the rate below. The sweep's table has the three steps. Figures printed (with
/// --nocapture) are the table in docs/scanners-lab.md.
#[test]
fn masscan_swept_across_a_narrow_tbf_each_step_against_the_capture() {
    let test = privileged();
    require_scanner("masscan");
    let lab = ScanLab::with(LabConfig {
        tbf: Some(TbfConfig {
            rate: "2mbit".into(),
            burst: "4kb".into(),
            limit: "8kb".into(),
        }),
    });
    let mut argv = masscan(&lab, 0, 65_535).argv;
    let r = argv
        .iter()
        .position(|a| a == "--rate")
        .expect("--rate in masscan's argv");
    argv[r + 1] = "{}".into();
    let rates = SWEEP_RATES.map(|r| r.to_string()).join(",");
    let max = SWEEP_RATES.iter().max().unwrap().to_string();
    let mut args = strings(&[
        "sweep",
        "--rates",
        &rates,
        "--max-rate",
        &max,
        "--duration",
        &SWEEP_STEP_S.to_string(),
        "--profile",
        "masscan",
        "--json",
        "--",
    ]);
    args.extend(in_sender(&lab, &argv));
    eprintln!("scanprof {}", sh_join(&args));

    let capture = TxCapture::start(lab.lab());
    let mut p = Proc::scanprof(&args);
    // tc's drops when each step's line arrives: the step's masscan has ended (its drops are
    // all in), and the next one starts only after its probes are attached (hundreds of ms).
    let mut marks: Vec<u64> = Vec::new();
    let mut steps = Vec::new();
    for _ in SWEEP_RATES {
        let step = p.wait_for_json("sweep_step", Duration::from_secs(60));
        marks.push(root_qdisc_drops(&lab));
        steps.push(step);
    }
    let sweep = p.wait_for_json("sweep", Duration::from_secs(10));
    let done = p.finish(Duration::from_secs(20));
    let cap = capture.stop();
    done.assert_success();
    assert_eq!(cap.drops, 0, "the capture lost frames");

    // The steps' frames, split where the wire fell silent between two masscans, by the frames'
    // kernel timestamps. (The capture thread's count when a step's line arrived was the
    // boundary before: on a busy machine that reader lags, and the last step's frames still in
    // its socket were counted as the next step's: issue 29, `xmit 13,373 vs 13,549 captured`.)
    let bounds = step_bounds(&cap.times.0, SWEEP_RATES.len());
    let mut report = String::new();
    let mut truth = Vec::new();
    let (mut from, mut drops0) = (0usize, 0u64);
    for (s, (&to, &drops)) in steps.iter().zip(bounds.iter().zip(&marks)) {
        let frames = &cap.times.0[from..to];
        if let Some(next) = cap.times.0.get(to) {
            let gap_ms = next.saturating_sub(*frames.last().unwrap_or(&0)) as f64 / 1e6;
            assert!(
                gap_ms > 40.0,
                "the wire's silences between steps are only {gap_ms:.1} ms: the steps overlap"
            );
        }
        let (n, wire, tc) = (frames.len() as u64, pps_of(frames), drops - drops0);
        report += &format!(
            "{} pps: achieved {:.1} (ratio {:.3}), packets {}, xmit {}, lost {}, kept {}, top {:?}, end {}, received {} ({} per packet) | capture {n} frames at {wire:.1} pps, tc drops {tc}\n",
            s["requested_pps"],
            f64_of(s, "achieved_pps"),
            f64_of(s, "ratio"),
            s["packets"],
            s["xmit_packets"],
            s["lost"],
            s["kept"],
            s["verdicts"][0]["cause"],
            s["end_reason"],
            s["received_packets"],
            s["received_per_packet"],
        );
        truth.push((n, wire, tc));
        (from, drops0) = (to, drops);
    }
    eprintln!("{report}sweep: {sweep}");
    assert_eq!(from, cap.times.0.len(), "frames after the last step\n{report}");
    // Replies: the target's RSTs reach the sender's veth, and masscan reads them with libpcap
    // (a TPACKET_V3 ring, no receive syscalls); whatever the receive funnel counts, it cannot
    // be more than came in.
    let received: u64 = steps.iter().map(|s| u64_of(s, "received_packets")).sum();
    eprintln!(
        "replies: {} frames came in to the sender's veth; the family read {received} through receive syscalls",
        cap.incoming
    );
    assert!(cap.incoming > 0, "no replies came back");
    assert!(
        received <= cap.incoming,
        "{received} read, {} came in",
        cap.incoming
    );

    let tbf_pps = 2e6 / 8.0 / 60.0;
    for (i, (s, &(n, wire, tc))) in steps.iter().zip(&truth).enumerate() {
        let rate = f64_of(s, "requested_pps");
        let achieved = f64_of(s, "achieved_pps");
        // The packets of the sends the kernel accepted are the frames that left (masscan's
        // refused ones, with ENOBUFS, are not packets).
        let packets = u64_of(s, "packets");
        assert!(
            packets.abs_diff(n) <= 2 + n / 1000,
            "{rate} pps: packets {packets} vs {n} frames captured\n{report}"
        );
        // What the driver took while the family lived: all of it but what the tbf still held
        // when the sweep ended masscan (its 8 kB queue: 136 frames of 60 bytes at most).
        let xmit = u64_of(s, "xmit_packets");
        assert!(
            xmit <= n && n - xmit <= 2 + 8192 / 60,
            "{rate} pps: xmit {xmit} vs {n} frames captured\n{report}"
        );
        assert!(
            n as f64 > rate.min(tbf_pps) * 1.5,
            "{rate} pps: too few frames ({n}) for a {SWEEP_STEP_S} s step\n{report}"
        );
        assert_within(
            &format!("{rate} pps: achieved vs the capture"),
            achieved,
            wire,
            0.03,
        );
        // Every loss is the tbf's: scanprof's count is tc's, exactly.
        assert_eq!(u64_of(s, "lost"), tc, "{rate} pps: lost vs tc drops\n{report}");
        let kept = (f64_of(s, "ratio") - 1.0).abs() <= 0.02 && tc == 0;
        assert_eq!(s["kept"], kept, "{rate} pps: kept\n{report}");
        if i == 0 {
            // Far below the tbf: kept.
            assert_within(
                &format!("{rate} pps: achieved vs requested"),
                achieved,
                rate,
                0.02,
            );
            assert_eq!(tc, 0, "{rate} pps lost\n{report}");
        }
        if rate > tbf_pps * 1.5 {
            assert!(
                wire < tbf_pps * 1.2,
                "{rate} pps: the tbf should hold the wire near {tbf_pps:.0} pps\n{report}"
            );
            assert!(tc > 0, "{rate} pps: tc dropped nothing\n{report}");
            assert!(achieved < rate * 0.6, "{rate} pps\n{report}");
            let top = s["verdicts"][0]["cause"].as_str().unwrap_or("");
            assert!(
                matches!(top, "qdisc_drop" | "send_errors"),
                "{rate} pps: top verdict {top:?}, not the narrow path\n{report}"
            );
        }
    }
    // The knee: the last rate before the first step not kept (by the truth above).
    let first_lost = steps
        .iter()
        .position(|s| s["kept"] == false)
        .expect("the top rate is not kept");
    assert!(first_lost >= 1, "{report}");
    let knee = f64_of(&steps[first_lost - 1], "requested_pps");
    assert_eq!(sweep["steps_run"], 3, "{sweep}");
    assert_eq!(sweep["knee"]["knee_pps"], knee, "{sweep}");
    assert_eq!(
        sweep["knee"]["above_pps"],
        f64_of(&steps[first_lost], "requested_pps"),
        "{sweep}"
    );
    drop(done);
    test.assert_released("scanprof sweep");
    lab.destroy();
}

// ---- the scanners' machine-readable status: their figures as claims ---------------------------

/// A directory of this test's, removed when it drops (also when the test fails).
struct StatusDir(std::path::PathBuf);

impl StatusDir {
    fn new(tag: &str) -> StatusDir {
        let d = std::env::temp_dir().join(format!("scanprof-status-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir(&d).unwrap_or_else(|e| panic!("cannot create {}: {e}", d.display()));
        // zmap opens its status file from a thread that races with its drop to user nobody
        // (wrappers/zmap.toml): the directory is writable by anyone, sticky, as /tmp is.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o1777))
            .unwrap_or_else(|e| panic!("cannot chmod {}: {e}", d.display()));
        StatusDir(d)
    }
}

impl Drop for StatusDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// zmap's status file, read back by the test: its rows by column name.
fn zmap_status_rows(path: &std::path::Path) -> Vec<BTreeMap<String, f64>> {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("zmap wrote no {}: {e}", path.display()));
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().expect("an empty status file").split(',').collect();
    lines
        .map(|l| {
            header
                .iter()
                .zip(l.split(','))
                .filter_map(|(k, v)| Some((k.to_string(), v.parse::<f64>().ok()?)))
                .collect()
        })
        .collect()
}

/// The summary's claims read from a status file or stream, by figure.
fn status_claims(s: &Value) -> BTreeMap<String, Value> {
    s["scanner"]["claims"]
        .as_array()
        .unwrap_or_else(|| panic!("no claims: {}", s["scanner"]))
        .iter()
        .filter(|c| c["source"] == "status_file")
        .map(|c| (c["figure"].as_str().unwrap_or("?").to_string(), c.clone()))
        .collect()
}

/// `zmap ... -c 2 -u FILE`: a two-second cooldown, so that zmap's last status row comes after
/// its last packet (with `-c 0` zmap 2.1.1 may end before writing the row of its last second).
fn zmap_with_status_file(lab: &ScanLab, targets_per_s: u32, probes: u32, file: &str) -> Scan {
    let mut scan = zmap(lab, targets_per_s, probes, false);
    let c = scan
        .argv
        .iter()
        .position(|a| a == "-c")
        .expect("-c in zmap's argv");
    scan.argv[c + 1] = "2".into();
    scan.argv.splice(1..1, strings(&["-u", file]));
    scan
}

/// zmap `-u status.csv` (relative: scanprof's working directory is the test's directory, which
/// the command inherits) under `scanprof run`: each column the profile reads is a claim whose
/// source is the status file, equal to the file's own last row (sent-total in targets, times
/// -P), and the totals are set beside scanprof's counts, which the veth's agree with.
#[test]
fn zmap_status_updates_file_figures_are_claims_under_run() {
    let test = privileged();
    require_scanner("zmap");
    let lab = ScanLab::new();
    let dir = StatusDir::new("zmap-run");
    // 25 targets/s x 4 probes = 100 pps over 128 targets: ~5 s of sending.
    let (per_s, probes) = (25u32, 4u32);
    let scan = zmap_with_status_file(&lab, per_s, probes, "status.csv");
    let capture = TxCapture::start(lab.lab());
    let tx_before = lab.tx_packets();
    let mut args = strings(&["run", "--json", "--profile", "zmap", "--duration", "20", "--"]);
    args.extend(in_sender(&lab, &scan.argv));
    let mut cmd = std::process::Command::new(scanprof_bin());
    cmd.args(&args).current_dir(&dir.0);
    let run = Proc::spawn("scanprof run", cmd, false).finish(RUN_TIMEOUT);
    let cap = capture.stop();
    let tx = lab.tx_packets() - tx_before;
    run.assert_success();
    assert_eq!(tx, scan.packets, "veth tx_packets\n{}", run.context());

    let rows = zmap_status_rows(&dir.0.join("status.csv"));
    let last = rows.last().expect("no status rows");
    let s = run.summary_json();
    precision::assert_precise_run("zmap_status_updates_file_figures_are_claims_under_run", &run);
    let claims = status_claims(&s);
    eprintln!("zmap's last status row: {last:?}");
    eprintln!("status claims: {:#}", serde_json::to_value(&claims).unwrap());
    eprintln!("notes: {}", s["scanner"]["notes"]);
    assert_eq!(
        claims.len(),
        4,
        "rate, sent, send_failures, pcap_drops: {claims:?}"
    );
    let p = probes as f64;
    let packets = s["packets"].as_u64().expect("packets") as f64;
    assert_eq!(packets, scan.packets as f64, "scanprof's packets vs the veth's");

    let sent = &claims["sent"];
    assert_eq!(f64_at(&sent["claimed"], "sent"), last["sent-total"] * p, "{sent}");
    assert_eq!(
        f64_at(&sent["claimed"], "sent"),
        packets,
        "zmap's own total: {sent}"
    );
    assert_eq!(f64_at(&sent["measured"], "sent.measured"), packets, "{sent}");
    let failed = &claims["send_failures"];
    assert_eq!(
        f64_at(&failed["claimed"], "send_failures"),
        last["sendto-fail-total"],
        "{failed}"
    );
    assert_eq!(
        failed["measured"], failed["claimed"],
        "scanprof's failed sends: {failed}"
    );
    let drops = &claims["pcap_drops"];
    assert_eq!(
        f64_at(&drops["claimed"], "pcap_drops"),
        last["pcap-drop-total"],
        "{drops}"
    );
    assert!(drops["measured"].is_null(), "{drops}");
    // The rate: one of the file's per-second counts (times -P), near what left the veth.
    let rate = f64_at(&claims["rate"]["claimed"], "rate");
    assert!(
        rows.iter().any(|r| r["sent-last-one-sec"] * p == rate),
        "{rate} is none of the file's sent-last-one-sec x {p}"
    );
    // Beside the capture's mean over the whole scan: zmap's spin pacer slows when the machine
    // is busy (52 of 100 pps once under load 8.5 on two CPUs; the capture 88.8 against a median
    // of 100 another time), and the claim is a median of the second half, so only a loose
    // bound; the exact agreement is with the file's rows.
    assert_within("zmap's status-file rate vs the capture", rate, cap.pps(), 0.25);
    let notes = s["scanner"]["notes"].to_string();
    assert!(
        !notes.contains("status-updates-file"),
        "notes on the status file: {notes}"
    );
    drop(run);
    test.assert_released("scanprof run");
    lab.destroy();
}

/// zmap started by the test with `-u status.csv` in its own working directory, attached after
/// a second of sending: scanprof finds the file from /proc/PID/cmdline and /proc/PID/cwd and reads
/// it from attach on. Totals count from zmap's start, so they stand alone (no measured figure).
#[test]
fn zmap_status_updates_file_is_found_and_read_under_attach() {
    let test = privileged();
    require_scanner("zmap");
    let lab = ScanLab::new();
    let dir = StatusDir::new("zmap-attach");
    let (per_s, probes) = (25u32, 4u32);
    let scan = zmap_with_status_file(&lab, per_s, probes, "status.csv");
    let capture = TxCapture::start(lab.lab());
    let launched = in_sender(&lab, &scan.argv);
    let mut cmd = std::process::Command::new(&launched[0]);
    cmd.args(&launched[1..]).current_dir(&dir.0);
    let zmap = Proc::spawn("zmap", cmd, false);
    let deadline = Instant::now() + Duration::from_secs(10);
    while capture.packets_so_far() == 0 {
        assert!(Instant::now() < deadline, "zmap sent nothing within 10 s");
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_secs(1));
    let attach = Proc::scanprof(&strings(&[
        "attach",
        "-p",
        &zmap.pid().to_string(),
        "--json",
        "--profile",
        "zmap",
        "--duration",
        "20",
    ]));
    let run = attach.finish(RUN_TIMEOUT);
    let zmap = zmap.finish(RUN_TIMEOUT);
    let cap = capture.stop();
    run.assert_success();
    zmap.assert_success();

    let rows = zmap_status_rows(&dir.0.join("status.csv"));
    let last = rows.last().expect("no status rows");
    let s = run.summary_json();
    precision::assert_precise_run("zmap_status_updates_file_is_found_and_read_under_attach", &run);
    let claims = status_claims(&s);
    eprintln!("zmap's last status row: {last:?}");
    eprintln!("status claims: {:#}", serde_json::to_value(&claims).unwrap());
    assert_eq!(claims.len(), 4, "{claims:?}");
    let p = probes as f64;
    let sent = &claims["sent"];
    assert_eq!(f64_at(&sent["claimed"], "sent"), last["sent-total"] * p, "{sent}");
    assert_eq!(f64_at(&sent["claimed"], "sent"), scan.packets as f64, "{sent}");
    assert!(
        sent["measured"].is_null(),
        "counted from zmap's start, not attach: {sent}"
    );
    assert!(
        sent["what"].as_str().unwrap_or("").contains("not from attach"),
        "{sent}"
    );
    let rate = f64_at(&claims["rate"]["claimed"], "rate");
    assert!(
        rows.iter().any(|r| r["sent-last-one-sec"] * p == rate),
        "{rate} is none of the file's sent-last-one-sec x {p}"
    );
    eprintln!(
        "rate claim {rate} pps; capture {:.1} pps over the scan; requested {}",
        cap.pps(),
        per_s * probes
    );
    assert_within("zmap's status-file rate vs the capture", rate, cap.pps(), 0.25);
    drop(run);
    test.assert_released("scanprof attach");
    lab.destroy();
}

/// A masscan that has `--status-ndjson` (1.3.9 and later; Debian 12 ships 1.3.2, which
/// refuses it): `SCANPROF_MASSCAN_NDJSON=/path/to/masscan`.
fn masscan_with_status_ndjson() -> String {
    let path = std::env::var("SCANPROF_MASSCAN_NDJSON").unwrap_or_else(|_| {
        panic!(
            "set SCANPROF_MASSCAN_NDJSON to a masscan 1.3.9 or later (Debian 12's 1.3.2 has no \
             --status-ndjson): e.g. `make` in a checkout of github.com/robertdavidgraham/masscan, then \
             SCANPROF_MASSCAN_NDJSON=$PWD/bin/masscan"
        )
    });
    let out = std::process::Command::new(&path)
        .arg("--version")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {path}: {e}"));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        !text.contains("version 1.3.2"),
        "{path} is masscan 1.3.2, which has no --status-ndjson"
    );
    path
}

/// masscan --status-ndjson under `scanprof run`: its NDJSON on stderr (which scanprof passes
/// on) is read as claims; the last object's `progress.syn.sent` is the `sent` claim and equals
/// the packets scanprof and the veth counted; the rate claim is one of its `rate.pps` values.
#[test]
#[ignore = "needs masscan 1.3.9+ in SCANPROF_MASSCAN_NDJSON: Debian 12's masscan 1.3.2 has no --status-ndjson"]
fn masscan_status_ndjson_figures_are_claims_under_run() {
    let test = privileged();
    let binary = masscan_with_status_ndjson();
    let lab = ScanLab::new();
    let (rate, ports) = (500u32, 2000u32);
    let mut scan = masscan(&lab, rate, ports);
    scan.argv[0] = binary;
    scan.argv.push("--status-ndjson".into());
    let capture = TxCapture::start(lab.lab());
    let mut nudger = Nudger::new(lab.lab());
    let tx_before = lab.tx_packets();
    let mut args = strings(&["run", "--json", "--profile", "masscan", "--duration", "20", "--"]);
    args.extend(in_sender(&lab, &scan.argv));
    let expected = scan.packets;
    let run = Proc::scanprof(&args)
        .finish_polling(RUN_TIMEOUT, || nudger.poll(capture.packets_so_far() >= expected));
    let cap = capture.stop();
    drop(nudger);
    let tx = lab.tx_packets() - tx_before;
    run.assert_success();
    assert_eq!(tx, scan.packets, "veth tx_packets\n{}", run.context());

    // masscan's own NDJSON, as it reached scanprof's stderr.
    let objects: Vec<Value> = run
        .stderr_lines
        .iter()
        .filter(|l| l.starts_with('{'))
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let last = objects
        .last()
        .unwrap_or_else(|| panic!("no NDJSON status on stderr\n{}", run.context()));
    let rates: Vec<f64> = objects.iter().filter_map(|o| o["rate"]["pps"].as_f64()).collect();
    let s = run.summary_json();
    precision::assert_precise_run("masscan_status_ndjson_figures_are_claims_under_run", &run);
    let claims = status_claims(&s);
    eprintln!("masscan's last status: {last}");
    eprintln!("status claims: {:#}", serde_json::to_value(&claims).unwrap());
    assert_eq!(claims.len(), 2, "rate and sent: {claims:?}");
    let packets = s["packets"].as_u64().expect("packets") as f64;
    assert_eq!(packets, scan.packets as f64);
    let sent = &claims["sent"];
    assert_eq!(
        f64_at(&sent["claimed"], "sent"),
        f64_at(&last["progress"]["syn"]["sent"], "syn.sent"),
        "{sent}"
    );
    assert_eq!(f64_at(&sent["claimed"], "sent"), packets, "{sent}");
    assert_eq!(f64_at(&sent["measured"], "sent.measured"), packets, "{sent}");
    let claimed_rate = f64_at(&claims["rate"]["claimed"], "rate");
    assert!(
        rates.contains(&claimed_rate),
        "{claimed_rate} is none of {rates:?}"
    );
    assert_within(
        "masscan's NDJSON rate vs the capture",
        claimed_rate,
        cap.pps(),
        0.05,
    );
    drop(run);
    test.assert_released("scanprof run");
    lab.destroy();
}

/// The rate set for the wrong unit (issue 13): `zmap -r 25 -P 4` sends 100 packets per second
/// (25 targets/s, 4 probes each), and scanprof told `--requested 25` (the target rate taken for
/// packets) judges the run against zmap's own 100 pps: verdict `rate_unit` with the figures per
/// target, no `above_requested` +300%; the capture's rate is the truth of both.
#[test]
fn zmap_with_probes_per_target_against_a_rate_in_targets_is_the_wrong_unit() {
    let test = privileged();
    require_scanner("zmap");
    let lab = ScanLab::new();
    let (per_s, probes) = (25u32, 4u32);
    let scan = zmap(&lab, per_s, probes, false);
    let capture = TxCapture::start(lab.lab());
    let tx_before = lab.tx_packets();
    let mut args = strings(&[
        "run",
        "--json",
        "--profile",
        "zmap",
        "--requested",
        &per_s.to_string(),
        "--duration",
        "20",
        "--",
    ]);
    args.extend(in_sender(&lab, &scan.argv));
    let run = Proc::scanprof(&args).finish(RUN_TIMEOUT);
    let cap = capture.stop();
    let tx = lab.tx_packets() - tx_before;
    run.assert_success();
    assert_eq!(tx, scan.packets, "veth tx_packets\n{}", run.context());
    let s = run.summary_json();
    precision::assert_precise_run(
        "zmap_with_probes_per_target_against_a_rate_in_targets_is_the_wrong_unit",
        &run,
    );
    eprintln!("verdicts: {:#}", s["verdicts"]);
    let unit = &s["scanner"]["requested"]["unit"];
    assert_eq!(unit["counts"], "targets", "{unit}");
    assert_eq!(f64_at(&unit["packets_per_target"], "n"), probes as f64, "{unit}");
    assert_eq!(
        f64_at(&unit["packet_pps"], "packet_pps"),
        (per_s * probes) as f64,
        "{unit}"
    );
    let verdicts = s["verdicts"].as_array().expect("verdicts");
    let v = verdicts
        .iter()
        .find(|v| v["cause"] == "rate_unit")
        .unwrap_or_else(|| panic!("no rate_unit: {verdicts:?}"));
    let sentence = v["sentence"].as_str().unwrap();
    assert!(sentence.contains("zmap's rate counts targets"), "{sentence}");
    assert!(
        sentence.contains("each target gets 4 packets (argv: -P 4)"),
        "{sentence}"
    );
    assert!(
        !verdicts.iter().any(|v| v["cause"] == "above_requested"),
        "{verdicts:?}"
    );
    // Per target, as the capture saw it: its rate / 4 is the achieved targets/s, within 10%.
    let achieved = f64_at(&s["achieved_pps"], "achieved_pps");
    assert_within("scanprof vs the capture", achieved, cap.pps(), 0.10);
    let per_target = format!("{:.1} targets/s", achieved / probes as f64);
    let per_target_whole = format!("{:.0} targets/s", achieved / probes as f64);
    let evidence = v["evidence"].to_string();
    assert!(
        evidence.contains(&per_target) || evidence.contains(&per_target_whole),
        "{per_target}: {evidence}"
    );
    drop(run);
    test.assert_released("scanprof run");
    lab.destroy();
}

// ---- a scanner's listener: its packet-socket ring in the receive funnel ------------------------

/// masscan reads the target's replies (here RSTs from closed ports) through libpcap's TPACKET
/// ring, without a syscall per frame. Its ring must appear in the receive funnel: one packet
/// socket of masscan's, a TPACKET ring, and the frames that reached it (queued + dropped full)
/// as many as the veth received (`ip -s link`), plus at most the frames the kernel itself sent
/// on it (a packet socket sees outgoing frames but its own), less at most the nudges that let
/// masscan exit (those that arrive after masscan closed its socket). When the ring dropped
/// frames,
/// `ring_full` says so with their share.
#[test]
fn masscans_listener_ring_is_in_the_receive_funnel() {
    let test = privileged();
    require_scanner("masscan");
    let lab = ScanLab::with(LabConfig { tbf: None });
    let (rate, ports) = (3_000u32, 3_000u32);
    let scan = masscan(&lab, rate, ports);
    let link = |what: &str| {
        scanprof::system::netstat::link_stats(Some(&lab.lab().sender_ns), &lab.lab().sender_dev)
            .unwrap_or_else(|e| panic!("ip -s link {what}: {e:#}"))
    };
    let before = link("before");
    let mut nudger = Nudger::new(lab.lab());
    let started = Instant::now();
    let mut args = strings(&[
        "run",
        "--json",
        "--interval",
        "0.5",
        "--profile",
        "masscan",
        "--duration",
        "20",
        "--",
    ]);
    args.extend(in_sender(&lab, &scan.argv));
    let over_after = Duration::from_secs_f64(ports as f64 / rate as f64 + 1.5);
    let run =
        Proc::scanprof(&args).finish_polling(RUN_TIMEOUT, || nudger.poll(started.elapsed() >= over_after));
    let nudges = u64::from(nudger.sent);
    drop(nudger);
    let after = link("after");
    run.assert_success();
    let masscan_pid = root_pid(&run.started());
    let summary = run.summary();
    precision::assert_precise_run("masscans_listener_ring_is_in_the_receive_funnel", &run);
    let receive = summary
        .receive
        .as_ref()
        .unwrap_or_else(|| panic!("no receive funnel for masscan\n{}", run.context()));
    let rings: Vec<_> = receive.rings.iter().filter(|r| r.pid == masscan_pid).collect();
    assert_eq!(rings.len(), 1, "masscan's packet sockets: {:#?}", receive.rings);
    let ring = rings[0];
    assert!(
        matches!(
            ring.kind,
            scanprof::collect::rings::RingKind::TpacketV2 | scanprof::collect::rings::RingKind::TpacketV3
        ),
        "{ring:?}"
    );
    let rx = after.rx_packets - before.rx_packets;
    let others_tx = (after.tx_packets - before.tx_packets).saturating_sub(scan.packets);
    let seen = ring.queued_total + ring.dropped_total;
    eprintln!(
        "masscan's ring: {:?}, {} frames, {} bytes: {} queued, {} dropped; the veth received {rx} ({nudges} nudges), sent {others_tx} beside masscan's",
        ring.kind, ring.frames, ring.ring_bytes, ring.queued_total, ring.dropped_total
    );
    assert!(
        rx >= ports as u64 / 2,
        "the target did not answer: {rx} frames received"
    );
    assert!(
        seen + nudges >= rx && seen <= rx + others_tx,
        "frames at masscan's socket {seen} vs the veth's {rx} received ({nudges} of them nudges; +{others_tx} sent by others): {ring:?}"
    );
    assert_eq!(receive.count(StageName::RingQueued), ring.queued_total);
    assert_eq!(receive.count(StageName::RingDrops), ring.dropped_total);
    let ring_full = summary
        .verdicts
        .iter()
        .find(|v| v.cause == scanprof::analysis::verdict::Cause::RingFull);
    // Only incoming frames are replies: the kernel's own frames on the veth (its RSTs to
    // SYN-ACKs) are copied to masscan's socket too, and are no replies it missed.
    let incoming_dropped = ring.dropped_total.saturating_sub(ring.outgoing_total);
    if incoming_dropped > 0 {
        let v = ring_full.unwrap_or_else(|| panic!("no ring_full: {:#?}", summary.verdicts));
        let truth = incoming_dropped as f64 / (seen - ring.outgoing_total) as f64;
        assert!((v.share - truth).abs() < 1e-9, "{v:?}");
        assert!(v.evidence.iter().any(|e| e.contains("masscan's")), "{v:#?}");
        assert!(v.sentence.starts_with("masscan's listener missed"), "{v:#?}");
    } else {
        assert!(ring_full.is_none(), "{:#?}", summary.verdicts);
    }
    test.assert_released("scanprof run");
    lab.destroy();
}

// ---- zmap's listener ring across its own PACKET_STATISTICS reads -------------------------------

/// zmap (libpcap, TPACKET_V3) reads PACKET_STATISTICS about once a second (`pcap_stats`, for its
/// status line), and each read clears the kernel's counters of its socket. A scan of ~6 s at
/// 25 targets/s x 2 probes, each answered by a RST from the target namespace's closed port:
/// scanprof's `ring_queued` + `ring_drops` of zmap's socket must equal the replies that reached
/// it, counted by the test's own packet socket on the same veth (every frame the veth receives
/// is handed to each packet socket bound to it, and zmap's pcap filter keeps the TCP RST and
/// SYN+ACK ones), with no clear left unexplained. Before send_path captured those reads, the
/// replies counted between scanprof's sample and zmap's read were lost (a lower bound, often 0).
#[test]
fn zmap_listener_ring_counts_every_reply_across_its_statistics_reads() {
    let test = privileged();
    require_scanner("zmap");
    let lab = ScanLab::new();
    let (per_s, probes) = (25u32, 2u32);
    let mut scan = zmap(&lab, per_s, probes, false);
    // A two-second cooldown: the last replies come in while zmap still reads.
    let c = scan
        .argv
        .iter()
        .position(|a| a == "-c")
        .expect("-c in zmap's argv");
    scan.argv[c + 1] = "2".into();
    let capture = TxCapture::start(lab.lab());
    let tx_before = lab.tx_packets();
    let mut args = strings(&["run", "--json", "--profile", "zmap", "--duration", "20", "--"]);
    args.extend(in_sender(&lab, &scan.argv));
    let run = Proc::scanprof(&args).finish(RUN_TIMEOUT);
    let cap = capture.stop();
    let tx = lab.tx_packets() - tx_before;
    run.assert_success();
    assert_eq!(tx, scan.packets, "veth tx_packets\n{}", run.context());
    assert_eq!(cap.drops, 0, "the capture lost frames: {cap:?}");
    // Every probe was answered: one RST per probe.
    assert_eq!(cap.incoming_tcp_replies, scan.packets, "{cap:?}");

    let summary = run.summary();
    precision::assert_precise_run(
        "zmap_listener_ring_counts_every_reply_across_its_statistics_reads",
        &run,
    );
    let receive = summary
        .receive
        .as_ref()
        .unwrap_or_else(|| panic!("no receive funnel\n{}", run.context()));
    eprintln!(
        "zmap: {} replies reached its veth; scanprof ring_queued {} ring_drops {}; rings {:#?}",
        cap.incoming_tcp_replies,
        receive.count(StageName::RingQueued),
        receive.count(StageName::RingDrops),
        receive.rings
    );
    // zmap holds two packet sockets: its listener's TPACKET_V3 ring (libpcap) and the one it
    // sends on (no ring, every device, never read), which gets the same replies in its receive
    // queue: listed, and not a reader.
    let listener: Vec<_> = receive
        .rings
        .iter()
        .filter(|r| r.kind == scanprof::collect::rings::RingKind::TpacketV3)
        .collect();
    assert_eq!(listener.len(), 1, "{:#?}", receive.rings);
    assert_eq!(
        listener[0].queued_total + listener[0].dropped_total,
        cap.incoming_tcp_replies,
        "zmap's listener ring: {:#?}",
        listener[0]
    );
    let unread: Vec<_> = receive.rings.iter().filter(|r| !r.is_reader()).collect();
    assert_eq!(unread.len(), 1, "zmap's send socket: {:#?}", receive.rings);
    assert_eq!(unread[0].kind, scanprof::collect::rings::RingKind::Queue);
    assert!(unread[0].queued_total > 0, "{:#?}", unread[0]);
    // The funnel counts what zmap reads: each reply once, not once per socket.
    assert_eq!(
        receive.count(StageName::RingQueued) + receive.count(StageName::RingDrops),
        cap.incoming_tcp_replies,
        "{:#?}",
        receive.rings
    );
    assert!(
        receive.rings.iter().all(|r| r.clears == 0),
        "a clear scanprof did not capture: {:#?}",
        receive.rings
    );
    drop(run);
    test.assert_released("scanprof run");
    lab.destroy();
}
