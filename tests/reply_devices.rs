//! The reply counter's device check (probes/replies.bpf.c, `netif_receive_skb`): a packet counts
//! as arriving for the family only on a device its packets were queued on, by namespace and
//! ifindex. The program keeps the device each CPU last found to count on, and the one it last
//! found not to (`reply_devs`), and skips the hash lookup for them, so the first test makes that
//! cache meet a device that differs from the family's by its namespace alone: two namespaces'
//! `lo` (ifindex 1 in both), the family sending to 127.0.0.1 in one while another sender floods
//! 127.0.0.1 in the other at the same time (both CPUs see both). Every family packet arrives on
//! its own `lo` from an address it sent to (`udp_loopback`, exactly the packets the sender
//! reports); none of the other namespace's do. The second holds the far end of a lab's veth,
//! which the drops count as the family's device, out of the replies.
//!
//! Needs root (BPF, namespaces); fails, never skips, without them. Bounded: 20,000 family
//! packets at 20,000 pps and a flood of at most 30 s (ended when the run is), each on a loopback device of a namespace the test
//! creates and deletes (also on failure).
//!
//! Run: `cargo test --test it reply_devices::`

use crate::common;

use std::process::Command;
use std::time::Duration;

use common::*;

/// Packets the family sends, and at what rate.
const PACKETS: u64 = 20_000;
const RATE: f64 = 20_000.0;
/// The longest the other namespace's sender floods its own loopback: it starts before the
/// family's run and is ended (SIGTERM) after it, so it covers the run whole.
const FLOOD_S: f64 = 30.0;
const RUN_TIMEOUT: Duration = Duration::from_secs(60);

#[test]
fn loopback_packets_count_as_arrived_only_in_the_family_s_own_namespace() {
    let test = privileged();
    let pid = std::process::id();
    let (mine, other) = (format!("sprd-a-{pid}"), format!("sprd-b-{pid}"));
    let ns = Namespaces::new(&[mine.clone(), other.clone()]);
    let port: u16 = 9000;

    // A receiver for the family's packets (not the family's: it is started apart).
    let receiver: Vec<String> = [
        scanprof_bin(),
        "recv",
        "--port",
        &port.to_string(),
        "--duration",
        "30",
    ]
    .map(String::from)
    .to_vec();
    let receiver = spawn("receiver", &in_netns(&mine, &receiver));
    // The other namespace's flood to its own closed port: from 127.0.0.1, the address the family
    // sends to, on a `lo` of ifindex 1 like the family's.
    let flood = sender_argv(&format!("127.0.0.1:{port}"), 0.0, 100_000_000, FLOOD_S, &[]);
    let mut flood = spawn("flood", &in_netns(&other, &flood));
    std::thread::sleep(Duration::from_millis(300));

    let family = in_netns(
        &mine,
        &sender_argv(&format!("127.0.0.1:{port}"), RATE, PACKETS, 10.0, &[]),
    );
    let mut args: Vec<String> = ["run", "--json", "--no-tui", "--"].map(String::from).to_vec();
    args.extend(family);
    let finished = Proc::scanprof(&args).finish(RUN_TIMEOUT);
    finished.assert_success();
    let sent = u64_of(&finished.sender_report(), "sent");
    let summary = finished.summary();
    let replies = summary
        .replies
        .as_ref()
        .unwrap_or_else(|| panic!("no reply funnel in the summary\n{}", finished.context()));
    eprintln!("family sent {sent}; arrived {:?}", replies.arrived);
    assert!(
        flood.running(),
        "the other namespace's flood ended before the family's run did: nothing to tell apart"
    );
    assert_eq!(sent, PACKETS, "the family's sender sent {sent} of {PACKETS}");
    assert_eq!(
        replies.arrived.udp_loopback, sent,
        "family packets that arrived on its own lo: {} of {sent} (the other namespace's lo carries the same addresses)",
        replies.arrived.udp_loopback
    );
    assert_eq!(
        replies.arrived_total, 0,
        "replies counted beside the family's own loopback packets: {:?}",
        replies.arrived
    );
    drop(flood);
    drop(receiver);
    test.assert_released("the loopback family's run");
    ns.destroy();
}

