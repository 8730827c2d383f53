//! `pgo-engine check`: the freshness gate of a training check. A fresh training's profile is
//! compared with the pinned one; the pinned profile is stale when a function that training runs
//! changed (LLVM's control-flow hash), when the fresh training ran a function the pinned profile
//! does not know, or when their overlap is under the threshold: over the counters the fresh
//! training agrees on with its contrast trainings (`--overlap stable`: what this builder's timing
//! moves measured and left out, `profile::agreement`), the functions a names rule keeps, or all.
//! The verdict it writes is a function of the pinned profile and the check's settings alone, so a
//! training check rebuilds bit-identically on any builder.

use anyhow::{bail, Result};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

use super::manifest::profile_file;
use crate::digest::sha256_file;
use crate::host::load::QUIET_MAX_OTHER_CPU_PCT;
use crate::json_file;
use crate::profile::agreement::{self, MachineBound};
use crate::profile::compare::{compare, counts_scheduling, describe, overlap_of};
use crate::profile::{first_names, Kind, Profile};

/// The busiest the machine may have been, in percent of its CPU, for a stale verdict to be final
/// and for a fresh profile to be pinned (`pin`'s default `--max-other-cpu-pct`).
pub const DEFAULT_MAX_OTHER_CPU_PCT: f64 = QUIET_MAX_OTHER_CPU_PCT;

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
    /// `--overlap` names.
    #[arg(long)]
    pub min_overlap: f64,
    /// Which counters the overlap is taken over: `stable` (those every `--contrast` training of the
    /// same binary agrees with the fresh one on: what the machine moves is measured and left out,
    /// `profile::agreement`), `work` (the functions `profile::compare::counts_scheduling` names
    /// left out) or `all`.
    #[arg(long, value_enum, default_value = "work")]
    pub overlap: Overlap,
    /// Further fresh trainings of the same binary, each run under another perturbation of the
    /// builder (repeatable; `--overlap stable` needs one at least).
    #[arg(long)]
    pub contrast: Vec<PathBuf>,
    /// With `--overlap stable`: the least share, in percent, of the fresh training's counts that
    /// the trainings must agree on; below it, too little of the profile is judged.
    #[arg(long, default_value_t = 25.0)]
    pub min_stable_pct: f64,
    #[arg(long)]
    pub refresh_command: String,
    /// Where to write the verdict (JSON; nothing in it depends on the fresh run).
    #[arg(long)]
    pub verdict: PathBuf,
    /// The fresh training's record (`pgo-engine train --record`): a stale verdict says how busy
    /// the machine was, since a busy machine's training moves the counts by itself.
    #[arg(long)]
    pub training: Option<PathBuf>,
}

/// The counters a freshness check's overlap is taken over.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Overlap {
    /// The counters the trainings on this builder agree on: the machine-bound ones measured and
    /// left out.
    Stable,
    /// The functions that count work, the runtime's scheduling left out.
    Work,
    /// Every function.
    All,
}

/// The sum of the counts of the functions that count work.
fn work_total(p: &Profile) -> u64 {
    p.functions
        .iter()
        .filter(|(name, _)| !counts_scheduling(name))
        .map(|(_, f)| f.total())
        .sum()
}

