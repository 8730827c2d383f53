//! OTLP's protobuf on the wire, written directly: the few messages and fields of
//! `opentelemetry/proto/trace/v1` that the gateway's spans use ([`span`], [`attr`]), each length
//! known before its message is written, short runs of fields written on the stack first
//! ([`Small`]). What the spans say is in [`super::spans`].
//!
//! Hand-written rather than `opentelemetry-proto`'s prost types: [`super::spans`] has the
//! measurement that decided it.

pub(super) const LEN: u8 = 2;
const VARINT: u8 = 0;
const I64: u8 = 1;

#[inline]
pub(super) fn tag(out: &mut Vec<u8>, field: u8, wire: u8) {
    debug_assert!(field < 16);
    out.push(field << 3 | wire);
}

pub(super) fn varint_len(v: u64) -> usize {
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

/// A nested message written in place, with `reserved` bytes kept for its length (1 for the
/// small messages, 2 for a span: its length is known only once it is written). A length
/// that needs another number of bytes moves the message ([`resize_len`]).
#[inline]
fn message_in(out: &mut Vec<u8>, field: u8, reserved: usize, f: impl FnOnce(&mut Vec<u8>)) {
    tag(out, field, LEN);
    let at = out.len();
    out.extend_from_slice(&[0x80, 0][..reserved]);
    f(out);
    let len = out.len() - at - reserved;
    match reserved {
        1 if len < 0x80 => out[at] = len as u8,
        2 if (0x80..0x4000).contains(&len) => {
            out[at] = (len as u8) | 0x80;
            out[at + 1] = (len >> 7) as u8;
        }
        _ => resize_len(out, at, reserved, len),
    }
}

#[inline]
pub(super) fn message(out: &mut Vec<u8>, field: u8, f: impl FnOnce(&mut Vec<u8>)) {
    message_in(out, field, 1, f)
}

/// The `reserved` bytes at `at` replaced with `len` as a varint of another size.
#[cold]
fn resize_len(out: &mut Vec<u8>, at: usize, reserved: usize, len: usize) {
    let mut prefix = Vec::with_capacity(10);
    prefix.varint(len as u64);
    out.splice(at..at + reserved, prefix);
}

/// An attribute's key as `KeyValue.key` (`key = 1`) encodes it, built at compile time.
pub(super) struct Key {
    buf: [u8; KEY_BUF],
    len: usize,
}

/// A [`Key`]'s room: the longest key's tag, length and name fit.
const KEY_BUF: usize = 40;

impl Key {
    pub(super) const fn new(name: &str) -> Key {
        let b = name.as_bytes();
        assert!(b.len() + 2 <= KEY_BUF);
        let mut buf = [0u8; KEY_BUF];
        buf[0] = 1 << 3 | LEN;
        buf[1] = b.len() as u8;
        let mut i = 0;
        while i < b.len() {
            buf[2 + i] = b[i];
            i += 1;
        }
        Key {
            buf,
            len: b.len() + 2,
        }
    }

    #[inline]
    fn bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

/// A string as `AnyValue { string_value = 1 }`: its length.
fn string_value_len(s: &str) -> usize {
    1 + varint_len(s.len() as u64) + s.len()
}

/// Where a field is written: the buffer itself, or a [`Small`] first.
pub(super) trait Sink {
    fn byte(&mut self, b: u8);
    fn slice(&mut self, s: &[u8]);
    fn key(&mut self, k: &Key);

    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.byte((v as u8) | 0x80);
            v >>= 7;
        }
        self.byte(v as u8);
    }

    fn bytes(&mut self, field: u8, b: &[u8]) {
        self.byte(field << 3 | LEN);
        self.varint(b.len() as u64);
        self.slice(b);
    }

    /// A slice whose length is known at compile time (ids, timestamps).
    fn fixed<const N: usize>(&mut self, b: &[u8; N]) {
        self.slice(b);
    }

    /// An id (shorter than 128 bytes) as field `field`.
    fn id<const N: usize>(&mut self, field: u8, b: &[u8; N]) {
        self.byte(field << 3 | LEN);
        self.byte(N as u8);
        self.fixed(b);
    }
}

