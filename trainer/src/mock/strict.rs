//! What the real APIs refuse before they answer, refused here the same way: an unknown
//! top-level field, a field whose beta was not asked for, a missing required field, and the
//! model-dependent refusals gateways in front of these APIs are known to hit. A test that passes
//! against the mock then does not fail against the real upstream for one of these reasons.
//!
//! Each rule names its source beside it; the error bodies are the APIs' own shapes and messages,
//! as users of these APIs report them. The field lists are the official SDKs' request types
//! (anthropic 2.17 `MessageCreateParamsBase`, openai 3.63 `CompletionCreateParamsBase` and
//! `ResponseCreateParamsBase`) plus the documented fields those types leave out. The
//! model-dependent rules key on upstream model names (`claude-sonnet-4-6`, `gpt-5`), so a test's
//! made-up model (`mock-gpt`) meets only the model-independent rules. Both coding agents of
//! tests/agents, talking straight to the mock (`tests/agents/capture.py`), pass every rule.
//!
//! Cheap by design (the mock is every benchmark's upstream): one pass over the top level that
//! skips the values it does not look at, and a look inside `tools` only on Messages.

use super::wire::{self, Dialect};
use bytes::Bytes;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use std::borrow::Cow;
use std::fmt;

/// Messages: the GA top-level fields (anthropic 2.17's `MessageCreateParamsBase`, `stream`, and
/// the sampling fields the API reference still documents: `temperature`, `top_k`, `top_p`).
const MESSAGES_FIELDS: &[&str] = &[
    "cache_control",
    "container",
    "diagnostics",
    "inference_geo",
    "max_tokens",
    "messages",
    "metadata",
    "model",
    "output_config",
    "service_tier",
    "speed",
    "stop_sequences",
    "stream",
    "system",
    "temperature",
    "thinking",
    "tool_choice",
    "tools",
    "top_k",
    "top_p",
    "user_profile_id",
    "workspace_id",
];

/// Messages: top-level fields the API takes only with one of these `anthropic-beta` values
/// (platform.claude.com: context editing and compaction, `context-management-2025-06-27` and
/// `compact-2026-01-12`; the MCP connector, `mcp-client-2025-04-04` and `mcp-client-2025-11-20`).
/// Without one: `<field>: Extra inputs are not permitted` (claude-code #14135, #21612, #39589,
/// #51700; copilot-api #217, where the missing beta header was the cause).
const MESSAGES_BETA_FIELDS: &[(&str, &[&str])] = &[
    (
        "context_management",
        &["context-management-2025-06-27", "compact-2026-01-12"],
    ),
    (
        "mcp_servers",
        &["mcp-client-2025-04-04", "mcp-client-2025-11-20"],
    ),
];

/// Messages: the fields of a custom tool (one without `type`, or `type: custom`): anthropic
/// 2.17's `ToolParam`. Another is `tools.N.custom.<field>: Extra inputs are not permitted`
/// (reported for `input_examples` through Bedrock before it was GA).
const CUSTOM_TOOL_FIELDS: &[&str] = &[
    "allowed_callers",
    "cache_control",
    "defer_loading",
    "description",
    "eager_input_streaming",
    "input_examples",
    "input_schema",
    "name",
    "strict",
    "type",
];

/// Chat Completions: openai 3.63's `CompletionCreateParamsBase` and `stream`.
const CHAT_FIELDS: &[&str] = &[
    "audio",
    "frequency_penalty",
    "function_call",
    "functions",
    "logit_bias",
    "logprobs",
    "max_completion_tokens",
    "max_tokens",
    "messages",
    "metadata",
    "modalities",
    "model",
    "moderation",
    "n",
    "parallel_tool_calls",
    "prediction",
    "presence_penalty",
    "prompt_cache_key",
    "prompt_cache_options",
    "prompt_cache_retention",
    "reasoning_effort",
    "response_format",
    "safety_identifier",
    "seed",
    "service_tier",
    "stop",
    "store",
    "stream",
    "stream_options",
    "temperature",
    "tool_choice",
    "tools",
    "top_logprobs",
    "top_p",
    "user",
    "verbosity",
    "web_search_options",
];

