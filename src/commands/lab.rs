//! `scanprof lab [SCENARIO]`: builds a private two-namespace lab, stages a known situation with the
//! reference sender, profiles it under `run`, prints what scanprof saw beside independent counts
//! (the receiver, tc), and removes the lab. The built-in default of the README's first command.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use serde::Serialize;

use crate::analysis::Summary;
use crate::cli::{LabOptions, RunOptions, Scenario};
use crate::collect::session::Target;
use crate::collect::DropClass;
use crate::lab::{Lab, LabConfig, SinkReport, TbfConfig};
use crate::system::netstat::QdiscStats;
use crate::views::json;

/// UDP port of the lab receiver; the closed-port scenario aims at a port nobody listens on.
const SINK_PORT: u16 = 9000;
const CLOSED_PORT: u16 = 9;

/// A scenario's staging: the link, the sender's flags, and its default rate.
pub struct Staging {
    pub tbf: Option<TbfConfig>,
    /// aim at an unused address of the lab subnet instead of the target
    pub unanswered: bool,
    pub rate: f64,
    pub size: usize,
    pub sndbuf: Option<usize>,
    pub port: u16,
    pub sink: bool,
}

pub fn staging(s: Scenario) -> Staging {
    let tbf = |rate: &str, limit: &str| {
        Some(TbfConfig {
            rate: rate.into(),
            burst: "4kb".into(),
            limit: limit.into(),
        })
    };
    match s {
        Scenario::Healthy => Staging {
            tbf: None,
            unanswered: false,
            rate: 10_000.0,
            size: 64,
            sndbuf: None,
            port: SINK_PORT,
            sink: true,
        },
        // 5000 pps x 512 B = 20 Mbit/s into a 2 Mbit/s bucket with a 10 kB queue.
        Scenario::QdiscDrop => Staging {
            tbf: tbf("2mbit", "10kb"),
            unanswered: false,
            rate: 5_000.0,
            size: 512,
            sndbuf: None,
            port: SINK_PORT,
            sink: true,
        },
        Scenario::ClosedPort => Staging {
            tbf: None,
            unanswered: false,
            rate: 2_000.0,
            size: 64,
            sndbuf: None,
            port: CLOSED_PORT,
            sink: false,
        },
        // 2000 pps x 1000 B into 2 Mbit/s with a deep queue: the small send buffer fills and sendto blocks.
        Scenario::Blocking => Staging {
            tbf: tbf("2mbit", "2mb"),
            unanswered: false,
            rate: 2_000.0,
            size: 1000,
            sndbuf: Some(16_384),
            port: SINK_PORT,
            sink: true,
        },
        // ARP for it gets no answer inside the lab: each resolution fails after ~3 s.
        Scenario::UnresolvedNeighbour => Staging {
            tbf: None,
            unanswered: true,
            rate: 200.0,
            size: 64,
            sndbuf: None,
            port: SINK_PORT,
            sink: false,
        },
    }
}

/// An address of the lab subnet that no host has (the lab pins its two hosts' neighbours).
fn unanswered_address(lab: &Lab) -> std::net::Ipv4Addr {
    let [a, b, c, _] = lab.target_addr.octets();
    std::net::Ipv4Addr::new(a, b, c, 77)
}

/// What the lab measured beside scanprof.
#[derive(Debug, Serialize)]
pub struct LabReport {
    pub scenario: String,
    pub requested_pps: f64,
    /// the receiver in the target namespace
    pub receiver: Option<SinkReport>,
    pub receiver_pps: Option<f64>,
    /// tc's view of the sender's qdisc after the run
    pub qdisc: Vec<QdiscStats>,
    /// scanprof's figures, for comparison
    pub scanprof_packets: u64,
    pub scanprof_achieved_pps: f64,
    pub scanprof_target_drops: u64,
}

