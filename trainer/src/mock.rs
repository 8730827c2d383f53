//! `trainer mock`: a deterministic upstream for the gateway, speaking OpenAI Chat Completions
//! (`POST /v1/chat/completions`), OpenAI Responses (`POST /v1/responses`) and Anthropic Messages
//! (`POST /v1/messages`), each as one JSON body or as SSE (`"stream": true`).
//!
//! Answers are derived from the request only (see `docs/contracts.md`, "Mock directives"):
//! the text is [`wire::GREETING`] followed by ` wordK` for K = 2..=N (N content frames, default
//! 8), `input_tokens = body_bytes / 4`, `output_tokens = N`. Directives in the last user message
//! (`[[mock:tool_call]]`, `[[mock:call:NAME:ARGS]]`, `[[mock:frames:N]]`, `[[mock:status:NNN]]`, `[[mock:fail_mid_stream]]`,
//! `[[mock:stall]]`, `[[mock:malformed_sse]]`, `[[mock:reset]]`, `[[mock:delay_ms:N]]`,
//! `[[mock:frame_interval_ms:N]]`, `[[mock:retry_after:S]]`) change the answer. An instance can also be started with directives
//! of its own (`--directives`), applied to every request or to its first N, so that two mocks
//! behind one alias can be one healthy and one failing deployment. No auth is required; the only
//! thing recorded is how many requests were served (`GET /mock/requests`).
//!
//! Before any of that, a request is checked as the real API checks it ([`strict`]): an unknown
//! field, a beta-gated field without its `anthropic-beta`, a missing required field and the
//! model-dependent refusals (`max_tokens` to an OpenAI reasoning model, `temperature` with
//! `top_p` to a current Claude model, ...) get the real API's 400, so that a test that passes
//! here does not fail in front of the real upstream for one of those reasons.
//!
//! It is also the upstream of every benchmark, so it is built to be cheap: hyper's HTTP/1 server
//! with keep-alive, one current-thread runtime per worker thread, bodies rendered straight into
//! bytes. Each SSE frame is written (flushed) on its own.

pub mod plan;
pub mod strict;
pub mod wire;

pub use plan::plan;

use anyhow::{Context, Result};
use bytes::Bytes;
use http::{header, Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use tokio::sync::watch;
use wire::{Dialect, Plan, Rendered};

/// `trainer mock` arguments.
#[derive(clap::Args, Debug)]
pub struct MockArgs {
    /// Address to listen on (port 0 picks a free one).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,
    /// Write the bound address to this file (atomically) once listening.
    #[arg(long)]
    pub addr_file: Option<PathBuf>,
    /// Worker threads, each with its own current-thread runtime.
    #[arg(long, default_value_t = 1)]
    pub workers: usize,
    /// Directives applied to every request as if its last user message carried them too, after
    /// its own (e.g. `[[mock:status:503]][[mock:retry_after:2]]`, `[[mock:delay_ms:50]]`).
    #[arg(long)]
    pub directives: Option<String>,
    /// Apply `--directives` only to the first N requests; the rest are answered normally.
    #[arg(long, requires = "directives")]
    pub directive_requests: Option<u64>,
}

/// What one mock instance does beyond what each request asks for.
#[derive(Clone, Debug, Default)]
pub struct MockOptions {
    /// Directives applied to every request (see [`MockArgs::directives`]).
    pub directives: Option<String>,
    /// Only the first N requests get `directives`.
    pub directive_requests: Option<u64>,
}

/// A running instance's options and its request count.
#[derive(Debug, Default)]
struct Instance {
    opts: MockOptions,
    /// Dialect requests received (answered or not).
    requests: AtomicU64,
}

/// `trainer mock`: serve until SIGTERM or SIGINT, then exit 0.
pub fn run(args: MockArgs) -> Result<()> {
    let opts = MockOptions {
        directives: args.directives,
        directive_requests: args.directive_requests,
    };
    let server = MockServer::start_opts(args.listen, args.workers, opts)?;
    let addr = server.addr();
    if let Some(path) = &args.addr_file {
        write_atomically(path, addr.to_string().as_bytes())
            .with_context(|| format!("mock: writing --addr-file {}", path.display()))?;
    }
    // One write, so that a reader of stderr never sees half a line.
    {
        use std::io::Write;
        let _ = std::io::stderr().write_all(format!("mock listening on {addr}\n").as_bytes());
    }
    wait_for_termination().context("mock: waiting for a signal")?;
    // Workers hold no state worth saving: leave without waiting for open connections.
    std::process::exit(0)
}

/// Blocks the calling thread until SIGTERM or SIGINT arrives.
pub(crate) fn wait_for_termination() -> Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        Ok(())
    })
}

