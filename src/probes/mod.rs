//! Loads the BPF objects built from probes/*.bpf.c, attaches them, and reads their maps.
//! This is the only module that touches libbpf-rs: it hands the rest of scanprof plain values
//! (the generated ABI types of probes/include/wire.h) and never a libbpf handle.

pub mod clock_floor;
pub mod device_stages;
pub mod exec_watch;
mod hooks;
mod kernel;
mod sizing;
mod stats;
mod syscall_hooks;
mod tids;
mod udp_refused;
mod uprobe;

use std::collections::{BTreeMap, BTreeSet};
use std::mem::{size_of, MaybeUninit};
use std::os::fd::AsFd;
use std::sync::mpsc;

use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{Link, MapCore, MapFlags, MapHandle, Object, OpenObject};
use thiserror::Error;

use crate::system::startup::mark as timing;

pub use device_stages::DeviceStages;
/// The family's refused datagrams (drops.bpf.c's on_udp_fail; probes/include/wire.h).
pub use drops_skel::types::{sp_udp_refusal, sp_udp_refused, sp_udp_refused_key};
pub use hooks::hook_sections;
pub use kernel::{KernelFeatures, SYSCALL_TRACEPOINTS, TRACEPOINTS};
pub use sizing::{
    describe as describe_map_memory, MapMemory, MapSizes, DEFAULT_SIZES, MAX_MAP_ENTRIES, MEMORY_BUDGET,
    RESIZABLE,
};
pub use stats::{BpfStats, ProgramRuntime};
pub use syscall_hooks::SyscallHooks;
pub use udp_refused::UDP_FAIL_PROG;
pub use uprobe::{
    sp_call, sp_ucall_kind, sp_uprobe_stats, LinkFor, UprobeCapture, Uprobes, UPROBE_ARGS, UPROBE_BUF,
    UPROBE_MAX,
};

/// Declares every BPF object built from probes/*.bpf.c, once, and derives from the rows what
/// names the objects: each object's skeleton module (`<name>_skel`, from build.rs's
/// `<name>.skel.rs`), `OBJECTS` (name, bytes, role), the `Objects` a run keeps, the `Wholes` it
/// may keep, and `StagedLoads` (each object after the core one loaded on its own thread, and
/// its results collected in the table's order). The objects loaded alone (the agent's exec
/// watcher, the timing floor) are loaded by their own modules, exec_watch.rs and clock_floor.rs.
macro_rules! bpf_objects {
    (
        core: $core:ident, $core_mod:ident, $core_builder:ident;
        degrading: [ $( $deg:ident, $deg_mod:ident, $deg_builder:ident, $deg_configure:path; )* ]
        whole: [ $( $whole:ident, $whole_mod:ident, $whole_builder:ident, $whole_configure:path,
                    $spec:ident = $spec_val:expr; )* ]
        alone: [ $( $alone:ident ),* ]
    ) => {
        #[allow(clippy::all, dead_code, unused_imports, non_camel_case_types, non_snake_case)]
        mod $core_mod {
            include!(concat!(env!("OUT_DIR"), "/", stringify!($core), ".skel.rs"));
        }
        $(
            #[allow(clippy::all, dead_code, unused_imports, non_camel_case_types, non_snake_case)]
            mod $deg_mod {
                include!(concat!(env!("OUT_DIR"), "/", stringify!($deg), ".skel.rs"));
            }
        )*
        $(
            #[allow(clippy::all, dead_code, unused_imports, non_camel_case_types, non_snake_case)]
            mod $whole_mod {
                include!(concat!(env!("OUT_DIR"), "/", stringify!($whole), ".skel.rs"));
            }
            const $spec: WholeSpec = $spec_val;
        )*

        /// Every BPF object built into this binary: a run's in load order, then those loaded alone.
        const OBJECTS: &[ObjectSpec] = &[
            ObjectSpec {
                name: stringify!($core),
                bytes: include_bytes!(concat!(env!("OUT_DIR"), "/", stringify!($core), ".bpf.o")),
                role: Role::Core,
            },
            $( ObjectSpec {
                name: stringify!($deg),
                bytes: include_bytes!(concat!(env!("OUT_DIR"), "/", stringify!($deg), ".bpf.o")),
                role: Role::Degrading,
            }, )*
            $( ObjectSpec {
                name: stringify!($whole),
                bytes: include_bytes!(concat!(env!("OUT_DIR"), "/", stringify!($whole), ".bpf.o")),
                role: Role::Whole($spec),
            }, )*
            $( ObjectSpec {
                name: stringify!($alone),
                bytes: include_bytes!(concat!(env!("OUT_DIR"), "/", stringify!($alone), ".bpf.o")),
                role: Role::Alone,
            }, )*
        ];

        /// The loaded objects a run needs, each through its generated skeleton: the maps
        /// scanprof reads are fields of these (`objects.netdev.maps.devs`), typed by the objects
        /// themselves. A map of shared.h is read through the family object, which created it.
        struct Objects {
            $core: Loaded<$core_mod::$core_builder>,
            $( $deg: Loaded<$deg_mod::$deg_builder>, )*
        }

        impl Objects {
            /// The objects in load order.
            fn iter(&self) -> impl Iterator<Item = &Object> {
                [self.$core.object(), $( self.$deg.object(), )*].into_iter()
            }
        }

        /// The objects that load whole or not at all: None where this kernel lacks or refused one.
        struct Wholes {
            $( $whole: Option<Loaded<$whole_mod::$whole_builder>>, )*
        }

        impl Wholes {
            /// The loaded ones, in load order.
            fn iter(&self) -> impl Iterator<Item = &Object> {
                [$( self.$whole.as_ref().map(|s| s.object()), )*].into_iter().flatten()
            }
        }

        /// The load of every object after the core one, each on a thread of its own.
        struct StagedLoads {
            $( $deg: StageLoad<Loaded<$deg_mod::$deg_builder>>, )*
            $( $whole: StageLoad<Loaded<$whole_mod::$whole_builder>>, )*
        }

        impl StagedLoads {
            /// Opens, configures and loads each object on its own thread (the CO-RE relocation
            /// against the kernel's BTF that each load does is most of the time); an open
            /// skeleton stays on the thread that opened it.
            fn run(stage: &Stage<'_>) -> StagedLoads {
                std::thread::scope(|scope| {
                    $( let $deg = spawn_load(scope, stringify!($deg), move || {
                        load_stage::<$deg_mod::$deg_builder>(
                            stringify!($deg),
                            stage,
                            |skel| $deg_configure(stage, skel),
                            Vec::new(),
                            true,
                        )
                    }); )*
                    $( let $whole = spawn_load(scope, stringify!($whole), move || {
                        load_whole::<$whole_mod::$whole_builder>(&$spec, stage, |skel| {
                            $whole_configure(stage, skel)
                        })
                    }); )*
                    StagedLoads {
                        $( $deg: join_load(stringify!($deg), $deg), )*
                        $( $whole: join_load(stringify!($whole), $whole), )*
                    }
                })
            }

            /// The names of the resizable maps of every object (opened, whether it then loaded
            /// or not).
            fn capacity(&self) -> impl Iterator<Item = &String> {
                [$( &self.$deg.capacity, )* $( &self.$whole.capacity, )*].into_iter().flatten()
            }

            /// The loaded objects beside the core one, and every load's status entries in the
            /// table's order: an object that degrades but did not load at all is the error; one
            /// that loads whole is left out with a status entry saying what is missing.
            fn into_loaded(
                self,
                $core: Loaded<$core_mod::$core_builder>,
                status: &mut Vec<ProbeStatus>,
            ) -> Result<(Objects, Wholes), ProbeError> {
                let objects = Objects {
                    $core,
                    $( $deg: {
                        status.extend(self.$deg.status);
                        self.$deg.skel?
                    }, )*
                };
                let wholes = Wholes {
                    $( $whole: {
                        status.extend(self.$whole.status);
                        match self.$whole.skel {
                            Ok(skel) => Some(skel),
                            Err(e) => {
                                status.extend($spec.not_loaded(&e));
                                None
                            }
                        }
                    }, )*
                };
                Ok((objects, wholes))
            }
        }
    };
}

// The table: one row per probes/*.bpf.c (`the_table_has_every_probe_source_once`). A row names
// the object (its file name), its skeleton module and builder, and what sets its `.rodata` and
// program variants before load; a whole-or-nothing object also what it needs of the kernel and
// what a run lacks without it.
bpf_objects! {
    core: family, family_skel, FamilySkelBuilder;
    degrading: [
        send_path, send_path_skel, SendPathSkelBuilder, configure_send_path;
        sched, sched_skel, SchedSkelBuilder, configure_sched;
        netdev, netdev_skel, NetdevSkelBuilder, configure_netdev;
        drops, drops_skel, DropsSkelBuilder, configure_drops;
    ]
    whole: [
        uprobes, uprobes_skel, UprobesSkelBuilder, no_settings, UPROBES = WholeSpec {
            object: "uprobes",
            program: "sp_uprobe_entry",
            needs: Some(Need::AttachCookie),
            missing: "what the scanner's own functions say (profile uprobes)",
            beside: &[],
        };
        rings, rings_skel, RingsSkelBuilder, no_settings, RINGS = WholeSpec {
            object: "rings",
            program: "sp_rings",
            needs: Some(Need::SockFromFile),
            missing: "the frames queued to and dropped at the family's packet-socket rings (ring_full)",
            beside: &[
                Beside { program: "on_close", missing: CLOSE_READ_MISSING },
                Beside { program: "on_exit_socks", missing: CLOSE_READ_MISSING },
            ],
        };
        replies, replies_skel, RepliesSkelBuilder, no_settings, REPLIES = WholeSpec {
            object: "replies",
            program: "on_netif_receive",
            needs: None,
            missing: "the replies that arrived for the family's flows (the reply funnel, lost_beyond_host)",
            beside: &[],
        };
        retrans, retrans_skel, RetransSkelBuilder, no_settings, RETRANS = WholeSpec {
            object: "retrans",
            program: "on_tcp_retransmit",
            needs: None,
            missing: "the kernel's SYN retransmissions for the family's connects (kernel SYN retransmissions)",
            beside: &[],
        };
    ]
    alone: [exec_watch, clock_floor]
}

use drops_skel::OpenDropsSkel;
use family_skel::FamilySkelBuilder;
use netdev_skel::OpenNetdevSkel;
use replies_skel::RepliesSkel;
use retrans_skel::RetransSkel;
use rings_skel::RingsSkel;
use sched_skel::OpenSchedSkel;
use send_path_skel::OpenSendPathSkel;
#[cfg(test)]
use {rings_skel::RingsSkelBuilder, uprobes_skel::UprobesSkelBuilder};

/// One BPF object built into scanprof (a row of `bpf_objects!`).
#[derive(Debug, Clone, Copy)]
struct ObjectSpec {
    /// its name: probes/<name>.bpf.c
    name: &'static str,
    /// the object's bytes (the skeleton embeds the same file to load it)
    bytes: &'static [u8],
    /// how it loads
    role: Role,
}

/// How an object of the table loads.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Role {
    /// Loaded first, on the calling thread: it creates the maps of shared.h that the others
    /// reuse. A run fails without it.
    Core,
    /// Loaded on a thread of its own, its rejected programs left out (`load_degrading`); a run
    /// fails if it does not load at all.
    Degrading,
    /// Loaded on a thread of its own, whole or not at all; without it a run lacks what its
    /// spec says.
    Whole(WholeSpec),
    /// Not one of a run's objects, loaded alone by a module of its own: `scanprof agent`'s exec
    /// watcher (exec_watch.rs), and the programs' timing floor (clock_floor.rs), which shares no
    /// map with the others.
    Alone,
}

/// An object that loads whole or not at all, and what a run lacks without it.
#[derive(Debug, Clone, Copy, PartialEq)]
struct WholeSpec {
    /// the object's name, as its row gives it
    object: &'static str,
    /// the program its status entry names (the one that is attached or serves the others)
    program: &'static str,
    /// what the kernel must offer for its load to be tried; None: always tried
    needs: Option<Need>,
    /// what a report lacks without it
    missing: &'static str,
    /// the object's other programs that a run attaches, each with a status entry of its own
    /// (without them, an object that did not load left those programs unnamed: on 5.10 doctor
    /// named rings.sp_rings but not rings.on_close and rings.on_exit_socks)
    beside: &'static [Beside],
}

/// A program of a whole-or-nothing object attached beside the one its row names.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Beside {
    /// its name in the object
    program: &'static str,
    /// what a report lacks without it
    missing: &'static str,
}

/// What a report lacks without the rings object's close reads (rings.bpf.c: on_close,
/// on_exit_socks).
const CLOSE_READ_MISSING: &str =
    "the frames that reached a packet socket after the last sample before it closed";

