//! `scanprof lab [SCENARIO]`: builds a private two-namespace lab, stages a known situation with the
//! reference sender, profiles it under `run`, prints what scanprof saw beside independent counts
//! (the receiver, tc, the namespaces' SNMP counters) and whether the diagnosis named the staged
//! cause, and removes the lab. `--suite` runs every scenario in turn as a child process and
//! tabulates the verdicts against the known causes (docs/diagnosis.md, "Scenario suite results").

use std::process::ExitCode;

use anyhow::{bail, Context};

use crate::cli::{LabOptions, Scenario};
use crate::lab::scenario::{scenario_name, staging};
use crate::lab::staged::Staged;
use crate::lab::suite::{self, SuiteRow};
use crate::session::Target;
use crate::views::json;
use crate::views::lab::{lab_text, suite_table};
use crate::views::metrics::MetricsTargets;

/// The live view's title: the scenario and the reference sender's own command (`scanprof send
/// --to ...`), not the wrappers that place it in the lab (`ip netns exec`, `setsid sh -c`,
/// `nice`, `taskset`); the binary by its name, not its build path.
fn lab_title(scenario: Scenario, sender_argv: &[String]) -> String {
    let mut words = crate::run::render::command_words(sender_argv);
    if let Some(exe) = words.first_mut() {
        if let Some(name) = exe.rsplit('/').next() {
            *exe = name.to_string();
        }
    }
    format!("lab {}: {}", scenario_name(scenario), words.join(" "))
}

pub fn run(o: &LabOptions) -> anyhow::Result<ExitCode> {
    if o.suite {
        return run_suite(o);
    }
    if !(o.duration.is_finite() && o.duration > 0.0) {
        bail!("--duration must be a positive number of seconds");
    }
    let stage = staging(o.scenario).with_workers(o.scenario, o.workers)?;
    {
        use crate::system::caps::{self, CAP_BPF, CAP_NET_ADMIN, CAP_PERFMON, CAP_SYS_ADMIN};
        let missing = caps::missing(&[CAP_SYS_ADMIN, CAP_NET_ADMIN, CAP_BPF, CAP_PERFMON]);
        if !missing.is_empty() {
            bail!(
                "scanprof lab needs root: it creates network namespaces, veths and qdiscs and \
                 loads BPF programs (missing {}). Run it with sudo",
                caps::names(&missing)
            );
        }
    }
    // Labs of scanprof processes that were killed (SIGKILL leaves no chance to clean up).
    for ns in crate::netlab::remove_dead_labs() {
        eprintln!("scanprof: removed namespace {ns}, left by a lab whose scanprof is gone");
    }
    for (sysctl, value) in crate::lab::sysctl::restore_dead_holds() {
        eprintln!("scanprof: restored {sysctl} to {value}, left changed by a lab whose scanprof is gone");
    }
    // Before the lab exists: a bundle directory that cannot take the bundle is refused first.
    let export_to = o
        .export
        .as_ref()
        .map(|dir| crate::run::ExportTarget::open(dir, false, o.force))
        .transpose()?;
    let rate = o.rate.unwrap_or(stage.rate);
    let exe = match &o.sender_exe {
        Some(p) => p.clone(),
        None => std::env::current_exe().context("finding the scanprof binary")?,
    };
    let staged = Staged::start(o.scenario, stage, rate, o.duration, &exe)?;
    let run_opts = staged.run_options(o);
    let output = if o.quiet && !o.json {
        crate::run::Output::Quiet
    } else {
        crate::run::Output::choose(o.json, o.no_tui)
    };
    let title = lab_title(o.scenario, &staged.argv);
    let mut cfg = crate::run::session_config(
        Target::Command(staged.argv.iter().map(Into::into).collect()),
        &run_opts,
        output,
    )?;
    // After the run this thread reads the lab's counters and deletes its namespaces.
    cfg.keep_also = if staged.has_quota() {
        &crate::system::privileges::FOR_LAB_CGROUP
    } else {
        &crate::system::privileges::FOR_LAB
    };
    let metrics = MetricsTargets {
        listen: o.metrics,
        file: o.metrics_file.clone(),
        ..MetricsTargets::default()
    };
    let stop = crate::run::stop_flag()?;
    let rec = crate::run::render_with(
        cfg,
        output,
        stop,
        export_to.as_ref(),
        &metrics,
        crate::run::ViewOptions {
            title: Some(title),
            exit_at_end: o.exit_at_end,
        },
    )?
    .rec;
    let summary = rec.summary.context("the run ended without a summary")?;
    let report = staged.finish(&summary)?;
    if o.json {
        println!("{}", json::line("lab", &report));
    } else {
        print!("{}", lab_text(&report));
    }
    Ok(ExitCode::SUCCESS)
}

/// `--suite`: every scenario in turn (`lab::suite`), then the table.
fn run_suite(o: &LabOptions) -> anyhow::Result<ExitCode> {
    let rows = suite::run(o)?;
    let all_ok = rows.iter().all(SuiteRow::ok);
    if o.json {
        let value = serde_json::json!({ "ok": all_ok, "duration_s": o.duration, "rows": rows });
        println!("{}", json::line("suite", &value));
    } else {
        print!("{}", suite_table(&rows));
    }
    Ok(if all_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lab::scenario::SENDER_NICE;

    #[test]
    fn the_lab_title_names_the_scenario_and_the_senders_own_command() {
        // It read `ip netns exec sp7503-0s setsid sh -c echo -20 > /proc/self/autogroup ...`.
        // The wrappers as `sender_argv` writes them (a Lab needs root to exist).
        let lift = format!("echo {SENDER_NICE} > /proc/self/autogroup 2>/dev/null; exec \"$@\"");
        let send =
            "/work/x/target/release/scanprof send --to 10.99.0.2:9000 --rate 5000 --duration 3 --size 64";
        let mut argv: Vec<String> = [
            "ip",
            "netns",
            "exec",
            "sp7503-0s",
            "setsid",
            "sh",
            "-c",
            &lift,
            "scanprof-lab",
        ]
        .map(String::from)
        .to_vec();
        argv.extend(["nice", "-n", SENDER_NICE, "taskset", "-c", "1"].map(String::from));
        argv.extend(send.split(' ').map(String::from));
        let want = "lab qdisc-drop: scanprof send --to 10.99.0.2:9000 --rate 5000 --duration 3 --size 64";
        assert_eq!(lab_title(Scenario::QdiscDrop, &argv), want);
        // With the hog (no niceness lift): the same.
        let mut hog: Vec<String> = ["ip", "netns", "exec", "sp7503-0s", "taskset", "-c", "1"]
            .map(String::from)
            .to_vec();
        hog.extend(send.split(' ').map(String::from));
        assert_eq!(lab_title(Scenario::QdiscDrop, &hog), want);
    }
}
