//! The time model: the gap split among its causes. The gap is g = 1 - achieved/requested, which
//! is also the share of each packet's time spent beyond its slot (250 of 1000 pps: 4 ms per
//! packet for a 1 ms slot, 3 ms or 75% beyond it). Failed sends take their part first (each used
//! a slot and sent nothing). The rest is split by the sender threads' time budget: a packet at
//! the requested rate would use no blocked and no preempted time, its on-CPU work up to the slot,
//! and a pacing wait filling the slot's rest; each category's time beyond that is its excess.
//! The excesses add up to at least the rest of the gap (equality when the pacer waits no less
//! than the slot leaves), and are scaled down together to add up to it exactly, after the time
//! between work units (measured, not estimated) has taken its part. Before that, the
//! gap histogram corrects the budget: a sleeping pacer's wait for a CPU after each wake-up is
//! pacing, and preemption that made no gap longer than the typical one fell inside a wait.
//! docs/diagnosis.md gives the steps in order.

use super::facts::{per_packet, Facts};
use super::CALIBRATION_TOLERANCE_PCT;
use crate::analysis::snapshot::WorkUnitView;

/// Gaps up to this much above the expected one are within the gap histogram's resolution
/// (log-linear buckets of 12.5%): the pacer is on time.
const GAP_RESOLUTION: f64 = 0.07;
/// A wake-up's latency stays below this, ns (tens of us here): a pacing excess per gap above it
/// is more than one, and a sleeping pacer's runnable time per packet below it is one.
const WAKEUP_LATENCY_NS: f64 = 200_000.0;
/// Gaps whose mean is within this share of their median are steady: the typical gap carries
/// the mean (the median comes from buckets of 12.5%).
const STEADY_MEAN_OVER_P50: f64 = 0.12;
/// Gaps with a p99 below this many medians have no stalls: their spread is the pacer's jitter.
const STALL_P99_OVER_P50: f64 = 3.0;
/// A sender asleep this share of its time or more paces by sleeping.
const SLEEP_PACER: f64 = 0.3;
/// On-CPU time per packet outside the send calls from which it is a wait, not a packet's work, ns.
const BUSY_WAIT_MIN_NS: f64 = 50_000.0;
/// Gaps measured below this count give no pacing figure worth a strong verdict.
pub(super) const MIN_GAPS: u64 = 50;
/// Gaps this many times the slot or more are far beyond any jitter: a few of them suffice to
/// call them steady (a short run of a slot derived wildly wrong has a dozen gaps).
const FAR_ABOVE_SLOT: f64 = 10.0;
/// A sender asleep or blocked in send this share of its time or more is not held back by its
/// CPU: no cpu_bound, its on-CPU excess goes with the waits.
const OFF_CPU_DOMINANT: f64 = 0.75;
/// Fewest gaps a steady-gap test reads at all.
const MIN_FEW_GAPS: u64 = 5;

/// The scanner's clock calibrations, summed up by their median error.
pub(super) struct Calibration {
    /// median of (delay / slot - 1) x 100
    pub(super) error_pct: f64,
    pub(super) count: usize,
    /// the calibration closest to the median: its probe, slot, the slot its rate needs, and
    /// its own error, (delay / slot - 1) x 100 (the median is of several: a line that shows
    /// this calibration's slot shows this error beside it)
    pub(super) probe: String,
    pub(super) delay_ns: Option<f64>,
    pub(super) slot_ns: Option<f64>,
    pub(super) own_error_pct: f64,
    pub(super) duration_ms: f64,
}

