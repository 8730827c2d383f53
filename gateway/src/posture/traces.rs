//! Traces: one span per sampled request and one per upstream attempt, after the OpenTelemetry
//! GenAI semantic conventions, exported as OTLP/HTTP protobuf by a thread of their own.
//!
//! ```json
//! "tracing": { "endpoint": "http://127.0.0.1:4318/v1/traces", "sample_ratio": 0.01,
//!              "service_name": "gateway" }
//! ```
//!
//! Off without the section (or with `sample_ratio` 0). A request is sampled when its client's
//! W3C `traceparent` says so (its `sampled` flag: the client's decision is kept), else by the
//! ratio on its trace id; the client's trace id and span are continued (the request span is the
//! child of the client's), and every attempt carries `traceparent` to its upstream (the attempt
//! span's id; a request not sampled passes the client's header on unchanged).
//!
//! The request path only decides and, when the request ends, appends one record (a few numbers
//! and shared strings) to its worker's own buffer, as the access log does: no lock another worker
//! takes, no I/O, no encoding. The exporter thread (`gw-traces`) takes the buffers every 200 ms,
//! encodes the spans (protobuf, written here: see [`encode`]) and POSTs them to the endpoint. A
//! buffer holds at most [`MAX_BUFFERED`] requests; past it, and when an export fails (the
//! collector is down or slow), spans are dropped and counted (`gateway_trace_spans_dropped_total`,
//! `gateway_trace_exports_total{result}`), never waited for.

use std::cell::Cell;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::{HeaderName, HeaderValue};
use serde_json::Value;

use crate::checker::Checker;
use crate::provider::upstream::ProviderKind;
use crate::routing::Route;

/// Requests a worker's buffer holds between two exports; past it their spans are dropped.
pub const MAX_BUFFERED: usize = 4096;
const EXPORT_EVERY: Duration = Duration::from_millis(200);

pub static TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");

/// The checked `tracing` section.
#[derive(Debug, Clone, PartialEq)]
pub struct TracingConfig {
    /// Host, port and path of the OTLP/HTTP traces endpoint (`http://` only).
    pub host: String,
    pub port: u16,
    pub path: String,
    pub sample_ratio: f64,
    pub service_name: String,
}

impl TracingConfig {
    /// The `tracing` section; `None` when absent, wrong (reported) or sampling nothing.
    pub fn from_config(c: &mut Checker, v: Option<&Value>) -> Option<TracingConfig> {
        let o = c.obj(v?, "$.tracing")?;
        c.warn_unknown(
            o,
            "$.tracing",
            &["endpoint", "sample_ratio", "service_name"],
        );
        let endpoint = c.string(o, "endpoint", "$.tracing");
        let uri = endpoint.and_then(|e| match e.parse::<http::Uri>() {
            Ok(u) if u.scheme_str() == Some("http") && u.host().is_some() => Some(u),
            _ => {
                c.err(
                    "$.tracing.endpoint",
                    "must be an http:// URL (the OTLP/HTTP traces endpoint, e.g. http://127.0.0.1:4318/v1/traces)",
                );
                None
            }
        });
        let ratio = match o.get("sample_ratio") {
            None => Some(1.0),
            Some(v) => match v.as_f64() {
                Some(r) if (0.0..=1.0).contains(&r) => Some(r),
                _ => {
                    c.err("$.tracing.sample_ratio", "must be a number from 0 to 1");
                    None
                }
            },
        };
        let service_name = match o.get("service_name") {
            None => "gateway".to_string(),
            Some(_) => c.string(o, "service_name", "$.tracing")?.to_string(),
        };
        let uri = uri?;
        let ratio = ratio?;
        if ratio == 0.0 {
            return None;
        }
        Some(TracingConfig {
            host: uri
                .host()?
                .trim_matches(|c| c == '[' || c == ']')
                .to_string(),
            port: uri.port_u16().unwrap_or(80),
            path: uri.path().to_string(),
            sample_ratio: ratio,
            service_name,
        })
    }
}

/// The running tracer: the sampling threshold and every worker's buffer.
struct Tracer {
    /// A trace id whose last 8 bytes read below this is sampled.
    threshold: u64,
    cfg: TracingConfig,
    buffers: Mutex<Vec<Arc<Mutex<Vec<Finished>>>>>,
}

static TRACER: OnceLock<Tracer> = OnceLock::new();
static DROPPED: AtomicU64 = AtomicU64::new(0);
static EXPORTED: AtomicU64 = AtomicU64::new(0);
static FAILED: AtomicU64 = AtomicU64::new(0);

