//! Configuration: the JSON file described in docs/contracts.md, checked field by field so that
//! `gateway validate` can name every problem with its JSON path instead of stopping at the first.
//!
//! The checked file is turned into an immutable [`Snapshot`] that the workers share through an
//! `Arc`; everything a request needs (upstream URIs, auth header values, the model name already
//! JSON-quoted) is computed here once, not per request.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde::Deserialize;
use serde_json::Value;

pub mod postures;

use crate::admission::auth::Keys;
use crate::admission::limits::store::Store;
use crate::admission::limits::{Limits, StoreSource};
use crate::admission::spend::Budgets;
use crate::checker::{Checker, ConfigError};
use crate::exchange::access_log::AccessLogConfig;
use crate::routing::{AliasMap, Policy, Route};
use crate::telemetry::metrics::exposition::MetricsConfig;
use crate::telemetry::metrics::{ModelLabels, UpstreamLabels};
use crate::telemetry::traces::TracingConfig;

/// The immutable view of the configuration that requests run against.
#[derive(Debug)]
pub struct Snapshot {
    pub routes: AliasMap<Arc<Route>>,
    /// `GET /v1/models` never changes between reloads, so it is rendered once.
    pub models_body: Bytes,
    pub upstream_timeout: Duration,
    /// How long a client may take to send its whole body once the headers are in: a client
    /// trickling bytes holds a connection, so it gets a 408 instead of holding it forever.
    pub body_read_timeout: Duration,
    pub max_body_bytes: usize,
    /// Largest request head (target and headers) answered; beyond it, a 431.
    pub max_header_bytes: usize,
    /// Caller keys (empty = open gateway).
    pub keys: Keys,
    /// Rate-limit policies and their live counters.
    pub limits: Limits,
    /// Spend budgets (`budgets`), shared through the limits' store.
    pub budgets: Budgets,
    /// `spend.cost_header`: a buffered priced answer carries `x-gateway-cost-usd`.
    pub cost_header: bool,
    /// Alias → `model` metric label.
    pub metric_models: ModelLabels,
    /// Retries, retry budget and cooldown of aliases with several deployments.
    pub routing: Policy,
    /// Upstream (a deployment's provider and model) → its metric labels.
    pub metric_upstreams: UpstreamLabels,
}

/// The settings read once, at startup: the listeners, the workers and what every worker shares
/// for the process's life (a reload cannot change them).
#[derive(Debug, Clone)]
pub struct Startup {
    pub addr: SocketAddr,
    pub workers: usize,
    pub drain_timeout: Duration,
    /// Open client connections a worker keeps; beyond it new ones are closed at accept, so a
    /// flood of idle sockets cannot exhaust descriptors or memory. `max_connections / workers`.
    pub max_connections_per_worker: usize,
    /// Time a connection may take to send a request's headers, and may sit idle between
    /// keep-alive requests, before it is closed.
    pub header_timeout: Duration,
    pub metrics: Option<MetricsConfig>,
    pub access_log: AccessLogConfig,
    /// OpenTelemetry traces (`tracing`), off when absent.
    pub tracing: Option<TracingConfig>,
    /// TLS for https upstreams (built-in roots plus `upstream_ca_files`).
    pub upstream_tls: Arc<rustls::ClientConfig>,
    /// The shared quota store (`limits.store`), started once by the assembly for serving; a
    /// reload assembles its snapshot with this one ([`StoreSource::Running`]).
    pub store: Option<Arc<Store>>,
}

pub struct Config {
    pub startup: Startup,
    pub snapshot: Snapshot,
    pub warnings: Vec<String>,
}

/// The top-level keys the gateway reads; any other is warned about (most likely a typo that would
/// leave a default in force) and ignored.
const KNOWN_TOP: &[&str] = &[
    "listen",
    "workers",
    "providers",
    "models",
    "timeouts",
    "limits_body_bytes",
    "limits_header_bytes",
    "drain_ms",
    "max_connections",
    "upstream_ca_files",
    "keys",
    "limits",
    "metrics",
    "access_log",
    "routing",
    "budgets",
    "tracing",
    "spend",
];

/// Reads and assembles the file at `path`; `store` says what becomes of its `limits.store`.
pub fn load_file(path: &str, store: StoreSource) -> Result<Config, Vec<ConfigError>> {
    let text = std::fs::read(path).map_err(|e| {
        vec![ConfigError {
            path: "$".into(),
            message: format!("cannot read {path}: {e}"),
        }]
    })?;
    parse_with(&text, store)
}

