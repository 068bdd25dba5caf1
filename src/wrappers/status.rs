//! A scanner's own machine-readable status (masscan `--status-ndjson`, zmap
//! `--status-updates-file`): a profile's `[[status]]` says which argument turns it on or names
//! its file, its format, and which of its fields is which figure. Pure: finding it in argv and
//! reading one line; `src/collect/status_file.rs` tails the file or stream while the scanner runs.

use serde::{Deserialize, Serialize};

use super::argv::find_flag;

/// How the status is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StatusFormat {
    /// one JSON object per line; fields are dotted paths (`rate.pps`)
    Ndjson,
    /// comma-separated values, the first line a header; fields are column names
    Csv,
}

/// The figure a status field gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StatusFigure {
    /// packets per second sent, as the scanner counts them (its own smoothing or window)
    Rate,
    /// packets sent since the scanner started
    Sent,
    /// send calls that failed since the scanner started
    SendFailures,
    /// packets its capture (libpcap) dropped since it started: receive side, not sends
    PcapDrops,
}

impl StatusFigure {
    /// What the figure is, for people.
    pub fn describe(self) -> &'static str {
        match self {
            StatusFigure::Rate => "sent rate (pps)",
            StatusFigure::Sent => "packets sent",
            StatusFigure::SendFailures => "failed sends",
            StatusFigure::PcapDrops => "pcap receive drops",
        }
    }
}

/// Which of the scanner's standard streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputStream {
    /// standard output
    Stdout,
    /// standard error
    Stderr,
}

/// One figure of the status.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatusField {
    /// NDJSON: a dotted path (`progress.syn.sent`); CSV: a column of the header (`sent-total`).
    pub key: String,
    /// What the value is.
    pub figure: StatusFigure,
    /// The scanner counts targets, not packets: multiply by the profile's `[[rate.multiplier]]`
    /// (zmap's `-P` probes per target).
    #[serde(default)]
    pub per_target: bool,
}

/// The scanner's machine-readable status, as its command line turns it on.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatusRule {
    /// Short name (`status_updates_file`).
    pub name: String,
    /// What it is, for people (`zmap --status-updates-file`).
    pub what: String,
    pub format: StatusFormat,
    /// Options whose value names the file (`-u`, `--status-updates-file`).
    #[serde(default)]
    pub file_flags: Vec<String>,
    /// The file name `-` means the scanner's stdout (false: a file called `-`, as zmap 2.1.1
    /// creates).
    #[serde(default)]
    pub dash_is_stdout: bool,
    /// Options without a value that switch the status on, written to `stream`
    /// (`--status-ndjson`).
    #[serde(default)]
    pub switch_flags: Vec<String>,
    /// Where `switch_flags` make the scanner write it.
    #[serde(default)]
    pub stream: Option<OutputStream>,
    /// Free text: versions, quirks.
    #[serde(default)]
    pub note: Option<String>,
    /// The figures read.
    #[serde(rename = "field")]
    pub fields: Vec<StatusField>,
}

/// Where a scanner writes its status, as its command line says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StatusLocation {
    /// a file, as written on the command line (relative to the scanner's working directory)
    File(String),
    /// one of its standard streams
    Stream(OutputStream),
}

impl StatusRule {
    /// Where the scanner's words (`argv[0]` is the program and is skipped) make it write this
    /// status; None when they do not turn it on. The last option given wins.
    pub fn locate(&self, argv: &[String]) -> Option<StatusLocation> {
        let mut found = None;
        let mut i = 1;
        while i < argv.len() {
            let arg = argv[i].as_str();
            if let Some((_, inline)) = find_flag(arg, &self.file_flags) {
                let value = match inline {
                    Some(v) => Some(v.to_string()),
                    None => {
                        i += 1;
                        argv.get(i).cloned()
                    }
                };
                found = value.filter(|v| !v.is_empty()).map(|v| match v.as_str() {
                    "-" if self.dash_is_stdout => StatusLocation::Stream(OutputStream::Stdout),
                    _ => StatusLocation::File(v),
                });
            } else if self.switch_flags.iter().any(|f| f == arg) {
                found = self.stream.map(StatusLocation::Stream);
            }
            i += 1;
        }
        found
    }
}

/// Reads a status line by line: the header (CSV), then each record's figures.
#[derive(Debug, Clone)]
pub struct StatusParser {
    format: StatusFormat,
    fields: Vec<StatusField>,
    /// packets per target, for `per_target` fields
    per_target: f64,
    /// CSV: the column of each field, once the header is read
    columns: Option<Vec<usize>>,
}

