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

/*
 * Threads of the target family: each thread's record in a slot of an array (user space gives
 * it the entries of `--map-size threads`, and thread_slots and slot_owner as many), found from
 * its tid through tid_slots, a direct-mapped array the verifier inlines: the hot programs look a
 * thread up on every send and switch, and an array costs them an index where a hash lookup cost
 * ~50 ns a call here (measured 2026-11-25). thread_slots is the full tid -> slot map: the
 * fallback when two family tids share a tid_slots entry, and what user space iterates.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_THREADS);
	__type(key, __u32);
	__type(value, struct sp_thread);
} threads SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_THREADS);
	__type(key, __u32);
	__type(value, __u32);
} thread_slots SEC(".maps");

/* slot -> tid of its thread: an insert with BPF_NOEXIST claims a free slot (once, whichever of
 * the fork program and user space comes first); deleted when user space forgets the thread. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_THREADS);
	__type(key, __u32);
	__type(value, __u32);
} slot_owner SEC(".maps");

#define SP_TID_SLOT_WAYS (1 << 12)

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, SP_TID_SLOT_WAYS);
	__type(key, __u32);
	__type(value, struct sp_tid_slot);
} tid_slots SEC(".maps");

/* The record of family thread `tid`, whatever its state; 0 if it has none. A record names its
 * own tid: a tid_slots entry being rewritten, or a slot being freed, is not taken for another's. */
static __always_inline struct sp_thread *thread_rec(__u32 tid)
{
	__u32 idx = tid & (SP_TID_SLOT_WAYS - 1), s, *sp;
	struct sp_tid_slot *c = bpf_map_lookup_elem(&tid_slots, &idx);
	struct sp_thread *t;

	if (c && c->tid == tid) {
		s = c->slot;
		t = bpf_map_lookup_elem(&threads, &s);
		if (t && t->tid == tid)
			return t;
	}
	sp = bpf_map_lookup_elem(&thread_slots, &tid);
	if (!sp)
		return 0;
	s = *sp;
	t = bpf_map_lookup_elem(&threads, &s);
	return t && t->tid == tid ? t : 0;
}

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

/* Devices the family's packets were queued on or delivered to, by dev_key(namespace, ifindex)
 * -> tgid, with SP_DEV_FAR for a device they were only delivered to: an address match (above)
 * counts only for a packet on one of these, so other namespaces using the same addresses, and
 * other devices of the family's namespaces (the root namespace's lo when the scanner runs in a
 * namespace behind a veth), stay apart. Entries are never deleted during a run, and a far entry
 * only ever becomes a near one (dev_noted). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, __u64);
	__type(value, __u32);
} target_devs SEC(".maps");

/* A target_devs value's flag: the far end of a veth the family sends through (its peer, in a
 * lab's target namespace), where the family's packets arrive and its replies never do: a drop
 * there may be the family's, a packet received there is not a reply to it. Above any pid. */
#define SP_DEV_FAR (1u << 31)

/* Key of target_devs: a device's namespace inode and ifindex. */
static __always_inline __u64 dev_key(__u32 netns, __u32 ifindex)
{
	return (__u64)netns << 32 | ifindex;
}

/* What a packet's headers say about it (skb_l4): a fingerprint to recognise the same packet
 * later, and whether it is a reply the kernel makes on its own (TCP RST, ICMP error). */
struct sp_l4 {
	__u64 print;		/* IP id or flow label, protocol, first 8 bytes of the transport header */
	__u32 reply_like;	/* a TCP RST, or an ICMP/ICMPv6 error */
	__u32 ok;		/* the headers could be read */
};

/* A packet a family socket handed to a device (netdev: net_dev_start_xmit), by skb address:
 * the driver orphans it (veth, lo), so a drop found later by its address pair is the family's
 * only if it is this very packet. Not deleted when freed: `print` tells a reused skb apart. */
struct sp_sent {
	__u64 print;		/* sp_l4.print when it was sent */
	__u32 tgid;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, __u64);
	__type(value, struct sp_sent);
} sent_skbs SEC(".maps");

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

