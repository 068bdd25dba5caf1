/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The ABI between the BPF programs and scanprof's Rust side: every struct and enum that crosses
 * the boundary, and nothing else. Rust uses the skeleton's generated copies of these types and
 * asserts their sizes, so a change here that Rust does not follow is a build error.
 */
#ifndef SCANPROF_WIRE_H
#define SCANPROF_WIRE_H

/*
 * Latency and gap histograms: log-linear buckets over nanoseconds.
 * Values 0..15 have a bucket each; above that each power of two is split into 8 equal
 * sub-buckets (12.5% resolution): bucket = 16 + (msb - 4) * 8 + ((v >> (msb - 3)) & 7).
 * The last bucket also holds everything larger (msb >= 40, about 18 minutes).
 */
#define SP_HIST_LINEAR 16
#define SP_HIST_SUB_BITS 3
#define SP_HIST_MAX_MSB 39
#define SP_HIST_BUCKETS (SP_HIST_LINEAR + (SP_HIST_MAX_MSB - 3) * (1 << SP_HIST_SUB_BITS))

/* errno values below this have a counter each; slot 0 counts every larger errno. */
#define SP_ERRNO_SLOTS 128

#define SP_COMM_LEN 16
#define SP_PATH_LEN 160

/* What a family thread is doing, as the scheduler tracepoints last saw it. */
enum sp_sched_state {
	SP_ST_UNKNOWN = 0,	/* seen at attach, no switch yet */
	SP_ST_RUNNING = 1,	/* on a CPU */
	SP_ST_RUNNABLE = 2,	/* preempted (or new), waiting for a CPU */
	SP_ST_SLEEPING = 3,	/* off CPU of its own accord, outside a send syscall */
	SP_ST_BLOCKED_SEND = 4, /* off CPU of its own accord inside a send syscall */
	SP_ST_EXITED = 5,	/* gone: user space folds its counters in, then deletes it */
	SP_ST_WOKEN = 6,	/* woken from SLEEPING or BLOCKED_SEND, waiting for a CPU */
};

/* Which send syscall a thread is inside, when it is inside one. */
enum sp_send_call {
	SP_CALL_NONE = 0,
	SP_CALL_SENDTO = 1,
	SP_CALL_SENDMSG = 2,
	SP_CALL_SENDMMSG = 3,
	SP_CALL_WRITE = 4,
	SP_CALL_WRITEV = 5,
	SP_CALL_CONNECT = 6,	/* connect(2) on a TCP socket: a connection attempt, one SYN */
};

/* Which receive syscall a thread is inside, when it is inside one (send_path.bpf.c). */
enum sp_recv_call {
	SP_RECV_NONE = 0,
	SP_RECV_RECVFROM = 1,	/* also recv(2), which is recvfrom on x86-64 */
	SP_RECV_RECVMSG = 2,
	SP_RECV_RECVMMSG = 3,
	SP_RECV_READ = 4,
};

/* What kind of socket a receive reads from. */
enum sp_recv_kind {
	SP_RX_NONE = 0,		/* not a network socket (a file, a pipe, AF_UNIX): not counted */
	SP_RX_DGRAM = 1,	/* UDP, raw IP, AF_PACKET: one packet per message read */
	SP_RX_STREAM = 2,	/* TCP: calls and bytes, no packets */
};

/* Classes of packets read (by message length, send_path.bpf.c): at most this many, split at
 * SP_RECV_CLASSES - 1 boundaries set before load. */
#define SP_RECV_CLASSES 4	/* a power of two: send_path masks class indexes with it */

/* What kind of socket a send went to. */
enum sp_sock_kind {
	SP_SOCK_NONE = 0,	/* not a socket: the call is not counted */
	SP_SOCK_NET = 1,	/* AF_INET, AF_INET6, AF_PACKET: packets */
	SP_SOCK_IPC = 2,	/* AF_UNIX: messages between processes */
};

