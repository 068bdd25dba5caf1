//! The family's packet sockets (AF_PACKET, with or without a TPACKET ring), typed from the
//! packet-socket iterator's records (`probes::sp_ring`). The kernel's counters of a socket are
//! the ones PACKET_STATISTICS returns, and that call clears them (libpcap's `pcap_stats` makes
//! it): each record also carries the sums of what the family's own such reads returned
//! (send_path captures them), and `RingTable` turns the records it is given sample after sample
//! into cumulative counts (sums + counters), and keeps a socket's totals after it closes: then
//! the counters the socket held as it closed (read at the family's close(2) of it or its
//! process's exit, into the same sums' entry) end its counts.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::probes::{sp_ring, sp_ring_reads};

/// The kind of packet socket, by the TPACKET version of its receive ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RingKind {
    /// no receive ring: frames wait in the socket's receive queue for recvfrom/recvmsg
    Queue,
    TpacketV1,
    TpacketV2,
    TpacketV3,
}

impl RingKind {
    fn of(r: &sp_ring) -> RingKind {
        RingKind::of_ring(r.rx_ring != 0, r.version)
    }

    /// By whether the socket has a receive ring and its TPACKET version (0, 1, 2: V1-V3).
    fn of_ring(rx_ring: bool, version: u32) -> RingKind {
        match (rx_ring, version) {
            (false, _) => RingKind::Queue,
            (true, 0) => RingKind::TpacketV1,
            (true, 1) => RingKind::TpacketV2,
            (true, _) => RingKind::TpacketV3,
        }
    }

    /// How people name it ("TPACKET_V3 ring", "receive queue").
    pub fn label(self) -> &'static str {
        match self {
            RingKind::Queue => "receive queue",
            RingKind::TpacketV1 => "TPACKET_V1 ring",
            RingKind::TpacketV2 => "TPACKET_V2 ring",
            RingKind::TpacketV3 => "TPACKET_V3 ring",
        }
    }
}

/// One packet socket of the family, cumulative since attach (or since the socket appeared).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PacketRing {
    /// the process holding it, and the descriptor and inode it has there
    pub pid: u32,
    pub fd: u32,
    pub inode: u64,
    pub kind: RingKind,
    /// the ring's size: bytes in all (blocks x block size), and frames (V1/V2: fixed slots;
    /// V3: 0, its frames are as long as the packets)
    pub ring_bytes: u64,
    pub frames: u32,
    /// bytes per frame (V1/V2), per block
    pub frame_size: u32,
    pub block_size: u32,
    pub blocks: u32,
    /// SO_RCVBUF, bytes: what holds the frames of a socket without a ring
    pub rcvbuf: u32,
    /// the device it is bound to (ifindex), 0: every device
    pub ifindex: u32,
    /// frames the kernel queued to it (into the ring, or the receive queue), since seen
    pub queued: u64,
    /// frames the kernel dropped at it since seen: ring (or receive queue) full
    pub dropped: u64,
    /// PACKET_STATISTICS reads by the family (libpcap's pcap_stats) whose counts scanprof
    /// captured (each clears the kernel's counters; what it returned is counted above)
    pub owner_reads: u32,
    /// clears of the counters whose counts scanprof did not get, since seen: the counters went
    /// back with no family read to explain it (a process outside the family sharing the
    /// socket read PACKET_STATISTICS), a family read whose counts could not be read, or its
    /// release with no counters read at its close (an end close(2) and exit do not see:
    /// close_range, dup2 over it, exec). The frames such a clear took are not counted:
    /// `queued` and `dropped` are then lower bounds
    pub clears: u32,
    /// whether a family thread made a receive syscall on it since attach (recvfrom, recvmsg,
    /// recvmmsg, read): a socket without a ring is read only that way, and one that nobody
    /// reads (zmap's send socket, bound to every protocol) queues frames it is not waiting for
    pub read: bool,
    /// whether the socket was open at the latest read
    pub open: bool,
    /// whether the kernel gives it a copy of every frame sent on its devices (PACKET_OUTGOING):
    /// it is bound to every protocol (ETH_P_ALL) without PACKET_IGNORE_OUTGOING. Such copies
    /// are in `queued` and `dropped` beside the incoming frames
    #[serde(default)]
    pub sees_outgoing: bool,
    /// whether a socket filter (libpcap's pcap_setfilter) decides which frames it takes: then
    /// which of them were outgoing copies is not known, and `outgoing` stays 0
    #[serde(default)]
    pub filtered: bool,
    /// whether a family thread sent on it: the kernel copies no frame back to the socket that
    /// sent it
    #[serde(default)]
    pub sent: bool,
    /// its network namespace (inode); 0 in bundles from before it was recorded
    #[serde(default)]
    pub netns: u32,
    /// whether the sockets' iterator found it open: false for one known only by its record at
    /// close (opened and closed between two samples), whose device (`ifindex`), `rcvbuf` and
    /// `netns` were not read (0); true in bundles from before this was recorded
    #[serde(default = "seen_before_recorded")]
    pub seen_open: bool,
    /// frames sent on its devices while it was open, each of which the kernel copied to it
    /// (PACKET_OUTGOING), since seen: every transmission on the device it is bound to (every
    /// device of its namespace when bound to none), by the device probes, less the family's
    /// own when the family sent on this socket. Counted only when `sees_outgoing` and not
    /// `filtered`; per sample, so a socket opened mid-sample is counted from the previous one
    #[serde(default)]
    pub outgoing: u64,
}

