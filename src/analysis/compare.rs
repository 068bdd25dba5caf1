//! Two runs (or two sweeps) side by side, for `scanprof compare`: every figure of A and of B with
//! the difference B - A, and each verdict's cause as it appeared, grew, shrank, went away or
//! stayed. Built once from the runs' summaries (through `SweepStep::of`, so a share is computed
//! in one place) and rendered by views::compare. Pure: no I/O.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::knee::{SweepStep, VerdictBrief, GROWTH_MIN};
use super::verdict::{Cause, Kind};
use super::{Summary, STAGES};

/// One figure of both runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FigureRow {
    /// what it is, e.g. `achieved_pps`, `stage.dev_xmit_pps`, `budget.send`, `lost.QDISC_DROP`;
    /// a sweep's rows start with the requested rate, `@1000 achieved_pps`
    pub figure: String,
    /// A's value (None: A has no such figure)
    pub a: Option<f64>,
    pub b: Option<f64>,
    /// b - a, when both have it
    pub diff: Option<f64>,
    /// whether A's value is an estimate: a device stage counted only in `--device-stages
    /// sampled` windows and scaled to the run (false in comparisons written before)
    #[serde(default)]
    pub a_estimate: bool,
    #[serde(default)]
    pub b_estimate: bool,
}

/// How a cause differs from A to B.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CauseChange {
    /// named in B, not in A
    Appeared,
    /// its share rose by GROWTH_MIN or more
    Grew,
    /// its share fell by GROWTH_MIN or more
    Shrank,
    /// named in A, not in B
    WentAway,
    /// named in both, within GROWTH_MIN
    Same,
}

/// One cause of either run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CauseRow {
    pub cause: Cause,
    /// `gap` or `loss`
    pub kind: Kind,
    /// for sweeps, the requested rate of the steps compared; None for single runs
    pub at_pps: Option<f64>,
    /// its share in A (None: not named there)
    pub a_share: Option<f64>,
    pub b_share: Option<f64>,
    pub change: CauseChange,
}

/// The comparison of A and B.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    pub figures: Vec<FigureRow>,
    /// appeared and grew first, then went away and shrank, then the same
    pub causes: Vec<CauseRow>,
    /// for sweeps: requested rates only one of them ran
    pub unmatched_rates: Vec<f64>,
}

fn row(figure: String, a: Option<f64>, b: Option<f64>) -> FigureRow {
    let diff = match (a, b) {
        (Some(a), Some(b)) => Some(b - a),
        _ => None,
    };
    FigureRow {
        figure,
        a,
        b,
        diff,
        a_estimate: false,
        b_estimate: false,
    }
}

/// Whether a single run's figure is counted at the device stages: `stage.NAME_pps` of a device
/// stage, and `xmit_packets` (the funnel's `dev_xmit`).
fn is_device_figure(figure: &str) -> bool {
    figure == "xmit_packets"
        || STAGES
            .iter()
            .any(|n| n.is_device() && figure == format!("stage.{n}_pps"))
}

/// The figures of a step (and of its run's summary when there is one: the funnel's stages).
fn step_figures(st: &SweepStep, s: Option<&Summary>) -> Vec<(String, f64)> {
    let mut f: Vec<(String, f64)> = Vec::new();
    if st.requested_pps > 0.0 {
        f.push(("requested_pps".into(), st.requested_pps));
    }
    f.push(("achieved_pps".into(), st.achieved_pps));
    if st.requested_pps > 0.0 {
        f.push(("ratio".into(), st.ratio));
    }
    f.push(("packets".into(), st.packets as f64));
    f.push(("send_window_s".into(), st.send_window_s));
    if let Some(s) = s {
        for name in STAGES {
            if let Some(pps) = s.stages.get(&name) {
                f.push((format!("stage.{name}_pps"), *pps));
            }
        }
    }
    f.push(("xmit_packets".into(), st.xmit_packets as f64));
    // A loss share is the verdicts' (`verdict::loss_share`): lost over the packets handed to
    // the kernel, the figure beside it.
    f.push(("handed_packets".into(), st.handed_packets as f64));
    f.push(("lost".into(), st.lost as f64));
    f.push(("loss_share".into(), st.loss_share));
    let mut by_reason: BTreeMap<String, u64> = BTreeMap::new();
    for l in &st.losses {
        *by_reason
            .entry(format!("{}.{}", l.class.name(), l.reason))
            .or_default() += l.count;
    }
    f.extend(
        by_reason
            .into_iter()
            .map(|(k, v)| (format!("drops.{k}"), v as f64)),
    );
    if let Some(b) = st.budget {
        for (k, v) in [
            ("send", b.send),
            ("blocked_send", b.blocked_send),
            ("sleep", b.sleep),
            ("preempted", b.preempted),
            ("other", b.other),
        ] {
            f.push((format!("budget.{k}"), v));
        }
    }
    f.push(("scanprof_cpu".into(), st.scanprof_cpu));
    if let Some(v) = st.bpf_share_of_target {
        f.push(("bpf_share_of_target".into(), v));
    }
    f
}

