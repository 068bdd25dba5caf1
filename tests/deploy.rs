//! What `deploy/` ships, checked with the tools that read it: the Prometheus rules pass
//! `promtool check rules` and their unit tests (`promtool test rules`: the shard sums, each
//! alert firing where it should and nowhere else), the example agent configuration parses with
//! every setting checked, and an agent's exposition (runs merged with its own metrics) passes
//! `promtool check metrics`. No root needed; promtool comes with Debian's prometheus package
//! (scripts/setup).
//!
//! Run: `cargo test --test it deploy::`

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

fn promtool(args: &[&str], dir: &Path, stdin: Option<&str>) -> String {
    let mut child = Command::new("promtool")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool is missing: run ./scripts/setup (Debian's prometheus package)");
    let mut input = child.stdin.take().expect("stdin");
    if let Some(text) = stdin {
        input.write_all(text.as_bytes()).expect("writing to promtool");
    }
    drop(input);
    let out = child.wait_with_output().expect("promtool");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {args:?} failed:\n{text}");
    text
}

fn prometheus_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/prometheus")
}

#[test]
fn the_prometheus_rules_are_valid_and_their_unit_tests_pass() {
    let dir = prometheus_dir();
    let out = promtool(&["check", "rules", "scanprof-rules.yml"], &dir, None);
    assert!(out.contains("SUCCESS"), "{out}");
    let out = promtool(&["test", "rules", "scanprof-rules.test.yml"], &dir, None);
    assert!(out.contains("SUCCESS"), "{out}");
    // Every alert of the rules file has a test.
    let rules = std::fs::read_to_string(dir.join("scanprof-rules.yml")).unwrap();
    let tests = std::fs::read_to_string(dir.join("scanprof-rules.test.yml")).unwrap();
    for alert in rules.lines().filter_map(|l| l.trim().strip_prefix("- alert: ")) {
        assert!(
            tests.contains(&format!("alertname: {alert}")),
            "{alert} has no test"
        );
    }
    for record in rules.lines().filter_map(|l| l.trim().strip_prefix("- record: ")) {
        assert!(tests.contains(&format!("expr: {record}")), "{record} has no test");
    }
}

#[test]
fn the_example_agent_configuration_parses() {
    let text =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/agent.toml")).unwrap();
    let set = scanprof::wrappers::ProfileSet::builtin().unwrap();
    let cfg = scanprof::run::agent::config::AgentConfig::parse(&text, &set).unwrap();
    assert_eq!(cfg.metrics, Some("127.0.0.1:9477".parse().unwrap()));
    // Its defaults are the built-in ones, but for the metrics address it sets.
    let defaults = scanprof::run::agent::config::AgentConfig {
        metrics: cfg.metrics,
        ..Default::default()
    };
    assert_eq!(cfg, defaults);
}

#[test]
fn an_agents_exposition_passes_promtool() {
    use scanprof::views::metrics::{merge, AgentStats, MetricsState, RunLabels};
    let run = |id: &str, scanner: &str, argv: &[&str]| {
        let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
        let mut labels = RunLabels::of(scanner, &argv);
        labels.run_id = Some(id.into());
        MetricsState::new(labels).render()
    };
    let a = run("r1", "zmap", &["zmap", "--shards", "2", "--shard", "0"]);
    let b = run("r2", "zmap", &["zmap", "--shards", "2", "--shard", "1"]);
    let c = run("r3", "masscan", &["masscan", "-p80"]);
    let own = AgentStats {
        last_run_start_unix_s: Some(1.0),
        ..AgentStats::default()
    }
    .render();
    let text = merge(&[&a, &b, &c, &own]);
    promtool(&["check", "metrics"], &prometheus_dir(), Some(&text));
}
