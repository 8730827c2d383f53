//! `pgo-engine proof` and `verify-proof` as processes, on profile directories, verdicts and logs
//! as the chain's stages leave them.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const ENGINE: &str = env!("CARGO_BIN_EXE_pgo-engine");

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("pgo-engine-it-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn write(p: &Path, s: &str) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, s).unwrap();
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A pinned profile directory as the pinned-profile stages leave it, and the verdict of its
/// freshness check; its manifest's training section as `training` gives it.
fn pinned_dir(d: &Path, kind: &str, training: serde_json::Value) -> (PathBuf, PathBuf) {
    use sha2::Digest;
    let dir = d.join(format!("pinned-{kind}"));
    std::fs::create_dir_all(&dir).unwrap();
    let (file, body) = if kind == "llvm" {
        (
            "app.proftext",
            "f\n# Func Hash:\n1\n# Num Counters:\n1\n# Counter Values:\n5\n",
        )
    } else {
        ("app.fdata", "1 main 0 1 main 4 0 7\n")
    };
    write(&dir.join(file), body);
    let sha: String = sha2::Sha256::digest(body.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let source = "b".repeat(64);
    write(
        &dir.join("manifest.json"),
        &serde_json::json!({
            "schema": 2, "kind": kind, "file": file, "sha256": sha, "system": "x86_64-linux",
            "trained_on": { "source_sha256": source, "pgo_binary_sha256": "c".repeat(64) },
            "training": training,
            "previous": { "sha256": "d".repeat(64), "overlap_pct": 99.5 }
        })
        .to_string(),
    );
    if kind == "llvm" {
        write(&dir.join("app.profdata"), "profdata bytes");
    }
    let verdict = d.join(format!("{kind}-verdict.json"));
    write(
        &verdict,
        &serde_json::json!({ "schema": 1, "kind": kind, "pinned_sha256": sha, "min_overlap_pct": 99.0, "verdict": "fresh" })
            .to_string(),
    );
    (dir, verdict)
}

/// A manifest's training section as the engine writes it.
fn training(holdout: &str) -> serde_json::Value {
    serde_json::json!({ "workloads": ["w1", "w2"], "holdout": holdout, "checked": 10,
                        "profile_files": 1, "profile_bytes": 5000 })
}

fn proof_inputs(d: &Path, bolt_holdout: &str) -> Vec<String> {
    proof_inputs_of(d, training("h"), training(bolt_holdout))
}

fn proof_inputs_of(
    d: &Path,
    llvm_training: serde_json::Value,
    bolt_training: serde_json::Value,
) -> Vec<String> {
    let (llvm, llvm_check) = pinned_dir(d, "llvm", llvm_training);
    let (bolt, bolt_check) = pinned_dir(d, "bolt", bolt_training);
    write(
        &d.join("bolt.log"),
        "BOLT-INFO: 812 out of 4000 functions in the binary (20.3%) have non-empty execution profile\n",
    );
    write(
        &d.join("versions.json"),
        r#"{"rustc":"rustc 1.95.0","rustc_llvm":"22.1.2","llvm_profdata":"22.1.8","llvm_bolt":"22.1.8","provider":"offline-debian","target":"x86_64-unknown-linux-gnu"}"#,
    );
    std::fs::create_dir_all(d.join("src/app/src")).unwrap();
    std::fs::create_dir_all(d.join("src/docs")).unwrap();
    for f in [
        "Cargo.toml",
        "Cargo.lock",
        "app/src/main.rs",
        "docs/README.md",
    ] {
        write(&d.join("src").join(f), f);
    }
    let p = |n: &Path| n.to_string_lossy().into_owned();
    [
        "proof",
        "--package",
        "app",
        "--binary",
        "app",
        "--llvm-profile",
        &p(&llvm),
        "--bolt-profile",
        &p(&bolt),
        "--llvm-check",
        &p(&llvm_check),
        "--bolt-check",
        &p(&bolt_check),
        "--bolt-log",
        &p(&d.join("bolt.log")),
        "--versions",
        &p(&d.join("versions.json")),
        "--source",
        &p(&d.join("src")),
        "--source-include",
        "Cargo.toml",
        "--source-include",
        "app",
        "--refresh-command",
        "refresh-it",
        "--out",
        &p(&d.join("share/app/proof.json")),
    ]
    .map(String::from)
    .to_vec()
}

/// `proof_inputs` with the LLVM profile trained in the build instead of pinned.
fn proof_inputs_trained_in_build(d: &Path) -> Vec<String> {
    let mut args = proof_inputs(d, "h");
    let i = args.iter().position(|a| a == "--llvm-check").unwrap();
    args[i] = "--llvm-trained-in-build".into();
    args[i + 1] = "no pinned llvm profile at profiles/t/rust-1.95.0/llvm".into();
    args
}

fn verify(path: &Path) -> Output {
    Command::new(ENGINE)
        .arg("verify-proof")
        .arg(path)
        .output()
        .unwrap()
}

fn verify_pinned(path: &Path) -> Output {
    Command::new(ENGINE)
        .args(["verify-proof", "--require-pinned"])
        .arg(path)
        .output()
        .unwrap()
}

#[test]
fn proof_is_written_and_verifies() {
    let d = scratch("proof");
    let o = Command::new(ENGINE)
        .args(proof_inputs(&d, "h"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let path = d.join("share/app/proof.json");
    let m: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(m["schema"], 4);
    assert_eq!(
        (&m["package"], &m["binary"]),
        (&"app".into(), &"app".into())
    );
    assert_eq!(m["holdout"], "h");
    assert_eq!(
        m["pgo"]["workloads_trained"],
        serde_json::json!(["w1", "w2"])
    );
    assert_eq!(m["pgo"]["outputs_checked"], 10);
    assert_eq!(m["pgo"]["profraw_bytes"], 5000);
    assert_eq!(m["profiles"]["provenance"], "pinned");
    assert_eq!(m["profiles"]["refresh_command"], "refresh-it");
    assert_eq!(m["profiles"]["llvm"]["provenance"], "pinned");
    assert_eq!(
        m["profiles"]["llvm"]["trained_on_source_sha256"],
        "b".repeat(64)
    );
    assert_eq!(m["profiles"]["llvm"]["same_source_as_build"], false);
    assert_eq!(m["profiles"]["llvm"]["overlap_with_previous_pct"], 99.5);
    assert_eq!(m["profiles"]["bolt"]["pgo_binary_sha256"], "c".repeat(64));
    assert_eq!(m["profiles"]["bolt"]["freshness_check"], "fresh");
    assert_eq!(m["pgo"]["profdata_bytes"], 14);
    // sha256("profdata bytes")
    assert_eq!(m["pgo"]["profdata_sha256"].as_str().unwrap().len(), 64);
    assert_eq!(m["bolt"]["functions_with_profile"], 812);
    assert_eq!(m["bolt"]["functions_total"], 4000);
    assert_eq!(m["toolchain"]["rustc_llvm"], "22.1.2");
    let o = verify(&path);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = verify_pinned(&path);
    assert!(o.status.success(), "{}", stderr(&o));
    // The output directory (what `nix build` links as `result`) works as well as the marker,
    // through a symlink too; a directory without a marker names where it looked.
    let o = verify(&d);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("share/app/proof.json"),
        "{}",
        stderr(&o)
    );
    let result = d.join("result");
    std::os::unix::fs::symlink(&d, &result).unwrap();
    let o = verify(&result);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = verify(&d.join("share"));
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("no proof marker at")
            && stderr(&o).contains("share/share/*/proof.json"),
        "{}",
        stderr(&o)
    );
    // Named, the binary must be the marker's.
    let o = Command::new(ENGINE)
        .args(["verify-proof", "--binary", "app"])
        .arg(&d)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let o = Command::new(ENGINE)
        .args(["verify-proof", "--binary", "other"])
        .arg(&d)
        .output()
        .unwrap();
    assert!(
        stderr(&o).contains("share/other/proof.json"),
        "{}",
        stderr(&o)
    );
    let o = Command::new(ENGINE)
        .args(["verify-proof", "--binary", "other"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        stderr(&o).contains("the marker of app, not of other"),
        "{}",
        stderr(&o)
    );
    // Only the sources named count: a doc edit leaves the digest as it was.
    let built_from = |edit: &str| {
        let args = proof_inputs(&d, "h");
        write(&d.join(edit), "edited");
        let o = Command::new(ENGINE).args(&args).output().unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        let m: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        m["profiles"]["built_from_source_sha256"].clone()
    };
    let before = m["profiles"]["built_from_source_sha256"].clone();
    assert_eq!(built_from("src/docs/README.md"), before);
    assert_ne!(built_from("src/app/src/main.rs"), before);

    // Inconsistent manifests: proof refuses and writes nothing.
    let d2 = scratch("proof-bad");
    let o = Command::new(ENGINE)
        .args(proof_inputs(&d2, "other"))
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(!d2.join("share/app/proof.json").exists());
    // A verdict that vouched for another profile.
    let args = proof_inputs(&d2, "h");
    write(
        &d2.join("pinned-llvm/app.proftext"),
        "f\n# Func Hash:\n2\n# Num Counters:\n1\n# Counter Values:\n5\n",
    );
    let o = Command::new(ENGINE).args(&args).output().unwrap();
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("vouched for another profile"),
        "{}",
        stderr(&o)
    );
    // A BOLT log without the function count line.
    let args = proof_inputs(&d2, "h");
    write(&d2.join("bolt.log"), "BOLT-INFO: something else\n");
    let o = Command::new(ENGINE).args(&args).output().unwrap();
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("non-empty execution profile"),
        "{}",
        stderr(&o)
    );
    // Trained in the build: a valid marker that says so, with the reason, and that the release
    // rule refuses, naming the refresh command. Without a reason, no marker.
    let d3 = scratch("proof-trained-in-build");
    let o = Command::new(ENGINE)
        .args(proof_inputs_trained_in_build(&d3))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let path = d3.join("share/app/proof.json");
    let m: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(m["profiles"]["provenance"], "trained in build");
    assert_eq!(m["profiles"]["llvm"]["provenance"], "trained in build");
    assert_eq!(m["profiles"]["llvm"]["freshness_check"], "trained in build");
    assert_eq!(
        m["profiles"]["llvm"]["reason"],
        "no pinned llvm profile at profiles/t/rust-1.95.0/llvm"
    );
    assert_eq!(m["profiles"]["bolt"]["provenance"], "pinned");
    assert!(verify(&path).status.success());
    let o = verify_pinned(&path);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("trained in the build, not pinned")
            && stderr(&o).contains("llvm: no pinned llvm profile at profiles/t/rust-1.95.0/llvm")
            && stderr(&o).contains("`refresh-it`"),
        "{}",
        stderr(&o)
    );
    let mut args = proof_inputs_trained_in_build(&d3);
    let i = args
        .iter()
        .position(|a| a == "--llvm-trained-in-build")
        .unwrap();
    args[i + 1] = " ".into();
    let o = Command::new(ENGINE).args(&args).output().unwrap();
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("for no stated reason"),
        "{}",
        stderr(&o)
    );
    let _ = std::fs::remove_dir_all(&d);
    let _ = std::fs::remove_dir_all(&d2);
    let _ = std::fs::remove_dir_all(&d3);
}

