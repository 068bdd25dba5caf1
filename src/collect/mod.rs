//! Turns the probes' raw maps and records into typed, cumulative counters once per tick
//! (`CounterSample`): thread counters with their time budget accounted up to the sample time,
//! drops with reason names and symbolized locations, device stages, blocking sites, health.
//! The analysis computes rates from successive samples; nothing here divides by time.

pub mod bpf_time;
pub mod device_window;
pub mod family;
pub mod headers;
pub mod hist;
pub mod output;
pub mod replies;
pub mod rings;
pub mod status_file;
pub mod symbols;
pub mod udp_refused;
pub mod uprobes;

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use crate::probes::{
    self, sp_budget, sp_drop_class, sp_event, sp_event_kind, sp_health, sp_sched_state, sp_thread, ProbeSet,
};
use family::{ProcessInfo, ProcessTable};
use hist::Histogram;
use symbols::{wait_site, KernelSymbols};

/// Where a dropped packet belonged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DropClass {
    /// the target's own outgoing packet died
    TargetLoss,
    /// normal for a scan: a probe or its reply met no socket (closed port)
    Expected,
    /// a reply to the target died for another reason
    ReplyLoss,
    /// expected reply-side traffic the target did not send: the kernel's own replies (TCP RST,
    /// ICMP error) to the target's peers, replies purged unread when a target socket closed
    ReplySide,
    /// somebody else's packet
    Unrelated,
}

impl DropClass {
    /// Every class, in the order the drop tables show them.
    pub const ALL: [DropClass; 5] = [
        DropClass::TargetLoss,
        DropClass::Expected,
        DropClass::ReplyLoss,
        DropClass::ReplySide,
        DropClass::Unrelated,
    ];

    /// The class as the JSON output names it (`target_loss`, `expected`, ...).
    pub fn name(self) -> &'static str {
        match self {
            DropClass::TargetLoss => "target_loss",
            DropClass::Expected => "expected",
            DropClass::ReplyLoss => "reply_loss",
            DropClass::ReplySide => "reply_side",
            DropClass::Unrelated => "unrelated",
        }
    }

    fn from_wire(v: u32) -> DropClass {
        match sp_drop_class(v) {
            sp_drop_class::SP_CLASS_TARGET_LOSS => DropClass::TargetLoss,
            sp_drop_class::SP_CLASS_EXPECTED => DropClass::Expected,
            sp_drop_class::SP_CLASS_REPLY_LOSS => DropClass::ReplyLoss,
            sp_drop_class::SP_CLASS_REPLY_SIDE => DropClass::ReplySide,
            _ => DropClass::Unrelated,
        }
    }
}

/// A thread's time, cumulative, ns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct TimeBudget {
    /// on CPU inside send syscalls
    pub send_ns: u64,
    /// off CPU of its own accord inside send syscalls (waiting for buffer space, a lock...)
    pub blocked_send_ns: u64,
    /// off CPU of its own accord elsewhere (nanosleep, poll...)
    pub sleep_ns: u64,
    /// runnable but not running: preempted, or woken and waiting for a CPU
    pub preempted_ns: u64,
    /// on CPU outside send syscalls: user code, pacing loops, other syscalls
    pub other_ns: u64,
    /// the part of `preempted_ns` spent waiting for a CPU right after a wake-up (from a sleep or
    /// a blocked send), not after being preempted; not added again in `total_ns`. None where it
    /// was not measured (bundles recorded before it existed)
    #[serde(default)]
    pub wakeup_wait_ns: Option<u64>,
}

impl TimeBudget {
    pub fn total_ns(&self) -> u64 {
        self.send_ns + self.blocked_send_ns + self.sleep_ns + self.preempted_ns + self.other_ns
    }

    pub fn saturating_sub(&self, o: &TimeBudget) -> TimeBudget {
        TimeBudget {
            send_ns: self.send_ns.saturating_sub(o.send_ns),
            blocked_send_ns: self.blocked_send_ns.saturating_sub(o.blocked_send_ns),
            sleep_ns: self.sleep_ns.saturating_sub(o.sleep_ns),
            preempted_ns: self.preempted_ns.saturating_sub(o.preempted_ns),
            other_ns: self.other_ns.saturating_sub(o.other_ns),
            wakeup_wait_ns: match (self.wakeup_wait_ns, o.wakeup_wait_ns) {
                (Some(a), Some(b)) => Some(a.saturating_sub(b)),
                (a, _) => a,
            },
        }
    }

    pub fn add(&mut self, o: &TimeBudget) {
        self.send_ns += o.send_ns;
        self.blocked_send_ns += o.blocked_send_ns;
        self.sleep_ns += o.sleep_ns;
        self.preempted_ns += o.preempted_ns;
        self.other_ns += o.other_ns;
        self.wakeup_wait_ns = match (self.wakeup_wait_ns, o.wakeup_wait_ns) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
    }
}

/// One thread's cumulative counters.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ThreadCounters {
    pub tid: u32,
    pub pid: u32,
    pub exited: bool,
    /// send syscalls on network sockets
    pub calls: u64,
    pub packets: u64,
    pub bytes: u64,
    pub failed_calls: u64,
    /// failed sends by errno name
    pub errors: BTreeMap<String, u64>,
    /// send syscall duration, ns
    pub latency: Histogram,
    /// time between consecutive send entries, ns
    pub gap: Histogram,
    pub gap_sum_ns: u64,
    pub gap_count: u64,
    /// CLOCK_MONOTONIC ns of the first packet send's entry, 0 if none yet
    pub first_send_ns: u64,
    /// CLOCK_MONOTONIC ns of the latest packet send's entry
    pub last_send_ns: u64,
    /// send syscalls on unix sockets
    pub ipc_calls: u64,
    pub ipc_bytes: u64,
    /// receive syscalls on network sockets (absent in bundles older than them)
    #[serde(default)]
    pub recv: RecvCounters,
    /// packets read by class of length (`--recv-classes`), in class order; empty when packets
    /// are not classed (and in bundles older than it)
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recv_classes: Vec<RecvClassCounters>,
    /// connect(2) calls on TCP sockets, also counted in calls, packets (their SYNs) and
    /// failed_calls (absent in bundles older than them)
    #[serde(default)]
    pub connect: ConnectCounters,
    pub budget: TimeBudget,
    /// the budget over the thread's own send window, from the entry of its first call that sent
    /// packets to the exit of its latest; None before it sent (and in bundles older than it)
    #[serde(default)]
    pub window_budget: Option<TimeBudget>,
    /// the send this thread is blocked in at the sample, if it is (its time so far is in the
    /// budget's blocked_send_ns and in its block site's blocked_ns)
    #[serde(default)]
    pub blocked_now: Option<BlockedNow>,
    /// its CPU time as the kernel accounts it (/proc/PID/task/TID/schedstat and stat), read
    /// with each sample for threads that call receive syscalls; None for the others, when
    /// unreadable, and in bundles older than it
    #[serde(default)]
    pub cpu: Option<ThreadCpuTime>,
}

/// A thread's CPU time as the kernel accounts it, cumulative, ns: its exact run time, and the
/// split into user and system (`utime`, `stime`: the run time divided by where the scheduler
/// tick found the thread, so in steps of one clock tick, 10 ms at USER_HZ 100).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadCpuTime {
    /// on CPU (the scheduler's `sum_exec_runtime`, /proc/PID/task/TID/schedstat; what the
    /// thread's CLOCK_THREAD_CPUTIME_ID reads), ns; None without CONFIG_SCHED_INFO
    #[serde(default)]
    pub oncpu_ns: Option<u64>,
    /// in user mode, ns
    pub user_ns: u64,
    /// in the kernel on its behalf (syscalls, and the softirq work run in them), ns
    pub system_ns: u64,
}

impl ThreadCpuTime {
    pub fn saturating_sub(&self, o: &ThreadCpuTime) -> ThreadCpuTime {
        ThreadCpuTime {
            oncpu_ns: match (self.oncpu_ns, o.oncpu_ns) {
                (Some(a), Some(b)) => Some(a.saturating_sub(b)),
                _ => None,
            },
            user_ns: self.user_ns.saturating_sub(o.user_ns),
            system_ns: self.system_ns.saturating_sub(o.system_ns),
        }
    }
}

/// A thread's CPU time now, from /proc/PID/task/TID/stat and schedstat; None once it is gone.
fn read_thread_cpu(pid: u32, tid: u32) -> Option<ThreadCpuTime> {
    let task = procfs::process::Process::new(pid as i32)
        .ok()?
        .task_from_tid(tid as i32)
        .ok()?;
    let st = task.stat().ok()?;
    let ns = |ticks: u64| ticks * 1_000_000_000 / procfs::ticks_per_second().max(1);
    Some(ThreadCpuTime {
        oncpu_ns: task.schedstat().ok().map(|s| s.sum_exec_runtime),
        user_ns: ns(st.utime),
        system_ns: ns(st.stime),
    })
}

/// A send blocked at the moment of the sample: a block in progress, seen before it ends.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BlockedNow {
    /// CLOCK_MONOTONIC ns when the thread blocked
    pub since_ns: u64,
    /// innermost kernel function below the scheduler of the stack it blocked at
    pub wait_site: String,
}

/// One thread's receive syscalls on network sockets (recvfrom, recvmsg, recvmmsg, read),
/// cumulative. Packet-socket rings are read without syscalls and are not counted here.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecvCounters {
    /// receive calls on datagram and packet sockets, failed ones (EAGAIN...) included
    pub calls: u64,
    pub failed_calls: u64,
    /// messages those calls read: one per successful call, recvmmsg's count
    pub packets: u64,
    /// bytes of those messages
    pub bytes: u64,
    /// receive calls on stream sockets (TCP), failed ones included: bytes, not packets
    pub stream_calls: u64,
    pub stream_bytes: u64,
}

impl RecvCounters {
    /// Whether the thread ever called a receive on a network socket.
    pub fn any(&self) -> bool {
        self.calls + self.stream_calls > 0
    }

