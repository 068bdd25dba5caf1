//! Prometheus metrics of a run, for fleets: `--metrics ADDR:PORT` serves them at `/metrics`
//! while scanprof runs, `--metrics-file PATH` writes them after every tick for node_exporter's
//! textfile collector (one-shot scans). The exposition is the Prometheus text format (0.0.4),
//! which Prometheus, the OpenTelemetry Collector and the textfile collector all read; it is
//! encoded by the `prometheus` crate from a registry built afresh from the run's totals at each
//! update, so every counter is the run's own monotonic total since attach.
//!
//! Labels never carry target addresses or pids, and stay bounded: the scanner (its profile),
//! the run id (given by `scanprof agent`, which serves a run for its retention window only), the
//! family member's role, the stage, the reason, class and device of the family's own drops
//! (other processes' drops are one counter, without reason or device), the errno, and the
//! scanner's own shard argument. docs/metrics.md lists every metric.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::Context;
use prometheus::{Encoder, Gauge, GaugeVec, IntCounterVec, Opts, Registry, TextEncoder};

use crate::analysis::verdict::{Cause, Confidence, Kind};
use crate::analysis::{RunPhase, Snapshot, StageName, Summary, STAGES};
use crate::collect::{DropClass, TimeBudget};
use crate::session::Update;
use crate::system::user_files::replace;

/// The content type of the Prometheus text format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
/// Longest request head the server reads, bytes.
const MAX_REQUEST: usize = 8192;
/// A client that sends or reads slower than this is dropped.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(2);

/// Labels on every metric of one run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunLabels {
    /// the scanner profile that applies (`generic` when none recognised the target)
    pub scanner: String,
    /// the scanner's own shard argument (`I/N`), when its command line has one
    pub shard: Option<String>,
    /// the run's id, when `scanprof agent` started the run (it names the run's spool directory)
    pub run_id: Option<String>,
}

impl RunLabels {
    /// The labels of a run of `argv` under the profile named `scanner`.
    pub fn of(scanner: &str, argv: &[String]) -> RunLabels {
        RunLabels {
            scanner: scanner.to_string(),
            shard: shard_of(argv),
            run_id: None,
        }
    }
}

/// The shard a scanner's command line names, as `I/N` (N omitted when not given): masscan's
/// `--shard I/N`, zmap's `--shard I` with `--shards N` (`=` forms too).
pub fn shard_of(argv: &[String]) -> Option<String> {
    let value = |name: &str| -> Option<String> {
        let eq = format!("{name}=");
        argv.iter().enumerate().find_map(|(i, w)| {
            if w == name {
                argv.get(i + 1).cloned()
            } else {
                w.strip_prefix(&eq).map(String::from)
            }
        })
    };
    let shard = value("--shard")?;
    if shard.contains('/') {
        return Some(shard);
    }
    Some(match value("--shards") {
        Some(n) => format!("{shard}/{n}"),
        None => shard,
    })
}

/// The run's totals since attach, kept from the updates; what the exposition shows.
#[derive(Debug, Default)]
pub struct MetricsState {
    labels: RunLabels,
    requested_pps: Option<f64>,
    achieved_pps: f64,
    run_seconds: f64,
    /// stage -> events since attach
    stages: BTreeMap<StageName, u64>,
    /// (reason, class, device) -> drops of the family's own classes since attach
    drops: BTreeMap<(String, String, String), u64>,
    /// other processes' drops (class unrelated) since attach, all reasons and devices
    other_drops: u64,
    /// (role, state) -> seconds, summed over the family's sender threads
    sender_seconds: BTreeMap<(String, &'static str), f64>,
    /// (role, errno name) -> failed send calls
    errors: BTreeMap<(String, String), u64>,
    /// what the probes could not record -> count since attach
    lost: BTreeMap<&'static str, u64>,
    /// reply kind -> replies that arrived from the family's destinations since attach (the
    /// reply funnel's `arrived`); empty without the reply counter
    replies: BTreeMap<&'static str, u64>,
    /// with `--device-stages sampled`, the share of the time the device-stage programs were
    /// attached (the latest tick's, the run's once it ended); None when they are counted
    device_coverage: Option<f64>,
    cpu: f64,
    bpf_ns_per_packet: Option<f64>,
    bpf_target_ns_per_packet: Option<f64>,
    /// None on a tick without a share (the gauge is then absent, never a stale value)
    bpf_share_of_target: Option<f64>,
    bpf_machine_cpu_share: Option<f64>,
    /// top verdict per kind: kind -> (cause, confidence, share)
    verdicts: BTreeMap<Kind, (Cause, Confidence, f64)>,
    /// what the family was doing at the latest tick
    phase: Option<RunPhase>,
    /// why the run ended, once it has
    ended: Option<String>,
}

impl MetricsState {
    pub fn new(labels: RunLabels) -> MetricsState {
        MetricsState {
            labels,
            ..Default::default()
        }
    }

    /// Takes one update of the session.
    pub fn update(&mut self, update: &Update) {
        match update {
            Update::Started { .. } => {}
            Update::Tick(s) => self.tick(s),
            Update::Done(s) => self.done(s),
        }
    }

    fn tick(&mut self, s: &Snapshot) {
        self.requested_pps = s.requested_pps;
        // Only a whole tick of sending measures the rate: during a wait for late replies (and
        // over the partial last sending tick) the gauge keeps the last judged tick's rate.
        if s.judges_rate() {
            self.achieved_pps = s.achieved_pps;
        }
        self.phase = Some(s.phase);
        self.run_seconds = s.t_s;
        for st in &s.stages {
            raise(self.stages.entry(st.name).or_default(), st.total);
        }
        self.device_coverage = s.device_sampling.map(|d| d.coverage());
        // A sample's rows hold the drops of its tick: they add up.
        for (k, n) in drop_sums(&s.drops) {
            *self.drops.entry(k).or_default() += n;
        }
        self.other_drops += other_drops(&s.drops);
        let roles = roles(&s.processes);
        for t in &s.threads {
            let role = roles.get(&t.pid).cloned().unwrap_or_default();
            for (state, ns) in budget_states(&t.budget) {
                *self.sender_seconds.entry((role.clone(), state)).or_default() += ns as f64 / 1e9;
            }
            for (errno, n) in &t.errors {
                *self.errors.entry((role.clone(), errno.clone())).or_default() += n;
            }
        }
        // A tick's reply funnel holds the replies of its tick: they add up.
        if let Some(r) = &s.replies {
            for (kind, n) in reply_kinds(&r.arrived) {
                *self.replies.entry(kind).or_default() += n;
            }
        }
        self.health(&s.health);
        self.cpu = s.cost.cpu;
        self.bpf(s.cost.bpf.as_ref());
        self.top_verdicts(&s.verdicts, s.judges_rate());
    }

