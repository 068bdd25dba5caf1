//! Unit tests of the profile schema, the built-in profiles, recognition and rate extraction.

use super::*;

fn set() -> ProfileSet {
    ProfileSet::builtin().expect("built-in profiles parse")
}

fn rate(profile: &str, args: &str, config: Option<&str>) -> RequestedRate {
    let set = set();
    let p = set.get(profile).expect("profile exists");
    let argv: Vec<String> = args.split_whitespace().map(String::from).collect();
    requested_rate(p, &argv, config)
}

fn close(a: Option<f64>, b: f64) -> bool {
    a.is_some_and(|a| (a - b).abs() < 1e-9 * b.abs().max(1.0))
}

/// Checks pps and kind; prints the whole result on failure.
fn check(r: &RequestedRate, pps: Option<f64>, kind: RateKind) {
    let ok = match pps {
        Some(p) => close(r.pps, p),
        None => r.pps.is_none(),
    };
    assert!(ok && r.kind == kind, "expected {pps:?} {kind:?}, got {r:#?}");
}

const MINIMAL: &str = r#"
schema = 1
name = "t"
description = "test"
[[process]]
role = "sender"
exe = ["t"]
[rate]
kind = "options"
"#;

// ---- schema -------------------------------------------------------------------------------

#[test]
fn every_builtin_profile_parses() {
    let set = set();
    let names: Vec<&str> = set.profiles().iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "hping3",
            "iperf3",
            "masscan",
            "naabu",
            "nmap",
            "rustscan",
            "scanprof-send",
            "tcpreplay",
            "unicornscan",
            "zmap",
            "generic"
        ]
    );
    assert!(set.profiles().last().is_some_and(|p| p.fallback));
    // The scanners that wait for late replies after their last probe say how, by name.
    let wait = |name: &str| {
        set.profiles()
            .iter()
            .find(|p| p.name == name)
            .and_then(|p| p.wait.clone())
    };
    assert_eq!(
        wait("masscan").as_deref(),
        Some("masscan's --wait for late replies (10 s by default)")
    );
    assert!(wait("zmap").is_some_and(|w| w.contains("cooldown")));
    // The senders that expect no answers say so; every scanner (and an unknown tool) reads them.
    let no_replies: Vec<&str> = set
        .profiles()
        .iter()
        .filter(|p| !p.reads_replies)
        .map(|p| p.name.as_str())
        .collect();
    assert_eq!(no_replies, ["iperf3", "scanprof-send", "tcpreplay"]);
    assert!(wait("unicornscan").is_some_and(|w| w.contains("-L")));
    assert_eq!(wait("generic"), None);
}

#[test]
fn minimal_profile_parses() {
    let p = ScannerProfile::parse(MINIMAL).expect("parses");
    assert_eq!(p.name, "t");
    assert_eq!(p.rate.default_kind, RateKind::Unknown);
    assert!(p.probes.is_empty());
}

#[test]
fn unknown_top_level_key_is_rejected_by_name_and_line() {
    let text = format!("{MINIMAL}\n");
    let text = text.replace(
        "description = \"test\"",
        "description = \"test\"\ncolour = \"red\"",
    );
    let e = ScannerProfile::parse(&text).unwrap_err().to_string();
    assert!(e.contains("colour") && e.contains("line 5"), "{e}");
}

#[test]
fn unknown_nested_key_is_rejected_by_name() {
    let text = format!("{MINIMAL}\n[[rate.option]]\nflags = [\"-r\"]\nmultiplyer = 2\n");
    let e = ScannerProfile::parse(&text).unwrap_err().to_string();
    assert!(e.contains("multiplyer"), "{e}");
    let text = format!(
        "{MINIMAL}\n[[probe]]\nname=\"a\"\nbinary=\"sender\"\nsymbol=\"f\"\nrole=\"send\"\nperpacket=true\n"
    );
    let e = ScannerProfile::parse(&text).unwrap_err().to_string();
    assert!(e.contains("perpacket"), "{e}");
}

#[test]
fn wrong_or_missing_schema_is_rejected_naming_schema() {
    let e = ScannerProfile::parse(&MINIMAL.replace("schema = 1", "schema = 2")).unwrap_err();
    assert!(matches!(e, ProfileError::Schema { line: 2, .. }), "{e:?}");
    let msg = e.to_string();
    assert!(
        msg.contains("'schema'") && msg.contains("2 is not supported"),
        "{msg}"
    );
    let e = ScannerProfile::parse(&MINIMAL.replace("schema = 1", ""))
        .unwrap_err()
        .to_string();
    assert!(e.contains("'schema'") && e.contains("missing"), "{e}");
    // A new schema with new keys fails on the version, not on the unknown key.
    let text = MINIMAL.replace("schema = 1", "schema = 2\nnew_key = 1");
    assert!(matches!(
        ScannerProfile::parse(&text),
        Err(ProfileError::Schema { .. })
    ));
}