impl StatusParser {
    /// A parser for `rule`, with `per_target` packets per target (zmap's `-P`, 1 otherwise).
    pub fn new(rule: &StatusRule, per_target: f64) -> StatusParser {
        StatusParser {
            format: rule.format,
            fields: rule.fields.clone(),
            per_target,
            columns: None,
        }
    }

    /// The figures of one complete line, as (index of the field in the rule, value; per-target
    /// fields already in packets). Ok(empty) for a blank line or a CSV header; Err says what is
    /// wrong with the line without quoting it (the file is the scanner's, not scanprof's).
    pub fn line(&mut self, line: &str) -> Result<Vec<(usize, f64)>, String> {
        let line = line.trim_end_matches(['\r', '\n']);
        if line.trim().is_empty() {
            return Ok(Vec::new());
        }
        let raw = match self.format {
            StatusFormat::Ndjson => self.json_line(line)?,
            StatusFormat::Csv => match self.columns.clone() {
                None => {
                    self.columns = Some(self.header(line)?);
                    return Ok(Vec::new());
                }
                Some(cols) => csv_row(line, &cols)?,
            },
        };
        Ok(raw
            .into_iter()
            .map(|(i, v)| {
                let scale = if self.fields[i].per_target {
                    self.per_target
                } else {
                    1.0
                };
                (i, v * scale)
            })
            .collect())
    }

    /// Whether the format opens with a header line (CSV).
    pub fn needs_header(&self) -> bool {
        self.format == StatusFormat::Csv
    }

    /// Whether the header has been read.
    pub fn has_header(&self) -> bool {
        self.columns.is_some()
    }

    /// Forgets the header: the file starts again (truncated or replaced).
    pub fn restart(&mut self) {
        self.columns = None;
    }

    /// Whether a line of a stream the status shares with other output (masscan's banner on
    /// stderr) is one of its records: NDJSON records open with `{`. A file holds only records.
    pub fn may_be_record(&self, line: &str) -> bool {
        match self.format {
            StatusFormat::Ndjson => line.trim_start().starts_with('{'),
            StatusFormat::Csv => true,
        }
    }

    fn header(&self, line: &str) -> Result<Vec<usize>, String> {
        let names = csv_record(line).map_err(|e| format!("the CSV header is unreadable ({e})"))?;
        self.fields
            .iter()
            .map(|f| {
                names.iter().position(|n| n.trim() == f.key).ok_or_else(|| {
                    format!(
                        "the CSV header has no column '{}' ({} columns): another version of the scanner?",
                        f.key,
                        names.len()
                    )
                })
            })
            .collect()
    }

    fn json_line(&self, line: &str) -> Result<Vec<(usize, f64)>, String> {
        let v: serde_json::Value =
            serde_json::from_str(line).map_err(|e| format!("not a JSON object ({e})"))?;
        if !v.is_object() {
            return Err("not a JSON object".into());
        }
        let mut out = Vec::new();
        for (i, f) in self.fields.iter().enumerate() {
            let mut at = Some(&v);
            for part in f.key.split('.') {
                at = at.and_then(|a| a.get(part));
            }
            match at {
                None => {}
                Some(x) => match x.as_f64().filter(|n| n.is_finite()) {
                    Some(n) => out.push((i, n)),
                    None => return Err(format!("'{}' is not a number", f.key)),
                },
            }
        }
        if out.is_empty() {
            let keys: Vec<&str> = self.fields.iter().map(|f| f.key.as_str()).collect();
            return Err(format!("none of {} in it", keys.join(", ")));
        }
        Ok(out)
    }
}

/// The fields of one CSV line (quoting as RFC 4180), by the csv crate.
fn csv_record(line: &str) -> Result<Vec<String>, String> {
    let mut rd = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .from_reader(line.as_bytes());
    let mut rec = csv::StringRecord::new();
    match rd.read_record(&mut rec) {
        Ok(true) => Ok(rec.iter().map(str::to_string).collect()),
        Ok(false) => Err("empty".into()),
        Err(e) => Err(e.to_string()),
    }
}

