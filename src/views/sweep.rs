//! How a rate sweep is shown: a progress line per step, the table of steps (text and
//! markdown) with the knee under it, and the NDJSON lines (`sweep_step`, `sweep`). All of it
//! renders the `SweepStep`s and `SweepSummary` of analysis::knee, built once per sweep.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::analysis::knee::{ChangeKind, Knee, StepFailure, SweepStep};
use crate::analysis::verdict::LOSS_SHARE_OF;
use crate::units::{pct, whole_or_tenths as rate};
use crate::views::json;

/// The sweep as a whole: what was asked, how far it got, and its knee.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepSummary {
    /// every rate the sweep was to request, in order, packets per second
    pub requested_rates: Vec<f64>,
    /// steps that ran (fewer than the rates when interrupted)
    pub steps_run: usize,
    /// Ctrl-C (or SIGTERM/SIGHUP) ended the sweep early
    pub interrupted: bool,
    /// seconds each step was given
    pub step_duration_s: f64,
    /// the highest rate the sweep was allowed to request (--max-rate), if given
    pub max_rate: Option<f64>,
    /// a step is kept within this fraction of requested (0.02 = 2%) and with no loss
    pub keep_tolerance: f64,
    pub knee: Knee,
}

/// The top verdict as `cause (share)`, or `-`.
fn top(s: &SweepStep) -> String {
    s.top()
        .map_or("-".to_string(), |v| format!("{} ({})", v.cause, pct(v.share)))
}

/// The sender's budget shares as send/blocked/sleep/preempted/other percentages.
fn budget(s: &SweepStep) -> String {
    s.budget.map_or("-".to_string(), |b| {
        format!(
            "{:.0}/{:.0}/{:.0}/{:.0}/{:.0}",
            b.send * 100.0,
            b.blocked_send * 100.0,
            b.sleep * 100.0,
            b.preempted * 100.0,
            b.other * 100.0
        )
    })
}

/// scanprof's own cost: its process's CPU, and its BPF programs' share of the target's CPU.
fn cost(s: &SweepStep) -> String {
    format!(
        "{}/{}",
        pct(s.scanprof_cpu),
        s.bpf_share_of_target.map_or("-".to_string(), pct)
    )
}

/// One line per finished step (stderr while the sweep runs).
pub fn progress_line(s: &SweepStep, of: usize) -> String {
    format!(
        "scanprof sweep: step {}/{of} at {} pps: achieved {:.1} pps ({:.3}), {} lost, top verdict {}{}",
        s.step,
        rate(s.requested_pps),
        s.achieved_pps,
        s.ratio,
        s.lost,
        top(s),
        if s.kept { "; kept" } else { "" }
    )
}

/// Where the sweep is while a step runs (stderr, rewritten each tick on a terminal): step k of
/// n, its requested rate, the step's seconds so far of its bound, and the last tick's achieved
/// rate (the family's send syscalls over that tick).
pub fn running_line(
    step: usize,
    of: usize,
    requested_pps: f64,
    t_s: f64,
    bound_s: f64,
    tick_pps: f64,
) -> String {
    format!(
        "scanprof sweep: step {step}/{of} at {} pps: {t_s:.0} of {bound_s:.0} s, {tick_pps:.1} pps achieved in the last tick",
        rate(requested_pps)
    )
}

/// What the knee says, in one or two sentences.
pub fn knee_sentence(k: &Knee, tolerance: f64) -> String {
    let mut o = match (k.knee_pps, k.above_pps) {
        (Some(kp), Some(a)) => format!(
            "knee: {} pps, the highest rate kept within {} with no loss; above it, at {} pps, ",
            rate(kp),
            pct(tolerance),
            rate(a)
        ),
        (Some(kp), None) => format!(
            "knee: not reached: every rate up to {} pps was kept within {} with no loss",
            rate(kp),
            pct(tolerance)
        ),
        (None, Some(a)) => format!(
            "knee: below the sweep: not even {} pps, the lowest rate, was kept within {} with no loss; there, ",
            rate(a),
            pct(tolerance)
        ),
        (None, None) => "knee: no step ran".to_string(),
    };
    if k.above_pps.is_some() {
        if let Some(f) = &k.failure {
            let _ = write!(o, "{}: ", failed_on(f, tolerance));
        }
        o += &match &k.change {
            Some(c) => match c.how {
                ChangeKind::Appeared => {
                    format!("`{}` ({}) appeared at {}", c.cause, c.kind, pct(c.share_above))
                }
                ChangeKind::Grew => format!(
                    "`{}` ({}) grew from {} to {}",
                    c.cause,
                    c.kind,
                    pct(c.share_at_knee.unwrap_or(0.0)),
                    pct(c.share_above)
                ),
            },
            None => "no verdict of that appeared or grew (see the step's own report)".to_string(),
        };
    }
    if !k.kept_again.is_empty() {
        let r: Vec<String> = k.kept_again.iter().map(|r| rate(*r)).collect();
        let _ = write!(
            o,
            "; kept again above it at {} pps (a limit that comes and goes, or noise)",
            r.join(", ")
        );
    }
    o
}

