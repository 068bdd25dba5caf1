//! The lab's sender: the CPU it runs on, apart from the lab's own threads, and its command line
//! (the reference sender, or nmap for a SYN scan).

use anyhow::Context;
use nix::sched::{sched_getaffinity, sched_setaffinity, CpuSet};
use nix::unistd::Pid;

use super::scenario::{connect_argv, unanswered_address, Staging, OPEN_TCP_BASE, SENDER_NICE};
use crate::netlab::Lab;

/// Where the run's tasks go: the sender on a CPU of its own (the last this process may use),
/// the lab's own threads (receiver, profiler) on the others, so that the scenario's fault is
/// the only thing slowing the sender. Undone on drop.
pub struct Placement {
    pub sender_cpu: usize,
    /// this thread's affinity before, restored on drop (None: nothing was changed)
    saved: Option<CpuSet>,
}

impl Placement {
    /// Moves the calling thread (and so the threads and children it starts later) off the
    /// sender's CPU, when there is another CPU to go to.
    pub fn choose() -> anyhow::Result<Placement> {
        let allowed =
            sched_getaffinity(Pid::from_raw(0)).context("cannot read this process's CPU affinity")?;
        let cpus: Vec<usize> = (0..CpuSet::count())
            .filter(|&c| allowed.is_set(c).unwrap_or(false))
            .collect();
        let sender_cpu = *cpus.last().context("no CPU in this process's affinity mask")?;
        if cpus.len() < 2 {
            return Ok(Placement {
                sender_cpu,
                saved: None,
            });
        }
        let mut others = allowed;
        others.unset(sender_cpu).context("cannot build a CPU mask")?;
        sched_setaffinity(Pid::from_raw(0), &others)
            .context("cannot move the lab's threads off the sender's CPU")?;
        Ok(Placement {
            sender_cpu,
            saved: Some(allowed),
        })
    }
}

impl Drop for Placement {
    fn drop(&mut self) {
        if let Some(set) = &self.saved {
            let _ = sched_setaffinity(Pid::from_raw(0), set);
        }
    }
}

/// The sender's command line: `ip netns exec` into the sender namespace, its own session and
/// scheduling group at nice -20 (unless the hog is the fault), pinned to `cpu`, then
/// `scanprof send` with the scenario's flags.
pub fn sender_argv(
    lab: &Lab,
    stage: &Staging,
    cpu: usize,
    exe: &std::path::Path,
    rate: f64,
    duration_s: f64,
) -> Vec<String> {
    let mut argv: Vec<String> = vec!["ip".into(), "netns".into(), "exec".into(), lab.sender_ns.clone()];
    // Only the staged fault should slow the sender: unless the hog is that fault, the sender
    // outweighs other work on the machine for its CPU.
    if !stage.hog {
        let lift = format!("echo {SENDER_NICE} > /proc/self/autogroup 2>/dev/null; exec \"$@\"");
        argv.extend(
            [
                "setsid",
                "sh",
                "-c",
                &lift,
                "scanprof-lab",
                "nice",
                "-n",
                SENDER_NICE,
            ]
            .map(String::from),
        );
    }
    argv.extend(["taskset".to_string(), "-c".to_string(), cpu.to_string()]);
    if stage.connect_scan {
        argv.extend(connect_argv(lab, rate, duration_s));
        return argv;
    }
    argv.push(exe.display().to_string());
    argv.extend(
        [
            "send",
            "--to",
            &format!(
                "{}:{}",
                if stage.unanswered {
                    unanswered_address(lab)
                } else {
                    lab.target_addr
                },
                stage.port
            ),
            "--rate",
            &rate.to_string(),
            "--duration",
            &duration_s.to_string(),
            "--size",
            &stage.size.to_string(),
        ]
        .map(String::from),
    );
    if let Some(b) = stage.sndbuf {
        argv.extend(["--sndbuf".to_string(), b.to_string()]);
    }
    argv.extend(stage.flags.iter().map(|f| f.to_string()));
    argv
}

/// `ip netns exec SENDER taskset -c CPU nmap -sU --send-ip ... -p 1-ports TARGET`: one UDP
/// probe per port at `rate` (nmap's --min-rate and --max-rate), no retry, to the lab's target
/// only (--disable-arp-ping), through a raw IP socket (--send-ip).
pub fn udp_scan_argv(lab: &Lab, ports: u16, cpu: usize, rate: f64) -> Vec<String> {
    let rate = format!("{}", rate.round().max(1.0));
    #[rustfmt::skip]
    let argv = [
        "ip", "netns", "exec", &lab.sender_ns, "taskset", "-c", &cpu.to_string(),
        "nmap", "-sU", "--send-ip", "-n", "-Pn", "--disable-arp-ping", "--max-retries", "0",
        "--min-rate", &rate, "--max-rate", &rate,
        "-p", &format!("1-{ports}"), &lab.target_addr.to_string(),
    ];
    argv.map(String::from).to_vec()
}

/// `ip netns exec SENDER taskset -c CPU nmap -sS ... -p BASE-(BASE+ports-1) TARGET`: one SYN
/// per port, to the lab's target only (--disable-arp-ping: no ARP request first, even with -Pn).
pub fn syn_scan_argv(lab: &Lab, ports: u16, cpu: usize, rate: f64) -> Vec<String> {
    let last = OPEN_TCP_BASE + ports.saturating_sub(1);
    #[rustfmt::skip]
    let argv = [
        "ip", "netns", "exec", &lab.sender_ns, "taskset", "-c", &cpu.to_string(),
        "nmap", "-sS", "-n", "-Pn", "--disable-arp-ping", "--max-retries", "0",
        "--max-rate", &format!("{}", rate.round().max(1.0)),
        "-p", &format!("{OPEN_TCP_BASE}-{last}"), &lab.target_addr.to_string(),
    ];
    argv.map(String::from).to_vec()
}
