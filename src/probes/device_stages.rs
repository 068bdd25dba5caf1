//! `--device-stages`: whether the per-packet device-stage programs of probes/netdev.bpf.c stay
//! attached all the time (exact counts) or only in a window of each tick (sampled: outside the
//! windows a packet runs none of them). The collector (src/collect/device_window.rs) opens and
//! closes the windows and scales what they counted; here, only which programs and their links.

use libbpf_rs::{Link, Object};

use super::ProbeError;

/// How the device stages (dev_queue, qdisc_enqueue, qdisc_dequeue, dev_xmit) are counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeviceStages {
    /// every device-stage program attached the whole run: every packet counted
    #[default]
    Exact,
    /// attached only in a window at the start of each tick; counts are scaled up by the tick's
    /// length over the window's and shown as estimates
    Sampled,
    /// exact until the family sends faster than a rate the user names (the collector decides,
    /// tick by tick: `--sample-above`), then sampled while it does (the windowed programs stay
    /// attached again after a tick at or below it)
    Auto,
}

impl DeviceStages {
    /// Whether the windowed programs' links are kept apart so that the collector can detach
    /// and attach them (sampled, or auto, which may come to sample), and net_dev_start_xmit
    /// notes the destinations of packets net_dev_queue did not see.
    pub fn may_sample(self) -> bool {
        self != DeviceStages::Exact
    }
}

/// The programs of the netdev object attached only in windows when sampled: the ones that only
/// count. net_dev_start_xmit stays attached (the drops recognise a family packet that died
/// past a veth or lo by its mark there, and it notes the destinations the replies and drops
/// are matched against); the neighbour programs run per resolution, not per packet.
pub const WINDOWED: [&str; 4] = [
    "on_dev_queue",
    "on_qdisc_enqueue",
    "on_qdisc_dequeue",
    "on_dev_xmit",
];

/// Whether program `name` of object `object` can be attached only in windows under `stages`:
/// its link is kept apart (with auto, it stays attached until the collector starts sampling).
pub fn windowed(stages: DeviceStages, object: &str, name: &str) -> bool {
    stages.may_sample() && object == "netdev" && WINDOWED.contains(&name)
}

/// When one windowed program was attached or detached: CLOCK_MONOTONIC ns before and after
/// the call (attaching or detaching a tracepoint link can take milliseconds on a loaded
/// machine, so each program's window is timed apart).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Switch {
    /// index in WINDOWED
    pub program: usize,
    pub before_ns: u64,
    pub after_ns: u64,
}

/// Attaches windowed program `program` (its index in WINDOWED), timed, when the netdev object
/// loaded it (a kernel without the qdisc tracepoints has none of theirs) and it is not attached
/// already; None otherwise.
pub(super) fn attach_one(
    netdev: &Object,
    program: usize,
    links: &mut Vec<(usize, Link)>,
) -> Result<Option<Switch>, ProbeError> {
    let Some(name) = WINDOWED.get(program) else {
        return Ok(None);
    };
    if links.iter().any(|(p, _)| *p == program) {
        return Ok(None);
    }
    let Some(prog) = netdev
        .progs_mut()
        .find(|p| p.autoload() && p.name().to_string_lossy() == *name)
    else {
        return Ok(None);
    };
    let before_ns = crate::system::monotonic_ns();
    let link = prog.attach().map_err(|source| ProbeError::Bpf {
        what: format!("attaching netdev.{name} for a device-stage window"),
        source,
    })?;
    let after_ns = crate::system::monotonic_ns();
    links.push((program, link));
    Ok(Some(Switch {
        program,
        before_ns,
        after_ns,
    }))
}

/// Detaches windowed program `program` if it is attached, timed.
pub(super) fn detach_one(links: &mut Vec<(usize, Link)>, program: usize) -> Option<Switch> {
    let at = links.iter().position(|(p, _)| *p == program)?;
    let (_, link) = links.remove(at);
    let before_ns = crate::system::monotonic_ns();
    drop(link);
    Some(Switch {
        program,
        before_ns,
        after_ns: crate::system::monotonic_ns(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_counting_device_programs_are_windowed_and_only_when_they_may_be_sampled() {
        for p in WINDOWED {
            assert!(windowed(DeviceStages::Sampled, "netdev", p));
            assert!(
                windowed(DeviceStages::Auto, "netdev", p),
                "auto may come to sample"
            );
            assert!(!windowed(DeviceStages::Exact, "netdev", p));
        }
        // the drops' marks and the neighbour programs stay attached
        for p in [
            "on_dev_start_xmit",
            "on_neigh_send",
            "on_neigh_update",
            "on_neigh_timer",
        ] {
            assert!(!windowed(DeviceStages::Sampled, "netdev", p), "{p}");
        }
        assert!(!windowed(DeviceStages::Sampled, "drops", "on_dev_queue"));
    }

    #[test]
    fn every_windowed_program_is_a_program_of_the_netdev_object() {
        let src = include_str!("../../probes/netdev.bpf.c");
        for p in WINDOWED {
            assert!(
                src.contains(&format!(", {p},")),
                "{p} is no program of netdev.bpf.c"
            );
        }
    }
}
