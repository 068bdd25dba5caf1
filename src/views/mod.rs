//! What people look at, all rendered from the same `Snapshot`/`Summary`: the NDJSON stream for
//! machines and the text report for people (the live terminal view joins them here).

#[cfg(test)]
pub mod fixtures;
pub mod export;
pub mod json;
pub mod text;
pub mod tui;
