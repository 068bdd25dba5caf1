//! `scanprof record` then `scanprof report`: a recorded run re-rendered offline gives the same
//! summary as the live one; the bundle's trace passes the structural checks; broken bundles get
//! clear errors naming the file and line, and no panic. Privileged (BPF): fails without root.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::common;

use common::{privileged, Privileged};

const BIN: &str = env!("CARGO_BIN_EXE_scanprof");

fn tempdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("scanprof-record-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn summary_line(stdout: &[u8]) -> Value {
    String::from_utf8_lossy(stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["type"] == "summary")
        .expect("a summary line")
}

/// Records a short run of the reference sender to a closed loopback port (NO_SOCKET drops,
/// gaps, every table filled) and returns the live summary; `test` checks that the recording
/// released its BPF programs.
fn record(test: &Privileged, dir: &Path, extra: &[&str]) -> Value {
    let out = Command::new(BIN)
        .args(["record", "-o"])
        .arg(dir)
        .args(["--requested", "2000", "--json"])
        .args(extra)
        .args([
            "--",
            BIN,
            "send",
            "--to",
            "127.0.0.1:9",
            "--rate",
            "2000",
            "--duration",
            "1.5",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("bundle written to"));
    test.assert_released("scanprof record");
    summary_line(&out.stdout)
}

#[test]
fn a_recorded_run_reports_offline_as_it_did_live() {
    let test = privileged();
    let dir = tempdir("roundtrip");
    let live = record(&test, &dir, &[]);
    assert!(live["packets"].as_u64().unwrap() >= 2900, "{live}");
    for f in [
        "events.ndjson",
        "trace.json",
        "trace.perfetto-trace",
        "report.md",
        "rates.svg",
        "gaps.svg",
        "recount.bt",
        "system.json",
        "drops.pcapng",
    ] {
        assert!(dir.join(f).is_file(), "{f} missing from the bundle");
    }
    // The closed port's NO_SOCKET drops are the family's (expected): their headers are there,
    // IPv4 from the network header (pcapng, one LINKTYPE_RAW interface).
    let pcap = std::fs::read(dir.join("drops.pcapng")).unwrap();
    assert_eq!(&pcap[..4], &[0x0a, 0x0d, 0x0d, 0x0a], "a pcapng section header");
    assert!(
        pcap.windows(b"reason=NO_SOCKET".len())
            .any(|w| w == b"reason=NO_SOCKET"),
        "no NO_SOCKET packet comment in drops.pcapng"
    );
    // The session's drop-reason table reached the bundle: its bpftrace script names reasons.
    let recount = std::fs::read_to_string(dir.join("recount.bt")).unwrap();
    assert!(recount.contains("\t@reason[2] = \"NOT_SPECIFIED\";"), "{recount}");
    let out = Command::new(BIN)
        .args(["report", "--format", "json"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        summary_line(&out.stdout),
        live,
        "offline summary differs from the live one"
    );

    // The text and markdown renderings carry the same figures.
    let text = Command::new(BIN).arg("report").arg(&dir).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    let packets = live["packets"].as_u64().unwrap();
    assert!(text.contains(&format!("{packets} packets")), "{text}");
    let md = Command::new(BIN)
        .args(["report", "--format", "md"])
        .arg(&dir)
        .output()
        .unwrap();
    let md = String::from_utf8_lossy(&md.stdout);
    assert!(
        md.contains("![") && md.contains("rates.svg"),
        "plots referenced:\n{md}"
    );
    assert!(md.replace("\\_", "_").contains("NO_SOCKET"), "drop table:\n{md}");

    // The real trace passes the same structural checks as the unit-tested ones.
    let trace: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("trace.json")).unwrap()).unwrap();
    scanprof::views::export::trace::check_trace(&trace).unwrap();
    let events = trace["traceEvents"].as_array().unwrap();
    assert!(events.iter().any(|e| e["ph"] == "C"), "counter tracks");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_redacted_bundle_keeps_no_address_or_host_name() {
    let test = privileged();
    let dir = tempdir("redact");
    // The command line names a lab address in a shell no-op (`:`), so that it is recorded
    // without anything being sent there; the traffic goes to loopback.
    let script = format!("{BIN} send --to 127.0.0.1:9 --rate 1000 --duration 1; : 10.99.0.2 192.0.2.7");
    let out = Command::new(BIN)
        .args(["record", "-o"])
        .arg(&dir)
        .args([
            "--requested",
            "1000",
            "--json",
            "--redact",
            "--",
            "sh",
            "-c",
            &script,
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let host = nix::unistd::gethostname().unwrap().to_string_lossy().into_owned();
    let host_word = regex::Regex::new(&format!(r"\b{}\b", regex::escape(&host))).unwrap();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        // trace.perfetto-trace is binary, with its strings in UTF-8 like the other files'.
        let bytes = std::fs::read(&path).unwrap();
        let text = String::from_utf8_lossy(&bytes);
        for addr in ["10.99.0.2", "192.0.2.7"] {
            assert!(!text.contains(addr), "{} still names {addr}", path.display());
        }
        assert!(
            !host_word.is_match(&text),
            "{} names the host {host}",
            path.display()
        );
    }
    let events = std::fs::read_to_string(dir.join("events.ndjson")).unwrap();
    assert!(
        events.contains("ipv4-1") && events.contains("ipv4-2"),
        "stand-ins in place"
    );
    assert!(events.contains("127.0.0.1"), "loopback is kept");
    let _ = std::fs::remove_dir_all(&dir);
    test.assert_released("the test's scanprof processes ended");
}

#[test]
fn broken_bundles_get_clear_errors_naming_file_and_line() {
    let test = privileged();
    let dir = tempdir("broken");
    std::fs::create_dir_all(&dir).unwrap();
    let report = |p: &Path| Command::new(BIN).arg("report").arg(p).output().unwrap();

    // Not a bundle at all.
    let out = report(&dir);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("has no events.ndjson"));
    let out = report(&dir.join("nope"));
    assert_eq!(out.status.code(), Some(2));

    // A foreign file.
    std::fs::write(dir.join("events.ndjson"), "GIF89a\u{0}\u{1}binary\n").unwrap();
    let out = report(&dir);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("events.ndjson") && err.contains("line 1"), "{err}");

    // A truncated recording: what was read is still reported, the cut line is named.
    let good = tempdir("good");
    record(&test, &good, &[]);
    let text = std::fs::read_to_string(good.join("events.ndjson")).unwrap();
    let lines = text.lines().count();
    std::fs::write(dir.join("events.ndjson"), &text[..text.len() - 100]).unwrap();
    let out = report(&dir);
    assert_eq!(out.status.code(), Some(3), "partial read: exit 3");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("events.ndjson line {lines}")), "{err}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("no summary in this bundle"), "{stdout}");
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&good);
}

/// `-q` (quiet): the summary on stdout, and nothing per tick or at start on stderr; without it,
/// the start line and a line per tick.
#[test]
fn quiet_prints_the_summary_and_nothing_per_tick() {
    let test = privileged();
    let run = |quiet: bool| {
        let mut cmd = Command::new(BIN);
        cmd.args(["run", "--no-tui", "-i", "0.5", "-d", "10"]);
        if quiet {
            cmd.arg("-q");
        }
        cmd.args([
            "--",
            BIN,
            "send",
            "--to",
            "127.0.0.1:9",
            "--rate",
            "1000",
            "--count",
            "1500",
        ]);
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (out, err) = run(false);
    assert!(
        err.contains("probes attached") && err.contains("] achieved"),
        "{err}"
    );
    assert!(out.contains("requested 1000 pps, achieved"), "{out}");
    let (out, err) = run(true);
    assert!(out.contains("requested 1000 pps, achieved"), "{out}");
    assert!(
        !err.contains("probes attached") && !err.contains("] achieved"),
        "{err}"
    );
    test.assert_released("the test's scanprof processes ended");
}
