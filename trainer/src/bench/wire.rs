//! A lean HTTP/1.1 keep-alive client for the load generator: the request bytes are built once
//! and written with one syscall; the response is parsed just enough to find its end
//! (Content-Length or chunked) and its status. It exists because the load generator shares a
//! core with the mock, and every microsecond it spends per request is headroom the rig floor
//! loses.

use bytes::{Buf, BytesMut};
use std::net::SocketAddr;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The full request (head and body) for `POST path` with a JSON body.
pub fn request_bytes(addr: SocketAddr, path: &str, body: &[u8]) -> Vec<u8> {
    let mut head = format!(
        "POST {path} HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n",
        body.len()
    );
    if path == "/v1/messages" {
        head.push_str("anthropic-version: 2023-06-01\r\n");
    }
    head.push_str("\r\n");
    let mut out = head.into_bytes();
    out.extend_from_slice(body);
    out
}

#[derive(Debug, PartialEq, Eq)]
pub struct Head {
    pub status: u16,
    pub head_len: usize,
    pub content_length: Option<usize>,
    pub chunked: bool,
    pub close: bool,
}

/// Parse a response head if `buf` holds all of it. `Err` on a malformed head.
pub fn parse_head(buf: &[u8]) -> Result<Option<Head>, String> {
    let Some(end) = find(buf, b"\r\n\r\n") else {
        if buf.len() > 64 * 1024 {
            return Err("response head over 64 KiB".into());
        }
        return Ok(None);
    };
    let text = std::str::from_utf8(&buf[..end]).map_err(|_| "response head is not UTF-8")?;
    let mut lines = text.split("\r\n");
    let status_line = lines.next().unwrap_or("");
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().unwrap_or("");
    if !version.starts_with("HTTP/1.") {
        return Err(format!("bad status line `{status_line}`"));
    }
    let status: u16 = parts
        .next()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("bad status line `{status_line}`"))?;
    let mut head = Head {
        status,
        head_len: end + 4,
        content_length: None,
        chunked: false,
        close: version == "HTTP/1.0",
    };
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            return Err(format!("bad header line `{line}`"));
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            head.content_length = Some(value.parse().map_err(|_| "bad content-length")?);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            head.chunked = value.to_ascii_lowercase().contains("chunked");
        } else if name.eq_ignore_ascii_case("connection") {
            let v = value.to_ascii_lowercase();
            head.close = v.contains("close");
        }
    }
    Ok(Some(head))
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Decode as much of a chunked body as `buf` holds, appending the data to `out`. Returns
/// `Ok(Some(consumed))` once the last chunk and trailers are in, `Ok(None)` when more bytes
/// are needed (nothing consumed, so call again with the grown buffer).
pub fn dechunk(buf: &[u8], out: &mut Vec<u8>) -> Result<Option<usize>, String> {
    let mut pos = 0;
    let mark = out.len();
    loop {
        let Some(eol) = find(&buf[pos..], b"\r\n") else {
            out.truncate(mark);
            return Ok(None);
        };
        let size_text = std::str::from_utf8(&buf[pos..pos + eol]).map_err(|_| "bad chunk size")?;
        let size_text = size_text.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size_text, 16)
            .map_err(|_| format!("bad chunk size `{size_text}`"))?;
        pos += eol + 2;
        if size == 0 {
            // Trailers end with an empty line.
            if buf[pos..].starts_with(b"\r\n") {
                return Ok(Some(pos + 2));
            }
            let Some(t) = find(&buf[pos..], b"\r\n\r\n") else {
                out.truncate(mark);
                return Ok(None);
            };
            return Ok(Some(pos + t + 4));
        }
        if buf.len() < pos + size + 2 {
            out.truncate(mark);
            return Ok(None);
        }
        out.extend_from_slice(&buf[pos..pos + size]);
        if &buf[pos + size..pos + size + 2] != b"\r\n" {
            return Err("chunk not followed by CRLF".into());
        }
        pos += size + 2;
    }
}

pub struct Conn {
    stream: TcpStream,
    buf: BytesMut,
    body: Vec<u8>,
}

