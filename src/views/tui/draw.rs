//! Draws the App: header, funnel, time budget, rate chart, gap histogram and drop table, with
//! the footer generated from the key table. Reads the App only; never changes it.

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::symbols::Marker;
use ratatui::text::{Line, Span};

use crate::units::{duration_compact as dur, pct, rate_compact as rate};
use ratatui::widgets::{
    Axis, Bar, BarChart, BarGroup, Block, Chart, Clear, Dataset, GraphType, Paragraph, Row, Table, Wrap,
};
use ratatui::Frame;

use super::app::{App, Panel};
use super::keys::{footer, BINDINGS, HELP};
use crate::analysis::verdict::{Confidence, Kind, Listing};
use crate::analysis::{DropRow, EndReason, RunPhase, Snapshot, Stage, StageName};
use crate::collect::DropClass;

/// The smallest terminal the live view lays out its panels in; below it, it says so.
pub const MIN_SIZE: (u16, u16) = (80, 24);

pub fn draw(f: &mut Frame, app: &App) {
    draw_panels(f, app);
    if app.no_color {
        without_colour(f.buffer_mut());
    }
}

/// Takes the colours out of a drawn frame (NO_COLOR): a cell drawn on a coloured background
/// (the LIVE/ENDED tags, a selection) is shown reversed instead, so that it still stands out.
fn without_colour(buf: &mut ratatui::buffer::Buffer) {
    for cell in buf.content.iter_mut() {
        if cell.bg != Color::Reset {
            cell.modifier.insert(Modifier::REVERSED);
        }
        cell.fg = Color::Reset;
        cell.bg = Color::Reset;
    }
}

fn draw_panels(f: &mut Frame, app: &App) {
    let area = f.area();
    if area.width < MIN_SIZE.0 || area.height < MIN_SIZE.1 {
        let text = format!(
            "terminal too small ({}x{}): the live view needs at least {}x{}. The run goes on; q ends it.",
            area.width, area.height, MIN_SIZE.0, MIN_SIZE.1
        );
        f.render_widget(Paragraph::new(text).wrap(Wrap { trim: true }), area);
        return;
    }
    let [header, body, foot] =
        Layout::vertical([Constraint::Length(5), Constraint::Min(0), Constraint::Length(1)]).areas(area);
    draw_header(f, app, header);
    f.render_widget(
        Paragraph::new(footer(foot.width as usize)).style(Style::new().reversed()),
        foot,
    );
    match (app.zoomed, app.focus) {
        (true, Some(p)) => draw_panel(f, app, p, body),
        _ => {
            // The funnel's stages and the receive stages after them when the family receives,
            // as far as the body leaves 10 rows to the panels below (zoomed, it shows them all).
            let rows = app.shown.as_ref().map_or(0, |s| funnel_stages(s).len() as u16);
            let top_height = (rows + 3).min(body.height.saturating_sub(10)).max(10);
            let [top, middle, bottom] = Layout::vertical([
                Constraint::Length(top_height),
                Constraint::Percentage(45),
                Constraint::Percentage(55),
            ])
            .areas(body);
            // The funnel needs 43 columns for its longest stage name and figures.
            let [funnel, budget] =
                Layout::horizontal([Constraint::Length(43), Constraint::Min(0)]).areas(top);
            let [rates, gaps] =
                Layout::horizontal([Constraint::Percentage(60), Constraint::Percentage(40)]).areas(middle);
            draw_panel(f, app, Panel::Funnel, funnel);
            draw_panel(f, app, Panel::Budget, budget);
            draw_panel(f, app, Panel::Rates, rates);
            draw_panel(f, app, Panel::Gaps, gaps);
            // The diagnosis sits beside the drops where there is room; on a narrow terminal the
            // header's `why:` line shows the top cause, and focusing the panel (Tab) shows it
            // in the drops' place.
            if bottom.width >= 120 {
                // The drops take 55%, or what their table needs to show every column whole
                // (devices, namespaces), leaving the diagnosis 40 columns.
                let want = DropColumns::natural_width(&app.drop_rows(), per_second_heading(app)) + 2;
                let drops_width = (want as u16).clamp(bottom.width * 55 / 100, bottom.width - 40);
                let [drops, diagnosis] =
                    Layout::horizontal([Constraint::Length(drops_width), Constraint::Min(0)]).areas(bottom);
                draw_panel(f, app, Panel::Drops, drops);
                draw_panel(f, app, Panel::Diagnosis, diagnosis);
            } else if app.focus == Some(Panel::Diagnosis) {
                draw_panel(f, app, Panel::Diagnosis, bottom);
            } else {
                draw_panel(f, app, Panel::Drops, bottom);
            }
        }
    }
    if app.help {
        draw_help(f, area);
    }
}

fn panel_block(app: &App, panel: Panel, title: String) -> Block<'static> {
    let focused = app.focus == Some(panel);
    Block::bordered().title(title).border_style(if focused {
        Style::new().fg(Color::Cyan).bold()
    } else {
        Style::new()
    })
}

fn draw_panel(f: &mut Frame, app: &App, panel: Panel, area: Rect) {
    match panel {
        Panel::Funnel => draw_funnel(f, app, area),
        Panel::Budget => draw_budget(f, app, area),
        Panel::Rates => draw_rates(f, app, area),
        Panel::Gaps => draw_gaps(f, app, area),
        Panel::Drops => draw_drops(f, app, area),
        Panel::Diagnosis => draw_diagnosis(f, app, area),
    }
}

