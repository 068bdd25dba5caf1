//! Requested-rate extraction: what packet rate a scanner was asked for, read from its command
//! line (and config file) with the scanner's own semantics as declared in the profile's `[rate]`.
//! Pure: argv and the config text come in, a `RequestedRate` with its provenance goes out. The
//! analysis compares this figure with the achieved rate.

use serde::{Deserialize, Serialize};

use super::argv::find_flag;
use super::profile::{
    RateKind, RateModel, RateOption, RateRules, RateUnit, RateWindow, ScannerProfile, ValueForm, WindowOption,
};

/// The rate a scanner was asked for, and where that figure comes from.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestedRate {
    /// Packets per second requested (for `Cap`: the cap; `None` when unlimited, unknown, or when
    /// work units ask for different rates).
    pub pps: Option<f64>,
    /// What `pps` means.
    pub kind: RateKind,
    /// A floor in packets per second given beside a cap (nmap `--min-rate` with `--max-rate`).
    pub floor_pps: Option<f64>,
    /// unicornscan: one entry per work unit (mode phase or target with its own mode).
    pub work_units: Vec<WorkUnitRate>,
    /// How the figure was read, step by step (`argv: -r 1000`, `config: pps: 300`, `default: ...`).
    pub provenance: Vec<String>,
    /// Whether the figure was given (a rate option, the config file) or is the scanner's
    /// default when nothing asks for a rate: a default disagrees with nothing.
    pub origin: RateOrigin,
    /// Contradictions found (argv over config, two rate options, unreadable values).
    pub conflicts: Vec<String>,
    /// Packets per target from the `[[rate.multiplier]]` options (zmap `-P`), 1 without any.
    pub per_target: f64,
    /// The multiplier as written (`-P 4`, `-P 1 by default`) when the rate read counts targets
    /// and `pps` is that rate x `per_target`; None when the rate counts packets.
    pub per_target_source: Option<String>,
    /// The concurrency window the rate was derived from (`[rate.window]`), when it was.
    pub window: Option<WindowRead>,
}

/// A concurrency window as read from the command line (or the scanner's defaults).
#[derive(Debug, Clone, PartialEq)]
pub struct WindowRead {
    /// attempts in flight at once
    pub concurrency: f64,
    /// how long one attempt may take, ms
    pub timeout_ms: f64,
    /// how the two were read (`argv: -b 200`, `default: -t 1500 ms`)
    pub source: String,
}

/// Where a figure for the requested rate comes from. Only figures that were given or observed
/// can disagree with each other: a default is what the scanner does when nobody asks, and a
/// rate asked for elsewhere (`--requested`, a work unit) overrides it rather than contradicts it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RateOrigin {
    /// given: on scanprof's command line (`--requested`), the scanner's, or its config file
    #[default]
    Given,
    /// seen at run time: a rate-setup call, a work unit handed to a sender
    Observed,
    /// the profile's default for a scanner given no rate (`[rate] default`)
    Default,
}

impl RateOrigin {
    /// The stable name, as in the JSON: `given`, `observed`, `default`.
    pub fn as_str(self) -> &'static str {
        match self {
            RateOrigin::Given => "given",
            RateOrigin::Observed => "observed",
            RateOrigin::Default => "default",
        }
    }
}

/// The rate of one unicornscan work unit.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkUnitRate {
    /// Which targets: `all targets` for the `-m` phases, else the target argument's host part.
    pub target: String,
    /// Mode letters (`T`, `U`, `A`, `sf`...).
    pub mode: String,
    /// Packets per second this work unit is sent at.
    pub pps: f64,
    /// Where `pps` comes from (`-mT500`, `global rate`).
    pub source: String,
}

/// One rate option found on the command line.
struct Hit<'a> {
    option: &'a RateOption,
    /// The text as written (`-r 1000`, `--rate=5`).
    text: String,
    /// The value in the option's unit (`None` for flags without a value).
    value: Option<f64>,
    /// Interval options: the unit the value was written in.
    unit: RateUnit,
}

