// SPDX-License-Identifier: GPL-2.0
/*
 * Send syscalls of the target family: calls, packets, bytes, errors by errno, duration and gap
 * histograms per thread, and the sockets used (so later stages can attribute packets to the
 * target even in softirq context). tp_btf/sys_enter+sys_exit: the cheapest per-syscall hook here.
 */
#include "shared.h"

char LICENSE[] SEC("license") = "GPL";

#define S_IFMT 00170000
#define S_IFSOCK 0140000
#define MMSG_BYTES_MAX 64

/* x86-64 syscall numbers; other architectures get a different table (see probes.md). */
#define NR_WRITE 1
#define NR_CLOSE 3
#define NR_WRITEV 20
#define NR_DUP2 33
#define NR_SENDTO 44
#define NR_SENDMSG 46
#define NR_DUP3 292
#define NR_SENDMMSG 307
#define NR_CLOSE_RANGE 436

static __always_inline __u32 send_call_of(long id)
{
	switch (id) {
	case NR_SENDTO: return SP_CALL_SENDTO;
	case NR_SENDMSG: return SP_CALL_SENDMSG;
	case NR_SENDMMSG: return SP_CALL_SENDMMSG;
	case NR_WRITE: return SP_CALL_WRITE;
	case NR_WRITEV: return SP_CALL_WRITEV;
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
	struct task_struct *task = bpf_get_current_task_btf();
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
 * changed, else from the fd table (and cached). */
static __always_inline __u64 thread_sock(struct sp_thread *t, int fd, __u32 *kind)
{
	__u64 g = gen_now(&fd_gen) + 1;
	struct sock *sk;

	if (t->fd_cache_gen == g && t->fd_cache_fd == fd) {
		*kind = t->fd_cache_kind;
		return t->fd_cache_sk;
	}
	sk = fd_sock(fd);
	*kind = sk ? sock_kind(sk) : SP_SOCK_NONE;
	t->fd_cache_sk = (__u64)sk;
	t->fd_cache_kind = *kind;
	t->fd_cache_fd = fd;
	t->fd_cache_gen = g;
	return (__u64)sk;
}

/* sys_enter: note which send is in flight, on which socket, and account the on-CPU time so far.
 * Every syscall on the machine comes here: anything but a send by a family thread leaves after
 * a compare and a bit test, with no map lookup that is not inlined. */
SEC("tp_btf/sys_enter")
int BPF_PROG(on_sys_enter, struct pt_regs *regs, long id)
{
	__u32 call = send_call_of(id);
	struct sp_thread *t;
	__u32 kind, tgid;
	__u64 now, skp;

	if (call == SP_CALL_NONE)
		return 0;
	t = family_thread((__u32)bpf_get_current_pid_tgid());
	if (!t)
		return 0;
	skp = thread_sock(t, (int)regs->di, &kind);
	if (kind == SP_SOCK_NONE)
		return 0;
	now = bpf_ktime_get_ns();
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
	t->send_arg = regs->si;
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

/* sys_exit: the send's outcome, duration and packet count. Like sys_enter, every other syscall
 * leaves after a compare. */
SEC("tp_btf/sys_exit")
int BPF_PROG(on_sys_exit, struct pt_regs *regs, long ret)
{
	long id = regs->orig_ax;	/* the syscall's number: a plain load of a BTF pointer */
	struct sp_thread *t;
	__u64 now, d, packets;
	__u32 call;

	if (send_call_of(id) == SP_CALL_NONE) {
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
