//! The scanner uprobes (probes/uprobes.bpf.c): one entry and one return program for every function
//! a profile names, told apart by the attach cookie (the probe's index). User space configures a
//! probe's capture in `uprobe_cfg`, then attaches the programs to a file offset in a binary, for
//! one process or for every process that maps the file. When a pinned link takes over from an
//! ahead one, the pinned link counts every call it sees and marks it in `uprobe_handed`, and the
//! ahead link counts only the calls not marked, so exactly one of the two counts each call.

use std::path::Path;

use libbpf_rs::skel::Skel;
use libbpf_rs::{Link, MapCore, MapFlags, MapHandle, Object, UprobeOpts};

use super::{bpf_err, read_pod, uprobes_skel, ProbeError};

pub use uprobes_skel::types::{sp_call, sp_ucall_kind, sp_uprobe_cfg, sp_uprobe_stats};
use uprobes_skel::UprobesSkel;

/// Probes a profile may have (SP_UPROBE_MAX in wire.h).
pub const UPROBE_MAX: usize = 64;
/// Argument registers a record carries (SP_UPROBE_ARGS).
pub const UPROBE_ARGS: usize = 6;
/// Bytes behind a pointer a record can carry (SP_UPROBE_BUF).
pub const UPROBE_BUF: usize = 256;
/// "No length argument" in `sp_uprobe_cfg.len_arg` (SP_UPROBE_NO_ARG).
pub const NO_ARG: u8 = 0xff;
/// `sp_uprobe_cfg.flags`: stream a record per call.
pub const UP_RECORD: u32 = 1;
/// `sp_uprobe_cfg.flags`: copy bytes behind a pointer argument.
pub const UP_BUFFER: u32 = 2;
/// Attach cookie bit: the link serves every process running the file (SP_UP_COOKIE_AHEAD).
const COOKIE_AHEAD: u64 = 1 << 32;
/// Attach cookie bit: a pinned link taking over from an ahead link (SP_UP_COOKIE_HANDOVER).
const COOKIE_HANDOVER: u64 = 1 << 33;

/// Which processes a probe's links serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkFor {
    /// every process that maps the file (the programs still count only the family)
    Ahead,
    /// one process
    Pid(u32),
    /// one process, taking over from the probe's ahead link for it
    HandOver(u32),
}

const _: () = assert!(std::mem::size_of::<sp_call>() == 8 + 16 + 8 * UPROBE_ARGS + 32 + 8 + UPROBE_BUF);
// Written into uprobe_cfg by user space: the sum of its fields' sizes (u32, two u8, u16), no padding.
const _: () = assert!(std::mem::size_of::<sp_uprobe_cfg>() == 4 + 1 + 1 + 2);

/// What one probe captures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UprobeCapture {
    /// stream a record per call (else count only)
    pub record: bool,
    /// (pointer register, length register or None, at most this many bytes)
    pub buffer: Option<(u8, Option<u8>, u16)>,
}

/// The loaded uprobe programs and the links attached so far.
pub struct Uprobes {
    // Field order is drop order: links detach first. A detached link leaves None in its place,
    // so the indices `attach` hands out stay valid.
    links: Vec<Option<Link>>,
    skel: UprobesSkel<'static>,
}

impl Uprobes {
    pub(super) fn new(skel: UprobesSkel<'static>) -> Uprobes {
        Uprobes {
            links: Vec::new(),
            skel,
        }
    }

    /// Sets what probe `index` captures; call before attaching it.
    pub fn configure(&self, index: u32, capture: UprobeCapture) -> Result<(), ProbeError> {
        if index as usize >= UPROBE_MAX {
            return Err(ProbeError::Bpf {
                what: format!("probe index {index}: a profile may have at most {UPROBE_MAX} probes"),
                source: libbpf_rs::Error::from_raw_os_error(libc::E2BIG),
            });
        }
        let mut cfg = sp_uprobe_cfg {
            flags: if capture.record { UP_RECORD } else { 0 },
            ptr_arg: NO_ARG,
            len_arg: NO_ARG,
            max_bytes: 0,
        };
        if let Some((ptr, len, max)) = capture.buffer.filter(|_| capture.record) {
            cfg.flags |= UP_BUFFER;
            cfg.ptr_arg = ptr;
            cfg.len_arg = len.unwrap_or(NO_ARG);
            cfg.max_bytes = max.min(UPROBE_BUF as u16);
        }
        self.skel
            .maps
            .uprobe_cfg
            .update(&index.to_ne_bytes(), super::as_bytes(&cfg), MapFlags::ANY)
            .map_err(bpf_err(format!("configuring uprobe {index}")))
    }