/// What `scan_argv` found on the command line.
struct ArgvScan<'a> {
    /// Rate options, in command-line order.
    hits: Vec<Hit<'a>>,
    /// Multiplier options as written (`-P 2`) and their values.
    multipliers: Vec<(String, f64)>,
    /// The last mode string (unicornscan `-m`).
    mode: Option<String>,
    /// Arguments that are not options (unicornscan targets).
    targets: Vec<String>,
}

/// A rate in packets per second and what it means.
struct Resolved {
    pps: Option<f64>,
    kind: RateKind,
}

/// Parses a number; with `suffixes`, K, M and G multiply by 10^3, 10^6, 10^9 (zmap `-B 10M`).
fn parse_number(text: &str, suffixes: bool) -> Option<f64> {
    let t = text.trim();
    let (digits, mult) = match t.chars().last() {
        Some('k' | 'K') if suffixes => (&t[..t.len() - 1], 1e3),
        Some('m' | 'M') if suffixes => (&t[..t.len() - 1], 1e6),
        Some('g' | 'G') if suffixes => (&t[..t.len() - 1], 1e9),
        _ => (t, 1.0),
    };
    let v: f64 = digits.parse().ok()?;
    (v.is_finite() && v >= 0.0).then_some(v * mult)
}

/// hping3's interval: `uN` is N microseconds, `N` is N seconds.
fn parse_interval(text: &str) -> Option<(f64, RateUnit)> {
    match text.strip_prefix('u') {
        Some(us) => parse_number(us, false).map(|v| (v, RateUnit::PeriodUs)),
        None => parse_number(text, false).map(|v| (v, RateUnit::PeriodS)),
    }
}

/// Formats a rate without a trailing `.0` for whole numbers.
fn fmt(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v:.3}")
            .trim_end_matches('0')
            .trim_end_matches('.')
            .to_string()
    }
}

/// The value of `key` in a config file: `key: value;` (unicorn.conf) or `key = value` (masscan).
fn config_value(text: &str, key: &str) -> Option<(f64, String)> {
    text.lines().find_map(|line| {
        let line = line.split('#').next().unwrap_or("").trim();
        let rest = line.strip_prefix(key)?.trim_start();
        let rest = rest.strip_prefix(':').or_else(|| rest.strip_prefix('='))?;
        let raw = rest.split(';').next().unwrap_or("").trim();
        parse_number(raw, false).map(|v| (v, line.to_string()))
    })
}

/// Converts a value in `unit` to packets per second; `None` for a zero period or unknown size.
fn to_pps(rules: &RateRules, value: f64, unit: RateUnit, prov: &mut Vec<String>) -> Option<f64> {
    match unit {
        RateUnit::Pps => Some(value),
        RateUnit::PeriodUs => (value > 0.0).then(|| 1e6 / value),
        RateUnit::PeriodS => (value > 0.0).then(|| 1.0 / value),
        RateUnit::BitsPerS => {
            let bytes = rules.wire_bytes?;
            // Whole packets per second, as zmap computes it (integer division).
            let pps = (value / (bytes * 8.0)).floor().max(1.0);
            prov.push(format!(
                "{} bit/s / ({} bytes x 8 bit per packet on the wire) = {} per second{}",
                fmt(value),
                fmt(bytes),
                fmt(pps),
                rules
                    .wire_bytes_note
                    .as_ref()
                    .map(|n| format!(" ({n})"))
                    .unwrap_or_default()
            ));
            Some(pps)
        }
    }
}