/// The keep criteria a step crossed: `failed on 12 packets lost (QDISC_DROP), 0.0% of the
/// packets handed to the kernel (sent + failed sends)`, `failed on achieved/requested 0.750, off
/// by more than 2.0%`.
fn failed_on(f: &StepFailure, tolerance: f64) -> String {
    let mut why = Vec::new();
    if f.off_rate {
        why.push(format!(
            "achieved/requested {:.3}, off by more than {}",
            f.ratio,
            pct(tolerance)
        ));
    }
    if f.lost > 0 {
        why.push(format!(
            "{} packets lost{}, {} {LOSS_SHARE_OF}",
            f.lost,
            f.top_loss
                .as_ref()
                .map_or(String::new(), |r| format!(" (most {r})")),
            pct(f.loss_share)
        ));
    }
    format!("it failed on {}", why.join(" and "))
}

/// Columns of the table.
const COLUMNS: usize = 12;

const HEADER: [&str; COLUMNS] = [
    "requested",
    "achieved",
    "ach/req",
    "kept",
    "lost (% of handed)",
    "xmit",
    "rx/pkt",
    "replies/probe",
    "budget send/blk/sleep/pre/other %",
    "scanprof cpu/bpf",
    "top verdict",
    "lab rx / tc drops",
];

fn row(s: &SweepStep) -> [String; COLUMNS] {
    [
        rate(s.requested_pps),
        format!("{:.1}", s.achieved_pps),
        format!("{:.3}", s.ratio),
        if s.kept { "yes" } else { "no" }.to_string(),
        if s.lost > 0 {
            format!("{} ({})", s.lost, pct(s.loss_share))
        } else {
            "0".to_string()
        },
        s.xmit_packets.to_string(),
        s.received_per_packet
            .map_or("-".to_string(), |r| format!("{r:.3}")),
        s.reply_ratio.map_or("-".to_string(), |r| format!("{r:.3}")),
        budget(s),
        cost(s),
        top(s),
        s.lab.as_ref().map_or("-".to_string(), |l| {
            format!("{} / {}", l.receiver_packets, l.qdisc_drops)
        }),
    ]
}

/// What the `lost` column counts, and its share's denominator.
fn lost_legend() -> String {
    format!(
        "the lost column counts the target's own packets dropped after sending (class target_loss), with their share {LOSS_SHARE_OF}, as in the verdicts"
    )
}

/// The losses of a step, one `count REASON at place (class)` per row.
fn losses(s: &SweepStep) -> Vec<String> {
    s.losses
        .iter()
        .map(|l| format!("{} {} at {} ({})", l.count, l.reason, l.location, l.class.name()))
        .collect()
}

