//! The gateway is built with the patched hyper of third_party/ (third_party/README.md): a body's
//! last chunk, taken after hyper's dispatcher dropped its sender, wakes no task. These tests fail
//! if the workspace stops building that copy, or if the change is lost (a version bump that
//! drops the `[patch.crates-io]` entry, or a new copy without the change), and check that the
//! changes which only skip work (content-length, request target) give what hyper gave before.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The task's waker, counting the wakes that arrive while the task itself is being polled: each
/// makes tokio poll the task once more.
struct SelfWakes {
    task: Waker,
    polling: AtomicBool,
    count: AtomicUsize,
}

impl Wake for SelfWakes {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        if self.polling.load(Ordering::SeqCst) {
            self.count.fetch_add(1, Ordering::SeqCst);
        }
        self.task.wake_by_ref();
    }
}

/// `fut`, polled with a [`SelfWakes`] waker.
struct Counted<F> {
    fut: Pin<Box<F>>,
    wakes: Option<Arc<SelfWakes>>,
    seen: Arc<AtomicUsize>,
}

impl<F: Future> Future for Counted<F> {
    type Output = F::Output;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let seen = self.seen.clone();
        let wakes = self
            .wakes
            .get_or_insert_with(|| {
                Arc::new(SelfWakes {
                    task: cx.waker().clone(),
                    polling: AtomicBool::new(false),
                    count: AtomicUsize::new(0),
                })
            })
            .clone();
        let waker = Waker::from(wakes.clone());
        wakes.polling.store(true, Ordering::SeqCst);
        let r = self.fut.as_mut().poll(&mut Context::from_waker(&waker));
        wakes.polling.store(false, Ordering::SeqCst);
        seen.store(wakes.count.load(Ordering::SeqCst), Ordering::SeqCst);
        r
    }
}

/// Runs `test` on a current-thread runtime with a listener on a free loopback port.
fn on_loopback<F, Fut>(test: F) -> Fut::Output
where
    F: FnOnce(tokio::net::TcpListener, std::net::SocketAddr) -> Fut,
    Fut: Future,
{
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        test(listener, addr).await
    })
}

/// Serves one connection with hyper's HTTP/1 server, the service reading the request's body to
/// its end (and, with `extra_self_wake`, waking its own task once while polled); the client
/// sends [`POST`] in one write and reads the answer. Returns the self-wakes counted.
fn self_wakes_serving(extra_self_wake: bool) -> usize {
    on_loopback(|listener, addr| async move {
        let seen = Arc::new(AtomicUsize::new(0));
        let server = {
            let seen = seen.clone();
            async move {
                let (io, _) = listener.accept().await.unwrap();
                let service =
                    hyper::service::service_fn(move |req: Request<Incoming>| async move {
                        let body = req.into_body().collect().await.unwrap().to_bytes();
                        if extra_self_wake {
                            let mut woke = false;
                            std::future::poll_fn(|cx| {
                                if woke {
                                    return Poll::Ready(());
                                }
                                woke = true;
                                cx.waker().wake_by_ref();
                                Poll::Pending
                            })
                            .await;
                        }
                        Ok::<_, Infallible>(Response::new(Full::new(body)))
                    });
                let conn = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(io), service);
                Counted {
                    fut: Box::pin(conn),
                    wakes: None,
                    seen,
                }
                .await
                .unwrap();
            }
        };
        let client = async move {
            let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
            s.write_all(POST).await.unwrap();
            let mut answer = Vec::new();
            s.read_to_end(&mut answer).await.unwrap();
            let answer = String::from_utf8(answer).unwrap();
            assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
            assert!(answer.ends_with("\r\n\r\nhello"), "{answer}");
        };
        tokio::join!(server, client);
        seen.load(Ordering::SeqCst)
    })
}

const POST: &[u8] =
    b"POST / HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-length: 5\r\n\r\nhello";

#[test]
fn a_body_read_to_its_end_wakes_no_task() {
    assert_eq!(
        self_wakes_serving(false),
        0,
        "hyper woke the connection's task for the body's last chunk: the gateway is not built \
         with third_party/hyper's change (third_party/README.md)"
    );
}

#[test]
fn the_count_sees_a_self_wake() {
    assert_eq!(self_wakes_serving(true), 1);
}

