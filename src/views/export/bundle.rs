//! A bundle on disk: one directory holding the run's NDJSON event stream, a Perfetto trace
//! and its Chrome JSON twin, report.md with its SVG plots, a bpftrace script, and the host
//! facts. `write` makes one from a Recording; `read` takes one back, line by line, keeping
//! what it can when the input is truncated or corrupt and saying where it stopped.

use std::collections::BTreeMap;
use std::fs;
use std::io::{BufRead, BufReader, Read};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use anyhow::Context;
use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;
use regex::Regex;
use serde_json::Value;

use super::{markdown, pcap, perfetto, plots, recount, trace, Meta, Recording};
use crate::analysis::{Snapshot, Summary, SCHEMA_VERSION};
use crate::system::user_files::{self, Links};
use crate::views::json;

/// The event stream: `meta`, `started`, `sample`..., `summary` lines (docs/events.md).
pub const EVENTS: &str = "events.ndjson";
/// Chrome trace-event JSON (trace::chrome_text).
pub const TRACE: &str = "trace.json";
/// Perfetto's native protobuf trace (perfetto::perfetto_trace), on the BPF side's clock.
pub const PERFETTO: &str = "trace.perfetto-trace";
pub const REPORT: &str = "report.md";
pub const RATES_SVG: &str = "rates.svg";
pub const GAPS_SVG: &str = "gaps.svg";
pub const RECOUNT: &str = "recount.bt";
/// Host facts and the capability check, as JSON: {"machine": ..., "checks": ...}.
pub const SYSTEM: &str = "system.json";
/// The family's dropped packets' headers (sampled), pcapng: only from a run's own summary (not
/// a summary read back), and not in a redacted bundle (the headers hold addresses).
pub const PCAP: &str = "drops.pcapng";

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

/// Every file name a bundle may hold: what `--force` removes from an earlier bundle, and what a
/// write replaces (a name this write does not produce, such as an old gaps.svg, is removed so
/// that `report` cannot take it for this run's).
pub const FILES: [&str; 9] = [
    EVENTS, TRACE, PERFETTO, REPORT, RATES_SVG, GAPS_SVG, RECOUNT, SYSTEM, PCAP,
];

/// A bundle directory, opened once: every file is created relative to this handle, so a
/// directory swapped for a symlink after the check cannot redirect the writes.
#[derive(Debug, Clone)]
pub struct BundleDir {
    pub path: PathBuf,
    fd: std::sync::Arc<OwnedFd>,
}

