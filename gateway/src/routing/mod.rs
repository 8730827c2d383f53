//! Routing: the `models` section, which maps each client-visible alias to one provider and the
//! model name the provider knows, and the `GET /v1/models` listing of those aliases.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use serde_json::{Map, Value};

use crate::config::check::Checker;
use crate::provider::upstream::Provider;

/// Where one client-visible alias goes.
#[derive(Debug)]
pub struct Route {
    pub alias: String,
    pub upstream_model: String,
    /// The alias as a JSON string literal (quotes included), spliced into responses.
    pub alias_json: Bytes,
    /// The upstream model as a JSON string literal, spliced into native request bodies.
    pub upstream_json: Bytes,
    pub provider: Arc<Provider>,
}

/// The `models` section: every alias whose entry passes its checks and names a known provider.
pub fn section(
    c: &mut Checker,
    top: &Map<String, Value>,
    providers: &HashMap<String, Arc<Provider>>,
) -> HashMap<String, Arc<Route>> {
    let mut routes = HashMap::new();
    let Some(models) = c.named_section(top, "models", "model") else {
        return routes;
    };
    for (alias, v) in models {
        let path = format!("$.models.{alias}");
        let Some(o) = c.obj(v, &path) else {
            continue;
        };
        let prov = c.string(o, "provider", &path);
        let model = c.string(o, "model", &path);
        let provider = match prov {
            Some(p) => match providers.get(p) {
                Some(p) => Some(p.clone()),
                None => {
                    // A provider that failed its own checks was already reported.
                    let declared = top
                        .get("providers")
                        .and_then(Value::as_object)
                        .is_some_and(|ps| ps.contains_key(p));
                    if !declared {
                        c.err(
                            format!("{path}.provider"),
                            format!("unknown provider {p:?}"),
                        );
                    }
                    None
                }
            },
            None => None,
        };
        if let (Some(provider), Some(model)) = (provider, model) {
            routes.insert(
                alias.clone(),
                Arc::new(Route {
                    alias: alias.clone(),
                    upstream_model: model.to_owned(),
                    alias_json: json_string(alias),
                    upstream_json: json_string(model),
                    provider,
                }),
            );
        }
    }
    routes
}

/// The `GET /v1/models` body, in a form both OpenAI's and Anthropic's SDKs read. It never changes
/// between reloads, so it is rendered once per configuration.
pub fn models_body(routes: &HashMap<String, Arc<Route>>) -> Bytes {
    let mut names: Vec<&String> = routes.keys().collect();
    names.sort();
    let data: Vec<Value> = names
        .iter()
        .map(|n| {
            serde_json::json!({
                "id": n, "object": "model", "created": 0,
                "owned_by": routes[*n].provider.name,
                "type": "model", "display_name": n, "created_at": "1970-01-01T00:00:00Z",
            })
        })
        .collect();
    let first = names.first().map(|s| s.as_str()).unwrap_or("");
    let last = names.last().map(|s| s.as_str()).unwrap_or("");
    let models_body = serde_json::to_vec(&serde_json::json!({
        "object": "list", "data": data,
        "has_more": false, "first_id": first, "last_id": last,
    }))
    .expect("serializing a Value cannot fail");
    Bytes::from(models_body)
}

/// `s` as a JSON string literal, quotes included.
fn json_string(s: &str) -> Bytes {
    Bytes::from(serde_json::to_vec(s).expect("serializing a str cannot fail"))
}
