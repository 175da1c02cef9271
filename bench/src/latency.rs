//! Latency samples to figures: percentiles and the distribution that the
//! report plots.

use hdrhistogram::Histogram;

/// The percentiles a distribution is reported at (0..=100): dense near the
/// tail, where guest and native part ways.
pub const CDF_PERCENTILES: &[f64] = &[
    0.0, 1.0, 5.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 95.0, 97.0, 98.0, 99.0,
    99.5, 99.9, 100.0,
];

fn histogram(ns: &[u64]) -> Histogram<u64> {
    let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).expect("histogram bounds");
    for &v in ns {
        h.saturating_record(v.max(1));
    }
    h
}

/// Percentile `q` (0..100) of `ns` samples (nanoseconds), in microseconds
/// (3 significant digits).
pub fn percentile_us(ns: &[u64], q: f64) -> f64 {
    histogram(ns).value_at_quantile(q / 100.0) as f64 / 1000.0
}

/// The distribution of `ns` samples (nanoseconds) as `[percentile, us]`
/// pairs at [`CDF_PERCENTILES`]: what `report.html` draws as a CDF. Empty
/// for no samples.
pub fn cdf_us(ns: &[u64]) -> Vec<[f64; 2]> {
    if ns.is_empty() {
        return Vec::new();
    }
    let h = histogram(ns);
    CDF_PERCENTILES
        .iter()
        .map(|&q| [q, h.value_at_quantile(q / 100.0) as f64 / 1000.0])
        .collect()
}
