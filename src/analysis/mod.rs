//! Pure analysis: from successive cumulative `CounterSample`s to per-tick `Snapshot`s and the
//! run's `Summary`: rates at every stage, requested vs achieved, time budgets, gaps, drops and
//! statistics across ticks. No clocks and no I/O here: every timestamp comes in with the sample.

pub mod compare;
pub mod kernel;
pub mod knee;
pub mod limits;
pub mod probe_cost;
pub mod receive;
pub mod relay;
pub mod replies;
pub mod rings;
pub mod scanner;
pub mod snapshot;
pub mod stage;
pub mod stats;
pub mod verdict;

use std::collections::BTreeMap;

use crate::collect::hist::Histogram;
use crate::collect::{CounterSample, DeviceCounters, DropClass, DropCount, ThreadCounters, TimeBudget};
use crate::probes::ProbeStatus;
pub use snapshot::*;
use stats::RunStats;

/// The family's counters, summed: what the funnel is made of.
#[derive(Debug, Clone, Default, PartialEq)]
struct Totals {
    calls: u64,
    packets: u64,
    bytes: u64,
    failed_calls: u64,
    /// CLOCK_MONOTONIC ns of the first and the latest packet send, 0 when none
    first_send_ns: u64,
    last_send_ns: u64,
    dev_queue: u64,
    qdisc_enqueue: u64,
    qdisc_dequeue: u64,
    dev_xmit: u64,
    target_drops: u64,
}

impl Totals {
    fn of(s: &CounterSample) -> Totals {
        let mut t = Totals::default();
        for th in &s.threads {
            t.calls += th.calls;
            t.packets += th.packets;
            t.bytes += th.bytes;
            t.failed_calls += th.failed_calls;
            if th.packets > 0 {
                if t.first_send_ns == 0 || th.first_send_ns < t.first_send_ns {
                    t.first_send_ns = th.first_send_ns;
                }
                t.last_send_ns = t.last_send_ns.max(th.last_send_ns);
            }
        }
        for d in s.devices.iter().filter(|d| d.pid.is_some()) {
            t.dev_queue += d.queued;
            t.qdisc_enqueue += d.enqueued;
            t.qdisc_dequeue += d.dequeued;
            t.dev_xmit += d.xmit_ok;
        }
        t.target_drops = s
            .drops
            .iter()
            .filter(|d| d.class == DropClass::TargetLoss)
            .map(|d| d.count)
            .sum();
        t
    }

    /// Stage counts in STAGES order.
    fn stages(&self) -> [u64; 7] {
        [
            self.calls,
            self.packets,
            self.dev_queue,
            self.qdisc_enqueue,
            self.qdisc_dequeue,
            self.dev_xmit,
            self.target_drops,
        ]
    }

    /// Mean time between the family's sending calls over its send window so far, ns; None
    /// before two of them.
    fn mean_slot_ns(&self) -> Option<f64> {
        let sending_calls = self.calls.saturating_sub(self.failed_calls);
        (sending_calls >= 2 && self.last_send_ns > self.first_send_ns)
            .then(|| (self.last_send_ns - self.first_send_ns) as f64 / (sending_calls - 1) as f64)
    }

    /// The send window, ns: first to last sending call, stretched by one mean interval between
    /// calls, so that N calls at R per second give N / window = R exactly (rather than
    /// (N-1) / span), also when each call carries a batch of packets.
    fn window_ns(&self) -> Option<f64> {
        let sending_calls = self.calls.saturating_sub(self.failed_calls);
        if sending_calls < 2 || self.packets < 2 || self.last_send_ns <= self.first_send_ns {
            return None;
        }
        let span = (self.last_send_ns - self.first_send_ns) as f64;
        Some(span * sending_calls as f64 / (sending_calls - 1) as f64)
    }
}

/// Whether connection attempts are most of the threads' send calls since attach (the rule of
/// [`ConnectView::of`]).
fn connect_scanner(threads: &[ThreadCounters]) -> bool {
    let attempts: u64 = threads.iter().map(|t| t.connect.calls).sum();
    let calls: u64 = threads.iter().map(|t| t.calls).sum();
    attempts > 0 && attempts * 2 > calls
}

/// How often a live tick's rate statistics are recomputed, ns of sample time (ticks in
/// between repeat the last).
const LIVE_STATS_EVERY_NS: u64 = 500_000_000;

/// A family silent for this many of its mean intervals between sends has stopped sending...
const STOPPED_SLOTS: f64 = 4.0;
/// ...when that silence is also at least this share of the tick's interval; and a tick shorter
/// than the interval by more than this share is partial.
const STOPPED_TICK_SHARE: f64 = 0.1;

/// A tick's phase and whether its rate covers time the family did not send in.
#[derive(Debug, Clone, Copy, PartialEq)]
struct TickPhase {
    phase: RunPhase,
    partial: bool,
}

