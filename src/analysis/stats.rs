//! Statistics across ticks: a run leaves one sample per tick (a rate, a latency, ...)
//! and this module summarises them robustly for the views.
//! Data flow: kernel counters -> collect -> analysis (pure, no clocks, no I/O) -> views.

use serde::{Deserialize, Serialize};

/// Robust summary of one run's per-tick samples.
///
/// Every field except `n` and `outliers` is in the unit of the samples.
/// MAD is the raw (unscaled) median absolute deviation: the median of |x - median|.
/// Percentiles interpolate linearly between closest ranks (R-7, numpy's default).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunStats {
    /// number of samples the statistics were computed from (NaN samples are not counted)
    pub n: usize,
    /// median of the samples
    pub median: f64,
    /// mean of the samples within 3 MAD of the median; of all samples when MAD is 0
    pub mean: f64,
    /// samples left out of `mean` as outliers: |x - median| > 3 MAD and > 1% of the median (none
    /// when MAD is 0)
    pub outliers: usize,
    /// uncertainty of the median: MAD / sqrt(n)
    pub uncertainty: f64,
    /// 95th percentile
    pub p95: f64,
    /// 99th percentile
    pub p99: f64,
    /// smallest sample
    pub min: f64,
    /// largest sample
    pub max: f64,
    /// set when the samples fall in two separate groups (a sender that sends, then stalls for
    /// whole ticks): then no centre describes them, and each group is given instead
    #[serde(default)]
    pub modes: Option<Modes>,
    /// ticks behind each sample: 1, or a power of two once a long run's ticks were merged in
    /// neighbouring pairs to keep its memory flat (`analysis::TickRates`); 1 in bundles written
    /// before ticks were merged
    #[serde(default = "one_tick")]
    pub ticks_per_sample: u64,
}

fn one_tick() -> u64 {
    1
}

/// Two groups of samples far apart: the low one (stalled) and the high one (sending).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Modes {
    /// the group of low samples
    pub low: Mode,
    /// the group of high samples
    pub high: Mode,
}

/// One group of samples.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Mode {
    /// samples in the group
    pub n: usize,
    /// fraction of all samples (of ticks: of the time, ticks being one interval each), 0..=1
    pub share: f64,
    /// median of the group, in the unit of the samples
    pub median: f64,
    /// smallest and largest sample of the group
    pub min: f64,
    pub max: f64,
}

/// Two groups are modes when each holds at least this fraction of the samples...
const MODE_MIN_SHARE: f64 = 0.1;
/// ...and at least this many samples...
const MODE_MIN_N: usize = 2;
/// ...the low group's mean is at most this fraction of the high group's...
const MODE_MAX_RATIO: f64 = 0.5;
/// ...Ashman's D, |mean_h - mean_l| * sqrt(2) / sqrt(var_l + var_h), is above this: the
/// groups are apart by more than their own spread...
const MODE_MIN_SEPARATION: f64 = 2.0;
/// ...and at most this fraction of the samples lies in the middle third between the two medians
/// (a ramp or a uniform spread splits with a D of ~3.5, but fills the middle).
const MODE_MAX_MIDDLE: f64 = 0.1;

/// A sample closer to the median than this fraction of it is never an outlier.
const OUTLIER_MIN_REL: f64 = 0.01;

impl RunStats {
    /// Summarises `samples`, ignoring NaN samples; `None` when no sample is left.
    pub fn from_samples(samples: &[f64]) -> Option<RunStats> {
        let mut sorted: Vec<f64> = samples.iter().copied().filter(|x| !x.is_nan()).collect();
        sorted.sort_by(f64::total_cmp);
        let median = percentile(&sorted, 0.5)?;

        let mut deviations: Vec<f64> = sorted.iter().map(|x| (x - median).abs()).collect();
        deviations.sort_by(f64::total_cmp);
        let mad = percentile(&deviations, 0.5)?;

        // Beyond 3 MAD, and beyond OUTLIER_MIN_REL of the median: on flat data the MAD is tiny,
        // and a tick 0.1 pps from a 10,000 pps median is no outlier.
        let limit = (3.0 * mad).max(OUTLIER_MIN_REL * median.abs());
        let inliers: Vec<f64> = sorted
            .iter()
            .copied()
            .filter(|x| mad == 0.0 || (x - median).abs() <= limit)
            .collect();
        let n = sorted.len();
        Some(RunStats {
            n,
            median,
            mean: inliers.iter().sum::<f64>() / inliers.len() as f64,
            outliers: n - inliers.len(),
            uncertainty: mad / (n as f64).sqrt(),
            p95: percentile(&sorted, 0.95)?,
            p99: percentile(&sorted, 0.99)?,
            min: *sorted.first()?,
            max: *sorted.last()?,
            modes: modes(&sorted),
            ticks_per_sample: 1,
        })
    }

