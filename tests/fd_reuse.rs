//! The send path resolves a thread's fd to its socket once and keeps it while the family's fds
//! stay the same (probes/send_path.bpf.c, `fd_gen`). A sender that closes a socket and gets the
//! same fd number for a new one, or that dup2s another socket over it, must have its packets
//! counted on the new socket at every stage: a stale cache would leave the new socket
//! unregistered, and its packets would be nobody's after the syscall.

use crate::common;

use std::time::Duration;

use common::*;
use scanprof::analysis::Summary;
use scanprof::netlab::UdpSink;

const PORT: u16 = 9000;
const RUN_TIMEOUT: Duration = Duration::from_secs(60);
/// Datagrams per phase (three phases: first socket, a new socket on its fd, a dup2 over it).
const PER_PHASE: u64 = 2000;

/// One fd number, three sockets. The first socket's file stays open under another fd (so its
/// `struct sock` cannot be freed and handed to the next socket: the stale pointer would then
/// happen to be right). Prints the fd of each phase and the counts as JSON.
const ONE_FD_THREE_SOCKETS: &str = r#"
import json, os, socket, sys, time
dst, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def burst(sock):
    for i in range(n):
        sock.sendto(b"x" * 64, (dst, port))
        if i % 200 == 199:
            time.sleep(0.01)
a = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
fd = a.fileno()
keep_a = os.dup(fd)
burst(a)
a.close()
b = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
assert b.fileno() == fd, (b.fileno(), fd)
burst(b)
c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
os.dup2(c.fileno(), fd)
burst(b)
print(json.dumps({"sent": 3 * n, "fd": fd}))
"#;

fn count(s: &Summary, stage: &str) -> u64 {
    *s.stage_counts
        .get(stage)
        .unwrap_or_else(|| panic!("no {stage} in {:?}", s.stage_counts))
}

fn stop(sink: UdpSink) -> u64 {
    stop_sink(sink).packets
}

#[test]
fn a_socket_new_on_a_reused_fd_is_counted_at_every_stage() {
    let test = privileged();
    let lab = TestLab::new(None);
    let sink = lab.sink(PORT);

    let sender: Vec<String> = [
        "python3",
        "-c",
        ONE_FD_THREE_SOCKETS,
        &lab.lab.target_addr.to_string(),
        &PORT.to_string(),
        &PER_PHASE.to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut args: Vec<String> = ["run", "--json", "--duration", "50", "--"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.extend(in_netns(&lab.lab.sender_ns, &sender));
    let run = Proc::scanprof(&args).finish(RUN_TIMEOUT);
    let received = stop(sink);
    run.assert_success();
    assert_all_probes_attached(&run.started());

    let s = run.summary();
    eprintln!(
        "one fd, three sockets: stages {:?}; receiver {received}",
        s.stage_counts
    );
    let sent = 3 * PER_PHASE;
    assert_eq!(
        received, sent,
        "the receiver's count: the fixture did not run whole"
    );
    // Launched: registered before its first send, so every count is exact.
    assert_eq!(count(&s, "syscall_packets"), sent, "{:?}", s.stage_counts);
    assert_eq!(count(&s, "dev_queue"), sent, "{:?}", s.stage_counts);
    assert_eq!(count(&s, "dev_xmit"), sent, "{:?}", s.stage_counts);

    drop(run);
    test.assert_released("scanprof run");
    lab.destroy();
}