#[test]
fn bad_values_and_references_are_rejected() {
    let e = ScannerProfile::parse(&MINIMAL.replace("kind = \"options\"", "kind = \"magic\"")).unwrap_err();
    assert!(e.to_string().contains("magic"), "{e}");
    let probe = |extra: &str| {
        format!("{MINIMAL}\n[[probe]]\nname=\"a\"\nbinary=\"sender\"\nsymbol=\"f\"\nrole=\"send\"\n{extra}")
    };
    let e =
        ScannerProfile::parse(&probe("").replace("binary=\"sender\"", "binary=\"listener\"")).unwrap_err();
    assert!(e.to_string().contains("probe[0].binary"), "{e}");
    let e = ScannerProfile::parse(&probe("args = [{ name = \"x\", reg = 7, type = \"u32\" }]")).unwrap_err();
    assert!(e.to_string().contains("probe[0].args[0].reg"), "{e}");
    let buf = "[probe.buffer]\nptr_arg = 0\nmax_bytes = 8\n[[probe.buffer.field]]\nname=\"v\"\noffset=6\ntype=\"u32\"\n";
    let e = ScannerProfile::parse(&probe(buf)).unwrap_err();
    assert!(e.to_string().contains("probe[0].buffer.field[0].offset"), "{e}");
    let cond = buf.replace(
        "offset=6",
        "offset=0\ncondition = { field = \"nope\", equals = 4 }",
    );
    let e = ScannerProfile::parse(&probe(&cond)).unwrap_err();
    assert!(e.to_string().contains("condition.field"), "{e}");
    let both = buf.replace(
        "offset=6",
        "offset=0\ncondition = { field = \"x\", equals = 4, one_of = [4] }",
    );
    let args = "args = [{ name = \"x\", reg = 1, type = \"u32\" }]\n";
    let e = ScannerProfile::parse(&probe(&format!("{args}{both}"))).unwrap_err();
    assert!(e.to_string().contains("field[0].condition"), "{e}");
    let to = "[[probe.recipient]]\nrole = \"nobody\"\nwhen = { field = \"x\", one_of = [1, 2] }\n";
    let e = ScannerProfile::parse(&probe(&format!("{args}{to}"))).unwrap_err();
    assert!(e.to_string().contains("probe[0].recipient[0].role"), "{e}");
    let to = to.replace("nobody", "sender").replace("\"x\"", "\"y\"");
    let e = ScannerProfile::parse(&probe(&format!("{args}{to}"))).unwrap_err();
    assert!(e.to_string().contains("probe[0].recipient[0].when.field"), "{e}");
    let e = ScannerProfile::parse(&format!(
        "{MINIMAL}\n[[rate.option]]\nflags=[\"--fast\"]\ntakes=\"none\"\n"
    ))
    .unwrap_err();
    assert!(e.to_string().contains("rate.option[0].value"), "{e}");
}

#[test]
fn unicornscan_probes_decode_the_work_unit() {
    let set = set();
    let p = set.get("unicornscan").expect("unicornscan");
    let names: Vec<&str> = p.probes.iter().map(|p| p.name.as_str()).collect();
    for n in [
        "init_tslot",
        "tsc_init_tslot",
        "gtod_init_tslot",
        "sleep_init_tslot",
        "start_tslot",
        "end_tslot",
    ] {
        assert!(names.contains(&n), "{n} missing");
    }
    let init = p
        .probes
        .iter()
        .find(|p| p.name == "init_tslot")
        .expect("init_tslot");
    assert_eq!(init.role, ProbeRole::RateSetup);
    assert_eq!(
        (init.args[0].reg, init.args[0].ty, init.args[1].ty),
        (0, ArgType::U32, ArgType::U8)
    );
    let send = p
        .probes
        .iter()
        .find(|p| p.name == "master_send_message")
        .expect("send_message");
    let buf = send.buffer.as_ref().expect("buffer");
    assert_eq!((buf.ptr_arg, buf.len_arg), (3, Some(4)));
    let pps = buf.fields.iter().find(|f| f.name == "pps").expect("pps field");
    assert_eq!((pps.offset, pps.ty), (10, ArgType::U32));
    assert_eq!(
        pps.condition,
        Some(FieldCondition {
            field: "wu_magic".into(),
            equals: None,
            one_of: vec![0x1a1b1c1d, 0x2a2b2c2d, 0x3a3b3c3d, 0x4a4b4c4d, 0x5a5b5c5d, 0x8a8b8c8d],
        })
    );
    let dt = buf
        .fields
        .iter()
        .find(|f| f.name == "delay_type")
        .expect("delay_type");
    assert_eq!((dt.offset, dt.ty), (14, ArgType::U8));
    let done = p
        .probes
        .iter()
        .find(|p| p.name == "sender_send_message")
        .expect("sender send_message");
    let f = &done.buffer.as_ref().expect("buffer").fields[0];
    assert_eq!(
        (f.ty, f.condition.as_ref().and_then(|c| c.equals)),
        (ArgType::F32, Some(5))
    );
    // Per-packet probes are marked, the rest are not.
    for probe in &p.probes {
        let per_packet = ["start_tslot", "end_tslot", "ip_send"].contains(&probe.name.as_str());
        assert_eq!(probe.per_packet, per_packet, "{}", probe.name);
    }
}