#[test]
fn the_workspace_builds_hyper_from_third_party() {
    let lock =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.lock")).unwrap();
    let hyper = lock
        .split("[[package]]")
        .find(|p| p.contains("\nname = \"hyper\"\n"))
        .expect("hyper in Cargo.lock");
    assert!(
        !hyper.contains("source = "),
        "Cargo.lock takes hyper from a registry, not from third_party/hyper:{hyper}"
    );
    let manifest =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.toml")).unwrap();
    assert!(manifest.contains("hyper = { path = \"third_party/hyper\" }"));
}

/// The bytes from `s` up to and including the first `end`, read one at a time so that nothing
/// after it is consumed; `None` if the peer closes first.
async fn read_through(s: &mut tokio::net::TcpStream, end: &[u8]) -> Option<Vec<u8>> {
    let mut got = Vec::new();
    while !got.ends_with(end) {
        let mut b = [0u8; 1];
        if s.read(&mut b).await.unwrap() == 0 {
            return None;
        }
        got.push(b[0]);
    }
    Some(got)
}

/// A hyper HTTP/1 client connection to `addr`, its connection future running as a task.
async fn client_on(
    addr: std::net::SocketAddr,
) -> (
    hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    tokio::task::JoinHandle<hyper::Result<()>>,
) {
    let io = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (tx, conn) = hyper::client::conn::http1::handshake::<_, Full<Bytes>>(TokioIo::new(io))
        .await
        .unwrap();
    (tx, tokio::spawn(conn))
}

/// The body hyper's HTTP/1 client reads from an upstream whose answer carries `framing` (its
/// `content-length` lines), or the error it gives.
fn client_reads(framing: &'static str) -> Result<Bytes, String> {
    on_loopback(|listener, addr| async move {
        let upstream = async move {
            let (mut s, _) = listener.accept().await.unwrap();
            if read_through(&mut s, b"\r\n\r\n").await.is_none() {
                return;
            }
            let answer = format!("HTTP/1.1 200 OK\r\n{framing}connection: close\r\n\r\nhello");
            s.write_all(answer.as_bytes()).await.unwrap();
        };
        let client = async move {
            let (mut tx, conn) = client_on(addr).await;
            let req = Request::builder()
                .uri("/")
                .header("host", "x")
                .body(Full::new(Bytes::new()))
                .unwrap();
            let r = match tx.send_request(req).await {
                Ok(resp) => resp
                    .into_body()
                    .collect()
                    .await
                    .map(|b| b.to_bytes())
                    .map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            let _ = conn.await;
            r
        };
        let ((), r) = tokio::join!(upstream, client);
        r
    })
}

// third_party/README.md: an answer's `content-length` of digits alone is read without the list
// parse; every other form goes through it and means what it meant before.
#[test]
fn content_length_forms_read_as_before() {
    let hello = Ok(Bytes::from_static(b"hello"));
    assert_eq!(client_reads("content-length: 5\r\n"), hello);
    assert_eq!(client_reads("content-length: 5, 5\r\n"), hello);
    assert_eq!(
        client_reads("content-length: 5\r\ncontent-length: 5\r\n"),
        hello
    );
    assert_eq!(
        client_reads("content-length: 5\r\ncontent-length: 5,5\r\n"),
        hello
    );
    assert_eq!(
        client_reads("content-length: 3\r\n"),
        Ok(Bytes::from_static(b"hel"))
    );
    for bad in [
        "content-length: 5, 6\r\n",
        "content-length: 5\r\ncontent-length: 6\r\n",
        "content-length: 5\r\ncontent-length: 4, 4\r\n",
        "content-length: +5\r\n",
        "content-length: 5x\r\n",
        "content-length: 99999999999999999999999\r\n",
    ] {
        assert!(client_reads(bad).is_err(), "{bad:?} was accepted");
    }
}

/// The request line hyper's HTTP/1 client writes for a request to `uri` (with `method`).
fn request_line(method: &'static str, uri: http::Uri) -> String {
    on_loopback(|listener, addr| async move {
        let upstream = async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let head = read_through(&mut s, b"\r\n").await.unwrap_or_default();
            s.write_all(b"HTTP/1.1 204 No Content\r\nconnection: close\r\n\r\n")
                .await
                .unwrap();
            String::from_utf8(head).unwrap()
        };
        let client = async move {
            let (mut tx, conn) = client_on(addr).await;
            let req = Request::builder()
                .method(method)
                .uri(uri)
                .header("host", "x")
                .body(Full::new(Bytes::new()))
                .unwrap();
            let _ = tx.send_request(req).await;
            let _ = conn.await;
        };
        let (line, ()) = tokio::join!(upstream, client);
        line
    })
}

