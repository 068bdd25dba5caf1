//! Drops recognised by address go to the process that sent the packet. A probe to a closed port
//! dies at the target with no socket left on it, so scanprof knows it by its address pair only;
//! that knowledge must follow the latest family process that sent to the address, not stay
//! with an earlier one that has exited (issue 20: two senders one after the other, all 8,000
//! NO_SOCKET drops went to the first pid).

mod common;

use std::time::Duration;

use common::*;
use scanprof::collect::DropClass;
use scanprof::netlab::{Lab, LabConfig};

const CLOSED_PORT: u16 = 9;
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
    let first = sh_join(&sender_argv(&to, 3000.0, 3000, 5.0, &[]));
    let second = sh_join(&sender_argv(&to, 5000.0, 5000, 5.0, &[]));
    let script = format!(
        "exec 1>&2; sh -c 'echo first=$$; exec {}'; sh -c 'echo second=$$; exec {}'",
        first.replace('\'', r"'\''"),
        second.replace('\'', r"'\''")
    );
    let argv = in_netns(&lab.sender_ns, &["sh".into(), "-c".into(), script]);
    let mut args: Vec<String> = ["run", "--json", "--duration", "30", "--"]
        .iter()
        .map(|s| s.to_string())
        .collect();
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
    let credited = |pid: u32| -> u64 {
        s.drops
            .iter()
            .filter(|d| d.netns == target_netns && d.reason == "NO_SOCKET" && d.pid == Some(pid))
            .inspect(|d| assert_eq!(d.class, DropClass::Expected, "{d:?}"))
            .map(|d| d.count)
            .sum()
    };
    let (a, b) = (credited(first_pid), credited(second_pid));
    eprintln!(
        "first sender (pid {first_pid}): {a} NO_SOCKET drops for 3000 sent; second (pid {second_pid}): {b} for 5000"
    );
    assert_eq!(a, 3000, "the first sender's drops: {:?}", s.drops);
    assert_eq!(b, 5000, "the second sender's drops: {:?}", s.drops);

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
