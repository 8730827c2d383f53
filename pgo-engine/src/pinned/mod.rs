//! Pinned profiles (`profiles/` of a crate, `docs/contracts.md`, "Pinned profiles"): a profile
//! committed with its manifest, keyed by what determines it, so that the optimized builds read
//! committed inputs and rebuild bit-identically, while the training checks vouch that it still
//! describes the code.
//!
//! - `key`: what a profile is keyed by, and where a key's profiles are pinned;
//! - `manifest`: the manifest of a freshly trained profile (`pgo-engine manifest`);
//! - `verify`: a pinned directory checked before a build consumes it (`pgo-engine verify`);
//! - `freshness`: a fresh training against the pinned profile (`pgo-engine check`);
//! - `use_diagnostics`: the PGO build's profile-use warnings (`pgo-engine use-diagnostics`);
//! - `pin`: a fresh profile copied into the profiles directory (`pgo-engine pin`);
//! - `vouch`: another machine's training recorded in a pinned manifest (`pgo-engine vouch`).

pub mod freshness;
pub mod key;
pub mod manifest;
pub mod pin;
pub mod use_diagnostics;
pub mod verify;
pub mod vouch;

#[cfg(test)]
pub(crate) mod tests {
    use super::freshness::{check, BusyTraining, CheckArgs, Overlap, DEFAULT_MAX_OTHER_CPU_PCT};
    use super::key::{build_key, KeyArgs};
    use super::manifest::MANIFEST_SCHEMA;
    use super::pin::{pin, PinArgs};
    use super::verify::{verify, VerifyArgs};
    use crate::digest::sha256_bytes;
    use crate::json_file::{read, write};
    use crate::profile::{agreement, Kind};
    use anyhow::Result;
    use serde_json::{json, Value};
    use std::path::{Path, PathBuf};

