//! Attaches a scanner profile's uprobes (`[[probe]]` in wrappers/*.toml) to the family's
//! processes as they appear, and decodes what the probes stream into `ProbeCall`s: arguments,
//! return values and fields of a buffer by the profile's types, and global variables the profile
//! asks to read when a function returns. A symbol missing from a stripped binary leaves a note
//! naming the symbol and the file; the run carries on at syscall level.

use std::collections::{BTreeMap, HashMap};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

use blazesym::inspect::source::{Elf, Source};
use blazesym::inspect::Inspector;
use serde::{Deserialize, Serialize};

use crate::probes::{sp_call, sp_ucall_kind, LinkFor, ProbeSet, UprobeCapture};
use crate::wrappers::{ArgType, Probe, ProbeRole, ScannerProfile};

/// Which per-packet probes to switch on (they cost a uprobe hit per packet).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum PerPacket {
    /// none: the default
    #[default]
    Off,
    /// every per-packet probe of the profile
    All,
    /// these probes by name
    Named(Vec<String>),
}

/// One call of a rare probe: its entry, or its return.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeCall {
    pub probe: String,
    /// the probe's role (`rate_setup`, `ipc_send`...)
    pub role: ProbeRole,
    pub pid: u32,
    pub tid: u32,
    /// CLOCK_MONOTONIC ns
    pub ts_ns: u64,
    /// true at entry, false at return
    pub entry: bool,
    /// arguments and buffer fields (entry) or globals read (return), by the profile's names
    pub values: BTreeMap<String, f64>,
    /// the return value, at return, when the profile names its type
    pub ret: Option<f64>,
    /// return: time since the matching entry, ns
    pub inside_ns: u64,
    /// the thread's packets sent so far, and the entry time of its latest packet send
    pub packets: u64,
    pub last_pkt_ns: u64,
    /// role of the family member the message goes to, when the profile's `[[probe.recipient]]`
    /// rules tell (an `ipc_send` entry)
    #[serde(default)]
    pub recipient: Option<String>,
}

/// What became of one probe of the profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UprobeState {
    pub name: String,
    pub role: ProbeRole,
    pub symbol: String,
    /// the file it is attached to
    pub binary: Option<String>,
    pub per_packet: bool,
    /// switched on for this run (per-packet probes are off unless asked for)
    pub enabled: bool,
    pub attached: bool,
    /// processes it is attached for; empty with `attached` means every process mapping the file
    pub pids: Vec<u32>,
    pub hits: u64,
    pub returns: u64,
    pub inside_ns: u64,
    /// why it is not attached
    pub note: Option<String>,
}

/// A binary file, told apart by device and inode (paths differ across /proc/PID/root).
type FileId = (u64, u64);

/// An ahead link that a hand-over replaced, kept until the process's calls that may have entered
/// through it alone have returned: the kernel here (6.18) runs at a call's return only the
/// return probes that were attached at its entry, so detaching it at once could lose such a
/// return (seen: send, 59,999 returns of 60,000 calls, on a loaded machine).
struct Retiring {
    probe: u32,
    pid: u32,
    /// CLOCK_MONOTONIC ns once the hand-over's links were attached: a call that entered before
    /// may have had only the ahead link's return probe
    since_ns: u64,
    links: Vec<usize>,
}

/// How long a replaced ahead link waits at most for the calls it saw enter (a call that never
/// returns, such as one left by longjmp, leaves its entry time behind), in ns. Meanwhile other
/// processes running the file keep paying for its hits.
const RETIRE_WAIT_NS: u64 = 10_000_000_000;

/// The profile's probes for one session.
pub struct ScannerProbes {
    profile: ScannerProfile,
    states: Vec<UprobeState>,
    /// (probe index, file, pid or None for every process) attached, and their links
    attached: HashMap<(usize, FileId, Option<u32>), Vec<usize>>,
    /// ahead links replaced by a hand-over, detached by [`ScannerProbes::retire_ahead_links`]
    retiring: Vec<Retiring>,
    /// (file, symbol) -> (file offset, virtual address), or why not
    symbols: HashMap<(FileId, String), Result<(u64, u64), String>>,
    inspector: Inspector,
    /// role of each family process the profile recognised
    roles: BTreeMap<u32, String>,
}

