//! The upstream call of a request whose route is known: one attempt per deployment, each put in
//! its own deployment's dialect (native or translated), and for an alias with several deployments
//! the loop that falls back to another on a connection error, a timeout or a status in
//! `routing.retry_on`, within the attempt cap and the worker's retry budget.
//!
//! A stream commits when its upstream's success status arrives: that is when the client gets its
//! first byte, and nothing after it is retried (a later failure ends the stream with the dialect's
//! error event). The client's body is shared by every attempt (`Bytes` slices); only a translated
//! attempt writes a new body.

use std::cell::Cell;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode};
use tokio::time::Instant;

use crate::config::Snapshot;
use crate::dialect::error::GwError;
use crate::dialect::native::NativeStream;
use crate::dialect::stream_usage::{self, AskUsage};
use crate::dialect::transform::StreamTransform;
use crate::dialect::translate::{self, Translation};
use crate::dialect::Dialect;
use crate::exchange::Record;
use crate::http::body::{
    self, json_response, json_response_parts, sse_response, GwResponse, ReadError, UpBody,
};
use crate::http::client::UpstreamClient;
use crate::http::deadline::timeout_at;
use crate::http::stream::SseBody;
use crate::provider;
use crate::provider::forward::Forwarded;
use crate::routing::health::{self, Lease, Pick};
use crate::routing::Route;
use crate::serve::native_body;
use crate::telemetry::metrics::AttemptOutcome::{self, Connection, RetryableStatus, Timeout};
use crate::telemetry::traces::TRACEPARENT;

/// A complete (non-streamed) upstream answer larger than this is refused with 502 rather than
/// buffered: no chat answer is that large, and a broken upstream must not exhaust memory.
const MAX_UPSTREAM_BODY: usize = 64 << 20;

/// One request's upstream call: what every attempt shares.
pub struct Call<'a> {
    pub client: &'a UpstreamClient,
    pub snap: &'a Snapshot,
    /// The client's dialect (the route it called): errors and answers are in it.
    pub dialect: Dialect,
    /// The client's body, as read.
    pub body: &'a Bytes,
    /// Where the body's `model` value is (the native route replaces just that).
    pub model_span: (usize, usize),
    /// Where the body's `stream_options` value is, if it has one (a native chat stream asks its
    /// upstream for usage).
    pub stream_options: Option<(usize, usize)>,
    pub stream: bool,
    pub route: &'a Route,
    /// The client's headers that belong to an upstream's API, passed on to the upstream whose
    /// API they belong to (`provider/forward.rs`).
    pub forwarded: Option<Box<Forwarded>>,
    /// A header map for the next attempt's request (the client request's, emptied): taken by the
    /// first attempt, so that it needs no new one.
    pub headers: Cell<HeaderMap>,
}

/// The attempt's body in its deployment's dialect.
struct Prepared {
    body: UpBody,
    dialect: Dialect,
    /// `None` on the native route.
    translation: Option<Translation>,
    /// A native chat stream whose usage chunk the gateway asked for and the client did not.
    drop_usage: bool,
}