/// The sweep as a text table, each step's losses under its row, and the knee.
pub fn table_text(steps: &[SweepStep], sum: &SweepSummary) -> String {
    let rows: Vec<[String; COLUMNS]> = steps.iter().map(row).collect();
    let width = |i: usize| {
        rows.iter()
            .map(|r| r[i].chars().count())
            .chain([HEADER[i].len()])
            .max()
            .unwrap_or(0)
    };
    let widths: Vec<usize> = (0..HEADER.len()).map(width).collect();
    let line = |cells: &[String]| -> String {
        let mut l = String::from(" ");
        for (i, c) in cells.iter().enumerate() {
            if i < 3 || (5..=7).contains(&i) {
                let _ = write!(l, " {c:>w$}", w = widths[i]);
            } else {
                let _ = write!(l, " {c:<w$}", w = widths[i]);
            }
        }
        l.trim_end().to_string() + "\n"
    };
    let mut o = format!(
        "rate sweep: {} of {} steps of {} s each{}; figures per step (achieved over its send window)\n",
        sum.steps_run,
        sum.requested_rates.len(),
        sum.step_duration_s,
        if sum.interrupted { ", interrupted" } else { "" }
    );
    o += &line(&HEADER.map(String::from));
    for (s, r) in steps.iter().zip(&rows) {
        o += &line(r);
        for l in losses(s) {
            let _ = writeln!(o, "      lost: {l}");
        }
    }
    let _ = writeln!(o, "{}", lost_legend());
    let _ = writeln!(o, "{}", knee_sentence(&sum.knee, sum.keep_tolerance));
    if let Some(l) = reply_fall_sentence(steps) {
        let _ = writeln!(o, "{l}");
    }
    o
}

/// The replies/probe column's legend and, when the reply ratio falls as the rate rises, where.
fn reply_fall_sentence(steps: &[SweepStep]) -> Option<String> {
    let (lo, hi) = crate::analysis::knee::reply_ratio_fall(steps)?;
    Some(format!(
        "replies per probe (arrived at this host, whatever the family reads them with) fall from {:.3} at {} pps to {:.3} at {} pps: a path or a target that answers less as the rate rises (a policer, a full queue, a rate limit)",
        lo.reply_ratio.unwrap_or(0.0),
        rate(lo.requested_pps),
        hi.reply_ratio.unwrap_or(0.0),
        rate(hi.requested_pps)
    ))
}

/// The sweep as a markdown table (sweep.md), with the plot and the knee.
pub fn table_md(steps: &[SweepStep], sum: &SweepSummary, plot: Option<&str>) -> String {
    let mut o = String::from("# Rate sweep\n\n");
    let _ = writeln!(
        o,
        "{} of {} steps of {} s each{}. A step is kept when achieved is within {} of requested \
         and nothing of the target's was lost.\n",
        sum.steps_run,
        sum.requested_rates.len(),
        sum.step_duration_s,
        if sum.interrupted { " (interrupted)" } else { "" },
        pct(sum.keep_tolerance)
    );
    let _ = writeln!(o, "{}\n", knee_sentence(&sum.knee, sum.keep_tolerance));
    let _ = writeln!(o, "{}\n", lost_legend());
    if let Some(l) = reply_fall_sentence(steps) {
        let _ = writeln!(o, "{l}\n");
    }
    if let Some(p) = plot {
        let _ = writeln!(o, "![achieved against requested]({p})\n");
    }
    let _ = writeln!(o, "| {} | losses |", HEADER.join(" | "));
    let _ = writeln!(o, "|{}---|", "---|".repeat(HEADER.len()));
    for s in steps {
        let l = losses(s).join("; ");
        let cells = row(s).map(|c| c.replace('|', "\\|"));
        let _ = writeln!(
            o,
            "| {} | {} |",
            cells.join(" | "),
            if l.is_empty() {
                "-".into()
            } else {
                l.replace('|', "\\|")
            }
        );
    }
    o
}

/// The NDJSON line of a step.
pub fn step_line(s: &SweepStep) -> String {
    json::line("sweep_step", s)
}

