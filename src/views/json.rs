//! NDJSON: one object per line, each with a `type` field (`sample` per tick, `summary` at the
//! end, `started` first). docs/events.md documents every field.

use serde::Serialize;
use serde_json::{Map, Value};

/// One NDJSON line: `value`'s fields with `"type": kind` first.
pub fn line<T: Serialize>(kind: &str, value: &T) -> String {
    let mut obj = Map::new();
    obj.insert("type".into(), Value::String(kind.into()));
    match serde_json::to_value(value) {
        Ok(Value::Object(fields)) => obj.extend(fields),
        Ok(other) => {
            obj.insert("value".into(), other);
        }
        Err(e) => {
            obj.insert("error".into(), Value::String(e.to_string()));
        }
    }
    Value::Object(obj).to_string()
}

/// Every key of the JSON lines `lines`, recursively, after checking that docs/events.md
/// documents each one (as `key`); for the unit tests of every view that prints JSON.
#[cfg(test)]
pub(crate) fn documented_keys(lines: &[String], what: &str) -> std::collections::BTreeSet<String> {
    fn keys(v: &Value, out: &mut std::collections::BTreeSet<String>) {
        match v {
            Value::Object(m) => {
                for (k, v) in m {
                    out.insert(k.clone());
                    keys(v, out);
                }
            }
            Value::Array(a) => a.iter().for_each(|v| keys(v, out)),
            _ => {}
        }
    }
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/events.md")).unwrap();
    let mut found = std::collections::BTreeSet::new();
    for l in lines {
        keys(&serde_json::from_str(l).unwrap(), &mut found);
    }
    let missing: Vec<_> = found
        .iter()
        .filter(|k| !doc.contains(&format!("`{k}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "{what} keys missing from docs/events.md: {missing:?}"
    );
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize)]
    struct Probe {
        pps: f64,
        name: &'static str,
    }

    #[test]
    fn every_json_field_is_documented_in_events_md() {
        let (snap, summary) = crate::views::fixtures::rich_run();
        let found = documented_keys(
            &[line("sample", &snap), line("summary", &summary)],
            "sample and summary",
        );
        assert!(
            found.contains("blocked_send_ns") && found.contains("histogram") && found.contains("qlen_max")
        );
    }

    #[test]
    fn every_relay_field_is_documented_in_events_md() {
        let (_, mut summary) = crate::views::fixtures::rich_run();
        summary.relay = Some(crate::analysis::relay::RelayView {
            fanout: 3,
            kernel_drop_reasons: vec![("PACKET_SOCK_ERROR".into(), 1)],
            unsent: 3,
            own_drops: 1,
            ..Default::default()
        });
        let found = documented_keys(&[line("summary", &summary)], "relay");
        assert!(found.contains("egress_time_share") && found.contains("own_drops"));
    }

    #[test]
    fn every_replies_field_is_documented_in_events_md() {
        let (mut snap, mut summary) = crate::views::fixtures::rich_run();
        let funnel = crate::analysis::replies::ReplyFunnel {
            probes: 1010,
            arrived_total: 7,
            reply_ratio: Some(7.0 / 1010.0),
            unanswered: 1003,
            beyond_host: 1003,
            ..Default::default()
        };
        snap.replies = Some(funnel.clone());
        summary.replies = Some(funnel);
        let found = documented_keys(&[line("sample", &snap), line("summary", &summary)], "replies");
        assert!(
            found.contains("icmp_unreachable")
                && found.contains("beyond_host")
                && found.contains("udp_loopback")
        );
    }

    #[test]
    fn every_receive_field_is_documented_in_events_md() {
        use crate::analysis::{DropRow, ReceiveView, Stage};
        let (mut snap, mut summary) = crate::views::fixtures::rich_run();
        let stage = |name: &str| Stage {
            name: name.parse().unwrap(),
            count: 5,
            pps: 5.0,
            total: 5,
            ratio: None,
        };
        let cost = crate::analysis::ReceiveCost {
            workers: 1,
            packets: 5,
            pps: 5.0,
            bytes: 500,
            oncpu_ns: 10_000,
            oncpu_source: crate::analysis::OncpuSource::Kernel,
            probes_oncpu_ns: 8_000,
            runq_ns: 1_000,
            ns_per_packet: Some(2_000.0),
            user_ns: Some(0),
            system_ns: Some(10_000),
            user_ns_per_packet: Some(0.0),
            system_ns_per_packet: Some(2_000.0),
            capacity: Some(crate::analysis::receive::capacity(2_000.0, 100.0, 1)),
        };
        let receive = ReceiveView {
            stages: crate::analysis::RECV_STAGES
                .iter()
                .map(|n| stage(n.as_str()))
                .collect(),
            drops: vec![DropRow {
                reason: "SOCKET_RCVBUFF".into(),
                location: "udp_queue_rcv_one_skb+0x437".into(),
                device: Some("lo".into()),
                netns: 1,
                class: crate::collect::DropClass::ReplyLoss,
                pid: Some(7),
                count: 5,
                rate: 5.0,
            }],
            threads: vec![crate::analysis::ThreadReceiveCost {
                tid: 8,
                pid: 7,
                cost: cost.clone(),
            }],
            cost: Some(cost),
            classes: vec![crate::analysis::receive::ReceiveClass {
                min_bytes: 0,
                below_bytes: Some(256),
                packets: 5,
                pps: 5.0,
                bytes: 320,
                oncpu_ns: 10_000,
                ns_per_packet: Some(2_000.0),
                packet_share: 1.0,
                oncpu_share: 1.0,
            }],
            udp_refused: Some(crate::analysis::receive::UdpRefusedCounts { rcvbuf: 5, memory: 0 }),
            ..Default::default()
        };
        snap.receive = Some(receive.clone());
        summary.receive = Some(receive);
        let found = documented_keys(&[line("sample", &snap), line("summary", &summary)], "receive");
        assert!(found.contains("receive") && found.contains("tunables") && found.contains("rmem_max"));
        assert!(found.contains("cpus_per_worker") && found.contains("system_ns_per_packet"));
        assert!(found.contains("classes") && found.contains("below_bytes") && found.contains("runq_ns"));
        assert!(found.contains("udp_refused") && found.contains("rcvbuf") && found.contains("memory"));
    }

    #[test]
    fn every_ring_field_is_documented_in_events_md() {
        use crate::analysis::rings::{RingView, RING_STAGES};
        use crate::analysis::{ReceiveView, Stage};
        let (mut snap, mut summary) = crate::views::fixtures::rich_run();
        let receive = ReceiveView {
            stages: RING_STAGES
                .iter()
                .map(|n| Stage {
                    name: *n,
                    count: 5,
                    pps: 5.0,
                    total: 5,
                    ratio: None,
                })
                .collect(),
            rings: vec![RingView {
                pid: 7,
                fd: 3,
                inode: 100,
                kind: crate::collect::rings::RingKind::TpacketV3,
                ring_bytes: 1 << 21,
                frames: 0,
                rcvbuf: 212_992,
                ifindex: 2,
                queued: 5,
                dropped: 1,
                queued_total: 5,
                dropped_total: 1,
                clears: 0,
                owner_reads: 0,
                read: true,
                open: true,
                outgoing: 1,
                outgoing_total: 1,
                sees_outgoing: true,
                filtered: false,
                seen_open: true,
            }],
            ..Default::default()
        };
        snap.receive = Some(receive.clone());
        summary.receive = Some(receive);
        let found = documented_keys(&[line("sample", &snap), line("summary", &summary)], "rings");
        assert!(found.contains("rings") && found.contains("dropped_total") && found.contains("clears"));
        let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/events.md")).unwrap();
        for stage in RING_STAGES {
            assert!(
                doc.contains(&format!("| `{stage}` |")),
                "stage {stage} not in docs/events.md"
            );
        }
    }

    #[test]
    fn every_connect_field_is_documented_in_events_md() {
        let (_, mut summary) = crate::views::fixtures::rich_run();
        summary.connect = Some(crate::analysis::ConnectView {
            attempts: 3,
            syns: 2,
            answered: 1,
            failed: 1,
            attempts_pps: 3.0,
            connect_scanner: true,
            kernel_syn_retransmits: None,
        });
        let found = documented_keys(&[line("summary", &summary)], "connect");
        assert!(found.contains("connect") && found.contains("connect_scanner"));
    }

    #[test]
    fn line_puts_type_first_and_keeps_fields() {
        let l = line("sample", &Probe { pps: 10.5, name: "x" });
        assert_eq!(l, r#"{"type":"sample","pps":10.5,"name":"x"}"#);
        assert!(!l.contains('\n'));
    }
}