/// The ranked causes, then what the scanner's probes said: rate sources, calibrations, work
/// units, IPC and claims.
fn draw_diagnosis(f: &mut Frame, app: &App, area: Rect) {
    let block = panel_block(app, Panel::Diagnosis, format!(" diagnosis{} ", run_mark(app)));
    let s = app.shown.as_ref();
    let verdicts = app
        .summary
        .as_ref()
        .map(|x| &x.verdicts)
        .or(s.map(|s| &s.verdicts));
    let scanner = app
        .summary
        .as_ref()
        .and_then(|x| x.scanner.as_ref())
        .or(s.and_then(|s| s.scanner.as_ref()));
    let mut lines: Vec<Line> = Vec::new();
    let listing = Listing::of(verdicts.map_or(&[], |v| v.as_slice()));
    for v in &listing.shown {
        let colour = if v.kind == Kind::Loss {
            Color::Red
        } else {
            Color::Magenta
        };
        let weak = if v.confidence == Confidence::Weak {
            " (weak)"
        } else {
            ""
        };
        lines.push(Line::from(vec![
            Span::styled(
                format!("{} {} ", v.kind, pct(v.share)),
                Style::new().fg(colour).bold(),
            ),
            Span::raw(format!("{}{weak}", v.sentence)),
        ]));
        if !v.next_step.is_empty() {
            lines.push(Line::styled(
                format!("  next: {}", v.next_step),
                Style::new().fg(Color::DarkGray),
            ));
        }
    }
    if let Some(rest) = listing.rest_sentence() {
        lines.push(Line::styled(rest, Style::new().fg(Color::DarkGray)));
    }
    if let Some(sc) = scanner {
        lines.push(Line::styled(
            format!("scanner: {}", sc.profile),
            Style::new().bold(),
        ));
        for r in sc.requested.sources.iter().rev().take(3) {
            lines.push(Line::from(format!("  rate from {}", r.described())));
        }
        if let Some(c) = &sc.requested.conflict {
            lines.push(Line::styled(
                format!("  disagree: {c}"),
                Style::new().fg(Color::Red),
            ));
        }
        for c in sc.calibrations.iter().rev().take(2) {
            let err = c
                .error_pct
                .map(|e| format!(", error {e:+.2}%"))
                .unwrap_or_default();
            let took = c
                .duration_ms
                .map(|d| format!(" took {d:.0} ms"))
                .unwrap_or_default();
            lines.push(Line::from(format!("  calibration {}{took}{err}", c.probe)));
        }
        for u in sc.work_units.iter().rev().take(4) {
            lines.push(Line::from(format!(
                "  unit {}: {} pkts at {} pps{}{}",
                u.index,
                u.packets.map(|p| p.to_string()).unwrap_or_else(|| "-".into()),
                u.achieved_pps.map(rate).unwrap_or_else(|| "-".into()),
                u.setup_ms
                    .map(|m| format!(", set-up {m:.0} ms"))
                    .unwrap_or_default(),
                u.idle_before_ms
                    .map(|m| format!(", idle {m:.0} ms"))
                    .unwrap_or_default(),
            )));
        }
        for m in sc.ipc.iter().take(4) {
            lines.push(Line::from(format!(
                "  ipc {} {} {} x{}",
                m.comm, m.direction, m.kind, m.messages
            )));
        }
        for c in &sc.claims {
            let diff = c.diff_pct.map(|d| format!(" ({d:+.1}%)")).unwrap_or_default();
            let from = c.source.map(|s| format!(" ({})", s.label())).unwrap_or_default();
            lines.push(Line::from(format!(
                "  claim{from} {}: {:.1}{diff}",
                c.what, c.claimed
            )));
        }
        for n in &sc.notes {
            lines.push(Line::styled(
                format!("  note: {n}"),
                Style::new().fg(Color::Yellow),
            ));
        }
    }
    if lines.is_empty() {
        lines.push(Line::from("no verdict yet"));
    }
    f.render_widget(
        Paragraph::new(lines).wrap(Wrap { trim: false }).block(block),
        area,
    );
}

/// What the panels' figures cover once the run has ended: the run (its Summary), not a tick.
fn run_mark(app: &App) -> &'static str {
    if app.ended() {
        " (run)"
    } else {
        ""
    }
}

/// The rate column's heading: per second over the tick, or over the run's send window.
fn per_second_heading(app: &App) -> &'static str {
    if app.ended() {
        "/s run"
    } else {
        "/s tick"
    }
}

/// A count in a bar's five columns: 1234, 12.3k, 1.2M.
fn count_label(n: u64) -> String {
    match n {
        0..=99_999 => n.to_string(),
        100_000..=999_999 => format!("{}k", n / 1000),
        _ => format!("{:.1}M", n as f64 / 1e6),
    }
}

/// A duration for a bar label (5 columns, unit included): `1.1ms`, `2us`, `15ms`, `109ms`; each
/// number formatted from its value, never edited as text.
fn dur_label(ns: f64) -> String {
    let (v, unit) = if ns >= 1e6 {
        (ns / 1e6, "ms")
    } else if ns >= 1e3 {
        (ns / 1e3, "us")
    } else {
        (ns, "ns")
    };
    // Two digits or more: whole units (the bar's lower bound, so not rounded up), which keeps
    // every label within the bar's five columns with its unit.
    if v >= 10.0 {
        return format!("{:.0}{unit}", v.floor());
    }
    let tenths = (v * 10.0).round();
    if tenths % 10.0 == 0.0 {
        format!("{:.0}{unit}", tenths / 10.0)
    } else {
        format!("{:.1}{unit}", tenths / 10.0)
    }
}

/// A requested-rate source in a word or two: `--requested`, `argv`, `work unit 2`, `init_tslot`.
fn short_source(source: &str) -> String {
    if source.starts_with("--requested") {
        "--requested".into()
    } else if source.starts_with("argv") || source.starts_with("config") || source.starts_with("default") {
        source.split(':').next().unwrap_or(source).into()
    } else if let Some(rest) = source.strip_prefix("work unit ") {
        format!("work unit {}", rest.split(' ').next().unwrap_or(""))
    } else {
        source.split('(').next().unwrap_or(source).into()
    }
}

