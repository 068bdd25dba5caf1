//! What the live terminal view costs: scanprof attached to a sender whose packets are nearly all
//! dropped at a tbf qdisc (hundreds of thousands of kfree_skb events per second), once with the
//! view in a real pty (`script`) and once with `--no-tui`, alternating. Prints scanprof's CPU
//! (user + system from wait4, as a share of one core), its peak RSS, and the drop rate its
//! probes saw; the view's cost is the difference. `cargo bench --bench tui`, as root.

use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use scanprof::netlab::{Lab, LabConfig, TbfConfig};

const BIN: &str = env!("CARGO_BIN_EXE_scanprof");
/// Seconds per measured run.
const RUN_S: u64 = 6;
const REPEATS: usize = 3;

struct Measured {
    cpu: f64,
    max_rss_mib: f64,
    drops_per_s: f64,
}

/// Runs `scanprof attach` in a 100x30 pty and returns its CPU share, peak RSS and drop rate.
fn measure(pid: u32, tui: bool) -> Measured {
    let flags = if tui { "" } else { " --no-tui" };
    let inner = format!("stty cols 100 rows 30; {BIN} attach -p {pid} --duration {RUN_S}{flags}");
    // Reaped by the wait4 below, which also reads its resource usage.
    #[allow(clippy::zombie_processes)]
    let child = Command::new("script")
        .args(["-qfec", &inner, "/dev/null"])
        .env("TERM", "xterm-256color")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("script (util-linux) runs the view in a pty");
    let child_pid = nix::unistd::Pid::from_raw(child.id() as i32);
    // The view keeps the final state on screen until the user quits: press `q` after the run.
    let mut keys = child.stdin.expect("piped");
    std::thread::spawn(move || {
        use std::io::Write;
        std::thread::sleep(Duration::from_millis(RUN_S * 1000 + 1500));
        let _ = keys.write_all(b"q");
        // Keep the pty's input open until scanprof has read it.
        std::thread::sleep(Duration::from_secs(30));
    });
    let out = child.stdout.expect("piped");
    let reader = std::thread::spawn(move || std::io::read_to_string(out).unwrap_or_default());
    let mut status = 0;
    // SAFETY: rusage is integers and timevals only, for which all-zero bytes are a value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: wait4 writes the child's status and resource usage (its waited-for descendants
    // included, so scanprof's) into the two locals, which outlive the call.
    let r = unsafe { libc::wait4(child_pid.as_raw(), &mut status, 0, &mut usage) };
    assert_eq!(r, child_pid.as_raw(), "wait4 failed");
    assert_eq!(
        std::process::ExitStatus::from_raw(status).code(),
        Some(0),
        "scanprof failed"
    );
    let text = reader.join().unwrap_or_default();
    let cpu_s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    // The text summary's drop line: "target_drops   123456.7 /s ...".
    let drops_per_s = text
        .lines()
        .find_map(|l| l.trim_start().strip_prefix("target_drops"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(0.0);
    Measured {
        // Over the measured run: the view's idle second on screen before `q` adds ~nothing.
        cpu: (cpu_s(usage.ru_utime) + cpu_s(usage.ru_stime)) / RUN_S as f64,
        max_rss_mib: usage.ru_maxrss as f64 / 1024.0,
        drops_per_s,
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Drops per second the probes must see in every run for its figures to count.
const MIN_DROPS_PER_S: f64 = 10_000.0;

fn main() {
    assert!(nix::unistd::geteuid().is_root(), "the view benchmark needs root");
    // 1 Mbit/s with a 2 kB queue: nearly every packet is a QDISC_DROP.
    let lab = Lab::create(&LabConfig {
        tbf: Some(TbfConfig {
            rate: "1mbit".into(),
            burst: "4kb".into(),
            limit: "2kb".into(),
        }),
    })
    .expect("creating the lab");
    let total_s = (RUN_S + 2) * 2 * REPEATS as u64 + 4;
    let args: Vec<String> = [
        "send",
        "--to",
        &format!("{}:9000", lab.target_addr),
        "--rate",
        "0",
        "--duration",
        &total_s.to_string(),
        "--method",
        "sendmmsg",
        "--batch",
        "64",
        "--size",
        "64",
    ]
    .map(String::from)
    .to_vec();
    let mut sender = lab
        .command_in_sender(BIN, &args)
        .stdout(Stdio::null())
        .spawn()
        .expect("starting the sender");
    std::thread::sleep(Duration::from_secs(1));

    let (mut tui, mut text) = (Vec::new(), Vec::new());
    for i in 0..REPEATS {
        for with_view in [true, false] {
            let m = measure(sender.id(), with_view);
            // The load this bench is about: attached to a sender already flooding the tbf, the
            // probes must see its drops (a run that saw none measured an idle view).
            assert!(
                m.drops_per_s >= MIN_DROPS_PER_S,
                "run {i}: scanprof saw {:.0} drops/s, under {MIN_DROPS_PER_S}: the drop scenario did not \
                 happen (or attribution after attach is broken), so the view's cost was not measured under load",
                m.drops_per_s
            );
            println!(
                "run {i} {:>7}: scanprof CPU {:5.2}% of a core, peak RSS {:5.1} MiB, drops seen {:>9.0}/s",
                if with_view { "view" } else { "no-tui" },
                m.cpu * 100.0,
                m.max_rss_mib,
                m.drops_per_s
            );
            if with_view {
                tui.push(m)
            } else {
                text.push(m)
            }
        }
    }
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(sender.id() as i32),
        nix::sys::signal::SIGTERM,
    );
    let _ = sender.wait();
    lab.destroy().expect("removing the lab");

    let cpu_view = median(tui.iter().map(|m| m.cpu).collect());
    let cpu_text = median(text.iter().map(|m| m.cpu).collect());
    let drops = median(tui.iter().chain(&text).map(|m| m.drops_per_s).collect());
    let rss = tui.iter().map(|m| m.max_rss_mib).fold(0.0, f64::max);
    println!("\nmedians over {REPEATS} runs of {RUN_S} s, probes seeing {drops:.0} drops/s:");
    println!(
        "  scanprof with the view:   {:.2}% of a core (peak RSS {rss:.1} MiB)",
        cpu_view * 100.0
    );
    println!("  scanprof with --no-tui:   {:.2}% of a core", cpu_text * 100.0);
    let view = (cpu_view - cpu_text) * 100.0;
    println!(
        "  the view itself:          {view:.2}% of a core (target: under 3%) -> {}",
        if view < 3.0 { "met" } else { "NOT met" }
    );
}
