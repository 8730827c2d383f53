//! Reading one response on a keep-alive connection: the head parsed with `httparse`, the body by
//! its content length, or chunked (SSE streams included) by an incremental decoder, read into the
//! connection's reusable buffer.

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// One request (`wire`, as [`Request::encode`] makes it) on an open connection, and its complete
/// response: status and de-chunked body.
pub async fn request_on(stream: &mut TcpStream, wire: &[u8]) -> Result<(u16, Vec<u8>), String> {
    let (mut buf, mut decoded) = (Vec::with_capacity(16 * 1024), Vec::new());
    let r = exchange(stream, wire, &mut buf, &mut decoded).await?;
    Ok((r.status, r.body(&buf).to_vec()))
}

/// A parsed response, its body located in the connection's buffer.
pub(super) struct Parsed {
    pub(super) status: u16,
    /// Body bytes: a range of the buffer, or the decoded chunks.
    pub(super) body: BodyAt,
    /// Bytes of the buffer this response used.
    pub(super) consumed: usize,
    /// The server will close (or closed) the connection.
    pub(super) close: bool,
}

pub(super) enum BodyAt {
    Range(usize, usize),
    Decoded(Vec<u8>),
}

impl Parsed {
    pub(super) fn body<'a>(&'a self, buf: &'a [u8]) -> &'a [u8] {
        match &self.body {
            BodyAt::Range(a, b) => &buf[*a..*b],
            BodyAt::Decoded(v) => v,
        }
    }
}

enum Framing {
    Length(usize),
    Chunked,
    UntilClose,
}

async fn read_more(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Result<usize, String> {
    if buf.capacity() - buf.len() < 8192 {
        buf.reserve(buf.capacity().max(16 * 1024));
    }
    stream
        .read_buf(buf)
        .await
        .map_err(|e| format!("reading the response: {e}"))
}

pub(super) async fn exchange(
    stream: &mut TcpStream,
    wire: &[u8],
    buf: &mut Vec<u8>,
    decoded: &mut Vec<u8>,
) -> Result<Parsed, String> {
    stream
        .write_all(wire)
        .await
        .map_err(|e| format!("writing the request: {e}"))?;
    // Head.
    let (status, head_len, framing, close) = loop {
        let mut headers = [httparse::EMPTY_HEADER; 48];
        let mut resp = httparse::Response::new(&mut headers);
        match resp.parse(buf) {
            Ok(httparse::Status::Complete(n)) => {
                let status = resp.code.unwrap_or(0);
                let mut framing = Framing::UntilClose;
                let mut close = resp.version == Some(0);
                for h in resp.headers.iter() {
                    if h.name.eq_ignore_ascii_case("content-length") {
                        let len = std::str::from_utf8(h.value)
                            .ok()
                            .and_then(|s| s.trim().parse::<usize>().ok())
                            .ok_or_else(|| "bad content-length".to_string())?;
                        framing = Framing::Length(len);
                    } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
                        if h.value.eq_ignore_ascii_case(b"chunked") {
                            framing = Framing::Chunked;
                        }
                    } else if h.name.eq_ignore_ascii_case("connection") {
                        if h.value.eq_ignore_ascii_case(b"close") {
                            close = true;
                        } else if h.value.eq_ignore_ascii_case(b"keep-alive") {
                            close = false;
                        }
                    }
                }
                if (100..200).contains(&status) && status != 101 {
                    // Interim response: drop it and read the final one.
                    buf.drain(..n);
                    continue;
                }
                if status == 204 || status == 304 {
                    framing = Framing::Length(0);
                }
                break (status, n, framing, close);
            }
            Ok(httparse::Status::Partial) => {
                if read_more(stream, buf).await? == 0 {
                    return Err(if buf.is_empty() {
                        "the server closed the connection without a response".to_string()
                    } else {
                        "the server closed the connection mid-head".to_string()
                    });
                }
            }
            Err(e) => return Err(format!("malformed response head: {e}")),
        }
    };
    match framing {
        Framing::Length(len) => {
            while buf.len() < head_len + len {
                if read_more(stream, buf).await? == 0 {
                    return Err(format!(
                        "status {status}: the server closed the connection after {} of {len} body bytes",
                        buf.len() - head_len
                    ));
                }
            }
            Ok(Parsed {
                status,
                body: BodyAt::Range(head_len, head_len + len),
                consumed: head_len + len,
                close,
            })
        }
        Framing::UntilClose => {
            while read_more(stream, buf).await? != 0 {}
            let end = buf.len();
            Ok(Parsed {
                status,
                body: BodyAt::Range(head_len, end),
                consumed: end,
                close: true,
            })
        }
        Framing::Chunked => {
            let mut body = std::mem::take(decoded);
            body.clear();
            let mut dec = Chunked::with_buffer(head_len, body);
            loop {
                match dec.step(buf)? {
                    true => break,
                    false => {
                        if read_more(stream, buf).await? == 0 {
                            return Err(format!(
                                "status {status}: the server closed the connection mid-body (chunked, {} bytes decoded)",
                                dec.body.len()
                            ));
                        }
                    }
                }
            }
            Ok(Parsed {
                status,
                consumed: dec.pos,
                body: BodyAt::Decoded(dec.body),
                close,
            })
        }
    }
}

