//! OpenAI Responses: the client dialect of `POST /v1/responses`. Responses upstreams are only ever
//! used natively, so this dialect is decoded from requests ([`request`]) and encoded into complete
//! answers ([`response`]) and streams ([`stream`]), never the reverse. The response object and its
//! items, shared by both outputs, are written here.

pub mod request;
pub mod response;
pub mod stream;

use serde_json::{json, Value};

use crate::dialect::neutral::{StopReason, Usage};

pub fn resp_id(upstream: &str) -> String {
    if upstream.starts_with("resp_") {
        upstream.to_owned()
    } else {
        format!("resp_{upstream}")
    }
}

pub fn usage_json(u: Usage) -> Value {
    json!({
        "input_tokens": u.input,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": u.output,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": u.input + u.output,
    })
}

pub fn status_of(stop: StopReason) -> (&'static str, Value) {
    match stop {
        StopReason::MaxTokens => ("incomplete", json!({"reason": "max_output_tokens"})),
        StopReason::ContentFilter => ("incomplete", json!({"reason": "content_filter"})),
        _ => ("completed", Value::Null),
    }
}

pub fn response_object(
    id: &str,
    created: u64,
    alias: &str,
    status: &str,
    incomplete: Value,
    output: Vec<Value>,
    usage: Value,
) -> Value {
    json!({
        "id": id,
        "object": "response",
        "created_at": created,
        "status": status,
        "error": null,
        "incomplete_details": incomplete,
        "instructions": null,
        "max_output_tokens": null,
        "model": alias,
        "output": output,
        "parallel_tool_calls": true,
        "previous_response_id": null,
        "reasoning": {"effort": null, "summary": null},
        "store": false,
        "temperature": null,
        "text": {"format": {"type": "text"}},
        "tool_choice": "auto",
        "tools": [],
        "top_p": null,
        "truncation": "disabled",
        "usage": usage,
        "metadata": {},
    })
}

pub fn message_item(id: &str, status: &str, text: &str) -> Value {
    json!({
        "id": id, "type": "message", "status": status, "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    })
}

/// A `function_call` item. A call of a flattened namespace tool (`{namespace}__{name}`, see
/// [`request::flat_name`]) goes back under its namespace.
pub fn call_item(
    id: &str,
    call_id: &str,
    name: &str,
    arguments: &str,
    status: &str,
    namespaces: &[String],
) -> Value {
    match split_name(name, namespaces) {
        Some((ns, name)) => json!({
            "id": id, "type": "function_call", "status": status,
            "call_id": call_id, "namespace": ns, "name": name, "arguments": arguments,
        }),
        None => json!({
            "id": id, "type": "function_call", "status": status,
            "call_id": call_id, "name": name, "arguments": arguments,
        }),
    }
}

/// (namespace, name) of a flattened tool name whose namespace is one of `namespaces`.
pub fn split_name<'n>(name: &'n str, namespaces: &[String]) -> Option<(&'n str, &'n str)> {
    namespaces.iter().find_map(|ns| {
        let rest = name.strip_prefix(ns.as_str())?.strip_prefix("__")?;
        Some((&name[..ns.len()], rest))
    })
}
