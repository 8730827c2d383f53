//! Translation of chat and Responses clients' requests for an Anthropic upstream (Codex bridged).

use super::tests::{drop, translate, v};
use super::*;
use serde_json::json;

/// A request shaped as Codex sends it (developer messages, a namespace tool, the hosted web
/// search, reasoning, include, store, cache key, client metadata) to an Anthropic upstream,
/// and a call of a namespaced tool back.
#[test]
fn codex_shaped_request_to_messages_and_namespaced_calls_back() {
    let body = br#"{"model":"x","stream":false,"store":false,"parallel_tool_calls":false,
        "reasoning":{"effort":"medium","summary":"auto"},"include":["reasoning.encrypted_content"],
        "prompt_cache_key":"k","client_metadata":{"a":"b"},"tool_choice":"auto",
        "input":[{"type":"message","id":"m0","role":"developer","content":[{"type":"input_text","text":"dev"}]},
                 {"type":"message","role":"user","content":[{"type":"input_text","text":"hi"}]},
                 {"type":"reasoning","id":"rs","summary":[],"encrypted_content":"zz"},
                 {"type":"function_call","call_id":"c1","namespace":"multi","name":"close","arguments":"{}"},
                 {"type":"function_call_output","call_id":"c1","output":"done"}],
        "tools":[{"type":"function","name":"exec_command","strict":false,"parameters":{"type":"object"}},
                 {"type":"namespace","name":"multi","description":"d","tools":[{"type":"function","name":"close","parameters":{"type":"object"}}]},
                 {"type":"web_search","external_web_access":true}]}"#;
    let err = translate(Dialect::Responses, Dialect::Messages, body, &[])
        .err()
        .unwrap();
    for part in [
        "reasoning.summary",
        "include",
        "prompt_cache_key",
        "client_metadata",
    ] {
        assert!(err.message.contains(part), "{part}: {}", err.message);
    }
    assert!(
        !err.message.contains("store"),
        "store: false is Anthropic's own behaviour"
    );
    let all = drop(&[
        "reasoning.summary",
        "include",
        "prompt_cache_key",
        "client_metadata",
    ]);
    let (b, t) = translate(Dialect::Responses, Dialect::Messages, body, &all).unwrap();
    let m = v(&b);
    assert_eq!(m["system"], "dev");
    let names: Vec<&str> = m["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["exec_command", "multi__close", "web_search"]);
    assert_eq!(m["tools"][2]["type"], "web_search_20250305");
    assert_eq!(
        m["tool_choice"],
        json!({"type":"auto","disable_parallel_tool_use":true})
    );
    assert_eq!(m["output_config"], json!({"effort":"medium"}));
    assert_eq!(m["messages"][1]["content"][0]["name"], "multi__close");
    assert_eq!(t.namespaces, ["multi"]);
    // The answer's call of the flattened tool goes back under its namespace.
    let answer = br#"{"id":"msg_1","type":"message","role":"assistant","model":"up",
        "content":[{"type":"tool_use","id":"t9","name":"multi__close","input":{"target":"a"}}],
        "stop_reason":"tool_use","usage":{"input_tokens":1,"output_tokens":1}}"#;
    let r = v(&t.response(answer, "alias").unwrap());
    assert_eq!(r["output"][0]["namespace"], "multi");
    assert_eq!(r["output"][0]["name"], "close");
}

