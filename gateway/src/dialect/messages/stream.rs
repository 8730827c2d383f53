//! Messages streams: an upstream's events into neutral events ([`StreamDecoder`]), and neutral
//! events out as the client's events ([`StreamEncoder`]).

use std::borrow::Cow;

use bytes::BytesMut;
use serde::Deserialize;

use super::{msg_id, stop_from, stop_to};
use crate::dialect::decode::fast::{member, offset, opt_str, u64_of, Template};
use crate::dialect::decode::upstream_stream_error;
use crate::dialect::encode::{new_id, serde_str, ClientStream};
use crate::dialect::error::GwError;
use crate::dialect::neutral::{Decoder, Event, Fragment, StopReason, Usage};
use crate::dialect::Dialect;
use crate::json::{scan_object, write_u64};
use crate::sse::{write_event, SseEvent};

#[derive(Deserialize)]
struct Ev<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(default, borrow)]
    message: Option<StartMsg<'a>>,
    #[serde(default)]
    index: Option<u64>,
    #[serde(default, borrow)]
    content_block: Option<Block<'a>>,
    #[serde(default, borrow)]
    delta: Option<DeltaV<'a>>,
    #[serde(default)]
    usage: Option<UsageV>,
}

#[derive(Deserialize)]
struct StartMsg<'a> {
    #[serde(default, borrow, deserialize_with = "crate::dialect::decode::opt_cow")]
    id: Option<Cow<'a, str>>,
    #[serde(default)]
    usage: Option<UsageV>,
}

#[derive(Deserialize)]
struct Block<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(default, borrow, deserialize_with = "crate::dialect::decode::opt_cow")]
    id: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "crate::dialect::decode::opt_cow")]
    name: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "crate::dialect::decode::opt_cow")]
    text: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct DeltaV<'a> {
    #[serde(
        rename = "type",
        default,
        borrow,
        deserialize_with = "crate::dialect::decode::opt_cow"
    )]
    kind: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "crate::dialect::decode::opt_cow")]
    text: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "crate::dialect::decode::opt_cow")]
    partial_json: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "crate::dialect::decode::opt_cow")]
    stop_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct UsageV {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct BlockDelta<'a> {
    #[serde(default)]
    index: u64,
    #[serde(borrow)]
    delta: SmallDelta<'a>,
}

#[derive(Deserialize)]
struct SmallDelta<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(default, borrow, deserialize_with = "crate::dialect::decode::opt_cow")]
    text: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "crate::dialect::decode::opt_cow")]
    partial_json: Option<Cow<'a, str>>,
}

/// The kind of a `content_block_delta` the fast path reads.
#[derive(Clone, Copy, PartialEq, Eq, Default)]
enum Delta {
    #[default]
    Text,
    Args,
    Other,
}

/// A `content_block_delta` read without a serde parse: (index, kind, its `text` or
/// `partial_json`). `None` for a frame it leaves to the serde parse (not JSON, or a member of a
/// type it does not expect), which then reads it as it read every frame before.
#[allow(clippy::type_complexity)]
fn fast_delta(data: &[u8]) -> Option<(u64, Delta, Option<Cow<'_, str>>, Option<(usize, usize)>)> {
    let [index, delta] = scan_object(data, ["index", "delta"]).ok()?;
    let index = match member(data, index) {
        None => 0,
        Some(i) => u64_of(i)?,
    };
    let d = member(data, delta)?;
    if d.first() != Some(&b'{') {
        return None;
    }
    let [kind, text_r, pj_r] = scan_object(d, ["type", "text", "partial_json"]).ok()?;
    let kind = opt_str(member(d, kind))??;
    let text = opt_str(member(d, text_r))?;
    let partial_json = opt_str(member(d, pj_r))?;
    let at = |v: &Option<Cow<str>>, r: Option<(usize, usize)>| {
        let o = offset(data, d);
        v.as_ref().and(r).map(|(s, e)| (o + s, o + e))
    };
    Some(match &*kind {
        "text_delta" => {
            let at = at(&text, text_r);
            (index, Delta::Text, text, at)
        }
        "input_json_delta" => {
            let at = at(&partial_json, pj_r);
            (index, Delta::Args, partial_json, at)
        }
        _ => (index, Delta::Other, None, None),
    })
}

