// SPDX-License-Identifier: GPL-2.0
/*
 * Scanner uprobes: one entry and one return program serve every function a scanner profile names
 * (wrappers/*.toml). The attach cookie's low 32 bits are the probe's index into `uprobe_cfg`.
 * Calls from outside the target family are ignored. Every call is counted per probe (hits, time
 * inside); rare probes also stream a record per entry and return with the argument registers, the
 * return value, up to SP_UPROBE_BUF bytes behind a pointer argument, and the thread's packet count
 * at that moment. A per-packet probe is attached twice for a while, ahead (for every process
 * running the file) and pinned (to one process); `uprobe_handed` lets exactly one of the two count
 * each call, so that no call is lost or counted twice.
 */
#include "shared.h"

char LICENSE[] SEC("license") = "GPL";

/* Per probe index: what to capture. Written by user space before it attaches the probe. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, SP_UPROBE_MAX);
	__type(key, __u32);
	__type(value, struct sp_uprobe_cfg);
} uprobe_cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SP_UPROBE_MAX);
	__type(key, __u32);
	__type(value, struct sp_uprobe_stats);
} uprobe_stats SEC(".maps");

/*
 * (tid << 32 | probe) present: the hand-over link counted the call this thread is entering, and
 * the ahead link, which runs after it at the same breakpoint hit, must not. The kernel runs a
 * uprobe's consumers newest first (consumer_add puts a new one at the head of the list, from
 * 3.5 to 6.18), and the hand-over link is always attached after the ahead one, so at every hit
 * that both serve the hand-over program runs first and marks the hit, and the ahead program
 * removes the mark. Nothing else decides: a hit counted by neither or by both needs a decision
 * that changes between the two programs of one hit, and none does (attaching the hand-over link
 * adds it ahead of any hit still in progress; detaching the ahead link after its program ran,
 * or before, is the same). A mark left when the ahead link is gone is overwritten at the
 * thread's next hit. (A map that user space set at the hand-over changed between the two
 * programs of a hit when the update landed there: the call was counted by neither, a flake
 * seen beside a busy CPU.)
 */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, __u64);
	__type(value, __u8);
} uprobe_handed SEC(".maps");

/* Entry time of the call in progress, by (tid << 32 | probe): pairs a return with its entry. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, __u64);
} uprobe_entry SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} calls SEC(".maps");

/* Types that no map names, referenced here so that the Rust skeleton carries them. */
struct sp_call abi_call;
enum sp_ucall_kind abi_ucall_kind;

static __always_inline struct sp_call *call_reserve(__u32 kind, __u32 probe, __u64 id, __u64 now)
{
	struct sp_call *c = bpf_ringbuf_reserve(&calls, sizeof(*c), 0);
	__u32 tid = (__u32)id;
	struct sp_thread *t;

	if (!c) {
		health_inc(SP_H_RB_LOST);
		return 0;
	}
	c->ts_ns = now;
	c->kind = kind;
	c->probe = probe;
	c->tgid = id >> 32;
	c->tid = tid;
	c->ret = 0;
	c->inside_ns = 0;
	c->buf_len = 0;
	c->pad = 0;
	t = thread_rec(tid);
	c->packets = t ? t->packets : 0;
	c->last_pkt_ns = t ? t->last_pkt_ns : 0;
	return c;
}

/* Whether this link counts the call entering at this breakpoint hit: a hand-over link counts
 * every call it sees and marks the hit for the ahead link, which counts the hits not marked
 * (see uprobe_handed); any other pinned link counts every call. */
static __always_inline bool link_counts(__u64 cookie, __u32 probe, __u64 id)
{
	__u64 key = (id << 32) | probe;
	__u8 one = 1;

	if (cookie & SP_UP_COOKIE_HANDOVER) {
		bpf_map_update_elem(&uprobe_handed, &key, &one, BPF_ANY);
		return true;
	}
	if (cookie & SP_UP_COOKIE_AHEAD)
		return bpf_map_delete_elem(&uprobe_handed, &key) != 0;
	return true;
}

/* The probe a hit is for, and its configuration and counters; false for calls from outside the
 * family or a probe index user space never configured. */
static __always_inline bool family_probe(struct pt_regs *ctx, __u64 id, __u64 *cookie, __u32 *probe,
					 struct sp_uprobe_cfg **cfg, struct sp_uprobe_stats **st)
{
	__u32 tgid = id >> 32;

