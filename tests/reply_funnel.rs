//! The reply funnel (issue 28 item 4): a UDP scan (`nmap -sU`) of closed ports of a lab target
//! that answers only some of its probes, with nothing dropped on the way. The target namespace's
//! kernel sends an ICMP port unreachable to one source at most once per `icmp_ratelimit` ms
//! after a burst (set to its default, 1000 ms, inside the namespace): the other probes meet a
//! closed port and go unanswered, silently. scanprof's figures must equal the target's own SNMP
//! counters: probes = `Udp: NoPorts` (every probe reached a closed port), replies arrived =
//! `Icmp: OutDestUnreachs` (every unreachable it sent came back to the scanner's host), what
//! was not answered = `Icmp: OutRateLimitHost + OutRateLimitGlobal` (the kernel's own count of
//! the errors it held back); nothing dropped here. The top loss verdict is `lost_beyond_host`,
//! with the ICMP rate-limit advice.
//!
//! Needs root (BPF, namespaces) and nmap; fails, never skips, without them. Bounded: 2,000 probes
//! at 1,000 pps into the lab the test creates and removes.
//!
//! Run: `cargo test --test it reply_funnel::`

use crate::common;

use std::process::Command;
use std::time::Duration;

use common::test_lab::TestLab;
use common::*;
use scanprof::analysis::verdict::{Cause, Kind};
use serde_json::Value;

/// Probes nmap sends: one per port, ports 1 to PORTS of the target.
const PORTS: u32 = 2000;
/// nmap's --min-rate and --max-rate.
const RATE: u32 = 1000;
/// Longest the scan may take under scanprof.
const RUN_TIMEOUT: Duration = Duration::from_secs(60);

/// The target namespace's SNMP counter `proto: field` (/proc/net/snmp read inside it).
fn snmp(ns: &str, proto: &str, field: &str) -> u64 {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "cat", "/proc/net/snmp"])
        .output()
        .expect("ip netns exec cat /proc/net/snmp");
    let text = String::from_utf8_lossy(&out.stdout);
    let prefix = format!("{proto}:");
    let mut rows = text.lines().filter(|l| l.starts_with(&prefix));
    let (names, values) = (rows.next().unwrap_or(""), rows.next().unwrap_or(""));
    names
        .split_whitespace()
        .zip(values.split_whitespace())
        .find(|(n, _)| *n == field)
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or_else(|| panic!("no {proto} {field} in {ns}'s /proc/net/snmp:\n{text}"))
}

fn sysctl_in(ns: &str, setting: &str) {
    let ok = Command::new("ip")
        .args(["netns", "exec", ns, "sysctl", "-qw", setting])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "cannot set {setting} in {ns}");
}

#[test]
fn a_udp_scan_the_target_answers_in_part_is_counted_as_the_targets_snmp_says() {
    let test = privileged();
    require_scanner("nmap");
    let lab = TestLab::new(None);
    let (sender_ns, target_ns) = (lab.lab.sender_ns.clone(), lab.lab.target_ns.clone());
    // The target's ICMP rate limit, per namespace: its default, whatever the host's.
    sysctl_in(&target_ns, "net.ipv4.icmp_ratelimit=1000");
    sysctl_in(&target_ns, "net.ipv4.icmp_ratemask=6168");
    let scan: Vec<String> = [
        "nmap",
        "-sU",
        "--send-ip",
        "-n",
        "-Pn",
        "--disable-arp-ping",
        "--max-retries",
        "0",
        "--min-rate",
        &RATE.to_string(),
        "--max-rate",
        &RATE.to_string(),
        &format!("-p1-{PORTS}"),
        &lab.lab.target_addr.to_string(),
    ]
    .map(String::from)
    .to_vec();
    let mut args: Vec<String> = ["run", "--json", "-q", "--"].map(String::from).to_vec();
    args.extend(in_netns(&sender_ns, &scan));
    let done = Proc::scanprof(&args).finish(patience(RUN_TIMEOUT));
    let ctx = done.context();
    // The independent counts, read before the lab goes.
    let no_ports = snmp(&target_ns, "Udp", "NoPorts");
    let in_datagrams = snmp(&target_ns, "Udp", "InDatagrams");
    let unreach_out = snmp(&target_ns, "Icmp", "OutDestUnreachs");
    let held_back =
        snmp(&target_ns, "Icmp", "OutRateLimitHost") + snmp(&target_ns, "Icmp", "OutRateLimitGlobal");
    let sender_icmp_in = snmp(&sender_ns, "Icmp", "InDestUnreachs");
    lab.destroy();
    done.assert_success();
    test.assert_released("scanprof run -- nmap -sU");
    let summary = done.summary();
    let r = summary
        .replies
        .as_ref()
        .unwrap_or_else(|| panic!("no reply funnel in the summary\n{ctx}"));
    eprintln!(
        "reply funnel: probes {} (target Udp NoPorts {no_ports}), arrived {} (target Icmp OutDestUnreachs {unreach_out}, sender InDestUnreachs {sender_icmp_in}), unanswered {} (target held back {held_back}), delivered {}, dropped here {}",
        r.probes, r.arrived_total, r.unanswered, r.delivered, r.dropped_here
    );
    // Probes: every one reached a closed port of the target.
    assert_eq!(in_datagrams, 0, "a port of the target was open\n{ctx}");
    assert_eq!(r.probes, summary.packets, "{r:?}");
    assert_eq!(r.probes, no_ports, "probes vs the target's Udp NoPorts\n{ctx}");
    assert!(r.probes >= u64::from(PORTS), "{r:?}");
    // Replies arrived: every ICMP unreachable the target sent, and nothing else.
    assert_eq!(
        r.arrived.icmp_unreachable, unreach_out,
        "vs Icmp OutDestUnreachs\n{ctx}"
    );
    assert_eq!(r.arrived_total, unreach_out, "{r:?}");
    assert_eq!(
        r.arrived_total, sender_icmp_in,
        "vs the sender's Icmp InDestUnreachs\n{ctx}"
    );
    // Unanswered: what the target's rate limit held back.
    assert_eq!(
        r.unanswered, held_back,
        "vs Icmp OutRateLimitHost + OutRateLimitGlobal\n{ctx}"
    );
    assert!(
        held_back > r.probes / 2,
        "the rate limit answered most probes: {r:?}"
    );
    // Nothing dropped on this host, either way; nmap's ring took every reply.
    assert_eq!((r.dropped_here, r.probes_dropped_here), (0, 0), "{r:?}");
    assert_eq!(r.beyond_host, r.unanswered, "{r:?}");
    // What nmap's pcap ring took is read from the socket's own counters (tp_packets) by the
    // packet-socket iterator, and as it closes (rings.bpf.c): every reply that arrived, as
    // nmap itself reports (it took them all: every port closed). It read 0 or 1 of 7 while a
    // socket closed after scanprof's last sample lost what it held.
    assert_eq!(r.delivered, r.arrived_total, "{r:?}");
    let ratio = r.reply_ratio.expect("a ratio");
    assert!((ratio - r.arrived_total as f64 / r.probes as f64).abs() < 1e-12);

    // The diagnosis: the loss is beyond this host, and the advice names the ICMP rate limit.
    let v = summary
        .verdicts
        .iter()
        .find(|v| v.cause == Cause::LostBeyondHost)
        .unwrap_or_else(|| panic!("no lost_beyond_host verdict: {:#?}", summary.verdicts));
    assert_eq!(v.kind, Kind::Loss);
    assert!(
        v.sentence.starts_with(&format!(
            "{} of {} probes unanswered over the run",
            r.unanswered, r.probes
        )) && v
            .sentence
            .contains("none dropped here: the loss is beyond this host"),
        "{}",
        v.sentence
    );
    assert!(v.next_step.contains("net.ipv4.icmp_ratelimit"), "{}", v.next_step);
    let top_loss = summary.verdicts.iter().find(|v| v.kind == Kind::Loss).unwrap();
    assert_eq!(top_loss.cause, Cause::LostBeyondHost, "{:#?}", summary.verdicts);
    for v in &summary.verdicts {
        eprintln!(
            "verdict: {} {:.1}% {:?}: {}",
            v.cause,
            v.share * 100.0,
            v.confidence,
            v.sentence
        );
    }
}