pub(crate) fn write_atomically(path: &std::path::Path, data: &[u8]) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    std::fs::write(&tmp, data)?;
    std::fs::rename(&tmp, path)
}

/// A mock running on background threads; stops (and joins its threads) when dropped.
pub struct MockServer {
    addr: SocketAddr,
    stop: Option<watch::Sender<bool>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl MockServer {
    /// Bind `listen` and serve on `workers` threads (at least one).
    pub fn start(listen: SocketAddr, workers: usize) -> Result<MockServer> {
        Self::start_with(listen, workers, None)
    }

    /// As [`MockServer::start`]; with `force_status`, every dialect request gets that status and
    /// the provider's error body (stand-in gateways in tests).
    pub fn start_with(
        listen: SocketAddr,
        workers: usize,
        force_status: Option<u16>,
    ) -> Result<MockServer> {
        let opts = MockOptions {
            directives: force_status.map(|s| format!("[[mock:status:{s}]]")),
            directive_requests: None,
        };
        Self::start_opts(listen, workers, opts)
    }

    /// As [`MockServer::start`], with the instance's own directives.
    pub fn start_opts(listen: SocketAddr, workers: usize, opts: MockOptions) -> Result<MockServer> {
        let instance = Arc::new(Instance {
            opts,
            requests: AtomicU64::new(0),
        });
        let listener = std::net::TcpListener::bind(listen)
            .with_context(|| format!("mock: binding {listen}"))?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let (stop_tx, stop_rx) = watch::channel(false);
        let mut threads = Vec::new();
        for i in 0..workers.max(1) {
            let l = listener.try_clone().context("mock: cloning the listener")?;
            let rx = stop_rx.clone();
            let instance = instance.clone();
            let t = std::thread::Builder::new()
                .name(format!("mock-{i}"))
                .spawn(move || worker(l, rx, instance))
                .context("mock: spawning a worker")?;
            threads.push(t);
        }
        Ok(MockServer {
            addr,
            stop: Some(stop_tx),
            threads,
        })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for MockServer {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(true);
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn worker(
    listener: std::net::TcpListener,
    mut stop: watch::Receiver<bool>,
    instance: Arc<Instance>,
) {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("mock: worker runtime: {e}");
            return;
        }
    };
    rt.block_on(async move {
        let listener = match tokio::net::TcpListener::from_std(listener) {
            Ok(l) => l,
            Err(e) => {
                eprintln!("mock: listener: {e}");
                return;
            }
        };
        loop {
            tokio::select! {
                biased;
                _ = stop.changed() => return,
                r = listener.accept() => match r {
                    Ok((stream, _)) => {
                        let _ = stream.set_nodelay(true);
                        let instance = instance.clone();
                        tokio::spawn(async move {
                            let _ = hyper::server::conn::http1::Builder::new()
                                .keep_alive(true)
                                .serve_connection(
                                    TokioIo::new(stream),
                                    service_fn(move |req| handle(req, instance.clone())),
                                )
                                .await;
                        });
                    }
                    Err(e) => {
                        // Out of descriptors and the like: back off briefly.
                        eprintln!("mock: accept: {e}");
                        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    }
                },
            }
        }
    });
    // Dropping the runtime cancels the open connections (and stalled requests).
}

/// Response body of the mock: one JSON chunk, or SSE frames yielded one per write.
pub enum MockBody {
    Full(Option<Bytes>),
    Frames {
        frames: std::vec::IntoIter<Bytes>,
        /// Return Pending (after waking ourselves) before the next frame, so that hyper flushes
        /// the previous one on its own.
        yield_next: bool,
        /// After the last frame, fail the body: hyper then drops the connection mid-response.
        abort: bool,
        /// `[[mock:frame_interval_ms:N]]`: the pause before each frame after the first.
        interval: std::time::Duration,
        /// The pause in progress before the next frame.
        pause: Option<Pin<Box<tokio::time::Sleep>>>,
    },
}

impl Body for MockBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        match self.get_mut() {
            MockBody::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            MockBody::Frames {
                frames,
                yield_next,
                abort,
                interval,
                pause,
            } => {
                if let Some(p) = pause {
                    if p.as_mut().poll(cx).is_pending() {
                        return Poll::Pending;
                    }
                    *pause = None;
                } else if *yield_next && !interval.is_zero() {
                    *yield_next = false;
                    let mut p = Box::pin(tokio::time::sleep(*interval));
                    if p.as_mut().poll(cx).is_pending() {
                        *pause = Some(p);
                        return Poll::Pending;
                    }
                }
                if *yield_next {
                    *yield_next = false;
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                match frames.next() {
                    Some(f) => {
                        *yield_next = true;
                        Poll::Ready(Some(Ok(Frame::data(f))))
                    }
                    None if *abort => {
                        *abort = false;
                        Poll::Ready(Some(Err(std::io::Error::other(
                            "mock: fail_mid_stream: dropping the connection",
                        ))))
                    }
                    None => Poll::Ready(None),
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, MockBody::Full(None))
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            MockBody::Full(Some(b)) => SizeHint::with_exact(b.len() as u64),
            MockBody::Full(None) => SizeHint::with_exact(0),
            MockBody::Frames { .. } => SizeHint::default(),
        }
    }
}

fn json_response(status: StatusCode, body: Bytes) -> Response<MockBody> {
    let mut r = Response::new(MockBody::Full(Some(body)));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    r
}

/// One request. An error return makes hyper close the connection without an answer
/// (`[[mock:reset]]`).
async fn handle(
    req: Request<Incoming>,
    instance: Arc<Instance>,
) -> Result<Response<MockBody>, std::io::Error> {
    let dialect = match req.uri().path() {
        "/v1/chat/completions" => Dialect::Chat,
        "/v1/responses" => Dialect::Responses,
        "/v1/messages" => Dialect::Messages,
        "/mock/requests" => {
            let n = instance.requests.load(Ordering::Relaxed);
            let body = Bytes::from(format!("{{\"requests\":{n}}}"));
            return Ok(json_response(StatusCode::OK, body));
        }
        "/livez" => {
            let mut r = Response::new(MockBody::Full(Some(Bytes::from_static(b"ok\n"))));
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static("text/plain"),
            );
            return Ok(r);
        }
        other => {
            let msg = format!("mock: no route for {other}");
            return Ok(json_response(
                StatusCode::NOT_FOUND,
                wire::error_body(Dialect::Chat, 404, &msg),
            ));
        }
    };
    if req.method() != Method::POST {
        return Ok(json_response(
            StatusCode::METHOD_NOT_ALLOWED,
            wire::error_body(dialect, 405, "mock: only POST is served"),
        ));
    }
    let seq = instance.requests.fetch_add(1, Ordering::Relaxed);
    let (head, body) = req.into_parts();
    let body = match body.collect().await {
        Ok(c) => c.to_bytes(),
        Err(e) => {
            let msg = format!("mock: reading the request body: {e}");
            return Ok(json_response(
                StatusCode::BAD_REQUEST,
                wire::error_body(dialect, 400, &msg),
            ));
        }
    };
    // What the real API refuses before answering is refused first, as it would be.
    let betas = head
        .headers
        .get_all("anthropic-beta")
        .iter()
        .filter_map(|v| v.to_str().ok());
    if let Err(r) = strict::check(dialect, betas, &body) {
        let status = StatusCode::from_u16(r.status).unwrap_or(StatusCode::BAD_REQUEST);
        return Ok(json_response(status, r.body));
    }
    let plan = match plan(dialect, &body) {
        Ok(mut p) => {
            if let Some(d) = &instance.opts.directives {
                if instance.opts.directive_requests.is_none_or(|n| seq < n) {
                    p.apply_directives(d);
                }
            }
            p
        }
        Err(msg) => {
            return Ok(json_response(
                StatusCode::BAD_REQUEST,
                wire::error_body(dialect, 400, &msg),
            ))
        }
    };
    if plan.delay_ms > 0 {
        tokio::time::sleep(std::time::Duration::from_millis(plan.delay_ms)).await;
    }
    if plan.stall {
        std::future::pending::<()>().await;
    }
    if plan.reset {
        return Err(std::io::Error::other(
            "mock: reset: closing without an answer",
        ));
    }
    Ok(respond(dialect, &plan))
}

/// Build the response for a plan (status directive, JSON body or SSE frames).
pub fn respond(dialect: Dialect, plan: &Plan) -> Response<MockBody> {
    if let Some(code) = plan.status {
        let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let msg = format!("mock: status directive {code}");
        let mut r = json_response(status, wire::error_body(dialect, code, &msg));
        if let Some(s) = plan.retry_after {
            r.headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from(s));
        }
        return r;
    }
    match render_cached(dialect, plan) {
        Rendered::Json(body) => {
            if plan.fail_mid_stream {
                // Promise the whole body, send half of it, then drop the connection.
                let len = body.len();
                let half = body.slice(..len / 2);
                let mut r = Response::new(MockBody::Frames {
                    frames: vec![half].into_iter(),
                    yield_next: false,
                    abort: true,
                    interval: std::time::Duration::ZERO,
                    pause: None,
                });
                r.headers_mut().insert(
                    header::CONTENT_TYPE,
                    header::HeaderValue::from_static("application/json"),
                );
                r.headers_mut()
                    .insert(header::CONTENT_LENGTH, header::HeaderValue::from(len));
                r
            } else {
                json_response(StatusCode::OK, body)
            }
        }
        Rendered::Sse { frames, abort } => {
            let mut r = Response::new(MockBody::Frames {
                frames: frames.into_iter(),
                yield_next: false,
                abort,
                interval: std::time::Duration::from_millis(plan.frame_interval_ms),
                pause: None,
            });
            let h = r.headers_mut();
            h.insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static("text/event-stream"),
            );
            h.insert(
                header::CACHE_CONTROL,
                header::HeaderValue::from_static("no-cache"),
            );
            r
        }
    }
}

/// Answers are a pure function of (dialect, plan) and a benchmark repeats one request: keep the
/// rendered bytes per worker thread and hand out reference-counted copies.
fn render_cached(dialect: Dialect, plan: &Plan) -> Rendered {
    use std::cell::RefCell;
    use std::collections::HashMap;
    use std::hash::{BuildHasher, Hash, Hasher};
    thread_local! {
        static CACHE: RefCell<HashMap<u64, (Dialect, Plan, Rendered)>> = RefCell::new(HashMap::new());
        static HASHER: std::collections::hash_map::RandomState = std::collections::hash_map::RandomState::new();
    }
    let key = HASHER.with(|h| {
        let mut h = h.build_hasher();
        dialect.hash(&mut h);
        plan.hash(&mut h);
        h.finish()
    });
    CACHE.with(|c| {
        let mut c = c.borrow_mut();
        if let Some((d, p, r)) = c.get(&key) {
            if *d == dialect && p == plan {
                return r.clone();
            }
        }
        let r = wire::render(dialect, plan);
        if c.len() >= 256 {
            c.clear();
        }
        c.insert(key, (dialect, plan.clone(), r.clone()));
        r
    })
}

#[cfg(test)]
mod tests;
