//! Configuration: the JSON file described in docs/contracts.md, checked field by field so that
//! `gateway validate` can name every problem with its JSON path instead of stopping at the first.
//!
//! The checked file is turned into an immutable [`Snapshot`] that the workers share through an
//! `Arc`; everything a request needs (upstream URIs, auth header values, the model name already
//! JSON-quoted) is computed here once, not per request.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Uri};
use serde::Deserialize;
use serde_json::{Map, Value};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProviderKind {
    OpenAi,
    Anthropic,
}

/// An upstream, with everything needed to address it precomputed.
#[derive(Debug)]
pub struct Provider {
    pub name: String,
    pub kind: ProviderKind,
    pub chat_uri: Uri,
    pub messages_uri: Uri,
    pub responses_uri: Uri,
    /// `Authorization: Bearer …` for openai, `x-api-key` for anthropic; `None` when the
    /// environment variable is unset (the upstream then decides whether that is acceptable).
    pub auth: Option<HeaderValue>,
}

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

/// The immutable view of the configuration that requests run against.
#[derive(Debug)]
pub struct Snapshot {
    pub routes: HashMap<String, Arc<Route>>,
    /// `GET /v1/models` never changes between reloads, so it is rendered once.
    pub models_body: Bytes,
    pub upstream_timeout: Duration,
    /// How long a client may take to send its whole body once the headers are in: a client
    /// trickling bytes holds a connection, so it gets a 408 instead of holding it forever.
    pub body_read_timeout: Duration,
    pub max_body_bytes: usize,
    /// Caller keys (empty = open gateway).
    pub keys: crate::auth::Keys,
    /// Rate-limit policies and their live counters.
    pub limits: crate::limits::Limits,
    /// Alias → `model` metric label.
    pub metric_models: crate::metrics::ModelLabels,
}

/// Settings that only matter at startup (they cannot change on reload).
#[derive(Debug, Clone)]
pub struct Listen {
    pub addr: SocketAddr,
    pub workers: usize,
    pub drain_timeout: Duration,
    /// Open client connections a worker keeps; beyond it new ones are closed at accept, so a
    /// flood of idle sockets cannot exhaust descriptors or memory. `max_connections / workers`.
    pub max_connections_per_worker: usize,
    /// Time a connection may take to send a request's headers, and may sit idle between
    /// keep-alive requests, before it is closed.
    pub header_timeout: Duration,
    pub metrics: Option<crate::metrics::MetricsConfig>,
    pub access_log: crate::access_log::AccessLogConfig,
    /// TLS for https upstreams (built-in roots plus `upstream_ca_files`).
    pub upstream_tls: Arc<rustls::ClientConfig>,
}

pub struct Config {
    pub listen: Listen,
    pub snapshot: Snapshot,
    pub warnings: Vec<String>,
}

/// One problem in the file, with the JSON path it is at (`$.providers.up.kind`).
#[derive(Debug, Clone)]
pub struct ConfigError {
    pub path: String,
    pub message: String,
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// Top-level keys that are accepted; keys reserved for later features are accepted so that
/// configurations written for a newer gateway still load here.
const KNOWN_TOP: &[&str] = &[
    "listen",
    "workers",
    "providers",
    "models",
    "timeouts",
    "limits_body_bytes",
    "drain_ms",
    "max_connections",
    "upstream_ca_files",
    "keys",
    "limits",
    "metrics",
    "access_log",
];

pub fn load_file(path: &str) -> Result<Config, Vec<ConfigError>> {
    let text = std::fs::read(path).map_err(|e| {
        vec![ConfigError {
            path: "$".into(),
            message: format!("cannot read {path}: {e}"),
        }]
    })?;
    parse(&text)
}

pub fn parse(text: &[u8]) -> Result<Config, Vec<ConfigError>> {
    let value: Value = serde_json::from_slice(text).map_err(|e| {
        vec![ConfigError {
            path: "$".into(),
            message: format!("invalid JSON: {e}"),
        }]
    })?;
    let mut c = Checker::default();
    let cfg = c.check(&value);
    match cfg {
        Some(cfg) if c.errors.is_empty() => Ok(Config {
            warnings: c.warnings,
            ..cfg
        }),
        _ => Err(c.errors),
    }
}

#[derive(Default)]
struct Checker {
    errors: Vec<ConfigError>,
    warnings: Vec<String>,
}

impl Checker {
    fn err(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.errors.push(ConfigError {
            path: path.into(),
            message: message.into(),
        });
    }

