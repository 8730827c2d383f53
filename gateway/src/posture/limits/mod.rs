//! Rate-limit policies per caller key and per model alias:
//!
//! ```json
//! "limits": {
//!   "default_key": { "requests_per_minute": 600, "tokens_per_minute": 200000, "max_concurrent": 32 },
//!   "keys":   { "team-a": { "requests_per_minute": 60 } },
//!   "models": { "gpt-4o-mini": { "tokens_per_minute": 1000000, "max_concurrent": 256 } }
//! }
//! ```
//!
//! `default_key` applies to every configured key that has no entry in `keys`, each key with its
//! own counters. Every field of a policy is optional; an absent field is not limited. On an open
//! gateway (no `keys`) only the model policies apply.
//!
//! # Algorithm
//! Requests and tokens are each a GCRA (generic cell rate algorithm, the "virtual scheduling" form
//! of a token bucket): one `AtomicU64` holding the theoretical arrival time, advanced by
//! `60 s / limit` per request (per token), with a burst tolerance of one minute. A full minute's
//! budget may be spent at once, after which it refills continuously (not at minute boundaries).
//!
//! Tokens are checked before the call (the bucket must not be in debt) and an estimate of the
//! input tokens (request body bytes / 4) is reserved; after the call the reservation is corrected
//! with the real usage the upstream reported ([`Admission::settle`]). Concurrency is an
//! `AtomicU32` held by the [`Admission`] and released when it is dropped: when the response
//! body (a stream included) ends, or when the client disconnects and hyper drops the body.
//!
//! # Per worker or global
//! The counters are global (one set of atomics per policy, shared by all workers), not per worker.
//! `SO_REUSEPORT` spreads *connections*, not requests, across workers: a client with one
//! keep-alive connection sits on one worker, so per-worker state holding `limit / N` would give it
//! `1/N` of its quota, and a per-worker full limit would let N connections get N times the quota.
//! The price is one atomic read-modify-write (a CAS) on a cache line shared between workers, per
//! policy per request; measured in `docs/operations.md` (tens of nanoseconds against a request
//! path of tens of microseconds). No lock is taken.
//!
//! # Accuracy
//! - Tokens are charged after the fact: a request admitted with one token of budget left can use
//!   its whole `max_tokens`, and a stream is charged only when it ends, so concurrent requests
//!   (streams especially) can overshoot the token budget by up to their combined output. The debt
//!   is carried: later requests wait until the bucket is out of debt.
//! - A stream that ends without usage (the client disconnected, or a chat stream without
//!   `stream_options.include_usage`) keeps only its reserved input estimate.
//! - The counters are reset by a config reload (SIGHUP).
//!
//! # Across replicas (`store`)
//! With a `store` section the policies are shared by every replica using the same Redis: each
//! replica admits from leases of quota it takes from Redis ([`lease`]), over one connection per
//! process ([`store`]). Requests and tokens are then a token bucket in Redis (`scripts::BUCKET`) with
//! the same semantics as the GCRA above (a minute's budget as burst, continuous refill, debt
//! carried); concurrency is a count of slots per replica with a time to live (`scripts::SLOTS`). The
//! local algorithm above is unchanged and used without a store; with one, it is the fallback of
//! `on_store_error: local`, with every limit divided by `replicas`. Shared counters are not reset
//! by a reload (they live in Redis).

pub mod clock;
pub mod lease;
pub mod scripts;
pub mod store;

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use serde::Deserialize;
use serde_json::Value;

use crate::config::check::ConfigError;
use crate::dialect::error::GwError;
use crate::http::arena;
use crate::posture::limits::clock::{now_ns, WINDOW_NS};
use crate::posture::limits::lease::{Got, Leases, RateLease, SlotLease};
use crate::posture::limits::store::{OnError, Store, StoreConfig};

/// One policy as written in the config file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    #[serde(default)]
    pub requests_per_minute: Option<u64>,
    #[serde(default)]
    pub tokens_per_minute: Option<u64>,
    #[serde(default)]
    pub max_concurrent: Option<u32>,
}

/// The `limits` section as written in the config file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsConfig {
    #[serde(default)]
    pub default_key: Option<Policy>,
    #[serde(default)]
    pub keys: BTreeMap<String, Policy>,
    #[serde(default)]
    pub models: BTreeMap<String, Policy>,
    /// Also send `x-ratelimit-*` on admitted requests (a 429 always carries them). Off by
    /// default: nine more headers cost about as much as the rest of the posture together.
    #[serde(default)]
    pub headers_on_success: bool,
    /// The shared store (checked by [`StoreConfig::from_config`]).
    #[serde(default)]
    pub store: Option<Value>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Key,
    Model,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Key => "key",
            Scope::Model => "model",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Requests,
    Tokens,
    Concurrency,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Requests => "requests",
            Kind::Tokens => "tokens",
            Kind::Concurrency => "concurrency",
        }
    }
}