/// Messages events → neutral events.
#[derive(Default)]
pub struct StreamDecoder {
    /// The last `content_block_delta` the fast path read, around its value (see [`Template`]),
    /// with its index and kind.
    template: Template,
    index: u64,
    kind: Delta,
}

impl StreamDecoder {
    fn sink_delta<'a>(
        &self,
        index: u64,
        kind: Delta,
        value: Option<Fragment<'a>>,
        sink: &mut dyn FnMut(Event<'a>),
    ) {
        if let Some(v) = value {
            match kind {
                Delta::Text => sink(Event::Text(v)),
                Delta::Args if !v.is_empty() => sink(Event::ToolArgs { index, delta: v }),
                _ => {}
            }
        }
    }
}

impl Decoder for StreamDecoder {
    fn event<'a>(
        &mut self,
        ev: &'a SseEvent,
        sink: &mut dyn FnMut(Event<'a>),
    ) -> Result<(), GwError> {
        match &ev.event[..] {
            b"error" => return Err(upstream_stream_error(&ev.data)),
            // Most of a stream is deltas and pings: they get a parse that looks only for their
            // few fields (the general one below handles every event, named or not).
            b"content_block_delta" => {
                if let Some(v) = self.template.matches(&ev.data) {
                    self.sink_delta(self.index, self.kind, Some(v), sink);
                    return Ok(());
                }
                if let Some((index, kind, value, at)) = fast_delta(&ev.data) {
                    match at {
                        Some((s, e)) if kind != Delta::Other => {
                            self.template.keep(&ev.data, s, e);
                            (self.index, self.kind) = (index, kind);
                        }
                        _ => self.template.forget(),
                    }
                    self.sink_delta(index, kind, value.map(Fragment::new), sink);
                    return Ok(());
                }
                self.template.forget();
                let d: BlockDelta<'a> = serde_json::from_slice(&ev.data).map_err(|_| {
                    GwError::bad_upstream("upstream sent a frame that is not a messages event")
                })?;
                match &*d.delta.kind {
                    "text_delta" => {
                        if let Some(t) = d.delta.text {
                            sink(Event::Text(Fragment::new(t)));
                        }
                    }
                    "input_json_delta" => {
                        if let Some(p) = d.delta.partial_json.filter(|p| !p.is_empty()) {
                            sink(Event::ToolArgs {
                                index: d.index,
                                delta: Fragment::new(p),
                            });
                        }
                    }
                    _ => {}
                }
                return Ok(());
            }
            b"ping" | b"content_block_stop" => {
                if serde_json::from_slice::<serde::de::IgnoredAny>(&ev.data).is_err() {
                    return Err(GwError::bad_upstream(
                        "upstream sent a frame that is not a messages event",
                    ));
                }
                return Ok(());
            }
            _ => {}
        }
        let e: Ev<'a> = serde_json::from_slice(&ev.data).map_err(|_| {
            GwError::bad_upstream("upstream sent a frame that is not a messages event")
        })?;
        match &*e.kind {
            "message_start" => {
                let (id, usage) = match e.message {
                    Some(m) => (m.id, m.usage),
                    None => (None, None),
                };
                sink(Event::Start {
                    id: id.unwrap_or_else(|| new_id("msg_").into()),
                    input_tokens: usage.and_then(|u| u.input_tokens),
                });
            }
            "content_block_start" => {
                if let Some(b) = e.content_block {
                    match &*b.kind {
                        "tool_use" => sink(Event::ToolStart {
                            index: e.index.unwrap_or(0),
                            id: b.id.unwrap_or_else(|| new_id("toolu_").into()),
                            name: b.name.unwrap_or_default(),
                        }),
                        "text" => {
                            if let Some(t) = b.text.filter(|t| !t.is_empty()) {
                                sink(Event::Text(Fragment::new(t)));
                            }
                        }
                        _ => {}
                    }
                }
            }
            "content_block_delta" => {
                if let Some(d) = e.delta {
                    match d.kind.as_deref() {
                        Some("text_delta") => {
                            if let Some(t) = d.text {
                                sink(Event::Text(Fragment::new(t)));
                            }
                        }
                        Some("input_json_delta") => {
                            if let Some(p) = d.partial_json.filter(|p| !p.is_empty()) {
                                sink(Event::ToolArgs {
                                    index: e.index.unwrap_or(0),
                                    delta: Fragment::new(p),
                                });
                            }
                        }
                        _ => {}
                    }
                }
            }
            "message_delta" => {
                if let Some(u) = e.usage {
                    sink(Event::Usage {
                        input: u.input_tokens,
                        output: u.output_tokens,
                    });
                }
                if let Some(s) = e.delta.and_then(|d| d.stop_reason) {
                    sink(Event::Stop(stop_from(&s)));
                }
            }
            "message_stop" => sink(Event::Done),
            "error" => return Err(upstream_stream_error(&ev.data)),
            _ => {} // ping, content_block_stop, and future event types
        }
        Ok(())
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Open {
    Text,
    Tool(u64),
}