#[test]
fn scanners_without_symbols_have_no_probes() {
    let set = set();
    for name in ["hping3", "generic"] {
        assert!(set.get(name).is_some_and(|p| p.probes.is_empty()), "{name}");
    }
    // masscan exports nothing: its one probe is libpcap's send, per packet.
    let m = set.get("masscan").expect("masscan");
    let probes: Vec<(&str, Option<&str>, bool)> = m
        .probes
        .iter()
        .map(|p| (p.symbol.as_str(), p.library.as_deref(), p.per_packet))
        .collect();
    assert_eq!(probes, [("pcap_sendpacket", Some("libpcap.so.0.8"), true)]);
    let sp = set.get("scanprof-send").expect("scanprof-send");
    let syms: Vec<(&str, bool)> = sp
        .probes
        .iter()
        .map(|p| (p.symbol.as_str(), p.per_packet))
        .collect();
    assert_eq!(
        syms,
        [
            ("scanprof_sender_init_slot", false),
            ("scanprof_sender_calibrate", false),
            ("scanprof_sender_wait_slot", true),
            ("scanprof_sender_send", true),
            ("scanprof_sender_tsc_slot", false)
        ]
    );
}

// ---- recognition ----------------------------------------------------------------------------

#[test]
fn recognises_scanners_and_roles() {
    let set = set();
    let cases = [
        ("/usr/bin/unicornscan", "unicornscan", "unicornscan", "master"),
        ("/usr/bin/unicornscan", "us", "unicornscan", "master"),
        ("", "us", "unicornscan", "master"),
        (
            "/usr/libexec/unicornscan/unisend",
            "unisend",
            "unicornscan",
            "sender",
        ),
        (
            "/usr/lib/unicornscan/unilisten",
            "unilisten",
            "unicornscan",
            "listener",
        ),
        ("/usr/bin/masscan", "masscan", "masscan", "scanner"),
        ("/usr/sbin/zmap", "zmap", "zmap", "scanner"),
        ("/usr/bin/nmap", "nmap", "nmap", "scanner"),
        ("/usr/sbin/hping3", "hping3", "hping3", "scanner"),
        // scanprof-send names the `send` subcommand: without the arguments a scanprof process
        // (`scanprof recv`, a listener, say) is nobody's in particular.
        (
            "/work/main/target/debug/scanprof",
            "scanprof",
            "generic",
            "sender",
        ),
        ("/usr/bin/python3", "python3", "generic", "sender"),
        ("", "", "generic", "sender"),
    ];
    for (exe, comm, name, role) in cases {
        let (p, r) = set.recognise(exe, comm).expect("something matches");
        assert_eq!((p.name.as_str(), r), (name, role), "exe {exe:?} comm {comm:?}");
    }
}

#[test]
fn comm_is_compared_on_the_kernels_truncation() {
    let long = r#"
schema = 1
name = "long"
description = "x"
[[process]]
role = "sender"
comm = ["averyveryverylongname"]
[rate]
kind = "options"
"#;
    let set = ProfileSet::new(vec![ScannerProfile::parse(long).expect("parses")]).expect("set");
    assert!(set.recognise("", "averyveryverylo").is_some());
    assert!(
        set.recognise("", "averyvery").is_none(),
        "no fallback in this set"
    );
}

#[test]
fn duplicate_names_are_refused() {
    let p = ScannerProfile::parse(MINIMAL).expect("parses");
    assert!(ProfileSet::new(vec![p.clone(), p]).is_err());
}

// ---- rates: unicornscan ---------------------------------------------------------------------

const UNICORN_CONF: &str = "global {\n\tpps:\t\t300;\n\tdelaytype:\ttsc;\n};\n";

#[test]
fn unicornscan_rates() {
    // Default 250 when nothing is given.
    let r = rate("unicornscan", "unicornscan 10.0.0.1:80", None);
    check(&r, Some(250.0), RateKind::Exact);
    assert!(r.provenance[0].starts_with("default: 250"), "{:?}", r.provenance);
    assert_eq!(r.origin, RateOrigin::Default, "nobody asked for 250: a default");
    assert_eq!(r.work_units.len(), 1);
    // A phase's own rate is given, whatever the global rate's origin.
    assert_eq!(
        rate("unicornscan", "unicornscan -mT500 10.0.0.1:80", None).origin,
        RateOrigin::Given
    );
    // Config file's pps: 300 without -r.
    let r = rate("unicornscan", "unicornscan 10.0.0.1:80", Some(UNICORN_CONF));
    check(&r, Some(300.0), RateKind::Exact);
    assert_eq!(r.origin, RateOrigin::Given);
    assert_eq!(r.provenance[0], "config: pps:\t\t300;");
    // Command line wins over config, and the conflict is reported.
    for args in [
        "us -r 1000 10.0.0.1",
        "us -r1000 10.0.0.1",
        "us --pps=1000 10.0.0.1",
        "us --pps 1000 x",
    ] {
        let r = rate("unicornscan", args, Some(UNICORN_CONF));
        check(&r, Some(1000.0), RateKind::Exact);
        assert!(
            r.conflicts.iter().any(|c| c.contains("overrides config")),
            "{args}: {:?}",
            r.conflicts
        );
    }
    // The same without a config: no conflict.
    assert!(rate("unicornscan", "us -r 1000 h", None).conflicts.is_empty());
}

