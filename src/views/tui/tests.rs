//! The terminal view through ratatui's TestBackend: committed screen snapshots of the full, empty
//! and degraded states, every panel zoomed, tiny terminals, and the App's key handling.
//! `UPDATE_SNAPSHOTS=1 cargo test --lib views::tui` rewrites tests/snapshots/tui_*.txt after an
//! intended change; review the diff before committing it.

use ratatui::backend::TestBackend;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::Terminal;

use super::app::{App, DropSort, Outcome, Panel};
use super::draw::{draw, header_cost_line, header_rate_line, header_title, header_why_line};
use super::keys::{footer, BINDINGS};
use crate::analysis::{DropRow, EndReason};
use crate::collect::DropClass;
use crate::probes::ProbeStatus;
use crate::session::Update;
use crate::views::fixtures::{rich_run, rich_ticks};

fn key(c: KeyCode) -> KeyEvent {
    KeyEvent::new(c, KeyModifiers::NONE)
}

fn probes(missing: bool) -> Vec<ProbeStatus> {
    let mut p = vec![ProbeStatus {
        name: "drops.on_kfree_skb".into(),
        attached: true,
        error: None,
    }];
    if missing {
        p.push(ProbeStatus {
            name: "netdev.on_qdisc_enqueue".into(),
            attached: false,
            error: Some("ENOENT".into()),
        });
    }
    p
}

/// An App fed a Started update and the fixture's ticks.
fn live_app(missing_probe: bool) -> App {
    let (ticks, _) = rich_ticks();
    let mut app = App::new("run sender --rate 100".into());
    app.apply(Update::Started {
        processes: ticks[0].processes.clone(),
        probes: probes(missing_probe),
        clocks: Default::default(),
    });
    for t in ticks {
        app.apply(Update::Tick(Box::new(t)));
    }
    app
}

/// An App fed one tick of the fixture whose drop rows are `drops`.
fn app_with_tick_drops(drops: Vec<DropRow>) -> App {
    let mut tick = rich_ticks().0.remove(0);
    tick.drops = drops;
    let mut app = App::new("run sender --rate 100".into());
    app.apply(Update::Tick(Box::new(tick)));
    app
}

/// The drop table adds up the ticks' drops: a sample carries only its own tick's, and a row
/// that dropped nothing in the newest tick stays with its total and a rate of 0.
#[test]
fn the_drop_table_adds_up_the_ticks() {
    let mut app = App::new("run".into());
    let (ticks, _) = rich_ticks();
    let mut first = ticks[0].clone();
    first.drops = vec![
        row(
            "QDISC_DROP",
            "__dev_queue_xmit+0x1",
            DropClass::TargetLoss,
            10,
            10.0,
        ),
        row("NO_SOCKET", "__udp4_lib_rcv+0x1", DropClass::Expected, 4, 4.0),
    ];
    let mut second = ticks[1].clone();
    second.drops = vec![row(
        "QDISC_DROP",
        "__dev_queue_xmit+0x1",
        DropClass::TargetLoss,
        5,
        5.0,
    )];
    app.apply(Update::Tick(Box::new(first)));
    app.apply(Update::Tick(Box::new(second.clone())));
    let table = |app: &App| {
        app.drop_rows()
            .iter()
            .map(|d| (d.reason.clone(), d.count, d.rate))
            .collect::<Vec<_>>()
    };
    let after_two = vec![
        ("QDISC_DROP".to_string(), 15, 5.0),
        ("NO_SOCKET".to_string(), 4, 0.0),
    ];
    assert_eq!(table(&app), after_two);
    // Paused, the table stays as of the tick on screen; on resume it catches up.
    app.on_key(key(KeyCode::Char('p')));
    app.apply(Update::Tick(Box::new(second)));
    assert_eq!(table(&app), after_two);
    app.on_key(key(KeyCode::Char('p')));
    assert_eq!(table(&app)[0], ("QDISC_DROP".to_string(), 20, 5.0));
}

/// The screen as text, one line per row.
fn screen(app: &App, w: u16, h: u16) -> String {
    let mut term = Terminal::new(TestBackend::new(w, h)).unwrap();
    term.draw(|f| draw(f, app)).unwrap();
    buffer_text(term.backend().buffer(), w, h)
}

