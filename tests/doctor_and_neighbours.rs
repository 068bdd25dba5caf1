//! `scanprof doctor` as root and as an unprivileged user, and neighbour resolution on the
//! target's path (the `unresolved-neighbour` lab: packets to a lab address nobody answers ARP
//! for). Privileged: fails, never skips, without root.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use serde_json::Value;

use crate::common;

use common::{privileged, run_ok, Namespaces};

const BIN: &str = env!("CARGO_BIN_EXE_scanprof");

fn json_lines(out: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(out)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// The `summary` line of a run's NDJSON output.
fn summary_of(out: &[u8]) -> Value {
    json_lines(out)
        .into_iter()
        .find(|v| v["type"] == "summary")
        .expect("a summary line")
}

#[test]
fn doctor_as_root_finds_every_probe_usable() {
    let test = privileged();
    let out = Command::new(BIN).args(["doctor", "--json"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report = &json_lines(&out.stdout)[0];
    assert_eq!(report["usable"], true, "{report}");
    let checks = report["checks"].as_array().unwrap();
    let status = |name: &str| {
        checks
            .iter()
            .find(|c| c["name"] == name)
            .map(|c| c["status"].as_str().unwrap().to_string())
    };
    assert_eq!(status("privileges").as_deref(), Some("ok"));
    assert_eq!(status("btf").as_deref(), Some("ok"));
    for (tp, _) in scanprof::probes::TRACEPOINTS {
        assert_eq!(
            status(&format!("tracepoint {tp}")).as_deref(),
            Some("ok"),
            "tracepoint {tp}"
        );
    }
    // Loading every probe is part of the check; on this platform all of them attach.
    let probes: Vec<_> = checks
        .iter()
        .filter(|c| c["name"].as_str().unwrap().starts_with("probe "))
        .collect();
    assert!(probes.len() >= 18, "{probes:?}");
    assert!(probes.iter().all(|c| c["status"] == "ok"), "{probes:?}");
    // ...and again in every configuration that changes what the verifier sees.
    for (flags, _) in scanprof::run::checks::probe_configurations() {
        assert_eq!(
            status(&format!("probes with {flags}")).as_deref(),
            Some("ok"),
            "{flags}: {checks:?}"
        );
    }
    test.assert_released("the test's scanprof processes ended");
}

#[test]
fn doctor_without_privileges_says_what_is_missing_and_fails() {
    let test = privileged();
    // A copy that the unprivileged user may execute.
    let dir = std::env::temp_dir().join(format!("scanprof-doctor-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let exe = dir.join("scanprof");
    std::fs::copy(BIN, &exe).unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = Command::new("runuser")
        .args(["-u", "nobody", "--"])
        .arg(&exe)
        .args(["doctor", "--json"])
        .output();
    let _ = std::fs::remove_dir_all(&dir);
    let out = out.unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = &json_lines(&out.stdout)[0];
    assert_eq!(report["usable"], false);
    let privileges = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "privileges")
        .unwrap();
    assert_eq!(privileges["status"], "missing");
    assert!(
        privileges["advice"].as_str().unwrap().contains("root"),
        "{privileges}"
    );
    test.assert_released("the test's scanprof processes ended");
}

#[test]
fn unresolved_neighbour_queues_the_targets_packets_and_they_die_neigh_failed() {
    let test = privileged();
    let out = Command::new(BIN)
        .args(["lab", "unresolved-neighbour", "--duration", "4", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let summary = summary_of(&out.stdout);
    let sender = summary["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["root"] == true)
        .map(|p| p["pid"].as_u64().unwrap())
        .unwrap();
    let packets = summary["packets"].as_u64().unwrap();
    assert!(packets > 100, "{summary}");
    // Nobody answers for the address: not one of the target's packets reached the wire, and
    // every one of them waited for neighbour resolution.
    assert_eq!(summary["stage_counts"]["dev_xmit"], 0, "{summary}");
    let dev = summary["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["neigh_queued"].as_u64() > Some(0));
    let dev = dev.unwrap_or_else(|| panic!("no device with queued packets: {summary}"));
    assert_eq!(dev["neigh_queued"].as_u64().unwrap(), packets, "{dev}");
    assert!(dev["neigh_started"].as_u64().unwrap() >= 1, "{dev}");
    assert!(dev["neigh_failed"].as_u64().unwrap() >= 1, "{dev}");
    assert_eq!(dev["neigh_resolved"], 0, "{dev}");
    // The failed resolution freed the waiting packets: NEIGH_FAILED drops of the sender's own
    // packets, at most as many as it sent.
    let failed: u64 = summary["drops"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["reason"] == "NEIGH_FAILED")
        .inspect(|d| {
            assert_eq!(d["class"], "target_loss", "{d}");
            assert_eq!(d["pid"].as_u64(), Some(sender), "{d}");
        })
        .map(|d| d["count"].as_u64().unwrap())
        .sum();
    assert!(
        failed >= 1 && failed <= packets,
        "NEIGH_FAILED {failed} of {packets} packets"
    );
    test.assert_released("the test's scanprof processes ended");
}

#[test]
fn neighbours_that_resolve_at_once_are_counted_resolved() {
    // On a veth pair the ARP reply is handled inside the request's own send (softirqs run as the
    // sending thread re-enables them), so `neigh_update` comes before `neigh_event_send_done`:
    // the outcome must be counted whatever the order. Twelve addresses, one UDP packet each,
    // every one answered.
    let test = privileged();
    let tag = std::process::id() % 10_000;
    // two namespaces joined by a veth pair (which goes with them)
    let (a, b) = (format!("sp-neigh-a-{tag}"), format!("sp-neigh-b-{tag}"));
    let namespaces = Namespaces::new(&[a.clone(), b.clone()]);
    let (va, vb) = (format!("spna{tag}"), format!("spnb{tag}"));
    run_ok(&[
        "ip", "link", "add", &va, "netns", &a, "type", "veth", "peer", "name", &vb, "netns", &b,
    ]);
    run_ok(&["ip", "-n", &a, "addr", "add", "10.213.0.1/24", "dev", &va]);
    for i in 10..22 {
        run_ok(&[
            "ip",
            "-n",
            &b,
            "addr",
            "add",
            &format!("10.213.0.{i}/24"),
            "dev",
            &vb,
        ]);
    }
    for (ns, dev) in [(&a, &va), (&b, &vb)] {
        run_ok(&["ip", "-n", ns, "link", "set", dev, "up"]);
    }
    let script = "sleep 1; for i in $(seq 10 21); do echo x > /dev/udp/10.213.0.$i/9; done; sleep 1";
    let out = Command::new("ip")
        .args([
            "netns", "exec", &a, BIN, "run", "--json", "--", "bash", "-c", script,
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let summary = summary_of(&out.stdout);
    let dev = summary["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["neigh_started"].as_u64() > Some(0))
        .unwrap_or_else(|| panic!("no device with a neighbour resolution: {summary}"));
    let figures = [
        &dev["neigh_started"],
        &dev["neigh_queued"],
        &dev["neigh_resolved"],
        &dev["neigh_failed"],
    ];
    assert_eq!(
        figures.map(|v| v.as_u64()),
        [Some(12), Some(12), Some(12), Some(0)],
        "{dev}"
    );
    test.assert_released("the test's scanprof processes ended");
    namespaces.destroy();
}