/// Serves the request from the route's deployments. An alias with one deployment makes exactly
/// one attempt and keeps no routing state. Each attempt reports how it ended to the record, once
/// (which the metrics and the access log read when the request ends); the loop only decides
/// whether another deployment is tried.
pub async fn serve(c: &Call<'_>, rec: &mut Record) -> Result<GwResponse, GwError> {
    if !c.route.is_routed() {
        let prepared = prepare(c, 0)?;
        return send(c, 0, prepared, None, rec, &mut false).await;
    }
    let policy = &c.snap.routing;
    let table = &c.route.table;
    health::deposit(table, policy);
    let mut tried: u64 = 0;
    let mut sent = 0;
    // What the latest failed attempt answered, for when no other deployment serves.
    let mut last: Option<Result<GwResponse, GwError>> = None;
    // A deployment whose dialect cannot carry this request (nothing was sent to it).
    let mut unfit: Option<GwError> = None;
    while sent < policy.max_attempts {
        let (i, lease) = match health::pick(c.route, policy, tried, std::time::Instant::now()) {
            Pick::Go(i, lease) => (i, lease),
            Pick::Cooling(e) => match last {
                Some(_) => break,
                None => return Err(e),
            },
            Pick::Exhausted => break,
        };
        tried |= 1 << i;
        let prepared = match prepare(c, i) {
            Ok(p) => p,
            Err(e) => {
                unfit.get_or_insert(e);
                continue;
            }
        };
        if last.is_some() && !health::withdraw(table) {
            rec.retry_budget_exhausted();
            break;
        }
        sent += 1;
        let mut another_may_serve = false;
        let response = send(c, i, prepared, Some(lease), rec, &mut another_may_serve).await;
        if !another_may_serve {
            return response;
        }
        last = Some(response);
    }
    match (last, unfit) {
        (Some(response), _) => response,
        (None, Some(e)) => Err(e),
        (None, None) => Err(GwError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("no deployment of {} could be tried", c.route.alias),
        )),
    }
}

/// The request for the route's deployment `i`, in that deployment's dialect: the client's body
/// with the model replaced when the dialects match, else translated.
fn prepare(c: &Call<'_>, i: usize) -> Result<Prepared, GwError> {
    let d = &c.route.deployments[i];
    let up_dialect = provider::upstream_dialect(c.dialect, d.provider.kind);
    let native = up_dialect == c.dialect;
    let mut drop_usage = false;
    let (body, translation) = if native && c.stream && c.dialect == Dialect::Chat {
        let (b, drop) = asking_usage(c, &d.upstream_json, &d.upstream_json_usage);
        drop_usage = drop;
        (b, None)
    } else if native {
        let b = native_body::request(c.body, c.model_span, &d.upstream_json, &d.upstream_model);
        (b, None)
    } else {
        let target = translate::Target {
            dialect: up_dialect,
            model_json: &d.upstream_json,
            max_tokens: d.provider.max_tokens_field,
        };
        let betas = c.forwarded.as_ref().and_then(|f| f.anthropic_beta.as_ref());
        let (b, t) = translate::request(
            c.dialect,
            &target,
            c.body,
            betas.map(HeaderValue::as_bytes),
            &c.route.drop,
        )?;
        (UpBody::one(b), Some(t))
    };
    Ok(Prepared {
        body,
        dialect: up_dialect,
        translation,
        drop_usage,
    })
}

/// A native chat stream's body, asking the upstream for usage (`dialect/stream_usage.rs`), and
/// whether the client did not ask for it itself (its chunk is then dropped). Without
/// `stream_options` (the common case) the member goes in with the model, in the one splice.
fn asking_usage(c: &Call<'_>, model: &Bytes, model_asking: &Bytes) -> (UpBody, bool) {
    match stream_usage::ask_usage(c.body, c.stream_options) {
        AskUsage::Asked | AskUsage::Leave => {
            (UpBody::replacing(c.body, c.model_span, model), false)
        }
        AskUsage::Insert => (UpBody::replacing(c.body, c.model_span, model_asking), true),
        AskUsage::Edit(span, with) => {
            let mut edits = [(c.model_span, &model[..]), (span, with)];
            edits.sort_unstable_by_key(|((s, _), _)| *s);
            let mut v = Vec::with_capacity(c.body.len() + model.len() + with.len());
            let mut at = 0;
            for ((s, e), with) in edits {
                v.extend_from_slice(&c.body[at..s]);
                v.extend_from_slice(with);
                at = e;
            }
            v.extend_from_slice(&c.body[at..]);
            (UpBody::one(Bytes::from(v)), true)
        }
    }
}

