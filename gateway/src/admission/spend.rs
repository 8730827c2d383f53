//! Spend budgets: what a key (and, apart, an alias) may spend per period, in US dollars.
//!
//! ```json
//! "budgets": {
//!   "default_key": { "usd": 10, "period": "day" },
//!   "keys":   { "team-a": { "usd": 200, "period": "month" } },
//!   "models": { "gpt-4o": { "usd": 1000, "period": "month" } }
//! }
//! ```
//!
//! A budget is a rate-limit policy (`admission/limits`) whose tokens are microdollars and whose
//! window is its period: the same GCRA locally, the same leases, Redis script and
//! `on_store_error` across replicas (`limits.store`), so that a budget costs what a token limit
//! costs and needs no Redis round trip on most requests. Before the call the budget must not be
//! spent (in debt), and the request's most it can cost is reserved: its input estimate (body
//! bytes / 4) and its top-level `max_tokens` (`max_completion_tokens`, `max_output_tokens`) at
//! the priciest of its alias's deployments. When it ends the reservation is settled with its real
//! cost (`exchange/`); a request whose usage never came keeps its reservation, one that failed
//! gives it back.
//!
//! The period is rolling, not a calendar's: a budget of `usd` per period refills continuously at
//! `usd / period`, and at most `usd` can be spent at once (a full bucket). Over any span of one
//! period a key spends at most twice its budget (a full bucket, then the refill), and over a long
//! run its budget per period. `day` is 24 hours, `month` 30 days. Requests to deployments without
//! a price are not held by budgets (they cost nothing).

use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;
use serde_json::{Map, Value};

use crate::admission::limits::policy::Policy;
use crate::admission::limits::store::Store;
use crate::admission::limits::{Admission, Admit, AliasAt, Limits, ModelPolicies, Rejection};
use crate::checker::Checker;
use crate::dialect::body_head::OutputCaps;
use crate::dialect::error::GwError;
use crate::routing::Route;

const DAY: Duration = Duration::from_secs(86_400);

/// The `budgets` section's policies and their live state; empty when the section is absent.
#[derive(Debug, Default)]
pub struct Budgets {
    limits: Limits,
    /// The alias budgets by alias index ([`Route::index`]): routing already found the route, so
    /// its budget is found without hashing the alias again.
    by_alias: ModelPolicies,
}

impl Budgets {
    /// Checks the `budgets` section. Key ids and aliases must be configured (as in `limits`);
    /// `store` is the running `limits.store`, which the budgets are shared through.
    pub fn from_config(
        c: &mut Checker,
        v: Option<&Value>,
        key_ids: &[String],
        aliases: &[&str],
        store: Option<&Arc<Store>>,
    ) -> Budgets {
        let Some(v) = v else {
            return Budgets::default();
        };
        let Some(o) = c.obj(v, "$.budgets") else {
            return Budgets::default();
        };
        c.warn_unknown(o, "$.budgets", &["default_key", "keys", "models"]);
        let mut keys = Vec::new();
        if let Some(d) = o.get("default_key") {
            if let Some(p) = budget(c, d, "$.budgets.default_key") {
                if key_ids.is_empty() {
                    c.warnings.push(
                        "$.budgets.default_key: no keys are configured, so no key budget applies"
                            .into(),
                    );
                }
                keys.extend(key_ids.iter().map(|id| (id.clone(), p)));
            }
        }
        for (id, v) in named(c, o, "keys") {
            let path = format!("$.budgets.keys.{id}");
            if !key_ids.iter().any(|k| k == id) {
                c.err(
                    path,
                    format!("no key with id {id:?} is configured in $.keys"),
                );
            } else if let Some(p) = budget(c, v, &path) {
                keys.retain(|(k, _)| k != id);
                keys.push((id.clone(), p));
            }
        }
        let mut models = Vec::new();
        for (alias, v) in named(c, o, "models") {
            let path = format!("$.budgets.models.{alias}");
            if !aliases.contains(&alias.as_str()) {
                c.err(
                    path,
                    format!("no model alias {alias:?} is configured in $.models"),
                );
            } else if let Some(p) = budget(c, v, &path) {
                models.push((alias.clone(), p));
            }
        }
        let limits = Limits::of_policies(keys, models, store);
        Budgets {
            by_alias: limits.by_alias_index(aliases),
            limits,
        }
    }

