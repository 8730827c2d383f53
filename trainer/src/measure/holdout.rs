//! `trainer holdout`: the wall-clock gate (`checks.<system>.holdout`, on builders that opt into
//! `gateway-benchmark`). Benches the plain binary (baseline) against the optimized one on the
//! single holdout shape and fails when the batch is invalid (the bench's own problems, or anchors
//! that drifted, or a rig floor too close to the gateway), when its noise band is too wide to
//! see the slowdown the gate exists to catch (inconclusive), or when the optimized binary is
//! slower beyond the band.

use crate::drive::shapes;
use crate::measure::bench::{self, Knobs, Labeled};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

/// Fewer rounds leave too few anchors for a band: with one round (two anchors) a same-binary
/// run was seen to fail at −8.7% rps against a ±1.2% band.
const MIN_ROUNDS: usize = 2;

/// The smallest slowdown the gate must catch, in percent (docs/bench.md, "What the holdout gate
/// accepts"): a quarter of what PGO gains on trained shapes here, and more than relinking the
/// same code moved the emit-relocs control.
const MAX_BAND_PCT: f64 = 5.0;

#[derive(clap::Args, Debug)]
pub struct HoldoutArgs {
    /// The plain (unoptimized) gateway binary: the baseline.
    #[arg(long)]
    pub plain: PathBuf,
    /// The optimized (PGO, PGO+BOLT) gateway binary.
    #[arg(long)]
    pub optimized: PathBuf,
    /// Directory of shape files; exactly one has `"holdout": true`.
    #[arg(long)]
    pub shapes: PathBuf,
    #[command(flatten)]
    pub knobs: Knobs,
    #[command(flatten)]
    pub acceptance: Acceptance,
}

/// What a batch must show before the gate believes it, and the slowdown it must be able to see.
#[derive(clap::Args, Clone, Debug)]
pub struct Acceptance {
    /// A batch whose baseline anchors moved more than this (percent, rps or gateway CPU per
    /// request) from the front to the back is invalid: the machine changed under it.
    #[arg(long, default_value_t = bench::DRIFT_FLAG_PCT)]
    pub max_drift_pct: f64,
    /// A batch whose rig floor is under this multiple of the fastest gateway's rps is invalid:
    /// the load generator and the mock, not the gateways, may be what the legs measured.
    #[arg(long, default_value_t = bench::RIG_HEADROOM_FLAG_X)]
    pub min_rig_headroom: f64,
    /// The smallest slowdown (percent) the gate must catch: a noise band (rps or gateway CPU per
    /// request) wider than this makes the verdict inconclusive, and the gate fails.
    #[arg(long, default_value_t = MAX_BAND_PCT)]
    pub max_band_pct: f64,
}

impl Default for Acceptance {
    fn default() -> Self {
        Acceptance {
            max_drift_pct: bench::DRIFT_FLAG_PCT,
            min_rig_headroom: bench::RIG_HEADROOM_FLAG_X,
            max_band_pct: MAX_BAND_PCT,
        }
    }
}

/// The one shape file marked holdout in `dir`. Every shape there is loaded and checked the way
/// training loads them (`shapes::load_dir`, which also requires exactly one holdout).
pub fn find_holdout(dir: &Path) -> Result<PathBuf> {
    let all = shapes::load_dir(dir)?;
    let holdout = all
        .iter()
        .find(|s| s.shape.holdout)
        .context("no holdout shape")?;
    let path = dir.join(format!("{}.json", holdout.shape.name));
    if !path.is_file() {
        bail!(
            "holdout shape {} is not at {}",
            holdout.shape.name,
            path.display()
        );
    }
    Ok(path)
}

/// |x| within `limit`; false for NaN, so that a figure that could not be computed fails.
fn within(x: f64, limit: f64) -> bool {
    x.abs() <= limit
}

