//! How big each map is, and what it costs: the entries of the maps sized from user space before
//! load (`--map-size NAME=ENTRIES`, defaults that fit a scanner family), and the memory the kernel
//! charges for every map scanprof created (each map fd's `memlock:` in /proc/self/fdinfo), which
//! `scanprof doctor` reports against the budget.

use std::collections::{BTreeMap, BTreeSet};
use std::os::fd::{AsFd, AsRawFd};

use libbpf_rs::{MapCore, MapType, Object, OpenObject};

use super::ProbeError;

/// Default entries of the maps whose size in the C declarations is more than a scanner family
/// needs. Every other map keeps its declared size. Ring buffers are sized in bytes.
pub const DEFAULT_SIZES: [(&str, u32); 7] = [
    // Family threads alive at once, plus those that exited during the current tick (user space
    // deletes them once read). 6.2 KB each: the largest map by far.
    ("threads", DEFAULT_THREADS),
    // Remote addresses the family sent to (LRU): the most recent 16384 are recognised when their
    // packets or replies are dropped after losing their socket.
    ("flows", 16384),
    // Distinct kernel stacks where a family send blocked.
    ("stacks", 1024),
    // Scanner uprobe calls in progress, by (thread, probe) (LRU).
    ("uprobe_entry", 4096),
    // (thread, probe) pairs whose call in progress a hand-over link counted (LRU).
    ("uprobe_handed", 1024),
    // Rare records (fork, exec, exit, blocking episodes), consumed every 50 ms: ~2,200 records.
    ("events", 512 << 10),
    // Records of rare scanner uprobe calls, consumed every 50 ms: ~750 records.
    ("calls", 256 << 10),
];

/// Slots for family threads by default.
const DEFAULT_THREADS: u32 = 1024;

/// The maps `--map-size threads=N` sizes: the records' array (indexed by slot, so not a
/// capacity type itself), the tid -> slot hash and the slot claims (probes/include/shared.h).
pub const THREAD_MAPS: [&str; 3] = ["threads", "thread_slots", "slot_owner"];

/// The most entries `--map-size` may give a map (a ring buffer: bytes).
pub const MAX_MAP_ENTRIES: u32 = 1 << 26;

/// What locked BPF memory scanprof keeps to by default (every map it creates, summed), in bytes.
/// A map sized up with `--map-size`, or per-CPU maps on a machine with many CPUs, can exceed it.
pub const MEMORY_BUDGET: u64 = 16_000_000;

/// The maps `--map-size` may size: hash, LRU, stack-trace and ring-buffer maps whose size is a
/// capacity that no program depends on. Not arrays (indexed by numbers the programs define), and
/// not the slot tables of the drop and device counters (`drop_slots`, `dev_slots` and their
/// `*_rows`: sized together with the arrays they index, by constants of the C code). Every name
/// asked for is checked against the objects at load, so a map renamed or turned into an array
/// stops the load instead of being sized wrongly.
pub const RESIZABLE: [&str; 15] = [
    "threads",
    "family",
    "flows",
    "sent_skbs",
    "target_socks",
    "target_devs",
    "stacks",
    "block_sites",
    "neighs",
    "devnames",
    "qdepth",
    "uprobe_entry",
    "uprobe_handed",
    "events",
    "calls",
];

/// Map types whose size is a capacity (hashes, stack traces, ring buffers).
fn capacity_type(t: MapType) -> bool {
    matches!(
        t,
        MapType::Hash
            | MapType::LruHash
            | MapType::PercpuHash
            | MapType::LruPercpuHash
            | MapType::StackTrace
            | MapType::RingBuf
    )
}

/// Entries of the maps sized before load: the defaults, with `--map-size` on top.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapSizes {
    entries: BTreeMap<String, u32>,
}

impl Default for MapSizes {
    fn default() -> Self {
        MapSizes {
            entries: DEFAULT_SIZES
                .iter()
                .map(|(name, n)| (name.to_string(), *n))
                .collect(),
        }
    }
}

impl MapSizes {
    /// Gives map `name` `entries` entries (bytes for a ring buffer). Whether such a map exists
    /// is checked at load, against the objects.
    pub fn set(&mut self, name: &str, entries: u32) {
        self.entries.insert(name.to_string(), entries);
    }

    /// The entries map `name` will get, if it is sized from user space.
    pub fn get(&self, name: &str) -> Option<u32> {
        self.entries.get(name).copied()
    }

