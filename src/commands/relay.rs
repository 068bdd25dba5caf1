//! `scanprof relay`: the reference packet relay (issue 15). One thread reads IPv4 packets from a
//! packet socket on one interface and writes each to every output (1 -> N fan-out), from a fixed
//! pool of buffers: a packet read takes a buffer and holds it until all N writes are done; a
//! write the kernel refuses (ENOBUFS from a full qdisc, EAGAIN) is retried on a later round; a
//! packet read when no buffer is free is dropped. It counts what it read, forwarded and dropped
//! for lack of a buffer, and the kernel's own count of what the reading socket dropped before
//! the read (PACKET_STATISTICS): the figures scanprof's relay funnel is held against (`scanprof
//! lab relay`, tests/relay.rs).

use std::collections::VecDeque;
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::cli::RelayOptions;

/// How long a read waits when the relay holds nothing to write.
const POLL: Duration = Duration::from_millis(50);
/// After the duration, how long the relay keeps retrying the writes it holds.
const DRAIN: Duration = Duration::from_secs(1);
/// Largest packet read (an IPv4 packet on any link here).
const BUFFER_BYTES: usize = 65_536;

/// What the relay did, by its own count.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RelayReport {
    /// outputs each packet is written to
    pub fanout: u32,
    /// buffers in the pool
    pub pool: u32,
    /// packets read from the input socket
    pub received: u64,
    /// packets whose every write was done
    pub forwarded: u64,
    /// writes done (sendto calls that sent the packet)
    pub writes: u64,
    /// writes the kernel refused (ENOBUFS, EAGAIN), each retried later
    pub refused_writes: u64,
    /// packets read when no buffer was free, dropped without a write
    pub pool_drops: u64,
    /// writes still pending when the drain after the duration ended, given up
    pub abandoned_writes: u64,
    /// packets the kernel queued to the reading socket and dropped there before the read
    /// (PACKET_STATISTICS tp_drops: its receive buffer was full)
    pub kernel_drops: u64,
    /// packets the kernel handed to the reading socket, dropped ones included (tp_packets)
    pub kernel_packets: u64,
    /// the reading socket's receive buffer as the kernel set it (SO_RCVBUF read back), bytes
    pub rcvbuf: u64,
    /// seconds it read for
    pub duration_s: f64,
    /// packets read with their transport checksum left to offload (a veth passes them so;
    /// TP_STATUS_CSUMNOTREADY) whose checksum the relay completed before writing them
    #[serde(default)]
    pub checksums_completed: u64,
}

/// One buffer of the pool: a packet and the outputs it still has to be written to.
struct Buffer {
    data: Vec<u8>,
    len: usize,
    /// bit i: output i still to write
    pending: u64,
}

