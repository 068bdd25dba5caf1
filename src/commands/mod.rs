//! What each subcommand does, built from the library's parts. main.rs parses the command line
//! and calls one of these; they return the process exit code.

pub mod agent;
pub mod baseline;
pub mod compare;
pub mod doctor;
pub mod lab;
pub mod profile;
pub mod recv;
pub mod relay;
pub mod report;
pub mod ring_recv;
pub mod send;
pub mod sweep;
pub mod version;