    fn done(&mut self, s: &Summary) {
        self.requested_pps = s.requested_pps;
        self.achieved_pps = s.achieved_pps;
        self.run_seconds = s.duration_s;
        for (stage, total) in &s.stage_counts {
            raise(self.stages.entry(*stage).or_default(), *total);
        }
        self.device_coverage = s.device_sampling.map(|d| d.coverage());
        // The summary's rows hold the run's totals: never below what the ticks added up.
        for (k, n) in drop_sums(&s.drops) {
            raise(self.drops.entry(k).or_default(), n);
        }
        raise(&mut self.other_drops, other_drops(&s.drops));
        // The whole run's budget and errors per thread: never below what the ticks summed.
        let roles = roles(&s.processes);
        let mut seconds: BTreeMap<(String, &'static str), f64> = BTreeMap::new();
        let mut errors: BTreeMap<(String, String), u64> = BTreeMap::new();
        for t in &s.threads {
            let role = roles.get(&t.pid).cloned().unwrap_or_default();
            for (state, ns) in budget_states(&t.budget) {
                *seconds.entry((role.clone(), state)).or_default() += ns as f64 / 1e9;
            }
            for (errno, n) in &t.errors {
                *errors.entry((role.clone(), errno.clone())).or_default() += n;
            }
        }
        for (k, v) in seconds {
            let e = self.sender_seconds.entry(k).or_default();
            *e = e.max(v);
        }
        for (k, v) in errors {
            raise(self.errors.entry(k).or_default(), v);
        }
        // The run's replies: never below what the ticks added up.
        if let Some(r) = &s.replies {
            for (kind, n) in reply_kinds(&r.arrived) {
                raise(self.replies.entry(kind).or_default(), n);
            }
        }
        self.health(&s.health);
        self.cpu = s.cost.cpu;
        self.bpf(s.cost.bpf.as_ref());
        self.top_verdicts(&s.verdicts, true);
        self.phase = Some(s.phase);
        self.ended = serde_json::to_value(s.end_reason)
            .ok()
            .and_then(|v| v.as_str().map(String::from));
    }

    fn health(&mut self, h: &crate::collect::Health) {
        for (what, n) in [
            ("ring_buffer_records", h.lost_events),
            ("drops_uncounted", h.drops_uncounted),
            ("devices_uncounted", h.devices_uncounted),
            ("threads_untracked", h.threads_untracked),
            ("block_sites_uncounted", h.block_sites_uncounted),
            ("drops_undelivered", h.drops_undelivered.unwrap_or(0)),
            ("skipped_runs", h.skipped_runs.unwrap_or(0)),
            ("missed_switches", h.missed_switches),
        ] {
            raise(self.lost.entry(what).or_default(), n);
        }
    }

    fn bpf(&mut self, bpf: Option<&crate::analysis::ProbeCost>) {
        if let Some(b) = bpf {
            self.bpf_ns_per_packet = b.ns_per_packet.or(self.bpf_ns_per_packet);
            self.bpf_target_ns_per_packet = b.target_ns_per_packet.or(self.bpf_target_ns_per_packet);
            // The share of this interval or none: an idle tick must not show a busy one's share.
            self.bpf_share_of_target = b.share_of_target;
            self.bpf_machine_cpu_share = b.machine_cpu_share.or(self.bpf_machine_cpu_share);
        }
    }

    /// Takes the top verdict of each kind; `rate_judged` false (a tick outside a whole stretch
    /// of sending, which has no gap verdict) keeps the gap verdict of the last judged tick.
    fn top_verdicts(&mut self, verdicts: &[crate::analysis::Verdict], rate_judged: bool) {
        // Verdicts come ranked, most important first: the first of each kind is its top.
        self.verdicts.retain(|kind, _| !rate_judged && *kind == Kind::Gap);
        for v in verdicts {
            self.verdicts
                .entry(v.kind)
                .or_insert_with(|| (v.cause, v.confidence, v.share));
        }
    }

    /// The exposition, in the Prometheus text format.
    pub fn render(&self) -> String {
        let registry = self.registry().expect("metric definitions are static and valid");
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&registry.gather(), &mut out)
            .expect("encoding into memory cannot fail");
        String::from_utf8(out).expect("the text format is UTF-8")
    }

    /// A registry with the run's labels on every metric, filled by one step per group.
    fn registry(&self) -> prometheus::Result<Registry> {
        let mut common = HashMap::from([("scanner".to_string(), self.labels.scanner.clone())]);
        if let Some(shard) = &self.labels.shard {
            common.insert("shard".to_string(), shard.clone());
        }
        if let Some(id) = &self.labels.run_id {
            common.insert("run_id".to_string(), id.clone());
        }
        let r = Registry::new_custom(Some("scanprof".into()), Some(common))?;
        self.register_rates(&r)?;
        self.register_stages_and_drops(&r)?;
        self.register_replies(&r)?;
        self.register_sender_time(&r)?;
        self.register_lost(&r)?;
        self.register_cost(&r)?;
        self.register_verdicts(&r)?;
        self.register_run_state(&r)?;
        Ok(r)
    }

    /// The requested and achieved rates, and the run's age.
    fn register_rates(&self, r: &Registry) -> prometheus::Result<()> {
        if let Some(pps) = self.requested_pps {
            gauge(
                r,
                "requested_packets_per_second",
                "Packets per second the scanner was asked for.",
                pps,
            )?;
        }
        gauge(
            r,
            "achieved_packets_per_second",
            "Packets per second through the family's send syscalls over the last whole tick of sending (over the send window once the run has ended).",
            self.achieved_pps,
        )?;
        gauge(
            r,
            "run_seconds",
            "Seconds since scanprof attached.",
            self.run_seconds,
        )?;
        Ok(())
    }

    /// The events through each stage, and the drops: the family's by reason, class and device, other
    /// processes' as one counter.
    fn register_stages_and_drops(&self, r: &Registry) -> prometheus::Result<()> {
        let stages = IntCounterVec::new(
            Opts::new(
                "stage_events_total",
                "Events through each stage since attach: send calls for send_calls, packets for the others (target_drops: the family's packets dropped).",
            ),
            &["stage"],
        )?;
        for name in STAGES {
            let n = self.stages.get(&name).copied().unwrap_or(0);
            stages.with_label_values(&[name.as_str()]).inc_by(n);
        }
        r.register(Box::new(stages))?;
        if let Some(share) = self.device_coverage {
            gauge(
                r,
                "device_stage_sampled_coverage",
                "Share of the time the device-stage programs were attached (--device-stages sampled, or auto once it samples): stage_events_total of dev_queue, qdisc_enqueue, qdisc_dequeue and dev_xmit are then estimates, scaled from these windows. Absent when the device stages are counted.",
                share,
            )?;
        }

        let drops = IntCounterVec::new(
            Opts::new("drops_total", drops_help()),
            &["reason", "class", "device"],
        )?;
        for ((reason, class, device), n) in &self.drops {
            drops.with_label_values(&[reason, class, device]).inc_by(*n);
        }
        r.register(Box::new(drops))?;
        let other = prometheus::IntCounter::new(
            "other_drops_total",
            "Packets of other processes on this host the kernel dropped since attach (class unrelated), all reasons and devices summed.",
        )?;
        other.inc_by(self.other_drops);
        r.register(Box::new(other))?;
        Ok(())
    }

