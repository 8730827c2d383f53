//! The batch report rendered as the table `trainer bench` and `trainer holdout` print: the legs,
//! each variant against the baseline's bracketing anchors, the variants against each other, the
//! rig floor, and the flags that make a batch invalid or inconclusive.

use super::batch_report::Report;
use super::stats::Verdict;
use std::fmt::Write as _;

fn pct(x: f64) -> String {
    if x.is_finite() {
        format!("{x:+.1}%")
    } else {
        "-".into()
    }
}

fn verdict_word(v: Verdict) -> &'static str {
    match v {
        Verdict::Better => "faster",
        Verdict::Worse => "SLOWER",
        Verdict::WithinNoise => "within noise",
    }
}

pub fn render_table(r: &Report) -> String {
    let s = &r.settings;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "bench: shape {} ({} {}, posture {}), {} connections, {} rounds, {:.1} s windows after {:.1} s warm-up",
        s.shape,
        s.endpoint,
        if s.stream { "streaming" } else { "non-streaming" },
        s.posture,
        s.connections,
        s.rounds,
        s.window_secs,
        s.warmup_secs
    );
    let _ = writeln!(
        out,
        "priority: {}",
        s.nice.map_or("untouched".to_string(), |n| format!(
            "nice {n} asked for the gateway, mock and load generator"
        ))
    );
    let _ = writeln!(
        out,
        "pinning: {}",
        match (s.gateway_cpu, s.rig_cpu, s.mock_cpu) {
            (Some(g), Some(rc), Some(m)) if m != rc => format!(
                "gateway (workers {}) on cpu {g}; load generator ({}) on cpu {rc}; mock on cpu {m}",
                s.gateway_workers, s.load_client
            ),
            (Some(g), Some(rc), _) => format!(
                "gateway (workers {}) on cpu {g}; load generator ({}) and mock on cpu {rc}",
                s.gateway_workers, s.load_client
            ),
            _ => "off".into(),
        }
    );
    if let Some(rig) = &r.rig_floor {
        let _ = writeln!(
            out,
            "rig floor (load generator -> mock, no gateway): {:.0} rps, p50 {:.3} ms, p99 {:.3} ms \
             (load generator {:.2} us/req, mock {:.2} us/req); headroom {} over the fastest gateway{}",
            rig.window.rps,
            rig.window.p50_ms,
            rig.window.p99_ms,
            rig.window.loadgen_cpu_us_per_req,
            rig.window.mock_cpu_us_per_req,
            if rig.headroom_x.is_finite() {
                format!("{:.2}x", rig.headroom_x)
            } else {
                "n/a".into()
            },
            if rig.flagged { "  [FLAGGED: under 2x]" } else { "" }
        );
    }
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{:>3}  {:<12} {:>9} {:>8} {:>8} {:>11} {:>8} {:>7} {:>9} {:>6} {:>7} {:>9} {:>9}",
        "leg",
        "binary",
        "rps",
        "p50 ms",
        "p99 ms",
        "cpu us/req",
        "user us",
        "gw cpu",
        "RSS MiB",
        "failed",
        "gw-irq",
        "gw-other",
        "rig-other"
    );
    let opt = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{v:.1}%"));
    for l in &r.legs {
        let _ = writeln!(
            out,
            "{:>3}  {:<12} {:>9.0} {:>8.3} {:>8.3} {:>11.2} {:>8.2} {:>6.0}% {:>9.1} {:>6} {:>7} {:>9} {:>9}",
            l.index,
            trunc(&l.label, 12),
            l.window.rps,
            l.window.p50_ms,
            l.window.p99_ms,
            l.cpu_us_per_req,
            l.user_us_per_req,
            l.gateway_cpu_pct,
            l.peak_rss_kib as f64 / 1024.0,
            l.window.failed + l.window.failed_outside_window,
            opt(l.window.gateway_core_irq_pct),
            opt(l.window.gateway_core_other_pct),
            opt(l.window.rig_core_other_pct)
        );
    }
    if let Some(a) = &r.anchors {
        let b = &a.noise_band;
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "anchors: {} baseline legs; front {:.0} rps, back {:.0} rps, drift {} (cpu/req drift {})",
            a.legs,
            a.front_rps,
            a.back_rps,
            pct(a.drift_rps_pct),
            pct(a.drift_cpu_us_pct)
        );
        let _ = writeln!(
            out,
            "noise band (spread of the baseline legs, floor {:.1}%): rps ±{:.1}%, p50 ±{:.1}%, \
             p99 ±{:.1}%, cpu/req ±{:.1}%",
            s.min_band_pct, b.rps_pct, b.p50_pct, b.p99_pct, b.cpu_us_pct
        );
    }
    if !r.summaries.is_empty() {
        let _ = writeln!(out);
        let _ =
            writeln!(
            out,
            "{:<12} {:>4} {:>9} {:>8} {:>8} {:>8} {:>8} {:>8} {:>11} {:>8} {:>8} {:>8} {:>8}  verdict (rps)",
            "binary", "legs", "rps", "Δrps", "p50 ms", "Δp50", "p99 ms", "Δp99", "cpu us/req",
            "Δcpu", "user us", "Δuser", "RSS MiB"
        );
        for sm in &r.summaries {
            let (dr, d50, d99, dc, du, v) = match &sm.delta {
                Some(d) => (
                    pct(d.rps_pct),
                    pct(d.p50_pct),
                    pct(d.p99_pct),
                    pct(d.cpu_us_pct),
                    pct(d.user_us_median_pct),
                    format!(
                        "{} (per-leg median {} rps, {} cpu)",
                        verdict_word(d.rps),
                        pct(d.rps_median_pct),
                        pct(d.cpu_us_median_pct)
                    ),
                ),
                None => (
                    "base".into(),
                    "".into(),
                    "".into(),
                    "".into(),
                    "".into(),
                    "baseline".into(),
                ),
            };
            let _ = writeln!(
                out,
                "{:<12} {:>4} {:>9.0} {:>8} {:>8.3} {:>8} {:>8.3} {:>8} {:>11.2} {:>8} {:>8.2} {:>8} {:>8.1}  {}",
                trunc(&sm.label, 12),
                sm.legs,
                sm.rps,
                dr,
                sm.p50_ms,
                d50,
                sm.p99_ms,
                d99,
                sm.cpu_us_per_req,
                dc,
                sm.user_us_per_req,
                du,
                sm.peak_rss_kib as f64 / 1024.0,
                v
            );
        }
    }
    if !r.between_variants.is_empty() {
        let _ = writeln!(out);
        let _ = writeln!(out, "between variants (same bands):");
        for p in &r.between_variants {
            let _ = writeln!(
                out,
                "  {} vs {}: {} rps ({}), {} cpu/req ({})",
                p.variant,
                p.against,
                pct(p.rps_pct),
                verdict_word(p.rps),
                pct(p.cpu_us_pct),
                match p.cpu_us {
                    Verdict::Better => "cheaper",
                    Verdict::Worse => "COSTLIER",
                    Verdict::WithinNoise => "within noise",
                }
            );
        }
    }
    let _ = writeln!(out);
    for f in &r.flags {
        let _ = writeln!(out, "flag: {f}");
    }
    if r.valid {
        let _ = writeln!(out, "batch: valid");
    } else {
        for p in &r.problems {
            let _ = writeln!(out, "INVALID: {p}");
        }
    }
    out
}

fn trunc(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}
