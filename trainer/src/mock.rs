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
//! It is also the upstream of every benchmark, so it is built to be cheap: hyper's HTTP/1 server
//! with keep-alive, one current-thread runtime per worker thread, bodies rendered straight into
//! bytes. Each SSE frame is written (flushed) on its own.

pub mod wire;

use anyhow::{Context, Result};
use bytes::Bytes;
use http::{header, Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde::Deserialize;
use std::borrow::Cow;
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
    let body = match req.into_body().collect().await {
        Ok(c) => c.to_bytes(),
        Err(e) => {
            let msg = format!("mock: reading the request body: {e}");
            return Ok(json_response(
                StatusCode::BAD_REQUEST,
                wire::error_body(dialect, 400, &msg),
            ));
        }
    };
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

#[derive(Deserialize)]
struct Head<'a> {
    #[serde(borrow, default)]
    model: Option<Cow<'a, str>>,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    stream_options: Option<StreamOptions>,
}

#[derive(Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: Option<bool>,
}

/// Decide the answer to a request body in `dialect`. Errors are messages for a 400.
pub fn plan(dialect: Dialect, body: &[u8]) -> Result<Plan, String> {
    let head: Head =
        serde_json::from_slice(body).map_err(|e| format!("mock: request is not JSON: {e}"))?;
    let model = head.model.as_deref().unwrap_or("mock");
    let mut plan = Plan::plain(
        wire::json_str(model),
        head.stream.unwrap_or(false),
        body.len(),
    );
    plan.include_usage = head
        .stream_options
        .and_then(|o| o.include_usage)
        .unwrap_or(false);
    // Only look for directives (a full parse) when a marker appears anywhere in the body.
    if contains(body, b"[[mock:") {
        let v: serde_json::Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
        if let Some(text) = last_user_text(dialect, &v) {
            plan.apply_directives(&text);
        }
        if contains(body, b"[[mock:call:") {
            script_tool_turn(dialect, &v, &mut plan)?;
        }
    }
    Ok(plan)
}

/// The scripted tool-call turn of an agent session (`[[mock:call:NAME:ARGS]]` in any user
/// message, not only the last: an agent's last user message is often its tool result). While
/// the conversation holds no tool result the answer is a call of the tool NAME, which the
/// request must offer; once it holds one, the answer is text quoting the last tool result, so
/// that the client sees its result crossed back.
fn script_tool_turn(
    dialect: Dialect,
    v: &serde_json::Value,
    plan: &mut Plan,
) -> Result<(), String> {
    if plan.call.is_none() {
        let texts = user_texts(dialect, v);
        if let Some(t) = texts.iter().rev().find(|t| t.contains("[[mock:call:")) {
            plan.apply_directives(t);
        }
    }
    let Some((name, _)) = &plan.call else {
        return Ok(());
    };
    if let Some(result) = last_tool_result(dialect, v) {
        let quoted: String = result.chars().take(2000).collect();
        plan.call = None;
        plan.answer = Some(format!("The tool said: {quoted}"));
        return Ok(());
    }
    if !offered_tools(dialect, v).any(|t| t == name) {
        return Err(format!("mock: the request offers no tool named {name:?}"));
    }
    Ok(())
}

/// A message's text: a string content, or its parts' `text` members joined by newlines.
fn content_text(content: &serde_json::Value) -> Option<String> {
    if let Some(s) = content.as_str() {
        return Some(s.to_owned());
    }
    let mut out = String::new();
    for part in content.as_array()? {
        if let Some(t) = part.get("text").and_then(|t| t.as_str()) {
            out.push_str(t);
            out.push('\n');
        }
    }
    Some(out)
}

/// The conversation's messages (chat and Anthropic `messages`, Responses `input` items).
fn conversation(dialect: Dialect, v: &serde_json::Value) -> &[serde_json::Value] {
    let list = match dialect {
        Dialect::Chat | Dialect::Messages => v.get("messages"),
        Dialect::Responses => v.get("input"),
    };
    list.and_then(|l| l.as_array()).map_or(&[], Vec::as_slice)
}

/// The text of every user message, in order.
fn user_texts(dialect: Dialect, v: &serde_json::Value) -> Vec<String> {
    if let Some(s) = v.get("input").and_then(|i| i.as_str()) {
        return vec![s.to_owned()];
    }
    conversation(dialect, v)
        .iter()
        .filter(|m| m.get("role").and_then(|r| r.as_str()) == Some("user"))
        .filter_map(|m| content_text(m.get("content")?))
        .collect()
}

