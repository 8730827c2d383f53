//! Writing JSON without `fmt`: string literals and decimal integers, as the stream encoders and
//! the access log write them several times per request.

use bytes::BufMut;

use super::swar::special_bytes;

/// Appends `s` as a JSON string literal. Stream encoders write their frames with this and a few
/// constant pieces instead of building a `serde_json::Value` per frame.
pub fn write_str(out: &mut impl BufMut, s: &str) {
    out.put_slice(b"\"");
    write_str_body(out, s);
    out.put_slice(b"\"");
}

/// Appends `s` escaped as [`write_str`] escapes it, without the quotes: for a frame whose
/// constant pieces around the string carry them.
pub fn write_str_body(out: &mut impl BufMut, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let b = s.as_bytes();
    // The part before the first byte to escape (usually all of it), found eight bytes at a time.
    let mut start = 0;
    while let Some(w) = b.get(start..start + 8) {
        let special = special_bytes(u64::from_le_bytes(w.try_into().expect("eight bytes")));
        if special != 0 {
            start += special.trailing_zeros() as usize / 8;
            break;
        }
        start += 8;
    }
    while b
        .get(start)
        .is_some_and(|&c| c >= 0x20 && c != b'"' && c != b'\\')
    {
        start += 1;
    }
    out.put_slice(&b[..start]);
    for (i, &c) in b.iter().enumerate().skip(start) {
        let esc: &[u8] = match c {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0..=0x1f => b"",
            _ => continue,
        };
        out.put_slice(&b[start..i]);
        if esc.is_empty() {
            out.put_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[(c >> 4) as usize],
                HEX[(c & 15) as usize],
            ]);
        } else {
            out.put_slice(esc);
        }
        start = i + 1;
    }
    out.put_slice(&b[start..]);
}

/// Appends a decimal integer (no `fmt` machinery: hot paths write several per request).
pub fn write_u64(out: &mut impl BufMut, n: u64) {
    let mut buf = [0u8; 20];
    let start = digits_into(&mut buf, n);
    out.put_slice(&buf[start..]);
}

/// Writes `n` in decimal at the end of `buf`, two digits at a time, and returns where it starts.
#[inline]
pub fn digits_into(buf: &mut [u8; 20], mut n: u64) -> usize {
    const PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
        2021222324252627282930313233343536373839\
        4041424344454647484950515253545556575859\
        6061626364656667686970717273747576777879\
        8081828384858687888990919293949596979899";
    let mut i = buf.len();
    while n >= 100 {
        let r = (n % 100) as usize * 2;
        n /= 100;
        i -= 2;
        buf[i..i + 2].copy_from_slice(&PAIRS[r..r + 2]);
    }
    if n >= 10 {
        let r = n as usize * 2;
        i -= 2;
        buf[i..i + 2].copy_from_slice(&PAIRS[r..r + 2]);
    } else {
        i -= 1;
        buf[i] = b'0' + n as u8;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;

    #[test]
    fn writes_json_strings_like_serde() {
        for s in [
            "",
            "plain",
            "q\"b\\s\n\r\t\u{1}\u{1f}",
            "é😀",
            "</script>",
            "eight by\"tes and more\\, \u{7f} and \u{1f} late",
            "a long plain string of more than eight bytes",
        ] {
            let mut out = BytesMut::new();
            write_str(&mut out, s);
            assert_eq!(
                std::str::from_utf8(&out).unwrap(),
                serde_json::to_string(s).unwrap()
            );
        }
        let mut out = BytesMut::new();
        let powers = (0..20).flat_map(|k| {
            let p = 10u64.pow(k);
            [p - 1, p, p + 1, p.saturating_mul(7) / 3]
        });
        for n in [0, 7, 10, 1234567890123, u64::MAX]
            .into_iter()
            .chain(powers)
        {
            out.clear();
            write_u64(&mut out, n);
            assert_eq!(&out[..], n.to_string().as_bytes());
        }
    }
}