/// Starts the exporter for `cfg` (at startup, once; the section is startup-only).
pub fn init(cfg: &TracingConfig) -> anyhow::Result<()> {
    let threshold = if cfg.sample_ratio >= 1.0 {
        u64::MAX
    } else {
        (cfg.sample_ratio * u64::MAX as f64) as u64
    };
    let t = Tracer {
        threshold,
        cfg: cfg.clone(),
        buffers: Mutex::new(Vec::new()),
    };
    if TRACER.set(t).is_err() {
        return Ok(());
    }
    std::thread::Builder::new()
        .name("gw-traces".into())
        .spawn(|| loop {
            std::thread::sleep(EXPORT_EVERY);
            export_once();
        })?;
    Ok(())
}

/// Whether traces are on (the request path's one check when they are not).
#[inline]
pub fn enabled() -> bool {
    TRACER.get().is_some()
}

/// `(spans dropped, exports ok, exports failed)` for the metrics.
pub fn counters() -> (u64, u64, u64) {
    (
        DROPPED.load(Ordering::Relaxed),
        EXPORTED.load(Ordering::Relaxed),
        FAILED.load(Ordering::Relaxed),
    )
}

thread_local! {
    static RNG: Cell<u64> = Cell::new({
        use std::hash::{BuildHasher, Hasher};
        std::collections::hash_map::RandomState::new().build_hasher().finish() | 1
    });
    static BUF: Arc<Mutex<Vec<Finished>>> = {
        let b = Arc::new(Mutex::new(Vec::new()));
        if let Some(t) = TRACER.get() {
            t.buffers.lock().unwrap().push(b.clone());
        }
        b
    };
}

/// A per-thread xorshift: ids need to be unique, not secret.
fn random() -> u64 {
    RNG.with(|r| {
        let mut x = r.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        r.set(x);
        x
    })
}

fn span_id() -> [u8; 8] {
    loop {
        let id = random();
        if id != 0 {
            return id.to_be_bytes();
        }
    }
}

/// A sampled request's trace: its ids and its attempts as they go.
#[derive(Debug)]
pub struct Trace {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    /// The client's span, when it sent a `traceparent`.
    pub parent: Option<[u8; 8]>,
    pub attempts: Vec<Attempt>,
    /// `gen_ai.response.finish_reasons`: the answer's last finish or stop reason.
    pub finish_reason: Option<std::borrow::Cow<'static, str>>,
}

/// One upstream attempt of a sampled request.
#[derive(Debug)]
pub struct Attempt {
    pub span_id: [u8; 8],
    pub deployment: u8,
    /// Offsets from the request's start.
    pub start: Duration,
    pub end: Option<Duration>,
    /// How it failed, when it did (`error.type`).
    pub error: Option<&'static str>,
}

/// The client's `traceparent`: (trace id, parent span id, sampled), when well formed.
fn parse_traceparent(v: &[u8]) -> Option<([u8; 16], [u8; 8], bool)> {
    // version "-" trace-id(32) "-" parent-id(16) "-" flags(2)
    if v.len() < 55 || v[2] != b'-' || v[35] != b'-' || v[52] != b'-' || &v[..2] == b"ff" {
        return None;
    }
    let hex = |s: &[u8], out: &mut [u8]| -> Option<()> {
        for (i, o) in out.iter_mut().enumerate() {
            let h = |c: u8| match c {
                b'0'..=b'9' => Some(c - b'0'),
                b'a'..=b'f' => Some(c - b'a' + 10),
                _ => None,
            };
            *o = h(s[2 * i])? << 4 | h(s[2 * i + 1])?;
        }
        Some(())
    };
    let (mut trace, mut parent, mut flags) = ([0u8; 16], [0u8; 8], [0u8; 1]);
    hex(&v[3..35], &mut trace)?;
    hex(&v[36..52], &mut parent)?;
    hex(&v[53..55], &mut flags)?;
    if trace == [0; 16] || parent == [0; 8] {
        return None;
    }
    Some((trace, parent, flags[0] & 1 == 1))
}

