//! Load driver: keep-alive HTTP/1.1 clients that send one prepared request over and over and
//! check every response.
//!
//! Built for throughput on one core: raw tokio TCP, the request encoded once into bytes, one
//! reusable read buffer per connection, `httparse` for the head and an incremental decoder for
//! chunked bodies (SSE streams included). Requests are not pipelined: each connection sends the
//! next request once the previous response is complete, so latency is the full round trip.
//!
//! ```ignore
//! let req = load::Request::post_json("/v1/chat/completions", body);
//! let opts = load::Options::new(addr, 4, load::Stop::Total(3000));
//! let check: load::Check = std::sync::Arc::new(|status, body| {
//!     if status == 200 { Ok(()) } else { Err(format!("status {status}")) }
//! });
//! let outcome = load::run_blocking(&opts, &req, check)?;
//! assert_eq!(outcome.failed, 0);
//! println!("{} rps, p99 {:?} us", outcome.rps(), outcome.percentile_us(99.0));
//! ```

use bytes::Bytes;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::TcpStream;

mod response;

pub use response::request_on;
use response::{exchange, BodyAt};

/// A request to send: method, path, extra headers and body. `Host`, `Content-Length` and
/// `Connection: keep-alive` are added by [`Request::encode`].
#[derive(Clone, Debug)]
pub struct Request {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
}

impl Request {
    /// `POST path` with `Content-Type: application/json`.
    pub fn post_json(path: &str, body: impl Into<Bytes>) -> Request {
        Request {
            method: "POST".into(),
            path: path.into(),
            headers: vec![("content-type".into(), "application/json".into())],
            body: body.into(),
        }
    }

    /// `GET path` without a body.
    pub fn get(path: &str) -> Request {
        Request {
            method: "GET".into(),
            path: path.into(),
            headers: Vec::new(),
            body: Bytes::new(),
        }
    }

    /// Add a header (builder style).
    #[allow(dead_code)] // API for the bench and tests
    pub fn header(mut self, name: &str, value: &str) -> Request {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// The request's bytes on the wire, for a server at `addr`.
    pub fn encode(&self, addr: SocketAddr) -> Bytes {
        let mut head = format!("{} {} HTTP/1.1\r\nhost: {addr}\r\n", self.method, self.path);
        for (k, v) in &self.headers {
            head.push_str(k);
            head.push_str(": ");
            head.push_str(v);
            head.push_str("\r\n");
        }
        if !self.body.is_empty() || self.method != "GET" {
            head.push_str(&format!("content-length: {}\r\n", self.body.len()));
        }
        head.push_str("\r\n");
        let mut out = Vec::with_capacity(head.len() + self.body.len());
        out.extend_from_slice(head.as_bytes());
        out.extend_from_slice(&self.body);
        Bytes::from(out)
    }
}

/// When to stop sending.
#[derive(Clone, Copy, Debug)]
pub enum Stop {
    /// Exactly this many requests in total, shared by all connections.
    Total(u64),
    /// Keep sending until this instant; a request already sent is still awaited and counted.
    Until(Instant),
}

/// Checks one response: HTTP status and the complete (de-chunked) body. `Err` holds the reason,
/// which becomes [`Outcome::first_failure`].
pub type Check = Arc<dyn Fn(u16, &[u8]) -> Result<(), String> + Send + Sync>;

/// How to drive.
#[derive(Clone, Debug)]
pub struct Options {
    pub addr: SocketAddr,
    /// Number of keep-alive connections, each with one request in flight.
    pub connections: usize,
    pub stop: Stop,
    /// Keep a latency sample (microseconds) per request.
    pub record_latency: bool,
    /// Give up on a response after this long (counted as a failure; the connection is dropped).
    pub timeout: Option<Duration>,
    /// Stop every connection after the first failed request.
    pub stop_on_failure: bool,
}

impl Options {
    /// `connections` connections to `addr` until `stop`; latency recorded, 30 s response
    /// timeout, failures do not stop the run.
    pub fn new(addr: SocketAddr, connections: usize, stop: Stop) -> Options {
        Options {
            addr,
            connections,
            stop,
            record_latency: true,
            timeout: Some(Duration::from_secs(30)),
            stop_on_failure: false,
        }
    }
}

/// What a run did.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    /// Requests written (a request whose write failed counts as sent and failed).
    pub sent: u64,
    /// Responses that passed the check.
    pub ok: u64,
    /// Requests that failed: connect or I/O error, timeout, malformed response, or check error.
    pub failed: u64,
    /// Reason for the first failure, if any.
    pub first_failure: Option<String>,
    /// Round-trip latency of every checked response (ok or not), in microseconds, unsorted.
    pub latencies_us: Vec<u32>,
    /// Wall time of the run.
    pub elapsed: Duration,
    /// TCP connections opened (more than `connections` means reconnects).
    pub connects: u64,
}

