//! Translation between dialects, for routes where the client's dialect is not one the provider
//! speaks. Every dialect is decoded into one neutral form and encoded out of it, so n dialects
//! need n decoders and n encoders rather than n² pairwise translators:
//!
//! - requests: chat | messages | responses → [`request::Request`] → chat | messages
//! - responses: chat | messages → [`Response`] → chat | messages | responses
//! - streams: chat | messages events → [`Event`]s → chat | messages | responses SSE
//!
//! The neutral form keeps what the three dialects share: system text, turns of text, tool calls
//! and tool results, tool definitions and choice, sampling limits, stop reasons and usage.
//! Anything else in a request (images, provider-specific options) is dropped, not guessed at.

pub mod chat;
pub mod messages;
pub mod request;
pub mod responses;

use std::borrow::Cow;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use serde_json::Value;

use crate::body::StreamTransform;
use crate::config::Route;
use crate::error::{Dialect, GwError};
use crate::sse::SseEvent;

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

/// One step of an upstream stream, in neutral form. Strings borrow from the upstream frame
/// (they are copied only when they contain JSON escapes), since every event is encoded for the
/// client before the next frame is looked at.
#[derive(Debug)]
pub enum Event<'a> {
    Start {
        id: Cow<'a, str>,
        input_tokens: Option<u64>,
    },
    Text(Cow<'a, str>),
    /// A new tool call; `index` is the upstream's index for it, which later argument deltas
    /// refer to.
    ToolStart {
        index: u64,
        id: Cow<'a, str>,
        name: Cow<'a, str>,
    },
    ToolArgs {
        index: u64,
        delta: Cow<'a, str>,
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

/// What the response side of a translated exchange needs to remember from the request.
pub struct Translation {
    pub client: Dialect,
    pub upstream: Dialect,
    pub route: Arc<Route>,
    pub include_usage: bool,
}

impl Translation {
    pub fn response(&self, upstream: &[u8]) -> Result<Bytes, GwError> {
        let resp = match self.upstream {
            Dialect::Chat => chat::decode_response(upstream)?,
            Dialect::Messages => messages::decode_response(upstream)?,
            Dialect::Responses => {
                return Err(GwError::bad_upstream(
                    "responses upstreams are only used natively",
                ))
            }
        };
        let alias = &self.route.alias;
        let v = match self.client {
            Dialect::Chat => chat::encode_response(&resp, alias),
            Dialect::Messages => messages::encode_response(&resp, alias),
            Dialect::Responses => responses::encode_response(&resp, alias),
        };
        Ok(Bytes::from(
            serde_json::to_vec(&v).expect("serializing a Value cannot fail"),
        ))
    }

    pub fn stream(self) -> Box<dyn StreamTransform> {
        let decoder: Box<dyn Decoder> = match self.upstream {
            Dialect::Messages => Box::<messages::StreamDecoder>::default(),
            _ => Box::<chat::StreamDecoder>::default(),
        };
        let alias = self.route.alias.clone();
        let encoder: Box<dyn Encoder> = match self.client {
            Dialect::Chat => Box::new(chat::StreamEncoder::new(alias, self.include_usage)),
            Dialect::Messages => Box::new(messages::StreamEncoder::new(alias)),
            Dialect::Responses => Box::new(responses::StreamEncoder::new(alias)),
        };
        Box::new(Translate {
            decoder,
            encoder,
            done: false,
        })
    }
}

struct Translate {
    decoder: Box<dyn Decoder>,
    encoder: Box<dyn Encoder>,
    done: bool,
}

impl StreamTransform for Translate {
    fn on_event(&mut self, ev: &SseEvent, out: &mut BytesMut) -> Result<(), GwError> {
        if self.done {
            return Ok(());
        }
        let enc = &mut self.encoder;
        let done = &mut self.done;
        self.decoder.event(ev, &mut |e| {
            if matches!(e, Event::Done) {
                *done = true;
            }
            enc.event(e, out)
        })
    }

    fn on_end(&mut self, _out: &mut BytesMut) -> Result<(), GwError> {
        if self.done {
            Ok(())
        } else {
            Err(GwError::bad_upstream(
                "upstream closed the stream before its final event",
            ))
        }
    }

    fn on_error(&mut self, err: &GwError, out: &mut BytesMut) {
        self.encoder.error(err, out);
    }
}

/// Decodes the client's request and encodes it for the upstream.
pub fn request(
    client: Dialect,
    upstream: Dialect,
    body: &[u8],
    route: &Arc<Route>,
) -> Result<(Bytes, Translation), GwError> {
    let req = match client {
        Dialect::Chat => request::decode_chat(body)?,
        Dialect::Messages => request::decode_messages(body)?,
        Dialect::Responses => request::decode_responses(body)?,
    };
    let bytes = match upstream {
        Dialect::Chat => request::encode_chat(&req, &route.upstream_json),
        Dialect::Messages => request::encode_messages(&req, &route.upstream_json),
        Dialect::Responses => {
            return Err(GwError::new(
                http::StatusCode::INTERNAL_SERVER_ERROR,
                "no translation into the responses dialect",
            ))
        }
    };
    Ok((
        bytes,
        Translation {
            client,
            upstream,
            route: route.clone(),
            include_usage: req.include_usage,
        },
    ))
}

// Small helpers shared by the dialect modules.

/// For optional string fields: borrows from the input unless the string contains escapes.
/// serde borrows only for a field typed exactly `Cow<str>`; through `Option` it would allocate
/// every time, which on a stream is once per frame.
pub(crate) fn opt_cow<'de: 'a, 'a, D>(d: D) -> Result<Option<Cow<'a, str>>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    #[derive(serde::Deserialize)]
    #[serde(transparent)]
    struct Str<'a>(#[serde(borrow)] Cow<'a, str>);
    Ok(<Option<Str<'a>> as serde::Deserialize>::deserialize(d)?.map(|s| s.0))
}

pub(crate) fn bad(msg: impl Into<String>) -> GwError {
    GwError::bad_request(msg)
}

pub(crate) fn opt_str(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_owned)
}

