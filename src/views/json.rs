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

    #[test]
    fn line_puts_type_first_and_keeps_fields() {
        let l = line("sample", &Probe { pps: 10.5, name: "x" });
        assert_eq!(l, r#"{"type":"sample","pps":10.5,"name":"x"}"#);
        assert!(!l.contains('\n'));
    }
}
