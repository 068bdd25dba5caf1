//! The memory scanprof's BPF maps lock, read from outside: every map fd of a running
//! `scanprof attach` (its /proc/PID/fdinfo, each map once by its id, named by bpftool), summed
//! and held to the 16 MB budget; `scanprof doctor` reporting the same figure; `--map-size`
//! resizing a shared map in every object that uses it; and a full thread map naming the flag
//! that raises it.
//!
//! They load BPF programs, so they need root and fail, never skip, without it (CI runs them as
//! root). No traffic; the processes they start are ended by pid.
//!
//! Run: `cargo test --test it map_memory:: -- --test-threads=1`

use crate::common;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use nix::sys::signal::Signal;
use serde_json::Value;

use common::*;

/// The default budget of locked BPF memory, bytes (10^6-byte MB, as doctor prints).
const BUDGET: u64 = 16_000_000;
const RUN_TIMEOUT: Duration = Duration::from_secs(30);

/// One map a process holds, as the kernel describes it.
#[derive(Debug, Clone)]
struct HeldMap {
    name: String,
    max_entries: u64,
    memlock: u64,
}

/// Every BPF map `pid` holds an fd to, once per map id, with the kernel's figures from
/// /proc/PID/fdinfo and the name bpftool gives the id.
fn held_maps(pid: u32) -> BTreeMap<u64, HeldMap> {
    let mut maps = BTreeMap::new();
    let dir = format!("/proc/{pid}/fdinfo");
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("cannot list {dir}: {e}")) {
        let Ok(info) = std::fs::read_to_string(entry.unwrap().path()) else {
            continue;
        };
        let field = |key: &str| -> Option<u64> {
            info.lines()
                .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
                .map(|v| {
                    v.trim()
                        .parse()
                        .unwrap_or_else(|_| panic!("{key}: {v} in {info}"))
                })
        };
        let Some(id) = field("map_id") else { continue };
        maps.insert(
            id,
            HeldMap {
                name: String::new(),
                max_entries: field("max_entries").expect("max_entries"),
                memlock: field("memlock").expect("memlock"),
            },
        );
    }
    let out = Command::new("bpftool")
        .args(["-j", "map", "show"])
        .output()
        .expect("cannot run bpftool");
    assert!(
        out.status.success(),
        "bpftool map show: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let all: Vec<Value> = serde_json::from_slice(&out.stdout).expect("bpftool's JSON");
    for m in all {
        if let Some(held) = m["id"].as_u64().and_then(|id| maps.get_mut(&id)) {
            held.name = m["name"].as_str().unwrap_or_default().to_string();
        }
    }
    maps
}

fn by_name<'a>(maps: &'a BTreeMap<u64, HeldMap>, name: &str) -> Vec<&'a HeldMap> {
    maps.values().filter(|m| m.name == name).collect()
}

fn sleeper() -> Proc {
    let mut c = Command::new("sleep");
    c.arg("60");
    Proc::spawn("sleep", c, false)
}