/* A thread's time budget at one moment, ns (the budget fields of sp_thread). */
struct sp_budget {
	__u64 send_ns;
	__u64 other_ns;
	__u64 blocked_send_ns;
	__u64 sleep_ns;
	__u64 runq_ns;
	__u64 wakeup_ns;
};

/*
 * One per thread of the target family, keyed by tid in the shared `threads` map. The in-flight
 * fields belong to the kernel side; user space reads the counters (all cumulative since the
 * thread was first seen) and `sched_state` + `state_since_ns` to account the open interval.
 */
struct sp_thread {
	__u32 tgid;
	__u32 tid;
	/* in flight */
	__u64 send_enter_ns;	/* CLOCK_MONOTONIC at entry of the send syscall in progress */
	__u64 send_sk;		/* struct sock * of that call */
	__u64 send_arg;		/* sendmmsg: user address of the mmsghdr vector */
	__u32 send_call;	/* enum sp_send_call, SP_CALL_NONE outside a send */
	__u32 send_kind;	/* enum sp_sock_kind */
	/* the socket behind the fd this thread last sent on, resolved once and kept while the
	 * shared fd_gen has not moved (no close, dup2, dup3, close_range or exec in the family) */
	__u64 fd_cache_sk;	/* struct sock *, 0 if the fd is not a socket */
	__u64 fd_cache_gen;	/* fd_gen + 1 when cached, 0 when nothing is */
	__s32 fd_cache_fd;
	__u32 fd_cache_kind;	/* enum sp_sock_kind */
	/* the receive in flight, and the same cache for the fd the thread last received on (a
	 * scanner sends on one socket and reads replies from another: one cache would thrash) */
	__u64 recv_arg;		/* recvmmsg: user address of the mmsghdr vector */
	__u32 recv_call;	/* enum sp_recv_call, SP_RECV_NONE outside a receive */
	__u32 recv_kind;	/* enum sp_recv_kind */
	__u64 rx_cache_sk;
	__u64 rx_cache_gen;
	__s32 rx_cache_fd;
	__u32 rx_cache_kind;	/* enum sp_recv_kind */
	__u64 recv_sk;		/* the socket this thread last registered in target_socks by a
				 * receive, bind or setsockopt */
	__u64 recv_read_sk;	/* the socket of this thread's latest receive syscall, marked read
				 * in ring_reads when it is a packet socket */
	__u32 sched_state;	/* enum sp_sched_state */
	__s32 block_stack;	/* kernel stack id at the switch into SP_ST_BLOCKED_SEND */
	__u64 state_since_ns;	/* when sched_state began */
	__u64 oncpu_since_ns;	/* start of the current on-CPU segment */
	__u64 last_send_ns;	/* entry time of the previous send call, for the gap histogram */
	__u64 first_send_ns;	/* entry time of the first packet send */
	__u64 last_pkt_ns;	/* entry time of the latest call that sent packets */
	/* time budget, ns */
	__u64 oncpu_send_ns;	/* on CPU inside send syscalls */
	__u64 oncpu_other_ns;	/* on CPU elsewhere: user code, pacing loops, other syscalls */
	__u64 blocked_send_ns;	/* off CPU of its own accord inside send syscalls */
	__u64 sleep_ns;		/* off CPU of its own accord elsewhere */
	__u64 runq_ns;		/* runnable but not running: preempted or waiting after wake-up */
	__u64 wakeup_ns;	/* the part of runq_ns that followed a wake-up (SP_ST_WOKEN) */
	/* the time budget above at the entry of the first call that sent packets, and at the exit
	 * of the latest one: their difference is the thread's budget over its own send window */
	struct sp_budget at_first_send;
	struct sp_budget at_last_send;
	/* send syscalls on network sockets */
	__u64 calls;
	__u64 packets;		/* datagrams/frames accepted by the kernel */
	__u64 bytes;
	__u64 failed_calls;
	__u64 gap_sum_ns;	/* sum of the gaps counted in gap[] */
	__u64 gap_count;
	/* send syscalls on unix sockets (IPC between family members) */
	__u64 ipc_calls;
	__u64 ipc_bytes;
	/* receive syscalls on network sockets (recvfrom, recvmsg, recvmmsg, read) */
	__u64 recv_calls;	/* on datagram and packet sockets, failed ones (EAGAIN) included */
	__u64 recv_failed_calls;
	__u64 recv_packets;	/* messages read: 1 per successful call, recvmmsg's count */
	__u64 recv_bytes;	/* bytes of those messages */
	__u64 recv_stream_calls;	/* on stream sockets (TCP), failed ones included */
	__u64 recv_stream_bytes;
	/* packets read by class of length (when classes are configured), and the thread's on-CPU
	 * time from each such read's exit to its next receive's entry, charged to that class */
	__u32 rx_class;		/* in flight: class + 1 of the last message read, 0 when none */
	__u32 rx_class_pad;
	__u64 rx_class_mark_ns;	/* the thread's on-CPU total at that read's exit */
	__u64 recv_class_packets[SP_RECV_CLASSES];
	__u64 recv_class_bytes[SP_RECV_CLASSES];
	__u64 recv_class_oncpu_ns[SP_RECV_CLASSES];
	/* connect(2) on TCP sockets: connection attempts, also counted in calls (and, when their
	 * SYN went out, in packets; when it did not, in failed_calls and errors[]) */
	__u64 connect_calls;
	__u64 connect_syns;	/* returned 0 or EINPROGRESS, or an answer to the SYN */
	__u64 connect_answered;	/* of those, returned an error only a sent SYN earns: ECONNREFUSED
				 * (the port's RST), ETIMEDOUT, EHOSTUNREACH (no neighbour) */
	__u64 errors[SP_ERRNO_SLOTS];	/* failed network sends (and connects) by errno */
	__u64 latency[SP_HIST_BUCKETS];	/* network send syscall duration, ns */
	__u64 gap[SP_HIST_BUCKETS];	/* time between consecutive network send entries, ns */
};

