//! recount.bt of a trace bundle: a bpftrace script (0.17 and newer, tracepoints only) that a
//! maintainer runs without scanprof to re-count the core figures of the same kind of run: the
//! family's send syscalls, packets and errors, and every drop by reason and location. It is
//! the independent counter the bundle ships with; the header says how each map maps to
//! scanprof's figures. Pure: rendered from the `Recording` alone.

use std::fmt::Write as _;

use super::Recording;
use crate::collect::DropClass;

/// Longest comm the kernel keeps (TASK_COMM_LEN less the terminating NUL), in bytes.
const COMM_MAX: usize = 15;
/// Run length assumed when the recording says nothing about it, s.
const DEFAULT_SECONDS: u64 = 60;
/// The send syscalls the script watches, as tracepoint names without the enter/exit prefix.
const SEND_SYSCALLS: [&str; 3] = ["sendto", "sendmsg", "sendmmsg"];

/// The bpftrace script that re-counts this run's core figures.
///
/// Processes are matched by name (`comm`) of the recorded family, since pids change between
/// runs; the script ends after the recorded run's duration rounded up (`interval:s:N`) or at
/// Ctrl-C, and bpftrace prints its maps then.
pub fn bpftrace_script(rec: &Recording) -> String {
    let comms = family_comms(rec);
    let seconds = run_seconds(rec);
    let filter = if comms.is_empty() {
        // Matches nothing until edited: the recording named no process.
        r#"comm == "CHANGE_ME""#.to_string()
    } else {
        comms
            .iter()
            .map(|c| format!("comm == \"{}\"", bpftrace_string(c)))
            .collect::<Vec<_>>()
            .join(" || ")
    };
    let mut o = String::new();
    header(&mut o, rec, &comms, seconds);
    let _ = writeln!(
        o,
        r#"BEGIN
{{
	printf("scanprof recount: counting for up to {seconds} s; Ctrl-C prints the counts now\n");
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
/{filter}/
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
    let _ = writeln!(
        o,
        r#"/* drops: every packet freed as dropped on the machine, by reason number and location. */
tracepoint:skb:kfree_skb
{{
	@drops[args->reason, ksym(args->location), args->location] = count();
}}

/* The drops that happened while a family process was on the CPU (during its send call). */
tracepoint:skb:kfree_skb
/{filter}/
{{
	@family_drops[comm, args->reason, ksym(args->location), args->location] = count();
}}

/* The default end: the recorded run's duration rounded up. Change N to taste. */
interval:s:{seconds}
{{
	exit();
}}

END
{{
	printf("scanprof recount: done; maps follow\n");
}}"#
    );
    o
}

fn header(o: &mut String, rec: &Recording, comms: &[String], seconds: u64) {
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
    let _ = writeln!(h);
    let _ = writeln!(
        h,
        r#"Run it as root before starting the scanner the same way:
  bpftrace recount.bt            (or: bpftrace -f json recount.bt)
It stops after {seconds} s (interval:s:{seconds} below: the recorded run's duration rounded up;
start the scanner within that time or raise N) or at Ctrl-C, and bpftrace prints every map.
Tracepoints only (syscalls:sys_exit_sendto/sendmsg/sendmmsg, skb:kfree_skb): no kprobes needed.

Which processes: those named like the recorded family ({names}); comm is at most
{COMM_MAX} characters. Any other process of that name counts as well. Pids change between runs;
to follow one process instead, replace each `comm == "NAME"` test with `pid == PID`
(every thread of that process; children need their own pid).

The maps and scanprof's figures (summary line of `scanprof run --json`, report.md):
  @packets[comm]           -> packets (stage syscall_packets): 1 per sendto/sendmsg that
                              returned >= 0, the return value of sendmmsg (messages sent).
  @send_calls[comm, call]  -> send_calls, failed included. scanprof also counts write/writev
                              on sockets and leaves out sends on non-network (unix, netlink)
                              sockets; the script cannot tell sockets apart.
  @errors[comm, errno, call] -> errors / failed_calls (errno numbers: 105 ENOBUFS,
                              11 EAGAIN, 1 EPERM, 101 ENETUNREACH; see errno -l).
  @drops[reason, function, location] -> the drop table: every kfree_skb on the machine (all
                              classes, other processes' packets included). scanprof's location
                              "function+0xOFF" is location minus the function's address in
                              /proc/kallsyms.
  @family_drops[comm, reason, function, location] -> the drops that happened while a family
                              process ran, i.e. during its own send call: its outgoing packets
                              dropped on the sending host (target_loss rows such as QDISC_DROP
                              at the qdisc) and, over lo or a veth, what the packet met on the
                              far side within the same call (NO_SOCKET: expected rows). Drops
                              later in softirq or in another process appear only in @drops.
Reasons are numbers; they differ between kernels. This kernel's names:
  grep -o '{{ [0-9]*, "[A-Z0-9_]*" }}' /sys/kernel/tracing/events/skb/kfree_skb/format"#,
        names = if comms.is_empty() {
            "none recorded: edit CHANGE_ME below".to_string()
        } else {
            comms.join(", ")
        },
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

/// The distinct comms of the recorded family (processes at attach, then every member and
/// sender thread the summary saw), cut to what the kernel keeps, in first-seen order.
fn family_comms(rec: &Recording) -> Vec<String> {
    let summary_procs = rec
        .summary
        .iter()
        .flat_map(|s| s.processes.iter().map(|p| &p.comm));
    let summary_threads = rec.summary.iter().flat_map(|s| s.threads.iter().map(|t| &t.comm));
    let mut out: Vec<String> = Vec::new();
    for c in rec
        .processes
        .iter()
        .map(|p| &p.comm)
        .chain(summary_procs)
        .chain(summary_threads)
    {
        let c = truncate_comm(c);
        if !c.is_empty() && !out.contains(&c) {
            out.push(c);
        }
    }
    out
}

fn truncate_comm(c: &str) -> String {
    let mut end = c.len().min(COMM_MAX);
    while !c.is_char_boundary(end) {
        end -= 1;
    }
    c[..end].to_string()
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
    fn script_filters_on_every_family_comm_and_uses_tracepoints_only() {
        let mut rec = rich_recording();
        let mut child = rec.processes[0].clone();
        child.pid = 8;
        child.comm = "a-very-long-scanner-name".into();
        rec.processes.push(child);
        let script = bpftrace_script(&rec);
        assert!(script.starts_with("#!/usr/bin/env bpftrace\n/*\n"));
        for comm in ["sender", "a-very-long-sca"] {
            assert!(
                script.contains(&format!("comm == \"{comm}\"")),
                "{comm} missing\n{script}"
            );
        }
        assert!(!script.contains("a-very-long-scan\""), "comm not cut to 15 bytes");
        for tp in [
            "tracepoint:syscalls:sys_exit_sendto",
            "tracepoint:syscalls:sys_exit_sendmsg",
            "tracepoint:syscalls:sys_exit_sendmmsg",
            "tracepoint:skb:kfree_skb",
        ] {
            assert!(script.contains(tp), "{tp} missing");
        }
        assert!(!script.contains("kprobe:") && !script.contains("kfunc:") && !script.contains("fentry"));
        for call in SEND_SYSCALLS {
            let program = format!("tracepoint:syscalls:sys_exit_{call}\n/");
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
        for map in [
            "@drops[args->reason, ksym(args->location), args->location]",
            "@family_drops[",
        ] {
            assert!(script.contains(map), "{map} missing");
        }
        // The fixture ran 3 s: the default end.
        assert!(script.contains("interval:s:3\n{\n\texit();\n}"), "{script}");
        // The header names what scanprof counted and how the maps map to it.
        assert!(script.contains("packets (syscall_packets) 300"));
        assert!(script.contains("drops target_loss QDISC_DROP at __dev_queue_xmit+0x1 dev veth0: 150"));
        assert!(script.contains("replace each `comm == \"NAME\"` test with `pid == PID`"));
        // The header is one comment, closed once.
        assert_eq!(script.matches("*/").count(), script.matches("/*").count());
    }

    #[test]
    fn awkward_names_and_missing_figures_give_a_usable_script() {
        let mut rec = rich_recording();
        rec.meta.command_line = vec!["scanprof".into(), "run".into(), "--".into(), "x*/y".into()];
        rec.processes[0].comm = "we\"ird\\".into();
        let script = bpftrace_script(&rec);
        assert!(script.contains(r#"comm == "we\"ird\\""#), "{script}");
        assert!(script.contains("x* /y"));
        let header_end = script.find(" */\n").expect("header end");
        assert!(!script[..header_end].contains("*/"));

        let empty = Recording::default();
        let script = bpftrace_script(&empty);
        assert!(script.contains(r#"comm == "CHANGE_ME""#));
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
