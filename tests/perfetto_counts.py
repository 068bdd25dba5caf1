#!/usr/bin/env python3
"""Decodes a Perfetto trace with Perfetto's own definitions (perfetto_trace_pb2 from the
`perfetto` package on PyPI, which scripts/setup installs in .venv-perfetto) and prints what it
holds as one JSON object, for tests/perfetto_trace.rs to compare with the run's own figures.

Fails (exit 1, saying where) if any packet holds a field or enum value those definitions do not
know: protobuf keeps such fields as unknown instead of failing, so a wrong field number in
scanprof's encoder would otherwise pass unseen.

Usage: perfetto_counts.py TRACE_FILE
"""

import collections
import json
import sys

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

SLICE_BEGIN = pb.TrackEvent.Type.Value("TYPE_SLICE_BEGIN")
SLICE_END = pb.TrackEvent.Type.Value("TYPE_SLICE_END")
INSTANT = pb.TrackEvent.Type.Value("TYPE_INSTANT")
COUNTER = pb.TrackEvent.Type.Value("TYPE_COUNTER")


def has_unknown_fields(msg):
    """Whether msg, or any message in it, holds fields its definition does not know: a copy
    without them encodes to fewer bytes."""
    copy = type(msg)()
    copy.CopyFrom(msg)
    copy.DiscardUnknownFields()
    return copy.ByteSize() != msg.ByteSize()


def main(path):
    data = open(path, "rb").read()
    trace = pb.Trace()
    trace.ParseFromString(data)
    bad = [i for i, p in enumerate(trace.packet) if has_unknown_fields(p)]
    if bad:
        sys.exit(
            f"{path}: {len(bad)} packet(s) hold fields unknown to Perfetto's definitions, "
            f"first packet {bad[0]}:\n{trace.packet[bad[0]]}"
        )
    if trace.ByteSize() != len(data):
        sys.exit(f"{path}: {len(data)} bytes, but the decoded trace re-encodes to {trace.ByteSize()}")

    tracks = {}
    processes, threads, counter_tracks = [], [], {}
    clock_snapshots = []
    for p in trace.packet:
        if p.HasField("track_descriptor"):
            d = p.track_descriptor
            tracks[d.uuid] = d
            if d.HasField("process"):
                processes.append(d.process.pid)
            if d.HasField("thread"):
                threads.append([d.thread.pid, d.thread.tid])
            if d.HasField("counter"):
                counter_tracks[d.uuid] = d.name
        if p.HasField("clock_snapshot"):
            s = p.clock_snapshot
            clock_snapshots.append(
                {
                    "primary_trace_clock": s.primary_trace_clock,
                    "clocks": {str(c.clock_id): c.timestamp for c in s.clocks},
                }
            )

    values = collections.Counter()
    begins, ends, instants = collections.Counter(), collections.Counter(), collections.Counter()
    instant_names = collections.Counter()
    flows_out, flows_in = [], []
    clock_ids = set()
    undeclared = 0
    counter_off_track = 0
    timestamps = []
    for p in trace.packet:
        if not p.HasField("track_event"):
            continue
        e = p.track_event
        clock_ids.add(p.timestamp_clock_id if p.HasField("timestamp_clock_id") else None)
        timestamps.append(p.timestamp)
        if e.track_uuid not in tracks:
            undeclared += 1
        cat = ",".join(e.categories)
        if e.type == COUNTER:
            if e.track_uuid in counter_tracks:
                values[counter_tracks[e.track_uuid]] += 1
            else:
                counter_off_track += 1
        elif e.type == SLICE_BEGIN:
            begins[cat] += 1
        elif e.type == SLICE_END:
            ends[tracks[e.track_uuid].name if e.track_uuid in tracks else "?"] += 1
        elif e.type == INSTANT:
            instants[cat] += 1
            instant_names[e.name.split(" ")[0]] += 1
        flows_out.extend(e.flow_ids)
        flows_in.extend(e.terminating_flow_ids)

    print(
        json.dumps(
            {
                "packets": len(trace.packet),
                "clock_snapshots": clock_snapshots,
                "timestamp_clock_ids": sorted(c for c in clock_ids if c is not None),
                "events_without_clock_id": None in clock_ids,
                "first_ts": min(timestamps, default=0),
                "last_ts": max(timestamps, default=0),
                "process_descriptors": sorted(processes),
                "thread_descriptors": sorted(threads),
                "counter_tracks": len(counter_tracks),
                "counter_values": values,
                "slice_begins": begins,
                "slice_ends": sum(ends.values()),
                "instants": instants,
                "instant_names": instant_names,
                "flow_ids": sorted(flows_out),
                "terminating_flow_ids": sorted(flows_in),
                "events_on_undeclared_tracks": undeclared,
                "counter_values_off_counter_tracks": counter_off_track,
            },
            sort_keys=True,
        )
    )


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
