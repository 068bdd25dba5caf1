//! A bundle on disk: one directory holding the run's NDJSON event stream, a Chrome/Perfetto
//! trace, report.md with its SVG plots, a bpftrace script, and the host facts. `write` makes one
//! from a Recording; `read` takes one back, line by line, keeping what it can when the input is
//! truncated or corrupt and saying where it stopped.

use std::collections::BTreeMap;
use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use anyhow::Context;
use regex::Regex;
use serde_json::Value;

use super::{markdown, plots, recount, trace, Meta, Recording};
use crate::analysis::{Snapshot, Summary};
use crate::views::json;

/// The event stream: `meta`, `started`, `sample`..., `summary` lines (docs/events.md).
pub const EVENTS: &str = "events.ndjson";
pub const TRACE: &str = "trace.json";
pub const REPORT: &str = "report.md";
pub const RATES_SVG: &str = "rates.svg";
pub const GAPS_SVG: &str = "gaps.svg";
pub const RECOUNT: &str = "recount.bt";
/// Host facts and the capability check, as JSON: {"machine": ..., "checks": ...}.
pub const SYSTEM: &str = "system.json";

/// What goes into a bundle besides the recording.
#[derive(Debug, Default)]
pub struct Extras {
    /// MachineFacts, serialized
    pub machine: Option<Value>,
    /// doctor's checks, serialized
    pub checks: Option<Value>,
    /// replace addresses and host names, consistently across every file
    pub redact: bool,
}

