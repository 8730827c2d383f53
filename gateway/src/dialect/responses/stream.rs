//! Responses streams: neutral events out as the client's Responses events, with a monotonic
//! `sequence_number`.

use bytes::BytesMut;
use serde_json::{json, Value};

use super::{call_item, message_item, resp_id, response_object, status_of, usage_json};
use crate::dialect::encode::{new_id, now_secs};
use crate::dialect::error::GwError;
use crate::dialect::neutral::{Encoder, Event, StopReason, Usage};
use crate::dialect::Dialect;
use crate::json::{write_str, write_u64};
use crate::sse::write_event;

enum Item {
    Text {
        id: String,
        text: String,
    },
    Call {
        id: String,
        call_id: String,
        name: String,
        arguments: String,
    },
}

/// Neutral events → Responses events, with a monotonic `sequence_number`.
pub struct StreamEncoder {
    alias: String,
    id: String,
    created: u64,
    seq: u64,
    items: Vec<Value>,
    open: Option<Item>,
    usage: Usage,
    stop: Option<StopReason>,
    started: bool,
    /// Namespaces whose tools the request flattened (their calls go back under them).
    namespaces: Vec<String>,
}

impl StreamEncoder {
    pub fn new(alias: String, namespaces: Vec<String>) -> Self {
        StreamEncoder {
            alias,
            id: String::new(),
            created: now_secs(),
            seq: 0,
            items: Vec::new(),
            open: None,
            usage: Usage::default(),
            stop: None,
            started: false,
            namespaces,
        }
    }

    fn next_seq(&mut self) -> u64 {
        let s = self.seq;
        self.seq += 1;
        s
    }

    fn emit(&mut self, out: &mut BytesMut, name: &str, mut data: Value) {
        data["type"] = name.into();
        data["sequence_number"] = self.next_seq().into();
        write_event(out, name, data.to_string().as_bytes());
    }

    fn object(&self, status: &str, incomplete: Value, usage: Value) -> Value {
        response_object(
            &self.id,
            self.created,
            &self.alias,
            status,
            incomplete,
            self.items.clone(),
            usage,
        )
    }

    fn start(&mut self, id: &str, out: &mut BytesMut) {
        self.started = true;
        self.id = resp_id(id);
        let obj = self.object("in_progress", Value::Null, Value::Null);
        self.emit(out, "response.created", json!({ "response": obj }));
        self.emit(out, "response.in_progress", json!({ "response": obj }));
    }

    fn close(&mut self, out: &mut BytesMut) {
        let output_index = self.items.len();
        match self.open.take() {
            None => {}
            Some(Item::Text { id, text }) => {
                let part = json!({"type": "output_text", "text": text, "annotations": []});
                self.emit(
                    out,
                    "response.output_text.done",
                    json!({"item_id": id, "output_index": output_index, "content_index": 0, "text": text}),
                );
                self.emit(
                    out,
                    "response.content_part.done",
                    json!({"item_id": id, "output_index": output_index, "content_index": 0, "part": part}),
                );
                let item = message_item(&id, "completed", &text);
                self.emit(
                    out,
                    "response.output_item.done",
                    json!({"output_index": output_index, "item": item}),
                );
                self.items.push(item);
            }
            Some(Item::Call {
                id,
                call_id,
                name,
                arguments,
                ..
            }) => {
                self.emit(
                    out,
                    "response.function_call_arguments.done",
                    json!({"item_id": id, "output_index": output_index, "arguments": arguments}),
                );
                let item = call_item(
                    &id,
                    &call_id,
                    &name,
                    &arguments,
                    "completed",
                    &self.namespaces,
                );
                self.emit(
                    out,
                    "response.output_item.done",
                    json!({"output_index": output_index, "item": item}),
                );
                self.items.push(item);
            }
        }
    }
}

