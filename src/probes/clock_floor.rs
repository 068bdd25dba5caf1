//! The timing's own floor (probes/clock_floor.bpf.c): what the programs' timing of their runs on
//! the family's threads counts when the body between the two clock reads is empty. Each timed
//! run includes it, so the collector takes it off each window's timed runs (`BpfMeter`), and the
//! figure the target pays is the bodies' time, not the bodies' and the measurement's.
//!
//! Loaded alone, with no map shared with a run's objects; its program is never attached, only
//! run from here (BPF_PROG_TEST_RUN, which the kernel offers raw tracepoint programs from 5.10).

use libbpf_rs::{Object, ObjectBuilder};

use super::{bpf_err, capture_libbpf_log, load_err, log_mark, ProbeError, OBJECTS};

/// The object's name in the table, and its one program.
const OBJECT: &str = "clock_floor";
const PROGRAM: &str = "sp_clock_floor";

/// Runs per measurement: their median is the floor (a run the CPU was interrupted in is long,
/// and the median leaves it out).
pub const RUNS: usize = 31;

/// The loaded timing-floor program.
pub struct ClockFloor {
    object: Object,
}

impl ClockFloor {
    /// Loads the object (never attached).
    pub fn load() -> Result<ClockFloor, ProbeError> {
        capture_libbpf_log();
        let bytes = OBJECTS
            .iter()
            .find(|o| o.name == OBJECT)
            .map(|o| o.bytes)
            .expect("clock_floor is a row of the objects' table");
        let open = ObjectBuilder::default()
            .open_memory(bytes)
            .map_err(bpf_err("opening the clock_floor probe"))?;
        let mark = log_mark();
        let object = open.load().map_err(load_err(OBJECT, mark))?;
        Ok(ClockFloor { object })
    }

    /// The loaded object (for the memory its map locks).
    pub fn object(&self) -> &Object {
        &self.object
    }

    /// The floor now, ns: the median of `RUNS` runs on this CPU. None when the kernel refuses to
    /// run the program (a kernel before 5.10 cannot test-run a raw tracepoint program).
    pub fn measure(&self) -> Option<u64> {
        let prog = self
            .object
            .progs_mut()
            .find(|p| p.name() == std::ffi::OsStr::new(PROGRAM))?;
        let mut runs = Vec::with_capacity(RUNS);
        for _ in 0..RUNS {
            let out = prog.test_run(libbpf_rs::ProgramInput::default()).ok()?;
            runs.push(u64::from(out.return_value));
        }
        median(&mut runs)
    }
}

/// The median of `values` (the lower middle one of an even count); None when empty.
fn median(values: &mut [u64]) -> Option<u64> {
    values.sort_unstable();
    values.get(values.len().saturating_sub(1) / 2).copied()
}

#[cfg(test)]
mod tests {
    use super::*;
    use libbpf_rs::MapCore;

    #[test]
    fn the_median_leaves_out_a_run_that_was_interrupted() {
        assert_eq!(median(&mut [31, 30, 2_400, 33, 32]), Some(32));
        assert_eq!(median(&mut [40, 30]), Some(30));
        assert_eq!(median(&mut []), None);
    }

    /// The floor is measured on this kernel (the matrix runs this in each guest: 5.10 test-runs
    /// a raw tracepoint program too): a few ns to a few us a run, and the program counted every
    /// run in its slot.
    #[test]
    fn the_timing_floor_is_measured_here() {
        if !super::super::tests::privileged() {
            return;
        }
        let floor = ClockFloor::load().unwrap_or_else(|e| panic!("{e}"));
        let ns = floor
            .measure()
            .unwrap_or_else(|| panic!("the kernel did not run {PROGRAM}"));
        eprintln!("timing floor: {ns} ns a run (median of {RUNS})");
        assert!((1..20_000).contains(&ns), "{ns} ns");
        let slot = floor
            .object
            .maps()
            .find(|m| m.name() == std::ffi::OsStr::new("floor_slot"))
            .expect("the slot map");
        let runs: u64 = slot
            .lookup_percpu(&0u32.to_ne_bytes(), libbpf_rs::MapFlags::ANY)
            .expect("a lookup")
            .expect("the slot")
            .iter()
            .map(|b| u64::from_ne_bytes(b[..8].try_into().expect("8 bytes")))
            .sum();
        assert_eq!(runs, RUNS as u64);
    }

    /// The object opens without privileges and has the one program this module runs, on no
    /// tracepoint (libbpf attaches nothing for a bare `raw_tp` section).
    #[test]
    fn the_object_has_its_program_on_no_tracepoint() {
        let bytes = OBJECTS.iter().find(|o| o.name == OBJECT).expect("a row").bytes;
        let obj = ObjectBuilder::default().open_memory(bytes).expect("opens");
        let progs: Vec<(String, String)> = obj
            .progs()
            .map(|p| {
                (
                    p.name().to_string_lossy().into_owned(),
                    p.section().to_string_lossy().into_owned(),
                )
            })
            .collect();
        assert_eq!(progs, vec![(PROGRAM.to_string(), "raw_tp".to_string())]);
    }
}