    pub fn add(&mut self, o: &RecvCounters) {
        self.calls += o.calls;
        self.failed_calls += o.failed_calls;
        self.packets += o.packets;
        self.bytes += o.bytes;
        self.stream_calls += o.stream_calls;
        self.stream_bytes += o.stream_bytes;
    }
}

/// One class of the packets a thread read (by length, `--recv-classes`), cumulative: the
/// messages of that class read by single-message receive calls (recvfrom, recvmsg, read; a
/// recvmmsg batch is not classed), and the thread's on-CPU time from each such read's return to
/// its next receive call: the time handling the packet took.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecvClassCounters {
    pub packets: u64,
    /// bytes of those messages
    pub bytes: u64,
    /// on CPU after reading them until the next receive call, ns
    pub oncpu_ns: u64,
}

impl RecvClassCounters {
    pub fn saturating_sub(&self, o: &RecvClassCounters) -> RecvClassCounters {
        RecvClassCounters {
            packets: self.packets.saturating_sub(o.packets),
            bytes: self.bytes.saturating_sub(o.bytes),
            oncpu_ns: self.oncpu_ns.saturating_sub(o.oncpu_ns),
        }
    }
}

/// One thread's connect(2) calls on TCP sockets, cumulative: a connect scanner's packets. Each
/// is also a send call; its SYN is a packet; a call that failed before its SYN (EADDRNOTAVAIL,
/// ENETUNREACH...) is a failed call with its errno in `errors`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnectCounters {
    /// connection attempts: connect calls on TCP sockets, failed ones included
    pub calls: u64,
    /// attempts whose SYN went out: returned 0, EINPROGRESS or an answer to the SYN
    pub syns: u64,
    /// of those, calls that returned the answer: ECONNREFUSED (the port's RST), ETIMEDOUT or
    /// EHOSTUNREACH; normal outcomes for a scan, not failures
    pub answered: u64,
}

impl ConnectCounters {
    pub fn add(&mut self, o: &ConnectCounters) {
        self.calls += o.calls;
        self.syns += o.syns;
        self.answered += o.answered;
    }

    /// The counts since `o`, an earlier sample of the same counters.
    pub fn since(&self, o: &ConnectCounters) -> ConnectCounters {
        ConnectCounters {
            calls: self.calls.saturating_sub(o.calls),
            syns: self.syns.saturating_sub(o.syns),
            answered: self.answered.saturating_sub(o.answered),
        }
    }
}

/// Drops counted at one (reason, location, device, class, process).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DropCount {
    pub reason: String,
    /// `function+0xoffset` where the kernel freed the packet
    pub location: String,
    pub device: Option<String>,
    pub ifindex: u32,
    /// network namespace inode, 0 if unknown
    pub netns: u32,
    pub class: DropClass,
    /// attributed family process
    pub pid: Option<u32>,
    pub count: u64,
}

/// The family's packets through its send syscalls by process, cumulative, as of now: its
/// threads' records and the exited threads already retired (as `sample` counts them).
fn family_packets(probes: &ProbeSet, retired: &[ThreadCounters]) -> device_window::FamilyPackets {
    let mut by_pid = packets_by_pid(retired);
    for t in probes.threads() {
        *by_pid.entry(t.tgid).or_default() += t.packets;
    }
    by_pid
}

/// The family's packets through its send syscalls by process, from its threads' counters.
fn packets_by_pid(threads: &[ThreadCounters]) -> device_window::FamilyPackets {
    let mut by_pid = device_window::FamilyPackets::new();
    for t in threads {
        *by_pid.entry(t.pid).or_default() += t.packets;
    }
    by_pid
}

/// One device's stage counters, for the target's packets or everyone's.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DeviceCounters {
    pub device: String,
    pub ifindex: u32,
    pub netns: u32,
    /// family process whose packets these are; None = all traffic on the device
    pub pid: Option<u32>,
    pub queued: u64,
    pub enqueued: u64,
    pub dequeued: u64,
    pub xmit_ok: u64,
    pub xmit_busy: u64,
    pub xmit_err: u64,
    pub xmit_bytes: u64,
    pub neigh_started: u64,
    pub neigh_queued: u64,
    pub neigh_resolved: u64,
    pub neigh_failed: u64,
    /// kind of the device's root qdisc when the probes first saw the device ("tbf",
    /// "pfifo_fast", "noqueue"...); None when not read (bundles recorded before it existed)
    #[serde(default)]
    pub qdisc: Option<String>,
}

/// Deepest a device's qdisc got during the tick.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueueDepth {
    pub device: String,
    pub netns: u32,
    /// packets
    pub qlen_max: u64,
    /// bytes
    pub backlog_max: u64,
}

/// Time one process spent blocked in send syscalls at one kernel stack, cumulative.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BlockSite {
    pub pid: u32,
    /// innermost kernel function below the scheduler, e.g. `sock_alloc_send_pskb`
    pub wait_site: String,
    /// symbolized kernel stack, innermost first
    pub stack: Vec<String>,
    /// time blocked here, ns, the blocks still in progress at the sample included
    pub blocked_ns: u64,
    /// blocking episodes that ended
    pub episodes: u64,
    /// blocks in progress at the sample (their time so far is in blocked_ns)
    #[serde(default)]
    pub in_progress: u64,
}

/// The probes' own health: lost records and full maps, cumulative.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Health {
    /// ring-buffer records lost because the buffer was full
    pub lost_events: u64,
    /// drops not counted because the drop table was full
    pub drops_uncounted: u64,
    pub devices_uncounted: u64,
    pub threads_untracked: u64,
    pub block_sites_uncounted: u64,
    /// tracepoint hits that did work for scanprof
    pub probe_hits: u64,
    /// runs of the drop program (kfree_skb)
    #[serde(default)]
    pub drop_runs: u64,
    /// at least this many kfree_skb hits (perf's count of the tracepoint, since scanprof opened
    /// it) were never given to the drop program: drops missing from the drop rows. None when
    /// perf could not count the tracepoint (and in bundles older than the field)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drops_undelivered: Option<u64>,
    /// the tracepoint's hits perf counted, over the same span as `drops_undelivered`
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drop_hits: Option<u64>,
    /// socket-less drops on the family's path, to one of its destinations, that matched no
    /// packet it sent: in the unrelated rows (another sender's, or the family's own whose
    /// net_dev_start_xmit run the kernel did not deliver)
    #[serde(default)]
    pub unmatched_on_path: u64,
    /// runs of scanprof's programs the kernel skipped since attach (their `recursion_misses`:
    /// the hook fired while a BPF program was already running on that CPU), summed; by program
    /// in `CounterSample::skipped_runs`. None when the kernel does not count them (before 5.12;
    /// and in bundles older than the field)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped_runs: Option<u64>,
    /// context switches of family threads that no program was given, found afterwards (a
    /// thread running while its record said it was off the CPU, or the reverse)
    #[serde(default)]
    pub missed_switches: u64,
    /// the threads' time those switches left unplaced, ns: in no state of the time budgets,
    /// which are short of their span by this much at most (summed over threads)
    #[serde(default)]
    pub unplaced_ns: u64,
}

impl Health {
    /// What the counts leave out because the kernel did not run a program (the drop program's
    /// missing kfree_skb hits; any program's skipped runs, by program in `skipped`), or because
    /// a packet could not be told the family's: one line each, when there is any.
    pub fn delivery_warnings(&self, skipped: &[SkippedRuns]) -> Vec<String> {
        let mut out = Vec::new();
        if let (Some(n), Some(hits)) = (self.drops_undelivered, self.drop_hits) {
            if n > 0 {
                out.push(format!(
                    "at least {n} kernel drops are missing from the drop rows: perf counted {hits} \
                     hits of the kfree_skb tracepoint, and the kernel ran scanprof's drop program \
                     for {} of them",
                    hits.saturating_sub(n)
                ));
            }
        }
        if let Some(n @ 1..) = self.skipped_runs {
            out.push(format!(
                "the kernel skipped {n} runs of scanprof's programs (their recursion_misses: the \
                 hook fired while a BPF program was already running on that CPU): what those runs \
                 would have counted is missing ({})",
                skipped_list(skipped)
            ));
        }
        if self.missed_switches > 0 {
            out.push(format!(
                "the kernel gave scanprof no event for {} context switches of the family's \
                 threads: {:.1} ms of their time is in no state of the time budget (it was \
                 partly on and partly off the CPU, in a split nobody saw)",
                self.missed_switches,
                self.unplaced_ns as f64 / 1e6
            ));
        }
        if self.unmatched_on_path > 0 {
            out.push(format!(
                "{} socket-less drops on the family's path, to its destinations, matched no packet \
                 it sent and are counted as unrelated: another sender's packets, or the family's \
                 own whose net_dev_start_xmit run the kernel skipped (so they were never marked)",
                self.unmatched_on_path
            ));
        }
        out
    }

    /// What the run misses because a map filled, one line per full map, each naming the flag
    /// that raises it. `capacity` gives a map's entries (None if unknown).
    pub fn full_map_warnings(&self, capacity: impl Fn(&str) -> Option<u32>) -> Vec<String> {
        // (count, map, what was missed, whether --map-size can raise it: the drop and device
        // tables are slots of arrays sized by constants of probes/drops.bpf.c and netdev.bpf.c)
        [
            (
                self.threads_untracked,
                "threads",
                "family threads were not tracked",
                true,
            ),
            (self.drops_uncounted, "drops", "drops were not counted", false),
            (
                self.devices_uncounted,
                "devs",
                "device stage events were not counted",
                false,
            ),
            (
                self.block_sites_uncounted,
                "block_sites",
                "blocking episodes were not counted",
                true,
            ),
        ]
        .into_iter()
        .filter(|(n, _, _, _)| *n > 0)
        .map(|(n, map, what, flag)| match (capacity(map), flag) {
            (Some(cap), true) => format!(
                "{n} {what}: the {map} map ({cap} entries) was full; raise it with --map-size {map}={}",
                cap.saturating_mul(4).min(probes::MAX_MAP_ENTRIES)
            ),
            (None, true) => {
                format!("{n} {what}: the {map} map was full; raise it with --map-size {map}=ENTRIES")
            }
            (Some(cap), false) => {
                format!("{n} {what}: the {map} table ({cap} rows, a constant of the probes) was full")
            }
            (None, false) => format!("{n} {what}: the {map} table was full"),
        })
        .collect()
    }
}

