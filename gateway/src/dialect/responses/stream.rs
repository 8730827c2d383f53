//! Responses streams: neutral events out as the client's Responses events, with a monotonic
//! `sequence_number`.

use bytes::BytesMut;

use super::{resp_id, split_name};
use crate::dialect::encode::{new_id, now_secs, serde_str as put_str, ClientStream};
use crate::dialect::error::GwError;
use crate::dialect::neutral::{Event, Fragment, StopReason, Usage};
use crate::dialect::Dialect;
use crate::json::{write_str, write_str_body, write_u64};

/// The open output item. Its text (or arguments) so far is kept as the inside of a JSON string
/// literal, escaped as [`put_str`] escapes it: the deltas' escapes, copied from the frames they
/// were written into, so that the closing events copy it instead of escaping it again.
enum Item {
    Text {
        id: String,
        text: Vec<u8>,
    },
    Call {
        id: String,
        call_id: String,
        name: String,
        arguments: Vec<u8>,
    },
}

/// What the open item's text starts with room for: most answers' text, without growing.
const TEXT_ROOM: usize = 256;

/// Appends to `acc` the delta `raw`, whose escapes as [`write_str_body`] writes them are
/// `escaped`: the same bytes as [`put_str`] would write, but for backspace and form feed, which
/// [`put_str`] escapes as serde does (`\b`, `\f`); a delta with either is escaped again that way.
fn keep_escaped(acc: &mut Vec<u8>, escaped: &[u8], raw: &str) {
    if escaped.len() != raw.len() && raw.bytes().any(|b| b == 0x08 || b == 0x0c) {
        let mut lit = BytesMut::new();
        put_str(&mut lit, raw);
        acc.extend_from_slice(&lit[1..lit.len() - 1]);
    } else {
        acc.extend_from_slice(escaped);
    }
}

/// A JSON string literal whose inside, escaped, is `inner`.
fn put_lit(out: &mut BytesMut, inner: &[u8]) {
    out.extend_from_slice(b"\"");
    out.extend_from_slice(inner);
    out.extend_from_slice(b"\"");
}

/// Neutral events → Responses events, with a monotonic `sequence_number`.
///
/// The events other than the deltas are written directly, as serde_json writes the
/// `serde_json::Value` the complete answer builds (members sorted by name, strings escaped as
/// serde escapes them: [`put_str`]), so that a stream's opening and closing events cost no DOM.
pub struct StreamEncoder {
    alias: String,
    id: String,
    created: u64,
    seq: u64,
    /// The finished output items, as JSON, comma separated.
    items: BytesMut,
    /// How many items `items` holds.
    n_items: usize,
    open: Option<Item>,
    usage: Usage,
    stop: Option<StopReason>,
    started: bool,
    /// Namespaces whose tools the request flattened (their calls go back under them).
    namespaces: Vec<String>,
    /// The open item's delta head (empty until its first delta).
    delta_head: DeltaHead,
}

/// `event: NAME\ndata: {`
fn head(out: &mut BytesMut, name: &str) {
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\ndata: {");
}

/// `event: NAME\ndata: {"content_index":0,"item_id":ID,"output_index":N`, the head of the
/// events about a message's text part.
fn part_head(out: &mut BytesMut, name: &str, item_id: &str, output_index: usize) {
    head(out, name);
    out.extend_from_slice(b"\"content_index\":0,\"item_id\":");
    put_str(out, item_id);
    out.extend_from_slice(b",\"output_index\":");
    write_u64(out, output_index as u64);
}

/// `,"sequence_number":SEQ,"type":"NAME"}\n\n`, the last members of every event but one.
fn tail(out: &mut BytesMut, seq: u64, name: &str) {
    out.extend_from_slice(b",\"sequence_number\":");
    write_u64(out, seq);
    out.extend_from_slice(b",\"type\":\"");
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\"}\n\n");
}

/// A `message` output item.
/// `text`, when there is one, is the inside of its string literal, escaped.
fn message_item(out: &mut BytesMut, id: &str, status: &str, text: Option<&[u8]>) {
    out.extend_from_slice(b"{\"content\":[");
    if let Some(t) = text {
        out.extend_from_slice(b"{\"annotations\":[],\"text\":");
        put_lit(out, t);
        out.extend_from_slice(b",\"type\":\"output_text\"}");
    }
    out.extend_from_slice(b"],\"id\":");
    put_str(out, id);
    out.extend_from_slice(b",\"role\":\"assistant\",\"status\":");
    put_str(out, status);
    out.extend_from_slice(b",\"type\":\"message\"}");
}

