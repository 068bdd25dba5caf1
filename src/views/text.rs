//! The readable report printed at the end of a headless run, and the one-line tick status.

use std::fmt::Write as _;

use crate::analysis::verdict::{Confidence, Listing};
use crate::analysis::{ConnectView, Cost, ReceiveView, RunPhase, ScannerView, Snapshot, StageName, Summary};
use crate::collect::DropClass;
use crate::units::{duration as ns, pct};
use crate::views::report::{visible, visible_lines, DropTable, Report};

/// One line per tick: elapsed time, achieved vs requested (a tick outside a whole stretch of
/// sending says what the family did instead: `Snapshot::phase_text`), drops of the target this
/// tick.
pub fn tick_line(s: &Snapshot) -> String {
    let mut out = format!("[{:7.1} s] ", s.t_s);
    match s.phase {
        RunPhase::Sending => {
            let _ = write!(out, "achieved {:>10.1} {}", s.achieved_pps, s.rate_unit());
            if let (Some(req), Some(r)) = (s.requested_pps, s.ratio) {
                let _ = write!(out, " of {req:.0} requested ({:5.1}%)", r * 100.0);
            }
            if let Some(why) = s.phase_text() {
                let _ = write!(out, " ({why})");
            }
        }
        RunPhase::Starting | RunPhase::Waiting | RunPhase::Ended => {
            out.push_str(&s.phase_text().unwrap_or_default());
        }
    }
    let lost: f64 = s
        .drops
        .iter()
        .filter(|d| d.class == DropClass::TargetLoss)
        .map(|d| d.rate)
        .sum();
    if lost > 0.0 {
        let _ = write!(out, ", target packets dropped {lost:.1}/s");
    }
    if let Some(b) = &s.cost.bpf {
        let _ = write!(
            out,
            ", probes on target threads {} per packet, {} ({})",
            b.target_ns_per_packet.map_or("-".to_string(), ns),
            b.share_text(),
            b.coverage_text()
        );
        if let Some(m) = b.machine_cpu_share {
            let _ = write!(out, ", tax on the rest of the machine {} of a CPU", pct(m));
        }
        if let Some(share) = b.share_of_target.filter(|_| b.alert) {
            let _ = write!(out, " PROBES TAKE {} OF A BUSY TARGET'S CPU", pct(share));
        }
    }
    out
}

/// When the family sent, and what followed its last send until the run ended (a scanner's wait
/// for late replies is no part of the send window the rates and verdicts cover).
pub fn phase_line(s: &Summary) -> Option<String> {
    let (first, last) = (s.first_send_s?, s.last_send_s?);
    let after = (s.duration_s - last).max(0.0);
    let wait = s.scanner.as_ref().and_then(|sc| sc.wait.as_deref());
    let then = match s.phase {
        RunPhase::Ended => "the family exited".to_string(),
        RunPhase::Waiting => format!(
            "the family was alive and not sending ({}, or paused)",
            wait.unwrap_or("waiting for late replies")
        ),
        RunPhase::Sending | RunPhase::Starting => "the run ended".to_string(),
    };
    Some(format!(
        "sent from {first:.2} s to {last:.2} s after attach; {after:.2} s later {then} (rates and verdicts are over the send window)"
    ))
}

