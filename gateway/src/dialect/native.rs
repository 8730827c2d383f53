//! The native route's stream: upstream frames go to the client as they are, except that the model
//! name is replaced by the alias. Frames are still checked to be JSON and the terminal frame is
//! tracked, so that a broken upstream never looks like a finished stream to the client.

use bytes::BytesMut;

use crate::dialect::error::GwError;
use crate::dialect::stream_usage;
use crate::dialect::transform::StreamTransform;
use crate::dialect::Dialect;
use crate::json;
use crate::sse::SseEvent;

mod repeat;

use repeat::Repeat;

/// The members whose string values a frame's copy renames: the model, at any depth.
pub(crate) const RENAMED: &str = "model";

/// The top-level members a frame's check reports: `error` (a field: two are refused, as serde
/// refuses a struct's duplicate field), `choices` (located for the usage chunk: the first
/// counts, as [`json::find_members`] counts it) and `usage` (located for the request record,
/// [`StreamTransform::last_usage`], which then need not search the frame for it).
const KEYS: [&str; 3] = ["error", "choices", "usage"];
/// `choices` and `usage` may repeat ([`json::copy_object_renaming`]'s `repeatable`).
const REPEATABLE: u32 = 0b110;

/// What the check of a frame found besides its copy.
#[derive(Debug, PartialEq)]
struct Found {
    /// A top-level `error` that is not null.
    has_error: bool,
    /// The span of the first top-level `choices`.
    choices: Option<(usize, usize)>,
    /// The frame's top-level `usage` is an object (the first one, and the only one: with a
    /// second, `None`, not known here).
    usage: Option<bool>,
}

/// The spans of [`KEYS`]' values in a frame.
pub(crate) type Spans = [Option<(usize, usize)>; 3];

/// The frame copied to `out` with its model renamed, and the spans of [`KEYS`]. The frame is
/// checked to be a JSON object by serde_json's grammar ([`json::scan_object`]) in the same pass
/// that copies it; when it is not, `out` is left as it was.
fn check_copy(
    out: &mut BytesMut,
    data: &[u8],
    to: &[u8],
    memo: &mut json::Memo,
) -> Result<Spans, GwError> {
    json::copy_object_renaming(out, data, KEYS, REPEATABLE, (RENAMED, to), memo)
        .map_err(|_| GwError::bad_upstream("upstream sent a frame that is not JSON"))
}

/// What the check of a checked frame found, from the spans of its keys.
fn found(data: &[u8], [error, choices, usage]: Spans) -> Found {
    Found {
        has_error: error.is_some_and(|(s, e)| &data[s..e] != b"null"),
        choices,
        usage: top_level_usage(data, usage),
    }
}

/// Whether the frame's top-level `usage`, first found at `span`, is an object; `None` (not
/// known) when the frame has another `"usage":` key after it (a second top-level one, which the
/// record's usage scan, reading the last, would read instead). A frame without a top-level
/// `usage` is `Some(false)` (a nested `usage` member is no usage of the answer's).
fn top_level_usage(data: &[u8], span: Option<(usize, usize)>) -> Option<bool> {
    let Some((s, e)) = span else {
        return Some(false);
    };
    let rest = &data[e..];
    if rest.len() > 7 && memchr::memmem::find(rest, b"\"usage\"").is_some() {
        return None;
    }
    Some(data[s] == b'{')
}

pub struct NativeStream {
    dialect: Dialect,
    to: bytes::Bytes,
    /// The last frame's envelope, which the next frame's check resumes after when it repeats.
    memo: json::Memo,
    /// The last frame checked whole, which the next is compared with first.
    repeat: Repeat,
    events: u64,
    finished: bool,
    /// What the last event's check found of its top-level `usage` ([`StreamTransform::last_usage`]).
    last_usage: Option<bool>,
    /// Chat: the client did not ask for usage, the gateway did; its chunk is dropped.
    pub drop_usage: bool,
}

impl NativeStream {
    pub fn new(dialect: Dialect, alias_json: bytes::Bytes) -> Self {
        NativeStream {
            dialect,
            to: alias_json,
            memo: json::Memo::default(),
            repeat: Repeat::default(),
            events: 0,
            finished: false,
            last_usage: None,
            drop_usage: false,
        }
    }
}

