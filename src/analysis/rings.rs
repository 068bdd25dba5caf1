//! The family's packet sockets in the receive funnel: per socket (a TPACKET ring, as libpcap,
//! masscan and zmap read through, or a plain packet socket's receive queue), the frames the
//! kernel queued to it and dropped at it because it was full, over a tick or the run. Pure:
//! from the cumulative `PacketRing`s of two `CounterSample`s.

use serde::{Deserialize, Serialize};

use super::stage::StageName;
use crate::collect::rings::{PacketRing, RingKind};
use crate::collect::CounterSample;

/// Stage names the receive funnel gains when the family holds packet sockets: frames queued to
/// them (the ring took the frame: read without a syscall when it is a ring), and frames dropped
/// at them because the ring (or the receive queue) was full.
pub const RING_STAGES: [StageName; 2] = [StageName::RingQueued, StageName::RingDrops];

/// One packet socket of the family over the interval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RingView {
    /// the process holding it, the descriptor and the socket's inode
    pub pid: u32,
    pub fd: u32,
    pub inode: u64,
    /// `queue` (no ring), `tpacket_v1`, `tpacket_v2`, `tpacket_v3`
    pub kind: RingKind,
    /// the ring's size, bytes (0 without a ring), and its frames (V1/V2; 0 for V3, whose
    /// frames are as long as the packets)
    pub ring_bytes: u64,
    pub frames: u32,
    /// SO_RCVBUF, bytes: what holds the frames of a socket without a ring
    pub rcvbuf: u32,
    /// the device it is bound to (ifindex), 0: every device
    pub ifindex: u32,
    /// frames queued to it, and dropped at it because it was full, in the interval
    pub queued: u64,
    pub dropped: u64,
    /// the same since attach
    pub queued_total: u64,
    pub dropped_total: u64,
    /// clears of its counters whose counts scanprof did not get since attach (a PACKET_STATISTICS
    /// read from outside the family, or a family read it could not read): `queued` and
    /// `dropped` are then lower bounds. The family's own reads (libpcap's pcap_stats) are
    /// captured and are not clears here
    pub clears: u32,
    /// the family's own PACKET_STATISTICS reads of it since attach, each captured at its
    /// getsockopt's exit and added back into `queued` and `dropped` (0 in bundles from before
    /// the capture)
    #[serde(default)]
    pub owner_reads: u32,
    /// whether the family read it with receive syscalls (a socket without a ring can be read
    /// no other way); true in bundles from before this was recorded
    #[serde(default = "read_before_recorded")]
    pub read: bool,
    /// open at the end of the interval
    pub open: bool,
    /// of `queued + dropped`, the copies of frames sent on its devices (PACKET_OUTGOING: the
    /// kernel gives one to every socket bound to every protocol) in the interval, and since
    /// attach: not replies. 0 for a socket that is given none, or one with a filter (which of
    /// its frames were outgoing is then not known)
    #[serde(default)]
    pub outgoing: u64,
    #[serde(default)]
    pub outgoing_total: u64,
    /// whether the kernel gives it copies of outgoing frames (ETH_P_ALL, without
    /// PACKET_IGNORE_OUTGOING)
    #[serde(default)]
    pub sees_outgoing: bool,
    /// whether a socket filter decides which frames it takes
    #[serde(default)]
    pub filtered: bool,
    /// whether the sockets' iterator found it open: false for one known only by its record at
    /// close (opened and closed between two samples), whose device and SO_RCVBUF were not read
    #[serde(default = "crate::collect::rings::seen_before_recorded")]
    pub seen_open: bool,
}

#[cfg(test)]
impl RingView {
    /// A test socket: pid 42's fd 3 (inode 100) on ifindex 2, a ring of `kind` in `ring_bytes`
    /// and `frames` frames, that queued and dropped that many frames in the interval and since
    /// attach, read by the family, given no outgoing copies. Tests change what they need.
    pub fn fixture(kind: RingKind, ring_bytes: u64, frames: u32, queued: u64, dropped: u64) -> RingView {
        RingView {
            pid: 42,
            fd: 3,
            inode: 100,
            kind,
            ring_bytes,
            frames,
            rcvbuf: 212_992,
            ifindex: 2,
            queued,
            dropped,
            queued_total: queued,
            dropped_total: dropped,
            clears: 0,
            owner_reads: 0,
            read: true,
            open: false,
            outgoing: 0,
            outgoing_total: 0,
            sees_outgoing: false,
            filtered: false,
            seen_open: true,
        }
    }
}

/// Bundles recorded before `read` existed took every packet socket for a reader.
fn read_before_recorded() -> bool {
    true
}

impl RingView {
    /// Whether the family reads what this socket queues: a ring is read without syscalls, a
    /// socket without one only through receive syscalls. A packet socket that nobody reads
    /// (zmap's send socket, bound to every protocol, queues every frame on the host until its
    /// queue is full) is no listener: its frames and drops are not the receive funnel's.
    pub fn is_reader(&self) -> bool {
        self.kind != RingKind::Queue || self.read
    }

