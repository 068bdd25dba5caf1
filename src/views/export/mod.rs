//! Trace bundles: everything a run produced, as the views received it (`Recording`), written as
//! files a maintainer can open without root or scanprof (events.ndjson, a Chrome/Perfetto
//! trace, report.md with SVG plots, a bpftrace script that re-counts the core figures), and
//! read back by `scanprof report`.

pub mod bundle;
pub mod markdown;
pub mod plots;
pub mod recount;
pub mod trace;

use serde::{Deserialize, Serialize};

use crate::analysis::{Snapshot, Summary};
use crate::collect::family::ProcessInfo;
use crate::collect::session::Update;
use crate::probes::ProbeStatus;

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
}

/// A run as the views saw it, tick by tick.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Recording {
    pub meta: Meta,
    /// the family at attach
    pub processes: Vec<ProcessInfo>,
    pub probes: Vec<ProbeStatus>,
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

    /// Takes one update, in the order the session sends them.
    pub fn apply(&mut self, update: &Update) {
        match update {
            Update::Started { processes, probes } => {
                self.processes = processes.clone();
                self.probes = probes.clone();
            }
            Update::Tick(s) => self.ticks.push((**s).clone()),
            Update::Done(s) => self.summary = Some((**s).clone()),
        }
    }
}