/// Reads all rate options and multipliers from argv (argv[0] is the program and is skipped).
fn scan_argv<'a>(rules: &'a RateRules, argv: &[String], conflicts: &mut Vec<String>) -> ArgvScan<'a> {
    let mut hits = Vec::new();
    let mut multipliers = Vec::new();
    let mut mode = None;
    let mut targets = Vec::new();
    let mut i = 1;
    while i < argv.len() {
        let arg = argv[i].as_str();
        // Value of a flag: inline, or the next argument.
        let mut take = |inline: Option<&str>, flag: &str, i: &mut usize| -> Option<(String, String)> {
            match inline {
                Some(v) => Some((v.to_string(), arg.to_string())),
                None => match argv.get(*i + 1) {
                    Some(v) => {
                        *i += 1;
                        Some((v.clone(), format!("{flag} {v}")))
                    }
                    None => {
                        conflicts.push(format!("argv: {flag} without a value: ignored"));
                        None
                    }
                },
            }
        };
        if let Some((option, flag, inline)) = rules
            .options
            .iter()
            .find_map(|o| find_flag(arg, &o.flags).map(|(f, v)| (o, f, v)))
        {
            match option.takes {
                ValueForm::None => hits.push(Hit {
                    option,
                    text: arg.to_string(),
                    value: None,
                    unit: option.unit,
                }),
                ValueForm::Number | ValueForm::Interval => {
                    if let Some((raw, text)) = take(inline, flag, &mut i) {
                        let parsed = if option.takes == ValueForm::Interval {
                            parse_interval(&raw)
                        } else {
                            parse_number(&raw, option.unit == RateUnit::BitsPerS).map(|v| (v, option.unit))
                        };
                        match parsed {
                            Some((v, unit)) => hits.push(Hit {
                                option,
                                text,
                                value: Some(v),
                                unit,
                            }),
                            None => conflicts.push(format!("argv: {text}: not a rate, ignored")),
                        }
                    }
                }
            }
        } else if let Some((flag, inline)) = rules.multipliers.iter().find_map(|m| find_flag(arg, &m.flags)) {
            if let Some((raw, text)) = take(inline, flag, &mut i) {
                match parse_number(&raw, false) {
                    Some(v) => multipliers.push((text, v)),
                    None => conflicts.push(format!("argv: {text}: not a number, ignored")),
                }
            }
        } else if let Some((flag, inline)) = find_flag(arg, &rules.mode_flags) {
            if let Some((raw, _)) = take(inline, flag, &mut i) {
                mode = Some(raw);
            }
        } else if !arg.starts_with('-') {
            targets.push(arg.to_string());
        }
        i += 1;
    }
    ArgvScan {
        hits,
        multipliers,
        mode,
        targets,
    }
}

