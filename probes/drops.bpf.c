// SPDX-License-Identifier: GPL-2.0
/*
 * Every packet drop on the machine (skb:kfree_skb, via tp_btf): counted per reason, location,
 * device, namespace and class, where the class says whether the packet was the target's own
 * outgoing packet, an expected casualty of scanning (no socket at either end, or a probe the
 * destination's transport layer dropped), a lost reply, or somebody else's. And the datagrams
 * the family's UDP sockets refused (udp:udp_fail_queue_rcv_skb, the socket in hand), which make
 * a listener's own socket drops its own on kernels whose kfree_skb has no rx_sk.
 */
#include "shared.h"

char LICENSE[] SEC("license") = "GPL";

/* Filled in by user space from the running kernel's enum skb_drop_reason before load
 * (reason_queue_purge: ~0 on kernels without QUEUE_PURGE). */
const volatile __u32 reason_no_socket = 3;
const volatile __u32 reason_queue_purge = ~0U;
/* On kernels whose kfree_skb has no rx_sk (before 6.8), which free a datagram a UDP socket
 * refused and then fire udp_fail_queue_rcv_skb: the refused datagram's drop row, just counted
 * as somebody else's, moves to the family's (on_udp_fail). The reasons it may be counted under
 * (SOCKET_RCVBUFF and PROTO_MEM of the running kernel; ~0: any, where there are no reasons). */
const volatile __u32 recharge_udp = 0;
const volatile __u32 reason_rcvbuff = ~0U;
const volatile __u32 reason_proto_mem = ~0U;
/* Where kfree_skb gives no reasons (before 5.17): the moved row is named by the refusal's kind
 * (SP_REASON_FILL_RCVBUFF or SP_REASON_FILL_PROTO_MEM), not left NOT_SPECIFIED. */
const volatile __u32 name_refusals = 0;

/* Drop counts per row, per CPU, in the slot drop_slots names (see slot_of in shared.h); the
 * three maps of the table have SP_DROP_SLOTS entries (a power of two). */
#define SP_DROP_SLOTS 8192

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SP_DROP_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
} drops SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SP_DROP_SLOTS);
	__type(key, struct sp_drop_key);
	__type(value, __u32);
} drop_slots SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SP_DROP_SLOTS);
	__type(key, __u32);
	__type(value, struct sp_drop_key);
} drop_slot_rows SEC(".maps");

/* The row this CPU counted its last drop in: a flood dies the same way over and over. */
struct last_row {
	struct sp_drop_key key;
	__u32 slot;
	__u32 valid;
	__u32 just;		/* the last kfree_skb on this CPU was counted in key's row */
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct last_row);
} last_drop_row SEC(".maps");

/* What the last socket-less drop on this CPU was, by device and destination: a flood of
 * probes to a closed port dies the same way over and over, and flows_gen says when the answer
 * may have changed. */
struct last_drop {
	struct sp_flow_key dst;
	__u64 gen;
	__u32 netns;
	__u32 ifindex;
	__u32 tgid;		/* owner found by destination, 0: none (then the source decides) */
	__u32 known;		/* the device carries family traffic */
	__u32 valid;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct last_drop);
} last_drop SEC(".maps");

/* Whether a packet came in (received on a device, or a tap's copy of an outgoing packet) rather
 * than being one a socket of this host sent. */
static __always_inline int skb_came_in(struct sk_buff *skb)
{
	return skb->skb_iif != 0 || BPF_CORE_READ_BITFIELD_PROBED(skb, pkt_type) == 4 /* PACKET_OUTGOING */;
}

/* Whether a TCP packet was handed to the TCP layer of the host that received it (tcp_v4_rcv,
 * tcp_v6_rcv): ip_local_deliver_finish (and IPv6's) pulls skb->data to the transport header,
 * so data at or past it means the packet reached its destination's stack; a drop on the way (a
 * qdisc, the backlog, netfilter, a forwarding namespace) finds data below it. Other protocols
 * are left out: a datagram dropped at a full socket of its receiver is that receiver's loss. */
static __always_inline int skb_at_tcp(struct sk_buff *skb)
{
	__u64 head = (__u64)BPF_CORE_READ(skb, head), data = (__u64)BPF_CORE_READ(skb, data);
	__u16 nh = skb->network_header, th = skb->transport_header;
	__u16 proto = bpf_ntohs(skb->protocol);
	__u8 l4 = 0;

	if (nh == (__u16)~0U || th == (__u16)~0U || th <= nh || data - head < th)
		return 0;
	if (proto == 0x0800)		/* ETH_P_IP: protocol at byte 9 */
		bpf_probe_read_kernel(&l4, 1, (void *)(head + nh + 9));
	else if (proto == 0x86DD)	/* ETH_P_IPV6: next header at byte 6 */
		bpf_probe_read_kernel(&l4, 1, (void *)(head + nh + 6));
	return l4 == 6;			/* IPPROTO_TCP */
}

