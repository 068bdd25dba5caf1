//! report.md of a trace bundle: the run's `Recording` (plus the machine facts and the doctor
//! checks when the bundle holds them) rendered as one Markdown page a maintainer can read on a
//! code host without scanprof. Pure: the same inputs always give the same text, so
//! `scanprof report` can re-render a bundle later.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use serde_json::Value;

use super::Recording;
use crate::analysis::{ScannerView, Summary};
use crate::units::{duration as ns, or_dash, pct};
use crate::views::report::{visible_lines, DropTable, Report};
use crate::views::text::{modes_text, probe_cost_lines};

/// Renders the bundle's report.md.
///
/// `facts` is `MachineFacts` and `checks` the doctor checks, both serialized (either the list
/// of checks or doctor's `{"usable": .., "checks": [..]}` object); a section whose input is
/// missing is left out. `plots` are (file name, caption) pairs, linked as images in order.
pub fn report_md(
    rec: &Recording,
    facts: Option<&Value>,
    checks: Option<&Value>,
    plots: &[(&str, &str)],
) -> String {
    let mut o = String::new();
    title(&mut o, rec);
    // The answer first (requested against achieved, the verdicts, where packets were lost),
    // then the detail behind it, the machine's tables last: a reader of a long report finds
    // the diagnosis on its first screen.
    match &rec.summary {
        Some(s) => {
            let r = Report::new(s);
            overview(&mut o, &r);
            verdicts(&mut o, &r);
            drops(&mut o, &r);
            funnel(&mut o, &r);
            scanner(&mut o, s);
            devices(&mut o, s);
            reply_funnel(&mut o, s);
            rate_statistics(&mut o, &r);
            time_budget(&mut o, &r);
        }
        None => {
            let why = if rec.meta.exported_mid_run {
                "it was written from the live view (`e`) while the run went on"
            } else {
                "the run did not end cleanly"
            };
            let _ = writeln!(
                o,
                "## Run\n\nThis recording has no summary ({why}): only its {} ticks were kept.\n",
                rec.ticks.len()
            );
        }
    }
    loss_and_warnings(&mut o, rec);
    if !plots.is_empty() {
        let _ = writeln!(o, "## Plots\n");
        for (file, caption) in plots {
            let _ = writeln!(o, "![{}]({})\n", escape_inline(caption), file.replace(' ', "%20"));
        }
    }
    if let Some(f) = facts {
        system_facts(&mut o, f);
    }
    if let Some(c) = checks {
        capability_checks(&mut o, c);
    }
    while o.ends_with("\n\n") {
        o.pop();
    }
    // Whatever a bundle's strings hold, no control character reaches the reader's terminal.
    visible_lines(o)
}

// ---- sections ---------------------------------------------------------------------------------

fn title(o: &mut String, rec: &Recording) {
    let m = &rec.meta;
    let command = if m.command_line.is_empty() {
        "scanprof".to_string()
    } else {
        m.command_line
            .iter()
            .map(|a| shell_word(a))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let _ = writeln!(o, "# scanprof report: {}\n", code_span(&command));
    let or_unknown = |s: &str| {
        if s.is_empty() {
            "unknown".to_string()
        } else {
            escape_inline(s)
        }
    };
    let _ = writeln!(o, "- scanprof version: {}", or_unknown(&m.version));
    let _ = writeln!(o, "- date: {}", or_unknown(&m.started_at));
    let _ = writeln!(o, "- hostname: {}", or_unknown(&m.hostname));
    let _ = writeln!(o, "- kernel: {}\n", or_unknown(&m.kernel));
}

fn system_facts(o: &mut String, f: &Value) {
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut fact = |name: &str, value: Option<String>| {
        if let Some(v) = value.filter(|v| !v.is_empty()) {
            rows.push(vec![name.to_string(), v]);
        }
    };
    fact("kernel", str_of(f, "kernel_release"));
    fact("CPU model", str_of(f, "cpu_model"));
    fact(
        "CPUs",
        f.get("nproc")
            .and_then(Value::as_u64)
            .filter(|n| *n > 0)
            .map(|n| n.to_string()),
    );
    let flags: Vec<String> = ["constant_tsc", "nonstop_tsc", "tsc_known_freq"]
        .iter()
        .filter_map(|k| {
            f.get(*k)
                .and_then(Value::as_bool)
                .map(|b| format!("{k} {}", yes_no(b)))
        })
        .collect();
    fact("TSC flags", (!flags.is_empty()).then(|| flags.join(", ")));
    fact("clocksource", str_of(f, "clocksource"));
    let available: Vec<String> = f
        .get("available_clocksources")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(String::from).collect())
        .unwrap_or_default();
    fact(
        "available clocksources",
        (!available.is_empty()).then(|| available.join(", ")),
    );
    fact(
        "kernel TSC frequency",
        f.get("kernel_tsc_hz").and_then(Value::as_f64).map(|hz| {
            let source = str_of(f, "kernel_tsc_source")
                .map(|s| format!(" ({s})"))
                .unwrap_or_default();
            format!("{:.3} MHz{source}", hz / 1e6)
        }),
    );
    if let Some(n) = f.get("nanosleep").filter(|n| n.is_object()) {
        let field = |k: &str| n.get(k).and_then(Value::as_u64);
        if let (Some(req), Some(med), Some(p99), Some(max)) = (
            field("requested_ns"),
            field("median_ns"),
            field("p99_ns"),
            field("max_ns"),
        ) {
            fact(
                "nanosleep overshoot",
                Some(format!(
                    "{} ns sleeps return late by median {}, p99 {}, max {}",
                    req,
                    ns(med as f64),
                    ns(p99 as f64),
                    ns(max as f64)
                )),
            );
        }
    }
    if let Some(sysctls) = f.get("sysctls").and_then(Value::as_object) {
        for (k, v) in sysctls {
            fact(k, Some(scalar(v)));
        }
    }
    if !rows.is_empty() {
        let _ = writeln!(o, "## System\n");
        table(o, &["Fact", "Value"], &rows);
    }
    let interfaces: Vec<Vec<String>> = f
        .get("interfaces")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|i| {
                    let s = |k: &str| i.get(k).map(scalar).unwrap_or_else(|| "-".into());
                    vec![s("namespace"), s("ifname"), s("qdisc"), s("txqueuelen")]
                })
                .collect()
        })
        .unwrap_or_default();
    if !interfaces.is_empty() {
        let _ = writeln!(o, "### Interfaces\n");
        table(o, &["Namespace", "Interface", "Qdisc", "txqueuelen"], &interfaces);
    }
    if let Some(softnet) = f.get("softnet").filter(|v| !v.is_null()) {
        softnet_table(o, softnet);
    }
    let warnings: Vec<String> = f
        .get("warnings")
        .and_then(Value::as_array)
        .map(|a| a.iter().map(scalar).collect())
        .unwrap_or_default();
    if !warnings.is_empty() {
        let _ = writeln!(o, "Facts that could not be read:\n");
        for w in warnings {
            let _ = writeln!(o, "- {}", escape_inline(&w));
        }
        let _ = writeln!(o);
    }
}