/// The text of the conversation's last tool result: chat's `tool` messages, Anthropic's
/// `tool_result` blocks, Responses' `function_call_output` items.
fn last_tool_result(dialect: Dialect, v: &serde_json::Value) -> Option<String> {
    let mut last = None;
    for m in conversation(dialect, v) {
        match dialect {
            Dialect::Chat if m.get("role").and_then(|r| r.as_str()) == Some("tool") => {
                last = m.get("content").and_then(content_text);
            }
            Dialect::Messages => {
                for b in m
                    .get("content")
                    .and_then(|c| c.as_array())
                    .into_iter()
                    .flatten()
                {
                    if b.get("type").and_then(|t| t.as_str()) == Some("tool_result") {
                        last = Some(b.get("content").and_then(content_text).unwrap_or_default());
                    }
                }
            }
            Dialect::Responses
                if m.get("type").and_then(|t| t.as_str()) == Some("function_call_output") =>
            {
                last = m.get("output").and_then(content_text);
            }
            _ => {}
        }
    }
    last
}

/// The names of the function tools a request offers.
fn offered_tools(dialect: Dialect, v: &serde_json::Value) -> impl Iterator<Item = &str> {
    let tools = v
        .get("tools")
        .and_then(|t| t.as_array())
        .map_or(&[][..], Vec::as_slice);
    tools.iter().filter_map(move |t| {
        let t = match dialect {
            Dialect::Chat => t.get("function")?,
            _ => t,
        };
        t.get("name")?.as_str()
    })
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    let first = needle[0];
    let mut i = 0;
    while let Some(p) = hay[i..].iter().position(|&b| b == first) {
        let at = i + p;
        if hay[at..].starts_with(needle) {
            return true;
        }
        i = at + 1;
    }
    false
}

