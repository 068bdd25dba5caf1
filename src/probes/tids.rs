//! The family's thread ids as the BPF programs see them: one byte per tid in the shared,
//! mmapped `family_tids` array (probes/include/shared.h). Every hot program tests its byte before
//! anything else, so user space sets the byte of each thread it starts tracking, with a store in
//! place: the fork and exit programs store other threads' bytes at the same time, never a word
//! that another writer's byte shares.

use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicU8, Ordering};

use super::{bpf_err, ProbeError};

/// Most entries of the array (PID_MAX_LIMIT / 64): SP_TID_WORDS in shared.h.
pub const TID_WORDS: u32 = 1 << 16;

/// Bytes of an entry (struct sp_tid_flags): one per tid.
const TIDS_PER_WORD: u32 = 64;

/// The array's entries for a kernel whose thread ids stay below `pid_max`: whole pages of them
/// (the mapping's unit), at most TID_WORDS.
pub fn words_for(pid_max: u32) -> u32 {
    const PER_PAGE: u32 = 4096 / TIDS_PER_WORD;
    pid_max
        .div_ceil(TIDS_PER_WORD)
        .div_ceil(PER_PAGE)
        .saturating_mul(PER_PAGE)
        .clamp(PER_PAGE, TID_WORDS)
}

/// The kernel's pid_max (thread ids are below it), PID_MAX_LIMIT if it cannot be read.
pub fn pid_max() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(TID_WORDS * TIDS_PER_WORD)
}

/// The mmapped array; unmapped on drop.
pub struct TidBits {
    flags: *mut AtomicU8,
    /// bytes mapped: one per thread id below it
    len: usize,
}

// SAFETY: the mapping is shared memory touched only through atomics, and lives until drop.
unsafe impl Send for TidBits {}

impl TidBits {
    /// Maps the `family_tids` array of a loaded object, of `words` entries.
    pub fn map(map: &impl AsFd, words: u32) -> Result<TidBits, ProbeError> {
        let len = words as usize * TIDS_PER_WORD as usize;
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
        Ok(TidBits {
            flags: ptr.cast(),
            len,
        })
    }

    /// Thread `tid`'s byte: entry tid / 64, byte tid % 64 (the entries are contiguous, 64
    /// bytes each), as tid_flag in shared.h finds it; None past the array (above pid_max).
    fn flag(&self, tid: u32) -> Option<&AtomicU8> {
        let idx = tid as usize;
        // SAFETY: idx < len, inside the mapping; AtomicU8 has u8's layout.
        (idx < self.len).then(|| unsafe { &*self.flags.add(idx) })
    }

    /// Makes the hot programs look at this thread (one above the pid_max the array was sized
    /// for cannot exist).
    pub fn set(&self, tid: u32) {
        if let Some(f) = self.flag(tid) {
            f.store(1, Ordering::SeqCst);
        }
    }
}

impl Drop for TidBits {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, of that length, unmapped once.
        unsafe {
            libc::munmap(self.flags.cast(), self.len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The array holds a byte for every thread id below pid_max, in whole pages, and no more
    /// than PID_MAX_LIMIT's.
    #[test]
    fn the_array_covers_every_thread_id_below_pid_max_in_whole_pages() {
        assert_eq!(words_for(32_768), 512); // 32 KiB: the kernel's default pid_max
        assert_eq!(words_for(32_769), 576); // one id more: a page more
        assert_eq!(words_for(301), 64); // the smallest pid_max: one page
        assert_eq!(words_for(4_194_304), TID_WORDS); // PID_MAX_LIMIT: 4 MiB
        assert_eq!(words_for(u32::MAX), TID_WORDS);
        for pid_max in [301, 4_096, 32_768, 99_999, 4_194_304] {
            assert!(words_for(pid_max) as u64 * 64 >= pid_max as u64);
            assert_eq!(words_for(pid_max) * 64 % 4096, 0);
        }
    }
}