/// The sampling decision for a request whose client sent `traceparent` (or none): its trace, or
/// `None` when it is not sampled (or traces are off).
pub fn start(traceparent: Option<&HeaderValue>) -> Option<Box<Trace>> {
    let t = TRACER.get()?;
    let client = traceparent.and_then(|v| parse_traceparent(v.as_bytes()));
    let (trace_id, parent, sampled) = match client {
        Some((id, parent, sampled)) => (id, Some(parent), sampled),
        None => {
            let mut id = [0u8; 16];
            id[..8].copy_from_slice(&random().to_be_bytes());
            id[8..].copy_from_slice(&random().to_be_bytes());
            (id, None, false)
        }
    };
    let low = u64::from_be_bytes(trace_id[8..].try_into().expect("8 bytes"));
    if !sampled && low > t.threshold {
        return None;
    }
    Some(Box::new(Trace {
        trace_id,
        span_id: span_id(),
        parent,
        attempts: Vec::new(),
        finish_reason: None,
    }))
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// `traceparent` for an upstream request: the attempt's span as the parent, sampled.
pub fn traceparent(trace_id: &[u8; 16], span: &[u8; 8]) -> HeaderValue {
    let mut out = [0u8; 55];
    out[..3].copy_from_slice(b"00-");
    for (i, b) in trace_id.iter().enumerate() {
        out[3 + 2 * i] = HEX[(b >> 4) as usize];
        out[4 + 2 * i] = HEX[(b & 15) as usize];
    }
    out[35] = b'-';
    for (i, b) in span.iter().enumerate() {
        out[36 + 2 * i] = HEX[(b >> 4) as usize];
        out[37 + 2 * i] = HEX[(b & 15) as usize];
    }
    out[52..].copy_from_slice(b"-01");
    crate::http::arena::visible_ascii(&out)
}

impl Trace {
    /// A new attempt on `deployment`, `start` after the request's start: its span id.
    pub fn attempt(&mut self, deployment: usize, start: Duration) -> [u8; 8] {
        let id = span_id();
        self.attempts.push(Attempt {
            span_id: id,
            deployment: deployment as u8,
            start,
            end: None,
            error: None,
        });
        id
    }

    /// A finish reason seen in the answer (`body` an answer or a stream event).
    pub fn saw(&mut self, body: &[u8]) {
        if let Some(r) = crate::json::usage::finish_reason(body) {
            self.finish_reason = Some(match r {
                b"stop" => "stop".into(),
                b"length" => "length".into(),
                b"tool_calls" => "tool_calls".into(),
                b"end_turn" => "end_turn".into(),
                b"max_tokens" => "max_tokens".into(),
                b"tool_use" => "tool_use".into(),
                _ => String::from_utf8_lossy(r).into_owned().into(),
            });
        }
    }

    /// The latest attempt failed (`error.type`), `end` after the request's start.
    pub fn attempt_failed(&mut self, error: &'static str, end: Duration) {
        if let Some(a) = self.attempts.last_mut() {
            a.end = Some(end);
            a.error = Some(error);
        }
    }
}

/// What a finished sampled request hands to the exporter.
#[derive(Debug)]
pub struct Finished {
    pub trace: Box<Trace>,
    pub start: SystemTime,
    pub duration: Duration,
    /// When the serving attempt's answer ended (offset from the start).
    pub upstream_end: Option<Duration>,
    /// `gen_ai.operation.name`.
    pub operation: &'static str,
    /// The route (its alias is `gen_ai.request.model`; an attempt's deployment gives
    /// `gen_ai.provider.name`, `server.address` and the upstream model), when known.
    pub route: Option<Arc<Route>>,
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    pub status: u16,
    /// `error.type` of the request: its HTTP status class or how the stream failed.
    pub error: Option<String>,
}

/// Hands a finished request's spans to the exporter (dropped, and counted, when the worker's
/// buffer is full).
pub fn finish(f: Finished) {
    BUF.with(|b| {
        let mut g = b.lock().unwrap();
        if g.len() >= MAX_BUFFERED {
            DROPPED.fetch_add(1 + f.trace.attempts.len() as u64, Ordering::Relaxed);
        } else {
            g.push(f);
        }
    });
}

/// One export: every worker's buffer taken, encoded and sent. Called by the exporter thread
/// (and once at shutdown).
pub fn export_once() {
    let Some(t) = TRACER.get() else {
        return;
    };
    let bufs: Vec<_> = t.buffers.lock().unwrap().clone();
    let mut batch = Vec::new();
    for b in bufs {
        batch.append(&mut b.lock().unwrap());
    }
    if batch.is_empty() {
        return;
    }
    let spans: u64 = batch
        .iter()
        .map(|f| 1 + f.trace.attempts.len() as u64)
        .sum();
    let body = encode::request(&t.cfg.service_name, &batch);
    match post(&t.cfg, &body) {
        Ok(()) => {
            EXPORTED.fetch_add(1, Ordering::Relaxed);
        }
        Err(_) => {
            FAILED.fetch_add(1, Ordering::Relaxed);
            DROPPED.fetch_add(spans, Ordering::Relaxed);
        }
    }
}

/// POSTs `body` to the endpoint (one connection per export, a second's timeouts): 2xx or an
/// error.
fn post(cfg: &TracingConfig, body: &[u8]) -> std::io::Result<()> {
    let timeout = Duration::from_secs(1);
    let addr = (cfg.host.as_str(), cfg.port)
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| std::io::Error::other("no address"))?;
    let mut s = TcpStream::connect_timeout(&addr, timeout)?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    let head = format!(
        "POST {} HTTP/1.1\r\nhost: {}:{}\r\ncontent-type: application/x-protobuf\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        cfg.path,
        cfg.host,
        cfg.port,
        body.len()
    );
    s.write_all(head.as_bytes())?;
    s.write_all(body)?;
    let mut status = [0u8; 12];
    s.read_exact(&mut status)?;
    if status.starts_with(b"HTTP/1.1 2") || status.starts_with(b"HTTP/1.0 2") {
        Ok(())
    } else {
        Err(std::io::Error::other("collector answered an error"))
    }
}