/// A `function_call` output item ([`super::call_item`] written directly); `arguments` is the
/// inside of their string literal, escaped.
fn call_item(
    out: &mut BytesMut,
    id: &str,
    call_id: &str,
    name: &str,
    arguments: &[u8],
    status: &str,
    namespaces: &[String],
) {
    out.extend_from_slice(b"{\"arguments\":");
    put_lit(out, arguments);
    out.extend_from_slice(b",\"call_id\":");
    put_str(out, call_id);
    out.extend_from_slice(b",\"id\":");
    put_str(out, id);
    out.extend_from_slice(b",\"name\":");
    match split_name(name, namespaces) {
        Some((ns, name)) => {
            put_str(out, name);
            out.extend_from_slice(b",\"namespace\":");
            put_str(out, ns);
        }
        None => put_str(out, name),
    }
    out.extend_from_slice(b",\"status\":");
    put_str(out, status);
    out.extend_from_slice(b",\"type\":\"function_call\"}");
}

impl StreamEncoder {
    pub fn new(alias: String, namespaces: Vec<String>) -> Self {
        StreamEncoder {
            alias,
            id: String::new(),
            created: now_secs(),
            seq: 0,
            items: BytesMut::new(),
            n_items: 0,
            open: None,
            usage: Usage::default(),
            stop: None,
            started: false,
            namespaces,
            delta_head: DeltaHead::default(),
        }
    }

    fn next_seq(&mut self) -> u64 {
        let s = self.seq;
        self.seq += 1;
        s
    }

    /// An event whose data is `{"response":OBJECT,…}` ([`super::response_object`] written
    /// directly); `usage` only on the last one.
    fn response_event(&mut self, out: &mut BytesMut, name: &str, status: &str, end: bool) {
        let seq = self.next_seq();
        head(out, name);
        out.extend_from_slice(b"\"response\":{\"created_at\":");
        write_u64(out, self.created);
        out.extend_from_slice(b",\"error\":null,\"id\":");
        put_str(out, &self.id);
        out.extend_from_slice(b",\"incomplete_details\":");
        match self.stop {
            Some(StopReason::MaxTokens) if end => {
                out.extend_from_slice(b"{\"reason\":\"max_output_tokens\"}")
            }
            Some(StopReason::ContentFilter) if end => {
                out.extend_from_slice(b"{\"reason\":\"content_filter\"}")
            }
            _ => out.extend_from_slice(b"null"),
        }
        out.extend_from_slice(
            b",\"instructions\":null,\"max_output_tokens\":null,\"metadata\":{},\"model\":",
        );
        put_str(out, &self.alias);
        out.extend_from_slice(b",\"object\":\"response\",\"output\":[");
        out.extend_from_slice(&self.items);
        out.extend_from_slice(
            b"],\"parallel_tool_calls\":true,\"previous_response_id\":null,\
              \"reasoning\":{\"effort\":null,\"summary\":null},\"status\":",
        );
        put_str(out, status);
        out.extend_from_slice(
            b",\"store\":false,\"temperature\":null,\"text\":{\"format\":{\"type\":\"text\"}},\
              \"tool_choice\":\"auto\",\"tools\":[],\"top_p\":null,\"truncation\":\"disabled\",\
              \"usage\":",
        );
        if end {
            let u = self.usage;
            out.extend_from_slice(b"{\"input_tokens\":");
            write_u64(out, u.input);
            out.extend_from_slice(
                b",\"input_tokens_details\":{\"cached_tokens\":0},\"output_tokens\":",
            );
            write_u64(out, u.output);
            out.extend_from_slice(
                b",\"output_tokens_details\":{\"reasoning_tokens\":0},\"total_tokens\":",
            );
            write_u64(out, u.input + u.output);
            out.extend_from_slice(b"}");
        } else {
            out.extend_from_slice(b"null");
        }
        out.extend_from_slice(b"}");
        tail(out, seq, name);
    }

