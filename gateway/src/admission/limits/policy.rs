//! The `limits` section as written in the config file: the policies, what a policy limits
//! ([`Kind`]) and whom ([`Scope`]), and the checks of a policy's numbers.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use crate::checker::Checker;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    #[serde(default)]
    pub requests_per_minute: Option<u64>,
    #[serde(default)]
    pub tokens_per_minute: Option<u64>,
    #[serde(default)]
    pub max_concurrent: Option<u32>,
    /// Not in the `limits` section: a spend budget (`admission/spend`) is a policy of this kind
    /// whose tokens are microdollars and whose window is its period (nanoseconds), not a minute.
    #[serde(skip)]
    pub spend_window_ns: Option<u64>,
}

impl Policy {
    /// The tokens part's window: a minute, or a spend budget's period.
    pub fn tokens_window(&self) -> u64 {
        self.spend_window_ns
            .unwrap_or(crate::admission::limits::clock::WINDOW_NS)
    }
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

/// Checks a policy's numbers (each positive, and within what the limiter's arithmetic holds),
/// reporting each bad one at `path`; whether the policy can be used.
pub(super) fn check(c: &mut Checker, path: &str, p: &Policy) -> bool {
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
                c.err(format!("{path}.{f}"), "must be a positive integer");
                ok = false;
            }
            Some(n) if n > max => {
                c.err(format!("{path}.{f}"), format!("must be at most {max}"));
                ok = false;
            }
            _ => {}
        }
    }
    ok
}