impl ScannerProbes {
    /// Prepares the profile's probes and tells the BPF side what each one captures.
    pub fn new(profile: ScannerProfile, per_packet: &PerPacket, probes: &ProbeSet) -> ScannerProbes {
        let states = profile
            .probes
            .iter()
            .map(|p| UprobeState {
                name: p.name.clone(),
                role: p.role,
                symbol: p.symbol.clone(),
                binary: None,
                per_packet: p.per_packet,
                enabled: !p.per_packet
                    || match per_packet {
                        PerPacket::Off => false,
                        PerPacket::All => true,
                        PerPacket::Named(names) => names.iter().any(|n| n == &p.name),
                    },
                attached: false,
                pids: Vec::new(),
                hits: 0,
                returns: 0,
                inside_ns: 0,
                note: None,
            })
            .collect::<Vec<_>>();
        let mut me = ScannerProbes {
            profile,
            states,
            attached: HashMap::new(),
            retiring: Vec::new(),
            symbols: HashMap::new(),
            inspector: Inspector::new(),
            roles: BTreeMap::new(),
        };
        match probes.uprobes() {
            None => {
                for s in &mut me.states {
                    s.note = Some("this kernel did not load scanprof's uprobe programs".into());
                }
            }
            Some(u) => {
                for (i, p) in me.profile.probes.iter().enumerate() {
                    let capture = UprobeCapture {
                        record: !p.per_packet,
                        buffer: p
                            .buffer
                            .as_ref()
                            .map(|b| (b.ptr_arg, b.len_arg, b.max_bytes as u16)),
                    };
                    if let Err(e) = u.configure(i as u32, capture) {
                        me.states[i].note = Some(e.to_string());
                    }
                }
            }
        }
        for s in me.states.iter_mut().filter(|s| !s.enabled) {
            s.note = Some("per-packet probe, off by default (--per-packet to switch it on)".into());
        }
        me
    }

    pub fn profile(&self) -> &ScannerProfile {
        &self.profile
    }

    /// Roles of the family processes recognised so far.
    /// Whether the roles are guesses of a fallback profile (one that recognises no process).
    pub fn guesses_roles(&self) -> bool {
        self.profile.fallback
    }

    pub fn roles(&self) -> &BTreeMap<u32, String> {
        &self.roles
    }

    /// Attaches the rare probes ahead of the processes, for every process that runs the file:
    /// to `anchor_exe` (the command about to be launched, or the process attached to) for the role
    /// that recognises it, and to the files where the profile says its other executables usually
    /// are (`paths`, relative to the anchor's directory). A process exec'd later is then probed
    /// from its first call; the programs count only the family.
    /// With `launched`, per-packet probes switched on are attached ahead to the anchor too (the
    /// command is scanprof's own, so nobody else is expected to run that file meanwhile).
    pub fn attach_ahead(&mut self, probes: &mut ProbeSet, anchor_exe: &Path, launched: bool) {
        let dir = anchor_exe.parent().map(Path::to_path_buf).unwrap_or_default();
        let anchor = anchor_exe.display().to_string();
        let base = anchor.rsplit('/').next().unwrap_or(&anchor).to_string();
        let rules: Vec<(String, Vec<String>)> = self
            .profile
            .processes
            .iter()
            .map(|r| {
                // The anchor itself is the executable of the role that recognises it.
                let mut paths = r.paths.clone();
                if r.exe.iter().any(|e| *e == base || *e == anchor) {
                    paths.insert(0, anchor.clone());
                }
                (r.role.clone(), paths)
            })
            .collect();
        for (role, paths) in rules {
            for p in paths {
                let is_anchor = p == anchor;
                let path = if p.starts_with('/') {
                    PathBuf::from(&p)
                } else {
                    dir.join(&p)
                };
                let Ok(path) = path.canonicalize() else { continue };
                let indices: Vec<usize> = (0..self.profile.probes.len())
                    .filter(|&i| {
                        let pr = &self.profile.probes[i];
                        let when = !pr.per_packet || (launched && is_anchor);
                        pr.binary == role && pr.library.is_none() && when && self.states[i].enabled
                    })
                    .collect();
                for i in indices {
                    self.attach_one(probes, i, &path, None);
                }
            }
        }
        // A probe on a shared library the scanner loads (masscan dlopens libpcap after start-up)
        // goes on the library file ahead too, for a launched command: attached only when the
        // scanner's exec record was read, it missed the calls made before that (under load,
        // masscan's first 261 of 4,000 pcap_sendpacket calls). The library is the one the
        // usual directories hold, as at the exec; each member's own link takes over from this
        // one when its exec is read (a per-packet probe's hits of other processes then stop).
        if launched {
            let indices: Vec<usize> = (0..self.profile.probes.len())
                .filter(|&i| self.profile.probes[i].library.is_some() && self.states[i].enabled)
                .collect();
            for i in indices {
                let lib = self.profile.probes[i].library.clone().unwrap_or_default();
                if let Some(file) = library_in_usual_dirs(&lib) {
                    self.attach_one(probes, i, &file, None);
                }
            }
        }
    }