impl Calibration {
    pub(super) fn of(f: &Facts) -> Option<Calibration> {
        let cals = &f.scanner?.calibrations;
        let mut errors: Vec<f64> = cals
            .iter()
            .filter_map(|c| c.error_pct)
            .filter(|e| e.is_finite())
            .collect();
        if errors.is_empty() {
            return None;
        }
        errors.sort_by(f64::total_cmp);
        let n = errors.len();
        let median = if n % 2 == 1 {
            errors[n / 2]
        } else {
            (errors[n / 2 - 1] + errors[n / 2]) / 2.0
        };
        let closest = cals
            .iter()
            .filter(|c| c.error_pct.is_some_and(f64::is_finite))
            .min_by(|a, b| {
                let da = (a.error_pct.unwrap_or(0.0) - median).abs();
                let db = (b.error_pct.unwrap_or(0.0) - median).abs();
                da.total_cmp(&db)
            })?;
        Some(Calibration {
            error_pct: median,
            count: n,
            probe: closest.probe.clone(),
            delay_ns: closest.delay_ns,
            slot_ns: closest.slot_ns,
            own_error_pct: closest.error_pct.unwrap_or(median),
            duration_ms: cals.iter().filter_map(|c| c.duration_ms).sum(),
        })
    }
}

/// Idle time between work units inside the interval, from the scanner's work units.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct UnitTime {
    /// previous unit's last packet to this unit's hand-over, and what of the set-up is not
    /// set-up; ns beyond one ordinary gap
    pub(super) idle_ns: f64,
    /// hand-over to first packet (IPC, rate set-up, calibration), ns
    pub(super) setup_ns: f64,
    /// the same two inside the interval as measured, with the ordinary gap left in, ns
    pub(super) idle_seen_ns: f64,
    pub(super) setup_seen_ns: f64,
    /// hand-overs inside the interval
    pub(super) spans: usize,
    /// the spans measured between packets, ns (for the mean gap without them)
    pub(super) between_sends_ns: f64,
    pub(super) between_sends: u64,
}

impl UnitTime {
    fn of(f: &Facts, expected_gap_ns: f64) -> UnitTime {
        let mut t = UnitTime::default();
        let Some(sv) = f.scanner else { return t };
        let mut pids: Vec<Option<u32>> = sv.work_units.iter().map(|u| u.sender_pid).collect();
        pids.sort();
        pids.dedup();
        for pid in pids {
            let mut units: Vec<&WorkUnitView> =
                sv.work_units.iter().filter(|u| u.sender_pid == pid).collect();
            units.sort_by(|a, b| {
                let key = |u: &WorkUnitView| u.first_send_s.or(u.handed_s).unwrap_or(u.index as f64);
                key(a).total_cmp(&key(b))
            });
            for pair in units.windows(2) {
                t.add(f, pair[0], pair[1], expected_gap_ns);
            }
        }
        t
    }

    fn add(&mut self, f: &Facts, prev: &WorkUnitView, next: &WorkUnitView, expected_gap_ns: f64) {
        let setup_s = next.setup_ms.unwrap_or(0.0).max(0.0) / 1e3;
        // The span with no packet of these units: from the last packet before to the first
        // after; or, without those, the idle time and the set-up the scanner model measured.
        let (start, end, from_sends) = match (prev.last_send_s, next.first_send_s) {
            (Some(l), Some(first)) if first > l => (l, first, true),
            _ => {
                let idle = next.idle_before_ms.unwrap_or(0.0).max(0.0) / 1e3;
                let Some(end) = next
                    .first_send_s
                    .or(next.calibrated_s)
                    .or(next.handed_s.map(|h| h + setup_s))
                else {
                    return;
                };
                (end - idle - setup_s, end, false)
            }
        };
        let (mut lo, mut hi) = (start, end);
        if let Some(tick_end) = f.end_s {
            lo = lo.max(tick_end - f.window_s);
            hi = hi.min(tick_end);
        }
        let span = hi - lo;
        if span <= 0.0 {
            return;
        }
        let setup = (hi - (end - setup_s).max(lo)).clamp(0.0, span);
        let beyond_gap = (span * 1e9 - expected_gap_ns).max(0.0) / (span * 1e9);
        self.setup_ns += setup * 1e9 * beyond_gap;
        self.idle_ns += (span - setup) * 1e9 * beyond_gap;
        self.setup_seen_ns += setup * 1e9;
        self.idle_seen_ns += (span - setup) * 1e9;
        self.spans += 1;
        if from_sends && lo == start && hi == end {
            self.between_sends_ns += span * 1e9;
            self.between_sends += 1;
        }
    }
}

