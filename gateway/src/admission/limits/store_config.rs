//! The `limits.store` section: what it says (the Redis, its credentials' variables, the
//! timeout, what to do while it cannot be reached) and its checks. The connection is `store.rs`.

use std::time::Duration;

use redis::IntoConnectionInfo;
use serde::Deserialize;
use serde_json::Value;

use crate::checker::Checker;

/// What admission does while the store cannot be reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnError {
    /// Every policy falls back to its local limiter with its limits divided by `replicas`.
    Local,
    /// Requests are admitted without limits.
    Admit,
    /// Requests are refused with a 503 in the client's dialect.
    Reject,
}

impl OnError {
    pub fn as_str(self) -> &'static str {
        match self {
            OnError::Local => "local",
            OnError::Admit => "admit",
            OnError::Reject => "reject",
        }
    }
}

/// The `limits.store` section as written in the config file.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    url: String,
    #[serde(default)]
    username_env: Option<String>,
    #[serde(default)]
    password_env: Option<String>,
    #[serde(default)]
    ca_file: Option<String>,
    #[serde(default = "default_prefix")]
    prefix: String,
    #[serde(default = "default_timeout_ms")]
    timeout_ms: u64,
    #[serde(default = "default_on_error")]
    on_store_error: OnError,
    #[serde(default = "one")]
    replicas: u32,
    #[serde(default = "default_slot_ttl_ms")]
    slot_ttl_ms: u64,
}

fn default_prefix() -> String {
    "gateway:".into()
}
fn default_timeout_ms() -> u64 {
    50
}
fn default_on_error() -> OnError {
    OnError::Local
}
fn one() -> u32 {
    1
}
fn default_slot_ttl_ms() -> u64 {
    10_000
}

/// The checked `limits.store` section. Holds the names of the credential variables, never their
/// values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreConfig {
    /// `redis://host:port/db` or `rediss://...`, without credentials.
    pub url: String,
    pub username_env: Option<String>,
    pub password_env: Option<String>,
    /// PEM roots for `rediss://` (instead of the built-in webpki roots).
    pub ca_file: Option<String>,
    /// Every key the gateway writes starts with it.
    pub prefix: String,
    /// The longest a request waits for Redis, and the bound on every call.
    pub timeout: Duration,
    pub on_error: OnError,
    /// Replicas sharing the store: `on_store_error: local` divides every limit by it.
    pub replicas: u32,
    /// How long a replica's concurrency slots outlive its last heartbeat.
    pub slot_ttl: Duration,
}

impl StoreConfig {
    /// Checks `limits.store`. Unset credential variables are warnings (so that `validate` runs
    /// where the secrets are not); everything else is an error with its path.
    pub fn from_config(c: &mut Checker, v: &Value) -> Option<StoreConfig> {
        let err = |c: &mut Checker, field: &str, message: String| {
            let path = if field.is_empty() {
                "$.limits.store".to_string()
            } else {
                format!("$.limits.store.{field}")
            };
            c.err(path, message);
        };
        let raw = match Raw::deserialize(v) {
            Ok(r) => r,
            Err(e) => {
                err(c, "", e.to_string());
                return None;
            }
        };
        let before = c.errors.len();
        let tls = match check_url(&raw.url) {
            Ok(tls) => tls,
            Err(m) => {
                err(c, "url", m);
                false
            }
        };
        for (field, name) in [
            ("username_env", &raw.username_env),
            ("password_env", &raw.password_env),
        ] {
            match name.as_deref() {
                Some("") => err(c, field, "must name an environment variable".into()),
                Some(n) if std::env::var_os(n).is_none() => c.warnings.push(format!(
                    "$.limits.store.{field}: {n} is not set; connecting without it"
                )),
                _ => {}
            }
        }
        if let Some(ca) = &raw.ca_file {
            if !tls {
                err(c, "ca_file", "applies to rediss:// URLs only".into());
            } else if let Err(e) = std::fs::read(ca) {
                err(c, "ca_file", format!("cannot read {ca}: {e}"));
            }
        }
        if raw.prefix.is_empty()
            || raw.prefix.len() > 64
            || !raw.prefix.bytes().all(|b| b.is_ascii_graphic())
        {
            err(
                c,
                "prefix",
                "must be 1 to 64 visible ASCII characters".into(),
            );
        }
        if !(1..=10_000).contains(&raw.timeout_ms) {
            err(c, "timeout_ms", "must be 1 to 10000".into());
        }
        if !(1..=10_000).contains(&raw.replicas) {
            err(c, "replicas", "must be 1 to 10000".into());
        }
        if !(500..=3_600_000).contains(&raw.slot_ttl_ms) {
            err(c, "slot_ttl_ms", "must be 500 to 3600000".into());
        }
        (c.errors.len() == before).then(|| StoreConfig {
            url: raw.url,
            username_env: raw.username_env,
            password_env: raw.password_env,
            ca_file: raw.ca_file,
            prefix: raw.prefix,
            timeout: Duration::from_millis(raw.timeout_ms),
            on_error: raw.on_store_error,
            replicas: raw.replicas,
            slot_ttl: Duration::from_millis(raw.slot_ttl_ms),
        })
    }
}

