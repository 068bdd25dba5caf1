//! The ways the reference sender hands packets to the kernel: sendto(2) on a UDP socket, sendto
//! on a raw IP socket (IP_HDRINCL, headers built here), sendmmsg(2) batches, and an AF_PACKET
//! socket (one sendto per frame, or a PACKET_TX_RING flushed once per batch). Every method
//! checks the destination itself ([`check_destination`]), so none can send anywhere else.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use anyhow::{bail, ensure, Context, Result};
use nix::errno::Errno;
use nix::ifaddrs::getifaddrs;
use nix::net::if_::InterfaceFlags;
use nix::sys::socket::{setsockopt, sockopt, SockaddrIn, SockaddrLike};

use crate::netlab;

/// A send method by its name (`--method sendto`), without its settings: what the baseline
/// matrix measures and what `scanprof send --json` reports. Serde writes it as its name.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MethodKind {
    /// sendto(2) on a UDP socket
    #[default]
    Sendto,
    /// sendto(2) on a raw IP socket
    Raw,
    /// sendmmsg(2) batches on a UDP socket
    Sendmmsg,
    /// an AF_PACKET socket
    Packet,
}

impl MethodKind {
    /// Every method, in code order.
    pub const ALL: [MethodKind; 4] = [
        MethodKind::Sendto,
        MethodKind::Raw,
        MethodKind::Sendmmsg,
        MethodKind::Packet,
    ];

    /// The name on the command line (`--method sendmmsg`) and in the JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            MethodKind::Sendto => "sendto",
            MethodKind::Raw => "raw",
            MethodKind::Sendmmsg => "sendmmsg",
            MethodKind::Packet => "packet",
        }
    }
}

impl std::fmt::Display for MethodKind {
    /// The name, padded as a string is (`{:<9}` in the baseline's method table).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

/// A name that is no send method of the reference sender.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown send method {0:?}: use sendto, raw, sendmmsg or packet")]
pub struct UnknownMethod(pub String);

impl std::str::FromStr for MethodKind {
    type Err = UnknownMethod;

    fn from_str(s: &str) -> std::result::Result<MethodKind, UnknownMethod> {
        MethodKind::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| UnknownMethod(s.to_string()))
    }
}

/// Whether the sender may send to `ip`: loopback (127.0.0.0/8) or the lab range 10.99.0.0/24,
/// which `crate::netlab` only ever configures inside namespaces it creates. Anything else could
/// leave the machine. Every send method further refuses the lab range unless the sending thread
/// is in a lab namespace, since elsewhere it would follow the default route.
pub fn is_safe_destination(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    ip.is_loopback() || (a, b, c) == (10, 99, 0)
}

/// Bytes of the big-endian sequence number at the start of every payload.
pub const SEQ_BYTES: usize = 8;
const ETH_HLEN: usize = 14;
const IP_HLEN: usize = 20;
const UDP_HLEN: usize = 8;
const ETH_P_IP: u16 = 0x0800;
/// Source port of raw and packet frames when none is given.
const DEFAULT_RAW_SRC_PORT: u16 = 40_000;
/// TPACKET_ALIGN(sizeof(struct tpacket2_hdr)): where a TX frame's data starts in its slot.
const TX_DATA_OFFSET: usize = 32;
/// How long a TX ring slot may stay in flight before the sender gives up on it (ns).
const RING_SLOT_PATIENCE_NS: u64 = 1_000_000_000;

/// How packets reach the kernel (`--method`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Method {
    /// One sendto(2) per packet on a UDP socket.
    Sendto,
    /// One sendto(2) per packet on a raw IP socket (IPPROTO_RAW): IP and UDP headers built here.
    Raw,
    /// sendmmsg(2), `batch` packets per call, on a UDP socket.
    Sendmmsg { batch: u32 },
    /// AF_PACKET socket, Ethernet frames built here, on `dev` (None: the route's device).
    /// With `ring`, frames go through a PACKET_TX_RING, `batch` per flush; else one sendto each.
    Packet {
        ring: bool,
        batch: u32,
        dev: Option<String>,
    },
}

impl Method {
    /// The method without its settings.
    pub fn kind(&self) -> MethodKind {
        match self {
            Method::Sendto => MethodKind::Sendto,
            Method::Raw => MethodKind::Raw,
            Method::Sendmmsg { .. } => MethodKind::Sendmmsg,
            Method::Packet { .. } => MethodKind::Packet,
        }
    }

    /// Its name (`sendmmsg`).
    pub fn name(&self) -> &'static str {
        self.kind().as_str()
    }

    /// Packets per send call (one slot of the pacer).
    pub fn batch(&self) -> u32 {
        match self {
            Method::Sendto | Method::Raw | Method::Packet { ring: false, .. } => 1,
            Method::Sendmmsg { batch }
            | Method::Packet {
                ring: true, batch, ..
            } => *batch,
        }
    }
}

/// Where and what to send, as the methods need it.
#[derive(Debug, Clone)]
pub struct Target {
    pub to: SocketAddrV4,
    /// which destinations may be sent to
    pub destinations: Destinations,
    /// UDP payload bytes (>= SEQ_BYTES)
    pub size: usize,
    pub sndbuf: Option<usize>,
    /// 0: any (UDP sockets) or [`DEFAULT_RAW_SRC_PORT`] (raw and packet)
    pub src_port: u16,
    /// a packet socket receives every frame of the namespace (ETH_P_ALL), never read
    pub keep_replies: bool,
    /// packet i goes to `to`'s port + (i mod ports) (UDP sockets only)
    pub ports: u16,
}

