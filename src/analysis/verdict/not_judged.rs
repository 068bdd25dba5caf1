//! What cannot be judged on the running kernel: where a question of this run needs a figure the
//! kernel cannot give (`KernelLack`), a `not_judged_here` verdict says so, and why, instead of
//! a rule guessing from the figures that are left or staying silent. One per lack, and only when
//! its question arises in the run: the family's drops the kernel gave no reason for, a driver's
//! refusals on a device whose qdisc is not seen, a scanner profile whose function probes cannot
//! load, a scanner that reads replies through packet sockets whose rings cannot be read.

use super::facts::{caveat_lines, Facts};
use super::loss::{requeue_unknown, unreasoned_rows};
use super::{verdict, Cause, Kind, Verdict};
use crate::analysis::kernel::KernelLack;
use crate::collect::DropClass;

/// Every question of this run that the running kernel cannot answer, one verdict each.
pub(super) fn not_judged_here(f: &Facts) -> Vec<Verdict> {
    KernelLack::ALL
        .iter()
        .filter(|l| f.lacks(**l))
        .filter_map(|l| match l {
            KernelLack::DropReasons => unreasoned_drops(f),
            KernelLack::QdiscEnqueue => unseen_qdisc(f),
            KernelLack::AttachCookie => unprobed_scanner(f),
            KernelLack::SockFromFile => unread_rings(f),
        })
        .chain(sampled_device_stages(f))
        .collect()
}

/// `--device-stages sampled`: the device stages were counted in windows and scaled, so what
/// needs them exact is not judged: whether every packet the syscalls accepted reached a device
/// or a drop (measurement_fault), and the rate that left through the drivers (what a scanner's
/// claimed rate is held to). Said once the family sent; the drops are counted and judged as
/// ever.
fn sampled_device_stages(f: &Facts) -> Option<Verdict> {
    let sampling = f.device_sampling.filter(|_| f.packets > 0)?;
    let evidence = vec![
        format!(
            "device stages (dev_queue, qdisc_enqueue, qdisc_dequeue, dev_xmit) {}: {} windows              covered {:.3} s of {:.3} s {}",
            sampling.label(),
            sampling.windows,
            sampling.covered_ns as f64 / 1e9,
            sampling.elapsed_ns as f64 / 1e9,
            f.over()
        ),
        format!(
            "{} packets accepted by the family's send syscalls {} (counted), and the drops              (counted)",
            f.packets,
            f.over()
        ),
    ];
    let (what, remedy) = match sampling.auto {
        None => ("", ""),
        Some(_) => (
            " once the family sent faster than --sample-above",
            ", or with a --sample-above above the family's rate",
        ),
    };
    Some(finish(
        f,
        Kind::Loss,
        format!(
            "Whether every packet the send syscalls accepted reached a device or a drop, and the rate \
             that left through the drivers, are not judged: the device stages were sampled ({}{what}), \
             so their counts are estimates. The drops are counted and judged as in an exact run.",
            sampling.option()
        ),
        evidence,
        format!(
            "Run with --device-stages exact (the default){remedy} for exact device-stage counts, at \
             the cost of their programs on every packet."
        ),
    ))
}

/// Whether the fate of some of the family's outgoing packets cannot be judged on this kernel:
/// its own packets dropped with no reason at a place that names no cause, or refused by a
/// driver behind a qdisc that is not seen. "Lost none after sending" is then not known.
pub(super) fn outgoing(f: &Facts) -> bool {
    unreasoned_rows(f)
        .iter()
        .any(|d| d.row.class == DropClass::TargetLoss)
        || f.devices
            .iter()
            .any(|d| d.xmit_refused > 0 && requeue_unknown(f, d))
}

/// The family's drops with no reason and a place that names no cause.
fn unreasoned_drops(f: &Facts) -> Option<Verdict> {
    let rows = unreasoned_rows(f);
    let count: u64 = rows.iter().map(|d| d.count).sum();
    if count == 0 {
        return None;
    }
    let mut evidence = vec![format!(
        "{count} of the family's packets or replies to it dropped {} with no reason given",
        f.over()
    )];
    evidence.extend(
        rows.iter()
            .take(3)
            .map(|d| format!("{} ({})", d.evidence(), d.row.class.name())),
    );
    evidence.push(format!("the kernel has {}", KernelLack::DropReasons.facility()));
    Some(finish(
        f,
        Kind::Loss,
        format!(
            "{count} of the family's packets or replies were dropped {} where the kernel gives no \
             reason: whether they met a closed port (NO_SOCKET, normal for a scan) or were lost \
             cannot be judged on this kernel.",
            f.over()
        ),
        evidence,
        "The target's own counters tell a closed port from a loss: `nstat -az UdpNoPorts \
         TcpOutRsts IcmpOutDestUnreachs` at the target; or run on kernel 5.17 or newer, which \
         names each drop's reason."
            .to_string(),
    ))
}

