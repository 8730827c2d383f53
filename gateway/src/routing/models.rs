//! The `models` config section, which maps each client-visible alias to its deployments, and the
//! `GET /v1/models` listing of those aliases.
//!
//! An alias has one deployment in the short form, or a list:
//!
//! ```json
//! "gpt":  { "provider": "up-openai", "model": "mock-gpt" },
//! "pool": { "strategy": "weighted",
//!           "deployments": [ { "provider": "a", "model": "m", "weight": 3, "priority": 0 },
//!                            { "provider": "b", "model": "m", "weight": 1 } ] }
//! ```

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use serde_json::{Map, Value};

use crate::checker::Checker;
use crate::provider::price::Price;
use crate::provider::upstream::Provider;
use crate::routing::alias_hash::AliasMap;
use crate::routing::policy::MAX_ATTEMPTS;
use crate::routing::route::{Deployment, Limits, Route, Strategy, Table};

/// The largest weight; weights are summed per request, so they are kept far from overflow.
const MAX_WEIGHT: u64 = 1_000_000;
/// The largest priority number.
const MAX_PRIORITY: u64 = 1_000;
/// Deployments one alias may list: one request tries each at most once.
const MAX_DEPLOYMENTS: usize = MAX_ATTEMPTS as usize;

/// One deployment as written, before its place in the table is known.
struct Written {
    provider: Arc<Provider>,
    model: String,
    weight: u32,
    priority: u32,
    price: Option<Price>,
}

/// The `models` section: every alias whose entry passes its checks and names known providers.
pub fn section(
    c: &mut Checker,
    top: &Map<String, Value>,
    providers: &HashMap<String, Arc<Provider>>,
) -> AliasMap<Arc<Route>> {
    static GENERATION: AtomicU64 = AtomicU64::new(1);
    let mut routes = AliasMap::default();
    let Some(models) = c.named_section(top, "models", "model") else {
        return routes;
    };
    let mut parsed = Vec::new();
    for (alias, v) in models {
        let path = format!("$.models.{alias}");
        let Some(o) = c.obj(v, &path) else {
            continue;
        };
        let drop = drop_list(c, o, &path);
        let limits = limits(c, o, &path);
        if let (Some(entry), Some(drop), Some(limits)) =
            (alias_entry(c, top, providers, o, &path), drop, limits)
        {
            parsed.push((alias, (entry.0, entry.1, drop, limits)));
        }
    }
    let mut upstreams: Vec<(String, String)> = Vec::new();
    let mut slot: HashMap<(String, String), usize> = HashMap::new();
    let mut choices = 0;
    let mut laid_out = Vec::new();
    for (alias, (strategy, written, drop, limits)) in parsed {
        let deployments: Vec<(Written, usize, usize)> = written
            .into_iter()
            .map(|w| {
                let key = (w.provider.name.clone(), w.model.clone());
                let upstream = *slot.entry(key.clone()).or_insert_with(|| {
                    upstreams.push(key);
                    upstreams.len() - 1
                });
                choices += 1;
                (w, upstream, choices - 1)
            })
            .collect();
        laid_out.push((alias, strategy, deployments, drop, limits));
    }
    let table = Arc::new(Table {
        generation: GENERATION.fetch_add(1, Ordering::Relaxed),
        upstreams,
        choices,
    });
    let written = laid_out
        .iter()
        .flat_map(|(a, _, ds, ..)| ds.iter().map(move |d| (a.as_str(), &d.0)));
    unpriced_warning(c, written);
    let mut sorted: Vec<&str> = laid_out.iter().map(|(a, ..)| a.as_str()).collect();
    sorted.sort_unstable();
    let index_of = |alias: &str| sorted.binary_search(&alias).expect("every alias is sorted");
    let indices: Vec<usize> = laid_out
        .iter()
        .map(|(a, ..)| index_of(a.as_str()))
        .collect();
    for ((alias, strategy, deployments, drop, limits), index) in laid_out.into_iter().zip(indices) {
        let deployments = deployments
            .into_iter()
            .map(|(w, upstream, choice)| Deployment {
                upstream_json_usage: with_usage(&w.model),
                price: w.price,
                upstream_json: json_string(&w.model),
                provider_json: json_string(&w.provider.name),
                upstream_model: w.model,
                provider: w.provider,
                weight: w.weight,
                priority: w.priority,
                upstream,
                choice,
            })
            .collect::<Box<[Deployment]>>();
        routes.insert(
            alias.clone(),
            Arc::new(Route {
                alias: alias.clone(),
                alias_json: json_string(alias),
                index,
                reserve_price: Route::reserve_price(&deployments),
                deployments,
                strategy,
                table: table.clone(),
                drop,
                limits,
            }),
        );
    }
    routes
}

