//! RustScan (Rust, async connect scans in batches) and naabu (Go, SYNs on a raw socket, replies
//! through libpcap, a token-bucket `-rate`) under `scanprof run`, in a two-namespace lab: the
//! packets scanprof counts against an nftables counter of the SYNs that reached the target's
//! input (and `tc -s qdisc` for what a tbf dropped on the way), the requested rate read from each
//! scanner's words, and the verdict on a limit staged for each (naabu into a tbf; RustScan with
//! an open-file limit below its batch, against ports that do not answer). One run under the
//! `generic` profile shows what scanprof does for a Go scanner it has no profile for.
//!
//! The binaries come from scripts/setup (crates.io `rustscan` 2.4.1, the Go module
//! github.com/projectdiscovery/naabu/v2 v2.3.5, built into the checkout's .tools/bin). Needs
//! root (BPF, namespaces) and fails, never skips, without it or without the binaries. Traffic
//! only between the lab's namespaces, bounded by port counts and timeouts.

use crate::common;

use std::path::PathBuf;
use std::time::Duration;

use common::test_lab::TestLab;
use common::*;
use scanprof::collect::DropClass;
use scanprof::netlab::{Side, TbfConfig};
use serde_json::Value;

const RUN_TIMEOUT: Duration = Duration::from_secs(90);

/// The scanner built by scripts/setup into .tools/bin, or a failure saying how to get it.
fn tool(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join(".tools/bin")
        .join(name);
    assert!(
        path.exists(),
        "{} is missing: run scripts/setup (it builds rustscan 2.4.1 and naabu 2.3.5 into .tools/bin)",
        path.display()
    );
    path.to_string_lossy().into_owned()
}

