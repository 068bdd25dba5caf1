//! `--device-stages sampled` (and auto once it samples): the windows in which the device-stage
//! programs are attached (the first 1/`divisor` of each tick), and the device counters they
//! gave, scaled up to the tick: a family process's by its syscall packets in the tick over
//! those in the window, everything else by the tick's length over the window's. The counters
//! that come out are cumulative estimates, like the exact ones in shape, with `DeviceSampling`
//! saying what share of the time they cover. Pure: the collector attaches and detaches, and
//! passes the times and the family's packets.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::DeviceCounters;
use crate::probes::device_stages::Switch;

/// The share of the windows' time that attaching and detaching their programs may take before
/// the run warns that the estimates are uncertain by that much (`slow_switch_warning`).
pub const SLOW_SWITCH_SHARE: f64 = 0.05;

/// Windows per tick: the device-stage programs are attached for the first tenth of each tick,
/// as the BPF statistics are on for the last tenth (bpf_time::StatsPolicy::DEFAULT).
pub const DIVISOR: u32 = 10;

/// What the device stages' sampling covered, cumulative since attach.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct DeviceSampling {
    /// windows closed so far
    pub windows: u64,
    /// time the device-stage programs were attached, summed over the windows, ns
    pub covered_ns: u64,
    /// time from attach to the latest sample, ns
    pub elapsed_ns: u64,
    /// scanprof's own time attaching and detaching the programs, summed, ns
    pub switch_ns: u64,
    /// program attaches and detaches so far (two per windowed program and window)
    pub switches: u64,
    /// time in ticks the windowed programs were attached throughout, counted whole (not
    /// scaled, and not in `covered_ns`/`elapsed_ns`): a tick shorter than its window, and with
    /// `--device-stages auto` each tick after one in which the family sent at most
    /// `--sample-above`
    #[serde(default, skip_serializing_if = "is_zero")]
    pub whole_ns: u64,
    /// with `--device-stages auto`: when and why sampling began (the counts before it are
    /// exact); None when the stages were sampled from attach (and in older bundles). Only the
    /// whole run's figure has it: a tick's own figure (`since`) covers sampled time alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto: Option<AutoStart>,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// When `--device-stages auto` began to sample: the device stages were counted exactly for
/// `exact_ns` from attach, until a tick in which the family sent `pps` packets a second, above
/// the `above_pps` the user allowed (`--sample-above`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct AutoStart {
    pub exact_ns: u64,
    pub pps: f64,
    pub above_pps: f64,
}

/// `--device-stages auto`: the family's send rate, tick by tick, against the rate above which
/// the device stages are sampled. The rate is the syscall stage's, which is exact in both modes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AutoSampling {
    pub above_pps: f64,
    /// the family's packets (all its threads, exited ones included) and when, at the last tick
    last_packets: u64,
    last_ns: u64,
}

impl AutoSampling {
    /// Counting from attach at `start_ns`, when the family had sent nothing scanprof saw.
    pub fn new(above_pps: f64, start_ns: u64) -> AutoSampling {
        AutoSampling {
            above_pps,
            last_packets: 0,
            last_ns: start_ns,
        }
    }

    /// A tick at `now_ns` with the family's packets so far: its rate over the tick when it is
    /// above the limit (then sampling should begin), else None.
    pub fn above(&mut self, packets: u64, now_ns: u64) -> Option<f64> {
        let dt = now_ns.saturating_sub(self.last_ns);
        let sent = packets.saturating_sub(self.last_packets);
        self.last_packets = packets;
        self.last_ns = now_ns;
        let pps = sent as f64 / (dt.max(1) as f64 / 1e9);
        (dt > 0 && pps > self.above_pps).then_some(pps)
    }
}

impl DeviceSampling {
    /// For tests: `windows` windows of the first tenth of a 1 s tick each (no switching time).
    #[cfg(test)]
    pub fn tenth_of_each_second(windows: u64) -> DeviceSampling {
        DeviceSampling {
            windows,
            covered_ns: windows * 100_000_000,
            elapsed_ns: windows * 1_000_000_000,
            switch_ns: 0,
            switches: 0,
            whole_ns: 0,
            auto: None,
        }
    }

    /// Whether any of the time was sampled (a tick counted whole is not): a figure that sampled
    /// nothing says an exact count.
    pub fn sampled_any(&self) -> bool {
        self.elapsed_ns > 0
    }

    /// Share of the sampled time the device stages were counted, 0 to 1.
    pub fn coverage(&self) -> f64 {
        if self.elapsed_ns == 0 {
            return 0.0;
        }
        (self.covered_ns as f64 / self.elapsed_ns as f64).min(1.0)
    }

    /// What the windows covered since `prev` (an earlier figure of the same run; None: since
    /// attach).
    pub fn since(&self, prev: Option<&DeviceSampling>) -> DeviceSampling {
        let Some(p) = prev else {
            // the first tick that sampled: all of it sampled
            return DeviceSampling { auto: None, ..*self };
        };
        DeviceSampling {
            windows: self.windows.saturating_sub(p.windows),
            covered_ns: self.covered_ns.saturating_sub(p.covered_ns),
            elapsed_ns: self.elapsed_ns.saturating_sub(p.elapsed_ns),
            switch_ns: self.switch_ns.saturating_sub(p.switch_ns),
            switches: self.switches.saturating_sub(p.switches),
            whole_ns: self.whole_ns.saturating_sub(p.whole_ns),
            auto: None,
        }
    }