/// What a whole-or-nothing object needs of the kernel beyond BTF.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Need {
    /// BPF helper bpf_get_attach_cookie
    AttachCookie,
    /// BPF helper bpf_sock_from_file
    SockFromFile,
}

impl Need {
    /// Whether a kernel with these features offers it.
    fn met(self, features: &KernelFeatures) -> bool {
        match self {
            Need::AttachCookie => features.attach_cookie,
            Need::SockFromFile => features.sock_from_file,
        }
    }

    /// What it is, and which kernels have it.
    fn feature(self) -> &'static str {
        match self {
            Need::AttachCookie => "BPF helper bpf_get_attach_cookie (kernels 5.15 and later)",
            Need::SockFromFile => "BPF helper bpf_sock_from_file (kernels 5.11 and later)",
        }
    }
}

impl WholeSpec {
    /// Its status entry's name: object.program.
    fn status_name(&self) -> String {
        format!("{}.{}", self.object, self.program)
    }

    /// What it needs that a kernel with these features lacks; None: its load is tried.
    fn lacks(&self, features: &KernelFeatures) -> Option<Need> {
        self.needs.filter(|need| !need.met(features))
    }

    /// Its status entry once attached.
    fn attached(&self) -> ProbeStatus {
        ProbeStatus {
            name: self.status_name(),
            attached: true,
            error: None,
        }
    }

    /// Its status entry when it did not load or attach, `why`.
    fn not_attached(&self, why: impl std::fmt::Display) -> ProbeStatus {
        ProbeStatus {
            name: self.status_name(),
            attached: false,
            error: Some(format!("{why}; missing without it: {}", self.missing)),
        }
    }

    /// The status entries of an object that did not load (`why`): one for each program a run
    /// attaches of it, its row's program first. Where the kernel lacks what it needs, each
    /// entry names its own program as the one not loaded.
    fn not_loaded(&self, why: &ProbeError) -> Vec<ProbeStatus> {
        let mut status = vec![self.not_attached(why)];
        status.extend(self.beside.iter().map(|b| {
            let name = format!("{}.{}", self.object, b.program);
            let why = match why {
                ProbeError::KernelLacks { release, feature, .. } => ProbeError::KernelLacks {
                    what: name.clone(),
                    release: release.clone(),
                    feature: feature.clone(),
                }
                .to_string(),
                other => other.to_string(),
            };
            ProbeStatus {
                name,
                attached: false,
                error: Some(format!("{why}; missing without it: {}", b.missing)),
            }
        }));
        status
    }
}

/// Every BPF object built into this binary, by name: a run's in load order, then those loaded
/// alone, `scanprof agent`'s exec watcher and the timing floor (`--version` names them).
pub fn objects() -> impl Iterator<Item = (&'static str, &'static [u8])> {
    OBJECTS.iter().map(|o| (o.name, o.bytes))
}

/// One packet socket of the family and its kernel counters (probes/include/wire.h).
pub use rings_skel::types::{sp_ring, sp_ring_reads};

/// The shared ABI types (probes/include/wire.h), as generated by libbpf-cargo.
pub use family_skel::types::{
    sp_block_key, sp_block_val, sp_budget, sp_dev_key, sp_dev_name, sp_dev_stats, sp_drop_class, sp_drop_key,
    sp_drop_pkt, sp_event, sp_event_kind, sp_flow_key, sp_health, sp_member, sp_pkt_flags, sp_pkt_sampling,
    sp_qdepth, sp_sched_state, sp_thread,
};
use replies_skel::types::sp_reply_kind;

/// Number of buckets in the kernel's histograms (SP_HIST_BUCKETS in wire.h).
pub const HIST_BUCKETS: usize = 304;
/// errno slots per thread (SP_ERRNO_SLOTS in wire.h).
pub const ERRNO_SLOTS: usize = 128;
/// Classes of packets read by length (SP_RECV_CLASSES in wire.h): at most this many.
pub const RECV_CLASSES: usize = 4;
/// Kinds of reply counted at arrival (SP_RK_MAX in wire.h, enum sp_reply_kind).
pub const REPLY_KINDS: usize = 9;
/// Health counter slots (SP_H_MAX in wire.h).
pub const HEALTH_SLOTS: usize = 10;

// ABI drift between wire.h and the Rust side is a build error: the generated types follow the C
// header, these constants and sizes must follow them (352 bytes of scalars, of which 104 are the
// receive side's and 24 connect's, and two 48-byte budget snapshots in sp_thread, then the errno slots and two
// histograms, then the receive classes: 16 bytes in flight and three counters per class; 48
// bytes of scalars in sp_event, then comm and path). The sizes of sp_thread and
// sp_member, which user space writes into maps, are the sums of their fields' sizes: no padding.
const _: () = assert!(
    size_of::<sp_thread>() == 352 + 2 * 48 + 8 * (ERRNO_SLOTS + 2 * HIST_BUCKETS) + 16 + 3 * 8 * RECV_CLASSES
);
const _: () = assert!(size_of::<sp_member>() == 4 + 4 + 8);
const _: () = assert!(size_of::<sp_event>() == 48 + 16 + 160);
const _: () = assert!(size_of::<sp_drop_key>() == 32);
// sp_drop_pkt: 16 bytes of header, the 32-byte drop key, 24 of scalars, comm, then the bytes.
const _: () = assert!(size_of::<sp_drop_pkt>() == 16 + 32 + 24 + 16 + PKT_HDR);
/// Bytes of a dropped packet copied from its network header on (SP_PKT_HDR in wire.h).
pub const PKT_HDR: usize = sp_pkt_sampling::SP_PKT_HDR.0 as usize;
const _: () = assert!(size_of::<sp_dev_key>() == 16);
const _: () = assert!(size_of::<sp_dev_stats>() == 13 * 8 - 2 * 8);
const _: () = assert!(size_of::<sp_dev_name>() == 2 * 16);
const _: () = assert!(sp_health::SP_H_MAX.0 as usize == HEALTH_SLOTS);
// sp_ring: two u64, twelve u32, two u64 (the owner's reads), eight u32.
const _: () = assert!(size_of::<sp_ring>() == 2 * 8 + 12 * 4 + 2 * 8 + 8 * 4);
// sp_ring_reads: three u64, eighteen u32.
const _: () = assert!(size_of::<sp_ring_reads>() == 3 * 8 + 18 * 4);
const _: () = assert!(sp_reply_kind::SP_RK_MAX.0 as usize == REPLY_KINDS);

/// Times a read of the packet-socket iterator is taken again when a record says a family
/// PACKET_STATISTICS read ran during it (a few microseconds each, about once a second).
const RING_READ_TRIES: usize = 3;

/// Why the probes could not be set up.
#[derive(Debug, Error)]
pub enum ProbeError {
    /// Only when this process lacks the capabilities: with them held, a refused load is the
    /// kernel's verdict on the program (`Rejected`), never a privilege problem.
    #[error(
        "loading BPF programs was refused ({0}): scanprof needs CAP_BPF and CAP_PERFMON; run it as root"
    )]
    Permission(String),
    #[error("the kernel has no BTF (/sys/kernel/btf/vmlinux): scanprof needs CONFIG_DEBUG_INFO_BTF=y")]
    NoBtf,
    /// The kernel refused a program although the capabilities are held: its verifier (or a
    /// kernel feature it lacks).
    #[error(
        "{what} was rejected by kernel {release}: {reason}. This is a scanprof bug on this kernel, \
         not a privilege problem: please report it with the output of `SCANPROF_DEBUG=1 scanprof doctor`"
    )]
    Rejected {
        /// object.program, or the object when libbpf did not say which program
        what: String,
        /// `uname -r`
        release: String,
        /// the verifier's complaint (and the source line it points at), or libbpf's last word
        reason: String,
    },
    /// The kernel lacks what a program needs (a tracepoint, a BPF helper): the program is not
    /// loaded, and its figures are missing on this kernel only.
    #[error("kernel {release} has no {feature}, so {what} is not loaded")]
    KernelLacks {
        /// object.program
        what: String,
        /// `uname -r`
        release: String,
        /// what it lacks, and which kernels have it
        feature: String,
    },
    /// A `--map-size` that names no map the probes can resize: the user's to correct.
    #[error("{0}")]
    MapSize(String),
    #[error("{what}: {source}")]
    Bpf {
        what: String,
        #[source]
        source: libbpf_rs::Error,
    },
}

fn bpf_err(what: impl Into<String>) -> impl FnOnce(libbpf_rs::Error) -> ProbeError {
    let what = what.into();
    move |source| {
        if matches!(source.kind(), libbpf_rs::ErrorKind::PermissionDenied) && !bpf_privileged() {
            ProbeError::Permission(format!("{what}: {source}"))
        } else {
            ProbeError::Bpf { what, source }
        }
    }
}

/// A failed load of object `object`: a privilege problem only when the capabilities are
/// missing; otherwise the kernel rejected a program, named with the verifier's first complaint
/// from libbpf's log (captured by `capture_libbpf_log` since `log_from` was taken).
fn load_err(object: &str, log_from: usize) -> impl FnOnce(libbpf_rs::Error) -> ProbeError + '_ {
    move |source| {
        // EPERM and EACCES alike (libbpf-rs maps both to PermissionDenied).
        let denied = matches!(source.kind(), libbpf_rs::ErrorKind::PermissionDenied);
        if denied && !bpf_privileged() {
            return ProbeError::Permission(format!("loading the {object} probes: {source}"));
        }
        let log = LIBBPF_LOG.with(|l| {
            l.borrow()
                .get(log_from..)
                .map(<[String]>::to_vec)
                .unwrap_or_default()
        });
        let (program, reason) = rejection(&log);
        ProbeError::Rejected {
            what: match program {
                Some(p) => format!("program {object}.{p}"),
                None => format!("the {object} probes"),
            },
            release: kernel_release(),
            reason: reason.unwrap_or_else(|| source.to_string()),
        }
    }
}

/// Attaches the rings object's close programs (rings.bpf.c: a packet socket's counters read at
/// the family's close(2) of it and at its process's exit, before its release throws them away),
/// each with a status entry; their links join `links`. They are the programs RINGS names beside
/// sp_rings (`every_program_a_run_attaches_of_a_whole_object_is_in_its_row`).
fn attach_close_reads(skel: &RingsSkel<'static>, links: &mut Vec<Link>, status: &mut Vec<ProbeStatus>) {
    for (name, prog) in [
        ("rings.on_close", &skel.progs.on_close),
        ("rings.on_exit_socks", &skel.progs.on_exit_socks),
    ] {
        match prog.attach() {
            Ok(link) => {
                links.push(link);
                status.push(ProbeStatus {
                    name: name.into(),
                    attached: true,
                    error: None,
                });
            }
            Err(e) => status.push(ProbeStatus {
                name: name.into(),
                attached: false,
                error: Some(format!("{e}; missing without it: {CLOSE_READ_MISSING}")),
            }),
        }
    }
}

/// Capability bits (CapEff of /proc/self/status) that loading and attaching the probes needs:
/// CAP_SYS_ADMIN, or CAP_BPF together with CAP_PERFMON.
pub fn caps_allow_bpf(cap_eff: u64) -> bool {
    const CAP_SYS_ADMIN: u32 = 21;
    const CAP_PERFMON: u32 = 38;
    const CAP_BPF: u32 = 39;
    let has = |bit: u32| cap_eff >> bit & 1 == 1;
    has(CAP_SYS_ADMIN) || (has(CAP_BPF) && has(CAP_PERFMON))
}

/// This process's effective capability bits (CapEff in /proc/self/status), 0 if unreadable.
pub fn effective_caps() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .unwrap_or(0)
}

/// Whether this process holds what loading BPF programs needs.
pub fn bpf_privileged() -> bool {
    caps_allow_bpf(effective_caps())
}

/// The running kernel's release (`uname -r`).
pub fn kernel_release() -> String {
    nix::sys::utsname::uname()
        .map(|u| u.release().to_string_lossy().into_owned())
        .unwrap_or_else(|_| "(unknown release)".into())
}

