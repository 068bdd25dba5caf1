//! Unit tests of `thread_counters`: a raw kernel `sp_thread` record becomes `ThreadCounters`,
//! with the scheduling interval still open at the sample time added to the bucket its state
//! names, errno slots named and histograms decoded.

use super::*;
use crate::collect::hist::bucket_of;

/// Sample time, CLOCK_MONOTONIC ns.
const NOW: u64 = 5_000_000;
/// When the current scheduler state began: 3 ms before NOW.
const STATE_SINCE: u64 = 2_000_000;
/// When the current on-CPU segment began (a send entered after going on CPU): 1 ms before NOW.
const ONCPU_SINCE: u64 = 4_000_000;
/// SP_CALL_SENDTO of enum sp_send_call (wire.h); SP_CALL_NONE is 0.
const SP_CALL_SENDTO: u32 = 1;

/// The budget already closed by the kernel, distinct per bucket.
const CLOSED: TimeBudget = TimeBudget {
    send_ns: 1_000,
    blocked_send_ns: 2_000,
    sleep_ns: 3_000,
    preempted_ns: 4_000,
    other_ns: 5_000,
    wakeup_wait_ns: Some(1_500),
};

fn raw(state: sp_sched_state, send_call: u32) -> sp_thread {
    sp_thread {
        tgid: 100,
        tid: 101,
        sched_state: state.0,
        send_call,
        state_since_ns: STATE_SINCE,
        oncpu_since_ns: ONCPU_SINCE,
        oncpu_send_ns: CLOSED.send_ns,
        blocked_send_ns: CLOSED.blocked_send_ns,
        sleep_ns: CLOSED.sleep_ns,
        runq_ns: CLOSED.preempted_ns,
        wakeup_ns: 1_500,
        oncpu_other_ns: CLOSED.other_ns,
        ..Default::default()
    }
}

#[test]
fn running_inside_a_send_adds_the_on_cpu_segment_to_send() {
    let c = thread_counters(&raw(sp_sched_state::SP_ST_RUNNING, SP_CALL_SENDTO), NOW);
    assert_eq!(
        c.budget,
        TimeBudget {
            send_ns: 1_000 + 1_000_000,
            ..CLOSED
        }
    );
    assert!(!c.exited);
}

#[test]
fn running_outside_a_send_adds_the_on_cpu_segment_to_other() {
    let c = thread_counters(&raw(sp_sched_state::SP_ST_RUNNING, 0), NOW);
    assert_eq!(
        c.budget,
        TimeBudget {
            other_ns: 5_000 + 1_000_000,
            ..CLOSED
        }
    );
    assert!(!c.exited);
}

#[test]
fn runnable_adds_the_open_state_to_preempted() {
    let c = thread_counters(&raw(sp_sched_state::SP_ST_RUNNABLE, 0), NOW);
    assert_eq!(
        c.budget,
        TimeBudget {
            preempted_ns: 4_000 + 3_000_000,
            ..CLOSED
        }
    );
}

#[test]
fn woken_adds_the_open_state_to_preempted_and_to_its_wake_up_part() {
    let c = thread_counters(&raw(sp_sched_state::SP_ST_WOKEN, 0), NOW);
    assert_eq!(
        c.budget,
        TimeBudget {
            preempted_ns: 4_000 + 3_000_000,
            wakeup_wait_ns: Some(1_500 + 3_000_000),
            ..CLOSED
        }
    );
    // The wake-up part is inside preempted_ns, not added to the total again.
    assert_eq!(c.budget.total_ns(), CLOSED.total_ns() + 3_000_000);
}

#[test]
fn sleeping_adds_the_open_state_to_sleep() {
    let c = thread_counters(&raw(sp_sched_state::SP_ST_SLEEPING, 0), NOW);
    assert_eq!(
        c.budget,
        TimeBudget {
            sleep_ns: 3_000 + 3_000_000,
            ..CLOSED
        }
    );
}

#[test]
fn blocked_in_send_adds_the_open_state_to_blocked_send() {
    let c = thread_counters(&raw(sp_sched_state::SP_ST_BLOCKED_SEND, SP_CALL_SENDTO), NOW);
    assert_eq!(
        c.budget,
        TimeBudget {
            blocked_send_ns: 2_000 + 3_000_000,
            ..CLOSED
        }
    );
}

#[test]
fn exited_adds_nothing_and_is_marked() {
    let c = thread_counters(&raw(sp_sched_state::SP_ST_EXITED, 0), NOW);
    assert_eq!(c.budget, CLOSED);
    assert!(c.exited);
    // and the other states are not exits
    let running = thread_counters(&raw(sp_sched_state::SP_ST_RUNNING, 0), NOW);
    assert!(!running.exited);
}

#[test]
fn unknown_state_adds_nothing() {
    let c = thread_counters(&raw(sp_sched_state::SP_ST_UNKNOWN, 0), NOW);
    assert_eq!(c.budget, CLOSED);
    assert!(!c.exited);
}

#[test]
fn sample_time_before_the_state_began_adds_nothing() {
    // a record updated after the clock was read: no wrap-around into a huge interval
    let c = thread_counters(&raw(sp_sched_state::SP_ST_SLEEPING, 0), STATE_SINCE - 1);
    assert_eq!(c.budget, CLOSED);
}