/// A chat client's parameters that Anthropic lacks are refused (or dropped when the alias
/// says so) only when they ask for something: their default values pass.
#[test]
fn chat_only_parameters_are_noted_when_they_ask_for_something() {
    let body = |extra: &str| {
        format!(r#"{{"model":"x","messages":[{{"role":"user","content":"hi"}}]{extra}}}"#)
    };
    let passes = body(
        r#","n":1,"logprobs":false,"seed":null,"store":false,"response_format":{"type": "text"},
           "service_tier":"auto","modalities":["text"],"frequency_penalty":0,"safety_identifier":"u9""#,
    );
    let (b, _) = translate(Dialect::Chat, Dialect::Messages, passes.as_bytes(), &[]).unwrap();
    assert_eq!(v(&b)["metadata"], json!({"user_id": "u9"}));
    let asks = body(
        r#","n":2,"seed":7,"store":true,"response_format":{"type":"json_schema"},"logit_bias":{"1":2},
           "functions":[{"name":"f"}]"#,
    );
    let e = translate(Dialect::Chat, Dialect::Messages, asks.as_bytes(), &[])
        .err()
        .unwrap();
    let parts = [
        "n",
        "seed",
        "store",
        "response_format",
        "logit_bias",
        "functions",
    ];
    for part in parts {
        assert!(e.message.contains(part), "{part}: {}", e.message);
    }
    let all = drop(&parts);
    let (_, t) = translate(Dialect::Chat, Dialect::Messages, asks.as_bytes(), &all).unwrap();
    assert_eq!(
        t.dropped,
        "n,response_format,logit_bias,seed,store,functions"
    );
}

/// Codex's default sandbox restricts its web search (`external_web_access: false`), which
/// Anthropic's search cannot keep: the tool is refused whole, or left out whole when the alias
/// drops `tools.web_search`; the upstream never gets a live search the client restricted. Without
/// the restriction the tool maps, with its domain filter.
#[test]
fn a_restricted_web_search_is_never_widened() {
    let body = |tool: &str| {
        format!(
            r#"{{"model":"x","input":"hi","tools":[{{"type":"function","name":"f","parameters":{{}}}},{tool}]}}"#
        )
    };
    let restricted = body(r#"{"type":"web_search","external_web_access":false}"#);
    let err = translate(
        Dialect::Responses,
        Dialect::Messages,
        restricted.as_bytes(),
        &[],
    )
    .err()
    .unwrap();
    assert!(
        err.message
            .contains("tools.web_search (at tools[1].external_web_access)"),
        "{}",
        err.message
    );
    let (b, t) = translate(
        Dialect::Responses,
        Dialect::Messages,
        restricted.as_bytes(),
        &drop(&["tools.web_search"]),
    )
    .unwrap();
    assert_eq!(t.dropped, "tools.web_search");
    let m = v(&b);
    assert_eq!(m["tools"].as_array().unwrap().len(), 1, "{m}");
    assert!(!String::from_utf8_lossy(&b).contains("web_search"));
    // A filter Anthropic has no counterpart for narrows too: the tool goes with it.
    let blocked = body(
        r#"{"type":"web_search","filters":{"allowed_domains":["a.org"],"blocked_domains":["b.org"]}}"#,
    );
    let err = translate(
        Dialect::Responses,
        Dialect::Messages,
        blocked.as_bytes(),
        &[],
    )
    .err()
    .unwrap();
    assert!(
        err.message
            .contains("tools.web_search (at tools[1].filters.blocked_domains)"),
        "{}",
        err.message
    );
    let live = body(
        r#"{"type":"web_search","external_web_access":true,"filters":{"allowed_domains":["a.org"]}}"#,
    );
    let (b, t) = translate(
        Dialect::Responses,
        Dialect::Messages,
        live.as_bytes(),
        &drop(&["tools.web_search"]),
    )
    .unwrap();
    assert_eq!(t.dropped, "");
    assert_eq!(
        v(&b)["tools"][1],
        json!({"type":"web_search_20250305","name":"web_search","allowed_domains":["a.org"]})
    );
}

/// A `drop` entry that would leave a tool's restriction out alone is refused at load, naming
/// the tool to drop instead.
#[test]
fn drop_entries_never_name_a_restriction_alone() {
    let why = drop_entry_error("tools.web_search.external_web_access").unwrap();
    assert!(why.contains("\"tools.web_search\""), "{why}");
    assert!(drop_entry_error("tools.web_search.filters.allowed_domains").is_some());
    for fine in [
        "tools.web_search",
        "tools.web_search.search_context_size",
        "tools[].defer_loading",
        "cache_control",
        "top_p",
    ] {
        assert_eq!(drop_entry_error(fine), None, "{fine}");
    }
}

/// Anthropic's current models take `temperature` or `top_p`, not both: the pair is refused,
/// naming both, unless the alias drops `top_p`.
#[test]
fn temperature_with_top_p_is_refused_or_loses_top_p() {
    let body = br#"{"model":"x","messages":[{"role":"user","content":"hi"}],"temperature":0.2,"top_p":0.9}"#;
    let err = translate(Dialect::Chat, Dialect::Messages, body, &[])
        .err()
        .unwrap();
    assert!(
        err.message
            .contains("top_p (at top_p and temperature together)"),
        "{}",
        err.message
    );
    let (b, t) = translate(Dialect::Chat, Dialect::Messages, body, &drop(&["top_p"])).unwrap();
    assert_eq!(t.dropped, "top_p");
    let m = v(&b);
    assert_eq!(m["temperature"], 0.2);
    assert!(m.get("top_p").is_none());
    // Either alone crosses; to a chat upstream both do.
    let one = br#"{"model":"x","input":"hi","top_p":0.5}"#;
    assert_eq!(
        v(&translate(Dialect::Responses, Dialect::Messages, one, &[])
            .unwrap()
            .0)["top_p"],
        0.5
    );
    let both = br#"{"model":"x","max_tokens":3,"messages":[{"role":"user","content":"hi"}],"temperature":0.2,"top_p":0.9}"#;
    let c = v(&translate(Dialect::Messages, Dialect::Chat, both, &[])
        .unwrap()
        .0);
    assert_eq!(
        (c["temperature"].clone(), c["top_p"].clone()),
        (json!(0.2), json!(0.9))
    );
}

/// A namespace's description goes with each of its tools; `strict` crosses; OpenAI's item ids
/// and statuses are bookkeeping; members no rule knows are refused by path.
#[test]
fn codex_tool_details_cross_and_unknown_members_are_named() {
    let body = br#"{"model":"x","store":false,
        "input":[{"type":"message","id":"m1","status":"completed","role":"user","content":[{"type":"input_text","text":"hi"}]}],
        "tools":[{"type":"function","name":"f","strict":true,"parameters":{"type":"object"}},
                 {"type":"namespace","name":"multi","description":"Sub-agents.","tools":[
                     {"type":"function","name":"close","description":"Close one.","strict":false,"parameters":{}}]}]}"#;
    let (b, _) = translate(Dialect::Responses, Dialect::Messages, body, &[]).unwrap();
    let m = v(&b);
    assert_eq!(m["tools"][0]["strict"], true);
    assert_eq!(m["tools"][1]["description"], "Sub-agents.\n\nClose one.");
    assert!(m["tools"][1].get("strict").is_none());
    let more = br#"{"model":"x","input":"hi","background":true,"text":{"verbosity":"low"},
        "reasoning":{"effort":"low","generate_summary":"auto"},"max_tool_calls":null}"#;
    let err = translate(Dialect::Responses, Dialect::Messages, more, &[])
        .err()
        .unwrap();
    for part in ["background", "text.verbosity", "reasoning.generate_summary"] {
        assert!(err.message.contains(part), "{part}: {}", err.message);
    }
    assert!(!err.message.contains("max_tool_calls"), "null asks nothing");
    let img = br#"{"model":"x","messages":[{"role":"user","content":[
        {"type":"image_url","image_url":{"url":"https://e.com/i.png","detail":"high"}}]}]}"#;
    let err = translate(Dialect::Chat, Dialect::Messages, img, &[])
        .err()
        .unwrap();
    assert!(
        err.message
            .contains("messages[].content[].image_url.detail (at messages[0].content[0].image_url.detail)"),
        "{}",
        err.message
    );
}
