//! How scanprof's reference sender (`scanprof send --pacer`) waits for a packet's due time: one
//! type for the sender that paces with it, the baseline that names it and the diagnosis that
//! reads it from the reference sender's option text. Here, in the wrappers layer, because
//! analysis and senders may both use it (docs/architecture.md: senders imports analysis).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A pacer of the reference sender. Serde writes it as its name (`tsc`), as the JSON always
/// had it (`baseline.pacer`, `scanprof send --json`'s `pacer`).
/// The default is `clock`, `scanprof send`'s.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[repr(u8)]
pub enum PacerKind {
    /// No waiting: every packet is sent as soon as the previous one returned.
    None = 0,
    /// Busy-wait on CLOCK_MONOTONIC.
    #[default]
    Clock = 1,
    /// clock_nanosleep to the absolute due time (no busy-wait: shows the wake-up latency).
    Sleep = 2,
    /// Busy-wait on rdtsc, converted with a calibrated (or the kernel's) TSC frequency.
    Tsc = 3,
}

impl PacerKind {
    /// Every pacer, in code order.
    pub const ALL: [PacerKind; 4] = [
        PacerKind::None,
        PacerKind::Clock,
        PacerKind::Sleep,
        PacerKind::Tsc,
    ];

    /// The name used on the command line (`--pacer tsc`) and in the JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            PacerKind::None => "none",
            PacerKind::Clock => "clock",
            PacerKind::Sleep => "sleep",
            PacerKind::Tsc => "tsc",
        }
    }

    /// The pacer a reference sender's options select (`--pacer tsc`, `--pacer=tsc`, among
    /// others), parsed once from its words; None when they name no pacer or an unknown one.
    pub fn of_options(options: &str) -> Option<PacerKind> {
        let mut words = options.split_whitespace();
        while let Some(w) = words.next() {
            let value = match w.strip_prefix("--pacer") {
                Some("") => words.next(),
                Some(rest) => rest.strip_prefix('='),
                None => None,
            };
            if let Some(v) = value {
                return v.parse().ok();
            }
        }
        None
    }
}

impl fmt::Display for PacerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

/// A name that is no pacer of the reference sender.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown pacer '{0}': the pacers are none, clock, sleep and tsc")]
pub struct UnknownPacer(pub String);

impl FromStr for PacerKind {
    type Err = UnknownPacer;

    fn from_str(s: &str) -> Result<PacerKind, UnknownPacer> {
        PacerKind::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| UnknownPacer(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pacers_serialize_and_parse_as_their_names() {
        for p in PacerKind::ALL {
            assert_eq!(serde_json::to_string(&p).unwrap(), format!("\"{p}\""));
            assert_eq!(
                serde_json::from_str::<PacerKind>(&format!("\"{}\"", p.as_str())).unwrap(),
                p
            );
            assert_eq!(p.as_str().parse::<PacerKind>(), Ok(p));
        }
        assert_eq!(
            "rdtsc".parse::<PacerKind>().unwrap_err().to_string(),
            "unknown pacer 'rdtsc': the pacers are none, clock, sleep and tsc"
        );
    }

    #[test]
    fn the_pacer_is_read_from_the_reference_senders_options() {
        assert_eq!(PacerKind::of_options("--pacer tsc"), Some(PacerKind::Tsc));
        assert_eq!(PacerKind::of_options("--pacer=sleep"), Some(PacerKind::Sleep));
        assert_eq!(
            PacerKind::of_options("--rate 1000 --pacer clock --slot deadline"),
            Some(PacerKind::Clock)
        );
        assert_eq!(PacerKind::of_options("--pacer"), None);
        assert_eq!(PacerKind::of_options("--pacer rdtsc"), None);
        assert_eq!(PacerKind::of_options("--pacers tsc"), None);
        assert_eq!(PacerKind::of_options("-d 2"), None);
    }
}
