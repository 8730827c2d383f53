//! The floor of the design: the least a proxy built on hyper and tokio, driven the way the
//! gateway drives them, can cost per request. A measurement aid for docs/hot-path.md, not a
//! product: it takes a gateway config (`--config FILE`), listens on its `listen` address and
//! forwards every request, unchanged, to the first provider's `base_url` over pooled keep-alive
//! upstream connections, and answers with the upstream's answer, unchanged: a complete one read
//! whole, a chunked one (a stream) relayed chunk by chunk as it arrives.
//!
//! What it keeps of the gateway: one current-thread runtime and `LocalSet`, hyper's HTTP/1 server
//! with `half_close(true)` and no header timer, the gateway's own socket adapter (`ClientIo`) on
//! both sides, a per-worker stack of hyper client connections each driven by a task of its own,
//! both bodies read whole by the gateway's `read_all` and sent as one frame of its `UpBody` (but a
//! chunked answer's body handed to the server as hyper's `Incoming`, its chunks relayed from the
//! upstream connection's task to the client connection's as the gateway relays a stream's events,
//! over an upstream connection of its own, closed when the stream ends),
//! `TCP_NODELAY` on both sides, exit status 0 on SIGTERM. What it leaves out is everything the
//! gateway is for: no JSON is scanned or validated, no model renamed, no route, key, limit,
//! metric, access log, deadline or error in a dialect.
//! So the gap between it and the gateway is the gateway's own work, and the gap between it and
//! nginx is what hyper and tokio cost as the design keeps them (`bench/hyper-floor`).
//!
//! `HYPER_FLOOR_RELAY=one-task` relays a stream in one task instead of two: a request whose body
//! asks for a stream (`"stream":true`) goes on a fresh upstream connection that no task of its
//! own drives; the request's future drives it until the answer's head, and then the answer's body,
//! polled by the client connection's task, drives it (`OneTask`), so a chunk is read and written
//! in one poll of one task, as nginx reads and writes in one pass of its event loop. It measures
//! what the second task costs (docs/bench-results/streams.md, "One task instead of two").

use std::cell::RefCell;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use bytes::Bytes;
use gateway::http::body::read_all;
use gateway::http::pieces::UpBody;
use gateway::serve::conn::ClientIo;
use http::{Request, Response, StatusCode};
use http_body_util::Either;
use hyper::body::{Body, Frame, Incoming};
use hyper::client::conn::http1::{Connection, SendRequest};
use tokio::net::{TcpListener, TcpStream};

type Error = Box<dyn std::error::Error>;

/// An answer to the client: read whole, or the upstream's stream relayed as it comes.
/// (The two-task relay hands the server hyper's `Incoming` itself, as it always did.)
type Answer = Either<UpBody, Either<Incoming, OneTask>>;

/// A streamed answer and, in the one-task relay, the upstream connection it comes on, driven by
/// whoever polls the body (the client connection's task) instead of a task of its own.
struct OneTask {
    body: Incoming,
    conn: Option<Pin<Box<Connection<ClientIo, UpBody>>>>,
    /// The waker the connection is polled with: it notes that the connection has something to
    /// do before it wakes the client connection's task.
    nudge: Arc<Nudge>,
    waker: Waker,
}

/// Whether the upstream connection was woken since it last returned pending, and the task to
/// wake. Without it, every poll of the body after a chunk would poll the connection again for
/// nothing (hyper's server polls the body once more after each chunk it writes).
struct Nudge {
    woken: AtomicBool,
    task: Mutex<Option<Waker>>,
}

impl Wake for Nudge {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref()
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        if let Some(w) = self.task.lock().unwrap().as_ref() {
            w.wake_by_ref();
        }
    }
}

impl OneTask {
    fn new(body: Incoming, conn: Option<Pin<Box<Connection<ClientIo, UpBody>>>>) -> Self {
        let nudge = Arc::new(Nudge {
            woken: AtomicBool::new(true),
            task: Mutex::new(None),
        });
        let waker = Waker::from(nudge.clone());
        OneTask {
            body,
            conn,
            nudge,
            waker,
        }
    }
}

impl Body for OneTask {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        let Some(conn) = this.conn.as_mut() else {
            // The connection ended (its errors reach the body).
            return Pin::new(&mut this.body).poll_frame(cx);
        };
        // The body's chunks come only from the connection polled here, so the body channel needs
        // no waker of its own.
        let mut quiet = Context::from_waker(Waker::noop());
        if let Poll::Ready(f) = Pin::new(&mut this.body).poll_frame(&mut quiet) {
            return Poll::Ready(f);
        }
        {
            let mut task = this.nudge.task.lock().unwrap();
            if !task.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                *task = Some(cx.waker().clone());
            }
        }
        if !this.nudge.woken.swap(false, Ordering::Acquire) {
            return Poll::Pending;
        }
        match conn.as_mut().poll(&mut Context::from_waker(&this.waker)) {
            Poll::Ready(_) => {
                this.conn = None;
                Pin::new(&mut this.body).poll_frame(cx)
            }
            Poll::Pending => Pin::new(&mut this.body).poll_frame(&mut quiet),
        }
    }
}

/// The worker's idle upstream connections, the most recently used last.
struct Pool {
    upstream: String,
    idle: RefCell<Vec<SendRequest<UpBody>>>,
    /// `HYPER_FLOOR_RELAY=one-task`: streams relayed in one task.
    one_task: bool,
}

