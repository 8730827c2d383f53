//! `trainer profile`: pinned profiles (`profiles/`, `docs/contracts.md` "Pinned profiles").
//!
//! A profile is keyed by what determines it (`build_key`): the Rust release (`rustc -vV` without its
//! host line, `cargo -V`), the target, and the settings that change generated code (the cargo
//! profile, features, code-changing RUSTFLAGS). Link-only and remap flags, the build and vendor
//! directories and the toolchain provider are not part of it: the same release gives the same
//! function names and control-flow hashes whoever invokes cargo (docs/flake.md, "One profile set
//! per Rust release"). So both providers of one target read one profile.
//!
//! - `manifest` writes the manifest of a freshly trained profile: its key, digests of the
//!   sources, Cargo.lock and shapes it was trained from, the binaries it was trained on, counts.
//! - `verify` is what a pinned-profile stage runs before anything consumes the profile: the file
//!   is the one its manifest names (not corrupt), its key is this build's, and a BOLT profile
//!   applies to the PGO binary about to be optimized: llvm-bolt, reading it, found none of the
//!   functions it profiles stale or missing (`bolt_fit`).
//! - `check` is the freshness gate of the training checks: a fresh training's profile against the
//!   pinned one; writes a verdict that is a function of the pinned profile alone.
//! - `compare` prints how two profiles differ.
//! - `pin` is the refresh command's last step: a fresh profile stage's output copied into
//!   profiles/, its manifest recording the profile it replaced and their overlap.

use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

use crate::profiles::{self, Kind, Profile};

/// What the sources digest covers: the gateway crate, the workspace manifests and the patched
/// dependencies the gateway is built with (third_party/README.md), the same files in either
/// provider's filtered source.
pub const SOURCE_FILES: &[&str] = &[
    "Cargo.toml",
    "Cargo.lock",
    "gateway/Cargo.toml",
    "gateway/src",
    "third_party/hyper/Cargo.toml",
    "third_party/hyper/src",
];

#[derive(clap::Args, Debug)]
pub struct ProfileArgs {
    #[command(subcommand)]
    pub command: ProfileCommand,
}

#[derive(clap::Subcommand, Debug)]
pub enum ProfileCommand {
    /// Write the manifest of a freshly trained profile.
    Manifest(ManifestArgs),
    /// Check a pinned profile directory against this toolchain (and PGO binary); fail closed.
    Verify(VerifyArgs),
    /// The freshness gate: a fresh profile against the pinned one; writes the verdict.
    Check(CheckArgs),
    /// Print how TEST differs from BASE (overlap, changed functions, largest moves).
    Compare(CompareArgs),
    /// The PGO build's profile-use warnings against the profile it read: fail on a function
    /// the profile has counts for whose control flow changed.
    UseDiagnostics(UseDiagnosticsArgs),
    /// Copy a fresh profile into profiles/, recording the profile it replaces.
    Pin(PinArgs),
}

/// Where the key's codegen part comes from: a JSON object the pipeline writes
/// (`nix/pipeline.nix`, `codegenKey`), so that nothing here guesses which flags change code.
#[derive(clap::Args, Debug, Clone)]
pub struct KeyArgs {
    /// versions.json of the toolchain stage (Rust release, rustc, cargo, target, LLVM tools).
    #[arg(long)]
    pub versions: PathBuf,
    /// The codegen settings of the key: cargo profile, features, code-changing RUSTFLAGS (JSON).
    #[arg(long)]
    pub codegen: PathBuf,
}

#[derive(clap::Args, Debug)]
pub struct ManifestArgs {
    #[arg(long, value_enum)]
    pub kind: Kind,
    /// The profile file (gateway.proftext or gateway.fdata).
    #[arg(long)]
    pub profile: PathBuf,
    /// manifest.json of the `trainer train` run that produced it.
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
    /// The cargo workspace source the binaries were built from.
    #[arg(long)]
    pub source: PathBuf,
    /// The shapes directory trained.
    #[arg(long)]
    pub shapes: PathBuf,
    /// The instrumented binary the training ran.
    #[arg(long)]
    pub instrumented: PathBuf,
    /// BOLT: the PGO binary that was instrumented (the profile belongs to it).
    #[arg(long)]
    pub pgo_binary: Option<PathBuf>,
    #[arg(long)]
    pub out: PathBuf,
}

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
    /// optimized, with `-report-stale` (nix/stages/bolt-profile.nix).
    #[arg(long)]
    pub bolt_report: Option<PathBuf>,
    /// BOLT: `llvm-readelf -s -W` of that PGO binary.
    #[arg(long)]
    pub bolt_symbols: Option<PathBuf>,
    /// The command that refreshes the pinned profiles, named in every failure.
    #[arg(long)]
    pub refresh_command: String,
}

#[derive(clap::Args, Debug)]
pub struct CheckArgs {
    #[arg(long, value_enum)]
    pub kind: Kind,
    /// The pinned directory (as `verify` accepted it).
    #[arg(long)]
    pub pinned: PathBuf,
    /// The freshly trained profile in the pinned file's format.
    #[arg(long)]
    pub fresh: PathBuf,
    /// Least overlap, in percent, of the fresh profile with the pinned one, over the functions
    /// that count work (`profiles::counts_scheduling`'s left out).
    #[arg(long)]
    pub min_overlap: f64,
    #[arg(long)]
    pub refresh_command: String,
    /// Where to write the verdict (JSON; nothing in it depends on the fresh run).
    #[arg(long)]
    pub verdict: PathBuf,
    /// The fresh training's manifest: a stale verdict says how busy the machine was, since a
    /// busy machine's training moves the counts by itself.
    #[arg(long)]
    pub training: Option<PathBuf>,
}

