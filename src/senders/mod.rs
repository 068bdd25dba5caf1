//! Traffic sources with known behaviour. The profiler's numbers for a real scanner are checked
//! against these: a sender that does exactly what it was asked shows where the gap comes from.
//! `engine` runs a send: `pacing` decides when (with `tsc` for the TSC pacer), `methods` how,
//! `report` what happened; `symbols` exports the pacing and send steps under stable names.

pub mod baseline;
pub mod engine;
pub mod methods;
pub mod pacing;
pub mod report;
pub mod symbols;
pub mod tsc;
pub mod udp;
