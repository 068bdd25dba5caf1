//! What the running kernel offers the probes, read from its BTF: whether it has BTF at all, the
//! shape of the kfree_skb tracepoint, and the names of its drop reasons (their numbers differ
//! between kernels, so they are never hard-coded).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use libbpf_rs::btf::types::{Enum, FuncProto, Typedef};
use libbpf_rs::btf::{Btf, BtfKind};

/// The number the reason-less drop program (kernels before 5.17) counts every drop under.
const SP_REASON_NOT_GIVEN: u32 = super::family_skel::types::sp_reason_fill::SP_REASON_NOT_GIVEN.0;

/// The reason names of a kernel whose kfree_skb gives none (before 5.17), by the numbers the
/// drop programs count under there (wire.h, sp_reason_fill): every drop NOT_SPECIFIED, as later
/// kernels name a plain kfree_skb, but a datagram a family UDP socket refused, which
/// `drops.on_udp_fail` names by the refusal (its buffer full, or the protocol's memory).
pub(super) fn reasonless_names() -> BTreeMap<u32, String> {
    use super::family_skel::types::sp_reason_fill as fill;
    BTreeMap::from([
        (SP_REASON_NOT_GIVEN, "NOT_SPECIFIED".to_string()),
        (fill::SP_REASON_FILL_RCVBUFF.0, "SOCKET_RCVBUFF".to_string()),
        (fill::SP_REASON_FILL_PROTO_MEM.0, "PROTO_MEM".to_string()),
    ])
}

/// Kernel facts that decide which probe variants load.
#[derive(Debug, Clone, serde::Serialize)]
pub struct KernelFeatures {
    /// /sys/kernel/btf/vmlinux exists (CO-RE and tp_btf need it)
    pub btf: bool,
    /// the kfree_skb tracepoint passes the receiving socket (kernels >= 6.8)
    pub kfree_skb_rx_sk: bool,
    /// the kfree_skb tracepoint passes a drop reason (kernels >= 5.17); without it drops are
    /// counted by location only, under NOT_SPECIFIED
    pub kfree_skb_reason: bool,
    /// the sched_switch tracepoint passes the previous task's state (kernels >= 5.18)
    pub sched_switch_prev_state: bool,
    /// BPF helper bpf_get_attach_cookie exists (kernels >= 5.15): the profile uprobes need it
    pub attach_cookie: bool,
    /// BPF helper bpf_sock_from_file exists (kernels >= 5.11): the packet-ring iterator needs it
    pub sock_from_file: bool,
    /// numeric value of SKB_DROP_REASON_NO_SOCKET on this kernel
    pub drop_reason_no_socket: u32,
    /// numeric value of SKB_DROP_REASON_QUEUE_PURGE on this kernel, u32::MAX where it has none
    pub drop_reason_queue_purge: u32,
    /// the kernel's drop reasons, value -> name without the `SKB_DROP_REASON_` prefix
    #[serde(skip)]
    pub drop_reasons: BTreeMap<u32, String>,
    /// which of TRACEPOINTS this kernel has (as BTF-typed tracepoints)
    pub tracepoints: BTreeSet<&'static str>,
}

impl KernelFeatures {
    /// Reads the running kernel's BTF, once.
    pub fn detect() -> KernelFeatures {
        let btf = Path::new("/sys/kernel/btf/vmlinux").exists();
        let vmlinux = if btf { Btf::from_vmlinux().ok() } else { None };
        let params = vmlinux
            .as_ref()
            .and_then(|b| tracepoint_params(b, "kfree_skb"))
            .unwrap_or(0);
        let kfree_skb_reason = params >= 4;
        let switch_params = vmlinux
            .as_ref()
            .and_then(|b| tracepoint_params(b, "sched_switch"))
            .unwrap_or(0);
        let helpers = vmlinux.as_ref().map(helper_names).unwrap_or_default();
        let reasons = if kfree_skb_reason {
            vmlinux.as_ref().and_then(drop_reason_names).unwrap_or_default()
        } else {
            // The reason-less drop program counts every drop under one number, named as later
            // kernels name a plain kfree_skb: the location tells the drops apart.
            reasonless_names()
        };
        let tracepoints = TRACEPOINTS
            .iter()
            .map(|(tp, _)| *tp)
            .filter(|tp| {
                vmlinux.as_ref().is_some_and(|b| {
                    b.type_by_name::<Typedef<'_>>(&format!("btf_trace_{tp}"))
                        .is_some()
                })
            })
            .collect();
        let no_socket = reasons
            .iter()
            .find(|(_, n)| n.as_str() == "NO_SOCKET")
            .map(|(v, _)| *v)
            .unwrap_or(3);
        let queue_purge = reasons
            .iter()
            .find(|(_, n)| n.as_str() == "QUEUE_PURGE")
            .map(|(v, _)| *v)
            .unwrap_or(u32::MAX);
        KernelFeatures {
            btf,
            // (void *ctx, skb, location, reason, rx_sk)
            kfree_skb_rx_sk: params >= 5,
            kfree_skb_reason,
            // (void *ctx, preempt, prev, next, prev_state)
            sched_switch_prev_state: switch_params >= 5,
            attach_cookie: helpers.contains("get_attach_cookie"),
            sock_from_file: helpers.contains("sock_from_file"),
            drop_reason_no_socket: no_socket,
            drop_reason_queue_purge: queue_purge,
            drop_reasons: reasons,
            tracepoints,
        }
    }