    /// Slots for family threads: the entries of the `threads` array and of the maps that index
    /// it (`THREAD_MAPS`), sized together by `--map-size threads=N`.
    pub fn threads(&self) -> u32 {
        self.get("threads").unwrap_or(DEFAULT_THREADS)
    }

    /// Checks that every map named is one of `RESIZABLE`, and a map whose size is a capacity
    /// in one of the objects (`capacity`: the names `capacity_maps` found in each).
    pub(super) fn check(&self, capacity: &BTreeSet<String>) -> Result<(), ProbeError> {
        for name in self.entries.keys() {
            let what = if !RESIZABLE.contains(&name.as_str()) {
                format!(
                    "--map-size {name}: that map cannot be resized (maps that can: {})",
                    RESIZABLE.join(", ")
                )
            } else if !has_capacity(capacity, name) {
                format!(
                    "--map-size {name}: the probes have no hash, stack or ring buffer map of that name \
                     (src/probes/sizing.rs is out of date with probes/)"
                )
            } else {
                continue;
            };
            // Not an errno: the message says it all (an EINVAL here printed "os error 22" twice).
            return Err(ProbeError::MapSize(what));
        }
        Ok(())
    }

    /// Sets the size of every map of `obj` that is sized from user space. Call it before the
    /// object reuses the shared maps: a reused map takes its size from the map it reuses (libbpf
    /// copies max_entries from the fd), so a shared map is sized in the object that creates it.
    /// Only a map of `RESIZABLE` whose size is a capacity is sized: the objects load side by
    /// side, and `check` tells the user about any other name once every object was opened.
    pub(super) fn apply(&self, obj: &mut OpenObject) -> Result<(), ProbeError> {
        for mut map in obj.maps_mut() {
            let name = map.name().to_string_lossy().into_owned();
            let n = if THREAD_MAPS.contains(&name.as_str()) {
                Some(self.threads())
            } else if !RESIZABLE.contains(&name.as_str()) || !capacity_type(map.map_type()) {
                continue;
            } else {
                self.get(&name)
            };
            if let Some(n) = n {
                map.set_max_entries(n).map_err(|source| ProbeError::Bpf {
                    what: format!("sizing map {name} to {n} entries"),
                    source,
                })?;
            }
        }
        Ok(())
    }
}

/// Whether `--map-size name` names a capacity of the objects: a hash, stack or ring buffer map of
/// that name, or for `threads` (an array of slots) the hash that indexes it.
fn has_capacity(capacity: &BTreeSet<String>, name: &str) -> bool {
    capacity.contains(name) || (name == "threads" && capacity.contains(THREAD_MAPS[1]))
}

/// The maps of `obj` whose size is a capacity (hashes, stack traces, ring buffers), by name.
pub(super) fn capacity_maps(obj: &OpenObject) -> BTreeSet<String> {
    obj.maps()
        .filter(|map| capacity_type(map.map_type()))
        .map(|map| map.name().to_string_lossy().into_owned())
        .collect()
}

/// One BPF map scanprof created, and the memory the kernel charges for it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct MapMemory {
    pub name: String,
    /// kernel map id
    pub id: u32,
    pub max_entries: u32,
    /// bytes charged to scanprof for it (the `memlock:` of its fdinfo)
    pub memlock: u64,
}

/// Every distinct map of `objects` (a shared map once, however many objects reuse it), with its
/// fdinfo figures, largest first.
pub(super) fn map_memory<'a>(objects: impl Iterator<Item = &'a Object>) -> Vec<MapMemory> {
    let mut seen: BTreeMap<u32, MapMemory> = BTreeMap::new();
    for obj in objects {
        for map in obj.maps() {
            let fd = map.as_fd().as_raw_fd();
            let Some(info) = fdinfo(fd) else { continue };
            seen.entry(info.id).or_insert(MapMemory {
                name: map.name().to_string_lossy().into_owned(),
                ..info
            });
        }
    }
    let mut out: Vec<MapMemory> = seen.into_values().collect();
    out.sort_by(|a, b| b.memlock.cmp(&a.memlock).then(a.name.cmp(&b.name)));
    out
}

/// A map fd's kernel id, max_entries and memlock, from /proc/self/fdinfo.
fn fdinfo(fd: i32) -> Option<MapMemory> {
    let text = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")).ok()?;
    parse_fdinfo(&text)
}

