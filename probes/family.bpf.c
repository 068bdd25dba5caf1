// SPDX-License-Identifier: GPL-2.0
/*
 * The target's process family: follows fork, exec and exit so that children started after attach
 * (a master spawning its sender) are traced from their first instruction. Owns the shared maps.
 */
#include "shared.h"

char LICENSE[] SEC("license") = "GPL";

/* A zeroed thread record to insert from; too large for the BPF stack. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sp_thread);
} thread_zero SEC(".maps");

/* Entries of `threads` (and of thread_slots and slot_owner), set by user space before load. */
const volatile __u32 thread_cap = MAX_THREADS;

/* Slots the fork program tries from a tid's hash before it calls the table full: a bounded
 * loop (kernels before 5.17 have no bpf_loop, and 5.10 rejects its callback), as long as the
 * default table, so a family below --map-size threads=N's 1,024 always finds a free slot. */
#define SP_THREAD_PROBES 1024

/* A slot of `threads` for thread `tid`: the one it already holds (a reused tid whose record user
 * space has not forgotten yet starts over there), else the first free one of the
 * SP_THREAD_PROBES slots from a hash of the tid (user space searches on from the same start).
 * SP_NO_SLOT when every one of them is taken. A fork is rare: the search may visit them all. */
static __always_inline __u32 thread_claim(__u32 tid)
{
	__u32 cap = thread_cap ? thread_cap : 1, from = tid * 2654435761u, s;
	__u32 *held = bpf_map_lookup_elem(&thread_slots, &tid);

	if (held)
		return *held;
	for (__u32 i = 0; i < SP_THREAD_PROBES; i++) {
		if (i >= cap)
			break;
		s = (from + i) % cap;
		if (!bpf_map_update_elem(&slot_owner, &s, &tid, BPF_NOEXIST))
			return s;
	}
	return SP_NO_SLOT;
}

/* Types that no map names, referenced here so that the Rust skeleton carries them. */
struct sp_event abi_event;
struct sp_drop_pkt abi_drop_pkt;
struct sp_drop_key abi_drop_key;
struct sp_dev_key abi_dev_key;
struct sp_dev_stats abi_dev_stats;
struct sp_qdepth abi_qdepth;
struct sp_dev_name abi_dev_name;
struct sp_block_key abi_block_key;
struct sp_block_val abi_block_val;
enum sp_sched_state abi_sched_state;
enum sp_drop_class abi_drop_class;
enum sp_health abi_health;
enum sp_event_kind abi_event_kind;
enum sp_sock_kind abi_sock_kind;
enum sp_send_call abi_send_call;
enum sp_pkt_sampling abi_pkt_sampling;
enum sp_pkt_flags abi_pkt_flags;
enum sp_recv_call abi_recv_call;
enum sp_recv_kind abi_recv_kind;
enum sp_prog abi_prog;
enum sp_reason_fill abi_reason_fill;
struct sp_prog_cost abi_prog_cost;

static __always_inline void fill_event(struct sp_event *e, __u32 kind, struct task_struct *p)
{
	e->ts_ns = bpf_ktime_get_ns();
	e->kind = kind;
	e->tgid = BPF_CORE_READ(p, tgid);
	e->tid = BPF_CORE_READ(p, pid);
	e->ppid = BPF_CORE_READ(p, real_parent, tgid);
	e->start_ns = BPF_CORE_READ(p, start_time);
	e->duration_ns = 0;
	e->stack_id = -1;
	e->exit_code = 0;
	e->path[0] = 0;
	bpf_probe_read_kernel_str(e->comm, sizeof(e->comm), BPF_CORE_READ(p, comm));
}

