//! What a stream's last frame taught the scan ([`Memo`]): its head and the places in it where the
//! next frame's scan resumes, when that frame starts with the same bytes.

/// The spans of a scan's keys (`None` for a key not found).
pub(super) type Spans<const N: usize> = [Option<(usize, usize)>; N];

/// How many bytes of a document's head a [`Memo`] keeps, the top-level members it can resume at
/// (their starts within the head), the renamed strings it keeps, and the keys it knows the spans
/// of ([`copy_object_renaming`]'s `keys`).
pub(super) const MEMO_HEAD: usize = 256;
pub(super) const MEMO_MARKS: usize = 16;
pub(super) const MEMO_RENAMES: usize = 4;
pub(super) const MEMO_KEYS: usize = 3;

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
    pub(super) head: [u8; MEMO_HEAD],
    /// How much of `head` is the last document's (up to and including its last mark's `"`).
    pub(super) len: usize,
    pub(super) marks: [Mark; MEMO_MARKS],
    pub(super) n_marks: usize,
    /// The renamed strings of the head, in order (spans in the document, quotes included).
    pub(super) renames: [(u16, u16); MEMO_RENAMES],
    pub(super) n_renames: usize,
}

/// A place where a scan can resume: a member's name starts at `at`, at the top level or, with
/// `inner`, inside a top-level member's value.
#[derive(Clone, Copy, Default)]
pub(super) struct Mark {
    pub(super) at: u16,
    /// How many of [`Memo::renames`] lie before it.
    pub(super) renames: u8,
    /// `(0, 0)` for a key not found (a value's span is never empty).
    pub(super) found: [(u16, u16); MEMO_KEYS],
    pub(super) inner: Option<Inner>,
}

/// Where a mark inside a top-level member's value stands: the containers open in that value
/// (how many, and which are objects: bit k for the one opened k levels in; marks are kept only
/// [`INNER_LEVELS`] deep), and the top-level member it is in (its name's span, whether that has
/// escapes, where its value starts).
#[derive(Clone, Copy, Default)]
pub(super) struct Inner {
    pub(super) open: u8,
    pub(super) objects: u8,
    pub(super) name: (u16, u16),
    pub(super) escaped: bool,
    pub(super) start: u16,
}

/// How deep inside a top-level member's value marks are kept.
pub(super) const INNER_LEVELS: usize = 8;

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
    pub(super) fn resume<const N: usize>(&mut self, body: &[u8]) -> Option<Resume<N>> {
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
    pub(super) fn keep(&mut self, body: &[u8], same: usize) {
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
    pub(super) fn forget(&mut self) {
        self.len = 0;
        self.n_marks = 0;
        self.n_renames = 0;
    }
}

/// Where a scan resumes ([`Memo::resume`]).
pub(super) struct Resume<const N: usize> {
    pub(super) at: usize,
    pub(super) found: Spans<N>,
    pub(super) renames: usize,
    pub(super) inner: Option<Inner>,
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
