//! The scanner model on hand-made probe calls: unicornscan's sequence of a work unit handed over,
//! the rate set up, the clock calibrated, packets sent and WORKDONE; and its disagreements.

use super::*;

const MS: u64 = 1_000_000;
const START: u64 = 1_000 * MS;

fn call(probe: &str, role: &str, pid: u32, at_ms: u64, entry: bool, values: &[(&str, f64)]) -> ProbeCall {
    ProbeCall {
        probe: probe.into(),
        role: serde_json::from_value(role.into()).expect("a probe role"),
        pid,
        tid: pid,
        ts_ns: START + at_ms * MS,
        entry,
        values: values.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        ret: None,
        inside_ns: 0,
        packets: 0,
        last_pkt_ns: 0,
        recipient: None,
    }
}

fn types() -> BTreeMap<String, String> {
    [("4", "WORKUNIT"), ("5", "WORKDONE")]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn argv(pps: f64) -> ArgvRate {
    ArgvRate {
        window: None,
        pps: Some(pps),
        kind: Some(crate::wrappers::RateKind::Exact),
        floor_pps: None,
        provenance: vec![format!("argv: -r {pps}")],
        origin: RateOrigin::Given,
        conflicts: vec![],
        per_target: None,
        process: None,
    }
}

fn process(pid: u32, comm: &str, role: &str) -> ProcessInfo {
    ProcessInfo {
        pid,
        ppid: 1,
        comm: comm.into(),
        exe: format!("/x/{comm}"),
        root: false,
        alive: true,
        exit_code: None,
        role: Some(role.into()),
        start_s: None,
        exit_s: None,
        open_files_limit: None,
    }
}

/// One work unit at `pps` from master 10 to sender 20: sends `packets` packets in `send_ms`,
/// calibrated with `delay_cycles` at 1 GHz, and reports `claimed` pps.
#[allow(clippy::too_many_arguments)]
fn unit(
    m: &mut ScannerModel,
    at: u64,
    pps: f64,
    packets: u64,
    send_ms: u64,
    delay_cycles: f64,
    claimed: f64,
    sent_before: u64,
) {
    m.ingest(&[call(
        "master_send_message",
        "ipc_send",
        10,
        at,
        true,
        &[("type", 4.0), ("len", 700.0), ("pps", pps)],
    )]);
    m.ingest(&[call(
        "init_tslot",
        "rate_setup",
        20,
        at + 1,
        true,
        &[("pps", pps), ("delay_type", 1.0)],
    )]);
    let mut c = call("tsc_init_tslot", "calibration", 20, at + 1, true, &[("pps", pps)]);
    c.packets = sent_before;
    m.ingest(&[c]);
    let mut r = call(
        "tsc_init_tslot",
        "calibration",
        20,
        at + 101,
        false,
        &[("delay", delay_cycles), ("delay_unit_tsc_cycles", 1.0)],
    );
    r.inside_ns = 100 * MS;
    r.packets = sent_before;
    let mut r2 = call("init_tslot", "rate_setup", 20, at + 101, false, &[]);
    r2.packets = sent_before;
    m.ingest(&[r, r2]);
    let mut done = call(
        "sender_send_message",
        "ipc_send",
        20,
        at + 101 + send_ms,
        true,
        &[
            ("type", 5.0),
            ("len", 16.0),
            ("reported_pps", claimed),
            ("packets_sent", packets as f64),
        ],
    );
    done.packets = sent_before + packets;
    done.last_pkt_ns = done.ts_ns - MS;
    m.ingest(&[done]);
}

fn model(explicit: Option<f64>, argv_pps: f64) -> ScannerModel {
    ScannerModel::new("unicornscan", types(), explicit, argv(argv_pps), Some(1e9), START)
}

#[test]
fn a_work_unit_from_hand_over_to_done() {
    let mut m = model(None, 1000.0);
    assert_eq!(m.requested_pps(), Some(1000.0), "argv before anything runs");
    unit(&mut m, 10, 1000.0, 1000, 1000, 1e6, 1000.0, 0);
    let procs = [
        process(10, "unicornscan", "master"),
        process(20, "unisend", "sender"),
    ];
    let v = m.view(&[], &procs, &[]);
    assert_eq!(v.requested.pps, Some(1000.0));
    assert_eq!(v.requested.conflict, None);
    let sources: Vec<&str> = v.requested.sources.iter().map(|s| s.source.as_str()).collect();
    assert_eq!(sources[0], "argv: -r 1000");
    assert!(
        sources[1].starts_with("work unit 1 (WORKUNIT) from pid 10: pps=1000, to unisend (pid 20)"),
        "{sources:?}"
    );
    assert_eq!(sources[2], "init_tslot(delay_type=1, pps=1000) in pid 20");

    let c = &v.calibrations[0];
    assert_eq!(c.duration_ms, Some(100.0));
    assert_eq!(c.delay_ns, Some(1e6), "1e6 cycles at 1 GHz");
    assert_eq!(c.slot_ns, Some(1e6));
    assert_eq!(c.error_pct, Some(0.0));

    let u = &v.work_units[0];
    assert_eq!(u.sender_pid, Some(20));
    assert_eq!(u.handed_s, Some(0.010));
    assert_eq!(u.calibrated_s, Some(0.111));
    assert_eq!(u.done_s, Some(1.111));
    assert_eq!(u.packets, Some(1000));
    assert!((u.achieved_pps.unwrap() - 1000.0).abs() < 1e-9);
    assert!((u.setup_ms.unwrap() - 101.0).abs() < 1e-9);
    assert_eq!(v.claims[0].claimed, 1000.0);
    assert!(v.claims[0].diff_pct.unwrap().abs() < 1e-9);
    let kinds: Vec<(&str, &str, u64)> = v
        .ipc
        .iter()
        .map(|i| (i.comm.as_str(), i.kind.as_str(), i.bytes))
        .collect();
    assert_eq!(
        kinds,
        [("unicornscan", "WORKUNIT", 700), ("unisend", "WORKDONE", 16)]
    );
}

#[test]
fn several_units_show_idle_time_between_them() {
    let mut m = model(None, 500.0);
    unit(&mut m, 0, 500.0, 500, 1000, 2e6, 500.0, 0);
    unit(&mut m, 1151, 500.0, 500, 1000, 2e6, 500.0, 500);
    let v = m.view(&[], &[], &[]);
    assert_eq!(v.work_units.len(), 2);
    let second = &v.work_units[1];
    assert_eq!(second.index, 2);
    assert_eq!(
        second.packets,
        Some(500),
        "counted from the sender's packets at set-up"
    );
    assert!((second.idle_before_ms.unwrap() - 50.0).abs() < 1e-6, "{second:?}");
    assert_eq!(v.calibrations.len(), 2);
}

#[test]
fn a_wrong_calibration_shows_as_an_error_in_percent() {
    let mut m = model(None, 1000.0);
    unit(&mut m, 0, 1000.0, 800, 1000, 1.25e6, 1000.0, 0);
    let c = &m.view(&[], &[], &[]).calibrations[0];
    assert!((c.error_pct.unwrap() - 25.0).abs() < 1e-9);
}

#[test]
fn disagreeing_sources_are_flagged_and_the_scanners_own_setup_wins() {
    let mut m = model(None, 1000.0);
    unit(&mut m, 0, 250.0, 250, 1000, 4e6, 250.0, 0);
    let v = m.view(&[], &[], &[]);
    assert_eq!(v.requested.pps, Some(250.0), "what the scanner set up");
    let c = v.requested.conflict.unwrap();
    assert!(
        c.contains("the command line asks for 1000 pps but work unit 1"),
        "{c}"
    );

    // --requested wins over everything, and is itself a source.
    let mut m = model(Some(1000.0), 1000.0);
    unit(&mut m, 0, 1000.0, 1000, 1000, 1e6, 1000.0, 0);
    let v = m.view(&[], &[], &[]);
    assert_eq!(v.requested.pps, Some(1000.0));
    assert_eq!(v.requested.sources[0].source, "--requested 1000");
    assert_eq!(v.requested.conflict, None);
}

/// The profile's default rate for a scanner given none (unicornscan's 250 pps; the reference
/// sender's 100), as `requested_rate` reads it.
fn default_argv(pps: f64) -> ArgvRate {
    ArgvRate {
        provenance: vec![format!("default: {pps} (the scanner's built-in default)")],
        origin: RateOrigin::Default,
        ..argv(pps)
    }
}

#[test]
fn a_default_is_no_source_that_can_disagree() {
    // --requested 50000 beside the profile's default of 100 pps: the default is overridden,
    // not contradicted.
    let m = ScannerModel::new(
        "scanprof-send",
        BTreeMap::new(),
        Some(50_000.0),
        default_argv(100.0),
        None,
        START,
    );
    let v = m.view(&[], &[], &[]);
    assert_eq!(v.requested.pps, Some(50_000.0));
    assert_eq!(v.requested.conflict, None, "{:?}", v.requested.sources);
    let origins: Vec<RateOrigin> = v.requested.sources.iter().map(|s| s.origin).collect();
    assert_eq!(origins, [RateOrigin::Given, RateOrigin::Default]);

    // Nor does a rate the scanner set up at run time contradict its default.
    let mut m = ScannerModel::new(
        "unicornscan",
        types(),
        None,
        default_argv(250.0),
        Some(1e9),
        START,
    );
    unit(&mut m, 0, 1000.0, 1000, 1000, 1e6, 1000.0, 0);
    let v = m.view(&[], &[], &[]);
    assert_eq!(v.requested.pps, Some(1000.0), "what the scanner set up");
    assert_eq!(v.requested.conflict, None, "{:?}", v.requested.sources);
    assert!(v.requested.sources[1..]
        .iter()
        .all(|s| s.origin == RateOrigin::Observed));

    // Given against given still disagrees.
    let m = ScannerModel::new(
        "scanprof-send",
        BTreeMap::new(),
        Some(50_000.0),
        argv(100.0),
        None,
        START,
    );
    let c = m
        .view(&[], &[], &[])
        .requested
        .conflict
        .expect("given sources disagree");
    assert!(
        c.contains("--requested 50000 says 50000 pps but argv: -r 100 says 100"),
        "{c}"
    );
}

#[test]
fn a_claim_that_differs_from_the_measurement() {
    let mut m = model(None, 1000.0);
    // Asked 1000, sent 250 in a second, reports 1000.
    unit(&mut m, 0, 1000.0, 250, 1000, 1e6, 1000.0, 0);
    let v = m.view(&[], &[], &[]);
    let claim = &v.claims[0];
    assert!((claim.measured.unwrap() - 250.0).abs() < 1e-9);
    assert!((claim.diff_pct.unwrap() - 300.0).abs() < 1e-9);
}

#[test]
fn a_unit_without_a_done_message_is_counted_from_the_threads() {
    // scanprof send: init_slot only, no IPC.
    let mut m = ScannerModel::new("scanprof-send", BTreeMap::new(), None, argv(2000.0), None, START);
    let mut c = call(
        "init_slot",
        "rate_setup",
        30,
        0,
        true,
        &[("pps", 2000.0), ("pacer", 1.0)],
    );
    c.packets = 0;
    m.ingest(&[c]);
    let mut r = call("init_slot", "rate_setup", 30, 1, false, &[]);
    r.packets = 0;
    m.ingest(&[r]);
    let threads = [ThreadCounters {
        pid: 30,
        tid: 30,
        packets: 2001,
        last_send_ns: START + 1001 * MS,
        ..Default::default()
    }];
    let v = m.view(&[], &[], &threads);
    let u = &v.work_units[0];
    assert_eq!(u.packets, Some(2001));
    assert!((u.achieved_pps.unwrap() - 2000.0).abs() < 1e-6, "{u:?}");
    assert_eq!(v.requested.pps, Some(2000.0));
    assert_eq!(v.requested.conflict, None);
}

#[test]
fn a_printed_status_rate_is_set_beside_the_measured_rate() {
    let mut m =
        model(None, 20_000.0).with_output_claims(vec![ClaimSpec::status_line("masscan's status rate")]);
    // Ramps up from zero, then says 20k while 3.2k were sent.
    for (i, pps) in [0.0, 5_000.0, 15_000.0, 19_800.0, 20_000.0, 20_100.0]
        .iter()
        .enumerate()
    {
        m.output_reading(0, *pps, START + i as u64 * 1_000 * MS);
    }
    let threads = [ThreadCounters {
        pid: 5,
        tid: 6,
        packets: 16_001,
        first_send_ns: START,
        last_send_ns: START + 5_000 * MS,
        ..Default::default()
    }];
    let v = m.view(&[], &[], &threads);
    let c = &v.claims[0];
    assert_eq!(c.claimed, 20_000.0, "median of the later readings: {c:?}");
    assert!((c.measured.unwrap() - 3_200.0).abs() < 1e-6);
    assert!((c.diff_pct.unwrap() - 525.0).abs() < 1e-6);
    assert!(c.what.starts_with("masscan's status rate"));
    assert_eq!(c.source, Some(ClaimSource::StatusLine));
}

/// The master's `send_message(sock, 4, status, data, len)` decoded by the shipped unicornscan
/// profile from crafted payload bytes: the first 16 bytes of a work unit with `magic` at +0 and
/// `at10` at +10.
fn master_work_unit(at_ms: u64, magic: u32, at10: u32, delay_type: u8) -> ProbeCall {
    let set = crate::wrappers::ProfileSet::builtin().expect("builtin profiles");
    let probe = set
        .get("unicornscan")
        .and_then(|p| p.probes.iter().find(|p| p.name == "master_send_message"))
        .expect("master_send_message")
        .clone();
    let mut buf = [0u8; 16];
    buf[0..4].copy_from_slice(&magic.to_le_bytes());
    buf[4..8].copy_from_slice(&1u32.to_le_bytes());
    buf[10..14].copy_from_slice(&at10.to_le_bytes());
    buf[14] = delay_type;
    // send_message(sock, type, status, data, len): data is a pointer, not decoded.
    let args = [5, 4, 0, 0x7f00_0000_1000, 700, 0];
    let (values, recipient) = crate::collect::uprobes::entry_values(&probe, &args, &buf);
    let mut c = call("master_send_message", "ipc_send", 10, at_ms, true, &[]);
    c.values = values;
    c.recipient = recipient;
    c
}

#[test]
fn a_listener_work_unit_is_not_read_as_a_sender_rate() {
    // unicornscan's master hands a TCP send unit (pps 1000) to unisend, then a TCP listener unit
    // (magic 0xa1b1c1d1) to unilisten, whose bytes at +10 (window size, syn key) read as
    // pps=893648896 when decoded with the sender's layout.
    let send = master_work_unit(10, 0x1a1b_1c1d, 1000, 1);
    assert_eq!(send.recipient.as_deref(), Some("sender"));
    assert_eq!(send.values.get("pps"), Some(&1000.0));
    let listen = master_work_unit(11, 0xa1b1_c1d1, 893_648_896, 0);
    assert_eq!(listen.recipient.as_deref(), Some("listener"));
    assert_eq!(listen.values.get("pps"), None, "{:?}", listen.values);

    let mut m = model(None, 1000.0);
    m.ingest(&[send, listen]);
    m.ingest(&[call(
        "init_tslot",
        "rate_setup",
        20,
        12,
        true,
        &[("pps", 1000.0), ("delay_type", 1.0)],
    )]);
    let procs = [
        process(10, "unicornscan", "master"),
        process(20, "unisend", "sender"),
        process(30, "unilisten", "listener"),
    ];
    let v = m.view(&[], &procs, &[]);
    assert_eq!(v.requested.conflict, None, "{:?}", v.requested.sources);
    assert_eq!(v.requested.pps, Some(1000.0));
    assert_eq!(v.work_units.len(), 1);
    assert_eq!(v.work_units[0].sender_pid, Some(20));
    let kinds: Vec<&str> = v.ipc.iter().map(|i| i.kind.as_str()).collect();
    assert_eq!(kinds, ["WORKUNIT to listener", "WORKUNIT to sender"]);
}

/// A status file's totals: set beside scanprof's counts when scanprof launched the scanner and
/// the last reading came after the last send; shown alone when attached mid-run or when the
/// scanner stopped writing before its last packets.
#[test]
fn a_status_files_totals_are_compared_only_over_the_same_span() {
    let spec = |figure: StatusFigure, launched: bool| ClaimSpec {
        what: format!("zmap --status-updates-file z.csv: {figure:?}"),
        source: ClaimSource::StatusFile,
        figure,
        totals_comparable: launched,
    };
    let threads = [ThreadCounters {
        pid: 5,
        tid: 6,
        packets: 512,
        failed_calls: 3,
        first_send_ns: START,
        last_send_ns: START + 5_000 * MS,
        ..Default::default()
    }];
    let figures = [
        StatusFigure::Rate,
        StatusFigure::Sent,
        StatusFigure::SendFailures,
        StatusFigure::PcapDrops,
    ];
    let build = |launched: bool, last_at_ms: u64| {
        let mut m =
            model(None, 100.0).with_output_claims(figures.iter().map(|f| spec(*f, launched)).collect());
        for s in 0..=6u64 {
            m.output_reading(0, 100.0, START + s * 1_000 * MS);
            // The totals grow; only the last one counts.
            m.output_reading(1, (s * 100).min(512) as f64, START + s * 1_000 * MS);
        }
        m.output_reading(1, 512.0, START + last_at_ms * MS);
        m.output_reading(2, 3.0, START + last_at_ms * MS);
        m.output_reading(3, 7.0, START + last_at_ms * MS);
        m.output_note(
            "zmap --status-updates-file z.csv line 4: not a CSV record; the line is skipped".into(),
        );
        m.view(&[], &[], &threads)
    };
    let v = build(true, 6_000);
    assert_eq!(v.claims.len(), 4, "{:?}", v.claims);
    let by =
        |v: &ScannerView, f: StatusFigure| v.claims.iter().find(|c| c.figure == Some(f)).cloned().unwrap();
    let sent = by(&v, StatusFigure::Sent);
    assert_eq!(
        (sent.claimed, sent.measured, sent.diff_pct),
        (512.0, Some(512.0), Some(0.0))
    );
    assert_eq!(sent.source, Some(ClaimSource::StatusFile));
    assert!(sent.what.contains("last reading, at 6.0 s"), "{sent:?}");
    let failed = by(&v, StatusFigure::SendFailures);
    assert_eq!((failed.claimed, failed.measured), (3.0, Some(3.0)));
    let drops = by(&v, StatusFigure::PcapDrops);
    assert_eq!((drops.claimed, drops.measured), (7.0, None));
    let rate = by(&v, StatusFigure::Rate);
    assert_eq!(rate.claimed, 100.0);
    assert!(rate.measured.is_some());
    assert!(
        v.notes.iter().any(|n| n.contains("line 4: not a CSV record")),
        "{:?}",
        v.notes
    );

    // Written before the last send: not comparable.
    let v = build(true, 4_000);
    let sent = by(&v, StatusFigure::Sent);
    assert_eq!(sent.measured, None, "{sent:?}");
    assert!(
        sent.what
            .contains("before the last send at 5.0 s: not comparable"),
        "{sent:?}"
    );
    // Attached: the scanner counted from its start, scanprof from attach.
    let v = build(false, 6_000);
    let sent = by(&v, StatusFigure::Sent);
    assert_eq!(sent.measured, None);
    assert!(sent.what.contains("not from attach"), "{sent:?}");
}

#[test]
fn what_the_rate_counts_comes_from_the_work_unit_or_the_command_line() {
    // A unicornscan work unit with repeats 3: its pps counts packets, each port gets 3.
    let mut m = model(None, 1000.0);
    m.ingest(&[call(
        "master_send_message",
        "ipc_send",
        10,
        5,
        true,
        &[("type", 4.0), ("len", 700.0), ("pps", 1000.0), ("repeats", 3.0)],
    )]);
    let u = m.view(&[], &[], &[]).requested.unit.expect("a rate unit");
    assert_eq!(u.counts, RateCounts::Packets);
    assert_eq!((u.packets_per_target, u.packet_pps), (3.0, 1000.0));
    assert!((u.target_pps - 1000.0 / 3.0).abs() < 1e-9);
    assert_eq!(u.source, "work unit 1: repeats=3");
    // repeats 1 (every port once): nothing to say.
    let mut m = model(None, 1000.0);
    m.ingest(&[call(
        "master_send_message",
        "ipc_send",
        10,
        5,
        true,
        &[("type", 4.0), ("len", 700.0), ("pps", 1000.0), ("repeats", 1.0)],
    )]);
    assert_eq!(m.view(&[], &[], &[]).requested.unit, None);
    // zmap -r 100 -P 4: the command line's 400 pps count targets, 4 packets each.
    let mut rate = argv(400.0);
    rate.per_target = Some((4.0, "-P 4".into()));
    let m = ScannerModel::new("zmap", BTreeMap::new(), None, rate, None, START);
    let u = m.view(&[], &[], &[]).requested.unit.expect("a rate unit");
    assert_eq!(
        (u.counts, u.packets_per_target, u.target_pps),
        (RateCounts::Targets, 4.0, 100.0)
    );
    assert_eq!(u.source, "argv: -P 4");
}

/// A listener's messages counted only by its send syscalls read "unix socket x10", and a
/// process whose messages a probe decoded got that row beside its decoded ones (issue 28
/// item 11): the syscall row is for processes no probe decoded, and says it is undecoded.
#[test]
fn ipc_counted_by_syscalls_is_only_for_processes_no_probe_decoded_and_says_so() {
    let mut m = model(None, 1000.0);
    unit(&mut m, 10, 1000.0, 1000, 1000, 1e6, 1000.0, 0);
    let procs = [
        process(10, "unicornscan", "master"),
        process(20, "unisend", "sender"),
        process(30, "unilisten", "listener"),
    ];
    let thread = |pid: u32, calls: u64| ThreadCounters {
        pid,
        tid: pid,
        ipc_calls: calls,
        ipc_bytes: calls * 14,
        ..Default::default()
    };
    let threads = [thread(10, 2), thread(20, 1), thread(30, 10)];
    let v = m.view(&[], &procs, &threads);
    let rows: Vec<(&str, &str, u64)> = v
        .ipc
        .iter()
        .map(|i| (i.comm.as_str(), i.kind.as_str(), i.messages))
        .collect();
    assert_eq!(
        rows,
        [
            ("unicornscan", "WORKUNIT", 1),
            ("unisend", "WORKDONE", 1),
            ("unilisten", UNDECODED_IPC, 10)
        ]
    );
}

/// Attached while the sender worked on a unit: its WORKDONE was counted (a claim) but the unit
/// was missing from the work-unit table (issue 28 item 11). It is unit 1, handed over before
/// attach, its end and the sender's own figures known, its hand-over and packets not.
#[test]
fn the_unit_in_progress_at_attach_is_in_the_table() {
    let mut m = model(None, 1000.0);
    let mut done = call(
        "sender_send_message",
        "ipc_send",
        20,
        500,
        true,
        &[("type", 5.0), ("reported_pps", 990.0), ("packets_sent", 4000.0)],
    );
    done.packets = 480;
    m.ingest(&[done]);
    let procs = [
        process(10, "unicornscan", "master"),
        process(20, "unisend", "sender"),
    ];
    let v = m.view(&[], &procs, &[]);
    assert_eq!(v.work_units.len(), 1, "{:#?}", v.work_units);
    let u = &v.work_units[0];
    assert_eq!(
        (u.index, u.sender_pid, u.before_attach, u.handed_s, u.done_s),
        (1, Some(20), true, None, Some(0.5))
    );
    assert_eq!((u.claimed_pps, u.claimed_packets), (Some(990.0), Some(4000)));
    assert_eq!(u.packets, None, "its packets before attach are not known");
    // A unit handed over after attach follows it as unit 2.
    unit(&mut m, 600, 1000.0, 1000, 1000, 1e6, 1000.0, 0);
    let v = m.view(&[], &procs, &[]);
    let idx: Vec<(u32, bool)> = v.work_units.iter().map(|u| (u.index, u.before_attach)).collect();
    assert_eq!(idx, [(1, true), (2, false)]);
}

#[test]
fn each_work_units_claims_carry_that_units_send_window() {
    // Two units of 1000 packets, each calibrated 101 ms after its hand-over and done 1 s later:
    // their reports speak of their own send windows, not of the family's (0.111-2.311 s).
    let mut m = model(None, 1000.0);
    unit(&mut m, 10, 1000.0, 1000, 1000, 1e6, 1000.0, 0);
    unit(&mut m, 1210, 1000.0, 1000, 1000, 1e6, 1000.0, 1000);
    let procs = [
        process(10, "unicornscan", "master"),
        process(20, "unisend", "sender"),
    ];
    let v = m.view(&[], &procs, &[]);
    assert_eq!(v.claims.len(), 4, "{:?}", v.claims);
    for c in &v.claims {
        let unit = if c.what.ends_with("work unit 1") { 1 } else { 2 };
        let (from_s, to_s) = if unit == 1 { (0.111, 1.111) } else { (1.311, 2.311) };
        let w = c.window.unwrap_or_else(|| panic!("no window: {c:?}"));
        assert_eq!(w.unit, Some(unit), "{c:?}");
        assert!(
            (w.from_s - from_s).abs() < 1e-9 && (w.to_s - to_s).abs() < 1e-9,
            "{c:?}"
        );
        assert!(c.diff_pct.unwrap().abs() < 1e-9, "{c:?}");
    }
    assert_eq!(
        v.claims[0].window.unwrap().label(),
        "work unit 1's send window (0.11-1.11 s)"
    );
}
