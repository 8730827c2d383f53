//! Complete chat answers: an upstream's chat completion into the neutral [`Response`], and a
//! neutral response out as the client's chat completion.

use serde_json::{json, Value};

use super::{chat_id, stop_from, stop_to};
use crate::dialect::decode::opt_str;
use crate::dialect::encode::{new_id, now_secs};
use crate::dialect::error::GwError;
use crate::dialect::neutral::{OutPart, Response, Usage};

pub fn decode(body: &[u8]) -> Result<Response, GwError> {
    let v: Value = serde_json::from_slice(body).map_err(GwError::bad_upstream)?;
    let choice = v
        .get("choices")
        .and_then(|c| c.get(0))
        .ok_or_else(|| GwError::bad_upstream("no choices in upstream response"))?;
    let msg = choice.get("message").unwrap_or(&Value::Null);
    let mut content = Vec::new();
    if let Some(t) = msg.get("content").and_then(Value::as_str) {
        if !t.is_empty() {
            content.push(OutPart::Text(t.to_owned()));
        }
    }
    if let Some(calls) = msg.get("tool_calls").and_then(Value::as_array) {
        for c in calls {
            let f = c.get("function").unwrap_or(&Value::Null);
            content.push(OutPart::ToolCall {
                id: opt_str(c, "id").unwrap_or_else(|| new_id("call_")),
                name: opt_str(f, "name").unwrap_or_default(),
                arguments: opt_str(f, "arguments").unwrap_or_default(),
            });
        }
    }
    Ok(Response {
        id: opt_str(&v, "id").unwrap_or_else(|| new_id("chatcmpl-")),
        content,
        stop: stop_from(
            choice
                .get("finish_reason")
                .and_then(Value::as_str)
                .unwrap_or("stop"),
        ),
        usage: Usage::from_json(v.get("usage"), "prompt_tokens", "completion_tokens"),
    })
}

pub fn encode(r: &Response, alias: &str) -> Value {
    let text = r.text();
    let calls: Vec<Value> = r
        .calls()
        .map(|(id, name, arguments)| {
            json!({
                "id": id, "type": "function",
                "function": {"name": name, "arguments": arguments},
            })
        })
        .collect();
    let mut message = json!({
        "role": "assistant",
        "content": if text.is_empty() { Value::Null } else { text.into() },
        "refusal": null,
    });
    if !calls.is_empty() {
        message["tool_calls"] = calls.into();
    }
    json!({
        "id": chat_id(&r.id),
        "object": "chat.completion",
        "created": now_secs(),
        "model": alias,
        "choices": [{
            "index": 0,
            "message": message,
            "logprobs": null,
            "finish_reason": stop_to(r.stop),
        }],
        "usage": {
            "prompt_tokens": r.usage.input,
            "completion_tokens": r.usage.output,
            "total_tokens": r.usage.input + r.usage.output,
        },
    })
}