fn draw_header(f: &mut Frame, app: &App, area: Rect) {
    let block = Block::bordered().title(header_title(app));
    let width = area.width.saturating_sub(2) as usize;
    let lines = vec![
        Line::from(header_rate_line(app)),
        Line::from(header_cost_line(app)),
        header_why_line(app),
    ]
    .into_iter()
    .map(|l| fit_line(l, width))
    .collect::<Vec<_>>();
    f.render_widget(Paragraph::new(lines).block(block), area);
}

/// The header's first line: the run's state (live, paused, ending, ended), then the requested
/// rate with its source and the achieved one (the tick's, or the run's once it ended).
pub(super) fn header_rate_line(app: &App) -> Vec<Span<'static>> {
    let s = app.shown.as_ref();
    let mut state = match (&app.summary, app.paused) {
        (Some(_), _) => Span::styled(" ENDED ", Style::new().bg(Color::Yellow).fg(Color::Black)),
        (None, true) => Span::styled(" PAUSED ", Style::new().bg(Color::Blue).fg(Color::White)),
        (None, false) => Span::styled(" LIVE ", Style::new().bg(Color::Green).fg(Color::Black)),
    };
    if app.quitting && app.summary.is_none() {
        state = Span::styled(" ENDING... ", Style::new().bg(Color::Yellow).fg(Color::Black));
    }
    let scanner = s.and_then(|s| s.scanner.as_ref());
    // Where the requested figure comes from: the latest source that names it.
    let source = scanner
        .and_then(|sc| sc.requested.sources.iter().rev().find(|r| r.pps.is_some()))
        .map(|r| short_source(&r.source))
        .unwrap_or_else(|| "--requested".into());
    let requested = match s.and_then(|s| s.requested_pps) {
        Some(r) => Span::raw(format!("requested {} pps ({source}) ", rate(r))),
        None => Span::raw("requested: unknown ".to_string()),
    };
    let disagree = scanner
        .is_some_and(|sc| sc.requested.conflict.is_some())
        .then(|| Span::styled("SOURCES DISAGREE ", Style::new().fg(Color::Red).bold()));
    let mut line1 = vec![state];
    match (s, app.ended()) {
        // The run's figures first, written as the printed report writes them, so that the two
        // read the same: the achieved rate over the send window and its share of the requested.
        (Some(s), true) => {
            let ratio = s.ratio.map(|r| format!(" ({})", pct(r))).unwrap_or_default();
            line1.push(Span::styled(
                format!(" achieved {:.1} {}{ratio} ", s.achieved_pps, s.rate_unit()),
                Style::new().bold(),
            ));
            line1.push(Span::raw("of "));
            line1.push(requested);
            line1.extend(disagree);
            line1.push(Span::raw(format!("in {:.1}s", s.t_s)));
        }
        _ => {
            line1.push(Span::raw(format!(" t={:.1}s ", s.map_or(0.0, |s| s.t_s))));
            line1.push(requested);
            line1.extend(disagree);
            // A tick outside a whole stretch of sending says what the family does instead of
            // a rate (`Snapshot::phase_text`); a partial tick keeps its count and says so.
            match s {
                Some(s) if s.phase == RunPhase::Sending => {
                    let ratio = s.ratio.map(|r| format!(" ({})", pct(r))).unwrap_or_default();
                    line1.push(Span::styled(
                        format!("achieved {} {}{ratio}", rate(s.achieved_pps), s.rate_unit()),
                        Style::new().bold(),
                    ));
                    if s.partial {
                        line1.push(Span::raw(" (partial tick, not judged)"));
                    }
                }
                Some(s) => line1.push(Span::styled(
                    s.phase_text().unwrap_or_default(),
                    Style::new().bold(),
                )),
                None => {}
            }
        }
    }
    line1
}

/// The header's second line: scanprof's own cost, lost probe records, then the family; a
/// status message and missing probes first, as the line is cut at the terminal's width.
pub(super) fn header_cost_line(app: &App) -> Vec<Span<'static>> {
    let s = app.shown.as_ref();
    // scanprof's own cost, first on the second line: its process's CPU and what its probes take
    // of the target's on-CPU time, plain and red above the alert share.
    let mut line2 = Vec::new();
    if let Some(s) = s {
        line2.push(Span::raw(format!("scanprof {:.1}% CPU", s.cost.cpu * 100.0)));
        if let Some(b) = &s.cost.bpf {
            // What the target pays (runs on its threads); the tax on the rest of the machine apart.
            let per_packet = b.target_ns_per_packet.map_or("-".to_string(), dur);
            let share = b.share_of_target.map_or("no share".to_string(), pct);
            let tax = b
                .machine_cpu_share
                .map_or(String::new(), |m| format!(", rest of machine {} CPU", pct(m)));
            let sampled = match b.coverage {
                crate::collect::bpf_time::StatsCoverage::Sampled => format!(
                    " (sampled {:.0}%{})",
                    b.measured_share * 100.0,
                    if b.device_stages_uncounted {
                        ", device stages uncounted"
                    } else {
                        ""
                    }
                ),
                crate::collect::bpf_time::StatsCoverage::Continuous => String::new(),
            };
            line2.push(if b.alert {
                Span::styled(
                    format!(" + PROBES TAKE {share} OF TARGET CPU, {per_packet}/pkt{sampled}{tax}"),
                    Style::new().fg(Color::Red).bold(),
                )
            } else {
                Span::raw(format!(
                    " + probes {per_packet}/pkt = {share} of target CPU{sampled}{tax}"
                ))
            });
        }
        // Records the probes could not hand to scanprof (its ring buffer full), not packets:
        // named for what they are, and only when there are any (beside a funnel with drops,
        // "lost 0" read as packets).
        if s.health.lost_events > 0 {
            line2.push(Span::styled(
                format!(", {} probe records lost", s.health.lost_events),
                Style::new().fg(Color::Red).bold(),
            ));
        }
        line2.push(Span::raw(" | "));
    }
    let attached = app.probes.iter().filter(|p| p.attached).count();
    let family: Vec<String> = app
        .processes
        .iter()
        .map(|p| {
            let role = p.role.as_ref().map(|r| format!("[{r}]")).unwrap_or_default();
            format!(
                "{} {}{role}{}",
                p.pid,
                p.comm,
                if p.alive { "" } else { " (exited)" }
            )
        })
        .collect();
    line2.push(Span::raw(format!("family: {}", family.join(", "))));
    if let Some(status) = &app.status {
        line2.insert(
            0,
            Span::styled(format!("{status}  "), Style::new().fg(Color::Cyan).bold()),
        );
    }
    let missing = app.probes.len() - attached;
    if missing > 0 {
        // Before the cost and the family: the line is cut at the terminal's width.
        line2.insert(
            usize::from(app.status.is_some()),
            Span::styled(
                format!("{missing} probe(s) unavailable: figures degraded  "),
                Style::new().fg(Color::Red).bold(),
            ),
        );
    }
    line2
}

