//! Request translation: chat | messages | responses → neutral [`Request`] → chat | messages.
//!
//! The client's body is deserialized into borrowed structs, and every string the upstream request
//! carries unchanged (message text, ids, names, schemas) is kept as the JSON literal the client
//! wrote and copied to the output as bytes: no unescaping, no DOM, no re-escaping. Only what the
//! target dialect shapes differently is decoded (tool-call arguments, which are a JSON string in
//! OpenAI's dialects and an object in Anthropic's).

use std::borrow::Cow;

use bytes::{Bytes, BytesMut};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::{bad, opt_cow};
use crate::error::GwError;
use crate::json::{write_str, write_u64};

/// Anthropic requires `max_tokens`; OpenAI clients usually leave it out.
const DEFAULT_MAX_TOKENS: u64 = 4096;

/// Text from the client's request.
#[derive(Debug, Clone)]
pub enum Text<'a> {
    /// A JSON string literal exactly as the client wrote it, quotes and escapes included.
    Lit(&'a str),
    Own(String),
}

impl Text<'_> {
    fn write(&self, out: &mut BytesMut) {
        match self {
            Text::Lit(l) => out.extend_from_slice(l.as_bytes()),
            Text::Own(s) => write_str(out, s),
        }
    }
    fn is_empty(&self) -> bool {
        match self {
            Text::Lit(l) => *l == "\"\"",
            Text::Own(s) => s.is_empty(),
        }
    }
    fn decode(&self) -> Cow<'_, str> {
        match self {
            Text::Lit(l) => serde_json::from_str::<Cow<str>>(l).unwrap_or_default(),
            Text::Own(s) => Cow::Borrowed(s),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    User,
    Assistant,
}

#[derive(Debug)]
pub enum Args<'a> {
    /// OpenAI: a JSON string whose content is the arguments object.
    Str(Text<'a>),
    /// Anthropic: the arguments object itself, as raw JSON.
    Obj(&'a str),
}

/// An image in a user turn. Both upstream dialects take images by URL and inline (base64), so
/// every form a client can send by value translates; images by file id cannot (the upstream
/// cannot see another provider's files) and are refused at decoding.
#[derive(Debug)]
pub enum Image<'a> {
    /// An `http(s)://` URL literal as the client wrote it.
    Url(Text<'a>),
    /// Inline data: Anthropic's base64 source, or an OpenAI `data:<type>;base64,<data>` URL
    /// split once at decoding.
    Base64 {
        media_type: Text<'a>,
        data: Text<'a>,
    },
}

#[derive(Debug)]
pub enum Part<'a> {
    Text(Text<'a>),
    Image(Image<'a>),
    ToolCall {
        id: Text<'a>,
        name: Text<'a>,
        args: Args<'a>,
    },
    ToolResult {
        id: Text<'a>,
        content: Vec<Text<'a>>,
        is_error: bool,
    },
}

#[derive(Debug)]
pub struct Message<'a> {
    pub role: Role,
    pub parts: Vec<Part<'a>>,
}

#[derive(Debug)]
pub struct Tool<'a> {
    pub name: Text<'a>,
    pub description: Option<Text<'a>>,
    /// JSON schema, raw.
    pub parameters: Option<&'a str>,
}

#[derive(Debug)]
pub enum ToolChoice<'a> {
    Auto,
    None,
    Required,
    Named(Text<'a>),
}

#[derive(Debug, Default)]
pub struct Request<'a> {
    pub system: Vec<Text<'a>>,
    pub messages: Vec<Message<'a>>,
    pub tools: Vec<Tool<'a>>,
    pub tool_choice: Option<ToolChoice<'a>>,
    pub max_tokens: Option<u64>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub stop: Vec<Text<'a>>,
    pub stream: bool,
    /// Chat clients only: whether they asked for the final usage chunk.
    pub include_usage: bool,
}

impl<'a> Request<'a> {
    /// Adds a part to the last turn when it has the same role, else starts a turn.
    fn push(&mut self, role: Role, part: Part<'a>) {
        match self.messages.last_mut() {
            Some(m) if m.role == role => m.parts.push(part),
            _ => self.messages.push(Message {
                role,
                parts: vec![part],
            }),
        }
    }
}

// ---- shared decoding helpers ----

fn lit<'a>(raw: &'a RawValue, what: &str) -> Result<Text<'a>, GwError> {
    let s = raw.get();
    if s.starts_with('"') {
        Ok(Text::Lit(s))
    } else {
        Err(bad(format!("{what} must be a string")))
    }
}

fn opt_lit<'a>(raw: Option<&'a RawValue>, what: &str) -> Result<Option<Text<'a>>, GwError> {
    raw.map(|r| lit(r, what)).transpose()
}

fn object<'a>(raw: Option<&'a RawValue>, what: &str) -> Result<Option<&'a str>, GwError> {
    match raw {
        None => Ok(None),
        Some(r) if r.get().starts_with('{') => Ok(Some(r.get())),
        Some(_) => Err(bad(format!("{what} must be an object"))),
    }
}

