//! Privileged test of `scanprof agent` against a real Prometheus (Debian's `prometheus`, from
//! scripts/setup): the agent follows the processes exec'd in a cgroup this test makes (its
//! config names no profile, so no other scanner on the machine is followed), while three
//! scanners start there at different times: two shards of one zmap scan in one lab, and a masscan
//! behind a narrow tbf in another. Prometheus scrapes the agent every 10 s, longer than each run,
//! with deploy/prometheus/scanprof-rules.yml loaded; its HTTP API then gives each run's final
//! state (after the runs ended), the recording rule's shard sum (equal to the two zmap runs'
//! counts), and the loss alert firing for the masscan run only. The agent's exposition passes
//! `promtool check metrics`; on SIGTERM it leaves no process and no BPF program behind.
//!
//! Needs root (BPF, namespaces, cgroups) and fails, never skips, without it. Traffic goes only
//! into the labs the test creates (removed on drop); Prometheus listens on 127.0.0.1 only and
//! keeps its data in a temporary directory the test removes; every process is ended by pid.
//!
//! Run: `cargo test --test it agent::`

use crate::common;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use common::prometheus::{assert_promtool_accepts, free_port, http_get, query};
use common::*;
use scanprof::netlab::{Lab, LabConfig, TbfConfig};

/// zmap's targets: 128 addresses the zmap lab's target namespace owns (local routes).
const ZMAP_TARGETS: [&str; 2] = ["10.99.0.64/26", "10.99.0.128/26"];
/// Seconds between Prometheus's scrapes of the agent: longer than each run.
const SCRAPE_S: u64 = 10;

/// What this test made outside its processes: the temporary directory and the cgroup. Dropped
/// last: processes still in the cgroup (started by this test) get SIGKILL by pid first.
struct Made {
    dir: PathBuf,
    cgroup: PathBuf,
}