    /// The replies by kind, once any arrived.
    fn register_replies(&self, r: &Registry) -> prometheus::Result<()> {
        if !self.replies.is_empty() {
            let replies = IntCounterVec::new(
                Opts::new(
                    "replies_total",
                    "Replies that arrived at this host since attach from the addresses the family sent to, on the devices its packets used, by kind (counted before any socket or ring: the reply funnel's arrived).",
                ),
                &["kind"],
            )?;
            for (kind, n) in &self.replies {
                replies.with_label_values(&[kind]).inc_by(*n);
            }
            r.register(Box::new(replies))?;
        }
        Ok(())
    }

    /// The sending threads' time by state, and their failed sends by errno.
    fn register_sender_time(&self, r: &Registry) -> prometheus::Result<()> {
        let seconds = prometheus::CounterVec::new(
            Opts::new(
                "sender_seconds_total",
                "Time of the family's sending threads by state (send, blocked_send, sleep, preempted, other), summed over threads, seconds.",
            ),
            &["role", "state"],
        )?;
        for ((role, state), s) in &self.sender_seconds {
            seconds.with_label_values(&[role.as_str(), state]).inc_by(*s);
        }
        r.register(Box::new(seconds))?;

        let errors = IntCounterVec::new(
            Opts::new("send_errors_total", "Failed send calls by errno, since attach."),
            &["role", "errno"],
        )?;
        for ((role, errno), n) in &self.errors {
            errors.with_label_values(&[role, errno]).inc_by(*n);
        }
        r.register(Box::new(errors))?;
        Ok(())
    }

    /// What the probes could not record.
    fn register_lost(&self, r: &Registry) -> prometheus::Result<()> {
        let lost = IntCounterVec::new(
            Opts::new(
                "lost_records_total",
                "What the probes could not record since attach (a full ring buffer or map, kfree_skb hits the kernel did not give the drop program, runs of scanprof's programs the kernel skipped, or context switches of the family no program was given): ring_buffer_records, drops_uncounted, devices_uncounted, threads_untracked, block_sites_uncounted, drops_undelivered, skipped_runs, missed_switches.",
            ),
            &["what"],
        )?;
        for (what, n) in &self.lost {
            lost.with_label_values(&[*what]).inc_by(*n);
        }
        r.register(Box::new(lost))?;
        Ok(())
    }

    /// scanprof's own cost: its CPU, and its BPF programs' run time where measured.
    fn register_cost(&self, r: &Registry) -> prometheus::Result<()> {
        gauge(
            r,
            "cpu_ratio",
            "CPU scanprof's own process used over the last tick, as a fraction of one core.",
            self.cpu,
        )?;
        if let Some(ns) = self.bpf_ns_per_packet {
            gauge(
                r,
                "bpf_seconds_per_packet",
                "Run time of all of scanprof's BPF programs, wherever they ran, per packet the family sent, seconds (kernel run-time statistics).",
                ns / 1e9,
            )?;
        }
        if let Some(ns) = self.bpf_target_ns_per_packet {
            gauge(
                r,
                "bpf_target_seconds_per_packet",
                "Run time of scanprof's BPF programs on the family's threads per packet the family sent, seconds (timed by the programs, less the timing's own clock reads where measured).",
                ns / 1e9,
            )?;
        }
        if let Some(share) = self.bpf_share_of_target {
            gauge(
                r,
                "bpf_share_of_target",
                "Run time of scanprof's BPF programs on the family's threads as a share of their on-CPU time; absent when the last interval had too little family CPU time or too few packets.",
                share,
            )?;
        }
        if let Some(m) = self.bpf_machine_cpu_share {
            gauge(
                r,
                "bpf_machine_cpu_share",
                "The tax on the rest of the machine: run time of scanprof's BPF programs outside the family's threads, as a share of one CPU.",
                m,
            )?;
        }
        Ok(())
    }

    /// The top verdict of each kind, and its share.
    fn register_verdicts(&self, r: &Registry) -> prometheus::Result<()> {
        let info = GaugeVec::new(
            Opts::new(
                "verdict_info",
                "The top verdict of each kind (gap: requested vs achieved rate; loss: packets lost after sending); always 1.",
            ),
            &["kind", "cause", "confidence"],
        )?;
        let share = GaugeVec::new(
            Opts::new(
                "verdict_share",
                "The top verdict's share: of the requested rate it cost (gap), or of the packets sent that were lost (loss).",
            ),
            &["kind", "cause"],
        )?;
        for (kind, (cause, confidence, s)) in &self.verdicts {
            info.with_label_values(&[kind.as_str(), cause.as_str(), confidence.as_str()])
                .set(1.0);
            share.with_label_values(&[kind.as_str(), cause.as_str()]).set(*s);
        }
        r.register(Box::new(info))?;
        r.register(Box::new(share))?;
        Ok(())
    }

