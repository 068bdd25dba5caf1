//! Causes outside the scanner's code: its cgroup's CPU quota (`cgroup_throttled`), the
//! hypervisor's steal time on its CPUs (`steal`), and a full conntrack table in its network
//! namespace (`conntrack_full`, which refuses new flows: EPERM from the send, NETFILTER_DROP).
//! The split (`split.rs`) gives the first two their share of the gap; the sentences, evidence
//! and advice are here.

use super::facts::{caveat_lines, Facts};
use super::split::Split;
use super::units::{dur, pct, pps, secs};
use crate::analysis::snapshot::{CgroupThrottleView, ConntrackView};
use crate::collect::DropClass;

/// The sender threads' cgroups with a quota, most throttled first.
fn sender_cgroups<'f>(f: &'f Facts) -> Vec<&'f CgroupThrottleView> {
    let mut c: Vec<&CgroupThrottleView> = f.limits.map_or(Vec::new(), |l| l.cgroups.iter().collect());
    c.sort_by_key(|x| std::cmp::Reverse(x.throttled_periods));
    c
}

fn cgroup_line(c: &CgroupThrottleView) -> String {
    format!(
        "cgroup v{} {}: quota {:.2} CPU ({} us per {} us period), throttled in {} of {} periods, {} throttled by the kernel's count",
        c.version,
        c.path,
        c.cpus,
        c.quota_us,
        c.period_us,
        c.throttled_periods,
        c.periods,
        secs(c.throttled_s)
    )
}

fn steal_line(f: &Facts) -> Option<String> {
    let st = f.limits?.steal.as_ref()?;
    (st.share >= 0.001).then(|| {
        format!(
            "hypervisor steal on CPUs {:?}: {} ({} of their time)",
            st.cpus,
            secs(st.steal_s),
            pct(st.share)
        )
    })
}

/// `cgroup_throttled`: the sentence, evidence and next step.
pub(super) fn throttled_text(f: &Facts, s: &Split, r: f64) -> (String, Vec<String>, String) {
    let cgroups = sender_cgroups(f);
    let on_cpu = s.f_send + s.f_other;
    let on_cpu_ns = on_cpu * s.thread_ns / s.attempts.max(1) as f64;
    let mut evidence = vec![format!(
        "runnable but held off the CPU by the quota {} per packet ({} of its time); on the CPU {} of its time, {} per packet",
        s.per_packet(s.f_throttled),
        pct(s.f_throttled),
        pct(on_cpu),
        dur(on_cpu_ns)
    )];
    evidence.extend(cgroups.iter().take(3).map(|c| cgroup_line(c)));
    if s.f_preempted > 0.0 {
        evidence.push(format!(
            "further runnable time not explained by the quota (other tasks): {} of its time",
            pct(s.f_preempted)
        ));
    }
    evidence.extend(steal_line(f));
    let Some(c) = cgroups.first() else {
        return (
            "The sender's cgroup CPU quota held it off the CPU.".to_string(),
            evidence,
            String::new(),
        );
    };
    // What the sender would use unthrottled at the requested rate, and what the quota carries.
    let need = on_cpu_ns * r / 1e9;
    let carries = c.cpus * 1e9 / on_cpu_ns.max(1.0);
    // In whole milliseconds, rounded up.
    let need_us = ((need * c.period_us as f64 * 1.1 - 1.0) / 1000.0).ceil().max(1.0) as u64 * 1000;
    let dir = if c.version == 2 {
        format!(
            "`echo \"{need_us} {}\" > /sys/fs/cgroup{}/cpu.max`",
            c.period_us, c.path
        )
    } else {
        format!("`echo {need_us} > /sys/fs/cgroup/cpu{}/cpu.cfs_quota_us`", c.path)
    };
    let sentence = format!(
        "The sender's cgroup ran out of its CPU quota: {} may use {:.2} CPU, and the sender waited {} per packet for \
         the next period (throttled in {} of {} periods) - its quota, not other tasks, held it off the CPU.",
        c.path,
        c.cpus,
        s.per_packet(s.f_throttled),
        c.throttled_periods,
        c.periods
    );
    let next = format!(
        "Raise the quota to what the sender uses at {} (about {:.2} CPU at {} of CPU per packet, with 10% to spare): {dir}; \
         for a container, `docker update --cpus {:.2} CONTAINER` (`docker run --cpus`), or the pod's \
         resources.limits.cpu; or request no more than the quota carries, about {}.",
        pps(r),
        need,
        dur(on_cpu_ns),
        need * 1.1,
        pps(carries)
    );
    (sentence, evidence, next)
}

