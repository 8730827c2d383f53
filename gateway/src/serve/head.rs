//! The native route's minimal parse: the few things routing needs from a request body (`model`,
//! `stream`, and where the model's value sits so that it can be replaced in place), found without
//! building a DOM. The whole body is still checked to be UTF-8 JSON of bounded depth, so the native
//! route refuses what the translated routes would.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::dialect::error::GwError;

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
}
