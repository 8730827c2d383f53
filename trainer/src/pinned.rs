//! `trainer profile`: pinned profiles (`profiles/`, `docs/contracts.md` "Pinned profiles").
//!
//! - `manifest` writes the manifest of a freshly trained profile: the toolchain, digests of the
//!   sources, Cargo.lock and shapes it was trained from, the binary it was trained on, counts.
//! - `verify` is what a pinned-profile stage runs before anything consumes the profile: the file
//!   is the one its manifest names (not corrupt), for this system and toolchain, and a BOLT profile
//!   belongs to the PGO binary about to be optimized.
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
    /// Copy a fresh profile into profiles/, recording the profile it replaces.
    Pin(PinArgs),
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
    /// versions.json of the toolchain stage.
    #[arg(long)]
    pub versions: PathBuf,
    /// Nix system the profile was trained on (x86_64-linux).
    #[arg(long)]
    pub system: String,
    /// Toolchain provider (offline-debian, nixpkgs-fenix).
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
    #[arg(long)]
    pub versions: PathBuf,
    #[arg(long)]
    pub system: String,
    /// BOLT: the PGO binary about to be optimized.
    #[arg(long)]
    pub pgo_binary: Option<PathBuf>,
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
    /// Least overlap, in percent, of the fresh profile with the pinned one.
    #[arg(long)]
    pub min_overlap: f64,
    #[arg(long)]
    pub refresh_command: String,
    /// Where to write the verdict (JSON; nothing in it depends on the fresh run).
    #[arg(long)]
    pub verdict: PathBuf,
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
pub struct PinArgs {
    /// Output of gateway-profile-fresh or gateway-bolt-profile-fresh.
    #[arg(long)]
    pub fresh: PathBuf,
    /// The repository's profiles/ directory.
    #[arg(long)]
    pub profiles: PathBuf,
}

