//! Header values made per request (a request id, a content length) without an allocation each:
//! their bytes are appended to a per-thread buffer and handed out as shared slices of it, so one
//! allocation serves a few hundred values. A buffer is freed when the last value cut from it is
//! dropped; [`CHUNK`] is small so that a long-lived value (a stream's request id) pins little.

use std::cell::RefCell;

use bytes::{Bytes, BytesMut};
use http::HeaderValue;

use crate::json;

/// Bytes per buffer.
const CHUNK: usize = 4096;

thread_local! {
    static BUF: RefCell<BytesMut> = RefCell::new(BytesMut::new());
}

fn cut(write: impl FnOnce(&mut BytesMut), max_len: usize) -> Bytes {
    BUF.with(|b| {
        let mut b = b.borrow_mut();
        if b.capacity() - b.len() < max_len {
            *b = BytesMut::with_capacity(CHUNK.max(max_len));
        }
        write(&mut b);
        b.split().freeze()
    })
}

/// `n` in decimal.
pub fn decimal(n: u64) -> HeaderValue {
    let digits = cut(|b| json::write_u64(b, n), 20);
    debug_assert!(digits.iter().all(u8::is_ascii_digit));
    // SAFETY: decimal digits are visible ASCII, which is always a valid header value.
    unsafe { HeaderValue::from_maybe_shared_unchecked(digits) }
}

/// `bytes`, which the caller guarantees are visible ASCII (checked in debug builds; not checked
/// again byte by byte in release builds, where every caller writes them from a fixed alphabet).
pub fn visible_ascii(bytes: &[u8]) -> HeaderValue {
    debug_assert!(bytes.iter().all(|c| c.is_ascii_graphic()));
    let v = cut(|b| b.extend_from_slice(bytes), bytes.len());
    // SAFETY: visible ASCII is always a valid header value (the caller's guarantee above).
    unsafe { HeaderValue::from_maybe_shared_unchecked(v) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_what_was_written_across_buffers() {
        let mut seen = Vec::new();
        for n in 0..3 * CHUNK as u64 {
            seen.push((n, decimal(n)));
        }
        for (n, v) in &seen {
            assert_eq!(v.to_str().unwrap(), n.to_string());
        }
        assert_eq!(decimal(u64::MAX).to_str().unwrap(), u64::MAX.to_string());
        assert_eq!(visible_ascii(b"abc-123").to_str().unwrap(), "abc-123");
    }
}
