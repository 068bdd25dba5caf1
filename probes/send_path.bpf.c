// SPDX-License-Identifier: GPL-2.0
/*
 * Send syscalls of the target family: calls, packets, bytes, errors by errno, duration and gap
 * histograms per thread, and the sockets used (so later stages can attribute packets to the
 * target even in softirq context). Receive syscalls of the family: calls, messages and bytes
 * read, and the sockets read from, bound or configured (so drops at them are the family's).
 * The family's PACKET_STATISTICS reads of its packet sockets: what each returned, which the
 * read cleared in the kernel (ring_reads, for the rings iterator).
 * Hooked at tp_btf/sys_enter+sys_exit (the default: every syscall runs them), or at the
 * per-syscall tracepoints of the calls it reads (no other syscall does): see the end of the file.
 */
#include "shared.h"

char LICENSE[] SEC("license") = "GPL";

#define S_IFMT 00170000
#define S_IFSOCK 0140000
#define MMSG_BYTES_MAX 64

/* x86-64 syscall numbers; other architectures get a different table (see probes.md). */
#define NR_READ 0
#define NR_WRITE 1
#define NR_CLOSE 3
#define NR_WRITEV 20
#define NR_DUP2 33
#define NR_CONNECT 42
#define NR_SENDTO 44
#define NR_RECVFROM 45
#define NR_SENDMSG 46
#define NR_RECVMSG 47
#define NR_BIND 49
#define NR_SETSOCKOPT 54
#define NR_GETSOCKOPT 55
#define NR_DUP3 292
#define NR_RECVMMSG 299
#define NR_SENDMMSG 307
#define NR_CLOSE_RANGE 436

/* A syscall's role for this object, in one switch (every syscall on the machine passes it):
 * a send (enum sp_send_call), a receive (RX_BASE + enum sp_recv_call), or a call that names a
 * socket the family will receive on (bind, setsockopt: SOCK_SETUP), or a getsockopt that may
 * be a PACKET_STATISTICS read (SOCK_STATS). */
#define RX_BASE 16
#define SOCK_SETUP 32
#define SOCK_STATS 33	/* getsockopt: PACKET_STATISTICS, when its level and name say so */

#define SOL_PACKET 263
#define PACKET_STATISTICS 6

static __always_inline __u32 call_of(long id)
{
	switch (id) {
	case NR_SENDTO: return SP_CALL_SENDTO;
	case NR_SENDMSG: return SP_CALL_SENDMSG;
	case NR_SENDMMSG: return SP_CALL_SENDMMSG;
	case NR_WRITE: return SP_CALL_WRITE;
	case NR_WRITEV: return SP_CALL_WRITEV;
	case NR_CONNECT: return SP_CALL_CONNECT;
	case NR_RECVFROM: return RX_BASE + SP_RECV_RECVFROM;
	case NR_RECVMSG: return RX_BASE + SP_RECV_RECVMSG;
	case NR_RECVMMSG: return RX_BASE + SP_RECV_RECVMMSG;
	case NR_READ: return RX_BASE + SP_RECV_READ;
	case NR_BIND:
	case NR_SETSOCKOPT: return SOCK_SETUP;
	case NR_GETSOCKOPT: return SOCK_STATS;
	default: return SP_CALL_NONE;
	}
}

/* Calls after which an fd may name another file than before. */
static __always_inline int changes_fds(long id)
{
	return id == NR_CLOSE || id == NR_DUP2 || id == NR_DUP3 || id == NR_CLOSE_RANGE;
}

/* The struct sock behind fd in the current task, 0 if fd is not a socket. */
static __always_inline struct sock *fd_sock(int fd)
{
	/* every read below goes through BPF_CORE_READ: the untrusted pointer serves, and
	 * bpf_get_current_task_btf is 5.11+ */
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	struct fdtable *fdt = BPF_CORE_READ(task, files, fdt);
	struct file **fds, *f;
	struct socket *sock;

	if (fd < 0 || fd >= BPF_CORE_READ(fdt, max_fds))
		return 0;
	fds = BPF_CORE_READ(fdt, fd);
	if (bpf_probe_read_kernel(&f, sizeof(f), &fds[fd]) || !f)
		return 0;
	if ((BPF_CORE_READ(f, f_inode, i_mode) & S_IFMT) != S_IFSOCK)
		return 0;
	sock = BPF_CORE_READ(f, private_data);
	return sock ? BPF_CORE_READ(sock, sk) : 0;
}

