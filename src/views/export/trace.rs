//! What a run's trace holds, built once from a `Recording` ([`TraceModel`]: counter tracks for
//! the per-tick figures, slices for blocking episodes on the blocked thread, instants for
//! process starts and exits, a flow arrow from parent to child), and its rendering as the
//! bundle's trace.json (Chrome trace-event JSON). The bundle's trace.perfetto-trace renders the
//! same model (`super::perfetto`), so the two cannot disagree. Pure: it reads only the
//! Snapshots the views received.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde_json::{json, Map, Value};

use super::Recording;
use crate::analysis::{RunPhase, Snapshot, SCHEMA_VERSION};
use crate::collect::DropClass;
use crate::system::ClockReadings;
use crate::views::report::ProcessEnd;

/// pid of the pseudo-process "scanprof" that carries the run-wide counter tracks.
pub const SCANPROF_PID: u32 = 0;

/// Category of every flow arrow (ids are unique within a trace whatever the arrow links).
const FLOW_CAT: &str = "flow";
/// Length of the slices that anchor a flow arrow's ends (Perfetto binds flows to slices), ns.
const ANCHOR_NS: u64 = 1_000;
/// Name of the parent-to-child arrows.
const SPAWN: &str = "spawn";

const REQUESTED: &str = "requested pps";
/// Prefix of the per-stage rate tracks, one track a stage: Chrome's viewer stacks the series of
/// one counter, and seven stage rates summed mean nothing.
const STAGES: &str = "pps at";
const DROPS: &str = "target drops per second by reason";
const CPU: &str = "scanprof CPU %";
/// scanprof's BPF programs' run time on the target's threads as a share of their on-CPU time,
/// per tick (no point on a tick without a share).
const PROBES_SHARE: &str = "scanprof probes % of target CPU";
/// scanprof's BPF programs' run time on the target's threads per target packet, per tick.
const PROBES_NS: &str = "scanprof probes ns/packet on target threads";
/// The tax on the rest of the machine: the programs' run time outside the target's threads, as
/// a share of one CPU, per tick.
const PROBES_MACHINE: &str = "scanprof probes % of a CPU outside the target";
/// The series of a counter with a single one.
pub(super) const VALUE: &str = "value";

/// Everything a trace of one recording shows, in the recording's own terms; each renderer
/// only encodes it.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceModel {
    /// every process the trace puts events on (the scanprof pseudo-process aside), in order of
    /// first sighting
    pub processes: Vec<TraceProcess>,
    /// every thread the trace puts events on, by (pid, tid)
    pub threads: Vec<TraceThread>,
    /// timed events, in time order (events at one time in the order they were made)
    pub events: Vec<TraceEvent>,
    /// the clocks at attach, if the recording has them: times since attach plus
    /// `monotonic_ns` are on the BPF side's clock
    pub clocks: Option<ClockReadings>,
    /// where and when the recording was made
    pub info: RunInfo,
}

/// A process of the trace.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceProcess {
    pub pid: u32,
    /// its latest comm (`pid N` if the recording never named it)
    pub comm: String,
    /// its command line as recorded: the executable path, if known
    pub exe: Option<String>,
}

/// A thread of the trace.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceThread {
    pub pid: u32,
    pub tid: u32,
    /// the thread's comm (its process's when it was never listed itself)
    pub comm: String,
}

/// One timed event, on the track of thread `tid` of process `pid` (pid [`SCANPROF_PID`]:
/// scanprof's run-wide tracks).
#[derive(Debug, Clone, PartialEq)]
pub struct TraceEvent {
    /// ns since attach
    pub ts_ns: u64,
    pub pid: u32,
    pub tid: u32,
    pub kind: EventKind,
}

/// What a timed event is.
#[derive(Debug, Clone, PartialEq)]
pub enum EventKind {
    /// A sample of the counter `name`: one value per series (a series keeps its value until
    /// the counter's next sample). Chrome JSON draws the series of one counter stacked;
    /// Perfetto gets one counter track per series.
    Counter {
        name: String,
        series: Vec<(String, f64)>,
    },
    /// A span of `dur_ns` on the thread, maybe one end of a flow arrow.
    Slice {
        name: String,
        category: Category,
        dur_ns: u64,
        args: Vec<(&'static str, Arg)>,
        flow: Option<FlowEnd>,
    },
    /// A moment in the process's life, on its main thread.
    Instant {
        name: String,
        category: Category,
        args: Vec<(&'static str, Arg)>,
    },
}

/// Which kind of event a slice or instant is (Chrome's `cat`, Perfetto's category).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Category {
    /// a blocking episode
    Blocking,
    /// a process starting or exiting, and the anchors of the spawn arrows
    Process,
    /// a tick's drops at one place for one reason
    Drop,
    /// a phase of the run (starting, sending, waiting for late replies, ended)
    Phase,
}

impl Category {
    /// The name both renderers give the category.
    pub fn name(self) -> &'static str {
        match self {
            Category::Blocking => "blocking",
            Category::Process => "process",
            Category::Drop => "drop",
            Category::Phase => "phase",
        }
    }
}

/// A value carried with a slice or an instant.
#[derive(Debug, Clone, PartialEq)]
pub enum Arg {
    Uint(u64),
    Int(i64),
    Str(String),
}

impl Arg {
    fn json(&self) -> Value {
        match self {
            Arg::Uint(n) => json!(n),
            Arg::Int(n) => json!(n),
            Arg::Str(s) => json!(s),
        }
    }
}

/// One end of a flow arrow, bound to the slice that carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlowEnd {
    /// the arrow `id` leaves this slice
    Out { id: u64 },
    /// the arrow `id` arrives at this slice
    In { id: u64 },
}

/// Where and when a recording was made, as the trace's metadata.
#[derive(Debug, Clone, PartialEq)]
pub struct RunInfo {
    /// scanprof's command line, quoted for a shell
    pub command_line: String,
    pub version: String,
    /// wall-clock start, RFC 3339 UTC
    pub started_at: String,
    pub hostname: String,
    pub kernel: String,
    pub schema_version: u32,
}

impl TraceModel {
    /// The trace of a whole recording. Counters carry one sample per tick at the tick's start
    /// (viewers hold a counter's value until its next sample, so each step covers the tick it
    /// measured), and a closing sample with the last values at the last tick's end.
    pub fn of(rec: &Recording) -> TraceModel {
        let names = Names::of(rec);
        let mut timed = Timed::default();
        if !rec.ticks.is_empty() {
            run_counters(rec, &mut timed);
            budget_counters(rec, &mut timed);
        }
        episode_slices(rec, &mut timed);
        phase_slices(rec, &mut timed);
        lifecycle(rec, &mut timed);
        drop_instants(rec, &mut timed);
        let exe_of = |pid: u32| {
            rec.ticks
                .iter()
                .rev()
                .flat_map(|t| t.processes.iter())
                .chain(rec.processes.iter())
                .find(|p| p.pid == pid && !p.exe.is_empty())
                .map(|p| p.exe.clone())
        };
        TraceModel {
            processes: names
                .processes
                .iter()
                .map(|(pid, comm)| TraceProcess {
                    pid: *pid,
                    comm: comm.clone(),
                    exe: exe_of(*pid),
                })
                .collect(),
            threads: names
                .threads
                .iter()
                .map(|((pid, tid), comm)| TraceThread {
                    pid: *pid,
                    tid: *tid,
                    comm: comm.clone(),
                })
                .collect(),
            events: timed.into_sorted(),
            clocks: rec.clocks,
            info: run_info(rec),
        }
    }

    /// How many samples, slices, instants and flow arrows the model holds: what a rendering
    /// must carry.
    pub fn counts(&self) -> ModelCounts {
        let mut c = ModelCounts::default();
        let mut tracks = BTreeSet::new();
        for e in &self.events {
            match &e.kind {
                EventKind::Counter { name, series } => {
                    for (s, _) in series {
                        tracks.insert((e.pid, e.tid, name.as_str(), s.as_str()));
                    }
                    c.counter_values += series.len();
                }
                EventKind::Slice { flow, .. } => {
                    c.slices += 1;
                    c.flow_ends += usize::from(flow.is_some());
                }
                EventKind::Instant { .. } => c.instants += 1,
            }
        }
        c.counter_tracks = tracks.len();
        c
    }
}