/// Which destinations a send may go to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Destinations {
    /// loopback, and the lab range from inside a lab namespace: the labs, the baseline and this
    /// project's tests (`SCANPROF_SEND_LOCAL_ONLY=1` holds `scanprof send` to it)
    #[default]
    LocalOnly,
    /// the one address a user named on `scanprof send`'s command line, wherever it is
    Named,
}

impl Destinations {
    /// What `scanprof send` allows: the address its user named, unless the environment holds
    /// it to local destinations (`SCANPROF_SEND_LOCAL_ONLY=1`, which the tests set).
    pub fn for_command_line() -> Destinations {
        if std::env::var_os("SCANPROF_SEND_LOCAL_ONLY").is_some_and(|v| v == "1") {
            Destinations::LocalOnly
        } else {
            Destinations::Named
        }
    }
}

/// Checks `to` against `policy`: a named destination is taken as it is; a local-only send refuses
/// any destination but loopback, or the lab range from inside a lab namespace.
pub fn check_destination(to: Ipv4Addr, policy: Destinations) -> Result<()> {
    if policy == Destinations::Named {
        return Ok(());
    }
    ensure!(
        is_safe_destination(to),
        "refusing to send to {to}: only 127.0.0.0/8 and the lab range 10.99.0.0/24 are allowed"
    );
    if !to.is_loopback() && !netlab::thread_in_lab_namespace()? {
        bail!(
            "refusing to send to {to} outside a lab namespace: elsewhere the lab range would follow the default route"
        );
    }
    Ok(())
}

/// An open sender: a socket ready to send numbered packets to one safe destination, and the
/// errors its sends met.
pub struct Sender {
    kind: Kind,
    /// errno name -> failed packets
    errors: BTreeMap<String, u64>,
}

enum Kind {
    Udp(UdpSocket, Datagrams),
    Raw(OwnedFd, Frame),
    Packet(OwnedFd, Frame, libc::sockaddr_ll),
    Ring(OwnedFd, TxRing, Frame),
}

impl Sender {
    /// Opens the socket for `method` towards `target`, after checking the destination.
    pub fn open(method: &Method, target: &Target) -> Result<Sender> {
        check_destination(*target.to.ip(), target.destinations)?;
        ensure!(
            !matches!(method, Method::Packet { .. }) || is_safe_destination(*target.to.ip()),
            "--method packet builds whole frames for loopback and the lab veth only: to {} use \
             --method sendto, sendmmsg or raw",
            target.to.ip()
        );
        let ports = target.ports.max(1);
        ensure!(
            ports == 1 || matches!(method, Method::Sendto | Method::Sendmmsg { .. }),
            "--ports goes with --method sendto or sendmmsg"
        );
        ensure!(
            u32::from(target.to.port()) + u32::from(ports) - 1 <= u32::from(u16::MAX),
            "--ports {ports} from port {} passes port 65535",
            target.to.port()
        );
        let kind = match method {
            Method::Sendto | Method::Sendmmsg { .. } => {
                let socket = UdpSocket::bind(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, target.src_port))
                    .with_context(|| format!("cannot bind UDP source port {}", target.src_port))?;
                set_sndbuf(&socket, target.sndbuf)?;
                let batch = method.batch() as usize;
                Kind::Udp(socket, Datagrams::new(batch, target.size, target.to, ports))
            }
            Method::Raw => {
                // SAFETY: plain socket(2); the fd is owned by the OwnedFd right away.
                let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_RAW) };
                let fd = owned(fd).context("cannot open a raw IP socket (needs CAP_NET_RAW: run as root)")?;
                set_sndbuf(&fd, target.sndbuf)?;
                let src = route_source(target.to)?;
                Kind::Raw(fd, Frame::new(None, src, target))
            }
            Method::Packet { ring, batch, dev } => {
                let link = Link::find(dev.as_deref(), target.to)?;
                // Protocol 0: this socket receives nothing, it only sends; ETH_P_ALL (network
                // order) with keep_replies: every frame queues on it, unread until it closes.
                let protocol = if target.keep_replies {
                    i32::from((libc::ETH_P_ALL as u16).to_be())
                } else {
                    0
                };
                // SAFETY: plain socket(2); the fd is owned by the OwnedFd right away.
                let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, protocol) };
                let fd =
                    owned(fd).context("cannot open an AF_PACKET socket (needs CAP_NET_RAW: run as root)")?;
                set_sndbuf(&fd, target.sndbuf)?;
                if target.keep_replies {
                    // Room for minutes of unread replies at a lab's rate: they must still be
                    // queued when the socket closes, not dropped for a full buffer before.
                    setsockopt(&fd, sockopt::RcvBufForce, &KEPT_REPLIES_RCVBUF)
                        .or_else(|_| setsockopt(&fd, sockopt::RcvBuf, &KEPT_REPLIES_RCVBUF))
                        .context("cannot size the receive buffer for --keep-replies")?;
                }
                let frame = Frame::new(Some((link.mac, link.peer_mac)), link.src, target);
                let addr = link.sockaddr();
                if *ring {
                    bind_packet(&fd, &addr)?;
                    let ring = TxRing::new(&fd, frame.bytes.len(), *batch as usize)?;
                    Kind::Ring(fd, ring, frame)
                } else {
                    Kind::Packet(fd, frame, addr)
                }
            }
        };
        Ok(Sender {
            kind,
            errors: BTreeMap::new(),
        })
    }

    /// Sends packets first_seq..first_seq+n (n <= the method's batch): returns how many the
    /// kernel accepted; each failure is counted in [`Sender::errors`] and not retried.
    pub fn send(&mut self, first_seq: u64, n: usize) -> u64 {
        let mut accepted = 0u64;
        match &mut self.kind {
            Kind::Udp(socket, datagrams) if datagrams.batch() == 1 => {
                match datagrams.sendto(socket.as_raw_fd(), first_seq) {
                    Ok(()) => accepted = 1,
                    Err(e) => count(&mut self.errors, e, 1),
                }
            }
            Kind::Udp(socket, datagrams) => {
                let mut done = 0;
                while done < n {
                    match datagrams.sendmmsg(socket.as_raw_fd(), first_seq + done as u64, n - done) {
                        Ok(k) => {
                            accepted += k as u64;
                            done += k;
                        }
                        Err(e) => {
                            count(&mut self.errors, e, 1);
                            done += 1;
                        }
                    }
                }
            }
            Kind::Raw(fd, frame) => {
                frame.stamp(first_seq);
                let dest = SockaddrIn::from(frame.dst);
                // SAFETY: frame.bytes and dest are valid for the duration of the call.
                let r = unsafe {
                    libc::sendto(
                        fd.as_raw_fd(),
                        frame.bytes.as_ptr().cast(),
                        frame.bytes.len(),
                        0,
                        dest.as_ptr().cast(),
                        dest.len(),
                    )
                };
                match Errno::result(r) {
                    Ok(_) => accepted = 1,
                    Err(e) => count(&mut self.errors, e, 1),
                }
            }
            Kind::Packet(fd, frame, addr) => {
                frame.stamp(first_seq);
                // SAFETY: frame.bytes and addr are valid for the duration of the call.
                let r = unsafe {
                    libc::sendto(
                        fd.as_raw_fd(),
                        frame.bytes.as_ptr().cast(),
                        frame.bytes.len(),
                        0,
                        (addr as *const libc::sockaddr_ll).cast(),
                        std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
                    )
                };
                match Errno::result(r) {
                    Ok(_) => accepted = 1,
                    Err(e) => count(&mut self.errors, e, 1),
                }
            }
            Kind::Ring(fd, ring, frame) => {
                accepted = ring.send(fd.as_raw_fd(), frame, first_seq, n, &mut self.errors);
            }
        }
        accepted
    }

    /// Packets that failed, by errno name.
    pub fn errors(&self) -> &BTreeMap<String, u64> {
        &self.errors
    }

    /// Sends whatever a TX ring still holds and accounts for it; returns packets accepted.
    pub fn flush(&mut self) -> u64 {
        match &mut self.kind {
            Kind::Ring(fd, ring, _) => ring.reclaim(fd.as_raw_fd(), &mut self.errors),
            _ => 0,
        }
    }
}

