//! Byte-level JSON helpers for the hot paths: validate a document and locate a few top-level
//! values in one pass without a DOM ([`scan_object`]), rename a `model` value in stream frames,
//! write strings and integers without `fmt` ([`write`]), and read the token usage of an answer
//! ([`usage`]). Knows nothing of dialects or errors.

mod swar;
pub mod usage;
pub mod write;

use std::borrow::Cow;

use bytes::BytesMut;

use swar::{has_byte, special_bytes};
pub use write::{digits_into, write_str, write_str_body, write_u64};

/// The deepest nesting accepted: serde_json's recursion limit, which the translated routes hit
/// when they parse a body.
pub const MAX_DEPTH: usize = 128;

/// Why [`scan_object`] refused a document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScanError {
    /// Not JSON (or not an object at the top): what was expected, and the byte offset.
    Syntax { what: &'static str, at: usize },
    /// Arrays and objects nested deeper than [`MAX_DEPTH`].
    TooDeep,
    /// The top-level member `keys[i]` appears twice.
    Duplicate(usize),
}

/// Checks that `body` is exactly one JSON object, by serde_json's grammar (strings without raw
/// control characters and with valid escapes, numbers without leading zeros, `true`/`false`/
/// `null`, no trailing commas, nothing but whitespace after it) and nested at most [`MAX_DEPTH`]
/// deep, and returns the byte range of the value of each top-level member named in `keys`
/// (names compared after decoding their escapes, which must form valid UTF-16, and checked to
/// be UTF-8, as serde requires of a struct's keys). The values are not interpreted, nor checked
/// to be UTF-8 (serde skips them unchecked too; the head parse validates the whole body once).
/// This is what serde_json does for a struct with these fields and the rest ignored, without
/// its generic skipping, but for depth: serde skips ignored values without a recursion limit,
/// this scan refuses nesting past [`MAX_DEPTH`] everywhere (a request body was refused there
/// before too, by a separate pass; a native stream frame that deep now ends the stream as not
/// JSON). The native route's head parse and a native stream's frame check are each one pass
/// over the bytes.
pub fn scan_object<const N: usize>(
    body: &[u8],
    keys: [&str; N],
) -> Result<[Option<(usize, usize)>; N], ScanError> {
    scan(body, keys, 0, &mut Check, None)
}

/// [`scan_object`], but the keys whose bit is set in `repeatable` (bit `i` for `keys[i]`) may
/// repeat, and for those the first one's span is returned: members located, as serde ignores a
/// member that is not one of a struct's fields, rather than fields read (which must be unique).
pub fn scan_object_locating<const N: usize>(
    body: &[u8],
    keys: [&str; N],
    repeatable: u32,
) -> Result<[Option<(usize, usize)>; N], ScanError> {
    scan(body, keys, repeatable, &mut Check, None)
}

/// [`scan_object`] of a native stream frame fused with its copy: the checked document is appended
/// to `out` on the way, with the string value (quotes included) of every member whose name is, as
/// written, `rename.0`, at any depth, replaced by `rename.1` (a stream frame's model renamed). One
/// pass over the bytes: each renamed span is written as the scan reaches it and the rest is copied
/// in runs, so no list of spans is kept and the frame is not walked a second time to copy it.
///
/// `memo` carries what the last document of the same stream taught: the frames of a stream repeat
/// their envelope (OpenAI's chat chunks start with the same id, object, created, model and
/// fingerprint, about 150 of their 200-odd bytes), and a prefix that is byte for byte the one
/// already read is not read again but resumed from ([`Memo`]); the result is the same either way.
///
/// Duplicates of a member in `keys` are refused as [`scan_object`] refuses them (serde's rule for
/// a struct's fields), except for the keys whose bit is set in `repeatable` (bit `i` for
/// `keys[i]`): for those the first one's span is returned (a member located, not a field read).
/// When the document is refused, `out` is left as it was.
pub fn copy_object_renaming<const N: usize>(
    out: &mut BytesMut,
    body: &[u8],
    keys: [&str; N],
    repeatable: u32,
    rename: (&str, &[u8]),
    memo: &mut Memo,
) -> Result<[Option<(usize, usize)>; N], ScanError> {
    const {
        assert!(
            N <= MEMO_KEYS,
            "a memo keeps the spans of at most MEMO_KEYS keys"
        )
    };
    let mark = out.len();
    let resume = memo.resume::<N>(body);
    let same = resume.as_ref().map_or(0, |r| r.at);
    let mut sink = Renaming {
        name: rename.0.as_bytes(),
        to: rename.1,
        out,
        copied: 0,
        memo,
        recording: true,
        top_marked: false,
    };
    let mut from = None;
    if let Some(r) = resume {
        for k in 0..r.renames {
            let (s, e) = sink.memo.renames[k];
            sink.replace(body, s as usize, e as usize);
        }
        from = Some((r.at, r.found, r.inner));
    }
    match scan(body, keys, repeatable, &mut sink, from) {
        Ok(found) => {
            sink.out.extend_from_slice(&body[sink.copied..]);
            sink.memo.keep(body, same);
            Ok(found)
        }
        Err(e) => {
            sink.out.truncate(mark);
            sink.memo.forget();
            Err(e)
        }
    }
}

/// The spans of a scan's keys (`None` for a key not found).
type Spans<const N: usize> = [Option<(usize, usize)>; N];

/// How many bytes of a document's head a [`Memo`] keeps, the top-level members it can resume at
/// (their starts within the head), the renamed strings it keeps, and the keys it knows the spans
/// of ([`copy_object_renaming`]'s `keys`).
const MEMO_HEAD: usize = 256;
const MEMO_MARKS: usize = 16;
const MEMO_RENAMES: usize = 4;
const MEMO_KEYS: usize = 3;