/* Where a family thread's record is: entry tid % 4096 of the shared `tid_slots` array names
 * the slot of `threads` of one thread with those low bits (tid 0: none). */
struct sp_tid_slot {
	__u32 tid;
	__u32 slot;
};

/* A process of the target family, keyed by tgid in the shared `family` map. */
struct sp_member {
	__u32 ppid;
	__u32 flags;		/* SP_MEMBER_* */
	__u64 start_ns;		/* task start time (boot-based), to tell reused pids apart */
};

#define SP_MEMBER_ROOT 1	/* named by the user (-p, or the command of `run`) */

/* Packet classes of a drop. */
enum sp_drop_class {
	SP_CLASS_UNRELATED = 0,
	SP_CLASS_TARGET_LOSS = 1,	/* the target's own outgoing packet died */
	SP_CLASS_EXPECTED = 2,		/* normal for a scan: probe or reply met no socket, or a
					 * probe reached the TCP layer where it arrived */
	SP_CLASS_REPLY_LOSS = 3,	/* a reply to the target died for another reason */
	SP_CLASS_REPLY_SIDE = 4,	/* expected reply-side traffic, not sent by the target: the
					 * kernel's own replies (TCP RST, ICMP error) to the target's
					 * peers, replies purged unread when a target socket closed */
};

/* Key of the per-CPU `drops` map: one row per distinct drop. */
struct sp_drop_key {
	__u64 location;		/* kernel text address that freed the skb */
	__u32 reason;		/* enum skb_drop_reason of the running kernel */
	__u32 ifindex;
	__u32 netns;		/* network namespace inode number, 0 if unknown */
	__u32 tgid;		/* attributed target process, 0 if none */
	__u32 class;		/* enum sp_drop_class */
	__u32 pad;
};

/* Why a UDP socket of the family refused a datagram (udp:udp_fail_queue_rcv_skb's rc). */
enum sp_udp_refusal {
	SP_UDP_RCVBUF = 0,	/* -ENOMEM: its receive buffer was full (Udp RcvbufErrors) */
	SP_UDP_MEMORY = 1,	/* any other error: the protocol's memory (Udp MemErrors) */
};