/*
 * A context switch of family thread `t` that no program was given: the thread is running now
 * (at `now`) while its record says it is off the CPU since state_since_ns (its switch in was not
 * delivered), so the time since then is part off the CPU and part on it, in a split nobody saw.
 * It is counted as unplaced (health), not put in any state, and the thread is on the CPU from
 * `now`. On the 6.18 guests of docs/testing.md the kernel gives no program a sched_switch whose
 * previous task is a thread of the sandbox's pid 1, so a family thread switched in after one is
 * never seen arriving.
 */
static __always_inline void missed_switch(__u64 since, __u64 now)
{
	__u32 idx = SP_H_UNPLACED_NS;
	__u64 *v;

	health_inc(SP_H_MISSED_SWITCHES);
	v = bpf_map_lookup_elem(&health, &idx);
	if (v && now > since)
		*v += now - since;
}

static __always_inline void missed_switch_in(struct sp_thread *t, __u64 now)
{
	missed_switch(t->state_since_ns, now);
	t->sched_state = SP_ST_RUNNING;
	t->state_since_ns = now;
	t->oncpu_since_ns = now;
}

/* Whether the record of a thread that is running says it is off the CPU: RUNNABLE, WOKEN,
 * SLEEPING or BLOCKED_SEND (not RUNNING, nor UNKNOWN before its first event, nor EXITED). */
static __always_inline bool off_cpu_state(const struct sp_thread *t)
{
	return t->sched_state != SP_ST_RUNNING && t->sched_state != SP_ST_UNKNOWN &&
	       t->sched_state != SP_ST_EXITED;
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

/*
 * One byte per thread id of the family, 1 while the thread is the family's: SP_TID_WORDS
 * entries of 64 at most (PID_MAX_LIMIT = 4M ids: 4 MiB), sized by user space before load to the
 * kernel's pid_max (32,768 ids by default: 32 KiB); no thread id is above it. Every hot program asks this first: an array lookup the verifier inlines and a
 * byte load, so threads outside the family (almost every call of a machine-wide tracepoint) cost
 * a few instructions and no hash lookup. Set by user space (threads seen at attach) and by the
 * fork program; cleared at thread exit. A byte each, not a bit: every writer stores its own
 * thread's byte, so no read-modify-write of a word that other threads' bits share (an atomic OR
 * or AND, which kernels before 5.12 refuse) is needed to lose no update.
 */
#define SP_TID_WORDS (1 << 16)

struct sp_tid_flags {
	__u8 on[64];		/* thread id (index * 64 + i) is the family's */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);	/* user space stores bytes in place */
	__uint(max_entries, SP_TID_WORDS);
	__type(key, __u32);
	__type(value, struct sp_tid_flags);
} family_tids SEC(".maps");

/* Thread `tid`'s byte in family_tids. */
static __always_inline __u8 *tid_flag(__u32 tid)
{
	__u32 idx = tid >> 6;	/* past the array's end: no entry, not the family's */
	struct sp_tid_flags *w = bpf_map_lookup_elem(&family_tids, &idx);

	return w ? &w->on[tid & 63] : 0;
}

static __always_inline int in_family(__u32 tid)
{
	__u8 *f = tid_flag(tid);

	return f && *f;
}

/*
 * What scanprof's programs cost the family itself, apart from their runs for the rest of the
 * machine: each program's runs while a family thread is the task on the CPU, timed. The kernel's
 * run-time statistics cannot tell them apart. Timing is on only while user space reads those
 * statistics (`cost_timing`, set around each window): outside it a program pays one inlined
 * array load; inside it a run for another task also pays the bit test, and a family run two
 * clock reads and a per-CPU add.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} cost_timing SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SP_PROG_MAX);
	__type(key, __u32);
	__type(value, struct sp_prog_cost);
} prog_cost SEC(".maps");

/* The clock at a run's start when it runs on a family thread while timing is on; 0 otherwise. */
static __always_inline __u64 cost_begin(void)
{
	__u32 zero = 0, *on = bpf_map_lookup_elem(&cost_timing, &zero);

	if (!on || !*on || !in_family((__u32)bpf_get_current_pid_tgid()))
		return 0;
	return bpf_ktime_get_ns();
}

