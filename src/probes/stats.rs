//! The kernel's run-time statistics of scanprof's own BPF programs (`BPF_ENABLE_STATS`): how
//! long each program ran and how often, whatever task or softirq it ran in. Statistics on cost
//! every BPF program on the machine a little per run (two clock reads), so they are on only while
//! scanprof holds the fd the kernel returned (`turn_on` .. `turn_off`, or until the ProbeSet is
//! dropped or the process dies: the kernel restores them when the fd closes).
//!
//! The kernel counts every run of a program, for whatever task or packet. Beside its figures,
//! each program times its own runs on the family's threads (`prog_cost`, shared.h) while
//! scanprof holds timing on (`cost_timing`), which it does exactly while it reads statistics:
//! what the target pays, apart from the tax on the rest of the machine.

use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};

use libbpf_rs::{libbpf_sys, MapCore, MapFlags, MapHandle, Object};

use super::clock_floor::ClockFloor;
use super::family_skel::types::{sp_prog, sp_prog_cost};
use super::ProbeError;

/// Each program's slot in the `prog_cost` counters (enum sp_prog in wire.h), by its name
/// ("object.program"). Every program that can run on a family thread has one (a unit test holds
/// this list to the programs the objects declare).
const COST_SLOTS: [(&str, sp_prog); 30] = [
    ("family.on_fork", sp_prog::SP_PROG_FORK),
    ("family.on_exec", sp_prog::SP_PROG_EXEC),
    ("family.on_exit", sp_prog::SP_PROG_EXIT),
    ("send_path.on_sys_enter", sp_prog::SP_PROG_SYS_ENTER),
    ("send_path.on_sys_exit", sp_prog::SP_PROG_SYS_EXIT),
    ("send_path.on_raw_enter", sp_prog::SP_PROG_RAW_ENTER),
    ("send_path.on_raw_exit", sp_prog::SP_PROG_RAW_EXIT),
    ("send_path.on_getsockopt", sp_prog::SP_PROG_GETSOCKOPT),
    ("sched.on_switch", sp_prog::SP_PROG_SWITCH),
    ("sched.on_switch_nostate", sp_prog::SP_PROG_SWITCH_NOSTATE),
    ("sched.on_wakeup", sp_prog::SP_PROG_WAKEUP),
    ("sched.on_wakeup_new", sp_prog::SP_PROG_WAKEUP_NEW),
    ("netdev.on_dev_queue", sp_prog::SP_PROG_DEV_QUEUE),
    ("netdev.on_qdisc_enqueue", sp_prog::SP_PROG_QDISC_ENQUEUE),
    ("netdev.on_qdisc_dequeue", sp_prog::SP_PROG_QDISC_DEQUEUE),
    ("netdev.on_dev_start_xmit", sp_prog::SP_PROG_DEV_START_XMIT),
    ("netdev.on_dev_xmit", sp_prog::SP_PROG_DEV_XMIT),
    ("netdev.on_neigh_send", sp_prog::SP_PROG_NEIGH_SEND),
    ("netdev.on_neigh_timer", sp_prog::SP_PROG_NEIGH_TIMER),
    ("netdev.on_neigh_update", sp_prog::SP_PROG_NEIGH_UPDATE),
    ("drops.on_kfree_skb", sp_prog::SP_PROG_KFREE_SKB),
    ("drops.on_kfree_skb_norx", sp_prog::SP_PROG_KFREE_SKB_NORX),
    ("drops.on_kfree_skb_noreason", sp_prog::SP_PROG_KFREE_SKB_NOREASON),
    ("drops.on_udp_fail", sp_prog::SP_PROG_UDP_FAIL),
    ("uprobes.sp_uprobe_entry", sp_prog::SP_PROG_UPROBE_ENTRY),
    ("uprobes.sp_uprobe_return", sp_prog::SP_PROG_UPROBE_RETURN),
    ("replies.on_netif_receive", sp_prog::SP_PROG_REPLY),
    ("rings.on_close", sp_prog::SP_PROG_CLOSE),
    ("rings.on_exit_socks", sp_prog::SP_PROG_EXIT_SOCKS),
    ("retrans.on_tcp_retransmit", sp_prog::SP_PROG_SYN_RETRANS),
];

/// Programs that have no slot: the packet-socket iterator runs in scanprof's own reads, the
/// exec watcher is `scanprof agent`'s, never loaded with a run's probes, and the timing floor
/// runs only in scanprof's own test runs.
#[cfg(test)]
const UNTIMED: [&str; 3] = [
    "rings.sp_rings",
    "exec_watch.sp_exec_watch",
    "clock_floor.sp_clock_floor",
];

/// The `prog_cost` slot of program `name`, if it has one.
fn cost_slot(name: &str) -> Option<u32> {
    COST_SLOTS.iter().find(|(n, _)| *n == name).map(|(_, p)| p.0)
}

