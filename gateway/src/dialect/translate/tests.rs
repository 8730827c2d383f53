//! Translation in both directions: what every route shares (literals, images, refusals, decode
//! errors, damaged agent requests, the bridged streams' bytes).

use super::*;
use serde_json::{json, Value};

/// `request` for `up` with the model `"up"` and the default chat output cap, no betas.
pub(super) fn translate(
    client: Dialect,
    up: Dialect,
    body: &[u8],
    drop: &[String],
) -> Result<(Bytes, Translation), GwError> {
    let target = Target {
        dialect: up,
        model_json: br#""up""#,
        max_tokens: MaxTokensField::default(),
    };
    request(client, &target, body, None, drop)
}

pub(super) fn v(b: &Bytes) -> Value {
    serde_json::from_slice(b).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(b)))
}

pub(super) fn drop(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| n.to_string()).collect()
}

#[test]
fn chat_to_messages_keeps_literals_and_shapes_tools() {
    let body = br#"{"model":"x","messages":[
        {"role":"system","content":"s\u00e9 \"q\""},
        {"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo="}},{"type":"text","text":"b"}]},
        {"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"k\":[1,2]}"}},
                                                         {"id":"c2","type":"function","function":{"name":"g","arguments":"not json"}}]},
        {"role":"tool","tool_call_id":"c1","content":"r1"},
        {"role":"tool","tool_call_id":"c2","content":[{"type":"text","text":"r2"}]}],
        "tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],
        "stop":"END","temperature":0.25}"#;
    let r = chat::request::decode(body).unwrap();
    let m = v(&messages::request::encode(&r, br#""up""#));
    assert_eq!(m["model"], "up");
    assert_eq!(m["system"], "sé \"q\"");
    assert_eq!(m["max_tokens"], 4096);
    assert_eq!(m["temperature"], 0.25);
    assert_eq!(m["stop_sequences"], json!(["END"]));
    let msgs = m["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 3);
    assert_eq!(
        msgs[0]["content"],
        json!([{"type":"text","text":"a"},
               {"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}},
               {"type":"text","text":"b"}])
    );
    assert_eq!(msgs[1]["content"][0]["input"], json!({"k": [1, 2]}));
    assert_eq!(
        msgs[1]["content"][1]["input"],
        json!({}),
        "broken arguments become {{}}"
    );
    assert_eq!(msgs[2]["content"][0]["tool_use_id"], "c1");
    assert_eq!(msgs[2]["content"][1]["content"], "r2");
    assert_eq!(m["tools"][0]["input_schema"], json!({"type": "object"}));
}

#[test]
fn messages_to_chat_escapes_input_objects_into_argument_strings() {
    let body = br#"{"model":"x","max_tokens":9,"system":[{"type":"text","text":"s1"},{"type":"text","text":"s2"}],
        "messages":[{"role":"user","content":"hi"},
          {"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{"a":"\"x\""}}]},
          {"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"ok","is_error":true}]}],
        "tool_choice":{"type":"any"},"stream":true}"#;
    let r = messages::request::decode(body).unwrap();
    let c = v(&chat::request::encode(
        &r,
        br#""up""#,
        MaxTokensField::default(),
    ));
    let msgs = c["messages"].as_array().unwrap();
    let roles: Vec<&str> = msgs.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["system", "system", "user", "assistant", "tool"]);
    let args = msgs[3]["tool_calls"][0]["function"]["arguments"]
        .as_str()
        .unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(args).unwrap(),
        json!({"a": "\"x\""})
    );
    assert_eq!(c["tool_choice"], "required");
    assert_eq!(c["stream_options"], json!({"include_usage": true}));
    assert_eq!(c["max_completion_tokens"], 9);
}

