//! The per-request record: request id, timings, usage, key id; written when the request ends as
//! one JSON access-log line, and fed to the metrics and to the rate limiter's token settlement.
//!
//! A [`Record`] is started when a proxied request arrives and filled in along the request path.
//! For a buffered response it finishes in [`Record::respond`]; for a stream, [`Record::track_stream`]
//! moves it into a [`StreamTransform`] wrapper that watches the upstream events (first content
//! event, usage) and finishes when the stream ends or the client goes away (the body is dropped).
//! Finishing a record exactly once is guaranteed by `Drop`.
//!
//! Lines go to stderr (default) or a file:
//!
//! ```json
//! "access_log": { "path": "/var/log/gateway/access.jsonl" }   // "enabled": false turns it off
//! ```
//!
//! Writing never blocks a worker: each worker appends to its own buffer (its own mutex, which only
//! the log writer thread also takes, every 50 ms), and that thread does the `write`. A sink that
//! cannot keep up (a full pipe) makes lines be dropped past 4 MiB buffered per worker, counted in
//! `gateway_access_log_dropped_total`.

use std::cell::{Cell, RefCell};
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use bytes::BytesMut;
use http::{HeaderName, HeaderValue};
use serde::Deserialize;
use serde_json::Value;

use crate::config::check::ConfigError;
use crate::dialect::error::GwError;
use crate::dialect::transform::StreamTransform;
use crate::dialect::Dialect;
use crate::http::arena;
use crate::http::body::GwResponse;
use crate::json;
use crate::posture::auth::Caller;
use crate::posture::limits::{Admission, Kind, Rejection, Scope};
use crate::posture::metrics::{self, AttemptOutcome, ModelLabels, MODEL_NONE, MODEL_OTHER};
use crate::routing::health::Lease;
use crate::routing::Route;
use crate::sse::SseEvent;

const MAX_BUFFERED: usize = 4 << 20;
pub static X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

// --- configuration and sink ---

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccessLogConfig {
    #[serde(default = "yes")]
    pub enabled: bool,
    /// A file to append to; stderr when absent.
    #[serde(default)]
    pub path: Option<String>,
}

fn yes() -> bool {
    true
}

impl Default for AccessLogConfig {
    fn default() -> Self {
        AccessLogConfig {
            enabled: true,
            path: None,
        }
    }
}

impl AccessLogConfig {
    pub fn from_config(v: Option<&Value>, errors: &mut Vec<ConfigError>) -> AccessLogConfig {
        let Some(v) = v else {
            return AccessLogConfig::default();
        };
        match AccessLogConfig::deserialize(v) {
            Ok(c) => {
                if c.path.as_deref() == Some("") {
                    errors.push(ConfigError {
                        path: "$.access_log.path".into(),
                        message: "must not be empty (omit it for stderr)".into(),
                    });
                }
                c
            }
            Err(e) => {
                errors.push(ConfigError {
                    path: "$.access_log".into(),
                    message: e.to_string(),
                });
                AccessLogConfig::default()
            }
        }
    }
}

struct Sink {
    enabled: AtomicBool,
    buffers: Mutex<Vec<Arc<Mutex<Vec<u8>>>>>,
    /// The sink, and the emptied buffer the next full one is swapped with (so a worker's buffer
    /// keeps its capacity across flushes instead of growing again from nothing).
    out: Mutex<(Box<dyn Write + Send>, Vec<u8>)>,
}

fn sink() -> &'static Sink {
    static S: OnceLock<Sink> = OnceLock::new();
    S.get_or_init(|| {
        std::thread::Builder::new()
            .name("gw-access-log".into())
            .spawn(|| loop {
                std::thread::sleep(Duration::from_millis(50));
                flush();
            })
            .expect("spawn the access-log writer");
        Sink {
            enabled: AtomicBool::new(true),
            buffers: Mutex::new(Vec::new()),
            out: Mutex::new((Box::new(std::io::stderr()), Vec::with_capacity(64 * 1024))),
        }
    })
}