pub fn run(args: ProfileArgs) -> Result<()> {
    match args.command {
        ProfileCommand::Manifest(a) => write_manifest(&a),
        ProfileCommand::Verify(a) => verify(&a).map(|_| ()),
        ProfileCommand::Check(a) => check(&a),
        ProfileCommand::Compare(a) => compare_cli(&a),
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

fn write_manifest(a: &ManifestArgs) -> Result<()> {
    let profile = Profile::read(a.kind, &a.profile)?;
    let training = read_json(&a.training, "training manifest")?;
    let versions = read_json(&a.versions, "toolchain versions")?;
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
        "schema": 1,
        "kind": a.kind.name(),
        "file": file_name(a.kind),
        "sha256": sha256_file(&a.profile)?,
        "bytes": bytes,
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
        },
        "counts": {
            "functions": profile.functions.len(),
            "functions_with_counts": profile.functions.values().filter(|f| f.total() > 0).count(),
            "total": profile.total(),
        },
    });
    write_json(&a.out, &manifest)
}

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
            "no pinned {kind} profile at {} (for {}): create it with `{refresh}`",
            a.dir.display(),
            a.system
        );
    }
    let m = read_json(&manifest_path, "pinned profile manifest").map_err(|e| {
        anyhow!("the pinned {kind} profile is corrupt: {e:#}; rewrite it with `{refresh}`")
    })?;
    let corrupt = |why: String| {
        anyhow!("the pinned {kind} profile is corrupt: {why}; rewrite it with `{refresh}`")
    };
    if m.get("schema").and_then(Value::as_u64) != Some(1) || str_at(&m, &["kind"]) != Some(kind) {
        return Err(corrupt(format!(
            "{} is not a schema-1 {kind} manifest",
            manifest_path.display()
        )));
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
    let system = str_at(&m, &["system"]).unwrap_or("");
    if system != a.system {
        bail!(
            "the pinned {kind} profile was trained on {system}, this build is for {}: create one for {} with `{refresh}`",
            a.system,
            a.system
        );
    }
    let versions = read_json(&a.versions, "toolchain versions")?;
    let tool = match a.kind {
        Kind::Llvm => "llvm_profdata",
        Kind::Bolt => "llvm_bolt",
    };
    let pinned_rustc = str_at(&m, &["toolchain", "rustc"]).unwrap_or("");
    let rustc = str_at(&versions, &["rustc"]).unwrap_or("");
    let pinned_tool = str_at(&m, &["toolchain", tool]);
    let this_tool = str_at(&versions, &[tool]);
    let (pinned_provider, provider) = (
        str_at(&m, &["provider"]).unwrap_or(""),
        str_at(&versions, &["provider"]).unwrap_or(""),
    );
    if pinned_provider != provider {
        bail!(
            "the pinned {kind} profile belongs to the binaries of provider {pinned_provider:?}, this build's provider is {provider:?}: create one for it with `{refresh}`"
        );
    }
    if pinned_rustc != rustc || major(pinned_tool) != major(this_tool) {
        bail!(
            "the pinned {kind} profile was trained with another toolchain ({pinned_rustc}, {tool} {}) than this build's ({rustc}, {tool} {}): refresh it with `{refresh}`",
            pinned_tool.unwrap_or("?"),
            this_tool.unwrap_or("?")
        );
    }
    if a.kind == Kind::Bolt {
        let pgo = a
            .pgo_binary
            .as_ref()
            .context("verify: a BOLT profile is verified against --pgo-binary")?;
        let belongs = str_at(&m, &["trained_on", "pgo_binary_sha256"]).unwrap_or("");
        let this = sha256_file(pgo)?;
        if belongs != this {
            bail!(
                "the pinned BOLT profile is stale: it belongs to the PGO binary with sha256 {belongs}, this build's PGO binary {} has sha256 {this}: refresh it with `{refresh}`",
                pgo.display()
            );
        }
    }
    Profile::read(a.kind, &file).map_err(|e| corrupt(format!("{e:#}")))?;
    eprintln!(
        "pinned {kind} profile {} verified: sha256 {got}, {system}, {rustc}{}",
        file.display(),
        if a.kind == Kind::Bolt {
            ", belongs to this PGO binary"
        } else {
            ""
        }
    );
    Ok(m)
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
    if a.kind == Kind::Llvm && !c.changed.is_empty() {
        let names: Vec<&str> = c.changed.iter().take(5).map(String::as_str).collect();
        stale.push(format!(
            "{} function(s) changed their control flow since the pinned profile was trained (hash mismatch: {}{})",
            c.changed.len(),
            names.join(", "),
            if c.changed.len() > names.len() { ", ..." } else { "" }
        ));
    }
    if c.overlap_pct.is_nan() || c.overlap_pct < a.min_overlap {
        stale.push(format!(
            "a fresh training overlaps the pinned profile by {:.3}%, less than the {:.3}% that training noise explains",
            c.overlap_pct, a.min_overlap
        ));
    }
    if !stale.is_empty() {
        bail!(
            "the pinned {kind} profile is stale: {}; refresh it with `{}` and commit profiles/",
            stale.join("; "),
            a.refresh_command
        );
    }
    let verdict = json!({
        "schema": 1,
        "kind": kind,
        "pinned_sha256": sha256_file(&pinned_file)?,
        "min_overlap_pct": a.min_overlap,
        "changed_functions_allowed": if a.kind == Kind::Llvm { json!(0) } else { Value::Null },
        "verdict": "fresh",
    });
    write_json(&a.verdict, &verdict)?;
    eprintln!("freshness check passed: the pinned {kind} profile agrees with a fresh training");
    Ok(())
}

/// The function-coverage report of a fresh LLVM profile (`trainer profile-coverage`, written by
/// nix/stages/fresh-profile.nix), pinned beside the profile.
const COVERAGE_REPORTS: [&str; 2] = ["function-coverage.json", "function-coverage.txt"];

