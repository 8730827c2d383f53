//! Request ids: the client's `x-request-id` when it is reasonable, else a fresh one. Sent back on
//! every answer and written in the access-log line.

use std::cell::Cell;
use std::time::SystemTime;

use http::{HeaderName, HeaderValue};

use crate::http::arena;

pub static X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

thread_local! {
    static ID: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
}

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A fresh request id: 24 hex digits, a per-thread random prefix and a per-thread counter, so
/// unique within the process and very unlikely to repeat across restarts. No allocation of its
/// own: the value is cut from the per-thread header-value arena.
pub fn new_request_id() -> HeaderValue {
    let (mut seed, n) = ID.get();
    if seed == 0 {
        let t = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        let local = 0u8;
        seed = splitmix(t ^ (std::process::id() as u64) << 32 ^ (&local as *const u8 as u64)) | 1;
    }
    ID.set((seed, n + 1));
    let v = (seed >> 32) << 32 | (splitmix(seed ^ n) & 0xffff_ffff);
    let mut buf = [0u8; 24];
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for (i, b) in buf[..16].iter_mut().enumerate() {
        *b = HEX[((v >> (60 - 4 * i)) & 0xf) as usize];
    }
    for (i, b) in buf[16..].iter_mut().enumerate() {
        *b = HEX[((n >> (28 - 4 * i)) & 0xf) as usize];
    }
    arena::visible_ascii(&buf)
}

/// The client's `x-request-id` (`client`) when it is reasonable (1..=128 visible characters
/// from a safe set), else a new one.
pub fn request_id(client: Option<&HeaderValue>) -> HeaderValue {
    if let Some(v) = client {
        let b = v.as_bytes();
        if !b.is_empty()
            && b.len() <= 128
            && b.iter()
                .all(|c| c.is_ascii_alphanumeric() || b"-_.:/+=@".contains(c))
        {
            return v.clone();
        }
    }
    new_request_id()
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderMap;

    #[test]
    fn request_ids() {
        let a = new_request_id();
        let b = new_request_id();
        assert_ne!(a, b);
        assert_eq!(a.len(), 24);
        let mut h = HeaderMap::new();
        h.insert("x-request-id", HeaderValue::from_static("abc-123"));
        assert_eq!(request_id(h.get(&X_REQUEST_ID)), "abc-123");
        h.insert(
            "x-request-id",
            HeaderValue::from_static("bad id with spaces"),
        );
        assert_eq!(request_id(h.get(&X_REQUEST_ID)).len(), 24);
    }
}