/// A content part of OpenAI's dialects: chat (`text`, `image_url`, `refusal`, …) and Responses
/// (`input_text`, `output_text`, `input_image`, …).
#[derive(Deserialize)]
struct ContentPart<'a> {
    #[serde(rename = "type", default, borrow, deserialize_with = "opt_cow")]
    kind: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    text: Option<&'a RawValue>,
    /// Chat: `{"url": …}`; Responses: the URL itself.
    #[serde(default, borrow)]
    image_url: Option<&'a RawValue>,
    #[serde(default, borrow)]
    refusal: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct ChatImageUrl<'a> {
    #[serde(borrow)]
    url: &'a RawValue,
}

/// `data:<media type>;base64,<data>` → (media type, data).
fn split_data_url(url: &str) -> Option<(&str, &str)> {
    let (media_type, data) = url.strip_prefix("data:")?.split_once(',')?;
    let media_type = media_type.strip_suffix(";base64")?;
    (!media_type.is_empty() && !data.is_empty()).then_some((media_type, data))
}

/// An image URL as a client sent it: http(s), kept as written, or a base64 data URL, split.
fn image_url<'a>(raw: &'a RawValue, what: &str) -> Result<Image<'a>, GwError> {
    let t = lit(raw, what)?;
    let url = t.decode();
    if let Some((media_type, data)) = split_data_url(&url) {
        return Ok(Image::Base64 {
            media_type: Text::Own(media_type.to_owned()),
            data: Text::Own(data.to_owned()),
        });
    }
    if url.starts_with("data:") || !(url.starts_with("https://") || url.starts_with("http://")) {
        return Err(bad(format!(
            "{what} must be an http(s) URL or a data:<media type>;base64,<data> URL"
        )));
    }
    Ok(Image::Url(t))
}

/// Why a part of this kind has no translation: said to the client rather than dropped.
fn untranslatable(what: &str, kind: &str) -> GwError {
    bad(format!(
        "{what}: a content part of type {kind:?} cannot be translated to this model's upstream \
         dialect"
    ))
}

/// Parts of a content value that is a string, null, or an array of OpenAI content parts. Images
/// are taken only where `images` (user turns); any other part without a translation is refused
/// with a 400 naming it, never dropped.
fn parts<'a>(
    raw: Option<&'a RawValue>,
    what: &str,
    images: bool,
) -> Result<Vec<Part<'a>>, GwError> {
    let Some(raw) = raw else {
        return Ok(Vec::new());
    };
    let s = raw.get();
    match s.as_bytes().first() {
        Some(b'"') => Ok(vec![Part::Text(Text::Lit(s))]),
        Some(b'n') => Ok(Vec::new()),
        Some(b'[') => {
            let list: Vec<ContentPart<'a>> =
                serde_json::from_str(s).map_err(|e| bad(format!("{what}: {e}")))?;
            let mut out = Vec::with_capacity(list.len());
            for p in list {
                let kind = p.kind.as_deref();
                match kind {
                    None | Some("text" | "input_text" | "output_text") => {
                        if let Some(t) = p.text {
                            out.push(Part::Text(lit(t, what)?));
                        }
                    }
                    Some("refusal") => {
                        if let Some(t) = p.refusal {
                            out.push(Part::Text(lit(t, what)?));
                        }
                    }
                    Some(k @ ("image_url" | "input_image")) => {
                        if !images {
                            return Err(bad(format!(
                                "{what}: images are translated only in user messages"
                            )));
                        }
                        let url = match p.image_url {
                            Some(u) if u.get().starts_with('{') => {
                                let u: ChatImageUrl = serde_json::from_str(u.get())
                                    .map_err(|e| bad(format!("{what}: image_url: {e}")))?;
                                u.url
                            }
                            Some(u) => u,
                            None => {
                                return Err(bad(format!(
                                    "{what}: an {k} part needs an image_url (images by file id \
                                     cannot be translated: the upstream cannot see those files)"
                                )))
                            }
                        };
                        out.push(Part::Image(image_url(url, &format!("{what}: image_url"))?));
                    }
                    Some(k) => return Err(untranslatable(what, k)),
                }
            }
            Ok(out)
        }
        _ => Err(bad(format!("{what} must be a string or an array"))),
    }
}

/// Text of a content value where only text can go (system prompts, tool results, assistant
/// turns): any other part is refused with a 400 naming it.
fn texts<'a>(raw: Option<&'a RawValue>, what: &str) -> Result<Vec<Text<'a>>, GwError> {
    Ok(parts(raw, what, false)?
        .into_iter()
        .filter_map(|p| match p {
            Part::Text(t) => Some(t),
            _ => None,
        })
        .collect())
}

fn role_of(s: &str, what: &str) -> Result<Role, GwError> {
    match s {
        "user" => Ok(Role::User),
        "assistant" => Ok(Role::Assistant),
        other => Err(bad(format!("{what}: unknown role {other:?}"))),
    }
}

fn parse<'a, T: Deserialize<'a>>(body: &'a [u8]) -> Result<T, GwError> {
    serde_json::from_slice(body).map_err(|e| bad(format!("invalid request: {e}")))
}

// ---- chat completions ----

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
}

#[derive(Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: Option<bool>,
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
}

