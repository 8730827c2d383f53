//! Body types for both directions.
//!
//! Responses are either a complete buffer or an SSE stream that is transformed while the client
//! reads it. The stream body polls the upstream body itself (no task, no channel): when the client
//! goes away hyper drops the body, which drops the upstream response and so cancels the upstream
//! request, and back-pressure flows from the client socket to the upstream socket for free.
//!
//! Upstream request bodies are a few `Bytes` pieces so that the native route can send the client's
//! body with only the model name replaced, without copying it.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{HeaderValue, Response, StatusCode};
use hyper::body::{Body, Frame, Incoming, SizeHint};

use crate::error::GwError;
use crate::sse::{SseEvent, SseSplitter};

pub type GwResponse = Response<GwBody>;

pub enum GwBody {
    Full(UpBody),
    Sse(Box<SseBody>),
}

impl GwBody {
    pub fn full(b: impl Into<Bytes>) -> Self {
        GwBody::Full(UpBody::one(b.into()))
    }
}

impl Body for GwBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        match self.get_mut() {
            GwBody::Full(b) => Pin::new(b).poll_frame(cx),
            GwBody::Sse(s) => s.poll_next(cx).map(|o| o.map(|b| Ok(Frame::data(b)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            GwBody::Full(b) => b.is_end_stream(),
            GwBody::Sse(_) => false,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            GwBody::Full(b) => b.size_hint(),
            GwBody::Sse(_) => SizeHint::default(),
        }
    }
}

pub fn json_response(status: StatusCode, body: Bytes) -> GwResponse {
    json_response_parts(status, UpBody::one(body))
}

pub fn json_response_parts(status: StatusCode, body: UpBody) -> GwResponse {
    let mut r = Response::new(GwBody::Full(body));
    *r.status_mut() = status;
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

pub fn sse_response(body: SseBody) -> GwResponse {
    let mut r = Response::new(GwBody::Sse(Box::new(body)));
    let h = r.headers_mut();
    h.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(
        http::header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache"),
    );
    r
}

/// Turns upstream SSE events into client SSE bytes. Implemented once per (upstream dialect,
/// client dialect) pair; the native pairs only check framing and rename the model.
pub trait StreamTransform: Send {
    /// One complete upstream event. An error ends the stream with the client dialect's error event.
    fn on_event(&mut self, ev: &SseEvent, out: &mut BytesMut) -> Result<(), GwError>;
    /// The upstream closed its body. An error means it closed before its terminal event.
    fn on_end(&mut self, out: &mut BytesMut) -> Result<(), GwError>;
    /// Writes the client dialect's error event; the stream ends after it.
    fn on_error(&mut self, err: &GwError, out: &mut BytesMut);
}

pub struct SseBody {
    upstream: Incoming,
    splitter: SseSplitter,
    transform: Box<dyn StreamTransform>,
    out: BytesMut,
    /// Upstream silence longer than this ends the stream with a timeout error event.
    idle: Duration,
    /// Armed for `last_data + idle`, but only moved when it fires: re-registering a timer for
    /// every frame would cost more than the frame.
    timer: Pin<Box<tokio::time::Sleep>>,
    last_data: tokio::time::Instant,
    upstream_done: bool,
    done: bool,
}

impl SseBody {
    pub fn new(upstream: Incoming, transform: Box<dyn StreamTransform>, idle: Duration) -> Self {
        SseBody {
            upstream,
            splitter: SseSplitter::default(),
            transform,
            out: BytesMut::with_capacity(1024),
            idle,
            timer: Box::pin(tokio::time::sleep(idle)),
            last_data: tokio::time::Instant::now(),
            upstream_done: false,
            done: false,
        }
    }

    fn fail(&mut self, err: GwError) {
        self.transform.on_error(&err, &mut self.out);
        self.upstream_done = true;
    }

    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        loop {
            if !self.out.is_empty() {
                return Poll::Ready(Some(self.out.split().freeze()));
            }
            if self.upstream_done || self.done {
                self.done = true;
                return Poll::Ready(None);
            }
            match Pin::new(&mut self.upstream).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => {
                    let Ok(data) = frame.into_data() else {
                        continue;
                    };
                    self.last_data = tokio::time::Instant::now();
                    self.splitter.push(&data);
                    while let Some(ev) = self.splitter.next_event() {
                        if let Err(e) = self.transform.on_event(&ev, &mut self.out) {
                            self.fail(e);
                            break;
                        }
                    }
                }
                Poll::Ready(Some(Err(e))) => {
                    self.fail(GwError::bad_upstream(format!("upstream stream broke: {e}")));
                }
                Poll::Ready(None) => {
                    self.upstream_done = true;
                    let r = match self.splitter.finish() {
                        Some(ev) => self.transform.on_event(&ev, &mut self.out),
                        None => Ok(()),
                    };
                    let r = r.and_then(|()| self.transform.on_end(&mut self.out));
                    if let Err(e) = r {
                        self.fail(e);
                    }
                }
                Poll::Pending => {
                    while self.timer.as_mut().poll(cx).is_ready() {
                        let due = self.last_data + self.idle;
                        if due <= tokio::time::Instant::now() {
                            self.fail(GwError::timeout());
                            break;
                        }
                        self.timer.as_mut().reset(due);
                    }
                    if self.upstream_done {
                        continue;
                    }
                    return Poll::Pending;
                }
            }
        }
    }
}

use std::future::Future;

/// A body made of up to three pieces, sent back to back: the native route's request (client body
/// with the model replaced) and response (upstream body with the alias put back), without copying.
pub struct UpBody {
    parts: [Option<Bytes>; 3],
    len: u64,
}

impl UpBody {
    pub fn one(b: Bytes) -> Self {
        let len = b.len() as u64;
        UpBody {
            parts: [Some(b), None, None],
            len,
        }
    }
    pub fn three(a: Bytes, b: Bytes, c: Bytes) -> Self {
        let len = (a.len() + b.len() + c.len()) as u64;
        UpBody {
            parts: [Some(a), Some(b), Some(c)],
            len,
        }
    }
}

impl Body for UpBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        for p in this.parts.iter_mut() {
            if let Some(b) = p.take() {
                this.len -= b.len() as u64;
                if !b.is_empty() {
                    return Poll::Ready(Some(Ok(Frame::data(b))));
                }
            }
        }
        Poll::Ready(None)
    }

    fn is_end_stream(&self) -> bool {
        self.len == 0
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.len)
    }
}
