//! `scanprof baseline` end to end: the real binary runs the reference sender against loopback and
//! a lab it builds. Its cells are checked against the receivers' counts, its lab against
//! /run/netns (there while it runs, gone after, also after Ctrl-C), its machine facts for
//! presence. Needs root (namespaces): fails, never skips, without it.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use nix::sys::signal::Signal;
use serde_json::Value;

/// Longest a small baseline may take: 6 cells of 1 s plus start-up and lab set-up.
const BASELINE_TIMEOUT: Duration = Duration::from_secs(120);

fn strings<const N: usize>(a: [&str; N]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

/// /run/netns entries of labs made by process `pid`.
fn lab_namespaces_of(pid: u32) -> Vec<String> {
    let prefix = format!("sp{pid}-");
    let Ok(entries) = std::fs::read_dir("/run/netns") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with(&prefix))
        .collect()
}

/// The one JSON object `baseline --json` prints.
fn report(run: &Finished) -> Value {
    run.objects()
        .into_iter()
        .last()
        .unwrap_or_else(|| panic!("no JSON object on stdout\n{}", run.context()))
}

fn u64_at(v: &Value, key: &str) -> u64 {
    v[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} is not a count in {v}"))
}

#[test]
fn baseline_cells_match_their_receivers_and_the_lab_is_removed() {
    let test = privileged();
    let proc = Proc::scanprof(&strings([
        "baseline",
        "--rates",
        "1000,0",
        "--pacers",
        "clock",
        "--methods",
        "sendto",
        "--seconds",
        "1",
        "--json",
    ]));
    let pid = proc.pid();
    let mut seen_lab: Vec<String> = Vec::new();
    let run = proc.finish_polling(BASELINE_TIMEOUT, || {
        for ns in lab_namespaces_of(pid) {
            if !seen_lab.contains(&ns) {
                seen_lab.push(ns);
            }
        }
    });
    run.assert_success();
    let v = report(&run);
    eprintln!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());

    // The lab existed while it ran (its sender veth is among the interfaces) and is gone.
    assert!(!seen_lab.is_empty(), "no lab namespace of pid {pid} was seen");
    assert_eq!(lab_namespaces_of(pid), Vec::<String>::new(), "lab left behind");
    let m = &v["machine"];
    let lab_ifaces: Vec<&Value> = m["interfaces"]
        .as_array()
        .expect("interfaces")
        .iter()
        .filter(|i| seen_lab.iter().any(|ns| i["namespace"] == ns.as_str()))
        .collect();
    assert_eq!(lab_ifaces.len(), 1, "the lab's sender veth is not listed: {m}");

    // Machine facts.
    assert!(!m["cpu_model"].as_str().unwrap_or("").is_empty(), "{m}");
    assert!(!m["clocksource"].as_str().unwrap_or("").is_empty(), "{m}");
    for key in [
        "net.core.wmem_max",
        "net.core.rmem_max",
        "net.core.wmem_default",
        "net.core.netdev_max_backlog",
    ] {
        assert!(m["sysctls"][key].as_u64().unwrap_or(0) > 0, "{key}: {m}");
    }
    assert!(m["nanosleep"]["samples"].as_u64() == Some(200), "{m}");

    // Every cell ran, and what the sender says it sent is what the receiver read plus what the
    // kernel dropped at the receiver's socket (a receiver starved of CPU, as beside a hog, falls
    // behind a full-speed sender: 279,369 read of 299,250 once).
    let pacer_rows = v["pacer_rows"].as_array().expect("pacer_rows");
    let method_rows = v["method_rows"].as_array().expect("method_rows");
    assert_eq!((pacer_rows.len(), method_rows.len()), (4, 2), "{v}");
    for row in pacer_rows.iter().chain(method_rows) {
        assert!(row["error"].is_null(), "a cell failed: {row}");
        let (sent, received) = (u64_at(row, "sent"), u64_at(row, "receiver_packets"));
        let dropped = u64_at(row, "receiver_dropped");
        assert!(sent >= 900, "too little sent: {row}");
        if row["target"] == "lab" {
            assert_eq!(received + dropped, sent, "{row}");
        } else {
            assert_eq!(row["target"], "loopback");
            assert!(
                received + dropped == sent || rel_err((received + dropped) as f64, sent as f64) <= 0.001,
                "{row}"
            );
        }
    }
    for target in ["loopback", "lab"] {
        let cell = pacer_rows
            .iter()
            .find(|r| r["target"] == target && r["requested_pps"].as_f64() == Some(1000.0))
            .unwrap_or_else(|| panic!("no 1000 pps cell for {target}: {v}"));
        assert_eq!(cell["pacer"], "clock");
        let achieved = cell["achieved_pps"].as_f64().expect("achieved_pps");
        assert_within(&format!("{target} clock 1000 pps"), achieved, 1000.0, 0.01);
        let unlimited = pacer_rows
            .iter()
            .find(|r| r["target"] == target && r["requested_pps"].is_null())
            .unwrap_or_else(|| panic!("no unlimited cell for {target}: {v}"));
        assert!(unlimited["accuracy"].is_null(), "{unlimited}");
        assert!(
            unlimited["achieved_pps"].as_f64().unwrap_or(0.0) > 5000.0,
            "{unlimited}"
        );
    }
    test.assert_released("the test's scanprof processes ended");
}

