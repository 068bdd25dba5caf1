//! The bundle's trace.perfetto-trace: a [`TraceModel`] encoded as Perfetto's native protobuf
//! trace (TrackEvent), which ui.perfetto.dev and trace_processor read. Processes and threads get
//! descriptor tracks, each counter series its own counter track, blocking episodes and the
//! spawn arrows' anchors become slices (begin and end) with flows, process and drop events
//! become instants. Timestamps are on CLOCK_MONOTONIC, the BPF side's clock, and say so.
//!
//! The messages below are the few of perfetto's protos/perfetto/trace that the trace needs,
//! with their official field numbers (a oneof member is an optional field: the same bytes).
//! The bundle test decodes the file with Perfetto's own definitions and fails on any field
//! they do not know.

use std::collections::BTreeMap;

use prost::Message;

use super::trace::{Arg, EventKind, FlowEnd, TraceModel, SCANPROF_PID};

/// perfetto.protos.BuiltinClock: CLOCK_MONOTONIC, what `bpf_ktime_get_ns()` reads.
pub const CLOCK_MONOTONIC: u32 = 3;
/// perfetto.protos.BuiltinClock: CLOCK_BOOTTIME, Perfetto's default.
pub const CLOCK_BOOTTIME: u32 = 6;
/// perfetto.protos.BuiltinClock: CLOCK_REALTIME.
pub const CLOCK_REALTIME: u32 = 1;

/// The one packet sequence this writer emits.
const SEQUENCE_ID: u32 = 1;
/// TracePacket.SequenceFlags.SEQ_INCREMENTAL_STATE_CLEARED, on the sequence's first packet.
const SEQ_INCREMENTAL_STATE_CLEARED: u32 = 1;
/// uuid of the "scanprof" track that holds the run-wide counters and unattributed drops.
const SCANPROF_TRACK: u64 = 1;

/// perfetto.protos.TrackEvent.Type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EventType {
    SliceBegin = 1,
    SliceEnd = 2,
    Instant = 3,
    Counter = 4,
}

/// perfetto.protos.Trace.
#[derive(Clone, PartialEq, Message)]
pub struct Trace {
    #[prost(message, repeated, tag = "1")]
    pub packet: Vec<TracePacket>,
}

/// perfetto.protos.TracePacket (the fields used here; `data` is a oneof).
#[derive(Clone, PartialEq, Message)]
pub struct TracePacket {
    #[prost(uint64, optional, tag = "8")]
    pub timestamp: Option<u64>,
    #[prost(uint32, optional, tag = "58")]
    pub timestamp_clock_id: Option<u32>,
    #[prost(uint32, optional, tag = "10")]
    pub trusted_packet_sequence_id: Option<u32>,
    #[prost(uint32, optional, tag = "13")]
    pub sequence_flags: Option<u32>,
    #[prost(message, optional, tag = "6")]
    pub clock_snapshot: Option<ClockSnapshot>,
    #[prost(message, optional, tag = "11")]
    pub track_event: Option<TrackEvent>,
    #[prost(message, optional, tag = "60")]
    pub track_descriptor: Option<TrackDescriptor>,
}

/// perfetto.protos.ClockSnapshot.
#[derive(Clone, PartialEq, Message)]
pub struct ClockSnapshot {
    #[prost(message, repeated, tag = "1")]
    pub clocks: Vec<Clock>,
    /// a BuiltinClock: the clock the trace's time is in
    #[prost(int32, optional, tag = "2")]
    pub primary_trace_clock: Option<i32>,
}

/// perfetto.protos.ClockSnapshot.Clock.
#[derive(Clone, PartialEq, Message)]
pub struct Clock {
    #[prost(uint32, optional, tag = "1")]
    pub clock_id: Option<u32>,
    /// ns
    #[prost(uint64, optional, tag = "2")]
    pub timestamp: Option<u64>,
}