/// Runs of one of scanprof's programs that the kernel skipped since attach.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkippedRuns {
    /// object.program, e.g. `send_path.on_sys_exit` (as the probes' status names it)
    pub program: String,
    pub runs: u64,
}

/// "send_path.on_sys_exit 12, drops.on_kfree_skb 3": the programs with the most skipped runs
/// first, at most four, and how many more.
fn skipped_list(skipped: &[SkippedRuns]) -> String {
    let mut by_runs: Vec<&SkippedRuns> = skipped.iter().collect();
    by_runs.sort_by(|a, b| b.runs.cmp(&a.runs).then_with(|| a.program.cmp(&b.program)));
    let mut parts: Vec<String> = by_runs
        .iter()
        .take(4)
        .map(|s| format!("{} {}", s.program, s.runs))
        .collect();
    if by_runs.len() > 4 {
        parts.push(format!("{} more programs", by_runs.len() - 4));
    }
    parts.join(", ")
}

/// Everything the probes counted, as of one instant. Counters are cumulative since attach.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CounterSample {
    /// CLOCK_MONOTONIC ns when the sample was taken
    pub t_ns: u64,
    pub processes: Vec<ProcessInfo>,
    pub threads: Vec<ThreadCounters>,
    pub drops: Vec<DropCount>,
    pub devices: Vec<DeviceCounters>,
    pub queues: Vec<QueueDepth>,
    pub block_sites: Vec<BlockSite>,
    pub health: Health,
    /// CPU time scanprof itself has used (user + system, all threads), ns
    pub self_cpu_ns: u64,
    /// blocking episodes inside send (at least the probes' threshold, 1 ms) that ended since the
    /// previous sample; unlike the counters, not cumulative
    pub episodes: Vec<BlockEpisode>,
    /// calls of the scanner profile's rare uprobes since the previous sample (not cumulative)
    #[serde(default)]
    pub calls: Vec<uprobes::ProbeCall>,
    /// the profile's probes and their cumulative hits
    #[serde(default)]
    pub uprobes: Vec<uprobes::UprobeState>,
    /// scanprof's own BPF programs' run time (kernel run-time statistics), cumulative; None when
    /// the statistics were never on (turned off, refused, or a bundle recorded before them)
    #[serde(default)]
    pub bpf: Option<bpf_time::BpfRunTime>,
    /// the receive sysctls (rmem_max, rmem_default, netdev_max_backlog) at the sample, read when
    /// the family receives or replies to it were dropped (all None otherwise, and in bundles
    /// older than them)
    #[serde(default)]
    pub tunables: crate::system::machine::ReceiveTunables,
    /// whether a drop at one of the family's sockets is attributed to it whatever its source
    /// (the drop program sees the receiving socket: kfree_skb's rx_sk, kernels >= 6.8); true in
    /// bundles older than the field
    #[serde(default = "yes")]
    pub socket_drops_seen: bool,
    /// the lengths, bytes, at which packets read fall into the next class (`--recv-classes`);
    /// empty when packets read are not classed
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recv_class_bounds: Vec<u32>,
    /// the CPU quotas of the cgroups the family's live processes are in (their own or an
    /// ancestor's), with their throttling counters, cumulative; empty when none has a quota
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cgroups: Vec<crate::system::cpu_limits::CgroupCpu>,
    /// hypervisor steal time on the CPUs the family may run on, cumulative since boot
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steal: Option<crate::system::cpu_limits::CpuSteal>,
    /// the conntrack tables of the family's network namespaces that hold entries
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conntrack: Vec<crate::system::conntrack::ConntrackTable>,
    /// the family's packet sockets (AF_PACKET, with a TPACKET ring or not) seen since attach,
    /// with the frames the kernel queued to each and dropped at it, cumulative
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub packet_rings: Vec<rings::PacketRing>,
    /// packets that arrived from the family's destinations since attach, by kind (the reply
    /// counter); None when it is not attached (and in bundles older than it)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replies: Option<replies::ReplyCounts>,
    /// datagrams the family's UDP sockets refused since attach, counted where the kernel refuses
    /// them (udp:udp_fail_queue_rcv_skb), per process, namespace and kind; None when that
    /// program is not attached (and in bundles older than it)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp_refused: Option<Vec<udp_refused::UdpRefused>>,
    /// SYNs the kernel retransmitted (sent) for the family's connecting TCP sockets since attach:
    /// the TCP timer's, for connects not answered in time, never a call of the family
    /// (tcp:tcp_retransmit_skb); None when that program is not attached (and in bundles older
    /// than it)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub syn_retransmits: Option<u64>,
    /// with `--device-stages sampled`: what share of the time the device-stage programs were
    /// attached; the device rows' stage counters are then estimates (device_window.rs). None
    /// when they are exact (and in bundles older than the field)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_sampling: Option<device_window::DeviceSampling>,
    /// the programs whose runs the kernel skipped since attach, and how many
    /// (`Health::skipped_runs` is their sum); empty when none were (and in older bundles)
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped_runs: Vec<SkippedRuns>,
}

fn yes() -> bool {
    true
}

/// `Collector::receive_warning` for a kernel whose kfree_skb names the receiving socket or not
/// (`rx_sk`), once sample `s` shows the family receiving.
fn receive_warning(rx_sk: bool, s: &CounterSample) -> Option<String> {
    if rx_sk || !s.threads.iter().any(|t| t.recv.any()) {
        return None;
    }
    Some(match s.udp_refused {
        Some(_) => "the family receives, and this kernel's kfree_skb does not name the receiving socket (rx_sk, kernels before 6.8): IPv4 datagrams dropped at its UDP sockets are counted where the socket refuses them (udp:udp_fail_queue_rcv_skb), but drops at its other sockets (raw, TCP) and of IPv6 datagrams count in recv_drops only for replies to addresses it sent to; kernel 6.8 or newer attributes them all".to_string(),
        None => "the family receives, but its listener loss cannot be seen on this kernel: kfree_skb does not name the receiving socket (rx_sk, kernels before 6.8) and udp:udp_fail_queue_rcv_skb is not attached (see doctor), so drops at its sockets (SOCKET_RCVBUFF...) count in recv_drops only for replies to addresses it sent to; kernel 6.8 or newer attributes them all".to_string(),
    })
}

/// One stretch of time a family thread spent blocked inside a send syscall.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BlockEpisode {
    pub pid: u32,
    pub tid: u32,
    /// CLOCK_MONOTONIC ns when it blocked
    pub start_ns: u64,
    pub duration_ns: u64,
    /// innermost kernel function below the scheduler
    pub wait_site: String,
}

/// CPU time this process has used so far (user + system), ns; 0 if /proc cannot tell.
fn own_cpu_ns() -> u64 {
    procfs::process::Process::myself()
        .and_then(|p| p.stat())
        .map(|st| (st.utime + st.stime) * 1_000_000_000 / procfs::ticks_per_second().max(1))
        .unwrap_or(0)
}

/// Records from the probes that matter beyond counting.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum FamilyEvent {
    Forked {
        pid: u32,
        ppid: u32,
        comm: String,
        /// CLOCK_MONOTONIC of the fork
        ts_ns: u64,
    },
    Execed {
        pid: u32,
        comm: String,
        path: String,
        /// its command line, read from /proc/PID/cmdline when the record is read (None: it had
        /// exited by then); a later exec of the same process brings its own record
        argv: Option<Vec<String>>,
    },
    Exited {
        pid: u32,
        exit_code: i32,
        /// CLOCK_MONOTONIC of the exit
        ts_ns: u64,
    },
    /// a thread blocked inside send for at least the threshold
    Blocked {
        pid: u32,
        tid: u32,
        start_ns: u64,
        duration_ns: u64,
        stack_id: i32,
    },
}

/// Owns the probes and what is needed to name their numbers.
pub struct Collector {
    probes: ProbeSet,
    pub family: ProcessTable,
    symbols: KernelSymbols,
    reasons: BTreeMap<u32, String>,
    /// final counters of threads that exited (their map entries are deleted)
    retired: Vec<ThreadCounters>,
    /// blocking episodes streamed since the last sample
    episodes: Vec<BlockEpisode>,
    /// the scanner profile's uprobes, when a profile with probes applies
    scanner: Option<uprobes::ScannerProbes>,
    /// CLOCK_MONOTONIC at attach: where the run's seconds count from
    start_ns: u64,
    /// entries of each map, by name, once asked for
    map_sizes: std::cell::OnceCell<BTreeMap<String, u32>>,
    /// when the kernel's BPF run-time statistics are on, and their sums
    bpf: bpf_time::BpfMeter,
    /// headers of the family's dropped packets streamed so far (at most headers::MAX_HEADERS),
    /// in a private file: memory stays flat however long the family drops
    drop_pkts: headers::HeaderSpool,
    /// CLOCK_REALTIME minus CLOCK_MONOTONIC at attach, ns
    wall_offset_ns: i128,
    /// the drop program sees the receiving socket (`rx_sk` of kfree_skb, kernels >= 6.8)
    rx_sk: bool,
    /// the latest user/system CPU time read for each receiving thread (kept for its exit, when
    /// /proc no longer has it)
    thread_cpu: HashMap<u32, ThreadCpuTime>,
    /// where the cgroup hierarchies with the cpu controller are mounted, read once
    cgroup_mounts: std::cell::OnceCell<crate::system::cpu_limits::CgroupMounts>,
    /// the family's cgroups seen so far, read for their quota each sample
    quotas: crate::system::cpu_limits::QuotaWatch,
    /// the family's packet sockets seen so far, with their counts across clears
    rings: rings::RingTable,
    /// each member's latest open-file limit (RLIMIT_NOFILE, soft), kept after it exits
    open_files: std::cell::RefCell<BTreeMap<u32, u64>>,
    /// the device-stage windows (`--device-stages sampled`, or auto once it samples); None
    /// while the stages are exact
    device_windows: Option<device_window::DeviceWindows>,
    /// `--device-stages auto` until it begins to sample: the family's rate against its limit
    auto_sampling: Option<device_window::AutoSampling>,
    /// the drop rows against perf's count of kfree_skb (Health::drops_undelivered)
    drop_check: DropCheck,
    /// each program's skipped runs when the collector started (Health::skipped_runs counts from
    /// there); None when the kernel does not count them
    skipped0: Option<BTreeMap<String, u64>>,
}

