//! What a refusal and an admission say to the client: the `x-ratelimit-*` headers of a policy,
//! the 429 (or the store's 503) as a dialect error with `retry-after`, and the durations they
//! are written in.

use std::sync::atomic::Ordering;
use std::time::Duration;

use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};

use super::policy::{Kind, Scope};
use super::state::PolicyState;
use crate::dialect::error::GwError;
use crate::http::arena;

#[derive(Debug, Clone)]
pub struct Rejection {
    pub scope: Scope,
    pub kind: Kind,
    pub name: String,
    pub retry_after: Duration,
    headers: Vec<(HeaderName, HeaderValue)>,
    /// Refused because the store cannot be reached (`on_store_error: reject`): a 503, not a 429.
    unavailable: bool,
}

/// OpenAI-style duration: `250ms`, `12s`, `1m30s`.
pub fn fmt_duration(d: Duration) -> String {
    let mut b = [0u8; 48];
    let n = write_duration(&mut b, d);
    String::from_utf8_lossy(&b[..n]).into_owned()
}

/// [`fmt_duration`] into a stack buffer (no `fmt`, no allocation); returns the length.
fn write_duration(buf: &mut [u8; 48], d: Duration) -> usize {
    fn num(buf: &mut [u8; 48], at: usize, mut n: u64) -> usize {
        let mut tmp = [0u8; 20];
        let mut i = tmp.len();
        loop {
            i -= 1;
            tmp[i] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        let len = tmp.len() - i;
        buf[at..at + len].copy_from_slice(&tmp[i..]);
        at + len
    }
    let ms = d.as_millis() as u64;
    if ms < 1000 {
        let at = num(buf, 0, ms);
        buf[at..at + 2].copy_from_slice(b"ms");
        return at + 2;
    }
    let s = ms.div_ceil(1000);
    let mut at = 0;
    if s >= 60 {
        at = num(buf, at, s / 60);
        buf[at] = b'm';
        at += 1;
    }
    at = num(buf, at, if s >= 60 { s % 60 } else { s });
    buf[at] = b's';
    at + 1
}

/// `d` as a reset header's value, cut from the per-thread header-value arena (no allocation).
fn duration_value(d: Duration) -> HeaderValue {
    let mut b = [0u8; 48];
    let n = write_duration(&mut b, d);
    arena::visible_ascii(&b[..n])
}

fn names(kind: Kind) -> [HeaderName; 3] {
    match kind {
        Kind::Requests => [
            HeaderName::from_static("x-ratelimit-limit-requests"),
            HeaderName::from_static("x-ratelimit-remaining-requests"),
            HeaderName::from_static("x-ratelimit-reset-requests"),
        ],
        Kind::Tokens => [
            HeaderName::from_static("x-ratelimit-limit-tokens"),
            HeaderName::from_static("x-ratelimit-remaining-tokens"),
            HeaderName::from_static("x-ratelimit-reset-tokens"),
        ],
        Kind::Concurrency => [
            HeaderName::from_static("x-ratelimit-limit-concurrency"),
            HeaderName::from_static("x-ratelimit-remaining-concurrency"),
            HeaderName::from_static("x-ratelimit-reset-concurrency"),
        ],
    }
}

/// The `x-ratelimit-*` headers of `st` at `now`: the numbers are cut from the header-value arena,
/// so the vector is the one allocation they cost.
pub(super) fn policy_headers(st: &PolicyState, now: u64) -> Vec<(HeaderName, HeaderValue)> {
    let mut out = Vec::with_capacity(9);
    let mut push = |kind: Kind, limit: &HeaderValue, remaining: u64, reset: Duration| {
        let [l, r, z] = names(kind);
        out.push((l, limit.clone()));
        out.push((r, arena::decimal(remaining)));
        out.push((z, duration_value(reset)));
    };
    // A shared policy's state as this replica knows it: its lease plus what Redis said was left.
    let sh = st.shared.as_ref();
    if let Some(r) = &st.local.requests {
        let (left, reset) = match sh.and_then(|s| s.requests.as_ref()) {
            Some(l) => l.remaining(),
            None => (r.remaining(now), r.reset(now)),
        };
        push(Kind::Requests, &r.limit_value, left, reset);
    }
    if let Some(t) = &st.local.tokens {
        let (left, reset) = match sh.and_then(|s| s.tokens.as_ref()) {
            Some(l) => l.remaining(),
            None => (t.remaining(now), t.reset(now)),
        };
        push(Kind::Tokens, &t.limit_value, left, reset);
    }
    if let (Some(max), Some(v)) = (st.policy.max_concurrent, &st.concurrency_value) {
        let left = match sh.and_then(|s| s.slots.as_ref()) {
            Some(l) => l.remaining().min(u64::from(max)),
            None => u64::from(max - st.local.inflight.load(Ordering::Relaxed).min(max)),
        };
        push(Kind::Concurrency, v, left, Duration::ZERO);
    }
    out
}

impl Rejection {
    pub(super) fn new(st: &PolicyState, kind: Kind, now: u64, retry_after: Duration) -> Self {
        Rejection {
            scope: st.scope,
            kind,
            name: st.name.clone(),
            retry_after,
            headers: policy_headers(st, now),
            unavailable: false,
        }
    }

    /// `on_store_error: reject` while the store cannot be reached.
    pub(super) fn unavailable(scope: Scope, kind: Kind, name: &str) -> Self {
        Rejection {
            scope,
            kind,
            name: name.to_owned(),
            retry_after: Duration::from_secs(1),
            headers: Vec::new(),
            unavailable: true,
        }
    }

    /// A 503 (the store cannot be reached), not a rate limit.
    pub fn is_unavailable(&self) -> bool {
        self.unavailable
    }

    /// Whole seconds for `retry-after` (rounded up, at least 1).
    pub fn retry_after_secs(&self) -> u64 {
        self.retry_after.as_millis().div_ceil(1000).max(1) as u64
    }

    /// `retry-after`, `retry-after-ms` and the `x-ratelimit-*` headers of the refusing policy.
    pub fn apply_headers(&self, h: &mut HeaderMap) {
        h.insert(
            http::header::RETRY_AFTER,
            HeaderValue::from(self.retry_after_secs()),
        );
        h.insert(
            HeaderName::from_static("retry-after-ms"),
            HeaderValue::from(self.retry_after.as_millis().max(1) as u64),
        );
        for (n, v) in &self.headers {
            h.insert(n.clone(), v.clone());
        }
    }

    pub fn message(&self) -> String {
        let what = match self.kind {
            Kind::Requests => "requests per minute",
            Kind::Tokens => "tokens per minute",
            Kind::Concurrency => "concurrent requests",
        };
        format!(
            "rate limit exceeded: {what} for {} {:?}; retry after {}",
            self.scope.as_str(),
            self.name,
            fmt_duration(self.retry_after)
        )
    }

    /// The 429 as a dialect error (its `retry_after` is set; the `x-ratelimit-*` headers are added
    /// to the response with [`Rejection::apply_headers`]).
    pub fn to_gw_error(&self) -> GwError {
        if self.unavailable {
            let mut e = GwError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "the rate-limit store is unavailable ({} {:?}); retry after 1s",
                    self.scope.as_str(),
                    self.name
                ),
            );
            e.code = Some("limits_store_unavailable");
            e.retry_after = Some(1);
            return e;
        }
        let mut e = GwError::new(StatusCode::TOO_MANY_REQUESTS, self.message());
        e.code = Some("rate_limit_exceeded");
        e.retry_after = Some(self.retry_after_secs());
        e
    }
}
