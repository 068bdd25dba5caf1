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
/// refusal is freed with on this kernel (SOCKET_RCVBUFF or PROTO_MEM; any, before drop reasons,
/// where the moved row is named by the refusal, as later kernels name it).
pub(super) fn configure(rodata: &mut rodata, features: &KernelFeatures) {
    let reason = |name: &str| {
        features
            .drop_reasons
            .iter()
            .find(|(_, n)| n.as_str() == name)
            .map_or(u32::MAX, |(v, _)| *v)
    };
    rodata.recharge_udp = u32::from(!features.kfree_skb_rx_sk);
    // Without drop reasons the moved rows are named by the refusal (wire.h, sp_reason_fill).
    rodata.name_refusals = u32::from(!features.kfree_skb_reason);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The drops object's `.rodata` as drops.bpf.c initialises it.
    fn fresh() -> rodata {
        rodata {
            reason_no_socket: 3,
            reason_queue_purge: u32::MAX,
            recharge_udp: 0,
            reason_rcvbuff: u32::MAX,
            reason_proto_mem: u32::MAX,
            name_refusals: 0,
        }
    }

    /// On a kernel without drop reasons (5.10) the refused datagrams' moved rows are named by
    /// the refusal, as later kernels name them: in a 5.10 guest they stayed NOT_SPECIFIED, so a
    /// listener's 2449 full-buffer drops were `not_judged_here` instead of `rcvbuf_overflow`
    /// (2026-11-28, tests/receive_funnel.rs in scripts/kernel-matrix). Where kfree_skb has
    /// reasons, the kernel's own numbers serve and nothing is renamed.
    #[test]
    fn without_drop_reasons_a_refused_datagrams_drop_is_named_by_the_refusal() {
        let mut features = KernelFeatures::detect();
        features.kfree_skb_rx_sk = false;
        features.kfree_skb_reason = false;
        let mut rodata = fresh();
        configure(&mut rodata, &features);
        assert_eq!((rodata.recharge_udp, rodata.name_refusals), (1, 1));
        assert_eq!(
            (rodata.reason_rcvbuff, rodata.reason_proto_mem),
            (u32::MAX, u32::MAX)
        );
        use crate::probes::family_skel::types::sp_reason_fill as fill;
        let names = super::super::kernel::reasonless_names();
        assert_eq!(names[&fill::SP_REASON_NOT_GIVEN.0], "NOT_SPECIFIED");
        assert_eq!(names[&fill::SP_REASON_FILL_RCVBUFF.0], "SOCKET_RCVBUFF");
        assert_eq!(names[&fill::SP_REASON_FILL_PROTO_MEM.0], "PROTO_MEM");

        features.kfree_skb_reason = true;
        features.drop_reasons = [(5, "SOCKET_RCVBUFF".to_string()), (9, "PROTO_MEM".to_string())].into();
        let mut rodata = fresh();
        configure(&mut rodata, &features);
        assert_eq!(
            (
                rodata.name_refusals,
                rodata.reason_rcvbuff,
                rodata.reason_proto_mem
            ),
            (0, 5, 9)
        );
    }
}