#[derive(Deserialize)]
struct ChatToolCall<'a> {
    #[serde(default, borrow)]
    id: Option<&'a RawValue>,
    #[serde(borrow)]
    function: ChatFn<'a>,
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
}

/// A function definition: OpenAI chat nests it in `function`, Responses flattens it.
#[derive(Deserialize)]
struct ToolDef<'a> {
    #[serde(rename = "type", default, borrow, deserialize_with = "opt_cow")]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow)]
    name: &'a RawValue,
    #[serde(default, borrow)]
    description: Option<&'a RawValue>,
    #[serde(default, borrow)]
    parameters: Option<&'a RawValue>,
}

impl<'a> ToolDef<'a> {
    fn tool(self) -> Result<Tool<'a>, GwError> {
        Ok(Tool {
            name: lit(self.name, "tool name")?,
            description: opt_lit(self.description, "tool description")?,
            parameters: object(self.parameters, "tool parameters")?,
        })
    }
}

#[derive(Deserialize)]
struct NamedChoice<'a> {
    #[serde(rename = "type", default, borrow, deserialize_with = "opt_cow")]
    kind: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    name: Option<&'a RawValue>,
    #[serde(default, borrow)]
    function: Option<NamedFn<'a>>,
}

#[derive(Deserialize)]
struct NamedFn<'a> {
    #[serde(borrow)]
    name: &'a RawValue,
}

/// OpenAI tool choice (chat or responses): a mode string or a named function.
fn openai_choice(raw: Option<&RawValue>) -> Result<Option<ToolChoice<'_>>, GwError> {
    let Some(raw) = raw else { return Ok(None) };
    let s = raw.get();
    if s.starts_with('"') {
        let mode: Cow<str> =
            serde_json::from_str(s).map_err(|e| bad(format!("tool_choice: {e}")))?;
        return Ok(Some(match &*mode {
            "none" => ToolChoice::None,
            "required" => ToolChoice::Required,
            _ => ToolChoice::Auto,
        }));
    }
    let c: NamedChoice = serde_json::from_str(s).map_err(|e| bad(format!("tool_choice: {e}")))?;
    let name = c.function.map(|f| f.name).or(c.name);
    Ok(match name {
        Some(n) => Some(ToolChoice::Named(lit(n, "tool_choice name")?)),
        None => None,
    })
}

pub fn decode_chat(body: &[u8]) -> Result<Request<'_>, GwError> {
    let c: ChatReq = parse(body)?;
    let mut r = Request {
        max_tokens: c.max_completion_tokens.or(c.max_tokens),
        temperature: c.temperature,
        top_p: c.top_p,
        stream: c.stream.unwrap_or(false),
        include_usage: c
            .stream_options
            .and_then(|o| o.include_usage)
            .unwrap_or(false),
        tool_choice: openai_choice(c.tool_choice)?,
        ..Request::default()
    };
    for m in c.messages {
        match &*m.role {
            "system" | "developer" => r.system.extend(texts(m.content, "system content")?),
            "user" => {
                // Keep one turn per client message: two user messages in a row stay two turns
                // for a chat upstream (merging happens only where the target requires it).
                r.messages.push(Message {
                    role: Role::User,
                    parts: parts(m.content, "user content", true)?,
                });
            }
            "assistant" => {
                let mut parts: Vec<Part> = texts(m.content, "assistant content")?
                    .into_iter()
                    .map(Part::Text)
                    .collect();
                for tc in m.tool_calls.unwrap_or_default() {
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
                    content: texts(m.content, "tool content")?,
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
    for t in c.tools.unwrap_or_default() {
        r.tools.push(t.function.tool()?);
    }
    if let Some(stop) = c.stop {
        let s = stop.get();
        if s.starts_with('"') {
            r.stop.push(Text::Lit(s));
        } else if s.starts_with('[') {
            let items: Vec<&RawValue> =
                serde_json::from_str(s).map_err(|e| bad(format!("stop: {e}")))?;
            for i in items {
                r.stop.push(lit(i, "stop")?);
            }
        }
    }
    Ok(r)
}

// ---- anthropic messages ----

#[derive(Deserialize)]
struct MsgReq<'a> {
    #[serde(default, borrow)]
    system: Option<&'a RawValue>,
    #[serde(borrow)]
    messages: Vec<MsgMsg<'a>>,
    #[serde(default, borrow)]
    tools: Option<Vec<MsgTool<'a>>>,
    #[serde(default, borrow)]
    tool_choice: Option<NamedChoice<'a>>,
    #[serde(default)]
    max_tokens: Option<u64>,
    #[serde(default)]
    temperature: Option<f64>,
    #[serde(default)]
    top_p: Option<f64>,
    #[serde(default, borrow)]
    stop_sequences: Option<Vec<&'a RawValue>>,
    #[serde(default)]
    stream: Option<bool>,
}

#[derive(Deserialize)]
struct MsgMsg<'a> {
    #[serde(borrow)]
    role: Cow<'a, str>,
    #[serde(borrow)]
    content: &'a RawValue,
}

#[derive(Deserialize)]
struct MsgBlock<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(default, borrow)]
    text: Option<&'a RawValue>,
    #[serde(default, borrow)]
    id: Option<&'a RawValue>,
    #[serde(default, borrow)]
    name: Option<&'a RawValue>,
    #[serde(default, borrow)]
    input: Option<&'a RawValue>,
    #[serde(default, borrow)]
    tool_use_id: Option<&'a RawValue>,
    #[serde(default, borrow)]
    content: Option<&'a RawValue>,
    #[serde(default)]
    is_error: Option<bool>,
    #[serde(default, borrow)]
    source: Option<ImageSource<'a>>,
}