    /// The run's phase, and why it ended once it has.
    fn register_run_state(&self, r: &Registry) -> prometheus::Result<()> {
        if let Some(phase) = self.phase {
            let g = GaugeVec::new(
                Opts::new(
                    "run_phase",
                    "What the family was doing at the latest tick (starting, sending, waiting, ended); always 1.",
                ),
                &["phase"],
            )?;
            g.with_label_values(&[phase.as_str()]).set(1.0);
            r.register(Box::new(g))?;
        }

        if let Some(reason) = &self.ended {
            let ended = GaugeVec::new(
                Opts::new(
                    "run_ended",
                    "1 once the run has ended, with why (duration, family_exited, interrupted).",
                ),
                &["reason"],
            )?;
            ended.with_label_values(&[reason]).set(1.0);
            r.register(Box::new(ended))?;
        }
        Ok(())
    }
}

fn gauge(r: &Registry, name: &str, help: &str, v: f64) -> prometheus::Result<()> {
    let g = Gauge::new(name, help)?;
    g.set(v);
    r.register(Box::new(g))
}

/// The help text of `drops_total`, naming every class it carries (all but unrelated).
fn drops_help() -> String {
    let classes: Vec<&str> = DropClass::ALL
        .iter()
        .filter(|c| **c != DropClass::Unrelated)
        .map(|c| c.name())
        .collect();
    format!(
        "Packets of the family (and replies to it) the kernel dropped since attach, by drop reason, class ({}) and device; other processes' drops are other_drops_total.",
        classes.join(", ")
    )
}

/// Drop rows of the family's own classes summed by the metric's labels: rows of one reason,
/// class and device (several locations, namespaces or pids) add up. Other processes' rows
/// (class unrelated) are left out: [`other_drops`] sums them.
fn drop_sums(rows: &[crate::analysis::DropRow]) -> BTreeMap<(String, String, String), u64> {
    let mut sums = BTreeMap::new();
    for d in rows.iter().filter(|d| d.class != DropClass::Unrelated) {
        let key = (
            d.reason.clone(),
            class_name(d.class),
            d.device.clone().unwrap_or_default(),
        );
        *sums.entry(key).or_default() += d.count;
    }
    sums
}

/// Other processes' drops (class unrelated) in `rows`, every reason and device summed: their
/// devices come and go with other tenants, so they get no label.
fn other_drops(rows: &[crate::analysis::DropRow]) -> u64 {
    rows.iter()
        .filter(|d| d.class == DropClass::Unrelated)
        .map(|d| d.count)
        .sum()
}

/// Raises a total to `v` (a total never goes down: a counter stays monotonic).
/// A reply funnel's counts by kind, as the `kind` label names them (the JSON's names; UDP on
/// loopback is no reply and is left out).
fn reply_kinds(a: &crate::collect::replies::ReplyCounts) -> [(&'static str, u64); 8] {
    [
        ("tcp_synack", a.tcp_synack),
        ("tcp_rst", a.tcp_rst),
        ("tcp_other", a.tcp_other),
        ("icmp_unreachable", a.icmp_unreachable),
        ("icmp_echo_reply", a.icmp_echo_reply),
        ("icmp_other", a.icmp_other),
        ("udp", a.udp),
        ("other", a.other),
    ]
}

fn raise(total: &mut u64, v: u64) {
    *total = (*total).max(v);
}

fn class_name(c: DropClass) -> String {
    c.name().to_string()
}

fn roles(processes: &[crate::collect::family::ProcessInfo]) -> BTreeMap<u32, String> {
    processes
        .iter()
        .map(|p| (p.pid, p.role.clone().unwrap_or_default()))
        .collect()
}

fn budget_states(b: &TimeBudget) -> [(&'static str, u64); 5] {
    [
        ("send", b.send_ns),
        ("blocked_send", b.blocked_send_ns),
        ("sleep", b.sleep_ns),
        ("preempted", b.preempted_ns),
        ("other", b.other_ns),
    ]
}

/// One exposition of several: the metric families of every text in `texts` (the runs
/// `scanprof agent` serves, each with its own `run_id`, and the agent's own), each family's
/// `# HELP` and `# TYPE` once (the first text's) with the samples of every text under it, so the
/// result stays valid text format (a family's samples together, named once). Families keep the
/// order in which they first appear.
pub fn merge(texts: &[&str]) -> String {
    // family name -> (help and type lines, sample lines)
    let mut order: Vec<String> = Vec::new();
    let mut families: HashMap<String, (Vec<String>, Vec<String>)> = HashMap::new();
    for text in texts {
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let (kind, name) = match line.strip_prefix("# ") {
                Some(rest) => {
                    let mut w = rest.split_whitespace();
                    match (w.next(), w.next()) {
                        (Some(k @ ("HELP" | "TYPE")), Some(n)) => (Some(k), n.to_string()),
                        _ => continue,
                    }
                }
                None => (
                    None,
                    line.split(|c: char| c == '{' || c.is_whitespace())
                        .next()
                        .unwrap_or_default()
                        .to_string(),
                ),
            };
            let entry = families.entry(name.clone()).or_insert_with(|| {
                order.push(name.clone());
                (Vec::new(), Vec::new())
            });
            match kind {
                // The first text that describes a family describes it.
                Some(k) => {
                    let prefix = format!("# {k} ");
                    if !entry.0.iter().any(|l| l.starts_with(&prefix)) {
                        entry.0.push(line.to_string());
                    }
                }
                None => entry.1.push(line.to_string()),
            }
        }
    }
    let mut out = String::new();
    for name in order {
        let (head, samples) = &families[&name];
        for l in head.iter().chain(samples) {
            out.push_str(l);
            out.push('\n');
        }
    }
    out
}

/// What `scanprof agent` itself has seen and done, for its own metrics.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AgentStats {
    /// execs the watcher reported
    pub execs: u64,
    /// exec records lost to a full ring buffer
    pub execs_lost: u64,
    /// runs started
    pub runs_started: u64,
    /// runs followed now
    pub runs_live: u64,
    /// runs ended
    pub runs_ended: u64,
    /// scanners not followed because max_runs were followed already
    pub refused_busy: u64,
    /// scanners whose attach could not be started
    pub refused_failed: u64,
    /// when the latest run started, seconds since the Unix epoch (absent before the first)
    pub last_run_start_unix_s: Option<f64>,
    /// when the agent started, seconds since the Unix epoch
    pub started_unix_s: f64,
    /// configuration reloads that took effect, and that were refused
    pub reloads: u64,
    pub reloads_failed: u64,
    /// bytes of the spool's run directories at the last look
    pub spool_bytes: u64,
    /// ended runs whose final metrics are served now
    pub runs_retained: u64,
}

impl AgentStats {
    /// The agent's own exposition (`scanprof_agent_*`).
    pub fn render(&self) -> String {
        let r = || -> prometheus::Result<String> {
            let r = Registry::new_custom(Some("scanprof_agent".into()), None)?;
            let counter = |name: &str, help: &str, v: u64| -> prometheus::Result<()> {
                let c = prometheus::IntCounter::new(name, help)?;
                c.inc_by(v);
                r.register(Box::new(c))
            };
            counter(
                "exec_events_total",
                "Execs on the host the agent's exec watcher reported.",
                self.execs,
            )?;
            counter(
                "exec_events_lost_total",
                "Exec records lost to a full ring buffer (a scanner among them would be missed).",
                self.execs_lost,
            )?;
            counter(
                "runs_started_total",
                "Scanner runs the agent started following.",
                self.runs_started,
            )?;
            counter(
                "runs_ended_total",
                "Runs the agent followed to their end (their final metrics written).",
                self.runs_ended,
            )?;
            let refused = IntCounterVec::new(
                Opts::new(
                    "runs_refused_total",
                    "Scanners the agent did not follow: busy (max_runs followed already), failed (attach could not start, or the process exited before it was attached).",
                ),
                &["why"],
            )?;
            refused.with_label_values(&["busy"]).inc_by(self.refused_busy);
            refused.with_label_values(&["failed"]).inc_by(self.refused_failed);
            r.register(Box::new(refused))?;
            let reloads = IntCounterVec::new(
                Opts::new(
                    "config_reloads_total",
                    "Configuration reloads (SIGHUP) by result: ok, refused (the old one stays).",
                ),
                &["result"],
            )?;
            reloads.with_label_values(&["ok"]).inc_by(self.reloads);
            reloads
                .with_label_values(&["refused"])
                .inc_by(self.reloads_failed);
            r.register(Box::new(reloads))?;
            gauge(
                &r,
                "runs_live",
                "Runs the agent follows now.",
                self.runs_live as f64,
            )?;
            gauge(
                &r,
                "runs_retained",
                "Ended runs whose final metrics the agent still serves (the retention window).",
                self.runs_retained as f64,
            )?;
            gauge(
                &r,
                "spool_bytes",
                "Bytes of the run directories in the agent's spool.",
                self.spool_bytes as f64,
            )?;
            gauge(
                &r,
                "start_time_seconds",
                "When the agent started, seconds since the Unix epoch.",
                self.started_unix_s,
            )?;
            if let Some(t) = self.last_run_start_unix_s {
                gauge(
                    &r,
                    "last_run_start_time_seconds",
                    "When the latest run the agent followed started, seconds since the Unix epoch.",
                    t,
                )?;
            }
            let mut out = Vec::new();
            TextEncoder::new().encode(&r.gather(), &mut out)?;
            Ok(String::from_utf8_lossy(&out).into_owned())
        };
        r().unwrap_or_default()
    }
}

/// Where the metrics go.
#[derive(Debug, Clone, Default)]
pub struct MetricsTargets {
    /// serve them at http://ADDR/metrics
    pub listen: Option<SocketAddr>,
    /// write them to this file after every update (textfile collector)
    pub file: Option<PathBuf>,
    /// keep serving the last exposition this long after the run ended (`--metrics-linger`), so
    /// that a scrape interval longer than the run still sees its end
    pub linger: Duration,
    /// the run id label (`scanprof agent` names each run it starts)
    pub run_id: Option<String>,
}

impl MetricsTargets {
    pub fn any(&self) -> bool {
        self.listen.is_some() || self.file.is_some()
    }
}

/// The metrics outputs of a run: the latest exposition, served and written as updates come.
pub struct Exporter {
    state: MetricsState,
    latest: Arc<Mutex<String>>,
    server: Option<Server>,
    file: Option<PathBuf>,
    /// the first failed file write, reported once
    pub file_error: Option<String>,
}

impl Exporter {
    /// Binds the listener now (a port in use fails here, before the run starts).
    pub fn start(targets: &MetricsTargets, mut labels: RunLabels) -> anyhow::Result<Exporter> {
        labels.run_id = targets.run_id.clone();
        let state = MetricsState::new(labels);
        let latest = Arc::new(Mutex::new(state.render()));
        let server = match targets.listen {
            Some(addr) => Some(Server::start(addr, Arc::clone(&latest))?),
            None => None,
        };
        if let Some(path) = &targets.file {
            replace(path, 0o644, state.render().as_bytes())
                .with_context(|| format!("writing the metrics file {}", path.display()))?;
        }
        Ok(Exporter {
            state,
            latest,
            server,
            file: targets.file.clone(),
            file_error: None,
        })
    }

