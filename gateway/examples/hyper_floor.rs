//! The floor of the design: the least a proxy built on hyper and tokio, driven the way the
//! gateway drives them, can cost per request. A measurement aid for docs/hot-path.md, not a
//! product: it takes a gateway config (`--config FILE`), listens on its `listen` address and
//! forwards every request, unchanged, to the first provider's `base_url` over pooled keep-alive
//! upstream connections, and answers with the upstream's answer, unchanged.
//!
//! What it keeps of the gateway: one current-thread runtime and `LocalSet`, hyper's HTTP/1 server
//! with `half_close(true)` and no header timer, a per-worker stack of hyper client connections
//! each driven by a task of its own, the request body read whole and sent as one `Bytes`, the
//! answer read whole and sent back as one `Bytes`, `TCP_NODELAY` on both sides, exit status 0 on
//! SIGTERM. What it leaves out is everything the gateway is for: no JSON is scanned or validated,
//! no model renamed, no route, key, limit, metric, access log, deadline or error in a dialect.
//! So the gap between it and the gateway is the gateway's own work, and the gap between it and
//! nginx is what hyper and tokio cost as the design keeps them (`bench/hyper-floor`).

use std::cell::RefCell;
use std::convert::Infallible;
use std::rc::Rc;

use bytes::{Bytes, BytesMut};
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::{Body, Incoming};
use hyper::client::conn::http1::SendRequest;
use tokio::net::{TcpListener, TcpStream};

type Error = Box<dyn std::error::Error>;

/// The worker's idle upstream connections, the most recently used last.
struct Pool {
    upstream: String,
    idle: RefCell<Vec<SendRequest<Full<Bytes>>>>,
}

/// A body read whole: its one data frame as it is, several joined.
async fn read_whole(mut body: Incoming) -> Result<Bytes, hyper::Error> {
    let mut first: Option<Bytes> = None;
    let mut joined: Option<BytesMut> = None;
    while let Some(frame) =
        std::future::poll_fn(|cx| std::pin::Pin::new(&mut body).poll_frame(cx)).await
    {
        let Ok(data) = frame?.into_data() else {
            continue;
        };
        match (&mut joined, first.take()) {
            (Some(j), _) => j.extend_from_slice(&data),
            (None, None) => first = Some(data),
            (None, Some(f)) => {
                let mut j = BytesMut::from(&f[..]);
                j.extend_from_slice(&data);
                joined = Some(j);
            }
        }
        if body.is_end_stream() {
            break;
        }
    }
    Ok(joined.map_or_else(|| first.unwrap_or_default(), BytesMut::freeze))
}

impl Pool {
    async fn connection(&self) -> Result<SendRequest<Full<Bytes>>, Error> {
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
        let (tx, conn) = hyper::client::conn::http1::handshake(Io(stream)).await?;
        tokio::task::spawn_local(async move {
            let _ = conn.await;
        });
        Ok(tx)
    }

    async fn forward(&self, req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Error> {
        let (parts, body) = req.into_parts();
        let body = read_whole(body).await?;
        let mut tx = self.connection().await?;
        let answer = tx
            .send_request(Request::from_parts(parts, Full::new(body)))
            .await?;
        let (parts, body) = answer.into_parts();
        let body = read_whole(body).await?;
        self.idle.borrow_mut().push(tx);
        Ok(Response::from_parts(parts, Full::new(body)))
    }
}

async fn serve(pool: Rc<Pool>, req: Request<Incoming>) -> Response<Full<Bytes>> {
    if req.uri().path() == "/livez" {
        return Response::new(Full::new(Bytes::from_static(b"ok\n")));
    }
    match pool.forward(req).await {
        Ok(r) => r,
        Err(e) => {
            let mut r = Response::new(Full::new(Bytes::from(format!("{e}\n"))));
            *r.status_mut() = StatusCode::BAD_GATEWAY;
            r
        }
    }
}

/// A tokio socket as hyper's I/O, as the gateway's own adapter does it (no hyper-util).
struct Io(TcpStream);

impl hyper::rt::Read for Io {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        mut buf: hyper::rt::ReadBufCursor<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        use tokio::io::AsyncRead;
        // SAFETY: tokio's ReadBuf writes only initialised bytes and says how many.
        let n = unsafe {
            let mut tbuf = tokio::io::ReadBuf::uninit(buf.as_mut());
            match std::pin::Pin::new(&mut self.0).poll_read(cx, &mut tbuf) {
                std::task::Poll::Ready(Ok(())) => tbuf.filled().len(),
                other => return other,
            }
        };
        unsafe { buf.advance(n) };
        std::task::Poll::Ready(Ok(()))
    }
}

impl hyper::rt::Write for Io {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        tokio::io::AsyncWrite::poll_write(std::pin::Pin::new(&mut self.0), cx, buf)
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        tokio::io::AsyncWrite::poll_write_vectored(std::pin::Pin::new(&mut self.0), cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        tokio::io::AsyncWrite::poll_flush(std::pin::Pin::new(&mut self.0), cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        tokio::io::AsyncWrite::poll_shutdown(std::pin::Pin::new(&mut self.0), cx)
    }
}

fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().collect();
    let [_, flag, path] = &args[..] else {
        return Err("usage: hyper_floor --config GATEWAY_CONFIG.json".into());
    };
    if flag != "--config" {
        return Err("usage: hyper_floor --config GATEWAY_CONFIG.json".into());
    }
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
                    let conn = http.serve_connection(Io(stream), svc);
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