    /// A family process appeared (at attach, fork or exec): recognises its role and attaches
    /// the probes the profile names for it. Returns its role.
    pub fn on_member(&mut self, probes: &mut ProbeSet, pid: u32, exe: &str, comm: &str) -> Option<String> {
        // What the process runs now, read once: its role and the file its probes go on must
        // agree even if it execs meanwhile (a fork record read after the child's exec).
        let resolved = std::fs::read_link(format!("/proc/{pid}/exe"))
            .ok()
            .filter(|p| !p.to_string_lossy().ends_with(" (deleted)"));
        let resolved_text = resolved.as_ref().map(|p| p.display().to_string());
        let exe = resolved_text.as_deref().unwrap_or(exe);
        let base = exe.rsplit('/').next().unwrap_or(exe);
        let role = self
            .profile
            .processes
            .iter()
            .find(|r| {
                r.exe.iter().any(|e| e == exe || e == base)
                    || r.comm
                        .iter()
                        .any(|c| !comm.is_empty() && c.as_bytes()[..c.len().min(15)] == *comm.as_bytes())
            })
            .or_else(|| {
                self.profile
                    .fallback
                    .then(|| self.profile.processes.first())
                    .flatten()
            })
            .map(|r| r.role.clone())?;
        self.roles.insert(pid, role.clone());
        // The file as the process sees it (its mount namespace), not whatever it runs later.
        let exe_path = match &resolved {
            Some(p) => PathBuf::from(format!("/proc/{pid}/root{}", p.display())),
            None => PathBuf::from(format!("/proc/{pid}/exe")),
        };
        for i in 0..self.profile.probes.len() {
            let p = &self.profile.probes[i];
            if !self.states[i].enabled {
                continue;
            }
            let file = if p.binary == role {
                match &p.library {
                    None => Some(exe_path.clone()),
                    Some(lib) => find_library(pid, lib),
                }
            } else if p.binary.starts_with('/') && (p.binary == exe) {
                Some(exe_path.clone())
            } else {
                continue;
            };
            match file {
                Some(f) => self.attach_one(probes, i, &f, Some(pid)),
                None => {
                    let lib = p.library.clone().unwrap_or_default();
                    self.states[i].note = Some(format!(
                        "library {lib} not found for pid {pid}: {} is measured at syscall level only",
                        p.symbol
                    ));
                }
            }
        }
        Some(role)
    }

