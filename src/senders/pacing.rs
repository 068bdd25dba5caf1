//! Pacing: when each packet (or batch) of a reference send is due, and how the sender waits for
//! it. The schedule and the waits are written against the [`Clock`] trait, so the slot models are
//! unit-tested with a fake clock; the sender plugs in CLOCK_MONOTONIC or the TSC (`super::tsc`).

use std::time::Duration;

use nix::sys::time::TimeSpec;
use nix::time::{clock_nanosleep, ClockId, ClockNanosleepFlags};

use crate::system::monotonic_ns;

const NS_PER_S: f64 = 1e9;
/// Longest single wait: a slot further away than this makes [`Pacer::wait`] return
/// [`Wait::NotYet`], so the caller can look at its stop flag and its end time (ns).
pub const MAX_WAIT_NS: u64 = 100_000_000;

/// A source of time on the CLOCK_MONOTONIC timeline (ns).
pub trait Clock {
    /// Now, in ns.
    fn now_ns(&mut self) -> u64;
    /// Sleeps until about `deadline_ns` (absolute); may return early (signal) or late (wake-up
    /// latency): the pacer reads the clock again afterwards.
    fn sleep_until(&mut self, deadline_ns: u64);
}

/// CLOCK_MONOTONIC through the vDSO; sleeps with clock_nanosleep(TIMER_ABSTIME).
#[derive(Debug, Default, Clone, Copy)]
pub struct MonotonicClock;

impl Clock for MonotonicClock {
    fn now_ns(&mut self) -> u64 {
        monotonic_ns()
    }

    fn sleep_until(&mut self, deadline_ns: u64) {
        // An early return (EINTR) is fine: the pacer reads the clock and decides again.
        let _ = clock_nanosleep(
            ClockId::CLOCK_MONOTONIC,
            ClockNanosleepFlags::TIMER_ABSTIME,
            &TimeSpec::from(Duration::from_nanos(deadline_ns)),
        );
    }
}

/// How the sender waits for a packet's due time (`--pacer`): the one pacer type, in
/// `wrappers` so that analysis names it too.
pub use crate::wrappers::PacerKind;

impl PacerKind {
    /// The code passed to `scanprof_sender_init_slot` (the enum's discriminant).
    pub fn code(self) -> u8 {
        self as u8
    }

    pub fn from_code(code: u8) -> Option<PacerKind> {
        PacerKind::ALL.into_iter().find(|p| p.code() == code)
    }
}

/// When slot k is due (`--slot`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotModel {
    /// Each slot starts one period after the previous slot actually started: time lost to a late
    /// wake-up or a slow send is never made up, so the achieved rate falls short of the request
    /// by the mean lateness (the model many scanners use).
    PerPacket,
    /// Slot k is due at start + k periods: a late slot is followed by catch-up sends until the
    /// schedule is met again, so the average rate holds.
    Deadline,
}

impl SlotModel {
    pub fn name(self) -> &'static str {
        match self {
            SlotModel::PerPacket => "per-packet",
            SlotModel::Deadline => "deadline",
        }
    }
}

/// The due times of successive slots. A slot carries `packets_per_slot` packets (a batch), so a
/// slot lasts packets_per_slot / rate seconds.
#[derive(Debug, Clone)]
pub struct Schedule {
    model: SlotModel,
    /// ns per slot
    slot_ns: f64,
    /// CLOCK_MONOTONIC ns of slot 0 (set by the first [`Schedule::next_due`])
    start_ns: Option<u64>,
    /// slots started so far
    slots: u64,
    /// due time of the next slot under [`SlotModel::PerPacket`] (ns)
    next_due_ns: u64,
}

impl Schedule {
    /// A schedule of `rate_pps` packets per second (> 0), `packets_per_slot` (>= 1) at a time.
    pub fn new(model: SlotModel, rate_pps: u32, packets_per_slot: u32) -> Schedule {
        Schedule {
            model,
            slot_ns: f64::from(packets_per_slot.max(1)) * NS_PER_S / f64::from(rate_pps.max(1)),
            start_ns: None,
            slots: 0,
            next_due_ns: 0,
        }
    }

    /// Due time of the next slot; the first call starts the schedule at `now_ns`.
    pub fn next_due(&mut self, now_ns: u64) -> u64 {
        let start = *self.start_ns.get_or_insert(now_ns);
        match self.model {
            _ if self.slots == 0 => start,
            SlotModel::Deadline => start + (self.slots as f64 * self.slot_ns).round() as u64,
            SlotModel::PerPacket => self.next_due_ns,
        }
    }

