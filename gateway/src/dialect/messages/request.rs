//! Messages requests: a client's Messages request into the neutral [`Request`] ([`decode`]), and a
//! neutral request out as the body for an anthropic upstream ([`encode`]).

use std::borrow::Cow;

use bytes::{Bytes, BytesMut};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::dialect::decode::{
    bad, from_json, image_url, lit, object, opt_lit, parse, untranslatable, NamedChoice,
};
use crate::dialect::encode::{array, content, text_part, text_parts, Obj, EMPTY_SCHEMA};
use crate::dialect::error::GwError;
use crate::dialect::members::{path_of, Rest};
use crate::dialect::neutral::{
    Args, Effort, Image, Message, Part, Request, Role, Text, Tool, ToolChoice, WebSearch,
};

/// Anthropic requires `max_tokens`; OpenAI clients usually leave it out.
const DEFAULT_MAX_TOKENS: u64 = 4096;

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
    #[serde(default, borrow)]
    metadata: Option<Metadata<'a>>,
    #[serde(default, borrow)]
    thinking: Option<Thinking<'a>>,
    #[serde(default, borrow)]
    output_config: Option<OutputConfig<'a>>,
    // Parts with no counterpart in a chat upstream (docs/translation-policy.md).
    #[serde(default, borrow)]
    context_management: Option<&'a RawValue>,
    #[serde(default, borrow)]
    top_k: Option<&'a RawValue>,
    #[serde(default, borrow)]
    container: Option<&'a RawValue>,
    #[serde(default, borrow)]
    mcp_servers: Option<&'a RawValue>,
    #[serde(default, borrow)]
    service_tier: Option<&'a RawValue>,
    /// Members of no field above (`model` among them): refused unless dropped.
    #[serde(flatten)]
    rest: Rest,
}

#[derive(Deserialize)]
struct Metadata<'a> {
    #[serde(default, borrow)]
    user_id: Option<&'a RawValue>,
    #[serde(flatten)]
    rest: Rest,
}

#[derive(Deserialize)]
struct Thinking<'a> {
    #[serde(rename = "type", default, borrow)]
    kind: Option<Cow<'a, str>>,
    #[serde(default)]
    budget_tokens: Option<u64>,
    /// Whether thinking text comes back (`summarized`) or not (`omitted`): a translated answer
    /// carries no thinking blocks either way, so it asks nothing of a chat upstream.
    #[serde(default, borrow)]
    #[allow(dead_code)]
    display: Option<&'a RawValue>,
    #[serde(flatten)]
    rest: Rest,
}

#[derive(Deserialize)]
struct OutputConfig<'a> {
    #[serde(default, borrow)]
    effort: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    format: Option<&'a RawValue>,
    #[serde(flatten)]
    rest: Rest,
}

#[derive(Deserialize)]
struct MsgMsg<'a> {
    #[serde(borrow)]
    role: Cow<'a, str>,
    #[serde(borrow)]
    content: &'a RawValue,
    #[serde(flatten)]
    rest: Rest,
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
    #[serde(default, borrow)]
    cache_control: Option<&'a RawValue>,
    #[serde(flatten)]
    rest: Rest,
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
    /// Absent (or `custom`) for a client tool; a server tool's versioned type otherwise.
    #[serde(rename = "type", default, borrow)]
    kind: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    name: Option<&'a RawValue>,
    #[serde(default, borrow)]
    cache_control: Option<&'a RawValue>,
    #[serde(default, borrow)]
    description: Option<&'a RawValue>,
    #[serde(default, borrow)]
    input_schema: Option<&'a RawValue>,
    /// The tool is loaded only when a tool search finds it.
    #[serde(default)]
    defer_loading: Option<bool>,
    /// The call's input is guaranteed to match the schema.
    #[serde(default)]
    strict: Option<bool>,
    #[serde(flatten)]
    rest: Rest,
}

