//! One worker: an OS thread with its own current-thread runtime, its own listener and its own
//! upstream connection pool; it accepts connections, caps their number, and routes each request.
//!
//! The worker keeps its own deadline for a connection that waits for a request's head (a slow
//! client, or a keep-alive connection gone idle): each connection notes when it last went idle,
//! in ticks of a sweep that closes those idle longer than `timeouts.header_ms`. That costs a
//! request two stores instead of a timer armed and disarmed (and a boxed sleep) per request,
//! which is what hyper's own header timeout does. Draining on shutdown goes through the same
//! per-connection state.

use std::cell::{Cell, RefCell};
use std::convert::Infallible;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use hyper::body::Incoming;
use tokio::sync::watch;

use crate::config::{Snapshot, Startup};
use crate::dialect::error::GwError;
use crate::dialect::Dialect;
use crate::http::body::{error_response, json_response, GwBody, GwResponse};
use crate::http::client::{self, UpstreamClient};
use crate::serve::conn::{ClientIo, ClientSocket, ConnState, ConnTask, ServedBody, Signal};
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

/// The sweep's period for a head deadline of `timeout`, and how many periods make the deadline:
/// a connection is closed between `timeout` and `timeout` plus two periods after it went idle.
fn sweep_period(timeout: Duration) -> (Duration, u32) {
    let period = (timeout / 4).clamp(Duration::from_millis(10), Duration::from_secs(1));
    let n = timeout.as_nanos().div_ceil(period.as_nanos()) as u32;
    (period, n)
}

pub fn run(
    listener: std::net::TcpListener,
    mut stop: watch::Receiver<bool>,
    mut cfg: watch::Receiver<Arc<Snapshot>>,
    startup: &Startup,
) -> anyhow::Result<()> {
    let drain = startup.drain_timeout;
    let max_connections = startup.max_connections_per_worker;
    let upstream_tls = startup.upstream_tls.clone();
    let (period, ticks) = sweep_period(startup.header_timeout);
    // Open connections of this worker; only its own tasks touch it.
    let open = Rc::new(Cell::new(0usize));
    let conns: Rc<RefCell<Vec<Rc<ConnState>>>> = Rc::new(RefCell::new(Vec::new()));
    let tick = Rc::new(Cell::new(0u32));
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

        // It keeps running while draining, so a slow head cannot hold up the drain either.
        {
            let (conns, tick) = (conns.clone(), tick.clone());
            tokio::task::spawn_local(async move {
                let mut every = tokio::time::interval(period);
                every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    every.tick().await;
                    let now = tick.get().wrapping_add(1);
                    tick.set(now);
                    conns.borrow_mut().retain(|c| {
                        if !c.busy.get() && now.wrapping_sub(c.idle_since.get()) > ticks {
                            c.send(Signal::Close);
                        }
                        !c.done.get()
                    });
                }
            });
        }

        let mut http = hyper::server::conn::http1::Builder::new();
        // Half-closed connections allowed: hyper then does not read while a request is in flight;
        // the connection task watches for a hang-up instead (`conn`, which says why).
        http.keep_alive(true)
            .half_close(true)
            .header_read_timeout(None)
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
                        let st = Rc::new(ConnState::new(tick.clone()));
                        let socket: ClientSocket = Rc::new(RefCell::new(stream));
                        conns.borrow_mut().push(st.clone());
                        let (w, svc_st) = (w.clone(), st.clone());
                        let svc = hyper::service::service_fn(move |req| {
                            let (w, conn) = (w.clone(), svc_st.clone());
                            conn.begin_request();
                            async move {
                                let resp = route(w, req).await;
                                Ok::<_, Infallible>(resp.map(|body| ServedBody { body, conn }))
                            }
                        });
                        let conn = http.serve_connection(ClientIo(socket.clone()), svc);
                        tokio::task::spawn_local(ConnTask::new(conn, st, socket, open.clone()));
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
        for c in conns.borrow().iter() {
            c.send(Signal::Drain);
        }
        let drained = async {
            while open.get() > 0 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        if tokio::time::timeout(drain, drained).await.is_err() {
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
