// SPDX-License-Identifier: GPL-2.0
/*
 * Every exec on the host, for `scanprof agent`: one sp_exec record per exec into a ring buffer
 * of its own, which the agent reads to find scanners as they start. Execs are rare (tens to
 * hundreds a second on a busy host), so a record each costs little. A full ring is counted in
 * `lost`, never silent. Kept apart from the family objects: it shares none of their maps, and
 * the agent loads it alone. Plain tracepoint, no loops, no atomics but add, no BPF-to-BPF
 * calls: it loads on 5.10 (ring buffers need 5.8).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "wire.h"

char LICENSE[] SEC("license") = "GPL";

/* For the generated skeleton: the record type, so Rust gets it from wire.h. */
struct sp_exec abi_exec;

/* Records that found the ring full (read by user space from .bss). */
__u64 lost = 0;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} execs SEC(".maps");

/* sched_process_exec fires once per successful exec, in the exec'ing task after the new image
 * is in place: the one point that names both the process and the file it now runs. */
SEC("tp/sched/sched_process_exec")
int sp_exec_watch(struct trace_event_raw_sched_process_exec *ctx)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	unsigned int off = ctx->__data_loc_filename & 0xffff;
	struct sp_exec *e;

	e = bpf_ringbuf_reserve(&execs, sizeof(*e), 0);
	if (!e) {
		__sync_fetch_and_add(&lost, 1);
		return 0;
	}
	e->ts_ns = bpf_ktime_get_ns();
	e->tgid = bpf_get_current_pid_tgid() >> 32;
	e->ppid = BPF_CORE_READ(task, real_parent, tgid);
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	if (bpf_probe_read_kernel_str(e->path, sizeof(e->path), (void *)ctx + off) < 0)
		e->path[0] = 0;
	bpf_ringbuf_submit(e, 0);
	return 0;
}