pub fn decode(body: &[u8]) -> Result<Request<'_>, GwError> {
    let c: MsgReq = parse(body)?;
    let mut r = Request {
        max_tokens: c.max_tokens,
        temperature: c.temperature,
        top_p: c.top_p,
        stream: c.stream.unwrap_or(false),
        ..Request::default()
    };
    if let Some(sys) = c.system {
        r.system = text_blocks(&mut r, sys, || "system".to_owned())?;
    }
    for (i, m) in c.messages.into_iter().enumerate() {
        let role = match &*m.role {
            "user" => Role::User,
            "assistant" => Role::Assistant,
            "system" => Role::System,
            other => {
                return Err(bad(format!(
                    "messages[{i}].role: unknown role {other:?} (user, assistant or system)"
                )))
            }
        };
        m.rest
            .note(&mut r, "messages[]", &|| format!("messages[{i}]"), &[]);
        let raw = m.content.get();
        let mut parts = Vec::new();
        if role == Role::System {
            let texts = text_blocks(&mut r, m.content, || format!("messages[{i}].content"))?;
            parts.extend(texts.into_iter().map(Part::Text));
        } else if raw.starts_with('"') {
            parts.push(Part::Text(Text::Lit(raw)));
        } else if raw.starts_with('[') {
            let blocks: Vec<MsgBlock> = from_json(raw, || format!("messages[{i}].content"))?;
            for (j, b) in blocks.into_iter().enumerate() {
                if b.cache_control.is_some() {
                    r.unmapped("cache_control", || {
                        format!("messages[{i}].content[{j}].cache_control")
                    });
                }
                if !matches!(&*b.kind, "thinking" | "redacted_thinking") {
                    let at = || format!("messages[{i}].content[{j}]");
                    b.rest.note(&mut r, "messages[].content[]", &at, &[]);
                }
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
                    "tool_result" => {
                        if b.is_error == Some(true) {
                            // A chat `tool` message has no error flag: the result's text
                            // crosses, that it is an error does not.
                            r.unmapped("messages[].content[].is_error", || {
                                format!("messages[{i}].content[{j}].is_error")
                            });
                        }
                        let content = match b.content {
                            Some(c) if c.get().starts_with('[') => text_blocks(&mut r, c, || {
                                format!("messages[{i}].content[{j}].content")
                            })?,
                            Some(c) if c.get().starts_with('"') => vec![Text::Lit(c.get())],
                            _ => Vec::new(),
                        };
                        parts.push(Part::ToolResult {
                            id: opt_lit(b.tool_use_id, "tool_use_id")?
                                .unwrap_or(Text::Own(String::new())),
                            content,
                            is_error: b.is_error.unwrap_or(false),
                        })
                    }
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
                    other => {
                        return Err(untranslatable(
                            &format!("messages[{i}].content[{j}]"),
                            other,
                        ))
                    }
                }
            }
        } else {
            return Err(bad(format!(
                "messages[{i}].content must be a string or an array"
            )));
        }
        r.messages.push(Message { role, parts });
    }
    for (i, t) in c.tools.unwrap_or_default().into_iter().enumerate() {
        match t.kind.as_deref() {
            None | Some("custom") => {}
            Some(server) => {
                let part = format!("tools.{server}");
                r.unmapped(part, || format!("tools[{i}]"));
                continue;
            }
        }
        if t.cache_control.is_some() {
            r.unmapped("cache_control", || format!("tools[{i}].cache_control"));
        }
        let name = t
            .name
            .ok_or_else(|| bad(format!("tools[{i}].name is required")))?;
        // A member with no counterpart takes its tool with it: it may narrow what the tool
        // does, and a tool without it would do more than the client allowed.
        let unmapped = r.unmapped.len();
        t.rest
            .note(&mut r, "tools[]", &|| format!("tools[{i}]"), &[]);
        if t.defer_loading == Some(true) {
            // A deferred tool is one the model sees only once a tool search loads it, which a
            // chat upstream cannot do: it is left out whole.
            r.unmapped("tools[].defer_loading", || {
                format!("tools[{i}].defer_loading")
            });
        }
        if r.unmapped.len() > unmapped {
            continue;
        }
        r.tools.push(Tool {
            name: lit(name, "tool name")?,
            description: opt_lit(t.description, "tool description")?,
            parameters: object(t.input_schema, "input_schema")?,
            strict: t.strict == Some(true),
        });
    }
    if let Some(tc) = c.tool_choice {
        tc.rest
            .note(&mut r, "tool_choice", &|| "tool_choice".to_owned(), &[]);
        if tc.disable_parallel_tool_use == Some(true) {
            r.parallel_tool_calls = Some(false);
        }
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
    if let Some(m) = c.metadata {
        m.rest
            .note(&mut r, "metadata", &|| "metadata".to_owned(), &[]);
        r.user = opt_lit(m.user_id, "metadata.user_id")?;
    }
    // Effort: `output_config.effort` says it; a thinking budget implies one; adaptive thinking
    // leaves it to the model, as does an upstream without an effort.
    if let Some(t) = &c.thinking {
        t.rest
            .note(&mut r, "thinking", &|| "thinking".to_owned(), &[]);
        if t.kind.as_deref() == Some("enabled") {
            r.effort = t.budget_tokens.map(Effort::from_budget);
        }
    }
    if let Some(o) = c.output_config {
        o.rest
            .note(&mut r, "output_config", &|| "output_config".to_owned(), &[]);
        if let Some(e) = o.effort {
            r.effort = Some(
                Effort::from_name(&e)
                    .ok_or_else(|| bad(format!("output_config.effort: unknown effort {e:?}")))?,
            );
        }
        if o.format.is_some() {
            r.unmapped("output_config.format", || "output_config.format".to_owned());
        }
    }
    r.unmapped_fields(&[
        ("context_management", c.context_management.is_some()),
        ("top_k", c.top_k.is_some()),
        ("container", c.container.is_some()),
        ("mcp_servers", c.mcp_servers.is_some()),
        ("service_tier", c.service_tier.is_some()),
    ]);
    c.rest.note(&mut r, "", &String::new, &["model"]);
    Ok(r)
}

