//! The datagrams the family's UDP sockets refused, as counted where the kernel refuses them
//! (udp:udp_fail_queue_rcv_skb, with the socket in hand): typed from the probes' rows once per
//! sample, cumulative. On kernels whose kfree_skb names no receiving socket (before 6.8) these
//! drops are also the family's rows of the drop table (the program moves them there); on later
//! kernels the two are counted apart, and agree.

use serde::{Deserialize, Serialize};

use crate::probes::{sp_udp_refusal, sp_udp_refused, sp_udp_refused_key};

/// Why a UDP socket refused a datagram (the tracepoint's return code).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UdpRefusal {
    /// its receive buffer was full (-ENOMEM): `Udp: RcvbufErrors`, drop reason SOCKET_RCVBUFF
    Rcvbuf,
    /// the protocol's memory limit (any other error): `Udp: MemErrors`, drop reason PROTO_MEM
    Memory,
}

impl UdpRefusal {
    fn from_wire(kind: u32) -> UdpRefusal {
        if kind == sp_udp_refusal::SP_UDP_RCVBUF.0 {
            UdpRefusal::Rcvbuf
        } else {
            UdpRefusal::Memory
        }
    }
}

/// One family process's refused datagrams in one network namespace, of one kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct UdpRefused {
    /// the family process the socket belongs to
    pub pid: u32,
    /// the socket's network namespace inode number
    pub netns: u32,
    pub kind: UdpRefusal,
    /// datagrams refused since attach
    pub refused: u64,
    /// of those, datagrams whose drop the drop program had counted as somebody else's and that
    /// were moved to the family's row (kernels without kfree_skb's rx_sk); 0 on later kernels
    pub moved: u64,
}

/// The probes' rows, typed, in (pid, netns, kind) order.
pub fn from_rows(rows: Vec<(sp_udp_refused_key, sp_udp_refused)>) -> Vec<UdpRefused> {
    let mut out: Vec<UdpRefused> = rows
        .into_iter()
        .map(|(k, v)| UdpRefused {
            pid: k.tgid,
            netns: k.netns,
            kind: UdpRefusal::from_wire(k.kind),
            refused: v.refused,
            moved: v.moved,
        })
        .collect();
    out.sort_by_key(|r| (r.pid, r.netns, r.kind));
    out
}

/// Datagrams of `kind` refused at the family's UDP sockets, summed over its processes.
pub fn total(rows: &[UdpRefused], kind: UdpRefusal) -> u64 {
    rows.iter().filter(|r| r.kind == kind).map(|r| r.refused).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_typed_by_kind_and_summed_per_kind() {
        let key = |tgid, kind: sp_udp_refusal| sp_udp_refused_key {
            tgid,
            netns: 7,
            kind: kind.0,
            pad: 0,
        };
        let val = |refused, moved| sp_udp_refused { refused, moved };
        let rows = from_rows(vec![
            (key(20, sp_udp_refusal::SP_UDP_MEMORY), val(3, 3)),
            (key(10, sp_udp_refusal::SP_UDP_RCVBUF), val(500, 0)),
            (key(20, sp_udp_refusal::SP_UDP_RCVBUF), val(40, 40)),
        ]);
        assert_eq!(rows[0].pid, 10);
        assert_eq!(rows[1].kind, UdpRefusal::Rcvbuf);
        assert_eq!(rows[2].kind, UdpRefusal::Memory);
        assert_eq!(total(&rows, UdpRefusal::Rcvbuf), 540);
        assert_eq!(total(&rows, UdpRefusal::Memory), 3);
    }
}
