//! `scanprof sweep` against the truth of a lab: the reference sender swept across a tbf that is
//! narrower than the middle rates. Below the tbf's rate every step keeps its rate with nothing
//! lost; above it `qdisc_drop` appears, and the knee is found at the last rate below it. Each
//! step's figures are checked against `tc -s qdisc` and the lab receiver's count, read by the
//! test itself as each step's line arrives. Needs root; fails (never skips) without it.

use crate::common;

use std::time::Duration;

use common::*;
use nix::sys::signal::Signal;
use scanprof::netlab::TbfConfig;
use serde_json::Value;

/// UDP payload of the sender; on the wire (the bytes tbf counts) 14 + 20 + 8 more.
const SIZE: u64 = 512;
const WIRE: u64 = SIZE + 42;
/// The tbf's rate: 22 Mbit/s, ~4963 packets per second of WIRE bytes: between the 3rd and
/// 4th of the swept rates.
const TBF: &str = "22mbit";
const TBF_BITS: f64 = 22e6;
const RATES: [f64; 5] = [1000.0, 2000.0, 4000.0, 8000.0, 16000.0];
const STEP_S: f64 = 3.0;

fn tbf_pps() -> f64 {
    TBF_BITS / 8.0 / WIRE as f64
}

fn tbf() -> TbfConfig {
    TbfConfig {
        rate: TBF.into(),
        burst: "4kb".into(),
        limit: "10kb".into(),
    }
}

fn rates_arg(rates: &[f64]) -> String {
    rates.iter().map(|r| r.to_string()).collect::<Vec<_>>().join(",")
}

/// The report-precision checks of a `sweep_step` line (tests/common/precision.rs), its verdicts
/// printed.
fn assert_precise_step(step: &Value) {
    println!(
        "sweep step at {} pps: verdicts {:?}",
        step["requested_pps"],
        causes(step)
    );
    let found = precision::step_findings(step);
    assert!(
        found.is_empty(),
        "false lines in a sweep step: {:?}\n{step}",
        found
            .iter()
            .map(|f| format!("{}: {}", f.check, f.detail))
            .collect::<Vec<_>>()
    );
}

/// The verdict causes of a `sweep_step` line, ranked.
fn causes(step: &Value) -> Vec<String> {
    step["verdicts"]
        .as_array()
        .unwrap_or_else(|| panic!("no verdicts in {step}"))
        .iter()
        .map(|v| v["cause"].as_str().unwrap_or("").to_string())
        .collect()
}