/// A valid marker of `schema`: 4 as `proof` writes it, 3 as the gateway's trainer wrote it
/// before the engine was split out of it.
fn good_marker(schema: u64) -> serde_json::Value {
    let sha = "a".repeat(64);
    let mut m = serde_json::json!({
        "schema": schema,
        "target": "aarch64-unknown-linux-gnu",
        "pgo": { "profraw_files": 3, "profraw_bytes": 9000, "profdata_bytes": 4000,
                 "profdata_sha256": "a".repeat(64) },
        "bolt": { "fdata_files": 3, "fdata_bytes": 800, "functions_with_profile": 10,
                  "functions_total": 100 },
        "holdout": "h",
        "toolchain": { "rustc": "rustc 1.95.0" },
        "profiles": { "provenance": "pinned", "built_from_source_sha256": sha, "refresh_command": "refresh-it",
                      "llvm": { "provenance": "pinned", "sha256": sha, "trained_on_source_sha256": sha, "freshness_check": "fresh" },
                      "bolt": { "provenance": "pinned", "sha256": sha, "trained_on_source_sha256": sha, "freshness_check": "fresh" } }
    });
    let (workloads, checked) = if schema == 3 {
        ("shapes_trained", "requests_checked")
    } else {
        m["package"] = "app".into();
        m["binary"] = "app".into();
        ("workloads_trained", "outputs_checked")
    };
    for sec in ["pgo", "bolt"] {
        m[sec][workloads] = serde_json::json!(["w1"]);
    }
    m["pgo"][checked] = 3000.into();
    m
}

