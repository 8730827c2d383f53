//! One proxied request's life, from its arrival to its end: the request id, the bookkeeping of
//! admission and attempts, and, exactly once when it ends, the settlement of the rate limiter's
//! token charge with the real usage, the metrics sample and the access-log line.
//!
//! A [`Record`] is started when a proxied request arrives and filled in along the request path
//! (the caller, the route, the admission and its `x-ratelimit-*` headers, each attempt, the
//! serving attempt's routing lease, the usage of a buffered answer). For a buffered response it
//! finishes in [`Record::respond`]; for a stream, [`Record::track_stream`] (in [`stream`]) moves
//! it into a wrapper around the stream transform that finishes when the stream ends or the client
//! goes away. `Drop` guarantees that a request is finished exactly once.

pub mod access_log;
mod facts;
pub mod request_id;
mod stream;

use std::sync::Arc;
use std::time::{Instant, SystemTime};

use http::{HeaderName, HeaderValue};

use crate::admission::auth::Caller;
use crate::admission::limits::{Admission, Kind, Rejection, Scope};
use crate::admission::spend;
use crate::dialect::error::GwError;
use crate::dialect::Dialect;
use crate::exchange::facts::{Facts, Tried};
use crate::exchange::request_id::{request_id, X_REQUEST_ID};
use crate::http::body::GwResponse;
use crate::json::usage::{scan_usage, Usage};
use crate::provider::price::{nano, usd};
use crate::routing::health::Lease;
use crate::routing::Route;
use crate::telemetry::metrics::{
    self, AttemptOutcome, Attempted, ModelLabels, MODEL_NONE, MODEL_OTHER,
};
use crate::telemetry::traces;

/// The cost of a priced answer that is not streamed, in US dollars (`0.000125000`), with
/// `spend.cost_header`; a stream's cost is known only at its end, after its headers: it is in
/// the access log and the metrics.
pub static X_GATEWAY_COST: HeaderName = HeaderName::from_static("x-gateway-cost-usd");

/// What the request cost, in nanodollars, when its deployment has a price (`None` otherwise, and
/// before any attempt).
fn cost(i: &Facts) -> Option<u64> {
    let d = i
        .target
        .as_ref()?
        .deployments
        .get(usize::from(i.deployment?))?;
    Some(nano(d.price?.cost(&i.usage)))
}

/// One proxied request. See the module docs for the call sequence.
pub struct Record {
    request_id: HeaderValue,
    /// `x-ratelimit-*` of the admitting policy, for the response (empty without rate policies).
    ratelimit_headers: Vec<(HeaderName, HeaderValue)>,
    /// The client's `traceparent` of a request that traces did not sample, passed on upstream.
    client_traceparent: Option<HeaderValue>,
    /// `spend.cost_header`: a buffered priced answer carries its cost.
    cost_header: bool,
    inner: Option<Facts>,
}

impl Record {
    /// At the start of a proxied request: takes the request id (the client's `x-request-id`, if
    /// it sent one) and counts the request in flight.
    pub fn start(route: Dialect, client_request_id: Option<&HeaderValue>) -> Record {
        let request_id = request_id(client_request_id);
        metrics::inflight_add(route, 1);
        Record {
            request_id: request_id.clone(),
            ratelimit_headers: Vec::new(),
            client_traceparent: None,
            cost_header: false,
            inner: Some(Facts {
                t0: Instant::now(),
                start_wall: SystemTime::now(),
                route,
                request_id,
                model_label: MODEL_NONE,
                target: None,
                asked_model: None,
                key_id: None,
                status: 0,
                stream: false,
                upstream_start: None,
                upstream_end: None,
                first_token: None,
                usage: Usage::default(),
                admission: None,
                budget: None,
                over_budget: None,
                rejected: None,
                error: None,
                stream_error: None,
                dropped: None,
                deployment: None,
                upstream_label: 0,
                attempts: 0,
                ended: None,
                failed: Vec::new(),
                retry_budget_exhausted: false,
                lease: None,
                cost: None,
                trace: None,
                finished: false,
            }),
        }
    }