/// Checks and assembles a config file's text, starting nothing (`gateway validate`, the tests,
/// the fuzz target).
pub fn parse(text: &[u8]) -> Result<Config, Vec<ConfigError>> {
    parse_with(text, StoreSource::CheckOnly)
}

fn parse_with(text: &[u8], store: StoreSource) -> Result<Config, Vec<ConfigError>> {
    let value: Value = serde_json::from_slice(text).map_err(|e| {
        vec![ConfigError {
            path: "$".into(),
            message: format!("invalid JSON: {e}"),
        }]
    })?;
    let mut c = Checker::default();
    let cfg = check(&mut c, &value, store);
    match cfg {
        Some(cfg) if c.errors.is_empty() => Ok(Config {
            warnings: c.warnings,
            ..cfg
        }),
        _ => Err(c.errors),
    }
}

/// The whole file: the base settings here, every other section by the module that owns it.
fn check(c: &mut Checker, root: &Value, store: StoreSource) -> Option<Config> {
    let top = c.obj(root, "$")?;
    for k in top.keys() {
        if !KNOWN_TOP.contains(&k.as_str()) {
            c.warnings.push(format!("$.{k}: unknown key, ignored"));
        }
    }

    let addr = c.string(top, "listen", "$").and_then(|s| match s.parse() {
        Ok(a) => Some(a),
        Err(_) => {
            c.err("$.listen", format!("{s:?} is not an IP:port address"));
            None
        }
    });
    let workers = c
        .positive(top, "workers", "$")
        .map(|n| n as usize)
        .unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        });
    if workers > 1024 {
        c.err("$.workers", "must be at most 1024");
    }

    let mut upstream_ms = 60_000;
    let mut body_read_ms = 30_000;
    let mut header_ms = 30_000;
    if let Some(t) = top.get("timeouts") {
        if let Some(t) = c.obj(t, "$.timeouts") {
            if let Some(ms) = c.positive(t, "upstream_ms", "$.timeouts") {
                upstream_ms = ms;
            }
            if let Some(ms) = c.positive(t, "body_read_ms", "$.timeouts") {
                body_read_ms = ms;
            }
            if let Some(ms) = c.positive(t, "header_ms", "$.timeouts") {
                header_ms = ms;
            }
        }
    }
    let max_body_bytes = c.positive(top, "limits_body_bytes", "$").unwrap_or(4 << 20) as usize;
    let max_header_bytes = c
        .positive(top, "limits_header_bytes", "$")
        .unwrap_or(32 << 10) as usize;
    if !(1024..=1 << 20).contains(&max_header_bytes) {
        c.err("$.limits_header_bytes", "must be 1024 to 1048576");
    }
    let drain_ms = c.positive(top, "drain_ms", "$").unwrap_or(30_000);
    let max_connections = c.positive(top, "max_connections", "$").unwrap_or(16_384) as usize;
    let ca_files = match top.get("upstream_ca_files").map(Vec::<String>::deserialize) {
        None => Vec::new(),
        Some(Ok(files)) => files,
        Some(Err(_)) => {
            c.err("$.upstream_ca_files", "must be an array of PEM file paths");
            Vec::new()
        }
    };
    let upstream_tls = crate::http::tls::client_config(&ca_files)
        .map_err(|e| c.err("$.upstream_ca_files", e))
        .ok();

    let providers = crate::provider::upstream::section(c, top);
    let routes = crate::routing::section(c, top, &providers);
    let routing = crate::routing::policy::section(c, top);

    let keys = Keys::from_config(c, top.get("keys"));
    let aliases: Vec<&str> = routes.keys().map(String::as_str).collect();
    let limits = Limits::from_config(c, top.get("limits"), &keys.ids(), &aliases, store);
    let budgets =
        Budgets::from_config(c, top.get("budgets"), &keys.ids(), &aliases, limits.store());
    let cost_header = crate::admission::spend::cost_header(c, top.get("spend"));
    let metric_models = ModelLabels::new(aliases.iter().copied());
    // Every route of one configuration points into the same table of upstreams.
    let metric_upstreams = match routes.values().next() {
        Some(r) => UpstreamLabels::new(&r.table.upstreams),
        None => UpstreamLabels::default(),
    };
    let metrics = MetricsConfig::from_config(c, top.get("metrics"));
    let access_log = AccessLogConfig::from_config(c, top.get("access_log"));
    let tracing = TracingConfig::from_config(c, top.get("tracing"));

    let addr = addr?;
    let upstream_tls = upstream_tls?;
    let models_body = crate::routing::models_body(&routes);

    Some(Config {
        startup: Startup {
            addr,
            workers,
            drain_timeout: Duration::from_millis(drain_ms),
            max_connections_per_worker: max_connections.div_ceil(workers).max(1),
            header_timeout: Duration::from_millis(header_ms),
            metrics,
            access_log,
            tracing,
            upstream_tls,
            store: limits.store().cloned(),
        },
        snapshot: Snapshot {
            routes,
            models_body,
            upstream_timeout: Duration::from_millis(upstream_ms),
            body_read_timeout: Duration::from_millis(body_read_ms),
            max_body_bytes,
            max_header_bytes,
            keys,
            limits,
            budgets,
            cost_header,
            metric_models,
            routing,
            metric_upstreams,
        },
        warnings: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_every_error_with_path() {
        let cfg = br#"{"listen":"nope","providers":{"a":{"kind":"x","base_url":"ftp://h","api_key_env":"K"}},
                      "models":{"m":{"provider":"zz","model":"u"}},
                      "upstream_ca_files":["/nonexistent/ca.pem"]}"#;
        let errs = parse(cfg).err().unwrap();
        let paths: Vec<_> = errs.iter().map(|e| e.path.as_str()).collect();
        assert!(paths.contains(&"$.listen"), "{paths:?}");
        assert!(paths.contains(&"$.providers.a.kind"), "{paths:?}");
        assert!(paths.contains(&"$.providers.a.base_url"), "{paths:?}");
        assert!(paths.contains(&"$.models.m.provider"), "{paths:?}");
        assert!(paths.contains(&"$.upstream_ca_files"), "{paths:?}");
        let errs = parse(
            br#"{"listen":"127.0.0.1:0","providers":{},"models":{},"upstream_ca_files":"x.pem"}"#,
        )
        .err()
        .unwrap();
        assert!(
            errs.iter().any(|e| e.path == "$.upstream_ca_files"),
            "{errs:?}"
        );
    }

    #[test]
    fn accepts_contract_example() {
        let cfg = br#"{"listen":"127.0.0.1:0","workers":1,
          "providers":{"o":{"kind":"openai","base_url":"http://127.0.0.1:9","api_key_env":"NOPE_X"}},
          "models":{"gpt":{"provider":"o","model":"mock-gpt"}}}"#;
        let c = parse(cfg).ok().unwrap();
        assert_eq!(c.startup.workers, 1);
        let r = &c.snapshot.routes["gpt"];
        assert_eq!(&r.deployments[0].upstream_json[..], b"\"mock-gpt\"");
        let p = &r.deployments[0].provider;
        assert_eq!(p.origin.host, "127.0.0.1:9");
        assert_eq!(p.chat_path, "/v1/chat/completions");
        assert!(
            c.warnings.iter().all(|w| !w.contains("unknown key")),
            "{:?}",
            c.warnings
        );
        let https = br#"{"listen":"127.0.0.1:0","max_connections":64,
          "providers":{"o":{"kind":"anthropic","base_url":"https://api.example.com","api_key_env":"NOPE_X"}},
          "models":{"c":{"provider":"o","model":"m"}}}"#;
        let c = parse(https).ok().unwrap();
        let p = &c.snapshot.routes["c"].deployments[0].provider;
        assert_eq!(p.origin.host, "api.example.com");
        assert_eq!(p.messages_path, "/v1/messages");
        let prefixed = br#"{"listen":"127.0.0.1:0",
          "providers":{"o":{"kind":"openai","base_url":"https://gw.example.com/openai/","api_key_env":"NOPE_X"}},
          "models":{"c":{"provider":"o","model":"m"}}}"#;
        let c = parse(prefixed).ok().unwrap();
        let p = &c.snapshot.routes["c"].deployments[0].provider;
        assert_eq!(p.responses_path, "/openai/v1/responses");
        assert!(
            c.warnings.iter().all(|w| !w.contains("max_connections")),
            "max_connections is a known key: {:?}",
            c.warnings
        );
    }
}
