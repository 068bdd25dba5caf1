//! CPU time a sender cannot have whatever it does: the CPU quota of its cgroups (cgroup v2
//! `cpu.max` / `cpu.stat`, cgroup v1 `cpu.cfs_quota_us` / `cpu.stat`) and the time the
//! hypervisor stole from its CPUs (/proc/stat `steal`). Read without BPF once per sample by the
//! collector, for the family's processes; the parsers are pure and unit-tested.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Levels of a cgroup path walked up for quotas (the cgroup and its ancestors).
const MAX_LEVELS: usize = 16;

/// One cgroup with a CPU quota that holds family processes (the process's own cgroup or an
/// ancestor: an ancestor's quota throttles every cgroup below it). Counters are cumulative since
/// the cgroup was made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CgroupCpu {
    /// 1 (the v1 `cpu` controller) or 2 (the unified hierarchy)
    pub version: u8,
    /// the cgroup's path in its hierarchy, as /proc/PID/cgroup names it (`/docker/ab12...`)
    pub path: String,
    /// the family's processes in it or below it
    pub pids: Vec<u32>,
    /// CPU time allowed per period, us (`cpu.max`'s first field, `cpu.cfs_quota_us`)
    pub quota_us: u64,
    /// the period, us
    pub period_us: u64,
    /// periods with runnable tasks (`nr_periods`)
    pub nr_periods: u64,
    /// periods in which the quota ran out (`nr_throttled`)
    pub nr_throttled: u64,
    /// time its tasks were throttled, ns (`throttled_usec` x 1000, v1 `throttled_time`); summed
    /// over the CPUs it was throttled on
    pub throttled_ns: u64,
}

impl CgroupCpu {
    /// The quota in CPUs (0.3: 30% of one CPU).
    pub fn cpus(&self) -> f64 {
        self.quota_us as f64 / self.period_us.max(1) as f64
    }
}

/// Hypervisor steal time on a set of CPUs, cumulative since boot.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CpuSteal {
    /// the CPUs the family's processes may run on (their affinity, all of them together)
    pub cpus: Vec<u32>,
    /// time the hypervisor ran something else while these CPUs had work, ns, summed over them
    pub steal_ns: u64,
}

/// Where the cgroup hierarchies that carry the cpu controller are mounted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CgroupMounts {
    /// the cgroup2 mount point and the root of the mount inside the hierarchy
    pub v2: Option<(String, String)>,
    /// the v1 hierarchy with the `cpu` controller: mount point and root
    pub v1_cpu: Option<(String, String)>,
}

impl CgroupMounts {
    /// Reads /proc/self/mountinfo; none found when it cannot be read.
    pub fn read() -> CgroupMounts {
        std::fs::read_to_string("/proc/self/mountinfo")
            .map(|t| CgroupMounts::parse(&t))
            .unwrap_or_default()
    }

    /// The cgroup mounts of a mountinfo text: `ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS... - TYPE
    /// SOURCE SUPEROPTS`. The first of each kind wins.
    pub fn parse(mountinfo: &str) -> CgroupMounts {
        let mut m = CgroupMounts::default();
        for line in mountinfo.lines() {
            let Some((left, right)) = line.split_once(" - ") else {
                continue;
            };
            let fields: Vec<&str> = left.split_whitespace().collect();
            let tail: Vec<&str> = right.split_whitespace().collect();
            let (Some(root), Some(point), Some(fstype)) = (fields.get(3), fields.get(4), tail.first()) else {
                continue;
            };
            let entry = Some((unescape(point), unescape(root)));
            match *fstype {
                "cgroup2" if m.v2.is_none() => m.v2 = entry,
                "cgroup" if m.v1_cpu.is_none() => {
                    let opts = tail.get(2).copied().unwrap_or("");
                    if opts.split(',').any(|o| o == "cpu") {
                        m.v1_cpu = entry;
                    }
                }
                _ => {}
            }
        }
        m
    }

    /// The directory of `path` (as /proc/PID/cgroup names it) in hierarchy `version`.
    fn dir(&self, version: u8, path: &str) -> Option<String> {
        let (point, root) = if version == 2 {
            self.v2.as_ref()?
        } else {
            self.v1_cpu.as_ref()?
        };
        let rel = if root == "/" {
            path
        } else {
            path.strip_prefix(root.as_str())?
        };
        Some(format!("{}{}", point.trim_end_matches('/'), rel))
    }
}

/// mountinfo escapes spaces, tabs, newlines and backslashes as octal (`\040`).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c)) {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The cgroups of one process from its /proc/PID/cgroup: (version, path) for the unified
/// hierarchy (`0::/path`) and for the v1 hierarchy whose controllers include `cpu`.
pub fn parse_proc_cgroup(text: &str) -> Vec<(u8, String)> {
    let mut out = Vec::new();
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        if id == "0" && controllers.is_empty() {
            out.push((2, path.to_string()));
        } else if controllers.split(',').any(|c| c == "cpu") {
            out.push((1, path.to_string()));
        }
    }
    out
}