impl Sink for Vec<u8> {
    #[inline]
    fn byte(&mut self, b: u8) {
        self.push(b);
    }
    #[inline]
    fn slice(&mut self, s: &[u8]) {
        self.extend_from_slice(s);
    }
    #[inline]
    fn key(&mut self, k: &Key) {
        self.extend_from_slice(k.bytes());
    }
}

/// A short run of fields written on the stack and then copied to the buffer at once: no
/// capacity check per byte, and a key copied as one fixed-size block.
pub(super) struct Small<const CAP: usize = 128> {
    buf: [u8; CAP],
    at: usize,
}

/// What a default [`Small`] holds (the room for a key's whole block comes on top; 128 bytes
/// in all are still copied inline).
const SMALL: usize = 128 - KEY_BUF;

impl<const CAP: usize> Small<CAP> {
    #[inline]
    pub(super) fn new() -> Self {
        Small {
            buf: [0; CAP],
            at: 0,
        }
    }

    #[inline]
    pub(super) fn written(&self) -> &[u8] {
        &self.buf[..self.at]
    }

    /// Appends what was written to `out`: the whole buffer copied as one fixed-size block
    /// (a few vector moves, where a copy of the written length is a call), then cut back.
    #[inline]
    fn flush(&self, out: &mut Vec<u8>) {
        let len = out.len();
        out.extend_from_slice(&self.buf);
        out.truncate(len + self.at);
    }
}

impl<const CAP: usize> Sink for Small<CAP> {
    #[inline]
    fn byte(&mut self, b: u8) {
        self.buf[self.at] = b;
        self.at += 1;
    }
    #[inline]
    fn slice(&mut self, s: &[u8]) {
        self.buf[self.at..self.at + s.len()].copy_from_slice(s);
        self.at += s.len();
    }
    #[inline]
    fn key(&mut self, k: &Key) {
        self.fixed(&k.buf);
        self.at -= KEY_BUF - k.len;
    }
    #[inline]
    fn fixed<const N: usize>(&mut self, b: &[u8; N]) {
        self.buf[self.at..self.at + N].copy_from_slice(b);
        self.at += N;
    }
}

/// `KeyValue { key = 1; AnyValue value = 2 }` as attribute `field` (9 on a span, 1 on a
/// resource). Every length is known up front, so each is written straight, in one pass; a
/// short one (every attribute but a long string) through a [`Small`].
pub(super) fn attr(out: &mut Vec<u8>, field: u8, key: &Key, value: Val<'_>) {
    let lens = attr_lens(key, value);
    if lens.0 <= SMALL {
        let mut w = Small::<128>::new();
        write_attr(&mut w, field, key, value, lens);
        w.flush(out);
    } else {
        out.reserve(lens.0);
        write_attr(out, field, key, value, lens);
    }
}

/// [`attr`] into any sink, which has room for it.
pub(super) fn attr_in<S: Sink>(out: &mut S, field: u8, key: &Key, value: Val<'_>) {
    write_attr(out, field, key, value, attr_lens(key, value))
}

/// An attribute's lengths: its whole, its `KeyValue`'s, its `AnyValue`'s and a list's
/// `ArrayValue`'s (0 for a single value).
type Lens = (usize, usize, usize, usize);

fn attr_lens(key: &Key, value: Val<'_>) -> Lens {
    let mut values = 0;
    let any_len = match value {
        Val::Str(s) => string_value_len(s),
        Val::Int(n) => 1 + varint_len(n as u64),
        Val::Strs(list) => {
            // `AnyValue { ArrayValue array_value = 5 }`, `ArrayValue { repeated AnyValue
            // values = 1 }`.
            values = list
                .iter()
                .map(|s| 1 + varint_len(string_value_len(s) as u64) + string_value_len(s))
                .sum();
            1 + varint_len(values as u64) + values
        }
    };
    let kv_len = key.len + 1 + varint_len(any_len as u64) + any_len;
    let total = 1 + varint_len(kv_len as u64) + kv_len;
    (total, kv_len, any_len, values)
}