    /// What the samples are, for a line of text: "N complete ticks", or, once ticks were
    /// merged, "N complete windows of K ticks".
    pub fn samples_text(&self) -> String {
        match self.ticks_per_sample {
            0 | 1 => format!("{} complete ticks", self.n),
            k => format!(
                "{} complete windows of {k} ticks (the run's ticks merged in neighbouring pairs past {} to bound its memory)",
                self.n,
                crate::analysis::MAX_TICK_RATES
            ),
        }
    }
}

/// The two modes of ascending `sorted`, if it has two: the split that leaves the least spread
/// within the groups (Otsu's, 1-D two-means), kept only when the groups are both sizeable, far
/// apart in level and separated beyond their own spread.
fn modes(sorted: &[f64]) -> Option<Modes> {
    let n = sorted.len();
    let mean = |g: &[f64]| g.iter().sum::<f64>() / g.len() as f64;
    let var = |g: &[f64]| {
        let m = mean(g);
        g.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / g.len() as f64
    };
    let min_n = MODE_MIN_N.max((MODE_MIN_SHARE * n as f64).ceil() as usize);
    if n < 2 * min_n {
        return None;
    }
    let k = split_at_least_spread(sorted, min_n);
    let (low, high) = sorted.split_at(k);
    let (ml, mh) = (mean(low), mean(high));
    let spread = (var(low) + var(high)).sqrt();
    let separation = if spread > 0.0 {
        (mh - ml) * std::f64::consts::SQRT_2 / spread
    } else {
        f64::INFINITY
    };
    if mh <= 0.0 || ml > MODE_MAX_RATIO * mh || separation <= MODE_MIN_SEPARATION {
        return None;
    }
    let (lo_med, hi_med) = (percentile(low, 0.5)?, percentile(high, 0.5)?);
    let third = (hi_med - lo_med) / 3.0;
    let middle = sorted
        .iter()
        .filter(|x| **x > lo_med + third && **x < hi_med - third)
        .count();
    if middle as f64 > MODE_MAX_MIDDLE * n as f64 {
        return None;
    }
    let mode = |g: &[f64]| Mode {
        n: g.len(),
        share: g.len() as f64 / n as f64,
        median: percentile(g, 0.5).unwrap_or(f64::NAN),
        min: g[0],
        max: g[g.len() - 1],
    };
    Some(Modes {
        low: mode(low),
        high: mode(high),
    })
}

/// Where ascending `sorted` splits into two groups of at least `min_n` (`sorted.len()` is at
/// least twice that) with the least within-group sum of squares; ties keep the first split.
/// Each split's sums come from prefix sums, O(n) in all (this runs on every tick, over every
/// tick of the run so far), taken about the median so that the squares stay small.
fn split_at_least_spread(sorted: &[f64], min_n: usize) -> usize {
    let n = sorted.len();
    let centre = sorted[n / 2];
    let (mut sum, mut sq) = (vec![0.0; n + 1], vec![0.0; n + 1]);
    for (i, x) in sorted.iter().enumerate() {
        let d = x - centre;
        sum[i + 1] = sum[i] + d;
        sq[i + 1] = sq[i] + d * d;
    }
    // Sum of squared deviations of sorted[a..b] from its own mean.
    let within = |a: usize, b: usize| {
        let (s, q, len) = (sum[b] - sum[a], sq[b] - sq[a], (b - a) as f64);
        (q - s * s / len).max(0.0)
    };
    let w = |k: usize| within(0, k) + within(k, n);
    (min_n..=n - min_n)
        .min_by(|&a, &b| w(a).total_cmp(&w(b)))
        .unwrap_or(min_n)
}