static __always_inline __u32 sock_kind(struct sock *sk)
{
	switch (BPF_CORE_READ(sk, __sk_common.skc_family)) {
	case 2:		/* AF_INET */
	case 10:	/* AF_INET6 */
	case 17:	/* AF_PACKET */
		return SP_SOCK_NET;
	case 1:		/* AF_UNIX */
		return SP_SOCK_IPC;
	default:
		return SP_SOCK_NONE;
	}
}

/* Whether sk is a TCP socket (IPv4 or IPv6): its connect(2) is a connection attempt. A connect
 * on anything else (UDP: a route lookup, AF_UNIX: IPC) is not a packet. */
static __always_inline int is_tcp(struct sock *sk)
{
	__u16 family = BPF_CORE_READ(sk, __sk_common.skc_family);

	return (family == 2 || family == 10) && BPF_CORE_READ(sk, sk_type) == 1 /* SOCK_STREAM */ &&
	       BPF_CORE_READ(sk, sk_protocol) == 6 /* IPPROTO_TCP */;
}

/* Errors a connect(2) returns only after its SYN went out: the RST of a closed port, no answer,
 * no neighbour for the next hop. Others (EADDRNOTAVAIL, ENETUNREACH, EACCES...) fail before. */
static __always_inline int answered_syn(long err)
{
	return err == 111 /* ECONNREFUSED */ || err == 110 /* ETIMEDOUT */ ||
	       err == 113 /* EHOSTUNREACH */;
}

/* Copies the thread's time budget, accounted up to the current moment by the caller. */
static __always_inline void budget_at(const struct sp_thread *t, struct sp_budget *b)
{
	b->send_ns = t->oncpu_send_ns;
	b->other_ns = t->oncpu_other_ns;
	b->blocked_send_ns = t->blocked_send_ns;
	b->sleep_ns = t->sleep_ns;
	b->runq_ns = t->runq_ns;
	b->wakeup_ns = t->wakeup_ns;
}

/* The socket behind fd and its kind, from the thread's cache while the family's fds have not
 * changed, or from its receive cache when that holds fd, else from the fd table (and cached). */
static __always_inline __u64 thread_sock(struct sp_thread *t, int fd, __u32 *kind)
{
	__u64 g = gen_now(&fd_gen) + 1;
	struct sock *sk;

	if (t->fd_cache_gen == g && t->fd_cache_fd == fd) {
		*kind = t->fd_cache_kind;
		return t->fd_cache_sk;
	}
	if (t->rx_cache_gen == g && t->rx_cache_fd == fd && t->rx_cache_kind != SP_RX_NONE) {
		/* just configured (a connect scanner's setsockopt before each connect): a network
		 * socket, resolved then; no second walk of the fd table */
		sk = (struct sock *)t->rx_cache_sk;
		*kind = SP_SOCK_NET;
	} else {
		sk = fd_sock(fd);
		*kind = sk ? sock_kind(sk) : SP_SOCK_NONE;
	}
	t->fd_cache_sk = (__u64)sk;
	t->fd_cache_kind = *kind;
	t->fd_cache_fd = fd;
	t->fd_cache_gen = g;
	return (__u64)sk;
}

/* What a receive on sk reads: packets, a byte stream, or nothing scanprof counts. */
static __always_inline __u32 recv_kind_of(struct sock *sk)
{
	if (sock_kind(sk) != SP_SOCK_NET)
		return SP_RX_NONE;
	return BPF_CORE_READ(sk, sk_type) == 1 /* SOCK_STREAM */ ? SP_RX_STREAM : SP_RX_DGRAM;
}

/* The socket behind fd for a receive, from the thread's receive cache (as thread_sock). */
static __always_inline __u64 thread_rx_sock(struct sp_thread *t, int fd, __u32 *kind)
{
	__u64 g = gen_now(&fd_gen) + 1;
	struct sock *sk;

	if (t->rx_cache_gen == g && t->rx_cache_fd == fd) {
		*kind = t->rx_cache_kind;
		return t->rx_cache_sk;
	}
	sk = fd_sock(fd);
	*kind = sk ? recv_kind_of(sk) : SP_RX_NONE;
	t->rx_cache_sk = (__u64)sk;
	t->rx_cache_kind = *kind;
	t->rx_cache_fd = fd;
	t->rx_cache_gen = g;
	return (__u64)sk;
}