/// /proc/net/softnet_stat as the facts hold it: a list of per-CPU objects (one column per key,
/// in first-seen order) or one object of totals.
fn softnet_table(o: &mut String, softnet: &Value) {
    match softnet {
        Value::Array(cpus) if !cpus.is_empty() => {
            let mut keys: Vec<String> = Vec::new();
            for c in cpus.iter().filter_map(Value::as_object) {
                for k in c.keys() {
                    if !keys.contains(k) {
                        keys.push(k.clone());
                    }
                }
            }
            if keys.is_empty() {
                return;
            }
            let rows: Vec<Vec<String>> = cpus
                .iter()
                .map(|c| {
                    keys.iter()
                        .map(|k| c.get(k).map(scalar).unwrap_or_else(|| "-".into()))
                        .collect()
                })
                .collect();
            let header: Vec<&str> = keys.iter().map(String::as_str).collect();
            let _ = writeln!(o, "### Softnet statistics\n");
            table(o, &header, &rows);
        }
        Value::Object(m) if !m.is_empty() => {
            let rows: Vec<Vec<String>> = m.iter().map(|(k, v)| vec![k.clone(), scalar(v)]).collect();
            let _ = writeln!(o, "### Softnet statistics\n");
            table(o, &["Counter", "Value"], &rows);
        }
        _ => {}
    }
}

fn capability_checks(o: &mut String, c: &Value) {
    let list = c.get("checks").unwrap_or(c);
    let Some(items) = list.as_array().filter(|a| !a.is_empty()) else {
        return;
    };
    let rows: Vec<Vec<String>> = items
        .iter()
        .map(|i| {
            let s = |k: &str| {
                i.get(k)
                    .filter(|v| !v.is_null())
                    .map(scalar)
                    .unwrap_or_else(|| "-".into())
            };
            vec![s("name"), s("status"), s("detail"), s("advice")]
        })
        .collect();
    let _ = writeln!(o, "## Capability checks\n");
    if let Some(usable) = c.get("usable").and_then(Value::as_bool) {
        let _ = writeln!(
            o,
            "{}\n",
            if usable {
                "scanprof can profile on this machine."
            } else {
                "scanprof cannot profile here until the missing items are fixed."
            }
        );
    }
    table(o, &["Check", "Status", "Detail", "Advice"], &rows);
}

fn overview(o: &mut String, r: &Report) {
    let s = r.summary;
    let _ = writeln!(o, "## Run\n");
    let _ = writeln!(o, "Run of {:.2} s ended: {}.\n", s.duration_s, r.ended);
    let mut line = match s.requested_pps {
        Some(r) => format!(
            "Requested {r:.0} pps, achieved {:.1} {}",
            s.achieved_pps,
            s.rate_unit()
        ),
        None => format!(
            "Requested rate unknown, achieved {:.1} {}",
            s.achieved_pps,
            s.rate_unit()
        ),
    };
    if let Some(r) = s.ratio {
        let _ = write!(line, " ({})", pct(r));
    }
    let _ = writeln!(
        o,
        "{line}: {} packets in a {:.3} s send window, {} send calls, {} failed.\n",
        s.packets, s.send_window_s, s.send_calls, s.failed_calls
    );
    if let Some(phases) = crate::views::text::phase_line(s) {
        let _ = writeln!(o, "Phases: {}.\n", escape_inline(&phases));
    }
    if let Some(b) = &s.baseline {
        let _ = write!(
            o,
            "Baseline on this machine: a {}-paced reference sender reached {:.1} pps at {:.0} requested",
            escape_inline(b.pacer.as_str()),
            b.achieved_pps,
            b.rate
        );
        if let Some(share) = r.of_baseline {
            let _ = write!(o, "; the target reached {} of that", pct(share));
        }
        let _ = writeln!(
            o,
            " ({} sent, {} received in a private lab).\n",
            b.sent, b.receiver_packets
        );
    }
    if !s.errors.is_empty() {
        let list: Vec<String> = s
            .errors
            .iter()
            .map(|(k, v)| format!("{} {v}", escape_inline(k)))
            .collect();
        let _ = writeln!(o, "Send errors: {}.\n", list.join(", "));
    }
    if let Some(mean) = s.gap.mean_ns {
        let _ = write!(o, "Inter-send gap: mean {}", ns(mean));
        if let (Some(p50), Some(p99)) = (s.gap.p50_ns, s.gap.p99_ns) {
            let _ = write!(o, ", p50 {}, p99 {}", ns(p50), ns(p99));
        }
        if let Some(slot) = s.gap.slot_ns {
            let _ = write!(o, " (requested slot {})", ns(slot));
        }
        let _ = writeln!(o, ".\n");
    }
    if let (Some(p50), Some(p99)) = (s.latency_p50_ns, s.latency_p99_ns) {
        let _ = writeln!(o, "Send syscall duration: p50 {}, p99 {}.\n", ns(p50), ns(p99));
    }
}

fn funnel(o: &mut String, r: &Report) {
    let _ = writeln!(o, "## Funnel\n");
    let _ = writeln!(
        o,
        "Per second over the {:.3} s send window.\n",
        r.summary.send_window_s
    );
    let rows: Vec<Vec<String>> = r
        .funnel
        .iter()
        .map(|f| {
            let mut stage = f.stage.to_string();
            if f.no_qdisc {
                stage.push_str(" (no queueing qdisc on the path)");
            }
            if f.unmeasured {
                stage.push_str(" (not measured: this kernel has no qdisc\\_enqueue tracepoint)");
            }
            let approx = if let Some(how) = &f.sampled {
                stage.push_str(&format!(" ({how})"));
                "≈ "
            } else {
                ""
            };
            vec![
                stage,
                format!("{approx}{:.1}", f.pps),
                format!("{approx}{}", f.count),
                or_dash(f.of_requested, pct),
            ]
        })
        .collect();
    table(o, &["Stage", "Per second", "Count", "% of requested"], &rows);
}

/// The devices the family's packets crossed, in every namespace (the lab's veth pairs, a
/// container's interfaces), from the Summary's device views: the machine facts' interface
/// table lists the root namespace only.
/// The reply funnel over the run, when the reply counter was attached.
fn reply_funnel(o: &mut String, s: &Summary) {
    let Some(r) = &s.replies else { return };
    let a = &r.arrived;
    let _ = writeln!(o, "## Reply funnel\n");
    let _ = writeln!(
        o,
        "Packets over the run. Replies are counted on arrival at this host (before any socket or \
         ring) from the addresses the family sent to, on the devices its packets used.\n"
    );
    let n = |v: u64| v.to_string();
    let mut rows = vec![vec!["probes sent".to_string(), n(r.probes)]];
    if let Some(k) = s
        .connect
        .and_then(|c| c.kernel_syn_retransmits)
        .filter(|&k| k > 0)
    {
        rows.push(vec![
            "of which the kernel's SYN retransmissions for unanswered connects".to_string(),
            n(k),
        ]);
    }
    rows.extend(vec![
        vec![
            format!(
                "replies arrived ({} per probe)",
                r.reply_ratio.map_or("-".to_string(), |x| format!("{x:.3}"))
            ),
            n(r.arrived_total),
        ],
        vec![
            "of which SYN-ACK / RST / other TCP".to_string(),
            format!("{} / {} / {}", a.tcp_synack, a.tcp_rst, a.tcp_other),
        ],
        vec![
            "of which ICMP unreachable / echo reply / other ICMP".to_string(),
            format!(
                "{} / {} / {}",
                a.icmp_unreachable, a.icmp_echo_reply, a.icmp_other
            ),
        ],
        vec![
            "of which UDP / other".to_string(),
            format!("{} / {}", a.udp, a.other),
        ],
        vec!["not counted: UDP on loopback".to_string(), n(a.udp_loopback)],
        vec![
            "delivered to the family's sockets and rings".to_string(),
            n(r.delivered),
        ],
        vec!["replies dropped here".to_string(), n(r.dropped_here)],
        vec!["unanswered".to_string(), n(r.unanswered)],
        vec![
            "of which probes dropped on this host".to_string(),
            n(r.probes_dropped_here),
        ],
        vec!["of which beyond this host".to_string(), n(r.beyond_host)],
    ]);
    table(o, &["", "packets"], &rows);
}

