//! What this machine allows scanprof to measure, and what to do about the rest: the checks
//! `scanprof doctor` prints and every bundle carries (`checks.json`).

use std::path::Path;

use serde::Serialize;

use crate::probes::{
    caps_allow_bpf, describe_map_memory, effective_caps, kernel_release, KernelFeatures, MapMemory,
    ProbeOptions, ProbeSet, MEMORY_BUDGET, SYSCALL_TRACEPOINTS, TRACEPOINTS,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Ok,
    Degraded,
    Missing,
    Info,
}

#[derive(Debug, Serialize)]
pub struct Check {
    pub name: String,
    pub status: Status,
    pub detail: String,
    /// what the user can do about it
    pub advice: Option<String>,
}

fn check(name: impl Into<String>, status: Status, detail: impl Into<String>, advice: Option<&str>) -> Check {
    Check {
        name: name.into(),
        status,
        detail: detail.into(),
        advice: advice.map(str::to_string),
    }
}

fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
}

/// Kernel series scanprof's probes are tested on (scripts/kernel-matrix boots Debian's 5.10, 6.1
/// and 6.12; the development machines run 6.18).
pub const TESTED_KERNELS: [(u32, u32); 4] = [(5, 10), (6, 1), (6, 12), (6, 18)];

/// The running kernel against the tested ones.
fn kernel_check(release: &str) -> Check {
    let mut nums = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|n| n.parse::<u32>().ok());
    let version = match (nums.next().flatten(), nums.next().flatten()) {
        (Some(major), Some(minor)) => Some((major, minor)),
        _ => None,
    };
    let tested = TESTED_KERNELS
        .iter()
        .map(|(a, b)| format!("{a}.{b}"))
        .collect::<Vec<_>>()
        .join(", ");
    match version {
        Some(v) if TESTED_KERNELS.contains(&v) => check(
            "kernel",
            Status::Ok,
            format!("{release}: a tested series ({tested})"),
            None,
        ),
        Some(v) if v < (5, 17) => check(
            "kernel",
            Status::Degraded,
            format!(
                "{release}: older than 5.17, untested (tested: {tested}); no drop reasons, so drops are counted by location only"
            ),
            Some("the checks below say what loads and what is missing"),
        ),
        _ => check(
            "kernel",
            Status::Info,
            format!(
                "{release}: not a tested series (tested: {tested}); the probe checks below say what loads"
            ),
            None,
        ),
    }
}

/// The locked memory of every map the probes created (the kernel's `memlock` of each map fd),
/// against scanprof's default budget.
fn memory_check(maps: &[MapMemory]) -> Check {
    let total: u64 = maps.iter().map(|m| m.memlock).sum();
    let detail = format!(
        "{} in {} maps, with the default sizes (budget {:.0} MB)",
        describe_map_memory(maps),
        maps.len(),
        MEMORY_BUDGET as f64 / 1e6
    );
    if total <= MEMORY_BUDGET {
        check("locked BPF memory", Status::Ok, detail, None)
    } else {
        check(
            "locked BPF memory",
            Status::Info,
            detail,
            Some("over the budget: per-CPU maps grow with the CPU count; --map-size sizes a map"),
        )
    }
}