#[test]
fn unicornscan_mode_strings() {
    // A rate inside the mode string wins over -r.
    let r = rate("unicornscan", "us -r 1000 -mT500 10.0.0.0/24:80", None);
    check(&r, Some(500.0), RateKind::Exact);
    assert_eq!(r.work_units[0].source, "mT500");
    // Compound mode: two work units with their own rates; no single figure.
    let r = rate("unicornscan", "us -mA100+T500 10.0.0.0/24", None);
    check(&r, None, RateKind::Exact);
    let units: Vec<(&str, f64)> = r.work_units.iter().map(|u| (u.mode.as_str(), u.pps)).collect();
    assert_eq!(units, [("A", 100.0), ("T", 500.0)]);
    // A phase without a rate uses the global rate.
    let r = rate("unicornscan", "us -r 700 -m A100+U x", None);
    let units: Vec<(&str, f64)> = r.work_units.iter().map(|u| (u.mode.as_str(), u.pps)).collect();
    assert_eq!(units, [("A", 100.0), ("U", 700.0)]);
    // Per-target mode beside a target without one.
    let r = rate("unicornscan", "us -r 1000 10.0.0.1:mT500,80 10.0.0.2:443", None);
    let units: Vec<(&str, &str, f64)> = r
        .work_units
        .iter()
        .map(|u| (u.target.as_str(), u.mode.as_str(), u.pps))
        .collect();
    assert_eq!(units, [("all targets", "T", 1000.0), ("10.0.0.1", "T", 500.0)]);
    assert!(r.pps.is_none());
    // The value of another option (`-i eth0`) is not taken for a target without a mode.
    let r = rate("unicornscan", "us -i eth0 10.0.0.1:mT500,80", None);
    check(&r, Some(500.0), RateKind::Exact);
    assert_eq!(r.work_units.len(), 1);
    // Only targets with their own mode, all at one rate: a single figure again.
    let r = rate("unicornscan", "us 10.0.0.1:mU200,53", None);
    check(&r, Some(200.0), RateKind::Exact);
    // An unreadable mode string is a conflict, not a guess.
    let r = rate("unicornscan", "us -mT5x0 h", None);
    assert!(
        r.conflicts.iter().any(|c| c.contains("T5x0")),
        "{:?}",
        r.conflicts
    );
}

// ---- rates: masscan -------------------------------------------------------------------------

#[test]
fn masscan_rates() {
    let r = rate("masscan", "masscan 10.0.0.0/8 -p80", None);
    check(&r, Some(100.0), RateKind::Exact);
    check(
        &rate("masscan", "masscan -p80 --rate 10000 10.0.0.0/8", None),
        Some(10000.0),
        RateKind::Exact,
    );
    check(
        &rate("masscan", "masscan --rate=2500.5 10.0.0.0/8", None),
        Some(2500.5),
        RateKind::Exact,
    );
    check(
        &rate("masscan", "masscan --max-rate 5000 10.0.0.0/8", None),
        Some(5000.0),
        RateKind::Exact,
    );
    // --rate and --max-rate are one setting: the last wins, and that is reported.
    let r = rate("masscan", "masscan --rate 100 --max-rate 200 x", None);
    check(&r, Some(200.0), RateKind::Exact);
    assert_eq!(r.conflicts, ["argv: --max-rate 200 overrides --rate 100"]);
    // Config `rate = N`, and argv over config.
    check(
        &rate("masscan", "masscan x", Some("rate = 300000.00\n")),
        Some(300000.0),
        RateKind::Exact,
    );
    let r = rate("masscan", "masscan --rate 7 x", Some("# c\nrate = 3\n"));
    check(&r, Some(7.0), RateKind::Exact);
    assert_eq!(r.conflicts.len(), 1);
    // The RST budget is stated in the provenance.
    assert!(r.provenance.iter().any(|p| p.contains("RST")));
}

// ---- rates: zmap ----------------------------------------------------------------------------

#[test]
fn zmap_rates() {
    // Default: 10000 targets/s x 1 probe.
    check(
        &rate("zmap", "zmap -p 80 10.0.0.0/8", None),
        Some(10000.0),
        RateKind::Exact,
    );
    // -r counts targets: x -P probes.
    check(
        &rate("zmap", "zmap -r 1000 -P 3 -p 80", None),
        Some(3000.0),
        RateKind::Exact,
    );
    check(
        &rate("zmap", "zmap --rate=1000 --probes=2", None),
        Some(2000.0),
        RateKind::Exact,
    );
    check(&rate("zmap", "zmap -r1000", None), Some(1000.0), RateKind::Exact);
    // -B: bits per second / 672 bits per packet (84 bytes), whole packets.
    // 10 Mbit/s / 672 = 14880.95 -> 14880 targets/s.
    let r = rate("zmap", "zmap -B 10M -p 80", None);
    check(&r, Some(14880.0), RateKind::Exact);
    assert!(
        r.provenance.iter().any(|p| p.contains("84 bytes")),
        "{:?}",
        r.provenance
    );
    // 1 Gbit/s x 2 probes: 1488095 x 2.
    check(
        &rate("zmap", "zmap --bandwidth=1G -P 2", None),
        Some(2976190.0),
        RateKind::Exact,
    );
    check(
        &rate("zmap", "zmap -B 100000", None),
        Some(148.0),
        RateKind::Exact,
    );
    // -r 0: unlimited.
    check(&rate("zmap", "zmap -r 0 -p 80", None), None, RateKind::Unlimited);
    // -r with -B: zmap refuses to start.
    let r = rate("zmap", "zmap -r 10 -B 1M", None);
    assert!(
        r.conflicts.iter().any(|c| c.contains("refuses")),
        "{:?}",
        r.conflicts
    );
}

// ---- rates: nmap ----------------------------------------------------------------------------

