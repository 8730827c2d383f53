//! Admission: whether a request may go on, and what it is charged. Who may call ([`auth`]: caller
//! keys, authenticated and authorized for the model), how much ([`limits`]: rate limits, local or
//! shared through a store) and at what cost ([`spend`]: spend budgets, which are limits policies
//! of microdollars, and the cost header). Each module owns its config section and its validation
//! (`from_config`), called by [`crate::config`]; a request's use of them (its admission, its
//! settlement) is bookkept by [`crate::exchange`].
//!
//! Four of the config postures live here (`keys`, `rate-limits`, `shared-limits`, `budgets`;
//! [`crate::config::postures`]); what is observed of a request is in [`crate::telemetry`], which
//! names the limits' kinds and scopes and so sits above this layer.
//!
//! Order inside the layer: `auth` and `limits` use nothing else here; `spend` builds its budgets
//! on `limits`.

pub mod auth;
pub mod limits;
pub mod spend;
