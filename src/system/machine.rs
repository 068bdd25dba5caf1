//! Host facts that bound what a sender can achieve, gathered without BPF: the CPU and its TSC
//! flags, the clocksource, the kernel's TSC frequency, how far nanosleep overshoots, the socket
//! and backlog sysctls (read only) and each relevant interface's qdisc and txqueuelen.
//! `scanprof baseline` prints them beside its measurements; the parsers here are pure.

use std::collections::BTreeMap;
use std::io::{ErrorKind, Read};
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use nix::sys::time::TimeSpec;
use nix::time::{clock_nanosleep, ClockId, ClockNanosleepFlags};
use procfs::{CpuInfo, Current};
use serde::{Deserialize, Serialize};

use super::monotonic_ns;
use crate::system::netstat;

const CLOCKSOURCE_DIR: &str = "/sys/devices/system/clocksource/clocksource0";
/// The read-only sysctls that bound a sender, as (name, path under /proc/sys).
const SYSCTLS: [(&str, &str); 4] = [
    ("net.core.wmem_max", "net/core/wmem_max"),
    ("net.core.rmem_max", "net/core/rmem_max"),
    ("net.core.wmem_default", "net/core/wmem_default"),
    ("net.core.netdev_max_backlog", "net/core/netdev_max_backlog"),
];
/// The sysctls that bound a receiver: what its socket may ask for and what the CPUs' input
/// backlogs hold. All three are global (one value for every network namespace).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReceiveTunables {
    /// net.core.rmem_max: the largest SO_RCVBUF a socket may set (bytes; the kernel doubles it)
    pub rmem_max: Option<u64>,
    /// net.core.rmem_default: a new socket's receive buffer (bytes)
    pub rmem_default: Option<u64>,
    /// net.core.netdev_max_backlog: packets each CPU's input backlog holds
    pub netdev_max_backlog: Option<u64>,
}

impl ReceiveTunables {
    /// Reads the three sysctls now; an unreadable one is None.
    pub fn read() -> ReceiveTunables {
        let get = |path: &str| {
            read_trimmed(&format!("/proc/sys/net/core/{path}"))
                .ok()?
                .parse()
                .ok()
        };
        ReceiveTunables {
            rmem_max: get("rmem_max"),
            rmem_default: get("rmem_default"),
            netdev_max_backlog: get("netdev_max_backlog"),
        }
    }
}

/// Sleeps measured for the nanosleep overshoot.
const NANOSLEEP_SAMPLES: usize = 200;
/// Length of each measured relative sleep, in ns.
const NANOSLEEP_REQUEST_NS: u64 = 50_000;

/// What `scanprof baseline` reports about the machine.
#[derive(Debug, Clone, Default, Serialize)]
pub struct MachineFacts {
    /// `model name` of the first CPU in /proc/cpuinfo
    pub cpu_model: String,
    /// CPUs online (entries in /proc/cpuinfo)
    pub nproc: usize,
    /// TSC runs at a constant rate whatever the CPU frequency (`constant_tsc` flag)
    pub constant_tsc: bool,
    /// TSC keeps counting in deep C-states (`nonstop_tsc` flag)
    pub nonstop_tsc: bool,
    /// the TSC frequency comes from CPUID or the hypervisor, not a calibration (`tsc_known_freq`)
    pub tsc_known_freq: bool,
    /// current clocksource, e.g. "tsc", "kvm-clock"
    pub clocksource: String,
    /// clocksources the kernel could switch to
    pub available_clocksources: Vec<String>,
    /// the kernel's TSC frequency in Hz, if it could be read without BPF
    pub kernel_tsc_hz: Option<f64>,
    /// where `kernel_tsc_hz` came from, or why it is missing
    pub kernel_tsc_source: String,
    /// the reference sender's own TSC calibration (from a `--pacer tsc` run), if there was one
    pub sender_calibration: Option<Calibration>,
    /// how much later than asked a short relative clock_nanosleep returns
    pub nanosleep: Option<NanosleepOvershoot>,
    /// net.core.* sysctl name -> value (read only; unreadable ones are missing)
    pub sysctls: BTreeMap<String, u64>,
    /// `uname -r`
    pub kernel_release: String,
    /// qdisc and queue length of the interfaces a sender goes through
    pub interfaces: Vec<InterfaceFacts>,
    /// facts that could not be read, with the reason
    pub warnings: Vec<String>,
}

