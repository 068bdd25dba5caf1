//! `scanprof compare A B`: two bundles side by side (placeholder until the comparison lands).

use std::path::Path;
use std::process::ExitCode;

use crate::cli::ReportFormat;

pub fn run(_a: &Path, _b: &Path, _format: ReportFormat) -> anyhow::Result<ExitCode> {
    anyhow::bail!("scanprof compare is not built yet")
}
