//! Anthropic Messages: the client dialect of `POST /v1/messages` and the dialect of anthropic
//! upstreams. [`request`] decodes a Messages request into the neutral form and encodes one for an
//! anthropic upstream; [`response`] does the same for complete answers, [`stream`] for SSE events;
//! [`betas`] reads a Messages client's `anthropic-beta` values as request parts on the route to a
//! chat upstream.

pub mod betas;
pub mod request;
pub mod response;
pub mod stream;

use crate::dialect::neutral::StopReason;

pub fn stop_from(s: &str) -> StopReason {
    match s {
        "max_tokens" => StopReason::MaxTokens,
        "tool_use" => StopReason::ToolUse,
        "stop_sequence" => StopReason::StopSequence,
        "refusal" => StopReason::ContentFilter,
        _ => StopReason::End,
    }
}

pub fn stop_to(s: StopReason) -> &'static str {
    match s {
        StopReason::End => "end_turn",
        StopReason::MaxTokens => "max_tokens",
        StopReason::ToolUse => "tool_use",
        StopReason::StopSequence => "stop_sequence",
        StopReason::ContentFilter => "refusal",
    }
}

pub fn msg_id(upstream: &str) -> String {
    if upstream.starts_with("msg_") {
        upstream.to_owned()
    } else {
        format!("msg_{upstream}")
    }
}