/// The `calibration` object of `scanprof send --json` (all fields optional: older senders lack some).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Calibration {
    /// "calibrate" or "kernel"
    pub source: String,
    /// TSC frequency the sender paced with, in Hz
    pub tsc_hz: Option<f64>,
    /// the kernel's TSC frequency as the sender saw it, in Hz
    pub kernel_tsc_hz: Option<f64>,
    /// (tsc_hz - kernel_tsc_hz) / kernel_tsc_hz, in parts per million
    pub error_ppm: Option<f64>,
    /// time the calibration took, in ns
    pub took_ns: Option<u64>,
    /// how much longer than asked each slot was on CLOCK_MONOTONIC over the run, in ppm
    pub slot_error_ppm: Option<f64>,
}

/// Overshoot of `clock_nanosleep(CLOCK_MONOTONIC, relative)`: wake-up time minus asked time.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct NanosleepOvershoot {
    /// the relative sleep asked for, in ns
    pub requested_ns: u64,
    pub samples: usize,
    /// median overshoot, in ns
    pub median_ns: u64,
    /// 99th percentile overshoot, in ns
    pub p99_ns: u64,
    /// largest overshoot, in ns
    pub max_ns: u64,
}

/// One network interface as a sender sees it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct InterfaceFacts {
    /// "root", or the name of the lab namespace the device is in
    pub namespace: String,
    pub ifname: String,
    /// root qdisc kind, e.g. "noqueue", "pfifo_fast", "tbf"
    pub qdisc: String,
    /// device transmit queue length, in packets
    pub txqueuelen: u64,
}

/// The TSC-related facts of one CPU's cpuinfo entry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CpuFacts {
    pub model: String,
    pub cpus: usize,
    pub constant_tsc: bool,
    pub nonstop_tsc: bool,
    pub tsc_known_freq: bool,
}

impl MachineFacts {
    /// Reads every fact of the root namespace; what cannot be read becomes a warning, never an
    /// error. Measures the nanosleep overshoot (about 20 ms). Interfaces: lo and every interface
    /// with an IPv4 default route.
    pub fn gather() -> MachineFacts {
        let mut m = MachineFacts::default();
        match cpu_facts() {
            Ok(c) => {
                m.cpu_model = c.model;
                m.nproc = c.cpus;
                m.constant_tsc = c.constant_tsc;
                m.nonstop_tsc = c.nonstop_tsc;
                m.tsc_known_freq = c.tsc_known_freq;
            }
            Err(e) => m.warnings.push(format!("cpu: {e:#}")),
        }
        match read_trimmed(&format!("{CLOCKSOURCE_DIR}/current_clocksource")) {
            Ok(c) => m.clocksource = c,
            Err(e) => m.warnings.push(format!("clocksource: {e:#}")),
        }
        match read_trimmed(&format!("{CLOCKSOURCE_DIR}/available_clocksource")) {
            Ok(a) => m.available_clocksources = a.split_whitespace().map(String::from).collect(),
            Err(e) => m.warnings.push(format!("available clocksources: {e:#}")),
        }
        (m.kernel_tsc_hz, m.kernel_tsc_source) = kernel_tsc();
        match measure_nanosleep(NANOSLEEP_SAMPLES, NANOSLEEP_REQUEST_NS) {
            Ok(n) => m.nanosleep = Some(n),
            Err(e) => m.warnings.push(format!("nanosleep: {e:#}")),
        }
        for (name, path) in SYSCTLS {
            let path = format!("/proc/sys/{path}");
            match read_trimmed(&path).and_then(|t| t.parse::<u64>().with_context(|| format!("{path}: {t:?}")))
            {
                Ok(v) => {
                    m.sysctls.insert(name.to_string(), v);
                }
                Err(e) => m.warnings.push(format!("{name}: {e:#}")),
            }
        }
        match read_trimmed("/proc/sys/kernel/osrelease") {
            Ok(r) => m.kernel_release = r,
            Err(e) => m.warnings.push(format!("kernel release: {e:#}")),
        }
        let mut devices = vec!["lo".to_string()];
        match std::fs::read_to_string("/proc/net/route") {
            Ok(t) => devices.extend(default_route_interfaces(&t)),
            Err(e) => m.warnings.push(format!("/proc/net/route: {e}")),
        }
        devices.dedup();
        for dev in devices {
            m.add_interface(None, &dev);
        }
        m
    }

