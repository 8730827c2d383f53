//! The batch report of `trainer bench` and `trainer holdout`: what is written as JSON and
//! rendered as a table (not `bench/report`, the script that regenerates docs/bench-results).

use super::stats::{self, Verdict};
use serde::Serialize;

#[derive(Serialize, Clone, Debug)]
pub struct Settings {
    pub shape: String,
    pub endpoint: String,
    pub stream: bool,
    pub posture: String,
    pub connections: usize,
    pub rounds: usize,
    pub window_secs: f64,
    pub warmup_secs: f64,
    pub min_band_pct: f64,
    /// `None` when pinning was switched off.
    pub gateway_cpu: Option<usize>,
    pub rig_cpu: Option<usize>,
    /// The mock's CPU: the rig's, or one of its own where the machine has a third.
    #[serde(default)]
    pub mock_cpu: Option<usize>,
    pub gateway_workers: u32,
    /// Nice value asked for the gateway, the mock and the load generator (`None`: untouched).
    pub nice: Option<i32>,
    /// The load generator.
    pub load_client: String,
    pub binaries: Vec<Binary>,
}

#[derive(Serialize, Clone, Debug)]
pub struct Binary {
    pub label: String,
    pub path: String,
    pub role: &'static str,
}

/// One fixed-length window: either a gateway leg or the rig floor.
#[derive(Serialize, Clone, Debug, Default)]
pub struct Window {
    pub requests: u64,
    pub failed: u64,
    /// Failures during the warm-up or the tail after the window (also invalidate the batch).
    pub failed_outside_window: u64,
    pub seconds: f64,
    pub rps: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub first_error: Option<String>,
    /// CPU time of the bench process (the load generator) per request in the window.
    pub loadgen_cpu_us_per_req: f64,
    /// CPU time of the mock per request in the window.
    pub mock_cpu_us_per_req: f64,
    /// Busy share of the gateway's core over the window (from /proc/stat); the part of it spent
    /// in interrupts and softirq (loopback packet processing, charged to no process); and the
    /// part that is neither that nor the gateway: other processes.
    pub gateway_core_busy_pct: Option<f64>,
    pub gateway_core_irq_pct: Option<f64>,
    pub gateway_core_other_pct: Option<f64>,
    /// Same for the rig core, net of the load generator and the mock.
    pub rig_core_busy_pct: Option<f64>,
    pub rig_core_irq_pct: Option<f64>,
    pub rig_core_other_pct: Option<f64>,
}

#[derive(Serialize, Clone, Debug)]
pub struct Leg {
    pub index: usize,
    pub label: String,
    pub role: &'static str,
    pub pid: u32,
    #[serde(flatten)]
    pub window: Window,
    /// Gateway CPU time (utime + stime) over the window divided by the window's requests.
    pub cpu_us_per_req: f64,
    /// The user-space part of it (utime): the only part PGO and BOLT can change; the rest is the
    /// kernel's loopback TCP work, the same for every binary.
    pub user_us_per_req: f64,
    /// Gateway CPU time over the window as a share of one core (100 = saturated).
    pub gateway_cpu_pct: f64,
    /// VmHWM of the gateway at the end of the window.
    pub peak_rss_kib: u64,
    /// LISTEN sockets on the port, all owned by this leg's gateway.
    pub listeners: usize,
    pub cpus_allowed: Option<String>,
    /// The gateway's nice value and its autogroup's, as read back from /proc.
    pub nice: Option<i64>,
    pub autogroup_nice: Option<i32>,
    pub exit: String,
}

#[derive(Serialize, Clone, Debug)]
pub struct RigFloor {
    #[serde(flatten)]
    pub window: Window,
    /// rig floor rps / the highest mean rps of any binary.
    pub headroom_x: f64,
    /// Headroom under 2x: the rig may cap the gateway figures.
    pub flagged: bool,
}

#[derive(Serialize, Clone, Debug)]
pub struct Bands {
    pub rps_pct: f64,
    pub p50_pct: f64,
    pub p99_pct: f64,
    pub cpu_us_pct: f64,
}

