//! The native route's minimal parse: the few things routing needs from a request body (`model`,
//! `stream`, and where the model's value sits so that it can be replaced in place), found without
//! building a DOM. The whole body is still checked to be UTF-8 JSON of bounded depth, so the native
//! route refuses what the translated routes would.
//!
//! The *body's* head (its JSON members that routing reads), not the HTTP head (`serve/proxy.rs`).
//! [`parse_body_head`] is one pass of [`json::scan_object`]; `parse_body_head_with_serde` is the
//! same parse done by serde_json (the implementation it replaced), kept as the reference that the
//! unit tests and the `json_head` fuzz target compare it with, built only for them (`cfg(test)`
//! or the `serde-reference` feature).

use std::borrow::Cow;

#[cfg(any(test, feature = "serde-reference"))]
use serde::Deserialize;
#[cfg(any(test, feature = "serde-reference"))]
use serde_json::value::RawValue;

use crate::dialect::error::GwError;
use crate::json::{self, ScanError, MAX_DEPTH};

pub struct BodyHead<'a> {
    pub model: Cow<'a, str>,
    pub stream: bool,
    /// Byte range of the model's JSON string literal within the body.
    pub model_span: (usize, usize),
    /// Byte range of the `stream_options` value, if the body has one (`dialect/stream_usage.rs`
    /// reads it: the native chat stream asks its upstream for usage).
    pub stream_options: Option<(usize, usize)>,
    /// Byte ranges of the values of the output caps, `max_tokens`, `max_completion_tokens` and
    /// `max_output_tokens` (the first of each; not interpreted), which the spend budgets reserve
    /// for (`admission/spend.rs`): found by the scan that finds the model, at the cost of three
    /// more names to compare a member's with, rather than by another pass over the body.
    pub output_caps: OutputCaps,
}

/// Byte ranges of the values of `max_tokens`, `max_completion_tokens` and `max_output_tokens`, in
/// that order ([`BodyHead::output_caps`]).
pub type OutputCaps = [Option<(usize, usize)>; 3];

/// The top-level members the head parse locates: the three it reads (each at most once, as
/// serde reads a struct's fields) and the output caps (located: repeats are the upstream's to
/// judge, as serde ignores members it does not read).
const HEAD_KEYS: [&str; 6] = [
    "model",
    "stream",
    "stream_options",
    "max_tokens",
    "max_completion_tokens",
    "max_output_tokens",
];
const CAPS_REPEATABLE: u32 = 0b111_000;

fn not_utf8(e: std::str::Utf8Error) -> GwError {
    GwError::bad_request(format!(
        "request body is not valid UTF-8 (at byte {})",
        e.valid_up_to()
    ))
}

fn model_error(message: &str) -> GwError {
    let mut e = GwError::bad_request(message);
    e.param = Some("model");
    e
}

pub fn parse_body_head(body: &[u8]) -> Result<BodyHead<'_>, GwError> {
    // The scan skips the bytes of strings it does not decode, and the native route forwards them
    // as they are: validate the whole body once (std's ASCII fast path).
    let text = std::str::from_utf8(body).map_err(not_utf8)?;
    let [model, stream, stream_options, caps @ ..] =
        json::scan_object_locating(body, HEAD_KEYS, CAPS_REPEATABLE).map_err(|e| match e {
            ScanError::Syntax { what, at } => {
                GwError::bad_request(format!("invalid JSON body: expected {what} at byte {at}"))
            }
            ScanError::TooDeep => {
                GwError::bad_request(format!("request body nests deeper than {MAX_DEPTH} levels"))
            }
            ScanError::Duplicate(0) => {
                GwError::bad_request("invalid JSON body: duplicate field `model`")
            }
            ScanError::Duplicate(1) => {
                GwError::bad_request("invalid JSON body: duplicate field `stream`")
            }
            // 2: the output caps (3..) may repeat.
            ScanError::Duplicate(_) => {
                GwError::bad_request("invalid JSON body: duplicate field `stream_options`")
            }
        })?;
    let stream = match stream.map(|(s, e)| &body[s..e]) {
        None | Some(b"null") | Some(b"false") => false,
        Some(b"true") => true,
        Some(_) => {
            return Err(GwError::bad_request(
                "invalid JSON body: `stream` must be a boolean",
            ))
        }
    };
    let (start, end) = match model {
        Some((s, e)) if &body[s..e] != b"null" => (s, e),
        _ => return Err(model_error("missing required field `model`")),
    };
    if body[start] != b'"' {
        return Err(model_error("`model` must be a string"));
    }
    // The body is UTF-8 (checked above), so a model without escapes is its own text.
    let raw = &text[start + 1..end - 1];
    let model = if raw.bytes().any(|b| b == b'\\') {
        json::decode_str(raw.as_bytes()).map_err(|_| model_error("`model` must be a string"))?
    } else {
        Cow::Borrowed(raw)
    };
    Ok(BodyHead {
        model,
        stream,
        model_span: (start, end),
        stream_options,
        output_caps: caps,
    })
}