/// Applies the `access_log` section at startup (stderr and enabled until then). The sink is not
/// changed by a reload.
pub fn init(cfg: &AccessLogConfig) -> anyhow::Result<()> {
    let s = sink();
    s.enabled.store(cfg.enabled, Ordering::Relaxed);
    if let (true, Some(p)) = (cfg.enabled, &cfg.path) {
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(p)
            .map_err(|e| anyhow::anyhow!("cannot open access log {p}: {e}"))?;
        s.out.lock().unwrap().0 = Box::new(f);
    }
    Ok(())
}

/// Writes out everything buffered. Called by the writer thread every 50 ms; call it once more at
/// exit so that the last lines are not lost.
pub fn flush() {
    let s = sink();
    let bufs: Vec<_> = s.buffers.lock().unwrap().clone();
    let mut guard = s.out.lock().unwrap();
    let (out, spare) = &mut *guard;
    for b in bufs {
        {
            let mut g = b.lock().unwrap();
            if g.is_empty() {
                continue;
            }
            std::mem::swap(&mut *g, spare);
        }
        let _ = out.write_all(spare);
        spare.clear();
    }
    let _ = out.flush();
}

thread_local! {
    static BUF: Arc<Mutex<Vec<u8>>> = {
        let b = Arc::new(Mutex::new(Vec::with_capacity(64 * 1024)));
        sink().buffers.lock().unwrap().push(b.clone());
        b
    };
    static LINE: RefCell<Vec<u8>> = RefCell::new(Vec::with_capacity(512));
    static ID: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
}

fn emit(line: &[u8]) {
    let s = sink();
    if !s.enabled.load(Ordering::Relaxed) {
        return;
    }
    BUF.with(|b| {
        let mut g = b.lock().unwrap();
        if g.len() + line.len() > MAX_BUFFERED {
            metrics::access_log_line_dropped();
        } else {
            g.extend_from_slice(line);
        }
    });
}

// --- request ids ---

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A fresh request id: 24 hex digits, a per-thread random prefix and a per-thread counter, so
/// unique within the process and very unlikely to repeat across restarts. No allocation of its
/// own: the value is cut from the per-thread header-value arena.
pub fn new_request_id() -> HeaderValue {
    let (mut seed, n) = ID.get();
    if seed == 0 {
        let t = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        let local = 0u8;
        seed = splitmix(t ^ (std::process::id() as u64) << 32 ^ (&local as *const u8 as u64)) | 1;
    }
    ID.set((seed, n + 1));
    let v = (seed >> 32) << 32 | (splitmix(seed ^ n) & 0xffff_ffff);
    let mut buf = [0u8; 24];
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for (i, b) in buf[..16].iter_mut().enumerate() {
        *b = HEX[((v >> (60 - 4 * i)) & 0xf) as usize];
    }
    for (i, b) in buf[16..].iter_mut().enumerate() {
        *b = HEX[((n >> (28 - 4 * i)) & 0xf) as usize];
    }
    arena::visible_ascii(&buf)
}

/// The client's `x-request-id` (`client`) when it is reasonable (1..=128 visible characters
/// from a safe set), else a new one.
pub fn request_id(client: Option<&HeaderValue>) -> HeaderValue {
    if let Some(v) = client {
        let b = v.as_bytes();
        if !b.is_empty()
            && b.len() <= 128
            && b.iter()
                .all(|c| c.is_ascii_alphanumeric() || b"-_.:/+=@".contains(c))
        {
            return v.clone();
        }
    }
    new_request_id()
}

// --- usage ---

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    pub input: Option<u64>,
    pub output: Option<u64>,
}

impl Usage {
    fn merge(&mut self, o: Usage) {
        if o.input.is_some() {
            self.input = self.input.max(o.input);
        }
        if o.output.is_some() {
            self.output = self.output.max(o.output);
        }
    }
}

