//! Privileged end-to-end test of the run's phases: a family that sends, then stays alive without
//! sending (a scanner's wait for late replies, here a shell's `sleep`), then exits. The NDJSON
//! ticks wholly after the last send are `waiting` (or `ended`) and carry no gap verdict, and the
//! summary's verdicts and rate are the send window's.
//!
//! Needs root (BPF) and fails, never skips, without it. Traffic goes only to 127.0.0.1 (a closed
//! port), bounded in count and time.

use crate::common;

use std::time::Duration;

use serde_json::Value;

use common::*;
use scanprof::analysis::{EndReason, RunPhase};

/// Packets the reference sender sends, at RATE.
const COUNT: u64 = 3000;
const RATE: u64 = 2000;
/// Seconds the family stays alive after its last send.
const IDLE_S: u64 = 4;

#[test]
fn ticks_after_the_last_send_are_waiting_and_judge_no_rate() {
    let test = privileged();
    let sender = sender_argv("127.0.0.1:9", RATE as f64, COUNT, 10.0, &[]);
    let script = format!("{} 1>&2; sleep {IDLE_S}", sh_join(&sender));
    let args: Vec<String> = [
        "run",
        "--json",
        "--duration",
        "30",
        "--requested",
        &RATE.to_string(),
        "--",
        "sh",
        "-c",
        &script,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let run = Proc::scanprof(&args).finish(Duration::from_secs(40));
    run.assert_success();
    let s = run.summary();
    precision::assert_precise(
        "ticks_after_the_last_send_are_waiting_and_judge_no_rate",
        &s,
        &run.of_type("sample"),
    );
    let samples = run.of_type("sample");

    assert_eq!(s.end_reason, EndReason::FamilyExited);
    assert_eq!(s.packets, COUNT, "{}", run.context());
    assert_eq!(s.phase, RunPhase::Ended);
    let last_send = s.last_send_s.expect("a last send");
    let phase = |t: &Value| t["phase"].as_str().unwrap_or("?").to_string();
    let gap_verdicts = |t: &Value| -> Vec<String> {
        t["verdicts"]
            .as_array()
            .map(|v| {
                v.iter()
                    .filter(|v| v["kind"] == "gap")
                    .map(|v| v["cause"].as_str().unwrap_or("?").to_string())
                    .collect()
            })
            .unwrap_or_default()
    };
    for t in &samples {
        eprintln!(
            "tick {} t={:.2} phase {} partial {} achieved {:.1} last send {} gap verdicts {:?}",
            t["tick"],
            t["t_s"].as_f64().unwrap_or(0.0),
            phase(t),
            t["partial"],
            t["achieved_pps"].as_f64().unwrap_or(0.0),
            t["last_send_s"],
            gap_verdicts(t)
        );
    }
    // The ticks that begin after the last send: the family waits (the shell sleeps), then ends.
    let after: Vec<&Value> = samples
        .iter()
        .filter(|t| t["t_s"].as_f64().unwrap() - t["interval_s"].as_f64().unwrap() > last_send)
        .collect();
    assert!(
        after.len() >= IDLE_S as usize - 1,
        "{} ticks after the last send",
        after.len()
    );
    for t in &after {
        assert!(matches!(phase(t).as_str(), "waiting" | "ended"), "{t}");
        assert_eq!(t["achieved_pps"].as_f64(), Some(0.0), "{t}");
        assert!(gap_verdicts(t).is_empty(), "{t}");
    }
    assert!(after.iter().filter(|t| phase(t) == "waiting").count() >= IDLE_S as usize - 2);
    // Only a whole tick of sending carries a gap verdict, in any tick of the run.
    for t in &samples {
        if !gap_verdicts(t).is_empty() {
            assert_eq!(
                (phase(t).as_str(), &t["partial"]),
                ("sending", &Value::Bool(false)),
                "{t}"
            );
        }
    }
    // The run's verdicts are the send window's: none is `unexplained`, and the rate is over it.
    assert!(
        s.verdicts.iter().all(|v| v.cause.as_str() != "unexplained"),
        "{:?}",
        s.verdicts
    );
    assert!(
        s.duration_s - last_send >= IDLE_S as f64 - 0.5,
        "{} {last_send}",
        s.duration_s
    );
    assert!(s.send_window_s < last_send, "{} {last_send}", s.send_window_s);

    drop(run);
    test.assert_released("scanprof run");
}
