//! Locating a few top-level members of a document that is passed on as it is, unchecked.

use super::strings::{decoded_is, is_ws, string_end, string_end_escaped};

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
