//! What a reference send did: the per-slot timing the sender records while it runs (lateness
//! against the due time, gaps between sends, in fixed-size log-linear histograms) and the
//! [`SendReport`] that `scanprof send --json` prints. Pure: every time comes in as an argument.

use std::collections::BTreeMap;

use serde::Serialize;

use super::tsc::Calibration;

const NS_PER_S: f64 = 1e9;
/// Sub-buckets per power of two: quantiles are exact below 2^SUB_BITS ns, within 1/64 above.
const SUB_BITS: u32 = 6;
const SUB: u64 = 1 << SUB_BITS;
const BUCKETS: usize = (SUB as usize) * (64 - SUB_BITS as usize + 1);

/// A log-linear histogram of ns values with count, sum, min and max.
#[derive(Debug, Clone)]
pub struct NsHistogram {
    counts: Box<[u64]>,
    count: u64,
    sum: u128,
    min: u64,
    max: u64,
}

impl Default for NsHistogram {
    fn default() -> Self {
        NsHistogram {
            counts: vec![0; BUCKETS].into_boxed_slice(),
            count: 0,
            sum: 0,
            min: u64::MAX,
            max: 0,
        }
    }
}

fn bucket_of(v: u64) -> usize {
    if v < SUB {
        return v as usize;
    }
    let exp = 63 - v.leading_zeros(); // >= SUB_BITS
    let mantissa = v >> (exp - SUB_BITS); // in SUB..2*SUB
    (SUB + u64::from(exp - SUB_BITS) * SUB + (mantissa - SUB)) as usize
}

/// Middle of bucket `i`'s value range.
fn bucket_mid(i: usize) -> u64 {
    let i = i as u64;
    if i < SUB {
        return i;
    }
    let exp = (i - SUB) / SUB + u64::from(SUB_BITS);
    let mantissa = (i - SUB) % SUB + SUB;
    let width = 1u64 << (exp - u64::from(SUB_BITS));
    (mantissa << (exp - u64::from(SUB_BITS))) + width / 2
}

impl NsHistogram {
    pub fn record(&mut self, v: u64) {
        self.counts[bucket_of(v)] += 1;
        self.count += 1;
        self.sum += u128::from(v);
        self.min = self.min.min(v);
        self.max = self.max.max(v);
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn mean(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum as f64 / self.count as f64
        }
    }

    /// The value at quantile `q` (0..=1): exact below 64 ns, else within 1/64; 0 when empty.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.count as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, n) in self.counts.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return bucket_mid(i).clamp(self.min, self.max);
            }
        }
        self.max
    }

    pub fn min(&self) -> u64 {
        if self.count == 0 {
            0
        } else {
            self.min
        }
    }

    pub fn max(&self) -> u64 {
        self.max
    }
}

/// `lateness_ns` in the report: how late each send call started against its due time.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct LatenessStats {
    pub mean: f64,
    pub p50: u64,
    pub p99: u64,
    pub max: u64,
}

/// `gap_ns` in the report: time between the starts of consecutive send calls.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct GapStats {
    pub mean: f64,
    pub p50: u64,
    pub p99: u64,
    pub min: u64,
    pub max: u64,
}

/// What one reference send did (`scanprof send --json`; field names and units are a contract).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SendReport {
    /// "tsc", "clock", "sleep" or "none"
    pub pacer: String,
    /// "per-packet" or "deadline"
    pub slot: String,
    /// "sendto", "raw", "sendmmsg" or "packet"
    pub method: String,
    /// packets per second asked for; None = as fast as possible
    pub requested_pps: Option<u64>,
    /// packets the kernel accepted
    pub sent: u64,
    /// packets whose send failed (not retried)
    pub failed: u64,
    /// errno name ("ENOBUFS", ...) -> failed packets
    pub errors: BTreeMap<String, u64>,
    /// packets per second over the schedule: the packets of every send call before the last
    /// one that was accepted, over the time from the start of the schedule to when that last
    /// call's slot started ([`SendReport::rate_window_ns`], CLOCK_MONOTONIC). A pacer that never starts
    /// a slot early therefore never reads above its request, however late (and cold) its first
    /// send was; 0 when fewer than two calls were accepted
    pub achieved_pps: f64,
    /// achieved_pps / requested_pps; None when unlimited
    pub accuracy: Option<f64>,
    /// CLOCK_MONOTONIC ns when the first successful send call returned (0 if none)
    pub first_ns: u64,
    /// CLOCK_MONOTONIC ns when the last successful send call returned (0 if none)
    pub last_ns: u64,
    /// CLOCK_MONOTONIC ns from the run's start (just before slot 0 was due) to its end
    pub elapsed_ns: u64,
    /// the window `achieved_pps` is measured over: from the start of the schedule (when slot 0
    /// was due) to the start of the last send call that had packets accepted (when the pacer let
    /// it go), in CLOCK_MONOTONIC ns; the tsc pacer's own readings are put in CLOCK_MONOTONIC ns
    /// with the TSC's rate over the run (0 when fewer than two calls were accepted)
    pub rate_window_ns: u64,
    pub lateness_ns: LatenessStats,
    pub gap_ns: GapStats,
    /// process user+system CPU ns during the run / sent (0 if nothing was sent)
    pub cpu_ns_per_packet: f64,
    /// the tsc pacer's frequency and how it was found; None for other pacers
    pub calibration: Option<Calibration>,
}