/// What scanprof's BPF programs cost over the run (or a tick), in plain lines: what the target
/// pays (its share, or why there is none), the tax on the rest of the machine apart, the
/// costliest programs, and the alert when they take more than 5% of a busy target's time.
pub fn probe_cost_lines(c: &Cost) -> Vec<String> {
    let Some(b) = &c.bpf else {
        return vec![
            "scanprof's BPF programs: run time not measured (--bpf-stats off, or the kernel refused its statistics)".to_string(),
        ];
    };
    let mut out = Vec::new();
    if b.target_timed {
        out.push(format!(
            "scanprof's BPF programs on the target's threads: {} per target packet, {} ({}; the programs' runs \
             while a target thread was on the CPU, {}, over the target threads' on-CPU time)",
            b.target_ns_per_packet.map_or("-".to_string(), ns),
            b.share_text(),
            b.coverage_text(),
            b.timed_text()
        ));
        if let Some(tax) = b.machine_text() {
            out.push(format!("  {tax}"));
        }
    } else {
        out.push(format!(
            "scanprof's BPF programs: {} per target packet wherever they ran ({}); {}",
            b.ns_per_packet.map_or("-".to_string(), ns),
            b.coverage_text(),
            b.share_text()
        ));
    }
    let top: Vec<String> = b
        .programs
        .iter()
        .take(4)
        .filter_map(|p| {
            let mine = p
                .target_ns_per_packet
                .map_or(String::new(), |t| format!(", {} on the target's threads", ns(t)));
            Some(format!(
                "{} {}{mine} ({} a run)",
                p.name,
                ns(p.ns_per_packet?),
                ns(p.ns_per_run?)
            ))
        })
        .collect();
    if !top.is_empty() {
        out.push(format!("  per packet, all runs: {}", top.join(", ")));
    }
    if let Some(alert) = b.alert_text() {
        out.push(format!("WARNING: {alert}"));
    }
    out
}

/// The end-of-run report: its sections in reading order, each a function below.
pub fn summary(s: &Summary) -> String {
    let r = Report::new(s);
    let mut o = String::new();
    headline(&mut o, s, &r);
    verdict_section(&mut o, &r.verdicts);
    drops_section(&mut o, s, &r);
    family_section(&mut o, &r);
    if let Some(sc) = &s.scanner {
        scanner_section(&mut o, sc);
    }
    funnel_section(&mut o, s, &r);
    if let Some(r) = &s.receive {
        receive_section(&mut o, r);
    }
    if let Some(r) = &s.replies {
        replies_section(&mut o, r, s.connect.and_then(|c| c.kernel_syn_retransmits));
    }
    if let Some(relay) = &s.relay {
        relay_section(&mut o, relay);
    }
    time_section(&mut o, s, &r);
    cost_section(&mut o, s);
    for w in &s.warnings {
        let _ = writeln!(o, "warning: {}", visible(w));
    }
    visible_lines(o)
}

/// How the run ended and the rates: requested, achieved, the phase, connection attempts, the
/// machine's baseline and the per-tick rate's statistics.
fn headline(o: &mut String, s: &Summary, r: &Report) {
    let _ = writeln!(o, "scanprof: run of {:.2} s ended: {}", s.duration_s, r.ended);
    let _ = writeln!(o);
    match s.requested_pps {
        Some(r) => {
            let _ = write!(o, "requested {r:.0} pps, ");
        }
        None => {
            let _ = write!(o, "requested rate unknown (--requested PPS), ");
        }
    }
    let _ = write!(o, "achieved {:.1} {}", s.achieved_pps, s.rate_unit());
    if let Some(r) = s.ratio {
        let _ = write!(o, " ({})", pct(r));
    }
    let _ = writeln!(
        o,
        ": {} packets in a {:.3} s send window, {} send calls, {} failed",
        s.packets, s.send_window_s, s.send_calls, s.failed_calls
    );
    if let Some(line) = phase_line(s) {
        let _ = writeln!(o, "{line}");
    }
    if let Some(c) = &s.connect {
        let _ = writeln!(o, "{}", connect_line(c));
    }
    if let Some(b) = &s.baseline {
        let _ = write!(
            o,
            "baseline on this machine: a {}-paced reference sender reached {:.1} pps at {:.0} requested",
            b.pacer, b.achieved_pps, b.rate
        );
        if let Some(share) = r.of_baseline {
            let _ = write!(o, "; the target reached {} of that", pct(share));
        }
        let _ = writeln!(
            o,
            " ({} sent, {} received in a private lab)",
            b.sent, b.receiver_packets
        );
    }
    if let (Some(st), Some(m)) = (&s.rate_stats, r.modes) {
        let _ = writeln!(
            o,
            "per-tick rate over {} is bimodal, so no centre describes it: {}",
            st.samples_text(),
            modes_text(m)
        );
    } else if let Some(st) = &s.rate_stats {
        let _ = writeln!(
            o,
            "per-tick rate over {}: median {:.1} +/- {:.1}, mean {:.1} ({} left out), p95 {:.1}, p99 {:.1}, min {:.1}, max {:.1}",
            st.samples_text(),
            st.median,
            st.uncertainty,
            st.mean,
            match st.outliers {
                1 => "1 outlier".to_string(),
                n => format!("{n} outliers"),
            },
            st.p95,
            st.p99,
            st.min,
            st.max
        );
    }
}