/// Neutral events → Messages events: blocks are opened on first content and closed when the next
/// kind of content starts, so indices are sequential and every started block is stopped.
pub struct StreamEncoder {
    alias: String,
    open: Option<(Open, u64)>,
    next_index: u64,
    usage: Usage,
    stop: Option<StopReason>,
    started: bool,
}

impl StreamEncoder {
    pub fn new(alias: String) -> Self {
        StreamEncoder {
            alias,
            open: None,
            next_index: 0,
            usage: Usage::default(),
            stop: None,
            started: false,
        }
    }

    fn close(&mut self, out: &mut BytesMut) {
        if let Some((_, i)) = self.open.take() {
            out.extend_from_slice(
                b"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":",
            );
            write_u64(out, i);
            out.extend_from_slice(b"}\n\n");
        }
    }

    /// `content_block_start` of a new block (`{"text":"","type":"text"}` or a tool call's, written
    /// by `block`), closing the open one; its index.
    fn open(&mut self, kind: Open, out: &mut BytesMut, block: impl FnOnce(&mut BytesMut)) -> u64 {
        self.close(out);
        let i = self.next_index;
        self.next_index += 1;
        self.open = Some((kind, i));
        out.extend_from_slice(b"event: content_block_start\ndata: {\"content_block\":");
        block(out);
        out.extend_from_slice(b",\"index\":");
        write_u64(out, i);
        out.extend_from_slice(b",\"type\":\"content_block_start\"}\n\n");
        i
    }

    /// The frequent event, written without building a DOM.
    fn delta(out: &mut BytesMut, index: u64, kind: &str, field: &str, value: &Fragment) {
        out.extend_from_slice(
            b"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":",
        );
        write_u64(out, index);
        out.extend_from_slice(b",\"delta\":{\"type\":\"");
        out.extend_from_slice(kind.as_bytes());
        out.extend_from_slice(b"\",\"");
        out.extend_from_slice(field.as_bytes());
        out.extend_from_slice(b"\":");
        value.write(out);
        out.extend_from_slice(b"}}\n\n");
    }
}

impl ClientStream for StreamEncoder {
    const ID_PREFIX: &'static str = "msg_";

    fn usage(&mut self) -> &mut Usage {
        &mut self.usage
    }

    fn started(&self) -> bool {
        self.started
    }

    /// `message_start` and a `ping`, written as serde_json wrote the `Value` they were (members
    /// sorted by name).
    fn start(&mut self, id: &str, out: &mut BytesMut) {
        self.started = true;
        out.extend_from_slice(b"event: message_start\ndata: {\"message\":{\"content\":[],\"id\":");
        serde_str(out, &msg_id(id));
        out.extend_from_slice(b",\"model\":");
        serde_str(out, &self.alias);
        out.extend_from_slice(
            b",\"role\":\"assistant\",\"stop_reason\":null,\"stop_sequence\":null,\
              \"type\":\"message\",\"usage\":{\"input_tokens\":",
        );
        write_u64(out, self.usage.input);
        out.extend_from_slice(
            b",\"output_tokens\":0}},\"type\":\"message_start\"}\n\n\
              event: ping\ndata: {\"type\":\"ping\"}\n\n",
        );
    }

