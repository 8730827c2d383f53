//! Translation of a Messages client's request for a chat upstream (Claude Code bridged).

use super::tests::{drop, translate, v};
use super::*;

/// A request shaped as Claude Code sends it (cache marks, a system message inside
/// `messages`, thinking and effort, metadata) to a chat upstream.
#[test]
fn claude_code_shaped_request_to_chat() {
    let body = br#"{"model":"x","max_tokens":64000,"stream":true,
        "metadata":{"user_id":"u-1"},"thinking":{"type":"adaptive"},
        "output_config":{"effort":"high"},
        "context_management":{"edits":[{"type":"clear_thinking_20251015","keep":"all"}]},
        "system":[{"type":"text","text":"s1"},{"type":"text","text":"s2","cache_control":{"type":"ephemeral"}}],
        "messages":[{"role":"user","content":[{"type":"text","text":"hi","cache_control":{"type":"ephemeral"}}]},
                    {"role":"system","content":"agents: x"},
                    {"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"Bash","input":{"command":"ls"}}]},
                    {"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"a.txt"}]}]}],
        "tools":[{"name":"Bash","input_schema":{"type":"object"}}],
        "tool_choice":{"type":"auto","disable_parallel_tool_use":true}}"#;
    let err = translate(Dialect::Messages, Dialect::Chat, body, &[])
        .err()
        .unwrap();
    assert_eq!(err.status, 400);
    assert!(
        err.message
            .contains("cache_control (at system[1].cache_control)"),
        "{}",
        err.message
    );
    assert!(
        err.message.contains("context_management"),
        "{}",
        err.message
    );
    let (b, t) = translate(
        Dialect::Messages,
        Dialect::Chat,
        body,
        &drop(&["cache_control", "context_management"]),
    )
    .unwrap();
    assert_eq!(t.dropped, "cache_control,context_management");
    let c = v(&b);
    let roles: Vec<&str> = c["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        ["system", "system", "user", "system", "assistant", "tool"]
    );
    assert_eq!(c["messages"][3]["content"], "agents: x");
    assert_eq!(c["messages"][5]["content"], "a.txt");
    assert_eq!(c["reasoning_effort"], "high");
    assert_eq!(c["user"], "u-1");
    assert_eq!(c["parallel_tool_calls"], false);
}

/// What Claude Code 2.1.332 sends besides (tests/agents/captures): a deferred tool, thinking's
/// `display`, a failed tool's result, and betas. Each part without a counterpart is named; the
/// documented drop list lets it through, the deferred tool left out whole, and the answer says
/// what was dropped.
#[test]
fn claude_code_2_1_332_parts_are_refused_or_dropped_by_name() {
    let body = br#"{"model":"x","max_tokens":32000,"stream":true,
        "thinking":{"type":"enabled","budget_tokens":31999,"display":"omitted"},
        "messages":[{"role":"user","content":"hi"},
            {"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"Bash","input":{"command":"ls"}}]},
            {"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"denied","is_error":true}]}],
        "tools":[{"name":"Bash","input_schema":{"type":"object"}},
                 {"name":"DeferredToolPlaceholder","description":"never call","input_schema":{"type":"object"},"defer_loading":true}]}"#;
    let betas = b"claude-code-20250219,interleaved-thinking-2025-05-14,\
        context-management-2025-06-27,thinking-token-count-2026-05-13,advanced-tool-use-2025-11-20";
    let target = Target {
        dialect: Dialect::Chat,
        model_json: br#""gpt-5""#,
        max_tokens: MaxTokensField::default(),
    };
    let err = request(Dialect::Messages, &target, body, Some(betas), &[])
        .err()
        .unwrap();
    for part in [
        "tools[].defer_loading (at tools[1].defer_loading)",
        "messages[].content[].is_error (at messages[2].content[0].is_error)",
        "anthropic-beta.thinking-token-count (at anthropic-beta: thinking-token-count-2026-05-13)",
    ] {
        assert!(err.message.contains(part), "{part}: {}", err.message);
    }
    for fine in ["display", "claude-code", "interleaved", "advanced-tool-use"] {
        assert!(!err.message.contains(fine), "{fine}: {}", err.message);
    }
    let list = drop(&[
        "tools[].defer_loading",
        "messages[].content[].is_error",
        "anthropic-beta.thinking-token-count",
    ]);
    let (b, t) = request(Dialect::Messages, &target, body, Some(betas), &list).unwrap();
    assert_eq!(
        t.dropped,
        "messages[].content[].is_error,tools[].defer_loading,anthropic-beta.thinking-token-count"
    );
    let c = v(&b);
    let tools: Vec<&str> = c["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(tools, ["Bash"], "the deferred tool is left out whole");
    assert_eq!(
        c["messages"][2],
        serde_json::json!({"role":"tool","tool_call_id":"t1","content":"denied"})
    );
    assert_eq!(c["max_completion_tokens"], 32000);
    assert!(c.get("max_tokens").is_none());
    assert_eq!(c["reasoning_effort"], "high");
}

/// A member no rule knows is refused under its path, wherever it is; a tool's takes the tool
/// with it when dropped (it may be a restriction).
#[test]
fn members_without_a_rule_are_refused_by_path() {
    let body = br#"{"model":"x","max_tokens":5,"speed":"fast","inference_geo":null,
        "messages":[{"role":"user","content":[{"type":"text","text":"hi","citations":[{"x":1}]}]}],
        "tools":[{"name":"a","input_schema":{"type":"object"},"allowed_callers":["code_execution_20250825"]},
                 {"name":"b","input_schema":{"type":"object"},"strict":true}]}"#;
    let err = translate(Dialect::Messages, Dialect::Chat, body, &[])
        .err()
        .unwrap();
    for part in [
        "speed",
        "messages[].content[].citations (at messages[0].content[0].citations)",
        "tools[].allowed_callers (at tools[0].allowed_callers)",
    ] {
        assert!(err.message.contains(part), "{part}: {}", err.message);
    }
    assert!(!err.message.contains("inference_geo"), "null asks nothing");
    let list = drop(&[
        "speed",
        "messages[].content[].citations",
        "tools[].allowed_callers",
    ]);
    let (b, _) = translate(Dialect::Messages, Dialect::Chat, body, &list).unwrap();
    let c = v(&b);
    assert_eq!(c["tools"].as_array().unwrap().len(), 1);
    assert_eq!(c["tools"][0]["function"]["name"], "b");
    assert_eq!(c["tools"][0]["function"]["strict"], true);
    assert_eq!(c["messages"][0]["content"], "hi");
}

/// A chat upstream that knows only `max_tokens` (the provider's `max_tokens_field`) gets it.
#[test]
fn the_output_cap_goes_where_the_provider_takes_it() {
    let body = br#"{"model":"x","max_tokens":7,"messages":[{"role":"user","content":"hi"}]}"#;
    for (field, name) in [
        (MaxTokensField::MaxCompletionTokens, "max_completion_tokens"),
        (MaxTokensField::MaxTokens, "max_tokens"),
    ] {
        let target = Target {
            dialect: Dialect::Chat,
            model_json: br#""m""#,
            max_tokens: field,
        };
        let (b, _) = request(Dialect::Messages, &target, body, None, &[]).unwrap();
        let c = v(&b);
        assert_eq!(c[name], 7);
        assert_eq!(c.as_object().unwrap().len(), 3, "{c}");
    }
}
