#![no_main]
//! The native route's head parser and its model replacement on arbitrary bodies: it agrees with
//! serde_json (the reference parse) on what it accepts and what it finds, and a spliced body
//! still parses; and the native stream's frame check fused with its copy (with its memo kept
//! from input to input) agrees with the scan.
use gateway::json;
use gateway::dialect::body_head;
use libfuzzer_sys::fuzz_target;

thread_local! {
    /// The native stream's memo, kept from input to input as a stream keeps it from frame to
    /// frame (a fuzzer's inputs share prefixes, as a stream's frames do).
    static MEMO: std::cell::RefCell<json::Memo> = std::cell::RefCell::new(json::Memo::default());
}

fuzz_target!(|data: &[u8]| {
    // The native stream's fused check and copy accepts what the scan accepts and finds what it
    // finds, leaves nothing behind when it refuses, and reads the same with a kept memo.
    let keys = ["error", "choices"];
    let copy = |memo: &mut json::Memo| {
        let mut out = bytes::BytesMut::from(&b"data: "[..]);
        let r = json::copy_object_renaming(&mut out, data, keys, 0, ("model", b"\"x\""), memo);
        (r, out)
    };
    let (fresh, out) = copy(&mut json::Memo::default());
    assert_eq!(fresh, json::scan_object(data, keys));
    if fresh.is_err() {
        assert_eq!(&out[..], b"data: ");
    }
    let kept = MEMO.with(|m| copy(&mut m.borrow_mut()));
    assert_eq!(kept, (fresh, out));

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