impl Outcome {
    /// `Err` saying how many failed and why the first did, unless all `requests` passed.
    pub fn all_ok(&self, requests: u64) -> Result<(), String> {
        if self.failed > 0 || self.ok != requests {
            return Err(format!(
                "{} of {} requests failed (the first: {})",
                self.failed,
                self.sent,
                self.first_failure.as_deref().unwrap_or_default()
            ));
        }
        Ok(())
    }

    /// Completed requests (ok) per second of wall time.
    pub fn rps(&self) -> f64 {
        let s = self.elapsed.as_secs_f64();
        if s > 0.0 {
            self.ok as f64 / s
        } else {
            0.0
        }
    }

    /// The `p`-th percentile (0..=100, nearest rank) of the latency samples; sorts them.
    pub fn percentile_us(&mut self, p: f64) -> Option<u32> {
        percentile(&mut self.latencies_us, p)
    }
}

/// Nearest-rank percentile of `samples` (sorted in place); `None` when empty.
pub fn percentile(samples: &mut [u32], p: f64) -> Option<u32> {
    if samples.is_empty() {
        return None;
    }
    samples.sort_unstable();
    let rank = ((p / 100.0) * samples.len() as f64).ceil() as usize;
    Some(samples[rank.clamp(1, samples.len()) - 1])
}

struct Shared {
    wire: Bytes,
    check: Check,
    opts: Options,
    tickets: AtomicU64,
    stop: AtomicBool,
    first_failure: Mutex<Option<String>>,
}

impl Shared {
    /// Take the right to send one more request.
    fn ticket(&self) -> bool {
        if self.stop.load(Ordering::Relaxed) {
            return false;
        }
        match self.opts.stop {
            Stop::Total(_) => self
                .tickets
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                .is_ok(),
            Stop::Until(t) => Instant::now() < t,
        }
    }

    fn fail(&self, msg: String) {
        let mut f = self.first_failure.lock().unwrap();
        if f.is_none() {
            *f = Some(msg);
        }
        if self.opts.stop_on_failure {
            self.stop.store(true, Ordering::Relaxed);
        }
    }
}

#[derive(Default)]
struct ConnStats {
    sent: u64,
    ok: u64,
    failed: u64,
    connects: u64,
    latencies: Vec<u32>,
}

/// Drive the load on the current runtime (one task per connection) and wait for the end.
pub async fn run(opts: &Options, request: &Request, check: Check) -> Outcome {
    let shared = Arc::new(Shared {
        wire: request.encode(opts.addr),
        check,
        opts: opts.clone(),
        tickets: AtomicU64::new(match opts.stop {
            Stop::Total(n) => n,
            Stop::Until(_) => 0,
        }),
        stop: AtomicBool::new(false),
        first_failure: Mutex::new(None),
    });
    let start = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..opts.connections.max(1) {
        set.spawn(connection(shared.clone()));
    }
    let mut out = Outcome::default();
    while let Some(r) = set.join_next().await {
        let s = match r {
            Ok(s) => s,
            Err(e) => {
                shared.fail(format!("load: a connection task panicked: {e}"));
                out.failed += 1;
                continue;
            }
        };
        out.sent += s.sent;
        out.ok += s.ok;
        out.failed += s.failed;
        out.connects += s.connects;
        if out.latencies_us.is_empty() {
            out.latencies_us = s.latencies;
        } else {
            out.latencies_us.extend_from_slice(&s.latencies);
        }
    }
    out.elapsed = start.elapsed();
    out.first_failure = shared.first_failure.lock().unwrap().take();
    out
}

