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

    #[test]
    fn every_json_field_is_documented_in_events_md() {
        let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/events.md")).unwrap();
        let (snap, summary) = crate::views::fixtures::rich_run();
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
