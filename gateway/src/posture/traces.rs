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
//! The request path decides and, when the request ends, encodes its spans (protobuf, written
//! here: see [`encode`]) straight into its worker's own buffer, as the access log writes its
//! line: no lock another worker takes, no I/O, no record to build and free later. The exporter
//! thread (`gw-traces`) takes the buffers every 200 ms, puts the one resource and scope header in
//! front of their bytes and POSTs them to the endpoint. A buffer holds at most [`MAX_BUFFERED`]
//! requests; past it, and when an export fails (the collector is down or slow), spans are
//! dropped and counted (`gateway_trace_spans_dropped_total`,
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
/// A worker's first buffer, in bytes (a few dozen requests' spans), so that it does not grow
/// from nothing by copies.
const INITIAL_BUFFER: usize = 16 << 10;

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
    buffers: Mutex<Vec<Arc<Mutex<Pending>>>>,
}

/// A worker's finished requests' spans, encoded, waiting for the exporter.
#[derive(Debug, Default)]
struct Pending {
    /// `Span` messages, each as a `ScopeSpans.spans` field.
    bytes: Vec<u8>,
    requests: usize,
    spans: u64,
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
    static BUF: Arc<Mutex<Pending>> = {
        let b = Arc::new(Mutex::new(Pending {
            bytes: Vec::with_capacity(INITIAL_BUFFER),
            ..Pending::default()
        }));
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
    pub attempts: Attempts,
    /// `gen_ai.response.finish_reasons`: the answer's last finish or stop reason.
    pub finish_reason: Option<std::borrow::Cow<'static, str>>,
}

/// A sampled request's attempts: the first inline (most requests make one), the others after it,
/// so that a trace costs one allocation (its box), not two.
#[derive(Debug, Default)]
pub struct Attempts {
    first: Option<Attempt>,
    rest: Vec<Attempt>,
}

impl Attempts {
    fn push(&mut self, a: Attempt) {
        if self.first.is_none() {
            self.first = Some(a);
        } else {
            self.rest.push(a);
        }
    }

    pub fn len(&self) -> usize {
        usize::from(self.first.is_some()) + self.rest.len()
    }

    pub fn is_empty(&self) -> bool {
        self.first.is_none()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Attempt> {
        self.first.iter().chain(&self.rest)
    }

    pub fn last(&self) -> Option<&Attempt> {
        self.rest.last().or(self.first.as_ref())
    }

    fn last_mut(&mut self) -> Option<&mut Attempt> {
        self.rest.last_mut().or(self.first.as_mut())
    }
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
        attempts: Attempts::default(),
        finish_reason: None,
    }))
}

/// Every byte's two lowercase hex digits: one lookup per byte of an id.
static HEX: [[u8; 2]; 256] = {
    let digits = b"0123456789abcdef";
    let mut t = [[0u8; 2]; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = [digits[i >> 4], digits[i & 15]];
        i += 1;
    }
    t
};

/// `bytes` as hex into `out` (twice as long).
fn hex_into(out: &mut [u8], bytes: &[u8]) {
    for (pair, b) in out.chunks_exact_mut(2).zip(bytes) {
        pair.copy_from_slice(&HEX[usize::from(*b)]);
    }
}

