//! The live terminal view: renders the same Snapshots as the other views, at most 10 times a
//! second. The collection thread feeds `App` through the update channel; this loop owns the
//! terminal, which is restored on exit, on error and on panic (a hook of its own: see
//! `open_terminal`).

mod app;
mod draw;
mod keys;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod hangup_tests {
    use super::*;

    /// A pty whose other end has closed reads as a hang-up; an open, quiet one as quiet, and one
    /// with input as input.
    #[test]
    fn a_closed_terminal_is_seen_as_hung_up() {
        let pty = nix::pty::openpty(None, None).expect("openpty");
        use std::os::fd::AsRawFd;
        let slave = pty.slave.as_raw_fd();
        assert_eq!(wait_on_fd(slave, Duration::from_millis(10)), Terminal::Quiet);
        // canonical mode: a line is input once it ends
        nix::unistd::write(&pty.master, b"q\n").expect("write");
        assert_eq!(wait_on_fd(slave, Duration::from_millis(100)), Terminal::Input);
        drop(pty.master);
        assert_eq!(wait_on_fd(slave, Duration::from_millis(100)), Terminal::HungUp);
    }
}

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use ratatui::crossterm::event::{self, Event, KeyEventKind};

pub use app::App;

use crate::session::Update;
use crate::views::export::spool::SpooledRecording;

/// What the terminal did while the view waited for it.
#[derive(Debug, PartialEq)]
enum Terminal {
    /// input is ready
    Input,
    /// nothing in the time given
    Quiet,
    /// closed: hang-up or error
    HungUp,
    /// stdin is not the terminal (crossterm reads /dev/tty then): not watched here
    Unwatched,
}

/// Reads terminal events in a thread of its own (see `run`) and hands them over a channel,
/// which disconnects when reading fails.
fn spawn_key_reader() -> anyhow::Result<Receiver<Event>> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("scanprof-keys".into())
        .spawn(move || {
            while let Ok(ev) = event::read() {
                if tx.send(ev).is_err() {
                    break;
                }
            }
        })
        .context("starting the terminal reader")?;
    Ok(rx)
}

/// Waits up to `wait` for the terminal on stdin (poll(2)), reporting a hang-up.
fn wait_for_terminal(wait: Duration) -> Terminal {
    use std::io::IsTerminal;
    if !std::io::stdin().is_terminal() {
        return Terminal::Unwatched;
    }
    wait_on_fd(0, wait)
}

/// poll(2) on `fd` for input for at most `wait`.
fn wait_on_fd(fd: i32, wait: Duration) -> Terminal {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = wait.as_millis().min(i32::MAX as u128) as i32;
    // SAFETY: one pollfd, valid for the duration of the call.
    let n = unsafe { libc::poll(&mut pfd, 1, ms) };
    if n <= 0 {
        return Terminal::Quiet; // timeout, or EINTR (a signal: the loop looks at `stop`)
    }
    if pfd.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
        Terminal::HungUp
    } else {
        Terminal::Input
    }
}

/// Shortest time between two redraws: at most 10 a second.
const FRAME: Duration = Duration::from_millis(100);

/// Restores the terminal when dropped, whichever way the view ends.
struct TerminalGuard;

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        // Not ratatui::restore(), which eprintln!s its failure: on a closed terminal that
        // panics, and a panic while unwinding aborts (the lab's namespaces were left behind).
        let _ = ratatui::try_restore();
    }
}

/// ratatui::try_init's steps, with a panic hook that restores the terminal without printing:
/// ratatui's own hook eprintln!s a failed restore, which on a closed terminal panics inside
/// the hook and aborts the process before anything is cleaned up.
fn open_terminal() -> std::io::Result<ratatui::DefaultTerminal> {
    use ratatui::crossterm::{execute, terminal};
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let _ = ratatui::try_restore();
        hook(info);
    }));
    terminal::enable_raw_mode()?;
    execute!(std::io::stdout(), terminal::EnterAlternateScreen)?;
    ratatui::Terminal::new(ratatui::backend::CrosstermBackend::new(std::io::stdout()))
}

/// Shows the session live until the user quits. `q` (or Ctrl-C) raises `stop`; the view then
/// waits for the summary. When the run ends by itself, its final state stays on screen until
/// the user quits, or, with `exit_at_end` (`--exit-at-end`), the view closes at once. Every
/// update also goes into `rec`; `e` hands it to `on_export`, whose message the header then
/// shows. NO_COLOR (set, not empty) draws without colour.
pub fn run(
    updates: &Receiver<Update>,
    title: String,
    exit_at_end: bool,
    stop: &Arc<AtomicBool>,
    rec: &mut SpooledRecording,
    on_export: &dyn Fn(&mut SpooledRecording) -> String,
) -> anyhow::Result<()> {
    let mut terminal =
        open_terminal().context("opening the terminal view (use --no-tui for plain output)")?;
    let _guard = TerminalGuard;
    let mut app = App::new(title);
    app.no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    let mut dirty = true;
    let mut last_draw = Instant::now() - FRAME;
    let mut channel_open = true;
    // Terminal input comes from a thread of its own: crossterm 0.29 spins forever inside its
    // event reader once the terminal hangs up (a closed tmux pane or SSH session: a dead tty
    // stays readable and read(2) returns 0; crossterm issue #793), whatever the timeout. This
    // loop never enters crossterm's reader, so it sees the hang-up (poll(2) on stdin, or SIGHUP
    // through `stop`) and ends the view; the reader thread, blocked or spinning, ends with the
    // process. Before, an ended view on a closed terminal spun at 100% CPU, SIGTERM ignored.
    let keys = spawn_key_reader()?;
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
        // The ended run stays on screen until q, or until a signal (SIGINT, SIGTERM, SIGHUP:
        // the terminal closed, nobody left to press q; a signal during the run ends the run
        // first, and its summary arrives here).
        let ended = app.summary.is_some() || !channel_open;
        if ended && (exit_at_end || app.quitting || stop.load(Ordering::Relaxed)) {
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
        if wait_for_terminal(Duration::ZERO) == Terminal::HungUp {
            stop.store(true, Ordering::Relaxed);
            anyhow::bail!("the terminal closed");
        }
        let ev = match keys.recv_timeout(wait) {
            Ok(ev) => ev,
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => {
                stop.store(true, Ordering::Relaxed);
                anyhow::bail!("the terminal closed (reading it failed)");
            }
        };
        match ev {
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
    Ok(())
}
