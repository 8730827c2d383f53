//! Responses requests: a client's Responses request into the neutral [`Request`] ([`decode`]).

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::dialect::decode::{
    asks, bad, from_json, lit, openai_choice, opt_cow, opt_lit, parse, parts, role_of, texts,
    ToolDef,
};
use crate::dialect::error::GwError;
use crate::dialect::members::Rest;
use crate::dialect::neutral::{Args, Effort, Part, Request, Role, Text, WebSearch};

#[derive(Deserialize)]
struct RespReq<'a> {
    #[serde(default, borrow)]
    instructions: Option<&'a RawValue>,
    #[serde(borrow)]
    input: &'a RawValue,
    #[serde(default, borrow)]
    tools: Option<Vec<RespTool<'a>>>,
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
    #[serde(default, borrow)]
    reasoning: Option<Reasoning<'a>>,
    #[serde(default)]
    parallel_tool_calls: Option<bool>,
    #[serde(default)]
    store: Option<bool>,
    #[serde(default, borrow)]
    user: Option<&'a RawValue>,
    #[serde(default, borrow)]
    safety_identifier: Option<&'a RawValue>,
    // Parts with no counterpart in an Anthropic upstream (docs/translation-policy.md), noted
    // when they ask for anything.
    #[serde(default, borrow)]
    include: Option<Vec<&'a RawValue>>,
    #[serde(default, borrow)]
    prompt_cache_key: Option<&'a RawValue>,
    #[serde(default, borrow)]
    client_metadata: Option<&'a RawValue>,
    #[serde(default, borrow)]
    metadata: Option<&'a RawValue>,
    #[serde(default, borrow)]
    previous_response_id: Option<&'a RawValue>,
    #[serde(default, borrow)]
    service_tier: Option<&'a RawValue>,
    #[serde(default, borrow)]
    text: Option<TextConfig<'a>>,
    /// Members of no field above (`model` among them): refused unless dropped.
    #[serde(flatten)]
    rest: Rest,
}

#[derive(Deserialize)]
struct Reasoning<'a> {
    #[serde(default, borrow, deserialize_with = "opt_cow")]
    effort: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "opt_cow")]
    summary: Option<Cow<'a, str>>,
    #[serde(flatten)]
    rest: Rest,
}

#[derive(Deserialize)]
struct TextConfig<'a> {
    #[serde(default, borrow)]
    format: Option<Kind<'a>>,
    #[serde(flatten)]
    rest: Rest,
}

/// Just the `type` of an object.
#[derive(Deserialize)]
struct Kind<'a> {
    #[serde(rename = "type", default, borrow, deserialize_with = "opt_cow")]
    kind: Option<Cow<'a, str>>,
}

/// One entry of `tools`, read in one pass whatever its type: a function tool (`name`,
/// `description`, `parameters`), a `namespace` of them (`name`, `tools`), the hosted
/// `web_search` (`filters`, `user_location`, `search_context_size`, `external_web_access`), or
/// another hosted tool (its `type`).
#[derive(Deserialize)]
struct RespTool<'a> {
    #[serde(rename = "type", default, borrow, deserialize_with = "opt_cow")]
    kind: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    name: Option<&'a RawValue>,
    #[serde(default, borrow)]
    description: Option<&'a RawValue>,
    #[serde(default, borrow)]
    parameters: Option<&'a RawValue>,
    #[serde(default, borrow)]
    tools: Option<Vec<ToolDef<'a>>>,
    #[serde(default, borrow)]
    filters: Option<Filters<'a>>,
    #[serde(default, borrow)]
    user_location: Option<&'a RawValue>,
    #[serde(default, borrow)]
    search_context_size: Option<&'a RawValue>,
    #[serde(default)]
    external_web_access: Option<bool>,
    #[serde(default)]
    strict: Option<bool>,
    #[serde(flatten)]
    rest: Rest,
}

#[derive(Deserialize)]
struct Filters<'a> {
    #[serde(default, borrow)]
    allowed_domains: Option<&'a RawValue>,
    #[serde(flatten)]
    rest: Rest,
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
    /// A call of a tool inside a `namespace` tool.
    #[serde(default, borrow, deserialize_with = "opt_cow")]
    namespace: Option<Cow<'a, str>>,
    #[serde(flatten)]
    rest: Rest,
}

