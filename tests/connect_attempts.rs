//! A connect scanner's packets are the SYNs of its connect(2) calls (issue 13 item 9): each
//! connect on a TCP socket is a send call, one whose SYN went out a packet, one that failed
//! before its SYN a failed call with its errno; EINPROGRESS and a closed port's ECONNREFUSED are
//! no failures, and a connect on a UDP socket is no attempt. A fixture on loopback makes each
//! outcome a known number of times and prints its own counts; scanprof's must equal them.
//!
//! Needs root (BPF) and fails, never skips, without it. Traffic: loopback only, bounded.

use crate::common;

use std::time::Duration;

use common::*;

const RUN_TIMEOUT: Duration = Duration::from_secs(60);

/// Blocking connects to a closed port (ECONNREFUSED after the SYN's RST), non-blocking ones to a
/// listener (EINPROGRESS), one connect from a bound address, then connects reusing that address
/// to the same peer (EADDRNOTAVAIL: the 4-tuple is in use, no SYN), and a UDP connect. Prints
/// what each call returned, as a JSON line of type `fixture` (on scanprof's stderr).
const CONNECTS: &str = r#"
import errno, json, socket
closed = socket.socket(); closed.bind(("127.0.0.1", 0)); port_closed = closed.getsockname()[1]; closed.close()
out = {"type": "fixture", "refused": 0, "in_progress": 0, "ok": 0, "not_avail": 0}
for _ in range(200):
    s = socket.socket()
    r = s.connect_ex(("127.0.0.1", port_closed))
    out["refused"] += r == errno.ECONNREFUSED
    s.close()
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen(512); port = l.getsockname()[1]
keep = []
for _ in range(100):
    s = socket.socket(); s.setblocking(False)
    r = s.connect_ex(("127.0.0.1", port))
    out["in_progress"] += r == errno.EINPROGRESS
    out["ok"] += r == 0
    keep.append(s)
a = socket.socket(); a.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); a.bind(("127.0.0.1", 0))
out["ok"] += a.connect_ex(("127.0.0.1", port)) == 0
keep.append(a)
for _ in range(30):
    b = socket.socket(); b.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); b.bind(a.getsockname())
    out["not_avail"] += b.connect_ex(("127.0.0.1", port)) == errno.EADDRNOTAVAIL
    b.close()
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.connect(("127.0.0.1", port_closed)); u.close()
print(json.dumps(out), flush=True)
"#;

#[test]
fn connect_outcomes_are_counted_by_errno() {
    let test = privileged();
    let args: Vec<String> = [
        "run",
        "--json",
        "--duration",
        "30",
        "--",
        "python3",
        "-c",
        CONNECTS,
    ]
    .map(String::from)
    .to_vec();
    let run = Proc::scanprof(&args).finish(RUN_TIMEOUT);
    run.assert_success();
    // scanprof hands the target's stdout to its own stderr (its stdout is the JSON stream).
    let fixture: Vec<serde_json::Value> = run
        .stderr_lines
        .iter()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["type"] == "fixture")
        .collect();
    assert_eq!(fixture.len(), 1, "the fixture's line\n{}", run.context());
    let f = &fixture[0];
    let (refused, in_progress, ok, not_avail) = (
        u64_of(f, "refused"),
        u64_of(f, "in_progress"),
        u64_of(f, "ok"),
        u64_of(f, "not_avail"),
    );
    // The fixture did what it meant to: every call returned what it should.
    assert_eq!((refused, in_progress + ok, not_avail), (200, 101, 30), "{f}");

    let s = run.summary();
    precision::assert_precise(
        "connect_outcomes_are_counted_by_errno",
        &s,
        &run.of_type("sample"),
    );
    let c = s
        .connect
        .unwrap_or_else(|| panic!("no connect object\n{}", run.context()));
    eprintln!("fixture {f}; scanprof {c:?}, errors {:?}", s.errors);
    let attempts = refused + in_progress + ok + not_avail;
    assert_eq!(c.attempts, attempts, "{c:?}");
    assert_eq!(c.syns, refused + in_progress + ok, "{c:?}");
    assert_eq!(c.answered, refused, "ECONNREFUSED: answered, not failed: {c:?}");
    assert_eq!(c.failed, not_avail, "{c:?}");
    assert!(c.connect_scanner, "{c:?}");
    // The funnel: attempts are its send calls, SYNs its packets, failures by errno.
    assert_eq!(s.send_calls, attempts, "the UDP connect is no attempt");
    assert_eq!(s.packets, c.syns);
    assert_eq!(s.failed_calls, not_avail);
    assert_eq!(s.errors.get("EADDRNOTAVAIL"), Some(&not_avail), "{:?}", s.errors);
    assert_eq!(
        s.errors.len(),
        1,
        "EINPROGRESS and ECONNREFUSED are no errors: {:?}",
        s.errors
    );
    // Each SYN left through the device as the family's (the RSTs and ACKs of loopback are
    // counted there too, so at least as many).
    assert!(s.stage_counts["dev_queue"] >= c.syns, "{:?}", s.stage_counts);
    drop(run);
    test.assert_released("scanprof run");
}

