//! `scanprof lab`'s parts: scenarios that stage a known situation in a private namespace lab
//! (`crate::netlab`) with the reference sender, the helpers and disturbances they need, the
//! receive-side fixtures that count for themselves, the independent truth each run is held
//! against, and the suite. `commands::lab` runs a scenario under the run machinery
//! (`crate::run`); `views::lab` renders the report and the suite's table.

pub mod cgroup;
pub mod conntrack;
pub mod disturb;
pub mod fixtures;
pub mod receivers;
pub mod scenario;
pub mod sender;
pub mod staged;
pub mod suite;
pub mod sysctl;
pub mod truth;
