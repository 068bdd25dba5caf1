//! Every exec on the host (probes/exec_watch.bpf.c), for `scanprof agent`: loaded alone, apart
//! from any run's probes, it hands the agent typed `ExecRecord`s (which process now runs which
//! file) and the count of records a full ring buffer lost. The agent decides which are scanners.

use std::mem::MaybeUninit;
use std::sync::mpsc;
use std::time::Duration;

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{Link, MapHandle, OpenObject};

use super::{bpf_err, capture_libbpf_log, load_err, log_mark, read_pod, Abi, ProbeError};

#[allow(clippy::all, dead_code, unused_imports, non_camel_case_types, non_snake_case)]
mod exec_watch_skel {
    include!(concat!(env!("OUT_DIR"), "/exec_watch.skel.rs"));
}
use exec_watch_skel::types::sp_exec;
use exec_watch_skel::{ExecWatchSkel, ExecWatchSkelBuilder};

// wire.h's sp_exec: 8 + 4 + 4 bytes of scalars, a 16-byte comm and SP_EXEC_PATH (256) bytes of path.
const _: () = assert!(std::mem::size_of::<sp_exec>() == 16 + 16 + 256);
// SAFETY: the skeleton-generated sp_exec of wire.h is a `repr(C)` struct of integers and integer
// arrays only (the size assertion above adds them up), so any bytes of its size are a valid value.
unsafe impl Abi for sp_exec {}

/// One exec: the process that exec'd and the file it now runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecRecord {
    /// the kernel's monotonic clock at the exec, nanoseconds
    pub ts_ns: u64,
    /// the process (thread group) that exec'd
    pub tgid: u32,
    /// its parent's tgid
    pub ppid: u32,
    /// its comm after the exec (the file's basename, at most 15 bytes)
    pub comm: String,
    /// the file it exec'd, as given to execve (at most 255 bytes)
    pub path: String,
}

/// The exec watcher, attached: poll it for the execs since the last poll.
pub struct ExecWatch {
    skel: ExecWatchSkel<'static>,
    _link: Link,
    ring: libbpf_rs::RingBuffer<'static>,
    records: mpsc::Receiver<ExecRecord>,
}

fn text(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

impl ExecWatch {
    /// Loads the exec watcher and attaches it to `sched:sched_process_exec`.
    pub fn start() -> Result<ExecWatch, ProbeError> {
        capture_libbpf_log();
        // The skeleton borrows its OpenObject for as long as it lives: one per agent, kept for
        // the process's life (one pointer's worth, as the run's objects are kept).
        let place: &'static mut MaybeUninit<OpenObject> = Box::leak(Box::new(MaybeUninit::uninit()));
        let open = ExecWatchSkelBuilder::default()
            .open(place)
            .map_err(bpf_err("opening the exec_watch probe"))?;
        let mark = log_mark();
        let mut skel = open.load().map_err(load_err("exec_watch", mark))?;
        let link = skel
            .progs
            .sp_exec_watch
            .attach()
            .map_err(bpf_err("attaching exec_watch to sched:sched_process_exec"))?;
        let (tx, records) = mpsc::channel();
        // The ring buffer must outlive the RingBuffer that polls it: kept for the process's life
        // (one fd), as a run's event ring is.
        let map: &'static MapHandle = Box::leak(Box::new(
            MapHandle::try_from(&skel.maps.execs).map_err(bpf_err("opening map execs"))?,
        ));
        let mut builder = libbpf_rs::RingBufferBuilder::new();
        builder
            .add(map, move |bytes: &[u8]| {
                if let Some(e) = read_pod::<sp_exec>(bytes) {
                    let comm: Vec<u8> = e.comm.iter().map(|&c| c as u8).collect();
                    let path: Vec<u8> = e.path.iter().map(|&c| c as u8).collect();
                    // The receiver lives in the same ExecWatch.
                    let _ = tx.send(ExecRecord {
                        ts_ns: e.ts_ns,
                        tgid: e.tgid,
                        ppid: e.ppid,
                        comm: text(&comm),
                        path: text(&path),
                    });
                }
                0
            })
            .map_err(bpf_err("setting up the exec ring buffer"))?;
        let ring = builder
            .build()
            .map_err(bpf_err("setting up the exec ring buffer"))?;
        // Nothing is reset after load: the counter starts at 0 with the object.
        let _ = &mut skel;
        Ok(ExecWatch {
            skel,
            _link: link,
            ring,
            records,
        })
    }

    /// The execs recorded since the last call, waiting up to `timeout` for the first.
    pub fn poll(&self, timeout: Duration) -> Vec<ExecRecord> {
        // EINTR (a signal) returns early: the caller polls again.
        let _ = self.ring.poll(timeout);
        self.records.try_iter().collect()
    }

    /// Records lost to a full ring buffer since the watcher started.
    pub fn lost(&self) -> u64 {
        self.skel.maps.bss_data.as_ref().map_or(0, |b| {
            // SAFETY: `lost` is a naturally aligned u64 in the object's mmapped .bss, which lives
            // as long as the skeleton; the BPF program only adds to it atomically, so a volatile
            // read sees a whole value.
            unsafe { std::ptr::read_volatile(&b.lost) }
        })
    }
}
