//! Chat requests: a client's chat request into the neutral [`Request`] ([`decode`]), and a neutral
//! request out as the body for a chat upstream ([`encode`]).

use std::borrow::Cow;

use bytes::{Bytes, BytesMut};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::dialect::decode::{
    asks, bad, from_json, lit, openai_choice, opt_lit, parse, parts, texts, ToolDef,
};
use crate::dialect::encode::{array, content, text_part, Obj, EMPTY_SCHEMA};
use crate::dialect::error::GwError;
use crate::dialect::members::Rest;
use crate::dialect::neutral::{
    Args, Effort, Image, Message, Part, Request, Role, Text, ToolChoice,
};
use crate::json::write_str;

#[derive(Deserialize)]
struct ChatReq<'a> {
    #[serde(borrow)]
    messages: Vec<ChatMsg<'a>>,
    #[serde(default, borrow)]
    tools: Option<Vec<ChatTool<'a>>>,
    #[serde(default, borrow)]
    tool_choice: Option<&'a RawValue>,
    #[serde(default)]
    max_tokens: Option<u64>,
    #[serde(default)]
    max_completion_tokens: Option<u64>,
    #[serde(default)]
    temperature: Option<f64>,
    #[serde(default)]
    top_p: Option<f64>,
    #[serde(default, borrow)]
    stop: Option<&'a RawValue>,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    stream_options: Option<StreamOptions>,
    #[serde(default, borrow)]
    reasoning_effort: Option<Cow<'a, str>>,
    #[serde(default)]
    parallel_tool_calls: Option<bool>,
    #[serde(default, borrow)]
    user: Option<&'a RawValue>,
    #[serde(default, borrow)]
    safety_identifier: Option<&'a RawValue>,
    // Parts with no counterpart in an Anthropic upstream (docs/translation-policy.md), noted
    // when they ask for anything (see `asks`).
    #[serde(default, borrow)]
    n: Option<&'a RawValue>,
    #[serde(default, borrow)]
    logprobs: Option<&'a RawValue>,
    #[serde(default, borrow)]
    top_logprobs: Option<&'a RawValue>,
    #[serde(default, borrow)]
    response_format: Option<&'a RawValue>,
    #[serde(default, borrow)]
    frequency_penalty: Option<&'a RawValue>,
    #[serde(default, borrow)]
    presence_penalty: Option<&'a RawValue>,
    #[serde(default, borrow)]
    logit_bias: Option<&'a RawValue>,
    #[serde(default, borrow)]
    seed: Option<&'a RawValue>,
    #[serde(default, borrow)]
    store: Option<&'a RawValue>,
    #[serde(default, borrow)]
    metadata: Option<&'a RawValue>,
    #[serde(default, borrow)]
    service_tier: Option<&'a RawValue>,
    #[serde(default, borrow)]
    prompt_cache_key: Option<&'a RawValue>,
    #[serde(default, borrow)]
    modalities: Option<&'a RawValue>,
    #[serde(default, borrow)]
    audio: Option<&'a RawValue>,
    #[serde(default, borrow)]
    prediction: Option<&'a RawValue>,
    #[serde(default, borrow)]
    web_search_options: Option<&'a RawValue>,
    #[serde(default, borrow)]
    functions: Option<&'a RawValue>,
    #[serde(default, borrow)]
    function_call: Option<&'a RawValue>,
    /// Members of no field above (`model` among them): refused unless dropped.
    #[serde(flatten)]
    rest: Rest,
}

#[derive(Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: Option<bool>,
    #[serde(flatten)]
    rest: Rest,
}

#[derive(Deserialize)]
struct ChatMsg<'a> {
    #[serde(borrow)]
    role: Cow<'a, str>,
    #[serde(default, borrow)]
    content: Option<&'a RawValue>,
    #[serde(default, borrow)]
    tool_calls: Option<Vec<ChatToolCall<'a>>>,
    #[serde(default, borrow)]
    tool_call_id: Option<&'a RawValue>,
    #[serde(flatten)]
    rest: Rest,
}

#[derive(Deserialize)]
struct ChatToolCall<'a> {
    #[serde(default, borrow)]
    id: Option<&'a RawValue>,
    #[serde(borrow)]
    function: ChatFn<'a>,
    #[serde(flatten)]
    rest: Rest,
}

