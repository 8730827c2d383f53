//! Shape files (`shapes/*.json`, one per shape; see `docs/contracts.md`): the one place the
//! training matrix and the holdout are listed.

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use serde::Deserialize;
use std::path::Path;

use crate::mock::wire::Dialect;

/// One shape file.
#[derive(Clone, Debug, Deserialize)]
pub struct Shape {
    pub name: String,
    pub endpoint: String,
    #[serde(default)]
    pub stream: bool,
    pub payload: String,
    pub model: String,
    pub upstream: String,
    pub requests: u64,
    pub concurrency: usize,
    #[serde(default = "default_posture")]
    pub posture: String,
    #[serde(default)]
    pub holdout: bool,
    /// The alias's `drop` list (docs/translation-policy.md): the request parts a bridged shape
    /// carries that have no counterpart upstream, which its training config lets translation
    /// drop rather than refuse. Empty when absent.
    #[serde(default)]
    pub drop: Vec<String>,
}

fn default_posture() -> String {
    "default".into()
}

/// Postures a shape may ask for.
pub const POSTURES: &[&str] = &[
    "default",
    "rate-limited",
    "keys",
    "multi-deployment",
    "shared-limits",
    "budgets",
    "traced",
];

/// A shape with its payload read.
#[derive(Clone, Debug)]
pub struct Loaded {
    pub shape: Shape,
    pub body: Bytes,
    pub dialect: Dialect,
}

/// The client dialect an endpoint speaks.
pub fn dialect_of(endpoint: &str) -> Option<Dialect> {
    match endpoint {
        "/v1/chat/completions" => Some(Dialect::Chat),
        "/v1/responses" => Some(Dialect::Responses),
        "/v1/messages" => Some(Dialect::Messages),
        _ => None,
    }
}

/// Read and check one shape file.
pub fn load(path: &Path) -> Result<Loaded> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading shape {}", path.display()))?;
    let shape: Shape =
        serde_json::from_str(&text).with_context(|| format!("parsing shape {}", path.display()))?;
    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    let ctx = |msg: String| anyhow::anyhow!("shape {}: {msg}", path.display());
    if shape.name != stem {
        return Err(ctx(format!(
            "name {:?} differs from the file stem {stem:?}",
            shape.name
        )));
    }
    let dialect = dialect_of(&shape.endpoint)
        .ok_or_else(|| ctx(format!("unknown endpoint {:?}", shape.endpoint)))?;
    if shape.upstream != "openai" && shape.upstream != "anthropic" {
        return Err(ctx(format!(
            "upstream must be \"openai\" or \"anthropic\", not {:?}",
            shape.upstream
        )));
    }
    if !POSTURES.contains(&shape.posture.as_str()) {
        return Err(ctx(format!(
            "posture must be one of {POSTURES:?}, not {:?}",
            shape.posture
        )));
    }
    if shape.requests == 0 || shape.concurrency == 0 {
        return Err(ctx("requests and concurrency must be positive".into()));
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    let payload_path = dir.join(&shape.payload);
    let body = std::fs::read(&payload_path).with_context(|| {
        format!(
            "reading payload {} of shape {}",
            payload_path.display(),
            shape.name
        )
    })?;
    let v: serde_json::Value = serde_json::from_slice(&body)
        .with_context(|| format!("payload {} is not JSON", payload_path.display()))?;
    if v.get("model").and_then(|m| m.as_str()) != Some(shape.model.as_str()) {
        return Err(ctx(format!(
            "payload's model is not the shape's model {:?}",
            shape.model
        )));
    }
    let stream = v.get("stream").and_then(|s| s.as_bool()).unwrap_or(false);
    if stream != shape.stream {
        return Err(ctx(format!(
            "payload's stream flag ({stream}) differs from the shape's ({})",
            shape.stream
        )));
    }
    Ok(Loaded {
        shape,

        body: Bytes::from(body),
        dialect,
    })
}

/// Every shape in `dir` (its `*.json` files, not the payloads), sorted by name; fails unless
/// exactly one is the holdout.
pub fn load_dir(dir: &Path) -> Result<Vec<Loaded>> {
    let mut paths = Vec::new();
    for e in
        std::fs::read_dir(dir).with_context(|| format!("reading shapes dir {}", dir.display()))?
    {
        let p = e?.path();
        if p.is_file() && p.extension().and_then(|x| x.to_str()) == Some("json") {
            paths.push(p);
        }
    }
    paths.sort();
    let shapes = paths.iter().map(|p| load(p)).collect::<Result<Vec<_>>>()?;
    let holdouts: Vec<&str> = shapes
        .iter()
        .filter(|s| s.shape.holdout)
        .map(|s| s.shape.name.as_str())
        .collect();
    if holdouts.len() != 1 {
        bail!(
            "shapes dir {}: exactly one shape must be \"holdout\": true, found {} ({})",
            dir.display(),
            holdouts.len(),
            holdouts.join(", ")
        );
    }
    if shapes.iter().all(|s| s.shape.holdout) {
        bail!("shapes dir {}: no training shape", dir.display());
    }
    Ok(shapes)
}

#[cfg(test)]
mod tests {
    use super::*;

    pub fn repo_shapes() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../shapes")
    }

    #[test]
    fn repository_shapes_parse_and_exactly_one_is_holdout() {
        let shapes = load_dir(&repo_shapes()).unwrap();
        assert_eq!(shapes.iter().filter(|s| s.shape.holdout).count(), 1);
        // Which request paths and postures the shapes must cover is the coverage gate's
        // (`trainer coverage`, tests/coverage.rs): it takes the list from the gateway itself.
        // Here: the minimal and mid body sizes of every native dialect, streaming and not.
        for d in [Dialect::Chat, Dialect::Messages, Dialect::Responses] {
            for stream in [false, true] {
                for small in [true, false] {
                    assert!(
                        shapes.iter().any(|s| !s.shape.holdout
                            && s.dialect == d
                            && s.shape.stream == stream
                            && (s.body.len() < 200) == small),
                        "no training shape for {d:?} stream={stream} minimal={small}"
                    );
                }
            }
        }
        let board = shapes
            .iter()
            .find(|s| s.shape.name == "chat-minimal")
            .unwrap();
        assert_eq!(board.body.len(), 87);
        assert!(!board.shape.stream && board.shape.model == "gpt-4o-mini");
        // Names say when a shape bridges: its upstream is not its dialect's own.
        let native = |s: &Loaded| match s.dialect {
            Dialect::Messages => "anthropic",
            _ => "openai",
        };
        for s in &shapes {
            assert!(native(s) == s.shape.upstream || s.shape.name.contains("to-"));
        }
    }

    #[test]
    fn two_holdouts_are_refused() {
        let d = std::env::temp_dir().join(format!("shapes-test-{}", std::process::id()));
        std::fs::create_dir_all(d.join("payloads")).unwrap();
        std::fs::write(d.join("payloads/p.json"), r#"{"model":"m"}"#).unwrap();
        for n in ["a", "b"] {
            std::fs::write(
                d.join(format!("{n}.json")),
                format!(
                    r#"{{"name":"{n}","endpoint":"/v1/chat/completions","payload":"payloads/p.json","model":"m","upstream":"openai","requests":1,"concurrency":1,"holdout":true}}"#
                ),
            )
            .unwrap();
        }
        let e = load_dir(&d).unwrap_err().to_string();
        assert!(e.contains("exactly one"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
