//! Each refusal of `strict`, with the real API's message and error shape, and what passes.

use super::*;

fn refused(d: Dialect, betas: &[&str], body: &str) -> serde_json::Value {
    let r = check(d, betas.iter().copied(), body.as_bytes()).expect_err(body);
    assert_eq!(r.status, 400);
    serde_json::from_slice(&r.body).unwrap()
}

fn passes(d: Dialect, betas: &[&str], body: &str) {
    if let Err(r) = check(d, betas.iter().copied(), body.as_bytes()) {
        panic!("{body}: {}", String::from_utf8_lossy(&r.body));
    }
}

fn anthropic_message(v: &serde_json::Value) -> &str {
    assert_eq!(v["type"], "error");
    assert_eq!(v["error"]["type"], "invalid_request_error");
    v["error"]["message"].as_str().unwrap()
}

const MSG: &str = r#""max_tokens":64,"messages":[{"role":"user","content":"hi"}]"#;

#[test]
fn messages_beta_field_needs_its_beta() {
    let body = format!(
        r#"{{"model":"claude-sonnet-4-5",{MSG},"context_management":{{"edits":[{{"type":"clear_thinking_20251015","keep":"all"}}]}}}}"#
    );
    let v = refused(Dialect::Messages, &[], &body);
    assert_eq!(
        anthropic_message(&v),
        "context_management: Extra inputs are not permitted"
    );
    // Another beta is not that one.
    refused(
        Dialect::Messages,
        &["interleaved-thinking-2025-05-14"],
        &body,
    );
    // Among others in one header, or in a header of its own.
    passes(
        Dialect::Messages,
        &["claude-code-20250219,context-management-2025-06-27, x"],
        &body,
    );
    passes(
        Dialect::Messages,
        &["oauth-2025-04-20", "context-management-2025-06-27"],
        &body,
    );
}

