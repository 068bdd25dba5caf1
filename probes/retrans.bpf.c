// SPDX-License-Identifier: GPL-2.0
/*
 * The kernel's own SYN retransmissions for the family's connects: a connect(2) whose SYN gets no
 * answer is sent again by the TCP retransmit timer (first after 1 s, up to
 * net.ipv4.tcp_syn_retries times), in softirq, from no call of the scanner. send_path counts the
 * connect's first SYN; this counts each further one, attributed to the family through the socket
 * as the device stages attribute a packet (target_socks, registered at the connect). Counted per
 * CPU; a retransmission of any other socket costs a state read, of another SYN a lookup.
 */
#include "shared.h"

char LICENSE[] SEC("license") = "GPL";

/* For the generated skeleton: the slots, so Rust gets them from wire.h. */
enum sp_retrans_slot abi_retrans_slot;

/* SYNs the kernel sent again for the family's connecting sockets (enum sp_retrans_slot). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SP_RT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} syn_retrans SEC(".maps");

/* The tracepoint's own record where it carries the retransmission's error (newer kernels; older
 * ones share the tcp_event_sk_skb class, without it): only its presence is read. */
struct trace_event_raw_tcp_retransmit_skb___err {
	int err;
} __attribute__((preserve_access_index));

/* tcp_retransmit_skb: the one place every TCP retransmission passes, timer or not, with the
 * socket in hand (since 4.15). Newer kernels also fire it for a retransmission that failed, with
 * its error as a third argument: only those sent (err 0) are counted, as before. */
SEC("tp_btf/tcp_retransmit_skb")
int SP_PROG(SP_PROG_SYN_RETRANS, on_tcp_retransmit, const struct sock *sk, const struct sk_buff *skb)
{
	__u32 slot = SP_RT_SYN_SENT;
	__u64 *n;

	if (!sk || sk->__sk_common.skc_state != TCP_SYN_SENT)
		return 0;
	/* a retransmission that failed (newer kernels) sent nothing: left out, as before */
	if (bpf_core_field_exists(struct trace_event_raw_tcp_retransmit_skb___err, err) && (int)ctx[2] != 0)
		return 0;
	if (!sock_target(ptr_num(sk)))
		return 0;
	n = bpf_map_lookup_elem(&syn_retrans, &slot);
	if (n)
		*n += 1;
	return 0;
}
