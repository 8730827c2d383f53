use super::*;
use bytes::BytesMut;

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
                let walk = |x: &[u8], y: &[u8]| x.iter().zip(y).take_while(|(p, q)| p == q).count();
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
