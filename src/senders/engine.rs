//! The reference sender's main loop: configuration, validation, then wait for a slot, send,
//! record, until the count, the duration or a stop request ends it. The pacing and send steps
//! go through the exported `scanprof_sender_*` functions (`super::symbols`), so profiling this
//! loop sees the same symbols a profile of `scanprof send` names.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{anyhow, ensure, Result};
use nix::time::{clock_gettime, ClockId};

use super::methods::is_safe_destination;
use super::methods::{check_destination, Destinations, Method, Sender, Target, SEQ_BYTES};
use super::pacing::{PacerKind, SlotModel};
use super::report::{RunFacts, SendRecorder, SendReport};
use super::symbols;
use super::tsc::{TscMark, TscSource};
use crate::system::monotonic_ns;
use std::net::SocketAddrV4;

/// Largest UDP payload over IPv4, in bytes.
pub const MAX_PAYLOAD: usize = 65_507;
/// Most packets per sendmmsg call (UIO_MAXIOV) or per TX ring flush.
pub const MAX_BATCH: u32 = 1024;
/// Range of `--calibration-skew`: slots at most this many times too long (a calibration gone
/// wildly wrong, as a gettimeofday calibration that crosses a second can be: the sender then
/// sends slower, never faster)...
pub const MAX_CALIBRATION_SKEW: f64 = 1000.0;
/// ...and at most 1/this too short (the sender then sends faster than asked, so it stays close).
pub const MIN_CALIBRATION_SKEW: f64 = 0.25;

/// Everything `scanprof send` can be asked for.
#[derive(Debug, Clone)]
pub struct SendConfig {
    pub to: SocketAddrV4,
    /// packets per second; 0 = as fast as possible (forces the `none` pacer)
    pub rate_pps: u32,
    /// packets to send; at least one of `count` and `duration` must be set
    pub count: Option<u64>,
    /// longest time to send for
    pub duration: Option<Duration>,
    /// UDP payload bytes (8..=65507: the first 8 carry the sequence number)
    pub size: usize,
    /// SO_SNDBUF to request in bytes (SO_SNDBUFFORCE falling back to SO_SNDBUF)
    pub sndbuf: Option<usize>,
    /// with a packet socket: receive every frame too (ETH_P_ALL) and never read them, so that
    /// replies are left unread when the socket closes (the socket-close-purge lab)
    pub keep_replies: bool,
    pub pacer: PacerKind,
    pub tsc_source: TscSource,
    pub slot: SlotModel,
    pub method: Method,
    /// source port (0: any for UDP sockets, 40000 for raw and packet frames)
    pub src_port: u16,
    /// destination ports from `to`'s: packet i goes to port + (i mod ports); sendto and
    /// sendmmsg only
    pub ports: u16,
    /// fault injection for the tsc pacer: the calibrated TSC frequency is taken this many times
    /// too high, so each slot lasts this many times 1/rate (1.0: no fault)
    pub calibration_skew: f64,
    /// where it may send: local only unless a user named the address (`scanprof send`)
    pub destinations: Destinations,
}

impl SendConfig {
    /// A paced sendto run with the defaults of `scanprof send`.
    pub fn new(
        to: SocketAddrV4,
        rate_pps: u32,
        count: Option<u64>,
        duration: Option<Duration>,
    ) -> SendConfig {
        SendConfig {
            to,
            rate_pps,
            count,
            duration,
            size: 64,
            sndbuf: None,
            keep_replies: false,
            pacer: PacerKind::Clock,
            tsc_source: TscSource::Calibrate,
            slot: SlotModel::Deadline,
            method: Method::Sendto,
            src_port: 0,
            ports: 1,
            calibration_skew: 1.0,
            destinations: Destinations::LocalOnly,
        }
    }

    /// The pacer actually used: `none` when the rate is unlimited.
    pub fn effective_pacer(&self) -> PacerKind {
        if self.rate_pps == 0 {
            PacerKind::None
        } else {
            self.pacer
        }
    }