/// The size of a [`TraceModel`], in the units a Perfetto trace has.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ModelCounts {
    /// one per (thread, counter, series)
    pub counter_tracks: usize,
    /// one per series per sample
    pub counter_values: usize,
    pub slices: usize,
    pub instants: usize,
    /// slices that carry an end of a flow arrow (two per arrow)
    pub flow_ends: usize,
}

/// The trace of a whole recording as a Chrome trace-event JSON object:
/// `{"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}`.
///
/// `ts` and `dur` are microseconds since attach. Metadata events come first, then every timed
/// event in time order.
pub fn chrome_trace(rec: &Recording) -> Value {
    serde_json::from_str(&chrome_trace_text(rec)).unwrap_or(Value::Null)
}

/// [`chrome_trace`] as the text of trace.json. Each event is serialized as it is made (a long
/// run has a few dozen counter events per tick, each far smaller as text than as a `Value`).
pub fn chrome_trace_text(rec: &Recording) -> String {
    chrome_text(&TraceModel::of(rec))
}

/// A model rendered as the text of trace.json.
pub fn chrome_text(model: &TraceModel) -> String {
    let mut out = String::from("{\"traceEvents\":[");
    let mut first = true;
    let mut put = |e: Value| {
        if !first {
            out.push(',');
        }
        first = false;
        out.push_str(&e.to_string());
    };
    for e in chrome_metadata(model) {
        put(e);
    }
    for e in &model.events {
        for v in chrome_events(e) {
            put(v);
        }
    }
    out.push_str("],\"displayTimeUnit\":\"ms\",\"otherData\":");
    out.push_str(&other_data(&model.info).to_string());
    out.push('}');
    out
}

/// The process and thread names, as Chrome metadata events.
fn chrome_metadata(model: &TraceModel) -> Vec<Value> {
    let meta = |name: &str, pid: u32, tid: u32, args: Value| json!({ "ph": "M", "name": name, "pid": pid, "tid": tid, "args": args });
    let mut out = vec![
        meta("process_name", SCANPROF_PID, 0, json!({ "name": "scanprof" })),
        meta("process_sort_index", SCANPROF_PID, 0, json!({ "sort_index": 0 })),
        meta(
            "thread_name",
            SCANPROF_PID,
            PHASE_TID,
            json!({ "name": "run phases" }),
        ),
    ];
    for (i, p) in model.processes.iter().enumerate() {
        out.push(meta(
            "process_name",
            p.pid,
            0,
            json!({ "name": format!("{} ({})", p.comm, p.pid) }),
        ));
        out.push(meta(
            "process_sort_index",
            p.pid,
            0,
            json!({ "sort_index": i + 1 }),
        ));
    }
    for t in &model.threads {
        out.push(meta(
            "thread_name",
            t.pid,
            t.tid,
            json!({ "name": format!("{} ({})", t.comm, t.tid) }),
        ));
    }
    out
}

/// One model event as Chrome events: the event, and after a slice, the flow end it carries.
fn chrome_events(e: &TraceEvent) -> Vec<Value> {
    let ts = e.ts_ns as f64 / 1e3;
    let (pid, tid) = (e.pid, e.tid);
    let args = |a: &[(&str, Arg)]| -> Map<String, Value> {
        a.iter().map(|(k, v)| (k.to_string(), v.json())).collect()
    };
    match &e.kind {
        EventKind::Counter { name, series: s } => {
            let args: Map<String, Value> = s.iter().map(|(k, v)| (k.clone(), num(*v))).collect();
            vec![json!({ "ph": "C", "name": name, "pid": pid, "tid": tid, "ts": num(ts), "args": args })]
        }
        EventKind::Slice {
            name,
            category,
            dur_ns,
            args: a,
            flow,
        } => {
            let mut out = vec![json!({
                "ph": "X", "name": name, "cat": category.name(), "pid": pid, "tid": tid,
                "ts": num(ts), "dur": num(*dur_ns as f64 / 1e3), "args": args(a),
            })];
            if let Some(f) = flow {
                let (ph, id) = match f {
                    FlowEnd::Out { id } => ("s", id),
                    FlowEnd::In { id } => ("f", id),
                };
                out.push(flow_end(ph, *id, (pid, tid, ts), SPAWN));
            }
            out
        }
        EventKind::Instant {
            name,
            category,
            args: a,
        } => vec![json!({
            "ph": "i", "s": "p", "name": name, "cat": category.name(), "pid": pid, "tid": tid,
            "ts": num(ts), "args": args(a),
        })],
    }
}

/// One end (`ph` "s" or "f") of a flow arrow, bound to the slice that encloses it on its thread
/// (`bp: "e"`); `at` is (pid, tid, ts in us since attach).
fn flow_end(ph: &str, id: u64, (pid, tid, ts): (u32, u32, f64), name: &str) -> Value {
    json!({
        "ph": ph, "name": name, "cat": FLOW_CAT, "id": id, "bp": "e",
        "pid": pid, "tid": tid, "ts": num(ts),
    })
}

/// A flow arrow from one thread's track to another's: the `s` and `f` events, sharing `id`.
/// `from` and `to` are (pid, tid, ts in us since attach). Both ends bind to the slice that
/// encloses them on their thread (`bp: "e"`), so each end needs a slice around its `ts`.
pub fn flow_pair(id: u64, from: (u32, u32, f64), to: (u32, u32, f64), name: &str) -> [Value; 2] {
    [flow_end("s", id, from, name), flow_end("f", id, to, name)]
}

/// Checks what Perfetto and chrome://tracing rely on: every event has `ph`, `name`, `pid`,
/// `tid` (optional on `M`) and a numeric `ts` (except `M`); `X` has `dur` >= 0; `C` has only
/// numeric args; `ts` never decreases on a counter track (pid, tid, name) or a thread's slices
/// (pid, tid); every flow start has exactly one end with the same (cat, name, id) and vice
/// versa. Says which event broke which rule.
pub fn check_trace(v: &Value) -> Result<(), String> {
    let events = v
        .get("traceEvents")
        .and_then(Value::as_array)
        .ok_or("no \"traceEvents\" array at the top level")?;
    let mut counter_ts: HashMap<(u64, u64, String), f64> = HashMap::new();
    let mut slice_ts: HashMap<(u64, u64), f64> = HashMap::new();
    // (cat, name, id) -> (starts, ends)
    let mut flows: BTreeMap<(String, String, String), (usize, usize)> = BTreeMap::new();
    for (i, e) in events.iter().enumerate() {
        let bad = |why: &str| format!("event {i} {why}: {e}");
        let ph = e
            .get("ph")
            .and_then(Value::as_str)
            .ok_or_else(|| bad("has no \"ph\""))?;
        let name = e
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| bad("has no \"name\""))?;
        let pid = e
            .get("pid")
            .and_then(Value::as_u64)
            .ok_or_else(|| bad("has no numeric \"pid\""))?;
        let tid = match e.get("tid") {
            None if ph == "M" => 0,
            t => t
                .and_then(Value::as_u64)
                .ok_or_else(|| bad("has no numeric \"tid\""))?,
        };
        if ph == "M" {
            if !e.get("args").is_some_and(Value::is_object) {
                return Err(bad("(metadata) has no \"args\" object"));
            }
            continue;
        }
        let ts = e
            .get("ts")
            .and_then(Value::as_f64)
            .filter(|t| t.is_finite())
            .ok_or_else(|| bad("has no numeric \"ts\""))?;
        match ph {
            "X" => {
                let dur = e
                    .get("dur")
                    .and_then(Value::as_f64)
                    .ok_or_else(|| bad("has no \"dur\""))?;
                if dur.is_nan() || dur < 0.0 {
                    return Err(bad("has a negative \"dur\""));
                }
                let last = slice_ts.entry((pid, tid)).or_insert(ts);
                if ts < *last {
                    return Err(bad(&format!(
                        "starts at {ts} us, before a slice at {last} on its thread"
                    )));
                }
                *last = ts;
            }
            "C" => {
                let args = e
                    .get("args")
                    .and_then(Value::as_object)
                    .ok_or_else(|| bad("has no args"))?;
                if args.is_empty() {
                    return Err(bad("has no series in args"));
                }
                if let Some((k, _)) = args.iter().find(|(_, a)| !a.is_number()) {
                    return Err(bad(&format!("has non-numeric series {k:?}")));
                }
                let last = counter_ts.entry((pid, tid, name.to_string())).or_insert(ts);
                if ts < *last {
                    return Err(bad(&format!(
                        "is at {ts} us, after a sample at {last} on its track"
                    )));
                }
                *last = ts;
            }
            "s" | "f" => {
                let id = match e.get("id") {
                    Some(Value::Number(n)) => n.to_string(),
                    Some(Value::String(s)) => s.clone(),
                    _ => return Err(bad("(flow) has no \"id\"")),
                };
                let cat = e
                    .get("cat")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string();
                let n = flows.entry((cat, name.to_string(), id)).or_default();
                if ph == "s" {
                    n.0 += 1;
                } else {
                    n.1 += 1;
                }
            }
            _ => {}
        }
    }
    for ((cat, name, id), (starts, ends)) in &flows {
        if (*starts, *ends) != (1, 1) {
            return Err(format!(
                "flow {name:?} (cat {cat:?}, id {id}) has {starts} start(s) and {ends} end(s), not one each"
            ));
        }
    }
    Ok(())
}

