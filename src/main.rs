//! scanprof: parse the command line and hand it to the subcommand; print errors as one clear line.

use std::io::Write;
use std::process::ExitCode;

use scanprof::commands;

fn main() -> ExitCode {
    scanprof::system::startup::begin();
    // `scanprof watchdog` is started by `run` itself, not by people: it is no clap subcommand,
    // so that no --help, manual page or shell completion offers it.
    if let Some(watches) = scanprof::system::watchdog::requested() {
        return scanprof::system::watchdog::run(watches);
    }
    let cli = commands::version::parse();
    let result = commands::dispatch(&cli);
    result.unwrap_or_else(|e| {
        // Not eprintln!, which panics when stderr is gone (a closed terminal).
        let _ = writeln!(std::io::stderr(), "scanprof: {e:#}");
        ExitCode::from(2)
    })
}
