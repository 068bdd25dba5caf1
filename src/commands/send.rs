//! `scanprof send`: the reference sender as a command (a traffic source for labs, tests and the
//! baseline): turns the options into a `senders::engine::SendConfig`, runs it and prints the
//! report as text or as one JSON object.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::ensure;

use crate::cli::{PacerArg, SendMethodArg, SendOptions, SlotArg, TscSourceArg};
use crate::senders::engine::{self, SendConfig};
use crate::senders::methods::{Destinations, Method};
use crate::senders::pacing::{PacerKind, SlotModel};
use crate::senders::report::SendReport;
use crate::senders::tsc::TscSource;
use crate::senders::udp::is_safe_destination;
use crate::senders::udp::whole_rate;

/// Packets sent when neither --count nor --duration is given.
pub const DEFAULT_COUNT: u64 = 1000;
/// Seconds a send lasts at most when neither --count nor --duration is given.
pub const DEFAULT_DURATION_S: f64 = 10.0;

/// The sender configuration `o` asks for.
pub fn config(o: &SendOptions) -> anyhow::Result<SendConfig> {
    config_for(o, Destinations::for_command_line())
}

/// The sender configuration `o` asks for, sending where `destinations` allows.
pub fn config_for(o: &SendOptions, destinations: Destinations) -> anyhow::Result<SendConfig> {
    // Bounded by default: without --count or --duration, DEFAULT_COUNT packets in at most
    // DEFAULT_DURATION_S seconds.
    let (count, duration) = match (o.count, o.duration) {
        (None, None) => (Some(DEFAULT_COUNT), Some(DEFAULT_DURATION_S)),
        bounds => bounds,
    };
    let duration = match duration {
        Some(d) => {
            ensure!(
                d.is_finite() && d > 0.0,
                "--duration must be a positive number of seconds"
            );
            Some(Duration::from_secs_f64(d))
        }
        None => None,
    };
    ensure!(
        o.method == SendMethodArg::Packet || (!o.ring && o.dev.is_none()),
        "--ring and --dev go with --method packet"
    );
    let mut cfg = SendConfig::new(o.to, whole_rate(o.rate)?, count, duration);
    cfg.destinations = destinations;
    cfg.size = o.size;
    cfg.sndbuf = o.sndbuf;
    cfg.src_port = o.src_port;
    cfg.ports = o.ports;
    cfg.calibration_skew = o.calibration_skew;
    cfg.pacer = match o.pacer {
        PacerArg::Tsc => PacerKind::Tsc,
        PacerArg::Clock => PacerKind::Clock,
        PacerArg::Sleep => PacerKind::Sleep,
        PacerArg::None => PacerKind::None,
    };
    cfg.tsc_source = match o.tsc_source {
        TscSourceArg::Calibrate => TscSource::Calibrate,
        TscSourceArg::Kernel => TscSource::Kernel,
    };
    cfg.slot = match o.slot {
        SlotArg::PerPacket => SlotModel::PerPacket,
        SlotArg::Deadline => SlotModel::Deadline,
    };
    cfg.method = match o.method {
        SendMethodArg::Sendto => Method::Sendto,
        SendMethodArg::Raw => Method::Raw,
        SendMethodArg::Sendmmsg => Method::Sendmmsg { batch: o.batch },
        SendMethodArg::Packet => Method::Packet {
            ring: o.ring,
            batch: if o.ring { o.batch } else { 1 },
            dev: o.dev.clone(),
        },
    };
    cfg.keep_replies = o.keep_replies && o.method == SendMethodArg::Packet;
    cfg.validate()?;
    Ok(cfg)
}

pub fn run(o: &SendOptions) -> anyhow::Result<ExitCode> {
    let cfg = config(o)?;
    if !is_safe_destination(*cfg.to.ip()) {
        // Beyond this machine's loopback and labs: say what will go out before it does.
        eprintln!("scanprof send: {}", plan(&cfg));
    }
    if matches!(o.method, SendMethodArg::Raw | SendMethodArg::Packet) {
        let missing = crate::system::caps::missing(&[crate::system::caps::CAP_NET_RAW]);
        ensure!(
            missing.is_empty(),
            "--method {} opens a raw socket and needs CAP_NET_RAW: run as root (or give the \
             binary cap_net_raw), or use --method sendto or sendmmsg",
            if o.method == SendMethodArg::Raw {
                "raw"
            } else {
                "packet"
            }
        );
    }
    let stop = crate::run::stop_flag()?;
    let report = engine::run(&cfg, &stop)?;
    if o.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print!("{}", text(&report, &cfg));
    }
    Ok(ExitCode::SUCCESS)
}

