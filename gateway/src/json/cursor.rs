//! The scan's walk over a document: a [`Cursor`] checks JSON's grammar and nesting as it goes
//! and tells its [`Sink`] of the watched members' string values; [`scan`] walks an object's
//! top-level members with it, from the start or from where a [`super::memo::Memo`] resumes.

use super::memo::{Inner, Spans};
use super::strings::{decode_str, hex4, is_ws};
use super::swar::special_bytes;

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

/// What a scan does with the string values of the members it is told to watch: nothing for
/// [`scan_object`] (monomorphized away), the renaming copy for [`copy_object_renaming`].
pub(super) trait Sink {
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
pub(super) struct Top {
    pub(super) name: (usize, usize),
    pub(super) escaped: bool,
    pub(super) start: usize,
}

/// Which open containers are objects, a bit per level: [`MAX_DEPTH`] levels in two words, each
/// level's bit in one of them (a `u128` shifted by a variable amount costs a dozen instructions
/// per container opened and per element closed; a word's shift one).
pub(super) struct Kinds(pub(super) [u64; 2]);

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
pub(super) struct Cursor<'a, 's, S> {
    pub(super) b: &'a [u8],
    pub(super) i: usize,
    /// What is done with the string values of watched members.
    pub(super) sink: &'s mut S,
    /// The value about to be read is a watched member's.
    pub(super) collecting: bool,
    /// The top-level member whose value is being read (for the marks inside it).
    pub(super) top: Top,
}

impl<S: Sink> Cursor<'_, '_, S> {
    /// The byte at the cursor, 0 past the end (0 is never valid where a token is expected).
    #[inline]
    pub(super) fn peek(&self) -> u8 {
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
    pub(super) fn value(&mut self, depth: usize) -> Result<(), ScanError> {
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

/// The one scan behind [`scan_object`] and [`copy_object_renaming`]; `resume` is where to start
/// instead of the beginning (a top-level member's name) and the spans found before it.
#[inline(always)]
pub(super) fn scan<const N: usize, S: Sink>(
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