    fn attach_one(&mut self, probes: &mut ProbeSet, i: usize, file: &Path, pid: Option<u32>) {
        let Ok(meta) = std::fs::metadata(file) else { return };
        let id: FileId = (meta.dev(), meta.ino());
        // A per-packet probe attached ahead for every process running the file is swapped for one
        // filtered to the process once it is known: others running the same file (scanprof's own
        // binary, another scan) then stop paying for its hits.
        let per_packet = self.profile.probes[i].per_packet;
        let swap = per_packet && pid.is_some() && self.attached.contains_key(&(i, id, None));
        let already = self.attached.contains_key(&(i, id, pid))
            || (!swap && self.attached.contains_key(&(i, id, None)));
        if already {
            if let Some(pid) = pid {
                if !self.states[i].pids.contains(&pid) {
                    self.states[i].pids.push(pid);
                }
            }
            return;
        }
        let probe = self.profile.probes[i].clone();
        let shown = std::fs::canonicalize(file).unwrap_or_else(|_| file.to_path_buf());
        let offset = match self.symbol(file, id, &probe) {
            Ok((offset, _)) => offset,
            Err(why) => {
                self.states[i].note = Some(why);
                return;
            }
        };
        let Some(u) = probes.uprobes_mut() else { return };
        let ret = !probe.per_packet || probe.ret.is_some() || probe.role == ProbeRole::PaceWait;
        let to = match pid {
            None => LinkFor::Ahead,
            Some(pid) if swap => LinkFor::HandOver(pid),
            Some(pid) => LinkFor::Pid(pid),
        };
        match u.attach(i as u32, file, offset, to, ret) {
            Ok(keys) => {
                self.attached.insert((i, id, pid), keys);
                if let (true, Some(pid)) = (swap, pid) {
                    if let Some(global) = self.attached.remove(&(i, id, None)) {
                        if ret {
                            self.retiring.push(Retiring {
                                probe: i as u32,
                                pid,
                                since_ns: crate::system::monotonic_ns(),
                                links: global,
                            });
                        } else {
                            u.detach(&global);
                        }
                    }
                }
                let st = &mut self.states[i];
                st.attached = true;
                st.note = None;
                st.binary = Some(shown.display().to_string());
                if let Some(pid) = pid {
                    st.pids.push(pid);
                }
            }
            Err(e) => self.states[i].note = Some(e.to_string()),
        }
    }

    /// Detaches the ahead links replaced by a hand-over once no call of the process that entered
    /// before the hand-over is still in progress (or the process is gone, or it waited
    /// [`RETIRE_WAIT_NS`]). Call once a tick.
    pub fn retire_ahead_links(&mut self, probes: &mut ProbeSet) {
        if self.retiring.is_empty() {
            return;
        }
        let Some(u) = probes.uprobes_mut() else { return };
        let now = crate::system::monotonic_ns();
        self.retiring.retain(|r| {
            let tids: Vec<u32> = std::fs::read_dir(format!("/proc/{}/task", r.pid))
                .map(|dir| {
                    dir.flatten()
                        .filter_map(|e| e.file_name().to_str()?.parse().ok())
                        .collect()
                })
                .unwrap_or_default();
            let waiting = now.saturating_sub(r.since_ns) < RETIRE_WAIT_NS
                && u.call_in_progress(r.probe, &tids, r.since_ns);
            if !waiting {
                u.detach(&r.links);
            }
            waiting
        });
    }

    /// The file offset and address of a probe's symbol in `file`, cached per file.
    fn symbol(&mut self, file: &Path, id: FileId, probe: &Probe) -> Result<(u64, u64), String> {
        let key = (id, probe.symbol.clone());
        if let Some(r) = self.symbols.get(&key) {
            return r.clone();
        }
        let shown = std::fs::canonicalize(file).unwrap_or_else(|_| file.to_path_buf());
        let r = find_symbol(&self.inspector, file, &probe.symbol, probe.demangled).and_then(|found| {
            found.ok_or_else(|| {
                format!(
                    "symbol {} not found in {} (stripped, or another version): its figures come from the syscalls only",
                    probe.symbol,
                    shown.display()
                )
            })
        });
        self.symbols.insert(key, r.clone());
        r
    }