/// From libbpf's messages during a failed load: the program it names and the verifier's
/// complaint. libbpf prints the verifier log of a rejected program in one message, between
/// `prog 'NAME': -- BEGIN PROG LOAD LOG --` and `-- END PROG LOAD LOG --`; the complaint is the
/// message lines after the last instruction, before the statistics ("processed N insns ..."), and
/// the last `; source` line before them says where. Without a log, libbpf's last message that
/// names a program is the reason.
pub fn rejection(log: &[String]) -> (Option<String>, Option<String>) {
    let prog_of = |line: &str| -> Option<String> {
        let rest = &line[line.find("prog '")? + 6..];
        Some(rest[..rest.find('\'')?].to_string())
    };
    let text = log.concat();
    if let Some(begin) = text.rfind("-- BEGIN PROG LOAD LOG --") {
        let head = &text[..begin];
        let program = head.lines().last().and_then(prog_of);
        let body = &text[begin..];
        let body = &body[..body.find("-- END PROG LOAD LOG --").unwrap_or(body.len())];
        let lines: Vec<&str> = body
            .lines()
            .skip(1)
            .map(str::trim)
            .filter(|l| {
                !l.is_empty()
                    && !l.starts_with("processed ")
                    && !l.starts_with("verification time")
                    && !l.starts_with("stack depth")
                    && !l.starts_with("libbpf:")
            })
            .collect();
        // The complaint: the message lines after the last instruction ("func 'kfree_skb' doesn't
        // have 4-th argument" / "invalid bpf_context access off=24 size=8").
        let last_insn = lines.iter().rposition(|l| l.starts_with(';') || is_insn(l));
        let first_msg = last_insn.map_or(0, |i| i + 1);
        if first_msg < lines.len() {
            let complaint = lines[first_msg..].join(": ");
            let at = lines[..first_msg]
                .iter()
                .rev()
                .find(|l| l.starts_with(';') && l.len() > 2)
                .map(|l| format!(" at `{}`", l.trim_start_matches(';').trim()));
            return (
                program,
                Some(format!("\"{complaint}\"{}", at.unwrap_or_default())),
            );
        }
        return (program, None);
    }
    let last = log
        .iter()
        .rev()
        .flat_map(|m| m.lines().rev())
        .find(|l| l.contains("prog '"));
    match last {
        Some(l) => (
            prog_of(l),
            Some(l.trim().trim_start_matches("libbpf: ").to_string()),
        ),
        None => (None, None),
    }
}

/// Whether a verifier log line is an instruction or register-state dump ("12: (bf) r1 = r6",
/// "12: R1_w=...", "from 4 to 9: ..."), as opposed to a message.
fn is_insn(line: &str) -> bool {
    let digits = line.chars().take_while(char::is_ascii_digit).count();
    let numbered = digits > 0 && line[digits..].starts_with(':');
    let registers = line.starts_with('R') && line.split_whitespace().all(|w| w.contains('='));
    numbered || registers || line.starts_with("from ") || line.starts_with("func#")
}

/// Settings frozen into the programs at load time.
#[derive(Debug, Clone)]
pub struct ProbeOptions {
    /// blocking episodes inside a send at least this long are streamed as events, ns
    pub block_event_min_ns: u64,
    /// entries of the maps sized before load (defaults, and `--map-size`)
    pub map_sizes: MapSizes,
    /// the lengths, bytes, at which packets read fall into the next class (`--recv-classes`):
    /// ascending, at most RECV_CLASSES - 1; empty: packets read are not classed
    pub recv_class_bounds: Vec<u32>,
    /// where the syscall programs hook (`--syscall-hooks`)
    pub syscall_hooks: SyscallHooks,
    /// whether the device-stage programs stay attached or run in windows (`--device-stages`)
    pub device_stages: DeviceStages,
}

impl Default for ProbeOptions {
    fn default() -> Self {
        ProbeOptions {
            block_event_min_ns: 1_000_000,
            map_sizes: MapSizes::default(),
            recv_class_bounds: Vec::new(),
            syscall_hooks: SyscallHooks::default(),
            device_stages: DeviceStages::default(),
        }
    }
}

/// One probe program and what became of it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ProbeStatus {
    /// object.program, e.g. "drops.on_kfree_skb"
    pub name: String,
    pub attached: bool,
    /// why it is not attached
    pub error: Option<String>,
}

