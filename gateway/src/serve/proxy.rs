//! The request path shared by the three client dialects: read the body, find the route, send
//! upstream (natively or translated), and answer in the client's dialect.

use std::sync::Arc;

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use tokio::time::{timeout_at, Instant};

use crate::config::Snapshot;
use crate::dialect::error::GwError;
use crate::dialect::native::NativeStream;
use crate::dialect::transform::StreamTransform;
use crate::dialect::{translate, Dialect};
use crate::http::body::{
    error_response, json_response, json_response_parts, sse_response, GwResponse, UpBody,
};
use crate::http::client::UpstreamClient;
use crate::http::stream::SseBody;
use crate::posture::access_log::Record;
use crate::posture::limits::Admit;
use crate::serve::head;
use crate::{json, provider};

/// A complete (non-streamed) upstream answer larger than this is refused with 502 rather than
/// buffered: no chat answer is that large, and a broken upstream must not exhaust memory.
const MAX_UPSTREAM_BODY: usize = 64 << 20;

/// One request of `dialect`'s route, run against `snap` with this worker's upstream pool.
pub async fn handle(
    client: &UpstreamClient,
    snap: Arc<Snapshot>,
    dialect: Dialect,
    req: Request<Incoming>,
) -> GwResponse {
    let mut rec = Record::start(dialect, req.headers());
    let resp = match run(client, &snap, dialect, req, &mut rec).await {
        Ok(r) => r,
        Err(e) => {
            rec.set_error(&e);
            error_response(&e, dialect)
        }
    };
    rec.respond(resp)
}