/// Every check; `load_probes` also loads and attaches each probe (the definitive test).
pub fn checks(load_probes: bool) -> Vec<Check> {
    let mut out = Vec::new();
    let caps = effective_caps();
    let privileged = caps_allow_bpf(caps);
    out.push(kernel_check(&kernel_release()));
    out.push(if privileged {
        check(
            "privileges",
            Status::Ok,
            "CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN) held",
            None,
        )
    } else {
        check(
            "privileges",
            Status::Missing,
            "neither CAP_SYS_ADMIN nor CAP_BPF+CAP_PERFMON",
            Some("run scanprof as root (sudo), or grant it cap_bpf,cap_perfmon+ep"),
        )
    });
    {
        use crate::system::privileges::{
            mask, names, FOR_BPF_STATS, FOR_BUNDLE, FOR_LAB, FOR_UPROBES, FOR_USER_COMMAND, KEPT,
        };
        use crate::system::watchdog::Watches;
        out.push(check(
            "privilege drop",
            Status::Info,
            format!(
                "after setup, attach/run/record keep only {} (+ {} in the thread that attaches a \
                 profile's uprobes to later members, + {} in the collection thread with \
                 --bpf-stats sampled, the default, to turn the kernel's BPF statistics on each \
                 tick, + {} in the thread writing a bundle into a directory it does not own, + {} \
                 in the collection thread with --user, to signal the command) and drop the rest \
                 from the effective, permitted and bounding sets, with no_new_privs; a launched \
                 command keeps what it was given, unless --user names the user it runs as; lab \
                 keeps {} as well, to read its namespaces' counters and delete them. The watchdog \
                 process a run starts (it ends the launched command's family if scanprof is \
                 killed) keeps only {}, a lab's namespace watchdog only {}, its cgroup watchdog \
                 only {}, all with no_new_privs. Held now: {}",
                names(mask(&KEPT)),
                FOR_UPROBES.1,
                FOR_BPF_STATS.1,
                FOR_BUNDLE.1,
                FOR_USER_COMMAND.1,
                names(mask(&FOR_LAB)),
                names(mask(Watches::Family.keeps())),
                names(mask(Watches::Namespaces.keeps())),
                names(mask(Watches::Cgroups.keeps())),
                match names(caps) {
                    n if n.is_empty() => "none of these".to_string(),
                    n => n,
                }
            ),
            None,
        ));
    }
    let features = KernelFeatures::detect();
    out.push(if features.btf {
        check("btf", Status::Ok, "/sys/kernel/btf/vmlinux present", None)
    } else {
        check(
            "btf",
            Status::Missing,
            "no kernel BTF",
            Some("use a kernel built with CONFIG_DEBUG_INFO_BTF=y (most distribution kernels since 5.x)"),
        )
    });
    let tracefs = Path::new("/sys/kernel/tracing/events").is_dir();
    out.push(if tracefs {
        check("tracefs", Status::Ok, "/sys/kernel/tracing mounted", None)
    } else {
        check(
            "tracefs",
            Status::Degraded,
            format!(
                "not mounted: the syscall tracepoints cannot attach (no {}); `--syscall-hooks per-call` falls back to the raw hooks without it, and bpftrace cross-checks need it",
                SYSCALL_TRACEPOINTS.map(|(_, what)| what).join("; no ")
            ),
            Some("mount -t tracefs nodev /sys/kernel/tracing"),
        )
    });
    for (tp, what) in TRACEPOINTS {
        out.push(if features.has_tracepoint(tp) {
            check(format!("tracepoint {tp}"), Status::Ok, what, None)
        } else {
            check(
                format!("tracepoint {tp}"),
                Status::Degraded,
                format!("absent on this kernel: no {what}"),
                Some("a newer kernel has it; scanprof runs without it"),
            )
        });
    }
    out.push(match (features.kfree_skb_reason, features.kfree_skb_rx_sk) {
        (true, true) => check(
            "drop reasons",
            Status::Ok,
            "kfree_skb carries reason and receiving socket",
            None,
        ),
        (true, false) if features.has_tracepoint("udp_fail_queue_rcv_skb") => check(
            "drop reasons",
            Status::Degraded,
            "kfree_skb has reasons but no rx_sk (kernels before 6.8): IPv4 datagrams dropped at the family's UDP sockets are its own by udp_fail_queue_rcv_skb (a listener's too); drops at its other sockets (raw, TCP) and of IPv6 datagrams are attributed by address only (replies to where it sent)",
            Some("kernel 6.8 or newer adds rx_sk"),
        ),
        (true, false) => check(
            "drop reasons",
            Status::Degraded,
            "kfree_skb has reasons but no rx_sk (kernels before 6.8), and no udp_fail_queue_rcv_skb: replies dropped at the scanner's own socket are attributed by address only, and a listener's loss at its socket cannot be seen",
            Some("kernel 6.8 or newer adds rx_sk"),
        ),
        _ => check(
            "drop reasons",
            Status::Degraded,
            "kfree_skb has no drop reason (kernel older than 5.17): drops are counted by location only, under NOT_SPECIFIED (a datagram the family's UDP socket refused under SOCKET_RCVBUFF or PROTO_MEM, from udp_fail_queue_rcv_skb); a datagram to a closed port cannot be told from a loss (a TCP probe's can: where it stopped), and no receiving socket either (see the 6.1 line in docs/probes.md)",
            Some("kernel 5.17 or newer names each drop's reason"),
        ),
    });
    let uprobe = Path::new("/sys/bus/event_source/devices/uprobe").exists();
    out.push(if uprobe && features.attach_cookie {
        check(
            "uprobes",
            Status::Ok,
            "available: scanner profiles can read rates from the scanner's functions",
            None,
        )
    } else if uprobe {
        check(
            "uprobes",
            Status::Degraded,
            "the kernel has uprobes but no BPF helper bpf_get_attach_cookie (kernels before 5.15): scanner functions are not probed; profiles read the requested rate from the command line and the scanner's output only",
            Some("kernel 5.15 or newer has the helper"),
        )
    } else {
        check(
            "uprobes",
            Status::Degraded,
            "absent: scanner functions cannot be probed",
            Some("enable CONFIG_UPROBE_EVENTS"),
        )
    });
    // What cannot be judged on this kernel, one line per lack: the run warns the same, and its
    // diagnosis says `not_judged_here` where a question of the run needs it.
    for l in crate::session::kernel_lacks(&features) {
        out.push(check(
            format!("judging {}", l.as_str()),
            Status::Degraded,
            l.warning(),
            Some(l.remedy()),
        ));
    }
    let kprobe = Path::new("/sys/bus/event_source/devices/kprobe").exists();
    out.push(check(
        "kprobes",
        Status::Info,
        if kprobe {
            "available (scanprof does not need them)"
        } else {
            "absent (scanprof does not need them)"
        },
        None,
    ));
    for tool in ["bpftrace", "perf"] {
        out.push(if on_path(tool) {
            check(
                tool,
                Status::Info,
                "installed: independent counts can be taken",
                None,
            )
        } else {
            check(
                tool,
                Status::Info,
                "not installed",
                Some("apt-get install bpftrace linux-perf (for cross-checks only)"),
            )
        });
    }
    if load_probes && privileged && features.btf {
        match ProbeSet::load(&ProbeOptions::default(), &features) {
            Ok(set) => {
                for p in set.status() {
                    out.push(if p.attached {
                        check(
                            format!("probe {}", p.name),
                            Status::Ok,
                            "loads and attaches",
                            None,
                        )
                    } else {
                        check(
                            format!("probe {}", p.name),
                            Status::Degraded,
                            p.error.clone().unwrap_or_default(),
                            Some("its figures will be missing; the rest works"),
                        )
                    });
                }
                out.push(memory_check(&set.map_memory()));
                let loaded: Vec<String> = set
                    .status()
                    .iter()
                    .filter(|p| p.attached)
                    .map(|p| p.name.clone())
                    .collect();
                drop(set);
                for (flags, opts) in probe_configurations() {
                    out.extend(configuration_checks(
                        flags,
                        ProbeSet::load(&opts, &features),
                        &loaded,
                    ));
                }
            }
            Err(e) => out.push(check(
                "probes",
                Status::Missing,
                e.to_string(),
                Some("see the checks above"),
            )),
        }
    }
    out
}