    /// Mean time one attach or detach of a windowed program took, ns.
    pub fn switch_ns_each(&self) -> Option<f64> {
        (self.switches > 0).then(|| self.switch_ns as f64 / self.switches as f64)
    }

    /// Mean time attaching and detaching the programs took per window (that is, per tick), ns.
    pub fn switch_ns_per_window(&self) -> Option<f64> {
        (self.windows > 0).then(|| self.switch_ns as f64 / self.windows as f64)
    }

    /// Time spent attaching and detaching the windowed programs over the time their windows
    /// covered (0 before any window).
    pub fn switch_share(&self) -> f64 {
        self.switch_ns as f64 / self.covered_ns.max(1) as f64
    }

    /// When attaching and detaching the windowed programs took more than
    /// [`SLOW_SWITCH_SHARE`] of the time their windows covered: a program starts and stops
    /// counting somewhere inside those calls (and what they stall of the sender, e.g. a kernel
    /// patching its tracepoint's jump for each, stalls it inside the window), so the estimates
    /// can be off by that share. Seen at 109% in an emulated 5.10 guest, where the estimates
    /// were 35% low; about 1% on the development machines.
    pub fn slow_switch_warning(&self) -> Option<String> {
        let share = self.switch_share();
        (self.windows > 0 && share > SLOW_SWITCH_SHARE).then(|| {
            format!(
                "attaching and detaching the sampled device-stage programs took {:.1} ms a window, \
                 {} of the time the windows covered: the windows' edges are known only to within \
                 that, so the device stages' estimates can be off by as much (--device-stages \
                 exact counts them)",
                self.switch_ns_per_window().unwrap_or(0.0) / 1e6,
                percent(share)
            )
        })
    }

    /// The option that sampled: `--device-stages sampled`, or `--device-stages auto` (which
    /// began to sample above its rate).
    pub fn option(&self) -> &'static str {
        if self.auto.is_some() {
            "--device-stages auto"
        } else {
            "--device-stages sampled"
        }
    }

    /// What a figure of a device stage is: "sampled 10% of the time, scaled", or with
    /// `--device-stages auto` "counted for 3.0 s, then sampled 10% of the time (the family
    /// sent 180000 pps, above --sample-above 50000), scaled"; either with "except 2.0 s
    /// counted whole" when some ticks were (`whole_ns`).
    pub fn label(&self) -> String {
        let whole = if self.whole_ns > 0 {
            format!(" except {} counted whole", span(self.whole_ns))
        } else {
            String::new()
        };
        match &self.auto {
            None => format!("sampled {} of the time{whole}, scaled", percent(self.coverage())),
            Some(a) => format!(
                "counted for {:.1} s, then sampled {} of the time (the family sent {:.0} pps, above \
                 --sample-above {:.0}){whole}, scaled",
                a.exact_ns as f64 / 1e9,
                percent(self.coverage()),
                a.pps,
                a.above_pps
            ),
        }
    }
}

/// A length of time for a label: "3.1 s", or under a tenth of a second "40 ms" (not "0.0 s").
pub fn span(ns: u64) -> String {
    if ns >= 100_000_000 {
        format!("{:.1} s", ns as f64 / 1e9)
    } else {
        format!("{} ms", ns.div_ceil(1_000_000))
    }
}

/// A share as a percentage with no more digits than it needs: 10%, 9.8%, 0.4%.
fn percent(share: f64) -> String {
    let p = share * 100.0;
    if p >= 10.0 || p == 0.0 {
        format!("{p:.0}%")
    } else {
        format!("{p:.1}%")
    }
}

/// A device row's key: ifindex, namespace, family process (None: everyone's).
type RowKey = (u32, u32, Option<u32>);

/// The family's packets through its send syscalls by process (tgid), cumulative since attach,
/// exited threads included: counted on every packet in every mode, so the auxiliary of the
/// ratio estimate (`DeviceWindows::scale`).
pub type FamilyPackets = BTreeMap<u32, u64>;

/// Packets by process as the mean of two reads (the family's packets at a switch's call).
type Packets = BTreeMap<u32, f64>;

/// The family's packets at a switch: the mean of the reads just before and just after its call
/// (a process absent from one read had sent none then).
fn at_switch(before: &FamilyPackets, after: &FamilyPackets) -> Packets {
    let mut at: Packets = before.iter().map(|(p, n)| (*p, *n as f64 / 2.0)).collect();
    for (p, n) in after {
        *at.entry(*p).or_default() += *n as f64 / 2.0;
    }
    at
}

/// Adds to `window` each process's packets from `open` (when its program was attached, or the
/// window last split) to `now`.
fn add_sent_since(window: &mut Packets, open: &Packets, now: &Packets) {
    for (pid, n) in now {
        let before = open.get(pid).copied().unwrap_or(0.0);
        *window.entry(*pid).or_default() += (n - before).max(0.0);
    }
}

/// Fewest syscall packets of a process inside a tick's window for its rows to be scaled by the
/// ratio to them; with fewer, its rows are scaled by time, as everyone else's traffic is.
pub const MIN_RATIO_PACKETS: u64 = 20;

