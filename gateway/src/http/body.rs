//! Body types for both directions, and the responses built from them.
//!
//! Responses are either a complete buffer or an SSE stream that is transformed while the client
//! reads it ([`crate::http::stream`]). Upstream request bodies are a few `Bytes` pieces so that the
//! native route can send the client's body with only the model name replaced, without copying it.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode};
use hyper::body::{Body, Frame, SizeHint};

use crate::dialect::error::GwError;
use crate::dialect::Dialect;
use crate::http::stream::SseBody;

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

/// `err` as a complete response in `dialect`'s error shape, with its `retry-after`.
pub fn error_response(err: &GwError, dialect: Dialect) -> GwResponse {
    let mut resp = json_response(err.status, Bytes::from(err.body(dialect)));
    if let Some(s) = err.retry_after {
        resp.headers_mut()
            .insert(http::header::RETRY_AFTER, HeaderValue::from(s));
    }
    resp
}

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
