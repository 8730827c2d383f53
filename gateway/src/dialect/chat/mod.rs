//! OpenAI Chat Completions: the client dialect of `POST /v1/chat/completions` and the main dialect
//! of openai upstreams. [`request`] decodes a chat request into the neutral form and encodes one
//! for a chat upstream; [`response`] does the same for complete answers, [`stream`] for SSE chunks.

pub mod request;
pub mod response;
pub mod stream;

use crate::dialect::neutral::StopReason;

pub fn stop_from(s: &str) -> StopReason {
    match s {
        "length" => StopReason::MaxTokens,
        "tool_calls" | "function_call" => StopReason::ToolUse,
        "content_filter" => StopReason::ContentFilter,
        _ => StopReason::End,
    }
}

pub fn stop_to(s: StopReason) -> &'static str {
    match s {
        StopReason::End | StopReason::StopSequence => "stop",
        StopReason::MaxTokens => "length",
        StopReason::ToolUse => "tool_calls",
        StopReason::ContentFilter => "content_filter",
    }
}

pub fn chat_id(upstream: &str) -> String {
    if upstream.starts_with("chatcmpl-") {
        upstream.to_owned()
    } else {
        format!("chatcmpl-{upstream}")
    }
}
