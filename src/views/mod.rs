//! What people look at, all rendered from the same `Snapshot`/`Summary`: the NDJSON stream for
//! machines and the text report for people (the live terminal view joins them here).

pub mod baseline;
pub mod compare;
pub mod export;
#[cfg(test)]
pub mod fixtures;
pub mod json;
pub mod lab;
pub mod metrics;
pub mod report;
pub mod sweep;
pub mod text;
pub mod tui;
