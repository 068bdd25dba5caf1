//! The terminal view's state, apart from drawing: the Snapshot on display, the rate history for
//! the chart, focus, pause, sorting and filtering. Pure: it changes only through `apply` (an
//! update from the collection thread) and `on_key`, so every behaviour is testable without a tty.

use std::collections::VecDeque;

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

use super::keys::{action_of, Action};
use crate::analysis::{BudgetShares, DropRow, Snapshot, Stage, StageName, Summary, SCHEMA_VERSION, STAGES};
use crate::collect::family::ProcessInfo;
use crate::collect::DropClass;
use crate::probes::ProbeStatus;
use crate::session::Update;

/// Ticks of history kept for the rate chart.
const HISTORY: usize = 600;

/// The panels, in Tab order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Panel {
    Funnel,
    Budget,
    Rates,
    Gaps,
    Drops,
    /// the diagnosis and what the scanner's own functions said
    Diagnosis,
}

impl Panel {
    pub const ALL: [Panel; 6] = [
        Panel::Funnel,
        Panel::Budget,
        Panel::Rates,
        Panel::Gaps,
        Panel::Drops,
        Panel::Diagnosis,
    ];

    fn step(self, by: isize) -> Panel {
        let i = Panel::ALL.iter().position(|p| *p == self).unwrap_or(0) as isize;
        Panel::ALL[(i + by).rem_euclid(Panel::ALL.len() as isize) as usize]
    }
}

/// Orders of the drop table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropSort {
    Count,
    Rate,
    Reason,
    Location,
    Class,
}

impl DropSort {
    fn next(self) -> DropSort {
        match self {
            DropSort::Count => DropSort::Rate,
            DropSort::Rate => DropSort::Reason,
            DropSort::Reason => DropSort::Location,
            DropSort::Location => DropSort::Class,
            DropSort::Class => DropSort::Count,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            DropSort::Count => "count",
            DropSort::Rate => "rate",
            DropSort::Reason => "reason",
            DropSort::Location => "location",
            DropSort::Class => "class",
        }
    }
}

/// One whole tick of sending on the rate chart, packets per second.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RatePoint {
    /// seconds since attach
    pub t_s: f64,
    pub achieved: f64,
    pub dev_xmit: f64,
    pub target_drops: f64,
}

/// What the event loop should do after a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Continue,
    /// end the run (the view stays until the summary arrives)
    Stop,
    /// write a bundle of what was recorded so far
    Export,
}

#[derive(Debug, Default)]
pub struct App {
    /// what is being profiled, for the header
    pub title: String,
    pub processes: Vec<ProcessInfo>,
    pub probes: Vec<ProbeStatus>,
    /// the Snapshot on screen (frozen while paused); once the run ended, the run's Summary in
    /// Snapshot form (`summary_view`), not its last, partial tick
    pub shown: Option<Snapshot>,
    /// the newest Snapshot, shown on resume
    latest: Option<Snapshot>,
    /// the run's drop table up to the newest tick: `count` since attach, `rate` over the newest
    /// tick (0 for rows that dropped nothing in it); samples carry only their tick's drops
    drop_totals: Vec<DropRow>,
    /// `drop_totals` as of the Snapshot on screen
    shown_drops: Vec<DropRow>,
    pub history: VecDeque<RatePoint>,
    pub summary: Option<Summary>,
    pub focus: Option<Panel>,
    pub zoomed: bool,
    pub paused: bool,
    pub help: bool,
    pub sort: Option<DropSort>,
    pub filter: String,
    /// typing into the filter
    pub filtering: bool,
    /// first drop row on screen
    pub scroll: usize,
    /// the user asked to quit
    pub quitting: bool,
    /// the outcome of the last action that has one (an export), for the header
    pub status: Option<String>,
    /// draw without colour (NO_COLOR set): the state tags reversed, the chart's lines told
    /// apart by their markers
    pub no_color: bool,
}

impl App {
    pub fn new(title: String) -> App {
        App {
            title,
            focus: Some(Panel::Funnel),
            sort: Some(DropSort::Count),
            ..Default::default()
        }
    }