#[test]
fn messages_unknown_fields_top_level_and_in_a_custom_tool() {
    let v = refused(
        Dialect::Messages,
        &[],
        &format!(r#"{{"model":"m",{MSG},"reasoning_effort":"high"}}"#),
    );
    assert_eq!(
        anthropic_message(&v),
        "reasoning_effort: Extra inputs are not permitted"
    );
    let tools = r#""tools":[{"name":"a","input_schema":{"type":"object"}},{"name":"b","input_schema":{},"parameters":{}}]"#;
    let v = refused(
        Dialect::Messages,
        &[],
        &format!(r#"{{"model":"m",{MSG},{tools}}}"#),
    );
    assert_eq!(
        anthropic_message(&v),
        "tools.1.custom.parameters: Extra inputs are not permitted"
    );
    // Every documented custom-tool field, and a server tool's own fields, pass.
    let tools = r#""tools":[{"name":"a","description":"d","input_schema":{},"cache_control":{"type":"ephemeral"},"defer_loading":true,"eager_input_streaming":true,"strict":true,"input_examples":[],"allowed_callers":["direct"]},{"type":"web_search_20250305","name":"web_search","max_uses":3,"allowed_domains":["a.b"]}]"#;
    passes(
        Dialect::Messages,
        &[],
        &format!(
            r#"{{"model":"m",{MSG},{tools},"thinking":{{"type":"adaptive","display":"summarized"}},"output_config":{{"effort":"high"}},"metadata":{{"user_id":"u"}},"stream":true,"temperature":1,"system":"s"}}"#
        ),
    );
}

#[test]
fn messages_required_fields() {
    let v = refused(
        Dialect::Messages,
        &[],
        r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#,
    );
    assert_eq!(anthropic_message(&v), "max_tokens: Field required");
    let v = refused(Dialect::Messages, &[], r#"{"model":"m","max_tokens":1}"#);
    assert_eq!(anthropic_message(&v), "messages: Field required");
}

#[test]
fn temperature_with_top_p_by_claude_model() {
    let both =
        |model: &str| format!(r#"{{"model":"{model}",{MSG},"temperature":0.5,"top_p":0.9}}"#);
    for model in [
        "claude-opus-4-1",
        "claude-opus-4-1-20250805",
        "claude-opus-4-6",
        "claude-sonnet-4-5",
        "claude-sonnet-4-5-20250929",
        "claude-sonnet-4-6",
        "claude-haiku-4-5",
        "claude-sonnet-5",
    ] {
        let v = refused(Dialect::Messages, &[], &both(model));
        assert_eq!(
            anthropic_message(&v),
            "`temperature` and `top_p` cannot both be specified for this model. Please use only one.",
            "{model}"
        );
    }
    for model in [
        "claude-opus-4-20250514",
        "claude-sonnet-4-20250514",
        "claude-3-5-sonnet-20241022",
        "claude-3-haiku-20240307",
        "mock-claude",
    ] {
        passes(Dialect::Messages, &[], &both(model));
    }
    // One of the two is fine; a null is not given.
    passes(
        Dialect::Messages,
        &[],
        &format!(r#"{{"model":"claude-sonnet-4-5",{MSG},"temperature":0.5,"top_p":null}}"#),
    );
    // Opus 4.7 and later take no temperature at all.
    let v = refused(
        Dialect::Messages,
        &[],
        &format!(r#"{{"model":"claude-opus-4-7",{MSG},"temperature":0.5}}"#),
    );
    assert_eq!(
        anthropic_message(&v),
        "`temperature` is deprecated for this model."
    );
}

fn openai_error(v: &serde_json::Value) -> (&str, &serde_json::Value, &serde_json::Value) {
    let e = &v["error"];
    assert_eq!(e["type"], "invalid_request_error");
    (e["message"].as_str().unwrap(), &e["param"], &e["code"])
}

#[test]
fn chat_unknown_field_and_required_fields() {
    let v = refused(
        Dialect::Chat,
        &[],
        r#"{"model":"m","messages":[],"thinking":{"type":"enabled"}}"#,
    );
    assert_eq!(
        openai_error(&v),
        (
            "Unrecognized request argument supplied: thinking",
            &serde_json::Value::Null,
            &serde_json::Value::Null
        )
    );
    let v = refused(Dialect::Chat, &[], r#"{"model":"m"}"#);
    assert_eq!(
        openai_error(&v),
        (
            "Missing required parameter: 'messages'.",
            &serde_json::json!("messages"),
            &serde_json::json!("missing_required_parameter")
        )
    );
}

#[test]
fn chat_max_tokens_and_temperature_to_a_reasoning_model() {
    let body = |model: &str, extra: &str| {
        format!(r#"{{"model":"{model}","messages":[{{"role":"user","content":"hi"}}]{extra}}}"#)
    };
    for model in ["gpt-5", "gpt-5-mini", "gpt-5.1", "o1", "o3-mini", "o4-mini"] {
        let v = refused(Dialect::Chat, &[], &body(model, r#","max_tokens":100"#));
        assert_eq!(
            openai_error(&v),
            (
                "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.",
                &serde_json::json!("max_tokens"),
                &serde_json::json!("unsupported_parameter")
            ),
            "{model}"
        );
        passes(
            Dialect::Chat,
            &[],
            &body(model, r#","max_completion_tokens":100,"temperature":1"#),
        );
        let v = refused(Dialect::Chat, &[], &body(model, r#","temperature":0.2"#));
        assert_eq!(
            openai_error(&v).0,
            "Unsupported value: 'temperature' does not support 0.2 with this model. Only the default (1) value is supported."
        );
    }
    for model in ["gpt-4o", "gpt-4.1", "gpt-5-chat-latest", "mock-gpt", "omni"] {
        passes(
            Dialect::Chat,
            &[],
            &body(model, r#","max_tokens":100,"temperature":0.2"#),
        );
    }
}

#[test]
fn responses_unknown_field() {
    let v = refused(
        Dialect::Responses,
        &[],
        r#"{"model":"gpt-5","input":"hi","max_tokens":5}"#,
    );
    assert_eq!(
        openai_error(&v),
        (
            "Unknown parameter: 'max_tokens'.",
            &serde_json::json!("max_tokens"),
            &serde_json::json!("unknown_parameter")
        )
    );
    passes(
        Dialect::Responses,
        &[],
        r#"{"model":"gpt-5","input":"hi","instructions":"x","reasoning":{"effort":"low","summary":"auto"},"include":[],"prompt_cache_key":"k","client_metadata":{},"tools":[],"tool_choice":"auto","parallel_tool_calls":false,"store":false,"stream":true,"text":{"verbosity":"low"}}"#,
    );
}

#[test]
fn a_body_that_is_not_a_json_object_is_left_to_the_caller() {
    passes(Dialect::Chat, &[], "not json");
    passes(Dialect::Messages, &[], "[1,2]");
}

#[test]
fn thinking_kind_by_claude_model() {
    let body = |model: &str, thinking: &str| {
        format!(r#"{{"model":"{model}",{MSG},"thinking":{thinking}}}"#)
    };
    let adaptive = r#"{"type":"adaptive","display":"omitted"}"#;
    let enabled = r#"{"type":"enabled","budget_tokens":1024}"#;
    for model in [
        "claude-sonnet-4-5",
        "claude-haiku-4-5-20251001",
        "claude-opus-4-5",
        "claude-opus-4-1",
    ] {
        let v = refused(Dialect::Messages, &[], &body(model, adaptive));
        assert_eq!(
            anthropic_message(&v),
            "adaptive thinking is not supported on this model",
            "{model}"
        );
        passes(Dialect::Messages, &[], &body(model, enabled));
    }
    for model in [
        "claude-opus-4-7",
        "claude-opus-4-8",
        "claude-sonnet-5",
        "claude-fable-5",
    ] {
        let v = refused(Dialect::Messages, &[], &body(model, enabled));
        assert_eq!(
            anthropic_message(&v),
            r#""thinking.type.enabled" is not supported for this model. Use "thinking.type.adaptive" and "output_config.effort" to control thinking behavior."#,
            "{model}"
        );
        passes(Dialect::Messages, &[], &body(model, adaptive));
    }
    for model in ["claude-sonnet-4-6", "claude-opus-4-6", "mock-claude"] {
        passes(Dialect::Messages, &[], &body(model, adaptive));
        passes(Dialect::Messages, &[], &body(model, enabled));
    }
    passes(
        Dialect::Messages,
        &[],
        &body("claude-sonnet-4-5", r#"{"type":"disabled"}"#),
    );
}