/// What the family did between `prev` and `s` (totals `now` and `before`), against the
/// requested rate and the nominal interval when known. One definition, decided here for every
/// view: no send call yet is `starting`; send calls in the tick, or a sender blocked inside one
/// at its end, are `sending`; no send call in the tick after having sent is `waiting`, or
/// `ended` once the family has exited. A sending tick is partial when the family fell silent
/// before its end (for STOPPED_SLOTS mean send intervals and STOPPED_TICK_SHARE of the tick,
/// with no failed call in the tick, which carries no time) or when it is shorter than the
/// interval by more than STOPPED_TICK_SHARE.
fn tick_phase(
    s: &CounterSample,
    prev_t_ns: u64,
    now: &Totals,
    before: &Totals,
    requested_pps: Option<f64>,
    nominal_ns: Option<u64>,
) -> TickPhase {
    let interval_ns = s.t_ns.saturating_sub(prev_t_ns);
    let family_ended = !s.processes.is_empty() && s.processes.iter().all(|p| !p.alive);
    let blocked = s.threads.iter().any(|t| t.blocked_now.is_some());
    let called = now.calls > before.calls;
    let phase = if now.calls == 0 && !blocked {
        if family_ended {
            RunPhase::Ended
        } else {
            RunPhase::Starting
        }
    } else if called || blocked {
        RunPhase::Sending
    } else if family_ended {
        RunPhase::Ended
    } else {
        RunPhase::Waiting
    };
    if phase != RunPhase::Sending {
        return TickPhase {
            phase,
            partial: false,
        };
    }
    let tick_ns = nominal_ns.unwrap_or(interval_ns) as f64;
    let slot_ns = now
        .mean_slot_ns()
        .or_else(|| requested_pps.filter(|r| *r > 0.0).map(|r| 1e9 / r))
        .unwrap_or(0.0);
    let silence_ns = s.t_ns.saturating_sub(now.last_send_ns) as f64;
    let stopped = !blocked
        && now.last_send_ns > 0
        && now.failed_calls == before.failed_calls
        && silence_ns > (STOPPED_SLOTS * slot_ns).max(STOPPED_TICK_SHARE * tick_ns);
    let short = nominal_ns.is_some_and(|n| (interval_ns as f64) < n as f64 * (1.0 - STOPPED_TICK_SHARE));
    TickPhase {
        phase,
        partial: stopped || short,
    }
}

/// One tick's achieved rate (or a window of neighbouring ticks'), kept to compute statistics
/// over the complete ticks.
#[derive(Debug, Clone, Copy)]
struct TickRate {
    /// sample time the tick (window) began, ns
    start_ns: u64,
    /// sample time it ended, ns
    end_ns: u64,
    /// packets per second over it
    pps: f64,
}

impl TickRate {
    /// Two neighbouring windows as one: the rate over their combined time.
    fn merged(self, next: TickRate) -> TickRate {
        let (a, b) = (
            self.end_ns.saturating_sub(self.start_ns),
            next.end_ns.saturating_sub(next.start_ns),
        );
        let pps = if a + b == 0 {
            (self.pps + next.pps) / 2.0
        } else {
            (self.pps * a as f64 + next.pps * b as f64) / (a + b) as f64
        };
        TickRate {
            start_ns: self.start_ns,
            end_ns: next.end_ns,
            pps,
        }
    }
}

/// The most per-tick rates a run keeps for its rate statistics (24 bytes each: 1.5 MiB). A run
/// with more ticks (18 hours at 1 s ticks, 11 minutes at 10 ms) merges its kept rates in
/// neighbouring pairs, and then takes each new window of as many ticks as one: memory stays
/// flat, the statistics cover the whole run, over windows of `ticks_per_sample` ticks.
pub const MAX_TICK_RATES: usize = 1 << 16;

/// The run's per-tick rates, at most [`MAX_TICK_RATES`] of them (issue 33 item 7: one per tick
/// for the whole run grew a 10 ms run's memory by ~150 KB a minute).
#[derive(Debug, Default)]
struct TickRates {
    kept: Vec<TickRate>,
    /// ticks behind each kept rate: 1, 2, 4...
    per_kept: u64,
    /// the ticks of the window being filled, merged so far, and how many
    filling: Option<(TickRate, u64)>,
}

impl TickRates {
    fn push(&mut self, t: TickRate) {
        let per_kept = self.per_kept.max(1);
        let (w, n) = match self.filling.take() {
            Some((w, n)) => (w.merged(t), n + 1),
            None => (t, 1),
        };
        if n < per_kept {
            self.filling = Some((w, n));
            return;
        }
        self.kept.push(w);
        if self.kept.len() >= MAX_TICK_RATES {
            let pairs: Vec<TickRate> = self
                .kept
                .chunks(2)
                .map(|c| if let [a, b] = c { a.merged(*b) } else { c[0] })
                .collect();
            self.kept = pairs;
            self.per_kept = per_kept * 2;
        }
    }