/// Writes the bundle into `dir` (created if missing) and returns the files written.
pub fn write(dir: &Path, rec: &Recording, extras: &Extras) -> anyhow::Result<Vec<PathBuf>> {
    fs::create_dir_all(dir).with_context(|| format!("creating the bundle directory {}", dir.display()))?;
    let mut redactor = Redactor::new(extras.redact, &rec.meta.hostname);
    let mut files: Vec<(&str, String)> = vec![(EVENTS, events_ndjson(rec))];
    files.push((TRACE, trace::chrome_trace(rec).to_string()));
    files.push((RATES_SVG, plots::rates_svg(rec)));
    let mut plot_list = vec![(RATES_SVG, "packets per second over time, per stage")];
    if let Some(svg) = plots::gap_cdf_svg(rec) {
        files.push((GAPS_SVG, svg));
        plot_list.push((GAPS_SVG, "inter-send gaps against the requested slot (CDF)"));
    }
    files.push((
        REPORT,
        markdown::report_md(rec, extras.machine.as_ref(), extras.checks.as_ref(), &plot_list),
    ));
    files.push((RECOUNT, recount::bpftrace_script(rec)));
    let system = serde_json::json!({ "machine": extras.machine, "checks": extras.checks });
    files.push((SYSTEM, serde_json::to_string_pretty(&system)?));
    let mut written = Vec::new();
    for (name, text) in files {
        let path = dir.join(name);
        fs::write(&path, redactor.apply(&text)).with_context(|| format!("writing {}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}

/// The recording as NDJSON lines.
pub fn events_ndjson(rec: &Recording) -> String {
    let mut out = String::new();
    let mut push = |line: String| {
        out.push_str(&line);
        out.push('\n');
    };
    push(json::line("meta", &rec.meta));
    push(json::line(
        "started",
        &serde_json::json!({ "processes": rec.processes, "probes": rec.probes }),
    ));
    for t in &rec.ticks {
        push(json::line("sample", t));
    }
    if let Some(s) = &rec.summary {
        push(json::line("summary", s));
    }
    out
}

/// A line of the event stream that could not be taken.
#[derive(Debug, Clone, PartialEq)]
pub struct ReadIssue {
    pub file: PathBuf,
    /// 1-based
    pub line: usize,
    pub problem: String,
}

impl std::fmt::Display for ReadIssue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} line {}: {}", self.file.display(), self.line, self.problem)
    }
}

/// Reads a bundle directory (or an events.ndjson file). Lines that cannot be read are skipped
/// and reported; it fails only when nothing of a scanprof recording is there at all.
pub fn read(path: &Path) -> anyhow::Result<(Recording, Vec<ReadIssue>)> {
    let file = if path.is_dir() {
        path.join(EVENTS)
    } else {
        path.to_path_buf()
    };
    let f = fs::File::open(&file).with_context(|| {
        if path.is_dir() {
            format!("{} has no {EVENTS}: is it a scanprof bundle?", path.display())
        } else {
            format!("opening {}", file.display())
        }
    })?;
    parse(BufReader::new(f), &file)
}

/// Reads an event stream from `reader`; `file` names it in the issues and errors.
pub fn parse(reader: impl BufRead, file: &Path) -> anyhow::Result<(Recording, Vec<ReadIssue>)> {
    let mut rec = Recording::default();
    let mut issues = Vec::new();
    let mut known = 0usize;
    let issue = |line: usize, problem: String| ReadIssue {
        file: file.to_path_buf(),
        line,
        problem,
    };
    for (i, line) in reader.split(b'\n').enumerate() {
        let n = i + 1;
        let bytes = match line {
            Ok(b) => b,
            Err(e) => {
                issues.push(issue(n, format!("read error: {e}")));
                break;
            }
        };
        let text = String::from_utf8_lossy(&bytes);
        let text = text.trim();
        if text.is_empty() {
            continue;
        }
        let value: Value = match serde_json::from_str(text) {
            Ok(v) => v,
            Err(e) => {
                issues.push(issue(
                    n,
                    format!("not JSON ({e}); the file may be truncated or corrupt"),
                ));
                continue;
            }
        };
        let kind = value
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let taken = match kind.as_str() {
            "meta" => serde_json::from_value::<Meta>(value).map(|m| rec.meta = m),
            "started" => serde_json::from_value::<Started>(value).map(|s| {
                rec.processes = s.processes;
                rec.probes = s.probes;
            }),
            "sample" => serde_json::from_value::<Snapshot>(value).map(|s| rec.ticks.push(s)),
            "summary" => serde_json::from_value::<Summary>(value).map(|s| rec.summary = Some(s)),
            "" => {
                issues.push(issue(
                    n,
                    "a JSON object without a \"type\": not a scanprof event".into(),
                ));
                continue;
            }
            other => {
                issues.push(issue(n, format!("unknown event type {other:?} (skipped)")));
                continue;
            }
        };
        match taken {
            Ok(()) => known += 1,
            Err(e) => issues.push(issue(n, format!("a {kind:?} line scanprof cannot read: {e}"))),
        }
    }
    if known == 0 {
        let first = issues.first().map(|i| format!(" ({i})")).unwrap_or_default();
        anyhow::bail!("{} holds no scanprof events{first}", file.display());
    }
    Ok((rec, issues))
}

#[derive(serde::Deserialize)]
struct Started {
    #[serde(default)]
    processes: Vec<crate::collect::family::ProcessInfo>,
    #[serde(default)]
    probes: Vec<crate::probes::ProbeStatus>,
}

/// Replaces IPv4 and IPv6 addresses and the host name with stand-ins, the same stand-in for the
/// same original everywhere (so flows stay recognisable). Loopback stays: it reveals nothing.
pub struct Redactor {
    on: bool,
    ipv4: Regex,
    ipv6: Regex,
    /// the host name as a whole word (so "vm" does not touch "kvm-clock")
    hostname: Option<(String, Regex)>,
    seen: BTreeMap<String, String>,
}

impl Redactor {
    pub fn new(on: bool, hostname: &str) -> Redactor {
        Redactor {
            on,
            ipv4: Regex::new(r"\b(?:25[0-5]|2[0-4]\d|1?\d?\d)(?:\.(?:25[0-5]|2[0-4]\d|1?\d?\d)){3}\b")
                .expect("a valid IPv4 pattern"),
            // Two or more hex groups joined by colons, with at least one "::" or 7 colons.
            ipv6: Regex::new(
                r"\b(?:[0-9a-fA-F]{1,4}:){2,7}[0-9a-fA-F]{0,4}\b|\b[0-9a-fA-F]{0,4}::[0-9a-fA-F:]+\b",
            )
            .expect("a valid IPv6 pattern"),
            hostname: (!hostname.is_empty())
                .then(|| {
                    Regex::new(&format!(r"\b{}\b", regex::escape(hostname)))
                        .ok()
                        .map(|re| (hostname.to_string(), re))
                })
                .flatten(),
            seen: BTreeMap::new(),
        }
    }

    fn stand_in(&mut self, original: &str, kind: &str) -> String {
        let n = self.seen.values().filter(|v| v.starts_with(kind)).count() + 1;
        self.seen
            .entry(original.to_string())
            .or_insert_with(|| format!("{kind}{n}"))
            .clone()
    }

    pub fn apply(&mut self, text: &str) -> String {
        if !self.on {
            return text.to_string();
        }
        let mut out = text.to_string();
        if let Some((h, re)) = self.hostname.clone() {
            let s = self.stand_in(&h, "host-");
            out = re.replace_all(&out, s.as_str()).into_owned();
        }
        for (re, kind) in [(self.ipv4.clone(), "ipv4-"), (self.ipv6.clone(), "ipv6-")] {
            let found: Vec<String> = re.find_iter(&out).map(|m| m.as_str().to_string()).collect();
            for addr in found {
                if addr.starts_with("127.")
                    || addr == "::1"
                    || (kind == "ipv6-" && !addr.contains("::") && addr.matches(':').count() < 7)
                {
                    continue;
                }
                let s = self.stand_in(&addr, kind);
                out = re
                    .replace_all(
                        &out,
                        |c: &regex::Captures<'_>| {
                            if c[0] == addr {
                                s.clone()
                            } else {
                                c[0].to_string()
                            }
                        },
                    )
                    .into_owned();
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::views::fixtures::rich_recording;

    fn tempdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("scanprof-bundle-{}-{tag}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn a_written_bundle_reads_back_as_the_same_recording() {
        let rec = rich_recording();
        let dir = tempdir("roundtrip");
        let files = write(&dir, &rec, &Extras::default()).unwrap();
        for name in [EVENTS, TRACE, REPORT, RATES_SVG, GAPS_SVG, RECOUNT, SYSTEM] {
            assert!(files.contains(&dir.join(name)), "{name} not written");
        }
        let (back, issues) = read(&dir).unwrap();
        assert!(issues.is_empty(), "{issues:?}");
        assert_eq!(back, rec);
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_truncated_stream_keeps_what_it_can_and_names_the_line() {
        let rec = rich_recording();
        let full = events_ndjson(&rec);
        let cut = &full[..full.len() - 200]; // mid-way through the summary line
        let dir = tempdir("truncated");
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join(EVENTS), cut).unwrap();
        let (back, issues) = read(&dir).unwrap();
        assert_eq!(back.ticks.len(), rec.ticks.len());
        assert!(back.summary.is_none());
        assert_eq!(issues.len(), 1, "{issues:?}");
        let lines = full.lines().count();
        assert_eq!(issues[0].line, lines, "{}", issues[0]);
        assert!(
            issues[0].to_string().contains("events.ndjson line"),
            "{}",
            issues[0]
        );
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn foreign_and_missing_input_is_refused_with_the_file_named() {
        let dir = tempdir("foreign");
        fs::create_dir_all(&dir).unwrap();
        let err = read(&dir).unwrap_err().to_string();
        assert!(err.contains("has no events.ndjson"), "{err}");
        fs::write(dir.join(EVENTS), "hello world\n{\"a\":1}\n").unwrap();
        let err = format!("{:#}", read(&dir).unwrap_err());
        assert!(
            err.contains("holds no scanprof events") && err.contains("line 1"),
            "{err}"
        );
        let _ = fs::remove_dir_all(&dir);
    }

    /// Deterministic mutations of a valid stream (byte flips, cuts, inserted garbage, swapped
    /// lines): the reader never panics, and whatever it returns is consistent. The cargo-fuzz
    /// target in fuzz/ does the same with coverage guidance.
    #[test]
    fn corrupted_streams_never_panic_the_reader() {
        let full = events_ndjson(&rich_recording()).into_bytes();
        let dir = tempdir("mutations");
        fs::create_dir_all(&dir).unwrap();
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for round in 0..300 {
            let mut bytes = full.clone();
            match round % 4 {
                0 => {
                    for _ in 0..1 + next() % 8 {
                        let i = (next() as usize) % bytes.len();
                        bytes[i] ^= 1 << (next() % 8);
                    }
                }
                1 => bytes.truncate((next() as usize) % bytes.len()),
                2 => {
                    let i = (next() as usize) % bytes.len();
                    bytes.splice(
                        i..i,
                        b"\x00\xff{\"type\":\"sample\",\"tick\":\"x\"}\n".iter().copied(),
                    );
                }
                _ => {
                    let mut lines: Vec<&[u8]> = full.split(|b| *b == b'\n').collect();
                    let (a, b) = ((next() as usize) % lines.len(), (next() as usize) % lines.len());
                    lines.swap(a, b);
                    bytes = lines.join(&b'\n');
                }
            }
            fs::write(dir.join(EVENTS), &bytes).unwrap();
            if let Ok((rec, issues)) = read(&dir) {
                for i in &issues {
                    assert!(i.line >= 1, "{i}");
                }
                let _ = rec.ticks.len();
            }
        }
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_short_host_name_is_replaced_only_as_a_whole_word() {
        let mut r = Redactor::new(true, "vm");
        assert_eq!(
            r.apply("vm uses kvm-clock; vm."),
            "host-1 uses kvm-clock; host-1."
        );
    }

    #[test]
    fn redaction_is_consistent_and_spares_loopback() {
        let mut r = Redactor::new(true, "lab-host");
        let out =
            r.apply("lab-host sent to 10.99.0.2:9000 and 10.99.0.2, then 192.0.2.7; lo 127.0.0.1; fe80::1:2");
        assert!(
            !out.contains("10.99.0.2") && !out.contains("192.0.2.7") && !out.contains("lab-host"),
            "{out}"
        );
        assert!(!out.contains("fe80::1:2"), "{out}");
        assert!(out.contains("127.0.0.1"), "{out}");
        assert_eq!(
            out.matches("ipv4-1").count(),
            2,
            "the same address, the same stand-in: {out}"
        );
        assert!(out.contains("ipv4-2") && out.contains("host-1"), "{out}");
        // The stand-ins hold across files (one Redactor per bundle).
        assert_eq!(r.apply("reply from 10.99.0.2"), "reply from ipv4-1");
        let mut off = Redactor::new(false, "lab-host");
        assert_eq!(off.apply("lab-host 10.99.0.2"), "lab-host 10.99.0.2");
    }

    #[test]
    fn a_redacted_bundle_holds_no_address_from_the_run() {
        let rec = rich_recording();
        let dir = tempdir("redacted");
        write(
            &dir,
            &rec,
            &Extras {
                redact: true,
                ..Default::default()
            },
        )
        .unwrap();
        for entry in fs::read_dir(&dir).unwrap() {
            let text = fs::read_to_string(entry.unwrap().path()).unwrap();
            assert!(!text.contains("10.99.0.2") && !text.contains("lab-host"));
        }
        let (back, _) = read(&dir).unwrap();
        assert!(
            back.meta.command_line.iter().any(|a| a.contains("ipv4-1")),
            "{:?}",
            back.meta.command_line
        );
        let _ = fs::remove_dir_all(&dir);
    }
}