/// The rate a scanner was asked for, from its argv (as in /proc/PID/cmdline, argv[0] included)
/// and the text of its config file, following the profile's `[rate]` rules.
pub fn requested_rate(profile: &ScannerProfile, argv: &[String], config: Option<&str>) -> RequestedRate {
    let rules = &profile.rate;
    let mut prov = Vec::new();
    let mut conflicts = Vec::new();
    let ArgvScan {
        hits,
        multipliers: mults,
        mode,
        targets,
    } = scan_argv(rules, argv, &mut conflicts);

    // Multipliers (zmap -P): the last one given, else the default.
    let mut factor = 1.0;
    let mut factor_text = String::new();
    for m in &rules.multipliers {
        let given = mults
            .iter()
            .rev()
            .find(|(t, _)| m.flags.iter().any(|f| t.starts_with(f.as_str())));
        let (v, text) = match given {
            Some((t, v)) => (*v, t.clone()),
            None => (m.default, format!("{} {} by default", m.flags[0], fmt(m.default))),
        };
        factor *= v;
        factor_text = text;
    }

    // The option that sets the rate: highest priority, then the last one.
    let setters: Vec<&Hit> = hits
        .iter()
        .filter(|h| matches!(h.option.kind, RateKind::Exact | RateKind::Unlimited))
        .collect();
    let setter = setters
        .iter()
        .enumerate()
        .max_by_key(|(i, h)| (h.option.priority, *i))
        .map(|(_, h)| *h);
    if let Some(s) = setter {
        for other in setters.iter().filter(|h| !std::ptr::eq(**h, s)) {
            if other.option.alone || s.option.alone {
                conflicts.push(format!(
                    "argv: {} and {} together: {} refuses this",
                    other.text, s.text, profile.name
                ));
            } else if other.option.flags != s.option.flags || other.value != s.value {
                conflicts.push(format!("argv: {} overrides {}", s.text, other.text));
            }
        }
    }
    let cap = hits.iter().rev().find(|h| h.option.kind == RateKind::Cap);
    let floor = hits.iter().rev().find(|h| h.option.kind == RateKind::Floor);
    let from_config = config
        .zip(rules.config_key.as_deref())
        .and_then(|(c, k)| config_value(c, k));

    let resolve = |hit: &Hit, prov: &mut Vec<String>| -> Resolved {
        prov.push(format!("argv: {}", hit.text));
        if let Some(n) = &hit.option.note {
            prov.push(n.clone());
        }
        let value = hit.value.or(hit.option.value);
        let zero_kind = hit.option.zero.filter(|_| value == Some(0.0));
        if hit.option.kind == RateKind::Unlimited || zero_kind == Some(RateKind::Unlimited) {
            return Resolved {
                pps: None,
                kind: RateKind::Unlimited,
            };
        }
        let Some(v) = value else {
            return Resolved {
                pps: None,
                kind: RateKind::Unknown,
            };
        };
        let Some(base) = to_pps(rules, v, hit.unit, prov) else {
            return Resolved {
                pps: None,
                kind: RateKind::Unknown,
            };
        };
        if matches!(hit.unit, RateUnit::PeriodUs | RateUnit::PeriodS) {
            let unit = if hit.unit == RateUnit::PeriodUs { "us" } else { "s" };
            prov.push(format!(
                "one packet every {} {unit} = {} per second",
                fmt(v),
                fmt(base)
            ));
        }
        let pps = if hit.option.per_target {
            apply_factor(base, factor, &factor_text, prov)
        } else {
            base
        };
        Resolved {
            pps: Some(pps),
            kind: hit.option.kind,
        }
    };

    let mut floor_pps = None;
    let mut window = None;
    let global = if let Some(s) = setter {
        if let Some((v, line)) = &from_config {
            conflicts.push(format!("argv: {} overrides config: {line} ({})", s.text, fmt(*v)));
        }
        resolve(s, &mut prov)
    } else if cap.is_some() || floor.is_some() {
        let c = cap.map(|h| resolve(h, &mut prov));
        let f = floor.map(|h| resolve(h, &mut prov));
        match (c, f) {
            (Some(c), Some(f)) => {
                if let (Some(cv), Some(fv)) = (c.pps, f.pps) {
                    if fv > cv {
                        conflicts.push(format!(
                            "floor {} pps above cap {} pps: {} refuses this",
                            fmt(fv),
                            fmt(cv),
                            profile.name
                        ));
                    }
                }
                floor_pps = f.pps;
                c
            }
            (Some(c), None) => c,
            (None, Some(f)) => f,
            (None, None) => Resolved {
                pps: None,
                kind: RateKind::Unknown,
            },
        }
    } else if let Some((v, line)) = &from_config {
        prov.push(format!("config: {line}"));
        Resolved {
            pps: Some(*v),
            kind: RateKind::Exact,
        }
    } else if let Some(w) = &rules.window {
        let (resolved, read) = window_rate(w, argv, &mut prov, &mut conflicts);
        window = Some(read);
        resolved
    } else {
        match rules.default {
            Some(d) => {
                let note = rules
                    .default_note
                    .as_deref()
                    .unwrap_or("the scanner's built-in default");
                prov.push(format!("default: {} ({note})", fmt(d)));
                let pps = to_pps(rules, d, rules.default_unit, &mut prov);
                let pps = pps.map(|p| {
                    if rules.default_per_target {
                        apply_factor(p, factor, &factor_text, &mut prov)
                    } else {
                        p
                    }
                });
                Resolved {
                    pps,
                    kind: rules.default_kind,
                }
            }
            None => {
                prov.push(format!(
                    "no rate given: {}",
                    rules
                        .default_note
                        .as_deref()
                        .unwrap_or("the scanner has no requested rate")
                ));
                Resolved {
                    pps: None,
                    kind: rules.default_kind,
                }
            }
        }
    };
    if let Some(n) = &rules.note {
        prov.push(n.clone());
    }

    // Whether the figure read counts targets (and was multiplied into packets).
    let counted_targets = match setter {
        Some(s) => s.option.per_target,
        None if cap.is_some() || floor.is_some() => cap.or(floor).is_some_and(|h| h.option.per_target),
        None if from_config.is_some() => false,
        None => rules.default_per_target,
    };
    let per_target_source =
        (counted_targets && global.pps.is_some() && !factor_text.is_empty()).then(|| factor_text.clone());
    // Nothing on the command line or in the config: the figure is the profile's default.
    let window_given = rules.window.as_ref().is_some_and(|w| {
        [&w.concurrency, &w.timeout_ms]
            .iter()
            .any(|o| window_value(o, argv, &mut Vec::new()).is_some())
    });
    let origin =
        if setter.is_some() || cap.is_some() || floor.is_some() || from_config.is_some() || window_given {
            RateOrigin::Given
        } else {
            RateOrigin::Default
        };
    let mut out = RequestedRate {
        origin,
        per_target_source,
        pps: global.pps,
        kind: global.kind,
        floor_pps,
        work_units: Vec::new(),
        provenance: prov,
        conflicts,
        per_target: factor,
        window,
    };
    if rules.kind == RateModel::Unicornscan {
        unicornscan_work_units(&mut out, mode.as_deref(), &targets);
    }
    out
}

