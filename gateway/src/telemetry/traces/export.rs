//! The export: every worker's buffer of encoded spans, and the exporter thread that takes them
//! every [`EXPORT_EVERY`] and POSTs them behind the one resource and scope header, through the
//! HTTP client of that thread ([`crate::http::post`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::time::Duration;

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

/// The workers' buffers, and the way to ask the exporter thread for an export now.
struct Exporter {
    buffers: Mutex<Vec<Arc<Mutex<Pending>>>>,
    /// An export asked for outside the thread's rhythm (at shutdown): it answers on the sender
    /// it is given once done.
    now: Mutex<mpsc::Sender<mpsc::SyncSender<()>>>,
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

/// Starts the exporter thread for `cfg` (once), its client made on it: an error making it (the
/// endpoint) fails the start.
pub(super) fn start(cfg: &TracingConfig) -> anyhow::Result<()> {
    let (now, asked) = mpsc::channel();
    let e = Exporter {
        buffers: Mutex::new(Vec::new()),
        now: Mutex::new(now),
    };
    if EXPORTER.set(e).is_err() {
        return Ok(());
    }
    let cfg = cfg.clone();
    let (made, ready) = mpsc::sync_channel(1);
    std::thread::Builder::new()
        .name("gw-traces".into())
        .spawn(move || {
            let poster = Poster::new(&cfg.endpoint, "application/x-protobuf", EXPORT_TIMEOUT);
            let poster = match poster {
                Ok(p) => {
                    let _ = made.send(Ok(()));
                    p
                }
                Err(e) => {
                    let _ = made.send(Err(e));
                    return;
                }
            };
            loop {
                match asked.recv_timeout(EXPORT_EVERY) {
                    Ok(done) => {
                        export(&poster, &cfg.service_name);
                        let _ = done.send(());
                    }
                    Err(mpsc::RecvTimeoutError::Timeout) => export(&poster, &cfg.service_name),
                    Err(mpsc::RecvTimeoutError::Disconnected) => return,
                }
            }
        })?;
    ready.recv()??;
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

/// An export now, by the exporter thread, waited for (at shutdown: what is still buffered).
pub fn export_once() {
    let Some(e) = EXPORTER.get() else {
        return;
    };
    let (done, finished) = mpsc::sync_channel(1);
    if e.now.lock().unwrap().send(done).is_ok() {
        let _ = finished.recv_timeout(EXPORT_EVERY + 2 * EXPORT_TIMEOUT);
    }
}

/// One export: every worker's buffer taken, and the spans sent behind the one resource and scope
/// header, in one body.
fn export(poster: &Poster, service_name: &str) {
    let Some(e) = EXPORTER.get() else {
        return;
    };
    let bufs: Vec<_> = e.buffers.lock().unwrap().clone();
    let (mut batch, mut len, mut spans) = (Vec::new(), 0, 0);
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
        batch.push(std::mem::replace(&mut g.bytes, Vec::with_capacity(cap)));
        spans += g.spans;
        g.requests = 0;
        g.spans = 0;
    }
    if batch.is_empty() {
        return;
    }
    // One body, as the upstream path's complete bodies are: the buffers copied once behind the
    // header (off the request path, a few hundred bytes a request).
    let mut body = spans::request_head(service_name, len);
    body.reserve_exact(len);
    for b in &batch {
        body.extend_from_slice(b);
    }
    drop(batch);
    match poster.post(&body) {
        Ok(()) => {
            EXPORTED.fetch_add(1, Ordering::Relaxed);
        }
        Err(_) => {
            FAILED.fetch_add(1, Ordering::Relaxed);
            DROPPED.fetch_add(spans, Ordering::Relaxed);
        }
    }
}