/// Where the kernel's machine-wide switch for BPF run-time statistics is.
const SYSCTL: &str = "/proc/sys/kernel/bpf_stats_enabled";

/// One program's counters as the kernel keeps them: cumulative over the time statistics were on
/// since the program was loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProgramRuntime {
    /// object.program, e.g. "send_path.on_dev_queue" (as `ProbeStatus::name`)
    pub name: String,
    /// runs counted while statistics were on
    pub run_cnt: u64,
    /// time spent running, ns, while statistics were on
    pub run_time_ns: u64,
    /// of those, runs on a family thread (timed while scanprof held statistics on)
    pub target_runs: u64,
    /// their time, ns
    pub target_ns: u64,
}

/// The family's own share of the programs' runs: the per-CPU `prog_cost` counters and the
/// switch that turns their timing on.
struct TargetTiming {
    prog_cost: MapHandle,
    cost_timing: MapHandle,
}

/// The loaded programs' fds, and the statistics fd while scanprof keeps statistics on.
pub struct BpfStats {
    programs: Vec<(String, OwnedFd)>,
    /// BPF_ENABLE_STATS's fd: statistics stay on while it is open
    enabled: Option<OwnedFd>,
    timing: TargetTiming,
    /// The timing's own floor, loaded beside the objects; None when it did not load (then
    /// `timing_floor_ns` measures nothing and the timed figures keep it in).
    clock_floor: Option<ClockFloor>,
}

impl BpfStats {
    /// Keeps a duplicate fd of every loaded program of `objects` (named like `ProbeStatus`),
    /// and handles on the family's timing maps (`prog_cost`, `cost_timing` of `family`, which
    /// every object shares). A program whose fd cannot be duplicated is left out.
    pub(super) fn of_objects<'a>(
        objects: impl IntoIterator<Item = &'a Object>,
        prog_cost: MapHandle,
        cost_timing: MapHandle,
    ) -> BpfStats {
        let mut programs = Vec::new();
        for obj in objects {
            let obj_name = obj
                .name()
                .map(|n| n.to_string_lossy().trim_end_matches("_bpf").to_string())
                .unwrap_or_else(|| "?".into());
            for prog in obj.progs().filter(|p| p.autoload()) {
                if let Ok(fd) = prog.as_fd().try_clone_to_owned() {
                    programs.push((format!("{obj_name}.{}", prog.name().to_string_lossy()), fd));
                }
            }
        }
        BpfStats {
            programs,
            enabled: None,
            timing: TargetTiming {
                prog_cost,
                cost_timing,
            },
            clock_floor: ClockFloor::load().ok(),
        }
    }

    /// What each timed run counts around its body now, ns (`ClockFloor::measure`); None when
    /// it cannot be measured here.
    pub fn timing_floor_ns(&self) -> Option<u64> {
        self.clock_floor.as_ref()?.measure()
    }

    /// The timing floor's object, when it loaded (its map is one scanprof created).
    pub(super) fn clock_floor_object(&self) -> Option<&Object> {
        self.clock_floor.as_ref().map(ClockFloor::object)
    }

    /// Turns the timing of the family's runs on or off (every program reads the switch at each
    /// run). On exactly while statistics are read: its cost is paid inside the windows only.
    pub fn time_target(&mut self, on: bool) {
        let v: u32 = on.into();
        // A write to an array's only key does not fail once the map exists; if it ever did, the
        // window would count no target runs (or keep timing), shown as they are.
        let _ = self
            .timing
            .cost_timing
            .update(&0u32.to_ne_bytes(), &v.to_ne_bytes(), MapFlags::ANY);
    }

    /// Each slot's target runs and time, summed over CPUs.
    fn target_counters(&self) -> Vec<(u64, u64)> {
        let mut out = vec![(0, 0); sp_prog::SP_PROG_MAX.0 as usize];
        let t = &self.timing;
        for (i, slot) in out.iter_mut().enumerate() {
            if let Ok(Some(per_cpu)) = t
                .prog_cost
                .lookup_percpu(&(i as u32).to_ne_bytes(), MapFlags::ANY)
            {
                for b in per_cpu {
                    let word = |at: usize| {
                        b.get(at..at + 8)
                            .and_then(|w| w.try_into().ok())
                            .map_or(0, u64::from_ne_bytes)
                    };
                    slot.0 += word(0);
                    slot.1 += word(8);
                }
            }
        }
        out
    }

    /// Whether statistics are on machine-wide by the sysctl (`kernel.bpf_stats_enabled = 1`),
    /// which scanprof never changes.
    pub fn machine_wide() -> bool {
        std::fs::read_to_string(SYSCTL).is_ok_and(|v| v.trim() == "1")
    }

    /// Whether scanprof holds statistics on now.
    pub fn held(&self) -> bool {
        self.enabled.is_some()
    }

    /// Turns statistics on (again a no-op while held). Needs CAP_SYS_ADMIN.
    pub fn turn_on(&mut self) -> Result<(), ProbeError> {
        if self.enabled.is_some() {
            return Ok(());
        }
        // SAFETY: a plain syscall wrapper with an integer argument.
        let fd = unsafe { libbpf_sys::bpf_enable_stats(libbpf_sys::BPF_STATS_RUN_TIME) };
        if fd < 0 {
            let errno = -fd;
            return Err(ProbeError::Bpf {
                what: "turning on BPF run-time statistics (BPF_ENABLE_STATS, needs CAP_SYS_ADMIN)".into(),
                source: libbpf_rs::Error::from_raw_os_error(errno),
            });
        }
        // SAFETY: the kernel just returned this fd to us; nothing else owns it.
        self.enabled = Some(unsafe { OwnedFd::from_raw_fd(fd) });
        Ok(())
    }

    /// Lets go of statistics: off again unless someone else holds them on too.
    pub fn turn_off(&mut self) {
        self.enabled = None;
    }

    /// Every program's counters now. A program the kernel will not describe is left out.
    pub fn read(&self) -> Vec<ProgramRuntime> {
        let target = self.target_counters();
        self.programs
            .iter()
            .filter_map(|(name, fd)| {
                let (info, _) = prog_info(fd)?;
                let (target_runs, target_ns) = cost_slot(name)
                    .and_then(|i| target.get(i as usize).copied())
                    .unwrap_or((0, 0));
                Some(ProgramRuntime {
                    name: name.clone(),
                    run_cnt: info.run_cnt,
                    run_time_ns: info.run_time_ns,
                    target_runs,
                    target_ns,
                })
            })
            .collect()
    }

    /// Each program's runs the kernel skipped since it was loaded, by name: its
    /// `recursion_misses`, counted whether statistics are on or not. The kernel skips a run when
    /// the hook fires while a BPF program is already running on that CPU (the same program, for
    /// a tp_btf one; any program, for a classic tracepoint's), and what that run would have
    /// counted is not counted. None when the kernel does not count them (before 5.12 its
    /// bpf_prog_info ends before the field). A program the kernel will not describe is left out.
    pub fn skipped_runs(&self) -> Option<Vec<(String, u64)>> {
        let field_end = std::mem::offset_of!(libbpf_sys::bpf_prog_info, recursion_misses) + 8;
        let mut out = Vec::with_capacity(self.programs.len());
        for (name, fd) in &self.programs {
            let Some((info, len)) = prog_info(fd) else {
                continue;
            };
            if len < field_end {
                return None;
            }
            out.push((name.clone(), info.recursion_misses));
        }
        Some(out)
    }
}

