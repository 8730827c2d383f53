//! Decoding helpers every dialect module uses: client JSON literals into neutral [`Text`], the
//! content-part and tool shapes OpenAI's two dialects share (Anthropic's tool choice has the same
//! named form), and the small readers of upstream responses.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use crate::dialect::error::GwError;
use crate::dialect::members::{path_of, Rest};
use crate::dialect::neutral::{Image, Part, Request, Role, Text, Tool, ToolChoice};

/// For optional string fields: borrows from the input unless the string contains escapes.
/// serde borrows only for a field typed exactly `Cow<str>`; through `Option` it would allocate
/// every time, which on a stream is once per frame.
pub fn opt_cow<'de: 'a, 'a, D>(d: D) -> Result<Option<Cow<'a, str>>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    #[derive(serde::Deserialize)]
    #[serde(transparent)]
    struct Str<'a>(#[serde(borrow)] Cow<'a, str>);
    Ok(<Option<Str<'a>> as serde::Deserialize>::deserialize(d)?.map(|s| s.0))
}

/// Readers of a stream frame's members for the decoders' fast paths, which locate members with
/// [`crate::json::scan_object`] (which checks the frame by serde_json's grammar) instead of a
/// serde parse. Each answers `None` for a value the fast path leaves to the serde parse (a type
/// it does not expect), so that whatever serde refuses is still refused by serde, with its error.
pub mod fast {
    use std::borrow::Cow;

    use crate::dialect::neutral::Fragment;

    /// The member at `range` of `data` (as [`crate::json::scan_object`] gives it), whitespace
    /// around it excluded.
    pub fn member(data: &[u8], range: Option<(usize, usize)>) -> Option<&[u8]> {
        range.map(|(s, e)| &data[s..e])
    }

    /// An optional string member: `Some(None)` when absent or `null`, `Some(Some(text))` for a
    /// string (escapes decoded; borrowed without), `None` for anything else (or text that is not
    /// UTF-8).
    pub fn opt_str(v: Option<&[u8]>) -> Option<Option<Cow<'_, str>>> {
        match v {
            None | Some(b"null") => Some(None),
            Some([b'"', inner @ .., b'"']) => crate::json::decode_str(inner).ok().map(Some),
            Some(_) => None,
        }
    }

    /// An unsigned integer written as plain digits (what serde reads as a `u64`), `None` for
    /// anything else.
    pub fn u64_of(v: &[u8]) -> Option<u64> {
        if v.is_empty() || v.len() > 19 {
            return None;
        }
        let mut n = 0u64;
        for &c in v {
            if !c.is_ascii_digit() {
                return None;
            }
            n = n * 10 + u64::from(c - b'0');
        }
        Some(n)
    }

    /// The text of a string literal `lit` (quotes included) that [`Template::matches`] found,
    /// checked as serde_json checks a string (no raw control character, valid escapes, UTF-8);
    /// `None` when it is not one.
    fn str_lit(lit: &[u8]) -> Option<Cow<'_, str>> {
        let [b'"', inner @ .., b'"'] = lit else {
            return None;
        };
        if inner.iter().any(|&c| c < 0x20) {
            return None;
        }
        crate::json::decode_str(inner).ok()
    }

    /// Where `inner` (a slice of `outer`) starts in `outer`.
    pub fn offset(outer: &[u8], inner: &[u8]) -> usize {
        inner.as_ptr() as usize - outer.as_ptr() as usize
    }

    /// The last frame a fast path read whole, as the frame before and after one string value
    /// (a delta's text): a stream's deltas differ from each other only there, so a frame whose
    /// bytes are the same but for a string literal in that place is the same JSON with another
    /// string, read without scanning it again. Only what was checked whole is kept, so a frame
    /// it matches is valid JSON by the same grammar.
    #[derive(Default)]
    pub struct Template {
        frame: Vec<u8>,
        /// Where the value starts in `frame`.
        before: usize,
        /// How many bytes of `frame` follow the value.
        after: usize,
    }

    impl Template {
        /// Keeps `frame` as the template, its value at `start..end`.
        pub fn keep(&mut self, frame: &[u8], start: usize, end: usize) {
            self.frame.clear();
            self.frame.extend_from_slice(frame);
            self.before = start;
            self.after = frame.len() - end;
        }

        pub fn forget(&mut self) {
            self.frame.clear();
        }

        /// The string in the value's place when `frame` is the template but for one string
        /// literal there, checked as serde_json checks a string (no raw control character, valid
        /// escapes, UTF-8); `None` when it is not. A plain literal (the usual delta) is walked
        /// once ([`crate::json::literal_in_place`]).
        pub fn matches<'a>(&self, frame: &'a [u8]) -> Option<Fragment<'a>> {
            let (b, a) = (self.before, self.after);
            if self.frame.is_empty() {
                return None;
            }
            let (end, plain) = crate::json::literal_in_place(&self.frame, b, a, frame)?;
            if end != frame.len() - a {
                return None;
            }
            match plain {
                Some(text) => Some(Fragment {
                    text: Cow::Borrowed(text),
                    plain: true,
                }),
                None => str_lit(&frame[b..end]).map(Fragment::new),
            }
        }
    }

    /// Each frame (named `event`) through `d`: its events (Debug), or `Err` when refused.
    #[cfg(test)]
    pub fn decode_frames(
        d: &mut dyn crate::dialect::neutral::Decoder,
        event: &'static [u8],
        frames: &[&str],
    ) -> Vec<Result<Vec<String>, ()>> {
        frames
            .iter()
            .map(|f| {
                let ev = crate::sse::SseEvent {
                    event: bytes::Bytes::from_static(event),
                    data: bytes::Bytes::copy_from_slice(f.as_bytes()),
                };
                let mut got = Vec::new();
                d.event(&ev, &mut |e| got.push(format!("{e:?}")))
                    .map(|()| got)
                    .map_err(|_| ())
            })
            .collect()
    }

    /// `v` without the whitespace JSON allows around values.
    pub fn trim(v: &[u8]) -> &[u8] {
        let is_ws = |c: &u8| crate::json::is_ws(*c);
        let start = v.iter().position(|c| !is_ws(c)).unwrap_or(v.len());
        let end = v.iter().rposition(|c| !is_ws(c)).map_or(start, |e| e + 1);
        &v[start..end]
    }
}