    fn obj<'v>(&mut self, v: &'v Value, path: &str) -> Option<&'v Map<String, Value>> {
        match v.as_object() {
            Some(o) => Some(o),
            None => {
                self.err(path, "must be an object");
                None
            }
        }
    }

    fn string<'v>(&mut self, o: &'v Map<String, Value>, key: &str, path: &str) -> Option<&'v str> {
        match o.get(key) {
            Some(Value::String(s)) if !s.is_empty() => Some(s),
            Some(Value::String(_)) => {
                self.err(format!("{path}.{key}"), "must not be empty");
                None
            }
            Some(_) => {
                self.err(format!("{path}.{key}"), "must be a string");
                None
            }
            None => {
                self.err(format!("{path}.{key}"), "is required");
                None
            }
        }
    }

    fn positive(&mut self, o: &Map<String, Value>, key: &str, path: &str) -> Option<u64> {
        let v = o.get(key)?;
        match v.as_u64() {
            Some(n) if n > 0 => Some(n),
            _ => {
                self.err(format!("{path}.{key}"), "must be a positive integer");
                None
            }
        }
    }

    fn check(&mut self, root: &Value) -> Option<Config> {
        let top = self.obj(root, "$")?;
        for k in top.keys() {
            if !KNOWN_TOP.contains(&k.as_str()) {
                self.warnings.push(format!("$.{k}: unknown key, ignored"));
            }
        }

        let addr = self
            .string(top, "listen", "$")
            .and_then(|s| match s.parse() {
                Ok(a) => Some(a),
                Err(_) => {
                    self.err("$.listen", format!("{s:?} is not an IP:port address"));
                    None
                }
            });
        let workers = self
            .positive(top, "workers", "$")
            .map(|n| n as usize)
            .unwrap_or_else(|| {
                std::thread::available_parallelism()
                    .map(|n| n.get())
                    .unwrap_or(1)
            });
        if workers > 1024 {
            self.err("$.workers", "must be at most 1024");
        }

        let mut upstream_ms = 60_000;
        let mut body_read_ms = 30_000;
        let mut header_ms = 30_000;
        if let Some(t) = top.get("timeouts") {
            if let Some(t) = self.obj(t, "$.timeouts") {
                if let Some(ms) = self.positive(t, "upstream_ms", "$.timeouts") {
                    upstream_ms = ms;
                }
                if let Some(ms) = self.positive(t, "body_read_ms", "$.timeouts") {
                    body_read_ms = ms;
                }
                if let Some(ms) = self.positive(t, "header_ms", "$.timeouts") {
                    header_ms = ms;
                }
            }
        }
        let max_body_bytes = self
            .positive(top, "limits_body_bytes", "$")
            .unwrap_or(4 << 20) as usize;
        let drain_ms = self.positive(top, "drain_ms", "$").unwrap_or(30_000);
        let max_connections = self.positive(top, "max_connections", "$").unwrap_or(16_384) as usize;
        let ca_files = match top.get("upstream_ca_files").map(Vec::<String>::deserialize) {
            None => Vec::new(),
            Some(Ok(files)) => files,
            Some(Err(_)) => {
                self.err("$.upstream_ca_files", "must be an array of PEM file paths");
                Vec::new()
            }
        };
        let upstream_tls = crate::tls::client_config(&ca_files)
            .map_err(|e| self.err("$.upstream_ca_files", e))
            .ok();

        let mut providers: HashMap<String, Arc<Provider>> = HashMap::new();
        match top.get("providers") {
            None => self.err("$.providers", "is required"),
            Some(p) => {
                if let Some(p) = self.obj(p, "$.providers") {
                    if p.is_empty() {
                        self.err("$.providers", "must name at least one provider");
                    }
                    for (name, v) in p {
                        let path = format!("$.providers.{name}");
                        if let Some(prov) = self.provider(name, v, &path) {
                            providers.insert(name.clone(), Arc::new(prov));
                        }
                    }
                }
            }
        }

        let mut routes = HashMap::new();
        match top.get("models") {
            None => self.err("$.models", "is required"),
            Some(m) => {
                if let Some(m) = self.obj(m, "$.models") {
                    if m.is_empty() {
                        self.err("$.models", "must name at least one model");
                    }
                    for (alias, v) in m {
                        let path = format!("$.models.{alias}");
                        let Some(o) = self.obj(v, &path) else {
                            continue;
                        };
                        let prov = self.string(o, "provider", &path);
                        let model = self.string(o, "model", &path);
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
                                        self.err(
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
                }
            }
        }

        let keys =
            crate::auth::Keys::from_config(top.get("keys"), &mut self.errors, &mut self.warnings);
        let aliases: Vec<&str> = routes.keys().map(String::as_str).collect();
        let limits = crate::limits::Limits::from_config(
            top.get("limits"),
            &keys.ids(),
            &aliases,
            &mut self.errors,
            &mut self.warnings,
        );
        let metric_models = crate::metrics::ModelLabels::new(aliases.iter().copied());
        let metrics =
            crate::metrics::MetricsConfig::from_config(top.get("metrics"), &mut self.errors);
        let access_log = crate::access_log::AccessLogConfig::from_config(
            top.get("access_log"),
            &mut self.errors,
        );

        let addr = addr?;
        let upstream_tls = upstream_tls?;
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

        Some(Config {
            listen: Listen {
                addr,
                workers,
                drain_timeout: Duration::from_millis(drain_ms),
                max_connections_per_worker: max_connections.div_ceil(workers).max(1),
                header_timeout: Duration::from_millis(header_ms),
                metrics,
                access_log,
                upstream_tls,
            },
            snapshot: Snapshot {
                routes,
                models_body: Bytes::from(models_body),
                upstream_timeout: Duration::from_millis(upstream_ms),
                body_read_timeout: Duration::from_millis(body_read_ms),
                max_body_bytes,
                keys,
                limits,
                metric_models,
            },
            warnings: Vec::new(),
        })
    }

    fn provider(&mut self, name: &str, v: &Value, path: &str) -> Option<Provider> {
        let o = self.obj(v, path)?;
        let kind = match self.string(o, "kind", path) {
            Some("openai") => Some(ProviderKind::OpenAi),
            Some("anthropic") => Some(ProviderKind::Anthropic),
            Some(other) => {
                self.err(
                    format!("{path}.kind"),
                    format!("{other:?} is not one of \"openai\", \"anthropic\""),
                );
                None
            }
            None => None,
        };
        let base = self.string(o, "base_url", path).and_then(|b| {
            let b = b.trim_end_matches('/');
            if !(b.starts_with("http://") || b.starts_with("https://")) {
                self.err(
                    format!("{path}.base_url"),
                    "must be an http:// or https:// URL",
                );
                return None;
            }
            if b.ends_with("/v1") {
                self.err(
                    format!("{path}.base_url"),
                    "must not end in /v1 (the gateway appends /v1/...)",
                );
                return None;
            }
            match b.parse::<Uri>() {
                Ok(u) if u.host().is_some() => Some(b.to_owned()),
                _ => {
                    self.err(format!("{path}.base_url"), format!("{b:?} is not a URL"));
                    None
                }
            }
        });
        let env = self.string(o, "api_key_env", path);
        let kind = kind?;
        let base = base?;
        let env = env?;
        let auth = match std::env::var(env) {
            Ok(key) => {
                let v = match kind {
                    ProviderKind::OpenAi => HeaderValue::from_str(&format!("Bearer {key}")),
                    ProviderKind::Anthropic => HeaderValue::from_str(&key),
                };
                match v {
                    Ok(mut v) => {
                        v.set_sensitive(true);
                        Some(v)
                    }
                    Err(_) => {
                        self.err(
                            format!("{path}.api_key_env"),
                            format!("${env} holds characters not allowed in a header"),
                        );
                        None
                    }
                }
            }
            Err(_) => {
                self.warnings.push(format!(
                    "{path}.api_key_env: ${env} is not set; requests go upstream without credentials"
                ));
                None
            }
        };
        let uri = |suffix: &str| -> Uri {
            format!("{base}{suffix}")
                .parse()
                .expect("base_url was checked to parse")
        };
        Some(Provider {
            name: name.to_owned(),
            kind,
            chat_uri: uri("/v1/chat/completions"),
            messages_uri: uri("/v1/messages"),
            responses_uri: uri("/v1/responses"),
            auth,
        })
    }
}

pub fn json_string(s: &str) -> Bytes {
    Bytes::from(serde_json::to_vec(s).expect("serializing a str cannot fail"))
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
        assert_eq!(c.listen.workers, 1);
        let r = &c.snapshot.routes["gpt"];
        assert_eq!(&r.upstream_json[..], b"\"mock-gpt\"");
        assert_eq!(
            r.provider.chat_uri,
            "http://127.0.0.1:9/v1/chat/completions"
        );
        assert!(
            c.warnings.iter().all(|w| !w.contains("unknown key")),
            "{:?}",
            c.warnings
        );
        let https = br#"{"listen":"127.0.0.1:0","max_connections":64,
          "providers":{"o":{"kind":"anthropic","base_url":"https://api.example.com","api_key_env":"NOPE_X"}},
          "models":{"c":{"provider":"o","model":"m"}}}"#;
        let c = parse(https).ok().unwrap();
        assert_eq!(
            c.snapshot.routes["c"].provider.messages_uri,
            "https://api.example.com/v1/messages"
        );
        assert!(
            c.warnings.iter().all(|w| !w.contains("max_connections")),
            "max_connections is a known key: {:?}",
            c.warnings
        );
    }
}
