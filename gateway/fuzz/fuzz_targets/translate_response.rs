#![no_main]
//! Upstream (chat or messages) buffered responses → every client dialect.
use gateway::dialect::{translate, Dialect};
use gateway_fuzz::{routes, DIALECTS};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (gpt, claude) = routes();
    for client in DIALECTS {
        for (up, route) in [(Dialect::Chat, gpt), (Dialect::Messages, claude)] {
            let t = translate::Translation {
                client,
                upstream: up,
                include_usage: data.first().is_some_and(|b| b & 1 == 1),
                namespaces: vec!["ns".to_owned()],
                dropped: String::new(),
            };
            if let Ok(out) = t.response(data, &route.alias) {
                serde_json::from_slice::<serde_json::Value>(&out)
                    .expect("translated response is JSON");
            }
        }
    }
});