/// The counters of a row that its window programs count, in this order; the neighbour
/// counters (their programs stay attached) and the qdisc's kind are not scaled.
const SCALED: usize = 7;

fn scaled_fields(d: &mut DeviceCounters) -> [&mut u64; SCALED] {
    [
        &mut d.queued,
        &mut d.enqueued,
        &mut d.dequeued,
        &mut d.xmit_ok,
        &mut d.xmit_busy,
        &mut d.xmit_err,
        &mut d.xmit_bytes,
    ]
}

/// The windowed programs (probes::device_stages::WINDOWED), by index.
const PROGRAMS: usize = crate::probes::device_stages::WINDOWED.len();

/// Which program counts each scaled field: dev_queue, qdisc_enqueue, qdisc_dequeue, and
/// dev_xmit for the four xmit fields.
const FIELD_PROGRAM: [usize; SCALED] = [0, 1, 2, 3, 3, 3, 3];

/// Opens and closes the windows and scales what they counted. Each program's window is timed
/// apart: attaching or detaching one tracepoint link took milliseconds here under load, which
/// at 20,000 packets a second is hundreds of packets counted at one stage and not the next.
///
/// A family process's rows are scaled by the ratio of its syscall packets in the tick to those
/// it sent while the program was attached (the collector reads them before and after each
/// attach and detach call, and a switch takes the mean of its two reads): a sender runs
/// slower inside a window, where the programs it measures run on its packets (at full speed
/// here the time-scaled dev_queue came out 0.915-0.969 of the syscall packets), and a tick in
/// which it starts or stops is not evenly paced; the syscall stage is counted on every packet,
/// so the ratio follows both. What else a device carries (everyone's rows less the family's)
/// is scaled by time.
#[derive(Debug)]
pub struct DeviceWindows {
    divisor: u32,
    /// CLOCK_MONOTONIC ns the open window opened (its first attach); None between windows
    opened: Option<u64>,
    /// per program, CLOCK_MONOTONIC ns it was attached (the middle of its attach call)
    program_opened: [Option<u64>; PROGRAMS],
    /// per program, the time its windows covered since the last sample, ns
    tick_covered_ns: [u64; PROGRAMS],
    /// CLOCK_MONOTONIC ns of the last sample (attach, before the first)
    last_sample_ns: u64,
    /// CLOCK_MONOTONIC ns the last window closed
    last_closed_ns: u64,
    /// each row's raw counters at the last sample
    prev_raw: BTreeMap<RowKey, [u64; SCALED]>,
    /// each row's estimates so far
    scaled: BTreeMap<RowKey, [f64; SCALED]>,
    /// per program, the family's packets when it was attached (the mean of the reads just
    /// before and just after its attach call); None when it is not attached, or was attached
    /// without reads
    program_open_packets: [Option<Packets>; PROGRAMS],
    /// per program and process, the syscall packets sent while the program was attached in
    /// this tick
    window_packets: [Packets; PROGRAMS],
    /// the family's packets at the last sample
    prev_family: FamilyPackets,
    totals: DeviceSampling,
    /// `--device-stages auto` while the family sends at most its limit: the open window is not
    /// closed (`closes_at` is None), so the ticks it spans are counted whole
    held: bool,
    /// why a window could not be opened (then no more are tried)
    pub error: Option<String>,
}

/// The middle of a switch's call: when the program started or stopped running, to within half
/// the call.
fn middle(s: &Switch) -> u64 {
    s.before_ns + s.after_ns.saturating_sub(s.before_ns) / 2
}

impl DeviceWindows {
    /// Windows of 1/`divisor` of each tick, the first open since `start_ns` (the programs are
    /// attached at load).
    pub fn new(divisor: u32, start_ns: u64) -> DeviceWindows {
        DeviceWindows {
            divisor: divisor.max(1),
            opened: Some(start_ns),
            program_opened: [Some(start_ns); PROGRAMS],
            tick_covered_ns: [0; PROGRAMS],
            last_sample_ns: start_ns,
            last_closed_ns: start_ns,
            prev_raw: BTreeMap::new(),
            scaled: BTreeMap::new(),
            // at attach the family has sent nothing scanprof counted
            program_open_packets: std::array::from_fn(|_| Some(Packets::new())),
            window_packets: std::array::from_fn(|_| Packets::new()),
            prev_family: FamilyPackets::new(),
            totals: DeviceSampling::default(),
            held: false,
            error: None,
        }
    }

    /// `--device-stages auto` begins to sample at `now_ns`: the windowed programs have been
    /// attached all along, so a window is open from now (it closes a tick's 1/`divisor` later),
    /// and the counters read now (`exact`, every packet counted) are where the estimates start.
    pub fn from_counts(
        divisor: u32,
        now_ns: u64,
        exact: &[DeviceCounters],
        family: &FamilyPackets,
        auto: AutoStart,
    ) -> DeviceWindows {
        let mut w = DeviceWindows::new(divisor, now_ns);
        let at = at_switch(family, family);
        w.program_open_packets = std::array::from_fn(|_| Some(at.clone()));
        w.prev_family = family.clone();
        for d in exact {
            let mut d = d.clone();
            let key = (d.ifindex, d.netns, d.pid);
            let now = scaled_fields(&mut d).map(|v| *v);
            w.prev_raw.insert(key, now);
            w.scaled.insert(key, now.map(|v| v as f64));
        }
        w.totals.auto = Some(auto);
        w
    }