/// Every loaded and attached probe, and the loaded objects whose maps scanprof reads.
pub struct ProbeSet {
    // Field order is drop order: links detach first, the objects close last.
    _links: Vec<Link>,
    /// the device-stage programs attached for the current window (`--device-stages sampled`;
    /// empty between windows); with exact device stages they are in `_links`
    device_links: Vec<(usize, Link)>,
    device_stages: DeviceStages,
    uprobes: Option<Uprobes>,
    ring: libbpf_rs::RingBuffer<'static>,
    events_rx: mpsc::Receiver<sp_event>,
    drop_pkts_rx: mpsc::Receiver<sp_drop_pkt>,
    calls_rx: mpsc::Receiver<sp_call>,
    tids: tids::TidBits,
    status: Vec<ProbeStatus>,
    /// run-time statistics of the programs above (closes the stats fd, if held, on drop)
    bpf_stats: BpfStats,
    objects: Objects,
    /// the packet-socket iterator (rings.bpf.c) and its link; None when this kernel refused it
    rings: Option<(RingsSkel<'static>, Link)>,
    /// the class bounds the receive programs were loaded with (ProbeOptions)
    recv_class_bounds: Vec<u32>,
    /// the counter of replies arriving for the family's flows (replies.bpf.c), attached; None
    /// when this kernel refused it
    replies: Option<(RepliesSkel<'static>, Link)>,
    /// the counter of the kernel's SYN retransmissions for the family's connects (retrans.bpf.c),
    /// attached; None when this kernel refused it
    retrans: Option<(RetransSkel<'static>, Link)>,
}

/// The skeleton that the open skeleton of builder `B` becomes when loaded.
type Loaded<B> = <<B as SkelBuilder<'static>>::Output as OpenSkel<'static>>::Output;

/// Opens object `name` through its skeleton. A skeleton borrows the place its `OpenObject` is
/// kept in for as long as it lives, and the ProbeSet that keeps the skeleton cannot lend from
/// itself, so that place is given the process's lifetime: one pointer (8 bytes) per object
/// opened, left behind when its skeleton drops (the object itself is closed then).
fn open_skel<B: SkelBuilder<'static> + Default>(name: &str) -> Result<B::Output, ProbeError> {
    let place: &'static mut MaybeUninit<OpenObject> = Box::leak(Box::new(MaybeUninit::uninit()));
    B::default()
        .open(place)
        .map_err(bpf_err(format!("opening the {name} probes")))
}

/// The kernel's features as `ProbeSet::load_with` gets them: known already, or being read on
/// another thread.
enum Features<'a> {
    Known(&'a KernelFeatures),
    Detecting(std::thread::JoinHandle<KernelFeatures>),
}

impl ProbeSet {
    /// Loads every probe object and attaches its programs. Programs the kernel lacks are
    /// left out with a status entry saying why; only a failure of the core (family
    /// tracking) is an error.
    pub fn load(opts: &ProbeOptions, features: &KernelFeatures) -> Result<ProbeSet, ProbeError> {
        if !features.btf {
            return Err(ProbeError::NoBtf);
        }
        Self::load_with(opts, Features::Known(features)).map(|(set, _)| set)
    }

    /// `load`, reading the kernel's features (`KernelFeatures::detect`: a parse of its BTF) on a
    /// thread of their own while the family object loads: only the objects after it need them.
    /// Returns the features too.
    pub fn load_detecting(opts: &ProbeOptions) -> Result<(ProbeSet, KernelFeatures), ProbeError> {
        if !std::path::Path::new("/sys/kernel/btf/vmlinux").exists() {
            return Err(ProbeError::NoBtf);
        }
        let detecting = std::thread::Builder::new()
            .name("scanprof-features".into())
            .spawn(KernelFeatures::detect)
            .map_err(|e| ProbeError::Bpf {
                what: format!("reading the kernel's features: {e}"),
                source: libbpf_rs::Error::from_raw_os_error(libc::EAGAIN),
            })?;
        Self::load_with(opts, Features::Detecting(detecting))
    }

    fn load_with(
        opts: &ProbeOptions,
        source: Features<'_>,
    ) -> Result<(ProbeSet, KernelFeatures), ProbeError> {
        capture_libbpf_log();
        let (family, mut capacity, tid_words) = open_family(&opts.map_sizes)?;
        let mark = log_mark();
        let family = family.load().map_err(load_err("family", mark))?;
        timing("family object loaded");
        let features = resolve_features(source)?;
        timing("kernel features read (beside the family object)");

        // The other objects only reuse the family object's maps: each is loaded on its own thread.
        let stage = Stage {
            opts,
            features: &features,
            family: family.object(),
        };
        let loads = StagedLoads::run(&stage);
        // Every name `--map-size` gave, against the maps of every object (opened, whether it
        // then loaded or not). A name that is no resizable map sized nothing meanwhile.
        capacity.extend(loads.capacity().cloned());
        opts.map_sizes.check(&capacity)?;
        let mut status = Vec::new();
        let (objects, wholes) = loads.into_loaded(family, &mut status)?;
        // Per-syscall hooks asked for where they cannot attach (no tracefs): said.
        status.extend(opts.syscall_hooks.usable().1);
        check_shared(objects.iter().chain(wholes.iter()))?;
        let family_maps = &objects.family.maps;
        let bpf_stats = BpfStats::of_objects(
            objects.iter().chain(wholes.iter()),
            MapHandle::try_from(&family_maps.prog_cost).map_err(bpf_err("opening map prog_cost"))?,
            MapHandle::try_from(&family_maps.cost_timing).map_err(bpf_err("opening map cost_timing"))?,
        );
        timing("objects loaded, shared maps checked");

        // Attached only now that every object is loaded and its maps checked: a program that
        // runs has the one family, thread table and socket cache every other program sees.
        let (mut links, device_links) = attach_programs(&objects, opts.device_stages, &mut status);
        if let Some(skel) = &wholes.rings {
            attach_close_reads(skel, &mut links, &mut status);
        }
        // The per-syscall programs' other calls (libbpf attached the one each section names).
        let (syscall_links, syscall_status) = syscall_hooks::attach_rest(objects.send_path.object());
        links.extend(syscall_links);
        status.extend(syscall_status);
        // The iterator's link is kept apart: each sample reads a new iterator made from it.
        let rings = attach_whole(&RINGS, wholes.rings, |s| s.progs.sp_rings.attach(), &mut status);
        let replies = attach_whole(
            &REPLIES,
            wholes.replies,
            |s| s.progs.on_netif_receive.attach(),
            &mut status,
        );
        let retrans = attach_whole(
            &RETRANS,
            wholes.retrans,
            |s| s.progs.on_tcp_retransmit.attach(),
            &mut status,
        );
        timing("programs attached");
        core_attached(&status)?;

        // The scanner uprobes are attached later, per binary, as the profile says.
        let uprobes = wholes.uprobes.map(Uprobes::new);
        let rx = EventRings::open(&objects, uprobes.as_ref())?;
        let set = ProbeSet {
            uprobes,
            ring: rx.ring,
            events_rx: rx.events,
            drop_pkts_rx: rx.drop_pkts,
            calls_rx: rx.calls,
            tids: tids::TidBits::map(&objects.family.maps.family_tids, tid_words)?,
            _links: links,
            device_links,
            device_stages: opts.device_stages,
            status,
            bpf_stats,
            objects,
            rings,
            recv_class_bounds: opts.recv_class_bounds.clone(),
            replies,
            retrans,
        };
        Ok((set, features))
    }

    /// How the device stages are counted (`--device-stages`).
    pub fn device_stages(&self) -> DeviceStages {
        self.device_stages
    }

    /// Whether the windowed device-stage programs are attached now (always, when exact).
    pub fn device_window_open(&self) -> bool {
        self.device_stages == DeviceStages::Exact || !self.device_links.is_empty()
    }

    /// Opens a device-stage window: attaches the windowed programs one by one (`--device-stages
    /// sampled`, or auto once it samples; nothing to do when exact or already open), saying
    /// when each was attached. `read` is called before the first call and after each one that
    /// attached (the collector reads the family's packets there).
    pub fn attach_device_stages(
        &mut self,
        read: &mut dyn FnMut(&ProbeSet),
    ) -> Result<Vec<device_stages::Switch>, ProbeError> {
        if self.device_window_open() {
            return Ok(Vec::new());
        }
        read(self);
        let mut switches = Vec::new();
        for program in 0..device_stages::WINDOWED.len() {
            let netdev = self.objects.netdev.object();
            match device_stages::attach_one(netdev, program, &mut self.device_links) {
                Ok(Some(s)) => {
                    switches.push(s);
                    read(self);
                }
                Ok(None) => {}
                Err(e) => {
                    self.detach_device_stages(&mut |_| {});
                    return Err(e);
                }
            }
        }
        Ok(switches)
    }

    /// Closes a device-stage window: detaches the windowed programs one by one (saying when
    /// each was detached, with `read` called before the first call and after each, as at
    /// `attach_device_stages`), then marks every note net_dev_queue left in `in_flight` stale
    /// (`dev_note_gen`), so that a packet queued before the window closed, or a later skb at the
    /// same address, is looked up afresh at net_dev_start_xmit rather than given an old note's
    /// owner and headers.
    pub fn detach_device_stages(&mut self, read: &mut dyn FnMut(&ProbeSet)) -> Vec<device_stages::Switch> {
        if self.device_stages == DeviceStages::Exact || self.device_links.is_empty() {
            return Vec::new();
        }
        read(self);
        let mut switches = Vec::new();
        for program in 0..device_stages::WINDOWED.len() {
            if let Some(s) = device_stages::detach_one(&mut self.device_links, program) {
                switches.push(s);
                read(self);
            }
        }
        if let Some(bss) = self.objects.netdev.maps.bss_data.as_deref_mut() {
            // SAFETY: `dev_note_gen` is a naturally aligned u32 in the object's mmapped .bss,
            // which lives as long as the skeleton; only this thread writes it, the programs
            // read it, and a volatile write stores the whole value at once.
            unsafe {
                let gen = std::ptr::read_volatile(&bss.dev_note_gen);
                std::ptr::write_volatile(&mut bss.dev_note_gen, gen.wrapping_add(1));
            }
        }
        switches
    }

    /// The programs' BPF run-time statistics: per program (name, run_cnt, run_time_ns) with
    /// `read()`, switched on and off by the caller.
    pub fn bpf_stats(&mut self) -> &mut BpfStats {
        &mut self.bpf_stats
    }

    /// The family's packet sockets and their kernel counters, as of now: one run of the
    /// packet-socket iterator (rings.bpf.c), run again (up to RING_READ_TRIES runs) while a
    /// record is not `settled` (a family PACKET_STATISTICS read was half done during it); the
    /// caller holds the counts of a socket still unsettled in the last run. Empty when the
    /// iterator is not attached or the family holds no packet socket.
    pub fn packet_rings(&self) -> Result<Vec<sp_ring>, ProbeError> {
        use std::io::Read;
        let Some((_, link)) = &self.rings else {
            return Ok(Vec::new());
        };
        let mut records = Vec::new();
        for _ in 0..RING_READ_TRIES {
            let mut iter =
                libbpf_rs::Iter::new(link).map_err(bpf_err("starting the packet-socket iterator"))?;
            let mut bytes = Vec::new();
            iter.read_to_end(&mut bytes).map_err(|e| ProbeError::Bpf {
                what: format!("reading the packet-socket iterator: {e}"),
                source: libbpf_rs::Error::from_raw_os_error(e.raw_os_error().unwrap_or(libc::EIO)),
            })?;
            records = bytes
                .chunks_exact(size_of::<sp_ring>())
                .filter_map(read_pod::<sp_ring>)
                .collect::<Vec<_>>();
            if records.iter().all(|r| r.settled != 0) {
                break;
            }
        }
        Ok(records)
    }

    /// What the family's PACKET_STATISTICS reads of the packet socket `sock` (a `struct sock *`)
    /// returned, summed (send_path), when any were seen and the entry is still there: the last
    /// sums of a socket the iterator no longer finds (closed after its owner's final read).
    pub fn ring_reads(&self, sock: u64) -> Option<sp_ring_reads> {
        let map = &self.objects.family.maps.ring_reads;
        map.lookup(&sock.to_ne_bytes(), MapFlags::ANY)
            .ok()
            .flatten()
            .and_then(|v| read_pod::<sp_ring_reads>(&v))
    }

    /// Every socket's entry whose close has been read (`closed` != 0), with its `struct sock *`:
    /// among them the sockets the rings iterator never saw, opened and closed between two
    /// samples. An entry the map drops while it is walked is left out.
    pub fn closed_ring_reads(&self) -> Vec<(u64, sp_ring_reads)> {
        let map = &self.objects.family.maps.ring_reads;
        map.keys()
            .filter_map(|k| {
                let sock = u64::from_ne_bytes(k.as_slice().try_into().ok()?);
                let v = map.lookup(&k, MapFlags::ANY).ok().flatten()?;
                read_pod::<sp_ring_reads>(&v)
                    .filter(|e| e.closed != 0)
                    .map(|e| (sock, e))
            })
            .collect()
    }

    /// Forgets a closed socket's PACKET_STATISTICS sums (after `ring_reads` took the last).
    pub fn forget_ring_reads(&self, sock: u64) {
        // Already gone (LRU) is fine.
        let _ = self.objects.family.maps.ring_reads.delete(&sock.to_ne_bytes());
    }

    /// The lengths at which packets read fall into the next class; empty when not classed.
    pub fn recv_class_bounds(&self) -> &[u32] {
        &self.recv_class_bounds
    }

    /// What was attached, and what was not and why.
    pub fn status(&self) -> &[ProbeStatus] {
        &self.status
    }

    /// Every map these probes created (a shared map once), with the memory the kernel charges
    /// for it, largest first: the table's objects, the uprobes', and the maps of the objects
    /// held beside them (the ring iterator, the reply and SYN-retransmission counters, the
    /// timing floor).
    pub fn map_memory(&self) -> Vec<MapMemory> {
        let uprobes = self.uprobes.as_ref().map(Uprobes::object);
        let rings = self.rings.as_ref().map(|(skel, _)| skel.object());
        let replies = self.replies.as_ref().map(|(skel, _)| skel.object());
        let retrans = self.retrans.as_ref().map(|(skel, _)| skel.object());
        let floor = self.bpf_stats.clock_floor_object();
        let beside = uprobes
            .into_iter()
            .chain(rings)
            .chain(replies)
            .chain(retrans)
            .chain(floor);
        sizing::map_memory(self.objects.iter().chain(beside))
    }

    /// Makes a process part of the traced family.
    pub fn add_member(&self, tgid: u32, ppid: u32, start_ns: u64, root: bool) -> Result<(), ProbeError> {
        let m = sp_member {
            ppid,
            flags: if root { 1 } else { 0 },
            start_ns,
        };
        self.objects
            .family
            .maps
            .family
            .update(&tgid.to_ne_bytes(), as_bytes(&m), MapFlags::ANY)
            .map_err(bpf_err(format!("adding pid {tgid} to the family")))
    }

    /// Starts tracking one thread of a family process. `now_ns` is CLOCK_MONOTONIC. The thread
    /// gets a free slot of the `threads` array, claimed in `slot_owner` as the fork program
    /// claims one (probes/family.bpf.c: the same search from the same hash of the tid).
    pub fn add_thread(&self, tid: u32, tgid: u32, now_ns: u64) -> Result<(), ProbeError> {
        let maps = &self.objects.family.maps;
        let key = tid.to_ne_bytes();
        let failed = |e| bpf_err(format!("tracking thread {tid}"))(e);
        // A thread the fork probe already saw keeps its slot and counters.
        if maps
            .thread_slots
            .lookup(&key, MapFlags::ANY)
            .map_err(failed)?
            .is_none()
        {
            let cap = maps.threads.max_entries().max(1);
            let from = tid.wrapping_mul(2_654_435_761);
            let mut slot = None;
            for i in 0..cap {
                let s = from.wrapping_add(i) % cap;
                match maps.slot_owner.update(&s.to_ne_bytes(), &key, MapFlags::NO_EXIST) {
                    Ok(()) => {
                        slot = Some(s);
                        break;
                    }
                    Err(e) if e.kind() == libbpf_rs::ErrorKind::AlreadyExists => {}
                    Err(e) => return Err(failed(e)),
                }
            }
            let Some(slot) = slot else {
                return Err(ProbeError::Bpf {
                    what: format!(
                        "tracking thread {tid}: all {cap} thread slots are taken (--map-size threads=N gives more)"
                    ),
                    source: libbpf_rs::Error::from_raw_os_error(libc::E2BIG),
                });
            };
            let t = sp_thread {
                tgid,
                tid,
                block_stack: -1,
                state_since_ns: now_ns,
                ..Default::default()
            };
            let s = slot.to_ne_bytes();
            maps.threads
                .update(&s, as_bytes(&t), MapFlags::ANY)
                .map_err(failed)?;
            match maps.thread_slots.update(&key, &s, MapFlags::NO_EXIST) {
                Ok(()) => {
                    let way = (tid % TID_SLOT_WAYS).to_ne_bytes();
                    let entry = [key, s].concat();
                    maps.tid_slots
                        .update(&way, &entry, MapFlags::ANY)
                        .map_err(failed)?;
                }
                // The fork probe gave it a slot meanwhile: that one stays, this one is emptied
                // (its record names the tid) and freed.
                Err(e) if e.kind() == libbpf_rs::ErrorKind::AlreadyExists => {
                    let _ = maps
                        .threads
                        .update(&s, as_bytes(&sp_thread::default()), MapFlags::ANY);
                    let _ = maps.slot_owner.delete(&s);
                }
                Err(e) => return Err(failed(e)),
            }
        }
        // Only now that its record exists: the hot programs look for it once the bit is set.
        self.tids.set(tid);
        Ok(())
    }

    /// Every tracked thread's record.
    pub fn threads(&self) -> Vec<sp_thread> {
        let maps = &self.objects.family.maps;
        maps.thread_slots
            .keys()
            .filter_map(|tid| {
                let slot = maps.thread_slots.lookup(&tid, MapFlags::ANY).ok().flatten()?;
                let rec = maps.threads.lookup(&slot, MapFlags::ANY).ok().flatten()?;
                let t = read_pod::<sp_thread>(&rec)?;
                (t.tid.to_ne_bytes()[..] == tid[..]).then_some(t)
            })
            .collect()
    }

    /// Stops tracking a thread (after its final counters were read): its slot is emptied and
    /// given back.
    pub fn forget_thread(&self, tid: u32) {
        let maps = &self.objects.family.maps;
        let key = tid.to_ne_bytes();
        // Already gone is fine.
        let Ok(Some(slot)) = maps.thread_slots.lookup(&key, MapFlags::ANY) else {
            return;
        };
        let _ = maps.thread_slots.delete(&key);
        let _ = maps
            .threads
            .update(&slot, as_bytes(&sp_thread::default()), MapFlags::ANY);
        let way = (tid % TID_SLOT_WAYS).to_ne_bytes();
        if let Ok(Some(entry)) = maps.tid_slots.lookup(&way, MapFlags::ANY) {
            if entry.get(..4) == Some(&key[..]) {
                let _ = maps.tid_slots.update(&way, &[0u8; 8], MapFlags::ANY);
            }
        }
        let _ = maps.slot_owner.delete(&slot);
    }

    /// Drop counts, summed over CPUs.
    pub fn drops(&self) -> Vec<(sp_drop_key, u64)> {
        let maps = &self.objects.drops.maps;
        slotted_rows(&maps.drop_slots, &maps.drops, |acc: &mut u64, v: &u64| *acc += *v)
    }

    /// Device counters, summed over CPUs.
    pub fn devices(&self) -> Vec<(sp_dev_key, sp_dev_stats)> {
        let maps = &self.objects.netdev.maps;
        slotted_rows(
            &maps.dev_slots,
            &maps.devs,
            |acc: &mut sp_dev_stats, v: &sp_dev_stats| {
                acc.queued += v.queued;
                acc.enqueued += v.enqueued;
                acc.dequeued += v.dequeued;
                acc.xmit_ok += v.xmit_ok;
                acc.xmit_busy += v.xmit_busy;
                acc.xmit_err += v.xmit_err;
                acc.xmit_bytes += v.xmit_bytes;
                acc.neigh_started += v.neigh_started;
                acc.neigh_queued += v.neigh_queued;
                acc.neigh_resolved += v.neigh_resolved;
                acc.neigh_failed += v.neigh_failed;
            },
        )
    }

    /// Deepest each qdisc got since the previous call (rows are deleted as they are read).
    pub fn take_qdepth(&self) -> Vec<(sp_dev_key, sp_qdepth)> {
        let qdepth = &self.objects.netdev.maps.qdepth;
        let rows = percpu_rows(qdepth, |acc: &mut sp_qdepth, v: &sp_qdepth| {
            acc.qlen_max = acc.qlen_max.max(v.qlen_max);
            acc.backlog_max = acc.backlog_max.max(v.backlog_max);
        });
        rows.into_iter()
            .map(|(raw, key, row)| {
                let _ = qdepth.delete(&raw);
                (key, row)
            })
            .collect()
    }

    /// Device names, with the kind of each one's root qdisc ("" when the device had none to
    /// read), by (ifindex, netns).
    pub fn device_names(&self) -> BTreeMap<(u32, u32), (String, String)> {
        let devnames = &self.objects.family.maps.devnames;
        devnames
            .keys()
            .filter_map(|k| {
                let key = read_pod::<sp_dev_key>(&k)?;
                let v = devnames.lookup(&k, MapFlags::ANY).ok().flatten()?;
                let name = read_pod::<sp_dev_name>(&v)?;
                Some((
                    (key.ifindex, key.netns),
                    (c_chars(&name.name), c_chars(&name.qdisc)),
                ))
            })
            .collect()
    }

    /// IPv4 addresses the family's packets went to (the `flows` map: the latest destinations,
    /// kept for drop attribution), at most `limit` of them. Read on demand only: the map holds
    /// up to its size in entries.
    pub fn flow_addresses_v4(&self, limit: usize) -> Vec<std::net::Ipv4Addr> {
        self.objects
            .family
            .maps
            .flows
            .keys()
            .filter_map(|k| read_pod::<sp_flow_key>(&k))
            .filter(|k| k.family == libc::AF_INET as u32)
            .map(|k| std::net::Ipv4Addr::new(k.addr[0], k.addr[1], k.addr[2], k.addr[3]))
            .take(limit)
            .collect()
    }

    /// Time spent blocked inside send syscalls, by process and kernel stack.
    pub fn block_sites(&self) -> Vec<(sp_block_key, sp_block_val)> {
        let block_sites = &self.objects.sched.maps.block_sites;
        block_sites
            .keys()
            .filter_map(|k| {
                let key = read_pod::<sp_block_key>(&k)?;
                let v = block_sites.lookup(&k, MapFlags::ANY).ok().flatten()?;
                Some((key, read_pod::<sp_block_val>(&v)?))
            })
            .collect()
    }

    /// Kernel return addresses of a stack id, innermost first.
    pub fn kernel_stack(&self, id: i32) -> Option<Vec<u64>> {
        if id < 0 {
            return None;
        }
        let v = self
            .objects
            .sched
            .maps
            .stacks
            .lookup(&(id as u32).to_ne_bytes(), MapFlags::ANY)
            .ok()
            .flatten()?;
        Some(
            v.chunks_exact(8)
                .map(|c| u64::from_ne_bytes(c.try_into().unwrap_or([0; 8])))
                .take_while(|a| *a != 0)
                .collect(),
        )
    }

    /// Health counters (enum sp_health), summed over CPUs.
    pub fn health(&self) -> [u64; HEALTH_SLOTS] {
        let mut out = [0u64; HEALTH_SLOTS];
        for (i, slot) in out.iter_mut().enumerate() {
            *slot = percpu_u64_sum(&self.objects.family.maps.health, i as u32);
        }
        out
    }

    /// Packets that arrived from the family's destinations, by kind (enum sp_reply_kind),
    /// summed over CPUs, since attach; None when the reply counter is not attached.
    pub fn reply_counts(&self) -> Option<[u64; REPLY_KINDS]> {
        let (skel, _) = self.replies.as_ref()?;
        let mut out = [0u64; REPLY_KINDS];
        for (i, slot) in out.iter_mut().enumerate() {
            *slot = percpu_u64_sum(&skel.maps.replies, i as u32);
        }
        Some(out)
    }

    /// SYNs the kernel retransmitted for the family's connecting sockets (sent ones), summed over
    /// CPUs, since attach; None when the retransmission counter is not attached.
    pub fn syn_retransmits(&self) -> Option<u64> {
        let (skel, _) = self.retrans.as_ref()?;
        Some(percpu_u64_sum(
            &skel.maps.syn_retrans,
            retrans_skel::types::sp_retrans_slot::SP_RT_SYN_SENT.0,
        ))
    }

    /// Records the probes streamed since the last call.
    pub fn drain_events(&self) -> Vec<sp_event> {
        // consume() reads without waiting; most records are submitted without a wake-up.
        let _ = self.ring.consume();
        self.events_rx.try_iter().collect()
    }

    /// Headers of the family's dropped packets streamed since the last call (`drain_events`
    /// reads the ring: call it first).
    pub fn drain_drop_packets(&self) -> Vec<sp_drop_pkt> {
        self.drop_pkts_rx.try_iter().collect()
    }

    /// Waits up to `timeout` for a record that asks for a wake-up (an exec), reading what
    /// arrived; the records are then returned by `drain_events` and `drain_calls`.
    pub fn wait(&self, timeout: std::time::Duration) {
        let _ = self.ring.poll(timeout);
    }

    /// Calls of rare scanner uprobes streamed since the last call.
    pub fn drain_calls(&self) -> Vec<sp_call> {
        let _ = self.ring.consume();
        self.calls_rx.try_iter().collect()
    }

    /// The scanner uprobes, if this kernel loaded them.
    pub fn uprobes(&self) -> Option<&Uprobes> {
        self.uprobes.as_ref()
    }

    pub fn uprobes_mut(&mut self) -> Option<&mut Uprobes> {
        self.uprobes.as_mut()
    }
}

thread_local! {
    /// libbpf's messages on this thread since the last `capture_libbpf_log` (loads are synchronous,
    /// so a load's messages are the ones after the index taken before it).
    static LIBBPF_LOG: std::cell::RefCell<Vec<String>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Keeps libbpf's warnings (a rejected program's verifier log among them) for `load_err`, and
/// prints its whole log to stderr only with SCANPROF_DEBUG set: scanprof reports what failed in
/// its own words.
fn capture_libbpf_log() {
    fn keep(level: libbpf_rs::PrintLevel, msg: String) {
        if std::env::var_os("SCANPROF_DEBUG").is_some() {
            eprint!("{msg}");
        }
        if level == libbpf_rs::PrintLevel::Warn {
            LIBBPF_LOG.with(|l| l.borrow_mut().push(msg));
        }
    }
    LIBBPF_LOG.with(|l| l.borrow_mut().clear());
    let level = if std::env::var_os("SCANPROF_DEBUG").is_some() {
        libbpf_rs::PrintLevel::Debug
    } else {
        libbpf_rs::PrintLevel::Warn
    };
    libbpf_rs::set_print(Some((level, keep)));
}

/// How many libbpf messages this thread has seen: a load's own messages follow this index.
fn log_mark() -> usize {
    LIBBPF_LOG.with(|l| l.borrow().len())
}

/// What every object after the family object is loaded with.
struct Stage<'a> {
    opts: &'a ProbeOptions,
    features: &'a KernelFeatures,
    /// the loaded family object, whose maps of shared.h the others reuse
    family: &'a Object,
}

/// One object's load on a thread of its own.
struct StageLoad<S> {
    /// the loaded skeleton, or why the object did not load
    skel: Result<S, ProbeError>,
    /// its programs left out, and why
    status: Vec<ProbeStatus>,
    /// the maps it declares whose size `--map-size` may set (`MapSizes::check`)
    capacity: BTreeSet<String>,
}

/// Loads one object that reuses the family object's maps: its rejected programs left out
/// (`load_degrading`) when `degrade`, else all or nothing. `configure` sets what is particular
/// to the object (its `.rodata`, the programs this kernel lacks) on the open skeleton; `status`
/// holds the entries of the programs it leaves out.
fn load_stage<B>(
    name: &str,
    stage: &Stage<'_>,
    configure: impl Fn(&mut B::Output) -> Result<(), ProbeError>,
    status: Vec<ProbeStatus>,
    degrade: bool,
) -> StageLoad<Loaded<B>>
where
    B: SkelBuilder<'static> + Default,
{
    let mut load = StageLoad {
        skel: Err(ProbeError::Bpf {
            what: format!("loading the {name} probes: not opened"),
            source: libbpf_rs::Error::from_raw_os_error(libc::ENOENT),
        }),
        status,
        capacity: BTreeSet::new(),
    };
    let opened = match open_skel::<B>(name) {
        Ok(opened) => opened,
        Err(e) => {
            load.skel = Err(e);
            return load;
        }
    };
    load.capacity = sizing::capacity_maps(opened.open_object());
    // Programs on a tracepoint this kernel does not have: not loaded, and said.
    let absent: Vec<String> = opened
        .open_object()
        .progs()
        .filter_map(|p| {
            let section = p.section().to_string_lossy().into_owned();
            let tp = section.strip_prefix("tp_btf/")?;
            let known = TRACEPOINTS.iter().any(|(name, _)| *name == tp);
            (known && !stage.features.has_tracepoint(tp)).then(|| {
                let prog = p.name().to_string_lossy().into_owned();
                load.status.push(ProbeStatus {
                    name: format!("{name}.{prog}"),
                    attached: false,
                    error: Some(format!(
                        "{}; missing without it: {}",
                        ProbeError::KernelLacks {
                            what: format!("{name}.{prog}"),
                            release: kernel_release(),
                            feature: format!("tracepoint {tp} (later kernels have it)"),
                        },
                        figures_of(&section)
                    )),
                });
                prog
            })
        })
        .collect();
    let configure = |skel: &mut B::Output| -> Result<(), ProbeError> {
        // Sized first: reusing a shared map then takes the size of the map it reuses.
        stage.opts.map_sizes.apply(skel.open_object_mut())?;
        reuse_family_maps(skel.open_object_mut(), stage.family)?;
        configure(skel)?;
        for mut prog in skel.open_object_mut().progs_mut() {
            if absent.iter().any(|a| **a == *prog.name().to_string_lossy()) {
                prog.set_autoload(false);
            }
        }
        Ok(())
    };
    load.skel = if degrade {
        load_degrading::<B>(name, opened, configure, &mut load.status)
    } else {
        let mut opened = opened;
        configure(&mut opened).and_then(|()| {
            let mark = log_mark();
            opened.load().map_err(load_err(name, mark))
        })
    };
    timing(&format!("{name} object loaded"));
    load
}

/// The load of object `name` that is not tried: the kernel lacks `feature`, which its program
/// `what` needs. The object is still opened for the names of its resizable maps, which
/// `--map-size` (and its defaults) may name whether it loads or not.
fn lacking<B>(name: &str, what: &str, feature: &str) -> StageLoad<Loaded<B>>
where
    B: SkelBuilder<'static> + Default,
{
    StageLoad {
        skel: Err(ProbeError::KernelLacks {
            what: what.into(),
            release: kernel_release(),
            feature: feature.into(),
        }),
        status: Vec::new(),
        capacity: open_skel::<B>(name)
            .map(|opened| sizing::capacity_maps(opened.open_object()))
            .unwrap_or_default(),
    }
}

/// Starts `load` on a thread named after object `name`.
fn spawn_load<'scope, T: Send + 'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    name: &str,
    load: impl FnOnce() -> StageLoad<T> + Send + 'scope,
) -> std::io::Result<std::thread::ScopedJoinHandle<'scope, StageLoad<T>>> {
    std::thread::Builder::new()
        .name(format!("scanprof-load-{name}"))
        .spawn_scoped(scope, load)
}

