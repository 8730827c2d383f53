//! The native route's stream: upstream frames go to the client as they are, except that the model
//! name is replaced by the alias. Frames are still checked to be JSON and the terminal frame is
//! tracked, so that a broken upstream never looks like a finished stream to the client.

use bytes::BytesMut;

use crate::dialect::error::GwError;
use crate::dialect::transform::StreamTransform;
use crate::dialect::Dialect;
use crate::json;
use crate::sse::SseEvent;

/// Whether a frame is a JSON object (by serde_json's grammar, [`json::scan_object`]), and whether
/// it carries a top-level `error` that is not null; the string values of its `model` members, at
/// any depth, go to `models` in the same pass.
fn check_frame(data: &[u8], models: &mut Vec<(usize, usize)>) -> Result<bool, GwError> {
    models.clear();
    let [error] = json::scan_object_collecting(data, ["error"], Some(("model", models)))
        .map_err(|_| GwError::bad_upstream("upstream sent a frame that is not JSON"))?;
    Ok(error.is_some_and(|(s, e)| &data[s..e] != b"null"))
}

pub struct NativeStream {
    dialect: Dialect,
    /// Where the current frame's model names are (reused frame to frame).
    models: Vec<(usize, usize)>,
    to: bytes::Bytes,
    events: u64,
    finished: bool,
    /// Chat: the client did not ask for usage, the gateway did; its chunk is dropped.
    pub drop_usage: bool,
}

impl NativeStream {
    pub fn new(dialect: Dialect, alias_json: bytes::Bytes) -> Self {
        NativeStream {
            dialect,
            models: Vec::new(),
            to: alias_json,
            events: 0,
            finished: false,
            drop_usage: false,
        }
    }
}

impl StreamTransform for NativeStream {
    fn on_event(&mut self, ev: &SseEvent, out: &mut BytesMut) -> Result<(), GwError> {
        if self.finished {
            return Ok(());
        }
        if self.dialect == Dialect::Chat && ev.is_done_marker() {
            self.finished = true;
            out.extend_from_slice(b"data: [DONE]\n\n");
            return Ok(());
        }
        if self.drop_usage && crate::dialect::stream_usage::is_usage_chunk(&ev.data) {
            return Ok(());
        }
        // Every frame is checked to be JSON (a broken frame must not reach the client as if it
        // were fine); for chat the same pass notices an in-band error object, which ends the
        // stream as the upstream's own error event.
        let has_error = check_frame(&ev.data, &mut self.models)?;
        match self.dialect {
            Dialect::Chat => {
                if has_error {
                    self.finished = true;
                }
            }
            Dialect::Messages => {
                if matches!(&ev.event[..], b"message_stop" | b"error") {
                    self.finished = true;
                }
            }
            Dialect::Responses => {
                if matches!(
                    &ev.event[..],
                    b"response.completed" | b"response.failed" | b"response.incomplete" | b"error"
                ) {
                    self.finished = true;
                }
            }
        }
        out.reserve(ev.event.len() + ev.data.len() + 16);
        if !ev.event.is_empty() {
            out.extend_from_slice(b"event: ");
            out.extend_from_slice(&ev.event);
            out.extend_from_slice(b"\n");
        }
        out.extend_from_slice(b"data: ");
        // Any model value is replaced, not only the configured upstream name, because upstreams
        // answer with dated snapshot names.
        json::copy_replacing(out, &ev.data, &self.models, &self.to);
        out.extend_from_slice(b"\n\n");
        self.events += 1;
        Ok(())
    }

    fn on_end(&mut self, _out: &mut BytesMut) -> Result<(), GwError> {
        if self.finished {
            Ok(())
        } else {
            Err(GwError::bad_upstream(
                "upstream closed the stream before its final event",
            ))
        }
    }

    fn on_error(&mut self, err: &GwError, out: &mut BytesMut) {
        out.extend_from_slice(&err.sse_event(self.dialect, self.events));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the frame check replaced: serde_json reading a struct with an optional `error`.
    fn with_serde(data: &[u8]) -> Option<bool> {
        #[derive(serde::Deserialize)]
        struct Probe {
            #[serde(default)]
            error: Option<serde::de::IgnoredAny>,
        }
        serde_json::from_slice::<Probe>(data)
            .ok()
            .map(|p| p.error.is_some())
    }

    #[test]
    fn frame_check_agrees_with_serde() {
        let frames = [
            r#"{"id":"c","choices":[{"delta":{"content":"hi \"x\""}}],"model":"m"}"#,
            r#"{"error":{"message":"overloaded","type":"server_error"}}"#,
            r#"{"error":null,"choices":[]}"#,
            r#"{"error":"x","error":"y"}"#,
            r#"{"a":[1,2,{"error":1}]}"#,
            r#"{"a":1,}"#,
            r#"{"a":1"#,
            r#"{"a":"\u12"}"#,
            "{\"a\":\"\u{1}\"}",
            r#"not json"#,
            r#"{}"#,
            r#" {"error" : {} } "#,
        ];
        for f in frames {
            let ours = check_frame(f.as_bytes(), &mut Vec::new()).ok();
            assert_eq!(ours, with_serde(f.as_bytes()), "{f}");
        }
        // A name that is not UTF-8 is refused by both; a value that is not is passed by both.
        let check = |f: &[u8]| check_frame(f, &mut Vec::new()).ok();
        assert_eq!(check(b"{\"\xff\":1}"), with_serde(b"{\"\xff\":1}"));
        assert_eq!(check(b"{\"a\":\"\xff\"}"), with_serde(b"{\"a\":\"\xff\"}"));
        assert_eq!(with_serde(b"{\"a\":\"\xff\"}"), Some(false));
    }
}