/// Drivers' refusals on devices whose qdisc (and so whether it requeued them) is not seen.
fn unseen_qdisc(f: &Facts) -> Option<Verdict> {
    let devices: Vec<String> = f
        .devices
        .iter()
        .filter(|d| d.xmit_refused > 0 && requeue_unknown(f, d))
        .map(|d| {
            format!(
                "{}: {} refusals by its driver, root qdisc {}",
                d.device,
                d.xmit_refused,
                d.qdisc.as_deref().unwrap_or("not read")
            )
        })
        .collect();
    if devices.is_empty() {
        return None;
    }
    let mut evidence = devices;
    evidence.push(format!("the kernel has {}", KernelLack::QdiscEnqueue.facility()));
    Some(finish(
        f,
        Kind::Loss,
        format!(
            "Drivers refused packets {}, and whether a qdisc requeued them or they were lost \
             cannot be judged on this kernel: it has no qdisc_enqueue tracepoint, so no queue \
             depth is seen.",
            f.over()
        ),
        evidence,
        "`tc -s qdisc show dev DEV` (its `requeues` and `dropped`) and `ip -s link show dev DEV` \
         say what became of them."
            .to_string(),
    ))
}

/// A scanner profile with function probes that the kernel cannot attach.
fn unprobed_scanner(f: &Facts) -> Option<Verdict> {
    let sc = f.scanner.filter(|sc| !sc.probes.is_empty())?;
    let mut evidence = vec![format!(
        "profile {}: {} function probes, none attached",
        sc.profile,
        sc.probes.len()
    )];
    evidence.push(format!("the kernel has {}", KernelLack::AttachCookie.facility()));
    Some(finish(
        f,
        Kind::Gap,
        format!(
            "What {}'s own functions say cannot be judged on this kernel: no calibration, work \
             unit or message figure, so a mis-calibrated pacer (miscalibrated) and time between \
             or before work units (unit_idle, unit_setup) are not judged; the gap's split rests \
             on the threads' time alone.",
            sc.profile
        ),
        evidence,
        "Run on kernel 5.15 or newer (bpf_get_attach_cookie) for the scanner's own figures; the \
         rate is still measured at every stage."
            .to_string(),
    ))
}

/// A scanner that reads replies, or packet-socket drops, when the rings cannot be read.
fn unread_rings(f: &Facts) -> Option<Verdict> {
    let scanner = f
        .scanner
        .filter(|sc| !sc.is_generic() && !sc.expects_no_replies)
        .map(|sc| sc.profile.clone());
    let capture_drops: u64 = f
        .drops
        .iter()
        .filter(|d| {
            let l = d.row.location.as_str();
            l.contains("packet_rcv") || l.contains("tpacket_rcv")
        })
        .map(|d| d.count)
        .sum();
    if scanner.is_none() && capture_drops == 0 {
        return None;
    }
    let mut evidence = Vec::new();
    if let Some(p) = &scanner {
        evidence.push(format!("profile {p} reads replies (its profile says so)"));
    }
    if capture_drops > 0 {
        evidence.push(format!(
            "{capture_drops} drops at packet_rcv/tpacket_rcv {}",
            f.over()
        ));
    }
    evidence.push(format!("the kernel has {}", KernelLack::SockFromFile.facility()));
    Some(finish(
        f,
        Kind::Loss,
        format!(
            "Whether the family's packet sockets dropped frames at a full ring (ring_full) \
             cannot be judged on this kernel: their statistics are not read {}.",
            f.over()
        ),
        evidence,
        "The scanner's own count of packets its capture dropped (libpcap's `ps_drop`: masscan \
         and zmap print it), or kernel 5.11 or newer."
            .to_string(),
    ))
}

/// A `not_judged_here` verdict: share 0 (it explains none of the gap or the loss), strong (the
/// kernel's lack is certain, not inferred).
fn finish(f: &Facts, kind: Kind, sentence: String, mut evidence: Vec<String>, next: String) -> Verdict {
    caveat_lines(f, &mut evidence);
    verdict(Cause::NotJudgedHere, kind, sentence, 0.0, evidence, next, false)
}
