//! The export: every worker's buffer of encoded spans, and the exporter thread that takes them
//! every [`EXPORT_EVERY`] and POSTs them behind the one resource and scope header, through the
//! project's HTTP client for a thread of its own ([`crate::http::post`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use bytes::Bytes;

use super::config::TracingConfig;
use super::spans::{self, Finished};
use crate::http::post::Poster;

/// Requests a worker's buffer holds between two exports; past it their spans are dropped.
pub const MAX_BUFFERED: usize = 4096;
const EXPORT_EVERY: Duration = Duration::from_millis(200);
/// How long one export may take, its connection included, before it counts as failed (its
/// spans dropped): the exporter never falls further behind than this.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(1);
/// A worker's first buffer, in bytes (a few dozen requests' spans), so that it does not grow
/// from nothing by copies.
const INITIAL_BUFFER: usize = 16 << 10;

static EXPORTER: OnceLock<Exporter> = OnceLock::new();
static DROPPED: AtomicU64 = AtomicU64::new(0);
static EXPORTED: AtomicU64 = AtomicU64::new(0);
static FAILED: AtomicU64 = AtomicU64::new(0);

/// Where the spans go, and the workers' buffers they wait in.
struct Exporter {
    service_name: String,
    /// Held for a whole export: the thread's and the one at shutdown take turns.
    poster: Mutex<Poster>,
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

thread_local! {
    static BUF: Arc<Mutex<Pending>> = {
        let b = Arc::new(Mutex::new(Pending {
            bytes: Vec::with_capacity(INITIAL_BUFFER),
            ..Pending::default()
        }));
        if let Some(e) = EXPORTER.get() {
            e.buffers.lock().unwrap().push(b.clone());
        }
        b
    };
}

/// The export to `cfg`'s endpoint and its thread (once).
pub(super) fn start(cfg: &TracingConfig) -> anyhow::Result<()> {
    let poster = Poster::new(
        cfg.endpoint.clone(),
        "application/x-protobuf",
        EXPORT_TIMEOUT,
    )?;
    let e = Exporter {
        service_name: cfg.service_name.clone(),
        poster: Mutex::new(poster),
        buffers: Mutex::new(Vec::new()),
    };
    if EXPORTER.set(e).is_err() {
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

/// `(spans dropped, exports ok, exports failed)` for the metrics.
pub fn counters() -> (u64, u64, u64) {
    (
        DROPPED.load(Ordering::Relaxed),
        EXPORTED.load(Ordering::Relaxed),
        FAILED.load(Ordering::Relaxed),
    )
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
        spans::request_spans(&mut g.bytes, f);
    });
}

/// One export: every worker's buffer taken and sent behind the header, uncopied. Called by the
/// exporter thread (and once at shutdown).
pub fn export_once() {
    let Some(e) = EXPORTER.get() else {
        return;
    };
    let poster = e.poster.lock().unwrap();
    let bufs: Vec<_> = e.buffers.lock().unwrap().clone();
    // The header's place first; the buffers follow it as they are.
    let (mut parts, mut len, mut spans) = (vec![Bytes::new()], 0, 0);
    for b in bufs {
        let mut g = b.lock().unwrap();
        if g.requests == 0 {
            continue;
        }
        // The worker's next requests write into a buffer as large as this one was, with room
        // for a third more than it held: a buffer that grows copies what it holds.
        let held = g.bytes.len();
        let cap = g.bytes.capacity().max(held + held / 2);
        len += held;
        parts.push(Bytes::from(std::mem::replace(
            &mut g.bytes,
            Vec::with_capacity(cap),
        )));
        spans += g.spans;
        g.requests = 0;
        g.spans = 0;
    }
    if parts.len() == 1 {
        return;
    }
    parts[0] = Bytes::from(spans::request_head(&e.service_name, len));
    match poster.post(parts) {
        Ok(()) => {
            EXPORTED.fetch_add(1, Ordering::Relaxed);
        }
        Err(_) => {
            FAILED.fetch_add(1, Ordering::Relaxed);
            DROPPED.fetch_add(spans, Ordering::Relaxed);
        }
    }
}