/// perfetto.protos.TrackDescriptor.
#[derive(Clone, PartialEq, Message)]
pub struct TrackDescriptor {
    #[prost(uint64, optional, tag = "1")]
    pub uuid: Option<u64>,
    #[prost(uint64, optional, tag = "5")]
    pub parent_uuid: Option<u64>,
    #[prost(string, optional, tag = "2")]
    pub name: Option<String>,
    #[prost(string, optional, tag = "14")]
    pub description: Option<String>,
    #[prost(message, optional, tag = "3")]
    pub process: Option<ProcessDescriptor>,
    #[prost(message, optional, tag = "4")]
    pub thread: Option<ThreadDescriptor>,
    #[prost(message, optional, tag = "8")]
    pub counter: Option<CounterDescriptor>,
}

/// perfetto.protos.ProcessDescriptor.
#[derive(Clone, PartialEq, Message)]
pub struct ProcessDescriptor {
    #[prost(int32, optional, tag = "1")]
    pub pid: Option<i32>,
    #[prost(string, repeated, tag = "2")]
    pub cmdline: Vec<String>,
    #[prost(string, optional, tag = "6")]
    pub process_name: Option<String>,
}

/// perfetto.protos.ThreadDescriptor.
#[derive(Clone, PartialEq, Message)]
pub struct ThreadDescriptor {
    #[prost(int32, optional, tag = "1")]
    pub pid: Option<i32>,
    #[prost(int64, optional, tag = "2")]
    pub tid: Option<i64>,
    #[prost(string, optional, tag = "5")]
    pub thread_name: Option<String>,
}

/// perfetto.protos.CounterDescriptor.
#[derive(Clone, PartialEq, Message)]
pub struct CounterDescriptor {
    #[prost(string, optional, tag = "6")]
    pub unit_name: Option<String>,
}

/// perfetto.protos.TrackEvent.
#[derive(Clone, PartialEq, Message)]
pub struct TrackEvent {
    #[prost(string, repeated, tag = "22")]
    pub categories: Vec<String>,
    #[prost(string, optional, tag = "23")]
    pub name: Option<String>,
    /// a TrackEvent.Type
    #[prost(int32, optional, tag = "9")]
    pub r#type: Option<i32>,
    #[prost(uint64, optional, tag = "11")]
    pub track_uuid: Option<u64>,
    #[prost(double, optional, tag = "44")]
    pub double_counter_value: Option<f64>,
    #[prost(fixed64, repeated, packed = "false", tag = "47")]
    pub flow_ids: Vec<u64>,
    #[prost(fixed64, repeated, packed = "false", tag = "48")]
    pub terminating_flow_ids: Vec<u64>,
    #[prost(message, repeated, tag = "4")]
    pub debug_annotations: Vec<DebugAnnotation>,
}

/// perfetto.protos.DebugAnnotation (`value` is a oneof: one of the three is set).
#[derive(Clone, PartialEq, Message)]
pub struct DebugAnnotation {
    #[prost(string, optional, tag = "10")]
    pub name: Option<String>,
    #[prost(uint64, optional, tag = "3")]
    pub uint_value: Option<u64>,
    #[prost(int64, optional, tag = "4")]
    pub int_value: Option<i64>,
    #[prost(string, optional, tag = "6")]
    pub string_value: Option<String>,
}

/// The model as the bytes of trace.perfetto-trace (a Trace message). `text` maps every string
/// the file carries (the bundle's redaction; the identity otherwise).
///
/// Timed packets are encoded as they are made and only their bytes kept until they are put in
/// time order (a long run's trace holds a few dozen packets per tick).
pub fn perfetto_trace(model: &TraceModel, text: &mut dyn FnMut(&str) -> String) -> Vec<u8> {
    let mut head: Vec<TracePacket> = clock_snapshot(model).into_iter().collect();
    let mut tracks = Tracks::default();
    head.extend(track_descriptors(model, &mut tracks, text));
    let mut timed = timed_packets(model, &mut tracks, &mut head, text);
    timed.sort_by_key(|(ts, rank, _)| (*ts, *rank));
    if let Some(first) = head.first_mut() {
        first.sequence_flags = Some(SEQ_INCREMENTAL_STATE_CLEARED);
    }
    let mut out = Trace { packet: head }.encode_to_vec();
    for (_, _, p) in timed {
        out.extend_from_slice(&p);
    }
    out
}

