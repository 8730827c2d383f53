//! The production posture: who may call ([`auth`]), how much ([`limits`]), what is counted
//! ([`metrics`]) and what is written down ([`access_log`], the per-request record that also settles
//! the limiter's token charge and feeds the metrics). Each module owns its config section and its
//! validation (`from_config`), called by [`crate::config`].
//!
//! Order inside the layer: `auth` and `limits` use nothing else here; `metrics` names the limits'
//! kinds and scopes; `access_log` uses all three.

pub mod access_log;
pub mod auth;
pub mod limits;
pub mod metrics;
