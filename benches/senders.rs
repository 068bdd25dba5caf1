//! What the reference sender (`scanprof send`) achieves on this machine, from one run:
//!
//! 1. Accuracy (achieved / requested pps) of the `tsc` and `clock` pacers at 100, 1k, 10k and
//!    100k pps, each averaged over 5 s (target: >= 99.9% on an idle machine), to loopback.
//! 2. The maximum rate of each send method (`--rate 0`, 2 s each) into a private namespace lab
//!    (the packet method cannot deliver to 127.0.0.0/8: IP_LOCALNET).
//! 3. Unlimited `sendto` against a minimal C sendto loop (built here with `cc` into a temporary
//!    directory), interleaved rounds, median ratio (target: >= 0.95).
//!
//! `cargo bench --bench senders` as root (raw and packet sockets, namespaces). Receivers are bound
//! UDP sockets nobody reads (once full, the kernel drops: the same cheap path for every sender).
//! Prints markdown tables for docs/senders.md.

use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::Command;

use scanprof::netlab::{Lab, LabConfig};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_scanprof");
const PORT: u16 = 9200;
const ACCURACY_SECONDS: u32 = 5;
const MAX_RATE_SECONDS: f64 = 2.0;
const C_ROUNDS: usize = 5;

/// The minimal C sender: sendto of a 64-byte UDP payload (sequence number stamped, like the
/// reference sender's) in a loop for `seconds`, then prints packets per second.
const C_LOOP: &str = r#"
#include <arpa/inet.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }
int main(int argc, char **argv) {
    if (argc != 4) return 2;
    struct sockaddr_in to = { .sin_family = AF_INET, .sin_port = htons(atoi(argv[2])) };
    if (inet_pton(AF_INET, argv[1], &to.sin_addr) != 1) return 2;
    if ((ntohl(to.sin_addr.s_addr) >> 24) != 127) return 3; /* loopback only */
    double seconds = atof(argv[3]);
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    if (fd < 0) return 4;
    unsigned char buf[64] = { 0 };
    uint64_t sent = 0, failed = 0;
    double start = now(), end = start;
    for (;;) {
        uint64_t seq = sent + failed;
        memcpy(buf, &seq, sizeof seq);
        if (sendto(fd, buf, sizeof buf, 0, (struct sockaddr *)&to, sizeof to) == sizeof buf) sent++; else failed++;
        if (((sent + failed) & 1023) == 0 && (end = now()) - start >= seconds) break;
    }
    printf("%.1f %llu %llu\n", sent / (end - start), (unsigned long long)sent, (unsigned long long)failed);
    return 0;
}
"#;

/// Runs `scanprof send ARGS --json` (optionally inside `netns`) and returns its report.
fn send(netns: Option<&str>, args: &[String]) -> Value {
    let mut cmd = match netns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns, BIN]);
            c
        }
        None => Command::new(BIN),
    };
    let out = cmd
        .arg("send")
        .args(args)
        .arg("--json")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {BIN}: {e}"));
    assert!(
        out.status.success(),
        "scanprof send {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("no JSON report ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

fn strings(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

fn f(v: &Value, key: &str) -> f64 {
    v[key].as_f64().unwrap_or(f64::NAN)
}

/// A bound UDP socket nobody reads, on 127.0.0.1:`port`.
fn loopback_sink(port: u16) -> UdpSocket {
    UdpSocket::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port))
        .unwrap_or_else(|e| panic!("cannot bind 127.0.0.1:{port}: {e}"))
}

fn build_c_loop(dir: &Path) -> PathBuf {
    let src = dir.join("sendto_loop.c");
    let exe = dir.join("sendto_loop");
    std::fs::write(&src, C_LOOP).expect("write the C source");
    let status = Command::new("cc")
        .args(["-O2", "-o"])
        .arg(&exe)
        .arg(&src)
        .status()
        .expect("cannot run cc");
    assert!(status.success(), "cc failed");
    exe
}