    /// Ticks pushed so far.
    fn ticks(&self) -> u64 {
        self.kept.len() as u64 * self.per_kept.max(1) + self.filling.map_or(0, |(_, n)| n)
    }

    /// The kept windows (a window still filling is left out: it is not complete).
    fn windows(&self) -> &[TickRate] {
        &self.kept
    }
}

/// Turns samples into Snapshots, remembering what the Summary needs.
#[derive(Debug)]
pub struct Analyzer {
    requested_pps: Option<f64>,
    /// CLOCK_MONOTONIC ns at attach
    start_ns: u64,
    prev: Option<CounterSample>,
    ticks: TickRates,
    /// the live ticks' rate statistics and the sample time they were computed at, ns
    live_stats: Option<(u64, Option<RunStats>)>,
    queues: BTreeMap<(String, u32), (u64, u64)>,
    /// scanprof's CPU time at the first sample, ns
    start_cpu_ns: u64,
    /// scanprof's BPF run time at the first sample
    start_bpf: Option<crate::collect::bpf_time::BpfRunTime>,
    baseline: Option<Baseline>,
    /// what the scanner's own functions say, when a profile applies
    scanner: Option<ScannerModel>,
    /// the ticks' outside limits added up, and the sample time of the latest tick
    limits: limits::LimitsRun,
    limits_t_ns: u64,
    /// outputs a relay writes each packet it reads to (`--relay-fanout`)
    relay_fanout: Option<u32>,
    /// the length the session asked of a tick, ns, when given (`set_interval`)
    nominal_interval_ns: Option<u64>,
    /// the latest tick's phase
    last_phase: Option<RunPhase>,
    /// length of the ticks so far in which the family read packets or lost some before its
    /// read, ns (the summary's `receive_active_s`)
    receive_active_ns: u64,
    /// what the running kernel lacks (`set_kernel_lacks`), carried into every Snapshot and the
    /// Summary
    kernel_lacks: Vec<kernel::KernelLack>,
}

impl Analyzer {
    pub fn new(requested_pps: Option<f64>, start_ns: u64) -> Analyzer {
        Analyzer {
            requested_pps,
            start_ns,
            prev: None,
            ticks: TickRates::default(),
            live_stats: None,
            queues: BTreeMap::new(),
            start_cpu_ns: 0,
            start_bpf: None,
            baseline: None,
            scanner: None,
            limits: limits::LimitsRun::default(),
            limits_t_ns: 0,
            relay_fanout: None,
            nominal_interval_ns: None,
            last_phase: None,
            receive_active_ns: 0,
            kernel_lacks: Vec::new(),
        }
    }

    /// The length the session asks of a tick: a tick shorter than it (the last one, cut by the
    /// family's exit or the end of the run) is partial.
    pub fn set_interval(&mut self, interval_ns: u64) {
        self.nominal_interval_ns = Some(interval_ns).filter(|n| *n > 0);
    }

    /// The fan-out of a relay: each packet read is to be sent this many times.
    pub fn set_relay_fanout(&mut self, fanout: Option<u32>) {
        self.relay_fanout = fanout;
    }

    /// Reads the scanner's probe calls with this model; the requested rate then follows what the
    /// scanner set up, unless `--requested` gave it.
    pub fn set_scanner(&mut self, model: ScannerModel) {
        self.requested_pps = model.requested_pps();
        self.scanner = Some(model);
    }

    /// The process that runs the scanner was seen: its profile, and the rate its own command
    /// line asks for (`ScannerModel::scanner_process`); the requested rate follows it, unless
    /// `--requested` gave one.
    pub fn scanner_process(
        &mut self,
        profile: &str,
        message_types: BTreeMap<String, String>,
        argv: ArgvRate,
        wait: Option<String>,
        reads_replies: bool,
    ) {
        if let Some(m) = self.scanner.as_mut() {
            m.scanner_process(profile, message_types, argv);
            m.wait = wait;
            m.expects_no_replies = !reads_replies;
            self.requested_pps = m.requested_pps();
        }
    }

    /// Takes the probe calls of a sample that gets no tick of its own (the last one, read after
    /// a launched command ended).
    pub fn absorb(&mut self, s: &CounterSample) {
        if let Some(m) = self.scanner.as_mut() {
            m.ingest(&s.calls);
            self.requested_pps = m.requested_pps();
        }
    }

    /// Rate figures the scanner printed about itself.
    pub fn output_readings(&mut self, events: impl Iterator<Item = crate::collect::output::OutputEvent>) {
        use crate::collect::output::OutputEvent;
        if let Some(m) = self.scanner.as_mut() {
            for e in events {
                match e {
                    OutputEvent::Reading(r) => m.output_reading(r.claim, r.value, r.ts_ns),
                    OutputEvent::Note(n) => m.output_note(n),
                }
            }
        }
    }

    fn scanner_view(&self, s: &CounterSample) -> Option<ScannerView> {
        self.scanner
            .as_ref()
            .map(|m| m.view(&s.uprobes, &s.processes, &s.threads))
    }