/*
 * A socket-less packet to an address the family sent to, in a namespace its traffic reached:
 * the family's only if it is one of the packets it sent (sent_skbs, the same headers), else the
 * kernel's own reply to that peer (a RST or ICMP error, e.g. the scanner host answering a
 * SYN-ACK) or somebody else's packet to the same address.
 */
static __always_inline __u32 sent_class(struct sk_buff *skb, __u32 reason, __u32 owner, __u32 *tgid)
{
	__u64 key = (__u64)skb;
	struct sp_sent *sent = bpf_map_lookup_elem(&sent_skbs, &key);
	struct sp_l4 l;

	skb_l4(skb, &l);
	if (sent && l.ok && sent->print == l.print) {
		*tgid = sent->tgid;
		return reason == reason_no_socket ? SP_CLASS_EXPECTED : SP_CLASS_TARGET_LOSS;
	}
	if (l.reply_like) {
		*tgid = owner;
		return SP_CLASS_REPLY_SIDE;
	}
	/* Another sender's packet to the family's destination, or the family's own whose
	 * net_dev_start_xmit run the kernel did not deliver (so it was never marked): counted as
	 * unrelated, and said (health) */
	health_inc(SP_H_UNMATCHED);
	return SP_CLASS_UNRELATED;
}

static __always_inline __u32 classify(struct sk_buff *skb, struct sock *rx_sk, __u32 reason,
				      __u32 netns, __u32 ifindex, __u32 *tgid)
{
	struct sp_flow_key fk;
	struct last_drop *last;
	__u32 *who, zero = 0;
	__u64 rx, gen;

	*tgid = skb_target(skb);
	if (*tgid)
		return SP_CLASS_TARGET_LOSS;
	rx = (__u64)rx_sk;
	if (rx) {
		who = bpf_map_lookup_elem(&target_socks, &rx);
		if (who) {
			*tgid = *who;
			return SP_CLASS_REPLY_LOSS;
		}
	}
	/*
	 * No owner any more (it crossed a veth, or is a reply): recognise it by address, but only
	 * if it has no socket (a packet of another socket is somebody else's) and only on a device
	 * the family's traffic used (another namespace may use the same addresses, and another
	 * device of a namespace it reached carries other processes' packets: the root namespace's
	 * lo behind the veth a namespaced scanner sends through). An address match alone does not
	 * make a packet the family's (sent_class).
	 */
	if (skb->sk)
		return SP_CLASS_UNRELATED;
	if (skb_addr(skb, 1, &fk))
		return SP_CLASS_UNRELATED;
	gen = gen_now(&flows_gen);
	last = bpf_map_lookup_elem(&last_drop, &zero);
	if (last && last->valid && last->gen == gen && last->netns == netns &&
	    last->ifindex == ifindex && same_flow(&last->dst, &fk)) {
		if (!last->known)
			return SP_CLASS_UNRELATED;
		if (last->tgid) {
			return sent_class(skb, reason, last->tgid, tgid);
		}
	} else {
		__u64 dk = dev_key(netns, ifindex);
		__u32 known = bpf_map_lookup_elem(&target_devs, &dk) != 0, owner = 0;

		if (known) {
			who = bpf_map_lookup_elem(&flows, &fk);
			owner = who ? *who : 0;
		}
		if (last) {
			last->dst = fk;
			last->gen = gen;
			last->netns = netns;
			last->ifindex = ifindex;
			last->tgid = owner;
			last->known = known;
			last->valid = 1;
		}
		if (!known)
			return SP_CLASS_UNRELATED;
		if (owner)
			return sent_class(skb, reason, owner, tgid);
	}
	if (!skb_addr(skb, 0, &fk)) {
		who = bpf_map_lookup_elem(&flows, &fk);
		if (who) {
			*tgid = *who;
			return reason == reason_no_socket ? SP_CLASS_EXPECTED : SP_CLASS_REPLY_LOSS;
		}
	}
	return SP_CLASS_UNRELATED;
}

/* Whether the i-th drop of a row on this CPU keeps its header (the rule in wire.h). */
static __always_inline int pkt_sampled(__u64 i)
{
	return i <= SP_PKT_FIRST || (i <= SP_PKT_UNTIL && (i & (SP_PKT_EVERY - 1)) == 0);
}

/*
 * Streams a family drop's first SP_PKT_HDR bytes from the network header, so that the bytes
 * are IPv4 or IPv6 whatever the device (LINKTYPE_RAW). A drop before the network header was
 * set streams the record without bytes. Only the linear part is copied: up to skb->tail.
 */
