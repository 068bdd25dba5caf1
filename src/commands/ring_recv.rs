//! `scanprof ring-recv`: the reference packet-socket reader (`lab::reference::ring_recv`), its
//! own count and the socket's PACKET_STATISTICS printed and, with `--report`, written as JSON.

use std::process::ExitCode;

use anyhow::{Context, Result};

use crate::cli::RingRecvOptions;
use crate::lab::reference::ring_recv;
use crate::views::lab::ring_recv_text;

pub fn run(o: &RingRecvOptions) -> Result<ExitCode> {
    let report = ring_recv::run(o)?;
    print!("{}", ring_recv_text(&report));
    if let Some(path) = &o.report {
        crate::system::user_files::replace(path, 0o644, serde_json::to_string(&report)?.as_bytes())
            .with_context(|| format!("writing the report to {}", path.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}