    /// dropped / (queued + dropped) in the interval: the share of the frames that reached the
    /// socket that it lost
    pub fn drop_share(&self) -> f64 {
        self.dropped as f64 / (self.queued + self.dropped).max(1) as f64
    }

    /// Frames that came in (replies, for a scanner) among those that reached it in the
    /// interval: all of them less the copies of outgoing frames.
    pub fn incoming(&self) -> u64 {
        (self.queued + self.dropped).saturating_sub(self.outgoing)
    }

    /// Incoming frames it dropped full in the interval, at least: its drops less every
    /// outgoing copy (a full ring drops whatever comes, and which of the two a drop was is not
    /// counted), so none when the outgoing copies alone could account for the drops.
    pub fn incoming_dropped(&self) -> u64 {
        self.dropped.saturating_sub(self.outgoing)
    }
}

/// The family's packet sockets between `prev` (None: since attach) and `now`, most frames first.
pub fn ring_views(now: &CounterSample, prev: Option<&CounterSample>) -> Vec<RingView> {
    let before = |r: &PacketRing| {
        prev.and_then(|p| {
            p.packet_rings
                .iter()
                .find(|q| q.pid == r.pid && q.inode == r.inode)
        })
        .map_or((0, 0, 0), |q| (q.queued, q.dropped, q.outgoing))
    };
    let mut views: Vec<RingView> = now
        .packet_rings
        .iter()
        .map(|r| {
            let (q0, d0, o0) = before(r);
            RingView {
                pid: r.pid,
                fd: r.fd,
                inode: r.inode,
                kind: r.kind,
                ring_bytes: r.ring_bytes,
                frames: r.frames,
                rcvbuf: r.rcvbuf,
                ifindex: r.ifindex,
                queued: r.queued.saturating_sub(q0),
                dropped: r.dropped.saturating_sub(d0),
                queued_total: r.queued,
                dropped_total: r.dropped,
                clears: r.clears,
                owner_reads: r.owner_reads,
                read: r.read,
                open: r.open,
                outgoing: r.outgoing.saturating_sub(o0),
                outgoing_total: r.outgoing,
                sees_outgoing: r.sees_outgoing,
                filtered: r.filtered,
                seen_open: r.seen_open,
            }
        })
        .collect();
    views.sort_by_key(|v| std::cmp::Reverse(v.queued + v.dropped));
    views
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring(inode: u64, queued: u64, dropped: u64) -> PacketRing {
        PacketRing {
            pid: 7,
            fd: 3,
            inode,
            kind: RingKind::TpacketV3,
            ring_bytes: 1 << 21,
            frames: 0,
            frame_size: 0,
            block_size: 1 << 16,
            blocks: 32,
            rcvbuf: 212992,
            ifindex: 2,
            queued,
            dropped,
            owner_reads: 0,
            clears: 0,
            read: false,
            open: true,
            sees_outgoing: true,
            filtered: false,
            sent: false,
            netns: 1,
            outgoing: 0,
            seen_open: true,
        }
    }

    fn sample(rings: Vec<PacketRing>) -> CounterSample {
        CounterSample {
            packet_rings: rings,
            ..Default::default()
        }
    }

    #[test]
    fn a_tick_counts_the_frames_since_the_previous_sample() {
        let prev = sample(vec![ring(100, 1000, 10)]);
        let now = sample(vec![ring(100, 1500, 110), ring(200, 5, 0)]);
        let v = ring_views(&now, Some(&prev));
        assert_eq!(v.len(), 2);
        assert_eq!((v[0].inode, v[0].queued, v[0].dropped), (100, 500, 100));
        assert_eq!((v[0].queued_total, v[0].dropped_total), (1500, 110));
        assert!((v[0].drop_share() - 100.0 / 600.0).abs() < 1e-12);
        // A socket that appeared in the tick counts from 0.
        assert_eq!((v[1].inode, v[1].queued), (200, 5));
    }

    #[test]
    fn the_funnels_ring_stages_count_only_sockets_the_family_reads() {
        // A ring (read without syscalls), a ring-less socket read with recvfrom, and one that
        // nobody reads (zmap's send socket): the last is listed, not counted.
        let mut read = ring(200, 40, 4);
        read.kind = RingKind::Queue;
        read.read = true;
        let mut unread = ring(300, 250, 4000);
        unread.kind = RingKind::Queue;
        let now = sample(vec![ring(100, 1000, 10), read, unread]);
        let v = crate::analysis::receive::receive_view(&now, None, 1.0, &[]).expect("a funnel");
        assert_eq!(v.rings.len(), 3);
        assert_eq!(v.count(RING_STAGES[0]), 1040);
        assert_eq!(v.count(RING_STAGES[1]), 14);
        assert!(!v.rings.iter().find(|r| r.inode == 300).unwrap().is_reader());
    }

    #[test]
    fn over_the_run_the_counts_are_since_attach() {
        let now = sample(vec![ring(100, 1500, 110)]);
        let v = ring_views(&now, None);
        assert_eq!((v[0].queued, v[0].dropped), (1500, 110));
    }
}