/* Key of the per-CPU `udp_refused` map: datagrams refused at one family process's UDP sockets. */
struct sp_udp_refused_key {
	__u32 tgid;		/* the process the socket is registered to (target_socks) */
	__u32 netns;		/* the socket's network namespace inode number */
	__u32 kind;		/* enum sp_udp_refusal */
	__u32 pad;
};

/* Value of the `udp_refused` map, per CPU. */
struct sp_udp_refused {
	__u64 refused;		/* datagrams refused, each counted once */
	__u64 moved;		/* of those, the ones whose drop row the drop program had counted as
				 * somebody else's and on_udp_fail moved to the family's (kernels
				 * without rx_sk, where a drop at a socket is charged by the
				 * packet's source only); 0 where kfree_skb has rx_sk */
};

/* Key of the per-CPU `devs` map: traffic through one device, split target / everyone. */
struct sp_dev_key {
	__u32 ifindex;
	__u32 netns;
	__u32 tgid;		/* target process whose packets these are, 0 for all others */
	__u32 pad;
};

struct sp_dev_stats {
	__u64 queued;		/* net_dev_queue: entered dev_queue_xmit */
	__u64 enqueued;		/* qdisc_enqueue */
	__u64 dequeued;		/* qdisc_dequeue, packets */
	__u64 xmit_ok;		/* net_dev_xmit with rc == NETDEV_TX_OK */
	__u64 xmit_busy;	/* rc == NETDEV_TX_BUSY */
	__u64 xmit_err;		/* any other rc */
	__u64 xmit_bytes;
	__u64 neigh_started;	/* neighbour resolutions the target's sends started */
	__u64 neigh_queued;	/* packets queued waiting for resolution */
	__u64 neigh_resolved;
	__u64 neigh_failed;
};

/* Deepest a device's qdisc got since user space last read (and deleted) the row. */
struct sp_qdepth {
	__u64 qlen_max;		/* packets */
	__u64 backlog_max;	/* bytes */
};

/* Name of a device and the kind of its root qdisc (`Qdisc_ops.id`: "tbf", "pfifo_fast",
 * "noqueue"...), both read on the device's first sight, keyed by (ifindex, netns) in the
 * `devnames` map (tgid and pad are 0). */
struct sp_dev_name {
	char name[16];
	char qdisc[16];
};

/* Key of the `block_sites` map: time a process spent blocked in send, by kernel stack. */
struct sp_block_key {
	__u32 tgid;
	__s32 stack_id;
};

struct sp_block_val {
	__u64 ns;
	__u64 count;
};

/* Remote address the target sent to (IPv4 in the first 4 bytes, or IPv6), for the `flows` map. */
struct sp_flow_key {
	__u8 addr[16];
	__u32 family;
};

/* Records on the ring buffer: rare things only. */
enum sp_event_kind {
	SP_EV_FORK = 1,		/* a family process created a new process */
	SP_EV_EXEC = 2,		/* a family process exec'd */
	SP_EV_EXIT = 3,		/* a family process exited (its last thread) */
	SP_EV_BLOCK = 4,	/* a blocking episode inside send longer than the threshold */
	SP_EV_DROP_PKT = 5,	/* a family packet's drop, with its header (struct sp_drop_pkt) */
};

struct sp_event {
	__u64 ts_ns;
	__u32 kind;		/* enum sp_event_kind */
	__u32 tgid;
	__u32 tid;
	__u32 ppid;
	__u64 start_ns;		/* task start time */
	__u64 duration_ns;	/* SP_EV_BLOCK */
	__s32 stack_id;		/* SP_EV_BLOCK */
	__s32 exit_code;	/* SP_EV_EXIT */
	char comm[SP_COMM_LEN];
	char path[SP_PATH_LEN];	/* SP_EV_EXEC: the file exec'd */
};