/// The head of the last document [`copy_object_renaming`] read, and the places in it where a scan
/// can resume: the start of each member's name within the first [`MEMO_HEAD`] bytes, at the top
/// level or inside a top-level member's value ([`Inner`]), with the spans of `keys` found before
/// it and the renamed strings before it. What the scan knows
/// at such a place depends only on the bytes before it (and the `"` there), so a document whose
/// first bytes are the same, up to and including that `"`, is read from there with the same
/// knowledge, and comes out the same as if read whole. Inline, so that it costs a stream no
/// allocation (712 bytes in the stream's state; `a_memo_is_small`).
#[derive(Clone)]
pub struct Memo {
    head: [u8; MEMO_HEAD],
    /// How much of `head` is the last document's (up to and including its last mark's `"`).
    len: usize,
    marks: [Mark; MEMO_MARKS],
    n_marks: usize,
    /// The renamed strings of the head, in order (spans in the document, quotes included).
    renames: [(u16, u16); MEMO_RENAMES],
    n_renames: usize,
}

/// A place where a scan can resume: a member's name starts at `at`, at the top level or, with
/// `inner`, inside a top-level member's value.
#[derive(Clone, Copy, Default)]
struct Mark {
    at: u16,
    /// How many of [`Memo::renames`] lie before it.
    renames: u8,
    /// `(0, 0)` for a key not found (a value's span is never empty).
    found: [(u16, u16); MEMO_KEYS],
    inner: Option<Inner>,
}

/// Where a mark inside a top-level member's value stands: the containers open in that value
/// (how many, and which are objects: bit k for the one opened k levels in; marks are kept only
/// [`INNER_LEVELS`] deep), and the top-level member it is in (its name's span, whether that has
/// escapes, where its value starts).
#[derive(Clone, Copy, Default)]
struct Inner {
    open: u8,
    objects: u8,
    name: (u16, u16),
    escaped: bool,
    start: u16,
}

/// How deep inside a top-level member's value marks are kept.
const INNER_LEVELS: usize = 8;

impl Default for Memo {
    fn default() -> Self {
        Memo {
            head: [0; MEMO_HEAD],
            len: 0,
            marks: [Mark::default(); MEMO_MARKS],
            n_marks: 0,
            renames: [(0, 0); MEMO_RENAMES],
            n_renames: 0,
        }
    }
}

impl Memo {
    /// The last mark that `body` shares the bytes up to, its `"` included: where to resume, the
    /// spans found before it and how many renamed strings lie before it. The marks after it and
    /// their renames are dropped (the scan records them again as it passes them); the head's
    /// bytes before it stay, being `body`'s.
    fn resume<const N: usize>(&mut self, body: &[u8]) -> Option<Resume<N>> {
        let same = common_prefix(&self.head[..self.len], body);
        let k = self.marks[..self.n_marks]
            .iter()
            .rposition(|m| (m.at as usize) < same);
        let Some(k) = k else {
            self.n_marks = 0;
            self.n_renames = 0;
            return None;
        };
        let m = self.marks[k];
        self.n_marks = k;
        self.n_renames = m.renames as usize;
        let mut found = [None; N];
        for (f, m) in found.iter_mut().zip(m.found) {
            *f = (m.1 != 0).then_some((m.0 as usize, m.1 as usize));
        }
        Some(Resume {
            at: m.at as usize,
            found,
            renames: m.renames as usize,
            inner: m.inner,
        })
    }

    /// After a document was read whole: its head, up to its last mark, is kept (the bytes before
    /// `same`, where the scan resumed, are there already).
    fn keep(&mut self, body: &[u8], same: usize) {
        let len = match self.n_marks {
            0 => 0,
            n => self.marks[n - 1].at as usize + 1,
        };
        if len > same {
            self.head[same..len].copy_from_slice(&body[same..len]);
        }
        self.len = len;
    }

    /// After a document was refused: nothing is resumed from it.
    fn forget(&mut self) {
        self.len = 0;
        self.n_marks = 0;
        self.n_renames = 0;
    }
}

/// Where a scan resumes ([`Memo::resume`]).
struct Resume<const N: usize> {
    at: usize,
    found: Spans<N>,
    renames: usize,
    inner: Option<Inner>,
}

/// How many last bytes `a` and `b` share, found eight at a time.
pub fn common_suffix(a: &[u8], b: &[u8]) -> usize {
    let n = a.len().min(b.len());
    let (a, b) = (&a[a.len() - n..], &b[b.len() - n..]);
    let mut k = 0;
    while k + 8 <= n {
        let (i, j) = (n - k - 8, n - k);
        let x = u64::from_be_bytes(a[i..j].try_into().expect("eight bytes"))
            ^ u64::from_be_bytes(b[i..j].try_into().expect("eight bytes"));
        if x != 0 {
            return k + x.trailing_zeros() as usize / 8;
        }
        k += 8;
    }
    while k < n && a[n - k - 1] == b[n - k - 1] {
        k += 1;
    }
    k
}

/// How many first bytes `a` and `b` share. A stream's frames usually share all of the kept
/// head, which one `memcmp` of the whole tells at a fraction of the cost of finding where they
/// part (eight bytes at a time), which is done only when they do.
pub fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    let n = a.len().min(b.len());
    if a[..n] == b[..n] {
        return n;
    }
    let mut i = 0;
    while i + 8 <= n {
        let x = u64::from_le_bytes(a[i..i + 8].try_into().expect("eight bytes"))
            ^ u64::from_le_bytes(b[i..i + 8].try_into().expect("eight bytes"));
        if x != 0 {
            return i + x.trailing_zeros() as usize / 8;
        }
        i += 8;
    }
    while i < n && a[i] == b[i] {
        i += 1;
    }
    i
}

/// What a scan does with the string values of the members it is told to watch: nothing for
/// [`scan_object`] (monomorphized away), the renaming copy for [`copy_object_renaming`].
trait Sink {
    /// Whether the value of a member named `name` (as written; `escaped` when it has escapes,
    /// which are then decoded before comparing) is handed to [`Sink::string`] if it is a string.
    fn watches(&self, name: &[u8], escaped: bool) -> bool;
    /// The string value of a watched member, at `start..end` of the document (quotes included).
    fn string(&mut self, body: &[u8], start: usize, end: usize);
    /// A top-level member's name starts at `at`; `found` are the spans of the keys before it.
    fn mark<const N: usize>(&mut self, at: usize, found: &[Option<(usize, usize)>; N]);
    /// A member's name starts at `at` inside the value of the top-level member `top`, with
    /// `open` containers open in that value (`objects` says which are objects).
    fn mark_inner(&mut self, at: usize, open: usize, objects: &Kinds, top: &Top);
}