/// Collects the timing of a send as it runs; [`SendRecorder::finish`] makes the report.
#[derive(Debug, Default)]
pub struct SendRecorder {
    lateness: NsHistogram,
    gaps: NsHistogram,
    prev_start_ns: Option<u64>,
    /// when slot 0 was due, on the pacer's clock: the schedule's start
    first_due_ns: Option<u64>,
    /// start of the last send call that had packets accepted (pacer's clock), and how many
    last_call: Option<(u64, u64)>,
    sent: u64,
    first_ns: u64,
    last_ns: u64,
}

impl SendRecorder {
    /// A send call (one packet or one batch) due at `due_ns` started at `start_ns`, both on the
    /// pacer's clock (CLOCK_MONOTONIC, or the tsc pacer's TSC clock).
    #[inline]
    pub fn slot_started(&mut self, due_ns: u64, start_ns: u64) {
        self.lateness.record(start_ns.saturating_sub(due_ns));
        self.first_due_ns.get_or_insert(due_ns);
        if let Some(prev) = self.prev_start_ns.replace(start_ns) {
            self.gaps.record(start_ns.saturating_sub(prev));
        }
    }

    /// A send call that started at `call_ns` (the pacer's clock) returned by `now_ns`
    /// (CLOCK_MONOTONIC) with `packets` accepted; a flush at the end passes the last call's
    /// start and adds to it.
    #[inline]
    pub fn sent(&mut self, packets: u64, call_ns: u64, now_ns: u64) {
        if packets == 0 {
            return;
        }
        if self.sent == 0 {
            self.first_ns = now_ns;
        }
        self.last_ns = now_ns;
        self.sent += packets;
        self.last_call = Some(match self.last_call {
            Some((s, n)) if s == call_ns => (s, n + packets),
            _ => (call_ns, packets),
        });
    }

    /// Packets per second over a schedule that started at `start_ns` (the pacer's clock, whose
    /// ns last `monotonic_per_pacer_ns` CLOCK_MONOTONIC ns), and the window it covers in
    /// CLOCK_MONOTONIC ns (see [`SendReport::achieved_pps`]): (0.0, 0) with fewer than two
    /// accepted calls.
    fn schedule_rate(&self, start_ns: u64, monotonic_per_pacer_ns: f64) -> (f64, u64) {
        let Some((last_start, last_packets)) = self.last_call else {
            return (0.0, 0);
        };
        let window = (last_start.saturating_sub(start_ns) as f64 * monotonic_per_pacer_ns).round() as u64;
        let before_last = self.sent - last_packets;
        if window == 0 || before_last == 0 {
            return (0.0, 0);
        }
        (before_last as f64 * NS_PER_S / window as f64, window)
    }

    pub fn sent_so_far(&self) -> u64 {
        self.sent
    }

    /// The report of a run from `start_ns` to `end_ns`, with the failures counted by the send
    /// method and the process CPU ns the run used. Its rate window starts when slot 0 was due,
    /// not at `start_ns`: the sender's first wait (cold code) is not the schedule's. On the tsc
    /// pacer it is measured on the TSC clock, whose readings the pacer took, and put in
    /// CLOCK_MONOTONIC ns with the TSC's rate over the run (`slot_error_ppm`).
    pub fn finish(self, run: RunFacts) -> SendReport {
        let monotonic_per_pacer_ns = run
            .calibration
            .as_ref()
            .map_or(1.0, Calibration::monotonic_ns_per_pacer_ns);
        let (achieved_pps, rate_window_ns) =
            self.schedule_rate(self.first_due_ns.unwrap_or(run.start_ns), monotonic_per_pacer_ns);
        let requested_pps = (run.rate_pps > 0).then_some(u64::from(run.rate_pps));
        SendReport {
            pacer: run.pacer.to_string(),
            slot: run.slot.to_string(),
            method: run.method.to_string(),
            requested_pps,
            sent: self.sent,
            failed: run.errors.values().sum(),
            errors: run.errors,
            achieved_pps,
            accuracy: requested_pps.map(|r| achieved_pps / r as f64),
            first_ns: self.first_ns,
            last_ns: self.last_ns,
            elapsed_ns: run.end_ns.saturating_sub(run.start_ns),
            rate_window_ns,
            lateness_ns: LatenessStats {
                mean: self.lateness.mean(),
                p50: self.lateness.quantile(0.5),
                p99: self.lateness.quantile(0.99),
                max: self.lateness.max(),
            },
            gap_ns: GapStats {
                mean: self.gaps.mean(),
                p50: self.gaps.quantile(0.5),
                p99: self.gaps.quantile(0.99),
                min: self.gaps.min(),
                max: self.gaps.max(),
            },
            cpu_ns_per_packet: if self.sent == 0 {
                0.0
            } else {
                run.cpu_ns as f64 / self.sent as f64
            },
            calibration: run.calibration,
        }
    }
}

