//! `scanprof doctor`: what this machine allows scanprof to measure, and what to do about the rest
//! (the checks are `run::checks`, which bundles carry too).

use std::process::ExitCode;

use crate::run::checks::{checks, Status};

pub fn run(json: bool) -> anyhow::Result<ExitCode> {
    let checks = checks(true);
    let usable = !checks.iter().any(|c| c.status == Status::Missing);
    if json {
        println!("{}", serde_json::json!({ "usable": usable, "checks": checks }));
    } else {
        for c in &checks {
            let tag = match c.status {
                Status::Ok => "ok      ",
                Status::Degraded => "DEGRADED",
                Status::Missing => "MISSING ",
                Status::Info => "info    ",
            };
            println!("{tag} {:<36} {}", c.name, c.detail);
            if let Some(a) = &c.advice {
                if c.status != Status::Ok {
                    println!("         {:<36} -> {a}", "");
                }
            }
        }
        println!(
            "\n{}",
            if usable {
                "scanprof can profile on this machine."
            } else {
                "scanprof cannot profile here until the MISSING items are fixed."
            }
        );
    }
    Ok(if usable {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