/// A body read whole, as the gateway reads its bodies (`read_all`: the one frame as it is).
async fn read_whole(body: Incoming) -> Result<Bytes, Error> {
    let deadline = || tokio::time::Instant::now() + Duration::from_secs(60);
    read_all(body, 64 << 20, deadline)
        .await
        .map_err(|e| format!("reading a body: {e:?}").into())
}

/// A socket as hyper's I/O, through the gateway's own adapter.
fn io(stream: TcpStream) -> ClientIo {
    ClientIo(Rc::new(RefCell::new(stream)))
}

impl Pool {
    async fn connection(&self) -> Result<SendRequest<UpBody>, Error> {
        loop {
            let Some(mut tx) = self.idle.borrow_mut().pop() else {
                break;
            };
            if tx.ready().await.is_ok() {
                return Ok(tx);
            }
        }
        let stream = TcpStream::connect(&self.upstream).await?;
        stream.set_nodelay(true)?;
        let (tx, conn) = hyper::client::conn::http1::handshake(io(stream)).await?;
        tokio::task::spawn_local(async move {
            let _ = conn.await;
        });
        Ok(tx)
    }

    async fn forward(&self, req: Request<Incoming>) -> Result<Response<Answer>, Error> {
        let (parts, body) = req.into_parts();
        let body = read_whole(body).await?;
        if self.one_task && memchr::memmem::find(&body, b"\"stream\":true").is_some() {
            return self
                .stream_in_one_task(Request::from_parts(parts, UpBody::one(body)))
                .await;
        }
        let mut tx = self.connection().await?;
        let answer = tx
            .send_request(Request::from_parts(parts, UpBody::one(body)))
            .await?;
        let (parts, body) = answer.into_parts();
        if !parts.headers.contains_key(http::header::CONTENT_LENGTH) {
            // A stream: relayed as it comes; its connection closes when it ends (`tx` dropped).
            return Ok(Response::from_parts(
                parts,
                Either::Right(Either::Left(body)),
            ));
        }
        let body = read_whole(body).await?;
        self.idle.borrow_mut().push(tx);
        Ok(Response::from_parts(parts, Either::Left(UpBody::one(body))))
    }

    /// A stream on a fresh connection that no task of its own drives: this future drives it
    /// until the answer's head, the answer's body after that.
    async fn stream_in_one_task(&self, req: Request<UpBody>) -> Result<Response<Answer>, Error> {
        let stream = TcpStream::connect(&self.upstream).await?;
        stream.set_nodelay(true)?;
        let (mut tx, conn) = hyper::client::conn::http1::handshake(io(stream)).await?;
        let mut conn = Some(Box::pin(conn));
        let mut answer = std::pin::pin!(tx.send_request(req));
        let answer = std::future::poll_fn(|cx| {
            if conn
                .as_mut()
                .is_some_and(|c| c.as_mut().poll(cx).is_ready())
            {
                conn = None;
            }
            answer.as_mut().poll(cx)
        })
        .await?;
        let (parts, body) = answer.into_parts();
        Ok(Response::from_parts(
            parts,
            Either::Right(Either::Right(OneTask::new(body, conn))),
        ))
    }
}

async fn serve(pool: Rc<Pool>, req: Request<Incoming>) -> Response<Answer> {
    if req.uri().path() == "/livez" {
        return Response::new(Either::Left(UpBody::one(Bytes::from_static(b"ok\n"))));
    }
    match pool.forward(req).await {
        Ok(r) => r,
        Err(e) => {
            let mut r = Response::new(Either::Left(UpBody::one(Bytes::from(format!("{e}\n")))));
            *r.status_mut() = StatusCode::BAD_GATEWAY;
            r
        }
    }
}

fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().collect();
    let path = match &args[..] {
        [_, flag, path] if flag == "--config" => path,
        _ => return Err("usage: hyper_floor --config GATEWAY_CONFIG.json".into()),
    };
    let cfg: serde_json::Value = serde_json::from_slice(&std::fs::read(path)?)?;
    let listen = cfg["listen"].as_str().ok_or("no listen")?.to_string();
    let upstream = cfg["providers"]
        .as_object()
        .and_then(|p| p.values().next())
        .and_then(|p| p["base_url"].as_str())
        .ok_or("no provider base_url")?;
    let upstream = upstream
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async move {
        let listener = TcpListener::bind(&listen).await?;
        eprintln!("listening on {}", listener.local_addr()?);
        let pool = Rc::new(Pool {
            upstream,
            idle: RefCell::new(Vec::new()),
            one_task: std::env::var("HYPER_FLOOR_RELAY").is_ok_and(|v| v == "one-task"),
        });
        let mut http = hyper::server::conn::http1::Builder::new();
        http.keep_alive(true)
            .half_close(true)
            .header_read_timeout(None);
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        loop {
            tokio::select! {
                r = listener.accept() => {
                    let (stream, _) = r?;
                    stream.set_nodelay(true)?;
                    let pool = pool.clone();
                    let svc = hyper::service::service_fn(move |req| {
                        let pool = pool.clone();
                        async move { Ok::<_, Infallible>(serve(pool, req).await) }
                    });
                    let conn = http.serve_connection(io(stream), svc);
                    tokio::task::spawn_local(async move {
                        let _ = conn.await;
                    });
                }
                _ = term.recv() => break,
            }
        }
        Ok::<_, Error>(())
    })
}
