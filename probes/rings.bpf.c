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
 */
#include "shared.h"

char LICENSE[] SEC("license") = "GPL";

#define AF_PACKET 17
#define ETH_P_ALL_BE 0x0300	/* htons(ETH_P_ALL) */

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
