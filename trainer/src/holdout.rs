//! `trainer holdout`: the gate `nix flake check` runs. Benches the plain binary (baseline)
//! against the optimized one on the single holdout shape and fails when the optimized binary is
//! slower beyond the noise band, or when the batch is invalid.

use crate::bench::{self, Knobs, Labeled};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

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

/// The one shape file marked holdout in `dir`.
pub fn find_holdout(dir: &Path) -> Result<PathBuf> {
    let mut found = Vec::new();
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading shapes dir {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json") && p.is_file())
        .collect();
    entries.sort();
    for p in entries {
        let text =
            std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))?;
        let v: serde_json::Value =
            serde_json::from_str(&text).with_context(|| format!("parsing {}", p.display()))?;
        if v.get("holdout").and_then(|h| h.as_bool()) == Some(true) {
            found.push(p);
        }
    }
    match found.len() {
        1 => Ok(found.remove(0)),
        0 => bail!("no shape in {} is marked \"holdout\": true", dir.display()),
        n => bail!(
            "{n} shapes in {} are marked holdout (exactly one must be): {}",
            dir.display(),
            found
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// The gate's decision on a finished report: `Err` with the reason when it fails.
pub fn judge(report: &bench::Report) -> Result<String> {
    if !report.valid {
        bail!(
            "holdout gate: the bench batch is invalid: {}",
            report.problems.join("; ")
        );
    }
    let band = report
        .anchors
        .as_ref()
        .map(|a| a.noise_band.rps_pct)
        .context("holdout gate: no baseline legs")?;
    let opt = report
        .summaries
        .iter()
        .find(|s| s.role == "variant")
        .and_then(|s| s.delta.as_ref())
        .context("holdout gate: no optimized legs")?;
    let shape = &report.settings.shape;
    if opt.rps_pct < -band {
        let hint = if report.flags.is_empty() {
            String::new()
        } else {
            format!(" [batch flags: {}]", report.flags.join("; "))
        };
        bail!(
            "holdout gate FAILED on shape {shape}: the optimized binary is {:.1}% slower than \
             the plain one (rps), beyond the noise band of ±{band:.1}%{hint}",
            -opt.rps_pct
        );
    }
    Ok(format!(
        "holdout gate passed on shape {shape}: optimized vs plain {:+.1}% rps, {:+.1}% cpu/req \
         (noise band ±{band:.1}%)",
        opt.rps_pct, opt.cpu_us_pct
    ))
}

pub fn run(args: HoldoutArgs) -> Result<()> {
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

    fn dir_with(files: &[(&str, &str)]) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "holdout-test-{}-{}",
            std::process::id(),
            files.len() * 31 + files.first().map_or(0, |f| f.0.len())
        ));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        for (name, text) in files {
            std::fs::write(d.join(name), text).unwrap();
        }
        d
    }

    #[test]
    fn exactly_one_holdout() {
        let d = dir_with(&[
            ("a.json", r#"{"name":"a","holdout":false}"#),
            ("bb.json", r#"{"name":"bb","holdout":true}"#),
            ("c.json", r#"{"name":"c"}"#),
            ("notes.txt", "x"),
        ]);
        assert_eq!(find_holdout(&d).unwrap(), d.join("bb.json"));
        let _ = std::fs::remove_dir_all(&d);

        let none = dir_with(&[("x.json", r#"{"name":"x"}"#)]);
        assert!(find_holdout(&none)
            .unwrap_err()
            .to_string()
            .contains("no shape"));
        let _ = std::fs::remove_dir_all(&none);

        let two = dir_with(&[
            ("p.json", r#"{"holdout":true}"#),
            ("q.json", r#"{"holdout":true}"#),
        ]);
        assert!(find_holdout(&two)
            .unwrap_err()
            .to_string()
            .contains("2 shapes"));
        let _ = std::fs::remove_dir_all(&two);
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
