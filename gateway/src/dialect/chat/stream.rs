//! Chat streams: an upstream's chunks into neutral events ([`StreamDecoder`]), and neutral events out
//! as the client's chunks ([`StreamEncoder`]).

use std::borrow::Cow;

use bytes::BytesMut;
use serde::de::IgnoredAny;
use serde::Deserialize;

use super::{chat_id, stop_from, stop_to};
use crate::dialect::decode::fast::{member, offset, opt_str, trim, Template};
use crate::dialect::decode::upstream_stream_error;
use crate::dialect::encode::{new_id, now_secs, ClientStream};
use crate::dialect::error::GwError;
use crate::dialect::neutral::{Decoder, Event, Fragment, StopReason, Usage};
use crate::dialect::Dialect;
use crate::json::{scan_object, write_str, write_u64};
use crate::sse::SseEvent;

#[derive(Deserialize)]
struct Chunk<'a> {
    #[serde(default, borrow, deserialize_with = "crate::dialect::decode::opt_cow")]
    id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    choices: Vec<ChunkChoice<'a>>,
    #[serde(default)]
    usage: Option<ChunkUsage>,
    #[serde(default)]
    error: Option<IgnoredAny>,
}

#[derive(Deserialize)]
struct ChunkChoice<'a> {
    #[serde(default, borrow)]
    delta: Option<Delta<'a>>,
    #[serde(default, borrow, deserialize_with = "crate::dialect::decode::opt_cow")]
    finish_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(default, borrow, deserialize_with = "crate::dialect::decode::opt_cow")]
    content: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    tool_calls: Option<Vec<ToolDelta<'a>>>,
}

#[derive(Deserialize)]
struct ToolDelta<'a> {
    #[serde(default)]
    index: u64,
    #[serde(default, borrow, deserialize_with = "crate::dialect::decode::opt_cow")]
    id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    function: Option<FnDelta<'a>>,
}

#[derive(Deserialize)]
struct FnDelta<'a> {
    #[serde(default, borrow, deserialize_with = "crate::dialect::decode::opt_cow")]
    name: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "crate::dialect::decode::opt_cow")]
    arguments: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct ChunkUsage {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
}

/// What [`fast_chunk`] reads of a chunk.
struct FastChunk<'a> {
    id: Option<Cow<'a, str>>,
    text: Option<Cow<'a, str>>,
    /// Where the text's string literal is in the chunk.
    text_at: Option<(usize, usize)>,
    finish: Option<Cow<'a, str>>,
}

/// The frequent chunk read without a serde parse: no `error`, no `usage`, at most one choice,
/// whose delta carries no tool calls. `None` for any other chunk (or one not JSON): the serde
/// parse reads those, with the same result as for every chunk before.
fn fast_chunk(data: &[u8]) -> Option<FastChunk<'_>> {
    let [id, choices, usage, error] =
        scan_object(data, ["id", "choices", "usage", "error"]).ok()?;
    if error.is_some() || !matches!(member(data, usage), None | Some(b"null")) {
        return None;
    }
    let id = opt_str(member(data, id))?;
    let mut text = None;
    let mut text_at = None;
    let mut finish = None;
    if let Some(c) = member(data, choices) {
        let [b'[', inner @ .., b']'] = c else {
            return None;
        };
        let choice = trim(inner);
        if !choice.is_empty() {
            let [delta, finish_reason] = scan_object(choice, ["delta", "finish_reason"]).ok()?;
            finish = opt_str(member(choice, finish_reason))?;
            match member(choice, delta) {
                None | Some(b"null") => {}
                Some(d) => {
                    let [content, tool_calls] = scan_object(d, ["content", "tool_calls"]).ok()?;
                    if !matches!(member(d, tool_calls), None | Some(b"null")) {
                        return None;
                    }
                    text = opt_str(member(d, content))?;
                    if let (Some(_), Some((s, e))) = (&text, content) {
                        let at = offset(data, d);
                        text_at = Some((at + s, at + e));
                    }
                }
            }
        }
    }
    Some(FastChunk {
        id,
        text,
        text_at,
        finish,
    })
}

/// Chat chunks → neutral events.
#[derive(Default)]
pub struct StreamDecoder {
    started: bool,
    /// The last chunk the fast path read, around its text (see [`Template`]).
    template: Template,
}