/// The fields of a map fd's fdinfo text that `MapMemory` holds (the name is not in it).
pub fn parse_fdinfo(text: &str) -> Option<MapMemory> {
    let field = |key: &str| -> Option<u64> {
        text.lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
            .and_then(|v| v.trim().parse().ok())
    };
    Some(MapMemory {
        name: String::new(),
        id: u32::try_from(field("map_id")?).ok()?,
        max_entries: u32::try_from(field("max_entries")?).ok()?,
        memlock: field("memlock")?,
    })
}

/// "12.3 MB" (10^6 bytes).
pub fn megabytes(bytes: u64) -> String {
    format!("{:.1} MB", bytes as f64 / 1e6)
}

/// One line for people: the total, then the maps of at least 0.1 MB by name, largest first,
/// and the rest summed ("locked BPF memory: 11.2 MB (threads 6.4 MB, flows 1.6 MB, ..., 14
/// smaller maps 0.3 MB)").
pub fn describe(maps: &[MapMemory]) -> String {
    let total: u64 = maps.iter().map(|m| m.memlock).sum();
    let (big, small): (Vec<&MapMemory>, Vec<&MapMemory>) = maps.iter().partition(|m| m.memlock >= 100_000);
    let mut parts: Vec<String> = big
        .iter()
        .map(|m| format!("{} {}", m.name, megabytes(m.memlock)))
        .collect();
    if !small.is_empty() {
        parts.push(format!(
            "{} smaller maps {}",
            small.len(),
            megabytes(small.iter().map(|m| m.memlock).sum())
        ));
    }
    format!("{} ({})", megabytes(total), parts.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fdinfo_of_a_map_is_read() {
        let text = "pos:\t0\nflags:\t02000002\nmnt_id:\t16\nino:\t2077\nmap_type:\t1\nkey_size:\t4\n\
                    value_size:\t6184\nmax_entries:\t1024\nmap_flags:\t0x0\nmap_extra:\t0x0\n\
                    memlock:\t6392336\nmap_id:\t845\nfrozen:\t0\n";
        let m = parse_fdinfo(text).expect("parsed");
        assert_eq!((m.id, m.max_entries, m.memlock), (845, 1024, 6_392_336));
        assert!(
            parse_fdinfo("pos:\t0\nflags:\t02\n").is_none(),
            "not a map's fdinfo"
        );
    }

    #[test]
    fn the_description_names_big_maps_and_sums_the_rest() {
        let m = |name: &str, memlock| MapMemory {
            name: name.into(),
            id: 0,
            max_entries: 1,
            memlock,
        };
        let maps = [
            m("threads", 6_392_336),
            m("flows", 1_573_000),
            m("health", 504),
            m("sock_gen", 320),
        ];
        assert_eq!(
            describe(&maps),
            "8.0 MB (threads 6.4 MB, flows 1.6 MB, 2 smaller maps 0.0 MB)"
        );
    }

    #[test]
    fn every_default_is_a_resizable_map() {
        for (name, _) in DEFAULT_SIZES {
            assert!(RESIZABLE.contains(&name), "{name}");
        }
    }

    #[test]
    fn defaults_are_overridden_by_name() {
        let mut s = MapSizes::default();
        assert_eq!(s.get("threads"), Some(1024));
        assert_eq!(s.get("drops"), None, "drops keeps its declared size");
        s.set("threads", 4096);
        s.set("drops", 16384);
        assert_eq!((s.get("threads"), s.get("drops")), (Some(4096), Some(16384)));
    }

    #[test]
    fn threads_sizes_the_slot_array_and_the_maps_that_index_it() {
        let mut s = MapSizes::default();
        assert_eq!(s.threads(), 1024);
        s.set("threads", 4096);
        assert_eq!(
            s.threads(),
            4096,
            "the fork program's slot search spans the same entries"
        );
        // `threads` is an array now, not a capacity: the name is accepted because its index, a
        // hash, is among the objects' capacity maps.
        let others = DEFAULT_SIZES
            .iter()
            .map(|(n, _)| n.to_string())
            .filter(|n| n != "threads");
        let capacity: BTreeSet<String> = others.clone().chain(["thread_slots".to_string()]).collect();
        assert!(s.check(&capacity).is_ok());
        let without: BTreeSet<String> = others.collect();
        assert!(
            s.check(&without).is_err(),
            "no thread maps in the objects: refused"
        );
    }
}
