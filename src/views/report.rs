//! The report model: what the end-of-run reports show, computed once from a `Summary`. The
//! text report (`text.rs`) and the bundle's report.md (`export/markdown.rs`) both render a
//! `Report`, so they cannot choose a different time budget, compute a share or a ratio twice,
//! decode an exit status or order the drop classes each their own way. Pure: no I/O.

use crate::analysis::kernel::KernelLack;
use crate::analysis::stats::Modes;
use crate::analysis::verdict::Listing;
use crate::analysis::{DropRow, EndReason, StageName, Summary, STAGES};
use crate::collect::family::ProcessInfo;
use crate::collect::{DropClass, TimeBudget};

/// The figures of one run, as every report shows them.
#[derive(Debug, Clone)]
pub struct Report<'a> {
    /// the Summary the figures come from (for what is shown as it is)
    pub summary: &'a Summary,
    /// why the run ended, as a phrase
    pub ended: &'static str,
    /// the process family, each with how it ended
    pub processes: Vec<(&'a ProcessInfo, ProcessEnd)>,
    /// the target's achieved rate as a fraction of the baseline sender's on this machine
    pub of_baseline: Option<f64>,
    /// the per-tick rate's two modes, when it is bimodal (no centre describes it then)
    pub modes: Option<&'a Modes>,
    /// every stage of the send funnel, in the funnel's order
    pub funnel: Vec<FunnelRow>,
    /// the sender threads' time budget; None when no time was accounted
    pub budget: Option<BudgetView>,
    /// the drop table
    pub drops: DropTable<'a>,
    /// the verdicts every report lists in full, and the weak ones at 0.0% it counts
    pub verdicts: Listing<'a>,
}

/// How a process of the family ended (decoded from its wait status).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessEnd {
    Running,
    /// exited with this code
    Exited(i32),
    /// killed by this signal
    Killed(i32),
    /// gone, how is not known
    Gone,
}

impl ProcessEnd {
    /// From a process's `alive` flag and its wait status (`exit_code`, as waitpid gives it).
    pub fn of(alive: bool, wait_status: Option<i32>) -> ProcessEnd {
        match (alive, wait_status) {
            (true, _) => ProcessEnd::Running,
            (false, Some(c)) if c & 0x7f != 0 => ProcessEnd::Killed(c & 0x7f),
            (false, Some(c)) => ProcessEnd::Exited((c >> 8) & 0xff),
            (false, None) => ProcessEnd::Gone,
        }
    }

    /// `running`, `exited 0`, `killed by signal 9`, `exited`.
    pub fn text(self) -> String {
        match self {
            ProcessEnd::Running => "running".into(),
            ProcessEnd::Exited(c) => format!("exited {c}"),
            ProcessEnd::Killed(s) => format!("killed by signal {s}"),
            ProcessEnd::Gone => "exited".into(),
        }
    }
}

/// One stage of the send funnel over the send window.
#[derive(Debug, Clone, PartialEq)]
pub struct FunnelRow {
    /// the stage of the send funnel this row counts
    pub stage: StageName,
    /// per second over the send window
    pub pps: f64,
    pub count: u64,
    /// pps as a fraction of the requested rate; None when the rate is unknown or 0
    pub of_requested: Option<f64>,
    /// a qdisc stage on a path without a queueing qdisc (its 0 means no qdisc, not no packets)
    pub no_qdisc: bool,
    /// a stage the running kernel cannot count (`qdisc_enqueue` without its tracepoint): its 0
    /// is no figure
    pub unmeasured: bool,
    /// a device stage counted in windows (`--device-stages sampled`): its figures are
    /// estimates, and this says how it was sampled ("sampled 10% of the time, scaled")
    pub sampled: Option<String>,
}

/// The sender threads' time budget: over their own send windows where measured (the budget
/// the diagnosis uses), else since attach.
#[derive(Debug, Clone, PartialEq)]
pub struct BudgetView {
    /// what the budget covers: "over their send windows" or "since attach"
    pub over: &'static str,
    /// sending, blocked in send, sleeping, waiting for a CPU, other: each with its share
    pub states: Vec<BudgetState>,
}

/// One state of the time budget.
#[derive(Debug, Clone, PartialEq)]
pub struct BudgetState {
    pub label: &'static str,
    /// time in this state, ns
    pub ns: u64,
    /// fraction of the budget's total
    pub share: f64,
    /// the part of it spent right after wake-ups (ns, share of the total): only the wait for a
    /// CPU has one, when measured
    pub after_wakeups: Option<(u64, f64)>,
}

