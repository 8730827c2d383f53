//! The native route's stream: upstream frames go to the client as they are, except that the model
//! name is replaced by the alias. Frames are still checked to be JSON and the terminal frame is
//! tracked, so that a broken upstream never looks like a finished stream to the client.

use bytes::BytesMut;
use serde::de::IgnoredAny;

use crate::dialect::error::GwError;
use crate::dialect::transform::StreamTransform;
use crate::dialect::Dialect;
use crate::sse::SseEvent;

#[derive(serde::Deserialize)]
struct Probe {
    #[serde(default)]
    error: Option<IgnoredAny>,
}

pub struct NativeStream {
    dialect: Dialect,
    finder: memchr::memmem::Finder<'static>,
    to: bytes::Bytes,
    events: u64,
    finished: bool,
}

impl NativeStream {
    pub fn new(dialect: Dialect, alias_json: bytes::Bytes) -> Self {
        NativeStream {
            dialect,
            finder: memchr::memmem::Finder::new(b"\"model\":"),
            to: alias_json,
            events: 0,
            finished: false,
        }
    }
}

impl StreamTransform for NativeStream {
    fn on_event(&mut self, ev: &SseEvent, out: &mut BytesMut) -> Result<(), GwError> {
        if self.finished {
            return Ok(());
        }
        if self.dialect == Dialect::Chat && ev.is_done_marker() {
            self.finished = true;
            out.extend_from_slice(b"data: [DONE]\n\n");
            return Ok(());
        }
        // Every frame is checked to be JSON (a broken frame must not reach the client as if it
        // were fine); for chat the same pass notices an in-band error object, which ends the
        // stream as the upstream's own error event.
        let probe: Probe = serde_json::from_slice(&ev.data)
            .map_err(|_| GwError::bad_upstream("upstream sent a frame that is not JSON"))?;
        match self.dialect {
            Dialect::Chat => {
                if probe.error.is_some() {
                    self.finished = true;
                }
            }
            Dialect::Messages => {
                if matches!(&ev.event[..], b"message_stop" | b"error") {
                    self.finished = true;
                }
            }
            Dialect::Responses => {
                if matches!(
                    &ev.event[..],
                    b"response.completed" | b"response.failed" | b"response.incomplete" | b"error"
                ) {
                    self.finished = true;
                }
            }
        }
        out.reserve(ev.event.len() + ev.data.len() + 16);
        if !ev.event.is_empty() {
            out.extend_from_slice(b"event: ");
            out.extend_from_slice(&ev.event);
            out.extend_from_slice(b"\n");
        }
        out.extend_from_slice(b"data: ");
        crate::json::copy_renaming_model(out, &ev.data, &self.finder, &self.to);
        out.extend_from_slice(b"\n\n");
        self.events += 1;
        Ok(())
    }

    fn on_end(&mut self, _out: &mut BytesMut) -> Result<(), GwError> {
        if self.finished {
            Ok(())
        } else {
            Err(GwError::bad_upstream(
                "upstream closed the stream before its final event",
            ))
        }
    }

    fn on_error(&mut self, err: &GwError, out: &mut BytesMut) {
        out.extend_from_slice(&err.sse_event(self.dialect, self.events));
    }
}
