//! Checks a gateway response against what the mock upstream answers to the shape's payload:
//! the dialect's body or SSE stream (its terminal frame included) and the mock's exact text.

use crate::mock::wire::{self, Dialect};
use serde_json::Value;

/// What a correct response to one payload looks like.
#[derive(Clone, Debug)]
pub struct Expect {
    pub dialect: Dialect,
    pub stream: bool,
    /// The mock's text for this payload.
    pub text: String,
    /// Output tokens the mock reports.
    pub output_tokens: u64,
    /// Chat streams: a usage chunk is required (`stream_options.include_usage`).
    pub usage_chunk: bool,
}

impl Expect {
    /// The expectation for `body` sent to `dialect` (directives read the same way the mock reads
    /// them; they survive the gateway's translation).
    pub fn for_payload(dialect: Dialect, body: &[u8]) -> Result<Expect, String> {
        Self::for_payload_and_upstream(dialect, body, None)
    }

    /// As [`Expect::for_payload`], for a mock started with `--directives` of its own
    /// (`upstream_directives`, applied after the payload's, as the mock applies them).
    pub fn for_payload_and_upstream(
        dialect: Dialect,
        body: &[u8],
        upstream_directives: Option<&str>,
    ) -> Result<Expect, String> {
        let mut plan = crate::mock::plan(dialect, body)?;
        if let Some(d) = upstream_directives {
            plan.apply_directives(d);
        }
        if plan.tool_call
            || plan.status.is_some()
            || plan.stall
            || plan.fail_mid_stream
            || plan.malformed_sse
        {
            return Err("training payloads must not carry error or tool directives".into());
        }
        Ok(Expect {
            dialect,
            stream: plan.stream,
            text: wire::expected_text(plan.frames),
            output_tokens: plan.output_tokens(),
            usage_chunk: plan.include_usage,
        })
    }

    /// Check one response (status and de-chunked body).
    pub fn check(&self, status: u16, body: &[u8]) -> Result<(), String> {
        if status != 200 {
            return Err(format!("status {status}: {}", snippet(body)));
        }
        let text = if self.stream {
            self.stream_text(body)?
        } else {
            let v: Value = serde_json::from_slice(body)
                .map_err(|e| format!("body is not JSON ({e}): {}", snippet(body)))?;
            self.json_end(&v)
                .map_err(|e| format!("{e}: {}", snippet(body)))?;
            self.json_text(&v)
                .ok_or_else(|| format!("no text where the dialect puts it: {}", snippet(body)))?
        };
        if text != self.text {
            return Err(format!(
                "text {:?} differs from the mock's {:?}",
                text, self.text
            ));
        }
        Ok(())
    }

    /// The stop reason / status and the output token count of a whole response or of the
    /// terminal event of a stream (`v` is then the chat finish chunk, the messages
    /// `message_delta` or the responses `response` object).
    fn end_of(&self, v: &Value, finish: bool) -> Result<(), String> {
        let (reason_ptr, want, tokens_ptr) = match self.dialect {
            Dialect::Chat => (
                "/choices/0/finish_reason",
                "stop",
                "/usage/completion_tokens",
            ),
            Dialect::Messages if finish => {
                ("/delta/stop_reason", "end_turn", "/usage/output_tokens")
            }
            Dialect::Messages => ("/stop_reason", "end_turn", "/usage/output_tokens"),
            Dialect::Responses => ("/status", "completed", "/usage/output_tokens"),
        };
        let reason = v.pointer(reason_ptr).and_then(|r| r.as_str());
        if reason != Some(want) {
            return Err(format!(
                "{} is {reason:?}, expected {want:?}",
                reason_ptr.trim_start_matches('/')
            ));
        }
        // Chat streams report usage in their own chunk (checked separately).
        if !(self.dialect == Dialect::Chat && finish) {
            let tokens = v.pointer(tokens_ptr).and_then(|t| t.as_u64());
            if tokens != Some(self.output_tokens) {
                return Err(format!(
                    "{} is {tokens:?}, expected the mock's {}",
                    tokens_ptr.trim_start_matches('/'),
                    self.output_tokens
                ));
            }
        }
        Ok(())
    }

    fn json_end(&self, v: &Value) -> Result<(), String> {
        self.end_of(v, false)
    }