/// The last `"usage":{...}` object in a body or an event, in any of the three dialects
/// (`prompt_tokens`/`completion_tokens` or `input_tokens`/`output_tokens`), without parsing the
/// rest of the document. Inside a JSON string a quote is escaped, so an unescaped `"usage":`
/// is always a key; the last one is the top-level usage in every dialect's responses. Only the
/// members of that one object are read (nested objects such as `prompt_tokens_details` are
/// skipped); anything malformed gives `None`.
pub fn scan_usage(body: &[u8]) -> Option<Usage> {
    let key = b"\"usage\":";
    let pos = rfind_key(body, key, 4)?;
    let mut p = Scan {
        b: body,
        i: pos + key.len(),
    };
    p.ws();
    if p.peek()? != b'{' {
        return None;
    }
    p.i += 1;
    let mut u = Usage::default();
    let mut prompt = None;
    let mut completion = None;
    loop {
        p.ws();
        match p.peek()? {
            b'}' => break,
            b',' => {
                p.i += 1;
                continue;
            }
            b'"' => {}
            _ => return None,
        }
        let name = p.string()?;
        p.ws();
        if p.peek()? != b':' {
            return None;
        }
        p.i += 1;
        p.ws();
        let slot = match name {
            b"input_tokens" => Some(&mut u.input),
            b"output_tokens" => Some(&mut u.output),
            b"prompt_tokens" => Some(&mut prompt),
            b"completion_tokens" => Some(&mut completion),
            _ => None,
        };
        match slot {
            Some(slot) if p.peek()?.is_ascii_digit() => *slot = Some(p.number()?),
            _ => p.skip_value(0)?,
        }
    }
    u.input = u.input.or(prompt);
    u.output = u.output.or(completion);
    Some(u)
}

/// Where the last `key` starts in `body`, looking backwards from each occurrence of its byte at
/// `anchor` (chosen rare: every usage member has a `:`, but of the three dialects' usage members
/// only OpenAI's nested `reasoning_tokens` has the `g` of `"usage"`, so the first or second hit
/// from the end is the key). For a short key near the end of a short body (the usage object
/// closes every answer) this is a fraction of `memmem::rfind`'s cost, which builds its searcher.
fn rfind_key(body: &[u8], key: &[u8], anchor: usize) -> Option<usize> {
    let (byte, k) = (*key.get(anchor)?, key.len());
    // `at` is the anchor's position in a candidate; the key then spans `at - anchor..`.
    let mut end = body.len().checked_sub(k - 1 - anchor)?;
    while end > anchor {
        let at = memchr::memrchr(byte, &body[anchor..end])? + anchor;
        let start = at - anchor;
        if &body[start..start + k] == key {
            return Some(start);
        }
        end = at;
    }
    None
}

struct Scan<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Scan<'a> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }
    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }
    /// A string's raw bytes (escapes not decoded); the cursor is on its opening quote.
    fn string(&mut self) -> Option<&'a [u8]> {
        let start = self.i + 1;
        let end = json::string_end(self.b, self.i)?;
        self.i = end;
        let b: &'a [u8] = self.b;
        b.get(start..end - 1)
    }
    fn number(&mut self) -> Option<u64> {
        let mut n: u64 = 0;
        while let Some(c @ b'0'..=b'9') = self.peek() {
            n = n.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
            self.i += 1;
        }
        // A fraction or exponent is not a token count.
        match self.peek()? {
            b'.' | b'e' | b'E' => None,
            _ => Some(n),
        }
    }
    /// Skips one value of any kind (nesting bounded).
    fn skip_value(&mut self, depth: u32) -> Option<()> {
        if depth > 64 {
            return None;
        }
        self.ws();
        match self.peek()? {
            b'"' => self.string().map(|_| ()),
            open @ (b'{' | b'[') => {
                let close = if open == b'{' { b'}' } else { b']' };
                self.i += 1;
                loop {
                    self.ws();
                    match self.peek()? {
                        c if c == close => {
                            self.i += 1;
                            return Some(());
                        }
                        b',' | b':' => self.i += 1,
                        _ => self.skip_value(depth + 1)?,
                    }
                }
            }
            _ => {
                let start = self.i;
                while let Some(c) = self.peek() {
                    if matches!(c, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r') {
                        break;
                    }
                    self.i += 1;
                }
                (self.i > start).then_some(())
            }
        }
    }
}