/// Incremental decoder of a chunked body that starts at `pos` in a growing buffer.
struct Chunked {
    pos: usize,
    state: ChunkState,
    body: Vec<u8>,
}

enum ChunkState {
    Size,
    Data(usize),
    Trailers,
}

fn find_crlf(b: &[u8]) -> Option<usize> {
    b.windows(2).position(|w| w == b"\r\n")
}

impl Chunked {
    #[cfg(test)]
    fn new(pos: usize) -> Chunked {
        Self::with_buffer(pos, Vec::new())
    }

    fn with_buffer(pos: usize, body: Vec<u8>) -> Chunked {
        Chunked {
            pos,
            state: ChunkState::Size,
            body,
        }
    }

    /// Decode what `buf` holds; `Ok(true)` once the last chunk and trailers are in.
    fn step(&mut self, buf: &[u8]) -> Result<bool, String> {
        loop {
            match self.state {
                ChunkState::Size => {
                    let Some(i) = find_crlf(&buf[self.pos..]) else {
                        return Ok(false);
                    };
                    let line = &buf[self.pos..self.pos + i];
                    let hex = line.split(|&b| b == b';').next().unwrap_or(b"");
                    let hex = std::str::from_utf8(hex)
                        .map_err(|_| "malformed chunk size".to_string())?
                        .trim();
                    let n = usize::from_str_radix(hex, 16)
                        .map_err(|_| format!("malformed chunk size {hex:?}"))?;
                    self.pos += i + 2;
                    self.state = if n == 0 {
                        ChunkState::Trailers
                    } else {
                        ChunkState::Data(n)
                    };
                }
                ChunkState::Data(n) => {
                    if buf.len() < self.pos + n + 2 {
                        return Ok(false);
                    }
                    self.body.extend_from_slice(&buf[self.pos..self.pos + n]);
                    if &buf[self.pos + n..self.pos + n + 2] != b"\r\n" {
                        return Err("chunk not followed by CRLF".into());
                    }
                    self.pos += n + 2;
                    self.state = ChunkState::Size;
                }
                ChunkState::Trailers => {
                    let Some(i) = find_crlf(&buf[self.pos..]) else {
                        return Ok(false);
                    };
                    self.pos += i + 2;
                    if i == 0 {
                        return Ok(true);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunked_incremental() {
        let wire = b"HEAD5\r\nhello\r\n6;x=1\r\n world\r\n0\r\nT: 1\r\n\r\nNEXT";
        for split in 4..wire.len() {
            let mut dec = Chunked::new(4);
            let done = dec.step(&wire[..split]).unwrap();
            let done = done || dec.step(wire).unwrap();
            assert!(done);
            assert_eq!(dec.body, b"hello world");
            assert_eq!(&wire[dec.pos..], b"NEXT");
        }
    }
}
