//! The scanner's status file (zmap `--status-updates-file`), tailed while it runs: a thread reads
//! what the scanner appends, hands each complete line to the profile's parser
//! (`wrappers::StatusParser`) and sends the figures to the collection thread beside the status
//! lines of `output.rs`. The file may not exist yet, may be truncated or replaced, may end in a
//! partial line: each gets a note, never a failure of the run.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use super::output::{OutputEvent, StatusReader, MAX_LINE, MAX_LINE_NOTES};

/// How often the file is looked at.
const POLL: Duration = Duration::from_millis(100);
/// Most bytes read from the file in one look.
const MAX_READ: u64 = 1 << 20;

/// Where reading starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartAt {
    /// `run`: everything the scanner writes (a file already there before it started is
    /// skipped up to its length, unless the scanner truncates or replaces it)
    Beginning,
    /// `attach`: what the scanner writes from now on (a CSV header is read first)
    Now,
}

/// A running tail; `finish` reads what is left and ends it.
pub struct StatusTail {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl StatusTail {
    /// Starts tailing `path` (as scanprof opens it; `/proc/PID/cwd/...` for an attached
    /// process).
    pub fn start(
        path: PathBuf,
        reader: StatusReader,
        start: StartAt,
        tx: Sender<OutputEvent>,
    ) -> std::io::Result<StatusTail> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        // A file there before a launched scanner starts is an earlier run's.
        let stale = match start {
            StartAt::Beginning => std::fs::metadata(&path).ok().map(|m| (m.ino(), m.len())),
            StartAt::Now => None,
        };
        let handle = std::thread::Builder::new()
            .name("scanprof-status".into())
            .spawn(move || {
                // Reading a file by a /proc/PID/cwd path of another user's process needs these
                // two; nothing else.
                use crate::system::caps;
                let _ =
                    crate::system::privileges::drop_to(&[caps::CAP_SYS_PTRACE, caps::CAP_DAC_READ_SEARCH]);
                let mut t = Tailer::new(path, reader, start, stale, tx);
                loop {
                    let last = flag.load(Ordering::Relaxed);
                    t.look();
                    if last || t.gave_up {
                        break;
                    }
                    std::thread::sleep(POLL);
                }
                t.end();
            })?;
        Ok(StatusTail {
            stop,
            handle: Some(handle),
        })
    }