/// [`attr`]'s bytes, given its lengths (the `KeyValue`'s, the `AnyValue`'s, a list's).
#[inline]
fn write_attr<S: Sink>(
    out: &mut S,
    field: u8,
    key: &Key,
    value: Val<'_>,
    (_, kv_len, any_len, values): Lens,
) {
    out.byte(field << 3 | LEN);
    out.varint(kv_len as u64);
    out.key(key);
    out.byte(2 << 3 | LEN);
    out.varint(any_len as u64);
    // `AnyValue { string_value = 1; int_value = 3; array_value = 5 }`.
    match value {
        Val::Str(s) => out.bytes(1, s.as_bytes()),
        Val::Int(n) => {
            out.byte(3 << 3 | VARINT);
            out.varint(n as u64);
        }
        Val::Strs(list) => {
            out.byte(5 << 3 | LEN);
            out.varint(values as u64);
            for s in list {
                out.byte(1 << 3 | LEN);
                out.varint(string_value_len(s) as u64);
                out.bytes(1, s.as_bytes());
            }
        }
    }
}

#[derive(Clone, Copy)]
pub(super) enum Val<'a> {
    Str(&'a str),
    Int(i64),
    Strs(&'a [&'a str]),
}

/// `Span` fields: trace_id 1, span_id 2, parent_span_id 4, name 5, kind 6, start 7, end 8,
/// attributes 9, status 15 (`Status { message = 2; code = 3 }`: 1 ok, 2 error), as
/// `ScopeSpans.spans` (field 2).
#[allow(clippy::too_many_arguments)]
pub(super) fn span(
    out: &mut Vec<u8>,
    trace: &[u8; 16],
    id: &[u8; 8],
    parent: Option<&[u8; 8]>,
    name: (&str, &str),
    kind: u64,
    start: u64,
    end: u64,
    attrs: impl FnOnce(&mut Vec<u8>),
    error: Option<&str>,
) {
    message_in(out, 2, 2, |s| {
        s.reserve(512);
        let head = SpanHead {
            trace,
            id,
            parent,
            name,
            kind,
            start,
            end: end.max(start),
        };
        // The fixed fields through a `Small` unless the name is long.
        if name.0.len() + name.1.len() <= SMALL - 64 {
            let mut w = Small::<128>::new();
            head.write(&mut w);
            w.flush(s);
        } else {
            head.write(s);
        }
        attrs(s);
        match error {
            // `Status { code = 3 }`, STATUS_CODE_OK.
            None => s.extend_from_slice(&[15 << 3 | LEN, 2, 3 << 3 | VARINT, 1]),
            Some(e) => message(s, 15, |st| {
                st.bytes(2, e.as_bytes());
                tag(st, 3, VARINT);
                st.varint(2);
            }),
        }
    });
}

/// A span's fields before its attributes.
struct SpanHead<'a> {
    trace: &'a [u8; 16],
    id: &'a [u8; 8],
    parent: Option<&'a [u8; 8]>,
    name: (&'a str, &'a str),
    kind: u64,
    start: u64,
    end: u64,
}

impl SpanHead<'_> {
    /// At most 61 bytes and the name's.
    #[inline]
    fn write<S: Sink>(&self, s: &mut S) {
        s.id(1, self.trace);
        s.id(2, self.id);
        if let Some(p) = self.parent {
            s.id(4, p);
        }
        // `operation model`, or the operation alone.
        let (op, model) = self.name;
        let len = op.len() + if model.is_empty() { 0 } else { 1 + model.len() };
        s.byte(5 << 3 | LEN);
        s.varint(len as u64);
        s.slice(op.as_bytes());
        if !model.is_empty() {
            s.byte(b' ');
            s.slice(model.as_bytes());
        }
        s.byte(6 << 3 | VARINT);
        s.varint(self.kind);
        s.byte(7 << 3 | I64);
        s.fixed(&self.start.to_le_bytes());
        s.byte(8 << 3 | I64);
        s.fixed(&self.end.to_le_bytes());
    }
}
