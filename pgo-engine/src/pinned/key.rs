//! A profile's key: what determines it, and so which build may read it. The Rust release (`rustc
//! -vV` without its host line, `cargo -V`), the target, and the settings that change generated
//! code (the cargo profile, features, code-changing RUSTFLAGS). Link-only and remap flags, the
//! build and vendor directories and the toolchain provider are not part of it: the same release
//! gives the same function names and control-flow hashes whoever invokes cargo (docs/flake.md,
//! "One profile set per Rust release"). So both providers of one target read one profile.

use anyhow::{anyhow, bail, Result};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

use crate::json_file::{self, str_at};
use crate::profile::Kind;

/// Where the key's codegen part comes from: a JSON object the chain writes (the gateway's:
/// `nix/pipeline.nix`, `codegenKey`), so that nothing here guesses which flags change code.
#[derive(clap::Args, Debug, Clone)]
pub struct KeyArgs {
    /// versions.json of the toolchain stage (Rust release, rustc, cargo, target, LLVM tools).
    #[arg(long)]
    pub versions: PathBuf,
    /// The codegen settings of the key: cargo profile, features, code-changing RUSTFLAGS (JSON).
    #[arg(long)]
    pub codegen: PathBuf,
}

/// The fields of versions.json that enter the key: the Rust release, what identifies its build
/// (`rustc -vV` without its host line, `cargo -V`), and the target. The LLVM tools' versions do
/// not: they read and write profiles, they do not make the code profiled (verify checks their
/// majors separately).
const KEY_TOOLCHAIN_FIELDS: &[&str] = &[
    "rust_release",
    "rustc",
    "rustc_commit_hash",
    "rustc_llvm",
    "cargo",
    "target",
];

/// This build's key and its versions.json: the key is the toolchain part of versions.json and
/// the codegen settings.
pub fn build_key(k: &KeyArgs) -> Result<(Value, Value)> {
    let versions = json_file::read(&k.versions, "toolchain versions")?;
    let codegen = json_file::read(&k.codegen, "codegen key")?;
    let mut key = serde_json::Map::new();
    for field in KEY_TOOLCHAIN_FIELDS {
        let v = str_at(&versions, &[field])
            .filter(|v| !v.is_empty())
            .ok_or_else(|| {
                anyhow!(
                    "the toolchain versions {} lack {field:?}",
                    k.versions.display()
                )
            })?;
        key.insert(field.to_string(), json!(v));
    }
    if !codegen.is_object() {
        bail!(
            "the codegen key {} is not a JSON object",
            k.codegen.display()
        );
    }
    key.insert("codegen".into(), codegen);
    Ok((Value::Object(key), versions))
}

/// Where the profiles of a key are pinned under a profiles directory:
/// `<target>/rust-<release>/<kind>`.
pub fn pinned_subdir(kind: Kind, key: &Value) -> Result<PathBuf> {
    let target = str_at(key, &["target"]).filter(|t| !t.is_empty());
    let release = str_at(key, &["rust_release"]).filter(|r| !r.is_empty());
    match (target, release) {
        (Some(t), Some(r)) => Ok(Path::new(t).join(format!("rust-{r}")).join(kind.name())),
        _ => bail!("the profile key names no target or Rust release: {key}"),
    }
}

/// The fields in which two keys differ, each as `field: pinned -> this build`.
pub fn key_differences(pinned: &Value, this: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let fields = |v: &Value| -> Vec<String> {
        v.as_object()
            .map(|o| o.keys().cloned().collect())
            .unwrap_or_default()
    };
    let mut names = fields(pinned);
    names.extend(fields(this));
    names.sort();
    names.dedup();
    for name in names {
        let (a, b) = (&pinned[&name], &this[&name]);
        if a == b {
            continue;
        }
        if a.is_object() && b.is_object() {
            out.extend(
                key_differences(a, b)
                    .into_iter()
                    .map(|d| format!("{name}.{d}")),
            );
        } else {
            out.push(format!("{name}: {a} -> {b}"));
        }
    }
    out
}
