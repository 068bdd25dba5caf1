//! The kernel's run-time statistics of scanprof's own BPF programs (`BPF_ENABLE_STATS`): how
//! long each program ran and how often, whatever task or softirq it ran in. Statistics on cost
//! every BPF program on the machine a little per run (two clock reads), so they are on only while
//! scanprof holds the fd the kernel returned (`turn_on` .. `turn_off`, or until the ProbeSet is
//! dropped or the process dies: the kernel restores them when the fd closes).

use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};

use libbpf_rs::{libbpf_sys, Object};

use super::ProbeError;

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
}

/// The loaded programs' fds, and the statistics fd while scanprof keeps statistics on.
pub struct BpfStats {
    programs: Vec<(String, OwnedFd)>,
    /// BPF_ENABLE_STATS's fd: statistics stay on while it is open
    enabled: Option<OwnedFd>,
}

impl BpfStats {
    /// Keeps a duplicate fd of every loaded program of `objects` (named like `ProbeStatus`).
    /// A program whose fd cannot be duplicated is left out.
    pub(super) fn of_objects<'a>(objects: impl IntoIterator<Item = &'a Object>) -> BpfStats {
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
        }
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
        self.programs
            .iter()
            .filter_map(|(name, fd)| {
                let mut info = libbpf_sys::bpf_prog_info::default();
                let mut len = std::mem::size_of::<libbpf_sys::bpf_prog_info>() as u32;
                // SAFETY: `info` is a zeroed bpf_prog_info of `len` bytes with every pointer field
                // null (no arrays requested); the kernel writes at most `len` bytes into it.
                let rc = unsafe { libbpf_sys::bpf_prog_get_info_by_fd(fd.as_raw_fd(), &mut info, &mut len) };
                (rc == 0).then(|| ProgramRuntime {
                    name: name.clone(),
                    run_cnt: info.run_cnt,
                    run_time_ns: info.run_time_ns,
                })
            })
            .collect()
    }
}
