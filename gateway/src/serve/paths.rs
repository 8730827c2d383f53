//! The request paths the gateway serves, as data: the client routes (which `worker::route`
//! dispatches by), each with every stream flag and every provider kind, native or bridged as
//! `provider::upstream_dialect` decides, and the config postures that change the path
//! ([`crate::config::postures`]). `gateway paths` prints it; the training coverage gate reads it.

use serde_json::{json, Value};

use crate::config::{postures, Config};
use crate::dialect::Dialect;
use crate::provider::upstream::ProviderKind;
use crate::provider::upstream_dialect;

/// The client routes: `POST` to the path speaks the dialect.
pub const CLIENT_ROUTES: [(&str, Dialect); 3] = [
    ("/v1/chat/completions", Dialect::Chat),
    ("/v1/messages", Dialect::Messages),
    ("/v1/responses", Dialect::Responses),
];

/// Other paths the gateway answers (`GET`).
pub const OTHER_ROUTES: [&str; 3] = ["/v1/models", "/livez", "/readyz"];

/// The dialect of a client route.
pub fn client_dialect(path: &str) -> Option<Dialect> {
    CLIENT_ROUTES
        .iter()
        .find(|(p, _)| *p == path)
        .map(|&(_, d)| d)
}

/// Every (route, stream, provider kind) the gateway serves, and every posture; with `config`, also
/// the postures that config turns on.
pub fn matrix(config: Option<&Config>) -> Value {
    let mut combinations = Vec::new();
    for (endpoint, dialect) in CLIENT_ROUTES {
        for stream in [false, true] {
            for kind in ProviderKind::ALL {
                let up = upstream_dialect(dialect, kind);
                combinations.push(json!({
                    "endpoint": endpoint,
                    "dialect": dialect.name(),
                    "stream": stream,
                    "upstream": kind.name(),
                    "upstream_dialect": up.name(),
                    "route": if up == dialect { "native" } else { "bridged" },
                }));
            }
        }
    }
    let all: Vec<Value> = postures::POSTURES
        .iter()
        .map(|p| json!({"name": p.name, "what": p.what}))
        .collect();
    let mut out = json!({"combinations": combinations, "postures": all});
    if let Some(c) = config {
        out["enabled_postures"] = json!(postures::enabled(c));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_route_stream_and_kind_once() {
        let m = matrix(None);
        let combos = m["combinations"].as_array().unwrap();
        assert_eq!(
            combos.len(),
            CLIENT_ROUTES.len() * 2 * ProviderKind::ALL.len()
        );
        let bridged = combos.iter().filter(|c| c["route"] == "bridged").count();
        assert_eq!(bridged, 6, "{combos:?}");
        assert_eq!(client_dialect("/v1/messages"), Some(Dialect::Messages));
        assert_eq!(client_dialect("/v1/models"), None);
    }
}
