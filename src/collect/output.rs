//! The scanner's own rate figures in its output: a launched command's stdout or stderr is passed
//! through to where it would have gone, and each line (ending at `\n` or `\r`, for status lines
//! that overwrite themselves) is matched against the profile's `[[claim]]` patterns, and read as
//! its machine-readable status when a `[[status]]` goes to that stream (masscan `--status-ndjson`).

use std::io::{Read, Write};
use std::sync::mpsc::Sender;
use std::thread::JoinHandle;

use regex::Regex;

use crate::system::monotonic_ns;
use crate::wrappers::OutputClaim;

/// One figure read from the output.
#[derive(Debug, Clone, PartialEq)]
pub struct OutputReading {
    /// index into the run's claim specs (the profile's claims, then its status fields)
    pub claim: usize,
    /// packets per second for a rate, else a count
    pub value: f64,
    /// CLOCK_MONOTONIC ns when the line was read
    pub ts_ns: u64,
}

/// What the readers of the scanner's output report to the collection thread.
#[derive(Debug, Clone, PartialEq)]
pub enum OutputEvent {
    /// a figure
    Reading(OutputReading),
    /// something that could not be read, for the scanner view's notes
    Note(String),
}

/// A status parser on a stream or file, and where its fields start among the claim specs.
#[derive(Debug, Clone)]
pub struct StatusReader {
    pub parser: crate::wrappers::StatusParser,
    /// claim index of the status's first field
    pub base: usize,
    /// what it is, for notes (`zmap --status-updates-file /tmp/z.csv`)
    pub what: String,
}

impl StatusReader {
    /// Reads one complete line (1-based `number`) and reports its figures, or a note on the
    /// first few bad lines; returns whether the line was bad.
    pub fn line(&mut self, text: &str, number: u64, tx: &Sender<OutputEvent>, bad_so_far: u64) -> bool {
        match self.parser.line(text) {
            Ok(figures) => {
                let now = monotonic_ns();
                for (i, v) in figures {
                    let _ = tx.send(OutputEvent::Reading(OutputReading {
                        claim: self.base + i,
                        value: v,
                        ts_ns: now,
                    }));
                }
                false
            }
            Err(why) => {
                if bad_so_far < MAX_LINE_NOTES {
                    let _ = tx.send(OutputEvent::Note(format!(
                        "{} line {number}: {why}; the line is skipped",
                        self.what
                    )));
                }
                true
            }
        }
    }

    /// The note that sums up bad lines past the first few.
    pub fn summary_note(&self, bad: u64) -> Option<String> {
        (bad > MAX_LINE_NOTES).then(|| {
            format!(
                "{}: {} more unreadable lines not listed ({bad} in all)",
                self.what,
                bad - MAX_LINE_NOTES
            )
        })
    }
}

/// Unreadable status lines named one by one; the rest are counted.
pub const MAX_LINE_NOTES: u64 = 5;
/// Longest status line kept; longer ones are skipped with a note.
pub const MAX_LINE: usize = 64 * 1024;

/// The claims of one stream, compiled.
#[derive(Debug, Clone)]
pub struct Matcher {
    rules: Vec<(usize, OutputClaim, Regex)>,
}

impl Matcher {
    /// The claims that watch `stream` (`stdout` or `stderr`); None when there are none.
    pub fn for_stream(claims: &[OutputClaim], stream: &str) -> Option<Matcher> {
        let rules: Vec<(usize, OutputClaim, Regex)> = claims
            .iter()
            .enumerate()
            .filter(|(_, c)| c.stream == stream)
            .filter_map(|(i, c)| Some((i, c.clone(), Regex::new(&c.pattern).ok()?)))
            .collect();
        (!rules.is_empty()).then_some(Matcher { rules })
    }

