//! Body types for both directions, and the responses built from them.
//!
//! Responses are either a complete buffer or an SSE stream that is transformed while the client
//! reads it ([`crate::http::stream`]). Upstream request bodies are a few `Bytes` pieces
//! ([`UpBody`]) so that the native route can send the client's body with only the model name
//! replaced, without copying it.

use std::future::Future;
use std::pin::{pin, Pin};
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, HeaderValue, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming, SizeHint};

use crate::dialect::error::GwError;
use crate::dialect::Dialect;
use crate::http::stream::SseBody;

pub use crate::http::pieces::UpBody;

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
    json_response_parts(status, UpBody::one(body), HeaderMap::new())
}

/// A JSON response whose headers are written into `headers` (emptied here: passing a used map,
/// such as the upstream response's, reuses its capacity instead of allocating a new one).
pub fn json_response_parts(status: StatusCode, body: UpBody, headers: HeaderMap) -> GwResponse {
    let mut r = Response::new(GwBody::Full(body));
    *r.status_mut() = status;
    let h = r.headers_mut();
    *h = headers;
    h.clear();
    h.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// An SSE response, its headers written into `headers` as in [`json_response_parts`].
pub fn sse_response(body: SseBody, headers: HeaderMap) -> GwResponse {
    let mut r = Response::new(GwBody::Sse(Box::new(body)));
    let h = r.headers_mut();
    *h = headers;
    h.clear();
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

/// `err` as a complete response in `dialect`'s error shape, with its `retry-after`.
pub fn error_response(err: &GwError, dialect: Dialect) -> GwResponse {
    let mut resp = json_response(err.status, Bytes::from(err.body(dialect)));
    if let Some(s) = err.retry_after {
        resp.headers_mut()
            .insert(http::header::RETRY_AFTER, HeaderValue::from(s));
    }
    resp
}

/// Why a body could not be read whole.
#[derive(Debug)]
pub enum ReadError {
    /// It is longer than the limit (known from its length before reading, or found while reading).
    TooLarge,
    /// It did not end before the deadline.
    TimedOut,
    /// The connection failed or the framing was broken.
    Broken(hyper::Error),
}

/// The whole of `body`, at most `limit` bytes, by `deadline` (called only if the body is not
/// already complete in hyper's buffer, so that the common case reads no clock and arms no
/// deadline). A body that arrives in one piece is returned as that piece, without a copy; one in
/// several pieces is copied once into a buffer of its announced length. A body with an announced
/// length ends when that many bytes have arrived.
pub async fn read_all(
    body: Incoming,
    limit: usize,
    deadline: impl FnOnce() -> tokio::time::Instant,
) -> Result<Bytes, ReadError> {
    if body.size_hint().lower() > limit as u64 {
        return Err(ReadError::TooLarge);
    }
    let mut read = pin!(read_pieces(body, limit));
    if let Poll::Ready(r) = std::future::poll_fn(|cx| Poll::Ready(read.as_mut().poll(cx))).await {
        return r;
    }
    match super::deadline::timeout_at(deadline(), read).await {
        Ok(r) => r,
        Err(_) => Err(ReadError::TimedOut),
    }
}

async fn read_pieces(mut body: Incoming, limit: usize) -> Result<Bytes, ReadError> {
    let mut first: Option<Bytes> = None;
    let mut joined: Option<BytesMut> = None;
    let mut total = 0usize;
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame.map_err(ReadError::Broken)?.into_data() else {
            continue; // trailers
        };
        total += data.len();
        if total > limit {
            return Err(ReadError::TooLarge);
        }
        match (&mut joined, first.take()) {
            (Some(j), _) => j.extend_from_slice(&data),
            (None, None) => first = Some(data),
            (None, Some(f)) => {
                let expected = body.size_hint().lower() as usize + total;
                let mut j = BytesMut::with_capacity(expected.min(limit));
                j.extend_from_slice(&f);
                j.extend_from_slice(&data);
                joined = Some(j);
            }
        }
        // A body whose announced length has arrived is complete: polling it once more only to
        // be told so goes through its channel again (a waker registered, two locks taken).
        if body.is_end_stream() {
            break;
        }
    }
    Ok(match (joined, first) {
        (Some(j), _) => j.freeze(),
        (None, Some(f)) => f,
        (None, None) => Bytes::new(),
    })
}
