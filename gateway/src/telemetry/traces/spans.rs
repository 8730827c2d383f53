//! What the gateway's spans say, after the OpenTelemetry GenAI semantic conventions: a request's
//! spans (its own, SERVER, and one per upstream attempt, CLIENT) encoded when it ends
//! ([`request_spans`]), the attributes that come from the config encoded once per worker and
//! deployment ([`Deployment`]), and the one resource and scope an export puts in front of the
//! workers' buffers ([`request_head`]).
//!
//! Written on [`super::otlp`]'s hand-made protobuf, not on `opentelemetry-proto`'s prost types,
//! because it is the cheaper by far for the same spans: on the traced posture's shape
//! (`shapes/chat-minimal-traced.json`, every request sampled, plain release build) the gateway
//! ran 39.5K-39.8K instructions per request with this encoder and 60.5K with the spans built as
//! prost's `Span`s (a `String` per attribute key and value, a `Vec` per span and list) and
//! encoded by prost: +21K, +53% (docs/bench-results/traces-encoding-prost.txt, with the variant's
//! diff). Nor does the gateway take prost and the OpenTelemetry crates it brings as dependencies.

use std::cell::RefCell;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::context::Trace;
use super::otlp::{attr, attr_in, message, span, tag, varint_len, Key, Sink, Small, Val, LEN};
use crate::provider::upstream::ProviderKind;
use crate::routing::Route;

/// What a finished sampled request's spans are encoded from (borrowed from its record).
#[derive(Debug)]
pub struct Finished<'a> {
    pub trace: &'a Trace,
    pub start: SystemTime,
    pub duration: Duration,
    /// When the serving attempt's answer ended (offset from the start).
    pub upstream_end: Option<Duration>,
    /// `gen_ai.operation.name`.
    pub operation: &'static str,
    /// The route (its alias is `gen_ai.request.model`; an attempt's deployment gives
    /// `gen_ai.provider.name`, `server.address` and the upstream model), when known.
    pub route: Option<&'a Arc<Route>>,
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    pub status: u16,
    /// `error.type` of the request: its HTTP status class or how the stream failed.
    pub error: Option<&'a str>,
}

const SERVICE_NAME: Key = Key::new("service.name");
const OPERATION: Key = Key::new("gen_ai.operation.name");
const REQUEST_MODEL: Key = Key::new("gen_ai.request.model");
const PROVIDER: Key = Key::new("gen_ai.provider.name");
const RESPONSE_MODEL: Key = Key::new("gen_ai.response.model");
const FINISH_REASONS: Key = Key::new("gen_ai.response.finish_reasons");
const INPUT_TOKENS: Key = Key::new("gen_ai.usage.input_tokens");
const OUTPUT_TOKENS: Key = Key::new("gen_ai.usage.output_tokens");
const STATUS_CODE: Key = Key::new("http.response.status_code");
const ERROR_TYPE: Key = Key::new("error.type");
const SERVER_ADDRESS: Key = Key::new("server.address");
const SERVER_PORT: Key = Key::new("server.port");

