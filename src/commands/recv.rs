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
        crate::system::user_files::replace(path, 0o644, text.as_bytes())
            .with_context(|| format!("writing the report to {}", path.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}