/// us since attach of a time in s since attach, to the ns.
#[cfg(test)]
fn us(s: f64) -> f64 {
    ns(s) as f64 / 1e3
}

/// ns since attach of a time in s since attach (0 for a negative or NaN time).
fn ns(s: f64) -> u64 {
    (s * 1e9).round() as u64
}

/// A JSON number to three decimals (exact through a text round trip); 0 if not finite.
fn num(x: f64) -> Value {
    let r = (x * 1e3).round() / 1e3;
    serde_json::Number::from_f64(if r.is_finite() { r } else { 0.0 }).map_or(json!(0), Value::Number)
}

/// Timed events as they are made.
#[derive(Default)]
struct Timed(Vec<TraceEvent>);

impl Timed {
    fn push(&mut self, ts_ns: u64, pid: u32, tid: u32, kind: EventKind) {
        self.0.push(TraceEvent {
            ts_ns,
            pid,
            tid,
            kind,
        });
    }

    fn counter(&mut self, pid: u32, tid: u32, name: &str, ts_ns: u64, series: Vec<(String, f64)>) {
        let name = name.to_string();
        self.push(ts_ns, pid, tid, EventKind::Counter { name, series });
    }

    /// In time order; events at the same time keep the order they were pushed in, so a slice
    /// pushed before a flow end at its start encloses it.
    fn into_sorted(mut self) -> Vec<TraceEvent> {
        self.0.sort_by_key(|e| e.ts_ns);
        self.0
    }
}

