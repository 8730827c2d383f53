//! POSTs from a thread of its own, outside the workers (the trace exporter), on `minreq`: a
//! blocking client on `std::net`, a connection per POST, each call blocking that thread until
//! the answer has come or the deadline has passed.
//!
//! Not the upstream path's hyper client ([`crate::http::client`]) nor any client that shares its
//! code: every part of it that a second user calls loses its single caller, and with it the
//! inlining the optimizer gives a function called from one place. Measured on the board shape
//! (plain release build, cachegrind, instructions per request; 35.20K-35.22K before): the exporter
//! on hyper_util's pooled client (a second instance of hyper's client, sharing its non-generic
//! parts: the response parse, the request head, keep-alive) 35.43K-35.44K, and the chat stream's
//! cost per event 5.13K -> 5.68K; on the upstream pool's own connections (`connect` and
//! `try_send_request` called from here too) 35.53K; on `ureq`, whose response parse is httparse's
//! as hyper's is, 35.42K (httparse's `Response::parse` outlined: +174). `minreq` parses its
//! answers itself and depends on nothing: 35.26K.
//!
//! Its price is off the request path: minreq enforces a deadline with a helper thread per POST
//! (`enforce_timeout`), a few a second while spans flow. The traced shape's figure counts the
//! exporter thread's work per request, and under cachegrind a request lasts ~50 times longer, so
//! exports per request are that much more frequent than in service: 41.4K there against 39.9K
//! with ureq (every export failing at a closed port, as in training).

use std::time::Duration;

use http::{StatusCode, Uri};

/// Why a POST failed.
#[derive(Debug)]
pub enum PostError {
    /// The peer answered, not with a 2xx.
    Status(StatusCode),
    /// No connection, no answer in time, or it broke.
    Failed(minreq::Error),
}

impl std::fmt::Display for PostError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PostError::Status(s) => write!(f, "answered {s}"),
            PostError::Failed(e) => write!(f, "{e}"),
        }
    }
}

/// POSTs to one `http://` URL.
pub struct Poster {
    url: String,
    content_type: &'static str,
    /// Whole seconds, as the client counts them (at least 1).
    timeout_secs: u64,
}

impl Poster {
    /// A poster to `uri` of bodies of `content_type`, each POST (its connection included) given
    /// `timeout` (rounded up to whole seconds).
    pub fn new(
        uri: &Uri,
        content_type: &'static str,
        timeout: Duration,
    ) -> std::io::Result<Poster> {
        Ok(Poster {
            url: uri.to_string(),
            content_type,
            timeout_secs: timeout.as_secs_f64().ceil().max(1.0) as u64,
        })
    }

    /// POSTs `body`: `Ok` on a 2xx.
    pub fn post(&self, body: &[u8]) -> Result<(), PostError> {
        let resp = minreq::post(self.url.as_str())
            .with_header("content-type", self.content_type)
            .with_body(body)
            .with_timeout(self.timeout_secs)
            .with_max_redirects(0)
            .send()
            .map_err(PostError::Failed)?;
        match StatusCode::from_u16(resp.status_code) {
            Ok(s) if s.is_success() => Ok(()),
            Ok(s) => Err(PostError::Status(s)),
            Err(_) => Err(PostError::Status(StatusCode::BAD_GATEWAY)),
        }
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
                let text = String::from_utf8_lossy(&got).to_ascii_lowercase();
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

    fn poster(uri: &Uri) -> Poster {
        Poster::new(uri, "application/x-protobuf", Duration::from_secs(5)).unwrap()
    }

    #[test]
    fn posts_the_body_and_reads_the_status() {
        let (uri, t) = peer("HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n");
        poster(&uri).post(b"head:spans").unwrap();
        let got = String::from_utf8(t.join().unwrap()).unwrap();
        let lower = got.to_ascii_lowercase();
        assert!(got.starts_with("POST /v1/traces HTTP/1.1\r\n"), "{got}");
        assert!(
            lower.contains("content-type: application/x-protobuf\r\n"),
            "{got}"
        );
        assert!(lower.contains("content-length: 10\r\n"), "{got}");
        assert!(got.ends_with("\r\n\r\nhead:spans"), "{got}");

        let (uri, _t) = peer("HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n\r\n");
        assert!(matches!(
            poster(&uri).post(b"x"),
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
        let t = std::time::Instant::now();
        assert!(matches!(poster(&uri).post(b"x"), Err(PostError::Failed(_))));
        assert!(t.elapsed() < Duration::from_secs(2));
    }
}
