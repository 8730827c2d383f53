//! The bench's statistics: percentiles, the anchors' drift and noise band, and the bracketed
//! delta of a variant against the baseline.
//!
//! Layout of a batch: `A V1 V2 .. A V1 V2 .. A` — the baseline `A` opens and closes the batch
//! and sits between every round of variant legs. Variant leg `i` is therefore bracketed by
//! baseline legs `i` and `i + 1`.

/// Nearest-rank percentile of an ascending slice (`p` in 0..=100). `None` when empty.
pub fn percentile(sorted: &[u32], p: f64) -> Option<u32> {
    if sorted.is_empty() {
        return None;
    }
    let p = p.clamp(0.0, 100.0);
    // Nearest rank: the smallest value with at least p% of the samples at or below it.
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    let idx = rank.saturating_sub(1).min(sorted.len() - 1);
    Some(sorted[idx])
}

pub fn mean(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    xs.iter().sum::<f64>() / xs.len() as f64
}

/// Relative change from the front anchor to the back anchor, in percent.
pub fn drift_pct(anchors: &[f64]) -> f64 {
    match (anchors.first(), anchors.last()) {
        (Some(&front), Some(&back)) if anchors.len() >= 2 && front != 0.0 => {
            (back - front) / front * 100.0
        }
        _ => 0.0,
    }
}

/// Spread of the baseline legs: (max − min) / mean, in percent. It is the largest difference
/// seen between two runs of the *same* binary in this batch (it includes the front-to-back
/// drift, since both anchors are among the legs), so it is what a null variant could show.
pub fn spread_pct(anchors: &[f64]) -> f64 {
    if anchors.len() < 2 {
        return 0.0;
    }
    let m = mean(anchors);
    if m == 0.0 || !m.is_finite() {
        return 0.0;
    }
    let max = anchors.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let min = anchors.iter().cloned().fold(f64::INFINITY, f64::min);
    (max - min) / m * 100.0
}

/// The noise band: the anchors' spread or their front-to-back drift, whichever is wider, never
/// narrower than `floor_pct`.
pub fn noise_band_pct(anchors: &[f64], floor_pct: f64) -> f64 {
    spread_pct(anchors)
        .max(drift_pct(anchors).abs())
        .max(floor_pct)
}

/// Per-leg deltas of a variant, in percent: variant leg `i` against the mean of the baseline
/// legs `i` and `i + 1` that bracket it. Empty unless `anchors.len() == variant.len() + 1`.
pub fn per_leg_deltas_pct(anchors: &[f64], variant: &[f64]) -> Vec<f64> {
    if variant.is_empty() || anchors.len() != variant.len() + 1 {
        return Vec::new();
    }
    variant
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let bracket = (anchors[i] + anchors[i + 1]) / 2.0;
            (v - bracket) / bracket * 100.0
        })
        .collect()
}

/// Delta of a variant against the baseline, in percent, drift-corrected: the mean of
/// [`per_leg_deltas_pct`]. When the legs do not interleave (`anchors.len() !=
/// variant.len() + 1`) it falls back to the ratio of the means.
pub fn bracketed_delta_pct(anchors: &[f64], variant: &[f64]) -> f64 {
    if variant.is_empty() || anchors.is_empty() {
        return f64::NAN;
    }
    let per_leg = per_leg_deltas_pct(anchors, variant);
    if per_leg.is_empty() {
        let a = mean(anchors);
        return (mean(variant) - a) / a * 100.0;
    }
    mean(&per_leg)
}

/// Median (mean of the middle two for an even count); NaN when empty.
pub fn median(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    let mut v = xs.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    Better,
    Worse,
    WithinNoise,
}

