//! The unishape fixture: a small C program set with unicornscan's process and IPC shape (a
//! master `unicornscan` that fork+execs `unisend` and `unilisten` and sends them work units over
//! unix sockets), written for these tests from the facts in shared/targets/unicornscan.md.
//! Sources: `tests/fixtures/unishape/` (see the comment at the top of master.c for the CLI).
//!
//! [`build`] compiles it once per test process with gcc into
//! `$CARGO_TARGET_TMPDIR/unishape/<hash of the sources>/` laid out like an install prefix:
//! `bin/unicornscan`, `libexec/unicornscan/unisend`, `libexec/unicornscan/unilisten`. The
//! directory is named by the sources' hash and moved into place whole, so test binaries building
//! at the same time never overwrite an executable another test is running or probing.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

/// gcc flags of every fixture binary: PIE, exported functions (.dynsym), debug info.
pub const CFLAGS: [&str; 8] = [
    "-std=c11",
    "-O1",
    "-g",
    "-Wall",
    "-Wextra",
    "-fPIE",
    "-pie",
    "-rdynamic",
];

/// Exported functions of `unisend` (all `noinline`, in .dynsym).
pub const SENDER_FUNCTIONS: [&str; 16] = [
    "init_tslot",
    "tsc_init_tslot",
    "gtod_init_tslot",
    "sleep_init_tslot",
    "start_tslot",
    "end_tslot",
    "tsc_start_tslot",
    "tsc_end_tslot",
    "gtod_start_tslot",
    "gtod_end_tslot",
    "sleep_start_tslot",
    "sleep_end_tslot",
    "init_packet",
    "makepkt_getbuf",
    "send_message",
    "get_message",
];

/// Exported functions of the master `unicornscan`.
pub const MASTER_FUNCTIONS: [&str; 5] = [
    "chld_fork",
    "chld_waitsync",
    "run_scan",
    "send_message",
    "get_message",
];

/// Exported functions of `unilisten`.
pub const LISTENER_FUNCTIONS: [&str; 2] = ["send_message", "get_message"];

/// Exported globals of `unisend`: u64 `tsc_delay` (TSC cycles per slot), u64 `tod_delay` (us
/// per slot, unicornscan's get_tod() units), u64 `sleep_delay` (ns per slot), u64
/// `tsc_cycles_per_sec`, u8 `delay_type`, double
/// `calibration_skew`, int `claim_requested`.
pub const SENDER_GLOBALS: [&str; 7] = [
    "tsc_delay",
    "tod_delay",
    "sleep_delay",
    "tsc_cycles_per_sec",
    "delay_type",
    "calibration_skew",
    "claim_requested",
];

/// Where the built fixture is (all paths canonical: what /proc/PID/exe names).
#[derive(Debug)]
pub struct UnishapeBins {
    /// the install prefix holding `bin/` and `libexec/unicornscan/`
    pub prefix: PathBuf,
    /// `<prefix>/bin/unicornscan`
    pub master: PathBuf,
    /// `<prefix>/libexec/unicornscan/unisend`
    pub sender: PathBuf,
    /// `<prefix>/libexec/unicornscan/unilisten`
    pub listener: PathBuf,
}

/// The fixture's sources: `tests/fixtures/unishape/`.
pub fn source_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/unishape")
}

/// (source file, path of the executable under the prefix)
const PROGRAMS: [(&str, &str); 3] = [
    ("master.c", "bin/unicornscan"),
    ("sender.c", "libexec/unicornscan/unisend"),
    ("listener.c", "libexec/unicornscan/unilisten"),
];
const SOURCES: [&str; 4] = ["unishape.h", "master.c", "sender.c", "listener.c"];

static BINS: OnceLock<UnishapeBins> = OnceLock::new();

/// Builds the fixture (once per process; reused across processes while the sources are
/// unchanged) and returns its paths. Panics with gcc's output if the build fails.
pub fn build() -> &'static UnishapeBins {
    BINS.get_or_init(build_now)
}

