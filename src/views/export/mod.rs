//! Trace bundles: everything a run produced, as the views received it (`Recording`), written as
//! files a maintainer can open without root or scanprof (events.ndjson, a Perfetto trace and
//! its Chrome JSON twin, report.md with SVG plots, a bpftrace script that re-counts the core
//! figures), and read back by `scanprof report`.

pub mod bundle;
pub mod markdown;
pub mod pcap;
pub mod perfetto;
pub mod plots;
pub mod recount;
pub mod spool;
pub mod trace;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::analysis::{Snapshot, Summary};
use crate::collect::family::ProcessInfo;
use crate::probes::ProbeStatus;
use crate::session::Update;
use crate::system::ClockReadings;

/// Where and when a recording was made.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Meta {
    /// scanprof's own command line
    pub command_line: Vec<String>,
    /// scanprof version
    pub version: String,
    /// wall-clock start, RFC 3339 UTC
    pub started_at: String,
    pub hostname: String,
    /// `uname -r`
    pub kernel: String,
    /// that kernel's drop reasons, number -> name (without `SKB_DROP_REASON_`): the bundle's
    /// bpftrace script prints names with them
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub drop_reasons: BTreeMap<u32, String>,
    /// written from the live view (`e`) while the run went on: no summary yet, by design
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub exported_mid_run: bool,
}

/// A run as the views saw it, tick by tick.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Recording {
    pub meta: Meta,
    /// the family at attach
    pub processes: Vec<ProcessInfo>,
    pub probes: Vec<ProbeStatus>,
    /// the clocks at attach (None in a bundle written before scanprof recorded them)
    pub clocks: Option<ClockReadings>,
    pub ticks: Vec<Snapshot>,
    pub summary: Option<Summary>,
}

impl Recording {
    pub fn new(meta: Meta) -> Recording {
        Recording {
            meta,
            ..Default::default()
        }
    }

    /// Takes one update like [`Recording::apply`], but keeps only the latest tick, so that a
    /// long run's memory stays flat: a bundle takes its ticks from a spool file instead
    /// ([`spool::SpooledRecording`]). The summary carries the run's figures either way.
    pub fn apply_latest(&mut self, update: &Update) {
        if let Update::Tick(_) = update {
            self.ticks.clear();
        }
        self.apply(update);
    }

    /// Takes one update, in the order the session sends them.
    pub fn apply(&mut self, update: &Update) {
        match update {
            Update::Started {
                processes,
                probes,
                clocks,
            } => {
                self.processes = processes.clone();
                self.probes = probes.clone();
                self.clocks = Some(*clocks);
            }
            Update::Tick(s) => self.ticks.push((**s).clone()),
            Update::Done(s) => self.summary = Some((**s).clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::views::fixtures::rich_recording;

    /// Without a bundle, a run keeps one tick however long it runs; with one, every tick.
    #[test]
    fn apply_latest_keeps_one_tick_and_the_summary() {
        let full = rich_recording();
        assert!(full.ticks.len() > 1);
        let mut all = Recording::default();
        let mut latest = Recording::default();
        for round in 0..50 {
            for t in &full.ticks {
                let u = Update::Tick(Box::new(t.clone()));
                all.apply(&u);
                latest.apply_latest(&u);
            }
            assert_eq!(latest.ticks.len(), 1, "round {round}");
        }
        let done = Update::Done(Box::new(full.summary.clone().unwrap()));
        latest.apply_latest(&done);
        all.apply(&done);
        assert_eq!(all.ticks.len(), 50 * full.ticks.len());
        assert_eq!(latest.ticks.last(), full.ticks.last());
        assert_eq!(latest.summary, full.summary);
    }
}
