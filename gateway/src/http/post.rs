//! POSTs from a thread of its own, outside the workers (the trace exporter): hyper_util's pooled
//! client (hyper's, as the upstream pool is) on a current-thread runtime the [`Poster`] owns, each
//! call blocking that thread until the answer is read or the deadline passes. The body goes as
//! the caller's buffers, one frame each, never joined into one.
//!
//! A connection is kept for the next POST while it has been idle less than [`IDLE`]; a POST that
//! breaks on its way (a kept connection the peer had just closed) is sent once more on a new one.
//! A peer that cannot be connected to is not asked twice.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderValue, Request, StatusCode, Uri};
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, SizeHint};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

/// How long a kept connection may sit idle before the next POST opens another: below the idle
/// timeouts collectors and proxies close connections at, so that a POST rarely meets one that
/// is closing.
const IDLE: Duration = Duration::from_secs(30);

/// Why a POST failed.
#[derive(Debug)]
pub enum PostError {
    /// The peer answered, not with a 2xx.
    Status(StatusCode),
    /// No answer within the deadline.
    TimedOut,
    /// No connection, or it broke.
    Failed(hyper_util::client::legacy::Error),
}

impl std::fmt::Display for PostError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PostError::Status(s) => write!(f, "answered {s}"),
            PostError::TimedOut => f.write_str("timed out"),
            PostError::Failed(e) => write!(f, "{e}"),
        }
    }
}

/// POSTs to one `http://` URL, one at a time.
pub struct Poster {
    rt: tokio::runtime::Runtime,
    client: Client<HttpConnector, Parts>,
    uri: Uri,
    content_type: HeaderValue,
    timeout: Duration,
}

impl Poster {
    /// A poster to `uri` of bodies of `content_type`, each POST (its connection included) given
    /// `timeout`.
    pub fn new(uri: Uri, content_type: &'static str, timeout: Duration) -> std::io::Result<Poster> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(timeout));
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(IDLE)
            .pool_max_idle_per_host(1)
            .build(connector);
        Ok(Poster {
            rt,
            client,
            uri,
            content_type: HeaderValue::from_static(content_type),
            timeout,
        })
    }

    /// POSTs the body made of `parts`, back to back: `Ok` on a 2xx (its body read, so that the
    /// connection can be kept).
    pub fn post(&self, parts: Vec<Bytes>) -> Result<(), PostError> {
        match self.post_once(parts.clone()) {
            Err(PostError::Failed(e)) if !e.is_connect() => self.post_once(parts),
            r => r,
        }
    }

    fn post_once(&self, parts: Vec<Bytes>) -> Result<(), PostError> {
        let len = parts.iter().map(|p| p.len() as u64).sum();
        let mut req = Request::post(self.uri.clone())
            .body(Parts {
                parts: parts.into_iter(),
                len,
            })
            .expect("a request of a checked URI");
        req.headers_mut()
            .insert(header::CONTENT_TYPE, self.content_type.clone());
        self.rt.block_on(async {
            let answer = async {
                let resp = self.client.request(req).await.map_err(PostError::Failed)?;
                let status = resp.status();
                // A body that breaks off only costs the connection; the answer was given.
                let _ = resp.into_body().collect().await;
                if status.is_success() {
                    Ok(())
                } else {
                    Err(PostError::Status(status))
                }
            };
            tokio::time::timeout(self.timeout, answer)
                .await
                .unwrap_or(Err(PostError::TimedOut))
        })
    }
}

/// A body of buffers sent one after another, each its own frame, its length known up front.
pub struct Parts {
    parts: std::vec::IntoIter<Bytes>,
    len: u64,
}

impl Body for Parts {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let next = self.parts.next();
        if let Some(b) = &next {
            self.len -= b.len() as u64;
        }
        Poll::Ready(next.map(|b| Ok(Frame::data(b))))
    }

    fn is_end_stream(&self) -> bool {
        self.len == 0
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    /// A peer that reads one request and answers `status`: the request's head and body as read.
    fn peer(status: &'static str) -> (Uri, std::thread::JoinHandle<Vec<u8>>) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let uri = format!("http://{}/v1/traces", l.local_addr().unwrap())
            .parse()
            .unwrap();
        let t = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            // Until the head and its content-length's worth of body are in.
            loop {
                let n = s.read(&mut buf).unwrap();
                got.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&got);
                if let Some(end) = text.find("\r\n\r\n") {
                    let len: usize = text
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length: "))
                        .map_or(0, |v| v.trim().parse().unwrap());
                    if got.len() >= end + 4 + len {
                        break;
                    }
                }
            }
            s.write_all(status.as_bytes()).unwrap();
            got
        });
        (uri, t)
    }

    #[test]
    fn posts_the_parts_as_one_body_and_reads_the_status() {
        let (uri, t) = peer("HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n");
        let p = Poster::new(uri, "application/x-protobuf", Duration::from_secs(5)).unwrap();
        let parts = vec![Bytes::from_static(b"head:"), Bytes::from(b"spans".to_vec())];
        p.post(parts).unwrap();
        let got = String::from_utf8(t.join().unwrap()).unwrap();
        assert!(got.starts_with("POST /v1/traces HTTP/1.1\r\n"), "{got}");
        assert!(got.contains("content-type: application/x-protobuf\r\n"), "{got}");
        assert!(got.contains("content-length: 10\r\n"), "{got}");
        assert!(got.ends_with("\r\n\r\nhead:spans"), "{got}");

        let (uri, _t) = peer("HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n\r\n");
        let p = Poster::new(uri, "application/x-protobuf", Duration::from_secs(5)).unwrap();
        assert!(matches!(
            p.post(vec![Bytes::from_static(b"x")]),
            Err(PostError::Status(StatusCode::SERVICE_UNAVAILABLE))
        ));
    }

    #[test]
    fn a_peer_that_is_not_there_fails_at_once() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let uri = format!("http://127.0.0.1:{port}/").parse().unwrap();
        let p = Poster::new(uri, "application/x-protobuf", Duration::from_secs(5)).unwrap();
        let t = std::time::Instant::now();
        assert!(matches!(
            p.post(vec![Bytes::from_static(b"x")]),
            Err(PostError::Failed(e)) if e.is_connect()
        ));
        assert!(t.elapsed() < Duration::from_secs(2));
    }
}