#[derive(clap::Args, Debug)]
pub struct CompareArgs {
    #[arg(long, value_enum)]
    pub kind: Kind,
    pub base: PathBuf,
    pub test: PathBuf,
    /// How many functions each list shows.
    #[arg(long, default_value_t = 10)]
    pub top: usize,
    /// Also write the comparison as JSON.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

#[derive(clap::Args, Debug)]
pub struct UseDiagnosticsArgs {
    /// The LLVM profile the PGO build read, in text form (gateway.proftext).
    #[arg(long)]
    pub profile: PathBuf,
    /// The build's kept warnings (pgo-diagnostics.txt: "hash mismatch" and "no profile data
    /// available for function" lines).
    #[arg(long)]
    pub diagnostics: PathBuf,
    #[arg(long)]
    pub refresh_command: String,
}

#[derive(clap::Args, Debug)]
pub struct PinArgs {
    /// Output of gateway-profile-fresh or gateway-bolt-profile-fresh.
    #[arg(long)]
    pub fresh: PathBuf,
    /// The repository's profiles/ directory.
    #[arg(long)]
    pub profiles: PathBuf,
    /// Most CPU time, in percent of the machine, that other work may have used while the fresh
    /// profile trained (its manifest's `training.machine.other_cpu_pct`; `machine_load.rs` says
    /// why a busy machine's profile is refused).
    #[arg(long, default_value_t = DEFAULT_MAX_OTHER_CPU_PCT)]
    pub max_other_cpu_pct: f64,
}

/// Pin's default `--max-other-cpu-pct`, the threshold of a quiet machine.
pub const DEFAULT_MAX_OTHER_CPU_PCT: f64 = crate::machine_load::QUIET_MAX_OTHER_CPU_PCT;

pub fn run(args: ProfileArgs) -> Result<()> {
    match args.command {
        ProfileCommand::Manifest(a) => write_manifest(&a),
        ProfileCommand::Verify(a) => verify(&a).map(|_| ()),
        ProfileCommand::Check(a) => check(&a),
        ProfileCommand::Compare(a) => compare_cli(&a),
        ProfileCommand::UseDiagnostics(a) => use_diagnostics(&a),
        ProfileCommand::Pin(a) => pin(&a),
    }
}

/// The file a pinned directory holds for `kind`.
pub fn file_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Llvm => "gateway.proftext",
        Kind::Bolt => "gateway.fdata",
    }
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub fn sha256_file(path: &Path) -> Result<String> {
    let data = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(hex(&Sha256::digest(&data)))
}

/// Digest of the regular files under `root` named by `include` (files or directories, relative):
/// sha256 of `sha256sum`'s lines for them sorted by path, i.e. what
/// `find INCLUDE... -type f | LC_ALL=C sort | xargs sha256sum | sha256sum` prints in `root`.
pub fn tree_digest(root: &Path, include: &[&str]) -> Result<String> {
    fn walk(root: &Path, rel: &Path, out: &mut Vec<(String, PathBuf)>) -> Result<()> {
        let path = root.join(rel);
        let md = std::fs::metadata(&path).with_context(|| format!("reading {}", path.display()))?;
        if md.is_dir() {
            for e in std::fs::read_dir(&path)? {
                walk(root, &rel.join(e?.file_name()), out)?;
            }
        } else if md.is_file() {
            out.push((rel.to_string_lossy().into_owned(), path));
        }
        Ok(())
    }
    let mut files = Vec::new();
    for i in include {
        walk(root, Path::new(i), &mut files)?;
    }
    files.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    let mut lines = String::new();
    for (rel, path) in &files {
        lines.push_str(&format!("{}  {rel}\n", sha256_file(path)?));
    }
    Ok(hex(&Sha256::digest(lines.as_bytes())))
}

/// The names of the entries directly under `dir`, sorted.
fn all_entries(dir: &Path) -> Result<Vec<String>> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect::<std::io::Result<_>>()?;
    names.sort();
    Ok(names)
}

fn read_json(path: &Path, what: &str) -> Result<Value> {
    let data =
        std::fs::read(path).with_context(|| format!("reading the {what} {}", path.display()))?;
    serde_json::from_slice(&data)
        .with_context(|| format!("the {what} {} is not JSON", path.display()))
}

