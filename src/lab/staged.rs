//! One scenario staged around a profiled run: the lab created for it, the helpers in the
//! target namespace, the disturbances on the sender and the watch on it, started before the
//! session launches the command (`Staged::start`), then stopped and read into the lab's report
//! once the session has ended (`Staged::finish`), the lab deleted.

use std::path::Path;
use std::time::Duration;

use anyhow::Context;

use super::cgroup::{CpuQuota, QuotaMover};
use super::conntrack::ConntrackFill;
use super::disturb::{Hog, SchedWatch, SenderId, Staller};
use super::receivers::{open_tcp_listeners, Echo, ListenerRun};
use super::reference::relay::RelayReport;
use super::reference::ring_recv::RingRecvReport;
use super::reference::worker_sender_argvs;
use super::scenario::{
    never_started_argv, scenario_name, Staging, CONNECT_SCAN_PROFILE, RUN_GRACE_S, UDP_SCAN_ICMP,
};
use super::sender::{sender_argv, syn_scan_argv, udp_scan_argv, Placement};
use super::truth::{check, measured_truth, Counts, LabReport};
use crate::analysis::{DropRow, StageName, Summary};
use crate::cli::{LabOptions, RunOptions, Scenario};
use crate::collect::DropClass;
use crate::netlab::{Lab, LabConfig, SinkReport, UdpSink};
use crate::system::netstat;

/// A scenario's lab with everything started around the run; dropping it undoes them all (the
/// global conntrack limit restored, the cgroup removed, the lab deleted), also on an error or a
/// panic.
pub struct Staged {
    scenario: Scenario,
    stage: Staging,
    /// the sender's rate, pps
    rate: f64,
    /// the sender's duration, s
    duration_s: f64,
    /// what the session launches and profiles: the sender, or a receive scenario's listener
    pub argv: Vec<String>,
    // Fields drop in order: the last started goes first, the lab last.
    staller: Option<Staller>,
    watch: SchedWatch,
    mover: Option<QuotaMover>,
    listening: Option<ListenerRun>,
    before: Counts,
    _listeners: Option<Vec<std::net::TcpListener>>,
    echo: Option<Echo>,
    sink: Option<UdpSink>,
    hog: Option<Hog>,
    placement: Placement,
    quota: Option<CpuQuota>,
    conntrack: Option<ConntrackFill>,
    lab: Lab,
}

impl Staged {
    /// Creates the scenario's lab and starts what it needs, in the order the scenario depends
    /// on: the hog before any thread of ours, the sink, echo and listeners before the sender,
    /// and the watch on the sender before the session launches it.
    pub fn start(
        scenario: Scenario,
        mut stage: Staging,
        rate: f64,
        duration_s: f64,
        exe: &Path,
    ) -> anyhow::Result<Staged> {
        let lab = Lab::create_watched(&LabConfig {
            tbf: stage.tbf.take(),
        })?;
        if stage.fast_neighbour_failure {
            let dev = &lab.sender_dev;
            #[rustfmt::skip]
            netstat::run_in_netns(Some(&lab.sender_ns), "sysctl", &[
                "-qw",
                &format!("net.ipv4.neigh.{dev}.mcast_solicit=1"),
                &format!("net.ipv4.neigh.{dev}.ucast_solicit=0"),
                &format!("net.ipv4.neigh.{dev}.retrans_time_ms=100"),
            ])?;
        }
        if stage.udp_scan_ports.is_some() {
            netstat::run_in_netns(
                Some(&lab.target_ns),
                "sysctl",
                &[["-qw"].as_slice(), &UDP_SCAN_ICMP].concat(),
            )?;
        }
        // Both undone on drop, also on an error or a panic: the global conntrack limit restored,
        // the cgroup removed.
        let conntrack = stage
            .conntrack_free
            .map(|free| ConntrackFill::start(&lab, free))
            .transpose()?;
        let quota = stage.cpu_quota.map(CpuQuota::create).transpose()?;
        let placement = Placement::choose()?;
        // Started before any thread of ours (the sink, the session), and bounded like the run.
        let hog = if stage.hog {
            Some(Hog::start(placement.sender_cpu, duration_s + RUN_GRACE_S)?)
        } else {
            None
        };
        let sink = if stage.sink {
            Some(lab.udp_sink(stage.port)?)
        } else {
            None
        };
        let echo = if stage.echo {
            Some(Echo::start(&lab, stage.port)?)
        } else {
            None
        };
        // Held open until the lab is gone: a SYN to any of them is answered with a SYN-ACK.
        let listeners = stage
            .syn_scan_ports
            .map(|n| open_tcp_listeners(&lab, n))
            .transpose()?;
        let before = Counts::read(&lab);
        let send_argv = match (stage.syn_scan_ports, stage.udp_scan_ports) {
            (Some(n), _) => syn_scan_argv(&lab, n, placement.sender_cpu, rate),
            (None, Some(n)) => udp_scan_argv(&lab, n, placement.sender_cpu, rate),
            (None, None) if stage.never_sends => never_started_argv(&lab),
            (None, None) => sender_argv(&lab, &stage, placement.sender_cpu, exe, rate, duration_s),
        };
        // A receive scenario profiles the listener; the sender starts beside it, unprofiled,
        // once the listener's port is bound.
        let listening = stage
            .listener
            .map(|l| {
                let argvs = match l.respond {
                    Some(r) => r.sender_argvs(&send_argv),
                    None if l.workers > 1 => worker_sender_argvs(&send_argv, l.workers),
                    None => vec![send_argv.clone()],
                };
                ListenerRun::start(&lab, l, stage.port, exe, duration_s, argvs)
            })
            .transpose()?;
        let argv = listening.as_ref().map_or(send_argv, |l| l.argv.clone());
        let hog_pid = hog.as_ref().map(|h| h.pid.as_raw() as u32);
        let sender = SenderId::new(exe, hog_pid);
        let mover = quota
            .as_ref()
            .map(|q| q.take_sender(sender.clone()))
            .transpose()?;
        let watch = SchedWatch::start(sender.clone())?;
        let staller = stage.stall.map(|st| Staller::start(st, sender)).transpose()?;
        Ok(Staged {
            scenario,
            stage,
            rate,
            duration_s,
            argv,
            lab,
            conntrack,
            quota,
            placement,
            hog,
            sink,
            echo,
            _listeners: listeners,
            before,
            listening,
            mover,
            watch,
            staller,
        })
    }