    /// Decodes the calls streamed since the last call; reads the globals a probe asks for
    /// at its return.
    pub fn drain(&mut self, probes: &ProbeSet) -> Vec<ProbeCall> {
        let raw = probes.drain_calls();
        raw.iter().filter_map(|c| self.decode(c)).collect()
    }

    fn decode(&mut self, c: &sp_call) -> Option<ProbeCall> {
        let probe = self.profile.probes.get(c.probe as usize)?.clone();
        let entry = sp_ucall_kind(c.kind) == sp_ucall_kind::SP_UCALL_ENTRY;
        let mut values = BTreeMap::new();
        let mut ret = None;
        let mut recipient = None;
        if entry {
            let buf = &c.buf[..(c.buf_len as usize).min(c.buf.len())];
            (values, recipient) = entry_values(&probe, &c.args, buf);
        } else {
            ret = probe.ret.map(|t| reg_value(c.ret, t));
            for r in &probe.reads {
                // The process's own executable (its exec record may not be processed yet).
                let file = PathBuf::from(format!("/proc/{}/exe", c.tgid));
                if let Some(v) = self.read_global(&file, c.tgid, &r.symbol, r.ty) {
                    values.insert(r.name.clone(), v);
                    if let Some(u) = &r.unit {
                        values.insert(format!("{}_unit_{u}", r.name), 1.0);
                    }
                }
            }
        }
        Some(ProbeCall {
            probe: probe.name.clone(),
            role: probe.role,
            pid: c.tgid,
            tid: c.tid,
            ts_ns: c.ts_ns,
            entry,
            values,
            ret,
            inside_ns: c.inside_ns,
            packets: c.packets,
            last_pkt_ns: c.last_pkt_ns,
            recipient,
        })
    }

    /// Reads a global variable of `pid` from its memory, at its symbol's address.
    fn read_global(&mut self, file: &Path, pid: u32, symbol: &str, ty: ArgType) -> Option<f64> {
        let meta = std::fs::metadata(file).ok()?;
        let id: FileId = (meta.dev(), meta.ino());
        let key = (id, symbol.to_string());
        let vaddr = match self.symbols.get(&key) {
            Some(r) => r.clone().ok()?.1,
            None => {
                let r = find_symbol(&self.inspector, file, symbol, false)
                    .and_then(|f| f.ok_or_else(|| format!("{symbol} not found")));
                self.symbols.insert(key, r.clone());
                r.ok()?.1
            }
        };
        let addr = runtime_address(pid, file, id, vaddr)?;
        let mem = std::fs::File::open(format!("/proc/{pid}/mem")).ok()?;
        let mut bytes = [0u8; 8];
        mem.read_exact_at(&mut bytes[..ty.size()], addr).ok()?;
        field_value(&bytes, 0, ty)
    }

    /// Every probe's state, with its hit counts as of now.
    pub fn states(&mut self, probes: &ProbeSet) -> Vec<UprobeState> {
        if let Some(u) = probes.uprobes() {
            for (i, st) in u.stats() {
                if let Some(s) = self.states.get_mut(i as usize) {
                    s.hits = st.hits;
                    s.returns = st.returns;
                    s.inside_ns = st.inside_ns;
                }
            }
        }
        self.states.clone()
    }
}

/// An entry's values by the profile's names: the register arguments and the buffer's fields
/// whose conditions hold (`buf` is the captured bytes behind the pointer); and the role of the
/// member the message goes to, by the first `[[probe.recipient]]` rule that holds.
pub fn entry_values(probe: &Probe, args: &[u64], buf: &[u8]) -> (BTreeMap<String, f64>, Option<String>) {
    let mut values = BTreeMap::new();
    for a in &probe.args {
        if a.ty != ArgType::Ptr {
            if let Some(r) = args.get(a.reg as usize) {
                values.insert(a.name.clone(), reg_value(*r, a.ty));
            }
        }
    }
    let Some(b) = &probe.buffer else {
        return (values, None);
    };
    for f in &b.fields {
        if let Some(cond) = &f.condition {
            if !cond.holds(values.get(&cond.field).copied()) {
                continue;
            }
        }
        if let Some(v) = field_value(buf, f.offset as usize, f.ty) {
            values.insert(f.name.clone(), v);
        }
    }
    let recipient = probe
        .recipients
        .iter()
        .find(|r| r.when.holds(values.get(&r.when.field).copied()))
        .map(|r| r.role.clone());
    values.insert("bytes".into(), buf.len() as f64);
    (values, recipient)
}