/// Responses: openai 3.63's `ResponseCreateParamsBase` and `stream`, plus `client_metadata`,
/// which Codex CLI (OpenAI's own client) sends to api.openai.com with an API key.
const RESPONSES_FIELDS: &[&str] = &[
    "access_programs",
    "background",
    "background_options",
    "client_metadata",
    "context_management",
    "conversation",
    "image",
    "include",
    "input",
    "instructions",
    "max_output_tokens",
    "max_tool_calls",
    "metadata",
    "model",
    "moderation",
    "parallel_tool_calls",
    "previous_response_id",
    "prompt",
    "prompt_cache_key",
    "prompt_cache_options",
    "prompt_cache_retention",
    "reasoning",
    "safety_identifier",
    "service_tier",
    "store",
    "stream",
    "stream_options",
    "temperature",
    "text",
    "tool_choice",
    "tools",
    "top_logprobs",
    "top_p",
    "truncation",
    "user",
];

/// A refusal: the status and the body the real API answers with.
#[derive(Debug)]
pub struct Refusal {
    pub status: u16,
    pub body: Bytes,
}

/// What one pass over the top level found.
#[derive(Default)]
struct Top<'a> {
    model: Option<Cow<'a, str>>,
    has_messages: bool,
    has_max_tokens: bool,
    /// A non-null `temperature`.
    temperature: Option<f64>,
    has_top_p: bool,
    /// `thinking.type`.
    thinking: Option<Cow<'a, str>>,
    /// The first top-level field the dialect does not have (body order).
    unknown: Option<String>,
    /// The first beta-gated field (Messages), with its betas.
    gated: Option<(&'static str, &'static [&'static str])>,
    /// Messages: the first field of a custom tool that a tool does not have, `(index, field)`.
    tool_field: Option<(usize, String)>,
}

/// Check a request of `dialect` as the real API would before answering; `betas` is the
/// request's `anthropic-beta` header values. A body that is not JSON is left to the caller.
pub fn check<'h>(
    dialect: Dialect,
    betas: impl Iterator<Item = &'h str>,
    body: &[u8],
) -> Result<(), Refusal> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let Ok(top) = (TopVisitor { dialect }).deserialize(&mut de) else {
        return Ok(());
    };
    match dialect {
        Dialect::Messages => messages(&top, betas),
        Dialect::Chat => chat(&top),
        Dialect::Responses => responses(&top),
    }
}

fn messages<'h>(top: &Top, betas: impl Iterator<Item = &'h str>) -> Result<(), Refusal> {
    if let Some(f) = &top.unknown {
        return Err(anthropic(&format!("{f}: Extra inputs are not permitted")));
    }
    if let Some((field, wanted)) = top.gated {
        let asked = betas
            .flat_map(|v| v.split(','))
            .any(|b| wanted.contains(&b.trim()));
        if !asked {
            return Err(anthropic(&format!(
                "{field}: Extra inputs are not permitted"
            )));
        }
    }
    if let Some((i, f)) = &top.tool_field {
        return Err(anthropic(&format!(
            "tools.{i}.custom.{f}: Extra inputs are not permitted"
        )));
    }
    for (present, field) in [
        (top.model.is_some(), "model"),
        (top.has_messages, "messages"),
        (top.has_max_tokens, "max_tokens"),
    ] {
        if !present {
            return Err(anthropic(&format!("{field}: Field required")));
        }
    }
    let model = top.model.as_deref().unwrap_or("");
    if let Some(v) = claude_version(model) {
        // Opus 4.7 and later take no sampling parameters (ComfyUI #13923, aido v1.4.2).
        let no_sampling = match v.family {
            "opus" => v.at_least(4, 7),
            "fable" => true,
            _ => false,
        };
        if no_sampling && top.temperature.is_some() {
            return Err(anthropic("`temperature` is deprecated for this model."));
        }
        // Opus 4.1+, Sonnet 4.5+, Haiku 4.5+ take one of the two (LiteLLM #15097,
        // open-webui functions #9, langfuse #9882, BrowserOS #208).
        let one_sampler = match v.family {
            "opus" => v.at_least(4, 1),
            "sonnet" | "haiku" => v.at_least(4, 5),
            _ => false,
        };
        if one_sampler && top.temperature.is_some() && top.has_top_p {
            return Err(anthropic(
                "`temperature` and `top_p` cannot both be specified for this model. Please use only one.",
            ));
        }
        // Adaptive thinking came with the 4.6 models; the models from Opus 4.7 and Sonnet 5 on
        // take nothing else (live probes in askalf/dario #273, lidge-jun/opencodex #65,
        // handochan/aelix-ai #258; vellum-assistant #37276).
        let adaptive_only = match v.family {
            "opus" => v.at_least(4, 7),
            "sonnet" => v.at_least(5, 0),
            "fable" | "mythos" => true,
            _ => false,
        };
        let adaptive = match v.family {
            "opus" | "sonnet" => v.at_least(4, 6),
            "haiku" => v.at_least(5, 0),
            _ => true,
        };
        match top.thinking.as_deref() {
            Some("adaptive") if !adaptive => {
                return Err(anthropic(
                    "adaptive thinking is not supported on this model",
                ))
            }
            Some("enabled") if adaptive_only => {
                return Err(anthropic(
                    r#""thinking.type.enabled" is not supported for this model. Use "thinking.type.adaptive" and "output_config.effort" to control thinking behavior."#,
                ))
            }
            _ => {}
        }
    }
    Ok(())
}