#[test]
fn verify_proof_rejects_bad_markers() {
    let d = scratch("verify");
    let good = good_marker(4);
    let path = d.join("proof.json");
    let check = |v: &serde_json::Value| {
        write(&path, &v.to_string());
        verify(&path)
    };
    assert!(check(&good).status.success());

    // Missing.
    let o = verify(&d.join("absent.json"));
    assert!(!o.status.success());
    assert!(stderr(&o).contains("no proof marker"), "{}", stderr(&o));
    // Not JSON.
    write(&path, "{");
    assert!(!verify(&path).status.success());
    // Each count zero, or missing.
    for (sec, key) in [
        ("pgo", "profraw_files"),
        ("pgo", "profraw_bytes"),
        ("pgo", "profdata_bytes"),
        ("bolt", "fdata_files"),
        ("bolt", "fdata_bytes"),
        ("bolt", "functions_with_profile"),
        ("bolt", "functions_total"),
    ] {
        let mut v = good.clone();
        v[sec][key] = 0.into();
        let o = check(&v);
        assert!(!o.status.success(), "{sec}.{key} = 0 accepted");
        assert!(
            stderr(&o).contains(&format!("{sec}.{key} is 0")),
            "{}",
            stderr(&o)
        );
        v[sec].as_object_mut().unwrap().remove(key);
        assert!(!check(&v).status.success(), "{sec}.{key} missing accepted");
    }
    // The outputs checked are the training command's to report: none is fine, zero is not.
    let mut v = good.clone();
    v["pgo"]["outputs_checked"] = 0.into();
    assert!(stderr(&check(&v)).contains("pgo.outputs_checked is 0"));
    v["pgo"]["outputs_checked"] = serde_json::Value::Null;
    assert!(check(&v).status.success());
    // A training that names no workloads and no holdout is a valid one.
    let mut v = good.clone();
    v["holdout"] = serde_json::Value::Null;
    v["pgo"]["workloads_trained"] = serde_json::json!([]);
    assert!(check(&v).status.success(), "{}", stderr(&check(&v)));
    // Inconsistent: the holdout among the trained workloads, more profiled functions than
    // functions, a bad digest, a wrong schema, no package or binary.
    let mut v = good.clone();
    v["bolt"]["workloads_trained"] = serde_json::json!(["w1", "h"]);
    let o = check(&v);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("holdout"), "{}", stderr(&o));
    let mut v = good.clone();
    v["bolt"]["functions_with_profile"] = 101.into();
    assert!(!check(&v).status.success());
    let mut v = good.clone();
    v["pgo"]["workloads_trained"] = serde_json::json!([""]);
    assert!(!check(&v).status.success());
    let mut v = good.clone();
    v["pgo"]["profdata_sha256"] = "xyz".into();
    assert!(!check(&v).status.success());
    let mut v = good.clone();
    v["schema"] = 2.into();
    assert!(!check(&v).status.success());
    for k in ["package", "binary"] {
        let mut v = good.clone();
        v.as_object_mut().unwrap().remove(k);
        assert!(stderr(&check(&v)).contains(&format!("no \"{k}\" named")));
    }
    // Provenance: a pinned profile whose freshness check did not pass, no provenance at all.
    let mut v = good.clone();
    v["profiles"]["bolt"]["freshness_check"] = "stale".into();
    assert!(stderr(&check(&v)).contains("profiles.bolt: pinned, but its freshness_check"));
    // Trained in build without a reason, or a top-level provenance its profiles contradict.
    let mut v = good.clone();
    v["profiles"]["bolt"]["provenance"] = "trained in build".into();
    v["profiles"]["bolt"]["freshness_check"] = "trained in build".into();
    assert!(stderr(&check(&v)).contains("no reason is given"));
    v["profiles"]["bolt"]["reason"] = "no pinned bolt profile".into();
    assert!(stderr(&check(&v)).contains("its profiles say otherwise"));
    v["profiles"]["provenance"] = "trained in build".into();
    assert!(check(&v).status.success());
    let mut v = good.clone();
    v.as_object_mut().unwrap().remove("profiles");
    assert!(!check(&v).status.success());
    let mut v = good.clone();
    v["holdout"] = "".into();
    assert!(!check(&v).status.success());
    // The target the artifact runs on must be named.
    let mut v = good.clone();
    v.as_object_mut().unwrap().remove("target");
    assert!(stderr(&check(&v)).contains("no \"target\" named"));
    let _ = std::fs::remove_dir_all(&d);
}

