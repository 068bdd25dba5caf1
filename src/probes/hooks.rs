//! Which tracepoints a run hooks under the two choices that change them (`--syscall-hooks`,
//! `--device-stages`), read from the probes' own objects and the choices' own program lists. What
//! a packet pays before any program body runs is the dispatch of these hooks: the overhead bench
//! attaches empty programs to exactly this list (its "floor" of each mode).

use std::collections::BTreeSet;

use super::{device_stages, syscall_hooks, DeviceStages, ObjectSpec, Role, SyscallHooks, OBJECTS};

/// The tracepoints a run attaches to under `hooks` and `stages`, as libbpf section names
/// (`tp_btf/NAME`, `tp/syscalls/NAME`), each once, sorted. The programs a kernel picks among
/// (two `sched_switch` programs, three `kfree_skb` ones) share a hook. The list is the build's:
/// a kernel without one of these tracepoints (an older one may lack some) runs no program
/// there, and empty programs cannot be attached there either. Under `--device-stages sampled`
/// the windowed device programs' hooks are left out: they are attached only a tenth of each
/// tick. Uprobes (one set per scanner profile), the rings iterator (run from user space) and
/// the objects loaded alone (`scanprof agent`'s, the timing floor's) are not listed.
pub fn hook_sections(hooks: SyscallHooks, stages: DeviceStages) -> Vec<String> {
    let mut out = BTreeSet::new();
    for spec in OBJECTS.iter().filter(|o| !matches!(o.role, Role::Alone)) {
        let ObjectSpec {
            name: object, bytes, ..
        } = spec;
        let obj = libbpf_rs::ObjectBuilder::default()
            .open_memory(bytes)
            .unwrap_or_else(|e| panic!("the built-in object {object} does not open: {e}"));
        for prog in obj.progs() {
            let name = prog.name().to_string_lossy().into_owned();
            let section = prog.section().to_string_lossy().into_owned();
            if !(section.starts_with("tp_btf/") || section.starts_with("tp/")) {
                continue;
            }
            let syscall_program = *object == "send_path"
                && [SyscallHooks::All, SyscallHooks::PerCall]
                    .iter()
                    .any(|h| h.programs().contains(&name.as_str()));
            if syscall_program && !hooks.programs().contains(&name.as_str()) {
                continue;
            }
            // auto starts exact: its hooks are exact's until the collector starts sampling
            if stages == DeviceStages::Sampled && device_stages::windowed(stages, object, &name) {
                continue;
            }
            out.insert(section);
        }
    }
    if hooks == SyscallHooks::PerCall {
        // on_sys_enter and on_sys_exit hook every call of their lists, not only their sections'
        out.extend(syscall_hooks::per_call_tracepoints().map(|tp| format!("tp/syscalls/{tp}")));
    }
    out.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn has(list: &[String], section: &str) -> bool {
        list.iter().any(|s| s == section)
    }

    #[test]
    fn the_default_hooks_are_the_raw_syscalls_and_every_device_stage() {
        let l = hook_sections(SyscallHooks::All, DeviceStages::Exact);
        for s in [
            "tp_btf/sys_enter",
            "tp_btf/sys_exit",
            "tp_btf/net_dev_queue",
            "tp_btf/net_dev_start_xmit",
            "tp_btf/net_dev_xmit",
            "tp_btf/qdisc_enqueue",
            "tp_btf/netif_receive_skb",
            "tp_btf/kfree_skb",
            "tp_btf/sched_switch",
            "tp/syscalls/sys_enter_close",
        ] {
            assert!(has(&l, s), "{s} missing from {l:?}");
        }
        assert!(!l.iter().any(|s| s.contains("sys_enter_sendto")), "{l:?}");
        assert!(
            !l.iter().any(|s| s.starts_with("uprobe") || s.starts_with("iter")),
            "{l:?}"
        );
        // one entry per hook, though two sched_switch and three kfree_skb programs exist
        assert_eq!(l.iter().filter(|s| *s == "tp_btf/kfree_skb").count(), 1);
    }

    #[test]
    fn sampled_device_stages_leave_out_exactly_the_windowed_programs_hooks() {
        let exact = hook_sections(SyscallHooks::All, DeviceStages::Exact);
        let sampled = hook_sections(SyscallHooks::All, DeviceStages::Sampled);
        let gone: Vec<&String> = exact.iter().filter(|s| !sampled.contains(s)).collect();
        assert_eq!(
            gone,
            [
                "tp_btf/net_dev_queue",
                "tp_btf/net_dev_xmit",
                "tp_btf/qdisc_dequeue",
                "tp_btf/qdisc_enqueue"
            ]
        );
        assert!(has(&sampled, "tp_btf/net_dev_start_xmit"));
        assert!(sampled.iter().all(|s| exact.contains(s)));
    }

    #[test]
    fn per_call_hooks_replace_the_raw_syscalls_with_every_listed_call() {
        let l = hook_sections(SyscallHooks::PerCall, DeviceStages::Exact);
        assert!(
            !has(&l, "tp_btf/sys_enter") && !has(&l, "tp_btf/sys_exit"),
            "{l:?}"
        );
        for s in [
            "tp/syscalls/sys_enter_sendto",
            "tp/syscalls/sys_exit_sendto",
            "tp/syscalls/sys_enter_sendmmsg",
            "tp/syscalls/sys_enter_getsockopt",
            "tp/syscalls/sys_exit_close_range",
            "tp/syscalls/sys_enter_close",
            "tp_btf/net_dev_queue",
        ] {
            assert!(has(&l, s), "{s} missing from {l:?}");
        }
        let calls = l.iter().filter(|s| s.starts_with("tp/syscalls/")).count();
        // every listed entry and exit, getsockopt's entry, and rings' close
        assert_eq!(
            calls,
            syscall_hooks::ENTER_CALLS.len() + syscall_hooks::EXIT_CALLS.len() + 2,
            "{l:?}"
        );
    }
}