	if (!bpf_map_lookup_elem(&family, &tgid))
		return false;
	*cookie = bpf_get_attach_cookie(ctx);
	*probe = (__u32)*cookie;
	*cfg = bpf_map_lookup_elem(&uprobe_cfg, probe);
	*st = bpf_map_lookup_elem(&uprobe_stats, probe);
	return *cfg && *st;
}

static __always_inline int timed_uprobe_entry(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u64 now = bpf_ktime_get_ns();
	struct sp_uprobe_cfg *cfg;
	struct sp_uprobe_stats *st;
	struct sp_call *c;
	__u64 key, cookie;
	__u32 probe;

	if (!family_probe(ctx, id, &cookie, &probe, &cfg, &st) || !link_counts(cookie, probe, id))
		return 0;
	key = (id << 32) | probe;
	st->hits++;
	bpf_map_update_elem(&uprobe_entry, &key, &now, BPF_ANY);
	if (!(cfg->flags & SP_UP_RECORD))
		return 0;
	c = call_reserve(SP_UCALL_ENTRY, probe, id, now);
	if (!c)
		return 0;
	c->args[0] = PT_REGS_PARM1(ctx);
	c->args[1] = PT_REGS_PARM2(ctx);
	c->args[2] = PT_REGS_PARM3(ctx);
	c->args[3] = PT_REGS_PARM4(ctx);
	c->args[4] = PT_REGS_PARM5(ctx);
	c->args[5] = PT_REGS_PARM6(ctx);
	if (cfg->flags & SP_UP_BUFFER) {
		__u32 ptr_arg = cfg->ptr_arg, len_arg = cfg->len_arg;
		__u64 len = cfg->max_bytes;
		const void *ptr;

		if (ptr_arg < SP_UPROBE_ARGS) {
			ptr = (const void *)c->args[ptr_arg];
			if (len_arg < SP_UPROBE_ARGS && c->args[len_arg] < len)
				len = c->args[len_arg];
			if (len > SP_UPROBE_BUF)
				len = SP_UPROBE_BUF;
			if (len > 0 && ptr && !bpf_probe_read_user(c->buf, len, ptr))
				c->buf_len = len;
		}
	}
	bpf_ringbuf_submit(c, BPF_RB_NO_WAKEUP);
	return 0;
}

static __always_inline int timed_uprobe_return(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u64 now = bpf_ktime_get_ns();
	__u64 inside = 0, *entered;
	struct sp_uprobe_cfg *cfg;
	struct sp_uprobe_stats *st;
	struct sp_call *c;
	__u64 key, cookie;
	__u32 probe;

	if (!family_probe(ctx, id, &cookie, &probe, &cfg, &st))
		return 0;
	key = (id << 32) | probe;
	entered = bpf_map_lookup_elem(&uprobe_entry, &key);
	if (entered) {
		/* The return of a counted entry, whichever link's return probe sees it first: a call
		 * that entered before a hand-over returns through the ahead link only, and one that
		 * entered after it through both. */
		inside = now - *entered;
		if (bpf_map_delete_elem(&uprobe_entry, &key))
			return 0;
		st->returns++;
		st->inside_ns += inside;
	} else if (cookie & SP_UP_COOKIE_HANDOVER) {
		/* A return whose entry came before the probes (attached mid-call) is recorded by the
		 * link that was there first; only per-packet probes, which record nothing, are
		 * handed over. */
		return 0;
	}
	if (!(cfg->flags & SP_UP_RECORD))
		return 0;
	c = call_reserve(SP_UCALL_RETURN, probe, id, now);
	if (!c)
		return 0;
	__builtin_memset(c->args, 0, sizeof(c->args));
	c->ret = PT_REGS_RC(ctx);
	c->inside_ns = inside;
	bpf_ringbuf_submit(c, BPF_RB_NO_WAKEUP);
	return 0;
}

/* A scanner function's entry (the attach cookie names the probe); timed for the family like
 * every program (SP_PROG in shared.h). */
SEC("uprobe")
int sp_uprobe_entry(struct pt_regs *ctx)
{
	__u64 t0 = cost_begin();
	int ret = timed_uprobe_entry(ctx);

	cost_end(SP_PROG_UPROBE_ENTRY, t0);
	return ret;
}

/* Its return. */
SEC("uretprobe")
int sp_uprobe_return(struct pt_regs *ctx)
{
	__u64 t0 = cost_begin();
	int ret = timed_uprobe_return(ctx);

	cost_end(SP_PROG_UPROBE_RETURN, t0);
	return ret;
}
