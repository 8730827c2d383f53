//! A proof marker's content checked (`pgo-engine verify-proof`): present, consistent, every count
//! non-zero, the holdout not trained, each profile pinned with a `fresh` check or trained in the
//! build with a reason; with `--require-pinned`, both pinned (the release rule).
//!
//! Schema 4 is what `proof` writes. Schema 3, the gateway's markers before the engine was split
//! out of its trainer, still verifies: it names no package or binary, and calls the workloads
//! `shapes_trained` and the outputs checked `requests_checked` (both required there).

use anyhow::{anyhow, bail, Context, Result};
use serde_json::Value;
use std::path::PathBuf;

use crate::digest::is_sha256_hex;
use crate::json_file::str_at;

/// The schema `proof` writes.
pub const MARKER_SCHEMA: u64 = 4;

/// Where a profile came from, as the marker says it.
pub const PINNED: &str = "pinned";
pub const TRAINED_IN_BUILD: &str = "trained in build";

#[derive(clap::Args, Debug)]
pub struct VerifyProofArgs {
    /// The proof marker to check, or an output directory holding it (`result`, a store path):
    /// then its `share/BINARY/proof.json`.
    pub path: PathBuf,
    /// The binary whose marker an output directory holds (default: the one marker under
    /// `share/` there); a marker of another binary is refused.
    #[arg(long)]
    pub binary: Option<String>,
    /// Refuse a marker whose profiles were trained in the build instead of pinned (what a release
    /// requires: the artifact a function of committed inputs, bit-identical on rebuild).
    #[arg(long)]
    pub require_pinned: bool,
}

/// The field names of a schema.
struct Fields {
    workloads: &'static str,
    checked: &'static str,
    /// Schema 3 required a holdout, the outputs checked and a trained workload.
    strict: bool,
}

fn fields(schema: Option<u64>) -> Result<Fields> {
    match schema {
        Some(3) => Ok(Fields {
            workloads: "shapes_trained",
            checked: "requests_checked",
            strict: true,
        }),
        Some(MARKER_SCHEMA) => Ok(Fields {
            workloads: "workloads_trained",
            checked: "outputs_checked",
            strict: false,
        }),
        other => bail!("schema is {other:?}, not {MARKER_SCHEMA} (or 3)"),
    }
}

fn name_at<'a>(m: &'a Value, key: &str) -> Option<&'a str> {
    m.get(key).and_then(Value::as_str).filter(|s| !s.is_empty())
}

/// Check a marker's content.
pub fn verify(m: &Value) -> Result<()> {
    let f = fields(m.get("schema").and_then(Value::as_u64))?;
    if !f.strict {
        for k in ["package", "binary"] {
            if name_at(m, k).is_none() {
                bail!("no {k:?} named");
            }
        }
    }
    let section = |k: &str| {
        m.get(k)
            .filter(|v| v.is_object())
            .ok_or_else(|| anyhow!("no \"{k}\" section"))
    };
    if name_at(m, "target").is_none() {
        bail!("no \"target\" named");
    }
    let pgo = section("pgo")?;
    let bolt = section("bolt")?;
    for (sec, name, keys) in [
        (
            pgo,
            "pgo",
            &["profraw_files", "profraw_bytes", "profdata_bytes"][..],
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
        // Optional, but a count where given; schema 3 required it of the LLVM training.
        match sec.get(f.checked).filter(|n| !n.is_null()) {
            None if !f.strict || name == "bolt" => {}
            None => bail!("{name}.{} is missing or not a count", f.checked),
            Some(n) => match n.as_u64() {
                Some(0) => bail!("{name}.{} is 0", f.checked),
                Some(_) => {}
                None => bail!("{name}.{} is not a count", f.checked),
            },
        }
    }
    let with = bolt["functions_with_profile"].as_u64().unwrap_or(0);
    let total = bolt["functions_total"].as_u64().unwrap_or(0);
    if with > total {
        bail!("bolt.functions_with_profile ({with}) exceeds bolt.functions_total ({total})");
    }
    if !str_at(pgo, &["profdata_sha256"]).is_some_and(is_sha256_hex) {
        bail!("pgo.profdata_sha256 is not a sha256 hex digest");
    }
    let holdout = match m.get("holdout") {
        Some(Value::String(h)) if !h.is_empty() => Some(h.as_str()),
        None | Some(Value::Null) if !f.strict => None,
        _ => bail!("no holdout named"),
    };
    for (sec, name) in [(pgo, "pgo"), (bolt, "bolt")] {
        let trained = sec
            .get(f.workloads)
            .and_then(|s| s.as_array())
            .ok_or_else(|| anyhow!("{name}.{} is missing", f.workloads))?;
        if f.strict && trained.is_empty() {
            bail!("{name}.{} is empty", f.workloads);
        }
        if let Some(h) = holdout {
            if trained.iter().any(|s| s.as_str() == Some(h)) {
                bail!("the holdout {h} is among {name}.{}", f.workloads);
            }
        }
        if trained.iter().any(|s| s.as_str().is_none_or(str::is_empty)) {
            bail!("{name}.{} has a non-name", f.workloads);
        }
    }
    verify_profiles(section("profiles")?)?;
    if m.get("toolchain")
        .and_then(|t| t.get("rustc"))
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        bail!("toolchain.rustc is missing");
    }
    Ok(())
}