/// `traceparent` for an upstream request: the attempt's span as the parent, sampled.
pub fn traceparent(trace_id: &[u8; 16], span: &[u8; 8]) -> HeaderValue {
    let mut out = [0u8; 55];
    out[..3].copy_from_slice(b"00-");
    hex_into(&mut out[3..35], trace_id);
    out[35] = b'-';
    hex_into(&mut out[36..52], span);
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

/// Encodes a finished request's spans into its worker's buffer for the exporter (dropped, and
/// counted, when the buffer is full).
pub fn finish(f: &Finished<'_>) {
    let spans = 1 + f.trace.attempts.len() as u64;
    BUF.with(|b| {
        let mut g = b.lock().unwrap();
        if g.requests >= MAX_BUFFERED {
            DROPPED.fetch_add(spans, Ordering::Relaxed);
            return;
        }
        g.requests += 1;
        g.spans += spans;
        encode::request_spans(&mut g.bytes, f);
    });
}

/// One export: every worker's buffer taken, encoded and sent. Called by the exporter thread
/// (and once at shutdown).
pub fn export_once() {
    let Some(t) = TRACER.get() else {
        return;
    };
    let bufs: Vec<_> = t.buffers.lock().unwrap().clone();
    let (mut batch, mut spans) = (Vec::new(), 0);
    for b in bufs {
        let mut g = b.lock().unwrap();
        if g.requests == 0 {
            continue;
        }
        // The worker's next requests write into a buffer as large as this one was, with room
        // for a third more than it held: a buffer that grows copies what it holds.
        let len = g.bytes.len();
        let cap = g.bytes.capacity().max(len + len / 2);
        batch.push(std::mem::replace(&mut g.bytes, Vec::with_capacity(cap)));
        spans += g.spans;
        g.requests = 0;
        g.spans = 0;
    }
    if batch.is_empty() {
        return;
    }
    // The message's head, then the buffers as they are: sent without copying them into one body.
    let head = encode::request_head(&t.cfg.service_name, &batch);
    let parts: Vec<&[u8]> = std::iter::once(&head[..])
        .chain(batch.iter().map(Vec::as_slice))
        .collect();
    match post(&t.cfg, &parts) {
        Ok(()) => {
            EXPORTED.fetch_add(1, Ordering::Relaxed);
        }
        Err(_) => {
            FAILED.fetch_add(1, Ordering::Relaxed);
            DROPPED.fetch_add(spans, Ordering::Relaxed);
        }
    }
}

/// POSTs the body made of `parts` to the endpoint (one connection per export, a second's
/// timeouts): 2xx or an error.
fn post(cfg: &TracingConfig, parts: &[&[u8]]) -> std::io::Result<()> {
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
        parts.iter().map(|p| p.len()).sum::<usize>()
    );
    let mut slices: Vec<std::io::IoSlice<'_>> = std::iter::once(head.as_bytes())
        .chain(parts.iter().copied())
        .map(std::io::IoSlice::new)
        .collect();
    let mut rest = &mut slices[..];
    while !rest.is_empty() {
        let n = s.write_vectored(rest)?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        std::io::IoSlice::advance_slices(&mut rest, n);
    }
    let mut status = [0u8; 12];
    s.read_exact(&mut status)?;
    if status.starts_with(b"HTTP/1.1 2") || status.starts_with(b"HTTP/1.0 2") {
        Ok(())
    } else {
        Err(std::io::Error::other("collector answered an error"))
    }
}

/// The OTLP protobuf (`opentelemetry/proto/collector/trace/v1` `ExportTraceServiceRequest`),
/// written directly: the few messages and fields the spans use. A request's spans are encoded
/// when it ends, into its worker's buffer ([`encode::request_spans`]); an export puts the one
/// resource and scope in front of the buffers' bytes ([`encode::request`]). Written here rather
/// than with `opentelemetry-proto` + `prost` to keep their generated types (a `String` per
/// attribute key, a `Vec` per span) and the tonic/gRPC feature tree out of the gateway for twenty
/// fields.
mod encode {
    use std::cell::RefCell;
    use std::sync::Arc;

    use super::{Finished, ProviderKind, Route, UNIX_EPOCH};

    const LEN: u8 = 2;
    const VARINT: u8 = 0;
    const I64: u8 = 1;

    /// A field's tag: every field written here is below 16, so it is one byte.
    #[inline]
    fn tag(out: &mut Vec<u8>, field: u8, wire: u8) {
        debug_assert!(field < 16);
        out.push(field << 3 | wire);
    }