/// A register's value read as `ty`.
fn reg_value(v: u64, ty: ArgType) -> f64 {
    match ty {
        ArgType::U8 => (v & 0xff) as f64,
        ArgType::U16 => (v & 0xffff) as f64,
        ArgType::U32 => (v & 0xffff_ffff) as f64,
        ArgType::U64 | ArgType::Ptr => v as f64,
        ArgType::I32 => (v as u32 as i32) as f64,
        ArgType::I64 => (v as i64) as f64,
        ArgType::F32 => f32::from_bits(v as u32) as f64,
    }
}

/// A little-endian value at `offset` in `buf`, if it lies wholly inside.
fn field_value(buf: &[u8], offset: usize, ty: ArgType) -> Option<f64> {
    let bytes = buf.get(offset..offset + ty.size())?;
    let mut raw = [0u8; 8];
    raw[..bytes.len()].copy_from_slice(bytes);
    let v = u64::from_le_bytes(raw);
    Some(match ty {
        ArgType::F32 => f32::from_le_bytes([raw[0], raw[1], raw[2], raw[3]]) as f64,
        ArgType::U16 => (v & 0xffff) as f64,
        other => reg_value(v, other),
    })
}

/// (file offset, virtual address) of a function or variable in an ELF file: `.symtab` and
/// `.dynsym`. With `demangled`, `symbol` is a C++ name without parameters (`A::b`, `f`) and the
/// mangled symbol that starts with its Itanium encoding is taken.
fn find_symbol(
    inspector: &Inspector,
    file: &Path,
    symbol: &str,
    demangled: bool,
) -> Result<Option<(u64, u64)>, String> {
    let mut elf = Elf::new(file);
    // .symtab and .dynsym name what a uprobe needs; DWARF would only cost time.
    elf.debug_syms = false;
    let src = Source::Elf(elf);
    let shown = std::fs::canonicalize(file).unwrap_or_else(|_| file.to_path_buf());
    let err = |e: blazesym::Error| format!("reading the symbols of {}: {e}", shown.display());
    if !demangled {
        let found = inspector.lookup(&src, &[symbol]).map_err(err)?;
        return Ok(found
            .into_iter()
            .flatten()
            .next()
            .map(|s| (s.file_offset.unwrap_or(s.addr), s.addr)));
    }
    let prefix = itanium_prefix(symbol);
    let mut hit = None;
    inspector
        .for_each(&src, |s| {
            if s.name.starts_with(&prefix) {
                hit = Some((s.file_offset.unwrap_or(s.addr), s.addr));
                return std::ops::ControlFlow::Break(());
            }
            std::ops::ControlFlow::Continue(())
        })
        .map_err(err)?;
    Ok(hit)
}

/// The start of the Itanium mangling of a function name: `f` -> `_Z1f`, `A::b` -> `_ZN1A1bE`.
pub fn itanium_prefix(name: &str) -> String {
    let parts: Vec<&str> = name.split("::").collect();
    let enc: String = parts.iter().map(|p| format!("{}{p}", p.len())).collect();
    if parts.len() == 1 {
        format!("_Z{enc}")
    } else {
        format!("_ZN{enc}E")
    }
}

/// Where `vaddr` of `file` is in `pid`'s memory: the file's first mapping gives the load bias
/// of a position-independent file; a fixed-position executable is loaded where it says.
fn runtime_address(pid: u32, file: &Path, id: FileId, vaddr: u64) -> Option<u64> {
    let mut header = [0u8; 18];
    std::fs::File::open(file)
        .ok()?
        .read_exact_at(&mut header, 0)
        .ok()?;
    let e_type = u16::from_le_bytes([header[16], header[17]]);
    if e_type == 2 {
        return Some(vaddr); // ET_EXEC
    }
    let maps = procfs::process::Process::new(pid as i32).ok()?.maps().ok()?;
    let base = maps
        .iter()
        .filter(|m| m.inode == id.1 && m.offset == 0)
        .map(|m| m.address.0)
        .min()?;
    Some(base + vaddr)
}