    /// Takes one update from the collection thread.
    pub fn apply(&mut self, update: Update) {
        match update {
            Update::Started {
                processes, probes, ..
            } => {
                self.processes = processes;
                self.probes = probes;
            }
            // A tick after the end would hide the summary: the collector sends none, but the
            // view does not rely on it.
            Update::Tick(_) if self.summary.is_some() => {}
            Update::Tick(s) => {
                let stage = |name: StageName| {
                    s.stages
                        .iter()
                        .find(|st| st.name == name)
                        .map_or(0.0, |st| st.pps)
                };
                // Only whole ticks of sending are rates: the start, the partial last sending
                // tick and a wait for late replies would draw a collapse.
                if s.judges_rate() {
                    self.history.push_back(RatePoint {
                        t_s: s.t_s,
                        achieved: s.achieved_pps,
                        dev_xmit: stage(StageName::DevXmit),
                        target_drops: stage(StageName::TargetDrops),
                    });
                }
                while self.history.len() > HISTORY {
                    self.history.pop_front();
                }
                self.processes = s.processes.clone();
                add_tick_drops(&mut self.drop_totals, &s.drops);
                if self.paused {
                    self.latest = Some(*s);
                } else {
                    self.shown = Some(*s);
                    self.shown_drops.clone_from(&self.drop_totals);
                }
            }
            Update::Done(summary) => {
                self.processes = summary.processes.clone();
                // Every panel switches to the run's figures, paused or not: the last tick is
                // partial (it read 75.9% of the requested rate, or "no sends yet", while the
                // report said 100%).
                let last = self.latest.take().or(self.shown.take());
                self.shown = Some(summary_view(&summary, last.as_ref()));
                // The run's drop table, as the report has it: counts since attach, rates over
                // the send window.
                self.shown_drops.clone_from(&summary.drops);
                self.summary = Some(*summary);
            }
        }
    }

    pub fn on_key(&mut self, key: KeyEvent) -> Outcome {
        if self.filtering {
            match key.code {
                KeyCode::Enter => self.filtering = false,
                KeyCode::Esc => {
                    self.filtering = false;
                    self.filter.clear();
                }
                KeyCode::Backspace => {
                    self.filter.pop();
                }
                KeyCode::Char(c) => self.filter.push(c),
                _ => {}
            }
            self.scroll = 0;
            return Outcome::Continue;
        }
        let Some(action) = action_of(key) else {
            if self.help && key.code == KeyCode::Esc {
                self.help = false;
            }
            return Outcome::Continue;
        };
        // With the help open, `q` and `?` close it (the run goes on); Ctrl-C still quits.
        let ctrl_c = key.modifiers.contains(KeyModifiers::CONTROL) && key.code == KeyCode::Char('c');
        if self.help && !ctrl_c {
            if matches!(action, Action::Quit | Action::Help) {
                self.help = false;
            }
            return Outcome::Continue;
        }
        match action {
            Action::Quit => {
                self.quitting = true;
                return Outcome::Stop;
            }
            Action::Pause => {
                self.paused = !self.paused;
                if !self.paused {
                    if let Some(latest) = self.latest.take() {
                        self.shown = Some(latest);
                        self.shown_drops.clone_from(&self.drop_totals);
                    }
                }
            }
            Action::NextPanel => self.focus = Some(self.focus.unwrap_or(Panel::Funnel).step(1)),
            Action::PrevPanel => self.focus = Some(self.focus.unwrap_or(Panel::Funnel).step(-1)),
            Action::ScrollUp => self.scroll = self.scroll.saturating_sub(1),
            Action::ScrollDown => {
                self.scroll = (self.scroll + 1).min(self.drop_rows().len().saturating_sub(1))
            }
            Action::Sort => self.sort = Some(self.sort.unwrap_or(DropSort::Count).next()),
            Action::Filter => {
                self.filtering = true;
                self.focus = Some(Panel::Drops);
            }
            Action::Zoom => self.zoomed = !self.zoomed,
            Action::Export => return Outcome::Export,
            Action::Help => self.help = !self.help,
        }
        Outcome::Continue
    }

    /// The run has ended and the panels show its Summary.
    pub fn ended(&self) -> bool {
        self.summary.is_some()
    }