#[test]
fn images_cross_in_both_directions() {
    // Anthropic → chat: a base64 source becomes a data URL, a url source stays a URL; the
    // client's order of text and images is kept, and a thinking block is left out.
    let body = br#"{"model":"x","max_tokens":9,"messages":[
        {"role":"user","content":[
            {"type":"image","source":{"type":"base64","media_type":"image/jpeg","data":"/9j/4AAQ"}},
            {"type":"text","text":"what is this?"},
            {"type":"image","source":{"type":"url","url":"https://example.com/cat.png"}}]},
        {"role":"assistant","content":[{"type":"thinking","thinking":"hm","signature":"s"},{"type":"text","text":"a cat"}]}]}"#;
    let c = v(&chat::request::encode(
        &messages::request::decode(body).unwrap(),
        br#""up""#,
        MaxTokensField::default(),
    ));
    assert_eq!(
        c["messages"][0]["content"],
        json!([{"type":"image_url","image_url":{"url":"data:image/jpeg;base64,/9j/4AAQ"}},
               {"type":"text","text":"what is this?"},
               {"type":"image_url","image_url":{"url":"https://example.com/cat.png"}}])
    );
    assert_eq!(c["messages"][1]["content"], "a cat");

    // Responses → Anthropic: input_image by URL (a string there, not an object).
    let body = br#"{"model":"x","input":[{"role":"user","content":[
        {"type":"input_text","text":"describe"},
        {"type":"input_image","image_url":"https://example.com/a.webp","detail":"auto"}]}]}"#;
    let m = v(&messages::request::encode(
        &responses::request::decode(body).unwrap(),
        br#""up""#,
    ));
    assert_eq!(
        m["messages"][0]["content"][1],
        json!({"type":"image","source":{"type":"url","url":"https://example.com/a.webp"}})
    );

    // Responses → chat: an inline image stays a data URL.
    let body = br#"{"model":"x","input":[{"role":"user","content":[
        {"type":"input_image","image_url":"data:image/gif;base64,R0lGOD"}]}]}"#;
    let c = v(&chat::request::encode(
        &responses::request::decode(body).unwrap(),
        br#""up""#,
        MaxTokensField::default(),
    ));
    assert_eq!(
        c["messages"][0]["content"],
        json!([{"type":"image_url","image_url":{"url":"data:image/gif;base64,R0lGOD"}}])
    );
}

