//! Traffic sources with known behaviour. The profiler's numbers for a real scanner are checked
//! against these: a sender that does exactly what it was asked shows where the gap comes from.

pub mod udp;
