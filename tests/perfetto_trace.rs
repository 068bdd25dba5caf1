//! The bundle's trace.perfetto-trace from a real run, decoded by Perfetto's own definitions
//! (perfetto_trace_pb2 of the `perfetto` package on PyPI, installed by scripts/setup in
//! .venv-perfetto) through tests/perfetto_counts.py, which fails on any field they do not know.
//! Its counter tracks, samples, slices, instants, descriptors and clock are compared with the
//! run's live NDJSON stream (not the bundle): the ticks, blocking episodes, drop rows and
//! processes scanprof reported as it ran, and this test's own CLOCK_MONOTONIC readings.
//!
//! Privileged (BPF, namespaces): fails, never skips, without root. The traffic goes into a lab
//! this test creates, bounded in count and time.
//!
//! Run: `cargo test --test it perfetto_trace:: -- --test-threads=2`

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use common::*;
use scanprof::netlab::TbfConfig;

/// A port nobody listens on in the target namespace: every packet is a NO_SOCKET drop there.
const CLOSED_PORT: u16 = 9;

/// The venv scripts/setup makes, with Perfetto's compiled protos (SCANPROF_PERFETTO_PYTHON
/// names another interpreter that has them).
fn perfetto_python() -> PathBuf {
    let py = std::env::var_os("SCANPROF_PERFETTO_PYTHON").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv-perfetto/bin/python"),
        PathBuf::from,
    );
    assert!(
        py.is_file(),
        "{} missing: run scripts/setup (it installs Perfetto's trace definitions, the `perfetto` \
         package from PyPI, in .venv-perfetto)",
        py.display()
    );
    py
}

/// Removes the bundle directory however the test ends.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn strings<const N: usize>(a: [&str; N]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

fn count(v: &Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or(0)
}

