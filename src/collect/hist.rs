//! Decoding of the kernel's log-linear nanosecond histograms: collect reads the BPF bucket
//! counters into a `Histogram` (part of its samples); analysis takes deltas, quantiles and
//! means from them. Pure, and in collect because the bucket layout is the probes' (wire.h).

use serde::{Deserialize, Serialize};

/// Values below this have a bucket each (SP_HIST_LINEAR).
const LINEAR: usize = 16;
/// Each power of two above the linear range is split into 2^SUB_BITS buckets (SP_HIST_SUB_BITS).
const SUB_BITS: u32 = 3;
const SUB_BUCKETS: usize = 1 << SUB_BITS;
/// Highest set bit with buckets of its own; larger values go to the last bucket (SP_HIST_MAX_MSB).
const MAX_MSB: u32 = 39;

/// Number of buckets in a kernel histogram (SP_HIST_BUCKETS, 304).
pub const HIST_BUCKETS: usize = LINEAR + (MAX_MSB as usize - 3) * SUB_BUCKETS;

/// Bucket index of a value in ns, exactly as the BPF side computes it
/// (used by tests and by pure code that builds histograms).
pub fn bucket_of(v: u64) -> usize {
    if v < LINEAR as u64 {
        return v as usize;
    }
    let msb = 63 - v.leading_zeros();
    if msb > MAX_MSB {
        return HIST_BUCKETS - 1;
    }
    let sub = (v >> (msb - SUB_BITS)) as usize & (SUB_BUCKETS - 1);
    LINEAR + (msb as usize - 4) * SUB_BUCKETS + sub
}

/// `[low, high)` bounds in ns of bucket `i`. The last bucket's high is `u64::MAX`, and that
/// bucket holds `u64::MAX` itself too; indices past the last bucket give the last bucket's bounds.
pub fn bucket_bounds(i: usize) -> (u64, u64) {
    let (low, high) = span(i);
    if i >= HIST_BUCKETS - 1 {
        (low, u64::MAX)
    } else {
        (low, high)
    }
}

/// Bounds in ns of bucket `i` by its width alone: the last bucket ends at 2^40 ns here.
fn span(i: usize) -> (u64, u64) {
    if i < LINEAR {
        return (i as u64, i as u64 + 1);
    }
    let above_linear = i.min(HIST_BUCKETS - 1) - LINEAR;
    let msb = (above_linear / SUB_BUCKETS) as u32 + 4;
    let width = 1u64 << (msb - SUB_BITS);
    let low = (1u64 << msb) + (above_linear % SUB_BUCKETS) as u64 * width;
    (low, low + width)
}

/// Counts of nanosecond values in the kernel's log-linear buckets.
///
/// Estimates (`quantile`, `mean_estimate`, `fraction_below`) assume counts are spread
/// uniformly within each bucket, and take the last bucket to end at 2^40 ns (~18 min),
/// so they under-estimate anything beyond that.
/// Serialized compactly as a list of `[low_ns, high_ns, count]` for non-empty buckets.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(into = "Vec<(u64, u64, u64)>", try_from = "Vec<(u64, u64, u64)>")]
pub struct Histogram {
    /// count per bucket; always `HIST_BUCKETS` long
    counts: Vec<u64>,
}

impl Default for Histogram {
    fn default() -> Histogram {
        Histogram {
            counts: vec![0; HIST_BUCKETS],
        }
    }
}

impl Histogram {
    /// Histogram from bucket counts as the kernel lays them out; counts past the last
    /// bucket are folded into the last bucket.
    pub fn from_buckets(counts: &[u64]) -> Histogram {
        let mut hist = Histogram::default();
        for (i, &count) in counts.iter().enumerate() {
            let slot = &mut hist.counts[i.min(HIST_BUCKETS - 1)];
            *slot = slot.saturating_add(count);
        }
        hist
    }

    /// Counts one value in ns.
    pub fn record(&mut self, v: u64) {
        let slot = &mut self.counts[bucket_of(v)];
        *slot = slot.saturating_add(1);
    }

    /// Adds `other`'s counts bucket by bucket.
    pub fn add(&mut self, other: &Histogram) {
        for (count, extra) in self.counts.iter_mut().zip(&other.counts) {
            *count = count.saturating_add(*extra);
        }
    }

    /// Bucket-wise difference of two cumulative readings (the per-tick delta); a bucket
    /// that went down (counters reset) gives 0.
    pub fn saturating_sub(&self, earlier: &Histogram) -> Histogram {
        Histogram {
            counts: (self.counts.iter().zip(&earlier.counts))
                .map(|(now, before)| now.saturating_sub(*before))
                .collect(),
        }
    }

    /// Total number of values counted.
    pub fn count(&self) -> u64 {
        self.counts.iter().fold(0, |sum, &c| sum.saturating_add(c))
    }

    /// Whether no value was counted.
    pub fn is_empty(&self) -> bool {
        self.counts.iter().all(|&c| c == 0)
    }