/// Rows of both figure lists: A's order first, then what only B has.
fn merge(prefix: &str, a: &[(String, f64)], b: &[(String, f64)], out: &mut Vec<FigureRow>) {
    let find = |l: &[(String, f64)], k: &str| l.iter().find(|(n, _)| n == k).map(|(_, v)| *v);
    for (k, v) in a {
        out.push(row(format!("{prefix}{k}"), Some(*v), find(b, k)));
    }
    for (k, v) in b.iter().filter(|(k, _)| find(a, k).is_none()) {
        out.push(row(format!("{prefix}{k}"), None, Some(*v)));
    }
}

/// The causes of both verdict lists.
fn causes(a: &[VerdictBrief], b: &[VerdictBrief], at_pps: Option<f64>, out: &mut Vec<CauseRow>) {
    let mut names: Vec<(Cause, Kind)> = Vec::new();
    for v in a.iter().chain(b) {
        if !names.iter().any(|(c, _)| *c == v.cause) {
            names.push((v.cause, v.kind));
        }
    }
    for (cause, kind) in names {
        let share = |l: &[VerdictBrief]| l.iter().find(|v| v.cause == cause).map(|v| v.share);
        let (sa, sb) = (share(a), share(b));
        let change = match (sa, sb) {
            (None, _) => CauseChange::Appeared,
            (_, None) => CauseChange::WentAway,
            (Some(x), Some(y)) if y >= x + GROWTH_MIN => CauseChange::Grew,
            (Some(x), Some(y)) if x >= y + GROWTH_MIN => CauseChange::Shrank,
            _ => CauseChange::Same,
        };
        out.push(CauseRow {
            cause,
            kind,
            at_pps,
            a_share: sa,
            b_share: sb,
            change,
        });
    }
}

fn change_rank(c: CauseChange) -> u8 {
    match c {
        CauseChange::Appeared => 0,
        CauseChange::Grew => 1,
        CauseChange::WentAway => 2,
        CauseChange::Shrank => 3,
        CauseChange::Same => 4,
    }
}

fn sort_causes(c: &mut [CauseRow]) {
    c.sort_by(|x, y| {
        change_rank(x.change)
            .cmp(&change_rank(y.change))
            .then(x.at_pps.unwrap_or(0.0).total_cmp(&y.at_pps.unwrap_or(0.0)))
    });
}

/// Two single runs.
pub fn runs(a: &Summary, b: &Summary) -> Comparison {
    let (sa, sb) = (
        SweepStep::of(0, a.requested_pps.unwrap_or(0.0), a),
        SweepStep::of(0, b.requested_pps.unwrap_or(0.0), b),
    );
    let mut figures = Vec::new();
    merge(
        "",
        &step_figures(&sa, Some(a)),
        &step_figures(&sb, Some(b)),
        &mut figures,
    );
    // A run that sampled its device stages has estimates there: said beside each value.
    for f in figures.iter_mut().filter(|f| is_device_figure(&f.figure)) {
        f.a_estimate = f.a.is_some() && a.device_sampling.is_some();
        f.b_estimate = f.b.is_some() && b.device_sampling.is_some();
    }
    let mut c = Vec::new();
    causes(&sa.verdicts, &sb.verdicts, None, &mut c);
    sort_causes(&mut c);
    Comparison {
        figures,
        causes: c,
        unmatched_rates: Vec::new(),
    }
}

