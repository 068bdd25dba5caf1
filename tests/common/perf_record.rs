//! perf's own record of the kfree_skb tracepoint, the independent count of the drops that a
//! per-event consumer of the tracepoint is given.
//!
//! Why perf record and not the kernel's protocol counters or `perf stat`: on this VM (kernel
//! 6.18), behind a tbf that holds a queue, a handful of the 12,000 datagrams sent to a closed
//! port are counted by `Udp: NoPorts` and by `perf stat` (12,000) but reach no per-event
//! consumer. scanprof's program, an independent minimal tp_btf program loaded by another
//! process, and `perf record`'s samples (no sample lost, none throttled) each got the same
//! 11,996 to 12,000, with or without scanprof loaded, and no recursion miss on either program
//! (docs/testing.md, "The independent counters"). So a drop count is held exactly against this
//! record of the same events, and the kernel's counters bound what the tracepoint delivers.

use super::{drop_reason_number, patience, Proc};
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::Command;
use std::sync::mpsc;
use std::time::Duration;

/// A running `perf record -a` of kfree_skb with one drop reason, recording from `start`'s return
/// until `stop`.
pub struct KfreeSkbRecord {
    /// None once stopped
    perf: Option<Proc>,
    dir: PathBuf,
    /// perf's control FIFO, held open so that perf's end of it stays valid
    _ctl: File,
}

impl KfreeSkbRecord {
    /// Starts perf with its events off, turns them on through its control FIFO and waits for its
    /// acknowledgement: every drop of reason `reason_name` after this returns is recorded.
    pub fn start(reason_name: &str) -> KfreeSkbRecord {
        let reason = drop_reason_number(reason_name);
        let dir = std::env::temp_dir().join(format!(
            "scanprof-perf-record-{}-{}",
            std::process::id(),
            super::monotonic_ns()
        ));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("cannot create {dir:?}: {e}"));
        let (ctl_path, ack_path) = (dir.join("ctl"), dir.join("ack"));
        for p in [&ctl_path, &ack_path] {
            nix::unistd::mkfifo(p, nix::sys::stat::Mode::S_IRUSR | nix::sys::stat::Mode::S_IWUSR)
                .unwrap_or_else(|e| panic!("cannot make the FIFO {p:?}: {e}"));
        }
        // Opened read-write, a FIFO does not wait for its other end.
        let fifo = |p: &PathBuf| {
            OpenOptions::new()
                .read(true)
                .write(true)
                .open(p)
                .unwrap_or_else(|e| panic!("cannot open the FIFO {p:?}: {e}"))
        };
        let (mut ctl, ack) = (fifo(&ctl_path), fifo(&ack_path));
        let mut cmd = Command::new("perf");
        cmd.args(["record", "-q", "-a", "-D", "-1", "--control"])
            .arg(format!("fifo:{},{}", ctl_path.display(), ack_path.display()))
            .args([
                "-e",
                "skb:kfree_skb",
                "--filter",
                &format!("reason == {reason}"),
                "-o",
            ])
            .arg(dir.join("perf.data"));
        let mut perf = Proc::spawn("perf record", cmd, false);
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(ack).read_line(&mut line);
            let _ = tx.send(line);
        });
        ctl.write_all(b"enable\n")
            .unwrap_or_else(|e| panic!("cannot write perf's control FIFO: {e}"));
        let wait = patience(Duration::from_secs(30));
        match rx.recv_timeout(wait) {
            Ok(line) if line.trim() == "ack" => {}
            other => {
                let running = perf.running();
                panic!("perf record did not acknowledge `enable` within {wait:?} ({other:?}; running: {running})")
            }
        }
        KfreeSkbRecord {
            perf: Some(perf),
            dir,
            _ctl: ctl,
        }
    }

    /// Ends the record (SIGINT, then SIGTERM every second) and returns how many events it
    /// holds. Panics if perf lost any: then the record is no count.
    pub fn stop(mut self) -> u64 {
        let data = self.dir.join("perf.data");
        let perf = self.perf.take().expect("stopped once");
        let done = perf.interrupt_tracer(Duration::from_secs(60));
        let run = |args: &[&str]| {
            let out = Command::new("perf")
                .args(args)
                .arg("-i")
                .arg(&data)
                .output()
                .unwrap_or_else(|e| panic!("cannot run perf {args:?}: {e}"));
            assert!(
                out.status.success(),
                "perf {args:?} -i {data:?} failed ({}): {}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr),
                done.context()
            );
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        let stats = run(&["report", "--stats"]);
        let lost: Vec<&str> = stats
            .lines()
            .filter(|l| l.trim_start().starts_with("LOST") || l.trim_start().starts_with("THROTTLE"))
            .collect();
        assert!(
            lost.is_empty(),
            "perf record lost events: {lost:?}\n{}",
            done.context()
        );
        run(&["script", "-F", "trace"])
            .lines()
            .filter(|l| !l.trim().is_empty())
            .count() as u64
    }
}

impl Drop for KfreeSkbRecord {
    /// A record not stopped (a test that failed first) ends with its perf (Proc's Drop).
    fn drop(&mut self) {
        drop(self.perf.take());
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
