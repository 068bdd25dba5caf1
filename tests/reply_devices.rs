//! The reply counter's device check (probes/replies.bpf.c, `netif_receive_skb`): a packet counts
//! as arriving for the family only on a device its packets used, by namespace and ifindex. The
//! program keeps the device each CPU last found among the family's (`reply_dev_hit`) and skips the
//! hash lookup for it, so the test makes that cache meet a device that differs from the family's
//! by its namespace alone: two namespaces' `lo` (ifindex 1 in both), the family sending to
//! 127.0.0.1 in one while another sender floods 127.0.0.1 in the other at the same time (both
//! CPUs see both). Every family packet arrives on its own `lo` from an address it sent to
//! (`udp_loopback`, exactly the packets the sender reports); none of the other namespace's do.
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
    let _ns = Namespaces::new(&[mine.clone(), other.clone()]);
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
}

/// Starts argv (bounded by its own flags); ended when dropped.
fn spawn(name: &str, argv: &[String]) -> Proc {
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..]);
    Proc::spawn(name, cmd, false)
}
