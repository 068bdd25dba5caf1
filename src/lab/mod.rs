//! `scanprof lab`'s parts: scenarios that stage a known situation in a private namespace lab
//! (`crate::netlab`) with the reference sender (`scenario`, `staged`, `sender`), the helpers
//! and disturbances they need (`receivers`, `disturb`, `conntrack`, `cgroup`, `sysctl`), the
//! reference receivers (`reference`: receive-side fixtures that count for themselves), the
//! independent truth each run is held against (`truth`), and the suite (`suite`).
//! `commands::lab` runs a scenario under the run machinery (`crate::run`); `views::lab` renders
//! the report and the suite's table.

pub mod cgroup;
pub mod conntrack;
pub mod disturb;
pub mod receivers;
pub mod reference;
pub mod scenario;
pub mod sender;
pub mod staged;
pub mod suite;
pub mod sysctl;
pub mod truth;