impl BundleDir {
    /// Creates `path` if missing (mode 0755, parents too) and opens it without following a
    /// symlink at its last component. An existing directory that holds anything is refused
    /// unless `force`; with `force`, the files of an earlier bundle in it are removed (other
    /// files are left alone).
    pub fn open(path: &Path, force: bool) -> anyhow::Result<BundleDir> {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            fs::create_dir_all(parent)
                .with_context(|| format!("creating {} for the bundle", parent.display()))?;
        }
        match fs::create_dir(path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => {
                return Err(e).with_context(|| format!("creating the bundle directory {}", path.display()))
            }
        }
        let fd = nix::fcntl::open(
            path,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| match e {
            Errno::ELOOP | Errno::ENOTDIR => anyhow::anyhow!(
                "{} is a symbolic link or not a directory: give a real directory for the bundle",
                path.display()
            ),
            e => anyhow::anyhow!("opening the bundle directory {}: {e}", path.display()),
        })?;
        let dir = BundleDir {
            path: path.to_path_buf(),
            fd: std::sync::Arc::new(fd),
        };
        let entries: Vec<String> = fs::read_dir(dir.proc_path())
            .with_context(|| format!("listing {}", path.display()))?
            .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
            .collect();
        if !entries.is_empty() && !force {
            anyhow::bail!(
                "{} is not empty ({} entries, e.g. {}): give a new or empty directory, or --force \
                 to replace the bundle files in it",
                path.display(),
                entries.len(),
                entries[0]
            );
        }
        if force {
            for name in FILES {
                dir.remove(name)?;
                dir.remove(&partial_name(name))?;
            }
        }
        Ok(dir)
    }

    /// Whether this process's effective uid owns the directory (so writing into it needs no
    /// CAP_DAC_OVERRIDE).
    pub fn owned_by_me(&self) -> bool {
        nix::sys::stat::fstat(&*self.fd).is_ok_and(|st| st.st_uid == nix::unistd::geteuid().as_raw())
    }

    /// The directory through its open handle (for listing it).
    fn proc_path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}", self.fd.as_raw_fd()))
    }

    /// Removes `name` from the directory if it is there; a symlink is removed, never followed.
    fn remove(&self, name: &str) -> anyhow::Result<()> {
        match nix::unistd::unlinkat(&*self.fd, name, nix::unistd::UnlinkatFlags::NoRemoveDir) {
            Ok(()) | Err(Errno::ENOENT) => Ok(()),
            Err(e) => Err(anyhow::anyhow!(
                "removing {} from {}: {e}",
                name,
                self.path.display()
            )),
        }
    }

    /// Writes `name` whole or not at all: into a new `.NAME.partial` (O_CREAT|O_EXCL|O_NOFOLLOW,
    /// so nothing planted there is followed or reused), synced, then renamed over `name` (which
    /// replaces whatever entry was there, a symlink included, without following it). On failure
    /// the partial file is removed and the error says the write failed.
    pub fn write_file(&self, name: &str, bytes: &[u8]) -> anyhow::Result<PathBuf> {
        self.write_with(name, |w| w.write_all(bytes))
    }

    /// [`BundleDir::write_file`] with the contents written by `fill`, through a buffer, so that
    /// they need not be in memory at once.
    pub fn write_with(
        &self,
        name: &str,
        fill: impl FnOnce(&mut dyn std::io::Write) -> std::io::Result<()>,
    ) -> anyhow::Result<PathBuf> {
        use std::io::Write;
        let partial = partial_name(name);
        self.remove(&partial)?;
        let path = self.path.join(name);
        let fd = nix::fcntl::openat(
            &*self.fd,
            partial.as_str(),
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o644),
        )
        .with_context(|| {
            format!(
                "creating {} (O_EXCL, no symlink followed)",
                self.path.join(&partial).display()
            )
        })?;
        let mut out = std::io::BufWriter::new(fs::File::from(fd));
        let mut bytes = 0u64;
        let written = fill(&mut CountingWriter(&mut out, &mut bytes))
            .and_then(|()| out.flush())
            .and_then(|()| out.get_ref().sync_all())
            .map_err(anyhow::Error::from)
            .and_then(|()| {
                nix::fcntl::renameat(&*self.fd, partial.as_str(), &*self.fd, name)
                    .map_err(anyhow::Error::from)
            });
        if let Err(e) = written {
            drop(out);
            let _ = self.remove(&partial);
            return Err(e.context(format!(
                "writing {} failed (after {bytes} bytes); no partial file was kept",
                path.display()
            )));
        }
        Ok(path)
    }
}

/// A writer that counts the bytes it passes on.
struct CountingWriter<'a, W: std::io::Write>(&'a mut W, &'a mut u64);

impl<W: std::io::Write> std::io::Write for CountingWriter<'_, W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.0.write(buf)?;
        *self.1 += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

/// The temporary name a bundle file is written under before it is renamed into place.
fn partial_name(name: &str) -> String {
    format!(".{name}.partial")
}