    /// The address the server listens on (the port the kernel chose for port 0).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.server.as_ref().map(|s| s.addr)
    }

    /// Keeps the server answering with the last exposition (the run's end: `scanprof_run_ended`,
    /// the final totals and verdicts) for `linger`, or until `stop` is raised. Without a server
    /// it returns at once.
    pub fn linger(&self, linger: Duration, stop: &AtomicBool) {
        if self.server.is_none() {
            return;
        }
        let until = std::time::Instant::now() + linger;
        while !stop.load(Ordering::Relaxed) {
            let left = until.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                break;
            }
            std::thread::sleep(left.min(Duration::from_millis(100)));
        }
    }

    pub fn update(&mut self, update: &Update) {
        self.state.update(update);
        let text = self.state.render();
        if let Some(path) = &self.file {
            if let Err(e) = replace(path, 0o644, text.as_bytes()) {
                self.file_error
                    .get_or_insert_with(|| format!("writing the metrics file {}: {e}", path.display()));
            }
        }
        *self.latest.lock().unwrap_or_else(PoisonError::into_inner) = text;
    }
}

/// Passes every update of `updates` on, unchanged and in order, after `exporter` has taken it:
/// the views read the returned receiver. The exporter is returned by the thread's handle when
/// the session's channel closes.
pub fn tap(updates: Receiver<Update>, mut exporter: Exporter) -> (Receiver<Update>, JoinHandle<Exporter>) {
    let (tx, rx) = mpsc::channel();
    let handle = std::thread::Builder::new()
        .name("scanprof-metrics-tap".into())
        .spawn(move || {
            for u in updates.iter() {
                exporter.update(&u);
                if tx.send(u).is_err() {
                    break;
                }
            }
            exporter
        })
        .expect("starting a thread");
    (rx, handle)
}

/// A minimal HTTP/1.x server of one document: GET /metrics, the latest text of `latest`.
pub struct Server {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Server {
    /// Binds `addr` now (a port in use fails here) and serves what `latest` holds at each request.
    pub fn start(addr: SocketAddr, latest: Arc<Mutex<String>>) -> anyhow::Result<Server> {
        let listener = TcpListener::bind(addr).with_context(|| {
            format!("--metrics {addr}: cannot listen there (in use, or not an address of this machine)")
        })?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("scanprof-metrics".into())
            .spawn(move || {
                // Serving a document needs no privilege at all (capabilities are per thread).
                let _ = crate::system::privileges::drop_to(&[]);
                for conn in listener.incoming() {
                    if flag.load(Ordering::Relaxed) {
                        break;
                    }
                    if let Ok(stream) = conn {
                        let body = latest.lock().unwrap_or_else(PoisonError::into_inner).clone();
                        let _ = serve(stream, &body);
                    }
                }
            })?;
        Ok(Server {
            addr,
            stop,
            thread: Some(thread),
        })
    }
}

impl Server {
    /// The address it listens on (the port the kernel chose for port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wakes the accept; the thread sees the flag and ends.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(200));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Answers one request on `stream`: the exposition for GET /metrics, 404 or 405 otherwise.
fn serve(stream: TcpStream, body: &str) -> std::io::Result<()> {
    stream.set_read_timeout(Some(CLIENT_TIMEOUT))?;
    stream.set_write_timeout(Some(CLIENT_TIMEOUT))?;
    let mut reader = BufReader::new(std::io::Read::take(&stream, MAX_REQUEST as u64));
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    // The rest of the head, up to the blank line.
    let mut line = String::new();
    while reader.read_line(&mut line)? > 0 && line != "\r\n" && line != "\n" {
        line.clear();
    }
    let mut words = request_line.split_whitespace();
    let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let path = path.split('?').next().unwrap_or("");
    let (status, content_type, text) = match (method, path) {
        ("GET" | "HEAD", "/metrics") => ("200 OK", CONTENT_TYPE, body),
        ("GET" | "HEAD", _) => ("404 Not Found", "text/plain", "scanprof serves /metrics only\n"),
        _ => ("405 Method Not Allowed", "text/plain", "GET /metrics\n"),
    };
    let mut w = &stream;
    write!(
        w,
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        text.len()
    )?;
    if method != "HEAD" {
        w.write_all(text.as_bytes())?;
    }
    w.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::views::fixtures::rich_recording;

    /// The value of a metric whose only labels are the common ones.
    fn sample_plain(text: &str, name: &str) -> Option<f64> {
        sample(text, name, &[])
    }

    fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .find(|l| {
                l.starts_with(&format!("{name}{{"))
                    && labels.iter().all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
            })
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
    }

