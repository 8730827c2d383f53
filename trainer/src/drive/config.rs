//! A shape's gateway: its config for the shape's posture (both providers at the mock, the shape's
//! alias routed to its upstream kind), the environment it gets and the request a shape sends.
//! Training, the bench and the measurements all run a shape's gateway this way.

use bytes::Bytes;
use std::net::SocketAddr;
use std::path::Path;

use crate::drive::load;
use crate::drive::shapes;

/// The gateway config for a shape: one worker on a port the gateway picks (it reports it), both
/// providers at the mock, the standard aliases plus the shape's alias routed to its upstream
/// kind, and the shape's posture:
/// - `default`: observability on: Prometheus metrics on their own listener (`metrics_port`) and
///   the access log written to `access_log` (a file, so that the gateway log stays readable);
/// - `rate-limited`: the same plus a `limits.models` policy for the shape's alias with limits far
///   above what training sends, so the quota path runs on every request and never refuses;
/// - `keys`: the same plus one caller key (read from [`CALLER_KEY_ENV`], which the gateway gets
///   from [`gateway_env`]), which every request presents ([`request`]);
/// - `multi-deployment`: the same, with the shape's alias over two healthy deployments of its
///   upstream kind weighted 3:1 (a second provider at the mock), so every request takes the
///   routed path (choice, lease, per-deployment counts) and none falls back.
/// - `shared-limits`: the `rate-limited` policy shared through a Redis ([`with_store`] adds it),
///   so that admissions run from the replica's leases.
pub fn gateway_config(
    shape: &shapes::Shape,
    mock: SocketAddr,
    metrics_port: u16,
    access_log: &Path,
) -> serde_json::Value {
    let base = format!("http://{mock}");
    let mut models = serde_json::Map::new();
    models.insert(
        "gpt-4o-mini".into(),
        serde_json::json!({ "provider": "up-openai", "model": "mock-gpt" }),
    );
    models.insert(
        "claude-haiku".into(),
        serde_json::json!({ "provider": "up-anthropic", "model": "mock-claude" }),
    );
    let route = if shape.upstream == "anthropic" {
        serde_json::json!({ "provider": "up-anthropic", "model": "mock-claude" })
    } else {
        serde_json::json!({ "provider": "up-openai", "model": "mock-gpt" })
    };
    models.insert(shape.model.clone(), route);
    if !shape.drop.is_empty() {
        models[&shape.model]["drop"] = serde_json::json!(shape.drop);
    }
    let mut cfg = serde_json::json!({
        "listen": "127.0.0.1:0",
        "workers": 1,
        "providers": {
            "up-openai": { "kind": "openai", "base_url": base, "api_key_env": "UPSTREAM_OPENAI_KEY" },
            "up-anthropic": { "kind": "anthropic", "base_url": base, "api_key_env": "UPSTREAM_ANTHROPIC_KEY" }
        },
        "models": models,
        "metrics": { "listen": format!("127.0.0.1:{metrics_port}") },
        "access_log": { "path": access_log.to_string_lossy() },
    });
    if shape.posture == "keys" {
        with_caller_key(&mut cfg);
    }
    if shape.posture == "multi-deployment" {
        let (kind, provider, model) = if shape.upstream == "anthropic" {
            ("anthropic", "up-anthropic", "mock-claude")
        } else {
            ("openai", "up-openai", "mock-gpt")
        };
        let second = format!("{provider}-b");
        let env = cfg["providers"][provider]["api_key_env"].clone();
        cfg["providers"][&second] =
            serde_json::json!({ "kind": kind, "base_url": base, "api_key_env": env });
        cfg["models"][&shape.model] = serde_json::json!({ "deployments": [
            { "provider": provider, "model": model, "weight": 3 },
            { "provider": second, "model": format!("{model}-b"), "weight": 1 },
        ] });
    }
    if shape.posture == "rate-limited" || shape.posture == "shared-limits" {
        with_unreached_limits(&mut cfg, &shape.model);
    }
    if shape.posture == "budgets" {
        with_unreached_budget(&mut cfg, &shape.model);
    }
    if shape.posture == "traced" {
        // Every request sampled; nothing listens at the endpoint, so the exports fail off the
        // request path (counted), which is all training needs of them.
        cfg["tracing"] = serde_json::json!({
            "endpoint": "http://127.0.0.1:9/v1/traces", "sample_ratio": 1.0
        });
    }
    cfg
}

/// The `budgets` posture: the shape's alias priced, with a spend budget far above what training
/// sends, so every request reserves and settles its cost without ever being refused.
pub fn with_unreached_budget(cfg: &mut serde_json::Value, model: &str) {
    cfg["models"][model]["price"] =
        serde_json::json!({ "input": 2.5, "output": 10, "cached_input": 1.25 });
    cfg["budgets"] =
        serde_json::json!({ "models": { model: { "usd": 1_000_000_000, "period": "day" } } });
}

/// The `keys` posture: one caller key ([`CALLER_KEY`]), which every request must present.
pub fn with_caller_key(cfg: &mut serde_json::Value) {
    cfg["keys"] = serde_json::json!([{ "id": "trainer", "key_env": CALLER_KEY_ENV }]);
}

