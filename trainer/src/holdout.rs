//! `trainer holdout`: the gate `nix flake check` runs. Benches the plain binary (baseline)
//! against the optimized one on the single holdout shape and fails when the optimized binary is
//! slower beyond the noise band, or when the batch is invalid.

use crate::bench::{self, Knobs, Labeled};
use crate::shapes;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

/// Fewer rounds leave too few anchors for a band: with one round (two anchors) a same-binary
/// run was seen to fail at −8.7% rps against a ±1.2% band.
const MIN_ROUNDS: usize = 2;

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

/// The gate's decision on a finished report: `Err` with the reason when it fails.
pub fn judge(report: &bench::Report) -> Result<String> {
    if !report.valid {
        bail!(
            "holdout gate: the bench batch is invalid: {}",
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
    let shape = &report.settings.shape;
    let (rb, cb) = (bands.rps_pct, bands.cpu_us_pct);
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
        let hint = if report.flags.is_empty() {
            String::new()
        } else {
            format!(" [batch flags: {}]", report.flags.join("; "))
        };
        bail!(
            "holdout gate FAILED on shape {shape}: the optimized binary is slower than the plain \
             one beyond the noise band: {}{hint}",
            why.join(", ")
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
    let shape = find_holdout(&args.shapes)?;
    eprintln!("holdout: shape {}", shape.display());
    let plain = Labeled {
        label: "plain".into(),
        path: args.plain.clone(),
    };
    let optimized = Labeled {
        label: "optimized".into(),
        path: args.optimized.clone(),
    };
    let report = bench::run_batch(&shape, &plain, &[optimized], &args.knobs)?;
    print!("{}", crate::bench::render_table(&report));
    bench::write_json(&report, args.knobs.json.as_deref())?;
    let verdict = judge(&report)?;
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
    use crate::bench::report_synthetic as synthetic;

    #[test]
    fn slower_beyond_band_fails() {
        // Band 2% (anchors 1000/1010/990); optimized 5% slower.
        let r = synthetic(
            &[
                ("plain", 1000.0, 1.0),
                ("opt", 950.0, 1.0),
                ("plain", 1010.0, 1.0),
                ("opt", 950.0, 1.0),
                ("plain", 990.0, 1.0),
            ],
            9000.0,
        );
        let e = judge(&r).unwrap_err().to_string();
        assert!(e.contains("slower"), "{e}");
    }

    #[test]
    fn within_band_or_faster_passes() {
        let r = synthetic(
            &[
                ("plain", 1000.0, 1.0),
                ("opt", 998.0, 1.0),
                ("plain", 1010.0, 1.0),
            ],
            9000.0,
        );
        assert!(judge(&r).is_ok());
        let r = synthetic(
            &[
                ("plain", 1000.0, 1.0),
                ("opt", 1500.0, 1.0),
                ("plain", 1000.0, 1.0),
            ],
            9000.0,
        );
        assert!(judge(&r).unwrap().contains("passed"));
    }

    #[test]
    fn more_cpu_per_request_beyond_band_fails() {
        // Same rps, but 10% more CPU per request against a flat (1% floor) cpu band.
        let r = synthetic(
            &[
                ("plain", 1000.0, 10.0),
                ("opt", 1000.0, 11.0),
                ("plain", 1000.0, 10.0),
            ],
            9000.0,
        );
        let e = judge(&r).unwrap_err().to_string();
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
        assert!(judge(&r).unwrap_err().to_string().contains("invalid"));
    }
}
