// SPDX-License-Identifier: GPL-2.0
/*
 * The family's packet sockets and their rings (TPACKET_V1/V2/V3, as libpcap, masscan and zmap
 * use them). Reading from a ring makes no syscall, and a frame the kernel drops because the ring
 * is full is freed with consume_skb (6.1) or kfree_skb_reason on an skb still shared with the IP
 * stack (6.2+), so no tracepoint sees it. The socket's own counters (the ones PACKET_STATISTICS
 * returns) do: a task_file iterator, read by user space once per sample, reports them for every
 * packet socket a family process holds. Nothing runs per packet.
 */
#include "shared.h"

char LICENSE[] SEC("license") = "GPL";

#define AF_PACKET 17

/* For the generated skeleton: the record type, so Rust gets it from wire.h. */
struct sp_ring abi_ring;

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
	struct packet_sock *po;
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
	r.tp_packets = BPF_CORE_READ(po, stats.stats1.tp_packets);
	r.tp_drops = BPF_CORE_READ(po, tp_drops.counter);
	r.version = BPF_CORE_READ(po, tp_version);
	r.rx_ring = BPF_CORE_READ(po, rx_ring.pg_vec) != NULL;
	r.frame_size = BPF_CORE_READ(po, rx_ring.frame_size);
	r.frame_nr = r.rx_ring ? BPF_CORE_READ(po, rx_ring.frame_max) + 1 : 0;
	r.block_size = BPF_CORE_READ(po, rx_ring.pg_vec_pages) * 4096;
	r.block_nr = BPF_CORE_READ(po, rx_ring.pg_vec_len);
	r.ifindex = BPF_CORE_READ(po, ifindex);
	r.rcvbuf = BPF_CORE_READ(sk, sk_rcvbuf);
	bpf_seq_write(seq, &r, sizeof(r));
	return 0;
}