/// Sockets in bundles from before `seen_open` was recorded were all found open by the iterator.
pub(crate) fn seen_before_recorded() -> bool {
    true
}

impl PacketRing {
    /// A socket just found, with nothing counted yet.
    fn new(pid: u32, fd: u32, inode: u64) -> PacketRing {
        PacketRing {
            pid,
            fd,
            inode,
            kind: RingKind::Queue,
            ring_bytes: 0,
            frames: 0,
            frame_size: 0,
            block_size: 0,
            blocks: 0,
            rcvbuf: 0,
            ifindex: 0,
            queued: 0,
            dropped: 0,
            owner_reads: 0,
            clears: 0,
            read: false,
            open: true,
            sees_outgoing: false,
            filtered: false,
            sent: false,
            netns: 0,
            outgoing: 0,
            seen_open: true,
        }
    }

    /// Adds what came between the counts `last` (the latest settled read) and `now` (a later
    /// read, or the counts at close), and makes `now` the latest. A fall of the sums + counters
    /// is a clear scanprof did not see; a family read whose counts were not read explains one.
    fn take(&mut self, last: &mut Last, now: Last, owner_reads: u32) {
        let (queued, c1) = grown(now.owner_queued, now.packets, last.owner_queued, last.packets);
        let (dropped, c2) = grown(now.owner_drops, now.drops, last.owner_drops, last.drops);
        self.queued += queued;
        self.dropped += dropped;
        let unread = now.owner_unread.saturating_sub(last.owner_unread);
        self.clears += u32::from(c1 || c2).max(unread);
        self.owner_reads = owner_reads;
        *last = now;
    }

    /// Takes the receive ring the socket had as it closed (read at its close with its
    /// counters), when that close read it.
    fn set_shape_at_close(&mut self, e: &sp_ring_reads) {
        if e.closed == 0 {
            return;
        }
        self.kind = RingKind::of_ring(e.closed_rx_ring != 0, e.closed_version);
        self.frames = e.closed_frame_nr;
        self.frame_size = e.closed_frame_size;
        self.block_size = e.closed_block_size;
        self.blocks = e.closed_block_nr;
        self.ring_bytes = u64::from(e.closed_block_size) * u64::from(e.closed_block_nr);
    }
}

/// The raw counts of one socket at the latest settled read, to take the next read's
/// difference from: the sums of the family's own PACKET_STATISTICS reads and the counters.
#[derive(Debug, Clone, Copy, Default)]
struct Last {
    sock: u64,
    owner_queued: u64,
    owner_drops: u64,
    packets: u32,
    drops: u32,
    owner_unread: u32,
}

impl Last {
    /// The counts a socket's close record ends with: its owner's sums and its counters then.
    fn at_close(sock: u64, e: &sp_ring_reads) -> Last {
        Last {
            sock,
            owner_queued: e.queued,
            owner_drops: e.drops,
            packets: e.closed_packets,
            drops: e.closed_drops,
            owner_unread: e.unread,
        }
    }

    fn of(r: &sp_ring) -> Last {
        Last {
            sock: r.sock,
            owner_queued: r.owner_queued,
            owner_drops: r.owner_drops,
            packets: r.tp_packets,
            drops: r.tp_drops,
            owner_unread: r.owner_unread,
        }
    }
}

/// Reads a closed socket waits for its counters at close before it is taken as closed without
/// them: they are written before its descriptor goes, but at a process's exit the family
/// program may take the process out of the family (and the iterator stop finding its sockets)
/// a moment before the close program on the same tracepoint reads them.
const CLOSE_WAITS: u8 = 1;

/// The packet sockets seen so far, by (pid, socket inode).
#[derive(Debug, Default)]
pub struct RingTable {
    rings: BTreeMap<(u32, u64), (PacketRing, Last)>,
    /// sockets gone from the iterator whose final counts are not in yet, with the reads they
    /// have waited for them
    closing: BTreeMap<(u32, u64), u8>,
    /// whether a read was taken: the sockets of the first read (at attach) count from it
    primed: bool,
    /// whether `take_unseen` ran: at its first run (attach) an unknown socket is not counted
    took_unseen: bool,
    /// the device transmissions (everyone's, the family's) on each socket's devices at the
    /// previous `count_outgoing`, by (pid, socket inode)
    xmits: BTreeMap<(u32, u64), (u64, u64)>,
    /// the device rows of the previous `count_outgoing` (none before the first): a socket that
    /// appears counts from them
    devices: Vec<crate::collect::DeviceCounters>,
}

