// SPDX-License-Identifier: GPL-2.0
/*
 * Stages after the send syscall, per device: dev_queue_xmit entry, qdisc enqueue/dequeue with the
 * queue's depth, driver transmit with its return code, and neighbour resolution on the target's
 * path. Every hook counts both the target's packets (by socket) and everyone's, per CPU.
 */
#include "shared.h"

char LICENSE[] SEC("license") = "GPL";

#define NUD_INCOMPLETE 0x01
#define NUD_FAILED 0x20
#define NUD_VALID 0xde /* REACHABLE|PERMANENT|NOARP|STALE|DELAY|PROBE */

/* Counters per (device, namespace, process) row, per CPU, in a slot that dev_slots names: an
 * array slot costs the hot path an index, where a per-CPU hash costs a hash of the key. */
#define SP_DEV_SLOTS 1024	/* entries of devs, dev_slots and dev_slot_rows (a power of two) */

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SP_DEV_SLOTS);
	__type(key, __u32);
	__type(value, struct sp_dev_stats);
} devs SEC(".maps");

/* Which slot of `devs` counts a row; user space reads the rows through it. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SP_DEV_SLOTS);
	__type(key, struct sp_dev_key);
	__type(value, __u32);
} dev_slots SEC(".maps");

/* Which row holds each slot: inserting here is how a CPU claims a free slot atomically (an
 * insert with BPF_NOEXIST succeeds once), without atomics whose results older kernels refuse. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SP_DEV_SLOTS);
	__type(key, __u32);
	__type(value, struct sp_dev_key);
} dev_slot_rows SEC(".maps");

/* Per-tick queue depth: user space deletes each row after reading it. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 1024);
	__type(key, struct sp_dev_key);
	__type(value, struct sp_qdepth);
} qdepth SEC(".maps");

/* The family's packet inside a driver's transmit call on this CPU: net_dev_xmit, after the
 * driver returns, takes its owner from here (veth and lo orphan the skb inside the call). */
struct in_xmit {
	__u64 skb;
	__u32 tgid;
	/* The far end of the device this CPU last sent a family packet through (veth_far_netns):
	 * by device, and read again every SP_FAR_RECHECK packets in case the peer moved. */
	__u32 far_ifindex;
	__u64 far_dev;
	__u32 far_devns;	/* the device's own namespace */
	__u32 far_ns;		/* the peer's namespace, 0: not a veth; in target_devs */
	__u32 far_ifindex_peer;	/* the peer's ifindex */
	__u32 far_left;		/* packets until the peer is read again */
	__u32 queued_ok;	/* queued_print could be read */
	/* The packet this CPU last saw at net_dev_queue, its socket, owner and (the family's)
	 * headers, read there once: on a device without a queue (veth, lo) net_dev_start_xmit
	 * follows for the same skb at once and takes them from here instead of looking the socket
	 * up and reading the packet again. Used once. */
	__u32 queued_tgid;	/* skb_target at net_dev_queue, 0: not the family's */
	__u64 queued_skb;
	__u64 queued_sk;	/* skb->sk (a number) at net_dev_queue */
	__u64 queued_print;
	__u32 queued_gen;	/* dev_note_gen when net_dev_queue wrote the note */
	__u32 pad;
};

/* --device-stages sampled: net_dev_queue, the qdisc stages and net_dev_xmit are attached only
 * in a window of each tick; net_dev_start_xmit stays attached (the drops need its marks), and
 * a packet it sees without a note from net_dev_queue (queued outside a window) has its
 * destination noted there instead. 0: exact mode, every stage attached all the time. */
const volatile __u32 dev_sampled = 0;

/* Bumped by user space each time net_dev_queue is detached (the end of a window): a note
 * written before is stale, and a later skb at the same address on the same socket must not
 * take its owner and headers. Never changes in exact mode. */
volatile __u32 dev_note_gen = 0;

/* How many family packets (per CPU, per device) go by on the cached far namespace of a veth
 * before its peer is read again: a peer moved to another namespace mid-stream (it comes back
 * down: someone has to bring it up there) is seen within that many packets per CPU. */
#define SP_FAR_RECHECK 16

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct in_xmit);
} in_flight SEC(".maps");

/* Neighbour entries that the target's packets waited on -> tgid. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, __u32);
} neighs SEC(".maps");

/* The slot of a device row, made on first sight (with the device's name for everyone's row). */
static __always_inline __u32 dev_slot(struct net_device *dev, __u32 ifindex, __u32 netns, __u32 tgid)
{
	struct sp_dev_key k = { .ifindex = ifindex, .netns = netns, .tgid = tgid };
	int fresh;
	__u32 s = slot_of(&dev_slots, &dev_slot_rows, &k, sizeof(k), SP_DEV_SLOTS, &fresh);

	if (s == SP_NO_SLOT) {
		health_inc(SP_H_DEVS_FULL);
	} else if (fresh && !tgid) {
		dev_name_note(dev, ifindex, netns);
	}
	return s;
}