    /// Whether a window is open.
    pub fn is_open(&self) -> bool {
        self.opened.is_some()
    }

    /// When the open window of a tick of `interval_ns` closes; None when none is open, or the
    /// window is held open.
    pub fn closes_at(&self, interval_ns: u64) -> Option<u64> {
        if self.held {
            return None;
        }
        self.opened
            .map(|at| at.saturating_add(interval_ns / self.divisor as u64))
    }

    /// `--device-stages auto`, tick by tick once it samples: hold the windows open (`true`, the
    /// family sent at most its limit in the tick that just ended: the window opened at its end
    /// stays open, and each tick it spans whole is counted whole) or let them close again as
    /// usual (`false`: it sent more).
    pub fn hold_open(&mut self, hold: bool) {
        self.held = hold;
    }

    /// A window opened: its programs attached as `switches` say, with the family's packets
    /// read before the first call and after each (`reads`: one more than the switches, or
    /// none, and then the window's rows are scaled by time).
    pub fn opened(&mut self, switches: &[Switch], reads: &[FamilyPackets]) {
        let read = reads.len() == switches.len() + 1;
        for (i, s) in switches.iter().enumerate() {
            if let Some(p) = self.program_opened.get_mut(s.program) {
                *p = Some(middle(s));
            }
            if let Some(p) = self.program_open_packets.get_mut(s.program) {
                *p = read.then(|| at_switch(&reads[i], &reads[i + 1]));
            }
            self.totals.switch_ns += s.after_ns.saturating_sub(s.before_ns);
            self.totals.switches += 1;
        }
        self.opened = switches.iter().map(|s| s.before_ns).min();
    }

    /// The open window closed: its programs detached as `switches` say, with the family's
    /// packets read as at `opened`: each process's packets between a program's attach and its
    /// detach count as sent in its window.
    pub fn closed(&mut self, switches: &[Switch], reads: &[FamilyPackets]) {
        if self.opened.take().is_none() {
            return;
        }
        let read = reads.len() == switches.len() + 1;
        for (i, s) in switches.iter().enumerate() {
            let at = middle(s);
            if let Some(opened) = self.program_opened.get_mut(s.program).and_then(Option::take) {
                self.tick_covered_ns[s.program] += at.saturating_sub(opened);
            }
            let open = self
                .program_open_packets
                .get_mut(s.program)
                .and_then(Option::take);
            if let (Some(open), true) = (open, read) {
                add_sent_since(
                    &mut self.window_packets[s.program],
                    &open,
                    &at_switch(&reads[i], &reads[i + 1]),
                );
            }
            self.last_closed_ns = self.last_closed_ns.max(s.after_ns);
            self.totals.switch_ns += s.after_ns.saturating_sub(s.before_ns);
            self.totals.switches += 1;
        }
        self.totals.windows += 1;
    }

    /// A sample while the window is open (one soon after attach, the run's last, or a tick
    /// shorter than its window): the window stays open across it. Its time and the family's
    /// packets up to the device counters' read count in the tick that ends there, the rest in
    /// the next, whose window it becomes (closing a window's length from the read). The read
    /// took from `before_ns` to `after_ns`; `reads` are the family's packets just before and
    /// just after it.
    ///
    /// Detaching the programs and attaching them again at once would not do: an attach soon
    /// after a tracepoint's last program was detached waits out an RCU grace period before
    /// the program runs (kernel/tracepoint.c, `tp_rcu_cond_sync` on the 1->0->1 transition),
    /// and the packets sent during that wait counted as half in the window. Measured here:
    /// a 9.2 ms attach while 1,178 packets went out, and that tick's dev_queue 4.7% low.
    pub fn split(&mut self, before_ns: u64, after_ns: u64, reads: [&FamilyPackets; 2]) {
        if self.opened.is_none() {
            return;
        }
        let at = before_ns + after_ns.saturating_sub(before_ns) / 2;
        let packets = at_switch(reads[0], reads[1]);
        for p in 0..PROGRAMS {
            if let Some(opened) = self.program_opened[p].as_mut() {
                self.tick_covered_ns[p] += at.saturating_sub(*opened);
                *opened = at;
            }
            if let Some(open) = self.program_open_packets[p].as_mut() {
                add_sent_since(&mut self.window_packets[p], open, &packets);
                *open = packets.clone();
            }
        }
        self.opened = Some(at);
        self.last_closed_ns = self.last_closed_ns.max(at);
    }

