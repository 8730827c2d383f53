//! One worker: an OS thread with its own current-thread runtime, its own listener and its own
//! upstream connection pool; it accepts connections, caps their number, and routes each request.

use std::cell::{Cell, RefCell};
use std::convert::Infallible;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::sync::watch;

use crate::config::{Listen, Snapshot};
use crate::dialect::error::GwError;
use crate::dialect::Dialect;
use crate::http::body::{error_response, json_response, GwBody, GwResponse};
use crate::http::client::{self, UpstreamClient};
use crate::serve::{paths, proxy};

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

pub fn run(
    listener: std::net::TcpListener,
    mut stop: watch::Receiver<bool>,
    mut cfg: watch::Receiver<Arc<Snapshot>>,
    listen: &Listen,
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
        let client = client::new(&upstream_tls);
        let first = cfg.borrow_and_update().clone();
        // Heads up to twice `limits_header_bytes` are read, so that the 431 for one past the
        // limit is in the client's dialect (`proxy::check_head_size`); beyond, hyper's own 431.
        let head_buffer = (2 * first.max_header_bytes).max(8192);
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
            .header_read_timeout(listen.header_timeout)
            .max_buf_size(head_buffer);
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
    if let Some(dialect) = paths::client_dialect(path) {
        if req.method() == Method::POST {
            return proxy::handle(&w.client, w.snapshot(), dialect, req).await;
        }
    }
    match (req.method(), path) {
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
            if paths::client_dialect(p).is_some() || paths::OTHER_ROUTES.contains(&p) {
                let e = GwError::new(StatusCode::METHOD_NOT_ALLOWED, "method not allowed");
                error_response(&e, dialect)
            } else {
                let e = GwError::new(StatusCode::NOT_FOUND, format!("no route for {p}"));
                error_response(&e, dialect)
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