/// The header's third line: the top cause so far with its share, else what the scanner's
/// probes saw.
pub(super) fn header_why_line(app: &App) -> Line<'static> {
    let s = app.shown.as_ref();
    let scanner = s.and_then(|s| s.scanner.as_ref());
    // The diagnosis: the top cause so far, with its share; else what the scanner's probes saw.
    let verdicts = app
        .summary
        .as_ref()
        .map(|x| &x.verdicts)
        .or(s.map(|s| &s.verdicts));
    match verdicts.and_then(|v| v.first()) {
        Some(v) => Line::from(vec![
            Span::styled(
                format!("why: [{} {}] ", v.kind, pct(v.share)),
                Style::new().fg(Color::Magenta).bold(),
            ),
            Span::raw(v.sentence.clone()),
        ]),
        None => match scanner {
            Some(sc) => {
                let mut parts = vec![format!("profile {}", sc.profile)];
                if let Some(c) = sc.calibrations.last() {
                    if let Some(e) = c.error_pct {
                        parts.push(format!("calibration error {e:+.2}%"));
                    }
                }
                if !sc.work_units.is_empty() {
                    parts.push(format!("{} work unit(s)", sc.work_units.len()));
                }
                let hits: u64 = sc.probes.iter().map(|p| p.hits).sum();
                parts.push(format!("{hits} probe hits"));
                Line::from(parts.join(", "))
            }
            None => Line::from(""),
        },
    }
}

/// The header's title: the run's, and once it ended, why, first.
pub(super) fn header_title(app: &App) -> String {
    // Once ended, the panels show the Summary (the printed report's figures), and say so first:
    // a long title is cut at the terminal's width.
    if let Some(sum) = &app.summary {
        let why = match sum.end_reason {
            EndReason::Duration => "duration reached",
            EndReason::FamilyExited => "target exited",
            EndReason::Interrupted => "interrupted",
        };
        format!(" run ended ({why}): summary | scanprof: {} ", app.title)
    } else {
        format!(" scanprof: {} ", app.title)
    }
}