/* Adds a timed run (cost_begin's t0, non-zero) to program `prog`'s counters on this CPU. */
static __always_inline void cost_end(__u32 prog, __u64 t0)
{
	struct sp_prog_cost *c;

	if (!t0)
		return;
	c = bpf_map_lookup_elem(&prog_cost, &prog);
	if (c) {
		c->runs += 1;
		c->run_ns += bpf_ktime_get_ns() - t0;
	}
}

/*
 * BPF_PROG with each run timed for the family (cost_begin/cost_end around the body): written
 * `int SP_PROG(SP_PROG_X, name, args...)` where BPF_PROG would be `int BPF_PROG(name, args...)`.
 */
#define SP_PROG(prog, name, args...)					\
name(unsigned long long *ctx);						\
static __always_inline typeof(name(0))					\
____##name(unsigned long long *ctx, ##args);				\
typeof(name(0)) name(unsigned long long *ctx)				\
{									\
	__u64 ___t0 = cost_begin();					\
	typeof(name(0)) ___ret;						\
	_Pragma("GCC diagnostic push")					\
	_Pragma("GCC diagnostic ignored \"-Wint-conversion\"")		\
	___ret = ____##name(___bpf_ctx_cast(args));			\
	_Pragma("GCC diagnostic pop")					\
	cost_end(prog, ___t0);						\
	return ___ret;							\
}									\
static __always_inline typeof(name(0))					\
____##name(unsigned long long *ctx, ##args)

