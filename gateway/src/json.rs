//! The few things the native route needs from a body, found without building a DOM: the `model`
//! and `stream` fields and where the model's value sits, so that it can be replaced in place.

use std::borrow::Cow;

use bytes::{BufMut, BytesMut};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::error::GwError;

/// What routing needs from a request. Unknown fields are skipped by serde (validated, not kept),
/// so a syntactically broken body is still rejected with 400 here. Duplicate `model` or `stream`
/// keys are rejected by serde's derive as well.
#[derive(Deserialize)]
struct RawHead<'a> {
    #[serde(borrow)]
    model: Option<&'a RawValue>,
    #[serde(default)]
    stream: Option<bool>,
}

pub struct Head<'a> {
    pub model: Cow<'a, str>,
    pub stream: bool,
    /// Byte range of the model's JSON string literal within the body.
    pub model_span: (usize, usize),
}

/// serde_json's recursion limit, which the translated routes hit when they parse a body.
const MAX_DEPTH: usize = 128;

/// Rejects nesting deeper than the translated routes accept, so that the native route, which
/// never parses the nested parts, does not forward what the others would refuse.
fn check_depth(body: &[u8]) -> Result<(), GwError> {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for &b in body {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > MAX_DEPTH {
                    return Err(GwError::bad_request(format!(
                        "request body nests deeper than {MAX_DEPTH} levels"
                    )));
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

pub fn parse_head(body: &[u8]) -> Result<Head<'_>, GwError> {
    // serde_json skips the fields it ignores without checking their UTF-8, and the native route
    // forwards those bytes as they are: validate the whole body once (an ASCII fast path).
    let text = std::str::from_utf8(body).map_err(|e| {
        GwError::bad_request(format!(
            "request body is not valid UTF-8 (at byte {})",
            e.valid_up_to()
        ))
    })?;
    check_depth(body)?;
    let raw: RawHead = serde_json::from_str(text)
        .map_err(|e| GwError::bad_request(format!("invalid JSON body: {e}")))?;
    let model_raw = raw.model.ok_or_else(|| {
        let mut e = GwError::bad_request("missing required field `model`");
        e.param = Some("model");
        e
    })?;
    let model: Cow<str> = serde_json::from_str(model_raw.get()).map_err(|_| {
        let mut e = GwError::bad_request("`model` must be a string");
        e.param = Some("model");
        e
    })?;
    let start = model_raw.get().as_ptr() as usize - body.as_ptr() as usize;
    let end = start + model_raw.get().len();
    Ok(Head {
        model,
        stream: raw.stream.unwrap_or(false),
        model_span: (start, end),
    })
}

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
    fn head_finds_model_span() {
        let b = br#"{"messages":[{"role":"user","content":"x"}], "model" : "gpt\u0041", "stream":true}"#;
        let h = parse_head(b).unwrap();
        assert_eq!(h.model, "gptA");
        assert!(h.stream);
        assert_eq!(&b[h.model_span.0..h.model_span.1], br#""gpt\u0041""#);
    }

    #[test]
    fn head_rejects_bad_input() {
        assert_eq!(parse_head(b"{").err().unwrap().status, 400);
        assert_eq!(parse_head(b"[]").err().unwrap().status, 400);
        assert_eq!(parse_head(br#"{"model":1}"#).err().unwrap().status, 400);
        assert_eq!(parse_head(br#"{"x":1}"#).err().unwrap().status, 400);
        assert_eq!(
            parse_head(br#"{"model":"a","model":"b"}"#)
                .err()
                .unwrap()
                .status,
            400
        );
    }

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
