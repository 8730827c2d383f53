//! `pgo-engine verify`: what a pinned-profile stage runs before anything consumes the profile. The
//! file is the one its manifest names and records (not corrupt), its key is this build's, the
//! LLVM tool that reads it is of the major that wrote it, and a BOLT profile applies to the PGO
//! binary about to be optimized: llvm-bolt, reading it, found none of the functions it profiles
//! stale or missing (`profile::bolt::fit`). Every refusal names the refresh command.

use anyhow::{anyhow, bail, Context, Result};
use serde_json::Value;
use std::path::{Path, PathBuf};

use super::key::{build_key, key_differences, pinned_subdir, KeyArgs};
use super::manifest::{profile_file, MANIFEST_SCHEMA};
use crate::digest::sha256_file;
use crate::json_file::{self, str_at};
use crate::profile::{bolt, Kind, Profile};

#[derive(clap::Args, Debug)]
pub struct VerifyArgs {
    #[arg(long, value_enum)]
    pub kind: Kind,
    /// The pinned directory: the profile file and manifest.json.
    #[arg(long)]
    pub dir: PathBuf,
    #[command(flatten)]
    pub key: KeyArgs,
    /// BOLT: what llvm-bolt printed reading the profile into the PGO binary about to be
    /// optimized, with `-report-stale` (the BOLT profile stage runs it).
    #[arg(long)]
    pub bolt_report: Option<PathBuf>,
    /// BOLT: `llvm-readelf -s -W` of that PGO binary.
    #[arg(long)]
    pub bolt_symbols: Option<PathBuf>,
    /// The command that refreshes the pinned profiles, named in every failure.
    #[arg(long)]
    pub refresh_command: String,
}

fn major(version: Option<&str>) -> Option<&str> {
    version.and_then(|v| v.split('.').next())
}

/// Check a pinned directory; returns its manifest.
pub fn verify(a: &VerifyArgs) -> Result<Value> {
    let kind = a.kind.name();
    let refresh = &a.refresh_command;
    let manifest_path = a.dir.join("manifest.json");
    if !a.dir.is_dir() {
        bail!(
            "no pinned {kind} profile at {}: create it with `{refresh}`",
            a.dir.display(),
        );
    }
    let m = json_file::read(&manifest_path, "pinned profile manifest").map_err(|e| {
        anyhow!("the pinned {kind} profile is corrupt: {e:#}; rewrite it with `{refresh}`")
    })?;
    let corrupt = |why: String| {
        anyhow!("the pinned {kind} profile is corrupt: {why}; rewrite it with `{refresh}`")
    };
    if str_at(&m, &["kind"]) != Some(kind) {
        return Err(corrupt(format!(
            "{} is not a {kind} manifest",
            manifest_path.display()
        )));
    }
    let schema = m.get("schema").and_then(Value::as_u64);
    if schema != Some(MANIFEST_SCHEMA) {
        bail!(
            "the pinned {kind} profile's manifest {} is of schema {}, not {MANIFEST_SCHEMA} (profiles keyed by Rust release, target and codegen settings): rewrite it with `{refresh}`",
            manifest_path.display(),
            schema.map_or("?".into(), |s| s.to_string())
        );
    }
    let file = profile_file(&a.dir, &m).map_err(|e| corrupt(format!("{e:#}")))?;
    let want = str_at(&m, &["sha256"]).unwrap_or("");
    let got = sha256_file(&file).map_err(|e| corrupt(format!("{e:#}")))?;
    if got != want {
        return Err(corrupt(format!(
            "{} has sha256 {got}, its manifest records {want}",
            file.display()
        )));
    }
    let (this_key, versions) = build_key(&a.key)?;
    let differences = key_differences(&m["key"], &this_key);
    if !differences.is_empty() {
        bail!(
            "the pinned {kind} profile was trained for another key than this build's ({}): refresh it with `{refresh}`",
            differences.join("; ")
        );
    }
    let tool = match a.kind {
        Kind::Llvm => "llvm_profdata",
        Kind::Bolt => "llvm_bolt",
    };
    let pinned_tool = str_at(&m, &["toolchain", tool]);
    let this_tool = str_at(&versions, &[tool]);
    if major(pinned_tool) != major(this_tool) {
        bail!(
            "the pinned {kind} profile was written by {tool} {} and this build reads it with {tool} {}, another major: refresh it with `{refresh}`",
            pinned_tool.unwrap_or("?"),
            this_tool.unwrap_or("?")
        );
    }
    let profile = Profile::read(a.kind, &file).map_err(|e| corrupt(format!("{e:#}")))?;
    let fit = if a.kind == Kind::Bolt {
        let report = a
            .bolt_report
            .as_ref()
            .context("verify: a BOLT profile is verified against --bolt-report")?;
        let symbols = a
            .bolt_symbols
            .as_ref()
            .context("verify: a BOLT profile is verified against --bolt-symbols")?;
        let read = |p: &Path, what: &str| {
            std::fs::read_to_string(p).with_context(|| format!("reading {what} {}", p.display()))
        };
        let fit = bolt::fit(
            &profile,
            &read(report, "the llvm-bolt report")?,
            &read(symbols, "the PGO binary's symbol table")?,
        )?;
        if !fit.stale.is_empty() || !fit.missing.is_empty() {
            bail!(
                "the pinned BOLT profile is stale: {}; refresh it with `{refresh}`",
                fit.describe()
            );
        }
        format!(", {}", fit.describe())
    } else {
        String::new()
    };
    eprintln!(
        "pinned {kind} profile {} verified: sha256 {got}, key {}{fit}",
        file.display(),
        pinned_subdir(a.kind, &this_key)?.display(),
    );
    Ok(m)
}
