#![no_main]
//! Every client dialect → every upstream dialect the gateway translates into, on arbitrary
//! bodies: an error is fine, a panic is not, a translated body is valid JSON, and an error's
//! message names the part in the request's terms, never the JSON library's (no "missing field",
//! no line and column), whether the alias drops nothing or every part it may.
use gateway::dialect::{translate, Dialect};
use gateway_fuzz::{routes, DIALECTS};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (gpt, claude) = routes();
    for client in DIALECTS {
        for (up, route) in [(Dialect::Chat, gpt), (Dialect::Messages, claude)] {
            let target = translate::Target {
                dialect: up,
                model_json: &route.deployments[0].upstream_json,
                max_tokens: route.deployments[0].provider.max_tokens_field,
            };
            // The betas Claude Code sends, and one a chat upstream has no counterpart for.
            let betas = b"claude-code-20250219,context-1m-2025-08-07";
            for drop in [&[][..], &route.drop[..]] {
                match translate::request(client, &target, data, Some(betas), drop) {
                    Ok((body, _t)) => {
                        serde_json::from_slice::<serde_json::Value>(&body)
                            .expect("translated body is JSON");
                    }
                    Err(e) => {
                        for internal in ["missing field", " at line ", " column ", "invalid type"] {
                            assert!(!e.message.contains(internal), "{:?}", e.message);
                        }
                    }
                }
            }
        }
    }
});
