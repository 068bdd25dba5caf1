//! Counting a kernel tracepoint's hits with perf, the kernel's own count of them: what a BPF
//! program on the same tracepoint is checked against. On some kernels (the 6.18 Firecracker
//! guests of docs/testing.md) a program on `kfree_skb` is not run for a few in ten thousand
//! hits, and counts no recursion miss for them, while perf's counting mode sees every hit.

use std::os::fd::{FromRawFd, OwnedFd};

/// The first bytes of `struct perf_event_attr` (PERF_ATTR_SIZE_VER0, 64 bytes): all the
/// kernel needs for a software or tracepoint event.
#[repr(C)]
#[derive(Default)]
pub(crate) struct PerfEventAttr {
    pub(crate) kind: u32,
    pub(crate) size: u32,
    pub(crate) config: u64,
    pub(crate) sample_period: u64,
    pub(crate) sample_type: u64,
    pub(crate) read_format: u64,
    /// disabled, inherit, pinned, exclusive, exclude_user, exclude_kernel, exclude_hv, ...
    pub(crate) flags: u64,
    pub(crate) wakeup_events: u32,
    pub(crate) bp_type: u32,
    pub(crate) config1: u64,
}

pub(crate) const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 8;
const PERF_TYPE_TRACEPOINT: u32 = 2;

/// One counting perf event per online CPU on a tracepoint, counting from `open` until dropped.
pub struct TracepointHits {
    /// the tracepoint, `category:name`
    name: String,
    fds: Vec<OwnedFd>,
}

impl TracepointHits {
    /// Starts counting `category:name` on every online CPU (root, or CAP_PERFMON with
    /// perf_event_paranoid allowing system-wide events).
    pub fn open(category: &str, name: &str) -> Result<TracepointHits, String> {
        let id = tracepoint_id(category, name)?;
        let cpus = online_cpus()?;
        let attr = PerfEventAttr {
            kind: PERF_TYPE_TRACEPOINT,
            size: std::mem::size_of::<PerfEventAttr>() as u32,
            config: id,
            ..PerfEventAttr::default()
        };
        let mut fds = Vec::with_capacity(cpus.len());
        for cpu in cpus {
            // SAFETY: attr is a valid perf_event_attr of the size it claims; pid -1 with a cpu
            // counts every task on that CPU; no group. The fd is owned below.
            let fd = unsafe {
                libc::syscall(
                    libc::SYS_perf_event_open,
                    &attr as *const PerfEventAttr,
                    -1,
                    cpu,
                    -1,
                    PERF_FLAG_FD_CLOEXEC,
                )
            };
            if fd < 0 {
                let e = std::io::Error::last_os_error();
                return Err(format!("perf_event_open of {category}:{name} on CPU {cpu}: {e}"));
            }
            // SAFETY: a new fd this process owns and nothing else holds.
            fds.push(unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) });
        }
        Ok(TracepointHits {
            name: format!("{category}:{name}"),
            fds,
        })
    }

    /// Hits on all CPUs since `open`.
    pub fn read(&self) -> std::io::Result<u64> {
        let mut total = 0u64;
        for fd in &self.fds {
            let mut b = [0u8; 8];
            let n = nix::unistd::read(fd, &mut b).map_err(std::io::Error::from)?;
            if n != b.len() {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!("a read of {} gave {n} bytes, not 8", self.name),
                ));
            }
            total = total.saturating_add(u64::from_ne_bytes(b));
        }
        Ok(total)
    }
}

/// The tracepoint's id, from tracefs.
fn tracepoint_id(category: &str, name: &str) -> Result<u64, String> {
    let mut last = String::new();
    for root in super::TRACEFS_ROOTS {
        let p = format!("{root}/events/{category}/{name}/id");
        match std::fs::read_to_string(&p) {
            Ok(s) => {
                return s
                    .trim()
                    .parse()
                    .map_err(|e| format!("{p} does not hold a number: {e}"))
            }
            Err(e) => last = format!("{p}: {e}"),
        }
    }
    Err(format!(
        "no tracefs id for {category}:{name} ({last}; is tracefs mounted?)"
    ))
}

/// The online CPUs, from /sys/devices/system/cpu/online ("0-3,5").
fn online_cpus() -> Result<Vec<i32>, String> {
    let p = "/sys/devices/system/cpu/online";
    let s = std::fs::read_to_string(p).map_err(|e| format!("{p}: {e}"))?;
    parse_cpu_list(s.trim()).ok_or_else(|| format!("{p} is not a CPU list: {:?}", s.trim()))
}

fn parse_cpu_list(s: &str) -> Option<Vec<i32>> {
    let mut cpus = Vec::new();
    for part in s.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (i32, i32) = (a.parse().ok()?, b.parse().ok()?);
                if b < a {
                    return None;
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(part.parse().ok()?),
        }
    }
    (!cpus.is_empty()).then_some(cpus)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_parse_as_the_kernel_writes_them() {
        assert_eq!(parse_cpu_list("0"), Some(vec![0]));
        assert_eq!(parse_cpu_list("0-3,5"), Some(vec![0, 1, 2, 3, 5]));
        assert_eq!(parse_cpu_list("0,2-3"), Some(vec![0, 2, 3]));
        assert_eq!(parse_cpu_list(""), None);
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("x"), None);
    }
}