/// The `rate-limited` posture: a policy for `model` with limits far above what training and the
/// benches send, so the quota path runs on every request without ever refusing one.
pub fn with_unreached_limits(cfg: &mut serde_json::Value, model: &str) {
    cfg["limits"] = serde_json::json!({
        "models": {
            model: {
                "requests_per_minute": 1_000_000_000u64,
                "tokens_per_minute": 1_000_000_000_000u64,
                "max_concurrent": 100_000
            }
        }
    });
}

/// The environment variable the `keys` posture's caller key is read from, and the key.
pub const CALLER_KEY_ENV: &str = "TRAINER_CALLER_KEY";
pub const CALLER_KEY: &str = "sk-trainer-caller";

/// The environment of a gateway under training or bench: upstream keys the mock ignores, and the
/// caller key of the `keys` posture.
pub fn gateway_env() -> Vec<(&'static str, String)> {
    vec![
        ("UPSTREAM_OPENAI_KEY", "sk-mock-openai".to_string()),
        ("UPSTREAM_ANTHROPIC_KEY", "sk-mock-anthropic".to_string()),
        (CALLER_KEY_ENV, CALLER_KEY.to_string()),
    ]
}

/// The headers a shape's requests carry beyond the content type: the caller key where its posture
/// configures one.
pub fn caller_headers(shape: &shapes::Shape) -> Vec<(String, String)> {
    if shape.posture == "keys" {
        vec![("authorization".into(), format!("Bearer {CALLER_KEY}"))]
    } else {
        Vec::new()
    }
}

/// The request a shape sends: its payload to its endpoint, with [`caller_headers`].
pub fn request(shape: &shapes::Shape, body: Bytes) -> load::Request {
    caller_headers(shape).iter().fold(
        load::Request::post_json(&shape.endpoint, body),
        |r, (k, v)| r.header(k, v),
    )
}

/// Whether a shape's posture shares its limits through a Redis (one is started for it).
pub fn needs_redis(shape: &shapes::Shape) -> bool {
    shape.posture == "shared-limits"
}

/// The `shared-limits` posture's store: the shape's Redis at `redis`. `on_store_error: reject`
/// keeps the run honest: a store that does not answer makes requests 503, which the response
/// checks refuse, so a shape cannot pass on the fallback.
pub fn with_store(cfg: &mut serde_json::Value, redis: SocketAddr) {
    cfg["limits"]["store"] = serde_json::json!({
        "url": format!("redis://{redis}/0"),
        "prefix": "trainer:",
        "timeout_ms": 1000,
        "on_store_error": "reject"
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(posture: &str, model: &str, upstream: &str) -> shapes::Shape {
        serde_json::from_value(serde_json::json!({
            "name": "s", "endpoint": "/v1/messages", "payload": "p.json", "model": model,
            "upstream": upstream, "requests": 1, "concurrency": 1, "posture": posture
        }))
        .unwrap()
    }

    #[test]
    fn config_per_posture() {
        let mock: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let log = Path::new("/tmp/a.jsonl");
        let c = gateway_config(&shape("default", "my-alias", "anthropic"), mock, 5000, log);
        assert_eq!(c["listen"], "127.0.0.1:0");
        assert_eq!(c["models"]["my-alias"]["provider"], "up-anthropic");
        assert_eq!(c["models"]["gpt-4o-mini"]["provider"], "up-openai");
        assert_eq!(
            c["providers"]["up-openai"]["base_url"],
            "http://127.0.0.1:9"
        );
        assert_eq!(c["metrics"]["listen"], "127.0.0.1:5000");
        assert_eq!(c["access_log"]["path"], "/tmp/a.jsonl");
        assert!(c.get("limits").is_none());
        let c = gateway_config(
            &shape("rate-limited", "gpt-4o-mini", "openai"),
            mock,
            5000,
            log,
        );
        let p = &c["limits"]["models"]["gpt-4o-mini"];
        assert!(p["requests_per_minute"].as_u64().unwrap() >= 1_000_000_000);
        assert!(p["tokens_per_minute"].as_u64().unwrap() >= 1_000_000_000_000);
        assert!(c["limits"].get("store").is_none());
        let mut c = gateway_config(
            &shape("shared-limits", "gpt-4o-mini", "openai"),
            mock,
            5000,
            log,
        );
        assert_eq!(
            c["limits"]["models"]["gpt-4o-mini"], *p,
            "the same policy, shared"
        );
        with_store(&mut c, "127.0.0.1:6390".parse().unwrap());
        assert_eq!(c["limits"]["store"]["url"], "redis://127.0.0.1:6390/0");
        assert_eq!(c["limits"]["store"]["on_store_error"], "reject");
        let c = gateway_config(
            &shape("multi-deployment", "gpt-4o-mini", "openai"),
            mock,
            5000,
            log,
        );
        let d = c["models"]["gpt-4o-mini"]["deployments"]
            .as_array()
            .unwrap();
        assert_eq!(d.len(), 2);
        assert_eq!(
            (&d[0]["provider"], &d[0]["weight"]),
            (&"up-openai".into(), &3.into())
        );
        assert_eq!(
            (&d[1]["provider"], &d[1]["weight"]),
            (&"up-openai-b".into(), &1.into())
        );
        assert_eq!(
            c["providers"]["up-openai-b"]["base_url"],
            "http://127.0.0.1:9"
        );
        assert!(c.get("limits").is_none());
    }
}