fn chat(top: &Top) -> Result<(), Refusal> {
    if let Some(f) = &top.unknown {
        return Err(openai(
            &format!("Unrecognized request argument supplied: {f}"),
            None,
            None,
        ));
    }
    for (present, field) in [
        (top.model.is_some(), "model"),
        (top.has_messages, "messages"),
    ] {
        if !present {
            return Err(missing(field));
        }
    }
    if is_openai_reasoning(top.model.as_deref().unwrap_or("")) {
        // o-series and gpt-5: `max_tokens` is refused (ESPHomeDesigner #379, gollm #33,
        // ComfyUI-Griptape #312, vscode-copilot-release #8065) and `temperature` takes only
        // its default.
        if top.has_max_tokens {
            return Err(openai(
                "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.",
                Some("max_tokens"),
                Some("unsupported_parameter"),
            ));
        }
        if let Some(t) = top.temperature.filter(|t| *t != 1.0) {
            return Err(openai(
                &format!("Unsupported value: 'temperature' does not support {t} with this model. Only the default (1) value is supported."),
                Some("temperature"),
                Some("unsupported_value"),
            ));
        }
    }
    Ok(())
}

fn responses(top: &Top) -> Result<(), Refusal> {
    if let Some(f) = &top.unknown {
        return Err(openai(
            &format!("Unknown parameter: '{f}'."),
            Some(f),
            Some("unknown_parameter"),
        ));
    }
    if top.model.is_none() {
        return Err(missing("model"));
    }
    Ok(())
}

fn missing(field: &str) -> Refusal {
    openai(
        &format!("Missing required parameter: '{field}'."),
        Some(field),
        Some("missing_required_parameter"),
    )
}

/// OpenAI's reasoning models: the o-series and gpt-5 (not the gpt-5 chat snapshots).
fn is_openai_reasoning(model: &str) -> bool {
    let o_series =
        model.len() >= 2 && model.starts_with('o') && model.as_bytes()[1].is_ascii_digit();
    o_series || (model.starts_with("gpt-5") && !model.starts_with("gpt-5-chat"))
}

/// A Claude model name of the current scheme: `claude-<family>-<major>[-<minor>][-<date>]`.
struct ClaudeVersion<'a> {
    family: &'a str,
    major: u32,
    minor: u32,
}

impl ClaudeVersion<'_> {
    fn at_least(&self, major: u32, minor: u32) -> bool {
        (self.major, self.minor) >= (major, minor)
    }
}

fn claude_version(model: &str) -> Option<ClaudeVersion<'_>> {
    let mut parts = model.strip_prefix("claude-")?.split('-');
    let family = parts.next()?;
    if !family.bytes().all(|b| b.is_ascii_lowercase()) {
        return None; // claude-3-5-sonnet-...: the old scheme
    }
    let major = parts.next()?.parse().ok()?;
    // A short number after the major is the minor; a date (8 digits) is not.
    let minor = parts
        .next()
        .filter(|p| p.len() <= 2)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    Some(ClaudeVersion {
        family,
        major,
        minor,
    })
}