    fn json_text(&self, v: &Value) -> Option<String> {
        let t = match self.dialect {
            Dialect::Chat => v.pointer("/choices/0/message/content")?,
            Dialect::Messages => v.pointer("/content/0/text")?,
            Dialect::Responses => {
                let out = v.get("output")?.as_array()?;
                let msg = out
                    .iter()
                    .find(|i| i.get("type").and_then(|t| t.as_str()) == Some("message"))?;
                msg.pointer("/content/0/text")?
            }
        };
        t.as_str().map(str::to_owned)
    }

    fn stream_text(&self, body: &[u8]) -> Result<String, String> {
        let s = std::str::from_utf8(body).map_err(|_| "stream is not UTF-8".to_string())?;
        let mut text = String::with_capacity(self.text.len());
        let mut last_event: Option<String> = None;
        let mut last_data: Option<String> = None;
        let mut usage_seen = false;
        let mut end_seen = false;
        let mut events = 0usize;
        for block in s.split("\n\n") {
            let block = block.trim_matches(|c| c == '\r' || c == '\n');
            if block.is_empty() {
                continue;
            }
            let mut event = None;
            let mut data = String::new();
            for line in block.lines() {
                let line = line.trim_end_matches('\r');
                if let Some(e) = line.strip_prefix("event:") {
                    event = Some(e.trim().to_owned());
                } else if let Some(d) = line.strip_prefix("data:") {
                    if !data.is_empty() {
                        data.push('\n');
                    }
                    data.push_str(d.strip_prefix(' ').unwrap_or(d));
                }
            }
            if data.is_empty() {
                continue; // a comment or keep-alive
            }
            events += 1;
            if data != "[DONE]" {
                let v: Value = serde_json::from_str(&data).map_err(|e| {
                    format!("SSE data is not JSON ({e}): {}", snippet(data.as_bytes()))
                })?;
                let ty = v.get("type").and_then(|t| t.as_str());
                match self.dialect {
                    Dialect::Chat => {
                        if let Some(c) = v
                            .pointer("/choices/0/delta/content")
                            .and_then(|c| c.as_str())
                        {
                            text.push_str(c);
                        }
                        if v.pointer("/choices/0/finish_reason")
                            .is_some_and(|f| !f.is_null())
                        {
                            self.end_of(&v, true)?;
                            end_seen = true;
                        }
                        if let Some(u) = v.get("usage").filter(|u| !u.is_null()) {
                            let got = u.get("completion_tokens").and_then(|n| n.as_u64());
                            if got != Some(self.output_tokens) {
                                return Err(format!(
                                    "usage chunk has completion_tokens {got:?}, expected {}",
                                    self.output_tokens
                                ));
                            }
                            usage_seen = true;
                        }
                    }
                    Dialect::Messages => {
                        if ty == Some("content_block_delta") {
                            if let Some(t) = v.pointer("/delta/text").and_then(|t| t.as_str()) {
                                text.push_str(t);
                            }
                        }
                        if ty == Some("message_delta") {
                            self.end_of(&v, true)?;
                            end_seen = true;
                        }
                        if ty == Some("error") {
                            return Err(format!("error event: {}", snippet(data.as_bytes())));
                        }
                    }
                    Dialect::Responses => {
                        if ty == Some("response.output_text.delta") {
                            if let Some(t) = v.get("delta").and_then(|t| t.as_str()) {
                                text.push_str(t);
                            }
                        }
                        if ty == Some("response.completed") {
                            let r = v
                                .get("response")
                                .ok_or("response.completed without response")?;
                            self.end_of(r, true)?;
                            end_seen = true;
                        }
                        if ty == Some("error") || ty == Some("response.failed") {
                            return Err(format!("error event: {}", snippet(data.as_bytes())));
                        }
                    }
                }
                last_event = ty.map(str::to_owned).or(event);
            } else {
                last_event = None;
            }
            last_data = Some(data);
        }
        if events == 0 {
            return Err(format!("no SSE events: {}", snippet(body)));
        }
        let terminal_ok = match self.dialect {
            Dialect::Chat => last_data.as_deref() == Some("[DONE]"),
            Dialect::Messages => last_event.as_deref() == Some("message_stop"),
            Dialect::Responses => last_event.as_deref() == Some("response.completed"),
        };
        if !terminal_ok {
            let want = match self.dialect {
                Dialect::Chat => "data: [DONE]",
                Dialect::Messages => "message_stop",
                Dialect::Responses => "response.completed",
            };
            return Err(format!(
                "stream does not end with {want}; last frame: {}",
                snippet(last_data.unwrap_or_default().as_bytes())
            ));
        }
        if !end_seen {
            return Err("the stream carries no stop reason / final status".into());
        }
        if self.dialect == Dialect::Chat && self.usage_chunk && !usage_seen {
            return Err("stream_options.include_usage was set but no usage chunk came".into());
        }
        // The gateway asks an OpenAI-style upstream for usage on every chat stream; a client
        // that did not ask must not get the usage chunk.
        if self.dialect == Dialect::Chat && !self.usage_chunk && usage_seen {
            return Err("a usage chunk came, but the client did not ask for one".into());
        }
        Ok(text)
    }
}