    /// The metric families one step of the registry adds to an empty registry.
    fn registered(
        m: &MetricsState,
        step: fn(&MetricsState, &Registry) -> prometheus::Result<()>,
    ) -> Vec<String> {
        let r = Registry::new();
        step(m, &r).unwrap();
        r.gather().iter().map(|f| f.name().to_string()).collect()
    }

    /// Each step of the registry adds its own group of metrics, an optional one only with a
    /// figure to show: a fresh run has no requested rate, no replies, no BPF cost, no verdict,
    /// phase or end; with them, every one is there. Vectors without a labelled value (no drop,
    /// no failed send) have no sample, so the registry leaves them out.
    #[test]
    fn each_registry_step_adds_its_own_metrics_and_an_optional_one_only_with_a_figure() {
        let mut m = MetricsState::new(RunLabels::of("masscan", &[]));
        let fresh: Vec<Vec<String>> = [
            MetricsState::register_rates,
            MetricsState::register_stages_and_drops,
            MetricsState::register_replies,
            MetricsState::register_sender_time,
            MetricsState::register_lost,
            MetricsState::register_cost,
            MetricsState::register_verdicts,
            MetricsState::register_run_state,
        ]
        .map(|step| registered(&m, step))
        .to_vec();
        let names = |list: &[&str]| list.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        assert_eq!(
            fresh,
            [
                names(&["achieved_packets_per_second", "run_seconds"]),
                names(&["other_drops_total", "stage_events_total"]),
                names(&[]),
                names(&[]),
                names(&[]),
                names(&["cpu_ratio"]),
                names(&[]),
                names(&[]),
            ]
        );
        m.requested_pps = Some(1000.0);
        m.drops
            .insert(("NO_SOCKET".into(), "expected".into(), "lo".into()), 3);
        m.replies.insert("udp", 2);
        m.errors.insert(("sender".into(), "ENOBUFS".into()), 1);
        m.sender_seconds.insert(("sender".into(), "send"), 0.5);
        m.lost.insert("drops_uncounted", 0);
        m.bpf_ns_per_packet = Some(300.0);
        m.bpf_target_ns_per_packet = Some(200.0);
        m.bpf_share_of_target = Some(0.01);
        m.bpf_machine_cpu_share = Some(0.02);
        m.verdicts
            .insert(Kind::Gap, (Cause::CpuBound, Confidence::Strong, 0.4));
        m.phase = Some(RunPhase::Sending);
        m.ended = Some("duration".into());
        assert_eq!(
            registered(&m, MetricsState::register_rates),
            [
                "achieved_packets_per_second",
                "requested_packets_per_second",
                "run_seconds"
            ]
        );
        assert_eq!(
            registered(&m, MetricsState::register_stages_and_drops),
            ["drops_total", "other_drops_total", "stage_events_total"]
        );
        assert_eq!(registered(&m, MetricsState::register_replies), ["replies_total"]);
        assert_eq!(
            registered(&m, MetricsState::register_sender_time),
            ["send_errors_total", "sender_seconds_total"]
        );
        assert_eq!(
            registered(&m, MetricsState::register_lost),
            ["lost_records_total"]
        );
        assert_eq!(
            registered(&m, MetricsState::register_cost),
            [
                "bpf_machine_cpu_share",
                "bpf_seconds_per_packet",
                "bpf_share_of_target",
                "bpf_target_seconds_per_packet",
                "cpu_ratio"
            ]
        );
        assert_eq!(
            registered(&m, MetricsState::register_verdicts),
            ["verdict_info", "verdict_share"]
        );
        assert_eq!(
            registered(&m, MetricsState::register_run_state),
            ["run_ended", "run_phase"]
        );
        // The whole registry is the steps' union, under the scanprof_ prefix.
        let all = m.registry().unwrap().gather().len();
        assert_eq!(all, 3 + 3 + 1 + 2 + 1 + 5 + 2 + 2);
    }

    /// A scanner's wait for late replies after its last send (and its partial last sending
    /// tick) leave the achieved rate and the gap verdict at the last whole sending tick's: the
    /// exported values were achieved 0 pps and `unexplained` 100% from the idle ticks.
    #[test]
    fn idle_ticks_after_the_last_send_keep_the_sending_phases_rate_and_gap_verdict() {
        use crate::analysis::RunPhase;
        let mut sending = rich_recording().ticks[1].clone();
        assert!(sending.judges_rate());
        let gap = crate::analysis::Verdict {
            cause: Cause::CpuBound,
            kind: Kind::Gap,
            sentence: "The sender is CPU-bound.".into(),
            share: 0.3,
            evidence: Vec::new(),
            next_step: String::new(),
            confidence: Confidence::Strong,
        };
        sending.verdicts.insert(0, gap.clone());
        let partial = Snapshot {
            partial: true,
            achieved_pps: sending.achieved_pps * 0.6,
            verdicts: Vec::new(),
            ..sending.clone()
        };
        let waiting = Snapshot {
            phase: RunPhase::Waiting,
            achieved_pps: 0.0,
            verdicts: Vec::new(),
            ..sending.clone()
        };
        let mut m = MetricsState::new(RunLabels::of("unicornscan", &[]));
        m.update(&Update::Tick(Box::new(sending.clone())));
        m.update(&Update::Tick(Box::new(partial)));
        for _ in 0..5 {
            m.update(&Update::Tick(Box::new(waiting.clone())));
        }
        let text = m.render();
        assert_eq!(
            sample(&text, "scanprof_achieved_packets_per_second", &[]),
            Some(sending.achieved_pps)
        );
        assert_eq!(
            sample(
                &text,
                "scanprof_verdict_info",
                &[("kind", "gap"), ("cause", gap.cause.as_str())]
            ),
            Some(1.0),
            "{text}"
        );
        assert_eq!(
            sample(
                &text,
                "scanprof_verdict_share",
                &[("kind", "gap"), ("cause", gap.cause.as_str())]
            ),
            Some(gap.share)
        );
        assert_eq!(
            sample(&text, "scanprof_run_phase", &[("phase", "waiting")]),
            Some(1.0)
        );
        // A whole sending tick takes over again.
        let again = Snapshot {
            achieved_pps: 42.0,
            verdicts: Vec::new(),
            ..sending
        };
        m.update(&Update::Tick(Box::new(again)));
        let text = m.render();
        assert_eq!(
            sample(&text, "scanprof_achieved_packets_per_second", &[]),
            Some(42.0)
        );
        assert!(!text.contains("kind=\"gap\""), "{text}");
        assert_eq!(
            sample(&text, "scanprof_run_phase", &[("phase", "sending")]),
            Some(1.0)
        );
    }

