//! [`UpBody`]: the body of a complete message the gateway sends, upstream (the native route's
//! request: the client's body with the model replaced) or back to the client (a buffered answer,
//! on the native route with the alias put back). Its own module so that the pool
//! ([`crate::http::client`]), which sends it, does not depend on the response types.
//!
//! A body made of three pieces (prefix, new model, suffix) is joined into one when it is small:
//! hyper sends a body frame by frame, and each frame costs a turn of its dispatcher (poll the
//! body, encode, queue, check the queue) on top of its `writev` slot, which on the board shape
//! was 1.0K instructions a request for the two extra pieces of each direction, against a copy of
//! a few hundred bytes. The pieces are copied into a per-thread buffer that hands out shared
//! slices of itself, like the header-value arena ([`crate::http::arena`]), so the join allocates
//! nothing in the steady state. That is the body's one copy in user space; a large body is sent
//! as its pieces, without one.

use std::cell::RefCell;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use hyper::body::{Body, Frame, SizeHint};

/// Three pieces totalling at most this many bytes are sent as one, copied once.
const JOIN_MAX: usize = 16 << 10;
/// Bytes per buffer of the per-thread join buffer: several joined bodies share one allocation,
/// which is reused in place when every body cut from it is gone by the time it is full (hyper
/// drops a body once it is written, so that is soon). A body that lives long (an answer a slow
/// client reads) keeps its whole buffer: this small, that is what a body cut from hyper's read
/// buffer kept before (8 KiB and up).
const CHUNK: usize = 16 << 10;

thread_local! {
    static JOINED: RefCell<BytesMut> = RefCell::new(BytesMut::new());
}

/// A complete body: one `Bytes`, or (when large) up to three sent back to back.
///
/// Kept to the size of one `Bytes` (the large case is boxed): a request or response carrying it
/// is moved a dozen times on its way through hyper's channels, and 256 bytes is the largest
/// `Request` that glibc's `memcpy` moves without its loop.
pub struct UpBody(Repr);

enum Repr {
    One(Bytes),
    Pieces(Box<Pieces>),
}

struct Pieces {
    parts: [Option<Bytes>; 3],
    len: u64,
}

impl UpBody {
    pub fn one(b: Bytes) -> Self {
        UpBody(Repr::One(b))
    }

    /// `body` with the bytes at `span` (start, end) replaced by `with`: joined into one when
    /// small (see the module docs), else sent as its three pieces without a copy.
    pub fn replacing(body: &Bytes, span: (usize, usize), with: &Bytes) -> Self {
        let (s, e) = span;
        let len = body.len() - (e - s) + with.len();
        if len <= JOIN_MAX {
            return UpBody::one(join([&body[..s], with, &body[e..]], len));
        }
        UpBody(Repr::Pieces(Box::new(Pieces {
            parts: [
                Some(body.slice(..s)),
                Some(with.clone()),
                Some(body.slice(e..)),
            ],
            len: len as u64,
        })))
    }

    /// Bytes left to send.
    pub fn len(&self) -> u64 {
        match &self.0 {
            Repr::One(b) => b.len() as u64,
            Repr::Pieces(p) => p.len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// `pieces` copied back to back into the per-thread buffer, `len` bytes in all.
fn join(pieces: [&[u8]; 3], len: usize) -> Bytes {
    JOINED.with(|buf| {
        let mut buf = buf.borrow_mut();
        if buf.capacity() < len {
            // Reclaims the buffer in place when every body cut from it has been dropped, else
            // starts a new one (the old one is freed with the last body that holds it).
            buf.reserve(CHUNK.max(len));
        }
        for p in pieces {
            buf.extend_from_slice(p);
        }
        buf.split().freeze()
    })
}

impl Body for UpBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        match &mut self.get_mut().0 {
            Repr::One(b) if b.is_empty() => Poll::Ready(None),
            Repr::One(b) => Poll::Ready(Some(Ok(Frame::data(std::mem::take(b))))),
            Repr::Pieces(p) => {
                for part in p.parts.iter_mut() {
                    if let Some(b) = part.take() {
                        p.len -= b.len() as u64;
                        if !b.is_empty() {
                            return Poll::Ready(Some(Ok(Frame::data(b))));
                        }
                    }
                }
                Poll::Ready(None)
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn sent(mut body: UpBody) -> (Vec<u8>, usize) {
        let mut out = Vec::new();
        let mut frames = 0;
        while let Some(f) = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
            out.extend_from_slice(f.unwrap().data_ref().unwrap());
            frames += 1;
        }
        assert!(body.is_end_stream());
        (out, frames)
    }

    fn run<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }

    #[test]
    fn a_body_is_the_size_of_one_bytes() {
        assert_eq!(std::mem::size_of::<UpBody>(), std::mem::size_of::<Bytes>());
    }

    #[test]
    fn small_pieces_are_sent_as_one_frame_and_large_ones_as_their_pieces() {
        let body = Bytes::from_static(b"{\"model\":\"gpt\",\"x\":1}");
        let small = UpBody::replacing(&body, (9, 14), &Bytes::from_static(b"\"up\""));
        assert_eq!(small.len(), 20);
        let (out, frames) = run(sent(small));
        assert_eq!(out, b"{\"model\":\"up\",\"x\":1}");
        assert_eq!(frames, 1);

        let mut big = vec![b'a'; JOIN_MAX];
        big.extend_from_slice(b"\"m\"");
        let body = UpBody::replacing(
            &Bytes::from(big.clone()),
            (JOIN_MAX, JOIN_MAX + 3),
            &Bytes::from_static(b"\"up\""),
        );
        assert_eq!(body.len() as usize, JOIN_MAX + 4);
        let (out, frames) = run(sent(body));
        assert_eq!(&out[..JOIN_MAX], &big[..JOIN_MAX]);
        assert_eq!(&out[JOIN_MAX..], b"\"up\"");
        assert_eq!(frames, 2, "an empty piece is not a frame");

        let (out, frames) = run(sent(UpBody::one(Bytes::new())));
        assert!(out.is_empty());
        assert_eq!(frames, 0);
    }

    #[test]
    fn joined_bodies_stay_intact_while_the_buffer_is_reused() {
        // Enough bodies to wrap the per-thread buffer several times, some kept alive across it.
        let mut kept = Vec::new();
        for n in 0..4 * CHUNK / 100 {
            let tail = format!(",\"n\":{n}}}");
            let client = Bytes::from(format!("{{\"model\":\"m\"{tail}"));
            let body = UpBody::replacing(&client, (9, 12), &Bytes::from(vec![b'x'; 80]));
            let (out, _) = run(sent(body));
            let want = [&b"{\"model\":"[..], &[b'x'; 80][..], tail.as_bytes()].concat();
            assert_eq!(out, want);
            if n % 97 == 0 {
                kept.push((
                    join([b"a", &[b'y'; 50], tail.as_bytes()], 51 + tail.len()),
                    tail,
                ));
            }
        }
        for (b, tail) in kept {
            assert_eq!(&b[..51], [&b"a"[..], &[b'y'; 50][..]].concat());
            assert_eq!(&b[51..], tail.as_bytes());
        }
    }
}