// --- the record ---

struct Inner {
    t0: Instant,
    start_wall: SystemTime,
    route: Dialect,
    request_id: HeaderValue,
    model_label: u16,
    /// The configured route (alias, provider) once known.
    target: Option<Arc<Route>>,
    /// The client's model when it is not a configured alias (truncated).
    asked_model: Option<String>,
    key_id: Option<Arc<str>>,
    status: u16,
    stream: bool,
    upstream_start: Option<Instant>,
    upstream_end: Option<Instant>,
    first_token: Option<Instant>,
    usage: Usage,
    admission: Option<Admission>,
    rejected: Option<Rejection>,
    error: Option<String>,
    stream_error: Option<String>,
    /// The route's deployment of the latest attempt (the one that served, if one did).
    deployment: Option<u8>,
    attempts: u8,
    /// (deployment, how it failed, its status or 0) of each attempt that was retried elsewhere.
    failed: Vec<(u8, AttemptOutcome, u16)>,
    /// The serving attempt's place in flight on its upstream, held until the request ends.
    lease: Option<Lease>,
    finished: bool,
}

/// One proxied request. See the module docs for the call sequence.
pub struct Record {
    request_id: HeaderValue,
    /// `x-ratelimit-*` of the admitting policy, for the response (empty without rate policies).
    ratelimit_headers: Vec<(HeaderName, HeaderValue)>,
    inner: Option<Inner>,
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
            inner: Some(Inner {
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
                rejected: None,
                error: None,
                stream_error: None,
                deployment: None,
                attempts: 0,
                failed: Vec::new(),
                lease: None,
                finished: false,
            }),
        }
    }

    fn with(&mut self, f: impl FnOnce(&mut Inner)) {
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

    /// Just before an upstream request is sent (`now`), to the route's deployment at
    /// `deployment`. The upstream time runs from the first attempt.
    pub fn upstream_start(&mut self, deployment: usize, now: Instant) {
        self.with(|i| {
            if i.upstream_start.is_none() {
                i.upstream_start = Some(now);
            }
            i.deployment = Some(deployment as u8);
            i.attempts = i.attempts.saturating_add(1);
        });
    }

    /// The attempt on `deployment` failed (`status` 0 when there was no answer) and the request
    /// goes on to another deployment.
    pub fn attempt_failed(&mut self, deployment: usize, outcome: AttemptOutcome, status: u16) {
        self.with(|i| i.failed.push((deployment as u8, outcome, status)));
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
    }

    /// An error message for the log line (keep it free of secrets: upstream credentials never
    /// reach a `GwError`).
    pub fn set_error(&mut self, e: &GwError) {
        let m: String = e.message.chars().take(200).collect();
        self.with(|i| i.error = Some(m));
    }

    /// For a streaming response: moves the record into a wrapper around the stream transform.
    /// The line is written when the stream ends, with the usage seen in the upstream events.
    pub fn track_stream(&mut self, inner: Box<dyn StreamTransform>) -> Box<dyn StreamTransform> {
        match self.inner.take() {
            Some(mut rec) => {
                rec.status = 200;
                rec.stream = true;
                Box::new(Tracked {
                    inner,
                    rec: Some(rec),
                    delta: memchr::memmem::Finder::new(b"delta"),
                    usage_key: memchr::memmem::Finder::new(b"\"usage\":"),
                })
            }
            None => inner,
        }
    }

    /// The end of the request path: sets `x-request-id` (and the 429 headers), records the status,
    /// and finishes the record unless a stream took it over.
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

/// Wraps a stream transform to time the first content event, collect usage from the upstream
/// events and finish the record when the stream is dropped.
struct Tracked {
    inner: Box<dyn StreamTransform>,
    rec: Option<Inner>,
    delta: memchr::memmem::Finder<'static>,
    usage_key: memchr::memmem::Finder<'static>,
}

impl StreamTransform for Tracked {
    fn on_event(&mut self, ev: &SseEvent, out: &mut BytesMut) -> Result<(), GwError> {
        if let Some(r) = self.rec.as_mut() {
            // Named events (Anthropic Messages, OpenAI Responses upstreams) say by their name
            // whether they are content or carry usage, which spares a search of every frame;
            // chat completions frames have no name and are searched.
            let named = !ev.event.is_empty();
            if r.first_token.is_none() {
                let hay = if named { &ev.event } else { &ev.data };
                if self.delta.find(hay).is_some() {
                    r.first_token = Some(Instant::now());
                }
            }
            let usage = if named {
                matches!(
                    &ev.event[..],
                    b"message_start"
                        | b"message_delta"
                        | b"response.completed"
                        | b"response.incomplete"
                )
            } else {
                self.usage_key.find(&ev.data).is_some()
            };
            if usage {
                if let Some(u) = scan_usage(&ev.data) {
                    r.usage.merge(u);
                }
            }
        }
        let res = self.inner.on_event(ev, out);
        if let (Err(e), Some(r)) = (&res, self.rec.as_mut()) {
            r.stream_error = Some(e.message.chars().take(200).collect());
        }
        res
    }

    fn on_end(&mut self, out: &mut BytesMut) -> Result<(), GwError> {
        if let Some(r) = self.rec.as_mut() {
            r.upstream_end = Some(Instant::now());
        }
        let res = self.inner.on_end(out);
        if let (Err(e), Some(r)) = (&res, self.rec.as_mut()) {
            r.stream_error = Some(e.message.chars().take(200).collect());
        }
        res
    }

    fn on_error(&mut self, err: &GwError, out: &mut BytesMut) {
        if let Some(r) = self.rec.as_mut() {
            if r.stream_error.is_none() {
                r.stream_error = Some(err.message.chars().take(200).collect());
            }
            if r.upstream_end.is_none() {
                r.upstream_end = Some(Instant::now());
            }
        }
        self.inner.on_error(err, out)
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        if let Some(r) = self.rec.as_mut() {
            if r.upstream_end.is_none() && r.stream_error.is_none() {
                r.stream_error = Some("client disconnected".into());
            }
            finish(r);
        }
    }
}

fn finish(i: &mut Inner) {
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
        rejected,
    });
    metrics::inflight_add(i.route, -1);
    if !sink().enabled.load(Ordering::Relaxed) {
        return;
    }
    LINE.with(|l| {
        let mut l = l.borrow_mut();
        l.clear();
        write_line(&mut l, i, duration, upstream, first_token);
        emit(&l);
    });
}