/// A line in at most `width` columns: whole if it fits, else cut with a visible `…` as its
/// last column, each span keeping its style.
fn fit_line(line: Line<'static>, width: usize) -> Line<'static> {
    if line.width() <= width {
        return line;
    }
    let mut left = width.saturating_sub(1);
    let mut spans = Vec::new();
    for span in line.spans {
        if left == 0 {
            break;
        }
        let n = span.content.chars().count();
        if n <= left {
            left -= n;
            spans.push(span);
        } else {
            let head: String = span.content.chars().take(left).collect();
            spans.push(Span::styled(head, span.style));
            left = 0;
        }
    }
    spans.push(Span::raw("…"));
    Line::from(spans).style(line.style)
}

/// The funnel panel's rows: the send stages, then the receive stages when the family receives;
/// a family that only receives (nothing ever passed its send syscalls) sees the receive stages
/// alone.
fn funnel_stages(s: &Snapshot) -> Vec<&Stage> {
    let sent = s.stages.iter().any(|st| st.total > 0);
    let received = s.receive.as_ref().map_or(&[][..], |r| &r.stages[..]);
    let send_rows = if sent || received.is_empty() {
        &s.stages[..]
    } else {
        &[][..]
    };
    send_rows.iter().chain(received).collect()
}

fn draw_funnel(f: &mut Frame, app: &App, area: Rect) {
    let requested = app.shown.as_ref().and_then(|s| s.requested_pps);
    let title = match (requested, app.ended()) {
        (Some(r), false) => format!(" funnel: requested {} pps -> ", rate(r)),
        (Some(r), true) => format!(" funnel (run): requested {} pps ", rate(r)),
        (None, _) => format!(" funnel{} (no requested rate) ", run_mark(app)),
    };
    let mut block = panel_block(app, Panel::Funnel, title);
    let Some(s) = &app.shown else {
        f.render_widget(Paragraph::new("waiting for the first tick...").block(block), area);
        return;
    };
    if let Some(cost) = s.receive.as_ref().and_then(|r| r.cost.as_ref()) {
        block = block.title_bottom(receive_cost_title(cost));
    }
    if let Some(r) = &s.replies {
        block = block.title_bottom(replies_title(r));
    }
    if let Some(d) = &s.device_sampling {
        // short: the funnel panel is ~40 columns at 80x24
        // with auto, the run's figure: exact until sampling began, sampled since
        let after = d.auto.map_or(String::new(), |a| {
            format!(" after {:.1} s", a.exact_ns as f64 / 1e9)
        });
        // counted whole again for a while (auto): that, in place of "scaled", to fit
        let how = if d.whole_ns > 0 {
            format!("{} whole", crate::collect::device_window::span(d.whole_ns))
        } else {
            "scaled".to_string()
        };
        block = block.title_bottom(format!(" ≈ sampled {}{after}, {how} ", pct(d.coverage())));
    }
    // Without the qdisc_enqueue tracepoint (5.10) the dequeues say whether a qdisc queues.
    let seen_at = if s
        .kernel_lacks
        .contains(&crate::analysis::kernel::KernelLack::QdiscEnqueue)
    {
        StageName::QdiscDequeue
    } else {
        StageName::QdiscEnqueue
    };
    let no_qdisc = s.stages.iter().any(|st| st.name == seen_at && st.total == 0);
    let rows = funnel_stages(s).into_iter().map(|st| {
        let unmeasured = st.name == StageName::QdiscEnqueue && seen_at != StageName::QdiscEnqueue;
        let shown = if (no_qdisc && st.name.is_qdisc()) || unmeasured {
            "-".to_string()
        } else {
            rate(st.pps)
        };
        let style = if matches!(st.name, StageName::TargetDrops | StageName::RecvDrops) && st.count > 0 {
            Style::new().fg(Color::Red)
        } else {
            Style::new()
        };
        // a sampled device stage's figures are estimates (the block's foot says how sampled)
        let approx = if s.device_sampling.is_some() && st.name.is_device() && shown != "-" {
            "≈"
        } else {
            ""
        };
        Row::new(vec![
            st.name.to_string(),
            format!("{approx}{shown}"),
            format!("{approx}{}", st.total),
            st.ratio.map(pct).unwrap_or_default(),
        ])
        .style(style)
    });
    let table = Table::new(
        rows,
        [
            Constraint::Length(15),
            Constraint::Length(8),
            Constraint::Length(10),
            Constraint::Length(6),
        ],
    )
    .header(Row::new(vec!["stage", per_second_heading(app), "total", "ratio"]).style(Style::new().bold()))
    .block(block);
    f.render_widget(table, area);
}

/// The funnel's bottom line for the reply funnel: replies arrived per probe and the probes
/// unanswered beyond this host, over the tick (or the run, once ended); the replies alone in a
/// tick without probes (the panel is 43 columns wide).
fn replies_title(r: &crate::analysis::replies::ReplyFunnel) -> String {
    match r.reply_ratio {
        Some(x) => format!(" replies {x:.3}/probe, {} beyond host ", r.beyond_host),
        None => format!(" replies {}, no probe ", r.arrived_total),
    }
}

/// The funnel's bottom line while the family reads: its on-CPU time per packet read and the
/// CPUs a full 10 Gbit/s line of such packets would need at that cost.
fn receive_cost_title(cost: &crate::analysis::ReceiveCost) -> String {
    let us = cost
        .ns_per_packet
        .map_or("-".to_string(), |ns| format!("{:.2}", ns / 1e3));
    let ten = cost
        .capacity
        .as_ref()
        .and_then(|c| c.line_rates.last())
        .map_or(String::new(), |l| format!(", 10G: {:.1} CPUs", l.cpus));
    format!(" read {us} us/pkt{ten} ")
}

fn draw_budget(f: &mut Frame, app: &App, area: Rect) {
    let title = if app.ended() {
        " sender threads' time (run, over their send windows) "
    } else {
        " sender threads' time "
    };
    let block = panel_block(app, Panel::Budget, title.into());
    let Some(s) = &app.shown else {
        f.render_widget(Paragraph::new("").block(block), area);
        return;
    };
    let mut lines = Vec::new();
    let width = area.width.saturating_sub(2) as usize;
    for t in s.threads.iter().take(3) {
        let sh = &t.shares;
        lines.push(Line::from(format!(
            "tid {} {} {} pps",
            t.tid,
            t.comm,
            rate(t.pps)
        )));
        // Cumulative rounding: the segments never add up to more than the width.
        let segments = [
            (sh.send, Color::Green),
            (sh.blocked_send, Color::Red),
            (sh.sleep, Color::Blue),
            (sh.preempted, Color::Yellow),
            (sh.other, Color::Gray),
        ];
        let (mut cum, mut drawn) = (0.0, 0usize);
        let bar: Vec<Span> = segments
            .iter()
            .map(|(v, c)| {
                cum += v;
                let end = ((cum.min(1.0)) * width as f64).round() as usize;
                let n = end.saturating_sub(drawn);
                drawn += n;
                Span::styled("█".repeat(n), Style::new().fg(*c))
            })
            .collect();
        lines.push(Line::from(bar));
        let share = |name: &str, v: f64, c: Color| {
            Span::styled(format!("{name} {:.0}% ", v * 100.0), Style::new().fg(c))
        };
        lines.push(Line::from(vec![
            share("send", sh.send, Color::Green),
            share("blocked", sh.blocked_send, Color::Red),
            share("sleep", sh.sleep, Color::Blue),
            share("preempt", sh.preempted, Color::Yellow),
            share("other", sh.other, Color::Gray),
        ]));
    }
    if s.threads.is_empty() {
        lines.push(Line::from("no sends yet"));
    }
    // Blocks in progress first: a sender stuck for seconds is named while it is stuck.
    for (th, b) in s
        .threads
        .iter()
        .filter_map(|t| t.blocked_now.as_ref().map(|b| (t, b)))
    {
        lines.push(Line::from(Span::styled(
            format!(
                "blocked now in {} for {} (tid {})",
                if b.wait_site.is_empty() { "?" } else { &b.wait_site },
                // A block that has just begun reads in ms, not as "0.00s".
                if b.blocked_s >= 1.0 {
                    format!("{:.2}s", b.blocked_s)
                } else {
                    dur(b.blocked_s * 1e9)
                },
                th.tid
            ),
            Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
        )));
    }
    for b in s.block_sites.iter().take(2) {
        lines.push(Line::from(Span::styled(
            format!(
                "blocked in {} {:.2}s ({})",
                b.wait_site,
                b.blocked_s,
                pct(b.share)
            ),
            Style::new().fg(Color::Red),
        )));
    }
    f.render_widget(Paragraph::new(lines).wrap(Wrap { trim: true }).block(block), area);
}

fn draw_rates(f: &mut Frame, app: &App, area: Rect) {
    let requested = app.shown.as_ref().and_then(|s| s.requested_pps);
    let block = panel_block(app, Panel::Rates, " rates over time (pps) ".into());
    let pts = |sel: fn(&super::app::RatePoint) -> f64| -> Vec<(f64, f64)> {
        app.history.iter().map(|p| (p.t_s, sel(p))).collect()
    };
    let achieved = pts(|p| p.achieved);
    let xmit = pts(|p| p.dev_xmit);
    let drops = pts(|p| p.target_drops);
    let (t0, t1) = (
        app.history.front().map_or(0.0, |p| p.t_s),
        app.history.back().map_or(1.0, |p| p.t_s).max(1.0),
    );
    let req_line: Vec<(f64, f64)> = requested.map(|r| vec![(t0, r), (t1, r)]).unwrap_or_default();
    let data_max = app
        .history
        .iter()
        .flat_map(|p| [p.achieved, p.dev_xmit, p.target_drops])
        .fold(1.0f64, f64::max)
        * 1.1;
    // With a requested rate the axis runs to twice it when the data allow, so that its middle
    // label is the requested rate itself; the legend names it in any case.
    let ymax = match requested {
        Some(r) if data_max <= 2.0 * r => 2.0 * r,
        _ => data_max,
    };
    // Each line has a marker of its own, shown before its name in the legend, so that the
    // lines differ by more than colour (NO_COLOR, a monochrome terminal, colour blindness).
    fn line(name: String, color: Color, marker: Marker, data: &[(f64, f64)]) -> Dataset<'_> {
        let sample = match marker {
            Marker::Dot => "•",
            Marker::Block => "█",
            Marker::Bar => "▄",
            _ => "⣿",
        };
        Dataset::default()
            .name(format!("{sample} {name}"))
            .marker(marker)
            .graph_type(GraphType::Line)
            .style(Style::new().fg(color))
            .data(data)
    }
    // Drawn in order, each over the ones before: the requested line first, the dropped packets
    // last (they were hidden under the requested line).
    let mut sets = Vec::new();
    if let Some(r) = requested {
        sets.push(line(
            format!("requested {}", rate(r)),
            Color::Yellow,
            Marker::Dot,
            &req_line,
        ));
    }
    sets.extend([
        line("achieved".into(), Color::Green, Marker::Braille, &achieved),
        line(StageName::DevXmit.to_string(), Color::Cyan, Marker::Bar, &xmit),
        line("dropped".into(), Color::Red, Marker::Block, &drops),
    ]);
    let chart = Chart::new(sets)
        .block(block)
        // The legend at every size (ratatui hides it below a quarter of the chart by default),
        // top left: over the oldest points, never the newest at the right edge.
        .hidden_legend_constraints((Constraint::Min(0), Constraint::Min(0)))
        .legend_position(Some(ratatui::widgets::LegendPosition::TopLeft))
        .x_axis(
            Axis::default()
                .bounds([t0, t1])
                .labels([format!("{t0:.0}s"), format!("{t1:.0}s")]),
        )
        .y_axis(
            Axis::default()
                .bounds([0.0, ymax])
                .labels(["0".to_string(), rate(ymax / 2.0), rate(ymax)]),
        );
    f.render_widget(chart, area);
}

