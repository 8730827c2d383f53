//! The upstream connection pool. Each worker keeps its own keep-alive HTTP/1.1 connections (no
//! pool, lock or task is shared between threads) and drives them with hyper's connection-level
//! client; one pool serves every upstream, http and https alike (plain connections pass through
//! the TLS connector untouched).
//!
//! A request's checkout is a pop from the idle stack of its [`Origin`], found by an index fixed at
//! config load: no hashing, no lock and no spawned task per request. A connection goes back on the
//! stack when its answer has been read to the end ([`Conn::release`]); one whose answer was cut
//! short is dropped, which closes it. Each connection runs as a task of the worker (spawned when
//! it is opened), and idle ones are closed after [`IDLE_TIMEOUT`] by a sweep every
//! [`SWEEP_EVERY`], which stamps the stacks instead of reading the clock per request (and closes
//! those beyond [`KEEP_IDLE_PER_ORIGIN`]).

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Mutex;
use std::time::Duration;

use http::{HeaderValue, Request, Response, Uri};
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use tower_service::Service;

use crate::http::pieces::UpBody;

/// How long a connection may sit idle in the pool before it is closed.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(90);
/// How often idle connections are checked against [`IDLE_TIMEOUT`].
const SWEEP_EVERY: Duration = Duration::from_secs(5);
/// Idle connections kept per origin; one released past it is closed.
const MAX_IDLE_PER_ORIGIN: usize = 1024;
/// Idle connections per origin that a sweep keeps (for up to [`IDLE_TIMEOUT`]); the least
/// recently used beyond them are closed at the next sweep, so that a burst's surplus does not
/// hold memory for [`IDLE_TIMEOUT`] after it (nginx's peer leg keeps 256, `keepalive 256`).
const KEEP_IDLE_PER_ORIGIN: usize = 256;

pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// Where an upstream's connections go: its scheme and authority, with everything a request to it
/// needs computed once at config load.
#[derive(Debug)]
pub struct Origin {
    /// This origin's stack in every worker's pool: the same for the same scheme and authority
    /// across reloads, so that a reload keeps the pooled connections.
    slot: usize,
    /// `scheme://authority`, what the connector dials.
    dial: Uri,
    /// The `host` header of every request to it.
    pub host: HeaderValue,
}

impl Origin {
    /// The origin of `base` (an absolute http or https URL; its path is not part of the origin).
    pub fn of(base: &Uri) -> Result<Origin, String> {
        let scheme = base.scheme_str().ok_or("no scheme")?;
        let authority = base.authority().ok_or("no host")?;
        let dial: Uri = format!("{scheme}://{authority}")
            .parse()
            .map_err(|e| format!("{e}"))?;
        if authority.as_str().contains('@') {
            return Err("credentials in the URL are not accepted (use api_key_env)".into());
        }
        // As browsers and hyper_util's client send it: the port only when it is not the
        // scheme's default.
        let host = match (scheme, authority.port_u16()) {
            (_, None) | ("http", Some(80)) | ("https", Some(443)) => authority.host().to_string(),
            (_, Some(port)) => format!("{}:{port}", authority.host()),
        };
        let host = HeaderValue::from_str(&host).map_err(|e| format!("{e}"))?;
        static SLOTS: Mutex<Vec<String>> = Mutex::new(Vec::new());
        let key = dial.to_string();
        let mut slots = SLOTS.lock().unwrap();
        let slot = match slots.iter().position(|k| *k == key) {
            Some(i) => i,
            None => {
                slots.push(key);
                slots.len() - 1
            }
        };
        Ok(Origin { slot, dial, host })
    }
}

/// A worker's pool. Cloning it is cloning a handle to the same pool.
#[derive(Clone)]
pub struct UpstreamClient(Rc<Pool>);

/// An idle connection and the sweep it was released in.
type Idle = (SendRequest<UpBody>, u32);

struct Pool {
    connector: HttpsConnector<HttpConnector>,
    /// Idle connections by origin slot, the most recently used last.
    idle: RefCell<Vec<Vec<Idle>>>,
    /// Sweeps so far: the pool's clock, in steps of [`SWEEP_EVERY`].
    sweeps: Cell<u32>,
}

/// A connection whose answer is being read. [`Conn::release`] puts it back in the pool once the
/// answer is complete; dropping it instead closes the connection.
pub struct Conn {
    pool: UpstreamClient,
    slot: usize,
    tx: SendRequest<UpBody>,
}

impl Conn {
    pub fn release(self) {
        let Conn { pool, slot, tx } = self;
        if tx.is_closed() {
            return;
        }
        let stamp = pool.0.sweeps.get();
        let mut idle = pool.0.idle.borrow_mut();
        if idle.len() <= slot {
            idle.resize_with(slot + 1, Vec::new);
        }
        if idle[slot].len() < MAX_IDLE_PER_ORIGIN {
            idle[slot].push((tx, stamp));
        }
    }
}