/// `n` as exactly `width` digits (zero-padded; `n` must fit).
fn push_padded(out: &mut Vec<u8>, n: u64, width: usize) {
    let mut buf = [b'0'; 20];
    let start = json::digits_into(&mut buf, n);
    out.extend_from_slice(&buf[(20 - width).min(start)..]);
}

/// Milliseconds with microsecond precision: `12.345`, written in one piece.
fn push_ms(out: &mut Vec<u8>, d: Duration) {
    let us = d.as_micros().min(u128::from(u64::MAX)) as u64;
    let frac = us % 1000;
    let mut buf = [0u8; 24];
    buf[20] = b'.';
    buf[21] = b'0' + (frac / 100) as u8;
    buf[22] = b'0' + (frac / 10 % 10) as u8;
    buf[23] = b'0' + (frac % 10) as u8;
    let whole: &mut [u8; 20] = (&mut buf[..20]).try_into().expect("twenty bytes");
    let start = json::digits_into(whole, us / 1000);
    out.extend_from_slice(&buf[start..]);
}

fn write_line(
    out: &mut Vec<u8>,
    i: &Inner,
    duration: Duration,
    upstream: Option<Duration>,
    first_token: Option<Duration>,
) {
    out.extend_from_slice(b"{\"ts\":\"");
    write_rfc3339(out, i.start_wall);
    out.extend_from_slice(b"\",\"request_id\":");
    // A request id is visible ASCII from a set that needs no escaping (see `request_id`).
    out.push(b'"');
    out.extend_from_slice(i.request_id.as_bytes());
    out.push(b'"');
    out.extend_from_slice(b",\"route\":\"");
    out.extend_from_slice(match i.route {
        Dialect::Chat => b"/v1/chat/completions".as_slice(),
        Dialect::Messages => b"/v1/messages",
        Dialect::Responses => b"/v1/responses",
    });
    out.extend_from_slice(b"\",\"model\":");
    match (&i.target, &i.asked_model) {
        (Some(r), _) => out.extend_from_slice(&r.alias_json),
        (None, Some(m)) => json::write_str(out, m),
        (None, None) => out.extend_from_slice(b"null"),
    }
    // The deployment that served (or was tried last); one that was never tried is named only
    // when the alias has no other.
    let deployment = i.target.as_ref().and_then(|r| {
        let n = match i.deployment {
            Some(n) => n as usize,
            None if r.deployments.len() == 1 => 0,
            None => return None,
        };
        r.deployments.get(n)
    });
    out.extend_from_slice(b",\"provider\":");
    match deployment {
        Some(d) => out.extend_from_slice(&d.provider_json),
        None => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(b",\"upstream_model\":");
    match deployment {
        Some(d) => out.extend_from_slice(&d.upstream_json),
        None => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(b",\"attempts\":");
    match i.attempts {
        n @ 0..=9 => out.push(b'0' + n),
        n => json::write_u64(out, u64::from(n)),
    }
    if let (Some(r), false) = (&i.target, i.failed.is_empty()) {
        out.extend_from_slice(b",\"failed_attempts\":[");
        for (n, (d, outcome, status)) in i.failed.iter().enumerate() {
            let d = &r.deployments[*d as usize];
            if n > 0 {
                out.push(b',');
            }
            out.extend_from_slice(b"{\"provider\":");
            out.extend_from_slice(&d.provider_json);
            out.extend_from_slice(b",\"upstream_model\":");
            out.extend_from_slice(&d.upstream_json);
            out.extend_from_slice(b",\"outcome\":\"");
            out.extend_from_slice(outcome.as_str().as_bytes());
            out.push(b'"');
            if *status > 0 {
                out.extend_from_slice(b",\"status\":");
                json::write_u64(out, u64::from(*status));
            }
            out.push(b'}');
        }
        out.push(b']');
    }
    out.extend_from_slice(b",\"status\":");
    json::write_u64(out, u64::from(i.status));
    out.extend_from_slice(if i.stream {
        b",\"stream\":true,\"latency_ms\":".as_slice()
    } else {
        b",\"stream\":false,\"latency_ms\":"
    });
    push_ms(out, duration);
    match upstream {
        Some(u) => {
            out.extend_from_slice(b",\"upstream_latency_ms\":");
            push_ms(out, u);
        }
        None => out.extend_from_slice(b",\"upstream_latency_ms\":null"),
    }
    if let Some(t) = first_token {
        out.extend_from_slice(b",\"ttft_ms\":");
        push_ms(out, t);
    }
    match i.usage.input {
        Some(n) => {
            out.extend_from_slice(b",\"tokens_in\":");
            json::write_u64(out, n);
        }
        None => out.extend_from_slice(b",\"tokens_in\":null"),
    }
    match i.usage.output {
        Some(n) => {
            out.extend_from_slice(b",\"tokens_out\":");
            json::write_u64(out, n);
        }
        None => out.extend_from_slice(b",\"tokens_out\":null"),
    }
    out.extend_from_slice(b",\"key_id\":");
    match &i.key_id {
        Some(k) => json::write_str(out, k),
        None => out.extend_from_slice(b"null"),
    }
    if let Some(r) = &i.rejected {
        out.extend_from_slice(b",\"rate_limited\":\"");
        out.extend_from_slice(r.scope.as_str().as_bytes());
        out.push(b':');
        out.extend_from_slice(r.kind.as_str().as_bytes());
        out.push(b'"');
    }
    if let Some(e) = &i.error {
        out.extend_from_slice(b",\"error\":");
        json::write_str(out, e);
    }
    if let Some(e) = &i.stream_error {
        out.extend_from_slice(b",\"stream_error\":");
        json::write_str(out, e);
    }
    out.extend_from_slice(b"}\n");
}

/// `2026-11-29T23:59:59.123Z`. The part up to the seconds is cached per thread and only
/// rebuilt when the second changes.
fn write_rfc3339(out: &mut Vec<u8>, t: SystemTime) {
    thread_local! {
        static CACHE: Cell<(u64, [u8; 19])> = const { Cell::new((u64::MAX, [0; 19])) };
    }
    let d = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or(Duration::ZERO);
    let secs = d.as_secs();
    let (cached, mut prefix) = CACHE.get();
    if cached != secs {
        let mut v = Vec::with_capacity(19);
        civil_prefix(&mut v, secs);
        prefix.copy_from_slice(&v[..19]);
        CACHE.set((secs, prefix));
    }
    out.extend_from_slice(&prefix);
    out.push(b'.');
    push_padded(out, u64::from(d.subsec_millis()), 3);
    out.push(b'Z');
}

/// `YYYY-MM-DDTHH:MM:SS` for seconds since the epoch (years 0..=9999).
fn civil_prefix(out: &mut Vec<u8>, secs: u64) {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = if month <= 2 { y + 1 } else { y };
    push_padded(out, year.clamp(0, 9999) as u64, 4);
    out.push(b'-');
    push_padded(out, month as u64, 2);
    out.push(b'-');
    push_padded(out, day as u64, 2);
    out.push(b'T');
    push_padded(out, rem / 3600, 2);
    out.push(b':');
    push_padded(out, rem / 60 % 60, 2);
    out.push(b':');
    push_padded(out, rem % 60, 2);
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderMap;

    #[test]
    fn rfind_key_finds_what_memmem_finds() {
        let key = b"\"usage\":";
        let bodies: [&[u8]; 9] = [
            b"",
            b"\"usage\"",
            b"\"usage\":",
            b"x\"usage\":{}",
            b"\"usage\":\"usage\":1",
            b"::::::::::",
            b"\"usage\" : 1, \"usage\"::",
            b"\"usag\":\"usage\":\"sage\":",
            br#"{"a":"\"usage\": 5","usage":{"prompt_tokens":1}}"#,
        ];
        // And every short string over the key's own alphabet, from a fixed pseudo-random walk.
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let alphabet = b"\"usage:x";
        let random: Vec<Vec<u8>> = (0..2000)
            .map(|_| {
                seed = splitmix(seed);
                let len = (seed % 24) as usize;
                (0..len)
                    .map(|i| alphabet[(splitmix(seed ^ i as u64) % 8) as usize])
                    .collect()
            })
            .collect();
        for b in bodies
            .iter()
            .copied()
            .chain(random.iter().map(Vec::as_slice))
        {
            for anchor in 0..key.len() {
                assert_eq!(
                    rfind_key(b, key, anchor),
                    memchr::memmem::rfind(b, key),
                    "{b:?} {anchor}"
                );
            }
        }
    }

    #[test]
    fn usage_in_every_dialect() {
        let chat = br#"{"id":"x","choices":[{"message":{"content":"\"usage\": 5"}}],"usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15}}"#;
        assert_eq!(
            scan_usage(chat),
            Some(Usage {
                input: Some(12),
                output: Some(3)
            })
        );
        let msg = br#"{"type":"message_start","message":{"id":"m","usage":{"input_tokens":7,"output_tokens":1}}}"#;
        assert_eq!(
            scan_usage(msg),
            Some(Usage {
                input: Some(7),
                output: Some(1)
            })
        );
        let delta = br#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage": {"output_tokens":9}}"#;
        assert_eq!(
            scan_usage(delta),
            Some(Usage {
                input: None,
                output: Some(9)
            })
        );
        let resp = br#"{"type":"response.completed","response":{"output":[],"usage":{"input_tokens":4,"output_tokens":2,"total_tokens":6}}}"#;
        assert_eq!(scan_usage(resp).unwrap().output, Some(2));
        assert_eq!(scan_usage(br#"{"usage":null}"#), None);
        assert_eq!(scan_usage(br#"{"usage":{"input_tokens":"#), None);
        assert_eq!(scan_usage(b"garbage"), None);
        let nested = br#"{"usage":{"prompt_tokens":19,"prompt_tokens_details":{"cached_tokens":0,"x":[1,{"a":"}"}]},"completion_tokens":10,"total_tokens":29}}"#;
        assert_eq!(
            scan_usage(nested),
            Some(Usage {
                input: Some(19),
                output: Some(10)
            })
        );
        assert_eq!(scan_usage(br#"{"usage":{"input_tokens":1.5}}"#), None);
        assert_eq!(
            scan_usage(br#"{"usage":{"input_tokens":99999999999999999999999}}"#),
            None
        );
    }

    #[test]
    fn request_ids() {
        let a = new_request_id();
        let b = new_request_id();
        assert_ne!(a, b);
        assert_eq!(a.len(), 24);
        let mut h = HeaderMap::new();
        h.insert("x-request-id", HeaderValue::from_static("abc-123"));
        assert_eq!(request_id(h.get(&X_REQUEST_ID)), "abc-123");
        h.insert(
            "x-request-id",
            HeaderValue::from_static("bad id with spaces"),
        );
        assert_eq!(request_id(h.get(&X_REQUEST_ID)).len(), 24);
    }

    #[test]
    fn numbers() {
        let mut o = Vec::new();
        json::write_u64(&mut o, 0);
        o.push(b' ');
        json::write_u64(&mut o, u64::MAX);
        o.push(b' ');
        push_ms(&mut o, Duration::from_micros(12_045));
        o.push(b' ');
        push_ms(&mut o, Duration::from_micros(7));
        assert_eq!(
            String::from_utf8(o).unwrap(),
            "0 18446744073709551615 12.045 0.007"
        );
        for us in [
            0,
            9,
            10,
            99,
            100,
            999,
            1000,
            1001,
            99_999,
            123_456_789,
            u64::MAX,
        ] {
            let mut o = Vec::new();
            push_ms(&mut o, Duration::from_micros(us));
            assert_eq!(
                String::from_utf8(o).unwrap(),
                format!("{}.{:03}", us / 1000, us % 1000)
            );
        }
        for (n, width) in [(0, 2), (7, 2), (42, 2), (5, 3), (999, 3), (2026, 4), (9, 4)] {
            let mut o = Vec::new();
            push_padded(&mut o, n, width);
            assert_eq!(String::from_utf8(o).unwrap(), format!("{n:0width$}"));
        }
    }

    #[test]
    fn rfc3339() {
        let mut o = Vec::new();
        write_rfc3339(
            &mut o,
            SystemTime::UNIX_EPOCH + Duration::from_millis(1_764_460_799_123),
        );
        assert_eq!(String::from_utf8(o).unwrap(), "2025-11-29T23:59:59.123Z");
        let mut o = Vec::new();
        write_rfc3339(
            &mut o,
            SystemTime::UNIX_EPOCH + Duration::from_secs(951_782_400),
        );
        assert_eq!(String::from_utf8(o).unwrap(), "2000-02-29T00:00:00.000Z");
    }

    #[test]
    fn line_is_json_with_fields() {
        let mut h = HeaderMap::new();
        h.insert("x-request-id", HeaderValue::from_static("req-1"));
        let mut r = Record::start(Dialect::Chat, h.get(&X_REQUEST_ID));
        r.set_unknown_model("weird\"model");
        r.upstream_start(0, Instant::now());
        r.usage_from_body(br#"{"usage":{"prompt_tokens":5,"completion_tokens":2}}"#);
        let mut i = r.inner.take().unwrap();
        let mut out = Vec::new();
        write_line(&mut out, &i, Duration::from_millis(5), None, None);
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