fn write_json(path: &Path, v: &Value) -> Result<()> {
    let text = serde_json::to_string_pretty(v)? + "\n";
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
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
    let versions = read_json(&k.versions, "toolchain versions")?;
    let codegen = read_json(&k.codegen, "codegen key")?;
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

/// Where the profiles of a key are pinned under profiles/: `<target>/rust-<release>/<kind>`.
pub fn pinned_subdir(kind: Kind, key: &Value) -> Result<PathBuf> {
    let target = str_at(key, &["target"]).filter(|t| !t.is_empty());
    let release = str_at(key, &["rust_release"]).filter(|r| !r.is_empty());
    match (target, release) {
        (Some(t), Some(r)) => Ok(Path::new(t).join(format!("rust-{r}")).join(kind.name())),
        _ => bail!("the profile key names no target or Rust release: {key}"),
    }
}

/// The fields in which two keys differ, each as `field: pinned -> this build`.
fn key_differences(pinned: &Value, this: &Value) -> Vec<String> {
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

fn write_manifest(a: &ManifestArgs) -> Result<()> {
    let profile = Profile::read(a.kind, &a.profile)?;
    let training = read_json(&a.training, "training manifest")?;
    let (key, versions) = build_key(&a.key)?;
    if training.get("profile_kind").and_then(Value::as_str) != Some(a.kind.name()) {
        bail!(
            "profile manifest: the training manifest is not of a {} training",
            a.kind.name()
        );
    }
    let shapes: Vec<Value> = training["shapes"]
        .as_array()
        .map(|s| s.iter().map(|s| s["name"].clone()).collect())
        .unwrap_or_default();
    let mut trained_on = json!({
        "source_sha256": tree_digest(&a.source, SOURCE_FILES)?,
        "cargo_lock_sha256": sha256_file(&a.source.join("Cargo.lock"))?,
        "shapes_sha256": tree_digest(&a.shapes, &all_entries(&a.shapes)?.iter().map(String::as_str).collect::<Vec<_>>())?,
        "instrumented_sha256": sha256_file(&a.instrumented)?,
    });
    match (a.kind, &a.pgo_binary) {
        (Kind::Bolt, Some(p)) => trained_on["pgo_binary_sha256"] = json!(sha256_file(p)?),
        (Kind::Bolt, None) => bail!("profile manifest: a BOLT profile needs --pgo-binary"),
        (Kind::Llvm, Some(_)) => bail!("profile manifest: --pgo-binary is for BOLT profiles"),
        (Kind::Llvm, None) => {}
    }
    let bytes = std::fs::metadata(&a.profile)?.len();
    let manifest = json!({
        "schema": MANIFEST_SCHEMA,
        "kind": a.kind.name(),
        "file": file_name(a.kind),
        "sha256": sha256_file(&a.profile)?,
        "bytes": bytes,
        "key": key,
        "system": a.system,
        "provider": a.provider,
        "toolchain": versions,
        "trained_on": trained_on,
        "training": {
            "shapes": shapes,
            "holdout": training["holdout"],
            "requests_checked": training["requests_checked"],
            "profile_files": training["profile_files"],
            "profile_bytes": training["profile_bytes"],
            "machine": training["machine"],
            "host": training["host"],
        },
        "counts": {
            "functions": profile.functions.len(),
            "functions_with_counts": profile.functions.values().filter(|f| f.total() > 0).count(),
            "total": profile.total(),
        },
    });
    write_json(&a.out, &manifest)
}

/// Schema of the manifests `manifest` writes: 2 keys a profile by `build_key`; 1 (by provider) is
/// refused, naming the refresh command.
const MANIFEST_SCHEMA: u64 = 2;

fn str_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    path.iter().try_fold(v, |v, k| v.get(*k))?.as_str()
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
    let m = read_json(&manifest_path, "pinned profile manifest").map_err(|e| {
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
    let file = a.dir.join(file_name(a.kind));
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
        let fit = bolt_fit(
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

/// Functions of a BOLT profile that may find no function in a PGO binary without making it
/// stale: the C runtime's and the compiler builtins' own code, which the link environment brings
/// (another crt or libgcc, or a linker that leaves them global instead of local) and the
/// gateway's source does not decide. Measured: GNU ld leaves `_init`, `_fini`, `__udivti3` and
/// `ceil` global where rust-lld makes them local (172 of 597.7M counts; docs/flake.md).
pub const BOLT_MAY_MISS: &[&str] = &[
    "_init",
    "_fini",
    "_start",
    "frame_dummy",
    "register_tm_clones",
    "deregister_tm_clones",
    "__do_global_dtors_aux",
    "__udivti3",
    "ceil",
];

/// How a BOLT profile fits a PGO binary: what llvm-bolt found stale reading it, and which of the
/// functions it profiles the binary lacks.
#[derive(Debug, Default)]
pub struct BoltFit {
    /// Profiled functions llvm-bolt found, whose recorded branches do not fit their code.
    pub stale: Vec<String>,
    /// Profiled functions without a symbol of that name and binding in the binary.
    pub missing: Vec<String>,
    /// Missing or stale, but of `BOLT_MAY_MISS`.
    pub allowed: Vec<String>,
    /// llvm-bolt's "N out of M functions ... have non-empty execution profile".
    pub profiled: Option<(u64, u64)>,
}

/// The first five of `names`, comma-separated, with ", ..." when there are more: how every
/// message of this module names the functions it is about.
fn first_names<S: AsRef<str>>(names: &[S]) -> String {
    let shown: Vec<&str> = names.iter().take(5).map(AsRef::as_ref).collect();
    let more = if names.len() > shown.len() {
        ", ..."
    } else {
        ""
    };
    format!("{}{more}", shown.join(", "))
}

impl BoltFit {
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some((n, m)) = self.profiled {
            parts.push(format!("llvm-bolt profiles {n} of {m} functions"));
        }
        if !self.stale.is_empty() {
            parts.push(format!(
                "{} profiled function(s) whose code changed (llvm-bolt: invalid, possibly stale profile): {}",
                self.stale.len(),
                first_names(&self.stale)
            ));
        }
        if !self.missing.is_empty() {
            parts.push(format!(
                "{} profiled function(s) this PGO binary lacks: {}",
                self.missing.len(),
                first_names(&self.missing)
            ));
        }
        if !self.allowed.is_empty() {
            parts.push(format!(
                "{} C runtime/builtin function(s) unmatched, allowed: {}",
                self.allowed.len(),
                first_names(&self.allowed)
            ));
        }
        if self.stale.is_empty() && self.missing.is_empty() {
            parts.push("no profiled function stale or missing".into());
        }
        parts.join("; ")
    }
}

/// BOLT's name of a function without its local-symbol suffix (`name/1`) and its
/// `-report-stale` fragment count (`(*2)`): the symbol's name, and whether BOLT saw it local.
fn bolt_symbol(name: &str) -> (&str, bool) {
    let name = name.split_once("(*").map_or(name, |(n, _)| n);
    match name.rsplit_once('/') {
        Some((base, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => (base, true),
        _ => (name, false),
    }
}

/// Check a BOLT profile against a PGO binary by its content: `report` is what
/// `llvm-bolt PGO -data=PROFILE -report-stale` printed, `symbols` what `llvm-readelf -s -W PGO`
/// printed. The profile fits when llvm-bolt found none of its functions stale and the binary has
/// every function it profiles (a local symbol for BOLT's `name/N`, a global one for `name`),
/// except the C runtime's of `BOLT_MAY_MISS`.
pub fn bolt_fit(profile: &Profile, report: &str, symbols: &str) -> Result<BoltFit> {
    let mut fit = BoltFit {
        profiled: crate::proof::bolt_function_counts(report),
        ..BoltFit::default()
    };
    if fit.profiled.is_none() {
        bail!("the llvm-bolt report has no \"N out of M functions ... have non-empty execution profile\" line: llvm-bolt did not read the profile");
    }
    let mut in_stale_list = false;
    for line in report.lines() {
        if line.contains("Functions with stale profile:") {
            in_stale_list = true;
            continue;
        }
        if in_stale_list {
            match line.strip_prefix("  ") {
                Some(name) if !name.trim().is_empty() => {
                    fit.stale.push(name.trim().to_owned());
                    continue;
                }
                _ => in_stale_list = false,
            }
        }
    }
    // The symbol table: `Num: Value Size Type Bind Vis Ndx Name`.
    let mut local = std::collections::HashSet::new();
    let mut global = std::collections::HashSet::new();
    for line in symbols.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 8 || !f[0].ends_with(':') || f[6] == "UND" {
            continue;
        }
        match f[4] {
            "LOCAL" => local.insert(f[7]),
            _ => global.insert(f[7]),
        };
    }
    if local.is_empty() && global.is_empty() {
        bail!("the symbol table of the PGO binary is empty: is it stripped?");
    }
    for name in profile.functions.keys() {
        let (base, is_local) = bolt_symbol(name);
        let found = if is_local {
            local.contains(base)
        } else {
            global.contains(base) || base.ends_with("@PLT")
        };
        if !found {
            fit.missing.push(name.clone());
        }
    }
    for list in [&mut fit.stale, &mut fit.missing] {
        let (allowed, kept): (Vec<String>, Vec<String>) = list
            .drain(..)
            .partition(|n| BOLT_MAY_MISS.contains(&bolt_symbol(n).0));
        *list = kept;
        fit.allowed.extend(allowed);
    }
    Ok(fit)
}

fn check(a: &CheckArgs) -> Result<()> {
    let kind = a.kind.name();
    let pinned_file = a.pinned.join(file_name(a.kind));
    let pinned = Profile::read(a.kind, &pinned_file)?;
    let fresh = Profile::read(a.kind, &a.fresh)?;
    let c = profiles::compare(&pinned, &fresh, 10);
    eprint!(
        "freshness check, pinned -> fresh: {}",
        profiles::describe(a.kind, &c, 10)
    );
    let mut stale = Vec::new();
    // A function whose code changed keeps the profile fresh while neither training ran it (a
    // cold function edited: LLVM optimizes it without a profile, as before the edit); one that
    // either training ran makes it stale, as does a new function that the fresh training ran.
    let hot = |name: &String| {
        [&pinned, &fresh]
            .iter()
            .any(|p| p.functions.get(name).is_some_and(|f| f.total() > 0))
    };
    let listed = |what: &str, names: &[&String]| {
        format!("{} function(s) {what}: {}", names.len(), first_names(names))
    };
    if a.kind == Kind::Llvm {
        let (changed_hot, changed_cold): (Vec<&String>, Vec<&String>) =
            c.changed.iter().partition(|n| hot(n));
        if !changed_cold.is_empty() {
            eprintln!(
                "freshness check: {} (allowed: neither training ran them)",
                listed("changed their control flow", &changed_cold)
            );
        }
        if !changed_hot.is_empty() {
            stale.push(listed(
                "that training runs changed their control flow since the pinned profile was trained (hash mismatch)",
                &changed_hot,
            ));
        }
    }
    let new_hot: Vec<&String> = c.only_test.iter().map(|m| &m.function).collect();
    if !new_hot.is_empty() && a.kind == Kind::Llvm {
        stale.push(listed(
            "that the pinned profile does not know ran in the fresh training",
            &new_hot,
        ));
    }
    let overlap_only = stale.is_empty();
    if c.work_overlap_pct.is_nan() || c.work_overlap_pct < a.min_overlap {
        stale.push(format!(
            "a fresh training overlaps the pinned profile by {:.3}% in the functions that count work ({:.3}% in all, the runtime's scheduling included), less than the {:.3}% that training noise and machines explain",
            c.work_overlap_pct, c.overlap_pct, a.min_overlap
        ));
    }
    if !stale.is_empty() {
        let mut message = format!(
            "the pinned {kind} profile is stale: {}; refresh it with `{}` and commit profiles/",
            stale.join("; "),
            a.refresh_command,
        );
        if overlap_only {
            message.push_str(&machines_compared(&a.pinned, a.training.as_deref()));
        }
        match busy_share(a.training.as_deref()) {
            Some(o) if o > DEFAULT_MAX_OTHER_CPU_PCT => bail!(BusyTraining(format!(
                "{message} (but this training ran while other work used {o:.1}% of the machine's CPU, more than the {DEFAULT_MAX_OTHER_CPU_PCT}% a refresh allows: a busy machine moves the counts by itself, so train again on a quiet one before refreshing)"
            ))),
            _ => bail!(message),
        }
    }
    let verdict = json!({
        "schema": 1,
        "kind": kind,
        "pinned_sha256": sha256_file(&pinned_file)?,
        "min_overlap_pct": a.min_overlap,
        "changed_functions_allowed": if a.kind == Kind::Llvm { json!("cold only") } else { Value::Null },
        "verdict": "fresh",
    });
    write_json(&a.verdict, &verdict)?;
    eprintln!("freshness check passed: the pinned {kind} profile agrees with a fresh training");
    Ok(())
}

/// A stale verdict of a training that ran beside other work: its counts may have moved with the
/// load, not with the code, so the training check trains again once the machine is quieter
/// (nix/stages/training-check.nix) instead of failing; `trainer` exits with status 3 for it.
#[derive(Debug)]
pub struct BusyTraining(pub String);

impl std::fmt::Display for BusyTraining {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BusyTraining {}

/// For a stale verdict that only the overlap gives (no function changed): where the pinned
/// profile and this training ran, since machines of one kind can differ by more than the
/// threshold (nix/README.md, Thresholds).
fn machines_compared(pinned: &Path, training: Option<&Path>) -> String {
    let pinned = read_json(&pinned.join("manifest.json"), "pinned manifest")
        .map(|m| m["training"].clone())
        .unwrap_or(Value::Null);
    let fresh = training
        .and_then(|t| read_json(t, "training manifest").ok())
        .unwrap_or(Value::Null);
    format!(
        " (no function changed: the pinned profile's training took {}, this one {}; when the machines differ, that is the likely cause, and pinning again where this check runs is the refresh)",
        trained_where(&pinned),
        trained_where(&fresh)
    )
}

/// "21.8 s on AMD EPYC (kernel 6.1.0, clock tsc)" of a training record (`machine`, `host`).
fn trained_where(t: &Value) -> String {
    let part = |k: &str| t["host"][k].as_str().unwrap_or("unknown").to_owned();
    let seconds = t["machine"]["seconds"]
        .as_f64()
        .map_or("? s".to_owned(), |s| format!("{s:.1} s"));
    format!(
        "{seconds} on {} (kernel {}, clock {})",
        part("cpu_model"),
        part("kernel"),
        part("clocksource")
    )
}

/// The share of the machine's CPU other work used while the training of `training` (its
/// manifest) ran.
fn busy_share(training: Option<&Path>) -> Option<f64> {
    training
        .and_then(|t| read_json(t, "training manifest").ok())
        .and_then(|m| m["machine"]["other_cpu_pct"].as_f64())
}

/// The function-coverage report of a fresh LLVM profile (`trainer profile-coverage`, written by
/// nix/stages/fresh-profile.nix), pinned beside the profile.
const COVERAGE_REPORTS: [&str; 2] = ["function-coverage.json", "function-coverage.txt"];

fn pin(a: &PinArgs) -> Result<()> {
    let mut m = read_json(&a.fresh.join("manifest.json"), "fresh profile manifest")?;
    let kind = match str_at(&m, &["kind"]) {
        Some("llvm") => Kind::Llvm,
        Some("bolt") => Kind::Bolt,
        other => bail!(
            "pin: {}/manifest.json names no profile kind ({other:?})",
            a.fresh.display()
        ),
    };
    match m["training"]["machine"]["other_cpu_pct"].as_f64() {
        Some(o) if o <= a.max_other_cpu_pct => {}
        Some(o) => bail!(
            "pin: the fresh {} profile was trained while other work used {o:.1}% of the machine's CPU, more than --max-other-cpu-pct {}: its counts moved with the load (a profile pinned from a busy machine fails the next quiet freshness check); refresh again with nothing else running",
            kind.name(),
            a.max_other_cpu_pct
        ),
        None => bail!(
            "pin: {}/manifest.json does not say how busy the machine was while it trained (training.machine.other_cpu_pct): train it again with this trainer",
            a.fresh.display()
        ),
    }
    let file = file_name(kind);
    let fresh_file = a.fresh.join(file);
    if sha256_file(&fresh_file)? != str_at(&m, &["sha256"]).unwrap_or("") {
        bail!("pin: {} does not match its manifest", fresh_file.display());
    }
    let dir = a
        .profiles
        .join(pinned_subdir(kind, &m["key"]).context("pin: the fresh manifest")?);
    let old = dir.join(file);
    let previous = if old.is_file() {
        let before = Profile::read(kind, &old)?;
        let after = Profile::read(kind, &fresh_file)?;
        let c = profiles::compare(&before, &after, 10);
        println!(
            "== {} profile {}: the fresh training against the pinned profile it replaces",
            kind.name(),
            dir.display()
        );
        print!("{}", profiles::describe(kind, &c, 10));
        let pct = |x: f64| (x * 1000.0).round() / 1000.0;
        json!({
            "sha256": sha256_file(&old)?,
            "overlap_pct": pct(c.overlap_pct),
            "work_overlap_pct": pct(c.work_overlap_pct),
        })
    } else {
        println!(
            "== {} profile {}: no pinned profile before this one",
            kind.name(),
            dir.display()
        );
        json!({ "sha256": null, "overlap_pct": null, "work_overlap_pct": null })
    };
    m["previous"] = previous;
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let staged = dir.join(format!("{file}.new"));
    std::fs::copy(&fresh_file, &staged)?;
    // The store's copy is read-only; the repository's is an ordinary file.
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(0o644))?;
    }
    std::fs::rename(&staged, &old)?;
    write_json(&dir.join("manifest.json"), &m)?;
    // The function coverage the fresh-profile stage wrote beside an LLVM profile is pinned with
    // it; a report of the profile it replaces must not stay behind.
    for report in COVERAGE_REPORTS {
        let (from, to) = (a.fresh.join(report), dir.join(report));
        if from.is_file() {
            std::fs::write(&to, std::fs::read(&from)?)
                .with_context(|| format!("writing {}", to.display()))?;
        } else if to.is_file() {
            std::fs::remove_file(&to)?;
        }
    }
    println!(
        "pinned {} ({} bytes, sha256 {}) trained on sources {}",
        old.display(),
        m["bytes"],
        str_at(&m, &["sha256"]).unwrap_or(""),
        str_at(&m, &["trained_on", "source_sha256"]).unwrap_or("")
    );
    Ok(())
}

/// What LLVM said of one function while the PGO build read the profile.
#[derive(Debug, PartialEq)]
enum UseWarning<'a> {
    /// "function control flow change detected (hash mismatch) NAME Hash = N"
    Mismatch(&'a str),
    /// "no profile data available for function NAME"
    Unprofiled(&'a str),
}

fn use_warning(line: &str) -> Option<UseWarning<'_>> {
    if let Some((_, rest)) = line.split_once("(hash mismatch) ") {
        let name = rest.split_once(" Hash = ").map_or(rest, |(n, _)| n);
        return Some(UseWarning::Mismatch(name.trim()));
    }
    let (_, rest) = line.split_once("no profile data available for function ")?;
    Some(UseWarning::Unprofiled(
        rest.split_whitespace().next().unwrap_or(""),
    ))
}

/// The PGO stage's verdict on LLVM's profile-use warnings (nix/stages/pgo.nix). A function whose
/// control flow changed is stale only when the profile has counts for it: one that training never
/// ran (a cold function edited) is optimized without a profile, as it was with one. A function the
/// profile does not know (a new one) is left to the LLVM training check, which fails when a fresh
/// training runs it. The profile names a local function `file;name`, LLVM's warning `name`.
fn use_diagnostics(a: &UseDiagnosticsArgs) -> Result<()> {
    let profile = Profile::read(Kind::Llvm, &a.profile)?;
    let text = std::fs::read_to_string(&a.diagnostics)
        .with_context(|| format!("reading {}", a.diagnostics.display()))?;
    let mut counts: std::collections::HashMap<&str, u64> = std::collections::HashMap::new();
    for (name, f) in &profile.functions {
        let bare = name.rsplit_once(';').map_or(name.as_str(), |(_, n)| n);
        *counts.entry(bare).or_default() += f.total();
    }
    let (mut hot, mut cold, mut unprofiled) = (Vec::new(), Vec::new(), Vec::new());
    for warning in text.lines().filter_map(use_warning) {
        match warning {
            UseWarning::Mismatch(n) if counts.get(n).copied().unwrap_or(0) > 0 => hot.push(n),
            UseWarning::Mismatch(n) => cold.push(n),
            UseWarning::Unprofiled(n) => unprofiled.push(n),
        }
    }
    eprintln!(
        "profile-use diagnostics: {} hash mismatch(es) of functions the profile has counts for, {} of functions it has none for (allowed: never trained), {} function(s) without profile data (new: the training check fails if training runs them)",
        hot.len(),
        cold.len(),
        unprofiled.len()
    );
    for (what, v) in [
        ("cold, changed", &cold),
        ("without profile data", &unprofiled),
    ] {
        if !v.is_empty() {
            eprintln!("  {what}: {}", first_names(v));
        }
    }
    if !hot.is_empty() {
        bail!(
            "the LLVM profile is stale: {} function(s) it has counts for changed their control flow since training (hash mismatch): {}; refresh it with `{}` and commit profiles/",
            hot.len(),
            first_names(&hot),
            a.refresh_command
        );
    }
    Ok(())
}

fn compare_cli(a: &CompareArgs) -> Result<()> {
    let base = Profile::read(a.kind, &a.base)?;
    let test = Profile::read(a.kind, &a.test)?;
    let c = profiles::compare(&base, &test, a.top);
    print!("{}", profiles::describe(a.kind, &c, a.top));
    if let Some(p) = &a.json {
        write_json(p, &serde_json::to_value(&c)?)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROFILE: &str = "f\n# Func Hash:\n1\n# Num Counters:\n2\n# Counter Values:\n30\n10\n";

    /// versions.json as a provider's `versions` stage writes it.
    fn versions(provider: &str, rustc: &str, profdata: &str) -> Value {
        json!({
            "rust_release": "1.95.0", "rustc": rustc, "rustc_commit_hash": "59807616e1",
            "rustc_llvm": "22.1.2", "cargo": "cargo 1.95.0 (f2d3ce0bd 2026-03-21)",
            "target": "x86_64-unknown-linux-gnu", "llvm_profdata": profdata, "llvm_bolt": "22.1.8",
            "provider": provider,
        })
    }

    /// A pinned LLVM directory as `pin` writes it, a versions.json of the same toolchain and the
    /// codegen key it was trained with: (dir, key args).
    fn pinned_llvm(name: &str) -> (PathBuf, KeyArgs) {
        let d = std::env::temp_dir().join(format!("pinned-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("llvm")).unwrap();
        std::fs::write(d.join("llvm/gateway.proftext"), PROFILE).unwrap();
        let k = KeyArgs {
            versions: d.join("versions.json"),
            codegen: d.join("codegen.json"),
        };
        write_json(&k.versions, &versions("p", "rustc 1.95.0 (x)", "22.1.8")).unwrap();
        write_json(
            &k.codegen,
            &json!({ "cargo_profile": "release", "features": [] }),
        )
        .unwrap();
        let manifest = json!({
            "schema": MANIFEST_SCHEMA, "kind": "llvm", "system": "x86_64-linux", "provider": "p",
            "key": build_key(&k).unwrap().0,
            "toolchain": versions("p", "rustc 1.95.0 (x)", "22.1.8"),
            "sha256": hex(&Sha256::digest(PROFILE.as_bytes())),
        });
        write_json(&d.join("llvm/manifest.json"), &manifest).unwrap();
        (d.join("llvm"), k)
    }

    fn verify_llvm(dir: &Path, key: &KeyArgs) -> Result<Value> {
        verify(&VerifyArgs {
            kind: Kind::Llvm,
            dir: dir.to_owned(),
            key: key.clone(),
            bolt_report: None,
            bolt_symbols: None,
            refresh_command: "refresh-it".into(),
        })
    }

    #[test]
    fn verify_refuses_corrupt_and_foreign_profiles() {
        let (dir, key) = pinned_llvm("verify");
        verify_llvm(&dir, &key).unwrap();
        let err = |dir: &Path| verify_llvm(dir, &key).unwrap_err().to_string();
        let with = |rustc: &str, profdata: &str, provider: &str| {
            write_json(&key.versions, &versions(provider, rustc, profdata)).unwrap();
        };
        // Another provider of the same key is fine: the key has no provider.
        with("rustc 1.95.0 (x)", "22.1.8", "q");
        verify_llvm(&dir, &key).unwrap();
        // Another rustc, another LLVM major; another minor is fine.
        with("rustc 1.96.0 (y)", "22.1.8", "p");
        let e = err(&dir);
        assert!(
            e.contains("another key")
                && e.contains("rustc: \"rustc 1.95.0 (x)\" -> \"rustc 1.96.0 (y)\"")
                && e.contains("refresh-it"),
            "{e}"
        );
        with("rustc 1.95.0 (x)", "23.1.0", "p");
        assert!(err(&dir).contains("another major"));
        with("rustc 1.95.0 (x)", "22.1.2", "p");
        verify_llvm(&dir, &key).unwrap();
        // Other codegen settings: another key, naming the setting.
        write_json(
            &key.codegen,
            &json!({ "cargo_profile": "release", "features": ["mimalloc"] }),
        )
        .unwrap();
        let e = err(&dir);
        assert!(e.contains("codegen.features"), "{e}");
        write_json(
            &key.codegen,
            &json!({ "cargo_profile": "release", "features": [] }),
        )
        .unwrap();
        // A manifest of the provider-keyed schema 1: refused, naming the refresh command.
        let mut m = read_json(&dir.join("manifest.json"), "m").unwrap();
        m["schema"] = json!(1);
        write_json(&dir.join("manifest.json"), &m).unwrap();
        let e = err(&dir);
        assert!(e.contains("schema 1") && e.contains("refresh-it"), "{e}");
        m["schema"] = json!(MANIFEST_SCHEMA);
        write_json(&dir.join("manifest.json"), &m).unwrap();
        // Corrupt: one counter changed, then a file whose sha256 matches but does not parse.
        std::fs::write(dir.join("gateway.proftext"), PROFILE.replace("30", "31")).unwrap();
        let e = err(&dir);
        assert!(
            e.contains("is corrupt") && e.contains("its manifest records"),
            "{e}"
        );
        let garbage = "not a profile\n";
        std::fs::write(dir.join("gateway.proftext"), garbage).unwrap();
        let mut m = read_json(&dir.join("manifest.json"), "m").unwrap();
        m["sha256"] = json!(hex(&Sha256::digest(garbage.as_bytes())));
        write_json(&dir.join("manifest.json"), &m).unwrap();
        assert!(err(&dir).contains("is corrupt"));
        // Missing.
        assert!(err(&dir.join("nothing")).contains("no pinned llvm profile"));
        let _ = std::fs::remove_dir_all(dir.parent().unwrap());
    }

    #[test]
    fn check_writes_a_verdict_of_the_pinned_profile_only() {
        let (dir, _) = pinned_llvm("check");
        let fresh = dir.join("fresh.proftext");
        let verdict = dir.join("verdict.json");
        let run = |fresh_text: &str, min: f64| {
            std::fs::write(&fresh, fresh_text).unwrap();
            check(&CheckArgs {
                kind: Kind::Llvm,
                pinned: dir.clone(),
                fresh: fresh.clone(),
                min_overlap: min,
                refresh_command: "refresh-it".into(),
                verdict: verdict.clone(),
                training: Some(dir.join("training.json")),
            })
        };
        write_json(
            &dir.join("training.json"),
            &json!({
                "machine": { "other_cpu_pct": 1.5, "seconds": 14.1 },
                "host": { "cpu_model": "Test CPU", "kernel": "6.1", "clocksource": null }
            }),
        )
        .unwrap();
        // Counts a little different: fresh, and the verdict does not depend on them.
        run(&PROFILE.replace("\n10\n", "\n11\n"), 95.0).unwrap();
        // A function that neither training ran changed (a cold edit), or a new one neither ran:
        // still fresh.
        let cold = "\nc\n# Func Hash:\n5\n# Num Counters:\n1\n# Counter Values:\n0\n";
        std::fs::write(dir.join("gateway.proftext"), format!("{PROFILE}{cold}")).unwrap();
        run(
            &format!("{PROFILE}{}", cold.replace("Hash:\n5", "Hash:\n6")),
            95.0,
        )
        .unwrap();
        run(
            &format!(
                "{PROFILE}{cold}\nd\n# Func Hash:\n1\n# Num Counters:\n1\n# Counter Values:\n0\n"
            ),
            95.0,
        )
        .unwrap();
        // A new function the fresh training ran: stale.
        let e = run(
            &format!(
                "{PROFILE}{cold}\nd\n# Func Hash:\n1\n# Num Counters:\n1\n# Counter Values:\n1\n"
            ),
            0.0,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("does not know ran in the fresh training: d"),
            "{e}"
        );
        std::fs::write(dir.join("gateway.proftext"), PROFILE).unwrap();
        run(&PROFILE.replace("\n10\n", "\n11\n"), 95.0).unwrap();
        let first = std::fs::read(&verdict).unwrap();
        run(&PROFILE.replace("\n10\n", "\n12\n"), 95.0).unwrap();
        assert_eq!(first, std::fs::read(&verdict).unwrap());
        // Too little overlap, or a changed hash: stale, naming the refresh command.
        let e = run(&PROFILE.replace("\n30\n10\n", "\n1\n90\n"), 95.0)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("is stale") && e.contains("overlaps") && e.contains("refresh-it"),
            "{e}"
        );
        assert!(!e.contains("other work"), "{e}");
        // Only the overlap: the verdict says where each training ran.
        assert!(
            e.contains("no function changed")
                && e.contains("this one 14.1 s on Test CPU (kernel 6.1, clock unknown)"),
            "{e}"
        );
        let quiet = run(&PROFILE.replace("\n30\n10\n", "\n1\n90\n"), 95.0).unwrap_err();
        assert!(!quiet.is::<BusyTraining>(), "{quiet}");
        // A stale verdict of a training beside other work says so.
        write_json(
            &dir.join("training.json"),
            &json!({ "machine": { "other_cpu_pct": 35.0 } }),
        )
        .unwrap();
        let e = run(&PROFILE.replace("\n30\n10\n", "\n1\n90\n"), 95.0)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("is stale") && e.contains("other work used 35.0%"),
            "{e}"
        );
        let busy = run(&PROFILE.replace("\n30\n10\n", "\n1\n90\n"), 95.0).unwrap_err();
        assert!(busy.is::<BusyTraining>(), "{busy}");
        let e = run(&PROFILE.replace("Hash:\n1\n", "Hash:\n2\n"), 0.0)
            .unwrap_err()
            .to_string();
        assert!(e.contains("(hash mismatch): f"), "{e}");
        assert!(!e.contains("no function changed"), "{e}");
        let _ = std::fs::remove_dir_all(dir.parent().unwrap());
    }

    #[test]
    fn pin_carries_the_function_coverage_and_drops_a_stale_one() {
        // A fresh directory as nix/stages/fresh-profile.nix writes it.
        let (fresh, _) = pinned_llvm("pin-fresh");
        std::fs::write(fresh.join("function-coverage.json"), "{}").unwrap();
        std::fs::write(fresh.join("function-coverage.txt"), "profile coverage: x\n").unwrap();
        let profiles = fresh.parent().unwrap().join("profiles");
        let pin_with = |other: Value, max: f64| {
            let path = fresh.join("manifest.json");
            let mut m = read_json(&path, "m").unwrap();
            m["training"] = json!({ "machine": { "other_cpu_pct": other } });
            write_json(&path, &m).unwrap();
            pin(&PinArgs {
                fresh: fresh.clone(),
                profiles: profiles.clone(),
                max_other_cpu_pct: max,
            })
        };
        // Trained beside other work, or without the figure: refused, nothing written.
        let e = pin_with(json!(35.0), DEFAULT_MAX_OTHER_CPU_PCT)
            .unwrap_err()
            .to_string();
        assert!(e.contains("other work used 35.0%"), "{e}");
        let e = pin_with(Value::Null, DEFAULT_MAX_OTHER_CPU_PCT)
            .unwrap_err()
            .to_string();
        assert!(e.contains("does not say how busy"), "{e}");
        assert!(!profiles.exists());
        pin_with(json!(1.5), DEFAULT_MAX_OTHER_CPU_PCT).unwrap();
        let dir = profiles.join("x86_64-unknown-linux-gnu/rust-1.95.0/llvm");
        assert_eq!(
            std::fs::read_to_string(dir.join("function-coverage.txt")).unwrap(),
            "profile coverage: x\n"
        );
        assert!(dir.join("function-coverage.json").is_file());
        // A fresh profile without a report (as a BOLT one) leaves none of the replaced one's.
        std::fs::remove_file(fresh.join("function-coverage.json")).unwrap();
        std::fs::remove_file(fresh.join("function-coverage.txt")).unwrap();
        pin_with(json!(30.0), 50.0).unwrap();
        assert!(!dir.join("function-coverage.json").exists());
        assert!(!dir.join("function-coverage.txt").exists());
        assert!(dir.join("gateway.proftext").is_file());
        let _ = std::fs::remove_dir_all(fresh.parent().unwrap());
    }

    /// What llvm-bolt prints reading a profile with `-report-stale`, and `llvm-readelf -s -W`.
    const BOLT_REPORT: &str = "BOLT-INFO: Functions with stale profile:\n  g/1(*2)\nBOLT-INFO: 3 out of 40 functions in the binary (7.5%) have non-empty execution profile\nBOLT-INFO: profile for 1 objects was ignored\n";
    const SYMBOLS: &str = "Symbol table '.symtab' contains 5 entries:\n   Num:    Value          Size Type    Bind   Vis       Ndx Name\n     1: 0000000000001000    10 FUNC    LOCAL  DEFAULT    14 f\n     2: 0000000000001010    10 FUNC    LOCAL  DEFAULT    14 g\n     3: 0000000000001020    10 FUNC    GLOBAL DEFAULT    14 main\n     4: 0000000000001030    10 FUNC    GLOBAL DEFAULT    14 _init\n     5: 0000000000000000     0 FUNC    GLOBAL DEFAULT   UND h\n";

    #[test]
    fn bolt_fit_names_stale_and_missing_functions_but_not_the_c_runtime() {
        let fdata = |names: &[&str]| {
            let text: String = names
                .iter()
                .map(|n| format!("1 {n} 0 1 {n} 4 0 10\n"))
                .collect();
            profiles::parse_fdata(&text).unwrap()
        };
        // All found, none stale (the report's stale list aside).
        let clean = BOLT_REPORT.replace("  g/1(*2)\n", "");
        let fit = bolt_fit(&fdata(&["f/1", "main", "puts@PLT"]), &clean, SYMBOLS).unwrap();
        assert!(fit.stale.is_empty() && fit.missing.is_empty(), "{fit:?}");
        assert_eq!(fit.profiled, Some((3, 40)));
        // g's code changed: stale. h is undefined here, k absent, f is local not global.
        let fit = bolt_fit(&fdata(&["f", "g/1", "h", "k/1"]), BOLT_REPORT, SYMBOLS).unwrap();
        assert_eq!(fit.stale, ["g/1(*2)"]);
        assert_eq!(fit.missing, ["f", "h", "k/1"]);
        assert!(fit.describe().contains("whose code changed"));
        // The C runtime's functions may be missing or local-vs-global: allowed, and named.
        let fit = bolt_fit(&fdata(&["_init/1", "_fini/1", "ceil"]), &clean, SYMBOLS).unwrap();
        assert!(fit.missing.is_empty(), "{fit:?}");
        assert_eq!(fit.allowed, ["_fini/1", "_init/1", "ceil"]);
        // A report without the profile line: llvm-bolt did not read the profile.
        assert!(bolt_fit(&fdata(&["f/1"]), "BOLT-ERROR: x", SYMBOLS).is_err());
    }

    #[test]
    fn use_diagnostics_fail_on_a_changed_hot_function_only() {
        let d = std::env::temp_dir().join(format!("use-diag-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let profile = d.join("gateway.proftext");
        std::fs::write(
            &profile,
            format!("{PROFILE}\ngateway.abc-cgu.0;cold\n# Func Hash:\n3\n# Num Counters:\n1\n# Counter Values:\n0\n"),
        )
        .unwrap();
        let run = |lines: &str| {
            std::fs::write(d.join("diag.txt"), lines).unwrap();
            use_diagnostics(&UseDiagnosticsArgs {
                profile: profile.clone(),
                diagnostics: d.join("diag.txt"),
                refresh_command: "refresh-it".into(),
            })
        };
        run("").unwrap();
        run("warning: gateway.abc-cgu.0: function control flow change detected (hash mismatch) cold Hash = 9\n").unwrap();
        run("warning: x: no profile data available for function new_one\n").unwrap();
        let e = run("warning: gateway.abc-cgu.0: function control flow change detected (hash mismatch) f Hash = 9\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("(hash mismatch): f") && e.contains("refresh-it"),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn tree_digest_is_sha256sum_of_sorted_listing() {
        let d = std::env::temp_dir().join(format!("tree-digest-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("src/b")).unwrap();
        std::fs::write(d.join("Cargo.toml"), "x").unwrap();
        std::fs::write(d.join("src/b/z.rs"), "z").unwrap();
        std::fs::write(d.join("src/a.rs"), "a").unwrap();
        let got = tree_digest(&d, &["Cargo.toml", "src"]).unwrap();
        let sum = |s: &str| hex(&Sha256::digest(s.as_bytes()));
        let listing = format!(
            "{}  Cargo.toml\n{}  src/a.rs\n{}  src/b/z.rs\n",
            sum("x"),
            sum("a"),
            sum("z")
        );
        assert_eq!(got, sum(&listing));
        std::fs::remove_dir_all(&d).unwrap();
    }
}