/// The gap split among its causes, each as a share of the requested rate.
#[derive(Debug, Default, Clone)]
pub(super) struct Split {
    pub(super) gap: f64,
    pub(super) send_errors: f64,
    pub(super) blocked: f64,
    pub(super) preempted: f64,
    pub(super) cpu: f64,
    pub(super) miscalibrated: f64,
    /// the on-CPU excess scanprof's own probes explain (their BPF run time in the sender's time)
    pub(super) probe_cost: f64,
    /// scanprof's BPF run time as a fraction of the sender threads' time
    pub(super) f_probe: f64,
    /// the pacing part of the wait excess when it looks like a mis-derived slot (no calibration)
    pub(super) miscalibrated_inferred: bool,
    /// the on-CPU excess taken for a busy-waiting pacer's too-long slot (no probe, no calibration)
    pub(super) busy_wait_inferred: bool,
    pub(super) pacing: f64,
    pub(super) stalls: f64,
    pub(super) unit_idle: f64,
    pub(super) unit_setup: f64,
    pub(super) unexplained: f64,
    /// the wait for the sender's cgroup CPU quota (runnable, held off until the next period)
    pub(super) throttled: f64,
    /// on-CPU time the hypervisor stole from the sender's CPUs
    pub(super) steal: f64,
    /// the same two as fractions of the sender threads' time, before scaling
    pub(super) f_throttled: f64,
    pub(super) f_steal: f64,
    // Context for the sentences: fractions of the sender threads' time in the interval, after
    // the time between work units was taken out of sleep and other.
    pub(super) f_send: f64,
    pub(super) f_other: f64,
    pub(super) f_sleep: f64,
    pub(super) f_blocked: f64,
    pub(super) f_preempted: f64,
    /// on-CPU time inside the pacing function (pace_wait probe), None without that probe
    pub(super) f_spin: Option<f64>,
    /// runnable time of a sleeping pacer after its wake-ups, counted as pacing
    pub(super) f_wakeup: f64,
    /// preempted time inside waits (beyond the gaps' tail), counted as waiting
    pub(super) f_absorbed: f64,
    /// the slot's share of a packet's time: achieved (with failed attempts) / requested
    pub(super) sigma: f64,
    /// expected gap between one thread's send calls at the requested rate, ns
    pub(super) expected_gap_ns: f64,
    /// mean gap without the spans between work units, ns
    pub(super) mean_gap_ns: Option<f64>,
    pub(super) units: UnitTime,
    pub(super) thread_ns: f64,
    pub(super) attempts: u64,
    /// the on-CPU excess given to the waits because the sender was off the CPU of its own
    /// accord (asleep, blocked in send) more than on it, as a fraction of its time
    pub(super) cpu_not_limiting: f64,
}

