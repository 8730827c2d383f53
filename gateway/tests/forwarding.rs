//! What of the client's head reaches the upstream (docs/translation-policy.md, "Headers"): the
//! allow-listed headers of the upstream's own API, on the native route and across; never the
//! client's credentials, telemetry or the other API's headers. And the alias settings that decide
//! what a translation may leave out (`drop`) and what `GET /v1/models` says of an alias.

mod common;

use common::*;
use serde_json::{json, Value};

/// An upstream that answers every request with a minimal answer of its path's dialect.
fn upstream() -> RawUpstream {
    raw_upstream(|head, _body, s| {
        let path = head.split(' ').nth(1).unwrap_or("");
        let answer = if path == "/v1/messages" {
            json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "m",
                   "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn",
                   "stop_sequence": null, "usage": {"input_tokens": 1, "output_tokens": 1}})
        } else {
            json!({"id": "c1", "object": "chat.completion", "created": 1, "model": "m",
                   "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                                "finish_reason": "stop"}],
                   "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})
        };
        write_json(s, 200, &answer);
    })
}

/// The values of header `name` in a request head (lowercase names).
fn values(head: &str, name: &str) -> Vec<String> {
    head.lines()
        .filter_map(|l| l.split_once(':'))
        .filter(|(k, _)| k.trim().eq_ignore_ascii_case(name))
        .map(|(_, v)| v.trim().to_owned())
        .collect()
}

/// Headers a coding agent sends that are not its upstream's API.
const CLIENT_ONLY: [(&str, &str); 7] = [
    ("x-api-key", "sk-client-secret"),
    ("authorization", "Bearer client-secret"),
    ("user-agent", "claude-cli/2.1.332 (external, sdk-cli)"),
    ("x-stainless-lang", "js"),
    ("x-app", "cli"),
    ("anthropic-dangerous-direct-browser-access", "true"),
    ("openai-organization", "org-client"),
];

fn send(gw: &Proc, path: &str, extra: &[(&str, &str)], body: &Value) -> Resp {
    let mut h = vec![("content-type", "application/json")];
    h.extend_from_slice(&CLIENT_ONLY);
    h.extend_from_slice(extra);
    request(
        gw.addr,
        "POST",
        path,
        &h,
        &serde_json::to_vec(body).unwrap(),
    )
}

fn assert_no_client_only(head: &str) {
    for (name, value) in CLIENT_ONLY {
        for v in values(head, name) {
            assert_ne!(v, value, "{name} reached the upstream:\n{head}");
        }
    }
    for name in [
        "x-stainless-lang",
        "x-app",
        "anthropic-dangerous-direct-browser-access",
    ] {
        assert!(
            values(head, name).is_empty(),
            "{name} reached the upstream:\n{head}"
        );
    }
}