/// `scanprof attach -p PID --json [extra]`, returned once its probes are attached.
fn attached(pid: u32, extra: &[&str]) -> Proc {
    let mut args: Vec<String> = ["attach", "-p", &pid.to_string(), "--json", "--duration", "60"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.extend(extra.iter().map(|s| s.to_string()));
    let mut p = Proc::scanprof(&args);
    p.wait_for_json("started", Duration::from_secs(20));
    p
}

fn stop(mut scanprof: Proc, mut target: Proc) {
    scanprof.signal(Signal::SIGINT);
    let run = scanprof.finish(RUN_TIMEOUT);
    target.signal(Signal::SIGKILL);
    let _ = target.finish(Duration::from_secs(5));
    run.assert_success();
}

/// A figure in MB from doctor's detail ("12.9 MB (threads 6.4 MB, ...").
fn leading_mb(detail: &str) -> f64 {
    detail
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no MB figure at the start of {detail:?}"))
}

#[test]
fn the_maps_lock_under_16_mb_by_default_and_doctor_reports_it() {
    let test = privileged();
    let target = sleeper();
    let scanprof = attached(target.pid(), &[]);
    let maps = held_maps(scanprof.pid());
    stop(scanprof, target);

    let total: u64 = maps.values().map(|m| m.memlock).sum();
    let mut rows: Vec<&HeldMap> = maps.values().collect();
    rows.sort_by_key(|m| std::cmp::Reverse(m.memlock));
    for m in &rows {
        eprintln!("{:<14} {:>9} entries {:>10} B", m.name, m.max_entries, m.memlock);
    }
    eprintln!(
        "locked BPF memory of scanprof attach: {total} B in {} maps ({:.1} MB under the budget)",
        maps.len(),
        (BUDGET as f64 - total as f64) / 1e6
    );
    assert!(maps.len() >= 20, "too few maps found: {maps:?}");
    assert!(
        total < BUDGET,
        "scanprof's maps lock {total} B, over the {BUDGET} B budget: {rows:?}"
    );
    // The default size reached the kernel: one threads map, of 1024 entries.
    let threads = by_name(&maps, "threads");
    assert_eq!(threads.len(), 1, "{threads:?}");
    assert_eq!(threads[0].max_entries, 1024);

    // doctor loads the same probes in its own process and reports their memory.
    let out = Command::new(scanprof_bin())
        .args(["doctor", "--json"])
        .output()
        .expect("cannot run scanprof doctor");
    let doctor: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("doctor --json: {e}: {}", String::from_utf8_lossy(&out.stdout)));
    let check = doctor["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .find(|c| c["name"] == "locked BPF memory")
        .unwrap_or_else(|| panic!("doctor has no `locked BPF memory` check: {doctor}"))
        .clone();
    let detail = check["detail"].as_str().expect("detail");
    eprintln!("doctor: {detail}");
    assert_eq!(check["status"], "ok", "{check}");
    let reported = leading_mb(detail);
    assert!(
        (reported - total as f64 / 1e6).abs() <= 0.06,
        "doctor says {reported} MB, the kernel charges {total} B"
    );
    assert!(
        detail.contains(&format!("threads {:.1} MB", threads[0].memlock as f64 / 1e6)),
        "{detail}"
    );
    // Every map the run holds is in doctor's sum, those of the objects held beside the table
    // (rings, replies, retrans) too: the MB figure above is rounded, the count is exact.
    assert!(
        detail.contains(&format!(") in {} maps,", maps.len())),
        "doctor counts other maps than the {} scanprof attach holds: {detail}",
        maps.len()
    );
    test.assert_released("scanprof doctor");
}

#[test]
fn map_size_resizes_a_shared_map_for_every_object_and_refuses_a_fixed_one() {
    let test = privileged();
    let target = sleeper();
    let scanprof = attached(
        target.pid(),
        &[
            "--map-size",
            "threads=4096",
            "--map-size",
            "flows=1000",
            "--map-size",
            "block_sites=512",
        ],
    );
    let maps = held_maps(scanprof.pid());
    stop(scanprof, target);
    // threads and flows are created by the family object and reused by the others: still one map
    // each (the load stops if a shared map is loaded twice), of the size asked for.
    for (name, entries) in [("threads", 4096), ("flows", 1000), ("block_sites", 512)] {
        let m = by_name(&maps, name);
        assert_eq!(m.len(), 1, "{name}: {m:?}");
        assert_eq!(m[0].max_entries, entries, "{name}");
    }
    let threads = by_name(&maps, "threads")[0].memlock;
    assert!(
        threads > 4 * 6184 * 1000,
        "threads map of 4096 entries locks only {threads} B"
    );

    // An array's size, or a slot table's, is a number the programs define: refused at parse
    // time, naming the maps that can be sized.
    for fixed in ["health=64", "drops=512", "drop_slots=512"] {
        let target = sleeper();
        let out = Command::new(scanprof_bin())
            .args([
                "attach",
                "-p",
                &target.pid().to_string(),
                "--json",
                "--duration",
                "5",
            ])
            .args(["--map-size", fixed])
            .output()
            .expect("cannot run scanprof");
        drop(target);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let name = fixed.split('=').next().unwrap_or_default();
        assert!(!out.status.success(), "--map-size {fixed} accepted: {stderr}");
        // Refused by the parser, before anything loads: the map named, and the ones that can.
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains(&format!("\"{name}\" is no map scanprof can resize"))
                && stderr.contains("threads")
                && stderr.contains("flows"),
            "{stderr}"
        );
    }
    // Every map the list says can be sized is one the probes have, of a type that can: all of
    // them sized at once (to the sizes they had above), the load succeeds.
    let target = sleeper();
    let mut args: Vec<String> = Vec::new();
    for name in scanprof::probes::RESIZABLE {
        let entries = by_name(&maps, name)
            .first()
            .unwrap_or_else(|| panic!("no map {name} among scanprof's"))
            .max_entries;
        args.extend(["--map-size".to_string(), format!("{name}={entries}")]);
    }
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let scanprof = attached(target.pid(), &refs);
    stop(scanprof, target);
    test.assert_released("scanprof attach --map-size");
}

/// 16 threads in a family whose thread map holds 4: the fork probe cannot track 12 or so of them
/// (SP_H_THREADS_FULL), and the run's warnings say which flag raises the map.
#[test]
fn a_full_thread_map_names_the_flag_that_raises_it() {
    let test = privileged();
    const THREADS: &str = "import threading, time\n\
        ts = [threading.Thread(target=time.sleep, args=(0.5,)) for _ in range(16)]\n\
        [t.start() for t in ts]\n\
        [t.join() for t in ts]\n";
    let run = Proc::scanprof(
        &[
            "run",
            "--json",
            "--duration",
            "20",
            "--map-size",
            "threads=4",
            "--",
            "python3",
            "-c",
            THREADS,
        ]
        .map(String::from),
    )
    .finish(RUN_TIMEOUT);
    run.assert_success();
    let s = run.summary();
    eprintln!("warnings: {:?}", s.warnings);
    assert!(s.health.threads_untracked >= 10, "{:?}", s.health);
    let warning = s
        .warnings
        .iter()
        .find(|w| w.contains("family threads were not tracked"))
        .unwrap_or_else(|| panic!("no full-map warning in {:?}", s.warnings));
    assert!(
        warning.contains("threads map (4 entries) was full") && warning.contains("--map-size threads=16"),
        "{warning}"
    );
    drop(run);
    test.assert_released("scanprof run --map-size threads=4");
}
