//! The proof marker (`share/gateway/proof.json`, `docs/contracts.md`): `trainer proof` writes it
//! from the profiles and their manifests, the verdicts of the freshness checks that vouched for
//! pinned ones (or why a profile was trained in the build instead), BOLT's log, the toolchain
//! versions and the sources built, refusing when anything is missing, empty or inconsistent;
//! `trainer verify-proof` checks one, and with `--require-pinned` refuses an artifact whose
//! profiles were trained in the build (a release is a function of committed profiles).

use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

use crate::pinned;
use crate::profiles::Kind;

#[derive(clap::Args, Debug)]
pub struct ProofArgs {
    /// Output of the pinned LLVM profile stage: gateway.profdata (what the PGO build read),
    /// gateway.proftext and its manifest.json.
    #[arg(long)]
    pub llvm_profile: PathBuf,
    /// Output of the pinned BOLT profile stage: gateway.fdata and its manifest.json.
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
    /// The cargo workspace source this artifact was built from.
    #[arg(long)]
    pub source: PathBuf,
    /// Where to write the marker.
    #[arg(long)]
    pub out: PathBuf,
}

#[derive(clap::Args, Debug)]
pub struct VerifyArgs {
    /// The proof marker to check, or the output directory holding it (`result`, a store path):
    /// then its `share/gateway/proof.json`.
    pub path: PathBuf,
    /// Refuse a marker whose profiles were trained in the build instead of pinned (what a release
    /// requires: the artifact a function of committed inputs, bit-identical on rebuild).
    #[arg(long)]
    pub require_pinned: bool,
}

/// Where a profile came from, as the marker says it.
const PINNED: &str = "pinned";
const TRAINED_IN_BUILD: &str = "trained in build";

/// Where the marker sits inside an output directory (`$out/share/gateway/proof.json`).
const MARKER_IN_OUTPUT: &str = "share/gateway/proof.json";

