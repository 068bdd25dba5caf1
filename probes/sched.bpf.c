// SPDX-License-Identifier: GPL-2.0
/*
 * Scheduling of family threads: where their time goes (on CPU inside and outside send syscalls,
 * blocked inside send, sleeping, waiting for a CPU), and the kernel stack at which a send blocked,
 * so "blocked in sock_alloc_send_pskb" is visible. sched_switch/sched_wakeup via tp_btf.
 */
#include "shared.h"

char LICENSE[] SEC("license") = "GPL";

/* Blocking episodes inside send at least this long are also streamed as events (ns). */
const volatile __u64 block_event_min_ns = 1000000;

struct {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(max_entries, 2048);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, 127 * sizeof(__u64));
} stacks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct sp_block_key);
	__type(value, struct sp_block_val);
} block_sites SEC(".maps");

static __always_inline void add_block_site(struct sp_thread *t, __u64 d)
{
	struct sp_block_key k = { .tgid = t->tgid, .stack_id = t->block_stack };
	struct sp_block_val *v = bpf_map_lookup_elem(&block_sites, &k);

	if (!v) {
		struct sp_block_val init = {};

		if (bpf_map_update_elem(&block_sites, &k, &init, BPF_NOEXIST) &&
		    !bpf_map_lookup_elem(&block_sites, &k)) {
			health_inc(SP_H_SITES_FULL);
			return;
		}
		v = bpf_map_lookup_elem(&block_sites, &k);
		if (!v)
			return;
	}
	__sync_fetch_and_add(&v->ns, d);
	__sync_fetch_and_add(&v->count, 1);
}

/* Close the off-CPU interval that began at state_since_ns. */
static __always_inline void end_off_cpu(struct sp_thread *t, __u64 now)
{
	__u64 d = now - t->state_since_ns;
	struct sp_event *e;

	switch (t->sched_state) {
	case SP_ST_RUNNABLE:
		t->runq_ns += d;
		break;
	case SP_ST_WOKEN:
		t->runq_ns += d;
		t->wakeup_ns += d;
		break;
	case SP_ST_SLEEPING:
		t->sleep_ns += d;
		break;
	case SP_ST_BLOCKED_SEND:
		t->blocked_send_ns += d;
		add_block_site(t, d);
		if (d < block_event_min_ns)
			break;
		e = event_reserve();
		if (!e)
			break;
		__builtin_memset(e, 0, sizeof(*e));
		e->ts_ns = t->state_since_ns;
		e->kind = SP_EV_BLOCK;
		e->tgid = t->tgid;
		e->tid = t->tid;
		e->duration_ns = d;
		e->stack_id = t->block_stack;
		event_submit(e);
		break;
	default:
		break;
	}
}

/* A family thread leaves the CPU and/or one arrives; prev_state is the state prev leaves in. */
static __always_inline void switched(void *ctx, bool preempt, struct task_struct *prev,
				     struct task_struct *next, unsigned int prev_state)
{
	/* most switches on the machine are nobody's in the family: two byte tests and out */
	struct sp_thread *t = family_thread(prev->pid);
	struct sp_thread *in = family_thread(next->pid);
	__u64 now = 0;

	if (t) {
		now = bpf_ktime_get_ns();
		if (off_cpu_state(t))
			missed_switch_in(t, now);
		if (t->sched_state == SP_ST_RUNNING) {
			__u64 d = now - t->oncpu_since_ns;

			if (t->send_call != SP_CALL_NONE)
				t->oncpu_send_ns += d;
			else
				t->oncpu_other_ns += d;
		}
		if (preempt || prev_state == 0) {
			t->sched_state = SP_ST_RUNNABLE;
		} else if (t->send_call != SP_CALL_NONE && t->send_kind == SP_SOCK_NET) {
			t->sched_state = SP_ST_BLOCKED_SEND;
			t->block_stack = bpf_get_stackid(ctx, &stacks, 0);
		} else {
			t->sched_state = SP_ST_SLEEPING;
		}
		t->state_since_ns = now;
	}
	t = in;
	if (t) {
		if (!now)
			now = bpf_ktime_get_ns();
		if (t->sched_state == SP_ST_RUNNING)
			/* its switch out was not delivered: from its last accounting to now it ran,
			 * then waited or slept, in a split nobody saw */
			missed_switch(t->oncpu_since_ns, now);
		else
			end_off_cpu(t, now);
		t->sched_state = SP_ST_RUNNING;
		t->state_since_ns = now;
		t->oncpu_since_ns = now;
	}
}

/* sched_switch with prev_state (kernels >= 5.18): one family thread leaves the CPU and/or one
 * arrives. User space loads exactly one of the two switch programs. */
SEC("tp_btf/sched_switch")
int SP_PROG(SP_PROG_SWITCH, on_switch, bool preempt, struct task_struct *prev, struct task_struct *next,
	     unsigned int prev_state)
{
	switched(ctx, preempt, prev, next, prev_state);
	return 0;
}

/* The task state field before 5.14 (`state`, since `__state`). */
struct task_struct___pre514 {
	long state;
} __attribute__((preserve_access_index));

/* sched_switch without prev_state (before 5.18): prev's state is read from the task, which the
 * tracepoint sees before the switch, as the argument was computed from it. */
SEC("tp_btf/sched_switch")
int SP_PROG(SP_PROG_SWITCH_NOSTATE, on_switch_nostate, bool preempt, struct task_struct *prev,
	     struct task_struct *next)
{
	unsigned int state;

	if (bpf_core_field_exists(prev->__state))
		state = BPF_CORE_READ(prev, __state);
	else
		state = (unsigned int)BPF_CORE_READ((struct task_struct___pre514 *)prev, state);
	switched(ctx, preempt, prev, next, state);
	return 0;
}

static __always_inline void woken(struct task_struct *p)
{
	struct sp_thread *t = family_thread(p->pid);
	__u64 now;

	if (!t || (t->sched_state != SP_ST_SLEEPING && t->sched_state != SP_ST_BLOCKED_SEND))
		return;
	now = bpf_ktime_get_ns();
	end_off_cpu(t, now);
	t->sched_state = SP_ST_WOKEN;
	t->state_since_ns = now;
}

/* sched_wakeup: a sleeping or blocked thread becomes runnable; from here it waits for a CPU. */
SEC("tp_btf/sched_wakeup")
int SP_PROG(SP_PROG_WAKEUP, on_wakeup, struct task_struct *p)
{
	woken(p);
	return 0;
}

SEC("tp_btf/sched_wakeup_new")
int SP_PROG(SP_PROG_WAKEUP_NEW, on_wakeup_new, struct task_struct *p)
{
	woken(p);
	return 0;
}