impl NativeStream {
    /// The frame `data` checked and copied to `out` with its model renamed ([`check_copy`]),
    /// compared with the last frame checked whole first ([`Repeat`]); what the check found.
    fn check_copy(&mut self, data: &[u8], out: &mut BytesMut) -> Result<Found, GwError> {
        if let Some(spans) = self.repeat.copy(data, out) {
            return Ok(found(data, spans));
        }
        let at = out.len();
        match check_copy(out, data, &self.to, &mut self.memo) {
            Ok(spans) => {
                self.repeat.keep(data, &out[at..], spans);
                Ok(found(data, spans))
            }
            Err(e) => {
                self.repeat.forget();
                Err(e)
            }
        }
    }
}

impl StreamTransform for NativeStream {
    fn on_event(&mut self, ev: &SseEvent, out: &mut BytesMut) -> Result<(), GwError> {
        self.last_usage = None;
        if self.finished {
            return Ok(());
        }
        if self.dialect == Dialect::Chat && ev.is_done_marker() {
            self.finished = true;
            out.extend_from_slice(b"data: [DONE]\n\n");
            return Ok(());
        }
        // Every frame is checked to be JSON (a broken frame must not reach the client as if it
        // were fine) in the one pass that copies it with its model renamed; for chat the same pass
        // notices an in-band error object, which ends the stream as the upstream's own error event,
        // and finds the `choices` that tell the usage chunk. Any model value is replaced, not only
        // the configured upstream name, because upstreams answer with dated snapshot names.
        let mark = out.len();
        out.reserve(ev.event.len() + ev.data.len() + self.to.len() + 16);
        if !ev.event.is_empty() {
            out.extend_from_slice(b"event: ");
            out.extend_from_slice(&ev.event);
            out.extend_from_slice(b"\n");
        }
        out.extend_from_slice(b"data: ");
        let Found {
            has_error,
            choices,
            usage,
        } = match self.check_copy(&ev.data, out) {
            Ok(found) => found,
            Err(e) => {
                out.truncate(mark);
                // The usage chunk is dropped before any check, as it always was: the lenient
                // look for it decides on a frame the check refused.
                if self.drop_usage && stream_usage::is_usage_chunk(&ev.data) {
                    return Ok(());
                }
                return Err(e);
            }
        };
        self.last_usage = usage;
        if self.drop_usage && stream_usage::is_checked_usage_chunk(&ev.data, choices) {
            out.truncate(mark);
            return Ok(());
        }
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

    fn last_usage(&self) -> Option<bool> {
        self.last_usage
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
            let ours = check(f.as_bytes());
            assert_eq!(ours, with_serde(f.as_bytes()), "{f}");
        }
        // A name that is not UTF-8 is refused by both; a value that is not is passed by both.
        assert_eq!(check(b"{\"\xff\":1}"), with_serde(b"{\"\xff\":1}"));
        assert_eq!(check(b"{\"a\":\"\xff\"}"), with_serde(b"{\"a\":\"\xff\"}"));
        assert_eq!(with_serde(b"{\"a\":\"\xff\"}"), Some(false));
    }

    /// The frame check alone, as serde's probe answers it.
    fn check(f: &[u8]) -> Option<bool> {
        let mut out = BytesMut::new();
        let r = check_copy(&mut out, f, b"\"a\"", &mut json::Memo::default())
            .ok()
            .map(|spans| found(f, spans).has_error);
        assert_eq!(
            out.is_empty(),
            r.is_none(),
            "a refused frame leaves nothing behind"
        );
        r
    }

    fn event(name: &str, data: &str) -> SseEvent {
        SseEvent {
            event: bytes::Bytes::copy_from_slice(name.as_bytes()),
            data: bytes::Bytes::copy_from_slice(data.as_bytes()),
        }
    }

    /// One event through a native stream whose alias is `gpt`: what it wrote, or the error.
    fn through(t: &mut NativeStream, name: &str, data: &str) -> Result<String, GwError> {
        let mut out = BytesMut::from(&b"before|"[..]);
        let r = t.on_event(&event(name, data), &mut out);
        let text = String::from_utf8(out.to_vec()).unwrap();
        let written = text
            .strip_prefix("before|")
            .expect("what was there is kept");
        r.map(|()| written.to_owned()).inspect_err(|_| {
            assert_eq!(written, "", "a refused frame writes nothing");
        })
    }