/// Writes the bundle into `dir` and returns the files written. Each file is written whole or
/// not at all; a bundle file of an earlier write that this one does not produce is removed.
pub fn write(dir: &BundleDir, rec: &Recording, extras: &Extras) -> anyhow::Result<Vec<PathBuf>> {
    // One file rendered and written at a time, so a long run's bundle holds one file's text in
    // memory at most (events.ndjson, the largest, not even that: it is written line by line).
    let mut redactor = Redactor::new(extras.redact, &rec.meta.hostname);
    let gaps = plots::gap_cdf_svg(rec);
    let mut plot_list = vec![(RATES_SVG, "packets per second over time, per stage")];
    if gaps.is_some() {
        plot_list.push((GAPS_SVG, "inter-send gaps against the requested slot (CDF)"));
    }
    let mut names = vec![EVENTS, TRACE, PERFETTO, RATES_SVG];
    names.extend(gaps.is_some().then_some(GAPS_SVG));
    names.extend([REPORT, RECOUNT, SYSTEM]);
    let pcap_of = rec
        .summary
        .as_ref()
        .filter(|s| s.dropped_headers.sampling.is_some() && !extras.redact);
    names.extend(pcap_of.is_some().then_some(PCAP));
    for stale in FILES.iter().filter(|n| !names.contains(n)) {
        dir.remove(stale)?;
    }
    let mut written = vec![dir.write_with(EVENTS, |w| {
        for line in events_lines(rec) {
            w.write_all(redactor.apply(&line).as_bytes())?;
            w.write_all(b"\n")?;
        }
        Ok(())
    })?];
    // One model of the trace, rendered twice (and dropped before the next file). The binary
    // file is redacted string by string: a text pass over it would break its lengths.
    {
        let model = trace::TraceModel::of(rec);
        let json = trace::chrome_text(&model);
        written.push(dir.write_file(TRACE, redactor.apply(&json).as_bytes())?);
        drop(json);
        let bytes = perfetto::perfetto_trace(&model, &mut |s| redactor.apply(s).into_owned());
        written.push(dir.write_file(PERFETTO, &bytes)?);
    }
    let mut put = |name: &str, text: String| -> anyhow::Result<()> {
        written.push(dir.write_file(name, redactor.apply(&text).as_bytes())?);
        Ok(())
    };
    put(RATES_SVG, plots::rates_svg(rec))?;
    if let Some(svg) = gaps {
        put(GAPS_SVG, svg)?;
    }
    put(
        REPORT,
        markdown::report_md(rec, extras.machine.as_ref(), extras.checks.as_ref(), &plot_list),
    )?;
    put(RECOUNT, recount::bpftrace_script(rec))?;
    let system = serde_json::json!({ "machine": extras.machine, "checks": extras.checks });
    put(SYSTEM, serde_json::to_string_pretty(&system)?)?;
    if let Some(summary) = pcap_of {
        written.push(dir.write_with(PCAP, |w| {
            pcap::write(w, summary).map(|_| ()).map_err(std::io::Error::other)
        })?);
    }
    Ok(written)
}

/// The recording's NDJSON lines, one at a time.
fn events_lines(rec: &Recording) -> impl Iterator<Item = String> + '_ {
    let head = [
        json::line("meta", &rec.meta),
        json::line(
            "started",
            &serde_json::json!({ "processes": rec.processes, "probes": rec.probes, "clocks": rec.clocks }),
        ),
    ];
    head.into_iter()
        .chain(rec.ticks.iter().map(|t| json::line("sample", t)))
        .chain(rec.summary.iter().map(|s| json::line("summary", s)))
}

/// The recording as NDJSON lines.
pub fn events_ndjson(rec: &Recording) -> String {
    let mut out = String::new();
    for line in events_lines(rec) {
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// The most bytes of events.ndjson that `report` reads: a longer file is refused (a day at
/// 1 s ticks is ~100 MB), so that a hostile or runaway file cannot exhaust memory.
pub const MAX_EVENTS_BYTES: u64 = 256 << 20;
/// The longest line taken; a longer one is skipped without being held in memory.
pub const MAX_LINE_BYTES: usize = 4 << 20;
/// Unreadable lines listed one by one; beyond these they are only counted.
pub const MAX_LISTED_ISSUES: usize = 100;

/// A line of the event stream that could not be taken.
#[derive(Debug, Clone, PartialEq)]
pub struct ReadIssue {
    pub file: PathBuf,
    /// 1-based
    pub line: usize,
    pub problem: String,
    /// lines this entry stands for: 1, or more for the closing "and N more" entry
    pub lines: usize,
}

impl std::fmt::Display for ReadIssue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The problem may quote the line (serde names an unknown value): shown, not sent.
        write!(
            f,
            "{} line {}: {}",
            self.file.display(),
            self.line,
            crate::views::report::visible(&self.problem)
        )
    }
}

/// The most bytes of system.json that `report` reads.
pub const MAX_SYSTEM_BYTES: u64 = 16 << 20;

