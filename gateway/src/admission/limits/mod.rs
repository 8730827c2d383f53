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
//! `on_store_error: local`, with every limit divided by `replicas`, empty as of the moment an
//! outage began (a GCRA's one timestamp moved forward, never a bucket recreated full: an outage
//! admits at most what this replica's part refills while it lasts), and what it admits is owed
//! to the shared bucket when the store answers again. Shared counters are not reset by a reload
//! (they live in Redis).

pub mod admission;
pub mod clock;
pub mod lease;
mod limiter;
mod local;
pub mod policy;
pub mod response;
pub mod scripts;
mod shared;
pub mod slot_lease;
mod state;
pub mod store;
mod store_config;
mod store_stats;
mod upkeep;

use crate::routing::AliasMap;
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use serde::Deserialize;
use serde_json::Value;

use crate::admission::limits::clock::now_ns;
use crate::admission::limits::policy::{LimitsConfig, Policy};
use crate::admission::limits::shared::Refused;
use crate::admission::limits::state::PolicyState;
use crate::admission::limits::store::{Store, StoreConfig};
use crate::admission::limits::upkeep::Leases;
use crate::checker::Checker;

pub use admission::Admission;
pub use policy::{Kind, Scope};
pub use response::Rejection;

/// All policies; immutable apart from the atomics, rebuilt on reload.
#[derive(Debug, Default)]
pub struct Limits {
    keys: AliasMap<Arc<PolicyState>>,
    models: AliasMap<Arc<PolicyState>>,
    headers_on_success: bool,
    /// The store the policies are shared through, if any.
    store: Option<Arc<Store>>,
    /// Whether the section names a store (started or not: checking starts none).
    store_configured: bool,
}

/// A [`Limits`]' model policies by alias index ([`Limits::by_alias_index`]).
#[derive(Debug, Default)]
pub struct ModelPolicies(Box<[Option<Arc<PolicyState>>]>);

/// An alias and where its model policy is: at `index` of `models`.
#[derive(Clone, Copy)]
pub struct AliasAt<'a> {
    pub models: &'a ModelPolicies,
    pub index: usize,
    pub alias: &'a str,
}

/// What the `limits.store` section is assembled with.
pub enum StoreSource<'a> {
    /// Checking only (`gateway validate`, `gateway paths`): the section is checked, nothing is
    /// started, and the policies are local.
    CheckOnly,
    /// Serving's startup: the section's store is started here, once (connected, or known to be
    /// unreachable, before the first request).
    Start,
    /// A reload: the store started at startup, if any. The section is startup-only: a reloaded
    /// one that differs from the running store is ignored, with a warning.
    Running(Option<&'a Arc<Store>>),
}

impl StoreSource<'_> {
    /// The store to share the policies through, given the checked section (`None`: absent or
    /// with errors).
    fn resolve(self, c: &mut Checker, section: Option<&StoreConfig>) -> Option<Arc<Store>> {
        match (self, section) {
            (StoreSource::CheckOnly, _) | (StoreSource::Start, None) => None,
            (StoreSource::Start, Some(cfg)) => match Store::start(cfg) {
                Ok(s) => Some(s),
                Err(e) => {
                    c.err("$.limits.store", format!("{e:#}"));
                    None
                }
            },
            (StoreSource::Running(Some(s)), section) => {
                if section != Some(s.config()) {
                    c.warnings.push(format!(
                        "$.limits.store: startup-only; the running store ({}) is kept until a restart",
                        s.config().url
                    ));
                }
                Some(s.clone())
            }
            (StoreSource::Running(None), Some(_)) => {
                c.warnings
                    .push("$.limits.store: startup-only; limits stay local until a restart".into());
                None
            }
            (StoreSource::Running(None), None) => None,
        }
    }
}

/// Builds the states of policies, each shared through the store when there is one, and starts
/// the upkeep of their leases.
struct Builder<'s> {
    shared: Option<(&'s Arc<Store>, String, Leases)>,
}

impl<'s> Builder<'s> {
    fn new(store: Option<&'s Arc<Store>>) -> Self {
        Builder {
            shared: store.map(|s| (s, shared::holder(s), Leases::default())),
        }
    }

    fn build(&mut self, scope: Scope, name: &str, p: Policy) -> Arc<PolicyState> {
        let mut st = PolicyState::new(scope, name, p);
        if let Some((s, holder, leases)) = &mut self.shared {
            st.shared = Some(shared::share(&st, s, holder, leases));
        }
        Arc::new(st)
    }