#[test]
fn parts_without_a_translation_are_refused_not_dropped() {
    let chat = |content: &str| {
        let body = format!(r#"{{"model":"x","messages":[{{"role":"user","content":{content}}}]}}"#);
        chat::request::decode(body.as_bytes())
            .map(|_| ())
            .unwrap_err()
            .message
    };
    assert!(
        chat(r#"[{"type":"input_audio","input_audio":{"data":"AA==","format":"wav"}}]"#)
            .contains("\"input_audio\"")
    );
    assert!(chat(r#"[{"type":"file","file":{"file_id":"f1"}}]"#).contains("\"file\""));
    assert!(
        chat(r#"[{"type":"image_url","image_url":{"url":"ftp://x/y.png"}}]"#)
            .contains("http(s) URL")
    );
    assert!(
        chat(r#"[{"type":"image_url","image_url":{"url":"data:image/png,abc"}}]"#)
            .contains("base64")
    );
    let assistant_image = br#"{"model":"x","messages":[{"role":"assistant","content":[
        {"type":"image_url","image_url":{"url":"https://e.com/i.png"}}]}]}"#;
    assert!(chat::request::decode(assistant_image).is_err());
    let by_file_id = br#"{"model":"x","input":[{"role":"user","content":[
        {"type":"input_image","file_id":"file-1"}]}]}"#;
    let stored = br#"{"model":"x","input":[{"type":"item_reference","id":"msg_1"}]}"#;
    assert!(responses::request::decode(stored)
        .unwrap_err()
        .message
        .contains("\"item_reference\""));
    let reasoning = br#"{"model":"x","input":[{"type":"reasoning","id":"rs_1","summary":[]},
        {"role":"user","content":"hi"}]}"#;
    assert_eq!(
        responses::request::decode(reasoning)
            .unwrap()
            .messages
            .len(),
        1
    );
    assert!(responses::request::decode(by_file_id)
        .unwrap_err()
        .message
        .contains("file id"));
    let msgs = |content: &str| {
        let body = format!(
            r#"{{"model":"x","max_tokens":1,"messages":[{{"role":"user","content":{content}}}]}}"#
        );
        messages::request::decode(body.as_bytes())
            .map(|_| ())
            .unwrap_err()
            .message
    };
    assert!(msgs(
        r#"[{"type":"document","source":{"type":"text","media_type":"text/plain","data":"x"}}]"#
    )
    .contains("\"document\""));
    assert!(
        msgs(r#"[{"type":"image","source":{"type":"file","file_id":"f"}}]"#).contains("\"file\"")
    );
    assert!(
        msgs(r#"[{"type":"image","source":{"type":"base64","data":"AA=="}}]"#)
            .contains("media_type")
    );
    // Tool results carry text only across dialects.
    assert!(msgs(
        r#"[{"type":"tool_result","tool_use_id":"t","content":[{"type":"image","source":{"type":"url","url":"https://e.com/i.png"}}]}]"#
    )
    .contains("messages[0].content[0].content[0]"));
}

#[test]
fn rejects_wrong_types_with_400() {
    for body in [
        &br#"{"messages":"x"}"#[..],
        br#"{"messages":[{"role":"user","content":5}]}"#,
        br#"{"messages":[{"role":"wizard","content":"x"}]}"#,
        br#"{"messages":[],"tools":[{"function":{"name":7}}]}"#,
    ] {
        assert_eq!(
            chat::request::decode(body).err().unwrap().status,
            400,
            "{}",
            String::from_utf8_lossy(body)
        );
    }
    assert_eq!(
        messages::request::decode(br#"{"messages":[{"role":"user","content":{}}]}"#)
            .err()
            .unwrap()
            .status,
        400
    );
    assert_eq!(
        responses::request::decode(br#"{"input":3}"#)
            .err()
            .unwrap()
            .status,
        400
    );
}

/// Decode errors name the part in the request's own terms: no serde wording, no position.
#[test]
fn decode_errors_name_the_part() {
    let cases: [(Dialect, &[u8], &str); 5] = [
        (
            Dialect::Responses,
            br#"{"input":"hi","tools":[{"type":"function","name":"a"},{"type":"web_search"},{"type":"function","parameters":{}}]}"#,
            "tools[2].name is required",
        ),
        (
            Dialect::Messages,
            br#"{"max_tokens":1,"messages":[{"role":"user","content":"a"},{"content":"b"}]}"#,
            "messages[1].role is required",
        ),
        (
            Dialect::Messages,
            br#"{"max_tokens":1,"messages":[{"role":"user","content":[{"text":"b"}]}]}"#,
            "messages[0].content[0].type is required",
        ),
        (
            Dialect::Chat,
            br#"{"messages":[{"role":"user","content":"a"}],"max_tokens":"many"}"#,
            "max_tokens must be",
        ),
        (Dialect::Chat, br#"{"messages":[{"role":"user""#, "the JSON ends early"),
    ];
    for (client, body, want) in cases {
        let up = if client == Dialect::Chat {
            Dialect::Messages
        } else {
            Dialect::Chat
        };
        let e = translate(client, up, body, &[]).err().unwrap();
        assert!(e.message.contains(want), "{want:?} in {:?}", e.message);
        for internal in ["missing field", "line 1", "column", "invalid type"] {
            assert!(
                !e.message.contains(internal),
                "{internal:?} in {:?}",
                e.message
            );
        }
    }
}

/// The agent-shaped payloads (shapes/payloads), cut short and with bytes replaced at many
/// places, through every client dialect and both upstreams, with and without drop lists:
/// no panic, and no error that speaks the JSON library's words.
#[test]
fn damaged_agent_requests_get_errors_in_the_requests_terms() {
    let seeds: [&[u8]; 2] = [
        include_bytes!("../../../../shapes/payloads/agent-claude-code.json"),
        include_bytes!("../../../../shapes/payloads/agent-codex.json"),
    ];
    let drops = drop(&[
        "cache_control",
        "context_management",
        "reasoning.summary",
        "include",
        "prompt_cache_key",
        "client_metadata",
    ]);
    let check = |body: &[u8]| {
        for client in [Dialect::Chat, Dialect::Messages, Dialect::Responses] {
            for up in [Dialect::Chat, Dialect::Messages] {
                for d in [&[][..], &drops[..]] {
                    if let Err(e) = translate(client, up, body, d) {
                        for internal in ["missing field", " at line ", " column ", "invalid type"] {
                            assert!(
                                !e.message.contains(internal),
                                "{internal:?} in {:?}",
                                e.message
                            );
                        }
                    }
                }
            }
        }
    };
    for seed in seeds {
        check(seed);
        let step = seed.len() / 23;
        for at in (1..seed.len()).step_by(step) {
            check(&seed[..at]);
            for b in [b'0', b'"', b'}', b','] {
                let mut m = seed.to_vec();
                m[at] = b;
                check(&m);
            }
        }
    }
}

fn anth_tool_frames() -> Vec<String> {
    let ev = |e: &str, d: &str| format!("event: {e}\ndata: {d}\n\n");
    vec![
        ev(
            "message_start",
            r#"{"type":"message_start","message":{"id":"x\"y","type":"message","role":"assistant","model":"mock-claude","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":12,"output_tokens":1}}}"#,
        ),
        ev(
            "content_block_start",
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":"pre\b\f\u0001\u00e9\"x\\"}}"#,
        ),
        ev(
            "content_block_delta",
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a\bb\n\u2028"}}"#,
        ),
        ev(
            "content_block_stop",
            r#"{"type":"content_block_stop","index":0}"#,
        ),
        ev(
            "content_block_start",
            r#"{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_1","name":"ns__f\b","input":{}}}"#,
        ),
        ev("ping", r#"{"type":"ping"}"#),
        ev(
            "content_block_delta",
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"a\":"}}"#,
        ),
        ev(
            "content_block_delta",
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"1\f}"}}"#,
        ),
        ev(
            "content_block_stop",
            r#"{"type":"content_block_stop","index":1}"#,
        ),
        ev(
            "content_block_start",
            r#"{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_2","name":"g","input":{}}}"#,
        ),
        ev(
            "content_block_delta",
            r#"{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{}"}}"#,
        ),
        ev(
            "content_block_stop",
            r#"{"type":"content_block_stop","index":2}"#,
        ),
        ev(
            "message_delta",
            r#"{"type":"message_delta","delta":{"stop_reason":"max_tokens","stop_sequence":null},"usage":{"output_tokens":33}}"#,
        ),
        ev("message_stop", r#"{"type":"message_stop"}"#),
    ]
}