fn unix_ns(t: std::time::SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// `ExportTraceServiceRequest { ResourceSpans resource_spans = 1 }`: one resource (the
/// service) and one scope, whose spans are `spans`, the workers' buffers one after another.
#[cfg(test)]
pub(super) fn request(service: &str, spans: &[Vec<u8>]) -> Vec<u8> {
    let mut out = request_head(service, spans.iter().map(Vec::len).sum());
    for s in spans {
        out.extend_from_slice(s);
    }
    out
}

/// The `ExportTraceServiceRequest` up to its spans, `spans_len` bytes: the buffers follow it as
/// they are, so an export copies none of them.
pub(super) fn request_head(service: &str, spans_len: usize) -> Vec<u8> {
    let mut head = Vec::with_capacity(32 + service.len());
    message(&mut head, 1, |res| {
        attr(res, 1, &SERVICE_NAME, Val::Str(service))
    });
    let mut scope = Vec::with_capacity(32);
    message(&mut scope, 1, |sc| {
        sc.bytes(1, b"gateway");
        sc.bytes(2, env!("CARGO_PKG_VERSION").as_bytes());
    });
    let scope_spans = scope.len() + spans_len;
    let resource_spans = head.len() + 1 + varint_len(scope_spans as u64) + scope_spans;
    let mut out = Vec::with_capacity(head.len() + scope.len() + 22);
    tag(&mut out, 1, LEN);
    out.varint(resource_spans as u64);
    out.extend_from_slice(&head);
    tag(&mut out, 2, LEN);
    out.varint(scope_spans as u64);
    out.extend_from_slice(&scope);
    out
}

/// What every span of a request served by one deployment of a route repeats, encoded once
/// per worker: the attributes that come from the config, not from the request.
struct Deployment {
    /// Held, so that its address (the cache's key) is not reused while it is cached.
    route: Arc<Route>,
    deployment: u8,
    operation: &'static str,
    /// The request span's operation, model (the alias), provider and response model.
    server: Vec<u8>,
    /// An attempt span's operation, provider, request model, server address and port.
    client: Vec<u8>,
    /// The serving attempt's response model.
    response_model: Vec<u8>,
    /// The upstream model (an attempt span's name).
    upstream_model: String,
}

/// Routes' deployments cached by a worker, at most. A miss (a reload's new routes) first lets
/// go of the routes no config holds any more; past this many the cache starts over.
const MAX_CACHED: usize = 64;

thread_local! {
    static DEPLOYMENTS: RefCell<Vec<Deployment>> = const { RefCell::new(Vec::new()) };
}

/// The index in `cache` of `route`'s deployment `d`, encoded on the first request served
/// there; `None` when the route has no such deployment.
fn cached(
    cache: &mut Vec<Deployment>,
    route: &Arc<Route>,
    d: u8,
    operation: &'static str,
) -> Option<usize> {
    if let Some(i) = cache
        .iter()
        .position(|c| c.deployment == d && Arc::ptr_eq(&c.route, route) && c.operation == operation)
    {
        return Some(i);
    }
    let dep = route.deployments.get(usize::from(d))?;
    let provider = match dep.provider.kind {
        ProviderKind::OpenAi => "openai",
        ProviderKind::Anthropic => "anthropic",
    };
    let host = dep.provider.origin.host.to_str().unwrap_or("");
    let (address, port) = match host.rsplit_once(':') {
        Some((a, p)) if !p.contains(']') => (a, p.parse::<i64>().ok()),
        _ => (host, None),
    };
    let upstream_model = dep.upstream_model.as_str();
    let mut server = Vec::new();
    attr(&mut server, 9, &OPERATION, Val::Str(operation));
    attr(&mut server, 9, &REQUEST_MODEL, Val::Str(&route.alias));
    attr(&mut server, 9, &PROVIDER, Val::Str(provider));
    attr(&mut server, 9, &RESPONSE_MODEL, Val::Str(upstream_model));
    let mut client = Vec::new();
    attr(&mut client, 9, &OPERATION, Val::Str(operation));
    attr(&mut client, 9, &PROVIDER, Val::Str(provider));
    attr(&mut client, 9, &REQUEST_MODEL, Val::Str(upstream_model));
    attr(&mut client, 9, &SERVER_ADDRESS, Val::Str(address));
    if let Some(p) = port {
        attr(&mut client, 9, &SERVER_PORT, Val::Int(p));
    }
    let mut response_model = Vec::new();
    attr(
        &mut response_model,
        9,
        &RESPONSE_MODEL,
        Val::Str(upstream_model),
    );
    // A route is another's too when it has more owners than the entries of its deployments.
    let live: Vec<bool> = cache
        .iter()
        .map(|c| {
            let entries = cache.iter().filter(|o| Arc::ptr_eq(&o.route, &c.route));
            Arc::strong_count(&c.route) > entries.count()
        })
        .collect();
    let mut live = live.into_iter();
    cache.retain(|_| live.next().unwrap_or(false));
    if cache.len() >= MAX_CACHED {
        cache.clear();
    }
    cache.push(Deployment {
        route: route.clone(),
        deployment: d,
        operation,
        server,
        client,
        response_model,
        upstream_model: upstream_model.to_owned(),
    });
    Some(cache.len() - 1)
}

/// `gen_ai.response.finish_reasons`, `gen_ai.usage.input_tokens` and `output_tokens`, those
/// known. Into a `Small<320>` when the finish reason has at most 128 bytes: each attribute
/// is below 100 bytes but the reason's.
fn answer_attrs<S: Sink>(s: &mut S, f: &Finished<'_>) {
    if let Some(r) = f.trace.finish_reason.as_deref() {
        attr_in(s, 9, &FINISH_REASONS, Val::Strs(&[r]));
    }
    if let Some(n) = f.input_tokens {
        attr_in(s, 9, &INPUT_TOKENS, Val::Int(n as i64));
    }
    if let Some(n) = f.output_tokens {
        attr_in(s, 9, &OUTPUT_TOKENS, Val::Int(n as i64));
    }
}

/// A finished request's spans (its own and one per attempt) as `ScopeSpans.spans` fields.
pub(super) fn request_spans(ss: &mut Vec<u8>, f: &Finished<'_>) {
    DEPLOYMENTS.with_borrow_mut(|cache| spans(ss, f, cache))
}

fn spans(ss: &mut Vec<u8>, f: &Finished<'_>, cache: &mut Vec<Deployment>) {
    let t = f.trace;
    let start = unix_ns(f.start);
    let at = |d: std::time::Duration| start + d.as_nanos() as u64;
    let end = at(f.duration);
    let model = f.route.map_or("", |r| r.alias.as_str());
    // The serving (last) attempt's deployment, looked up once for both spans.
    let last_deployment = t.attempts.last().map(|a| a.deployment);
    let last = last_deployment.and_then(|d| cached(cache, f.route?, d, f.operation));
    // The answer's attributes, the same in the request span and the serving attempt's:
    // written once on the stack when they fit (a finish reason of at most 128 bytes).
    let mut answer = Small::<320>::new();
    let answer_fits = t.finish_reason.as_ref().is_none_or(|r| r.len() <= 128);
    if answer_fits {
        answer_attrs(&mut answer, f);
    }
    let write_answer = |s: &mut Vec<u8>| {
        if answer_fits {
            s.extend_from_slice(answer.written());
        } else {
            answer_attrs(s, f);
        }
    };
    span(
        ss,
        &t.trace_id,
        &t.span_id,
        t.parent.as_ref(),
        (f.operation, model),
        2, // SERVER
        start,
        end,
        |s| {
            match last {
                Some(d) => s.extend_from_slice(&cache[d].server),
                None => {
                    attr(s, 9, &OPERATION, Val::Str(f.operation));
                    if !model.is_empty() {
                        attr(s, 9, &REQUEST_MODEL, Val::Str(model));
                    }
                }
            }
            write_answer(s);
            attr(s, 9, &STATUS_CODE, Val::Int(i64::from(f.status)));
            if let Some(e) = f.error {
                attr(s, 9, &ERROR_TYPE, Val::Str(e));
            }
        },
        f.error,
    );
    let n = t.attempts.len();
    for (i, a) in t.attempts.iter().enumerate() {
        let d = if Some(a.deployment) == last_deployment {
            last
        } else {
            f.route
                .and_then(|r| cached(cache, r, a.deployment, f.operation))
        };
        let Some(d) = d else {
            continue;
        };
        let d = &cache[d];
        let serving = i + 1 == n;
        // The serving attempt of a failed request failed as the request did.
        let error = a.error.or(if serving { f.error } else { None });
        let a_end = match (a.end, serving) {
            (Some(e), _) => at(e),
            (None, true) => f.upstream_end.map_or(end, at),
            (None, false) => end,
        };
        span(
            ss,
            &t.trace_id,
            &a.span_id,
            Some(&t.span_id),
            (f.operation, &d.upstream_model),
            3, // CLIENT
            at(a.start),
            a_end,
            |s| {
                s.extend_from_slice(&d.client);
                if error.is_none() && serving {
                    s.extend_from_slice(&d.response_model);
                    write_answer(s);
                }
                if let Some(e) = error {
                    attr(s, 9, &ERROR_TYPE, Val::Str(e));
                }
            },
            error,
        );
    }
}