/// The OTLP protobuf of a batch (`opentelemetry/proto/collector/trace/v1`
/// `ExportTraceServiceRequest`), written directly: the few messages and fields the spans use,
/// each nested message written to its own buffer and then length-prefixed. Off the request path
/// (the exporter thread), so its allocations cost no request anything; written here rather than
/// with `opentelemetry-proto` + `prost` to keep their generated types (a `String` per attribute
/// key, a `Vec` per span) and the tonic/gRPC feature tree out of the gateway for twenty fields.
mod encode {
    use super::{Finished, ProviderKind, Route, UNIX_EPOCH};

    const LEN: u8 = 2;
    const VARINT: u8 = 0;
    const I64: u8 = 1;

    fn varint(out: &mut Vec<u8>, mut v: u64) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }

    fn tag(out: &mut Vec<u8>, field: u32, wire: u8) {
        varint(out, u64::from(field << 3 | u32::from(wire)));
    }

    fn bytes(out: &mut Vec<u8>, field: u32, b: &[u8]) {
        tag(out, field, LEN);
        varint(out, b.len() as u64);
        out.extend_from_slice(b);
    }

    /// A nested message written in place: one byte kept for its length, which is moved up to
    /// make room when the message turns out longer than 127 bytes (spans; attributes are not).
    fn message(out: &mut Vec<u8>, field: u32, f: impl FnOnce(&mut Vec<u8>)) {
        tag(out, field, LEN);
        let at = out.len();
        out.push(0);
        f(out);
        let len = out.len() - at - 1;
        if len < 0x80 {
            out[at] = len as u8;
            return;
        }
        let (mut prefix, mut n, mut v) = ([0u8; 10], 0, len as u64);
        while v >= 0x80 {
            prefix[n] = (v as u8) | 0x80;
            v >>= 7;
            n += 1;
        }
        prefix[n] = v as u8;
        out.splice(at..at + 1, prefix[..=n].iter().copied());
    }

    fn fixed64(out: &mut Vec<u8>, field: u32, v: u64) {
        tag(out, field, I64);
        out.extend_from_slice(&v.to_le_bytes());
    }

    /// `KeyValue { key = 1; AnyValue value = 2 }` as attribute `field` (9 on a span, 1 on a
    /// resource).
    /// A string or integer value's lengths are known up front, so they are written straight
    /// (most of a span's bytes are these); a list goes through [`message`].
    fn attr(out: &mut Vec<u8>, field: u32, key: &str, value: Val<'_>) {
        let any_len = match value {
            Val::Str(s) => 1 + varint_len(s.len() as u64) + s.len(),
            Val::Int(n) => 1 + varint_len(n as u64),
            Val::Strs(_) => {
                return message(out, field, |kv| {
                    bytes(kv, 1, key.as_bytes());
                    message(kv, 2, |v| any(v, value));
                })
            }
        };
        let kv_len =
            1 + varint_len(key.len() as u64) + key.len() + 1 + varint_len(any_len as u64) + any_len;
        out.reserve(kv_len + 2);
        tag(out, field, LEN);
        varint(out, kv_len as u64);
        bytes(out, 1, key.as_bytes());
        tag(out, 2, LEN);
        varint(out, any_len as u64);
        any(out, value);
    }

    fn varint_len(v: u64) -> usize {
        (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
    }

    enum Val<'a> {
        Str(&'a str),
        Int(i64),
        Strs(&'a [&'a str]),
    }

    /// `AnyValue { string_value = 1; int_value = 3; array_value = 5 }`.
    fn any(v: &mut Vec<u8>, value: Val<'_>) {
        match value {
            Val::Str(s) => bytes(v, 1, s.as_bytes()),
            Val::Int(n) => {
                tag(v, 3, VARINT);
                varint(v, n as u64);
            }
            Val::Strs(list) => message(v, 5, |arr| {
                for s in list {
                    message(arr, 1, |e| any(e, Val::Str(s)));
                }
            }),
        }
    }

    fn unix_ns(t: std::time::SystemTime) -> u64 {
        t.duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    }

    /// `Span` fields: trace_id 1, span_id 2, parent_span_id 4, name 5, kind 6, start 7, end 8,
    /// attributes 9, status 15 (`Status { message = 2; code = 3 }`: 1 ok, 2 error).
    #[allow(clippy::too_many_arguments)]
    fn span(
        out: &mut Vec<u8>,
        trace: &[u8; 16],
        id: &[u8; 8],
        parent: Option<&[u8; 8]>,
        name: (&str, &str),
        kind: u64,
        start: u64,
        end: u64,
        attrs: impl FnOnce(&mut Vec<u8>),
        error: Option<&str>,
    ) {
        message(out, 2, |s| {
            bytes(s, 1, trace);
            bytes(s, 2, id);
            if let Some(p) = parent {
                bytes(s, 4, p);
            }
            // `operation model`, or the operation alone.
            let len = name.0.len()
                + if name.1.is_empty() {
                    0
                } else {
                    1 + name.1.len()
                };
            tag(s, 5, LEN);
            varint(s, len as u64);
            s.extend_from_slice(name.0.as_bytes());
            if !name.1.is_empty() {
                s.push(b' ');
                s.extend_from_slice(name.1.as_bytes());
            }
            tag(s, 6, VARINT);
            varint(s, kind);
            fixed64(s, 7, start);
            fixed64(s, 8, end.max(start));
            attrs(s);
            message(s, 15, |st| {
                if let Some(e) = error {
                    bytes(st, 2, e.as_bytes());
                }
                tag(st, 3, VARINT);
                varint(st, if error.is_some() { 2 } else { 1 });
            });
        });
    }

    /// `ExportTraceServiceRequest { ResourceSpans resource_spans = 1 }`, one resource (the
    /// service) and one scope.
    pub fn request(service: &str, batch: &[Finished]) -> Vec<u8> {
        let mut out = Vec::with_capacity(512 * batch.len());
        message(&mut out, 1, |rs| {
            message(rs, 1, |res| attr(res, 1, "service.name", Val::Str(service)));
            message(rs, 2, |ss| {
                message(ss, 1, |scope| {
                    bytes(scope, 1, b"gateway");
                    bytes(scope, 2, env!("CARGO_PKG_VERSION").as_bytes());
                });
                for f in batch {
                    request_spans(ss, f);
                }
            });
        });
        out
    }

    fn request_spans(ss: &mut Vec<u8>, f: &Finished) {
        let t = &f.trace;
        let start = unix_ns(f.start);
        let at = |d: std::time::Duration| start + d.as_nanos() as u64;
        let end = at(f.duration);
        let route: Option<&Route> = f.route.as_deref();
        let model = route.map_or("", |r| r.alias.as_str());
        let deployment = |d: u8| {
            let d = route?.deployments.get(usize::from(d))?;
            let provider = match d.provider.kind {
                ProviderKind::OpenAi => "openai",
                ProviderKind::Anthropic => "anthropic",
            };
            let host = d.provider.origin.host.to_str().unwrap_or("");
            let (address, port) = match host.rsplit_once(':') {
                Some((a, p)) if !p.contains(']') => (a, p.parse::<i64>().ok()),
                _ => (host, None),
            };
            Some((provider, address, port, d.upstream_model.as_str()))
        };
        let last = t.attempts.last().and_then(|a| deployment(a.deployment));
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
                attr(s, 9, "gen_ai.operation.name", Val::Str(f.operation));
                if !model.is_empty() {
                    attr(s, 9, "gen_ai.request.model", Val::Str(model));
                }
                if let Some((provider, _, _, response_model)) = last {
                    attr(s, 9, "gen_ai.provider.name", Val::Str(provider));
                    attr(s, 9, "gen_ai.response.model", Val::Str(response_model));
                }
                if let Some(r) = &t.finish_reason {
                    attr(
                        s,
                        9,
                        "gen_ai.response.finish_reasons",
                        Val::Strs(&[r.as_ref()]),
                    );
                }
                if let Some(n) = f.input_tokens {
                    attr(s, 9, "gen_ai.usage.input_tokens", Val::Int(n as i64));
                }
                if let Some(n) = f.output_tokens {
                    attr(s, 9, "gen_ai.usage.output_tokens", Val::Int(n as i64));
                }
                attr(
                    s,
                    9,
                    "http.response.status_code",
                    Val::Int(i64::from(f.status)),
                );
                if let Some(e) = &f.error {
                    attr(s, 9, "error.type", Val::Str(e));
                }
            },
            f.error.as_deref(),
        );
        let n = t.attempts.len();
        for (i, a) in t.attempts.iter().enumerate() {
            let Some((provider, host, port, response_model)) = deployment(a.deployment) else {
                continue;
            };
            // The serving attempt of a failed request failed as the request did.
            let error = a
                .error
                .or(if i + 1 == n { f.error.as_deref() } else { None });
            let a_end = match (a.end, i + 1 == n) {
                (Some(e), _) => at(e),
                (None, true) => f.upstream_end.map_or(end, at),
                (None, false) => end,
            };
            span(
                ss,
                &t.trace_id,
                &a.span_id,
                Some(&t.span_id),
                (f.operation, response_model),
                3, // CLIENT
                at(a.start),
                a_end,
                |s| {
                    attr(s, 9, "gen_ai.operation.name", Val::Str(f.operation));
                    attr(s, 9, "gen_ai.provider.name", Val::Str(provider));
                    attr(s, 9, "gen_ai.request.model", Val::Str(response_model));
                    attr(s, 9, "server.address", Val::Str(host));
                    if let Some(p) = port {
                        attr(s, 9, "server.port", Val::Int(p));
                    }
                    if error.is_none() && i + 1 == n {
                        attr(s, 9, "gen_ai.response.model", Val::Str(response_model));
                        if let Some(r) = &t.finish_reason {
                            attr(
                                s,
                                9,
                                "gen_ai.response.finish_reasons",
                                Val::Strs(&[r.as_ref()]),
                            );
                        }
                        if let Some(v) = f.input_tokens {
                            attr(s, 9, "gen_ai.usage.input_tokens", Val::Int(v as i64));
                        }
                        if let Some(v) = f.output_tokens {
                            attr(s, 9, "gen_ai.usage.output_tokens", Val::Int(v as i64));
                        }
                    }
                    if let Some(e) = error {
                        attr(s, 9, "error.type", Val::Str(e));
                    }
                },
                error,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparent_round_trip() {
        let v = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let (t, p, s) = parse_traceparent(v).unwrap();
        assert!(s);
        assert_eq!(traceparent(&t, &p).as_bytes(), v);
        assert!(
            parse_traceparent(b"00-00000000000000000000000000000000-00f067aa0ba902b7-01").is_none()
        );
        assert!(
            parse_traceparent(b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7").is_none()
        );
        assert!(
            parse_traceparent(b"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01").is_none()
        );
        let (_, _, s) =
            parse_traceparent(b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00").unwrap();
        assert!(!s);
    }

    #[test]
    fn the_section_is_checked() {
        let check = |v: Value| {
            let mut c = Checker::default();
            let t = TracingConfig::from_config(&mut c, Some(&v));
            (
                t,
                c.errors.iter().map(|e| e.path.clone()).collect::<Vec<_>>(),
            )
        };
        let (t, e) = check(
            serde_json::json!({"endpoint": "http://127.0.0.1:4318/v1/traces", "sample_ratio": 0.5}),
        );
        assert!(e.is_empty());
        let t = t.unwrap();
        assert_eq!(
            (t.host.as_str(), t.port, t.path.as_str()),
            ("127.0.0.1", 4318, "/v1/traces")
        );
        let (t, e) =
            check(serde_json::json!({"endpoint": "https://x/v1/traces", "sample_ratio": 2}));
        assert!(t.is_none());
        assert_eq!(e, ["$.tracing.endpoint", "$.tracing.sample_ratio"]);
        let (t, e) = check(serde_json::json!({"endpoint": "http://x:1/v", "sample_ratio": 0}));
        assert!(t.is_none() && e.is_empty(), "ratio 0 is off");
    }
}
