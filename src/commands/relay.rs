//! `scanprof relay`: the reference packet relay (`lab::reference::relay`), its own counts printed
//! and, with `--report`, written as JSON.

use std::process::ExitCode;

use anyhow::{Context, Result};

use crate::cli::RelayOptions;
use crate::lab::reference::relay;
use crate::views::lab::relay_text;

pub fn run(o: &RelayOptions) -> Result<ExitCode> {
    let report = relay::run(o)?;
    print!("{}", relay_text(&report, &o.input));
    if let Some(path) = &o.report {
        crate::system::user_files::replace(path, 0o644, serde_json::to_string(&report)?.as_bytes())
            .with_context(|| format!("writing the report to {}", path.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}
