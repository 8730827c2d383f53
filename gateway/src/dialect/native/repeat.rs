//! The native stream's shortcut for a frame like the last: a stream's frames differ mostly in one
//! string (a delta's text) and, in some dialects, a number after it (Responses' sequence number),
//! so a frame that is the last one checked whole but for another plain string and another
//! integer in those places is the same JSON object with the same members: its copy is the kept
//! copy with the two in their places, and its keys' spans are the kept ones moved by their change
//! of length. Such a frame is compared, not scanned.

use bytes::BytesMut;

use super::{Spans, RENAMED};
use crate::json;

/// The last frame checked whole, its copy with the model renamed and its keys' spans, and where
/// it differed from the frame checked whole before it.
#[derive(Default)]
pub(super) struct Repeat {
    frame: Vec<u8>,
    copy: Vec<u8>,
    spans: Spans,
    varying: Option<Varying>,
    /// Frames checked whole since the last one compared, once a varying place was known: a
    /// stream whose frames differ elsewhere stops paying for looking for one after eight, but
    /// for every eighth frame.
    fruitless: u32,
}

/// Where the kept frame varies.
#[derive(Clone, Copy)]
struct Varying {
    /// The string (quotes included): its start in the frame and in the copy, its end in the
    /// frame.
    start: usize,
    copy_start: usize,
    end: usize,
    /// An unsigned integer after it that varies too: its span in the frame, its start in the
    /// copy.
    number: Option<(usize, usize, usize)>,
}

impl Repeat {
    /// When `data` is the kept frame but for another plain string (and another integer) in the
    /// varying places: its copy appended to `out` and its keys' spans.
    pub(super) fn copy(&mut self, data: &[u8], out: &mut BytesMut) -> Option<Spans> {
        let v = self.varying?;
        let frame = &self.frame[..];
        let tail = v.number.map_or(v.end, |(_, e, _)| e);
        let after = frame.len() - tail;
        let (end, text) = json::literal_in_place(frame, v.start, after, data)?;
        text?;
        let fixed = data.len() - after;
        // The new integer's start, after the same bytes as in the kept frame.
        let number = match v.number {
            None if end == fixed => None,
            None => return None,
            Some((ns, _, _)) => {
                let at = end + (ns - v.end);
                if at > fixed || data[end..at] != frame[v.end..ns] || !integer(&data[at..fixed]) {
                    return None;
                }
                Some(at)
            }
        };
        let copy = &self.copy[..];
        out.extend_from_slice(&copy[..v.copy_start]);
        out.extend_from_slice(&data[v.start..end]);
        let rest = v.copy_start + (v.end - v.start);
        match (number, v.number) {
            (Some(at), Some((ns, ne, cs))) => {
                out.extend_from_slice(&copy[rest..cs]);
                out.extend_from_slice(&data[at..fixed]);
                out.extend_from_slice(&copy[cs + (ne - ns)..]);
            }
            _ => out.extend_from_slice(&copy[rest..]),
        }
        self.fruitless = 0;
        // Every span holds a varying place or lies apart from it: an end at or after one moves.
        let moved = |p: usize| {
            if p >= tail {
                p - tail + fixed
            } else if p >= v.end {
                p - v.end + end
            } else {
                p
            }
        };
        Some(self.spans.map(|s| s.map(|(a, b)| (moved(a), moved(b)))))
    }

    /// Keeps `data`, checked whole, with its copy and spans, and where it differs from the frame
    /// kept before, when that is one string value the copy keeps as it is (and an integer after
    /// it).
    pub(super) fn keep(&mut self, data: &[u8], copy: &[u8], spans: Spans) {
        if self.varying.is_some() || self.fruitless > 0 {
            self.fruitless += 1;
        }
        if self.fruitless >= 8 && !self.fruitless.is_multiple_of(8) {
            self.varying = None;
            return;
        }
        if data.len() > KEEP_MAX || copy.len() > KEEP_MAX {
            self.forget();
            return;
        }
        let first = json::common_prefix(&self.frame, data);
        let same_end = json::common_suffix(&self.frame, data);
        let last = data.len().saturating_sub(same_end + 1).max(first);
        self.varying = varying(data, copy, first, last);
        self.frame.clear();
        self.frame.extend_from_slice(data);
        self.copy.clear();
        self.copy.extend_from_slice(copy);
        self.spans = spans;
    }

