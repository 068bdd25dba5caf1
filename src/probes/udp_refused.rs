//! The datagrams the family's UDP sockets refused (drops.bpf.c's `on_udp_fail`, on the
//! tracepoint udp:udp_fail_queue_rcv_skb, which has the socket in hand on every kernel): how the
//! drops object is set up for it, and its counts, read each sample and summed over CPUs. Where
//! kfree_skb lacks `rx_sk` (before 6.8) the same program moves each such drop into the family's
//! row of the drop table, so that a listener's own socket drops are its drops there too.

use super::drops_skel::types::{rodata, sp_udp_refused, sp_udp_refused_key};
use super::{percpu_rows, KernelFeatures, ProbeSet};

/// The drop program's name, as its status entry says it.
pub const UDP_FAIL_PROG: &str = "drops.on_udp_fail";

// sp_udp_refused_key: four u32; sp_udp_refused: two u64.
const _: () = assert!(size_of::<sp_udp_refused_key>() == 4 * 4);
const _: () = assert!(size_of::<sp_udp_refused>() == 2 * 8);

/// Sets the drops object's `.rodata` for `on_udp_fail`: on a kernel whose kfree_skb does not
/// name the receiving socket, a refused datagram's drop row (counted as somebody else's just
/// before the tracepoint fires) is moved to the family's, if it was counted under the reason a
/// refusal is freed with on this kernel (SOCKET_RCVBUFF or PROTO_MEM; any, before drop reasons).
pub(super) fn configure(rodata: &mut rodata, features: &KernelFeatures) {
    let reason = |name: &str| {
        features
            .drop_reasons
            .iter()
            .find(|(_, n)| n.as_str() == name)
            .map_or(u32::MAX, |(v, _)| *v)
    };
    rodata.recharge_udp = u32::from(!features.kfree_skb_rx_sk);
    if features.kfree_skb_reason {
        rodata.reason_rcvbuff = reason("SOCKET_RCVBUFF");
        rodata.reason_proto_mem = reason("PROTO_MEM");
    }
}

impl ProbeSet {
    /// The family's refused datagrams, cumulative since attach: per process, namespace and kind
    /// (`enum sp_udp_refusal`), summed over CPUs. None when `on_udp_fail` is not attached (the
    /// kernel lacks the tracepoint or refused the program).
    pub fn udp_refused(&self) -> Option<Vec<(sp_udp_refused_key, sp_udp_refused)>> {
        self.status
            .iter()
            .any(|s| s.attached && s.name == UDP_FAIL_PROG)
            .then(|| {
                percpu_rows(
                    &self.objects.drops.maps.udp_refused,
                    |acc: &mut sp_udp_refused, v: &sp_udp_refused| {
                        acc.refused += v.refused;
                        acc.moved += v.moved;
                    },
                )
                .into_iter()
                .map(|(_, k, v)| (k, v))
                .collect()
            })
    }
}
