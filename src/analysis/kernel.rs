//! What the running kernel cannot give the probes, as data: each `KernelLack` names a kernel
//! facility (drop reasons, a tracepoint, a BPF helper) and the figures missing without it. The
//! session reads it from the probes' kernel features and hands it to the Analyzer, so that the
//! diagnosis says a question "cannot be judged on this kernel" instead of guessing (the
//! `not_judged_here` verdicts), and the views do not read a missing figure as a zero.

use serde::{Deserialize, Serialize};

/// A kernel facility scanprof measures with and that the running kernel lacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KernelLack {
    /// kfree_skb passes no drop reason (kernels before 5.17): drops are counted by location
    /// only, under NOT_SPECIFIED
    DropReasons,
    /// no qdisc_enqueue tracepoint (5.10 has none): no qdisc enqueue count, no queue depth
    QdiscEnqueue,
    /// no BPF helper bpf_get_attach_cookie (kernels before 5.15): the profile uprobes do not load
    AttachCookie,
    /// no BPF helper bpf_sock_from_file (kernels before 5.11): the packet-socket iterator does not
    /// load
    SockFromFile,
}

impl KernelLack {
    /// Every lack, in the order the warnings and `doctor` list them.
    pub const ALL: [KernelLack; 4] = [
        KernelLack::DropReasons,
        KernelLack::QdiscEnqueue,
        KernelLack::AttachCookie,
        KernelLack::SockFromFile,
    ];

    /// The stable name: the JSON's (`drop_reasons`, `qdisc_enqueue`...).
    pub fn as_str(self) -> &'static str {
        match self {
            KernelLack::DropReasons => "drop_reasons",
            KernelLack::QdiscEnqueue => "qdisc_enqueue",
            KernelLack::AttachCookie => "attach_cookie",
            KernelLack::SockFromFile => "sock_from_file",
        }
    }

    /// The kernels that have it.
    pub fn remedy(self) -> &'static str {
        match self {
            KernelLack::DropReasons => "kernel 5.17 or newer names each drop's reason",
            KernelLack::QdiscEnqueue => "a kernel with the qdisc:qdisc_enqueue tracepoint (6.1 has it)",
            KernelLack::AttachCookie => "kernel 5.15 or newer has the helper",
            KernelLack::SockFromFile => "kernel 5.11 or newer has the helper",
        }
    }

    /// The facility, as a user reads it.
    pub fn facility(self) -> &'static str {
        match self {
            KernelLack::DropReasons => "no drop reasons (kfree_skb passes none before kernel 5.17)",
            KernelLack::QdiscEnqueue => "no qdisc_enqueue tracepoint",
            KernelLack::AttachCookie => {
                "no BPF helper bpf_get_attach_cookie (kernels before 5.15): scanner functions are not probed"
            }
            KernelLack::SockFromFile => {
                "no BPF helper bpf_sock_from_file (kernels before 5.11): packet-socket rings are not read"
            }
        }
    }

    /// What cannot be judged without it, as a user reads it.
    pub fn cannot_judge(self) -> &'static str {
        match self {
            KernelLack::DropReasons => {
                "whether a drop of the family's packets or replies that its place does not name \
                 (a qdisc, a device, a neighbour) is expected (NO_SOCKET: a probe or reply to a \
                 closed port) or a loss"
            }
            KernelLack::QdiscEnqueue => {
                "how many packets a qdisc took and how deep it queued them, so whether a device's \
                 refused packets were requeued or lost"
            }
            KernelLack::AttachCookie => {
                "what the scanner's own functions say: its pacer's calibration, work units and \
                 messages, and its claims read from them"
            }
            KernelLack::SockFromFile => {
                "frames dropped at the family's full packet-socket rings (ring_full) and the \
                 rings' own statistics"
            }
        }
    }

    /// The run's warning for it: what the kernel lacks and what cannot be judged.
    pub fn warning(self) -> String {
        format!(
            "this kernel has {}: {} cannot be judged on this kernel",
            self.facility(),
            self.cannot_judge()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_lack_has_its_own_warning_saying_it_cannot_be_judged_here() {
        let warnings: Vec<String> = KernelLack::ALL.iter().map(|l| l.warning()).collect();
        for (l, w) in KernelLack::ALL.iter().zip(&warnings) {
            assert!(w.contains("cannot be judged on this kernel"), "{l:?}: {w}");
            assert_eq!(warnings.iter().filter(|x| *x == w).count(), 1, "{w}");
        }
        for l in KernelLack::ALL {
            assert_eq!(serde_json::to_string(&l).unwrap(), format!("\"{}\"", l.as_str()));
        }
    }
}