pub fn bad(msg: impl Into<String>) -> GwError {
    GwError::bad_request(msg)
}

pub fn opt_str(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_owned)
}

/// Parses the arguments JSON text for dialects that carry arguments as an object.
pub fn args_value(arguments: &str) -> Value {
    if arguments.trim().is_empty() {
        return Value::Object(Default::default());
    }
    serde_json::from_str(arguments).unwrap_or_else(|_| Value::Object(Default::default()))
}

/// Upstream error event inside a stream → the gateway's error, keeping the upstream's message.
pub fn upstream_stream_error(data: &[u8]) -> GwError {
    let v: Value = serde_json::from_slice(data).unwrap_or(Value::Null);
    let msg = v
        .get("error")
        .and_then(|e| e.get("message"))
        .and_then(Value::as_str)
        .or_else(|| v.get("message").and_then(Value::as_str))
        .unwrap_or("upstream reported an error mid-stream");
    GwError::new(
        http::StatusCode::BAD_GATEWAY,
        format!("upstream error: {msg}"),
    )
}

// ---- client requests ----

pub fn lit<'a>(raw: &'a RawValue, what: &str) -> Result<Text<'a>, GwError> {
    let s = raw.get();
    if s.starts_with('"') {
        Ok(Text::Lit(s))
    } else {
        Err(bad(format!("{what} must be a string")))
    }
}

pub fn opt_lit<'a>(raw: Option<&'a RawValue>, what: &str) -> Result<Option<Text<'a>>, GwError> {
    raw.map(|r| lit(r, what)).transpose()
}

pub fn object<'a>(raw: Option<&'a RawValue>, what: &str) -> Result<Option<&'a str>, GwError> {
    match raw {
        None => Ok(None),
        Some(r) if r.get().starts_with('{') => Ok(Some(r.get())),
        Some(_) => Err(bad(format!("{what} must be an object"))),
    }
}

