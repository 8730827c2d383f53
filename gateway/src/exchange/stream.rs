//! A streamed answer's part of the request's life: the wrapper around the stream transform that
//! times the first content event, collects the usage from the upstream events and finishes the
//! request when the stream ends or the client goes away (the body is dropped).

use std::time::Instant;

use bytes::BytesMut;

use super::facts::Facts;
use super::{finish, Record};
use crate::dialect::error::GwError;
use crate::dialect::event_carries_usage;
use crate::dialect::transform::StreamTransform;
use crate::json::usage::scan_usage;
use crate::sse::SseEvent;

impl Record {
    /// For a streaming response: moves the record into a wrapper around the stream transform.
    /// The line is written when the stream ends, with the usage seen in the upstream events.
    pub fn track_stream(&mut self, inner: Box<dyn StreamTransform>) -> Box<dyn StreamTransform> {
        match self.inner.take() {
            Some(mut rec) => {
                rec.status = 200;
                rec.stream = true;
                Box::new(Tracked {
                    inner,
                    rec: Some(rec),
                    delta: memchr::memmem::Finder::new(b"delta"),
                    usage_key: memchr::memmem::Finder::new(b"\"usage\":"),
                })
            }
            None => inner,
        }
    }
}

/// Wraps a stream transform to time the first content event, collect usage from the upstream
/// events and finish the record when the stream is dropped.
struct Tracked {
    inner: Box<dyn StreamTransform>,
    rec: Option<Facts>,
    delta: memchr::memmem::Finder<'static>,
    usage_key: memchr::memmem::Finder<'static>,
}

impl StreamTransform for Tracked {
    fn on_event(&mut self, ev: &SseEvent, out: &mut BytesMut) -> Result<(), GwError> {
        if let Some(r) = self.rec.as_mut() {
            // Named events (Anthropic Messages, OpenAI Responses upstreams) say by their name
            // whether they are content or carry usage, which spares a search of every frame;
            // chat completions frames have no name and are searched.
            let named = !ev.event.is_empty();
            if r.first_token.is_none() {
                let hay = if named { &ev.event } else { &ev.data };
                if self.delta.find(hay).is_some() {
                    r.first_token = Some(Instant::now());
                }
            }
            if let Some(t) = &mut r.trace {
                t.saw(&ev.data);
            }
        }
        let res = self.inner.on_event(ev, out);
        if let Some(r) = self.rec.as_mut() {
            // After the transform, whose check of a native frame may already know whether it
            // carries usage (`last_usage`), which spares the search.
            let usage = if !ev.event.is_empty() {
                event_carries_usage(&ev.event)
            } else {
                match self.inner.last_usage() {
                    Some(known) => known,
                    None => self.usage_key.find(&ev.data).is_some(),
                }
            };
            if usage {
                if let Some(u) = scan_usage(&ev.data) {
                    r.usage.merge(u);
                }
            }
            if let Err(e) = &res {
                r.stream_error = Some(e.message.chars().take(200).collect());
            }
        }
        res
    }

    fn on_end(&mut self, out: &mut BytesMut) -> Result<(), GwError> {
        if let Some(r) = self.rec.as_mut() {
            r.upstream_end = Some(Instant::now());
        }
        let res = self.inner.on_end(out);
        if let (Err(e), Some(r)) = (&res, self.rec.as_mut()) {
            r.stream_error = Some(e.message.chars().take(200).collect());
        }
        res
    }

    fn on_error(&mut self, err: &GwError, out: &mut BytesMut) {
        if let Some(r) = self.rec.as_mut() {
            if r.stream_error.is_none() {
                r.stream_error = Some(err.message.chars().take(200).collect());
            }
            if r.upstream_end.is_none() {
                r.upstream_end = Some(Instant::now());
            }
        }
        self.inner.on_error(err, out)
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        if let Some(r) = self.rec.as_mut() {
            if r.upstream_end.is_none() && r.stream_error.is_none() {
                r.stream_error = Some("client disconnected".into());
            }
            finish(r);
        }
    }
}
