//! `trainer train`, `proof`, `verify-proof` and `holdout` as processes: real gateways stand-ins on 127.0.0.1
//! (`trainer fake-gateway` behind small shell scripts), the repository's shapes, real files.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const TRAINER: &str = env!("CARGO_BIN_EXE_trainer");

fn shapes_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../shapes")
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("trainer-it-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A "gateway" executable: a shell script running the fake gateway with `env` set, or `body`.
fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let p = dir.join(name);
    std::fs::write(&p, format!("#!/bin/sh\nTRAINER='{TRAINER}'\n{body}\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

fn fake(dir: &Path, env: &str) -> PathBuf {
    script(
        dir,
        "gateway",
        &format!("{env} exec \"$TRAINER\" fake-gateway \"$@\""),
    )
}

/// `$REDIS_SERVER`, else Debian's: shapes of the `shared-limits` posture start one.
fn redis_server() -> String {
    std::env::var("REDIS_SERVER").unwrap_or_else(|_| "/usr/bin/redis-server".into())
}

fn train(gateway: &Path, out: &Path, extra: &[&str]) -> Output {
    train_with(gateway, out, Some(&redis_server()), extra)
}

/// `trainer train` with `--redis-server` as given (`None`: without it).
fn train_with(gateway: &Path, out: &Path, redis: Option<&str>, extra: &[&str]) -> Output {
    let mut c = Command::new(TRAINER);
    c.arg("train")
        .arg("--gateway")
        .arg(gateway)
        .arg("--shapes")
        .arg(shapes_dir())
        .arg("--out")
        .arg(out)
        .args(extra);
    if let Some(r) = redis {
        c.arg("--redis-server").arg(r);
    }
    c.output().unwrap()
}

/// Trains only `shape` (at most `max_requests`) and requires a failure whose message names the
/// shape and contains every one of `causes`.
fn training_fails(gateway: &Path, out: &Path, shape: &str, max_requests: &str, causes: &[&str]) {
    let o = train(
        gateway,
        out,
        &["--only", shape, "--max-requests", max_requests],
    );
    let e = stderr(&o);
    assert!(
        !o.status.success(),
        "training with {} succeeded",
        gateway.display()
    );
    assert!(e.contains(&format!("training: shape {shape}")), "{e}");
    for cause in causes {
        assert!(e.contains(cause), "no {cause:?} in: {e}");
    }
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn holdout_name() -> String {
    for e in std::fs::read_dir(shapes_dir()).unwrap() {
        let p = e.unwrap().path();
        if p.extension().and_then(|x| x.to_str()) == Some("json") {
            let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
            if v["holdout"] == true {
                return v["name"].as_str().unwrap().to_owned();
            }
        }
    }
    panic!("no holdout shape");
}

#[test]
fn train_runs_every_shape_but_the_holdout() {
    let d = scratch("all");
    let gw = fake(&d, "");
    let out = d.join("out");
    let o = train(&gw, &out, &["--max-requests", "40"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("manifest.json")).unwrap()).unwrap();
    let holdout = holdout_name();
    assert_eq!(m["holdout"], holdout.as_str());
    assert_eq!(m["profile_kind"], "llvm");
    let trained: Vec<&str> = m["shapes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    let shape_files = std::fs::read_dir(shapes_dir())
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "json")
        })
        .count();
    assert_eq!(trained.len(), shape_files - 1);
    assert!(
        !trained.contains(&holdout.as_str()),
        "the holdout was trained"
    );
    assert!(!stderr(&o).contains(&format!("shape {holdout} (")));
    for s in m["shapes"].as_array().unwrap() {
        assert_eq!(s["requests_checked"], 40);
        assert_eq!(s["profile_files"], 1);
    }
    assert_eq!(m["profile_files"].as_u64().unwrap(), trained.len() as u64);
    // One profile per trained shape, named SHAPE.FILENAME; none for the holdout.
    let files: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".profraw"))
        .collect();
    assert_eq!(files.len(), trained.len());
    for t in &trained {
        assert!(
            files.iter().any(|f| f.starts_with(&format!("{t}.{t}-"))),
            "{t}"
        );
    }
    assert!(!files.iter().any(|f| f.starts_with(&holdout)));
    // The scratch profile dir is gone.
    assert!(!out.join(".profiles").exists());

    // Naming the holdout explicitly is refused.
    let o = train(&gw, &d.join("out2"), &["--only", &holdout]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("never trained"), "{}", stderr(&o));
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_binary_without_instrumentation_fails_with_no_profile() {
    let d = scratch("noprof");
    let gw = fake(&d, "FAKE_GATEWAY_PROFILE_BYTES=0");
    training_fails(&gw, &d.join("out"), "chat-minimal", "20", &["no profile"]);
    assert!(!d.join("out/manifest.json").exists());

    // A profile at or under the floor does not count either.
    let gw = fake(&d, "FAKE_GATEWAY_PROFILE_BYTES=1000");
    training_fails(
        &gw,
        &d.join("out"),
        "chat-minimal",
        "20",
        &["no profile", "1000 bytes"],
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_gateway_exiting_non_zero_fails_training() {
    let d = scratch("exit");
    // A wrapper that forwards SIGTERM to the real process and then exits 3.
    let gw = script(
        &d,
        "gateway",
        "\"$TRAINER\" fake-gateway \"$@\" &\nchild=$!\ntrap 'kill -TERM $child; wait $child; exit 3' TERM\nwait $child\nexit 3",
    );
    training_fails(
        &gw,
        &d.join("out"),
        "messages-minimal",
        "20",
        &["exit status 3"],
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_gateway_dying_by_a_signal_fails_training() {
    let d = scratch("signal");
    let gw = fake(&d, "FAKE_GATEWAY_ABORT=1");
    training_fails(
        &gw,
        &d.join("out"),
        "responses-minimal",
        "20",
        &["killed by signal 6"],
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_shared_limits_shape_needs_its_store() {
    let d = scratch("store");
    let shape = "chat-minimal-shared-limits";
    // The gateway says its store is down: the shape cannot pass on the fallback.
    let gw = fake(&d, "FAKE_GATEWAY_STORE_DOWN=1");
    training_fails(
        &gw,
        &d.join("out"),
        shape,
        "20",
        &["shared quota store was not up"],
    );
    // No Redis to give it.
    let gw = fake(&d, "");
    let o = train_with(&gw, &d.join("out"), None, &["--only", shape]);
    let e = stderr(&o);
    assert!(!o.status.success());
    assert!(e.contains(&format!("training: shape {shape}")), "{e}");
    assert!(e.contains("needs a Redis: pass --redis-server"), "{e}");
    // A Redis that is not one.
    let o = train_with(&gw, &d.join("out"), Some("/bin/true"), &["--only", shape]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("printed no version"), "{}", stderr(&o));
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_gateway_that_never_listens_fails_closed() {
    let d = scratch("deaf");
    let gw = script(&d, "gateway", "echo 'no listener here' >&2\nexit 0");
    let o = train(&gw, &d.join("out"), &["--only", "chat-minimal"]);
    let e = stderr(&o);
    assert!(!o.status.success());
    assert!(e.contains("training: shape chat-minimal"), "{e}");
    assert!(e.contains("exited during startup"), "{e}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_wrong_response_fails_training() {
    let d = scratch("wrong");
    // Answers every request with the mock's 500 error: the check must name it.
    let gw = fake(&d, "FAKE_GATEWAY_STATUS=500");
    training_fails(
        &gw,
        &d.join("out"),
        "chat-minimal-stream",
        "20",
        &[
            "training: shape chat-minimal-stream: wrong response",
            "status 500",
        ],
    );
    let _ = std::fs::remove_dir_all(&d);
}

/// With TRAINER_TEST_GATEWAY=path to a gateway built without instrumentation, the real binary
/// serves the board shape and training fails for want of a profile.
#[test]
fn real_gateway_without_instrumentation_fails_with_no_profile() {
    let Some(gw) = std::env::var_os("TRAINER_TEST_GATEWAY") else {
        eprintln!("TRAINER_TEST_GATEWAY not set: skipped");
        return;
    };
    let d = scratch("real");
    training_fails(
        Path::new(&gw),
        &d.join("out"),
        "chat-minimal",
        "200",
        &["training: shape chat-minimal: no profile"],
    );
    let _ = std::fs::remove_dir_all(&d);
}

// ---------------------------------------------------------------------------------------------
// proof / verify-proof

fn write(p: &Path, s: &str) {
    std::fs::write(p, s).unwrap();
}

/// A pinned profile directory as the pinned-profile stages leave it, and the verdict of its
/// freshness check.
fn pinned_dir(d: &Path, kind: &str, holdout: &str) -> (PathBuf, PathBuf) {
    use sha2::Digest;
    let dir = d.join(format!("pinned-{kind}"));
    std::fs::create_dir_all(&dir).unwrap();
    let (file, body) = if kind == "llvm" {
        (
            "gateway.proftext",
            "f\n# Func Hash:\n1\n# Num Counters:\n1\n# Counter Values:\n5\n",
        )
    } else {
        ("gateway.fdata", "1 main 0 1 main 4 0 7\n")
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
            "schema": 1, "kind": kind, "file": file, "sha256": sha, "system": "x86_64-linux",
            "trained_on": { "source_sha256": source, "pgo_binary_sha256": "c".repeat(64) },
            "training": { "shapes": ["chat-minimal"], "holdout": holdout, "requests_checked": 10,
                          "profile_files": 1, "profile_bytes": 5000 },
            "previous": { "sha256": "d".repeat(64), "overlap_pct": 99.5 }
        })
        .to_string(),
    );
    if kind == "llvm" {
        write(&dir.join("gateway.profdata"), "profdata bytes");
    }
    let verdict = d.join(format!("{kind}-verdict.json"));
    write(
        &verdict,
        &serde_json::json!({ "schema": 1, "kind": kind, "pinned_sha256": sha, "min_overlap_pct": 99.0, "verdict": "fresh" })
            .to_string(),
    );
    (dir, verdict)
}

fn proof_inputs(d: &Path, bolt_holdout: &str) -> Vec<String> {
    let (llvm, llvm_check) = pinned_dir(d, "llvm", "h");
    let (bolt, bolt_check) = pinned_dir(d, "bolt", bolt_holdout);
    write(
        &d.join("bolt.log"),
        "BOLT-INFO: 812 out of 4000 functions in the binary (20.3%) have non-empty execution profile\n",
    );
    write(
        &d.join("versions.json"),
        r#"{"rustc":"rustc 1.95.0","rustc_llvm":"22.1.2","llvm_profdata":"22.1.8","llvm_bolt":"22.1.8","provider":"offline-debian","target":"x86_64-unknown-linux-gnu"}"#,
    );
    std::fs::create_dir_all(d.join("src/gateway/src")).unwrap();
    std::fs::create_dir_all(d.join("src/third_party/hyper/src")).unwrap();
    for f in [
        "Cargo.toml",
        "Cargo.lock",
        "gateway/Cargo.toml",
        "gateway/src/main.rs",
        "third_party/hyper/Cargo.toml",
        "third_party/hyper/src/lib.rs",
    ] {
        write(&d.join("src").join(f), f);
    }
    let p = |n: &Path| n.to_string_lossy().into_owned();
    vec![
        "proof".into(),
        "--llvm-profile".into(),
        p(&llvm),
        "--bolt-profile".into(),
        p(&bolt),
        "--llvm-check".into(),
        p(&llvm_check),
        "--bolt-check".into(),
        p(&bolt_check),
        "--bolt-log".into(),
        p(&d.join("bolt.log")),
        "--versions".into(),
        p(&d.join("versions.json")),
        "--source".into(),
        p(&d.join("src")),
        "--refresh-command".into(),
        "refresh-it".into(),
        "--out".into(),
        p(&d.join("share/gateway/proof.json")),
    ]
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
    Command::new(TRAINER)
        .arg("verify-proof")
        .arg(path)
        .output()
        .unwrap()
}

fn verify_pinned(path: &Path) -> Output {
    Command::new(TRAINER)
        .args(["verify-proof", "--require-pinned"])
        .arg(path)
        .output()
        .unwrap()
}

#[test]
fn proof_is_written_and_verifies() {
    let d = scratch("proof");
    let o = Command::new(TRAINER)
        .args(proof_inputs(&d, "h"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let path = d.join("share/gateway/proof.json");
    let m: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(m["schema"], 3);
    assert_eq!(m["holdout"], "h");
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
        stderr(&o).contains("share/gateway/proof.json"),
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
            && stderr(&o).contains("share/share/gateway/proof.json"),
        "{}",
        stderr(&o)
    );

    // Inconsistent manifests: proof refuses and writes nothing.
    let d2 = scratch("proof-bad");
    let o = Command::new(TRAINER)
        .args(proof_inputs(&d2, "other"))
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(!d2.join("share/gateway/proof.json").exists());
    // A verdict that vouched for another profile.
    let args = proof_inputs(&d2, "h");
    write(
        &d2.join("pinned-llvm/gateway.proftext"),
        "f\n# Func Hash:\n2\n# Num Counters:\n1\n# Counter Values:\n5\n",
    );
    let o = Command::new(TRAINER).args(&args).output().unwrap();
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("vouched for another profile"),
        "{}",
        stderr(&o)
    );
    // A BOLT log without the function count line.
    let args = proof_inputs(&d2, "h");
    write(&d2.join("bolt.log"), "BOLT-INFO: something else\n");
    let o = Command::new(TRAINER).args(&args).output().unwrap();
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("non-empty execution profile"),
        "{}",
        stderr(&o)
    );
    // Trained in the build: a valid marker that says so, with the reason, and that the release
    // rule refuses, naming the refresh command. Without a reason, no marker.
    let d3 = scratch("proof-trained-in-build");
    let o = Command::new(TRAINER)
        .args(proof_inputs_trained_in_build(&d3))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let path = d3.join("share/gateway/proof.json");
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
    let o = Command::new(TRAINER).args(&args).output().unwrap();
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

#[test]
fn verify_proof_rejects_bad_markers() {
    let d = scratch("verify");
    let sha = "a".repeat(64);
    let good = serde_json::json!({
        "schema": 3,
        "target": "aarch64-unknown-linux-gnu",
        "pgo": { "profraw_files": 3, "profraw_bytes": 9000, "profdata_bytes": 4000,
                 "profdata_sha256": "a".repeat(64), "shapes_trained": ["chat-minimal"],
                 "requests_checked": 3000 },
        "bolt": { "fdata_files": 3, "fdata_bytes": 800, "functions_with_profile": 10,
                  "functions_total": 100, "shapes_trained": ["chat-minimal"] },
        "holdout": "h",
        "toolchain": { "rustc": "rustc 1.95.0" },
        "profiles": { "provenance": "pinned", "built_from_source_sha256": sha, "refresh_command": "refresh-it",
                      "llvm": { "provenance": "pinned", "sha256": sha, "trained_on_source_sha256": sha, "freshness_check": "fresh" },
                      "bolt": { "provenance": "pinned", "sha256": sha, "trained_on_source_sha256": sha, "freshness_check": "fresh" } }
    });
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
        ("pgo", "requests_checked"),
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
    // Inconsistent: the holdout among the trained shapes, more profiled functions than functions,
    // no shapes, a bad digest, a wrong schema.
    let mut v = good.clone();
    v["bolt"]["shapes_trained"] = serde_json::json!(["chat-minimal", "h"]);
    let o = check(&v);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("holdout"), "{}", stderr(&o));
    let mut v = good.clone();
    v["bolt"]["functions_with_profile"] = 101.into();
    assert!(!check(&v).status.success());
    let mut v = good.clone();
    v["pgo"]["shapes_trained"] = serde_json::json!([]);
    assert!(!check(&v).status.success());
    let mut v = good.clone();
    v["pgo"]["profdata_sha256"] = "xyz".into();
    assert!(!check(&v).status.success());
    let mut v = good.clone();
    v["schema"] = 2.into();
    assert!(!check(&v).status.success());
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

// ---------------------------------------------------------------------------------------------
// holdout

/// `trainer holdout` with the fake gateway as plain and optimized: a real batch on 127.0.0.1
/// that the gate cannot accept. The fake answers by itself, so its legs leave the rig core to the
/// load generator while the rig floor puts the load generator and the mock on it together: the
/// floor stays under 2x the gateway (only a gateway starved by other load could lower its legs
/// that far, and then the drift or the band refuses the batch). Whatever the timings, the gate
/// fails closed and names why.
#[test]
fn holdout_gate_fails_closed_on_an_invalid_batch() {
    let d = scratch("holdout");
    let gw = fake(&d, "");
    let json = d.join("holdout.json");
    let mut cmd = Command::new(TRAINER);
    cmd.arg("holdout")
        .arg("--plain")
        .arg(&gw)
        .arg("--optimized")
        .arg(&gw)
        .arg("--shapes")
        .arg(shapes_dir())
        .args([
            "--legs",
            "2",
            "--window-secs",
            "0.3",
            "--warmup-secs",
            "0.1",
        ])
        .arg("--no-nice")
        .arg("--json")
        .arg(&json);
    if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
        cmd.arg("--no-pin");
    }
    let o = cmd.output().unwrap();
    let (out, err) = (String::from_utf8_lossy(&o.stdout), stderr(&o));
    assert!(!o.status.success(), "the gate passed:\n{out}\n{err}");
    assert!(!out.contains("holdout gate passed"), "{out}");
    assert!(err.contains("holdout gate FAILED"), "{out}\n{err}");
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(report["legs"].as_array().map(Vec::len), Some(5), "{report}");
    if err.contains("INVALID") {
        // The reasons are in the report and the table as well as in the error.
        assert_eq!(report["valid"], false);
        let problems = report["problems"].as_array().unwrap();
        assert!(!problems.is_empty());
        for p in problems {
            let p = p.as_str().unwrap();
            assert!(
                err.contains(p) && out.contains(&format!("INVALID: {p}")),
                "{p}"
            );
        }
    } else {
        assert!(err.contains("INCONCLUSIVE"), "{out}\n{err}");
    }
    let _ = std::fs::remove_dir_all(&d);
}