/*
 * Which of the family's drops (classes target_loss, reply_loss, expected) stream their header:
 * the i-th drop (from 1) of a drop-table row on a CPU (the row's per-CPU counter in `drops`) is
 * kept when i <= SP_PKT_FIRST, or when i is a multiple of SP_PKT_EVERY (a power of two) and
 * i <= SP_PKT_UNTIL. So a row keeps at most SP_PKT_FIRST + SP_PKT_UNTIL / SP_PKT_EVERY records
 * per CPU, and the drop table's counts say how many were not kept.
 */
enum sp_pkt_sampling {
	SP_PKT_HDR = 128,	/* bytes copied from the network header on */
	SP_PKT_FIRST = 64,
	SP_PKT_EVERY = 256,
	SP_PKT_UNTIL = 1048576,
};

/* Flags of an sp_drop_pkt. */
enum sp_pkt_flags {
	SP_PKT_NO_NETWORK_HEADER = 1,	/* dropped before the network header was set: no bytes */
	SP_PKT_READ_FAILED = 2,		/* the copy faulted: no bytes */
};

/* A family packet's drop with its first bytes, on the `events` ring buffer. Starts like
 * sp_event (ts_ns, kind), so the reader tells the two apart by kind. */
struct sp_drop_pkt {
	__u64 ts_ns;		/* CLOCK_MONOTONIC of the drop */
	__u32 kind;		/* SP_EV_DROP_PKT */
	__u32 cur_tgid;		/* the task the drop ran in (often not the family's: softirq) */
	struct sp_drop_key key;	/* the drop table's row */
	__u64 seq;		/* i: this drop's number in its row on this CPU */
	__u32 len;		/* bytes from the network header to the end of the packet */
	__u32 cap_len;		/* bytes valid in data */
	__u32 flags;		/* enum sp_pkt_flags */
	__u32 pad;
	char comm[SP_COMM_LEN];	/* comm of cur_tgid's thread */
	__u8 data[SP_PKT_HDR];	/* the packet from its network header (IPv4 or IPv6) */
};

/* Slots of retrans.bpf.c's per-CPU `syn_retrans` counter. */
enum sp_retrans_slot {
	SP_RT_SYN_SENT = 0,	/* SYNs the kernel retransmitted for a family connect (sent) */
	SP_RT_MAX = 1,
};

/* Kinds of packet counted by replies.bpf.c: what arrived at the host from an address the family
 * sent to, on a device its packets used, by protocol and what the header says. A TCP SYN alone
 * or an ICMP echo request is a probe, not a reply, and is not counted. */
enum sp_reply_kind {
	SP_RK_TCP_SYNACK = 0,		/* TCP SYN+ACK: an open port */
	SP_RK_TCP_RST = 1,		/* TCP RST: a closed port */
	SP_RK_TCP_OTHER = 2,		/* other TCP with ACK or FIN (a connection's traffic) */
	SP_RK_ICMP_UNREACH = 3,		/* ICMP/ICMPv6 destination unreachable */
	SP_RK_ICMP_ECHO_REPLY = 4,	/* ICMP/ICMPv6 echo reply */
	SP_RK_ICMP_OTHER = 5,		/* other ICMP errors and replies (time exceeded, timestamp) */
	SP_RK_UDP = 6,			/* UDP */
	SP_RK_OTHER = 7,		/* any other protocol */
	SP_RK_UDP_LOOPBACK = 8,		/* UDP on a loopback device: a probe or a reply, not told apart */
	SP_RK_MAX = 9,
};

/* Indices of the per-CPU `health` counters. */
enum sp_health {
	SP_H_RB_LOST = 0,	/* ring buffer reservations that failed: records lost */
	SP_H_DROPS_FULL = 1,	/* drops not counted because the drops map was full */
	SP_H_DEVS_FULL = 2,
	SP_H_THREADS_FULL = 3,	/* family threads that could not be tracked */
	SP_H_SITES_FULL = 4,
	SP_H_EVENTS = 5,	/* tracepoint hits that did work for scanprof */
	SP_H_DROP_RUNS = 6,	/* runs of the kfree_skb program (checked against perf's count of
				 * the tracepoint's hits) */
	SP_H_UNMATCHED = 7,	/* socket-less packets on the family's path, to a destination of
				 * its, that matched no packet it sent: counted as unrelated */
	SP_H_MISSED_SWITCHES = 8, /* a family thread found running while its record said it was
				 * off the CPU, or off while it said running: a context switch of
				 * its the kernel gave no program */
	SP_H_UNPLACED_NS = 9,	/* the time those switches leave unplaced in the thread's budget,
				 * ns */
	SP_H_MAX = 10,
};