/// Transmissions since attach on the device `ifindex` of namespace `netns` (every device of it
/// when 0): everyone's and the family's, from the device probes' rows (each `net_dev_xmit` is
/// one pass through the kernel's transmit path, where the copies for packet sockets are made).
fn xmits_of(devices: &[crate::collect::DeviceCounters], netns: u32, ifindex: u32) -> (u64, u64) {
    devices
        .iter()
        .filter(|d| d.netns == netns && (ifindex == 0 || d.ifindex == ifindex))
        .fold((0, 0), |(all, family), d| {
            let n = d.xmit_ok + d.xmit_busy + d.xmit_err;
            match d.pid {
                None => (all + n, family),
                Some(_) => (all, family + n),
            }
        })
}

/// What one counter grew by between two reads, from the sums of the family's own
/// PACKET_STATISTICS reads (`owner`, which only grow) and the socket's counter (`now`, which
/// such a read clears): `(grown, cleared_unseen)`. Every frame the counter counted is in one or
/// the other, so their total only grows, unless someone outside the family (a process sharing
/// the socket) cleared the counter: then what came after is the family reads' growth plus the
/// new value, and what that clear took is not seen (`cleared_unseen`).
fn grown(owner_now: u64, now: u32, owner_last: u64, last: u32) -> (u64, bool) {
    let total_now = owner_now + u64::from(now);
    let total_last = owner_last + u64::from(last);
    if total_now >= total_last {
        (total_now - total_last, false)
    } else {
        (owner_now.saturating_sub(owner_last) + u64::from(now), true)
    }
}

impl RingTable {
    /// Takes one read of the iterator (every packet socket the family holds now) and returns
    /// every socket seen so far with its cumulative counts. `last_reads(sock)` gives the final
    /// PACKET_STATISTICS sums and counters at close of a socket that was open at the previous
    /// read and is gone now: what its owner's reads returned after scanprof's last sample, and
    /// what came after them until it closed, are counted so. `forget(sock)` lets go of them
    /// once taken (or once the socket has waited `CLOSE_WAITS` reads for its close).
    pub fn update(
        &mut self,
        records: &[sp_ring],
        mut last_reads: impl FnMut(u64) -> Option<sp_ring_reads>,
        mut forget: impl FnMut(u64),
    ) -> Vec<PacketRing> {
        let first = !std::mem::replace(&mut self.primed, true);
        let was_open: Vec<(u32, u64)> = self
            .rings
            .iter()
            .filter(|(_, (ring, _))| ring.open)
            .map(|(k, _)| *k)
            .collect();
        for ring in self.rings.values_mut() {
            ring.0.open = false;
        }
        for r in records {
            let key = (r.tgid, r.ino);
            // A socket held by two descriptors (dup) is one socket: counted once.
            if self.rings.get(&key).is_some_and(|(ring, _)| ring.open) {
                continue;
            }
            let entry = self.rings.entry(key).or_insert_with(|| {
                (
                    PacketRing::new(r.tgid, r.fd, r.ino),
                    // A socket open at attach counts from attach; one opened later counts
                    // from its start (all its frames were the family's).
                    if first {
                        Last::of(r)
                    } else {
                        Last {
                            sock: r.sock,
                            ..Last::default()
                        }
                    },
                )
            });
            let (ring, last) = entry;
            // A record read while a family PACKET_STATISTICS read was half done: its counters
            // and sums may disagree; the counts wait for the next read.
            if r.settled != 0 {
                ring.take(last, Last::of(r), r.owner_reads);
            }
            ring.read |= r.recv_read != 0;
            ring.fd = r.fd;
            ring.kind = RingKind::of(r);
            ring.frames = r.frame_nr;
            ring.frame_size = r.frame_size;
            ring.block_size = r.block_size;
            ring.blocks = r.block_nr;
            ring.ring_bytes = u64::from(r.block_size) * u64::from(r.block_nr);
            ring.rcvbuf = r.rcvbuf;
            ring.ifindex = r.ifindex;
            ring.sees_outgoing = r.outgoing != 0;
            ring.filtered = r.filtered != 0;
            ring.sent |= r.sent != 0;
            ring.netns = r.netns;
            ring.open = true;
        }
        // Sockets closed since the previous read, and those still waiting for their counts at
        // close: what the family's reads returned after scanprof's last sample, and the
        // counters the socket held as it closed.
        for key in was_open {
            let closed = self.rings.get(&key).is_some_and(|(ring, _)| !ring.open);
            if closed {
                self.closing.insert(key, 0);
            }
        }
        let closing: Vec<((u32, u64), u8)> = self.closing.iter().map(|(k, w)| (*k, *w)).collect();
        for (key, waited) in closing {
            let Some((ring, last)) = self.rings.get_mut(&key).filter(|(ring, _)| !ring.open) else {
                // gone, or found again (a read that missed it): not closing
                self.closing.remove(&key);
                continue;
            };
            let e = last_reads(last.sock).filter(|e| e.ino == ring.inode);
            match e {
                Some(e) if e.closed != 0 => {
                    // Its counts at close end the same sums + counters as every read's.
                    ring.take(last, Last::at_close(last.sock, &e), e.reads);
                    ring.read |= e.recv_read != 0;
                    // Its ring as it closed: the iterator may have seen it only before its
                    // owner set the ring up, as a plain receive queue nobody reads.
                    ring.set_shape_at_close(&e);
                }
                _ if waited < CLOSE_WAITS => {
                    self.closing.insert(key, waited + 1);
                    continue;
                }
                e => {
                    // Released with no counters read at its close: what its owner's reads
                    // returned beyond the counters scanprof last saw came after; what the
                    // release took is not known (a clear not seen).
                    if let Some(e) = e {
                        let after = |owner_now: u64, owner_last: u64, counter_last: u32| {
                            owner_now
                                .saturating_sub(owner_last)
                                .saturating_sub(u64::from(counter_last))
                        };
                        ring.queued += after(e.queued, last.owner_queued, last.packets);
                        ring.dropped += after(e.drops, last.owner_drops, last.drops);
                        ring.clears += e.unread.saturating_sub(last.owner_unread);
                        ring.owner_reads = e.reads;
                        ring.read |= e.recv_read != 0;
                    }
                    ring.clears += 1;
                }
            }
            self.closing.remove(&key);
            forget(last.sock);
        }
        self.current()
    }