#[test]
fn open_interval_total_covers_the_time_since_the_state_began() {
    // a thread seen first at STATE_SINCE with nothing closed yet: its budget at NOW is NOW - since
    let t = sp_thread {
        sched_state: sp_sched_state::SP_ST_RUNNABLE.0,
        state_since_ns: STATE_SINCE,
        oncpu_since_ns: STATE_SINCE,
        ..Default::default()
    };
    assert_eq!(thread_counters(&t, NOW).budget.total_ns(), NOW - STATE_SINCE);
}

#[test]
fn errno_slots_map_to_names() {
    let mut t = raw(sp_sched_state::SP_ST_RUNNING, 0);
    t.errors[105] = 3;
    t.errors[11] = 2;
    t.errors[0] = 1;
    let c = thread_counters(&t, NOW);
    let errors: Vec<(&str, u64)> = c.errors.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    assert_eq!(errors, [("EAGAIN", 2), ("ENOBUFS", 3), ("E_OTHER", 1)]);
    assert_eq!(errno_name(105), "ENOBUFS");
    assert_eq!(errno_name(11), "EAGAIN");
    assert_eq!(errno_name(0), "E_OTHER");
    assert_eq!(errno_name(1), "EPERM");
}

#[test]
fn histograms_decode_and_counters_map_to_their_fields() {
    let mut t = raw(sp_sched_state::SP_ST_RUNNING, 0);
    t.latency[bucket_of(1000)] = 3; // [960, 1024)
    t.gap[bucket_of(2000)] = 4; // [1920, 2048)
    t.gap[bucket_of(5)] = 1; // [5, 6)
    t.calls = 10;
    t.packets = 17;
    t.bytes = 1020;
    t.failed_calls = 2;
    t.gap_sum_ns = 8005;
    t.gap_count = 5;
    t.first_send_ns = 111;
    t.last_send_ns = 333; // the previous send call's entry, for gaps: not a packet time
    t.last_pkt_ns = 222;
    t.ipc_calls = 6;
    t.ipc_bytes = 600;
    (t.recv_calls, t.recv_failed_calls, t.recv_packets, t.recv_bytes) = (40, 8, 96, 9_600);
    (t.recv_stream_calls, t.recv_stream_bytes) = (3, 4_096);
    (t.connect_calls, t.connect_syns, t.connect_answered) = (9, 7, 2);
    let c = thread_counters(&t, NOW);
    assert_eq!(c.latency.nonzero_buckets().collect::<Vec<_>>(), [(960, 1024, 3)]);
    assert_eq!(
        c.gap.nonzero_buckets().collect::<Vec<_>>(),
        [(5, 6, 1), (1920, 2048, 4)]
    );
    assert_eq!((c.pid, c.tid), (100, 101));
    assert_eq!((c.calls, c.packets, c.bytes, c.failed_calls), (10, 17, 1020, 2));
    assert_eq!((c.gap_sum_ns, c.gap_count), (8005, 5));
    assert_eq!((c.first_send_ns, c.last_send_ns), (111, 222));
    assert_eq!((c.ipc_calls, c.ipc_bytes), (6, 600));
    let r = c.recv;
    assert_eq!((r.calls, r.failed_calls, r.packets, r.bytes), (40, 8, 96, 9_600));
    assert_eq!((r.stream_calls, r.stream_bytes), (3, 4_096));
    assert!(r.any());
    let k = c.connect;
    assert_eq!((k.calls, k.syns, k.answered), (9, 7, 2));
}

#[test]
fn drop_class_names_are_the_json_names() {
    use crate::collect::DropClass;
    for c in [
        DropClass::TargetLoss,
        DropClass::Expected,
        DropClass::ReplyLoss,
        DropClass::Unrelated,
    ] {
        assert_eq!(serde_json::to_value(c).unwrap(), c.name());
    }
}

#[test]
fn the_send_window_budget_is_the_difference_of_the_two_snapshots() {
    let snapshot = |base: u64| sp_budget {
        send_ns: base + 1,
        other_ns: base + 2,
        blocked_send_ns: base + 3,
        sleep_ns: base + 4,
        runq_ns: base + 5,
        wakeup_ns: base + 6,
    };
    let mut t = raw(sp_sched_state::SP_ST_SLEEPING, 0);
    t.at_first_send = snapshot(100);
    t.at_last_send = snapshot(100);
    t.at_last_send.send_ns += 10;
    t.at_last_send.other_ns += 20;
    t.at_last_send.blocked_send_ns += 30;
    t.at_last_send.sleep_ns += 40;
    t.at_last_send.runq_ns += 50;
    t.at_last_send.wakeup_ns += 45;
    // Before its first packet a thread has no send window.
    assert_eq!(thread_counters(&t, NOW).window_budget, None);
    t.packets = 7;
    assert_eq!(
        thread_counters(&t, NOW).window_budget,
        Some(TimeBudget {
            send_ns: 10,
            other_ns: 20,
            blocked_send_ns: 30,
            sleep_ns: 40,
            preempted_ns: 50,
            wakeup_wait_ns: Some(45),
        })
    );
}