/// The load `spawn_load` started; a thread that could not start or panicked is a failed load.
fn join_load<T>(
    name: &str,
    worker: std::io::Result<std::thread::ScopedJoinHandle<'_, StageLoad<T>>>,
) -> StageLoad<T> {
    let failed = || StageLoad {
        skel: Err(ProbeError::Bpf {
            what: format!("loading the {name} probes: the loading thread failed"),
            source: libbpf_rs::Error::from_raw_os_error(libc::EIO),
        }),
        status: Vec::new(),
        capacity: BTreeSet::new(),
    };
    match worker {
        Ok(handle) => handle.join().unwrap_or_else(|_| failed()),
        Err(_) => failed(),
    }
}

/// The open skeleton of builder `B`.
type Opened<B> = <B as SkelBuilder<'static>>::Output;

/// Opens the family object and sizes it: the maps `--map-size` names (`sizes`), the fork
/// program's search for a free thread slot (over the `threads` array's entries), and the
/// `family_tids` bitmap (one byte per thread id below the kernel's pid_max). Returns it with
/// the names of its resizable maps and the bitmap's words.
fn open_family(sizes: &MapSizes) -> Result<(Opened<FamilySkelBuilder>, BTreeSet<String>, u32), ProbeError> {
    let mut family = open_skel::<FamilySkelBuilder>("family")?;
    // The maps `--map-size` may name: checked once every object has been opened.
    let capacity = sizing::capacity_maps(family.open_object());
    sizes.apply(family.open_object_mut())?;
    rodata_of("family", family.maps.rodata_data.as_deref_mut())?.thread_cap = sizes.threads();
    let tid_words = tids::words_for(tids::pid_max());
    family
        .maps
        .family_tids
        .set_max_entries(tid_words)
        .map_err(bpf_err("sizing map family_tids"))?;
    Ok((family, capacity, tid_words))
}

/// The kernel's features, known already or once read on their thread; a kernel without BTF is
/// the error.
fn resolve_features(source: Features<'_>) -> Result<KernelFeatures, ProbeError> {
    let features = match source {
        Features::Known(f) => f.clone(),
        Features::Detecting(thread) => thread.join().map_err(|_| ProbeError::Bpf {
            what: "reading the kernel's features: the thread failed".into(),
            source: libbpf_rs::Error::from_raw_os_error(libc::EIO),
        })?,
    };
    if !features.btf {
        return Err(ProbeError::NoBtf);
    }
    Ok(features)
}

/// The receive classes' bounds the send_path object takes: at most RECV_CLASSES - 1.
fn class_bounds(bounds: &[u32]) -> &[u32] {
    &bounds[..bounds.len().min(RECV_CLASSES - 1)]
}

