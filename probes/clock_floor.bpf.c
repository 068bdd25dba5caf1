// SPDX-License-Identifier: GPL-2.0
/*
 * The timing's own floor: what a program's timing of its runs on the family's threads
 * (cost_begin and cost_end in shared.h) counts around an empty body. A clock read returns the
 * clock as it read it partway through the helper, so every timed run also counts the rest of the
 * first read after that point (its return) and the second read up to it (its call, the clock
 * source's own call): ~30-40 ns a run on a 2-vCPU AMD EPYC guest (kernel 6.18), more than the
 * body of a short program. User space runs this program with BPF_PROG_TEST_RUN, never attaches
 * it, and takes the median of its returns off each timed run (src/probes/clock_floor.rs).
 * Loaded alone: it shares no map with the run's objects. A raw tracepoint program without a
 * tracepoint: the kernel test-runs those from 5.10 on, and libbpf attaches nothing for it.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "GPL";

/* Shaped like prog_cost's value (struct sp_prog_cost): cost_end looks its slot up and counts
 * the run between the two clock reads, and so does this program. */
struct floor_slot {
	__u64 runs;
	__u64 run_ns;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct floor_slot);
} floor_slot SEC(".maps");

/* The ns between two clock reads with cost_end's work between them: its return value. */
SEC("raw_tp")
int sp_clock_floor(void *ctx)
{
	__u64 t0 = bpf_ktime_get_ns(), dt;
	__u32 zero = 0;
	struct floor_slot *s;

	if (!t0)
		return 0;
	s = bpf_map_lookup_elem(&floor_slot, &zero);
	if (!s)
		return 0;
	s->runs += 1;
	dt = bpf_ktime_get_ns() - t0;
	s->run_ns += dt;
	return (int)dt;
}