/// Opens a bundle file for reading: a regular file of at most `cap` bytes, and not through a
/// symbolic link (one is refused, not followed out of the bundle).
pub fn open_regular(file: &Path, cap: u64) -> anyhow::Result<std::io::Take<fs::File>> {
    user_files::open_regular(file, cap, Links::Refuse)
}

/// A bundle's system.json, if it is there as a regular file of sane size and valid JSON.
pub fn read_system(dir: &Path) -> Option<Value> {
    let mut text = String::new();
    open_regular(&dir.join(SYSTEM), MAX_SYSTEM_BYTES)
        .ok()?
        .read_to_string(&mut text)
        .ok()?;
    serde_json::from_str(&text).ok()
}

/// Reads a bundle directory (or an events.ndjson file). Lines that cannot be read are skipped
/// and reported; it fails only when nothing of a scanprof recording is there at all.
pub fn read(path: &Path) -> anyhow::Result<(Recording, Vec<ReadIssue>)> {
    let file = if path.is_dir() {
        path.join(EVENTS)
    } else {
        path.to_path_buf()
    };
    let f = match open_regular(&file, MAX_EVENTS_BYTES) {
        Ok(f) => f,
        Err(e) if path.is_dir() && !file.exists() && fs::symlink_metadata(&file).is_err() => {
            return Err(e.context(format!(
                "{} has no {EVENTS}: is it a scanprof bundle?",
                path.display()
            )))
        }
        Err(e) => return Err(e),
    };
    parse(BufReader::new(f), &file)
}

/// Reads one line of at most `max` bytes into `buf` (without the newline). Returns None at the
/// end; Some(false) when the line was longer (the rest of it is read and dropped, not held).
fn next_line(reader: &mut impl BufRead, buf: &mut Vec<u8>, max: usize) -> std::io::Result<Option<bool>> {
    buf.clear();
    let mut fits = true;
    let mut any = false;
    loop {
        let chunk = reader.fill_buf()?;
        if chunk.is_empty() {
            return Ok(any.then_some(fits));
        }
        any = true;
        let (take, done) = match chunk.iter().position(|b| *b == b'\n') {
            Some(i) => (i, true),
            None => (chunk.len(), false),
        };
        if fits && buf.len() + take <= max {
            buf.extend_from_slice(&chunk[..take]);
        } else {
            fits = false;
            buf.clear();
        }
        reader.consume(if done { take + 1 } else { take });
        if done {
            return Ok(Some(fits));
        }
    }
}

/// Reads an event stream from `reader`; `file` names it in the issues and errors. At most
/// [`MAX_LISTED_ISSUES`] unreadable lines are listed; the rest are counted in a closing entry.
pub fn parse(mut reader: impl BufRead, file: &Path) -> anyhow::Result<(Recording, Vec<ReadIssue>)> {
    let mut rec = Recording::default();
    let mut issues = Vec::new();
    let mut unlisted = 0usize;
    let mut last_unlisted = 0usize;
    let mut known = 0usize;
    let mut buf = Vec::new();
    let mut n = 0usize;
    let mut push = |issues: &mut Vec<ReadIssue>, line: usize, problem: String| {
        if issues.len() < MAX_LISTED_ISSUES {
            issues.push(ReadIssue {
                file: file.to_path_buf(),
                line,
                problem,
                lines: 1,
            });
        } else {
            unlisted += 1;
            last_unlisted = line;
        }
    };
    loop {
        let fits = match next_line(&mut reader, &mut buf, MAX_LINE_BYTES) {
            Ok(Some(fits)) => fits,
            Ok(None) => break,
            Err(e) => {
                push(&mut issues, n + 1, format!("read error: {e}"));
                break;
            }
        };
        n += 1;
        if !fits {
            push(
                &mut issues,
                n,
                format!(
                    "a line over {} MiB (skipped): not a scanprof event",
                    MAX_LINE_BYTES >> 20
                ),
            );
            continue;
        }
        let text = String::from_utf8_lossy(&buf);
        let text = text.trim();
        if text.is_empty() {
            continue;
        }
        let value: Value = match serde_json::from_str(text) {
            Ok(v) => v,
            Err(e) => {
                push(
                    &mut issues,
                    n,
                    format!("not JSON ({e}); the file may be truncated or corrupt"),
                );
                continue;
            }
        };
        let kind = value
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        if let Some(problem) = unreadable_schema(&kind, &value) {
            push(&mut issues, n, problem);
            continue;
        }
        let taken = match kind.as_str() {
            "meta" => decode::<Meta>(text).map(|m| rec.meta = m),
            "started" => decode::<Started>(text).map(|s| {
                rec.processes = s.processes;
                rec.probes = s.probes;
                rec.clocks = s.clocks;
            }),
            "sample" => decode::<Snapshot>(text).map(|s| rec.ticks.push(s)),
            "summary" => decode::<Summary>(text).map(|s| rec.summary = Some(s)),
            "" => {
                push(
                    &mut issues,
                    n,
                    "a JSON object without a \"type\": not a scanprof event".into(),
                );
                continue;
            }
            other => {
                push(&mut issues, n, format!("unknown event type {other:?} (skipped)"));
                continue;
            }
        };
        match taken {
            Ok(()) => known += 1,
            Err(e) => push(
                &mut issues,
                n,
                format!("a {kind:?} line scanprof cannot read: {e}"),
            ),
        }
    }
    if unlisted > 0 {
        issues.push(ReadIssue {
            file: file.to_path_buf(),
            line: last_unlisted,
            problem: format!(
                "and {unlisted} more unreadable lines up to this one (only the first {MAX_LISTED_ISSUES} are listed)"
            ),
            lines: unlisted,
        });
    }
    if known == 0 {
        // Every line that could not be read, each named (they are at most MAX_LISTED_ISSUES + 1).
        let lines: String = issues.iter().map(|i| format!("\n  {i}")).collect();
        anyhow::bail!("{} holds no scanprof events{lines}", file.display());
    }
    Ok((rec, issues))
}

