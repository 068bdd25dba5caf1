//! The sender's pacing and send steps under stable, unmangled names, so that scanprof can profile
//! `scanprof send` with uprobes exactly like a third-party scanner: `scanprof_sender_init_slot`
//! (once per run: the rate and pacer used), `scanprof_sender_calibrate` and
//! `scanprof_sender_tsc_slot` (tsc pacer only: the TSC frequency, then the per-packet delay in
//! TSC cycles it gives, left in the global `scanprof_sender_tsc_delay` like unicornscan's
//! `tsc_delay`), `scanprof_sender_wait_slot` (per slot) and `scanprof_sender_send` (per packet or
//! batch).
//! [`super::engine::run`] really calls each of them, and none is inlined, so they stay in the
//! release binary's symbol table (`nm target/release/scanprof | grep scanprof_sender`).

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicU64, Ordering};

use super::methods::Sender;
use super::pacing::{MonotonicClock, Pacer, PacerKind, Schedule, SlotModel, Wait};
use super::tsc::{self, Calibration, TscClock, TscSource};

/// The pacer of the current run on this thread, on the clock its kind needs.
enum ActivePacer {
    Monotonic(Pacer<MonotonicClock>),
    Tsc(Pacer<TscClock>),
}

thread_local! {
    /// (slot model, packets per slot) for the next `scanprof_sender_init_slot`.
    static PLAN: Cell<(SlotModel, u32)> = const { Cell::new((SlotModel::Deadline, 1)) };
    /// The last calibration (or why it failed) on this thread.
    static CALIBRATION: RefCell<Option<Result<Calibration, String>>> = const { RefCell::new(None) };
    /// Factor the next calibration's result is taken with (fault injection; 1.0: as measured).
    static SKEW: Cell<f64> = const { Cell::new(1.0) };
    static ACTIVE: RefCell<Option<ActivePacer>> = const { RefCell::new(None) };
}

/// TSC cycles per packet that the last `scanprof_sender_tsc_slot` derived (the TSC frequency
/// the pacer uses / the rate): what a profile reads when that function returns, to compare the
/// slot with 1 / requested. 0 before the first tsc run.
#[no_mangle]
#[allow(non_upper_case_globals)]
pub static scanprof_sender_tsc_delay: AtomicU64 = AtomicU64::new(0);

/// When the slot the sender waited for was due and when it started (CLOCK_MONOTONIC ns, or the
/// TSC mapped onto it). `start_ns == 0`: the slot is still more than 100 ms away; call again.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotTimes {
    pub due_ns: u64,
    pub start_ns: u64,
}

/// Sets the slot model and the packets per slot (the batch) for the next
/// `scanprof_sender_init_slot` on this thread.
pub fn plan_slots(model: SlotModel, packets_per_slot: u32) {
    PLAN.with(|p| p.set((model, packets_per_slot.max(1))));
}

/// Fault injection (`scanprof send --calibration-skew F`): the next `scanprof_sender_calibrate`
/// on this thread takes F times the TSC frequency it measures, so the tsc pacer's slots are F
/// times too long (F > 1: a rate too low). 1.0 undoes it.
pub fn skew_calibration(factor: f64) {
    SKEW.with(|s| s.set(factor));
}

/// The result of the last `scanprof_sender_calibrate` on this thread.
pub fn last_calibration() -> Option<Result<Calibration, String>> {
    CALIBRATION.with(|c| c.borrow().clone())
}

/// Ends the current run's pacer on this thread.
pub fn end_slots() {
    ACTIVE.with(|a| a.borrow_mut().take());
}

/// Finds the TSC frequency (source 0: calibrate across a ~100 ms nanosleep, 1: the kernel's)
/// for the tsc pacer. Returns the TSC Hz that will be used, 0 on failure (see
/// [`last_calibration`] for why).
#[no_mangle]
#[inline(never)]
pub extern "C" fn scanprof_sender_calibrate(source: u8) -> u64 {
    let source = if source == TscSource::Kernel as u8 {
        TscSource::Kernel
    } else {
        TscSource::Calibrate
    };
    let skew = SKEW.with(Cell::get);
    let result = tsc::calibration(source, skew).map_err(|e| format!("{e:#}"));
    let hz = result.as_ref().map_or(0, |c| c.tsc_hz as u64);
    CALIBRATION.with(|c| *c.borrow_mut() = Some(result));
    hz
}

/// Starts a run's schedule on this thread: `pps` packets per second (>= 1), `pacer` a
/// [`PacerKind`] code (0 none, 1 clock, 2 sleep, 3 tsc; tsc needs a successful calibration
/// first). Returns 0, or -1 for an unknown pacer or a missing calibration.
#[no_mangle]
#[inline(never)]
pub extern "C" fn scanprof_sender_init_slot(pps: u32, pacer: u8) -> i32 {
    let Some(kind) = PacerKind::from_code(pacer) else {
        return -1;
    };
    let (model, per_slot) = PLAN.with(Cell::get);
    let schedule = Schedule::new(model, pps.max(1), per_slot);
    let active = if kind == PacerKind::Tsc {
        let Some(Ok(cal)) = last_calibration() else {
            return -1;
        };
        scanprof_sender_tsc_slot(pps.max(1));
        ActivePacer::Tsc(Pacer::new(TscClock::new(cal.tsc_hz), kind, schedule))
    } else {
        ActivePacer::Monotonic(Pacer::new(MonotonicClock, kind, schedule))
    };
    ACTIVE.with(|a| *a.borrow_mut() = Some(active));
    0
}

/// The tsc pacer's per-packet delay for `pps` (>= 1) in TSC cycles, from the last calibration
/// on this thread: stored in `scanprof_sender_tsc_delay` and returned (0 without a calibration).
/// `scanprof_sender_init_slot` calls it for the tsc pacer, once per run.
#[no_mangle]
#[inline(never)]
pub extern "C" fn scanprof_sender_tsc_slot(pps: u32) -> u64 {
    let Some(Ok(cal)) = last_calibration() else {
        return 0;
    };
    let delay = (cal.tsc_hz / f64::from(pps.max(1))).round() as u64;
    scanprof_sender_tsc_delay.store(delay, Ordering::Relaxed);
    delay
}

/// Waits for the next slot of this thread's schedule (at most 100 ms per call).
#[no_mangle]
#[inline(never)]
pub extern "C" fn scanprof_sender_wait_slot() -> SlotTimes {
    let wait = ACTIVE.with(|a| match a.borrow_mut().as_mut() {
        Some(ActivePacer::Monotonic(p)) => p.wait(),
        Some(ActivePacer::Tsc(p)) => p.wait(),
        // No schedule: nothing to wait for.
        None => {
            let now = crate::system::monotonic_ns();
            Wait::Due {
                due_ns: now,
                start_ns: now,
            }
        }
    });
    match wait {
        Wait::Due { due_ns, start_ns } => SlotTimes { due_ns, start_ns },
        Wait::NotYet => SlotTimes {
            due_ns: 0,
            start_ns: 0,
        },
    }
}

/// Sends `n` numbered packets (first_seq..) with `sender`: one packet for sendto, raw and
/// packet, one batch for sendmmsg and the TX ring. Returns the packets the kernel accepted.
#[no_mangle]
#[inline(never)]
pub extern "C" fn scanprof_sender_send(sender: &mut Sender, first_seq: u64, n: u32) -> u64 {
    sender.send(first_seq, n as usize)
}
