//! A native chat stream's usage: OpenAI Chat Completions streams report token usage only when the
//! request asks (`stream_options.include_usage`), in one last chunk with no choices. The gateway
//! always asks, so that every request's tokens are known at its end, and drops that chunk again
//! when the client did not ask ([`is_usage_chunk`], called by [`super::native::NativeStream`]).
//!
//! The request is edited without a parse ([`ask_usage`]): the body head ([`super::body_head`])
//! notes where the `stream_options` value is; when there is none (the common case), the member is
//! spliced in after the model's value, with the model's own replacement.

use crate::json;

/// What a native chat stream request needs so that its upstream reports usage.
#[derive(Debug, PartialEq, Eq)]
pub enum AskUsage {
    /// The client asked for usage itself: the body goes as it is and the usage chunk reaches it.
    Asked,
    /// No `stream_options`: the member `,"stream_options":{"include_usage":true}` is spliced in
    /// after the model's value.
    Insert,
    /// `stream_options` without `include_usage: true`: the bytes at the span (start, end) are
    /// replaced by the slice.
    Edit((usize, usize), &'static [u8]),
    /// A `stream_options` that is not an object (the upstream refuses it): left as it is.
    Leave,
}

/// The member spliced in after the model's value ([`AskUsage::Insert`]).
pub const INSERTED: &[u8] = b",\"stream_options\":{\"include_usage\":true}";

/// Whether and how the body must be edited to ask for usage; `stream_options` is the span of its
/// value in `body` (from the body head, which validated the body).
pub fn ask_usage(body: &[u8], stream_options: Option<(usize, usize)>) -> AskUsage {
    let Some((s, e)) = stream_options else {
        return AskUsage::Insert;
    };
    let value = &body[s..e];
    match value.first() {
        Some(b'n') => AskUsage::Edit((s, e), b"{\"include_usage\":true}"),
        Some(b'{') => match json::scan_object(value, ["include_usage"]) {
            Ok([Some((a, b))]) if &value[a..b] == b"true" => AskUsage::Asked,
            Ok([Some((a, b))]) => AskUsage::Edit((s + a, s + b), b"true"),
            Ok([None])
                if value[1..value.len() - 1]
                    .iter()
                    .all(u8::is_ascii_whitespace) =>
            {
                AskUsage::Edit((s, e), b"{\"include_usage\":true}")
            }
            Ok([None]) => AskUsage::Edit((s + 1, s + 1), b"\"include_usage\":true,"),
            Err(_) => AskUsage::Leave,
        },
        _ => AskUsage::Leave,
    }
}

/// Whether a chat stream frame is the usage chunk the gateway asked for: a `usage` object and an
/// empty `choices` list. A frame with choices keeps its usage (some upstreams put it on the last
/// content chunk); `"usage":null` on every chunk is left too (the SDKs read it as absent). For a
/// frame that is not JSON: [`super::native::NativeStream`] asks this only of a frame its check
/// refused (a usage chunk is dropped unchecked, as it always was), and [`is_checked_usage_chunk`]
/// of the others.
pub fn is_usage_chunk(data: &[u8]) -> bool {
    json::usage::has_usage_object(data)
        && match json::find_members(data, ["choices"]) {
            Some([choices]) => is_empty_list(data, choices),
            None => false,
        }
}

/// [`is_usage_chunk`] of a frame the native stream's check read: `choices` is the span of its
/// first top-level `choices` member, which that one pass found (on a valid frame the same member
/// [`json::find_members`] finds). The empty list is tested first, so the usage key is searched
/// for only in a frame with no choices (the usage chunk itself), not in every content chunk.
pub fn is_checked_usage_chunk(data: &[u8], choices: Option<(usize, usize)>) -> bool {
    is_empty_list(data, choices) && json::usage::has_usage_object(data)
}

/// Whether the value at `span` is `[]`, whitespace allowed inside.
fn is_empty_list(data: &[u8], span: Option<(usize, usize)>) -> bool {
    let Some((a, b)) = span else {
        return false;
    };
    let v = &data[a..b];
    v.len() >= 2 && v[0] == b'[' && v[1..v.len() - 1].iter().all(u8::is_ascii_whitespace)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn apply(body: &str) -> Option<String> {
        let head = crate::dialect::body_head::parse_body_head(body.as_bytes()).unwrap();
        let (ms, me) = head.model_span;
        let m = |out: &mut Vec<u8>| out.extend_from_slice(b"\"up\"");
        let mut out = Vec::new();
        match ask_usage(body.as_bytes(), head.stream_options) {
            AskUsage::Asked | AskUsage::Leave => return None,
            AskUsage::Insert => {
                out.extend_from_slice(&body.as_bytes()[..ms]);
                m(&mut out);
                out.extend_from_slice(INSERTED);
                out.extend_from_slice(&body.as_bytes()[me..]);
            }
            AskUsage::Edit((s, e), with) => {
                // Either side of the model.
                let b = body.as_bytes();
                if s > me {
                    out.extend_from_slice(&b[..ms]);
                    m(&mut out);
                    out.extend_from_slice(&b[me..s]);
                    out.extend_from_slice(with);
                    out.extend_from_slice(&b[e..]);
                } else {
                    out.extend_from_slice(&b[..s]);
                    out.extend_from_slice(with);
                    out.extend_from_slice(&b[e..ms]);
                    m(&mut out);
                    out.extend_from_slice(&b[me..]);
                }
            }
        }
        Some(String::from_utf8(out).unwrap())
    }

    fn include_usage(body: &str) -> serde_json::Value {
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["model"], "up");
        v["stream_options"]["include_usage"].clone()
    }

