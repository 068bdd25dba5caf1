//! The lab's receive-side fixtures that count for themselves (issue 15): how `scanprof lab`
//! stages them and holds scanprof's figures against their own counters. The responder
//! (`responder-kinds`: `scanprof recv --respond`, packets of two kinds) is the first; each check
//! is a `FixtureCheck` in the lab report, and a failed one fails the scenario.

use serde::{Deserialize, Serialize};

use super::recv::RecvReport;
use super::relay::RelayReport;
use crate::analysis::Summary;

/// How a lab runs a fixture whose per-packet timing must not include other tasks' time:
/// SCHED_FIFO, so that no normal task preempts it inside the handling of a packet (its own
/// clock is the wall clock around each handling; scanprof's is on-CPU time).
pub const REALTIME: [&str; 3] = ["chrt", "-f", "10"];

/// Per-kind cost: scanprof's ns per packet of a class against the responder's own, relative.
pub const KIND_COST_TOLERANCE: f64 = 0.25;

/// A responder with two kinds of packet, fed by two senders, one per kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Respond {
    /// datagrams shorter than this are the cheap kind, bytes (also scanprof's class bound)
    pub split: usize,
    /// payload of the costly kind's sender, bytes (the cheap kind's is the scenario's size)
    pub costly_size: usize,
    /// work per kind, ns (cheap, costly)
    pub work_ns: [u64; 2],
    /// where replies go: this port of the datagram's source (a closed one)
    pub reply_port: u16,
    /// run it SCHED_FIFO (`REALTIME`), and hold scanprof's cost per class against its own
    /// time per kind (which counts a preemption inside a handling; SCHED_FIFO keeps them out)
    pub realtime: bool,
}

/// The `responder-kinds` scenario's responder: 64-byte datagrams cheap (200 ns), 512-byte
/// costly (8 us), replies to the discard port, where nothing listens in the lab.
pub const RESPONDER: Respond = Respond {
    split: 256,
    costly_size: 512,
    work_ns: [200, 8_000],
    reply_port: 9,
    realtime: true,
};

/// The `receiver-cpu-bound` scenario's responder: 100 us and 200 us of work. Fed 5,000 pps of
/// each kind, it needs about 1.6 CPUs (with its replies) and has one thread: it falls behind.
/// Not SCHED_FIFO: a real-time thread busy for seconds would starve the machine's other work.
pub const SLOW_RESPONDER: Respond = Respond {
    split: 256,
    costly_size: 512,
    work_ns: [100_000, 200_000],
    reply_port: 9,
    realtime: false,
};

impl Respond {
    /// The flags of `scanprof recv` that make it this responder.
    pub fn recv_args(&self) -> Vec<String> {
        vec![
            "--respond".into(),
            self.split.to_string(),
            "--work-ns".into(),
            format!("{},{}", self.work_ns[0], self.work_ns[1]),
            "--reply-port".into(),
            self.reply_port.to_string(),
        ]
    }

    /// The senders' command lines: the scenario's sender (the cheap kind), and the same with
    /// the costly kind's `--size`.
    pub fn sender_argvs(&self, cheap: &[String]) -> Vec<Vec<String>> {
        let mut costly = cheap.to_vec();
        match costly.iter().position(|a| a == "--size") {
            Some(i) if i + 1 < costly.len() => costly[i + 1] = self.costly_size.to_string(),
            _ => costly.extend(["--size".to_string(), self.costly_size.to_string()]),
        }
        vec![cheap.to_vec(), costly]
    }
}

/// The packet relay of the `relay` scenario: it reads the target's veth and writes each packet
/// to the target namespace's `lo` `outputs` times, from `pool` buffers, through a tbf on `lo`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Relay {
    /// outputs (each an --out lo): the fan-out
    pub outputs: usize,
    /// buffers in its pool
    pub pool: usize,
    /// the tbf on the target namespace's lo: rate and queue limit (tc's units)
    pub egress_rate: &'static str,
    pub egress_limit: &'static str,
}

/// 1 -> 3, 64 buffers, 20 Mbit/s of egress with a 10 kB queue.
pub const RELAY: Relay = Relay {
    outputs: 3,
    pool: 64,
    egress_rate: "20mbit",
    egress_limit: "10kb",
};

/// Relay counts: scanprof's against the relay's own, relative.
pub const RELAY_TOLERANCE: f64 = 0.01;

impl Relay {
    /// `scanprof relay` reading `input` for `duration_s`, writing its report to `report`.
    pub fn relay_args(&self, input: &str, duration_s: f64, report: &std::path::Path) -> Vec<String> {
        let mut a: Vec<String> = vec!["relay".into(), "--in".into(), input.into()];
        for _ in 0..self.outputs {
            a.extend(["--out".to_string(), "lo".to_string()]);
        }
        a.extend([
            "--pool".to_string(),
            self.pool.to_string(),
            "--duration".to_string(),
            duration_s.to_string(),
            "--report".to_string(),
            report.display().to_string(),
        ]);
        a
    }