/// The top-level member whose value a scan is in: its name's span (between the quotes), whether
/// the name has escapes, where its value starts.
#[derive(Clone, Copy, Default)]
struct Top {
    name: (usize, usize),
    escaped: bool,
    start: usize,
}

/// [`scan_object`]'s sink: watches nothing.
struct Check;

impl Sink for Check {
    #[inline(always)]
    fn watches(&self, _: &[u8], _: bool) -> bool {
        false
    }
    #[inline(always)]
    fn string(&mut self, _: &[u8], _: usize, _: usize) {}
    #[inline(always)]
    fn mark<const N: usize>(&mut self, _: usize, _: &[Option<(usize, usize)>; N]) {}
    #[inline(always)]
    fn mark_inner(&mut self, _: usize, _: usize, _: &Kinds, _: &Top) {}
}

/// [`copy_object_renaming`]'s sink: the document up to each watched string is copied, then the
/// replacement in its place; the marks and renames of the head go to the memo.
struct Renaming<'o> {
    name: &'o [u8],
    to: &'o [u8],
    out: &'o mut BytesMut,
    /// How much of the document is in `out` already.
    copied: usize,
    memo: &'o mut Memo,
    /// Whether marks are still recorded: not past a rename the memo has no room for.
    recording: bool,
    /// Whether the current top-level member's mark was recorded (marks inside its value copy
    /// its spans found).
    top_marked: bool,
}

impl Renaming<'_> {
    #[inline(always)]
    fn replace(&mut self, body: &[u8], start: usize, end: usize) {
        self.out.extend_from_slice(&body[self.copied..start]);
        self.out.extend_from_slice(self.to);
        self.copied = end;
    }
}

impl Sink for Renaming<'_> {
    /// Length and first byte are compared before the bytes, which spares most names a `memcmp`.
    #[inline(always)]
    fn watches(&self, name: &[u8], escaped: bool) -> bool {
        let want = self.name;
        if escaped {
            return decoded_is(name, want);
        }
        name.len() == want.len() && name.first() == want.first() && name == want
    }

    #[inline(always)]
    fn string(&mut self, body: &[u8], start: usize, end: usize) {
        self.replace(body, start, end);
        if self.recording {
            let m = &mut *self.memo;
            if m.n_renames < MEMO_RENAMES && end <= MEMO_HEAD {
                m.renames[m.n_renames] = (start as u16, end as u16);
                m.n_renames += 1;
            } else {
                self.recording = false;
            }
        }
    }

    #[inline(always)]
    fn mark<const N: usize>(&mut self, at: usize, found: &[Option<(usize, usize)>; N]) {
        let m = &mut *self.memo;
        self.top_marked = false;
        if !self.recording || at >= MEMO_HEAD || m.n_marks == MEMO_MARKS {
            return;
        }
        self.top_marked = true;
        let mut kept = [(0, 0); MEMO_KEYS];
        for (k, f) in kept.iter_mut().zip(found) {
            // Spans before `at` (< MEMO_HEAD) fit.
            *k = f.map_or((0, 0), |(s, e)| (s as u16, e as u16));
        }
        m.marks[m.n_marks] = Mark {
            at: at as u16,
            renames: m.n_renames as u8,
            found: kept,
            inner: None,
        };
        m.n_marks += 1;
    }

    #[inline(always)]
    fn mark_inner(&mut self, at: usize, open: usize, objects: &Kinds, top: &Top) {
        let m = &mut *self.memo;
        if !self.recording
            || !self.top_marked
            || at >= MEMO_HEAD
            || open > INNER_LEVELS
            || m.n_marks == MEMO_MARKS
        {
            return;
        }
        // The member's own mark, or one inside its value before this: the same spans found.
        let found = m.marks[m.n_marks - 1].found;
        m.marks[m.n_marks] = Mark {
            at: at as u16,
            renames: m.n_renames as u8,
            found,
            inner: Some(Inner {
                open: open as u8,
                objects: objects.0[0] as u8,
                name: (top.name.0 as u16, top.name.1 as u16),
                escaped: top.escaped,
                start: top.start as u16,
            }),
        };
        m.n_marks += 1;
    }
}

/// The one scan behind [`scan_object`] and [`copy_object_renaming`]; `resume` is where to start
/// instead of the beginning (a top-level member's name) and the spans found before it.
#[inline(always)]
fn scan<const N: usize, S: Sink>(
    body: &[u8],
    keys: [&str; N],
    repeatable: u32,
    sink: &mut S,
    resume: Option<(usize, Spans<N>, Option<Inner>)>,
) -> Result<[Option<(usize, usize)>; N], ScanError> {
    let mut c = Cursor {
        b: body,
        i: 0,
        sink,
        collecting: false,
        top: Top::default(),
    };
    let mut found = [None; N];
    let mut members = true;
    let mut inner = None;
    if let Some((at, before, inside)) = resume {
        c.i = at;
        found = before;
        inner = inside;
    } else {
        c.ws();
        if c.peek() != b'{' {
            return Err(c.syntax("a JSON object"));
        }
        c.i += 1;
        c.ws();
        if c.peek() == b'}' {
            c.i += 1;
            members = false;
        }
    }
    while members {
        let start;
        if let Some(r) = inner.take() {
            // Resumed at a member's name inside this top-level member's value.
            c.top = Top {
                name: (r.name.0 as usize, r.name.1 as usize),
                escaped: r.escaped,
                start: r.start as usize,
            };
            start = c.top.start;
            c.value_in(1, r.open as usize, Kinds([u64::from(r.objects), 0]), true)?;
        } else {
            if c.peek() != b'"' {
                return Err(c.syntax("a member name"));
            }
            c.sink.mark(c.i, &found);
            let name_start = c.i + 1;
            let escaped = c.string()?;
            let name_end = c.i - 1;
            c.ws();
            if c.peek() != b':' {
                return Err(c.syntax("`:`"));
            }
            c.i += 1;
            c.ws();
            start = c.i;
            c.collecting = c.sink.watches(&body[name_start..name_end], escaped);
            c.top = Top {
                name: (name_start, name_end),
                escaped,
                start,
            };
            c.value(1)?;
        }
        let end = c.i;
        let (name_start, escaped) = (c.top.name.0, c.top.escaped);
        let name = &body[name_start..c.top.name.1];
        let which = if escaped {
            let at = name_start;
            let name = decode_str(name).map_err(|what| ScanError::Syntax { what, at })?;
            keys.iter().position(|k| *k == name)
        } else {
            if !name.is_ascii() && std::str::from_utf8(name).is_err() {
                return Err(ScanError::Syntax {
                    what: "a UTF-8 member name",
                    at: name_start,
                });
            }
            keys.iter().position(|k| k.as_bytes() == name)
        };
        if let Some(k) = which {
            if found[k].is_none() {
                found[k] = Some((start, end));
            } else if repeatable >> k & 1 == 0 {
                return Err(ScanError::Duplicate(k));
            }
        }
        c.ws();
        match c.peek() {
            b',' => {
                c.i += 1;
                c.ws();
            }
            b'}' => {
                c.i += 1;
                members = false;
            }
            _ => return Err(c.syntax("`,` or `}`")),
        }
    }
    c.ws();
    if c.i != body.len() {
        return Err(c.syntax("the end of the document"));
    }
    Ok(found)
}

