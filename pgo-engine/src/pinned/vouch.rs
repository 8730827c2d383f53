//! `pgo-engine vouch`: a record, in a pinned profile's manifest, that a machine other than the
//! one that pinned it trained the same binary and agreed with it: the machine (CPU model, kernel,
//! clock source), the overlap of its training with the pinned profile over the counters its
//! contrast training agreed on, and how much the machine moved. The freshness checks judge every
//! build this way, but their verdicts must not depend on the builder (so that every stage
//! rebuilds bit-identically); these records are committed instead, so that the proof marker can
//! say on which CPUs the profiles were shown to hold. A profile a training does not vouch for
//! (under the threshold) is refused, not recorded.

use anyhow::{bail, Result};
use serde_json::{json, Value};
use std::path::PathBuf;

use super::freshness::stable_overlap;
use super::manifest::profile_file;
use crate::json_file;
use crate::profile::{Kind, Profile};

#[derive(clap::Args, Debug)]
pub struct VouchArgs {
    #[arg(long, value_enum)]
    pub kind: Kind,
    /// The pinned directory in the repository (its manifest.json is rewritten).
    #[arg(long)]
    pub pinned: PathBuf,
    /// A fresh training of the chain's instrumented binary, in the pinned file's format.
    #[arg(long)]
    pub fresh: PathBuf,
    /// The contrast trainings: the same binary, trained under other perturbations (repeatable).
    #[arg(long, required = true)]
    pub contrast: Vec<PathBuf>,
    /// The fresh training's record (`pgo-engine train --record`): the machine it ran on.
    #[arg(long)]
    pub training: PathBuf,
    /// The least overlap a record needs (the chain's threshold for this kind).
    #[arg(long)]
    pub min_overlap: f64,
    /// How the two trainings were made (a command anyone can run).
    #[arg(long)]
    pub by: String,
}

fn pct(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

pub fn vouch(a: &VouchArgs) -> Result<()> {
    let manifest_path = a.pinned.join("manifest.json");
    let mut m = json_file::read(&manifest_path, "pinned profile manifest")?;
    if m["kind"].as_str() != Some(a.kind.name()) {
        bail!(
            "vouch: {} is not a {} profile manifest",
            manifest_path.display(),
            a.kind.name()
        );
    }
    let pinned = Profile::read(a.kind, &profile_file(&a.pinned, &m)?)?;
    let fresh = Profile::read(a.kind, &a.fresh)?;
    let (overlap, bound) = stable_overlap(a.kind, &pinned, &fresh, &a.contrast, 25.0)?;
    if overlap < a.min_overlap {
        bail!(
            "vouch: this training overlaps the pinned {} profile by {overlap:.3}% over the counters its contrast agreed on, less than {}%: it does not vouch for it (is the profile stale?)",
            a.kind.name(),
            a.min_overlap
        );
    }
    let record = json_file::read(&a.training, "training record")?;
    let host = record["host"].clone();
    let Some(cpu) = host["cpu_model"].as_str().map(str::to_owned) else {
        bail!(
            "vouch: the training record {} names no CPU model",
            a.training.display()
        );
    };
    let entry = json!({
        "host": host,
        "seconds": record["machine"]["seconds"],
        "overlap_of": "stable",
        "overlap_pct": pct(overlap),
        "machine_bound_pct": pct(bound),
        "min_overlap_pct": a.min_overlap,
        "by": a.by,
    });
    // One record per CPU model: the latest.
    let mut list: Vec<Value> = m["vouched"].as_array().cloned().unwrap_or_default();
    list.retain(|v| v["host"]["cpu_model"].as_str() != Some(cpu.as_str()));
    list.push(entry);
    m["vouched"] = Value::Array(list);
    json_file::write(&manifest_path, &m)?;
    println!(
        "vouched for the pinned {} profile on {cpu}: overlap {overlap:.3}% over the counters the contrasts agreed on ({bound:.2}% of the counts moved with the machine)",
        a.kind.name()
    );
    Ok(())
}