    /// Adds `dev` (in `netns`, None = the root namespace) to the interface list, or a warning.
    pub fn add_interface(&mut self, netns: Option<&str>, dev: &str) {
        match netstat::link_stats(netns, dev) {
            Ok(l) => self.interfaces.push(InterfaceFacts {
                namespace: netns.unwrap_or("root").to_string(),
                ifname: l.ifname,
                qdisc: l.qdisc,
                txqueuelen: l.txqlen,
            }),
            Err(e) => self.warnings.push(format!("interface {dev}: {e:#}")),
        }
    }
}

/// Model and TSC flags from /proc/cpuinfo.
pub fn cpu_facts() -> Result<CpuFacts> {
    let info = CpuInfo::current().context("cannot read /proc/cpuinfo")?;
    Ok(cpu_facts_of(&info))
}

/// The model and TSC flags of the first CPU of a parsed cpuinfo.
pub fn cpu_facts_of(info: &CpuInfo) -> CpuFacts {
    let flags = info.flags(0).unwrap_or_default();
    let has = |f: &str| flags.contains(&f);
    CpuFacts {
        model: info
            .model_name(0)
            // Arm and others have no "model name"; "Hardware" or "CPU part" say something.
            .or_else(|| info.get_field(0, "Hardware"))
            .unwrap_or_default()
            .trim()
            .to_string(),
        cpus: info.num_cores(),
        constant_tsc: has("constant_tsc"),
        nonstop_tsc: has("nonstop_tsc"),
        tsc_known_freq: has("tsc_known_freq"),
    }
}

/// Interfaces that carry an IPv4 default route, from the text of /proc/net/route (the
/// `Destination` column is 00000000 and the `Mask` column 00000000), in table order, deduplicated.
pub fn default_route_interfaces(route_table: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for line in route_table.lines().skip(1) {
        let cols: Vec<&str> = line.split_whitespace().collect();
        // Iface Destination Gateway Flags RefCnt Use Metric Mask ...
        if cols.len() >= 8
            && cols[1] == "00000000"
            && cols[7] == "00000000"
            && !out.iter().any(|d| d == cols[0])
        {
            out.push(cols[0].to_string());
        }
    }
    out
}

/// The kernel's TSC frequency in Hz and where it came from; (None, reason) if neither the perf
/// mmap page nor the kernel log gives it.
pub fn kernel_tsc() -> (Option<f64>, String) {
    let perf_error = match super::tsc_freq::perf_page_tsc_hz() {
        Some(hz) => return (Some(hz), "perf_event mmap page (time_mult, time_shift)".into()),
        None => anyhow::anyhow!("the perf mmap page has no cap_user_time (sched_clock is not the TSC)"),
    };
    match read_kernel_log().map(|lines| kernel_log_tsc_hz(&lines)) {
        Ok(Some((hz, line))) => (Some(hz), format!("kernel log: \"{line}\"")),
        Ok(None) => (
            None,
            format!("not found: {perf_error:#}; the kernel log no longer holds the tsc lines"),
        ),
        Err(e) => (None, format!("not found: {perf_error:#}; kernel log: {e:#}")),
    }
}

/// The kernel's TSC frequency from its log lines: the last "tsc: Refined TSC clocksource
/// calibration: X MHz" if any, else the last "tsc: Detected X MHz processor" (or "X MHz TSC");
/// with the line it came from (message part only).
pub fn kernel_log_tsc_hz(lines: &[String]) -> Option<(f64, String)> {
    let mhz_after = |msg: &str, prefix: &str| -> Option<f64> {
        let rest = &msg[msg.find(prefix)? + prefix.len()..];
        let number = rest.split_whitespace().next()?;
        let mhz: f64 = number.parse().ok()?;
        (rest.contains("MHz") && mhz > 0.0).then_some(mhz * 1e6)
    };
    let message = |l: &str| l.split_once(';').map_or(l, |(_, m)| m).trim().to_string();
    let find = |prefix: &str| {
        lines
            .iter()
            .rev()
            .find_map(|l| mhz_after(l, prefix).map(|hz| (hz, message(l))))
    };
    find("tsc: Refined TSC clocksource calibration:").or_else(|| find("tsc: Detected"))
}

