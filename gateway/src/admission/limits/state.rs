//! The live state of one policy for one key or one model: its local limiter and, with a store,
//! this replica's leases of it.

use std::sync::Arc;

use http::HeaderValue;

use super::lease::RateLease;
use super::limiter::{Gcra, Local};
use super::policy::{Policy, Scope};
use super::slot_lease::SlotLease;

#[derive(Debug)]
pub(super) struct PolicyState {
    pub(super) scope: Scope,
    pub(super) name: String,
    pub(super) policy: Policy,
    pub(super) local: Local,
    pub(super) concurrency_value: Option<HeaderValue>,
    /// With a store: this replica's leases of the policy, and its fallback.
    pub(super) shared: Option<Shared>,
}

/// A policy shared through the store.
#[derive(Debug)]
pub(super) struct Shared {
    pub(super) requests: Option<Arc<RateLease>>,
    pub(super) tokens: Option<Arc<RateLease>>,
    pub(super) slots: Option<Arc<SlotLease>>,
    /// `on_store_error: local`: the policy divided by the replica count.
    pub(super) fallback: Option<Local>,
}

impl Shared {
    /// The fallback's token bucket, if it limits tokens.
    pub(super) fn fallback_tokens(&self) -> Option<&Gcra> {
        self.fallback.as_ref().and_then(|f| f.tokens.as_ref())
    }
}

/// Where each part of a held shared policy was taken from (bits of `Admission::via`).
pub(super) const REQ_LEASE: u8 = 1;
pub(super) const REQ_LOCAL: u8 = 2;
pub(super) const TOK_LEASE: u8 = 4;
pub(super) const TOK_LOCAL: u8 = 8;
pub(super) const SLOT_LEASE: u8 = 16;
pub(super) const SLOT_LOCAL: u8 = 32;

impl PolicyState {
    pub(super) fn new(scope: Scope, name: &str, policy: Policy) -> Self {
        PolicyState {
            scope,
            name: name.to_owned(),
            policy,
            local: Local::new(&policy),
            concurrency_value: policy.max_concurrent.map(HeaderValue::from),
            shared: None,
        }
    }
}