/// An Anthropic image block's `source`.
#[derive(Deserialize)]
struct ImageSource<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(default, borrow)]
    media_type: Option<&'a RawValue>,
    #[serde(default, borrow)]
    data: Option<&'a RawValue>,
    #[serde(default, borrow)]
    url: Option<&'a RawValue>,
}

fn anthropic_image<'a>(source: Option<ImageSource<'a>>) -> Result<Image<'a>, GwError> {
    let s = source.ok_or_else(|| bad("image block without a source"))?;
    match &*s.kind {
        "base64" => match (s.media_type, s.data) {
            (Some(m), Some(d)) => Ok(Image::Base64 {
                media_type: lit(m, "image source media_type")?,
                data: lit(d, "image source data")?,
            }),
            _ => Err(bad("a base64 image source needs media_type and data")),
        },
        "url" => image_url(
            s.url.ok_or_else(|| bad("a url image source needs a url"))?,
            "image source url",
        ),
        other => Err(bad(format!(
            "an image source of type {other:?} cannot be translated to this model's upstream \
             dialect (only base64 and url sources can)"
        ))),
    }
}

#[derive(Deserialize)]
struct MsgTool<'a> {
    #[serde(borrow)]
    name: &'a RawValue,
    #[serde(default, borrow)]
    description: Option<&'a RawValue>,
    #[serde(default, borrow)]
    input_schema: Option<&'a RawValue>,
}

pub fn decode_messages(body: &[u8]) -> Result<Request<'_>, GwError> {
    let c: MsgReq = parse(body)?;
    let mut r = Request {
        system: texts(c.system, "system")?,
        max_tokens: c.max_tokens,
        temperature: c.temperature,
        top_p: c.top_p,
        stream: c.stream.unwrap_or(false),
        ..Request::default()
    };
    for m in c.messages {
        let role = role_of(&m.role, "messages")?;
        let raw = m.content.get();
        let mut parts = Vec::new();
        if raw.starts_with('"') {
            parts.push(Part::Text(Text::Lit(raw)));
        } else if raw.starts_with('[') {
            let blocks: Vec<MsgBlock> =
                serde_json::from_str(raw).map_err(|e| bad(format!("messages content: {e}")))?;
            for b in blocks {
                match &*b.kind {
                    "text" => {
                        if let Some(t) = opt_lit(b.text, "text")? {
                            parts.push(Part::Text(t));
                        }
                    }
                    "tool_use" => parts.push(Part::ToolCall {
                        id: opt_lit(b.id, "tool_use id")?.unwrap_or(Text::Own(String::new())),
                        name: opt_lit(b.name, "tool_use name")?.unwrap_or(Text::Own(String::new())),
                        args: Args::Obj(object(b.input, "tool_use input")?.unwrap_or("{}")),
                    }),
                    "tool_result" => parts.push(Part::ToolResult {
                        id: opt_lit(b.tool_use_id, "tool_use_id")?
                            .unwrap_or(Text::Own(String::new())),
                        content: texts(b.content, "tool_result content")?,
                        is_error: b.is_error.unwrap_or(false),
                    }),
                    "image" if role == Role::User => {
                        parts.push(Part::Image(anthropic_image(b.source)?))
                    }
                    "image" => {
                        return Err(bad(
                            "messages content: images are translated only in user turns",
                        ))
                    }
                    // The model's own reasoning: opaque to, and not accepted by, another
                    // provider; an upstream of the other dialect reasons afresh.
                    "thinking" | "redacted_thinking" => {}
                    other => return Err(untranslatable("messages content", other)),
                }
            }
        } else {
            return Err(bad("messages content must be a string or an array"));
        }
        r.messages.push(Message { role, parts });
    }
    for t in c.tools.unwrap_or_default() {
        r.tools.push(Tool {
            name: lit(t.name, "tool name")?,
            description: opt_lit(t.description, "tool description")?,
            parameters: object(t.input_schema, "input_schema")?,
        });
    }
    if let Some(tc) = c.tool_choice {
        r.tool_choice = match tc.kind.as_deref() {
            Some("auto") => Some(ToolChoice::Auto),
            Some("any") => Some(ToolChoice::Required),
            Some("none") => Some(ToolChoice::None),
            Some("tool") => match tc.name {
                Some(n) => Some(ToolChoice::Named(lit(n, "tool_choice name")?)),
                None => return Err(bad("tool_choice of type tool needs a name")),
            },
            _ => None,
        };
    }
    for s in c.stop_sequences.unwrap_or_default() {
        r.stop.push(lit(s, "stop_sequences")?);
    }
    Ok(r)
}

// ---- openai responses ----