#[derive(Serialize, Clone, Debug)]
pub struct Anchors {
    pub legs: usize,
    pub front_rps: f64,
    pub back_rps: f64,
    pub drift_rps_pct: f64,
    pub drift_cpu_us_pct: f64,
    /// Spread of the baseline legs, (max − min) / mean, floored at `min_band_pct`.
    pub noise_band: Bands,
}

#[derive(Serialize, Clone, Debug)]
pub struct Delta {
    /// Means of the per-leg bracketed deltas (what the verdicts judge).
    pub rps_pct: f64,
    pub p50_pct: f64,
    pub p99_pct: f64,
    pub cpu_us_pct: f64,
    pub rps: Verdict,
    pub cpu_us: Verdict,
    /// The per-leg deltas themselves and their medians (robust to a single odd leg).
    pub rps_per_leg_pct: Vec<f64>,
    pub cpu_us_per_leg_pct: Vec<f64>,
    pub rps_median_pct: f64,
    pub cpu_us_median_pct: f64,
    /// Per-leg median delta of user-space CPU per request (informational: no verdict).
    pub user_us_median_pct: f64,
}

#[derive(Serialize, Clone, Debug)]
pub struct Summary {
    pub label: String,
    pub role: &'static str,
    pub legs: usize,
    pub rps: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub cpu_us_per_req: f64,
    pub user_us_per_req: f64,
    pub peak_rss_kib: u64,
    /// Against the baseline, drift-corrected; `None` for the baseline itself.
    pub delta: Option<Delta>,
}

#[derive(Serialize, Clone, Debug)]
pub struct Report {
    pub schema: u32,
    pub valid: bool,
    /// Why the batch is invalid (empty when valid).
    pub problems: Vec<String>,
    /// Warnings that do not invalidate the batch (rig headroom, anchor drift, other load).
    pub flags: Vec<String>,
    pub settings: Settings,
    pub rig_floor: Option<RigFloor>,
    pub anchors: Option<Anchors>,
    pub summaries: Vec<Summary>,
    /// Each variant against each variant listed before it, from their deltas against the
    /// baseline: (1 + d_later) / (1 + d_earlier) − 1.
    pub between_variants: Vec<Pair>,
    pub legs: Vec<Leg>,
}

#[derive(Serialize, Clone, Debug)]
pub struct Pair {
    pub variant: String,
    pub against: String,
    pub rps_pct: f64,
    pub cpu_us_pct: f64,
    pub rps: Verdict,
    pub cpu_us: Verdict,
}

/// `later` relative to `earlier`, both given as percent deltas against the same baseline.
pub fn relative_pct(later: f64, earlier: f64) -> f64 {
    ((1.0 + later / 100.0) / (1.0 + earlier / 100.0) - 1.0) * 100.0
}

/// Front-to-back anchor drift (rps) beyond this is flagged.
pub const DRIFT_FLAG_PCT: f64 = 5.0;

/// A rig floor under this multiple of the fastest gateway's rps is flagged: the load generator
/// and the mock may be what limits the gateway legs.
pub const RIG_HEADROOM_FLAG_X: f64 = 2.0;

/// A leg whose core was this busy with work other than the bench's own processes is flagged.
pub const OTHER_LOAD_FLAG_PCT: f64 = 10.0;

fn col<F: Fn(&Leg) -> f64>(legs: &[&Leg], f: F) -> Vec<f64> {
    legs.iter().map(|l| f(l)).collect()
}

