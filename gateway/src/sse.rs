//! Server-sent-event framing: split an upstream byte stream into events, whatever the network
//! chunking was, and write events back out. Only framing lives here; what an event means is up to
//! the dialect code.

use bytes::{Buf, Bytes, BytesMut};

/// One upstream event. `data` borrows from the received bytes when the event has a single
/// `data:` line, which is the case for every provider we talk to.
#[derive(Debug)]
pub struct SseEvent {
    pub event: Bytes,
    pub data: Bytes,
}

impl SseEvent {
    pub fn is_done_marker(&self) -> bool {
        &self.data[..] == b"[DONE]"
    }
}

#[derive(Default)]
pub struct SseSplitter {
    buf: BytesMut,
    /// How far the buffer was already searched for an event boundary.
    scanned: usize,
    /// Bytes received whole ([`SseSplitter::push_bytes`]) while nothing was buffered: events
    /// are split off them without a copy, and what is left without a boundary goes to `buf`.
    whole: Bytes,
}

impl SseSplitter {
    pub fn push(&mut self, data: &[u8]) {
        self.buffer_whole(false);
        self.buf.extend_from_slice(data);
    }

    /// [`SseSplitter::push`] of bytes the caller owns: an upstream read usually holds whole events
    /// (one each, on a paced stream), which are then sliced off those bytes rather than copied
    /// into the buffer and split off it (a copy, a reserve and a split per event).
    pub fn push_bytes(&mut self, data: Bytes) {
        if self.buf.is_empty() && self.whole.is_empty() {
            self.whole = data;
        } else {
            self.push(&data);
        }
    }

    /// Moves what is left of `whole` into the buffer (empty while there is a `whole`), marked as
    /// searched for a boundary when it was.
    fn buffer_whole(&mut self, searched: bool) {
        if !self.whole.is_empty() {
            self.buf.extend_from_slice(&self.whole);
            self.scanned = if searched { self.buf.len() } else { 0 };
            self.whole = Bytes::new();
        }
    }

    /// The next complete event, if the buffer holds one. Comment-only and empty events are skipped.
    pub fn next_event(&mut self) -> Option<SseEvent> {
        while !self.whole.is_empty() {
            let Some((end, sep, lines)) = boundary(&self.whole, 0) else {
                self.buffer_whole(true);
                return None;
            };
            let mut raw = self.whole.split_to(end + sep);
            raw.truncate(end);
            if let Some(ev) = parse_event(raw, lines) {
                return Some(ev);
            }
        }
        loop {
            let (end, sep, lines) = self.find_boundary()?;
            let mut raw = self.buf.split_to(end + sep);
            raw.truncate(end);
            self.scanned = 0;
            if let Some(ev) = parse_event(raw.freeze(), lines) {
                return Some(ev);
            }
        }
    }

    /// Whatever is left when the upstream closes (an event without its final blank line).
    pub fn finish(&mut self) -> Option<SseEvent> {
        self.buffer_whole(false);
        if self.buf.iter().all(|b| b.is_ascii_whitespace()) {
            return None;
        }
        let raw = self.buf.split().freeze();
        parse_event(raw, Lines::Unknown)
    }

    /// [`boundary`] in the buffer, from where the last search left off; its lines are known only
    /// when that was the buffer's start.
    fn find_boundary(&mut self) -> Option<(usize, usize, Lines)> {
        let from = self.scanned.saturating_sub(3);
        match boundary(&self.buf, from) {
            Some((end, sep, lines)) if from == 0 => Some((end, sep, lines)),
            Some((end, sep, _)) => Some((end, sep, Lines::Unknown)),
            None => {
                self.scanned = self.buf.len();
                None
            }
        }
    }
}

/// What a boundary search learnt of the lines before the boundary, counted from where it began,
/// so that [`parse_event`] does not search them again: an Anthropic event is two lines
/// (`event:` and `data:`), an OpenAI one a single `data:` line.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Lines {
    /// No line break before the boundary.
    One,
    /// One line end before the boundary: the first line ends at `.0`, the second starts at `.1`.
    Two(usize, usize),
    /// More, or not searched from the event's start: [`parse_event`] finds them.
    Unknown,
}