/// Facts about a finished run that the recorder does not see itself.
#[derive(Debug, Clone, Default)]
pub struct RunFacts {
    pub pacer: &'static str,
    pub slot: &'static str,
    pub method: &'static str,
    /// 0 = unlimited
    pub rate_pps: u32,
    /// errno name -> failed packets
    pub errors: BTreeMap<String, u64>,
    /// CLOCK_MONOTONIC ns when the run started, just before its first wait for slot 0
    pub start_ns: u64,
    pub end_ns: u64,
    /// process user+system CPU ns during the run
    pub cpu_ns: u64,
    pub calibration: Option<Calibration>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_quantiles_are_exact_small_and_close_large() {
        let mut h = NsHistogram::default();
        for v in 0..50 {
            h.record(v);
        }
        assert_eq!((h.quantile(0.5), h.min(), h.max()), (24, 0, 49));
        let mut h = NsHistogram::default();
        for v in 1..=100_000u64 {
            h.record(v * 1000);
        }
        for (q, want) in [(0.5, 50_000_000.0), (0.99, 99_000_000.0)] {
            let got = h.quantile(q) as f64;
            assert!((got - want).abs() / want < 1.0 / 64.0, "q{q}: {got} vs {want}");
        }
        assert_eq!(h.quantile(1.0), 100_000_000);
        assert!((h.mean() - 50_000_500.0).abs() < 1e-3);
        assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn report_has_rate_accuracy_lateness_and_gaps() {
        let mut r = SendRecorder::default();
        // 11 packets due every 1 ms from t=1 s; the 6th starts 300 us late.
        for k in 0..11u64 {
            let due = 1_000_000_000 + k * 1_000_000;
            let start = due + if k == 5 { 300_000 } else { 100 };
            r.slot_started(due, start);
            r.sent(1, start, start + 2_000);
        }
        let mut errors = BTreeMap::new();
        errors.insert("ENOBUFS".to_string(), 2);
        let report = r.finish(RunFacts {
            pacer: "clock",
            slot: "deadline",
            method: "sendto",
            rate_pps: 1000,
            errors,
            start_ns: 1_000_000_000,
            end_ns: 1_011_000_000,
            cpu_ns: 22_000,
            calibration: None,
        });
        assert_eq!((report.sent, report.failed), (11, 2));
        assert_eq!(report.requested_pps, Some(1000));
        // 10 packets before the last call, from slot 0's due time to the last call's start.
        assert_eq!(report.rate_window_ns, 10_000_100);
        assert!(
            (report.achieved_pps - 10.0 * 1e9 / 10_000_100.0).abs() < 1e-9,
            "{report:?}"
        );
        assert_eq!(report.accuracy, Some(report.achieved_pps / 1000.0));
        assert_eq!((report.lateness_ns.p50, report.lateness_ns.max), (100, 300_000));
        assert_eq!((report.gap_ns.min, report.gap_ns.max), (700_100, 1_299_900));
        assert_eq!(report.elapsed_ns, 11_000_000);
        assert_eq!(report.cpu_ns_per_packet, 2_000.0);
        let json = serde_json::to_value(&report).expect("serializable");
        let keys: Vec<&str> = json
            .as_object()
            .expect("object")
            .keys()
            .map(String::as_str)
            .collect();
        #[rustfmt::skip]
        assert_eq!(keys, [
            "pacer", "slot", "method", "requested_pps", "sent", "failed", "errors", "achieved_pps",
            "accuracy", "first_ns", "last_ns", "elapsed_ns", "rate_window_ns", "lateness_ns", "gap_ns",
            "cpu_ns_per_packet", "calibration",
        ]);
    }

    #[test]
    fn a_late_cold_first_send_does_not_raise_the_rate_above_the_schedule() {
        // 40 slots of 200 us (5,000 pps), the first 1.6 ms late (its cold path) and the deadline
        // pacer catching up: first-to-last return spans 7.61 ms for 39 gaps, 5,125 pps, which a
        // fresh Intel VM showed. Over the schedule the sender never runs ahead of its request.
        let mut r = SendRecorder::default();
        for k in 0..40u64 {
            let due = k * 200_000;
            let start = if k < 9 {
                1_600_000 + k * 10_000
            } else {
                due + 1_000
            };
            r.slot_started(due, start.max(due));
            r.sent(1, start.max(due), start.max(due) + 5_000);
        }
        let report = r.finish(RunFacts {
            rate_pps: 5000,
            start_ns: 0,
            ..RunFacts::default()
        });
        assert_eq!(report.sent, 40);
        assert_eq!(report.rate_window_ns, 39 * 200_000 + 1_000);
        assert!(report.achieved_pps <= 5000.0, "{report:?}");
        assert!(report.achieved_pps > 4999.0, "{report:?}");
    }

    /// 1,000 one-packet slots of 1 ms from `slot0_ns` on the pacer's clock, each started `late_ns`
    /// after it was due and returning 3 us later.
    fn thousand_slots_of_a_ms(slot0_ns: u64, late_ns: u64) -> SendRecorder {
        let mut r = SendRecorder::default();
        for k in 0..1_000u64 {
            let due = slot0_ns + k * 1_000_000;
            r.slot_started(due, due + late_ns);
            r.sent(1, due + late_ns, due + late_ns + 3_000);
        }
        r
    }

    #[test]
    fn the_schedule_starts_when_slot_0_was_due_not_when_the_run_began() {
        // The run began 5 us before its first wait read the clock and made slot 0 due (the
        // sender's set-up, the first wait's cold code): 1,000 slots of 1 ms, each 50 ns late,
        // span 999 ms + 50 ns of schedule. The 5 us are the sender's, not the schedule's.
        let slot0 = 1_000_005_000u64;
        let report = thousand_slots_of_a_ms(slot0, 50).finish(RunFacts {
            rate_pps: 1000,
            start_ns: 1_000_000_000,
            end_ns: slot0 + 1_000_000_000,
            ..RunFacts::default()
        });
        assert_eq!(report.rate_window_ns, 999_000_050);
        assert_eq!(report.elapsed_ns, 1_000_005_000);
        assert!(
            report.achieved_pps <= 1000.0 && report.achieved_pps > 999.9999,
            "{report:?}"
        );
    }

    #[test]
    fn a_tsc_schedule_is_put_in_clock_monotonic_ns_with_the_tscs_rate_over_the_run() {
        // The pacer kept 1,000 slots of 1 ms on its TSC clock to the ns, but its frequency was
        // 0.1% high against CLOCK_MONOTONIC over the run: each slot lasted 1.001 ms.
        let report = thousand_slots_of_a_ms(0, 0).finish(RunFacts {
            rate_pps: 1000,
            calibration: Some(Calibration {
                source: "calibrate".into(),
                tsc_hz: 2.002e9,
                kernel_tsc_hz: Some(2e9),
                error_ppm: Some(1000.0),
                took_ns: 100_000_000,
                slot_error_ppm: Some(1000.0),
            }),
            ..RunFacts::default()
        });
        assert_eq!(report.rate_window_ns, 999_999_000);
        assert!(
            (report.achieved_pps - 999e9 / 999_999_000.0).abs() < 1e-9,
            "{report:?}"
        );
    }

    #[test]
    fn a_batch_counts_its_packets_in_the_window_of_the_calls_before_the_last() {
        // sendmmsg of 8 at 8,000 pps: a call every 1 ms; the TX-ring flush at the end adds to
        // the last call instead of counting as another one.
        let mut r = SendRecorder::default();
        for k in 0..5u64 {
            r.slot_started(k * 1_000_000, k * 1_000_000);
            r.sent(if k == 4 { 3 } else { 8 }, k * 1_000_000, k * 1_000_000 + 50_000);
        }
        r.sent(5, 4_000_000, 4_200_000);
        let report = r.finish(RunFacts {
            rate_pps: 8000,
            ..RunFacts::default()
        });
        assert_eq!((report.sent, report.rate_window_ns), (40, 4_000_000));
        assert!((report.achieved_pps - 8000.0).abs() < 1e-9, "{report:?}");
    }

    #[test]
    fn unlimited_runs_have_no_requested_rate_or_accuracy() {
        let report = SendRecorder::default().finish(RunFacts::default());
        let json = serde_json::to_value(&report).expect("serializable");
        assert!(json["requested_pps"].is_null() && json["accuracy"].is_null());
        assert!(json["calibration"].is_null());
        assert_eq!(json["achieved_pps"], 0.0);
    }
}
