//! Responses requests: a client's Responses request into the neutral [`Request`] ([`decode`]).

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::dialect::decode::{
    bad, openai_choice, opt_cow, opt_lit, parse, parts, role_of, texts, ToolDef,
};
use crate::dialect::error::GwError;
use crate::dialect::neutral::{Args, Part, Request, Role, Text};

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

pub fn decode(body: &[u8]) -> Result<Request<'_>, GwError> {
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