/* The rows of the devices this CPU counted in last, a few ways: a packet passes four hooks of
 * one device, and the kernel's own replies (everyone's row) take turns with the family's. */
#define SP_DEV_WAYS 4

struct dev_rows {
	__u32 ifindex;
	__u32 netns;
	__u32 all;		/* slot of everyone's row, SP_NO_SLOT if not cached */
	__u32 tgid;		/* process whose row `mine` is, 0 if none cached */
	__u32 mine;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SP_DEV_WAYS);
	__type(key, __u32);
	__type(value, struct dev_rows);
} last_dev SEC(".maps");

/* The two rows a packet counts in: everyone's, and (if it is a family packet) its process's. */
static __always_inline void dev_rows(struct net_device *dev, __u32 tgid, struct sp_dev_stats **all,
				     struct sp_dev_stats **mine)
{
	__u32 ifindex = dev->ifindex, netns = dev_netns(dev);
	__u32 way = (ifindex ^ netns) & (SP_DEV_WAYS - 1), slot;
	struct dev_rows *c = bpf_map_lookup_elem(&last_dev, &way);

	*all = 0;
	*mine = 0;
	if (!c)
		return;
	if (c->ifindex != ifindex || c->netns != netns) {
		c->ifindex = ifindex;
		c->netns = netns;
		c->all = dev_slot(dev, ifindex, netns, 0);
		c->tgid = 0;
	}
	slot = c->all;
	*all = bpf_map_lookup_elem(&devs, &slot);
	if (!tgid)
		return;
	if (c->tgid != tgid) {
		c->tgid = tgid;
		c->mine = dev_slot(dev, ifindex, netns, tgid);
	}
	slot = c->mine;
	*mine = bpf_map_lookup_elem(&devs, &slot);
}

/* Both rows a packet counts in: everyone's (tgid 0) and, if it is the target's, the target's. */
#define FOR_ROWS(dev, tgid, s, body)                                 \
	do {                                                         \
		struct sp_dev_stats *s, *_mine;                      \
		dev_rows(dev, tgid, &s, &_mine);                     \
		if (s) { body; }                                     \
		s = _mine;                                           \
		if (s) { body; }                                     \
	} while (0)

/* Where this CPU last saw a family packet go: its process, destination and device are
 * already in flows and target_devs, so a stream to one address writes (and looks up) nothing
 * while flows_gen stays the same. */
struct last_dest {
	struct sp_flow_key fk;
	__u32 tgid;
	__u32 netns;
	__u32 ifindex;
	__u32 pad;
	__u64 gen;		/* flows_gen after this CPU's own writes */
	__u64 checked_ns;	/* when flows was last looked at for it after a change elsewhere */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct last_dest);
} last_dest SEC(".maps");

/* After a change elsewhere (another sender took the address), look again at most this often:
 * two family processes flooding one address would otherwise rewrite it on every packet. */
#define SP_DEST_RECHECK_NS 1000000

/* A family packet's destination and namespace: remembered so that drops found later by address
 * (at a far namespace, no socket left) are known as this process's. */
static __always_inline void note_dest(const struct sp_flow_key *dst, struct net_device *dev,
				      __u32 tgid)
{
	__u32 zero = 0, ns = dev_netns(dev), ifindex = dev->ifindex, *owner;
	struct last_dest *last = bpf_map_lookup_elem(&last_dest, &zero);
	__u64 gen = gen_now(&flows_gen), now = 0, dk = dev_key(ns, ifindex);

	if (last && last->tgid == tgid && last->netns == ns && last->ifindex == ifindex &&
	    same_flow(&last->fk, dst)) {
		if (last->gen == gen)
			return;
		now = bpf_ktime_get_ns();
		if (now - last->checked_ns < SP_DEST_RECHECK_NS)
			return;
	}
	/* The address belongs to the latest family process that sent to it: drops recognised by
	 * address go to that process, not to an earlier one that has since exited. Written only
	 * when the owner changes. */
	owner = bpf_map_lookup_elem(&flows, dst);
	if (!owner || *owner != tgid) {
		bpf_map_update_elem(&flows, dst, &tgid, BPF_ANY);
		gen_bump(&flows_gen);
	}
	dev_noted(dk, tgid, 0);
	if (last) {
		last->fk = *dst;
		last->tgid = tgid;
		last->netns = ns;
		last->ifindex = ifindex;
		last->gen = gen_now(&flows_gen);
		last->checked_ns = now;	/* 0 when not looked at for a change elsewhere */
	}
}