/// The byte ranges of the values of the top-level members named in `keys` (names compared with
/// their escapes decoded, the first of each), or `None` when `body` does not start as a JSON
/// object. Nothing is validated and the walk stops once every key is found: this is for locating
/// a few members of an upstream's answer, which is passed on as it is whether or not it is valid.
pub fn find_members<const N: usize>(
    body: &[u8],
    keys: [&str; N],
) -> Option<[Option<(usize, usize)>; N]> {
    let ws = |b: &[u8], mut i: usize| {
        while b.get(i).is_some_and(|&c| is_ws(c)) {
            i += 1;
        }
        i
    };
    let mut found = [None; N];
    let mut missing = N;
    let mut i = ws(body, 0);
    if body.get(i) != Some(&b'{') {
        return None;
    }
    i = ws(body, i + 1);
    while missing > 0 && body.get(i) == Some(&b'"') {
        let (name_end, name_escaped) = string_end_escaped(body, i)?;
        let name = &body[i + 1..name_end - 1];
        i = ws(body, name_end);
        if body.get(i) != Some(&b':') {
            break;
        }
        i = ws(body, i + 1);
        let start = i;
        i = match *body.get(i)? {
            b'"' => string_end(body, i)?,
            b'{' | b'[' => {
                let mut depth = 0usize;
                loop {
                    match *body.get(i)? {
                        b'"' => i = string_end(body, i)?,
                        b'{' | b'[' => {
                            depth += 1;
                            i += 1;
                        }
                        b'}' | b']' => {
                            depth -= 1;
                            i += 1;
                            if depth == 0 {
                                break i;
                            }
                        }
                        _ => i += 1,
                    }
                }
            }
            _ => {
                while !matches!(
                    body.get(i),
                    None | Some(b',' | b'}' | b']' | b' ' | b'\n' | b'\r' | b'\t')
                ) {
                    i += 1;
                }
                i
            }
        };
        let which = if name_escaped {
            keys.iter().position(|k| decoded_is(name, k.as_bytes()))
        } else {
            keys.iter().position(|k| k.as_bytes() == name)
        };
        if let Some(k) = which {
            if found[k].is_none() {
                found[k] = Some((start, i));
                missing -= 1;
            }
        }
        i = ws(body, i);
        if body.get(i) != Some(&b',') {
            break;
        }
        i = ws(body, i + 1);
    }
    Some(found)
}

/// Whether a member name written with escapes (`raw`, between its quotes) decodes to `want`.
#[cold]
fn decoded_is(raw: &[u8], want: &[u8]) -> bool {
    decode_str(raw).is_ok_and(|d| d.as_bytes() == want)
}

/// The text of a JSON string literal's contents (between the quotes; escapes already checked by
/// [`scan_object`]), escapes decoded; a `\u` escape must not leave a surrogate unpaired, and the
/// result must be UTF-8 (serde_json's rules for a string it decodes). Borrowed without escapes.
pub fn decode_str(raw: &[u8]) -> Result<Cow<'_, str>, &'static str> {
    const NOT_UTF8: &str = "valid UTF-8";
    if !raw.contains(&b'\\') {
        return std::str::from_utf8(raw)
            .map(Cow::Borrowed)
            .map_err(|_| NOT_UTF8);
    }
    let mut out = String::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        let Some(off) = raw[i..].iter().position(|&c| c == b'\\') else {
            out.push_str(std::str::from_utf8(&raw[i..]).map_err(|_| NOT_UTF8)?);
            break;
        };
        out.push_str(std::str::from_utf8(&raw[i..i + off]).map_err(|_| NOT_UTF8)?);
        i += off;
        let esc = *raw.get(i + 1).ok_or("an escape")?;
        i += 2;
        let ch = match esc {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => {
                let hi = hex4(raw.get(i..i + 4)).ok_or("four hex digits")?;
                i += 4;
                let code = match hi {
                    0xDC00..=0xDFFF => return Err("a leading surrogate before a trailing one"),
                    0xD800..=0xDBFF => {
                        if raw.get(i..i + 2) != Some(b"\\u".as_slice()) {
                            return Err("a trailing surrogate after a leading one");
                        }
                        let lo = hex4(raw.get(i + 2..i + 6)).ok_or("four hex digits")?;
                        if !(0xDC00..=0xDFFF).contains(&lo) {
                            return Err("a trailing surrogate after a leading one");
                        }
                        i += 6;
                        0x10000 + ((u32::from(hi) - 0xD800) << 10) + (u32::from(lo) - 0xDC00)
                    }
                    n => u32::from(n),
                };
                char::from_u32(code).expect("surrogates were paired")
            }
            _ => return Err("a valid escape"),
        };
        out.push(ch);
    }
    Ok(Cow::Owned(out))
}

fn hex4(digits: Option<&[u8]>) -> Option<u16> {
    let mut n = 0u16;
    for &d in digits? {
        n = n << 4 | (d as char).to_digit(16)? as u16;
    }
    Some(n)
}