    #[test]
    fn every_form_of_stream_options_ends_asking_for_usage() {
        let t = serde_json::Value::Bool(true);
        for body in [
            r#"{"model":"m","stream":true,"messages":[]}"#,
            r#"{"stream_options":null,"model":"m","stream":true}"#,
            r#"{"model":"m","stream_options":{},"stream":true}"#,
            r#"{"model":"m","stream_options":{ },"stream":true}"#,
            r#"{"model":"m","stream_options":{"include_usage":false}}"#,
            r#"{"stream_options":{"include_usage":null,"include_obfuscation":false},"model":"m"}"#,
            r#"{"model":"m","stream_options":{"include_obfuscation":false}}"#,
        ] {
            let out = apply(body).unwrap_or_else(|| panic!("{body}"));
            assert_eq!(include_usage(&out), t, "{body} -> {out}");
            if body.contains("obfuscation") {
                let v: serde_json::Value = serde_json::from_str(&out).unwrap();
                assert_eq!(v["stream_options"]["include_obfuscation"], false);
            }
        }
        assert_eq!(
            apply(r#"{"model":"m","stream_options":{"include_usage":true}}"#),
            None
        );
        let body = br#"{"model":"m","stream_options":{"include_usage":true}}"#;
        let h = crate::dialect::body_head::parse_body_head(body).unwrap();
        assert_eq!(ask_usage(body, h.stream_options), AskUsage::Asked);
        let body = br#"{"model":"m","stream_options":3}"#;
        let h = crate::dialect::body_head::parse_body_head(body).unwrap();
        assert_eq!(ask_usage(body, h.stream_options), AskUsage::Leave);
    }

    #[test]
    fn only_the_usage_chunk_is_dropped() {
        assert!(is_usage_chunk(
            br#"{"id":"c","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2}}"#
        ));
        assert!(is_usage_chunk(
            br#"{"id":"c","choices":[ ],"usage":{"prompt_tokens":1}}"#
        ));
        assert!(!is_usage_chunk(
            br#"{"id":"c","choices":[{"delta":{}}],"usage":{"prompt_tokens":1}}"#
        ));
        assert!(!is_usage_chunk(
            br#"{"id":"c","choices":[{"delta":{"content":"x"}}],"usage":null}"#
        ));
        assert!(!is_usage_chunk(br#"{"id":"c","choices":[]}"#));
    }
}
