//! What a stream translation is: the SSE body ([`crate::http::stream`]) feeds it the upstream's
//! events one by one and sends what it writes to the client. Implemented once per (upstream
//! dialect, client dialect) pair ([`crate::dialect::translate`]), by the native pass-through
//! ([`crate::dialect::native`]), and wrapped by the request record that watches a stream for usage.

use bytes::BytesMut;

use crate::dialect::error::GwError;
use crate::sse::SseEvent;

/// Turns upstream SSE events into client SSE bytes.
pub trait StreamTransform: Send {
    /// One complete upstream event. An error ends the stream with the client dialect's error event.
    fn on_event(&mut self, ev: &SseEvent, out: &mut BytesMut) -> Result<(), GwError>;
    /// The upstream closed its body. An error means it closed before its terminal event.
    fn on_end(&mut self, out: &mut BytesMut) -> Result<(), GwError>;
    /// Writes the client dialect's error event; the stream ends after it.
    fn on_error(&mut self, err: &GwError, out: &mut BytesMut);
    /// What the last `on_event`'s own check of the event learnt of its top-level `usage`
    /// member, so that the request record need not search the event for it again: `Some(true)`
    /// when it is an object, `Some(false)` when it is absent or not an object (`null`), `None`
    /// when this transform does not know (the default: the record searches).
    fn last_usage(&self) -> Option<bool> {
        None
    }
}
