//! `scanprof lab --suite`: every scenario in turn as its own `scanprof lab SCENARIO --json`
//! process (its own BPF set and lab), each one's check collected into a row.

use std::process::{Command, Stdio};

use anyhow::Context;
use clap::ValueEnum;
use serde::Serialize;

use super::scenario::scenario_name;
use super::truth::DiagnosisCheck;
use crate::cli::{LabOptions, Scenario};

/// One scenario of the suite.
#[derive(Debug, Clone, Serialize)]
pub struct SuiteRow {
    pub scenario: String,
    pub check: Option<DiagnosisCheck>,
    /// why the scenario produced no check (the child failed)
    pub error: Option<String>,
}

impl SuiteRow {
    pub fn ok(&self) -> bool {
        self.check.as_ref().is_some_and(|c| c.ok)
    }
}

/// Every scenario in turn, each as `scanprof lab SCENARIO --json` (its own process, BPF set
/// and lab), each one's row.
pub fn run(o: &LabOptions) -> anyhow::Result<Vec<SuiteRow>> {
    let exe = match &o.sender_exe {
        Some(p) => p.clone(),
        None => std::env::current_exe().context("finding the scanprof binary")?,
    };
    let scenarios = Scenario::value_variants();
    let mut rows = Vec::new();
    for (i, s) in scenarios.iter().enumerate() {
        let name = scenario_name(*s);
        eprintln!("scanprof lab --suite: {name} ({} of {})", i + 1, scenarios.len());
        let mut cmd = Command::new(&exe);
        crate::system::child::die_with_parent(&mut cmd);
        cmd.args(["lab", &name, "--json", "--duration", &o.duration.to_string()])
            .args(["--interval", &o.interval.to_string(), "--profile", &o.profile])
            .stdin(Stdio::null());
        if let Some(p) = &o.sender_exe {
            cmd.arg("--sender-exe").arg(p);
        }
        let out = cmd
            .output()
            .with_context(|| format!("cannot run {}", exe.display()))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let lab_line = stdout
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|v| v.get("type").and_then(|t| t.as_str()) == Some("lab"));
        let check = lab_line
            .and_then(|v| v.get("check").cloned())
            .and_then(|c| serde_json::from_value::<DiagnosisCheck>(c).ok());
        let error = match (&check, out.status.success()) {
            (Some(_), true) => None,
            _ => {
                let stderr = String::from_utf8_lossy(&out.stderr);
                let tail: Vec<&str> = stderr.lines().rev().take(3).collect();
                Some(format!(
                    "`scanprof lab {name}` exited with {}: {}",
                    out.status,
                    tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
                ))
            }
        };
        rows.push(SuiteRow {
            scenario: name,
            check,
            error,
        });
    }
    Ok(rows)
}
