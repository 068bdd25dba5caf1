//! The sender's pacing and send steps under stable, unmangled names, so that scanprof can profile
//! `scanprof send` with uprobes exactly like a third-party scanner: `scanprof_sender_init_slot`
//! (once per run: the rate and pacer used), `scanprof_sender_calibrate` (tsc pacer only),
//! `scanprof_sender_wait_slot` (per slot) and `scanprof_sender_send` (per packet or batch).
//! [`super::engine::run`] really calls each of them, and none is inlined, so they stay in the
//! release binary's symbol table (`nm target/release/scanprof | grep scanprof_sender`).

use std::cell::{Cell, RefCell};

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
    static ACTIVE: RefCell<Option<ActivePacer>> = const { RefCell::new(None) };
}

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
    let result = tsc::calibration(source).map_err(|e| format!("{e:#}"));
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
        ActivePacer::Tsc(Pacer::new(TscClock::new(cal.tsc_hz), kind, schedule))
    } else {
        ActivePacer::Monotonic(Pacer::new(MonotonicClock, kind, schedule))
    };
    ACTIVE.with(|a| *a.borrow_mut() = Some(active));
    0
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
