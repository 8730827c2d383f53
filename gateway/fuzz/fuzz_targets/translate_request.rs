#![no_main]
//! Every client dialect → every upstream dialect the gateway translates into, on arbitrary
//! bodies: an error is fine, a panic is not, and a translated body is valid JSON.
use gateway::dialect::{translate, Dialect};
use gateway_fuzz::{routes, DIALECTS};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (gpt, claude) = routes();
    for client in DIALECTS {
        for (up, route) in [
            (Dialect::Chat, gpt),
            (Dialect::Messages, claude),
        ] {
            let model = &route.deployments[0].upstream_json;
            if let Ok((body, _t)) = translate::request(client, up, data, model) {
                serde_json::from_slice::<serde_json::Value>(&body)
                    .expect("translated body is JSON");
            }
        }
    }
});
