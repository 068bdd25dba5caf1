// SPDX-License-Identifier: GPL-2.0
/*
 * Replies that arrived at the host for the family's flows: every packet entering the stack on a
 * device the family's packets used (target_devs) whose source is an address the family sent to
 * (flows), counted per CPU by kind (enum sp_reply_kind: SYN-ACK, RST, ICMP unreachable, echo
 * reply, UDP...). Counted before any socket, ring or drop sees it: the funnel's "arrived", beside
 * what was delivered to the family and what was dropped here. The far end of a lab's veth is in
 * target_devs (SP_DEV_FAR) for the drops, and not looked at here: the family's packets arrive
 * there, its replies never do. A packet on the device this CPU last found to count on, or on the
 * one it last found not to, costs a per-CPU compare; on another device, one hash lookup.
 */
#include "shared.h"

char LICENSE[] SEC("license") = "GPL";

/* For the generated skeleton: the kinds, so Rust gets them from wire.h. */
enum sp_reply_kind abi_reply_kind;

/* Packets of each kind (enum sp_reply_kind) that arrived from the family's destinations. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SP_RK_MAX);
	__type(key, __u32);
	__type(value, __u64);
} replies SEC(".maps");

/* What this CPU last found in target_devs, by dev_key (0: none yet; no device has ifindex 0):
 * the device it last found to count replies on, whose entry stays (entries are never deleted
 * during a run, and a near one never becomes far), and the device it last found not to (absent,
 * or far), valid while devs_gen stays what it was then. A stream of packets on one device (every
 * family packet through lo, every reply on a lab's veth, every probe arriving at its far end, a
 * busy NIC the family does not use) skips the hash lookup. */
struct reply_devs {
	__u64 hit;
	__u64 skip;
	__u64 skip_gen;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct reply_devs);
} reply_devs SEC(".maps");

/* Whether replies to the family are counted on the device dk (a near entry of target_devs). */
static __always_inline int reply_device(__u64 dk)
{
	__u32 zero = 0, *v;
	struct reply_devs *c = bpf_map_lookup_elem(&reply_devs, &zero);
	__u64 gen;

	if (!c)
		return 0;
	if (c->hit == dk)
		return 1;
	/* read before the lookup: a device noted after it moves the generation past this one */
	gen = gen_now(&devs_gen);
	if (c->skip == dk && c->skip_gen == gen)
		return 0;
	v = bpf_map_lookup_elem(&target_devs, &dk);
	if (!v || (*v & SP_DEV_FAR)) {
		c->skip = dk;
		c->skip_gen = gen;
		return 0;
	}
	c->hit = dk;
	return 1;
}

/* What a packet is, from its protocol and the first bytes of its transport header; SP_RK_MAX
 * for a probe (a TCP SYN alone, an ICMP echo request) or a fragment's tail. */
static __always_inline __u32 reply_kind(__u8 proto, const __u8 *t, int loopback)
{
	__u8 flags = t[13], type = t[0];

	if (proto == 6) {
		if ((flags & 0x12) == 0x12)
			return SP_RK_TCP_SYNACK;
		if (flags & 0x04)
			return SP_RK_TCP_RST;
		if (flags & 0x11)	/* ACK or FIN */
			return SP_RK_TCP_OTHER;
		return SP_RK_MAX;	/* a SYN alone: a probe */
	}
	if (proto == 17)
		return loopback ? SP_RK_UDP_LOOPBACK : SP_RK_UDP;
	if (proto == 1) {
		if (type == 3)
			return SP_RK_ICMP_UNREACH;
		if (type == 0)
			return SP_RK_ICMP_ECHO_REPLY;
		if (type == 8 || type == 13 || type == 17)
			return SP_RK_MAX;	/* requests: probes */
		return SP_RK_ICMP_OTHER;
	}
	if (proto == 58) {
		if (type == 1)
			return SP_RK_ICMP_UNREACH;
		if (type == 129)
			return SP_RK_ICMP_ECHO_REPLY;
		if (type == 128 || type >= 133)
			return SP_RK_MAX;	/* echo request, neighbour discovery */
		return SP_RK_ICMP_OTHER;
	}
	return SP_RK_OTHER;
}

/* netif_receive_skb: every packet entering the stack on any device (one tracepoint for the list
 * and single paths), before packet sockets, netfilter or a socket see it. The MAC header is
 * already pulled: skb->data is the network header. */
SEC("tp_btf/netif_receive_skb")
int SP_PROG(SP_PROG_REPLY, on_netif_receive, struct sk_buff *skb)
{
	struct net_device *dev = skb->dev;
	__u16 proto = bpf_ntohs(skb->protocol);
	__u8 b[56] = {}, *t, p;
	struct sp_flow_key src = {};
	__u32 kind, loopback;
	__u64 *n;

	if (!dev || !reply_device(dev_key(dev_netns(dev), dev->ifindex)))
		return 0;
	if (bpf_probe_read_kernel(b, sizeof(b), skb->data))
		return 0;
	if (proto == 0x0800 && (b[0] >> 4) == 4) {
		__u32 ihl = b[0] & 0xf;

		if (ihl < 5 || (b[6] & 0x1f) || b[7])
			return 0;	/* bad header, or a fragment after the first */
		__builtin_memcpy(src.addr, b + 12, 4);
		src.family = 2;
		p = b[9];
		if (ihl > 5 && bpf_probe_read_kernel(b + 20, 16, skb->data + ihl * 4))
			return 0;
		t = b + 20;
	} else if (proto == 0x86DD && (b[0] >> 4) == 6) {
		__builtin_memcpy(src.addr, b + 8, 16);
		src.family = 10;
		p = b[6];
		t = b + 40;
	} else {
		return 0;
	}
	if (!bpf_map_lookup_elem(&flows, &src))
		return 0;
	loopback = (dev->flags & IFF_LOOPBACK) != 0;
	kind = reply_kind(p, t, loopback);
	if (kind >= SP_RK_MAX)
		return 0;
	n = bpf_map_lookup_elem(&replies, &kind);
	if (n)
		*n += 1;
	return 0;
}
