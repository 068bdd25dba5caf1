/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Maps and small helpers shared by every probe object. Each .bpf.c declares these maps; user space
 * loads family.bpf.c first and makes the other objects reuse its map fds (libbpf reuse_fd), so all
 * programs see one family, one thread table and one ring buffer.
 */
#ifndef SCANPROF_SHARED_H
#define SCANPROF_SHARED_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include "wire.h"

#define MAX_FAMILY 1024
#define MAX_THREADS 8192

/* Processes of the target family, by tgid. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_FAMILY);
	__type(key, __u32);
	__type(value, struct sp_member);
} family SEC(".maps");

/* Threads of the target family, by tid. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_THREADS);
	__type(key, __u32);
	__type(value, struct sp_thread);
} threads SEC(".maps");

/* Sockets the family sent on (struct sock *) -> tgid: attributes packets in softirq context. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, __u32);
} target_socks SEC(".maps");

/* Remote addresses the family's packets went to -> tgid: recognises probes and their replies. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct sp_flow_key);
	__type(value, __u32);
} flows SEC(".maps");

/* Network namespaces the family's packets were queued in or delivered into -> tgid: an address
 * match (above) counts only in these, so other namespaces using the same addresses stay apart. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, __u32);
} target_netns SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} events SEC(".maps");

/* Health counters (enum sp_health): loss is never silent. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SP_H_MAX);
	__type(key, __u32);
	__type(value, __u64);
} health SEC(".maps");

static __always_inline void health_inc(__u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(&health, &idx);

	if (v)
		*v += 1;
}

static __always_inline struct sp_event *event_reserve(void)
{
	struct sp_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);

	if (!e)
		health_inc(SP_H_RB_LOST);
	return e;
}

/* Wakeups are left out on purpose: user space consumes the ring on a timer (~14x cheaper). */
static __always_inline void event_submit(struct sp_event *e)
{
	bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
}

/* For records user space must act on at once (an exec: the new image needs its uprobes). */
static __always_inline void event_submit_wake(struct sp_event *e)
{
	bpf_ringbuf_submit(e, BPF_RB_FORCE_WAKEUP);
}

static __always_inline struct sp_thread *family_thread(__u32 tid)
{
	struct sp_thread *t = bpf_map_lookup_elem(&threads, &tid);

	if (t && t->sched_state == SP_ST_EXITED)
		return 0;
	return t;
}

/* Index of the highest set bit, without loops (BPF has no clz). v must be non-zero. */
static __always_inline __u32 msb64(__u64 v)
{
	__u32 r = 0;

	if (v >> 32) { v >>= 32; r += 32; }
	if (v >> 16) { v >>= 16; r += 16; }
	if (v >> 8) { v >>= 8; r += 8; }
	if (v >> 4) { v >>= 4; r += 4; }
	if (v >> 2) { v >>= 2; r += 2; }
	if (v >> 1) { r += 1; }
	return r;
}

/* Log-linear bucket of a value, as documented in wire.h. */
static __always_inline __u32 hist_bucket(__u64 v)
{
	__u32 msb, b;

	if (v < SP_HIST_LINEAR)
		return v;
	msb = msb64(v);
	if (msb > SP_HIST_MAX_MSB)
		return SP_HIST_BUCKETS - 1;
	b = SP_HIST_LINEAR + (msb - 4) * (1 << SP_HIST_SUB_BITS) +
	    ((v >> (msb - SP_HIST_SUB_BITS)) & ((1 << SP_HIST_SUB_BITS) - 1));
	return b < SP_HIST_BUCKETS ? b : SP_HIST_BUCKETS - 1;
}

/*
 * Adds one to `hist` (SP_HIST_BUCKETS slots) at v's bucket. The bound is checked again right at
 * the access, on a 64-bit index the compiler cannot fold away (barrier_var): hist_bucket's own
 * clamp is proven by 6.18's verifier, but 6.1's loses it across 32-bit register copies and
 * rejects the access ("unbounded memory access").
 */
static __always_inline void hist_add(__u64 *hist, __u64 v)
{
	__u64 b = hist_bucket(v);

	barrier_var(b);
	if (b >= SP_HIST_BUCKETS)
		return;
	hist[b] += 1;
}

/* The same for an array of `n` counters indexed by a small value (errno slots): out of range
 * counts in slot 0. */
static __always_inline void slot_add(__u64 *slots, __u64 n, __u64 idx)
{
	if (idx >= n)
		idx = 0;
	barrier_var(idx);
	if (idx >= n)
		return;
	slots[idx] += 1;
}

/* Network namespace inode of a device, 0 when unknown. */
static __always_inline __u32 dev_netns(struct net_device *dev)
{
	if (!dev)
		return 0;
	return BPF_CORE_READ(dev, nd_net.net, ns.inum);
}

/* Remote address of an IPv4/IPv6 packet at its network header: daddr when `dst`, else saddr. */
static __always_inline int skb_addr(struct sk_buff *skb, int dst, struct sp_flow_key *key)
{
	unsigned char *head = BPF_CORE_READ(skb, head);
	__u16 nh = BPF_CORE_READ(skb, network_header);
	__u16 proto = bpf_ntohs(BPF_CORE_READ(skb, protocol));

	__builtin_memset(key, 0, sizeof(*key));
	if (nh == (__u16)~0U)
		return -1;
	if (proto == 0x0800) {
		struct iphdr ip;

		if (bpf_probe_read_kernel(&ip, sizeof(ip), head + nh))
			return -1;
		*(__u32 *)key->addr = dst ? ip.daddr : ip.saddr;
		key->family = 2;
		return 0;
	}
	if (proto == 0x86DD) {
		struct ipv6hdr ip6;

		if (bpf_probe_read_kernel(&ip6, sizeof(ip6), head + nh))
			return -1;
		__builtin_memcpy(key->addr, dst ? &ip6.daddr : &ip6.saddr, 16);
		key->family = 10;
		return 0;
	}
	return -1;
}

/* The last socket looked up on this CPU and its owner (0: not the family's). A packet passes
 * four or five hooks and a sender streams from one socket, so most lookups end here. */
struct sock_owner {
	__u64 sk;
	__u64 gen;	/* sock_gen when cached: a newly registered socket invalidates the cache */
	__u32 tgid;
	__u32 pad;
};

/* Bumped whenever a socket joins target_socks. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} sock_gen SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sock_owner);
} last_sock SEC(".maps");

/* tgid of the family process that owns the skb's socket, 0 if none. */
static __always_inline __u32 skb_target(struct sk_buff *skb)
{
	__u64 sk = (__u64)BPF_CORE_READ(skb, sk);
	__u32 zero = 0, *tgid;
	struct sock_owner *last;
	__u64 *gen, g;

	if (!sk)
		return 0;
	gen = bpf_map_lookup_elem(&sock_gen, &zero);
	g = gen ? *gen : 0;
	last = bpf_map_lookup_elem(&last_sock, &zero);
	if (last && last->sk == sk && last->gen == g)
		return last->tgid;
	tgid = bpf_map_lookup_elem(&target_socks, &sk);
	if (last) {
		last->sk = sk;
		last->gen = g;
		last->tgid = tgid ? *tgid : 0;
	}
	return tgid ? *tgid : 0;
}

#endif /* SCANPROF_SHARED_H */