    /// Whether no budget is configured (then a request is not looked at).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.limits.is_empty()
    }

    /// What to reserve for a request to `route` with `body` (its output caps at `caps`), in
    /// microdollars: `None` when no budget is configured or no deployment of the route has a
    /// price.
    #[inline]
    pub fn reservation(&self, route: &Route, body: &[u8], caps: &OutputCaps) -> Option<u64> {
        if self.is_empty() {
            return None;
        }
        reserve(route, body, caps)
    }

    /// Admission against the key's and the route's alias's budgets, reserving `micro`
    /// microdollars; as [`Limits::admit`] ([`Admit::Wait`]: call [`Budgets::admit_waiting`]).
    pub fn admit(&self, key: Option<&str>, route: &Route, micro: u64) -> Admit {
        self.limits.admit_at_alias(key, self.at(route), micro)
    }

    pub async fn admit_waiting(
        &self,
        key: Option<&str>,
        route: &Route,
        micro: u64,
    ) -> Result<Admission, Rejection> {
        let at = self.at(route);
        self.limits.admit_waiting_at_alias(key, at, micro).await
    }

    /// Where the route's alias budget is: at its index ([`Route::index`]).
    fn at<'a>(&'a self, route: &'a Route) -> AliasAt<'a> {
        AliasAt {
            models: &self.by_alias,
            index: route.index,
            alias: &route.alias,
        }
    }
}

/// The `spend` section: `{"cost_header": true}` puts a buffered priced answer's cost in its
/// `x-gateway-cost-usd` header (off by default: a header the clients do not read costs every
/// priced request its formatting and its bytes).
pub fn cost_header(c: &mut Checker, v: Option<&Value>) -> bool {
    let Some(o) = v.and_then(|v| c.obj(v, "$.spend")) else {
        return false;
    };
    c.warn_unknown(o, "$.spend", &["cost_header"]);
    match o.get("cost_header") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            c.err("$.spend.cost_header", "must be true or false");
            false
        }
    }
}

/// The members of `o[field]` (an object of named budgets).
fn named<'v>(
    c: &mut Checker,
    o: &'v Map<String, Value>,
    field: &str,
) -> Vec<(&'v String, &'v Value)> {
    match o.get(field) {
        None => Vec::new(),
        Some(Value::Object(m)) => m.iter().collect(),
        Some(_) => {
            c.err(
                format!("$.budgets.{field}"),
                "must be an object of budgets by name",
            );
            Vec::new()
        }
    }
}

/// One budget, `{"usd": N, "period": "day" | "month"}`, as a policy of microdollars per period.
fn budget(c: &mut Checker, v: &Value, path: &str) -> Option<Policy> {
    let o = c.obj(v, path)?;
    c.warn_unknown(o, path, &["usd", "period"]);
    let usd = match o.get("usd").and_then(Value::as_f64) {
        Some(u) if (0.000_001..=1e9).contains(&u) => Some((u * 1e6).round() as u64),
        _ => {
            c.err(
                format!("{path}.usd"),
                "must be a number of dollars from 0.000001 to 1000000000",
            );
            None
        }
    };
    let period = match o.get("period").and_then(Value::as_str) {
        Some("day") => Some(DAY),
        Some("month") => Some(DAY * 30),
        _ => {
            c.err(format!("{path}.period"), "must be \"day\" or \"month\"");
            None
        }
    };
    Some(Policy {
        tokens_per_minute: Some(usd?),
        spend_window_ns: Some(period?.as_nanos() as u64),
        ..Policy::default()
    })
}

/// The most a request can cost, in microdollars (rounded up), at the priciest of the route's
/// deployments ([`Route::reserve_price`]): body bytes / 4 input tokens and its output cap (none:
/// input only).
fn reserve(route: &Route, body: &[u8], caps: &OutputCaps) -> Option<u64> {
    let price = route.reserve_price?;
    let pico = (body.len() as u64 / 4)
        .saturating_mul(price.input)
        .saturating_add(output_cap(body, caps).saturating_mul(price.output));
    Some(pico.div_ceil(1_000_000))
}

/// The request's output cap: the first of its top-level caps, as the head parse located them
/// (no pass over the body of its own), that is a number (its integer part; 0 without one).
fn output_cap(body: &[u8], caps: &OutputCaps) -> u64 {
    caps.iter()
        .flatten()
        .find_map(|&(s, e)| leading_number(&body[s..e]))
        .unwrap_or(0)
}

/// The decimal number `s` starts with, if it starts with one that fits a `u64` (a fraction's
/// integer part).
fn leading_number(s: &[u8]) -> Option<u64> {
    match crate::json::usage::decimal_prefix(s) {
        (_, 0) => None,
        (n, _) => n,
    }
}

/// Nanodollars to whole microdollars, rounded up (what a budget is charged).
pub fn micro_of_nano(nano: u64) -> u64 {
    nano.div_ceil(1000)
}