/// Where packets were lost: the target's drop rows by class, other processes' as a count, the
/// qdiscs that queued and the neighbour resolutions that held packets.
fn drops_section(o: &mut String, s: &Summary, r: &Report) {
    // Where packets were lost, beside the answer; the family and the detail after.
    let _ = writeln!(o, "\ndrops:");
    // The target's rows, by class (its own losses first); other processes' drops as a count.
    let mine = r.drops.mine();
    if mine.is_empty() {
        let _ = writeln!(o, "  none of the target's packets or replies were dropped");
    }
    let several_ns = DropTable::several_netns(&mine);
    for d in &mine {
        let netns = if several_ns {
            format!("  netns {}", d.netns)
        } else {
            String::new()
        };
        let _ = writeln!(
            o,
            "  {:<12} {:<22} {:>10}  at {}  dev {}{netns}  pid {}",
            d.class.name(),
            visible(&d.reason),
            d.count,
            visible(&d.location),
            visible(d.device.as_deref().unwrap_or("-")),
            d.pid.map(|p| p.to_string()).unwrap_or_else(|| "-".into())
        );
    }
    let others = r.drops.unrelated();
    if others > 0 {
        let _ = writeln!(
            o,
            "  (and {others} drops of other processes' packets on this machine)"
        );
    }
    for q in s.queues.iter().filter(|q| q.qlen_max > 0) {
        let _ = writeln!(
            o,
            "qdisc on {} peaked at {} packets / {} bytes queued",
            visible(&q.device),
            q.qlen_max,
            q.backlog_max
        );
    }
    for d in s.devices.iter().filter(|d| d.neigh_queued > 0) {
        let _ = writeln!(
            o,
            "neighbour resolution on {}: {} started, {} packets queued, {} resolved, {} failed",
            visible(&d.device),
            d.neigh_started,
            d.neigh_queued,
            d.neigh_resolved,
            d.neigh_failed
        );
    }
}

/// The process family: each member, its end and its role.
fn family_section(o: &mut String, r: &Report) {
    let _ = writeln!(o, "\nprocess family:");
    for (p, end) in &r.processes {
        let state = end.text();
        let role = p.role.as_ref().map(|r| format!(", {r}")).unwrap_or_default();
        let _ = writeln!(
            o,
            "  pid {:<7} ppid {:<7} {:<16} {}  [{state}{}{role}]",
            p.pid,
            p.ppid,
            visible(&p.comm),
            visible(&p.exe),
            if p.root { ", target" } else { "" }
        );
    }
}

/// The send funnel over the send window, and the failed sends by errno.
fn funnel_section(o: &mut String, s: &Summary, r: &Report) {
    let _ = writeln!(o, "\nfunnel (per second over the send window):");
    for f in &r.funnel {
        let mut line = match &f.sampled {
            // an estimate: "≈ 19800", and how it was sampled at the end of the line
            Some(_) => format!(
                "  {:<16} {:>12.1} /s {:>12}",
                f.stage,
                f.pps,
                format!("≈ {}", f.count)
            ),
            None => format!("  {:<16} {:>12.1} /s {:>12}", f.stage, f.pps, f.count),
        };
        if let Some(share) = f.of_requested {
            let _ = write!(line, "  {:>7}", pct(share));
        }
        if let Some(how) = &f.sampled {
            let _ = write!(line, "  ({how})");
        }
        if f.no_qdisc {
            line.push_str("  (no queueing qdisc on the path)");
        }
        if f.unmeasured {
            line.push_str("  (not measured: this kernel has no qdisc_enqueue tracepoint)");
        }
        let _ = writeln!(o, "{line}");
        if f.stage == StageName::SyscallPackets {
            if let Some(row) = s.connect.as_ref().and_then(retransmit_row) {
                let _ = writeln!(o, "{row}");
            }
        }
    }
    if !s.errors.is_empty() {
        let list: Vec<String> = s.errors.iter().map(|(k, v)| format!("{k} {v}")).collect();
        let _ = writeln!(o, "send errors: {}", list.join(", "));
    }
}

