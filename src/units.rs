//! Numbers with their units, as people read them: one formatter per kind of figure, used by
//! every view (text, markdown, the live view, sweep, compare, plots, baseline). A leaf module:
//! it imports nothing of scanprof, so any layer may use it.

/// A fraction as a percentage with one decimal: `0.256` -> `25.6%`.
pub fn pct(fraction: f64) -> String {
    format!("{:.1}%", fraction * 100.0)
}

/// A fraction as a percentage with two decimals: `1.00002` -> `100.00%`.
pub fn pct2(fraction: f64) -> String {
    format!("{:.2}%", fraction * 100.0)
}

/// A duration in ns, in the unit that reads best: `850 ns`, `12.3 us`, `4.560 ms`, `1.500 s`.
pub fn duration(ns: f64) -> String {
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

/// A duration in ns for narrow columns, without a space: `850ns`, `12.3us`, `4.56ms`.
pub fn duration_compact(ns: f64) -> String {
    if ns >= 1e6 {
        format!("{:.2}ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.1}us", ns / 1e3)
    } else {
        format!("{ns:.0}ns")
    }
}

/// A rate for narrow columns: `950.5`, `12.3k`, `1.25M`.
pub fn rate_compact(x: f64) -> String {
    if x >= 1e6 {
        format!("{:.2}M", x / 1e6)
    } else if x >= 1e4 {
        format!("{:.1}k", x / 1e3)
    } else {
        format!("{x:.1}")
    }
}

/// A figure as a whole number when it is one, else with one decimal: `4000`, `4963.5`.
pub fn whole_or_tenths(v: f64) -> String {
    whole_or(v, 1)
}

/// A figure as a whole number when it is one, else with `decimals` decimals: `4000`,
/// `0.125` (3). Negative zero reads `0`.
pub fn whole_or(v: f64, decimals: usize) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v:.decimals$}")
    }
}

/// A signed percentage already in percent: `12.34` -> `+12.3%`.
pub fn signed_pct(percent: f64) -> String {
    format!("{percent:+.1}%")
}

/// Packets per second: whole numbers from 100 up, one decimal below: `1234 pps`, `12.3 pps`.
pub fn pps(x: f64) -> String {
    if x.abs() >= 100.0 {
        format!("{x:.0} pps")
    } else {
        format!("{x:.1} pps")
    }
}

/// A number of seconds, in the unit that reads best (see `duration`).
pub fn secs(s: f64) -> String {
    duration(s * 1e9)
}

/// A number with up to three decimals, trailing zeros removed: `2.5`, `0`, `1.125`.
pub fn plain(v: f64) -> String {
    let s = format!("{v:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" {
        "0".into()
    } else {
        s.to_string()
    }
}

/// A number with an SI suffix (k, M, G) and up to three decimals: 2500 -> `2.5k`.
pub fn si(v: f64) -> String {
    let a = v.abs();
    if a >= 1e9 {
        format!("{}G", plain(v / 1e9))
    } else if a >= 1e6 {
        format!("{}M", plain(v / 1e6))
    } else if a >= 1e3 {
        format!("{}k", plain(v / 1e3))
    } else {
        plain(v)
    }
}

/// An optional figure formatted by `f`, or `-` when absent.
pub fn or_dash<T>(v: Option<T>, f: impl FnOnce(T) -> String) -> String {
    v.map_or_else(|| "-".to_string(), f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_of_figure_reads_with_its_unit() {
        assert_eq!(pct(0.256), "25.6%");
        assert_eq!(pct2(1.00002), "100.00%");
        assert_eq!(duration(850.0), "850 ns");
        assert_eq!(duration(12_345.0), "12.3 us");
        assert_eq!(duration(1_500_000.0), "1.500 ms");
        assert_eq!(duration(1.5e9), "1.500 s");
        assert_eq!(duration_compact(4_560_000.0), "4.56ms");
        assert_eq!(duration_compact(12_345.0), "12.3us");
        assert_eq!(duration_compact(999.0), "999ns");
        assert_eq!(rate_compact(950.54), "950.5");
        assert_eq!(rate_compact(12_345.0), "12.3k");
        assert_eq!(rate_compact(1_250_000.0), "1.25M");
        assert_eq!(whole_or_tenths(4000.0), "4000");
        assert_eq!(whole_or_tenths(4963.46), "4963.5");
        assert_eq!(whole_or_tenths(-0.0), "0");
        assert_eq!(whole_or(0.125, 3), "0.125");
        assert_eq!(whole_or(7.0, 3), "7");
        assert_eq!(signed_pct(12.34), "+12.3%");
        assert_eq!(signed_pct(-3.0), "-3.0%");
        assert_eq!(pps(1234.4), "1234 pps");
        assert_eq!(pps(12.34), "12.3 pps");
        assert_eq!(secs(1.5), "1.500 s");
        assert_eq!(plain(2.5), "2.5");
        assert_eq!(plain(-0.0001), "0");
        assert_eq!(si(2500.0), "2.5k");
        assert_eq!(si(3e9), "3G");
        assert_eq!(si(12.0), "12");
        assert_eq!(or_dash(None::<f64>, pct), "-");
        assert_eq!(or_dash(Some(0.5), pct), "50.0%");
    }
}