#[derive(Deserialize)]
struct RespReq<'a> {
    #[serde(default, borrow)]
    instructions: Option<&'a RawValue>,
    #[serde(borrow)]
    input: &'a RawValue,
    #[serde(default, borrow)]
    tools: Option<Vec<ToolDef<'a>>>,
    #[serde(default, borrow)]
    tool_choice: Option<&'a RawValue>,
    #[serde(default)]
    max_output_tokens: Option<u64>,
    #[serde(default)]
    temperature: Option<f64>,
    #[serde(default)]
    top_p: Option<f64>,
    #[serde(default)]
    stream: Option<bool>,
}

#[derive(Deserialize)]
struct RespItem<'a> {
    #[serde(rename = "type", default, borrow, deserialize_with = "opt_cow")]
    kind: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "opt_cow")]
    role: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    content: Option<&'a RawValue>,
    #[serde(default, borrow)]
    call_id: Option<&'a RawValue>,
    #[serde(default, borrow)]
    name: Option<&'a RawValue>,
    #[serde(default, borrow)]
    arguments: Option<&'a RawValue>,
    #[serde(default, borrow)]
    output: Option<&'a RawValue>,
}

pub fn decode_responses(body: &[u8]) -> Result<Request<'_>, GwError> {
    let c: RespReq = parse(body)?;
    let mut r = Request {
        system: texts(c.instructions, "instructions")?,
        max_tokens: c.max_output_tokens,
        temperature: c.temperature,
        top_p: c.top_p,
        stream: c.stream.unwrap_or(false),
        tool_choice: openai_choice(c.tool_choice)?,
        ..Request::default()
    };
    let input = c.input.get();
    if input.starts_with('"') {
        r.push(Role::User, Part::Text(Text::Lit(input)));
    } else if input.starts_with('[') {
        let items: Vec<RespItem> =
            serde_json::from_str(input).map_err(|e| bad(format!("input: {e}")))?;
        for it in items {
            match it.kind.as_deref().unwrap_or("message") {
                "message" => match it.role.as_deref() {
                    Some("system" | "developer") => {
                        r.system.extend(texts(it.content, "input content")?)
                    }
                    Some(role) => {
                        let role = role_of(role, "input")?;
                        for p in parts(it.content, "input content", role == Role::User)? {
                            r.push(role, p);
                        }
                    }
                    None => return Err(bad("input: every message needs a role")),
                },
                "function_call" => r.push(
                    Role::Assistant,
                    Part::ToolCall {
                        id: opt_lit(it.call_id, "call_id")?.unwrap_or(Text::Own(String::new())),
                        name: opt_lit(it.name, "name")?.unwrap_or(Text::Own(String::new())),
                        args: Args::Str(
                            opt_lit(it.arguments, "arguments")?.unwrap_or(Text::Own(String::new())),
                        ),
                    },
                ),
                "function_call_output" => r.push(
                    Role::User,
                    Part::ToolResult {
                        id: opt_lit(it.call_id, "call_id")?.unwrap_or(Text::Own(String::new())),
                        content: texts(it.output, "output")?,
                        is_error: false,
                    },
                ),
                // The model's earlier reasoning: not accepted by another provider.
                "reasoning" => {}
                // Built-in tool calls, item references (stored on OpenAI's side), …
                other => {
                    return Err(bad(format!(
                        "input: an item of type {other:?} cannot be translated to this model's \
                         upstream dialect"
                    )))
                }
            }
        }
    } else {
        return Err(bad("input must be a string or an array"));
    }
    for t in c.tools.unwrap_or_default() {
        if t.kind.as_deref().is_some_and(|k| k != "function") {
            return Err(bad("tools: only function tools can be translated"));
        }
        r.tools.push(t.tool()?);
    }
    Ok(r)
}

// ---- encoding ----

/// Writes `{` … `}` with commas between fields.
struct Obj<'o> {
    out: &'o mut BytesMut,
    first: bool,
}

impl<'o> Obj<'o> {
    fn new(out: &'o mut BytesMut) -> Self {
        out.extend_from_slice(b"{");
        Obj { out, first: true }
    }
    fn key(&mut self, k: &str) -> &mut BytesMut {
        if !self.first {
            self.out.extend_from_slice(b",");
        }
        self.first = false;
        self.out.extend_from_slice(b"\"");
        self.out.extend_from_slice(k.as_bytes());
        self.out.extend_from_slice(b"\":");
        self.out
    }
    fn raw(&mut self, k: &str, v: &[u8]) {
        self.key(k).extend_from_slice(v);
    }
    fn text(&mut self, k: &str, t: &Text) {
        let o = self.key(k);
        t.write(o);
    }
    fn u64(&mut self, k: &str, n: u64) {
        let o = self.key(k);
        write_u64(o, n);
    }
    fn f64(&mut self, k: &str, f: f64) {
        let s = if f.is_finite() {
            format!("{f}")
        } else {
            "null".into()
        };
        self.raw(k, s.as_bytes());
    }
    fn end(self) {
        self.out.extend_from_slice(b"}");
    }
}