/// `redis://` or `rediss://` (Ok(true)), a host, no credentials, and what redis-rs accepts.
fn check_url(url: &str) -> Result<bool, String> {
    let (tls, rest) = if let Some(r) = url.strip_prefix("rediss://") {
        (true, r)
    } else if let Some(r) = url.strip_prefix("redis://") {
        (false, r)
    } else {
        return Err("must start with redis:// or rediss://".into());
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if authority.contains('@') {
        return Err(
            "must not carry credentials: name their variables in username_env / password_env"
                .into(),
        );
    }
    if authority.is_empty() || authority.starts_with(':') {
        return Err("must name a host".into());
    }
    if rest.contains('#') {
        return Err("must not have a fragment".into());
    }
    url.into_connection_info()
        .map_err(|e| format!("is not a Redis URL: {e}"))?;
    Ok(tls)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(v: Value) -> (Option<StoreConfig>, Vec<String>, Vec<String>) {
        let mut ch = Checker::default();
        let c = StoreConfig::from_config(&mut ch, &v);
        (
            c,
            ch.errors.into_iter().map(|e| e.path).collect(),
            ch.warnings,
        )
    }

    #[test]
    fn defaults_and_fields() {
        let (c, e, w) = parse(serde_json::json!({"url": "redis://127.0.0.1:6379/2"}));
        assert!(e.is_empty() && w.is_empty(), "{e:?} {w:?}");
        let c = c.unwrap();
        assert_eq!(c.prefix, "gateway:");
        assert_eq!(c.timeout, Duration::from_millis(50));
        assert_eq!(c.on_error, OnError::Local);
        assert_eq!(c.replicas, 1);
        let (c, e, w) = parse(serde_json::json!({
            "url": "rediss://redis.example:6380", "password_env": "GW_TEST_SURELY_UNSET_PW",
            "prefix": "gw-a:", "timeout_ms": 20, "on_store_error": "reject", "replicas": 3
        }));
        assert!(e.is_empty(), "{e:?}");
        assert!(w[0].contains("GW_TEST_SURELY_UNSET_PW"), "{w:?}");
        assert_eq!(c.unwrap().on_error, OnError::Reject);
    }

    #[test]
    fn every_problem_has_its_path() {
        let (c, e, _) = parse(serde_json::json!({
            "url": "redis://user:secret@h:1/0", "prefix": "", "timeout_ms": 0,
            "replicas": 0, "slot_ttl_ms": 10, "ca_file": "/nonexistent.pem"
        }));
        assert!(c.is_none());
        assert_eq!(
            e,
            [
                "$.limits.store.url",
                "$.limits.store.ca_file",
                "$.limits.store.prefix",
                "$.limits.store.timeout_ms",
                "$.limits.store.replicas",
                "$.limits.store.slot_ttl_ms"
            ]
        );
        for bad in ["http://h:1", "redis://", "redis://:6379", "redis://h:1/#x"] {
            let (_, e, _) = parse(serde_json::json!({ "url": bad }));
            assert_eq!(e, ["$.limits.store.url"], "{bad}");
        }
        let (_, e, _) = parse(serde_json::json!({"url": "redis://h", "on_store_error": "maybe"}));
        assert_eq!(e, ["$.limits.store"]);
        let (_, e, _) = parse(serde_json::json!({"url": "redis://h", "password": "x"}));
        assert_eq!(
            e,
            ["$.limits.store"],
            "an inline secret is an unknown field"
        );
    }
}