// third_party/README.md: an origin-form target is written without std::fmt, as what the URI's
// `Display` writes; every other form is written by `Display` as before.
#[test]
fn request_targets_are_written_as_their_display() {
    for target in [
        "/",
        "/v1/chat/completions",
        "/v1/messages?beta=true&x=%20y",
        "/a//b/?",
        "/?",
        "*",
        "http://example.com:8080/v1/chat/completions?q=1",
        "http://example.com",
    ] {
        let uri: http::Uri = target.parse().unwrap();
        let method = if target == "*" { "OPTIONS" } else { "POST" };
        assert_eq!(
            request_line(method, uri.clone()),
            format!("{method} {uri} HTTP/1.1\r\n"),
            "{target:?}"
        );
    }
    // Built from parts, the forms where the path-and-query's text and `Display` differ: none at
    // all (`Display` writes nothing, the text reads "/") and a query without a path (`Display`
    // writes "/?a", the text "?a"). Both take `Display`.
    for target in [None, Some("?a"), Some("/p?q")] {
        let mut parts = http::uri::Parts::default();
        parts.path_and_query = target.map(http::uri::PathAndQuery::from_static);
        let uri = http::Uri::from_parts(parts).unwrap();
        assert_eq!(
            request_line("GET", uri.clone()),
            format!("GET {uri} HTTP/1.1\r\n"),
            "{target:?}"
        );
    }
}

/// A server connection with hyper's own header read timeout and header limits (options the
/// patched copy keeps in a box of their own, `RareOptions` in `proto/h1/conn.rs`), on one
/// accepted connection; returns what the connection future ended with.
async fn serve_one_with_options(listener: tokio::net::TcpListener) -> hyper::Result<()> {
    let (io, _) = listener.accept().await.unwrap();
    let service = hyper::service::service_fn(|_req: Request<Incoming>| async {
        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
    });
    hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(std::time::Duration::from_millis(200))
        .max_headers(3)
        .serve_connection(TokioIo::new(io), service)
        .await
}

/// [`serve_one_with_options`] as a task, and a client connected to it that has sent `head`.
async fn options_server_sent(
    listener: tokio::net::TcpListener,
    addr: std::net::SocketAddr,
    head: &[u8],
) -> (
    tokio::task::JoinHandle<hyper::Result<()>>,
    tokio::net::TcpStream,
) {
    let server = tokio::spawn(serve_one_with_options(listener));
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(head).await.unwrap();
    (server, s)
}

#[test]
fn header_read_timeout_and_limits_hold_as_before() {
    // A request in time is served, and the connection, kept alive, is closed once no next head
    // arrives within the timeout.
    on_loopback(|listener, addr| async move {
        let (server, mut s) =
            options_server_sent(listener, addr, b"GET / HTTP/1.1\r\nhost: x\r\n\r\n").await;
        let head = read_through(&mut s, b"\r\n\r\nok").await.unwrap();
        assert!(head.starts_with(b"HTTP/1.1 200 OK\r\n"));
        let started = std::time::Instant::now();
        s.write_all(b"GET / HTTP/1.1\r\n").await.unwrap();
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest).await;
        let waited = started.elapsed();
        assert!(
            waited >= std::time::Duration::from_millis(150) && waited.as_secs() < 5,
            "{waited:?}"
        );
        let e = server.await.unwrap().unwrap_err();
        assert!(e.is_timeout(), "{e:?}");
    });
    // A head with more headers than the limit is answered 431.
    on_loopback(|listener, addr| async move {
        let head = b"GET / HTTP/1.1\r\nhost: x\r\na: 1\r\nb: 2\r\nc: 3\r\n\r\n";
        let (server, mut s) = options_server_sent(listener, addr, head).await;
        let mut answer = Vec::new();
        let _ = s.read_to_end(&mut answer).await;
        let answer = String::from_utf8_lossy(&answer);
        assert!(
            answer.starts_with("HTTP/1.1 431 Request Header Fields Too Large\r\n"),
            "{answer}"
        );
        let _ = server.await.unwrap();
    });
}

/// The `Date` line of the first answer head in `text` after `from`.
fn date_after(text: &str, from: usize) -> (&str, usize) {
    let at = from + text[from..].find("\r\ndate: ").expect("a date line") + 8;
    let end = at + text[at..].find("\r\n").unwrap();
    (&text[at..end], end)
}