fn snippet(b: &[u8]) -> String {
    let s = String::from_utf8_lossy(&b[..b.len().min(300)]);
    if b.len() > 300 {
        format!("{s}…")
    } else {
        s.into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mock::wire::{render, Plan, Rendered};

    fn rendered_body(d: Dialect, plan: &Plan) -> Vec<u8> {
        match render(d, plan) {
            Rendered::Json(b) => b.to_vec(),
            Rendered::Sse { frames, .. } => frames.concat(),
        }
    }

    #[test]
    fn a_chat_stream_that_did_not_ask_for_usage_gets_no_usage_chunk() {
        let body = br#"{"model":"m","stream":true,"messages":[{"role":"user","content":"x [[mock:frames:5]]"}]}"#;
        let e = Expect::for_payload(Dialect::Chat, body).unwrap();
        let mut plan = crate::mock::plan(Dialect::Chat, body).unwrap();
        e.check(200, &rendered_body(Dialect::Chat, &plan)).unwrap();
        plan.include_usage = true;
        let err = e
            .check(200, &rendered_body(Dialect::Chat, &plan))
            .unwrap_err();
        assert!(err.contains("did not ask"), "{err}");
    }

    #[test]
    fn accepts_the_mock_and_rejects_truncation() {
        for d in [Dialect::Chat, Dialect::Messages, Dialect::Responses] {
            for stream in [false, true] {
                let body = match d {
                    Dialect::Responses => {
                        format!(
                            r#"{{"model":"m","stream":{stream},"input":"x [[mock:frames:5]]"}}"#
                        )
                    }
                    _ => format!(
                        r#"{{"model":"m","stream":{stream},"stream_options":{{"include_usage":true}},"messages":[{{"role":"user","content":"x [[mock:frames:5]]"}}]}}"#
                    ),
                };
                let e = Expect::for_payload(d, body.as_bytes()).unwrap();
                let plan = crate::mock::plan(d, body.as_bytes()).unwrap();
                let good = rendered_body(d, &plan);
                e.check(200, &good).unwrap();
                let good_s = String::from_utf8(good.clone()).unwrap();
                let (from, to) = match d {
                    Dialect::Chat => (r#""finish_reason":"stop""#, r#""finish_reason":"length""#),
                    Dialect::Messages => (
                        r#""stop_reason":"end_turn""#,
                        r#""stop_reason":"max_tokens""#,
                    ),
                    Dialect::Responses => (r#""status":"completed""#, r#""status":"incomplete""#),
                };
                let err = e
                    .check(200, good_s.replace(from, to).as_bytes())
                    .unwrap_err();
                assert!(err.contains("expected"), "{err}");
                let tokens = good_s.replace(r#"_tokens":5"#, r#"_tokens":4"#);
                assert!(e.check(200, tokens.as_bytes()).is_err(), "{d:?} {stream}");
                assert!(e.check(500, &good).is_err());
                if stream {
                    let mut bad = plan.clone();
                    bad.fail_mid_stream = true;
                    let err = e.check(200, &rendered_body(d, &bad)).unwrap_err();
                    assert!(
                        err.contains("does not end") || err.contains("differs"),
                        "{err}"
                    );
                    let mut bad = plan.clone();
                    bad.malformed_sse = true;
                    assert!(e.check(200, &rendered_body(d, &bad)).is_err());
                } else {
                    let mut other = plan.clone();
                    other.frames = 4;
                    assert!(e.check(200, &rendered_body(d, &other)).is_err());
                }
            }
        }
    }
}
