//! Encoding helpers the dialect modules share: a JSON object and array writer for the translated
//! request bodies, the text-part forms both upstream dialects accept, fresh ids, and what the
//! three client dialects' stream encoders do alike ([`ClientStream`]).

use bytes::{BufMut, BytesMut};

use crate::dialect::error::GwError;
use crate::dialect::neutral::{Encoder, Event, Text, Usage};
use crate::json::{write_str, write_u64};

/// Writes `{` … `}` with commas between fields.
pub struct Obj<'o> {
    out: &'o mut BytesMut,
    first: bool,
}

impl<'o> Obj<'o> {
    pub fn new(out: &'o mut BytesMut) -> Self {
        out.extend_from_slice(b"{");
        Obj { out, first: true }
    }
    pub fn key(&mut self, k: &str) -> &mut BytesMut {
        if !self.first {
            self.out.extend_from_slice(b",");
        }
        self.first = false;
        self.out.extend_from_slice(b"\"");
        self.out.extend_from_slice(k.as_bytes());
        self.out.extend_from_slice(b"\":");
        self.out
    }
    pub fn raw(&mut self, k: &str, v: &[u8]) {
        self.key(k).extend_from_slice(v);
    }
    pub fn text(&mut self, k: &str, t: &Text) {
        let o = self.key(k);
        t.write(o);
    }
    pub fn u64(&mut self, k: &str, n: u64) {
        let o = self.key(k);
        write_u64(o, n);
    }
    pub fn f64(&mut self, k: &str, f: f64) {
        let s = if f.is_finite() {
            format!("{f}")
        } else {
            "null".into()
        };
        self.raw(k, s.as_bytes());
    }
    pub fn end(self) {
        self.out.extend_from_slice(b"}");
    }
}

/// Writes items separated by commas inside `[` … `]`.
pub fn array<T>(out: &mut BytesMut, items: &[T], mut each: impl FnMut(&mut BytesMut, &T)) {
    out.extend_from_slice(b"[");
    for (i, it) in items.iter().enumerate() {
        if i > 0 {
            out.extend_from_slice(b",");
        }
        each(out, it);
    }
    out.extend_from_slice(b"]");
}

/// `{"type":"text","text":…}`, a text part as both dialects write it.
pub fn text_part(out: &mut BytesMut, t: &Text) {
    out.extend_from_slice(b"{\"type\":\"text\",\"text\":");
    t.write(out);
    out.extend_from_slice(b"}");
}

/// `[{"type":"text","text":…},…]`, the content-part form both dialects accept.
pub fn text_parts(out: &mut BytesMut, texts: &[&Text]) {
    array(out, texts, |out, t| text_part(out, t));
}

/// A content value: one text as a plain string, several as text parts, none as "".
pub fn content(out: &mut BytesMut, texts: &[&Text]) {
    match texts {
        [] => out.extend_from_slice(b"\"\""),
        [one] => one.write(out),
        many => text_parts(out, many),
    }
}

/// A JSON string as serde_json writes it: [`write_str`]'s escapes but for backspace and form
/// feed, which serde writes as `\b` and `\f`. For the stream events that were serde_json
/// `Value`s before and are written directly now, byte for byte the same.
pub fn serde_str(out: &mut BytesMut, s: &str) {
    if s.bytes().any(|b| b == 0x08 || b == 0x0c) {
        serde_json::to_writer(out.writer(), s).expect("writing to memory cannot fail");
    } else {
        write_str(out, s);
    }
}

pub const EMPTY_SCHEMA: &[u8] = b"{\"type\":\"object\",\"properties\":{}}";

/// A fresh id with the dialect's prefix. Ids only need to be unique enough for clients to tell
/// objects apart; a per-thread counter mixed with the time is plenty and costs no syscall.
pub fn new_id(prefix: &str) -> String {
    use std::cell::Cell;
    thread_local! {
        static NEXT: Cell<u64> = const { Cell::new(0) };
    }
    let n = NEXT.with(|c| {
        let v = c.get().wrapping_add(1);
        c.set(v);
        v
    });
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    format!("{prefix}{:016x}{:08x}", t, n as u32)
}

pub fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// A client dialect's stream encoder, as each of the three is written: it keeps the usage the
/// stream reports, opens the stream once (its first event or events) with the upstream's id or,
/// when content comes before any `Start`, a new one, and writes the rest in its dialect. Each is
/// an [`Encoder`] through the impl below, which handles `Start` and `Usage` for all three.
pub trait ClientStream: Send {
    /// The prefix of the id of a stream opened without the upstream's.
    const ID_PREFIX: &'static str;
    fn usage(&mut self) -> &mut Usage;
    fn started(&self) -> bool;
    /// Writes the stream's opening, with the upstream's (or a new) id.
    fn start(&mut self, id: &str, out: &mut BytesMut);
    /// Writes any event but `Start` and `Usage`, the stream opened.
    fn content(&mut self, ev: Event<'_>, out: &mut BytesMut);
    /// Writes the dialect's error event.
    fn error_event(&mut self, err: &GwError, out: &mut BytesMut);
}

impl<E: ClientStream> Encoder for E {
    #[inline]
    fn event(&mut self, ev: Event<'_>, out: &mut BytesMut) {
        match ev {
            Event::Start { id, input_tokens } => {
                self.usage().update(input_tokens, None);
                self.start(&id, out);
            }
            Event::Usage { input, output } => self.usage().update(input, output),
            ev => {
                if !self.started() {
                    self.start(&new_id(E::ID_PREFIX), out);
                }
                self.content(ev, out);
            }
        }
    }

    fn error(&mut self, err: &GwError, out: &mut BytesMut) {
        self.error_event(err, out);
    }
}