/// A budget's refusal as the client's error: 429 whose body says budget (OpenAI's own
/// `insufficient_quota`), or the limits store's 503 under `on_store_error: reject`.
pub fn refusal(r: &Rejection) -> GwError {
    if r.is_unavailable() {
        // The limits' store is the budgets' store: the same 503.
        return r.to_gw_error();
    }
    let mut e = GwError::new(
        StatusCode::TOO_MANY_REQUESTS,
        format!(
            "budget exceeded: the spend budget of {} {:?} is used up; retry after {}",
            r.scope.as_str(),
            r.name,
            crate::admission::limits::response::fmt_duration(r.retry_after)
        ),
    );
    e.code = Some("insufficient_quota");
    e.retry_after = Some(r.retry_after_secs());
    e
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::limits::Admit;

    fn budgets(v: Value) -> (Budgets, Vec<String>) {
        let mut c = Checker::default();
        let b = Budgets::from_config(
            &mut c,
            Some(&v),
            &["a".to_string(), "b".to_string()],
            &["gpt"],
            None,
        );
        (b, c.errors.iter().map(|e| e.path.clone()).collect())
    }

    fn now(b: &Budgets, key: &str, micro: u64) -> Result<Admission, Rejection> {
        let at = AliasAt {
            models: &b.by_alias,
            index: 0,
            alias: "gpt",
        };
        match b.limits.admit_at_alias(Some(key), at, micro) {
            Admit::Now(r) => r,
            Admit::Wait => panic!("no store, no wait"),
        }
    }

    #[test]
    fn the_output_cap_is_the_first_cap_that_is_a_number() {
        let cap = |b: &[u8]| {
            let h = crate::dialect::body_head::parse_body_head(b).unwrap();
            output_cap(b, &h.output_caps)
        };
        assert_eq!(cap(br#"{"model":"m","max_tokens": 16}"#), 16);
        assert_eq!(cap(br#"{"max_completion_tokens":7,"model":"m"}"#), 7);
        assert_eq!(
            cap(br#"{"input":"x","max_output_tokens" :300,"model":"m"}"#),
            300
        );
        assert_eq!(
            cap(br#"{"messages":[{"content":"\"max_tokens\": 9"}],"model":"m"}"#),
            0,
            "inside a string"
        );
        assert_eq!(
            cap(br#"{"tools":[{"max_tokens":5}],"model":"m"}"#),
            0,
            "not at the top level"
        );
        assert_eq!(cap(br#"{"prompt_tokens":5,"model":"m"}"#), 0);
        assert_eq!(
            cap(br#"{"max_tokens":99999999999999999999999,"model":"m"}"#),
            0
        );
        assert_eq!(
            cap(br#"{"max_tokens":-1,"max_output_tokens":8,"model":"m"}"#),
            8
        );
        assert_eq!(
            cap(br#"{"max_tokens":null,"max_completion_tokens":4,"model":"m"}"#),
            4
        );
    }

    #[test]
    fn the_cap_is_a_leading_integer_or_nothing() {
        assert_eq!(leading_number(b"16,"), Some(16));
        assert_eq!(
            leading_number(b"16.5}"),
            Some(16),
            "a fraction's integer part"
        );
        assert_eq!(leading_number(b"0"), Some(0));
        assert_eq!(leading_number(b""), None);
        assert_eq!(leading_number(b"-1"), None);
        assert_eq!(leading_number(b"null"), None);
        assert_eq!(leading_number(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(leading_number(b"18446744073709551616"), None);
    }

    #[test]
    fn the_section_is_checked_with_paths() {
        let (_, e) = budgets(serde_json::json!({
            "keys": {"a": {"usd": 0, "period": "day"}, "zz": {"usd": 1, "period": "day"}},
            "models": {"gpt": {"usd": 1, "period": "week"}, "nope": {"usd": 1, "period": "day"}},
        }));
        assert_eq!(
            e,
            [
                "$.budgets.keys.a.usd",
                "$.budgets.keys.zz",
                "$.budgets.models.gpt.period",
                "$.budgets.models.nope"
            ]
        );
        let (b, e) = budgets(serde_json::json!({"default_key": {"usd": 1, "period": "month"}}));
        assert!(e.is_empty() && !b.is_empty());
        let (b, _) = budgets(serde_json::json!({}));
        assert!(b.is_empty());
    }

    #[test]
    fn reserved_then_settled_then_refused_when_spent() {
        // One cent a day for key a (b has the default's dollar).
        let (b, e) = budgets(serde_json::json!({
            "default_key": {"usd": 1, "period": "day"},
            "keys": {"a": {"usd": 0.01, "period": "day"}},
        }));
        assert!(e.is_empty(), "{e:?}");
        let mut first = now(&b, "a", 9_000).unwrap();
        // A reservation beyond the budget is still admitted (the budget was not spent), and
        // its real cost, settled, is what counts.
        first.settle(4_000);
        let mut second = now(&b, "a", 9_000).unwrap();
        second.settle(7_000);
        let r = now(&b, "a", 1).unwrap_err();
        assert!(
            r.retry_after > Duration::from_secs(60),
            "{:?}",
            r.retry_after
        );
        let e = refusal(&r);
        assert_eq!(e.status, StatusCode::TOO_MANY_REQUESTS);
        assert!(e.message.starts_with("budget exceeded"), "{}", e.message);
        let body: Value = serde_json::from_slice(&e.body(crate::dialect::Dialect::Chat)).unwrap();
        assert_eq!(body["error"]["type"], "insufficient_quota");
        // Another key has its own budget.
        assert!(now(&b, "b", 1).is_ok());
    }
}