/// Every dialect's body is JSON. A missing content type is tolerated (some clients omit it); a
/// declared non-JSON one is a client error, answered before the body is read.
fn check_content_type(headers: &http::HeaderMap) -> Result<(), GwError> {
    let Some(ct) = headers.get(http::header::CONTENT_TYPE) else {
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

/// The request head against `limits_header_bytes` (431, like the body's 413): the target and
/// every header as sent (name, value, `: ` and CRLF). hyper reads heads up to twice the limit
/// (`serve/worker.rs`), so that this answer can be in the client's dialect.
fn check_head_size(req: &Request<Incoming>, max: usize) -> Result<(), GwError> {
    let mut n = req.uri().path_and_query().map_or(0, |p| p.as_str().len());
    for (k, v) in req.headers() {
        n += k.as_str().len() + v.len() + 4;
    }
    if n > max {
        return Err(GwError::new(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            format!("request headers exceed {max} bytes"),
        ));
    }
    Ok(())
}

async fn read_body(body: Incoming, limit: usize) -> Result<Bytes, GwError> {
    match Limited::new(body, limit).collect().await {
        Ok(c) => Ok(c.to_bytes()),
        Err(e) => {
            if e.is::<http_body_util::LengthLimitError>() {
                Err(GwError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!("request body exceeds {limit} bytes"),
                ))
            } else {
                Err(GwError::bad_request(format!("could not read body: {e}")))
            }
        }
    }
}

async fn run(
    client: &UpstreamClient,
    snap: &Snapshot,
    dialect: Dialect,
    req: Request<Incoming>,
    rec: &mut Record,
) -> Result<GwResponse, GwError> {
    check_head_size(&req, snap.max_header_bytes)?;
    let caller = snap.keys.authenticate(req.headers())?;
    rec.set_caller(&caller);
    check_content_type(req.headers())?;
    let body = match tokio::time::timeout(
        snap.body_read_timeout,
        read_body(req.into_body(), snap.max_body_bytes),
    )
    .await
    {
        Ok(body) => body?,
        Err(_) => {
            return Err(GwError::new(
                StatusCode::REQUEST_TIMEOUT,
                "the request body did not arrive in time",
            ))
        }
    };
    let head = head::parse_head(&body)?;
    let Some(route) = snap.routes.get(head.model.as_ref()).cloned() else {
        rec.set_unknown_model(&head.model);
        return Err(GwError::unknown_model(&head.model));
    };
    let stream = head.stream;
    rec.set_route(&snap.metric_models, &route, stream);
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
    let up_dialect = provider::upstream_dialect(dialect, route.provider.kind);
    let native = up_dialect == dialect;

    let (up_body, tr) = if native {
        let (s, e) = head.model_span;
        let b = UpBody::three(
            body.slice(..s),
            route.upstream_json.clone(),
            body.slice(e..),
        );
        #[cfg(feature = "bench-dom-native")]
        let b = dom_rewrite(&body, &route.upstream_model).unwrap_or(b);
        (b, None)
    } else {
        let (b, t) = translate::request(dialect, up_dialect, &body, &route.upstream_json)?;
        (UpBody::one(b), Some(t))
    };
    let up_req = provider::request(&route.provider, up_dialect, up_body);

    let deadline = Instant::now() + snap.upstream_timeout;
    rec.upstream_start();
    let resp = match timeout_at(deadline, client.request(up_req)).await {
        Err(_) => return Err(GwError::timeout()),
        Ok(Err(e)) => return Err(GwError::unreachable(error_chain(&e))),
        Ok(Ok(r)) => r,
    };
    let status = resp.status();

    if status.is_success() && stream {
        let transform: Box<dyn StreamTransform> = match tr {
            None => Box::new(NativeStream::new(dialect, route.alias_json.clone())),
            Some(t) => t.stream(&route.alias),
        };
        let transform = rec.track_stream(transform);
        return Ok(sse_response(SseBody::new(
            resp.into_body(),
            transform,
            snap.upstream_timeout,
        )));
    }

    let upstream_body = Limited::new(resp.into_body(), MAX_UPSTREAM_BODY);
    let bytes = match timeout_at(deadline, upstream_body.collect()).await {
        Err(_) => return Err(GwError::timeout()),
        Ok(Err(e)) => return Err(GwError::bad_upstream(format!("reading body: {e}"))),
        Ok(Ok(c)) => c.to_bytes(),
    };
    rec.upstream_end();

    if !status.is_success() {
        return upstream_error(status, &bytes, native);
    }
    rec.usage_from_body(&bytes);
    match tr {
        #[cfg(feature = "bench-dom-native")]
        None => Ok(json_response_parts(
            StatusCode::OK,
            dom_rewrite(&bytes, &route.alias).unwrap_or(UpBody::one(bytes)),
        )),
        #[cfg(not(feature = "bench-dom-native"))]
        None => {
            let out = match json::find_model_span(&bytes) {
                Some((s, e)) => {
                    UpBody::three(bytes.slice(..s), route.alias_json.clone(), bytes.slice(e..))
                }
                None => UpBody::one(bytes),
            };
            Ok(json_response_parts(StatusCode::OK, out))
        }
        Some(t) => Ok(json_response(
            StatusCode::OK,
            t.response(&bytes, &route.alias)?,
        )),
    }
}

/// An upstream 4xx/5xx in the client's dialect, with the upstream's status. On the native route a
/// well-formed upstream error body is already in the client's dialect and is passed on unchanged.
fn upstream_error(status: StatusCode, body: &Bytes, native: bool) -> Result<GwResponse, GwError> {
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
    if native && msg.is_some() {
        return Ok(json_response(status, body.clone()));
    }
    let message = msg
        .and_then(|m| m.message.clone())
        .unwrap_or_else(|| format!("upstream returned status {}", status.as_u16()));
    Err(GwError::new(status, message))
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        s.push_str(": ");
        s.push_str(&c.to_string());
        src = c.source();
    }
    s
}

/// Measurement aid only (`--features bench-dom-native`): the native route done the obvious way,
/// parsing the whole body into a DOM and serializing it again, to put a figure on what the
/// targeted model rewrite saves.
#[cfg(feature = "bench-dom-native")]
fn dom_rewrite(body: &[u8], model: &str) -> Option<UpBody> {
    let mut v: serde_json::Value = serde_json::from_slice(body).ok()?;
    v.as_object_mut()?.insert("model".into(), model.into());
    Some(UpBody::one(Bytes::from(serde_json::to_vec(&v).ok()?)))
}
