//! The family's dropped packets as a pcapng (`--pcap FILE`, and drops.pcapng in a bundle): the
//! sampled headers of the Summary, one Enhanced Packet Block each with a comment naming the
//! drop as the drop table does. Written with the `pcap-file` crate; pure (any `Write`).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

use pcap_file::pcapng::blocks::enhanced_packet::{EnhancedPacketBlock, EnhancedPacketOption};
use pcap_file::pcapng::blocks::interface_description::{
    InterfaceDescriptionBlock, InterfaceDescriptionOption,
};
use pcap_file::pcapng::blocks::section_header::{SectionHeaderBlock, SectionHeaderOption};
use pcap_file::pcapng::PcapNgWriter;
use pcap_file::{DataLink, Endianness};

use crate::analysis::Summary;
use crate::collect::headers::DroppedHeader;
use crate::collect::DropClass;

/// What a pcapng holds, for the run's message and the tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    /// packets (headers) in the file
    pub packets: usize,
    /// the family's drops in the drop table over the run
    pub family_drops: u64,
}

/// The section comment: what the file holds and how it was sampled, with each reason's drops
/// (the drop table's) beside its headers.
pub fn section_comment(summary: &Summary) -> String {
    let d = &summary.dropped_headers;
    let mut per_reason: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for row in summary.drops.iter().filter(|r| r.class != DropClass::Unrelated) {
        per_reason.entry(&row.reason).or_default().0 += row.count;
    }
    for h in &d.headers {
        per_reason.entry(&h.reason).or_default().1 += 1;
    }
    let counts: Vec<String> = per_reason
        .iter()
        .map(|(reason, (drops, kept))| format!("{reason}: {drops} drops, {kept} headers"))
        .collect();
    let sampling = d
        .sampling
        .map(|s| s.describe())
        .unwrap_or_else(|| "no sampling rule recorded".to_string());
    let mut c = format!(
        "scanprof: headers of the target family's dropped packets, from the network header \
         (LINKTYPE_RAW: IPv4 or IPv6). Sampling: {sampling}. {}",
        if counts.is_empty() {
            "The family had no drops.".to_string()
        } else {
            format!("{}.", counts.join("; "))
        }
    );
    if summary.health.lost_events > 0 {
        c.push_str(&format!(
            " {} ring-buffer records were lost (buffer full): some sampled headers are missing.",
            summary.health.lost_events
        ));
    }
    if d.over_cap > 0 {
        c.push_str(&format!(
            " {} headers beyond scanprof's cap were not kept.",
            d.over_cap
        ));
    }
    c
}

fn packet_block(h: &DroppedHeader, wall_offset_ns: i128) -> EnhancedPacketBlock<'_> {
    let wall = (h.ts_ns as i128 + wall_offset_ns).clamp(0, u64::MAX as i128) as u64;
    EnhancedPacketBlock {
        interface_id: 0,
        timestamp: Duration::from_nanos(wall),
        original_len: h.wire_len.max(h.bytes.len() as u32),
        data: Cow::Borrowed(&h.bytes),
        options: vec![EnhancedPacketOption::Comment(Cow::Owned(h.comment()))],
    }
}

