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
    /// records not kept: beyond scanprof's own cap of [`MAX_HEADERS`] per run, or after the
    /// spool file failed ([`HeaderSpool`])
    pub over_cap: u64,
    /// CLOCK_REALTIME minus CLOCK_MONOTONIC at attach, ns: turns `ts_ns` into wall time
    pub wall_offset_ns: i128,
}

/// The most headers a run keeps (216 bytes each in its spool file, ~300 once named at the end):
/// far above what the sampling gives a run with a few dozen drop rows.
pub const MAX_HEADERS: usize = 100_000;

/// The header records of a run as they stream, kept in a private file rather than in memory:
/// the sampling keeps a record per 256 drops of a row on a CPU up to its 1,048,576th, so at
/// 2,000 drops per second a run's memory grew ~200 KB a minute for its first quarter hour when
/// they were held in a `Vec` (issue 33 item 7). The file is created like the tick spool's
/// (`O_CREAT|O_EXCL|O_NOFOLLOW`, 0600, in a new 0700 `mkdtemp` directory, both unlinked at once:
/// nothing is left behind, even after SIGKILL); memory holds only the counts. The records come
/// back once, at the end of the run, to be named and written as pcapng.
#[derive(Debug)]
pub struct HeaderSpool {
    /// the unlinked file, and a second open of it to read it back; None when it could not be
    /// created or written (then nothing more is kept)
    file: Option<(std::io::BufWriter<std::fs::File>, std::fs::File)>,
    /// records in the file
    kept: u64,
    /// records not kept: beyond [`MAX_HEADERS`], or after the file failed
    over_cap: u64,
    /// why the file could not be created or written, said once in the run's warnings
    pub failed: Option<String>,
}

impl HeaderSpool {
    /// A new spool in the temporary directory (TMPDIR).
    pub fn create() -> HeaderSpool {
        HeaderSpool::create_in(&std::env::temp_dir())
    }

    fn create_in(parent: &std::path::Path) -> HeaderSpool {
        let template = parent.join("scanprof-drops-XXXXXX");
        let opened = nix::unistd::mkdtemp(&template)
            .map_err(std::io::Error::from)
            .and_then(|dir| {
                let path = dir.join("headers.bin");
                let file = crate::system::user_files::create_new(&path, 0o600).and_then(|out| {
                    use std::os::unix::fs::OpenOptionsExt;
                    let back = std::fs::OpenOptions::new()
                        .read(true)
                        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                        .open(&path)?;
                    Ok((out, back))
                });
                let _ = std::fs::remove_file(&path);
                let _ = std::fs::remove_dir(&dir);
                file
            });
        let (file, failed) = match opened {
            Ok((out, back)) => (Some((std::io::BufWriter::new(out), back)), None),
            Err(e) => (
                None,
                Some(format!(
                    "no private file for the dropped packets' headers under {} ({e}): none are kept \
                     for the pcapng (set TMPDIR to a writable directory)",
                    parent.display()
                )),
            ),
        };
        HeaderSpool {
            file,
            kept: 0,
            over_cap: 0,
            failed,
        }
    }

    /// Appends one record, or counts it as not kept.
    pub fn push(&mut self, p: &sp_drop_pkt) {
        use std::io::Write;
        let Some((out, _)) = self.file.as_mut().filter(|_| self.kept < MAX_HEADERS as u64) else {
            self.over_cap += 1;
            return;
        };
        match out.write_all(crate::probes::drop_pkt_bytes(p)) {
            Ok(()) => self.kept += 1,
            Err(e) => {
                self.failed = Some(format!(
                    "writing the dropped packets' headers to their private file in {} failed after {} \
                     ({e}): the pcapng has only those",
                    std::env::temp_dir().display(),
                    self.kept
                ));
                self.file = None;
                self.over_cap += 1;
            }
        }
    }

    /// Records in the file.
    pub fn kept(&self) -> u64 {
        self.kept
    }

    /// Records streamed but not kept (beyond [`MAX_HEADERS`], or after a failed write).
    pub fn over_cap(&self) -> u64 {
        self.over_cap
    }