/* net_dev_queue: a packet enters dev_queue_xmit; remember where the target's packets go. Its
 * owner, and the family's headers, are read once, here, for both this and net_dev_start_xmit
 * (in_flight). */
SEC("tp_btf/net_dev_queue")
int SP_PROG(SP_PROG_DEV_QUEUE, on_dev_queue, struct sk_buff *skb)
{
	struct net_device *dev = skb->dev;
	__u32 tgid, zero = 0;
	struct in_xmit *x;
	__u64 sk;

	if (!dev)
		return 0;
	sk = ptr_num(skb->sk);
	tgid = sock_target(sk);
	x = bpf_map_lookup_elem(&in_flight, &zero);
	if (x) {
		x->queued_skb = (__u64)skb;
		x->queued_sk = sk;
		x->queued_tgid = tgid;
		x->queued_ok = 0;
		x->queued_gen = dev_note_gen;
	}
	if (tgid) {
		struct sp_flow_key fk;
		struct sp_l4 l;

		skb_l4_dst(skb, &l, &fk);
		if (fk.family)
			note_dest(&fk, dev, tgid);
		if (x) {
			x->queued_print = l.print;
			x->queued_ok = l.ok;
		}
	}
	FOR_ROWS(dev, tgid, s, s->queued += 1);
	return 0;
}

static __always_inline void qdisc_depth(struct net_device *dev, struct Qdisc *q)
{
	struct sp_dev_key k = { .ifindex = dev->ifindex, .netns = dev_netns(dev) };
	struct sp_qdepth *d = bpf_map_lookup_elem(&qdepth, &k);
	__u64 qlen = q->q.qlen;
	__u64 backlog = q->qstats.backlog;

	if (!d) {
		struct sp_qdepth init = { .qlen_max = qlen, .backlog_max = backlog };

		bpf_map_update_elem(&qdepth, &k, &init, BPF_ANY);
		return;
	}
	if (qlen > d->qlen_max)
		d->qlen_max = qlen;
	if (backlog > d->backlog_max)
		d->backlog_max = backlog;
}

/* qdisc_enqueue: the packet was accepted by a queueing discipline. */
SEC("tp_btf/qdisc_enqueue")
int SP_PROG(SP_PROG_QDISC_ENQUEUE, on_qdisc_enqueue, struct Qdisc *q, const struct netdev_queue *txq, struct sk_buff *skb)
{
	struct net_device *dev = q->dev_queue->dev;
	__u32 tgid = skb_target(skb);

	if (!dev)
		return 0;
	FOR_ROWS(dev, tgid, s, s->enqueued += 1);
	qdisc_depth(dev, q);
	return 0;
}

/* qdisc_dequeue: `packets` left the queue towards the driver (skb is the first of them). */
SEC("tp_btf/qdisc_dequeue")
int SP_PROG(SP_PROG_QDISC_DEQUEUE, on_qdisc_dequeue, struct Qdisc *q, const struct netdev_queue *txq, int packets,
	     struct sk_buff *skb)
{
	struct net_device *dev = q->dev_queue->dev;
	__u32 tgid;

	if (!dev || packets <= 0 || !skb)
		return 0;
	tgid = skb_target(skb);
	FOR_ROWS(dev, tgid, s, s->dequeued += packets);
	return 0;
}

/* Remembers a family packet by its skb and headers (l: read at net_dev_queue, or 0 to read them
 * here): past this driver it has no socket, and a drop in a far namespace is the family's only if
 * it is this packet (drops: classify). */
static __always_inline void note_sent(const struct sk_buff *skb, __u32 tgid, const struct sp_l4 *l)
{
	struct sp_sent v = { .tgid = tgid }, *old;
	__u64 key = (__u64)skb;
	struct sp_l4 read;

	if (!l) {
		skb_l4(skb, &read);
		l = &read;
	}
	if (!l->ok)
		return;
	/* A sender's skbs come back from the slab at the same few addresses: rewrite the entry in
	 * place (an LRU insert takes a lock and costs ~300 ns here) */
	old = bpf_map_lookup_elem(&sent_skbs, &key);
	if (old) {
		old->print = l->print;
		old->tgid = tgid;
		return;
	}
	v.print = l->print;
	bpf_map_update_elem(&sent_skbs, &key, &v, BPF_ANY);
}