    /// The run's options: the lab's own (`o`), and what the scenario profiles.
    pub fn run_options(&self, o: &LabOptions) -> RunOptions {
        let stage = &self.stage;
        let listening = self.listening.is_some();
        RunOptions {
            interval: o.interval,
            // The sender ends itself; this bounds the run if it hangs.
            duration: Some(o.duration + RUN_GRACE_S),
            // A listener is asked for no send rate: its funnel is the receive side. nmap's
            // --max-rate is a cap, not a rate asked for.
            requested: (!listening && stage.syn_scan_ports.is_none() && stage.udp_scan_ports.is_none())
                .then_some(self.rate),
            // The reference sender's profile fits `scanprof send`, not the listener or nmap.
            profile: Some(if listening || stage.never_sends {
                crate::wrappers::GENERIC_PROFILE.to_string()
            } else if stage.connect_scan {
                CONNECT_SCAN_PROFILE.to_string()
            } else if stage.syn_scan_ports.is_some() || stage.udp_scan_ports.is_some() {
                "nmap".to_string()
            } else {
                o.profile.clone()
            }),
            per_packet: None,
            json: o.json,
            no_tui: o.no_tui,
            exit_at_end: o.exit_at_end,
            quiet: o.quiet,
            baseline: false,
            baseline_pacer: crate::wrappers::PacerKind::Tsc,
            baseline_seconds: 2.0,
            export: o.export.clone(),
            force: o.force,
            redact: false,
            pcap: o.pcap.clone(),
            metrics: o.metrics,
            metrics_file: o.metrics_file.clone(),
            metrics_linger: 0.0,
            run_id: None,
            map_size: Vec::new(),
            bpf_stats: crate::cli::BpfStatsArg::Sampled,
            syscall_hooks: crate::cli::SyscallHooksArg::PerCall,
            device_stages: crate::cli::DeviceStagesArg::Exact,
            sample_above: None,
            user: None,
            recv_classes: stage
                .listener
                .and_then(|l| l.respond)
                .map_or_else(Vec::new, |r| vec![r.split as u32]),
            relay_fanout: stage.listener.and_then(|l| l.relay).map(|r| r.outputs as u32),
        }
    }

    /// Whether the sender runs under a CPU quota (the session keeps the capability to move it
    /// back).
    pub fn has_quota(&self) -> bool {
        self.quota.is_some()
    }