/// `scanprof lab replies-lost` (issue 28): the same partly answered UDP scan staged by the lab,
/// whose report puts each figure of the reply funnel beside the namespaces' own count: probes
/// and the target's `Udp: NoPorts`, replies arrived and its `Icmp: OutDestUnreachs` (and the
/// sender's `InDestUnreachs`), unanswered and what its rate limit held back, delivered (nmap's
/// ring) and the sender's `InDestUnreachs`, dropped here and what was sent less what arrived.
/// Every one equal; the top loss verdict `lost_beyond_host` at the held-back share.
#[test]
fn the_replies_lost_lab_scenario_holds_the_reply_funnel_to_the_namespaces_counters() {
    let test = privileged();
    require_scanner("nmap");
    let done =
        Proc::scanprof(&["lab", "replies-lost", "--json"].map(String::from)).finish(patience(RUN_TIMEOUT));
    done.assert_success();
    test.assert_released("scanprof lab replies-lost");
    let ctx = done.context();
    let lab = done
        .of_type("lab")
        .pop()
        .unwrap_or_else(|| panic!("no lab line\n{ctx}"));
    let checks = lab["fixture_checks"].as_array().expect("fixture checks");
    let named = |what: &str| {
        checks
            .iter()
            .find(|c| c["what"].as_str().is_some_and(|w| w.starts_with(what)))
            .unwrap_or_else(|| panic!("no {what} check: {lab}"))
    };
    for what in [
        "probes",
        "replies arrived",
        "unanswered",
        "delivered",
        "dropped here",
    ] {
        let c = named(what);
        eprintln!("{}: scanprof {} vs {}", c["what"], c["scanprof"], c["fixture"]);
    }
    assert_eq!(checks.len(), 6, "{lab}");
    for c in checks {
        assert_eq!(c["tolerance"].as_f64(), Some(0.0), "{c}");
        assert_eq!(c["scanprof"], c["fixture"], "{c}");
        assert_eq!(c["ok"], Value::Bool(true), "{c}");
    }
    // The target answered only a burst: most probes went unanswered beyond this host.
    let (probes, unanswered) = (
        named("probes")["fixture"].as_f64().unwrap(),
        named("unanswered")["fixture"].as_f64().unwrap(),
    );
    assert!(probes >= 2000.0 && unanswered > probes / 2.0, "{lab}");
    assert_eq!(named("dropped here")["fixture"].as_f64(), Some(0.0), "{lab}");
    let summary = done.summary();
    let top = summary
        .verdicts
        .iter()
        .find(|v| v.kind == Kind::Loss)
        .unwrap_or_else(|| panic!("no loss verdict: {:#?}", summary.verdicts));
    assert_eq!(top.cause, Cause::LostBeyondHost, "{:#?}", summary.verdicts);
    assert!((top.share - unanswered / probes).abs() < 1e-12, "{top:?}");
    assert_eq!(lab["check"]["ok"], Value::Bool(true), "{lab}");
    assert_eq!(lab["check"]["top_cause"], "lost_beyond_host", "{lab}");
    assert!(
        (lab["check"]["truth"].as_f64().unwrap() - unanswered / probes).abs() < 1e-12,
        "{lab}"
    );
}
