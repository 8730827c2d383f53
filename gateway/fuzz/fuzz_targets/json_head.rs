#![no_main]
//! The native route's head parser and its model replacement on arbitrary bodies.
use gateway::json;
use gateway::serve::head;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(h) = head::parse_head(data) {
        let (s, e) = h.model_span;
        assert!(s < e && e <= data.len());
        let mut out = Vec::with_capacity(data.len());
        out.extend_from_slice(&data[..s]);
        out.extend_from_slice(b"\"x\"");
        out.extend_from_slice(&data[e..]);
        // The spliced body still parses and carries the new model.
        let h2 = head::parse_head(&out).expect("spliced body parses");
        assert_eq!(h2.model, "x");
        assert_eq!(h2.stream, h.stream);
    }
    if let Some((s, e)) = json::find_model_span(data) {
        assert!(s < e && e <= data.len());
    }
});