/// The drop rows in the order every report lists them: by class (the target's own losses
/// first), and within a class in the Summary's order (largest first).
#[derive(Debug, Clone)]
pub struct DropTable<'a> {
    pub rows: Vec<&'a DropRow>,
}

impl<'a> DropTable<'a> {
    fn new(drops: &'a [DropRow]) -> DropTable<'a> {
        let mut rows: Vec<&DropRow> = drops.iter().collect();
        rows.sort_by_key(|d| class_rank(d.class));
        DropTable { rows }
    }

    /// The rows of the target's packets and replies (every class but `unrelated`).
    pub fn mine(&self) -> Vec<&'a DropRow> {
        self.rows
            .iter()
            .copied()
            .filter(|d| d.class != DropClass::Unrelated)
            .collect()
    }

    /// Drops of other processes' packets on this machine.
    pub fn unrelated(&self) -> u64 {
        self.rows
            .iter()
            .filter(|d| d.class == DropClass::Unrelated)
            .map(|d| d.count)
            .sum()
    }

    /// Whether `rows` lie on devices of several namespaces: rows at one location on devices of
    /// different namespaces (a lab's veth ends, a container's) would read alike, so then each
    /// names its namespace.
    pub fn several_netns(rows: &[&DropRow]) -> bool {
        rows.iter().any(|d| d.netns != rows[0].netns)
    }
}

/// Order of the drop classes in every drop table: the target's own losses first.
pub fn class_rank(c: DropClass) -> u8 {
    match c {
        DropClass::TargetLoss => 0,
        DropClass::ReplyLoss => 1,
        DropClass::Expected => 2,
        DropClass::ReplySide => 3,
        DropClass::Unrelated => 4,
    }
}

impl<'a> Report<'a> {
    /// Computes the report's figures from `s`.
    pub fn new(s: &'a Summary) -> Report<'a> {
        Report {
            summary: s,
            ended: match s.end_reason {
                EndReason::Duration => "the requested duration elapsed",
                EndReason::FamilyExited => "the target's whole process family exited",
                EndReason::Interrupted => "interrupted",
            },
            processes: s
                .processes
                .iter()
                .map(|p| (p, ProcessEnd::of(p.alive, p.exit_code)))
                .collect(),
            of_baseline: s
                .baseline
                .as_ref()
                .filter(|b| b.achieved_pps > 0.0)
                .map(|b| s.achieved_pps / b.achieved_pps),
            modes: s.rate_stats.as_ref().and_then(|st| st.modes.as_ref()),
            funnel: funnel(s),
            budget: budget(s),
            drops: DropTable::new(&s.drops),
            verdicts: Listing::of(&s.verdicts),
        }
    }
}

fn funnel(s: &Summary) -> Vec<FunnelRow> {
    let requested = s.requested_pps.filter(|r| *r > 0.0);
    // Without the qdisc_enqueue tracepoint (5.10) the dequeues say whether a queueing qdisc
    // was on the path.
    let unmeasured = |name: StageName| {
        name == StageName::QdiscEnqueue && s.kernel_lacks.contains(&KernelLack::QdiscEnqueue)
    };
    let seen_at = if unmeasured(StageName::QdiscEnqueue) {
        StageName::QdiscDequeue
    } else {
        StageName::QdiscEnqueue
    };
    let no_qdisc = s.stage_counts.get(&seen_at).copied().unwrap_or(0) == 0;
    STAGES
        .into_iter()
        .map(|name| {
            let pps = s.stages.get(&name).copied().unwrap_or(0.0);
            FunnelRow {
                stage: name,
                pps,
                count: s.stage_counts.get(&name).copied().unwrap_or(0),
                of_requested: requested.map(|r| pps / r),
                no_qdisc: no_qdisc && name.is_qdisc() && !unmeasured(name),
                unmeasured: unmeasured(name),
                sampled: s.device_sampling.filter(|_| name.is_device()).map(|d| d.label()),
            }
        })
        .collect()
}

fn budget(s: &Summary) -> Option<BudgetView> {
    let (b, over): (TimeBudget, _) = match s.send_window_budget() {
        Some(w) => (w, "over their send windows"),
        None => (s.budget, "since attach"),
    };
    let total = b.total_ns();
    if total == 0 {
        return None;
    }
    let share = |ns: u64| ns as f64 / total as f64;
    let state = |label, ns: u64| BudgetState {
        label,
        ns,
        share: share(ns),
        after_wakeups: None,
    };
    Some(BudgetView {
        over,
        states: vec![
            state("sending", b.send_ns),
            state("blocked in send", b.blocked_send_ns),
            state("sleeping", b.sleep_ns),
            BudgetState {
                after_wakeups: b.wakeup_wait_ns.map(|w| (w, share(w))),
                ..state("waiting for a CPU", b.preempted_ns)
            },
            state("other (user code, pacing)", b.other_ns),
        ],
    })
}

/// Whether `c` would act on a terminal instead of showing: a control character (C0, DEL, C1:
/// escape sequences, cursor moves, a bell) or a bidirectional override (text that reads in
/// another order than it is stored).
fn acts_on_terminal(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// A string that comes from the kernel or a bundle (a comm, an executable, a device, a drop
/// reason or location, a profile name, a command line), as a report may print it: each
/// character that would act on a terminal, a line break included, is shown as its escape
/// (`\u{1b}`), so that a name can neither send an escape sequence nor forge a report line.
pub fn visible(s: &str) -> std::borrow::Cow<'_, str> {
    escape_unless(s, |_| false)
}

/// A whole rendered report (text or markdown) as it may be printed: as [`visible`], but its
/// own line breaks kept. The renderers pass what they return through it, so that no string
/// they print, whatever its origin, reaches the terminal as a control sequence.
pub fn visible_lines(s: String) -> String {
    match escape_unless(&s, |c| c == '\n') {
        std::borrow::Cow::Borrowed(_) => s,
        std::borrow::Cow::Owned(shown) => shown,
    }
}

fn escape_unless(s: &str, keep: impl Fn(char) -> bool) -> std::borrow::Cow<'_, str> {
    if !s.chars().any(|c| acts_on_terminal(c) && !keep(c)) {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut o = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if acts_on_terminal(c) && !keep(c) {
            use std::fmt::Write as _;
            let _ = write!(o, "\\u{{{:x}}}", u32::from(c));
        } else {
            o.push(c);
        }
    }
    std::borrow::Cow::Owned(o)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_and_overrides_are_shown_not_sent() {
        assert_eq!(visible("eth0"), "eth0");
        assert!(matches!(visible("eth0"), std::borrow::Cow::Borrowed(_)));
        assert_eq!(visible("a\x1b[2Jb"), "a\\u{1b}[2Jb");
        assert_eq!(
            visible("x\ny\u{7}\u{9b}\u{202e}"),
            "x\\u{a}y\\u{7}\\u{9b}\\u{202e}"
        );
        assert_eq!(
            visible_lines("a\x1b]0;t\x07\nb\n".into()),
            "a\\u{1b}]0;t\\u{7}\nb\n"
        );
        assert_eq!(visible("Grüße ✓"), "Grüße ✓");
    }

