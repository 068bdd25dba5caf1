//! Privileged test of the Prometheus metrics against a real Prometheus server (Debian's
//! `prometheus`, installed by scripts/setup): it scrapes `scanprof run --metrics` every second
//! during a run into a lab's narrow tbf, and its HTTP API then gives the run's figures. The
//! `--metrics-file` of the same run passes `promtool check metrics`.
//!
//! Needs root (BPF, namespaces) and fails, never skips, without it. Traffic goes only into the
//! namespace lab the test creates (removed on drop); Prometheus listens on 127.0.0.1 only, keeps
//! its data in a temporary directory the test removes, and is ended by pid.
//!
//! Run: `cargo test --test it metrics::`

use crate::common;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use common::prometheus::{assert_promtool_accepts, free_port, http_get, query};
use common::*;
use scanprof::netlab::TbfConfig;

const PORT: u16 = 9000;
const RUN_TIMEOUT: Duration = Duration::from_secs(60);

/// A directory this test made, removed on drop.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The single value of a query that must give exactly one series.
fn one_value(port: u16, promql: &str) -> f64 {
    let r = query(port, promql);
    assert_eq!(r.len(), 1, "{promql}: {r:?}");
    r[0]["value"][1]
        .as_str()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{promql}: {r:?}"))
}

#[test]
fn prometheus_scrapes_the_runs_counters_and_verdict_and_the_textfile_is_valid() {
    let test = privileged();
    for tool in ["prometheus", "promtool"] {
        assert!(
            Command::new(tool)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success()),
            "{tool} is missing: run ./scripts/setup (Debian's prometheus package)"
        );
    }
    let dir = TempDir(std::env::temp_dir().join(format!("scanprof-metrics-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&dir.0);
    std::fs::create_dir_all(dir.0.join("data")).unwrap();

    // Prometheus, scraping scanprof's port every second.
    let (metrics_port, api_port) = (free_port(), free_port());
    let config = dir.0.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\nscrape_configs:\n  - job_name: scanprof\n    \
             static_configs:\n      - targets: ['127.0.0.1:{metrics_port}']\n"
        ),
    )
    .unwrap();
    let mut cmd = Command::new("prometheus");
    cmd.arg(format!("--config.file={}", config.display()))
        .arg(format!("--storage.tsdb.path={}", dir.0.join("data").display()))
        .arg(format!("--web.listen-address=127.0.0.1:{api_port}"));
    let mut prometheus = Proc::spawn("prometheus", cmd, false);
    let deadline = Instant::now() + patience(Duration::from_secs(30));
    while http_get(api_port, "/-/ready").is_none() {
        assert!(prometheus.running(), "prometheus ended");
        assert!(Instant::now() < deadline, "prometheus not ready within 30 s");
        std::thread::sleep(Duration::from_millis(100));
    }

    // A run into a 2 Mbit/s tbf: packets, QDISC_DROPs, a loss verdict. The family stays 3 s
    // after the last packet, so that Prometheus scrapes the final counts at least twice.
    let lab = TestLab::new(Some(TbfConfig {
        rate: "2mbit".into(),
        burst: "4kb".into(),
        limit: "10kb".into(),
    }));
    let sink = lab.sink(PORT);
    let sender = sender_argv(&lab.to(PORT), 5000.0, 20_000, 10.0, &["--size", "512"]);
    let shell = format!("{} >/dev/null; sleep 3", sh_join(&sender));
    let textfile = dir.0.join("scanprof.prom");
    let mut args: Vec<String> = [
        "run",
        "--json",
        "--interval",
        "1",
        "--duration",
        "40",
        "--metrics",
        &format!("127.0.0.1:{metrics_port}"),
        "--metrics-file",
        &textfile.to_string_lossy(),
        "--",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(in_netns(&lab.lab.sender_ns, &["sh".into(), "-c".into(), shell]));
    let run = Proc::scanprof(&args).finish(RUN_TIMEOUT);
    let rx = stop_sink(sink);
    run.assert_success();
    let s = run.summary();
    // One more scrape interval: Prometheus has stored its last scrape.
    std::thread::sleep(Duration::from_millis(1500));

    let scraped = |stage: &str| {
        one_value(
            api_port,
            &format!("max_over_time(scanprof_stage_events_total{{job=\"scanprof\",stage=\"{stage}\"}}[10m])"),
        )
    };
    let packets = scraped("syscall_packets");
    let drops = one_value(
        api_port,
        "sum(max_over_time(scanprof_drops_total{job=\"scanprof\",reason=\"QDISC_DROP\",class=\"target_loss\"}[10m]))",
    );
    let want_drops: u64 = s
        .drops
        .iter()
        .filter(|d| d.reason == "QDISC_DROP" && d.class == scanprof::collect::DropClass::TargetLoss)
        .map(|d| d.count)
        .sum();
    let top_loss = s
        .verdicts
        .iter()
        .find(|v| v.kind == scanprof::analysis::verdict::Kind::Loss)
        .expect("a loss verdict");
    // The top loss verdict as the ticks had it (its confidence may still change in the
    // summary, which the run's last scrape can precede).
    let info = query(
        api_port,
        &format!(
            "last_over_time(scanprof_verdict_info{{job=\"scanprof\",kind=\"loss\",cause=\"{}\"}}[10m])",
            top_loss.cause
        ),
    );
    eprintln!(
        "metrics: scanprof {} packets, {want_drops} QDISC_DROP; Prometheus {packets} packets, {drops} drops; \
         receiver {}; top loss verdict {} ({} series in Prometheus)",
        s.packets,
        rx.packets,
        top_loss.cause,
        info.len()
    );
    assert_eq!(s.packets, 20_000, "the sender's packets");
    assert!(want_drops > 10_000, "the tbf dropped too little: {:?}", s.drops);
    // The family lived on after its last packet: the final counts were scraped.
    assert_eq!(packets, s.packets as f64, "scraped packets vs the summary");
    assert_eq!(drops, want_drops as f64, "scraped QDISC_DROPs vs the summary");
    assert!(!info.is_empty(), "no verdict info for {}", top_loss.cause);
    assert!(info.iter().all(|i| i["value"][1] == "1"), "{info:?}");
    // The launched command is a shell line: no scanner profile recognises it.
    assert_eq!(info[0]["metric"]["scanner"], "generic", "{info:?}");
    // Counters are counters: Prometheus saw no reset of any scanprof counter.
    assert_eq!(
        query(
            api_port,
            "resets(scanprof_stage_events_total{job=\"scanprof\"}[10m]) > 0"
        )
        .len(),
        0
    );

    // The textfile: the final figures, and valid for promtool (node_exporter's parser).
    let text = std::fs::read_to_string(&textfile).expect("the metrics file");
    let final_packets = text
        .lines()
        .find(|l| l.starts_with("scanprof_stage_events_total{") && l.contains("stage=\"syscall_packets\""))
        .and_then(|l| l.rsplit(' ').next()?.parse::<u64>().ok());
    assert_eq!(final_packets, Some(s.packets), "{text}");
    assert_promtool_accepts(&text);

    prometheus.signal(nix::sys::signal::Signal::SIGTERM);
    let _ = prometheus.finish(Duration::from_secs(20));
    lab.destroy();
    test.assert_released("the test's scanprof processes ended");
}
