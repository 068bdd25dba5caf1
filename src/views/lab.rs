//! `scanprof lab`'s text: a scenario's report (the independent counts beside scanprof's, and
//! whether the diagnosis named the staged cause), the suite's table (the form docs/diagnosis.md
//! keeps), and the fixtures' own accounts (`scanprof recv`, `relay`, `ring-recv`).

use crate::analysis::verdict::Cause;
use crate::lab::reference::recv::RecvReport;
use crate::lab::reference::relay::RelayReport;
use crate::lab::reference::ring_recv::RingRecvReport;
use crate::lab::scenario::Truth;
use crate::lab::suite::SuiteRow;
use crate::lab::truth::LabReport;
use crate::lab::truth::SHARE_TOLERANCE;
use crate::units::pct;

/// A lab run's report for people: the independent counts beside scanprof's, and the check.
pub fn lab_text(r: &LabReport) -> String {
    let mut o = format!("lab ({}): independent counts beside scanprof's\n", r.scenario);
    if let Some(rx) = &r.receiver {
        o += &format!(
            "  receiver in the target namespace: {} packets, {:.1} pps | scanprof: {} packets, {:.1} pps\n",
            rx.packets,
            r.receiver_pps.unwrap_or(0.0),
            r.scanprof_packets,
            r.scanprof_achieved_pps
        );
    }
    for q in r.qdisc.iter().filter(|q| q.parent.is_none()) {
        o += &format!(
            "  tc qdisc {} on the sender's link: {} sent, {} dropped | scanprof: {} of the target's packets dropped\n",
            q.kind, q.sent_packets, q.drops, r.scanprof_target_drops
        );
    }
    let uses = |t: &[Truth]| t.contains(&r.truth_kind);
    if let (true, Some(out), Some(inn)) = (
        uses(&[Truth::Gap, Truth::Undelivered, Truth::GapLessRunDelay]),
        r.sender_udp_out,
        r.target_ip_in,
    ) {
        o += &format!("  SNMP: the sender namespace sent {out} UDP datagrams, the target namespace received {inn} IP packets\n");
    }
    if let Some(opens) = r.sender_tcp_active_opens {
        o += &format!(
            "  SNMP: the sender namespace opened {opens} TCP connections (ActiveOpens: SYNs sent) | scanprof: {} SYNs, {} packets\n",
            r.scanprof_connect_syns.unwrap_or(0),
            r.scanprof_packets
        );
    }
    if let (Some(echoed), Some(dropped)) = (r.echoed, r.sender_rcvbuf_errors) {
        o += &format!("  echo: {echoed} replies sent back; the sender namespace dropped {dropped} for a full receive buffer\n");
    }
    if let Some(l) = &r.listener {
        let opt = |v: Option<u64>| v.map_or("-".to_string(), |v| v.to_string());
        o += &format!(
            "  listener (SO_RCVBUF {} bytes) read {} datagrams by its own count | SNMP of the target namespace: {} read (InDatagrams), {} dropped for a full buffer (RcvbufErrors) | scanprof: {} read, {} SOCKET_RCVBUFF\n",
            l.rcvbuf,
            l.packets,
            opt(r.target_udp_in),
            opt(r.target_rcvbuf_errors),
            opt(r.scanprof_recv_packets),
            opt(r.scanprof_rcvbuf_drops)
        );
    }
    if let Some(g) = &r.ring {
        o += &format!(
            "  ring reader ({}-frame TPACKET_V2 ring on {}) read {} frames by its own count | PACKET_STATISTICS: {} reached the socket, {} queued, {} dropped (ring full)\n",
            g.frames, g.dev, g.read, g.tp_packets, g.queued, g.tp_drops
        );
    }
    for c in &r.fixture_checks {
        o += &format!("  {}\n", c.line());
    }
    if let Some(n) = r.stalls {
        o += &format!("  the sender was stopped {n} times\n");
    }
    if let (true, Some(cpu), Some(delay)) = (
        uses(&[Truth::GapLessRunDelay]),
        r.sender_cpu_s,
        r.sender_run_delay_s,
    ) {
        o += &format!(
            "  /proc/PID/schedstat of the sender: {cpu:.3} s on CPU, {delay:.3} s waiting for a CPU\n"
        );
    }
    if let Some(c) = &r.conntrack {
        o += &format!(
            "  conntrack: nf_conntrack_max {} for the run (restored to {}), {} tracked TCP connections held, {} entries free | the sender namespace's conntrack refused {} packets\n",
            c.max_set,
            c.saved_max,
            c.held,
            c.free,
            r.sender_ct_drops.map_or("-".to_string(), |d| d.to_string())
        );
    }
    if let Some(c) = &r.cgroup {
        o += &format!(
            "  cgroup v{} {} (quota {} us per {} us): throttled in {} of {} periods, {:.3} s by its own count\n",
            c.version, c.path, c.quota_us, c.period_us, c.nr_throttled, c.nr_periods, c.throttled_s
        );
    }
    if let Some(h) = &r.hog {
        o += &format!(
            "  CPU hog (pid {}) pinned with the sender to CPU {}: {:.2} s of CPU\n",
            h.pid, h.cpu, h.cpu_s
        );
    }
    let c = &r.check;
    o += &format!(
        "  diagnosis: top {} verdict `{}`{}{}, staged `{}`{}: {}\n",
        c.expected_kind,
        c.top_cause.map_or("none", Cause::as_str),
        match (c.top_share, &c.top_confidence) {
            (Some(s), Some(conf)) => format!(" ({}, {conf})", pct(s)),
            _ => String::new(),
        },
        c.probe_share.map_or(String::new(), |p| format!(
            " + `probe_cost` {} (the probes' part of the sender's own time, which the truth counts)",
            pct(p)
        )),
        c.expected_cause,
        c.truth.map_or(String::new(), |t| format!("; truth {}", pct(t))),
        if c.ok {
            "right"
        } else if !c.cause_matches {
            "WRONG CAUSE"
        } else if c.truth.is_none() {
            "TRUTH NOT MEASURED"
        } else if c.share_within == Some(true) {
            "FIXTURE'S FIGURES OFF"
        } else {
            "SHARE OFF BY MORE THAN 10 POINTS"
        }
    );
    o
}

