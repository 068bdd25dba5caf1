// SPDX-License-Identifier: GPL-2.0
/*
 * The family's packet sockets and their rings (TPACKET_V1/V2/V3, as libpcap, masscan and zmap
 * use them). Reading from a ring makes no syscall, and a frame the kernel drops because the ring
 * is full is freed with consume_skb (6.1) or kfree_skb_reason on an skb still shared with the IP
 * stack (6.2+), so no tracepoint sees it. The socket's own counters (the ones PACKET_STATISTICS
 * returns) do: a task_file iterator, read by user space once per sample, reports them for every
 * packet socket a family process holds. Nothing runs per packet. A PACKET_STATISTICS read
 * clears those counters: what the family's own reads returned (send_path adds it up in
 * ring_reads) comes with them, read so that the two agree.
 *
 * A socket's release throws its counters away, and no tracepoint marks it: what came since the
 * last sample would be lost with a socket closed between two. The counters are read instead at
 * the family's close(2) of a packet socket's descriptor and at its process's exit (both come
 * before the release, in the closing thread), into the socket's ring_reads entry, where user
 * space takes them once the iterator no longer finds the socket, or finds the entry of one it
 * never saw (opened and closed between two samples: the entry names its process).
 */
#include "shared.h"

char LICENSE[] SEC("license") = "GPL";

#define AF_PACKET 17
#define ETH_P_ALL_BE 0x0300	/* htons(ETH_P_ALL) */
#define S_IFMT 00170000
#define S_IFSOCK 0140000
/* Descriptors a process's exit looks at for packet sockets: 0 to SP_EXIT_FDS - 1 (a bounded
 * loop, as older verifiers want it); a socket at a higher one is counted up to its last sample. */
#define SP_EXIT_FDS 1024

/* For the generated skeleton: the record type, so Rust gets it from wire.h. */
struct sp_ring abi_ring;
struct sp_ring_reads abi_ring_reads;

/* Sockets of the family's processes that are packet sockets: one sp_ring each, in the order
 * the kernel walks tasks and their files (every thread of a process shares its files: only the
 * group leader's are reported). */
SEC("iter/task_file")
int sp_rings(struct bpf_iter__task_file *ctx)
{
	struct seq_file *seq = ctx->meta->seq;
	struct task_struct *task = ctx->task;
	struct file *file = ctx->file;
	struct sp_ring r = {};
	struct sp_ring_reads *e;
	struct packet_sock *po;
	__u32 enters = 0, exits = 0;
	struct socket *sock;
	struct sock *sk;
	__u32 tgid;

	if (!task || !file)
		return 0;
	tgid = task->tgid;
	if (task->pid != tgid || !bpf_map_lookup_elem(&family, &tgid))
		return 0;
	sock = bpf_sock_from_file(file);
	if (!sock)
		return 0;
	sk = BPF_CORE_READ(sock, sk);
	if (!sk || BPF_CORE_READ(sk, __sk_common.skc_family) != AF_PACKET)
		return 0;
	po = (struct packet_sock *)sk;
	r.sock = (__u64)sk;
	r.ino = BPF_CORE_READ(file, f_inode, i_ino);
	r.tgid = tgid;
	r.fd = ctx->fd;
	/* The family's own PACKET_STATISTICS reads (send_path) before and after the counters,
	 * as a sequence lock: a read that entered (and so may have cleared them) but had not yet
	 * added what it returned would make the sums and the counters disagree. */
	e = bpf_map_lookup_elem(&ring_reads, &r.sock);
	if (e && e->ino == r.ino) {
		enters = *(volatile __u32 *)&e->enters;
		exits = *(volatile __u32 *)&e->exits;
		r.owner_queued = *(volatile __u64 *)&e->queued;
		r.owner_drops = *(volatile __u64 *)&e->drops;
		r.owner_reads = e->reads;
		r.owner_unread = e->unread;
		r.recv_read = e->recv_read;
		r.sent = e->sent;
	}
	r.tp_packets = BPF_CORE_READ(po, stats.stats1.tp_packets);
	r.tp_drops = BPF_CORE_READ(po, tp_drops.counter);
	if (e && e->ino == r.ino)
		r.settled = enters == exits && *(volatile __u32 *)&e->enters == enters &&
			    *(volatile __u32 *)&e->exits == exits;
	else {
		/* no read so far: settled unless one entered meanwhile */
		e = bpf_map_lookup_elem(&ring_reads, &r.sock);
		r.settled = !e || e->ino != r.ino;
	}
	r.version = BPF_CORE_READ(po, tp_version);
	r.rx_ring = BPF_CORE_READ(po, rx_ring.pg_vec) != NULL;
	r.frame_size = BPF_CORE_READ(po, rx_ring.frame_size);
	r.frame_nr = r.rx_ring ? BPF_CORE_READ(po, rx_ring.frame_max) + 1 : 0;
	r.block_size = BPF_CORE_READ(po, rx_ring.pg_vec_pages) * 4096;
	r.block_nr = BPF_CORE_READ(po, rx_ring.pg_vec_len);
	r.ifindex = BPF_CORE_READ(po, ifindex);
	r.rcvbuf = BPF_CORE_READ(sk, sk_rcvbuf);
	r.netns = BPF_CORE_READ(sk, __sk_common.skc_net.net, ns.inum);
	/* Frames sent on a device are copied to the sockets bound to every protocol
	 * (dev_queue_xmit_nit): those see the host's outgoing frames beside the incoming ones,
	 * unless PACKET_IGNORE_OUTGOING (4.20+) is set. */
	r.outgoing = BPF_CORE_READ(po, num) == ETH_P_ALL_BE;
	if (r.outgoing && bpf_core_field_exists(po->prot_hook.ignore_outgoing))
		r.outgoing = !BPF_CORE_READ(po, prot_hook.ignore_outgoing);
	r.filtered = BPF_CORE_READ(sk, sk_filter) != NULL;
	bpf_seq_write(seq, &r, sizeof(r));
	return 0;
}