fn build_now() -> UnishapeBins {
    let src = source_dir();
    let mut hash = Fnv::new();
    for flag in CFLAGS {
        hash.add(flag.as_bytes());
    }
    for name in SOURCES {
        let path = src.join(name);
        let text = std::fs::read(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        hash.add(name.as_bytes());
        hash.add(&text);
    }
    let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("unishape");
    let prefix = root.join(format!("{:016x}", hash.0));
    if !PROGRAMS.iter().all(|(_, exe)| prefix.join(exe).is_file()) {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let staging = root.join(format!(".build-{}-{nanos}", std::process::id()));
        for (source, exe) in PROGRAMS {
            let out = staging.join(exe);
            std::fs::create_dir_all(out.parent().unwrap())
                .unwrap_or_else(|e| panic!("cannot create {}: {e}", out.parent().unwrap().display()));
            let result = Command::new("gcc")
                .args(CFLAGS)
                .arg("-o")
                .arg(&out)
                .arg(src.join(source))
                .output()
                .unwrap_or_else(|e| panic!("cannot run gcc: {e}"));
            let stderr = String::from_utf8_lossy(&result.stderr);
            if !result.status.success() {
                let _ = std::fs::remove_dir_all(&staging);
                panic!(
                    "gcc failed to build the unishape {source} ({}):\n{stderr}",
                    result.status
                );
            }
            if !stderr.trim().is_empty() {
                eprintln!("gcc warnings for unishape {source}:\n{stderr}");
            }
        }
        // Whole directory into place at once; if another process got there first, use its copy.
        if std::fs::rename(&staging, &prefix).is_err() {
            let _ = std::fs::remove_dir_all(&staging);
            assert!(
                PROGRAMS.iter().all(|(_, exe)| prefix.join(exe).is_file()),
                "cannot move the unishape build into {}",
                prefix.display()
            );
        }
    }
    let canonical = |p: PathBuf| {
        std::fs::canonicalize(&p).unwrap_or_else(|e| panic!("cannot resolve {}: {e}", p.display()))
    };
    let prefix = canonical(prefix);
    UnishapeBins {
        master: prefix.join(PROGRAMS[0].1),
        sender: prefix.join(PROGRAMS[1].1),
        listener: prefix.join(PROGRAMS[2].1),
        prefix,
    }
}

/// `unicornscan -r PPS extra... targets...` (argv[0] is the master's full path). Give option
/// values inline in `extra` (`--repeats=1000`, `--calibration-skew=1.25`): scanprof's argv reader
/// takes a separate word with a `.` or `:` for a unicornscan target.
pub fn argv(bins: &UnishapeBins, pps: u32, extra: &[&str], targets: &[&str]) -> Vec<String> {
    let mut v = vec![bins.master.display().to_string(), "-r".into(), pps.to_string()];
    v.extend(extra.iter().map(|s| s.to_string()));
    v.extend(targets.iter().map(|s| s.to_string()));
    v
}

/// One `unit N: sent P packets, sender says X pps` line of the master's stdout.
#[derive(Debug, Clone, PartialEq)]
pub struct UnitLine {
    /// 1-based, in target order
    pub unit: u32,
    /// packets_sent of the unit's WORKDONE (sendto calls the kernel accepted)
    pub packets: u64,
    /// pps of the unit's WORKDONE (measured or requested, per `--claim`)
    pub pps: f64,
}

/// The unit lines among `lines` (other lines are skipped).
pub fn parse_units(lines: &[String]) -> Vec<UnitLine> {
    lines.iter().filter_map(|l| parse_unit_line(l)).collect()
}

/// Parses one `unit N: sent P packets, sender says X pps` line.
pub fn parse_unit_line(line: &str) -> Option<UnitLine> {
    let rest = line.trim().strip_prefix("unit ")?;
    let (unit, rest) = rest.split_once(": sent ")?;
    let (packets, rest) = rest.split_once(" packets, sender says ")?;
    let pps = rest.strip_suffix(" pps")?;
    Some(UnitLine {
        unit: unit.parse().ok()?,
        packets: packets.parse().ok()?,
        pps: pps.parse().ok()?,
    })
}

/// Names of the symbols `nm` lists as defined in `path`: the dynamic table (`nm -D`) if
/// `dynamic`, else the full symbol table.
pub fn defined_symbols(path: &Path, dynamic: bool) -> BTreeSet<String> {
    let mut cmd = Command::new("nm");
    if dynamic {
        cmd.arg("-D");
    }
    let out = cmd
        .arg("--defined-only")
        .arg(path)
        .output()
        .unwrap_or_else(|e| panic!("cannot run nm: {e}"));
    assert!(
        out.status.success(),
        "nm {} failed: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .map(String::from)
        .collect()
}

/// 64-bit FNV-1a: a hash that stays the same across processes and toolchains.
struct Fnv(u64);

impl Fnv {
    fn new() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }

    fn add(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
        // A separator, so ("ab", "c") and ("a", "bc") differ.
        self.0 = (self.0 ^ 0xff).wrapping_mul(0x0000_0100_0000_01b3);
    }
}