    /// Brings the target namespace's lo up with the egress tbf on it (the namespace goes, and
    /// its qdisc with it, when the lab is deleted).
    pub fn stage_egress(&self, lab: &crate::lab::Lab) -> anyhow::Result<()> {
        use crate::system::netstat::run_in_netns;
        let ns = Some(lab.target_ns.as_str());
        run_in_netns(ns, "ip", &["link", "set", "lo", "up"])?;
        #[rustfmt::skip]
        run_in_netns(ns, "tc", &[
            "qdisc", "add", "dev", "lo", "root", "tbf",
            "rate", self.egress_rate, "burst", "4kb", "limit", self.egress_limit,
        ])?;
        Ok(())
    }
}

/// The relay's lost share by its own count: (kernel drops + pool drops) / what reached its
/// socket (tp_packets counts the dropped ones too).
pub fn relay_lost_share(own: &RelayReport) -> f64 {
    (own.kernel_drops + own.pool_drops) as f64 / own.kernel_packets.max(1) as f64
}

/// The relay's own counts against scanprof's relay funnel, each within RELAY_TOLERANCE.
pub fn relay_checks(own: &RelayReport, summary: &Summary) -> Vec<FixtureCheck> {
    let r = summary.relay.as_ref();
    vec![
        FixtureCheck::new(
            "packets read",
            own.received as f64,
            r.map(|r| r.read as f64),
            RELAY_TOLERANCE,
        ),
        FixtureCheck::new(
            "kernel drops before the read",
            own.kernel_drops as f64,
            r.map(|r| r.kernel_drops as f64),
            RELAY_TOLERANCE,
        ),
        FixtureCheck::new(
            "buffer-pool drops (read, never forwarded)",
            own.pool_drops as f64,
            r.map(|r| r.own_drops as f64),
            RELAY_TOLERANCE,
        ),
        FixtureCheck::new(
            "forwarded (writes done)",
            own.writes as f64,
            r.map(|r| r.sent as f64),
            RELAY_TOLERANCE,
        ),
    ]
}

/// One of scanprof's figures against the fixture's own.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FixtureCheck {
    /// what is compared, e.g. "cheap kind: packets read"
    pub what: String,
    /// the fixture's own figure
    pub fixture: f64,
    /// scanprof's; None when it has none
    pub scanprof: Option<f64>,
    /// largest relative difference allowed (0: equal)
    pub tolerance: f64,
    pub ok: bool,
}

impl FixtureCheck {
    pub fn new(what: impl Into<String>, fixture: f64, scanprof: Option<f64>, tolerance: f64) -> FixtureCheck {
        let ok = scanprof.is_some_and(|s| {
            if tolerance == 0.0 {
                s == fixture
            } else {
                (s - fixture).abs() <= tolerance * fixture.abs()
            }
        });
        FixtureCheck {
            what: what.into(),
            fixture,
            scanprof,
            tolerance,
            ok,
        }
    }

    /// The check as a report line.
    pub fn line(&self) -> String {
        let fmt = |v: f64| {
            if v.fract() == 0.0 {
                format!("{v:.0}")
            } else {
                format!("{v:.1}")
            }
        };
        let bound = if self.tolerance == 0.0 {
            "equal".to_string()
        } else {
            format!("within {:.0}%", self.tolerance * 100.0)
        };
        format!(
            "{}: fixture {} | scanprof {} ({bound}: {})",
            self.what,
            fmt(self.fixture),
            self.scanprof.map_or("none".to_string(), fmt),
            if self.ok { "yes" } else { "NO" }
        )
    }
}

