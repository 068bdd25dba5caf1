//! recount.bt of a trace bundle: a bpftrace script (0.17 and newer, tracepoints only) that a
//! maintainer runs without scanprof to re-count the core figures of the same kind of run: the
//! family's send syscalls, packets and errors, and every drop by reason and location. It is
//! the independent counter the bundle ships with; the header says how each map maps to
//! scanprof's figures. Pure: rendered from the `Recording` alone.
//!
//! It filters on what scanprof filters on: the process family of one root pid (the script's
//! argument), kept up to date on fork, never on process names: a name such as `sh` would match
//! every shell on the machine.

use std::fmt::Write as _;

use super::Recording;
use crate::collect::DropClass;

/// Run length assumed when the recording says nothing about it, s.
const DEFAULT_SECONDS: u64 = 60;
/// The send syscalls the script watches, as tracepoint names without the enter/exit prefix.
const SEND_SYSCALLS: [&str; 3] = ["sendto", "sendmsg", "sendmmsg"];
/// Whether the current process is in the family: a member seen forking since the script
/// started, the root itself, or a child or grandchild of the root that existed before (its
/// parent links; a running scanner's sender and listener children).
const FAMILY: &str = "@family[pid] || curtask->real_parent->tgid == $1 || \
curtask->real_parent->real_parent->tgid == $1";

/// The bpftrace script that re-counts this run's core figures.
///
/// The family is given by its root pid (`bpftrace recount.bt PID`); the script ends after the
/// recorded run's duration rounded up (`interval:s:N`) or at Ctrl-C, and bpftrace prints its
/// maps then. Drop reasons are printed by name with the recorded kernel's table.
pub fn bpftrace_script(rec: &Recording) -> String {
    let seconds = run_seconds(rec);
    let mut o = String::new();
    header(&mut o, rec, seconds);
    let kernel = if rec.meta.kernel.is_empty() {
        "the recorded kernel"
    } else {
        rec.meta.kernel.as_str()
    };
    let _ = writeln!(
        o,
        r#"BEGIN
{{
	if ($1 <= 0) {{
		printf("usage: bpftrace recount.bt PID   (the scanner's root pid, or $$ of the shell you will start it from)\n");
		exit();
	}}
	@family[$1] = 1;"#
    );
    for (number, name) in &rec.meta.drop_reasons {
        let _ = writeln!(o, "\t@reason[{number}] = \"{}\";", bpftrace_string(name));
    }
    let names = if rec.meta.drop_reasons.is_empty() {
        "the recording has no drop reason names: reasons print as numbers only".to_string()
    } else {
        format!("drop reason names are {}'s", bpftrace_string(kernel))
    };
    let _ = writeln!(
        o,
        r#"	printf("scanprof recount: counting the family of pid %d; Ctrl-C prints the counts now\n", $1);
	printf("scanprof recount: {names}\n");
}}

/* The family: every process a member forks (threads share their process's pid). */
tracepoint:sched:sched_process_fork
/{FAMILY}/
{{
	@family[args->child_pid] = 1;
}}
"#
    );
    // One program per syscall: bpftrace 0.17 fails to load a multi-probe block next to another
    // block on the same tracepoint, and one program per event is cheaper anyway.
    for call in SEND_SYSCALLS {
        let (what, packets) = if call == "sendmmsg" {
            ("the messages sent: the return value", "sum(args->ret)")
        } else {
            ("one packet per successful call", "sum(1)")
        };
        let _ = writeln!(
            o,
            r#"/* {call}: send_calls, syscall_packets ({what}), errors by errno. */
tracepoint:syscalls:sys_exit_{call}
/{FAMILY}/
{{
	@send_calls[comm, "{call}"] = count();
	if (args->ret >= 0) {{
		@packets[comm] = {packets};
	}} else {{
		@errors[comm, -args->ret, "{call}"] = count();
	}}
}}
"#
        );
    }
    // bpftrace refuses a map that is read but never written: no table, no names.
    let (name_key, clear_names) = if rec.meta.drop_reasons.is_empty() {
        ("", "")
    } else {
        (", @reason[args->reason]", "\n\tclear(@reason);")
    };
    let _ = writeln!(
        o,
        r#"/* drops: every packet freed as dropped on the machine, by reason and function. */
tracepoint:skb:kfree_skb
{{
	@drops[args->reason{name_key}, ksym(args->location)] = count();
}}

/* The drops that happened while a family process was on the CPU (during its send call). */
tracepoint:skb:kfree_skb
/{FAMILY}/
{{
	@family_drops[comm, args->reason{name_key}, ksym(args->location)] = count();
}}

/* The default end: the recorded run's duration rounded up. Change N to taste. */
interval:s:{seconds}
{{
	exit();
}}

END
{{
	clear(@family);{clear_names}
	printf("scanprof recount: done; maps follow\n");
}}"#
    );
    o
}

