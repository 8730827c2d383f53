//! The production posture: who may call ([`auth`]), how much ([`limits`]; and at what cost,
//! [`spend`]'s budgets, which are limits policies of microdollars) and what is counted
//! ([`metrics`]), and what each request did ([`traces`], OpenTelemetry spans). Each module owns its config section and its validation (`from_config`), called
//! by [`crate::config`]; a request's use of them is bookkept by [`crate::exchange`].
//!
//! Order inside the layer: `auth` and `limits` use nothing else here; `metrics` names the limits'
//! kinds and scopes; `spend` builds its budgets on `limits`.

pub mod auth;
pub mod limits;
pub mod metrics;
pub mod spend;
pub mod traces;