#[test]
fn native_routes_carry_their_apis_headers_and_nothing_else() {
    let up = upstream();
    let gw = start_gateway(&config(up.addr, 5000));
    let r = send(
        &gw,
        "/v1/messages?beta=true",
        &[
            ("anthropic-version", "2023-06-01"),
            (
                "anthropic-beta",
                "context-management-2025-06-27,effort-2025-11-24",
            ),
            ("anthropic-beta", "advanced-tool-use-2025-11-20"),
            ("openai-beta", "assistants=v2"),
        ],
        &json!({"model": "claude", "max_tokens": 8, "messages": user("hi"),
                "context_management": {"edits": []}}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let (head, _) = up.requests.recv().unwrap();
    assert_eq!(
        values(&head, "anthropic-beta"),
        ["context-management-2025-06-27,effort-2025-11-24,advanced-tool-use-2025-11-20"]
    );
    assert_eq!(values(&head, "anthropic-version"), ["2023-06-01"]);
    assert_eq!(values(&head, "x-api-key"), ["sk-test-anthropic"]);
    assert!(values(&head, "openai-beta").is_empty());
    assert_no_client_only(&head);

    let r = send(
        &gw,
        "/v1/chat/completions",
        &[
            ("openai-beta", "assistants=v2"),
            ("x-client-request-id", "req-42"),
            ("anthropic-beta", "context-1m-2025-08-07"),
        ],
        &json!({"model": "gpt", "messages": user("hi")}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let (head, _) = up.requests.recv().unwrap();
    assert_eq!(values(&head, "openai-beta"), ["assistants=v2"]);
    assert_eq!(values(&head, "x-client-request-id"), ["req-42"]);
    assert_eq!(values(&head, "authorization"), ["Bearer sk-test-openai"]);
    assert!(values(&head, "anthropic-beta").is_empty());
    assert_no_client_only(&head);
    assert_eq!(gw.terminate(), Some(0));
}

#[test]
fn bridged_routes_take_betas_as_parts() {
    let up = upstream();
    let mut cfg = config(up.addr, 5000);
    cfg["models"]["claude-on-gpt"] = json!({"provider": "up-openai", "model": "gpt-5"});
    cfg["models"]["claude-on-gpt-dropping"] = json!({"provider": "up-openai", "model": "gpt-5",
        "drop": ["anthropic-beta.context-1m"]});
    let gw = start_gateway(&cfg);
    let betas = [(
        "anthropic-beta",
        "claude-code-20250219,context-1m-2025-08-07",
    )];
    let body = |alias: &str| json!({"model": alias, "max_tokens": 8, "messages": user("hi")});
    // A beta that asks a chat upstream for what it cannot do is refused, naming it.
    let r = send(&gw, "/v1/messages", &betas, &body("claude-on-gpt"));
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(
        r.text().contains("anthropic-beta.context-1m"),
        "{}",
        r.text()
    );
    // Dropped when the alias says so, and said.
    let r = send(&gw, "/v1/messages", &betas, &body("claude-on-gpt-dropping"));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.header("x-gateway-dropped"),
        Some("anthropic-beta.context-1m")
    );
    let (head, body) = up.requests.recv().unwrap();
    assert!(values(&head, "anthropic-beta").is_empty(), "{head}");
    assert_no_client_only(&head);
    let sent: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(sent["max_completion_tokens"], 8, "{sent}");
    // Towards Anthropic a translated body is the gateway's, in the version it writes; the
    // client's betas are Anthropic's own header and go on.
    let r = send(
        &gw,
        "/v1/chat/completions",
        &[
            ("anthropic-version", "2099-01-01"),
            ("anthropic-beta", "context-1m-2025-08-07"),
        ],
        &json!({"model": "claude", "messages": user("hi")}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let (head, _) = up.requests.recv().unwrap();
    assert_eq!(values(&head, "anthropic-version"), ["2023-06-01"]);
    assert_eq!(values(&head, "anthropic-beta"), ["context-1m-2025-08-07"]);
    assert_eq!(gw.terminate(), Some(0));
}

#[test]
fn a_drop_entry_that_would_widen_a_tool_is_refused_at_load() {
    let mut cfg = config("127.0.0.1:9".parse().unwrap(), 5000);
    cfg["models"]["codex-on-claude"] = json!({"provider": "up-anthropic", "model": "m",
        "drop": ["include", "tools.web_search.external_web_access"]});
    let (ok, err) = validate(&cfg);
    assert!(!ok);
    assert!(
        err.contains("$.models.codex-on-claude.drop[1]") && err.contains("\"tools.web_search\""),
        "{err}"
    );
    cfg["models"]["codex-on-claude"]["drop"] = json!(["include", "tools.web_search"]);
    let (ok, err) = validate(&cfg);
    assert!(ok, "{err}");
}

#[test]
fn the_models_listing_gives_an_aliases_context_window() {
    let mut cfg = config("127.0.0.1:9".parse().unwrap(), 5000);
    cfg["models"]["claude"]["context_window"] = json!(200000);
    cfg["models"]["claude"]["max_output_tokens"] = json!(64000);
    let gw = start_gateway(&cfg);
    let v = get(gw.addr, "/v1/models").json();
    let by_id = |id: &str| {
        v["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["id"] == id)
            .cloned()
            .unwrap()
    };
    let claude = by_id("claude");
    assert_eq!(claude["max_input_tokens"], 200000);
    assert_eq!(claude["max_tokens"], 64000);
    assert!(by_id("gpt").get("max_input_tokens").is_none());
    assert_eq!(gw.terminate(), Some(0));
    cfg["models"]["claude"]["context_window"] = json!("big");
    let (ok, err) = validate(&cfg);
    assert!(
        !ok && err.contains("$.models.claude.context_window"),
        "{err}"
    );
}