    /// Every record kept, in the order they came, and the count not kept; the spool is empty
    /// after (a later record starts a new file's worth of nothing: the run has ended).
    pub fn take(&mut self) -> (Vec<sp_drop_pkt>, u64) {
        use std::io::{Read, Seek};
        let over_cap = std::mem::take(&mut self.over_cap);
        let Some((mut out, mut back)) = self.file.take() else {
            self.kept = 0;
            return (Vec::new(), over_cap);
        };
        let kept = std::mem::take(&mut self.kept);
        let read = std::io::Write::flush(&mut out).and_then(|()| {
            back.rewind()?;
            let mut bytes = Vec::new();
            back.read_to_end(&mut bytes)?;
            Ok(bytes)
        });
        match read {
            Ok(bytes) => {
                let size = std::mem::size_of::<sp_drop_pkt>();
                let records: Vec<sp_drop_pkt> = bytes
                    .chunks_exact(size)
                    .filter_map(crate::probes::drop_pkt_from_bytes)
                    .collect();
                let lost = kept.saturating_sub(records.len() as u64);
                (records, over_cap + lost)
            }
            Err(e) => {
                self.failed = Some(format!(
                    "reading the dropped packets' headers back from their private file failed ({e}): \
                     the pcapng has none"
                ));
                (Vec::new(), over_cap + kept)
            }
        }
    }
}

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

    fn record(seq: u64) -> sp_drop_pkt {
        // SAFETY: sp_drop_pkt is plain integers and arrays, for which zero is valid.
        let mut p: sp_drop_pkt = unsafe { std::mem::zeroed() };
        p.seq = seq;
        p.ts_ns = seq * 1000 + 7;
        p.key.tgid = 42;
        p.data[(seq % PKT_HDR as u64) as usize] = (seq % 251) as u8;
        p
    }

    /// Issue 33 item 7: the headers a long run keeps live in the spool's file, not in memory:
    /// after 20,000 records the file holds each one's 216 bytes, and they come back whole and
    /// in order. Held in a `Vec` (as before), the file stays empty and this fails.
    #[test]
    fn headers_are_kept_in_the_spool_file_not_in_memory() {
        use std::io::Write;
        let mut spool = HeaderSpool::create();
        assert!(spool.failed.is_none(), "{:?}", spool.failed);
        let n = 20_000u64;
        for i in 1..=n {
            spool.push(&record(i));
        }
        let (out, back) = spool.file.as_mut().expect("the spool's file");
        out.flush().unwrap();
        let size = std::mem::size_of::<sp_drop_pkt>() as u64;
        assert_eq!(size, 216);
        assert_eq!(
            back.metadata().unwrap().len(),
            n * size,
            "the records are in the file"
        );
        assert!(out.buffer().is_empty());
        assert_eq!((spool.kept(), spool.over_cap()), (n, 0));
        let (records, over_cap) = spool.take();
        assert_eq!(over_cap, 0);
        assert_eq!(records.len() as u64, n);
        for (i, p) in (1..=n).zip(&records) {
            let want = record(i);
            assert_eq!(
                (p.seq, p.ts_ns, p.key.tgid),
                (want.seq, want.ts_ns, want.key.tgid)
            );
            assert_eq!(p.data, want.data, "record {i}");
        }
        // Taken once: nothing is left.
        assert_eq!(spool.take().0.len(), 0);
    }

    /// Beyond MAX_HEADERS, records are counted, not kept; a spool whose file could not be
    /// made keeps none and says why.
    #[test]
    fn the_spool_keeps_at_most_its_cap_and_counts_the_rest() {
        let mut spool = HeaderSpool::create();
        let p = record(1);
        for _ in 0..MAX_HEADERS + 5 {
            spool.push(&p);
        }
        assert_eq!((spool.kept(), spool.over_cap()), (MAX_HEADERS as u64, 5));
        let (records, over_cap) = spool.take();
        assert_eq!((records.len(), over_cap), (MAX_HEADERS, 5));

        let mut nowhere = HeaderSpool::create_in(std::path::Path::new("/nonexistent-scanprof-dir"));
        nowhere.push(&p);
        assert_eq!((nowhere.kept(), nowhere.over_cap()), (0, 1));
        assert!(
            nowhere
                .failed
                .as_deref()
                .is_some_and(|w| w.contains("set TMPDIR")),
            "{:?}",
            nowhere.failed
        );
        let (records, over_cap) = nowhere.take();
        assert_eq!((records.len(), over_cap), (0, 1));
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