static __always_inline struct sp_thread *family_thread(__u32 tid)
{
	struct sp_thread *t;

	if (!in_family(tid))
		return 0;
	t = thread_rec(tid);
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

/*
 * Counter rows kept in slots of a per-CPU array: the hot path indexes an array where a per-CPU
 * hash would hash the row's key on every event. A row's slot is named in `slots` (key -> slot)
 * and claimed in `rows` (slot -> key): an insert with BPF_NOEXIST succeeds once, so two CPUs
 * meeting a new row at once agree on its slot (a fetch-and-add would need BPF v3 code, which
 * older verifiers see differently). Slots are never given back during a run.
 */
#define SP_NO_SLOT 0xffffffff
#define SP_SLOT_PROBES 8

/* Whether two keys of `size` bytes (a multiple of 4, at most 32) are equal. */
static __always_inline int key_eq(const void *a, const void *b, __u32 size)
{
	const __u32 *x = a, *y = b;

	for (int i = 0; i < 8; i++) {
		if (i * 4 >= size)
			break;
		if (x[i] != y[i])
			return 0;
	}
	return 1;
}

/* A multiplicative hash of a key's words (same limits as key_eq). */
static __always_inline __u32 key_hash(const void *key, __u32 size)
{
	const __u32 *x = key;
	__u32 h = 0;

	for (int i = 0; i < 8; i++) {
		if (i * 4 >= size)
			break;
		h = (h ^ x[i]) * 2654435761u;
	}
	return h ^ (h >> 16);
}

/* The slot of a row, claimed on first sight: the first free one of SP_SLOT_PROBES slots from the
 * key's hash. *fresh says this call made the row; SP_NO_SLOT when the table is full. */
static __always_inline __u32 slot_of(void *slots, void *rows, const void *key, __u32 key_size,
				     __u32 nslots, int *fresh)
{
	__u32 *slot = bpf_map_lookup_elem(slots, key), h, s;
	void *held;

	*fresh = 0;
	if (slot)
		return *slot;
	h = key_hash(key, key_size);
	for (int i = 0; i < SP_SLOT_PROBES; i++) {
		s = (h + i) & (nslots - 1);
		if (bpf_map_update_elem(rows, &s, key, BPF_NOEXIST)) {
			/* taken: by this very row on another CPU, or by another row */
			held = bpf_map_lookup_elem(rows, &s);
			if (!held || !key_eq(held, key, key_size))
				continue;
		} else {
			*fresh = 1;
		}
		bpf_map_update_elem(slots, key, &s, BPF_ANY);
		return s;
	}
	return SP_NO_SLOT;
}

/* Network namespace inode of a device, 0 when unknown. */
static __always_inline __u32 dev_netns(struct net_device *dev)
{
	if (!dev)
		return 0;
	return dev->nd_net.net->ns.inum;	/* BTF pointers: plain loads, no helper calls */
}

/* Device names and root qdisc kinds by (ifindex, netns): written where a device first gets a row
 * of its own, a device stage's (netdev) or a drop's (drops), so that a drop row is named also
 * when no device-stage program saw its device (a device that only receives, or one that sent
 * only outside the windows of --device-stages sampled). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, struct sp_dev_key);
	__type(value, struct sp_dev_name);
} devnames SEC(".maps");

/* Notes a device's name and the kind of its root qdisc: once per new row, off the per-packet
 * path. */
static __always_inline void dev_name_note(struct net_device *dev, __u32 ifindex, __u32 netns)
{
	struct sp_dev_key k = { .ifindex = ifindex, .netns = netns };
	const struct Qdisc_ops *ops = BPF_CORE_READ(dev, qdisc, ops);
	struct sp_dev_name n = {};

	bpf_probe_read_kernel_str(n.name, sizeof(n.name), dev->name);
	/* The root qdisc's kind says what a qdisc drop means: a shaper's rate, or a queue's
	 * length. */
	if (ops)
		bpf_probe_read_kernel_str(n.qdisc, sizeof(n.qdisc), ops->id);
	bpf_map_update_elem(&devnames, &k, &n, BPF_ANY);
}

/* Remote address of an IPv4/IPv6 packet at its network header: daddr when `dst`, else saddr. */
static __always_inline int skb_addr(struct sk_buff *skb, int dst, struct sp_flow_key *key)
{
	unsigned char *head = skb->head;
	__u16 nh = skb->network_header;
	__u16 proto = bpf_ntohs(skb->protocol);

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

/* Reads the IP and transport headers at the network header into *l (zeroed when unreadable),
 * in one read when the IP header has no options. The fingerprint keeps only fields no hop
 * changes (not the TTL or the IP checksum). With `dst`, the same read also gives the packet's
 * destination address there (as skb_addr(skb, 1, dst)); dst->family stays 0 when it has none. */
static __always_inline void skb_l4_dst(const struct sk_buff *skb, struct sp_l4 *l,
				       struct sp_flow_key *dst)
{
	unsigned char *head = skb->head;
	__u16 nh = skb->network_header;
	__u16 proto = bpf_ntohs(skb->protocol);
	__u8 b[56] = {}, *t;	/* an IPv6 header and 16 bytes of what follows */
	__u64 word, ip;
	__u8 p;

	l->print = 0;
	l->reply_like = 0;
	l->ok = 0;
	if (dst)
		__builtin_memset(dst, 0, sizeof(*dst));
	if (nh == (__u16)~0U)
		return;
	if (bpf_probe_read_kernel(b, sizeof(b), head + nh))
		return;
	if (proto == 0x0800 && (b[0] >> 4) == 4) {
		__u32 ihl = b[0] & 0xf;

		if (dst) {
			__builtin_memcpy(dst->addr, b + 16, 4);
			dst->family = 2;
		}
		p = b[9];
		ip = ((__u64)b[4] << 16 | (__u64)b[5] << 8) | p;	/* IP id, protocol */
		if (ihl < 5)
			return;
		if (ihl > 5) {
			/* options: the transport header is further on, read it apart */
			if (bpf_probe_read_kernel(b + 20, 16, head + nh + ihl * 4))
				return;
		}
		t = b + 20;
	} else if (proto == 0x86DD && (b[0] >> 4) == 6) {
		if (dst) {
			__builtin_memcpy(dst->addr, b + 24, 16);
			dst->family = 10;
		}
		p = b[6];
		ip = ((__u64)(b[1] & 0xf) << 24 | (__u64)b[2] << 16 | (__u64)b[3] << 8) | p;	/* flow label */
		t = b + 40;
	} else {
		return;
	}
	__builtin_memcpy(&word, t, sizeof(word));
	l->print = word ^ (ip * 0x9E3779B97F4A7C15ULL);
	l->ok = 1;
	if (p == 6)
		l->reply_like = (t[13] & 0x04) != 0;			/* RST */
	else if (p == 1)
		l->reply_like = t[0] == 3 || t[0] == 11 || t[0] == 12;	/* unreachable, time, param */
	else if (p == 58)
		l->reply_like = t[0] >= 1 && t[0] <= 4;			/* ICMPv6 errors */
}

static __always_inline void skb_l4(const struct sk_buff *skb, struct sp_l4 *l)
{
	skb_l4_dst(skb, l, 0);
}

/* Whether two flow keys name the same address (word by word: no memcmp in BPF). */
static __always_inline int same_flow(const struct sp_flow_key *a, const struct sp_flow_key *b)
{
	const __u32 *x = (const __u32 *)a->addr, *y = (const __u32 *)b->addr;

	return x[0] == y[0] && x[1] == y[1] && x[2] == y[2] && x[3] == y[3] && a->family == b->family;
}

/* Sockets recently looked up on this CPU and their owners (0: not the family's), in a small
 * direct-mapped cache: a packet passes four or five hooks, a sender streams from one socket, and
 * the replies the kernel makes (ICMP, RST) come from a few sockets of its own that take turns
 * with the sender's, so most lookups end here without touching target_socks. */
#define SP_SOCK_WAYS 8

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
	__uint(max_entries, SP_SOCK_WAYS);
	__type(key, __u32);
	__type(value, struct sock_owner);
} last_sock SEC(".maps");

/* Bumped whenever flows or target_devs gets a new or changed entry: per-CPU caches of what an
 * address or namespace means (drops) are valid while it stays the same. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} flows_gen SEC(".maps");

/* Bumped whenever target_devs gets a new or changed entry (dev_noted; flows_gen is bumped with
 * it): the reply counter's per-CPU note of a device it does not count on is valid while it stays
 * the same. Apart from flows_gen, which every new destination of a scan moves. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} devs_gen SEC(".maps");

/* The value of a generation counter (a one-entry array: flows_gen, devs_gen, fd_gen, sock_gen). */
static __always_inline __u64 gen_now(void *counter)
{
	__u32 zero = 0;
	__u64 *gen = bpf_map_lookup_elem(counter, &zero);

	return gen ? *gen : 0;
}

/* Moves a generation counter on: every cache made under the old value is stale. */
static __always_inline void gen_bump(void *counter)
{
	__u32 zero = 0;
	__u64 *gen = bpf_map_lookup_elem(counter, &zero);

	if (gen)
		__sync_fetch_and_add(gen, 1);
}

/* Notes a device (dev_key) in target_devs for the family process tgid: near, its packets were
 * queued on it, or far (SP_DEV_FAR), they were only delivered to it. A near note replaces a far
 * one, never the other way round. */
static __always_inline void dev_noted(__u64 dk, __u32 tgid, int far)
{
	__u32 *had = bpf_map_lookup_elem(&target_devs, &dk), v = far ? tgid | SP_DEV_FAR : tgid;

	if (had && (far || !(*had & SP_DEV_FAR)))
		return;
	/* a far note goes only where there is none: a near one written meanwhile stays */
	if (bpf_map_update_elem(&target_devs, &dk, &v, far ? BPF_NOEXIST : BPF_ANY))
		return;
	gen_bump(&flows_gen);
	gen_bump(&devs_gen);
}

/* Bumped whenever a family thread may have changed what one of its fds refers to (close, dup2,
 * dup3, close_range returned; exec closed its close-on-exec fds): every thread's cached fd ->
 * socket then resolves again (send_path). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} fd_gen SEC(".maps");


/* A filter of the sockets in target_socks: one byte per hash of the pointer, set when a socket
 * is registered (never cleared during a run). A clear byte means "not the family's" for certain,
 * so other processes' packets cost an inlined array lookup and a byte load, no cache or hash.
 * Bytes, not bits of a shared word: setting one is a plain store (kernels before 5.12 have no
 * atomic OR, and a read-modify-write could lose another socket's bit set at the same time). */
#define SP_SOCK_FILTER_WORDS 1024

struct sp_sock_flags {
	__u8 on[64];		/* some registered socket hashes to (index * 64 + i) */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, SP_SOCK_FILTER_WORDS);
	__type(key, __u32);
	__type(value, struct sp_sock_flags);
} sock_filter SEC(".maps");