    /// Takes the sample read at attach as the zero point of the first tick (and of scanprof's
    /// own CPU use: what it spent before is start-up).
    pub fn baseline(&mut self, s: CounterSample) {
        self.start_ns = s.t_ns;
        self.start_cpu_ns = s.self_cpu_ns;
        self.start_bpf = s.bpf.clone();
        if let Some(m) = self.scanner.as_mut() {
            m.set_start(s.t_ns);
        }
        self.absorb(&s);
        // The first tick counts from zero: the sample is stamped with the moment of attach
        // (`start_ns`), and its counters (all since attach) were read later, after a launched
        // command was released. Subtracting them left what the command did in between in the
        // summary's totals but in no tick: the ticks' drop rows added up to one drop fewer
        // than the summary (18,169 of 18,170), which the live view's drop table and the
        // metrics show. Scanprof's own CPU and BPF time keep their reading.
        // Cumulative readings that are not the family's counters keep their zero point too.
        self.prev = Some(CounterSample {
            t_ns: s.t_ns,
            self_cpu_ns: s.self_cpu_ns,
            bpf: s.bpf,
            cgroups: s.cgroups,
            steal: s.steal,
            ..Default::default()
        });
        self.limits_t_ns = self.start_ns;
    }

    /// What the running kernel lacks that the probes measure with: every Snapshot and the
    /// Summary carry it, and the diagnosis says what it cannot judge without it.
    pub fn set_kernel_lacks(&mut self, lacks: Vec<kernel::KernelLack>) {
        self.kernel_lacks = lacks;
    }

    /// The machine's own figure at the requested rate, to set beside the target's.
    pub fn set_baseline(&mut self, b: Option<Baseline>) {
        self.baseline = b;
    }

    pub fn requested_pps(&self) -> Option<f64> {
        self.requested_pps
    }

    /// The Snapshot of the tick that ends with `s`.
    pub fn tick(&mut self, s: &CounterSample, warnings: &[String]) -> Snapshot {
        self.absorb(s);
        let prev = self.prev.take().unwrap_or_else(|| CounterSample {
            t_ns: self.start_ns,
            self_cpu_ns: self.start_cpu_ns,
            bpf: self.start_bpf.clone(),
            ..Default::default()
        });
        let interval_ns = s.t_ns.saturating_sub(prev.t_ns).max(1);
        let interval_s = interval_ns as f64 / 1e9;
        let (now_t, prev_t) = (Totals::of(s), Totals::of(&prev));
        let per_s = |n: u64| n as f64 / interval_s;

        let stages = STAGES
            .iter()
            .zip(now_t.stages().iter().zip(prev_t.stages().iter()))
            .map(|(name, (now, before))| {
                let count = now.saturating_sub(*before);
                Stage {
                    name: *name,
                    count,
                    pps: per_s(count),
                    total: *now,
                    ratio: self.ratio(per_s(count)),
                }
            })
            .collect();
        let achieved = per_s(now_t.packets.saturating_sub(prev_t.packets));
        self.ticks.push(TickRate {
            start_ns: prev.t_ns,
            end_ns: s.t_ns,
            pps: achieved,
        });
        for q in &s.queues {
            let e = self.queues.entry((q.device.clone(), q.netns)).or_default();
            e.0 = e.0.max(q.qlen_max);
            e.1 = e.1.max(q.backlog_max);
        }

        let TickPhase { phase, partial } = tick_phase(
            s,
            prev.t_ns,
            &now_t,
            &prev_t,
            self.requested_pps,
            self.nominal_interval_ns,
        );
        self.last_phase = Some(phase);
        let threads = thread_views(s, Some(&prev), interval_ns, self.start_ns);
        let drops = tick_drop_rows(&s.drops, &prev.drops, interval_s);
        let receive = receive::receive_view(s, Some(&prev), interval_s, &drops);
        if receive.as_ref().is_some_and(receive::active) {
            self.receive_active_ns += interval_ns;
        }
        let replies = replies::reply_funnel(
            s,
            Some(&prev),
            now_t.packets.saturating_sub(prev_t.packets),
            receive.as_ref(),
            &drops,
        );
        let devices = device_views(&s.devices, &prev.devices, interval_s, s);
        let block_sites = block_site_views(s, Some(&prev));
        let gap = self.gap_view(&s.threads, Some(&prev.threads));
        let episodes = s
            .episodes
            .iter()
            .map(|e| EpisodeView {
                pid: e.pid,
                tid: e.tid,
                start_s: e.start_ns.saturating_sub(self.start_ns) as f64 / 1e9,
                duration_ns: e.duration_ns,
                wait_site: e.wait_site.clone(),
            })
            .collect();
        let snapshot = Snapshot {
            schema_version: SCHEMA_VERSION,
            tick: self.ticks.ticks(),
            t_s: s.t_ns.saturating_sub(self.start_ns) as f64 / 1e9,
            interval_s,
            phase,
            partial,
            last_send_s: self.since_attach_s(now_t.last_send_ns),
            requested_pps: self.requested_pps,
            achieved_pps: achieved,
            ratio: self.ratio(achieved),
            stages,
            processes: s.processes.clone(),
            threads,
            drops,
            devices,
            device_sampling: s
                .device_sampling
                .map(|now| now.since(prev.device_sampling.as_ref()))
                // a tick counted whole is exact
                .filter(|d| d.sampled_any()),
            block_sites,
            gap,
            episodes,
            rate_stats: self.live_rate_stats(&now_t, s.t_ns),
            health: s.health,
            cost: Cost {
                cpu: s.self_cpu_ns.saturating_sub(prev.self_cpu_ns) as f64 / interval_ns as f64,
                probe_hits_per_s: per_s(s.health.probe_hits.saturating_sub(prev.health.probe_hits)),
                bpf: s.bpf.as_ref().and_then(|now| {
                    ProbeCost::of(
                        now,
                        prev.bpf.as_ref(),
                        interval_ns,
                        now_t.packets.saturating_sub(prev_t.packets),
                        probe_cost::target_time(&s.threads, Some(&prev.threads)),
                    )
                    .map(|c| c.with_device_stages(s.device_sampling.is_some()))
                }),
            },
            scanner: None,
            connect_scanner: connect_scanner(&s.threads),
            receive,
            replies,
            limits: None,
            kernel_lacks: self.kernel_lacks.clone(),
            verdicts: Vec::new(),
            warnings: warnings.to_vec(),
        };
        let mut snapshot = snapshot;
        let limits = limits::between(s, Some(&prev), interval_ns);
        self.limits.add(&limits);
        self.limits_t_ns = s.t_ns;
        snapshot.limits = limits::tick_view(limits);
        snapshot.scanner = self.scanner_view(s);
        snapshot.verdicts = verdict::for_snapshot(&snapshot);
        self.prev = Some(s.clone());
        snapshot
    }