/// Writes items separated by commas inside `[` … `]`.
fn array<T>(out: &mut BytesMut, items: &[T], mut each: impl FnMut(&mut BytesMut, &T)) {
    out.extend_from_slice(b"[");
    for (i, it) in items.iter().enumerate() {
        if i > 0 {
            out.extend_from_slice(b",");
        }
        each(out, it);
    }
    out.extend_from_slice(b"]");
}

/// `{"type":"text","text":…}`, a text part as both dialects write it.
fn text_part(out: &mut BytesMut, t: &Text) {
    out.extend_from_slice(b"{\"type\":\"text\",\"text\":");
    t.write(out);
    out.extend_from_slice(b"}");
}

/// `[{"type":"text","text":…},…]`, the content-part form both dialects accept.
fn text_parts(out: &mut BytesMut, texts: &[&Text]) {
    array(out, texts, |out, t| text_part(out, t));
}

/// A content value: one text as a plain string, several as text parts, none as "".
fn content(out: &mut BytesMut, texts: &[&Text]) {
    match texts {
        [] => out.extend_from_slice(b"\"\""),
        [one] => one.write(out),
        many => text_parts(out, many),
    }
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

/// An Anthropic `image` block.
fn anthropic_image_block(out: &mut BytesMut, img: &Image) {
    out.extend_from_slice(b"{\"type\":\"image\",\"source\":");
    match img {
        Image::Url(t) => {
            out.extend_from_slice(b"{\"type\":\"url\",\"url\":");
            t.write(out);
        }
        Image::Base64 { media_type, data } => {
            out.extend_from_slice(b"{\"type\":\"base64\",\"media_type\":");
            media_type.write(out);
            out.extend_from_slice(b",\"data\":");
            data.write(out);
        }
    }
    out.extend_from_slice(b"}}");
}

const EMPTY_SCHEMA: &[u8] = b"{\"type\":\"object\",\"properties\":{}}";

/// The arguments as the JSON *string* OpenAI expects.
fn args_as_string(out: &mut BytesMut, a: &Args) {
    match a {
        Args::Str(t) => t.write(out),
        Args::Obj(raw) => write_str(out, raw),
    }
}

/// The arguments as the JSON *object* Anthropic expects; anything that is not an object
/// (an empty or broken string from the client) becomes `{}`.
fn args_as_object(out: &mut BytesMut, a: &Args) {
    match a {
        Args::Obj(raw) => out.extend_from_slice(raw.as_bytes()),
        Args::Str(t) => {
            let s = t.decode();
            let ok =
                s.trim_start().starts_with('{') && serde_json::from_str::<&RawValue>(&s).is_ok();
            if ok {
                out.extend_from_slice(s.as_bytes());
            } else {
                out.extend_from_slice(b"{}");
            }
        }
    }
}

pub fn encode_chat(r: &Request, model_json: &[u8]) -> Bytes {
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
        o.u64("max_tokens", n);
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

pub fn encode_messages(r: &Request, model_json: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(1024);
    let mut o = Obj::new(&mut out);
    o.raw("model", model_json);
    o.u64("max_tokens", r.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS));
    match r.system.as_slice() {
        [] => {}
        [one] => o.text("system", one),
        many => text_parts(o.key("system"), &many.iter().collect::<Vec<_>>()),
    }
    // Anthropic wants alternating turns: consecutive turns of one role become one, and turns
    // left without content are dropped.
    let mut turns: Vec<(Role, Vec<&Part>)> = Vec::new();
    for m in &r.messages {
        let parts = m
            .parts
            .iter()
            .filter(|p| !matches!(p, Part::Text(t) if t.is_empty()));
        match turns.last_mut() {
            Some((role, ps)) if *role == m.role => ps.extend(parts),
            _ => {
                let ps: Vec<&Part> = parts.collect();
                if !ps.is_empty() {
                    turns.push((m.role, ps));
                }
            }
        }
    }
    array(o.key("messages"), &turns, |out, (role, parts)| {
        out.extend_from_slice(match role {
            Role::User => b"{\"role\":\"user\",\"content\":",
            Role::Assistant => b"{\"role\":\"assistant\",\"content\":",
        });
        array(out, parts, |out, p| match p {
            Part::Text(t) => text_part(out, t),
            Part::Image(img) => anthropic_image_block(out, img),
            Part::ToolCall { id, name, args } => {
                out.extend_from_slice(b"{\"type\":\"tool_use\",\"id\":");
                id.write(out);
                out.extend_from_slice(b",\"name\":");
                name.write(out);
                out.extend_from_slice(b",\"input\":");
                args_as_object(out, args);
                out.extend_from_slice(b"}");
            }
            Part::ToolResult {
                id,
                content: c,
                is_error,
            } => {
                out.extend_from_slice(b"{\"type\":\"tool_result\",\"tool_use_id\":");
                id.write(out);
                out.extend_from_slice(b",\"content\":");
                content(out, &c.iter().collect::<Vec<_>>());
                if *is_error {
                    out.extend_from_slice(b",\"is_error\":true");
                }
                out.extend_from_slice(b"}");
            }
        });
        out.extend_from_slice(b"}");
    });
    if !r.tools.is_empty() {
        array(o.key("tools"), &r.tools, |out, t| {
            out.extend_from_slice(b"{\"name\":");
            t.name.write(out);
            if let Some(d) = &t.description {
                out.extend_from_slice(b",\"description\":");
                d.write(out);
            }
            out.extend_from_slice(b",\"input_schema\":");
            out.extend_from_slice(t.parameters.map_or(EMPTY_SCHEMA, str::as_bytes));
            out.extend_from_slice(b"}");
        });
    }
    if let Some(c) = &r.tool_choice {
        let out = o.key("tool_choice");
        match c {
            ToolChoice::Auto => out.extend_from_slice(b"{\"type\":\"auto\"}"),
            ToolChoice::None => out.extend_from_slice(b"{\"type\":\"none\"}"),
            ToolChoice::Required => out.extend_from_slice(b"{\"type\":\"any\"}"),
            ToolChoice::Named(n) => {
                out.extend_from_slice(b"{\"type\":\"tool\",\"name\":");
                n.write(out);
                out.extend_from_slice(b"}");
            }
        }
    }
    if let Some(t) = r.temperature {
        o.f64("temperature", t);
    }
    if let Some(t) = r.top_p {
        o.f64("top_p", t);
    }
    if !r.stop.is_empty() {
        array(o.key("stop_sequences"), &r.stop, |out, s| s.write(out));
    }
    if r.stream {
        o.raw("stream", b"true");
    }
    o.end();
    out.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn v(b: &Bytes) -> Value {
        serde_json::from_slice(b).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(b)))
    }

    #[test]
    fn chat_to_messages_keeps_literals_and_shapes_tools() {
        let body = br#"{"model":"x","messages":[
            {"role":"system","content":"s\u00e9 \"q\""},
            {"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo="}},{"type":"text","text":"b"}]},
            {"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"k\":[1,2]}"}},
                                                             {"id":"c2","type":"function","function":{"name":"g","arguments":"not json"}}]},
            {"role":"tool","tool_call_id":"c1","content":"r1"},
            {"role":"tool","tool_call_id":"c2","content":[{"type":"text","text":"r2"}]}],
            "tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],
            "stop":"END","temperature":0.25}"#;
        let r = decode_chat(body).unwrap();
        let m = v(&encode_messages(&r, br#""up""#));
        assert_eq!(m["model"], "up");
        assert_eq!(m["system"], "sé \"q\"");
        assert_eq!(m["max_tokens"], 4096);
        assert_eq!(m["temperature"], 0.25);
        assert_eq!(m["stop_sequences"], json!(["END"]));
        let msgs = m["messages"].as_array().unwrap();
        assert_eq!(msgs.len(), 3);
        assert_eq!(
            msgs[0]["content"],
            json!([{"type":"text","text":"a"},
                   {"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}},
                   {"type":"text","text":"b"}])
        );
        assert_eq!(msgs[1]["content"][0]["input"], json!({"k": [1, 2]}));
        assert_eq!(
            msgs[1]["content"][1]["input"],
            json!({}),
            "broken arguments become {{}}"
        );
        assert_eq!(msgs[2]["content"][0]["tool_use_id"], "c1");
        assert_eq!(msgs[2]["content"][1]["content"], "r2");
        assert_eq!(m["tools"][0]["input_schema"], json!({"type": "object"}));
    }

    #[test]
    fn messages_to_chat_escapes_input_objects_into_argument_strings() {
        let body = br#"{"model":"x","max_tokens":9,"system":[{"type":"text","text":"s1"},{"type":"text","text":"s2"}],
            "messages":[{"role":"user","content":"hi"},
              {"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{"a":"\"x\""}}]},
              {"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"ok","is_error":true}]}],
            "tool_choice":{"type":"any"},"stream":true}"#;
        let r = decode_messages(body).unwrap();
        let c = v(&encode_chat(&r, br#""up""#));
        let msgs = c["messages"].as_array().unwrap();
        let roles: Vec<&str> = msgs.iter().map(|m| m["role"].as_str().unwrap()).collect();
        assert_eq!(roles, ["system", "system", "user", "assistant", "tool"]);
        let args = msgs[3]["tool_calls"][0]["function"]["arguments"]
            .as_str()
            .unwrap();
        assert_eq!(
            serde_json::from_str::<Value>(args).unwrap(),
            json!({"a": "\"x\""})
        );
        assert_eq!(c["tool_choice"], "required");
        assert_eq!(c["stream_options"], json!({"include_usage": true}));
        assert_eq!(c["max_tokens"], 9);
    }

    #[test]
    fn images_cross_in_both_directions() {
        // Anthropic → chat: a base64 source becomes a data URL, a url source stays a URL; the
        // client's order of text and images is kept, and a thinking block is left out.
        let body = br#"{"model":"x","max_tokens":9,"messages":[
            {"role":"user","content":[
                {"type":"image","source":{"type":"base64","media_type":"image/jpeg","data":"/9j/4AAQ"}},
                {"type":"text","text":"what is this?"},
                {"type":"image","source":{"type":"url","url":"https://example.com/cat.png"}}]},
            {"role":"assistant","content":[{"type":"thinking","thinking":"hm","signature":"s"},{"type":"text","text":"a cat"}]}]}"#;
        let c = v(&encode_chat(&decode_messages(body).unwrap(), br#""up""#));
        assert_eq!(
            c["messages"][0]["content"],
            json!([{"type":"image_url","image_url":{"url":"data:image/jpeg;base64,/9j/4AAQ"}},
                   {"type":"text","text":"what is this?"},
                   {"type":"image_url","image_url":{"url":"https://example.com/cat.png"}}])
        );
        assert_eq!(c["messages"][1]["content"], "a cat");

        // Responses → Anthropic: input_image by URL (a string there, not an object).
        let body = br#"{"model":"x","input":[{"role":"user","content":[
            {"type":"input_text","text":"describe"},
            {"type":"input_image","image_url":"https://example.com/a.webp","detail":"low"}]}]}"#;
        let m = v(&encode_messages(
            &decode_responses(body).unwrap(),
            br#""up""#,
        ));
        assert_eq!(
            m["messages"][0]["content"][1],
            json!({"type":"image","source":{"type":"url","url":"https://example.com/a.webp"}})
        );

        // Responses → chat: an inline image stays a data URL.
        let body = br#"{"model":"x","input":[{"role":"user","content":[
            {"type":"input_image","image_url":"data:image/gif;base64,R0lGOD"}]}]}"#;
        let c = v(&encode_chat(&decode_responses(body).unwrap(), br#""up""#));
        assert_eq!(
            c["messages"][0]["content"],
            json!([{"type":"image_url","image_url":{"url":"data:image/gif;base64,R0lGOD"}}])
        );
    }

    #[test]
    fn parts_without_a_translation_are_refused_not_dropped() {
        let chat = |content: &str| {
            let body =
                format!(r#"{{"model":"x","messages":[{{"role":"user","content":{content}}}]}}"#);
            decode_chat(body.as_bytes())
                .map(|_| ())
                .unwrap_err()
                .message
        };
        assert!(
            chat(r#"[{"type":"input_audio","input_audio":{"data":"AA==","format":"wav"}}]"#)
                .contains("\"input_audio\"")
        );
        assert!(chat(r#"[{"type":"file","file":{"file_id":"f1"}}]"#).contains("\"file\""));
        assert!(
            chat(r#"[{"type":"image_url","image_url":{"url":"ftp://x/y.png"}}]"#)
                .contains("http(s) URL")
        );
        assert!(
            chat(r#"[{"type":"image_url","image_url":{"url":"data:image/png,abc"}}]"#)
                .contains("base64")
        );
        let assistant_image = br#"{"model":"x","messages":[{"role":"assistant","content":[
            {"type":"image_url","image_url":{"url":"https://e.com/i.png"}}]}]}"#;
        assert!(decode_chat(assistant_image).is_err());
        let by_file_id = br#"{"model":"x","input":[{"role":"user","content":[
            {"type":"input_image","file_id":"file-1"}]}]}"#;
        let stored = br#"{"model":"x","input":[{"type":"item_reference","id":"msg_1"}]}"#;
        assert!(decode_responses(stored)
            .unwrap_err()
            .message
            .contains("\"item_reference\""));
        let reasoning = br#"{"model":"x","input":[{"type":"reasoning","id":"rs_1","summary":[]},
            {"role":"user","content":"hi"}]}"#;
        assert_eq!(decode_responses(reasoning).unwrap().messages.len(), 1);
        assert!(decode_responses(by_file_id)
            .unwrap_err()
            .message
            .contains("file id"));
        let msgs = |content: &str| {
            let body = format!(
                r#"{{"model":"x","max_tokens":1,"messages":[{{"role":"user","content":{content}}}]}}"#
            );
            decode_messages(body.as_bytes())
                .map(|_| ())
                .unwrap_err()
                .message
        };
        assert!(msgs(
            r#"[{"type":"document","source":{"type":"text","media_type":"text/plain","data":"x"}}]"#
        )
        .contains("\"document\""));
        assert!(
            msgs(r#"[{"type":"image","source":{"type":"file","file_id":"f"}}]"#)
                .contains("\"file\"")
        );
        assert!(
            msgs(r#"[{"type":"image","source":{"type":"base64","data":"AA=="}}]"#)
                .contains("media_type")
        );
        // Tool results carry text only across dialects.
        assert!(msgs(
            r#"[{"type":"tool_result","tool_use_id":"t","content":[{"type":"image","source":{"type":"url","url":"https://e.com/i.png"}}]}]"#
        )
        .contains("tool_result content"));
    }

    #[test]
    fn rejects_wrong_types_with_400() {
        for body in [
            &br#"{"messages":"x"}"#[..],
            br#"{"messages":[{"role":"user","content":5}]}"#,
            br#"{"messages":[{"role":"wizard","content":"x"}]}"#,
            br#"{"messages":[],"tools":[{"function":{"name":7}}]}"#,
        ] {
            assert_eq!(
                decode_chat(body).err().unwrap().status,
                400,
                "{}",
                String::from_utf8_lossy(body)
            );
        }
        assert_eq!(
            decode_messages(br#"{"messages":[{"role":"user","content":{}}]}"#)
                .err()
                .unwrap()
                .status,
            400
        );
        assert_eq!(
            decode_responses(br#"{"input":3}"#).err().unwrap().status,
            400
        );
    }
}
