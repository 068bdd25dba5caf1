//! The headers of the family's dropped packets (`SP_EV_DROP_PKT` records of drops.bpf.c), typed
//! and named like the drop table's rows. The kernel keeps a row's first drops on each CPU and
//! then a sample ([`Sampling`], the rule of wire.h); views/export/pcap.rs writes them as pcapng.

use serde::{Deserialize, Serialize};

use super::DropClass;
use crate::probes::{sp_drop_pkt, sp_pkt_flags, sp_pkt_sampling, PKT_HDR};

/// Which drops keep their header: the i-th drop (from 1) of a drop-table row on one CPU is kept
/// when `i <= first`, or when `i` is a multiple of `every` and `i <= until`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sampling {
    pub first: u64,
    /// a power of two
    pub every: u64,
    pub until: u64,
    /// bytes kept of each packet, from its network header on
    pub bytes: u64,
}

impl Sampling {
    /// The rule the probes apply (wire.h's `enum sp_pkt_sampling`).
    pub const PROBES: Sampling = Sampling {
        first: sp_pkt_sampling::SP_PKT_FIRST.0 as u64,
        every: sp_pkt_sampling::SP_PKT_EVERY.0 as u64,
        until: sp_pkt_sampling::SP_PKT_UNTIL.0 as u64,
        bytes: sp_pkt_sampling::SP_PKT_HDR.0 as u64,
    };

    /// Whether the i-th drop of a row on a CPU keeps its header (pkt_sampled in drops.bpf.c).
    pub fn keeps(&self, i: u64) -> bool {
        i >= 1 && (i <= self.first || (i <= self.until && i % self.every == 0))
    }

    /// Headers kept of `n` drops of one row on one CPU.
    pub fn kept_of(&self, n: u64) -> u64 {
        let first = n.min(self.first);
        let sampled = n.min(self.until) / self.every - self.first.min(n.min(self.until)) / self.every;
        first + sampled
    }

    /// The rule in words, for the pcapng's section comment and the run's messages.
    pub fn describe(&self) -> String {
        format!(
            "the family's drops (target_loss, reply_loss, expected, reply_side) keep their first {} bytes from \
             the network header: every one of a drop-table row's first {} drops on each CPU, then \
             1 in {} up to its {}th on that CPU; the drop table counts every drop",
            self.bytes, self.first, self.every, self.until
        )
    }
}

/// One dropped packet of the family, with its first bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct DroppedHeader {
    /// CLOCK_MONOTONIC of the drop, ns
    pub ts_ns: u64,
    /// the kernel's drop reason, named as the drop table names it
    pub reason: String,
    /// where the skb was freed: symbol+offset, as the drop table names it
    pub location: String,
    pub device: Option<String>,
    pub ifindex: u32,
    /// network namespace inode, 0 if unknown
    pub netns: u32,
    pub class: DropClass,
    /// the family process the drop is attributed to
    pub pid: u32,
    /// that process's command name (the task's own, or the process table's)
    pub comm: String,
    /// this drop's number in its row on its CPU (the sampling's i)
    pub seq: u64,
    /// bytes of the packet from its network header to its end
    pub wire_len: u32,
    /// the packet from its network header on (IPv4 or IPv6), at most `Sampling::bytes`
    pub bytes: Vec<u8>,
    /// the drop came before the kernel set the network header: no bytes
    pub no_network_header: bool,
}

impl DroppedHeader {
    /// The packet comment: reason, location, device, namespace, pid, comm (and why there are
    /// no bytes, when there are none).
    pub fn comment(&self) -> String {
        let mut c = format!(
            "reason={} location={} device={} netns={} pid={} comm={} class={} seq={}",
            self.reason,
            self.location,
            self.device.as_deref().unwrap_or("-"),
            self.netns,
            self.pid,
            if self.comm.is_empty() { "-" } else { &self.comm },
            self.class.name(),
            self.seq,
        );
        if self.no_network_header {
            c.push_str(" (dropped before the network header was set: no bytes)");
        }
        c
    }
}

/// The headers of a run, and what was not kept.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DroppedHeaders {
    pub headers: Vec<DroppedHeader>,
    /// the rule that chose them (None: the probes streamed none, e.g. a bundle read back)
    pub sampling: Option<Sampling>,
    /// records beyond scanprof's own cap of [`MAX_HEADERS`] in memory, not kept
    pub over_cap: u64,
    /// CLOCK_REALTIME minus CLOCK_MONOTONIC at attach, ns: turns `ts_ns` into wall time
    pub wall_offset_ns: i128,
}