/// Sends one attempt to the route's deployment `i` and reads its answer. How it ended goes to the
/// record (and, with a lease, a routed alias's, to the lease); the serving attempt's lease is
/// handed to the record. An attempt another deployment may do better on sets
/// `another_may_serve`; its answer is returned still, for when none does.
async fn send(
    c: &Call<'_>,
    i: usize,
    p: Prepared,
    lease: Option<Lease>,
    rec: &mut Record,
    another_may_serve: &mut bool,
) -> Result<GwResponse, GwError> {
    let d = &c.route.deployments[i];
    let native = p.translation.is_none();
    // The parts translation dropped, said in a response header and the access log.
    let dropped = p
        .translation
        .as_ref()
        .filter(|t| !t.dropped.is_empty())
        .and_then(|t| {
            rec.dropped(&t.dropped);
            HeaderValue::from_str(&t.dropped).ok()
        });
    let upstream = c.snap.metric_upstreams.index(d.upstream);
    let mut request = provider::request(
        &d.provider,
        p.dialect,
        p.body,
        c.headers.take(),
        c.forwarded.as_deref(),
        native,
    );
    // One clock read for the deadline and the record.
    let now = std::time::Instant::now();
    let deadline = Instant::from_std(now) + c.snap.upstream_timeout;
    if let Some(tp) = rec.upstream_start(i, upstream, now) {
        request.headers_mut().insert(TRACEPARENT.clone(), tp);
    }
    let (resp, conn) = match timeout_at(deadline, c.client.send(&d.provider.origin, request)).await
    {
        Err(_) => return failed(lease, rec, GwError::timeout(), Timeout, another_may_serve),
        Ok(Err(e)) => {
            let e = GwError::unreachable(error_chain(&*e));
            return failed(lease, rec, e, Connection, another_may_serve);
        }
        Ok(Ok(r)) => r,
    };
    let status = resp.status();
    let (head, upstream_body) = resp.into_parts();

    if status.is_success() && c.stream {
        rec.attempt_ended(AttemptOutcome::Ok, status.as_u16(), false);
        if let Some(mut l) = lease {
            l.succeeded();
            rec.hold_lease(l);
        }
        let transform: Box<dyn StreamTransform> = match p.translation {
            None => {
                let mut n = NativeStream::new(c.dialect, c.route.alias_json.clone());
                n.drop_usage = p.drop_usage;
                Box::new(n)
            }
            Some(t) => t.stream(&c.route.alias),
        };
        let transform = rec.track_stream(transform);
        let body = SseBody::new(upstream_body, conn, transform, c.snap.upstream_timeout);
        return Ok(with_dropped(sse_response(body, head.headers), dropped));
    }

    let retry_after = if status.is_success() {
        None
    } else {
        upstream_retry_after(&head.headers)
    };
    let bytes = match body::read_all(upstream_body, MAX_UPSTREAM_BODY, || deadline).await {
        Ok(b) => b,
        Err(ReadError::TimedOut) => {
            return failed(lease, rec, GwError::timeout(), Timeout, another_may_serve)
        }
        Err(e) => {
            let e = GwError::bad_upstream(format!("reading body: {}", read_error(&e)));
            return failed(lease, rec, e, Connection, another_may_serve);
        }
    };
    conn.release();
    rec.upstream_end();

    if !status.is_success() {
        let (response, error) = upstream_error(status, &bytes, native, retry_after);
        if c.snap.routing.retries(status.as_u16()) {
            let cooled =
                lease.is_some_and(|mut l| l.failed(&error, retry_after, std::time::Instant::now()));
            rec.attempt_ended(RetryableStatus, status.as_u16(), cooled);
            *another_may_serve = true;
            return response;
        }
        rec.attempt_ended(AttemptOutcome::Status, status.as_u16(), false);
        if let Some(mut l) = lease {
            l.succeeded();
        }
        return response;
    }
    rec.attempt_ended(AttemptOutcome::Ok, status.as_u16(), false);
    if let Some(mut l) = lease {
        l.succeeded();
        rec.hold_lease(l);
    }
    match p.translation {
        None => {
            // The usage is searched for from the end, where it is.
            rec.usage_from_body(&bytes);
            let out = native_body::answer(bytes, &c.route.alias_json, &c.route.alias);
            Ok(json_response_parts(StatusCode::OK, out, head.headers))
        }
        Some(t) => {
            rec.usage_from_body(&bytes);
            t.response(&bytes, &c.route.alias).map(|b| {
                let r = json_response_parts(StatusCode::OK, UpBody::one(b), head.headers);
                with_dropped(r, dropped)
            })
        }
    }
}