/// A small deterministic generator (xorshift) for the randomized tests: `rand(n)` is below `n`.
#[cfg(test)]
pub(crate) fn test_rand(mut seed: u64) -> impl FnMut(usize) -> usize {
    move |n| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n as u64) as usize
    }
}

/// Which open containers are objects, a bit per level: [`MAX_DEPTH`] levels in two words, each
/// level's bit in one of them (a `u128` shifted by a variable amount costs a dozen instructions
/// per container opened and per element closed; a word's shift one).
struct Kinds([u64; 2]);

impl Kinds {
    #[inline(always)]
    fn set(&mut self, level: usize, object: bool) {
        let word = &mut self.0[level >> 6 & 1];
        let bit = 1u64 << (level & 63);
        if object {
            *word |= bit;
        } else {
            *word &= !bit;
        }
    }

    #[inline(always)]
    fn get(&self, level: usize) -> bool {
        self.0[level >> 6 & 1] >> (level & 63) & 1 == 1
    }
}

/// A position in a document being checked, and what is done on the way.
struct Cursor<'a, 's, S> {
    b: &'a [u8],
    i: usize,
    /// What is done with the string values of watched members.
    sink: &'s mut S,
    /// The value about to be read is a watched member's.
    collecting: bool,
    /// The top-level member whose value is being read (for the marks inside it).
    top: Top,
}

impl<S: Sink> Cursor<'_, '_, S> {
    /// The byte at the cursor, 0 past the end (0 is never valid where a token is expected).
    #[inline]
    fn peek(&self) -> u8 {
        self.b.get(self.i).copied().unwrap_or(0)
    }

    #[inline]
    fn ws(&mut self) {
        // Every whitespace byte is at most b' ': one comparison when there is none (the usual).
        while self.peek() <= b' ' {
            if !is_ws(self.peek()) {
                return;
            }
            self.i += 1;
        }
    }

    #[cold]
    fn syntax(&self, what: &'static str) -> ScanError {
        ScanError::Syntax { what, at: self.i }
    }

    /// One value of any kind, the cursor on its first byte; `depth` is how deeply the place it
    /// stands in is nested. Containers are walked with a stack of bits, not recursion.
    fn value(&mut self, depth: usize) -> Result<(), ScanError> {
        self.value_in(depth, 0, Kinds([0; 2]), false)
    }

    /// [`Cursor::value`] from inside it: `open` containers open below `depth` (`objects` says
    /// which are objects: bit k for the one opened k levels in), the cursor on a member's name
    /// in the innermost when `at_name` (a memo's mark).
    fn value_in(
        &mut self,
        depth: usize,
        mut open: usize,
        mut objects: Kinds,
        at_name: bool,
    ) -> Result<(), ScanError> {
        if at_name {
            self.member_name()?;
        }
        'value: loop {
            match self.peek() {
                b'"' => {
                    let start = self.i;
                    self.string()?;
                    if self.collecting {
                        self.sink.string(self.b, start, self.i);
                    }
                }
                c @ (b'{' | b'[') => {
                    self.collecting = false;
                    if depth + open >= MAX_DEPTH {
                        return Err(ScanError::TooDeep);
                    }
                    let object = c == b'{';
                    objects.set(open, object);
                    open += 1;
                    self.i += 1;
                    self.ws();
                    let close = if object { b'}' } else { b']' };
                    if self.peek() != close {
                        if object {
                            self.sink.mark_inner(self.i, open, &objects, &self.top);
                            self.member_name()?;
                        }
                        continue 'value;
                    }
                    self.i += 1;
                    open -= 1;
                }
                b't' => self.literal(b"true")?,
                b'f' => self.literal(b"false")?,
                b'n' => self.literal(b"null")?,
                b'-' | b'0'..=b'9' => self.number()?,
                _ => return Err(self.syntax("a value")),
            }
            self.collecting = false;
            // After a complete value: close what ends here, or go on to the next element.
            while open > 0 {
                self.ws();
                let object = objects.get(open - 1);
                match (self.peek(), object) {
                    (b',', _) => {
                        self.i += 1;
                        self.ws();
                        if object {
                            self.sink.mark_inner(self.i, open, &objects, &self.top);
                            self.member_name()?;
                        }
                        continue 'value;
                    }
                    (b'}', true) | (b']', false) => {
                        self.i += 1;
                        open -= 1;
                    }
                    (_, true) => return Err(self.syntax("`,` or `}`")),
                    (_, false) => return Err(self.syntax("`,` or `]`")),
                }
            }
            return Ok(());
        }
    }

    /// A member name and its colon inside a nested object, leaving the cursor on the value.
    #[inline(always)]
    fn member_name(&mut self) -> Result<(), ScanError> {
        if self.peek() != b'"' {
            return Err(self.syntax("a member name"));
        }
        let start = self.i + 1;
        let escaped = self.string()?;
        self.collecting = self.sink.watches(&self.b[start..self.i - 1], escaped);
        self.ws();
        if self.peek() != b':' {
            return Err(self.syntax("`:`"));
        }
        self.i += 1;
        self.ws();
        Ok(())
    }

    /// A string literal, the cursor on its opening quote; returns whether it has escapes. Runs of
    /// plain bytes are skipped eight at a time.
    #[inline(always)]
    fn string(&mut self) -> Result<bool, ScanError> {
        let b = self.b;
        let mut i = self.i + 1;
        let mut escaped = false;
        loop {
            while let Some(w) = b.get(i..i + 8) {
                let w = u64::from_le_bytes(w.try_into().expect("eight bytes"));
                let special = special_bytes(w);
                if special != 0 {
                    i += special.trailing_zeros() as usize / 8;
                    break;
                }
                i += 8;
            }
            match b.get(i) {
                Some(b'"') => {
                    self.i = i + 1;
                    return Ok(escaped);
                }
                Some(b'\\') => {
                    escaped = true;
                    match b.get(i + 1) {
                        Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => i += 2,
                        Some(b'u') => {
                            if hex4(b.get(i + 2..i + 6)).is_none() {
                                self.i = i;
                                return Err(self.syntax("four hex digits after \\u"));
                            }
                            i += 6;
                        }
                        _ => {
                            self.i = i;
                            return Err(self.syntax("a valid escape"));
                        }
                    }
                }
                Some(c) if *c < 0x20 => {
                    self.i = i;
                    return Err(self.syntax("no control character in a string"));
                }
                Some(_) => i += 1,
                None => {
                    self.i = i;
                    return Err(self.syntax("the end of a string"));
                }
            }
        }
    }

    fn literal(&mut self, word: &[u8]) -> Result<(), ScanError> {
        if self.b.get(self.i..self.i + word.len()) != Some(word) {
            return Err(self.syntax("`true`, `false` or `null`"));
        }
        self.i += word.len();
        Ok(())
    }

    fn number(&mut self) -> Result<(), ScanError> {
        let digit = |c: Option<&u8>| matches!(c, Some(b'0'..=b'9'));
        let b = self.b;
        let mut i = self.i;
        if b.get(i) == Some(&b'-') {
            i += 1;
        }
        match b.get(i) {
            Some(b'0') => {
                i += 1;
                if digit(b.get(i)) {
                    self.i = i;
                    return Err(self.syntax("no leading zero in a number"));
                }
            }
            Some(b'1'..=b'9') => {
                while digit(b.get(i)) {
                    i += 1;
                }
            }
            _ => {
                self.i = i;
                return Err(self.syntax("a digit"));
            }
        }
        if b.get(i) == Some(&b'.') {
            i += 1;
            if !digit(b.get(i)) {
                self.i = i;
                return Err(self.syntax("a digit after the decimal point"));
            }
            while digit(b.get(i)) {
                i += 1;
            }
        }
        if let Some(b'e' | b'E') = b.get(i) {
            i += 1;
            if let Some(b'+' | b'-') = b.get(i) {
                i += 1;
            }
            if !digit(b.get(i)) {
                self.i = i;
                return Err(self.syntax("a digit in the exponent"));
            }
            while digit(b.get(i)) {
                i += 1;
            }
        }
        self.i = i;
        Ok(())
    }
}

