//! `pgo-engine pin`: the refresh command's last step. A fresh profile stage's output (profile file
//! and manifest) is copied into a profiles directory, under its key
//! (`<target>/rust-<release>/<kind>`), its manifest recording the profile it replaced and their
//! overlap; a profile trained beside other work is refused (`host::load`).

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

use super::freshness::DEFAULT_MAX_OTHER_CPU_PCT;
use super::key::pinned_subdir;
use super::manifest::profile_file;
use crate::digest::sha256_file;
use crate::json_file::{self, str_at};
use crate::profile::compare::{compare, describe};
use crate::profile::{Kind, Profile};

#[derive(clap::Args, Debug)]
pub struct PinArgs {
    /// Output of a fresh profile stage: the profile file and its manifest.json.
    #[arg(long)]
    pub fresh: PathBuf,
    /// The repository's profiles directory.
    #[arg(long)]
    pub profiles: PathBuf,
    /// Most CPU time, in percent of the machine, that other work may have used while the fresh
    /// profile trained (its manifest's `training.machine.other_cpu_pct`; `host::load` says why a
    /// busy machine's profile is refused).
    #[arg(long, default_value_t = DEFAULT_MAX_OTHER_CPU_PCT)]
    pub max_other_cpu_pct: f64,
    /// A file of the fresh directory pinned beside the profile, a report of it (repeatable); one
    /// pinned before that the fresh directory lacks is removed, so no report of a replaced
    /// profile stays behind.
    #[arg(long)]
    pub keep: Vec<String>,
}

/// The profile a directory pins, if any: its file (as its manifest names it).
fn pinned_before(dir: &Path) -> Option<PathBuf> {
    let m = json_file::read(&dir.join("manifest.json"), "pinned manifest").ok()?;
    profile_file(dir, &m).ok().filter(|f| f.is_file())
}

pub fn pin(a: &PinArgs) -> Result<()> {
    let mut m = json_file::read(&a.fresh.join("manifest.json"), "fresh profile manifest")?;
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
            "pin: {}/manifest.json does not say how busy the machine was while it trained (training.machine.other_cpu_pct): train it again with `pgo-engine train`",
            a.fresh.display()
        ),
    }
    for name in &a.keep {
        if name.is_empty() || name.contains('/') || name == "manifest.json" {
            bail!("pin: --keep {name:?} is not the name of a report beside the profile");
        }
    }
    let fresh_file = profile_file(&a.fresh, &m).context("pin: the fresh manifest")?;
    let file = fresh_file.file_name().unwrap_or_default().to_owned();
    if sha256_file(&fresh_file)? != str_at(&m, &["sha256"]).unwrap_or("") {
        bail!("pin: {} does not match its manifest", fresh_file.display());
    }
    let dir = a
        .profiles
        .join(pinned_subdir(kind, &m["key"]).context("pin: the fresh manifest")?);
    let before = pinned_before(&dir);
    m["previous"] = previous(kind, &dir, before.as_deref(), &fresh_file)?;
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let target = dir.join(&file);
    let mut staged = target.clone().into_os_string();
    staged.push(".new");
    std::fs::copy(&fresh_file, &staged)?;
    // The store's copy is read-only; the repository's is an ordinary file.
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(0o644))?;
    }
    std::fs::rename(&staged, &target)?;
    if let Some(old) = before.filter(|old| *old != target) {
        std::fs::remove_file(&old).with_context(|| format!("removing {}", old.display()))?;
    }
    json_file::write(&dir.join("manifest.json"), &m)?;
    for report in &a.keep {
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
        target.display(),
        m["bytes"],
        str_at(&m, &["sha256"]).unwrap_or(""),
        str_at(&m, &["trained_on", "source_sha256"]).unwrap_or("")
    );
    Ok(())
}

/// The manifest's `previous`: the profile pinned before, and its overlap with the fresh one,
/// whose comparison is printed.
fn previous(kind: Kind, dir: &Path, before: Option<&Path>, fresh: &Path) -> Result<Value> {
    let Some(old) = before else {
        println!(
            "== {} profile {}: no pinned profile before this one",
            kind.name(),
            dir.display()
        );
        return Ok(json!({ "sha256": null, "overlap_pct": null, "work_overlap_pct": null }));
    };
    let c = compare(&Profile::read(kind, old)?, &Profile::read(kind, fresh)?, 10);
    println!(
        "== {} profile {}: the fresh training against the pinned profile it replaces",
        kind.name(),
        dir.display()
    );
    print!("{}", describe(kind, &c, 10));
    let pct = |x: f64| (x * 1000.0).round() / 1000.0;
    Ok(json!({
        "sha256": sha256_file(old)?,
        "overlap_pct": pct(c.overlap_pct),
        "work_overlap_pct": pct(c.work_overlap_pct),
    }))
}
