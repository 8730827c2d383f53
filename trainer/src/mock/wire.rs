//! Wire formats of the three dialects the mock answers in: OpenAI Chat Completions, OpenAI
//! Responses and Anthropic Messages, each as one JSON body or as a list of SSE frames.
//!
//! Everything here is deterministic: the same [`Plan`] always renders the same bytes.

use bytes::Bytes;
use std::fmt::Write as _;

/// The first content frame of every text answer.
pub const GREETING: &str = "Hello from the mock upstream.";
/// Default number of content frames (and output tokens) of a text answer.
pub const DEFAULT_FRAMES: usize = 8;
/// Upper bound on `[[mock:frames:N]]`.
pub const MAX_FRAMES: usize = 100_000;
/// Upper bound on `[[mock:delay_ms:N]]` (ten minutes) and on `[[mock:frame_interval_ms:N]]`.
pub const MAX_DELAY_MS: u64 = 600_000;
/// Name of the tool the mock calls with `[[mock:tool_call]]`.
pub const TOOL_NAME: &str = "get_weather";
/// Arguments of that tool call, as JSON text.
pub const TOOL_ARGUMENTS: &str = r#"{"city":"Paris"}"#;
/// The tool arguments streamed in pieces (their concatenation is [`TOOL_ARGUMENTS`]).
pub const TOOL_ARGUMENT_PIECES: [&str; 3] = [r#"{"city":"#, r#""Paris""#, "}"];
/// How many content frames fail_mid_stream / malformed_sse send before misbehaving.
pub const FRAMES_BEFORE_FAULT: usize = 3;

const CREATED: u64 = 1_700_000_000;

/// Client dialect (the endpoint the request came in on).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dialect {
    /// `POST /v1/chat/completions`
    Chat,
    /// `POST /v1/responses`
    Responses,
    /// `POST /v1/messages`
    Messages,
}

/// What to answer, decided from the request body.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Plan {
    /// The request's `model`, already JSON-encoded (with quotes).
    pub model_json: String,
    pub stream: bool,
    /// Chat only: `stream_options.include_usage`.
    pub include_usage: bool,
    pub frames: usize,
    pub tool_call: bool,
    /// A scripted tool call (`[[mock:call:NAME:ARGS]]`): (tool name, arguments as JSON text).
    /// Answered only while the conversation holds no tool result (see `mock::plan`).
    pub call: Option<(String, String)>,
    /// The text of the answer in place of the greeting: after a scripted call, the tool result
    /// the conversation carries back, so that a client can see it crossed the gateway.
    pub answer: Option<String>,
    pub status: Option<u16>,
    pub fail_mid_stream: bool,
    pub stall: bool,
    pub malformed_sse: bool,
    /// Close the connection without answering.
    pub reset: bool,
    /// Wait this long before answering.
    pub delay_ms: u64,
    /// Streams: wait this long before each SSE frame after the first, as a model's tokens arrive
    /// (a slow stream keeps its connections open; paced frames reach the gateway one per read).
    pub frame_interval_ms: u64,
    /// `retry-after` (seconds) on a status answer.
    pub retry_after: Option<u64>,
    pub input_tokens: u64,
}

impl Plan {
    /// A plan with no directives for a body of `body_len` bytes.
    pub fn plain(model_json: String, stream: bool, body_len: usize) -> Self {
        Plan {
            model_json,
            stream,
            include_usage: false,
            frames: DEFAULT_FRAMES,
            tool_call: false,
            call: None,
            answer: None,
            status: None,
            fail_mid_stream: false,
            stall: false,
            malformed_sse: false,
            reset: false,
            delay_ms: 0,
            frame_interval_ms: 0,
            retry_after: None,
            input_tokens: (body_len / 4) as u64,
        }
    }

    /// Number of output tokens reported in usage: one per content frame.
    pub fn output_tokens(&self) -> u64 {
        if self.calls_tool() {
            self.arg_pieces().len() as u64
        } else {
            self.text_pieces().len() as u64
        }
    }

