//! The token usage of an answer: the last `"usage":{...}` object of a body or a stream event,
//! read without parsing the rest. A lenient cursor of its own (it reads only the members of that
//! one object and skips the rest unchecked), on the shared string walk ([`super::string_end`]).

use super::string_end;

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// Every input token, cached ones included (Anthropic's cache reads and writes are added to
    /// its `input_tokens`, which leaves them out).
    pub input: Option<u64>,
    pub output: Option<u64>,
    /// The input tokens read from the provider's prompt cache (a part of `input`): OpenAI's
    /// `prompt_tokens_details.cached_tokens` / `input_tokens_details.cached_tokens`, Anthropic's
    /// `cache_read_input_tokens`.
    pub cached: Option<u64>,
}

impl Usage {
    pub fn merge(&mut self, o: Usage) {
        if o.input.is_some() {
            self.input = self.input.max(o.input);
        }
        if o.output.is_some() {
            self.output = self.output.max(o.output);
        }
        if o.cached.is_some() {
            self.cached = self.cached.max(o.cached);
        }
    }
}

/// Whether the last `"usage":` key of `body` has an object for its value (not `null`): a chat
/// stream's usage chunk ([`crate::dialect::stream_usage`]).
pub fn has_usage_object(body: &[u8]) -> bool {
    let key = b"\"usage\":";
    let Some(pos) = rfind_key(body, key, 4) else {
        return false;
    };
    let mut p = Scan {
        b: body,
        i: pos + key.len(),
    };
    p.ws();
    p.peek() == Some(b'{')
}

/// The last `"usage":{...}` object in a body or an event, in any of the three dialects
/// (`prompt_tokens`/`completion_tokens` or `input_tokens`/`output_tokens`), without parsing the
/// rest of the document. Inside a JSON string a quote is escaped, so an unescaped `"usage":`
/// is always a key; the last one is the top-level usage in every dialect's responses. Only the
/// members of that one object are read (nested objects such as `prompt_tokens_details` are
/// skipped); anything malformed gives `None`.
pub fn scan_usage(body: &[u8]) -> Option<Usage> {
    let key = b"\"usage\":";
    let pos = rfind_key(body, key, 4)?;
    let mut p = Scan {
        b: body,
        i: pos + key.len(),
    };
    p.ws();
    if p.peek()? != b'{' {
        return None;
    }
    let mut u = Usage::default();
    let mut prompt = None;
    let mut completion = None;
    let (mut cache_read, mut cache_write) = (None, None);
    p.members(|name, p| {
        let slot = match name {
            b"input_tokens" => &mut u.input,
            b"output_tokens" => &mut u.output,
            b"prompt_tokens" => &mut prompt,
            b"completion_tokens" => &mut completion,
            b"cache_read_input_tokens" => &mut cache_read,
            b"cache_creation_input_tokens" => &mut cache_write,
            b"prompt_tokens_details" | b"input_tokens_details" if p.peek()? == b'{' => {
                return p.members(|name, p| match name {
                    b"cached_tokens" => p.count_into(&mut u.cached),
                    _ => p.skip_value(1),
                });
            }
            _ => return p.skip_value(0),
        };
        p.count_into(slot)
    })?;
    u.input = u.input.or(prompt);
    u.output = u.output.or(completion);
    // Anthropic counts cache reads and writes apart from `input_tokens`.
    if cache_read.is_some() || cache_write.is_some() {
        let (r, w) = (cache_read.unwrap_or(0), cache_write.unwrap_or(0));
        u.input = Some(u.input.unwrap_or(0).saturating_add(r).saturating_add(w));
        u.cached = cache_read.or(u.cached);
    }
    Some(u)
}

/// The last `"finish_reason":"..."` (chat completions) or `"stop_reason":"..."` (Anthropic
/// Messages) string of a body or an event, as written (escapes kept): a sampled request's
/// `gen_ai.response.finish_reasons` (`telemetry/traces/`). `null` and other values are not one.
pub fn finish_reason(body: &[u8]) -> Option<&[u8]> {
    // Anchored on the `_` of each key (`rfind_key`): a searcher built per call cost more than
    // the search.
    for (key, anchor) in [(&b"\"finish_reason\":"[..], 7), (b"\"stop_reason\":", 5)] {
        let Some(pos) = rfind_key(body, key, anchor) else {
            continue;
        };
        let mut p = Scan {
            b: body,
            i: pos + key.len(),
        };
        p.ws();
        if p.peek() == Some(b'"') {
            return p.string();
        }
    }
    None
}

