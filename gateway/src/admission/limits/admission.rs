//! An admitted request's hold on its policies, and its settlement: the token estimate corrected
//! with the real usage when it is known, the concurrency slots released when it is dropped (the
//! response ended, a stream included, or the client went away), all where each part was taken
//! (the local limiter, a lease, or a lease's fallback).

use std::sync::Arc;

use http::{HeaderName, HeaderValue};

use super::clock::now_ns;
use super::response::policy_headers;
use super::state::{
    PolicyState, REQ_LEASE, REQ_LOCAL, SLOT_LEASE, SLOT_LOCAL, TOK_LEASE, TOK_LOCAL,
};

/// A request that passed every policy. Holds the concurrency slots until dropped.
#[derive(Debug, Default)]
pub struct Admission {
    pub(super) held: Held,
    reserved_tokens: u64,
    settled: bool,
    headers: bool,
    /// Admitted through the store: `via[i]` says where each part of `held[i]` was taken from
    /// (at most two policies apply, the key's and the model's).
    shared: bool,
    pub(super) via: [u8; 2],
}

impl Admission {
    pub(super) fn new(reserved_tokens: u64, headers: bool, shared: bool) -> Admission {
        Admission {
            held: Held::default(),
            reserved_tokens,
            settled: false,
            headers,
            shared,
            via: [0; 2],
        }
    }

    /// Undo a partial admission (before any token was reserved).
    pub(super) fn rollback(&mut self) {
        if self.shared {
            self.release_shared(true);
            self.held.clear();
            self.settled = true;
            return;
        }
        for st in self.held.take() {
            st.local.refund_request();
            st.local.release_slot();
        }
        self.settled = true;
    }

    /// Charges the real token usage (input + output) in place of the estimate. Call once, when
    /// the usage is known (end of a non-streaming response, end of a stream).
    pub fn settle(&mut self, actual_tokens: u64) {
        if self.settled {
            return;
        }
        self.settled = true;
        if self.shared {
            return self.settle_shared(actual_tokens);
        }
        // The clock is read only to charge more than the reservation (a refund needs no time).
        let mut now = None;
        for st in self.held.iter() {
            if let Some(t) = &st.local.tokens {
                if actual_tokens >= self.reserved_tokens {
                    let now = *now.get_or_insert_with(now_ns);
                    t.charge(now, actual_tokens - self.reserved_tokens);
                } else {
                    t.refund(self.reserved_tokens - actual_tokens);
                }
            }
        }
    }

    /// [`Admission::settle`] where each policy's tokens were reserved: its lease or its fallback.
    fn settle_shared(&self, actual: u64) {
        let reserved = self.reserved_tokens;
        for (st, via) in self.held.iter().zip(self.via) {
            let Some(sh) = &st.shared else {
                continue;
            };
            if let (true, Some(t)) = (via & TOK_LEASE != 0, &sh.tokens) {
                if actual >= reserved {
                    t.charge((actual - reserved) as i64);
                } else {
                    t.refund((reserved - actual) as i64);
                }
            }
            if let (true, Some(t)) = (via & TOK_LOCAL != 0, sh.fallback_tokens()) {
                let now = now_ns();
                if actual >= reserved {
                    t.charge(now, actual - reserved);
                } else {
                    t.refund(reserved - actual);
                }
                // The shared bucket is owed the correction too (as of now: the reservation
                // carries the outage's start).
                if let Some(l) = &sh.tokens {
                    l.owe(actual as i64 - reserved as i64, now);
                }
            }
        }
    }

    /// Releases the slots of a shared admission where they were taken; with `undo`, gives the
    /// request units back too (a rollback).
    fn release_shared(&self, undo: bool) {
        for (st, via) in self.held.iter().zip(self.via) {
            let Some(sh) = &st.shared else {
                continue;
            };
            if let (true, Some(l)) = (via & SLOT_LEASE != 0, &sh.slots) {
                l.release();
            }
            if let (true, Some(fb)) = (via & SLOT_LOCAL != 0, &sh.fallback) {
                fb.release_slot();
            }
            if !undo {
                continue;
            }
            if let (true, Some(l)) = (via & REQ_LEASE != 0, &sh.requests) {
                l.refund(1);
            }
            if let (true, Some(fb)) = (via & REQ_LOCAL != 0, &sh.fallback) {
                fb.refund_request();
                if let Some(l) = &sh.requests {
                    l.owe(-1, 0);
                }
            }
        }
    }

    /// `x-ratelimit-*` headers of the first applied policy with a rate (the key's before the
    /// model's), as they stand after this admission, for a successful response. Empty when no
    /// rate policy applied or `headers_on_success` is off.
    pub fn headers(&self) -> Vec<(HeaderName, HeaderValue)> {
        if !self.headers {
            return Vec::new();
        }
        self.held
            .iter()
            .find(|s| s.local.requests.is_some() || s.local.tokens.is_some())
            .map(|st| policy_headers(st, now_ns()))
            .unwrap_or_default()
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        if self.shared {
            return self.release_shared(false);
        }
        for st in self.held.iter() {
            st.local.release_slot();
        }
    }
}

/// The policies an admission holds, in the order taken (the key's, then the model's): at most
/// two, kept inline rather than in a `Vec` (which cost every limited or budgeted request a
/// malloc and a free).
#[derive(Debug, Default)]
pub(super) struct Held([Option<Arc<PolicyState>>; 2]);

impl Held {
    pub(super) fn push(&mut self, st: Arc<PolicyState>) {
        let slot = self.0.iter_mut().find(|s| s.is_none());
        *slot.expect("at most two policies apply to a request") = Some(st);
    }

    pub(super) fn len(&self) -> usize {
        self.0.iter().filter(|s| s.is_some()).count()
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = &Arc<PolicyState>> {
        self.0.iter().flatten()
    }

    pub(super) fn clear(&mut self) {
        self.0 = [None, None];
    }

    /// Takes every held policy out.
    fn take(&mut self) -> impl Iterator<Item = Arc<PolicyState>> {
        std::mem::take(&mut self.0).into_iter().flatten()
    }
}