/// [`run`] on a fresh current-thread runtime on the calling thread.
pub fn run_blocking(opts: &Options, request: &Request, check: Check) -> std::io::Result<Outcome> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    Ok(rt.block_on(run(opts, request, check)))
}

async fn connection(shared: Arc<Shared>) -> ConnStats {
    let mut st = ConnStats::default();
    if shared.opts.record_latency {
        if let Stop::Total(n) = shared.opts.stop {
            st.latencies
                .reserve((n / shared.opts.connections.max(1) as u64 + 1) as usize);
        }
    }
    let mut conn: Option<TcpStream> = None;
    let mut buf: Vec<u8> = Vec::with_capacity(64 * 1024);
    // Decoded chunked bodies, reused from one response to the next.
    let mut decoded: Vec<u8> = Vec::new();
    while shared.ticket() {
        if conn.is_none() {
            match TcpStream::connect(shared.opts.addr).await {
                Ok(s) => {
                    let _ = s.set_nodelay(true);
                    st.connects += 1;
                    conn = Some(s);
                }
                Err(e) => {
                    st.sent += 1;
                    st.failed += 1;
                    shared.fail(format!("connect to {}: {e}", shared.opts.addr));
                    // Do not spin on a dead address until the deadline.
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    continue;
                }
            }
        }
        let stream = conn.as_mut().unwrap();
        st.sent += 1;
        let t0 = Instant::now();
        let exchange = exchange(stream, &shared.wire, &mut buf, &mut decoded);
        let result = match shared.opts.timeout {
            Some(t) => match tokio::time::timeout(t, exchange).await {
                Ok(r) => r,
                Err(_) => Err(format!("no complete response within {t:?}")),
            },
            None => exchange.await,
        };
        match result {
            Ok(resp) => {
                if shared.opts.record_latency {
                    st.latencies
                        .push(t0.elapsed().as_micros().min(u32::MAX as u128) as u32);
                }
                match (shared.check)(resp.status, resp.body(&buf)) {
                    Ok(()) => st.ok += 1,
                    Err(e) => {
                        st.failed += 1;
                        shared.fail(e);
                    }
                }
                if resp.close {
                    conn = None;
                }
                buf.drain(..resp.consumed);
                if let BodyAt::Decoded(v) = resp.body {
                    decoded = v;
                }
            }
            Err(e) => {
                st.failed += 1;
                shared.fail(e);
                conn = None;
                buf.clear();
            }
        }
    }
    st
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles() {
        let mut v: Vec<u32> = (1..=100).rev().collect();
        assert_eq!(percentile(&mut v, 50.0), Some(50));
        assert_eq!(percentile(&mut v, 99.0), Some(99));
        assert_eq!(percentile(&mut v, 100.0), Some(100));
        assert_eq!(percentile(&mut v, 0.0), Some(1));
        assert_eq!(percentile(&mut [], 50.0), None);
    }

    #[test]
    fn drives_the_mock() {
        let mock = crate::mock::MockServer::start("127.0.0.1:0".parse().unwrap(), 1).unwrap();
        for stream in [false, true] {
            let body = format!(
                r#"{{"model":"m","stream":{stream},"messages":[{{"role":"user","content":"hi"}}]}}"#
            );
            let req = Request::post_json("/v1/chat/completions", body);
            let opts = Options::new(mock.addr(), 4, Stop::Total(500));
            let check: Check = Arc::new(|status, body| {
                if status == 200 && !body.is_empty() {
                    Ok(())
                } else {
                    Err(format!("status {status}"))
                }
            });
            let mut out = run_blocking(&opts, &req, check).unwrap();
            assert_eq!((out.sent, out.ok, out.failed), (500, 500, 0), "{out:?}");
            assert_eq!(out.connects, 4);
            assert!(out.percentile_us(50.0).is_some());
        }
        // A failing check is reported with its message.
        let req = Request::post_json("/v1/nope", "{}");
        let mut opts = Options::new(mock.addr(), 2, Stop::Total(10));
        opts.stop_on_failure = true;
        let check: Check = Arc::new(|status, _| Err(format!("status {status}")));
        let out = run_blocking(&opts, &req, check).unwrap();
        assert!(out.failed >= 1 && out.ok == 0);
        assert_eq!(out.first_failure.as_deref(), Some("status 404"));
    }
}