    pub(crate) const PROFILE: &str =
        "f\n# Func Hash:\n1\n# Num Counters:\n2\n# Counter Values:\n30\n10\n";

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
        std::fs::write(d.join("llvm/app.proftext"), PROFILE).unwrap();
        let k = KeyArgs {
            versions: d.join("versions.json"),
            codegen: d.join("codegen.json"),
        };
        write(&k.versions, &versions("p", "rustc 1.95.0 (x)", "22.1.8")).unwrap();
        write(
            &k.codegen,
            &json!({ "cargo_profile": "release", "features": [] }),
        )
        .unwrap();
        let manifest = json!({
            "schema": MANIFEST_SCHEMA, "kind": "llvm", "file": "app.proftext",
            "system": "x86_64-linux", "provider": "p",
            "key": build_key(&k).unwrap().0,
            "toolchain": versions("p", "rustc 1.95.0 (x)", "22.1.8"),
            "sha256": sha256_bytes(PROFILE.as_bytes()),
        });
        write(&d.join("llvm/manifest.json"), &manifest).unwrap();
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
            write(&key.versions, &versions(provider, rustc, profdata)).unwrap();
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
        write(
            &key.codegen,
            &json!({ "cargo_profile": "release", "features": ["mimalloc"] }),
        )
        .unwrap();
        let e = err(&dir);
        assert!(e.contains("codegen.features"), "{e}");
        write(
            &key.codegen,
            &json!({ "cargo_profile": "release", "features": [] }),
        )
        .unwrap();
        // A manifest of the provider-keyed schema 1: refused, naming the refresh command.
        let mut m = read(&dir.join("manifest.json"), "m").unwrap();
        m["schema"] = json!(1);
        write(&dir.join("manifest.json"), &m).unwrap();
        let e = err(&dir);
        assert!(e.contains("schema 1") && e.contains("refresh-it"), "{e}");
        m["schema"] = json!(MANIFEST_SCHEMA);
        write(&dir.join("manifest.json"), &m).unwrap();
        // Corrupt: one counter changed, then a file whose sha256 matches but does not parse.
        std::fs::write(dir.join("app.proftext"), PROFILE.replace("30", "31")).unwrap();
        let e = err(&dir);
        assert!(
            e.contains("is corrupt") && e.contains("its manifest records"),
            "{e}"
        );
        let garbage = "not a profile\n";
        std::fs::write(dir.join("app.proftext"), garbage).unwrap();
        let mut m = read(&dir.join("manifest.json"), "m").unwrap();
        m["sha256"] = json!(sha256_bytes(garbage.as_bytes()));
        write(&dir.join("manifest.json"), &m).unwrap();
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
                overlap: Overlap::Work,
                contrast: Vec::new(),
                min_stable_pct: 25.0,
                refresh_command: "refresh-it".into(),
                verdict: verdict.clone(),
                training: Some(dir.join("training.json")),
            })
        };
        write(
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
        std::fs::write(dir.join("app.proftext"), format!("{PROFILE}{cold}")).unwrap();
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
        std::fs::write(dir.join("app.proftext"), PROFILE).unwrap();
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
        write(
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
    fn the_stable_overlap_leaves_out_what_the_contrast_training_moved() {
        let (dir, _) = pinned_llvm("check-stable");
        // `f` is the work (30, 10 per training); `l` counts the event loop's turns: 500 where the
        // profile was pinned, 200 on this builder, 120 in its contrast training.
        let profile = |f: (u64, u64), l: u64| {
            format!("f\n# Func Hash:\n1\n# Num Counters:\n2\n# Counter Values:\n{}\n{}\n\nl\n# Func Hash:\n3\n# Num Counters:\n1\n# Counter Values:\n{l}\n", f.0, f.1)
        };
        std::fs::write(dir.join("app.proftext"), profile((3000, 1000), 500)).unwrap();
        let (fresh, contrast) = (dir.join("fresh.proftext"), dir.join("contrast.proftext"));
        let run = |f: (u64, u64), l: u64, c: Option<(u64, u64, u64)>, min_stable_pct: f64| {
            std::fs::write(&fresh, profile(f, l)).unwrap();
            if let Some((cf0, cf1, cl)) = c {
                std::fs::write(&contrast, profile((cf0, cf1), cl)).unwrap();
            }
            check(&CheckArgs {
                kind: Kind::Llvm,
                pinned: dir.clone(),
                fresh: fresh.clone(),
                min_overlap: 97.0,
                overlap: Overlap::Stable,
                contrast: c.map(|_| contrast.clone()).into_iter().collect(),
                min_stable_pct,
                refresh_command: "refresh-it".into(),
                verdict: dir.join("verdict.json"),
                training: None,
            })
        };
        // Over every counter the loop's share moved the overlap to 93%: stale by `all`.
        let e = run((3000, 1000), 200, None, 25.0).unwrap_err().to_string();
        assert!(e.contains("needs --contrast"), "{e}");
        // The contrast training moved `l` too: it is left out, and `f` agrees.
        run((3000, 1000), 200, Some((3000, 1000, 120)), 25.0).unwrap();
        let v = read(&dir.join("verdict.json"), "verdict").unwrap();
        assert_eq!(v["overlap_of"], "stable");
        assert_eq!(v["machine_bound"]["relative"], json!(agreement::RELATIVE));
        // The contrast agrees on `l`: it stays in, and the overlap is too low.
        let e = run((3000, 1000), 200, Some((3000, 1000, 200)), 25.0)
            .unwrap_err()
            .to_string();
        assert!(e.contains("is stale") && e.contains("agree on"), "{e}");
        // The work moved (the hot path went through the other branch) on both trainings: stale,
        // though the loop is left out.
        let e = run((1000, 3000), 200, Some((1000, 3000, 120)), 25.0)
            .unwrap_err()
            .to_string();
        assert!(e.contains("is stale") && e.contains("refresh-it"), "{e}");
        // Two trainings that agree on too little judge nothing.
        let e = run((3000, 1000), 200, Some((5000, 100, 120)), 25.0)
            .unwrap_err()
            .to_string();
        assert!(e.contains("agree on only"), "{e}");
        let _ = std::fs::remove_dir_all(dir.parent().unwrap());
    }

    #[test]
    fn a_profile_without_work_is_gated_on_every_function_or_refused() {
        let (dir, _) = pinned_llvm("check-all");
        // Only a closure counts: nothing is left of the work.
        let closure = PROFILE.replacen("f\n", "_ZN3app4main28_$u7b$$u7b$closure$u7d$$u7d$E\n", 1);
        std::fs::write(dir.join("app.proftext"), &closure).unwrap();
        let fresh = dir.join("fresh.proftext");
        std::fs::write(&fresh, &closure).unwrap();
        let run = |overlap| {
            check(&CheckArgs {
                kind: Kind::Llvm,
                pinned: dir.clone(),
                fresh: fresh.clone(),
                min_overlap: 99.0,
                overlap,
                contrast: Vec::new(),
                min_stable_pct: 25.0,
                refresh_command: "refresh-it".into(),
                verdict: dir.join("verdict.json"),
                training: None,
            })
        };
        let e = run(Overlap::Work).unwrap_err().to_string();
        assert!(e.contains("--overlap all"), "{e}");
        run(Overlap::All).unwrap();
        let v = read(&dir.join("verdict.json"), "verdict").unwrap();
        assert_eq!(v["overlap_of"], "all");
        let _ = std::fs::remove_dir_all(dir.parent().unwrap());
    }

    #[test]
    fn pin_carries_the_function_coverage_and_drops_a_stale_one() {
        // A fresh directory as a fresh-profile stage writes it.
        let (fresh, _) = pinned_llvm("pin-fresh");
        std::fs::write(fresh.join("function-coverage.json"), "{}").unwrap();
        std::fs::write(fresh.join("function-coverage.txt"), "profile coverage: x\n").unwrap();
        let profiles = fresh.parent().unwrap().join("profiles");
        let pin_with = |other: Value, max: f64| {
            let path = fresh.join("manifest.json");
            let mut m = read(&path, "m").unwrap();
            m["training"] = json!({ "machine": { "other_cpu_pct": other } });
            write(&path, &m).unwrap();
            pin(&PinArgs {
                fresh: fresh.clone(),
                profiles: profiles.clone(),
                max_other_cpu_pct: max,
                keep: vec![
                    "function-coverage.json".into(),
                    "function-coverage.txt".into(),
                ],
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
        assert!(dir.join("app.proftext").is_file());
        let _ = std::fs::remove_dir_all(fresh.parent().unwrap());
    }
}
