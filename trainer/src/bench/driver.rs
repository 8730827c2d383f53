//! The bench's closed-loop load: `connections` keep-alive HTTP/1.1 connections on one
//! current-thread runtime, on its own OS thread pinned to the rig CPU. It runs continuously
//! from the start of the warm-up to the end of the window; the bench flips its phase, and only
//! requests that *complete* while the phase is `Measure` are counted in the window.
//!
//! Each request is the shape's payload, sent as the shape's client dialect; a request counts as
//! failed unless it gets a 200 whose body passes [`check_body`].

use anyhow::{anyhow, Context, Result};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const WARM: u8 = 0;
const MEASURE: u8 = 1;
const STOP: u8 = 2;

/// Longest a single request may take before it counts as failed.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Clone, Debug)]
pub struct Target {
    pub addr: SocketAddr,
    /// `/v1/chat/completions`, `/v1/messages` or `/v1/responses`.
    pub path: String,
    pub body: Bytes,
    pub stream: bool,
    pub client: ClientKind,
}

/// Which HTTP client the load generator uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ClientKind {
    /// The lean hand-rolled HTTP/1.1 client in `wire.rs` (least rig CPU per request).
    Raw,
    /// hyper's HTTP/1.1 client connection (a cross-check of the raw one).
    Hyper,
}

#[derive(Debug, Default)]
pub struct Outcome {
    /// Requests that completed OK inside the window.
    pub window_ok: u64,
    pub window_failed: u64,
    /// Failures outside the window (warm-up, or the tail after it).
    pub other_failed: u64,
    /// Latencies (µs) of the window's OK requests, ascending.
    pub latencies_us: Vec<u32>,
    pub first_error: Option<String>,
}

pub struct LoadRun {
    phase: Arc<AtomicU8>,
    thread: Option<std::thread::JoinHandle<Result<Outcome>>>,
}

impl LoadRun {
    /// Start the load; it is in the warm-up phase until [`LoadRun::begin_window`].
    pub fn start(target: Target, connections: usize, cpu: Option<usize>) -> Result<LoadRun> {
        let phase = Arc::new(AtomicU8::new(WARM));
        let p = phase.clone();
        let thread = std::thread::Builder::new()
            .name("bench-load".into())
            .spawn(move || -> Result<Outcome> {
                if let Some(cpu) = cpu {
                    super::pin::pin_current_thread(cpu)?;
                }
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?;
                rt.block_on(drive(target, connections.max(1), p))
            })
            .context("spawning the load thread")?;
        Ok(LoadRun {
            phase,
            thread: Some(thread),
        })
    }

    pub fn begin_window(&self) -> Instant {
        self.phase.store(MEASURE, Ordering::SeqCst);
        Instant::now()
    }

    pub fn end_window(&self) -> Instant {
        self.phase.store(STOP, Ordering::SeqCst);
        Instant::now()
    }

    /// Stop (if not stopped yet) and collect the window's figures.
    pub fn finish(mut self) -> Result<Outcome> {
        self.phase.store(STOP, Ordering::SeqCst);
        let t = self.thread.take().expect("finish once");
        t.join().map_err(|_| anyhow!("load thread panicked"))?
    }
}

impl Drop for LoadRun {
    fn drop(&mut self) {
        self.phase.store(STOP, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

async fn drive(target: Target, connections: usize, phase: Arc<AtomicU8>) -> Result<Outcome> {
    let target = Arc::new(target);
    let mut tasks = Vec::with_capacity(connections);
    for _ in 0..connections {
        tasks.push(tokio::spawn(connection_loop(target.clone(), phase.clone())));
    }
    let mut out = Outcome::default();
    for t in tasks {
        let o = t.await.map_err(|e| anyhow!("load task: {e}"))?;
        out.window_ok += o.window_ok;
        out.window_failed += o.window_failed;
        out.other_failed += o.other_failed;
        out.latencies_us.extend(o.latencies_us);
        if out.first_error.is_none() {
            out.first_error = o.first_error;
        }
    }
    out.latencies_us.sort_unstable();
    Ok(out)
}

struct HyperConn {
    sender: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
}

async fn hyper_connect(addr: SocketAddr) -> Result<HyperConn, String> {
    let stream = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect {addr}: {e}"))?;
    stream.set_nodelay(true).ok();
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("handshake {addr}: {e}"))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(HyperConn { sender })
}

async fn hyper_request(conn: &mut HyperConn, t: &Target) -> Result<(), String> {
    conn.sender
        .ready()
        .await
        .map_err(|e| format!("connection not ready: {e}"))?;
    let mut req = http::Request::post(t.path.as_str())
        .header(http::header::HOST, t.addr.to_string())
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Full::new(t.body.clone()))
        .map_err(|e| e.to_string())?;
    if t.path == "/v1/messages" {
        req.headers_mut().insert(
            "anthropic-version",
            http::HeaderValue::from_static("2023-06-01"),
        );
    }
    let resp = conn
        .sender
        .send_request(req)
        .await
        .map_err(|e| format!("send: {e}"))?;
    let status = resp.status();
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("reading body: {e}"))?
        .to_bytes();
    if status != http::StatusCode::OK {
        let snippet = String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned();
        return Err(format!("status {status}: {snippet}"));
    }
    check_body(&t.path, t.stream, &body)
}