fn count(errors: &mut BTreeMap<String, u64>, errno: Errno, packets: u64) {
    *errors.entry(format!("{errno:?}")).or_default() += packets;
}

fn owned(fd: RawFd) -> Result<OwnedFd> {
    if fd < 0 {
        return Err(Errno::last().into());
    }
    // SAFETY: fd was just returned by socket(2) and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// SO_RCVBUF of a packet socket that keeps its replies unread (`--keep-replies`): 8 MiB, some
/// 7,000 small frames.
const KEPT_REPLIES_RCVBUF: usize = 8 << 20;

fn set_sndbuf(fd: &impl std::os::fd::AsFd, bytes: Option<usize>) -> Result<()> {
    if let Some(bytes) = bytes {
        setsockopt(fd, sockopt::SndBufForce, &bytes)
            .or_else(|_| setsockopt(fd, sockopt::SndBuf, &bytes))
            .with_context(|| format!("cannot set SO_SNDBUF to {bytes} bytes"))?;
    }
    Ok(())
}

/// The source address the kernel would use towards `to` (a route lookup: connect(2) on a UDP
/// socket sends nothing).
fn route_source(to: SocketAddrV4) -> Result<Ipv4Addr> {
    let probe = UdpSocket::bind("0.0.0.0:0").context("cannot open a UDP socket for the route lookup")?;
    probe.connect(to).with_context(|| format!("no route to {to}"))?;
    match probe.local_addr()? {
        std::net::SocketAddr::V4(a) => Ok(*a.ip()),
        other => bail!("route lookup to {to} gave {other}"),
    }
}

/// One batch worth of UDP payload buffers plus the sendmmsg header arrays.
struct Datagrams {
    payloads: Vec<Vec<u8>>,
    iovecs: Vec<libc::iovec>,
    headers: Vec<libc::mmsghdr>,
    /// one address per destination port; packet `seq` goes to dests[seq % len]
    dests: Vec<SockaddrIn>,
}

impl Datagrams {
    fn new(batch: usize, size: usize, dest: SocketAddrV4, ports: u16) -> Self {
        let iovec = libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        };
        // SAFETY: mmsghdr is a C struct of integers and raw pointers; all-zero bytes are a valid
        // value (null pointers, zero lengths), and every pointer is set before use.
        let header: libc::mmsghdr = unsafe { std::mem::zeroed() };
        Self {
            payloads: vec![vec![0; size]; batch],
            iovecs: vec![iovec; batch],
            headers: vec![header; batch],
            dests: (0..ports.max(1))
                .map(|i| SockaddrIn::from(SocketAddrV4::new(*dest.ip(), dest.port().wrapping_add(i))))
                .collect(),
        }
    }

    fn dest(&self, seq: u64) -> &SockaddrIn {
        &self.dests[(seq % self.dests.len() as u64) as usize]
    }

    fn batch(&self) -> usize {
        self.payloads.len()
    }

    /// Writes sequence numbers first_seq.. into the first `n` payloads.
    fn stamp(&mut self, first_seq: u64, n: usize) {
        for (seq, payload) in (first_seq..).zip(&mut self.payloads[..n]) {
            payload[..SEQ_BYTES].copy_from_slice(&seq.to_be_bytes());
        }
    }

    fn sendto(&mut self, fd: RawFd, seq: u64) -> nix::Result<()> {
        self.stamp(seq, 1);
        let payload = &self.payloads[0];
        let dest = self.dest(seq);
        // SAFETY: payload and dest are valid for the duration of the call.
        let r = unsafe {
            libc::sendto(
                fd,
                payload.as_ptr().cast(),
                payload.len(),
                0,
                dest.as_ptr().cast(),
                dest.len(),
            )
        };
        Errno::result(r).map(drop)
    }

    /// Sends first_seq..first_seq+n with one sendmmsg; Ok(k) when the kernel took the first k.
    fn sendmmsg(&mut self, fd: RawFd, first_seq: u64, n: usize) -> nix::Result<usize> {
        self.stamp(first_seq, n);
        for (iovec, payload) in self.iovecs.iter_mut().zip(&mut self.payloads[..n]) {
            *iovec = libc::iovec {
                iov_base: payload.as_mut_ptr().cast(),
                iov_len: payload.len(),
            };
        }
        let iovecs = self.iovecs.as_mut_ptr();
        let count = self.dests.len() as u64;
        for (i, header) in self.headers[..n].iter_mut().enumerate() {
            let header = &mut header.msg_hdr;
            let dest = &self.dests[((first_seq + i as u64) % count) as usize];
            header.msg_name = dest.as_ptr().cast_mut().cast();
            header.msg_namelen = dest.len();
            header.msg_iov = iovecs.wrapping_add(i);
            header.msg_iovlen = 1;
        }
        // SAFETY: headers[..n] point at iovecs[..n], payloads[..n] and dest, all owned by self
        // and untouched until the call returns; n <= headers.len().
        let accepted = unsafe { libc::sendmmsg(fd, self.headers.as_mut_ptr(), n as u32, 0) };
        match Errno::result(accepted)? {
            // The kernel returns an error rather than 0 for a non-empty batch.
            0 => Err(Errno::UnknownErrno),
            k => Ok(k as usize),
        }
    }
}