/* The reason a drop is counted under where the kernel's kfree_skb gives none (before 5.17):
 * user space names it NOT_SPECIFIED, as later kernels name a plain kfree_skb, and its location
 * says the rest. A datagram a family UDP socket refused (udp_fail_queue_rcv_skb's rc, with the
 * socket in hand) is named by that refusal instead, as later kernels name it: SOCKET_RCVBUFF
 * (its buffer full) or PROTO_MEM. */
enum sp_reason_fill {
	SP_REASON_NOT_GIVEN = 0,
	SP_REASON_FILL_RCVBUFF = 1,
	SP_REASON_FILL_PROTO_MEM = 2,
};

/*
 * Indices of the per-CPU `prog_cost` counters: one per program that can run on a family thread
 * (src/probes/stats.rs names each "object.program"). Counted only while user space has timing
 * on (`cost_timing`), which it keeps on exactly while it reads the kernel's run-time statistics.
 */
enum sp_prog {
	SP_PROG_FORK = 0,
	SP_PROG_EXEC = 1,
	SP_PROG_EXIT = 2,
	SP_PROG_SYS_ENTER = 3,
	SP_PROG_SYS_EXIT = 4,
	SP_PROG_SWITCH = 5,
	SP_PROG_WAKEUP = 6,
	SP_PROG_WAKEUP_NEW = 7,
	SP_PROG_DEV_QUEUE = 8,
	SP_PROG_QDISC_ENQUEUE = 9,
	SP_PROG_QDISC_DEQUEUE = 10,
	SP_PROG_DEV_START_XMIT = 11,
	SP_PROG_DEV_XMIT = 12,
	SP_PROG_NEIGH_SEND = 13,
	SP_PROG_NEIGH_TIMER = 14,
	SP_PROG_NEIGH_UPDATE = 15,
	SP_PROG_KFREE_SKB = 16,
	SP_PROG_KFREE_SKB_NORX = 17,
	SP_PROG_UPROBE_ENTRY = 18,
	SP_PROG_UPROBE_RETURN = 19,
	SP_PROG_KFREE_SKB_NOREASON = 20,
	SP_PROG_SWITCH_NOSTATE = 21,
	SP_PROG_REPLY = 22,
	SP_PROG_UDP_FAIL = 23,
	SP_PROG_CLOSE = 24,
	SP_PROG_EXIT_SOCKS = 25,
	SP_PROG_RAW_ENTER = 26,
	SP_PROG_RAW_EXIT = 27,
	SP_PROG_GETSOCKOPT = 28,
	SP_PROG_SYN_RETRANS = 29,
	SP_PROG_MAX = 30,
};

/* One program's runs on the family's threads (the task on the CPU is a family thread: the run
 * is part of that thread's on-CPU time), while timing was on. */
struct sp_prog_cost {
	__u64 runs;
	__u64 run_ns;	/* from the program's entry check to its return, ns (bpf_ktime_get_ns) */
};

/*
 * Scanner uprobes (uprobes.bpf.c): one program pair serves every probe a profile names. The attach
 * cookie's low 32 bits are the probe's index into `uprobe_cfg`, set by user space before
 * attaching; the bits above say what kind of link it is.
 */
#define SP_UPROBE_MAX 64
#define SP_UP_COOKIE_AHEAD (1ULL << 32)	/* a link for every process running the file */
#define SP_UP_COOKIE_HANDOVER (1ULL << 33)	/* a pinned link taking over from an ahead link */
#define SP_UPROBE_ARGS 6
#define SP_UPROBE_BUF 256
#define SP_UPROBE_NO_ARG 0xff