fn csv_row(line: &str, cols: &[usize]) -> Result<Vec<(usize, f64)>, String> {
    let rec = csv_record(line).map_err(|e| format!("not a CSV record ({e})"))?;
    cols.iter()
        .enumerate()
        .map(|(i, &c)| {
            let text = rec
                .get(c)
                .ok_or_else(|| format!("{} fields, the header has more", rec.len()))?;
            text.trim()
                .parse::<f64>()
                .ok()
                .filter(|v| v.is_finite())
                .map(|v| (i, v))
                .ok_or_else(|| format!("column {} is not a number", c + 1))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wrappers::ProfileSet;

    /// masscan 1.3.9 (built from upstream: Debian 12's 1.3.2 has no --status-ndjson) at 500 pps
    /// into a lab, its stderr: a banner, then one object a second.
    const MASSCAN: &str = include_str!("../../tests/fixtures/status/masscan-1.3.9-status-ndjson.stderr");
    /// zmap 2.1.1 (Debian 12) `-r 100 -P 2 -u FILE` over 64 lab addresses.
    const ZMAP: &str = include_str!("../../tests/fixtures/status/zmap-2.1.1-status-updates.csv");

    fn words(line: &str) -> Vec<String> {
        line.split_whitespace().map(str::to_string).collect()
    }

    fn rule(profile: &str) -> StatusRule {
        let set = ProfileSet::builtin().unwrap();
        set.get(profile).unwrap().status[0].clone()
    }

    #[test]
    fn the_command_line_says_where_the_status_goes() {
        let z = rule("zmap");
        let file = |p: &str| Some(StatusLocation::File(p.into()));
        assert_eq!(z.locate(&words("zmap -u z.csv 10.0.0.0/8")), file("z.csv"));
        assert_eq!(z.locate(&words("zmap -u/tmp/z.csv -r 5")), file("/tmp/z.csv"));
        assert_eq!(
            z.locate(&words("zmap --status-updates-file=s.csv")),
            file("s.csv")
        );
        assert_eq!(
            z.locate(&words("zmap --status-updates-file s.csv")),
            file("s.csv")
        );
        // zmap 2.1.1 writes `-u -` to a file called `-`; a scanner whose `-` is stdout says so.
        assert_eq!(z.locate(&words("zmap -u -")), file("-"));
        let dash = StatusRule {
            dash_is_stdout: true,
            ..z.clone()
        };
        assert_eq!(
            dash.locate(&words("zmap -u -")),
            Some(StatusLocation::Stream(OutputStream::Stdout))
        );
        assert_eq!(z.locate(&words("zmap -r 100 10.0.0.0/8")), None);
        // A flag without its value (the end of argv) turns nothing on.
        assert_eq!(z.locate(&words("zmap -r 100 -u")), None);
        // Only the scanner's words count: argv[0] is the program.
        assert_eq!(z.locate(&words("-u x.csv")), None);
        let m = rule("masscan");
        assert_eq!(
            m.locate(&words("masscan 10.0.0.1 -p80 --status-ndjson --rate 10")),
            Some(StatusLocation::Stream(OutputStream::Stderr))
        );
        assert_eq!(m.locate(&words("masscan 10.0.0.1 -p80")), None);
    }

    #[test]
    fn masscans_ndjson_status_is_read_and_its_banner_is_not_a_record() {
        let r = rule("masscan");
        let mut p = StatusParser::new(&r, 1.0);
        let mut rates = Vec::new();
        let mut sent = Vec::new();
        for line in MASSCAN.lines() {
            if !p.may_be_record(line) {
                assert!(!line.starts_with('{'), "{line}");
                continue;
            }
            for (i, v) in p.line(line).unwrap_or_else(|e| panic!("{e}: {line}")) {
                match r.fields[i].figure {
                    StatusFigure::Rate => rates.push(v),
                    StatusFigure::Sent => sent.push(v),
                    f => panic!("masscan gives no {f:?}"),
                }
            }
        }
        // The sample's lines: 0, 0, 499.08, 495.69, ... then the waiting lines at 0.
        assert_eq!(rates.len(), 11, "{rates:?}");
        assert_eq!(&rates[2..5], [499.08, 495.69, 498.87]);
        assert_eq!(sent.first(), Some(&0.0));
        assert_eq!(sent.last(), Some(&2000.0));
        assert_eq!(sent[2], 308.0);
    }

    #[test]
    fn zmaps_csv_status_is_read_by_column_name_and_targets_become_packets() {
        let r = rule("zmap");
        // -P 2: two packets per target.
        let mut p = StatusParser::new(&r, 2.0);
        let mut lines = ZMAP.lines();
        assert_eq!(p.line(lines.next().unwrap()), Ok(Vec::new()), "the header");
        assert!(p.has_header());
        let mut last = Vec::new();
        for line in lines {
            last = p.line(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        }
        let by = |f: StatusFigure| {
            last.iter()
                .find(|(i, _)| r.fields[*i].figure == f)
                .map(|(_, v)| *v)
                .unwrap()
        };
        // Last line: sent-total 64 targets (= 128 packets), 55 targets in its last second.
        assert_eq!(by(StatusFigure::Sent), 128.0);
        assert_eq!(by(StatusFigure::Rate), 110.0);
        assert_eq!(by(StatusFigure::SendFailures), 0.0);
        assert_eq!(by(StatusFigure::PcapDrops), 0.0);
    }

    #[test]
    fn bad_lines_are_refused_with_a_reason_and_never_quoted() {
        let z = rule("zmap");
        let header = ZMAP.lines().next().unwrap();
        let mut p = StatusParser::new(&z, 1.0);
        p.line(header).unwrap();
        let row = ZMAP.lines().last().unwrap();
        // A line cut short, a number that is not one, garbage.
        let cut = &row[..row.len() / 2];
        let e = p.line(cut).unwrap_err();
        assert!(e.contains("fields, the header has more"), "{e}");
        let e = p.line(&row.replace(",55,", ",secret,")).unwrap_err();
        assert!(e.contains("is not a number") && !e.contains("secret"), "{e}");
        assert!(p.line("root:x:0:0:root:/root:/bin/bash").is_err());
        assert_eq!(p.line(""), Ok(Vec::new()));
        // The header is read again after a restart (the file was truncated).
        p.restart();
        assert_eq!(p.line(header), Ok(Vec::new()));
        assert!(p.line(row).is_ok());
        // A header without a column the profile needs: another version of zmap.
        let mut q = StatusParser::new(&z, 1.0);
        let e = q.line("real-time,sent-total").unwrap_err();
        assert!(e.contains("no column 'sent-last-one-sec'"), "{e}");

        let m = rule("masscan");
        let mut j = StatusParser::new(&m, 1.0);
        assert!(j
            .line("{\"state\":\"running\",\"rate\":")
            .unwrap_err()
            .contains("not a JSON object"));
        assert!(j.line("[1,2]").unwrap_err().contains("not a JSON object"));
        assert!(j.line("{\"other\":1}").unwrap_err().contains("none of rate.pps"));
        let e = j.line("{\"rate\":{\"pps\":\"fast\"}}").unwrap_err();
        assert!(e.contains("'rate.pps' is not a number"), "{e}");
    }

    #[test]
    fn a_status_rule_must_say_where_its_status_is_and_give_each_figure_once() {
        let base = |status: &str| {
            format!(
                "schema = 1\nname = \"x\"\ndescription = \"x\"\n[[process]]\nrole = \"scanner\"\nexe = [\"x\"]\n[rate]\nkind = \"options\"\n{status}"
            )
        };
        let err = |status: &str| {
            crate::wrappers::ScannerProfile::parse_named(&base(status), "x.toml")
                .unwrap_err()
                .to_string()
        };
        let field = "field = [{ key = \"a\", figure = \"rate\" }]";
        assert!(err(&format!(
            "[[status]]\nname = \"s\"\nwhat = \"s\"\nformat = \"csv\"\n{field}"
        ))
        .contains("status[0].file_flags"));
        assert!(err(&format!(
            "[[status]]\nname = \"s\"\nwhat = \"s\"\nformat = \"csv\"\nswitch_flags = [\"--s\"]\n{field}"
        ))
        .contains("status[0].file_flags"));
        assert!(err(
            "[[status]]\nname = \"s\"\nwhat = \"s\"\nformat = \"csv\"\nfile_flags = [\"-u\"]\nfield = [{ key = \"a\", figure = \"rate\" }, { key = \"b\", figure = \"rate\" }]"
        )
        .contains("status[0].field[1].figure"));
        assert!(err(
            "[[status]]\nname = \"s\"\nwhat = \"s\"\nformat = \"xml\"\nfile_flags = [\"-u\"]\nfield = []"
        )
        .contains("format"));
        let ok = crate::wrappers::ScannerProfile::parse_named(
            &base(&format!(
                "[[status]]\nname = \"s\"\nwhat = \"s\"\nformat = \"ndjson\"\nfile_flags = [\"-u\"]\n{field}"
            )),
            "x.toml",
        );
        assert!(ok.is_ok(), "{ok:?}");
    }
}