pub fn run(o: &RelayOptions) -> Result<ExitCode> {
    anyhow::ensure!(
        o.outputs.len() <= 64,
        "at most 64 --out interfaces; got {}",
        o.outputs.len()
    );
    let input = Input::open(&o.input, o.rcvbuf)?;
    let outputs = o
        .outputs
        .iter()
        .map(|d| Output::open(d))
        .collect::<Result<Vec<_>>>()?;
    let report = relay(&input, &outputs, o)?;
    println!(
        "relayed {} of {} packets read from {} to {} outputs in {:.3} s: {} writes ({} refused and retried), {} dropped for lack of a buffer (pool {}), {} dropped by the kernel before the read",
        report.forwarded,
        report.received,
        o.input,
        report.fanout,
        report.duration_s,
        report.writes,
        report.refused_writes,
        report.pool_drops,
        report.pool,
        report.kernel_drops
    );
    if let Some(path) = &o.report {
        std::fs::write(path, serde_json::to_string(&report)?)
            .with_context(|| format!("cannot write the report to {}", path.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The relay's loop: each round writes what the pool holds (in the order read, each output
/// until it refuses), then reads one packet (waiting up to POLL when nothing is held).
fn relay(input: &Input, outputs: &[Output], o: &RelayOptions) -> Result<RelayReport> {
    let fanout = outputs.len();
    let all: u64 = if fanout == 64 {
        u64::MAX
    } else {
        (1u64 << fanout) - 1
    };
    let mut pool: Vec<Buffer> = (0..o.pool)
        .map(|_| Buffer {
            data: vec![0u8; BUFFER_BYTES],
            len: 0,
            pending: 0,
        })
        .collect();
    let mut free: Vec<usize> = (0..o.pool).rev().collect();
    let mut held: VecDeque<usize> = VecDeque::new();
    let mut scratch = vec![0u8; BUFFER_BYTES];
    let mut r = RelayReport {
        fanout: fanout as u32,
        pool: o.pool as u32,
        rcvbuf: input.rcvbuf()?,
        ..Default::default()
    };
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(o.duration);
    let mut waiting = false;
    loop {
        let now = Instant::now();
        if now >= end {
            break;
        }
        write_held(&mut pool, &mut held, &mut free, outputs, &mut r)?;
        // Wait for a packet only when nothing is held (else the held writes wait too).
        let wait = held.is_empty();
        if wait != waiting {
            input.set_timeout(wait.then_some(POLL))?;
            waiting = wait;
        }
        let into = match free.last() {
            Some(&i) => &mut pool[i].data,
            None => &mut scratch,
        };
        match input.read(into, !wait) {
            Ok((n, partial)) => {
                r.received += 1;
                match free.pop() {
                    Some(i) => {
                        if partial {
                            r.checksums_completed += u64::from(complete_checksum(&mut pool[i].data[..n]));
                        }
                        pool[i].len = n;
                        pool[i].pending = all;
                        held.push_back(i);
                    }
                    None => r.pool_drops += 1,
                }
            }
            Err(e) if is_retry(&e) => {}
            Err(e) => return Err(e).context("reading the input packet socket failed"),
        }
    }
    r.duration_s = start.elapsed().as_secs_f64();
    let drain_end = Instant::now() + DRAIN;
    while !held.is_empty() && Instant::now() < drain_end {
        write_held(&mut pool, &mut held, &mut free, outputs, &mut r)?;
        if !held.is_empty() {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    r.abandoned_writes = held.iter().map(|&i| pool[i].pending.count_ones() as u64).sum();
    let (packets, drops) = input.statistics()?;
    r.kernel_packets = packets;
    r.kernel_drops = drops;
    Ok(r)
}

/// Writes the held packets, oldest first, to each output that has not refused in this round;
/// a packet with every write done frees its buffer.
fn write_held(
    pool: &mut [Buffer],
    held: &mut VecDeque<usize>,
    free: &mut Vec<usize>,
    outputs: &[Output],
    r: &mut RelayReport,
) -> Result<()> {
    let mut refused: u64 = 0;
    let mut k = 0;
    while k < held.len() {
        let b = &mut pool[held[k]];
        for (o, out) in outputs.iter().enumerate() {
            let bit = 1u64 << o;
            if b.pending & bit == 0 || refused & bit != 0 {
                continue;
            }
            match out.write(&b.data[..b.len]) {
                Ok(()) => {
                    b.pending &= !bit;
                    r.writes += 1;
                }
                Err(e) if is_retry(&e) => {
                    refused |= bit;
                    r.refused_writes += 1;
                }
                Err(e) => return Err(e).with_context(|| format!("writing to {} failed", out.dev)),
            }
        }
        if b.pending == 0 {
            r.forwarded += 1;
            free.push(held.remove(k).expect("k < len"));
        } else {
            k += 1;
        }
    }
    Ok(())
}

/// Errors after which a call is simply tried again later.
fn is_retry(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::ENOBUFS | libc::EINTR))
}

fn ifindex(dev: &str) -> Result<i32> {
    let name = CString::new(dev).context("an interface name has no NUL byte")?;
    // SAFETY: `name` is a valid C string for the call's duration.
    let i = unsafe { libc::if_nametoindex(name.as_ptr()) };
    anyhow::ensure!(
        i != 0,
        "no interface {dev} here (`ip link` lists them; run the relay in the namespace that has it)"
    );
    Ok(i as i32)
}

fn packet_socket(protocol: u16) -> Result<OwnedFd> {
    // SAFETY: plain socket(2); the descriptor is owned at once.
    let fd = unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            i32::from(protocol.to_be()),
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error())
            .context("cannot open a packet socket (it needs CAP_NET_RAW: run as root)");
    }
    // SAFETY: fd is a new descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn link_addr(protocol: u16, ifindex: i32, mac: [u8; 6]) -> libc::sockaddr_ll {
    // SAFETY: sockaddr_ll is plain data; all-zero is a valid value.
    let mut a: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    a.sll_family = libc::AF_PACKET as u16;
    a.sll_protocol = protocol.to_be();
    a.sll_ifindex = ifindex;
    a.sll_halen = 6;
    a.sll_addr[..6].copy_from_slice(&mac);
    a
}

fn bind_link(fd: &OwnedFd, a: &libc::sockaddr_ll, dev: &str) -> Result<()> {
    // SAFETY: `a` is a valid sockaddr_ll of the size given.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            a as *const libc::sockaddr_ll as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("cannot bind a packet socket to {dev}"));
    }
    Ok(())
}

/// The reading side: a packet socket for IPv4 on one interface (a protocol-bound packet
/// socket sees the packets the interface receives, not those it sends).
struct Input {
    fd: OwnedFd,
}

impl Input {
    fn open(dev: &str, rcvbuf: Option<usize>) -> Result<Input> {
        let index = ifindex(dev)?;
        let fd = packet_socket(libc::ETH_P_IP as u16)?;
        if let Some(b) = rcvbuf {
            nix::sys::socket::setsockopt(&fd, nix::sys::socket::sockopt::RcvBuf, &b)
                .context("cannot set SO_RCVBUF")?;
        }
        bind_link(&fd, &link_addr(libc::ETH_P_IP as u16, index, [0; 6]), dev)?;
        // Each read says whether the packet's checksum was left to offload.
        let on: libc::c_int = 1;
        // SAFETY: an int option of the size given.
        let rc = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_AUXDATA,
                &on as *const libc::c_int as *const libc::c_void,
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error()).context("cannot set PACKET_AUXDATA");
        }
        let input = Input { fd };
        // Counted from here: what arrived between socket() and bind() is not the relay's.
        input.statistics()?;
        Ok(input)
    }

    fn rcvbuf(&self) -> Result<u64> {
        Ok(
            nix::sys::socket::getsockopt(&self.fd, nix::sys::socket::sockopt::RcvBuf)
                .context("cannot read SO_RCVBUF")? as u64,
        )
    }

    fn set_timeout(&self, t: Option<Duration>) -> Result<()> {
        let tv = t.map_or(
            libc::timeval {
                tv_sec: 0,
                tv_usec: 0,
            },
            |t| libc::timeval {
                tv_sec: t.as_secs() as libc::time_t,
                tv_usec: t.subsec_micros() as libc::suseconds_t,
            },
        );
        // SAFETY: `tv` is a valid timeval of the size given.
        let rc = unsafe {
            libc::setsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                &tv as *const libc::timeval as *const libc::c_void,
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error()).context("cannot set SO_RCVTIMEO");
        }
        Ok(())
    }

    /// One packet into `buf` (recvmsg), without waiting when `nowait`: its length, and whether
    /// its transport checksum was left to offload (PACKET_AUXDATA's TP_STATUS_CSUMNOTREADY).
    fn read(&self, buf: &mut [u8], nowait: bool) -> std::io::Result<(usize, bool)> {
        let flags = if nowait { libc::MSG_DONTWAIT } else { 0 };
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr() as *mut libc::c_void,
            iov_len: buf.len(),
        };
        let mut control = [0u64; 16];
        // SAFETY: msghdr is plain data; all-zero is a valid value.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr() as *mut libc::c_void;
        msg.msg_controllen = std::mem::size_of_val(&control) as _;
        // SAFETY: `msg` points at `iov` (into `buf`) and `control`, both live for the call.
        let n = unsafe { libc::recvmsg(self.fd.as_raw_fd(), &mut msg, flags) };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut partial = false;
        // SAFETY: the CMSG_* walk stays within the control buffer the kernel filled.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_PACKET && (*c).cmsg_type == libc::PACKET_AUXDATA {
                    let aux = std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const libc::tpacket_auxdata);
                    partial = aux.tp_status & libc::TP_STATUS_CSUMNOTREADY != 0;
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
        }
        Ok((n as usize, partial))
    }

    /// PACKET_STATISTICS since the last call (the kernel resets them on read): packets handed
    /// to the socket (dropped ones included) and those dropped.
    fn statistics(&self) -> Result<(u64, u64)> {
        // SAFETY: tpacket_stats is plain data; the kernel fills at most `len` bytes.
        let mut st: libc::tpacket_stats = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::tpacket_stats>() as libc::socklen_t;
        let rc = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_STATISTICS,
                &mut st as *mut libc::tpacket_stats as *mut libc::c_void,
                &mut len,
            )
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error()).context("cannot read PACKET_STATISTICS");
        }
        Ok((u64::from(st.tp_packets), u64::from(st.tp_drops)))
    }
}