impl Split {
    pub(super) fn of(f: &Facts, r: f64, calibration: Option<&Calibration>) -> Split {
        let mut s = Split {
            gap: (1.0 - f.achieved / r).clamp(0.0, 1.0),
            attempts: f.packets + f.failed_calls,
            ..Default::default()
        };
        if f.window_s > 0.0 {
            s.send_errors = (f.failed_calls as f64 / (f.window_s * r)).min(s.gap);
        }
        let rest = s.gap - s.send_errors;
        s.sigma = 1.0 - rest;

        let senders = f.time.senders.max(1) as f64;
        let per_call = if f.calls > 0 {
            (f.packets as f64 / f.calls as f64).max(1.0)
        } else {
            1.0
        };
        s.expected_gap_ns = 1e9 / r * senders * per_call;

        let total = f.time.total();
        s.thread_ns = total;
        if total <= 0.0 {
            s.unexplained = rest;
            return s;
        }
        let t = &f.time;
        let (send, mut other, mut sleep) = (t.send / total, t.other / total, t.sleep / total);
        let (mut blocked, mut preempted) = (t.blocked / total, t.preempted / total);

        s.units = UnitTime::of(f, s.expected_gap_ns);
        // The spans are in the budget whatever the sender did in them: asleep or on the CPU
        // mostly, waiting for a CPU or blocked when that is where their time went.
        let idle = take(
            &mut [&mut sleep, &mut other, &mut preempted, &mut blocked],
            s.units.idle_ns / total,
        );
        let setup = take(
            &mut [&mut sleep, &mut other, &mut preempted, &mut blocked],
            s.units.setup_ns / total,
        );
        s.mean_gap_ns = s.mean_gap_without_units(f);

        // A pacer that sleeps wakes up and then waits for a CPU: that wait, tens of us per
        // packet, is its wake-up latency, not preemption by other work (which takes ms). The
        // probes measure the wait after wake-ups apart from preemption; up to a wake-up's
        // latency per packet it is the pacing's lateness, beyond that other work held the CPU.
        // Without that figure (a bundle recorded before it), all runnable time counts as
        // wake-up latency when it is no more than that per packet.
        let sleeps_to_pace = sleep >= SLEEP_PACER && s.attempts > 0;
        let attempts = s.attempts.max(1) as f64;
        match t.wakeup.map(|w| (w / total).min(preempted)) {
            _ if !sleeps_to_pace => {}
            Some(woken) => {
                s.f_wakeup = woken.min(WAKEUP_LATENCY_NS * attempts / total);
                preempted -= s.f_wakeup;
            }
            None if preempted * total / attempts <= WAKEUP_LATENCY_NS => {
                s.f_wakeup = preempted;
                preempted = 0.0;
            }
            None => {}
        }
        // Preemption only costs rate where it makes gaps longer than the typical one: beyond the
        // gaps' tail it fell inside a wait (a busy-wait or sleep that would have lasted anyway, or
        // a deadline pacer catching up), and counts as that wait.
        if let Some(tail) = s.gap_tail(f, calibration) {
            if preempted > tail {
                s.f_absorbed = preempted - tail;
                preempted = tail;
                if sleeps_to_pace {
                    sleep += s.f_absorbed;
                } else {
                    other += s.f_absorbed;
                }
            }
        }

        // A cgroup's CPU quota holds its runnable threads off the CPU until the next period: that
        // wait is runnable time, and the part of it the steps above left as preempted (in
        // proportion) is the quota's, not other tasks'.
        let mut throttled = 0.0;
        if let Some(thr) = f.throttled_ns.filter(|ns| *ns > 0.0) {
            let raw = t.preempted / total;
            if raw > 0.0 {
                throttled = ((thr / total).min(raw) * (preempted / raw)).min(preempted);
                preempted -= throttled;
            }
        }
        s.f_throttled = throttled;

        let pace = pace_fraction(f, total);
        let spin = pace.map(|p| (p - sleep).clamp(0.0, other));
        let work = send + other - spin.unwrap_or(0.0);
        let wait = sleep + spin.unwrap_or(0.0) + s.f_wakeup;
        let mut cpu = (work - s.sigma).max(0.0);
        let mut wait_excess = (wait - (s.sigma - work).max(0.0)).max(0.0);
        if s.attempts == 0 {
            // Nothing sent: no per-packet work to speak of; the time on CPU was not sending either.
            wait_excess += cpu;
            cpu = 0.0;
        } else if cpu > 0.0 && sleep + blocked >= OFF_CPU_DOMINANT {
            // Off the CPU of its own accord most of the time: the sender had CPU time to spare,
            // and what kept it off the CPU made the gaps. Its on-CPU excess goes with that.
            s.cpu_not_limiting = cpu;
            if blocked > sleep {
                blocked += cpu;
            } else {
                wait_excess += cpu;
            }
            cpu = 0.0;
        }
        // scanprof's own probes run inside the sender's syscalls: the gap their BPF run time
        // makes is the measurement's, not the scanner's. Without that time each packet would
        // take (1 - f_probe) of its time, the slot sigma / (1 - f_probe) of it, and the gap would
        // be 1 - sigma / (1 - f_probe): the difference is theirs, taken from the on-CPU excess.
        s.f_probe = f.probe_ns().map_or(0.0, |ns| (ns / total).clamp(0.0, 1.0));
        let unmeasured_gap = if s.f_probe < 1.0 {
            (1.0 - s.sigma / (1.0 - s.f_probe)).max(0.0)
        } else {
            0.0
        };
        let probe_cost = (rest - unmeasured_gap).clamp(0.0, s.f_probe).min(cpu);
        cpu -= probe_cost;

        let mut miscalibrated = 0.0;
        if let Some(c) = calibration.filter(|c| c.error_pct > CALIBRATION_TOLERANCE_PCT) {
            // A delay of slot x (1 + e) adds e slots per packet: e x sigma of its time. It is
            // spent waiting, or on the CPU when the pacer busy-waits and no probe told us so.
            let m = c.error_pct / 100.0 * s.sigma;
            let from_wait = m.min(wait_excess);
            wait_excess -= from_wait;
            let from_cpu = if pace.is_none() {
                (m - from_wait).min(cpu)
            } else {
                0.0
            };
            cpu -= from_cpu;
            miscalibrated = from_wait + from_cpu;
        }

        // Time the hypervisor stole while the sender ran counts as its on-CPU time: that share
        // of its on-CPU time is no work of its own. It comes after a known calibration error:
        // a busy-wait slot ends at its deadline however much of it was stolen, so the too-long
        // slots cost their e x sigma whatever the steal inside them, and only the on-CPU time
        // left can have been slowed by it.
        let mut steal = 0.0;
        if let Some(st) = f
            .limits
            .and_then(|l| l.steal.as_ref())
            .filter(|st| st.share > 0.0)
        {
            steal = (st.share.min(1.0) * (send + other)).min(cpu);
            cpu -= steal;
        }
        s.f_steal = steal;

        s.f_send = send;
        s.f_other = other;
        s.f_sleep = sleep;
        s.f_blocked = blocked;
        s.f_preempted = preempted;
        s.f_spin = spin;

        let part = s.pacing_part(f);
        let mut pacing = wait_excess * part;
        let stalls = wait_excess - pacing;
        if calibration.is_none() && pace.is_none() && cpu > 0.0 && s.spins_unseen(f) {
            // A busy-waiting pacer no probe watches: its on-CPU excess and its late waits are
            // one slot too long.
            s.busy_wait_inferred = true;
            miscalibrated += cpu + pacing;
            cpu = 0.0;
            pacing = 0.0;
        } else if calibration.is_none() && pacing > 0.0 && s.looks_miscalibrated(f, work, wait) {
            s.miscalibrated_inferred = true;
            miscalibrated = pacing;
            pacing = 0.0;
        }

        // The time between work units is measured from their boundaries (exact spans with no
        // packet in them), the other parts are estimates from the time budget: the spans take
        // their part of the time gap first (scaled only if they alone exceed it), and the
        // estimates are scaled to add up to what is left. Preemption inside the units (a sum of
        // estimates above the gap) must not shrink the pause between them.
        // A calibration error the scanner's own function reported is measured as well: its
        // slots' excess (error x sigma) is known, not estimated, and takes its part with them.
        let probed = if calibration.is_some() { miscalibrated } else { 0.0 };
        let measured = idle + setup + probed;
        let km = if measured > rest && measured > 0.0 {
            rest / measured
        } else {
            1.0
        };
        let estimated_rest = rest - measured * km;
        let sum = blocked
            + preempted
            + throttled
            + cpu
            + probe_cost
            + steal
            + (miscalibrated - probed)
            + pacing
            + stalls;
        let k = if sum > estimated_rest && sum > 0.0 {
            estimated_rest / sum
        } else {
            1.0
        };
        s.throttled = throttled * k;
        s.steal = steal * k;
        s.probe_cost = probe_cost * k;
        s.blocked = blocked * k;
        s.preempted = preempted * k;
        s.cpu = cpu * k;
        s.miscalibrated = probed * km + (miscalibrated - probed) * k;
        s.pacing = pacing * k;
        s.stalls = stalls * k;
        s.unit_idle = idle * km;
        s.unit_setup = setup * km;
        s.unexplained = (estimated_rest - sum * k).max(0.0);
        s
    }