    /// Every figure in one line, in packets per second.
    pub fn scan(&self, line: &str) -> Vec<(usize, f64)> {
        let mut out = Vec::new();
        for (i, claim, re) in &self.rules {
            for caps in re.captures_iter(line) {
                let Some(v) = caps.get(1).and_then(|m| m.as_str().parse::<f64>().ok()) else {
                    continue;
                };
                let scale = match caps.get(2) {
                    Some(unit) => match claim.units.get(unit.as_str()) {
                        Some(m) => *m,
                        None => continue,
                    },
                    None => claim.scale,
                };
                out.push((*i, v * scale));
            }
        }
        out
    }
}

/// Copies `from` to `to` as it arrives and sends every figure `matcher` finds and every figure
/// of the status `status` reads from the stream.
pub fn tee(
    mut from: impl Read + Send + 'static,
    mut to: Box<dyn Write + Send>,
    matcher: Option<Matcher>,
    mut status: Option<StatusReader>,
    tx: Sender<OutputEvent>,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("scanprof-output".into())
        .spawn(move || {
            // Copying a pipe needs no privilege at all (capabilities are per thread).
            let _ = crate::system::privileges::drop_to(&[]);
            let mut buf = [0u8; 8192];
            let mut line: Vec<u8> = Vec::new();
            // The status (NDJSON on stderr) ends its records at `\n` only; the status lines at
            // `\r` too. Its line is kept apart, bounded by MAX_LINE.
            let mut record: Vec<u8> = Vec::new();
            let (mut number, mut bad, mut too_long) = (0u64, 0u64, false);
            loop {
                let n = match from.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                let _ = to.write_all(&buf[..n]);
                let _ = to.flush();
                for &b in &buf[..n] {
                    if b == b'\n' || b == b'\r' {
                        if let Some(m) = &matcher {
                            let text = String::from_utf8_lossy(&line);
                            let now = monotonic_ns();
                            for (claim, value) in m.scan(&text) {
                                let _ = tx.send(OutputEvent::Reading(OutputReading {
                                    claim,
                                    value,
                                    ts_ns: now,
                                }));
                            }
                        }
                        line.clear();
                    } else if line.len() < 4096 {
                        line.push(b);
                    }
                    let Some(st) = status.as_mut() else { continue };
                    if b == b'\n' {
                        number += 1;
                        if too_long {
                            bad += 1;
                            if bad <= MAX_LINE_NOTES {
                                let _ = tx.send(OutputEvent::Note(format!(
                                    "{} line {number}: longer than {MAX_LINE} bytes; the line is skipped",
                                    st.what
                                )));
                            }
                        } else if !record.is_empty() {
                            let text = String::from_utf8_lossy(&record);
                            // Other lines share the stream (masscan's banner): only lines that
                            // open like a record are the status's.
                            if st.parser.may_be_record(&text) && st.line(&text, number, &tx, bad) {
                                bad += 1;
                            }
                        }
                        record.clear();
                        too_long = false;
                    } else if record.len() < MAX_LINE {
                        record.push(b);
                    } else {
                        too_long = true;
                    }
                }
            }
            if let Some(st) = &status {
                if !record.is_empty() {
                    let _ = tx.send(OutputEvent::Note(format!(
                        "{}: the last line ended without a newline ({} bytes): not read",
                        st.what,
                        record.len()
                    )));
                }
                if let Some(n) = st.summary_note(bad) {
                    let _ = tx.send(OutputEvent::Note(n));
                }
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A destination for the tee that keeps what it was given, for the test to read.
    struct Sink(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl Write for Sink {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn claim(pattern: &str, scale: f64, units: &[(&str, f64)]) -> OutputClaim {
        OutputClaim {
            name: "rate".into(),
            stream: "stderr".into(),
            pattern: pattern.into(),
            scale,
            units: units.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            what: "status".into(),
        }
    }

    #[test]
    fn masscan_and_zmap_status_lines() {
        let m = Matcher::for_stream(&[claim(r"rate:\s*([0-9.]+)-kpps", 1000.0, &[])], "stderr").unwrap();
        assert_eq!(
            m.scan("rate:  0.98-kpps, 100.00% done, waiting 0-secs, found=0       "),
            [(0, 980.0)]
        );
        let z = Matcher::for_stream(
            &[claim(
                r"send: \d+ ([0-9.]+) ([KMG]?p/s)",
                1.0,
                &[("p/s", 1.0), ("Kp/s", 1e3), ("Mp/s", 1e6)],
            )],
            "stderr",
        )
        .unwrap();
        assert_eq!(
            z.scan(" 0:02 40%; send: 2001 1.00 Kp/s (998 p/s avg); recv: 0"),
            [(0, 1000.0)]
        );
        assert!(z.scan("send: 5 3 furlongs").is_empty());
        assert!(Matcher::for_stream(&[claim("x(1)", 1.0, &[])], "stdout").is_none());
    }

    #[test]
    fn the_shipped_profiles_read_their_scanners_status_lines() {
        let set = crate::wrappers::ProfileSet::builtin().unwrap();
        let masscan = Matcher::for_stream(&set.get("masscan").unwrap().claims, "stderr").unwrap();
        assert_eq!(
            masscan.scan("rate: 19.99-kpps, 42.17% done,   0:00:03 remaining, found=0       "),
            [(0, 19_990.0)]
        );
        let zmap = Matcher::for_stream(&set.get("zmap").unwrap().claims, "stderr").unwrap();
        assert_eq!(
            zmap.scan(" 0:03 30% (7s left); send: 3012 1.01 Kp/s (1.00 Kp/s avg); recv: 0 0 p/s (0 p/s avg)"),
            [(0, 1010.0)]
        );
    }

    #[test]
    fn tee_passes_output_through_and_splits_at_carriage_returns() {
        let m = Matcher::for_stream(&[claim(r"rate: ([0-9.]+)", 1.0, &[])], "stderr").unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let out = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let input: &'static [u8] = b"rate: 10\rrate: 20\rdone\n";
        tee(input, Box::new(Sink(out.clone())), Some(m), None, tx)
            .unwrap()
            .join()
            .unwrap();
        let got: Vec<f64> = rx
            .try_iter()
            .filter_map(|e| match e {
                OutputEvent::Reading(r) => Some(r.value),
                OutputEvent::Note(_) => None,
            })
            .collect();
        assert_eq!(got, [10.0, 20.0]);
        assert_eq!(&*out.lock().unwrap(), input);
    }

    /// masscan --status-ndjson on stderr: its banner lines pass, its records are read, a record
    /// cut in the middle is named, and what the scanner printed reaches its destination whole.
    #[test]
    fn a_status_stream_is_read_beside_the_status_lines() {
        let sample = include_str!("../../tests/fixtures/status/masscan-1.3.9-status-ndjson.stderr");
        let set = crate::wrappers::ProfileSet::builtin().unwrap();
        let masscan = set.get("masscan").unwrap();
        let reader = StatusReader {
            parser: crate::wrappers::StatusParser::new(&masscan.status[0], 1.0),
            base: 1,
            what: "masscan --status-ndjson (stderr)".into(),
        };
        let mut input = sample.to_string();
        input.push_str("{\"state\":\"running\",\"rate\n{\"state\":\"waiting\",\"rate\":{\"pps\":0.00}");
        let input: &'static [u8] = Box::leak(input.into_bytes().into_boxed_slice());
        let (tx, rx) = std::sync::mpsc::channel();
        let out = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let lines = Matcher::for_stream(&masscan.claims, "stderr");
        tee(input, Box::new(Sink(out.clone())), lines, Some(reader), tx)
            .unwrap()
            .join()
            .unwrap();
        let (mut sent, mut notes) = (Vec::new(), Vec::new());
        for e in rx.try_iter() {
            match e {
                OutputEvent::Reading(r) if r.claim == 2 => sent.push(r.value),
                OutputEvent::Reading(_) => {}
                OutputEvent::Note(n) => notes.push(n),
            }
        }
        assert_eq!(sent.len(), 11, "{sent:?}");
        assert_eq!(sent.last(), Some(&2000.0));
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(notes[0].contains("line 15: not a JSON object"), "{notes:?}");
        assert!(notes[1].contains("ended without a newline"), "{notes:?}");
        assert_eq!(&*out.lock().unwrap(), input);
    }
}