/// The suite's result as a markdown table (the form docs/diagnosis.md keeps).
pub fn suite_table(rows: &[SuiteRow]) -> String {
    let mut o = String::from(
        "| scenario | expected cause | top verdict of that kind | share | truth | match |\n\
         |---|---|---|---:|---:|---|\n",
    );
    for r in rows {
        let Some(c) = &r.check else {
            o += &format!(
                "| {} | | error: {} | | | no |\n",
                r.scenario,
                r.error.as_deref().unwrap_or("no result")
            );
            continue;
        };
        let verdict = match (&c.top_cause, &c.top_confidence) {
            (Some(cause), Some(conf)) => format!("`{cause}` ({conf})"),
            _ => "none".to_string(),
        };
        let verdict = match &c.first_cause {
            Some(first) if Some(first) != c.top_cause.as_ref() => {
                format!("{verdict}; first overall `{first}`")
            }
            _ => verdict,
        };
        let ok = match (c.cause_matches, c.share_within) {
            (true, Some(true)) if !c.ok => "cause yes, fixture's figures off",
            (true, Some(true)) => "yes",
            (true, Some(false)) => "cause yes, share no",
            (true, None) => "cause yes, truth not measured",
            (false, _) => "no",
        };
        o += &format!(
            "| {} | {} `{}` | {} | {} | {} | {} |\n",
            r.scenario,
            c.expected_kind,
            c.expected_cause,
            verdict,
            c.top_share.map_or("-".to_string(), pct),
            c.truth.map_or("-".to_string(), pct),
            ok
        );
    }
    let failed = rows.iter().filter(|r| !r.ok()).count();
    o += &format!(
        "\n{} of {} scenarios diagnosed right (cause named, share within {:.0} points of the truth)\n",
        rows.len() - failed,
        rows.len(),
        SHARE_TOLERANCE * 100.0
    );
    o
}