/// A complete IPv4/UDP packet (with an Ethernet header for packet sockets), rebuilt per packet
/// only where the sequence number and the UDP checksum change.
#[derive(Clone)]
struct Frame {
    bytes: Vec<u8>,
    dst: SocketAddrV4,
    /// offset of the payload's sequence number
    seq_at: usize,
    /// offset of the UDP checksum
    csum_at: usize,
    /// one's-complement sum of the pseudo-header and the UDP datagram with the sequence zero
    base_sum: u32,
}

impl Frame {
    /// `macs` = (source, destination) for an Ethernet header; None for a raw IP packet.
    fn new(macs: Option<([u8; 6], [u8; 6])>, src: Ipv4Addr, target: &Target) -> Frame {
        let ip_at = if macs.is_some() { ETH_HLEN } else { 0 };
        let udp_len = UDP_HLEN + target.size;
        let mut bytes = vec![0u8; ip_at + IP_HLEN + udp_len];
        if let Some((src_mac, dst_mac)) = macs {
            bytes[..6].copy_from_slice(&dst_mac);
            bytes[6..12].copy_from_slice(&src_mac);
            bytes[12..14].copy_from_slice(&ETH_P_IP.to_be_bytes());
        }
        let sport = if target.src_port == 0 {
            DEFAULT_RAW_SRC_PORT
        } else {
            target.src_port
        };
        let ip = &mut bytes[ip_at..ip_at + IP_HLEN];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&((IP_HLEN + udp_len) as u16).to_be_bytes());
        ip[6..8].copy_from_slice(&0x4000u16.to_be_bytes()); // DF: no fragments, id 0 is fine
        ip[8] = 64;
        ip[9] = libc::IPPROTO_UDP as u8;
        ip[12..16].copy_from_slice(&src.octets());
        ip[16..20].copy_from_slice(&target.to.ip().octets());
        let ip_csum = !fold(sum16(ip, 0));
        ip[10..12].copy_from_slice(&ip_csum.to_be_bytes());
        let udp_at = ip_at + IP_HLEN;
        let udp = &mut bytes[udp_at..];
        udp[0..2].copy_from_slice(&sport.to_be_bytes());
        udp[2..4].copy_from_slice(&target.to.port().to_be_bytes());
        udp[4..6].copy_from_slice(&(udp_len as u16).to_be_bytes());
        let mut pseudo = [0u8; 12];
        pseudo[0..4].copy_from_slice(&src.octets());
        pseudo[4..8].copy_from_slice(&target.to.ip().octets());
        pseudo[9] = libc::IPPROTO_UDP as u8;
        pseudo[10..12].copy_from_slice(&(udp_len as u16).to_be_bytes());
        let base_sum = sum16(&bytes[udp_at..], sum16(&pseudo, 0));
        Frame {
            bytes,
            dst: target.to,
            seq_at: udp_at + UDP_HLEN,
            csum_at: udp_at + 6,
            base_sum,
        }
    }

    /// Writes `seq` and the UDP checksum that goes with it.
    #[inline]
    fn stamp(&mut self, seq: u64) {
        let be = seq.to_be_bytes();
        self.bytes[self.seq_at..self.seq_at + SEQ_BYTES].copy_from_slice(&be);
        let csum = match !fold(sum16(&be, self.base_sum)) {
            0 => 0xffff,
            c => c,
        };
        self.bytes[self.csum_at..self.csum_at + 2].copy_from_slice(&csum.to_be_bytes());
    }
}

