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

use std::cell::RefCell;
use std::convert::Infallible;
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use gateway::http::body::read_all;
use gateway::http::pieces::UpBody;
use gateway::serve::conn::ClientIo;
use http::{Request, Response, StatusCode};
use http_body_util::Either;
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use tokio::net::{TcpListener, TcpStream};

type Error = Box<dyn std::error::Error>;

/// An answer to the client: read whole, or the upstream's stream relayed as it comes.
type Answer = Either<UpBody, Incoming>;

/// The worker's idle upstream connections, the most recently used last.
struct Pool {
    upstream: String,
    idle: RefCell<Vec<SendRequest<UpBody>>>,
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
        let mut tx = self.connection().await?;
        let answer = tx
            .send_request(Request::from_parts(parts, UpBody::one(body)))
            .await?;
        let (parts, body) = answer.into_parts();
        if !parts.headers.contains_key(http::header::CONTENT_LENGTH) {
            // A stream: relayed as it comes; its connection closes when it ends (`tx` dropped).
            return Ok(Response::from_parts(parts, Either::Right(body)));
        }
        let body = read_whole(body).await?;
        self.idle.borrow_mut().push(tx);
        Ok(Response::from_parts(parts, Either::Left(UpBody::one(body))))
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