/* sched_process_fork: covers new threads (same tgid) and new processes of the family. */
SEC("tp_btf/sched_process_fork")
int SP_PROG(SP_PROG_FORK, on_fork, struct task_struct *parent, struct task_struct *child)
{
	__u32 ptgid = BPF_CORE_READ(parent, tgid);
	__u32 ctgid = BPF_CORE_READ(child, tgid);
	__u32 ctid = BPF_CORE_READ(child, pid);
	__u32 zero = 0, slot, idx;
	struct sp_thread *init, *t;
	struct sp_tid_slot *c;
	struct sp_event *e;
	__u8 *f;

	if (!bpf_map_lookup_elem(&family, &ptgid))
		return 0;
	init = bpf_map_lookup_elem(&thread_zero, &zero);
	if (!init)
		return 0;
	slot = thread_claim(ctid);
	if (slot == SP_NO_SLOT || bpf_map_update_elem(&threads, &slot, init, BPF_ANY)) {
		health_inc(SP_H_THREADS_FULL);
		return 0;
	}
	t = bpf_map_lookup_elem(&threads, &slot);
	if (t) {
		t->tgid = ctgid;
		t->sched_state = SP_ST_RUNNABLE;
		t->state_since_ns = bpf_ktime_get_ns();
		t->block_stack = -1;
		t->tid = ctid;	/* last: the record is this thread's from here */
	}
	bpf_map_update_elem(&thread_slots, &ctid, &slot, BPF_ANY);
	idx = ctid & (SP_TID_SLOT_WAYS - 1);
	c = bpf_map_lookup_elem(&tid_slots, &idx);
	if (c) {
		c->slot = slot;
		c->tid = ctid;
	}
	/* only now that its record can be found: the hot programs look for it once its byte is set */
	f = tid_flag(ctid);
	if (f)
		*f = 1;
	if (ctgid == ptgid)
		return 0;

	struct sp_member m = {
		.ppid = ptgid,
		.flags = 0,
		.start_ns = BPF_CORE_READ(child, start_time),
	};
	bpf_map_update_elem(&family, &ctgid, &m, BPF_ANY);
	e = event_reserve();
	if (!e)
		return 0;
	fill_event(e, SP_EV_FORK, child);
	e->ppid = ptgid;
	event_submit(e);
	return 0;
}

/* sched_process_exec: the member's image changed (a master exec'ing its sender binary). */
SEC("tp_btf/sched_process_exec")
int SP_PROG(SP_PROG_EXEC, on_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	__u32 tgid = BPF_CORE_READ(p, tgid);
	struct sp_event *e;

	if (!bpf_map_lookup_elem(&family, &tgid))
		return 0;
	/* close-on-exec fds are gone: cached fd -> socket pairs resolve again */
	gen_bump(&fd_gen);
	e = event_reserve();
	if (!e)
		return 0;
	fill_event(e, SP_EV_EXEC, p);
	bpf_probe_read_kernel_str(e->path, sizeof(e->path), BPF_CORE_READ(bprm, filename));
	event_submit_wake(e);
	return 0;
}

/* sched_process_exit: mark the thread gone (user space folds in its last counters); on the
 * last thread, the process leaves the family. */
SEC("tp_btf/sched_process_exit")
int SP_PROG(SP_PROG_EXIT, on_exit, struct task_struct *p)
{
	__u32 tgid = BPF_CORE_READ(p, tgid);
	__u32 tid = BPF_CORE_READ(p, pid);
	struct sp_thread *t;
	struct sp_event *e;
	__u64 now;
	__u8 *f;

	if (!in_family(tid))
		return 0;
	/* the id may be reused by anyone: from here on the hot programs turn it away */
	f = tid_flag(tid);
	if (f)
		*f = 0;
	t = thread_rec(tid);
	if (!t)
		return 0;
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
	t->sched_state = SP_ST_EXITED;
	t->state_since_ns = now;
	if (BPF_CORE_READ(p, signal, live.counter) != 0)
		return 0;
	bpf_map_delete_elem(&family, &tgid);
	e = event_reserve();
	if (!e)
		return 0;
	fill_event(e, SP_EV_EXIT, p);
	e->exit_code = BPF_CORE_READ(p, exit_code);
	event_submit(e);
	return 0;
}
