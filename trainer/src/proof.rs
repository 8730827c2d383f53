//! The proof marker (`share/gateway/proof.json`, `docs/contracts.md`): `trainer proof` writes it
//! from the two training manifests, the merged profiles, BOLT's log and the toolchain versions,
//! refusing when anything is missing, empty or inconsistent; `trainer verify-proof` checks one.

use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

#[derive(clap::Args, Debug)]
pub struct ProofArgs {
    /// manifest.json of the LLVM (PGO) training run.
    #[arg(long)]
    pub pgo_manifest: PathBuf,
    /// The merged profdata.
    #[arg(long)]
    pub profdata: PathBuf,
    /// manifest.json of the BOLT training run.
    #[arg(long)]
    pub bolt_manifest: PathBuf,
    /// The merged fdata.
    #[arg(long)]
    pub fdata: PathBuf,
    /// Output of `llvm-bolt -data=...` (its BOLT-INFO lines).
    #[arg(long)]
    pub bolt_log: PathBuf,
    /// versions.json of the toolchain check.
    #[arg(long)]
    pub versions: PathBuf,
    /// Where to write the marker.
    #[arg(long)]
    pub out: PathBuf,
}

#[derive(clap::Args, Debug)]
pub struct VerifyArgs {
    /// The proof marker to check, or the output directory holding it (`result`, a store path):
    /// then its `share/gateway/proof.json`.
    pub path: PathBuf,
}

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

fn shape_names(v: &Value, what: &str) -> Result<Vec<String>> {
    let names: Vec<String> = v
        .get("shapes")
        .and_then(|s| s.as_array())
        .ok_or_else(|| anyhow!("proof: the {what} lists no shapes"))?
        .iter()
        .map(|s| {
            s.get("name")
                .and_then(|n| n.as_str())
                .map(str::to_owned)
                .ok_or_else(|| anyhow!("proof: a shape of the {what} has no name"))
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

fn file_len(path: &Path, what: &str) -> Result<u64> {
    let len = std::fs::metadata(path)
        .with_context(|| format!("proof: the {what} {} is missing", path.display()))?
        .len();
    if len == 0 {
        bail!("proof: the {what} {} is empty", path.display());
    }
    Ok(len)
}

/// Build the marker (without writing it).
pub fn build(args: &ProofArgs) -> Result<Value> {
    let pgo = read_json(&args.pgo_manifest, "PGO training manifest")?;
    let bolt = read_json(&args.bolt_manifest, "BOLT training manifest")?;
    for (m, kind, what) in [(&pgo, "llvm", "PGO"), (&bolt, "bolt", "BOLT")] {
        let got = m.get("profile_kind").and_then(|k| k.as_str());
        if got != Some(kind) {
            bail!(
                "proof: the {what} training manifest has profile_kind {got:?}, expected {kind:?}"
            );
        }
    }
    let holdout = pgo
        .get("holdout")
        .and_then(|h| h.as_str())
        .filter(|h| !h.is_empty())
        .ok_or_else(|| anyhow!("proof: the PGO training manifest names no holdout"))?
        .to_owned();
    if bolt.get("holdout").and_then(|h| h.as_str()) != Some(holdout.as_str()) {
        bail!("proof: the BOLT training manifest names a different holdout than the PGO one");
    }
    let pgo_shapes = shape_names(&pgo, "PGO training manifest")?;
    let bolt_shapes = shape_names(&bolt, "BOLT training manifest")?;
    if pgo_shapes.contains(&holdout) || bolt_shapes.contains(&holdout) {
        bail!("proof: the holdout shape {holdout} was trained");
    }
    let profdata = std::fs::read(&args.profdata)
        .with_context(|| format!("proof: reading the profdata {}", args.profdata.display()))?;
    if profdata.is_empty() {
        bail!("proof: the profdata {} is empty", args.profdata.display());
    }
    let sha: String = Sha256::digest(&profdata)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    file_len(&args.fdata, "merged fdata")?;
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
    let marker = json!({
        "schema": 1,
        "pgo": {
            "profraw_files": count(&pgo, "profile_files", "PGO training manifest")?,
            "profraw_bytes": count(&pgo, "profile_bytes", "PGO training manifest")?,
            "profdata_bytes": profdata.len() as u64,
            "profdata_sha256": sha,
            "shapes_trained": pgo_shapes,
            "requests_checked": count(&pgo, "requests_checked", "PGO training manifest")?,
        },
        "bolt": {
            "fdata_files": count(&bolt, "profile_files", "BOLT training manifest")?,
            "fdata_bytes": count(&bolt, "profile_bytes", "BOLT training manifest")?,
            "functions_with_profile": with_profile,
            "functions_total": total,
            "shapes_trained": bolt_shapes,
        },
        "holdout": holdout,
        "toolchain": versions,
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
    if m.get("schema").and_then(|s| s.as_u64()) != Some(1) {
        bail!("schema is not 1");
    }
    let section = |k: &str| {
        m.get(k)
            .filter(|v| v.is_object())
            .ok_or_else(|| anyhow!("no \"{k}\" section"))
    };
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
    eprintln!(
        "verify-proof: {} is valid (holdout {}, {} PGO shapes, {} BOLT shapes)",
        path.display(),
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
