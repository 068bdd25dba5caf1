//! Numbers with their units, as the verdicts' sentences and evidence write them. Kept here
//! rather than borrowed from the views, which sit downstream of analysis.

/// A fraction as a percentage with one decimal: `0.256` -> `25.6%`.
pub(super) fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

/// A signed percentage already in percent: `12.34` -> `+12.3%`.
pub(super) fn signed_pct(x: f64) -> String {
    format!("{x:+.1}%")
}

/// Packets per second: whole numbers from 100 up, one decimal below.
pub(super) fn pps(x: f64) -> String {
    if x.abs() >= 100.0 {
        format!("{x:.0} pps")
    } else {
        format!("{x:.1} pps")
    }
}

/// A duration in ns, in the unit that reads best (ns, us, ms, s).
pub(super) fn dur(ns: f64) -> String {
    if ns >= 1e9 {
        format!("{:.3} s", ns / 1e9)
    } else if ns >= 1e6 {
        format!("{:.3} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.1} us", ns / 1e3)
    } else {
        format!("{ns:.0} ns")
    }
}

/// A number of seconds.
pub(super) fn secs(s: f64) -> String {
    dur(s * 1e9)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_with_their_units() {
        assert_eq!(pct(0.256), "25.6%");
        assert_eq!(signed_pct(12.34), "+12.3%");
        assert_eq!(signed_pct(-3.0), "-3.0%");
        assert_eq!(pps(1234.4), "1234 pps");
        assert_eq!(pps(12.34), "12.3 pps");
        assert_eq!(dur(999.0), "999 ns");
        assert_eq!(dur(1_500.0), "1.5 us");
        assert_eq!(dur(2_500_000.0), "2.500 ms");
        assert_eq!(secs(1.5), "1.500 s");
    }
}