/// The first event boundary in `b` at or after `from`: where the blank line starts, how long the
/// line end and blank line are, and the lines from `from` to it (see [`Lines`]). Boundaries are
/// "\n\n", "\r\n\r\n", "\n\r\n" or "\r\r"; a line ends with "\n", "\r\n" or "\r".
fn boundary(b: &[u8], from: usize) -> Option<(usize, usize, Lines)> {
    let mut i = from;
    let mut lines = Lines::One;
    while let Some(off) = memchr::memchr2(b'\n', b'\r', &b[i..]) {
        let p = i + off;
        let rest = &b[p..];
        if rest.starts_with(b"\n\n") {
            return Some((p, 2, lines));
        }
        if rest.starts_with(b"\r\n\r\n") {
            return Some((p, 4, lines));
        }
        if rest.starts_with(b"\n\r\n") {
            return Some((p, 3, lines));
        }
        if rest.starts_with(b"\r\r") {
            return Some((p, 2, lines));
        }
        lines = match lines {
            Lines::One => Lines::Two(p, p + 1),
            // The "\n" of a "\r\n" line end.
            Lines::Two(end, next) if next == p && b[end] == b'\r' && b[p] == b'\n' => {
                Lines::Two(end, p + 1)
            }
            _ => Lines::Unknown,
        };
        i = p + 1;
    }
    None
}

/// One event's fields from its lines. Lines are walked by index and only the two values kept are
/// sliced off `raw` at the end: a `Bytes` per line and per field would be a reference count taken
/// and given back each, several per event. `lines`: where the splitter's boundary search found
/// `raw`'s line ends, when it did, so that they are not searched for again.
fn parse_event(mut raw: Bytes, lines: Lines) -> Option<SseEvent> {
    // The two shapes providers send (OpenAI's `data:` line; Anthropic's `event:` and `data:`
    // lines), read by their prefixes; the data is what is left of `raw`, without a reference
    // count taken for it.
    match lines {
        Lines::One if raw.starts_with(b"data: ") => {
            raw.advance(6);
            return Some(SseEvent {
                event: Bytes::new(),
                data: raw,
            });
        }
        Lines::Two(end, next)
            if raw.starts_with(b"event: ") && raw[next..].starts_with(b"data: ") =>
        {
            let event = raw.slice(7..end);
            raw.advance(next + 6);
            return Some(SseEvent { event, data: raw });
        }
        _ => {}
    }
    let mut event = (0, 0);
    let mut data: Option<(usize, usize)> = None;
    let mut extra: Option<Vec<u8>> = None;
    let mut pos = 0;
    while pos < raw.len() {
        let line_end = match lines {
            Lines::One => raw.len(),
            Lines::Two(end, next) => {
                if pos < next {
                    end
                } else {
                    raw.len()
                }
            }
            Lines::Unknown => memchr::memchr2(b'\n', b'\r', &raw[pos..])
                .map(|o| pos + o)
                .unwrap_or(raw.len()),
        };
        let line = (pos, line_end);
        pos = line_end + 1;
        if pos < raw.len() && raw[line_end] == b'\r' && raw[pos] == b'\n' {
            pos += 1;
        }
        let text = &raw[line.0..line.1];
        if text.is_empty() || text[0] == b':' {
            continue;
        }
        let (field, value) = match memchr::memchr(b':', text) {
            Some(c) => {
                let v = if text.get(c + 1) == Some(&b' ') {
                    c + 2
                } else {
                    c + 1
                };
                (&text[..c], (line.0 + v, line.1))
            }
            None => (text, (line.1, line.1)),
        };
        match field {
            b"event" => event = value,
            b"data" => match (&mut data, &mut extra) {
                (None, _) => data = Some(value),
                (Some(first), None) => {
                    let mut v = raw[first.0..first.1].to_vec();
                    v.push(b'\n');
                    v.extend_from_slice(&raw[value.0..value.1]);
                    extra = Some(v);
                }
                (Some(_), Some(v)) => {
                    v.push(b'\n');
                    v.extend_from_slice(&raw[value.0..value.1]);
                }
            },
            _ => {}
        }
    }
    let data = match extra {
        Some(v) => Bytes::from(v),
        None => {
            let (s, e) = data?;
            raw.slice(s..e)
        }
    };
    let event = if event.0 == event.1 {
        Bytes::new()
    } else {
        raw.slice(event.0..event.1)
    };
    Some(SseEvent { event, data })
}

