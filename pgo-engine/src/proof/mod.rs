//! The proof marker (`docs/contracts.md`, "Proof marker"): `pgo-engine proof` writes it in the last
//! stage from the profiles and their manifests, the verdicts of the freshness checks that vouched
//! for pinned ones (or why a profile was trained in the build instead), BOLT's log, the toolchain
//! versions and the sources built, refusing when anything is missing, empty or inconsistent;
//! `pgo-engine verify-proof` checks one (`marker`), and with `--require-pinned` refuses an
//! artifact whose profiles were trained in the build (a release is a function of committed
//! profiles).

pub mod marker;

use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

use crate::digest::{sha256_bytes, sha256_file};
use crate::json_file::{self, str_at};
use crate::pinned::manifest::{profile_file, trained, SourceArgs};
use crate::profile::{bolt, Kind};
use crate::training::record::Workload;
use marker::{MARKER_SCHEMA, PINNED, TRAINED_IN_BUILD};

#[derive(clap::Args, Debug)]
pub struct ProofArgs {
    /// The Cargo package the artifact was built from (recorded in the marker).
    #[arg(long)]
    pub package: String,
    /// The binary the marker vouches for (recorded in the marker).
    #[arg(long)]
    pub binary: String,
    /// Output of the LLVM profile stage: the text profile its manifest names, the indexed profile
    /// the PGO build read beside it (the same name with `.profdata`), and manifest.json.
    #[arg(long)]
    pub llvm_profile: PathBuf,
    /// Output of the BOLT profile stage: the fdata its manifest names and manifest.json.
    #[arg(long)]
    pub bolt_profile: PathBuf,
    /// verdict.json of the LLVM training check (a pinned LLVM profile).
    #[arg(long, required_unless_present = "llvm_trained_in_build")]
    pub llvm_check: Option<PathBuf>,
    /// verdict.json of the BOLT training check (a pinned BOLT profile).
    #[arg(long, required_unless_present = "bolt_trained_in_build")]
    pub bolt_check: Option<PathBuf>,
    /// Why the LLVM profile was trained in this build instead of pinned (no training check).
    #[arg(long, conflicts_with = "llvm_check")]
    pub llvm_trained_in_build: Option<String>,
    /// Why the BOLT profile was trained in this build instead of pinned (no training check).
    #[arg(long, conflicts_with = "bolt_check")]
    pub bolt_trained_in_build: Option<String>,
    /// The command that pins profiles, named by `verify-proof --require-pinned`.
    #[arg(long)]
    pub refresh_command: String,
    /// Output of `llvm-bolt -data=...` (its BOLT-INFO lines).
    #[arg(long)]
    pub bolt_log: PathBuf,
    /// versions.json of the toolchain check.
    #[arg(long)]
    pub versions: PathBuf,
    /// The sources this artifact was built from (the same as the manifests were given).
    #[command(flatten)]
    pub source: SourceArgs,
    /// Where to write the marker.
    #[arg(long)]
    pub out: PathBuf,
}

fn read(path: &Path, what: &str) -> Result<Value> {
    json_file::read(path, what).map_err(|e| anyhow!("proof: {e:#}"))
}

fn count(v: &Value, key: &str, what: &str) -> Result<u64> {
    let n = v
        .get(key)
        .and_then(|n| n.as_u64())
        .ok_or_else(|| anyhow!("proof: the {what} has no count {key:?}"))?;
    if n == 0 {
        bail!("proof: the {what} has {key} = 0");
    }
    Ok(n)
}

/// A profile's manifest, with the verdict of the check that vouched for a pinned one, or why it
/// was trained in the build.
struct Used {
    manifest: Value,
    file: PathBuf,
    sha256: String,
    workload: Workload,
    origin: Origin,
}

enum Origin {
    Pinned { verdict: Value },
    TrainedInBuild { reason: String },
}

