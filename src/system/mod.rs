//! Facts about the host gathered without BPF: independent counters (tc, ip) that tests and the
//! lab compare scanprof's figures with.

pub mod machine;
pub mod netstat;