/// A shared library `pid` maps whose file name is `lib` or starts with `lib.` (so that
/// `libdumbnet.so.1` finds `libdumbnet.so.1.0.1`); else the same name in the usual library
/// directories (a library the scanner will dlopen later).
fn find_library(pid: u32, lib: &str) -> Option<PathBuf> {
    let matches = |name: &str| name == lib || name.starts_with(&format!("{lib}."));
    if lib.starts_with('/') {
        return Some(PathBuf::from(lib)).filter(|p| p.exists());
    }
    if let Ok(maps) = procfs::process::Process::new(pid as i32).and_then(|p| p.maps()) {
        for m in maps {
            if let procfs::process::MMapPath::Path(p) = &m.pathname {
                let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
                if matches(name) {
                    return Some(PathBuf::from(format!("/proc/{pid}/root{}", p.display())));
                }
            }
        }
    }
    library_in_usual_dirs(lib)
}

/// A shared library by its file name (or a name it starts), as the usual library directories
/// hold it (the first match in the first directory that has one).
fn library_in_usual_dirs(lib: &str) -> Option<PathBuf> {
    let matches = |name: &str| name == lib || name.starts_with(&format!("{lib}."));
    if lib.starts_with('/') {
        return Some(PathBuf::from(lib)).filter(|p| p.exists());
    }
    let dirs = [
        "/lib/x86_64-linux-gnu",
        "/usr/lib/x86_64-linux-gnu",
        "/lib/aarch64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
        "/lib64",
        "/usr/lib64",
        "/lib",
        "/usr/lib",
        "/usr/local/lib",
    ];
    for d in dirs {
        let Ok(entries) = std::fs::read_dir(d) else {
            continue;
        };
        let mut found: Vec<PathBuf> = entries
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_str().is_some_and(matches))
            .map(|e| e.path())
            .collect();
        found.sort();
        if let Some(p) = found.into_iter().next() {
            return Some(p);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn itanium_prefixes() {
        assert_eq!(itanium_prefix("sendIPScanProbe"), "_Z15sendIPScanProbe");
        assert_eq!(
            itanium_prefix("PacketRateMeter::update"),
            "_ZN15PacketRateMeter6updateE"
        );
    }

    #[test]
    fn register_and_field_values() {
        assert_eq!(reg_value(0xffff_ffff_0000_03e8, ArgType::U32), 1000.0);
        assert_eq!(reg_value(0x0000_0000_ffff_ffff, ArgType::I32), -1.0);
        assert_eq!(reg_value(0x1_01, ArgType::U8), 1.0);
        let mut buf = vec![0u8; 16];
        buf[10..14].copy_from_slice(&1000u32.to_le_bytes());
        buf[4..8].copy_from_slice(&249.5f32.to_le_bytes());
        assert_eq!(field_value(&buf, 10, ArgType::U32), Some(1000.0));
        assert_eq!(field_value(&buf, 4, ArgType::F32), Some(249.5));
        assert_eq!(
            field_value(&buf, 14, ArgType::U32),
            None,
            "beyond the captured bytes"
        );
    }

    #[test]
    fn finds_exported_functions_in_scanprofs_own_binary() {
        // The test binary links the sender module, whose functions are exported by name.
        let me = std::env::current_exe().unwrap();
        let found = find_symbol(&Inspector::new(), &me, "scanprof_sender_wait_slot", false).unwrap();
        assert!(found.is_some_and(|(off, addr)| off > 0 && addr > 0));
        let missing = find_symbol(&Inspector::new(), &me, "no_such_function_here", false).unwrap();
        assert_eq!(missing, None);
    }
}
