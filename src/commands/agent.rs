//! `scanprof agent`: reads its options and runs the agent (`crate::run::agent`) until stopped.

use std::process::ExitCode;

use crate::cli::AgentOptions;
use crate::run::agent::{self, Overrides};

pub fn run(o: &AgentOptions) -> anyhow::Result<ExitCode> {
    let overrides = Overrides {
        spool: o.spool.clone(),
        metrics: o.metrics,
        max_runs: o.max_runs.map(usize::from),
    };
    agent::run(o.config.clone(), overrides)?;
    Ok(ExitCode::SUCCESS)
}