/// Ctrl-C while a lab cell sends: baseline stops within seconds, prints what it has with
/// `interrupted`, and removes its lab.
#[test]
fn sigint_stops_baseline_and_removes_its_lab() {
    let test = privileged();
    let mut proc = Proc::scanprof(&strings([
        "baseline",
        "--targets",
        "lab",
        "--rates",
        "1000",
        "--pacers",
        "clock,sleep",
        "--methods",
        "sendto",
        "--seconds",
        "10",
        "--json",
    ]));
    let pid = proc.pid();
    let deadline = Instant::now() + Duration::from_secs(15);
    while lab_namespaces_of(pid).is_empty() {
        assert!(Instant::now() < deadline, "baseline made no lab within 15 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Into the first cell.
    std::thread::sleep(Duration::from_millis(1500));
    proc.signal(Signal::SIGINT);
    let t0 = Instant::now();
    let run = proc.finish(Duration::from_secs(20));
    let took = t0.elapsed();

    run.assert_success();
    assert!(took < Duration::from_secs(6), "took {took:?} to stop");
    assert_eq!(lab_namespaces_of(pid), Vec::<String>::new(), "lab left behind");
    let v = report(&run);
    assert_eq!(v["interrupted"], true, "{v}");
    // The cell under way when the signal came is there; later cells never ran.
    let rows = v["pacer_rows"].as_array().expect("pacer_rows");
    assert_eq!(rows.len(), 1, "{v}");
    assert_eq!(v["method_rows"].as_array().map(Vec::len), Some(0), "{v}");
    test.assert_released("the test's scanprof processes ended");
}

/// The `summary` object of a `scanprof run --json` output.
fn summary_line(stdout: &[u8]) -> serde_json::Value {
    String::from_utf8_lossy(stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["type"] == "summary")
        .expect("a summary line")
}

/// `run --baseline`: the machine's own figure at the requested rate, measured in a lab that is
/// gone afterwards, set beside the target's in the summary.
#[test]
fn run_with_baseline_measures_the_machine_at_the_requested_rate() {
    let test = privileged();
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_scanprof"))
        .args([
            "run",
            "--requested",
            "1000",
            "--baseline",
            "--baseline-pacer",
            "clock",
        ])
        .args(["--baseline-seconds", "1", "--json", "--", "sleep", "0.3"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let child_pid = child.id();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let summary = summary_line(&out.stdout);
    let b = &summary["baseline"];
    assert_eq!(b["pacer"], "clock", "{b}");
    assert_eq!(b["rate"], 1000.0, "{b}");
    let achieved = b["achieved_pps"].as_f64().unwrap();
    assert!(
        (achieved - 1000.0).abs() <= 10.0,
        "baseline {achieved} pps at 1000 requested"
    );
    assert_eq!(b["sent"], b["receiver_packets"], "{b}");
    assert!(b["sent"].as_u64().unwrap() >= 990, "{b}");
    assert_eq!(summary["baseline_pps"].as_f64(), Some(achieved));
    let leftovers: Vec<_> = std::fs::read_dir("/run/netns")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    // The baseline lab was made by the scanprof child, so its names carry the child's pid.
    let ours = format!("sp{child_pid}-");
    assert!(
        leftovers.iter().all(|n| !n.starts_with(&ours)),
        "a lab namespace of scanprof (pid {child_pid}) was left behind: {leftovers:?}"
    );
    test.assert_released("the test's scanprof processes ended");
}

/// `run --baseline` without --requested measures at the rate the scanner's profile reads from its
/// command line (here the reference sender's `--rate 1000`, to a closed port on loopback).
#[test]
fn run_with_baseline_takes_the_rate_from_the_scanners_command_line() {
    let test = privileged();
    let exe = env!("CARGO_BIN_EXE_scanprof");
    let out = std::process::Command::new(exe)
        .args([
            "run",
            "--baseline",
            "--baseline-pacer",
            "clock",
            "--baseline-seconds",
            "1",
        ])
        .args([
            "--json",
            "--",
            exe,
            "send",
            "--to",
            "127.0.0.1:9",
            "--rate",
            "1000",
        ])
        .args(["--count", "300", "--duration", "5", "--pacer", "clock"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let summary = summary_line(&out.stdout);
    let b = &summary["baseline"];
    assert_eq!(b["rate"], 1000.0, "{b}");
    assert_eq!(summary["requested_pps"], 1000.0, "{summary}");
    assert!(
        stderr.contains("argv: --rate 1000"),
        "the baseline names where its rate came from: {stderr}"
    );
    let achieved = b["achieved_pps"].as_f64().unwrap();
    assert!(
        (achieved - 1000.0).abs() <= 10.0,
        "baseline {achieved} pps at 1000 requested"
    );
    test.assert_released("the test's scanprof processes ended");
}

#[test]
fn baseline_without_a_requested_rate_is_refused() {
    // A process of this test's own with no rate on its command line (pid 1 is refused as a
    // target before --baseline is looked at).
    let mut sleeper = std::process::Command::new("sleep").arg("30").spawn().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_scanprof"))
        .args(["attach", "-p", &sleeper.id().to_string(), "--baseline"])
        .output()
        .unwrap();
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--requested"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