/// The far end of a lab's veth (its peer, in the target's namespace) is one of the family's
/// devices for the drops (`SP_DEV_FAR` in `target_devs`), not for the replies: the family's
/// packets arrive there, its replies never do. The family sends first to its own address (which
/// is then an address it sent to), then to the target's closed port: each of those probes
/// arrives at the far end from that address, and is not a reply. The replies that arrived are
/// the ICMP port unreachables the target sent (its `Icmp: OutDestUnreachs`) and those the
/// family's own stack sent it on its `lo` (the sender namespace's); its packets to itself arrive
/// on its `lo` (`udp_loopback`). Before the far end was marked, every probe was also a UDP reply.
#[test]
fn probes_arriving_at_a_veths_far_end_are_not_replies() {
    const OWN: u64 = 200;
    const PROBES: u64 = 2_000;
    let test = privileged();
    let lab = common::test_lab::TestLab::new(None);
    let own = sender_argv(&format!("{}:9", lab.lab.sender_addr), 1000.0, OWN, 10.0, &[]);
    let probes = sender_argv(&lab.to(9), 1000.0, PROBES, 10.0, &[]);
    let script = format!("{} 1>&2 && {} 1>&2", sh_join(&own), sh_join(&probes));
    let family = ["sh".to_string(), "-c".into(), script];
    let mut args: Vec<String> = ["run", "--json", "--no-tui", "--"].map(String::from).to_vec();
    args.extend(in_netns(&lab.lab.sender_ns, &family));
    let run = Proc::scanprof(&args).finish(patience(RUN_TIMEOUT));
    let counter = |ns: &str, proto: &str, field: &str| -> u64 {
        scanprof::lab::truth::snmp(ns)
            .and_then(|t| scanprof::lab::truth::snmp_counter(&t, proto, field))
            .unwrap_or_else(|| panic!("{proto} {field} in {ns}"))
    };
    let no_ports = counter(&lab.lab.target_ns, "Udp", "NoPorts");
    let target_unreach = counter(&lab.lab.target_ns, "Icmp", "OutDestUnreachs");
    let own_unreach = counter(&lab.lab.sender_ns, "Icmp", "OutDestUnreachs");
    run.assert_success();
    let ctx = run.context();
    let sent: Vec<u64> = run.sender_reports().iter().map(|r| u64_of(r, "sent")).collect();
    assert_eq!(sent, [OWN, PROBES], "the senders' own reports\n{ctx}");
    assert_eq!(
        no_ports, PROBES,
        "every probe reached the target's closed port\n{ctx}"
    );
    let summary = run.summary();
    let r = summary
        .replies
        .as_ref()
        .unwrap_or_else(|| panic!("no reply funnel in the summary\n{ctx}"));
    eprintln!(
        "far end: arrived {:?}; target's Icmp OutDestUnreachs {target_unreach}, the sender \
         namespace's {own_unreach}",
        r.arrived
    );
    assert_eq!(
        r.arrived.udp, 0,
        "the probes that arrived at the veth's far end counted as UDP replies\n{ctx}"
    );
    assert_eq!(r.arrived.udp_loopback, OWN, "{:?}\n{ctx}", r.arrived);
    assert_eq!(
        r.arrived.icmp_unreachable,
        target_unreach + own_unreach,
        "{:?}\n{ctx}",
        r.arrived
    );
    assert_eq!(
        r.arrived_total,
        target_unreach + own_unreach,
        "{:?}\n{ctx}",
        r.arrived
    );
    test.assert_released("the run across the lab");
    lab.destroy();
}

/// Starts argv (bounded by its own flags); ended when dropped.
fn spawn(name: &str, argv: &[String]) -> Proc {
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..]);
    Proc::spawn(name, cmd, false)
}