/// Where the sending threads' time went: the budget, the places they blocked, the gaps
/// between sends and the send calls' duration.
fn time_section(o: &mut String, s: &Summary, r: &Report) {
    if let Some(b) = &r.budget {
        let states: Vec<String> = b
            .states
            .iter()
            .map(|st| {
                let woken = st
                    .after_wakeups
                    .map(|(_, share)| format!(" ({} after wake-ups)", pct(share)))
                    .unwrap_or_default();
                format!("{} {}{woken}", st.label, pct(st.share))
            })
            .collect();
        let _ = writeln!(o, "\nsender threads' time {}: {}", b.over, states.join(" | "));
    }
    for b in s.block_sites.iter().take(5) {
        let _ = writeln!(
            o,
            "  blocked in send {:.3} s at {} (pid {}, {} episodes, {} of blocked time)",
            b.blocked_s,
            b.wait_site,
            b.pid,
            b.episodes,
            pct(b.share)
        );
    }
    if let Some(mean) = s.gap.mean_ns {
        let _ = write!(o, "inter-send gap: mean {}", ns(mean));
        if let (Some(p50), Some(p99)) = (s.gap.p50_ns, s.gap.p99_ns) {
            let _ = write!(o, ", p50 {}, p99 {}", ns(p50), ns(p99));
        }
        if let Some(slot) = s.gap.slot_ns {
            let _ = write!(o, " (requested slot {})", ns(slot));
        }
        let _ = writeln!(o);
    }
    if let (Some(p50), Some(p99)) = (s.latency_p50_ns, s.latency_p99_ns) {
        let _ = writeln!(o, "send syscall duration: p50 {}, p99 {}", ns(p50), ns(p99));
    }
}

/// scanprof's own cost: its CPU, its probe events and lost records, the BPF programs' cost.
fn cost_section(o: &mut String, s: &Summary) {
    let _ = writeln!(
        o,
        "\nscanprof's own cost: {:.1}% of a CPU (its own process), {:.0} probe events/s; lost probe records: {}",
        s.cost.cpu * 100.0,
        s.cost.probe_hits_per_s,
        s.lost_events
    );
    for line in probe_cost_lines(&s.cost) {
        let _ = writeln!(o, "{line}");
    }
}

/// The relay funnel over the run: ingress against egress, and where the difference went.
pub fn relay_section(o: &mut String, r: &crate::analysis::relay::RelayView) {
    let _ = writeln!(o, "\nrelay funnel (over the run):");
    let _ = writeln!(
        o,
        "  ingress read {} ({:.1} /s) | egress sent {} ({:.1} /s) | amplification {:.2} of 1 -> {}",
        r.read, r.read_pps, r.sent, r.sent_pps, r.amplification, r.fanout
    );
    let reasons: Vec<String> = r
        .kernel_drop_reasons
        .iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    let _ = writeln!(
        o,
        "  of {} that reached it: {} dropped by the kernel before the read{}{} | {} | egress refused {} sends (ENOBUFS, EAGAIN)",
        r.arrived,
        r.kernel_drops,
        if r.kernel_drops_seen {
            ""
        } else {
            " (drops at its own sockets unseen: the kernel names the socket of a drop from 6.8)"
        },
        if reasons.is_empty() {
            String::new()
        } else {
            format!(" ({})", reasons.join(", "))
        },
        format_args!("{} read and never forwarded ({} sends missing)", r.own_drops, r.unsent),
        r.refused
    );
    let busy = (r.send_ns + r.blocked_send_ns + r.other_ns).max(1) as f64;
    let _ = writeln!(
        o,
        "  its busy time: sending {:.1}% | blocked in sends {:.1}% | reading and its own work {:.1}%",
        100.0 * r.send_ns as f64 / busy,
        100.0 * r.blocked_send_ns as f64 / busy,
        100.0 * r.other_ns as f64 / busy
    );
}

