//! The ticks of a run that may become a bundle, kept on disk as they come instead of in memory:
//! one `sample` NDJSON line per tick in a private file (created O_CREAT|O_EXCL|O_NOFOLLOW, mode
//! 0600, in a new mkdtemp directory of mode 0700, then unlinked with its directory at once, so
//! that only scanprof's descriptors reach it and nothing is left behind, even after SIGKILL). A
//! bundle is rendered from it when it is written (at the end of a run, or at the live view's `e`
//! key), so a long run's memory stays flat however many ticks it has.

use std::fs;
use std::io::{BufRead, BufReader, BufWriter, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;

use anyhow::Context;

use super::Recording;
use crate::analysis::Snapshot;
use crate::session::Update;
use crate::views::json;

/// An unlinked file of ticks, reached only through its two descriptors.
#[derive(Debug)]
pub struct TickSpool {
    out: BufWriter<fs::File>,
    /// a second open of the file, with its own offset, for reading it back
    back: fs::File,
    /// ticks written
    ticks: u64,
    /// the first write that failed: the spool is incomplete from there on
    failed: Option<String>,
}

impl TickSpool {
    /// A new spool in the temporary directory (TMPDIR).
    pub fn create() -> anyhow::Result<TickSpool> {
        TickSpool::create_in(&std::env::temp_dir())
    }

    /// A new spool under `parent`.
    fn create_in(parent: &std::path::Path) -> anyhow::Result<TickSpool> {
        let template = parent.join("scanprof-ticks-XXXXXX");
        let dir = nix::unistd::mkdtemp(&template).with_context(|| {
            format!(
                "creating a private directory for the run's ticks ({}): set TMPDIR to a writable directory",
                template.display()
            )
        })?;
        let path = dir.join("ticks.ndjson");
        let opened = crate::system::user_files::create_new(&path, 0o600)
            .and_then(|out| {
                let back = fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                    .open(&path)?;
                Ok((out, back))
            })
            .with_context(|| format!("creating {} (O_EXCL, no symlink followed)", path.display()));
        let _ = fs::remove_file(&path);
        let _ = fs::remove_dir(&dir);
        let (out, back) = opened?;
        Ok(TickSpool {
            out: BufWriter::new(out),
            back,
            ticks: 0,
            failed: None,
        })
    }

    /// Appends one tick. After a failed write the spool takes nothing more; the failure is
    /// returned once here and again by [`TickSpool::ticks`].
    pub fn push(&mut self, s: &Snapshot) -> anyhow::Result<()> {
        if self.failed.is_some() {
            return Ok(());
        }
        let line = json::line("sample", s) + "\n";
        if let Err(e) = self.out.write_all(line.as_bytes()) {
            let why = format!(
                "writing tick {} to the run's spool file in {} failed ({e}): a bundle of this run \
                 would miss its ticks from there on (set TMPDIR to a directory with room)",
                s.tick,
                std::env::temp_dir().display()
            );
            self.failed = Some(why.clone());
            anyhow::bail!(why);
        }
        self.ticks += 1;
        Ok(())
    }

    /// Every tick written so far, read back in order.
    pub fn ticks(&mut self) -> anyhow::Result<Vec<Snapshot>> {
        if let Some(why) = &self.failed {
            anyhow::bail!("{why}");
        }
        self.out.flush().context("writing the run's spool file")?;
        self.back
            .seek(SeekFrom::Start(0))
            .context("reading the run's spool file")?;
        let mut ticks = Vec::with_capacity(self.ticks as usize);
        for (i, line) in BufReader::new(&self.back).lines().enumerate() {
            let line = line.context("reading the run's spool file")?;
            let s: Snapshot = serde_json::from_str(&line).with_context(|| {
                format!("the run's spool file, line {}: not a tick scanprof wrote", i + 1)
            })?;
            ticks.push(s);
        }
        Ok(ticks)
    }
}

/// A recording in progress whose ticks go to a [`TickSpool`]: memory holds the latest tick
/// (what the live views need), the spool every tick (what a bundle needs).
#[derive(Debug)]
pub struct SpooledRecording {
    /// everything but the ticks, and the latest tick
    pub latest: Recording,
    spool: TickSpool,
}

impl SpooledRecording {
    pub fn new(latest: Recording) -> anyhow::Result<SpooledRecording> {
        Ok(SpooledRecording {
            latest,
            spool: TickSpool::create()?,
        })
    }

    /// Takes one update; a tick that cannot be spooled is an error (once: the bundle will
    /// say it again), the update is taken either way.
    pub fn apply(&mut self, update: &Update) -> anyhow::Result<()> {
        self.latest.apply_latest(update);
        match update {
            Update::Tick(s) => self.spool.push(s),
            _ => Ok(()),
        }
    }

    /// The whole recording so far, every tick read back from the spool.
    pub fn whole(&mut self) -> anyhow::Result<Recording> {
        let ticks = self.spool.ticks()?;
        Ok(Recording {
            meta: self.latest.meta.clone(),
            processes: self.latest.processes.clone(),
            probes: self.latest.probes.clone(),
            clocks: self.latest.clocks,
            ticks,
            summary: self.latest.summary.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::views::fixtures::rich_recording;

    fn feed(rec: &Recording, into: &mut SpooledRecording, rounds: usize) {
        into.apply(&Update::Started {
            processes: rec.processes.clone(),
            probes: rec.probes.clone(),
            clocks: rec.clocks.unwrap_or_default(),
        })
        .unwrap();
        for _ in 0..rounds {
            for t in &rec.ticks {
                into.apply(&Update::Tick(Box::new(t.clone()))).unwrap();
            }
        }
    }

    /// Memory holds one tick however many come; the spool gives every tick back, as they were,
    /// so a bundle written from it is the one a recording kept in memory would give.
    #[test]
    fn the_spool_gives_back_every_tick_while_memory_keeps_one() {
        let full = rich_recording();
        let mut spooled = SpooledRecording::new(Recording::new(full.meta.clone())).unwrap();
        feed(&full, &mut spooled, 40);
        assert_eq!(spooled.latest.ticks.len(), 1);
        let mid = spooled.whole().unwrap();
        assert_eq!(mid.ticks.len(), 40 * full.ticks.len());
        assert_eq!(mid.ticks[..full.ticks.len()], full.ticks[..]);
        assert!(mid.summary.is_none());
        // more ticks after a read (the live view's `e` at any time), then the summary
        feed(&full, &mut spooled, 1);
        spooled
            .apply(&Update::Done(Box::new(full.summary.clone().unwrap())))
            .unwrap();
        let end = spooled.whole().unwrap();
        assert_eq!(end.ticks.len(), 41 * full.ticks.len());
        assert_eq!(end.ticks.last(), full.ticks.last());
        assert_eq!(end.summary, full.summary);
        assert_eq!(
            (&end.meta, &end.processes, &end.probes),
            (&full.meta, &full.processes, &full.probes)
        );
    }

    /// The spool is reached only through scanprof's descriptors: its file and directory are
    /// gone from the temporary directory as soon as it is made.
    #[test]
    fn the_spool_leaves_nothing_in_the_temporary_directory() {
        let parent = nix::unistd::mkdtemp(&std::env::temp_dir().join("spool-test-XXXXXX")).unwrap();
        let mut spool = TickSpool::create_in(&parent).unwrap();
        let left: Vec<_> = fs::read_dir(&parent).unwrap().collect();
        fs::remove_dir(&parent).unwrap();
        assert!(left.is_empty(), "{left:?}");
        let tick = rich_recording().ticks[0].clone();
        spool.push(&tick).unwrap();
        assert_eq!(spool.ticks().unwrap(), [tick]);
    }
}
