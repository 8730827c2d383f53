//! Workers, accept loops and routing.
//!
//! Each worker is an OS thread with its own current-thread runtime, its own `SO_REUSEPORT`
//! listener (the kernel spreads connections across them) and its own upstream connection pool, so
//! the request path never touches a lock or a cache line another worker writes. Connection tasks are
//! `spawn_local`ed, which lets per-worker state be `Rc`/`RefCell` instead of atomics.

use std::cell::{Cell, RefCell};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use bytes::Bytes;
use http::{Method, Request, StatusCode};
use hyper::body::Incoming;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use socket2::{Domain, Protocol, Socket, Type};
use tokio::sync::watch;

use crate::body::{json_response, GwBody, GwResponse, UpBody};
use crate::config::{Config, Snapshot};
use crate::error::{Dialect, GwError};
use crate::proxy;
use crate::shutdown;

/// One pool per worker for every upstream, http and https alike (plain connections pass through
/// the TLS connector untouched).
pub type UpstreamClient = Client<HttpsConnector<HttpConnector>, UpBody>;

/// Per-worker state; never shared with another thread.
pub struct Worker {
    pub client: UpstreamClient,
    snapshot: RefCell<Arc<Snapshot>>,
    /// Reloads arrive here. Checking it is one atomic load of a line that is written only on
    /// reload, so a reload is visible to the very next request without any lock on the path.
    cfg: RefCell<watch::Receiver<Arc<Snapshot>>>,
    draining: Cell<bool>,
}

impl Worker {
    /// The configuration a request runs against, taken once at its start so that a reload in the
    /// middle of a request cannot mix two configurations.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        let mut rx = self.cfg.borrow_mut();
        if rx.has_changed().unwrap_or(false) {
            *self.snapshot.borrow_mut() = rx.borrow_and_update().clone();
        }
        self.snapshot.borrow().clone()
    }
}

fn bind(addr: SocketAddr) -> anyhow::Result<std::net::TcpListener> {
    let sock = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    sock.set_reuse_address(true)?;
    sock.set_reuse_port(true)?;
    sock.set_nodelay(true)?;
    sock.set_nonblocking(true)?;
    sock.bind(&addr.into())
        .with_context(|| format!("cannot bind {addr}"))?;
    sock.listen(1024)?;
    Ok(sock.into())
}