    fn with(&mut self, f: impl FnOnce(&mut Facts)) {
        if let Some(i) = self.inner.as_mut() {
            f(i)
        }
    }

    /// After authentication.
    pub fn set_caller(&mut self, c: &Caller) {
        let id = c.id.clone();
        self.with(|i| i.key_id = id);
    }

    /// After the route lookup succeeded.
    pub fn set_route(&mut self, labels: &ModelLabels, route: &Arc<Route>, stream: bool) {
        let label = labels.index(&route.alias);
        let r = route.clone();
        self.with(|i| {
            i.model_label = label;
            i.target = Some(r);
            i.stream = stream;
        });
    }

    /// When the client asked for a model that is not configured (the 404 path).
    pub fn set_unknown_model(&mut self, model: &str) {
        let m: String = model.chars().take(64).collect();
        self.with(|i| {
            i.model_label = MODEL_OTHER;
            i.asked_model = Some(m);
        });
    }

    /// The rate limiter's admission: settled with the real usage and released when the record
    /// finishes (a stream: when it ends).
    pub fn set_admission(&mut self, a: Admission) {
        self.ratelimit_headers = a.headers();
        self.with(|i| i.admission = Some(a));
    }

    /// A rate-limit refusal: returns the 429 error; [`Record::respond`] adds the `retry-after`
    /// and `x-ratelimit-*` headers. (Or the 503 of an unreachable store, with `retry-after`.)
    pub fn rate_limited(&mut self, r: Rejection) -> GwError {
        let e = r.to_gw_error();
        if r.is_unavailable() {
            // A 503 of the rate-limit store, not a rate limit: logged with its error message.
            return e;
        }
        self.with(|i| i.rejected = Some(r));
        e
    }

    /// The spend budgets' admission: settled with the request's cost when it finishes.
    pub fn set_budget(&mut self, a: Admission) {
        self.with(|i| i.budget = Some(a));
    }

    /// A spend budget's refusal: returns the client's error (429, or the store's 503).
    pub fn over_budget(&mut self, r: &Rejection) -> GwError {
        if !r.is_unavailable() {
            let scope = r.scope;
            self.with(|i| i.over_budget = Some(scope));
        }
        spend::refusal(r)
    }

    /// `spend.cost_header` is on: a buffered priced answer carries `x-gateway-cost-usd`.
    pub fn send_cost_header(&mut self) {
        self.cost_header = true;
    }

    /// With traces on: the sampling decision, from the client's `traceparent` (kept to pass on
    /// upstream when the request is not sampled).
    pub fn trace(&mut self, traceparent: Option<&HeaderValue>) {
        let t = traces::start(traceparent);
        if t.is_none() {
            self.client_traceparent = traceparent.cloned();
        }
        self.with(|i| i.trace = t);
    }

    /// Just before an upstream request is sent (`now`), to the route's deployment at
    /// `deployment`, whose upstream's metrics label is `upstream_label`. The upstream time runs
    /// from the first attempt; an attempt before this one failed, and this one is its fallback.
    /// Returns the `traceparent` the request carries upstream, if any (traces on).
    pub fn upstream_start(
        &mut self,
        deployment: usize,
        upstream_label: u16,
        now: Instant,
    ) -> Option<HeaderValue> {
        let i = self.inner.as_mut()?;
        if i.upstream_start.is_none() {
            i.upstream_start = Some(now);
        }
        if let Some(failed) = i.ended.take() {
            i.failed.push(failed);
            if let Some(t) = &mut i.trace {
                let at = now.saturating_duration_since(i.t0);
                t.attempt_failed(failed.counted.outcome.as_str(), at);
            }
        }
        i.deployment = Some(deployment as u8);
        i.upstream_label = upstream_label;
        i.attempts = i.attempts.saturating_add(1);
        match &mut i.trace {
            Some(t) => {
                let span = t.attempt(deployment, now.saturating_duration_since(i.t0));
                Some(traces::traceparent(&t.trace_id, &span))
            }
            None => self.client_traceparent.clone(),
        }
    }

