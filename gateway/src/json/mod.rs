//! Byte-level JSON helpers for the hot paths: validate a document and locate a few top-level
//! values in one pass without a DOM ([`scan_object`]), rename a `model` value in stream frames,
//! write strings and integers without `fmt` ([`write`]), and read the token usage of an answer
//! ([`usage`]). Knows nothing of dialects or errors.

mod swar;
pub mod usage;
pub mod write;

use std::borrow::Cow;

use bytes::BytesMut;

use swar::{has_byte, special_bytes};
pub use write::{digits_into, write_str, write_u64};

/// The deepest nesting accepted: serde_json's recursion limit, which the translated routes hit
/// when they parse a body.
pub const MAX_DEPTH: usize = 128;

/// Why [`scan_object`] refused a document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScanError {
    /// Not JSON (or not an object at the top): what was expected, and the byte offset.
    Syntax { what: &'static str, at: usize },
    /// Arrays and objects nested deeper than [`MAX_DEPTH`].
    TooDeep,
    /// The top-level member `keys[i]` appears twice.
    Duplicate(usize),
}

/// Checks that `body` is exactly one JSON object, by serde_json's grammar (strings without raw
/// control characters and with valid escapes, numbers without leading zeros, `true`/`false`/
/// `null`, no trailing commas, nothing but whitespace after it) and nested at most [`MAX_DEPTH`]
/// deep, and returns the byte range of the value of each top-level member named in `keys`
/// (names compared after decoding their escapes, which must form valid UTF-16, and checked to
/// be UTF-8, as serde requires of a struct's keys). The values are not interpreted, nor checked
/// to be UTF-8 (serde skips them unchecked too; the head parse validates the whole body once).
/// This is what serde_json does for a struct with these fields and the rest ignored, without
/// its generic skipping, but for depth: serde skips ignored values without a recursion limit,
/// this scan refuses nesting past [`MAX_DEPTH`] everywhere (a request body was refused there
/// before too, by a separate pass; a native stream frame that deep now ends the stream as not
/// JSON). The native route's head parse and a native stream's frame check are each one pass
/// over the bytes.
pub fn scan_object<const N: usize>(
    body: &[u8],
    keys: [&str; N],
) -> Result<[Option<(usize, usize)>; N], ScanError> {
    scan_object_collecting(body, keys, None)
}

/// [`scan_object`], and also the span of every string value (quotes included) of a member whose
/// name is, as written, `strings_named.0`, at any depth, pushed on `strings_named.1` in document
/// order: a native stream frame is checked and its model names found in the one pass.
pub fn scan_object_collecting<const N: usize>(
    body: &[u8],
    keys: [&str; N],
    strings_named: Option<(&str, &mut Vec<(usize, usize)>)>,
) -> Result<[Option<(usize, usize)>; N], ScanError> {
    let (collect_name, collect) = match strings_named {
        Some((n, v)) => (n.as_bytes(), Some(v)),
        None => (&b""[..], None),
    };
    let mut c = Cursor {
        b: body,
        i: 0,
        collect_name,
        collect,
        collecting: false,
    };
    let mut found = [None; N];
    c.ws();
    if c.peek() != b'{' {
        return Err(c.syntax("a JSON object"));
    }
    c.i += 1;
    c.ws();
    if c.peek() == b'}' {
        c.i += 1;
    } else {
        loop {
            if c.peek() != b'"' {
                return Err(c.syntax("a member name"));
            }
            let name_start = c.i + 1;
            let escaped = c.string()?;
            let name = &body[name_start..c.i - 1];
            c.ws();
            if c.peek() != b':' {
                return Err(c.syntax("`:`"));
            }
            c.i += 1;
            c.ws();
            let start = c.i;
            c.collecting = c.collects(name, escaped);
            c.value(1)?;
            let end = c.i;
            let which = if escaped {
                let at = name_start;
                let name = decode_str(name).map_err(|what| ScanError::Syntax { what, at })?;
                keys.iter().position(|k| *k == name)
            } else {
                if !name.is_ascii() && std::str::from_utf8(name).is_err() {
                    return Err(ScanError::Syntax {
                        what: "a UTF-8 member name",
                        at: name_start,
                    });
                }
                keys.iter().position(|k| k.as_bytes() == name)
            };
            if let Some(k) = which {
                if found[k].is_some() {
                    return Err(ScanError::Duplicate(k));
                }
                found[k] = Some((start, end));
            }
            c.ws();
            match c.peek() {
                b',' => {
                    c.i += 1;
                    c.ws();
                }
                b'}' => {
                    c.i += 1;
                    break;
                }
                _ => return Err(c.syntax("`,` or `}`")),
            }
        }
    }
    c.ws();
    if c.i != body.len() {
        return Err(c.syntax("the end of the document"));
    }
    Ok(found)
}