/// Whether the drop rows are checked against the kernel's count of kfree_skb hits.
enum DropCheck {
    /// perf counts the hits since it was opened; `runs0` is the drop program's runs just before
    Counting {
        hits: crate::system::perf_counter::TracepointHits,
        runs0: u64,
    },
    /// no drop program is attached: there are no rows to check
    NoDropProgram,
    /// perf could not count the tracepoint: why
    Unavailable(String),
}

/// Whether one of drops' kfree_skb programs (whichever variant the kernel loads) is attached.
fn drop_program_attached(status: &[probes::ProbeStatus]) -> bool {
    status
        .iter()
        .any(|p| p.attached && p.name.starts_with("drops.on_kfree_skb"))
}

impl Collector {
    /// Registers the family (and its current threads) with the probes.
    /// `reasons` are the kernel's drop-reason names (KernelFeatures::drop_reasons).
    pub fn new(
        probes: ProbeSet,
        family: ProcessTable,
        reasons: BTreeMap<u32, String>,
        now_ns: u64,
    ) -> anyhow::Result<Collector> {
        let mut collector = Collector {
            probes,
            family,
            symbols: KernelSymbols::default(),
            reasons,
            retired: Vec::new(),
            thread_cpu: HashMap::new(),
            cgroup_mounts: std::cell::OnceCell::new(),
            quotas: Default::default(),
            open_files: Default::default(),
            rings: Default::default(),
            episodes: Vec::new(),
            scanner: None,
            start_ns: now_ns,
            map_sizes: std::cell::OnceCell::new(),
            bpf: bpf_time::BpfMeter::new(bpf_time::StatsPolicy::DEFAULT),
            drop_pkts: headers::HeaderSpool::create(),
            wall_offset_ns: crate::system::realtime_offset_ns(),
            rx_sk: true,
            device_windows: None,
            auto_sampling: None,
            drop_check: DropCheck::NoDropProgram,
            skipped0: None,
        };
        collector.skipped0 = collector
            .probes
            .bpf_stats()
            .skipped_runs()
            .map(|v| v.into_iter().collect());
        // The program's runs are read before perf starts counting, and perf's count before the
        // runs at each sample: hits minus runs is then at most what the kernel skipped. Without
        // a drop program every hit would read as skipped, so nothing is counted then.
        if drop_program_attached(collector.probes.status()) {
            let runs0 = collector.probes.health()[sp_health::SP_H_DROP_RUNS.0 as usize];
            collector.drop_check = match crate::system::perf_counter::TracepointHits::open("skb", "kfree_skb")
            {
                Ok(hits) => DropCheck::Counting { hits, runs0 },
                Err(e) => DropCheck::Unavailable(e),
            };
        }
        if collector.probes.device_stages() == crate::probes::DeviceStages::Sampled {
            collector.device_windows =
                Some(device_window::DeviceWindows::new(device_window::DIVISOR, now_ns));
        }
        for m in collector.family.alive() {
            collector.probes.add_member(m.pid, m.ppid, 0, m.root)?;
        }
        let threads = collector.family.threads();
        for t in &threads {
            if let Err(e) = collector.probes.add_thread(t.tid, t.tgid, now_ns) {
                let cap = collector.map_capacity("threads").unwrap_or(0);
                if threads.len() >= cap as usize {
                    anyhow::bail!(
                        "{e}: the family has {} threads and the threads map holds {cap}: raise it \
                         with --map-size threads={}",
                        threads.len(),
                        (threads.len() * 2).next_power_of_two()
                    );
                }
                return Err(e.into());
            }
        }
        // The packet sockets open now count from attach, and any opened later from its start
        // (all its frames came after attach): a first read at a later sample would take the
        // frames of a socket opened and used before it (a short scan launched by `run`) for
        // frames from before attach.
        if let Ok(records) = collector.probes.packet_rings() {
            collector.rings.update(&records, |_| None, |_| ());
        }
        Ok(collector)
    }

    /// Entries map `name` was created with (read from the kernel once: sizes do not change).
    pub fn map_capacity(&self, name: &str) -> Option<u32> {
        self.map_sizes
            .get_or_init(|| {
                self.probes
                    .map_memory()
                    .into_iter()
                    .map(|m| (m.name, m.max_entries))
                    .collect()
            })
            .get(name)
            .copied()
    }

    /// What the run misses because a map filled (see `Health::full_map_warnings`).
    pub fn full_map_warnings(&self, health: &Health) -> Vec<String> {
        if health.threads_untracked
            + health.drops_uncounted
            + health.devices_uncounted
            + health.block_sites_uncounted
            == 0
        {
            return Vec::new();
        }
        health.full_map_warnings(|name| self.map_capacity(name))
    }

    /// Whether the drop rows are checked against perf's count of kfree_skb: None when they are,
    /// else a line saying why not.
    pub fn drop_check_warning(&self) -> Option<String> {
        match &self.drop_check {
            DropCheck::Unavailable(e) => Some(format!(
                "the drop rows are not checked against the kernel's count of kfree_skb hits ({e})"
            )),
            DropCheck::Counting { .. } | DropCheck::NoDropProgram => None,
        }
    }

    /// Whether the kernel counts the runs of scanprof's programs it skips: None when it does
    /// (`Health::skipped_runs`), else a line saying so.
    pub fn skipped_check_warning(&self) -> Option<String> {
        self.skipped0.is_none().then(|| {
            "this kernel does not count the runs of scanprof's programs it skips (their \
             recursion_misses, Linux 5.12 and later): a skipped run's counts would be missing \
             without a warning"
                .to_string()
        })
    }

    /// Whether the kernel's kfree_skb names the receiving socket (KernelFeatures::kfree_skb_rx_sk).
    pub fn set_rx_sk(&mut self, rx_sk: bool) {
        self.rx_sk = rx_sk;
    }

    /// What the receive funnel misses on this kernel, once the family receives: without rx_sk,
    /// a drop at the family's socket is the family's only by address (a reply to where it sent),
    /// except at its UDP sockets where udp:udp_fail_queue_rcv_skb is attached.
    pub fn receive_warning(&self, s: &CounterSample) -> Option<String> {
        receive_warning(self.rx_sk, s)
    }

    pub fn probes(&self) -> &ProbeSet {
        &self.probes
    }

    /// When scanprof turns the kernel's BPF run-time statistics on (before the first sample).
    /// Counting the whole run (by policy, or because the sysctl has them on), the first window
    /// opens now, at attach: the run's packets count from there too.
    pub fn set_bpf_policy(&mut self, policy: bpf_time::StatsPolicy) {
        self.bpf = bpf_time::BpfMeter::new(policy);
        if policy == bpf_time::StatsPolicy::Continuous || crate::probes::BpfStats::machine_wide() {
            self.bpf.open(self.probes.bpf_stats(), self.start_ns);
        }
    }

    /// When the BPF statistics window of the tick ending at `tick_end_ns` opens, if one is due.
    pub fn bpf_window_opens_at(&self, tick_end_ns: u64, interval_ns: u64) -> Option<u64> {
        self.bpf.opens_at(tick_end_ns, interval_ns)
    }

    /// Opens the BPF statistics window at `now_ns` (it closes at the next sample).
    pub fn open_bpf_window(&mut self, now_ns: u64) {
        self.bpf.open(self.probes.bpf_stats(), now_ns);
    }

    /// `--device-stages auto`: sample the device stages from the first tick in which the
    /// family sends more than `above_pps` packets a second (counted exactly until then).
    pub fn sample_device_stages_above(&mut self, above_pps: f64) {
        if self.probes.device_stages() == crate::probes::DeviceStages::Auto {
            self.auto_sampling = Some(device_window::AutoSampling::new(above_pps, self.start_ns));
        }
    }

    /// When the open device-stage window of a tick of `interval_ns` closes (`--device-stages
    /// sampled`); None when none is open.
    pub fn device_window_closes_at(&self, interval_ns: u64) -> Option<u64> {
        self.device_windows.as_ref()?.closes_at(interval_ns)
    }

    /// Closes the open device-stage window: its programs detached, each one's time measured,
    /// and the family's packets read around each call.
    pub fn close_device_window(&mut self) {
        let Some(w) = self.device_windows.as_mut().filter(|w| w.is_open()) else {
            return;
        };
        let mut reads = Vec::new();
        let retired = &self.retired;
        let switches = self
            .probes
            .detach_device_stages(&mut |p| reads.push(family_packets(p, retired)));
        w.closed(&switches, &reads);
    }

    /// The device counters, read now. A device-stage window still open (a sample soon after
    /// attach, the run's last, or a tick shorter than its window) stays open across the read,
    /// its time and the family's packets split there (`DeviceWindows::split`).
    fn read_devices_splitting_the_window(&mut self) -> Vec<(probes::sp_dev_key, probes::sp_dev_stats)> {
        let Some(w) = self.device_windows.as_mut().filter(|w| w.is_open()) else {
            return self.probes.devices();
        };
        let before = family_packets(&self.probes, &self.retired);
        let before_ns = crate::system::monotonic_ns();
        let raw = self.probes.devices();
        let after_ns = crate::system::monotonic_ns();
        let after = family_packets(&self.probes, &self.retired);
        w.split(before_ns, after_ns, [&before, &after]);
        raw
    }

    /// Opens the next device-stage window: its programs attached, each one's time measured and
    /// the family's packets read around each call. A window that cannot open leaves the device
    /// stages unsampled from then on (said by `device_window_error`).
    fn open_device_window(&mut self) {
        let Some(w) = self
            .device_windows
            .as_mut()
            .filter(|w| !w.is_open() && w.error.is_none())
        else {
            return;
        };
        let mut reads = Vec::new();
        let retired = &self.retired;
        match self
            .probes
            .attach_device_stages(&mut |p| reads.push(family_packets(p, retired)))
        {
            Ok(switches) => w.opened(&switches, &reads),
            Err(e) => w.error = Some(e.to_string()),
        }
    }

