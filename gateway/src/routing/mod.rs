//! Routing: the `models` section (each client-visible alias to one or more deployments, a
//! provider and the model name it knows), the `routing` section (retries, retry budget,
//! cooldown), the per-worker state that balances and rests deployments, and `GET /v1/models`.
//!
//! An alias with one deployment keeps no routing state: its request goes where it always went.
//! With several, each attempt is chosen by [`health::pick`] and its outcome reported on its
//! [`health::Lease`]; the attempt loop itself is in `serve/attempts.rs`.

pub mod alias_hash;
pub mod health;
pub mod models;
pub mod policy;
pub mod route;

pub use alias_hash::AliasMap;
pub use models::{models_body, section};
pub use policy::Policy;
pub use route::{Deployment, Route, Strategy, Table};