/// The attach clocks (monotonic, boot time, real time) as the trace's first packet, with
/// CLOCK_MONOTONIC its primary clock; None for an older recording without them.
fn clock_snapshot(model: &TraceModel) -> Option<TracePacket> {
    let c = model.clocks?;
    let clock = |id: u32, ns: u64| Clock {
        clock_id: Some(id),
        timestamp: Some(ns),
    };
    Some(TracePacket {
        clock_snapshot: Some(ClockSnapshot {
            clocks: vec![
                clock(CLOCK_MONOTONIC, c.monotonic_ns),
                clock(CLOCK_BOOTTIME, c.boottime_ns),
                clock(CLOCK_REALTIME, c.realtime_ns),
            ],
            primary_trace_clock: Some(CLOCK_MONOTONIC as i32),
        }),
        // The snapshot's own packet is stamped on the default clock (BOOTTIME), from its
        // own readings, so that placing it needs no clock it has not declared yet.
        timestamp: Some(c.boottime_ns),
        trusted_packet_sequence_id: Some(SEQUENCE_ID),
        ..Default::default()
    })
}

/// The descriptors of scanprof's own track (the recording's description), then of each
/// process and thread, whose track ids `tracks` keeps for the events.
fn track_descriptors(
    model: &TraceModel,
    tracks: &mut Tracks,
    text: &mut dyn FnMut(&str) -> String,
) -> Vec<TracePacket> {
    let mut head = Vec::new();
    let i = &model.info;
    let description = format!(
        "scanprof {} on {} (kernel {}), started {}: {}",
        i.version, i.hostname, i.kernel, i.started_at, i.command_line
    );
    head.push(descriptor(TrackDescriptor {
        uuid: Some(SCANPROF_TRACK),
        name: Some("scanprof".into()),
        description: Some(text(&description)),
        ..Default::default()
    }));
    for p in &model.processes {
        let uuid = tracks.next();
        tracks.processes.insert(p.pid, uuid);
        head.push(descriptor(TrackDescriptor {
            uuid: Some(uuid),
            process: Some(ProcessDescriptor {
                pid: Some(p.pid as i32),
                cmdline: p.exe.iter().map(|e| text(e)).collect(),
                process_name: Some(text(&p.comm)),
            }),
            ..Default::default()
        }));
    }
    for t in &model.threads {
        let uuid = tracks.next();
        tracks.threads.insert((t.pid, t.tid), uuid);
        head.push(descriptor(TrackDescriptor {
            uuid: Some(uuid),
            parent_uuid: tracks.processes.get(&t.pid).copied(),
            thread: Some(ThreadDescriptor {
                pid: Some(t.pid as i32),
                tid: Some(t.tid.into()),
                thread_name: Some(text(&t.comm)),
            }),
            ..Default::default()
        }));
    }
    head
}