/// `trainer load`: drive one request at an address and print what it did (a rig check: e.g. the
/// load generator straight against the mock).
#[derive(clap::Args, Debug)]
pub struct LoadArgs {
    /// Server address (IP:port).
    #[arg(long)]
    pub addr: SocketAddr,
    /// Request path.
    #[arg(long, default_value = "/v1/chat/completions")]
    pub path: String,
    /// JSON body file (POST); without it, GET.
    #[arg(long)]
    pub body: Option<std::path::PathBuf>,
    /// Keep-alive connections.
    #[arg(long, default_value_t = 4)]
    pub connections: usize,
    /// Total requests (exclusive with --seconds).
    #[arg(long, conflicts_with = "seconds")]
    pub requests: Option<u64>,
    /// Run for this many seconds.
    #[arg(long)]
    pub seconds: Option<f64>,
    /// Status every response must have.
    #[arg(long, default_value_t = 200)]
    pub expect_status: u16,
    /// An extra request header, `NAME: VALUE` (repeatable).
    #[arg(long = "header", value_name = "NAME: VALUE")]
    pub headers: Vec<String>,
}

/// Run `trainer load`; fails when any request failed.
pub fn cli(args: LoadArgs) -> anyhow::Result<()> {
    let mut req = match &args.body {
        Some(p) => Request::post_json(
            &args.path,
            std::fs::read(p).map_err(|e| anyhow::anyhow!("reading {}: {e}", p.display()))?,
        ),
        None => Request::get(&args.path),
    };
    for h in &args.headers {
        let (name, value) = h
            .split_once(':')
            .ok_or_else(|| anyhow::anyhow!("--header {h:?}: expected NAME: VALUE"))?;
        req = req.header(name.trim(), value.trim());
    }
    let stop = match (args.requests, args.seconds) {
        (Some(n), _) => Stop::Total(n),
        (None, Some(s)) => Stop::Until(Instant::now() + Duration::from_secs_f64(s)),
        (None, None) => Stop::Until(Instant::now() + Duration::from_secs(5)),
    };
    let want = args.expect_status;
    let check: Check = Arc::new(move |status, _| {
        if status == want {
            Ok(())
        } else {
            Err(format!("status {status}, expected {want}"))
        }
    });
    let opts = Options::new(args.addr, args.connections, stop);
    let mut out = run_blocking(&opts, &req, check)?;
    let summary = serde_json::json!({
        "sent": out.sent, "ok": out.ok, "failed": out.failed,
        "first_failure": out.first_failure,
        "seconds": out.elapsed.as_secs_f64(),
        "rps": out.rps(),
        "p50_us": out.percentile_us(50.0), "p99_us": out.percentile_us(99.0),
        "connects": out.connects,
    });
    println!("{summary}");
    if out.failed > 0 {
        anyhow::bail!(
            "load: {} of {} requests failed; first: {}",
            out.failed,
            out.sent,
            out.first_failure.unwrap_or_default()
        );
    }
    Ok(())
}