/// The byte ranges of the values of the top-level members named in `keys` (names compared with
/// their escapes decoded, the first of each), or `None` when `body` does not start as a JSON
/// object. Nothing is validated and the walk stops once every key is found: this is for locating
/// a few members of an upstream's answer, which is passed on as it is whether or not it is valid.
pub fn find_members<const N: usize>(
    body: &[u8],
    keys: [&str; N],
) -> Option<[Option<(usize, usize)>; N]> {
    let ws = |b: &[u8], mut i: usize| {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = b.get(i) {
            i += 1;
        }
        i
    };
    let mut found = [None; N];
    let mut missing = N;
    let mut i = ws(body, 0);
    if body.get(i) != Some(&b'{') {
        return None;
    }
    i = ws(body, i + 1);
    while missing > 0 && body.get(i) == Some(&b'"') {
        let (name_end, name_escaped) = string_end_escaped(body, i)?;
        let name = &body[i + 1..name_end - 1];
        i = ws(body, name_end);
        if body.get(i) != Some(&b':') {
            break;
        }
        i = ws(body, i + 1);
        let start = i;
        i = match *body.get(i)? {
            b'"' => string_end(body, i)?,
            b'{' | b'[' => {
                let mut depth = 0usize;
                loop {
                    match *body.get(i)? {
                        b'"' => i = string_end(body, i)?,
                        b'{' | b'[' => {
                            depth += 1;
                            i += 1;
                        }
                        b'}' | b']' => {
                            depth -= 1;
                            i += 1;
                            if depth == 0 {
                                break i;
                            }
                        }
                        _ => i += 1,
                    }
                }
            }
            _ => {
                while !matches!(
                    body.get(i),
                    None | Some(b',' | b'}' | b']' | b' ' | b'\n' | b'\r' | b'\t')
                ) {
                    i += 1;
                }
                i
            }
        };
        let which = if name_escaped {
            keys.iter().position(|k| decoded_is(name, k.as_bytes()))
        } else {
            keys.iter().position(|k| k.as_bytes() == name)
        };
        if let Some(k) = which {
            if found[k].is_none() {
                found[k] = Some((start, i));
                missing -= 1;
            }
        }
        i = ws(body, i);
        if body.get(i) != Some(&b',') {
            break;
        }
        i = ws(body, i + 1);
    }
    Some(found)
}

/// Whether a member name written with escapes (`raw`, between its quotes) decodes to `want`.
#[cold]
fn decoded_is(raw: &[u8], want: &[u8]) -> bool {
    decode_str(raw).is_ok_and(|d| d.as_bytes() == want)
}

/// The text of a JSON string literal's contents (between the quotes; escapes already checked by
/// [`scan_object`]), escapes decoded; a `\u` escape must not leave a surrogate unpaired, and the
/// result must be UTF-8 (serde_json's rules for a string it decodes). Borrowed without escapes.
pub fn decode_str(raw: &[u8]) -> Result<Cow<'_, str>, &'static str> {
    const NOT_UTF8: &str = "valid UTF-8";
    if !raw.contains(&b'\\') {
        return std::str::from_utf8(raw)
            .map(Cow::Borrowed)
            .map_err(|_| NOT_UTF8);
    }
    let mut out = String::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        let Some(off) = raw[i..].iter().position(|&c| c == b'\\') else {
            out.push_str(std::str::from_utf8(&raw[i..]).map_err(|_| NOT_UTF8)?);
            break;
        };
        out.push_str(std::str::from_utf8(&raw[i..i + off]).map_err(|_| NOT_UTF8)?);
        i += off;
        let esc = *raw.get(i + 1).ok_or("an escape")?;
        i += 2;
        let ch = match esc {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => {
                let hi = hex4(raw.get(i..i + 4)).ok_or("four hex digits")?;
                i += 4;
                let code = match hi {
                    0xDC00..=0xDFFF => return Err("a leading surrogate before a trailing one"),
                    0xD800..=0xDBFF => {
                        if raw.get(i..i + 2) != Some(b"\\u".as_slice()) {
                            return Err("a trailing surrogate after a leading one");
                        }
                        let lo = hex4(raw.get(i + 2..i + 6)).ok_or("four hex digits")?;
                        if !(0xDC00..=0xDFFF).contains(&lo) {
                            return Err("a trailing surrogate after a leading one");
                        }
                        i += 6;
                        0x10000 + ((u32::from(hi) - 0xD800) << 10) + (u32::from(lo) - 0xDC00)
                    }
                    n => u32::from(n),
                };
                char::from_u32(code).expect("surrogates were paired")
            }
            _ => return Err("a valid escape"),
        };
        out.push(ch);
    }
    Ok(Cow::Owned(out))
}