    /// Estimated `q` quantile in ns (`q` clamped to 0..=1), interpolating linearly inside
    /// the bucket that holds it; `None` when empty or `q` is NaN.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        if q.is_nan() {
            return None;
        }
        let rank = q.clamp(0.0, 1.0) * self.count() as f64;
        let mut counted = 0u64;
        self.estimate_spans().find_map(|(low, high, count)| {
            let before = counted;
            counted = counted.saturating_add(count);
            (counted as f64 >= rank).then(|| low + (high - low) * (rank - before as f64) / count as f64)
        })
    }

    /// Estimated mean in ns from bucket midpoints; `None` when empty.
    pub fn mean_estimate(&self) -> Option<f64> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        let sum: f64 = self
            .estimate_spans()
            .map(|(low, high, count)| (low + high) / 2.0 * count as f64)
            .sum();
        Some(sum / total as f64)
    }

    /// Non-empty buckets as `(low_ns, high_ns, count)`, bounds as in [`bucket_bounds`].
    pub fn nonzero_buckets(&self) -> impl Iterator<Item = (u64, u64, u64)> + '_ {
        (self.counts.iter().enumerate())
            .filter(|(_, &count)| count > 0)
            .map(|(i, &count)| {
                let (low, high) = bucket_bounds(i);
                (low, high, count)
            })
    }

    /// Fraction of counts whose bucket lies entirely below `ns`, plus the interpolated
    /// part of the bucket containing it; 0 when empty.
    pub fn fraction_below(&self, ns: u64) -> f64 {
        let total = self.count();
        if total == 0 {
            return 0.0;
        }
        let ns = ns as f64;
        let below: f64 = self
            .estimate_spans()
            .map(|(low, high, count)| count as f64 * ((ns - low) / (high - low)).clamp(0.0, 1.0))
            .sum();
        below / total as f64
    }

    /// Non-empty buckets as `(low_ns, high_ns, count)` with the bounds the estimates use.
    fn estimate_spans(&self) -> impl Iterator<Item = (f64, f64, u64)> + '_ {
        (self.counts.iter().enumerate())
            .filter(|(_, &count)| count > 0)
            .map(|(i, &count)| {
                let (low, high) = span(i);
                (low as f64, high as f64, count)
            })
    }
}

impl From<Histogram> for Vec<(u64, u64, u64)> {
    fn from(hist: Histogram) -> Self {
        hist.nonzero_buckets().collect()
    }
}

impl TryFrom<Vec<(u64, u64, u64)>> for Histogram {
    type Error = String;