/// Where the last `key` starts in `body`, looking backwards from each occurrence of its byte at
/// `anchor` (chosen rare: every usage member has a `:`, but of the three dialects' usage members
/// only OpenAI's nested `reasoning_tokens` has the `g` of `"usage"`, so the first or second hit
/// from the end is the key). For a short key near the end of a short body (the usage object
/// closes every answer) this is a fraction of `memmem::rfind`'s cost, which builds its searcher.
fn rfind_key(body: &[u8], key: &[u8], anchor: usize) -> Option<usize> {
    let (byte, k) = (*key.get(anchor)?, key.len());
    // `at` is the anchor's position in a candidate; the key then spans `at - anchor..`.
    let mut end = body.len().checked_sub(k - 1 - anchor)?;
    while end > anchor {
        let at = memchr::memrchr(byte, &body[anchor..end])? + anchor;
        let start = at - anchor;
        if &body[start..start + k] == key {
            return Some(start);
        }
        end = at;
    }
    None
}

/// The run of decimal digits `s` starts with, read in one pass: its value and its length
/// (`Some(0)` and 0 for no digits), or `None` as soon as it does not fit a `u64`. What follows
/// the run is the caller's to judge: a token count refuses a fraction, a request's output cap
/// reads its integer part.
pub fn decimal_prefix(s: &[u8]) -> (Option<u64>, usize) {
    let mut p = Scan { b: s, i: 0 };
    let n = p.digits();
    (n, p.i)
}