    fn chat(drop_usage: bool) -> NativeStream {
        let mut t = NativeStream::new(Dialect::Chat, bytes::Bytes::from_static(b"\"gpt\""));
        t.drop_usage = drop_usage;
        t
    }

    #[test]
    fn copies_frames_with_every_model_string_renamed() {
        let mut t = chat(false);
        for (frame, want) in [
            (
                r#"{"id":"c","model":"up-2024","choices":[{"delta":{"content":"x"}}]}"#,
                r#"{"id":"c","model":"gpt","choices":[{"delta":{"content":"x"}}]}"#,
            ),
            // Nested models, a string that reads like a model member, escapes around it, and
            // models that are not strings (left as they are).
            (
                r#" {"a":{"model" : "m\"1","t":"say \"model\":\"x\"","b":[{"model":"n"}]},"model":null,"c":{"model":["s"]},"d":{"model":{"model":"deep"}}} "#,
                r#" {"a":{"model" : "gpt","t":"say \"model\":\"x\"","b":[{"model":"gpt"}]},"model":null,"c":{"model":["s"]},"d":{"model":{"model":"gpt"}}} "#,
            ),
            // A name with escapes that decodes to `model` is renamed; a value `model` is not.
            (
                r#"{"mod\u0065l":"m","k":"model","model\n":"m"}"#,
                r#"{"mod\u0065l":"gpt","k":"model","model\n":"m"}"#,
            ),
            (r#"{}"#, r#"{}"#),
            (r#"{"model":""}"#, r#"{"model":"gpt"}"#),
        ] {
            assert_eq!(
                through(&mut t, "", frame).unwrap(),
                format!("data: {want}\n\n"),
                "{frame}"
            );
        }
        let mut t = NativeStream::new(Dialect::Messages, bytes::Bytes::from_static(b"\"gpt\""));
        assert_eq!(
            through(&mut t, "message_start", r#"{"message":{"model":"c-1"}}"#).unwrap(),
            "event: message_start\ndata: {\"message\":{\"model\":\"gpt\"}}\n\n"
        );
        assert_eq!(
            through(&mut t, "message_stop", r#"{"type":"message_stop"}"#).unwrap(),
            "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
        );
        assert!(t.finished);
    }

    #[test]
    fn malformed_frames_end_the_stream_with_the_dialects_error_event() {
        for frame in [
            r#"{"model":"m","a":1,}"#,
            r#"{"model":"m""#,
            r#"{"model":"m"} x"#,
            r#"{"error":1,"error":2}"#,
            r#"{"model":"m\q"}"#,
            "[1]",
            "",
        ] {
            let mut t = chat(false);
            let err = through(&mut t, "", frame).unwrap_err();
            assert_eq!(err.status, http::StatusCode::BAD_GATEWAY, "{frame}");
            let mut out = BytesMut::new();
            t.on_error(&err, &mut out);
            assert!(
                out.starts_with(b"data: {\"error\":"),
                "{}",
                String::from_utf8_lossy(&out)
            );
        }
        // `choices` is located, not read as a field: a second one is not an error.
        assert!(through(&mut chat(false), "", r#"{"choices":[],"choices":[1]}"#).is_ok());
    }

    #[test]
    fn an_error_object_ends_a_chat_stream_and_is_passed_on() {
        let mut t = chat(true);
        let frame = r#"{"error":{"message":"overloaded","model":"m"}}"#;
        assert_eq!(
            through(&mut t, "", frame).unwrap(),
            "data: {\"error\":{\"message\":\"overloaded\",\"model\":\"gpt\"}}\n\n"
        );
        assert!(t.finished);
        assert_eq!(through(&mut t, "", r#"{"a":1}"#).unwrap(), "");
        let mut t = chat(true);
        through(&mut t, "", r#"{"error":null,"choices":[]}"#).unwrap();
        assert!(!t.finished);
    }

    #[test]
    fn the_usage_chunk_is_dropped_only_when_the_client_did_not_ask() {
        let usage = r#"{"id":"c","model":"m","choices":[ ],"usage":{"prompt_tokens":1,"completion_tokens":2}}"#;
        assert_eq!(through(&mut chat(true), "", usage).unwrap(), "");
        assert_eq!(
            through(&mut chat(false), "", usage).unwrap(),
            format!("data: {}\n\n", usage.replace(r#""m""#, r#""gpt""#))
        );
        // Usage on a content chunk, or null usage: passed on.
        for kept in [
            r#"{"choices":[{"delta":{}}],"usage":{"prompt_tokens":1}}"#,
            r#"{"choices":[],"usage":null}"#,
            r#"{"choices":[]}"#,
        ] {
            assert!(
                !through(&mut chat(true), "", kept).unwrap().is_empty(),
                "{kept}"
            );
        }
        // A usage chunk the check refuses is dropped unchecked, as before the check was fused.
        let broken = r#"{"choices":[],"usage":{"prompt_tokens":1},}"#;
        assert_eq!(through(&mut chat(true), "", broken).unwrap(), "");
        assert!(through(&mut chat(false), "", broken).is_err());
    }

    /// What a frame's check tells the request record of its usage, against the search it spares
    /// (a `"usage":` key anywhere, then the last one's value read).
    #[test]
    fn last_usage_is_what_the_record_would_have_searched_for() {
        for (frame, want) in [
            (
                r#"{"id":"c","choices":[],"usage":{"prompt_tokens":1}}"#,
                Some(true),
            ),
            (r#"{"choices":[{"delta":{}}],"usage":null}"#, Some(false)),
            (r#"{"choices":[{"delta":{"content":"x"}}]}"#, Some(false)),
            (r#"{"usage" : {},"choices":[]}"#, Some(true)),
            // A second top-level `usage` (the record reads the last): not known.
            (r#"{"usage":null,"choices":[],"usage":{}}"#, None),
            (r#"{"usage":{},"t":"usage"}"#, None),
            // Refused frames: not known.
            (r#"{"choices":[],"usage":{},}"#, None),
        ] {
            for drop_usage in [false, true] {
                let mut t = chat(drop_usage);
                let _ = through(&mut t, "", frame);
                assert_eq!(t.last_usage(), want, "{frame}");
            }
        }
        let mut t = chat(false);
        through(&mut t, "", r#"{"usage":{}}"#).unwrap();
        through(&mut t, "", "[DONE]").unwrap();
        assert_eq!(t.last_usage(), None, "an event not checked is not known");
    }

    /// The fused pass against what it replaced, on every frame: the lenient usage-chunk look first
    /// ([`stream_usage::is_usage_chunk`]), then serde's probe of the frame.
    #[test]
    fn agrees_with_the_separate_usage_look_and_check() {
        let frames = [
            r#"{"id":"c","choices":[],"usage":{"prompt_tokens":1}}"#,
            r#"{"id":"c","choices":[],"usage" :{"prompt_tokens":1}}"#,
            r#"{"id":"c","choices":[ ],"x":{"usage":{}}}"#,
            r#"{"id":"c","x":{"choices":[]},"usage":{}}"#,
            r#"{"ch\u006fices":[],"usage":{}}"#,
            r#"{"choices":[],"choices":[1],"usage":{}}"#,
            r#"{"choices":[1],"choices":[],"usage":{}}"#,
            r#"{"k\"usage":{},"choices":[]}"#,
            r#"{"usage":{},"choices":[],"usage":null}"#,
            r#"{"usage":null,"choices":[],"usage":{}}"#,
            r#"{"choices":[],"t":"\"usage\":{}"}"#,
            r#"{"choices":[],"usage":{}"#,
            r#"{"choices":[{}],"usage":{}}"#,
            r#"{"error":{"model":"m"},"choices":[],"usage":{}}"#,
            r#"{"model":"m","choices":[{"delta":{"content":"\u00e9"}}],"usage":null}"#,
        ];
        for f in frames {
            let old = if stream_usage::is_usage_chunk(f.as_bytes()) {
                Some(false)
            } else {
                with_serde(f.as_bytes()).map(|_| true)
            };
            let new = match through(&mut chat(true), "", f) {
                Ok(w) => Some(!w.is_empty()),
                Err(_) => None,
            };
            assert_eq!(new, old, "{f}");
        }
    }

    /// A stream's frames read with the kept frame ([`Repeat`]) come out as each frame checked
    /// alone does (copy, findings, refusal), whatever string or byte changed from one to the
    /// next: a delta's text, the model, a member name, an error, text that reads like a key.
    #[test]
    fn a_repeated_frame_reads_as_a_fresh_check() {
        let bases = [
            r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":17,"model":"up-2024","system_fingerprint":null,"choices":[{"index":0,"delta":{"content":"@"},"logprobs":null,"finish_reason":null}]}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"@"}}"#,
            r#"{"id":"c","choices":[{"delta":{"content":"@"}}],"usage":{"total_tokens":3},"t":"@"}"#,
            r#"{"choices":[],"usage":{"a":1},"t":"@"}"#,
            r#"{"id":"c","model":"@","choices":[]}"#,
            r#"{"a":{"model" : "@"},"b":[ "@" ]}"#,
            r#"{"mod\u0065l":"@","x":1}"#,
            r#"{"id":"c","@":1,"error":null}"#,
            r#"{"error":"@","choices":[]}"#,
            r#"{"model":["@"],"choices":[1]}"#,
            r#"{"k":"@","model":"m","z":{"model":"n"}}"#,
            r##"{"type":"response.output_text.delta","item_id":"msg_1","output_index":0,"content_index":0,"delta":"@","sequence_number":#}"##,
            r##"{"delta":"@","model":"m","n":[ #,"#"],"m":{"model":"@"},"k": #}"##,
            r##"{"t":"@","s":"x, #]","n":#}"##,
            r##"{"t":"@","model":"m","n":#.5,"e":#e2,"z":-#}"##,
        ];
        let numbers = [
            "0",
            "7",
            "12",
            "99",
            "100",
            "1234567",
            "01",
            "18446744073709551615",
        ];
        let texts = [
            "Hel",
            "lo",
            "",
            "usage",
            "error",
            "model",
            "choices",
            "é ü",
            r#"a\"b"#,
            r"\n",
            "x\u{1}y",
            r"\u00e9",
            "forty characters of text, a longer delta",
        ];
        let mut rand = json::test_rand(0x2545_F491_4F6C_DD1D);
        let mut t = chat(false);
        let (mut base, mut hits, mut ok) = (0, 0, 0);
        for _ in 0..60_000 {
            if rand(16) == 0 {
                base = rand(bases.len());
            }
            let mut f = bases[base]
                .replace('@', texts[rand(texts.len())])
                .replace('#', numbers[rand(numbers.len())])
                .into_bytes();
            if rand(12) == 0 {
                let at = rand(f.len());
                match rand(3) {
                    0 => f[at] = b"\" :,{}[]0a\\x\n\x01"[rand(14)],
                    1 => f.insert(at, b" \"9,"[rand(4)]),
                    _ => drop(f.remove(at)),
                }
            }
            hits += t.repeat.copy(&f, &mut BytesMut::new()).is_some() as usize;
            let run = |t: &mut NativeStream| {
                let mut out = BytesMut::from(&b"x"[..]);
                let r = t.check_copy(&f, &mut out).map_err(|e| e.message);
                if r.is_err() {
                    out.truncate(1);
                }
                (r, out)
            };
            let kept = run(&mut t);
            assert_eq!(
                kept,
                run(&mut chat(false)),
                "{}",
                String::from_utf8_lossy(&f)
            );
            ok += kept.0.is_ok() as usize;
        }
        assert!(hits > 2_000 && ok > 30_000, "{hits} compared, {ok} valid");
    }

    /// A frame larger than [`repeat::KEEP_MAX`] (a Responses stream's first frame echoing the
    /// request's instructions) is checked whole and not kept: the stream holds no copy of it.
    #[test]
    fn a_large_frame_is_not_kept() {
        let mut t = NativeStream::new(Dialect::Responses, bytes::Bytes::from_static(b"\"gpt\""));
        let big = format!(
            r#"{{"type":"response.created","response":{{"instructions":"{}","model":"m"}}}}"#,
            "x".repeat(4 * repeat::KEEP_MAX)
        );
        let delta = |d: &str, n: u32| {
            format!(
                r#"{{"type":"response.output_text.delta","delta":"{d}","sequence_number":{n}}}"#
            )
        };
        let mut out = BytesMut::new();
        t.check_copy(big.as_bytes(), &mut out).unwrap();
        assert_eq!(t.repeat.kept_capacity(), 0);
        for (n, d) in ["a", "bc", "def"].into_iter().enumerate() {
            t.check_copy(delta(d, n as u32).as_bytes(), &mut out)
                .unwrap();
        }
        assert!(t.repeat.copy(delta("g", 9).as_bytes(), &mut out).is_some());
        assert!(t.repeat.kept_capacity() <= 2 * repeat::KEEP_MAX);
    }
}