/// `x-gateway-dropped: <parts>` on a translated answer whose request lost parts to the alias's
/// `drop` list (docs/translation-policy.md).
fn with_dropped(mut r: GwResponse, dropped: Option<HeaderValue>) -> GwResponse {
    if let Some(v) = dropped {
        r.headers_mut().insert("x-gateway-dropped", v);
    }
    r
}

/// An attempt that got no answer: reported on its lease and to the record, and answered with
/// `err` if no other deployment serves.
fn failed(
    lease: Option<Lease>,
    rec: &mut Record,
    err: GwError,
    outcome: AttemptOutcome,
    another_may_serve: &mut bool,
) -> Result<GwResponse, GwError> {
    let cooled = lease.is_some_and(|mut l| l.failed(&err, None, std::time::Instant::now()));
    rec.attempt_ended(outcome, 0, cooled);
    *another_may_serve = true;
    Err(err)
}

/// How long the upstream asks to be left alone: `retry-after-ms` (OpenAI's), else `retry-after`
/// in seconds. An HTTP date is not read (no upstream of either kind sends one).
fn upstream_retry_after(h: &HeaderMap) -> Option<Duration> {
    let num = |name: &str| -> Option<f64> {
        let v: f64 = h.get(name)?.to_str().ok()?.trim().parse().ok()?;
        (v.is_finite() && v >= 0.0).then_some(v)
    };
    if let Some(ms) = num("retry-after-ms") {
        return Some(Duration::from_secs_f64(ms.min(1e9) / 1000.0));
    }
    num("retry-after").map(|s| Duration::from_secs_f64(s.min(1e6)))
}

/// An upstream 4xx/5xx in the client's dialect, with the upstream's status (and its
/// `retry-after`, whole seconds), and the same as an error for the deployment's record. On the
/// native route a well-formed upstream error body is already in the client's dialect and is
/// passed on unchanged.
fn upstream_error(
    status: StatusCode,
    body: &Bytes,
    native: bool,
    retry_after: Option<Duration>,
) -> (Result<GwResponse, GwError>, GwError) {
    #[derive(serde::Deserialize)]
    struct Inner {
        message: Option<String>,
    }
    #[derive(serde::Deserialize)]
    struct Outer {
        error: Option<Inner>,
    }
    let parsed: Option<Outer> = serde_json::from_slice(body).ok();
    let msg = parsed.as_ref().and_then(|o| o.error.as_ref());
    let secs = retry_after.map(|d| d.as_millis().div_ceil(1000).max(1) as u64);
    let message = msg
        .and_then(|m| m.message.clone())
        .unwrap_or_else(|| format!("upstream returned status {}", status.as_u16()));
    let err = GwError {
        retry_after: secs,
        ..GwError::new(status, message)
    };
    if native && msg.is_some() {
        let mut r = json_response(status, body.clone());
        if let Some(s) = secs {
            r.headers_mut()
                .insert(http::header::RETRY_AFTER, HeaderValue::from(s));
        }
        return (Ok(r), err);
    }
    (Err(err.clone()), err)
}

fn read_error(e: &ReadError) -> String {
    match e {
        ReadError::TooLarge => format!("longer than {MAX_UPSTREAM_BODY} bytes"),
        ReadError::TimedOut => "timed out".into(),
        ReadError::Broken(e) => error_chain(e),
    }
}

fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        s.push_str(": ");
        s.push_str(&c.to_string());
        src = c.source();
    }
    s
}