    /// The share of the sender's time in gaps beyond the typical one: (mean - typical) / mean;
    /// None without enough gaps: MIN_GAPS, or MIN_FEW_GAPS of gaps FAR_ABOVE_SLOT or more (a
    /// miscalibrated pacer's long slots in a short run: preemption inside them costs no rate,
    /// and was split off as `preempted` beside `miscalibrated` for want of 50 gaps).
    ///
    /// The typical gap is the histogram's median, or the slot the scanner's calibration derived
    /// (the expected gap scaled by its error) when that is longer: no gap of a pacer that keeps
    /// its slot is typically shorter than it, and the median is only known to within its
    /// bucket, an eighth of an octave (589.8 to 655.4 us around a 625 us slot), interpolated.
    /// Read below the slot, it counted waits the slot made anyway as the tail (issue 29).
    fn gap_tail(&self, f: &Facts, calibration: Option<&Calibration>) -> Option<f64> {
        let (Some(p50), Some(mean)) = (f.gap.p50_ns, self.mean_gap_ns) else {
            return None;
        };
        let slot = calibration.map_or(0.0, |c| self.expected_gap_ns * (1.0 + c.error_pct / 100.0));
        let p50 = p50.max(slot);
        let far = self.expected_gap_ns > 0.0 && mean >= FAR_ABOVE_SLOT * self.expected_gap_ns;
        let enough = f.gap.count >= MIN_GAPS || (f.gap.count >= MIN_FEW_GAPS && far);
        (enough && mean > 0.0).then(|| ((mean - p50) / mean).max(0.0))
    }