/// The texts of a content value where only text blocks may stand (system prompts, system
/// messages, tool results): a string or an array of `text` blocks, whose `cache_control` marks
/// are noted as unmapped.
fn text_blocks<'a>(
    r: &mut Request<'a>,
    raw: &'a RawValue,
    at: impl Fn() -> String,
) -> Result<Vec<Text<'a>>, GwError> {
    let s = raw.get();
    if s.starts_with('"') {
        return Ok(vec![Text::Lit(s)]);
    }
    if !s.starts_with('[') {
        return Err(bad(format!("{} must be a string or an array", at())));
    }
    let blocks: Vec<MsgBlock> = from_json(s, &at)?;
    let mut out = Vec::with_capacity(blocks.len());
    for (j, b) in blocks.into_iter().enumerate() {
        if b.cache_control.is_some() {
            r.unmapped("cache_control", || format!("{}[{j}].cache_control", at()));
        }
        if !b.rest.is_empty() {
            let place = || format!("{}[{j}]", at());
            b.rest.note(r, &path_of(&place()), &place, &[]);
        }
        match (&*b.kind, b.text) {
            ("text", Some(t)) => out.push(lit(t, "text")?),
            ("text", None) => {}
            (other, _) => return Err(untranslatable(&format!("{}[{j}]", at()), other)),
        }
    }
    Ok(out)
}

/// Anthropic's web search server tool, closing the `tools` array that `more` says has items
/// before it.
fn web_search_tool(out: &mut BytesMut, ws: &WebSearch, more: bool) {
    out.truncate(out.len() - 1);
    if more {
        out.extend_from_slice(b",");
    }
    out.extend_from_slice(b"{\"type\":\"web_search_20250305\",\"name\":\"web_search\"");
    if let Some(d) = ws.allowed_domains {
        out.extend_from_slice(b",\"allowed_domains\":");
        out.extend_from_slice(d.as_bytes());
    }
    if let Some(l) = ws.user_location {
        out.extend_from_slice(b",\"user_location\":");
        out.extend_from_slice(l.as_bytes());
    }
    out.extend_from_slice(b"}]");
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

pub fn encode(r: &Request, model_json: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(1024);
    let mut o = Obj::new(&mut out);
    o.raw("model", model_json);
    o.u64("max_tokens", r.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS));
    // System messages inside the conversation join the system prompt, in order: Anthropic
    // takes system text only there.
    let system: Vec<&Text> = r
        .system
        .iter()
        .chain(
            r.messages
                .iter()
                .filter(|m| m.role == Role::System)
                .flat_map(|m| m.parts.iter())
                .filter_map(|p| match p {
                    Part::Text(t) => Some(t),
                    _ => None,
                }),
        )
        .collect();
    match system.as_slice() {
        [] => {}
        [one] => o.text("system", one),
        many => text_parts(o.key("system"), many),
    }
    // Anthropic wants alternating turns: consecutive turns of one role become one, and turns
    // left without content are dropped.
    let mut turns: Vec<(Role, Vec<&Part>)> = Vec::new();
    for m in r.messages.iter().filter(|m| m.role != Role::System) {
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
            Role::Assistant | Role::System => b"{\"role\":\"assistant\",\"content\":",
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
    if !r.tools.is_empty() || r.web_search.is_some() {
        let out = o.key("tools");
        array(out, &r.tools, |out, t| {
            out.extend_from_slice(b"{\"name\":");
            t.name.write(out);
            if let Some(d) = &t.description {
                out.extend_from_slice(b",\"description\":");
                d.write(out);
            }
            out.extend_from_slice(b",\"input_schema\":");
            out.extend_from_slice(t.parameters.map_or(EMPTY_SCHEMA, str::as_bytes));
            if t.strict {
                out.extend_from_slice(b",\"strict\":true");
            }
            out.extend_from_slice(b"}");
        });
        if let Some(ws) = &r.web_search {
            web_search_tool(out, ws, !r.tools.is_empty());
        }
    }
    // Anthropic says "one tool call at most" inside the tool choice.
    let serial =
        r.parallel_tool_calls == Some(false) && !matches!(r.tool_choice, Some(ToolChoice::None));
    if r.tool_choice.is_some() || serial {
        let out = o.key("tool_choice");
        match r.tool_choice.as_ref().unwrap_or(&ToolChoice::Auto) {
            ToolChoice::Auto => out.extend_from_slice(b"{\"type\":\"auto\""),
            ToolChoice::None => out.extend_from_slice(b"{\"type\":\"none\""),
            ToolChoice::Required => out.extend_from_slice(b"{\"type\":\"any\""),
            ToolChoice::Named(n) => {
                out.extend_from_slice(b"{\"type\":\"tool\",\"name\":");
                n.write(out);
            }
        }
        if serial {
            out.extend_from_slice(b",\"disable_parallel_tool_use\":true");
        }
        out.extend_from_slice(b"}");
    }
    if let Some(e) = r.effort {
        let out = o.key("output_config");
        out.extend_from_slice(b"{\"effort\":\"");
        out.extend_from_slice(e.anthropic().as_bytes());
        out.extend_from_slice(b"\"}");
    }
    if let Some(u) = &r.user {
        let out = o.key("metadata");
        out.extend_from_slice(b"{\"user_id\":");
        u.write(out);
        out.extend_from_slice(b"}");
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