/// One's-complement sum of big-endian 16-bit words (a trailing odd byte padded with zero).
fn sum16(bytes: &[u8], init: u32) -> u32 {
    let mut sum = u64::from(init);
    let mut words = bytes.chunks_exact(2);
    for w in &mut words {
        sum += u64::from(u16::from_be_bytes([w[0], w[1]]));
    }
    if let [last] = words.remainder() {
        sum += u64::from(*last) << 8;
    }
    while sum > 0xffff_ffff {
        sum = (sum & 0xffff_ffff) + (sum >> 32);
    }
    sum as u32
}

fn fold(mut sum: u32) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

/// The interface a packet socket sends on, and the addresses for its Ethernet header.
struct Link {
    ifindex: i32,
    mac: [u8; 6],
    peer_mac: [u8; 6],
    src: Ipv4Addr,
}

impl Link {
    /// The device `dev`, or the one holding the route's source address towards `to`. A loopback
    /// destination must go out a loopback device; a lab destination's neighbour must be
    /// resolved already (lab neighbours are permanent): this sender never sends ARP.
    fn find(dev: Option<&str>, to: SocketAddrV4) -> Result<Link> {
        let src = route_source(to)?;
        let addrs: Vec<_> = getifaddrs().context("cannot list network interfaces")?.collect();
        let name = match dev {
            Some(d) => d.to_string(),
            None => addrs
                .iter()
                .find(|a| {
                    a.address
                        .as_ref()
                        .and_then(|s| s.as_sockaddr_in())
                        .is_some_and(|s| s.ip() == src)
                })
                .map(|a| a.interface_name.clone())
                .with_context(|| format!("no interface holds {src}, the route's source towards {to}"))?,
        };
        let entries: Vec<_> = addrs.iter().filter(|a| a.interface_name == name).collect();
        ensure!(!entries.is_empty(), "no network interface named {name} here");
        let loopback = entries
            .iter()
            .any(|a| a.flags.contains(InterfaceFlags::IFF_LOOPBACK));
        ensure!(
            loopback == to.ip().is_loopback(),
            "refusing to send to {} on {name}: loopback destinations only on a loopback device, lab ones only on the lab's",
            to.ip()
        );
        let link = entries
            .iter()
            .find_map(|a| a.address.as_ref()?.as_link_addr().copied())
            .with_context(|| format!("{name} has no link-layer address"))?;
        if loopback {
            // ip_route_input drops 127.0.0.0/8 arriving from a device (IP_LOCALNET) unless
            // route_localnet is set: the frames would be counted as sent and never received.
            let path = format!("/proc/sys/net/ipv4/conf/{name}/route_localnet");
            let on = std::fs::read_to_string(&path).is_ok_and(|v| v.trim() == "1");
            ensure!(
                on,
                "packets from an AF_PACKET socket to {} are dropped on input (IP_LOCALNET) while {path} is 0: \
                 send into a lab namespace instead (or set it to 1 in this namespace)",
                to.ip()
            );
        }
        let mac = link.addr().unwrap_or([0; 6]);
        let peer_mac = if loopback {
            [0; 6]
        } else {
            neighbour_mac(&name, *to.ip())?
        };
        Ok(Link {
            ifindex: link.ifindex() as i32,
            mac,
            peer_mac,
            src,
        })
    }

    fn sockaddr(&self) -> libc::sockaddr_ll {
        // SAFETY: sockaddr_ll is plain integers; all-zero is a valid value.
        let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        addr.sll_family = libc::AF_PACKET as u16;
        addr.sll_protocol = ETH_P_IP.to_be();
        addr.sll_ifindex = self.ifindex;
        addr.sll_halen = 6;
        addr.sll_addr[..6].copy_from_slice(&self.peer_mac);
        addr
    }
}

/// The resolved MAC of `ip` on `dev` from this thread's namespace's ARP table.
fn neighbour_mac(dev: &str, ip: Ipv4Addr) -> Result<[u8; 6]> {
    let path = "/proc/thread-self/net/arp";
    let table = std::fs::read_to_string(path).with_context(|| format!("cannot read {path}"))?;
    // IP address, HW type, Flags, HW address, Mask, Device; flag 0x2 = complete.
    for line in table.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 6 || f[0] != ip.to_string() || f[5] != dev {
            continue;
        }
        let complete = u32::from_str_radix(f[2].trim_start_matches("0x"), 16).is_ok_and(|fl| fl & 2 != 0);
        let mut mac = [0u8; 6];
        let parts: Vec<&str> = f[3].split(':').collect();
        if complete && parts.len() == 6 {
            for (b, p) in mac.iter_mut().zip(parts) {
                *b = u8::from_str_radix(p, 16).with_context(|| format!("bad MAC {}", f[3]))?;
            }
            return Ok(mac);
        }
    }
    bail!("no resolved neighbour entry for {ip} on {dev}: the packet method sends no ARP (add a permanent neighbour, as the lab does)")
}