/// Two sweeps: their knees, and the steps of equal requested rate side by side.
pub fn sweeps(a: &[SweepStep], a_knee: Option<f64>, b: &[SweepStep], b_knee: Option<f64>) -> Comparison {
    let mut figures = vec![row("knee_pps".into(), a_knee, b_knee)];
    let mut c = Vec::new();
    let mut unmatched = Vec::new();
    for sa in a {
        match b.iter().find(|sb| sb.requested_pps == sa.requested_pps) {
            Some(sb) => {
                let at = format!("@{} ", sa.requested_pps);
                merge(
                    &at,
                    &step_figures(sa, None),
                    &step_figures(sb, None),
                    &mut figures,
                );
                causes(&sa.verdicts, &sb.verdicts, Some(sa.requested_pps), &mut c);
            }
            None => unmatched.push(sa.requested_pps),
        }
    }
    for sb in b {
        if !a.iter().any(|sa| sa.requested_pps == sb.requested_pps) {
            unmatched.push(sb.requested_pps);
        }
    }
    unmatched.sort_by(f64::total_cmp);
    sort_causes(&mut c);
    Comparison {
        figures,
        causes: c,
        unmatched_rates: unmatched,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::verdict::Confidence;
    use crate::analysis::Verdict;

    fn verdict(cause: Cause, kind: Kind, share: f64) -> Verdict {
        Verdict::bare(cause, kind, share, Confidence::Strong)
    }

    fn fig(c: &Comparison, name: &str) -> FigureRow {
        c.figures
            .iter()
            .find(|f| f.figure == name)
            .cloned()
            .unwrap_or_else(|| panic!("no figure {name}: {:?}", c.figures))
    }

    #[test]
    fn differences_are_b_less_a_and_causes_are_classed() {
        let (_, base) = crate::views::fixtures::rich_run();
        let mut a = base.clone();
        a.achieved_pps = 1000.0;
        a.requested_pps = Some(1000.0);
        a.verdicts = vec![
            verdict(Cause::NoGap, Kind::Gap, 0.0),
            verdict(Cause::Preempted, Kind::Gap, 0.05),
            verdict(Cause::PacingCoarse, Kind::Gap, 0.10),
        ];
        let mut b = base.clone();
        b.achieved_pps = 620.0;
        b.requested_pps = Some(1000.0);
        b.verdicts = vec![
            verdict(Cause::QdiscDrop, Kind::Loss, 0.38),
            verdict(Cause::Preempted, Kind::Gap, 0.20),
            verdict(Cause::PacingCoarse, Kind::Gap, 0.095),
        ];
        let c = runs(&a, &b);
        let ach = fig(&c, "achieved_pps");
        assert_eq!(
            (ach.a, ach.b, ach.diff),
            (Some(1000.0), Some(620.0), Some(-380.0))
        );
        let ratio = fig(&c, "ratio");
        assert_eq!(ratio.a, Some(1.0));
        assert!((ratio.diff.unwrap() + 0.38).abs() < 1e-12);
        for f in &c.figures {
            if let (Some(x), Some(y), Some(d)) = (f.a, f.b, f.diff) {
                assert_eq!(d, y - x, "{}", f.figure);
            }
        }
        let change = |cause: Cause| c.causes.iter().find(|r| r.cause == cause).unwrap().change;
        assert_eq!(change(Cause::QdiscDrop), CauseChange::Appeared);
        assert_eq!(change(Cause::Preempted), CauseChange::Grew);
        assert_eq!(change(Cause::NoGap), CauseChange::WentAway);
        assert_eq!(change(Cause::PacingCoarse), CauseChange::Same);
        // Appeared first, the unchanged last.
        assert_eq!(c.causes[0].cause, Cause::QdiscDrop);
        assert_eq!(c.causes.last().unwrap().change, CauseChange::Same);
    }

    #[test]
    fn a_drop_only_one_run_has_is_a_row_with_one_side() {
        let (_, base) = crate::views::fixtures::rich_run();
        let mut a = base.clone();
        a.drops.clear();
        let c = runs(&a, &base);
        let only_b: Vec<&FigureRow> = c.figures.iter().filter(|f| f.a.is_none()).collect();
        assert!(!only_b.is_empty() && only_b.iter().all(|f| f.figure.starts_with("drops.")));
        assert!(only_b.iter().all(|f| f.diff.is_none() && f.b.unwrap() > 0.0));
        assert_eq!(fig(&c, "lost").a, Some(0.0));
    }

    #[test]
    fn the_loss_share_is_the_verdicts_of_the_packets_handed_to_the_kernel() {
        // 9,478 packets accepted, 47,140 failed sends the qdisc dropped: 83.3% lost, as the
        // qdisc_drop verdict says, not 5.03 (lost over the packets accepted alone).
        let (_, mut b) = crate::views::fixtures::rich_run();
        b.packets = 9_478;
        b.failed_calls = 47_140;
        b.drops
            .retain(|d| d.class != crate::collect::DropClass::TargetLoss);
        b.drops.push(crate::analysis::DropRow {
            reason: "QDISC_DROP".into(),
            location: "__dev_queue_xmit".into(),
            device: Some("veth0".into()),
            netns: 1,
            class: crate::collect::DropClass::TargetLoss,
            pid: None,
            count: 47_140,
            rate: 0.0,
        });
        let c = runs(&b, &b);
        assert_eq!(fig(&c, "handed_packets").b, Some(56_618.0));
        let share = fig(&c, "loss_share").b.unwrap();
        assert!((share - 47_140.0 / 56_618.0).abs() < 1e-12, "{share}");
        let q = crate::analysis::verdict::for_summary(&b);
        let q = q
            .iter()
            .find(|v| v.cause == Cause::QdiscDrop)
            .expect("qdisc_drop");
        assert_eq!(q.share, share);
    }

    #[test]
    fn sweeps_are_compared_rate_by_rate() {
        let (_, s) = crate::views::fixtures::rich_run();
        let a: Vec<SweepStep> = [1000.0, 2000.0]
            .iter()
            .enumerate()
            .map(|(i, r)| SweepStep::of(i + 1, *r, &s))
            .collect();
        let mut b: Vec<SweepStep> = [2000.0, 4000.0]
            .iter()
            .enumerate()
            .map(|(i, r)| SweepStep::of(i + 1, *r, &s))
            .collect();
        b[0].achieved_pps += 10.0;
        let c = sweeps(&a, Some(1000.0), &b, Some(2000.0));
        assert_eq!(fig(&c, "knee_pps").diff, Some(1000.0));
        assert_eq!(fig(&c, "@2000 achieved_pps").diff, Some(10.0));
        assert_eq!(c.unmatched_rates, vec![1000.0, 4000.0]);
        assert!(c.causes.iter().all(|r| r.at_pps == Some(2000.0)));
    }
}