/// One line decoded as `T`; the error is serde's message and the key whose value it could not
/// take (serde_json says only the column): "invalid type: floating point `1.8e19`, expected
/// u64 (at \"send_calls\", column 1234)".
fn decode<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, String> {
    serde_json::from_str(text).map_err(|e| {
        let whole = e.to_string();
        let message = whole
            .strip_suffix(&format!(" at line {} column {}", e.line(), e.column()))
            .unwrap_or(&whole);
        match key_before(text, e.column()) {
            Some(key) => format!("{message} (at {key:?}, column {})", e.column()),
            None => format!("{message} (column {})", e.column()),
        }
    })
}

/// The last object key that starts before byte `column` (1-based) of a one-line JSON text.
fn key_before(text: &str, column: usize) -> Option<&str> {
    let upto = text.get(..column.min(text.len()))?;
    let colon = upto.rfind("\":")?;
    let open = upto[..colon].rfind('"')?;
    Some(&upto[open + 1..colon])
}

/// Why a `sample` or `summary` line's layout is not one this scanprof reads: its
/// `schema_version` is newer than [`SCHEMA_VERSION`] (or 0, or not a number). None when it
/// is readable, or carries no version (then decoding says what is missing).
fn unreadable_schema(kind: &str, value: &Value) -> Option<String> {
    if !matches!(kind, "sample" | "summary") {
        return None;
    }
    let v = value.get("schema_version")?;
    match v.as_u64() {
        Some(n) if (1..=u64::from(SCHEMA_VERSION)).contains(&n) => None,
        _ => Some(format!(
            "a {kind:?} line of schema_version {v}, which this scanprof ({}) does not read (it \
             reads 1 to {SCHEMA_VERSION}, docs/events.md): re-render it with the scanprof that \
             wrote it (the version on its meta line), or a newer one",
            env!("CARGO_PKG_VERSION")
        )),
    }
}

#[derive(serde::Deserialize)]
struct Started {
    #[serde(default)]
    processes: Vec<crate::collect::family::ProcessInfo>,
    #[serde(default)]
    probes: Vec<crate::probes::ProbeStatus>,
    /// absent (or null) in bundles written before the clocks were recorded
    #[serde(default)]
    clocks: Option<crate::system::ClockReadings>,
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