    /// The whole run, from the last sample.
    pub fn summary(
        &self,
        last: &CounterSample,
        end_reason: EndReason,
        probes: Vec<ProbeStatus>,
        warnings: Vec<String>,
    ) -> Summary {
        let t = Totals::of(last);
        let window_ns = t.window_ns();
        let window_s = window_ns.map(|w| w / 1e9).unwrap_or(0.0);
        let rate = |n: u64| window_ns.map(|w| n as f64 * 1e9 / w).unwrap_or(0.0);
        let stage_counts: BTreeMap<StageName, u64> = STAGES.into_iter().zip(t.stages()).collect();
        let stages = stage_counts.iter().map(|(n, c)| (*n, rate(*c))).collect();
        let duration_ns = last.t_ns.saturating_sub(self.start_ns);
        let senders: Vec<&ThreadCounters> = last.threads.iter().filter(|th| th.packets > 0).collect();
        let mut budget = TimeBudget::default();
        let mut latency = Histogram::default();
        let mut errors: BTreeMap<String, u64> = BTreeMap::new();
        for th in &senders {
            budget.add(&th.budget);
            latency.add(&th.latency);
        }
        for th in &last.threads {
            for (name, n) in &th.errors {
                *errors.entry(name.clone()).or_default() += n;
            }
        }
        // Drop rates over the same window as the funnel's stage rates (the send window), so that
        // one report gives one rate for the same drops; over the run when nothing was sent.
        let drops_over_s = if window_s > 0.0 {
            window_s
        } else {
            duration_ns.max(1) as f64 / 1e9
        };
        let mut drops = run_drop_rows(&last.drops, drops_over_s);
        drops.sort_by_key(|d| (d.class, std::cmp::Reverse(d.count)));
        let achieved = rate(t.packets);
        let scanner = self.scanner_view(last);
        let receive = receive::receive_view(last, None, duration_ns.max(1) as f64 / 1e9, &drops);
        // Every SYN on the wire is a probe: the kernel's retransmissions of unanswered connects too
        // (their drops are among the probes dropped here).
        let wire_probes = t.packets + last.syn_retransmits.unwrap_or(0);
        let replies = replies::reply_funnel(last, None, wire_probes, receive.as_ref(), &drops);
        let mut connects = crate::collect::ConnectCounters::default();
        for th in &last.threads {
            connects.add(&th.connect);
        }
        let connect = ConnectView::of(&connects, t.calls, window_s, last.syn_retransmits);
        let mut summary = Summary {
            schema_version: SCHEMA_VERSION,
            end_reason,
            duration_s: duration_ns as f64 / 1e9,
            send_window_s: window_s,
            first_send_s: self.since_attach_s(t.first_send_ns),
            last_send_s: self.since_attach_s(t.last_send_ns),
            phase: self.end_phase(last),
            requested_pps: self.requested_pps,
            achieved_pps: achieved,
            baseline_pps: self.baseline.as_ref().map(|b| b.achieved_pps),
            baseline: self.baseline.clone(),
            ratio: self.ratio(achieved),
            packets: t.packets,
            bytes: t.bytes,
            send_calls: t.calls,
            failed_calls: t.failed_calls,
            errors,
            stages,
            stage_counts,
            rate_stats: self.rate_stats(&t),
            drops,
            processes: last.processes.clone(),
            threads: thread_views(last, None, duration_ns, self.start_ns),
            budget,
            block_sites: block_site_views(last, None),
            gap: self.gap_view(&last.threads, None),
            latency_p50_ns: latency.quantile(0.5),
            latency_p99_ns: latency.quantile(0.99),
            devices: device_views(&last.devices, &[], duration_ns.max(1) as f64 / 1e9, last),
            device_sampling: last.device_sampling,
            // The depth of the queues the family's packets went through: the probes record
            // every device's queue on the machine (other processes' devices and namespaces too).
            queues: self
                .queues
                .iter()
                .filter(|((device, netns), _)| {
                    last.devices
                        .iter()
                        .any(|d| d.pid.is_some() && &d.device == device && d.netns == *netns)
                })
                .map(|((device, netns), (q, b))| crate::collect::QueueDepth {
                    device: device.clone(),
                    netns: *netns,
                    qlen_max: *q,
                    backlog_max: *b,
                })
                .collect(),
            lost_events: last.health.lost_events,
            health: last.health,
            cost: Cost {
                cpu: last.self_cpu_ns.saturating_sub(self.start_cpu_ns) as f64 / duration_ns.max(1) as f64,
                probe_hits_per_s: last.health.probe_hits as f64 / (duration_ns.max(1) as f64 / 1e9),
                // Since attach, like the run's packets (a window counting the whole run opened
                // at attach, before the first sample).
                bpf: last.bpf.as_ref().and_then(|now| {
                    ProbeCost::of(
                        now,
                        None,
                        duration_ns,
                        t.packets,
                        probe_cost::target_time(&last.threads, None),
                    )
                    .map(|c| c.with_device_stages(last.device_sampling.is_some()))
                }),
            },
            probes,
            scanner,
            connect,
            receive_active_s: (receive.is_some() && self.receive_active_ns > 0)
                .then(|| self.receive_active_ns as f64 / 1e9),
            receive,
            replies,
            limits: self.run_limits(last, duration_ns),
            relay: None,
            kernel_lacks: self.kernel_lacks.clone(),
            verdicts: Vec::new(),
            warnings,
            dropped_headers: Default::default(),
        };
        summary.relay = relay::relay_view(&summary, self.relay_fanout);
        summary.verdicts = verdict::for_summary(&summary);
        summary
    }