#[test]
fn nmap_rates() {
    let r = rate("nmap", "nmap -sS 10.0.0.1", None);
    check(&r, None, RateKind::Unknown);
    assert!(r.provenance[0].contains("congestion"), "{:?}", r.provenance);
    check(
        &rate("nmap", "nmap --max-rate 1000 x", None),
        Some(1000.0),
        RateKind::Cap,
    );
    check(
        &rate("nmap", "nmap --min-rate=50 x", None),
        Some(50.0),
        RateKind::Floor,
    );
    let r = rate("nmap", "nmap --min-rate 100 --max-rate 500 x", None);
    check(&r, Some(500.0), RateKind::Cap);
    assert_eq!(r.floor_pps, Some(100.0));
    assert!(r.conflicts.is_empty());
    // getopt_long_only spelling, and a floor above the cap.
    let r = rate("nmap", "nmap -max-rate 100 --min-rate 500 x", None);
    check(&r, Some(100.0), RateKind::Cap);
    assert!(
        r.conflicts
            .iter()
            .any(|c| c.contains("floor 500 pps above cap 100")),
        "{:?}",
        r.conflicts
    );
}

// ---- rates: test tools that are not scanners ----------------------------------------------

/// tcpreplay's `--pps` was read by the generic profile and marked "guessed"; iperf3's `-b` was
/// not read at all (issue 28 item 11). Each has its profile, which reads them as theirs.
#[test]
fn tcpreplay_and_iperf3_rates_are_read_by_their_own_profiles() {
    let r = rate("tcpreplay", "tcpreplay -i veth0 --pps 5000 f.pcap", None);
    check(&r, Some(5000.0), RateKind::Exact);
    let said = format!("{r:?}");
    assert!(!said.contains("guessed"), "{said}");
    assert!(said.contains("tcpreplay --pps"), "{said}");
    check(
        &rate("tcpreplay", "tcpreplay -i veth0 -p 200 f.pcap", None),
        Some(200.0),
        RateKind::Exact,
    );
    check(
        &rate("tcpreplay", "tcpreplay -i veth0 --topspeed f.pcap", None),
        None,
        RateKind::Unlimited,
    );
    check(
        &rate("tcpreplay", "tcpreplay -i veth0 f.pcap", None),
        None,
        RateKind::Unknown,
    );
    // 100 Mbit/s of 1460-byte datagrams: 8561 whole packets per second.
    check(
        &rate("iperf3", "iperf3 -c 10.0.0.2 -u -b 100M", None),
        Some(8561.0),
        RateKind::Exact,
    );
    check(
        &rate("iperf3", "iperf3 -c 10.0.0.2 -u --bitrate=10M", None),
        Some(856.0),
        RateKind::Exact,
    );
    check(
        &rate("iperf3", "iperf3 -c 10.0.0.2 -u -b 0", None),
        None,
        RateKind::Unlimited,
    );
    // No -b: 1 Mbit/s for UDP, unlimited for TCP: not a rate to judge a run by.
    check(
        &rate("iperf3", "iperf3 -c 10.0.0.2 -u", None),
        None,
        RateKind::Unknown,
    );
    // The processes are theirs, not the generic profile's.
    let set = set();
    for (exe, comm, want) in [
        ("/usr/bin/tcpreplay", "tcpreplay", "tcpreplay"),
        ("/usr/bin/iperf3", "iperf3", "iperf3"),
    ] {
        let got = set.recognise(exe, comm).map(|(p, _)| p.name.clone());
        assert_eq!(got.as_deref(), Some(want));
    }
}

// ---- rates: hping3 --------------------------------------------------------------------------

#[test]
fn hping3_rates() {
    check(
        &rate("hping3", "hping3 -S -p 80 h", None),
        Some(1.0),
        RateKind::Exact,
    );
    check(
        &rate("hping3", "hping3 -S -i u100 h", None),
        Some(10000.0),
        RateKind::Exact,
    );
    check(
        &rate("hping3", "hping3 -S -iu250 h", None),
        Some(4000.0),
        RateKind::Exact,
    );
    check(
        &rate("hping3", "hping3 -S --interval=u1000 h", None),
        Some(1000.0),
        RateKind::Exact,
    );
    check(
        &rate("hping3", "hping3 -S -i 2 h", None),
        Some(0.5),
        RateKind::Exact,
    );
    check(
        &rate("hping3", "hping3 --fast h", None),
        Some(10.0),
        RateKind::Exact,
    );
    check(
        &rate("hping3", "hping3 --faster h", None),
        Some(1_000_000.0),
        RateKind::Exact,
    );
    check(
        &rate("hping3", "hping3 --flood h", None),
        None,
        RateKind::Unlimited,
    );
    check(&rate("hping3", "hping3 -i u0 h", None), None, RateKind::Unlimited);
    // --flood wins whatever the order; the last of -i / --fast wins otherwise.
    let r = rate("hping3", "hping3 --flood -i u100 h", None);
    check(&r, None, RateKind::Unlimited);
    assert_eq!(r.conflicts, ["argv: --flood overrides -i u100"]);
    check(
        &rate("hping3", "hping3 --fast -i u500 h", None),
        Some(2000.0),
        RateKind::Exact,
    );
    let r = rate("hping3", "hping3 -i", None);
    assert!(r.conflicts[0].contains("without a value"), "{:?}", r.conflicts);
}

// ---- rates: scanprof send and generic -------------------------------------------------------