/// Fill `anchors`, `summaries` and the rig headroom from the legs. The baseline is
/// `settings.binaries[0]`.
pub fn summarize(report: &mut Report) {
    let floor = report.settings.min_band_pct;
    let base: Vec<&Leg> = report
        .legs
        .iter()
        .filter(|l| l.role == "baseline")
        .collect();
    if base.is_empty() {
        return;
    }
    let b_rps = col(&base, |l| l.window.rps);
    let b_p50 = col(&base, |l| l.window.p50_ms);
    let b_p99 = col(&base, |l| l.window.p99_ms);
    let b_cpu = col(&base, |l| l.cpu_us_per_req);
    let b_user = col(&base, |l| l.user_us_per_req);
    let bands = Bands {
        rps_pct: stats::noise_band_pct(&b_rps, floor),
        p50_pct: stats::noise_band_pct(&b_p50, floor),
        p99_pct: stats::noise_band_pct(&b_p99, floor),
        cpu_us_pct: stats::noise_band_pct(&b_cpu, floor),
    };
    let anchors = Anchors {
        legs: base.len(),
        front_rps: b_rps[0],
        back_rps: *b_rps.last().unwrap(),
        drift_rps_pct: stats::drift_pct(&b_rps),
        drift_cpu_us_pct: stats::drift_pct(&b_cpu),
        noise_band: bands.clone(),
    };
    let mut summaries = Vec::new();
    for bin in &report.settings.binaries {
        let legs: Vec<&Leg> = report
            .legs
            .iter()
            .filter(|l| l.label == bin.label && l.role == bin.role)
            .collect();
        if legs.is_empty() {
            continue;
        }
        let rps = col(&legs, |l| l.window.rps);
        let p50 = col(&legs, |l| l.window.p50_ms);
        let p99 = col(&legs, |l| l.window.p99_ms);
        let cpu = col(&legs, |l| l.cpu_us_per_req);
        let user = col(&legs, |l| l.user_us_per_req);
        let delta = (bin.role != "baseline").then(|| {
            let rps_pct = stats::bracketed_delta_pct(&b_rps, &rps);
            let cpu_pct = stats::bracketed_delta_pct(&b_cpu, &cpu);
            Delta {
                rps_pct,
                p50_pct: stats::bracketed_delta_pct(&b_p50, &p50),
                p99_pct: stats::bracketed_delta_pct(&b_p99, &p99),
                cpu_us_pct: cpu_pct,
                rps: stats::verdict(rps_pct, bands.rps_pct, true),
                cpu_us: stats::verdict(cpu_pct, bands.cpu_us_pct, false),
                rps_median_pct: stats::median(&stats::per_leg_deltas_pct(&b_rps, &rps)),
                cpu_us_median_pct: stats::median(&stats::per_leg_deltas_pct(&b_cpu, &cpu)),
                rps_per_leg_pct: stats::per_leg_deltas_pct(&b_rps, &rps),
                cpu_us_per_leg_pct: stats::per_leg_deltas_pct(&b_cpu, &cpu),
                user_us_median_pct: stats::median(&stats::per_leg_deltas_pct(&b_user, &user)),
            }
        });
        summaries.push(Summary {
            label: bin.label.clone(),
            role: bin.role,
            legs: legs.len(),
            rps: stats::mean(&rps),
            p50_ms: stats::mean(&p50),
            p99_ms: stats::mean(&p99),
            cpu_us_per_req: stats::mean(&cpu),
            user_us_per_req: stats::mean(&user),
            peak_rss_kib: legs.iter().map(|l| l.peak_rss_kib).max().unwrap_or(0),
            delta,
        });
    }
    if anchors.drift_rps_pct.abs() > DRIFT_FLAG_PCT {
        report.flags.push(format!(
            "the anchors drifted {:+.1}% (rps) from the front to the back of the batch: the \
             machine was not steady",
            anchors.drift_rps_pct
        ));
    }
    let busy_legs: Vec<String> = report
        .legs
        .iter()
        .filter(|l| {
            l.window.gateway_core_other_pct.unwrap_or(0.0) > OTHER_LOAD_FLAG_PCT
                || l.window.rig_core_other_pct.unwrap_or(0.0) > OTHER_LOAD_FLAG_PCT
        })
        .map(|l| l.index.to_string())
        .collect();
    if !busy_legs.is_empty() {
        report.flags.push(format!(
            "other load on the pinned cores above {OTHER_LOAD_FLAG_PCT}% during legs {} \
             (something else was running): their figures are disturbed",
            busy_legs.join(", ")
        ));
    }
    let best = summaries.iter().map(|s| s.rps).fold(0.0, f64::max);
    if let Some(rig) = report.rig_floor.as_mut() {
        if best > 0.0 {
            rig.headroom_x = rig.window.rps / best;
            rig.flagged = rig.headroom_x < RIG_HEADROOM_FLAG_X;
            if rig.flagged {
                report.flags.push(format!(
                    "rig floor {:.0} rps is only {:.2}x the fastest gateway ({:.0} rps): under 2x, \
                     the load generator and mock may be capping the figures",
                    rig.window.rps, rig.headroom_x, best
                ));
            }
        }
    }
    let variants: Vec<(&str, &Delta)> = summaries
        .iter()
        .filter_map(|s| s.delta.as_ref().map(|d| (s.label.as_str(), d)))
        .collect();
    let mut pairs = Vec::new();
    for (i, (later, dl)) in variants.iter().enumerate() {
        for (earlier, de) in &variants[..i] {
            let rps_pct = relative_pct(dl.rps_pct, de.rps_pct);
            let cpu_pct = relative_pct(dl.cpu_us_pct, de.cpu_us_pct);
            pairs.push(Pair {
                variant: later.to_string(),
                against: earlier.to_string(),
                rps_pct,
                cpu_us_pct: cpu_pct,
                rps: stats::verdict(rps_pct, bands.rps_pct, true),
                cpu_us: stats::verdict(cpu_pct, bands.cpu_us_pct, false),
            });
        }
    }
    report.between_variants = pairs;
    report.anchors = Some(anchors);
    report.summaries = summaries;
}

