//! scanprof: an eBPF profiler for packet scanners. Data flows one way:
//! probes (kernel side, loaded by `probes`) -> `collect` (typed counters) -> `analysis` (pure:
//! rates, funnel, budgets, statistics, one `Snapshot` per tick) -> `views`. docs/architecture.md
//! says where new code goes.

pub mod analysis;
pub mod cli;
pub mod collect;
pub mod commands;
pub mod lab;
pub mod netlab;
pub mod probes;
pub mod run;
pub mod senders;
pub mod session;
pub mod system;
pub mod units;
pub mod views;
pub mod wrappers;

#[cfg(test)]
mod architecture_tests;