/// Every event as its encoded packets with its time and rank, not yet in time order; a counter
/// track met for the first time adds its descriptor to `head`.
fn timed_packets(
    model: &TraceModel,
    tracks: &mut Tracks,
    head: &mut Vec<TracePacket>,
    text: &mut dyn FnMut(&str) -> String,
) -> Vec<(u64, u8, Vec<u8>)> {
    // Times since attach become CLOCK_MONOTONIC times when the recording has the attach
    // clocks; an older recording's trace counts from 0 on Perfetto's default clock.
    let (base, clock) = match model.clocks {
        Some(c) => (c.monotonic_ns, Some(CLOCK_MONOTONIC)),
        None => (0, None),
    };
    let packet = |ts: u64| TracePacket {
        timestamp: Some(base + ts),
        timestamp_clock_id: clock,
        trusted_packet_sequence_id: Some(SEQUENCE_ID),
        ..Default::default()
    };
    // (ts, rank, packet): a slice's end sorts before anything else at its time, so a slice
    // that ends where the next begins closes first.
    let mut timed: Vec<(u64, u8, Vec<u8>)> = Vec::new();
    // A packet as it sits in a Trace: field 1, length-delimited.
    let bytes = |p: TracePacket| Trace { packet: vec![p] }.encode_to_vec();
    for e in &model.events {
        let on = tracks.of(e.pid, e.tid);
        let event = |kind: EventType, name: Option<String>| TrackEvent {
            r#type: Some(kind as i32),
            track_uuid: Some(on),
            name,
            ..Default::default()
        };
        match &e.kind {
            EventKind::Counter { name, series } => {
                for (s, v) in series {
                    let (uuid, new) = tracks.counter(e.pid, e.tid, name, s);
                    if let Some(d) = new {
                        head.push(descriptor(TrackDescriptor {
                            name: d.name.as_deref().map(&mut *text),
                            ..d
                        }));
                    }
                    let sample = TrackEvent {
                        track_uuid: Some(uuid),
                        double_counter_value: Some(if v.is_finite() { *v } else { 0.0 }),
                        ..event(EventType::Counter, None)
                    };
                    timed.push((e.ts_ns, 1, bytes(with_event(packet(e.ts_ns), sample))));
                }
            }
            EventKind::Slice {
                name,
                category,
                dur_ns,
                args,
                flow,
            } => {
                let (flow_ids, terminating_flow_ids) = match flow {
                    Some(FlowEnd::Out { id }) => (vec![*id], vec![]),
                    Some(FlowEnd::In { id }) => (vec![], vec![*id]),
                    None => (vec![], vec![]),
                };
                let begin = TrackEvent {
                    categories: vec![category.name().into()],
                    debug_annotations: annotations(args, text),
                    flow_ids,
                    terminating_flow_ids,
                    ..event(EventType::SliceBegin, Some(text(name)))
                };
                timed.push((e.ts_ns, 1, bytes(with_event(packet(e.ts_ns), begin))));
                // A slice lasts at least 1 ns, so that its end cannot sort before its start.
                let end_ns = e.ts_ns + (*dur_ns).max(1);
                let end = event(EventType::SliceEnd, None);
                timed.push((end_ns, 0, bytes(with_event(packet(end_ns), end))));
            }
            EventKind::Instant { name, category, args } => {
                let instant = TrackEvent {
                    categories: vec![category.name().into()],
                    debug_annotations: annotations(args, text),
                    ..event(EventType::Instant, Some(text(name)))
                };
                timed.push((e.ts_ns, 1, bytes(with_event(packet(e.ts_ns), instant))));
            }
        }
    }
    timed
}

/// A descriptor packet (descriptors are not timed: they come first, on the sequence).
fn descriptor(d: TrackDescriptor) -> TracePacket {
    TracePacket {
        trusted_packet_sequence_id: Some(SEQUENCE_ID),
        track_descriptor: Some(d),
        ..Default::default()
    }
}

fn with_event(p: TracePacket, e: TrackEvent) -> TracePacket {
    TracePacket {
        track_event: Some(e),
        ..p
    }
}

/// A slice's or instant's values as debug annotations (args in the UI).
fn annotations(args: &[(&str, Arg)], text: &mut dyn FnMut(&str) -> String) -> Vec<DebugAnnotation> {
    args.iter()
        .map(|(k, v)| {
            let a = DebugAnnotation {
                name: Some((*k).into()),
                ..Default::default()
            };
            match v {
                Arg::Uint(n) => DebugAnnotation {
                    uint_value: Some(*n),
                    ..a
                },
                Arg::Int(n) => DebugAnnotation {
                    int_value: Some(*n),
                    ..a
                },
                Arg::Str(s) => DebugAnnotation {
                    string_value: Some(text(s)),
                    ..a
                },
            }
        })
        .collect()
}

/// Track uuids: 1 is scanprof's, then each process, thread and counter series in the order
/// they are met.
#[derive(Default)]
struct Tracks {
    last: u64,
    processes: BTreeMap<u32, u64>,
    threads: BTreeMap<(u32, u32), u64>,
    counters: BTreeMap<(u32, u32, String), u64>,
}

impl Tracks {
    fn next(&mut self) -> u64 {
        self.last = self.last.max(SCANPROF_TRACK) + 1;
        self.last
    }