    /// Records that the slot due at `due_ns` started at `started_ns`.
    pub fn started(&mut self, due_ns: u64, started_ns: u64) {
        debug_assert!(started_ns >= due_ns);
        self.slots += 1;
        self.next_due_ns = started_ns + self.slot_ns.round() as u64;
    }

    /// Slots started so far.
    pub fn slots(&self) -> u64 {
        self.slots
    }
}

/// The outcome of one [`Pacer::wait`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// The slot due at `due_ns` may start; the clock read `start_ns` (>= due_ns) when it did.
    Due { due_ns: u64, start_ns: u64 },
    /// The slot is more than [`MAX_WAIT_NS`] away: waited that long, call again.
    NotYet,
}

/// A schedule and the way to wait for it, on clock `C`.
pub struct Pacer<C: Clock> {
    clock: C,
    kind: PacerKind,
    schedule: Schedule,
}

impl<C: Clock> Pacer<C> {
    pub fn new(clock: C, kind: PacerKind, schedule: Schedule) -> Pacer<C> {
        Pacer {
            clock,
            kind,
            schedule,
        }
    }

    pub fn clock(&mut self) -> &mut C {
        &mut self.clock
    }

    pub fn schedule(&self) -> &Schedule {
        &self.schedule
    }

    /// Waits for the next slot (busy-wait or sleep, by the pacer kind), at most [`MAX_WAIT_NS`].
    /// The `none` pacer never waits: its slots are due when asked for.
    pub fn wait(&mut self) -> Wait {
        let now = self.clock.now_ns();
        if self.kind == PacerKind::None {
            self.schedule.started(now, now);
            return Wait::Due {
                due_ns: now,
                start_ns: now,
            };
        }
        let due = self.schedule.next_due(now);
        let target = due.min(now.saturating_add(MAX_WAIT_NS));
        let mut now = now;
        while now < target {
            if self.kind == PacerKind::Sleep {
                self.clock.sleep_until(target);
            } else {
                std::hint::spin_loop();
            }
            now = self.clock.now_ns();
        }
        if now < due {
            return Wait::NotYet;
        }
        self.schedule.started(due, now);
        Wait::Due {
            due_ns: due,
            start_ns: now,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A clock that advances `step_ns` per reading, and to the deadline plus `wake_late_ns` per
    /// sleep; `stall(ns)` makes the next reading jump (a preemption or a slow send).
    struct FakeClock {
        now: u64,
        step_ns: u64,
        wake_late_ns: u64,
        stall_ns: u64,
        readings: u64,
        sleeps: u64,
    }

    impl FakeClock {
        fn new(start: u64, step_ns: u64) -> FakeClock {
            FakeClock {
                now: start,
                step_ns,
                wake_late_ns: 0,
                stall_ns: 0,
                readings: 0,
                sleeps: 0,
            }
        }
    }

    impl Clock for FakeClock {
        fn now_ns(&mut self) -> u64 {
            self.readings += 1;
            self.now += self.step_ns + std::mem::take(&mut self.stall_ns);
            self.now
        }
        fn sleep_until(&mut self, deadline_ns: u64) {
            self.sleeps += 1;
            self.now = self.now.max(deadline_ns + self.wake_late_ns);
        }
    }

    fn due_times(pacer: &mut Pacer<FakeClock>, n: usize) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        while out.len() < n {
            if let Wait::Due { due_ns, start_ns } = pacer.wait() {
                out.push((due_ns, start_ns));
            }
        }
        out
    }

    #[test]
    fn deadline_slots_are_due_at_start_plus_k_periods() {
        let schedule = Schedule::new(SlotModel::Deadline, 1000, 1);
        let mut pacer = Pacer::new(FakeClock::new(5_000, 10), PacerKind::Clock, schedule);
        let slots = due_times(&mut pacer, 4);
        let dues: Vec<u64> = slots.iter().map(|s| s.0).collect();
        assert_eq!(dues, vec![5_010, 1_005_010, 2_005_010, 3_005_010]);
        // Busy-waiting with 10 ns readings starts each slot within one reading of its due time.
        assert!(slots.iter().all(|(due, start)| start - due < 10), "{slots:?}");
    }

    #[test]
    fn deadline_schedule_catches_up_after_a_stall() {
        let schedule = Schedule::new(SlotModel::Deadline, 1000, 1);
        let mut pacer = Pacer::new(FakeClock::new(0, 10), PacerKind::Clock, schedule);
        due_times(&mut pacer, 2);
        // A 3.5 ms stall: slots 2, 3 and 4 are late and go out back to back, then it is on time.
        pacer.clock().stall_ns = 3_500_000;
        let slots = due_times(&mut pacer, 5);
        let late: Vec<u64> = slots.iter().map(|(d, s)| s - d).collect();
        assert!(
            late[0] > 2_400_000 && late[1] > 1_400_000 && late[2] > 400_000,
            "{late:?}"
        );
        assert!(late[3] < 10 && late[4] < 10, "{late:?}");
        // Slot 6 is due exactly 6 ms after slot 0: no time lost.
        assert_eq!(slots[4].0, 10 + 6_000_000);
    }

    #[test]
    fn per_packet_slots_never_make_up_lost_time() {
        let schedule = Schedule::new(SlotModel::PerPacket, 1000, 1);
        let mut pacer = Pacer::new(FakeClock::new(0, 10), PacerKind::Clock, schedule);
        due_times(&mut pacer, 2);
        pacer.clock().stall_ns = 3_500_000;
        let slots = due_times(&mut pacer, 5);
        // Only the stalled slot is late; every later one is a full period after its predecessor
        // started, so the whole schedule has moved 3.5 ms (less one period) later for good.
        let late: Vec<u64> = slots.iter().map(|(d, s)| s - d).collect();
        assert!(late[0] > 2_400_000, "{late:?}");
        assert!(late[1..].iter().all(|l| *l < 10), "{late:?}");
        for pair in slots.windows(2) {
            assert_eq!(pair[1].0, pair[0].1 + 1_000_000);
        }
        assert!(slots[4].0 > 10 + 6_000_000 + 2_400_000, "{slots:?}");
    }

    #[test]
    fn per_packet_rate_falls_short_by_the_wake_up_latency_deadline_does_not() {
        // A sleep pacer waking 30 us late at 10k pps (100 us slots).
        let run = |model| {
            let mut clock = FakeClock::new(0, 0);
            clock.wake_late_ns = 30_000;
            let mut pacer = Pacer::new(clock, PacerKind::Sleep, Schedule::new(model, 10_000, 1));
            // Slot 0 starts on time (the schedule starts then); every later one wakes late.
            let slots = due_times(&mut pacer, 1001);
            let span = slots[1000].1 - slots[1].1;
            999.0 * 1e9 / span as f64
        };
        let per_packet = run(SlotModel::PerPacket);
        let deadline = run(SlotModel::Deadline);
        assert!((per_packet - 10_000.0 / 1.3).abs() < 1.0, "{per_packet}");
        assert!((deadline - 10_000.0).abs() < 1.0, "{deadline}");
    }

    #[test]
    fn batches_are_slots_of_several_packets() {
        let schedule = Schedule::new(SlotModel::Deadline, 1000, 32);
        let mut pacer = Pacer::new(FakeClock::new(0, 1000), PacerKind::Clock, schedule);
        let slots = due_times(&mut pacer, 3);
        assert_eq!(slots[1].0 - slots[0].0, 32_000_000);
        assert_eq!(slots[2].0 - slots[0].0, 64_000_000);
    }

    #[test]
    fn a_far_slot_returns_not_yet_after_the_longest_wait() {
        let schedule = Schedule::new(SlotModel::Deadline, 2, 1); // 500 ms slots
        let mut pacer = Pacer::new(FakeClock::new(0, 0), PacerKind::Sleep, schedule);
        assert!(matches!(pacer.wait(), Wait::Due { .. }));
        let sleeps_before = pacer.clock().sleeps;
        let mut not_yet = 0;
        while pacer.wait() == Wait::NotYet {
            not_yet += 1;
        }
        assert_eq!(not_yet, 4, "500 ms in 100 ms waits");
        assert_eq!(pacer.clock().sleeps - sleeps_before, 5);
        assert_eq!(pacer.schedule().slots(), 2);
    }

    #[test]
    fn the_none_pacer_never_waits_or_sleeps() {
        let schedule = Schedule::new(SlotModel::Deadline, 1, 1);
        let mut pacer = Pacer::new(FakeClock::new(0, 7), PacerKind::None, schedule);
        let slots = due_times(&mut pacer, 3);
        assert_eq!(slots, vec![(7, 7), (14, 14), (21, 21)]);
        assert_eq!((pacer.clock().sleeps, pacer.clock().readings), (0, 3));
    }

    #[test]
    fn pacer_codes_round_trip() {
        for p in [
            PacerKind::None,
            PacerKind::Clock,
            PacerKind::Sleep,
            PacerKind::Tsc,
        ] {
            assert_eq!(PacerKind::from_code(p.code()), Some(p));
        }
        assert_eq!(PacerKind::from_code(9), None);
    }
}