/// send_path's settings: the receive classes (`--recv-classes`), when any.
fn configure_send_path(stage: &Stage<'_>, skel: &mut OpenSendPathSkel<'static>) -> Result<(), ProbeError> {
    // One set of syscall programs: the per-syscall tracepoints' or the raw hooks'.
    let (hooks, _) = stage.opts.syscall_hooks.usable();
    for mut prog in skel.open_object_mut().progs_mut() {
        let name = prog.name().to_string_lossy().into_owned();
        if SyscallHooks::PerCall.programs().contains(&name.as_str())
            || SyscallHooks::All.programs().contains(&name.as_str())
        {
            prog.set_autoload(hooks.programs().contains(&name.as_str()));
        }
    }
    let bounds = class_bounds(&stage.opts.recv_class_bounds);
    if !bounds.is_empty() {
        let rodata = rodata_of("send_path", skel.maps.rodata_data.as_deref_mut())?;
        rodata.rx_classes = bounds.len() as u32 + 1;
        rodata.rx_class_bounds[..bounds.len()].copy_from_slice(bounds);
    }
    Ok(())
}

/// sched's settings: the blocking episodes streamed as events, and one variant of the switch
/// program for this kernel's sched_switch: with the previous task's state as an argument (5.18
/// and later) or read from it.
fn configure_sched(stage: &Stage<'_>, skel: &mut OpenSchedSkel<'static>) -> Result<(), ProbeError> {
    let rodata = rodata_of("sched", skel.maps.rodata_data.as_deref_mut())?;
    rodata.block_event_min_ns = stage.opts.block_event_min_ns;
    let prev_state = stage.features.sched_switch_prev_state;
    skel.progs.on_switch.set_autoload(prev_state);
    skel.progs.on_switch_nostate.set_autoload(!prev_state);
    Ok(())
}

/// Which of drops' kfree_skb programs loads, for a tracepoint with a drop `reason` and the
/// receiving socket `rx_sk`: (on_kfree_skb, on_kfree_skb_norx, on_kfree_skb_noreason). Before
/// 5.17 (no reason) drops are counted by location, under one reason.
fn kfree_skb_variant(reason: bool, rx_sk: bool) -> (bool, bool, bool) {
    (reason && rx_sk, reason && !rx_sk, !reason)
}

/// drops' settings: this kernel's numbers of the drop reasons it names, and one variant of the
/// drop program for its kfree_skb tracepoint (`kfree_skb_variant`).
fn configure_drops(stage: &Stage<'_>, skel: &mut OpenDropsSkel<'static>) -> Result<(), ProbeError> {
    let features = stage.features;
    let rodata = rodata_of("drops", skel.maps.rodata_data.as_deref_mut())?;
    rodata.reason_no_socket = features.drop_reason_no_socket;
    rodata.reason_queue_purge = features.drop_reason_queue_purge;
    let (with_sk, norx, noreason) = kfree_skb_variant(features.kfree_skb_reason, features.kfree_skb_rx_sk);
    let progs = &mut skel.progs;
    progs.on_kfree_skb.set_autoload(with_sk);
    progs.on_kfree_skb_norx.set_autoload(norx);
    progs.on_kfree_skb_noreason.set_autoload(noreason);
    udp_refused::configure(rodata, features);
    Ok(())
}

/// netdev's settings: whether its device-stage programs run in windows (`--device-stages`), so
/// that net_dev_start_xmit notes the destination of a packet net_dev_queue did not see.
fn configure_netdev(stage: &Stage<'_>, skel: &mut OpenNetdevSkel<'static>) -> Result<(), ProbeError> {
    let rodata = rodata_of("netdev", skel.maps.rodata_data.as_deref_mut())?;
    rodata.dev_sampled = u32::from(stage.opts.device_stages.may_sample());
    Ok(())
}

/// The settings of an object that has none.
fn no_settings<T>(_: &Stage<'_>, _: &mut T) -> Result<(), ProbeError> {
    Ok(())
}

/// Loads an object whole or not at all (`WholeSpec`): not tried where the kernel lacks what it
/// needs.
fn load_whole<B>(
    spec: &WholeSpec,
    stage: &Stage<'_>,
    configure: impl Fn(&mut B::Output) -> Result<(), ProbeError>,
) -> StageLoad<Loaded<B>>
where
    B: SkelBuilder<'static> + Default,
{
    if let Some(need) = spec.lacks(stage.features) {
        return lacking::<B>(spec.object, &spec.status_name(), need.feature());
    }
    load_stage::<B>(spec.object, stage, configure, Vec::new(), false)
}

/// Attaches every program of `objects` that loads, one at a time rather than the skeletons'
/// `attach`, which stops at the first program that does not attach: each attaches or gets a
/// status entry saying why not. The links of the device-stage programs that `stages` windows
/// come back apart (the second list): attached now, for the first window.
fn attach_programs(
    objects: &Objects,
    stages: DeviceStages,
    status: &mut Vec<ProbeStatus>,
) -> (Vec<Link>, Vec<(usize, Link)>) {
    let mut links = Vec::new();
    let mut windowed = Vec::new();
    for obj in objects.iter() {
        let obj_name = object_name(obj);
        for prog in obj.progs_mut().filter(|p| p.autoload()) {
            let prog_name = prog.name().to_string_lossy().into_owned();
            let name = format!("{obj_name}.{prog_name}");
            match prog.attach() {
                Ok(link) => {
                    if device_stages::windowed(stages, &obj_name, &prog_name) {
                        let at = device_stages::WINDOWED.iter().position(|w| *w == prog_name);
                        windowed.push((at.unwrap_or(0), link));
                    } else {
                        links.push(link);
                    }
                    status.push(ProbeStatus {
                        name,
                        attached: true,
                        error: None,
                    });
                }
                Err(e) => status.push(ProbeStatus {
                    name,
                    attached: false,
                    error: Some(e.to_string()),
                }),
            }
        }
    }
    (links, windowed)
}

/// Attaches a whole-or-nothing object loaded (`skel`) with `attach`, keeping its link beside it,
/// with its status entry either way.
fn attach_whole<S>(
    spec: &WholeSpec,
    skel: Option<S>,
    attach: impl FnOnce(&S) -> libbpf_rs::Result<Link>,
    status: &mut Vec<ProbeStatus>,
) -> Option<(S, Link)> {
    let skel = skel?;
    match attach(&skel) {
        Ok(link) => {
            status.push(spec.attached());
            Some((skel, link))
        }
        Err(e) => {
            status.push(spec.not_attached(e));
            None
        }
    }
}

/// A run without any program of the core object (`Role::Core`: family) attached is the error.
fn core_attached(status: &[ProbeStatus]) -> Result<(), ProbeError> {
    let core = OBJECTS
        .iter()
        .find(|o| o.role == Role::Core)
        .map_or("family", |o| o.name);
    let prefix = format!("{core}.");
    if status.iter().any(|s| s.attached && s.name.starts_with(&prefix)) {
        return Ok(());
    }
    Err(ProbeError::Bpf {
        what: format!("attaching the {core} probes"),
        source: libbpf_rs::Error::from_raw_os_error(libc::EINVAL),
    })
}

/// The ring buffers polled for the rare records, and the channels they arrive on.
struct EventRings {
    ring: libbpf_rs::RingBuffer<'static>,
    events: mpsc::Receiver<sp_event>,
    drop_pkts: mpsc::Receiver<sp_drop_pkt>,
    calls: mpsc::Receiver<sp_call>,
}

impl EventRings {
    /// Polls the family object's `events` (events and dropped packets) and, when loaded, the
    /// uprobes' `calls`.
    fn open(objects: &Objects, uprobes: Option<&Uprobes>) -> Result<EventRings, ProbeError> {
        let (tx, events) = mpsc::channel();
        let (pkt_tx, drop_pkts) = mpsc::channel();
        // The ring buffer must outlive the RingBuffer that polls it, which the ProbeSet keeps
        // beside the objects; one per ProbeSet, so giving it the rest of the process's life
        // costs one fd and its memory.
        let events_map: &'static MapHandle = Box::leak(Box::new(
            MapHandle::try_from(&objects.family.maps.events).map_err(bpf_err("opening map events"))?,
        ));
        let mut builder = libbpf_rs::RingBufferBuilder::new();
        builder
            .add(events_map, move |bytes: &[u8]| {
                // Two record types share the ring; both start with ts_ns and kind.
                let kind = bytes
                    .get(8..12)
                    .and_then(|b| b.try_into().ok())
                    .map(u32::from_ne_bytes);
                if kind == Some(sp_event_kind::SP_EV_DROP_PKT.0) {
                    if let Some(p) = read_pod::<sp_drop_pkt>(bytes) {
                        let _ = pkt_tx.send(p);
                    }
                } else if let Some(ev) = read_pod::<sp_event>(bytes) {
                    // The receiver lives in the same ProbeSet; a send can only fail after it
                    // is dropped, when nobody wants the event any more.
                    let _ = tx.send(ev);
                }
                0
            })
            .map_err(bpf_err(EVENT_RING_SETUP))?;
        let (calls_tx, calls) = mpsc::channel();
        if let Some(u) = uprobes {
            let calls_map: &'static MapHandle = Box::leak(Box::new(u.calls_map()?));
            builder
                .add(calls_map, move |bytes: &[u8]| {
                    if let Some(c) = read_pod::<sp_call>(bytes) {
                        let _ = calls_tx.send(c);
                    }
                    0
                })
                .map_err(bpf_err("setting up the uprobe ring buffer"))?;
        }
        let ring = builder.build().map_err(bpf_err(EVENT_RING_SETUP))?;
        Ok(EventRings {
            ring,
            events,
            drop_pkts,
            calls,
        })
    }
}

/// An object's `.rodata` (its `const volatile` settings) as the skeleton types it, to set
/// before load.
fn rodata_of<'a, T>(name: &str, rodata: Option<&'a mut T>) -> Result<&'a mut T, ProbeError> {
    rodata.ok_or_else(|| ProbeError::Bpf {
        what: format!("the {name} probes have no .rodata section to configure"),
        source: libbpf_rs::Error::from_raw_os_error(libc::ENOENT),
    })
}

/// Loads an opened object; if the kernel rejects it, finds the programs it rejects and loads
/// the object without them, recording each left-out program in `status`. A retry opens the
/// object afresh and runs `configure` on it again. A program that `configure` leaves out (one
/// this kernel lacks) is neither loaded nor tried.
fn load_degrading<B>(
    name: &str,
    opened: B::Output,
    configure: impl Fn(&mut B::Output) -> Result<(), ProbeError>,
    status: &mut Vec<ProbeStatus>,
) -> Result<Loaded<B>, ProbeError>
where
    B: SkelBuilder<'static> + Default,
{
    let opened = std::cell::Cell::new(Some(opened));
    let try_load = |without: &[String], only: Option<&str>| -> Result<Loaded<B>, ProbeError> {
        // The first attempt loads the copy opened already; a retry needs a fresh one.
        let mut skel = match opened.take() {
            Some(skel) => skel,
            None => open_skel::<B>(name)?,
        };
        configure(&mut skel)?;
        for mut prog in skel.open_object_mut().progs_mut().filter(|p| p.autoload()) {
            let p = prog.name().to_string_lossy().into_owned();
            prog.set_autoload(!without.contains(&p) && only.is_none_or(|o| o == p));
        }
        let mark = log_mark();
        skel.load().map_err(load_err(name, mark))
    };
    match try_load(&[], None) {
        Ok(skel) => Ok(skel),
        Err(ProbeError::Permission(e)) => Err(ProbeError::Permission(e)),
        Err(first) => {
            // (program, its section: "tp_btf/sys_enter") of every program configured to load
            let progs: Vec<(String, String)> = {
                let mut listed = open_skel::<B>(name)?;
                configure(&mut listed)?;
                let progs = listed.open_object().progs().filter(|p| p.autoload());
                progs
                    .map(|p| {
                        let section = p.section().to_string_lossy().into_owned();
                        (p.name().to_string_lossy().into_owned(), section)
                    })
                    .collect()
            };
            let mut rejected = Vec::new();
            for (p, section) in &progs {
                if let Err(e) = try_load(&[], Some(p)) {
                    status.push(ProbeStatus {
                        name: format!("{name}.{p}"),
                        attached: false,
                        error: Some(format!("{e}; missing without it: {}", figures_of(section))),
                    });
                    rejected.push(p.clone());
                }
            }
            if rejected.is_empty() {
                return Err(first);
            }
            try_load(&rejected, None)
        }
    }
}

/// What a program's figures are, from its section's tracepoint (TRACEPOINTS).
fn figures_of(section: &str) -> String {
    let tp = section.rsplit('/').next().unwrap_or(section);
    TRACEPOINTS
        .iter()
        .find(|(name, _)| *name == tp)
        .map(|(_, what)| what.to_string())
        .unwrap_or_else(|| format!("what {section} counts"))
}