// third_party/README.md: the server refreshes its cached `Date` only when a head can be written,
// not on every poll while a body streams. An answer that follows a long streamed one on the same
// connection (here pipelined behind it, so that its head may be written in the poll that ends
// the stream) still carries the time it was written, not the time the stream began.
#[test]
fn an_answer_after_a_long_stream_has_a_fresh_date() {
    on_loopback(|listener, addr| async move {
        let server = async move {
            let (io, _) = listener.accept().await.unwrap();
            let service = hyper::service::service_fn(|req: Request<Incoming>| async move {
                let body = if req.uri().path() == "/stream" {
                    http_body_util::Either::Left(Paused {
                        sent: 0,
                        pause: Box::pin(tokio::time::sleep(Duration::from_millis(1300))),
                    })
                } else {
                    http_body_util::Either::Right(Full::new(Bytes::from_static(b"after")))
                };
                Ok::<_, Infallible>(Response::new(body))
            });
            hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(io), service)
                .await
                .unwrap();
        };
        let client = async move {
            let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
            s.write_all(
                b"GET /stream HTTP/1.1\r\nhost: x\r\n\r\nGET /after HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
            )
            .await
            .unwrap();
            let mut answer = Vec::new();
            s.read_to_end(&mut answer).await.unwrap();
            let answer = String::from_utf8(answer).unwrap();
            let (first, end) = date_after(&answer, 0);
            let (second, _) = date_after(&answer, end);
            assert!(answer.ends_with("after"), "{answer}");
            assert_ne!(first, second, "{answer}");
        };
        tokio::join!(server, client);
    })
}

/// A streamed body: a chunk, a pause, another chunk, the end.
struct Paused {
    sent: u8,
    pause: Pin<Box<tokio::time::Sleep>>,
}

impl hyper::body::Body for Paused {
    type Data = Bytes;
    type Error = Infallible;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Bytes>, Infallible>>> {
        let chunk = match self.sent {
            0 => "one",
            1 => {
                std::task::ready!(self.pause.as_mut().poll(cx));
                "two"
            }
            _ => return Poll::Ready(None),
        };
        self.sent += 1;
        Poll::Ready(Some(Ok(hyper::body::Frame::data(Bytes::from_static(
            chunk.as_bytes(),
        )))))
    }
}

/// A future that counts its polls.
struct Polls<F> {
    fut: Pin<Box<F>>,
    count: Arc<AtomicUsize>,
}

impl<F: Future> Future for Polls<F> {
    type Output = F::Output;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.count.fetch_add(1, Ordering::SeqCst);
        self.fut.as_mut().poll(cx)
    }
}

// third_party/README.md: taking a chunk off a body channel wakes the sender's task only if it is
// waiting for room. A client connection relaying a streamed answer, chunk by chunk as the reader
// takes them, is polled about once per chunk (its socket's readiness), not twice (the socket and
// the take of the chunk it had just sent).
#[test]
fn a_taken_chunk_wakes_no_sender_that_is_not_waiting() {
    const CHUNKS: usize = 20;
    on_loopback(|listener, addr| async move {
        let upstream = async move {
            let (mut s, _) = listener.accept().await.unwrap();
            read_through(&mut s, b"\r\n\r\n").await.unwrap();
            s.write_all(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
                .await
                .unwrap();
            for _ in 0..CHUNKS {
                tokio::time::sleep(Duration::from_millis(5)).await;
                s.write_all(b"5\r\nevent\r\n").await.unwrap();
            }
            s.write_all(b"0\r\n\r\n").await.unwrap();
        };
        let client = async move {
            let io = tokio::net::TcpStream::connect(addr).await.unwrap();
            let (mut tx, conn) =
                hyper::client::conn::http1::handshake::<_, Full<Bytes>>(TokioIo::new(io))
                    .await
                    .unwrap();
            let polls = Arc::new(AtomicUsize::new(0));
            let conn = tokio::spawn(Polls {
                fut: Box::pin(conn),
                count: polls.clone(),
            });
            let req = Request::builder()
                .uri("/")
                .header("host", "x")
                .body(Full::new(Bytes::new()))
                .unwrap();
            let mut body = tx.send_request(req).await.unwrap().into_body();
            let at_head = polls.load(Ordering::SeqCst);
            let mut got = 0;
            while let Some(frame) = body.frame().await {
                got += frame.unwrap().into_data().map_or(0, |d| d.len());
            }
            assert_eq!(got, 5 * CHUNKS);
            let per_chunk = (polls.load(Ordering::SeqCst) - at_head) as f64 / CHUNKS as f64;
            drop(tx);
            let _ = conn.await;
            per_chunk
        };
        let ((), per_chunk) = tokio::join!(upstream, client);
        assert!(
            per_chunk < 1.5,
            "{per_chunk} polls of the connection per chunk"
        );
    })
}