/* The packet socket behind file f (its struct sock), 0 for any other file. */
static __always_inline struct sock *file_packet_sock(struct file *f)
{
	struct socket *sock;
	struct sock *sk;

	if (!f || (BPF_CORE_READ(f, f_inode, i_mode) & S_IFMT) != S_IFSOCK)
		return 0;
	sock = BPF_CORE_READ(f, private_data);
	sk = sock ? BPF_CORE_READ(sock, sk) : 0;
	if (!sk || BPF_CORE_READ(sk, __sk_common.skc_family) != AF_PACKET)
		return 0;
	return sk;
}

/* A family packet socket about to close (file is its struct file *, at descriptor fd of the
 * current process): its counters now, which its release throws away, into its ring_reads entry,
 * with who closed it. A later close of another descriptor of it
 * reads them again. A global function, so the verifier checks it once rather than once for each
 * descriptor of on_exit_socks' loop (inlined there, the loop's branches came within a few of the
 * verifier's limit of pending jumps on 6.18, and older verifiers prune less). Always 0. */
__noinline int packet_closing(__u64 file, __u32 fd)
{
	struct file *f = (struct file *)file;
	struct sock *sk = file_packet_sock(f);
	struct packet_sock *po = (struct packet_sock *)sk;
	struct sp_ring_reads *e;
	__u64 skp = (__u64)sk, ino;

	if (!sk)
		return 0;
	ino = BPF_CORE_READ(f, f_inode, i_ino);
	e = ring_reads_entry(skp, ino);
	if (!e)
		return 0;
	e->closed_packets = BPF_CORE_READ(po, stats.stats1.tp_packets);
	e->closed_drops = BPF_CORE_READ(po, tp_drops.counter);
	e->closed_rx_ring = BPF_CORE_READ(po, rx_ring.pg_vec) != NULL;
	e->closed_version = BPF_CORE_READ(po, tp_version);
	e->closed_frame_nr = e->closed_rx_ring ? BPF_CORE_READ(po, rx_ring.frame_max) + 1 : 0;
	e->closed_frame_size = BPF_CORE_READ(po, rx_ring.frame_size);
	e->closed_block_size = BPF_CORE_READ(po, rx_ring.pg_vec_pages) * 4096;
	e->closed_block_nr = BPF_CORE_READ(po, rx_ring.pg_vec_len);
	e->closed_tgid = bpf_get_current_pid_tgid() >> 32;
	e->closed_fd = fd;
	/* a full barrier: user space that sees the mark sees the counts */
	__sync_fetch_and_add(&e->closed, 1);
	return 0;
}

/* The file at descriptor fd of an fdtable's array fds, 0 when none. */
static __always_inline struct file *fdt_file(struct file **fds, __u32 fd)
{
	struct file *f = 0;

	if (bpf_probe_read_kernel(&f, sizeof(f), &fds[fd]))
		return 0;
	return f;
}

/* close(2) by a family thread: the one syscall that ends a descriptor on purpose; a packet
 * socket's counters are read before its release (close_range, dup2 over it and exec are not
 * watched: such a socket counts up to its last sample). */
SEC("tp/syscalls/sys_enter_close")
int on_close(struct trace_event_raw_sys_enter *ctx)
{
	struct task_struct *task;
	struct fdtable *fdt;
	__u64 fd, t0;

	if (!in_family((__u32)bpf_get_current_pid_tgid()))
		return 0;
	t0 = cost_begin();
	fd = ctx->args[0];
	task = (struct task_struct *)bpf_get_current_task();
	fdt = BPF_CORE_READ(task, files, fdt);
	if (fd < BPF_CORE_READ(fdt, max_fds))
		packet_closing((__u64)fdt_file(BPF_CORE_READ(fdt, fd), fd), fd);
	cost_end(SP_PROG_CLOSE, t0);
	return 0;
}

/* A family process's last thread exits: its descriptors close after this tracepoint
 * (exit_files), so its packet sockets' counters are read here. The family program on the same
 * tracepoint may have run first and taken the thread out of the family: its record, marked
 * exited, says it was in. */
SEC("tp_btf/sched_process_exit")
int SP_PROG(SP_PROG_EXIT_SOCKS, on_exit_socks, struct task_struct *p)
{
	__u32 tid = BPF_CORE_READ(p, pid), max, i;
	struct sp_thread *t;
	struct fdtable *fdt;
	struct file **fds;

	if (BPF_CORE_READ(p, signal, live.counter) != 0)
		return 0;
	if (!in_family(tid)) {
		t = thread_rec(tid);
		if (!t || t->sched_state != SP_ST_EXITED || t->tgid != BPF_CORE_READ(p, tgid))
			return 0;
	}
	fdt = BPF_CORE_READ(p, files, fdt);
	if (!fdt)
		return 0;
	max = BPF_CORE_READ(fdt, max_fds);
	fds = BPF_CORE_READ(fdt, fd);
#pragma clang loop unroll(disable)
	for (i = 0; i < SP_EXIT_FDS; i++) {
		if (i >= max)
			break;
		packet_closing((__u64)fdt_file(fds, i), i);
	}
	return 0;
}