/// Median, 99th percentile and maximum of `overshoots_ns` (nearest-rank); None if empty.
pub fn overshoot_stats(requested_ns: u64, mut overshoots_ns: Vec<u64>) -> Option<NanosleepOvershoot> {
    if overshoots_ns.is_empty() {
        return None;
    }
    overshoots_ns.sort_unstable();
    let n = overshoots_ns.len();
    let rank = |p: f64| overshoots_ns[((p * n as f64).ceil() as usize).clamp(1, n) - 1];
    Some(NanosleepOvershoot {
        requested_ns,
        samples: n,
        median_ns: rank(0.5),
        p99_ns: rank(0.99),
        max_ns: overshoots_ns[n - 1],
    })
}

/// Sleeps `samples` times for `request_ns` (relative clock_nanosleep on CLOCK_MONOTONIC) and
/// reports how much longer each sleep took than asked.
pub fn measure_nanosleep(samples: usize, request_ns: u64) -> Result<NanosleepOvershoot> {
    let request = TimeSpec::from(Duration::from_nanos(request_ns));
    let mut overshoots = Vec::with_capacity(samples);
    for _ in 0..samples {
        let before = monotonic_ns();
        clock_nanosleep(ClockId::CLOCK_MONOTONIC, ClockNanosleepFlags::empty(), &request)
            .context("clock_nanosleep")?;
        overshoots.push((monotonic_ns() - before).saturating_sub(request_ns));
    }
    overshoot_stats(request_ns, overshoots).context("no samples")
}

fn read_trimmed(path: &str) -> Result<String> {
    Ok(std::fs::read_to_string(path)
        .with_context(|| format!("cannot read {path}"))?
        .trim()
        .to_string())
}

/// The records of /dev/kmsg ("prio,seq,usec,flags;message"), read without blocking.
fn read_kernel_log() -> Result<Vec<String>> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = Path::new("/dev/kmsg");
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .context("cannot open /dev/kmsg")?;
    let mut lines = Vec::new();
    // Each read returns one record; records are at most ~8 kB.
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => lines.push(String::from_utf8_lossy(&buf[..n]).trim_end().to_string()),
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            // A record overwritten while we read: go on with the next one.
            Err(e) if e.raw_os_error() == Some(libc::EPIPE) => continue,
            Err(e) => return Err(e).context("cannot read /dev/kmsg"),
        }
    }
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use procfs::FromRead;

    use super::*;

    /// /proc/cpuinfo of a 2-vCPU AMD EPYC KVM guest (kernel 6.18), cut to the fields that
    /// matter and two CPUs.
    const CPUINFO_EPYC: &str = "processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 1
model name\t: AMD EPYC
cpu MHz\t\t: 2445.428
flags\t\t: fpu vme de pse tsc msr pae rdtscp lm constant_tsc rep_good nopl xtopology nonstop_tsc cpuid extd_apicid tsc_known_freq pni hypervisor
bogomips\t: 4890.85

processor\t: 1
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 1
model name\t: AMD EPYC
cpu MHz\t\t: 2445.428
flags\t\t: fpu vme de pse tsc msr pae rdtscp lm constant_tsc rep_good nopl xtopology nonstop_tsc cpuid extd_apicid tsc_known_freq pni hypervisor
bogomips\t: 4890.85
";

    /// An older Intel host without nonstop_tsc or tsc_known_freq.
    const CPUINFO_OLD_INTEL: &str = "processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Core(TM)2 Duo CPU     E8400  @ 3.00GHz
flags\t\t: fpu vme de pse tsc msr pae constant_tsc arch_perfmon pebs bts
";

    const ROUTE: &str = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT
