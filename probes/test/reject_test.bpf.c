// SPDX-License-Identifier: GPL-2.0
/*
 * Test-only object (never shipped: only src/probes' unit tests include it): one program every
 * verifier accepts and one every verifier rejects, to show that a rejected program is left out,
 * named, and does not take the rest of its object with it.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "GPL";

struct counters {
	__u64 slot[8];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct counters);
} counts SEC(".maps");

/* Bounded index: accepted. */
SEC("tp_btf/sys_enter")
int BPF_PROG(loads_fine, struct pt_regs *regs, long id)
{
	__u32 zero = 0;
	struct counters *c = bpf_map_lookup_elem(&counts, &zero);

	if (c)
		c->slot[id & 7] += 1;
	return 0;
}

/* Unbounded index into the same array: "unbounded memory access" (or "invalid access") on every
 * kernel. */
SEC("tp_btf/sys_exit")
int BPF_PROG(rejected_on_purpose, struct pt_regs *regs, long ret)
{
	__u32 zero = 0;
	struct counters *c = bpf_map_lookup_elem(&counts, &zero);
	__u64 i = bpf_get_prandom_u32();

	if (c)
		c->slot[i] += 1;
	return 0;
}