    /// Whether the answer is a tool call (`[[mock:tool_call]]` or a scripted call).
    pub fn calls_tool(&self) -> bool {
        self.tool_call || self.call.is_some()
    }

    /// The tool call's name and its arguments as JSON text.
    pub fn tool(&self) -> (&str, &str) {
        match &self.call {
            Some((name, args)) => (name, args),
            None => (TOOL_NAME, TOOL_ARGUMENTS),
        }
    }

    /// The tool arguments in the pieces a stream sends them in: [`TOOL_ARGUMENT_PIECES`], or a
    /// scripted call's arguments cut in two (at a character boundary).
    pub fn arg_pieces(&self) -> Vec<&str> {
        match &self.call {
            Some((_, args)) => {
                let mut mid = args.len() / 2;
                while !args.is_char_boundary(mid) {
                    mid += 1;
                }
                vec![&args[..mid], &args[mid..]]
            }
            None => TOOL_ARGUMENT_PIECES.to_vec(),
        }
    }

    /// The text pieces of a text answer: the scripted answer in one piece, or [`text_pieces`].
    pub fn text_pieces(&self) -> Vec<std::borrow::Cow<'_, str>> {
        match &self.answer {
            Some(a) => vec![std::borrow::Cow::Borrowed(a.as_str())],
            None => text_pieces(self.frames).collect(),
        }
    }

    /// The full text of a text answer.
    pub fn text(&self) -> String {
        self.text_pieces().concat()
    }

    /// Apply the `[[mock:...]]` directives found in `text` (the last user message).
    pub fn apply_directives(&mut self, text: &str) {
        let mut rest = text;
        while let Some(i) = rest.find("[[mock:") {
            rest = &rest[i + 7..];
            let Some(end) = rest.find("]]") else { break };
            let directive = &rest[..end];
            rest = &rest[end + 2..];
            match directive.split_once(':') {
                Some(("frames", n)) => {
                    if let Ok(n) = n.trim().parse::<usize>() {
                        self.frames = n.clamp(1, MAX_FRAMES);
                    }
                }
                Some(("delay_ms", n)) => {
                    if let Ok(n) = n.trim().parse::<u64>() {
                        self.delay_ms = n.min(MAX_DELAY_MS);
                    }
                }
                Some(("frame_interval_ms", n)) => {
                    if let Ok(n) = n.trim().parse::<u64>() {
                        self.frame_interval_ms = n.min(MAX_DELAY_MS);
                    }
                }
                Some(("retry_after", n)) => {
                    if let Ok(n) = n.trim().parse::<u64>() {
                        self.retry_after = Some(n);
                    }
                }
                Some(("call", spec)) => {
                    // NAME:ARGS, the arguments a JSON object (anything else is ignored).
                    if let Some((name, args)) = spec.split_once(':') {
                        let object = serde_json::from_str::<serde_json::Value>(args)
                            .is_ok_and(|v| v.is_object());
                        if !name.is_empty() && object {
                            self.call = Some((name.to_owned(), args.to_owned()));
                        }
                    }
                }
                Some(("status", n)) => {
                    if let Ok(n) = n.trim().parse::<u16>() {
                        if (100..=999).contains(&n) {
                            self.status = Some(n);
                        }
                    }
                }
                _ => match directive {
                    "tool_call" => self.tool_call = true,
                    "fail_mid_stream" => self.fail_mid_stream = true,
                    "stall" => self.stall = true,
                    "malformed_sse" => self.malformed_sse = true,
                    "reset" => self.reset = true,
                    _ => {}
                },
            }
        }
    }
}

/// The text pieces of a text answer with `frames` content frames: the greeting, then ` wordK`
/// for K = 2..=frames (frame K carries word K).
pub fn text_pieces(frames: usize) -> impl Iterator<Item = std::borrow::Cow<'static, str>> {
    (1..=frames.max(1)).map(|k| {
        if k == 1 {
            std::borrow::Cow::Borrowed(GREETING)
        } else {
            std::borrow::Cow::Owned(format!(" word{k}"))
        }
    })
}