/// The `profiles` section: each profile pinned with a fresh check or trained in the build with a
/// reason, and the whole section's provenance agreeing with them.
fn verify_profiles(profiles: &Value) -> Result<()> {
    let provenance = profiles.get("provenance").and_then(|p| p.as_str());
    if !matches!(provenance, Some(PINNED | TRAINED_IN_BUILD)) {
        bail!("profiles.provenance is {provenance:?}, not {PINNED:?} or {TRAINED_IN_BUILD:?}");
    }
    let is_sha = |v: Option<&Value>| v.and_then(Value::as_str).is_some_and(is_sha256_hex);
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
                if name_at(p, "reason").is_none() {
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
        "the profiles were trained in the build, not pinned ({}); a release is built from pinned profiles only: pin them with `{}` and commit the profiles",
        reasons.join("; "),
        profiles["refresh_command"].as_str().unwrap_or("the refresh command")
    )
}

/// The marker an output directory holds: `share/BINARY/proof.json`, or without a binary named the
/// one `share/*/proof.json` there is.
fn marker_in(dir: &std::path::Path, binary: Option<&str>) -> Result<PathBuf> {
    if let Some(b) = binary {
        return Ok(dir.join("share").join(b).join("proof.json"));
    }
    let share = dir.join("share");
    let mut found: Vec<PathBuf> = std::fs::read_dir(&share)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.path().join("proof.json"))
                .filter(|p| p.is_file())
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    match found.len() {
        1 => Ok(found.remove(0)),
        0 => bail!(
            "verify-proof: no proof marker at {}/*/proof.json",
            share.display()
        ),
        _ => bail!(
            "verify-proof: {} holds several markers ({}): name the binary with --binary",
            share.display(),
            found
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// `pgo-engine verify-proof PATH`: PATH is the marker or an output directory holding it.
pub fn verify_cli(args: &VerifyProofArgs) -> Result<()> {
    let path = if args.path.is_dir() {
        marker_in(&args.path, args.binary.as_deref())?
    } else {
        args.path.clone()
    };
    let text = std::fs::read(&path)
        .with_context(|| format!("verify-proof: no proof marker at {}", path.display()))?;
    let m: Value = serde_json::from_slice(&text)
        .with_context(|| format!("verify-proof: {} is not JSON", path.display()))?;
    let refuse = |e: anyhow::Error| anyhow!("verify-proof: {}: {e}", path.display());
    verify(&m).map_err(refuse)?;
    // A schema 3 marker is the gateway's.
    let binary = name_at(&m, "binary").unwrap_or("gateway");
    if let Some(want) = args.binary.as_deref().filter(|b| *b != binary) {
        return Err(refuse(anyhow!(
            "it is the marker of {binary}, not of {want}"
        )));
    }
    if args.require_pinned {
        require_pinned(&m).map_err(refuse)?;
    }
    let f = fields(m["schema"].as_u64())?;
    let trained = |s: &str| m[s][f.workloads].as_array().map_or(0, Vec::len);
    eprintln!(
        "verify-proof: {} is valid ({binary}: {} profiles, holdout {}, {} PGO workloads, {} BOLT workloads)",
        path.display(),
        m["profiles"]["provenance"].as_str().unwrap_or(""),
        m["holdout"].as_str().unwrap_or("none"),
        trained("pgo"),
        trained("bolt"),
    );
    Ok(())
}