fn read_json(path: &Path, what: &str) -> Result<Value> {
    let text = std::fs::read(path)
        .with_context(|| format!("proof: reading the {what} {}", path.display()))?;
    serde_json::from_slice(&text)
        .with_context(|| format!("proof: the {what} {} is not JSON", path.display()))
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

/// The trained shapes of a pinned manifest's training section (a list of names).
fn names(v: &Value, what: &str) -> Result<Vec<String>> {
    let names: Vec<String> = v
        .get("shapes")
        .and_then(|s| s.as_array())
        .ok_or_else(|| anyhow!("proof: the {what} lists no shapes"))?
        .iter()
        .map(|s| {
            s.as_str()
                .map(str::to_owned)
                .ok_or_else(|| anyhow!("proof: a shape of the {what} is not a name"))
        })
        .collect::<Result<_>>()?;
    if names.is_empty() {
        bail!("proof: the {what} trained no shape");
    }
    Ok(names)
}

/// `N out of M functions ... have non-empty execution profile` from llvm-bolt's output.
pub fn bolt_function_counts(log: &str) -> Option<(u64, u64)> {
    for line in log.lines() {
        if !line.contains("BOLT-INFO") || !line.contains("have non-empty execution profile") {
            continue;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        for i in 0..words.len().saturating_sub(3) {
            if words[i + 1] == "out" && words[i + 2] == "of" {
                if let (Ok(n), Ok(m)) = (words[i].parse(), words[i + 3].parse()) {
                    return Some((n, m));
                }
            }
        }
    }
    None
}

/// A profile's manifest, with the verdict of the check that vouched for a pinned one, or why it
/// was trained in the build.
struct Used {
    manifest: Value,
    sha256: String,
    origin: Origin,
}

enum Origin {
    Pinned { verdict: Value },
    TrainedInBuild { reason: String },
}

fn used(dir: &Path, kind: Kind, check: Option<&Path>, trained: Option<&str>) -> Result<Used> {
    let what = kind.name();
    let manifest = read_json(
        &dir.join("manifest.json"),
        &format!("{what} profile manifest"),
    )?;
    if manifest.get("kind").and_then(Value::as_str) != Some(what) {
        bail!(
            "proof: {}/manifest.json is not a {what} profile manifest",
            dir.display()
        );
    }
    let sha256 = pinned::sha256_file(&dir.join(pinned::file_name(kind)))?;
    let origin = match (check, trained) {
        (Some(check), None) => {
            let verdict = read_json(check, &format!("{what} freshness verdict"))?;
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
        sha256,
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

/// Build the marker (without writing it).
pub fn build(args: &ProofArgs) -> Result<Value> {
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
    let (pgo, boltm) = (&llvm.manifest["training"], &bolt.manifest["training"]);
    let holdout = pgo
        .get("holdout")
        .and_then(|h| h.as_str())
        .filter(|h| !h.is_empty())
        .ok_or_else(|| anyhow!("proof: the pinned LLVM profile's manifest names no holdout"))?
        .to_owned();
    if boltm.get("holdout").and_then(|h| h.as_str()) != Some(holdout.as_str()) {
        bail!("proof: the BOLT profile's manifest names a different holdout than the LLVM one");
    }
    let pgo_shapes = names(pgo, "LLVM profile manifest")?;
    let bolt_shapes = names(boltm, "BOLT profile manifest")?;
    if pgo_shapes.contains(&holdout) || bolt_shapes.contains(&holdout) {
        bail!("proof: the holdout shape {holdout} was trained");
    }
    let profdata_path = args.llvm_profile.join("gateway.profdata");
    let profdata = std::fs::read(&profdata_path)
        .with_context(|| format!("proof: reading the profdata {}", profdata_path.display()))?;
    if profdata.is_empty() {
        bail!("proof: the profdata {} is empty", profdata_path.display());
    }
    let sha = pinned::hex(&Sha256::digest(&profdata));
    let log = std::fs::read_to_string(&args.bolt_log)
        .with_context(|| format!("proof: reading the BOLT log {}", args.bolt_log.display()))?;
    let (with_profile, total) = bolt_function_counts(&log).ok_or_else(|| {
        anyhow!(
            "proof: the BOLT log {} has no \"BOLT-INFO: N out of M functions ... have non-empty execution profile\" line",
            args.bolt_log.display()
        )
    })?;
    if with_profile == 0 || total == 0 || with_profile > total {
        bail!("proof: BOLT reports {with_profile} of {total} functions with a profile");
    }
    let versions = read_json(&args.versions, "toolchain versions")?;
    if !versions.is_object() || versions.get("rustc").and_then(|r| r.as_str()).is_none() {
        bail!("proof: the toolchain versions lack \"rustc\"");
    }
    // The target the artifact runs on, named at the top: an aarch64 artifact built on an x86_64
    // builder says so without reading the toolchain record.
    let target = versions
        .get("target")
        .and_then(|t| t.as_str())
        .context("proof: the toolchain versions lack \"target\"")?
        .to_string();
    let built_from = pinned::tree_digest(&args.source, pinned::SOURCE_FILES)
        .context("proof: digest of the sources built")?;
    let both_pinned = matches!(
        (&llvm.origin, &bolt.origin),
        (Origin::Pinned { .. }, Origin::Pinned { .. })
    );
    let marker = json!({
        "schema": 3,
        "target": target,
        "pgo": {
            "profraw_files": count(pgo, "profile_files", "LLVM profile manifest")?,
            "profraw_bytes": count(pgo, "profile_bytes", "LLVM profile manifest")?,
            "profdata_bytes": profdata.len() as u64,
            "profdata_sha256": sha,
            "shapes_trained": pgo_shapes,
            "requests_checked": count(pgo, "requests_checked", "LLVM profile manifest")?,
        },
        "bolt": {
            "fdata_files": count(boltm, "profile_files", "BOLT profile manifest")?,
            "fdata_bytes": count(boltm, "profile_bytes", "BOLT profile manifest")?,
            "functions_with_profile": with_profile,
            "functions_total": total,
            "shapes_trained": bolt_shapes,
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
    verify(&marker)?;
    Ok(marker)
}

/// `trainer proof`.
pub fn run(args: ProofArgs) -> Result<()> {
    let marker = build(&args)?;
    if let Some(dir) = args.out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let text = serde_json::to_string_pretty(&marker)? + "\n";
    crate::mock::write_atomically(&args.out, text.as_bytes())
        .with_context(|| format!("proof: writing {}", args.out.display()))?;
    eprintln!("proof: wrote {}", args.out.display());
    Ok(())
}

/// Check a marker's content.
pub fn verify(m: &Value) -> Result<()> {
    if m.get("schema").and_then(|s| s.as_u64()) != Some(3) {
        bail!("schema is not 3");
    }
    let section = |k: &str| {
        m.get(k)
            .filter(|v| v.is_object())
            .ok_or_else(|| anyhow!("no \"{k}\" section"))
    };
    if m.get("target")
        .and_then(|t| t.as_str())
        .is_none_or(str::is_empty)
    {
        bail!("no \"target\" named");
    }
    let pgo = section("pgo")?;
    let bolt = section("bolt")?;
    for (sec, name, keys) in [
        (
            pgo,
            "pgo",
            &[
                "profraw_files",
                "profraw_bytes",
                "profdata_bytes",
                "requests_checked",
            ][..],
        ),
        (
            bolt,
            "bolt",
            &[
                "fdata_files",
                "fdata_bytes",
                "functions_with_profile",
                "functions_total",
            ][..],
        ),
    ] {
        for k in keys {
            match sec.get(*k).and_then(|n| n.as_u64()) {
                Some(0) => bail!("{name}.{k} is 0"),
                Some(_) => {}
                None => bail!("{name}.{k} is missing or not a count"),
            }
        }
    }
    let with = bolt["functions_with_profile"].as_u64().unwrap_or(0);
    let total = bolt["functions_total"].as_u64().unwrap_or(0);
    if with > total {
        bail!("bolt.functions_with_profile ({with}) exceeds bolt.functions_total ({total})");
    }
    let sha = pgo
        .get("profdata_sha256")
        .and_then(|s| s.as_str())
        .unwrap_or("");
    if sha.len() != 64 || !sha.bytes().all(|b| b.is_ascii_hexdigit()) {
        bail!("pgo.profdata_sha256 is not a sha256 hex digest");
    }
    let holdout = m
        .get("holdout")
        .and_then(|h| h.as_str())
        .filter(|h| !h.is_empty())
        .ok_or_else(|| anyhow!("no holdout shape named"))?;
    for (sec, name) in [(pgo, "pgo"), (bolt, "bolt")] {
        let shapes = sec
            .get("shapes_trained")
            .and_then(|s| s.as_array())
            .ok_or_else(|| anyhow!("{name}.shapes_trained is missing"))?;
        if shapes.is_empty() {
            bail!("{name}.shapes_trained is empty");
        }
        if shapes.iter().any(|s| s.as_str() == Some(holdout)) {
            bail!("the holdout shape {holdout} is among {name}.shapes_trained");
        }
        if shapes.iter().any(|s| s.as_str().is_none_or(str::is_empty)) {
            bail!("{name}.shapes_trained has a non-name");
        }
    }
    let profiles = section("profiles")?;
    let provenance = profiles.get("provenance").and_then(|p| p.as_str());
    if !matches!(provenance, Some(PINNED | TRAINED_IN_BUILD)) {
        bail!("profiles.provenance is {provenance:?}, not {PINNED:?} or {TRAINED_IN_BUILD:?}");
    }
    let is_sha = |v: Option<&Value>| {
        v.and_then(|s| s.as_str())
            .is_some_and(|s| s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit()))
    };
    if !is_sha(profiles.get("built_from_source_sha256")) {
        bail!("profiles.built_from_source_sha256 is not a sha256 hex digest");
    }
    let mut all_pinned = true;
    for kind in ["llvm", "bolt"] {
        let p = profiles
            .get(kind)
            .filter(|v| v.is_object())
            .ok_or_else(|| anyhow!("no \"profiles.{kind}\" section"))?;
        for k in ["sha256", "trained_on_source_sha256"] {
            if !is_sha(p.get(k)) {
                bail!("profiles.{kind}.{k} is not a sha256 hex digest");
            }
        }
        let check = p.get("freshness_check").and_then(|v| v.as_str());
        match p.get("provenance").and_then(|v| v.as_str()) {
            Some(PINNED) if check == Some("fresh") => {}
            Some(PINNED) => bail!(
                "profiles.{kind}: pinned, but its freshness_check is {check:?}, not \"fresh\""
            ),
            Some(TRAINED_IN_BUILD) => {
                all_pinned = false;
                if p.get("reason")
                    .and_then(|r| r.as_str())
                    .is_none_or(str::is_empty)
                {
                    bail!("profiles.{kind}: trained in build, but no reason is given");
                }
            }
            other => bail!(
                "profiles.{kind}.provenance is {other:?}, not {PINNED:?} or {TRAINED_IN_BUILD:?}"
            ),
        }
    }
    if all_pinned != (provenance == Some(PINNED)) {
        bail!("profiles.provenance is {provenance:?}, but its profiles say otherwise");
    }
    let tc = m
        .get("toolchain")
        .and_then(|t| t.as_object())
        .ok_or_else(|| anyhow!("no toolchain section"))?;
    if tc
        .get("rustc")
        .and_then(|r| r.as_str())
        .is_none_or(str::is_empty)
    {
        bail!("toolchain.rustc is missing");
    }
    Ok(())
}

/// A release's rule: both profiles pinned (a valid marker assumed).
pub fn require_pinned(m: &Value) -> Result<()> {
    let profiles = &m["profiles"];
    if profiles["provenance"].as_str() == Some(PINNED) {
        return Ok(());
    }
    let reasons: Vec<String> = ["llvm", "bolt"]
        .iter()
        .filter_map(|k| profiles[*k]["reason"].as_str().map(|r| format!("{k}: {r}")))
        .collect();
    bail!(
        "the profiles were trained in the build, not pinned ({}); a release is built from pinned profiles only: pin them with `{}` and commit profiles/",
        reasons.join("; "),
        profiles["refresh_command"].as_str().unwrap_or("the refresh command")
    )
}

/// `trainer verify-proof PATH`: PATH is the marker or an output directory holding it.
pub fn verify_cli(args: VerifyArgs) -> Result<()> {
    let path = if args.path.is_dir() {
        args.path.join(MARKER_IN_OUTPUT)
    } else {
        args.path.clone()
    };
    let text = std::fs::read(&path)
        .with_context(|| format!("verify-proof: no proof marker at {}", path.display()))?;
    let m: Value = serde_json::from_slice(&text)
        .with_context(|| format!("verify-proof: {} is not JSON", path.display()))?;
    verify(&m).map_err(|e| anyhow!("verify-proof: {}: {e}", path.display()))?;
    if args.require_pinned {
        require_pinned(&m).map_err(|e| anyhow!("verify-proof: {}: {e}", path.display()))?;
    }
    eprintln!(
        "verify-proof: {} is valid ({} profiles, holdout {}, {} PGO shapes, {} BOLT shapes)",
        path.display(),
        m["profiles"]["provenance"].as_str().unwrap_or(""),
        m["holdout"].as_str().unwrap_or(""),
        m["pgo"]["shapes_trained"].as_array().map_or(0, |a| a.len()),
        m["bolt"]["shapes_trained"]
            .as_array()
            .map_or(0, |a| a.len()),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bolt_line() {
        let log = "BOLT-INFO: 1234 out of 5678 functions in the binary (21.7%) have non-empty execution profile\n";
        assert_eq!(bolt_function_counts(log), Some((1234, 5678)));
        assert_eq!(bolt_function_counts("BOLT-INFO: nothing"), None);
    }
}