fn used(dir: &Path, kind: Kind, check: Option<&Path>, trained_why: Option<&str>) -> Result<Used> {
    let what = kind.name();
    let manifest = read(
        &dir.join("manifest.json"),
        &format!("{what} profile manifest"),
    )?;
    if manifest.get("kind").and_then(Value::as_str) != Some(what) {
        bail!(
            "proof: {}/manifest.json is not a {what} profile manifest",
            dir.display()
        );
    }
    let file = profile_file(dir, &manifest).map_err(|e| anyhow!("proof: {e:#}"))?;
    let sha256 = sha256_file(&file)?;
    let workload =
        trained(&manifest).map_err(|e| anyhow!("proof: the {what} profile's manifest: {e:#}"))?;
    let origin = match (check, trained_why) {
        (Some(check), None) => {
            let verdict = read(check, &format!("{what} freshness verdict"))?;
            if verdict.get("verdict").and_then(Value::as_str) != Some("fresh") {
                bail!("proof: the {what} freshness check did not pass");
            }
            if verdict.get("pinned_sha256").and_then(Value::as_str) != Some(sha256.as_str()) {
                bail!("proof: the {what} freshness check vouched for another profile than the pinned {sha256}");
            }
            Origin::Pinned { verdict }
        }
        (None, Some(reason)) if !reason.trim().is_empty() => Origin::TrainedInBuild {
            reason: reason.to_owned(),
        },
        (None, Some(_)) => bail!("proof: the {what} profile was trained in the build for no stated reason"),
        _ => bail!("proof: the {what} profile needs either its freshness verdict (pinned) or why it was trained in the build"),
    };
    Ok(Used {
        manifest,
        file,
        sha256,
        workload,
        origin,
    })
}

/// The provenance section of one profile.
fn provenance(p: &Used, built_from: &str) -> Value {
    let m = &p.manifest;
    let trained_on = m["trained_on"]["source_sha256"].clone();
    let mut v = json!({
        "sha256": p.sha256,
        "trained_on_source_sha256": trained_on,
        "same_source_as_build": trained_on.as_str() == Some(built_from),
        "previous_sha256": m["previous"]["sha256"].clone(),
        "overlap_with_previous_pct": m["previous"]["overlap_pct"].clone(),
    });
    match &p.origin {
        Origin::Pinned { verdict } => {
            v["provenance"] = json!(PINNED);
            v["reason"] = Value::Null;
            v["freshness_check"] = verdict["verdict"].clone();
            v["min_overlap_pct"] = verdict["min_overlap_pct"].clone();
            // What the check gated on: the counters the contrast trainings agreed on ("stable"),
            // with its tolerance, or the names rule ("work"), or every counter.
            v["overlap_of"] = verdict["overlap_of"].clone();
            v["machine_bound"] = verdict["machine_bound"].clone();
            // Where the profile was trained, and the other machines whose trainings agreed with
            // it (`pgo-engine vouch`): committed with the profile, so the marker does not depend
            // on the builder that checked it, whose CPU and overlaps are in its build log.
            v["pinned_on"] = json!({
                "host": m["training"]["host"].clone(),
                "seconds": m["training"]["machine"]["seconds"].clone(),
            });
            v["vouched_on"] = m.get("vouched").cloned().unwrap_or_else(|| json!([]));
        }
        Origin::TrainedInBuild { reason } => {
            v["provenance"] = json!(TRAINED_IN_BUILD);
            v["reason"] = json!(reason);
            v["freshness_check"] = json!(TRAINED_IN_BUILD);
        }
    }
    if let Some(sha) = m["trained_on"].get("pgo_binary_sha256") {
        v["pgo_binary_sha256"] = sha.clone();
    }
    v
}

/// The indexed profile the PGO build read: beside the text profile, `.profdata` for its extension.
fn profdata_of(text_profile: &Path) -> PathBuf {
    text_profile.with_extension("profdata")
}