/* Classes of packets read, by message length (set before load; 0 classes: off, and the
 * verifier drops the code). A message of n bytes is class i, the number of bounds <= n. */
const volatile __u32 rx_classes = 0;
const volatile __u32 rx_class_bounds[SP_RECV_CLASSES - 1] = {};

/* The thread's on-CPU time so far: its accounted time and the open on-CPU segment. */
static __always_inline __u64 oncpu_total(struct sp_thread *t, __u64 now)
{
	__u64 total = t->oncpu_send_ns + t->oncpu_other_ns;

	if (off_cpu_state(t))
		missed_switch_in(t, now);
	if (t->sched_state == SP_ST_RUNNING)
		total += now - t->oncpu_since_ns;
	else if (t->sched_state == SP_ST_UNKNOWN) {
		/* first sight since attach: a thread in a syscall is on a CPU */
		t->sched_state = SP_ST_RUNNING;
		t->state_since_ns = now;
		t->oncpu_since_ns = now;
	}
	return total;
}

/* A receive begins: the time since the last message read was handling it. */
static __always_inline void rx_class_charge(struct sp_thread *t)
{
	__u32 c = t->rx_class;

	if (!c)
		return;
	t->rx_class = 0;
	/* c is 1..SP_RECV_CLASSES here; the mask (a power of two) keeps the index provably in
	 * range for every verifier: 6.1's lost the bound of c - 1 ("R2 unbounded memory access") */
	if (c <= SP_RECV_CLASSES)
		t->recv_class_oncpu_ns[(c - 1) & (SP_RECV_CLASSES - 1)] +=
			oncpu_total(t, bpf_ktime_get_ns()) - t->rx_class_mark_ns;
}

/* A message of `len` bytes was read: its class counts it, and its handling starts now. */
static __always_inline void rx_class_read(struct sp_thread *t, __u64 len)
{
	__u32 c = 0;

	for (int i = 0; i < SP_RECV_CLASSES - 1; i++)
		if (i < rx_classes - 1 && len >= rx_class_bounds[i])
			c = i + 1;
	c &= SP_RECV_CLASSES - 1;	/* 0..SP_RECV_CLASSES - 2 already: for the verifier */
	t->recv_class_packets[c] += 1;
	t->recv_class_bytes[c] += len;
	t->rx_class = c + 1;
	t->rx_class_mark_ns = oncpu_total(t, bpf_ktime_get_ns());
}

/* Set once a family thread has received from, bound or configured a network socket. Until
 * then a read(2), the machine's most common syscall, leaves after this one load instead of the
 * family lookup (measured: +20 ns per read on every process without it). */
__u32 rx_armed = 0;

/* Registers a socket the family receives on in target_socks (once per thread and socket, or
 * again when the entry belongs to another process: a freed struct sock is soon reused), so that
 * drops before the read (SOCKET_RCVBUFF, a packet socket's ring) are classed as the family's. */
static __always_inline void rx_register(struct sp_thread *t, __u64 skp)
{
	__u32 *owner, tgid;

	if (t->recv_sk == skp)
		return;
	owner = bpf_map_lookup_elem(&target_socks, &skp);
	if (!owner || *owner != t->tgid) {
		tgid = t->tgid;
		sock_filter_add(skp);
		bpf_map_update_elem(&target_socks, &skp, &tgid, BPF_ANY);
		gen_bump(&sock_gen);
	}
	t->recv_sk = skp;
	if (!rx_armed)
		rx_armed = 1;
}

/* A receive syscall on sk by a family thread: when sk is a packet socket, its ring_reads entry
 * says it is read. A packet socket without a ring can only be read by such syscalls, and one
 * that nobody reads (zmap's send socket, bound to every protocol, queues every frame until its
 * queue is full) is not a listener missing frames (the rings iterator reports the mark). Once
 * per thread and socket: a reader's later receives leave after one compare. */