#[derive(Deserialize)]
struct ChatFn<'a> {
    #[serde(borrow)]
    name: &'a RawValue,
    #[serde(default, borrow)]
    arguments: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct ChatTool<'a> {
    #[serde(borrow)]
    function: ToolDef<'a>,
    #[serde(flatten)]
    rest: Rest,
}

pub fn decode(body: &[u8]) -> Result<Request<'_>, GwError> {
    let c: ChatReq = parse(body)?;
    let mut r = Request {
        max_tokens: c.max_completion_tokens.or(c.max_tokens),
        temperature: c.temperature,
        top_p: c.top_p,
        stream: c.stream.unwrap_or(false),
        tool_choice: openai_choice(c.tool_choice)?,
        ..Request::default()
    };
    if let Some(o) = c.stream_options {
        r.include_usage = o.include_usage.unwrap_or(false);
        o.rest.note(
            &mut r,
            "stream_options",
            &|| "stream_options".to_owned(),
            &[],
        );
    }
    for (i, m) in c.messages.into_iter().enumerate() {
        m.rest
            .note(&mut r, "messages[]", &|| format!("messages[{i}]"), &[]);
        match &*m.role {
            "system" | "developer" => {
                let t = texts(&mut r, m.content, &format!("messages[{i}].content"))?;
                r.system.extend(t)
            }
            "user" => {
                // Keep one turn per client message: two user messages in a row stay two turns
                // for a chat upstream (merging happens only where the target requires it).
                let parts = parts(&mut r, m.content, &format!("messages[{i}].content"), true)?;
                r.messages.push(Message {
                    role: Role::User,
                    parts,
                });
            }
            "assistant" => {
                let mut parts: Vec<Part> =
                    texts(&mut r, m.content, &format!("messages[{i}].content"))?
                        .into_iter()
                        .map(Part::Text)
                        .collect();
                for (j, tc) in m.tool_calls.unwrap_or_default().into_iter().enumerate() {
                    let at = || format!("messages[{i}].tool_calls[{j}]");
                    tc.rest
                        .note(&mut r, "messages[].tool_calls[]", &at, &["type"]);
                    parts.push(Part::ToolCall {
                        id: opt_lit(tc.id, "tool call id")?.unwrap_or(Text::Own(String::new())),
                        name: lit(tc.function.name, "function name")?,
                        args: Args::Str(
                            opt_lit(tc.function.arguments, "function arguments")?
                                .unwrap_or(Text::Own(String::new())),
                        ),
                    });
                }
                r.messages.push(Message {
                    role: Role::Assistant,
                    parts,
                });
            }
            "tool" => {
                let part = Part::ToolResult {
                    id: opt_lit(m.tool_call_id, "tool_call_id")?
                        .unwrap_or(Text::Own(String::new())),
                    content: texts(&mut r, m.content, &format!("messages[{i}].content"))?,
                    is_error: false,
                };
                // Consecutive tool results answer one assistant turn: one user turn holds them.
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
            other => return Err(bad(format!("messages: unknown role {other:?}"))),
        }
    }
    for (i, t) in c.tools.unwrap_or_default().into_iter().enumerate() {
        let unmapped = r.unmapped.len();
        t.rest
            .note(&mut r, "tools[]", &|| format!("tools[{i}]"), &["type"]);
        let at = || format!("tools[{i}].function");
        let tool = t.function.tool(&mut r, "tools[].function", &at)?;
        if let (Some(tool), true) = (tool, r.unmapped.len() == unmapped) {
            r.tools.push(tool);
        }
    }
    if let Some(e) = c.reasoning_effort {
        r.effort = Some(
            Effort::from_name(&e)
                .ok_or_else(|| bad(format!("reasoning_effort: unknown effort {e:?}")))?,
        );
    }
    r.parallel_tool_calls = c.parallel_tool_calls;
    r.user = match c.safety_identifier {
        Some(id) => Some(lit(id, "safety_identifier")?),
        None => opt_lit(c.user, "user")?,
    };
    r.unmapped_fields(&[
        ("n", asks(c.n, &["1"])),
        ("logprobs", asks(c.logprobs, &[])),
        ("top_logprobs", asks(c.top_logprobs, &[])),
        (
            "response_format",
            asks(c.response_format, &[r#"{"type":"text"}"#]),
        ),
        ("frequency_penalty", asks(c.frequency_penalty, &[])),
        ("presence_penalty", asks(c.presence_penalty, &[])),
        ("logit_bias", asks(c.logit_bias, &[])),
        ("seed", asks(c.seed, &[])),
        ("store", asks(c.store, &[])),
        ("metadata", asks(c.metadata, &[])),
        (
            "service_tier",
            asks(c.service_tier, &["\"auto\"", "\"default\""]),
        ),
        ("prompt_cache_key", asks(c.prompt_cache_key, &[])),
        ("modalities", asks(c.modalities, &[r#"["text"]"#])),
        ("audio", asks(c.audio, &[])),
        ("prediction", asks(c.prediction, &[])),
        ("web_search_options", asks(c.web_search_options, &[])),
        ("functions", asks(c.functions, &[])),
        ("function_call", asks(c.function_call, &[])),
    ]);
    c.rest.note(&mut r, "", &String::new, &["model"]);
    if let Some(stop) = c.stop {
        let s = stop.get();
        if s.starts_with('"') {
            r.stop.push(Text::Lit(s));
        } else if s.starts_with('[') {
            let items: Vec<&RawValue> = from_json(s, || "stop".to_owned())?;
            for i in items {
                r.stop.push(lit(i, "stop")?);
            }
        }
    }
    Ok(r)
}

/// A chat `image_url` part.
fn chat_image(out: &mut BytesMut, img: &Image) {
    out.extend_from_slice(b"{\"type\":\"image_url\",\"image_url\":{\"url\":");
    match img {
        Image::Url(t) => t.write(out),
        Image::Base64 { media_type, data } => write_str(
            out,
            &format!("data:{};base64,{}", media_type.decode(), data.decode()),
        ),
    }
    out.extend_from_slice(b"}}");
}

/// The arguments as the JSON *string* OpenAI expects.
fn args_as_string(out: &mut BytesMut, a: &Args) {
    match a {
        Args::Str(t) => t.write(out),
        Args::Obj(raw) => write_str(out, raw),
    }
}

/// The member a chat upstream takes the output cap in (a provider's `max_tokens_field`):
/// `max_completion_tokens`, which OpenAI's reasoning models require and which replaces the
/// deprecated `max_tokens`, or `max_tokens` for compatible servers that know only that one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MaxTokensField {
    #[default]
    MaxCompletionTokens,
    MaxTokens,
}

impl MaxTokensField {
    pub const ALL: [MaxTokensField; 2] = [
        MaxTokensField::MaxCompletionTokens,
        MaxTokensField::MaxTokens,
    ];

    /// The member's name, as the request and the config write it.
    pub fn name(self) -> &'static str {
        match self {
            MaxTokensField::MaxCompletionTokens => "max_completion_tokens",
            MaxTokensField::MaxTokens => "max_tokens",
        }
    }
}

pub fn encode(r: &Request, model_json: &[u8], max_tokens: MaxTokensField) -> Bytes {
    let mut out = BytesMut::with_capacity(1024);
    let mut o = Obj::new(&mut out);
    o.raw("model", model_json);
    let msgs = o.key("messages");
    msgs.extend_from_slice(b"[");
    let mut first = true;
    let mut sep = |out: &mut BytesMut| {
        if !std::mem::take(&mut first) {
            out.extend_from_slice(b",");
        }
    };
    for s in &r.system {
        sep(msgs);
        msgs.extend_from_slice(b"{\"role\":\"system\",\"content\":");
        s.write(msgs);
        msgs.extend_from_slice(b"}");
    }
    for m in &r.messages {
        let texts: Vec<&Text> = m
            .parts
            .iter()
            .filter_map(|p| match p {
                Part::Text(t) => Some(t),
                _ => None,
            })
            .collect();
        match m.role {
            // A system message stays where the client put it.
            Role::System => {
                sep(msgs);
                msgs.extend_from_slice(b"{\"role\":\"system\",\"content\":");
                content(msgs, &texts);
                msgs.extend_from_slice(b"}");
            }
            Role::User => {
                // Tool results are their own `tool` messages, ahead of the user's text.
                for p in &m.parts {
                    if let Part::ToolResult { id, content: c, .. } = p {
                        sep(msgs);
                        msgs.extend_from_slice(b"{\"role\":\"tool\",\"tool_call_id\":");
                        id.write(msgs);
                        msgs.extend_from_slice(b",\"content\":");
                        content(msgs, &c.iter().collect::<Vec<_>>());
                        msgs.extend_from_slice(b"}");
                    }
                }
                let with_images = m.parts.iter().any(|p| matches!(p, Part::Image(_)));
                if with_images {
                    // Text and images in the client's order, as content parts.
                    let items: Vec<&Part> = m
                        .parts
                        .iter()
                        .filter(|p| matches!(p, Part::Text(_) | Part::Image(_)))
                        .collect();
                    sep(msgs);
                    msgs.extend_from_slice(b"{\"role\":\"user\",\"content\":");
                    array(msgs, &items, |out, p| match p {
                        Part::Text(t) => text_part(out, t),
                        Part::Image(img) => chat_image(out, img),
                        _ => {}
                    });
                    msgs.extend_from_slice(b"}");
                } else if !texts.is_empty() {
                    sep(msgs);
                    msgs.extend_from_slice(b"{\"role\":\"user\",\"content\":");
                    content(msgs, &texts);
                    msgs.extend_from_slice(b"}");
                }
            }
            Role::Assistant => {
                sep(msgs);
                msgs.extend_from_slice(b"{\"role\":\"assistant\",\"content\":");
                if texts.is_empty() {
                    msgs.extend_from_slice(b"null");
                } else {
                    content(msgs, &texts);
                }
                let calls: Vec<&Part> = m
                    .parts
                    .iter()
                    .filter(|p| matches!(p, Part::ToolCall { .. }))
                    .collect();
                if !calls.is_empty() {
                    msgs.extend_from_slice(b",\"tool_calls\":");
                    array(msgs, &calls, |out, p| {
                        if let Part::ToolCall { id, name, args } = p {
                            out.extend_from_slice(b"{\"id\":");
                            id.write(out);
                            out.extend_from_slice(
                                b",\"type\":\"function\",\"function\":{\"name\":",
                            );
                            name.write(out);
                            out.extend_from_slice(b",\"arguments\":");
                            args_as_string(out, args);
                            out.extend_from_slice(b"}}");
                        }
                    });
                }
                msgs.extend_from_slice(b"}");
            }
        }
    }
    msgs.extend_from_slice(b"]");
    if !r.tools.is_empty() {
        array(o.key("tools"), &r.tools, |out, t| {
            out.extend_from_slice(b"{\"type\":\"function\",\"function\":{\"name\":");
            t.name.write(out);
            if let Some(d) = &t.description {
                out.extend_from_slice(b",\"description\":");
                d.write(out);
            }
            out.extend_from_slice(b",\"parameters\":");
            out.extend_from_slice(t.parameters.map_or(EMPTY_SCHEMA, str::as_bytes));
            if t.strict {
                out.extend_from_slice(b",\"strict\":true");
            }
            out.extend_from_slice(b"}}");
        });
    }
    if let Some(c) = &r.tool_choice {
        let out = o.key("tool_choice");
        match c {
            ToolChoice::Auto => out.extend_from_slice(b"\"auto\""),
            ToolChoice::None => out.extend_from_slice(b"\"none\""),
            ToolChoice::Required => out.extend_from_slice(b"\"required\""),
            ToolChoice::Named(n) => {
                out.extend_from_slice(b"{\"type\":\"function\",\"function\":{\"name\":");
                n.write(out);
                out.extend_from_slice(b"}}");
            }
        }
    }
    if let Some(n) = r.max_tokens {
        o.u64(max_tokens.name(), n);
    }
    if let Some(e) = r.effort {
        let out = o.key("reasoning_effort");
        write_str(out, e.openai());
    }
    if r.parallel_tool_calls == Some(false) && !r.tools.is_empty() {
        o.raw("parallel_tool_calls", b"false");
    }
    if let Some(u) = &r.user {
        o.text("user", u);
    }
    if let Some(t) = r.temperature {
        o.f64("temperature", t);
    }
    if let Some(t) = r.top_p {
        o.f64("top_p", t);
    }
    if !r.stop.is_empty() {
        array(o.key("stop"), &r.stop, |out, s| s.write(out));
    }
    if r.stream {
        o.raw("stream", b"true");
        // Usage is needed for every client dialect's final event, whatever the client asked.
        o.raw("stream_options", b"{\"include_usage\":true}");
    }
    o.end();
    out.freeze()
}