/// What [`parse_body_head_with_serde`] deserializes: unknown fields are skipped by serde (validated,
/// not kept); duplicate `model` or `stream` keys are rejected by serde's derive.
#[cfg(any(test, feature = "serde-reference"))]
#[derive(Deserialize)]
struct RawHead<'a> {
    #[serde(borrow)]
    model: Option<&'a RawValue>,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(borrow, default)]
    stream_options: Option<&'a RawValue>,
}

/// Rejects nesting deeper than the translated routes accept (serde_json skips ignored values
/// without its recursion limit).
#[cfg(any(test, feature = "serde-reference"))]
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

/// The reference parse: the same result by serde_json, which accepts a JSON array for the struct
/// where [`parse_body_head`] refuses anything but an object (a body that is not an object is a 400 on
/// every route now: an array's model element cannot be renamed by key). Kept for the tests and the
/// `json_head` fuzz target, which compare the two; not in the release binary (the fuzz crate
/// turns on the `serde-reference` feature).
#[cfg(any(test, feature = "serde-reference"))]
pub fn parse_body_head_with_serde(body: &[u8]) -> Result<BodyHead<'_>, GwError> {
    let text = std::str::from_utf8(body).map_err(not_utf8)?;
    check_depth(body)?;
    let raw: RawHead = serde_json::from_str(text)
        .map_err(|e| GwError::bad_request(format!("invalid JSON body: {e}")))?;
    let model_raw = raw
        .model
        .ok_or_else(|| model_error("missing required field `model`"))?;
    let model: Cow<str> = serde_json::from_str(model_raw.get())
        .map_err(|_| model_error("`model` must be a string"))?;
    let start = model_raw.get().as_ptr() as usize - body.as_ptr() as usize;
    let end = start + model_raw.get().len();
    let stream_options = raw.stream_options.map(|v| {
        let s = v.get().as_ptr() as usize - body.as_ptr() as usize;
        (s, s + v.get().len())
    });
    Ok(BodyHead {
        model,
        stream: raw.stream.unwrap_or(false),
        model_span: (start, end),
        stream_options,
        // Not compared: the reference reads the members routing reads.
        output_caps: [None; 3],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_finds_model_span() {
        let b = br#"{"messages":[{"role":"user","content":"x"}], "model" : "gpt\u0041", "stream":true}"#;
        let h = parse_body_head(b).unwrap();
        assert_eq!(h.model, "gptA");
        assert!(h.stream);
        assert_eq!(&b[h.model_span.0..h.model_span.1], br#""gpt\u0041""#);
    }

    #[test]
    fn head_locates_the_output_caps_at_the_top_level() {
        let b = br#"{"tools":[{"max_tokens":1}],"model":"m","max_tokens":16,"max_output_tokens":null,"max_tokens":9}"#;
        let h = parse_body_head(b).unwrap();
        let text = |s: Option<(usize, usize)>| s.map(|(s, e)| &b[s..e]);
        assert_eq!(
            text(h.output_caps[0]),
            Some(&b"16"[..]),
            "the first, at the top"
        );
        assert_eq!(text(h.output_caps[1]), None);
        assert_eq!(text(h.output_caps[2]), Some(&b"null"[..]));
        let e = parse_body_head(br#"{"model":"m","stream":true,"stream":false}"#)
            .err()
            .unwrap();
        assert!(
            e.message.contains("duplicate field `stream`"),
            "{}",
            e.message
        );
    }

    /// Same verdict as serde, and the same model, stream flag and span when both accept. A body
    /// serde reads as a struct-from-array is the one intended difference.
    fn agrees_with_serde(body: &[u8]) -> bool {
        let ours = parse_body_head(body);
        let theirs = parse_body_head_with_serde(body);
        let top_is_array = body.iter().find(|c| !c.is_ascii_whitespace()) == Some(&b'[');
        match (&ours, &theirs) {
            (Ok(a), Ok(b)) => {
                assert_eq!(
                    (&a.model, a.stream, a.model_span),
                    (&b.model, b.stream, b.model_span),
                    "{:?}",
                    String::from_utf8_lossy(body)
                );
            }
            (Err(_), Err(_)) => {}
            (Err(_), Ok(_)) if top_is_array => {}
            _ => panic!(
                "scanner {:?} vs serde {:?} on {:?}",
                ours.as_ref()
                    .map(|h| h.model.clone())
                    .map_err(|e| e.message.clone()),
                theirs
                    .as_ref()
                    .map(|h| h.model.clone())
                    .map_err(|e| e.message.clone()),
                String::from_utf8_lossy(body)
            ),
        }
        ours.is_ok()
    }

    #[test]
    fn scanner_agrees_with_serde_on_edge_cases() {
        let deep = |n: usize| format!(r#"{{"model":"m","x":{}{}}}"#, "[".repeat(n), "]".repeat(n));
        let texts = [
            r#"{"model":"m"}"#,
            r#" {"model" : "m" , "stream" : true } "#,
            r#"{"model":"m","stream":false}"#,
            r#"{"model":"m","stream":null}"#,
            r#"{"model":"m","stream":"true"}"#,
            r#"{"model":"m","stream":1}"#,
            r#"{"model":"m","stream":true,"stream":true}"#,
            r#"{"model":"m","stream":null,"stream":null}"#,
            r#"{"model":null}"#,
            r#"{"model":null,"model":"m"}"#,
            r#"{"model":"a","model":"b"}"#,
            r#"{"mod\u0065l":"a","model":"b"}"#,
            r#"{"mod\u0065l":"a"}"#,
            r#"{"\u006dodel":"a","stre\u0061m":true}"#,
            r#"{"model":"\ud83d\ude00"}"#,
            r#"{"model":"\ud83d"}"#,
            r#"{"model":"\ude00"}"#,
            r#"{"model":"\ud83dx"}"#,
            r#"{"model":"\ud83d\u0041"}"#,
            r#"{"model":"\ud83d\n"}"#,
            r#"{"x\ud800":1,"model":"m"}"#,
            r#"{"x":"\ud800","model":"m"}"#,
            r#"{"x":{"\ud800":1},"model":"m"}"#,
            r#"{"model":"a\"b\\c\/d\b\f\n\r\t"}"#,
            r#"{"model":"bad \x escape"}"#,
            r#"{"model":"bad \u12 escape"}"#,
            r#"{"model":"bad \u12g4 escape"}"#,
            "{\"model\":\"tab\tinside\"}",
            "{\"model\":\"nl\ninside\"}",
            "{\"model\":\"m\",\"x\":\"\u{1f}\"}",
            "{\"model\":\"m\",\"x\":\"\u{7f}\"}",
            "{\"model\":\"m\",\"x\":\"caf\u{e9} \u{1F600}\"}",
            r#"{"model":1}"#,
            r#"{"model":[]}"#,
            r#"{"model":{"a":1}}"#,
            r#"{"model":true}"#,
            r#"{"x":1}"#,
            r#"{}"#,
            r#"{"model":"m",}"#,
            r#"{"model":"m""x":1}"#,
            r#"{"model" "m"}"#,
            r#"{model:"m"}"#,
            r#"{"model":"m"} x"#,
            r#"{"model":"m"}{}"#,
            r#"{"model":"m"}   "#,
            "{\"model\":\"m\"}\n",
            "\u{feff}{\"model\":\"m\"}",
            "\x0c{\"model\":\"m\"}",
            r#"{"model":"m","n":[1,2,3]}"#,
            r#"{"model":"m","n":[1,2,]}"#,
            r#"{"model":"m","n":[,1]}"#,
            r#"{"model":"m","n":[1 2]}"#,
            r#"{"model":"m","n":{"a":1,}}"#,
            r#"{"model":"m","n":{"a" 1}}"#,
            r#"{"model":"m","n":{1:1}}"#,
            r#"{"model":"m","n":[}"#,
            r#"{"model":"m","n":{]}"#,
            r#"{"model":"m","n":0}"#,
            r#"{"model":"m","n":-0}"#,
            r#"{"model":"m","n":01}"#,
            r#"{"model":"m","n":-01}"#,
            r#"{"model":"m","n":-}"#,
            r#"{"model":"m","n":1.}"#,
            r#"{"model":"m","n":.5}"#,
            r#"{"model":"m","n":1.5e}"#,
            r#"{"model":"m","n":1.5e+}"#,
            r#"{"model":"m","n":1.5E-7}"#,
            r#"{"model":"m","n":1e999999}"#,
            r#"{"model":"m","n":+1}"#,
            r#"{"model":"m","n":0x10}"#,
            r#"{"model":"m","n":Infinity}"#,
            r#"{"model":"m","n":NaN}"#,
            r#"{"model":"m","n":tru}"#,
            r#"{"model":"m","n":truex}"#,
            r#"{"model":"m","n":nul}"#,
            r#"{"model":"m","n":True}"#,
            r#"{"model":"m","n":[true,false,null,{},[],"",0]}"#,
            r#"{"model":"m","n":"unterminated}"#,
            r#"{"model":"m""#,
            r#"{"model":"#,
            r#"{"model""#,
            r#"{"#,
            r#"{"model":"m"#,
            "",
            " ",
            "null",
            "1",
            r#""model""#,
            r#"[]"#,
            r#"["m"]"#,
            r#"["m",true]"#,
        ];
        let mut cases: Vec<Vec<u8>> = texts.iter().map(|s| s.as_bytes().to_vec()).collect();
        for n in [126, 127, 128, 100_000] {
            cases.push(deep(n).into_bytes());
        }
        cases.push(b"{\"model\":\"\xff\"}".to_vec());
        cases.push(b"{\"model\":\"m\",\"x\":\"\xc3\x28\"}".to_vec());
        let accepted = cases.iter().filter(|c| agrees_with_serde(c)).count();
        assert!(
            accepted > 15 && accepted < cases.len() - 40,
            "{accepted} accepted"
        );
    }

    /// Every shape payload, and many byte-level mutations of each (deterministic), get the same
    /// verdict from both.
    #[test]
    fn scanner_agrees_with_serde_on_mutated_payloads() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../shapes/payloads");
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        const BYTES: &[u8] =
            b"{}[]\",:\\/\"u0123456789abcdefABCDEF-+.eEtrunlsf \n\t\x01\x1f\xc3\xa9";
        let (mut payloads, mut accepted, mut refused) = (0, 0, 0);
        for entry in std::fs::read_dir(&dir).unwrap() {
            let body = std::fs::read(entry.unwrap().path()).unwrap();
            assert!(agrees_with_serde(&body));
            payloads += 1;
            for _ in 0..400 {
                let mut b = body.clone();
                for _ in 0..1 + next() % 3 {
                    let at = (next() as usize) % (b.len() + 1);
                    let byte = BYTES[(next() as usize) % BYTES.len()];
                    match next() % 3 {
                        0 if at < b.len() => b[at] = byte,
                        1 if at < b.len() => {
                            b.remove(at);
                        }
                        _ => b.insert(at, byte),
                    }
                }
                if agrees_with_serde(&b) {
                    accepted += 1;
                } else {
                    refused += 1;
                }
            }
        }
        assert!(payloads > 10);
        // Both verdicts are well represented, so the comparison means something.
        assert!(
            accepted > 1000 && refused > 1000,
            "{accepted} accepted, {refused} refused"
        );
    }

    #[test]
    fn head_rejects_bad_input() {
        assert_eq!(parse_body_head(b"{").err().unwrap().status, 400);
        assert_eq!(parse_body_head(b"[]").err().unwrap().status, 400);
        assert_eq!(
            parse_body_head(br#"{"model":1}"#).err().unwrap().status,
            400
        );
        assert_eq!(parse_body_head(br#"{"x":1}"#).err().unwrap().status, 400);
        assert_eq!(
            parse_body_head(br#"{"model":"a","model":"b"}"#)
                .err()
                .unwrap()
                .status,
            400
        );
    }
}
