//! `scanprof baseline`'s text: the machine facts, one table per pacer and the send-method table
//! of a `BaselineReport` (its JSON is the report serialized).

use crate::senders::baseline::{BaselineReport, PacerRow};
use crate::system::machine::MachineFacts;
use crate::units::{duration, or_dash, pct2};

/// The whole report as text: machine facts, one table per pacer (in `pacers` order), the
/// method table.
pub fn render_text(r: &BaselineReport, pacers: &[crate::wrappers::PacerKind]) -> String {
    let mut o = machine_text(&r.machine);
    for pacer in pacers {
        let rows: Vec<&PacerRow> = r.pacer_rows.iter().filter(|x| x.pacer == *pacer).collect();
        if rows.is_empty() {
            continue;
        }
        let slot = rows.iter().find_map(|x| x.slot.as_deref());
        o += &format!(
            "\npacer {pacer} (sendto, {}{} s per cell)\n",
            slot.map_or(String::new(), |s| format!("slot {s}, ")),
            r.seconds_per_cell
        );
        o += &format!(
            "  {:<9} {:>10} {:>12} {:>9} {:>11} {:>21} {:>10}\n",
            "target", "requested", "achieved", "accuracy", "p99 late", "received/sent", "rx dropped"
        );
        for x in rows {
            let rate = x.requested_pps.map_or("unlimited".into(), |p| format!("{p:.0}"));
            if let (Some(e), None) = (&x.error, x.sent) {
                o += &format!("  {:<9} {:>10}   error: {e}\n", x.target, rate);
                continue;
            }
            o += &format!(
                "  {:<9} {:>10} {:>12} {:>9} {:>11} {:>21} {:>10}{}\n",
                x.target,
                rate,
                or_dash(x.achieved_pps, |v| format!("{v:.1}")),
                or_dash(x.accuracy, pct2),
                or_dash(x.p99_lateness_ns, duration),
                received_text(x.receiver_packets, x.receiver_dropped, x.sent),
                or_dash(x.receiver_dropped, |d| d.to_string()),
                x.error.as_ref().map_or(String::new(), |e| format!("  ({e})")),
            );
        }
    }
    if !r.method_rows.is_empty() {
        o += &format!(
            "\nsend methods at full speed ({} s per cell)\n",
            r.seconds_per_cell
        );
        o += &format!(
            "  {:<9} {:<9} {:>12} {:>11} {:>11} {:>21} {:>10}  {}\n",
            "target", "method", "max pps", "CPU ns/pkt", "rusage ns", "received/sent", "rx dropped", "errors"
        );
        for x in &r.method_rows {
            if let (Some(e), None) = (&x.error, x.sent) {
                o += &format!("  {:<9} {:<9}   error: {e}\n", x.target, x.method);
                continue;
            }
            let errors = if x.errors.is_empty() {
                "-".to_string()
            } else {
                x.errors
                    .iter()
                    .map(|(k, v)| format!("{k} {v}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            o += &format!(
                "  {:<9} {:<9} {:>12} {:>11} {:>11} {:>21} {:>10}  {errors}{}\n",
                x.target,
                x.method,
                or_dash(x.max_pps, |v| format!("{v:.0}")),
                or_dash(x.cpu_ns_per_packet, |v| format!("{v:.0}")),
                or_dash(x.rusage_cpu_ns_per_packet, |v| format!("{v:.0}")),
                received_text(x.receiver_packets, x.receiver_dropped, x.sent),
                or_dash(x.receiver_dropped, |d| d.to_string()),
                x.error.as_ref().map_or(String::new(), |e| format!("  ({e})")),
            );
        }
    }
    if r.interrupted {
        o += "\ninterrupted: the matrix was cut short\n";
    }
    o
}

fn machine_text(m: &MachineFacts) -> String {
    let yes = |b: bool| if b { "yes" } else { "no" };
    let mut o = String::from("machine\n");
    o += &format!(
        "  CPU          {} ({} CPUs); TSC constant {}, nonstop {}, known frequency {}\n",
        m.cpu_model,
        m.nproc,
        yes(m.constant_tsc),
        yes(m.nonstop_tsc),
        yes(m.tsc_known_freq)
    );
    o += &format!(
        "  clocksource  {} (available: {})\n",
        m.clocksource,
        m.available_clocksources.join(" ")
    );
    o += &format!("  kernel       {}\n", m.kernel_release);
    o += &format!(
        "  kernel TSC   {} ({})\n",
        or_dash(m.kernel_tsc_hz, |hz| format!("{:.3} MHz", hz / 1e6)),
        m.kernel_tsc_source
    );
    match &m.sender_calibration {
        Some(c) => {
            o += &format!(
                "  sender TSC   {}: {} beside the kernel's {} ({} ppm), took {}{}\n",
                if c.source.is_empty() { "?" } else { &c.source },
                or_dash(c.tsc_hz, |hz| format!("{:.3} MHz", hz / 1e6)),
                or_dash(c.kernel_tsc_hz.or(m.kernel_tsc_hz), |hz| format!(
                    "{:.3} MHz",
                    hz / 1e6
                )),
                or_dash(c.error_ppm, |p| format!("{p:+.1}")),
                or_dash(c.took_ns.map(|n| n as f64), duration),
                c.slot_error_ppm.map_or(String::new(), |e| format!(
                    "; its slots {e:+.1} ppm long on CLOCK_MONOTONIC"
                )),
            );
        }
        None => o += "  sender TSC   - (no --pacer tsc cell reported a calibration)\n",
    }
    if let Some(n) = &m.nanosleep {
        o += &format!(
            "  nanosleep    {} asked: overshoot median {}, p99 {}, max {} ({} sleeps)\n",
            duration(n.requested_ns as f64),
            duration(n.median_ns as f64),
            duration(n.p99_ns as f64),
            duration(n.max_ns as f64),
            n.samples
        );
    }
    let sysctls: Vec<String> = m.sysctls.iter().map(|(k, v)| format!("{k} = {v}")).collect();
    o += &format!("  sysctls      {}\n", sysctls.join(", "));
    for i in &m.interfaces {
        o += &format!(
            "  interface    {} ({}): qdisc {}, txqueuelen {}\n",
            i.ifname, i.namespace, i.qdisc, i.txqueuelen
        );
    }
    for w in &m.warnings {
        o += &format!("  warning      {w}\n");
    }
    o
}

/// Received over sent, marked `!` when the two and the receiver's socket drops do not add up
/// (received + dropped != sent: packets lost somewhere else, or a receiver that miscounted).
fn received_text(received: Option<u64>, dropped: Option<u64>, sent: Option<u64>) -> String {
    match (received, sent) {
        (Some(r), Some(s)) => format!("{r}/{s}{}", if r + dropped.unwrap_or(0) == s { "" } else { " !" }),
        (Some(r), None) => format!("{r}/-"),
        (None, Some(s)) => format!("-/{s}"),
        (None, None) => "-".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::senders::baseline::MethodRow;
    use crate::system::machine::{InterfaceFacts, NanosleepOvershoot};

    fn sample_report() -> BaselineReport {
        let machine = MachineFacts {
            cpu_model: "AMD EPYC".into(),
            nproc: 2,
            constant_tsc: true,
            nonstop_tsc: true,
            tsc_known_freq: true,
            clocksource: "tsc".into(),
            available_clocksources: vec!["tsc".into(), "kvm-clock".into()],
            kernel_tsc_hz: Some(2_445_428_000.0),
            kernel_tsc_source: "kernel log".into(),
            sender_calibration: None,
            nanosleep: Some(NanosleepOvershoot {
                requested_ns: 50_000,
                samples: 200,
                median_ns: 58_100,
                p99_ns: 120_000,
                max_ns: 1_500_000,
            }),
            sysctls: [("net.core.wmem_max".to_string(), 4_194_304)].into(),
            kernel_release: "6.18.44".into(),
            interfaces: vec![InterfaceFacts {
                namespace: "root".into(),
                ifname: "lo".into(),
                qdisc: "noqueue".into(),
                txqueuelen: 1000,
            }],
            warnings: vec![],
        };
        BaselineReport {
            machine,
            pacer_rows: vec![
                PacerRow {
                    target: "lab".into(),
                    pacer: crate::wrappers::PacerKind::Clock,
                    slot: Some("per-packet".into()),
                    requested_pps: Some(1000.0),
                    achieved_pps: Some(1000.02),
                    accuracy: Some(1.00002),
                    p99_lateness_ns: Some(12_345.0),
                    sent: Some(2000),
                    failed: Some(0),
                    receiver_packets: Some(1990),
                    receiver_dropped: Some(10),
                    error: None,
                },
                PacerRow {
                    target: "lab".into(),
                    pacer: crate::wrappers::PacerKind::Clock,
                    requested_pps: None,
                    receiver_packets: Some(0),
                    error: Some("sender exit status: 2: unexpected argument '--pacer' found".into()),
                    ..PacerRow::default()
                },
            ],
            method_rows: vec![MethodRow {
                target: "loopback".into(),
                method: crate::senders::methods::MethodKind::Sendmmsg,
                max_pps: Some(412_345.6),
                cpu_ns_per_packet: Some(2100.0),
                rusage_cpu_ns_per_packet: Some(2350.4),
                sent: Some(824_000),
                failed: Some(3),
                errors: [("EAGAIN".to_string(), 3)].into(),
                receiver_packets: Some(823_990),
                receiver_dropped: Some(0),
                error: None,
            }],
            seconds_per_cell: 2.0,
            interrupted: false,
        }
    }

    #[test]
    fn text_report_shows_machine_pacer_and_method_tables() {
        let text = render_text(
            &sample_report(),
            &[crate::wrappers::PacerKind::Tsc, crate::wrappers::PacerKind::Clock],
        );
        let expected = "\
machine
  CPU          AMD EPYC (2 CPUs); TSC constant yes, nonstop yes, known frequency yes
  clocksource  tsc (available: tsc kvm-clock)
  kernel       6.18.44
  kernel TSC   2445.428 MHz (kernel log)
  sender TSC   - (no --pacer tsc cell reported a calibration)
  nanosleep    50.0 us asked: overshoot median 58.1 us, p99 120.0 us, max 1.500 ms (200 sleeps)
  sysctls      net.core.wmem_max = 4194304
  interface    lo (root): qdisc noqueue, txqueuelen 1000

pacer clock (sendto, slot per-packet, 2 s per cell)
  target     requested     achieved  accuracy    p99 late         received/sent rx dropped
  lab             1000       1000.0   100.00%     12.3 us             1990/2000         10
  lab        unlimited   error: sender exit status: 2: unexpected argument '--pacer' found

send methods at full speed (2 s per cell)
  target    method         max pps  CPU ns/pkt   rusage ns         received/sent rx dropped  errors
  loopback  sendmmsg        412346        2100        2350       823990/824000 !          0  EAGAIN 3
";
        assert_eq!(text, expected, "\n{text}");
    }

    #[test]
    fn json_report_has_the_three_parts() -> anyhow::Result<()> {
        let v: serde_json::Value = serde_json::to_value(sample_report())?;
        for key in ["machine", "pacer_rows", "method_rows"] {
            assert!(v.get(key).is_some(), "{key} missing: {v}");
        }
        assert_eq!(v["pacer_rows"][1]["requested_pps"], serde_json::Value::Null);
        assert_eq!(v["machine"]["sysctls"]["net.core.wmem_max"], 4_194_304);
        Ok(())
    }
}
