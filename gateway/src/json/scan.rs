//! The one-pass scan of a JSON object: checked by JSON's grammar and the top-level members named
//! located ([`scan_object`]), or copied on the way with a member's string value renamed, resumed
//! after the envelope a stream's frames repeat ([`copy_object_renaming`]).

use bytes::BytesMut;

use super::cursor::{scan, Kinds, ScanError, Sink, Top};
use super::memo::{
    Inner, Mark, Memo, INNER_LEVELS, MEMO_HEAD, MEMO_KEYS, MEMO_MARKS, MEMO_RENAMES,
};
use super::strings::decoded_is;

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

/// [`scan_object`]'s sink: watches nothing.
pub(super) struct Check;

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
pub(super) struct Renaming<'o> {
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