    /// Every string of a run that comes from the kernel or a bundle, poisoned with escape
    /// sequences, a bidirectional override and a line break: neither report sends any of them.
    #[test]
    fn neither_report_sends_a_control_character_from_a_bundle() {
        let evil = "\x1b]0;t\x07\x1b[2J\u{9b}1m\u{202e}\nverdict: forged";
        let mut rec = crate::views::fixtures::rich_recording();
        rec.meta.hostname = format!("h{evil}");
        rec.meta.kernel = format!("k{evil}");
        rec.meta.command_line.push(format!("a{evil}"));
        let s = rec.summary.as_mut().expect("a summary");
        s.warnings.push(format!("w{evil}"));
        for p in &mut s.processes {
            p.comm = format!("c{evil}");
            p.exe = format!("/e{evil}");
        }
        for d in &mut s.drops {
            d.reason = format!("r{evil}");
            d.location = format!("l{evil}");
            d.device = Some(format!("d{evil}"));
        }
        for d in &mut s.devices {
            d.device = format!("d{evil}");
        }
        for q in &mut s.queues {
            q.device = format!("q{evil}");
        }
        if let Some(sc) = s.scanner.as_mut() {
            sc.profile = format!("p{evil}");
        }
        assert!(
            !s.drops.is_empty() && !s.processes.is_empty(),
            "the fixture lost its rows"
        );
        let s = rec.summary.clone().expect("a summary");
        let text = crate::views::text::summary(&s);
        let md = crate::views::export::markdown::report_md(&rec, None, None, &[]);
        for (what, out) in [("text", &text), ("markdown", &md)] {
            let sent: Vec<char> = out
                .chars()
                .filter(|c| *c != '\n' && acts_on_terminal(*c))
                .collect();
            assert!(sent.is_empty(), "{what} sends {sent:?}:\n{out}");
            assert!(out.contains("\\u{1b}]0;t\\u{7}"), "{what}:\n{out}");
            assert!(
                !out.lines().any(|l| l.starts_with("verdict: forged")),
                "{what}: a name forged a line:\n{out}"
            );
        }
    }