impl Decoder for StreamDecoder {
    fn event<'a>(
        &mut self,
        ev: &'a SseEvent,
        sink: &mut dyn FnMut(Event<'a>),
    ) -> Result<(), GwError> {
        if ev.is_done_marker() {
            sink(Event::Done);
            return Ok(());
        }
        if self.started {
            if let Some(t) = self.template.matches(&ev.data) {
                if !t.is_empty() {
                    sink(Event::Text(t));
                }
                return Ok(());
            }
        }
        if let Some(f) = fast_chunk(&ev.data) {
            match f.text_at {
                Some((s, e)) if f.finish.is_none() => self.template.keep(&ev.data, s, e),
                _ => self.template.forget(),
            }
            if !self.started {
                self.started = true;
                sink(Event::Start {
                    id: f.id.unwrap_or_else(|| new_id("chatcmpl-").into()),
                    input_tokens: None,
                });
            }
            if let Some(t) = f.text.filter(|t| !t.is_empty()) {
                sink(Event::Text(Fragment::new(t)));
            }
            if let Some(r) = f.finish {
                sink(Event::Stop(stop_from(&r)));
            }
            return Ok(());
        }
        self.template.forget();
        let c: Chunk<'a> = serde_json::from_slice(&ev.data)
            .map_err(|_| GwError::bad_upstream("upstream sent a frame that is not a chat chunk"))?;
        if c.error.is_some() {
            return Err(upstream_stream_error(&ev.data));
        }
        if !self.started {
            self.started = true;
            sink(Event::Start {
                id: c.id.unwrap_or_else(|| new_id("chatcmpl-").into()),
                input_tokens: None,
            });
        }
        for ch in c.choices {
            if let Some(d) = ch.delta {
                if let Some(t) = d.content {
                    if !t.is_empty() {
                        sink(Event::Text(Fragment::new(t)));
                    }
                }
                for tc in d.tool_calls.unwrap_or_default() {
                    let (name, args) = match tc.function {
                        Some(f) => (f.name, f.arguments),
                        None => (None, None),
                    };
                    if let Some(id) = tc.id {
                        sink(Event::ToolStart {
                            index: tc.index,
                            id,
                            name: name.unwrap_or_default(),
                        });
                    }
                    if let Some(a) = args {
                        if !a.is_empty() {
                            sink(Event::ToolArgs {
                                index: tc.index,
                                delta: Fragment::new(a),
                            });
                        }
                    }
                }
            }
            if let Some(f) = ch.finish_reason {
                sink(Event::Stop(stop_from(&f)));
            }
        }
        if let Some(u) = c.usage {
            sink(Event::Usage {
                input: u.prompt_tokens,
                output: u.completion_tokens,
            });
        }
        Ok(())
    }
}

/// Neutral events → chat chunks. Every chunk starts with the same id/created/model header, so
/// it is rendered once and each frame is that header, the delta and a constant tail.
pub struct StreamEncoder {
    alias: String,
    /// `{"id":…,"object":"chat.completion.chunk","created":…,"model":…,` once started.
    head: Vec<u8>,
    include_usage: bool,
    usage: Usage,
    /// Upstream tool index → chat tool index, in order of appearance.
    tools: Vec<u64>,
    stop: Option<StopReason>,
}

impl StreamEncoder {
    pub fn new(alias: String, include_usage: bool) -> Self {
        StreamEncoder {
            alias,
            head: Vec::new(),
            include_usage,
            usage: Usage::default(),
            tools: Vec::new(),
            stop: None,
        }
    }

    /// The header every chunk starts with.
    fn render_head(&mut self, id: &str) {
        let mut h = BytesMut::with_capacity(128);
        h.extend_from_slice(b"{\"id\":");
        write_str(&mut h, &chat_id(id));
        h.extend_from_slice(b",\"object\":\"chat.completion.chunk\",\"created\":");
        write_u64(&mut h, now_secs());
        h.extend_from_slice(b",\"model\":");
        write_str(&mut h, &self.alias);
        h.extend_from_slice(b",");
        self.head = h.to_vec();
    }

    /// `data: HEAD"choices":[{"index":0,"delta":` … then the caller's delta, then the tail.
    fn open(&mut self, out: &mut BytesMut) {
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(&self.head);
        out.extend_from_slice(b"\"choices\":[{\"index\":0,\"delta\":");
    }

    fn close(out: &mut BytesMut, finish: Option<&str>) {
        match finish {
            None => out.extend_from_slice(b",\"logprobs\":null,\"finish_reason\":null}]}\n\n"),
            Some(f) => {
                out.extend_from_slice(b",\"logprobs\":null,\"finish_reason\":\"");
                out.extend_from_slice(f.as_bytes());
                out.extend_from_slice(b"\"}]}\n\n");
            }
        }
    }
}

impl ClientStream for StreamEncoder {
    const ID_PREFIX: &'static str = "chatcmpl-";

    fn usage(&mut self) -> &mut Usage {
        &mut self.usage
    }

    fn started(&self) -> bool {
        !self.head.is_empty()
    }

    /// The header, and the first chunk: the assistant's role.
    fn start(&mut self, id: &str, out: &mut BytesMut) {
        self.render_head(id);
        self.open(out);
        out.extend_from_slice(b"{\"role\":\"assistant\",\"content\":\"\"}");
        Self::close(out, None);
    }