/// The gateway's markers of schema 3 (released before the engine was split out of its trainer)
/// still verify, by their own rules: a holdout, trained shapes and the requests checked.
#[test]
fn a_schema_3_marker_still_verifies() {
    let d = scratch("verify-3");
    let good = good_marker(3);
    let path = d.join("proof.json");
    let check = |v: &serde_json::Value| {
        write(&path, &v.to_string());
        verify(&path)
    };
    let o = check(&good);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("(gateway: pinned profiles"),
        "{}",
        stderr(&o)
    );
    let o = Command::new(ENGINE)
        .args(["verify-proof", "--require-pinned", "--binary", "gateway"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let mut v = good.clone();
    v["pgo"].as_object_mut().unwrap().remove("requests_checked");
    assert!(stderr(&check(&v)).contains("pgo.requests_checked is missing"));
    let mut v = good.clone();
    v["pgo"]["shapes_trained"] = serde_json::json!([]);
    assert!(stderr(&check(&v)).contains("pgo.shapes_trained is empty"));
    let mut v = good.clone();
    v["holdout"] = serde_json::Value::Null;
    assert!(stderr(&check(&v)).contains("no holdout named"));
    let _ = std::fs::remove_dir_all(&d);
}

/// A pinned manifest of the gateway written before the split (training `shapes` and
/// `requests_checked`) gives the same marker figures as one the engine writes.
#[test]
fn proof_reads_the_gateways_earlier_manifests() {
    let d = scratch("proof-old-manifests");
    let old = serde_json::json!({ "shapes": ["w1", "w2"], "holdout": "h", "requests_checked": 10,
                                  "profile_files": 1, "profile_bytes": 5000 });
    let o = Command::new(ENGINE)
        .args(proof_inputs_of(&d, old.clone(), old))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(d.join("share/app/proof.json")).unwrap()).unwrap();
    assert_eq!(
        m["pgo"]["workloads_trained"],
        serde_json::json!(["w1", "w2"])
    );
    assert_eq!(m["pgo"]["outputs_checked"], 10);
    assert_eq!(m["holdout"], "h");
    let _ = std::fs::remove_dir_all(&d);
}