    /// `response.output_item.done` of the item just written at the end of `self.items`
    /// (from `from` on), at `output_index`.
    fn item_done(&mut self, out: &mut BytesMut, from: usize, output_index: usize) {
        let name = "response.output_item.done";
        let seq = self.next_seq();
        head(out, name);
        out.extend_from_slice(b"\"item\":");
        out.extend_from_slice(&self.items[from..]);
        out.extend_from_slice(b",\"output_index\":");
        write_u64(out, output_index as u64);
        tail(out, seq, name);
        self.n_items += 1;
    }

    /// Where the next item goes in `self.items`, its comma written.
    fn item_start(&mut self) -> usize {
        if self.n_items > 0 {
            self.items.extend_from_slice(b",");
        }
        self.items.len()
    }

    fn close(&mut self, out: &mut BytesMut) {
        self.delta_head.0.clear();
        let output_index = self.n_items;
        match self.open.take() {
            None => {}
            Some(Item::Text { id, text }) => {
                let seq = self.next_seq();
                part_head(out, "response.output_text.done", &id, output_index);
                out.extend_from_slice(b",\"sequence_number\":");
                write_u64(out, seq);
                out.extend_from_slice(b",\"text\":");
                put_lit(out, &text);
                out.extend_from_slice(b",\"type\":\"response.output_text.done\"}\n\n");

                let name = "response.content_part.done";
                let seq = self.next_seq();
                part_head(out, name, &id, output_index);
                out.extend_from_slice(b",\"part\":{\"annotations\":[],\"text\":");
                put_lit(out, &text);
                out.extend_from_slice(b",\"type\":\"output_text\"}");
                tail(out, seq, name);

                let from = self.item_start();
                message_item(&mut self.items, &id, "completed", Some(&text));
                self.item_done(out, from, output_index);
            }
            Some(Item::Call {
                id,
                call_id,
                name,
                arguments,
            }) => {
                let ev = "response.function_call_arguments.done";
                let seq = self.next_seq();
                head(out, ev);
                out.extend_from_slice(b"\"arguments\":");
                put_lit(out, &arguments);
                out.extend_from_slice(b",\"item_id\":");
                put_str(out, &id);
                out.extend_from_slice(b",\"output_index\":");
                write_u64(out, output_index as u64);
                tail(out, seq, ev);

                let from = self.item_start();
                call_item(
                    &mut self.items,
                    &id,
                    &call_id,
                    &name,
                    &arguments,
                    "completed",
                    &self.namespaces,
                );
                self.item_done(out, from, output_index);
            }
        }
    }
}

/// The part of a delta event before its delta, the same for every delta of an item: rendered
/// once when the item opens ([`DeltaHead::render`]), copied per delta. Text deltas (`text`) also
/// carry their content index (here) and (empty) logprobs (after the delta); function-call argument
/// deltas do not.
#[derive(Default)]
struct DeltaHead(Vec<u8>);

impl DeltaHead {
    fn render(&mut self, event: &str, item_id: &str, output_index: usize, text: bool) {
        let h = &mut self.0;
        h.clear();
        h.extend_from_slice(b"event: ");
        h.extend_from_slice(event.as_bytes());
        h.extend_from_slice(b"\ndata: {\"type\":\"");
        h.extend_from_slice(event.as_bytes());
        h.extend_from_slice(b"\",\"item_id\":");
        write_str(h, item_id);
        h.extend_from_slice(b",\"output_index\":");
        write_u64(h, output_index as u64);
        if text {
            h.extend_from_slice(b",\"content_index\":0");
        }
        h.extend_from_slice(b",\"delta\":\"");
    }

    /// A delta event, the frequent one: the head (with the delta's opening quote), the delta,
    /// the rest; and the delta's escapes appended to `acc`, the open item's text so far. A plain
    /// delta's bytes are its escapes, as [`put_str`] writes them too.
    fn frame(&self, out: &mut BytesMut, text: bool, delta: &Fragment, seq: u64, acc: &mut Vec<u8>) {
        out.extend_from_slice(&self.0);
        if delta.plain {
            out.extend_from_slice(delta.as_bytes());
            acc.extend_from_slice(delta.as_bytes());
        } else {
            let at = out.len();
            write_str_body(out, delta);
            keep_escaped(acc, &out[at..], delta);
        }
        if text {
            out.extend_from_slice(b"\",\"logprobs\":[],\"sequence_number\":");
        } else {
            out.extend_from_slice(b"\",\"sequence_number\":");
        }
        write_u64(out, seq);
        out.extend_from_slice(b"}\n\n");
    }
}