    /// How the latest attempt ended: its `outcome`, the upstream's `status` (0 when there was no
    /// answer), and whether it started its deployment's cooldown. The attempt's one report: the
    /// metrics count it, and the access log lists it if another attempt follows, when the
    /// request ends.
    pub fn attempt_ended(&mut self, outcome: AttemptOutcome, status: u16, cooled: bool) {
        self.with(|i| {
            if let Some(d) = i.deployment {
                i.ended = Some(Tried {
                    deployment: d,
                    status,
                    counted: Attempted {
                        upstream: i.upstream_label,
                        outcome,
                        cooled,
                    },
                });
            }
        });
    }

    /// Another deployment was not tried: the worker's retry budget did not allow it.
    pub fn retry_budget_exhausted(&mut self) {
        self.with(|i| i.retry_budget_exhausted = true);
    }

    /// The request parts translation dropped for this attempt (comma separated), for the line.
    pub fn dropped(&mut self, parts: &str) {
        self.with(|i| i.dropped = Some(parts.to_owned()));
    }

    /// Keeps the serving attempt's lease until the request (a stream: the stream) has ended.
    pub fn hold_lease(&mut self, lease: Lease) {
        self.with(|i| i.lease = Some(lease));
    }

    /// When the upstream response is complete (buffered responses), or failed.
    pub fn upstream_end(&mut self) {
        self.with(|i| {
            if i.upstream_start.is_some() {
                i.upstream_end = Some(Instant::now())
            }
        });
    }

    /// Usage from a buffered upstream (or translated) response body.
    pub fn usage_from_body(&mut self, body: &[u8]) {
        if let Some(u) = scan_usage(body) {
            self.with(|i| i.usage.merge(u));
        }
        self.with(|i| {
            if let Some(t) = &mut i.trace {
                t.saw(body);
            }
        });
    }

    /// An error message for the log line (keep it free of secrets: upstream credentials never
    /// reach a `GwError`).
    pub fn set_error(&mut self, e: &GwError) {
        let m: String = e.message.chars().take(200).collect();
        self.with(|i| i.error = Some(m));
    }

    /// The end of the request path: sets `x-request-id` (and the 429 headers, and the cost of a
    /// priced answer), records the status, and finishes the record unless a stream took it over.
    pub fn respond(&mut self, mut resp: GwResponse) -> GwResponse {
        let h = resp.headers_mut();
        h.insert(X_REQUEST_ID.clone(), self.request_id.clone());
        for (n, v) in self.ratelimit_headers.drain(..) {
            h.insert(n, v);
        }
        if let Some(i) = self.inner.as_mut() {
            if let Some(r) = &i.rejected {
                r.apply_headers(h);
            }
            if let (true, Some(nano)) = (self.cost_header, cost(i)) {
                i.cost = Some(nano);
                let mut buf = [0; 32];
                let v = crate::http::arena::visible_ascii(usd(&mut buf, nano));
                h.insert(X_GATEWAY_COST.clone(), v);
            }
            i.status = resp.status().as_u16();
            if i.upstream_start.is_some() && i.upstream_end.is_none() {
                i.upstream_end = Some(Instant::now());
            }
            // Finished where it lies: the record is a few hundred bytes, and moving it out
            // costs a copy; `finished` keeps `Drop` from finishing it again.
            finish(i);
        }
        resp
    }
}

impl Drop for Record {
    fn drop(&mut self) {
        // Only when the request future was dropped before `respond` (the client went away while
        // waiting for the upstream): 499, as nginx logs it.
        if let Some(i) = self.inner.as_mut() {
            if i.status == 0 {
                i.status = 499;
            }
            finish(i);
        }
    }
}