/// The last value of a window option on the command line, as written and as a number; `None`
/// when the option is absent (an unreadable value is a conflict and reads as absent).
fn window_value(o: &WindowOption, argv: &[String], conflicts: &mut Vec<String>) -> Option<(String, f64)> {
    let mut found = None;
    let mut i = 1;
    while i < argv.len() {
        if let Some((flag, inline)) = find_flag(&argv[i], &o.flags) {
            let (raw, text) = match inline {
                Some(v) => (Some(v.to_string()), argv[i].clone()),
                None => {
                    i += 1;
                    let v = argv.get(i).cloned();
                    let text = format!("{flag} {}", v.as_deref().unwrap_or(""));
                    (v, text.trim_end().to_string())
                }
            };
            match raw
                .as_deref()
                .and_then(|r| parse_number(r, false))
                .filter(|v| *v > 0.0)
            {
                Some(v) => found = Some((text, v)),
                None => conflicts.push(format!("argv: {text}: not a number above 0, ignored")),
            }
        }
        i += 1;
    }
    found
}

/// The rate a concurrency window implies: concurrency x 1000 / timeout_ms attempts per second,
/// each number from the command line or the scanner's default.
fn window_rate(
    w: &RateWindow,
    argv: &[String],
    prov: &mut Vec<String>,
    conflicts: &mut Vec<String>,
) -> (Resolved, WindowRead) {
    let mut read = |o: &WindowOption, unit: &str| match window_value(o, argv, conflicts) {
        Some((text, v)) => (v, format!("argv: {text}{unit}")),
        None => (
            o.default,
            format!("default: {} {}{unit}", o.flags[0], fmt(o.default)),
        ),
    };
    let (n, n_text) = read(&w.concurrency, "");
    let (t, t_text) = read(&w.timeout_ms, " ms");
    let pps = n * 1000.0 / t;
    prov.push(format!(
        "{n_text} in flight, {t_text} each at most: {} x 1000 / {} = {} per second",
        fmt(n),
        fmt(t),
        fmt((pps * 1000.0).round() / 1000.0)
    ));
    if let Some(note) = &w.note {
        prov.push(note.clone());
    }
    let read = WindowRead {
        concurrency: n,
        timeout_ms: t,
        source: format!("{n_text}, {t_text}"),
    };
    (
        Resolved {
            pps: Some(pps),
            kind: w.kind,
        },
        read,
    )
}

