//! The neutral form every dialect is decoded into and encoded out of, so that n dialects need n
//! decoders and n encoders rather than n² pairwise translators.
//!
//! Requests keep what the three dialects share: system text, turns of text and images, tool calls
//! and tool results, tool definitions and choice, sampling limits, stop sequences. Strings the
//! upstream request carries unchanged are kept as the JSON literal the client wrote ([`Text::Lit`]),
//! so translation copies bytes instead of unescaping and re-escaping them. Responses and stream
//! events keep the answer's text and tool calls, the stop reason and the usage.

use std::borrow::Cow;

use bytes::BytesMut;

use crate::dialect::error::GwError;
use crate::json::{write_str, write_str_body};
use crate::sse::SseEvent;

// ---- requests ----

/// Text from the client's request.
#[derive(Debug, Clone)]
pub enum Text<'a> {
    /// A JSON string literal exactly as the client wrote it, quotes and escapes included.
    Lit(&'a str),
    Own(String),
}

impl Text<'_> {
    pub fn write(&self, out: &mut BytesMut) {
        match self {
            Text::Lit(l) => out.extend_from_slice(l.as_bytes()),
            Text::Own(s) => write_str(out, s),
        }
    }
    pub fn is_empty(&self) -> bool {
        match self {
            Text::Lit(l) => *l == "\"\"",
            Text::Own(s) => s.is_empty(),
        }
    }
    pub fn decode(&self) -> Cow<'_, str> {
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
    /// A system (or developer) message inside the conversation, where the client put it: a chat
    /// upstream keeps it there; an Anthropic upstream takes it into its system prompt.
    System,
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
    /// The call's arguments must match the schema exactly (OpenAI's and Anthropic's `strict`).
    pub strict: bool,
}

#[derive(Debug)]
pub enum ToolChoice<'a> {
    Auto,
    None,
    Required,
    Named(Text<'a>),
}

/// How hard the model should reason: OpenAI's `reasoning_effort` / `reasoning.effort`,
/// Anthropic's `output_config.effort` (or a thinking budget, read as the nearest effort).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effort {
    Minimal,
    Low,
    Medium,
    High,
}

impl Effort {
    /// An effort as OpenAI or Anthropic names it; `None` for a name neither uses.
    pub fn from_name(name: &str) -> Option<Effort> {
        Some(match name {
            "minimal" | "none" => Effort::Minimal,
            "low" => Effort::Low,
            "medium" => Effort::Medium,
            "high" | "xhigh" | "max" => Effort::High,
            _ => return None,
        })
    }

    /// The effort nearest an Anthropic thinking budget (tokens).
    pub fn from_budget(tokens: u64) -> Effort {
        match tokens {
            0..=2047 => Effort::Low,
            2048..=12287 => Effort::Medium,
            _ => Effort::High,
        }
    }

    /// OpenAI's name of this effort.
    pub fn openai(self) -> &'static str {
        match self {
            Effort::Minimal => "minimal",
            Effort::Low => "low",
            Effort::Medium => "medium",
            Effort::High => "high",
        }
    }

    /// Anthropic's name of this effort (its scale starts at `low`).
    pub fn anthropic(self) -> &'static str {
        match self {
            Effort::Minimal | Effort::Low => "low",
            Effort::Medium => "medium",
            Effort::High => "high",
        }
    }
}

/// A hosted (server-side) web search tool: OpenAI Responses' `web_search`, Anthropic's
/// `web_search_20250305`. Its options are kept raw.
#[derive(Debug, Default)]
pub struct WebSearch<'a> {
    /// A JSON array of domain strings.
    pub allowed_domains: Option<&'a str>,
    /// The approximate-location object both dialects share.
    pub user_location: Option<&'a str>,
}

/// A request part with no counterpart in the upstream's dialect (docs/translation-policy.md):
/// refused with a 400 naming it, unless the alias's `drop` list names `part`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unmapped {
    /// The part's name as an alias's `drop` list writes it (`cache_control`, `include`,
    /// `tools.file_search`).
    pub part: Cow<'static, str>,
    /// Where the request carries it first, in the client's dialect (`system[1].cache_control`).
    pub at: String,
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
    pub effort: Option<Effort>,
    /// `false` when the client allows at most one tool call per turn.
    pub parallel_tool_calls: Option<bool>,
    /// The end user's id: OpenAI's `user`, Anthropic's `metadata.user_id`.
    pub user: Option<Text<'a>>,
    pub web_search: Option<WebSearch<'a>>,
    /// Namespaces whose tools were flattened into `{namespace}__{name}` (Responses `namespace`
    /// tools), so that the answer's calls are put back under theirs.
    pub namespaces: Vec<String>,
    /// Parts with no counterpart upstream, each once.
    pub unmapped: Vec<Unmapped>,
}