/// The responder's own counts and handling time per kind against scanprof's classes (the time
/// only when `timed`: a responder that can be preempted counts other tasks' time in its own).
pub fn responder_checks(own: &RecvReport, summary: &Summary, timed: bool) -> Vec<FixtureCheck> {
    let receive = summary.receive.as_ref();
    let mut out = vec![FixtureCheck::new(
        "datagrams read",
        own.packets as f64,
        receive.map(|r| r.count("recv_packets") as f64),
        0.0,
    )];
    for (k, name) in ["cheap", "costly"].iter().enumerate() {
        let packets: u64 = own
            .workers
            .iter()
            .filter_map(|w| w.kinds.get(k))
            .map(|x| x.packets)
            .sum();
        let handled: u64 = own
            .workers
            .iter()
            .filter_map(|w| w.kinds.get(k))
            .map(|x| x.handled_ns)
            .sum();
        let class = receive.and_then(|r| r.classes.get(k));
        out.push(FixtureCheck::new(
            format!("{name} kind: packets read"),
            packets as f64,
            class.map(|c| c.packets as f64),
            0.0,
        ));
        if !timed {
            continue;
        }
        out.push(FixtureCheck::new(
            format!("{name} kind: ns handling each"),
            handled as f64 / packets.max(1) as f64,
            class.and_then(|c| c.ns_per_packet),
            KIND_COST_TOLERANCE,
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::receive::{ReceiveClass, ReceiveView};
    use crate::analysis::snapshot::Stage;
    use crate::commands::recv::{KindReport, WorkerReport};

    #[test]
    fn a_fixture_check_is_equal_or_within_its_tolerance() {
        assert!(FixtureCheck::new("n", 100.0, Some(100.0), 0.0).ok);
        assert!(!FixtureCheck::new("n", 100.0, Some(101.0), 0.0).ok);
        assert!(FixtureCheck::new("ns", 1000.0, Some(1249.0), 0.25).ok);
        assert!(!FixtureCheck::new("ns", 1000.0, Some(1251.0), 0.25).ok);
        assert!(!FixtureCheck::new("ns", 1000.0, None, 0.25).ok);
        assert_eq!(
            FixtureCheck::new("cheap kind: ns handling each", 9630.9, Some(10806.2), 0.25).line(),
            "cheap kind: ns handling each: fixture 9630.9 | scanprof 10806.2 (within 25%: yes)"
        );
    }

    #[test]
    fn the_costly_kinds_sender_differs_only_in_its_size() {
        let cheap: Vec<String> = [
            "ip", "netns", "exec", "s", "scanprof", "send", "--size", "64", "--rate", "5",
        ]
        .map(String::from)
        .to_vec();
        let both = RESPONDER.sender_argvs(&cheap);
        assert_eq!(both[0], cheap);
        let mut want = cheap.clone();
        want[7] = "512".into();
        assert_eq!(both[1], want);
        assert_eq!(
            RESPONDER.recv_args(),
            ["--respond", "256", "--work-ns", "200,8000", "--reply-port", "9"]
        );
    }

    #[test]
    fn the_responders_kinds_are_held_against_scanprofs_classes() {
        let kind = |packets, handled_ns| KindReport {
            packets,
            bytes: packets * 64,
            handled_ns,
            replies: packets,
        };
        let own = RecvReport {
            packets: 300,
            workers: vec![WorkerReport {
                packets: 300,
                kinds: vec![kind(200, 2_000_000), kind(100, 1_000_000)],
                ..Default::default()
            }],
            ..Default::default()
        };
        let class = |packets: u64, ns: f64| ReceiveClass {
            packets,
            ns_per_packet: Some(ns),
            ..Default::default()
        };
        let (_, mut summary) = crate::views::fixtures::rich_run();
        summary.receive = Some(ReceiveView {
            stages: vec![Stage {
                name: "recv_packets".into(),
                count: 300,
                pps: 0.0,
                total: 300,
                ratio: None,
            }],
            classes: vec![class(200, 12_000.0), class(100, 13_000.0)],
            ..Default::default()
        });
        let checks = responder_checks(&own, &summary, true);
        let ok: Vec<(&str, bool)> = checks.iter().map(|c| (c.what.as_str(), c.ok)).collect();
        assert_eq!(
            ok,
            [
                ("datagrams read", true),
                ("cheap kind: packets read", true),
                ("cheap kind: ns handling each", true),
                ("costly kind: packets read", true),
                // 10 us by its own clock, 13 us by scanprof's: 30% off
                ("costly kind: ns handling each", false),
            ]
        );
        // Untimed (a responder that can be preempted): the counts only.
        assert_eq!(responder_checks(&own, &summary, false).len(), 3);
    }

    #[test]
    fn the_relays_counts_are_held_against_scanprofs_relay_funnel_within_one_percent() {
        let own = RelayReport {
            fanout: 3,
            received: 10_000,
            writes: 18_000,
            pool_drops: 4_000,
            kernel_drops: 2_000,
            kernel_packets: 12_000,
            ..Default::default()
        };
        assert!((relay_lost_share(&own) - 0.5).abs() < 1e-12);
        let (_, mut summary) = crate::views::fixtures::rich_run();
        summary.relay = Some(crate::analysis::relay::RelayView {
            fanout: 3,
            read: 10_000,
            sent: 18_000,
            kernel_drops: 2_019,
            own_drops: 4_100,
            ..Default::default()
        });
        let ok: Vec<bool> = relay_checks(&own, &summary).iter().map(|c| c.ok).collect();
        // 2,019 of 2,000 is within 1%; 4,100 of 4,000 is not
        assert_eq!(ok, [true, true, false, true]);
        summary.relay = None;
        assert!(relay_checks(&own, &summary).iter().all(|c| !c.ok));
        assert_eq!(
            RELAY
                .relay_args("v0", 6.0, std::path::Path::new("/tmp/r.json"))
                .join(" "),
            "relay --in v0 --out lo --out lo --out lo --pool 64 --duration 6 --report /tmp/r.json"
        );
    }
}