/// One alias's entry in either form; `None` after reporting what is wrong with it.
fn alias_entry(
    c: &mut Checker,
    top: &Map<String, Value>,
    providers: &HashMap<String, Arc<Provider>>,
    o: &Map<String, Value>,
    path: &str,
) -> Option<(Strategy, Vec<Written>)> {
    let strategy = match o.get("strategy").map(Value::as_str) {
        None | Some(Some("weighted")) => Some(Strategy::Weighted),
        Some(Some("least-loaded")) => Some(Strategy::LeastLoaded),
        Some(_) => {
            c.err(
                format!("{path}.strategy"),
                "must be \"weighted\" or \"least-loaded\"",
            );
            None
        }
    };
    let Some(list) = o.get("deployments") else {
        // The short form: one deployment, today's `{"provider": ..., "model": ...}`.
        let d = deployment(c, top, providers, o, path, false);
        return Some((strategy?, vec![d?]));
    };
    c.warn_unknown(
        o,
        path,
        &[
            "deployments",
            "strategy",
            "drop",
            "context_window",
            "max_output_tokens",
        ],
    );
    let dpath = format!("{path}.deployments");
    let Some(list) = list.as_array() else {
        c.err(dpath, "must be an array of deployments");
        return None;
    };
    if list.is_empty() || list.len() > MAX_DEPLOYMENTS {
        c.err(
            dpath,
            format!("must list 1 to {MAX_DEPLOYMENTS} deployments"),
        );
        return None;
    }
    let mut out = Vec::new();
    let mut ok = true;
    for (i, v) in list.iter().enumerate() {
        let p = format!("{dpath}[{i}]");
        let Some(d) = c.obj(v, &p) else {
            ok = false;
            continue;
        };
        match deployment(c, top, providers, d, &p, true) {
            Some(w) => {
                let dup = out
                    .iter()
                    .any(|o: &Written| o.provider.name == w.provider.name && o.model == w.model);
                if dup {
                    c.err(
                        p,
                        format!(
                            "provider {:?} with model {:?} is listed twice",
                            w.provider.name, w.model
                        ),
                    );
                    ok = false;
                }
                out.push(w);
            }
            None => ok = false,
        }
    }
    if !ok {
        return None;
    }
    Some((strategy?, out))
}

/// The alias's `drop` list: the request parts with no counterpart in a deployment's dialect that
/// translation may leave out (reported in `x-gateway-dropped` and the access log) instead of
/// refusing the request (docs/translation-policy.md). Empty when absent.
fn drop_list(c: &mut Checker, o: &Map<String, Value>, path: &str) -> Option<Box<[String]>> {
    let Some(v) = o.get("drop") else {
        return Some(Box::default());
    };
    let names = v.as_array().and_then(|l| {
        l.iter()
            .map(|n| n.as_str().filter(|s| !s.is_empty()).map(str::to_owned))
            .collect::<Option<Vec<String>>>()
    });
    if names.is_none() {
        c.err(
            format!("{path}.drop"),
            "must be an array of part names (docs/translation-policy.md)",
        );
    }
    let names = names?;
    let mut ok = true;
    for (i, n) in names.iter().enumerate() {
        if let Some(why) = crate::dialect::translate::drop_entry_error(n) {
            c.err(format!("{path}.drop[{i}]"), why);
            ok = false;
        }
    }
    ok.then(|| names.into_boxed_slice())
}

