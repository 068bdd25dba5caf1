//! The reference UDP sender's stable entry points for the rest of scanprof: the destination
//! rule ([`is_safe_destination`], kept in `methods`, which every send checks) and a plain paced UDP run ([`run`]) as `crate::netlab` and its tests use it. The sender itself (pacers, slot
//! models, send methods, report) lives in `super::engine` and the modules next to it.
//! It only ever sends to loopback or to the lab range (see [`is_safe_destination`]).

use std::net::SocketAddrV4;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::{ensure, Result};

use super::engine::{self, SendConfig};
use super::methods::Method;
use super::pacing::PacerKind;
pub use super::report::SendReport;

/// The system call that hands packets to the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendMethod {
    /// One sendto(2) per packet.
    Sendto,
    /// sendmmsg(2) with `batch` packets per call. All packets of a batch are due together, at
    /// the due time of the batch's first packet, so the rate holds per batch, not per packet.
    Sendmmsg { batch: u32 },
}

/// What to send, where, how fast and for how long.
#[derive(Debug, Clone)]
pub struct UdpSendConfig {
    pub to: SocketAddrV4,
    /// packets per second, a whole number; 0 = as fast as possible
    pub rate: f64,
    /// packets to send; at least one of `count` and `duration` must be set
    pub count: Option<u64>,
    /// longest time to send for
    pub duration: Option<Duration>,
    /// UDP payload bytes (8..=65507: the first 8 carry the sequence number)
    pub size: usize,
    /// SO_SNDBUF to request in bytes (SO_SNDBUFFORCE falling back to SO_SNDBUF); None = kernel default
    pub sndbuf: Option<usize>,
    pub method: SendMethod,
    /// source port to bind (0 = any)
    pub src_port: u16,
}

impl UdpSendConfig {
    /// The sender configuration: the `clock` pacer (`none` when unlimited), deadline slots.
    pub fn to_send_config(&self) -> Result<SendConfig> {
        let rate_pps = whole_rate(self.rate)?;
        let mut cfg = SendConfig::new(self.to, rate_pps, self.count, self.duration);
        cfg.size = self.size;
        cfg.sndbuf = self.sndbuf;
        cfg.src_port = self.src_port;
        cfg.pacer = PacerKind::Clock;
        cfg.method = match self.method {
            SendMethod::Sendto => Method::Sendto,
            SendMethod::Sendmmsg { batch } => Method::Sendmmsg { batch },
        };
        Ok(cfg)
    }

    /// Checks the configuration without touching the network.
    pub fn validate(&self) -> Result<()> {
        self.to_send_config()?.validate()
    }
}

/// `rate` as whole packets per second (0 = unlimited), or why it is not one.
pub fn whole_rate(rate: f64) -> Result<u32> {
    ensure!(
        rate.is_finite() && rate >= 0.0 && rate.fract() == 0.0 && rate <= f64::from(u32::MAX),
        "rate must be a whole number of packets per second, 0..={}, not {rate}",
        u32::MAX
    );
    Ok(rate as u32)
}

pub use super::methods::is_safe_destination;

/// Sends `cfg.to` paced UDP datagrams until the count or the duration is reached or `stop` is
/// set (see [`engine::run`]).
pub fn run(cfg: &UdpSendConfig, stop: &AtomicBool) -> Result<SendReport> {
    engine::run(&cfg.to_send_config()?, stop)
}

#[cfg(test)]
mod tests {
    use std::net::{SocketAddr, UdpSocket};

    use anyhow::bail;

    use super::*;
    use std::net::Ipv4Addr;

    fn config(to: SocketAddrV4) -> UdpSendConfig {
        UdpSendConfig {
            to,
            rate: 1000.0,
            count: Some(10),
            duration: None,
            size: 64,
            sndbuf: None,
            method: SendMethod::Sendto,
            src_port: 0,
        }
    }

    #[test]
    fn a_send_needs_a_count_or_a_duration() {
        let mut cfg = config(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 9));
        cfg.count = None;
        let err = run(&cfg, &AtomicBool::new(false)).expect_err("unbounded send accepted");
        assert!(format!("{err:#}").contains("bound"), "{err:#}");
        cfg.duration = Some(Duration::from_millis(1));
        assert!(cfg.validate().is_ok());
    }

    #[test]
    fn unsafe_destination_is_refused() {
        let cfg = config(SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 1), 9));
        let err = run(&cfg, &AtomicBool::new(false)).expect_err("unsafe destination accepted");
        assert!(format!("{err:#}").contains("refusing"), "{err:#}");
    }

    #[test]
    fn lab_range_is_refused_outside_a_lab() {
        let cfg = config(SocketAddrV4::new(Ipv4Addr::new(10, 99, 0, 2), 9));
        let err = run(&cfg, &AtomicBool::new(false)).expect_err("lab range from the host");
        assert!(format!("{err:#}").contains("outside a lab namespace"), "{err:#}");
    }

    #[test]
    fn bad_sizes_and_batches_are_refused() {
        let mut cfg = config(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 9));
        cfg.size = 4;
        assert!(cfg.validate().is_err());
        cfg.size = 64;
        cfg.method = SendMethod::Sendmmsg { batch: 0 };
        assert!(cfg.validate().is_err());
        cfg.rate = f64::NAN;
        cfg.method = SendMethod::Sendmmsg { batch: 8 };
        assert!(cfg.validate().is_err());
    }

    /// Loopback only: every packet of a paced sendmmsg run reaches a local socket, in order.
    #[test]
    fn sendmmsg_on_loopback_delivers_numbered_packets() -> Result<()> {
        let sink = UdpSocket::bind("127.0.0.1:0")?;
        sink.set_read_timeout(Some(Duration::from_secs(1)))?;
        let SocketAddr::V4(to) = sink.local_addr()? else {
            bail!("IPv4 socket with a non-IPv4 address");
        };
        let mut cfg = config(to);
        cfg.count = Some(50);
        cfg.rate = 5000.0;
        cfg.method = SendMethod::Sendmmsg { batch: 8 };
        let report = run(&cfg, &AtomicBool::new(false))?;
        assert_eq!((report.sent, report.failed), (50, 0));
        let mut buf = [0u8; 128];
        for expected in 0..50u64 {
            let len = sink.recv(&mut buf)?;
            assert_eq!(len, 64);
            assert_eq!(buf[..8], expected.to_be_bytes());
        }
        Ok(())
    }
}
