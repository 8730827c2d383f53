//! Helpers the fuzz targets share. The targets call the gateway's library (`gateway/src/lib.rs`)
//! directly; only routes built through the real config parser are set up here.

use std::sync::{Arc, OnceLock};

use gateway::dialect::Dialect;
use gateway::routing::Route;

/// Routes for both provider kinds, built through the real config parser.
pub fn routes() -> &'static (Arc<Route>, Arc<Route>) {
    static R: OnceLock<(Arc<Route>, Arc<Route>)> = OnceLock::new();
    R.get_or_init(|| {
        let cfg = gateway::config::parse(
            br#"{"listen":"127.0.0.1:0","workers":1,
               "providers":{"o":{"kind":"openai","base_url":"http://127.0.0.1:9","api_key_env":"FUZZ_NO_KEY"},
                            "a":{"kind":"anthropic","base_url":"http://127.0.0.1:9","api_key_env":"FUZZ_NO_KEY"}},
               "models":{"gpt":{"provider":"o","model":"up-gpt",
                         "drop":["cache_control","context_management","top_k","output_config.format"]},
                         "claude":{"provider":"a","model":"up-claude",
                         "drop":["reasoning.summary","include","prompt_cache_key","client_metadata","metadata","store"]}}}"#,
        )
        .ok()
        .expect("fuzz config parses");
        (
            cfg.snapshot.routes["gpt"].clone(),
            cfg.snapshot.routes["claude"].clone(),
        )
    })
}

pub const DIALECTS: [Dialect; 3] = [Dialect::Chat, Dialect::Messages, Dialect::Responses];
