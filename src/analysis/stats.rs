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
}

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
        })
    }
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
