//! The receive cost (issue 15 items 2 and 4): `scanprof recv --workers N` (1, 2 and 4
//! SO_REUSEPORT workers, a worker per sender's source port) in the target namespace of a lab
//! the test creates, profiled by `scanprof run`, fed by one reference sender per worker from
//! the other namespace. scanprof's per-thread packets must equal each worker's own count, and
//! together the namespace's `Udp: InDatagrams`; scanprof's cost per packet (on-CPU time / packets
//! read) must be within 25% of each worker's own (its thread CPU clock / its packets).
//!
//! Needs root (BPF, namespaces); fails, never skips, without it. Bounded: per worker 3 s of
//! 5,000 pps (SCANPROF_RECV_COST_RATE overrides the rate) into the lab it creates and removes.
//! Each run prints a row of the capacity table of docs/benchmarks.md.
//!
//! Run: `cargo test --test it receive_cost:: -- --test-threads=1 --nocapture`

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

/// Seconds each sender sends.
const SEND_S: f64 = 3.0;
/// Seconds the receiver runs: the senders start once its port is bound.
const RECV_S: f64 = 9.0;
/// Per-packet cost: scanprof against the worker's own clock.
const COST_TOL: f64 = 0.25;
/// The first source port: worker i gets the datagrams from port FIRST_SPORT + i (port mod N).
const FIRST_SPORT: u16 = 40_000;

fn rate_per_worker() -> f64 {
    std::env::var("SCANPROF_RECV_COST_RATE")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|r: &f64| r.is_finite() && *r > 0.0)
        .unwrap_or(5_000.0)
}

fn snmp_udp_in(ns: &str) -> u64 {
    let text = scanprof::system::netstat::run_in_netns(Some(ns), "cat", &["/proc/net/snmp"])
        .unwrap_or_else(|e| panic!("cannot read /proc/net/snmp in {ns}: {e:#}"));
    scanprof::lab::truth::snmp_counter(&text, "Udp", "InDatagrams").expect("Udp InDatagrams")
}

/// Sockets bound to UDP `port` in namespace `ns` (its /proc/net/udp).
fn sockets_on(ns: &str, port: u16) -> usize {
    let want = format!(":{port:04X}");
    scanprof::system::netstat::run_in_netns(Some(ns), "cat", &["/proc/net/udp"]).map_or(0, |t| {
        t.lines()
            .filter(|l| l.split_whitespace().nth(1).is_some_and(|a| a.ends_with(&want)))
            .count()
    })
}

