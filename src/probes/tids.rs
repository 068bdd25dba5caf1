//! The family's thread ids as the BPF programs see them: one bit per tid in the shared,
//! mmapped `family_tids` array (probes/include/shared.h). Every hot program tests its bit before
//! anything else, so user space sets the bit of each thread it starts tracking, with an atomic
//! OR in place: the fork program sets bits in the same words at the same time.

use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicU64, Ordering};

use super::{bpf_err, ProbeError};

/// Words of the bitmap (PID_MAX_LIMIT / 64): SP_TID_WORDS in shared.h.
pub const TID_WORDS: usize = 1 << 16;

/// The mmapped bitmap; unmapped on drop.
pub struct TidBits {
    words: *mut AtomicU64,
}

// SAFETY: the mapping is shared memory touched only through atomics, and lives until drop.
unsafe impl Send for TidBits {}

impl TidBits {
    /// Maps the `family_tids` array of a loaded object.
    pub fn map(map: &impl AsFd) -> Result<TidBits, ProbeError> {
        let len = TID_WORDS * size_of::<u64>();
        // SAFETY: a shared read/write mapping of a BPF_F_MMAPABLE array map of exactly `len`
        // bytes; the fd stays valid for the call, and the mapping outlives it on its own.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                map.as_fd().as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            let errno = std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EINVAL);
            return Err(bpf_err("mapping the family_tids bitmap")(
                libbpf_rs::Error::from_raw_os_error(errno),
            ));
        }
        Ok(TidBits { words: ptr.cast() })
    }

    fn word(&self, tid: u32) -> &AtomicU64 {
        let idx = (tid as usize >> 6) & (TID_WORDS - 1);
        // SAFETY: idx < TID_WORDS, inside the mapping; AtomicU64 has u64's layout.
        unsafe { &*self.words.add(idx) }
    }

    /// Makes the hot programs look at this thread.
    pub fn set(&self, tid: u32) {
        self.word(tid).fetch_or(1 << (tid & 63), Ordering::SeqCst);
    }
}

impl Drop for TidBits {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, of that length, unmapped once.
        unsafe {
            libc::munmap(self.words.cast(), TID_WORDS * size_of::<u64>());
        }
    }
}