/// Series name -> value, as a counter sample's series.
fn series<'a>(values: impl IntoIterator<Item = (&'a str, f64)>) -> Vec<(String, f64)> {
    values.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

/// Every process and thread the trace puts events on, named.
struct Names {
    /// pid -> latest comm, in order of first sighting
    processes: Vec<(u32, String)>,
    /// (pid, tid) -> comm of the process
    threads: BTreeMap<(u32, u32), String>,
}

impl Names {
    fn of(rec: &Recording) -> Names {
        let mut processes: Vec<(u32, String)> = Vec::new();
        let seen = rec
            .processes
            .iter()
            .chain(rec.ticks.iter().flat_map(|t| t.processes.iter()));
        for p in seen {
            match processes.iter_mut().find(|(pid, _)| *pid == p.pid) {
                Some(known) => known.1.clone_from(&p.comm),
                None => processes.push((p.pid, p.comm.clone())),
            }
        }
        let comm_of = |pid: u32| {
            processes
                .iter()
                .find(|(p, _)| *p == pid)
                .map_or_else(|| format!("pid {pid}"), |(_, c)| c.clone())
        };
        let mut threads = BTreeMap::new();
        for t in &rec.ticks {
            for th in &t.threads {
                threads.insert((th.pid, th.tid), th.comm.clone());
            }
            for e in &t.episodes {
                threads.entry((e.pid, e.tid)).or_insert_with(|| comm_of(e.pid));
            }
        }
        // Main threads carry the lifecycle anchors.
        for (pid, comm) in &processes {
            threads.entry((*pid, *pid)).or_insert_with(|| comm.clone());
        }
        for (pid, _) in threads.keys() {
            if !processes.iter().any(|(p, _)| p == pid) {
                processes.push((*pid, format!("pid {pid}")));
            }
        }
        Names { processes, threads }
    }
}

/// The run-wide tracks on the scanprof pseudo-process: requested rate, stage rates, target
/// drop rates by reason, scanprof's CPU.
fn run_counters(rec: &Recording, out: &mut Timed) {
    let c = |out: &mut Timed, name: &str, ts, values| out.counter(SCANPROF_PID, 0, name, ts, values);
    let stage_names: BTreeSet<&str> = rec
        .ticks
        .iter()
        .flat_map(|t| t.stages.iter().map(|s| s.name.as_str()))
        .collect();
    // `--device-stages sampled`: the device stages' rates are estimates, and their tracks say so
    let sampled = rec.ticks.iter().any(|t| t.device_sampling.is_some());
    let track = |stage: &str| match stage.parse::<crate::analysis::StageName>() {
        Ok(name) if sampled && name.is_device() => format!("{STAGES} {stage} (sampled, scaled)"),
        _ => format!("{STAGES} {stage}"),
    };
    let reasons: BTreeSet<String> = rec.ticks.iter().flat_map(|t| drop_rates(t).into_keys()).collect();

    // Perfetto and chrome://tracing draw a counter as a step held until its next sample, so a
    // tick's rate is sampled at the tick's start, and each track is closed at the last tick's
    // end with its last values: every step then covers exactly the tick it measured.
    let last = rec.ticks.len().saturating_sub(1);
    for (i, t) in rec.ticks.iter().enumerate() {
        let mut at = vec![ns((t.t_s - t.interval_s).max(0.0))];
        if i == last {
            at.push(ns(t.t_s));
        }
        let pps = |name: &str| t.stages.iter().find(|s| s.name == name).map_or(0.0, |s| s.pps);
        let rates = drop_rates(t);
        for ts in at {
            if let Some(r) = t.requested_pps {
                c(out, REQUESTED, ts, series([(VALUE, r)]));
            }
            for stage in &stage_names {
                c(out, &track(stage), ts, series([(VALUE, pps(stage))]));
            }
            // Drops by reason stack into the total drop rate, so they share one counter; every
            // series in every sample (a series left out would keep its old value).
            if !reasons.is_empty() {
                let rate = |r: &String| rates.get(r).copied().unwrap_or(0.0);
                c(
                    out,
                    DROPS,
                    ts,
                    series(reasons.iter().map(|r| (r.as_str(), rate(r)))),
                );
            }
            c(out, CPU, ts, series([(VALUE, t.cost.cpu * 100.0)]));
            if let Some(b) = &t.cost.bpf {
                if let Some(share) = b.share_of_target {
                    c(out, PROBES_SHARE, ts, series([(VALUE, share * 100.0)]));
                }
                if let Some(v) = b.target_ns_per_packet {
                    c(out, PROBES_NS, ts, series([(VALUE, v)]));
                }
                if let Some(m) = b.machine_cpu_share {
                    c(out, PROBES_MACHINE, ts, series([(VALUE, m * 100.0)]));
                }
            }
        }
    }
}
/// Drops per second of the family's packets in a tick, by reason summed over locations:
/// outgoing losses under the reason's name, losses of replies as "<reason> (reply)".
fn drop_rates(t: &Snapshot) -> BTreeMap<String, f64> {
    let mut rates = BTreeMap::new();
    for d in &t.drops {
        let key = match d.class {
            DropClass::TargetLoss => d.reason.clone(),
            DropClass::ReplyLoss => format!("{} (reply)", d.reason),
            DropClass::Expected | DropClass::ReplySide | DropClass::Unrelated => continue,
        };
        *rates.entry(key).or_insert(0.0) += d.rate;
    }
    rates
}

/// "sender time budget (tid N)" on each sender thread's process: where the thread's time went
/// in each tick, in percent. Starts with zeros at the start of the first tick the thread
/// shows in, and drops to zeros at the first tick it is missing from.
fn budget_counters(rec: &Recording, out: &mut Timed) {
    let zero = || series(["send", "blocked_send", "sleep", "preempted", "other"].map(|k| (k, 0.0)));
    let name = |tid: u32| format!("sender time budget (tid {tid})");
    let mut present: BTreeSet<(u32, u32)> = BTreeSet::new();
    let last = rec.ticks.len().saturating_sub(1);
    for (i, t) in rec.ticks.iter().enumerate() {
        // Sampled at the tick's start, like the run counters (a step covers its own tick).
        let start = ns((t.t_s - t.interval_s).max(0.0));
        let mut now = BTreeSet::new();
        for th in &t.threads {
            let key = (th.pid, th.tid);
            if !now.insert(key) {
                continue;
            }
            let s = th.shares;
            let pct = [
                ("send", s.send),
                ("blocked_send", s.blocked_send),
                ("sleep", s.sleep),
                ("preempted", s.preempted),
                ("other", s.other),
            ];
            let values = series(pct.map(|(k, v)| (k, v * 100.0)));
            out.counter(th.pid, th.tid, &name(th.tid), start, values.clone());
            if i == last {
                out.counter(th.pid, th.tid, &name(th.tid), ns(t.t_s), values);
            }
        }
        for (pid, tid) in present.difference(&now) {
            out.counter(*pid, *tid, &name(*tid), start, zero());
        }
        present = now;
    }
}

/// One slice per blocking episode, on the blocked thread.
fn episode_slices(rec: &Recording, out: &mut Timed) {
    for e in rec.ticks.iter().flat_map(|t| t.episodes.iter()) {
        let slice = EventKind::Slice {
            name: format!("blocked in {}", e.wait_site),
            category: Category::Blocking,
            dur_ns: e.duration_ns,
            args: vec![
                ("duration_ns", Arg::Uint(e.duration_ns)),
                ("wait_site", Arg::Str(e.wait_site.clone())),
            ],
            flow: None,
        };
        out.push(ns(e.start_s), e.pid, e.tid, slice);
    }
}

/// Thread of the scanprof pseudo-process whose track holds the run's phases.
pub const PHASE_TID: u32 = 0;

/// The run's phases as slices on scanprof's track: one per stretch of ticks in one phase
/// (starting, sending, waiting, ended), from the first tick's start to the last one's end; the
/// sending stretch ends, and the wait after it starts, at the family's last send when the run
/// recorded it. A wait is named by the scanner's profile when the profile says what its wait
/// is (masscan's `--wait`, zmap's cooldown).
fn phase_slices(rec: &Recording, out: &mut Timed) {
    let mut stretches: Vec<(RunPhase, f64, f64, u64)> = Vec::new();
    for t in &rec.ticks {
        let start = (t.t_s - t.interval_s).max(0.0);
        match stretches.last_mut() {
            Some(last) if last.0 == t.phase => {
                last.2 = t.t_s;
                last.3 += 1;
            }
            _ => stretches.push((t.phase, start, t.t_s, 1)),
        }
    }
    // A sending stretch followed by another phase ends at the last send it holds.
    for i in 1..stretches.len() {
        if stretches[i - 1].0 != RunPhase::Sending {
            continue;
        }
        let last_send = rec
            .ticks
            .iter()
            .filter(|t| t.t_s <= stretches[i - 1].2)
            .filter_map(|t| t.last_send_s)
            .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))));
        if let Some(at) = last_send.filter(|at| *at > stretches[i - 1].1 && *at < stretches[i - 1].2) {
            stretches[i - 1].2 = at;
            stretches[i].1 = at;
        }
    }
    let wait_name = rec
        .ticks
        .iter()
        .rev()
        .find_map(|t| t.scanner.as_ref().and_then(|sc| sc.wait.clone()));
    for (phase, from, to, ticks) in stretches {
        let name = match (phase, &wait_name) {
            (RunPhase::Waiting, Some(w)) => format!("waiting: {w}"),
            (RunPhase::Waiting, None) => "waiting (for late replies, or paused)".to_string(),
            (RunPhase::Starting, _) => "starting (no send yet)".to_string(),
            (RunPhase::Sending, _) => "sending".to_string(),
            (RunPhase::Ended, _) => "ended (the family exited)".to_string(),
        };
        let dur_ns = ns(to).saturating_sub(ns(from)).max(1);
        let slice = EventKind::Slice {
            name,
            category: Category::Phase,
            dur_ns,
            args: vec![
                ("phase", Arg::Str(phase.as_str().to_string())),
                ("ticks", Arg::Uint(ticks)),
            ],
            flow: None,
        };
        out.push(ns(from), SCANPROF_PID, PHASE_TID, slice);
    }
}

/// Process starts and exits at the times their fork and exit records give (older bundles
/// without them: at the end of the tick that first showed them); a started child gets a flow
/// arrow from its parent's main thread.
fn lifecycle(rec: &Recording, out: &mut Timed) {
    // The family at attach did not start during the run. A recording without a `started`
    // update takes the first tick's family as the one at attach.
    let at_attach = if rec.processes.is_empty() {
        rec.ticks.first().map_or(&[][..], |t| &t.processes[..])
    } else {
        &rec.processes[..]
    };
    let mut known: BTreeSet<u32> = at_attach.iter().map(|p| p.pid).collect();
    let mut exited: BTreeSet<u32> = BTreeSet::new();
    let mut next_flow = 1;
    for t in &rec.ticks {
        let tick_end = ns(t.t_s);
        let tick = || ("tick", Arg::Uint(t.tick));
        let new: Vec<_> = t.processes.iter().filter(|p| !known.contains(&p.pid)).collect();
        known.extend(new.iter().map(|p| p.pid));
        for p in new {
            let ts = p.start_s.map_or(tick_end, ns);
            let started = EventKind::Instant {
                name: format!("started {}", p.comm),
                category: Category::Process,
                args: vec![
                    ("pid", Arg::Uint(p.pid.into())),
                    ("ppid", Arg::Uint(p.ppid.into())),
                    ("exe", Arg::Str(p.exe.clone())),
                    tick(),
                ],
            };
            out.push(ts, p.pid, p.pid, started);
            if p.ppid == p.pid || !known.contains(&p.ppid) {
                continue;
            }
            // Each end of the arrow binds to a short slice that holds it.
            let anchor = |name: String, flow| EventKind::Slice {
                name,
                category: Category::Process,
                dur_ns: ANCHOR_NS,
                args: vec![tick()],
                flow: Some(flow),
            };
            let id = next_flow;
            next_flow += 1;
            let spawned = anchor(format!("spawned {} ({})", p.comm, p.pid), FlowEnd::Out { id });
            out.push(ts, p.ppid, p.ppid, spawned);
            out.push(ts, p.pid, p.pid, anchor("first seen".into(), FlowEnd::In { id }));
        }
        for p in &t.processes {
            if (p.alive && p.exit_code.is_none()) || !exited.insert(p.pid) {
                continue;
            }
            let ts = p.exit_s.map_or(tick_end, ns);
            // Decoded once, as every report decodes it; the raw wait status goes along.
            let status = |c: Option<i32>| c.map(|c| ("exit_status", Arg::Int(c.into())));
            let (how, args) = match (ProcessEnd::of(false, p.exit_code), p.exit_code) {
                (ProcessEnd::Killed(sig), c) => (
                    format!(" (signal {sig})"),
                    status(c)
                        .into_iter()
                        .chain([("signal", Arg::Int(sig.into()))])
                        .collect(),
                ),
                (ProcessEnd::Exited(code), c) => (
                    format!(" (code {code})"),
                    status(c)
                        .into_iter()
                        .chain([("code", Arg::Int(code.into()))])
                        .collect(),
                ),
                _ => (String::new(), vec![]),
            };
            let exited = EventKind::Instant {
                name: format!("exited {}{how}", p.comm),
                category: Category::Process,
                args,
            };
            out.push(ts, p.pid, p.pid, exited);
        }
    }
}