/// A drawn buffer as text, one line per row, trailing spaces cut.
fn buffer_text(buf: &ratatui::buffer::Buffer, w: u16, h: u16) -> String {
    (0..h)
        .map(|y| {
            (0..w)
                .map(|x| buf[(x, y)].symbol().to_string())
                .collect::<String>()
                .trim_end()
                .to_string()
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

fn assert_snapshot(name: &str, text: &str) {
    let path = format!("{}/tests/snapshots/{name}.txt", env!("CARGO_MANIFEST_DIR"));
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(&path, text).unwrap();
    }
    let want =
        std::fs::read_to_string(&path).unwrap_or_else(|_| panic!("{path} missing: UPDATE_SNAPSHOTS=1"));
    assert_eq!(text, want, "screen differs from {path}");
}

#[test]
fn full_view_at_80x24_shows_rates_funnel_and_drop_location() {
    let s = screen(&live_app(false), 80, 24);
    for want in [
        "requested 100.0 pps",
        "achieved 100.0 pps (100.0%)",
        "syscall_packets",
        "QDISC_DROP",
        "__dev_queue_xmit+0x1",
        "target_loss",
    ] {
        assert!(s.contains(want), "missing {want:?} in\n{s}");
    }
    assert_snapshot("tui_80x24", &s);
}

#[test]
fn full_view_at_120x40() {
    let s = screen(&live_app(false), 120, 40);
    assert!(s.contains("sock_alloc_send_pskb"), "{s}");
    assert_snapshot("tui_120x40", &s);
}

#[test]
fn empty_state_before_the_first_tick() {
    let mut app = App::new("attach [42]".into());
    app.apply(Update::Started {
        processes: vec![],
        probes: probes(false),
        clocks: Default::default(),
    });
    let s = screen(&app, 80, 24);
    assert!(s.contains("waiting for the first tick"), "{s}");
    assert!(s.contains("requested: unknown"), "{s}");
    assert_snapshot("tui_empty", &s);
}

#[test]
fn degraded_state_names_the_missing_probes() {
    let s = screen(&live_app(true), 100, 24);
    assert!(s.contains("1 probe(s) unavailable"), "{s}");
    assert!(!screen(&live_app(false), 100, 24).contains("unavailable"));
}

#[test]
fn tiny_terminals_do_not_panic() {
    let mut app = live_app(true);
    for (w, h) in [(1, 1), (2, 2), (10, 3), (20, 5), (40, 10), (79, 23), (300, 5)] {
        screen(&app, w, h);
        app.help = true;
        screen(&app, w, h);
        app.help = false;
    }
}

#[test]
fn each_panel_zoomed_fills_the_body() {
    let mut app = live_app(false);
    app.on_key(key(KeyCode::Char('z')));
    let titles = [
        "funnel",
        "sender threads' time",
        "rates over time",
        "gaps: mean",
        "drops (",
    ];
    for (panel, title) in Panel::ALL.iter().zip(titles) {
        app.focus = Some(*panel);
        let s = screen(&app, 80, 24);
        assert!(s.contains(title), "{panel:?} zoomed:\n{s}");
        // Zoomed, no other panel's title is on screen.
        for other in titles.iter().filter(|t| **t != title) {
            assert!(
                !s.contains(other),
                "{other:?} visible while {panel:?} is zoomed:\n{s}"
            );
        }
    }
}

#[test]
fn footer_and_help_come_from_the_key_table() {
    // Every key in the footer at every size: at 80 columns it read `... s sor`, without f, z
    // and e.
    for w in [80u16, 120, 200] {
        let foot = footer(w as usize);
        assert!(foot.chars().count() <= w as usize, "{w}: {foot}");
        for b in &BINDINGS {
            assert!(
                foot.split_whitespace().any(|word| word == b.label),
                "footer at {w} lacks {}: {foot}",
                b.label
            );
        }
        let last = screen(&live_app(false), w, 24)
            .lines()
            .last()
            .unwrap_or("")
            .to_string();
        assert_eq!(last, foot.trim_end(), "{w}");
    }
    assert_eq!(footer(80), "? keys  q p Tab S-Tab Up Down s f z e");
    let mut app = live_app(false);
    app.on_key(key(KeyCode::Char('?')));
    let s = screen(&app, 100, 30);
    for b in &BINDINGS {
        assert!(
            s.contains(b.help.split('(').next().unwrap().trim()),
            "help lacks {:?}\n{s}",
            b.help
        );
    }
}

/// The text of a header line's spans.
fn spans_text(spans: &[ratatui::text::Span]) -> String {
    spans.iter().map(|s| s.content.as_ref()).collect()
}

/// The header's three lines and its title, each drawn alone: live, the state, the requested
/// rate with its source and the tick's achieved rate; a missing probe first on the cost line,
/// before the family; the top verdict; once ended, the run's figures and why it ended.
#[test]
fn the_headers_lines_and_title_each_say_their_part() {
    let mut app = live_app(true);
    let rates = spans_text(&header_rate_line(&app));
    assert!(rates.starts_with(" LIVE  t="), "{rates}");
    assert!(rates.contains("requested "), "{rates}");
    let cost = spans_text(&header_cost_line(&app));
    assert!(
        cost.starts_with("1 probe(s) unavailable: figures degraded  scanprof "),
        "{cost}"
    );
    assert!(cost.contains(" | family: "), "{cost}");
    assert!(!spans_text(&header_cost_line(&live_app(false))).contains("unavailable"));
    let why = spans_text(&header_why_line(&app).spans);
    let shown = app.shown.as_ref().unwrap();
    match shown.verdicts.first() {
        Some(v) => assert!(why.starts_with("why: [") && why.ends_with(&v.sentence), "{why}"),
        None => assert!(!why.starts_with("why:"), "{why}"),
    }
    assert_eq!(header_title(&app), " scanprof: run sender --rate 100 ");

    let (_, summary) = rich_run();
    let achieved = format!(" achieved {:.1} ", summary.achieved_pps);
    app.apply(Update::Done(Box::new(summary)));
    let rates = spans_text(&header_rate_line(&app));
    assert!(rates.starts_with(" ENDED "), "{rates}");
    assert!(rates.contains(&achieved), "{rates} vs {achieved}");
    assert_eq!(
        header_title(&app),
        " run ended (duration reached): summary | scanprof: run sender --rate 100 "
    );
}

#[test]
fn ended_run_stays_on_screen_with_its_reason() {
    let (_, summary) = rich_run();
    let mut app = live_app(false);
    assert_eq!(summary.end_reason, EndReason::Duration);
    app.apply(Update::Done(Box::new(summary)));
    let s = screen(&app, 80, 24);
    assert!(s.contains("run ended (duration reached): summary"), "{s}");
    assert!(s.contains("QDISC_DROP"), "final state kept:\n{s}");
}

#[test]
fn pause_freezes_the_display_and_resume_catches_up() {
    let (snap, _) = rich_run();
    let mut app = live_app(false);
    app.on_key(key(KeyCode::Char('p')));
    let mut later = snap.clone();
    later.tick = 99;
    app.apply(Update::Tick(Box::new(later)));
    assert_eq!(
        app.shown.as_ref().unwrap().tick,
        snap.tick,
        "paused display changed"
    );
    assert_eq!(app.history.len(), 4, "collection goes on while paused");
    app.on_key(key(KeyCode::Char('p')));
    assert_eq!(app.shown.as_ref().unwrap().tick, 99);
}

#[test]
fn quit_and_ctrl_c_stop_the_run() {
    let mut app = live_app(false);
    assert_eq!(app.on_key(key(KeyCode::Char('x'))), Outcome::Continue);
    assert_eq!(
        app.on_key(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL)),
        Outcome::Stop
    );
    let mut app = live_app(false);
    assert_eq!(app.on_key(key(KeyCode::Char('q'))), Outcome::Stop);
    assert!(app.quitting);
    assert!(screen(&app, 80, 24).contains("ENDING"));
}

fn row(reason: &str, location: &str, class: DropClass, count: u64, rate: f64) -> DropRow {
    DropRow {
        reason: reason.into(),
        location: location.into(),
        device: None,
        netns: 0,
        class,
        pid: None,
        count,
        rate,
    }
}

#[test]
fn sort_cycles_and_filter_narrows_the_drop_table() {
    let mut app = app_with_tick_drops(vec![
        row("NO_SOCKET", "__udp4_lib_rcv+0x1", DropClass::Expected, 50, 1.0),
        row(
            "QDISC_DROP",
            "__dev_queue_xmit+0x1",
            DropClass::TargetLoss,
            10,
            9.0,
        ),
        row("NOT_SPECIFIED", "a_func+0x1", DropClass::Unrelated, 30, 5.0),
    ]);
    let reasons = |app: &App| {
        app.drop_rows()
            .iter()
            .map(|d| d.reason.clone())
            .collect::<Vec<_>>()
    };
    // The family's rows first in every order, other processes' (unrelated) after them: at
    // 80x24 the first row is all the table shows.
    assert_eq!(
        reasons(&app),
        ["NO_SOCKET", "QDISC_DROP", "NOT_SPECIFIED"],
        "by count"
    );
    app.on_key(key(KeyCode::Char('s')));
    assert_eq!(app.sort, Some(DropSort::Rate));
    assert_eq!(
        reasons(&app),
        ["QDISC_DROP", "NO_SOCKET", "NOT_SPECIFIED"],
        "by rate"
    );
    app.on_key(key(KeyCode::Char('s')));
    assert_eq!(
        reasons(&app),
        ["NO_SOCKET", "QDISC_DROP", "NOT_SPECIFIED"],
        "by reason"
    );
    app.on_key(key(KeyCode::Char('s')));
    app.on_key(key(KeyCode::Char('s')));
    assert_eq!(
        reasons(&app),
        ["QDISC_DROP", "NO_SOCKET", "NOT_SPECIFIED"],
        "by class"
    );

    app.on_key(key(KeyCode::Char('f')));
    assert_eq!(app.focus, Some(Panel::Drops));
    for c in "udp".chars() {
        app.on_key(key(KeyCode::Char(c)));
    }
    // While typing, keys are text: 's' and 'q' do not act.
    assert_eq!(app.on_key(key(KeyCode::Char('q'))), Outcome::Continue);
    app.on_key(key(KeyCode::Backspace));
    assert_eq!(reasons(&app), ["NO_SOCKET"]);
    app.on_key(key(KeyCode::Enter));
    assert!(screen(&app, 100, 30).contains("filter: udp"));
    app.on_key(key(KeyCode::Char('f')));
    app.on_key(key(KeyCode::Esc));
    assert_eq!(reasons(&app).len(), 3, "Esc clears the filter");
}

#[test]
fn tab_and_arrows_move_focus_in_order_and_wrap() {
    let mut app = live_app(false);
    let mut seen = vec![app.focus.unwrap()];
    for _ in 0..6 {
        app.on_key(key(KeyCode::Tab));
        seen.push(app.focus.unwrap());
    }
    assert_eq!(
        seen,
        [
            Panel::Funnel,
            Panel::Budget,
            Panel::Rates,
            Panel::Gaps,
            Panel::Drops,
            Panel::Diagnosis,
            Panel::Funnel
        ]
    );
    app.on_key(key(KeyCode::BackTab));
    assert_eq!(app.focus, Some(Panel::Diagnosis));
    app.on_key(key(KeyCode::Right));
    assert_eq!(app.focus, Some(Panel::Funnel));
}

#[test]
fn history_is_bounded() {
    let (snap, _) = rich_run();
    let mut app = App::new(String::new());
    for _ in 0..700 {
        app.apply(Update::Tick(Box::new(snap.clone())));
    }
    assert_eq!(app.history.len(), 600);
}

#[test]
fn gap_labels_are_formatted_from_their_values() {
    // A single bar at 1.05 ms read `15ms` when ".0" was cut out of its text (issue 20).
    let mut s = rich_ticks().0.pop().expect("a tick");
    for (lo, want) in [
        (1_050_000u64, "1.1ms"),
        (109_050_000, "109ms"),
        (15_000_000, "15ms"),
        (2_000, "2us"),
        (31_460, "31us"),
        (11_300, "11us"),
        (999_600, "999us"),
        (900, "900ns"),
    ] {
        s.gap.histogram = vec![(lo, lo + 1, 5)];
        s.gap.slot_ns = None;
        let bins = super::draw::gap_bins(&s, 1);
        assert_eq!(bins[0].0, want, "bar starting at {lo} ns");
        assert!(bins[0].0.chars().count() <= 5, "{want} does not fit its bar");
    }
}

#[test]
fn help_shows_every_key_and_closes_with_esc_q_or_question_mark() {
    for (w, h) in [(80, 24), (120, 40)] {
        let mut app = live_app(false);
        app.on_key(key(KeyCode::Char('?')));
        assert!(app.help);
        let s = screen(&app, w, h);
        // The last binding and the closing line are on screen, not cut.
        for want in [
            "show / hide this help",
            "export a trace bundle",
            "close this help",
        ] {
            assert!(s.contains(want), "{w}x{h}: missing {want:?} in\n{s}");
        }
        assert_snapshot(&format!("tui_help_{w}x{h}"), &s);
        // `q` in the help closes it and the run goes on.
        assert_eq!(app.on_key(key(KeyCode::Char('q'))), Outcome::Continue);
        assert!(!app.help && !app.quitting);
        app.on_key(key(KeyCode::Char('?')));
        app.on_key(key(KeyCode::Esc));
        assert!(!app.help);
        app.on_key(key(KeyCode::Char('?')));
        app.on_key(key(KeyCode::Char('?')));
        assert!(!app.help);
        // Outside the help, q still ends the run.
        assert_eq!(app.on_key(key(KeyCode::Char('q'))), Outcome::Stop);
    }
}

#[test]
fn below_the_minimum_size_the_view_says_so() {
    let s = screen(&live_app(false), 79, 23);
    assert!(s.contains("terminal too small (79x23)"), "{s}");
    assert!(s.contains("at least 80x24"), "{s}");
    assert!(!screen(&live_app(false), 80, 24).contains("too small"));
}

#[test]
fn long_drop_locations_are_elided_visibly_keeping_their_offset() {
    use super::draw::elide_location;
    assert_eq!(
        elide_location("__dev_queue_xmit+0xd01", 40),
        "__dev_queue_xmit+0xd01"
    );
    assert_eq!(elide_location("__dev_queue_xmit+0xd01", 16), "__dev_que…+0xd01");
    assert_eq!(elide_location("__dev_queue_xmit+0xd01", 16).chars().count(), 16);
    assert_eq!(elide_location("no_offset_function_name", 10), "no_offset…");
    // On screen, at each size: the location is whole or elided, never cut to `+0xd`.
    for (w, h) in [(80, 24), (120, 40)] {
        let mut drops = rich_ticks().0[0].drops.clone();
        drops[0].location = "__dev_queue_xmit_nit_with_a_long_name+0xd01".into();
        let app = app_with_tick_drops(drops);
        let screen = screen(&app, w, h);
        let row = screen
            .lines()
            .find(|l| l.starts_with("│target_loss") && l.contains("QDISC_DROP"))
            .unwrap_or_else(|| panic!("{w}x{h}: no drop row in\n{screen}"));
        assert!(row.contains("…+0xd01"), "{w}x{h}: {row}");
    }
}

#[test]
fn the_gap_histogram_keeps_empty_ranges_in_place_and_always_shows_the_slot() {
    let mut s = rich_ticks().0.pop().expect("a tick");
    // Gaps at 7 us and 31 ms only, slot 1 ms (no gap there): a log axis from 7 us to 31 ms.
    s.gap.histogram = vec![(7_000, 7_900, 40), (31_000_000, 33_000_000, 13)];
    s.gap.slot_ns = Some(1_000_000.0);
    let bins = super::draw::gap_bins(&s, 10);
    assert_eq!(bins.len(), 10);
    assert_eq!(bins[0].1, 40, "{bins:?}");
    assert_eq!(bins[9].1, 13, "{bins:?}");
    // Between them the empty decades keep their bars (they were merged side by side before).
    assert!(bins[1..9].iter().all(|b| b.1 == 0), "{bins:?}");
    // The slot's bar is marked although it holds no gap; labels rise along the axis.
    let slot: Vec<_> = bins.iter().filter(|b| b.2).collect();
    assert_eq!(slot.len(), 1, "{bins:?}");
    assert_eq!(slot[0].1, 0);
    assert_eq!(bins[0].0, "7us");
    assert!(bins.iter().all(|b| b.0.chars().count() <= 5), "{bins:?}");
    let screen = screen(
        &{
            let mut app = live_app(false);
            app.shown = Some(s.clone());
            app
        },
        120,
        40,
    );
    assert!(screen.contains("40"), "the counts are drawn:\n{screen}");
}

/// A view of `run sender --rate 100` that has had its Started update (probes all attached).
fn started(ticks: &[crate::analysis::Snapshot]) -> App {
    let mut app = App::new("run sender --rate 100".into());
    app.apply(Update::Started {
        processes: ticks[0].processes.clone(),
        probes: probes(false),
        clocks: Default::default(),
    });
    app
}

#[test]
fn probes_above_the_alert_share_are_called_out_in_red_in_the_header() {
    let (mut ticks, _) = rich_ticks();
    let mut app = started(&ticks);
    let mut last = ticks.pop().expect("three ticks");
    let plain = {
        let mut a = App::new("run sender --rate 100".into());
        a.apply(Update::Tick(Box::new(last.clone())));
        screen(&a, 120, 40)
    };
    assert!(
        plain.contains("+ probes 700ns/pkt = 0.0% of target CPU (sampled 10%), rest of machine 0.0% CPU"),
        "{plain}"
    );
    assert!(!plain.contains("PROBES TAKE"), "{plain}");
    let b = last.cost.bpf.as_mut().expect("the fixture measures the probes");
    b.share_of_target = Some(0.123);
    b.alert = true;
    app.apply(Update::Tick(Box::new(last)));
    let mut term = Terminal::new(TestBackend::new(120, 40)).unwrap();
    term.draw(|f| draw(f, &app)).unwrap();
    let buf = term.backend().buffer().clone();
    let row: String = (0..120).map(|x| buf[(x, 2)].symbol().to_string()).collect();
    let at = row.find("PROBES TAKE 12.3% OF TARGET CPU, 700ns/pkt (sampled 10%)");
    assert!(at.is_some(), "{row}");
    let x = row[..at.unwrap()].chars().count() as u16;
    assert_eq!(buf[(x, 2)].fg, ratatui::style::Color::Red, "{row}");
}

#[test]
fn when_the_run_ends_every_panel_shows_the_summary_not_the_last_partial_tick() {
    // The last tick is partial: it read "achieved 0.0 pps (0.0%)" and "no sends yet" after a
    // run that sent, or 75.9% while the report said 100%.
    let (mut ticks, summary) = rich_ticks();
    let mut app = started(&ticks);
    let mut partial = ticks.pop().expect("a tick");
    partial.achieved_pps = 0.0;
    partial.ratio = Some(0.0);
    partial.threads.clear();
    partial.drops.clear();
    for st in &mut partial.stages {
        st.pps = 0.0;
        st.ratio = Some(0.0);
    }
    for t in ticks {
        app.apply(Update::Tick(Box::new(t)));
    }
    app.apply(Update::Tick(Box::new(partial)));
    assert!(screen(&app, 80, 24).contains("achieved 0.0 pps (0.0%)"));
    // Paused at the end: the summary shows all the same.
    app.on_key(key(KeyCode::Char('p')));
    app.apply(Update::Done(Box::new(summary.clone())));
    assert!(summary.packets > 0 && summary.achieved_pps > 0.0);

    let ratio = summary.ratio.expect("a requested rate");
    let achieved = format!("achieved {:.1} pps ({:.1}%)", summary.achieved_pps, ratio * 100.0);
    let report = crate::views::text::summary(&summary);
    assert!(
        report.contains(&format!(
            "achieved {:.1} pps ({:.1}%)",
            summary.achieved_pps,
            ratio * 100.0
        )),
        "{report}"
    );
    for (w, h) in [(80, 24), (120, 40)] {
        let s = screen(&app, w, h);
        assert!(
            s.contains(&achieved),
            "{w}x{h}: header is not the summary's:\n{s}"
        );
        assert!(!s.contains("no sends yet"), "{w}x{h}:\n{s}");
        assert!(
            s.contains(" run ended (duration reached): summary "),
            "{w}x{h}:\n{s}"
        );
        assert!(s.contains("/s run") && !s.contains("/s tick"), "{w}x{h}:\n{s}");
        // The funnel: the summary's syscall_packets rate, its total and its ratio.
        let pps = summary.stages["syscall_packets"];
        let funnel_row = s
            .lines()
            .find(|l| l.contains("syscall_packets"))
            .unwrap_or_else(|| panic!("no funnel row in\n{s}"));
        let total = summary.stage_counts["syscall_packets"].to_string();
        assert!(
            funnel_row.contains(&format!("{pps:.1}")) && funnel_row.contains(&total),
            "{w}x{h}: {funnel_row}"
        );
        // The drops: the summary's rows.
        let d = &summary.drops[0];
        let drop_row = s
            .lines()
            .find(|l| l.contains(&d.reason))
            .unwrap_or_else(|| panic!("no drop row in\n{s}"));
        assert!(drop_row.contains(&d.count.to_string()), "{w}x{h}: {drop_row}");
    }
    let s = screen(&app, 120, 40);
    assert!(s.contains("tid 7 sender"), "the threads' run budget:\n{s}");
    assert_snapshot("tui_ended_120x40", &s);
}

/// Three NO_SOCKET rows at one location, on three devices in two namespaces: they looked
/// identical without the device column.
fn app_with_three_no_socket_rows() -> App {
    app_with_no_socket_rows_in([4026532301, 4026532301, 4026531840])
}

/// The three NO_SOCKET rows, in the namespaces given.
fn app_with_no_socket_rows_in(netns: [u32; 3]) -> App {
    let at = |device: &str, netns: u32, count: u64| DropRow {
        reason: "NO_SOCKET".into(),
        location: "__udp4_lib_rcv+0x7b4".into(),
        device: Some(device.into()),
        netns,
        class: DropClass::Expected,
        pid: Some(7),
        count,
        rate: count as f64 / 3.0,
    };
    app_with_tick_drops(vec![
        at("spv7503-0t", netns[0], 1_234_567),
        at("lo", netns[1], 4096),
        at("veth-with-a-long-name", netns[2], 12),
    ])
}

#[test]
fn the_drop_table_names_each_rows_device_and_namespace_at_80_and_120_columns() {
    let mut app = app_with_three_no_socket_rows();
    // At 80x24 the split view has room for one row: the first, whole.
    let s = screen(&app, 80, 24);
    let first = s.lines().find(|l| l.contains("NO_SOCKET")).expect("a drop row");
    for want in ["spv7503-0t", "4026532301", "1234567", "__udp4_lib_rcv+0x7b4"] {
        assert!(first.contains(want), "{want:?} missing in {first:?}\n{s}");
    }
    for (w, h) in [(80, 24), (120, 40)] {
        // At 80x24 zoomed on the drops (Tab to the panel, z), as a user would read them.
        app.focus = Some(Panel::Drops);
        app.zoomed = w == 80;
        let s = screen(&app, w, h);
        let rows: Vec<&str> = s.lines().filter(|l| l.contains("NO_SOCKET")).collect();
        assert_eq!(rows.len(), 3, "{w}x{h}:\n{s}");
        let header = s
            .lines()
            .find(|l| l.contains("location"))
            .unwrap_or_else(|| panic!("{w}x{h}: no header in\n{s}"));
        assert!(
            header.contains("device") && header.contains("netns"),
            "{w}x{h}: {header}"
        );
        // Each row its own device (a long name elided visibly) and namespace; every number
        // whole; the location whole at both sizes.
        for (row, device, netns, count) in [
            (rows[0], "spv7503-0t", "4026532301", "1234567"),
            (rows[1], "lo", "4026532301", "4096"),
            (rows[2], "veth-with", "4026531840", "12"),
        ] {
            for want in [device, netns, count, "__udp4_lib_rcv+0x7b4"] {
                assert!(row.contains(want), "{w}x{h}: {want:?} missing in {row:?}\n{s}");
            }
        }
        assert!(
            rows[2].contains("…") && !rows[2].contains("veth-with-a-long-name"),
            "{w}x{h}: {}",
            rows[2]
        );
        assert_ne!(rows[0], rows[1]);
        assert_snapshot(&format!("tui_drops_devices_{w}x{h}"), &s);
    }
    // One namespace: no namespace column, the device still there.
    let app = app_with_no_socket_rows_in([4026531840; 3]);
    let s = screen(&app, 80, 24);
    let header = s.lines().find(|l| l.contains("location")).unwrap();
    assert!(header.contains("device") && !header.contains("netns"), "{header}");
}

/// Every key the help lists, pressed once from the same live state, at each size: what it
/// changed is on screen (or, for focus, in the focused panel's border colour), and the screens
/// are committed, one file per size.
#[test]
fn every_listed_key_works_at_80x24_120x40_and_200x60() {
    use super::keys::HELP;
    use ratatui::style::Color;
    for (w, h) in [(80u16, 24u16), (120, 40), (200, 60)] {
        let mut all = String::new();
        for b in std::iter::once(&HELP).chain(BINDINGS.iter()) {
            let mut app = app_with_three_no_socket_rows();
            let code = b.keys[0];
            let outcome = app.on_key(key(code));
            if outcome == Outcome::Export {
                // The event loop writes the bundle and shows its message.
                app.status = Some("bundle written to ./scanprof-bundle-1 (9 files)".into());
            }
            let s = screen(&app, w, h);
            let at = format!("{w}x{h} key {}", b.label);
            let shows = |want: &str| assert!(s.contains(want), "{at}: {want:?} missing in\n{s}");
            match b.action {
                super::keys::Action::Help => shows(" keys "),
                super::keys::Action::Quit => {
                    assert_eq!(outcome, Outcome::Stop, "{at}");
                    shows(" ENDING... ");
                }
                super::keys::Action::Pause => shows(" PAUSED "),
                super::keys::Action::NextPanel | super::keys::Action::PrevPanel => {
                    let want = if b.action == super::keys::Action::NextPanel {
                        (Panel::Budget, "sender threads' time")
                    } else {
                        (Panel::Diagnosis, "diagnosis")
                    };
                    assert_eq!(app.focus, Some(want.0), "{at}");
                    // The focused panel's title is drawn in the focus colour.
                    let mut term = Terminal::new(TestBackend::new(w, h)).unwrap();
                    term.draw(|f| draw(f, &app)).unwrap();
                    let buf = term.backend().buffer().clone();
                    let row = s
                        .lines()
                        .position(|l| l.contains(want.1))
                        .unwrap_or_else(|| panic!("{at}: {:?} not on screen\n{s}", want.1));
                    let col = s
                        .lines()
                        .nth(row)
                        .and_then(|l| l.find(want.1))
                        .map(|i| s.lines().nth(row).unwrap()[..i].chars().count())
                        .unwrap();
                    assert_eq!(
                        buf[(col as u16, row as u16)].fg,
                        Color::Cyan,
                        "{at}: {} not focused\n{s}",
                        want.1
                    );
                }
                super::keys::Action::ScrollUp => assert_eq!(app.scroll, 0, "{at}"),
                super::keys::Action::ScrollDown => {
                    assert_eq!(app.scroll, 1, "{at}");
                    assert!(!s.contains("spv7503-0t"), "{at}: the first row still shown\n{s}");
                    let first = s.lines().find(|l| l.contains("NO_SOCKET")).unwrap_or("");
                    assert!(first.contains(" lo "), "{at}: the second row is not first\n{s}");
                }
                super::keys::Action::Sort => shows("sort: rate"),
                super::keys::Action::Filter => shows("filter: _"),
                super::keys::Action::Zoom => {
                    shows("funnel");
                    assert!(!s.contains("rates over time"), "{at}: not zoomed\n{s}");
                }
                super::keys::Action::Export => shows("bundle written to ./scanprof-bundle-1"),
            }
            all += &format!("=== {} ({}) ===\n{s}", b.label, b.help);
        }
        assert_snapshot(&format!("tui_keys_{w}x{h}"), &all);
    }
}

#[test]
fn resizing_mid_run_lays_out_as_a_fresh_draw_at_the_new_size() {
    let app = app_with_three_no_socket_rows();
    let mut term = Terminal::new(TestBackend::new(80, 24)).unwrap();
    for (w, h) in [(80u16, 24u16), (200, 60), (120, 40), (80, 24)] {
        term.backend_mut().resize(w, h);
        term.draw(|f| draw(f, &app)).unwrap();
        let text = buffer_text(term.backend().buffer(), w, h);
        assert_eq!(text, screen(&app, w, h), "after resizing to {w}x{h}");
    }
}

/// A send blocked for seconds is named while it lasts (issue 17: the view named the wait site
/// only after a block ended, 13 of 52 ticks): the thread's block in progress, its site and how
/// long so far, in red at 80x24 and 120x40.
#[test]
fn a_block_in_progress_is_named_with_its_site_and_length() {
    let mut tick = rich_ticks().0.remove(0);
    let th = tick.threads.first_mut().expect("a sender thread");
    th.blocked_now = Some(crate::analysis::BlockedNowView {
        since_s: 0.4,
        blocked_s: 2.61,
        wait_site: "sock_alloc_send_pskb".into(),
    });
    let tid = th.tid;
    let mut app = App::new("run sender --rate 100".into());
    app.apply(Update::Tick(Box::new(tick)));
    let line = format!("blocked now in sock_alloc_send_pskb for 2.61s (tid {tid})");
    let s = screen(&app, 120, 40);
    assert!(s.contains(&line), "120x40:\n{s}");
    // At 80 columns the panel wraps it after the site.
    let s = screen(&app, 80, 24);
    let (site, rest) = line.split_at("blocked now in sock_alloc_send_pskb".len());
    assert!(s.contains(site) && s.contains(rest.trim()), "80x24:\n{s}");
    // Without a block in progress, no such line.
    assert!(!screen(&live_app(false), 120, 40).contains("blocked now"));
}

/// The fixture's first tick with a receive funnel; `sent` keeps its send stages, else they are
/// zeroed (a family that only receives).
fn app_receiving(sent: bool) -> App {
    use crate::analysis::{ReceiveView, Stage};
    let mut tick = rich_ticks().0.remove(0);
    let stage = |name: &str, count: u64| Stage {
        name: name.parse().unwrap(),
        count,
        pps: count as f64,
        total: count,
        ratio: None,
    };
    tick.receive = Some(ReceiveView {
        stages: vec![
            stage("recv_drops", 4321),
            stage("recv_calls", 812),
            stage("recv_packets", 811),
        ],
        ..Default::default()
    });
    if !sent {
        for st in &mut tick.stages {
            (st.count, st.pps, st.total) = (0, 0.0, 0);
        }
    }
    let mut app = App::new("run receiver".into());
    app.apply(Update::Tick(Box::new(tick)));
    app
}

#[test]
fn the_funnel_panel_shows_the_receive_stages_when_the_family_receives() {
    let plain = screen(&live_app(false), 120, 40);
    assert!(!plain.contains("recv_"), "{plain}");
    // A sender that also receives: both funnels, the send stages first.
    let both = screen(&app_receiving(true), 120, 40);
    let send_at = both.find("send_calls").expect("send stages shown");
    let recv_at = both.find("recv_drops").expect("receive stages shown");
    assert!(send_at < recv_at, "{both}");
    assert!(both.contains("4321") && both.contains("811"), "{both}");
    // A family that only receives: the receive stages alone, also at 80x24.
    let only = screen(&app_receiving(false), 80, 24);
    assert!(!only.contains("send_calls"), "{only}");
    for name in ["recv_drops", "recv_calls", "recv_packets"] {
        assert!(only.contains(name), "{name} missing:\n{only}");
    }
}

/// A block that has just begun reads in milliseconds, not as "0.00s".
#[test]
fn a_block_that_has_just_begun_reads_in_milliseconds() {
    let mut tick = rich_ticks().0.remove(0);
    let th = tick.threads.first_mut().expect("a sender thread");
    th.blocked_now = Some(crate::analysis::BlockedNowView {
        since_s: 0.4,
        blocked_s: 0.0032,
        wait_site: "sock_alloc_send_pskb".into(),
    });
    let mut app = App::new("run sender --rate 100".into());
    app.apply(Update::Tick(Box::new(tick)));
    let s = screen(&app, 120, 40);
    assert!(
        s.contains("blocked now in sock_alloc_send_pskb for 3.20ms"),
        "{s}"
    );
}

/// A connect scanner's rate is named connection attempts per second in the header, not pps.
#[test]
fn a_connect_scanner_s_rate_is_connection_attempts_in_the_header() {
    let (mut ticks, _) = rich_ticks();
    let plain = {
        let mut app = App::new("nmap -sT".into());
        app.apply(Update::Tick(Box::new(ticks[0].clone())));
        screen(&app, 120, 40)
    };
    assert!(
        plain.contains(" pps") && !plain.contains("connection attempts/s"),
        "{plain}"
    );
    ticks[0].connect_scanner = true;
    let mut app = App::new("nmap -sT".into());
    app.apply(Update::Tick(Box::new(ticks.remove(0))));
    let text = screen(&app, 120, 40);
    assert!(text.contains("connection attempts/s"), "{text}");
}

#[test]
fn the_funnel_panel_shows_the_receive_cost_while_the_family_reads() {
    let mut app = app_receiving(false);
    assert!(!screen(&app, 80, 24).contains("10G:"));
    let cost = crate::analysis::ReceiveCost {
        workers: 1,
        packets: 811,
        pps: 811.0,
        bytes: 81_100,
        oncpu_ns: 3_406_200,
        ns_per_packet: Some(4_200.0),
        capacity: Some(crate::analysis::receive::capacity(4_200.0, 100.0, 1)),
        ..Default::default()
    };
    let mut tick = app.shown.clone().expect("a tick");
    tick.receive.as_mut().expect("receiving").cost = Some(cost);
    app.apply(Update::Tick(Box::new(tick)));
    // 7,530,120 pps at 4.2 us: 31.6 CPUs.
    let shown = screen(&app, 80, 24);
    assert!(shown.contains("read 4.20 us/pkt, 10G: 31.6 CPUs"), "{shown}");
}

#[test]
fn the_diagnosis_panel_lists_every_strong_or_share_bearing_verdict_and_counts_the_rest() {
    let (_, mut summary) = rich_run();
    summary.verdicts = crate::views::fixtures::verdicts_beyond_five();
    summary.scanner = None;
    let mut app = live_app(false);
    app.apply(Update::Done(Box::new(summary.clone())));
    app.focus = Some(Panel::Diagnosis);
    app.on_key(key(KeyCode::Char('z')));
    let s = screen(&app, 200, 60);
    for v in &summary.verdicts[..6] {
        assert!(s.contains(&v.sentence), "{} missing:\n{s}", v.cause);
    }
    for v in &summary.verdicts[6..] {
        assert!(!s.contains(&v.sentence), "{} shown:\n{s}", v.cause);
    }
    assert!(
        s.contains("2 more at 0.0%, with weak evidence: claim_mismatch, steal (each in full in the JSON)"),
        "{s}"
    );
}

/// The rate chart takes whole ticks of sending only, and the header says what the family does
/// after its last send instead of "achieved 0 pps (0.0%)".
#[test]
fn the_chart_skips_ticks_that_judge_no_rate_and_the_header_says_the_phase() {
    use crate::analysis::RunPhase;
    let (snap, _) = rich_run();
    assert!(snap.judges_rate());
    let mut app = App::new("scan".into());
    app.apply(Update::Tick(Box::new(snap.clone())));
    let mut partial = snap.clone();
    partial.partial = true;
    partial.last_send_s = Some(partial.t_s - 0.4);
    app.apply(Update::Tick(Box::new(partial)));
    assert!(screen(&app, 160, 40).contains("(partial tick, not judged)"));
    let mut waiting = snap.clone();
    waiting.phase = RunPhase::Waiting;
    waiting.achieved_pps = 0.0;
    waiting.t_s += 2.0;
    waiting.last_send_s = Some(waiting.t_s - 2.5);
    for _ in 0..5 {
        app.apply(Update::Tick(Box::new(waiting.clone())));
    }
    assert_eq!(app.history.len(), 1, "{:?}", app.history);
    assert_eq!(app.history[0].achieved, snap.achieved_pps);
    let s = screen(&app, 160, 40);
    assert!(
        s.contains("not sending (waiting for late replies, or paused): last send at"),
        "{s}"
    );
    assert!(!s.contains("achieved 0"), "{s}");
}

/// The reply funnel on the funnel panel's bottom line: replies arrived, per probe, and the
/// probes unanswered beyond this host; nothing without it.
#[test]
fn the_funnel_panel_shows_the_replies_that_arrived() {
    assert!(!screen(&live_app(false), 120, 40).contains("beyond host"));
    let mut tick = rich_ticks().0.remove(0);
    tick.replies = Some(crate::analysis::replies::ReplyFunnel {
        probes: 1010,
        arrived_total: 7,
        reply_ratio: Some(7.0 / 1010.0),
        unanswered: 1003,
        beyond_host: 1003,
        ..Default::default()
    });
    let mut app = App::new("run scanner".into());
    app.apply(Update::Tick(Box::new(tick)));
    let shown = screen(&app, 120, 40);
    assert!(shown.contains("replies 0.007/probe, 1003 beyond host"), "{shown}");
}

/// Issue 33 item 14: the header names scanprof's lost probe records for what they are (not
/// packets), a header line too long for the terminal ends with `…`, and the rates chart's
/// legend sits over its oldest points (top left), never the newest at the right edge.
#[test]
fn the_header_names_lost_records_and_marks_cut_lines_and_the_legend_leaves_the_newest_points() {
    let app = live_app(false);
    for (w, h) in [(80u16, 24u16), (120, 40)] {
        let s = screen(&app, w, h);
        let header: Vec<&str> = s.lines().skip(1).take(3).collect();
        assert!(!s.contains(", lost "), "{s}");
        // Each header line that fills the width was cut: its last column is the ellipsis.
        let mut cut = 0;
        for l in &header {
            let inner: String = l.chars().skip(1).take(w as usize - 2).collect();
            if inner.chars().count() == w as usize - 2 && !inner.ends_with(' ') {
                assert!(inner.ends_with('…'), "{w}x{h}: cut without …: {l}");
                cut += 1;
            }
        }
        assert!(cut >= 1, "{w}x{h}: no header line needed cutting:\n{s}");
        if h >= 40 {
            // The legend (drawn where the chart has the rows): each line's marker before its
            // name, at the chart's left.
            let legend = s
                .lines()
                .find(|l| l.contains("⣿ achieved"))
                .unwrap_or_else(|| panic!("{s}"));
            let at = legend.chars().position(|c| c == '⣿').unwrap();
            let rates_width = (w as usize) * 60 / 100;
            assert!(at < rates_width / 2, "{w}x{h}: legend at column {at}:\n{s}");
        }
    }
    let s = screen(&app, 200, 40);
    assert!(!s.contains("lost"), "{s}");
    let mut lossy = live_app(false);
    if let Some(shown) = lossy.shown.as_mut() {
        shown.health.lost_events = 3;
    }
    let s = screen(&lossy, 200, 40);
    assert!(s.contains(", 3 probe records lost | family"), "{s}");
    for name in ["• requested 100.0", "⣿ achieved", "▄ dev_xmit", "█ dropped"] {
        assert!(s.contains(name), "{name} missing:\n{s}");
    }
}

/// NO_COLOR: no cell keeps a colour; what stood out by its background (the LIVE tag) is
/// reversed instead; the chart's lines keep their own markers.
#[test]
fn no_color_draws_without_colour_and_keeps_the_tags_visible() {
    use ratatui::style::{Color, Modifier};
    let mut app = live_app(false);
    let mut term = Terminal::new(TestBackend::new(120, 40)).unwrap();
    term.draw(|f| draw(f, &app)).unwrap();
    let coloured = term
        .backend()
        .buffer()
        .content
        .iter()
        .filter(|c| c.fg != Color::Reset)
        .count();
    assert!(coloured > 0, "the view draws colours without NO_COLOR");
    app.no_color = true;
    let mut term = Terminal::new(TestBackend::new(120, 40)).unwrap();
    term.draw(|f| draw(f, &app)).unwrap();
    let buf = term.backend().buffer();
    assert!(buf
        .content
        .iter()
        .all(|c| c.fg == Color::Reset && c.bg == Color::Reset));
    let text = buffer_text(buf, 120, 40);
    let row = text.lines().position(|l| l.contains(" LIVE ")).unwrap() as u16;
    let col = text.lines().nth(row as usize).unwrap().find(" LIVE ").unwrap() as u16;
    // `find` counts bytes: the border's `│` is 3 bytes, one column.
    let x = col - 2 + 1;
    assert!(
        buf[(x, row)].modifier.contains(Modifier::REVERSED),
        "{:?}",
        buf[(x, row)]
    );
    assert!(
        text.contains("⣿ achieved") && text.contains("█ dropped"),
        "{text}"
    );
}

/// `--device-stages sampled`: the funnel marks the device stages' figures as estimates and says
/// how they were sampled; the syscall stage stays unmarked.
#[test]
fn sampled_device_stages_are_marked_in_the_funnel() {
    let exact = screen(&live_app(false), 120, 40);
    assert!(!exact.contains('≈'), "{exact}");
    let mut tick = rich_ticks().0.remove(0);
    tick.device_sampling = Some(crate::collect::device_window::DeviceSampling::tenth_of_each_second(1));
    let mut app = App::new("run sender --rate 100".into());
    app.apply(Update::Tick(Box::new(tick)));
    let s = screen(&app, 120, 40);
    let line = |stage: &str| {
        s.lines()
            .find(|l| l.starts_with(&format!("│{stage} ")))
            .unwrap_or_else(|| panic!("no {stage} row in\n{s}"))
            .to_string()
    };
    assert!(line("dev_queue").contains('≈'), "{s}");
    assert!(line("dev_xmit").contains('≈'), "{s}");
    assert!(!line("syscall_packets").contains('≈'), "{s}");
    assert!(s.contains("≈ sampled 10.0%, scaled"), "{s}");
}

/// `--device-stages auto`: the run's figure says from when the device stages were sampled, and
/// how long they were counted whole again (the family's rate back at the limit).
#[test]
fn auto_sampling_says_when_it_began_in_the_funnel() {
    use crate::collect::device_window::{AutoStart, DeviceSampling};
    let mut app = App::new("run sender --rate 0".into());
    for (whole_ns, foot) in [
        (0, "≈ sampled 10.0% after 3.0 s, scaled"),
        (2_000_000_000, "≈ sampled 10.0% after 3.0 s, 2.0 s whole"),
    ] {
        let mut tick = rich_ticks().0.remove(0);
        tick.device_sampling = Some(DeviceSampling {
            auto: Some(AutoStart {
                exact_ns: 3_000_000_000,
                pps: 180_000.0,
                above_pps: 50_000.0,
            }),
            whole_ns,
            ..DeviceSampling::tenth_of_each_second(1)
        });
        app.apply(Update::Tick(Box::new(tick)));
        let s = screen(&app, 120, 40);
        assert!(s.contains(foot), "{s}");
    }
}