fn bind_packet(fd: &OwnedFd, addr: &libc::sockaddr_ll) -> Result<()> {
    let mut bind_addr = *addr;
    bind_addr.sll_protocol = 0; // bound to the device, still receiving nothing
                                // SAFETY: bind_addr is a valid sockaddr_ll of the size given.
    let r = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&bind_addr as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    Errno::result(r).context("cannot bind the packet socket to its device")?;
    Ok(())
}

/// A PACKET_TX_RING (TPACKET_V2): frames are written into shared slots marked
/// TP_STATUS_SEND_REQUEST, then one send(2) transmits them all.
struct TxRing {
    map: *mut u8,
    map_len: usize,
    block_size: usize,
    frame_size: usize,
    frames_per_block: usize,
    frames: usize,
    /// next slot to fill
    head: usize,
    /// slots filled by this process and not yet seen completed, in order
    pending: std::collections::VecDeque<usize>,
    frame_len: usize,
}

impl TxRing {
    fn new(fd: &OwnedFd, frame_len: usize, batch: usize) -> Result<TxRing> {
        let raw = fd.as_raw_fd();
        let set = |opt: libc::c_int, value: &[u8]| -> Result<()> {
            // SAFETY: value is a valid buffer of the length given for this option.
            let r = unsafe {
                libc::setsockopt(
                    raw,
                    libc::SOL_PACKET,
                    opt,
                    value.as_ptr().cast(),
                    value.len() as u32,
                )
            };
            Errno::result(r).map(drop).map_err(Into::into)
        };
        set(
            libc::PACKET_VERSION,
            &(libc::tpacket_versions::TPACKET_V2 as libc::c_int).to_ne_bytes(),
        )
        .context("cannot select TPACKET_V2")?;
        // Frames the kernel finds malformed are skipped rather than stopping the ring.
        set(libc::PACKET_LOSS, &1i32.to_ne_bytes()).context("cannot set PACKET_LOSS")?;
        let frame_size = (TX_DATA_OFFSET + frame_len).next_multiple_of(16);
        let block_size = frame_size.next_power_of_two().max(4096);
        let frames_per_block = block_size / frame_size;
        let frames = (2 * batch).max(64).next_multiple_of(frames_per_block);
        let req = libc::tpacket_req {
            tp_block_size: block_size as u32,
            tp_block_nr: (frames / frames_per_block) as u32,
            tp_frame_size: frame_size as u32,
            tp_frame_nr: frames as u32,
        };
        // SAFETY: tpacket_req is plain integers, viewed as bytes for setsockopt.
        let req_bytes = unsafe {
            std::slice::from_raw_parts(
                (&req as *const libc::tpacket_req).cast::<u8>(),
                std::mem::size_of_val(&req),
            )
        };
        set(libc::PACKET_TX_RING, req_bytes).context("cannot set up the PACKET_TX_RING")?;
        let map_len = block_size * (frames / frames_per_block);
        // SAFETY: maps the ring just configured on this socket; unmapped in Drop.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                raw,
                0,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(Errno::last()).context("cannot map the PACKET_TX_RING");
        }
        Ok(TxRing {
            map: map.cast(),
            map_len,
            block_size,
            frame_size,
            frames_per_block,
            frames,
            head: 0,
            pending: std::collections::VecDeque::new(),
            frame_len,
        })
    }

    fn slot(&self, i: usize) -> *mut u8 {
        let offset =
            (i / self.frames_per_block) * self.block_size + (i % self.frames_per_block) * self.frame_size;
        // SAFETY (of the later accesses): offset + frame_size <= map_len by construction.
        self.map.wrapping_add(offset)
    }

    fn status(&self, i: usize) -> u32 {
        // SAFETY: the slot header is inside the mapping; the kernel writes tp_status
        // concurrently, so it is read volatile.
        unsafe { std::ptr::read_volatile(self.slot(i).cast::<u32>()) }
    }

    /// Forgets completed slots: sent ones were counted by send(2)'s byte count; ones the kernel
    /// marked TP_STATUS_WRONG_FORMAT are counted as failed (EINVAL) and freed.
    fn settle(&mut self, errors: &mut BTreeMap<String, u64>) {
        while let Some(&i) = self.pending.front() {
            match self.status(i) {
                libc::TP_STATUS_AVAILABLE => {}
                libc::TP_STATUS_WRONG_FORMAT => {
                    count(errors, Errno::EINVAL, 1);
                    self.set_status(i, libc::TP_STATUS_AVAILABLE);
                }
                _ => return,
            }
            self.pending.pop_front();
        }
    }

    fn set_status(&self, i: usize, status: u32) {
        std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
        // SAFETY: as in status(); written volatile after the frame data (release fence).
        unsafe { std::ptr::write_volatile(self.slot(i).cast::<u32>(), status) };
    }

    /// Fills `n` slots with packets first_seq.. and flushes them with one send(2).
    fn send(
        &mut self,
        fd: RawFd,
        frame: &mut Frame,
        first_seq: u64,
        n: usize,
        errors: &mut BTreeMap<String, u64>,
    ) -> u64 {
        let mut accepted = 0;
        for k in 0..n {
            let i = self.head;
            if self.status(i) != libc::TP_STATUS_AVAILABLE {
                accepted += self.reclaim(fd, errors);
            }
            frame.stamp(first_seq + k as u64);
            let slot = self.slot(i);
            // SAFETY: the slot is free (AVAILABLE): the kernel does not read it until its status
            // says SEND_REQUEST; data and header stay within the slot (frame_size).
            unsafe {
                std::ptr::copy_nonoverlapping(
                    frame.bytes.as_ptr(),
                    slot.add(TX_DATA_OFFSET),
                    frame.bytes.len(),
                );
                let hdr = slot.cast::<libc::tpacket2_hdr>();
                (*hdr).tp_len = self.frame_len as u32;
            }
            self.set_status(i, libc::TP_STATUS_SEND_REQUEST);
            self.pending.push_back(i);
            self.head = (self.head + 1) % self.frames;
        }
        accepted + self.kick(fd, errors)
    }

    /// One blocking send(2) of every SEND_REQUEST slot; returns the packets it transmitted.
    fn kick(&mut self, fd: RawFd, errors: &mut BTreeMap<String, u64>) -> u64 {
        // SAFETY: a null buffer of length 0 is how a TX ring is flushed.
        let r = unsafe { libc::send(fd, std::ptr::null(), 0, 0) };
        let sent = match Errno::result(r) {
            Ok(bytes) => bytes as u64 / self.frame_len as u64,
            Err(e) => {
                // The kernel dropped the frame it was on; the rest stay queued for the next kick.
                count(errors, e, 1);
                0
            }
        };
        self.settle(errors);
        sent
    }

    /// Flushes until no slot is waiting (a few tries), then gives up on the leftovers: they are
    /// counted as failed (ETIMEDOUT) and their slots freed. Returns packets transmitted.
    fn reclaim(&mut self, fd: RawFd, errors: &mut BTreeMap<String, u64>) -> u64 {
        let mut sent = 0;
        let deadline = crate::system::monotonic_ns() + RING_SLOT_PATIENCE_NS;
        while !self.pending.is_empty() && crate::system::monotonic_ns() < deadline {
            let waiting = self
                .pending
                .iter()
                .any(|&i| self.status(i) == libc::TP_STATUS_SEND_REQUEST);
            if waiting {
                sent += self.kick(fd, errors);
            } else {
                std::hint::spin_loop();
                self.settle(errors);
            }
        }
        // Leftovers: no send(2) runs now, so SEND_REQUEST slots are not touched by the kernel.
        while let Some(i) = self.pending.pop_front() {
            count(errors, Errno::ETIMEDOUT, 1);
            if self.status(i) == libc::TP_STATUS_SEND_REQUEST {
                self.set_status(i, libc::TP_STATUS_AVAILABLE);
            }
        }
        sent
    }
}

