//! Where send_path's syscall programs hook (`--syscall-hooks`): the per-syscall tracepoints of
//! the calls scanprof reads, or the raw `sys_enter`/`sys_exit` that every syscall passes. For the
//! per-syscall hooks, the calls each program is attached to besides the one its section names
//! (libbpf attaches that one): the calls `call_of` and `changes_fds` in probes/send_path.bpf.c
//! name, which a unit test holds these lists to.

use libbpf_rs::{Link, Object, TracepointCategory};

use super::ProbeStatus;

/// Which hooks send_path's syscall programs use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SyscallHooks {
    /// `syscalls:sys_enter_<call>` and `sys_exit_<call>` of the calls scanprof reads (sends,
    /// receives, bind, setsockopt, getsockopt, close and dup): every other syscall on the machine
    /// runs no program; a run costs more dispatch than a raw hook's. Not the default: with it,
    /// tests/ring_funnel.rs's reader clearing its statistics every 20 ms lost part of its reads'
    /// counts in 3 of 13 runs here (0 of 9 with the raw hooks), for a reason not yet found.
    PerCall,
    /// `tp_btf/sys_enter` and `sys_exit`: the cheapest run, but every syscall of every process
    /// runs a program. The default.
    #[default]
    All,
}

impl SyscallHooks {
    /// The programs this choice loads, by name in send_path; the other choice's are left
    /// unloaded.
    pub(super) fn programs(self) -> &'static [&'static str] {
        match self {
            SyscallHooks::PerCall => &["on_sys_enter", "on_sys_exit", "on_getsockopt"],
            SyscallHooks::All => &["on_raw_enter", "on_raw_exit"],
        }
    }
}

impl SyscallHooks {
    /// The hooks to load: the ones asked for, or the raw hooks when per-call hooks cannot attach
    /// here (no tracefs), with the status entry that says so.
    pub(super) fn usable(self) -> (SyscallHooks, Option<ProbeStatus>) {
        // the kernel lists its syscall tracepoints in tracefs: a per-syscall tracepoint is
        // attached by the id it has there
        let tracefs = crate::system::TRACEFS_ROOTS.iter().any(|d| {
            std::path::Path::new(d)
                .join("events/syscalls/sys_enter_sendto")
                .is_dir()
        });
        match self {
            SyscallHooks::PerCall if !tracefs => (
                SyscallHooks::All,
                Some(ProbeStatus {
                    name: "send_path.on_sys_enter".into(),
                    attached: false,
                    error: Some(format!(
                        "no per-syscall tracepoints (tracefs is not mounted at {}): the syscalls are \
                         counted at the raw sys_enter/sys_exit hooks instead, which every syscall \
                         on the machine runs; to avoid that, mount -t tracefs nodev /sys/kernel/tracing",
                        crate::system::TRACEFS_ROOTS[0]
                    )),
                }),
            ),
            hooks => (hooks, None),
        }
    }
}

/// The calls whose entry on_sys_enter reads: the sends (and a TCP connect), the receives, bind
/// and setsockopt (a socket the family will receive on). getsockopt's entry (PACKET_STATISTICS)
/// has a program of its own, on_getsockopt, attached by libbpf where its section says: the
/// kernel refuses a program that reads a record beyond its end, and getsockopt's five
/// arguments are two more than sendmsg's.
pub(super) const ENTER_CALLS: [&str; 12] = [
    "sendto",
    "sendmsg",
    "sendmmsg",
    "write",
    "writev",
    "connect",
    "recvfrom",
    "recvmsg",
    "recvmmsg",
    "read",
    "bind",
    "setsockopt",
];

/// The calls whose return send_path reads: the sends and receives, getsockopt, and the calls
/// after which an fd may name another file (the fd caches' generation).
pub(super) const EXIT_CALLS: [&str; 15] = [
    "sendto",
    "sendmsg",
    "sendmmsg",
    "write",
    "writev",
    "connect",
    "recvfrom",
    "recvmsg",
    "recvmmsg",
    "read",
    "getsockopt",
    "close",
    "dup2",
    "dup3",
    "close_range",
];

/// Every per-syscall tracepoint on_sys_enter and on_sys_exit are attached to (their sections'
/// own and `rest`), e.g. `sys_enter_sendto`.
pub(super) fn per_call_tracepoints() -> impl Iterator<Item = String> {
    let enters = ENTER_CALLS.iter().map(|c| format!("sys_enter_{c}"));
    enters.chain(EXIT_CALLS.iter().map(|c| format!("sys_exit_{c}")))
}

/// The per-syscall programs' other tracepoints: `(program, tracepoint)` for every call in
/// ENTER_CALLS and EXIT_CALLS but the one the program's section names.
fn rest(section_enter: &str, section_exit: &str) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    for (prog, dir, calls, section) in [
        ("on_sys_enter", "enter", &ENTER_CALLS[..], section_enter),
        ("on_sys_exit", "exit", &EXIT_CALLS[..], section_exit),
    ] {
        for call in calls {
            let tp = format!("sys_{dir}_{call}");
            if !section.ends_with(&format!("/{tp}")) {
                out.push((prog, tp));
            }
        }
    }
    out
}

