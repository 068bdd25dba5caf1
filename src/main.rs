//! scanprof: parse the command line and hand it to the subcommand; print errors as one clear line.

use std::io::Write;
use std::process::ExitCode;

use scanprof::cli::Command;
use scanprof::commands;
use scanprof::session::Target;

fn main() -> ExitCode {
    scanprof::system::startup::begin();
    // `scanprof watchdog` is started by `run` itself, not by people: it is no clap subcommand,
    // so that no --help, manual page or shell completion offers it.
    if let Some(watches) = scanprof::system::watchdog::requested() {
        return scanprof::system::watchdog::run(watches);
    }
    let cli = commands::version::parse();
    let result = match &cli.command {
        Command::Attach {
            pids,
            allow_system,
            run,
        } => commands::profile::attach(pids, *allow_system, run),
        Command::Run { run, command } => commands::profile::run(Target::Command(command.clone()), run),
        Command::Record {
            pids,
            allow_system,
            run,
            command,
        } => commands::profile::record(pids, *allow_system, command, run),
        Command::Report { path, format } => commands::report::run(path, *format),
        Command::Doctor { json } => commands::doctor::run(*json),
        Command::Completions { shell } => commands::version::completions(*shell),
        Command::Man { subcommand } => commands::version::man(subcommand.as_deref()),
        Command::Send(o) => commands::send::run(o),
        Command::Recv(o) => commands::recv::run(o),
        Command::Relay(o) => commands::relay::run(o),
        Command::RingRecv(o) => commands::ring_recv::run(o),
        Command::Lab(o) => commands::lab::run(o),
        Command::Baseline(o) => commands::baseline::run(o),
        Command::Sweep(o) => commands::sweep::run(o),
        Command::Compare { a, b, format } => commands::compare::run(a, b, *format),
        Command::Agent(o) => commands::agent::run(o),
    };
    result.unwrap_or_else(|e| {
        // Not eprintln!, which panics when stderr is gone (a closed terminal).
        let _ = writeln!(std::io::stderr(), "scanprof: {e:#}");
        ExitCode::from(2)
    })
}