    /// Stops what was started, reads the independent counts, holds `summary` against them and
    /// deletes the lab.
    pub fn finish(self, summary: &Summary) -> anyhow::Result<LabReport> {
        let Staged {
            scenario,
            stage,
            rate,
            duration_s,
            argv: _,
            lab,
            conntrack,
            quota,
            placement,
            hog,
            sink,
            echo,
            _listeners,
            before,
            listening,
            mover,
            watch,
            staller,
        } = self;
        let sched = watch.finish();
        let stalls = staller.map(Staller::finish);
        let hog = hog.map(Hog::stop);
        let moved = mover.map(QuotaMover::finish);
        drop(placement);
        // Let the last packets drain through the lab before reading the independent counters.
        std::thread::sleep(Duration::from_millis(300));
        let receiver = sink.map(|s| s.stop());
        let echoed = echo.map(Echo::finish);
        // The profiled process's own report: the relay's, the ring reader's, or the listener's.
        let (mut listener, mut relay_own, mut ring_own) = (None, None, None);
        match (stage.listener, listening) {
            (Some(l), Some(run)) if l.relay.is_some() => {
                let text = run.finish_text()?;
                let own: RelayReport =
                    serde_json::from_str(&text).context("the relay's report is not JSON")?;
                relay_own = Some(own);
            }
            (Some(l), Some(run)) if l.ring.is_some() => {
                let text = run.finish_text()?;
                let own: RingRecvReport =
                    serde_json::from_str(&text).context("the ring reader's report is not JSON")?;
                ring_own = Some(own);
            }
            (_, run) => listener = run.map(ListenerRun::finish).transpose()?,
        }
        let qdisc = lab.sender_qdisc().unwrap_or_default();
        let mut counts = Counts::read(&lab).since(before);
        counts.run_delay_s = sched.map(|s| s.run_delay_ns as f64 / 1e9);
        counts.echoed = echoed;
        counts.receiver_pps = receiver.as_ref().and_then(SinkReport::pps);
        let conntrack = conntrack.map(ConntrackFill::finish).transpose()?;
        let cgroup = quota.map(|q| q.finish(moved)).transpose()?;
        counts.relay_lost_share = relay_own.as_ref().map(super::reference::relay_lost_share);
        counts.ring_drop_share = ring_own.as_ref().map(super::reference::ring_drop_share);
        let truth = measured_truth(stage.expect.truth, rate, duration_s, counts, &qdisc);
        let workers = stage.listener.map_or(1, |l| l.workers);
        let fixture_checks = match (
            stage.listener.and_then(|l| l.respond),
            &listener,
            &relay_own,
            &ring_own,
        ) {
            (Some(r), Some(own), _, _) => super::reference::responder_checks(own, summary, r.realtime),
            (_, _, Some(own), _) => super::reference::relay_checks(own, summary),
            (_, _, _, Some(own)) => super::reference::ring_checks(own, summary),
            (None, Some(own), _, _) if workers > 1 => super::reference::worker_checks(own, summary),
            _ if stage.udp_scan_ports.is_some() => super::truth::reply_checks(&counts, summary),
            _ => Vec::new(),
        };
        let mut check = check(&stage.expect, summary, truth);
        check.ok &= fixture_checks.iter().all(|c| c.ok);
        let report = LabReport {
            scenario: scenario_name(scenario),
            requested_pps: rate,
            duration_s,
            receiver_pps: receiver.as_ref().and_then(|r| r.pps()),
            receiver,
            qdisc,
            target_ip_in: counts.target_ip_in,
            sender_udp_out: counts.sender_udp_out,
            sender_rcvbuf_errors: counts.sender_rcvbuf_errors,
            target_udp_in: counts.target_udp_in,
            target_rcvbuf_errors: counts.target_rcvbuf_errors,
            sender_tcp_active_opens: counts.sender_tcp_active_opens.filter(|_| stage.connect_scan),
            scanprof_connect_syns: summary.connect.map(|c| c.syns),
            target_tcp_out: counts.target_tcp_out,
            sender_kernel_out: counts.sender_kernel_out,
            sender_link_tx: counts.sender_link_tx,
            listener,
            relay: relay_own,
            ring: ring_own,
            scanprof_recv_packets: summary.receive.as_ref().map(|r| r.count(StageName::RecvPackets)),
            scanprof_rcvbuf_drops: summary.receive.as_ref().map(|r| r.drops_of("SOCKET_RCVBUFF")),
            echoed,
            stalls,
            hog,
            sender_cpu_s: sched.map(|s| s.cpu_ns as f64 / 1e9),
            sender_run_delay_s: counts.run_delay_s,
            scanprof_packets: summary.packets,
            scanprof_achieved_pps: summary.achieved_pps,
            scanprof_target_drops: DropRow::sum_of(&summary.drops, DropClass::TargetLoss),
            truth_kind: stage.expect.truth,
            check,
            fixture_checks,
            sender_ct_drops: counts.sender_ct_drops.filter(|_| conntrack.is_some()),
            conntrack,
            cgroup,
        };
        lab.destroy()?;
        Ok(report)
    }
}