/// A report built from per-leg rps and cpu figures, for tests of the summary and the gate.
#[cfg(test)]
pub fn synthetic(legs: &[(&str, f64, f64)], rig_rps: f64) -> Report {
    let mut labels: Vec<&str> = Vec::new();
    for (l, _, _) in legs {
        if !labels.contains(l) {
            labels.push(l);
        }
    }
    let binaries = labels
        .iter()
        .enumerate()
        .map(|(i, l)| Binary {
            label: l.to_string(),
            path: format!("/bin/{l}"),
            role: if i == 0 { "baseline" } else { "variant" },
        })
        .collect::<Vec<_>>();
    let legs = legs
        .iter()
        .enumerate()
        .map(|(i, (l, rps, cpu))| Leg {
            index: i + 1,
            label: l.to_string(),
            role: if *l == labels[0] {
                "baseline"
            } else {
                "variant"
            },
            pid: 1,
            window: Window {
                requests: (*rps * 5.0) as u64,
                seconds: 5.0,
                rps: *rps,
                p50_ms: 1.0,
                p99_ms: 2.0,
                ..Default::default()
            },
            cpu_us_per_req: *cpu,
            user_us_per_req: *cpu / 3.0,
            gateway_cpu_pct: 100.0,
            peak_rss_kib: 10_000,
            listeners: 1,
            cpus_allowed: Some("0".into()),
            nice: Some(0),
            autogroup_nice: None,
            exit: "exit status 0".into(),
        })
        .collect();
    let mut r = Report {
        schema: 1,
        valid: true,
        problems: vec![],
        flags: vec![],
        settings: Settings {
            shape: "s".into(),
            endpoint: "/v1/chat/completions".into(),
            stream: false,
            posture: "default".into(),
            connections: 16,
            rounds: 2,
            window_secs: 5.0,
            warmup_secs: 1.0,
            min_band_pct: 1.0,
            gateway_cpu: Some(0),
            rig_cpu: Some(1),
            mock_cpu: Some(1),
            gateway_workers: 1,
            nice: None,
            load_client: "raw".into(),
            binaries,
        },
        rig_floor: Some(RigFloor {
            window: Window {
                rps: rig_rps,
                ..Default::default()
            },
            headroom_x: f64::NAN,
            flagged: false,
        }),
        anchors: None,
        summaries: vec![],
        between_variants: vec![],
        legs,
    };
    summarize(&mut r);
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::bench::render_table;

    #[test]
    fn summary_of_an_interleaved_batch() {
        // A B A B A: baseline 1000, 1010, 990 → band 2%; B ~20% faster, 15% less cpu per request.
        let r = synthetic(
            &[
                ("plain", 1000.0, 100.0),
                ("pgo", 1206.0, 85.0),
                ("plain", 1010.0, 100.0),
                ("pgo", 1200.0, 85.0),
                ("plain", 990.0, 100.0),
            ],
            5000.0,
        );
        let a = r.anchors.as_ref().unwrap();
        assert_eq!(a.legs, 3);
        assert!((a.drift_rps_pct + 1.0).abs() < 1e-9);
        assert!((a.noise_band.rps_pct - 2.0).abs() < 1e-9);
        // cpu identical across anchors → floor.
        assert!((a.noise_band.cpu_us_pct - 1.0).abs() < 1e-9);
        let pgo = &r.summaries[1];
        let d = pgo.delta.as_ref().unwrap();
        // bracket means: 1005 and 1000 → (1206/1005 − 1 + 1200/1000 − 1)/2 = 20%.
        assert!((d.rps_pct - 20.0).abs() < 1e-9, "{}", d.rps_pct);
        assert_eq!(d.rps, Verdict::Better);
        assert_eq!(d.cpu_us, Verdict::Better);
        assert_eq!(d.rps_per_leg_pct.len(), 2);
        assert!((d.rps_median_pct - 20.0).abs() < 1e-9);
        // Synthetic legs spend a third of their CPU in user space: the same -15%.
        assert!(
            (d.user_us_median_pct + 15.0).abs() < 1e-9,
            "{}",
            d.user_us_median_pct
        );
        assert!((pgo.user_us_per_req - 85.0 / 3.0).abs() < 1e-9);
        assert!(r.summaries[0].delta.is_none());
        let rig = r.rig_floor.as_ref().unwrap();
        assert!((rig.headroom_x - 5000.0 / 1203.0).abs() < 1e-9);
        assert!(!rig.flagged);
        assert!(r.flags.is_empty());
        let table = render_table(&r);
        assert!(table.contains("+20.0%"), "{table}");
        assert!(
            table.contains("user us") && table.contains("-15.0%"),
            "{table}"
        );
        assert!(table.contains("batch: valid"));
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["summaries"][1]["delta"]["rps"], "better");
        assert_eq!(json["legs"][0]["rps"], 1000.0);
    }

    #[test]
    fn variants_against_each_other() {
        assert!((relative_pct(21.0, 10.0) - 10.0).abs() < 1e-9);
        assert!((relative_pct(0.0, 0.0)).abs() < 1e-9);
        let r = synthetic(
            &[
                ("plain", 1000.0, 10.0),
                ("pgo", 1200.0, 9.0),
                ("bolt", 1260.0, 8.55),
                ("plain", 1000.0, 10.0),
            ],
            9000.0,
        );
        assert_eq!(r.between_variants.len(), 1);
        let p = &r.between_variants[0];
        assert_eq!((p.variant.as_str(), p.against.as_str()), ("bolt", "pgo"));
        assert!((p.rps_pct - 5.0).abs() < 1e-9, "{}", p.rps_pct);
        assert!((p.cpu_us_pct + 5.0).abs() < 1e-9, "{}", p.cpu_us_pct);
        assert_eq!(p.rps, Verdict::Better);
        assert!(render_table(&r).contains("bolt vs pgo: +5.0% rps (faster)"));
    }

    #[test]
    fn rig_under_2x_is_flagged() {
        let r = synthetic(
            &[
                ("a", 1000.0, 10.0),
                ("b", 1000.0, 10.0),
                ("a", 1000.0, 10.0),
            ],
            1500.0,
        );
        assert!(r.rig_floor.as_ref().unwrap().flagged);
        assert!(r.flags.iter().any(|f| f.contains("under 2x")));
    }
}
