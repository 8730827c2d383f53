//! The trace context: W3C `traceparent` read from the client and written upstream, the ids of a
//! request's spans, and what a sampled request's trace keeps of its attempts as they go.

use std::borrow::Cow;
use std::cell::Cell;
use std::time::Duration;

use http::{HeaderName, HeaderValue};

pub static TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");

thread_local! {
    static RNG: Cell<u64> = Cell::new({
        use std::hash::{BuildHasher, Hasher};
        std::collections::hash_map::RandomState::new().build_hasher().finish() | 1
    });
}

/// A per-thread xorshift: ids need to be unique, not secret.
fn random() -> u64 {
    RNG.with(|r| {
        let mut x = r.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        r.set(x);
        x
    })
}

fn span_id() -> [u8; 8] {
    loop {
        let id = random();
        if id != 0 {
            return id.to_be_bytes();
        }
    }
}

/// A new trace id (the client sent none).
pub(super) fn trace_id() -> [u8; 16] {
    let mut id = [0u8; 16];
    id[..8].copy_from_slice(&random().to_be_bytes());
    id[8..].copy_from_slice(&random().to_be_bytes());
    id
}

/// A sampled request's trace: its ids and its attempts as they go.
#[derive(Debug)]
pub struct Trace {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    /// The client's span, when it sent a `traceparent`.
    pub parent: Option<[u8; 8]>,
    pub attempts: Attempts,
    /// `gen_ai.response.finish_reasons`: the answer's last finish or stop reason.
    pub finish_reason: Option<Cow<'static, str>>,
}

/// A sampled request's attempts: the first inline (most requests make one), the others after it,
/// so that a trace costs one allocation (its box), not two.
#[derive(Debug, Default)]
pub struct Attempts {
    first: Option<Attempt>,
    rest: Vec<Attempt>,
}

impl Attempts {
    fn push(&mut self, a: Attempt) {
        if self.first.is_none() {
            self.first = Some(a);
        } else {
            self.rest.push(a);
        }
    }

    pub fn len(&self) -> usize {
        usize::from(self.first.is_some()) + self.rest.len()
    }

    pub fn is_empty(&self) -> bool {
        self.first.is_none()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Attempt> {
        self.first.iter().chain(&self.rest)
    }

    pub fn last(&self) -> Option<&Attempt> {
        self.rest.last().or(self.first.as_ref())
    }

    fn last_mut(&mut self) -> Option<&mut Attempt> {
        self.rest.last_mut().or(self.first.as_mut())
    }
}

/// One upstream attempt of a sampled request.
#[derive(Debug)]
pub struct Attempt {
    pub span_id: [u8; 8],
    pub deployment: u8,
    /// Offsets from the request's start.
    pub start: Duration,
    pub end: Option<Duration>,
    /// How it failed, when it did (`error.type`).
    pub error: Option<&'static str>,
}

/// The client's `traceparent`: (trace id, parent span id, sampled), when well formed.
pub(super) fn parse_traceparent(v: &[u8]) -> Option<([u8; 16], [u8; 8], bool)> {
    // version "-" trace-id(32) "-" parent-id(16) "-" flags(2)
    if v.len() < 55 || v[2] != b'-' || v[35] != b'-' || v[52] != b'-' || &v[..2] == b"ff" {
        return None;
    }
    let hex = |s: &[u8], out: &mut [u8]| -> Option<()> {
        for (i, o) in out.iter_mut().enumerate() {
            let h = |c: u8| match c {
                b'0'..=b'9' => Some(c - b'0'),
                b'a'..=b'f' => Some(c - b'a' + 10),
                _ => None,
            };
            *o = h(s[2 * i])? << 4 | h(s[2 * i + 1])?;
        }
        Some(())
    };
    let (mut trace, mut parent, mut flags) = ([0u8; 16], [0u8; 8], [0u8; 1]);
    hex(&v[3..35], &mut trace)?;
    hex(&v[36..52], &mut parent)?;
    hex(&v[53..55], &mut flags)?;
    if trace == [0; 16] || parent == [0; 8] {
        return None;
    }
    Some((trace, parent, flags[0] & 1 == 1))
}

/// Every byte's two lowercase hex digits: one lookup per byte of an id.
static HEX: [[u8; 2]; 256] = {
    let digits = b"0123456789abcdef";
    let mut t = [[0u8; 2]; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = [digits[i >> 4], digits[i & 15]];
        i += 1;
    }
    t
};

/// `bytes` as hex into `out` (twice as long).
fn hex_into(out: &mut [u8], bytes: &[u8]) {
    for (pair, b) in out.chunks_exact_mut(2).zip(bytes) {
        pair.copy_from_slice(&HEX[usize::from(*b)]);
    }
}

/// `traceparent` for an upstream request: the attempt's span as the parent, sampled.
pub fn traceparent(trace_id: &[u8; 16], span: &[u8; 8]) -> HeaderValue {
    let mut out = [0u8; 55];
    out[..3].copy_from_slice(b"00-");
    hex_into(&mut out[3..35], trace_id);
    out[35] = b'-';
    hex_into(&mut out[36..52], span);
    out[52..].copy_from_slice(b"-01");
    crate::http::arena::visible_ascii(&out)
}

impl Trace {
    /// A sampled request's trace in `trace_id`, the child of the client's span `parent` if any.
    pub(super) fn new(trace_id: [u8; 16], parent: Option<[u8; 8]>) -> Box<Trace> {
        Box::new(Trace {
            trace_id,
            span_id: span_id(),
            parent,
            attempts: Attempts::default(),
            finish_reason: None,
        })
    }

    /// A new attempt on `deployment`, `start` after the request's start: its span id.
    pub fn attempt(&mut self, deployment: usize, start: Duration) -> [u8; 8] {
        let id = span_id();
        self.attempts.push(Attempt {
            span_id: id,
            deployment: deployment as u8,
            start,
            end: None,
            error: None,
        });
        id
    }

    /// A finish reason seen in the answer (`body` an answer or a stream event).
    pub fn saw(&mut self, body: &[u8]) {
        if let Some(r) = crate::json::usage::finish_reason(body) {
            self.finish_reason = Some(match r {
                b"stop" => "stop".into(),
                b"length" => "length".into(),
                b"tool_calls" => "tool_calls".into(),
                b"end_turn" => "end_turn".into(),
                b"max_tokens" => "max_tokens".into(),
                b"tool_use" => "tool_use".into(),
                _ => String::from_utf8_lossy(r).into_owned().into(),
            });
        }
    }

    /// The latest attempt failed (`error.type`), `end` after the request's start.
    pub fn attempt_failed(&mut self, error: &'static str, end: Duration) {
        if let Some(a) = self.attempts.last_mut() {
            a.end = Some(end);
            a.error = Some(error);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparent_round_trip() {
        let v = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let (t, p, s) = parse_traceparent(v).unwrap();
        assert!(s);
        assert_eq!(traceparent(&t, &p).as_bytes(), v);
        assert!(
            parse_traceparent(b"00-00000000000000000000000000000000-00f067aa0ba902b7-01").is_none()
        );
        assert!(
            parse_traceparent(b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7").is_none()
        );
        assert!(
            parse_traceparent(b"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01").is_none()
        );
        let (_, _, s) =
            parse_traceparent(b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00").unwrap();
        assert!(!s);
    }
}