/// Attaches send_path's per-syscall programs (when loaded) to the rest of their calls' tracepoints.
/// Returns the links, and a status entry for each tracepoint that did not attach (a kernel
/// without that syscall): that call is then not counted, and the entry says so.
pub(super) fn attach_rest(send_path: &Object) -> (Vec<Link>, Vec<ProbeStatus>) {
    let mut links = Vec::new();
    let mut status = Vec::new();
    let progs: Vec<_> = send_path
        .progs_mut()
        .filter(|p| {
            p.autoload()
                && SyscallHooks::PerCall
                    .programs()
                    .contains(&&*p.name().to_string_lossy())
        })
        .collect();
    let section = |name: &str| {
        progs
            .iter()
            .find(|p| p.name() == name)
            .map(|p| p.section().to_string_lossy().into_owned())
    };
    let (Some(enter), Some(exit)) = (section("on_sys_enter"), section("on_sys_exit")) else {
        return (links, status);
    };
    for (prog_name, tp) in rest(&enter, &exit) {
        let Some(prog) = progs.iter().find(|p| p.name() == prog_name) else {
            continue;
        };
        match prog.attach_tracepoint(TracepointCategory::Syscalls, &tp) {
            Ok(link) => links.push(link),
            Err(e) => status.push(ProbeStatus {
                name: format!("send_path.{prog_name}"),
                attached: false,
                error: Some(format!("at syscalls:{tp}: {e}; that call is not counted")),
            }),
        }
    }
    (links, status)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The syscall numbers send_path.bpf.c defines (`#define NR_SENDTO 44`), by lower-case name.
    fn calls_in_c() -> Vec<String> {
        let src = include_str!("../../probes/send_path.bpf.c");
        src.lines()
            .filter_map(|l| l.strip_prefix("#define NR_"))
            .filter_map(|l| l.split_whitespace().next())
            .map(str::to_lowercase)
            .collect()
    }

    /// send_path as embedded, opened without loading.
    fn send_path_object() -> libbpf_rs::OpenObject {
        let bytes = super::super::objects()
            .into_iter()
            .find(|(n, _)| *n == "send_path")
            .map(|(_, b)| b)
            .expect("send_path is embedded");
        libbpf_rs::ObjectBuilder::default()
            .open_memory(bytes)
            .expect("the embedded object opens without privileges")
    }

    /// Every syscall the programs branch on is hooked, entry or exit, and nothing else is: a
    /// call added to call_of without its tracepoint would never be seen with per-call hooks.
    #[test]
    fn the_hooked_calls_are_those_send_path_reads() {
        let c = calls_in_c();
        assert!(c.len() >= 17, "NR_ defines not found in send_path.bpf.c: {c:?}");
        for call in &c {
            assert!(
                ENTER_CALLS.contains(&call.as_str()) || EXIT_CALLS.contains(&call.as_str()),
                "send_path.bpf.c reads {call} but no tracepoint of it is attached"
            );
        }
        for call in ENTER_CALLS.iter().chain(&EXIT_CALLS) {
            assert!(
                c.iter().any(|n| n == call),
                "{call} is hooked but send_path.bpf.c has no NR_ for it"
            );
        }
        // Exits: the fd changes too, but not bind or setsockopt (their exit does nothing).
        for call in ["close", "dup2", "dup3", "close_range"] {
            assert!(!ENTER_CALLS.contains(&call) && EXIT_CALLS.contains(&call));
        }
        for call in ["bind", "setsockopt"] {
            assert!(ENTER_CALLS.contains(&call) && !EXIT_CALLS.contains(&call));
        }
    }

    /// getsockopt's entry is on_getsockopt's section, and only that: no on_sys_enter run needs
    /// arguments past a three-argument record.
    #[test]
    fn getsockopt_enters_through_its_own_program() {
        assert!(!ENTER_CALLS.contains(&"getsockopt") && EXIT_CALLS.contains(&"getsockopt"));
        let obj = send_path_object();
        let prog = obj
            .progs()
            .find(|p| p.name() == "on_getsockopt")
            .expect("program exists");
        assert_eq!(prog.section(), "tp/syscalls/sys_enter_getsockopt");
    }

    /// The section's own tracepoint is left to libbpf; every other call gets one attachment.
    #[test]
    fn the_rest_skips_only_the_sections_own_tracepoint() {
        let r = rest("tp/syscalls/sys_enter_sendto", "tp/syscalls/sys_exit_sendto");
        assert_eq!(r.len(), ENTER_CALLS.len() - 1 + EXIT_CALLS.len() - 1);
        assert!(!r
            .iter()
            .any(|(_, tp)| tp == "sys_enter_sendto" || tp == "sys_exit_sendto"));
        assert!(r.contains(&("on_sys_enter", "sys_enter_sendmmsg".to_string())));
        assert!(r.contains(&("on_sys_exit", "sys_exit_close_range".to_string())));
        // a whole name, not a prefix of one
        assert!(rest("tp/syscalls/sys_enter_send", "x")
            .iter()
            .any(|(_, tp)| tp == "sys_enter_sendto"));
    }

    /// The two programs' sections in the embedded object name a call of their lists, so that
    /// `rest` plus libbpf's own attachment is the whole list.
    #[test]
    fn the_sections_name_a_hooked_call() {
        let obj = send_path_object();
        for (name, dir, calls) in [
            ("on_sys_enter", "enter", &ENTER_CALLS[..]),
            ("on_sys_exit", "exit", &EXIT_CALLS[..]),
        ] {
            let prog = obj.progs().find(|p| p.name() == name).expect("program exists");
            let section = prog.section().to_string_lossy().into_owned();
            let call = section
                .strip_prefix(&format!("tp/syscalls/sys_{dir}_"))
                .unwrap_or_else(|| {
                    panic!("{name}'s section {section} is not a syscalls:sys_{dir}_ tracepoint")
                });
            assert!(
                calls.contains(&call),
                "{name} is attached by libbpf to {call}, which is not in its list"
            );
        }
    }
}