/// One output: a packet socket that only sends (protocol 0: it receives nothing), writing IPv4
/// packets to the interface's own link address.
struct Output {
    dev: String,
    fd: OwnedFd,
    to: libc::sockaddr_ll,
}

impl Output {
    fn open(dev: &str) -> Result<Output> {
        let index = ifindex(dev)?;
        let fd = packet_socket(0)?;
        bind_link(&fd, &link_addr(0, index, [0; 6]), dev)?;
        let mac = own_mac(dev)?;
        Ok(Output {
            dev: dev.to_string(),
            fd,
            to: link_addr(libc::ETH_P_IP as u16, index, mac),
        })
    }

    /// One packet, without waiting (MSG_DONTWAIT): a full queue is an error to retry on.
    fn write(&self, packet: &[u8]) -> std::io::Result<()> {
        // SAFETY: `packet` and `self.to` are valid for the call.
        let n = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                packet.as_ptr() as *const libc::c_void,
                packet.len(),
                libc::MSG_DONTWAIT,
                &self.to as *const libc::sockaddr_ll as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }
}

/// Completes the transport checksum of an IPv4 UDP or TCP packet whose checksum was left to
/// offload: its checksum field holds the pseudo-header's sum, and the one's complement of the sum
/// over the whole segment goes there (what the device would have done). False when the packet
/// is no such packet.
fn complete_checksum(packet: &mut [u8]) -> bool {
    if packet.len() < 20 || packet[0] >> 4 != 4 {
        return false;
    }
    let ihl = usize::from(packet[0] & 0x0f) * 4;
    let at = match packet[9] {
        17 => ihl + 6,
        6 => ihl + 16,
        _ => return false,
    };
    if ihl < 20 || at + 2 > packet.len() {
        return false;
    }
    let mut sum: u32 = 0;
    for chunk in packet[ihl..].chunks(2) {
        let word = u16::from_be_bytes([chunk[0], *chunk.get(1).unwrap_or(&0)]);
        sum += u32::from(word);
    }
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    let mut check = !(sum as u16);
    // A UDP checksum of 0 means "none": its one's complement twin says the same sum.
    if check == 0 && packet[9] == 17 {
        check = 0xffff;
    }
    packet[at..at + 2].copy_from_slice(&check.to_be_bytes());
    true
}