    /// The run's outside limits: the ticks', and the last sample's since the latest tick when it
    /// got none of its own.
    fn run_limits(&self, last: &CounterSample, duration_ns: u64) -> Option<LimitsView> {
        let mut run = self.limits.clone();
        if last.t_ns > self.limits_t_ns {
            let since = last.t_ns - self.limits_t_ns;
            run.add(&limits::between(last, self.prev.as_ref(), since));
        }
        run.view(duration_ns.max(1) as f64 / 1e9)
    }

    /// A send's CLOCK_MONOTONIC ns as seconds since attach; None for 0 (no send yet).
    fn since_attach_s(&self, ns: u64) -> Option<f64> {
        (ns > 0).then(|| ns.saturating_sub(self.start_ns) as f64 / 1e9)
    }

    /// The phase the run ended in: `ended` once every process of the family has exited, else
    /// the latest tick's (without a tick: `sending` when it made send calls, else `starting`).
    fn end_phase(&self, last: &CounterSample) -> RunPhase {
        if !last.processes.is_empty() && last.processes.iter().all(|p| !p.alive) {
            return RunPhase::Ended;
        }
        match self.last_phase {
            Some(p) => p,
            None if Totals::of(last).calls > 0 => RunPhase::Sending,
            None => RunPhase::Starting,
        }
    }

    fn ratio(&self, pps: f64) -> Option<f64> {
        self.requested_pps.filter(|r| *r > 0.0).map(|r| pps / r)
    }

    /// [`Self::rate_stats`] for a live tick, recomputed at most once per LIVE_STATS_EVERY_NS
    /// of samples (half a second: every tick at the default 1 s interval, whatever its jitter):
    /// they sort every tick of the run so far, which at 10 ms ticks is 100 sorts
    /// of a growing list each second. The summary's are always computed afresh.
    fn live_rate_stats(&mut self, t: &Totals, now_ns: u64) -> Option<RunStats> {
        match &self.live_stats {
            Some((at, stats)) if now_ns.saturating_sub(*at) < LIVE_STATS_EVERY_NS => stats.clone(),
            _ => {
                let stats = self.rate_stats(t);
                self.live_stats = Some((now_ns, stats.clone()));
                stats
            }
        }
    }