    #[test]
    fn exit_statuses_decode_once() {
        assert_eq!(ProcessEnd::of(true, Some(0)), ProcessEnd::Running);
        assert_eq!(ProcessEnd::of(false, Some(3 << 8)), ProcessEnd::Exited(3));
        assert_eq!(ProcessEnd::of(false, Some(9)), ProcessEnd::Killed(9));
        assert_eq!(ProcessEnd::of(false, None), ProcessEnd::Gone);
        assert_eq!(ProcessEnd::Killed(15).text(), "killed by signal 15");
        assert_eq!(ProcessEnd::Exited(0).text(), "exited 0");
    }

    #[test]
    fn drop_rows_come_by_class_then_in_the_summarys_order() {
        let mut s = Summary::for_tests();
        let row = |class, reason: &str, count| DropRow {
            reason: reason.into(),
            location: "x".into(),
            device: None,
            netns: 1,
            class,
            pid: None,
            count,
            rate: 0.0,
        };
        s.drops = vec![
            row(DropClass::Unrelated, "A", 50),
            row(DropClass::Expected, "B", 40),
            row(DropClass::TargetLoss, "C", 30),
            row(DropClass::Expected, "D", 20),
            row(DropClass::TargetLoss, "E", 10),
        ];
        let r = Report::new(&s);
        let order: Vec<&str> = r.drops.rows.iter().map(|d| d.reason.as_str()).collect();
        assert_eq!(order, ["C", "E", "B", "D", "A"]);
        assert_eq!(r.drops.mine().len(), 4);
        assert_eq!(r.drops.unrelated(), 50);
        assert!(!DropTable::several_netns(&r.drops.rows));
    }

    #[test]
    fn the_budget_is_the_send_windows_when_measured_and_its_shares_add_up() {
        let mut s = Summary::for_tests();
        assert!(Report::new(&s).budget.is_none(), "no time accounted: no budget");
        s.budget = TimeBudget {
            send_ns: 30,
            blocked_send_ns: 10,
            sleep_ns: 40,
            preempted_ns: 10,
            wakeup_wait_ns: Some(5),
            other_ns: 10,
        };
        let b = Report::new(&s).budget.expect("a budget");
        assert_eq!(b.over, "since attach");
        let total: f64 = b.states.iter().map(|st| st.share).sum();
        assert!((total - 1.0).abs() < 1e-12, "{total}");
        let woken: Vec<_> = b.states.iter().filter_map(|st| st.after_wakeups).collect();
        assert_eq!(woken, [(5, 0.05)]);
    }

    #[test]
    fn funnel_shares_are_of_the_requested_rate_and_qdisc_stages_say_when_there_is_none() {
        let mut s = Summary::for_tests();
        s.requested_pps = Some(200.0);
        s.stages.insert(StageName::SyscallPackets, 100.0);
        s.stage_counts.insert(StageName::SyscallPackets, 300);
        let r = Report::new(&s);
        assert_eq!(r.funnel.len(), STAGES.len());
        let sp = r
            .funnel
            .iter()
            .find(|f| f.stage == StageName::SyscallPackets)
            .expect("stage");
        assert_eq!((sp.count, sp.of_requested), (300, Some(0.5)));
        assert!(r.funnel.iter().filter(|f| f.stage.is_qdisc()).all(|f| f.no_qdisc));
        s.requested_pps = Some(0.0);
        assert!(Report::new(&s).funnel.iter().all(|f| f.of_requested.is_none()));
    }

    /// 5.10 has no qdisc_enqueue tracepoint: its 0 is no figure, and the dequeues (which it
    /// has) say whether a queueing qdisc was on the path; never "no queueing qdisc" beside them.
    #[test]
    fn a_stage_the_kernel_cannot_count_is_unmeasured_not_an_empty_qdisc() {
        let mut s = Summary::for_tests();
        s.kernel_lacks = vec![KernelLack::QdiscEnqueue];
        s.stage_counts.insert(StageName::QdiscDequeue, 900);
        let row = |r: &Report, stage| {
            r.funnel
                .iter()
                .find(|f| f.stage == stage)
                .cloned()
                .expect("stage")
        };
        let r = Report::new(&s);
        let (enq, deq) = (row(&r, StageName::QdiscEnqueue), row(&r, StageName::QdiscDequeue));
        assert!(enq.unmeasured && !enq.no_qdisc, "{enq:?}");
        assert!(!deq.unmeasured && !deq.no_qdisc, "{deq:?}");
        // No dequeues either: no queueing qdisc, said of the dequeue row only.
        s.stage_counts.insert(StageName::QdiscDequeue, 0);
        let r = Report::new(&s);
        assert!(row(&r, StageName::QdiscDequeue).no_qdisc);
        assert!(!row(&r, StageName::QdiscEnqueue).no_qdisc);
    }
}
