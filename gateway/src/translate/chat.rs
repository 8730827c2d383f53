//! OpenAI Chat Completions ⇄ neutral form.

use std::borrow::Cow;

use bytes::BytesMut;
use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::{
    bad, new_id, now_secs, opt_str, text_of, upstream_stream_error, Decoder, Encoder, Event,
    Message, OutPart, Part, Request, Response, Role, StopReason, Tool, ToolChoice, Usage,
};
use crate::error::{Dialect, GwError};
use crate::json::{write_str, write_u64};
use crate::sse::SseEvent;

pub fn decode_request(v: &Value) -> Result<Request, GwError> {
    let mut r = Request::default();
    let msgs = v
        .get("messages")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("`messages` must be an array"))?;
    let mut system: Vec<String> = Vec::new();
    for m in msgs {
        let role = m
            .get("role")
            .and_then(Value::as_str)
            .ok_or_else(|| bad("every message needs a `role`"))?;
        let content = m.get("content").unwrap_or(&Value::Null);
        match role {
            "system" | "developer" => system.push(text_of(content)),
            "user" => r.messages.push(Message {
                role: Role::User,
                parts: vec![Part::Text(text_of(content))],
            }),
            "assistant" => {
                let mut parts = Vec::new();
                let t = text_of(content);
                if !t.is_empty() {
                    parts.push(Part::Text(t));
                }
                if let Some(calls) = m.get("tool_calls").and_then(Value::as_array) {
                    for c in calls {
                        let f = c.get("function").unwrap_or(&Value::Null);
                        parts.push(Part::ToolCall {
                            id: opt_str(c, "id").unwrap_or_default(),
                            name: opt_str(f, "name").unwrap_or_default(),
                            arguments: opt_str(f, "arguments").unwrap_or_default(),
                        });
                    }
                }
                r.messages.push(Message {
                    role: Role::Assistant,
                    parts,
                });
            }
            "tool" => {
                let part = Part::ToolResult {
                    id: opt_str(m, "tool_call_id").unwrap_or_default(),
                    content: text_of(content),
                    is_error: false,
                };
                // Consecutive tool results answer one assistant turn: keep them in one user turn.
                match r.messages.last_mut() {
                    Some(last)
                        if last.role == Role::User
                            && last
                                .parts
                                .iter()
                                .all(|p| matches!(p, Part::ToolResult { .. })) =>
                    {
                        last.parts.push(part)
                    }
                    _ => r.messages.push(Message {
                        role: Role::User,
                        parts: vec![part],
                    }),
                }
            }
            other => return Err(bad(format!("unknown message role {other:?}"))),
        }
    }
    if !system.is_empty() {
        r.system = Some(system.join("\n\n"));
    }
    if let Some(tools) = v.get("tools").and_then(Value::as_array) {
        for t in tools {
            let f = t.get("function").unwrap_or(t);
            r.tools.push(Tool {
                name: opt_str(f, "name").ok_or_else(|| bad("every tool needs a name"))?,
                description: opt_str(f, "description"),
                parameters: f
                    .get("parameters")
                    .cloned()
                    .unwrap_or_else(|| json!({"type": "object", "properties": {}})),
            });
        }
    }
    r.tool_choice = match v.get("tool_choice") {
        Some(Value::String(s)) => match s.as_str() {
            "none" => Some(ToolChoice::None),
            "required" => Some(ToolChoice::Required),
            _ => Some(ToolChoice::Auto),
        },
        Some(o @ Value::Object(_)) => o
            .get("function")
            .and_then(|f| opt_str(f, "name"))
            .map(ToolChoice::Named),
        _ => None,
    };
    r.max_tokens = v
        .get("max_completion_tokens")
        .or_else(|| v.get("max_tokens"))
        .and_then(Value::as_u64);
    r.temperature = v.get("temperature").and_then(Value::as_f64);
    r.top_p = v.get("top_p").and_then(Value::as_f64);
    r.stop = match v.get("stop") {
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(|s| s.as_str().map(str::to_owned))
            .collect(),
        _ => Vec::new(),
    };
    r.stream = v.get("stream").and_then(Value::as_bool).unwrap_or(false);
    r.include_usage = v
        .get("stream_options")
        .and_then(|o| o.get("include_usage"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    Ok(r)
}

pub fn encode_request(r: &Request, model: &str) -> Value {
    let mut msgs = Vec::new();
    if let Some(s) = &r.system {
        msgs.push(json!({"role": "system", "content": s}));
    }
    for m in &r.messages {
        let mut text = String::new();
        let mut calls = Vec::new();
        for p in &m.parts {
            match p {
                Part::Text(t) => text.push_str(t),
                Part::ToolCall {
                    id,
                    name,
                    arguments,
                } => calls.push(json!({
                    "id": id, "type": "function",
                    "function": {"name": name, "arguments": arguments},
                })),
                Part::ToolResult { id, content, .. } => msgs.push(json!({
                    "role": "tool", "tool_call_id": id, "content": content,
                })),
            }
        }
        match m.role {
            Role::User => {
                if !text.is_empty() {
                    msgs.push(json!({"role": "user", "content": text}));
                }
            }
            Role::Assistant => {
                let mut o = Map::new();
                o.insert("role".into(), "assistant".into());
                o.insert(
                    "content".into(),
                    if text.is_empty() {
                        Value::Null
                    } else {
                        text.into()
                    },
                );
                if !calls.is_empty() {
                    o.insert("tool_calls".into(), calls.into());
                }
                msgs.push(Value::Object(o));
            }
        }
    }
    let mut o = Map::new();
    o.insert("model".into(), model.into());
    o.insert("messages".into(), msgs.into());
    if !r.tools.is_empty() {
        let tools: Vec<Value> = r
            .tools
            .iter()
            .map(|t| {
                let mut f = json!({"name": t.name, "parameters": t.parameters});
                if let Some(d) = &t.description {
                    f["description"] = d.clone().into();
                }
                json!({"type": "function", "function": f})
            })
            .collect();
        o.insert("tools".into(), tools.into());
    }
    if let Some(c) = &r.tool_choice {
        let v = match c {
            ToolChoice::Auto => json!("auto"),
            ToolChoice::None => json!("none"),
            ToolChoice::Required => json!("required"),
            ToolChoice::Named(n) => json!({"type": "function", "function": {"name": n}}),
        };
        o.insert("tool_choice".into(), v);
    }
    if let Some(n) = r.max_tokens {
        o.insert("max_tokens".into(), n.into());
    }
    if let Some(t) = r.temperature {
        o.insert("temperature".into(), t.into());
    }
    if let Some(t) = r.top_p {
        o.insert("top_p".into(), t.into());
    }
    if !r.stop.is_empty() {
        o.insert("stop".into(), r.stop.clone().into());
    }
    if r.stream {
        o.insert("stream".into(), true.into());
        // Usage is needed for every client dialect's final event, whatever the client asked.
        o.insert("stream_options".into(), json!({"include_usage": true}));
    }
    Value::Object(o)
}

pub(crate) fn stop_from(s: &str) -> StopReason {
    match s {
        "length" => StopReason::MaxTokens,
        "tool_calls" | "function_call" => StopReason::ToolUse,
        "content_filter" => StopReason::ContentFilter,
        _ => StopReason::End,
    }
}

pub(crate) fn stop_to(s: StopReason) -> &'static str {
    match s {
        StopReason::End | StopReason::StopSequence => "stop",
        StopReason::MaxTokens => "length",
        StopReason::ToolUse => "tool_calls",
        StopReason::ContentFilter => "content_filter",
    }
}