    #[test]
    fn replies_add_up_over_ticks_by_kind_and_the_summary_never_lowers_them() {
        let funnel = |rst: u64| crate::analysis::replies::ReplyFunnel {
            arrived: crate::collect::replies::ReplyCounts {
                tcp_rst: rst,
                udp_loopback: 9,
                ..Default::default()
            },
            arrived_total: rst,
            ..Default::default()
        };
        let mut m = MetricsState::new(RunLabels::default());
        assert!(!m.render().contains("scanprof_replies_total"));
        for rst in [3, 4] {
            let s = Snapshot {
                replies: Some(funnel(rst)),
                ..Snapshot::for_tests()
            };
            m.update(&Update::Tick(Box::new(s)));
        }
        let text = m.render();
        assert_eq!(
            sample(&text, "scanprof_replies_total", &[("kind", "tcp_rst")]),
            Some(7.0),
            "{text}"
        );
        assert_eq!(
            sample(&text, "scanprof_replies_total", &[("kind", "udp")]),
            Some(0.0),
            "{text}"
        );
        assert!(!text.contains("udp_loopback"), "{text}");
        let sum = Summary {
            replies: Some(funnel(6)),
            ..Summary::for_tests()
        };
        m.update(&Update::Done(Box::new(sum)));
        assert_eq!(
            sample(&m.render(), "scanprof_replies_total", &[("kind", "tcp_rst")]),
            Some(7.0)
        );
    }

    #[test]
    fn shards_are_read_from_masscan_and_zmap_command_lines() {
        let argv = |s: &str| s.split(' ').map(String::from).collect::<Vec<_>>();
        assert_eq!(
            shard_of(&argv("masscan --shard 2/4 -p80 10.0.0.0/8")),
            Some("2/4".into())
        );
        assert_eq!(
            shard_of(&argv("zmap --shards=3 --shard=1 -p 80")),
            Some("1/3".into())
        );
        assert_eq!(shard_of(&argv("zmap --shard 0 --shards 2")), Some("0/2".into()));
        assert_eq!(shard_of(&argv("zmap --shard 5")), Some("5".into()));
        assert_eq!(shard_of(&argv("nmap -sS 10.0.0.1")), None);
    }

    #[test]
    fn counters_are_the_runs_totals_and_never_go_down() {
        let rec = rich_recording();
        let mut m = MetricsState::new(RunLabels::of("unicornscan", &[]));
        let mut last_packets = 0.0;
        for t in &rec.ticks {
            m.update(&Update::Tick(Box::new(t.clone())));
            let text = m.render();
            let p = sample(
                &text,
                "scanprof_stage_events_total",
                &[("stage", "syscall_packets")],
            )
            .expect("syscall_packets counter");
            assert!(p >= last_packets, "counter went down: {p} < {last_packets}");
            last_packets = p;
        }
        // Before the summary: each drop counter is the sum of the ticks' rows (a sample holds
        // the drops of its tick).
        let text = m.render();
        let mut ticks_sum: BTreeMap<(String, String, String), u64> = BTreeMap::new();
        for t in &rec.ticks {
            for (k, n) in drop_sums(&t.drops) {
                *ticks_sum.entry(k).or_default() += n;
            }
        }
        assert!(!ticks_sum.is_empty(), "the fixture's ticks drop nothing");
        for ((reason, class, device), n) in &ticks_sum {
            let labels = [("reason", reason.as_str()), ("class", class), ("device", device)];
            assert_eq!(
                sample(&text, "scanprof_drops_total", &labels),
                Some(*n as f64),
                "{text}"
            );
        }
        let summary = rec.summary.clone().expect("fixture summary");
        m.update(&Update::Done(Box::new(summary.clone())));
        let text = m.render();
        for (stage, total) in &summary.stage_counts {
            assert_eq!(
                sample(&text, "scanprof_stage_events_total", &[("stage", stage.as_str())]),
                Some(*total as f64),
                "{stage}\n{text}"
            );
        }
        // Drops: rows of one reason, class and device add up; classes by their JSON names.
        let mut want: BTreeMap<(String, String, String), u64> = BTreeMap::new();
        for d in summary.drops.iter().filter(|d| d.class != DropClass::Unrelated) {
            *want
                .entry((
                    d.reason.clone(),
                    class_name(d.class),
                    d.device.clone().unwrap_or_default(),
                ))
                .or_default() += d.count;
        }
        assert!(!want.is_empty());
        for ((reason, class, device), n) in &want {
            assert_eq!(
                sample(
                    &text,
                    "scanprof_drops_total",
                    &[("reason", reason), ("class", class), ("device", device)]
                ),
                Some(*n as f64),
                "{reason} {class} {device}\n{text}"
            );
        }
        // Every metric carries the scanner label; no pid or address label anywhere.
        for l in text.lines().filter(|l| !l.starts_with('#')) {
            assert!(l.contains("scanner=\"unicornscan\""), "{l}");
            assert!(!l.contains("pid=") && !l.contains("10.99."), "{l}");
        }
        // The top verdict of each kind, as an info metric and its share.
        let top = &summary.verdicts[0];
        assert_eq!(
            sample(
                &text,
                "scanprof_verdict_info",
                &[
                    ("kind", top.kind.as_str()),
                    ("cause", top.cause.as_str()),
                    ("confidence", top.confidence.as_str())
                ]
            ),
            Some(1.0),
            "{text}"
        );
        assert_eq!(
            sample(&text, "scanprof_verdict_share", &[("cause", top.cause.as_str())]),
            Some(top.share)
        );
        assert!(text.contains("# TYPE scanprof_stage_events_total counter"));
        assert!(text.contains("scanprof_run_ended{"));
    }