/// A delta event, the frequent one, written without building a DOM. Text deltas (`text`) also
/// carry their content index and (empty) logprobs; function-call argument deltas do not.
fn delta_frame(
    out: &mut BytesMut,
    event: &str,
    item_id: &str,
    output_index: usize,
    text: bool,
    delta: &str,
    seq: u64,
) {
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(event.as_bytes());
    out.extend_from_slice(b"\ndata: {\"type\":\"");
    out.extend_from_slice(event.as_bytes());
    out.extend_from_slice(b"\",\"item_id\":");
    write_str(out, item_id);
    out.extend_from_slice(b",\"output_index\":");
    write_u64(out, output_index as u64);
    if text {
        out.extend_from_slice(b",\"content_index\":0");
    }
    out.extend_from_slice(b",\"delta\":");
    write_str(out, delta);
    if text {
        out.extend_from_slice(b",\"logprobs\":[]");
    }
    out.extend_from_slice(b",\"sequence_number\":");
    write_u64(out, seq);
    out.extend_from_slice(b"}\n\n");
}

impl Encoder for StreamEncoder {
    fn event(&mut self, ev: Event<'_>, out: &mut BytesMut) {
        match ev {
            Event::Start { id, input_tokens } => {
                self.usage.update(input_tokens, None);
                self.start(&id, out);
            }
            Event::Text(t) => {
                let output_index = self.items.len();
                if !matches!(self.open, Some(Item::Text { .. })) {
                    self.close(out);
                    let output_index = self.items.len();
                    let id = new_id("msg_");
                    self.emit(
                        out,
                        "response.output_item.added",
                        json!({"output_index": output_index, "item": {
                            "id": id, "type": "message", "status": "in_progress",
                            "role": "assistant", "content": []}}),
                    );
                    self.emit(
                        out,
                        "response.content_part.added",
                        json!({"item_id": id, "output_index": output_index, "content_index": 0,
                            "part": {"type": "output_text", "text": "", "annotations": []}}),
                    );
                    self.open = Some(Item::Text {
                        id,
                        text: String::new(),
                    });
                }
                let output_index = output_index.max(self.items.len());
                let seq = self.next_seq();
                let Some(Item::Text { id, text }) = &mut self.open else {
                    unreachable!("a text item was just opened")
                };
                text.push_str(&t);
                delta_frame(
                    out,
                    "response.output_text.delta",
                    id,
                    output_index,
                    true,
                    &t,
                    seq,
                );
            }
            Event::ToolStart { index: _, id, name } => {
                self.close(out);
                let output_index = self.items.len();
                let item_id = new_id("fc_");
                self.emit(
                    out,
                    "response.output_item.added",
                    json!({"output_index": output_index,
                        "item": call_item(&item_id, &id, &name, "", "in_progress", &self.namespaces)}),
                );
                self.open = Some(Item::Call {
                    id: item_id,
                    call_id: id.into_owned(),
                    name: name.into_owned(),
                    arguments: String::new(),
                });
            }
            Event::ToolArgs { index: _, delta } => {
                let output_index = self.items.len();
                // Arguments always belong to the open call: upstreams that interleave parallel
                // calls are not representable in this event order.
                if !matches!(self.open, Some(Item::Call { .. })) {
                    return;
                }
                let seq = self.next_seq();
                let Some(Item::Call { id, arguments, .. }) = &mut self.open else {
                    return;
                };
                arguments.push_str(&delta);
                let event = "response.function_call_arguments.delta";
                delta_frame(out, event, id, output_index, false, &delta, seq);
            }
            Event::Stop(s) => self.stop = Some(s),
            Event::Usage { input, output } => self.usage.update(input, output),
            Event::Done => {
                if !self.started {
                    self.start(&new_id("resp_"), out);
                }
                self.close(out);
                let (status, incomplete) = status_of(self.stop.unwrap_or(StopReason::End));
                let obj = self.object(status, incomplete, usage_json(self.usage));
                let name = if status == "completed" {
                    "response.completed"
                } else {
                    "response.incomplete"
                };
                self.emit(out, name, json!({ "response": obj }));
            }
        }
    }

    fn error(&mut self, err: &GwError, out: &mut BytesMut) {
        let seq = self.seq;
        self.seq += 1;
        out.extend_from_slice(&err.sse_event(Dialect::Responses, seq));
    }
}