    /// Why a device-stage window could not be opened, if one could not.
    pub fn device_window_error(&self) -> Option<&str> {
        self.device_windows.as_ref()?.error.as_deref()
    }

    /// Why the BPF statistics could not be turned on, if they could not.
    pub fn bpf_stats_error(&self) -> Option<&str> {
        self.bpf.error.as_deref()
    }

    /// Attaches a scanner profile's uprobes: ahead of time to the files its `paths` name
    /// (relative to `anchor_exe`, the executable of the process attached to or launched), and to
    /// every family process it recognises now; later processes get theirs as they appear.
    pub fn set_scanner(
        &mut self,
        profile: crate::wrappers::ScannerProfile,
        per_packet: &uprobes::PerPacket,
        anchor_exe: Option<&std::path::Path>,
        launched: bool,
    ) {
        let mut scanner = uprobes::ScannerProbes::new(profile, per_packet, &self.probes);
        if let Some(exe) = anchor_exe {
            scanner.attach_ahead(&mut self.probes, exe, launched);
        }
        let members: Vec<(u32, String, String)> = self
            .family
            .alive()
            .map(|m| (m.pid, m.exe.clone(), m.comm.clone()))
            .collect();
        for (pid, exe, comm) in members {
            scanner.on_member(&mut self.probes, pid, &exe, &comm);
        }
        self.scanner = Some(scanner);
    }

    /// Waits up to `timeout` for a record that needs attention at once (an exec).
    pub fn wait(&self, timeout: std::time::Duration) {
        self.probes.wait(timeout);
    }

    /// Seconds since attach of a CLOCK_MONOTONIC time from a record.
    fn since_attach_s(&self, ts_ns: u64) -> f64 {
        ts_ns.saturating_sub(self.start_ns) as f64 / 1e9
    }

    /// Applies the records streamed since the last call to the process table and returns them.
    pub fn poll_events(&mut self) -> Vec<FamilyEvent> {
        let mut events: Vec<FamilyEvent> = self
            .probes
            .drain_events()
            .iter()
            .filter_map(decode_event)
            .collect();
        // The command line each exec brought, read now: it tells the scanner from its wrappers.
        // Only a process's last exec of the batch gets it (what /proc shows is that image's);
        // an earlier one was replaced before it could be read.
        let mut seen = std::collections::BTreeSet::new();
        for e in events.iter_mut().rev() {
            if let FamilyEvent::Execed { pid, argv, .. } = e {
                if seen.insert(*pid) {
                    *argv = family::command_line(*pid);
                }
            }
        }
        self.keep_drop_packets();
        for e in &events {
            match e {
                FamilyEvent::Forked {
                    pid,
                    ppid,
                    comm,
                    ts_ns,
                } => {
                    self.family.forked(*pid, *ppid, comm, self.since_attach_s(*ts_ns));
                    // A forked child runs its parent's image: its pid needs the same probes. By
                    // the time this record is read it may have exec'd already, so its role comes
                    // from what it runs now (its exec record follows and changes nothing then).
                    if let Some(s) = self.scanner.as_mut() {
                        let now = std::fs::read_link(format!("/proc/{pid}/exe"))
                            .map(|p| p.display().to_string())
                            .ok();
                        let exe = now
                            .or_else(|| self.family.live(*pid).map(|m| m.exe.clone()))
                            .unwrap_or_default();
                        let comm_now = std::fs::read_to_string(format!("/proc/{pid}/comm"))
                            .map(|c| c.trim_end().to_string())
                            .unwrap_or_else(|_| comm.clone());
                        s.on_member(&mut self.probes, *pid, &exe, &comm_now);
                    }
                }
                FamilyEvent::Execed { pid, comm, path, .. } => {
                    self.family.execed(*pid, comm, path);
                    if let Some(s) = self.scanner.as_mut() {
                        s.on_member(&mut self.probes, *pid, path, comm);
                    }
                }
                FamilyEvent::Exited {
                    pid,
                    exit_code,
                    ts_ns,
                } => self.family.exited(*pid, *exit_code, self.since_attach_s(*ts_ns)),
                FamilyEvent::Blocked {
                    pid,
                    tid,
                    start_ns,
                    duration_ns,
                    stack_id,
                } => {
                    let addrs = self.probes.kernel_stack(*stack_id).unwrap_or_default();
                    let stack = self.symbols.stack(&addrs);
                    self.episodes.push(BlockEpisode {
                        pid: *pid,
                        tid: *tid,
                        start_ns: *start_ns,
                        duration_ns: *duration_ns,
                        wait_site: wait_site(&stack),
                    });
                }
            }
        }
        events
    }

    /// Moves the header records the last ring read gave into the run's spool, up to its cap.
    fn keep_drop_packets(&mut self) {
        for p in self.probes.drain_drop_packets() {
            self.drop_pkts.push(&p);
        }
    }

    /// Why the dropped packets' headers could not be kept (their spool file failed), if so.
    pub fn headers_warning(&self) -> Option<&str> {
        self.drop_pkts.failed.as_deref()
    }

    /// The headers of the family's dropped packets streamed so far, named as the drop table
    /// names its rows (call after the last `sample`, so that every row's names are known).
    pub fn take_dropped_headers(&mut self) -> headers::DroppedHeaders {
        let _ = self.probes.drain_events();
        self.keep_drop_packets();
        let names = self.probes.device_names();
        let (raw, over_cap) = self.drop_pkts.take();
        let members = self.family.members().to_vec();
        let headers = raw
            .iter()
            .map(|p| {
                let k = &p.key;
                let reason = self
                    .reasons
                    .get(&k.reason)
                    .cloned()
                    .unwrap_or_else(|| format!("reason {}", k.reason));
                let comm = members.iter().find(|m| m.pid == k.tgid).map(|m| m.comm.as_str());
                headers::decode(
                    p,
                    reason,
                    self.symbols.name(k.location),
                    names.get(&(k.ifindex, k.netns)).map(|n| n.0.clone()),
                    comm,
                )
            })
            .collect();
        headers::DroppedHeaders {
            headers,
            sampling: Some(headers::Sampling::PROBES),
            over_cap,
            wall_offset_ns: self.wall_offset_ns,
        }
    }

    /// Reads every map as of `now_ns` (CLOCK_MONOTONIC).
    pub fn sample(&mut self, now_ns: u64) -> CounterSample {
        // The counter maps first, one right after the other, so that the stages they feed are
        // read at nearly one moment; naming (kallsyms, device names, stacks) comes after. The
        // first naming of drop locations reads /proc/kallsyms (~0.3 s): between the thread
        // table and the device table it had a sender's first tick show 6,070 packets at the
        // syscall and 11 at dev_queue.
        let raw_threads = self.probes.threads();
        let raw_drops = self.probes.drops();
        let udp_refused = self.probes.udp_refused().map(udp_refused::from_rows);
        let syn_retransmits = self.probes.syn_retransmits();
        let raw_devices = self.read_devices_splitting_the_window();
        let raw_queues = self.probes.take_qdepth();
        let replies = self
            .probes
            .reply_counts()
            .map(|k| replies::ReplyCounts::from_kinds(&k));
        let hits = match &self.drop_check {
            DropCheck::Counting { hits, runs0 } => hits.read().ok().map(|h| (h, *runs0)),
            DropCheck::NoDropProgram | DropCheck::Unavailable(_) => None,
        };
        let mut health = health_of(&self.probes.health());
        if let Some((hits, runs0)) = hits {
            let runs = health.drop_runs.saturating_sub(runs0);
            health.drop_hits = Some(hits);
            health.drops_undelivered = Some(hits.saturating_sub(runs));
        }
        let skipped_runs = self.skipped_since_attach();
        if self.skipped0.is_some() {
            health.skipped_runs = Some(skipped_runs.iter().map(|s| s.runs).sum());
        }
        let (mut threads, open) = self.read_threads(raw_threads, now_ns);
        let names = self.probes.device_names();
        let drops = self.drop_counts(raw_drops, &names);
        let devices = device_counters(raw_devices, &names);
        let (devices, device_sampling) = match self.device_windows.as_mut() {
            Some(w) => {
                let (rows, sampling) = w.scale(devices, now_ns, &packets_by_pid(&threads));
                // counted whole so far (a short run): exact figures
                (rows, sampling.sampled_any().then_some(sampling))
            }
            None => (devices, None),
        };
        self.follow_the_rate(&threads, &devices, now_ns);
        let queues = queue_depths(raw_queues, &names);
        let block_sites = self.block_sites(open, &mut threads, now_ns);
        let (calls, uprobes) = match self.scanner.as_mut() {
            Some(sc) => {
                sc.retire_ahead_links(&mut self.probes);
                (sc.drain(&self.probes), sc.states(&self.probes))
            }
            None => (Vec::new(), Vec::new()),
        };
        let packet_rings = self.packet_rings(&devices);
        let receives = threads.iter().any(|t| t.recv.any())
            || drops.iter().any(|d| d.class == DropClass::ReplyLoss)
            || !packet_rings.is_empty();
        let tunables = if receives {
            crate::system::machine::ReceiveTunables::read()
        } else {
            Default::default()
        };
        let processes = self.processes(&threads);
        // A few small /proc and cgroup reads per live member and tick: what bounds the family
        // from outside its code (CPU quota, steal, the conntrack table).
        let live: Vec<u32> = processes.iter().filter(|p| p.alive).map(|p| p.pid).collect();
        let mounts = self
            .cgroup_mounts
            .get_or_init(crate::system::cpu_limits::CgroupMounts::read);
        let bpf = self.bpf.sample(&mut self.probes, now_ns);
        let sample = CounterSample {
            t_ns: now_ns,
            device_sampling,
            tunables,
            socket_drops_seen: self.rx_sk,
            recv_class_bounds: self.probes.recv_class_bounds().to_vec(),
            cgroups: self.quotas.read(&live, mounts),
            steal: crate::system::cpu_limits::read_steal(&live),
            conntrack: self.conntrack_tables(&live),
            packet_rings,
            replies,
            udp_refused,
            syn_retransmits,
            processes,
            threads,
            drops,
            devices,
            queues,
            block_sites,
            health,
            self_cpu_ns: own_cpu_ns(),
            episodes: std::mem::take(&mut self.episodes),
            calls,
            uprobes,
            bpf,
            skipped_runs,
        };
        // The next tick's device-stage window opens now, at its start (one still open, split
        // at the read above, goes on).
        self.open_device_window();
        sample
    }