static __always_inline void packet_read_mark(struct sp_thread *t, __u64 skp)
{
	struct sock *sk = (struct sock *)skp;
	struct sp_ring_reads *e;
	__u64 ino;

	if (t->recv_read_sk == skp)
		return;
	t->recv_read_sk = skp;
	if (BPF_CORE_READ(sk, __sk_common.skc_family) != 17 /* AF_PACKET */)
		return;
	ino = BPF_CORE_READ(sk, sk_socket, file, f_inode, i_ino);
	e = ring_reads_entry(skp, ino);
	if (e)
		e->recv_read = 1;
}

/* A send syscall on sk by a family thread, sk new to the thread: when sk is a packet socket,
 * its ring_reads entry says it sends. The kernel copies frames sent on a device to the packet
 * sockets bound to every protocol, except to the socket that sent them: the rings iterator
 * reports the mark, so that the family's frames sent through a listening socket are not taken
 * for copies it was given. */
static __always_inline void packet_send_mark(__u64 skp)
{
	struct sock *sk = (struct sock *)skp;
	struct sp_ring_reads *e;
	__u64 ino;

	if (BPF_CORE_READ(sk, __sk_common.skc_family) != 17 /* AF_PACKET */)
		return;
	ino = BPF_CORE_READ(sk, sk_socket, file, f_inode, i_ino);
	e = ring_reads_entry(skp, ino);
	if (e)
		e->sent = 1;
}

/* A syscall's arguments as either kind of hook gives them: the raw hook's registers or the
 * per-syscall tracepoint's record. Only the first five: no call read here takes a sixth. */
struct sc_args {
	__u64 a[5];
};

/* The receive half of a syscall's entry: no clock, no budget; a socket read from is registered. */
static __always_inline int recv_enter(const struct sc_args *args, __u32 call)
{
	struct sp_thread *t;
	__u32 kind;
	__u64 skp;

	if (call == RX_BASE + SP_RECV_READ && !rx_armed)
		return 0;
	t = family_thread((__u32)bpf_get_current_pid_tgid());
	if (!t)
		return 0;
	skp = thread_rx_sock(t, (int)args->a[0], &kind);
	if (kind == SP_RX_NONE)
		return 0;
	rx_register(t, skp);
	if (rx_classes && call != SOCK_SETUP)
		rx_class_charge(t);
	if (call != SOCK_SETUP) {
		packet_read_mark(t, skp);
		t->recv_call = call - RX_BASE;
		t->recv_kind = kind;
		t->recv_arg = args->a[1];
	}
	health_inc(SP_H_EVENTS);
	return 0;
}

/* A family thread's PACKET_STATISTICS read in flight, by tid: the socket, where the kernel
 * writes the counts, and the length the caller offered (the kernel writes at most that). */
struct stats_call {
	__u64 sk;
	__u64 optval;
	__s32 len;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, struct stats_call);
} stats_calls SEC(".maps");

/* getsockopt enters: a family thread's PACKET_STATISTICS read of a packet socket (it returns the
 * socket's counters and clears them) is noted, and its socket's entry in ring_reads marked as
 * read in flight before the kernel clears anything. Any other getsockopt leaves after two
 * compares (level, name), or a bit test. */
static __always_inline int stats_enter(const struct sc_args *args)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct stats_call c = {};
	struct sp_ring_reads *e;
	struct sock *sk;
	__u64 skp, ino;

	if (args->a[1] != SOL_PACKET || args->a[2] != PACKET_STATISTICS || !in_family(tid))
		return 0;
	/* once a second or so (libpcap's pcap_stats): the fd table, not the thread's caches */
	sk = fd_sock((int)args->a[0]);
	if (!sk || BPF_CORE_READ(sk, __sk_common.skc_family) != 17 /* AF_PACKET */)
		return 0;
	if (bpf_probe_read_user(&c.len, sizeof(c.len), (void *)args->a[4]))
		return 0;	/* the kernel fails it too (EFAULT), before clearing */
	skp = (__u64)sk;
	ino = BPF_CORE_READ(sk, sk_socket, file, f_inode, i_ino);
	e = ring_reads_entry(skp, ino);
	if (!e)
		return 0;
	c.sk = skp;
	c.optval = args->a[3];
	if (bpf_map_update_elem(&stats_calls, &tid, &c, BPF_ANY))
		return 0;
	/* a full barrier (lock xadd) before the syscall clears the counters */
	__sync_fetch_and_add(&e->enters, 1);
	health_inc(SP_H_EVENTS);
	return 0;
}