pub fn run(config: Config, config_path: String) -> anyhow::Result<()> {
    let listen = config.listen.clone();
    let signals = shutdown::Signals::install()?;
    // Bind every listener before announcing: a port-0 address is resolved by the first bind and
    // the others join it, so all workers share one port.
    let first = bind(listen.addr)?;
    let addr = first.local_addr()?;
    let mut listeners = vec![first];
    for _ in 1..listen.workers {
        listeners.push(bind(addr)?);
    }

    crate::access_log::init(&listen.access_log)?;
    if let Some(m) = &listen.metrics {
        let a = crate::metrics::serve(m.listen)?;
        eprintln!("metrics listening on {a}");
    }
    crate::alloc::spawn_housekeeping();

    let (stop_tx, stop_rx) = watch::channel(false);
    let (cfg_tx, cfg_rx) = watch::channel(Arc::new(config.snapshot));
    let mut handles = Vec::with_capacity(listeners.len());
    for (i, l) in listeners.into_iter().enumerate() {
        let stop = stop_rx.clone();
        let cfg = cfg_rx.clone();
        let listen = listen.clone();
        handles.push(
            std::thread::Builder::new()
                .name(format!("gw-worker-{i}"))
                .spawn(move || worker(l, stop, cfg, &listen))?,
        );
    }
    eprintln!("listening on {addr}");

    signals.wait(&cfg_tx, &config_path);
    let _ = stop_tx.send(true);
    let mut failed = None;
    for h in handles {
        match h.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => failed = Some(e),
            Err(_) => failed = Some(anyhow::anyhow!("a worker panicked")),
        }
    }
    crate::access_log::flush();
    match failed {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

fn worker(
    listener: std::net::TcpListener,
    mut stop: watch::Receiver<bool>,
    mut cfg: watch::Receiver<Arc<Snapshot>>,
    listen: &crate::config::Listen,
) -> anyhow::Result<()> {
    let drain = listen.drain_timeout;
    let max_connections = listen.max_connections_per_worker;
    let upstream_tls = listen.upstream_tls.clone();
    // Open connections of this worker; only its own tasks touch it.
    let open = Rc::new(Cell::new(0usize));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async move {
        let listener = tokio::net::TcpListener::from_std(listener)?;
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_keepalive(Some(Duration::from_secs(60)));
        // The TLS connector needs the URI's scheme to reach it.
        connector.enforce_http(false);
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config((*upstream_tls).clone())
            .https_or_http()
            .enable_http1()
            .wrap_connector(connector);
        let client = Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(Duration::from_secs(90))
            .pool_max_idle_per_host(1024)
            .build(connector);
        let first = cfg.borrow_and_update().clone();
        let w = Rc::new(Worker {
            client,
            snapshot: RefCell::new(first),
            cfg: RefCell::new(cfg),
            draining: Cell::new(false),
        });

        let graceful = hyper_util::server::graceful::GracefulShutdown::new();
        let mut http = hyper::server::conn::http1::Builder::new();
        http.keep_alive(true)
            .timer(TokioTimer::new())
            .header_read_timeout(listen.header_timeout);
        loop {
            tokio::select! {
                r = listener.accept() => match r {
                    Ok((stream, _)) => {
                        if open.get() >= max_connections {
                            // Closing at once is the cheapest answer a flood can get.
                            drop(stream);
                            continue;
                        }
                        open.set(open.get() + 1);
                        let _ = stream.set_nodelay(true);
                        let w = w.clone();
                        let svc = hyper::service::service_fn(move |req| {
                            let w = w.clone();
                            async move { Ok::<_, Infallible>(route(w, req).await) }
                        });
                        let conn = http.serve_connection(TokioIo::new(stream), svc);
                        let fut = graceful.watch(conn);
                        let open = open.clone();
                        tokio::task::spawn_local(async move {
                            let _ = fut.await;
                            open.set(open.get() - 1);
                        });
                    }
                    Err(e) => {
                        // Out of descriptors and the like: back off instead of spinning.
                        eprintln!("accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                },
                _ = stop.changed() => break,
            }
        }
        w.draining.set(true);
        drop(listener);
        if tokio::time::timeout(drain, graceful.shutdown())
            .await
            .is_err()
        {
            eprintln!("drain timeout: closing remaining connections");
        }
        anyhow::Ok(())
    })
}

async fn route(w: Rc<Worker>, req: Request<Incoming>) -> GwResponse {
    let path = req.uri().path();
    match (req.method(), path) {
        (&Method::POST, "/v1/chat/completions") => proxy::handle(&w, Dialect::Chat, req).await,
        (&Method::POST, "/v1/messages") => proxy::handle(&w, Dialect::Messages, req).await,
        (&Method::POST, "/v1/responses") => proxy::handle(&w, Dialect::Responses, req).await,
        (&Method::GET, "/v1/models") => {
            json_response(StatusCode::OK, w.snapshot().models_body.clone())
        }
        (&Method::GET, "/livez") => text(StatusCode::OK, "ok\n"),
        (&Method::GET, "/readyz") => {
            if w.draining.get() {
                text(StatusCode::SERVICE_UNAVAILABLE, "draining\n")
            } else {
                text(StatusCode::OK, "ready\n")
            }
        }
        (_, p) => {
            let dialect = if p.starts_with("/v1/messages") {
                Dialect::Messages
            } else {
                Dialect::Chat
            };
            let known = matches!(
                p,
                "/v1/chat/completions"
                    | "/v1/messages"
                    | "/v1/responses"
                    | "/v1/models"
                    | "/livez"
                    | "/readyz"
            );
            if known {
                GwError::new(StatusCode::METHOD_NOT_ALLOWED, "method not allowed").response(dialect)
            } else {
                GwError::new(StatusCode::NOT_FOUND, format!("no route for {p}")).response(dialect)
            }
        }
    }
}

fn text(status: StatusCode, s: &'static str) -> GwResponse {
    let mut r = http::Response::new(GwBody::full(Bytes::from_static(s.as_bytes())));
    *r.status_mut() = status;
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain"),
    );
    r
}