    /// Adds the sockets the iterator never found: opened and closed between two of its reads
    /// (a reader that lives less than a sample, or a sample that came late), known only by
    /// their records at close. `closed` is every socket whose close was read (its ring_reads
    /// entry, by `struct sock *`), read after this sample's `update`: those the table knows are
    /// left to it. An unknown one counts from its start, as a socket found after attach does:
    /// its owner's reads and its counters at close. At the first sample (attach), an unknown
    /// one may have counted frames before attach: it is let go uncounted. `forget(sock)` lets
    /// go of each one taken. A socket closed at one descriptor and still open at another
    /// (dup) after this sample's iterator read is taken as closed here.
    pub fn take_unseen(
        &mut self,
        closed: &[(u64, sp_ring_reads)],
        mut forget: impl FnMut(u64),
    ) -> Vec<PacketRing> {
        let at_attach = !std::mem::replace(&mut self.took_unseen, true);
        for (sock, e) in closed.iter().filter(|(_, e)| e.closed != 0) {
            let key = (e.closed_tgid, e.ino);
            let known = self.rings.contains_key(&key)
                || self
                    .rings
                    .values()
                    .any(|(ring, last)| last.sock == *sock && ring.inode == e.ino);
            if known {
                continue;
            }
            if !at_attach {
                let mut ring = PacketRing::new(e.closed_tgid, e.closed_fd, e.ino);
                let mut last = Last {
                    sock: *sock,
                    ..Last::default()
                };
                ring.take(&mut last, Last::at_close(*sock, e), e.reads);
                ring.read = e.recv_read != 0;
                ring.sent = e.sent != 0;
                ring.open = false;
                ring.seen_open = false;
                ring.set_shape_at_close(e);
                self.rings.insert(key, (ring, last));
            }
            forget(*sock);
        }
        self.current()
    }

    /// Adds to each open socket that sees outgoing frames (and has no filter) the frames sent
    /// on its devices since the previous call: `devices` are the device probes' cumulative rows
    /// of the same sample. The family's own transmissions are left out for a socket it sent on
    /// (the kernel does not copy a frame to the socket that sent it): exact when that socket is
    /// the family's only one sending on those devices. Returns every socket as `current`.
    pub fn count_outgoing(&mut self, devices: &[crate::collect::DeviceCounters]) -> Vec<PacketRing> {
        for (key, (ring, _)) in self.rings.iter_mut() {
            if !ring.open || !ring.sees_outgoing || ring.filtered {
                continue;
            }
            let (all, family) = xmits_of(devices, ring.netns, ring.ifindex);
            // A socket seen for the first time counts from the previous sample (from attach
            // at the first).
            let (all0, family0) = *self
                .xmits
                .entry(*key)
                .or_insert_with(|| xmits_of(&self.devices, ring.netns, ring.ifindex));
            let mut copies = all.saturating_sub(all0);
            if ring.sent {
                copies = copies.saturating_sub(family.saturating_sub(family0));
            }
            ring.outgoing += copies;
            self.xmits.insert(*key, (all, family));
        }
        self.devices = devices.to_vec();
        self.current()
    }