pub fn decode_response(body: &[u8]) -> Result<Response, GwError> {
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
    let usage = v.get("usage").unwrap_or(&Value::Null);
    Ok(Response {
        id: opt_str(&v, "id").unwrap_or_else(|| new_id("chatcmpl-")),
        content,
        stop: stop_from(
            choice
                .get("finish_reason")
                .and_then(Value::as_str)
                .unwrap_or("stop"),
        ),
        usage: Usage {
            input: usage
                .get("prompt_tokens")
                .and_then(Value::as_u64)
                .unwrap_or(0),
            output: usage
                .get("completion_tokens")
                .and_then(Value::as_u64)
                .unwrap_or(0),
        },
    })
}

pub fn encode_response(r: &Response, alias: &str) -> Value {
    let mut text = String::new();
    let mut calls = Vec::new();
    for p in &r.content {
        match p {
            OutPart::Text(t) => text.push_str(t),
            OutPart::ToolCall {
                id,
                name,
                arguments,
            } => calls.push(json!({
                "id": id, "type": "function",
                "function": {"name": name, "arguments": arguments},
            })),
        }
    }
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

fn chat_id(upstream: &str) -> String {
    if upstream.starts_with("chatcmpl-") {
        upstream.to_owned()
    } else {
        format!("chatcmpl-{upstream}")
    }
}

// ---- streams ----

#[derive(Deserialize)]
struct Chunk<'a> {
    #[serde(default, borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    choices: Vec<ChunkChoice<'a>>,
    #[serde(default)]
    usage: Option<ChunkUsage>,
    #[serde(default)]
    error: Option<IgnoredAny>,
}