/// The full text of a text answer with `frames` content frames.
pub fn expected_text(frames: usize) -> String {
    text_pieces(frames).collect()
}

/// JSON-encode a string (with quotes).
pub fn json_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".to_owned())
}

/// A rendered answer.
#[derive(Clone)]
pub enum Rendered {
    /// One JSON body.
    Json(Bytes),
    /// SSE frames, each to be written separately; when `abort`, the connection is dropped after
    /// the last one instead of ending the body (fail_mid_stream).
    Sse { frames: Vec<Bytes>, abort: bool },
}

/// Error body of `status` in the dialect's provider format.
pub fn error_body(dialect: Dialect, status: u16, message: &str) -> Bytes {
    let msg = json_str(message);
    let s = match dialect {
        Dialect::Messages => {
            let ty = match status {
                400 => "invalid_request_error",
                401 => "authentication_error",
                402 => "billing_error",
                403 => "permission_error",
                404 => "not_found_error",
                413 => "request_too_large",
                429 => "rate_limit_error",
                504 => "timeout_error",
                529 => "overloaded_error",
                _ if status >= 500 => "api_error",
                _ => "invalid_request_error",
            };
            format!(r#"{{"type":"error","error":{{"type":"{ty}","message":{msg}}}}}"#)
        }
        Dialect::Chat | Dialect::Responses => {
            let (ty, code) = match status {
                401 => ("invalid_request_error", r#""invalid_api_key""#),
                403 => (
                    "invalid_request_error",
                    r#""unsupported_country_region_territory""#,
                ),
                404 => ("invalid_request_error", r#""model_not_found""#),
                429 => ("requests", r#""rate_limit_exceeded""#),
                _ if status >= 500 => ("server_error", "null"),
                _ => ("invalid_request_error", "null"),
            };
            format!(r#"{{"error":{{"message":{msg},"type":"{ty}","param":null,"code":{code}}}}}"#)
        }
    };
    Bytes::from(s)
}

/// Render a successful answer for `plan` in `dialect`.
pub fn render(dialect: Dialect, plan: &Plan) -> Rendered {
    if !plan.stream {
        let body = match dialect {
            Dialect::Chat => chat_json(plan),
            Dialect::Responses => responses_json(plan),
            Dialect::Messages => messages_json(plan),
        };
        return Rendered::Json(Bytes::from(body));
    }
    let (mut frames, content_start) = match dialect {
        Dialect::Chat => chat_sse(plan),
        Dialect::Responses => responses_sse(plan),
        Dialect::Messages => messages_sse(plan),
    };
    let mut abort = false;
    if plan.fail_mid_stream || plan.malformed_sse {
        let keep = (content_start + FRAMES_BEFORE_FAULT).min(frames.len());
        frames.truncate(keep);
        if plan.malformed_sse {
            let bad: &'static [u8] = match dialect {
                Dialect::Chat => b"data: {\"id\":\"chatcmpl-mock\",\"choices\":[{not json\n\n",
                Dialect::Responses => {
                    b"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",not json\n\n"
                }
                Dialect::Messages => {
                    b"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",not json\n\n"
                }
            };
            frames.push(Bytes::from_static(bad));
        }
        abort = plan.fail_mid_stream;
    }
    Rendered::Sse { frames, abort }
}

// ---------------------------------------------------------------------------------------------
// OpenAI Chat Completions

fn chat_usage(plan: &Plan) -> String {
    let (i, o) = (plan.input_tokens, plan.output_tokens());
    format!(
        r#"{{"prompt_tokens":{i},"completion_tokens":{o},"total_tokens":{}}}"#,
        i + o
    )
}

fn chat_json(plan: &Plan) -> String {
    let mut s = String::with_capacity(512 + plan.frames * 8);
    let _ = write!(
        s,
        r#"{{"id":"chatcmpl-mock","object":"chat.completion","created":{CREATED},"model":{},"choices":[{{"index":0,"message":{{"role":"assistant","#,
        plan.model_json
    );
    let finish = if plan.calls_tool() {
        let _ = write!(
            s,
            r#""content":null,"tool_calls":[{{"id":"call_mock_1","type":"function","function":{{"name":{},"arguments":{}}}}}],"refusal":null}}"#,
            json_str(plan.tool().0),
            json_str(plan.tool().1)
        );
        "tool_calls"
    } else {
        let _ = write!(
            s,
            r#""content":{},"refusal":null}}"#,
            json_str(&plan.text())
        );
        "stop"
    };
    let _ = write!(
        s,
        r#","logprobs":null,"finish_reason":"{finish}"}}],"usage":{}}}"#,
        chat_usage(plan)
    );
    s
}

fn chat_chunk(prefix: &str, choice: &str) -> Bytes {
    let mut s = String::with_capacity(prefix.len() + choice.len() + 16);
    s.push_str("data: ");
    s.push_str(prefix);
    s.push_str(choice);
    s.push_str("]}\n\n");
    Bytes::from(s)
}

fn chat_sse(plan: &Plan) -> (Vec<Bytes>, usize) {
    let prefix = format!(
        r#"{{"id":"chatcmpl-mock","object":"chat.completion.chunk","created":{CREATED},"model":{},"system_fingerprint":null,"choices":["#,
        plan.model_json
    );
    let mut frames = Vec::with_capacity(plan.frames + 5);
    let finish = if plan.calls_tool() {
        frames.push(chat_chunk(
            &prefix,
            &format!(
                r#"{{"index":0,"delta":{{"role":"assistant","content":null,"tool_calls":[{{"index":0,"id":"call_mock_1","type":"function","function":{{"name":{},"arguments":""}}}}]}},"logprobs":null,"finish_reason":null}}"#,
                json_str(plan.tool().0)
            ),
        ));
        for piece in plan.arg_pieces() {
            frames.push(chat_chunk(
                &prefix,
                &format!(
                    r#"{{"index":0,"delta":{{"tool_calls":[{{"index":0,"function":{{"arguments":{}}}}}]}},"logprobs":null,"finish_reason":null}}"#,
                    json_str(piece)
                ),
            ));
        }
        "tool_calls"
    } else {
        frames.push(chat_chunk(
            &prefix,
            r#"{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}"#,
        ));
        for piece in plan.text_pieces() {
            frames.push(chat_chunk(
                &prefix,
                &format!(
                    r#"{{"index":0,"delta":{{"content":{}}},"logprobs":null,"finish_reason":null}}"#,
                    json_str(&piece)
                ),
            ));
        }
        "stop"
    };
    frames.push(chat_chunk(
        &prefix,
        &format!(r#"{{"index":0,"delta":{{}},"logprobs":null,"finish_reason":"{finish}"}}"#),
    ));
    if plan.include_usage {
        let mut s = String::with_capacity(prefix.len() + 128);
        s.push_str("data: ");
        s.push_str(&prefix);
        let _ = write!(s, r#"],"usage":{}}}"#, chat_usage(plan));
        s.push_str("\n\n");
        frames.push(Bytes::from(s));
    }
    frames.push(Bytes::from_static(b"data: [DONE]\n\n"));
    (frames, 1)
}

// ---------------------------------------------------------------------------------------------
// Anthropic Messages

fn sse_event(event: &str, data: &str) -> Bytes {
    let mut s = String::with_capacity(event.len() + data.len() + 16);
    s.push_str("event: ");
    s.push_str(event);
    s.push_str("\ndata: ");
    s.push_str(data);
    s.push_str("\n\n");
    Bytes::from(s)
}

fn messages_json(plan: &Plan) -> String {
    let (content, stop) = if plan.calls_tool() {
        (
            format!(
                r#"[{{"type":"tool_use","id":"toolu_mock_1","name":{},"input":{}}}]"#,
                json_str(plan.tool().0),
                plan.tool().1
            ),
            "tool_use",
        )
    } else {
        (
            format!(r#"[{{"type":"text","text":{}}}]"#, json_str(&plan.text())),
            "end_turn",
        )
    };
    format!(
        r#"{{"id":"msg_mock","type":"message","role":"assistant","model":{},"content":{content},"stop_reason":"{stop}","stop_sequence":null,"usage":{{"input_tokens":{},"output_tokens":{}}}}}"#,
        plan.model_json,
        plan.input_tokens,
        plan.output_tokens()
    )
}

fn messages_sse(plan: &Plan) -> (Vec<Bytes>, usize) {
    let mut frames = Vec::with_capacity(plan.frames + 6);
    frames.push(sse_event(
        "message_start",
        &format!(
            r#"{{"type":"message_start","message":{{"id":"msg_mock","type":"message","role":"assistant","model":{},"content":[],"stop_reason":null,"stop_sequence":null,"usage":{{"input_tokens":{},"output_tokens":1}}}}}}"#,
            plan.model_json, plan.input_tokens
        ),
    ));
    let stop = if plan.calls_tool() {
        frames.push(sse_event(
            "content_block_start",
            &format!(
                r#"{{"type":"content_block_start","index":0,"content_block":{{"type":"tool_use","id":"toolu_mock_1","name":{},"input":{{}}}}}}"#,
                json_str(plan.tool().0)
            ),
        ));
        frames.push(sse_event("ping", r#"{"type":"ping"}"#));
        for piece in plan.arg_pieces() {
            frames.push(sse_event(
                "content_block_delta",
                &format!(
                    r#"{{"type":"content_block_delta","index":0,"delta":{{"type":"input_json_delta","partial_json":{}}}}}"#,
                    json_str(piece)
                ),
            ));
        }
        "tool_use"
    } else {
        frames.push(sse_event(
            "content_block_start",
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
        ));
        frames.push(sse_event("ping", r#"{"type":"ping"}"#));
        for piece in plan.text_pieces() {
            frames.push(sse_event(
                "content_block_delta",
                &format!(
                    r#"{{"type":"content_block_delta","index":0,"delta":{{"type":"text_delta","text":{}}}}}"#,
                    json_str(&piece)
                ),
            ));
        }
        "end_turn"
    };
    frames.push(sse_event(
        "content_block_stop",
        r#"{"type":"content_block_stop","index":0}"#,
    ));
    frames.push(sse_event(
        "message_delta",
        &format!(
            r#"{{"type":"message_delta","delta":{{"stop_reason":"{stop}","stop_sequence":null}},"usage":{{"output_tokens":{}}}}}"#,
            plan.output_tokens()
        ),
    ));
    frames.push(sse_event("message_stop", r#"{"type":"message_stop"}"#));
    (frames, 3)
}

// ---------------------------------------------------------------------------------------------
// OpenAI Responses

fn responses_usage(plan: &Plan) -> String {
    let (i, o) = (plan.input_tokens, plan.output_tokens());
    format!(
        r#"{{"input_tokens":{i},"input_tokens_details":{{"cached_tokens":0}},"output_tokens":{o},"output_tokens_details":{{"reasoning_tokens":0}},"total_tokens":{}}}"#,
        i + o
    )
}

fn response_object(plan: &Plan, status: &str, output: &str, usage: &str) -> String {
    format!(
        r#"{{"id":"resp_mock","object":"response","created_at":{CREATED},"status":"{status}","error":null,"incomplete_details":null,"model":{},"output":[{output}],"parallel_tool_calls":true,"tool_choice":"auto","tools":[],"usage":{usage}}}"#,
        plan.model_json
    )
}

fn responses_message_item(status: &str, text: Option<&str>) -> String {
    match text {
        Some(t) => format!(
            r#"{{"id":"msg_mock","type":"message","status":"{status}","role":"assistant","content":[{{"type":"output_text","text":{},"annotations":[]}}]}}"#,
            json_str(t)
        ),
        None => format!(
            r#"{{"id":"msg_mock","type":"message","status":"{status}","role":"assistant","content":[]}}"#
        ),
    }
}

fn responses_call_item(status: &str, name: &str, arguments: &str) -> String {
    format!(
        r#"{{"id":"fc_mock_1","type":"function_call","status":"{status}","call_id":"call_mock_1","name":{},"arguments":{}}}"#,
        json_str(name),
        json_str(arguments)
    )
}

fn responses_json(plan: &Plan) -> String {
    let output = if plan.calls_tool() {
        responses_call_item("completed", plan.tool().0, plan.tool().1)
    } else {
        responses_message_item("completed", Some(&plan.text()))
    };
    response_object(plan, "completed", &output, &responses_usage(plan))
}

fn responses_sse(plan: &Plan) -> (Vec<Bytes>, usize) {
    let mut frames = Vec::with_capacity(plan.frames + 10);
    let mut seq = 0u64;
    let mut push = |frames: &mut Vec<Bytes>, event: &str, body: String| {
        // body is the event object without its closing brace.
        let data = format!(r#"{{"type":"{event}",{body},"sequence_number":{seq}}}"#);
        seq += 1;
        frames.push(sse_event(event, &data));
    };
    let in_progress = response_object(plan, "in_progress", "", "null");
    push(
        &mut frames,
        "response.created",
        format!(r#""response":{in_progress}"#),
    );
    push(
        &mut frames,
        "response.in_progress",
        format!(r#""response":{in_progress}"#),
    );
    let done_item = if plan.calls_tool() {
        push(
            &mut frames,
            "response.output_item.added",
            format!(
                r#""output_index":0,"item":{}"#,
                responses_call_item("in_progress", plan.tool().0, "")
            ),
        );
        for piece in plan.arg_pieces() {
            push(
                &mut frames,
                "response.function_call_arguments.delta",
                format!(
                    r#""item_id":"fc_mock_1","output_index":0,"delta":{}"#,
                    json_str(piece)
                ),
            );
        }
        push(
            &mut frames,
            "response.function_call_arguments.done",
            format!(
                r#""item_id":"fc_mock_1","output_index":0,"arguments":{}"#,
                json_str(plan.tool().1)
            ),
        );
        responses_call_item("completed", plan.tool().0, plan.tool().1)
    } else {
        push(
            &mut frames,
            "response.output_item.added",
            format!(
                r#""output_index":0,"item":{}"#,
                responses_message_item("in_progress", None)
            ),
        );
        push(
            &mut frames,
            "response.content_part.added",
            r#""item_id":"msg_mock","output_index":0,"content_index":0,"part":{"type":"output_text","text":"","annotations":[]}"#.to_owned(),
        );
        for piece in plan.text_pieces() {
            push(
                &mut frames,
                "response.output_text.delta",
                format!(
                    r#""item_id":"msg_mock","output_index":0,"content_index":0,"delta":{},"logprobs":[]"#,
                    json_str(&piece)
                ),
            );
        }
        let text = json_str(&plan.text());
        push(
            &mut frames,
            "response.output_text.done",
            format!(
                r#""item_id":"msg_mock","output_index":0,"content_index":0,"text":{text},"logprobs":[]"#
            ),
        );
        push(
            &mut frames,
            "response.content_part.done",
            format!(
                r#""item_id":"msg_mock","output_index":0,"content_index":0,"part":{{"type":"output_text","text":{text},"annotations":[]}}"#
            ),
        );
        responses_message_item("completed", Some(&plan.text()))
    };
    push(
        &mut frames,
        "response.output_item.done",
        format!(r#""output_index":0,"item":{done_item}"#),
    );
    let completed = response_object(plan, "completed", &done_item, &responses_usage(plan));
    push(
        &mut frames,
        "response.completed",
        format!(r#""response":{completed}"#),
    );
    let content_start = if plan.calls_tool() { 3 } else { 4 };
    (frames, content_start)
}