/// The receive funnel over the run: drops before the read, receive calls, messages read.
pub fn receive_section(o: &mut String, r: &ReceiveView) {
    let _ = writeln!(o, "\nreceive funnel (per second over the run):");
    for st in &r.stages {
        let mut line = format!("  {:<16} {:>12.1} /s {:>12}", st.name, st.pps, st.count);
        match st.name {
            StageName::RecvCalls if r.failed_calls > 0 => {
                let _ = write!(line, "  ({} failed: nothing to read)", r.failed_calls);
            }
            StageName::RecvPackets => {
                let _ = write!(line, "  ({} bytes)", r.bytes);
            }
            _ => {}
        }
        let _ = writeln!(o, "{line}");
    }
    if r.stream_calls > 0 {
        let _ = writeln!(
            o,
            "  stream reads {:>16} calls {:>12} bytes",
            r.stream_calls, r.stream_bytes
        );
    }
    receive_cost_section(o, r);
    receive_class_section(o, r);
    for d in &r.drops {
        let _ = writeln!(
            o,
            "  dropped before the read: {} {} at {} (pid {}, netns {})",
            d.count,
            visible(&d.reason),
            visible(&d.location),
            d.pid.map_or("-".to_string(), |p| p.to_string()),
            d.netns
        );
    }
}

/// The reply funnel over the run: probes, replies arrived by kind, delivered, dropped here.
/// `retransmits`: the kernel's SYN retransmissions among the probes (a connect scan's).
pub fn replies_section(o: &mut String, r: &crate::analysis::replies::ReplyFunnel, retransmits: Option<u64>) {
    let a = &r.arrived;
    let _ = writeln!(o, "\nreply funnel (over the run):");
    let _ = write!(o, "  probes sent          {:>12}", r.probes);
    let _ = match retransmits.filter(|&n| n > 0) {
        Some(n) => writeln!(
            o,
            "  ({n} of them the kernel's SYN retransmissions for unanswered connects)"
        ),
        None => writeln!(o),
    };
    let _ = writeln!(
        o,
        "  replies arrived      {:>12}  ({} per probe; counted on arrival at this host from the addresses probed)",
        r.arrived_total,
        r.reply_ratio.map_or("-".to_string(), |x| format!("{x:.3}"))
    );
    let kinds: Vec<String> = [
        ("SYN-ACK", a.tcp_synack),
        ("RST", a.tcp_rst),
        ("other TCP", a.tcp_other),
        ("ICMP unreachable", a.icmp_unreachable),
        ("echo reply", a.icmp_echo_reply),
        ("other ICMP", a.icmp_other),
        ("UDP", a.udp),
        ("other", a.other),
    ]
    .iter()
    .filter(|(_, n)| *n > 0)
    .map(|(k, n)| format!("{n} {k}"))
    .collect();
    if !kinds.is_empty() {
        let _ = writeln!(o, "    by kind: {}", kinds.join(", "));
    }
    if a.udp_loopback > 0 {
        let _ = writeln!(
            o,
            "    not counted: {} UDP on loopback (a probe and its reply share addresses there)",
            a.udp_loopback
        );
    }
    let _ = writeln!(
        o,
        "  delivered            {:>12}  (read by the family's receive calls, or queued to the packet sockets it reads)",
        r.delivered
    );
    let _ = writeln!(o, "  replies dropped here {:>12}", r.dropped_here);
    let _ = writeln!(
        o,
        "  unanswered           {:>12}  ({} of them probes dropped on this host, {} beyond it)",
        r.unanswered, r.probes_dropped_here, r.beyond_host
    );
}