static __always_inline __u32 sock_hash(__u64 sk)
{
	return (__u32)((sk >> 6) ^ (sk >> 22)) * 2654435761u;
}

/* The filter byte of sk: 16 bits of its hash, an entry of 1024 and a byte of 64. */
static __always_inline __u8 *sock_filter_flag(__u64 sk)
{
	__u32 h = sock_hash(sk) >> 16;
	__u32 idx = (h >> 6) & (SP_SOCK_FILTER_WORDS - 1);
	struct sp_sock_flags *w = bpf_map_lookup_elem(&sock_filter, &idx);

	return w ? &w->on[h & 63] : 0;
}

/* Marks sk as possibly the family's; call before it joins target_socks. */
static __always_inline void sock_filter_add(__u64 sk)
{
	__u8 *f = sock_filter_flag(sk);

	if (f)
		*f = 1;
}

/* tgid of the family process that owns the socket sk, 0 if none. */
static __always_inline __u32 sock_target(__u64 sk)
{
	__u32 way, *tgid;
	struct sock_owner *c;
	__u8 *f;
	__u64 g;

	if (!sk)
		return 0;
	f = sock_filter_flag(sk);
	if (f && !*f)
		return 0;
	g = gen_now(&sock_gen);
	/* struct sock objects are over 512 bytes apart: bits above that spread them */
	way = (__u32)((sk >> 9) ^ (sk >> 12)) & (SP_SOCK_WAYS - 1);
	c = bpf_map_lookup_elem(&last_sock, &way);
	if (c && c->sk == sk && c->gen == g)
		return c->tgid;
	tgid = bpf_map_lookup_elem(&target_socks, &sk);
	if (c) {
		c->sk = sk;
		c->gen = g;
		c->tgid = tgid ? *tgid : 0;
	}
	return tgid ? *tgid : 0;
}