fn hex4(digits: Option<&[u8]>) -> Option<u16> {
    let mut n = 0u16;
    for &d in digits? {
        n = n << 4 | (d as char).to_digit(16)? as u16;
    }
    Some(n)
}

/// A position in a document being checked, and what it collects on the way.
struct Cursor<'a, 'c> {
    b: &'a [u8],
    i: usize,
    /// Members whose string values are collected, and where they go.
    collect_name: &'c [u8],
    collect: Option<&'c mut Vec<(usize, usize)>>,
    /// The value about to be read is one to collect.
    collecting: bool,
}

impl Cursor<'_, '_> {
    /// The byte at the cursor, 0 past the end (0 is never valid where a token is expected).
    #[inline]
    fn peek(&self) -> u8 {
        self.b.get(self.i).copied().unwrap_or(0)
    }

    #[inline]
    fn ws(&mut self) {
        // Every whitespace byte is at most b' ': one comparison when there is none (the usual).
        while self.peek() <= b' ' {
            match self.peek() {
                b' ' | b'\n' | b'\r' | b'\t' => self.i += 1,
                _ => return,
            }
        }
    }

    /// Whether the value of a member named `name` (as written; `escaped` when it has escapes, which
    /// are then decoded before comparing) is one to collect. Length and first byte are compared
    /// before the bytes, which spares most names a `memcmp`.
    #[inline(always)]
    fn collects(&self, name: &[u8], escaped: bool) -> bool {
        let want = self.collect_name;
        if escaped {
            return self.collect.is_some() && decoded_is(name, want);
        }
        self.collect.is_some()
            && name.len() == want.len()
            && name.first() == want.first()
            && name == want
    }

    #[cold]
    fn syntax(&self, what: &'static str) -> ScanError {
        ScanError::Syntax { what, at: self.i }
    }

