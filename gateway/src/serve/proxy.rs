//! The request path shared by the three client dialects: read the body, find the route, admit
//! the request, and hand it to the upstream call ([`attempts`]), answering in the client's dialect.

use std::cell::Cell;
use std::sync::Arc;

use http::{HeaderValue, Request, StatusCode};
use hyper::body::Incoming;

use crate::admission::limits::Admit;
use crate::config::Snapshot;
use crate::dialect::body_head::parse_body_head;
use crate::dialect::error::GwError;
use crate::dialect::Dialect;
use crate::exchange::request_id::X_REQUEST_ID;
use crate::exchange::Record;
use crate::http::body::{self, error_response, GwResponse, ReadError};
use crate::http::client::UpstreamClient;
use crate::provider::forward::{self, Forwarded};
use crate::serve::attempts;
use crate::telemetry::traces;

/// One request of `dialect`'s route, run against `snap` with this worker's upstream pool.
pub async fn handle(
    client: &UpstreamClient,
    snap: Arc<Snapshot>,
    dialect: Dialect,
    req: Request<Incoming>,
) -> GwResponse {
    let ClientHead {
        request_id,
        traceparent,
        forwarded,
        checks,
    } = ClientHead::of(&req);
    let mut rec = Record::start(dialect, request_id);
    if snap.cost_header {
        rec.send_cost_header();
    }
    if traces::enabled() {
        rec.trace(traceparent);
    }
    let resp = match run(client, &snap, dialect, req, checks, forwarded, &mut rec).await {
        Ok(r) => r,
        Err(e) => {
            rec.set_error(&e);
            error_response(&e, dialect)
        }
    };
    rec.respond(resp)
}

/// What the request path reads from the client's head, found in one pass over its headers
/// instead of a map lookup each (the map hashes every name it is asked for).
struct ClientHead<'a> {
    /// The client's `x-request-id`, if any (the first).
    request_id: Option<&'a HeaderValue>,
    /// The client's `traceparent`, if any (the first), for traces.
    traceparent: Option<&'a HeaderValue>,
    /// The client's headers that belong to an upstream's API (`provider/forward.rs`); boxed
    /// when there are any, so that a request without them carries one pointer.
    forwarded: Option<Box<Forwarded>>,
    checks: HeadChecks,
}

/// The checks of the client's head, answered in this order once the request is known to be
/// proxied: the head's size, then (after the caller's key) its content type.
struct HeadChecks {
    /// The head's size as `limits_header_bytes` counts it: the target and every header as sent
    /// (name, value, `: ` and CRLF).
    size: usize,
    content_type: Result<(), GwError>,
}

impl<'a> ClientHead<'a> {
    fn of(req: &'a Request<Incoming>) -> Self {
        let mut size = req.uri().path_and_query().map_or(0, |p| p.as_str().len());
        let (mut content_type, mut request_id, mut traceparent) = (None, None, None);
        let mut forwarded: Option<Box<Forwarded>> = None;
        for (k, v) in req.headers() {
            let name = k.as_str();
            size += name.len() + v.len() + 4;
            if *k == http::header::CONTENT_TYPE {
                content_type.get_or_insert(v);
            } else if *k == X_REQUEST_ID {
                request_id.get_or_insert(v);
            } else if *k == traces::TRACEPARENT {
                traceparent.get_or_insert(v);
            } else if let Some(a) = forward::allowed(name) {
                forwarded.get_or_insert_with(Box::default).note(a, v);
            }
        }
        ClientHead {
            request_id,
            traceparent,
            forwarded,
            checks: HeadChecks {
                size,
                content_type: check_content_type(content_type),
            },
        }
    }
}