/// The alias's `context_window` and `max_output_tokens` (tokens), listed by `GET /v1/models`.
fn limits(c: &mut Checker, o: &Map<String, Value>, path: &str) -> Option<Limits> {
    let mut ok = true;
    let mut read = |key: &str| match o.get(key) {
        None => None,
        Some(v) => match v.as_u64().filter(|&n| n > 0) {
            Some(n) => Some(n),
            None => {
                c.err(
                    format!("{path}.{key}"),
                    "must be a positive integer (tokens)",
                );
                ok = false;
                None
            }
        },
    };
    let limits = Limits {
        context_window: read("context_window"),
        max_output_tokens: read("max_output_tokens"),
    };
    ok.then_some(limits)
}

/// One deployment: `provider` (a known one), `model`, and in the list form `weight` (default 1)
/// and `priority` (default 0).
fn deployment(
    c: &mut Checker,
    top: &Map<String, Value>,
    providers: &HashMap<String, Arc<Provider>>,
    o: &Map<String, Value>,
    path: &str,
    listed: bool,
) -> Option<Written> {
    if listed {
        c.warn_unknown(
            o,
            path,
            &["provider", "model", "weight", "priority", "price"],
        );
    }
    let prov = c.string(o, "provider", path);
    let model = c.string(o, "model", path);
    let weight = bounded(c, o, "weight", path, 1, 1, MAX_WEIGHT);
    let priority = bounded(c, o, "priority", path, 0, 0, MAX_PRIORITY);
    let price = Price::from_config(c, o, path);
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
    Some(Written {
        provider: provider?,
        model: model?.to_owned(),
        weight: weight? as u32,
        priority: priority? as u32,
        price,
    })
}

/// The upstream model's literal with the chat stream's request for usage after it.
fn with_usage(model: &str) -> Bytes {
    let mut v = json_string(model).to_vec();
    v.extend_from_slice(crate::dialect::stream_usage::INSERTED);
    Bytes::from(v)
}

/// Once at load, when some deployments have a price and others not: the ones without cost
/// nothing (their requests count no spend and no budget). Without any price, spend is off and
/// nothing is said.
fn unpriced_warning<'a>(
    c: &mut Checker,
    all: impl Iterator<Item = (&'a str, &'a Written)> + Clone,
) {
    let unpriced: Vec<String> = all
        .clone()
        .filter(|(_, w)| w.price.is_none())
        .map(|(a, w)| format!("{a} ({}/{})", w.provider.name, w.model))
        .collect();
    if !unpriced.is_empty() && all.clone().any(|(_, w)| w.price.is_some()) {
        c.warnings.push(format!(
            "$.models: no price for {}: their requests cost nothing",
            unpriced.join(", ")
        ));
    }
}

/// An optional integer field within `min..=max`, `default` when absent.
fn bounded(
    c: &mut Checker,
    o: &Map<String, Value>,
    key: &str,
    path: &str,
    default: u64,
    min: u64,
    max: u64,
) -> Option<u64> {
    let Some(v) = o.get(key) else {
        return Some(default);
    };
    match v.as_u64() {
        Some(n) if (min..=max).contains(&n) => Some(n),
        _ => {
            c.err(
                format!("{path}.{key}"),
                format!("must be an integer from {min} to {max}"),
            );
            None
        }
    }
}