/// Multiplies a per-target rate into packets per second and says so.
fn apply_factor(base: f64, factor: f64, factor_text: &str, prov: &mut Vec<String>) -> f64 {
    if factor_text.is_empty() {
        return base;
    }
    let pps = base * factor;
    prov.push(format!(
        "{} targets/s x {} probes per target ({factor_text}) = {} pps",
        fmt(base),
        fmt(factor),
        fmt(pps)
    ));
    pps
}

/// Splits a unicornscan mode string (`T500`, `A100+T500`, `sf`) into phases of mode letters and
/// an optional rate. `Err` names the phase that does not read as letters then digits.
fn parse_mode(mode: &str) -> Result<Vec<(String, Option<f64>)>, String> {
    mode.split('+')
        .map(|phase| {
            let letters: String = phase.chars().take_while(|c| c.is_ascii_alphabetic()).collect();
            let digits = &phase[letters.len()..];
            if letters.is_empty() || !digits.chars().all(|c| c.is_ascii_digit()) {
                return Err(phase.to_string());
            }
            let pps = if digits.is_empty() {
                None
            } else {
                digits.parse::<f64>().ok()
            };
            Ok((letters, pps))
        })
        .collect()
}

/// unicornscan: one work unit per `-m` phase (for targets without a mode of their own) and per
/// phase of each `host:mMODE,ports` target. A phase's own rate wins over the global rate.
fn unicornscan_work_units(out: &mut RequestedRate, mode: Option<&str>, targets: &[String]) {
    let global = out.pps;
    let mut units = Vec::new();
    let add = |target: &str, mode: &str, conflicts: &mut Vec<String>, units: &mut Vec<WorkUnitRate>| {
        match parse_mode(mode) {
            Ok(phases) => {
                for (letters, pps) in phases {
                    match (pps, global) {
                        (Some(p), _) => units.push(WorkUnitRate {
                            target: target.to_string(),
                            mode: letters.clone(),
                            pps: p,
                            source: format!("m{letters}{}", fmt(p)),
                        }),
                        (None, Some(g)) => units.push(WorkUnitRate {
                            target: target.to_string(),
                            mode: letters,
                            pps: g,
                            source: "global rate".into(),
                        }),
                        (None, None) => {}
                    }
                }
            }
            Err(phase) => conflicts.push(format!("mode string '{mode}': cannot read phase '{phase}'")),
        }
    };
    let own: Vec<(&str, &str)> = targets
        .iter()
        .filter_map(|t| {
            let (host, rest) = t.split_once(':')?;
            let m = rest.strip_prefix('m')?;
            Some((host, m.split(',').next().unwrap_or("")))
        })
        .collect();
    // Targets without a mode of their own use -m (TCP SYN, `T`, when absent). Values of other
    // options cannot be told from targets without unicornscan's whole option table: only
    // arguments that look like an address, a name with a domain, a CIDR or a port list
    // (`.`, `:` or `/`) count as targets, so `-i eth0` does not.
    let looks_like_target = |t: &&String| t.contains(['.', ':', '/']);
    let plain = targets.iter().filter(looks_like_target).count() > own.len();
    if mode.is_some() || plain || own.is_empty() {
        add("all targets", mode.unwrap_or("T"), &mut out.conflicts, &mut units);
    }
    for (host, m) in own {
        add(host, m, &mut out.conflicts, &mut units);
    }
    for u in &units {
        if u.source != "global rate" {
            // A phase's own rate was given (`-mT500`), whatever the global rate's origin.
            out.origin = RateOrigin::Given;
            out.provenance.push(format!(
                "work unit {} {}: {} pps from {}",
                u.target,
                u.mode,
                fmt(u.pps),
                u.source
            ));
        }
    }
    let first = units.first().map(|u| u.pps);
    if units.iter().any(|u| Some(u.pps) != first) {
        out.provenance
            .push("work units ask for different rates: see each work unit".into());
        out.pps = None;
    } else if first.is_some() {
        out.pps = first;
    }
    out.work_units = units;
}