/// The gate's validity rules on top of the bench's own (failed requests, unclean exits, port
/// ownership): a batch that breaks one gets it in its `problems` and is invalid, so the table
/// and the JSON say so too.
pub fn admit(report: &mut bench::Report, acc: &Acceptance) {
    let mut why = Vec::new();
    match &report.anchors {
        Some(a) => {
            for (what, drift) in [
                ("rps", a.drift_rps_pct),
                ("gateway cpu/req", a.drift_cpu_us_pct),
            ] {
                if !within(drift, acc.max_drift_pct) {
                    why.push(format!(
                        "the anchors drifted {drift:+.1}% ({what}) from the front to the back of \
                         the batch; the gate accepts ±{:.1}%",
                        acc.max_drift_pct
                    ));
                }
            }
        }
        None => why.push("no baseline legs".to_string()),
    }
    match report.rig_floor.as_ref().map(|r| r.headroom_x) {
        Some(h) if h >= acc.min_rig_headroom => {}
        Some(h) if h.is_finite() => why.push(format!(
            "the rig floor is only {h:.2}x the fastest gateway; the gate needs {:.1}x (below it \
             the load generator and the mock may be what the legs measured)",
            acc.min_rig_headroom
        )),
        _ => why.push("the rig headroom was not measured".to_string()),
    }
    if !why.is_empty() {
        report
            .problems
            .extend(why.into_iter().map(|w| format!("holdout gate: {w}")));
        report.valid = false;
    }
}

/// The gate's decision on a finished, admitted report: `Err` with the reason when it fails.
pub fn judge(report: &bench::Report, acc: &Acceptance) -> Result<String> {
    let shape = &report.settings.shape;
    if !report.valid {
        bail!(
            "holdout gate FAILED on shape {shape}: the bench batch is INVALID: {}",
            report.problems.join("; ")
        );
    }
    let bands = &report
        .anchors
        .as_ref()
        .context("holdout gate: no baseline legs")?
        .noise_band;
    let opt = report
        .summaries
        .iter()
        .find(|s| s.role == "variant")
        .and_then(|s| s.delta.as_ref())
        .context("holdout gate: no optimized legs")?;
    let (rb, cb) = (bands.rps_pct, bands.cpu_us_pct);
    let hint = if report.flags.is_empty() {
        String::new()
    } else {
        format!(" [batch flags: {}]", report.flags.join("; "))
    };
    // Slower is either fewer requests per second or more gateway CPU per request, each beyond
    // its own band: the second stays meaningful when other load on the machine widens the first.
    let mut why = Vec::new();
    if opt.rps_pct < -rb {
        why.push(format!(
            "{:.1}% fewer requests per second (noise band ±{rb:.1}%)",
            -opt.rps_pct
        ));
    }
    if opt.cpu_us_pct > cb {
        why.push(format!(
            "{:.1}% more gateway CPU per request (noise band ±{cb:.1}%)",
            opt.cpu_us_pct
        ));
    }
    if !why.is_empty() {
        bail!(
            "holdout gate FAILED on shape {shape}: the optimized binary is slower than the plain \
             one beyond the noise band: {}{hint}",
            why.join(", ")
        );
    }
    // Not slower beyond the band means nothing when the band could hide the slowdown the gate
    // is there to catch.
    let max = acc.max_band_pct;
    let wide: Vec<String> = [("rps", rb), ("gateway cpu/req", cb)]
        .into_iter()
        .filter(|(_, band)| !within(*band, max))
        .map(|(what, band)| format!("±{band:.1}% {what}"))
        .collect();
    if !wide.is_empty() {
        bail!(
            "holdout gate FAILED on shape {shape}: INCONCLUSIVE: the noise band ({}) is wider \
             than the {max:.1}% slowdown the gate exists to catch, which could hide in it \
             (optimized vs plain {:+.1}% rps, {:+.1}% gateway cpu/req){hint}",
            wide.join(", "),
            opt.rps_pct,
            opt.cpu_us_pct
        );
    }
    Ok(format!(
        "holdout gate passed on shape {shape}: optimized vs plain {:+.1}% rps (band ±{rb:.1}%), \
         {:+.1}% gateway cpu/req (band ±{cb:.1}%)",
        opt.rps_pct, opt.cpu_us_pct
    ))
}