fn draw_gaps(f: &mut Frame, app: &App, area: Rect) {
    let Some(s) = &app.shown else {
        f.render_widget(panel_block(app, Panel::Gaps, " inter-send gaps ".into()), area);
        return;
    };
    let g = &s.gap;
    let title = format!(
        " gaps{}: mean {} p99 {}{} ",
        run_mark(app),
        g.mean_ns.map(dur).unwrap_or("-".into()),
        g.p99_ns.map(dur).unwrap_or("-".into()),
        g.slot_ns.map(|v| format!(" slot {}", dur(v))).unwrap_or_default()
    );
    let block = panel_block(app, Panel::Gaps, title);
    let bars: Vec<Bar> = gap_bins(s, (area.width.saturating_sub(2) / 6).max(1) as usize)
        .into_iter()
        .map(|(label, n, at_slot)| {
            Bar::default()
                .value(n)
                .text_value(if n > 0 { count_label(n) } else { String::new() })
                .label(Line::from(label))
                .style(if at_slot {
                    Style::new().fg(Color::Yellow)
                } else {
                    Style::new().fg(Color::Cyan)
                })
        })
        .collect();
    f.render_widget(
        BarChart::default()
            .block(block)
            .bar_width(5)
            .bar_gap(1)
            .data(BarGroup::default().bars(&bars)),
        area,
    );
}