/// GCRA state: the theoretical arrival time in `now_ns` units.
#[derive(Debug)]
struct Gcra {
    tat: AtomicU64,
    /// Nanoseconds per unit (request or token).
    interval: u64,
    /// The configured per-minute limit as a header value, built once.
    limit_value: HeaderValue,
}

impl Gcra {
    fn new(per_minute: u64) -> Self {
        Gcra {
            tat: AtomicU64::new(0),
            interval: (WINDOW_NS / per_minute).max(1),
            limit_value: HeaderValue::from(per_minute),
        }
    }

    /// Takes `n` units if the result stays within one window of debt. Err: nanoseconds to wait.
    fn take(&self, now: u64, n: u64) -> Result<u64, u64> {
        let cost = n.saturating_mul(self.interval);
        let mut tat = self.tat.load(Ordering::Relaxed);
        loop {
            let new = tat.max(now).saturating_add(cost);
            if new - now > WINDOW_NS {
                return Err(new - now - WINDOW_NS);
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

    /// Whether any budget is left (the bucket is not fully spent or in debt). Err: ns to wait.
    fn check(&self, now: u64) -> Result<(), u64> {
        let tat = self.tat.load(Ordering::Relaxed);
        let debt = tat.saturating_sub(now);
        if debt + self.interval > WINDOW_NS {
            Err(debt + self.interval - WINDOW_NS)
        } else {
            Ok(())
        }
    }

    /// Adds `n` units unconditionally (a charge may overshoot; the debt is carried).
    fn charge(&self, now: u64, n: u64) {
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
    fn refund(&self, n: u64) {
        let cost = n.saturating_mul(self.interval);
        let _ = self
            .tat
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| {
                Some(t.saturating_sub(cost))
            });
    }

    fn remaining(&self, now: u64) -> u64 {
        let debt = self.tat.load(Ordering::Relaxed).saturating_sub(now);
        WINDOW_NS.saturating_sub(debt) / self.interval
    }

    /// Time until the bucket is full again.
    fn reset(&self, now: u64) -> Duration {
        Duration::from_nanos(self.tat.load(Ordering::Relaxed).saturating_sub(now))
    }
}

/// The live counters of one policy for one key or one model.
#[derive(Debug)]
pub struct PolicyState {
    scope: Scope,
    name: String,
    policy: Policy,
    requests: Option<Gcra>,
    tokens: Option<Gcra>,
    inflight: AtomicU32,
    concurrency_value: Option<HeaderValue>,
    /// With a store: this replica's leases of the policy, and its fallback.
    shared: Option<Shared>,
}

/// A policy shared through the store.
#[derive(Debug)]
struct Shared {
    requests: Option<Arc<RateLease>>,
    tokens: Option<Arc<RateLease>>,
    slots: Option<Arc<SlotLease>>,
    /// `on_store_error: local`: the policy divided by the replica count.
    fallback: Option<Fallback>,
}

/// The local limiter a shared policy falls back to while the store cannot be reached.
#[derive(Debug)]
struct Fallback {
    requests: Option<Gcra>,
    tokens: Option<Gcra>,
    inflight: AtomicU32,
    max_concurrent: Option<u32>,
}

impl Fallback {
    fn new(p: &Policy, replicas: u32) -> Fallback {
        let part = |n: u64| n.div_ceil(u64::from(replicas)).max(1);
        Fallback {
            requests: p.requests_per_minute.map(|n| Gcra::new(part(n))),
            tokens: p.tokens_per_minute.map(|n| Gcra::new(part(n))),
            inflight: AtomicU32::new(0),
            max_concurrent: p.max_concurrent.map(|n| part(u64::from(n)) as u32),
        }
    }
}

/// Where each part of a held shared policy was taken from (bits of `Admission::via`).
const REQ_LEASE: u8 = 1;
const REQ_LOCAL: u8 = 2;
const TOK_LEASE: u8 = 4;
const TOK_LOCAL: u8 = 8;
const SLOT_LEASE: u8 = 16;
const SLOT_LOCAL: u8 = 32;

impl PolicyState {
    fn new(scope: Scope, name: &str, policy: Policy) -> Self {
        PolicyState {
            scope,
            name: name.to_owned(),
            policy,
            requests: policy.requests_per_minute.map(Gcra::new),
            tokens: policy.tokens_per_minute.map(Gcra::new),
            inflight: AtomicU32::new(0),
            concurrency_value: policy.max_concurrent.map(HeaderValue::from),
            shared: None,
        }
    }

    #[cfg(test)]
    fn inflight(&self) -> u32 {
        self.inflight.load(Ordering::Relaxed)
    }
}

/// All policies; immutable apart from the atomics, rebuilt on reload.
#[derive(Debug, Default)]
pub struct Limits {
    keys: HashMap<String, Arc<PolicyState>>,
    models: HashMap<String, Arc<PolicyState>>,
    headers_on_success: bool,
    /// The `store` section as configured (connected or not).
    store_config: Option<StoreConfig>,
    /// The running store, once [`Limits::connect`]ed.
    store: Option<Arc<Store>>,
}

/// A request that passed every policy. Holds the concurrency slots until dropped.
#[derive(Debug, Default)]
pub struct Admission {
    held: Vec<Arc<PolicyState>>,
    reserved_tokens: u64,
    settled: bool,
    headers: bool,
    /// Admitted through the store: `via[i]` says where each part of `held[i]` was taken from
    /// (at most two policies apply, the key's and the model's).
    shared: bool,
    via: [u8; 2],
}

/// The outcome of [`Limits::admit`].
#[derive(Debug)]
pub enum Admit {
    Now(Result<Admission, Rejection>),
    /// Only the store can tell (a lease ran out): call [`Limits::admit_waiting`].
    Wait,
}

/// Why a shared admission did not complete.
enum Refused {
    Rejected(Rejection),
    MustWait,
}

/// Why a request was refused, with what the 429 must say.
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

impl Limits {
    /// Whether any policy is configured (otherwise admission costs nothing).
    pub fn has_policies(&self) -> bool {
        !self.keys.is_empty() || !self.models.is_empty()
    }

    /// Builds the policies from the top-level `limits` value. `key_ids` are the configured key ids
    /// and `aliases` the configured model aliases; a policy naming anything else is an error (a
    /// typo would otherwise leave that key or model unlimited).
    pub fn from_config(
        v: Option<&Value>,
        key_ids: &[String],
        aliases: &[&str],
        errors: &mut Vec<ConfigError>,
        warnings: &mut Vec<String>,
    ) -> Limits {
        let Some(v) = v else {
            return Limits::default();
        };
        let cfg = match LimitsConfig::deserialize(v) {
            Ok(c) => c,
            Err(e) => {
                errors.push(ConfigError {
                    path: "$.limits".into(),
                    message: e.to_string(),
                });
                return Limits::default();
            }
        };
        let check = |path: String, p: &Policy, errors: &mut Vec<ConfigError>| -> bool {
            let mut ok = true;
            for (f, v, max) in [
                ("requests_per_minute", p.requests_per_minute, 1_000_000_000),
                ("tokens_per_minute", p.tokens_per_minute, 10_000_000_000_000),
                (
                    "max_concurrent",
                    p.max_concurrent.map(u64::from),
                    1_000_000_000,
                ),
            ] {
                match v {
                    Some(0) => {
                        errors.push(ConfigError {
                            path: format!("{path}.{f}"),
                            message: "must be a positive integer".into(),
                        });
                        ok = false;
                    }
                    Some(n) if n > max => {
                        errors.push(ConfigError {
                            path: format!("{path}.{f}"),
                            message: format!("must be at most {max}"),
                        });
                        ok = false;
                    }
                    _ => {}
                }
            }
            ok
        };
        let store_config = cfg
            .store
            .as_ref()
            .and_then(|v| StoreConfig::from_config(v, errors, warnings));
        let mut out = Limits {
            headers_on_success: cfg.headers_on_success,
            store_config,
            ..Limits::default()
        };
        if let Some(d) = &cfg.default_key {
            if check("$.limits.default_key".into(), d, errors) {
                for id in key_ids {
                    if !cfg.keys.contains_key(id) {
                        out.keys
                            .insert(id.clone(), Arc::new(PolicyState::new(Scope::Key, id, *d)));
                    }
                }
            }
            if key_ids.is_empty() {
                warnings.push(
                    "$.limits.default_key: no keys are configured, so no key policy applies".into(),
                );
            }
        }
        for (id, p) in &cfg.keys {
            let path = format!("$.limits.keys.{id}");
            if !key_ids.iter().any(|k| k == id) {
                errors.push(ConfigError {
                    path,
                    message: format!("no key with id {id:?} is configured in $.keys"),
                });
                continue;
            }
            if check(path, p, errors) {
                out.keys
                    .insert(id.clone(), Arc::new(PolicyState::new(Scope::Key, id, *p)));
            }
        }
        for (alias, p) in &cfg.models {
            let path = format!("$.limits.models.{alias}");
            if !aliases.contains(&alias.as_str()) {
                errors.push(ConfigError {
                    path,
                    message: format!("no model alias {alias:?} is configured in $.models"),
                });
                continue;
            }
            if check(path, p, errors) {
                out.models.insert(
                    alias.clone(),
                    Arc::new(PolicyState::new(Scope::Model, alias, *p)),
                );
            }
        }
        out
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty() && self.models.is_empty()
    }

    /// The `store` section, for starting the store at startup.
    pub fn store_config(&self) -> Option<&StoreConfig> {
        self.store_config.as_ref()
    }

    /// Shares these policies through the running `store` (at startup and on every reload). The
    /// store itself is startup-only: a reloaded `store` section that differs from the running
    /// one is ignored, with a warning (returned).
    pub fn connect(&mut self, store: &Arc<Store>) -> Vec<String> {
        static BUILD: AtomicU64 = AtomicU64::new(0);
        let mut warnings = Vec::new();
        let cfg = store.config();
        if self.store_config.as_ref() != Some(cfg) {
            warnings.push(format!(
                "$.limits.store: startup-only; the running store ({}) is kept until a restart",
                cfg.url
            ));
        }
        let holder = format!(
            "{}:{}",
            store.replica(),
            BUILD.fetch_add(1, Ordering::Relaxed)
        );
        let mut leases = Leases::default();
        for st in self.keys.values_mut().chain(self.models.values_mut()) {
            let Some(st) = Arc::get_mut(st) else {
                continue;
            };
            // Only key ids and aliases name keys in Redis, never a caller's or upstream's key.
            let key = |kind: Kind| {
                format!(
                    "{}{}:{}:{}",
                    cfg.prefix,
                    st.scope.as_str(),
                    st.name,
                    kind.as_str()
                )
            };
            let p = st.policy;
            let requests = p
                .requests_per_minute
                .map(|n| RateLease::new(store, key(Kind::Requests), n));
            let tokens = p
                .tokens_per_minute
                .map(|n| RateLease::new(store, key(Kind::Tokens), n));
            let slots = p
                .max_concurrent
                .map(|n| SlotLease::new(store, key(Kind::Concurrency), holder.clone(), n));
            leases
                .rates
                .extend(requests.iter().chain(tokens.iter()).map(Arc::downgrade));
            leases.slots.extend(slots.iter().map(Arc::downgrade));
            st.shared = Some(Shared {
                requests,
                tokens,
                slots,
                fallback: (cfg.on_error == OnError::Local).then(|| Fallback::new(&p, cfg.replicas)),
            });
        }
        lease::maintain(store, leases);
        self.store = Some(store.clone());
        warnings
    }

    /// Checks and takes from every policy that applies to (key, model): concurrency, then
    /// requests, then tokens (reserving `estimated_tokens`). All or nothing: on a rejection what
    /// was already taken is given back. With a store, the leases answer when they can; when only
    /// the store can tell, the answer is [`Admit::Wait`].
    pub fn admit(&self, key: Option<&str>, model: &str, estimated_tokens: u64) -> Admit {
        if self.is_empty() {
            // No policy: nothing to count, and no clock to read.
            return Admit::Now(Ok(Admission::new(
                estimated_tokens,
                self.headers_on_success,
                false,
            )));
        }
        let Some(store) = &self.store else {
            return Admit::Now(self.admit_at(now_ns(), key, model, estimated_tokens));
        };
        // Without a deadline the shared admission never awaits, so one poll completes it.
        let fut = pin!(self.admit_shared(store, key, model, estimated_tokens, None));
        match fut.poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(Ok(a)) => Admit::Now(Ok(a)),
            Poll::Ready(Err(Refused::Rejected(r))) => Admit::Now(Err(r)),
            Poll::Ready(Err(Refused::MustWait)) | Poll::Pending => Admit::Wait,
        }
    }

    /// [`Limits::admit`] after [`Admit::Wait`]: waits for the store at most its timeout, then
    /// decides by `on_store_error`.
    pub async fn admit_waiting(
        &self,
        key: Option<&str>,
        model: &str,
        estimated_tokens: u64,
    ) -> Result<Admission, Rejection> {
        let Some(store) = &self.store else {
            return self.admit_at(now_ns(), key, model, estimated_tokens);
        };
        store::count_wait();
        let deadline = tokio::time::Instant::now() + store.config().timeout;
        match self
            .admit_shared(store, key, model, estimated_tokens, Some(deadline))
            .await
        {
            Ok(a) => Ok(a),
            Err(Refused::Rejected(r)) => Err(r),
            // Not reached with a deadline (a wait past it is `Unavailable`); refuse as unavailable.
            Err(Refused::MustWait) => {
                Err(Rejection::unavailable(Scope::Model, Kind::Requests, model))
            }
        }
    }

    /// The shared admission, part by part in the local order (concurrency, requests, tokens):
    /// each part from its lease, waiting for the store until `deadline` (`None`: not at all), or
    /// by `on_store_error` when the store cannot answer.
    async fn admit_shared(
        &self,
        store: &Arc<Store>,
        key: Option<&str>,
        model: &str,
        estimated_tokens: u64,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<Admission, Refused> {
        let mut adm = Admission::new(estimated_tokens, self.headers_on_success, true);
        if self.is_empty() {
            return Ok(adm);
        }
        let need_tokens = estimated_tokens.max(1) as i64;
        let mut fell_back = false;
        let k = key.and_then(|k| self.keys.get(k));
        let m = self.models.get(model);
        for st in [k, m].into_iter().flatten() {
            let Some(sh) = &st.shared else {
                continue;
            };
            let i = adm.held.len();
            adm.held.push(st.clone());
            for kind in [Kind::Concurrency, Kind::Requests, Kind::Tokens] {
                let got = match (kind, deadline) {
                    (Kind::Concurrency, _) if sh.slots.is_none() => continue,
                    (Kind::Requests, _) if sh.requests.is_none() => continue,
                    (Kind::Tokens, _) if sh.tokens.is_none() => continue,
                    (Kind::Concurrency, None) => sh.slots.as_ref().unwrap().try_now(),
                    (Kind::Concurrency, Some(d)) => sh.slots.as_ref().unwrap().acquire(d).await,
                    (Kind::Requests, None) => sh.requests.as_ref().unwrap().try_now(1),
                    (Kind::Requests, Some(d)) => {
                        sh.requests.as_ref().unwrap().acquire(1, 1, d).await
                    }
                    (Kind::Tokens, None) => sh.tokens.as_ref().unwrap().try_now(0),
                    (Kind::Tokens, Some(d)) => {
                        sh.tokens.as_ref().unwrap().acquire(0, need_tokens, d).await
                    }
                };
                match self.part(store, st, sh, kind, got, &mut fell_back) {
                    Ok(bit) => adm.via[i] |= bit,
                    Err(r) => {
                        if fell_back {
                            store::count_fallback(store.config().on_error);
                        }
                        adm.rollback();
                        return Err(r);
                    }
                }
            }
        }
        if fell_back {
            store::count_fallback(store.config().on_error);
        }
        // Every check passed: reserve the token estimate.
        let now = now_ns();
        for (st, via) in adm.held.iter().zip(adm.via) {
            let Some(sh) = &st.shared else {
                continue;
            };
            if let (true, Some(t)) = (via & TOK_LEASE != 0, &sh.tokens) {
                t.charge(estimated_tokens as i64);
            }
            if let (true, Some(t)) = (via & TOK_LOCAL != 0, fallback_tokens(sh)) {
                t.charge(now, estimated_tokens);
            }
        }
        Ok(adm)
    }

    /// One part of a shared admission, from what its lease could do: the `via` bit to record, or
    /// the refusal.
    fn part(
        &self,
        store: &Store,
        st: &PolicyState,
        sh: &Shared,
        kind: Kind,
        got: Got,
        fell_back: &mut bool,
    ) -> Result<u8, Refused> {
        let (lease_bit, local_bit) = match kind {
            Kind::Requests => (REQ_LEASE, REQ_LOCAL),
            Kind::Tokens => (TOK_LEASE, TOK_LOCAL),
            Kind::Concurrency => (SLOT_LEASE, SLOT_LOCAL),
        };
        match got {
            Got::Yes => Ok(lease_bit),
            Got::WouldWait => Err(Refused::MustWait),
            Got::Empty(wait) => Err(Refused::Rejected(Rejection::new(st, kind, now_ns(), wait))),
            Got::Unavailable => {
                *fell_back = true;
                match (store.config().on_error, &sh.fallback) {
                    (OnError::Admit, _) | (OnError::Local, None) => Ok(0),
                    (OnError::Reject, _) => Err(Refused::Rejected(Rejection::unavailable(
                        st.scope, kind, &st.name,
                    ))),
                    (OnError::Local, Some(fb)) => {
                        let now = now_ns();
                        let refused = |wait| Refused::Rejected(Rejection::new(st, kind, now, wait));
                        match kind {
                            Kind::Concurrency => {
                                let max = fb.max_concurrent.unwrap_or(u32::MAX);
                                if fb.inflight.fetch_add(1, Ordering::Relaxed) >= max {
                                    fb.inflight.fetch_sub(1, Ordering::Relaxed);
                                    return Err(refused(Duration::from_secs(1)));
                                }
                            }
                            Kind::Requests => {
                                if let Some(g) = &fb.requests {
                                    g.take(now, 1)
                                        .map_err(|w| refused(Duration::from_nanos(w)))?;
                                }
                            }
                            Kind::Tokens => {
                                if let Some(g) = &fb.tokens {
                                    g.check(now).map_err(|w| refused(Duration::from_nanos(w)))?;
                                }
                            }
                        }
                        Ok(local_bit)
                    }
                }
            }
        }
    }

    fn admit_at(
        &self,
        now: u64,
        key: Option<&str>,
        model: &str,
        estimated_tokens: u64,
    ) -> Result<Admission, Rejection> {
        // Without a policy (`admit` answers that itself) both lookups find nothing.
        let mut adm = Admission::new(estimated_tokens, self.headers_on_success, false);
        let k = key.and_then(|k| self.keys.get(k));
        let m = self.models.get(model);
        for st in [k, m].into_iter().flatten() {
            if let Some(max) = st.policy.max_concurrent {
                let prev = st.inflight.fetch_add(1, Ordering::Relaxed);
                if prev >= max {
                    st.inflight.fetch_sub(1, Ordering::Relaxed);
                    adm.rollback();
                    return Err(Rejection::new(
                        st,
                        Kind::Concurrency,
                        now,
                        Duration::from_secs(1),
                    ));
                }
            }
            // Pushed now so that the rollback below releases the slot just taken.
            adm.held.push(st.clone());
            if let Some(r) = &st.requests {
                if let Err(wait) = r.take(now, 1) {
                    adm.held.pop();
                    release_slot(st);
                    adm.rollback();
                    return Err(Rejection::new(
                        st,
                        Kind::Requests,
                        now,
                        Duration::from_nanos(wait),
                    ));
                }
            }
            if let Some(t) = &st.tokens {
                if let Err(wait) = t.check(now) {
                    if let Some(r) = &st.requests {
                        r.refund(1);
                    }
                    adm.held.pop();
                    release_slot(st);
                    adm.rollback();
                    return Err(Rejection::new(
                        st,
                        Kind::Tokens,
                        now,
                        Duration::from_nanos(wait),
                    ));
                }
            }
        }
        // Every check passed: reserve the token estimate.
        for st in &adm.held {
            if let Some(t) = &st.tokens {
                t.charge(now, estimated_tokens);
            }
        }
        Ok(adm)
    }
}

fn release_slot(st: &PolicyState) {
    if st.policy.max_concurrent.is_some() {
        st.inflight.fetch_sub(1, Ordering::Relaxed);
    }
}

fn fallback_tokens(sh: &Shared) -> Option<&Gcra> {
    sh.fallback.as_ref().and_then(|f| f.tokens.as_ref())
}

impl Admission {
    fn new(reserved_tokens: u64, headers: bool, shared: bool) -> Admission {
        Admission {
            held: Vec::new(),
            reserved_tokens,
            settled: false,
            headers,
            shared,
            via: [0; 2],
        }
    }

    /// Undo a partial admission (before any token was reserved).
    fn rollback(&mut self) {
        if self.shared {
            self.release_shared(true);
            self.held.clear();
            self.settled = true;
            return;
        }
        for st in self.held.drain(..) {
            if let Some(r) = &st.requests {
                r.refund(1);
            }
            release_slot(&st);
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
        let now = now_ns();
        if self.shared {
            return self.settle_shared(now, actual_tokens);
        }
        for st in &self.held {
            if let Some(t) = &st.tokens {
                if actual_tokens >= self.reserved_tokens {
                    t.charge(now, actual_tokens - self.reserved_tokens);
                } else {
                    t.refund(self.reserved_tokens - actual_tokens);
                }
            }
        }
    }

    /// [`Admission::settle`] where each policy's tokens were reserved: its lease or its fallback.
    fn settle_shared(&self, now: u64, actual: u64) {
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
            if let (true, Some(t)) = (via & TOK_LOCAL != 0, fallback_tokens(sh)) {
                if actual >= reserved {
                    t.charge(now, actual - reserved);
                } else {
                    t.refund(reserved - actual);
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
                fb.inflight.fetch_sub(1, Ordering::Relaxed);
            }
            if !undo {
                continue;
            }
            if let (true, Some(l)) = (via & REQ_LEASE != 0, &sh.requests) {
                l.refund(1);
            }
            if let (true, Some(g)) = (
                via & REQ_LOCAL != 0,
                sh.fallback.as_ref().and_then(|f| f.requests.as_ref()),
            ) {
                g.refund(1);
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
            .find(|s| s.requests.is_some() || s.tokens.is_some())
            .map(|st| policy_headers(st, now_ns()))
            .unwrap_or_default()
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        if self.shared {
            return self.release_shared(false);
        }
        for st in &self.held {
            release_slot(st);
        }
    }
}

/// OpenAI-style duration: `250ms`, `12s`, `1m30s`.
fn fmt_duration(d: Duration) -> String {
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
fn policy_headers(st: &PolicyState, now: u64) -> Vec<(HeaderName, HeaderValue)> {
    let mut out = Vec::with_capacity(9);
    let mut push = |kind: Kind, limit: &HeaderValue, remaining: u64, reset: Duration| {
        let [l, r, z] = names(kind);
        out.push((l, limit.clone()));
        out.push((r, arena::decimal(remaining)));
        out.push((z, duration_value(reset)));
    };
    // A shared policy's state as this replica knows it: its lease plus what Redis said was left.
    let sh = st.shared.as_ref();
    if let Some(r) = &st.requests {
        let (left, reset) = match sh.and_then(|s| s.requests.as_ref()) {
            Some(l) => l.remaining(),
            None => (r.remaining(now), r.reset(now)),
        };
        push(Kind::Requests, &r.limit_value, left, reset);
    }
    if let Some(t) = &st.tokens {
        let (left, reset) = match sh.and_then(|s| s.tokens.as_ref()) {
            Some(l) => l.remaining(),
            None => (t.remaining(now), t.reset(now)),
        };
        push(Kind::Tokens, &t.limit_value, left, reset);
    }
    if let (Some(max), Some(v)) = (st.policy.max_concurrent, &st.concurrency_value) {
        let left = match sh.and_then(|s| s.slots.as_ref()) {
            Some(l) => l.remaining().min(u64::from(max)),
            None => u64::from(max - st.inflight.load(Ordering::Relaxed).min(max)),
        };
        push(Kind::Concurrency, v, left, Duration::ZERO);
    }
    out
}

impl Rejection {
    fn new(st: &PolicyState, kind: Kind, now: u64, retry_after: Duration) -> Self {
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
    fn unavailable(scope: Scope, kind: Kind, name: &str) -> Self {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    const S: u64 = 1_000_000_000;

    fn limits(json: &str, keys: &[&str], models: &[&str]) -> (Limits, Vec<ConfigError>) {
        let v: Value = serde_json::from_str(json).unwrap();
        let keys: Vec<String> = keys.iter().map(|s| s.to_string()).collect();
        let mut errs = Vec::new();
        let l = Limits::from_config(Some(&v), &keys, models, &mut errs, &mut Vec::new());
        (l, errs)
    }

    #[test]
    fn requests_per_minute_burst_then_refill() {
        let (l, e) = limits(r#"{"keys":{"a":{"requests_per_minute":60}}}"#, &["a"], &[]);
        assert!(e.is_empty());
        let t0 = 100 * S;
        for i in 0..60 {
            assert!(l.admit_at(t0, Some("a"), "m", 0).is_ok(), "request {i}");
        }
        let r = l.admit_at(t0, Some("a"), "m", 0).unwrap_err();
        assert_eq!(r.kind, Kind::Requests);
        assert_eq!(r.retry_after_secs(), 1);
        // One per second refills.
        assert!(l.admit_at(t0 + S, Some("a"), "m", 0).is_ok());
        assert!(l.admit_at(t0 + S, Some("a"), "m", 0).is_err());
        // Other keys and the open path are not affected.
        assert!(l.admit_at(t0, Some("b"), "m", 0).is_ok());
        assert!(l.admit_at(t0, None, "m", 0).is_ok());
    }

    #[test]
    fn tokens_checked_before_charged_after() {
        let (l, _) = limits(
            r#"{"models":{"m":{"tokens_per_minute":1000}}}"#,
            &[],
            &["m"],
        );
        let t0 = 100 * S;
        let mut a = l.admit_at(t0, None, "m", 100).unwrap();
        // Real usage far above the estimate: the bucket goes into debt (overshoot).
        a.settle(5000);
        let r = l.admit_at(t0, None, "m", 10).unwrap_err();
        assert_eq!(r.kind, Kind::Tokens);
        // Debt of 4000 tokens at 1000/min: about 4 minutes until any budget returns.
        assert!(
            r.retry_after >= Duration::from_secs(239),
            "{:?}",
            r.retry_after
        );
        assert!(l.admit_at(t0 + 241 * S, None, "m", 10).is_ok());
    }

    #[test]
    fn settle_refunds_overestimate() {
        let (l, _) = limits(
            r#"{"models":{"m":{"tokens_per_minute":1000}}}"#,
            &[],
            &["m"],
        );
        let t0 = 100 * S;
        let mut a = l.admit_at(t0, None, "m", 900).unwrap();
        a.settle(100);
        let st = &l.models["m"];
        let rem = st.tokens.as_ref().unwrap().remaining(t0);
        assert!((899..=900).contains(&rem), "{rem}");
    }

    #[test]
    fn concurrency_guard_releases_on_drop() {
        let (l, _) = limits(
            r#"{"default_key":{"max_concurrent":2},"models":{"m":{"requests_per_minute":1000}}}"#,
            &["a", "b"],
            &["m"],
        );
        let a1 = l.admit_at(now_ns(), Some("a"), "m", 0).unwrap();
        let a2 = l.admit_at(now_ns(), Some("a"), "m", 0).unwrap();
        let r = l.admit_at(now_ns(), Some("a"), "m", 0).unwrap_err();
        assert_eq!(r.kind, Kind::Concurrency);
        assert_eq!(r.scope, Scope::Key);
        // Key b has its own slots.
        let _b = l.admit_at(now_ns(), Some("b"), "m", 0).unwrap();
        drop(a1);
        let a3 = l.admit_at(now_ns(), Some("a"), "m", 0).unwrap();
        drop((a2, a3));
        assert_eq!(l.keys["a"].inflight(), 0);
    }

    #[test]
    fn rejection_rolls_back_earlier_policies() {
        let (l, _) = limits(
            r#"{"keys":{"a":{"requests_per_minute":100,"max_concurrent":5}},
                "models":{"m":{"requests_per_minute":1}}}"#,
            &["a"],
            &["m"],
        );
        let t0 = 100 * S;
        let _first = l.admit_at(t0, Some("a"), "m", 0).unwrap();
        let r = l.admit_at(t0, Some("a"), "m", 0).unwrap_err();
        assert_eq!((r.scope, r.kind), (Scope::Model, Kind::Requests));
        let k = &l.keys["a"];
        assert_eq!(k.inflight(), 1, "the rejected request's slot was released");
        assert_eq!(k.requests.as_ref().unwrap().remaining(t0), 99);
    }

    #[test]
    fn rejection_headers() {
        let (l, _) = limits(
            r#"{"keys":{"a":{"requests_per_minute":2,"tokens_per_minute":1000}},"headers_on_success":true}"#,
            &["a"],
            &[],
        );
        let t0 = 100 * S;
        let _a = l.admit_at(t0, Some("a"), "m", 10).unwrap();
        let h: HeaderMap = _a.headers().into_iter().collect();
        assert_eq!(h["x-ratelimit-limit-requests"], "2");
        assert_eq!(h["x-ratelimit-limit-tokens"], "1000");
        let _b = l.admit_at(t0, Some("a"), "m", 10).unwrap();
        let r = l.admit_at(t0, Some("a"), "m", 10).unwrap_err();
        let mut h = HeaderMap::new();
        r.apply_headers(&mut h);
        assert_eq!(h["retry-after"], "30");
        assert_eq!(h["x-ratelimit-limit-requests"], "2");
        assert_eq!(h["x-ratelimit-remaining-requests"], "0");
        assert_eq!(h["x-ratelimit-limit-tokens"], "1000");
        assert!(h.contains_key("x-ratelimit-reset-tokens"));
        assert!(h.contains_key("x-ratelimit-reset-requests"));
        let e = r.to_gw_error();
        assert_eq!(e.status, 429);
        assert_eq!(e.retry_after, Some(30));
    }

    #[test]
    fn config_errors_have_paths() {
        let (_, e) = limits(
            r#"{"keys":{"zz":{"requests_per_minute":1}},"models":{"m":{"max_concurrent":0},"q":{}}}"#,
            &["a"],
            &["m"],
        );
        let p: Vec<_> = e.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            p,
            [
                "$.limits.keys.zz",
                "$.limits.models.m.max_concurrent",
                "$.limits.models.q"
            ]
        );
        let (_, e) = limits(r#"{"modles":{}}"#, &[], &[]);
        assert_eq!(e[0].path, "$.limits");
    }

    #[test]
    fn store_section_is_checked_and_divides_the_fallback() {
        let (l, e) = limits(
            r#"{"models":{"m":{"requests_per_minute":10,"max_concurrent":5}},
                "store":{"url":"redis://h:1/0","replicas":3}}"#,
            &[],
            &["m"],
        );
        assert!(e.is_empty(), "{e:?}");
        assert_eq!(l.store_config().unwrap().replicas, 3);
        // Divided by the replicas, rounded up, never below one.
        let fb = Fallback::new(&l.models["m"].policy, 3);
        assert_eq!(fb.max_concurrent, Some(2));
        assert_eq!(fb.requests.unwrap().interval, WINDOW_NS / 4);
        let fb = Fallback::new(&l.models["m"].policy, 50);
        assert_eq!(fb.max_concurrent, Some(1));
        let (_, e) = limits(r#"{"store":{"url":"ftp://h"}}"#, &[], &[]);
        assert_eq!(e[0].path, "$.limits.store.url");
        // Without a connected store admission is the local one, even with the section.
        assert!(matches!(l.admit(None, "m", 0), Admit::Now(Ok(_))));
    }

    #[test]
    fn durations() {
        assert_eq!(fmt_duration(Duration::from_millis(250)), "250ms");
        assert_eq!(fmt_duration(Duration::from_millis(1200)), "2s");
        assert_eq!(fmt_duration(Duration::from_secs(90)), "1m30s");
    }

    /// Cost of one admission against one shared policy, single-threaded and with every core
    /// hammering the same policy (the worst case for the global atomics). Run with
    /// `cargo test -p gateway --release limits::tests::bench_admit -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn bench_admit() {
        let (l, _) = limits(
            r#"{"keys":{"a":{"requests_per_minute":1000000000,"tokens_per_minute":1000000000,"max_concurrent":100000}}}"#,
            &["a"],
            &[],
        );
        let l = Arc::new(l);
        let n = 2_000_000u64;
        let threads = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1);
        for t in [1, threads] {
            let start = Instant::now();
            let hs: Vec<_> = (0..t)
                .map(|_| {
                    let l = l.clone();
                    std::thread::spawn(move || {
                        for _ in 0..n {
                            let mut a = l.admit_at(now_ns(), Some("a"), "m", 10).unwrap();
                            a.settle(12);
                        }
                    })
                })
                .collect();
            for h in hs {
                h.join().unwrap();
            }
            let el = start.elapsed();
            println!(
                "admit+settle+drop, {t} thread(s): {:.1} ns per request per thread",
                el.as_nanos() as f64 / n as f64
            );
        }
    }
}
