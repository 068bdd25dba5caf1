//! `ring_full`: frames for the family's packet sockets dropped because the socket's TPACKET
//! ring (or, without a ring, its receive queue) was full. The figures are the sockets' own
//! counters (the ones PACKET_STATISTICS returns), read by the packet-socket iterator; the share
//! is the incoming frames dropped over the incoming frames that reached those sockets: a socket
//! bound to every protocol is also given a copy of every frame sent on its devices
//! (PACKET_OUTGOING), and those copies are no replies (`RingView::incoming`).

use super::facts::Facts;
use super::units::{pct, pps};
use super::{verdict, Cause, Kind, Verdict, MIN_DROPS, MIN_PACKETS};
use crate::analysis::rings::RingView;
use crate::collect::rings::RingKind;

/// Bytes a frame takes in a TPACKET_V3 ring, whose frames are as long as the packets: a
/// full-size Ethernet frame and its header, for sizing advice when the ring's own frame size
/// is not fixed.
const V3_FRAME_BYTES: u64 = 2048;

/// Frames larger than this hold whole packets of the largest snapshot length (libpcap sizes a
/// V1/V2 ring's frames from it: 65,535 bytes gives 128 KiB frames, 32 to a 4 MiB ring), when a
/// scan's replies need a few hundred bytes.
const LARGE_FRAME: u64 = 8192;
/// Bytes of a reply worth keeping (headers of a TCP or ICMP reply and more), and the frame it
/// then takes in a ring (the TPACKET_V2 header and the link header, aligned).
const SHORT_SNAPLEN: u64 = 256;
const SHORT_FRAME: u64 = 512;

/// Advice when more than half of the incoming frames were dropped.
const KEEP_UP: &str = " More than half of what arrived was dropped: the reader is slower than the traffic, so a larger ring only delays the drops; read faster (fewer packets per reader: a BPF filter, PACKET_FANOUT over more readers).";

/// A power of two at least `n`, at least 4 MiB: a ring size people type.
fn ring_figure(n: u64) -> u64 {
    n.max(4 << 20).next_power_of_two()
}

fn describe(v: &RingView, role: Option<&str>) -> String {
    let size = match v.kind {
        RingKind::Queue if !v.seen_open => "receive queue (its SO_RCVBUF not read)".to_string(),
        RingKind::Queue => format!("receive queue of {} bytes (SO_RCVBUF)", v.rcvbuf),
        RingKind::TpacketV3 => format!("{} of {} bytes", v.kind.label(), v.ring_bytes),
        _ => format!(
            "{} of {} frames ({} bytes)",
            v.kind.label(),
            v.frames,
            v.ring_bytes
        ),
    };
    let who = match role {
        Some(role) => format!("pid {} ({role})", v.pid),
        None => format!("pid {}", v.pid),
    };
    let copies = match v.outgoing {
        0 => String::new(),
        n => format!(", {n} of all of them copies of frames sent on its devices"),
    };
    let reads = match v.owner_reads {
        0 => String::new(),
        n => format!(
            "; its owner read (and so cleared) its counters {n} time{}, each read's counts captured and included",
            if n == 1 { "" } else { "s" }
        ),
    };
    // A socket known only by its record at close: its device was not read.
    let bound = if v.seen_open {
        format!("bound to ifindex {}", v.ifindex)
    } else {
        "opened and closed between two samples (its device not read)".to_string()
    };
    format!(
        "{who}, fd {}, {size}, {bound}: {} frames queued, {} dropped full ({}){copies}{reads}",
        v.fd,
        v.queued,
        v.dropped,
        pct(v.drop_share())
    )
}