fn strings(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

/// RustScan over `ports` of the lab's target, `batch` connects in flight, each given
/// `timeout_ms`: greppable output, no nmap run after it (`--scripts none`).
fn rustscan_argv(lab: &TestLab, ports: &str, batch: u32, timeout_ms: u32) -> Vec<String> {
    let target = lab.lab.target_addr.to_string();
    let (batch, timeout_ms) = (batch.to_string(), timeout_ms.to_string());
    strings(&[
        &tool("rustscan"),
        "-a",
        &target,
        "-r",
        ports,
        "-b",
        &batch,
        "-t",
        &timeout_ms,
        "-g",
        "-n",
        "--scripts",
        "none",
    ])
}

/// Runs `nft` in the target namespace, or fails the test with its output.
fn nft(lab: &TestLab, args: &[&str]) -> String {
    let out = lab
        .lab
        .command_in_target("nft", &strings(args))
        .output()
        .unwrap_or_else(|e| panic!("cannot run nft: {e}"));
    assert!(out.status.success(), "nft {args:?} failed: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The independent count: an nftables rule in the target namespace that counts every TCP SYN
/// (SYN without ACK) from the sender arriving at its input, and drops those to `drop_ports`
/// (a range of ports that then never answer, as filtered ports on the Internet).
fn count_syns(lab: &TestLab, drop_ports: Option<&str>) {
    let from = lab.lab.sender_addr.to_string();
    nft(lab, &["add", "table", "inet", "scanprof_syns"]);
    nft(
        lab,
        &[
            "add",
            "chain",
            "inet",
            "scanprof_syns",
            "input",
            "{ type filter hook input priority 0; }",
        ],
    );
    nft(
        lab,
        &[
            "add",
            "rule",
            "inet",
            "scanprof_syns",
            "input",
            "ip",
            "saddr",
            &from,
            "tcp",
            "flags",
            "&",
            "(syn|ack)",
            "==",
            "syn",
            "counter",
        ],
    );
    if let Some(ports) = drop_ports {
        nft(
            lab,
            &[
                "add",
                "rule",
                "inet",
                "scanprof_syns",
                "input",
                "ip",
                "saddr",
                &from,
                "tcp",
                "dport",
                ports,
                "drop",
            ],
        );
    }
}

/// SYNs the rule of `count_syns` counted so far.
fn syns_counted(lab: &TestLab) -> u64 {
    let text = nft(lab, &["list", "chain", "inet", "scanprof_syns", "input"]);
    let line = text
        .lines()
        .find(|l| l.contains("counter packets"))
        .unwrap_or_else(|| panic!("no counter in {text}"));
    let after = line.split("counter packets ").nth(1).unwrap_or("");
    after
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no packet count in {line}"))
}

/// `scanprof run --json [--profile P] -- ip netns exec SENDER argv...` to its end.
fn run_in_sender(lab: &TestLab, profile: Option<&str>, argv: Vec<String>) -> Finished {
    let mut args = strings(&["run", "--json", "--duration", "60"]);
    if let Some(p) = profile {
        args.extend(strings(&["--profile", p]));
    }
    args.push("--".into());
    args.extend(in_netns(&lab.lab.sender_ns, &argv));
    let run = Proc::scanprof(&args).finish(patience(RUN_TIMEOUT));
    run.assert_success();
    run
}

/// The summary's verdicts' causes, most important first.
fn causes(s: &Value) -> Vec<String> {
    s["verdicts"]
        .as_array()
        .unwrap_or_else(|| panic!("no verdicts: {s}"))
        .iter()
        .map(|v| v["cause"].as_str().unwrap_or("").to_string())
        .collect()
}

/// The first source of the requested rate, as text.
fn rate_source(s: &Value) -> String {
    s["scanner"]["requested"]["sources"][0]["source"]
        .as_str()
        .unwrap_or_else(|| panic!("no requested-rate source: {}", s["scanner"]))
        .to_string()
}

#[test]
fn naabu_syn_scan_counts_every_syn_and_reads_its_rate() {
    let test = privileged();
    let lab = TestLab::new(None);
    count_syns(&lab, None);
    let naabu = tool("naabu");
    let target = lab.lab.target_addr.to_string();
    // 400 closed ports, each probed twice (-retries 2): 800 SYNs, at most 400 tokens a second.
    let argv = strings(&[
        &naabu, "-host", &target, "-p", "1-400", "-s", "s", "-rate", "400", "-retries", "2", "-duc",
        "-silent",
    ]);
    let run = run_in_sender(&lab, None, argv);
    let s = run.summary_json();
    let syns = syns_counted(&lab);
    eprintln!(
        "naabu: {} packets by scanprof, {syns} SYNs at the target; verdicts {:?}",
        s["packets"],
        causes(&s)
    );
    assert_eq!(
        syns, 800,
        "naabu sent another number of SYNs than 400 ports x 2 tries"
    );
    assert_eq!(s["packets"].as_u64(), Some(syns), "{}", run.context());
    assert_eq!(
        s["send_calls"].as_u64(),
        Some(syns),
        "one raw-socket sendto per SYN: {s}"
    );
    assert_eq!(s["failed_calls"].as_u64(), Some(0));
    assert_eq!(s["scanner"]["profile"], "naabu", "recognised by its executable");
    assert_eq!(s["scanner"]["requested"]["pps"].as_f64(), Some(400.0));
    assert_eq!(s["scanner"]["requested"]["kind"], "exact");
    assert!(
        rate_source(&s).starts_with("argv: -rate 400"),
        "{}",
        rate_source(&s)
    );
    // No probes: the profile has none (Go), so no uprobe was put on the Go binary.
    assert_eq!(
        s["scanner"]["probes"].as_array().map(Vec::len).unwrap_or(0),
        0,
        "{}",
        s["scanner"]
    );
    // The closed ports' RSTs come back: expected drops, no loss.
    for cause in causes(&s) {
        assert!(
            !["qdisc_drop", "filtered", "send_errors", "measurement_fault"].contains(&cause.as_str()),
            "{cause}: {s}"
        );
    }
    drop(run);
    test.assert_released("scanprof run of naabu");
    lab.destroy();
}

#[test]
fn naabu_into_a_tbf_is_a_qdisc_drop_equal_to_tc() {
    let test = privileged();
    // 200 kbit/s carries about 340 of naabu's 74-byte SYN frames a second; -rate 3000 hands the
    // qdisc far more, and the raw socket does not report the drops (no IP_RECVERR): naabu never
    // learns of them.
    let lab = TestLab::new(Some(TbfConfig {
        rate: "200kbit".into(),
        burst: "4kb".into(),
        limit: "8kb".into(),
    }));
    count_syns(&lab, None);
    let before = lab.drained_root_qdisc();
    let naabu = tool("naabu");
    let target = lab.lab.target_addr.to_string();
    let argv = strings(&[
        &naabu, "-host", &target, "-p", "1-3000", "-s", "s", "-rate", "3000", "-retries", "1", "-duc",
        "-silent",
    ]);
    let run = run_in_sender(&lab, Some("naabu"), argv);
    let s = run.summary_json();
    let syns = syns_counted(&lab);
    let after = lab.drained_root_qdisc();
    let tc_drops = after.drops - before.drops;
    let drops: u64 = run
        .summary()
        .drops
        .iter()
        .filter(|d| d.class == DropClass::TargetLoss && lab.at(Side::Sender, d))
        .map(|d| d.count)
        .sum();
    eprintln!(
        "naabu into a tbf: {} packets by scanprof, {syns} SYNs arrived, tc dropped {tc_drops}, scanprof's drops {drops}; verdicts {:?}",
        s["packets"],
        causes(&s)
    );
    assert_eq!(
        s["packets"].as_u64(),
        Some(3000),
        "one SYN per port: {}",
        run.context()
    );
    assert!(tc_drops > 0, "the tbf dropped nothing: the staging failed");
    assert_eq!(drops, tc_drops, "scanprof's drops at the sender's veth vs tc's");
    assert_eq!(
        syns + tc_drops,
        3000,
        "SYNs that arrived and those tc dropped make the scan"
    );
    assert_eq!(
        causes(&s).first().map(String::as_str),
        Some("qdisc_drop"),
        "{}",
        s["verdicts"]
    );
    drop(run);
    test.assert_released("scanprof run of naabu into a tbf");
    lab.destroy();
}

/// Runs `argv(target address)` (a scan of 300 closed ports) under `--profile generic`, what any
/// scanner scanprof has no profile for gets, and checks what is common: every SYN counted, no
/// requested rate read, no probe of its own, and the gap's verdict unknown (or a bottleneck).
/// Returns the summary for the checks of each scanner.
fn measured_from_tracepoints_with_no_rate(argv: impl FnOnce(&str) -> Vec<String>) -> Value {
    let test = privileged();
    let lab = TestLab::new(None);
    count_syns(&lab, None);
    let argv = argv(&lab.lab.target_addr.to_string());
    let name = argv[0].rsplit('/').next().unwrap_or_default();
    let what = format!("scanprof run of {name} as generic");
    let run = run_in_sender(&lab, Some("generic"), argv);
    let s = run.summary_json();
    let syns = syns_counted(&lab);
    assert_eq!(syns, 300);
    assert_eq!(s["packets"].as_u64(), Some(syns), "{}", run.context());
    let sc = &s["scanner"];
    assert_eq!(sc["profile"], "generic");
    assert!(sc["requested"]["pps"].is_null(), "{sc}");
    assert_eq!(sc["probes"].as_array().map(Vec::len).unwrap_or(0), 0, "{sc}");
    let c = causes(&s);
    assert!(c.iter().any(|c| c == "gap_unknown" || c == "bottleneck"), "{c:?}");
    drop(run);
    test.assert_released(&what);
    lab.destroy();
    s
}

#[test]
fn a_go_scanner_without_a_profile_is_measured_from_tracepoints_with_no_rate() {
    // naabu under `--profile generic`: what any Go scanner scanprof has no profile for gets.
    let s = measured_from_tracepoints_with_no_rate(|target| {
        strings(&[
            &tool("naabu"),
            "-host",
            target,
            "-p",
            "1-300",
            "-s",
            "s",
            "-rate",
            "300",
            "-retries",
            "1",
            "-duc",
            "-silent",
        ])
    });
    // generic reads `--rate N` / `--pps N` only: Go's single-dash -rate is not read as a guess.
    assert_eq!(s["scanner"]["requested"]["kind"], "unknown", "{s}");
    assert!(s["requested_pps"].is_null(), "{s}");
}

#[test]
fn a_rust_connect_scanner_without_a_profile_is_measured_from_tracepoints_with_no_rate() {
    // RustScan under `--profile generic`: what any Rust scanner scanprof has no profile for gets.
    let s = measured_from_tracepoints_with_no_rate(|target| {
        strings(&[
            &tool("rustscan"),
            "-a",
            target,
            "-r",
            "1-300",
            "-b",
            "100",
            "-t",
            "1000",
            "-g",
            "-n",
            "--scripts",
            "none",
        ])
    });
    assert_eq!(
        s["connect"]["attempts"].as_u64(),
        s["packets"].as_u64(),
        "{}",
        s["connect"]
    );
    // No window without its profile: no requested rate, and no fd_limit can be judged.
    assert!(s["scanner"]["requested"]["window"].is_null(), "{s}");
}

#[test]
fn rustscan_connect_scan_counts_its_syns_and_reads_its_window() {
    let test = privileged();
    let lab = TestLab::new(None);
    count_syns(&lab, None);
    // 1000 closed ports: each connect gets the target's RST at once, one SYN each.
    let argv = rustscan_argv(&lab, "1-1000", 200, 1000);
    let run = run_in_sender(&lab, None, argv);
    let s = run.summary_json();
    let syns = syns_counted(&lab);
    eprintln!(
        "rustscan: {} packets by scanprof, {syns} SYNs at the target; verdicts {:?}",
        s["packets"],
        causes(&s)
    );
    assert_eq!(syns, 1000);
    assert_eq!(s["packets"].as_u64(), Some(syns), "{}", run.context());
    let c = &s["connect"];
    assert_eq!(c["attempts"].as_u64(), Some(1000), "{c}");
    assert_eq!(c["syns"].as_u64(), Some(1000), "{c}");
    assert_eq!(c["failed"].as_u64(), Some(0), "{c}");
    assert_eq!(c["connect_scanner"], true, "{c}");
    let sc = &s["scanner"];
    assert_eq!(sc["profile"], "rustscan");
    // -b 200 in flight, -t 1000 ms each: at least 200 connects a second.
    assert_eq!(sc["requested"]["pps"].as_f64(), Some(200.0), "{sc}");
    assert_eq!(sc["requested"]["kind"], "floor", "{sc}");
    let src = rate_source(&s);
    assert!(
        src.starts_with("argv: -b 200 in flight, argv: -t 1000 ms"),
        "{src}"
    );
    // Answered at once, it runs far above its floor: that is no gap.
    assert_eq!(
        causes(&s).first().map(String::as_str),
        Some("no_gap"),
        "{}",
        s["verdicts"]
    );
    drop(run);
    test.assert_released("scanprof run of rustscan");
    lab.destroy();
}
#[test]
fn rustscan_below_its_open_file_limit_is_an_fd_limit() {
    let test = privileged();
    let lab = TestLab::new(None);
    // Ports 20000-20399 never answer: each connect holds its socket for the whole -t 500 ms.
    count_syns(&lab, Some("20000-20399"));
    let rustscan = tool("rustscan");
    let target = lab.lab.target_addr.to_string();
    // -b 200 asks for 200 connects in flight (400 a second at -t 500); `ulimit -n 100` makes
    // RustScan halve the limit into a batch of 50: about 100 a second.
    let scan = format!(
        "ulimit -n 100; exec {rustscan} -a {target} -r 20000-20399 -b 200 -t 500 -g -n --scripts none"
    );
    let run = run_in_sender(&lab, Some("rustscan"), strings(&["sh", "-c", &scan]));
    let s = run.summary_json();
    let syns = syns_counted(&lab);
    eprintln!(
        "rustscan under ulimit -n 100: {} packets, {syns} SYNs; verdicts {}",
        s["packets"], s["verdicts"]
    );
    // Under 1 s per connect, the kernel retransmits no SYN: one SYN per port.
    assert_eq!(syns, 400);
    assert_eq!(s["packets"].as_u64(), Some(syns), "{}", run.context());
    assert_eq!(s["scanner"]["requested"]["pps"].as_f64(), Some(400.0));
    let v = &s["verdicts"][0];
    assert_eq!(v["cause"], "fd_limit", "{}", s["verdicts"]);
    let text = v.to_string();
    assert!(text.contains("100"), "the verdict names the limit: {v}");
    drop(run);
    test.assert_released("scanprof run of rustscan under a low ulimit");
    lab.destroy();
}

/// A counter of /proc/net/netstat (e.g. "TcpExt" "TCPSynRetrans") in the sender's namespace:
/// the kernel's own count for every socket there, read inside the namespace the test made.
fn sender_netstat(lab: &TestLab, group: &str, name: &str) -> u64 {
    let out = lab
        .lab
        .command_in_sender("cat", &strings(&["/proc/net/netstat"]))
        .output()
        .unwrap_or_else(|e| panic!("cannot read /proc/net/netstat: {e}"));
    assert!(out.status.success(), "reading /proc/net/netstat: {out:?}");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let prefix = format!("{group}:");
    let mut rows = text.lines().filter(|l| l.starts_with(&prefix));
    let (names, values) = (rows.next(), rows.next());
    let (Some(names), Some(values)) = (names, values) else {
        panic!("no {group} rows in {text}");
    };
    names
        .split_whitespace()
        .zip(values.split_whitespace())
        .find(|(n, _)| *n == name)
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or_else(|| panic!("no {group} {name} in {text}"))
}

#[test]
fn rustscan_unanswered_ports_count_the_kernel_s_syn_retransmissions_apart() {
    let test = privileged();
    let lab = TestLab::new(None);
    // Ports 30000-30099 never answer; -t 2500 keeps each connect open past the kernel's first
    // SYN retransmission (1 s): the timer, not RustScan, sends those SYNs.
    count_syns(&lab, Some("30000-30099"));
    let before = sender_netstat(&lab, "TcpExt", "TCPSynRetrans");
    let argv = rustscan_argv(&lab, "30000-30099", 100, 2500);
    let run = run_in_sender(&lab, Some("rustscan"), argv);
    let s = run.summary_json();
    let syns = syns_counted(&lab);
    let kernel = sender_netstat(&lab, "TcpExt", "TCPSynRetrans") - before;
    let c = &s["connect"];
    eprintln!(
        "rustscan into dropped ports: {syns} SYNs at the target, TCPSynRetrans {kernel}; scanprof: {c}, stages {}",
        s["stage_counts"]
    );
    // The scanner's own sends: one connect, one SYN, per port.
    assert_eq!(c["syns"].as_u64(), Some(100), "{c}");
    assert_eq!(s["packets"].as_u64(), Some(100), "{}", run.context());
    // The kernel's: at least one per port (each lived 2.5 s), exactly what the namespace's
    // counter and the target's capture say.
    assert!(
        kernel >= 100,
        "TCPSynRetrans {kernel}: the lab did not make retransmissions"
    );
    assert_eq!(
        syns,
        100 + kernel,
        "the target saw the connects' SYNs and the retransmissions"
    );
    assert_eq!(c["kernel_syn_retransmits"].as_u64(), Some(kernel), "{c}");
    // Every SYN on the wire went through dev_queue: the connects' and the kernel's.
    assert_eq!(
        s["stage_counts"]["dev_queue"].as_u64(),
        Some(syns),
        "{}",
        s["stage_counts"]
    );
    // Every SYN on the wire is a probe of the reply funnel, and each was handed to the kernel
    // for the scan: the loss is all of them, not "300 of 100".
    assert_eq!(s["replies"]["probes"].as_u64(), Some(syns), "{}", s["replies"]);
    let loss = s["verdicts"]
        .as_array()
        .and_then(|v| v.iter().find(|v| v["kind"] == "loss"))
        .unwrap_or_else(|| panic!("no loss verdict: {}", s["verdicts"]));
    let handed = format!("{syns} of {syns} packets handed to the kernel dropped");
    assert!(loss.to_string().contains(&handed), "{handed}: {loss}");
    drop(run);
    test.assert_released("scanprof run of rustscan into dropped ports");
    lab.destroy();
}
