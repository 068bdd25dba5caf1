//! The one key table: the event loop maps keys through it, and the footer and help screen are
//! generated from it, so a key can never do one thing and be described as another.

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

/// What a key asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Quit,
    Pause,
    NextPanel,
    PrevPanel,
    ScrollUp,
    ScrollDown,
    Sort,
    Filter,
    Zoom,
    Export,
    Help,
}

/// A key binding: the keys, how the footer names them, and what they do.
pub struct Binding {
    pub keys: &'static [KeyCode],
    pub label: &'static str,
    pub action: Action,
    pub help: &'static str,
}

pub const BINDINGS: [Binding; 10] = [
    Binding {
        keys: &[KeyCode::Char('q')],
        label: "q",
        action: Action::Quit,
        help: "quit (ends the run and prints the summary)",
    },
    Binding {
        keys: &[KeyCode::Char('p')],
        label: "p",
        action: Action::Pause,
        help: "pause / resume the display (collection goes on)",
    },
    Binding {
        keys: &[KeyCode::Tab, KeyCode::Right],
        label: "Tab",
        action: Action::NextPanel,
        help: "next panel",
    },
    Binding {
        keys: &[KeyCode::BackTab, KeyCode::Left],
        label: "S-Tab",
        action: Action::PrevPanel,
        help: "previous panel",
    },
    Binding {
        keys: &[KeyCode::Up],
        label: "Up",
        action: Action::ScrollUp,
        help: "scroll the drop table up",
    },
    Binding {
        keys: &[KeyCode::Down],
        label: "Down",
        action: Action::ScrollDown,
        help: "scroll the drop table down",
    },
    Binding {
        keys: &[KeyCode::Char('s')],
        label: "s",
        action: Action::Sort,
        help: "sort the drop table (count, rate, reason, location, class)",
    },
    Binding {
        keys: &[KeyCode::Char('f')],
        label: "f",
        action: Action::Filter,
        help: "filter the drop table (type, Enter to keep, Esc to clear)",
    },
    Binding {
        keys: &[KeyCode::Char('z')],
        label: "z",
        action: Action::Zoom,
        help: "zoom the focused panel to the whole screen",
    },
    Binding {
        keys: &[KeyCode::Char('e')],
        label: "e",
        action: Action::Export,
        help: "export a trace bundle of the run so far (to --export DIR, or ./scanprof-COMMAND-UTCTIME)",
    },
];

/// `?` is listed apart so that the footer always has room for it.
pub const HELP: Binding = Binding {
    keys: &[KeyCode::Char('?')],
    label: "?",
    action: Action::Help,
    help: "show / hide this help",
};

/// The action bound to a key, if any. Ctrl-C quits like `q` (raw mode turns it into a key).
pub fn action_of(key: KeyEvent) -> Option<Action> {
    if key.modifiers.contains(KeyModifiers::CONTROL) && key.code == KeyCode::Char('c') {
        return Some(Action::Quit);
    }
    BINDINGS
        .iter()
        .chain(std::iter::once(&HELP))
        .find(|b| b.keys.contains(&key.code))
        .map(|b| b.action)
}

/// The footer in at most `width` columns: every binding as `key word`, help first; where that
/// does not fit (80 columns), every key alone after `? keys`, so that none is cut off the end.
pub fn footer(width: usize) -> String {
    let full = std::iter::once(&HELP)
        .chain(BINDINGS.iter())
        .map(|b| format!("{} {}", b.label, b.help.split([' ', '(']).next().unwrap_or("")))
        .collect::<Vec<_>>()
        .join("  ");
    if full.chars().count() <= width {
        return full;
    }
    let keys: Vec<&str> = BINDINGS.iter().map(|b| b.label).collect();
    format!("{} keys  {}", HELP.label, keys.join(" "))
}