    fn varint_len(v: u64) -> usize {
        (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
    }

    /// A nested message written in place, with `reserved` bytes kept for its length (1 for the
    /// small messages, 2 for a span: its length is known only once it is written). A length
    /// that needs another number of bytes moves the message ([`resize_len`]).
    #[inline]
    fn message_in(out: &mut Vec<u8>, field: u8, reserved: usize, f: impl FnOnce(&mut Vec<u8>)) {
        tag(out, field, LEN);
        let at = out.len();
        out.extend_from_slice(&[0x80, 0][..reserved]);
        f(out);
        let len = out.len() - at - reserved;
        match reserved {
            1 if len < 0x80 => out[at] = len as u8,
            2 if (0x80..0x4000).contains(&len) => {
                out[at] = (len as u8) | 0x80;
                out[at + 1] = (len >> 7) as u8;
            }
            _ => resize_len(out, at, reserved, len),
        }
    }

    #[inline]
    fn message(out: &mut Vec<u8>, field: u8, f: impl FnOnce(&mut Vec<u8>)) {
        message_in(out, field, 1, f)
    }

    /// The `reserved` bytes at `at` replaced with `len` as a varint of another size.
    #[cold]
    fn resize_len(out: &mut Vec<u8>, at: usize, reserved: usize, len: usize) {
        let mut prefix = Vec::with_capacity(10);
        prefix.varint(len as u64);
        out.splice(at..at + reserved, prefix);
    }

    /// An attribute's key as `KeyValue.key` (`key = 1`) encodes it, built at compile time.
    struct Key {
        buf: [u8; KEY_BUF],
        len: usize,
    }

    /// A [`Key`]'s room: the longest key's tag, length and name fit.
    const KEY_BUF: usize = 40;

    impl Key {
        const fn new(name: &str) -> Key {
            let b = name.as_bytes();
            assert!(b.len() + 2 <= KEY_BUF);
            let mut buf = [0u8; KEY_BUF];
            buf[0] = 1 << 3 | LEN;
            buf[1] = b.len() as u8;
            let mut i = 0;
            while i < b.len() {
                buf[2 + i] = b[i];
                i += 1;
            }
            Key {
                buf,
                len: b.len() + 2,
            }
        }

        #[inline]
        fn bytes(&self) -> &[u8] {
            &self.buf[..self.len]
        }
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

    /// A string as `AnyValue { string_value = 1 }`: its length.
    fn string_value_len(s: &str) -> usize {
        1 + varint_len(s.len() as u64) + s.len()
    }

    /// Where a field is written: the buffer itself, or a [`Small`] first.
    trait Sink {
        fn byte(&mut self, b: u8);
        fn slice(&mut self, s: &[u8]);
        fn key(&mut self, k: &Key);

        fn varint(&mut self, mut v: u64) {
            while v >= 0x80 {
                self.byte((v as u8) | 0x80);
                v >>= 7;
            }
            self.byte(v as u8);
        }

        fn bytes(&mut self, field: u8, b: &[u8]) {
            self.byte(field << 3 | LEN);
            self.varint(b.len() as u64);
            self.slice(b);
        }

        /// A slice whose length is known at compile time (ids, timestamps).
        fn fixed<const N: usize>(&mut self, b: &[u8; N]) {
            self.slice(b);
        }

        /// An id (shorter than 128 bytes) as field `field`.
        fn id<const N: usize>(&mut self, field: u8, b: &[u8; N]) {
            self.byte(field << 3 | LEN);
            self.byte(N as u8);
            self.fixed(b);
        }
    }

    impl Sink for Vec<u8> {
        #[inline]
        fn byte(&mut self, b: u8) {
            self.push(b);
        }
        #[inline]
        fn slice(&mut self, s: &[u8]) {
            self.extend_from_slice(s);
        }
        #[inline]
        fn key(&mut self, k: &Key) {
            self.extend_from_slice(k.bytes());
        }
    }

    /// A short run of fields written on the stack and then copied to the buffer at once: no
    /// capacity check per byte, and a key copied as one fixed-size block.
    struct Small<const CAP: usize = 128> {
        buf: [u8; CAP],
        at: usize,
    }

    /// What a default [`Small`] holds (the room for a key's whole block comes on top; 128 bytes
    /// in all are still copied inline).
    const SMALL: usize = 128 - KEY_BUF;

    impl<const CAP: usize> Small<CAP> {
        #[inline]
        fn new() -> Self {
            Small {
                buf: [0; CAP],
                at: 0,
            }
        }

        #[inline]
        fn written(&self) -> &[u8] {
            &self.buf[..self.at]
        }

        /// Appends what was written to `out`: the whole buffer copied as one fixed-size block
        /// (a few vector moves, where a copy of the written length is a call), then cut back.
        #[inline]
        fn flush(&self, out: &mut Vec<u8>) {
            let len = out.len();
            out.extend_from_slice(&self.buf);
            out.truncate(len + self.at);
        }
    }

    impl<const CAP: usize> Sink for Small<CAP> {
        #[inline]
        fn byte(&mut self, b: u8) {
            self.buf[self.at] = b;
            self.at += 1;
        }
        #[inline]
        fn slice(&mut self, s: &[u8]) {
            self.buf[self.at..self.at + s.len()].copy_from_slice(s);
            self.at += s.len();
        }
        #[inline]
        fn key(&mut self, k: &Key) {
            self.fixed(&k.buf);
            self.at -= KEY_BUF - k.len;
        }
        #[inline]
        fn fixed<const N: usize>(&mut self, b: &[u8; N]) {
            self.buf[self.at..self.at + N].copy_from_slice(b);
            self.at += N;
        }
    }

    /// `KeyValue { key = 1; AnyValue value = 2 }` as attribute `field` (9 on a span, 1 on a
    /// resource). Every length is known up front, so each is written straight, in one pass; a
    /// short one (every attribute but a long string) through a [`Small`].
    fn attr(out: &mut Vec<u8>, field: u8, key: &Key, value: Val<'_>) {
        let lens = attr_lens(key, value);
        if lens.0 <= SMALL {
            let mut w = Small::<128>::new();
            write_attr(&mut w, field, key, value, lens);
            w.flush(out);
        } else {
            out.reserve(lens.0);
            write_attr(out, field, key, value, lens);
        }
    }

    /// [`attr`] into any sink, which has room for it.
    fn attr_in<S: Sink>(out: &mut S, field: u8, key: &Key, value: Val<'_>) {
        write_attr(out, field, key, value, attr_lens(key, value))
    }

    /// An attribute's lengths: its whole, its `KeyValue`'s, its `AnyValue`'s and a list's
    /// `ArrayValue`'s (0 for a single value).
    type Lens = (usize, usize, usize, usize);

    fn attr_lens(key: &Key, value: Val<'_>) -> Lens {
        let mut values = 0;
        let any_len = match value {
            Val::Str(s) => string_value_len(s),
            Val::Int(n) => 1 + varint_len(n as u64),
            Val::Strs(list) => {
                // `AnyValue { ArrayValue array_value = 5 }`, `ArrayValue { repeated AnyValue
                // values = 1 }`.
                values = list
                    .iter()
                    .map(|s| 1 + varint_len(string_value_len(s) as u64) + string_value_len(s))
                    .sum();
                1 + varint_len(values as u64) + values
            }
        };
        let kv_len = key.len + 1 + varint_len(any_len as u64) + any_len;
        let total = 1 + varint_len(kv_len as u64) + kv_len;
        (total, kv_len, any_len, values)
    }

    /// [`attr`]'s bytes, given its lengths (the `KeyValue`'s, the `AnyValue`'s, a list's).
    #[inline]
    fn write_attr<S: Sink>(
        out: &mut S,
        field: u8,
        key: &Key,
        value: Val<'_>,
        (_, kv_len, any_len, values): Lens,
    ) {
        out.byte(field << 3 | LEN);
        out.varint(kv_len as u64);
        out.key(key);
        out.byte(2 << 3 | LEN);
        out.varint(any_len as u64);
        // `AnyValue { string_value = 1; int_value = 3; array_value = 5 }`.
        match value {
            Val::Str(s) => out.bytes(1, s.as_bytes()),
            Val::Int(n) => {
                out.byte(3 << 3 | VARINT);
                out.varint(n as u64);
            }
            Val::Strs(list) => {
                out.byte(5 << 3 | LEN);
                out.varint(values as u64);
                for s in list {
                    out.byte(1 << 3 | LEN);
                    out.varint(string_value_len(s) as u64);
                    out.bytes(1, s.as_bytes());
                }
            }
        }
    }

    #[derive(Clone, Copy)]
    enum Val<'a> {
        Str(&'a str),
        Int(i64),
        Strs(&'a [&'a str]),
    }

    fn unix_ns(t: std::time::SystemTime) -> u64 {
        t.duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    }

    /// `Span` fields: trace_id 1, span_id 2, parent_span_id 4, name 5, kind 6, start 7, end 8,
    /// attributes 9, status 15 (`Status { message = 2; code = 3 }`: 1 ok, 2 error), as
    /// `ScopeSpans.spans` (field 2).
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
        message_in(out, 2, 2, |s| {
            s.reserve(512);
            let head = SpanHead {
                trace,
                id,
                parent,
                name,
                kind,
                start,
                end: end.max(start),
            };
            // The fixed fields through a `Small` unless the name is long.
            if name.0.len() + name.1.len() <= SMALL - 64 {
                let mut w = Small::<128>::new();
                head.write(&mut w);
                w.flush(s);
            } else {
                head.write(s);
            }
            attrs(s);
            match error {
                // `Status { code = 3 }`, STATUS_CODE_OK.
                None => s.extend_from_slice(&[15 << 3 | LEN, 2, 3 << 3 | VARINT, 1]),
                Some(e) => message(s, 15, |st| {
                    st.bytes(2, e.as_bytes());
                    tag(st, 3, VARINT);
                    st.varint(2);
                }),
            }
        });
    }