/// What reading cost over the run, per thread and in all, and the CPU a full line would need.
fn receive_cost_section(o: &mut String, r: &ReceiveView) {
    let Some(all) = &r.cost else { return };
    let us = |ns: Option<f64>| ns.map_or("-".to_string(), |n| format!("{:.2}", n / 1e3));
    let source = match all.oncpu_source {
        crate::analysis::OncpuSource::Kernel => "the kernel's run time (schedstat)",
        crate::analysis::OncpuSource::SchedulerProbes => "scanprof's scheduler probes",
    };
    let _ = writeln!(
        o,
        "  cost per packet read (on-CPU time of each reading thread over the run, by {source}, / \
         packets it read; user/system: the kernel's utime/stime split, 10 ms steps):"
    );
    let _ = writeln!(
        o,
        "    {:<12} {:>10} {:>12} {:>9} {:>9} {:>9} {:>10} {:>10}",
        "thread", "packets", "pps", "us/pkt", "user", "system", "CPU@1G", "CPU@10G"
    );
    let line_cpus = |c: &crate::analysis::ReceiveCost, i: usize| {
        c.capacity
            .as_ref()
            .and_then(|cap| cap.line_rates.get(i))
            .map_or("-".to_string(), |l| format!("{:.2}", l.cpus))
    };
    let row = |o: &mut String, name: String, c: &crate::analysis::ReceiveCost| {
        let _ = writeln!(
            o,
            "    {:<12} {:>10} {:>12.0} {:>9} {:>9} {:>9} {:>10} {:>10}",
            name,
            c.packets,
            c.pps,
            us(c.ns_per_packet),
            us(c.user_ns_per_packet),
            us(c.system_ns_per_packet),
            line_cpus(c, 0),
            line_cpus(c, 1)
        );
    };
    for t in &r.threads {
        row(o, format!("tid {}", t.tid), &t.cost);
    }
    if r.threads.len() > 1 {
        row(o, format!("all ({})", all.workers), all);
    }
    if let Some(cap) = &all.capacity {
        let per_worker: Vec<String> = cap
            .line_rates
            .iter()
            .map(|l| {
                format!(
                    "{:.0} Gbit/s = {:.0} pps: {:.2} CPUs, {:.2} of each of {} workers",
                    l.bps / 1e9,
                    l.pps,
                    l.cpus,
                    l.cpus_per_worker,
                    all.workers
                )
            })
            .collect();
        let _ = writeln!(
            o,
            "  capacity at {:.0}-byte packets ({:.0} on the wire; pps = bits / (8 x (packet + 38))): {}",
            cap.packet_bytes,
            cap.wire_bytes,
            per_worker.join("; ")
        );
    }
}

/// The packets read by class of length (`--recv-classes`) and what handling each cost.
fn receive_class_section(o: &mut String, r: &ReceiveView) {
    if r.classes.is_empty() {
        return;
    }
    let _ = writeln!(
        o,
        "  by class of length (single-message reads; handling = on CPU from a read's return to the thread's next receive call):"
    );
    let _ = writeln!(
        o,
        "    {:<18} {:>10} {:>12} {:>12} {:>9} {:>9}",
        "class", "packets", "pps", "us/pkt", "packets%", "CPU%"
    );
    for c in &r.classes {
        let _ = writeln!(
            o,
            "    {:<18} {:>10} {:>12.0} {:>12} {:>8.1}% {:>8.1}%",
            c.label(),
            c.packets,
            c.pps,
            c.ns_per_packet
                .map_or("-".to_string(), |n| format!("{:.2}", n / 1e3)),
            c.packet_share * 100.0,
            c.oncpu_share * 100.0
        );
    }
}