#[derive(Deserialize)]
struct ChunkChoice<'a> {
    #[serde(default, borrow)]
    delta: Option<Delta<'a>>,
    #[serde(default, borrow)]
    finish_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(default, borrow)]
    content: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    tool_calls: Option<Vec<ToolDelta<'a>>>,
}

#[derive(Deserialize)]
struct ToolDelta<'a> {
    #[serde(default)]
    index: u64,
    #[serde(default, borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    function: Option<FnDelta<'a>>,
}

#[derive(Deserialize)]
struct FnDelta<'a> {
    #[serde(default, borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    arguments: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct ChunkUsage {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
}

/// Chat chunks → neutral events.
#[derive(Default)]
pub struct StreamDecoder {
    started: bool,
}

impl Decoder for StreamDecoder {
    fn event<'a>(
        &mut self,
        ev: &'a SseEvent,
        sink: &mut dyn FnMut(Event<'a>),
    ) -> Result<(), GwError> {
        if ev.is_done_marker() {
            sink(Event::Done);
            return Ok(());
        }
        let c: Chunk<'a> = serde_json::from_slice(&ev.data)
            .map_err(|_| GwError::bad_upstream("upstream sent a frame that is not a chat chunk"))?;
        if c.error.is_some() {
            return Err(upstream_stream_error(&ev.data));
        }
        if !self.started {
            self.started = true;
            sink(Event::Start {
                id: c.id.unwrap_or_else(|| new_id("chatcmpl-").into()),
                input_tokens: None,
            });
        }
        for ch in c.choices {
            if let Some(d) = ch.delta {
                if let Some(t) = d.content {
                    if !t.is_empty() {
                        sink(Event::Text(t));
                    }
                }
                for tc in d.tool_calls.unwrap_or_default() {
                    let (name, args) = match tc.function {
                        Some(f) => (f.name, f.arguments),
                        None => (None, None),
                    };
                    if let Some(id) = tc.id {
                        sink(Event::ToolStart {
                            index: tc.index,
                            id,
                            name: name.unwrap_or_default(),
                        });
                    }
                    if let Some(a) = args {
                        if !a.is_empty() {
                            sink(Event::ToolArgs {
                                index: tc.index,
                                delta: a,
                            });
                        }
                    }
                }
            }
            if let Some(f) = ch.finish_reason {
                sink(Event::Stop(stop_from(&f)));
            }
        }
        if let Some(u) = c.usage {
            sink(Event::Usage {
                input: u.prompt_tokens,
                output: u.completion_tokens,
            });
        }
        Ok(())
    }
}

/// Neutral events → chat chunks. Every chunk starts with the same id/created/model header, so
/// it is rendered once and each frame is that header, the delta and a constant tail.
pub struct StreamEncoder {
    alias: String,
    /// `{"id":…,"object":"chat.completion.chunk","created":…,"model":…,` once started.
    head: Vec<u8>,
    include_usage: bool,
    usage: Usage,
    /// Upstream tool index → chat tool index, in order of appearance.
    tools: Vec<u64>,
    stop: Option<StopReason>,
}

impl StreamEncoder {
    pub fn new(alias: String, include_usage: bool) -> Self {
        StreamEncoder {
            alias,
            head: Vec::new(),
            include_usage,
            usage: Usage::default(),
            tools: Vec::new(),
            stop: None,
        }
    }