    /// The drop rows to show: the target's first, filtered and sorted as asked.
    pub fn drop_rows(&self) -> Vec<&DropRow> {
        if self.shown.is_none() {
            return Vec::new();
        }
        let needle = self.filter.to_lowercase();
        let mut rows: Vec<&DropRow> = self
            .shown_drops
            .iter()
            .filter(|d| {
                needle.is_empty()
                    || [
                        d.reason.as_str(),
                        d.location.as_str(),
                        d.device.as_deref().unwrap_or(""),
                        d.class.name(),
                    ]
                    .iter()
                    .any(|f| f.to_lowercase().contains(&needle))
            })
            .collect();
        match self.sort.unwrap_or(DropSort::Count) {
            DropSort::Count => rows.sort_by_key(|d| std::cmp::Reverse(d.count)),
            DropSort::Rate => rows.sort_by(|a, b| b.rate.total_cmp(&a.rate)),
            DropSort::Reason => rows.sort_by(|a, b| a.reason.cmp(&b.reason)),
            DropSort::Location => rows.sort_by(|a, b| a.location.cmp(&b.location)),
            DropSort::Class => rows.sort_by_key(|d| d.class),
        }
        // The family's drops before other processes' (`unrelated`), in every order: on a busy
        // machine their loopback drops outnumber the target's, and at 80x24 the table shows one
        // row. The sort is stable, so each part keeps the order chosen.
        rows.sort_by_key(|d| d.class == DropClass::Unrelated);
        rows
    }
}

/// Adds a tick's drop rows (drops of that tick) to the run's table: counts add up per row,
/// the rate is the tick's (0 for a row that dropped nothing in it).
fn add_tick_drops(totals: &mut Vec<DropRow>, tick: &[DropRow]) {
    let same = |a: &DropRow, b: &DropRow| {
        (&a.reason, &a.location, &a.device, a.netns, a.class, a.pid)
            == (&b.reason, &b.location, &b.device, b.netns, b.class, b.pid)
    };
    for row in totals.iter_mut() {
        row.rate = 0.0;
    }
    for d in tick {
        match totals.iter_mut().find(|t| same(t, d)) {
            Some(t) => {
                t.count += d.count;
                t.rate = d.rate;
            }
            None => totals.push(d.clone()),
        }
    }
}

/// The run's Summary as the Snapshot the panels draw, so that every panel shows the figures of
/// the printed report: the funnel and the drops per second over the send window, the achieved
/// rate and ratio, the threads' time over their send windows, the verdicts. What a Summary does
/// not hold (episodes) is left empty; the tick number is the last tick's.
pub fn summary_view(sum: &Summary, last: Option<&Snapshot>) -> Snapshot {
    let requested = sum.requested_pps.filter(|r| *r > 0.0);
    let stages = STAGES
        .iter()
        .map(|name| {
            let pps = sum.stages.get(name).copied().unwrap_or(0.0);
            let total = sum.stage_counts.get(name).copied().unwrap_or(0);
            Stage {
                name: *name,
                count: total,
                pps,
                total,
                ratio: requested.map(|r| pps / r),
            }
        })
        .collect();
    let window_s = sum.send_window_s;
    let threads = sum
        .threads
        .iter()
        .map(|t| {
            let mut t = t.clone();
            // Over the send window, like the achieved rate and the report's time budget.
            if window_s > 0.0 {
                t.pps = t.packets as f64 / window_s;
            }
            if let Some(b) = t.send_window_budget {
                t.shares = BudgetShares::of(&b, b.total_ns());
            }
            t
        })
        .collect();
    Snapshot {
        schema_version: SCHEMA_VERSION,
        tick: last.map_or(0, |l| l.tick),
        t_s: sum.duration_s,
        interval_s: window_s,
        // The run's figures are over its send window: a whole stretch of sending.
        phase: crate::analysis::RunPhase::Sending,
        partial: false,
        last_send_s: sum.last_send_s,
        requested_pps: sum.requested_pps,
        achieved_pps: sum.achieved_pps,
        ratio: sum.ratio,
        stages,
        processes: sum.processes.clone(),
        threads,
        drops: sum.drops.clone(),
        devices: sum.devices.clone(),
        device_sampling: sum.device_sampling,
        block_sites: sum.block_sites.clone(),
        gap: sum.gap.clone(),
        episodes: Vec::new(),
        rate_stats: sum.rate_stats.clone(),
        health: sum.health,
        cost: sum.cost.clone(),
        scanner: sum.scanner.clone(),
        receive: sum.receive.clone(),
        replies: sum.replies.clone(),
        limits: sum.limits.clone(),
        connect_scanner: sum.connect.is_some_and(|c| c.connect_scanner),
        kernel_lacks: sum.kernel_lacks.clone(),
        verdicts: sum.verdicts.clone(),
        warnings: sum.warnings.clone(),
    }
}