fn devices(o: &mut String, s: &Summary) {
    if s.devices.is_empty() {
        return;
    }
    let _ = writeln!(o, "## Devices the target's packets crossed\n");
    let _ = writeln!(
        o,
        "Per second over the {:.3} s run; namespaces by inode number.\n",
        s.duration_s
    );
    let opt = |v: Option<u64>| v.map_or_else(|| "-".to_string(), |n| n.to_string());
    let rows: Vec<Vec<String>> = s
        .devices
        .iter()
        .map(|d| {
            vec![
                d.device.clone(),
                d.netns.to_string(),
                d.qdisc.clone().unwrap_or_else(|| "-".into()),
                format!("{:.1}", d.target_queued_pps),
                format!("{:.1}", d.target_xmit_pps),
                format!("{:.1}", d.all_xmit_pps),
                d.xmit_refused.to_string(),
                opt(d.qlen_max),
                d.neigh_queued.to_string(),
            ]
        })
        .collect();
    table(
        o,
        &[
            "Device",
            "Namespace",
            "Qdisc",
            "Target queued (/s)",
            "Target sent (/s)",
            "All sent (/s)",
            "Refused",
            "Qdisc peak (packets)",
            "Neighbour queued",
        ],
        &rows,
    );
}

fn rate_statistics(o: &mut String, r: &Report) {
    let s = r.summary;
    let _ = writeln!(o, "## Rate statistics\n");
    let Some(st) = &s.rate_stats else {
        let _ = writeln!(
            o,
            "No tick lay wholly inside the send window: no per-tick rate statistics.\n"
        );
        return;
    };
    let _ = writeln!(
        o,
        "Per-tick achieved rate over the {} wholly inside the send window, in packets per second.\n",
        st.samples_text().replacen(" complete", "", 1)
    );
    if let Some(m) = r.modes {
        let _ = writeln!(
            o,
            "The per-tick rate is bimodal, so no centre describes it: {}.\n",
            modes_text(m)
        );
    }
    let rows = vec![
        vec!["median".to_string(), format!("{:.1}", st.median)],
        vec![
            format!("mean without outliers beyond 3 MADs ({} left out)", st.outliers),
            format!("{:.1}", st.mean),
        ],
        vec![
            "uncertainty (MAD / sqrt(n))".to_string(),
            format!("{:.1}", st.uncertainty),
        ],
        vec!["p95".to_string(), format!("{:.1}", st.p95)],
        vec!["p99".to_string(), format!("{:.1}", st.p99)],
        vec!["min".to_string(), format!("{:.1}", st.min)],
        vec!["max".to_string(), format!("{:.1}", st.max)],
        vec!["samples".to_string(), st.n.to_string()],
    ];
    table(o, &["Statistic", "pps"], &rows);
}

fn time_budget(o: &mut String, r: &Report) {
    let s = r.summary;
    if r.budget.is_none() && s.block_sites.is_empty() {
        return;
    }
    let _ = writeln!(o, "## Time budget of the sender threads\n");
    if let Some(b) = &r.budget {
        let _ = writeln!(o, "Their time {}.\n", b.over);
        let row = |what: &str, ns: u64, share: f64| {
            vec![what.to_string(), format!("{:.3}", ns as f64 / 1e9), pct(share)]
        };
        let mut rows: Vec<Vec<String>> = Vec::new();
        for st in &b.states {
            rows.push(row(st.label, st.ns, st.share));
            if let Some((ns, share)) = st.after_wakeups {
                rows.push(row("of that, right after wake-ups", ns, share));
            }
        }
        table(o, &["State", "Seconds", "Share"], &rows);
    }
    if !s.block_sites.is_empty() {
        let _ = writeln!(o, "### Blocking wait sites inside send\n");
        let rows: Vec<Vec<String>> = s
            .block_sites
            .iter()
            .map(|b| {
                vec![
                    b.wait_site.clone(),
                    b.pid.to_string(),
                    format!("{:.3}", b.blocked_s),
                    b.episodes.to_string(),
                    pct(b.share),
                ]
            })
            .collect();
        table(
            o,
            &[
                "Wait site",
                "PID",
                "Blocked (s)",
                "Episodes",
                "Share of blocked time",
            ],
            &rows,
        );
    }
}

fn drops(o: &mut String, r: &Report) {
    let _ = writeln!(o, "## Drops\n");
    if r.drops.rows.is_empty() {
        let _ = writeln!(o, "No packet drops were seen on this machine during the run.\n");
        return;
    }
    if r.drops.mine().is_empty() {
        let _ = writeln!(o, "None of the target's packets or replies were dropped.\n");
    }
    // Every row, the target's own losses first; rows on devices of several namespaces name
    // theirs (inode numbers).
    let several_ns = DropTable::several_netns(&r.drops.rows);
    let rows: Vec<Vec<String>> = r
        .drops
        .rows
        .iter()
        .map(|d| {
            let mut row = vec![
                d.class.name().to_string(),
                d.reason.clone(),
                d.location.clone(),
                d.device.clone().unwrap_or_else(|| "-".into()),
            ];
            if several_ns {
                row.push(d.netns.to_string());
            }
            row.extend([
                d.pid.map_or_else(|| "-".into(), |p| p.to_string()),
                d.count.to_string(),
                format!("{:.1}", d.rate),
            ]);
            row
        })
        .collect();
    let mut header = vec!["Class", "Reason", "Location", "Device"];
    if several_ns {
        header.push("Namespace");
    }
    header.extend(["PID", "Count", "Rate (/s)"]);
    table(o, &header, &rows);
}

/// The diagnosis: each verdict the listing shows with its share, evidence and next step, and
/// a sentence counting the rest.
fn verdicts(o: &mut String, r: &Report) {
    let l = &r.verdicts;
    if l.shown.is_empty() && l.rest.is_empty() {
        return;
    }
    let _ = writeln!(o, "## Verdicts\n");
    let rows: Vec<Vec<String>> = l
        .shown
        .iter()
        .map(|v| {
            vec![
                v.kind.to_string(),
                pct(v.share),
                v.sentence.clone(),
                v.evidence.join("; "),
                v.next_step.clone(),
                v.confidence.to_string(),
            ]
        })
        .collect();
    if !rows.is_empty() {
        table(
            o,
            &["Kind", "Share", "Cause", "Evidence", "Next step", "Confidence"],
            &rows,
        );
    }
    if let Some(rest) = l.rest_sentence() {
        let _ = writeln!(o, "{}\n", escape_inline(&rest));
    }
}

/// What the scanner's own functions said (its profile's uprobes).
fn scanner(o: &mut String, s: &Summary) {
    let Some(sc) = &s.scanner else { return };
    let _ = writeln!(o, "## Scanner ({})\n", escape_inline(&sc.profile));
    let r = &sc.requested;
    let _ = writeln!(
        o,
        "- requested rate: {} ({})",
        r.pps
            .map(|p| format!("{p:.0} pps"))
            .unwrap_or_else(|| "unknown".into()),
        escape_inline(r.kind.as_str())
    );
    for src in &r.sources {
        let _ = writeln!(o, "- from {}", escape_inline(&src.described()));
    }
    if let Some(c) = &r.conflict {
        let _ = writeln!(o, "- **sources disagree**: {}", escape_inline(c));
    }
    for n in &sc.notes {
        let _ = writeln!(o, "- note: {}", escape_inline(n));
    }
    let _ = writeln!(o);
    calibration_table(o, sc);
    work_unit_table(o, sc);
    claims_table(o, sc);
}