    /// Statistics over the ticks that lie wholly inside the send window.
    fn rate_stats(&self, t: &Totals) -> Option<RunStats> {
        if t.packets == 0 {
            return None;
        }
        let inside: Vec<f64> = self
            .ticks
            .windows()
            .iter()
            .filter(|k| k.start_ns >= t.first_send_ns && k.end_ns <= t.last_send_ns)
            .map(|k| k.pps)
            .collect();
        RunStats::from_samples(&inside).map(|st| RunStats {
            ticks_per_sample: self.ticks.per_kept.max(1),
            ..st
        })
    }

    fn gap_view(&self, now: &[ThreadCounters], prev: Option<&[ThreadCounters]>) -> GapView {
        let mut hist = Histogram::default();
        let (mut sum, mut count) = (0u64, 0u64);
        for th in now {
            let before = prev.and_then(|p| p.iter().find(|o| o.tid == th.tid && o.pid == th.pid));
            match before {
                Some(b) => {
                    hist.add(&th.gap.saturating_sub(&b.gap));
                    sum += th.gap_sum_ns.saturating_sub(b.gap_sum_ns);
                    count += th.gap_count.saturating_sub(b.gap_count);
                }
                None => {
                    hist.add(&th.gap);
                    sum += th.gap_sum_ns;
                    count += th.gap_count;
                }
            }
        }
        GapView {
            count,
            mean_ns: (count > 0).then(|| sum as f64 / count as f64),
            p50_ns: hist.quantile(0.5),
            p99_ns: hist.quantile(0.99),
            slot_ns: self.requested_pps.filter(|r| *r > 0.0).map(|r| 1e9 / r),
            histogram: hist.nonzero_buckets().collect(),
        }
    }
}

fn comm_of(s: &CounterSample, pid: u32) -> String {
    s.processes
        .iter()
        .rev()
        .find(|p| p.pid == pid)
        .map(|p| p.comm.clone())
        .unwrap_or_default()
}

/// Sender threads over the interval (`prev` given) or the whole run (`prev` None).
/// `start_ns`: CLOCK_MONOTONIC ns at attach, for the moments a block in progress began.
fn thread_views(
    s: &CounterSample,
    prev: Option<&CounterSample>,
    interval_ns: u64,
    start_ns: u64,
) -> Vec<ThreadView> {
    let interval_s = interval_ns.max(1) as f64 / 1e9;
    s.threads
        .iter()
        .filter_map(|th| {
            let before = prev.and_then(|p| p.threads.iter().find(|o| o.tid == th.tid && o.pid == th.pid));
            let zero = ThreadCounters::default();
            let b = before.unwrap_or(&zero);
            let packets = th.packets.saturating_sub(b.packets);
            let calls = th.calls.saturating_sub(b.calls);
            // A tick lists the threads that called send in it and the live ones that sent
            // before (a sender blocked for the whole tick shows with 0 pps); the run lists all.
            let listed = calls > 0 || (th.calls > 0 && (prev.is_none() || !th.exited));
            if !listed {
                return None;
            }
            let budget = th.budget.saturating_sub(&b.budget);
            let latency = th.latency.saturating_sub(&b.latency);
            let errors = th
                .errors
                .iter()
                .map(|(k, v)| (k.clone(), v.saturating_sub(*b.errors.get(k).unwrap_or(&0))))
                .filter(|(_, v)| *v > 0)
                .collect();
            Some(ThreadView {
                tid: th.tid,
                pid: th.pid,
                comm: comm_of(s, th.pid),
                calls,
                packets,
                pps: packets as f64 / interval_s,
                failed_calls: th.failed_calls.saturating_sub(b.failed_calls),
                errors,
                shares: BudgetShares::of(&budget, interval_ns),
                budget,
                send_window_budget: th.window_budget.filter(|_| prev.is_none()),
                latency_p50_ns: latency.quantile(0.5),
                latency_p99_ns: latency.quantile(0.99),
                // A tick's state; the run's summary has none.
                blocked_now: th
                    .blocked_now
                    .as_ref()
                    .filter(|_| prev.is_some())
                    .map(|b| BlockedNowView {
                        since_s: b.since_ns.saturating_sub(start_ns) as f64 / 1e9,
                        blocked_s: s.t_ns.saturating_sub(b.since_ns) as f64 / 1e9,
                        wait_site: b.wait_site.clone(),
                    }),
            })
        })
        .collect()
}

fn drop_key(d: &DropCount) -> (&str, &str, u32, u32, DropClass, Option<u32>) {
    (&d.reason, &d.location, d.ifindex, d.netns, d.class, d.pid)
}

/// Drop rows with their rate over the interval; `prev` empty means "since attach".
/// A tick's drop rows: the drops of the tick (`count`) and their rate, only rows that dropped
/// something in it, so that a sample's size follows what happened in its tick, not how many
/// drop sites the run has seen so far.
fn tick_drop_rows(now: &[DropCount], prev: &[DropCount], interval_s: f64) -> Vec<DropRow> {
    now.iter()
        .filter_map(|d| {
            let before = prev
                .iter()
                .find(|p| drop_key(p) == drop_key(d))
                .map_or(0, |p| p.count);
            let count = d.count.saturating_sub(before);
            (count > 0).then(|| drop_row(d, count, count as f64 / interval_s))
        })
        .collect()
}