/// An input item's members that are OpenAI's bookkeeping (the item's id and status): Anthropic
/// keeps none, and they ask nothing of the model.
const ITEM_BOOKKEEPING: &[&str] = &["id", "status"];

pub fn decode(body: &[u8]) -> Result<Request<'_>, GwError> {
    let c: RespReq = parse(body)?;
    let mut r = Request {
        max_tokens: c.max_output_tokens,
        temperature: c.temperature,
        top_p: c.top_p,
        stream: c.stream.unwrap_or(false),
        tool_choice: openai_choice(c.tool_choice)?,
        ..Request::default()
    };
    r.system = texts(&mut r, c.instructions, "instructions")?;
    let input = c.input.get();
    if input.starts_with('"') {
        r.push(Role::User, Part::Text(Text::Lit(input)));
    } else if input.starts_with('[') {
        let items: Vec<RespItem> = from_json(input, || "input".to_owned())?;
        for (i, it) in items.into_iter().enumerate() {
            let kind = it.kind.as_deref().unwrap_or("message");
            if kind != "reasoning" {
                let at = || format!("input[{i}]");
                it.rest.note(&mut r, "input[]", &at, ITEM_BOOKKEEPING);
            }
            match kind {
                "message" => match it.role.as_deref() {
                    Some("system" | "developer") => {
                        let t = texts(&mut r, it.content, &format!("input[{i}].content"))?;
                        r.system.extend(t)
                    }
                    Some(role) => {
                        let role = role_of(role, "input")?;
                        let at = format!("input[{i}].content");
                        for p in parts(&mut r, it.content, &at, role == Role::User)? {
                            r.push(role, p);
                        }
                    }
                    None => return Err(bad("input: every message needs a role")),
                },
                "function_call" => r.push(
                    Role::Assistant,
                    Part::ToolCall {
                        id: opt_lit(it.call_id, "call_id")?.unwrap_or(Text::Own(String::new())),
                        name: match it.namespace {
                            Some(ns) => {
                                let name =
                                    opt_lit(it.name, "name")?.unwrap_or(Text::Own(String::new()));
                                Text::Own(flat_name(&ns, &name.decode()))
                            }
                            None => opt_lit(it.name, "name")?.unwrap_or(Text::Own(String::new())),
                        },
                        args: Args::Str(
                            opt_lit(it.arguments, "arguments")?.unwrap_or(Text::Own(String::new())),
                        ),
                    },
                ),
                "function_call_output" => {
                    let content = texts(&mut r, it.output, &format!("input[{i}].output"))?;
                    r.push(
                        Role::User,
                        Part::ToolResult {
                            id: opt_lit(it.call_id, "call_id")?.unwrap_or(Text::Own(String::new())),
                            content,
                            is_error: false,
                        },
                    )
                }
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
    for (i, t) in c.tools.unwrap_or_default().into_iter().enumerate() {
        tool(&mut r, t, i)?;
    }
    if let Some(e) = c.reasoning {
        e.rest
            .note(&mut r, "reasoning", &|| "reasoning".to_owned(), &[]);
        if let Some(e) = e.effort {
            r.effort = Some(
                Effort::from_name(&e)
                    .ok_or_else(|| bad(format!("reasoning.effort: unknown effort {e:?}")))?,
            );
        }
        if e.summary.as_deref().is_some_and(|s| s != "none") {
            r.unmapped("reasoning.summary", || "reasoning.summary".to_owned());
        }
    }
    r.parallel_tool_calls = c.parallel_tool_calls;
    r.user = match c.safety_identifier {
        Some(id) => Some(lit(id, "safety_identifier")?),
        None => opt_lit(c.user, "user")?,
    };
    // Anthropic stores nothing: `store: false` is what it does anyway.
    r.unmapped_fields(&[
        ("store", c.store == Some(true)),
        ("include", c.include.as_ref().is_some_and(|l| !l.is_empty())),
        ("prompt_cache_key", asks(c.prompt_cache_key, &[])),
        ("client_metadata", asks(c.client_metadata, &[])),
        ("metadata", asks(c.metadata, &[])),
        ("previous_response_id", asks(c.previous_response_id, &[])),
        (
            "service_tier",
            asks(c.service_tier, &["\"auto\"", "\"default\""]),
        ),
        (
            "text.format",
            c.text
                .as_ref()
                .and_then(|t| t.format.as_ref())
                .is_some_and(|f| f.kind.as_deref().is_some_and(|k| k != "text")),
        ),
    ]);
    if let Some(t) = &c.text {
        t.rest.note(&mut r, "text", &|| "text".to_owned(), &[]);
    }
    c.rest.note(&mut r, "", &String::new, &["model"]);
    Ok(r)
}

/// A namespace's tool as one flat name, `{namespace}__{name}`, the form Anthropic's tool names
/// allow; [`super::split_name`] reverses it for the answer.
pub fn flat_name(namespace: &str, name: &str) -> String {
    let mut s = String::with_capacity(namespace.len() + 2 + name.len());
    s.push_str(namespace);
    s.push_str("__");
    s.push_str(name);
    s
}

/// One entry of `tools`: a function tool, a namespace of them (flattened), the hosted web
/// search (Anthropic's server tool), or a hosted tool with no counterpart (noted). A tool with a
/// member that cannot cross is left out whole, so that no restriction is ever lost alone.
fn tool<'a>(r: &mut Request<'a>, t: RespTool<'a>, i: usize) -> Result<(), GwError> {
    let at = || format!("tools[{i}]");
    match t.kind.as_deref() {
        None | Some("function") => {
            let def = ToolDef {
                kind: None,
                name: t.name,
                description: t.description,
                parameters: t.parameters,
                strict: t.strict,
                rest: t.rest,
            };
            if let Some(tool) = def.tool(r, "tools[]", &at)? {
                r.tools.push(tool);
            }
        }
        Some("namespace") => {
            let name = t
                .name
                .ok_or_else(|| bad(format!("tools[{i}].name is required")))?;
            let name = lit(name, "namespace name")?.decode().into_owned();
            let unmapped = r.unmapped.len();
            t.rest.note(r, "tools[]", &at, &[]);
            if r.unmapped.len() > unmapped {
                return Ok(());
            }
            // The namespace's description says what its tools are for: each flattened tool
            // carries it ahead of its own.
            let about =
                opt_lit(t.description, "namespace description")?.map(|d| d.decode().into_owned());
            for (j, def) in t.tools.unwrap_or_default().into_iter().enumerate() {
                let at = || format!("tools[{i}].tools[{j}]");
                if def.kind.as_deref().is_some_and(|k| k != "function") {
                    return Err(bad(format!(
                        "{}: only function tools can stand in a namespace",
                        at()
                    )));
                }
                let Some(mut t) = def.tool(r, "tools[].tools[]", &at)? else {
                    continue;
                };
                t.name = Text::Own(flat_name(&name, &t.name.decode()));
                if let Some(about) = &about {
                    t.description = Some(Text::Own(match &t.description {
                        Some(d) => format!("{about}\n\n{}", d.decode()),
                        None => about.clone(),
                    }));
                }
                r.tools.push(t);
            }
            r.namespaces.push(name);
        }
        Some("web_search" | "web_search_preview") => web_search(r, t, i),
        Some(other) => {
            let part = format!("tools.{other}");
            r.unmapped(part, at);
        }
    }
    Ok(())
}

/// The hosted web search as Anthropic's `web_search_20250305`: its domain filter and location
/// kept. A member that narrows the search and has no counterpart there (`external_web_access:
/// false`, a filter other than `allowed_domains`, a member unknown here) takes the tool with it
/// (part `tools.web_search`), so the upstream never searches more widely than the client
/// allowed; `search_context_size`, which narrows nothing, is a part of its own.
fn web_search<'a>(r: &mut Request<'a>, t: RespTool<'a>, i: usize) {
    let filters_rest = t
        .filters
        .as_ref()
        .and_then(|f| f.rest.set(&[]).next().map(|m| format!("filters.{m}")));
    let narrowing = if t.external_web_access == Some(false) {
        Some("external_web_access".to_owned())
    } else {
        filters_rest.or_else(|| t.rest.set(&[]).next().map(str::to_owned))
    };
    if let Some(member) = narrowing {
        r.unmapped("tools.web_search", || format!("tools[{i}].{member}"));
        return;
    }
    if t.search_context_size.is_some() {
        r.unmapped("tools.web_search.search_context_size", || {
            format!("tools[{i}].search_context_size")
        });
    }
    r.web_search = Some(WebSearch {
        allowed_domains: t.filters.and_then(|f| f.allowed_domains).map(RawValue::get),
        user_location: t.user_location.map(RawValue::get),
    });
}