/// The NDJSON line of the whole sweep.
pub fn summary_line(s: &SweepSummary) -> String {
    json::line("sweep", s)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::analysis::knee::{knee, LabCounts, SweepStep, KEEP_TOLERANCE};

    /// Three steps from the fixture run: kept, kept, and one with a qdisc loss.
    pub(crate) fn fixture_steps() -> (Vec<SweepStep>, SweepSummary) {
        let (_, s) = crate::views::fixtures::rich_run();
        let mut steps = Vec::new();
        for (i, r) in [1000.0, 2000.0, 4000.0].into_iter().enumerate() {
            let mut st = SweepStep::of(i + 1, r, &s);
            st.achieved_pps = if i < 2 { r * 0.999 } else { r * 0.99 };
            st.ratio = st.achieved_pps / r;
            st.kept = i < 2;
            if i < 2 {
                // Kept steps: nothing lost, no cause.
                st.losses.clear();
                st.lost = 0;
                st.loss_share = 0.0;
                st.verdicts = vec![crate::analysis::knee::VerdictBrief {
                    cause: crate::analysis::verdict::Cause::NoGap,
                    kind: crate::analysis::verdict::Kind::Gap,
                    share: 0.0,
                    confidence: crate::analysis::verdict::Confidence::Strong,
                }];
            }
            st.lab = Some(LabCounts {
                receiver_packets: 3000,
                qdisc_sent: 3000,
                qdisc_drops: if i < 2 { 0 } else { 40 },
            });
            steps.push(st);
        }
        let sum = SweepSummary {
            requested_rates: vec![1000.0, 2000.0, 4000.0, 8000.0],
            steps_run: 3,
            interrupted: true,
            step_duration_s: 3.0,
            max_rate: Some(8000.0),
            keep_tolerance: KEEP_TOLERANCE,
            knee: knee(&steps),
        };
        (steps, sum)
    }

    #[test]
    fn the_running_line_names_the_step_of_the_sweep_and_its_rate() {
        let l = running_line(2, 5, 2500.0, 1.96, 3.0, 2493.04);
        assert_eq!(
            l,
            "scanprof sweep: step 2/5 at 2500 pps: 2 of 3 s, 2493.0 pps achieved in the last tick"
        );
        assert!(running_line(1, 1, 12.5, 0.0, 10.0, 0.0).contains("step 1/1 at 12.5 pps"));
    }

    #[test]
    fn every_sweep_json_key_is_documented_in_events_md() {
        let (steps, sum) = fixture_steps();
        let lines: Vec<String> = steps.iter().map(step_line).chain([summary_line(&sum)]).collect();
        let keys = crate::views::json::documented_keys(&lines, "sweep");
        assert!(keys.contains("losses") && keys.contains("share_above") && keys.contains("qdisc_drops"));
    }

    #[test]
    fn the_table_shows_each_step_its_losses_and_the_knee() {
        let (mut steps, sum) = fixture_steps();
        steps[0].received_per_packet = None;
        steps[1].received_per_packet = Some(0.5);
        steps[0].reply_ratio = Some(0.99);
        steps[2].reply_ratio = Some(0.25);
        let t = table_text(&steps, &sum);
        assert!(t.contains("3 of 4 steps") && t.contains("interrupted"), "{t}");
        assert_eq!(t.lines().filter(|l| l.contains(" yes ")).count(), 2, "{t}");
        assert!(t.contains("knee: 2000 pps"), "{t}");
        let lost = steps[2].lost;
        assert!(lost > 0, "the fixture's third step loses packets");
        assert!(
            t.contains(&format!(
                "above it, at 4000 pps, it failed on {lost} packets lost (most QDISC_DROP), {} of the packets handed to the kernel (sent + failed sends): `qdisc_drop` (loss) appeared at",
                pct(steps[2].loss_share)
            )),
            "{t}"
        );
        assert!(t.contains("lost (% of handed)"), "{t}");
        assert!(t.contains("the lost column counts the target's own packets dropped after sending (class target_loss), with their share of the packets handed to the kernel (sent + failed sends)"), "{t}");
        assert_eq!(t.matches("lost: ").count(), 1, "{t}");
        // Received per packet sent: a figure where the family read replies, a dash where not.
        assert!(t.contains("rx/pkt"), "{t}");
        let row_of = |r: &str| {
            t.lines()
                .find(|l| l.trim_start().starts_with(r))
                .unwrap()
                .to_string()
        };
        assert!(row_of("2000").contains(" 0.500 "), "{t}");
        // Replies per probe: from the reply funnel, and its fall with the rate said.
        assert!(
            t.contains("replies/probe") && row_of("1000").contains(" 0.990 "),
            "{t}"
        );
        assert!(
            t.contains("replies per probe (arrived at this host, whatever the family reads them with) fall from 0.990 at 1000 pps to 0.250 at 4000 pps"),
            "{t}"
        );
        assert!(!row_of("1000").contains("0.500"), "{t}");
        let md = table_md(&steps, &sum, Some("sweep.svg"));
        assert!(md.contains("![achieved against requested](sweep.svg)"), "{md}");
        assert_eq!(md.lines().filter(|l| l.starts_with("| 1000 ")).count(), 1, "{md}");
    }
}