/// The run's drop rows: every row with its count since attach, as a rate over `over_s`.
fn run_drop_rows(now: &[DropCount], over_s: f64) -> Vec<DropRow> {
    now.iter()
        .map(|d| drop_row(d, d.count, d.count as f64 / over_s))
        .collect()
}

fn drop_row(d: &DropCount, count: u64, rate: f64) -> DropRow {
    DropRow {
        reason: d.reason.clone(),
        location: d.location.clone(),
        device: d.device.clone(),
        netns: d.netns,
        class: d.class,
        pid: d.pid,
        count,
        rate,
    }
}

fn device_views(
    now: &[DeviceCounters],
    prev: &[DeviceCounters],
    interval_s: f64,
    s: &CounterSample,
) -> Vec<DeviceView> {
    let find = |list: &[DeviceCounters], d: &DeviceCounters, target: bool| -> DeviceCounters {
        list.iter()
            .filter(|o| o.ifindex == d.ifindex && o.netns == d.netns && o.pid.is_some() == target)
            .fold(DeviceCounters::default(), |mut acc, o| {
                acc.queued += o.queued;
                acc.xmit_ok += o.xmit_ok;
                acc.xmit_busy += o.xmit_busy;
                acc.xmit_err += o.xmit_err;
                acc.neigh_started += o.neigh_started;
                acc.neigh_queued += o.neigh_queued;
                acc.neigh_resolved += o.neigh_resolved;
                acc.neigh_failed += o.neigh_failed;
                acc
            })
    };
    // One view per device that carried any of the family's packets.
    now.iter()
        .filter(|d| d.pid.is_some())
        .fold(Vec::<&DeviceCounters>::new(), |mut seen, d| {
            if !seen.iter().any(|o| o.ifindex == d.ifindex && o.netns == d.netns) {
                seen.push(d);
            }
            seen
        })
        .into_iter()
        .map(|d| {
            let (tn, tp) = (find(now, d, true), find(prev, d, true));
            let (an, ap) = (find(now, d, false), find(prev, d, false));
            let q = s
                .queues
                .iter()
                .find(|q| q.device == d.device && q.netns == d.netns);
            DeviceView {
                device: d.device.clone(),
                netns: d.netns,
                target_queued_pps: tn.queued.saturating_sub(tp.queued) as f64 / interval_s,
                target_xmit_pps: tn.xmit_ok.saturating_sub(tp.xmit_ok) as f64 / interval_s,
                all_xmit_pps: an.xmit_ok.saturating_sub(ap.xmit_ok) as f64 / interval_s,
                xmit_refused: (an.xmit_busy + an.xmit_err).saturating_sub(ap.xmit_busy + ap.xmit_err),
                qlen_max: q.map(|q| q.qlen_max),
                backlog_max_bytes: q.map(|q| q.backlog_max),
                neigh_started: tn.neigh_started.saturating_sub(tp.neigh_started),
                neigh_queued: tn.neigh_queued.saturating_sub(tp.neigh_queued),
                neigh_resolved: tn.neigh_resolved.saturating_sub(tp.neigh_resolved),
                neigh_failed: tn.neigh_failed.saturating_sub(tp.neigh_failed),
                // Everyone's row carries the kind (the probes read it with the device's name).
                qdisc: now
                    .iter()
                    .filter(|o| o.ifindex == d.ifindex && o.netns == d.netns)
                    .find_map(|o| o.qdisc.clone()),
            }
        })
        .collect()
}

fn block_site_views(s: &CounterSample, prev: Option<&CounterSample>) -> Vec<BlockSiteView> {
    let rows: Vec<(u32, &str, &Vec<String>, u64, u64)> = s
        .block_sites
        .iter()
        .map(|b| {
            let before = prev
                .and_then(|p| {
                    p.block_sites
                        .iter()
                        .find(|o| o.pid == b.pid && o.stack == b.stack)
                })
                .map(|o| (o.blocked_ns, o.episodes))
                .unwrap_or((0, 0));
            (
                b.pid,
                b.wait_site.as_str(),
                &b.stack,
                b.blocked_ns.saturating_sub(before.0),
                b.episodes.saturating_sub(before.1),
            )
        })
        .filter(|r| r.3 > 0)
        .collect();
    let total: u64 = rows.iter().map(|r| r.3).sum();
    rows.into_iter()
        .map(|(pid, site, stack, ns, episodes)| BlockSiteView {
            pid,
            wait_site: site.to_string(),
            stack: stack.clone(),
            blocked_s: ns as f64 / 1e9,
            episodes,
            share: ns as f64 / total.max(1) as f64,
        })
        .collect()
}

#[cfg(test)]
mod tests;
