//! Complete Messages answers: an upstream's message into the neutral [`Response`], and a neutral
//! response out as the client's message.

use serde_json::{json, Value};

use super::{msg_id, stop_from, stop_to};
use crate::dialect::decode::{args_value, opt_str};
use crate::dialect::encode::new_id;
use crate::dialect::error::GwError;
use crate::dialect::neutral::{OutPart, Response, Usage};

pub fn decode(body: &[u8]) -> Result<Response, GwError> {
    let v: Value = serde_json::from_slice(body).map_err(GwError::bad_upstream)?;
    let mut content = Vec::new();
    for b in v
        .get("content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        match b.get("type").and_then(Value::as_str) {
            Some("text") => content.push(OutPart::Text(opt_str(b, "text").unwrap_or_default())),
            Some("tool_use") => content.push(OutPart::ToolCall {
                id: opt_str(b, "id").unwrap_or_else(|| new_id("toolu_")),
                name: opt_str(b, "name").unwrap_or_default(),
                arguments: b
                    .get("input")
                    .map(|i| i.to_string())
                    .unwrap_or_else(|| "{}".into()),
            }),
            _ => {}
        }
    }
    Ok(Response {
        id: opt_str(&v, "id").unwrap_or_else(|| new_id("msg_")),
        content,
        stop: stop_from(
            v.get("stop_reason")
                .and_then(Value::as_str)
                .unwrap_or("end_turn"),
        ),
        usage: Usage::from_json(v.get("usage"), "input_tokens", "output_tokens"),
    })
}

pub fn encode(r: &Response, alias: &str) -> Value {
    let content: Vec<Value> = r
        .content
        .iter()
        .map(|p| match p {
            OutPart::Text(t) => json!({"type": "text", "text": t}),
            OutPart::ToolCall {
                id,
                name,
                arguments,
            } => {
                json!({"type": "tool_use", "id": id, "name": name, "input": args_value(arguments)})
            }
        })
        .collect();
    json!({
        "id": msg_id(&r.id),
        "type": "message",
        "role": "assistant",
        "model": alias,
        "content": content,
        "stop_reason": stop_to(r.stop),
        "stop_sequence": null,
        "usage": {"input_tokens": r.usage.input, "output_tokens": r.usage.output},
    })
}