fn oai_tool_frames() -> Vec<String> {
    let p = r#"data: {"id":"c\u0041","object":"chat.completion.chunk","created":1700000000,"model":"m","choices":["#;
    let c = |x: &str| format!("{p}{x}]}}\n\n");
    vec![
        c(r#"{"index":0,"delta":{"role":"assistant","content":"hi\b\f\"\u00e9"},"logprobs":null,"finish_reason":null}"#),
        c(r#"{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"ns__f","arguments":""}}]},"finish_reason":null}"#),
        c(r#"{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"a\":1}"}}]},"finish_reason":null}"#),
        c(r#"{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_2","type":"function","function":{"name":"g","arguments":"{}"}}]},"finish_reason":null}"#),
        c(r#"{"index":0,"delta":{},"finish_reason":"tool_calls"}"#),
        format!("{p}],\"usage\":{{\"prompt_tokens\":12,\"completion_tokens\":33,\"total_tokens\":45}}}}\n\n"),
        "data: [DONE]\n\n".to_string(),
    ]
}

/// A translated stream's bytes with its generated ids (`msg_`/`fc_` and 24 hex digits) and
/// times (`created_at`) put as `ID` and `T`.
fn normalized(out: &[u8]) -> String {
    let s = String::from_utf8(out.to_vec()).unwrap();
    let mut r = String::new();
    let mut rest = s.as_str();
    while let Some(c) = rest.chars().next() {
        let hex24 = |t: &str| t.len() >= 24 && t.as_bytes()[..24].iter().all(u8::is_ascii_hexdigit);
        if let Some(t) = ["msg_", "fc_"]
            .iter()
            .find_map(|p| rest.strip_prefix(p).filter(|t| hex24(t)).map(|t| (p, t)))
        {
            r.push_str(t.0);
            r.push_str("ID");
            rest = &t.1[24..];
        } else if let Some(t) = rest.strip_prefix("\"created_at\":") {
            r.push_str("\"created_at\":T");
            rest = t.trim_start_matches(|c: char| c.is_ascii_digit());
        } else {
            r.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    r
}

/// The bridged streams' events written directly are byte for byte what serde_json wrote
/// when they were built as `Value`s (the golden files were written by that code): text with
/// escapes serde writes its own way, tool calls, a namespaced tool, a stop reason that is
/// not the end of a turn, and the error event after.
#[test]
fn bridged_streams_keep_their_bytes() {
    for (client, upstream, frames, golden) in [
        (
            Dialect::Responses,
            Dialect::Messages,
            anth_tool_frames(),
            include_str!("../responses/stream-golden-from-anthropic.txt"),
        ),
        (
            Dialect::Messages,
            Dialect::Chat,
            oai_tool_frames(),
            include_str!("../messages/stream-golden-from-chat.txt"),
        ),
    ] {
        let t = Translation {
            client,
            upstream,
            include_usage: true,
            namespaces: vec!["ns".to_string()],
            dropped: String::new(),
        };
        let mut t = t.stream("claude-haiku");
        let mut splitter = crate::sse::SseSplitter::default();
        let mut out = BytesMut::new();
        for f in frames {
            splitter.push(f.as_bytes());
            while let Some(ev) = splitter.next_event() {
                t.on_event(&ev, &mut out).unwrap();
            }
        }
        t.on_end(&mut out).unwrap();
        t.on_error(&GwError::bad_upstream("boom\u{8}"), &mut out);
        assert_eq!(normalized(&out), golden);
    }
}
