//! JSON string literals: where one ends (with or without an escape in it), whether it is plain
//! (its bytes at once its text and its escaped form), its text with the escapes decoded, and the
//! comparisons of a stream's frames that find the one literal two frames differ in.

use std::borrow::Cow;

use super::swar::{has_byte, special_bytes};

/// Whether a member name written with escapes (`raw`, between its quotes) decodes to `want`.
#[cold]
pub(super) fn decoded_is(raw: &[u8], want: &[u8]) -> bool {
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

pub(super) fn hex4(digits: Option<&[u8]>) -> Option<u16> {
    let mut n = 0u16;
    for &d in digits? {
        n = n << 4 | (d as char).to_digit(16)? as u16;
    }
    Some(n)
}

/// End (exclusive) of the JSON string literal starting at `start`, if one starts there. Most
/// strings are short (keys, ids): the first 32 bytes are searched eight at a time, the rest of a
/// long one with memchr's vector search.
pub fn string_end(data: &[u8], start: usize) -> Option<usize> {
    string_end_escaped(data, start).map(|(end, _)| end)
}

/// Whether `c` is whitespace as JSON allows it between tokens (space, tab, line feed, carriage
/// return; not form feed, which `u8::is_ascii_whitespace` also counts).
#[inline]
pub fn is_ws(c: u8) -> bool {
    matches!(c, b' ' | b'\n' | b'\r' | b'\t')
}

/// The string literal at `start` of `frame`, when `frame` is `kept` but for another literal in the
/// place of the one `kept` has at `start`: the bytes before `start` and the last `after` bytes of
/// both are the same (what lies between the new literal's end and those last bytes is the
/// caller's to check). Its end and text as [`plain_str`] gives them. A stream's frames differ
/// from each other mostly in one string (a delta's text), so a frame is compared with the last
/// one read whole instead of scanned: the bridged streams' readers (`decode::fast::Template`) and
/// the native stream's copy (`dialect/native/repeat.rs`) both do it.
pub fn literal_in_place<'a>(
    kept: &[u8],
    start: usize,
    after: usize,
    frame: &'a [u8],
) -> Option<(usize, Option<&'a str>)> {
    if kept.len() < start + after || frame.len() < start + after + 2 {
        return None;
    }
    if frame[..start] != kept[..start] || frame[frame.len() - after..] != kept[kept.len() - after..]
    {
        return None;
    }
    plain_str(frame, start)
}

/// The string literal starting at `start`, as a stream's deltas usually are: *plain*, with no
/// escape and no control character, so that its contents are at once its text and its escaped
/// form as [`write_str_body`] writes it. Its end, and its text when it is plain and UTF-8 (`None`
/// otherwise, and the literal ended by [`string_end`]). One walk eight bytes at a time finds the
/// end, the plainness and whether every byte is ASCII, which needs no UTF-8 check after.
pub fn plain_str(data: &[u8], start: usize) -> Option<(usize, Option<&str>)> {
    const HIGH: u64 = 0x8080_8080_8080_8080;
    if data.get(start) != Some(&b'"') {
        return None;
    }
    // The high bits of every byte walked: a superset of the contents (a word's bytes past the
    // closing quote too), so that zero means they are all ASCII.
    let mut high = 0u64;
    let mut i = start + 1;
    while let Some(w) = data.get(i..i + 8) {
        let w = u64::from_le_bytes(w.try_into().expect("eight bytes"));
        high |= w;
        let special = special_bytes(w);
        if special != 0 {
            i += special.trailing_zeros() as usize / 8;
            break;
        }
        i += 8;
    }
    loop {
        match *data.get(i)? {
            b'"' => break,
            b'\\' | 0..=0x1f => return string_end(data, start).map(|end| (end, None)),
            c => {
                high |= u64::from(c);
                i += 1;
            }
        }
    }
    let contents = &data[start + 1..i];
    let text = if high & HIGH == 0 {
        // SAFETY: every byte of `contents` was walked above with its high bit clear: ASCII,
        // which is UTF-8.
        Some(unsafe { std::str::from_utf8_unchecked(contents) })
    } else {
        std::str::from_utf8(contents).ok()
    };
    Some((i + 1, text))
}

/// The string literals of a document already checked to be JSON, in order, as their spans
/// (quotes included): outside a string a quote starts one, so each is found from the end of the
/// one before. Member names are among them.
pub fn literals(data: &[u8]) -> impl Iterator<Item = (usize, usize)> + '_ {
    let mut i = 0;
    std::iter::from_fn(move || {
        let start = i + memchr::memchr(b'"', data.get(i..)?)?;
        let end = string_end(data, start)?;
        i = end;
        Some((start, end))
    })
}

/// [`string_end`], and whether the literal has an escape (a backslash) in it.
#[inline]
pub(super) fn string_end_escaped(data: &[u8], start: usize) -> Option<(usize, bool)> {
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