static __always_inline void capture_header(struct sk_buff *skb, const struct sp_drop_key *k, __u64 seq)
{
	/* read as numbers (not BTF pointers): 6.18's verifier keeps them untrusted pointers, and
	 * a length computed from them cannot be a helper's size */
	__u64 head = (__u64)BPF_CORE_READ(skb, head), data = (__u64)BPF_CORE_READ(skb, data);
	__u16 nh = skb->network_header;
	__s64 wire, lin;
	struct sp_drop_pkt *p;
	__u64 cap;

	p = bpf_ringbuf_reserve(&events, sizeof(*p), 0);
	if (!p) {
		health_inc(SP_H_RB_LOST);
		return;
	}
	p->ts_ns = bpf_ktime_get_ns();
	p->kind = SP_EV_DROP_PKT;
	p->cur_tgid = bpf_get_current_pid_tgid() >> 32;
	p->key = *k;
	p->seq = seq;
	p->len = 0;
	p->cap_len = 0;
	p->flags = 0;
	p->pad = 0;
	bpf_get_current_comm(p->comm, sizeof(p->comm));
	if (nh == (__u16)~0U) {
		p->flags = SP_PKT_NO_NETWORK_HEADER;
		event_submit((void *)p);
		return;
	}
	/* skb->len counts from skb->data, which may be before or after the network header */
	wire = (__s64)skb->len + (__s64)(data - head) - nh;
	lin = (__s64)skb->tail - nh;
	if (wire < 0)
		wire = 0;
	if (lin > wire)
		lin = wire;
	if (lin < 0)
		lin = 0;
	p->len = wire;
	cap = lin;
	if (cap > SP_PKT_HDR)
		cap = SP_PKT_HDR;
	/* again on a value the compiler cannot fold: 6.1's verifier loses the clamp above */
	barrier_var(cap);
	if (cap > SP_PKT_HDR)
		cap = 0;
	if (cap && bpf_probe_read_kernel(p->data, cap, (void *)(head + nh))) {
		p->flags = SP_PKT_READ_FAILED;
		cap = 0;
	}
	p->cap_len = cap;
	event_submit((void *)p);
}

static __always_inline void count_drop(struct sk_buff *skb, void *location, __u32 reason,
				       struct sock *rx_sk)
{
	struct net_device *dev = skb->dev;
	struct sp_drop_key k = {
		.location = (__u64)location,
		.reason = reason,
		.ifindex = dev ? dev->ifindex : 0,
		.netns = dev_netns(dev),
	};
	struct last_row *last;
	__u32 zero = 0, slot;
	int fresh;
	__u64 *n;

	/* every run, for the check against perf's count of the tracepoint's hits */
	health_inc(SP_H_DROP_RUNS);
	k.class = classify(skb, rx_sk, reason, k.netns, k.ifindex, &k.tgid);
	/* A packet that came in, purged unread from a queue: in a family socket's (it owns the
	 * skb), or a reply to the family (found by source; UDP's queue keeps no owner). Delivered,
	 * not lost. A family packet forwarded by a far namespace and purged there stays a loss. */
	if (reason == reason_queue_purge &&
	    ((k.class == SP_CLASS_TARGET_LOSS && skb->sk) || k.class == SP_CLASS_REPLY_LOSS) &&
	    skb_came_in(skb))
		k.class = SP_CLASS_REPLY_SIDE;
	/* The family's packet, without a socket any more, that came in and reached the TCP layer
	 * where it arrived (a lab target's TCP dropping a probe or an RST it does not want:
	 * NOT_SPECIFIED or TCP_* at tcp_v4_rcv) met its destination: the scan's outcome, as a
	 * NO_SOCKET there is, not a loss on the way. */
	if (k.class == SP_CLASS_TARGET_LOSS && !skb->sk && skb_came_in(skb) && skb_at_tcp(skb))
		k.class = SP_CLASS_EXPECTED;
	last = bpf_map_lookup_elem(&last_drop_row, &zero);
	if (last)
		last->just = 0;
	if (last && last->valid && key_eq(&last->key, &k, sizeof(k))) {
		slot = last->slot;
	} else {
		slot = slot_of(&drop_slots, &drop_slot_rows, &k, sizeof(k), SP_DROP_SLOTS, &fresh);
		if (slot == SP_NO_SLOT) {
			health_inc(SP_H_DROPS_FULL);
			return;
		}
		if (fresh && dev)
			dev_name_note(dev, k.ifindex, k.netns);
		if (last) {
			last->key = k;
			last->slot = slot;
			last->valid = 1;
		}
	}
	n = bpf_map_lookup_elem(&drops, &slot);
	if (!n)
		return;
	*n += 1;
	if (last)
		last->just = 1;
	/* the family's drops keep their header, the row's first ones and then a sample */
	if (k.class != SP_CLASS_UNRELATED && pkt_sampled(*n))
		capture_header(skb, &k, *n);
}