/// What the scanner's own functions said: where the requested rate comes from, calibrations,
/// work units, IPC and the scanner's claims.
fn scanner_section(o: &mut String, sc: &ScannerView) {
    let r = &sc.requested;
    let _ = writeln!(
        o,
        "\nscanner (profile {}): requested rate {}",
        visible(&sc.profile),
        match r.pps {
            Some(p) => format!("{p:.0} pps ({})", r.kind),
            None => format!("not known ({})", r.kind),
        }
    );
    for src in r.sources.iter().take(8) {
        let at = src.at_s.map(|t| format!(" at {t:.3} s")).unwrap_or_default();
        let of = src
            .process
            .as_ref()
            .map(|p| format!(" (the command line of {}, pid {})", visible(&p.comm), p.pid))
            .unwrap_or_default();
        let _ = writeln!(o, "  from {}{of}{at}", src.described());
    }
    if r.sources.len() > 8 {
        let _ = writeln!(o, "  ... and {} more sources", r.sources.len() - 8);
    }
    if let Some(c) = &r.conflict {
        let _ = writeln!(o, "  SOURCES DISAGREE: {c}");
    }
    for c in &sc.calibrations {
        let mut line = format!("  calibration {} in pid {} at {:.3} s", c.probe, c.pid, c.start_s);
        if let Some(d) = c.duration_ms {
            let _ = write!(line, " took {d:.1} ms");
        }
        if let (Some(d), Some(u)) = (c.delay, c.delay_unit) {
            let _ = write!(line, ", derived delay {d:.0} {u}");
        }
        if let (Some(dn), Some(slot)) = (c.delay_ns, c.slot_ns) {
            let _ = write!(line, " = {} per packet against a slot of {}", ns(dn), ns(slot));
        }
        if let Some(e) = c.error_pct {
            let _ = write!(line, ": error {e:+.2}%");
        }
        let _ = writeln!(o, "{line}");
    }
    if !sc.work_units.is_empty() {
        let _ = writeln!(o, "  work units:");
    }
    for u in sc.work_units.iter().take(20) {
        // Seconds since attach, or "-" (no unit) where the moment was not seen.
        let t = |v: Option<f64>| v.map(|x| format!("{x:.3} s")).unwrap_or_else(|| "-".into());
        let _ = writeln!(
            o,
            "    #{:<3} pid {:<7} {:>8} pps asked, handed {}, set up {}, sending {}, done {}: {} packets, {} pps{}{}{}",
            u.index,
            u.sender_pid.map(|p| p.to_string()).unwrap_or_else(|| "-".into()),
            u.pps.map(|p| format!("{p:.0}")).unwrap_or_else(|| "-".into()),
            if u.before_attach {
                "before attach (in progress then)".to_string()
            } else {
                t(u.handed_s)
            },
            t(u.setup_s),
            t(u.calibrated_s),
            t(u.done_s),
            u.packets.map(|p| p.to_string()).unwrap_or_else(|| "-".into()),
            u.achieved_pps.map(|p| format!("{p:.1}")).unwrap_or_else(|| "-".into()),
            u.setup_ms.map(|m| format!(", set-up {m:.1} ms")).unwrap_or_default(),
            u.idle_before_ms.map(|m| format!(", idle before {m:.1} ms")).unwrap_or_default(),
            u.claimed_pps.map(|c| format!(", says {c:.1} pps")).unwrap_or_default(),
        );
    }
    for m in &sc.ipc {
        let _ = writeln!(
            o,
            "  ipc: {} (pid {}) {} {} x{} ({} bytes)",
            visible(&m.comm),
            m.pid,
            m.direction,
            m.kind,
            m.messages,
            m.bytes
        );
    }
    for c in &sc.claims {
        let _ = writeln!(
            o,
            "  claim{}: {}: {:.1}, measured {}{}",
            c.source.map(|s| format!(" ({})", s.label())).unwrap_or_default(),
            c.what,
            c.claimed,
            c.measured
                .map(|m| format!("{m:.1}"))
                .unwrap_or_else(|| "-".into()),
            c.diff_pct.map(|d| format!(" ({d:+.1}%)")).unwrap_or_default()
        );
    }
    let fired: Vec<String> = sc
        .probes
        .iter()
        .filter(|p| p.attached)
        .map(|p| format!("{} {}", p.name, p.hits))
        .collect();
    if !fired.is_empty() {
        let _ = writeln!(o, "  probe hits: {}", fired.join(", "));
    }
    for p in sc.probes.iter().filter(|p| p.per_packet && p.attached) {
        if let Some(n) = &p.note {
            let _ = writeln!(o, "  {}: {n}", p.name);
        }
    }
    for n in &sc.notes {
        let _ = writeln!(o, "  note: {n}");
    }
}