/// A content part of OpenAI's dialects: chat (`text`, `image_url`, `refusal`, …) and Responses
/// (`input_text`, `output_text`, `input_image`, …).
#[derive(Deserialize)]
pub struct ContentPart<'a> {
    #[serde(rename = "type", default, borrow, deserialize_with = "opt_cow")]
    kind: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    text: Option<&'a RawValue>,
    /// Chat: `{"url": …}`; Responses: the URL itself.
    #[serde(default, borrow)]
    image_url: Option<&'a RawValue>,
    #[serde(default, borrow)]
    refusal: Option<&'a RawValue>,
    /// Responses: an image's resolution (`auto`, the default, asks nothing).
    #[serde(default, borrow, deserialize_with = "opt_cow")]
    detail: Option<Cow<'a, str>>,
    #[serde(flatten)]
    rest: Rest,
}

/// Members of an earlier answer's text part (`output_text`) that describe that answer (the text is
/// what crosses), and `file_id`, which the image branch refuses with its reason.
const ANSWER_ECHO: &[&str] = &["annotations", "logprobs", "file_id"];

#[derive(Deserialize)]
pub struct ChatImageUrl<'a> {
    #[serde(borrow)]
    url: &'a RawValue,
    #[serde(default, borrow, deserialize_with = "opt_cow")]
    detail: Option<Cow<'a, str>>,
    #[serde(flatten)]
    rest: Rest,
}

/// An image's `detail` (the resolution OpenAI reads it at): `auto`, the default, asks nothing;
/// another has no counterpart upstream (part `{path}.detail`).
fn note_detail(r: &mut Request<'_>, detail: Option<&str>, path: &str, at: &dyn Fn() -> String) {
    if detail.is_some_and(|d| d != "auto") {
        r.unmapped(format!("{path}.detail"), || format!("{}.detail", at()));
    }
}

/// `data:<media type>;base64,<data>` → (media type, data).
pub fn split_data_url(url: &str) -> Option<(&str, &str)> {
    let (media_type, data) = url.strip_prefix("data:")?.split_once(',')?;
    let media_type = media_type.strip_suffix(";base64")?;
    (!media_type.is_empty() && !data.is_empty()).then_some((media_type, data))
}

/// An image URL as a client sent it: http(s), kept as written, or a base64 data URL, split.
pub fn image_url<'a>(raw: &'a RawValue, what: &str) -> Result<Image<'a>, GwError> {
    let t = lit(raw, what)?;
    let url = t.decode();
    if let Some((media_type, data)) = split_data_url(&url) {
        return Ok(Image::Base64 {
            media_type: Text::Own(media_type.to_owned()),
            data: Text::Own(data.to_owned()),
        });
    }
    if url.starts_with("data:") || !(url.starts_with("https://") || url.starts_with("http://")) {
        return Err(bad(format!(
            "{what} must be an http(s) URL or a data:<media type>;base64,<data> URL"
        )));
    }
    Ok(Image::Url(t))
}

/// Why a part of this kind has no translation: said to the client rather than dropped.
pub fn untranslatable(what: &str, kind: &str) -> GwError {
    bad(format!(
        "{what}: a content part of type {kind:?} cannot be translated to this model's upstream \
         dialect"
    ))
}