#[test]
fn scanprof_send_and_generic_rates() {
    check(
        &rate("scanprof-send", "scanprof send --count 10 127.0.0.1", None),
        Some(1000.0),
        RateKind::Exact,
    );
    check(
        &rate("scanprof-send", "scanprof send --rate 5000", None),
        Some(5000.0),
        RateKind::Exact,
    );
    check(
        &rate("scanprof-send", "scanprof send --rate=250", None),
        Some(250.0),
        RateKind::Exact,
    );
    check(
        &rate("scanprof-send", "scanprof send --rate 0", None),
        None,
        RateKind::Unlimited,
    );
    check(
        &rate("generic", "mysender --pps 42", None),
        Some(42.0),
        RateKind::Exact,
    );
    let r = rate("generic", "mysender -x", None);
    check(&r, None, RateKind::Unknown);
    assert!(r.provenance[0].contains("--requested"));
    let r = rate("generic", "mysender --rate fast", None);
    assert_eq!(r.conflicts, ["argv: --rate fast: not a rate, ignored"]);
}

#[test]
fn role_and_kind_names_are_what_profiles_write() {
    #[derive(serde::Deserialize)]
    struct R {
        role: ProbeRole,
        kind: RateKind,
    }
    for (role, kind) in [
        (ProbeRole::RateSetup, RateKind::Exact),
        (ProbeRole::Calibration, RateKind::Cap),
        (ProbeRole::WorkUnit, RateKind::Floor),
        (ProbeRole::IpcSend, RateKind::Unlimited),
        (ProbeRole::IpcRecv, RateKind::Unknown),
        (ProbeRole::Send, RateKind::Exact),
        (ProbeRole::PaceWait, RateKind::Exact),
        (ProbeRole::SlotStart, RateKind::Exact),
        (ProbeRole::Build, RateKind::Exact),
        (ProbeRole::MainLoop, RateKind::Exact),
        (ProbeRole::RateMeter, RateKind::Exact),
        (ProbeRole::Receive, RateKind::Exact),
    ] {
        let text = format!("role = \"{}\"\nkind = \"{}\"", role.as_str(), kind.as_str());
        let r: R = toml::from_str(&text).unwrap();
        assert_eq!((r.role, r.kind), (role, kind), "{text}");
    }
}

#[test]
fn finds_the_scanner_behind_wrappers_in_a_command_line() {
    let set = ProfileSet::builtin().unwrap();
    let argv = |s: &str| s.split_whitespace().map(String::from).collect::<Vec<_>>();
    let (p, i) = set
        .find_in_argv(&argv("ip netns exec sp1-1s /usr/bin/zmap -r 100 10.99.0.2"))
        .unwrap();
    assert_eq!((p.name.as_str(), i), ("zmap", 4));
    let (p, i) = set
        .find_in_argv(&argv("sudo unicornscan -r 1000 10.99.0.2:53"))
        .unwrap();
    assert_eq!((p.name.as_str(), i), ("unicornscan", 1));
    assert!(set
        .find_in_argv(&argv("ip netns exec ns mysender --pps 5"))
        .is_none());
    assert_eq!(set.fallback().unwrap().name, "generic");
    // A profile that names a subcommand matches that subcommand only: `scanprof recv` got the
    // reference sender's default rate of 1000 pps and a never_sent verdict before.
    let (p, i) = set
        .find_in_argv(&argv(
            "ip netns exec ns /work/target/debug/scanprof send --to 10.0.0.2:9",
        ))
        .unwrap();
    assert_eq!((p.name.as_str(), i), ("scanprof-send", 4));
    assert!(set.find_in_argv(&argv("scanprof recv --port 9000")).is_none());
    assert!(set.find_in_argv(&argv("scanprof")).is_none());
}

#[test]
fn unicornscan_profile_reads_the_calibrated_delay_and_names_message_types() {
    let set = ProfileSet::builtin().unwrap();
    let u = set.get("unicornscan").unwrap();
    let tsc = u.probes.iter().find(|p| p.name == "tsc_init_tslot").unwrap();
    assert_eq!(tsc.reads[0].symbol, "tsc_delay");
    assert_eq!(tsc.reads[0].unit, Some(crate::wrappers::DelayUnit::TscCycles));
    assert_eq!(u.message_types.get("4").map(String::as_str), Some("WORKUNIT"));
    let sender = u.processes.iter().find(|p| p.role == "sender").unwrap();
    assert!(sender.paths.iter().any(|p| p == "../libexec/unicornscan/unisend"));
}

#[test]
fn rejects_bad_read_units_and_message_type_keys() {
    let base = "schema = 1\nname = \"x\"\ndescription = \"x\"\n[[process]]\nrole = \"s\"\nexe = [\"x\"]\n[rate]\nkind = \"options\"\n";
    let bad_unit = format!(
        "{base}[[probe]]\nname = \"c\"\nbinary = \"s\"\nsymbol = \"c\"\nrole = \"calibration\"\n[[probe.read]]\nname = \"delay\"\nsymbol = \"d\"\ntype = \"u64\"\nunit = \"furlongs\"\n"
    );
    let e = ScannerProfile::parse(&bad_unit).unwrap_err().to_string();
    assert!(e.contains("furlongs"), "{e}");
    let bad_key = format!("{base}[message_types]\nfour = \"WORKUNIT\"\n");
    let e = ScannerProfile::parse(&bad_key).unwrap_err().to_string();
    assert!(e.contains("message type numbers"), "{e}");
}