/// The gap histogram on a log axis of `n` bars of equal ratio, from the shortest gap (or the
/// slot) to the longest (or the slot): each bar holds the buckets that start in its range, an
/// empty range stays an empty bar in its place, and the slot always has its bar.
/// Returns (label: the bar's lower bound, count, bar holds the slot).
pub fn gap_bins(s: &Snapshot, n: usize) -> Vec<(String, u64, bool)> {
    let h = &s.gap.histogram;
    if h.is_empty() || n == 0 {
        return Vec::new();
    }
    let slot = s.gap.slot_ns.filter(|v| v.is_finite() && *v >= 1.0);
    let lo = slot.map_or(h[0].0 as f64, |v| v.min(h[0].0 as f64)).max(1.0);
    let hi = slot
        .map_or(h[h.len() - 1].1 as f64, |v| v.max(h[h.len() - 1].1 as f64))
        .max(lo * 1.01);
    let step = (hi.ln() - lo.ln()) / n as f64;
    // The first edge is the shortest gap itself, not exp(ln(x)) of it, which can land below.
    let edge = |i: usize| {
        if i == 0 {
            lo
        } else {
            (lo.ln() + i as f64 * step).exp()
        }
    };
    let bar_of = |v: f64| {
        (((v.max(lo)).ln() - lo.ln()) / step)
            .floor()
            .clamp(0.0, (n - 1) as f64) as usize
    };
    let mut counts = vec![0u64; n];
    for (low, _, count) in h {
        counts[bar_of(*low as f64)] += count;
    }
    let slot_bar = slot.map(bar_of);
    counts
        .into_iter()
        .enumerate()
        .map(|(i, count)| (dur_label(edge(i)), count, slot_bar == Some(i)))
        .collect()
}

fn draw_drops(f: &mut Frame, app: &App, area: Rect) {
    let rows = app.drop_rows();
    let mut title = format!(
        " drops ({}{} rows, sort: {}",
        if app.ended() { "run, " } else { "" },
        rows.len(),
        app.sort.map_or("count", |s| s.name())
    );
    if !app.filter.is_empty() || app.filtering {
        title += &format!(", filter: {}{}", app.filter, if app.filtering { "_" } else { "" });
    }
    title += ") ";
    let block = panel_block(app, Panel::Drops, title);
    let layout = DropColumns::fit(
        &rows,
        area.width.saturating_sub(2) as usize,
        per_second_heading(app),
    );
    let table_rows = rows.iter().skip(app.scroll).map(|d| {
        let style = match d.class {
            DropClass::TargetLoss => Style::new().fg(Color::Red).bold(),
            DropClass::ReplyLoss => Style::new().fg(Color::Magenta),
            DropClass::Expected | DropClass::ReplySide => Style::new().fg(Color::Gray),
            DropClass::Unrelated => Style::new().add_modifier(Modifier::DIM),
        };
        Row::new(layout.cells(d)).style(style)
    });
    let widths: Vec<Constraint> = layout
        .columns
        .iter()
        .map(|(col, w)| match col {
            DropColumn::Location => Constraint::Min(*w as u16),
            _ => Constraint::Length(*w as u16),
        })
        .collect();
    let header: Vec<&str> = layout
        .columns
        .iter()
        .map(|(c, _)| c.heading(layout.rate_heading))
        .collect();
    let table = Table::new(table_rows, widths)
        .header(Row::new(header).style(Style::new().bold()))
        .block(block);
    f.render_widget(table, area);
}

/// The drop table's columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DropColumn {
    Class,
    Reason,
    Location,
    Device,
    /// only when the rows span several network namespaces
    Netns,
    /// only where there is room
    Pid,
    Total,
    Rate,
}

impl DropColumn {
    fn heading(self, rate: &'static str) -> &'static str {
        match self {
            DropColumn::Class => "class",
            DropColumn::Reason => "reason",
            DropColumn::Location => "location",
            DropColumn::Device => "device",
            DropColumn::Netns => "netns",
            DropColumn::Pid => "pid",
            DropColumn::Total => "total",
            DropColumn::Rate => rate,
        }
    }
}

/// Narrowest a location gets before the device and reason give up columns to it.
const LOCATION_MIN: usize = 16;
/// Narrowest an elided reason or device gets.
const NAME_MIN: usize = 6;
/// Narrowest a reason or device gets for a location to be whole (`NO_SOCKET`, `spv7503-0t`).
const NAME_KEPT: usize = 10;

/// The drop table's columns and widths for a panel `inner` columns wide: numbers (count, rate,
/// namespace, pid) always whole, so their columns are as wide as their longest value; names
/// (reason, device) as wide as theirs up to a cap, elided visibly below it; the location takes
/// the rest. Widths come from every row, not only those scrolled into view, so that columns do
/// not move while scrolling.
struct DropColumns {
    columns: Vec<(DropColumn, usize)>,
    rate_heading: &'static str,
}

impl DropColumns {
    fn fit(rows: &[&DropRow], inner: usize, rate_heading: &'static str) -> DropColumns {
        let widest = |col: DropColumn, cap: usize| {
            rows.iter()
                .map(|d| DropColumns::text(col, d).chars().count())
                .max()
                .unwrap_or(0)
                .max(col.heading(rate_heading).len())
                .min(cap)
        };
        let several_ns = rows.iter().any(|d| d.netns != rows[0].netns);
        let mut columns = vec![
            (DropColumn::Class, widest(DropColumn::Class, 11)),
            (DropColumn::Reason, widest(DropColumn::Reason, 22)),
            (DropColumn::Location, 0),
            (DropColumn::Device, widest(DropColumn::Device, 15)),
        ];
        if several_ns {
            columns.push((DropColumn::Netns, widest(DropColumn::Netns, usize::MAX)));
        }
        let pid = (DropColumn::Pid, widest(DropColumn::Pid, usize::MAX));
        // Counts grow during a run: room for seven digits from the start keeps the columns
        // from moving at every tick.
        columns.push((DropColumn::Total, widest(DropColumn::Total, usize::MAX).max(7)));
        columns.push((DropColumn::Rate, widest(DropColumn::Rate, usize::MAX).max(7)));
        let location_want = widest(DropColumn::Location, usize::MAX);
        // Columns but the location, with one space between each two.
        let used = |cols: &[(DropColumn, usize)]| -> usize {
            cols.iter().map(|(_, w)| w).sum::<usize>() + cols.len().saturating_sub(1)
        };
        // The pid where the location keeps its whole width (or a comfortable one) beside it.
        let mut with_pid = columns.clone();
        with_pid.insert(with_pid.len() - 2, pid);
        if inner.saturating_sub(used(&with_pid)) >= location_want.min(24) {
            columns = with_pid;
        }
        // Short of room: the widest of the reason and the device gives up a column at a time,
        // first down to NAME_KEPT for the location to be whole, then to NAME_MIN for it to
        // reach LOCATION_MIN.
        for (location_needs, floor) in [(location_want, NAME_KEPT), (LOCATION_MIN, NAME_MIN)] {
            while inner.saturating_sub(used(&columns)) < location_needs {
                let widest = columns
                    .iter_mut()
                    .filter(|(c, w)| matches!(c, DropColumn::Reason | DropColumn::Device) && *w > floor)
                    .max_by_key(|(_, w)| *w);
                match widest {
                    Some((_, w)) => *w -= 1,
                    None => break,
                }
            }
        }
        let location = inner.saturating_sub(used(&columns)).max(8);
        if let Some(loc) = columns.iter_mut().find(|(c, _)| *c == DropColumn::Location) {
            loc.1 = location;
        }
        DropColumns {
            columns,
            rate_heading,
        }
    }