    /// `--device-stages auto`, at the tick that ends at `now_ns`: the first time the family sent
    /// faster than its limit over a tick, sampling begins here, from the exact `devices` just
    /// read (this tick's counts stay exact; the first window is open from now and closes a tenth
    /// of a tick on). Once sampling, a tick at or below the limit holds the next window open (the
    /// ticks it spans are counted whole) until a tick is above it again.
    fn follow_the_rate(&mut self, threads: &[ThreadCounters], devices: &[DeviceCounters], now_ns: u64) {
        let Some(auto) = self.auto_sampling.as_mut() else {
            return;
        };
        let family = packets_by_pid(threads);
        let above = auto.above(family.values().sum(), now_ns);
        if let Some(w) = self.device_windows.as_mut() {
            w.hold_open(above.is_none());
            return;
        }
        let Some(pps) = above else {
            return;
        };
        let start = device_window::AutoStart {
            exact_ns: now_ns.saturating_sub(self.start_ns),
            pps,
            above_pps: auto.above_pps,
        };
        self.device_windows = Some(device_window::DeviceWindows::from_counts(
            device_window::DIVISOR,
            now_ns,
            devices,
            &family,
            start,
        ));
    }

    /// The programs whose runs the kernel skipped since the collector started, by name; empty
    /// when none were or the kernel does not count them.
    fn skipped_since_attach(&mut self) -> Vec<SkippedRuns> {
        let Some(at_start) = &self.skipped0 else {
            return Vec::new();
        };
        let Some(now) = self.probes.bpf_stats().skipped_runs() else {
            return Vec::new();
        };
        skipped_between(at_start, now)
    }

    /// The threads' counters at `now_ns`, the exited ones retired (kept, and forgotten by the
    /// probes), sorted by pid and tid; and the sends blocked right now: (tgid, tid, stack id,
    /// since), named with the block sites.
    fn read_threads(
        &mut self,
        raw_threads: Vec<sp_thread>,
        now_ns: u64,
    ) -> (Vec<ThreadCounters>, Vec<OpenBlock>) {
        let mut threads = Vec::new();
        let mut open = Vec::new();
        for raw in raw_threads {
            let mut counters = thread_counters(&raw, now_ns);
            // A receiving thread's user/system split: one small /proc read per thread and tick.
            if counters.recv.any() {
                if let Some(c) = read_thread_cpu(raw.tgid, raw.tid) {
                    self.thread_cpu.insert(raw.tid, c);
                }
                counters.cpu = self.thread_cpu.get(&raw.tid).copied();
            }
            if let Some(b) = &counters.blocked_now {
                open.push((raw.tgid, raw.tid, raw.block_stack, b.since_ns));
            }
            if counters.exited {
                self.probes.forget_thread(raw.tid);
                self.thread_cpu.remove(&raw.tid);
                self.retired.push(counters);
            } else {
                threads.push(counters);
            }
        }
        threads.extend(self.retired.iter().cloned());
        threads.sort_by_key(|t| (t.pid, t.tid));
        (threads, open)
    }

    /// The drop table's rows, named (reason, kernel location, device), most first.
    fn drop_counts(
        &mut self,
        raw_drops: Vec<(probes::sp_drop_key, u64)>,
        names: &DeviceNames,
    ) -> Vec<DropCount> {
        // A row can read 0: on_udp_fail moves a drop out of the row it was first counted in.
        let mut drops: Vec<DropCount> = raw_drops
            .into_iter()
            .filter(|(_, count)| *count > 0)
            .map(|(k, count)| DropCount {
                reason: self
                    .reasons
                    .get(&k.reason)
                    .cloned()
                    .unwrap_or_else(|| format!("reason {}", k.reason)),
                location: self.symbols.name(k.location),
                device: device_name(names, k.ifindex, k.netns),
                ifindex: k.ifindex,
                netns: k.netns,
                class: DropClass::from_wire(k.class),
                pid: (k.tgid != 0).then_some(k.tgid),
                count,
            })
            .collect();
        drops.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.location.cmp(&b.location)));
        drops
    }

    /// Where the family's sends blocked: each site's stack named, with the blocks still in
    /// progress (`open`) counted from the moment they began (the probes add a block to its
    /// site when it ends, with its whole length), so a tick in the middle of a 2.6 s block
    /// names where the sender waits and the site's time grows smoothly across ticks. Each
    /// blocked thread's `blocked_now` gets its site's name. Longest first.
    fn block_sites(
        &mut self,
        open: Vec<OpenBlock>,
        threads: &mut [ThreadCounters],
        now_ns: u64,
    ) -> Vec<BlockSite> {
        let mut stacks: HashMap<i32, Vec<String>> = HashMap::new();
        let mut stack_of = |id: i32| -> Vec<String> {
            stacks
                .entry(id)
                .or_insert_with(|| {
                    let addrs = self.probes.kernel_stack(id).unwrap_or_default();
                    self.symbols.stack(&addrs)
                })
                .clone()
        };
        let site = |pid: u32, stack: Vec<String>, blocked_ns: u64, episodes: u64| BlockSite {
            pid,
            wait_site: wait_site(&stack),
            stack,
            blocked_ns,
            episodes,
            in_progress: 0,
        };
        let mut block_sites: Vec<BlockSite> = Vec::new();
        let mut site_of: HashMap<(u32, i32), usize> = HashMap::new();
        for (k, v) in self.probes.block_sites() {
            site_of.insert((k.tgid, k.stack_id), block_sites.len());
            block_sites.push(site(k.tgid, stack_of(k.stack_id), v.ns, v.count));
        }
        for (tgid, tid, stack_id, since_ns) in open {
            let i = *site_of.entry((tgid, stack_id)).or_insert_with(|| {
                block_sites.push(site(tgid, stack_of(stack_id), 0, 0));
                block_sites.len() - 1
            });
            let site = &mut block_sites[i];
            site.blocked_ns += now_ns.saturating_sub(since_ns);
            site.in_progress += 1;
            if let Some(b) = threads
                .iter_mut()
                .find(|t| t.tid == tid && t.pid == tgid)
                .and_then(|t| t.blocked_now.as_mut())
            {
                b.wait_site = site.wait_site.clone();
            }
        }
        block_sites.sort_by_key(|b| std::cmp::Reverse(b.blocked_ns));
        block_sites
    }

    /// One run of the packet-socket iterator; a failed read keeps the counts of the last. A
    /// socket closed since the last read gives its owner's last PACKET_STATISTICS sums and its
    /// counters at close, and their entry goes; so does one the iterator never saw (opened and
    /// closed since the last read). The copies of outgoing frames among what the rings took come from the
    /// same sample's device rows.
    fn packet_rings(&mut self, devices: &[DeviceCounters]) -> Vec<rings::PacketRing> {
        let probes = &self.probes;
        match probes.packet_rings() {
            Ok(records) => {
                self.rings.update(
                    &records,
                    |sock| probes.ring_reads(sock),
                    |sock| probes.forget_ring_reads(sock),
                );
                self.rings
                    .take_unseen(&probes.closed_ring_reads(), |sock| probes.forget_ring_reads(sock));
                self.rings.count_outgoing(devices)
            }
            Err(_) => self.rings.current(),
        }
    }

    /// The conntrack tables of the family's namespaces; a full one names where the family's
    /// packets went (read from the flows map only then).
    fn conntrack_tables(&self, live: &[u32]) -> Vec<crate::system::conntrack::ConntrackTable> {
        let mut tables = crate::system::conntrack::read_tables(live);
        if tables.iter().any(|t| t.nearly_full()) {
            let dest = crate::system::conntrack::summarize(&self.probes.flow_addresses_v4(4096));
            for t in tables.iter_mut().filter(|t| t.nearly_full()) {
                t.destinations = dest.clone();
            }
        }
        tables
    }

    /// The kernel's drop-reason names, number -> name.
    pub fn drop_reasons(&self) -> &BTreeMap<u32, String> {
        &self.reasons
    }

    /// The family, with the roles the scanner profile gives its members.
    /// The family with the roles the scanner's profile gives its members. The fallback profile
    /// knows nothing of a process but that it may send: its role is shown only for a member
    /// whose threads sent packets (a shell that started the sender is no `sender`).
    pub fn processes(&self, threads: &[ThreadCounters]) -> Vec<ProcessInfo> {
        let mut members = self.family.members().to_vec();
        // The open-file limit of each live member: what caps a connect scanner's sockets in
        // flight (a `[rate.window]`). The last reading stays once it has exited.
        for m in members.iter_mut().filter(|m| m.alive) {
            if let Some(limit) = family::open_files_limit(m.pid) {
                self.open_files.borrow_mut().insert(m.pid, limit);
            }
        }
        let limits = self.open_files.borrow();
        for m in &mut members {
            m.open_files_limit = limits.get(&m.pid).copied();
        }
        drop(limits);
        if let Some(s) = &self.scanner {
            let sent = |pid: u32| threads.iter().any(|t| t.pid == pid && t.packets > 0);
            for m in &mut members {
                m.role = s
                    .roles()
                    .get(&m.pid)
                    .filter(|_| !s.guesses_roles() || sent(m.pid))
                    .cloned();
            }
        }
        members
    }
}