impl Conn {
    pub async fn connect(addr: SocketAddr) -> Result<Conn, String> {
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connect {addr}: {e}"))?;
        stream.set_nodelay(true).ok();
        Ok(Conn {
            stream,
            buf: BytesMut::with_capacity(16 * 1024),
            body: Vec::with_capacity(16 * 1024),
        })
    }

    async fn fill(&mut self) -> Result<(), String> {
        if self.buf.capacity() - self.buf.len() < 4096 {
            self.buf.reserve(16 * 1024);
        }
        match self.stream.read_buf(&mut self.buf).await {
            Ok(0) => Err("connection closed by the server mid-response".into()),
            Ok(_) => Ok(()),
            Err(e) => Err(format!("read: {e}")),
        }
    }

    /// Send the request and read the whole response. Returns the status and the (de-chunked)
    /// body, and whether the connection can be reused.
    pub async fn roundtrip(&mut self, request: &[u8]) -> Result<(u16, &[u8], bool), String> {
        self.stream
            .write_all(request)
            .await
            .map_err(|e| format!("write: {e}"))?;
        let head = loop {
            if let Some(h) = parse_head(&self.buf)? {
                break h;
            }
            self.fill().await?;
        };
        self.buf.advance(head.head_len);
        self.body.clear();
        if head.chunked {
            loop {
                if let Some(used) = dechunk(&self.buf, &mut self.body)? {
                    self.buf.advance(used);
                    break;
                }
                self.fill().await?;
            }
        } else if let Some(n) = head.content_length {
            while self.buf.len() < n {
                self.fill().await?;
            }
            self.body.extend_from_slice(&self.buf[..n]);
            self.buf.advance(n);
        } else {
            // Body runs to the end of the connection.
            loop {
                match self.stream.read_buf(&mut self.buf).await {
                    Ok(0) => break,
                    Ok(_) => {}
                    Err(e) => return Err(format!("read: {e}")),
                }
            }
            self.body.extend_from_slice(&self.buf);
            self.buf.clear();
            return Ok((head.status, &self.body, false));
        }
        Ok((head.status, &self.body, !head.close))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads() {
        assert_eq!(parse_head(b"HTTP/1.1 200 OK\r\ncontent-le").unwrap(), None);
        let h = parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\nx: y\r\n\r\nhello").unwrap();
        assert_eq!(
            h,
            Some(Head {
                status: 200,
                head_len: 45,
                content_length: Some(12),
                chunked: false,
                close: false
            })
        );
        let h = parse_head(
            b"HTTP/1.1 502 Bad Gateway\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n",
        )
        .unwrap()
        .unwrap();
        assert_eq!(h.status, 502);
        assert!(h.chunked && h.close);
        assert!(parse_head(b"SSH-2.0\r\n\r\n").is_err());
        assert!(parse_head(b"HTTP/1.1 200 OK\r\nbroken\r\n\r\n").is_err());
    }

    #[test]
    fn chunks() {
        let mut out = Vec::new();
        let full = b"5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\n\r\nNEXT";
        assert_eq!(dechunk(full, &mut out).unwrap(), Some(full.len() - 4));
        assert_eq!(out, b"hello, world");
        // Every strict prefix needs more bytes and leaves `out` as it was.
        for cut in 0..full.len() - 4 {
            let mut o = b"keep".to_vec();
            assert_eq!(dechunk(&full[..cut], &mut o).unwrap(), None, "cut {cut}");
            assert_eq!(o, b"keep");
        }
        let mut o = Vec::new();
        assert_eq!(dechunk(b"0\r\nx-t: 1\r\n\r\n", &mut o).unwrap(), Some(13));
        assert!(dechunk(b"zz\r\n", &mut o).is_err());
        assert!(dechunk(b"2\r\nabXY", &mut o).is_err());
    }

    #[test]
    fn request_has_length_and_body() {
        let r = request_bytes("127.0.0.1:9".parse().unwrap(), "/v1/messages", b"{}");
        let t = String::from_utf8(r).unwrap();
        assert!(t.starts_with("POST /v1/messages HTTP/1.1\r\n"));
        assert!(t.contains("content-length: 2\r\n"));
        assert!(t.contains("anthropic-version"));
        assert!(t.ends_with("\r\n\r\n{}"));
    }
}