#[test]
fn the_words_shown_for_a_command_skip_the_wrappers_that_only_place_it() {
    let set = ProfileSet::builtin().unwrap();
    let argv = |s: &str| s.split_whitespace().map(String::from).collect::<Vec<_>>();
    let words = |v: Vec<String>| v.join(" ");
    // The lab's wrapper chain, in front of a sender no profile knows.
    let mut lab = argv("ip netns exec sp7503-0s setsid sh -c LIFT scanprof-lab nice -n -20 taskset -c 1 mysender --rate 5000");
    lab[7] = "echo -20 > /proc/self/autogroup 2>/dev/null; exec \"$@\"".into();
    assert_eq!(words(skip_wrappers(&lab)), "mysender --rate 5000");
    assert_eq!(words(set.scanner_words(&lab)), "mysender --rate 5000");
    // A known scanner: its words from the one the profile recognises, as for the rate.
    assert_eq!(
        words(set.scanner_words(&argv("ip netns exec sp1-1s /usr/bin/zmap -r 100 10.99.0.2"))),
        "/usr/bin/zmap -r 100 10.99.0.2"
    );
    for (cmd, want) in [
        (
            "sudo -u scan nice -5 masscan -p80 10.0.0.0/8",
            "masscan -p80 10.0.0.0/8",
        ),
        ("env -i FOO=1 taskset 0x3 mysender -x", "mysender -x"),
        ("chrt -f 50 mysender", "mysender"),
        ("timeout -k 5 60 mysender --rate 9", "mysender --rate 9"),
        ("timeout 60s mysender", "mysender"),
        ("cgexec -g cpu,memory:scan mysender", "mysender"),
        (
            "systemd-run --scope -p CPUQuota=50% --unit scan mysender -x",
            "mysender -x",
        ),
        ("mysender --nice 5", "mysender --nice 5"),
        ("ip route", "ip route"),
    ] {
        assert_eq!(words(set.scanner_words(&argv(cmd))), want, "{cmd}");
    }
    // sh -c 'exec CMD': the command's words; any other script is shown whole.
    let sh = |script: &str| vec!["sh".to_string(), "-c".into(), script.into()];
    assert_eq!(
        words(skip_wrappers(&sh("exec mysender --rate 100"))),
        "mysender --rate 100"
    );
    assert_eq!(
        words(skip_wrappers(&sh("mysender | tee log"))),
        "sh -c mysender | tee log"
    );
    assert_eq!(
        skip_wrappers(&sh("exec mysender 'a b'")),
        sh("exec mysender 'a b'")
    );
    // A wrapper with nothing after it is left as it is.
    assert_eq!(words(skip_wrappers(&argv("nice -n 5"))), "nice -n 5");
    assert!(skip_wrappers(&[]).is_empty());
}

#[test]
fn a_rate_that_counts_targets_says_by_which_multiplier() {
    // zmap's -r counts targets: with -P 4 the packet rate is 4x, and the multiplier is named.
    let r = rate("zmap", "zmap -r 100 -P 4 -p 80", None);
    assert_eq!((r.pps, r.per_target), (Some(400.0), 4.0));
    assert_eq!(r.per_target_source.as_deref(), Some("-P 4"));
    // The default -P 1 multiplies too (by 1), and says so.
    let r = rate("zmap", "zmap -r 100 -p 80", None);
    assert_eq!(r.per_target_source.as_deref(), Some("-P 1 by default"));
    // -r 0 is unlimited: no packet rate to multiply.
    assert_eq!(rate("zmap", "zmap -r 0 -p 80", None).per_target_source, None);
    // masscan's --rate counts packets.
    assert_eq!(
        rate("masscan", "masscan --rate 1000 -p80 10.0.0.0/24", None).per_target_source,
        None
    );
    // unicornscan's work unit carries its repeats (rounds over the ports) beside its pps.
    let set = set();
    let send = set
        .get("unicornscan")
        .and_then(|p| p.probes.iter().find(|p| p.name == "master_send_message"))
        .expect("send_message");
    let repeats = send
        .buffer
        .as_ref()
        .and_then(|b| b.fields.iter().find(|f| f.name == "repeats"))
        .expect("repeats field");
    assert_eq!((repeats.offset, repeats.ty), (4, ArgType::U32));
}

#[test]
fn every_profile_file_in_wrappers_is_built_in() {
    // build.rs lists wrappers/ at build time; this reads it now, so a file the list missed (or a
    // hand-kept list drifting from the directory, as BUILTIN was) fails here.
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("wrappers");
    let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".toml"))
        .collect();
    on_disk.sort();
    let built_in: Vec<String> = BUILTIN.iter().map(|(f, _)| f.to_string()).collect();
    assert_eq!(built_in, on_disk);
    for (file, text) in BUILTIN {
        let path = dir.join(file);
        assert_eq!(*text, std::fs::read_to_string(&path).unwrap(), "{file}");
    }
    // Every file parses, under a unique name, and the set holds each one.
    let set = set();
    assert_eq!(set.profiles().len(), on_disk.len());
    assert_eq!(set.profiles().last().map(|p| p.name.as_str()), Some("generic"));
}