fn decode_event(e: &sp_event) -> Option<FamilyEvent> {
    Some(match sp_event_kind(e.kind) {
        sp_event_kind::SP_EV_FORK => FamilyEvent::Forked {
            pid: e.tgid,
            ppid: e.ppid,
            comm: probes::c_chars(&e.comm),
            ts_ns: e.ts_ns,
        },
        sp_event_kind::SP_EV_EXEC => FamilyEvent::Execed {
            pid: e.tgid,
            comm: probes::c_chars(&e.comm),
            path: probes::c_chars(&e.path),
            argv: None,
        },
        sp_event_kind::SP_EV_EXIT => FamilyEvent::Exited {
            pid: e.tgid,
            exit_code: e.exit_code,
            ts_ns: e.ts_ns,
        },
        sp_event_kind::SP_EV_BLOCK => FamilyEvent::Blocked {
            pid: e.tgid,
            tid: e.tid,
            start_ns: e.ts_ns,
            duration_ns: e.duration_ns,
            stack_id: e.stack_id,
        },
        _ => return None,
    })
}

/// Typed counters of one thread, with the interval it is in now accounted up to `now_ns`.
pub fn thread_counters(t: &sp_thread, now_ns: u64) -> ThreadCounters {
    let mut budget = TimeBudget {
        send_ns: t.oncpu_send_ns,
        blocked_send_ns: t.blocked_send_ns,
        sleep_ns: t.sleep_ns,
        preempted_ns: t.runq_ns,
        other_ns: t.oncpu_other_ns,
        wakeup_wait_ns: Some(t.wakeup_ns),
    };
    let state = sp_sched_state(t.sched_state);
    let open = |since: u64| now_ns.saturating_sub(since);
    match state {
        sp_sched_state::SP_ST_RUNNING if t.send_call != 0 => budget.send_ns += open(t.oncpu_since_ns),
        sp_sched_state::SP_ST_RUNNING => budget.other_ns += open(t.oncpu_since_ns),
        sp_sched_state::SP_ST_RUNNABLE => budget.preempted_ns += open(t.state_since_ns),
        sp_sched_state::SP_ST_WOKEN => {
            budget.preempted_ns += open(t.state_since_ns);
            budget.wakeup_wait_ns = Some(t.wakeup_ns + open(t.state_since_ns));
        }
        sp_sched_state::SP_ST_SLEEPING => budget.sleep_ns += open(t.state_since_ns),
        sp_sched_state::SP_ST_BLOCKED_SEND => budget.blocked_send_ns += open(t.state_since_ns),
        _ => {}
    }
    let errors = t
        .errors
        .iter()
        .enumerate()
        .filter(|(_, n)| **n > 0)
        .map(|(errno, n)| (errno_name(errno as i32), *n))
        .collect();
    ThreadCounters {
        tid: t.tid,
        pid: t.tgid,
        exited: state == sp_sched_state::SP_ST_EXITED,
        calls: t.calls,
        packets: t.packets,
        bytes: t.bytes,
        failed_calls: t.failed_calls,
        errors,
        latency: Histogram::from_buckets(&t.latency),
        gap: Histogram::from_buckets(&t.gap),
        gap_sum_ns: t.gap_sum_ns,
        gap_count: t.gap_count,
        first_send_ns: t.first_send_ns,
        last_send_ns: t.last_pkt_ns,
        ipc_calls: t.ipc_calls,
        ipc_bytes: t.ipc_bytes,
        recv: RecvCounters {
            calls: t.recv_calls,
            failed_calls: t.recv_failed_calls,
            packets: t.recv_packets,
            bytes: t.recv_bytes,
            stream_calls: t.recv_stream_calls,
            stream_bytes: t.recv_stream_bytes,
        },
        recv_classes: if t.recv_class_packets.iter().any(|&n| n > 0) {
            (0..crate::probes::RECV_CLASSES)
                .map(|c| RecvClassCounters {
                    packets: t.recv_class_packets[c],
                    bytes: t.recv_class_bytes[c],
                    oncpu_ns: t.recv_class_oncpu_ns[c],
                })
                .collect()
        } else {
            Vec::new()
        },
        connect: ConnectCounters {
            calls: t.connect_calls,
            syns: t.connect_syns,
            answered: t.connect_answered,
        },
        budget,
        window_budget: (t.packets > 0).then(|| {
            let at = |b: &sp_budget| TimeBudget {
                send_ns: b.send_ns,
                blocked_send_ns: b.blocked_send_ns,
                sleep_ns: b.sleep_ns,
                preempted_ns: b.runq_ns,
                other_ns: b.other_ns,
                wakeup_wait_ns: Some(b.wakeup_ns),
            };
            at(&t.at_last_send).saturating_sub(&at(&t.at_first_send))
        }),
        blocked_now: (state == sp_sched_state::SP_ST_BLOCKED_SEND).then(|| BlockedNow {
            since_ns: t.state_since_ns,
            wait_site: String::new(),
        }),
        cpu: None,
    }
}

/// Symbolic errno name (`ENOBUFS`), slot 0 meaning "an errno beyond the counted range".
pub fn errno_name(errno: i32) -> String {
    if errno == 0 {
        return "E_OTHER".to_string();
    }
    format!("{:?}", nix::errno::Errno::from_raw(errno))
}

/// A send blocked at the sample: (tgid, tid, kernel stack id, since when in ns).
type OpenBlock = (u32, u32, i32, u64);

/// Device names and qdisc kinds by (ifindex, netns), as the probes recorded them.
type DeviceNames = BTreeMap<(u32, u32), (String, String)>;

/// A device's name, if the probes recorded it.
fn device_name(names: &DeviceNames, ifindex: u32, netns: u32) -> Option<String> {
    names.get(&(ifindex, netns)).map(|n| n.0.clone())
}

/// A device's name, or `if<ifindex>` when the probes recorded none.
fn device_label(names: &DeviceNames, ifindex: u32, netns: u32) -> String {
    device_name(names, ifindex, netns).unwrap_or_else(|| format!("if{ifindex}"))
}

/// Each program's skipped runs now less those at the start (a program not there then counts
/// from 0), the programs with any.
fn skipped_between(at_start: &BTreeMap<String, u64>, now: Vec<(String, u64)>) -> Vec<SkippedRuns> {
    now.into_iter()
        .filter_map(|(program, n)| {
            let runs = n.saturating_sub(at_start.get(&program).copied().unwrap_or(0));
            (runs > 0).then_some(SkippedRuns { program, runs })
        })
        .collect()
}

/// The probes' health slots (wire.h's `sp_health`) as named counters.
fn health_of(h: &[u64; probes::HEALTH_SLOTS]) -> Health {
    Health {
        lost_events: h[sp_health::SP_H_RB_LOST.0 as usize],
        drops_uncounted: h[sp_health::SP_H_DROPS_FULL.0 as usize],
        devices_uncounted: h[sp_health::SP_H_DEVS_FULL.0 as usize],
        threads_untracked: h[sp_health::SP_H_THREADS_FULL.0 as usize],
        block_sites_uncounted: h[sp_health::SP_H_SITES_FULL.0 as usize],
        probe_hits: h[sp_health::SP_H_EVENTS.0 as usize],
        drop_runs: h[sp_health::SP_H_DROP_RUNS.0 as usize],
        drops_undelivered: None,
        drop_hits: None,
        unmatched_on_path: h[sp_health::SP_H_UNMATCHED.0 as usize],
        skipped_runs: None,
        missed_switches: h[sp_health::SP_H_MISSED_SWITCHES.0 as usize],
        unplaced_ns: h[sp_health::SP_H_UNPLACED_NS.0 as usize],
    }
}

/// The device rows: each device's stage counters, named, with its qdisc's kind (None when the
/// probes recorded none).
fn device_counters(
    raw: Vec<(probes::sp_dev_key, probes::sp_dev_stats)>,
    names: &DeviceNames,
) -> Vec<DeviceCounters> {
    raw.into_iter()
        .map(|(k, s)| DeviceCounters {
            device: device_label(names, k.ifindex, k.netns),
            ifindex: k.ifindex,
            netns: k.netns,
            pid: (k.tgid != 0).then_some(k.tgid),
            queued: s.queued,
            enqueued: s.enqueued,
            dequeued: s.dequeued,
            xmit_ok: s.xmit_ok,
            xmit_busy: s.xmit_busy,
            xmit_err: s.xmit_err,
            xmit_bytes: s.xmit_bytes,
            neigh_started: s.neigh_started,
            neigh_queued: s.neigh_queued,
            neigh_resolved: s.neigh_resolved,
            neigh_failed: s.neigh_failed,
            qdisc: names
                .get(&(k.ifindex, k.netns))
                .map(|n| n.1.clone())
                .filter(|k| !k.is_empty()),
        })
        .collect()
}

/// The deepest each device's qdisc got during the tick, named.
fn queue_depths(raw: Vec<(probes::sp_dev_key, probes::sp_qdepth)>, names: &DeviceNames) -> Vec<QueueDepth> {
    raw.into_iter()
        .map(|(k, d)| QueueDepth {
            device: device_label(names, k.ifindex, k.netns),
            netns: k.netns,
            qlen_max: d.qlen_max,
            backlog_max: d.backlog_max,
        })
        .collect()
}

#[cfg(test)]
mod sample_tests {
    use super::*;

    /// Without rx_sk the run says what it cannot see: with the UDP refusal program, only drops
    /// outside IPv4 UDP sockets; without it, the listener's loss at all. Nothing with rx_sk, or
    /// before the family receives.
    #[test]
    fn the_receive_warning_says_what_this_kernel_cannot_see() {
        let receiving = CounterSample {
            threads: vec![ThreadCounters {
                recv: RecvCounters {
                    calls: 3,
                    ..Default::default()
                },
                ..Default::default()
            }],
            ..Default::default()
        };
        let with_udp = CounterSample {
            udp_refused: Some(Vec::new()),
            ..receiving.clone()
        };
        assert_eq!(receive_warning(true, &with_udp), None);
        assert_eq!(receive_warning(true, &receiving), None);
        assert_eq!(receive_warning(false, &CounterSample::default()), None);
        let unseen = receive_warning(false, &receiving).expect("a warning without either");
        assert!(unseen.contains("listener loss cannot be seen"), "{unseen}");
        let partly = receive_warning(false, &with_udp).expect("a warning for the other sockets");
        assert!(partly.contains("udp_fail_queue_rcv_skb"), "{partly}");
        assert!(partly.contains("raw, TCP"), "{partly}");
        assert!(!partly.contains("cannot be seen"), "{partly}");
    }