    /// Whether the running kernel has a BTF-typed tracepoint of that name (one of TRACEPOINTS).
    pub fn has_tracepoint(&self, name: &str) -> bool {
        self.tracepoints.contains(name)
    }
}

/// Number of parameters of a tp_btf tracepoint's prototype (including the leading ctx).
fn tracepoint_params(btf: &Btf<'_>, tracepoint: &str) -> Option<usize> {
    use libbpf_rs::btf::ReferencesType as _;
    let typedef: Typedef<'_> = btf.type_by_name(&format!("btf_trace_{tracepoint}"))?;
    let ptr = typedef.referenced_type();
    let proto = ptr.next_type()?;
    if proto.kind() != BtfKind::FuncProto {
        return None;
    }
    let proto = FuncProto::try_from(proto).ok()?;
    Some(proto.len())
}

/// The BPF helpers the kernel has (`enum bpf_func_id`), by name without `BPF_FUNC_`.
fn helper_names(btf: &Btf<'_>) -> BTreeSet<String> {
    let Some(ids) = btf.type_by_name::<Enum<'_>>("bpf_func_id") else {
        return BTreeSet::new();
    };
    ids.iter()
        .filter_map(|m| {
            let name = m.name?.to_string_lossy();
            Some(name.strip_prefix("BPF_FUNC_")?.to_string())
        })
        .collect()
}

/// The kernel's drop reasons, value -> name without the `SKB_DROP_REASON_` prefix.
fn drop_reason_names(btf: &Btf<'_>) -> Option<BTreeMap<u32, String>> {
    let reasons: Enum<'_> = btf.type_by_name("skb_drop_reason")?;
    Some(
        reasons
            .iter()
            .filter_map(|m| {
                let name = m.name?.to_string_lossy();
                let short = name.strip_prefix("SKB_DROP_REASON_").unwrap_or(&name);
                Some((u32::try_from(m.value).ok()?, short.to_string()))
            })
            .collect(),
    )
}

/// The syscall tracepoints the probes attach to as classic tracepoints (`tp/syscalls/NAME`:
/// through tracefs, which must be mounted; BTF has no per-syscall tracepoints), and what each
/// one gives.
pub const SYSCALL_TRACEPOINTS: [(&str, &str); 1] = [(
    "sys_enter_close",
    "a family packet socket's counters as close(2) closes it (rings.on_close)",
)];

