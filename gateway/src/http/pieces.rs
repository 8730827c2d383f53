//! [`UpBody`]: a body of up to three `Bytes` pieces sent back to back, the native route's request
//! (the client's body with the model replaced) and response (the upstream's body with the alias
//! put back) without a copy. Its own module so that the pool ([`crate::http::client`]), which
//! sends it, does not depend on the response types.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};

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
    /// Bytes left to send.
    pub fn len(&self) -> u64 {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
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