/// The `GET /v1/models` body, in a form both OpenAI's and Anthropic's SDKs read, with each alias's
/// context window and output cap under Anthropic's names (`max_input_tokens`, `max_tokens`) where
/// its config states them. It never changes between reloads, so it is rendered once per
/// configuration.
pub fn models_body(routes: &AliasMap<Arc<Route>>) -> Bytes {
    let mut names: Vec<&String> = routes.keys().collect();
    names.sort();
    let data: Vec<Value> = names
        .iter()
        .map(|n| {
            let route = &routes[*n];
            let mut m = serde_json::json!({
                "id": n, "object": "model", "created": 0,
                "owned_by": route.deployments[0].provider.name,
                "type": "model", "display_name": n, "created_at": "1970-01-01T00:00:00Z",
            });
            // Anthropic's names for the context window and the output cap.
            let limits = [
                ("max_input_tokens", route.limits.context_window),
                ("max_tokens", route.limits.max_output_tokens),
            ];
            for (key, tokens) in limits {
                if let Some(t) = tokens {
                    m[key] = t.into();
                }
            }
            m
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

#[cfg(test)]
mod tests {
    use super::*;

    fn load(models: Value) -> (AliasMap<Arc<Route>>, Checker) {
        let top = serde_json::json!({
            "providers": {"a": {}, "b": {}, "broken": {}},
            "models": models,
        });
        let mut providers = HashMap::new();
        for (name, kind) in [
            ("a", crate::provider::upstream::ProviderKind::OpenAi),
            ("b", crate::provider::upstream::ProviderKind::Anthropic),
        ] {
            providers.insert(
                name.to_owned(),
                Arc::new(crate::provider::upstream::Provider::stub(name, kind)),
            );
        }
        let mut c = Checker::default();
        let routes = section(&mut c, top.as_object().unwrap(), &providers);
        (routes, c)
    }

    #[test]
    fn both_forms_share_one_table() {
        let (routes, c) = load(serde_json::json!({
            "one": {"provider": "a", "model": "m"},
            "pool": {"strategy": "least-loaded", "deployments": [
                {"provider": "a", "model": "m", "weight": 3},
                {"provider": "b", "model": "n", "priority": 1}]},
        }));
        assert!(c.errors.is_empty(), "{:?}", c.errors);
        let (one, pool) = (&routes["one"], &routes["pool"]);
        assert!(!one.is_routed() && pool.is_routed());
        assert_eq!(pool.strategy, Strategy::LeastLoaded);
        assert_eq!(one.strategy, Strategy::Weighted);
        assert!(Arc::ptr_eq(&one.table, &pool.table));
        assert_eq!(one.table.upstreams.len(), 2, "a/m is one upstream");
        assert_eq!(one.table.choices, 3);
        assert_eq!(one.deployments[0].upstream, pool.deployments[0].upstream);
        let d = &pool.deployments[1];
        assert_eq!((d.weight, d.priority), (1, 1));
        assert_eq!(&d.upstream_json[..], b"\"n\"");
        assert_eq!(
            (pool.deployments[0].weight, pool.deployments[0].priority),
            (3, 0)
        );
    }

    #[test]
    fn every_bad_deployment_is_named() {
        let (routes, c) = load(serde_json::json!({
            "w": {"deployments": [{"provider": "a", "model": "m", "weight": 0},
                                  {"provider": "zz", "model": "m"},
                                  {"provider": "a", "model": "m", "priority": 5000},
                                  {"provider": "broken", "model": "m"},
                                  "x"]},
            "dup": {"deployments": [{"provider": "a", "model": "m"}, {"provider": "a", "model": "m"}]},
            "empty": {"deployments": []},
            "notlist": {"deployments": {}},
            "strat": {"strategy": "random", "provider": "a", "model": "m"},
        }));
        let paths: Vec<&str> = c.errors.iter().map(|e| e.path.as_str()).collect();
        for p in [
            "$.models.w.deployments[0].weight",
            "$.models.w.deployments[1].provider",
            "$.models.w.deployments[2].priority",
            "$.models.w.deployments[4]",
            "$.models.dup.deployments[1]",
            "$.models.empty.deployments",
            "$.models.notlist.deployments",
            "$.models.strat.strategy",
        ] {
            assert!(paths.contains(&p), "{p} missing from {paths:?}");
        }
        // A declared provider that failed its own checks is not reported again here.
        assert!(!paths.iter().any(|p| p.contains("[3]")), "{paths:?}");
        assert!(routes.is_empty());
    }

    #[test]
    fn drop_lists_are_read_and_checked() {
        let (routes, c) = load(serde_json::json!({
            "ok": {"provider": "a", "model": "m", "drop": ["cache_control", "include"]},
            "pool": {"drop": ["store"], "deployments": [{"provider": "b", "model": "n"}]},
            "none": {"provider": "a", "model": "m"},
            "bad": {"provider": "a", "model": "m", "drop": "cache_control"},
            "empty": {"provider": "a", "model": "m", "drop": [""]},
        }));
        let paths: Vec<&str> = c.errors.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, ["$.models.bad.drop", "$.models.empty.drop"]);
        assert_eq!(&*routes["ok"].drop, ["cache_control", "include"]);
        assert_eq!(&*routes["pool"].drop, ["store"]);
        assert!(routes["none"].drop.is_empty());
        assert!(!routes.contains_key("bad"));
    }
}