    /// The track of thread `tid` of `pid`: scanprof's for [`SCANPROF_PID`], the process's if
    /// the model did not list the thread.
    fn of(&self, pid: u32, tid: u32) -> u64 {
        if pid == SCANPROF_PID {
            return SCANPROF_TRACK;
        }
        self.threads
            .get(&(pid, tid))
            .or_else(|| self.processes.get(&pid))
            .copied()
            .unwrap_or(SCANPROF_TRACK)
    }

    /// The counter track of one series of counter `name` on thread `tid` of `pid`, and its
    /// descriptor if it is new. A counter's only series keeps the counter's name; one of several
    /// is named "counter: series".
    fn counter(&mut self, pid: u32, tid: u32, name: &str, series: &str) -> (u64, Option<TrackDescriptor>) {
        let full = if series == super::trace::VALUE {
            name.to_string()
        } else {
            format!("{name}: {series}")
        };
        if let Some(uuid) = self.counters.get(&(pid, tid, full.clone())) {
            return (*uuid, None);
        }
        let uuid = self.next();
        let parent = self.of(pid, tid);
        self.counters.insert((pid, tid, full.clone()), uuid);
        let d = TrackDescriptor {
            uuid: Some(uuid),
            parent_uuid: Some(parent),
            name: Some(full),
            counter: Some(CounterDescriptor {
                unit_name: unit_of(name).map(String::from),
            }),
            ..Default::default()
        };
        (uuid, Some(d))
    }
}