    /// Rebuilds a histogram from its serialized `[low_ns, high_ns, count]` list,
    /// rejecting bounds that are not exactly a bucket's.
    fn try_from(buckets: Vec<(u64, u64, u64)>) -> Result<Histogram, String> {
        let mut hist = Histogram::default();
        for (low, high, count) in buckets {
            let i = bucket_of(low);
            if bucket_bounds(i) != (low, high) {
                return Err(format!("[{low}, {high}) is not a histogram bucket"));
            }
            hist.counts[i] = hist.counts[i].saturating_add(count);
        }
        Ok(hist)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filled(values: impl IntoIterator<Item = u64>) -> Histogram {
        let mut hist = Histogram::default();
        values.into_iter().for_each(|v| hist.record(v));
        hist
    }

    #[test]
    fn bucket_count_matches_c_header() {
        assert_eq!(HIST_BUCKETS, 304);
    }

    #[test]
    fn bucket_of_known_values() {
        let cases = [
            (0, 0),
            (1, 1),
            (15, 15),
            (16, 16),
            (17, 16),         // msb 4: (17 >> 1) & 7 = 0
            (31, 23),         // msb 4: (31 >> 1) & 7 = 7
            (32, 24),         // msb 5, sub 0
            (1000, 63),       // msb 9: 16 + 5*8 + ((1000 >> 6) & 7 = 7)
            (1_000_000, 143), // msb 19: 16 + 15*8 + ((1e6 >> 16) & 7 = 7)
            (1 << 39, 296),   // msb 39: 16 + 35*8 + 0
            ((1 << 40) - 1, 303),
            (1 << 40, 303),
            (u64::MAX, 303),
        ];
        for (v, bucket) in cases {
            assert_eq!(bucket_of(v), bucket, "bucket_of({v})");
        }
    }

    #[test]
    fn bounds_hold_their_values() {
        let powers = (0..64).flat_map(|b| {
            let p = 1u64 << b;
            [p - 1, p, p + 1, p + p / 3]
        });
        let geometric = std::iter::successors(Some(1u64), |v| v.checked_add(v / 7 + 1));
        for v in (0..5000).chain(powers).chain(geometric).chain([u64::MAX]) {
            let i = bucket_of(v);
            let (low, high) = bucket_bounds(i);
            assert!(low <= v, "{v} below bucket {i} [{low}, {high})");
            assert!(v < high || i == HIST_BUCKETS - 1, "{v} above bucket {i}");
        }
    }

    #[test]
    fn bounds_are_contiguous() {
        assert_eq!(bucket_bounds(0).0, 0);
        for i in 0..HIST_BUCKETS - 1 {
            assert_eq!(bucket_bounds(i).1, bucket_bounds(i + 1).0, "gap after {i}");
        }
        assert_eq!(bucket_bounds(HIST_BUCKETS - 1), ((1 << 39) + (7 << 36), u64::MAX));
        assert_eq!(bucket_bounds(HIST_BUCKETS + 5), bucket_bounds(HIST_BUCKETS - 1));
    }

    #[test]
    fn quantiles_of_uniform_values_are_within_a_sub_bucket() {
        let hist = filled(1..=10_000);
        assert_eq!(hist.count(), 10_000);
        for q in [
            0.0, 0.001, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.999, 1.0,
        ] {
            let truth = 1.0 + q * 9999.0;
            let estimate = hist.quantile(q).unwrap();
            assert!(
                (estimate - truth).abs() <= 0.125 * truth,
                "q {q}: {estimate} vs {truth}"
            );
        }
        let mean = hist.mean_estimate().unwrap();
        assert!((mean - 5000.5).abs() <= 0.125 * 5000.5, "mean {mean}");
    }

    #[test]
    fn empty_histogram_has_no_estimates() {
        let hist = Histogram::default();
        assert!(hist.is_empty());
        assert_eq!(hist.count(), 0);
        assert_eq!(hist.quantile(0.5), None);
        assert_eq!(hist.mean_estimate(), None);
        assert_eq!(hist.fraction_below(1000), 0.0);
        assert_eq!(hist.nonzero_buckets().count(), 0);
        assert_eq!(hist, Histogram::from_buckets(&[]));
    }

    #[test]
    fn estimates_spread_counts_uniformly_in_a_bucket() {
        let hist = filled([5, 5, 5, 7]);
        // uniform inside [5, 6) and [7, 8): midpoints 5.5 and 7.5
        assert_eq!(hist.mean_estimate(), Some(6.0));
        assert_eq!(hist.quantile(0.0), Some(5.0));
        assert_eq!(hist.quantile(0.5), Some(5.0 + 2.0 / 3.0));
        assert_eq!(hist.quantile(1.0), Some(8.0));
        assert_eq!(hist.quantile(f64::NAN), None);
        assert_eq!(hist.nonzero_buckets().collect::<Vec<_>>(), [(5, 6, 3), (7, 8, 1)]);
    }

    #[test]
    fn fraction_below_interpolates_inside_a_bucket() {
        // 16 and 17 share [16, 18); 100 sits in [96, 104)
        let hist = filled([16, 17, 100]);
        assert_eq!(hist.fraction_below(0), 0.0);
        assert_eq!(hist.fraction_below(17), 1.0 / 3.0);
        assert_eq!(hist.fraction_below(18), 2.0 / 3.0);
        assert_eq!(hist.fraction_below(100), 2.5 / 3.0);
        assert_eq!(hist.fraction_below(u64::MAX), 1.0);
    }

    #[test]
    fn saturating_sub_gives_per_tick_delta() {
        let earlier = Histogram::from_buckets(&[1, 2, 3, 9]);
        let later = Histogram::from_buckets(&[4, 2, 10, 0]);
        let delta = later.saturating_sub(&earlier);
        assert_eq!(delta, Histogram::from_buckets(&[3, 0, 7, 0]));
        assert_eq!(delta.count(), 10);
    }

    #[test]
    fn add_sums_bucket_wise() {
        let mut total = filled([3, 1000]);
        total.add(&filled([3, 5]));
        assert_eq!(total, filled([3, 3, 5, 1000]));
    }

    #[test]
    fn from_buckets_folds_extra_into_last_bucket() {
        let hist = Histogram::from_buckets(&[1; HIST_BUCKETS + 6]);
        assert_eq!(hist.count(), HIST_BUCKETS as u64 + 6);
        let last = hist.nonzero_buckets().last();
        assert_eq!(last, Some(((1 << 39) + (7 << 36), u64::MAX, 7)));

        let short = Histogram::from_buckets(&[0, 2, 3]);
        assert_eq!(
            short.nonzero_buckets().collect::<Vec<_>>(),
            [(1, 2, 2), (2, 3, 3)]
        );
    }

    #[test]
    fn serializes_as_nonempty_buckets() {
        let hist = filled([5, 5, 17]);
        let json = serde_json::to_string(&hist).unwrap();
        assert_eq!(json, "[[5,6,2],[16,18,1]]");
        assert_eq!(serde_json::from_str::<Histogram>(&json).unwrap(), hist);
        assert!(serde_json::from_str::<Histogram>("[[5,7,2]]").is_err());
    }
}