    fn content(&mut self, ev: Event<'_>, out: &mut BytesMut) {
        match ev {
            Event::Text(t) => {
                let i = match self.open {
                    Some((Open::Text, i)) => i,
                    _ => self.open(Open::Text, out, |out| {
                        out.extend_from_slice(b"{\"text\":\"\",\"type\":\"text\"}")
                    }),
                };
                Self::delta(out, i, "text_delta", "text", &t);
            }
            Event::ToolStart { index, id, name } => {
                self.open(Open::Tool(index), out, |out| {
                    out.extend_from_slice(b"{\"id\":");
                    serde_str(out, &id);
                    out.extend_from_slice(b",\"input\":{},\"name\":");
                    serde_str(out, &name);
                    out.extend_from_slice(b",\"type\":\"tool_use\"}");
                });
            }
            Event::ToolArgs { index, delta } => {
                let i = match self.open {
                    Some((Open::Tool(u), i)) if u == index => i,
                    // Arguments for a call that is not the open block: OpenAI can interleave
                    // parallel calls, Messages cannot; attach them to the open tool block.
                    Some((Open::Tool(_), i)) => i,
                    _ => return,
                };
                Self::delta(out, i, "input_json_delta", "partial_json", &delta);
            }
            Event::Stop(s) => self.stop = Some(s),
            Event::Done => {
                self.close(out);
                let stop = stop_to(self.stop.unwrap_or(StopReason::End));
                out.extend_from_slice(
                    b"event: message_delta\ndata: {\"delta\":{\"stop_reason\":\"",
                );
                out.extend_from_slice(stop.as_bytes());
                out.extend_from_slice(
                    b"\",\"stop_sequence\":null},\"type\":\"message_delta\",\
                      \"usage\":{\"input_tokens\":",
                );
                write_u64(out, self.usage.input);
                out.extend_from_slice(b",\"output_tokens\":");
                write_u64(out, self.usage.output);
                out.extend_from_slice(b"}}\n\n");
                write_event(out, "message_stop", br#"{"type":"message_stop"}"#);
            }
            Event::Start { .. } | Event::Usage { .. } => {}
        }
    }

    fn error_event(&mut self, err: &GwError, out: &mut BytesMut) {
        out.extend_from_slice(&err.sse_event(Dialect::Messages, 0));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dialect::decode::fast::decode_frames;

    fn decode(frames: &[&str]) -> Vec<Result<Vec<String>, ()>> {
        decode_frames(
            &mut StreamDecoder::default(),
            b"content_block_delta",
            frames,
        )
    }

    const T: &str =
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"#;
    const A: &str = r#"{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"#;

    /// The fast path and its template of the last delta read what serde reads, and leave to
    /// serde (so refuse) what serde refuses.
    #[test]
    fn deltas_read_fast_as_serde_reads_them() {
        let f = |v: &str| format!("{T}{v}}}}}");
        let a = |v: &str| format!("{A}{v}}}}}");
        let frames = [
            f(r#""a""#),
            f(r#""b\"c\u00e9""#),
            f("\"raw\ncontrol\""),
            f(r#""x","text":"y""#),
            f("5"),
            f(r#""a" , "other":[1,{"b":null}]"#),
            f(r#""\q""#),
            f(r#""\ud800""#),
            f("null"),
            a(r#""{\"k\":""#),
            a(r#""""#),
            a(r#""1}""#),
            f(r#""back""#),
            f(r#""héllo wörld, plain""#),
            f(r#""eight by\"tes then""#),
            f("\"eight by\ttes then\""),
            f(r#""after""#),
        ];
        let frames: Vec<&str> = frames.iter().map(String::as_str).collect();
        let got = decode(&frames);
        let text = |t: &str| Ok(vec![format!("Text({t:?})")]);
        let args = |t: &str| Ok(vec![format!("ToolArgs {{ index: 2, delta: {t:?} }}")]);
        assert_eq!(
            got,
            [
                text("a"),
                text("b\"cé"),
                Err(()),
                Err(()),
                Err(()),
                text("a"),
                Err(()),
                Err(()),
                Ok(vec![]),
                args("{\"k\":"),
                Ok(vec![]),
                args("1}"),
                text("back"),
                text("héllo wörld, plain"),
                text("eight by\"tes then"),
                Err(()),
                text("after"),
            ]
        );
        // Each frame alone (no template) reads the same.
        for (frame, want) in frames.iter().zip(&got) {
            assert_eq!(&decode(&[frame])[0], want, "{frame}");
        }
    }
}