/// The most headers a run holds in memory (~300 bytes each): far above what the sampling gives
/// a run with a few dozen drop rows.
pub const MAX_HEADERS: usize = 100_000;

/// Names one record with the names the drop table uses.
pub fn decode(
    p: &sp_drop_pkt,
    reason: String,
    location: String,
    device: Option<String>,
    family_comm: Option<&str>,
) -> DroppedHeader {
    let k = &p.key;
    let cap = (p.cap_len as usize).min(PKT_HDR);
    // The drop ran in the attributed process (a qdisc drop in the sender's send call) or in
    // another task (softirq): the process table names the latter's owner.
    let own = crate::probes::c_chars(&p.comm);
    let comm = if p.cur_tgid == k.tgid {
        own
    } else {
        family_comm.map(str::to_string).unwrap_or_default()
    };
    DroppedHeader {
        ts_ns: p.ts_ns,
        reason,
        location,
        device,
        ifindex: k.ifindex,
        netns: k.netns,
        class: DropClass::from_wire(k.class),
        pid: k.tgid,
        comm,
        seq: p.seq,
        wire_len: p.len,
        bytes: p.data[..cap].to_vec(),
        no_network_header: p.flags & sp_pkt_flags::SP_PKT_NO_NETWORK_HEADER.0 != 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rule_keeps_the_first_then_one_in_every_until_the_limit() {
        let s = Sampling {
            first: 4,
            every: 8,
            until: 64,
            bytes: 128,
        };
        let kept: Vec<u64> = (0..100).filter(|&i| s.keeps(i)).collect();
        assert_eq!(kept, [1, 2, 3, 4, 8, 16, 24, 32, 40, 48, 56, 64]);
        for n in 0..100 {
            assert_eq!(
                s.kept_of(n),
                (1..=n).filter(|&i| s.keeps(i)).count() as u64,
                "n = {n}"
            );
        }
        // the probes' rule: a row's first 64 whole, then 1 in 256, bounded
        let p = Sampling::PROBES;
        assert_eq!((p.first, p.every, p.until, p.bytes), (64, 256, 1 << 20, 128));
        assert_eq!(p.kept_of(64), 64);
        assert_eq!(p.kept_of(8882), 64 + 8882 / 256);
        assert_eq!(p.kept_of(u64::MAX), 64 + (1 << 20) / 256);
        assert!(p.describe().contains("first 64 drops on each CPU, then 1 in 256"));
    }

    #[test]
    fn a_record_is_named_and_cut_to_its_captured_length() {
        // SAFETY: sp_drop_pkt is plain integers and arrays, for which zero is valid.
        let mut p: sp_drop_pkt = unsafe { std::mem::zeroed() };
        p.key.tgid = 42;
        p.key.class = 1;
        p.key.netns = 4026531840;
        p.key.ifindex = 3;
        p.cur_tgid = 7;
        p.seq = 5;
        p.len = 1028;
        p.cap_len = 1000; // more than the record holds: cut to PKT_HDR
        p.data[0] = 0x45;
        let h = decode(
            &p,
            "QDISC_DROP".into(),
            "__dev_queue_xmit+0x8c".into(),
            Some("veth0".into()),
            Some("sender"),
        );
        assert_eq!(h.bytes.len(), PKT_HDR);
        assert_eq!(h.bytes[0], 0x45);
        assert_eq!(h.comm, "sender");
        assert_eq!(h.class, DropClass::TargetLoss);
        assert_eq!(
            h.comment(),
            "reason=QDISC_DROP location=__dev_queue_xmit+0x8c device=veth0 netns=4026531840 pid=42 \
             comm=sender class=target_loss seq=5"
        );
        p.flags = sp_pkt_flags::SP_PKT_NO_NETWORK_HEADER.0;
        p.cap_len = 0;
        let h = decode(&p, "NO_SOCKET".into(), "x+0x1".into(), None, None);
        assert!(h.bytes.is_empty());
        assert!(h.comment().ends_with("device=- netns=4026531840 pid=42 comm=- class=target_loss seq=5 (dropped before the network header was set: no bytes)"));
    }
}