    /// Columns the table takes with every cell whole (the pid left out), borders excluded.
    fn natural_width(rows: &[&DropRow], rate_heading: &'static str) -> usize {
        let fitted = DropColumns::fit(rows, usize::MAX / 2, rate_heading);
        let location = rows
            .iter()
            .map(|d| d.location.chars().count())
            .max()
            .unwrap_or(0)
            .max("location".len());
        fitted
            .columns
            .iter()
            .filter(|(c, _)| *c != DropColumn::Pid)
            .map(|(c, w)| if *c == DropColumn::Location { location } else { *w })
            .sum::<usize>()
            + fitted.columns.len().saturating_sub(2)
    }

    /// A cell's whole text.
    fn text(col: DropColumn, d: &DropRow) -> String {
        match col {
            DropColumn::Class => d.class.name().to_string(),
            DropColumn::Reason => d.reason.clone(),
            DropColumn::Location => d.location.clone(),
            DropColumn::Device => d.device.clone().unwrap_or_else(|| "-".into()),
            DropColumn::Netns => d.netns.to_string(),
            DropColumn::Pid => d.pid.map_or_else(|| "-".into(), |p| p.to_string()),
            DropColumn::Total => d.count.to_string(),
            DropColumn::Rate => rate(d.rate),
        }
    }

    /// A row's cells, each within its column: names elided visibly, numbers whole.
    fn cells(&self, d: &DropRow) -> Vec<String> {
        self.columns
            .iter()
            .map(|(col, w)| {
                let text = DropColumns::text(*col, d);
                match col {
                    DropColumn::Location => elide_location(&text, *w),
                    DropColumn::Class | DropColumn::Reason | DropColumn::Device => elide(&text, *w),
                    _ => text,
                }
            })
            .collect()
    }
}

/// `text` in at most `width` columns: whole if it fits, else cut with a visible `…`.
fn elide(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_string();
    }
    let head: String = text.chars().take(width.saturating_sub(1)).collect();
    format!("{head}…")
}

/// A drop location (`function+0xoffset`) in at most `width` columns: whole if it fits, else the
/// function's name cut with `…` before its offset (`__dev_que…+0xd01`), so that a shortened
/// location never reads as another valid one.
pub fn elide_location(loc: &str, width: usize) -> String {
    let len = loc.chars().count();
    if len <= width {
        return loc.to_string();
    }
    let (func, offset) = match loc.rfind('+') {
        Some(i) => (&loc[..i], &loc[i..]),
        None => (loc, ""),
    };
    let keep = width.saturating_sub(offset.chars().count() + 1);
    if keep == 0 {
        // Not even the offset fits beside an ellipsis: the start of the name, marked cut.
        let head: String = loc.chars().take(width.saturating_sub(1)).collect();
        return format!("{head}…");
    }
    let head: String = func.chars().take(keep).collect();
    format!("{head}…{offset}")
}

/// Rows `text` takes when wrapped at word boundaries into `width` columns (as `Wrap` does; a
/// word longer than the width is cut across rows).
fn wrapped_rows(text: &str, width: usize) -> usize {
    let (mut rows, mut used) = (1, 0);
    for word in text.split(' ') {
        let len = word.chars().count();
        let need = if used == 0 { len } else { used + 1 + len };
        if need <= width {
            used = need;
        } else if used == 0 {
            rows += (len - 1) / width;
            used = (len - 1) % width + 1;
        } else {
            rows += 1 + len.saturating_sub(1) / width;
            used = if len == 0 { 0 } else { (len - 1) % width + 1 };
        }
    }
    rows
}

fn draw_help(f: &mut Frame, area: Rect) {
    let mut lines: Vec<Line> = std::iter::once(&HELP)
        .chain(BINDINGS.iter())
        .map(|b| Line::from(format!("{:>6}  {}", b.label, b.help)))
        .collect();
    lines.push(Line::from(format!(
        "{:>6}  close this help (so do ? and q)",
        "Esc"
    )));
    let w = 72.min(area.width);
    // Every wrapped row counts, so that the last line is not cut.
    let inner = w.saturating_sub(2).max(1) as usize;
    let rows: usize = lines.iter().map(|l| wrapped_rows(&l.to_string(), inner)).sum();
    let h = (rows as u16 + 2).min(area.height);
    let popup = Rect::new(
        area.x + (area.width - w) / 2,
        area.y + (area.height - h) / 2,
        w,
        h,
    );
    f.render_widget(Clear, popup);
    f.render_widget(
        Paragraph::new(lines)
            .wrap(Wrap { trim: false })
            .block(Block::bordered().title(" keys ")),
        popup,
    );
}