    fn start(&mut self, id: &str) {
        let mut h = BytesMut::with_capacity(128);
        h.extend_from_slice(b"{\"id\":");
        write_str(&mut h, &chat_id(id));
        h.extend_from_slice(b",\"object\":\"chat.completion.chunk\",\"created\":");
        write_u64(&mut h, now_secs());
        h.extend_from_slice(b",\"model\":");
        write_str(&mut h, &self.alias);
        h.extend_from_slice(b",");
        self.head = h.to_vec();
    }

    /// `data: HEAD"choices":[{"index":0,"delta":` … then the caller's delta, then the tail.
    fn open(&mut self, out: &mut BytesMut) {
        if self.head.is_empty() {
            self.start(&new_id("chatcmpl-"));
        }
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(&self.head);
        out.extend_from_slice(b"\"choices\":[{\"index\":0,\"delta\":");
    }

    fn close(out: &mut BytesMut, finish: Option<&str>) {
        match finish {
            None => out.extend_from_slice(b",\"logprobs\":null,\"finish_reason\":null}]}\n\n"),
            Some(f) => {
                out.extend_from_slice(b",\"logprobs\":null,\"finish_reason\":\"");
                out.extend_from_slice(f.as_bytes());
                out.extend_from_slice(b"\"}]}\n\n");
            }
        }
    }
}

impl Encoder for StreamEncoder {
    fn event(&mut self, ev: Event<'_>, out: &mut BytesMut) {
        match ev {
            Event::Start { id, input_tokens } => {
                if let Some(i) = input_tokens {
                    self.usage.input = i;
                }
                self.start(&id);
                self.open(out);
                out.extend_from_slice(b"{\"role\":\"assistant\",\"content\":\"\"}");
                Self::close(out, None);
            }
            Event::Text(t) => {
                self.open(out);
                out.extend_from_slice(b"{\"content\":");
                write_str(out, &t);
                out.extend_from_slice(b"}");
                Self::close(out, None);
            }
            Event::ToolStart { index, id, name } => {
                let i = self.tools.len() as u64;
                self.tools.push(index);
                self.open(out);
                out.extend_from_slice(b"{\"tool_calls\":[{\"index\":");
                write_u64(out, i);
                out.extend_from_slice(b",\"id\":");
                write_str(out, &id);
                out.extend_from_slice(b",\"type\":\"function\",\"function\":{\"name\":");
                write_str(out, &name);
                out.extend_from_slice(b",\"arguments\":\"\"}}]}");
                Self::close(out, None);
            }
            Event::ToolArgs { index, delta } => {
                let i = self
                    .tools
                    .iter()
                    .position(|&t| t == index)
                    .unwrap_or(self.tools.len().saturating_sub(1));
                self.open(out);
                out.extend_from_slice(b"{\"tool_calls\":[{\"index\":");
                write_u64(out, i as u64);
                out.extend_from_slice(b",\"function\":{\"arguments\":");
                write_str(out, &delta);
                out.extend_from_slice(b"}}]}");
                Self::close(out, None);
            }
            Event::Stop(s) => {
                if self.stop.is_none() {
                    self.stop = Some(s);
                    self.open(out);
                    out.extend_from_slice(b"{}");
                    Self::close(out, Some(stop_to(s)));
                }
            }
            Event::Usage { input, output } => {
                if let Some(i) = input {
                    self.usage.input = i;
                }
                if let Some(o) = output {
                    self.usage.output = o;
                }
            }
            Event::Done => {
                if self.stop.is_none() {
                    self.open(out);
                    out.extend_from_slice(b"{}");
                    Self::close(out, Some("stop"));
                }
                if self.include_usage {
                    let u = self.usage;
                    out.extend_from_slice(b"data: ");
                    out.extend_from_slice(&self.head);
                    out.extend_from_slice(b"\"choices\":[],\"usage\":{\"prompt_tokens\":");
                    write_u64(out, u.input);
                    out.extend_from_slice(b",\"completion_tokens\":");
                    write_u64(out, u.output);
                    out.extend_from_slice(b",\"total_tokens\":");
                    write_u64(out, u.input + u.output);
                    out.extend_from_slice(b"}}\n\n");
                }
                out.extend_from_slice(b"data: [DONE]\n\n");
            }
        }
    }

    fn error(&mut self, err: &GwError, out: &mut BytesMut) {
        out.extend_from_slice(&err.sse_event(Dialect::Chat, 0));
    }
}