/// The kernel's description of program `fd`, and how many bytes of it the kernel filled (an
/// older kernel fills fewer: the fields past them are its zeroes, not counts). None when the
/// kernel will not describe it.
fn prog_info(fd: &OwnedFd) -> Option<(libbpf_sys::bpf_prog_info, usize)> {
    let mut info = libbpf_sys::bpf_prog_info::default();
    let mut len = std::mem::size_of::<libbpf_sys::bpf_prog_info>() as u32;
    // SAFETY: `info` is a zeroed bpf_prog_info of `len` bytes with every pointer field null (no
    // arrays requested); the kernel writes at most `len` bytes into it and sets `len` to what it
    // wrote.
    let rc = unsafe { libbpf_sys::bpf_prog_get_info_by_fd(fd.as_raw_fd(), &mut info, &mut len) };
    (rc == 0).then_some((info, len as usize))
}

// The ABI of the counters read above: two u64.
const _: () = assert!(std::mem::size_of::<sp_prog_cost>() == 16);

#[cfg(test)]
mod tests {
    use super::*;

    /// Every program of every object has a timing slot or is listed as never running on a
    /// family thread; no slot is used twice; no slot names a program that does not exist.
    #[test]
    fn every_program_that_can_run_on_a_family_thread_has_a_cost_slot() {
        let mut declared = Vec::new();
        for (obj_name, bytes) in super::super::objects() {
            let obj = libbpf_rs::ObjectBuilder::default()
                .open_memory(bytes)
                .expect("the embedded object opens without privileges");
            for prog in obj.progs() {
                declared.push(format!("{obj_name}.{}", prog.name().to_string_lossy()));
            }
        }
        for name in &declared {
            assert!(
                cost_slot(name).is_some() || UNTIMED.contains(&name.as_str()),
                "{name} has no prog_cost slot (enum sp_prog) and is not listed as untimed"
            );
        }
        for (name, _) in COST_SLOTS {
            assert!(declared.iter().any(|d| d == name), "{name} is not a program");
        }
        let mut slots: Vec<u32> = COST_SLOTS.iter().map(|(_, p)| p.0).collect();
        slots.sort_unstable();
        slots.dedup();
        assert_eq!(slots.len(), COST_SLOTS.len(), "a slot is used twice");
        assert!(slots.iter().all(|s| *s < sp_prog::SP_PROG_MAX.0));
    }
}