eth0\t00000000\t0100FEA9\t0003\t0\t0\t0\t00000000\t0\t0\t0
eth0\t0000FEA9\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0
wg0\t00000000\t00000000\t0001\t0\t0\t50\t00000000\t0\t0\t0
eth0\t00000000\t0200FEA9\t0003\t0\t0\t100\t00000000\t0\t0\t0
";

    #[test]
    fn reads_model_and_tsc_flags_from_cpuinfo() -> Result<()> {
        let info = CpuInfo::from_read(CPUINFO_EPYC.as_bytes())?;
        let c = cpu_facts_of(&info);
        assert_eq!(
            c,
            CpuFacts {
                model: "AMD EPYC".into(),
                cpus: 2,
                constant_tsc: true,
                nonstop_tsc: true,
                tsc_known_freq: true,
            }
        );
        let old = cpu_facts_of(&CpuInfo::from_read(CPUINFO_OLD_INTEL.as_bytes())?);
        assert_eq!(old.model, "Intel(R) Core(TM)2 Duo CPU     E8400  @ 3.00GHz");
        assert_eq!(
            (old.cpus, old.constant_tsc, old.nonstop_tsc, old.tsc_known_freq),
            (1, true, false, false)
        );
        Ok(())
    }

    #[test]
    fn a_flag_is_matched_whole_not_as_a_prefix() -> Result<()> {
        let text = "processor\t: 0\nmodel name\t: X\nflags\t\t: constant_tsc_x nonstop_tsc2\n";
        let c = cpu_facts_of(&CpuInfo::from_read(text.as_bytes())?);
        assert!(!c.constant_tsc && !c.nonstop_tsc, "{c:?}");
        Ok(())
    }

    #[test]
    fn finds_default_route_interfaces_once_each() {
        assert_eq!(default_route_interfaces(ROUTE), vec!["eth0", "wg0"]);
        assert!(default_route_interfaces("Iface\tDestination\n").is_empty());
        assert!(default_route_interfaces("").is_empty());
    }

    #[test]
    fn kernel_log_prefers_the_refined_calibration() {
        let lines: Vec<String> = [
            "6,1,0,-;[Firmware Bug]: TSC doesn't count with P0 frequency!",
            "6,2,72,-;tsc: Detected 2445.428 MHz processor",
            "6,40,1120000,-;tsc: Refined TSC clocksource calibration: 2445.431 MHz",
            "6,41,1120001,-;clocksource: Switched to clocksource tsc",
        ]
        .map(String::from)
        .to_vec();
        let (hz, line) = kernel_log_tsc_hz(&lines).unwrap_or_default();
        assert_eq!(hz, 2_445_431_000.0);
        assert_eq!(line, "tsc: Refined TSC clocksource calibration: 2445.431 MHz");
        let (hz, line) = kernel_log_tsc_hz(&lines[..2]).unwrap_or_default();
        assert_eq!(hz, 2_445_428_000.0);
        assert_eq!(line, "tsc: Detected 2445.428 MHz processor");
        // Older kernels: "tsc: Detected 2893.202 MHz TSC"
        let old = vec!["tsc: Detected 2893.202 MHz TSC".to_string()];
        assert_eq!(kernel_log_tsc_hz(&old).map(|x| x.0), Some(2_893_202_000.0));
        assert_eq!(kernel_log_tsc_hz(&["tsc: Detected".to_string()]), None);
        assert_eq!(kernel_log_tsc_hz(&[]), None);
    }

    #[test]
    fn overshoot_percentiles_are_nearest_rank() {
        let s = overshoot_stats(50_000, (1..=200).rev().collect()).unwrap_or_default();
        assert_eq!(
            (s.samples, s.median_ns, s.p99_ns, s.max_ns, s.requested_ns),
            (200, 100, 198, 200, 50_000)
        );
        let one = overshoot_stats(10, vec![7]).unwrap_or_default();
        assert_eq!((one.median_ns, one.p99_ns, one.max_ns), (7, 7, 7));
        assert_eq!(overshoot_stats(10, vec![]), None);
    }

    #[test]
    fn calibration_parses_with_fields_missing() -> Result<()> {
        let c: Calibration = serde_json::from_str(r#"{"source":"kernel","tsc_hz":2445428000.0}"#)?;
        assert_eq!(c.source, "kernel");
        assert_eq!(
            (c.tsc_hz, c.kernel_tsc_hz, c.took_ns),
            (Some(2_445_428_000.0), None, None)
        );
        Ok(())
    }
}
