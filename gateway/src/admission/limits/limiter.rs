//! The local limiter of one policy: requests and tokens each a GCRA, concurrency a count of
//! slots. The same limiter serves a local policy and, divided by the replica count, a shared
//! policy's fallback while the store cannot be reached, so both admit by one algorithm
//! ([`Local::take`]; the fallback through [`Local::take_fallback`], which first empties the
//! buckets as of the outage's start).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use http::HeaderValue;

use super::clock::WINDOW_NS;
use super::policy::{Kind, Policy};

/// GCRA state: the theoretical arrival time in `now_ns` units.
#[derive(Debug)]
pub(super) struct Gcra {
    tat: AtomicU64,
    /// Nanoseconds per unit (request or token).
    pub(super) interval: u64,
    /// The burst tolerance: a minute, or a spend budget's period.
    window: u64,
    /// The configured per-minute limit as a header value, built once.
    pub(super) limit_value: HeaderValue,
}

impl Gcra {
    pub(super) fn new(per_minute: u64) -> Self {
        Gcra::with_window(per_minute, WINDOW_NS)
    }

    /// `limit` units per `window` nanoseconds (a spend budget: microdollars per period).
    pub(super) fn with_window(limit: u64, window: u64) -> Self {
        Gcra {
            tat: AtomicU64::new(0),
            interval: (window / limit).max(1),
            window,
            limit_value: HeaderValue::from(limit),
        }
    }

    /// Takes `n` units if the result stays within one window of debt. Err: nanoseconds to wait.
    pub(super) fn take(&self, now: u64, n: u64) -> Result<u64, u64> {
        let cost = n.saturating_mul(self.interval);
        let mut tat = self.tat.load(Ordering::Relaxed);
        loop {
            let new = tat.max(now).saturating_add(cost);
            if new - now > self.window {
                return Err(new - now - self.window);
            }
            match self
                .tat
                .compare_exchange_weak(tat, new, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return Ok(new),
                Err(t) => tat = t,
            }
        }
    }

    /// Empties the bucket as of `t` (`now_ns`) unless it already was: from here on it holds
    /// only what refills after `t`, and debt beyond that is kept. The GCRA's one timestamp makes
    /// this a `max`: a fallback's state carries across outages (what it admitted in one is not
    /// forgotten in the next) and is never recreated full.
    pub(super) fn empty_since(&self, t: u64) {
        let floor = t.saturating_add(self.window);
        if self.tat.load(Ordering::Relaxed) < floor {
            self.tat.fetch_max(floor, Ordering::Relaxed);
        }
    }

    /// Whether any budget is left (the bucket is not fully spent or in debt). Err: ns to wait.
    pub(super) fn check(&self, now: u64) -> Result<(), u64> {
        let tat = self.tat.load(Ordering::Relaxed);
        let debt = tat.saturating_sub(now);
        if debt + self.interval > self.window {
            Err(debt + self.interval - self.window)
        } else {
            Ok(())
        }
    }

    /// Adds `n` units unconditionally (a charge may overshoot; the debt is carried).
    pub(super) fn charge(&self, now: u64, n: u64) {
        let cost = n.saturating_mul(self.interval);
        let mut tat = self.tat.load(Ordering::Relaxed);
        loop {
            let new = tat.max(now).saturating_add(cost);
            match self
                .tat
                .compare_exchange_weak(tat, new, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return,
                Err(t) => tat = t,
            }
        }
    }

    /// Gives back `n` units (a refund after a rollback or an over-estimate).
    pub(super) fn refund(&self, n: u64) {
        let cost = n.saturating_mul(self.interval);
        let _ = self
            .tat
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| {
                Some(t.saturating_sub(cost))
            });
    }

    pub(super) fn remaining(&self, now: u64) -> u64 {
        let debt = self.tat.load(Ordering::Relaxed).saturating_sub(now);
        self.window.saturating_sub(debt) / self.interval
    }

    /// Time until the bucket is full again.
    pub(super) fn reset(&self, now: u64) -> Duration {
        Duration::from_nanos(self.tat.load(Ordering::Relaxed).saturating_sub(now))
    }
}