pub fn run(o: &LabOptions) -> anyhow::Result<ExitCode> {
    let stage = staging(o.scenario);
    let rate = o.rate.unwrap_or(stage.rate);
    let exe = match &o.sender_exe {
        Some(p) => p.clone(),
        None => std::env::current_exe().context("finding the scanprof binary")?,
    };
    let lab = Lab::create(&LabConfig { tbf: stage.tbf })?;
    let sink = if stage.sink {
        Some(lab.udp_sink(stage.port)?)
    } else {
        None
    };
    let mut argv: Vec<String> = vec!["ip".into(), "netns".into(), "exec".into(), lab.sender_ns.clone()];
    argv.push(exe.display().to_string());
    argv.extend(
        [
            "send",
            "--to",
            &format!(
                "{}:{}",
                if stage.unanswered {
                    unanswered_address(&lab)
                } else {
                    lab.target_addr
                },
                stage.port
            ),
            "--rate",
            &rate.to_string(),
            "--duration",
            &o.duration.to_string(),
            "--size",
            &stage.size.to_string(),
        ]
        .map(String::from),
    );
    if let Some(b) = stage.sndbuf {
        argv.extend(["--sndbuf".to_string(), b.to_string()]);
    }
    let run_opts = RunOptions {
        interval: o.interval,
        // The sender ends itself; this bounds the run if it hangs.
        duration: Some(o.duration + 30.0),
        requested: Some(rate),
        profile: Some("scanprof-send".into()),
        per_packet: None,
        json: o.json,
        no_tui: o.no_tui,
        baseline: false,
        baseline_pacer: "tsc".into(),
        baseline_seconds: 2.0,
        export: o.export.clone(),
        redact: false,
    };
    let output = super::profile::Output::choose(o.json, o.no_tui);
    let cfg = super::profile::session_config(Target::Command(argv), &run_opts, output)?;
    let export_to = o.export.as_ref().map(|dir| super::profile::ExportTarget {
        dir: dir.clone(),
        redact: false,
    });
    let rec = super::profile::render(cfg, output, super::profile::stop_flag()?, export_to.as_ref())?;
    let summary = rec.summary.context("the run ended without a summary")?;
    // Let the last packets drain through the lab before reading the independent counters.
    std::thread::sleep(Duration::from_millis(300));
    let receiver = sink.map(|s| s.stop());
    let qdisc = lab.sender_qdisc().unwrap_or_default();
    let report = lab_report(o.scenario, rate, receiver, qdisc, &summary);
    lab.destroy()?;
    if o.json {
        println!("{}", json::line("lab", &report));
    } else {
        print!("{}", lab_text(&report));
    }
    Ok(ExitCode::SUCCESS)
}

fn lab_report(
    scenario: Scenario,
    rate: f64,
    receiver: Option<SinkReport>,
    qdisc: Vec<QdiscStats>,
    s: &Summary,
) -> LabReport {
    LabReport {
        scenario: format!("{scenario:?}"),
        requested_pps: rate,
        receiver_pps: receiver.as_ref().and_then(|r| r.pps()),
        receiver,
        qdisc,
        scanprof_packets: s.packets,
        scanprof_achieved_pps: s.achieved_pps,
        scanprof_target_drops: s
            .drops
            .iter()
            .filter(|d| d.class == DropClass::TargetLoss)
            .map(|d| d.count)
            .sum(),
    }
}

fn lab_text(r: &LabReport) -> String {
    let mut o = format!("\nlab ({}): independent counts beside scanprof's\n", r.scenario);
    if let Some(rx) = &r.receiver {
        o += &format!(
            "  receiver in the target namespace: {} packets, {:.1} pps | scanprof: {} packets, {:.1} pps\n",
            rx.packets,
            r.receiver_pps.unwrap_or(0.0),
            r.scanprof_packets,
            r.scanprof_achieved_pps
        );
    }
    for q in r.qdisc.iter().filter(|q| q.parent.is_none()) {
        o += &format!(
            "  tc qdisc {} on the sender's link: {} sent, {} dropped | scanprof: {} of the target's packets dropped\n",
            q.kind, q.sent_packets, q.drops, r.scanprof_target_drops
        );
    }
    o
}