    /// The bytes its two buffers hold allocated.
    #[cfg(test)]
    pub(super) fn kept_capacity(&self) -> usize {
        self.frame.capacity() + self.copy.capacity()
    }

    pub(super) fn forget(&mut self) {
        self.frame.clear();
        self.varying = None;
    }
}

/// The largest frame (and copy) kept, so that the two buffers a native stream holds for its life
/// stay small: a delta's frame is a few hundred bytes, while a stream's first and last frames can
/// carry the request's instructions and tools (Responses echoes them in `response.created`).
pub(super) const KEEP_MAX: usize = 1024;

/// How far past the varying string a varying integer may end.
const NUMBER_WITHIN: usize = 128;

/// Whether `digits` is an unsigned integer as JSON writes one (no leading zero), of at most 19
/// digits (a sequence number; longer ones are checked whole).
fn integer(digits: &[u8]) -> bool {
    matches!(digits.len(), 1..=19)
        && digits.iter().all(u8::is_ascii_digit)
        && (digits[0] != b'0' || digits.len() == 1)
}

/// Where `data` (a checked frame, `copy` its copy) varies when its bytes from `first` to `last`
/// differ from the frame before: the string value that holds `first` past its opening quote,
/// when the copy keeps it as it is (not a member name, not the value of a member the copy
/// renames, nor of one whose name has escapes, which might decode to it); and when `last` lies
/// past that string, the unsigned integer value that holds it. The copy has the same strings in
/// the same order, some renamed, so a place in the copy is found by the strings' ranks.
fn varying(data: &[u8], copy: &[u8], first: usize, last: usize) -> Option<Varying> {
    let mut literals = json::literals(data).enumerate();
    let mut before: Option<(usize, usize)> = None;
    let (rank, start, end) = loop {
        let (rank, (s, e)) = literals.next()?;
        if first <= s {
            return None;
        }
        if first < e {
            break (rank, s, e);
        }
        before = Some((s, e));
    };
    if data[end..].iter().find(|&&c| !json::is_ws(c)) == Some(&b':') {
        return None;
    }
    if let Some((ns, ne)) = before {
        let between = &data[ne..start];
        if between.iter().all(|&c| json::is_ws(c) || c == b':') && between.contains(&b':') {
            let name = &data[ns + 1..ne - 1];
            if name == RENAMED.as_bytes() || name.contains(&b'\\') {
                return None;
            }
        }
    }
    let (copy_start, copy_end) = json::literals(copy).nth(rank)?;
    if copy[copy_start..copy_end] != data[start..end] {
        return None;
    }
    let mut v = Varying {
        start,
        copy_start,
        end,
        number: None,
    };
    if last < end {
        return Some(v);
    }
    // The integer that holds `last`: digits only, a value (after `:`, `,` or `[`, before `,`,
    // `}` or `]`), close past the string (a delta's sequence number is a member or two after
    // it; frames that differ further apart are not walked for one).
    if last - end > NUMBER_WITHIN || !data[last].is_ascii_digit() {
        return None;
    }
    let mut s = last;
    while s > end && data[s - 1].is_ascii_digit() {
        s -= 1;
    }
    let mut e = last;
    while data.get(e).is_some_and(u8::is_ascii_digit) {
        e += 1;
    }
    if s == e || !integer(&data[s..e]) {
        return None;
    }
    let before_number = data[end..s].iter().rev().find(|&&c| !json::is_ws(c));
    let after_number = data[e..].iter().find(|&&c| !json::is_ws(c));
    if !matches!(before_number, Some(b':' | b',' | b'['))
        || !matches!(after_number, Some(b',' | b'}' | b']'))
    {
        return None;
    }
    // Its place in the copy: as far after the last string before it as in the frame (no string
    // lies between to be renamed), that string found in the copy by its rank. A number inside a
    // string is none.
    let (mut r, mut le) = (rank, end);
    for (k, (ls, lend)) in literals {
        if ls > s {
            break;
        }
        if lend > s {
            return None;
        }
        (r, le) = (k, lend);
    }
    let copy_at = if r == rank {
        copy_end + (s - le)
    } else {
        json::literals(copy).nth(r)?.1 + (s - le)
    };
    v.number = Some((s, e, copy_at));
    Some(v)
}