#[test]
fn no_two_built_in_profiles_claim_the_same_executable_or_comm() {
    // BUILTIN is in file-name order, not a chosen order: recognition must not depend on it.
    let set = set();
    let mut seen: Vec<(String, &str)> = Vec::new();
    for p in set.profiles().iter().filter(|p| !p.fallback) {
        for rule in &p.processes {
            let keys = rule.exe.iter().map(|e| format!("exe {e}"));
            let keys = keys.chain(rule.comm.iter().map(|c| format!("comm {c}")));
            for key in keys {
                let sub = rule.subcommand.join(",");
                let key = format!("{key} {sub}");
                if let Some((_, other)) = seen.iter().find(|(k, n)| *k == key && *n != p.name) {
                    panic!("{} and {other} both claim {key}", p.name);
                }
                seen.push((key, p.name.as_str()));
            }
        }
    }
}

// ---- RustScan and naabu ------------------------------------------------------------------

#[test]
fn rustscans_window_gives_a_floor_of_batch_over_timeout() {
    // Defaults: 4500 in flight, 1500 ms each: at least 3000 connects per second.
    let r = rate("rustscan", "rustscan -a 10.0.0.2", None);
    assert_eq!(
        (r.pps, r.kind, r.origin),
        (Some(3000.0), RateKind::Floor, RateOrigin::Default)
    );
    assert!(
        r.provenance[0].contains("default: -b 4500 in flight, default: -t 1500 ms"),
        "{:?}",
        r.provenance
    );
    // Each spelling, attached and `=` forms; the last one wins.
    for (args, want) in [
        ("rustscan -a 10.0.0.2 -b 500 -t 1000", 500.0),
        ("rustscan -a 10.0.0.2 --batch-size 50 --timeout 500", 100.0),
        ("rustscan -a 10.0.0.2 -b50 -t=250", 200.0),
        ("rustscan -a 10.0.0.2 --batch-size=10 -b 20 --timeout=2000", 10.0),
    ] {
        let r = rate("rustscan", args, None);
        assert_eq!(
            (r.pps, r.kind, r.origin),
            (Some(want), RateKind::Floor, RateOrigin::Given),
            "{args}"
        );
        assert!(r.conflicts.is_empty(), "{args}: {:?}", r.conflicts);
    }
    // An unreadable value is a conflict and the default stands.
    let r = rate("rustscan", "rustscan -b lots -t 1000", None);
    assert_eq!(r.pps, Some(4500.0));
    assert_eq!(r.conflicts, ["argv: -b lots: not a number above 0, ignored"]);
}

#[test]
fn naabus_rate_is_its_token_bucket_in_go_flag_spellings() {
    let r = rate("naabu", "naabu -host 10.0.0.2 -p 1-100", None);
    assert_eq!(
        (r.pps, r.kind, r.origin),
        (Some(1000.0), RateKind::Exact, RateOrigin::Default)
    );
    // Go's flag package takes -rate N, -rate=N, --rate N and --rate=N.
    for args in [
        "naabu -rate 250 -s s",
        "naabu -rate=250",
        "naabu --rate 250",
        "naabu --rate=250 -c 5",
    ] {
        let r = rate("naabu", args, None);
        assert_eq!(
            (r.pps, r.kind, r.origin),
            (Some(250.0), RateKind::Exact, RateOrigin::Given),
            "{args}"
        );
    }
    // -retries and -c are not rates; `-r` (naabu's resolvers) is no spelling of -rate.
    assert_eq!(
        rate("naabu", "naabu -r 1.1.1.1 -retries 1", None).pps,
        Some(1000.0)
    );
}

#[test]
fn rustscan_and_naabu_are_recognised_by_exe_and_comm() {
    let set = set();
    for (name, path) in [
        ("rustscan", "/opt/x/bin/rustscan"),
        ("naabu", "/root/go/bin/naabu"),
    ] {
        let (p, _) = set.recognise(path, "x").unwrap();
        assert_eq!(p.name, name);
        let (p, _) = set.recognise("/bin/sh", name).unwrap();
        assert_eq!(p.name, name);
    }
}

/// A delay unit is declared once: each parses from its name and converts to ns; an unknown
/// one is refused by the profile parser, naming the units.
#[test]
fn delay_units_are_named_and_converted_once() {
    use crate::wrappers::DelayUnit;
    for u in DelayUnit::ALL {
        assert_eq!(DelayUnit::try_from(u.as_str().to_string()), Ok(u));
        assert_eq!(serde_json::to_string(&u).ok(), Some(format!("\"{u}\"")));
    }
    assert_eq!(DelayUnit::TscCycles.to_ns(2_000.0, Some(2e9)), Some(1_000.0));
    assert_eq!(DelayUnit::TscCycles.to_ns(2_000.0, None), None);
    assert_eq!(DelayUnit::Ns.to_ns(5.0, None), Some(5.0));
    assert_eq!(DelayUnit::Us.to_ns(5.0, None), Some(5_000.0));
    assert_eq!(DelayUnit::S.to_ns(5.0, None), Some(5e9));
    assert_eq!(
        DelayUnit::try_from("ms".to_string()),
        Err("'ms': use tsc_cycles, ns, us or s".to_string())
    );
}

/// The fallback profile shipped is the one the diagnosis knows as no scanner.
#[test]
fn the_builtin_fallback_is_the_generic_profile() {
    let set = crate::wrappers::ProfileSet::builtin().unwrap();
    let fallback = set.fallback().expect("a fallback profile");
    assert_eq!(fallback.name, crate::wrappers::GENERIC_PROFILE);
    let view = crate::analysis::ScannerView {
        profile: fallback.name.clone(),
        ..Default::default()
    };
    assert!(view.is_generic());
}
