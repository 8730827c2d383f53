//! Word-at-a-time byte tests (SWAR: eight bytes of a `u64` at once) that the scanner and the
//! string writer use to skip runs of plain bytes.

/// The high bit of each byte of `w` that ends a run of plain string bytes: `"`, `\\` or a control
/// character. Only the lowest flagged byte is exact (a borrow can flag bytes above it), which is
/// all the callers use (the scanner's string walk, [`super::write::write_str`]).
#[inline]
pub(super) fn special_bytes(w: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    let control = w.wrapping_sub(ONES * 0x20) & !w & (ONES << 7);
    control | has_byte(w, b'"') | has_byte(w, b'\\')
}

/// The high bit of each byte of `w` equal to `b` (exact for the lowest one, which is all the
/// callers use: a borrow can flag a byte above a true one).
#[inline]
pub(super) fn has_byte(w: u64, b: u8) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    let x = w ^ (ONES * b as u64);
    x.wrapping_sub(ONES) & !x & (ONES << 7)
}
