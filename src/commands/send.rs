//! `scanprof send`: the reference UDP sender as a command (a traffic source for labs and tests).

use std::process::ExitCode;
use std::time::Duration;

use anyhow::bail;

use crate::cli::{SendMethodArg, SendOptions};
use crate::senders::udp::{self, SendMethod, UdpSendConfig};

pub fn run(o: &SendOptions) -> anyhow::Result<ExitCode> {
    if o.count.is_none() && o.duration.is_none() {
        bail!("say how much to send: --count N or --duration SECONDS");
    }
    let cfg = UdpSendConfig {
        to: o.to,
        rate: o.rate,
        count: o.count,
        duration: o.duration.map(Duration::from_secs_f64),
        size: o.size,
        sndbuf: o.sndbuf,
        method: match o.method {
            SendMethodArg::Sendto => SendMethod::Sendto,
            SendMethodArg::Sendmmsg => SendMethod::Sendmmsg { batch: o.batch },
        },
        src_port: o.src_port,
    };
    let stop = super::profile::stop_flag()?;
    let report = udp::run(&cfg, &stop)?;
    if o.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        println!(
            "sent {} packets ({} failed) to {} at {:.1} pps (requested {}), {:.3} s",
            report.sent,
            report.failed,
            o.to,
            report.achieved_pps,
            if o.rate > 0.0 {
                format!("{:.0}", o.rate)
            } else {
                "unlimited".into()
            },
            report.elapsed_ns as f64 / 1e9
        );
        for (errno, n) in &report.errors {
            println!("  {errno}: {n}");
        }
    }
    Ok(ExitCode::SUCCESS)
}