/// One blocking connect to a lab address no host has: the SYN waits for ARP, which fails after
/// ~3 s; the kernel then answers the connect with EHOSTUNREACH. Prints the errno and the seconds
/// the call took, as a JSON line of type `fixture`.
const BLOCKING_CONNECT: &str = r#"
import json, socket, sys, time
s = socket.socket()
t = time.monotonic()
r = s.connect_ex((sys.argv[1], 80))
d = time.monotonic() - t
print(json.dumps({"type": "fixture", "errno": r, "inside_s": d}), flush=True)
"#;

#[test]
fn the_time_a_blocking_connect_waits_is_blocked_send_time() {
    let test = privileged();
    let lab = TestLab::new(None);
    let [a, b, c, _] = lab.lab.target_addr.octets();
    let nobody = std::net::Ipv4Addr::new(a, b, c, 77).to_string();
    let fixture: Vec<String> = ["python3", "-c", BLOCKING_CONNECT, &nobody]
        .map(String::from)
        .to_vec();
    let mut args: Vec<String> = ["run", "--json", "--duration", "30", "--"]
        .map(String::from)
        .to_vec();
    args.extend(in_netns(&lab.lab.sender_ns, &fixture));
    let run = Proc::scanprof(&args).finish(RUN_TIMEOUT);
    run.assert_success();
    let line: Vec<serde_json::Value> = run
        .stderr_lines
        .iter()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["type"] == "fixture")
        .collect();
    assert_eq!(line.len(), 1, "the fixture's line\n{}", run.context());
    let f = &line[0];
    assert_eq!(u64_of(f, "errno"), libc::EHOSTUNREACH as u64, "{f}");
    let inside_s = f64_of(f, "inside_s");
    assert!(inside_s > 1.0, "the connect did not wait: {f}");

    let s = run.summary();
    precision::assert_precise(
        "the_time_a_blocking_connect_waits_is_blocked_send_time",
        &s,
        &run.of_type("sample"),
    );
    let c = s
        .connect
        .unwrap_or_else(|| panic!("no connect object\n{}", run.context()));
    eprintln!("fixture {f}; scanprof {c:?}, budget {:?}", s.budget);
    assert_eq!((c.attempts, c.syns, c.answered, c.failed), (1, 1, 1, 0), "{c:?}");
    assert_eq!(s.failed_calls, 0, "EHOSTUNREACH after the SYN is no failure");
    // The wait, off CPU inside the connect, is the budget's blocked-in-send time.
    assert_within(
        "blocked_send_ns vs the fixture's time inside connect",
        s.budget.blocked_send_ns as f64 / 1e9,
        inside_s,
        0.05,
    );
    drop(run);
    test.assert_released("scanprof run");
    lab.destroy();
}