fn anthropic(message: &str) -> Refusal {
    let msg = wire::json_str(message);
    Refusal {
        status: 400,
        body: Bytes::from(format!(
            r#"{{"type":"error","error":{{"type":"invalid_request_error","message":{msg}}},"request_id":"req_mock"}}"#
        )),
    }
}

fn openai(message: &str, param: Option<&str>, code: Option<&str>) -> Refusal {
    let msg = wire::json_str(message);
    let param = param.map_or("null".into(), wire::json_str);
    let code = code.map_or("null".into(), wire::json_str);
    Refusal {
        status: 400,
        body: Bytes::from(format!(
            r#"{{"error":{{"message":{msg},"type":"invalid_request_error","param":{param},"code":{code}}}}}"#
        )),
    }
}

struct TopVisitor {
    dialect: Dialect,
}

impl TopVisitor {
    fn deserialize<'de, D: Deserializer<'de>>(self, d: D) -> Result<Top<'de>, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for TopVisitor {
    type Value = Top<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Top<'de>, A::Error> {
        let mut top = Top::default();
        let (known, gated): (&[&str], &[(&'static str, &'static [&'static str])]) =
            match self.dialect {
                Dialect::Messages => (MESSAGES_FIELDS, MESSAGES_BETA_FIELDS),
                Dialect::Chat => (CHAT_FIELDS, &[]),
                Dialect::Responses => (RESPONSES_FIELDS, &[]),
            };
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            let k = &*key;
            if !known.contains(&k) {
                if let Some(&(field, betas)) = gated.iter().find(|(f, _)| *f == k) {
                    top.gated = top.gated.or(Some((field, betas)));
                } else if top.unknown.is_none() {
                    top.unknown = Some(k.to_owned());
                }
            }
            let messages = self.dialect == Dialect::Messages;
            match k {
                "model" => top.model = map.next_value::<Option<Cow<'de, str>>>()?,
                "messages" => top.has_messages = map.next_value::<Option<IgnoredAny>>()?.is_some(),
                "max_tokens" => {
                    top.has_max_tokens = map.next_value::<Option<IgnoredAny>>()?.is_some()
                }
                "top_p" => top.has_top_p = map.next_value::<Option<IgnoredAny>>()?.is_some(),
                "temperature" => top.temperature = map.next_value::<Option<f64>>()?,
                "thinking" if messages => {
                    top.thinking = map.next_value::<Option<Thinking>>()?.and_then(|t| t.kind)
                }
                "tools" if messages => {
                    top.tool_field = map.next_value::<Option<ToolFields>>()?.and_then(|t| t.0)
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(top)
    }
}

/// Messages `thinking`: its `type`.
#[derive(serde::Deserialize)]
struct Thinking<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Cow<'a, str>>,
}

/// Messages `tools`: the first custom tool's field that `ToolParam` does not have.
struct ToolFields(Option<(usize, String)>);

impl<'de> de::Deserialize<'de> for ToolFields {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_seq(ToolsVisitor)
    }
}

struct ToolsVisitor;

impl<'de> Visitor<'de> for ToolsVisitor {
    type Value = ToolFields;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list of tools")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<ToolFields, A::Error> {
        let mut first = None;
        let mut i = 0;
        while let Some(tool) = seq.next_element::<ToolKeys>()? {
            if first.is_none() {
                first = tool.0.map(|f| (i, f));
            }
            i += 1;
        }
        Ok(ToolFields(first))
    }
}

/// One tool: its first field a custom tool does not have (None for a server tool).
struct ToolKeys(Option<String>);

impl<'de> de::Deserialize<'de> for ToolKeys {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(ToolVisitor)
    }
}

struct ToolVisitor;

impl<'de> Visitor<'de> for ToolVisitor {
    type Value = ToolKeys;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a tool")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ToolKeys, A::Error> {
        let mut custom = true;
        let mut extra = None;
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            if key == "type" {
                let ty = map.next_value::<Cow<'de, str>>()?;
                custom = ty == "custom";
                continue;
            }
            map.next_value::<IgnoredAny>()?;
            if extra.is_none() && !CUSTOM_TOOL_FIELDS.contains(&&*key) {
                extra = Some(key.into_owned());
            }
        }
        Ok(ToolKeys(extra.filter(|_| custom)))
    }
}

#[cfg(test)]
#[path = "strict_tests.rs"]
mod tests;