/// The sweep of a command (the reference sender in a lab the test made), with the truth taken
/// per step by the test: every rate below the tbf kept (achieved within 2% of requested,
/// nothing lost, nothing dropped by tc, every packet at the receiver); every rate above it
/// losing exactly what tc dropped, named `qdisc_drop`; the knee at the last rate below the tbf
/// (or one step lower), and `qdisc_drop` named as what appeared above it.
#[test]
fn a_sweep_across_a_tbf_finds_the_knee_below_its_rate_and_names_qdisc_drop() {
    let test = privileged();
    let lab = TestLab::new(Some(tbf()));
    let sink = lab.sink(9100);
    let mut sender = vec![
        "ip".to_string(),
        "netns".into(),
        "exec".into(),
        lab.lab.sender_ns.clone(),
    ];
    // As `scanprof lab` runs its sender: a session (and so a scheduling group) of its own at
    // nice -20, so that builds and tests of other sessions on this shared machine do not take
    // its CPU (with autogroup, nice alone competes only inside the test's own group).
    sender.extend(
        [
            "setsid",
            "sh",
            "-c",
            "echo -20 > /proc/self/autogroup 2>/dev/null; exec \"$@\"",
            "sweep-sender",
            "nice",
            "-n",
            "-20",
        ]
        .map(String::from),
    );
    sender.extend(
        [
            scanprof_bin(),
            "send",
            "--to",
            &lab.to(9100),
            "--rate",
            "{}",
            "--duration",
            &STEP_S.to_string(),
            "--size",
            &SIZE.to_string(),
        ]
        .map(String::from),
    );
    let mut args: Vec<String> = [
        "sweep",
        "--rates",
        &rates_arg(&RATES),
        "--max-rate",
        "16000",
        "--duration",
        &(STEP_S + 10.0).to_string(),
        "--json",
        "--",
    ]
    .map(String::from)
    .to_vec();
    args.extend(sender);
    let mut p = Proc::scanprof(&args);
    // The truth of each step, read as its line arrives: the next step's sender starts only
    // after its probes are attached, so nothing of it is counted here.
    let mut truth: Vec<(u64, u64)> = Vec::new();
    let (mut drops0, mut rx0) = (0u64, 0u64);
    let mut steps = Vec::new();
    for _ in RATES {
        let step = p.wait_for_json("sweep_step", Duration::from_secs(60));
        let root = lab.drained_root_qdisc();
        std::thread::sleep(Duration::from_millis(30));
        let rx = sink.packets_so_far();
        truth.push((root.drops - drops0, rx - rx0));
        (drops0, rx0) = (root.drops, rx);
        assert_precise_step(&step);
        steps.push(step);
    }
    let sweep = p.wait_for_json("sweep", Duration::from_secs(10));
    let done = p.finish(Duration::from_secs(20));
    done.assert_success();
    let received = stop_sink(sink);

    let tbf_pps = tbf_pps();
    let mut report = String::new();
    for (s, (tc_drops, rx)) in steps.iter().zip(&truth) {
        let (rate, ratio) = (f64_of(s, "requested_pps"), f64_of(s, "ratio"));
        let (packets, lost) = (u64_of(s, "packets"), u64_of(s, "lost"));
        report += &format!(
            "{rate} pps: achieved/requested {ratio:.4}, packets {packets}, scanprof lost {lost}, tc drops {tc_drops}, receiver {rx}, kept {}, top {:?}\n",
            s["kept"],
            causes(s).first()
        );
    }
    eprintln!("tbf {TBF} = {tbf_pps:.0} pps of {WIRE} B\n{report}{sweep}");
    for (s, (tc_drops, rx)) in steps.iter().zip(&truth) {
        let rate = f64_of(s, "requested_pps");
        let (packets, lost) = (u64_of(s, "packets"), u64_of(s, "lost"));
        // scanprof's loss is tc's drop count, exactly: the lab carries nothing else.
        assert_eq!(lost, *tc_drops, "{rate} pps: scanprof's loss vs tc\n{report}");
        // Every packet sent either reached the receiver or was dropped by the tbf.
        assert_eq!(
            packets,
            rx + tc_drops,
            "{rate} pps: packets vs receiver + tc\n{report}"
        );
        if rate < tbf_pps * 0.9 {
            assert_within(
                &format!("{rate} pps achieved"),
                f64_of(s, "achieved_pps"),
                rate,
                0.02,
            );
            assert_eq!((lost, *tc_drops), (0, 0), "{rate} pps lost packets\n{report}");
            assert_eq!(s["kept"], true, "{rate} pps not kept\n{report}");
        }
        if rate > tbf_pps * 1.1 {
            assert!(lost > 0, "{rate} pps: nothing lost above the tbf\n{report}");
            assert_eq!(s["kept"], false, "{rate} pps kept\n{report}");
            assert!(
                causes(s).iter().any(|c| c == "qdisc_drop"),
                "{rate} pps: no qdisc_drop verdict\n{report}"
            );
            let qdisc = s["losses"]
                .as_array()
                .unwrap()
                .iter()
                .find(|l| l["reason"] == "QDISC_DROP")
                .unwrap_or_else(|| panic!("{rate} pps: no QDISC_DROP loss row\n{report}"));
            assert_eq!(u64_of(qdisc, "count"), *tc_drops, "{rate} pps\n{report}");
        }
    }
    // The knee: the last rate below the tbf's (4000), or one step lower.
    let below = RATES.iter().copied().filter(|r| *r < tbf_pps).fold(0.0, f64::max);
    let at = RATES.iter().position(|r| *r == below).unwrap();
    let knee = &sweep["knee"];
    let knee_pps = knee["knee_pps"]
        .as_f64()
        .unwrap_or_else(|| panic!("no knee: {sweep}"));
    assert!(
        knee_pps == below || (at > 0 && knee_pps == RATES[at - 1]),
        "knee {knee_pps} pps, the tbf at {tbf_pps:.0} pps ({below} below it)\n{report}"
    );
    assert!(f64_of(knee, "above_pps") > knee_pps);
    assert_eq!(knee["change"]["cause"], "qdisc_drop", "{sweep}");
    assert_eq!(knee["change"]["how"], "appeared", "{sweep}");
    assert_eq!(sweep["steps_run"], 5);
    assert_eq!(sweep["interrupted"], false);
    assert_eq!(
        received.packets,
        truth.iter().map(|t| t.1).sum::<u64>(),
        "packets arrived after the last step was counted"
    );
    test.assert_released("the sweep");
    lab.destroy();
}