pub fn run(args: HoldoutArgs) -> Result<()> {
    if args.knobs.legs < MIN_ROUNDS {
        bail!(
            "holdout gate: --legs {} is too few; the noise band needs at least {MIN_ROUNDS} rounds \
             ({} anchors) to be worth gating on",
            args.knobs.legs,
            MIN_ROUNDS + 1
        );
    }
    let acc = &args.acceptance;
    let shape = find_holdout(&args.shapes)?;
    eprintln!(
        "holdout: shape {}; the gate accepts anchor drift within ±{:.1}%, a rig floor at least \
         {:.1}x the gateway, noise bands within ±{:.1}%",
        shape.display(),
        acc.max_drift_pct,
        acc.min_rig_headroom,
        acc.max_band_pct
    );
    let plain = Labeled {
        label: "plain".into(),
        path: args.plain.clone(),
    };
    let optimized = Labeled {
        label: "optimized".into(),
        path: args.optimized.clone(),
    };
    let mut report = bench::run_batch(&shape, &plain, &[optimized], &args.knobs)?;
    admit(&mut report, acc);
    print!("{}", crate::measure::bench::render_table(&report));
    bench::write_json(&report, args.knobs.json.as_deref())?;
    let verdict = judge(&report, acc)?;
    println!("{verdict}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape_file(dir: &Path, name: &str, holdout: bool) {
        let shape = serde_json::json!({
            "name": name, "endpoint": "/v1/chat/completions", "stream": false,
            "payload": format!("payloads/{name}.json"), "model": "gpt-4o-mini",
            "upstream": "openai", "requests": 10, "concurrency": 1,
            "posture": "default", "holdout": holdout
        });
        std::fs::write(dir.join(format!("{name}.json")), shape.to_string()).unwrap();
        let payload = r#"{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}"#;
        std::fs::write(dir.join(format!("payloads/{name}.json")), payload).unwrap();
    }

    #[test]
    fn finds_the_one_holdout() {
        // Self-contained (the repository's shapes/ is not in every build's source).
        let dir = std::env::temp_dir().join(format!("holdout-shapes-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("payloads")).unwrap();
        shape_file(&dir, "train-a", false);
        shape_file(&dir, "held-out", true);
        assert_eq!(find_holdout(&dir).unwrap(), dir.join("held-out.json"));
        // A second holdout is refused.
        shape_file(&dir, "train-b", true);
        assert!(find_holdout(&dir).is_err());
        let _ = std::fs::remove_dir_all(&dir);
        // So is a directory without shapes.
        std::fs::create_dir_all(&dir).unwrap();
        assert!(find_holdout(&dir).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[cfg(test)]
mod gate_tests {
    use super::*;
    use crate::measure::bench::report_synthetic as synthetic;

    /// The gate as `run` applies it: admission, then the verdict.
    fn gate(legs: &[(&str, f64, f64)], rig_rps: f64, acc: &Acceptance) -> Result<String> {
        let mut r = synthetic(legs, rig_rps);
        admit(&mut r, acc);
        judge(&r, acc)
    }

    fn gate_err(legs: &[(&str, f64, f64)], rig_rps: f64) -> String {
        gate(legs, rig_rps, &Acceptance::default())
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn slower_beyond_band_fails() {
        // Band 2% (anchors 1000/1010/990); optimized 5% slower.
        let e = gate_err(
            &[
                ("plain", 1000.0, 1.0),
                ("opt", 950.0, 1.0),
                ("plain", 1010.0, 1.0),
                ("opt", 950.0, 1.0),
                ("plain", 990.0, 1.0),
            ],
            9000.0,
        );
        assert!(e.contains("slower"), "{e}");
    }

    #[test]
    fn within_band_or_faster_passes() {
        let acc = Acceptance::default();
        let steady = |opt: f64| {
            [
                ("plain", 1000.0, 1.0),
                ("opt", opt, 1.0),
                ("plain", 1010.0, 1.0),
            ]
        };
        assert!(gate(&steady(998.0), 9000.0, &acc).is_ok());
        assert!(gate(&steady(1500.0), 9000.0, &acc)
            .unwrap()
            .contains("passed"));
    }

    #[test]
    fn more_cpu_per_request_beyond_band_fails() {
        // Same rps, but 10% more CPU per request against a flat (1% floor) cpu band.
        let e = gate_err(
            &[
                ("plain", 1000.0, 10.0),
                ("opt", 1000.0, 11.0),
                ("plain", 1000.0, 10.0),
            ],
            9000.0,
        );
        assert!(e.contains("more gateway CPU per request"), "{e}");
    }

    #[test]
    fn invalid_batch_fails() {
        let mut r = synthetic(
            &[
                ("plain", 1000.0, 1.0),
                ("opt", 1500.0, 1.0),
                ("plain", 1000.0, 1.0),
            ],
            9000.0,
        );
        r.valid = false;
        r.problems.push("leg 2 (opt): 3 failed requests".into());
        let acc = Acceptance::default();
        admit(&mut r, &acc);
        let e = judge(&r, &acc).unwrap_err().to_string();
        assert!(
            e.contains("INVALID") && e.contains("3 failed requests"),
            "{e}"
        );
    }

    /// The batch of the issue (`nix/offline/build holdout`): anchors drifting -30.3% front to
    /// back, noise bands ±36% rps and ±52% CPU, rig floor 1.43x the gateway; the gate used to
    /// report "batch: valid" and pass it.
    #[test]
    fn the_reported_batch_is_invalid() {
        let legs = [
            ("plain", 4000.0, 190.0),
            ("optimized", 3900.0, 220.0),
            ("plain", 3500.0, 250.0),
            ("optimized", 3400.0, 260.0),
            ("plain", 3300.0, 300.0),
            ("optimized", 3100.0, 320.0),
            ("plain", 2788.0, 330.0),
        ];
        let mut r = synthetic(&legs, 4957.0);
        let a = r.anchors.as_ref().unwrap();
        assert!((a.drift_rps_pct + 30.3).abs() < 0.05, "{}", a.drift_rps_pct);
        assert!(
            (a.noise_band.rps_pct - 35.7).abs() < 0.1,
            "{}",
            a.noise_band.rps_pct
        );
        assert!((a.noise_band.cpu_us_pct - 73.7).abs() < 0.1);
        assert!((r.rig_floor.as_ref().unwrap().headroom_x - 1.43).abs() < 0.01);
        // What the gate saw before: a valid batch, within noise.
        assert!(r.valid);
        let acc = Acceptance::default();
        admit(&mut r, &acc);
        assert!(!r.valid);
        let e = judge(&r, &acc).unwrap_err().to_string();
        for needle in [
            "INVALID",
            "drifted -30.3% (rps)",
            "drifted +73.7% (gateway cpu/req)",
            "accepts ±5.0%",
            "only 1.43x the fastest gateway; the gate needs 2.0x",
        ] {
            assert!(e.contains(needle), "no {needle:?} in: {e}");
        }
        // The table and the JSON say it too.
        let table = crate::measure::bench::render_table(&r);
        assert!(
            table.contains("INVALID: holdout gate: the rig floor"),
            "{table}"
        );
        assert_eq!(serde_json::to_value(&r).unwrap()["valid"], false);
    }

    #[test]
    fn drift_alone_makes_the_batch_invalid() {
        // rps anchors 1000 → 900 (−10%), everything else steady.
        let e = gate_err(
            &[
                ("plain", 1000.0, 10.0),
                ("opt", 950.0, 10.0),
                ("plain", 900.0, 10.0),
            ],
            9000.0,
        );
        assert!(
            e.contains("INVALID") && e.contains("drifted -10.0% (rps)"),
            "{e}"
        );
        assert!(!e.contains("rig floor"), "{e}");
        // Gateway CPU per request drifting +8% while rps stays put.
        let e = gate_err(
            &[
                ("plain", 1000.0, 10.0),
                ("opt", 1000.0, 10.4),
                ("plain", 1000.0, 10.8),
            ],
            9000.0,
        );
        assert!(e.contains("drifted +8.0% (gateway cpu/req)"), "{e}");
    }

    #[test]
    fn a_rig_floor_under_2x_makes_the_batch_invalid() {
        let e = gate_err(
            &[
                ("plain", 1000.0, 10.0),
                ("opt", 1000.0, 10.0),
                ("plain", 1000.0, 10.0),
            ],
            1500.0,
        );
        assert!(e.contains("INVALID") && e.contains("only 1.50x"), "{e}");
        assert!(!e.contains("drifted"), "{e}");
    }

    #[test]
    fn a_band_wider_than_the_effect_is_inconclusive() {
        // Anchors 1000/1080/1000: no drift, spread 80 / 1026.7 = 7.8%; the optimized binary within it.
        let legs = [
            ("plain", 1000.0, 10.0),
            ("opt", 1010.0, 10.0),
            ("plain", 1080.0, 10.0),
            ("opt", 1030.0, 10.0),
            ("plain", 1000.0, 10.0),
        ];
        let e = gate_err(&legs, 9000.0);
        assert!(e.contains("INCONCLUSIVE"), "{e}");
        assert!(
            e.contains("±7.8% rps") && e.contains("5.0% slowdown"),
            "{e}"
        );
        assert!(!e.contains("cpu/req,"), "{e}");
        // The CPU band alone: rps steady, cpu/req anchors 10/10.8/10.
        let e = gate_err(
            &[
                ("plain", 1000.0, 10.0),
                ("opt", 1000.0, 10.0),
                ("plain", 1000.0, 10.8),
                ("opt", 1000.0, 10.0),
                ("plain", 1000.0, 10.0),
            ],
            9000.0,
        );
        assert!(
            e.contains("INCONCLUSIVE") && e.contains("±7.8% gateway cpu/req"),
            "{e}"
        );
        // A band at the limit is accepted; the limit is a knob.
        let wider = Acceptance {
            max_band_pct: 8.0,
            ..Acceptance::default()
        };
        assert!(gate(&legs, 9000.0, &wider).unwrap().contains("passed"));
    }

    #[test]
    fn slower_beyond_even_a_wide_band_is_slower_not_inconclusive() {
        let e = gate_err(
            &[
                ("plain", 1000.0, 10.0),
                ("opt", 800.0, 10.0),
                ("plain", 1080.0, 10.0),
                ("opt", 800.0, 10.0),
                ("plain", 1000.0, 10.0),
            ],
            9000.0,
        );
        assert!(e.contains("slower") && !e.contains("INCONCLUSIVE"), "{e}");
    }

    #[test]
    fn the_limits_themselves_are_accepted() {
        // Drift exactly 5%, band exactly 5%, headroom exactly 2x.
        let legs = [
            ("plain", 1000.0, 10.0),
            ("opt", 1025.0, 10.0),
            ("plain", 1050.0, 10.0),
        ];
        let r = synthetic(&legs, 2050.0);
        let a = r.anchors.as_ref().unwrap();
        assert!((a.drift_rps_pct - 5.0).abs() < 1e-9);
        assert!((r.rig_floor.as_ref().unwrap().headroom_x - 2.0).abs() < 1e-9);
        let out = gate(&legs, 2050.0, &Acceptance::default());
        // Spread 50/1025 = 4.9%, drift 5.0%: the band is 5.0%.
        assert!(out.as_ref().is_ok_and(|v| v.contains("passed")), "{out:?}");
    }
}
