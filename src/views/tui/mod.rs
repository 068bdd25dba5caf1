//! The live terminal view: renders the same Snapshots as the other views, at most 10 times a
//! second. The collection thread feeds `App` through the update channel; this loop owns the
//! terminal, which is restored on exit, on error and on panic (ratatui::init's hook).

mod app;
mod draw;
mod keys;
#[cfg(test)]
mod tests;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use ratatui::crossterm::event::{self, Event, KeyEventKind};

pub use app::App;

use crate::collect::session::Update;
use crate::views::export::spool::SpooledRecording;

/// Shortest time between two redraws: at most 10 a second.
const FRAME: Duration = Duration::from_millis(100);

/// Restores the terminal when dropped, whichever way the view ends.
struct TerminalGuard;

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        ratatui::restore();
    }
}

/// Shows the session live until the user quits. `q` (or Ctrl-C) raises `stop`; the view then
/// waits for the summary. When the run ends by itself, its final state stays on screen until
/// the user quits. Every update also goes into `rec`; `e` hands it to `on_export`, whose
/// message the header then shows.
pub fn run(
    updates: &Receiver<Update>,
    title: String,
    stop: &Arc<AtomicBool>,
    rec: &mut SpooledRecording,
    on_export: &dyn Fn(&mut SpooledRecording) -> String,
) -> anyhow::Result<()> {
    let mut terminal =
        ratatui::try_init().context("opening the terminal view (use --no-tui for plain output)")?;
    let _guard = TerminalGuard;
    let mut app = App::new(title);
    let mut dirty = true;
    let mut last_draw = Instant::now() - FRAME;
    let mut channel_open = true;
    loop {
        while channel_open {
            match updates.try_recv() {
                Ok(u) => {
                    // A tick the spool cannot take is shown; the bundle then says it again.
                    if let Err(e) = rec.apply(&u) {
                        app.status = Some(format!("{e:#}"));
                    }
                    app.apply(u);
                    dirty = true;
                }
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => channel_open = false,
            }
        }
        if app.quitting && (app.summary.is_some() || !channel_open) {
            break;
        }
        if dirty && last_draw.elapsed() >= FRAME {
            terminal
                .draw(|f| draw::draw(f, &app))
                .context("drawing the terminal view")?;
            last_draw = Instant::now();
            dirty = false;
        }
        let wait = FRAME
            .saturating_sub(last_draw.elapsed())
            .max(Duration::from_millis(10));
        if event::poll(wait).context("reading the terminal")? {
            match event::read().context("reading the terminal")? {
                Event::Key(k) if k.kind == KeyEventKind::Press => {
                    match app.on_key(k) {
                        app::Outcome::Stop => stop.store(true, Ordering::Relaxed),
                        app::Outcome::Export => app.status = Some(on_export(rec)),
                        app::Outcome::Continue => {}
                    }
                    dirty = true;
                }
                Event::Resize(..) => dirty = true,
                _ => {}
            }
        }
    }
    Ok(())
}
