//! `pgo-engine use-diagnostics`: the PGO build's profile-use warnings against the profile it read.
//! LLVM reports every function whose control-flow hash no longer matches its profile record ("hash
//! mismatch") and, asked to with `-pgo-warn-missing-function`, every function the profile does not
//! know; a chain keeps them (the gateway's: nix/stages/pgo.nix) and this fails the PGO stage when
//! a function the profile has counts for changed.

use anyhow::{bail, Context, Result};
use std::path::PathBuf;

use crate::profile::{first_names, Kind, Profile};

#[derive(clap::Args, Debug)]
pub struct UseDiagnosticsArgs {
    /// The LLVM profile the PGO build read, in text form.
    #[arg(long)]
    pub profile: PathBuf,
    /// The build's kept warnings (pgo-diagnostics.txt: "hash mismatch" and "no profile data
    /// available for function" lines).
    #[arg(long)]
    pub diagnostics: PathBuf,
    #[arg(long)]
    pub refresh_command: String,
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

/// The PGO stage's verdict on LLVM's profile-use warnings. A function whose
/// control flow changed is stale only when the profile has counts for it: one that training never
/// ran (a cold function edited) is optimized without a profile, as it was with one. A function the
/// profile does not know (a new one) is left to the LLVM training check, which fails when a fresh
/// training runs it. The profile names a local function `file;name`, LLVM's warning `name`.
pub fn use_diagnostics(a: &UseDiagnosticsArgs) -> Result<()> {
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
            "the LLVM profile is stale: {} function(s) it has counts for changed their control flow since training (hash mismatch): {}; refresh it with `{}` and commit the pinned profiles",
            hot.len(),
            first_names(&hot),
            a.refresh_command
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pinned::tests::PROFILE;

    #[test]
    fn use_diagnostics_fail_on_a_changed_hot_function_only() {
        let d = std::env::temp_dir().join(format!("use-diag-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let profile = d.join("app.proftext");
        std::fs::write(
            &profile,
            format!("{PROFILE}\napp.abc-cgu.0;cold\n# Func Hash:\n3\n# Num Counters:\n1\n# Counter Values:\n0\n"),
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
        run("warning: app.abc-cgu.0: function control flow change detected (hash mismatch) cold Hash = 9\n").unwrap();
        run("warning: x: no profile data available for function new_one\n").unwrap();
        let e = run("warning: app.abc-cgu.0: function control flow change detected (hash mismatch) f Hash = 9\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("(hash mismatch): f") && e.contains("refresh-it"),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&d);
    }
}