/// A figure with `d` decimals in a table cell, `-` when there is none.
fn decimals(v: Option<f64>, d: usize) -> String {
    or_dash(v, |x| format!("{x:.d$}"))
}

/// The scanner's calibrations: each probe's, when it ran, for what rate and with what error.
fn calibration_table(o: &mut String, sc: &ScannerView) {
    if !sc.calibrations.is_empty() {
        let rows: Vec<Vec<String>> = sc
            .calibrations
            .iter()
            .map(|c| {
                vec![
                    c.probe.clone(),
                    c.pid.to_string(),
                    format!("{:.3}", c.start_s),
                    decimals(c.duration_ms, 1),
                    decimals(c.pps, 0),
                    decimals(c.delay_ns, 0),
                    decimals(c.slot_ns, 0),
                    decimals(c.error_pct, 2),
                ]
            })
            .collect();
        table(
            o,
            &[
                "Calibration",
                "Pid",
                "At (s)",
                "Took (ms)",
                "For (pps)",
                "Delay (ns)",
                "Slot (ns)",
                "Error (%)",
            ],
            &rows,
        );
    }
}

/// The scanner's work units: asked, handed over, sending, done, and what each achieved.
fn work_unit_table(o: &mut String, sc: &ScannerView) {
    if !sc.work_units.is_empty() {
        let rows: Vec<Vec<String>> = sc
            .work_units
            .iter()
            .map(|u| {
                vec![
                    u.index.to_string(),
                    u.sender_pid.map(|p| p.to_string()).unwrap_or_else(|| "-".into()),
                    decimals(u.pps, 0),
                    if u.before_attach {
                        "before attach".to_string()
                    } else {
                        decimals(u.handed_s, 3)
                    },
                    decimals(u.calibrated_s, 3),
                    decimals(u.done_s, 3),
                    u.packets.map(|p| p.to_string()).unwrap_or_else(|| "-".into()),
                    decimals(u.achieved_pps, 1),
                    decimals(u.setup_ms, 1),
                    decimals(u.idle_before_ms, 1),
                    decimals(u.claimed_pps, 1),
                ]
            })
            .collect();
        table(
            o,
            &[
                "Unit",
                "Sender",
                "Asked (pps)",
                "Handed (s)",
                "Sending (s)",
                "Done (s)",
                "Packets",
                "Achieved (pps)",
                "Set-up (ms)",
                "Idle before (ms)",
                "Claimed (pps)",
            ],
            &rows,
        );
    }
}

/// What the scanner said of itself beside what scanprof measured.
fn claims_table(o: &mut String, sc: &ScannerView) {
    if !sc.claims.is_empty() {
        let rows: Vec<Vec<String>> = sc
            .claims
            .iter()
            .map(|c| {
                vec![
                    c.what.clone(),
                    c.source.map_or("-", |s| s.label()).to_string(),
                    format!("{:.1}", c.claimed),
                    decimals(c.measured, 1),
                    decimals(c.diff_pct, 1),
                ]
            })
            .collect();
        table(
            o,
            &[
                "Scanner's claim",
                "Read from",
                "Claimed",
                "Measured",
                "Difference (%)",
            ],
            &rows,
        );
    }
}

fn loss_and_warnings(o: &mut String, rec: &Recording) {
    let _ = writeln!(o, "## Lost events and warnings\n");
    let health = rec
        .summary
        .as_ref()
        .map(|s| s.health)
        .or_else(|| rec.ticks.last().map(|t| t.health))
        .unwrap_or_default();
    let lost = rec.summary.as_ref().map_or(health.lost_events, |s| s.lost_events);
    let _ = writeln!(o, "- lost probe records (ring buffer full): {lost}");
    for (what, n) in [
        ("drops not counted (drop table full)", health.drops_uncounted),
        (
            "device events not counted (device table full)",
            health.devices_uncounted,
        ),
        (
            "blocking events not counted (block site map full: `--map-size block_sites=ENTRIES`)",
            health.block_sites_uncounted,
        ),
        (
            "family threads not tracked (thread map full: `--map-size threads=ENTRIES`)",
            health.threads_untracked,
        ),
        (
            "drops the kernel did not give scanprof's drop program (perf's count of kfree_skb less the program's runs)",
            health.drops_undelivered.unwrap_or(0),
        ),
        (
            "socket-less drops on the family's path matching no packet it sent (in the unrelated rows)",
            health.unmatched_on_path,
        ),
        (
            "runs of scanprof's programs the kernel skipped (their recursion_misses)",
            health.skipped_runs.unwrap_or(0),
        ),
        (
            "context switches of the family's threads no program was given (their time is in no budget state)",
            health.missed_switches,
        ),
    ] {
        if n > 0 {
            let _ = writeln!(o, "- {what}: {n}");
        }
    }
    if let Some(s) = &rec.summary {
        let _ = writeln!(
            o,
            "- scanprof's own cost: {:.1}% of a CPU (its own process), {:.0} probe events/s",
            s.cost.cpu * 100.0,
            s.cost.probe_hits_per_s
        );
        for line in probe_cost_lines(&s.cost) {
            let line = line.trim_start();
            match line.strip_prefix("WARNING: ") {
                Some(alert) => {
                    let _ = writeln!(o, "- **{}**", escape_inline(alert));
                }
                None => {
                    let _ = writeln!(o, "- {}", escape_inline(line));
                }
            }
        }
    }
    let probes = if rec.probes.is_empty() {
        rec.summary
            .as_ref()
            .map(|s| s.probes.as_slice())
            .unwrap_or_default()
    } else {
        rec.probes.as_slice()
    };
    for p in probes.iter().filter(|p| !p.attached) {
        let _ = writeln!(
            o,
            "- probe {} not attached: {}",
            escape_inline(&p.name),
            escape_inline(p.error.as_deref().unwrap_or("no reason given"))
        );
    }
    let mut seen = BTreeSet::new();
    let warnings = rec
        .summary
        .iter()
        .flat_map(|s| s.warnings.iter())
        .chain(rec.ticks.iter().flat_map(|t| t.warnings.iter()));
    for w in warnings {
        if seen.insert(w.as_str()) {
            let _ = writeln!(o, "- warning: {}", escape_inline(w));
        }
    }
    let _ = writeln!(o);
}

// ---- Markdown building blocks -----------------------------------------------------------------

/// A Markdown table; every row gets exactly as many cells as the header (padded with "-").
/// Header and cells are plain text: `cell` escapes them, once.
fn table(o: &mut String, header: &[&str], rows: &[Vec<String>]) {
    let _ = writeln!(
        o,
        "| {} |",
        header.iter().map(|h| cell(h)).collect::<Vec<_>>().join(" | ")
    );
    let _ = writeln!(o, "|{}", "---|".repeat(header.len()));
    for r in rows {
        let cells: Vec<String> = (0..header.len())
            .map(|i| r.get(i).map_or_else(|| "-".to_string(), |c| cell(c)))
            .collect();
        let _ = writeln!(o, "| {} |", cells.join(" | "));
    }
    let _ = writeln!(o);
}