pub(super) fn ring_full(f: &Facts) -> Option<Verdict> {
    let r = f.receive?;
    let readers = || r.rings.iter().filter(|v| v.is_reader());
    // Only incoming frames are replies: drops that the copies of outgoing frames could account
    // for are no missed reply.
    let rings: Vec<&RingView> = readers().filter(|v| v.incoming_dropped() > 0).collect();
    let dropped: u64 = rings.iter().map(|v| v.incoming_dropped()).sum();
    if dropped == 0 {
        return None;
    }
    let incoming: u64 = readers().map(RingView::incoming).sum();
    let outgoing: u64 = readers().map(|v| v.outgoing).sum();
    let (queued, all_dropped): (u64, u64) = (
        readers().map(|v| v.queued).sum(),
        readers().map(|v| v.dropped).sum(),
    );
    let share = dropped as f64 / incoming.max(1) as f64;
    let secs = f.receive_s.max(1e-9);
    let over = if f.live { "in this tick" } else { "over the run" };
    let role = |pid: u32| {
        f.scanner
            .and_then(|s| s.roles.iter().find(|r| r.pid == pid))
            .map(|r| format!("{}'s {}", f.scanner.map_or("", |s| s.profile.as_str()), r.role))
    };
    let mut evidence = vec![if outgoing == 0 {
        format!(
            "{} frames reached the family's packet sockets {over} ({}); {queued} were queued for it to read and {dropped} ({}) dropped because the ring was full",
            queued + all_dropped,
            pps((queued + all_dropped) as f64 / secs),
            pct(share)
        )
    } else {
        format!(
            "{} frames reached the family's packet sockets {over} ({}): {outgoing} copies of frames sent on their devices (PACKET_OUTGOING: the kernel gives them to a socket bound to every protocol; no replies) and {incoming} incoming; {queued} were queued and {all_dropped} dropped because the ring was full, of which at least {dropped} incoming ({} of them: the drops less every outgoing copy)",
            queued + all_dropped,
            pps((queued + all_dropped) as f64 / secs),
            pct(share)
        )
    }];
    for v in rings.iter().take(3) {
        evidence.push(describe(v, role(v.pid).as_deref()));
    }
    // Sockets nobody reads drop too once their queue is full: said, not counted.
    for v in r.rings.iter().filter(|v| !v.is_reader() && v.dropped > 0).take(2) {
        evidence.push(format!(
            "not counted: pid {}, fd {}, a packet socket without a ring that the family never reads ({} frames queued, {} dropped full): it receives every frame it is bound to, and what it drops is not missed",
            v.pid, v.fd, v.queued, v.dropped
        ));
    }
    // A filter decides what such a socket takes: which of its frames were outgoing copies is
    // not known, and all count as incoming.
    for v in rings.iter().filter(|v| v.sees_outgoing && v.filtered).take(2) {
        evidence.push(format!(
            "pid {}, fd {} is bound to every protocol, so it is also given copies of the frames sent on its devices, and a socket filter picks what it takes: which of its frames were such copies is not known, and all are counted as incoming",
            v.pid, v.fd
        ));
    }
    if rings.iter().any(|v| v.clears > 0) {
        evidence.push(
            "the sockets' counters were cleared by PACKET_STATISTICS reads whose counts scanprof did not get (a reader outside the family, or a family read it could not read): the frames counted between scanprof's last read and each such clear are missing, so these counts are lower bounds"
                .to_string(),
        );
    }
    // The size advised is sized to the loss: the ring (or receive queue) of the socket that lost
    // the most replies, with room for every frame it dropped (a full ring drops copies of
    // outgoing frames too, and they take the same room), at most a second of what arrived there
    // (a reader slower than that for longer needs to read faster, not a larger ring).
    let worst = rings.iter().max_by_key(|v| v.incoming_dropped())?;
    let arrived_pps = (worst.queued + worst.dropped) as f64 / secs;
    let frame_bytes = match worst.kind {
        RingKind::Queue | RingKind::TpacketV3 => V3_FRAME_BYTES,
        _ => worst
            .ring_bytes
            .checked_div(u64::from(worst.frames))
            .unwrap_or(V3_FRAME_BYTES),
    };
    let held = match worst.kind {
        RingKind::Queue => u64::from(worst.rcvbuf),
        _ => worst.ring_bytes,
    };
    let lost_bytes = worst.dropped.saturating_mul(frame_bytes);
    let need = held.saturating_add(lost_bytes);
    let second = (arrived_pps * frame_bytes as f64).ceil() as u64;
    let capped = held < second && need > second;
    let figure = ring_figure(if capped { second } else { need });
    let lost = if worst.kind == RingKind::Queue && !worst.seen_open {
        // its SO_RCVBUF was not read (known only at close): what it held is not known
        format!(
            "pid {}'s socket held an unknown number of bytes; its {} dropped frames take ~{lost_bytes} more at ~{frame_bytes} bytes a frame",
            worst.pid, worst.dropped
        )
    } else {
        format!(
            "pid {}'s socket held {held} bytes; its {} dropped frames take ~{lost_bytes} more at ~{frame_bytes} bytes a frame",
            worst.pid, worst.dropped
        )
    };
    evidence.push(if capped {
        format!(
            "{lost}, more than a second of what reached it (~{second} bytes at {}, the average {over}): ~{figure} bytes holds that second; a reader behind for longer needs to read faster",
            pps(arrived_pps)
        )
    } else {
        format!("{lost}: ~{figure} bytes would have held them")
    });
    // Large fixed frames: the snapshot length, not the ring's bytes, limits the frames it holds.
    let large =
        worst.kind != RingKind::TpacketV3 && worst.kind != RingKind::Queue && frame_bytes > LARGE_FRAME;
    let short = if large {
        let more = worst.ring_bytes / SHORT_FRAME;
        evidence.push(format!(
            "its frames are {frame_bytes} bytes each, sized for whole packets of the snapshot length: the ring holds only {} frames; with {SHORT_SNAPLEN}-byte snapshots (~{SHORT_FRAME}-byte frames) the same {} bytes would hold ~{more}",
            worst.frames, worst.ring_bytes
        ));
        format!(
            " Or keep the ring and shorten the frames: a snapshot length of {SHORT_SNAPLEN} bytes (pcap_set_snaplen, tcpdump -s {SHORT_SNAPLEN}) fits ~{more} frames in the same {} bytes.",
            worst.ring_bytes
        )
    } else {
        String::new()
    };
    // A scanner that sent: the frames lost were its replies, missed by its listener while the
    // scan went on (the send side's figures beside them).
    let scanner = f
        .scanner
        .filter(|s| !s.is_generic() && f.packets_total > 0)
        .map(|s| s.profile.as_str());
    if let Some(name) = scanner {
        let asked = f.requested.map_or("no known requested rate".to_string(), |r| {
            format!("{} requested", pps(r))
        });
        evidence.insert(
            0,
            format!(
                "{name} sent {} packets {over} at {} ({asked}): the replies its packet sockets dropped are lost to the scan, whatever its send rate",
                f.packets_total,
                pps(f.achieved)
            ),
        );
    }
    // With outgoing copies among the frames, the incoming drops are a lower bound.
    let least = if outgoing > 0 { "at least " } else { "" };
    let frames = if outgoing > 0 { "incoming frames" } else { "frames" };
    let (sentence, step) = if worst.kind == RingKind::Queue {
        (
            format!("The family's packet socket's receive queue was full: {least}{dropped} {frames} ({}) were dropped before it read them.", pct(share)),
            format!(
                "Raise the socket's receive buffer to {figure} bytes (SO_RCVBUF, within net.core.rmem_max), or map a receive ring (PACKET_RX_RING)."
            ),
        )
    } else {
        (
            format!("The family's packet-socket ring was full: {least}{dropped} {frames} ({}) were dropped before it read them.", pct(share)),
            format!(
                "Raise the ring size to {figure} bytes: through libpcap, pcap_set_buffer_size({figure}) before pcap_activate (tcpdump -B {}); with PACKET_RX_RING directly, tp_block_nr x tp_block_size.",
                figure / 1024
            ),
        )
    };
    let sentence = match scanner {
        Some(name) => format!(
            "{name}'s listener missed {least}{dropped} replies ({}): {}",
            pct(share),
            sentence.replacen("The family's", "its", 1)
        ),
        None => sentence,
    };
    let keep_up = if outgoing > 0 {
        format!(
            "{} Copies of outgoing frames took {} of what reached the sockets: a socket that wants only incoming frames can refuse them (setsockopt PACKET_IGNORE_OUTGOING, Linux 4.20+, or a filter on `inbound`).",
            if share > 0.5 { KEEP_UP } else { "" },
            pct(outgoing as f64 / (queued + all_dropped).max(1) as f64)
        )
    } else if share > 0.5 {
        KEEP_UP.to_string()
    } else {
        String::new()
    };
    Some(verdict(
        Cause::RingFull,
        Kind::Loss,
        sentence,
        share,
        evidence,
        format!("{step}{short}{keep_up}"),
        dropped < MIN_DROPS || incoming < MIN_PACKETS,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::receive::ReceiveView;
    use crate::analysis::snapshot::Summary;
    use crate::analysis::verdict::{for_summary, Confidence};

    fn ring(kind: RingKind, queued: u64, dropped: u64) -> RingView {
        RingView {
            sees_outgoing: true,
            ..RingView::fixture(kind, 16384, 8, queued, dropped)
        }
    }

    fn run(rings: Vec<RingView>) -> Vec<Verdict> {
        diagnose(rings, None, 0)
    }

    fn diagnose(rings: Vec<RingView>, profile: Option<&str>, packets: u64) -> Vec<Verdict> {
        let scanner = profile.map(|p| crate::analysis::scanner::ScannerView {
            profile: p.into(),
            roles: vec![crate::analysis::scanner::RoleView {
                pid: 42,
                comm: p.into(),
                role: "scanner".into(),
            }],
            ..Default::default()
        });
        let mut summary = Summary::for_tests();
        summary.scanner = scanner;
        summary.packets = packets;
        for_summary(&Summary {
            duration_s: 4.0,
            receive: Some(ReceiveView {
                rings,
                ..Default::default()
            }),
            ..summary
        })
    }

    #[test]
    fn a_scanner_that_sent_is_told_its_listener_missed_replies() {
        let v = diagnose(vec![ring(RingKind::TpacketV2, 2731, 274)], Some("masscan"), 3000);
        let r = v.iter().find(|v| v.cause == Cause::RingFull).expect("ring_full");
        assert!(
            r.sentence
                .starts_with("masscan's listener missed 274 replies (9.1%): its packet-socket ring was full"),
            "{}",
            r.sentence
        );
        assert!(
            r.evidence[0].starts_with("masscan sent 3000 packets"),
            "{:#?}",
            r.evidence
        );
        assert!(
            r.evidence
                .iter()
                .any(|e| e.contains("pid 42 (masscan's scanner)")),
            "{:#?}",
            r.evidence
        );
        // The generic profile, or a family that never sent, is not a scanner missing replies.
        for (profile, packets) in [("generic", 3000), ("masscan", 0)] {
            let v = diagnose(vec![ring(RingKind::TpacketV2, 2731, 274)], Some(profile), packets);
            let r = v.iter().find(|v| v.cause == Cause::RingFull).expect("ring_full");
            assert!(
                r.sentence.starts_with("The family's packet-socket ring"),
                "{}",
                r.sentence
            );
        }
    }

    #[test]
    fn a_socket_known_only_at_close_does_not_claim_a_device_or_a_queue_size() {
        // Opened and closed between two samples: its device and SO_RCVBUF were not read (0).
        for kind in [RingKind::TpacketV2, RingKind::Queue] {
            let unseen = RingView {
                seen_open: false,
                ifindex: 0,
                rcvbuf: 0,
                ..ring(kind, 651, 3370)
            };
            let v = run(vec![unseen]);
            let r = v.iter().find(|v| v.cause == Cause::RingFull).expect("ring_full");
            let all = r.evidence.join("\n");
            assert!(!all.contains("ifindex"), "{all}");
            assert!(
                all.contains("opened and closed between two samples (its device not read)"),
                "{all}"
            );
            if kind == RingKind::Queue {
                assert!(
                    !all.contains("of 0 bytes") && !all.contains("held 0 bytes"),
                    "{all}"
                );
                assert!(all.contains("receive queue (its SO_RCVBUF not read)"), "{all}");
                assert!(all.contains("held an unknown number of bytes"), "{all}");
            }
        }
        // One the iterator saw names its device.
        let v = run(vec![ring(RingKind::TpacketV2, 651, 3370)]);
        let r = v.iter().find(|v| v.cause == Cause::RingFull).expect("ring_full");
        assert!(
            r.evidence.iter().any(|e| e.contains("bound to ifindex 2")),
            "{:#?}",
            r.evidence
        );
    }

    #[test]
    fn a_ring_that_drops_is_ring_full_with_its_share_and_a_ring_size() {
        let v = run(vec![ring(RingKind::TpacketV2, 651, 3370)]);
        let r = v.iter().find(|v| v.cause == Cause::RingFull).expect("ring_full");
        assert_eq!(r.kind, Kind::Loss);
        assert!((r.share - 3370.0 / 4021.0).abs() < 1e-9, "{r:?}");
        assert_eq!(r.confidence, Confidence::Strong);
        assert!(
            r.evidence
                .iter()
                .any(|e| e.contains("TPACKET_V2 ring of 8 frames")),
            "{r:#?}"
        );
        // 4021 frames in 4 s at 2048 bytes: ~2 MB, rounded up to the 4 MiB floor.
        assert!(
            r.next_step.contains("pcap_set_buffer_size(4194304)"),
            "{}",
            r.next_step
        );
        assert!(r.next_step.contains("slower than the traffic"), "{}", r.next_step);
    }

    #[test]
    fn a_packet_socket_without_a_ring_is_told_to_raise_its_receive_buffer() {
        let v = run(vec![ring(RingKind::Queue, 900, 100)]);
        let r = v.iter().find(|v| v.cause == Cause::RingFull).expect("ring_full");
        assert!(r.next_step.contains("SO_RCVBUF"), "{}", r.next_step);
        assert!(
            !r.next_step.contains("slower than the traffic"),
            "{}",
            r.next_step
        );
    }

    #[test]
    fn a_ring_that_kept_up_gives_no_ring_full() {
        let v = run(vec![ring(RingKind::TpacketV3, 5000, 0)]);
        assert!(v.iter().all(|v| v.cause != Cause::RingFull), "{v:#?}");
    }

    #[test]
    fn a_ring_of_large_frames_is_told_to_shorten_its_snapshots() {
        // masscan's libpcap ring, seen here: 32 frames of 128 KiB in 4 MiB.
        let mut big = ring(RingKind::TpacketV2, 2735, 276);
        big.frames = 32;
        big.ring_bytes = 4 << 20;
        let v = run(vec![big]);
        let r = v.iter().find(|v| v.cause == Cause::RingFull).expect("ring_full");
        assert!(r.next_step.contains("pcap_set_snaplen"), "{}", r.next_step);
        assert!(r.next_step.contains("~8192 frames"), "{}", r.next_step);
        // An 8-frame ring of 2 KiB frames is not.
        let v = run(vec![ring(RingKind::TpacketV2, 651, 3370)]);
        let r = v.iter().find(|v| v.cause == Cause::RingFull).expect("ring_full");
        assert!(!r.next_step.contains("pcap_set_snaplen"), "{}", r.next_step);
    }

    #[test]
    fn the_owners_captured_statistics_reads_are_named_and_uncaptured_clears_make_lower_bounds() {
        let mut zmap = ring(RingKind::TpacketV3, 200, 56);
        zmap.owner_reads = 6;
        let v = run(vec![zmap.clone()]);
        let r = v.iter().find(|v| v.cause == Cause::RingFull).expect("ring_full");
        assert!(
            r.evidence
                .iter()
                .any(|e| e.ends_with("its owner read (and so cleared) its counters 6 times, each read's counts captured and included")),
            "{:#?}",
            r.evidence
        );
        assert!(
            !r.evidence.iter().any(|e| e.contains("lower bounds")),
            "{:#?}",
            r.evidence
        );
        zmap.clears = 1;
        let v = run(vec![zmap]);
        let r = v.iter().find(|v| v.cause == Cause::RingFull).expect("ring_full");
        assert!(
            r.evidence.iter().any(|e| e.contains("lower bounds")),
            "{:#?}",
            r.evidence
        );
    }

    #[test]
    fn a_packet_socket_nobody_reads_is_no_listener_missing_frames() {
        // zmap: its listener's ring kept up; its send socket (no ring, bound to every protocol,
        // never read) filled its queue and dropped the rest.
        let listener = ring(RingKind::TpacketV3, 5000, 0);
        let mut sender = ring(RingKind::Queue, 300, 4700);
        sender.fd = 4;
        sender.read = false;
        let v = diagnose(vec![listener.clone(), sender.clone()], Some("zmap"), 5000);
        assert!(v.iter().all(|v| v.cause != Cause::RingFull), "{v:#?}");
        // With a real overflow at the listener, the share is the listener's alone, and the
        // unread socket is named as not counted.
        let full = ring(RingKind::TpacketV3, 4000, 1000);
        let v = diagnose(vec![full, sender.clone()], Some("zmap"), 5000);
        let r = v.iter().find(|v| v.cause == Cause::RingFull).expect("ring_full");
        assert!((r.share - 0.2).abs() < 1e-9, "{r:?}");
        assert!(
            r.evidence
                .iter()
                .any(|e| e.starts_with("not counted: pid 42, fd 4")),
            "{:#?}",
            r.evidence
        );
        // The same socket read with recvfrom is a reader.
        sender.read = true;
        let v = run(vec![listener, sender]);
        assert!(v.iter().any(|v| v.cause == Cause::RingFull), "{v:#?}");
    }

    #[test]
    fn copies_of_outgoing_frames_are_no_replies_missed() {
        // Issue 28 item 2: a flood's sniffer (bound to every protocol, never read): 2,438,450
        // frames, 1,221,582 of them copies of the flood's own frames.
        let mut sniffer = ring(RingKind::TpacketV3, 2_932, 2_435_518);
        sniffer.outgoing = 1_221_582;
        let v = diagnose(vec![sniffer.clone()], Some("masscan"), 1_221_582);
        let r = v.iter().find(|v| v.cause == Cause::RingFull).expect("ring_full");
        // Of the 1,216,868 incoming frames, at least 2,435,518 - 1,221,582 were dropped.
        assert!(
            r.sentence
                .starts_with("masscan's listener missed at least 1213936 replies (99.8%)"),
            "{}",
            r.sentence
        );
        assert!((r.share - 1_213_936.0 / 1_216_868.0).abs() < 1e-9, "{r:?}");
        assert!(
            r.evidence
                .iter()
                .any(|e| e.contains("1221582 copies of frames sent on their devices")
                    && e.contains("1216868 incoming")),
            "{:#?}",
            r.evidence
        );
        assert!(r.next_step.contains("PACKET_IGNORE_OUTGOING"), "{}", r.next_step);
        // A ring full of the family's own outgoing copies, with 3 incoming frames queued: no
        // reply was missed.
        let mut own = ring(RingKind::TpacketV3, 67, 4_936);
        own.outgoing = 5_000;
        let v = diagnose(vec![own], Some("masscan"), 5_000);
        assert!(v.iter().all(|v| v.cause != Cause::RingFull), "{v:#?}");
    }

    #[test]
    fn a_few_drops_are_weak() {
        let v = run(vec![ring(RingKind::TpacketV2, 50, 5)]);
        let r = v.iter().find(|v| v.cause == Cause::RingFull).expect("ring_full");
        assert_eq!(r.confidence, Confidence::Weak);
    }
}