/// A worker's pool: keep-alive connections with `TCP_NODELAY`, TLS by `tls` for https upstreams.
/// Call inside the worker's runtime and `LocalSet` (the sweep is a task of the worker).
pub fn new(tls: &rustls::ClientConfig) -> UpstreamClient {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector.set_keepalive(Some(Duration::from_secs(60)));
    // The TLS connector needs the URI's scheme to reach it.
    connector.enforce_http(false);
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls.clone())
        .https_or_http()
        .enable_http1()
        .wrap_connector(connector);
    let client = UpstreamClient(Rc::new(Pool {
        connector,
        idle: RefCell::new(Vec::new()),
        sweeps: Cell::new(0),
    }));
    let weak = Rc::downgrade(&client.0);
    tokio::task::spawn_local(async move {
        let mut every = tokio::time::interval(SWEEP_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let max_age = IDLE_TIMEOUT.as_secs().div_ceil(SWEEP_EVERY.as_secs()) as u32;
        loop {
            every.tick().await;
            let Some(pool) = weak.upgrade() else { break };
            let now = pool.sweeps.get().wrapping_add(1);
            pool.sweeps.set(now);
            for stack in pool.idle.borrow_mut().iter_mut() {
                stack.retain(|(tx, stamp)| !tx.is_closed() && now.wrapping_sub(*stamp) < max_age);
                // The least recently used are at the bottom.
                let surplus = stack.len().saturating_sub(KEEP_IDLE_PER_ORIGIN);
                stack.drain(..surplus);
            }
        }
    });
    client
}

impl UpstreamClient {
    /// Sends `req` (origin-form URI, `host` set) to `origin` on a pooled connection, or a new one
    /// when none is idle. A pooled connection that turns out closed before the request went out
    /// (the upstream closed it while idle) is replaced by another, as often as it happens.
    pub async fn send(
        &self,
        origin: &Origin,
        mut req: Request<UpBody>,
    ) -> Result<(Response<Incoming>, Conn), Error> {
        loop {
            let (mut tx, pooled) = match self.checkout(origin.slot) {
                Some(tx) => (tx, true),
                // Boxed: only a new connection needs the dial's future, and unboxed it would
                // be 1.3 KB of every request's future (2.1 KB -> 1.1 KB).
                None => (Box::pin(self.connect(origin)).await?, false),
            };
            // A released connection's task may not have caught up with the end of its last
            // answer yet; a new one takes its first request before its task has run.
            if pooled && !tx.is_ready() && tx.ready().await.is_err() {
                continue;
            }
            match tx.try_send_request(req).await {
                Ok(resp) => {
                    let conn = Conn {
                        pool: self.clone(),
                        slot: origin.slot,
                        tx,
                    };
                    return Ok((resp, conn));
                }
                Err(mut e) => match e.take_message() {
                    Some(unsent) if pooled => req = unsent,
                    _ => return Err(e.into_error().into()),
                },
            }
        }
    }

    /// The most recently used idle connection to `slot` that is still open.
    fn checkout(&self, slot: usize) -> Option<SendRequest<UpBody>> {
        let mut idle = self.0.idle.borrow_mut();
        let stack = idle.get_mut(slot)?;
        while let Some((tx, _)) = stack.pop() {
            if !tx.is_closed() {
                return Some(tx);
            }
        }
        None
    }

    async fn connect(&self, origin: &Origin) -> Result<SendRequest<UpBody>, Error> {
        let mut connector = self.0.connector.clone();
        std::future::poll_fn(|cx| connector.poll_ready(cx)).await?;
        let io = connector.call(origin.dial.clone()).await?;
        let (tx, conn) = http1::Builder::new().handshake(io).await?;
        tokio::task::spawn_local(async move {
            // Its errors reach the request that was using it; an idle one just closes.
            let _ = conn.await;
        });
        Ok(tx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(url: &'static str) -> Result<String, String> {
        Origin::of(&Uri::from_static(url)).map(|o| o.host.to_str().unwrap().to_string())
    }

    #[test]
    fn host_header_names_the_port_only_when_it_is_not_the_default() {
        assert_eq!(
            host("https://api.example.com:443/v1").unwrap(),
            "api.example.com"
        );
        assert_eq!(
            host("http://api.example.com:80").unwrap(),
            "api.example.com"
        );
        assert_eq!(host("https://api.example.com").unwrap(), "api.example.com");
        assert_eq!(host("http://127.0.0.1:8080/v1").unwrap(), "127.0.0.1:8080");
        assert_eq!(host("https://h:80").unwrap(), "h:80");
        assert_eq!(host("http://[::1]:9000").unwrap(), "[::1]:9000");
        assert!(host("https://user:secret@api.example.com").is_err());
    }
}