/* Flags of an sp_uprobe_cfg. */
#define SP_UP_RECORD 1		/* stream a record per call (rare probes); else only count */
#define SP_UP_BUFFER 2		/* copy bytes behind a pointer argument into the record */

struct sp_uprobe_cfg {
	__u32 flags;		/* SP_UP_* */
	__u8 ptr_arg;		/* register index of the pointer (SP_UP_BUFFER) */
	__u8 len_arg;		/* register index of the length, SP_UPROBE_NO_ARG for max_bytes */
	__u16 max_bytes;	/* at most SP_UPROBE_BUF */
};

/* Per probe, per CPU: calls from the family and time inside the function. */
struct sp_uprobe_stats {
	__u64 hits;		/* entries */
	__u64 returns;		/* returns matched to an entry */
	__u64 inside_ns;	/* entry to return, summed */
};

enum sp_ucall_kind {
	SP_UCALL_ENTRY = 1,
	SP_UCALL_RETURN = 2,
};

/* One call of a rare probe, on the `calls` ring buffer (entry, and return when it returns). */
struct sp_call {
	__u64 ts_ns;
	__u32 kind;		/* enum sp_ucall_kind */
	__u32 probe;		/* index into uprobe_cfg */
	__u32 tgid;
	__u32 tid;
	__u64 args[SP_UPROBE_ARGS];	/* entry: argument registers */
	__u64 ret;		/* return: the return register */
	__u64 inside_ns;	/* return: time since the matching entry, 0 if none */
	__u64 packets;		/* the calling thread's packets sent so far (threads map) */
	__u64 last_pkt_ns;	/* and the entry time of its latest packet send */
	__u32 buf_len;		/* bytes valid in buf */
	__u32 pad;
	__u8 buf[SP_UPROBE_BUF];
};

/* One packet socket of the family, as the rings iterator (rings.bpf.c) finds it when user space
 * reads it: the kernel's own counters of the socket. tp_packets and tp_drops are cleared when
 * the owner reads PACKET_STATISTICS (libpcap's pcap_stats): user space accumulates across a clear. */
struct sp_ring {
	__u64 sock;		/* struct sock *: the socket's identity while it lives */
	__u64 ino;		/* the socket's inode number (/proc/PID/fd: socket:[ino]) */
	__u32 tgid;
	__u32 fd;
	__u32 tp_packets;	/* frames queued to the ring (or receive queue) since the last clear */
	__u32 tp_drops;		/* frames dropped since the last clear: ring full, mostly */
	__u32 version;		/* TPACKET_V1, V2, V3: 0, 1, 2 */
	__u32 rx_ring;		/* 1 when a receive ring is mapped (PACKET_RX_RING) */
	__u32 frame_size;	/* bytes per frame (V1/V2) */
	__u32 frame_nr;		/* frames in the ring (V1/V2: frame_max + 1) */
	__u32 block_size;	/* bytes per block */
	__u32 block_nr;		/* blocks in the ring */
	__u32 ifindex;		/* the device it is bound to, 0: every device */
	__u32 rcvbuf;		/* sk_rcvbuf: the receive queue's limit without a ring, bytes */
	/* What the family's own PACKET_STATISTICS reads returned (struct sp_ring_reads), read in
	 * the same run as tp_packets and tp_drops: queued + tp_packets and owner_drops + tp_drops
	 * are the socket's counts since its first such read or since it opened */
	__u64 owner_queued;	/* sum of tp_packets - tp_drops over those reads */
	__u64 owner_drops;	/* sum of tp_drops over those reads */
	__u32 owner_reads;	/* reads whose counts were captured */
	__u32 owner_unread;	/* reads that cleared the counters but whose counts could not be
				 * read (optlen under 8, a fault): frames lost to scanprof */
	__u32 settled;		/* 0: a family PACKET_STATISTICS read ran during this record's read,
				 * so the counters and the sums may disagree: read again */
	__u32 recv_read;	/* 1: a family thread made a receive syscall on it (without a ring,
				 * the only way to read it); a ring is read without syscalls */
	__u32 netns;		/* its network namespace (inode): the devices it may be bound to */
	__u32 outgoing;		/* 1: the kernel gives it a copy of every frame sent on its devices
				 * (PACKET_OUTGOING): bound to every protocol (ETH_P_ALL), without
				 * PACKET_IGNORE_OUTGOING */
	__u32 filtered;		/* 1: a socket filter (SO_ATTACH_FILTER: libpcap's pcap_setfilter)
				 * decides which frames it takes */
	__u32 sent;		/* 1: a family thread sent on it (its own frames are not copied
				 * back to it) */
};