/// Build the marker (without writing it).
pub fn build(args: &ProofArgs) -> Result<Value> {
    for (what, name) in [("--package", &args.package), ("--binary", &args.binary)] {
        if name.trim().is_empty() || name.contains('/') {
            bail!("proof: {what} {name:?} is not a name");
        }
    }
    let llvm = used(
        &args.llvm_profile,
        Kind::Llvm,
        args.llvm_check.as_deref(),
        args.llvm_trained_in_build.as_deref(),
    )?;
    let bolt = used(
        &args.bolt_profile,
        Kind::Bolt,
        args.bolt_check.as_deref(),
        args.bolt_trained_in_build.as_deref(),
    )?;
    let holdout = llvm.workload.holdout.clone();
    if bolt.workload.holdout != holdout {
        bail!(
            "proof: the BOLT profile's manifest names another holdout ({:?}) than the LLVM one ({holdout:?})",
            bolt.workload.holdout
        );
    }
    let (pgo, boltm) = (&llvm.manifest["training"], &bolt.manifest["training"]);
    let profdata_path = profdata_of(&llvm.file);
    let profdata = std::fs::read(&profdata_path)
        .with_context(|| format!("proof: reading the profdata {}", profdata_path.display()))?;
    if profdata.is_empty() {
        bail!("proof: the profdata {} is empty", profdata_path.display());
    }
    let log = std::fs::read_to_string(&args.bolt_log)
        .with_context(|| format!("proof: reading the BOLT log {}", args.bolt_log.display()))?;
    let (with_profile, total) = bolt::function_counts(&log).ok_or_else(|| {
        anyhow!(
            "proof: the BOLT log {} has no \"BOLT-INFO: N out of M functions ... have non-empty execution profile\" line",
            args.bolt_log.display()
        )
    })?;
    if with_profile == 0 || total == 0 || with_profile > total {
        bail!("proof: BOLT reports {with_profile} of {total} functions with a profile");
    }
    let versions = read(&args.versions, "toolchain versions")?;
    if !versions.is_object() || str_at(&versions, &["rustc"]).is_none() {
        bail!("proof: the toolchain versions lack \"rustc\"");
    }
    // The target the artifact runs on, named at the top: an aarch64 artifact built on an x86_64
    // builder says so without reading the toolchain record.
    let target = str_at(&versions, &["target"])
        .context("proof: the toolchain versions lack \"target\"")?
        .to_string();
    let built_from = args
        .source
        .digest()
        .context("proof: digest of the sources built")?;
    let both_pinned = matches!(
        (&llvm.origin, &bolt.origin),
        (Origin::Pinned { .. }, Origin::Pinned { .. })
    );
    let marker = json!({
        "schema": MARKER_SCHEMA,
        "package": args.package,
        "binary": args.binary,
        "target": target,
        "pgo": {
            "profraw_files": count(pgo, "profile_files", "LLVM profile manifest")?,
            "profraw_bytes": count(pgo, "profile_bytes", "LLVM profile manifest")?,
            "profdata_bytes": profdata.len() as u64,
            "profdata_sha256": sha256_bytes(&profdata),
            "workloads_trained": llvm.workload.workloads,
            "outputs_checked": llvm.workload.checked,
        },
        "bolt": {
            "fdata_files": count(boltm, "profile_files", "BOLT profile manifest")?,
            "fdata_bytes": count(boltm, "profile_bytes", "BOLT profile manifest")?,
            "functions_with_profile": with_profile,
            "functions_total": total,
            "workloads_trained": bolt.workload.workloads,
            "outputs_checked": bolt.workload.checked,
        },
        "holdout": holdout,
        "toolchain": versions,
        "profiles": {
            "provenance": if both_pinned { PINNED } else { TRAINED_IN_BUILD },
            "refresh_command": args.refresh_command,
            "built_from_source_sha256": built_from,
            "llvm": provenance(&llvm, &built_from),
            "bolt": provenance(&bolt, &built_from),
        },
    });
    marker::verify(&marker).map_err(|e| anyhow!("proof: the marker would not verify: {e:#}"))?;
    Ok(marker)
}

/// `pgo-engine proof`.
pub fn run(args: &ProofArgs) -> Result<()> {
    let marker = build(args)?;
    if let Some(dir) = args.out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    json_file::write(&args.out, &marker).map_err(|e| anyhow!("proof: {e:#}"))?;
    eprintln!("proof: wrote {}", args.out.display());
    Ok(())
}