/// The options that change what the kernel verifies (rodata the programs branch or index on,
/// map sizes their loops are bounded by), each set as far as it goes, with the flags a user
/// gives for it. `doctor` loads the probes once more in each, since a program the verifier
/// accepts in the default configuration may be refused in another (6.1 refused on_sys_enter
/// under `--recv-classes`).
pub fn probe_configurations() -> Vec<(&'static str, ProbeOptions)> {
    let mut threads = ProbeOptions::default();
    threads.map_sizes.set("threads", 4096);
    vec![
        (
            "--recv-classes 64,256,1024",
            ProbeOptions {
                recv_class_bounds: vec![64, 256, 1024],
                ..ProbeOptions::default()
            },
        ),
        ("--map-size threads=4096", threads),
    ]
}

/// What loading the probes with `flags` did, against the programs the default configuration
/// `loaded`: one line when they all load again, else a line per program refused only there.
fn configuration_checks(
    flags: &str,
    result: Result<ProbeSet, crate::probes::ProbeError>,
    loaded: &[String],
) -> Vec<Check> {
    let set = match result {
        Ok(set) => set,
        Err(e) => {
            return vec![check(
                format!("probes with {flags}"),
                Status::Missing,
                e.to_string(),
                Some("runs with these options cannot load the probes; the default configuration can"),
            )]
        }
    };
    let refused: Vec<Check> = set
        .status()
        .iter()
        .filter(|p| !p.attached && loaded.contains(&p.name))
        .map(|p| {
            check(
                format!("probe {} with {flags}", p.name),
                Status::Degraded,
                p.error.clone().unwrap_or_default(),
                Some("loads without these options: its figures are missing only in runs that give them"),
            )
        })
        .collect();
    if !refused.is_empty() {
        return refused;
    }
    let n = set.status().iter().filter(|p| p.attached).count();
    vec![check(
        format!("probes with {flags}"),
        Status::Ok,
        format!("the {n} programs that load by default load and attach with these options too"),
        None,
    )]
}

/// The checks as JSON (for bundles), without loading probes: a running session has already
/// said which of its probes attached.
pub fn checks_json() -> serde_json::Value {
    serde_json::to_value(checks(false)).unwrap_or_default()
}
