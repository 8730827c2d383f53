//! Wire fidelity of the three client dialects, native and translated, against the trainer's mock.
//! `gpt` routes to an openai provider, `claude` to an anthropic one.

mod common;

use common::*;
use serde_json::{json, Value};

const GREETING: &str = "Hello from the mock upstream.";

fn expected_text(frames: usize) -> String {
    let mut s = GREETING.to_owned();
    for k in 2..=frames {
        s.push_str(&format!(" word{k}"));
    }
    s
}

fn data_json(events: &[(String, String)]) -> Vec<Value> {
    events
        .iter()
        .filter(|(_, d)| d != "[DONE]")
        .map(|(_, d)| serde_json::from_str(d).unwrap())
        .collect()
}

// ---------- chat completions ----------

#[test]
fn chat_non_stream_native_and_translated() {
    let st = Stack::start();
    for model in ["gpt", "claude"] {
        let r = st.post(
            "/v1/chat/completions",
            &json!({"model": model, "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": "hi [[mock:frames:3]]"}]}),
        );
        assert_eq!(r.status, 200, "{model}: {}", r.text());
        let v = r.json();
        assert_eq!(v["object"], "chat.completion");
        assert_eq!(v["model"], model, "response model is the alias");
        assert_eq!(v["choices"][0]["message"]["content"], expected_text(3));
        assert_eq!(v["choices"][0]["finish_reason"], "stop");
        assert_eq!(v["usage"]["completion_tokens"], 3);
        assert!(v["usage"]["prompt_tokens"].as_u64().unwrap() > 0);
    }
    st.stop();
}

#[test]
fn chat_sse_frames_end_with_done() {
    let st = Stack::start();
    for model in ["gpt", "claude"] {
        let r = st.post(
            "/v1/chat/completions",
            &json!({"model": model, "stream": true, "messages": user("hi [[mock:frames:5]]")}),
        );
        assert_eq!(r.status, 200);
        assert!(r
            .header("content-type")
            .unwrap()
            .starts_with("text/event-stream"));
        let evs = r.events();
        assert!(
            evs.iter().all(|(e, _)| e.is_empty()),
            "chat frames carry no event names"
        );
        assert_eq!(evs.last().unwrap().1, "[DONE]", "{model}");
        let chunks = data_json(&evs);
        let text: String = chunks
            .iter()
            .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
            .collect();
        assert_eq!(text, expected_text(5), "{model}");
        for c in &chunks {
            assert_eq!(c["object"], "chat.completion.chunk");
            assert_eq!(c["model"], model);
        }
        let finish: Vec<_> = chunks
            .iter()
            .filter_map(|c| c["choices"][0]["finish_reason"].as_str())
            .collect();
        assert_eq!(finish, vec!["stop"], "{model}");
        assert!(
            chunks
                .iter()
                .all(|c| c.get("usage").is_none_or(Value::is_null)),
            "{model}: no usage chunk unless asked"
        );
    }
    st.stop();
}

#[test]
fn chat_sse_include_usage_gives_final_usage_chunk() {
    let st = Stack::start();
    for model in ["gpt", "claude"] {
        let r = st.post(
            "/v1/chat/completions",
            &json!({"model": model, "stream": true, "stream_options": {"include_usage": true},
                    "messages": user("hi [[mock:frames:4]]")}),
        );
        let chunks = data_json(&r.events());
        let last = chunks.last().unwrap();
        assert_eq!(last["choices"], json!([]), "{model}: {last}");
        assert_eq!(last["usage"]["completion_tokens"], 4);
        assert!(last["usage"]["prompt_tokens"].as_u64().unwrap() > 0);
        assert_eq!(
            last["usage"]["total_tokens"].as_u64().unwrap(),
            last["usage"]["prompt_tokens"].as_u64().unwrap() + 4
        );
    }
    st.stop();
}