fn finish(i: &mut Facts) {
    if i.finished {
        return;
    }
    i.finished = true;
    let end = Instant::now();
    let duration = end - i.t0;
    let upstream = match (i.upstream_start, i.upstream_end) {
        (Some(s), Some(e)) => Some(e - s),
        (Some(s), None) => Some(end - s),
        _ => None,
    };
    let first_token = i.first_token.map(|t| t - i.t0);
    let tokens_in = i.usage.input.unwrap_or(0);
    let tokens_out = i.usage.output.unwrap_or(0);
    if i.cost.is_none() {
        i.cost = cost(i);
    }
    if let Some(nano) = i.cost {
        metrics::spend(i.key_id.as_ref(), i.model_label, nano);
    }
    if let Some(mut b) = i.budget.take() {
        // The real cost when the usage is known; a failed request gives its reservation back;
        // a request that ended without usage (a stream cut short) keeps it.
        let known = i.usage.input.is_some() || i.usage.output.is_some();
        match i.cost {
            Some(nano) if known => b.settle(spend::micro_of_nano(nano)),
            _ if !(200..300).contains(&i.status) => b.settle(0),
            _ => {}
        }
    }
    if let Some(mut a) = i.admission.take() {
        if i.usage.input.is_some() || i.usage.output.is_some() {
            a.settle(tokens_in + tokens_out);
        }
        drop(a);
    }
    let rejected: Option<(Scope, Kind)> = i.rejected.as_ref().map(|r| (r.scope, r.kind));
    metrics::record(&metrics::Sample {
        route: i.route,
        model: i.model_label,
        status: i.status,
        duration,
        upstream,
        first_token,
        tokens_in,
        tokens_out,
        tokens_cached: i.usage.cached.unwrap_or(0),
        rejected,
        attempt: i.ended.map(|t| t.counted),
    });
    metrics::inflight_add(i.route, -1);
    for t in &i.failed {
        metrics::fallback(t.counted);
    }
    if i.retry_budget_exhausted {
        metrics::retry_budget_exhausted();
    }
    if let Some(trace) = i.trace.take() {
        finish_trace(i, trace, duration);
    }
    access_log::write(i, duration, upstream, first_token);
}

/// A sampled request's spans, to the exporter.
#[cold]
fn finish_trace(i: &Facts, trace: Box<traces::Trace>, duration: std::time::Duration) {
    let status;
    let error = if let Some(e) = &i.stream_error {
        Some(if e == "client disconnected" {
            "client_disconnected"
        } else {
            "stream_error"
        })
    } else if i.status >= 400 {
        status = i.status.to_string();
        Some(status.as_str())
    } else {
        None
    };
    traces::finish(&traces::Finished {
        trace: &trace,
        start: i.start_wall,
        duration,
        upstream_end: i.upstream_end.map(|e| e.saturating_duration_since(i.t0)),
        operation: "chat",
        route: i.target.as_ref(),
        input_tokens: i.usage.input,
        output_tokens: i.usage.output,
        status: i.status,
        error,
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderMap;
    use serde_json::Value;
    use std::time::Duration;

    #[test]
    fn line_is_json_with_fields() {
        let mut h = HeaderMap::new();
        h.insert("x-request-id", HeaderValue::from_static("req-1"));
        let mut r = Record::start(Dialect::Chat, h.get(&X_REQUEST_ID));
        r.set_unknown_model("weird\"model");
        r.upstream_start(0, 0, Instant::now());
        r.usage_from_body(br#"{"usage":{"prompt_tokens":5,"completion_tokens":2}}"#);
        let mut i = r.inner.take().unwrap();
        let mut out = Vec::new();
        access_log::write_line(&mut out, &i, Duration::from_millis(5), None, None);
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["request_id"], "req-1");
        assert_eq!(v["model"], "weird\"model");
        assert_eq!(v["tokens_in"], 5);
        assert_eq!(v["tokens_out"], 2);
        assert_eq!(v["key_id"], Value::Null);
        assert_eq!(v["route"], "/v1/chat/completions");
        finish(&mut i);
    }
}
