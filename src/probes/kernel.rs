//! What the running kernel offers the probes, read from its BTF: whether it has BTF at all, the
//! shape of the kfree_skb tracepoint, and the names of its drop reasons (their numbers differ
//! between kernels, so they are never hard-coded).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use libbpf_rs::btf::types::{Enum, FuncProto, Typedef};
use libbpf_rs::btf::{Btf, BtfKind};

/// Kernel facts that decide which probe variants load.
#[derive(Debug, Clone, serde::Serialize)]
pub struct KernelFeatures {
    /// /sys/kernel/btf/vmlinux exists (CO-RE and tp_btf need it)
    pub btf: bool,
    /// the kfree_skb tracepoint passes the receiving socket (kernels >= 6.8)
    pub kfree_skb_rx_sk: bool,
    /// the kfree_skb tracepoint passes a drop reason (kernels >= 5.17)
    pub kfree_skb_reason: bool,
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
        let reasons = vmlinux.as_ref().and_then(drop_reason_names).unwrap_or_default();
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
            kfree_skb_reason: params >= 4,
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

/// The kernel tracepoints the probes attach to (as tp_btf), and what each one gives.
pub const TRACEPOINTS: [(&str, &str); 18] = [
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
        "netif_receive_skb",
        "replies arriving for the family's flows (the reply funnel)",
    ),
];

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

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
        let listed: BTreeSet<String> = super::TRACEPOINTS.iter().map(|(tp, _)| tp.to_string()).collect();
        assert_eq!(
            listed.len(),
            super::TRACEPOINTS.len(),
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
}
