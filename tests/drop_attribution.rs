//! Drops recognised by address go to the process that sent the packet. A probe to a closed port
//! dies at the target with no socket left on it, so scanprof knows it by its address pair only;
//! that knowledge must follow the latest family process that sent to the address, not stay
//! with an earlier one that has exited (issue 20: two senders one after the other, all 8,000
//! NO_SOCKET drops went to the first pid).

use crate::common;

use std::time::Duration;

use common::*;
use scanprof::collect::DropClass;
use scanprof::netlab::{Lab, LabConfig};

const CLOSED_PORT: u16 = 9;
/// Longer than a run's --duration of 30 s (both stretched by SCANPROF_TEST_PATIENCE).
const RUN_TIMEOUT: Duration = Duration::from_secs(40);

#[test]
fn two_senders_one_after_the_other_are_each_credited_their_own_drops() {
    let test = privileged();
    let lab = Lab::create(&LabConfig { tbf: None })
        .unwrap_or_else(|e| panic!("cannot create the namespace lab: {e:#}"));
    let names = vec![lab.sender_ns.clone(), lab.target_ns.clone()];
    let target_netns = netns_inode(&lab.target_ns);
    let to = format!("{}:{CLOSED_PORT}", lab.target_addr);

    // A shell runs two senders in turn, each printing its pid first: 3000 then 5000 probes.
    // Each 1 s of probes, bounded by 5 s (stretched in slow VMs: in a 5.10 guest under host
    // load the second sent 4376 and 4494 of its 5000 within 5 s).
    let bound_s = patience(Duration::from_secs(5)).as_secs_f64();
    let first = sh_join(&sender_argv(&to, 3000.0, 3000, bound_s, &[]));
    let second = sh_join(&sender_argv(&to, 5000.0, 5000, bound_s, &[]));
    let script = format!(
        "exec 1>&2; sh -c 'echo first=$$; exec {}'; sh -c 'echo second=$$; exec {}'",
        first.replace('\'', r"'\''"),
        second.replace('\'', r"'\''")
    );
    let argv = in_netns(&lab.sender_ns, &["sh".into(), "-c".into(), script]);
    let mut args: Vec<String> = ["run", "--json", "--duration"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.push(patience(Duration::from_secs(30)).as_secs().to_string());
    args.push("--".into());
    args.extend(argv);
    let run = Proc::scanprof(&args).finish(RUN_TIMEOUT);
    run.assert_success();
    assert_all_probes_attached(&run.started());

    let (first_pid, second_pid) = (run.shell_var("first"), run.shell_var("second"));
    let reports = run.sender_reports();
    let sent: Vec<u64> = reports
        .iter()
        .map(|r| r["sent"].as_u64().expect("sent"))
        .collect();
    assert_eq!(sent, [3000, 5000], "the senders' own reports: {reports:?}");
    let s = run.summary();
    // Without drop reasons (before 5.17) the closed port's drops are NOT_SPECIFIED at
    // __udp4_lib_rcv and classed by place alone as each sender's loss; still each its own.
    let reasons = kernel_has_drop_reasons();
    let credited = |pid: u32| -> u64 {
        s.drops
            .iter()
            .filter(|d| d.netns == target_netns && d.pid == Some(pid))
            .filter(|d| {
                if reasons {
                    d.reason == "NO_SOCKET"
                } else {
                    d.reason == "NOT_SPECIFIED" && d.location.starts_with("__udp4_lib_rcv")
                }
            })
            .inspect(|d| {
                let class = if reasons {
                    DropClass::Expected
                } else {
                    DropClass::TargetLoss
                };
                assert_eq!(d.class, class, "{d:?}")
            })
            .map(|d| d.count)
            .sum()
    };
    let (a, b) = (credited(first_pid), credited(second_pid));
    eprintln!(
        "first sender (pid {first_pid}): {a} {} drops for 3000 sent; second (pid {second_pid}): {b} for 5000",
        if reasons {
            "NO_SOCKET"
        } else {
            "NOT_SPECIFIED (no drop reasons)"
        }
    );
    assert_eq!(a, 3000, "the first sender's drops: {:?}", s.drops);
    assert_eq!(b, 5000, "the second sender's drops: {:?}", s.drops);
    if !reasons {
        // Which of them met a closed port and which were lost is not judged, and said so.
        assert!(
            s.verdicts
                .iter()
                .any(|v| v.cause == scanprof::analysis::verdict::Cause::NotJudgedHere),
            "{:#?}",
            s.verdicts
        );
    }

    // Roles: the fallback profile guesses `sender` for a process only once it has sent; the
    // shell that started the two senders sent nothing and is no sender (issue 20).
    let role = |pid: u32| {
        s.processes
            .iter()
            .find(|p| p.pid == pid)
            .unwrap_or_else(|| panic!("pid {pid} not in {:?}", s.processes))
            .role
            .clone()
    };
    let shell = root_pid(&run.started());
    assert_eq!(role(shell), None, "{:?}", s.processes);
    assert_eq!(role(first_pid).as_deref(), Some("sender"), "{:?}", s.processes);
    assert_eq!(role(second_pid).as_deref(), Some("sender"), "{:?}", s.processes);

    drop(run);
    test.assert_released("scanprof run");
    lab.destroy()
        .unwrap_or_else(|e| panic!("lab teardown failed: {e:#}"));
    assert_namespaces_gone(&names);
}

/// Issue 28 item 10: a drop is the family's only on a device its packets used. The family sends
/// from the sender namespace across the veth to a closed port of the target; meanwhile another
/// process in the target namespace sends datagrams over that namespace's `lo` from the target's
/// own address (one the family sends to) to a closed port of 127.0.0.1. Both die as NO_SOCKET
/// in the target namespace, and the lo ones match a family address by their source; but the
/// family's packets never used that lo: before the fix its 500 drops were charged to the sender
/// as expected replies (the address match counted in any device of a namespace the family
/// reached).
#[test]
fn drops_on_a_device_the_family_never_used_are_not_charged_to_it() {
    const FAMILY: u64 = 2000;
    const OTHERS: u64 = 500;
    let test = privileged();
    let lab = Lab::create(&LabConfig { tbf: None })
        .unwrap_or_else(|e| panic!("cannot create the namespace lab: {e:#}"));
    let names = vec![lab.sender_ns.clone(), lab.target_ns.clone()];
    let target_netns = netns_inode(&lab.target_ns);
    let to = format!("{}:{CLOSED_PORT}", lab.target_addr);
    let mut args: Vec<String> = ["run", "--json", "--duration", "30", "--"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.extend(in_netns(
        &lab.sender_ns,
        &sender_argv(&to, 500.0, FAMILY, 10.0, &[]),
    ));
    let proc = Proc::scanprof(&args);
    // While the family sends (4 s): the other process's datagrams over the target's lo.
    std::thread::sleep(Duration::from_secs(2));
    let from = lab.target_addr;
    let sent = lab
        .in_target(move || -> std::io::Result<u64> {
            let s = std::net::UdpSocket::bind((from, 0))?;
            let mut n = 0;
            for _ in 0..OTHERS {
                s.send_to(b"not the family's", ("127.0.0.1", CLOSED_PORT))?;
                n += 1;
            }
            Ok(n)
        })
        .expect("cannot enter the target namespace")
        .unwrap_or_else(|e| panic!("cannot send over the target's lo: {e}"));
    assert_eq!(sent, OTHERS);
    let run = proc.finish(RUN_TIMEOUT);
    run.assert_success();
    let s = run.summary();
    let in_target = |device: &str, family: bool| -> u64 {
        s.drops
            .iter()
            .filter(|d| d.netns == target_netns && d.reason == "NO_SOCKET")
            .filter(|d| d.device.as_deref() == Some(device) && d.pid.is_some() == family)
            .map(|d| d.count)
            .sum()
    };
    assert_eq!(
        in_target(&lab.target_dev, true),
        FAMILY,
        "the family's probes: {:?}",
        s.drops
    );
    assert_eq!(
        in_target("lo", true),
        0,
        "lo drops charged to the family: {:?}",
        s.drops
    );
    assert_eq!(
        in_target("lo", false),
        OTHERS,
        "the other process's drops: {:?}",
        s.drops
    );
    drop(run);
    test.assert_released("scanprof run");
    lab.destroy()
        .unwrap_or_else(|e| panic!("lab teardown failed: {e:#}"));
    assert_namespaces_gone(&names);
}

/// A drop row names its device also when no device-stage program ever ran on that device: the
/// far end of a veth that only receives. The target has its address as a /32 (no route back: no
/// ICMP error leaves it), the sender a permanent neighbour entry for it (no ARP), and IPv6 is off
/// in both namespaces (no neighbour discovery), so the far end never transmits. Names were noted
/// only at a device stage's first row on a device (net_dev_queue and the others run where a
/// device transmits), and such drop rows said no device: on 5.10 under `--device-stages sampled`
/// (2026-11-30), all 12,000 closed-port drops of a tbf lab whenever the target's few
/// transmissions fell outside the windows.
#[test]
fn a_drop_on_a_device_that_only_receives_names_that_device() {
    const PROBES: u64 = 1_000;
    let test = privileged();
    let pid = std::process::id();
    // Named as a lab's namespaces are (scanprof send goes to the lab range only from one; a
    // number no Lab of this process reaches)
    let (sender_ns, target_ns) = (format!("sp{pid}-7700s"), format!("sp{pid}-7700t"));
    let (near, far) = (format!("spdn{pid}a"), format!("spdn{pid}b"));
    let namespaces = Namespaces::new(&[sender_ns.clone(), target_ns.clone()]);
    for ns in [&sender_ns, &target_ns] {
        for conf in ["all", "default"] {
            let setting = format!("net.ipv6.conf.{conf}.disable_ipv6=1");
            run_ok(&["ip", "netns", "exec", ns, "sysctl", "-qw", &setting]);
        }
    }
    run_ok(&[
        "ip", "-n", &sender_ns, "link", "add", &near, "type", "veth", "peer", "name", &far, "netns",
        &target_ns,
    ]);
    // in the lab range scanprof send allows under SCANPROF_SEND_LOCAL_ONLY, apart from TestLab's
    let (sender_addr, target_addr) = ("10.99.0.201", "10.99.0.202");
    run_ok(&[
        "ip",
        "-n",
        &sender_ns,
        "addr",
        "add",
        &format!("{sender_addr}/30"),
        "dev",
        &near,
    ]);
    run_ok(&[
        "ip",
        "-n",
        &target_ns,
        "addr",
        "add",
        &format!("{target_addr}/32"),
        "dev",
        &far,
    ]);
    let out = std::process::Command::new("ip")
        .args(["-n", &target_ns, "-br", "link", "show", &far])
        .output()
        .expect("ip link show");
    let text = String::from_utf8_lossy(&out.stdout);
    let mac = text
        .split_whitespace()
        .nth(2)
        .unwrap_or_else(|| panic!("no address in {text:?}"))
        .to_string();
    run_ok(&[
        "ip",
        "-n",
        &sender_ns,
        "neigh",
        "replace",
        target_addr,
        "lladdr",
        &mac,
        "dev",
        &near,
        "nud",
        "permanent",
    ]);
    run_ok(&["ip", "-n", &sender_ns, "link", "set", &near, "up"]);
    run_ok(&["ip", "-n", &target_ns, "link", "set", &far, "up"]);

    let sender = sender_argv(&format!("{target_addr}:{CLOSED_PORT}"), 1000.0, PROBES, 10.0, &[]);
    let mut args: Vec<String> = ["run", "--json", "--no-tui", "--"].map(String::from).to_vec();
    args.extend(in_netns(&sender_ns, &sender));
    let run = Proc::scanprof(&args).finish(patience(RUN_TIMEOUT));
    run.assert_success();
    let ctx = run.context();
    assert_eq!(u64_of(&run.sender_report(), "sent"), PROBES, "{ctx}");
    let target_netns = netns_inode(&target_ns);
    let reasons = kernel_has_drop_reasons();
    let s = run.summary();
    let at_target: Vec<_> = s
        .drops
        .iter()
        .filter(|d| d.netns == target_netns && is_closed_port_drop(d, reasons))
        .collect();
    eprintln!("a device that only receives: {at_target:?}");
    assert_eq!(
        at_target.iter().map(|d| d.count).sum::<u64>(),
        PROBES,
        "every probe a closed-port drop at the target: {:#?}\n{ctx}",
        s.drops
    );
    assert!(
        at_target
            .iter()
            .all(|d| d.device.as_deref() == Some(far.as_str())),
        "the drops at the target name its device {far}: {at_target:#?}\n{ctx}"
    );
    test.assert_released("the run to a device that only receives");
    // the veth pair goes with its namespaces
    namespaces.destroy();
}