/// One instant per drop row of each tick (a place and reason where the tick dropped
/// packets), at the tick's end: on the main thread of the process whose packets they were, or
/// on scanprof's track when the row names none or a process outside the family.
fn drop_instants(rec: &Recording, out: &mut Timed) {
    let family: BTreeSet<u32> = rec
        .processes
        .iter()
        .chain(rec.ticks.iter().flat_map(|t| t.processes.iter()))
        .map(|p| p.pid)
        .collect();
    for t in &rec.ticks {
        for d in &t.drops {
            let name = match d.class {
                DropClass::TargetLoss => format!("drop {}", d.reason),
                other => format!("drop {} ({})", d.reason, other.name()),
            };
            let mut args = vec![
                ("count", Arg::Uint(d.count)),
                ("reason", Arg::Str(d.reason.clone())),
                ("location", Arg::Str(d.location.clone())),
                ("class", Arg::Str(d.class.name().into())),
                ("netns", Arg::Uint(d.netns.into())),
                ("tick", Arg::Uint(t.tick)),
            ];
            args.extend(d.device.as_ref().map(|dev| ("device", Arg::Str(dev.clone()))));
            let (pid, tid) = match d.pid {
                Some(p) if family.contains(&p) => (p, p),
                _ => (SCANPROF_PID, 0),
            };
            let instant = EventKind::Instant {
                name,
                category: Category::Drop,
                args,
            };
            out.push(ns(t.t_s), pid, tid, instant);
        }
    }
}

/// Where and when the recording was made.
fn run_info(rec: &Recording) -> RunInfo {
    let m = &rec.meta;
    let schema_version = rec
        .ticks
        .first()
        .map(|t| t.schema_version)
        .or(rec.summary.as_ref().map(|s| s.schema_version))
        .unwrap_or(SCHEMA_VERSION);
    RunInfo {
        command_line: shell_words(&m.command_line),
        version: m.version.clone(),
        started_at: m.started_at.clone(),
        hostname: m.hostname.clone(),
        kernel: m.kernel.clone(),
        schema_version,
    }
}

/// The run's metadata as trace.json's `otherData`.
fn other_data(i: &RunInfo) -> Value {
    json!({
        "command_line": i.command_line,
        "version": i.version,
        "started_at": i.started_at,
        "hostname": i.hostname,
        "kernel": i.kernel,
        "schema_version": i.schema_version,
    })
}