/// The `p` quantile (0..=1) of ascending `sorted`, interpolating linearly between
/// closest ranks; `None` when `sorted` is empty.
fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    let last = sorted.len().checked_sub(1)?;
    let rank = last as f64 * p;
    let below = (rank.floor() as usize).min(last);
    let above = (below + 1).min(last);
    Some(sorted[below] + (rank - below as f64) * (sorted[above] - sorted[below]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_close(actual: f64, expected: f64) {
        assert!((actual - expected).abs() < 1e-9, "{actual} != {expected}");
    }

    #[test]
    fn empty_and_all_nan_give_none() {
        assert_eq!(RunStats::from_samples(&[]), None);
        assert_eq!(RunStats::from_samples(&[f64::NAN, f64::NAN]), None);
    }

    #[test]
    fn single_sample() {
        let expected = RunStats {
            n: 1,
            median: 7.0,
            mean: 7.0,
            outliers: 0,
            uncertainty: 0.0,
            p95: 7.0,
            p99: 7.0,
            min: 7.0,
            max: 7.0,
            modes: None,
            ticks_per_sample: 1,
        };
        assert_eq!(RunStats::from_samples(&[7.0]), Some(expected));
    }

    #[test]
    fn two_samples() {
        let stats = RunStats::from_samples(&[3.0, 1.0]).unwrap();
        assert_eq!(stats.n, 2);
        assert_close(stats.median, 2.0);
        assert_close(stats.mean, 2.0);
        assert_eq!(stats.outliers, 0);
        // deviations [1, 1] -> MAD 1
        assert_close(stats.uncertainty, 1.0 / 2f64.sqrt());
        // rank (2-1)*0.95 = 0.95 -> 1 + 0.95 * (3 - 1)
        assert_close(stats.p95, 2.9);
        assert_close(stats.p99, 2.98);
        assert_close(stats.min, 1.0);
        assert_close(stats.max, 3.0);
    }

    #[test]
    fn odd_and_even_medians() {
        let median = |samples: &[f64]| RunStats::from_samples(samples).unwrap().median;
        assert_close(median(&[5.0, 1.0, 3.0]), 3.0);
        assert_close(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
    }

    #[test]
    fn obvious_outlier_is_left_out_of_mean() {
        let samples = [100.0, 101.0, 99.0, 100.0, 102.0, 98.0, 100.0, 5000.0];
        let stats = RunStats::from_samples(&samples).unwrap();
        // sorted: 98 99 100 100 100 101 102 5000 -> median 100
        // deviations sorted: 0 0 0 1 1 2 2 4900 -> MAD 1, only 5000 lies beyond 3
        assert_eq!(stats.n, 8);
        assert_close(stats.median, 100.0);
        assert_eq!(stats.outliers, 1);
        assert_close(stats.mean, 700.0 / 7.0);
        assert_close(stats.uncertainty, 1.0 / 8f64.sqrt());
        // rank 7*0.95 = 6.65 -> 102 + 0.65 * 4898; rank 6.93 -> 102 + 0.93 * 4898
        assert_close(stats.p95, 3285.7);
        assert_close(stats.p99, 4657.14);
        assert_close(stats.min, 98.0);
        assert_close(stats.max, 5000.0);
    }

    #[test]
    fn flat_data_has_no_outliers_a_tenth_of_a_packet_off() {
        // deviations 0 0 0 0.05 0.1 0.1 0.1 -> MAD 0.05: 0.1 is beyond 3 MAD yet 0.001% of the
        // median, which the text report called "1 outliers left out"
        let stats = RunStats::from_samples(&[
            10_000.0, 10_000.0, 10_000.1, 9_999.9, 10_000.0, 10_000.05, 10_000.1,
        ])
        .unwrap();
        assert_eq!(stats.outliers, 0);
        // ...while a tick at half the rate still is one
        let stats = RunStats::from_samples(&[
            10_000.0, 10_000.0, 10_000.1, 9_999.9, 10_000.0, 10_000.05, 5_000.0,
        ])
        .unwrap();
        assert_eq!(stats.outliers, 1);
    }

    #[test]
    fn zero_mad_marks_no_outliers() {
        // median 5, deviations 0 0 0 0 4 -> MAD 0: the 9 stays in the mean
        let stats = RunStats::from_samples(&[5.0, 5.0, 9.0, 5.0, 5.0]).unwrap();
        assert_eq!(stats.outliers, 0);
        assert_close(stats.mean, 29.0 / 5.0);
        assert_close(stats.uncertainty, 0.0);
    }

    #[test]
    fn nan_samples_are_ignored() {
        assert_eq!(
            RunStats::from_samples(&[1.0, f64::NAN, 3.0]),
            RunStats::from_samples(&[1.0, 3.0])
        );
    }

    #[test]
    fn a_sender_that_stalls_for_whole_ticks_has_two_modes_and_no_centre() {
        // The issue's run: 186.8 pps achieved, read as "median 11.5 +/- 1.8, mean 1.0 (20
        // outliers left out)". 22 stalled ticks near zero, 18 sending ticks near 415 pps.
        let mut samples: Vec<f64> = (0..22).map(|i| [0.0, 1.0, 11.5, 13.0][i % 4]).collect();
        samples.extend((0..18).map(|i| 405.0 + (i % 5) as f64 * 5.0));
        let stats = RunStats::from_samples(&samples).unwrap();
        let m = stats.modes.expect("two modes");
        assert_eq!((m.low.n, m.high.n), (22, 18));
        assert_close(m.low.share, 0.55);
        assert_close(m.high.share, 0.45);
        assert_close(m.high.median, 415.0);
        assert_close(m.low.max, 13.0);
        assert_close(m.high.min, 405.0);
    }

    /// The split from prefix sums is the split the direct two-means search finds (the search
    /// that was O(n^2): 2.6 s for 8,000 ticks in a debug build), on stalls, two near levels,
    /// a ramp and pseudo-random rates around 100,000 pps, where squares of raw rates would
    /// lose precision.
    #[test]
    fn the_split_from_prefix_sums_equals_the_direct_search() {
        fn direct(sorted: &[f64], min_n: usize) -> usize {
            let var_n = |g: &[f64]| {
                let m = g.iter().sum::<f64>() / g.len() as f64;
                g.iter().map(|x| (x - m) * (x - m)).sum::<f64>()
            };
            (min_n..=sorted.len() - min_n)
                .min_by(|&a, &b| {
                    let w = |k: usize| var_n(&sorted[..k]) + var_n(&sorted[k..]);
                    w(a).total_cmp(&w(b))
                })
                .unwrap()
        }
        let mut stalls: Vec<f64> = (0..220).map(|i| [0.0, 1.0, 11.5, 13.0][i % 4]).collect();
        stalls.extend((0..180).map(|i| 405.0 + (i % 5) as f64 * 5.0));
        let mut levels = vec![1000.0; 100];
        levels.extend([1010.0; 100]);
        let ramp: Vec<f64> = (1..=300).map(|i| i as f64 * 10.0).collect();
        let mut x = 12345u64;
        let noisy: Vec<f64> = (0..500)
            .map(|i| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let level = if i % 3 == 0 { 40_000.0 } else { 100_000.0 };
                level + (x >> 40) as f64 / (1u64 << 24) as f64 * 50.0
            })
            .collect();
        for mut samples in [stalls, levels, ramp, noisy] {
            samples.sort_by(f64::total_cmp);
            let n = samples.len();
            let min_n = MODE_MIN_N.max((MODE_MIN_SHARE * n as f64).ceil() as usize);
            let want = direct(&samples, min_n);
            let got = modes(&samples).map(|m| m.low.n);
            // modes() keeps only real pairs; where it keeps one, its low group ends at the split.
            if let Some(k) = got {
                assert_eq!(k, want, "{:?}..", &samples[..5]);
            }
            assert_eq!(
                split_at_least_spread(&samples, min_n),
                want,
                "{:?}..",
                &samples[..5]
            );
        }
    }

    #[test]
    fn one_mode_with_jitter_or_a_few_slow_ticks_is_not_bimodal() {
        // A steady rate with jitter, even split in two tight levels, is one mode.
        let steady = [
            10_000.0, 10_000.0, 10_000.1, 9_999.9, 10_000.0, 10_000.1, 10_000.1,
        ];
        assert_eq!(RunStats::from_samples(&steady).unwrap().modes, None);
        let mut two_levels = vec![1000.0; 10];
        two_levels.extend([1010.0; 10]);
        assert_eq!(RunStats::from_samples(&two_levels).unwrap().modes, None);
        // One slow tick in 20 is an outlier, not a mode.
        let mut one_slow = vec![500.0; 19];
        one_slow.push(3.0);
        assert_eq!(RunStats::from_samples(&one_slow).unwrap().modes, None);
        // A ramp is no pair of modes either.
        let ramp: Vec<f64> = (1..=30).map(|i| i as f64 * 10.0).collect();
        assert_eq!(RunStats::from_samples(&ramp).unwrap().modes, None);
    }

    #[test]
    fn percentiles_of_one_to_hundred() {
        let samples: Vec<f64> = (1..=100).map(f64::from).collect();
        let stats = RunStats::from_samples(&samples).unwrap();
        // rank 99*0.95 = 94.05 -> 95.05; rank 99*0.99 = 98.01 -> 99.01
        assert_close(stats.p95, 95.05);
        assert_close(stats.p99, 99.01);
        assert_close(stats.median, 50.5);
        assert_close(stats.mean, 50.5);
        // deviations 0.5 0.5 1.5 1.5 ... -> middle pair 24.5, 25.5 -> MAD 25
        assert_close(stats.uncertainty, 25.0 / 10.0);
        assert_eq!(stats.outliers, 0);
    }
}