/// A policy's local counters.
#[derive(Debug)]
pub(super) struct Local {
    pub(super) requests: Option<Gcra>,
    pub(super) tokens: Option<Gcra>,
    pub(super) inflight: AtomicU32,
    pub(super) max_concurrent: Option<u32>,
}

impl Local {
    pub(super) fn new(p: &Policy) -> Local {
        Local {
            requests: p.requests_per_minute.map(Gcra::new),
            tokens: p
                .tokens_per_minute
                .map(|n| Gcra::with_window(n, p.tokens_window())),
            inflight: AtomicU32::new(0),
            max_concurrent: p.max_concurrent,
        }
    }

    /// `p` divided by `replicas` (rounded up, never below one): one replica's part of a shared
    /// policy, for `on_store_error: local`.
    pub(super) fn divided(p: &Policy, replicas: u32) -> Local {
        let part = |n: u64| n.div_ceil(u64::from(replicas)).max(1);
        Local {
            requests: p.requests_per_minute.map(|n| Gcra::new(part(n))),
            tokens: p
                .tokens_per_minute
                .map(|n| Gcra::with_window(part(n), p.tokens_window())),
            inflight: AtomicU32::new(0),
            max_concurrent: p.max_concurrent.map(|n| part(u64::from(n)) as u32),
        }
    }

    /// One part of an admission at `now`: a concurrency slot taken, one request taken, or the
    /// token bucket checked to be out of debt (the estimate is charged once every part passed).
    /// A part the policy does not limit passes. Err: how long to wait.
    #[inline]
    pub(super) fn take(&self, kind: Kind, now: u64) -> Result<(), Duration> {
        match kind {
            Kind::Concurrency => {
                if let Some(max) = self.max_concurrent {
                    if self.inflight.fetch_add(1, Ordering::Relaxed) >= max {
                        self.inflight.fetch_sub(1, Ordering::Relaxed);
                        return Err(Duration::from_secs(1));
                    }
                }
            }
            Kind::Requests => {
                if let Some(g) = &self.requests {
                    g.take(now, 1).map_err(Duration::from_nanos)?;
                }
            }
            Kind::Tokens => {
                if let Some(g) = &self.tokens {
                    g.check(now).map_err(Duration::from_nanos)?;
                }
            }
        }
        Ok(())
    }

    /// [`Local::take`] for a shared policy's fallback, in an outage of the store that began at
    /// `since` (`now_ns`): the rates hold only what refilled since then (this replica's part of
    /// the limit, as of an empty bucket), and the slots count the `leased` ones this replica's
    /// requests hold from its lease, so that the fallback adds slots up to its part and no
    /// further.
    pub(super) fn take_fallback(
        &self,
        kind: Kind,
        now: u64,
        since: u64,
        leased: u32,
    ) -> Result<(), Duration> {
        match kind {
            Kind::Concurrency => {
                if let Some(max) = self.max_concurrent {
                    let was = self.inflight.fetch_add(1, Ordering::Relaxed);
                    if was.saturating_add(leased) >= max {
                        self.inflight.fetch_sub(1, Ordering::Relaxed);
                        return Err(Duration::from_secs(1));
                    }
                }
                return Ok(());
            }
            Kind::Requests => self.requests.as_ref(),
            Kind::Tokens => self.tokens.as_ref(),
        }
        .map_or(Ok(()), |g| {
            g.empty_since(since);
            self.take(kind, now)
        })
    }

    /// Gives back the request [`Local::take`] took (a rollback).
    pub(super) fn refund_request(&self) {
        if let Some(r) = &self.requests {
            r.refund(1);
        }
    }

    /// Gives back the concurrency slot [`Local::take`] took.
    pub(super) fn release_slot(&self) {
        if self.max_concurrent.is_some() {
            self.inflight.fetch_sub(1, Ordering::Relaxed);
        }
    }
}