    pub fn apply<'a>(&mut self, text: &'a str) -> std::borrow::Cow<'a, str> {
        if !self.on {
            return std::borrow::Cow::Borrowed(text);
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
        std::borrow::Cow::Owned(out)
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
        let files = write(&BundleDir::open(&dir, false).unwrap(), &rec, &Extras::default()).unwrap();
        // All but drops.pcapng, which needs a run's own sampled headers (tested below).
        for name in FILES.iter().filter(|n| **n != PCAP) {
            assert!(files.contains(&dir.join(name)), "{name} not written");
        }
        let (back, issues) = read(&dir).unwrap();
        assert!(issues.is_empty(), "{issues:?}");
        assert_eq!(back, rec);
        let _ = fs::remove_dir_all(&dir);
    }

    /// A run's own summary (with its sampled drop headers) gives drops.pcapng; a redacted bundle
    /// has none (the headers hold addresses), and a summary read back (no headers) writes none.
    #[test]
    fn the_drop_pcapng_comes_from_a_runs_own_summary_and_never_redacted() {
        use crate::collect::headers::{DroppedHeaders, Sampling};
        let mut rec = rich_recording();
        if let Some(s) = rec.summary.as_mut() {
            s.dropped_headers = DroppedHeaders {
                sampling: Some(Sampling::PROBES),
                ..DroppedHeaders::default()
            };
        }
        let dir = tempdir("pcap");
        let files = write(&BundleDir::open(&dir, false).unwrap(), &rec, &Extras::default()).unwrap();
        assert!(files.contains(&dir.join(PCAP)), "{files:?}");
        let bytes = fs::read(dir.join(PCAP)).unwrap();
        assert_eq!(&bytes[..4], &[0x0a, 0x0d, 0x0d, 0x0a], "a pcapng section header");

        let redact = Extras {
            redact: true,
            ..Extras::default()
        };
        let files = write(&BundleDir::open(&dir, true).unwrap(), &rec, &redact).unwrap();
        assert!(!files.contains(&dir.join(PCAP)));
        assert!(
            !dir.join(PCAP).exists(),
            "the earlier bundle's drops.pcapng is removed"
        );

        let (back, _) = read(&dir).unwrap();
        assert_eq!(
            back.summary.as_ref().unwrap().dropped_headers,
            DroppedHeaders::default()
        );
        let files = write(&BundleDir::open(&dir, true).unwrap(), &back, &Extras::default()).unwrap();
        assert!(!files.contains(&dir.join(PCAP)));
        let _ = fs::remove_dir_all(&dir);
    }

    /// A symlink planted under a bundle file's name (or its partial name) is replaced, never
    /// followed: the file it points to keeps its contents.
    #[test]
    fn planted_symlinks_in_the_bundle_directory_are_not_followed() {
        let dir = tempdir("planted");
        let victim = tempdir("planted-victim");
        fs::create_dir_all(&dir).unwrap();
        fs::write(&victim, "precious\n").unwrap();
        for name in [EVENTS, REPORT, GAPS_SVG] {
            std::os::unix::fs::symlink(&victim, dir.join(name)).unwrap();
            std::os::unix::fs::symlink(&victim, dir.join(partial_name(name))).unwrap();
        }
        let err = BundleDir::open(&dir, false).unwrap_err().to_string();
        assert!(err.contains("is not empty") && err.contains("--force"), "{err}");
        let bundle = BundleDir::open(&dir, true).unwrap();
        write(&bundle, &rich_recording(), &Extras::default()).unwrap();
        assert_eq!(fs::read_to_string(&victim).unwrap(), "precious\n");
        for name in [EVENTS, REPORT, GAPS_SVG] {
            let meta = fs::symlink_metadata(dir.join(name)).unwrap();
            assert!(meta.file_type().is_file(), "{name} is not a regular file");
            assert!(!dir.join(partial_name(name)).exists());
        }
        // A symlink planted between the check and the write is replaced too.
        fs::remove_file(dir.join(EVENTS)).unwrap();
        std::os::unix::fs::symlink(&victim, dir.join(EVENTS)).unwrap();
        write(&bundle, &rich_recording(), &Extras::default()).unwrap();
        assert_eq!(fs::read_to_string(&victim).unwrap(), "precious\n");
        let _ = fs::remove_dir_all(&dir);
        let _ = fs::remove_file(&victim);
    }

    #[test]
    fn the_bundle_directory_itself_may_not_be_a_symlink() {
        let real = tempdir("real-dir");
        let link = tempdir("link-dir");
        fs::create_dir_all(&real).unwrap();
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let err = BundleDir::open(&link, false).unwrap_err().to_string();
        assert!(err.contains("symbolic link"), "{err}");
        let _ = fs::remove_file(&link);
        let _ = fs::remove_dir_all(&real);
    }

    /// With --force, an earlier bundle's files go: an old gaps.svg must not be shown as this
    /// run's plot. Files that are not a bundle's stay.
    #[test]
    fn force_removes_an_earlier_bundles_files_and_keeps_the_rest() {
        let dir = tempdir("stale");
        let first = BundleDir::open(&dir, false).unwrap();
        write(&first, &rich_recording(), &Extras::default()).unwrap();
        assert!(dir.join(GAPS_SVG).exists());
        fs::write(dir.join("notes.txt"), "mine").unwrap();
        let mut plain = rich_recording();
        if let Some(s) = plain.summary.as_mut() {
            s.gap.histogram.clear();
        }
        assert!(plots::gap_cdf_svg(&plain).is_none(), "the fixture still has gaps");
        let again = BundleDir::open(&dir, true).unwrap();
        assert!(!dir.join(GAPS_SVG).exists() && !dir.join(EVENTS).exists());
        write(&again, &plain, &Extras::default()).unwrap();
        assert!(!dir.join(GAPS_SVG).exists(), "a stale gaps.svg survived");
        assert_eq!(fs::read_to_string(dir.join("notes.txt")).unwrap(), "mine");
        // The same handle writing again (the view's `e` key, then the run's end) drops the
        // plot its own earlier write left.
        write(&again, &rich_recording(), &Extras::default()).unwrap();
        write(&again, &plain, &Extras::default()).unwrap();
        assert!(
            !dir.join(GAPS_SVG).exists(),
            "gaps.svg of the earlier write survived"
        );
        let _ = fs::remove_dir_all(&dir);
    }

    /// Half a million unreadable lines and one over-long line: the first 100 problems are
    /// listed, the rest counted in one closing entry; the over-long line is never held whole.
    #[test]
    fn the_list_of_unreadable_lines_is_bounded() {
        let mut data = vec![b'x'; MAX_LINE_BYTES + 10];
        data.push(b'\n');
        for i in 0..500_000u32 {
            data.extend_from_slice(format!("garbage {i} {{\n").as_bytes());
        }
        data.extend_from_slice(events_ndjson(&rich_recording()).as_bytes());
        let (rec, issues) = parse(&data[..], Path::new("events.ndjson")).unwrap();
        assert!(rec.summary.is_some());
        assert_eq!(issues.len(), MAX_LISTED_ISSUES + 1);
        assert!(issues[0].problem.contains("over 4 MiB"), "{}", issues[0]);
        let last = issues.last().unwrap();
        assert_eq!(last.lines, 500_001 - MAX_LISTED_ISSUES, "{last}");
        assert!(last.problem.contains("more unreadable lines"), "{last}");
        assert_eq!(issues.iter().map(|i| i.lines).sum::<usize>(), 500_001);
    }

    /// A stage name scanprof does not count (a typo, a newer scanprof's stage) in a sample
    /// and in the summary: each line is skipped with an issue naming the name and the stages
    /// there are; the other lines are read.
    /// Valid JSON that does not decode (a count past u64, a negative tick number) and a layout newer than this scanprof's: each line is skipped and named with
    /// what is wrong, the rest of the recording kept.
    #[test]
    fn lines_that_do_not_decode_and_newer_schemas_are_named_line_by_line() {
        let rec = rich_recording();
        let full = events_ndjson(&rec);
        let mut lines: Vec<serde_json::Value> =
            full.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        let at =
            |lines: &[serde_json::Value], kind: &str| lines.iter().position(|l| l["type"] == kind).unwrap();
        let summary = at(&lines, "summary");
        let first_sample = at(&lines, "sample");
        let mut cases: Vec<(usize, String)> = Vec::new();
        // The summary: a count one past u64::MAX.
        let big: serde_json::Value = serde_json::from_str("18446744073709551616").unwrap();
        lines[summary]["send_calls"] = big;
        cases.push((summary, "send_calls".into()));
        // A sample: a tick number below zero.
        lines[first_sample]["tick"] = (-1).into();
        cases.push((first_sample, "-1".into()));
        // The next sample: a layout from a newer scanprof.
        lines[first_sample + 1]["schema_version"] = 999.into();
        cases.push((first_sample + 1, "schema_version 999".into()));
        let text: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
        let (back, issues) = parse(text.join("\n").as_bytes(), Path::new("ev.ndjson")).unwrap();
        assert!(back.summary.is_none());
        assert_eq!(back.ticks.len(), rec.ticks.len() - 2);
        assert_eq!(
            issues.iter().map(|i| i.line).collect::<Vec<_>>(),
            {
                let mut want: Vec<usize> = cases.iter().map(|(l, _)| l + 1).collect();
                want.sort_unstable();
                want
            },
            "{issues:?}"
        );
        for (line, says) in &cases {
            let i = issues.iter().find(|i| i.line == line + 1).unwrap().to_string();
            assert!(i.starts_with(&format!("ev.ndjson line {}: ", line + 1)), "{i}");
            assert!(i.contains(says.as_str()), "{i}");
        }
        let newer = issues.iter().find(|i| i.problem.contains("999")).unwrap();
        assert!(
            newer
                .problem
                .contains("re-render it with the scanprof that wrote it"),
            "{newer}"
        );
    }

    #[test]
    fn an_unknown_stage_name_skips_its_line_and_names_the_stage() {
        let rec = rich_recording();
        let full = events_ndjson(&rec);
        let lines: Vec<&str> = full.lines().collect();
        let sample = lines
            .iter()
            .position(|l| l.contains(r#""type":"sample""#))
            .unwrap();
        let summary = lines
            .iter()
            .position(|l| l.contains(r#""type":"summary""#))
            .unwrap();
        let bad: Vec<String> = lines
            .iter()
            .enumerate()
            .map(|(i, l)| {
                if i == sample || i == summary {
                    assert!(l.contains(r#""dev_xmit""#), "{l}");
                    l.replacen(r#""dev_xmit""#, r#""dev_xmitt""#, 1)
                } else {
                    l.to_string()
                }
            })
            .collect();
        let (back, issues) = parse(bad.join("\n").as_bytes(), Path::new("events.ndjson")).unwrap();
        assert_eq!(back.ticks.len(), rec.ticks.len() - 1);
        assert!(back.summary.is_none());
        assert_eq!(
            issues.iter().map(|i| i.line).collect::<Vec<_>>(),
            [sample + 1, summary + 1],
            "{issues:?}"
        );
        for i in &issues {
            let text = i.to_string();
            assert!(
                text.contains("cannot read") && text.contains("dev_xmitt") && text.contains("`dev_xmit`"),
                "{text}"
            );
        }
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
            &BundleDir::open(&dir, false).unwrap(),
            &rec,
            &Extras {
                redact: true,
                ..Default::default()
            },
        )
        .unwrap();
        for entry in fs::read_dir(&dir).unwrap() {
            // trace.perfetto-trace is binary; its strings are UTF-8 in it all the same.
            let path = entry.unwrap().path();
            let bytes = fs::read(&path).unwrap();
            let text = String::from_utf8_lossy(&bytes);
            assert!(
                !text.contains("10.99.0.2") && !text.contains("lab-host"),
                "{}",
                path.display()
            );
        }
        // The redacted Perfetto trace still decodes: its strings were replaced before encoding.
        let bytes = fs::read(dir.join(PERFETTO)).unwrap();
        let t = <perfetto::Trace as prost::Message>::decode(bytes.as_slice()).unwrap();
        let named_host = t
            .packet
            .iter()
            .filter_map(|p| p.track_descriptor.as_ref()?.description.as_ref())
            .any(|d| d.contains("host-1"));
        assert!(named_host, "the stand-in is in the trace's description");
        let (back, _) = read(&dir).unwrap();
        assert!(
            back.meta.command_line.iter().any(|a| a.contains("ipv4-1")),
            "{:?}",
            back.meta.command_line
        );
        let _ = fs::remove_dir_all(&dir);
    }
}