/// `scanprof recv`'s own account of a run: its count, and per worker and kind when it has them.
pub fn recv_text(report: &RecvReport) -> String {
    let mut o = format!(
        "received {} datagrams ({} bytes) on port {} in {:.3} s; SO_RCVBUF {} bytes\n",
        report.packets, report.bytes, report.port, report.duration_s, report.rcvbuf
    );
    for (i, w) in report.workers.iter().enumerate() {
        for (k, kind) in w.kinds.iter().enumerate() {
            o += &format!(
                "  worker {i}, {} kind: {} datagrams, {} replies, {:.0} ns handling each\n",
                ["cheap", "costly"][k.min(1)],
                kind.packets,
                kind.replies,
                kind.handled_ns as f64 / kind.packets.max(1) as f64
            );
        }
    }
    if report.workers.len() > 1 {
        for (i, w) in report.workers.iter().enumerate() {
            o += &format!(
                "  worker {i} (tid {}): {} datagrams, {:.3} s CPU{}\n",
                w.tid,
                w.packets,
                w.cpu_ns as f64 / 1e9,
                if w.packets > 0 {
                    format!(", {:.0} ns each", w.cpu_ns as f64 / w.packets as f64)
                } else {
                    String::new()
                }
            );
        }
    }
    o
}

/// `scanprof relay`'s own account of a run, reading from `input`.
pub fn relay_text(report: &RelayReport, input: &str) -> String {
    format!(
        "relayed {} of {} packets read from {} to {} outputs in {:.3} s: {} writes ({} refused and retried), {} dropped for lack of a buffer (pool {}), {} dropped by the kernel before the read\n",
        report.forwarded,
        report.received,
        input,
        report.fanout,
        report.duration_s,
        report.writes,
        report.refused_writes,
        report.pool_drops,
        report.pool,
        report.kernel_drops
    )
}

/// `scanprof ring-recv`'s own account of a run.
pub fn ring_recv_text(report: &RingRecvReport) -> String {
    format!(
        "ring-recv: {} frames read from a {}-frame TPACKET_V2 ring on {} in {:.2} s; kernel ({} PACKET_STATISTICS read{}): {} frames reached the socket, {} queued, {} dropped (ring full); device while it was open: {} frames received, {} sent\n",
        report.read,
        report.frames,
        report.dev,
        report.duration_s,
        report.statistics_reads,
        if report.statistics_reads == 1 { "" } else { "s" },
        report.tp_packets,
        report.queued,
        report.tp_drops,
        report.dev_rx,
        report.dev_tx
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::verdict::{Confidence, Kind};
    use crate::lab::scenario::Expected;
    use crate::lab::truth::DiagnosisCheck;

    #[test]
    fn the_suite_table_says_what_matched() {
        let c = DiagnosisCheck {
            expected_kind: Kind::Gap,
            expected_cause: Expected::Cause(Cause::Preempted),
            top_cause: Some(Cause::Preempted),
            top_share: Some(0.45),
            top_confidence: Some(Confidence::Strong),
            first_cause: Some(Cause::Preempted),
            cause_matches: true,
            truth: Some(0.5),
            truth_basis: Truth::Gap.basis().into(),
            probe_share: None,
            share_within: Some(true),
            ok: true,
        };
        let wrong = DiagnosisCheck {
            top_cause: Some(Cause::CpuBound),
            first_cause: Some(Cause::CpuBound),
            cause_matches: false,
            ok: false,
            ..c.clone()
        };
        let rows = [
            SuiteRow {
                scenario: "preemption".into(),
                check: Some(c),
                error: None,
            },
            SuiteRow {
                scenario: "cpu-bound".into(),
                check: Some(wrong),
                error: None,
            },
            SuiteRow {
                scenario: "blocking".into(),
                check: None,
                error: Some("exited with 1".into()),
            },
        ];
        let t = suite_table(&rows);
        assert!(
            t.contains("| preemption | gap `preempted` | `preempted` (strong) | 45.0% | 50.0% | yes |"),
            "{t}"
        );
        assert!(
            t.contains("| cpu-bound | gap `preempted` | `cpu_bound` (strong) | 45.0% | 50.0% | no |"),
            "{t}"
        );
        assert!(
            t.contains("| blocking | | error: exited with 1 | | | no |"),
            "{t}"
        );
        assert!(t.contains("1 of 3 scenarios diagnosed right"), "{t}");
    }
}