/// Checks that every map name declared by more than one object is one map (one kernel id)
/// across all of them: a per-object copy of a map meant to be shared is a silent attribution
/// bug (a socket cache that is never invalidated), so it stops the load instead.
fn check_shared<'a>(objects: impl Iterator<Item = &'a Object>) -> Result<(), ProbeError> {
    let mut ids: BTreeMap<String, Vec<(String, u32)>> = BTreeMap::new();
    for obj in objects {
        let obj_name = object_name(obj);
        for map in obj.maps() {
            let name = map.name().to_string_lossy().into_owned();
            if name.contains('.') {
                continue;
            }
            let id = map
                .info()
                .map_err(bpf_err(format!("reading map {name}")))?
                .info
                .id;
            ids.entry(name).or_default().push((obj_name.clone(), id));
        }
    }
    for (name, seen) in &ids {
        let mut distinct: Vec<u32> = seen.iter().map(|(_, id)| *id).collect();
        distinct.sort_unstable();
        distinct.dedup();
        if seen.len() > 1 && distinct.len() > 1 {
            let objs: Vec<String> = seen.iter().map(|(o, id)| format!("{o}:{id}")).collect();
            return Err(ProbeError::Bpf {
                what: format!(
                    "map {name} is declared by several probe objects but loaded {} times ({}): \
                     a map of probes/include/shared.h was not shared",
                    distinct.len(),
                    objs.join(", ")
                ),
                source: libbpf_rs::Error::from_raw_os_error(libc::EINVAL),
            });
        }
    }
    Ok(())
}

/// Makes an object reuse the family object's map of each name it declares too: the maps of
/// probes/include/shared.h, derived from the objects rather than listed by hand (a map only the
/// family object declares, like `thread_zero`, is its own; libbpf's internal maps, `.rodata` and
/// `.bss`, are per object by nature). The skeletons cannot do this by type: each object's
/// skeleton knows only its own maps, and which of them are the family's is what this derives.
fn reuse_family_maps(obj: &mut OpenObject, family: &Object) -> Result<(), ProbeError> {
    for mut map in obj.maps_mut() {
        let name = map.name();
        if name.to_string_lossy().contains('.') {
            continue;
        }
        if let Some(shared) = family.maps().find(|m| m.name() == name) {
            map.reuse_fd(shared.as_fd())
                .map_err(bpf_err(format!("sharing map {}", name.to_string_lossy())))?;
        }
    }
    Ok(())
}

/// An object's name as status entries use it ("send_path" for the skeleton's "send_path_bpf").
fn object_name(obj: &Object) -> String {
    obj.name()
        .map(|n| n.to_string_lossy().trim_end_matches("_bpf").to_string())
        .unwrap_or_else(|| "?".into())
}

/// Rows of a per-CPU hash map, each value folded over CPUs with `fold`, each with its key as
/// the map holds it (to delete the row by).
fn percpu_rows<K: Abi, V: Abi + Default>(
    map: &impl MapCore,
    fold: impl Fn(&mut V, &V),
) -> Vec<(Vec<u8>, K, V)> {
    map.keys()
        .filter_map(|k| {
            let key = read_pod::<K>(&k)?;
            let per_cpu = map.lookup_percpu(&k, MapFlags::ANY).ok().flatten()?;
            let mut acc = V::default();
            for bytes in &per_cpu {
                fold(&mut acc, &read_pod::<V>(bytes)?);
            }
            Some((k, key, acc))
        })
        .collect()
}

/// Rows kept in slots of a per-CPU array (`values`), each row's slot named by `slots` (key ->
/// u32): each row folded over CPUs with `fold`.
fn slotted_rows<K: Abi, V: Abi + Default>(
    slots: &impl MapCore,
    values: &impl MapCore,
    fold: impl Fn(&mut V, &V),
) -> Vec<(K, V)> {
    slots
        .keys()
        .filter_map(|k| {
            let key = read_pod::<K>(&k)?;
            let slot = slots.lookup(&k, MapFlags::ANY).ok().flatten()?;
            let per_cpu = values.lookup_percpu(&slot, MapFlags::ANY).ok().flatten()?;
            let mut acc = V::default();
            for bytes in &per_cpu {
                fold(&mut acc, &read_pod::<V>(bytes)?);
            }
            Some((key, acc))
        })
        .collect()
}

/// A NUL-terminated `char[]` of the ABI (comm, path, device name) as a String.
pub fn c_chars(bytes: &[i8]) -> String {
    let b: Vec<u8> = bytes.iter().map(|c| *c as u8).take_while(|c| *c != 0).collect();
    String::from_utf8_lossy(&b).into_owned()
}

/// What scanprof was doing when the event ring buffer (the family object's `events`) could not
/// be set up: added to the poller, or the poller built.
const EVENT_RING_SETUP: &str = "setting up the event ring buffer";

/// Entries of the `tid_slots` array (SP_TID_SLOT_WAYS, probes/include/shared.h): a thread's
/// entry is its tid modulo this.
const TID_SLOT_WAYS: u32 = 1 << 12;

/// A type that map and ring-buffer bytes are read into: the generated ABI types of wire.h (and
/// the integers that maps hold). libbpf-rs's map and ring-buffer calls deal in bytes, so the
/// skeleton's types are filled from them here ([`read_pod`]); the list below is every type read
/// so.
///
/// # Safety
///
/// An implementor is `repr(C)` and made of integers and integer arrays only (no pointers,
/// references, bools, enums or floats), so that any bytes of its size are a valid value.
unsafe trait Abi: Copy {}

/// An ABI type scanprof also writes into a map ([`as_bytes`]).
///
/// # Safety
///
/// An implementor has no padding bytes, so that each byte of a value is initialised (the size
/// assertions beside each add up its fields' sizes).
unsafe trait AbiWritten: Abi {}

/// Declares each type an [`Abi`] type.
macro_rules! abi_types {
    ($($t:ty),+ $(,)?) => {
        $(
            // SAFETY: u64, or a skeleton-generated type of wire.h: a `repr(C)` struct of
            // integers and integer arrays only (wire.h's enums are generated as newtypes of
            // integers, which any value fits).
            unsafe impl Abi for $t {}
        )+
    };
}

abi_types!(
    u64,
    sp_thread,
    sp_member,
    sp_ring,
    sp_ring_reads,
    sp_event,
    sp_drop_pkt,
    sp_drop_key,
    sp_flow_key,
    sp_dev_key,
    sp_dev_stats,
    sp_dev_name,
    sp_qdepth,
    sp_block_key,
    sp_block_val,
    sp_call,
    sp_uprobe_stats,
    sp_udp_refused_key,
    sp_udp_refused,
    uprobe::sp_uprobe_cfg,
);
// SAFETY: no padding: the size assertion beside sp_member adds up its fields' sizes.
unsafe impl AbiWritten for sp_member {}
// SAFETY: no padding: the size assertion beside sp_drop_pkt adds up its fields' sizes.
unsafe impl AbiWritten for sp_drop_pkt {}
// SAFETY: no padding: the size assertion beside sp_thread adds up its fields' sizes.
unsafe impl AbiWritten for sp_thread {}
// SAFETY: no padding: the size assertion in uprobe.rs adds up sp_uprobe_cfg's fields' sizes.
unsafe impl AbiWritten for uprobe::sp_uprobe_cfg {}

/// Entry `index` of a per-CPU array of u64 counters, summed over CPUs (0 when unreadable).
fn percpu_u64_sum(map: &impl MapCore, index: u32) -> u64 {
    map.lookup_percpu(&index.to_ne_bytes(), MapFlags::ANY)
        .ok()
        .flatten()
        .map_or(0, |per_cpu| {
            per_cpu
                .iter()
                .filter_map(|b| Some(u64::from_ne_bytes(b.get(..8)?.try_into().ok()?)))
                .sum()
        })
}

/// Copies an ABI value out of map bytes; None if the bytes are too short.
fn read_pod<T: Abi>(bytes: &[u8]) -> Option<T> {
    if bytes.len() < size_of::<T>() {
        return None;
    }
    // SAFETY: the length was checked, and read_unaligned needs no alignment; T is an `Abi`
    // type, whose contract is that every bit pattern of its size is a valid value.
    Some(unsafe { bytes.as_ptr().cast::<T>().read_unaligned() })
}

/// A dropped packet's record as the bytes the ring buffer gave (to keep it in a spool file).
pub fn drop_pkt_bytes(p: &sp_drop_pkt) -> &[u8] {
    as_bytes(p)
}

/// A dropped packet's record back from [`drop_pkt_bytes`]; None when `bytes` is too short.
pub fn drop_pkt_from_bytes(bytes: &[u8]) -> Option<sp_drop_pkt> {
    read_pod(bytes)
}