    /// The estimates as of a sample at `now_ns` from the raw counters and the family's packets
    /// read then (the window closed before the read). The tick ends at the sample, or where its
    /// window closed if later (the collector reads its clock before a tick's work).
    ///
    /// A family process's row: its counts since the last sample times its syscall packets in
    /// the tick over those it sent in its program's window (the struct's note), when it sent at
    /// least MIN_RATIO_PACKETS in the windows; else, and for everyone else's traffic (an
    /// everyone's row less the family's rows of the device), times the tick's length over the
    /// time the program's windows covered. A program attached the whole tick (a window held
    /// open, or a tick shorter than its window) counted every packet: its counts stand, and
    /// the tick's time is `whole_ns`. A program with no window in the tick (none should be: a
    /// window opens at every sample) adds nothing.
    pub fn scale(
        &mut self,
        raw: Vec<DeviceCounters>,
        now_ns: u64,
        family: &FamilyPackets,
    ) -> (Vec<DeviceCounters>, DeviceSampling) {
        let now_ns = now_ns.max(self.last_closed_ns);
        let tick_ns = now_ns.saturating_sub(self.last_sample_ns);
        let covered = self.tick_covered_ns.map(|c| c.min(tick_ns));
        // a program attached the whole tick counted every packet of it: its counts stand
        let whole = covered.map(|c| c > 0 && c == tick_ns);
        let by_time = covered.map(|c| if c == 0 { 0.0 } else { tick_ns as f64 / c as f64 });
        let by_ratio = |pid: u32, program: usize| -> Option<f64> {
            if whole[program] {
                return Some(1.0);
            }
            let in_window = self.window_packets[program].get(&pid).copied().unwrap_or(0.0);
            if in_window < MIN_RATIO_PACKETS as f64 || covered[program] == 0 {
                return None;
            }
            let sent = family
                .get(&pid)
                .copied()
                .unwrap_or(0)
                .saturating_sub(self.prev_family.get(&pid).copied().unwrap_or(0));
            Some(sent as f64 / in_window)
        };
        // Each row's counts since the last sample, the family's rows first: a device's
        // everyone's row scales by time only what its family rows do not hold.
        let mut rows: Vec<(usize, DeviceCounters, [u64; SCALED])> = raw
            .into_iter()
            .enumerate()
            .map(|(i, mut d)| {
                let key = (d.ifindex, d.netns, d.pid);
                let now = scaled_fields(&mut d).map(|v| *v);
                let before = self.prev_raw.insert(key, now).unwrap_or([0; SCALED]);
                let delta = std::array::from_fn(|j| now[j].saturating_sub(before[j]));
                (i, d, delta)
            })
            .collect();
        rows.sort_by_key(|(_, d, _)| d.pid.is_none());
        let mut family_rows: BTreeMap<(u32, u32), ([u64; SCALED], [f64; SCALED])> = BTreeMap::new();
        let mut out = Vec::with_capacity(rows.len());
        for (i, mut d, delta) in rows {
            let key = (d.ifindex, d.netns, d.pid);
            let added: [f64; SCALED] = match d.pid {
                Some(pid) => {
                    let added: [f64; SCALED] = std::array::from_fn(|j| {
                        let program = FIELD_PROGRAM[j];
                        delta[j] as f64 * by_ratio(pid, program).unwrap_or(by_time[program])
                    });
                    let fam = family_rows.entry((d.ifindex, d.netns)).or_default();
                    for j in 0..SCALED {
                        fam.0[j] += delta[j];
                        fam.1[j] += added[j];
                    }
                    added
                }
                None => {
                    let (fam_raw, fam_est) = family_rows
                        .get(&(d.ifindex, d.netns))
                        .copied()
                        .unwrap_or_default();
                    std::array::from_fn(|j| {
                        fam_est[j] + delta[j].saturating_sub(fam_raw[j]) as f64 * by_time[FIELD_PROGRAM[j]]
                    })
                }
            };
            let est = self.scaled.entry(key).or_insert([0.0; SCALED]);
            for ((e, field), a) in est.iter_mut().zip(scaled_fields(&mut d)).zip(added) {
                *e += a;
                *field = e.round() as u64;
            }
            out.push((i, d));
        }
        out.sort_by_key(|(i, _)| *i);
        // The coverage said is dev_queue's (every device passes it; the others' differ by the
        // time one attach or detach takes). A tick it covered whole was counted, not sampled.
        if whole[0] {
            self.totals.whole_ns += tick_ns;
        } else {
            self.totals.covered_ns += covered[0];
            self.totals.elapsed_ns += tick_ns;
        }
        self.tick_covered_ns = [0; PROGRAMS];
        self.window_packets = std::array::from_fn(|_| Packets::new());
        self.prev_family = family.clone();
        self.last_sample_ns = now_ns.max(self.last_sample_ns);
        (out.into_iter().map(|(_, d)| d).collect(), self.totals)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slow_attaches_are_a_warning_with_their_share() {
        let quick = DeviceSampling {
            switch_ns: 12 * 1_200_000,
            switches: 96,
            ..DeviceSampling::tenth_of_each_second(12)
        };
        assert_eq!(quick.slow_switch_warning(), None);
        // an emulated 5.10 guest's (2026-11-30): 132 ms a window against ~121 ms covered
        let slow = DeviceSampling {
            windows: 31,
            covered_ns: 31 * 121_000_000,
            elapsed_ns: 31 * 1_000_000_000,
            switch_ns: 31 * 132_000_000,
            switches: 248,
            whole_ns: 0,
            auto: None,
        };
        let w = slow.slow_switch_warning().expect("a warning");
        assert!(w.contains("took 132.0 ms a window, 109% of the time"), "{w}");
        assert_eq!(DeviceSampling::default().slow_switch_warning(), None);
    }

    const MS: u64 = 1_000_000;

    /// A family whose sends scanprof did not see: every row is scaled by time.
    fn no_sends() -> FamilyPackets {
        FamilyPackets::new()
    }

    fn sent(n: u64) -> FamilyPackets {
        FamilyPackets::from([(42, n)])
    }

    fn row(queued: u64, xmit_ok: u64, neigh_queued: u64) -> DeviceCounters {
        DeviceCounters {
            device: "veth0".into(),
            ifindex: 3,
            netns: 7,
            pid: Some(42),
            queued,
            xmit_ok,
            xmit_bytes: xmit_ok * 100,
            neigh_queued,
            ..Default::default()
        }
    }

    /// Every program switched at `at_ns`, each call taking `took_ns`.
    fn all_at(at_ns: u64, took_ns: u64) -> Vec<Switch> {
        (0..PROGRAMS)
            .map(|program| Switch {
                program,
                before_ns: at_ns - took_ns / 2,
                after_ns: at_ns + took_ns / 2,
            })
            .collect()
    }

    #[test]
    fn a_windows_counts_are_scaled_by_the_tick_over_the_window() {
        let mut w = DeviceWindows::new(DIVISOR, 0);
        assert_eq!(w.closes_at(1_000 * MS), Some(100 * MS));
        w.closed(&all_at(100 * MS, 20_000), &[]);
        // 1,980 packets queued in the 100 ms window of a 1 s tick: 19,800 over the tick
        let (rows, s) = w.scale(vec![row(1_980, 1_970, 3)], 1_000 * MS, &no_sends());
        assert_eq!(rows[0].queued, 19_800);
        assert_eq!(rows[0].xmit_ok, 19_700);
        assert_eq!(rows[0].xmit_bytes, 1_970_000);
        assert_eq!(rows[0].neigh_queued, 3, "the neighbour counters are exact");
        assert_eq!((s.windows, s.covered_ns, s.elapsed_ns), (1, 100 * MS, 1_000 * MS));
        assert!((s.coverage() - 0.1).abs() < 1e-12);
        assert_eq!(s.label(), "sampled 10% of the time, scaled");

        // next tick: the window opens at the sample, 2,000 more in 50 ms of a 500 ms tick
        w.opened(&all_at(1_000 * MS, 30_000), &[]);
        assert_eq!(w.closes_at(500 * MS), Some(1_050 * MS - 15_000));
        w.closed(&all_at(1_050 * MS, 10_000), &[]);
        let (rows, s) = w.scale(vec![row(3_980, 3_970, 4)], 1_500 * MS, &no_sends());
        assert_eq!(rows[0].queued, 19_800 + 20_000, "cumulative estimates");
        assert_eq!(s.windows, 2);
        // four programs: detached 20 us each, attached 30 us, detached 10 us
        assert_eq!(s.switch_ns_each(), Some(20_000.0));
        assert_eq!(s.switch_ns_per_window(), Some(120_000.0));
        assert!((s.coverage() - 0.1).abs() < 1e-12);
    }

    #[test]
    fn each_stage_is_scaled_by_its_own_programs_window() {
        // dev_queue attached 40 ms longer than dev_xmit (slow detaches under load): each stage
        // over its own window gives the same rate, not dev_queue 40% above dev_xmit
        let mut w = DeviceWindows::new(DIVISOR, 0);
        let mut off = all_at(100 * MS, 0);
        off[0].before_ns = 140 * MS;
        off[0].after_ns = 140 * MS;
        w.closed(&off, &[]);
        let (rows, _) = w.scale(vec![row(2_800, 2_000, 0)], 1_000 * MS, &no_sends());
        assert_eq!(rows[0].queued, 20_000);
        assert_eq!(rows[0].xmit_ok, 20_000);
    }

    #[test]
    fn a_tick_shorter_than_its_window_is_counted_whole() {
        // the family exits 30 ms into a tick: the window is still open, closes at the sample
        let mut w = DeviceWindows::new(DIVISOR, 0);
        w.closed(&all_at(30 * MS, 0), &[]);
        let (rows, s) = w.scale(vec![row(777, 777, 0)], 30 * MS, &sent(800));
        assert_eq!(rows[0].queued, 777, "covered whole: as counted, not by the ratio");
        assert_eq!(s.whole_ns, 30 * MS);
        assert!(!s.sampled_any(), "nothing was sampled: {s:?}");
        assert_eq!(
            DeviceSampling {
                whole_ns: 30 * MS,
                ..DeviceSampling::tenth_of_each_second(2)
            }
            .label(),
            "sampled 10% of the time except 30 ms counted whole, scaled"
        );
    }

    #[test]
    fn rows_are_scaled_apart_and_a_new_row_counts_from_zero() {
        let mut w = DeviceWindows::new(4, 0);
        w.closed(&all_at(250 * MS, 0), &[]);
        let mut all = row(10, 10, 0);
        all.pid = None;
        let (rows, _) = w.scale(vec![row(5, 5, 0), all], 1_000 * MS, &no_sends());
        assert_eq!((rows[0].queued, rows[1].queued), (20, 40));
        w.opened(&all_at(1_000 * MS, 0), &[]);
        w.closed(&all_at(1_250 * MS, 0), &[]);
        let mut other = row(1, 1, 0);
        other.ifindex = 9;
        let (rows, _) = w.scale(vec![row(5, 5, 0), other], 2_000 * MS, &no_sends());
        assert_eq!(rows[0].queued, 20, "no new counts, no change");
        assert_eq!(rows[1].queued, 4);
    }

    #[test]
    fn auto_samples_from_the_first_tick_above_the_limit() {
        let mut a = AutoSampling::new(50_000.0, 0);
        // 40,000 packets in the first 1 s tick, then 49,999 more in the next: not above
        assert_eq!(a.above(40_000, 1_000 * MS), None);
        assert_eq!(a.above(89_999, 2_000 * MS), None);
        // 30,000 in a 0.5 s tick: 60,000 a second
        assert_eq!(a.above(119_999, 2_500 * MS), Some(60_000.0));
        // a tick of no length (two samples at once) is no rate
        assert_eq!(a.above(200_000, 2_500 * MS), None);
    }

    #[test]
    fn auto_keeps_the_exact_counts_and_scales_only_what_comes_after() {
        let start = AutoStart {
            exact_ns: 3_000 * MS,
            pps: 180_000.0,
            above_pps: 50_000.0,
        };
        // 540,000 packets counted exactly at every stage until 3 s, when sampling began
        let mut w = DeviceWindows::from_counts(
            DIVISOR,
            3_000 * MS,
            &[row(540_000, 539_990, 2)],
            &sent(540_000),
            start,
        );
        assert!(
            w.is_open(),
            "the programs are attached: a window is open from the switch"
        );
        assert_eq!(w.closes_at(1_000 * MS), Some(3_100 * MS));
        w.closed(&all_at(3_100 * MS, 0), &[]);
        // 18,000 more in the 100 ms window of the next 1 s tick
        let (rows, s) = w.scale(vec![row(558_000, 557_990, 2)], 4_000 * MS, &no_sends());
        assert_eq!(rows[0].queued, 540_000 + 180_000);
        assert_eq!(rows[0].xmit_ok, 539_990 + 180_000);
        assert_eq!((s.windows, s.covered_ns, s.elapsed_ns), (1, 100 * MS, 1_000 * MS));
        assert_eq!(s.auto, Some(start));
        assert_eq!(
            s.label(),
            "counted for 3.0 s, then sampled 10% of the time (the family sent 180000 pps, above \
             --sample-above 50000), scaled"
        );
        // a tick's own figure covers sampled time only
        assert_eq!(s.since(None).auto, None);
        assert_eq!(s.since(None).label(), "sampled 10% of the time, scaled");
    }

    #[test]
    fn auto_holds_the_window_open_while_the_rate_is_at_its_limit_and_counts_those_ticks_whole() {
        let start = AutoStart {
            exact_ns: 1_000 * MS,
            pps: 180_000.0,
            above_pps: 50_000.0,
        };
        let mut w = DeviceWindows::from_counts(
            DIVISOR,
            1_000 * MS,
            &[row(180_000, 180_000, 0)],
            &sent(180_000),
            start,
        );
        // a sampled tick: 18,000 in the window of 180,000 sent
        w.closed(&all_at(1_100 * MS, 0), &reads([198_000; PROGRAMS + 1]));
        let (rows, sampled) = w.scale(vec![row(198_000, 198_000, 0)], 2_000 * MS, &sent(360_000));
        assert_eq!(rows[0].queued, 360_000);
        // then 10,000 packets in a tick, below the limit: the next window is held open
        w.opened(&all_at(2_000 * MS, 0), &reads([360_000; PROGRAMS + 1]));
        w.hold_open(true);
        assert_eq!(w.closes_at(1_000 * MS), None, "held: no close scheduled");
        w.split(3_000 * MS, 3_000 * MS, [&sent(370_000), &sent(370_000)]);
        // the tick from 2 s to 3 s was attached throughout: 9,990 queued stand, not scaled by
        // the 10,000 sent
        let (rows, s) = w.scale(vec![row(207_990, 207_990, 0)], 3_000 * MS, &sent(370_000));
        assert_eq!(rows[0].queued, 360_000 + 9_990);
        assert_eq!(
            (s.whole_ns, s.covered_ns, s.elapsed_ns),
            (1_000 * MS, 100 * MS, 1_000 * MS)
        );
        assert_eq!(
            s.label(),
            "counted for 1.0 s, then sampled 10% of the time (the family sent 180000 pps, above \
             --sample-above 50000) except 1.0 s counted whole, scaled"
        );
        let tick = s.since(Some(&sampled));
        assert!(
            !tick.sampled_any(),
            "the tick itself was counted, not sampled: {tick:?}"
        );
        assert_eq!(tick.whole_ns, 1_000 * MS);
        // above the limit again: the open window closes a tenth of a tick after the last split
        w.hold_open(false);
        assert_eq!(w.closes_at(1_000 * MS), Some(3_100 * MS));
    }

    /// The family's packets read around each of the four switches: `at[k]` before the k-th
    /// call and after the last.
    fn reads(at: [u64; PROGRAMS + 1]) -> Vec<FamilyPackets> {
        at.iter().map(|n| sent(*n)).collect()
    }

    #[test]
    fn a_senders_rows_are_scaled_by_its_syscall_packets_not_by_time() {
        // The sender sends 1,800 packets in the 100 ms window (slowed by the programs there) and
        // 20,000 in the 1 s tick: time would make its 1,800 dev_queue 18,000, the ratio 20,000.
        // Everyone's row of the device holds 200 packets of others in the window, scaled by time.
        let mut w = DeviceWindows::new(DIVISOR, 0);
        w.closed(&all_at(100 * MS, 0), &reads([1_800; PROGRAMS + 1]));
        let mut all = row(2_000, 2_000, 0);
        all.pid = None;
        let (rows, _) = w.scale(vec![all, row(1_800, 1_800, 0)], 1_000 * MS, &sent(20_000));
        assert_eq!(rows[1].queued, 20_000, "the family's row, by its own packets");
        assert_eq!(
            rows[0].queued,
            20_000 + 2_000,
            "everyone's: the family's plus others by time"
        );
        assert_eq!(rows[0].pid, None, "the rows keep their order");

        // the next tick: the sender stops 300 ms in, after 6,000 packets (2,000 in the window)
        w.opened(&all_at(1_000 * MS, 0), &reads([20_000; PROGRAMS + 1]));
        w.closed(&all_at(1_100 * MS, 0), &reads([22_000; PROGRAMS + 1]));
        let mut all = row(4_000, 4_000, 0);
        all.pid = None;
        let (rows, _) = w.scale(vec![all, row(3_800, 3_800, 0)], 2_000 * MS, &sent(26_000));
        assert_eq!(rows[1].queued, 20_000 + 6_000, "not 20,000 more, as by time");
        assert_eq!(rows[0].queued, 22_000 + 6_000);
    }

    #[test]
    fn a_window_open_at_a_sample_goes_on_split_at_the_read() {
        // The first sample comes 40 ms after attach, the window (programs attached at load) still
        // open: it stays open, its first 40 ms and 8,000 packets (the mean of the reads around
        // the counters' read, 7,900 and 8,100) are that tick's, the rest the next tick's.
        let mut w = DeviceWindows::new(DIVISOR, 0);
        w.split(39 * MS, 41 * MS, [&sent(7_900), &sent(8_100)]);
        assert!(w.is_open(), "nothing detached at the sample");
        assert_eq!(
            w.closes_at(1_000 * MS),
            Some(140 * MS),
            "a window's length from the read"
        );
        // 8,000 queued by the read; the tick (0-40 ms) was all window: counted whole
        let (rows, s) = w.scale(vec![row(8_000, 8_000, 0)], 40 * MS, &sent(8_000));
        assert_eq!(rows[0].queued, 8_000);
        assert_eq!((s.whole_ns, s.covered_ns, s.elapsed_ns), (40 * MS, 0, 0));
        // the window closes 100 ms after the read, at 28,000 packets (20,000 in it), and the
        // tick ends at 1,040 ms with 200,000 sent since the sample (200,000 / 20,000 x 19,990)
        w.closed(&all_at(140 * MS, 0), &reads([28_000; PROGRAMS + 1]));
        let (rows, s) = w.scale(vec![row(27_990, 27_990, 0)], 1_040 * MS, &sent(208_000));
        assert_eq!(rows[0].queued, 8_000 + 199_900);
        assert_eq!((s.windows, s.covered_ns, s.elapsed_ns), (1, 100 * MS, 1_000 * MS));
        // a split with no window open changes nothing
        w.split(1_041 * MS, 1_042 * MS, [&sent(208_000), &sent(208_000)]);
        assert!(!w.is_open());
        assert_eq!(w.closes_at(1_000 * MS), None);
    }

    #[test]
    fn a_window_with_few_sends_is_scaled_by_time() {
        let mut w = DeviceWindows::new(DIVISOR, 0);
        w.closed(
            &all_at(100 * MS, 0),
            &reads([MIN_RATIO_PACKETS - 1; PROGRAMS + 1]),
        );
        let (rows, _) = w.scale(vec![row(10, 10, 0)], 1_000 * MS, &sent(1_000));
        assert_eq!(rows[0].queued, 100);
    }

    #[test]
    fn each_program_takes_the_packets_sent_between_its_own_switches() {
        // Four attaches one after the other, each read around: dev_queue (program 0) is attached
        // at 1,000 packets (the mean of the reads around its call, 900 and 1,100), dev_xmit
        // (program 3) at 1,600; detached at 3,050 and 3,350. The sender was stalled while
        // the calls ran (the reads around a call differ little) or not: each program's window
        // holds the packets between its own switches, not those between the window's edges.
        let mut w = DeviceWindows::new(DIVISOR, 0);
        w.closed(&all_at(0, 0), &reads([0; PROGRAMS + 1]));
        let _ = w.scale(vec![row(0, 0, 0)], 0, &sent(0));
        w.opened(&all_at(10 * MS, 0), &reads([900, 1_100, 1_300, 1_500, 1_700]));
        w.closed(&all_at(110 * MS, 0), &reads([3_000, 3_100, 3_200, 3_300, 3_400]));
        // dev_queue saw its 2,050, dev_xmit its 1,750; the tick sent 20,500
        let (rows, _) = w.scale(vec![row(2_050, 1_750, 0)], 1_000 * MS, &sent(20_500));
        assert_eq!((rows[0].queued, rows[0].xmit_ok), (20_500, 20_500));
    }

    #[test]
    fn shares_read_as_percentages() {
        assert_eq!(percent(0.1), "10%");
        assert_eq!(percent(0.098), "9.8%");
        assert_eq!(percent(1.0), "100%");
    }
}