    /// One value of any kind, the cursor on its first byte; `depth` is how deeply the place it
    /// stands in is nested. Containers are walked with a stack of bits, not recursion.
    fn value(&mut self, depth: usize) -> Result<(), ScanError> {
        // Bit k: whether the container opened k levels below `depth` is an object.
        let mut objects: u128 = 0;
        let mut open = 0usize;
        'value: loop {
            match self.peek() {
                b'"' => {
                    let start = self.i;
                    self.string()?;
                    if self.collecting {
                        if let Some(v) = self.collect.as_deref_mut() {
                            v.push((start, self.i));
                        }
                    }
                }
                c @ (b'{' | b'[') => {
                    self.collecting = false;
                    if depth + open >= MAX_DEPTH {
                        return Err(ScanError::TooDeep);
                    }
                    let object = c == b'{';
                    objects = objects & !(1 << open) | (object as u128) << open;
                    open += 1;
                    self.i += 1;
                    self.ws();
                    let close = if object { b'}' } else { b']' };
                    if self.peek() != close {
                        if object {
                            self.member_name()?;
                        }
                        continue 'value;
                    }
                    self.i += 1;
                    open -= 1;
                }
                b't' => self.literal(b"true")?,
                b'f' => self.literal(b"false")?,
                b'n' => self.literal(b"null")?,
                b'-' | b'0'..=b'9' => self.number()?,
                _ => return Err(self.syntax("a value")),
            }
            self.collecting = false;
            // After a complete value: close what ends here, or go on to the next element.
            while open > 0 {
                self.ws();
                let object = objects >> (open - 1) & 1 == 1;
                match (self.peek(), object) {
                    (b',', _) => {
                        self.i += 1;
                        self.ws();
                        if object {
                            self.member_name()?;
                        }
                        continue 'value;
                    }
                    (b'}', true) | (b']', false) => {
                        self.i += 1;
                        open -= 1;
                    }
                    (_, true) => return Err(self.syntax("`,` or `}`")),
                    (_, false) => return Err(self.syntax("`,` or `]`")),
                }
            }
            return Ok(());
        }
    }

    /// A member name and its colon inside a nested object, leaving the cursor on the value.
    #[inline(always)]
    fn member_name(&mut self) -> Result<(), ScanError> {
        if self.peek() != b'"' {
            return Err(self.syntax("a member name"));
        }
        let start = self.i + 1;
        let escaped = self.string()?;
        self.collecting = self.collects(&self.b[start..self.i - 1], escaped);
        self.ws();
        if self.peek() != b':' {
            return Err(self.syntax("`:`"));
        }
        self.i += 1;
        self.ws();
        Ok(())
    }

    /// A string literal, the cursor on its opening quote; returns whether it has escapes. Runs of
    /// plain bytes are skipped eight at a time.
    #[inline(always)]
    fn string(&mut self) -> Result<bool, ScanError> {
        let b = self.b;
        let mut i = self.i + 1;
        let mut escaped = false;
        loop {
            while let Some(w) = b.get(i..i + 8) {
                let w = u64::from_le_bytes(w.try_into().expect("eight bytes"));
                let special = special_bytes(w);
                if special != 0 {
                    i += special.trailing_zeros() as usize / 8;
                    break;
                }
                i += 8;
            }
            match b.get(i) {
                Some(b'"') => {
                    self.i = i + 1;
                    return Ok(escaped);
                }
                Some(b'\\') => {
                    escaped = true;
                    match b.get(i + 1) {
                        Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => i += 2,
                        Some(b'u') => {
                            if hex4(b.get(i + 2..i + 6)).is_none() {
                                self.i = i;
                                return Err(self.syntax("four hex digits after \\u"));
                            }
                            i += 6;
                        }
                        _ => {
                            self.i = i;
                            return Err(self.syntax("a valid escape"));
                        }
                    }
                }
                Some(c) if *c < 0x20 => {
                    self.i = i;
                    return Err(self.syntax("no control character in a string"));
                }
                Some(_) => i += 1,
                None => {
                    self.i = i;
                    return Err(self.syntax("the end of a string"));
                }
            }
        }
    }

    fn literal(&mut self, word: &[u8]) -> Result<(), ScanError> {
        if self.b.get(self.i..self.i + word.len()) != Some(word) {
            return Err(self.syntax("`true`, `false` or `null`"));
        }
        self.i += word.len();
        Ok(())
    }

    fn number(&mut self) -> Result<(), ScanError> {
        let digit = |c: Option<&u8>| matches!(c, Some(b'0'..=b'9'));
        let b = self.b;
        let mut i = self.i;
        if b.get(i) == Some(&b'-') {
            i += 1;
        }
        match b.get(i) {
            Some(b'0') => {
                i += 1;
                if digit(b.get(i)) {
                    self.i = i;
                    return Err(self.syntax("no leading zero in a number"));
                }
            }
            Some(b'1'..=b'9') => {
                while digit(b.get(i)) {
                    i += 1;
                }
            }
            _ => {
                self.i = i;
                return Err(self.syntax("a digit"));
            }
        }
        if b.get(i) == Some(&b'.') {
            i += 1;
            if !digit(b.get(i)) {
                self.i = i;
                return Err(self.syntax("a digit after the decimal point"));
            }
            while digit(b.get(i)) {
                i += 1;
            }
        }
        if let Some(b'e' | b'E') = b.get(i) {
            i += 1;
            if let Some(b'+' | b'-') = b.get(i) {
                i += 1;
            }
            if !digit(b.get(i)) {
                self.i = i;
                return Err(self.syntax("a digit in the exponent"));
            }
            while digit(b.get(i)) {
                i += 1;
            }
        }
        self.i = i;
        Ok(())
    }
}

/// Copies `data` to `out` with each of `spans` (ascending, not overlapping) replaced by `to`.
pub fn copy_replacing(out: &mut BytesMut, data: &[u8], spans: &[(usize, usize)], to: &[u8]) {
    let mut pos = 0;
    for &(s, e) in spans {
        out.extend_from_slice(&data[pos..s]);
        out.extend_from_slice(to);
        pos = e;
    }
    out.extend_from_slice(&data[pos..]);
}