    /// Reads what the scanner wrote last and ends the thread.
    pub fn finish(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

impl Drop for StatusTail {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// The tail's state, apart from the thread so that tests can drive it.
struct Tailer {
    path: PathBuf,
    reader: StatusReader,
    start: StartAt,
    /// (inode, length) of a file that was there before the scanner started
    stale: Option<(u64, u64)>,
    tx: Sender<OutputEvent>,
    file: Option<File>,
    ino: u64,
    offset: u64,
    pending: Vec<u8>,
    /// the pending line passed MAX_LINE: skip to its end
    too_long: bool,
    lines: u64,
    bad: u64,
    open_error: Option<String>,
    gave_up: bool,
}

impl Tailer {
    fn new(
        path: PathBuf,
        reader: StatusReader,
        start: StartAt,
        stale: Option<(u64, u64)>,
        tx: Sender<OutputEvent>,
    ) -> Tailer {
        Tailer {
            path,
            reader,
            start,
            stale,
            tx,
            file: None,
            ino: 0,
            offset: 0,
            pending: Vec::new(),
            too_long: false,
            lines: 0,
            bad: 0,
            open_error: None,
            gave_up: false,
        }
    }

    fn note(&self, text: String) {
        let _ = self.tx.send(OutputEvent::Note(text));
    }

    /// Opens the file (not following a FIFO or device into a block or endless read).
    fn open(&mut self) -> bool {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(&self.path);
        let file = match file {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return false,
            Err(e) => {
                self.open_error = Some(e.to_string());
                return false;
            }
        };
        let meta = match file.metadata() {
            Ok(m) => m,
            Err(e) => {
                self.open_error = Some(e.to_string());
                return false;
            }
        };
        if !meta.is_file() {
            self.note(format!(
                "{} is not a regular file (a FIFO, a device or a directory): not read",
                self.reader.what
            ));
            self.gave_up = true;
            return false;
        }
        self.ino = meta.ino();
        self.offset = 0;
        match (self.start, self.stale) {
            (StartAt::Beginning, Some((ino, len))) if ino == meta.ino() => self.offset = len,
            (StartAt::Now, _) => {
                // The header first (a CSV's column names), then from the end on.
                if self.reader.parser.needs_header() {
                    // An empty file: the header comes with the first write.
                    if let Some(h) = first_line(&file) {
                        self.lines = 1;
                        let _ = self.reader.line(&h, 1, &self.tx, 0);
                    }
                }
                if self.reader.parser.has_header() || !self.reader.parser.needs_header() {
                    self.offset = meta.len();
                }
            }
            _ => {}
        }
        self.file = Some(file);
        self.open_error = None;
        true
    }

    /// One look at the file: open it if needed, follow truncation and replacement, read what
    /// was appended.
    fn look(&mut self) {
        if self.file.is_none() && !self.open() {
            return;
        }
        // Replaced (a new file under the name) or truncated: read the new content from its start.
        let now = std::fs::metadata(&self.path).ok();
        let replaced = now.as_ref().is_some_and(|m| m.ino() != self.ino);
        let len = self
            .file
            .as_ref()
            .and_then(|f| f.metadata().ok())
            .map_or(0, |m| m.len());
        if replaced || len < self.offset {
            if self.offset > 0 && self.stale.is_none_or(|(_, l)| l != self.offset) {
                self.note(format!(
                    "{} was {} while it was read: read again from its start",
                    self.reader.what,
                    if replaced { "replaced" } else { "truncated" }
                ));
            }
            self.stale = None;
            self.pending.clear();
            self.too_long = false;
            self.reader.parser.restart();
            self.lines = 0;
            if replaced {
                self.file = None;
                self.start = StartAt::Beginning;
                if !self.open() {
                    return;
                }
            } else {
                self.offset = 0;
            }
        }
        let Some(file) = self.file.as_mut() else {
            return;
        };
        if file.seek(SeekFrom::Start(self.offset)).is_err() {
            return;
        }
        let mut chunk = Vec::new();
        let n = match file.take(MAX_READ).read_to_end(&mut chunk) {
            Ok(n) => n,
            Err(_) => return,
        };
        self.offset += n as u64;
        self.feed(&chunk);
    }

    fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            if b == b'\n' {
                self.lines += 1;
                if self.too_long {
                    self.bad += 1;
                    if self.bad <= MAX_LINE_NOTES {
                        self.note(format!(
                            "{} line {}: longer than {MAX_LINE} bytes; the line is skipped",
                            self.reader.what, self.lines
                        ));
                    }
                } else {
                    let text = String::from_utf8_lossy(&self.pending).into_owned();
                    if self.reader.line(&text, self.lines, &self.tx, self.bad) {
                        self.bad += 1;
                    }
                }
                self.pending.clear();
                self.too_long = false;
            } else if self.pending.len() < MAX_LINE {
                self.pending.push(b);
            } else {
                self.too_long = true;
            }
        }
    }

    /// After the last look: what could not be read.
    fn end(&mut self) {
        if self.file.is_none() && !self.gave_up {
            let why = match &self.open_error {
                Some(e) => format!("could not be opened ({e})"),
                None => "never appeared".to_string(),
            };
            self.note(format!(
                "{} {why}: no figures from it (is the path right, and writable by the scanner?)",
                self.reader.what
            ));
        }
        if !self.pending.is_empty() || self.too_long {
            self.note(format!(
                "{}: the last line ended without a newline ({} bytes): not read",
                self.reader.what,
                self.pending.len()
            ));
        }
        if let Some(n) = self.reader.summary_note(self.bad) {
            self.note(n);
        }
    }
}

/// The file's first line (without its newline), if it has a complete one.
fn first_line(file: &File) -> Option<String> {
    let mut head = Vec::new();
    let mut f = file;
    f.seek(SeekFrom::Start(0)).ok()?;
    f.take(MAX_LINE as u64).read_to_end(&mut head).ok()?;
    let end = head.iter().position(|b| *b == b'\n')?;
    Some(String::from_utf8_lossy(&head[..end]).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::sync::mpsc::{channel, Receiver};

    const ZMAP: &str = include_str!("../../tests/fixtures/status/zmap-2.1.1-status-updates.csv");

    fn reader() -> StatusReader {
        let set = crate::wrappers::ProfileSet::builtin().unwrap();
        let rule = set.get("zmap").unwrap().status[0].clone();
        StatusReader {
            parser: crate::wrappers::StatusParser::new(&rule, 2.0),
            base: 10,
            what: "zmap --status-updates-file z.csv".into(),
        }
    }

    fn dir() -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "scanprof-status-test-{}-{}",
            std::process::id(),
            crate::system::monotonic_ns()
        ));
        std::fs::create_dir(&d).unwrap();
        d
    }

    /// (sent-total readings, notes)
    fn drain(rx: &Receiver<OutputEvent>) -> (Vec<f64>, Vec<String>) {
        let (mut sent, mut notes) = (Vec::new(), Vec::new());
        for e in rx.try_iter() {
            match e {
                // base 10 + field 1 (sent-total)
                OutputEvent::Reading(r) if r.claim == 11 => sent.push(r.value),
                OutputEvent::Reading(_) => {}
                OutputEvent::Note(n) => notes.push(n),
            }
        }
        (sent, notes)
    }

    #[test]
    fn lines_written_in_pieces_are_read_once_complete_and_a_partial_last_line_is_named() {
        let d = dir();
        let path = d.join("z.csv");
        let (tx, rx) = channel();
        let mut t = Tailer::new(path.clone(), reader(), StartAt::Beginning, None, tx);
        t.look();
        assert!(t.file.is_none(), "no file yet");
        let mut f = std::fs::File::create(&path).unwrap();
        let lines: Vec<&str> = ZMAP.lines().collect();
        // The header and half of the first row.
        write!(f, "{}\n{}", lines[0], &lines[1][..10]).unwrap();
        t.look();
        assert_eq!(drain(&rx), (vec![], vec![]));
        writeln!(f, "{}", &lines[1][10..]).unwrap();
        for l in &lines[2..] {
            writeln!(f, "{l}").unwrap();
        }
        write!(f, "2026-11-25 09:10:42,3,0,").unwrap();
        t.look();
        t.end();
        let (sent, notes) = drain(&rx);
        // sent-total 0, 0, 55, 64 targets x 2 packets
        assert_eq!(sent, [0.0, 0.0, 110.0, 128.0]);
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(
            notes[0].contains("ended without a newline (24 bytes): not read"),
            "{notes:?}"
        );
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn garbage_truncation_and_a_missing_file_get_notes_not_failures() {
        let d = dir();
        let path = d.join("z.csv");
        let (tx, rx) = channel();
        let mut t = Tailer::new(path.clone(), reader(), StartAt::Beginning, None, tx.clone());
        let lines: Vec<&str> = ZMAP.lines().collect();
        let mut text = format!("{}\n", lines[0]);
        for i in 0..8 {
            text.push_str(&format!("garbage {i}\n"));
        }
        text.push_str(&format!("{}\n", lines[4]));
        std::fs::write(&path, &text).unwrap();
        t.look();
        // Truncated and rewritten (zmap's fopen "w" on a second run).
        std::fs::write(&path, format!("{}\n{}\n", lines[0], lines[3])).unwrap();
        t.look();
        t.end();
        let (sent, notes) = drain(&rx);
        assert_eq!(sent, [128.0, 110.0]);
        let unreadable = notes.iter().filter(|n| n.contains("the line is skipped")).count();
        assert_eq!(unreadable, 5, "the first five are named: {notes:?}");
        assert!(
            notes
                .iter()
                .any(|n| n.contains("3 more unreadable lines not listed (8 in all)")),
            "{notes:?}"
        );
        assert!(
            notes
                .iter()
                .any(|n| n.contains("was truncated while it was read")),
            "{notes:?}"
        );

        let mut never = Tailer::new(d.join("nothing.csv"), reader(), StartAt::Beginning, None, tx);
        never.look();
        never.end();
        let (_, notes) = drain(&rx);
        assert!(notes.iter().any(|n| n.contains("never appeared")), "{notes:?}");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn attach_reads_the_header_then_only_what_comes_after() {
        let d = dir();
        let path = d.join("z.csv");
        let lines: Vec<&str> = ZMAP.lines().collect();
        std::fs::write(&path, format!("{}\n{}\n{}\n", lines[0], lines[1], lines[4])).unwrap();
        let (tx, rx) = channel();
        let mut t = Tailer::new(path.clone(), reader(), StartAt::Now, None, tx);
        t.look();
        assert_eq!(drain(&rx), (vec![], vec![]), "nothing before attach");
        let mut f = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
        writeln!(f, "{}", lines[3]).unwrap();
        t.look();
        t.end();
        assert_eq!(drain(&rx), (vec![110.0], vec![]));
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_file_there_before_the_scanner_started_is_skipped_until_the_scanner_rewrites_it() {
        let d = dir();
        let path = d.join("z.csv");
        std::fs::write(&path, ZMAP).unwrap();
        let (tx, rx) = channel();
        let tail = StatusTail::start(path.clone(), reader(), StartAt::Beginning, tx).unwrap();
        std::thread::sleep(POLL * 3);
        let lines: Vec<&str> = ZMAP.lines().collect();
        std::fs::write(&path, format!("{}\n{}\n", lines[0], lines[3])).unwrap();
        std::thread::sleep(POLL * 3);
        tail.finish();
        assert_eq!(drain(&rx), (vec![110.0], vec![]));
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_fifo_is_not_read() {
        let d = dir();
        let path = d.join("fifo");
        nix::unistd::mkfifo(&path, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let (tx, rx) = channel();
        let mut t = Tailer::new(path.clone(), reader(), StartAt::Beginning, None, tx);
        t.look();
        assert!(t.gave_up);
        t.end();
        let (_, notes) = drain(&rx);
        assert!(
            notes.iter().any(|n| n.contains("is not a regular file")),
            "{notes:?}"
        );
        let _ = std::fs::remove_dir_all(&d);
    }
}