/// Text safe inside a table cell: no line breaks, pipes escaped, inline markup escaped.
fn cell(s: &str) -> String {
    let s = escape_inline(&s.replace(['\n', '\r'], " "));
    if s.trim().is_empty() {
        "-".into()
    } else {
        s.replace('|', "\\|")
    }
}

/// Plain text as inline Markdown: the characters that would start markup or HTML escaped,
/// except inside code spans (a run of backticks up to the next run of the same length), which
/// the text's author meant (`` `scanprof baseline` ``) and which Markdown shows verbatim, so an
/// escape there would show as a backslash. A backtick run with no partner is escaped.
fn escape_inline(s: &str) -> String {
    let chars: Vec<char> = s
        .chars()
        .map(|c| if c == '\n' || c == '\r' { ' ' } else { c })
        .collect();
    let run_at = |i: usize| chars[i..].iter().take_while(|c| **c == '`').count();
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '`' {
            let n = run_at(i);
            // The closing run: the next run of exactly n backticks.
            let mut j = i + n;
            let mut close = None;
            while j < chars.len() {
                if chars[j] == '`' {
                    let m = run_at(j);
                    if m == n {
                        close = Some(j);
                        break;
                    }
                    j += m;
                } else {
                    j += 1;
                }
            }
            match close {
                Some(j) => {
                    out.extend(&chars[i..j + n]);
                    i = j + n;
                }
                None => {
                    for _ in 0..n {
                        out.push_str("\\`");
                    }
                    i += n;
                }
            }
            continue;
        }
        if matches!(c, '\\' | '*' | '_' | '[' | ']' | '<' | '>' | '#') {
            out.push('\\');
        }
        out.push(c);
        i += 1;
    }
    out
}

/// `s` as an inline code span, fenced with more backticks than it contains.
fn code_span(s: &str) -> String {
    let mut longest = 0;
    let mut run = 0;
    for c in s.chars() {
        run = if c == '`' { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    let fence = "`".repeat(longest + 1);
    let pad = if s.starts_with('`') || s.ends_with('`') {
        " "
    } else {
        ""
    };
    format!("{fence}{pad}{}{pad}{fence}", s.replace(['\n', '\r'], " "))
}

/// An argument as a shell would need it: quoted when it holds anything but plain characters.
fn shell_word(a: &str) -> String {
    let plain = !a.is_empty()
        && a.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=,+@%".contains(c));
    if plain {
        a.to_string()
    } else {
        format!("'{}'", a.replace('\'', r"'\''"))
    }
}

fn str_of(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_string)
}

/// A JSON scalar as text (strings without quotes); arrays joined with ", ".
fn scalar(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        Value::Bool(b) => yes_no(*b).into(),
        Value::Array(a) => a.iter().map(scalar).collect::<Vec<_>>().join(", "),
        other => other.to_string(),
    }
}