impl<'a> Request<'a> {
    /// Notes each top-level field with no counterpart upstream that the request sets (a list of
    /// (name, whether it asks for anything)).
    pub fn unmapped_fields(&mut self, fields: &[(&'static str, bool)]) {
        for &(part, present) in fields {
            if present {
                self.unmapped(part, || part.to_owned());
            }
        }
    }

    /// Notes a part with no counterpart upstream (once per part name).
    pub fn unmapped(&mut self, part: impl Into<Cow<'static, str>>, at: impl FnOnce() -> String) {
        let part = part.into();
        if !self.unmapped.iter().any(|u| u.part == part) {
            self.unmapped.push(Unmapped { part, at: at() });
        }
    }

    /// Adds a part to the last turn when it has the same role, else starts a turn.
    pub fn push(&mut self, role: Role, part: Part<'a>) {
        match self.messages.last_mut() {
            Some(m) if m.role == role => m.parts.push(part),
            _ => self.messages.push(Message {
                role,
                parts: vec![part],
            }),
        }
    }
}

// ---- responses and streams ----

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    End,
    MaxTokens,
    ToolUse,
    StopSequence,
    ContentFilter,
}

#[derive(Debug, Default, Clone, Copy)]
pub struct Usage {
    pub input: u64,
    pub output: u64,
}

impl Usage {
    /// Reads a provider's usage object, whose two counters each dialect names its own way.
    pub fn from_json(usage: Option<&serde_json::Value>, input: &str, output: &str) -> Usage {
        let count = |k: &str| {
            usage
                .and_then(|u| u.get(k))
                .and_then(serde_json::Value::as_u64)
        };
        Usage {
            input: count(input).unwrap_or(0),
            output: count(output).unwrap_or(0),
        }
    }

    /// Applies a stream's usage report: each counter it carries replaces the one so far.
    pub fn update(&mut self, input: Option<u64>, output: Option<u64>) {
        if let Some(i) = input {
            self.input = i;
        }
        if let Some(o) = output {
            self.output = o;
        }
    }
}

#[derive(Debug)]
pub struct Response {
    pub id: String,
    pub content: Vec<OutPart>,
    pub stop: StopReason,
    pub usage: Usage,
}

impl Response {
    /// The text parts joined, for the dialects that carry an answer's text in one field (chat's
    /// `message.content`, the Responses message item).
    pub fn text(&self) -> String {
        self.content
            .iter()
            .filter_map(|p| match p {
                OutPart::Text(t) => Some(t.as_str()),
                OutPart::ToolCall { .. } => None,
            })
            .collect()
    }

    /// The tool calls as (id, name, arguments), for the dialects that list them apart from the
    /// text.
    pub fn calls(&self) -> impl Iterator<Item = (&str, &str, &str)> {
        self.content.iter().filter_map(|p| match p {
            OutPart::ToolCall {
                id,
                name,
                arguments,
            } => Some((id.as_str(), name.as_str(), arguments.as_str())),
            OutPart::Text(_) => None,
        })
    }
}

#[derive(Debug)]
pub enum OutPart {
    Text(String),
    ToolCall {
        id: String,
        name: String,
        arguments: String,
    },
}

/// A streamed string: a delta's text or a tool call's arguments. `plain` says the upstream wrote
/// it with neither an escape nor a character JSON must escape, so that its bytes are also its
/// escaped form: an encoder copies them rather than scanning them again (most deltas are a few
/// plain words; the decoder learnt this in the pass that found the literal's end).
pub struct Fragment<'a> {
    pub text: Cow<'a, str>,
    pub plain: bool,
}

impl<'a> Fragment<'a> {
    /// A string whose escaped form is not known: encoders escape it.
    pub fn new(text: Cow<'a, str>) -> Self {
        Fragment { text, plain: false }
    }

    /// Appends the string escaped, without quotes ([`write_str_body`]).
    pub fn write_body(&self, out: &mut BytesMut) {
        if self.plain {
            out.extend_from_slice(self.text.as_bytes());
        } else {
            write_str_body(out, &self.text);
        }
    }

    /// Appends the string as a JSON string literal ([`write_str`]).
    pub fn write(&self, out: &mut BytesMut) {
        out.extend_from_slice(b"\"");
        self.write_body(out);
        out.extend_from_slice(b"\"");
    }
}

impl std::ops::Deref for Fragment<'_> {
    type Target = str;
    fn deref(&self) -> &str {
        &self.text
    }
}

/// As the text alone: what a stream's events are compared by in tests.
impl std::fmt::Debug for Fragment<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&*self.text, f)
    }
}

/// One step of an upstream stream, in neutral form. Strings borrow from the upstream frame
/// (they are copied only when they contain JSON escapes), since every event is encoded for the
/// client before the next frame is looked at.
#[derive(Debug)]
pub enum Event<'a> {
    Start {
        id: Cow<'a, str>,
        input_tokens: Option<u64>,
    },
    Text(Fragment<'a>),
    /// A new tool call; `index` is the upstream's index for it, which later argument deltas
    /// refer to.
    ToolStart {
        index: u64,
        id: Cow<'a, str>,
        name: Cow<'a, str>,
    },
    ToolArgs {
        index: u64,
        delta: Fragment<'a>,
    },
    Stop(StopReason),
    Usage {
        input: Option<u64>,
        output: Option<u64>,
    },
    /// The upstream's terminal frame.
    Done,
}

/// Emits client-dialect SSE for neutral events.
pub trait Encoder: Send {
    fn event(&mut self, ev: Event<'_>, out: &mut BytesMut);
    fn error(&mut self, err: &GwError, out: &mut BytesMut);
}

/// Parses upstream SSE events into neutral events.
pub trait Decoder: Send {
    fn event<'a>(
        &mut self,
        ev: &'a SseEvent,
        sink: &mut dyn FnMut(Event<'a>),
    ) -> Result<(), GwError>;
}