/*
 * A word per CPU through which a BTF pointer becomes a plain number. A pointer loaded directly
 * (skb->sk in a tp_btf program) is typed by the verifier, which refuses the shifts and
 * multiplications that hash it; stored in a map value and loaded back it is a number (root's
 * programs may store pointers in maps: the verifier's allow_ptr_leaks). A store and a load
 * here, where bpf_probe_read_kernel of the same field costs ~35 ns a call on this machine.
 */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} ptr_word SEC(".maps");

static __always_inline __u64 ptr_num(const void *p)
{
	__u32 zero = 0;
	__u64 *w = bpf_map_lookup_elem(&ptr_word, &zero);

	if (!w)
		return 0;
	*w = (__u64)p;
	/* the load must come from the map, not from the register the compiler still holds */
	return *(volatile __u64 *)w;
}

/* tgid of the family process that owns the skb's socket, 0 if none. */
static __always_inline __u32 skb_target(const struct sk_buff *skb)
{
	return sock_target(ptr_num(skb->sk));
}

/* The family's PACKET_STATISTICS reads by packet socket (struct sock *) -> struct sp_ring_reads:
 * written by send_path at the getsockopt, read by the rings iterator; user space deletes a
 * socket's entry once it has taken its last sums after the socket closed. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 256);
	__type(key, __u64);
	__type(value, struct sp_ring_reads);
} ring_reads SEC(".maps");

/* The ring_reads entry of the packet socket at skp whose file's inode is ino: a fresh one when
 * there is none, or when the one there is of an earlier socket at the same address (another
 * inode). NULL only when the map refuses it. */
static __always_inline struct sp_ring_reads *ring_reads_entry(__u64 skp, __u64 ino)
{
	struct sp_ring_reads *e = bpf_map_lookup_elem(&ring_reads, &skp);
	struct sp_ring_reads fresh = { .ino = ino };

	if (e && e->ino == ino)
		return e;
	bpf_map_update_elem(&ring_reads, &skp, &fresh, BPF_ANY);
	return bpf_map_lookup_elem(&ring_reads, &skp);
}

#endif /* SCANPROF_SHARED_H */