/// Parts of a content value at `at` (`messages[2].content`) that is a string, null, or an array
/// of OpenAI content parts. Images are taken only where `images` (user turns); a part without a
/// translation is refused with a 400 naming it; a member of a part with no counterpart is noted
/// under its path (`messages[].content[].image_url.detail`).
pub fn parts<'a>(
    r: &mut Request<'a>,
    raw: Option<&'a RawValue>,
    at: &str,
    images: bool,
) -> Result<Vec<Part<'a>>, GwError> {
    let Some(raw) = raw else {
        return Ok(Vec::new());
    };
    let s = raw.get();
    match s.as_bytes().first() {
        Some(b'"') => Ok(vec![Part::Text(Text::Lit(s))]),
        Some(b'n') => Ok(Vec::new()),
        Some(b'[') => {
            let list: Vec<ContentPart<'a>> = from_json(s, || at.to_owned())?;
            let path = format!("{}[]", path_of(at));
            let mut out = Vec::with_capacity(list.len());
            for (j, p) in list.into_iter().enumerate() {
                let place = || format!("{at}[{j}]");
                p.rest.note(r, &path, &place, ANSWER_ECHO);
                note_detail(r, p.detail.as_deref(), &path, &place);
                match p.kind.as_deref() {
                    None | Some("text" | "input_text" | "output_text") => {
                        if let Some(t) = p.text {
                            out.push(Part::Text(lit(t, at)?));
                        }
                    }
                    Some("refusal") => {
                        if let Some(t) = p.refusal {
                            out.push(Part::Text(lit(t, at)?));
                        }
                    }
                    Some(k @ ("image_url" | "input_image")) => {
                        if !images {
                            return Err(bad(format!(
                                "{}: images are translated only in user messages",
                                place()
                            )));
                        }
                        let url = match p.image_url {
                            Some(u) if u.get().starts_with('{') => {
                                let place = || format!("{at}[{j}].image_url");
                                let u: ChatImageUrl = from_json(u.get(), place)?;
                                let path = format!("{path}.image_url");
                                u.rest.note(r, &path, &place, &[]);
                                note_detail(r, u.detail.as_deref(), &path, &place);
                                u.url
                            }
                            Some(u) => u,
                            None => {
                                return Err(bad(format!(
                                    "{}: an {k} part needs an image_url (images by file id \
                                     cannot be translated: the upstream cannot see those files)",
                                    place()
                                )))
                            }
                        };
                        out.push(Part::Image(image_url(
                            url,
                            &format!("{}.image_url", place()),
                        )?));
                    }
                    Some(k) => return Err(untranslatable(&place(), k)),
                }
            }
            Ok(out)
        }
        _ => Err(bad(format!("{at} must be a string or an array"))),
    }
}

/// Text of a content value where only text can go (system prompts, tool results, assistant
/// turns): any other part is refused with a 400 naming it.
pub fn texts<'a>(
    r: &mut Request<'a>,
    raw: Option<&'a RawValue>,
    at: &str,
) -> Result<Vec<Text<'a>>, GwError> {
    Ok(parts(r, raw, at, false)?
        .into_iter()
        .filter_map(|p| match p {
            Part::Text(t) => Some(t),
            _ => None,
        })
        .collect())
}

/// Whether an optional request parameter asks for anything beyond the default: present and not
/// null, false, zero, empty, or the value that means the default (`no_ask`).
pub fn asks(v: Option<&RawValue>, no_ask: &[&str]) -> bool {
    v.is_some_and(|v| {
        let s = v.get();
        !matches!(s, "null" | "false" | "0" | "0.0" | "{}" | "[]" | "\"\"")
            && !no_ask
                .iter()
                .any(|d| s.bytes().filter(|b| !b.is_ascii_whitespace()).eq(d.bytes()))
    })
}

pub fn role_of(s: &str, what: &str) -> Result<Role, GwError> {
    match s {
        "user" => Ok(Role::User),
        "assistant" => Ok(Role::Assistant),
        other => Err(bad(format!("{what}: unknown role {other:?}"))),
    }
}

pub fn parse<'a, T: Deserialize<'a>>(body: &'a [u8]) -> Result<T, GwError> {
    serde_json::from_slice(body).map_err(|e| {
        let text = std::str::from_utf8(body).unwrap_or("");
        bad(describe(&e, text, ""))
    })
}

/// Parses `s`, a part of the request found at `at` (a path in the client's dialect, such as
/// `messages[2].content`), into `T`; an error names the part, never serde's wording or position.
pub fn from_json<'a, T: Deserialize<'a>>(
    s: &'a str,
    at: impl FnOnce() -> String,
) -> Result<T, GwError> {
    serde_json::from_str(s).map_err(|e| bad(describe(&e, s, &at())))
}