/// The unit a counter's name gives.
fn unit_of(name: &str) -> Option<&'static str> {
    if name.contains("pps") || name.contains("per second") {
        Some("pkt/s")
    } else if name.contains('%') || name.contains("time budget") {
        Some("%")
    } else if name.contains("ns/packet") {
        Some("ns/pkt")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::views::export::trace::{Category, TraceModel};
    use crate::views::fixtures::rich_recording;

    fn same(s: &str) -> String {
        s.to_string()
    }

    /// The trace as written, decoded back.
    fn build(model: &TraceModel, text: &mut dyn FnMut(&str) -> String) -> Trace {
        Trace::decode(perfetto_trace(model, text).as_slice()).expect("decodes")
    }

    fn events(t: &Trace) -> Vec<(&TracePacket, &TrackEvent)> {
        t.packet
            .iter()
            .filter_map(|p| p.track_event.as_ref().map(|e| (p, e)))
            .collect()
    }

    /// The trace's steps alone: the clock snapshot only with the attach clocks; one descriptor
    /// for scanprof and one per process and thread; at least one timed packet per event; and
    /// the whole trace is the snapshot, the descriptors (with the counter tracks the events
    /// added) and the timed packets, in that order.
    #[test]
    fn the_trace_is_its_clock_snapshot_descriptors_and_timed_packets() {
        let mut model = TraceModel::of(&rich_recording());
        assert!(model.clocks.is_some());
        let snapshot = clock_snapshot(&model).expect("a clock snapshot");
        let clocks = snapshot.clock_snapshot.as_ref().unwrap();
        assert_eq!(clocks.clocks.len(), 3);
        assert_eq!(clocks.primary_trace_clock, Some(CLOCK_MONOTONIC as i32));
        let mut tracks = Tracks::default();
        let descriptors = track_descriptors(&model, &mut tracks, &mut same);
        assert_eq!(descriptors.len(), 1 + model.processes.len() + model.threads.len());
        assert!(descriptors.iter().all(|p| p.track_descriptor.is_some()));
        let mut head = Vec::new();
        let timed = timed_packets(&model, &mut tracks, &mut head, &mut same);
        assert!(timed.len() >= model.events.len() && !model.events.is_empty());
        assert!(head.iter().all(|p| p.track_descriptor.is_some()));
        let whole = build(&model, &mut same);
        assert_eq!(
            whole.packet.len(),
            1 + descriptors.len() + head.len() + timed.len()
        );
        assert!(whole.packet[0].clock_snapshot.is_some());
        model.clocks = None;
        assert!(clock_snapshot(&model).is_none());
    }

    fn of_type(t: &Trace, kind: EventType) -> Vec<&TrackEvent> {
        events(t)
            .into_iter()
            .map(|(_, e)| e)
            .filter(|e| e.r#type == Some(kind as i32))
            .collect()
    }

    #[test]
    fn the_trace_carries_every_part_of_the_model() {
        let rec = rich_recording();
        let model = TraceModel::of(&rec);
        let c = model.counts();
        let t = build(&model, &mut same);
        let counters: Vec<_> = t
            .packet
            .iter()
            .filter_map(|p| p.track_descriptor.as_ref())
            .filter(|d| d.counter.is_some())
            .collect();
        assert_eq!(counters.len(), c.counter_tracks);
        assert_eq!(of_type(&t, EventType::Counter).len(), c.counter_values);
        assert_eq!(of_type(&t, EventType::SliceBegin).len(), c.slices);
        assert_eq!(of_type(&t, EventType::SliceEnd).len(), c.slices);
        assert_eq!(of_type(&t, EventType::Instant).len(), c.instants);
        // The fixture: 3 ticks (4 samples a track), one episode a tick, and one phase
        // (sending) over them.
        assert_eq!(c.slices, 4);
        assert_eq!(c.counter_values % 4, 0);
        assert_eq!(c.counter_values, 4 * c.counter_tracks);
        let processes = t
            .packet
            .iter()
            .filter_map(|p| p.track_descriptor.as_ref()?.process.as_ref())
            .count();
        assert_eq!(processes, model.processes.len());
    }

    #[test]
    fn timestamps_are_monotonic_ns_and_say_so() {
        let rec = rich_recording();
        let clocks = rec.clocks.expect("the fixture has clocks");
        let t = build(&TraceModel::of(&rec), &mut same);
        let snap = t.packet[0]
            .clock_snapshot
            .as_ref()
            .expect("a clock snapshot first");
        assert_eq!(snap.primary_trace_clock, Some(CLOCK_MONOTONIC as i32));
        let ids: Vec<_> = snap.clocks.iter().map(|c| (c.clock_id, c.timestamp)).collect();
        assert_eq!(
            ids,
            [
                (Some(CLOCK_MONOTONIC), Some(clocks.monotonic_ns)),
                (Some(CLOCK_BOOTTIME), Some(clocks.boottime_ns)),
                (Some(CLOCK_REALTIME), Some(clocks.realtime_ns)),
            ]
        );
        assert_eq!(t.packet[0].sequence_flags, Some(SEQ_INCREMENTAL_STATE_CLEARED));
        assert_eq!(
            (t.packet[0].timestamp, t.packet[0].timestamp_clock_id),
            (Some(clocks.boottime_ns), None),
            "the snapshot's packet on the default clock"
        );
        for (p, _) in events(&t) {
            assert_eq!(p.timestamp_clock_id, Some(CLOCK_MONOTONIC));
            assert_eq!(p.trusted_packet_sequence_id, Some(SEQUENCE_ID));
        }
        // The first episode started at 0.5 s: attach + 0.5 s on the monotonic clock, and
        // ended 2 ms later.
        let ep = &rec.ticks[0].episodes[0];
        let begins: Vec<u64> = events(&t)
            .iter()
            .filter(|(_, e)| e.r#type == Some(EventType::SliceBegin as i32))
            .filter(|(_, e)| e.categories == [Category::Blocking.name()])
            .map(|(p, _)| p.timestamp.expect("ts"))
            .collect();
        assert_eq!(begins[0], clocks.monotonic_ns + (ep.start_s * 1e9).round() as u64);
        let ts: Vec<u64> = events(&t).iter().map(|(p, _)| p.timestamp.expect("ts")).collect();
        assert!(ts.windows(2).all(|w| w[0] <= w[1]), "packets in time order");
    }

    #[test]
    fn without_clocks_the_trace_counts_from_zero_and_declares_nothing() {
        let mut rec = rich_recording();
        rec.clocks = None;
        let t = build(&TraceModel::of(&rec), &mut same);
        assert!(t.packet.iter().all(|p| p.clock_snapshot.is_none()));
        assert!(t.packet.iter().all(|p| p.timestamp_clock_id.is_none()));
        let first = events(&t)[0].0.timestamp;
        assert_eq!(first, Some(0));
    }

    #[test]
    fn slices_pair_on_their_thread_and_carry_their_args() {
        let rec = rich_recording();
        let t = build(&TraceModel::of(&rec), &mut same);
        let blocking = |e: &&TrackEvent| e.categories == [Category::Blocking.name()];
        let begins: Vec<&TrackEvent> = of_type(&t, EventType::SliceBegin)
            .into_iter()
            .filter(blocking)
            .collect();
        let ends: Vec<&TrackEvent> = of_type(&t, EventType::SliceEnd)
            .into_iter()
            .filter(|e| e.track_uuid != Some(SCANPROF_TRACK))
            .collect();
        assert_eq!(begins.len(), 3);
        assert_eq!(ends.len(), 3);
        for (b, e) in begins.iter().zip(&ends) {
            assert_eq!(b.track_uuid, e.track_uuid);
            assert_eq!(b.name.as_deref(), Some("blocked in sock_alloc_send_pskb"));
            assert_eq!(b.categories, [Category::Blocking.name()]);
            let dur = b
                .debug_annotations
                .iter()
                .find(|a| a.name.as_deref() == Some("duration_ns"))
                .and_then(|a| a.uint_value);
            assert_eq!(dur, Some(2_000_000));
        }
        // The slices sit on tid 7's thread track.
        let thread_uuid = t
            .packet
            .iter()
            .filter_map(|p| p.track_descriptor.as_ref())
            .find(|d| d.thread.as_ref().is_some_and(|th| th.tid == Some(7)))
            .and_then(|d| d.uuid);
        assert!(thread_uuid.is_some());
        assert!(begins.iter().all(|b| b.track_uuid == thread_uuid));
    }

    /// The run's phases are slices on scanprof's own track, one after another (the fixture's
    /// three ticks are all sending: one slice from the first tick's start to the last one's end).
    #[test]
    fn the_runs_phases_are_slices_on_scanprofs_track() {
        let rec = rich_recording();
        let t = build(&TraceModel::of(&rec), &mut same);
        let phases: Vec<(&TracePacket, &TrackEvent)> = events(&t)
            .into_iter()
            .filter(|(_, e)| e.categories == [Category::Phase.name()])
            .collect();
        assert_eq!(phases.len(), 1, "{phases:?}");
        let (p, e) = phases[0];
        assert_eq!(e.track_uuid, Some(SCANPROF_TRACK));
        assert_eq!(e.name.as_deref(), Some("sending"));
        let first = &rec.ticks[0];
        let start_ns = ((first.t_s - first.interval_s) * 1e9).round() as u64;
        let clocks = rec.clocks.expect("clocks");
        assert_eq!(p.timestamp, Some(clocks.monotonic_ns + start_ns));
        let end = events(&t)
            .into_iter()
            .filter(|(_, e)| {
                e.r#type == Some(EventType::SliceEnd as i32) && e.track_uuid == Some(SCANPROF_TRACK)
            })
            .map(|(p, _)| p.timestamp)
            .collect::<Vec<_>>();
        let last = rec.ticks.last().expect("ticks");
        assert_eq!(end, [Some(clocks.monotonic_ns + (last.t_s * 1e9).round() as u64)]);
    }

    #[test]
    fn every_event_is_on_a_declared_track_and_counters_on_counter_tracks() {
        let t = build(&TraceModel::of(&rich_recording()), &mut same);
        let declared: BTreeMap<u64, &TrackDescriptor> = t
            .packet
            .iter()
            .filter_map(|p| p.track_descriptor.as_ref())
            .map(|d| (d.uuid.expect("uuid"), d))
            .collect();
        for (_, e) in events(&t) {
            let d = declared[&e.track_uuid.expect("track")];
            assert_eq!(
                d.counter.is_some(),
                e.r#type == Some(EventType::Counter as i32),
                "{e:?} on {d:?}"
            );
        }
        for d in declared.values() {
            if let Some(parent) = d.parent_uuid {
                assert!(declared.contains_key(&parent), "{d:?}");
            }
        }
        // Several series of one counter: one track each, named after both.
        assert!(declared
            .values()
            .any(|d| d.name.as_deref() == Some("sender time budget (tid 7): send")));
    }

    #[test]
    fn a_spawn_is_a_flow_between_two_anchor_slices() {
        let mut rec = rich_recording();
        let mut child = rec.ticks[1].processes[0].clone();
        child.pid = 99;
        child.ppid = rec.ticks[1].processes[0].pid;
        child.comm = "worker".into();
        child.start_s = Some(1.5);
        for t in &mut rec.ticks[1..] {
            t.processes.push(child.clone());
        }
        let t = build(&TraceModel::of(&rec), &mut same);
        let begins = of_type(&t, EventType::SliceBegin);
        let out: Vec<_> = begins.iter().filter(|b| !b.flow_ids.is_empty()).collect();
        let into: Vec<_> = begins
            .iter()
            .filter(|b| !b.terminating_flow_ids.is_empty())
            .collect();
        assert_eq!((out.len(), into.len()), (1, 1));
        assert_eq!(out[0].flow_ids, into[0].terminating_flow_ids);
        assert_ne!(out[0].track_uuid, into[0].track_uuid);
        let started = of_type(&t, EventType::Instant)
            .into_iter()
            .filter(|e| e.name.as_deref() == Some("started worker"))
            .count();
        assert_eq!(started, 1);
    }

    #[test]
    fn every_string_goes_through_the_mapping() {
        let rec = rich_recording();
        let mut seen = Vec::new();
        let bytes = perfetto_trace(&TraceModel::of(&rec), &mut |s: &str| {
            seen.push(s.to_string());
            s.replace("lab-host", "host-1")
        });
        let text = String::from_utf8_lossy(&bytes);
        assert!(!text.contains("lab-host"));
        assert!(text.contains("host-1"));
        assert!(
            seen.iter().any(|s| s.contains("10.99.0.2")),
            "the command line is mapped"
        );
        // And it decodes back to a trace of as many packets as the unmapped one.
        let back = Trace::decode(bytes.as_slice()).expect("decodes");
        let plain = build(&TraceModel::of(&rec), &mut same);
        assert_eq!(back.packet.len(), plain.packet.len());
        assert_ne!(back, plain);
    }

    #[test]
    fn field_numbers_are_perfettos() {
        // A counter sample, encoded by hand from the official numbers: TracePacket.timestamp
        // (8, varint), trusted_packet_sequence_id (10, varint), track_event (11, bytes);
        // TrackEvent.type (9) = 4, track_uuid (11), double_counter_value (44, fixed64).
        let p = TracePacket {
            timestamp: Some(5),
            trusted_packet_sequence_id: Some(1),
            track_event: Some(TrackEvent {
                r#type: Some(EventType::Counter as i32),
                track_uuid: Some(2),
                double_counter_value: Some(1.0),
                ..Default::default()
            }),
            ..Default::default()
        };
        let mut want = vec![8 << 3, 5, 10 << 3, 1, (11 << 3) | 2, 14];
        want.extend([9 << 3, 4, 11 << 3, 2]);
        // field 44, wire type 1: key 353 = varint [0xe1, 0x02]
        want.extend([0xe1, 0x02]);
        want.extend(1.0f64.to_le_bytes());
        assert_eq!(p.encode_to_vec(), want);
        // TracePacket.timestamp_clock_id is 58, track_descriptor 60 (keys 464, 482 + 2).
        let p = TracePacket {
            timestamp_clock_id: Some(3),
            ..Default::default()
        };
        assert_eq!(p.encode_to_vec(), [0xd0, 0x03, 3]);
        let flows = TrackEvent {
            flow_ids: vec![7],
            ..Default::default()
        };
        // 47, fixed64 unpacked: key 377 = [0xf9, 0x02].
        let mut want = vec![0xf9, 0x02];
        want.extend(7u64.to_le_bytes());
        assert_eq!(flows.encode_to_vec(), want);
    }
}