    /// Attaches probe `index` at `offset` (a file offset) in `binary`: its entry, and its return
    /// when `ret`, for the processes `to` names. Returns the links' keys, for `detach`.
    ///
    /// A hand-over's links count the process's calls from the moment they are attached, and
    /// the probe's ahead link, whose program the kernel runs after theirs at the same breakpoint
    /// (newest first), leaves those calls to them: no decision changes between the two programs
    /// of one hit, so detaching the ahead link afterwards neither loses nor doubles a call.
    pub fn attach(
        &mut self,
        index: u32,
        binary: &Path,
        offset: u64,
        to: LinkFor,
        ret: bool,
    ) -> Result<Vec<usize>, ProbeError> {
        let (cookie, pid) = match to {
            LinkFor::Ahead => (u64::from(index) | COOKIE_AHEAD, -1),
            LinkFor::Pid(pid) => (u64::from(index), pid as i32),
            LinkFor::HandOver(pid) => (u64::from(index) | COOKIE_HANDOVER, pid as i32),
        };
        let mut new = Vec::new();
        let progs = &self.skel.progs;
        for (prog, retprobe) in [(&progs.sp_uprobe_entry, false), (&progs.sp_uprobe_return, true)] {
            if retprobe && !ret {
                continue;
            }
            let opts = UprobeOpts {
                cookie,
                retprobe,
                ..Default::default()
            };
            let link = prog
                .attach_uprobe_with_opts(pid, binary, offset as usize, opts)
                .map_err(bpf_err(format!(
                    "attaching a uprobe at {}+{offset:#x}",
                    binary.display()
                )))?;
            new.push(link);
        }
        let first = self.links.len();
        self.links.extend(new.into_iter().map(Some));
        Ok((first..self.links.len()).collect())
    }

    /// Detaches the links `attach` returned.
    pub fn detach(&mut self, keys: &[usize]) {
        for k in keys {
            if let Some(slot) = self.links.get_mut(*k) {
                *slot = None;
            }
        }
    }

    /// Whether a call of probe `index` by one of the threads `tids` entered before `before_ns`
    /// (CLOCK_MONOTONIC) and has not returned yet: its entry time is still in `uprobe_entry`.
    pub fn call_in_progress(&self, index: u32, tids: &[u32], before_ns: u64) -> bool {
        let map = &self.skel.maps.uprobe_entry;
        map.keys().any(|key| {
            let Ok(k) = <[u8; 8]>::try_from(key.as_slice()).map(u64::from_ne_bytes) else {
                return false;
            };
            if k & 0xffff_ffff != u64::from(index) || !tids.contains(&((k >> 32) as u32)) {
                return false;
            }
            map.lookup(&key, MapFlags::ANY)
                .ok()
                .flatten()
                .and_then(|v| <[u8; 8]>::try_from(v.as_slice()).ok())
                .is_some_and(|v| u64::from_ne_bytes(v) < before_ns)
        })
    }

    /// Calls and time inside, per probe index, summed over CPUs.
    pub fn stats(&self) -> Vec<(u32, sp_uprobe_stats)> {
        (0..UPROBE_MAX as u32)
            .filter_map(|i| {
                let per_cpu = self
                    .skel
                    .maps
                    .uprobe_stats
                    .lookup_percpu(&i.to_ne_bytes(), MapFlags::ANY)
                    .ok()??;
                let mut sum = sp_uprobe_stats::default();
                for b in &per_cpu {
                    if let Some(s) = read_pod::<sp_uprobe_stats>(b) {
                        sum.hits += s.hits;
                        sum.returns += s.returns;
                        sum.inside_ns += s.inside_ns;
                    }
                }
                (sum.hits > 0 || sum.returns > 0).then_some((i, sum))
            })
            .collect()
    }

    /// Links attached so far (an entry and a return count as two).
    pub fn links(&self) -> usize {
        self.links.iter().flatten().count()
    }

    pub(super) fn object(&self) -> &Object {
        self.skel.object()
    }

    /// An owned handle to the `calls` ring buffer, for the ring buffer reader.
    pub(super) fn calls_map(&self) -> Result<MapHandle, ProbeError> {
        MapHandle::try_from(&self.skel.maps.calls).map_err(bpf_err("opening map calls"))
    }
}