/// Classify a delta against the band. `higher_is_better` is true for rps, false for latency
/// and CPU per request.
pub fn verdict(delta_pct: f64, band_pct: f64, higher_is_better: bool) -> Verdict {
    if !delta_pct.is_finite() || delta_pct.abs() <= band_pct {
        return Verdict::WithinNoise;
    }
    if (delta_pct > 0.0) == higher_is_better {
        Verdict::Better
    } else {
        Verdict::Worse
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_nearest_rank() {
        let v: Vec<u32> = (1..=100).collect();
        assert_eq!(percentile(&v, 50.0), Some(50));
        assert_eq!(percentile(&v, 99.0), Some(99));
        assert_eq!(percentile(&v, 100.0), Some(100));
        assert_eq!(percentile(&v, 0.0), Some(1));
        assert_eq!(percentile(&[7], 99.0), Some(7));
        assert_eq!(percentile(&[], 50.0), None);
        // 10 samples: p99 is the largest one, p50 the 5th.
        let w = [1, 2, 3, 4, 5, 6, 7, 8, 9, 1000];
        assert_eq!(percentile(&w, 50.0), Some(5));
        assert_eq!(percentile(&w, 99.0), Some(1000));
        assert_eq!(percentile(&w, 90.0), Some(9));
    }

    #[test]
    fn drift_front_to_back() {
        assert!((drift_pct(&[100.0, 50.0, 102.0]) - 2.0).abs() < 1e-9);
        assert!((drift_pct(&[100.0, 97.0]) + 3.0).abs() < 1e-9);
        assert_eq!(drift_pct(&[100.0]), 0.0);
        assert_eq!(drift_pct(&[]), 0.0);
    }

    #[test]
    fn band_is_spread_with_floor() {
        // mean 100, max-min 4 → 4%.
        let a = [100.0, 98.0, 102.0];
        assert!((spread_pct(&a) - 4.0).abs() < 1e-9);
        assert!((noise_band_pct(&a, 1.0) - 4.0).abs() < 1e-9);
        assert!((noise_band_pct(&[100.0, 100.0], 1.5) - 1.5).abs() < 1e-9);
        assert_eq!(spread_pct(&[5.0]), 0.0);
        // A monotone drift 100 → 150: spread 50/125 = 40%, drift 50% → the band is 50%.
        assert!((noise_band_pct(&[100.0, 125.0, 150.0], 1.0) - 50.0).abs() < 1e-9);
    }

    #[test]
    fn bracketed_delta_cancels_linear_drift() {
        // Baseline drifts 100 → 110 → 120; a variant that is exactly 10% faster than whatever
        // baseline surrounds it reads +10%, not the +15% that first-anchor comparison gives.
        let anchors = [100.0, 110.0, 120.0];
        let variant = [105.0 * 1.1, 115.0 * 1.1];
        assert!((bracketed_delta_pct(&anchors, &variant) - 10.0).abs() < 1e-9);
        // Same binary: zero.
        let same = [105.0, 115.0];
        assert!(bracketed_delta_pct(&anchors, &same).abs() < 1e-9);
        // Mismatched lengths fall back to the ratio of means.
        assert!((bracketed_delta_pct(&[100.0, 100.0], &[120.0]) - 20.0).abs() < 1e-9);
        assert!((bracketed_delta_pct(&[100.0], &[90.0, 110.0]) - 0.0).abs() < 1e-9);
        assert!(bracketed_delta_pct(&[], &[1.0]).is_nan());
    }

    #[test]
    fn per_leg_and_median() {
        let d = per_leg_deltas_pct(&[100.0, 100.0, 200.0], &[110.0, 165.0]);
        assert_eq!(d.len(), 2);
        assert!((d[0] - 10.0).abs() < 1e-9 && (d[1] - 10.0).abs() < 1e-9);
        assert!(per_leg_deltas_pct(&[1.0, 2.0], &[1.0, 2.0]).is_empty());
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
    }

    #[test]
    fn verdicts() {
        assert_eq!(verdict(5.0, 2.0, true), Verdict::Better);
        assert_eq!(verdict(-5.0, 2.0, true), Verdict::Worse);
        assert_eq!(verdict(1.9, 2.0, true), Verdict::WithinNoise);
        assert_eq!(verdict(-2.0, 2.0, true), Verdict::WithinNoise);
        // Lower is better (latency, CPU per request).
        assert_eq!(verdict(-5.0, 2.0, false), Verdict::Better);
        assert_eq!(verdict(5.0, 2.0, false), Verdict::Worse);
        assert_eq!(verdict(f64::NAN, 2.0, true), Verdict::WithinNoise);
    }
}