/// The interface's own link address (/sys/class/net/DEV/address; all zero for `lo`).
fn own_mac(dev: &str) -> Result<[u8; 6]> {
    let path = format!("/sys/class/net/{dev}/address");
    let text = std::fs::read_to_string(&path).with_context(|| format!("cannot read {path}"))?;
    parse_mac(text.trim()).with_context(|| format!("{path} holds no Ethernet address: {}", text.trim()))
}

fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut mac = [0u8; 6];
    let mut parts = s.split(':');
    for b in &mut mac {
        *b = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    parts.next().is_none().then_some(mac)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checksum_left_to_offload_is_completed_as_the_device_would() {
        // 10.99.0.1:40000 -> 10.99.0.2:9999, UDP, payload "abc": the full checksum by hand is
        // 0x635d (pseudo-header, header and payload summed, folded, complemented).
        let mut p = vec![
            0x45, 0, 0, 31, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 99, 0, 1, 10, 99, 0, 2, // IPv4
            0x9c, 0x40, 0x27, 0x0f, 0, 11, 0, 0, b'a', b'b', b'c', // UDP, checksum below
        ];
        // What the stack leaves for offload: the pseudo-header's sum (not complemented):
        // 0x0a63 + 0x0001 + 0x0a63 + 0x0002 + 17 + 11 = 0x14e5.
        p[26..28].copy_from_slice(&0x14e5u16.to_be_bytes());
        assert!(complete_checksum(&mut p));
        assert_eq!(u16::from_be_bytes([p[26], p[27]]), 0x635d);
        // Summing the whole segment with the pseudo-header now gives 0xffff: valid.
        let mut sum: u32 = 0x14e5;
        for c in p[20..].chunks(2) {
            sum += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
        }
        while sum >> 16 != 0 {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        assert_eq!(sum, 0xffff);
        // Not IPv4 UDP/TCP: untouched.
        let mut icmp = p.clone();
        icmp[9] = 1;
        let before = icmp.clone();
        assert!(!complete_checksum(&mut icmp));
        assert_eq!(icmp, before);
        assert!(!complete_checksum(&mut [0x60; 40]));
    }

    #[test]
    fn a_link_address_is_six_hex_bytes() {
        assert_eq!(parse_mac("02:99:00:00:00:0a"), Some([2, 0x99, 0, 0, 0, 10]));
        assert_eq!(parse_mac("00:00:00:00:00:00"), Some([0; 6]));
        assert_eq!(parse_mac("02:99:00:00:00"), None);
        assert_eq!(parse_mac("02:99:00:00:00:00:01"), None);
        assert_eq!(parse_mac("zz:99:00:00:00:00"), None);
    }
}