/// A command line as one string a shell would split back into the same words.
fn shell_words(words: &[String]) -> String {
    let plain = |w: &str| {
        !w.is_empty()
            && w.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./:=,+@%".contains(c))
    };
    let quoted: Vec<String> = words
        .iter()
        .map(|w| {
            if plain(w) {
                w.clone()
            } else {
                format!("'{}'", w.replace('\'', r"'\''"))
            }
        })
        .collect();
    quoted.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::{BudgetShares, DropRow, EpisodeView, Stage, ThreadView};
    use crate::collect::family::ProcessInfo;
    use crate::collect::TimeBudget;
    use crate::views::export::Meta;
    use crate::views::fixtures::rich_recording;

    fn events(v: &Value) -> &Vec<Value> {
        v["traceEvents"].as_array().expect("traceEvents")
    }

    fn find(v: &Value, pred: impl Fn(&Value) -> bool) -> Vec<&Value> {
        events(v).iter().filter(|e| pred(e)).collect()
    }

    fn process(pid: u32, ppid: u32, comm: &str, exit_code: Option<i32>) -> ProcessInfo {
        ProcessInfo {
            pid,
            ppid,
            comm: comm.into(),
            exe: format!("/bin/{comm}"),
            root: pid == 10,
            alive: exit_code.is_none(),
            exit_code,
            role: None,
            start_s: None,
            exit_s: None,
            open_files_limit: None,
        }
    }

    fn tick(n: u64, processes: Vec<ProcessInfo>) -> Snapshot {
        Snapshot {
            tick: n,
            t_s: n as f64,
            stages: vec![Stage {
                name: crate::analysis::StageName::SendCalls,
                count: 0,
                pps: 0.0,
                total: 0,
                ratio: None,
            }],
            processes,
            ..Snapshot::for_tests()
        }
    }

    /// Parent 10 at attach; child 11 shows at tick 2 and has exited (exit(3)) by tick 3.
    fn two_processes() -> Recording {
        let parent = process(10, 1, "scanner", None);
        let child = |exit| process(11, 10, "worker", exit);
        Recording {
            processes: vec![parent.clone()],
            ticks: vec![
                tick(1, vec![parent.clone()]),
                tick(2, vec![parent.clone(), child(None)]),
                tick(3, vec![parent.clone(), child(Some(3 << 8))]),
            ],
            ..Default::default()
        }
    }

    #[test]
    fn rich_recording_passes_the_checks_and_round_trips() {
        let v = chrome_trace(&rich_recording());
        check_trace(&v).expect("valid trace");
        let text = serde_json::to_string(&v).expect("serializes");
        let back: Value = serde_json::from_str(&text).expect("parses");
        assert_eq!(back, v);
        check_trace(&back).expect("still valid");
        assert_eq!(v["displayTimeUnit"], "ms");
    }

    #[test]
    fn counters_sit_at_tick_starts_in_microseconds_and_close_at_the_last_end() {
        let rec = rich_recording();
        let v = chrome_trace(&rec);
        let cpu = find(&v, |e| e["ph"] == "C" && e["name"] == CPU);
        let ts: Vec<f64> = cpu.iter().map(|e| e["ts"].as_f64().expect("ts")).collect();
        // Ticks end at 1, 2, 3 s: sampled at their starts (0, 1, 2 s), closed at 3 s.
        assert_eq!(ts, [0.0, 1_000_000.0, 2_000_000.0, 3_000_000.0]);
        for (e, t) in cpu.iter().zip(&rec.ticks) {
            assert_eq!(e["args"]["value"].as_f64(), num(t.cost.cpu * 100.0).as_f64());
        }
        let last = &rec.ticks[2];
        assert_eq!(
            cpu[3]["args"]["value"].as_f64(),
            num(last.cost.cpu * 100.0).as_f64()
        );
        assert!(cpu.iter().all(|e| e["pid"] == SCANPROF_PID));

        let req = find(&v, |e| e["ph"] == "C" && e["name"] == REQUESTED);
        assert_eq!(req.len(), 4);
        assert!(req.iter().all(|e| e["args"]["value"] == 100.0));
    }

    #[test]
    fn the_probes_cost_has_its_own_tracks() {
        let rec = rich_recording();
        let v = chrome_trace(&rec);
        let ns = find(&v, |e| e["ph"] == "C" && e["name"] == PROBES_NS);
        assert_eq!(ns.len(), 4, "one per tick and the close");
        for (e, t) in ns.iter().zip(&rec.ticks) {
            let want = t
                .cost
                .bpf
                .as_ref()
                .and_then(|b| b.target_ns_per_packet)
                .expect("measured");
            assert_eq!(e["args"]["value"].as_f64(), num(want).as_f64());
        }
        assert_eq!(find(&v, |e| e["ph"] == "C" && e["name"] == PROBES_SHARE).len(), 4);
        assert_eq!(
            find(&v, |e| e["ph"] == "C" && e["name"] == PROBES_MACHINE).len(),
            4
        );
    }

    #[test]
    fn each_stage_has_its_own_counter_track_so_that_viewers_do_not_stack_them() {
        let rec = rich_recording();
        let v = chrome_trace(&rec);
        for s in &rec.ticks[0].stages {
            let name = format!("{STAGES} {}", s.name);
            let track = find(&v, |e| e["ph"] == "C" && e["name"] == name.as_str());
            assert_eq!(
                track.len(),
                rec.ticks.len() + 1,
                "{name}: one per tick, and the closing sample"
            );
            for (e, t) in track.iter().zip(&rec.ticks) {
                let args = e["args"].as_object().expect("args");
                assert_eq!(args.len(), 1, "{name}: a single series");
                let want = t.stages.iter().find(|x| x.name == s.name).map_or(0.0, |x| x.pps);
                assert_eq!(args["value"].as_f64(), num(want).as_f64(), "{name}");
            }
            // The closing sample repeats the last tick's value at its end.
            assert_eq!(track[3]["args"], track[2]["args"]);
        }
        // The fixture sends 100 more packets each tick, a second apart.
        let packets = find(&v, |e| {
            e["ph"] == "C" && e["name"] == format!("{STAGES} syscall_packets").as_str()
        });
        assert_eq!(packets[1]["args"]["value"], 100.0);
        // No counter carries several stage rates any more.
        assert!(find(&v, |e| e["ph"] == "C"
            && e["args"].get("syscall_packets").is_some())
        .is_empty());
    }

    #[test]
    fn drop_counter_takes_target_and_reply_losses_by_reason_only() {
        let mut rec = rich_recording();
        let row = |reason: &str, class, rate| DropRow {
            reason: reason.into(),
            location: "x+0x1".into(),
            device: None,
            netns: 1,
            class,
            pid: Some(7),
            count: 1,
            rate,
        };
        rec.ticks[1]
            .drops
            .push(row("QDISC_DROP", DropClass::TargetLoss, 5.0));
        rec.ticks[1]
            .drops
            .push(row("NO_SOCKET", DropClass::Expected, 99.0));
        rec.ticks[1]
            .drops
            .push(row("NETFILTER_DROP", DropClass::ReplyLoss, 2.0));
        let fixture_rate = rec.ticks[1].drops[0].rate;
        let v = chrome_trace(&rec);
        let drops = find(&v, |e| e["ph"] == "C" && e["name"] == DROPS);
        assert_eq!(drops.len(), 4);
        let keys: Vec<&String> = drops[0]["args"].as_object().expect("args").keys().collect();
        assert_eq!(keys, ["NETFILTER_DROP (reply)", "QDISC_DROP"]);
        // Tick 2 (index 1) is sampled at its start, the second sample.
        assert_eq!(
            drops[1]["args"]["QDISC_DROP"].as_f64(),
            num(fixture_rate + 5.0).as_f64()
        );
        assert_eq!(drops[1]["args"]["NETFILTER_DROP (reply)"], 2.0);
        // Absent in the other ticks: zero, not left out.
        assert_eq!(drops[2]["args"]["NETFILTER_DROP (reply)"], 0.0);
        check_trace(&v).expect("valid");
    }

    #[test]
    fn each_drop_row_of_a_tick_is_an_instant_on_its_process_at_the_ticks_end() {
        let mut rec = rich_recording();
        let row = |reason: &str, class, pid| DropRow {
            reason: reason.into(),
            location: "x+0x1".into(),
            device: Some("veth0".into()),
            netns: 1,
            class,
            pid,
            count: 4,
            rate: 4.0,
        };
        rec.ticks[1]
            .drops
            .push(row("QDISC_DROP", DropClass::TargetLoss, Some(7)));
        rec.ticks[1]
            .drops
            .push(row("NO_SOCKET", DropClass::Unrelated, Some(4242)));
        let rows: usize = rec.ticks.iter().map(|t| t.drops.len()).sum();
        let v = chrome_trace(&rec);
        check_trace(&v).expect("valid");
        let drops = find(&v, |e| e["ph"] == "i" && e["cat"] == "drop");
        assert_eq!(drops.len(), rows);
        let qdisc = find(&v, |e| e["ph"] == "i" && e["name"] == "drop QDISC_DROP");
        // The fixture's own QDISC_DROP rows (count 50) and the one added to tick 2 (count 4).
        let qdisc = qdisc
            .iter()
            .find(|e| e["args"]["tick"] == 2 && e["args"]["count"] == 4)
            .expect("tick 2's added row");
        assert_eq!((&qdisc["pid"], &qdisc["tid"]), (&json!(7), &json!(7)));
        assert_eq!(qdisc["ts"], 2_000_000.0, "at the end of tick 2");
        assert_eq!(qdisc["args"]["count"], 4);
        assert_eq!(qdisc["args"]["device"], "veth0");
        // Another process's packets: on scanprof's track, not a new process of the trace.
        let other = find(&v, |e| e["name"] == "drop NO_SOCKET (unrelated)");
        assert_eq!((&other[0]["pid"], &other[0]["tid"]), (&json!(0), &json!(0)));
        assert!(find(&v, |e| e["ph"] == "M" && e["pid"] == 4242).is_empty());
    }

    /// The Chrome rendering carries exactly what the model holds (Perfetto's is checked in
    /// `perfetto::tests` against the same counts).
    #[test]
    fn trace_json_holds_the_models_counts() {
        let mut rec = two_processes();
        rec.ticks[1].episodes.push(EpisodeView {
            pid: 10,
            tid: 10,
            start_s: 1.5,
            duration_ns: 1_000_000,
            wait_site: "sock_alloc_send_pskb".into(),
        });
        for rec in [rec, rich_recording()] {
            let c = TraceModel::of(&rec).counts();
            let v = chrome_trace(&rec);
            let series: usize = find(&v, |e| e["ph"] == "C")
                .iter()
                .map(|e| e["args"].as_object().expect("args").len())
                .sum();
            assert_eq!(series, c.counter_values);
            assert_eq!(find(&v, |e| e["ph"] == "X").len(), c.slices);
            assert_eq!(find(&v, |e| e["ph"] == "i").len(), c.instants);
            assert_eq!(find(&v, |e| e["ph"] == "s" || e["ph"] == "f").len(), c.flow_ends);
        }
    }

    #[test]
    fn budget_counter_is_on_the_threads_process_in_percent() {
        let rec = rich_recording();
        let v = chrome_trace(&rec);
        let b = find(&v, |e| {
            e["ph"] == "C" && e["name"] == "sender time budget (tid 7)"
        });
        assert_eq!(b.len(), 4);
        assert!(b.iter().all(|e| e["pid"] == 7 && e["tid"] == 7));
        assert_eq!(b[0]["ts"], 0.0);
        let shares = rec.ticks[0].threads[0].shares;
        assert!(shares.send > 0.0);
        assert_eq!(b[0]["args"]["send"].as_f64(), num(shares.send * 100.0).as_f64());
        assert_eq!(b[0]["args"]["other"].as_f64(), num(shares.other * 100.0).as_f64());
    }

    #[test]
    fn a_thread_that_stops_showing_drops_to_zero_once() {
        let mut rec = two_processes();
        let th = ThreadView {
            tid: 12,
            pid: 10,
            comm: "scanner".into(),
            calls: 1,
            packets: 1,
            pps: 1.0,
            failed_calls: 0,
            errors: BTreeMap::new(),
            budget: TimeBudget::default(),
            shares: BudgetShares {
                send: 0.5,
                ..Default::default()
            },
            send_window_budget: None,
            latency_p50_ns: None,
            latency_p99_ns: None,
            blocked_now: None,
        };
        rec.ticks[1].threads.push(th);
        let v = chrome_trace(&rec);
        let b = find(&v, |e| {
            e["ph"] == "C" && e["name"] == "sender time budget (tid 12)"
        });
        let got: Vec<(f64, f64)> = b
            .iter()
            .map(|e| {
                (
                    e["ts"].as_f64().expect("ts"),
                    e["args"]["send"].as_f64().expect("send"),
                )
            })
            .collect();
        // Present in the tick from 1 to 2 s only: its share from 1 s, zero from 2 s on.
        assert_eq!(got, [(1e6, 50.0), (2e6, 0.0)]);
        assert_eq!(
            find(&v, |e| e["name"] == "thread_name" && e["tid"] == 12)[0]["args"]["name"],
            "scanner (12)"
        );
    }

    #[test]
    fn fixture_episode_is_a_slice_on_tid_7_of_2000_us() {
        let rec = rich_recording();
        let v = chrome_trace(&rec);
        let x = find(&v, |e| e["ph"] == "X" && e["tid"] == 7);
        assert_eq!(x.len(), 3, "one episode per tick in the fixture");
        for (e, ep) in x.iter().zip(rec.ticks.iter().flat_map(|t| &t.episodes)) {
            assert_eq!(e["name"], "blocked in sock_alloc_send_pskb");
            assert_eq!(e["pid"], 7);
            assert_eq!(e["dur"], 2000.0);
            assert_eq!(e["ts"].as_f64(), Some(us(ep.start_s)));
            assert_eq!(e["args"]["duration_ns"], 2_000_000);
            assert_eq!(e["args"]["wait_site"], "sock_alloc_send_pskb");
        }
        assert_eq!(x[2]["ts"], 2_500_000.0);
    }

    /// A scanner's run: a tick before its first send, two of sending (the second partial: its
    /// last send at 2.6 s), two of its wait for late replies, then its exit.
    fn phased(wait: Option<&str>) -> Recording {
        let at = |n: u64, phase: RunPhase, partial: bool, last_send_s: Option<f64>| {
            let mut t = tick(n, vec![process(10, 1, "masscan", None)]);
            t.phase = phase;
            t.partial = partial;
            t.last_send_s = last_send_s;
            t.scanner = Some(crate::analysis::ScannerView {
                profile: "masscan".into(),
                wait: wait.map(String::from),
                ..Default::default()
            });
            t
        };
        Recording {
            ticks: vec![
                at(1, RunPhase::Starting, false, None),
                at(2, RunPhase::Sending, false, Some(1.99)),
                at(3, RunPhase::Sending, true, Some(2.6)),
                at(4, RunPhase::Waiting, false, Some(2.6)),
                at(5, RunPhase::Waiting, false, Some(2.6)),
                at(6, RunPhase::Ended, false, Some(2.6)),
            ],
            ..Default::default()
        }
    }

    #[test]
    fn the_runs_phases_are_slices_on_scanprofs_track_the_wait_named_by_the_profile() {
        let v = chrome_trace(&phased(Some(
            "masscan's --wait for late replies (10 s by default)",
        )));
        assert_eq!(check_trace(&v), Ok(()));
        let phases = find(&v, |e| e["ph"] == "X" && e["cat"] == "phase");
        let got: Vec<(&str, f64, f64, &str, u64)> = phases
            .iter()
            .map(|e| {
                (
                    e["name"].as_str().unwrap_or(""),
                    e["ts"].as_f64().unwrap_or(-1.0),
                    e["dur"].as_f64().unwrap_or(-1.0),
                    e["args"]["phase"].as_str().unwrap_or(""),
                    e["args"]["ticks"].as_u64().unwrap_or(0),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("starting (no send yet)", 0.0, 1e6, "starting", 1),
                // The sending stretch ends at the last send, inside its partial tick.
                ("sending", 1e6, 1.6e6, "sending", 2),
                (
                    "waiting: masscan's --wait for late replies (10 s by default)",
                    2.6e6,
                    2.4e6,
                    "waiting",
                    2
                ),
                ("ended (the family exited)", 5e6, 1e6, "ended", 1),
            ]
        );
        assert!(phases
            .iter()
            .all(|e| e["pid"] == SCANPROF_PID && e["tid"] == PHASE_TID));
        let named = find(&v, |e| {
            e["ph"] == "M" && e["name"] == "thread_name" && e["pid"] == SCANPROF_PID
        });
        assert_eq!(named[0]["args"]["name"], "run phases");
        // A profile that says nothing of its wait: the phase's own words.
        let v = chrome_trace(&phased(None));
        let waiting = find(&v, |e| e["ph"] == "X" && e["args"]["phase"] == "waiting");
        assert_eq!(waiting[0]["name"], "waiting (for late replies, or paused)");
    }

    #[test]
    fn metadata_names_scanprof_the_family_and_sender_threads() {
        let v = chrome_trace(&rich_recording());
        let named = |what: &str, pid: u32| {
            find(&v, |e| e["ph"] == "M" && e["name"] == what && e["pid"] == pid)
                .first()
                .map(|e| e["args"]["name"].clone())
        };
        assert_eq!(named("process_name", 0), Some(json!("scanprof")));
        assert_eq!(named("process_name", 7), Some(json!("sender (7)")));
        assert_eq!(named("thread_name", 7), Some(json!("sender (7)")));
        assert_eq!(find(&v, |e| e["name"] == "process_sort_index").len(), 2);
        // Metadata first, then time order.
        let first_timed = events(&v)
            .iter()
            .position(|e| e["ph"] != "M")
            .expect("timed events");
        let ts: Vec<f64> = events(&v)[first_timed..]
            .iter()
            .map(|e| e["ts"].as_f64().expect("ts"))
            .collect();
        assert!(ts.windows(2).all(|w| w[0] <= w[1]), "{ts:?}");
    }

    #[test]
    fn other_data_says_where_and_when() {
        let v = chrome_trace(&rich_recording());
        let o = &v["otherData"];
        assert_eq!(
            o["command_line"],
            "scanprof run --requested 100 -- sender --to 10.99.0.2:9000"
        );
        assert_eq!(o["version"], "0.1.0");
        assert_eq!(o["started_at"], "2026-11-21T06:00:00Z");
        assert_eq!(o["hostname"], "lab-host");
        assert_eq!(o["kernel"], "6.18.44");
        assert_eq!(o["schema_version"], SCHEMA_VERSION);
        assert_eq!(
            shell_words(&["a b".into(), "it's".into(), "".into()]),
            r"'a b' 'it'\''s' ''"
        );
    }

    #[test]
    fn no_ticks_gives_metadata_only() {
        let rec = Recording {
            meta: Meta {
                hostname: "h".into(),
                ..Default::default()
            },
            processes: vec![process(10, 1, "scanner", None)],
            ..Default::default()
        };
        let v = chrome_trace(&rec);
        check_trace(&v).expect("valid");
        assert!(!events(&v).is_empty());
        assert!(events(&v).iter().all(|e| e["ph"] == "M"));
        assert!(find(&v, |e| e["name"] == "process_name" && e["pid"] == 10).len() == 1);
        assert_eq!(v["otherData"]["hostname"], "h");
        check_trace(&chrome_trace(&Recording::default())).expect("empty recording is valid too");
    }

    #[test]
    fn starts_and_exits_are_placed_at_their_recorded_times_not_at_tick_ends() {
        // The worker forked at 1.25 s and exited at 2.4 s, in ticks that end at 2 s and 3 s.
        let mut rec = two_processes();
        for t in &mut rec.ticks {
            for p in t.processes.iter_mut().filter(|p| p.pid == 11) {
                p.start_s = Some(1.25);
                if p.exit_code.is_some() {
                    p.exit_s = Some(2.4);
                }
            }
        }
        let v = chrome_trace(&rec);
        check_trace(&v).expect("valid");
        let at = |prefix: &str| {
            find(&v, |e| {
                e["ph"] == "i" && e["name"].as_str().is_some_and(|n| n.starts_with(prefix))
            })[0]["ts"]
                .clone()
        };
        assert_eq!(at("started"), 1_250_000.0);
        assert_eq!(at("exited"), 2_400_000.0);
        let s = find(&v, |e| e["ph"] == "s");
        assert_eq!(s[0]["ts"], 1_250_000.0, "the spawn arrow starts at the fork");
    }

    #[test]
    fn child_start_flow_and_exit() {
        let mut rec = two_processes();
        // The parent's main thread blocks before and after the spawn: its slices and the
        // spawn anchor share a track and must come in time order.
        let blocked = |start_s| EpisodeView {
            pid: 10,
            tid: 10,
            start_s,
            duration_ns: 1_000_000,
            wait_site: "sock_alloc_send_pskb".into(),
        };
        rec.ticks[1].episodes.push(blocked(1.5));
        rec.ticks[2].episodes.push(blocked(2.5));
        let v = chrome_trace(&rec);
        check_trace(&v).expect("valid");
        let pname = |pid: u32| {
            find(&v, |e| e["name"] == "process_name" && e["pid"] == pid)[0]["args"]["name"].clone()
        };
        assert_eq!(pname(10), "scanner (10)");
        assert_eq!(pname(11), "worker (11)");

        let started = find(&v, |e| {
            e["ph"] == "i" && e["name"].as_str().is_some_and(|n| n.starts_with("started"))
        });
        assert_eq!(started.len(), 1, "the parent was there at attach: {started:?}");
        assert_eq!(
            (&started[0]["name"], &started[0]["pid"], &started[0]["s"]),
            (&json!("started worker"), &json!(11), &json!("p"))
        );
        assert_eq!(started[0]["ts"], 2_000_000.0);

        let s = find(&v, |e| e["ph"] == "s");
        let f = find(&v, |e| e["ph"] == "f");
        assert_eq!((s.len(), f.len()), (1, 1));
        assert_eq!(s[0]["id"], f[0]["id"]);
        assert_eq!(
            (&s[0]["pid"], &s[0]["tid"], &s[0]["ts"]),
            (&json!(10), &json!(10), &json!(2_000_000.0))
        );
        assert_eq!(
            (&f[0]["pid"], &f[0]["tid"], &f[0]["ts"]),
            (&json!(11), &json!(11), &json!(2_000_000.0))
        );
        // Each end has a slice around it to bind to, and the slice comes before the flow end.
        for end in [s[0], f[0]] {
            let pos = |e: &Value| events(&v).iter().position(|x| x == e).expect("present");
            let anchor = find(&v, |x| {
                x["ph"] == "X" && x["pid"] == end["pid"] && x["tid"] == end["tid"] && x["ts"] == end["ts"]
            });
            assert_eq!(anchor.len(), 1);
            assert!(anchor[0]["dur"].as_f64() > Some(0.0));
            assert!(pos(anchor[0]) < pos(end));
        }

        let exited = find(&v, |e| {
            e["ph"] == "i" && e["name"].as_str().is_some_and(|n| n.starts_with("exited"))
        });
        assert_eq!(
            exited.len(),
            1,
            "reported once although every later tick lists it"
        );
        assert_eq!(exited[0]["name"], "exited worker (code 3)");
        assert_eq!(
            (&exited[0]["pid"], &exited[0]["ts"]),
            (&json!(11), &json!(3_000_000.0))
        );
        assert_eq!(exited[0]["args"]["exit_status"], 3 << 8);
    }

    #[test]
    fn killed_by_a_signal_says_so_and_an_unknown_parent_gets_no_arrow() {
        let mut rec = two_processes();
        rec.ticks[2].processes[1].exit_code = Some(9);
        rec.ticks[1].processes[1].ppid = 4242;
        rec.ticks[2].processes[1].ppid = 4242;
        let v = chrome_trace(&rec);
        check_trace(&v).expect("valid");
        assert!(find(&v, |e| e["ph"] == "s" || e["ph"] == "f").is_empty());
        assert_eq!(find(&v, |e| e["ph"] == "i" && e["pid"] == 11).len(), 2);
        assert_eq!(find(&v, |e| e["name"] == "exited worker (signal 9)").len(), 1);
    }

    #[test]
    fn episode_of_an_unlisted_thread_still_gets_named_tracks() {
        let mut rec = two_processes();
        rec.ticks[0].episodes.push(EpisodeView {
            pid: 10,
            tid: 13,
            start_s: 0.25,
            duration_ns: 1_500_000,
            wait_site: "unix_wait_for_peer".into(),
        });
        let v = chrome_trace(&rec);
        check_trace(&v).expect("valid");
        let x = find(&v, |e| e["ph"] == "X" && e["tid"] == 13);
        assert_eq!((&x[0]["ts"], &x[0]["dur"]), (&json!(250_000.0), &json!(1500.0)));
        assert_eq!(
            find(&v, |e| e["name"] == "thread_name" && e["tid"] == 13)[0]["args"]["name"],
            "scanner (13)"
        );
    }

    #[test]
    fn flow_pair_is_paired_and_unpaired_flows_are_caught() {
        let [s, f] = flow_pair(42, (1, 2, 5.0), (3, 4, 5.0), "ipc");
        assert_eq!(
            (&s["ph"], &f["ph"], &s["id"], &f["id"]),
            (&json!("s"), &json!("f"), &json!(42), &json!(42))
        );
        assert_eq!(f["bp"], "e");
        let trace = |evs: Vec<Value>| json!({ "traceEvents": evs });
        check_trace(&trace(vec![s.clone(), f.clone()])).expect("paired");
        assert!(check_trace(&trace(vec![s.clone()]))
            .expect_err("no end")
            .contains("1 start(s) and 0 end(s)"));
        assert!(check_trace(&trace(vec![f.clone()])).is_err(), "end without start");
        assert!(
            check_trace(&trace(vec![s.clone(), f.clone(), f.clone()])).is_err(),
            "two ends"
        );
        let [_, other] = flow_pair(43, (1, 2, 5.0), (3, 4, 5.0), "ipc");
        assert!(check_trace(&trace(vec![s, other])).is_err(), "ids differ");
    }

    /// The rich trace with one event changed by `edit`.
    fn broken(edit: impl FnOnce(&mut Vec<Value>)) -> Result<(), String> {
        let mut v = chrome_trace(&rich_recording());
        edit(v["traceEvents"].as_array_mut().expect("events"));
        check_trace(&v)
    }

    fn index(v: &[Value], pred: impl Fn(&Value) -> bool) -> usize {
        v.iter().position(pred).expect("such an event")
    }

    #[test]
    fn check_catches_broken_traces() {
        check_trace(&chrome_trace(&rich_recording())).expect("unbroken");
        let err = broken(|v| {
            let i = index(v, |e| e["ph"] == "C");
            v[i].as_object_mut().expect("object").remove("ph");
        })
        .expect_err("missing ph");
        assert!(err.contains("no \"ph\""), "{err}");

        let err = broken(|v| {
            // The last CPU sample moved before the previous one.
            let i = v.iter().rposition(|e| e["name"] == CPU).expect("cpu");
            v[i]["ts"] = json!(1_500_000.0);
        })
        .expect_err("decreasing counter ts");
        assert!(err.contains("after a sample"), "{err}");

        let err = broken(|v| {
            let i = v.iter().rposition(|e| e["ph"] == "X").expect("slice");
            v[i]["ts"] = json!(1.0);
        })
        .expect_err("decreasing slice ts");
        assert!(err.contains("before a slice"), "{err}");

        assert!(broken(|v| {
            let i = index(v, |e| e["ph"] == "X");
            v[i]["dur"] = json!(-1.0);
        })
        .is_err());
        assert!(broken(|v| {
            let i = index(v, |e| e["ph"] == "C");
            v[i]["args"]["value"] = json!("12");
        })
        .is_err());
        assert!(broken(|v| {
            let i = index(v, |e| e["ph"] == "X");
            v[i].as_object_mut().expect("object").remove("ts");
        })
        .is_err());
        assert!(broken(|v| {
            let i = index(v, |e| e["ph"] == "X");
            v[i].as_object_mut().expect("object").remove("tid");
        })
        .is_err());
        assert!(broken(|v| {
            let i = index(v, |e| e["ph"] == "M");
            v[i].as_object_mut().expect("object").remove("name");
        })
        .is_err());
        assert!(check_trace(&json!({ "events": [] })).is_err());
    }

    #[test]
    fn broken_flow_in_a_real_trace_is_caught() {
        let v = chrome_trace(&two_processes());
        check_trace(&v).expect("valid");
        let mut cut = v.clone();
        cut["traceEvents"]
            .as_array_mut()
            .expect("events")
            .retain(|e| e["ph"] != "f");
        assert!(check_trace(&cut).expect_err("unpaired").contains("spawn"));
    }
}