/// End (exclusive) of the JSON string literal starting at `start`, if one starts there. Most
/// strings are short (keys, ids): the first 32 bytes are searched eight at a time, the rest of a
/// long one with memchr's vector search.
pub fn string_end(data: &[u8], start: usize) -> Option<usize> {
    string_end_escaped(data, start).map(|(end, _)| end)
}

/// Whether `c` is whitespace as JSON allows it between tokens (space, tab, line feed, carriage
/// return; not form feed, which `u8::is_ascii_whitespace` also counts).
#[inline]
pub fn is_ws(c: u8) -> bool {
    matches!(c, b' ' | b'\n' | b'\r' | b'\t')
}

/// The string literal at `start` of `frame`, when `frame` is `kept` but for another literal in the
/// place of the one `kept` has at `start`: the bytes before `start` and the last `after` bytes of
/// both are the same (what lies between the new literal's end and those last bytes is the
/// caller's to check). Its end and text as [`plain_str`] gives them. A stream's frames differ
/// from each other mostly in one string (a delta's text), so a frame is compared with the last
/// one read whole instead of scanned: the bridged streams' readers (`decode::fast::Template`) and
/// the native stream's copy (`dialect/native/repeat.rs`) both do it.
pub fn literal_in_place<'a>(
    kept: &[u8],
    start: usize,
    after: usize,
    frame: &'a [u8],
) -> Option<(usize, Option<&'a str>)> {
    if kept.len() < start + after || frame.len() < start + after + 2 {
        return None;
    }
    if frame[..start] != kept[..start] || frame[frame.len() - after..] != kept[kept.len() - after..]
    {
        return None;
    }
    plain_str(frame, start)
}

/// The string literal starting at `start`, as a stream's deltas usually are: *plain*, with no
/// escape and no control character, so that its contents are at once its text and its escaped
/// form as [`write_str_body`] writes it. Its end, and its text when it is plain and UTF-8 (`None`
/// otherwise, and the literal ended by [`string_end`]). One walk eight bytes at a time finds the
/// end, the plainness and whether every byte is ASCII, which needs no UTF-8 check after.
pub fn plain_str(data: &[u8], start: usize) -> Option<(usize, Option<&str>)> {
    const HIGH: u64 = 0x8080_8080_8080_8080;
    if data.get(start) != Some(&b'"') {
        return None;
    }
    // The high bits of every byte walked: a superset of the contents (a word's bytes past the
    // closing quote too), so that zero means they are all ASCII.
    let mut high = 0u64;
    let mut i = start + 1;
    while let Some(w) = data.get(i..i + 8) {
        let w = u64::from_le_bytes(w.try_into().expect("eight bytes"));
        high |= w;
        let special = special_bytes(w);
        if special != 0 {
            i += special.trailing_zeros() as usize / 8;
            break;
        }
        i += 8;
    }
    loop {
        match *data.get(i)? {
            b'"' => break,
            b'\\' | 0..=0x1f => return string_end(data, start).map(|end| (end, None)),
            c => {
                high |= u64::from(c);
                i += 1;
            }
        }
    }
    let contents = &data[start + 1..i];
    let text = if high & HIGH == 0 {
        // SAFETY: every byte of `contents` was walked above with its high bit clear: ASCII,
        // which is UTF-8.
        Some(unsafe { std::str::from_utf8_unchecked(contents) })
    } else {
        std::str::from_utf8(contents).ok()
    };
    Some((i + 1, text))
}

/// The string literals of a document already checked to be JSON, in order, as their spans
/// (quotes included): outside a string a quote starts one, so each is found from the end of the
/// one before. Member names are among them.
pub fn literals(data: &[u8]) -> impl Iterator<Item = (usize, usize)> + '_ {
    let mut i = 0;
    std::iter::from_fn(move || {
        let start = i + memchr::memchr(b'"', data.get(i..)?)?;
        let end = string_end(data, start)?;
        i = end;
        Some((start, end))
    })
}