fn c_loop_pps(exe: &Path, port: u16, seconds: f64) -> f64 {
    let out = Command::new(exe)
        .args(["127.0.0.1", &port.to_string(), &seconds.to_string()])
        .output()
        .expect("cannot run the C loop");
    assert!(out.status.success(), "C loop failed: {out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_whitespace()
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("C loop printed {text}"))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn machine() -> String {
    let sh = |c: &str| {
        Command::new("sh")
            .args(["-c", c])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    };
    format!(
        "{} UTC; {}; {} vCPUs ({}); kernel {}; clocksource {}; load before: {}",
        sh("date -u '+%Y-%m-%d %H:%M'"),
        sh("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'"),
        sh("nproc"),
        sh("systemd-detect-virt 2>/dev/null || echo unknown"),
        sh("uname -r"),
        sh("cat /sys/devices/system/clocksource/clocksource0/current_clocksource"),
        sh("cut -d' ' -f1-3 /proc/loadavg"),
    )
}

fn main() {
    if !nix::unistd::geteuid().is_root() {
        panic!("this bench needs root (raw and packet sockets, network namespaces)");
    }
    println!("# scanprof send benchmark\n\nMachine: {}\n", machine());

    // Part 1: accuracy of tsc and clock.
    let _sink = loopback_sink(PORT);
    let to = format!("127.0.0.1:{PORT}");
    println!("## Accuracy over {ACCURACY_SECONDS} s, loopback, deadline slots\n");
    println!("| pacer | requested pps | achieved pps | accuracy | lateness p50 / p99 / max (ns) | gap p99 (ns) | CPU ns/pkt |");
    println!("|---|---:|---:|---:|---|---:|---:|");
    let mut calibration = Value::Null;
    for pacer in ["tsc", "clock"] {
        for rate in [100u32, 1_000, 10_000, 100_000] {
            let count = u64::from(rate * ACCURACY_SECONDS);
            let mut args = strings(&["--to", &to, "--pacer", pacer, "--rate"]);
            args.extend([rate.to_string(), "--count".into(), count.to_string()]);
            args.extend(strings(&["--duration", &(ACCURACY_SECONDS + 2).to_string()]));
            let r = send(None, &args);
            let l = &r["lateness_ns"];
            println!(
                "| {pacer} | {rate} | {:.2} | {:.4}% | {} / {} / {} | {} | {:.0} |",
                f(&r, "achieved_pps"),
                f(&r, "accuracy") * 100.0,
                l["p50"],
                l["p99"],
                l["max"],
                r["gap_ns"]["p99"],
                f(&r, "cpu_ns_per_packet"),
            );
            if pacer == "tsc" && calibration.is_null() {
                calibration = r["calibration"].clone();
            }
        }
    }
    println!("\ntsc calibration (first run): {calibration}\n");

    // Part 2: maximum rate per method, into a lab.
    let lab = Lab::create(&LabConfig::default()).unwrap_or_else(|e| panic!("cannot create a lab: {e:#}"));
    let target = SocketAddrV4::new(lab.target_addr, PORT);
    let _lab_sink = lab
        .in_target(move || UdpSocket::bind(target))
        .expect("enter the target namespace")
        .expect("bind the lab sink");
    let lab_to = target.to_string();
    println!("## Maximum rate per method ({MAX_RATE_SECONDS} s each, `--rate 0`, 64 B, veth into a lab namespace)\n");
    println!("| method | pps | CPU ns/pkt | failed |");
    println!("|---|---:|---:|---:|");
    let methods: [&[&str]; 5] = [
        &["--method", "sendto"],
        &["--method", "raw"],
        &["--method", "sendmmsg", "--batch", "32"],
        &["--method", "packet"],
        &["--method", "packet", "--ring", "--batch", "32"],
    ];
    for extra in methods {
        let mut args = strings(&[
            "--to",
            &lab_to,
            "--rate",
            "0",
            "--count",
            "100000000",
            "--duration",
        ]);
        args.push(MAX_RATE_SECONDS.to_string());
        args.extend(strings(extra));
        let r = send(Some(&lab.sender_ns), &args);
        println!(
            "| {} | {:.0} | {:.0} | {} |",
            extra.join(" ").replace("--method ", ""),
            f(&r, "achieved_pps"),
            f(&r, "cpu_ns_per_packet"),
            r["failed"]
        );
    }
    drop(lab);

    // Part 3: unlimited sendto against the C loop, interleaved.
    let dir = std::env::temp_dir().join(format!("scanprof-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let exe = build_c_loop(&dir);
    println!("\n## Unlimited sendto vs a minimal C sendto loop (loopback, 64 B, {C_ROUNDS} interleaved rounds of {MAX_RATE_SECONDS} s)\n");
    println!("| round | scanprof send pps | C loop pps | ratio |");
    println!("|---:|---:|---:|---:|");
    let mut ratios = Vec::new();
    for round in 1..=C_ROUNDS {
        let mut args = strings(&["--to", &to, "--rate", "0", "--count", "100000000", "--duration"]);
        args.push(MAX_RATE_SECONDS.to_string());
        let ours = f(&send(None, &args), "achieved_pps");
        let c = c_loop_pps(&exe, PORT, MAX_RATE_SECONDS);
        ratios.push(ours / c);
        println!("| {round} | {ours:.0} | {c:.0} | {:.3} |", ours / c);
    }
    println!("\nmedian ratio: {:.3} (target >= 0.95)", median(ratios));
    let _ = std::fs::remove_dir_all(&dir);
}
