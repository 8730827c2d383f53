//! The `routing` config section: when a request of an alias with several deployments is retried
//! on another, how many retries a worker may spend, and when a failing deployment is rested.
//!
//! ```json
//! "routing": {
//!   "max_attempts": 3,
//!   "retry_on": [429, 500, 502, 503, 504, 529],
//!   "retry_budget": { "share": 0.2, "burst": 10 },
//!   "cooldown": { "failures": 3, "window_ms": 10000, "period_ms": 30000 }
//! }
//! ```

use std::time::Duration;

use serde_json::{Map, Value};

use crate::checker::Checker;

/// Statuses retried on another deployment unless `retry_on` says otherwise: rate limited,
/// server errors, and Anthropic's "overloaded".
pub const DEFAULT_RETRY_ON: [u16; 6] = [429, 500, 502, 503, 504, 529];

/// The most attempts one request may make (`max_attempts`); also the most deployments per alias
/// that can be tried in one request.
pub const MAX_ATTEMPTS: u64 = 16;

/// The longest an upstream's `retry-after` keeps its deployment out: a broken upstream asking for
/// a day must not take a deployment away for a day.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(300);

#[derive(Debug, Clone)]
pub struct Policy {
    /// Upstream requests one client request may make, the first included.
    pub max_attempts: u32,
    /// Upstream statuses that count as the deployment's failure and are retried elsewhere.
    pub retry_on: Vec<u16>,
    /// Retries a worker may make per request it routes, in thousandths (0.2 = 200).
    pub retry_share_milli: u32,
    /// Retries a worker may make beyond the share, and the most it saves up, in thousandths.
    pub retry_burst_milli: u32,
    /// Consecutive failures (no success between them) within `cooldown_window` that rest a
    /// deployment.
    pub cooldown_failures: u32,
    pub cooldown_window: Duration,
    /// How long a rested deployment is skipped before one request tries it again.
    pub cooldown_period: Duration,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            max_attempts: 3,
            retry_on: DEFAULT_RETRY_ON.to_vec(),
            retry_share_milli: 200,
            retry_burst_milli: 10_000,
            cooldown_failures: 3,
            cooldown_window: Duration::from_secs(10),
            cooldown_period: Duration::from_secs(30),
        }
    }
}

impl Policy {
    pub fn retries(&self, status: u16) -> bool {
        self.retry_on.contains(&status)
    }
}

/// The `routing` section, defaults for what it leaves out; every problem reported with its path.
pub fn section(c: &mut Checker, top: &Map<String, Value>) -> Policy {
    let mut p = Policy::default();
    let Some(v) = top.get("routing") else {
        return p;
    };
    let path = "$.routing";
    let Some(o) = c.obj(v, path) else {
        return p;
    };
    c.warn_unknown(
        o,
        path,
        &["max_attempts", "retry_on", "retry_budget", "cooldown"],
    );
    if let Some(n) = c.positive(o, "max_attempts", path) {
        if n > MAX_ATTEMPTS {
            c.err(
                format!("{path}.max_attempts"),
                format!("must be at most {MAX_ATTEMPTS}"),
            );
        } else {
            p.max_attempts = n as u32;
        }
    }
    if let Some(v) = o.get("retry_on") {
        match retry_on(v) {
            Some(list) => p.retry_on = list,
            None => c.err(
                format!("{path}.retry_on"),
                "must be an array of HTTP statuses (100..=599)",
            ),
        }
    }
    if let Some(v) = o.get("retry_budget") {
        let bpath = "$.routing.retry_budget";
        if let Some(b) = c.obj(v, bpath) {
            c.warn_unknown(b, bpath, &["share", "burst"]);
            if let Some(s) = b.get("share") {
                match s.as_f64() {
                    Some(s) if (0.0..=1.0).contains(&s) => {
                        p.retry_share_milli = (s * 1000.0).round() as u32
                    }
                    _ => c.err(
                        format!("{bpath}.share"),
                        "must be a number from 0 to 1 (retries per routed request)",
                    ),
                }
            }
            if let Some(n) = b.get("burst") {
                match n.as_u64() {
                    Some(n) if n <= 1_000_000 => p.retry_burst_milli = n as u32 * 1000,
                    _ => c.err(
                        format!("{bpath}.burst"),
                        "must be an integer from 0 to 1000000",
                    ),
                }
            }
        }
    }
    if let Some(v) = o.get("cooldown") {
        let cpath = "$.routing.cooldown";
        if let Some(cd) = c.obj(v, cpath) {
            c.warn_unknown(cd, cpath, &["failures", "window_ms", "period_ms"]);
            if let Some(n) = c.positive(cd, "failures", cpath) {
                p.cooldown_failures = n.min(u64::from(u32::MAX)) as u32;
            }
            if let Some(ms) = c.positive(cd, "window_ms", cpath) {
                p.cooldown_window = Duration::from_millis(ms);
            }
            if let Some(ms) = c.positive(cd, "period_ms", cpath) {
                p.cooldown_period = Duration::from_millis(ms);
            }
        }
    }
    p
}

fn retry_on(v: &Value) -> Option<Vec<u16>> {
    let mut out = Vec::new();
    for s in v.as_array()? {
        let n = s.as_u64().filter(|n| (100..=599).contains(n))?;
        out.push(n as u16);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(v: Value) -> (Policy, Checker) {
        let mut c = Checker::default();
        let p = section(&mut c, v.as_object().unwrap());
        (p, c)
    }

    #[test]
    fn defaults_and_overrides() {
        let (p, c) = parse(serde_json::json!({}));
        assert!(c.errors.is_empty());
        assert_eq!(p.max_attempts, 3);
        assert!(p.retries(529) && p.retries(429) && !p.retries(400));
        let (p, c) = parse(serde_json::json!({"routing": {
            "max_attempts": 2, "retry_on": [503], "retry_budget": {"share": 0.5, "burst": 0},
            "cooldown": {"failures": 1, "window_ms": 100, "period_ms": 200}, "typo": 1}}));
        assert!(c.errors.is_empty(), "{:?}", c.errors);
        assert_eq!(c.warnings, ["$.routing.typo: unknown key, ignored"]);
        assert_eq!(p.max_attempts, 2);
        assert!(p.retries(503) && !p.retries(500));
        assert_eq!((p.retry_share_milli, p.retry_burst_milli), (500, 0));
        assert_eq!(p.cooldown_failures, 1);
        assert_eq!(p.cooldown_period, Duration::from_millis(200));
    }

    #[test]
    fn every_bad_field_is_named() {
        let (_, c) = parse(serde_json::json!({"routing": {
            "max_attempts": 99, "retry_on": [42], "retry_budget": {"share": 2, "burst": -1},
            "cooldown": {"failures": 0, "window_ms": "x", "period_ms": 0}}}));
        let paths: Vec<&str> = c.errors.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "$.routing.max_attempts",
                "$.routing.retry_on",
                "$.routing.retry_budget.share",
                "$.routing.retry_budget.burst",
                "$.routing.cooldown.failures",
                "$.routing.cooldown.window_ms",
                "$.routing.cooldown.period_ms",
            ]
        );
    }
}