/// Appends `event: NAME\ndata: JSON\n\n`.
pub fn write_event(out: &mut BytesMut, name: &str, data: &[u8]) {
    out.reserve(name.len() + data.len() + 16);
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\ndata: ");
    out.extend_from_slice(data);
    out.extend_from_slice(b"\n\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The splitter fed `pieces` by both pushes, whatever came before: the same events.
    #[test]
    fn both_pushes_split_alike() {
        let stream: &[u8] = b"event: a\ndata: {\"x\":1}\n\ndata: 2\r\n\r\n: c\n\ndata: 3\r\rdata: 4\n\r\ndata: 5\n\ndata: [DONE]";
        let events = |s: &mut SseSplitter, out: &mut Vec<(Vec<u8>, Vec<u8>)>| {
            while let Some(e) = s.next_event() {
                out.push((e.event.to_vec(), e.data.to_vec()));
            }
        };
        let mut want = Vec::new();
        let mut s = SseSplitter::default();
        s.push(stream);
        events(&mut s, &mut want);
        let last = s.finish().map(|e| e.data.to_vec());
        assert_eq!(want.len(), 5);
        for step in 1..stream.len() {
            for pattern in 0..4u32 {
                let mut s = SseSplitter::default();
                let mut got = Vec::new();
                for (k, piece) in stream.chunks(step).enumerate() {
                    if pattern >> (k % 2) & 1 == 1 {
                        s.push(piece);
                    } else {
                        s.push_bytes(Bytes::copy_from_slice(piece));
                    }
                    if k % 3 != 2 {
                        events(&mut s, &mut got);
                    }
                }
                events(&mut s, &mut got);
                assert_eq!(got, want, "step {step}, pattern {pattern}");
                assert_eq!(s.finish().map(|e| e.data.to_vec()), last);
            }
        }
    }

    #[test]
    fn splits_across_chunks() {
        let mut s = SseSplitter::default();
        s.push(b"event: a\ndata: {\"x\"");
        assert!(s.next_event().is_none());
        s.push(b":1}\n");
        assert!(s.next_event().is_none());
        s.push(b"\ndata: [DONE]\r\n\r\n: comment\n\n");
        let e = s.next_event().unwrap();
        assert_eq!(&e.event[..], b"a");
        assert_eq!(&e.data[..], b"{\"x\":1}");
        let e = s.next_event().unwrap();
        assert!(e.is_done_marker());
        assert!(s.next_event().is_none());
        assert!(s.finish().is_none());
    }

    #[test]
    fn joins_multiline_data() {
        let mut s = SseSplitter::default();
        s.push(b"data: a\ndata: b\n\n");
        assert_eq!(&s.next_event().unwrap().data[..], b"a\nb");
    }

    #[test]
    fn reads_fields_as_written() {
        let mut s = SseSplitter::default();
        s.push(b"id: 1\r\nevent:x\r\ndata:{}\r\nretry: 5\r\n\r\n");
        s.push(
            b"event\ndata\n\n: only a comment\n\nevent: y\nevent: z\ndata: 1\ndata:\ndata: 2\n\n",
        );
        let e = s.next_event().unwrap();
        assert_eq!((&e.event[..], &e.data[..]), (&b"x"[..], &b"{}"[..]));
        let e = s.next_event().unwrap();
        assert_eq!((&e.event[..], &e.data[..]), (&b""[..], &b""[..]));
        let e = s.next_event().unwrap();
        assert_eq!((&e.event[..], &e.data[..]), (&b"z"[..], &b"1\n\n2"[..]));
        assert!(s.next_event().is_none());
        s.push(b"event: last\ndata: [DONE]");
        assert!(s.next_event().is_none());
        let e = s.finish().unwrap();
        assert_eq!((&e.event[..], &e.data[..]), (&b"last"[..], &b"[DONE]"[..]));
    }

    /// The line ends a boundary search hands on are where a fresh search of the event finds
    /// them, for every line end an event may use.
    #[test]
    fn boundary_lines_read_as_a_fresh_search() {
        let ends: [&[u8]; 3] = [b"\n", b"\r\n", b"\r"];
        let bounds: [&[u8]; 4] = [b"\n\n", b"\r\n\r\n", b"\n\r\n", b"\r\r"];
        let bodies: [&[&[u8]]; 11] = [
            &[b"data: {\"a\":1}"],
            &[b"event: x", b"data: {}"],
            &[b"event: x", b"data: 1", b"data: 2"],
            &[b": note", b"data: y"],
            &[b"id: 7", b"event: x", b"data: z"],
            &[b"event: ", b"data: "],
            &[b"event:x", b"data:y"],
            &[b"event: a: b", b"data: :c:"],
            &[b"data: "],
            &[b"data:"],
            &[b"event: x"],
        ];
        for body in bodies {
            for end in ends {
                for bound in bounds {
                    let mut raw = body.join(end);
                    if bound == b"\r\r" && end != b"\r" {
                        continue; // "\r\r" ends only an event whose lines end with "\r".
                    }
                    let stop = raw.len();
                    raw.extend_from_slice(bound);
                    let (at, sep, lines) = boundary(&raw, 0).expect("a boundary");
                    assert_eq!((at, sep), (stop, bound.len()), "{raw:?}");
                    let want = match body.len() {
                        1 => Lines::One,
                        2 => Lines::Two(body[0].len(), body[0].len() + end.len()),
                        _ => Lines::Unknown,
                    };
                    assert_eq!(lines, want, "{raw:?}");
                    let event = Bytes::copy_from_slice(&raw[..at]);
                    let fields = |e: Option<SseEvent>| e.map(|e| (e.event, e.data));
                    assert_eq!(
                        fields(parse_event(event.clone(), lines)),
                        fields(parse_event(event, Lines::Unknown)),
                        "{raw:?}"
                    );
                }
            }
        }
    }
}
