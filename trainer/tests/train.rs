//! `trainer train` and `holdout` as processes: real gateways stand-ins on 127.0.0.1 (`trainer
//! fake-gateway` behind small shell scripts), the repository's shapes, real files.

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

/// The engine's binary, built (or found up to date) by cargo next to the trainer's.
fn engine() -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let st = Command::new(cargo)
        .args(["build", "-q", "-p", "pgo-engine"])
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join(".."))
        .status()
        .expect("run cargo build -p pgo-engine");
    assert!(st.success(), "cargo build -p pgo-engine failed");
    Path::new(TRAINER).with_file_name("pgo-engine")
}

/// `trainer train` is the gateway's training command under the engine's contract: its profiles
/// land in the engine's profile directory, and its report is the engine's workload report.
#[test]
fn train_is_the_gateways_training_command_under_the_engine() {
    let d = scratch("engine");
    let gw = fake(&d, "");
    let (profiles, report, record) = (
        d.join("profiles"),
        d.join("report.json"),
        d.join("record.json"),
    );
    let only = "chat-minimal,messages-minimal";
    let o = Command::new(engine())
        .args(["train", "--kind", "llvm", "--binary"])
        .arg(&gw)
        .arg("--profile-dir")
        .arg(&profiles)
        .arg("--report")
        .arg(&report)
        .arg("--record")
        .arg(&record)
        .arg("--")
        .arg(TRAINER)
        .arg("train")
        .arg("--gateway")
        .arg(&gw)
        .arg("--shapes")
        .arg(shapes_dir())
        .arg("--out")
        .arg(&profiles)
        .arg("--profile-dir")
        .arg(d.join("raw"))
        .arg("--report")
        .arg(&report)
        .args(["--only", only, "--max-requests", "10"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&record).unwrap()).unwrap();
    assert_eq!(r["profile_files"], 2);
    assert_eq!(
        r["workload"]["workloads"],
        serde_json::json!(["chat-minimal", "messages-minimal"])
    );
    assert_eq!(r["workload"]["holdout"], holdout_name().as_str());
    assert_eq!(r["workload"]["checked"], 20);
    assert!(r["machine"]["own_cpu_pct"].is_number(), "{r}");
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