/// An ABI value's bytes, to write into a map.
fn as_bytes<T: AbiWritten>(v: &T) -> &[u8] {
    // SAFETY: `v` is a live, initialised T of size_of::<T>() bytes, borrowed for the slice's
    // lifetime; T is an `AbiWritten` type, which has no padding, so every one of those bytes is
    // initialised; u8 has no alignment or validity requirement.
    unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), size_of::<T>()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Test-only object (probes/test/reject_test.bpf.c): `loads_fine` and `rejected_on_purpose`.
    #[allow(clippy::all, dead_code, unused_imports, non_camel_case_types, non_snake_case)]
    mod reject_test_skel {
        include!(concat!(env!("OUT_DIR"), "/reject_test.skel.rs"));
    }
    use reject_test_skel::RejectTestSkelBuilder;

    /// Root-only: fails (never skips) without the capabilities when CI or REQUIRE_BPF is set.
    pub(super) fn privileged() -> bool {
        if bpf_privileged() {
            return true;
        }
        let required = ["CI", "REQUIRE_BPF"]
            .iter()
            .any(|v| std::env::var(v).is_ok_and(|v| !v.is_empty() && v != "0" && v != "false"));
        assert!(
            !required,
            "needs CAP_BPF+CAP_PERFMON (root): CI/REQUIRE_BPF is set"
        );
        false
    }

    fn open_reject_test() -> <RejectTestSkelBuilder as SkelBuilder<'static>>::Output {
        open_skel::<RejectTestSkelBuilder>("reject_test").unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_rejected_program_is_left_out_named_and_the_rest_loads() {
        if !privileged() {
            return;
        }
        capture_libbpf_log();
        let mut status = Vec::new();
        let skel = load_degrading::<RejectTestSkelBuilder>(
            "reject_test",
            open_reject_test(),
            |_| Ok(()),
            &mut status,
        )
        .unwrap_or_else(|e| panic!("the accepted program must still load: {e}"));
        let loaded: Vec<String> = skel
            .object()
            .progs()
            .filter(|p| p.autoload())
            .map(|p| p.name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(loaded, ["loads_fine"]);
        assert!(!skel.progs.rejected_on_purpose.autoload());
        // A loaded program has a kernel id; one left out has none.
        assert!(std::os::fd::AsRawFd::as_raw_fd(&skel.progs.loads_fine.as_fd()) > 0);
        assert_eq!(status.len(), 1, "{status:?}");
        let rejected = &status[0];
        assert_eq!(rejected.name, "reject_test.rejected_on_purpose");
        assert!(!rejected.attached);
        let err = rejected.error.as_deref().unwrap_or_default();
        eprintln!("rejected: {err}");
        for want in [
            "program reject_test.rejected_on_purpose was rejected by kernel ",
            kernel_release().as_str(),
            "SCANPROF_DEBUG=1",
            // the verifier's complaint, quoted, and the source line it points at
            "memory access",
            "c->slot[i] += 1",
            // what the run loses without it (tp_btf/sys_exit's figures)
            "missing without it: send results, errors and durations",
        ] {
            assert!(err.contains(want), "{want:?} missing from: {err}");
        }
        assert!(!err.contains("run it as root"), "root told to run as root: {err}");
    }

    /// A program the configuration leaves out (the variant of a tracepoint this kernel does not
    /// have) is neither loaded nor tried on its own, nor reported as rejected: the object loads
    /// at the first attempt.
    #[test]
    fn a_program_configured_out_is_neither_loaded_nor_tried() {
        if !privileged() {
            return;
        }
        capture_libbpf_log();
        let mut status = Vec::new();
        let configured = std::cell::Cell::new(0);
        let skel = load_degrading::<RejectTestSkelBuilder>(
            "reject_test",
            open_reject_test(),
            |skel| {
                configured.set(configured.get() + 1);
                skel.progs.rejected_on_purpose.set_autoload(false);
                Ok(())
            },
            &mut status,
        )
        .unwrap_or_else(|e| panic!("the object without its rejected program must load: {e}"));
        assert!(skel.progs.loads_fine.autoload());
        assert!(!skel.progs.rejected_on_purpose.autoload());
        assert!(status.is_empty(), "{status:?}");
        assert_eq!(configured.get(), 1, "loaded at the first attempt");
    }

    /// The end of what Debian 12's 6.1.0-50 verifier said about send_path before the bounds fix
    /// (libbpf passes the whole log in one message).
    const LOG_6_1: &str = "libbpf: prog 'on_sys_enter': -- BEGIN PROG LOAD LOG --\n\
        func#0 @0\n\
        0: R1=ctx(off=0,imm=0) R10=fp0\n\
        ; t->gap[hist_bucket(gap)] += 1;\n\
        294: (79) r2 = *(u64 *)(r6 +3752)\n\
        R6 unbounded memory access, make sure to bounds check any such access\n\
        verification time 197462 usec\n\
        stack depth 56\n\
        processed 971 insns (limit 1000000) max_states_per_insn 8 total_states 89 peak_states 62 mark_read 15\n\
        -- END PROG LOAD LOG --\n";

    #[test]
    fn the_verifiers_complaint_and_its_source_line_are_found() {
        let log = vec![
            "libbpf: prog 'on_sys_enter': BPF program load failed: Permission denied\n".to_string(),
            LOG_6_1.to_string(),
            "libbpf: prog 'on_sys_enter': failed to load: -13\n".to_string(),
        ];
        let (program, reason) = rejection(&log);
        assert_eq!(program.as_deref(), Some("on_sys_enter"));
        assert_eq!(
            reason.as_deref(),
            Some(
                "\"R6 unbounded memory access, make sure to bounds check any such access\" at \
                 `t->gap[hist_bucket(gap)] += 1;`"
            )
        );
        // Two message lines (a missing tracepoint argument) are both kept.
        let log = vec!["libbpf: prog 'on_kfree_skb': -- BEGIN PROG LOAD LOG --\n\
            4: (79) r8 = *(u64 *)(r1 +24)\n\
            func 'kfree_skb' doesn't have 4-th argument\n\
            invalid bpf_context access off=24 size=8\n\
            processed 5 insns (limit 1000000)\n-- END PROG LOAD LOG --\n"
            .to_string()];
        let (program, reason) = rejection(&log);
        assert_eq!(program.as_deref(), Some("on_kfree_skb"));
        assert_eq!(
            reason.as_deref(),
            Some("\"func 'kfree_skb' doesn't have 4-th argument: invalid bpf_context access off=24 size=8\"")
        );
        // No verifier log (e.g. a tracepoint the kernel lacks): libbpf's last word on a program.
        let log = vec!["libbpf: prog 'x': failed to find kernel BTF type ID of 'foo': -3\n".to_string()];
        assert_eq!(
            rejection(&log),
            (
                Some("x".to_string()),
                Some("prog 'x': failed to find kernel BTF type ID of 'foo': -3".to_string())
            )
        );
    }

    #[test]
    fn root_capabilities_allow_bpf_and_none_do_not() {
        assert!(caps_allow_bpf(1 << 21));
        assert!(caps_allow_bpf(1 << 38 | 1 << 39));
        assert!(!caps_allow_bpf(1 << 39));
        assert!(!caps_allow_bpf(0));
        assert!(caps_allow_bpf(0x000001ffffffffff));
    }

    /// A kernel's features as a 5.10 kernel has them (no attach cookie, no kfree_skb reason),
    /// with `attach_cookie` and `sock_from_file` as given.
    fn features(attach_cookie: bool, sock_from_file: bool) -> KernelFeatures {
        KernelFeatures {
            btf: true,
            kfree_skb_rx_sk: false,
            kfree_skb_reason: false,
            sched_switch_prev_state: false,
            attach_cookie,
            sock_from_file,
            drop_reason_no_socket: 3,
            drop_reason_queue_purge: u32::MAX,
            drop_reasons: BTreeMap::new(),
            tracepoints: BTreeSet::new(),
        }
    }

    /// build.rs builds every probes/*.bpf.c: each is exactly one row of the table, and the
    /// table names no object that has no source.
    #[test]
    fn the_table_has_every_probe_source_once() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("probes");
        let mut sources: Vec<String> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .filter_map(|entry| {
                let name = entry.ok()?.file_name().to_string_lossy().into_owned();
                name.strip_suffix(".bpf.c").map(str::to_string)
            })
            .collect();
        sources.sort();
        let mut rows: Vec<String> = OBJECTS.iter().map(|o| o.name.to_string()).collect();
        rows.sort();
        let mut distinct = rows.clone();
        distinct.dedup();
        assert_eq!(rows, distinct, "an object has two rows");
        assert_eq!(rows, sources, "the table's rows against probes/*.bpf.c");
        assert_eq!(objects().count(), OBJECTS.len());
    }

    /// The core object (the one that creates the shared maps) is one, and first; the objects
    /// loaded alone, which a run does not load with the others, come last.
    #[test]
    fn the_core_object_is_first_and_alone_and_those_loaded_alone_come_last() {
        assert_eq!(OBJECTS[0].role, Role::Core);
        assert_eq!(OBJECTS.iter().filter(|o| o.role == Role::Core).count(), 1);
        let first_alone = OBJECTS
            .iter()
            .position(|o| o.role == Role::Alone)
            .unwrap_or(OBJECTS.len());
        assert!(
            OBJECTS[first_alone..].iter().all(|o| o.role == Role::Alone),
            "{OBJECTS:?}"
        );
    }

    /// A whole-or-nothing object's row names itself and a program its object has (the one its
    /// status entry names); its bytes are the object of that name.
    #[test]
    fn a_whole_objects_row_names_its_object_and_a_program_of_it() {
        let mut wholes = 0;
        for row in OBJECTS {
            let Role::Whole(spec) = row.role else { continue };
            wholes += 1;
            assert_eq!(spec.object, row.name);
            let obj = libbpf_rs::ObjectBuilder::default()
                .open_memory(row.bytes)
                .unwrap_or_else(|e| panic!("{} does not open: {e}", row.name));
            let progs: Vec<String> = obj
                .progs()
                .map(|p| p.name().to_string_lossy().into_owned())
                .collect();
            assert!(
                progs.contains(&spec.program.to_string()),
                "{}: {progs:?}",
                row.name
            );
        }
        assert_eq!(wholes, 4);
    }

    /// The programs a whole object's row names beside its own are programs of that object, and
    /// the rings object's are every program of it that a run attaches (attach_close_reads):
    /// an object that does not load names each of them (`WholeSpec::not_loaded`).
    #[test]
    fn every_program_a_run_attaches_of_a_whole_object_is_in_its_row() {
        for row in OBJECTS {
            let Role::Whole(spec) = row.role else { continue };
            let obj = libbpf_rs::ObjectBuilder::default()
                .open_memory(row.bytes)
                .unwrap_or_else(|e| panic!("{} does not open: {e}", row.name));
            let mut progs: Vec<String> = obj
                .progs()
                .map(|p| p.name().to_string_lossy().into_owned())
                .collect();
            for b in spec.beside {
                assert!(progs.iter().any(|p| p == b.program), "{}: {progs:?}", b.program);
            }
            if spec == RINGS {
                let mut named: Vec<String> = std::iter::once(spec.program)
                    .chain(spec.beside.iter().map(|b| b.program))
                    .map(String::from)
                    .collect();
                named.sort();
                progs.sort();
                assert_eq!(named, progs);
            }
        }
    }

    /// The uprobes object is tried only where the kernel has bpf_get_attach_cookie, the
    /// packet-socket iterator only where it has bpf_sock_from_file, the reply and SYN
    /// retransmission counters always.
    #[test]
    fn a_whole_object_is_tried_only_where_the_kernel_has_what_it_needs() {
        let all = features(true, true);
        for spec in [UPROBES, RINGS, REPLIES, RETRANS] {
            assert_eq!(spec.lacks(&all), None, "{spec:?}");
        }
        let old = features(false, false);
        assert_eq!(UPROBES.lacks(&old), Some(Need::AttachCookie));
        assert_eq!(RINGS.lacks(&old), Some(Need::SockFromFile));
        assert_eq!(REPLIES.lacks(&old), None);
        assert_eq!(RETRANS.lacks(&old), None);
        assert_eq!(UPROBES.lacks(&features(false, true)), Some(Need::AttachCookie));
        assert_eq!(RINGS.lacks(&features(false, true)), None);
        assert!(Need::AttachCookie.feature().contains("bpf_get_attach_cookie"));
        assert!(Need::SockFromFile.feature().contains("bpf_sock_from_file"));
    }

    /// An object the kernel cannot load names every program a run attaches of it, each with
    /// what the kernel lacks and what a report loses: on 5.10 (no bpf_sock_from_file) doctor
    /// named rings.sp_rings but not rings.on_close and rings.on_exit_socks, so the matrix's
    /// probe count came out two short of the host's less the declared programs. Loaded here as
    /// on a kernel without the helper; with it, all three attach.
    #[test]
    fn an_object_the_kernel_lacks_a_helper_for_names_each_program_a_run_attaches_of_it() {
        if !privileged() {
            return;
        }
        let mut features = KernelFeatures::detect();
        assert!(
            features.sock_from_file,
            "this kernel has bpf_sock_from_file: {features:?}"
        );
        let rings_status = |features: &KernelFeatures| -> Vec<ProbeStatus> {
            let set = ProbeSet::load(&ProbeOptions::default(), features).unwrap_or_else(|e| panic!("{e}"));
            set.status
                .iter()
                .filter(|s| s.name.starts_with("rings."))
                .cloned()
                .collect()
        };
        let names = ["rings.on_close", "rings.on_exit_socks", "rings.sp_rings"];
        let mut loaded = rings_status(&features);
        loaded.sort_by(|a, b| a.name.cmp(&b.name));
        assert_eq!(loaded.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), names);
        assert!(loaded.iter().all(|s| s.attached), "{loaded:?}");

        features.sock_from_file = false;
        let mut lacking = rings_status(&features);
        lacking.sort_by(|a, b| a.name.cmp(&b.name));
        assert_eq!(lacking.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), names);
        for s in &lacking {
            assert!(!s.attached, "{s:?}");
            let err = s.error.as_deref().unwrap_or_default();
            for want in [
                format!("so {} is not loaded", s.name),
                "bpf_sock_from_file (kernels 5.11 and later)".to_string(),
                "; missing without it: ".to_string(),
            ] {
                assert!(err.contains(&want), "{want:?} missing from: {err}");
            }
        }
    }

    /// A whole object's status entry names object.program and, when it is missing, why and
    /// what a report lacks.
    #[test]
    fn a_whole_objects_status_says_what_is_missing_without_it() {
        assert_eq!(
            RINGS.attached(),
            ProbeStatus {
                name: "rings.sp_rings".into(),
                attached: true,
                error: None
            }
        );
        let missing = REPLIES.not_attached("refused");
        assert_eq!(missing.name, "replies.on_netif_receive");
        assert!(!missing.attached);
        assert_eq!(
            missing.error.as_deref(),
            Some(
                "refused; missing without it: the replies that arrived for the family's flows \
                 (the reply funnel, lost_beyond_host)"
            )
        );
    }

    /// send_path takes at most RECV_CLASSES - 1 bounds, the first ones given.
    #[test]
    fn at_most_the_first_class_bounds_reach_send_path() {
        assert_eq!(class_bounds(&[]), &[] as &[u32]);
        assert_eq!(class_bounds(&[64, 128]), &[64, 128]);
        assert_eq!(
            class_bounds(&[64, 128, 512, 1024, 1500]),
            &[64, 128, 512][..RECV_CLASSES - 1]
        );
    }

    /// Exactly one kfree_skb program loads on every kernel: with the socket (6.8 and later),
    /// the reason only (5.17 to 6.7), or neither.
    #[test]
    fn exactly_one_drop_program_variant_loads_on_every_kernel() {
        assert_eq!(kfree_skb_variant(true, true), (true, false, false));
        assert_eq!(kfree_skb_variant(true, false), (false, true, false));
        assert_eq!(kfree_skb_variant(false, false), (false, false, true));
        assert_eq!(kfree_skb_variant(false, true), (false, false, true));
    }

    /// A run needs a program of the core object attached; one that failed to attach, or other
    /// objects' programs, do not do.
    #[test]
    fn a_run_without_a_family_program_attached_is_refused() {
        let entry = |name: &str, attached: bool| ProbeStatus {
            name: name.into(),
            attached,
            error: None,
        };
        assert!(core_attached(&[]).is_err());
        assert!(core_attached(&[entry("family.on_fork", false), entry("sched.on_switch", true)]).is_err());
        assert!(core_attached(&[entry("familyx.on_fork", true)]).is_err());
        assert!(core_attached(&[entry("sched.on_switch", true), entry("family.on_fork", true)]).is_ok());
    }
}
