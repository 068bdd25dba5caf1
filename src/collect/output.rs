//! The scanner's own rate figures in its output: a launched command's stdout or stderr is passed
//! through to where it would have gone, and each line (ending at `\n` or `\r`, for status lines
//! that overwrite themselves) is matched against the profile's `[[claim]]` patterns.

use std::io::{Read, Write};
use std::sync::mpsc::Sender;
use std::thread::JoinHandle;

use regex::Regex;

use crate::system::monotonic_ns;
use crate::wrappers::OutputClaim;

/// One figure read from the output.
#[derive(Debug, Clone, PartialEq)]
pub struct OutputReading {
    /// index into the profile's claims
    pub claim: usize,
    /// packets per second
    pub pps: f64,
    /// CLOCK_MONOTONIC ns when the line was read
    pub ts_ns: u64,
}

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

/// Copies `from` to `to` as it arrives and sends every figure `matcher` finds.
pub fn tee(
    mut from: impl Read + Send + 'static,
    mut to: Box<dyn Write + Send>,
    matcher: Matcher,
    tx: Sender<OutputReading>,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("scanprof-output".into())
        .spawn(move || {
            // Copying a pipe needs no privilege at all (capabilities are per thread).
            let _ = crate::system::privileges::drop_to(&[]);
            let mut buf = [0u8; 8192];
            let mut line: Vec<u8> = Vec::new();
            loop {
                let n = match from.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                let _ = to.write_all(&buf[..n]);
                let _ = to.flush();
                for &b in &buf[..n] {
                    if b == b'\n' || b == b'\r' {
                        let text = String::from_utf8_lossy(&line);
                        let now = monotonic_ns();
                        for (claim, pps) in matcher.scan(&text) {
                            let _ = tx.send(OutputReading {
                                claim,
                                pps,
                                ts_ns: now,
                            });
                        }
                        line.clear();
                    } else if line.len() < 4096 {
                        line.push(b);
                    }
                }
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let input: &'static [u8] = b"rate: 10\rrate: 20\rdone\n";
        tee(input, Box::new(Sink(out.clone())), m, tx)
            .unwrap()
            .join()
            .unwrap();
        let got: Vec<f64> = rx.try_iter().map(|r| r.pps).collect();
        assert_eq!(got, [10.0, 20.0]);
        assert_eq!(&*out.lock().unwrap(), input);
    }
}