/// A blocking sender (16 kB socket buffer behind a 2 Mbit/s tbf) to a closed port, forked by a
/// shell: blocking episodes, drop rows in every tick, a process start, a spawn arrow and an exit.
#[test]
fn the_perfetto_trace_decodes_with_perfettos_protos_and_matches_the_run() {
    let test = privileged();
    let python = perfetto_python();
    let lab = TestLab::new(Some(TbfConfig {
        rate: "2mbit".into(),
        burst: "4kb".into(),
        limit: "2mb".into(),
    }));
    let dir = TempDir(std::env::temp_dir().join(format!("scanprof-perfetto-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&dir.0);

    let send_s = patience(Duration::from_secs(2)).as_secs_f64();
    let sender = sender_argv(
        &lab.to(CLOSED_PORT),
        2000.0,
        (2000.0 * send_s) as u64,
        send_s,
        &["--size", "1000", "--sndbuf", "16384"],
    );
    // A command followed by another is forked, not exec'd: the sender is the shell's child.
    let mut shell = strings(["sh", "-c", "\"$@\" 1>&2; exit 0", "sh"]);
    shell.extend(sender);
    let mut args = strings(["run", "--json", "--duration", "30", "--requested", "2000"]);
    args.extend(strings(["--interval", "0.5", "--export"]));
    args.push(dir.0.display().to_string());
    args.push("--".into());
    args.extend(in_netns(&lab.lab.sender_ns, &shell));

    let before_ns = monotonic_ns();
    let run = Proc::scanprof(&args).finish(Duration::from_secs(40));
    let after_ns = monotonic_ns();
    run.assert_success();
    lab.destroy();

    // The run's own figures, from its live stream.
    let started = run.started();
    let samples = run.of_type("sample");
    let ticks = samples.len();
    assert!(ticks >= 3, "{ticks} ticks\n{}", run.context());
    let episodes: usize = samples
        .iter()
        .map(|s| s["episodes"].as_array().map_or(0, Vec::len))
        .sum();
    let drop_rows: usize = samples
        .iter()
        .map(|s| s["drops"].as_array().map_or(0, Vec::len))
        .sum();
    let pids_of = |v: &Value| -> Vec<(u64, u64)> {
        v["processes"]
            .as_array()
            .map(|a| a.iter().map(|p| (count(p, "pid"), count(p, "ppid"))).collect())
            .unwrap_or_default()
    };
    let at_attach: BTreeSet<u64> = pids_of(&started).iter().map(|p| p.0).collect();
    let mut family: BTreeSet<u64> = at_attach.clone();
    let last = samples.last().expect("samples");
    family.extend(samples.iter().flat_map(&pids_of).map(|p| p.0));
    let forked: Vec<(u64, u64)> = pids_of(last)
        .into_iter()
        .filter(|(pid, _)| !at_attach.contains(pid))
        .collect();
    let spawns = forked.iter().filter(|(_, ppid)| family.contains(ppid)).count();
    let exited = last["processes"]
        .as_array()
        .expect("processes")
        .iter()
        .filter(|p| p["alive"] == false || !p["exit_code"].is_null())
        .count();
    let stages: Vec<String> = samples[0]["stages"]
        .as_array()
        .expect("stages")
        .iter()
        .map(|s| s["name"].as_str().expect("stage name").to_string())
        .collect();
    // The run must hold every kind of event, or the comparisons below prove little.
    assert!(episodes > 0, "no blocking episode in the run\n{}", run.context());
    assert!(drop_rows > 0, "no drop row in the run\n{}", run.context());
    assert!(spawns >= 1 && exited >= 1, "forked {forked:?}, exited {exited}");

    // The file, decoded by Perfetto's definitions.
    let file = dir.0.join("trace.perfetto-trace");
    let out = Command::new(&python)
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/perfetto_counts.py"))
        .arg(&file)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", python.display()));
    assert!(
        out.status.success(),
        "Perfetto's definitions refuse {}:\n{}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let got: Value = serde_json::from_slice(&out.stdout).expect("the script prints JSON");
    eprintln!("decoded: {got}");

    // The clock: CLOCK_MONOTONIC (what bpf_ktime_get_ns reads), declared as the trace's clock,
    // read at attach, between this test's own readings before and after the run.
    let attach = count(&started["clocks"], "monotonic_ns");
    assert!(
        before_ns < attach && attach < after_ns,
        "attach {attach} not in [{before_ns}, {after_ns}]"
    );
    let snaps = got["clock_snapshots"].as_array().expect("clock_snapshots");
    assert_eq!(snaps.len(), 1, "{got}");
    assert_eq!(snaps[0]["primary_trace_clock"], 3, "BUILTIN_CLOCK_MONOTONIC");
    assert_eq!(count(&snaps[0]["clocks"], "3"), attach);
    // BOOTTIME is MONOTONIC plus the time suspended; the two readings agree to ~1 us.
    assert!(
        count(&snaps[0]["clocks"], "6") + 10_000 >= attach,
        "BOOTTIME >= MONOTONIC"
    );
    let now_real = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_nanos() as u64;
    let real = count(&snaps[0]["clocks"], "1");
    assert!(
        real < now_real && now_real - real < 60_000_000_000,
        "REALTIME at attach {real}"
    );
    assert_eq!(got["timestamp_clock_ids"], serde_json::json!([3]));
    assert_eq!(got["events_without_clock_id"], false);
    let run_end = attach + (last["t_s"].as_f64().expect("t_s") * 1e9) as u64;
    assert!(count(&got, "first_ts") >= attach, "{got}");
    assert!(
        count(&got, "last_ts") <= after_ns.min(run_end + 1_000_000_000),
        "{got}"
    );

    // Counter tracks: every track, and how many samples each has, as the live stream says.
    let want = expected_counter_samples(&samples);
    let values: BTreeMap<String, u64> = got["counter_values"]
        .as_object()
        .expect("counter_values")
        .iter()
        .map(|(k, v)| (k.clone(), v.as_u64().unwrap_or(0)))
        .collect();
    assert_eq!(values, want, "counter tracks: decoded (left) vs the run (right)");
    assert_eq!(count(&got, "counter_tracks"), want.len() as u64);
    for s in &stages {
        assert_eq!(want.get(&format!("pps at {s}")), Some(&(ticks as u64 + 1)));
    }

    // Slices: one per blocking episode, two anchors per spawn arrow, one per stretch of ticks
    // in one phase (the run's phases on scanprof's track); every begin ends.
    let phases = samples
        .windows(2)
        .filter(|w| w[0]["phase"] != w[1]["phase"])
        .count()
        + usize::from(!samples.is_empty());
    assert_eq!(count(&got["slice_begins"], "blocking"), episodes as u64);
    assert_eq!(count(&got["slice_begins"], "process"), 2 * spawns as u64);
    assert_eq!(count(&got["slice_begins"], "phase"), phases as u64);
    assert_eq!(count(&got, "slice_ends"), (episodes + 2 * spawns + phases) as u64);
    let flows_out = got["flow_ids"].as_array().expect("flow_ids");
    assert_eq!(flows_out.len(), spawns);
    assert_eq!(got["flow_ids"], got["terminating_flow_ids"]);

    // Instants: one per drop row of each tick, and the family's starts and exits.
    assert_eq!(count(&got["instants"], "drop"), drop_rows as u64);
    assert_eq!(count(&got["instant_names"], "started"), forked.len() as u64);
    assert_eq!(count(&got["instant_names"], "exited"), exited as u64);
    assert_eq!(count(&got["instants"], "process"), (forked.len() + exited) as u64);

    // Descriptors: every family process, and each on a declared track.
    let described: BTreeSet<u64> = got["process_descriptors"]
        .as_array()
        .expect("process_descriptors")
        .iter()
        .filter_map(Value::as_u64)
        .collect();
    assert_eq!(described, family, "{got}");
    let thread_pids: BTreeSet<u64> = got["thread_descriptors"]
        .as_array()
        .expect("thread_descriptors")
        .iter()
        .filter_map(|t| t[0].as_u64())
        .collect();
    assert!(thread_pids.is_subset(&family) && family.iter().all(|p| thread_pids.contains(p)));
    assert_eq!(got["events_on_undeclared_tracks"], 0);
    assert_eq!(got["counter_values_off_counter_tracks"], 0);
    test.assert_released("the test's scanprof processes ended");
}

/// The counter tracks the run's ticks call for, with their number of samples: a sample at each
/// tick's start and one closing the last tick, for each series the tick has (the run-wide rates
/// and CPU in every tick, the probes' cost in the ticks that measured it, the drop rates of the
/// target's and its replies' lost packets by reason from the first tick to the last); a sender
/// thread's time budget (5 series) from the first tick it shows in, and a zero at the first it
/// is missing from.
fn expected_counter_samples(samples: &[Value]) -> BTreeMap<String, u64> {
    let mut want: BTreeMap<String, u64> = BTreeMap::new();
    let n = samples.len() as u64;
    let last = samples.len() - 1;
    let mut reasons = BTreeSet::new();
    for (i, t) in samples.iter().enumerate() {
        let samples_here = if i == last { 2 } else { 1 };
        let mut add = |name: String| *want.entry(name).or_default() += samples_here;
        if !t["requested_pps"].is_null() {
            add("requested pps".into());
        }
        add("scanprof CPU %".into());
        let bpf = &t["cost"]["bpf"];
        if !bpf["share_of_target"].is_null() {
            add("scanprof probes % of target CPU".into());
        }
        if !bpf["target_ns_per_packet"].is_null() {
            add("scanprof probes ns/packet on target threads".into());
        }
        if !bpf["machine_cpu_share"].is_null() {
            add("scanprof probes % of a CPU outside the target".into());
        }
        for d in t["drops"].as_array().expect("drops") {
            let reason = d["reason"].as_str().expect("reason");
            match d["class"].as_str() {
                Some("target_loss") => reasons.insert(reason.to_string()),
                Some("reply_loss") => reasons.insert(format!("{reason} (reply)")),
                _ => false,
            };
        }
    }
    let stages: BTreeSet<&str> = samples
        .iter()
        .flat_map(|t| t["stages"].as_array().expect("stages"))
        .filter_map(|s| s["name"].as_str())
        .collect();
    for s in stages {
        want.insert(format!("pps at {s}"), n + 1);
    }
    for r in reasons {
        want.insert(format!("target drops per second by reason: {r}"), n + 1);
    }
    let per_tick: Vec<BTreeSet<u64>> = samples
        .iter()
        .map(|s| {
            s["threads"]
                .as_array()
                .map(|a| a.iter().map(|t| count(t, "tid")).collect())
                .unwrap_or_default()
        })
        .collect();
    let tids: BTreeSet<u64> = per_tick.iter().flatten().copied().collect();
    for tid in tids {
        let mut have = 0;
        let mut was = false;
        for (i, t) in per_tick.iter().enumerate() {
            let is = t.contains(&tid);
            have += u64::from(is || was) + u64::from(is && i == last);
            was = is;
        }
        for series in ["send", "blocked_send", "sleep", "preempted", "other"] {
            want.insert(format!("sender time budget (tid {tid}): {series}"), have);
        }
    }
    want
}
