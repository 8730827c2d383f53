//! The gateway's parsing and translation modules, compiled from `gateway/src` as a library so
//! that the fuzz targets can call them (the gateway itself is a binary crate). Only the network
//! and process parts (`main`, `server`, `proxy`, `shutdown`) are left out.

#![allow(dead_code, unused_imports)]

#[path = "../../src/access_log.rs"]
pub mod access_log;
#[path = "../../src/auth.rs"]
pub mod auth;
#[path = "../../src/body.rs"]
pub mod body;
#[path = "../../src/config.rs"]
pub mod config;
#[path = "../../src/error.rs"]
pub mod error;
#[path = "../../src/json.rs"]
pub mod json;
#[path = "../../src/limits.rs"]
pub mod limits;
#[path = "../../src/metrics.rs"]
pub mod metrics;
#[path = "../../src/native.rs"]
pub mod native;
#[path = "../../src/provider/mod.rs"]
pub mod provider;
#[path = "../../src/sse.rs"]
pub mod sse;
#[path = "../../src/translate/mod.rs"]
pub mod translate;

use std::sync::{Arc, OnceLock};

/// Routes for both provider kinds, built through the real config parser.
pub fn routes() -> &'static (Arc<config::Route>, Arc<config::Route>) {
    static R: OnceLock<(Arc<config::Route>, Arc<config::Route>)> = OnceLock::new();
    R.get_or_init(|| {
        let cfg = config::parse(
            br#"{"listen":"127.0.0.1:0","workers":1,
               "providers":{"o":{"kind":"openai","base_url":"http://127.0.0.1:9","api_key_env":"FUZZ_NO_KEY"},
                            "a":{"kind":"anthropic","base_url":"http://127.0.0.1:9","api_key_env":"FUZZ_NO_KEY"}},
               "models":{"gpt":{"provider":"o","model":"up-gpt"},"claude":{"provider":"a","model":"up-claude"}}}"#,
        )
        .ok()
        .expect("fuzz config parses");
        (
            cfg.snapshot.routes["gpt"].clone(),
            cfg.snapshot.routes["claude"].clone(),
        )
    })
}

pub const DIALECTS: [error::Dialect; 3] = [
    error::Dialect::Chat,
    error::Dialect::Messages,
    error::Dialect::Responses,
];