fn yes_no(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::STAGES;
    use crate::collect::DropClass;
    use crate::views::fixtures::rich_recording;

    /// The scanner section's tables: none without its rows; with them (the fixture's scanner)
    /// its header, the separator and one row per item.
    #[test]
    fn each_scanner_table_is_drawn_only_with_rows_and_has_one_per_item() {
        type Draw = fn(&mut String, &ScannerView);
        let empty = ScannerView::default();
        let rec = rich_recording();
        let sc = rec
            .summary
            .as_ref()
            .and_then(|s| s.scanner.clone())
            .expect("the fixture's scanner");
        let tables: [(Draw, &str, usize); 3] = [
            (calibration_table, "| Calibration |", sc.calibrations.len()),
            (work_unit_table, "| Unit |", sc.work_units.len()),
            (claims_table, "| Scanner", sc.claims.len()),
        ];
        let mut drawn = 0;
        for (draw, head, n) in tables {
            let mut o = String::new();
            draw(&mut o, &empty);
            assert_eq!(o, "", "{head}");
            draw(&mut o, &sc);
            if n == 0 {
                assert_eq!(o, "", "{head}");
                continue;
            }
            drawn += 1;
            assert!(o.starts_with(head), "{o}");
            assert_eq!(o.lines().filter(|l| l.starts_with('|')).count(), 2 + n, "{o}");
        }
        assert!(drawn >= 2, "the fixture fills too few of the tables to test");
        assert_eq!(decimals(None, 2), "-");
        assert_eq!(decimals(Some(1.23456), 2), "1.23");
    }

    /// Checks every table of `md`: a header row, a `---` separator row and body rows, all with the
    /// same number of cells (escaped pipes `\|` do not separate cells). Err names the first bad
    /// line.
    fn check_tables(md: &str) -> Result<usize, String> {
        let mut tables = 0;
        let lines: Vec<&str> = md.lines().collect();
        let mut i = 0;
        while i < lines.len() {
            if !lines[i].starts_with('|') {
                i += 1;
                continue;
            }
            let start = i;
            while i < lines.len() && lines[i].starts_with('|') {
                i += 1;
            }
            let block = &lines[start..i];
            tables += 1;
            if block.len() < 2 {
                return Err(format!("line {}: a table without a separator row", start + 1));
            }
            let widths: Vec<usize> = block.iter().map(|l| cells_of(l)).collect::<Result<_, _>>()?;
            let sep = block[1].trim_matches('|').split('|').all(|c| {
                let c = c.trim().trim_start_matches(':').trim_end_matches(':');
                !c.is_empty() && c.chars().all(|ch| ch == '-')
            });
            if !sep {
                return Err(format!(
                    "line {}: second row is not a separator: {}",
                    start + 2,
                    block[1]
                ));
            }
            for (k, w) in widths.iter().enumerate() {
                if *w != widths[0] {
                    return Err(format!(
                        "line {}: {w} cells, the header has {}: {}",
                        start + k + 1,
                        widths[0],
                        block[k]
                    ));
                }
            }
        }
        Ok(tables)
    }

    /// Cells of one `| a | b |` row.
    fn cells_of(line: &str) -> Result<usize, String> {
        let t = line.trim_end();
        if !t.ends_with('|') || t.ends_with("\\|") || t.len() < 2 {
            return Err(format!("row does not end with a pipe: {line}"));
        }
        let mut pipes = 0;
        let mut escaped = false;
        for c in t.chars() {
            match c {
                '\\' if !escaped => escaped = true,
                '|' if !escaped => pipes += 1,
                _ => escaped = false,
            }
            if c != '\\' {
                escaped = false;
            }
        }
        Ok(pipes - 1)
    }

    /// The body rows of the table that follows `heading`, as trimmed cell lists.
    fn rows_after(md: &str, heading: &str) -> Vec<Vec<String>> {
        let start = md
            .find(heading)
            .unwrap_or_else(|| panic!("no {heading:?} in\n{md}"));
        md[start..]
            .lines()
            .skip_while(|l| !l.starts_with('|'))
            .take_while(|l| l.starts_with('|'))
            .skip(2)
            .map(|l| {
                l.trim()
                    .trim_matches('|')
                    .split(" | ")
                    .map(|c| c.trim().to_string())
                    .collect()
            })
            .collect()
    }

    fn row<'a>(rows: &'a [Vec<String>], first: &str) -> &'a [String] {
        rows.iter()
            .find(|r| r[0] == first)
            .unwrap_or_else(|| panic!("no row {first:?} in {rows:?}"))
    }

    fn facts() -> Value {
        serde_json::json!({
            "cpu_model": "AMD EPYC",
            "nproc": 2,
            "constant_tsc": true,
            "nonstop_tsc": true,
            "tsc_known_freq": false,
            "clocksource": "kvm-clock",
            "available_clocksources": ["kvm-clock", "tsc", "acpi_pm"],
            "kernel_tsc_hz": 2445428000.0,
            "kernel_tsc_source": "kernel log",
            "sender_calibration": null,
            "nanosleep": {"requested_ns": 50000, "samples": 200, "median_ns": 60000, "p99_ns": 120000, "max_ns": 300000},
            "sysctls": {"net.core.wmem_max": 212992, "net.core.netdev_max_backlog": 1000},
            "kernel_release": "6.18.44",
            "interfaces": [
                {"namespace": "root", "ifname": "lo", "qdisc": "noqueue", "txqueuelen": 1000},
                {"namespace": "root", "ifname": "eth0", "qdisc": "pfifo_fast", "txqueuelen": 1000}
            ],
            "softnet": [
                {"cpu": 0, "processed": 1200, "dropped": 0, "time_squeeze": 3},
                {"cpu": 1, "processed": 800, "dropped": 2, "time_squeeze": 0}
            ],
            "warnings": []
        })
    }

    fn checks() -> Value {
        serde_json::json!({"usable": true, "checks": [
            {"name": "privileges", "status": "ok", "detail": "CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN) held", "advice": null},
            {"name": "kprobes", "status": "info", "detail": "absent (scanprof does not need them)", "advice": null},
            {"name": "drop reasons", "status": "degraded", "detail": "kfree_skb has reasons but no rx_sk", "advice": "kernel 6.8 or newer adds rx_sk"}
        ]})
    }

    #[test]
    fn the_reply_funnel_is_a_table_of_its_figures() {
        let mut rec = rich_recording();
        let plain = report_md(&rec, None, None, &[]);
        assert!(!plain.contains("## Reply funnel"), "{plain}");
        if let Some(s) = rec.summary.as_mut() {
            s.replies = Some(crate::analysis::replies::ReplyFunnel {
                probes: 1010,
                arrived_total: 7,
                reply_ratio: Some(7.0 / 1010.0),
                unanswered: 1003,
                beyond_host: 1003,
                ..Default::default()
            });
        }
        let md = report_md(&rec, None, None, &[]);
        assert!(md.contains("## Reply funnel"), "{md}");
        assert!(md.contains("| replies arrived (0.007 per probe) | 7 |"), "{md}");
        assert!(md.contains("| of which beyond this host | 1003 |"), "{md}");
        assert_eq!(check_tables(&md), check_tables(&plain).map(|n| n + 1), "{md}");
    }

    #[test]
    fn fixed_recording_renders_every_section_with_its_figures() {
        let rec = rich_recording();
        let s = rec.summary.clone().expect("fixture has a summary");
        let f = facts();
        let c = checks();
        let md = report_md(
            &rec,
            Some(&f),
            Some(&c),
            &[
                ("rates.svg", "Rate over time"),
                ("gap_cdf.svg", "Inter-send gaps [CDF]"),
            ],
        );
        assert_eq!(check_tables(&md), Ok(14), "{md}");

        // Title and meta.
        assert!(
            md.starts_with(
                "# scanprof report: `scanprof run --requested 100 -- sender --to 10.99.0.2:9000`\n"
            ),
            "{md}"
        );
        for line in [
            "- scanprof version: 0.1.0",
            "- date: 2026-11-21T06:00:00Z",
            "- hostname: lab-host",
            "- kernel: 6.18.44",
        ] {
            assert!(md.contains(line), "{line:?} missing in\n{md}");
        }

        // System facts.
        let sys = rows_after(&md, "## System");
        assert_eq!(row(&sys, "CPU model"), ["CPU model", "AMD EPYC"]);
        assert_eq!(
            row(&sys, "TSC flags"),
            [
                "TSC flags",
                "constant\\_tsc yes, nonstop\\_tsc yes, tsc\\_known\\_freq no"
            ]
        );
        assert_eq!(row(&sys, "clocksource"), ["clocksource", "kvm-clock"]);
        assert_eq!(
            row(&sys, "net.core.wmem\\_max"),
            ["net.core.wmem\\_max", "212992"]
        );
        assert_eq!(row(&sys, "kernel"), ["kernel", "6.18.44"]);
        let ifs = rows_after(&md, "### Interfaces");
        assert_eq!(ifs[1], ["root", "eth0", "pfifo\\_fast", "1000"]);
        let softnet = rows_after(&md, "### Softnet statistics");
        assert_eq!(softnet[1], ["1", "800", "2", "0"]);

        // Checks.
        let ch = rows_after(&md, "## Capability checks");
        assert_eq!(
            row(&ch, "drop reasons"),
            [
                "drop reasons",
                "degraded",
                "kfree\\_skb has reasons but no rx\\_sk",
                "kernel 6.8 or newer adds rx\\_sk"
            ]
        );
        assert_eq!(row(&ch, "kprobes")[3], "-");

        // Funnel: the fixture sends 300 packets at 100 pps requested.
        let funnel = rows_after(&md, "## Funnel");
        assert_eq!(funnel.len(), STAGES.len());
        let pps = s.stages["syscall_packets"];
        assert_eq!(
            row(&funnel, "syscall\\_packets"),
            [
                "syscall\\_packets",
                &format!("{pps:.1}"),
                "300",
                &format!("{pps:.1}%")
            ]
        );
        let drops_count = s.stage_counts["target_drops"];
        assert_eq!(drops_count, 150);
        assert_eq!(row(&funnel, "target\\_drops")[2], "150");
        assert_eq!(
            row(&funnel, "qdisc\\_enqueue (no queueing qdisc on the path)")[2],
            "0"
        );

        // Rate statistics.
        let st = s.rate_stats.clone().expect("fixture has rate statistics");
        let stats = rows_after(&md, "## Rate statistics");
        assert_eq!(row(&stats, "median")[1], format!("{:.1}", st.median));
        assert_eq!(row(&stats, "samples")[1], st.n.to_string());
        assert_eq!(row(&stats, "p99")[1], format!("{:.1}", st.p99));
        assert!(stats
            .iter()
            .any(|r| r[0].starts_with("mean without outliers beyond 3 MADs")));

        // Time budget: half sending, half other.
        let budget = rows_after(&md, "## Time budget");
        assert_eq!(row(&budget, "sending")[2], "50.0%");
        assert_eq!(row(&budget, "other (user code, pacing)")[2], "50.0%");
        let sites = rows_after(&md, "### Blocking wait sites");
        assert_eq!(sites[0][0], "sock\\_alloc\\_send\\_pskb");
        assert_eq!(sites[0][1], "7");
        assert_eq!(sites[0][3], "3");

        // Drops: the target's QDISC_DROP row.
        let d = rows_after(&md, "## Drops");
        assert_eq!(d.len(), s.drops.len());
        let qd = &s.drops[0];
        assert_eq!(
            d[0],
            [
                "target\\_loss",
                "QDISC\\_DROP",
                "\\_\\_dev\\_queue\\_xmit+0x1",
                "veth0",
                "7",
                "150",
                &format!("{:.1}", qd.rate)
            ]
        );

        // The scanner's work unit and calibration, from its probes.
        assert!(md.contains("## Scanner (unicornscan)"), "{md}");
        assert!(md.contains("| 1 | 7 | 100 |"), "{md}");
        assert!(md.contains("Error (%)"));

        // Lost events, warnings, plots.
        assert!(md.contains("- lost probe records (ring buffer full): 0"));
        assert!(md.contains("- warning: a warning"), "{md}");
        assert!(md.contains("![Rate over time](rates.svg)"));
        assert!(md.contains("![Inter-send gaps \\[CDF\\]](gap_cdf.svg)"));
        // Section order.
        // Section order: the answer (run, verdicts, drops) first, the machine's tables last.
        let order = [
            "# scanprof report",
            "## Run",
            "## Verdicts",
            "## Drops",
            "## Funnel",
            "## Scanner",
            "## Devices the target's packets crossed",
            "## Rate statistics",
            "## Time budget",
            "## Lost events and warnings",
            "## Plots",
            "## System",
            "## Capability checks",
        ];
        let pos: Vec<usize> = order.iter().map(|h| md.find(h).unwrap_or(usize::MAX)).collect();
        assert!(
            pos.windows(2).all(|w| w[0] < w[1]),
            "sections out of order: {pos:?}\n{md}"
        );
    }

    #[test]
    fn a_bimodal_rate_is_named_with_its_two_modes_as_in_the_text_report() {
        let mut rec = rich_recording();
        let md = report_md(&rec, None, None, &[]);
        assert!(!md.contains("bimodal"), "{md}");
        let mut samples: Vec<f64> = (0..22).map(|i| [0.0, 1.0, 11.5, 13.0][i % 4]).collect();
        samples.extend((0..18).map(|i| 405.0 + (i % 5) as f64 * 5.0));
        if let Some(s) = rec.summary.as_mut() {
            s.rate_stats = crate::analysis::stats::RunStats::from_samples(&samples);
        }
        let md = report_md(&rec, None, None, &[]);
        assert!(
            md.contains("The per-tick rate is bimodal, so no centre describes it: sending 45% of the ticks at median 415.0 pps (405.0 to 425.0), stalled 55% at median 1.0 pps (0.0 to 13.0).\n"),
            "{md}"
        );
        assert!(check_tables(&md).is_ok(), "{md}");
    }

    #[test]
    fn the_probes_cost_is_in_the_report_and_bold_above_the_alert() {
        let mut rec = rich_recording();
        let md = report_md(&rec, None, None, &[]);
        assert!(
            md.contains("- scanprof's BPF programs on the target's threads: 700 ns per target packet, 0.0% of the target's on-CPU time (sampled 10% of the time;"),
            "{md}"
        );
        assert!(
            md.contains(
                "- tax on the rest of the machine: 80.0 us of BPF run time outside the target's threads"
            ),
            "{md}"
        );
        assert!(!md.contains("**scanprof's probes take"), "{md}");
        let b = rec
            .summary
            .as_mut()
            .and_then(|s| s.cost.bpf.as_mut())
            .expect("measured");
        b.share_of_target = Some(0.3);
        b.alert = true;
        let md = report_md(&rec, None, None, &[]);
        assert!(
            md.contains("- **scanprof's probes take 30.0% of the target's on-CPU time"),
            "{md}"
        );
    }

    #[test]
    fn absent_facts_and_checks_are_left_out() {
        let rec = rich_recording();
        let md = report_md(&rec, None, None, &[]);
        assert!(!md.contains("## System"));
        assert!(!md.contains("### Interfaces"));
        assert!(!md.contains("## Capability checks"));
        assert!(!md.contains("## Plots"));
        assert!(md.contains("## Funnel") && md.contains("## Drops"));
        assert!(check_tables(&md).is_ok(), "{md}");
        assert!(
            !md.contains("\n\n\n"),
            "blank lines pile up where sections were left out"
        );
        assert!(md.ends_with('\n') && !md.ends_with("\n\n"));

        // Facts with only some fields: only those rows; no softnet or interfaces headings.
        let partial = serde_json::json!({"clocksource": "tsc", "cpu_model": "", "sysctls": {}});
        let md = report_md(&rec, Some(&partial), Some(&serde_json::json!([])), &[]);
        let sys = rows_after(&md, "## System");
        assert_eq!(sys, vec![vec!["clocksource".to_string(), "tsc".to_string()]]);
        assert!(!md.contains("CPU model") && !md.contains("Softnet") && !md.contains("Interfaces"));
        assert!(!md.contains("## Capability checks"));
    }

    #[test]
    fn a_checks_list_without_the_doctor_wrapper_is_accepted() {
        let rec = rich_recording();
        let list = checks()["checks"].clone();
        let md = report_md(&rec, None, Some(&list), &[]);
        let ch = rows_after(&md, "## Capability checks");
        assert_eq!(ch.len(), 3);
        assert_eq!(row(&ch, "privileges")[1], "ok");
    }

    #[test]
    fn a_recording_without_summary_or_requested_rate_still_renders() {
        let mut rec = rich_recording();
        rec.summary = None;
        let md = report_md(&rec, None, None, &[]);
        assert!(md.contains("has no summary") && md.contains("3 ticks"), "{md}");
        assert!(!md.contains("## Funnel"));
        assert!(md.contains("## Lost events and warnings"));

        let mut rec = rich_recording();
        if let Some(s) = rec.summary.as_mut() {
            s.requested_pps = None;
            s.ratio = None;
            s.rate_stats = None;
        }
        let md = report_md(&rec, None, None, &[]);
        let funnel = rows_after(&md, "## Funnel");
        assert!(funnel.iter().all(|r| r.len() == 4 && r[3] == "-"), "{funnel:?}");
        assert!(md.contains("Requested rate unknown"));
        assert!(md.contains("No tick lay wholly inside the send window"));
        assert!(check_tables(&md).is_ok());
    }

    #[test]
    fn sampled_device_stages_are_estimates_in_the_funnel_table() {
        let mut rec = rich_recording();
        if let Some(s) = rec.summary.as_mut() {
            s.device_sampling = Some(crate::collect::device_window::DeviceSampling::tenth_of_each_second(3));
        }
        let md = report_md(&rec, None, None, &[]);
        let funnel = rows_after(&md, "## Funnel");
        let dev = row(&funnel, "dev\\_queue (sampled 10% of the time, scaled)");
        assert!(dev[1].starts_with("≈ ") && dev[2].starts_with("≈ "), "{dev:?}");
        let sys = row(&funnel, "syscall\\_packets");
        assert!(!sys[2].contains('≈'), "{sys:?}");
        assert!(check_tables(&md).is_ok());
    }

    #[test]
    fn cells_with_pipes_and_markup_keep_the_table_intact() {
        let mut rec = rich_recording();
        if let Some(s) = rec.summary.as_mut() {
            s.drops[0].location = "a|b\nc`d".into();
            s.drops[0].device = None;
            s.drops[0].pid = None;
        }
        rec.meta.command_line = vec![
            "scanprof".into(),
            "run".into(),
            "--".into(),
            "sh".into(),
            "-c".into(),
            "echo `x` | y".into(),
        ];
        let md = report_md(&rec, None, None, &[]);
        assert!(check_tables(&md).is_ok(), "{md}");
        assert!(
            md.starts_with("# scanprof report: ``scanprof run -- sh -c 'echo `x` | y'``\n"),
            "{md}"
        );
        let d = rows_after(&md, "## Drops");
        assert_eq!(d[0][2], "a\\|b c\\`d");
        assert_eq!((d[0][3].as_str(), d[0][4].as_str()), ("-", "-"));
    }

    #[test]
    fn target_loss_rows_come_first() {
        let mut rec = rich_recording();
        if let Some(s) = rec.summary.as_mut() {
            let mut other = s.drops[0].clone();
            other.class = DropClass::Unrelated;
            other.reason = "NO_SOCKET".into();
            let mut expected = s.drops[0].clone();
            expected.class = DropClass::Expected;
            s.drops = vec![other, expected, s.drops[0].clone()];
        }
        let md = report_md(&rec, None, None, &[]);
        let classes: Vec<String> = rows_after(&md, "## Drops")
            .into_iter()
            .map(|r| r[0].clone())
            .collect();
        assert_eq!(classes, ["target\\_loss", "expected", "unrelated"]);
    }

    #[test]
    fn every_strong_or_share_bearing_verdict_is_a_row_and_the_rest_are_counted() {
        let mut rec = rich_recording();
        let all = crate::views::fixtures::verdicts_beyond_five();
        if let Some(s) = rec.summary.as_mut() {
            s.verdicts = all.clone();
        }
        let md = report_md(&rec, None, None, &[]);
        assert!(check_tables(&md).is_ok(), "{md}");
        let rows: Vec<String> = rows_after(&md, "## Verdicts")
            .into_iter()
            .map(|r| r[2].clone())
            .collect();
        let shown: Vec<String> = all[..6].iter().map(|v| escape_inline(&v.sentence)).collect();
        assert_eq!(rows, shown, "{md}");
        assert!(
            md.contains(
                "2 more at 0.0%, with weak evidence: claim\\_mismatch, steal (each in full in the JSON)"
            ),
            "{md}"
        );
    }

    #[test]
    fn text_is_escaped_once_and_never_inside_code_spans() {
        // It read `sock\\\_alloc\\\_send\\\_pskb` and \\\`scanprof baseline\\\` in the
        // verdict table: escaped once for the text, again for the cell.
        let mut rec = rich_recording();
        if let Some(s) = rec.summary.as_mut() {
            s.verdicts = vec![crate::analysis::Verdict {
                cause: crate::analysis::verdict::Cause::BlockedSend,
                kind: crate::analysis::verdict::Kind::Gap,
                sentence: "The sender blocks in sock_alloc_send_pskb".into(),
                share: 0.5,
                evidence: vec!["2.6 s at sock_alloc_send_pskb".into(), "a *b* c".into()],
                next_step: "compare with `scanprof baseline --pacer sleep` or ``a`b``".into(),
                confidence: crate::analysis::verdict::Confidence::Strong,
            }];
            if let Some(sc) = s.scanner.as_mut() {
                sc.notes = vec!["see `net.core.wmem_max` and net_core".into()];
            }
            s.warnings = vec!["use `--map-size block_sites=ENTRIES` for a_b".into()];
        }
        let md = report_md(&rec, None, None, &[]);
        assert!(check_tables(&md).is_ok(), "{md}");
        let v = rows_after(&md, "## Verdicts");
        assert_eq!(
            v[0],
            [
                "gap",
                "50.0%",
                "The sender blocks in sock\\_alloc\\_send\\_pskb",
                "2.6 s at sock\\_alloc\\_send\\_pskb; a \\*b\\* c",
                "compare with `scanprof baseline --pacer sleep` or ``a`b``",
                "strong"
            ]
        );
        // A calibration's probe name in its table: once.
        assert!(md.contains("| tsc\\_init\\_tslot |"), "{md}");
        // Outside tables too: code spans verbatim, the rest escaped once.
        assert!(
            md.contains("- note: see `net.core.wmem_max` and net\\_core\n"),
            "{md}"
        );
        assert!(
            md.contains("- warning: use `--map-size block_sites=ENTRIES` for a\\_b\n"),
            "{md}"
        );
        assert!(!md.contains("\\\\"), "a doubled escape in\n{md}");
    }

    #[test]
    fn escaping_keeps_code_spans_and_escapes_lone_backticks() {
        assert_eq!(escape_inline("a_b `c_d` e*"), "a\\_b `c_d` e\\*");
        assert_eq!(escape_inline("``x ` y`` z"), "``x ` y`` z");
        assert_eq!(escape_inline("one ` two_"), "one \\` two\\_");
        assert_eq!(escape_inline("``a` b"), "\\`\\`a\\` b");
        assert_eq!(cell("`a|b`"), "`a\\|b`");
    }

    #[test]
    fn the_devices_the_targets_packets_crossed_are_listed_with_their_namespace() {
        let mut rec = rich_recording();
        if let Some(s) = rec.summary.as_mut() {
            let mut peer = s.devices[0].clone();
            peer.device = "veth1".into();
            peer.netns = 4026532301;
            peer.qdisc = Some("tbf".into());
            peer.neigh_queued = 41;
            s.devices.push(peer);
        }
        let md = report_md(&rec, Some(&facts()), None, &[]);
        assert!(check_tables(&md).is_ok(), "{md}");
        let d = rows_after(&md, "## Devices the target's packets crossed");
        assert_eq!(d.len(), 2, "{d:?}");
        assert_eq!(&d[0][..2], ["veth0", "1"]);
        assert_eq!(&d[1][..3], ["veth1", "4026532301", "tbf"]);
        assert_eq!(d[1][8], "41");
        // The facts' interface table (root namespace) has neither.
        let ifs = rows_after(&md, "### Interfaces");
        assert!(ifs.iter().all(|r| r[1] != "veth0" && r[1] != "veth1"));
        // No device views: no section.
        if let Some(s) = rec.summary.as_mut() {
            s.devices.clear();
        }
        assert!(!report_md(&rec, None, None, &[]).contains("## Devices"));
    }

    #[test]
    fn drops_on_devices_of_several_namespaces_name_theirs() {
        let mut rec = rich_recording();
        if let Some(s) = rec.summary.as_mut() {
            let mut other = s.drops[0].clone();
            other.device = Some("spv7503-0t".into());
            other.netns = 4026532301;
            s.drops.push(other);
        }
        let md = report_md(&rec, None, None, &[]);
        assert!(check_tables(&md).is_ok(), "{md}");
        assert!(md.contains("| Device | Namespace | PID |"), "{md}");
        let d = rows_after(&md, "## Drops");
        assert_eq!((d[0][3].as_str(), d[0][4].as_str()), ("veth0", "1"));
        assert_eq!((d[1][3].as_str(), d[1][4].as_str()), ("spv7503-0t", "4026532301"));
    }

    #[test]
    fn the_table_checker_catches_bad_tables() {
        assert_eq!(check_tables("| a | b |\n|---|---|\n| 1 | 2 |\n"), Ok(1));
        assert_eq!(
            check_tables("| a | b |\n|---|---|\n| 1 \\| x | 2 |\n\ntext\n| c |\n|---|\n"),
            Ok(2)
        );
        assert_eq!(check_tables("no tables here\n"), Ok(0));
        // A row with a cell too many, one too few, a missing separator, no closing pipe.
        assert!(check_tables("| a | b |\n|---|---|\n| 1 | 2 | 3 |\n").is_err());
        assert!(check_tables("| a | b |\n|---|---|\n| 1 |\n").is_err());
        assert!(check_tables("| a | b |\n| 1 | 2 |\n").is_err());
        assert!(check_tables("| a | b |\n|---|---|\n| 1 | 2\n").is_err());
        assert!(check_tables("| a | b |\n").is_err());
        assert!(check_tables("| a | b |\n|---|---|---|\n").is_err());
    }
}
