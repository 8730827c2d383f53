//! `trainer coverage` against the real gateway's `gateway paths`: the repository's shapes cover
//! every request path and posture; a removed shape and a shape for a route that does not exist
//! each fail, naming the combination.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

const TRAINER: &str = env!("CARGO_BIN_EXE_trainer");

/// The gateway binary next to the trainer's, built once if it is not there yet.
fn gateway() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let bin = Path::new(TRAINER).with_file_name("gateway");
            if !bin.exists() {
                let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
                let st = Command::new(cargo)
                    .args(["build", "-p", "gateway"])
                    .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join(".."))
                    .status()
                    .expect("run cargo build -p gateway");
                assert!(st.success(), "cargo build -p gateway failed");
            }
            bin
        })
        .clone()
}

fn repo_shapes() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../shapes")
}

/// A copy of the repository's shapes directory, for editing.
fn shapes_copy(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("trainer-coverage-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(d.join("payloads")).unwrap();
    for sub in ["", "payloads"] {
        for e in std::fs::read_dir(repo_shapes().join(sub)).unwrap() {
            let p = e.unwrap().path();
            if p.is_file() {
                std::fs::copy(&p, d.join(sub).join(p.file_name().unwrap())).unwrap();
            }
        }
    }
    d
}

fn coverage(shapes: &Path) -> Output {
    Command::new(TRAINER)
        .arg("coverage")
        .arg("--gateway")
        .arg(gateway())
        .arg("--shapes")
        .arg(shapes)
        .output()
        .unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn the_repository_shapes_cover_every_request_path_and_posture() {
    let o = coverage(&repo_shapes());
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}\n{}", stderr(&o));
    assert!(
        out.contains("every request path and posture is trained"),
        "{out}"
    );
    // The matrix comes from the gateway: 3 routes x 2 stream flags x 2 provider kinds.
    assert!(out.contains("coverage: 12 request paths"), "{out}");
}

#[test]
fn a_removed_shape_fails_naming_its_combination() {
    let d = shapes_copy("removed");
    for s in [
        "messages-minimal-stream",
        "messages-mid-stream",
        "agent-claude-code-stream",
        "chat-minimal-keys",
        "chat-minimal-multi-deployment",
    ] {
        std::fs::remove_file(d.join(format!("{s}.json"))).unwrap();
    }
    let o = coverage(&d);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(
        e.contains("no training shape for /v1/messages stream=true upstream=anthropic (native)"),
        "{e}"
    );
    assert!(e.contains("no training shape with posture keys"), "{e}");
    assert!(e.contains("no training shape with posture routing"), "{e}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_shape_for_a_route_that_does_not_exist_fails_naming_it() {
    let d = shapes_copy("unknown");
    let shape = |name: &str, endpoint: &str, upstream: &str| {
        format!(
            r#"{{"name":"{name}","endpoint":"{endpoint}","stream":false,"payload":"payloads/chat-minimal.json",
                "model":"gpt-4o-mini","upstream":"{upstream}","requests":1,"concurrency":1}}"#
        )
    };
    std::fs::write(
        d.join("embeddings.json"),
        shape("embeddings", "/v1/embeddings", "openai"),
    )
    .unwrap();
    std::fs::write(
        d.join("chat-to-gemini.json"),
        shape("chat-to-gemini", "/v1/chat/completions", "gemini"),
    )
    .unwrap();
    let o = coverage(&d);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(
        e.contains("shape embeddings names /v1/embeddings stream=false upstream=openai, which is not a request path the gateway serves"),
        "{e}"
    );
    assert!(
        e.contains("shape chat-to-gemini names /v1/chat/completions stream=false upstream=gemini"),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&d);
}