/// A minimal success check of a 200 body: non-streaming answers are JSON objects; streams end
/// with their dialect's terminal event.
pub fn check_body(path: &str, stream: bool, body: &[u8]) -> Result<(), String> {
    if !stream {
        return match serde_json::from_slice::<serde_json::Value>(body) {
            Ok(v) if v.is_object() => Ok(()),
            Ok(_) => Err("response body is not a JSON object".into()),
            Err(e) => Err(format!("response body is not JSON: {e}")),
        };
    }
    let text = String::from_utf8_lossy(body);
    let terminal = match path {
        "/v1/chat/completions" => "[DONE]",
        "/v1/messages" => "message_stop",
        "/v1/responses" => "response.completed",
        _ => return Ok(()),
    };
    if text.contains(terminal) {
        Ok(())
    } else {
        Err(format!(
            "stream ended without its terminal event `{terminal}`"
        ))
    }
}

enum Conn {
    Raw(super::wire::Conn),
    Hyper(HyperConn),
}

async fn connect(t: &Target) -> Result<Conn, String> {
    Ok(match t.client {
        ClientKind::Raw => Conn::Raw(super::wire::Conn::connect(t.addr).await?),
        ClientKind::Hyper => Conn::Hyper(hyper_connect(t.addr).await?),
    })
}

/// One request on `conn`; `Ok(false)` when it succeeded but the connection must not be reused.
async fn one_request(conn: &mut Conn, t: &Target, raw_request: &[u8]) -> Result<bool, String> {
    match conn {
        Conn::Hyper(c) => hyper_request(c, t).await.map(|()| true),
        Conn::Raw(c) => {
            let (status, body, reusable) = c.roundtrip(raw_request).await?;
            if status != 200 {
                let snippet = String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned();
                return Err(format!("status {status}: {snippet}"));
            }
            check_body(&t.path, t.stream, body)?;
            Ok(reusable)
        }
    }
}

async fn connection_loop(t: Arc<Target>, phase: Arc<AtomicU8>) -> Outcome {
    let raw_request = super::wire::request_bytes(t.addr, &t.path, &t.body);
    let mut out = Outcome::default();
    let mut conn: Option<Conn> = None;
    loop {
        if phase.load(Ordering::Relaxed) == STOP {
            break;
        }
        let start = Instant::now();
        let result = tokio::time::timeout(REQUEST_TIMEOUT, async {
            if conn.is_none() {
                conn = Some(connect(&t).await?);
            }
            one_request(conn.as_mut().expect("connected"), &t, &raw_request).await
        })
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {REQUEST_TIMEOUT:?}")));
        let elapsed = start.elapsed();
        let in_window = phase.load(Ordering::Relaxed) == MEASURE;
        match result {
            Ok(reusable) => {
                if !reusable {
                    conn = None;
                }
                if in_window {
                    out.window_ok += 1;
                    out.latencies_us
                        .push(elapsed.as_micros().min(u32::MAX as u128) as u32);
                }
            }
            Err(e) => {
                // Stop counting failures once the load is being torn down.
                if phase.load(Ordering::Relaxed) == STOP {
                    break;
                }
                conn = None;
                if in_window {
                    out.window_failed += 1;
                } else {
                    out.other_failed += 1;
                }
                if out.first_error.is_none() {
                    out.first_error = Some(e);
                }
                // Do not spin on a dead target.
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_checks() {
        assert!(check_body("/v1/chat/completions", false, br#"{"id":"x"}"#).is_ok());
        assert!(check_body("/v1/chat/completions", false, b"[1]").is_err());
        assert!(check_body("/v1/chat/completions", false, b"nope").is_err());
        assert!(check_body(
            "/v1/chat/completions",
            true,
            b"data: {}\n\ndata: [DONE]\n\n"
        )
        .is_ok());
        assert!(check_body("/v1/chat/completions", true, b"data: {}\n\n").is_err());
        assert!(check_body("/v1/messages", true, b"event: message_stop\ndata: {}\n\n").is_ok());
        assert!(check_body("/v1/responses", true, b"event: response.created\n\n").is_err());
    }
}