/* getsockopt returns: what a noted PACKET_STATISTICS read returned (struct tpacket_stats, or
 * tpacket_stats_v3, which starts the same) joins its socket's sums, then the read counts as
 * returned. tp_packets there is queued + dropped (the kernel adds the drops in). */
static __always_inline int stats_exit(long ret)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct stats_call *c, call;
	struct sp_ring_reads *e;
	__u32 st[2];

	if (!in_family(tid))
		return 0;
	c = bpf_map_lookup_elem(&stats_calls, &tid);
	if (!c)
		return 0;
	call = *c;
	bpf_map_delete_elem(&stats_calls, &tid);
	e = bpf_map_lookup_elem(&ring_reads, &call.sk);
	if (!e)
		return 0;
	if (ret == 0) {
		if (call.len >= (__s32)sizeof(st) &&
		    !bpf_probe_read_user(st, sizeof(st), (void *)call.optval) && st[0] >= st[1]) {
			__sync_fetch_and_add(&e->queued, (__u64)(st[0] - st[1]));
			__sync_fetch_and_add(&e->drops, (__u64)st[1]);
			__sync_fetch_and_add(&e->reads, 1);
		} else {
			__sync_fetch_and_add(&e->unread, 1);
		}
	}
	__sync_fetch_and_add(&e->exits, 1);
	return 0;
}

/* A syscall scanprof reads enters (call: its role, call_of): note which send is in flight, on
 * which socket, and account the on-CPU time so far. Anything but a send by a family thread leaves
 * after a bit test, with no map lookup that is not inlined. */
static __always_inline int syscall_enter(__u32 call, const struct sc_args *args)
{
	struct sp_thread *t;
	__u32 kind, tgid;
	__u64 now, skp;

	if (call >= RX_BASE) {
		if (call == SOCK_STATS)
			return stats_enter(args);
		return recv_enter(args, call);
	}
	t = family_thread((__u32)bpf_get_current_pid_tgid());
	if (!t)
		return 0;
	skp = thread_sock(t, (int)args->a[0], &kind);
	if (kind == SP_SOCK_NONE)
		return 0;
	if (call == SP_CALL_CONNECT && (kind != SP_SOCK_NET || !is_tcp((struct sock *)skp)))
		return 0;
	now = bpf_ktime_get_ns();
	if (off_cpu_state(t))
		missed_switch_in(t, now);
	if (t->sched_state == SP_ST_RUNNING) {
		t->oncpu_other_ns += now - t->oncpu_since_ns;
	} else if (t->sched_state == SP_ST_UNKNOWN) {
		/* first sight since attach: a thread in a syscall is on a CPU */
		t->sched_state = SP_ST_RUNNING;
		t->state_since_ns = now;
	}
	t->oncpu_since_ns = now;
	t->send_call = call;
	t->send_kind = kind;
	t->send_enter_ns = now;
	t->send_arg = args->a[1];
	if (kind == SP_SOCK_NET) {
		/* A new socket for this thread: register it, or take it over from an entry that
		 * outlived its socket (a freed struct sock is soon reused, by the next sender too). */
		__u32 *owner = t->send_sk != skp ? bpf_map_lookup_elem(&target_socks, &skp) : 0;

		if (t->send_sk != skp && (!owner || *owner != t->tgid)) {
			tgid = t->tgid;
			sock_filter_add(skp);
			bpf_map_update_elem(&target_socks, &skp, &tgid, BPF_ANY);
			gen_bump(&sock_gen);
		}
		if (t->send_sk != skp)
			packet_send_mark(skp);
		/* Until a call has sent a packet, each attempt may be the first: its entry is where
		 * the thread's send window begins. The budget is accounted up to `now` here. */
		if (!t->packets)
			budget_at(t, &t->at_first_send);
		if (t->last_send_ns) {
			__u64 gap = now - t->last_send_ns;

			hist_add(t->gap, gap);
			t->gap_sum_ns += gap;
			t->gap_count += 1;
		}
		t->last_send_ns = now;
	}
	t->send_sk = skp;
	health_inc(SP_H_EVENTS);
	return 0;
}

