//! Byte-level JSON helpers for the hot paths: validate a document and locate a few top-level
//! values in one pass without a DOM ([`scan_object`]), rename a `model` value in stream frames,
//! write strings and integers without `fmt` ([`write`]), and read the token usage of an answer
//! ([`usage`]). Knows nothing of dialects or errors.

mod cursor;
mod find;
mod memo;
mod scan;
mod strings;
mod swar;
#[cfg(test)]
mod tests;
pub mod usage;
pub mod write;

pub use cursor::{ScanError, MAX_DEPTH};
pub use find::find_members;
pub use memo::{common_prefix, common_suffix, Memo};
pub use scan::{copy_object_renaming, scan_object, scan_object_locating};
pub use strings::{decode_str, is_ws, literal_in_place, literals, plain_str, string_end};
pub use write::{digits_into, write_str, write_str_body, write_u64};

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