    /// Mean gap with the spans between work units left out, ns.
    fn mean_gap_without_units(&self, f: &Facts) -> Option<f64> {
        let mean = f.gap.mean_ns?;
        let n = f.gap.count;
        let u = &self.units;
        if u.between_sends > 0 && n > u.between_sends {
            let rest = mean * n as f64 - u.between_sends_ns;
            if rest > 0.0 {
                return Some(rest / (n - u.between_sends) as f64);
            }
        }
        Some(mean)
    }

    /// Of the time the sender waits beyond its slots, the part that every gap shows (the pacer
    /// itself is late) rather than a few long ones (stalls outside the pacing). The stalls are
    /// the gaps of at least STALL_P99_OVER_P50 x p50, each counted for its excess over p50, read
    /// from the gap histogram: they can be too few to reach the p99 (40 stops of 20 ms among
    /// 6,400 gaps). Without a histogram, the p99 against p50 decides as before.
    fn pacing_part(&self, f: &Facts) -> f64 {
        if self.attempts == 0 {
            // Nothing sent: the waiting is not pacing.
            return 0.0;
        }
        let exp = self.expected_gap_ns;
        let (Some(p50), Some(mean)) = (f.gap.p50_ns, self.mean_gap_ns) else {
            return 1.0;
        };
        if mean <= exp * (1.0 + GAP_RESOLUTION) {
            return 1.0;
        }
        let threshold = STALL_P99_OVER_P50 * p50;
        let (stall_ns, gaps) = f
            .gap
            .histogram
            .iter()
            .fold((0.0, 0u64), |(ns, n), &(lo, hi, count)| {
                let mid = (lo as f64 + hi as f64) / 2.0;
                let stall = if lo as f64 >= threshold {
                    (mid - p50).max(0.0) * count as f64
                } else {
                    0.0
                };
                (ns + stall, n + count)
            });
        if gaps > 0 {
            let excess = (mean - exp) * gaps as f64;
            return (1.0 - stall_ns / excess).clamp(0.0, 1.0);
        }
        let heavy_tail = f.gap.p99_ns.is_some_and(|p99| p99 >= threshold);
        if !heavy_tail {
            return 1.0;
        }
        ((p50 - exp) / (mean - exp)).clamp(0.0, 1.0)
    }

