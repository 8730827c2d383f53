//! Complete Responses answers: a neutral response out as the client's response object.

use serde_json::Value;

use super::{call_item, message_item, resp_id, response_object, status_of, usage_json};
use crate::dialect::encode::{new_id, now_secs};
use crate::dialect::neutral::Response;

/// `namespaces`: those whose tools the request flattened (their calls go back under them).
pub fn encode(r: &Response, alias: &str, namespaces: &[String]) -> Value {
    let mut output: Vec<Value> = r
        .calls()
        .map(|(id, name, arguments)| {
            call_item(&new_id("fc_"), id, name, arguments, "completed", namespaces)
        })
        .collect();
    let text = r.text();
    if !text.is_empty() {
        output.insert(0, message_item(&new_id("msg_"), "completed", &text));
    }
    let (status, incomplete) = status_of(r.stop);
    response_object(
        &resp_id(&r.id),
        now_secs(),
        alias,
        status,
        incomplete,
        output,
        usage_json(r.usage),
    )
}
