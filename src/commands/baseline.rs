//! `scanprof baseline`: what this machine can do before any scanner is blamed. Checks the
//! options, runs the matrix (`senders::baseline`: the reference sender against loopback and a
//! private lab) and prints it (`views::baseline`, or the report as JSON).

use std::process::ExitCode;

use anyhow::{ensure, Context, Result};

use crate::cli::BaselineOptions;
use crate::senders::baseline::{measure, Matrix, MAX_SECONDS};
use crate::views::baseline::render_text;

pub fn run(o: &BaselineOptions) -> Result<ExitCode> {
    validate(o)?;
    let exe = std::env::current_exe().context("finding the scanprof binary")?;
    let stop = crate::run::stop_flag()?;
    let pacers = o
        .pacers
        .iter()
        .map(|p| p.parse())
        .collect::<Result<Vec<crate::wrappers::PacerKind>, _>>()?;
    let matrix = Matrix {
        pacers: pacers.clone(),
        rates: o.rates.clone(),
        methods: o.methods.iter().map(|m| m.parse()).collect::<Result<_, _>>()?,
        targets: o.targets.clone(),
        seconds: o.seconds,
    };
    let report = measure(&exe, &matrix, &stop)?;
    if o.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print!("{}", render_text(&report, &pacers));
    }
    Ok(ExitCode::SUCCESS)
}

fn validate(o: &BaselineOptions) -> Result<()> {
    ensure!(
        o.seconds.is_finite() && o.seconds > 0.0 && o.seconds <= MAX_SECONDS,
        "--seconds must be more than 0 and at most {MAX_SECONDS}"
    );
    for r in &o.rates {
        ensure!(
            r.is_finite() && *r >= 0.0,
            "--rates: {r} is not a rate (packets per second >= 0; 0 = unlimited)"
        );
    }
    ensure!(
        !o.targets.is_empty(),
        "--targets: name at least one of loopback, lab"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use anyhow::bail;

    use super::*;

    fn parse(args: &[&str]) -> Result<BaselineOptions> {
        use clap::Parser;
        let cli = crate::cli::Cli::try_parse_from(["scanprof", "baseline"].iter().chain(args))?;
        match cli.command {
            crate::cli::Command::Baseline(o) => Ok(o),
            other => bail!("parsed as {other:?}"),
        }
    }

    #[test]
    fn options_default_to_the_full_matrix() -> Result<()> {
        let o = parse(&[])?;
        assert_eq!(o.rates, vec![100.0, 1000.0, 10_000.0, 100_000.0, 0.0]);
        assert_eq!(o.pacers, vec!["tsc", "clock", "sleep"]);
        assert_eq!(o.methods, vec!["sendto", "raw", "sendmmsg", "packet"]);
        assert_eq!(o.targets, vec!["loopback", "lab"]);
        assert_eq!((o.seconds, o.json), (2.0, false));
        Ok(())
    }

    #[test]
    fn options_take_comma_lists_and_refuse_unknown_names() -> Result<()> {
        let o = parse(&[
            "--rates",
            "1000,0",
            "--pacers",
            "clock",
            "--methods",
            "sendto",
            "--seconds",
            "1",
            "--targets",
            "lab",
            "--json",
        ])?;
        assert_eq!(
            (o.rates, o.pacers, o.methods),
            (
                vec![1000.0, 0.0],
                vec!["clock".to_string()],
                vec!["sendto".to_string()]
            )
        );
        assert_eq!(
            (o.seconds, o.targets, o.json),
            (1.0, vec!["lab".to_string()], true)
        );
        assert!(parse(&["--pacers", "rdtsc"]).is_err());
        assert!(parse(&["--methods", "sendfile"]).is_err());
        assert!(parse(&["--targets", "10.0.0.1"]).is_err());
        // Refused by the parser now (cli's value parsers), before validate sees them.
        assert!(parse(&["--rates=-5"]).is_err());
        assert!(parse(&["--seconds", "0"]).is_err());
        assert!(parse(&["--seconds", "600"]).is_err());
        Ok(())
    }
}