    fn finish(self) {
        if let Some((s, _, leases)) = self.shared {
            upkeep::maintain(s, leases);
        }
    }
}

/// The outcome of [`Limits::admit`].
#[derive(Debug)]
pub enum Admit {
    Now(Result<Admission, Rejection>),
    /// Only the store can tell (a lease ran out): call [`Limits::admit_waiting`].
    Wait,
}

impl Limits {
    /// Builds the policies from the top-level `limits` value. `key_ids` are the configured key ids
    /// and `aliases` the configured model aliases; a policy naming anything else is an error (a
    /// typo would otherwise leave that key or model unlimited). With a store (`store`, see
    /// [`StoreSource`]) every policy is built shared through it, with its leases.
    pub fn from_config(
        c: &mut Checker,
        v: Option<&Value>,
        key_ids: &[String],
        aliases: &[&str],
        store: StoreSource,
    ) -> Limits {
        let cfg = match v.map(LimitsConfig::deserialize) {
            None => LimitsConfig::default(),
            Some(Ok(cfg)) => cfg,
            Some(Err(e)) => {
                c.err("$.limits", e.to_string());
                return Limits::default();
            }
        };
        let store_config = cfg
            .store
            .as_ref()
            .and_then(|v| StoreConfig::from_config(c, v));
        let store = store.resolve(c, store_config.as_ref());
        let mut b = Builder::new(store.as_ref());
        let mut out = Limits {
            headers_on_success: cfg.headers_on_success,
            store_configured: store_config.is_some(),
            ..Limits::default()
        };
        if let Some(d) = &cfg.default_key {
            if policy::check(c, "$.limits.default_key", d) {
                for id in key_ids {
                    if !cfg.keys.contains_key(id) {
                        out.keys.insert(id.clone(), b.build(Scope::Key, id, *d));
                    }
                }
            }
            if key_ids.is_empty() {
                c.warnings.push(
                    "$.limits.default_key: no keys are configured, so no key policy applies".into(),
                );
            }
        }
        for (id, p) in &cfg.keys {
            let path = format!("$.limits.keys.{id}");
            if !key_ids.iter().any(|k| k == id) {
                c.err(
                    path,
                    format!("no key with id {id:?} is configured in $.keys"),
                );
                continue;
            }
            if policy::check(c, &path, p) {
                out.keys.insert(id.clone(), b.build(Scope::Key, id, *p));
            }
        }
        for (alias, p) in &cfg.models {
            let path = format!("$.limits.models.{alias}");
            if !aliases.contains(&alias.as_str()) {
                c.err(
                    path,
                    format!("no model alias {alias:?} is configured in $.models"),
                );
                continue;
            }
            if policy::check(c, &path, p) {
                out.models
                    .insert(alias.clone(), b.build(Scope::Model, alias, *p));
            }
        }
        b.finish();
        out.store = store;
        out
    }

    /// Policies another posture builds (the spend budgets of `admission/spend`: tokens counted in
    /// microdollars over their period), by key id and by alias, shared through `store` exactly as
    /// the `limits` section's are (the same leases, `on_store_error` and fallback).
    pub fn of_policies(
        keys: impl IntoIterator<Item = (String, Policy)>,
        models: impl IntoIterator<Item = (String, Policy)>,
        store: Option<&Arc<Store>>,
    ) -> Limits {
        let mut b = Builder::new(store);
        let mut out = Limits {
            store_configured: store.is_some(),
            store: store.cloned(),
            ..Limits::default()
        };
        for (id, p) in keys {
            let st = b.build(Scope::Key, &id, p);
            out.keys.insert(id, st);
        }
        for (alias, p) in models {
            let st = b.build(Scope::Model, &alias, p);
            out.models.insert(alias, st);
        }
        b.finish();
        out
    }

    /// Whether the `store` section names a store (the `shared-limits` posture), whether or not
    /// it was started.
    pub fn store_configured(&self) -> bool {
        self.store_configured
    }

    /// The store these policies are shared through, if any (started at startup).
    pub fn store(&self) -> Option<&Arc<Store>> {
        self.store.as_ref()
    }