    /// The health slots are read by wire.h's names, each into its own counter.
    #[test]
    fn health_slots_are_read_by_their_names() {
        let mut h = [0u64; probes::HEALTH_SLOTS];
        for (i, v) in h.iter_mut().enumerate() {
            *v = 10 + i as u64;
        }
        let got = health_of(&h);
        let slot = |s: sp_health| 10 + u64::from(s.0);
        assert_eq!(got.lost_events, slot(sp_health::SP_H_RB_LOST));
        assert_eq!(got.drops_uncounted, slot(sp_health::SP_H_DROPS_FULL));
        assert_eq!(got.devices_uncounted, slot(sp_health::SP_H_DEVS_FULL));
        assert_eq!(got.threads_untracked, slot(sp_health::SP_H_THREADS_FULL));
        assert_eq!(got.block_sites_uncounted, slot(sp_health::SP_H_SITES_FULL));
        assert_eq!(got.probe_hits, slot(sp_health::SP_H_EVENTS));
        assert_eq!(got.drop_runs, slot(sp_health::SP_H_DROP_RUNS));
        assert_eq!(got.unmatched_on_path, slot(sp_health::SP_H_UNMATCHED));
        assert_eq!(got.missed_switches, slot(sp_health::SP_H_MISSED_SWITCHES));
        assert_eq!(got.unplaced_ns, slot(sp_health::SP_H_UNPLACED_NS));
        assert_eq!((got.drop_hits, got.drops_undelivered), (None, None));
    }

    /// The drop check runs only beside an attached drop program, whichever variant: without
    /// one, every kfree_skb hit would read as a drop the kernel skipped.
    #[test]
    fn the_drop_check_needs_an_attached_drop_program() {
        let st = |name: &str, attached: bool| probes::ProbeStatus {
            name: name.into(),
            attached,
            error: None,
        };
        assert!(!drop_program_attached(&[]));
        assert!(!drop_program_attached(&[
            st("drops.on_kfree_skb", false),
            st("netdev.on_dev_xmit", true)
        ]));
        for variant in [
            "drops.on_kfree_skb",
            "drops.on_kfree_skb_norx",
            "drops.on_kfree_skb_noreason",
        ] {
            assert!(drop_program_attached(&[st(variant, true)]), "{variant}");
        }
    }

    /// The drops the kernel did not give the program, and the packets on the family's path
    /// that matched none it sent, each get a line with their figures; none without them.
    #[test]
    fn delivery_warnings_say_what_the_drop_rows_leave_out() {
        assert!(Health::default().delivery_warnings(&[]).is_empty());
        let checked = Health {
            drop_hits: Some(12_013),
            drops_undelivered: Some(0),
            skipped_runs: Some(0),
            ..Health::default()
        };
        assert!(checked.delivery_warnings(&[]).is_empty());
        let h = Health {
            drop_hits: Some(12_013),
            drops_undelivered: Some(37),
            unmatched_on_path: 4,
            ..Health::default()
        };
        let w = h.delivery_warnings(&[]);
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(
            w[0].starts_with("at least 37 kernel drops are missing"),
            "{}",
            w[0]
        );
        assert!(
            w[0].contains("perf counted 12013 hits") && w[0].contains("for 11976 of"),
            "{}",
            w[0]
        );
        assert!(
            w[1].starts_with("4 socket-less drops on the family's path"),
            "{}",
            w[1]
        );
    }

    /// Runs the kernel skipped count from the collector's start, per program (a program loaded
    /// since counts from 0), and only the programs with any are kept.
    #[test]
    fn skipped_runs_count_from_the_start_per_program() {
        let at_start: BTreeMap<String, u64> = [
            ("send_path.on_sys_exit".to_string(), 5),
            ("drops.on_kfree_skb".to_string(), 2),
        ]
        .into();
        let now = vec![
            ("send_path.on_sys_exit".to_string(), 17),
            ("drops.on_kfree_skb".to_string(), 2),
            ("netdev.on_dev_xmit".to_string(), 3),
        ];
        assert_eq!(
            skipped_between(&at_start, now),
            vec![
                SkippedRuns {
                    program: "send_path.on_sys_exit".into(),
                    runs: 12
                },
                SkippedRuns {
                    program: "netdev.on_dev_xmit".into(),
                    runs: 3
                },
            ]
        );
    }

    /// Context switches no program was given get a line with their count and the time they
    /// left unplaced.
    #[test]
    fn missed_switches_are_a_warning_with_the_unplaced_time() {
        let h = Health {
            missed_switches: 3,
            unplaced_ns: 54_250_000,
            ..Health::default()
        };
        let w = h.delivery_warnings(&[]);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].starts_with("the kernel gave scanprof no event for 3 context switches")
                && w[0].contains("54.2 ms of their time is in no state of the time budget"),
            "{}",
            w[0]
        );
    }

    /// Skipped runs get a line with their sum and the programs, most first (four named, then
    /// how many more); none when the kernel skipped none.
    #[test]
    fn skipped_runs_are_a_warning_naming_the_programs() {
        let run = |program: &str, runs| SkippedRuns {
            program: program.into(),
            runs,
        };
        let skipped = [
            run("a.one", 1),
            run("b.two", 40),
            run("c.three", 7),
            run("d.four", 7),
            run("e.five", 2),
            run("f.six", 1),
        ];
        let h = Health {
            skipped_runs: Some(58),
            ..Health::default()
        };
        let w = h.delivery_warnings(&skipped);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].starts_with("the kernel skipped 58 runs of scanprof's programs")
                && w[0].ends_with("(b.two 40, c.three 7, d.four 7, e.five 2, 2 more programs)"),
            "{}",
            w[0]
        );
        let counted_none = Health {
            skipped_runs: Some(0),
            ..Health::default()
        };
        assert!(counted_none.delivery_warnings(&[]).is_empty());
    }

    /// A device row and a queue take the device's recorded name (`if<N>` without one), and the
    /// qdisc kind only when one was recorded; a row of everyone's traffic has no pid.
    #[test]
    fn device_rows_and_queues_are_named_by_ifindex_and_namespace() {
        let names: DeviceNames = [
            ((2, 7), ("veth0".to_string(), "tbf".to_string())),
            ((3, 7), ("lo".to_string(), String::new())),
        ]
        .into();
        let key = |ifindex, netns, tgid| probes::sp_dev_key {
            ifindex,
            netns,
            tgid,
            ..Default::default()
        };
        let stats = probes::sp_dev_stats {
            xmit_ok: 5,
            neigh_failed: 1,
            ..Default::default()
        };
        let rows = device_counters(
            vec![
                (key(2, 7, 42), stats),
                (key(3, 7, 0), stats),
                (key(2, 8, 0), stats),
            ],
            &names,
        );
        let got: Vec<_> = rows
            .iter()
            .map(|d| {
                (
                    d.device.as_str(),
                    d.qdisc.as_deref(),
                    d.pid,
                    d.xmit_ok,
                    d.neigh_failed,
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("veth0", Some("tbf"), Some(42), 5, 1),
                ("lo", None, None, 5, 1),
                ("if2", None, None, 5, 1)
            ]
        );
        let depth = probes::sp_qdepth {
            qlen_max: 3,
            backlog_max: 900,
        };
        let q = queue_depths(vec![(key(2, 7, 0), depth), (key(9, 7, 0), depth)], &names);
        let got: Vec<_> = q
            .iter()
            .map(|q| (q.device.as_str(), q.netns, q.qlen_max, q.backlog_max))
            .collect();
        assert_eq!(got, [("veth0", 7, 3, 900), ("if9", 7, 3, 900)]);
    }
}

#[cfg(test)]
#[path = "budget_tests.rs"]
mod budget_tests;

#[cfg(test)]
mod health_tests {
    use super::Health;

    #[test]
    fn a_full_map_is_named_with_the_flag_that_raises_it() {
        let none = Health::default();
        assert!(none.full_map_warnings(|_| Some(1024)).is_empty());
        let h = Health {
            threads_untracked: 9,
            drops_uncounted: 2,
            ..Health::default()
        };
        let w = h.full_map_warnings(|m| (m == "threads").then_some(4));
        assert_eq!(
            w,
            [
                "9 family threads were not tracked: the threads map (4 entries) was full; raise it \
                 with --map-size threads=16",
                "2 drops were not counted: the drops table was full",
            ]
        );
        let h = Health {
            block_sites_uncounted: 3,
            drops_uncounted: 1,
            ..Health::default()
        };
        assert_eq!(
            h.full_map_warnings(|_| Some(8192)),
            [
                "1 drops were not counted: the drops table (8192 rows, a constant of the probes) was full",
                "3 blocking episodes were not counted: the block_sites map (8192 entries) was full; \
                 raise it with --map-size block_sites=32768",
            ]
        );
    }
}

#[cfg(test)]
mod drop_class_tests {
    use super::DropClass;
    use crate::probes::sp_drop_class;

    #[test]
    fn every_wire_class_has_its_own_name_in_the_json() {
        let classes = [
            (
                sp_drop_class::SP_CLASS_UNRELATED,
                DropClass::Unrelated,
                "unrelated",
            ),
            (
                sp_drop_class::SP_CLASS_TARGET_LOSS,
                DropClass::TargetLoss,
                "target_loss",
            ),
            (sp_drop_class::SP_CLASS_EXPECTED, DropClass::Expected, "expected"),
            (
                sp_drop_class::SP_CLASS_REPLY_LOSS,
                DropClass::ReplyLoss,
                "reply_loss",
            ),
            (
                sp_drop_class::SP_CLASS_REPLY_SIDE,
                DropClass::ReplySide,
                "reply_side",
            ),
        ];
        for (wire, class, name) in classes {
            assert_eq!(DropClass::from_wire(wire.0), class);
            assert_eq!(class.name(), name);
            // serde's name is the one the text and the views print: one name per class.
            assert_eq!(serde_json::to_string(&class).unwrap(), format!("\"{name}\""));
        }
        // A class this build does not know is nobody's loss.
        assert_eq!(DropClass::from_wire(99), DropClass::Unrelated);
    }
}