#[test]
fn chat_tool_calls_and_streamed_tool_call_deltas() {
    let st = Stack::start();
    let tools = json!([{"type": "function", "function": {"name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]);
    for model in ["gpt", "claude"] {
        let r = st.post(
            "/v1/chat/completions",
            &json!({"model": model, "tools": tools, "messages": user("weather? [[mock:tool_call]]")}),
        );
        let v = r.json();
        let call = &v["choices"][0]["message"]["tool_calls"][0];
        assert_eq!(call["type"], "function");
        assert_eq!(call["function"]["name"], "get_weather", "{model}: {v}");
        let args: Value =
            serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
        assert_eq!(args, json!({"city": "Paris"}));
        assert!(call["id"].as_str().is_some_and(|s| !s.is_empty()));
        assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");

        let r = st.post(
            "/v1/chat/completions",
            &json!({"model": model, "stream": true, "tools": tools,
                    "messages": user("weather? [[mock:tool_call]]")}),
        );
        let chunks = data_json(&r.events());
        let mut name = String::new();
        let mut args = String::new();
        let mut ids = 0;
        for c in &chunks {
            for tc in c["choices"][0]["delta"]["tool_calls"]
                .as_array()
                .into_iter()
                .flatten()
            {
                assert_eq!(tc["index"], 0);
                if tc.get("id").is_some_and(|i| i.is_string()) {
                    ids += 1;
                }
                name.push_str(tc["function"]["name"].as_str().unwrap_or(""));
                args.push_str(tc["function"]["arguments"].as_str().unwrap_or(""));
            }
        }
        assert_eq!(ids, 1, "{model}: id sent once");
        assert_eq!(name, "get_weather");
        assert_eq!(
            serde_json::from_str::<Value>(&args).unwrap(),
            json!({"city": "Paris"})
        );
        let finish: Vec<_> = chunks
            .iter()
            .filter_map(|c| c["choices"][0]["finish_reason"].as_str())
            .collect();
        assert_eq!(finish, vec!["tool_calls"], "{model}");
    }
    st.stop();
}

// ---------- anthropic messages ----------

#[test]
fn messages_non_stream_native_and_translated() {
    let st = Stack::start();
    for model in ["claude", "gpt"] {
        let r = st.post(
            "/v1/messages",
            &json!({"model": model, "max_tokens": 64, "system": "be brief",
                    "messages": user("hi [[mock:frames:2]]")}),
        );
        assert_eq!(r.status, 200, "{}", r.text());
        let v = r.json();
        assert_eq!(v["type"], "message");
        assert_eq!(v["role"], "assistant");
        assert_eq!(v["model"], model);
        assert_eq!(v["content"][0]["type"], "text");
        assert_eq!(v["content"][0]["text"], expected_text(2));
        assert_eq!(v["stop_reason"], "end_turn");
        assert_eq!(v["usage"]["output_tokens"], 2);
        assert!(v["usage"]["input_tokens"].as_u64().unwrap() > 0);
    }
    st.stop();
}

/// Checks the Messages event grammar and returns (text, tool json, stop reason, output tokens).
fn check_messages_stream(model: &str, evs: &[(String, String)]) -> (String, String, String, u64) {
    let names: Vec<&str> = evs.iter().map(|(e, _)| e.as_str()).collect();
    assert_eq!(names.first(), Some(&"message_start"), "{model}: {names:?}");
    assert_eq!(names.last(), Some(&"message_stop"), "{model}: {names:?}");
    assert_eq!(
        names[names.len() - 2],
        "message_delta",
        "{model}: {names:?}"
    );
    let mut open: Option<u64> = None;
    let mut next = 0;
    let mut text = String::new();
    let mut tool = String::new();
    let mut stop = String::new();
    let mut out_tokens = 0;
    for (name, data) in evs {
        let v: Value = serde_json::from_str(data).unwrap();
        assert_eq!(v["type"], name.as_str(), "event name matches data type");
        match name.as_str() {
            "message_start" => {
                assert_eq!(v["message"]["model"], model);
                assert_eq!(v["message"]["content"], json!([]));
            }
            "content_block_start" => {
                assert!(
                    open.is_none(),
                    "{model}: block started while another is open"
                );
                assert_eq!(v["index"], next, "{model}: block indices sequential");
                open = Some(next);
                next += 1;
            }
            "content_block_delta" => {
                assert_eq!(
                    Some(v["index"].as_u64().unwrap()),
                    open,
                    "{model}: delta for open block"
                );
                text.push_str(v["delta"]["text"].as_str().unwrap_or(""));
                tool.push_str(v["delta"]["partial_json"].as_str().unwrap_or(""));
            }
            "content_block_stop" => {
                assert_eq!(Some(v["index"].as_u64().unwrap()), open);
                open = None;
            }
            "message_delta" => {
                assert!(open.is_none(), "{model}: every started block stopped");
                stop = v["delta"]["stop_reason"].as_str().unwrap().to_owned();
                out_tokens = v["usage"]["output_tokens"].as_u64().unwrap();
            }
            "ping" | "message_stop" => {}
            other => panic!("{model}: unexpected event {other}"),
        }
    }
    (text, tool, stop, out_tokens)
}

#[test]
fn messages_sse_event_order_native() {
    let st = Stack::start();
    let r = st.post(
        "/v1/messages",
        &json!({"model": "claude", "max_tokens": 64, "stream": true,
                "messages": user("hi [[mock:frames:6]]")}),
    );
    assert_eq!(r.status, 200);
    let evs = r.events();
    let start: Value = serde_json::from_str(&evs[0].1).unwrap();
    assert!(
        start["message"]["usage"]["input_tokens"].as_u64().unwrap() > 0,
        "input tokens in message_start"
    );
    let (text, _, stop, out) = check_messages_stream("claude", &evs);
    assert_eq!(text, expected_text(6));
    assert_eq!(stop, "end_turn");
    assert_eq!(out, 6, "message_delta carries cumulative output tokens");
    st.stop();
}

#[test]
fn messages_sse_event_order_translated() {
    let st = Stack::start();
    let r = st.post(
        "/v1/messages",
        &json!({"model": "gpt", "max_tokens": 64, "stream": true,
                "messages": user("hi [[mock:frames:6]]")}),
    );
    let evs = r.events();
    let (text, _, stop, out) = check_messages_stream("gpt", &evs);
    assert_eq!(text, expected_text(6));
    assert_eq!(stop, "end_turn");
    assert_eq!(out, 6);
    // A chat upstream reports input tokens only at the end: they arrive in message_delta.
    let delta: Value = serde_json::from_str(&evs[evs.len() - 2].1).unwrap();
    assert!(delta["usage"]["input_tokens"].as_u64().unwrap() > 0);
    st.stop();
}

#[test]
fn messages_tool_use_native_and_translated() {
    let st = Stack::start();
    let tools = json!([{"name": "get_weather", "input_schema": {"type": "object"}}]);
    for model in ["claude", "gpt"] {
        let r = st.post(
            "/v1/messages",
            &json!({"model": model, "max_tokens": 64, "tools": tools,
                    "messages": user("[[mock:tool_call]]")}),
        );
        let v = r.json();
        let block = v["content"]
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["type"] == "tool_use")
            .unwrap_or_else(|| panic!("{model}: no tool_use in {v}"));
        assert_eq!(block["name"], "get_weather");
        assert_eq!(block["input"], json!({"city": "Paris"}));
        assert_eq!(v["stop_reason"], "tool_use");

        let r = st.post(
            "/v1/messages",
            &json!({"model": model, "max_tokens": 64, "stream": true, "tools": tools,
                    "messages": user("[[mock:tool_call]]")}),
        );
        let (_, tool, stop, _) = check_messages_stream(model, &r.events());
        assert_eq!(
            serde_json::from_str::<Value>(&tool).unwrap(),
            json!({"city": "Paris"})
        );
        assert_eq!(stop, "tool_use");
    }
    st.stop();
}

// ---------- openai responses ----------

#[test]
fn responses_non_stream_shape() {
    let st = Stack::start();
    for model in ["gpt", "claude"] {
        let r = st.post(
            "/v1/responses",
            &json!({"model": model, "instructions": "be brief", "input": "hi [[mock:frames:3]]"}),
        );
        assert_eq!(r.status, 200, "{}", r.text());
        let v = r.json();
        assert_eq!(v["object"], "response");
        assert_eq!(v["status"], "completed");
        assert_eq!(v["model"], model);
        let msg = &v["output"][0];
        assert_eq!(msg["type"], "message");
        assert_eq!(msg["role"], "assistant");
        assert_eq!(msg["content"][0]["type"], "output_text");
        assert_eq!(msg["content"][0]["text"], expected_text(3));
        assert_eq!(v["usage"]["output_tokens"], 3);
        assert!(v["usage"]["input_tokens"].as_u64().unwrap() > 0);
        assert!(v["id"].as_str().unwrap().starts_with("resp_"));
    }
    st.stop();
}

#[test]
fn responses_sse_event_order_and_sequence_numbers() {
    let st = Stack::start();
    for model in ["gpt", "claude"] {
        let r = st.post(
            "/v1/responses",
            &json!({"model": model, "stream": true, "input": "hi [[mock:frames:4]]"}),
        );
        let evs = r.events();
        let mut names: Vec<&str> = evs.iter().map(|(e, _)| e.as_str()).collect();
        names.dedup();
        assert_eq!(
            names,
            vec![
                "response.created",
                "response.in_progress",
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.delta",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.completed",
            ],
            "{model}"
        );
        let mut last = -1i64;
        let mut text = String::new();
        for (name, d) in &evs {
            let v: Value = serde_json::from_str(d).unwrap();
            assert_eq!(v["type"], name.as_str());
            let seq = v["sequence_number"].as_i64().unwrap();
            assert!(seq > last, "{model}: sequence_number monotonic");
            last = seq;
            if name == "response.output_text.delta" {
                text.push_str(v["delta"].as_str().unwrap());
            }
        }
        assert_eq!(text, expected_text(4));
        let done: Value = serde_json::from_str(&evs.last().unwrap().1).unwrap();
        assert_eq!(done["response"]["model"], model);
        assert_eq!(done["response"]["status"], "completed");
        assert_eq!(done["response"]["usage"]["output_tokens"], 4);
        assert_eq!(
            done["response"]["output"][0]["content"][0]["text"],
            expected_text(4)
        );
    }
    st.stop();
}

#[test]
fn responses_function_calls_native_and_translated() {
    let st = Stack::start();
    let tools = json!([{"type": "function", "name": "get_weather",
        "parameters": {"type": "object", "properties": {}}}]);
    for model in ["gpt", "claude"] {
        let v = st
            .post(
                "/v1/responses",
                &json!({"model": model, "tools": tools, "input": "[[mock:tool_call]]"}),
            )
            .json();
        let call = v["output"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["type"] == "function_call")
            .unwrap_or_else(|| panic!("{model}: {v}"));
        assert_eq!(call["name"], "get_weather");
        let args: Value = serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
        assert_eq!(args, json!({"city": "Paris"}));
        assert!(call["call_id"].as_str().is_some_and(|s| !s.is_empty()));

        let r = st.post(
            "/v1/responses",
            &json!({"model": model, "stream": true, "tools": tools, "input": "[[mock:tool_call]]"}),
        );
        let evs = r.events();
        let args: String = evs
            .iter()
            .filter(|(e, _)| e == "response.function_call_arguments.delta")
            .map(|(_, d)| {
                serde_json::from_str::<Value>(d).unwrap()["delta"]
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .collect();
        assert_eq!(
            serde_json::from_str::<Value>(&args).unwrap(),
            json!({"city": "Paris"}),
            "{model}"
        );
        assert_eq!(evs.last().unwrap().0, "response.completed");
    }
    st.stop();
}

// ---------- request translation, seen by a capturing upstream ----------

fn capture(kind_answer: fn(&str) -> Value) -> (RawUpstream, Proc) {
    let up = raw_upstream(move |head, _body, s| {
        let path = head.split(' ').nth(1).unwrap_or("").to_owned();
        write_json(s, 200, &kind_answer(&path));
    });
    let gw = start_gateway(&config(up.addr, 5000));
    (up, gw)
}

fn canned(path: &str) -> Value {
    if path == "/v1/messages" {
        json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "mock-claude",
               "content": [{"type": "text", "text": "ok"}], "stop_reason": "max_tokens",
               "stop_sequence": null, "usage": {"input_tokens": 7, "output_tokens": 9}})
    } else {
        json!({"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "mock-gpt",
               "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                            "finish_reason": "length"}],
               "usage": {"prompt_tokens": 7, "completion_tokens": 9, "total_tokens": 16}})
    }
}

#[test]
fn chat_to_messages_request_translation() {
    let (up, gw) = capture(canned);
    let r = post(
        gw.addr,
        "/v1/chat/completions",
        &json!({"model": "claude", "max_tokens": 50, "temperature": 0.5, "stop": ["END"],
            "tools": [{"type": "function", "function": {"name": "get_weather", "description": "w",
                "parameters": {"type": "object"}}}],
            "tool_choice": "required",
            "messages": [
                {"role": "system", "content": "sys A"},
                {"role": "user", "content": "q1"},
                {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
                    "function": {"name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "rainy"},
                {"role": "assistant", "content": "It rains."},
                {"role": "user", "content": "q2"}]}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["model"], "claude");
    assert_eq!(
        v["choices"][0]["finish_reason"], "length",
        "max_tokens → length"
    );
    assert_eq!(v["usage"]["prompt_tokens"], 7);
    assert_eq!(v["usage"]["completion_tokens"], 9);

    let (head, body) = up.requests.recv().unwrap();
    assert!(head.starts_with("POST /v1/messages "), "{head}");
    let h = head.to_ascii_lowercase();
    assert!(h.contains("x-api-key: sk-test-anthropic"), "{head}");
    assert!(h.contains("anthropic-version: "), "{head}");
    let u: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(u["model"], "mock-claude");
    assert_eq!(u["system"], "sys A");
    assert_eq!(u["max_tokens"], 50);
    assert_eq!(u["stop_sequences"], json!(["END"]));
    assert_eq!(u["tool_choice"], json!({"type": "any"}));
    assert_eq!(u["tools"][0]["name"], "get_weather");
    assert_eq!(u["tools"][0]["input_schema"], json!({"type": "object"}));
    let m = u["messages"].as_array().unwrap();
    assert_eq!(m.len(), 5, "{u}");
    assert_eq!(m[0]["role"], "user");
    assert_eq!(m[1]["role"], "assistant");
    assert_eq!(m[1]["content"][0]["type"], "tool_use");
    assert_eq!(m[1]["content"][0]["input"], json!({"city": "Oslo"}));
    assert_eq!(m[2]["role"], "user");
    assert_eq!(m[2]["content"][0]["type"], "tool_result");
    assert_eq!(m[2]["content"][0]["tool_use_id"], "call_1");
    assert_eq!(m[2]["content"][0]["content"], "rainy");
    assert_eq!(m[3]["content"][0]["text"], "It rains.");
    assert_eq!(m[4]["content"][0]["text"], "q2");
    assert_eq!(gw.terminate(), Some(0));
}

#[test]
fn messages_to_chat_request_translation() {
    let (up, gw) = capture(canned);
    let r = post(
        gw.addr,
        "/v1/messages",
        &json!({"model": "gpt", "max_tokens": 50,
            "system": [{"type": "text", "text": "sys B"}],
            "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}],
            "tool_choice": {"type": "tool", "name": "get_weather"},
            "messages": [
                {"role": "user", "content": "q1"},
                {"role": "assistant", "content": [{"type": "text", "text": "checking"},
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Oslo"}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "rainy"},
                    {"type": "text", "text": "and now?"}]}]}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["model"], "gpt");
    assert_eq!(v["stop_reason"], "max_tokens", "length → max_tokens");
    assert_eq!(v["usage"], json!({"input_tokens": 7, "output_tokens": 9}));

    let (head, body) = up.requests.recv().unwrap();
    assert!(head.starts_with("POST /v1/chat/completions "), "{head}");
    assert!(head
        .to_ascii_lowercase()
        .contains("authorization: bearer sk-test-openai"));
    let u: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(u["model"], "mock-gpt");
    assert_eq!(
        u["tool_choice"],
        json!({"type": "function", "function": {"name": "get_weather"}})
    );
    assert_eq!(
        u["tools"][0]["function"]["parameters"],
        json!({"type": "object"})
    );
    let m = u["messages"].as_array().unwrap();
    let roles: Vec<&str> = m.iter().map(|x| x["role"].as_str().unwrap()).collect();
    assert_eq!(
        roles,
        vec!["system", "user", "assistant", "tool", "user"],
        "{u}"
    );
    assert_eq!(m[0]["content"], "sys B");
    assert_eq!(m[2]["content"], "checking");
    assert_eq!(m[2]["tool_calls"][0]["id"], "toolu_1");
    let args: Value = serde_json::from_str(
        m[2]["tool_calls"][0]["function"]["arguments"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(args, json!({"city": "Oslo"}));
    assert_eq!(m[3]["tool_call_id"], "toolu_1");
    assert_eq!(m[3]["content"], "rainy");
    assert_eq!(m[4]["content"], "and now?");
    assert_eq!(gw.terminate(), Some(0));
}

#[test]
fn responses_to_messages_request_translation() {
    let (up, gw) = capture(canned);
    let r = post(
        gw.addr,
        "/v1/responses",
        &json!({"model": "claude", "instructions": "sys C", "max_output_tokens": 33,
            "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}],
            "input": [
                {"role": "user", "content": [{"type": "input_text", "text": "q1"}]},
                {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
                {"role": "user", "content": "q2"}]}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["status"], "incomplete", "max_tokens → incomplete");
    assert_eq!(v["incomplete_details"]["reason"], "max_output_tokens");
    let (_, body) = up.requests.recv().unwrap();
    let u: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(u["system"], "sys C");
    assert_eq!(u["max_tokens"], 33);
    let m = u["messages"].as_array().unwrap();
    assert_eq!(m.len(), 3, "{u}");
    assert_eq!(m[1]["content"][0]["type"], "tool_use");
    assert_eq!(m[2]["content"][0]["type"], "tool_result");
    assert_eq!(m[2]["content"][1]["text"], "q2");
    assert_eq!(gw.terminate(), Some(0));
}

#[test]
fn images_reach_the_other_dialects_upstream_and_untranslatable_parts_are_refused() {
    let (up, gw) = capture(canned);
    // Chat client, Anthropic upstream: a data URL becomes a base64 source.
    let r = post(
        gw.addr,
        "/v1/chat/completions",
        &json!({"model": "claude", "messages": [{"role": "user", "content": [
            {"type": "text", "text": "what is it?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo=", "detail": "auto"}}]}]}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let (_, body) = up.requests.recv().unwrap();
    let u: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        u["messages"][0]["content"][1],
        json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}})
    );
    // Messages client, OpenAI upstream: a url source becomes an image_url part.
    let r = post(
        gw.addr,
        "/v1/messages",
        &json!({"model": "gpt", "max_tokens": 5, "messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"}},
            {"type": "text", "text": "and this?"}]}]}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let (_, body) = up.requests.recv().unwrap();
    let u: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        u["messages"][0]["content"],
        json!([{"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
               {"type": "text", "text": "and this?"}])
    );
    // A part with no translation: a 400 in the client's dialect naming it; nothing goes upstream.
    let r = post(
        gw.addr,
        "/v1/messages",
        &json!({"model": "gpt", "max_tokens": 5, "messages": [{"role": "user", "content": [
            {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "x"}}]}]}),
    );
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(assert_error_shape("/v1/messages", &r).contains("\"document\""));
    let r = post(
        gw.addr,
        "/v1/chat/completions",
        &json!({"model": "claude", "messages": [{"role": "user", "content": [
            {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}]}]}),
    );
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(assert_error_shape("/v1/chat/completions", &r).contains("\"input_audio\""));
    // An image's resolution other than `auto` has no counterpart either.
    let r = post(
        gw.addr,
        "/v1/chat/completions",
        &json!({"model": "claude", "messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "https://e.com/i.png", "detail": "low"}}]}]}),
    );
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(assert_error_shape("/v1/chat/completions", &r).contains(
        "messages[].content[].image_url.detail (at messages[0].content[0].image_url.detail)"
    ));
    assert!(
        up.requests.try_recv().is_err(),
        "a refused request reached the upstream"
    );
    assert_eq!(gw.terminate(), Some(0));
}

#[test]
fn native_route_rewrites_only_the_model() {
    let (up, gw) = capture(canned);
    let body = br#"{"messages":[{"role":"user","content":"x"}],"model":"gpt","zz_unknown":{"keep":[1,2.50,"\u00e9"]}}"#;
    let r = request(gw.addr, "POST", "/v1/chat/completions", &[], body);
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["model"], "gpt");
    let (_, got) = up.requests.recv().unwrap();
    let want = String::from_utf8_lossy(body).replace(r#""model":"gpt""#, r#""model":"mock-gpt""#);
    assert_eq!(
        String::from_utf8_lossy(&got),
        want,
        "body forwarded byte for byte"
    );
    assert_eq!(gw.terminate(), Some(0));
}

#[test]
fn models_lists_aliases() {
    let st = Stack::start();
    let r = get(st.gateway.addr, "/v1/models");
    assert_eq!(r.status, 200);
    let v = r.json();
    let ids: Vec<&str> = v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec!["claude", "gpt"]);
    assert_eq!(v["object"], "list");
    st.stop();
}