pub fn check(a: &CheckArgs) -> Result<()> {
    let kind = a.kind.name();
    let manifest = json_file::read(&a.pinned.join("manifest.json"), "pinned profile manifest")?;
    let pinned_file = profile_file(&a.pinned, &manifest)?;
    let pinned = Profile::read(a.kind, &pinned_file)?;
    let fresh = Profile::read(a.kind, &a.fresh)?;
    let c = compare(&pinned, &fresh, 10);
    eprint!(
        "freshness check, pinned -> fresh: {}",
        describe(a.kind, &c, 10)
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
    if a.overlap == Overlap::Work {
        for (which, p) in [("pinned", &pinned), ("fresh", &fresh)] {
            if work_total(p) == 0 {
                bail!(
                    "freshness check: no function of the {which} {kind} profile counts work (every counted one is the runtime's, a poll, a park or a closure: `counts_scheduling`), so their overlap of the work says nothing; gate on every function with --overlap all"
                );
            }
        }
    }
    let stable_pct = match (a.overlap, a.contrast.is_empty()) {
        (Overlap::Stable, true) => bail!(
            "freshness check: --overlap stable needs --contrast, a second training of the same binary under another perturbation"
        ),
        (_, true) => None,
        (_, false) => Some(
            stable_overlap(a.kind, &pinned, &fresh, &a.contrast, a.min_stable_pct)?.0,
        ),
    };
    let (measured, over) = match a.overlap {
        Overlap::Stable => (
            stable_pct.expect("measured above"),
            "the counters the trainings on this builder agree on",
        ),
        Overlap::Work => (c.work_overlap_pct, "the functions that count work"),
        Overlap::All => (c.overlap_pct, "all functions"),
    };
    if measured.is_nan() || measured < a.min_overlap {
        stale.push(format!(
            "a fresh training overlaps the pinned profile by {measured:.3}% in {over} ({:.3}% in all, {:.3}% in the work by the names rule), less than the {:.3}% that training noise and machines explain",
            c.overlap_pct, c.work_overlap_pct, a.min_overlap
        ));
    }
    if !stale.is_empty() {
        let mut message = format!(
            "the pinned {kind} profile is stale: {}; refresh it with `{}` and commit the pinned profiles",
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
        "overlap_of": match a.overlap { Overlap::Stable => "stable", Overlap::Work => "work", Overlap::All => "all" },
        "machine_bound": match a.overlap {
            Overlap::Stable => json!({
                "measured_by": "contrast trainings",
                "relative": agreement::RELATIVE,
                "absolute": agreement::ABSOLUTE,
                "min_stable_pct": a.min_stable_pct,
            }),
            _ => Value::Null,
        },
        "changed_functions_allowed": if a.kind == Kind::Llvm { json!("cold only") } else { Value::Null },
        "verdict": "fresh",
    });
    json_file::write(&a.verdict, &verdict)?;
    eprintln!("freshness check passed: the pinned {kind} profile agrees with a fresh training");
    Ok(())
}

/// The overlap of `fresh` with `pinned` over the counters `fresh` and every contrast training
/// (at `contrasts`) agree on, each normalized by those counters' counts, and the share of the
/// fresh counts the machine moved; prints what it moved. Fails when they agree on less than
/// `min_stable_pct` of the fresh counts.
pub(crate) fn stable_overlap(
    kind: Kind,
    pinned: &Profile,
    fresh: &Profile,
    contrasts: &[PathBuf],
    min_stable_pct: f64,
) -> Result<(f64, f64)> {
    let name = kind.name();
    let contrasts = contrasts
        .iter()
        .map(|p| Profile::read(kind, p))
        .collect::<Result<Vec<_>>>()?;
    let bound = MachineBound::measure(fresh, &contrasts.iter().collect::<Vec<_>>());
    let largest: Vec<String> = bound
        .largest(fresh, 5)
        .iter()
        .map(|(n, c)| {
            format!(
                "{:.2}% {n}",
                *c as f64 * 100.0 / bound.total_counts.max(1) as f64
            )
        })
        .collect();
    eprintln!(
        "freshness check: the contrast trainings (total counts {} against {}) disagree with this one on counters holding {:.2}% of its counts, which the overlap leaves out; most in: {}",
        contrasts.iter().map(|c| c.total().to_string()).collect::<Vec<_>>().join(", "),
        fresh.total(),
        bound.bound_pct(),
        largest.join(", ")
    );
    if 100.0 - bound.bound_pct() < min_stable_pct {
        bail!(
            "freshness check: the trainings on this builder agree on only {:.2}% of the fresh {name} counts, less than the {min_stable_pct}% the overlap needs to judge the pinned profile (the machine moved {:.2}% of them; nix/README.md, Thresholds)",
            100.0 - bound.bound_pct(),
            bound.bound_pct()
        );
    }
    let pct = overlap_of(pinned, fresh, |name, c| bound.is_stable(name, c));
    eprintln!("freshness check: overlap of the counters the trainings agree on: {pct:.3}%");
    Ok((pct, bound.bound_pct()))
}

/// A stale verdict of a training that ran beside other work: its counts may have moved with the
/// load, not with the code, so the training check trains again once the machine is quieter
/// (`wait-quiet`) instead of failing; `pgo-engine` exits with status 3 for it.
#[derive(Debug)]
pub struct BusyTraining(pub String);

impl std::fmt::Display for BusyTraining {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BusyTraining {}

/// For a stale verdict that only the overlap gives (no function changed): where the pinned
/// profile and this training ran. With `--overlap stable` what this builder moves is left out, so
/// the likely cause is the workload's hot path (a shape, a config default); a machine whose drift
/// the contrasts did not reproduce is the other (nix/README.md, Thresholds).
fn machines_compared(pinned: &Path, training: Option<&Path>) -> String {
    let pinned = json_file::read(&pinned.join("manifest.json"), "pinned manifest")
        .map(|m| m["training"].clone())
        .unwrap_or(Value::Null);
    let fresh = training
        .and_then(|t| json_file::read(t, "training record").ok())
        .unwrap_or(Value::Null);
    format!(
        " (no function changed: the pinned profile's training took {}, this one {}; the counters this builder's timing moves are left out when the check has contrast trainings, so the likely cause is a moved hot path (a shape, a config default), and refreshing is the fix; `bench/training-perturbations` shows what a machine moves)",
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

/// The share of the machine's CPU other work used while the training of `training` (its record)
/// ran.
fn busy_share(training: Option<&Path>) -> Option<f64> {
    training
        .and_then(|t| json_file::read(t, "training record").ok())
        .and_then(|m| m["machine"]["other_cpu_pct"].as_f64())
}