/// End (exclusive) of the JSON string literal starting at `start`, if one starts there. Most
/// strings are short (keys, ids): the first 32 bytes are searched eight at a time, the rest of a
/// long one with memchr's vector search.
pub fn string_end(data: &[u8], start: usize) -> Option<usize> {
    string_end_escaped(data, start).map(|(end, _)| end)
}

/// [`string_end`], and whether the literal has an escape (a backslash) in it.
#[inline]
fn string_end_escaped(data: &[u8], start: usize) -> Option<(usize, bool)> {
    if data.get(start) != Some(&b'"') {
        return None;
    }
    let mut escaped = false;
    let mut i = start + 1;
    let short_until = i + 32;
    loop {
        if i < short_until {
            while let Some(w) = data.get(i..i + 8) {
                let w = u64::from_le_bytes(w.try_into().expect("eight bytes"));
                let hit = has_byte(w, b'"') | has_byte(w, b'\\');
                if hit != 0 {
                    i += hit.trailing_zeros() as usize / 8;
                    break;
                }
                i += 8;
            }
        } else {
            i += memchr::memchr2(b'"', b'\\', data.get(i..)?)?;
        }
        match *data.get(i)? {
            b'"' => return Some((i + 1, escaped)),
            b'\\' => {
                escaped = true;
                i += 2;
            }
            _ => i += 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where serde finds a top-level member (the implementation `find_members` replaced).
    fn serde_span(body: &[u8], key: &str) -> Option<(usize, usize)> {
        let v: std::collections::BTreeMap<String, &serde_json::value::RawValue> =
            serde_json::from_slice(body).ok()?;
        let raw = v.get(key)?.get();
        let start = raw.as_ptr() as usize - body.as_ptr() as usize;
        Some((start, start + raw.len()))
    }

    #[test]
    fn finds_top_level_members_where_serde_does() {
        let bodies = [
            r#"{"id":"x","model":"up-1","choices":[{"message":{"model":"inner","content":"\"model\":\"no\""}}],"usage":{"prompt_tokens":1}}"#,
            r#" { "usage" : {"a":[1,{"b":"}"}]} , "model" : "m" } "#,
            r#"{"model":null,"n":-1.5e3,"t":true,"usage":[]}"#,
            r#"{"x":{"model":"deep"},"y":["model"]}"#,
            r#"{}"#,
            r#"{"id":"x","mod\u0065l":"escaped","usage":{"prompt_tokens":1}}"#,
        ];
        for b in bodies {
            let b = b.as_bytes();
            let [model, usage] = find_members(b, ["model", "usage"]).unwrap();
            assert_eq!(
                model,
                serde_span(b, "model"),
                "{}",
                String::from_utf8_lossy(b)
            );
            assert_eq!(
                usage,
                serde_span(b, "usage"),
                "{}",
                String::from_utf8_lossy(b)
            );
        }
        assert_eq!(find_members(b"[1]", ["model"]), None);
        assert_eq!(find_members(b"", ["model"]), None);
        // Broken answers: whatever was found before the break, never a range outside the body.
        for cut in 0..bodies[0].len() {
            let b = &bodies[0].as_bytes()[..cut];
            if let Some(found) = find_members(b, ["model", "usage"]) {
                for (s, e) in found.into_iter().flatten() {
                    assert!(s <= e && e <= b.len());
                }
            }
        }
    }

    #[test]
    fn collects_model_strings_at_any_depth_and_renames_them() {
        let data = br#"{"message":{"model": "up-2024","x":{"model":"o\"q","t":"say \"model\":\"x\""}},"model":"up","n":{"model":3},"a":{"model":["s"]},"mod\u0065l":"esc"}"#;
        let mut spans = Vec::new();
        let [error] = scan_object_collecting(data, ["error"], Some(("model", &mut spans))).unwrap();
        assert_eq!(error, None);
        let mut out = BytesMut::new();
        copy_replacing(&mut out, data, &spans, br#""alias""#);
        assert_eq!(
            std::str::from_utf8(&out).unwrap(),
            r#"{"message":{"model": "alias","x":{"model":"alias","t":"say \"model\":\"x\""}},"model":"alias","n":{"model":3},"a":{"model":["s"]},"mod\u0065l":"alias"}"#
        );
    }
}