/// cgroup v2 `cpu.max`: `QUOTA PERIOD`, `max PERIOD` when unlimited. Some((quota, period)) only
/// for a quota.
pub fn parse_cpu_max(text: &str) -> Option<(u64, u64)> {
    let mut f = text.split_whitespace();
    let quota = f.next()?.parse().ok()?;
    let period = f.next()?.parse().ok()?;
    Some((quota, period))
}

/// `cpu.stat` of either version: (nr_periods, nr_throttled, throttled ns). v2 gives
/// `throttled_usec`, v1 `throttled_time` in ns.
pub fn parse_cpu_stat(text: &str) -> Option<(u64, u64, u64)> {
    let mut map = BTreeMap::new();
    for line in text.lines() {
        let mut f = line.split_whitespace();
        if let (Some(k), Some(v)) = (f.next(), f.next().and_then(|v| v.parse::<u64>().ok())) {
            map.insert(k, v);
        }
    }
    let throttled_ns = match (map.get("throttled_usec"), map.get("throttled_time")) {
        (Some(us), _) => us.saturating_mul(1000),
        (None, Some(ns)) => *ns,
        (None, None) => return None,
    };
    Some((*map.get("nr_periods")?, *map.get("nr_throttled")?, throttled_ns))
}

/// The quota and throttling of one cgroup directory, None when it has no quota.
fn read_level(version: u8, dir: &str, path: &str) -> Option<CgroupCpu> {
    let read = |name: &str| std::fs::read_to_string(format!("{dir}/{name}")).ok();
    let (quota_us, period_us) = if version == 2 {
        parse_cpu_max(&read("cpu.max")?)?
    } else {
        let quota: i64 = read("cpu.cfs_quota_us")?.trim().parse().ok()?;
        let period: u64 = read("cpu.cfs_period_us")?.trim().parse().ok()?;
        (u64::try_from(quota).ok()?, period)
    };
    let (nr_periods, nr_throttled, throttled_ns) = parse_cpu_stat(&read("cpu.stat")?)?;
    Some(CgroupCpu {
        version,
        path: path.to_string(),
        pids: Vec::new(),
        quota_us,
        period_us,
        nr_periods,
        nr_throttled,
        throttled_ns,
    })
}

/// `/a/b/c` -> `/a/b/c`, `/a/b`, `/a`, `/`.
fn ancestors(path: &str) -> Vec<String> {
    let mut out = vec![path.to_string()];
    let mut p = path.trim_end_matches('/').to_string();
    while let Some(i) = p.rfind('/') {
        p.truncate(i);
        out.push(if p.is_empty() { "/".to_string() } else { p.clone() });
        if p.is_empty() || out.len() >= MAX_LEVELS {
            break;
        }
    }
    out.dedup();
    out
}

/// The cgroups a process is in, with their ancestors: (version, path) of each level, in the
/// unified hierarchy and the v1 `cpu` one. Empty for a process gone.
pub fn levels_of(pid: u32) -> Vec<(u8, String)> {
    let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/cgroup")) else {
        return Vec::new();
    };
    parse_proc_cgroup(&text)
        .into_iter()
        .flat_map(|(version, path)| ancestors(&path).into_iter().map(move |l| (version, l)))
        .collect()
}

/// Family members' cgroups seen so far, kept so that a cgroup is still read after its
/// processes exit (its last throttling comes after the sample that saw them alive).
#[derive(Debug, Default)]
pub struct QuotaWatch {
    /// (version, path) -> the family's pids seen in it or below it
    levels: BTreeMap<(u8, String), Vec<u32>>,
}

impl QuotaWatch {
    /// Notes the cgroups of `live` members, then reads every level seen so far that has a
    /// quota. A hierarchy not mounted or a cgroup removed is left out.
    pub fn read(&mut self, live: &[u32], mounts: &CgroupMounts) -> Vec<CgroupCpu> {
        for &pid in live {
            for key in levels_of(pid) {
                let pids = self.levels.entry(key).or_default();
                if !pids.contains(&pid) {
                    pids.push(pid);
                }
            }
        }
        self.levels
            .iter()
            .filter_map(|((version, path), pids)| {
                let dir = mounts.dir(*version, path)?;
                let mut c = read_level(*version, &dir, path)?;
                c.pids = pids.clone();
                Some(c)
            })
            .collect()
    }
}

/// A CPU list as /proc/PID/status writes it (`0-3,8,10-11`).
pub fn parse_cpu_list(text: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.trim().parse::<u32>(), b.trim().parse::<u32>()) {
                    out.extend(a..=b.min(a.saturating_add(4096)));
                }
            }
            None => out.extend(part.trim().parse::<u32>().ok()),
        }
    }
    out
}

/// Steal time per CPU from /proc/stat, in the kernel's USER_HZ ticks: the 8th value of each
/// `cpuN` line.
pub fn parse_stat_steal(text: &str) -> BTreeMap<u32, u64> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let cpu: u32 = f.next()?.strip_prefix("cpu")?.parse().ok()?;
            let steal = f.nth(7)?.parse().ok()?;
            Some((cpu, steal))
        })
        .collect()
}