    fn content(&mut self, ev: Event<'_>, out: &mut BytesMut) {
        match ev {
            Event::Text(t) => {
                self.open(out);
                out.extend_from_slice(b"{\"content\":");
                t.write(out);
                out.extend_from_slice(b"}");
                Self::close(out, None);
            }
            Event::ToolStart { index, id, name } => {
                let i = self.tools.len() as u64;
                self.tools.push(index);
                self.open(out);
                out.extend_from_slice(b"{\"tool_calls\":[{\"index\":");
                write_u64(out, i);
                out.extend_from_slice(b",\"id\":");
                write_str(out, &id);
                out.extend_from_slice(b",\"type\":\"function\",\"function\":{\"name\":");
                write_str(out, &name);
                out.extend_from_slice(b",\"arguments\":\"\"}}]}");
                Self::close(out, None);
            }
            Event::ToolArgs { index, delta } => {
                let i = self
                    .tools
                    .iter()
                    .position(|&t| t == index)
                    .unwrap_or(self.tools.len().saturating_sub(1));
                self.open(out);
                out.extend_from_slice(b"{\"tool_calls\":[{\"index\":");
                write_u64(out, i as u64);
                out.extend_from_slice(b",\"function\":{\"arguments\":");
                delta.write(out);
                out.extend_from_slice(b"}}]}");
                Self::close(out, None);
            }
            Event::Stop(s) => {
                if self.stop.is_none() {
                    self.stop = Some(s);
                    self.open(out);
                    out.extend_from_slice(b"{}");
                    Self::close(out, Some(stop_to(s)));
                }
            }
            Event::Done => {
                if self.stop.is_none() {
                    self.open(out);
                    out.extend_from_slice(b"{}");
                    Self::close(out, Some("stop"));
                }
                if self.include_usage {
                    let u = self.usage;
                    out.extend_from_slice(b"data: ");
                    out.extend_from_slice(&self.head);
                    out.extend_from_slice(b"\"choices\":[],\"usage\":{\"prompt_tokens\":");
                    write_u64(out, u.input);
                    out.extend_from_slice(b",\"completion_tokens\":");
                    write_u64(out, u.output);
                    out.extend_from_slice(b",\"total_tokens\":");
                    write_u64(out, u.input + u.output);
                    out.extend_from_slice(b"}}\n\n");
                }
                out.extend_from_slice(b"data: [DONE]\n\n");
            }
            Event::Start { .. } | Event::Usage { .. } => {}
        }
    }

    fn error_event(&mut self, err: &GwError, out: &mut BytesMut) {
        out.extend_from_slice(&err.sse_event(Dialect::Chat, 0));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dialect::decode::fast::decode_frames;

    fn decode(frames: &[&str]) -> Vec<Result<Vec<String>, ()>> {
        decode_frames(&mut StreamDecoder::default(), b"", frames)
    }

    const P: &str = r#"{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"#;
    const Q: &str = r#"},"logprobs":null,"finish_reason":null}]}"#;

    /// The fast path and its template of the last chunk read what serde reads, and leave to
    /// serde (so refuse) what serde refuses.
    #[test]
    fn chunks_read_fast_as_serde_reads_them() {
        let f = |v: &str| format!("{P}{v}{Q}");
        let frames = [
            f(r#""a""#),
            f(r#""b\"c\u00e9""#),
            f("\"raw\tcontrol\""),
            f(r#""x","content":"y""#),
            f("5"),
            f(r#""""#),
            f(
                r#""a","tool_calls":[{"index":0,"id":"t","function":{"name":"n","arguments":"{}"}}]"#,
            ),
            f(r#""\q""#),
            f("null"),
            r#"{"id":"c1","choices":[{"index":0,"delta":{},"finish_reason":"length"}]}"#.into(),
            r#"{"id":"c1","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4}}"#.into(),
            r#"{"id":"c1","choices":[],"id":"c2"}"#.into(),
            r#"{"error":{"message":"m"}}"#.into(),
            f(r#""back""#),
        ];
        let frames: Vec<&str> = frames.iter().map(String::as_str).collect();
        let got = decode(&frames);
        let text = |t: &str| Ok(vec![format!("Text({t:?})")]);
        let start = r#"Start { id: "c1", input_tokens: None }"#.to_string();
        assert_eq!(got[0], Ok(vec![start.clone(), r#"Text("a")"#.into()]));
        assert_eq!(
            &got[1..],
            [
                text("b\"cé"),
                Err(()),
                Err(()),
                Err(()),
                Ok(vec![]),
                Ok(vec![
                    r#"Text("a")"#.into(),
                    r#"ToolStart { index: 0, id: "t", name: "n" }"#.into(),
                    r#"ToolArgs { index: 0, delta: "{}" }"#.into()
                ]),
                Err(()),
                Ok(vec![]),
                Ok(vec!["Stop(MaxTokens)".into()]),
                Ok(vec!["Usage { input: Some(3), output: Some(4) }".into()]),
                Err(()),
                Err(()),
                text("back"),
            ]
        );
        // Each frame alone (no template) reads the same, but for the stream's start.
        for (frame, want) in frames.iter().zip(&got).skip(1) {
            let mut alone = decode(&[frame]).remove(0);
            if let Ok(events) = &mut alone {
                assert_eq!(events.remove(0), start, "{frame}");
            }
            assert_eq!(&alone, want, "{frame}");
        }
    }
}