/// `sweep --lab`: the sweep makes the lab (with the tbf), sends the reference sender into it,
/// reports the lab's own counts per step, writes the bundle, and removes the lab.
#[test]
fn a_lab_sweep_reports_the_labs_counts_and_writes_its_bundle() {
    let test = privileged();
    let bundle = std::env::temp_dir().join(format!("scanprof-sweep-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&bundle);
    let rates = [2000.0, 4000.0, 8000.0];
    let args: Vec<String> = [
        "sweep",
        "--lab",
        "--tbf-rate",
        TBF,
        "--rates",
        &rates_arg(&rates),
        "--duration",
        "2",
        "--json",
        "--export",
        &bundle.display().to_string(),
    ]
    .map(String::from)
    .to_vec();
    let done = Proc::scanprof(&args).finish(Duration::from_secs(90));
    done.assert_success();
    let steps = done.of_type("sweep_step");
    let sweep = done.of_type("sweep").pop().expect("no sweep line");
    assert_eq!(steps.len(), 3, "{}", done.context());
    steps.iter().for_each(assert_precise_step);
    for s in &steps {
        let lab = &s["lab"];
        let (packets, lost) = (u64_of(s, "packets"), u64_of(s, "lost"));
        assert_eq!(lost, u64_of(lab, "qdisc_drops"), "{s}");
        assert_eq!(packets, u64_of(lab, "receiver_packets") + lost, "{s}");
    }
    assert_eq!(sweep["knee"]["knee_pps"], 4000.0, "{sweep}");
    assert_eq!(sweep["knee"]["change"]["cause"], "qdisc_drop", "{sweep}");
    for f in [
        "sweep.ndjson",
        "sweep.md",
        "sweep.svg",
        "step-01-2000pps.ndjson",
        "step-03-8000pps.ndjson",
    ] {
        let m = std::fs::symlink_metadata(bundle.join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
        assert!(m.is_file() && m.len() > 0, "{f}");
    }
    let md = std::fs::read_to_string(bundle.join("sweep.md")).unwrap();
    assert!(md.contains("knee: 4000 pps"), "{md}");
    // Each step's stream is a bundle `report` reads.
    let report = std::process::Command::new(scanprof_bin())
        .args(["report", "--format", "json"])
        .arg(bundle.join("step-03-8000pps.ndjson"))
        .output()
        .unwrap();
    assert!(report.status.success(), "{report:?}");
    assert!(String::from_utf8_lossy(&report.stdout).contains("qdisc_drop"));
    let _ = std::fs::remove_dir_all(&bundle);
    assert!(
        scanprof::netlab::leftover_namespaces().is_empty(),
        "the sweep's lab was not removed"
    );
    test.assert_released("the test's scanprof processes ended");
}

/// Ctrl-C in the second step ends that step with its summary, skips the rest, and prints the
/// table so far: two steps, `interrupted`, exit status 130.
#[test]
fn ctrl_c_ends_the_current_step_and_prints_the_sweep_so_far() {
    let test = privileged();
    let args: Vec<String> = [
        "sweep",
        "--lab",
        "--rates",
        "1000,2000,3000",
        "--duration",
        "3",
        "--json",
    ]
    .map(String::from)
    .to_vec();
    let mut p = Proc::scanprof(&args);
    let first = p.wait_for_json("sweep_step", Duration::from_secs(60));
    assert_eq!(f64_of(&first, "requested_pps"), 1000.0);
    // Well into the second step (its probes attach in well under a second here).
    std::thread::sleep(Duration::from_millis(1500));
    p.signal(Signal::SIGINT);
    let done = p.finish(Duration::from_secs(30));
    assert_eq!(done.status.code(), Some(130), "{}", done.context());
    let steps = done.of_type("sweep_step");
    let sweep = done.of_type("sweep").pop().expect("no sweep line");
    // The first step's line (read above) and the interrupted second step's.
    assert_eq!(steps.len(), 2, "{}", done.context());
    assert_eq!(steps[0]["end_reason"], "family_exited", "{}", steps[0]);
    assert_eq!(steps[1]["end_reason"], "interrupted", "{}", steps[1]);
    assert_eq!(f64_of(&steps[1], "requested_pps"), 2000.0);
    assert_eq!(sweep["steps_run"], 2, "{sweep}");
    assert_eq!(sweep["interrupted"], true, "{sweep}");
    assert!(
        scanprof::netlab::leftover_namespaces().is_empty(),
        "the sweep's lab was not removed"
    );
    test.assert_released("the test's scanprof processes ended");
}

/// `compare` of a healthy lab run's bundle with a `lab qdisc-drop` run's: `qdisc_drop` is named
/// as appeared, and each difference is the two runs' own summary figures (as `report --format
/// json` prints them) subtracted.
#[test]
fn compare_names_the_qdisc_drop_that_appeared_and_differences_equal_the_summaries() {
    let test = privileged();
    let base = std::env::temp_dir().join(format!("scanprof-compare-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let (a, b) = (base.join("healthy"), base.join("qdisc-drop"));
    for (scenario, dir) in [("healthy", &a), ("qdisc-drop", &b)] {
        let args: Vec<String> = [
            "lab",
            scenario,
            "--duration",
            "2",
            "--json",
            "--export",
            &dir.display().to_string(),
        ]
        .map(String::from)
        .to_vec();
        Proc::scanprof(&args)
            .finish(Duration::from_secs(60))
            .assert_success();
    }
    let out = |args: &[&std::ffi::OsStr]| -> Value {
        let o = std::process::Command::new(scanprof_bin())
            .args(args)
            .output()
            .unwrap();
        assert!(o.status.success(), "{args:?}: {o:?}");
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{args:?}: {e}: {o:?}"))
    };
    let json = std::ffi::OsStr::new("json");
    let fmt = std::ffi::OsStr::new("--format");
    let sa = out(&["report".as_ref(), fmt, json, a.as_os_str()]);
    let sb = out(&["report".as_ref(), fmt, json, b.as_os_str()]);
    let c = out(&["compare".as_ref(), a.as_os_str(), b.as_os_str(), fmt, json]);
    let causes = c["causes"].as_array().unwrap();
    let qdisc = causes
        .iter()
        .find(|r| r["cause"] == "qdisc_drop")
        .unwrap_or_else(|| panic!("qdisc_drop not compared: {c}"));
    assert_eq!(qdisc["change"], "appeared", "{c}");
    assert!(
        qdisc["a_share"].is_null() && f64_of(qdisc, "b_share") > 0.5,
        "{c}"
    );
    assert_eq!(causes[0]["cause"], "qdisc_drop", "appeared first: {c}");
    let figure = |name: &str| -> Value {
        c["figures"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["figure"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no figure {name}: {c}"))
    };
    for key in ["achieved_pps", "packets", "requested_pps", "send_window_s"] {
        let f = figure(key);
        let (x, y) = (f64_of(&sa, key), f64_of(&sb, key));
        assert_eq!((f64_of(&f, "a"), f64_of(&f, "b")), (x, y), "{key}: {f}");
        assert_eq!(f64_of(&f, "diff"), y - x, "{key}: {f}");
    }
    let stage = |s: &Value, n: &str| s["stages"][n].as_f64().unwrap();
    let f = figure("stage.dev_xmit_pps");
    assert_eq!(
        f64_of(&f, "diff"),
        stage(&sb, "dev_xmit") - stage(&sa, "dev_xmit"),
        "{f}"
    );
    // The loss: healthy lost nothing; the qdisc-drop run's target_loss drops, all QDISC_DROP.
    let target_loss = |s: &Value| -> u64 {
        s["drops"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| d["class"] == "target_loss")
            .map(|d| u64_of(d, "count"))
            .sum()
    };
    let lost = figure("lost");
    assert_eq!(f64_of(&lost, "a"), target_loss(&sa) as f64);
    assert_eq!(f64_of(&lost, "b"), target_loss(&sb) as f64);
    assert!(f64_of(&lost, "diff") > 0.0, "{lost}");
    let qd = figure("drops.target_loss.QDISC_DROP");
    assert!(
        qd["a"].is_null() && f64_of(&qd, "b") == target_loss(&sb) as f64,
        "{qd}"
    );
    let _ = std::fs::remove_dir_all(&base);
    test.assert_released("the test's scanprof processes ended");
}