/// Every dialect's body is JSON. A missing content type is tolerated (some clients omit it); a
/// declared non-JSON one is a client error, answered before the body is read.
fn check_content_type(ct: Option<&HeaderValue>) -> Result<(), GwError> {
    let Some(ct) = ct else {
        return Ok(());
    };
    let essence = ct.as_bytes().split(|&b| b == b';').next().unwrap_or(b"");
    let essence = essence.trim_ascii();
    if essence.eq_ignore_ascii_case(b"application/json")
        || (essence.len() > 5 && essence[essence.len() - 5..].eq_ignore_ascii_case(b"+json"))
    {
        return Ok(());
    }
    Err(GwError::new(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        format!(
            "content-type must be application/json, not {:?}",
            String::from_utf8_lossy(ct.as_bytes())
        ),
    ))
}

/// The request head against `limits_header_bytes` (431, like the body's 413). hyper reads heads
/// up to twice the limit (`serve/worker.rs`), so that this answer can be in the client's dialect.
fn check_head_size(size: usize, max: usize) -> Result<(), GwError> {
    if size > max {
        return Err(GwError::new(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            format!("request headers exceed {max} bytes"),
        ));
    }
    Ok(())
}

async fn run(
    client: &UpstreamClient,
    snap: &Snapshot,
    dialect: Dialect,
    req: Request<Incoming>,
    checks: HeadChecks,
    mut forwarded: Option<Box<Forwarded>>,
    rec: &mut Record,
) -> Result<GwResponse, GwError> {
    check_head_size(checks.size, snap.max_header_bytes)?;
    let caller = snap.keys.authenticate(req.headers())?;
    rec.set_caller(&caller);
    checks.content_type?;
    let (parts, body) = req.into_parts();
    if let Some(f) = forwarded.as_mut().filter(|f| f.repeated()) {
        f.join_lines(&parts.headers);
    }
    let limit = snap.max_body_bytes;
    let timeout = snap.body_read_timeout;
    let body = match body::read_all(body, limit, || tokio::time::Instant::now() + timeout).await {
        Ok(b) => b,
        Err(ReadError::TooLarge) => {
            return Err(GwError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("request body exceeds {limit} bytes"),
            ))
        }
        Err(ReadError::TimedOut) => {
            return Err(GwError::new(
                StatusCode::REQUEST_TIMEOUT,
                "the request body did not arrive in time",
            ))
        }
        Err(ReadError::Broken(e)) => {
            return Err(GwError::bad_request(format!("could not read body: {e}")))
        }
    };
    let body_head = parse_body_head(&body)?;
    let Some(route) = snap.routes.get(body_head.model.as_ref()) else {
        rec.set_unknown_model(&body_head.model);
        return Err(GwError::unknown_model(&body_head.model));
    };
    let stream = body_head.stream;
    rec.set_route(&snap.metric_models, route, stream);
    caller.authorize(&route.alias)?;
    let estimate = body.len() as u64 / 4;
    let admission = match snap
        .limits
        .admit(caller.id.as_deref(), &route.alias, estimate)
    {
        Admit::Now(a) => a,
        // A shared policy whose lease ran out: only the store can tell. Boxed, so that the request
        // future stays as small as without a store.
        Admit::Wait => {
            Box::pin(
                snap.limits
                    .admit_waiting(caller.id.as_deref(), &route.alias, estimate),
            )
            .await
        }
    }
    .map_err(|r| rec.rate_limited(r))?;
    rec.set_admission(admission);
    if let Some(micro) = snap
        .budgets
        .reservation(route, &body, &body_head.output_caps)
    {
        let key = caller.id.as_deref();
        let budget = match snap.budgets.admit(key, route, micro) {
            Admit::Now(r) => r,
            Admit::Wait => Box::pin(snap.budgets.admit_waiting(key, route, micro)).await,
        }
        .map_err(|r| rec.over_budget(&r))?;
        rec.set_budget(budget);
    }
    let call = attempts::Call {
        client,
        snap,
        dialect,
        body: &body,
        model_span: body_head.model_span,
        stream_options: body_head.stream_options,
        stream,
        route,
        forwarded,
        // The client's headers are no longer needed: their map carries the upstream request's.
        headers: Cell::new(parts.headers),
    };
    attempts::serve(&call, rec).await
}
