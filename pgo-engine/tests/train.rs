//! `pgo-engine train` as a process: the training contract held against training commands that
//! are small shell scripts standing in for a crate's (they write profile files the way an
//! instrumented binary would), then the record read by `manifest`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const ENGINE: &str = env!("CARGO_BIN_EXE_pgo-engine");

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("pgo-engine-train-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `pgo-engine train --kind KIND` of a stand-in binary by `sh -c SCRIPT`, in `d`.
fn train(d: &Path, kind: &str, script: &str) -> Output {
    let binary = d.join("app-instrumented");
    std::fs::write(&binary, "#!/bin/sh\n").unwrap();
    Command::new(ENGINE)
        .args(["train", "--kind", kind, "--binary"])
        .arg(&binary)
        .arg("--profile-dir")
        .arg(d.join("profiles"))
        .arg("--record")
        .arg(d.join("record.json"))
        .args(["--", "sh", "-c", script])
        .output()
        .unwrap()
}

fn record(d: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(d.join("record.json")).unwrap()).unwrap()
}

/// A script line writing a profile file of `bytes` bytes under `$PGO_PROFILE_DIR`.
fn profile(name: &str, bytes: usize) -> String {
    format!("head -c {bytes} /dev/zero > \"$PGO_PROFILE_DIR/{name}\"")
}

#[test]
fn a_training_is_run_with_the_contracts_environment_and_recorded() {
    let d = scratch("ok");
    // What the command is given: its working directory is the profile directory, LLVM's file
    // pattern points there, and it may write a report.
    let script = [
        "[ \"$PWD\" = \"$PGO_PROFILE_DIR\" ] || exit 7",
        "[ \"$LLVM_PROFILE_FILE\" = \"$PGO_PROFILE_DIR/%p-%m.profraw\" ] || exit 8",
        "[ \"$PGO_PROFILE_KIND\" = llvm ] && [ -f \"$PGO_BINARY\" ] && [ -d \"$PGO_SCRATCH\" ] || exit 9",
        "case \"$PGO_BINARY\" in /*) ;; *) exit 10 ;; esac",
        &profile("1-a.profraw", 4096),
        &profile("2-b.profraw", 2048),
        &profile("3-tiny.profraw", 100),
        "echo '{\"workloads\": [\"search\", \"count\"], \"holdout\": \"replace\", \"checked\": 12, \"corpus_bytes\": 5}' > \"$PGO_REPORT\"",
    ]
    .join("\n");
    let o = train(&d, "llvm", &script);
    assert!(o.status.success(), "{}", stderr(&o));
    let r = record(&d);
    assert_eq!(r["profile_kind"], "llvm");
    assert_eq!(
        (&r["profile_files"], &r["profile_bytes"]),
        (&2.into(), &6144.into())
    );
    assert_eq!(
        r["workload"]["workloads"],
        serde_json::json!(["search", "count"])
    );
    assert_eq!(r["workload"]["corpus_bytes"], 5);
    assert!(r["machine"]["other_cpu_pct"].is_number(), "{r}");
    assert!(r["host"].is_object());
    // The profile below the floor is gone: the merge reads what was counted.
    assert!(!d.join("profiles/3-tiny.profraw").exists());
    assert!(
        stderr(&o).contains("3-tiny.profraw (100 bytes)"),
        "{}",
        stderr(&o)
    );

    // The manifest of the merged profile takes the record's figures and workloads.
    let proftext = d.join("app.proftext");
    std::fs::write(
        &proftext,
        "f\n# Func Hash:\n1\n# Num Counters:\n1\n# Counter Values:\n5\n",
    )
    .unwrap();
    std::fs::write(
        d.join("versions.json"),
        r#"{"rust_release":"1.95.0","rustc":"rustc 1.95.0 (x)","rustc_commit_hash":"c","rustc_llvm":"22.1.2","cargo":"cargo 1.95.0","target":"x86_64-unknown-linux-gnu","llvm_profdata":"22.1.8","llvm_bolt":"22.1.8"}"#,
    )
    .unwrap();
    std::fs::write(d.join("codegen.json"), r#"{"cargo_profile":"release"}"#).unwrap();
    std::fs::create_dir_all(d.join("src")).unwrap();
    std::fs::write(d.join("src/main.rs"), "fn main() {}").unwrap();
    let o = Command::new(ENGINE)
        .arg("manifest")
        .args([
            "--kind",
            "llvm",
            "--system",
            "x86_64-linux",
            "--provider",
            "p",
        ])
        .arg("--profile")
        .arg(&proftext)
        .arg("--training")
        .arg(d.join("record.json"))
        .arg("--versions")
        .arg(d.join("versions.json"))
        .arg("--codegen")
        .arg(d.join("codegen.json"))
        .arg("--source")
        .arg(d.join("src"))
        .arg("--instrumented")
        .arg(d.join("app-instrumented"))
        .arg("--out")
        .arg(d.join("manifest.json"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(d.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(m["file"], "app.proftext");
    assert_eq!(
        m["training"]["workloads"],
        serde_json::json!(["search", "count"])
    );
    assert_eq!(m["training"]["holdout"], "replace");
    assert_eq!(m["training"]["checked"], 12);
    assert_eq!(m["training"]["profile_bytes"], 6144);
    assert!(m["training"]["machine"]["other_cpu_pct"].is_number());
    assert_eq!(
        m["trained_on"]["cargo_lock_sha256"],
        serde_json::Value::Null
    );
    assert_eq!(m["key"]["codegen"]["cargo_profile"], "release");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_bolt_training_writes_fdata_in_its_working_directory() {
    let d = scratch("bolt");
    let o = train(
        &d,
        "bolt",
        "[ -z \"$LLVM_PROFILE_FILE\" ] || exit 3\nhead -c 2000 /dev/zero > app.fdata.42.fdata",
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let r = record(&d);
    assert_eq!(
        (&r["profile_kind"], &r["profile_files"]),
        (&"bolt".into(), &1.into())
    );
    assert_eq!(r["workload"], serde_json::Value::Null);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_training_fails_closed_naming_the_cause() {
    let cases: [(&str, &str, &str); 5] = [
        (
            "exit",
            &format!("{}\nexit 4", profile("a.profraw", 4096)),
            "exited with status 4",
        ),
        ("signal", "kill -9 $$", "was killed by signal 9"),
        ("none", "true", "left no profile file above 1024 bytes"),
        ("small", &profile("a.profraw", 10), "(only "),
        (
            "report",
            &format!(
                "{}\necho '[1]' > \"$PGO_REPORT\"",
                profile("a.profraw", 4096)
            ),
            "is not a JSON object",
        ),
    ];
    for (name, script, cause) in cases {
        let d = scratch(&format!("fail-{name}"));
        let o = train(&d, "llvm", script);
        assert!(!o.status.success(), "{name}: succeeded");
        assert!(stderr(&o).contains(cause), "{name}: {}", stderr(&o));
        assert!(
            !d.join("record.json").exists(),
            "{name}: a record was written"
        );
        let _ = std::fs::remove_dir_all(&d);
    }
    // A profile directory that already holds profiles: refused before the command runs.
    let d = scratch("fail-stale");
    std::fs::create_dir_all(d.join("profiles")).unwrap();
    std::fs::write(d.join("profiles/old.profraw"), "x").unwrap();
    let o = train(&d, "llvm", "touch ran");
    assert!(
        stderr(&o).contains("already holds 1 llvm profile file"),
        "{}",
        stderr(&o)
    );
    assert!(!d.join("profiles/ran").exists());
    let _ = std::fs::remove_dir_all(&d);
}