/// A client-facing account of a decode error: the path of the part at fault (the member serde
/// stopped in, read from the input up to its position) and what is wrong with it, in words of
/// the request rather than of the library (no "line 1 column N", no "missing field `x`").
pub fn describe(e: &serde_json::Error, input: &str, prefix: &str) -> String {
    let offset = byte_offset(input, e.line(), e.column());
    let msg = e.to_string();
    let msg = msg.split(" at line ").next().unwrap_or("");
    // serde reports a missing field at the end of its object: the object is the part.
    let missing = msg.starts_with("missing field `");
    let mut path = prefix.to_owned();
    path.push_str(&path_at(input, offset, missing));
    let mut path = match path.strip_prefix('.') {
        Some(p) => p.to_owned(),
        None => path,
    };
    if path.is_empty() {
        path.push_str("the request body");
    }
    match e.classify() {
        serde_json::error::Category::Data => {
            if let Some(field) = msg
                .strip_prefix("missing field `")
                .and_then(|f| f.strip_suffix('`'))
            {
                return format!("{path}.{field} is required");
            }
            if let Some((_, expected)) = msg.split_once(", expected ") {
                return format!("{path} must be {expected}");
            }
            if let Some(field) = msg
                .strip_prefix("duplicate field `")
                .and_then(|f| f.strip_suffix('`'))
            {
                return format!("{path}.{field} appears twice");
            }
            format!("{path} has a value this request cannot take")
        }
        serde_json::error::Category::Eof => format!("{path}: the JSON ends early"),
        _ => format!("{path}: not valid JSON"),
    }
}

/// serde's (line, column) position (both from 1; 0 when unknown) as a byte offset.
fn byte_offset(input: &str, line: usize, column: usize) -> usize {
    if line == 0 {
        return input.len();
    }
    let start: usize = input
        .split_inclusive('\n')
        .take(line - 1)
        .map(str::len)
        .sum();
    (start + column.saturating_sub(1)).min(input.len())
}

/// The path (`.tools[8]`, `.messages[0].content`) of the innermost value that is open at byte
/// `end` of `input`, read by a scan that tracks objects, arrays, keys and strings; with
/// `object`, of the innermost object itself rather than its member. Used on the error path only.
fn path_at(input: &str, end: usize, object: bool) -> String {
    enum Frame {
        Obj(Option<String>),
        Arr(usize),
    }
    let bytes = input.as_bytes();
    let mut stack: Vec<Frame> = Vec::new();
    let mut i = 0;
    // Whether the string being read is an object key.
    let mut expect_key = false;
    while i < end.min(bytes.len()) {
        match bytes[i] {
            b'{' => {
                stack.push(Frame::Obj(None));
                expect_key = true;
            }
            b'[' => {
                stack.push(Frame::Arr(0));
                expect_key = false;
            }
            b'}' | b']' => {
                stack.pop();
            }
            b',' => match stack.last_mut() {
                Some(Frame::Arr(n)) => *n += 1,
                Some(Frame::Obj(k)) => {
                    *k = None;
                    expect_key = true;
                }
                None => {}
            },
            b'"' => {
                let start = i + 1;
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    if bytes[i] == b'\\' {
                        i += 1;
                    }
                    i += 1;
                }
                if expect_key {
                    if let Some(Frame::Obj(k)) = stack.last_mut() {
                        *k = Some(
                            input
                                .get(start..i.min(input.len()))
                                .unwrap_or("")
                                .to_owned(),
                        );
                    }
                    expect_key = false;
                }
            }
            _ => {}
        }
        i += 1;
    }
    if object {
        if let Some(Frame::Obj(k)) = stack.last_mut() {
            *k = None;
        }
    }
    let mut path = String::new();
    for f in &stack {
        match f {
            Frame::Obj(Some(k)) => {
                path.push('.');
                path.push_str(k);
            }
            Frame::Obj(None) => {}
            Frame::Arr(n) => {
                path.push('[');
                path.push_str(&n.to_string());
                path.push(']');
            }
        }
    }
    path
}