fn measure(workers: usize, port: u16) {
    let test = privileged();
    let lab = TestLab::new(None);
    let rate = rate_per_worker();
    let report = std::env::temp_dir().join(format!(
        "scanprof-recv-cost-{}-{workers}.json",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&report);
    let recv: Vec<String> = [
        scanprof_bin(),
        "recv",
        "--port",
        &port.to_string(),
        "--workers",
        &workers.to_string(),
        "--duration",
        &RECV_S.to_string(),
        "--report",
        &report.display().to_string(),
    ]
    .map(String::from)
    .to_vec();
    let mut args: Vec<String> = ["run", "--json", "--"].map(String::from).to_vec();
    args.extend(in_netns(&lab.lab.target_ns, &recv));
    let udp_in_before = snmp_udp_in(&lab.lab.target_ns);
    let run = Proc::scanprof(&args);

    let deadline = Instant::now() + patience(Duration::from_secs(30));
    // Every worker's socket bound (the port-spreading program is attached right after).
    while sockets_on(&lab.lab.target_ns, port) < workers {
        assert!(
            Instant::now() < deadline,
            "the receiver never bound port {port} {workers} times"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let count = (rate * SEND_S).round() as u64;
    let senders: Vec<Proc> = (0..workers)
        .map(|i| {
            let sport = (FIRST_SPORT + i as u16).to_string();
            let argv = in_netns(
                &lab.lab.sender_ns,
                &sender_argv(
                    &lab.to(port),
                    rate,
                    count,
                    SEND_S + 2.0,
                    &["--src-port", &sport, "--pacer", "sleep"],
                ),
            );
            let mut cmd = std::process::Command::new(&argv[0]);
            cmd.args(&argv[1..]);
            Proc::spawn(&format!("sender {i}"), cmd, false)
        })
        .collect();
    let sent: Vec<u64> = senders
        .into_iter()
        .map(|s| {
            let done = s.finish(patience(Duration::from_secs(20)));
            done.assert_success();
            u64_of(&done.sender_report(), "sent")
        })
        .collect();
    let done = run.finish(patience(Duration::from_secs(40)));
    done.assert_success();
    test.assert_released("scanprof run -- scanprof recv --workers");
    let udp_in = snmp_udp_in(&lab.lab.target_ns) - udp_in_before;
    let ctx = done.context();
    let own: Value = serde_json::from_str(
        &std::fs::read_to_string(&report).unwrap_or_else(|e| panic!("no receiver report: {e}\n{ctx}")),
    )
    .unwrap();
    let _ = std::fs::remove_file(&report);
    let summary = done.summary();
    let receive = summary
        .receive
        .as_ref()
        .unwrap_or_else(|| panic!("no receive part in the summary\n{ctx}"));
    let own_workers = own["workers"].as_array().expect("per-worker counts");
    assert_eq!(own_workers.len(), workers, "{own}");

    // Counts: each worker's own count = scanprof's thread row; in all, = InDatagrams.
    let total = u64_of(&own, "packets");
    assert_eq!(total, udp_in, "the receiver's count vs Udp InDatagrams: {own}");
    let mut rows = Vec::new();
    for (i, w) in own_workers.iter().enumerate() {
        let (tid, packets, cpu_ns) = (u64_of(w, "tid") as u32, u64_of(w, "packets"), u64_of(w, "cpu_ns"));
        // The source port picked the worker: each got its own sender's datagrams.
        assert!(
            packets as f64 >= 0.9 * sent[i] as f64,
            "worker {i} read {packets} of its sender's {}: not spread by source port: {own}",
            sent[i]
        );
        let t =
            receive.threads.iter().find(|t| t.tid == tid).unwrap_or_else(|| {
                panic!("no receive cost row for worker tid {tid}: {:#?}", receive.threads)
            });
        assert_eq!(t.cost.packets, packets, "scanprof vs worker {i}'s own count");
        let got = t.cost.ns_per_packet.expect("packets were read");
        let want = cpu_ns as f64 / packets as f64;
        assert_within(&format!("worker {i}'s ns per packet"), got, want, COST_TOL);
        // The kernel's user/system split adds up to the scheduler's on-CPU time, to its 10 ms
        // steps (a tick per thread and a little more).
        let (user, system) = (
            t.cost.user_ns.expect("user time read"),
            t.cost.system_ns.expect("system time read"),
        );
        let split = (user + system) as f64;
        assert!(
            (split - t.cost.oncpu_ns as f64).abs() <= (0.25 * t.cost.oncpu_ns as f64).max(30e6),
            "worker {i}: user {user} + system {system} vs on-CPU {}",
            t.cost.oncpu_ns
        );
        let probes = t.cost.probes_oncpu_ns as f64 / packets as f64;
        rows.push((packets, got, want, user, system, probes));
    }
    let all = receive.cost.as_ref().expect("a receive cost in all");
    assert_eq!((all.workers, all.packets), (workers, total), "{all:?}");
    let own_ns = own_workers.iter().map(|w| u64_of(w, "cpu_ns")).sum::<u64>() as f64 / total as f64;
    let all_ns = all.ns_per_packet.expect("packets");
    assert_within("ns per packet in all", all_ns, own_ns, COST_TOL);
    let cap = all.capacity.as_ref().expect("capacity");
    let (g1, g10) = (&cap.line_rates[0], &cap.line_rates[1]);
    // The capacity follows from the cost and the size: 64-byte datagrams are 92-byte packets.
    assert_eq!((cap.packet_bytes, cap.wire_bytes), (92.0, 130.0), "{cap:?}");
    assert_within(
        "1 Gbit/s in CPUs",
        g1.cpus,
        1e9 / (8.0 * 130.0) * all_ns / 1e9,
        1e-9,
    );
    eprintln!(
        "capacity row: | {workers} | {rate:.0} | {total} | {:.0} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} |",
        all.pps / 1.0,
        all_ns / 1e3,
        own_ns / 1e3,
        all.user_ns_per_packet.unwrap_or(f64::NAN) / 1e3,
        all.system_ns_per_packet.unwrap_or(f64::NAN) / 1e3,
        g1.cpus,
        g10.cpus,
        g10.cpus_per_worker
    );
    for (i, (packets, got, want, user, system, probes)) in rows.iter().enumerate() {
        eprintln!(
            "  worker {i}: {packets} packets, scanprof {got:.0} ns/pkt, own clock {want:.0} ns/pkt, \
             user {:.0} system {:.0} ns/pkt; the scheduler probes' on-CPU {probes:.0} ns/pkt",
            *user as f64 / *packets as f64,
            *system as f64 / *packets as f64
        );
    }
    lab.destroy();
}

#[test]
fn one_worker_costs_what_its_own_clock_says() {
    measure(1, 9411);
}

#[test]
fn two_reuseport_workers_each_cost_what_their_own_clocks_say() {
    measure(2, 9412);
}

#[test]
fn four_reuseport_workers_each_cost_what_their_own_clocks_say() {
    measure(4, 9414);
}
