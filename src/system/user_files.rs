//! Files at paths a user names (or that sit where others can write, such as /tmp): created
//! without following a planted symbolic link and with a stated mode, and read only when they
//! are regular files of bounded size. scanprof often runs as root, so every writer of a named
//! file (reports, metrics, logs) and every reader of one (profiles, bundles, listener reports)
//! goes through here.

use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use anyhow::Context;
use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;

/// Creates `path` as a new file, `mode` before the umask: O_CREAT|O_EXCL|O_NOFOLLOW, so a file
/// or symbolic link already there is an error, never reused or followed.
pub fn create_new(path: &Path, mode: u32) -> std::io::Result<fs::File> {
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// The temporary name [`replace`] writes under: hidden, beside `path` (same file system, so
/// the rename is atomic), and this process's own.
fn partial_beside(path: &Path) -> std::io::Result<PathBuf> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "no file name"))?;
    let mut partial = std::ffi::OsString::from(".");
    partial.push(name);
    partial.push(format!(".{}.partial", std::process::id()));
    Ok(dir.join(partial))
}

/// Replaces `path` with `bytes`, whole or not at all: written to a new file beside it (see
/// [`create_new`]; `mode` before the umask), synced, then renamed over `path`. The rename
/// replaces whatever entry `path` was, a symbolic link included, without following it; in a
/// sticky directory such as /tmp another user's entry cannot be replaced (an error, not a
/// write through it). On failure nothing is left beside `path`.
pub fn replace(path: &Path, mode: u32, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = partial_beside(path)?;
    // A stale one of an earlier run of this pid, or a planted link: unlinked, never followed.
    let _ = fs::remove_file(&tmp);
    let mut f = create_new(&tmp, mode)?;
    let written = f.write_all(bytes).and_then(|()| f.sync_all());
    drop(f);
    if let Err(e) = written.and_then(|()| fs::rename(&tmp, path)) {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    Ok(())
}

/// Whether [`open_regular`] follows a symbolic link at the path's last component.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Links {
    /// a file the user named: a link to a regular file is as good as the file
    Follow,
    /// a file found inside a directory (a bundle's, /tmp): a link there is refused, so that
    /// reading cannot be sent outside it
    Refuse,
}

/// Opens `file` for reading: a regular file only. O_NONBLOCK makes the open of a FIFO return at
/// once instead of hanging; fstat then refuses a FIFO, a device (/dev/zero never ends), a
/// socket or a directory, and a file over `cap` bytes. Reads through the result stop at `cap`
/// even if the file grows.
pub fn open_regular(file: &Path, cap: u64, links: Links) -> anyhow::Result<std::io::Take<fs::File>> {
    let mut flags = OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC | OFlag::O_NOCTTY;
    if links == Links::Refuse {
        flags |= OFlag::O_NOFOLLOW;
    }
    let fd = nix::fcntl::open(file, flags, Mode::empty()).map_err(|e| match e {
        Errno::ELOOP if links == Links::Refuse => anyhow::anyhow!(
            "{} is a symbolic link: only a regular file is read there (copy the file it points \
             to there instead)",
            file.display()
        ),
        e => anyhow::anyhow!("opening {}: {}", file.display(), std::io::Error::from(e)),
    })?;
    let st = nix::sys::stat::fstat(&fd).with_context(|| format!("examining {}", file.display()))?;
    let kind = match st.st_mode & libc::S_IFMT {
        libc::S_IFREG => None,
        libc::S_IFIFO => Some("a FIFO"),
        libc::S_IFCHR => Some("a character device"),
        libc::S_IFBLK => Some("a block device"),
        libc::S_IFSOCK => Some("a socket"),
        libc::S_IFDIR => Some("a directory"),
        _ => Some("not a regular file"),
    };
    if let Some(kind) = kind {
        anyhow::bail!(
            "{} is {kind}: scanprof reads only regular files (save what it gives to a file first)",
            file.display()
        );
    }
    if st.st_size as u64 > cap {
        anyhow::bail!(
            "{} is {}, over the {} scanprof reads from such a file: is it the right file? (cut \
             it down, e.g. with `head`, if it is)",
            file.display(),
            size_text(st.st_size as u64),
            size_text(cap)
        );
    }
    let file = fs::File::from(fd);
    // Back to blocking reads (a regular file never blocks; this only undoes O_NONBLOCK).
    let _ = nix::fcntl::fcntl(&file, nix::fcntl::FcntlArg::F_SETFL(OFlag::O_RDONLY));
    Ok(file.take(cap))
}

/// A size in MiB when it is 1 MiB or more, else in KiB (rounded down).
fn size_text(bytes: u64) -> String {
    if bytes >= 1 << 20 {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{} KiB", bytes >> 10)
    }
}

/// A regular file's text, at most `cap` bytes (see [`open_regular`]); an error names the file.
pub fn read_text(file: &Path, cap: u64, links: Links) -> anyhow::Result<String> {
    let mut text = String::new();
    open_regular(file, cap, links)?
        .read_to_string(&mut text)
        .with_context(|| format!("reading {} (not UTF-8 text?)", file.display()))?;
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn tempdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("scanprof-user-files-{}-{tag}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn replace_swaps_a_planted_link_instead_of_writing_through_it() {
        let d = tempdir("link");
        let victim = d.join("victim");
        fs::write(&victim, "precious").unwrap();
        let path = d.join("report.json");
        std::os::unix::fs::symlink(&victim, &path).unwrap();
        // The partial name planted too: unlinked, not followed.
        std::os::unix::fs::symlink(&victim, partial_beside(&path).unwrap()).unwrap();
        replace(&path, 0o644, b"{}").unwrap();
        assert_eq!(fs::read_to_string(&victim).unwrap(), "precious");
        let meta = fs::symlink_metadata(&path).unwrap();
        assert!(meta.file_type().is_file());
        assert_eq!(meta.permissions().mode() & 0o022, 0, "group/other may write it");
        assert_eq!(fs::read_to_string(&path).unwrap(), "{}");
        assert_eq!(fs::read_dir(&d).unwrap().count(), 2, "a partial file was left");
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn only_regular_files_of_bounded_size_are_read() {
        let d = tempdir("read");
        for dev in ["/dev/zero", "/dev/urandom"] {
            let e = open_regular(Path::new(dev), 1 << 20, Links::Follow)
                .unwrap_err()
                .to_string();
            assert!(e.contains("a character device"), "{e}");
        }
        let fifo = d.join("fifo");
        nix::unistd::mkfifo(&fifo, Mode::from_bits_truncate(0o600)).unwrap();
        let e = open_regular(&fifo, 1 << 20, Links::Follow)
            .unwrap_err()
            .to_string();
        assert!(e.contains("a FIFO"), "{e}");
        let big = d.join("big");
        fs::write(&big, vec![b'x'; 4096]).unwrap();
        let e = read_text(&big, 1024, Links::Follow).unwrap_err().to_string();
        assert!(e.contains("over the 1 KiB"), "{e}");
        assert_eq!(read_text(&big, 4096, Links::Follow).unwrap().len(), 4096);
        let link = d.join("link");
        std::os::unix::fs::symlink(&big, &link).unwrap();
        assert_eq!(read_text(&link, 4096, Links::Follow).unwrap().len(), 4096);
        let e = read_text(&link, 4096, Links::Refuse).unwrap_err().to_string();
        assert!(e.contains("symbolic link"), "{e}");
        fs::remove_dir_all(&d).unwrap();
    }
}