    /// Gaps a steady ratio above the slot, no calibration figure and no probe on the pacing loop:
    /// read from MIN_GAPS gaps, or from MIN_FEW_GAPS when they are FAR_ABOVE_SLOT or more.
    fn steady_above_slot(&self, f: &Facts) -> bool {
        let exp = self.expected_gap_ns;
        let (Some(p50), Some(mean)) = (f.gap.p50_ns, self.mean_gap_ns) else {
            return false;
        };
        let enough = f.gap.count >= MIN_GAPS || (f.gap.count >= MIN_FEW_GAPS && mean >= FAR_ABOVE_SLOT * exp);
        enough
            && mean >= exp * (1.0 + CALIBRATION_TOLERANCE_PCT / 100.0)
            && (mean - p50).abs() <= STEADY_MEAN_OVER_P50 * p50
    }

    /// A busy-waiting pacer no probe watches: far more on-CPU time per packet outside the send
    /// calls than any packet's work takes, hardly any sleep, and steady gaps a ratio above the
    /// slot. Its on-CPU excess is then a slot too long, not work.
    fn spins_unseen(&self, f: &Facts) -> bool {
        let other_per_packet = self.f_other * self.thread_ns / self.attempts.max(1) as f64;
        other_per_packet >= BUSY_WAIT_MIN_NS
            && self.f_other >= 4.0 * self.f_send
            && self.f_sleep < super::WEAK_SHARE
            && self.steady_above_slot(f)
    }

    /// Steady gaps a fixed ratio above the slot while the sender mostly waits, and (for a pacer
    /// that sleeps) beyond a wake-up's latency and not on a whole number of milliseconds (timer
    /// granularity): a slot derived wrong.
    fn looks_miscalibrated(&self, f: &Facts, work: f64, wait: f64) -> bool {
        let exp = self.expected_gap_ns;
        let Some(mean) = self.mean_gap_ns else {
            return false;
        };
        let whole_ms = |ns: f64| ns >= 1e6 && (ns - (ns / 1e6).round() * 1e6).abs() <= 0.03 * ns;
        // A busy-waiting pacer has no wake-up latency and no timer granularity to blame.
        let spins = self.f_spin.unwrap_or(0.0) > self.f_sleep;
        work < 0.5
            && wait >= SLEEP_PACER
            && self.steady_above_slot(f)
            && (spins || (mean - exp >= WAKEUP_LATENCY_NS && !whole_ms(mean)))
    }

    pub(super) fn per_packet(&self, fraction: f64) -> String {
        per_packet(fraction * self.thread_ns, self.attempts)
    }
}

/// Takes `want` out of the fields in order; returns what it could take.
fn take(fields: &mut [&mut f64], want: f64) -> f64 {
    let mut left = want.max(0.0);
    for field in fields.iter_mut() {
        let t = left.min(**field);
        **field -= t;
        left -= t;
    }
    want.max(0.0) - left
}

/// Share of the sender threads' time inside the scanner's pacing function (pace_wait probes),
/// from their time inside per packet since attach.
fn pace_fraction(f: &Facts, total_ns: f64) -> Option<f64> {
    let probes: Vec<_> = f
        .scanner?
        .probes
        .iter()
        .filter(|p| {
            p.role == crate::analysis::scanner::ProbeRole::PaceWait
                && p.attached
                && p.hits > 0
                && p.inside_ns > 0
        })
        .collect();
    if probes.is_empty() || f.packets_total == 0 {
        return None;
    }
    let inside: u64 = probes.iter().map(|p| p.inside_ns).sum();
    let per_packet = inside as f64 / f.packets_total as f64;
    Some((per_packet * f.packets as f64 / total_ns).clamp(0.0, 1.0))
}
