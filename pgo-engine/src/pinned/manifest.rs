//! `pgo-engine manifest`: the manifest of a freshly trained profile (`docs/contracts.md`, "Pinned
//! profiles"): its key, the file it describes, digests of the sources and workload inputs it was
//! trained from and of the binaries it was trained on, the training record's figures, counts.

use anyhow::{anyhow, bail, Result};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

use super::key::{build_key, KeyArgs};
use crate::digest::{sha256_file, tree_digest};
use crate::json_file::{self, str_at};
use crate::profile::{Kind, Profile};
use crate::training::record::{Record, Workload};

/// Schema of the manifests `manifest` writes: 2 keys a profile by `build_key`; 1 (by provider) is
/// refused, naming the refresh command.
pub const MANIFEST_SCHEMA: u64 = 2;

/// The sources a binary was built from, as a digest covers them: a manifest records what its
/// profile was trained on, the proof marker what its artifact was built from, and the two are
/// compared, so a chain gives both the same arguments.
#[derive(clap::Args, Debug, Clone)]
pub struct SourceArgs {
    /// The source tree the binaries were built from.
    #[arg(long)]
    pub source: PathBuf,
    /// A file or folder under SOURCE that the digest covers (repeatable; none: everything under
    /// SOURCE): the crate and what it is built with, not its docs or tests.
    #[arg(long = "source-include")]
    pub include: Vec<String>,
}

impl SourceArgs {
    /// `find INCLUDE... -type f | LC_ALL=C sort | xargs sha256sum | sha256sum` in SOURCE.
    pub fn digest(&self) -> Result<String> {
        tree_digest(&self.source, &self.include)
    }
}

#[derive(clap::Args, Debug)]
pub struct ManifestArgs {
    #[arg(long, value_enum)]
    pub kind: Kind,
    /// The merged profile file (its name is the one the manifest records and a pin keeps).
    #[arg(long)]
    pub profile: PathBuf,
    /// The training record of the run that produced it (`pgo-engine train --record`).
    #[arg(long)]
    pub training: PathBuf,
    #[command(flatten)]
    pub key: KeyArgs,
    /// Nix system the profile was trained on (x86_64-linux): recorded, not part of the key.
    #[arg(long)]
    pub system: String,
    /// Toolchain provider that trained it (offline-debian, nixpkgs-fenix): recorded, not part of
    /// the key.
    #[arg(long)]
    pub provider: String,
    #[command(flatten)]
    pub source: SourceArgs,
    /// The training's inputs (the gateway's shapes, a corpus): a folder, digested whole.
    #[arg(long)]
    pub workload_inputs: Option<PathBuf>,
    /// The instrumented binary the training ran.
    #[arg(long)]
    pub instrumented: PathBuf,
    /// BOLT: the PGO binary that was instrumented (the profile belongs to it).
    #[arg(long)]
    pub pgo_binary: Option<PathBuf>,
    #[arg(long)]
    pub out: PathBuf,
}

/// A plain file name (no folder, not `.` or `..`), as a manifest names its profile file.
fn plain_name(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains('/')
}

/// The profile file of a pinned or fresh directory: the one its manifest names.
pub fn profile_file(dir: &Path, manifest: &Value) -> Result<PathBuf> {
    match str_at(manifest, &["file"]) {
        Some(name) if plain_name(name) => Ok(dir.join(name)),
        other => bail!(
            "{}/manifest.json names no profile file (\"file\": {other:?})",
            dir.display()
        ),
    }
}

/// What a manifest says its profile trained: its `training` section's workloads.
pub fn trained(manifest: &Value) -> Result<Workload> {
    Workload::read(&manifest["training"]).map_err(|e| anyhow!("its training section {e}"))
}

pub fn write(a: &ManifestArgs) -> Result<()> {
    let kind = a.kind.name();
    let profile = Profile::read(a.kind, &a.profile)?;
    let file = a
        .profile
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .filter(|n| plain_name(n))
        .ok_or_else(|| anyhow!("manifest: {} names no file", a.profile.display()))?;
    let training = Record::read(&a.training)?;
    let (key, versions) = build_key(&a.key)?;
    if training.profile_kind != kind {
        bail!("manifest: the training record is not of a {kind} training");
    }
    let cargo_lock = a.source.source.join("Cargo.lock");
    let mut trained_on = json!({
        "source_sha256": a.source.digest()?,
        "source_include": a.source.include,
        "cargo_lock_sha256": if cargo_lock.is_file() { json!(sha256_file(&cargo_lock)?) } else { Value::Null },
        "workload_inputs_sha256": match &a.workload_inputs {
            Some(dir) => json!(tree_digest(dir, &[])?),
            None => Value::Null,
        },
        "instrumented_sha256": sha256_file(&a.instrumented)?,
    });
    match (a.kind, &a.pgo_binary) {
        (Kind::Bolt, Some(p)) => trained_on["pgo_binary_sha256"] = json!(sha256_file(p)?),
        (Kind::Bolt, None) => bail!("manifest: a BOLT profile needs --pgo-binary"),
        (Kind::Llvm, Some(_)) => bail!("manifest: --pgo-binary is for BOLT profiles"),
        (Kind::Llvm, None) => {}
    }
    let mut section = training.workload.to_json();
    section["profile_files"] = json!(training.profile_files);
    section["profile_bytes"] = json!(training.profile_bytes);
    section["machine"] = training.machine;
    section["host"] = training.host;
    let manifest = json!({
        "schema": MANIFEST_SCHEMA,
        "kind": kind,
        "file": file,
        "sha256": sha256_file(&a.profile)?,
        "bytes": std::fs::metadata(&a.profile)?.len(),
        "key": key,
        "system": a.system,
        "provider": a.provider,
        "toolchain": versions,
        "trained_on": trained_on,
        "training": section,
        "counts": {
            "functions": profile.functions.len(),
            "functions_with_counts": profile.functions.values().filter(|f| f.total() > 0).count(),
            "total": profile.total(),
        },
    });
    json_file::write(&a.out, &manifest)
}