/// The steal time of the CPUs `pids` may run on (their Cpus_allowed_list), None when /proc/stat
/// has no steal column or no pid could be read.
pub fn read_steal(pids: &[u32]) -> Option<CpuSteal> {
    let mut cpus: Vec<u32> = pids
        .iter()
        .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/status")).ok())
        .filter_map(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                .map(parse_cpu_list)
        })
        .flatten()
        .collect();
    cpus.sort_unstable();
    cpus.dedup();
    if cpus.is_empty() {
        return None;
    }
    let steal = parse_stat_steal(&std::fs::read_to_string("/proc/stat").ok()?);
    if steal.is_empty() {
        return None;
    }
    let hz = procfs::ticks_per_second().max(1);
    let ticks: u64 = cpus.iter().filter_map(|c| steal.get(c)).sum();
    Some(CpuSteal {
        cpus,
        steal_ns: ticks.saturating_mul(1_000_000_000) / hz,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    #[test]
    fn the_cpu_hierarchies_are_found_in_mountinfo() {
        let m = CgroupMounts::parse(MOUNTINFO);
        assert_eq!(m.v1_cpu, Some(("/sys/fs/cgroup/cpu".into(), "/".into())));
        assert_eq!(m.v2, Some(("/sys/fs/cgroup/unified".into(), "/".into())));
        assert_eq!(m.dir(1, "/lab/x").as_deref(), Some("/sys/fs/cgroup/cpu/lab/x"));
        // cpuacct alone is no cpu controller; a combined mount is.
        let combined = "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n";
        assert_eq!(
            CgroupMounts::parse(combined).v1_cpu.map(|v| v.0),
            Some("/sys/fs/cgroup/cpu,cpuacct".into())
        );
        // Debian 12: pure v2 at /sys/fs/cgroup; a container's mount rooted below the hierarchy.
        let debian = "25 21 0:22 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n";
        let m = CgroupMounts::parse(debian);
        assert_eq!(
            m.dir(2, "/system.slice/x.scope").as_deref(),
            Some("/sys/fs/cgroup/system.slice/x.scope")
        );
        assert_eq!(m.v1_cpu, None);
        let rooted = "25 21 0:22 /docker/ab /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        let m = CgroupMounts::parse(rooted);
        assert_eq!(m.dir(2, "/docker/ab/sub").as_deref(), Some("/sys/fs/cgroup/sub"));
        assert_eq!(m.dir(2, "/elsewhere"), None);
        assert_eq!(unescape("/a\\040b"), "/a b");
    }

    #[test]
    fn proc_cgroup_gives_the_unified_and_the_v1_cpu_paths() {
        let text = "9:name=systemd:/\n2:cpuacct:/\n1:cpu:/scanprof-lab-1\n0::/user.slice\n";
        assert_eq!(
            parse_proc_cgroup(text),
            vec![(1, "/scanprof-lab-1".to_string()), (2, "/user.slice".to_string())]
        );
        assert_eq!(
            parse_proc_cgroup("0::/docker/ab12\n"),
            vec![(2, "/docker/ab12".to_string())]
        );
        assert_eq!(ancestors("/a/b/c"), vec!["/a/b/c", "/a/b", "/a", "/"]);
        assert_eq!(ancestors("/"), vec!["/"]);
        let mine = levels_of(std::process::id());
        assert!(mine.iter().any(|(_, p)| p == "/"), "{mine:?}");
    }

    #[test]
    fn quota_and_throttling_are_read_in_both_versions() {
        assert_eq!(parse_cpu_max("30000 100000\n"), Some((30000, 100000)));
        assert_eq!(parse_cpu_max("max 100000\n"), None);
        let v2 = "usage_usec 5000\nuser_usec 4000\nsystem_usec 1000\nnr_periods 50\nnr_throttled 35\nthrottled_usec 3500000\n";
        assert_eq!(parse_cpu_stat(v2), Some((50, 35, 3_500_000_000)));
        let v1 = "nr_periods 50\nnr_throttled 35\nthrottled_time 3500000123\n";
        assert_eq!(parse_cpu_stat(v1), Some((50, 35, 3_500_000_123)));
        assert_eq!(parse_cpu_stat("usage_usec 1\n"), None);
    }

    #[test]
    fn steal_is_the_eighth_value_of_each_cpu_line() {
        let stat = "cpu  3097748 7590 655113 2419763 13408 0 59974 2416 0 0\n\
                    cpu0 1488127 3215 332728 1265588 2973 0 26946 1255 0 0\n\
                    cpu1 1609620 4374 322385 1154175 10435 0 33027 1161 0 0\nintr 1 2\n";
        let s = parse_stat_steal(stat);
        assert_eq!(s.get(&0), Some(&1255));
        assert_eq!(s.get(&1), Some(&1161));
        assert_eq!(s.len(), 2);
        assert_eq!(parse_cpu_list("0-2,5,7-8\n"), vec![0, 1, 2, 5, 7, 8]);
    }

    #[test]
    fn this_process_has_steal_figures_for_its_cpus() {
        // Every Linux kernel since 2.6.11 writes the steal column; this process may run somewhere.
        let s = read_steal(&[std::process::id()]).expect("steal of this process's CPUs");
        assert!(!s.cpus.is_empty());
    }
}
