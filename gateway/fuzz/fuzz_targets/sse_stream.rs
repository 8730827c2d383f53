#![no_main]
//! The SSE splitter on arbitrary bytes cut at arbitrary points, feeding every stream transform
//! (native passthrough for each dialect, and each translation pair) until the stream ends.
use bytes::BytesMut;
use gateway::dialect::error::GwError;
use gateway::dialect::transform::StreamTransform;
use gateway::dialect::{native, translate, Dialect};
use gateway::sse::SseSplitter;
use gateway_fuzz::{routes, DIALECTS};
use libfuzzer_sys::fuzz_target;

fn transforms() -> Vec<Box<dyn StreamTransform>> {
    let (gpt, claude) = routes();
    let mut v: Vec<Box<dyn StreamTransform>> = Vec::new();
    for d in DIALECTS {
        v.push(Box::new(native::NativeStream::new(
            d,
            gpt.alias_json.clone(),
        )));
        for (up, route) in [(Dialect::Chat, gpt), (Dialect::Messages, claude)] {
            v.push(
                translate::Translation {
                    client: d,
                    upstream: up,
                    include_usage: true,
                    namespaces: vec!["ns".to_owned()],
                    dropped: String::new(),
                }
                .stream(&route.alias),
            );
        }
    }
    v
}

fuzz_target!(|data: &[u8]| {
    // First byte: chunk size for the network cuts.
    let (step, body) = match data.split_first() {
        Some((s, rest)) => ((*s as usize % 64) + 1, rest),
        None => return,
    };
    for mut t in transforms() {
        let mut sp = SseSplitter::default();
        let mut out = BytesMut::new();
        let mut failed = false;
        for chunk in body.chunks(step) {
            sp.push(chunk);
            while let Some(ev) = sp.next_event() {
                if let Err(e) = t.on_event(&ev, &mut out) {
                    t.on_error(&e, &mut out);
                    failed = true;
                    break;
                }
                let _ = gateway::json::usage::scan_usage(&ev.data);
            }
            if failed {
                break;
            }
        }
        if !failed {
            let r = match sp.finish() {
                Some(ev) => t.on_event(&ev, &mut out),
                None => Ok(()),
            };
            if let Err(e) = r.and_then(|()| t.on_end(&mut out)) {
                t.on_error(&e, &mut out);
            }
        }
        let _ = GwError::timeout();
    }
});