impl Drop for Made {
    fn drop(&mut self) {
        for _ in 0..50 {
            let pids = std::fs::read_to_string(self.cgroup.join("cgroup.procs")).unwrap_or_default();
            if pids.trim().is_empty() {
                break;
            }
            for pid in pids.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = std::fs::remove_dir(&self.cgroup);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn value(series: &Value) -> f64 {
    series["value"][1]
        .as_str()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no value in {series}"))
}

/// A sample's value in an exposition, by metric name and labels.
fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| {
            (l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
                && labels.iter().all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// The MAC address of the lab's target end: the "router" zmap and masscan send to.
fn target_mac(lab: &Lab) -> String {
    let out = lab
        .command_in_target(
            "ip",
            &[
                "-j".into(),
                "link".into(),
                "show".into(),
                "dev".into(),
                lab.target_dev.clone(),
            ],
        )
        .output()
        .expect("ip link");
    let links: Value = serde_json::from_slice(&out.stdout).expect("ip -j link printed no JSON");
    links[0]["address"].as_str().expect("a MAC address").to_string()
}

/// Starts `argv` in the lab's sender namespace from a shell that first moves itself into the
/// test's cgroup: the agent sees `ip` exec there (and the scanner it execs in place).
fn start_in_cgroup(cgroup: &std::path::Path, lab: &Lab, argv: &[String]) -> Child {
    let script = format!(
        "echo $$ > {} && exec \"$@\" >/dev/null 2>&1",
        sh_quote(&cgroup.join("cgroup.procs").to_string_lossy())
    );
    let mut full = vec!["sh".to_string(), "-c".into(), script, "sh".into()];
    full.extend(in_netns(&lab.sender_ns, argv));
    Command::new(&full[0])
        .args(&full[1..])
        .stdin(Stdio::null())
        .spawn()
        .expect("starting a scanner")
}

fn zmap_argv(lab: &Lab, mac: &str, shard: u32) -> Vec<String> {
    let mut argv: Vec<String> = [
        "zmap",
        "-i",
        &lab.sender_dev,
        "-S",
        &lab.sender_addr.to_string(),
        "-G",
        mac,
        "-b",
        "/dev/null",
        "-p",
        "9",
        "-c",
        "0",
        "-q",
        "--disable-syslog",
        "-r",
        "8",
        "-P",
        "2",
        "--shards",
        "2",
        "--shard",
        &shard.to_string(),
        "--seed",
        "7",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    argv.extend(ZMAP_TARGETS.iter().map(|s| s.to_string()));
    argv
}

#[test]
fn prometheus_sees_every_run_of_the_agent_its_shard_sum_its_loss_alert_and_each_runs_end() {
    let test = privileged();
    require_scanner("zmap");
    require_scanner("masscan");
    for tool in ["prometheus", "promtool"] {
        assert!(
            Command::new(tool)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success()),
            "{tool} is missing: run ./scripts/setup (Debian's prometheus package)"
        );
    }
    let id = std::process::id();
    let v2 = PathBuf::from("/sys/fs/cgroup/unified");
    let v2 = if v2.join("cgroup.procs").exists() {
        v2
    } else {
        PathBuf::from("/sys/fs/cgroup")
    };
    let made = Made {
        dir: std::env::temp_dir().join(format!("scanprof-agent-test-{id}")),
        cgroup: v2.join(format!("scanprof-agent-test-{id}")),
    };
    let _ = std::fs::remove_dir_all(&made.dir);
    std::fs::create_dir_all(made.dir.join("data")).unwrap();
    std::fs::create_dir(&made.cgroup).expect("making the test's cgroup (cgroup v2)");

    // The labs: two zmap shards in one, masscan behind a 64 kbit/s tbf in the other.
    let zlab = Lab::create(&LabConfig::default()).expect("the zmap lab");
    let mlab = Lab::create(&LabConfig {
        tbf: Some(TbfConfig {
            rate: "64kbit".into(),
            burst: "4kb".into(),
            limit: "10kb".into(),
        }),
    })
    .expect("the masscan lab");
    for prefix in ZMAP_TARGETS {
        let out = zlab
            .command_in_target(
                "ip",
                &[
                    "route".into(),
                    "add".into(),
                    "local".into(),
                    prefix.into(),
                    "dev".into(),
                    "lo".into(),
                ],
            )
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
    }
    let (zmac, mmac) = (target_mac(&zlab), target_mac(&mlab));

    // The agent: follows the test's cgroup only; ended runs stay served for 10 minutes.
    let agent_port = free_port();
    let config = made.dir.join("agent.toml");
    std::fs::write(
        &config,
        format!(
            "spool = \"{}\"\nmetrics = \"127.0.0.1:{agent_port}\"\nprofiles = []\ncgroups = [\"/scanprof-agent-test-{id}\"]\n\
             max_runs = 4\ninterval = 1.0\nended_metrics_s = 600.0\n",
            made.dir.join("spool").display()
        ),
    )
    .unwrap();
    let progs_before: Vec<u64> = exec_watch_programs();
    let mut agent = Proc::scanprof(&[
        "agent".into(),
        "--config".into(),
        config.to_string_lossy().into_owned(),
    ]);
    let deadline = Instant::now() + patience(Duration::from_secs(20));
    // Its own metrics are served once its exec watcher is attached (the port is bound before).
    while !http_get(agent_port, "/metrics").is_some_and(|t| t.contains("scanprof_agent_exec_events_total")) {
        assert!(agent.running(), "the agent ended");
        assert!(Instant::now() < deadline, "the agent did not serve within 20 s");
        std::thread::sleep(Duration::from_millis(100));
    }

    // Prometheus, scraping the agent every 10 s, with the fleet rules.
    let api_port = free_port();
    let prom_config = made.dir.join("prometheus.yml");
    let rules = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("deploy/prometheus/scanprof-rules.yml");
    std::fs::write(
        &prom_config,
        format!(
            "global:\n  scrape_interval: {SCRAPE_S}s\n  scrape_timeout: 5s\n  evaluation_interval: 2s\nrule_files:\n  - {}\n\
             scrape_configs:\n  - job_name: scanprof-agent\n    static_configs:\n      - targets: ['127.0.0.1:{agent_port}']\n",
            rules.display()
        ),
    )
    .unwrap();
    let mut cmd = Command::new("prometheus");
    cmd.arg(format!("--config.file={}", prom_config.display()))
        .arg(format!("--storage.tsdb.path={}", made.dir.join("data").display()))
        .arg(format!("--web.listen-address=127.0.0.1:{api_port}"));
    let mut prometheus = Proc::spawn("prometheus", cmd, false);
    let deadline = Instant::now() + patience(Duration::from_secs(30));
    while http_get(api_port, "/-/ready").is_none() {
        assert!(prometheus.running(), "prometheus ended");
        assert!(Instant::now() < deadline, "prometheus not ready within 30 s");
        std::thread::sleep(Duration::from_millis(100));
    }

    // Three scanners, started at different times; masscan never ends on its own on a quiet
    // link: `timeout` ends it after 10 s (its family is followed from `ip`, which execs timeout).
    let mut scanners = vec![start_in_cgroup(&made.cgroup, &zlab, &zmap_argv(&zlab, &zmac, 0))];
    std::thread::sleep(Duration::from_millis(1500));
    scanners.push(start_in_cgroup(&made.cgroup, &zlab, &zmap_argv(&zlab, &zmac, 1)));
    std::thread::sleep(Duration::from_millis(1500));
    let masscan: Vec<String> = [
        "timeout",
        "10",
        "masscan",
        &mlab.target_addr.to_string(),
        "-p1-20000",
        "--rate",
        "1000",
        "--interface",
        &mlab.sender_dev,
        "--router-mac",
        &mmac,
        "--wait",
        "0",
        "--noreset",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    scanners.push(start_in_cgroup(&made.cgroup, &mlab, &masscan));
    let deadline = Instant::now() + patience(Duration::from_secs(40));
    for s in &mut scanners {
        loop {
            if s.try_wait().ok().flatten().is_some() {
                break;
            }
            assert!(Instant::now() < deadline, "a scanner ran past 40 s");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    // The agent has closed all three runs.
    let deadline = Instant::now() + patience(Duration::from_secs(30));
    let exposition = loop {
        let text = http_get(agent_port, "/metrics").unwrap_or_default();
        if sample(&text, "scanprof_agent_runs_ended_total", &[]) == Some(3.0) {
            break text;
        }
        assert!(
            Instant::now() < deadline,
            "the agent did not end 3 runs within 30 s:\n{text}\n{}",
            logs(&made.dir.join("spool"))
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(
        sample(&exposition, "scanprof_agent_runs_started_total", &[]),
        Some(3.0)
    );
    assert_eq!(sample(&exposition, "scanprof_agent_runs_live", &[]), Some(0.0));
    // Two scrapes later Prometheus holds the runs' final state.
    std::thread::sleep(Duration::from_secs(2 * SCRAPE_S + 3));

    // Each run, ended, as Prometheus has it now: the zmap shards and masscan.
    let ended = query(api_port, "scanprof_run_ended{job=\"scanprof-agent\"}");
    assert_eq!(ended.len(), 3, "{ended:?}\n{}", logs(&made.dir.join("spool")));
    let mut shards: Vec<(String, String, String)> = ended
        .iter()
        .map(|s| {
            let m = &s["metric"];
            assert_eq!(value(s), 1.0);
            (
                m["scanner"].as_str().unwrap_or_default().to_string(),
                m["shard"].as_str().unwrap_or_default().to_string(),
                m["run_id"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    shards.sort();
    let kinds: Vec<(&str, &str)> = shards
        .iter()
        .map(|(s, sh, _)| (s.as_str(), sh.as_str()))
        .collect();
    assert_eq!(
        kinds,
        [("masscan", ""), ("zmap", "0/2"), ("zmap", "1/2")],
        "{ended:?}"
    );
    // Each run's packets in Prometheus are its attach's final figures (the run's own file).
    let mut zmap_sum = 0.0;
    for (scanner, _, run_id) in &shards {
        let file = std::fs::read_to_string(made.dir.join("spool").join(run_id).join("metrics.prom")).unwrap();
        let want = sample(
            &file,
            "scanprof_stage_events_total",
            &[("stage", "syscall_packets")],
        )
        .unwrap();
        let got = query(
            api_port,
            &format!("scanprof_stage_events_total{{run_id=\"{run_id}\",stage=\"syscall_packets\"}}"),
        );
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(value(&got[0]), want, "{scanner} {run_id}");
        assert!(
            want > 0.0,
            "{scanner} {run_id} sent nothing the probes saw:\n{file}\n{}",
            logs(&made.dir.join("spool"))
        );
        assert_eq!(
            query(
                api_port,
                &format!("scanprof_run_phase{{run_id=\"{run_id}\",phase=\"ended\"}}")
            )
            .len(),
            1
        );
        if scanner == "zmap" {
            zmap_sum += want;
        }
    }
    // The recording rule: the scan's shards summed.
    let sum = query(
        api_port,
        "scan:scanprof_stage_events:sum{scanner=\"zmap\",shards=\"2\",stage=\"syscall_packets\"}",
    );
    assert_eq!(sum.len(), 1, "{sum:?}");
    assert_eq!(value(&sum[0]), zmap_sum);
    // The loss alert fires for masscan (behind the tbf) and for nothing else.
    let alerts = query(
        api_port,
        "ALERTS{alertname=\"ScanprofPacketLoss\",alertstate=\"firing\"}",
    );
    assert_eq!(alerts.len(), 1, "{alerts:?}");
    assert_eq!(alerts[0]["metric"]["scanner"], "masscan", "{alerts:?}");
    eprintln!(
        "agent: runs {shards:?}; zmap shard sum {zmap_sum} packets; loss alert on {}",
        alerts[0]["metric"]["run_id"]
    );

    // The agent's exposition is valid text format.
    assert_promtool_accepts(&exposition);

    // SIGTERM: the agent ends, its exec watcher with it.
    agent.signal(nix::sys::signal::Signal::SIGTERM);
    let done = agent.finish(Duration::from_secs(30));
    done.assert_success();
    let left: Vec<u64> = exec_watch_programs()
        .into_iter()
        .filter(|p| !progs_before.contains(p))
        .collect();
    assert!(left.is_empty(), "exec watcher programs left loaded: {left:?}");
    prometheus.signal(nix::sys::signal::Signal::SIGTERM);
    let _ = prometheus.finish(Duration::from_secs(20));
    let _ = zlab.destroy();
    let _ = mlab.destroy();
    drop(made);
    test.assert_released("the test's scanprof processes ended");
}

/// Every run's attach.log in the spool, for a failure's message.
fn logs(spool: &std::path::Path) -> String {
    let mut out = String::new();
    for e in std::fs::read_dir(spool).into_iter().flatten().flatten() {
        let log = std::fs::read_to_string(e.path().join("attach.log")).unwrap_or_default();
        out += &format!("--- {}\n{log}", e.path().display());
    }
    out
}

/// Ids of loaded BPF programs named like the agent's exec watcher.
fn exec_watch_programs() -> Vec<u64> {
    let out = Command::new("bpftool")
        .args(["-j", "prog", "show"])
        .output()
        .expect("bpftool");
    let progs: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    progs
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|p| p["name"] == "sp_exec_watch")
                .filter_map(|p| p["id"].as_u64())
                .collect()
        })
        .unwrap_or_default()
}