/*
 * The family's PACKET_STATISTICS reads of one packet socket (getsockopt(SOL_PACKET,
 * PACKET_STATISTICS), libpcap's pcap_stats), keyed by struct sock * in the `ring_reads` map:
 * send_path adds what each read returned at its exit; the rings iterator reports the sums
 * beside the socket's counters. `enters` moves at the entry (before the kernel clears the
 * counters), `exits` after the sums grew: a reader that sees both equal and unchanged around its
 * read of the counters saw no read half done.
 */
struct sp_ring_reads {
	__u64 ino;		/* the socket's inode: a struct sock reused by another socket starts over */
	__u64 queued;		/* sum of tp_packets - tp_drops returned */
	__u64 drops;		/* sum of tp_drops returned */
	__u32 enters;		/* reads entered */
	__u32 exits;		/* reads returned (whatever their result) */
	__u32 reads;		/* returned 0 with counts read */
	__u32 unread;		/* returned 0, counts not readable */
	__u32 recv_read;	/* 1: a family thread made a receive syscall on the socket */
	__u32 sent;		/* 1: a family thread made a send syscall on the socket */
	/* The socket's counters as it closed (rings.bpf.c, at each family close(2) of a
	 * descriptor of it, and at its process's exit): what came since the last clear, which its release
	 * throws away */
	__u32 closed;		/* closes that read the two below (the latest wrote them); 0: none */
	__u32 closed_packets;	/* tp_packets then: frames queued since the last clear */
	__u32 closed_drops;	/* tp_drops then: frames dropped since the last clear */
	/* Its receive ring then, as struct sp_ring has it: a socket the rings iterator saw only
	 * before its owner set up the ring (PACKET_RX_RING) is known by its kind at close */
	__u32 closed_rx_ring;	/* 1: it had a receive ring (mmap'd TPACKET ring) */
	__u32 closed_version;	/* TPACKET_V1, V2, V3: 0, 1, 2 */
	__u32 closed_frame_nr;	/* frames in the ring (V1/V2: frame_max + 1), 0 without one */
	__u32 closed_frame_size;	/* bytes a frame (V1/V2) */
	__u32 closed_block_size;	/* bytes a block */
	__u32 closed_block_nr;	/* blocks */
	/* Who closed it: a socket opened and closed between two runs of the rings iterator is
	 * known only by this record, so the record names its process and descriptor */
	__u32 closed_tgid;	/* the process that closed it (or exited holding it) */
	__u32 closed_fd;	/* the descriptor closed (at an exit: the one read) */
	__u32 closed_pad;
};

/* Bytes of an exec'd file's path an sp_exec record keeps (longer paths are cut). */
#define SP_EXEC_PATH 256

/*
 * One exec anywhere on the host (exec_watch.bpf.c, for `scanprof agent`): which process now runs
 * which file. The agent reads the command line from /proc and decides whether it is a scanner.
 */
struct sp_exec {
	__u64 ts_ns;		/* bpf_ktime_get_ns() at the exec */
	__u32 tgid;		/* the process that exec'd */
	__u32 ppid;		/* its parent's tgid (real_parent) */
	char comm[16];		/* its comm after the exec */
	char path[SP_EXEC_PATH];	/* the file it exec'd, as given to execve (cut to SP_EXEC_PATH - 1) */
};

#endif /* SCANPROF_WIRE_H */