/// Where under profiles/ a profile of `kind` for `system` and `provider` is pinned (the layout
/// nix/pinned-profiles.nix reads).
pub fn pinned_subdir(kind: Kind, system: &str, provider: &str) -> PathBuf {
    Path::new(system).join(provider).join(kind.name())
}

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
    let (system, provider) = (
        str_at(&m, &["system"]).unwrap_or("").to_string(),
        str_at(&m, &["provider"]).unwrap_or("").to_string(),
    );
    if system.is_empty() || provider.is_empty() {
        bail!("pin: the fresh manifest names no system or provider");
    }
    let file = file_name(kind);
    let fresh_file = a.fresh.join(file);
    if sha256_file(&fresh_file)? != str_at(&m, &["sha256"]).unwrap_or("") {
        bail!("pin: {} does not match its manifest", fresh_file.display());
    }
    let dir = a.profiles.join(pinned_subdir(kind, &system, &provider));
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
        json!({ "sha256": sha256_file(&old)?, "overlap_pct": (c.overlap_pct * 1000.0).round() / 1000.0 })
    } else {
        println!(
            "== {} profile {}: no pinned profile before this one",
            kind.name(),
            dir.display()
        );
        json!({ "sha256": null, "overlap_pct": null })
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

    /// A pinned LLVM directory as `pin` writes it, and a versions.json of the same toolchain.
    fn pinned_llvm(name: &str) -> (PathBuf, PathBuf) {
        let d = std::env::temp_dir().join(format!("pinned-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("llvm")).unwrap();
        std::fs::write(d.join("llvm/gateway.proftext"), PROFILE).unwrap();
        let toolchain = json!({ "rustc": "rustc 1.95.0 (x)", "llvm_profdata": "22.1.8", "llvm_bolt": "22.1.8", "provider": "p" });
        let manifest = json!({
            "schema": 1, "kind": "llvm", "system": "x86_64-linux", "provider": "p", "toolchain": toolchain,
            "sha256": hex(&Sha256::digest(PROFILE.as_bytes())),
        });
        write_json(&d.join("llvm/manifest.json"), &manifest).unwrap();
        write_json(&d.join("versions.json"), &toolchain).unwrap();
        (d.join("llvm"), d.join("versions.json"))
    }

    fn verify_llvm(dir: &Path, versions: &Path) -> Result<Value> {
        verify(&VerifyArgs {
            kind: Kind::Llvm,
            dir: dir.to_owned(),
            versions: versions.to_owned(),
            system: "x86_64-linux".into(),
            pgo_binary: None,
            refresh_command: "refresh-it".into(),
        })
    }

    #[test]
    fn verify_refuses_corrupt_and_foreign_profiles() {
        let (dir, versions) = pinned_llvm("verify");
        verify_llvm(&dir, &versions).unwrap();
        let err = |dir: &Path| verify_llvm(dir, &versions).unwrap_err().to_string();
        let with = |rustc: &str, profdata: &str, provider: &str| {
            let v = json!({ "rustc": rustc, "llvm_profdata": profdata, "provider": provider });
            write_json(&versions, &v).unwrap();
        };
        // Another provider, another rustc, another LLVM major; another minor is fine.
        with("rustc 1.95.0 (x)", "22.1.8", "q");
        assert!(err(&dir).contains("provider \"p\""));
        with("rustc 1.96.0 (y)", "22.1.8", "p");
        let e = err(&dir);
        assert!(
            e.contains("another toolchain") && e.contains("refresh-it"),
            "{e}"
        );
        with("rustc 1.95.0 (x)", "23.1.0", "p");
        assert!(err(&dir).contains("another toolchain"));
        with("rustc 1.95.0 (x)", "22.1.2", "p");
        verify_llvm(&dir, &versions).unwrap();
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
            })
        };
        // Counts a little different: fresh, and the verdict does not depend on them.
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
        let e = run(&PROFILE.replace("Hash:\n1\n", "Hash:\n2\n"), 0.0)
            .unwrap_err()
            .to_string();
        assert!(e.contains("hash mismatch: f"), "{e}");
        let _ = std::fs::remove_dir_all(dir.parent().unwrap());
    }

    #[test]
    fn pin_carries_the_function_coverage_and_drops_a_stale_one() {
        // A fresh directory as nix/stages/fresh-profile.nix writes it.
        let (fresh, _) = pinned_llvm("pin-fresh");
        std::fs::write(fresh.join("function-coverage.json"), "{}").unwrap();
        std::fs::write(fresh.join("function-coverage.txt"), "profile coverage: x\n").unwrap();
        let profiles = fresh.parent().unwrap().join("profiles");
        pin(&PinArgs {
            fresh: fresh.clone(),
            profiles: profiles.clone(),
        })
        .unwrap();
        let dir = profiles.join(pinned_subdir(Kind::Llvm, "x86_64-linux", "p"));
        assert_eq!(
            std::fs::read_to_string(dir.join("function-coverage.txt")).unwrap(),
            "profile coverage: x\n"
        );
        assert!(dir.join("function-coverage.json").is_file());
        // A fresh profile without a report (as a BOLT one) leaves none of the replaced one's.
        std::fs::remove_file(fresh.join("function-coverage.json")).unwrap();
        std::fs::remove_file(fresh.join("function-coverage.txt")).unwrap();
        pin(&PinArgs {
            fresh: fresh.clone(),
            profiles,
        })
        .unwrap();
        assert!(!dir.join("function-coverage.json").exists());
        assert!(!dir.join("function-coverage.txt").exists());
        assert!(dir.join("gateway.proftext").is_file());
        let _ = std::fs::remove_dir_all(fresh.parent().unwrap());
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