/// Text of the last user message: chat `messages`, Anthropic `messages`, or Responses `input`
/// (a string, or a list of items). String contents and lists of text parts are both read.
pub fn last_user_text(dialect: Dialect, v: &serde_json::Value) -> Option<String> {
    let list = match dialect {
        Dialect::Chat | Dialect::Messages => v.get("messages")?,
        Dialect::Responses => {
            let input = v.get("input")?;
            if let Some(s) = input.as_str() {
                return Some(s.to_owned());
            }
            input
        }
    };
    let msg = list
        .as_array()?
        .iter()
        .rev()
        .find(|m| m.get("role").and_then(|r| r.as_str()) == Some("user"))?;
    content_text(msg.get("content")?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(d: Dialect, body: &str) -> Plan {
        plan(d, body.as_bytes()).unwrap()
    }

    #[test]
    fn plain_plan() {
        let body = r#"{"model":"mock-gpt","messages":[{"role":"user","content":"hi"}]}"#;
        let pl = p(Dialect::Chat, body);
        assert_eq!(pl.model_json, "\"mock-gpt\"");
        assert!(!pl.stream);
        assert_eq!(pl.frames, 8);
        assert_eq!(pl.input_tokens, body.len() as u64 / 4);
    }

    #[test]
    fn scripted_call_then_the_tool_result_quoted() {
        let marker = r#"go [[mock:call:Bash:{\"command\":\"ls\"}]]"#;
        // Anthropic: the call, while no tool result is there.
        let first = format!(
            r#"{{"model":"m","messages":[{{"role":"user","content":"{marker}"}}],"tools":[{{"name":"Bash"}}]}}"#
        );
        let pl = p(Dialect::Messages, &first);
        assert_eq!(pl.tool(), ("Bash", r#"{"command":"ls"}"#));
        assert_eq!(pl.arg_pieces().concat(), r#"{"command":"ls"}"#);
        // A tool that is not offered is refused.
        let unoffered = first.replace(r#"{"name":"Bash"}"#, r#"{"name":"Read"}"#);
        assert!(plan(Dialect::Messages, unoffered.as_bytes()).is_err());
        // Then the result, quoted, whichever dialect carries it.
        let anthropic = format!(
            r#"{{"model":"m","messages":[{{"role":"user","content":"{marker}"}},{{"role":"assistant","content":[{{"type":"tool_use","id":"t","name":"Bash","input":{{}}}}]}},{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"t","content":[{{"type":"text","text":"a.txt"}}]}}]}}]}}"#
        );
        let chat = format!(
            r#"{{"model":"m","messages":[{{"role":"user","content":"{marker}"}},{{"role":"tool","tool_call_id":"t","content":"a.txt"}}]}}"#
        );
        let responses = format!(
            r#"{{"model":"m","input":[{{"role":"user","content":"{marker}"}},{{"type":"function_call_output","call_id":"t","output":"a.txt"}}]}}"#
        );
        for (d, body) in [
            (Dialect::Messages, anthropic),
            (Dialect::Chat, chat),
            (Dialect::Responses, responses),
        ] {
            let pl = p(d, &body);
            assert!(!pl.calls_tool(), "{d:?}");
            assert_eq!(pl.text().trim_end(), "The tool said: a.txt", "{d:?}");
            assert_eq!(pl.output_tokens(), 1);
        }
    }

    #[test]
    fn directives_only_from_last_user_message() {
        let body = r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"[[mock:stall]]"},{"role":"assistant","content":"x"},{"role":"user","content":[{"type":"text","text":"a [[mock:frames:3]] [[mock:tool_call]]"}]}]}"#;
        let pl = p(Dialect::Messages, body);
        assert!(!pl.stall);
        assert!(pl.tool_call);
        assert_eq!(pl.frames, 3);
        let body = r#"{"model":"m","input":"[[mock:status:429]]"}"#;
        assert_eq!(p(Dialect::Responses, body).status, Some(429));
        let body = r#"{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"[[mock:fail_mid_stream]][[mock:malformed_sse]]"}]}]}"#;
        let pl = p(Dialect::Responses, body);
        assert!(pl.fail_mid_stream && pl.malformed_sse);
    }

    #[test]
    fn text() {
        assert_eq!(wire::expected_text(1), "Hello from the mock upstream.");
        assert_eq!(
            wire::expected_text(3),
            "Hello from the mock upstream. word2 word3"
        );
    }

    fn all_json(frames: &[Bytes]) {
        for f in frames {
            let s = std::str::from_utf8(f).unwrap();
            assert!(s.ends_with("\n\n"), "{s}");
            let data = s.lines().find_map(|l| l.strip_prefix("data: ")).unwrap();
            if data != "[DONE]" {
                serde_json::from_str::<serde_json::Value>(data)
                    .unwrap_or_else(|e| panic!("{e}: {data}"));
            }
        }
    }

    /// One request through the real server with the load driver; returns the outcome and the
    /// (status, body) the check saw.
    fn roundtrip(
        mock: &MockServer,
        path: &str,
        body: &str,
        timeout_ms: u64,
    ) -> (crate::load::Outcome, Option<(u16, Vec<u8>)>) {
        use std::sync::{Arc, Mutex};
        let seen = Arc::new(Mutex::new(None));
        let s2 = seen.clone();
        let check: crate::load::Check = Arc::new(move |status, body| {
            *s2.lock().unwrap() = Some((status, body.to_vec()));
            Ok(())
        });
        let mut opts = crate::load::Options::new(mock.addr(), 1, crate::load::Stop::Total(1));
        opts.timeout = Some(std::time::Duration::from_millis(timeout_ms));
        let req = crate::load::Request::post_json(path, body.to_owned());
        let out = crate::load::run_blocking(&opts, &req, check).unwrap();
        let seen = seen.lock().unwrap().take();
        (out, seen)
    }

    /// One request on a fresh connection with `connection: close`; everything the mock sent.
    fn raw(addr: SocketAddr, method: &str, path: &str, body: &str) -> String {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        let req = format!(
            "{method} {path} HTTP/1.1\r\nhost: m\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        s.write_all(req.as_bytes()).unwrap();
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    }

    #[test]
    fn instance_directives_count_and_faults() {
        let opts = MockOptions {
            directives: Some("[[mock:status:503]][[mock:retry_after:7]]".into()),
            directive_requests: Some(1),
        };
        let mock = MockServer::start_opts("127.0.0.1:0".parse().unwrap(), 1, opts).unwrap();
        let body = r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;
        let first = raw(mock.addr(), "POST", "/v1/chat/completions", body);
        assert!(first.starts_with("HTTP/1.1 503"), "{first}");
        assert!(first.contains("retry-after: 7\r\n"), "{first}");
        let second = raw(mock.addr(), "POST", "/v1/chat/completions", body);
        assert!(
            second.starts_with("HTTP/1.1 200"),
            "only the first request: {second}"
        );
        // Reset: the connection closes with no answer at all.
        let reset = r#"{"model":"m","messages":[{"role":"user","content":"[[mock:reset]]"}]}"#;
        assert_eq!(raw(mock.addr(), "POST", "/v1/messages", reset), "");
        // Delay: the answer comes no sooner.
        let slow =
            r#"{"model":"m","messages":[{"role":"user","content":"[[mock:delay_ms:150]]"}]}"#;
        let t = std::time::Instant::now();
        assert!(raw(mock.addr(), "POST", "/v1/messages", slow).starts_with("HTTP/1.1 200"));
        assert!(t.elapsed() >= std::time::Duration::from_millis(150));
        // Paced frames: 3 content frames of a stream, then the finish frame and [DONE], each 60 ms
        // after the one before.
        let paced = r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"[[mock:frames:3]][[mock:frame_interval_ms:60]]"}]}"#;
        let t = std::time::Instant::now();
        let sse = raw(mock.addr(), "POST", "/v1/chat/completions", paced);
        assert!(sse.contains("data: [DONE]"), "{sse}");
        assert!(t.elapsed() >= std::time::Duration::from_millis(4 * 60));
        let count = raw(mock.addr(), "GET", "/mock/requests", "");
        assert!(count.ends_with(r#"{"requests":5}"#), "{count}");
    }

    #[test]
    fn directives_over_the_wire() {
        let mock = MockServer::start("127.0.0.1:0".parse().unwrap(), 2).unwrap();
        let chat = |text: &str, stream: bool| {
            format!(
                r#"{{"model":"m","stream":{stream},"messages":[{{"role":"user","content":"{text}"}}]}}"#
            )
        };
        // Status: the provider's error body.
        let (_, seen) = roundtrip(
            &mock,
            "/v1/messages",
            &chat("[[mock:status:429]]", false),
            2000,
        );
        let (status, body) = seen.unwrap();
        assert_eq!(status, 429);
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["error"]["type"], "rate_limit_error");
        let (_, seen) = roundtrip(
            &mock,
            "/v1/chat/completions",
            &chat("[[mock:status:500]]", true),
            2000,
        );
        let (status, body) = seen.unwrap();
        assert_eq!(status, 500);
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["error"]["type"], "server_error");
        // Stall: no answer.
        let (out, seen) = roundtrip(
            &mock,
            "/v1/responses",
            r#"{"model":"m","input":"[[mock:stall]]"}"#,
            300,
        );
        assert!(seen.is_none());
        assert!(out.first_failure.unwrap().contains("no complete response"));
        // Fail mid-stream: the connection drops before the last chunk.
        let (out, seen) = roundtrip(
            &mock,
            "/v1/chat/completions",
            &chat("[[mock:fail_mid_stream]]", true),
            2000,
        );
        assert!(seen.is_none());
        let f = out.first_failure.unwrap();
        assert!(f.contains("closed the connection mid-body"), "{f}");
        // Non-streaming too: fewer bytes than promised.
        let (out, _) = roundtrip(
            &mock,
            "/v1/messages",
            &chat("[[mock:fail_mid_stream]]", false),
            2000,
        );
        assert!(out.first_failure.unwrap().contains("body bytes"));
        // Malformed SSE: a frame that is not JSON, then a normal end.
        let (_, seen) = roundtrip(
            &mock,
            "/v1/messages",
            &chat("[[mock:malformed_sse]] [[mock:frames:20]]", true),
            2000,
        );
        let body = String::from_utf8(seen.unwrap().1).unwrap();
        assert!(body.contains("not json"));
        assert!(!body.contains("message_stop"));
        // Many frames, tool calls.
        let (_, seen) = roundtrip(
            &mock,
            "/v1/responses",
            r#"{"model":"m","stream":true,"input":"[[mock:frames:50]]"}"#,
            2000,
        );
        let body = String::from_utf8(seen.unwrap().1).unwrap();
        assert_eq!(
            body.matches("event: response.output_text.delta").count(),
            50
        );
        assert!(body.contains(" word50"));
        let (_, seen) = roundtrip(
            &mock,
            "/v1/chat/completions",
            &chat("[[mock:tool_call]]", false),
            2000,
        );
        let v: serde_json::Value = serde_json::from_slice(&seen.unwrap().1).unwrap();
        assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(
            v["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"],
            r#"{"city":"Paris"}"#
        );
    }

    #[test]
    fn every_rendering_is_valid_json() {
        for d in [Dialect::Chat, Dialect::Responses, Dialect::Messages] {
            for stream in [false, true] {
                for tool in [false, true] {
                    let mut pl = Plan::plain("\"m\"".into(), stream, 100);
                    pl.tool_call = tool;
                    pl.include_usage = true;
                    match wire::render(d, &pl) {
                        Rendered::Json(b) => {
                            serde_json::from_slice::<serde_json::Value>(&b).unwrap();
                        }
                        Rendered::Sse { frames, abort } => {
                            assert!(!abort);
                            all_json(&frames);
                        }
                    }
                }
            }
            for code in [400u16, 401, 429, 500, 529] {
                serde_json::from_slice::<serde_json::Value>(&wire::error_body(d, code, "x"))
                    .unwrap();
            }
        }
    }
}