    /// Every socket seen so far with its cumulative counts, as of the latest read.
    pub fn current(&self) -> Vec<PacketRing> {
        self.rings.values().map(|(ring, _)| ring.clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(tgid: u32, ino: u64, packets: u32, drops: u32) -> sp_ring {
        sp_ring {
            sock: 0xffff_0000 + ino,
            ino,
            tgid,
            fd: 3,
            tp_packets: packets,
            tp_drops: drops,
            version: 1,
            rx_ring: 1,
            frame_size: 2048,
            frame_nr: 8,
            block_size: 4096,
            block_nr: 4,
            ifindex: 2,
            rcvbuf: 212992,
            owner_queued: 0,
            owner_drops: 0,
            owner_reads: 0,
            owner_unread: 0,
            settled: 1,
            recv_read: 0,
            netns: 4026531840,
            outgoing: 0,
            filtered: 0,
            sent: 0,
        }
    }

    /// The same socket after its owner's PACKET_STATISTICS reads returned these sums.
    fn owned(mut r: sp_ring, queued: u64, drops: u64, reads: u32) -> sp_ring {
        r.owner_queued = queued;
        r.owner_drops = drops;
        r.owner_reads = reads;
        r
    }

    #[test]
    fn a_socket_is_read_once_a_receive_syscall_marked_it_and_stays_so() {
        let mut t = RingTable::default();
        t.update(&[], |_| None, |_| ());
        let rings = t.update(&[rec(7, 100, 10, 2)], |_| None, |_| ());
        assert!(!rings[0].read);
        let mut marked = rec(7, 100, 12, 2);
        marked.recv_read = 1;
        assert!(t.update(&[marked], |_| None, |_| ())[0].read);
        // The mark is sticky: an entry lost to the LRU later does not unread the socket.
        assert!(t.update(&[rec(7, 100, 14, 2)], |_| None, |_| ())[0].read);
    }

    /// The device probes' cumulative rows of one device: everyone's and the family's
    /// transmissions.
    fn xmitted(ifindex: u32, all: u64, family: u64) -> Vec<crate::collect::DeviceCounters> {
        let row = |pid: Option<u32>, n: u64| crate::collect::DeviceCounters {
            device: format!("veth{ifindex}"),
            ifindex,
            netns: 4026531840,
            pid,
            queued: n,
            enqueued: 0,
            dequeued: 0,
            xmit_ok: n,
            xmit_busy: 0,
            xmit_err: 0,
            xmit_bytes: n * 64,
            neigh_started: 0,
            neigh_queued: 0,
            neigh_resolved: 0,
            neigh_failed: 0,
            qdisc: None,
        };
        vec![row(None, all), row(Some(7), family)]
    }

    #[test]
    fn a_socket_bound_to_every_protocol_counts_the_frames_sent_on_its_device_as_outgoing() {
        let mut t = RingTable::default();
        t.update(&[], |_| None, |_| ());
        t.count_outgoing(&xmitted(2, 100, 0));
        // It appears: 1,000 frames were sent on its device since the previous sample, 900 of
        // them the family's (through another socket: all are copied to it).
        let mut sniffer = rec(7, 100, 1_000, 0);
        sniffer.outgoing = 1;
        t.update(&[sniffer], |_| None, |_| ());
        let rings = t.count_outgoing(&xmitted(2, 1_100, 900));
        assert_eq!(rings[0].outgoing, 1_000);
        assert!(rings[0].sees_outgoing);
        // Frames sent on another device are not copied to it.
        let mut both = xmitted(2, 1_300, 1_000);
        both.extend(xmitted(3, 5_000, 5_000));
        t.update(&[rec_outgoing(7, 100, 1_200)], |_| None, |_| ());
        assert_eq!(t.count_outgoing(&both)[0].outgoing, 1_200);
        // A socket the family sends on is given no copy of its own frames.
        let mut t = RingTable::default();
        t.update(&[], |_| None, |_| ());
        t.count_outgoing(&[]);
        let mut own = rec_outgoing(7, 100, 500);
        own.sent = 1;
        t.update(&[own], |_| None, |_| ());
        assert_eq!(t.count_outgoing(&xmitted(2, 500, 450))[0].outgoing, 50);
        // One with a filter, or one bound to a single protocol: none counted.
        for (outgoing, filtered) in [(1, 1), (0, 0)] {
            let mut t = RingTable::default();
            t.update(&[], |_| None, |_| ());
            t.count_outgoing(&[]);
            let mut r = rec(7, 100, 500, 0);
            (r.outgoing, r.filtered) = (outgoing, filtered);
            t.update(&[r], |_| None, |_| ());
            assert_eq!(t.count_outgoing(&xmitted(2, 500, 450))[0].outgoing, 0);
        }
    }

    /// A socket bound to every protocol.
    fn rec_outgoing(tgid: u32, ino: u64, packets: u32) -> sp_ring {
        let mut r = rec(tgid, ino, packets, 0);
        r.outgoing = 1;
        r
    }

    #[test]
    fn counts_accumulate_across_reads_from_attach() {
        let mut t = RingTable::default();
        t.update(&[], |_| None, |_| ());
        t.update(&[rec(7, 100, 10, 2)], |_| None, |_| ());
        let rings = t.update(&[rec(7, 100, 25, 9)], |_| None, |_| ());
        assert_eq!(rings.len(), 1);
        let r = &rings[0];
        assert_eq!((r.queued, r.dropped, r.clears), (25, 9, 0));
        assert_eq!(r.kind, RingKind::TpacketV2);
        assert_eq!((r.frames, r.ring_bytes), (8, 16384));
    }

    #[test]
    fn a_socket_open_at_attach_counts_from_attach() {
        let mut t = RingTable::default();
        t.update(&[rec(7, 100, 1000, 50)], |_| None, |_| ());
        let rings = t.update(&[rec(7, 100, 1010, 52)], |_| None, |_| ());
        assert_eq!((rings[0].queued, rings[0].dropped), (10, 2));
    }

    #[test]
    fn a_clear_from_outside_the_family_keeps_what_came_before_and_is_counted() {
        let mut t = RingTable::default();
        t.update(&[], |_| None, |_| ());
        t.update(&[rec(7, 100, 40, 5)], |_| None, |_| ());
        // A process sharing the socket read PACKET_STATISTICS (cleared it; no family read
        // captured), then 6 more frames came, 1 dropped.
        let rings = t.update(&[rec(7, 100, 6, 1)], |_| None, |_| ());
        assert_eq!((rings[0].queued, rings[0].dropped, rings[0].clears), (46, 6, 1));
        assert_eq!(rings[0].owner_reads, 0);
    }

    #[test]
    fn the_familys_own_statistics_reads_are_counted_exactly() {
        let mut t = RingTable::default();
        t.update(&[], |_| None, |_| ());
        t.update(&[rec(7, 100, 40, 5)], |_| None, |_| ());
        // The owner's read returned 44 queued and 5 dropped (and cleared them); since then 6
        // more were queued and 1 dropped.
        let rings = t.update(&[owned(rec(7, 100, 6, 1), 44, 5, 1)], |_| None, |_| ());
        assert_eq!((rings[0].queued, rings[0].dropped), (50, 6));
        assert_eq!((rings[0].clears, rings[0].owner_reads), (0, 1));
        // Three more reads between two samples (zmap reads once a second): every frame counted.
        let rings = t.update(&[owned(rec(7, 100, 2, 0), 44 + 300, 5 + 30, 4)], |_| None, |_| ());
        assert_eq!((rings[0].queued, rings[0].dropped), (346, 35));
        assert_eq!((rings[0].clears, rings[0].owner_reads), (0, 4));
    }

    #[test]
    fn a_read_made_while_the_owner_was_reading_waits_for_the_next() {
        let mut t = RingTable::default();
        t.update(&[], |_| None, |_| ());
        t.update(&[rec(7, 100, 40, 5)], |_| None, |_| ());
        // The owner's read had cleared the counters but not yet returned: its 43 frames are in
        // neither the counters nor the sums. Held, not taken for a clear.
        let mut half = rec(7, 100, 0, 0);
        half.settled = 0;
        let rings = t.update(&[half], |_| None, |_| ());
        assert_eq!((rings[0].queued, rings[0].dropped, rings[0].clears), (40, 5, 0));
        assert!(rings[0].open);
        let rings = t.update(&[owned(rec(7, 100, 1, 0), 43, 5, 1)], |_| None, |_| ());
        assert_eq!((rings[0].queued, rings[0].dropped, rings[0].clears), (44, 5, 0));
    }

    /// The entry of socket 100 after its owner's reads returned these sums, with the counters
    /// read at its close when `at_close` gives them.
    fn sums(queued: u64, drops: u64, reads: u32, at_close: Option<(u32, u32)>) -> sp_ring_reads {
        let (packets, dropped) = at_close.unwrap_or_default();
        sp_ring_reads {
            ino: 100,
            queued,
            drops,
            enters: reads,
            exits: reads,
            reads,
            closed: u32::from(at_close.is_some()),
            closed_packets: packets,
            closed_drops: dropped,
            ..Default::default()
        }
    }

    #[test]
    fn a_socket_closed_between_two_samples_counts_what_it_held_at_close() {
        let mut t = RingTable::default();
        t.update(&[], |_| None, |_| ());
        t.update(&[owned(rec(7, 100, 10, 1), 50, 5, 1)], |_| None, |_| ());
        // Closed: its owner read once more (12 frames queued, 1 dropped: the 10 and 1 seen and 2
        // after), then 7 more came and 3 were dropped before it closed; the close read those.
        let (mut asked, mut forgot) = (Vec::new(), Vec::new());
        let rings = t.update(
            &[],
            |sock| {
                asked.push(sock);
                Some(sums(62, 6, 2, Some((7, 3))))
            },
            |sock| forgot.push(sock),
        );
        assert_eq!(asked, vec![0xffff_0000 + 100]);
        assert_eq!(forgot, asked);
        assert_eq!((rings[0].queued, rings[0].dropped, rings[0].open), (69, 9, false));
        assert_eq!((rings[0].owner_reads, rings[0].clears), (2, 0));
        // Taken once: a closed socket is not looked up again.
        let rings = t.update(&[], |_| panic!("asked again"), |_| panic!("forgotten again"));
        assert_eq!(rings[0].queued, 69);
        // Never read by its owner: the counters at close alone, from those last seen.
        let mut t = RingTable::default();
        t.update(&[], |_| None, |_| ());
        t.update(&[rec(7, 100, 10, 1)], |_| None, |_| ());
        let rings = t.update(&[], |_| Some(sums(0, 0, 0, Some((879, 4)))), |_| ());
        assert_eq!((rings[0].queued, rings[0].dropped, rings[0].clears), (879, 4, 0));
    }

    #[test]
    fn a_socket_waits_one_read_for_its_counts_at_close_and_is_then_taken_without_them() {
        let mut t = RingTable::default();
        t.update(&[], |_| None, |_| ());
        t.update(&[owned(rec(7, 100, 10, 1), 50, 5, 1)], |_| None, |_| ());
        // Gone from the iterator, its counts at close not in yet: it waits, and keeps its entry.
        let rings = t.update(&[], |_| Some(sums(62, 6, 2, None)), |_| panic!("forgotten early"));
        assert_eq!((rings[0].queued, rings[0].dropped, rings[0].clears), (60, 6, 0));
        // They came in the meantime (an exit's close program ran after the family program).
        let rings = t.update(&[], |_| Some(sums(62, 6, 2, Some((7, 3)))), |_| ());
        assert_eq!((rings[0].queued, rings[0].dropped, rings[0].clears), (69, 9, 0));
        // They never come (closed by close_range): what its owner's reads returned after the
        // last sample is counted, and the release is a clear scanprof did not get.
        let mut t = RingTable::default();
        t.update(&[], |_| None, |_| ());
        t.update(&[owned(rec(7, 100, 10, 1), 50, 5, 1)], |_| None, |_| ());
        let mut forgot = 0;
        t.update(&[], |_| Some(sums(62, 6, 2, None)), |_| forgot += 1);
        let rings = t.update(&[], |_| Some(sums(62, 6, 2, None)), |_| forgot += 1);
        assert_eq!(forgot, 1);
        assert_eq!((rings[0].queued, rings[0].dropped, rings[0].clears), (62, 6, 1));
        assert_eq!(rings[0].owner_reads, 2);
    }

    #[test]
    fn a_socket_one_read_missed_is_not_closed() {
        let mut t = RingTable::default();
        t.update(&[], |_| None, |_| ());
        t.update(&[rec(7, 100, 10, 1)], |_| None, |_| ());
        t.update(&[], |_| None, |_| panic!("forgotten while open"));
        let rings = t.update(&[rec(7, 100, 30, 2)], |_| panic!("looked up while open"), |_| ());
        assert_eq!((rings[0].queued, rings[0].dropped, rings[0].clears), (30, 2, 0));
        assert!(rings[0].open);
    }

    #[test]
    fn another_sockets_sums_at_the_same_address_are_not_taken() {
        let mut t = RingTable::default();
        t.update(&[], |_| None, |_| ());
        t.update(&[rec(7, 100, 10, 1)], |_| None, |_| ());
        let other = |_| {
            Some(sp_ring_reads {
                ino: 999,
                queued: 5000,
                closed: 1,
                closed_packets: 40,
                ..Default::default()
            })
        };
        t.update(&[], other, |_| ());
        let rings = t.update(&[], other, |_| ());
        assert_eq!((rings[0].queued, rings[0].dropped, rings[0].clears), (10, 1, 1));
    }

    /// A close record `e` of a socket that had an 8-frame TPACKET_V2 ring (4 blocks of 4 KiB).
    fn with_v2_ring(e: sp_ring_reads) -> sp_ring_reads {
        sp_ring_reads {
            closed_rx_ring: 1,
            closed_version: 1,
            closed_frame_nr: 8,
            closed_frame_size: 2048,
            closed_block_size: 4096,
            closed_block_nr: 4,
            ..e
        }
    }

    #[test]
    fn a_socket_first_seen_before_its_ring_was_set_up_takes_its_ring_at_close() {
        // Seen at attach as a plain receive queue nobody reads: its owner had not yet set up
        // the ring. It closed before the next sample, with an 8-frame TPACKET_V2 ring.
        let mut t = RingTable::default();
        let mut bare = rec(7, 100, 0, 0);
        bare.rx_ring = 0;
        bare.frame_nr = 0;
        let rings = t.update(&[bare], |_| None, |_| ());
        assert_eq!(rings[0].kind, RingKind::Queue);
        let at_close = with_v2_ring(sums(0, 0, 0, Some((462, 3545))));
        let rings = t.update(&[], |_| Some(at_close), |_| ());
        let r = &rings[0];
        assert_eq!((r.queued, r.dropped, r.open), (462, 3545, false));
        assert_eq!((r.kind, r.frames, r.ring_bytes), (RingKind::TpacketV2, 8, 16384));
        // A close that read nothing leaves the shape last seen.
        let mut t = RingTable::default();
        t.update(&[rec(7, 100, 0, 0)], |_| None, |_| ());
        let rings = t.update(&[], |_| Some(sums(0, 0, 0, None)), |_| ());
        assert_eq!(rings[0].kind, RingKind::TpacketV2);
    }

    #[test]
    fn a_socket_opened_and_closed_between_two_samples_counts_from_its_record_at_close() {
        // The 6.12 guest's run: the reader's socket lived 3.57 s between two samples 6.8 s
        // apart, so the iterator never found it. Its 175 reads returned 400 frames queued and
        // 3,500 dropped; 53 and 55 more came before it closed, with its 8-frame TPACKET_V2 ring.
        let mut t = RingTable::default();
        t.update(&[], |_| None, |_| ());
        assert!(t.take_unseen(&[], |_| panic!("nothing to forget")).is_empty());
        let at_close = sp_ring_reads {
            closed_tgid: 7,
            closed_fd: 5,
            ..with_v2_ring(sums(400, 3500, 175, Some((53, 55))))
        };
        let sock = 0xffff_0000 + 100;
        t.update(
            &[],
            |_| panic!("no socket was seen"),
            |_| panic!("no socket was seen"),
        );
        let mut forgot = Vec::new();
        let rings = t.take_unseen(&[(sock, at_close)], |s| forgot.push(s));
        assert_eq!(forgot, vec![sock]);
        assert_eq!(rings.len(), 1, "{rings:?}");
        let r = &rings[0];
        assert_eq!(
            (r.pid, r.fd, r.inode, r.open, r.seen_open),
            (7, 5, 100, false, false)
        );
        assert_eq!(
            (r.queued, r.dropped, r.owner_reads, r.clears),
            (453, 3555, 175, 0)
        );
        assert_eq!((r.kind, r.frames, r.ring_bytes), (RingKind::TpacketV2, 8, 16384));
        // Known from then on: not taken twice, and the table's own sockets are left to it.
        t.update(&[rec(7, 101, 10, 1)], |_| None, |_| ());
        let seen = sp_ring_reads {
            ino: 101,
            closed_tgid: 7,
            ..sums(0, 0, 0, Some((10, 1)))
        };
        let rings = t.take_unseen(&[(sock, at_close), (0xffff_0000 + 101, seen)], |_| {
            panic!("a known socket is left to update")
        });
        assert_eq!(rings.len(), 2);
        assert_eq!(rings.iter().map(|r| r.queued).sum::<u64>(), 453 + 10);
    }

    #[test]
    fn at_attach_an_unseen_closed_socket_is_let_go_uncounted() {
        // Closed before the first sample: its counters at close may hold frames from before
        // attach, so it is not counted, and its entry goes.
        let mut t = RingTable::default();
        t.update(&[], |_| None, |_| ());
        let e = sp_ring_reads {
            closed_tgid: 7,
            ..sums(0, 0, 0, Some((900, 4)))
        };
        let mut forgot = Vec::new();
        assert!(t.take_unseen(&[(1, e)], |s| forgot.push(s)).is_empty());
        assert_eq!(forgot, vec![1]);
    }

    #[test]
    fn a_family_read_whose_counts_could_not_be_read_is_a_clear() {
        let mut t = RingTable::default();
        t.update(&[], |_| None, |_| ());
        t.update(&[rec(7, 100, 40, 5)], |_| None, |_| ());
        let mut r = owned(rec(7, 100, 3, 0), 0, 0, 0);
        r.owner_unread = 1;
        let rings = t.update(&[r], |_| None, |_| ());
        assert_eq!((rings[0].queued, rings[0].clears), (43, 1));
    }

    #[test]
    fn a_closed_socket_keeps_its_totals_and_a_dup_counts_once() {
        let mut t = RingTable::default();
        t.update(&[], |_| None, |_| ());
        let mut dup = rec(7, 100, 10, 1);
        dup.fd = 4;
        t.update(&[rec(7, 100, 10, 1), dup, rec(8, 200, 3, 0)], |_| None, |_| ());
        let rings = t.update(&[rec(8, 200, 5, 0)], |_| None, |_| ());
        assert_eq!(rings.len(), 2);
        let closed = rings.iter().find(|r| r.pid == 7).unwrap();
        assert_eq!((closed.queued, closed.dropped, closed.open), (10, 1, false));
        let open = rings.iter().find(|r| r.pid == 8).unwrap();
        assert_eq!((open.queued, open.open), (5, true));
    }

    #[test]
    fn a_socket_without_a_ring_is_a_receive_queue() {
        let mut r = rec(7, 100, 1, 0);
        r.rx_ring = 0;
        let mut t = RingTable::default();
        t.update(&[], |_| None, |_| ());
        let rings = t.update(&[r], |_| None, |_| ());
        assert_eq!(rings[0].kind, RingKind::Queue);
        assert_eq!(rings[0].kind.label(), "receive queue");
    }
}
