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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::hist::Histogram;

    #[derive(Serialize)]
    struct Probe {
        pps: f64,
        name: &'static str,
    }

    /// Every key of every object a run prints, recursively.
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

    /// A run with something in every table, so that every field appears.
    fn rich_run() -> (crate::analysis::Snapshot, crate::analysis::Summary) {
        use crate::analysis::{Analyzer, EndReason};
        use crate::collect::family::ProcessInfo;
        use crate::collect::*;
        let thread = |packets: u64, t: u64| ThreadCounters {
            tid: 7,
            pid: 7,
            calls: packets + 1,
            packets,
            bytes: packets * 64,
            failed_calls: 1,
            errors: [("ENOBUFS".to_string(), 1)].into(),
            latency: Histogram::from_buckets(&[0, 0, 5]),
            gap: Histogram::from_buckets(&[0, 0, 0, 5]),
            gap_sum_ns: 15,
            gap_count: 5,
            first_send_ns: 1,
            last_send_ns: t,
            budget: TimeBudget {
                send_ns: t / 2,
                other_ns: t / 2,
                ..Default::default()
            },
            ..Default::default()
        };
        let sample = |t: u64, packets: u64| CounterSample {
            t_ns: t,
            processes: vec![ProcessInfo {
                pid: 7,
                ppid: 1,
                comm: "sender".into(),
                exe: "/bin/sender".into(),
                root: true,
                alive: true,
                exit_code: None,
            }],
            threads: vec![thread(packets, t)],
            drops: vec![DropCount {
                reason: "QDISC_DROP".into(),
                location: "__dev_queue_xmit+0x1".into(),
                device: Some("veth0".into()),
                ifindex: 2,
                netns: 1,
                class: DropClass::TargetLoss,
                pid: Some(7),
                count: packets / 2,
            }],
            devices: vec![DeviceCounters {
                device: "veth0".into(),
                ifindex: 2,
                netns: 1,
                pid: Some(7),
                queued: packets,
                ..Default::default()
            }],
            queues: vec![QueueDepth {
                device: "veth0".into(),
                netns: 1,
                qlen_max: 3,
                backlog_max: 300,
            }],
            block_sites: vec![BlockSite {
                pid: 7,
                wait_site: "sock_alloc_send_pskb".into(),
                stack: vec!["sock_alloc_send_pskb+0x1".into()],
                blocked_ns: t / 4,
                episodes: 3,
            }],
            health: Health::default(),
        };
        let mut a = Analyzer::new(Some(100.0), 0);
        a.tick(&sample(1_000_000_000, 100), &[]);
        a.tick(&sample(2_000_000_000, 200), &[]);
        let last = sample(3_000_000_000, 300);
        let snap = a.tick(&last, &["a warning".into()]);
        let probes = vec![crate::probes::ProbeStatus {
            name: "drops.on_kfree_skb".into(),
            attached: true,
            error: None,
        }];
        (snap, a.summary(&last, EndReason::Duration, probes, vec![]))
    }

    #[test]
    fn every_json_field_is_documented_in_events_md() {
        let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/events.md")).unwrap();
        let (snap, summary) = rich_run();
        let mut found = std::collections::BTreeSet::new();
        keys(&serde_json::from_str(&line("sample", &snap)).unwrap(), &mut found);
        keys(
            &serde_json::from_str(&line("summary", &summary)).unwrap(),
            &mut found,
        );
        assert!(
            found.contains("blocked_send_ns") && found.contains("histogram") && found.contains("qlen_max")
        );
        let missing: Vec<_> = found
            .iter()
            .filter(|k| !doc.contains(&format!("`{k}`")))
            .collect();
        assert!(
            missing.is_empty(),
            "fields missing from docs/events.md: {missing:?}"
        );
    }

    #[test]
    fn line_puts_type_first_and_keeps_fields() {
        let l = line("sample", &Probe { pps: 10.5, name: "x" });
        assert_eq!(l, r#"{"type":"sample","pps":10.5,"name":"x"}"#);
        assert!(!l.contains('\n'));
    }
}