impl Drop for TxRing {
    fn drop(&mut self) {
        // SAFETY: map was mapped with map_len in new() and nothing uses it after this.
        unsafe { libc::munmap(self.map.cast(), self.map_len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn safe_destinations_are_loopback_and_lab_range_only() {
        for ip in [
            "127.0.0.1",
            "127.255.255.254",
            "10.99.0.1",
            "10.99.0.2",
            "10.99.0.255",
        ] {
            assert!(is_safe_destination(ip.parse().expect("literal")), "{ip}");
        }
        for ip in [
            "10.99.1.1",
            "10.98.0.2",
            "10.0.0.1",
            "192.168.1.1",
            "8.8.8.8",
            "0.0.0.0",
        ] {
            assert!(!is_safe_destination(ip.parse().expect("literal")), "{ip}");
        }
    }

    fn target(ip: [u8; 4]) -> Target {
        Target {
            to: SocketAddrV4::new(Ipv4Addr::from(ip), 9000),
            destinations: Destinations::LocalOnly,
            size: 64,
            sndbuf: None,
            src_port: 1234,
            keep_replies: false,
            ports: 1,
        }
    }

    /// Packet i goes to port + (i mod N), with sendto and with sendmmsg; raw and packet frames
    /// refuse more than one port.
    #[test]
    fn packets_cycle_over_the_destination_ports() {
        for method in [Method::Sendto, Method::Sendmmsg { batch: 4 }] {
            let socks: Vec<std::net::UdpSocket> = (0..3)
                .map(|_| std::net::UdpSocket::bind("127.0.0.1:0").unwrap())
                .collect();
            // Three consecutive free ports are not guaranteed: bind the first, and try the
            // next two; skip this method's round when they are taken.
            let base = socks[0].local_addr().unwrap().port();
            drop(socks);
            let Ok(rx): Result<Vec<std::net::UdpSocket>, _> = (0..3)
                .map(|i| std::net::UdpSocket::bind(("127.0.0.1", base + i)))
                .collect()
            else {
                continue;
            };
            let mut t = target([127, 0, 0, 1]);
            t.to = SocketAddrV4::new(Ipv4Addr::LOCALHOST, base);
            t.src_port = 0;
            t.ports = 3;
            let mut sender = Sender::open(&method, &t).unwrap();
            let mut sent = 0;
            while sent < 12 {
                sent += sender.send(sent, method.batch() as usize);
            }
            sent += sender.flush();
            assert_eq!(sent, 12, "{}", method.name());
            let mut buf = [0u8; 128];
            for (i, r) in rx.iter().enumerate() {
                r.set_nonblocking(true).unwrap();
                let mut seqs = Vec::new();
                while let Ok(n) = r.recv(&mut buf) {
                    assert!(n >= 8);
                    seqs.push(u64::from_be_bytes(buf[..8].try_into().unwrap()));
                }
                assert_eq!(
                    seqs,
                    [i as u64, i as u64 + 3, i as u64 + 6, i as u64 + 9],
                    "{}",
                    method.name()
                );
            }
        }
        let mut t = target([127, 0, 0, 1]);
        t.ports = 2;
        let err = Sender::open(&Method::Raw, &t).err().expect("raw with two ports");
        assert!(err.to_string().contains("--ports goes with"), "{err}");
        t.to = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 65535);
        let err = Sender::open(&Method::Sendto, &t).err().expect("past port 65535");
        assert!(err.to_string().contains("passes port 65535"), "{err}");
    }

    /// A destination a user named is taken as it is (the check never touches the network);
    /// local-only sends still refuse it, and whole frames stay on loopback and the lab veth.
    #[test]
    fn a_named_destination_is_allowed_only_when_named() {
        let doc = Ipv4Addr::new(192, 0, 2, 1);
        assert!(check_destination(doc, Destinations::Named).is_ok());
        let err = check_destination(doc, Destinations::LocalOnly).unwrap_err();
        assert!(err.to_string().contains("refusing to send to 192.0.2.1"), "{err}");
        let mut t = target([192, 0, 2, 1]);
        t.destinations = Destinations::Named;
        let packet = Method::Packet {
            ring: false,
            batch: 1,
            dev: None,
        };
        let err = Sender::open(&packet, &t)
            .err()
            .expect("packet to a named address");
        assert!(
            err.to_string().contains("--method packet builds whole frames"),
            "{err}"
        );
    }

    #[test]
    fn every_method_refuses_unsafe_destinations() {
        let dev = Some("lo".to_string());
        for method in [
            Method::Sendto,
            Method::Raw,
            Method::Sendmmsg { batch: 8 },
            Method::Packet {
                ring: false,
                batch: 1,
                dev: dev.clone(),
            },
            Method::Packet {
                ring: true,
                batch: 8,
                dev,
            },
        ] {
            for ip in [[192, 0, 2, 1], [8, 8, 8, 8], [10, 99, 1, 2]] {
                let Err(err) = Sender::open(&method, &target(ip)) else {
                    panic!("{method:?} accepted {ip:?}");
                };
                assert!(format!("{err:#}").contains("refusing"), "{err:#}");
            }
            // The lab range from outside a lab namespace.
            let Err(err) = Sender::open(&method, &target([10, 99, 0, 2])) else {
                panic!("{method:?} accepted the lab range outside a lab");
            };
            assert!(format!("{err:#}").contains("outside a lab namespace"), "{err:#}");
        }
    }

    #[test]
    fn frames_carry_valid_ip_and_udp_checksums() {
        let t = target([127, 0, 0, 1]);
        let mut frame = Frame::new(Some(([2; 6], [4; 6])), Ipv4Addr::LOCALHOST, &t);
        assert_eq!(frame.bytes.len(), ETH_HLEN + IP_HLEN + UDP_HLEN + 64);
        for seq in [0u64, 1, 0xffff_ffff_ffff, u64::MAX] {
            frame.stamp(seq);
            let ip = &frame.bytes[ETH_HLEN..ETH_HLEN + IP_HLEN];
            assert_eq!(fold(sum16(ip, 0)), 0xffff, "IP header checksum");
            let udp = &frame.bytes[ETH_HLEN + IP_HLEN..];
            let mut pseudo = [0u8; 12];
            pseudo[0..4].copy_from_slice(&[127, 0, 0, 1]);
            pseudo[4..8].copy_from_slice(&[127, 0, 0, 1]);
            pseudo[9] = 17;
            pseudo[10..12].copy_from_slice(&(udp.len() as u16).to_be_bytes());
            assert_eq!(
                fold(sum16(udp, sum16(&pseudo, 0))),
                0xffff,
                "UDP checksum, seq {seq}"
            );
            assert_eq!(udp[8..16], seq.to_be_bytes());
        }
        assert_eq!(frame.bytes[..6], [4; 6]);
        assert_eq!(frame.bytes[12..14], [0x08, 0x00]);
    }

    #[test]
    fn a_loopback_destination_needs_a_loopback_device() {
        let method = Method::Packet {
            ring: false,
            batch: 1,
            dev: None,
        };
        // The route's device for 127.0.0.1 is lo: fine (opening the socket may need root).
        if let Err(err) = Sender::open(&method, &target([127, 0, 0, 1])) {
            let err = format!("{err:#}");
            assert!(
                err.contains("CAP_NET_RAW") || err.contains("route_localnet"),
                "{err}"
            );
        }
        let addrs: Vec<String> = getifaddrs()
            .map(|a| {
                a.filter(|i| !i.flags.contains(InterfaceFlags::IFF_LOOPBACK))
                    .map(|i| i.interface_name)
                    .collect()
            })
            .unwrap_or_default();
        if let Some(other) = addrs.first() {
            let method = Method::Packet {
                ring: false,
                batch: 1,
                dev: Some(other.clone()),
            };
            let Err(err) = Sender::open(&method, &target([127, 0, 0, 1])) else {
                panic!("127.0.0.1 accepted on {other}");
            };
            assert!(format!("{err:#}").contains("refusing"), "{err:#}");
        }
    }
}