    /// Other processes' drops on devices that come and go (other tenants' veths) make one
    /// series, not one per device: on a shared host `drops_total{class="unrelated",device=...}`
    /// churned. The family's own classes keep their reason and device.
    #[test]
    fn other_processes_drops_are_one_series_whatever_their_devices() {
        use crate::analysis::DropRow;
        let mut tick = rich_recording().ticks[1].clone();
        let row = |class: DropClass, device: String, count: u64| DropRow {
            reason: "QDISC_DROP".into(),
            location: "__dev_queue_xmit".into(),
            device: Some(device),
            netns: 4026531840,
            class,
            pid: None,
            count,
            rate: 0.0,
        };
        let mut m = MetricsState::new(RunLabels::of("zmap", &[]));
        let mut other = 0;
        let mut family = 0;
        for t in 0..10u64 {
            tick.drops = (0..10u64)
                .map(|d| row(DropClass::Unrelated, format!("veth-{t}-{d}"), t + d))
                .chain([row(DropClass::TargetLoss, "lab0".into(), 5)])
                .collect();
            other += (0..10u64).map(|d| t + d).sum::<u64>();
            family += 5;
            m.update(&Update::Tick(Box::new(tick.clone())));
        }
        let text = m.render();
        assert!(!text.contains("veth-"), "{text}");
        assert!(!text.contains("class=\"unrelated\""), "{text}");
        assert_eq!(
            sample_plain(&text, "scanprof_other_drops_total"),
            Some(other as f64)
        );
        assert_eq!(
            sample(
                &text,
                "scanprof_drops_total",
                &[
                    ("reason", "QDISC_DROP"),
                    ("class", "target_loss"),
                    ("device", "lab0")
                ]
            ),
            Some(family as f64)
        );
        // The help text names every class the counter carries.
        let help = text
            .lines()
            .find(|l| l.starts_with("# HELP scanprof_drops_total "))
            .expect("help line");
        for c in DropClass::ALL.iter().filter(|c| **c != DropClass::Unrelated) {
            assert!(help.contains(c.name()), "{help}");
        }
        // And the summary's totals never lower what the ticks added up.
        let mut summary = rich_recording().summary.expect("fixture summary");
        summary.drops = vec![row(DropClass::Unrelated, "veth-x".into(), 3)];
        m.update(&Update::Done(Box::new(summary)));
        assert_eq!(
            sample_plain(&m.render(), "scanprof_other_drops_total"),
            Some(other as f64)
        );
    }

    /// The run id label, when the agent gives one, is on every sample.
    #[test]
    fn a_run_id_labels_every_sample() {
        let mut labels = RunLabels::of("masscan", &["masscan".into(), "--shard".into(), "1/2".into()]);
        labels.run_id = Some("r7".into());
        let mut m = MetricsState::new(labels);
        m.update(&Update::Tick(Box::new(rich_recording().ticks[1].clone())));
        let text = m.render();
        for l in text.lines().filter(|l| !l.starts_with('#')) {
            assert!(l.contains("run_id=\"r7\"") && l.contains("shard=\"1/2\""), "{l}");
        }
    }

    /// Several runs' expositions make one valid exposition: each family named once, with the
    /// samples of every run under it, and every run's samples kept.
    #[test]
    fn runs_expositions_merge_into_one_with_each_family_once() {
        let rec = rich_recording();
        let run = |id: &str, shard: &str| {
            let mut labels = RunLabels::of("zmap", &["zmap".into(), "--shard".into(), shard.into()]);
            labels.run_id = Some(id.into());
            let mut m = MetricsState::new(labels);
            m.update(&Update::Tick(Box::new(rec.ticks[1].clone())));
            m.render()
        };
        let (a, b) = (run("a", "0/2"), run("b", "1/2"));
        let agent = AgentStats::default().render();
        let merged = merge(&[&a, &b, &agent]);
        let samples = |t: &str| t.lines().filter(|l| !l.starts_with('#')).count();
        assert_eq!(samples(&merged), samples(&a) + samples(&b) + samples(&agent));
        let mut seen = std::collections::BTreeSet::new();
        let mut current = String::new();
        for l in merged.lines() {
            if let Some(rest) = l.strip_prefix("# TYPE ") {
                let name = rest.split(' ').next().unwrap().to_string();
                assert!(seen.insert(name.clone()), "{name} described twice\n{merged}");
                current = name;
            } else if !l.starts_with('#') {
                assert!(l.starts_with(&current), "{l} outside its family {current}");
            }
        }
        assert_eq!(
            sample(
                &merged,
                "scanprof_stage_events_total",
                &[("run_id", "b"), ("stage", "syscall_packets")]
            ),
            sample(&b, "scanprof_stage_events_total", &[("stage", "syscall_packets")])
        );
    }

    #[test]
    fn a_sender_threads_time_adds_up_across_ticks_by_role_and_state() {
        let rec = rich_recording();
        let mut m = MetricsState::new(RunLabels::of("generic", &[]));
        let mut want_send = 0u64;
        for t in &rec.ticks {
            want_send += t.threads.iter().map(|th| th.budget.send_ns).sum::<u64>();
            m.update(&Update::Tick(Box::new(t.clone())));
        }
        let text = m.render();
        let got: f64 = text
            .lines()
            .filter(|l| l.starts_with("scanprof_sender_seconds_total{") && l.contains("state=\"send\""))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum();
        assert!(
            (got - want_send as f64 / 1e9).abs() < 1e-9,
            "{got} vs {want_send} ns\n{text}"
        );
    }

    /// `--metrics-linger`: after the run's last update the server still answers, with the run's
    /// end, until the linger is over or the stop flag is raised.
    #[test]
    fn a_lingering_server_serves_the_runs_end_until_it_is_over_or_stopped() {
        use std::io::Read;
        let targets = MetricsTargets {
            listen: Some("127.0.0.1:0".parse().unwrap()),
            ..MetricsTargets::default()
        };
        let mut e = Exporter::start(&targets, RunLabels::of("generic", &[])).unwrap();
        let addr = e.local_addr().unwrap();
        let rec = rich_recording();
        e.update(&Update::Done(Box::new(
            rec.summary.clone().expect("fixture summary"),
        )));
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let started = std::time::Instant::now();
        let lingering = std::thread::spawn(move || {
            e.linger(Duration::from_secs(30), &flag);
            e
        });
        std::thread::sleep(Duration::from_millis(300));
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        assert!(out.contains("scanprof_run_ended{"), "{out}");
        assert!(!lingering.is_finished(), "the linger ended early");
        stop.store(true, Ordering::Relaxed);
        let e = lingering.join().unwrap();
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the stop flag did not end the linger"
        );
        drop(e);
        assert!(
            TcpListener::bind(addr).is_ok(),
            "the port is free once the exporter is dropped"
        );
    }

    #[test]
    fn the_server_answers_metrics_and_nothing_else() {
        use std::io::Read;
        let targets = MetricsTargets {
            listen: Some("127.0.0.1:0".parse().unwrap()),
            file: None,
            ..MetricsTargets::default()
        };
        let mut e = Exporter::start(&targets, RunLabels::of("generic", &[])).unwrap();
        let addr = e.local_addr().unwrap();
        let rec = rich_recording();
        e.update(&Update::Tick(Box::new(rec.ticks[0].clone())));
        let get = |req: &str| {
            let mut s = TcpStream::connect(addr).unwrap();
            s.write_all(req.as_bytes()).unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).unwrap();
            out
        };
        let ok = get("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
        assert!(ok.contains(CONTENT_TYPE));
        assert!(ok.contains("scanprof_stage_events_total{"), "{ok}");
        assert!(get("GET / HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404"));
        assert!(get("POST /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 405"));
        // A client that says nothing is dropped after the timeout; the next one is served.
        let idle = TcpStream::connect(addr).unwrap();
        assert!(get("GET /metrics HTTP/1.0\r\n\r\n").starts_with("HTTP/1.1 200"));
        drop(idle);
        drop(e); // the server stops and its port is free again
        assert!(TcpListener::bind(addr).is_ok());
    }
}
