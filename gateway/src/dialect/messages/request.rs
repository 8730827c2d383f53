//! Messages requests: a client's Messages request into the neutral [`Request`] ([`decode`]), and a
//! neutral request out as the body for an anthropic upstream ([`encode`]).

use std::borrow::Cow;

use bytes::{Bytes, BytesMut};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::dialect::decode::{
    bad, image_url, lit, object, opt_lit, parse, role_of, texts, untranslatable, NamedChoice,
};
use crate::dialect::encode::{array, content, text_part, text_parts, Obj, EMPTY_SCHEMA};
use crate::dialect::error::GwError;
use crate::dialect::neutral::{Args, Image, Message, Part, Request, Role, Text, Tool, ToolChoice};

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

pub fn decode(body: &[u8]) -> Result<Request<'_>, GwError> {
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