/* The first field of a veth's private area, as the veth driver declares it (struct veth_priv):
 * CO-RE finds it when the driver's BTF is loaded (built in, or the module loaded); the peer has
 * been the first field since veth was written, the offset when the BTF is not there. */
struct veth_priv___sp {
	struct net_device *peer;
} __attribute__((preserve_access_index));

/* Where netdev_priv() puts a driver's private area: the `priv` array at the end of the device
 * (kernels >= 6.11), before that right after the device rounded up to NETDEV_ALIGN (32). */
static __always_inline __u64 netdev_priv_offset(void)
{
	if (bpf_core_field_exists(struct net_device, priv))
		return bpf_core_field_offset(struct net_device, priv);
	return (bpf_core_type_size(struct net_device) + 31) & ~31ULL;
}

/* The namespace at the far end of a veth (its peer's), 0 for any other device or when the
 * peer is gone (`ip link set PEER netns X` moves it: callers read it again now and then); the
 * peer's ifindex in *peer_ifindex. */
static __always_inline __u32 veth_far_netns(const struct net_device *dev, __u32 *peer_ifindex)
{
	const struct rtnl_link_ops *ops = dev->rtnl_link_ops;
	struct net_device *peer = 0;
	const char *kind;
	char name[8] = {};
	__u64 at;

	if (!ops)
		return 0;
	kind = BPF_CORE_READ(ops, kind);
	if (!kind || bpf_probe_read_kernel(name, 5, kind))
		return 0;
	if (name[0] != 'v' || name[1] != 'e' || name[2] != 't' || name[3] != 'h' || name[4])
		return 0;
	at = (__u64)dev + netdev_priv_offset();
	if (bpf_core_type_exists(struct veth_priv___sp))
		at += bpf_core_field_offset(struct veth_priv___sp, peer);
	if (bpf_probe_read_kernel(&peer, sizeof(peer), (void *)at) || !peer)
		return 0;
	*peer_ifindex = BPF_CORE_READ(peer, ifindex);
	return BPF_CORE_READ(peer, nd_net.net, ns.inum);
}

/* A veth hands the family's packet to its peer (in a lab's target host's namespace): that device
 * now carries the family's traffic, and a socket-less drop on it may be the family's (drops:
 * classify). Loopback delivers to itself, which net_dev_queue already noted. The peer is read
 * (five reads, ~130 ns here) only when the device changes on this CPU and every SP_FAR_RECHECK
 * packets; target_devs entries are never deleted during a run, so a device once noted stays
 * noted. */
static __always_inline void note_far_netns(const struct net_device *dev, struct in_xmit *x, __u32 tgid)
{
	__u32 ifindex = dev->ifindex, devns = dev_netns((struct net_device *)dev), ns, peer = 0;

	if (x->far_dev == (__u64)dev && x->far_ifindex == ifindex && x->far_devns == devns &&
	    x->far_left) {
		x->far_left -= 1;
		return;
	}
	ns = veth_far_netns(dev, &peer);
	if (ns && (ns != x->far_ns || peer != x->far_ifindex_peer))
		dev_noted(dev_key(ns, peer), tgid, 1);
	x->far_dev = (__u64)dev;
	x->far_ifindex = ifindex;
	x->far_devns = devns;
	x->far_ns = ns;
	x->far_ifindex_peer = peer;
	x->far_left = SP_FAR_RECHECK - 1;
}

/* net_dev_start_xmit: the family's packet goes to the driver; veth and lo deliver it to the far
 * side before the driver returns, so it is marked here, not at net_dev_xmit. The packet
 * net_dev_queue saw last on this CPU (the same skb on the same socket: a device without a queue,
 * or a queue that sent it at once) brings its owner and headers from there. */
SEC("tp_btf/net_dev_start_xmit")
int SP_PROG(SP_PROG_DEV_START_XMIT, on_dev_start_xmit, const struct sk_buff *skb, const struct net_device *dev)
{
	__u64 sk = ptr_num(skb->sk);
	struct sp_l4 queued, *l = 0;
	struct in_xmit *x;
	__u32 tgid, zero = 0;

	x = bpf_map_lookup_elem(&in_flight, &zero);
	if (!x)
		return 0;
	if (x->queued_skb == (__u64)skb && x->queued_sk == sk && x->queued_gen == dev_note_gen) {
		/* used once: a packet the driver hands back (busy) and sends again reads its own */
		x->queued_skb = 0;
		tgid = x->queued_tgid;
		if (x->queued_ok) {
			queued.ok = 1;
			queued.print = x->queued_print;
			l = &queued;
		}
	} else {
		tgid = sock_target(sk);
		if (tgid && dev_sampled) {
			/* queued while net_dev_queue was detached: its destination is noted here (the
			 * drops and the reply counter know the family's addresses from it) */
			struct sp_flow_key fk;

			skb_l4_dst(skb, &queued, &fk);
			if (fk.family)
				note_dest(&fk, (struct net_device *)dev, tgid);
			l = &queued;
		}
	}
	if (!tgid)
		return 0;
	x->skb = (__u64)skb;
	x->tgid = tgid;
	/* Only a virtual device (veth, lo: no parent device) hands the packet to another part of
	 * this host, where it can die without a socket; a NIC's packet leaves the host, and the
	 * map write (~65 ns a packet) would buy nothing. */
	if (!dev->dev.parent) {
		note_sent(skb, tgid, l);
		note_far_netns(dev, x, tgid);
	}
	return 0;
}