/// What a send will do, in one line: where, how many, how fast, how long.
pub fn plan(cfg: &SendConfig) -> String {
    let mut parts = vec![match cfg.count {
        Some(n) => format!("up to {n} packets of {} payload bytes", cfg.size),
        None => format!("packets of {} payload bytes", cfg.size),
    }];
    parts.push(if cfg.rate_pps == 0 {
        "as fast as possible".to_string()
    } else {
        format!("at {} pps", cfg.rate_pps)
    });
    if let Some(d) = cfg.duration {
        parts.push(format!("for at most {} s", d.as_secs_f64()));
    }
    parts.push(format!("with {}", cfg.method.name()));
    format!("sending UDP to {}: {}", cfg.to, parts.join(", "))
}

/// The report for people.
pub fn text(r: &SendReport, cfg: &SendConfig) -> String {
    let mut out = format!(
        "sent {} packets ({} failed) to {} with {} ({} pacer, {} slots)\n",
        r.sent, r.failed, cfg.to, r.method, r.pacer, r.slot
    );
    match (r.requested_pps, r.accuracy) {
        (Some(req), Some(acc)) => {
            out += &format!(
                "  rate      {:.1} pps of {req} requested: {:.3}% accuracy (over {:.3} s of schedule: the first slot due to the last send)\n",
                r.achieved_pps,
                acc * 100.0,
                r.rate_window_ns as f64 / 1e9
            )
        }
        _ => {
            out += &format!(
                "  rate      {:.1} pps (unlimited; over {:.3} s: the first send to the last)\n",
                r.achieved_pps,
                r.rate_window_ns as f64 / 1e9
            )
        }
    }
    out += &format!(
        "  lateness  mean {:.0} ns, p50 {} ns, p99 {} ns, max {} ns\n",
        r.lateness_ns.mean, r.lateness_ns.p50, r.lateness_ns.p99, r.lateness_ns.max
    );
    out += &format!(
        "  gap       mean {:.0} ns, p50 {} ns, p99 {} ns, min {} ns, max {} ns\n",
        r.gap_ns.mean, r.gap_ns.p50, r.gap_ns.p99, r.gap_ns.min, r.gap_ns.max
    );
    out += &format!(
        "  cpu       {:.0} ns per packet; {:.3} s elapsed\n",
        r.cpu_ns_per_packet,
        r.elapsed_ns as f64 / 1e9
    );
    if let Some(c) = &r.calibration {
        out += &format!(
            "  tsc       {:.0} Hz from {} (kernel: {}, calibration error: {}, took {:.1} ms); slots {} on CLOCK_MONOTONIC\n",
            c.tsc_hz,
            c.source,
            c.kernel_tsc_hz.map_or("unknown".into(), |k| format!("{k:.0} Hz")),
            c.error_ppm.map_or("unknown".into(), |e| format!("{e:+.1} ppm")),
            c.took_ns as f64 / 1e6,
            c.slot_error_ppm.map_or("not measured (under 1 ms)".into(), |e| format!("{e:+.1} ppm long")),
        );
    }
    for (errno, n) in &r.errors {
        out += &format!("  {errno}: {n}\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command};

    fn options(args: &[&str]) -> SendOptions {
        let argv = ["scanprof", "send", "--to", "127.0.0.1:9"].iter().chain(args);
        match Cli::try_parse_from(argv).expect("parses").command {
            Command::Send(o) => o,
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn defaults_follow_the_contract() {
        let cfg = config(&options(&["--count", "5"])).expect("valid");
        assert_eq!(cfg.rate_pps, 1000);
        assert_eq!(
            (cfg.pacer, cfg.slot, cfg.method.clone()),
            (PacerKind::Clock, SlotModel::Deadline, Method::Sendto)
        );
        assert_eq!((cfg.size, cfg.tsc_source), (64, TscSource::Calibrate));
    }

    #[test]
    fn every_option_maps_to_the_config() {
        #[rustfmt::skip]
        let o = options(&[
            "--rate", "0", "--duration", "2", "--size", "100", "--pacer", "tsc", "--tsc-source", "kernel",
            "--slot", "per-packet", "--method", "packet", "--ring", "--batch", "16", "--dev", "lo",
            "--src-port", "5000", "--sndbuf", "65536", "--json",
        ]);
        let cfg = config(&o).expect("valid");
        assert_eq!((cfg.rate_pps, cfg.effective_pacer()), (0, PacerKind::None));
        assert_eq!(
            (cfg.pacer, cfg.tsc_source, cfg.slot),
            (PacerKind::Tsc, TscSource::Kernel, SlotModel::PerPacket)
        );
        assert_eq!(
            cfg.method,
            Method::Packet {
                ring: true,
                batch: 16,
                dev: Some("lo".into())
            }
        );
        assert_eq!((cfg.size, cfg.src_port, cfg.sndbuf), (100, 5000, Some(65536)));
        assert_eq!(cfg.calibration_skew, 1.0);
        assert_eq!(cfg.duration, Some(Duration::from_secs(2)));
        assert!(o.json);
        let skewed = options(&["--count", "1", "--pacer", "tsc", "--calibration-skew", "1.5"]);
        assert_eq!(config(&skewed).expect("valid").calibration_skew, 1.5);
        let cfg = config(&options(&["--count", "1", "--method", "raw"])).expect("valid");
        assert_eq!(cfg.method, Method::Raw);
    }

    #[test]
    fn a_send_is_bounded_by_default_and_says_what_it_will_do() {
        use clap::Parser;
        let options = |args: &[&str]| {
            let mut argv = vec!["scanprof", "send"];
            argv.extend(args);
            match crate::cli::Cli::try_parse_from(argv).unwrap().command {
                crate::cli::Command::Send(o) => o,
                _ => unreachable!(),
            }
        };
        let parse = |args: &[&str]| config_for(&options(args), Destinations::Named).unwrap();
        let cfg = parse(&["--to", "192.0.2.1:9", "--rate", "500"]);
        assert_eq!(cfg.count, Some(DEFAULT_COUNT));
        assert_eq!(cfg.duration, Some(Duration::from_secs_f64(DEFAULT_DURATION_S)));
        assert_eq!(
            plan(&cfg),
            "sending UDP to 192.0.2.1:9: up to 1000 packets of 64 payload bytes, at 500 pps, for at most 10 s, with sendto"
        );
        // One bound given: only that one.
        let cfg = parse(&["--to", "192.0.2.1:9", "--count", "5"]);
        assert_eq!((cfg.count, cfg.duration), (Some(5), None));
        assert_eq!(cfg.destinations, Destinations::Named);
        // Held to local destinations (SCANPROF_SEND_LOCAL_ONLY=1), the same address is refused.
        let err = config_for(&options(&["--to", "192.0.2.1:9"]), Destinations::LocalOnly).unwrap_err();
        assert!(err.to_string().contains("refusing to send to 192.0.2.1"), "{err}");
    }

    #[test]
    fn bad_combinations_are_refused() {
        for args in [
            &["--count", "1", "--rate", "2.5"][..],
            &["--count", "1", "--ring"],
            &["--count", "1", "--calibration-skew", "1.5"],
        ] {
            assert!(config(&options(args)).is_err(), "{args:?} accepted");
        }
        // Out-of-range numbers are refused by the parser itself (cli's value parsers).
        for args in [
            &["--count", "1", "--duration", "0"][..],
            &["--count", "1", "--method", "sendmmsg", "--batch", "0"],
            &["--count", "1", "--pacer", "tsc", "--calibration-skew", "1001"],
            &["--count", "1", "--pacer", "tsc", "--calibration-skew", "0.2"],
        ] {
            let argv = ["scanprof", "send", "--to", "127.0.0.1:9"].iter().chain(args);
            assert!(Cli::try_parse_from(argv).is_err(), "{args:?} parsed");
        }
    }
}