/// A function definition: OpenAI chat nests it in `function`, Responses flattens it.
#[derive(Deserialize)]
pub struct ToolDef<'a> {
    #[serde(rename = "type", default, borrow, deserialize_with = "opt_cow")]
    pub kind: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    pub name: Option<&'a RawValue>,
    #[serde(default, borrow)]
    pub description: Option<&'a RawValue>,
    #[serde(default, borrow)]
    pub parameters: Option<&'a RawValue>,
    #[serde(default)]
    pub strict: Option<bool>,
    #[serde(flatten)]
    pub rest: Rest,
}

impl<'a> ToolDef<'a> {
    /// The function tool, named `at` in errors (`tools[3]`) and `path` in the parts it has no
    /// counterpart for (`tools[]`): `None` when it has one, since such a member takes its tool
    /// with it (it may narrow what the tool does).
    pub fn tool(
        self,
        r: &mut Request<'a>,
        path: &str,
        at: &dyn Fn() -> String,
    ) -> Result<Option<Tool<'a>>, GwError> {
        let name = self
            .name
            .ok_or_else(|| bad(format!("{}.name is required", at())))?;
        let unmapped = r.unmapped.len();
        self.rest.note(r, path, at, &["type"]);
        if r.unmapped.len() > unmapped {
            return Ok(None);
        }
        Ok(Some(Tool {
            name: lit(name, "tool name")?,
            description: opt_lit(self.description, "tool description")?,
            parameters: object(self.parameters, "tool parameters")?,
            strict: self.strict == Some(true),
        }))
    }
}

#[derive(Deserialize)]
pub struct NamedChoice<'a> {
    #[serde(rename = "type", default, borrow, deserialize_with = "opt_cow")]
    pub kind: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    pub name: Option<&'a RawValue>,
    #[serde(default, borrow)]
    function: Option<NamedFn<'a>>,
    /// Anthropic: at most one tool call per turn.
    #[serde(default)]
    pub disable_parallel_tool_use: Option<bool>,
    #[serde(flatten)]
    pub rest: Rest,
}

#[derive(Deserialize)]
pub struct NamedFn<'a> {
    #[serde(borrow)]
    name: &'a RawValue,
}

/// OpenAI tool choice (chat or responses): a mode string or a named function.
pub fn openai_choice(raw: Option<&RawValue>) -> Result<Option<ToolChoice<'_>>, GwError> {
    let Some(raw) = raw else { return Ok(None) };
    let s = raw.get();
    if s.starts_with('"') {
        let mode: Cow<str> = from_json(s, || "tool_choice".to_owned())?;
        return Ok(Some(match &*mode {
            "none" => ToolChoice::None,
            "required" => ToolChoice::Required,
            _ => ToolChoice::Auto,
        }));
    }
    let c: NamedChoice = from_json(s, || "tool_choice".to_owned())?;
    let name = c.function.map(|f| f.name).or(c.name);
    match name {
        Some(n) if c.rest.is_empty() => Ok(Some(ToolChoice::Named(lit(n, "tool_choice name")?))),
        // A hosted tool forced, or `allowed_tools` (a subset of the tools): dropping either
        // would let the model use tools the client did not allow, so it is refused.
        _ => Err(bad(format!(
            "tool_choice of type {:?} has no counterpart in this model's upstream dialect (only \
             none, auto, required and a named function do)",
            c.kind.as_deref().unwrap_or("")
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn optional_strings_borrow_unless_escaped() {
        #[derive(serde::Deserialize)]
        struct S<'a> {
            #[serde(default, borrow, deserialize_with = "opt_cow")]
            a: Option<Cow<'a, str>>,
            #[serde(default, borrow, deserialize_with = "opt_cow")]
            b: Option<Cow<'a, str>>,
            #[serde(default, borrow, deserialize_with = "opt_cow")]
            c: Option<Cow<'a, str>>,
        }
        let s: S = serde_json::from_str(r#"{"a":"plain","b":"q\"x","c":null}"#).unwrap();
        assert!(matches!(s.a, Some(Cow::Borrowed("plain"))));
        assert!(matches!(s.b.as_deref(), Some("q\"x")));
        assert!(matches!(s.b, Some(Cow::Owned(_))));
        assert!(s.c.is_none());
    }
}