/* kfree_skb with rx_sk (kernels >= 6.8): the receiving socket names replies lost at the target. */
SEC("tp_btf/kfree_skb")
int SP_PROG(SP_PROG_KFREE_SKB, on_kfree_skb, struct sk_buff *skb, void *location, enum skb_drop_reason reason,
	     struct sock *rx_sk)
{
	count_drop(skb, location, reason, rx_sk);
	return 0;
}

/* kfree_skb without rx_sk (5.17 to 6.7); user space loads exactly one of the three. */
SEC("tp_btf/kfree_skb")
int SP_PROG(SP_PROG_KFREE_SKB_NORX, on_kfree_skb_norx, struct sk_buff *skb, void *location, enum skb_drop_reason reason)
{
	count_drop(skb, location, reason, 0);
	return 0;
}

/* kfree_skb without a drop reason (kernels before 5.17): drops counted by location only. */
SEC("tp_btf/kfree_skb")
int SP_PROG(SP_PROG_KFREE_SKB_NOREASON, on_kfree_skb_noreason, struct sk_buff *skb, void *location)
{
	count_drop(skb, location, SP_REASON_NOT_GIVEN, 0);
	return 0;
}

/* For the generated skeleton: the refusal kinds, so Rust gets them from wire.h. */
enum sp_udp_refusal abi_udp_refusal;

/* Datagrams the family's UDP sockets refused, per process, namespace and why. */
#define SP_UDP_REFUSED_ROWS 1024

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, SP_UDP_REFUSED_ROWS);
	__type(key, struct sp_udp_refused_key);
	__type(value, struct sp_udp_refused);
} udp_refused SEC(".maps");

/*
 * udp_fail_queue_rcv_skb: a UDP socket refused a datagram (its receive buffer full, or the
 * protocol's memory), with the socket in hand, on every kernel; kfree_skb names the socket only
 * from 6.8 (rx_sk). Runs once per refused datagram, never per packet received. IPv4 on every
 * kernel; IPv6 only on kernels whose __udpv6_queue_rcv_skb fires it too (not 6.1 or 5.10).
 */
SEC("tp_btf/udp_fail_queue_rcv_skb")
int SP_PROG(SP_PROG_UDP_FAIL, on_udp_fail, int rc, struct sock *sk)
{
	struct sp_udp_refused_key k = {};
	struct sp_udp_refused fresh = {}, *v;
	struct last_row *last;
	__u32 *who, *owner, zero = 0, just = 0;
	__u64 skp = (__u64)sk, *n;

	/* consumed whatever the socket: a later refusal must not find this drop's row */
	last = bpf_map_lookup_elem(&last_drop_row, &zero);
	if (last) {
		just = last->just;
		last->just = 0;
	}
	owner = bpf_map_lookup_elem(&target_socks, &skp);
	if (!owner)
		return 0;
	k.tgid = *owner;
	k.netns = BPF_CORE_READ(sk, __sk_common.skc_net.net, ns.inum);
	k.kind = rc == -12 /* -ENOMEM */ ? SP_UDP_RCVBUF : SP_UDP_MEMORY;
	v = bpf_map_lookup_elem(&udp_refused, &k);
	if (!v) {
		bpf_map_update_elem(&udp_refused, &k, &fresh, BPF_NOEXIST);
		v = bpf_map_lookup_elem(&udp_refused, &k);
		if (!v) {
			health_inc(SP_H_DROPS_FULL);
			return 0;
		}
	}
	v->refused += 1;
	/* Before 6.8 the datagram was freed just before this, on this CPU, and counted by source
	 * only: a listener's (from an address it never sent to) as somebody else's. Move it. */
	if (recharge_udp && last && just && last->key.class == SP_CLASS_UNRELATED &&
	    (reason_rcvbuff == ~0U ||
	     last->key.reason == (k.kind == SP_UDP_RCVBUF ? reason_rcvbuff : reason_proto_mem))) {
		struct sp_drop_key dk = last->key;
		__u32 from = last->slot, to;
		int created;

		dk.class = SP_CLASS_REPLY_LOSS;
		dk.tgid = k.tgid;
		if (name_refusals)
			dk.reason = k.kind == SP_UDP_RCVBUF ? SP_REASON_FILL_RCVBUFF : SP_REASON_FILL_PROTO_MEM;
		to = slot_of(&drop_slots, &drop_slot_rows, &dk, sizeof(dk), SP_DROP_SLOTS, &created);
		if (to == SP_NO_SLOT) {
			health_inc(SP_H_DROPS_FULL);
			return 0;
		}
		n = bpf_map_lookup_elem(&drops, &from);
		if (!n || !*n)
			return 0;
		*n -= 1;
		n = bpf_map_lookup_elem(&drops, &to);
		if (n)
			*n += 1;
		v->moved += 1;
	}
	return 0;
}
