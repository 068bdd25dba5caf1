//! What each subcommand does, built from the library's parts. main.rs parses the command line
//! and calls one of these through [`dispatch`]; they return the process exit code.

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

#[cfg(test)]
mod examples;

use std::process::ExitCode;

use crate::cli::{Cli, Command};
use crate::session::Target;

/// Runs the subcommand the command line names and returns its exit code.
pub fn dispatch(cli: &Cli) -> anyhow::Result<ExitCode> {
    match &cli.command {
        Command::Attach {
            pids,
            allow_system,
            run,
        } => profile::attach(pids, *allow_system, run),
        Command::Run { run, command } => profile::run(Target::Command(command.clone()), run),
        Command::Record {
            pids,
            allow_system,
            run,
            command,
        } => profile::record(pids, *allow_system, command, run),
        Command::Report { path, format } => report::run(path, *format),
        Command::Doctor { json } => doctor::run(*json),
        Command::Completions { shell } => version::completions(*shell),
        Command::Man { subcommand } => version::man(subcommand.as_deref()),
        Command::Send(o) => send::run(o),
        Command::Recv(o) => recv::run(o),
        Command::Relay(o) => relay::run(o),
        Command::RingRecv(o) => ring_recv::run(o),
        Command::Lab(o) => lab::run(o),
        Command::Baseline(o) => baseline::run(o),
        Command::Sweep(o) => sweep::run(o),
        Command::Compare { a, b, format } => compare::run(a, b, *format),
        Command::Agent(o) => agent::run(o),
    }
}