/// A fresh id with the dialect's prefix. Ids only need to be unique enough for clients to tell
/// objects apart; a per-thread counter mixed with the time is plenty and costs no syscall.
pub(crate) fn new_id(prefix: &str) -> String {
    use std::cell::Cell;
    thread_local! {
        static NEXT: Cell<u64> = const { Cell::new(0) };
    }
    let n = NEXT.with(|c| {
        let v = c.get().wrapping_add(1);
        c.set(v);
        v
    });
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    format!("{prefix}{:016x}{:08x}", t, n as u32)
}

pub(crate) fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Parses the arguments JSON text for dialects that carry arguments as an object.
pub(crate) fn args_value(arguments: &str) -> Value {
    if arguments.trim().is_empty() {
        return Value::Object(Default::default());
    }
    serde_json::from_str(arguments).unwrap_or_else(|_| Value::Object(Default::default()))
}

/// Upstream error event inside a stream → the gateway's error, keeping the upstream's message.
pub(crate) fn upstream_stream_error(data: &[u8]) -> GwError {
    let v: Value = serde_json::from_slice(data).unwrap_or(Value::Null);
    let msg = v
        .get("error")
        .and_then(|e| e.get("message"))
        .and_then(Value::as_str)
        .or_else(|| v.get("message").and_then(Value::as_str))
        .unwrap_or("upstream reported an error mid-stream");
    GwError::new(
        http::StatusCode::BAD_GATEWAY,
        format!("upstream error: {msg}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn optional_strings_borrow_unless_escaped() {
        #[derive(serde::Deserialize)]
        struct S<'a> {
            #[serde(default, borrow, deserialize_with = "opt_cow")]
            a: Option<Cow<'a, str>>,
            #[serde(default, borrow, deserialize_with = "opt_cow")]
            b: Option<Cow<'a, str>>,
            #[serde(default, borrow, deserialize_with = "opt_cow")]
            c: Option<Cow<'a, str>>,
        }
        let s: S = serde_json::from_str(r#"{"a":"plain","b":"q\"x","c":null}"#).unwrap();
        assert!(matches!(s.a, Some(Cow::Borrowed("plain"))));
        assert!(matches!(s.b.as_deref(), Some("q\"x")));
        assert!(matches!(s.b, Some(Cow::Owned(_))));
        assert!(s.c.is_none());
    }
}
