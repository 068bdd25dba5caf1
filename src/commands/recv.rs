//! `scanprof recv`: the reference UDP receiver (`lab::reference::recv`), its own count printed
//! and, with `--report`, written as JSON.

use std::process::ExitCode;

use anyhow::{Context, Result};

use crate::cli::RecvOptions;
use crate::lab::reference::recv;
use crate::views::lab::recv_text;

pub fn run(o: &RecvOptions) -> Result<ExitCode> {
    let report = recv::run(o)?;
    print!("{}", recv_text(&report));
    if let Some(path) = &o.report {
        let text = serde_json::to_string(&report)?;
        std::fs::write(path, text)
            .with_context(|| format!("cannot write the report to {}", path.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}