/// [`string_end`], and whether the literal has an escape (a backslash) in it.
#[inline]
fn string_end_escaped(data: &[u8], start: usize) -> Option<(usize, bool)> {
    if data.get(start) != Some(&b'"') {
        return None;
    }
    let mut escaped = false;
    let mut i = start + 1;
    let short_until = i + 32;
    loop {
        if i < short_until {
            while let Some(w) = data.get(i..i + 8) {
                let w = u64::from_le_bytes(w.try_into().expect("eight bytes"));
                let hit = has_byte(w, b'"') | has_byte(w, b'\\');
                if hit != 0 {
                    i += hit.trailing_zeros() as usize / 8;
                    break;
                }
                i += 8;
            }
        } else {
            i += memchr::memchr2(b'"', b'\\', data.get(i..)?)?;
        }
        match *data.get(i)? {
            b'"' => return Some((i + 1, escaped)),
            b'\\' => {
                escaped = true;
                i += 2;
            }
            _ => i += 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where serde finds a top-level member (the implementation `find_members` replaced).
    fn serde_span(body: &[u8], key: &str) -> Option<(usize, usize)> {
        let v: std::collections::BTreeMap<String, &serde_json::value::RawValue> =
            serde_json::from_slice(body).ok()?;
        let raw = v.get(key)?.get();
        let start = raw.as_ptr() as usize - body.as_ptr() as usize;
        Some((start, start + raw.len()))
    }

    #[test]
    fn finds_top_level_members_where_serde_does() {
        let bodies = [
            r#"{"id":"x","model":"up-1","choices":[{"message":{"model":"inner","content":"\"model\":\"no\""}}],"usage":{"prompt_tokens":1}}"#,
            r#" { "usage" : {"a":[1,{"b":"}"}]} , "model" : "m" } "#,
            r#"{"model":null,"n":-1.5e3,"t":true,"usage":[]}"#,
            r#"{"x":{"model":"deep"},"y":["model"]}"#,
            r#"{}"#,
            r#"{"id":"x","mod\u0065l":"escaped","usage":{"prompt_tokens":1}}"#,
        ];
        for b in bodies {
            let b = b.as_bytes();
            let [model, usage] = find_members(b, ["model", "usage"]).unwrap();
            assert_eq!(
                model,
                serde_span(b, "model"),
                "{}",
                String::from_utf8_lossy(b)
            );
            assert_eq!(
                usage,
                serde_span(b, "usage"),
                "{}",
                String::from_utf8_lossy(b)
            );
        }
        assert_eq!(find_members(b"[1]", ["model"]), None);
        assert_eq!(find_members(b"", ["model"]), None);
        // Broken answers: whatever was found before the break, never a range outside the body.
        for cut in 0..bodies[0].len() {
            let b = &bodies[0].as_bytes()[..cut];
            if let Some(found) = find_members(b, ["model", "usage"]) {
                for (s, e) in found.into_iter().flatten() {
                    assert!(s <= e && e <= b.len());
                }
            }
        }
    }

    #[test]
    fn renames_model_strings_at_any_depth_while_copying() {
        let data = br#"{"message":{"model": "up-2024","x":{"model":"o\"q","t":"say \"model\":\"x\""}},"model":"up","n":{"model":3},"a":{"model":["s"]},"mod\u0065l":"esc"}"#;
        let mut out = BytesMut::from(&b"data: "[..]);
        let [error] = copy_object_renaming(
            &mut out,
            data,
            ["error"],
            0,
            ("model", br#""alias""#),
            &mut Memo::default(),
        )
        .unwrap();
        assert_eq!(error, None);
        let out = out.split_off(6);
        assert_eq!(
            std::str::from_utf8(&out).unwrap(),
            r#"{"message":{"model": "alias","x":{"model":"alias","t":"say \"model\":\"x\""}},"model":"alias","n":{"model":3},"a":{"model":["s"]},"mod\u0065l":"alias"}"#
        );
    }

    /// A memo changes nothing but the work: a stream of frames that share envelopes of every
    /// length (and broken ones among them) reads the same with a memo kept from frame to frame as
    /// with a fresh one each time.
    #[test]
    fn a_memo_reads_every_frame_as_a_fresh_scan_does() {
        let bases: [&[u8]; 6] = [
            br#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":17,"model":"up-2024","system_fingerprint":null,"choices":[{"index":0,"delta":{"content":"hi"},"logprobs":null,"finish_reason":null}],"obfuscation":"ab"}"#,
            br#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":17,"model":"up-2024","system_fingerprint":null,"choices":[],"usage":{"prompt_tokens":1},"model":"again"}"#,
            br#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x\"model\""}}"#,
            br#" { "id" : "c", "model" : "m", "error" : null , "x":{"model":"n"},"model":"o","model":"p","model":"q" } "#,
            br#"{"a":"b","mod\u0065l":"m","choices":[1],"choices":[2],"error":{"model":"z"},"c":1}"#,
            br#"{"x":[{"a":{"b":[{"c":{"model":"m","d":[{"e":{"f":{"g":{"h":{"i":{"model":"n","j":1}}}}}}]}}]}}],"model":"o","y":{"z":{"model":"p","q":[true,false,null,-1.5e3]}}}"#,
        ];
        let mut rand = test_rand(0x9E37_79B9_7F4A_7C15);
        let mut memo = Memo::default();
        let mut ok = 0;
        let mut base = 0;
        for _ in 0..20_000 {
            // Mostly the same base as the last frame, as a stream's frames are.
            if rand(4) == 0 {
                base = rand(bases.len());
            }
            let mut f = bases[base].to_vec();
            match rand(6) {
                0 => {}
                1 => {
                    let at = rand(f.len());
                    f[at] = b"\" :,{}[]0a\\x\n\x01"[rand(14)];
                }
                2 => f.truncate(rand(f.len() + 1)),
                3 => {
                    let at = rand(f.len());
                    f.insert(at, b" \"9,"[rand(4)]);
                }
                4 => {
                    let at = rand(f.len());
                    f.remove(at);
                }
                _ => {
                    let at = rand(f.len());
                    f[at..].reverse();
                }
            }
            let run = |memo: &mut Memo| {
                let mut out = BytesMut::from(&b"x"[..]);
                let r = copy_object_renaming(
                    &mut out,
                    &f,
                    ["error", "choices"],
                    0b10,
                    ("model", b"\"alias\""),
                    memo,
                );
                (r, out)
            };
            let kept = run(&mut memo);
            let fresh = run(&mut Memo::default());
            assert_eq!(kept, fresh, "{}", String::from_utf8_lossy(&f));
            ok += kept.0.is_ok() as usize;
        }
        assert!(ok > 5_000, "enough valid frames: {ok}");
    }

    /// Objects and arrays alternating across the two words of [`Kinds`]: every closing bracket
    /// must match its container's kind at every level.
    #[test]
    fn containers_close_by_their_kind_at_every_depth() {
        for n in [1usize, 30, 62, 63, 64, 65, 66, 100, 126] {
            let mut doc = String::from("{\"x\":");
            for k in 0..n {
                doc.push_str(if k % 2 == 0 { "[" } else { "{\"a\":" });
            }
            doc.push('1');
            for k in (0..n).rev() {
                doc.push(if k % 2 == 0 { ']' } else { '}' });
            }
            doc.push('}');
            assert!(scan_object(doc.as_bytes(), ["x"]).is_ok(), "depth {n}");
            // Each closing bracket in turn swapped for the other kind.
            let closes: Vec<usize> = doc.match_indices([']', '}']).map(|(i, _)| i).collect();
            for &at in &closes[..closes.len() - 1] {
                let mut bad = doc.clone().into_bytes();
                bad[at] = if bad[at] == b']' { b'}' } else { b']' };
                assert!(
                    scan_object(&bad, ["x"]).is_err(),
                    "depth {n}, swapped at {at}"
                );
            }
        }
    }

    /// A memo is part of every native stream's state: it stays under 0.8 KB.
    #[test]
    fn a_memo_is_small() {
        assert!(
            std::mem::size_of::<Memo>() <= 800,
            "{}",
            std::mem::size_of::<Memo>()
        );
    }

    /// A literal's end is where [`string_end`] finds it, and its text is given exactly when it
    /// has neither a backslash nor a control character and is UTF-8, wherever in its words the
    /// byte that decides falls.
    #[test]
    fn plain_str_ends_where_string_end_does() {
        let pieces: [&[u8]; 9] = [
            b"a",
            "é".as_bytes(),
            "😀".as_bytes(),
            b"\xc3",
            b"\\\"",
            b"\\n",
            b"\t",
            b"\x01",
            b"\x7f",
        ];
        for len in 0..20 {
            for (k, piece) in pieces.iter().enumerate() {
                for at in 0..=len {
                    let mut lit = b"\"".to_vec();
                    lit.extend(std::iter::repeat_n(b'x', at));
                    if k > 0 {
                        lit.extend_from_slice(piece);
                    }
                    lit.extend(std::iter::repeat_n(b'y', len - at));
                    lit.extend_from_slice("\",\"é\"".as_bytes());
                    let inner = &lit[1..lit.len() - 6];
                    let plain = !inner.iter().any(|&c| c == b'\\' || c < 0x20);
                    let text = std::str::from_utf8(inner).ok().filter(|_| plain);
                    let end = string_end(&lit, 0);
                    assert_eq!(end, Some(lit.len() - 5));
                    assert_eq!(plain_str(&lit, 0), end.map(|e| (e, text)), "{lit:?}");
                    let open = &lit[..lit.len() - 6];
                    assert_eq!(plain_str(open, 0), None, "{open:?}");
                }
            }
        }
        assert_eq!(plain_str(b" \"a\"", 0), None);
        assert_eq!(plain_str(b" \"a\"", 1), Some((4, Some("a"))));
    }

    /// A frame is the kept one but for its literal in the kept literal's place only when the
    /// bytes before that place and the kept tail are the same; the literal itself is read as
    /// `plain_str` reads it, whatever its length.
    #[test]
    fn literal_in_place_compares_head_and_tail_and_reads_the_literal() {
        let kept = br#"{"d":"ab","n":1}"#;
        let (start, after) = (5, 7);
        let read = |f: &'static [u8]| literal_in_place(kept, start, after, f);
        assert_eq!(read(br#"{"d":"ab","n":1}"#), Some((9, Some("ab"))));
        assert_eq!(read(br#"{"d":"","n":1}"#), Some((7, Some(""))));
        assert_eq!(
            read(br#"{"d":"a longer one","n":1}"#),
            Some((19, Some("a longer one")))
        );
        assert_eq!(read(br#"{"d":"a\nb","n":1}"#), Some((11, None)));
        // What lies between the literal and the tail is the caller's: here `,"n":1` again.
        assert_eq!(read(br#"{"d":"x","n":1,"n":1}"#), Some((8, Some("x"))));
        assert_eq!(read(br#"{"e":"ab","n":1}"#), None, "another head");
        assert_eq!(read(br#"{"d":"ab","n":2}"#), None, "another tail");
        assert_eq!(read(br#"{"d":7,"n":1}"#), None, "no literal in the place");
        assert_eq!(read(br#"{"d":"n":1}"#), None, "too short for a literal");
        assert_eq!(
            literal_in_place(b"{}", 1, 5, b"{\"a\"}   "),
            None,
            "kept too short"
        );
        for c in 0..=255u8 {
            assert_eq!(is_ws(c), b" \t\n\r".contains(&c), "{c}");
        }
    }

    /// The shared head and tail are where a byte-by-byte walk finds them, wherever in the
    /// words the first differing byte falls.
    #[test]
    fn common_prefix_and_suffix_end_at_the_first_difference() {
        let base: Vec<u8> = (0..40u8).collect();
        for n in [0, 1, 7, 8, 9, 23, 40] {
            let a = &base[..n];
            for at in 0..=n {
                for extra in [0usize, 3] {
                    let mut b = a.to_vec();
                    if at < n {
                        b[at] ^= 0x80;
                    }
                    b.splice(0..0, std::iter::repeat_n(b'x', extra));
                    let walk =
                        |x: &[u8], y: &[u8]| x.iter().zip(y).take_while(|(p, q)| p == q).count();
                    let rev = |x: &[u8]| x.iter().rev().copied().collect::<Vec<u8>>();
                    assert_eq!(
                        common_suffix(a, &b),
                        walk(&rev(a), &rev(&b)),
                        "{n} {at} {extra}"
                    );
                    let b = &b[extra..];
                    assert_eq!(common_prefix(a, b), walk(a, b), "{n} {at}");
                }
            }
        }
    }
}