/* Bytes of the first `n` messages of a sendmmsg vector (msg_len of each struct mmsghdr). */
static __always_inline __u64 mmsg_bytes(__u64 vec, long n)
{
	__u64 total = 0;
	__u32 len;

	for (int i = 0; i < MMSG_BYTES_MAX; i++) {
		if (i >= n)
			break;
		if (bpf_probe_read_user(&len, sizeof(len),
					(void *)(vec + i * sizeof(struct mmsghdr) +
						 offsetof(struct mmsghdr, msg_len))))
			break;
		total += len;
	}
	return total;
}

/* The receive half of a syscall's exit: messages (datagram and packet sockets) or bytes
 * (streams). */
static __always_inline int recv_exit(long ret)
{
	struct sp_thread *t;
	__u32 call;

	if (!rx_armed)
		return 0;
	t = family_thread((__u32)bpf_get_current_pid_tgid());
	if (!t || t->recv_call == SP_RECV_NONE)
		return 0;
	call = t->recv_call;
	t->recv_call = SP_RECV_NONE;
	if (t->recv_kind == SP_RX_STREAM) {
		t->recv_stream_calls += 1;
		if (ret > 0)
			t->recv_stream_bytes += ret;
		return 0;
	}
	t->recv_calls += 1;
	if (ret < 0) {
		t->recv_failed_calls += 1;
		return 0;
	}
	if (call == SP_RECV_RECVMMSG) {
		t->recv_packets += ret;
		t->recv_bytes += mmsg_bytes(t->recv_arg, ret);
	} else {
		/* a datagram read is one message, also when empty (a zero-length datagram) */
		t->recv_packets += 1;
		t->recv_bytes += ret;
		/* a batch (recvmmsg) is not classed: its handling cannot be told apart by message */
		if (rx_classes)
			rx_class_read(t, ret);
	}
	return 0;
}

/* A syscall scanprof reads returns (id: its number, call: its role): the send's outcome,
 * duration and packet count, a receive's messages, or a change of the family's fds. */
static __always_inline int syscall_exit(long id, __u32 call, long ret)
{
	struct sp_thread *t;
	__u64 now, d, packets;

	if (call >= RX_BASE) {
		if (call == SOCK_SETUP)
			return 0;
		if (call == SOCK_STATS)
			return stats_exit(ret);
		return recv_exit(ret);
	}
	if (call == SP_CALL_NONE) {
		/* after the call (close releases the fd even when it fails): a send racing it on
		 * another thread cannot cache the old file again */
		if (changes_fds(id) && in_family((__u32)bpf_get_current_pid_tgid()))
			gen_bump(&fd_gen);
		return 0;
	}
	t = family_thread((__u32)bpf_get_current_pid_tgid());
	if (!t || t->send_call == SP_CALL_NONE)
		return 0;
	now = bpf_ktime_get_ns();
	call = t->send_call;
	t->send_call = SP_CALL_NONE;
	if (off_cpu_state(t))
		missed_switch_in(t, now);
	if (t->sched_state == SP_ST_RUNNING) {
		t->oncpu_send_ns += now - t->oncpu_since_ns;
		t->oncpu_since_ns = now;
	}
	if (t->send_kind == SP_SOCK_IPC) {
		t->ipc_calls += 1;
		if (ret > 0)
			t->ipc_bytes += ret;
		return 0;
	}
	d = now - t->send_enter_ns;
	t->calls += 1;
	hist_add(t->latency, d);
	if (call == SP_CALL_CONNECT) {
		/* a connection attempt: one SYN, unless it failed before sending it (EINPROGRESS,
		 * a non-blocking connect's normal answer, is not a failure) */
		t->connect_calls += 1;
		if (ret < 0 && ret != -115 /* EINPROGRESS */) {
			if (!answered_syn(-ret)) {
				t->failed_calls += 1;
				slot_add(t->errors, SP_ERRNO_SLOTS, (__u64)-ret);
				return 0;
			}
			t->connect_answered += 1;
		}
		t->connect_syns += 1;
		ret = 0;
	}
	if (ret < 0) {
		t->failed_calls += 1;
		slot_add(t->errors, SP_ERRNO_SLOTS, (__u64)-ret);
		return 0;
	}
	if (call == SP_CALL_SENDMMSG) {
		packets = ret;
		t->bytes += mmsg_bytes(t->send_arg, ret);
	} else {
		packets = 1;
		t->bytes += ret;
	}
	if (!packets)
		return 0;
	if (!t->packets)
		t->first_send_ns = t->send_enter_ns;
	t->packets += packets;
	t->last_pkt_ns = t->send_enter_ns;
	/* On CPU since the entry or the switch back in: accounted up to `now` above. */
	budget_at(t, &t->at_last_send);
	return 0;
}

