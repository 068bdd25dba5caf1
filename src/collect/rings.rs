//! The family's packet sockets (AF_PACKET, with or without a TPACKET ring), typed from the
//! packet-socket iterator's records (`probes::sp_ring`). The kernel's counters of a socket are
//! the ones PACKET_STATISTICS returns, and that call clears them (libpcap's `pcap_stats` makes
//! it): `RingTable` turns the records it is given sample after sample into cumulative counts
//! across such clears, and keeps a socket's totals after it closes.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::probes::sp_ring;

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
        match (r.rx_ring != 0, r.version) {
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
    /// times the counters went back (a PACKET_STATISTICS read cleared them) since seen
    pub clears: u32,
    /// whether the socket was open at the latest read
    pub open: bool,
}

/// The raw counters of one socket at the latest read, to take the next read's difference from.
#[derive(Debug, Clone, Copy)]
struct Last {
    packets: u32,
    drops: u32,
}

/// The packet sockets seen so far, by (pid, socket inode).
#[derive(Debug, Default)]
pub struct RingTable {
    rings: BTreeMap<(u32, u64), (PacketRing, Last)>,
    /// whether a read was taken: the sockets of the first read (at attach) count from it
    primed: bool,
}

/// What a counter that the owner may clear grew by since `last`: the difference, or, when it
/// went back (cleared since), its whole new value (what came after the clear; what came between
/// the last read and the clear is not seen).
fn grown(now: u32, last: u32) -> (u64, bool) {
    if now >= last {
        (u64::from(now - last), false)
    } else {
        (u64::from(now), true)
    }
}

impl RingTable {
    /// Takes one read of the iterator (every packet socket the family holds now) and returns
    /// every socket seen so far with its cumulative counts.
    pub fn update(&mut self, records: &[sp_ring]) -> Vec<PacketRing> {
        let first = !std::mem::replace(&mut self.primed, true);
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
                    PacketRing {
                        pid: r.tgid,
                        fd: r.fd,
                        inode: r.ino,
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
                        clears: 0,
                        open: true,
                    },
                    // A socket open at attach counts from attach; one opened later counts
                    // from its start (all its frames were the family's).
                    if first {
                        Last {
                            packets: r.tp_packets,
                            drops: r.tp_drops,
                        }
                    } else {
                        Last { packets: 0, drops: 0 }
                    },
                )
            });
            let (ring, last) = entry;
            let (queued, c1) = grown(r.tp_packets, last.packets);
            let (dropped, c2) = grown(r.tp_drops, last.drops);
            ring.queued += queued;
            ring.dropped += dropped;
            ring.clears += u32::from(c1 || c2);
            *last = Last {
                packets: r.tp_packets,
                drops: r.tp_drops,
            };
            ring.fd = r.fd;
            ring.kind = RingKind::of(r);
            ring.frames = r.frame_nr;
            ring.frame_size = r.frame_size;
            ring.block_size = r.block_size;
            ring.blocks = r.block_nr;
            ring.ring_bytes = u64::from(r.block_size) * u64::from(r.block_nr);
            ring.rcvbuf = r.rcvbuf;
            ring.ifindex = r.ifindex;
            ring.open = true;
        }
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
        }
    }

    #[test]
    fn counts_accumulate_across_reads_from_attach() {
        let mut t = RingTable::default();
        t.update(&[]);
        t.update(&[rec(7, 100, 10, 2)]);
        let rings = t.update(&[rec(7, 100, 25, 9)]);
        assert_eq!(rings.len(), 1);
        let r = &rings[0];
        assert_eq!((r.queued, r.dropped, r.clears), (25, 9, 0));
        assert_eq!(r.kind, RingKind::TpacketV2);
        assert_eq!((r.frames, r.ring_bytes), (8, 16384));
    }

    #[test]
    fn a_socket_open_at_attach_counts_from_attach() {
        let mut t = RingTable::default();
        t.update(&[rec(7, 100, 1000, 50)]);
        let rings = t.update(&[rec(7, 100, 1010, 52)]);
        assert_eq!((rings[0].queued, rings[0].dropped), (10, 2));
    }

    #[test]
    fn a_statistics_read_that_clears_the_counters_does_not_lose_what_came_before() {
        let mut t = RingTable::default();
        t.update(&[]);
        t.update(&[rec(7, 100, 40, 5)]);
        // The owner read PACKET_STATISTICS (cleared), then 6 more frames came, 1 dropped.
        let rings = t.update(&[rec(7, 100, 6, 1)]);
        assert_eq!((rings[0].queued, rings[0].dropped, rings[0].clears), (46, 6, 1));
    }

    #[test]
    fn a_closed_socket_keeps_its_totals_and_a_dup_counts_once() {
        let mut t = RingTable::default();
        t.update(&[]);
        let mut dup = rec(7, 100, 10, 1);
        dup.fd = 4;
        t.update(&[rec(7, 100, 10, 1), dup, rec(8, 200, 3, 0)]);
        let rings = t.update(&[rec(8, 200, 5, 0)]);
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
        t.update(&[]);
        let rings = t.update(&[r]);
        assert_eq!(rings[0].kind, RingKind::Queue);
        assert_eq!(rings[0].kind.label(), "receive queue");
    }
}
