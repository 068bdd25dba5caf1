//! This process's capabilities, read from /proc/self/status, so that a command that needs a
//! privilege can say which one before it fails somewhere less clear.

/// A Linux capability number (include/uapi/linux/capability.h).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cap(pub u32, pub &'static str);

pub const CAP_DAC_OVERRIDE: Cap = Cap(1, "CAP_DAC_OVERRIDE");
pub const CAP_DAC_READ_SEARCH: Cap = Cap(2, "CAP_DAC_READ_SEARCH");
pub const CAP_KILL: Cap = Cap(5, "CAP_KILL");
pub const CAP_SETPCAP: Cap = Cap(8, "CAP_SETPCAP");
pub const CAP_NET_ADMIN: Cap = Cap(12, "CAP_NET_ADMIN");
pub const CAP_NET_RAW: Cap = Cap(13, "CAP_NET_RAW");
pub const CAP_SYS_ADMIN: Cap = Cap(21, "CAP_SYS_ADMIN");
pub const CAP_SYS_PTRACE: Cap = Cap(19, "CAP_SYS_PTRACE");
pub const CAP_SYSLOG: Cap = Cap(34, "CAP_SYSLOG");
pub const CAP_PERFMON: Cap = Cap(38, "CAP_PERFMON");
pub const CAP_BPF: Cap = Cap(39, "CAP_BPF");

/// A capability set line (`CapEff:`, `CapPrm:`, `CapBnd:`) of a /proc/PID/status text.
pub fn parse_set(status: &str, key: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
}

/// The calling thread's effective capabilities (0 if they cannot be read). Capabilities are
/// per thread; before any drop every thread of scanprof holds the same.
pub fn effective() -> u64 {
    thread_effective()
}

/// The calling thread's effective capabilities, from /proc/thread-self/status.
pub fn thread_effective() -> u64 {
    std::fs::read_to_string("/proc/thread-self/status")
        .ok()
        .and_then(|s| parse_set(&s, "CapEff"))
        .unwrap_or(0)
}

/// The capabilities of `needed` that this process lacks.
pub fn missing(needed: &[Cap]) -> Vec<Cap> {
    let eff = effective();
    needed
        .iter()
        .copied()
        .filter(|c| eff & (1u64 << c.0) == 0)
        .collect()
}

/// The names of `caps`, joined: "CAP_NET_ADMIN and CAP_SYS_ADMIN".
pub fn names(caps: &[Cap]) -> String {
    let n: Vec<&str> = caps.iter().map(|c| c.1).collect();
    n.join(" and ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capability_sets_are_read_from_status_text() {
        let status =
            "Name:\tx\nCapPrm:\t000001ffffffffff\nCapEff:\t0000000000002000\nCapBnd:\t000001ffffffffff\n";
        assert_eq!(parse_set(status, "CapEff"), Some(1 << CAP_NET_RAW.0));
        assert_eq!(parse_set(status, "CapBnd"), Some(0x1ff_ffff_ffff));
        assert_eq!(parse_set(status, "CapAmb"), None);
        assert_eq!(
            names(&[CAP_NET_ADMIN, CAP_SYS_ADMIN]),
            "CAP_NET_ADMIN and CAP_SYS_ADMIN"
        );
    }
}