/* net_dev_xmit: the driver's verdict on one packet. The owner is the one noted at
 * net_dev_start_xmit: a driver may orphan the skb before it returns (loopback does), so its
 * socket no longer says whose it was. */
SEC("tp_btf/net_dev_xmit")
int SP_PROG(SP_PROG_DEV_XMIT, on_dev_xmit, struct sk_buff *skb, int rc, struct net_device *dev, unsigned int len)
{
	__u32 zero = 0, tgid;
	struct in_xmit *x;

	if (!dev)
		return 0;
	x = bpf_map_lookup_elem(&in_flight, &zero);
	if (x && x->skb == (__u64)skb) {
		tgid = x->tgid;
		/* The driver has returned: whatever arrived on the far side already did. */
		x->skb = 0;
	} else {
		tgid = skb_target(skb);
	}
	FOR_ROWS(dev, tgid, s, {
		if (rc == 0) {
			s->xmit_ok += 1;
			s->xmit_bytes += len;
		} else if (rc == 0x10) {
			s->xmit_busy += 1;
		} else {
			s->xmit_err += 1;
		}
	});
	return 0;
}

/* neigh_event_send_done: a family thread's packet needed the neighbour; err 1 = queued for it.
 * The reply can be handled before this fires (softirqs run as the sender re-enables them, so
 * neigh_update comes first on a veth): a resolution already over is counted here, from the state. */
SEC("tp_btf/neigh_event_send_done")
int SP_PROG(SP_PROG_NEIGH_SEND, on_neigh_send, struct neighbour *n, int err)
{
	struct sp_thread *t = family_thread((__u32)bpf_get_current_pid_tgid());
	struct net_device *dev;
	__u64 key = (__u64)n;
	__u32 tgid;
	__u8 state;
	int fresh;

	if (!t || err != 1)
		return 0;
	tgid = t->tgid;
	dev = n->dev;
	state = n->nud_state;
	fresh = !bpf_map_lookup_elem(&neighs, &key);
	if (fresh && !(state & (NUD_VALID | NUD_FAILED)))
		bpf_map_update_elem(&neighs, &key, &tgid, BPF_ANY);
	FOR_ROWS(dev, tgid, s, {
		s->neigh_queued += 1;
		if (fresh) {
			s->neigh_started += 1;
			if (state & NUD_VALID)
				s->neigh_resolved += 1;
			else if (state & NUD_FAILED)
				s->neigh_failed += 1;
		}
	});
	return 0;
}

static __always_inline void neigh_outcome(struct neighbour *n, int failed)
{
	__u64 key = (__u64)n;
	__u32 *tgid = bpf_map_lookup_elem(&neighs, &key);
	struct net_device *dev;
	__u32 who;

	if (!tgid)
		return;
	who = *tgid;
	bpf_map_delete_elem(&neighs, &key);
	dev = n->dev;
	FOR_ROWS(dev, who, s, {
		if (failed)
			s->neigh_failed += 1;
		else
			s->neigh_resolved += 1;
	});
}

/* neigh_timer_handler: retries ran out for a neighbour the target waited on. */
SEC("tp_btf/neigh_timer_handler")
int SP_PROG(SP_PROG_NEIGH_TIMER, on_neigh_timer, struct neighbour *n, int err)
{
	if (n->nud_state & NUD_FAILED)
		neigh_outcome(n, 1);
	return 0;
}

/* neigh_update: a neighbour the target waited on got an address (or failed). */
SEC("tp_btf/neigh_update")
int SP_PROG(SP_PROG_NEIGH_UPDATE, on_neigh_update, struct neighbour *n, const u8 *lladdr, u8 new, u32 flags, u32 pid)
{
	if (new & NUD_VALID)
		neigh_outcome(n, 0);
	else if (new & NUD_FAILED)
		neigh_outcome(n, 1);
	return 0;
}
