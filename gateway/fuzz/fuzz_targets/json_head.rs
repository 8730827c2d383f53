#![no_main]
//! The native route's head parser and its model replacement on arbitrary bodies: it agrees with
//! serde_json (the reference parse) on what it accepts and what it finds, and a spliced body
//! still parses.
use gateway::json;
use gateway::dialect::body_head;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let ours = body_head::parse_body_head(data);
    let reference = body_head::parse_body_head_with_serde(data);
    let top_is_array = data.iter().find(|c| !c.is_ascii_whitespace()) == Some(&b'[');
    match (&ours, &reference) {
        (Ok(a), Ok(b)) => assert_eq!(
            (&a.model, a.stream, a.model_span),
            (&b.model, b.stream, b.model_span)
        ),
        (Err(_), Err(_)) => {}
        // serde reads a struct from an array; the native route refuses anything but an object.
        (Err(_), Ok(_)) if top_is_array => {}
        _ => panic!(
            "scanner and serde disagree: {:?} vs {:?}",
            ours.is_ok(),
            reference.is_ok()
        ),
    }
    if let Ok(h) = ours {
        let (s, e) = h.model_span;
        assert!(s < e && e <= data.len());
        let mut out = Vec::with_capacity(data.len());
        out.extend_from_slice(&data[..s]);
        out.extend_from_slice(b"\"x\"");
        out.extend_from_slice(&data[e..]);
        // The spliced body still parses and carries the new model.
        let h2 = body_head::parse_body_head(&out).expect("spliced body parses");
        assert_eq!(h2.model, "x");
        assert_eq!(h2.stream, h.stream);
    }
    if let Some([model, usage]) = json::find_members(data, ["model", "usage"]) {
        for (s, e) in model.into_iter().chain(usage) {
            assert!(s <= e && e <= data.len());
        }
    }
});
