//! What is known of one request as it goes: its timings, route, caller, attempts, usage and the
//! posture it holds (the admission, the routing lease). Filled in by [`super::Record`], read
//! once when the request ends: by the settlement and the metrics sample there, and by
//! [`super::access_log`] for the line.

use std::sync::Arc;
use std::time::{Instant, SystemTime};

use http::HeaderValue;

use crate::admission::limits::{Admission, Rejection, Scope};
use crate::dialect::Dialect;
use crate::json::usage::Usage;
use crate::routing::health::Lease;
use crate::routing::Route;
use crate::telemetry::metrics::Attempted;
use crate::telemetry::traces::Trace;

pub(super) struct Facts {
    pub(super) t0: Instant,
    pub(super) start_wall: SystemTime,
    pub(super) route: Dialect,
    pub(super) request_id: HeaderValue,
    pub(super) model_label: u16,
    /// The configured route (alias, provider) once known.
    pub(super) target: Option<Arc<Route>>,
    /// The client's model when it is not a configured alias (truncated).
    pub(super) asked_model: Option<String>,
    pub(super) key_id: Option<Arc<str>>,
    pub(super) status: u16,
    pub(super) stream: bool,
    pub(super) upstream_start: Option<Instant>,
    pub(super) upstream_end: Option<Instant>,
    pub(super) first_token: Option<Instant>,
    pub(super) usage: Usage,
    pub(super) admission: Option<Admission>,
    /// The spend budgets' admission (its reservation), settled with the cost at the end.
    pub(super) budget: Option<Admission>,
    /// Refused by a spend budget.
    pub(super) over_budget: Option<Scope>,
    pub(super) rejected: Option<Rejection>,
    pub(super) error: Option<String>,
    pub(super) stream_error: Option<String>,
    /// The request parts translation dropped (the alias's `drop` list), comma separated.
    pub(super) dropped: Option<String>,
    /// The route's deployment of the latest attempt (the one that served, if one did), and its
    /// upstream's metrics label.
    pub(super) deployment: Option<u8>,
    pub(super) upstream_label: u16,
    pub(super) attempts: u8,
    /// How the latest attempt ended, once it did.
    pub(super) ended: Option<Tried>,
    /// Each earlier attempt: it failed and another deployment was tried after it.
    pub(super) failed: Vec<Tried>,
    /// A retry the worker's retry budget did not allow.
    pub(super) retry_budget_exhausted: bool,
    /// The serving attempt's place in flight on its upstream, held until the request ends.
    pub(super) lease: Option<Lease>,
    /// What it cost in nanodollars, when its deployment has a price (set when it finishes, or
    /// when a buffered answer's header is written).
    pub(super) cost: Option<u64>,
    /// A sampled request's trace (`telemetry/traces/`).
    pub(super) trace: Option<Box<Trace>>,
    pub(super) finished: bool,
}

/// One attempt as it ended: its deployment, the upstream's status (0 when there was no answer),
/// and what the metrics count of it.
#[derive(Clone, Copy)]
pub(super) struct Tried {
    pub(super) deployment: u8,
    pub(super) status: u16,
    pub(super) counted: Attempted,
}