    /// A span's fields before its attributes.
    struct SpanHead<'a> {
        trace: &'a [u8; 16],
        id: &'a [u8; 8],
        parent: Option<&'a [u8; 8]>,
        name: (&'a str, &'a str),
        kind: u64,
        start: u64,
        end: u64,
    }

    impl SpanHead<'_> {
        /// At most 61 bytes and the name's.
        #[inline]
        fn write<S: Sink>(&self, s: &mut S) {
            s.id(1, self.trace);
            s.id(2, self.id);
            if let Some(p) = self.parent {
                s.id(4, p);
            }
            // `operation model`, or the operation alone.
            let (op, model) = self.name;
            let len = op.len() + if model.is_empty() { 0 } else { 1 + model.len() };
            s.byte(5 << 3 | LEN);
            s.varint(len as u64);
            s.slice(op.as_bytes());
            if !model.is_empty() {
                s.byte(b' ');
                s.slice(model.as_bytes());
            }
            s.byte(6 << 3 | VARINT);
            s.varint(self.kind);
            s.byte(7 << 3 | I64);
            s.fixed(&self.start.to_le_bytes());
            s.byte(8 << 3 | I64);
            s.fixed(&self.end.to_le_bytes());
        }
    }

    /// `ExportTraceServiceRequest { ResourceSpans resource_spans = 1 }`: one resource (the
    /// service) and one scope, whose spans are `spans`, the workers' buffers one after another.
    #[cfg(test)]
    pub fn request(service: &str, spans: &[Vec<u8>]) -> Vec<u8> {
        let mut out = request_head(service, spans);
        for s in spans {
            out.extend_from_slice(s);
        }
        out
    }

    /// The `ExportTraceServiceRequest` up to its spans: the buffers `spans` follow it as they
    /// are, so an export copies none of them.
    pub fn request_head(service: &str, spans: &[Vec<u8>]) -> Vec<u8> {
        let mut head = Vec::with_capacity(32 + service.len());
        message(&mut head, 1, |res| {
            attr(res, 1, &SERVICE_NAME, Val::Str(service))
        });
        let mut scope = Vec::with_capacity(32);
        message(&mut scope, 1, |sc| {
            sc.bytes(1, b"gateway");
            sc.bytes(2, env!("CARGO_PKG_VERSION").as_bytes());
        });
        let scope_spans = scope.len() + spans.iter().map(Vec::len).sum::<usize>();
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
        if let Some(i) = cache.iter().position(|c| {
            c.deployment == d && Arc::ptr_eq(&c.route, route) && c.operation == operation
        }) {
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
    pub fn request_spans(ss: &mut Vec<u8>, f: &Finished<'_>) {
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

    /// A protobuf message's fields, checked to be well formed (every length consumed exactly).
    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Field<'a> {
        Varint(u64),
        Fixed(u64),
        Len(&'a [u8]),
    }

    fn fields(mut b: &[u8]) -> Vec<(u64, Field<'_>)> {
        fn varint(b: &mut &[u8]) -> u64 {
            let (mut v, mut shift) = (0u64, 0);
            loop {
                let (c, rest) = b.split_first().expect("a varint runs past its message");
                *b = rest;
                v |= u64::from(c & 0x7f) << shift;
                if c & 0x80 == 0 {
                    return v;
                }
                shift += 7;
            }
        }
        let mut out = Vec::new();
        while !b.is_empty() {
            let key = varint(&mut b);
            let f = match key & 7 {
                0 => Field::Varint(varint(&mut b)),
                1 => {
                    let (v, rest) = b.split_at(8);
                    b = rest;
                    Field::Fixed(u64::from_le_bytes(v.try_into().unwrap()))
                }
                2 => {
                    let n = varint(&mut b) as usize;
                    assert!(n <= b.len(), "a length past its message");
                    let (v, rest) = b.split_at(n);
                    b = rest;
                    Field::Len(v)
                }
                w => panic!("wire type {w}"),
            };
            out.push((key >> 3, f));
        }
        out
    }

    fn len<'a>(f: &Field<'a>) -> &'a [u8] {
        match f {
            Field::Len(b) => b,
            other => panic!("not a length-delimited field: {other:?}"),
        }
    }

    /// A span's name, kind, attributes (key to a value's text) and status code.
    type Decoded = (String, u64, Vec<(String, String)>, u64);

    fn decode_span(b: &[u8]) -> Decoded {
        let (mut name, mut kind, mut attrs, mut status) = (String::new(), 0, Vec::new(), 0);
        for (n, f) in fields(b) {
            match n {
                5 => name = String::from_utf8(len(&f).to_vec()).unwrap(),
                6 => kind = if let Field::Varint(v) = f { v } else { 0 },
                9 => {
                    let kv = fields(len(&f));
                    let key = String::from_utf8(len(&kv[0].1).to_vec()).unwrap();
                    let any = fields(len(&kv[1].1));
                    let value = match any[0] {
                        (1, Field::Len(s)) => String::from_utf8(s.to_vec()).unwrap(),
                        (3, Field::Varint(v)) => v.to_string(),
                        (5, Field::Len(arr)) => fields(arr)
                            .iter()
                            .map(|(_, v)| {
                                String::from_utf8(len(&fields(len(v))[0].1).to_vec()).unwrap()
                            })
                            .collect::<Vec<_>>()
                            .join(","),
                        other => panic!("value {other:?}"),
                    };
                    attrs.push((key, value));
                }
                15 => {
                    for (n, f) in fields(len(&f)) {
                        if let (3, Field::Varint(v)) = (n, f) {
                            status = v;
                        }
                    }
                }
                _ => {}
            }
        }
        (name, kind, attrs, status)
    }

    /// An export's service name and spans.
    fn decode(body: &[u8]) -> (String, Vec<Decoded>) {
        let top = fields(body);
        assert_eq!(top.len(), 1);
        let (mut service, mut spans) = (String::new(), Vec::new());
        for (n, f) in fields(len(&top[0].1)) {
            match n {
                1 => {
                    let attr = fields(len(&fields(len(&f))[0].1));
                    service =
                        String::from_utf8(len(&fields(len(&attr[1].1))[0].1).to_vec()).unwrap();
                }
                2 => {
                    for (n, f) in fields(len(&f)) {
                        if n == 2 {
                            spans.push(decode_span(len(&f)));
                        }
                    }
                }
                _ => panic!("field {n} of ResourceSpans"),
            }
        }
        (service, spans)
    }

    fn get<'a>(attrs: &'a [(String, String)], key: &str) -> Option<&'a str> {
        attrs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Spans encoded into two workers' buffers and put behind one header decode as one
    /// well-formed export: a failed attempt and the serving one, a long model name and a long
    /// finish reason (the paths that do not go through the stack), and an error.
    #[test]
    fn spans_encode_as_one_well_formed_export() {
        use crate::provider::upstream::{Provider, ProviderKind};
        let long_model = "m".repeat(150);
        let top = serde_json::json!({
            "providers": {"a": {}, "b": {}},
            "models": {"pool": {"deployments": [
                {"provider": "a", "model": "small", "priority": 0},
                {"provider": "b", "model": long_model, "priority": 1}]}},
        });
        let mut providers = std::collections::HashMap::new();
        providers.insert(
            "a".to_owned(),
            Arc::new(Provider::stub("a", ProviderKind::OpenAi)),
        );
        providers.insert(
            "b".to_owned(),
            Arc::new(Provider::stub("b", ProviderKind::Anthropic)),
        );
        let mut c = Checker::default();
        let routes = crate::routing::section(&mut c, top.as_object().unwrap(), &providers);
        assert!(c.errors.is_empty(), "{:?}", c.errors);
        let route = routes["pool"].clone();
        let mut trace = Trace {
            trace_id: [7; 16],
            span_id: [1; 8],
            parent: None,
            attempts: Attempts::default(),
            finish_reason: Some("r".repeat(300).into()),
        };
        trace.attempt(0, Duration::from_millis(1));
        trace.attempt_failed("server_error", Duration::from_millis(2));
        trace.attempt(1, Duration::from_millis(3));
        let finished = |trace: &Trace, status, error| {
            let mut buf = Vec::new();
            encode::request_spans(
                &mut buf,
                &Finished {
                    trace,
                    start: SystemTime::now(),
                    duration: Duration::from_millis(9),
                    upstream_end: Some(Duration::from_millis(8)),
                    operation: "chat",
                    route: Some(&route),
                    input_tokens: Some(300),
                    output_tokens: Some(2),
                    status,
                    error,
                },
            );
            buf
        };
        let ok = finished(&trace, 200, None);
        trace.finish_reason = Some("stop".into());
        let failed = finished(&trace, 502, Some("502"));
        let (service, spans) = decode(&encode::request("svc", &[ok, failed]));
        assert_eq!(service, "svc");
        assert_eq!(spans.len(), 6);
        let (name, kind, attrs, status) = &spans[0];
        assert_eq!((name.as_str(), *kind, *status), ("chat pool", 2, 1));
        assert_eq!(get(attrs, "gen_ai.request.model"), Some("pool"));
        assert_eq!(get(attrs, "gen_ai.provider.name"), Some("anthropic"));
        assert_eq!(
            get(attrs, "gen_ai.response.model"),
            Some(long_model.as_str())
        );
        assert_eq!(
            get(attrs, "gen_ai.response.finish_reasons"),
            Some("r".repeat(300).as_str())
        );
        assert_eq!(get(attrs, "gen_ai.usage.input_tokens"), Some("300"));
        assert_eq!(get(attrs, "http.response.status_code"), Some("200"));
        let (name, kind, attrs, status) = &spans[1];
        assert_eq!((name.as_str(), *kind, *status), ("chat small", 3, 2));
        assert_eq!(get(attrs, "error.type"), Some("server_error"));
        assert_eq!(get(attrs, "server.address"), Some("h"));
        assert_eq!(get(attrs, "gen_ai.response.model"), None);
        let (name, _, attrs, status) = &spans[2];
        assert_eq!((name, *status), (&format!("chat {long_model}"), 1));
        assert_eq!(get(attrs, "gen_ai.usage.output_tokens"), Some("2"));
        assert_eq!(
            get(attrs, "gen_ai.response.model"),
            Some(long_model.as_str())
        );
        let (_, _, attrs, status) = &spans[3];
        assert_eq!(*status, 2);
        assert_eq!(get(attrs, "gen_ai.response.finish_reasons"), Some("stop"));
        assert_eq!(get(attrs, "error.type"), Some("502"));
        let (_, _, attrs, status) = &spans[5];
        assert_eq!(*status, 2);
        assert_eq!(get(attrs, "error.type"), Some("502"));
        assert_eq!(get(attrs, "gen_ai.usage.input_tokens"), None);

        // The worker's cache holds a route while a config does; the next miss lets go of it.
        let cached = Arc::downgrade(&route);
        drop((routes, route));
        assert!(cached.upgrade().is_some());
        let mut c = Checker::default();
        let reloaded = crate::routing::section(&mut c, top.as_object().unwrap(), &providers);
        let mut buf = Vec::new();
        encode::request_spans(
            &mut buf,
            &Finished {
                trace: &trace,
                start: SystemTime::now(),
                duration: Duration::from_millis(9),
                upstream_end: None,
                operation: "chat",
                route: Some(&reloaded["pool"]),
                input_tokens: None,
                output_tokens: None,
                status: 200,
                error: None,
            },
        );
        assert!(cached.upgrade().is_none());
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
