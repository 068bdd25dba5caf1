//! End to end, as a person would see it: the real binary in a real terminal (tmux) opens the live
//! view on a lab whose sender link drops most packets at a tbf qdisc; the screen must show the
//! requested and achieved rates and the drop location, and the user's command as its title; at the
//! end, the run's summary with the printed report's figures; `q` must end it and restore the
//! terminal. A sender blocked in its sends is named while a block lasts.
//! Needs root (BPF, namespaces) and tmux, both of which CI has: it fails rather than skips.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::common;

// scanprof runs under tmux's server here, not as a child of the test: each test waits for it to
// exit before its end checks that no program it loaded is left (the check cannot see a program
// a still-running scanprof holds, only one nobody holds).
use common::privileged;

const BIN: &str = env!("CARGO_BIN_EXE_scanprof");

/// A tmux session this test started, killed when the test ends however it ends.
struct Tmux(String);

impl Tmux {
    /// A session named after this process and `tag` (the tests of this file may run at once).
    fn start(tag: &str, cols: u16, rows: u16, shell_cmd: &str) -> Tmux {
        let name = format!("scanprof-e2e-{}-{tag}", std::process::id());
        let ok = Command::new("tmux")
            .args([
                "new-session",
                "-d",
                "-s",
                &name,
                "-x",
                &cols.to_string(),
                "-y",
                &rows.to_string(),
                shell_cmd,
            ])
            .status()
            .expect("tmux must be installed (./scripts/setup installs it)")
            .success();
        assert!(ok, "tmux new-session failed");
        Tmux(name)
    }