fn header(o: &mut String, rec: &Recording, seconds: u64) {
    let mut h = String::new();
    let m = &rec.meta;
    let _ = writeln!(
        h,
        "scanprof recount: re-counts the core figures of a scanprof run with bpftrace alone."
    );
    let _ = writeln!(h);
    if !m.command_line.is_empty() {
        let _ = writeln!(h, "Recorded run: {}", m.command_line.join(" "));
    }
    let mut at = Vec::new();
    for (what, v) in [
        ("at", &m.started_at),
        ("on host", &m.hostname),
        ("kernel", &m.kernel),
    ] {
        if !v.is_empty() {
            at.push(format!("{what} {v}"));
        }
    }
    if !at.is_empty() {
        let _ = writeln!(h, "  {}", at.join(", "));
    }
    let roots: Vec<String> = rec
        .processes
        .iter()
        .filter(|p| p.root)
        .map(|p| format!("{} (pid {})", p.comm, p.pid))
        .collect();
    if !roots.is_empty() {
        let _ = writeln!(h, "  family root then: {}", roots.join(", "));
    }
    if let Some(s) = &rec.summary {
        let _ = writeln!(
            h,
            "scanprof counted: packets (syscall_packets) {}, send_calls {}, failed {}, over {:.2} s",
            s.packets, s.send_calls, s.failed_calls, s.duration_s
        );
        for (errno, n) in &s.errors {
            let _ = writeln!(h, "  error {errno}: {n}");
        }
        for d in s.drops.iter().filter(|d| d.class != DropClass::Unrelated) {
            let class = serde_json::to_value(d.class)
                .ok()
                .and_then(|v| v.as_str().map(String::from))
                .unwrap_or_default();
            let _ = writeln!(
                h,
                "  drops {class} {} at {} dev {}: {}",
                d.reason,
                d.location,
                d.device.as_deref().unwrap_or("-"),
                d.count
            );
        }
    }
    let reasons = if m.drop_reasons.is_empty() {
        "Reasons are numbers (the recording has no names); they differ between kernels. This\n\
         kernel's names:\n  \
         grep -o '{ [0-9]*, \"[A-Z0-9_]*\" }' /sys/kernel/tracing/events/skb/kfree_skb/format"
            .to_string()
    } else {
        format!(
            "Reasons are printed as number and name; the names are the recorded kernel's ({}).\n\
             Numbers differ between kernels: on another kernel trust the number, and read its\n\
             name in /sys/kernel/tracing/events/skb/kfree_skb/format.",
            if m.kernel.is_empty() { "unknown" } else { &m.kernel }
        )
    };
    let _ = writeln!(h);
    let _ = writeln!(
        h,
        r#"Run it as root with the family's root pid: a running scanner's pid, or the pid of the
shell you will start the scanner from (then start it there):
  bpftrace recount.bt PID             (or: bpftrace -f json recount.bt PID)
  bpftrace recount.bt $$ &  then the scanner's command in the same shell
It stops after {seconds} s (interval:s:{seconds} below: the recorded run's duration rounded up;
raise N for a longer run) or at Ctrl-C, and bpftrace prints every map.
Tracepoints only (syscalls:sys_exit_sendto/sendmsg/sendmmsg, skb:kfree_skb, sched:
sched_process_fork): no kprobes needed.

Which processes: as scanprof's, the family of one process: PID, the children and grandchildren
it has when the script starts, and every process any of them forks later (with all threads).
Nothing is matched by name, so other processes of the same name are not counted.

The maps and scanprof's figures (summary line of `scanprof run --json`, report.md):
  @packets[comm]           -> packets (stage syscall_packets): 1 per sendto/sendmsg that
                              returned >= 0, the return value of sendmmsg (messages sent).
  @send_calls[comm, call]  -> send_calls, failed included. scanprof also counts write/writev
                              on sockets and leaves out sends on non-network (unix, netlink)
                              sockets; the script cannot tell sockets apart.
  @errors[comm, errno, call] -> errors / failed_calls (errno numbers: 105 ENOBUFS,
                              11 EAGAIN, 1 EPERM, 101 ENETUNREACH; see errno -l).
  @drops[reason, name, function] -> the drop table: every kfree_skb on the machine (all
                              classes, other processes' packets included). scanprof's rows
                              are per location "function+0xOFF": its rows of one function and
                              reason add up to one row here.
  @family_drops[comm, reason, name, function] -> the drops that happened while a family
                              process ran, i.e. during its own send call: its outgoing packets
                              dropped on the sending host (target_loss rows such as QDISC_DROP
                              at the qdisc) and, over lo or a veth, what the packet met on the
                              far side within the same call (NO_SOCKET: expected rows). Drops
                              later in softirq or in another process appear only in @drops.
{reasons}"#,
    );
    let _ = writeln!(o, "#!/usr/bin/env bpftrace");
    let _ = writeln!(o, "/*");
    for line in h.lines() {
        // Nothing in a recorded string may end the comment early.
        let line = line.replace("*/", "* /");
        if line.is_empty() {
            let _ = writeln!(o, " *");
        } else {
            let _ = writeln!(o, " * {line}");
        }
    }
    let _ = writeln!(o, " */\n");
}

/// A bpftrace string literal's content.
fn bpftrace_string(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// The recorded run's length rounded up to whole seconds (at least 1).
fn run_seconds(rec: &Recording) -> u64 {
    let d = rec
        .summary
        .as_ref()
        .map(|s| s.duration_s)
        .or_else(|| rec.ticks.last().map(|t| t.t_s))
        .filter(|d| d.is_finite() && *d > 0.0);
    d.map_or(DEFAULT_SECONDS, |d| (d.ceil() as u64).max(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::views::fixtures::rich_recording;

    #[test]
    fn script_follows_the_family_of_a_root_pid_with_tracepoints_only() {
        let mut rec = rich_recording();
        let mut child = rec.processes[0].clone();
        child.pid = 8;
        child.comm = "sh".into();
        rec.processes.push(child);
        let script = bpftrace_script(&rec);
        assert!(script.starts_with("#!/usr/bin/env bpftrace\n/*\n"));
        // No process is matched by name: a name such as sh would match every shell.
        assert!(!script.contains("comm =="), "{script}");
        assert!(
            script.contains("\t@family[$1] = 1;\n"),
            "the root seeds the family"
        );
        assert!(
            script.contains("if ($1 <= 0) {"),
            "no pid, no count: a usage line"
        );
        let fork = "tracepoint:sched:sched_process_fork\n/";
        let at = script.find(fork).expect("fork tracking");
        assert!(script[at..].contains("@family[args->child_pid] = 1;"));
        for tp in [
            "tracepoint:syscalls:sys_exit_sendto",
            "tracepoint:syscalls:sys_exit_sendmsg",
            "tracepoint:syscalls:sys_exit_sendmmsg",
            "tracepoint:skb:kfree_skb",
        ] {
            assert!(script.contains(tp), "{tp} missing");
        }
        assert!(!script.contains("kprobe:") && !script.contains("kfunc:") && !script.contains("fentry"));
        // Every counting program filters on the family, the same predicate each time.
        let predicate = format!("/{FAMILY}/\n");
        assert_eq!(script.matches(&predicate).count(), 5, "{script}");
        assert!(FAMILY.contains("curtask->real_parent->tgid == $1"));
        for call in SEND_SYSCALLS {
            let program = format!("tracepoint:syscalls:sys_exit_{call}\n{predicate}");
            assert_eq!(
                script.matches(&program).count(),
                1,
                "one program for {call}\n{script}"
            );
            assert!(script.contains(&format!("@errors[comm, -args->ret, \"{call}\"] = count();")));
            assert!(script.contains(&format!("@send_calls[comm, \"{call}\"] = count();")));
        }
        assert!(script.contains("@packets[comm] = sum(args->ret);"));
        assert_eq!(script.matches("@packets[comm] = sum(1);").count(), 2);
        // Drops by reason number and name, and function name: no raw addresses.
        for map in [
            "@drops[args->reason, @reason[args->reason], ksym(args->location)]",
            "@family_drops[comm, args->reason, @reason[args->reason], ksym(args->location)]",
        ] {
            assert!(script.contains(map), "{map} missing\n{script}");
        }
        assert!(!script.contains(", args->location]"), "{script}");
        for (n, name) in &rec.meta.drop_reasons {
            assert!(
                script.contains(&format!("\t@reason[{n}] = \"{name}\";\n")),
                "{name}"
            );
        }
        // Helper maps are not printed at the end.
        assert!(script.contains("clear(@family);\n\tclear(@reason);"));
        // The fixture ran 3 s: the default end.
        assert!(script.contains("interval:s:3\n{\n\texit();\n}"), "{script}");
        // The header names what scanprof counted, the root then, and how to run it.
        assert!(script.contains("packets (syscall_packets) 300"));
        assert!(script.contains("drops target_loss QDISC_DROP at __dev_queue_xmit+0x1 dev veth0: 150"));
        assert!(script.contains("bpftrace recount.bt PID"));
        // The header is one comment, closed once.
        assert_eq!(script.matches("*/").count(), script.matches("/*").count());
    }

    #[test]
    fn awkward_names_and_missing_figures_give_a_usable_script() {
        let mut rec = rich_recording();
        rec.meta.command_line = vec!["scanprof".into(), "run".into(), "--".into(), "x*/y".into()];
        rec.meta.drop_reasons = [(7, "WE\"IRD".to_string())].into();
        let script = bpftrace_script(&rec);
        assert!(script.contains(r#"@reason[7] = "WE\"IRD";"#), "{script}");
        assert!(script.contains("x* /y"));
        let header_end = script.find(" */\n").expect("header end");
        assert!(!script[..header_end].contains("*/"));

        // An old bundle without the reason table: numbers only, and no map read but never
        // written (bpftrace refuses that).
        let empty = Recording::default();
        let script = bpftrace_script(&empty);
        assert!(!script.contains("@reason"), "{script}");
        assert!(script.contains("@drops[args->reason, ksym(args->location)]"));
        assert!(script.contains("Reasons are numbers (the recording has no names)"));
        assert!(script.contains(&format!("interval:s:{DEFAULT_SECONDS}\n")));
    }

    #[test]
    fn duration_rounds_up() {
        let mut rec = rich_recording();
        if let Some(s) = rec.summary.as_mut() {
            s.duration_s = 2.01;
        }
        assert_eq!(run_seconds(&rec), 3);
        rec.summary = None;
        assert_eq!(run_seconds(&rec), 3, "the last tick's time");
    }
}
