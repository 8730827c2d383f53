//! Caller API keys against the real gateway and mock: Bearer and x-api-key, 401 for a missing
//! or unknown key and 403 for a model the key may not use, each in the client's dialect; keys
//! (caller and upstream) never appear in logs, metrics or error bodies.

mod common;
mod posture_support;

use posture_support as ps;
use serde_json::json;

const KEY_A: &str = "sk-caller-team-a-0123456789";
const KEY_OPS: &str = "sk-caller-ops-9876543210";

#[test]
fn keys_statuses_dialects_and_secrecy() {
    let mock = common::start_mock();
    let dir = common::tmpdir("auth");
    let log = dir.join("access.jsonl");
    let cfg = ps::config(
        mock.addr,
        json!({
            "keys": [
                {"id": "team-a", "key_env": "GW_POSTURE_KEY_A", "models": ["gpt"]},
                {"id": "ops", "key_env": "GW_POSTURE_KEY_OPS"},
                {"id": "absent", "key_env": "GW_POSTURE_KEY_UNSET"}
            ],
            "metrics": {"listen": "127.0.0.1:0"},
            "access_log": {"path": log},
        }),
    );
    let gw = ps::start(
        &cfg,
        &[("GW_POSTURE_KEY_A", KEY_A), ("GW_POSTURE_KEY_OPS", KEY_OPS)],
    );
    assert!(
        gw.startup
            .iter()
            .any(|l| l.contains("GW_POSTURE_KEY_UNSET")),
        "an unset key variable is a warning: {:?}",
        gw.startup
    );
    let a = gw.addr;

    // Missing key: 401 in each dialect's error shape.
    let r = ps::post_with(a, "/v1/chat/completions", &[], &ps::chat("gpt", "hi"));
    assert_eq!(r.status, 401, "{}", r.text());
    assert_eq!(r.json()["error"]["type"], "authentication_error");
    let r = ps::post_with(a, "/v1/messages", &[], &ps::messages("claude", "hi", false));
    assert_eq!(r.status, 401);
    assert_eq!(r.json()["type"], "error");
    assert_eq!(r.json()["error"]["type"], "authentication_error");
    let r = ps::post_with(
        a,
        "/v1/responses",
        &[],
        &json!({"model": "gpt", "input": "hi"}),
    );
    assert_eq!(r.status, 401);
    assert_eq!(r.json()["error"]["type"], "authentication_error");

    // Unknown key, either header: 401.
    for h in [
        ("authorization", "Bearer sk-wrong"),
        ("x-api-key", "sk-wrong"),
    ] {
        let r = ps::post_with(a, "/v1/chat/completions", &[h], &ps::chat("gpt", "hi"));
        assert_eq!(r.status, 401, "{h:?}");
    }

    // Valid keys, both headers, case-insensitive scheme.
    let bearer_a = format!("Bearer {KEY_A}");
    let r = ps::post_with(
        a,
        "/v1/chat/completions",
        &[("authorization", &bearer_a)],
        &ps::chat("gpt", "hi"),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let lower = format!("bearer {KEY_OPS}");
    let r = ps::post_with(
        a,
        "/v1/messages",
        &[("authorization", &lower)],
        &ps::messages("claude", "hi", false),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let r = ps::post_with(
        a,
        "/v1/messages",
        &[("x-api-key", KEY_OPS)],
        &ps::messages("gpt", "hi", true),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.text().contains("message_stop"));

    // team-a may use gpt only: 403 in the client's dialect.
    let r = ps::post_with(
        a,
        "/v1/messages",
        &[("x-api-key", KEY_A)],
        &ps::messages("claude", "hi", false),
    );
    assert_eq!(r.status, 403, "{}", r.text());
    assert_eq!(r.json()["error"]["type"], "permission_error");
    let r = ps::post_with(
        a,
        "/v1/chat/completions",
        &[("authorization", &bearer_a)],
        &ps::chat("claude", "hi"),
    );
    assert_eq!(r.status, 403);
    assert_eq!(r.json()["error"]["type"], "permission_error");
    assert!(!r.text().contains(KEY_A));

    // The access log names the key id, never a key.
    let lines = ps::log_lines(&log, 10);
    assert_eq!(lines.len(), 10, "{lines:#?}");
    let statuses: Vec<u64> = lines
        .iter()
        .map(|l| l["status"].as_u64().unwrap())
        .collect();
    assert_eq!(statuses, [401, 401, 401, 401, 401, 200, 200, 200, 403, 403]);
    assert_eq!(lines[5]["key_id"], "team-a");
    assert_eq!(lines[6]["key_id"], "ops");
    assert_eq!(lines[0]["key_id"], serde_json::Value::Null);

    let scrape = gw.scrape();
    assert!(
        ps::metric(
            &scrape,
            "gateway_requests_total{route=\"/v1/chat/completions\",model=\"none\",status=\"401\"}"
        ) >= Some(3.0),
        "{scrape}"
    );
    assert_eq!(
        ps::metric(
            &scrape,
            "gateway_requests_total{route=\"/v1/messages\",model=\"claude\",status=\"403\"}"
        ),
        Some(1.0)
    );

    let log_text = std::fs::read_to_string(&log).unwrap();
    let stderr = gw.drain_stderr().join("\n") + &gw.startup.join("\n");
    for secret in [
        KEY_A,
        KEY_OPS,
        "sk-upstream-openai-SECRET",
        "sk-upstream-anthropic-SECRET",
    ] {
        assert!(!log_text.contains(secret), "{secret} in access log");
        assert!(!stderr.contains(secret), "{secret} on stderr");
        assert!(!scrape.contains(secret), "{secret} in metrics");
    }
    assert_eq!(gw.terminate(), Some(0));
}

#[test]
fn no_keys_is_an_open_gateway() {
    let mock = common::start_mock();
    let gw = ps::start(
        &ps::config(mock.addr, json!({"access_log": {"enabled": false}})),
        &[],
    );
    let r = ps::post_with(gw.addr, "/v1/chat/completions", &[], &ps::chat("gpt", "hi"));
    assert_eq!(r.status, 200, "{}", r.text());
    // A key sent to an open gateway is ignored.
    let r = ps::post_with(
        gw.addr,
        "/v1/messages",
        &[("x-api-key", "whatever")],
        &ps::messages("claude", "hi", false),
    );
    assert_eq!(r.status, 200);
    assert_eq!(gw.terminate(), Some(0));
}

#[test]
fn validate_reports_key_and_limit_errors_with_paths() {
    let dir = common::tmpdir("auth-validate");
    let path = dir.join("bad.json");
    let cfg = ps::config(
        "127.0.0.1:9".parse().unwrap(),
        json!({
            "keys": [{"id": "a", "key_env": "X"}, {"id": "a", "key_env": "Y"}, {"id": "b"}],
            "limits": {"keys": {"nobody": {"requests_per_minute": 1}},
                       "models": {"gpt": {"max_concurrent": 0}}},
            "metrics": {"listen": "not-an-address"},
        }),
    );
    std::fs::write(&path, serde_json::to_vec(&cfg).unwrap()).unwrap();
    let out = std::process::Command::new(common::gateway_bin())
        .args(["validate", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    for p in [
        "$.keys[1].id",
        "$.keys[2]",
        "$.limits.keys.nobody",
        "$.limits.models.gpt.max_concurrent",
        "$.metrics",
    ] {
        assert!(err.contains(p), "{p} missing from:\n{err}");
    }
}