    fn screen(&self) -> String {
        let out = Command::new("tmux")
            .args(["capture-pane", "-p", "-t", &self.0])
            .output()
            .expect("capture-pane");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The screen with the scrollback above it (the summary after the view is longer than a
    /// screen; the view itself was on the alternate screen, which leaves no history).
    fn history(&self) -> String {
        let out = Command::new("tmux")
            .args(["capture-pane", "-p", "-S", "-2000", "-t", &self.0])
            .output()
            .expect("capture-pane");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn alternate_screen(&self) -> bool {
        let out = Command::new("tmux")
            .args(["display", "-p", "-t", &self.0, "#{alternate_on}"])
            .output()
            .expect("display");
        String::from_utf8_lossy(&out.stdout).trim() == "1"
    }

    /// The pid of the pane's shell.
    fn pane_pid(&self) -> u32 {
        let out = Command::new("tmux")
            .args(["display", "-p", "-t", &self.0, "#{pane_pid}"])
            .output()
            .expect("display");
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .expect("a pane pid")
    }

    fn keys(&self, keys: &str) {
        Command::new("tmux")
            .args(["send-keys", "-t", &self.0, keys])
            .status()
            .expect("send-keys");
    }

    /// Polls the screen until `pred` holds; the last screen either way.
    fn wait_for(&self, what: &str, timeout: Duration, pred: impl Fn(&str) -> bool) -> String {
        let start = Instant::now();
        loop {
            let s = self.screen();
            if pred(&s) {
                return s;
            }
            assert!(
                start.elapsed() < timeout,
                "timed out waiting for {what}; screen:\n{s}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["kill-session", "-t", &self.0])
            .status();
    }
}

#[test]
fn live_view_shows_rates_and_drop_location_and_q_restores_the_terminal() {
    let test = privileged();
    let bundle = std::env::temp_dir().join(format!("scanprof-e2e-bundle-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&bundle);
    let tmux = Tmux::start(
        "qdisc",
        100,
        30,
        &format!(
            "{BIN} lab qdisc-drop --duration 3 --export {}; echo SCANPROF-EXIT=$?; sleep 60",
            bundle.display()
        ),
    );
    // Live, with some ticks behind it: both rates and the target's drop row are on screen.
    let live = tmux.wait_for(
        "the live view with a dropped-packets row",
        Duration::from_secs(30),
        |s| s.contains("LIVE") && s.contains("QDISC_DROP") && s.contains("achieved"),
    );
    assert!(tmux.alternate_screen(), "the view runs on the alternate screen");
    assert!(live.contains("requested 5000.0 pps"), "{live}");
    assert!(
        live.contains("__dev_queue_xmit+0x"),
        "drop location shown:\n{live}"
    );
    assert!(live.contains("target_loss"), "{live}");
    // The title is the user's command: the scenario and the sender's own words, not the
    // wrappers that place it in the lab.
    assert!(
        live.contains("lab qdisc-drop: scanprof send --to "),
        "title:\n{live}"
    );
    assert!(
        !live.contains("ip netns exec") && !live.contains("autogroup"),
        "title shows the lab's wrappers:\n{live}"
    );
    // The lab's namespaces are named after scanprof's pid, the pane shell's child.
    let pane = tmux.pane_pid();
    let pgrep = Command::new("pgrep")
        .args(["-P", &pane.to_string(), "-x", "scanprof"])
        .output()
        .expect("pgrep");
    let scanprof_pid: u32 = String::from_utf8_lossy(&pgrep.stdout)
        .split_whitespace()
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no scanprof child of the pane's shell {pane}"));
    let lab_ns = format!("sp{scanprof_pid}-0s");
    assert!(
        std::path::Path::new("/run/netns").join(&lab_ns).exists(),
        "lab namespace {lab_ns} not found while the lab runs"
    );

    // `e` writes a bundle of the run so far, and the header says where.
    tmux.keys("e");
    let exported = tmux.wait_for("the export message", Duration::from_secs(20), |s| {
        s.contains("bundle written to")
    });
    assert!(
        exported.contains(&bundle.display().to_string()[..20]),
        "{exported}"
    );
    let early = std::fs::read_to_string(bundle.join("events.ndjson")).expect("the bundle's events");
    assert!(
        early.lines().any(|l| l.contains("\"type\":\"sample\"")),
        "ticks so far are in it"
    );

    // The sender ends after 3 s: the final state stays, marked as ended.
    let ended = tmux.wait_for("the ended state", Duration::from_secs(30), |s| {
        s.contains("ENDED")
    });
    assert!(
        ended.contains("QDISC_DROP"),
        "final state kept on screen:\n{ended}"
    );
    // Every panel shows the run's summary, marked as such: the header's achieved rate and
    // ratio are the printed report's, not the last partial tick's.
    assert!(ended.contains("run ended"), "{ended}");
    let header_achieved = ended
        .lines()
        .find_map(|l| {
            let at = l.find("achieved ")?;
            let rest = &l[at..];
            Some(rest[..rest.find(')')? + 1].to_string())
        })
        .unwrap_or_else(|| panic!("no achieved figure in\n{ended}"));

    tmux.keys("q");
    let after = tmux.wait_for("scanprof to exit", Duration::from_secs(20), |s| {
        s.contains("SCANPROF-EXIT=")
    });
    assert!(after.contains("SCANPROF-EXIT=0"), "{after}");
    assert!(!tmux.alternate_screen(), "terminal left on the alternate screen");
    assert!(
        !after.contains("┌ scanprof:"),
        "view still drawn after exit:\n{after}"
    );
    let scrollback = tmux.history();
    assert!(
        scrollback.contains("funnel (per second over the send window)"),
        "summary printed after the view:\n{scrollback}"
    );
    assert!(
        scrollback.contains(&format!("{header_achieved}: ")),
        "the ended view's {header_achieved:?} is not the printed summary's:\n{scrollback}"
    );
    assert!(
        !std::path::Path::new("/run/netns").join(&lab_ns).exists(),
        "lab namespace {lab_ns} left behind"
    );
    // --export rewrote the bundle at the end: now with the summary.
    let fin = std::fs::read_to_string(bundle.join("events.ndjson")).unwrap();
    assert!(
        fin.lines().any(|l| l.contains("\"type\":\"summary\"")),
        "final bundle has the summary"
    );
    let _ = std::fs::remove_dir_all(&bundle);
    remove_command_log(&scrollback);
    test.assert_released("the test's scanprof processes ended");
}

/// `--exit-at-end` closes the view when the run ends, without a key (a scripted terminal used
/// to wait for `q` forever), and the summary follows; with NO_COLOR the view sends no colour.
#[test]
fn exit_at_end_closes_the_view_by_itself_and_no_color_draws_none() {
    let test = privileged();
    let tmux = Tmux::start(
        "exit-at-end",
        80,
        24,
        &format!("NO_COLOR=1 {BIN} lab --duration 2 --exit-at-end; echo SCANPROF-EXIT=$?; sleep 60"),
    );
    tmux.wait_for("the live view", Duration::from_secs(30), |s| s.contains("LIVE"));
    let out = Command::new("tmux")
        .args(["capture-pane", "-p", "-e", "-t", &tmux.0])
        .output()
        .expect("capture-pane -e");
    let styled = String::from_utf8_lossy(&out.stdout).into_owned();
    // SGR colour codes: 30-37/40-47 (and 90-97/100-107), or 38;/48; (256 colours, RGB).
    let colours = styled
        .split("\x1b[")
        .skip(1)
        .filter_map(|seq| seq.split_once('m').map(|(params, _)| params.to_string()))
        .filter(|params| {
            params
                .split(';')
                .any(|p| matches!(p.parse::<u32>(), Ok(30..=38 | 40..=48 | 90..=97 | 100..=107)))
        })
        .count();
    assert_eq!(colours, 0, "colour codes with NO_COLOR:\n{styled:?}");
    // No key is sent: the run ends after 2 s and the view closes by itself.
    let after = tmux.wait_for("scanprof to exit without q", Duration::from_secs(40), |s| {
        s.contains("SCANPROF-EXIT=")
    });
    assert!(after.contains("SCANPROF-EXIT=0"), "{after}");
    assert!(!tmux.alternate_screen(), "terminal left on the alternate screen");
    let scrollback = tmux.history();
    assert!(
        scrollback.contains("funnel (per second over the send window)"),
        "summary printed after the view:\n{scrollback}"
    );
    remove_command_log(&scrollback);
    test.assert_released("the test's scanprof processes ended");
}

/// The launched sender's output went to a log the summary (in `scrollback`) names; scanprof
/// keeps it for the user, the test removes it.
fn remove_command_log(scrollback: &str) {
    let log = scrollback
        .lines()
        .find_map(|l| l.split("the command's own output is in ").nth(1))
        .map(str::trim);
    if let Some(path) = log.filter(|p| p.starts_with("/tmp/scanprof-")) {
        let _ = std::fs::remove_file(path);
        // The log sits alone in a private directory scanprof made for it.
        if let Some(dir) = std::path::Path::new(path).parent() {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// A block in progress is on screen while it lasts (issue 17: the view named the wait site only
/// after a block ended): in the `blocking` lab (a 16 kB send buffer behind a 2 Mbit/s tbf, the
/// sender blocked most of the time), a screen shows the line that exists only while a send is
/// blocked at the tick's end, with its kernel wait site and how long so far.
#[test]
fn a_block_in_progress_is_on_screen_while_it_lasts() {
    let test_start = std::time::SystemTime::now();
    let test = privileged();
    let tmux = Tmux::start(
        "block",
        120,
        40,
        &format!("{BIN} lab blocking --duration 4 --interval 0.25; echo SCANPROF-EXIT=$?; sleep 60"),
    );
    let live = tmux.wait_for("a block in progress", Duration::from_secs(40), |s| {
        s.contains("LIVE") && s.contains("blocked now in ")
    });
    let line = live
        .lines()
        .find(|l| l.contains("blocked now in "))
        .expect("the line");
    assert!(
        line.contains("blocked now in sock_alloc_send_pskb for "),
        "{live}"
    );
    // How long so far: "2.61s", "33.20ms" or "850.0us" (a block that has just begun).
    let token = line
        .split("for ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("no duration in {line:?}"));
    let secs = [("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9), ("s", 1.0)]
        .iter()
        .find_map(|(unit, scale)| {
            let v: f64 = token.strip_suffix(unit)?.parse().ok()?;
            Some(v * scale)
        })
        .unwrap_or_else(|| panic!("no duration in {line:?}"));
    assert!(secs > 0.0 && secs < 4.0, "{line}");
    let _ = tmux.wait_for("the ended state", Duration::from_secs(40), |s| {
        s.contains("ENDED")
    });
    // The terminal closes on the ended view (SIGHUP, nobody left to press q): scanprof ends, and
    // its lab with it. It used to stay, spinning on the closed terminal, SIGTERM ignored too.
    let pid = scanprof_pid(&tmux);
    drop(tmux);
    let deadline = Instant::now() + Duration::from_secs(15);
    while std::path::Path::new(&format!("/proc/{pid}")).exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let alive = std::path::Path::new(&format!("/proc/{pid}")).exists();
    if alive {
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
    }
    assert!(!alive, "scanprof {pid} outlived its closed terminal by 15 s");
    for side in ["s", "t"] {
        let ns = format!("sp{pid}-0{side}");
        assert!(
            !std::path::Path::new("/run/netns").join(&ns).exists(),
            "lab namespace {ns} left behind"
        );
    }
    // Its summary, naming the command log, went to the closed terminal: the log is found as
    // the private directory made during this test that holds only a command log of this lab.
    remove_command_logs_since(test_start);
    test.assert_released("the test's scanprof processes ended");
}

/// Removes the command logs (a `/tmp/scanprof-XXXXXX` directory holding only `command.log`)
/// made since `since`.
fn remove_command_logs_since(since: std::time::SystemTime) {
    let Ok(dir) = std::fs::read_dir("/tmp") else {
        return;
    };
    for e in dir.filter_map(Result::ok) {
        let path = e.path();
        let named = e.file_name().to_string_lossy().starts_with("scanprof-");
        let new = e.metadata().and_then(|m| m.modified()).is_ok_and(|t| t >= since);
        let only_log = std::fs::read_dir(&path)
            .map(|d| {
                d.filter_map(Result::ok)
                    .map(|f| f.file_name())
                    .collect::<Vec<_>>()
            })
            .is_ok_and(|f| f.len() == 1 && f[0] == "command.log");
        if named && new && only_log {
            let _ = std::fs::remove_file(path.join("command.log"));
            let _ = std::fs::remove_dir(&path);
        }
    }
}

/// The pid of the scanprof the pane's shell started.
fn scanprof_pid(tmux: &Tmux) -> u32 {
    let pane = tmux.pane_pid();
    let pgrep = Command::new("pgrep")
        .args(["-P", &pane.to_string(), "-x", "scanprof"])
        .output()
        .expect("pgrep");
    String::from_utf8_lossy(&pgrep.stdout)
        .split_whitespace()
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no scanprof child of the pane's shell {pane}"))
}