impl ClientStream for StreamEncoder {
    const ID_PREFIX: &'static str = "resp_";

    fn usage(&mut self) -> &mut Usage {
        &mut self.usage
    }

    fn started(&self) -> bool {
        self.started
    }

    fn start(&mut self, id: &str, out: &mut BytesMut) {
        self.started = true;
        self.id = resp_id(id);
        self.response_event(out, "response.created", "in_progress", false);
        self.response_event(out, "response.in_progress", "in_progress", false);
    }

    fn content(&mut self, ev: Event<'_>, out: &mut BytesMut) {
        match ev {
            Event::Text(t) => {
                if !matches!(self.open, Some(Item::Text { .. })) {
                    self.close(out);
                    let output_index = self.n_items as u64;
                    let id = new_id("msg_");
                    let name = "response.output_item.added";
                    let seq = self.next_seq();
                    head(out, name);
                    out.extend_from_slice(b"\"item\":");
                    message_item(out, &id, "in_progress", None);
                    out.extend_from_slice(b",\"output_index\":");
                    write_u64(out, output_index);
                    tail(out, seq, name);
                    let name = "response.content_part.added";
                    let seq = self.next_seq();
                    part_head(out, name, &id, output_index as usize);
                    out.extend_from_slice(
                        b",\"part\":{\"annotations\":[],\"text\":\"\",\"type\":\"output_text\"}",
                    );
                    tail(out, seq, name);
                    self.open = Some(Item::Text {
                        id,
                        text: Vec::with_capacity(TEXT_ROOM),
                    });
                }
                let output_index = self.n_items;
                let seq = self.next_seq();
                let Some(Item::Text { id, text }) = &mut self.open else {
                    unreachable!("a text item was just opened")
                };
                if self.delta_head.0.is_empty() {
                    let event = "response.output_text.delta";
                    self.delta_head.render(event, id, output_index, true);
                }
                self.delta_head.frame(out, true, &t, seq, text);
            }
            Event::ToolStart { index: _, id, name } => {
                self.close(out);
                let output_index = self.n_items;
                let item_id = new_id("fc_");
                let ev = "response.output_item.added";
                let seq = self.next_seq();
                head(out, ev);
                out.extend_from_slice(b"\"item\":");
                call_item(
                    out,
                    &item_id,
                    &id,
                    &name,
                    b"",
                    "in_progress",
                    &self.namespaces,
                );
                out.extend_from_slice(b",\"output_index\":");
                write_u64(out, output_index as u64);
                tail(out, seq, ev);
                self.open = Some(Item::Call {
                    id: item_id,
                    call_id: id.into_owned(),
                    name: name.into_owned(),
                    arguments: Vec::new(),
                });
            }
            Event::ToolArgs { index: _, delta } => {
                let output_index = self.n_items;
                // Arguments always belong to the open call: upstreams that interleave parallel
                // calls are not representable in this event order.
                if !matches!(self.open, Some(Item::Call { .. })) {
                    return;
                }
                let seq = self.next_seq();
                let Some(Item::Call { id, arguments, .. }) = &mut self.open else {
                    return;
                };
                let event = "response.function_call_arguments.delta";
                if self.delta_head.0.is_empty() {
                    self.delta_head.render(event, id, output_index, false);
                }
                self.delta_head.frame(out, false, &delta, seq, arguments);
            }
            Event::Stop(s) => self.stop = Some(s),
            Event::Done => {
                self.close(out);
                let (name, status) = match self.stop {
                    Some(StopReason::MaxTokens | StopReason::ContentFilter) => {
                        ("response.incomplete", "incomplete")
                    }
                    _ => ("response.completed", "completed"),
                };
                self.response_event(out, name, status, true);
            }
            Event::Start { .. } | Event::Usage { .. } => {}
        }
    }

    fn error_event(&mut self, err: &GwError, out: &mut BytesMut) {
        let seq = self.seq;
        self.seq += 1;
        out.extend_from_slice(&err.sse_event(Dialect::Responses, seq));
    }
}