    /// Checks the configuration without touching the network.
    pub fn validate(&self) -> Result<()> {
        ensure!(
            self.count.is_some() || self.duration.is_some(),
            "a send needs a bound: set a packet count, a duration or both"
        );
        ensure!(
            self.destinations == Destinations::Named || is_safe_destination(*self.to.ip()),
            "refusing to send to {}: only 127.0.0.0/8 and the lab range 10.99.0.0/24 are allowed",
            self.to.ip()
        );
        ensure!(
            (SEQ_BYTES..=MAX_PAYLOAD).contains(&self.size),
            "payload size must be {SEQ_BYTES}..={MAX_PAYLOAD} bytes, not {}",
            self.size
        );
        let skew = self.calibration_skew;
        ensure!(
            skew.is_finite() && (MIN_CALIBRATION_SKEW..=MAX_CALIBRATION_SKEW).contains(&skew),
            "the calibration skew must be {MIN_CALIBRATION_SKEW}..={MAX_CALIBRATION_SKEW}, not {skew}"
        );
        ensure!(
            skew == 1.0 || self.effective_pacer() == PacerKind::Tsc,
            "a calibration skew needs the tsc pacer (--pacer tsc) and a rate"
        );
        if let Method::Sendmmsg { batch } | Method::Packet { batch, .. } = self.method {
            ensure!(
                (1..=MAX_BATCH).contains(&batch),
                "batch must be 1..={MAX_BATCH}, not {batch}"
            );
        }
        Ok(())
    }
}

/// Process user+system CPU time, ns.
fn process_cpu_ns() -> u64 {
    clock_gettime(ClockId::CLOCK_PROCESS_CPUTIME_ID)
        .map_or(0, |ts| ts.tv_sec() as u64 * 1_000_000_000 + ts.tv_nsec() as u64)
}

