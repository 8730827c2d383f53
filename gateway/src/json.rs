//! Byte-level JSON helpers for the hot paths: locate or rename a `model` value without a DOM, and
//! write strings and integers without `fmt`. Knows nothing of dialects or errors.

use bytes::{BufMut, BytesMut};
use serde::Deserialize;
use serde_json::value::RawValue;

/// Top-level `model` of a response body, located the same way.
#[cfg_attr(feature = "bench-dom-native", allow(dead_code))]
pub fn find_model_span(body: &[u8]) -> Option<(usize, usize)> {
    #[derive(Deserialize)]
    struct M<'a> {
        #[serde(borrow)]
        model: Option<&'a RawValue>,
    }
    let m: M = serde_json::from_slice(body).ok()?;
    let raw = m.model?;
    let start = raw.get().as_ptr() as usize - body.as_ptr() as usize;
    Some((start, start + raw.get().len()))
}

/// Replaces the string value of every `"model":` key (optionally one space after the colon) by
/// `to` while copying `data` to `out`. Used on native streams, where the model name can sit at
/// any depth (`message.model`, `response.model`) and parsing each frame would cost more than the
/// search. Text inside JSON strings cannot match: its quotes are escaped. Any value is replaced,
/// not only the configured upstream name, because upstreams answer with dated snapshot names.
pub fn copy_renaming_model(
    out: &mut BytesMut,
    data: &[u8],
    finder: &memchr::memmem::Finder<'_>,
    to: &[u8],
) {
    let mut pos = 0;
    while let Some(off) = finder.find(&data[pos..]) {
        let key_end = pos + off + b"\"model\":".len();
        let mut v = key_end;
        if data.get(v) == Some(&b' ') {
            v += 1;
        }
        match string_end(data, v) {
            Some(end) => {
                out.extend_from_slice(&data[pos..v]);
                out.extend_from_slice(to);
                pos = end;
            }
            None => {
                out.extend_from_slice(&data[pos..key_end]);
                pos = key_end;
            }
        }
    }
    out.extend_from_slice(&data[pos..]);
}

/// End (exclusive) of the JSON string literal starting at `start`, if one starts there.
fn string_end(data: &[u8], start: usize) -> Option<usize> {
    if data.get(start) != Some(&b'"') {
        return None;
    }
    let mut i = start + 1;
    while let Some(off) = memchr::memchr2(b'"', b'\\', &data[i..]) {
        let p = i + off;
        if data[p] == b'"' {
            return Some(p + 1);
        }
        i = p + 2;
        if i > data.len() {
            return None;
        }
    }
    None
}

/// Appends `s` as a JSON string literal. Stream encoders write their frames with this and a few
/// constant pieces instead of building a `serde_json::Value` per frame.
pub fn write_str(out: &mut impl BufMut, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let b = s.as_bytes();
    out.put_slice(b"\"");
    let mut start = 0;
    for (i, &c) in b.iter().enumerate() {
        let esc: &[u8] = match c {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0..=0x1f => b"",
            _ => continue,
        };
        out.put_slice(&b[start..i]);
        if esc.is_empty() {
            out.put_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[(c >> 4) as usize],
                HEX[(c & 15) as usize],
            ]);
        } else {
            out.put_slice(esc);
        }
        start = i + 1;
    }
    out.put_slice(&b[start..]);
    out.put_slice(b"\"");
}

/// Appends a decimal integer (no `fmt` machinery: hot paths write several per request).
pub fn write_u64(out: &mut impl BufMut, n: u64) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    let mut n = n;
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.put_slice(&buf[i..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_json_strings_like_serde() {
        for s in ["", "plain", "q\"b\\s\n\r\t\u{1}\u{1f}", "é😀", "</script>"] {
            let mut out = BytesMut::new();
            write_str(&mut out, s);
            assert_eq!(
                std::str::from_utf8(&out).unwrap(),
                serde_json::to_string(s).unwrap()
            );
        }
        let mut out = BytesMut::new();
        for n in [0, 7, 10, 1234567890123, u64::MAX] {
            out.clear();
            write_u64(&mut out, n);
            assert_eq!(&out[..], n.to_string().as_bytes());
        }
    }

    #[test]
    fn renames_model_in_stream_frames() {
        let f = memchr::memmem::Finder::new(b"\"model\":");
        let mut out = BytesMut::new();
        copy_renaming_model(
            &mut out,
            br#"{"message":{"model": "up-2024","x":{"model":"o\"q","t":"say \"model\":\"x\""}},"model":"up","n":{"model":3}}"#,
            &f,
            br#""alias""#,
        );
        assert_eq!(
            std::str::from_utf8(&out).unwrap(),
            r#"{"message":{"model": "alias","x":{"model":"alias","t":"say \"model\":\"x\""}},"model":"alias","n":{"model":3}}"#
        );
    }
}