/// Writes the summary's dropped-packet headers as a pcapng: a section whose comment states the
/// sampling, one interface (LINKTYPE_RAW, ns timestamps), one packet per header in the order
/// they were dropped.
pub fn write(out: &mut dyn Write, summary: &Summary) -> anyhow::Result<Written> {
    let d = &summary.dropped_headers;
    let section = SectionHeaderBlock {
        endianness: Endianness::native(),
        options: vec![
            SectionHeaderOption::Comment(Cow::Owned(section_comment(summary))),
            SectionHeaderOption::UserApplication(Cow::Owned(format!(
                "scanprof {}",
                env!("CARGO_PKG_VERSION")
            ))),
        ],
        ..Default::default()
    };
    let mut w = PcapNgWriter::with_section_header(out, section)?;
    let snaplen = d
        .sampling
        .map_or(crate::probes::PKT_HDR as u32, |s| s.bytes as u32);
    w.write_pcapng_block(InterfaceDescriptionBlock {
        linktype: DataLink::RAW,
        snaplen,
        options: vec![
            InterfaceDescriptionOption::IfName(Cow::Borrowed("scanprof-drops")),
            InterfaceDescriptionOption::IfDescription(Cow::Borrowed(
                "the family's dropped packets, from the network header on; each packet's comment \
                 names its drop",
            )),
            InterfaceDescriptionOption::IfTsResol(9),
        ],
    })?;
    let mut order: Vec<&DroppedHeader> = d.headers.iter().collect();
    order.sort_by_key(|h| h.ts_ns);
    for h in &order {
        w.write_pcapng_block(packet_block(h, d.wall_offset_ns))?;
    }
    let family_drops = summary
        .drops
        .iter()
        .filter(|r| r.class != DropClass::Unrelated)
        .map(|r| r.count)
        .sum();
    Ok(Written {
        packets: order.len(),
        family_drops,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::DropRow;
    use crate::collect::headers::{DroppedHeaders, Sampling};
    use pcap_file::pcapng::{Block, PcapNgReader};

    fn header(reason: &str, ts_ns: u64, bytes: Vec<u8>) -> DroppedHeader {
        DroppedHeader {
            ts_ns,
            reason: reason.into(),
            location: "__dev_queue_xmit+0x8c".into(),
            device: Some("veth-a".into()),
            ifindex: 4,
            netns: 4026532400,
            class: DropClass::TargetLoss,
            pid: 1234,
            comm: "scanprof".into(),
            seq: 1,
            wire_len: 28,
            bytes,
            no_network_header: false,
        }
    }

    fn summary_with(headers: Vec<DroppedHeader>) -> Summary {
        let (_, mut s) = crate::views::fixtures::rich_run();
        s.drops = vec![
            DropRow {
                reason: "QDISC_DROP".into(),
                location: "__dev_queue_xmit+0x8c".into(),
                device: Some("veth-a".into()),
                netns: 4026532400,
                class: DropClass::TargetLoss,
                pid: Some(1234),
                count: 300,
                rate: 0.0,
            },
            DropRow {
                reason: "NO_SOCKET".into(),
                location: "x+0x1".into(),
                device: None,
                netns: 1,
                class: DropClass::Unrelated,
                pid: None,
                count: 7,
                rate: 0.0,
            },
        ];
        s.health.lost_events = 0;
        s.dropped_headers = DroppedHeaders {
            headers,
            sampling: Some(Sampling::PROBES),
            over_cap: 0,
            wall_offset_ns: 1_700_000_000_000_000_000,
        };
        s
    }

    #[test]
    fn the_pcapng_has_a_raw_interface_and_a_comment_per_packet() {
        let ip = vec![
            0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0, 10, 99, 0, 1, 10, 99, 0, 2,
        ];
        // out of order on purpose: the file is in drop order
        let s = summary_with(vec![
            header("QDISC_DROP", 2_000, ip.clone()),
            header("QDISC_DROP", 1_000, vec![]),
        ]);
        let mut buf = Vec::new();
        let written = write(&mut buf, &s).unwrap();
        assert_eq!(
            written,
            Written {
                packets: 2,
                family_drops: 300
            }
        );

        let mut r = PcapNgReader::new(&buf[..]).unwrap();
        let section = r.section().clone();
        let comment = section
            .options
            .iter()
            .find_map(|o| match o {
                SectionHeaderOption::Comment(c) => Some(c.to_string()),
                _ => None,
            })
            .unwrap();
        assert!(
            comment.contains("first 64 drops on each CPU, then 1 in 256"),
            "{comment}"
        );
        assert!(comment.contains("QDISC_DROP: 300 drops, 2 headers"), "{comment}");
        assert!(
            !comment.contains("NO_SOCKET"),
            "unrelated drops are not the family's: {comment}"
        );
        let mut packets = Vec::new();
        while let Some(block) = r.next_block() {
            match block.unwrap() {
                Block::InterfaceDescription(i) => {
                    assert_eq!(i.linktype, DataLink::RAW);
                    assert_eq!(i.snaplen, 128);
                    assert!(i.options.contains(&InterfaceDescriptionOption::IfTsResol(9)));
                }
                Block::EnhancedPacket(p) => packets.push(p.into_owned()),
                _ => {}
            }
        }
        assert_eq!(r.interfaces().len(), 1);
        assert_eq!(packets.len(), 2);
        assert_eq!(packets[0].data.len(), 0);
        assert_eq!(packets[1].data.as_ref(), &ip[..]);
        assert_eq!(packets[1].original_len, 28);
        assert_eq!(
            packets[0].timestamp,
            Duration::from_nanos(1_700_000_000_000_001_000),
            "monotonic ts + the wall offset"
        );
        assert_eq!(
            packets[1].options,
            [EnhancedPacketOption::Comment(Cow::Owned(
                "reason=QDISC_DROP location=__dev_queue_xmit+0x8c device=veth-a netns=4026532400 \
                 pid=1234 comm=scanprof class=target_loss seq=1"
                    .into()
            ))]
        );
    }

    #[test]
    fn a_run_without_family_drops_writes_an_empty_capture_that_says_so() {
        let mut s = summary_with(vec![]);
        s.drops.clear();
        s.health.lost_events = 3;
        let mut buf = Vec::new();
        assert_eq!(write(&mut buf, &s).unwrap().packets, 0);
        let comment = section_comment(&s);
        assert!(comment.contains("The family had no drops."), "{comment}");
        assert!(comment.contains("3 ring-buffer records were lost"), "{comment}");
        let mut r = PcapNgReader::new(&buf[..]).unwrap();
        let mut n = 0;
        while let Some(b) = r.next_block() {
            if let Block::EnhancedPacket(_) = b.unwrap() {
                n += 1;
            }
        }
        assert_eq!(n, 0);
    }
}