/// Sends numbered UDP packets to `cfg.to` until the count or the duration is reached or `stop`
/// is set. Slot k carries packets k*batch.. (failed ones included: a failure is counted, not
/// retried); when it is due depends on the slot model, how the sender waits on the pacer.
pub fn run(cfg: &SendConfig, stop: &AtomicBool) -> Result<SendReport> {
    cfg.validate()?;
    check_destination(*cfg.to.ip(), cfg.destinations)?;
    let pacer = cfg.effective_pacer();
    let batch = cfg.method.batch();
    let mut calibration = if pacer == PacerKind::Tsc {
        symbols::skew_calibration(cfg.calibration_skew);
        symbols::scanprof_sender_calibrate(cfg.tsc_source as u8);
        symbols::skew_calibration(1.0);
        let result = symbols::last_calibration().ok_or_else(|| anyhow!("the TSC was not calibrated"))?;
        Some(result.map_err(|e| anyhow!(e))?)
    } else {
        None
    };
    let target = Target {
        to: cfg.to,
        destinations: cfg.destinations,
        size: cfg.size,
        sndbuf: cfg.sndbuf,
        src_port: cfg.src_port,
        keep_replies: cfg.keep_replies,
        ports: cfg.ports,
    };
    let mut sender = Sender::open(&cfg.method, &target)?;
    symbols::plan_slots(cfg.slot, batch);
    ensure!(
        symbols::scanprof_sender_init_slot(cfg.rate_pps, pacer.code()) == 0,
        "cannot start the {} pacer",
        pacer.as_str()
    );

    let tsc_run_start = calibration.is_some().then(TscMark::now);
    let mut rec = SendRecorder::default();
    let cpu_start = process_cpu_ns();
    let start = monotonic_ns();
    let end = cfg
        .duration
        .map(|d| start.saturating_add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)));
    // Unpaced, the next slot's start is when the previous send returned: no extra clock read.
    let unpaced = pacer == PacerKind::None;
    // A skewed TSC clock runs slow (or fast): the duration is kept on CLOCK_MONOTONIC as well.
    let skewed = cfg.calibration_skew != 1.0;
    let mut unrecorded = 0u64;
    // Start of the last send call, when the pacer let it go (on the pacer's clock): the achieved
    // rate's window ends there.
    let mut call_ns = start;
    let mut seq = 0u64;
    loop {
        let n = cfg
            .count
            .map_or(u64::from(batch), |c| (c - seq).min(u64::from(batch)));
        if n == 0 || stop.load(Ordering::Relaxed) {
            break;
        }
        let slot = symbols::scanprof_sender_wait_slot();
        if slot.start_ns == 0 {
            if end.is_some_and(|end| monotonic_ns() >= end) {
                break;
            }
            continue;
        }
        if unrecorded > 0 {
            rec.sent(std::mem::take(&mut unrecorded), call_ns, slot.start_ns);
        }
        if end.is_some_and(|end| slot.start_ns.max(slot.due_ns) >= end || (skewed && monotonic_ns() >= end)) {
            break;
        }
        rec.slot_started(slot.due_ns, slot.start_ns);
        call_ns = slot.start_ns;
        let accepted = symbols::scanprof_sender_send(&mut sender, seq, n as u32);
        if unpaced {
            unrecorded = accepted;
        } else if accepted > 0 {
            rec.sent(accepted, call_ns, monotonic_ns());
        }
        seq += n;
    }
    let flushed = sender.flush();
    let end_ns = monotonic_ns();
    rec.sent(unrecorded + flushed, call_ns, end_ns);
    let cpu_ns = process_cpu_ns().saturating_sub(cpu_start);
    symbols::end_slots();
    if let (Some(cal), Some(mark)) = (calibration.as_mut(), tsc_run_start.as_ref()) {
        cal.measure_run(mark);
    }
    Ok(rec.finish(RunFacts {
        pacer: pacer.as_str(),
        slot: cfg.slot.name(),
        method: cfg.method.name(),
        rate_pps: cfg.rate_pps,
        errors: sender.errors().clone(),
        start_ns: start,
        end_ns,
        cpu_ns,
        calibration,
    }))
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, UdpSocket};

    use super::*;

    fn sink() -> (UdpSocket, SocketAddrV4) {
        let sink = UdpSocket::bind("127.0.0.1:0").expect("bind a loopback sink");
        sink.set_read_timeout(Some(Duration::from_secs(1)))
            .expect("timeout");
        let std::net::SocketAddr::V4(to) = sink.local_addr().expect("address") else {
            panic!("IPv4 socket with a non-IPv4 address");
        };
        (sink, to)
    }

    #[test]
    fn paced_loopback_sends_are_numbered_and_measured() -> Result<()> {
        let (sink, to) = sink();
        for (pacer, slot) in [
            (PacerKind::Clock, SlotModel::Deadline),
            (PacerKind::Sleep, SlotModel::PerPacket),
        ] {
            let mut cfg = SendConfig::new(to, 5000, Some(40), None);
            (cfg.pacer, cfg.slot) = (pacer, slot);
            let report = run(&cfg, &AtomicBool::new(false))?;
            assert_eq!((report.sent, report.failed), (40, 0), "{report:?}");
            assert_eq!(
                (report.pacer.as_str(), report.slot.as_str()),
                (pacer.as_str(), slot.name())
            );
            // Over the schedule (slot 0's due time to the last call's start) a pacer that
            // never starts a slot early cannot read above its request, however late the first,
            // cold send was; below it only by what the sends lost.
            assert!(
                report.achieved_pps > 1000.0 && report.achieved_pps <= 5000.0,
                "{report:?}"
            );
            assert!(report.rate_window_ns >= 39 * 200_000, "{report:?}");
            assert!(report.rate_window_ns <= report.elapsed_ns, "{report:?}");
            assert!(report.gap_ns.min > 0 && report.lateness_ns.max > 0, "{report:?}");
            let mut buf = [0u8; 128];
            for expected in 0..40u64 {
                assert_eq!(sink.recv(&mut buf)?, 64);
                assert_eq!(buf[..8], expected.to_be_bytes());
            }
        }
        Ok(())
    }

    #[test]
    fn unlimited_sendmmsg_accounts_every_packet() -> Result<()> {
        let (sink, to) = sink();
        let mut cfg = SendConfig::new(to, 0, Some(50), None);
        cfg.method = Method::Sendmmsg { batch: 8 };
        let report = run(&cfg, &AtomicBool::new(false))?;
        assert_eq!(
            (report.sent, report.failed, report.pacer.as_str()),
            (50, 0, "none")
        );
        assert_eq!((report.requested_pps, report.accuracy), (None, None));
        assert!(report.last_ns >= report.first_ns && report.first_ns > 0);
        let mut buf = [0u8; 128];
        for expected in 0..50u64 {
            sink.recv(&mut buf)?;
            assert_eq!(buf[..8], expected.to_be_bytes());
        }
        Ok(())
    }

    #[test]
    fn the_tsc_pacer_reports_its_calibration() -> Result<()> {
        let (_sink, to) = sink();
        let mut cfg = SendConfig::new(to, 2000, Some(20), None);
        cfg.pacer = PacerKind::Tsc;
        let report = run(&cfg, &AtomicBool::new(false))?;
        let cal = report.calibration.expect("tsc runs report their calibration");
        assert_eq!(cal.source, "calibrate");
        assert!(cal.took_ns >= 100_000_000 && cal.tsc_hz > 1e8, "{cal:?}");
        assert_eq!(report.sent, 20);
        Ok(())
    }

    #[test]
    fn a_calibration_skew_makes_the_tsc_slots_that_much_too_long() -> Result<()> {
        let (_sink, to) = sink();
        let mut cfg = SendConfig::new(to, 2000, Some(41), None);
        (cfg.pacer, cfg.calibration_skew) = (PacerKind::Tsc, 2.0);
        let report = run(&cfg, &AtomicBool::new(false))?;
        let cal = report
            .calibration
            .clone()
            .expect("tsc runs report their calibration");
        // Slots of 1 ms instead of 0.5 ms: about 1000 pps, never more (a deadline pacer that
        // falls behind only sends later: one busy machine gave 273 pps, 70 ms preempted).
        assert!(report.achieved_pps < 1050.0, "{report:?}");
        // The delay the profile reads: twice the cycles of a 0.5 ms slot.
        let delay = symbols::scanprof_sender_tsc_delay.load(Ordering::Relaxed) as f64;
        assert!(
            (delay / (cal.tsc_hz / 2000.0) - 1.0).abs() < 1e-6,
            "{delay} {cal:?}"
        );
        if let (Some(k), Some(ppm)) = (cal.kernel_tsc_hz, cal.error_ppm) {
            assert!((cal.tsc_hz / k - 2.0).abs() < 0.01, "{cal:?}");
            assert!((ppm - 1e6).abs() < 1e4, "{cal:?}");
        }
        // Over the run (40 slots, 40 ms), each TSC-clock ns lasted two CLOCK_MONOTONIC ns.
        let slot_error = cal.slot_error_ppm.expect("measured over the run");
        assert!((slot_error - 1e6).abs() < 1e3, "{cal:?}");
        // The next run on this thread is not skewed: half the frequency of the skewed one.
        cfg.calibration_skew = 1.0;
        let plain = run(&cfg, &AtomicBool::new(false))?
            .calibration
            .expect("calibration");
        assert!(
            (cal.tsc_hz / plain.tsc_hz - 2.0).abs() < 0.01,
            "{cal:?} {plain:?}"
        );
        Ok(())
    }

    #[test]
    fn a_calibration_skew_needs_the_tsc_pacer_and_a_sane_factor() {
        let mut cfg = SendConfig::new(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 9), 10, Some(1), None);
        cfg.calibration_skew = 1.5;
        assert!(cfg.validate().is_err(), "skew with the clock pacer accepted");
        cfg.pacer = PacerKind::Tsc;
        assert!(cfg.validate().is_ok());
        for bad in [0.0, 0.2, 1000.5, f64::NAN, f64::INFINITY] {
            cfg.calibration_skew = bad;
            assert!(cfg.validate().is_err(), "skew {bad} accepted");
        }
        // Slots far too long are a fault the lab stages (short-miscalibration: 200x).
        for good in [0.25, 200.0, 1000.0] {
            cfg.calibration_skew = good;
            assert!(cfg.validate().is_ok(), "skew {good} refused");
        }
    }

    #[test]
    fn a_send_needs_a_bound_and_a_safe_destination() {
        let cfg = SendConfig::new(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 9), 10, None, None);
        let err = run(&cfg, &AtomicBool::new(false)).expect_err("unbounded send accepted");
        assert!(format!("{err:#}").contains("bound"), "{err:#}");
        let cfg = SendConfig::new(
            SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 1), 9),
            10,
            Some(1),
            None,
        );
        let err = run(&cfg, &AtomicBool::new(false)).expect_err("unsafe destination accepted");
        assert!(format!("{err:#}").contains("refusing"), "{err:#}");
        let mut cfg = SendConfig::new(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 9), 10, Some(1), None);
        cfg.method = Method::Sendmmsg { batch: 0 };
        assert!(cfg.validate().is_err());
        cfg.method = Method::Sendto;
        cfg.size = 4;
        assert!(cfg.validate().is_err());
    }

    #[test]
    fn a_duration_ends_a_slow_send_promptly() -> Result<()> {
        let (_sink, to) = sink();
        let cfg = SendConfig::new(to, 2, Some(100), Some(Duration::from_millis(250)));
        let report = run(&cfg, &AtomicBool::new(false))?;
        // Slots at 0 and 500 ms: only the first is inside 250 ms.
        assert_eq!(report.sent, 1, "{report:?}");
        assert!(report.elapsed_ns < 400_000_000, "{report:?}");
        Ok(())
    }
}