/// `steal`: the sentence, evidence and next step.
pub(super) fn steal_text(f: &Facts, s: &Split) -> (String, Vec<String>, String) {
    let mut evidence = vec![format!(
        "of its on-CPU time {} per packet was stolen by the hypervisor ({} of its time)",
        s.per_packet(s.f_steal),
        pct(s.f_steal)
    )];
    evidence.extend(steal_line(f));
    let share = f.limits.and_then(|l| l.steal.as_ref()).map_or(0.0, |st| st.share);
    (
        format!(
            "The hypervisor took {} of the sender's CPUs' time (steal): the sender seemed to run while another \
             guest did, {} per packet.",
            pct(share),
            s.per_packet(s.f_steal)
        ),
        evidence,
        "The host is overcommitted: ask for dedicated vCPUs (pinned, or a CPU-optimised instance type) or scan from \
         a quieter host; `vmstat 1` (column st) shows the steal as it happens."
            .to_string(),
    )
}

/// A full conntrack table and the family's sends it refused: (EPERM failures, the table).
pub(super) fn conntrack_refused<'f>(f: &'f Facts) -> Option<(u64, &'f ConntrackView)> {
    let table = full_table(f)?;
    let eperm = f.errors.get("EPERM").copied().filter(|n| *n > 0)?;
    Some((eperm, table))
}

/// The first full conntrack table of the family's namespaces.
pub(super) fn full_table<'f>(f: &'f Facts) -> Option<&'f ConntrackView> {
    f.limits?.conntrack.iter().find(|t| t.full())
}

/// `conntrack_full`: the sentence, evidence and next step; `refused` failed sends (EPERM) and
/// `dropped` packets dropped by netfilter, either may be 0.
pub(super) fn conntrack_text(
    f: &Facts,
    t: &ConntrackView,
    refused: u64,
    dropped: u64,
) -> (String, Vec<String>, String) {
    let max = t.max.unwrap_or(0);
    let mut evidence = vec![format!(
        "conntrack table of network namespace {} (pid {}): {} entries at most, {} at the end, nf_conntrack_max = {max}",
        t.netns, t.pid, t.peak, t.count
    )];
    if refused > 0 {
        evidence.push(format!(
            "{refused} send calls failed with EPERM {} (of {} calls)",
            f.over(),
            f.calls
        ));
    }
    for d in f
        .drops
        .iter()
        .filter(|d| d.count > 0 && d.row.class == DropClass::TargetLoss && is_netfilter(&d.row.reason))
        .take(2)
    {
        evidence.push(d.evidence());
    }
    if !t.destinations.is_empty() {
        evidence.push(format!(
            "the family's packets went to {}",
            t.destinations.join(", ")
        ));
    }
    caveat_lines(f, &mut evidence);
    let what = match (refused, dropped) {
        (0, n) => format!("{n} of its packets were dropped by netfilter"),
        (n, 0) => format!("{n} of its sends failed with EPERM"),
        (n, m) => format!("{n} of its sends failed with EPERM and {m} packets were dropped by netfilter"),
    };
    let sentence = format!(
        "The connection tracking table is full ({} of {max} entries in the scanner's network namespace): every new \
         flow is refused, so {what}.",
        t.peak
    );
    (sentence, evidence, conntrack_next(t))
}

/// Raise the limit, or exempt the scan from tracking, with the rules for its destinations.
fn conntrack_next(t: &ConntrackView) -> String {
    let max = t.max.unwrap_or(t.peak).max(1);
    let dst = match t.destinations.as_slice() {
        [] => "TARGETS".to_string(),
        [one] => one.clone(),
        many => format!("{{ {} }}", many.join(", ")),
    };
    let dst_ipt = if t.destinations.is_empty() {
        "TARGETS".to_string()
    } else {
        t.destinations.join(",")
    };
    format!(
        "Raise the limit: `sysctl -w net.netfilter.nf_conntrack_max={}` (one value for every network namespace, set \
         in the initial one; about 300 bytes of kernel memory per entry). Or exempt the scan from tracking, in its \
         network namespace (`nsenter -t {} -n` first): `nft add table ip scan_raw; nft add chain ip scan_raw output \
         '{{ type filter hook output priority raw; }}'; nft add rule ip scan_raw output ip daddr {dst} notrack; nft add \
         chain ip scan_raw prerouting '{{ type filter hook prerouting priority raw; }}'; nft add rule ip scan_raw \
         prerouting ip saddr {dst} notrack` (iptables: `iptables -t raw -A OUTPUT -d {dst_ipt} -j NOTRACK; iptables \
         -t raw -A PREROUTING -s {dst_ipt} -j NOTRACK`); a firewall that accepts replies by `ct state` must then \
         accept them by address.",
        (max * 4).next_power_of_two(),
        t.pid
    )
}

/// Drop reasons netfilter gives (conntrack's own refusals come as NETFILTER_DROP).
pub(super) fn is_netfilter(reason: &str) -> bool {
    reason == "NETFILTER_DROP" || reason.starts_with("NF_") || reason.contains("CONNTRACK")
}

/// The NETFILTER_DROP drops of the family's own packets in the interval.
pub(super) fn netfilter_drops(f: &Facts) -> u64 {
    f.drops
        .iter()
        .filter(|d| d.row.class == DropClass::TargetLoss && is_netfilter(&d.row.reason))
        .map(|d| d.count)
        .sum()
}