    /// Whether no policy is configured (then admission costs nothing).
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty() && self.models.is_empty()
    }

    /// The policies that apply to (key, model): the key's, then the model's.
    fn policies(&self, key: Option<&str>, model: &str) -> [Option<&Arc<PolicyState>>; 2] {
        [key.and_then(|k| self.keys.get(k)), self.models.get(model)]
    }

    /// The model policies by alias index ([`crate::routing::Route::index`]): `aliases` are every
    /// configured alias, and an alias's index is its place among them sorted. Admission through
    /// it ([`Limits::admit_at_alias`]) finds the model's policy without hashing the alias.
    pub fn by_alias_index(&self, aliases: &[&str]) -> ModelPolicies {
        let mut sorted = aliases.to_vec();
        sorted.sort_unstable();
        ModelPolicies(
            sorted
                .iter()
                .map(|a| self.models.get(*a).cloned())
                .collect(),
        )
    }

    /// The policies that apply to (key, the alias `at` points to).
    fn policies_at<'a>(
        &'a self,
        key: Option<&str>,
        at: AliasAt<'a>,
    ) -> [Option<&'a Arc<PolicyState>>; 2] {
        let (index, model) = (at.index, at.alias);
        let m = at.models.0.get(index).and_then(Option::as_ref);
        debug_assert!(
            m.is_none_or(|p| p.name == model),
            "{model} is not at {index}"
        );
        debug_assert!(m.is_some() || !self.models.contains_key(model));
        [key.and_then(|k| self.keys.get(k)), m]
    }

    /// What an admission is when no policy is configured.
    fn open(&self, estimated_tokens: u64) -> Admit {
        // No policy: nothing to count, and no clock to read.
        Admit::Now(Ok(Admission::new(
            estimated_tokens,
            self.headers_on_success,
            false,
        )))
    }

    /// Checks and takes from every policy that applies to (key, model): concurrency, then
    /// requests, then tokens (reserving `estimated_tokens`). All or nothing: on a rejection what
    /// was already taken is given back. With a store, the leases answer when they can; when only
    /// the store can tell, the answer is [`Admit::Wait`].
    pub fn admit(&self, key: Option<&str>, model: &str, estimated_tokens: u64) -> Admit {
        if self.is_empty() {
            return self.open(estimated_tokens);
        }
        self.admit_policies(self.policies(key, model), estimated_tokens)
    }

    /// [`Limits::admit`] with the model's policy found where `at` points (in a table built by
    /// [`Limits::by_alias_index`] from this `Limits`).
    pub fn admit_at_alias(&self, key: Option<&str>, at: AliasAt<'_>, estimated: u64) -> Admit {
        if self.is_empty() {
            return self.open(estimated);
        }
        self.admit_policies(self.policies_at(key, at), estimated)
    }

    #[inline]
    fn admit_policies(&self, policies: [Option<&Arc<PolicyState>>; 2], estimated: u64) -> Admit {
        let Some(store) = &self.store else {
            return Admit::Now(local::admit(
                now_ns(),
                policies,
                estimated,
                self.headers_on_success,
            ));
        };
        // Without a deadline the shared admission never awaits, so one poll completes it.
        let fut = pin!(shared::admit(
            store,
            policies,
            estimated,
            self.headers_on_success,
            None,
        ));
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
        self.admit_waiting_policies(self.policies(key, model), model, estimated_tokens)
            .await
    }

    /// [`Limits::admit_at_alias`] after [`Admit::Wait`].
    pub async fn admit_waiting_at_alias(
        &self,
        key: Option<&str>,
        at: AliasAt<'_>,
        estimated: u64,
    ) -> Result<Admission, Rejection> {
        let policies = self.policies_at(key, at);
        self.admit_waiting_policies(policies, at.alias, estimated)
            .await
    }

    async fn admit_waiting_policies(
        &self,
        policies: [Option<&Arc<PolicyState>>; 2],
        model: &str,
        estimated_tokens: u64,
    ) -> Result<Admission, Rejection> {
        let Some(store) = &self.store else {
            return local::admit(
                now_ns(),
                policies,
                estimated_tokens,
                self.headers_on_success,
            );
        };
        store::count_wait();
        let deadline = tokio::time::Instant::now() + store.config().timeout;
        match shared::admit(
            store,
            policies,
            estimated_tokens,
            self.headers_on_success,
            Some(deadline),
        )
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

    /// Local admission at `now` (without a store): the tests' clock.
    #[cfg(test)]
    fn admit_at(
        &self,
        now: u64,
        key: Option<&str>,
        model: &str,
        estimated_tokens: u64,
    ) -> Result<Admission, Rejection> {
        local::admit(
            now,
            self.policies(key, model),
            estimated_tokens,
            self.headers_on_success,
        )
    }
}

#[cfg(test)]
mod tests;