struct Scan<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Scan<'a> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }
    fn ws(&mut self) {
        while self.peek().is_some_and(super::is_ws) {
            self.i += 1;
        }
    }
    /// A string's raw bytes (escapes not decoded); the cursor is on its opening quote.
    fn string(&mut self) -> Option<&'a [u8]> {
        let start = self.i + 1;
        let end = string_end(self.b, self.i)?;
        self.i = end;
        let b: &'a [u8] = self.b;
        b.get(start..end - 1)
    }
    /// The run of decimal digits at the cursor, read past ([`decimal_prefix`]).
    fn digits(&mut self) -> Option<u64> {
        let mut n: u64 = 0;
        while let Some(c @ b'0'..=b'9') = self.peek() {
            n = n.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
            self.i += 1;
        }
        Some(n)
    }
    fn number(&mut self) -> Option<u64> {
        // No digits reads as 0 here; what follows decides.
        let n = self.digits()?;
        // A fraction or exponent is not a token count.
        match self.peek()? {
            b'.' | b'e' | b'E' => None,
            _ => Some(n),
        }
    }
    /// Walks the members of the object the cursor is on, calling `each` with each member's name
    /// and the cursor on its value, which `each` must consume; ends past the closing brace.
    fn members(&mut self, mut each: impl FnMut(&'a [u8], &mut Self) -> Option<()>) -> Option<()> {
        self.i += 1;
        loop {
            self.ws();
            match self.peek()? {
                b'}' => {
                    self.i += 1;
                    return Some(());
                }
                b',' => {
                    self.i += 1;
                    continue;
                }
                b'"' => {}
                _ => return None,
            }
            let name = self.string()?;
            self.ws();
            if self.peek()? != b':' {
                return None;
            }
            self.i += 1;
            self.ws();
            each(name, self)?;
        }
    }
    /// A token count into `slot`; any other value is skipped.
    fn count_into(&mut self, slot: &mut Option<u64>) -> Option<()> {
        if self.peek()?.is_ascii_digit() {
            *slot = Some(self.number()?);
            Some(())
        } else {
            self.skip_value(0)
        }
    }
    /// Skips one value of any kind (nesting bounded).
    fn skip_value(&mut self, depth: u32) -> Option<()> {
        if depth > 64 {
            return None;
        }
        self.ws();
        match self.peek()? {
            b'"' => self.string().map(|_| ()),
            open @ (b'{' | b'[') => {
                let close = if open == b'{' { b'}' } else { b']' };
                self.i += 1;
                loop {
                    self.ws();
                    match self.peek()? {
                        c if c == close => {
                            self.i += 1;
                            return Some(());
                        }
                        b',' | b':' => self.i += 1,
                        _ => self.skip_value(depth + 1)?,
                    }
                }
            }
            _ => {
                let start = self.i;
                while let Some(c) = self.peek() {
                    if matches!(c, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r') {
                        break;
                    }
                    self.i += 1;
                }
                (self.i > start).then_some(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_count_is_a_whole_number_that_fits() {
        assert_eq!(decimal_prefix(b"12,"), (Some(12), 2));
        assert_eq!(decimal_prefix(b"x"), (Some(0), 0));
        assert_eq!(
            decimal_prefix(b"18446744073709551615"),
            (Some(u64::MAX), 20)
        );
        assert_eq!(decimal_prefix(b"18446744073709551616").0, None);
        let tokens = |v: &str| {
            scan_usage(
                format!(r#"{{"usage":{{"prompt_tokens":{v},"completion_tokens":1}}}}"#).as_bytes(),
            )
        };
        assert_eq!(tokens("7").and_then(|u| u.input), Some(7));
        assert_eq!(tokens("7.5"), None, "a fraction");
        assert_eq!(tokens("7e1"), None, "an exponent");
        assert_eq!(tokens("18446744073709551616"), None, "past u64");
    }

    #[test]
    fn rfind_key_finds_what_memmem_finds() {
        let key = b"\"usage\":";
        let bodies: [&[u8]; 9] = [
            b"",
            b"\"usage\"",
            b"\"usage\":",
            b"x\"usage\":{}",
            b"\"usage\":\"usage\":1",
            b"::::::::::",
            b"\"usage\" : 1, \"usage\"::",
            b"\"usag\":\"usage\":\"sage\":",
            br#"{"a":"\"usage\": 5","usage":{"prompt_tokens":1}}"#,
        ];
        // And short strings over the key's own alphabet, from a fixed pseudo-random walk (an
        // LCG's high bits).
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            seed >> 33
        };
        let alphabet = b"\"usage:x";
        let random: Vec<Vec<u8>> = (0..2000)
            .map(|_| {
                let len = (next() % 24) as usize;
                (0..len).map(|_| alphabet[(next() % 8) as usize]).collect()
            })
            .collect();
        for b in bodies
            .iter()
            .copied()
            .chain(random.iter().map(Vec::as_slice))
        {
            for anchor in 0..key.len() {
                assert_eq!(
                    rfind_key(b, key, anchor),
                    memchr::memmem::rfind(b, key),
                    "{b:?} {anchor}"
                );
            }
        }
    }

    #[test]
    fn usage_in_every_dialect() {
        let chat = br#"{"id":"x","choices":[{"message":{"content":"\"usage\": 5"}}],"usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15}}"#;
        assert_eq!(
            scan_usage(chat),
            Some(Usage {
                input: Some(12),
                output: Some(3),
                cached: None
            })
        );
        let msg = br#"{"type":"message_start","message":{"id":"m","usage":{"input_tokens":7,"output_tokens":1}}}"#;
        assert_eq!(
            scan_usage(msg),
            Some(Usage {
                input: Some(7),
                output: Some(1),
                cached: None
            })
        );
        let delta = br#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage": {"output_tokens":9}}"#;
        assert_eq!(
            scan_usage(delta),
            Some(Usage {
                input: None,
                output: Some(9),
                cached: None
            })
        );
        let resp = br#"{"type":"response.completed","response":{"output":[],"usage":{"input_tokens":4,"output_tokens":2,"total_tokens":6}}}"#;
        assert_eq!(scan_usage(resp).unwrap().output, Some(2));
        assert_eq!(scan_usage(br#"{"usage":null}"#), None);
        assert_eq!(scan_usage(br#"{"usage":{"input_tokens":"#), None);
        assert_eq!(scan_usage(b"garbage"), None);
        let nested = br#"{"usage":{"prompt_tokens":19,"prompt_tokens_details":{"cached_tokens":0,"x":[1,{"a":"}"}]},"completion_tokens":10,"total_tokens":29}}"#;
        assert_eq!(
            scan_usage(nested),
            Some(Usage {
                input: Some(19),
                output: Some(10),
                cached: Some(0)
            })
        );
        assert_eq!(scan_usage(br#"{"usage":{"input_tokens":1.5}}"#), None);
        let details = br#"{"usage":{"input_tokens":40,"input_tokens_details":{"cached_tokens":32},"output_tokens":3}}"#;
        assert_eq!(
            scan_usage(details),
            Some(Usage {
                input: Some(40),
                output: Some(3),
                cached: Some(32)
            })
        );
        let anthropic = br#"{"usage":{"input_tokens":5,"cache_creation_input_tokens":10,"cache_read_input_tokens":100,"output_tokens":1}}"#;
        assert_eq!(
            scan_usage(anthropic),
            Some(Usage {
                input: Some(115),
                output: Some(1),
                cached: Some(100)
            })
        );
        assert!(has_usage_object(
            br#"{"choices":[],"usage": {"prompt_tokens":1}}"#
        ));
        assert!(!has_usage_object(br#"{"choices":[],"usage":null}"#));
        assert_eq!(
            finish_reason(br#"{"choices":[{"finish_reason": "stop"}]}"#),
            Some(&b"stop"[..])
        );
        assert_eq!(
            finish_reason(br#"{"delta":{"stop_reason":"end_turn"},"usage":{}}"#),
            Some(&b"end_turn"[..])
        );
        assert_eq!(
            finish_reason(br#"{"choices":[{"finish_reason":null}]}"#),
            None
        );
        assert!(!has_usage_object(br#"{"choices":[]}"#));
        assert_eq!(
            scan_usage(br#"{"usage":{"input_tokens":99999999999999999999999}}"#),
            None
        );
    }
}