/*
 * Two ways to reach the bodies above, one loaded (ProbeOptions::syscall_hooks):
 *
 * on_sys_enter/on_sys_exit, the per-syscall tracepoints (syscalls:sys_enter_sendto and the other
 * calls call_of and changes_fds name, attached by src/probes/syscall_hooks.rs): the kernel runs
 * them only for those calls (its per-syscall bitmap), so every other syscall on the machine runs
 * no program. Each run costs more dispatch than a raw hook's (the kernel builds the record).
 *
 * on_raw_enter/on_raw_exit, tp_btf/sys_enter and sys_exit: the cheapest run, but every syscall of
 * every process runs them and leaves after the switch in call_of.
 */

/* The record of a syscalls:sys_enter_* tracepoint (its format file): the common header, the
 * syscall's number, its arguments. */
struct sc_enter_rec {
	__u64 common;
	__s32 nr;
	__u32 pad;
	__u64 args[6];
};

/* The record of a syscalls:sys_exit_* tracepoint: the common header, the number, the return. */
struct sc_exit_rec {
	__u64 common;
	__s32 nr;
	__u32 pad;
	__s64 ret;
};

/* syscalls:sys_enter_<call> for each call scanprof reads but getsockopt: only those calls run
 * it. It reads three arguments: the kernel attaches a program to a tracepoint only if it reads
 * within the record, and sendmsg, read, bind and others have three. */
SEC("tp/syscalls/sys_enter_sendto")
int on_sys_enter(struct sc_enter_rec *ctx)
{
	__u64 t0 = cost_begin();
	__u32 call = call_of(ctx->nr);

	if (call != SP_CALL_NONE && call != SOCK_STATS) {
		struct sc_args args = { { ctx->args[0], ctx->args[1], ctx->args[2] } };

		syscall_enter(call, &args);
	}
	cost_end(SP_PROG_SYS_ENTER, t0);
	return 0;
}

/* syscalls:sys_enter_getsockopt, the one call whose entry needs five arguments (a
 * PACKET_STATISTICS read: where the kernel writes, and the length offered). */
SEC("tp/syscalls/sys_enter_getsockopt")
int on_getsockopt(struct sc_enter_rec *ctx)
{
	__u64 t0 = cost_begin();
	struct sc_args args = { { ctx->args[0], ctx->args[1], ctx->args[2], ctx->args[3],
				  ctx->args[4] } };

	stats_enter(&args);
	cost_end(SP_PROG_GETSOCKOPT, t0);
	return 0;
}

/* syscalls:sys_exit_<call> for each call whose return scanprof reads (not bind, setsockopt). */
SEC("tp/syscalls/sys_exit_sendto")
int on_sys_exit(struct sc_exit_rec *ctx)
{
	__u64 t0 = cost_begin();
	long id = ctx->nr;

	syscall_exit(id, call_of(id), ctx->ret);
	cost_end(SP_PROG_SYS_EXIT, t0);
	return 0;
}

/* tp_btf/sys_enter: every syscall on the machine comes here and leaves after call_of's switch
 * unless scanprof reads it. */
SEC("tp_btf/sys_enter")
int SP_PROG(SP_PROG_RAW_ENTER, on_raw_enter, struct pt_regs *regs, long id)
{
	__u32 call = call_of(id);

	if (call == SP_CALL_NONE)
		return 0;
	{
		struct sc_args args = { { regs->di, regs->si, regs->dx, regs->r10, regs->r8 } };

		return syscall_enter(call, &args);
	}
}

/* tp_btf/sys_exit: like on_raw_enter, every syscall comes here. */
SEC("tp_btf/sys_exit")
int SP_PROG(SP_PROG_RAW_EXIT, on_raw_exit, struct pt_regs *regs, long ret)
{
	long id = regs->orig_ax;	/* the syscall's number: a plain load of a BTF pointer */

	return syscall_exit(id, call_of(id), ret);
}