/// The kernel tracepoints the probes attach to (as tp_btf), and what each one gives.
pub const TRACEPOINTS: [(&str, &str); 20] = [
    (
        "sched_process_fork",
        "following children and threads of the target",
    ),
    ("sched_process_exec", "following execs in the target's family"),
    ("sched_process_exit", "noticing when the family exits"),
    ("sys_enter", "send syscall counts, sockets, gaps"),
    ("sys_exit", "send results, errors and durations"),
    ("sched_switch", "time budget and blocking sites"),
    ("sched_wakeup", "separating sleep from waiting for a CPU"),
    ("sched_wakeup_new", "the same for new threads"),
    ("net_dev_queue", "packets entering dev_queue_xmit"),
    ("qdisc_enqueue", "qdisc stage and queue depth"),
    ("qdisc_dequeue", "qdisc stage"),
    (
        "net_dev_start_xmit",
        "following the family's packets across veth (into the peer's namespace) and loopback",
    ),
    ("net_dev_xmit", "device transmit stage and driver return codes"),
    (
        "neigh_event_send_done",
        "packets waiting for neighbour resolution",
    ),
    ("neigh_timer_handler", "failed neighbour resolutions"),
    ("neigh_update", "finished neighbour resolutions"),
    ("kfree_skb", "every packet drop, reason and location"),
    (
        "udp_fail_queue_rcv_skb",
        "datagrams the family's UDP sockets refused (a listener's own socket drops where kfree_skb has no rx_sk)",
    ),
    (
        "netif_receive_skb",
        "replies arriving for the family's flows (the reply funnel)",
    ),
    (
        "tcp_retransmit_skb",
        "the kernel's SYN retransmissions for the family's connects (no call of the scanner sends them)",
    ),
];

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::super::{lacking, ProbeError, RingsSkelBuilder, UprobesSkelBuilder};

    /// The tracepoints the built objects' programs attach to (their ELF sections: `tp_btf/NAME`,
    /// and `raw_tp/NAME`, `tp/CATEGORY/NAME` should a program use those), read from the objects
    /// embedded in scanprof without loading them.
    fn attached_tracepoints() -> BTreeSet<String> {
        let mut found = BTreeSet::new();
        for (obj_name, bytes) in super::super::objects() {
            let obj = libbpf_rs::ObjectBuilder::default()
                .open_memory(bytes)
                .unwrap_or_else(|e| panic!("{obj_name} does not open: {e}"));
            for prog in obj.progs() {
                let section = prog.section().to_string_lossy().into_owned();
                // send_path's per-syscall tracepoints are not BTF-typed: syscall_hooks lists
                // them (its tests hold the lists to send_path.bpf.c). Any other object's
                // syscall tracepoint (rings' sys_enter_close) is listed here.
                if obj_name == "send_path" && section.starts_with("tp/syscalls/") {
                    continue;
                }
                let tracepoint = ["tp_btf/", "raw_tp/", "tp/", "tracepoint/"]
                    .iter()
                    .find_map(|p| section.strip_prefix(p))
                    .and_then(|rest| rest.rsplit('/').next());
                if let Some(name) = tracepoint {
                    found.insert(name.to_string());
                }
            }
        }
        found
    }

    /// TRACEPOINTS (what doctor and the feature detection list) is exactly the set of
    /// tracepoints the probes' programs attach to: a program added on a new tracepoint, or one
    /// removed, fails here until the list follows.
    #[test]
    fn the_tracepoint_list_is_the_probes_sections() {
        let listed: BTreeSet<String> = super::TRACEPOINTS
            .iter()
            .chain(&super::SYSCALL_TRACEPOINTS)
            .map(|(tp, _)| tp.to_string())
            .collect();
        assert_eq!(
            listed.len(),
            super::TRACEPOINTS.len() + super::SYSCALL_TRACEPOINTS.len(),
            "a tracepoint is listed twice"
        );
        let attached = attached_tracepoints();
        assert!(
            attached.contains("kfree_skb") && attached.contains("sched_switch"),
            "{attached:?}"
        );
        assert_eq!(
            listed,
            attached,
            "listed but attached by no program: {:?}; attached but not listed: {:?}",
            listed.difference(&attached).collect::<Vec<_>>(),
            attached.difference(&listed).collect::<Vec<_>>()
        );
    }

    /// BPF_STX | BPF_ATOMIC in word and double-word sizes.
    const ATOMIC_W: u8 = 0xc3;
    const ATOMIC_DW: u8 = 0xdb;

    /// Every atomic instruction other than a plain add in the objects built into scanprof (a
    /// run's and the agent's exec watcher), as (program, index, imm).
    fn atomics_but_add() -> Vec<(String, usize, i32)> {
        let mut found = Vec::new();
        for (obj_name, bytes) in super::super::objects() {
            let obj = libbpf_rs::ObjectBuilder::default()
                .open_memory(bytes)
                .unwrap_or_else(|e| panic!("{obj_name} does not open: {e}"));
            for p in obj.progs() {
                let prog = format!("{obj_name}.{}", p.name().to_string_lossy());
                for (n, i) in p.insns().iter().enumerate() {
                    if matches!(i.code, ATOMIC_W | ATOMIC_DW) && i.imm != 0 {
                        found.push((prog.clone(), n, i.imm));
                    }
                }
            }
        }
        found
    }

    /// Kernels before 5.12 (Debian 11's 5.10) know only the atomic add (BPF_XADD) and refuse a
    /// program with any other atomic (OR, AND, XOR, XCHG, CMPXCHG, a fetch) even in dead code,
    /// so no program may hold one.
    #[test]
    fn no_program_uses_an_atomic_that_kernels_before_5_12_refuse() {
        let found = atomics_but_add();
        assert_eq!(found, [], "(program, instruction, atomic op) other than add");
    }

    /// An object not tried, on a kernel that lacks what it needs (5.10: the uprobes object, no
    /// bpf_get_attach_cookie), still names its resizable maps: the default sizes name its
    /// `calls`, and without it doctor said MISSING ("--map-size calls: the probes have no ...
    /// map of that name") and exited 1 there.
    #[test]
    fn an_object_not_tried_still_names_its_resizable_maps() {
        let load = lacking::<UprobesSkelBuilder>("uprobes", "uprobes.sp_uprobe_entry", "a helper");
        assert!(load.capacity.contains("calls"), "{:?}", load.capacity);
        assert!(matches!(load.skel, Err(ProbeError::KernelLacks { .. })));
        let load = lacking::<RingsSkelBuilder>("rings", "rings.sp_rings", "a helper");
        assert!(matches!(load.skel, Err(ProbeError::KernelLacks { .. })));
    }
}