/// The diagnosis: every verdict the listing shows, with its share, evidence and next step, and
/// a line counting the rest.
fn verdict_section(o: &mut String, verdicts: &Listing) {
    if verdicts.shown.is_empty() && verdicts.rest.is_empty() {
        return;
    }
    let _ = writeln!(o, "\ndiagnosis:");
    for (i, v) in verdicts.shown.iter().enumerate() {
        let weak = if v.confidence == Confidence::Weak {
            " (weak evidence)"
        } else {
            ""
        };
        let _ = writeln!(
            o,
            "  {}. [{} {}] {}{weak}",
            i + 1,
            v.kind,
            pct(v.share),
            v.sentence
        );
        // Every line of evidence, as the JSON has them: a long one wraps under itself.
        for e in &v.evidence {
            for (k, row) in wrap_words(e, EVIDENCE_WIDTH).iter().enumerate() {
                let bullet = if k == 0 { "- " } else { "  " };
                let _ = writeln!(o, "       {bullet}{row}");
            }
        }
        if !v.next_step.is_empty() {
            let _ = writeln!(o, "       next: {}", v.next_step);
        }
    }
    if let Some(rest) = verdicts.rest_sentence() {
        let _ = writeln!(o, "  {rest}");
    }
}

/// Columns an evidence line takes before it wraps (after its 9-column indent and bullet).
const EVIDENCE_WIDTH: usize = 90;

/// `text` in rows of at most `width` columns, broken at spaces; a word longer than the width
/// keeps its own row whole (a number or a kernel symbol is never cut).
fn wrap_words(text: &str, width: usize) -> Vec<String> {
    let mut rows: Vec<String> = Vec::new();
    let mut row = String::new();
    for word in text.split_whitespace() {
        if !row.is_empty() && row.chars().count() + 1 + word.chars().count() > width {
            rows.push(std::mem::take(&mut row));
        }
        if !row.is_empty() {
            row.push(' ');
        }
        row.push_str(word);
    }
    if !row.is_empty() || rows.is_empty() {
        rows.push(row);
    }
    rows
}

#[cfg(test)]
#[path = "text_tests.rs"]
mod tests;

/// Two modes of the per-tick rate, for a sentence: each one's share of the ticks (of the time),
/// its median and range, high first.
pub fn modes_text(m: &crate::analysis::stats::Modes) -> String {
    // Below a tenth of the sending rate the sender was as good as stopped.
    let low_word = if m.low.median < 0.1 * m.high.median {
        "stalled"
    } else {
        "slowed"
    };
    format!(
        "sending {:.0}% of the ticks at median {:.1} pps ({:.1} to {:.1}), {low_word} {:.0}% at median {:.1} pps ({:.1} to {:.1})",
        m.high.share * 100.0,
        m.high.median,
        m.high.min,
        m.high.max,
        m.low.share * 100.0,
        m.low.median,
        m.low.min,
        m.low.max
    )
}

/// The family's connection attempts: how many sent their SYN, got its answer back from the
/// connect call itself, or failed before it (those failures' errnos are in the errors line). A
/// non-blocking connect returns before its answer (EINPROGRESS) and the scanner reads the
/// answer later (poll, SO_ERROR): the line says those answers are not in its count, rather
/// than "0 returned the answer" for a scan whose every port refused.
/// The funnel's row of the kernel's SYN retransmissions, below the send calls' packets: packets
/// of the family's connects that the stages from dev_queue on count and no call of the family
/// sent. None when none were sent (or they were not counted).
fn retransmit_row(c: &ConnectView) -> Option<String> {
    let n = c.kernel_syn_retransmits.filter(|&n| n > 0)?;
    Some(format!(
        "  {:<16} {:>15} {:>12}  (kernel SYN retransmissions over the run: the TCP timer resent unanswered connects' SYNs; not the scanner's sends nor in the rows above, in dev_queue and below)",
        "syn_retransmits", "", n
    ))
}

fn connect_line(c: &ConnectView) -> String {
    let pending = c.syns.saturating_sub(c.answered);
    let later = if pending > 0 {
        format!(
            "; {pending} returned before their answer (a non-blocking connect: its answer, read later, is not counted here)"
        )
    } else {
        String::new()
    };
    let retransmits = match c.kernel_syn_retransmits {
        Some(n) => format!(
            "; kernel SYN retransmissions {n} (the TCP timer's, for connects not answered in time: not the scanner's sends, not in its rate)"
        ),
        None => String::new(),
    };
    format!(
        "connection attempts (connect on TCP sockets): {} ({:.1}/s), {} SYNs sent ({} answered within the call: refused, timed out or unreachable{later}), {} failed before their SYN{retransmits}",
        c.attempts, c.attempts_pps, c.syns, c.answered, c.failed
    )
}
