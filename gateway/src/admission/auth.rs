//! Caller authentication: API keys presented as `Authorization: Bearer KEY` or `x-api-key: KEY`.
//!
//! Each key is configured by the name of the environment variable that holds it:
//!
//! ```json
//! "keys": [ { "id": "team-a", "key_env": "GW_KEY_TEAM_A", "models": ["gpt-4o-mini"] } ]
//! ```
//!
//! Only the SHA-256 digest of a key is kept in memory. A presented key is hashed and compared with
//! every configured digest in constant time (no early exit on the first differing byte, and no
//! early exit on the first matching key), so neither the timing of one comparison nor the position
//! of the matching key tells an attacker anything about a key. `models` absent or containing `"*"`
//! allows every model. No `keys` (or an empty list) means an open gateway.
//!
//! A key whose environment variable is unset is a warning, not an error (so `gateway validate` can
//! run where secrets are absent), and that key can never authenticate: the gateway stays closed.

use std::collections::HashSet;
use std::sync::Arc;

use http::{HeaderMap, StatusCode};
use serde::Deserialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::checker::Checker;
use crate::dialect::error::GwError;

/// One entry of the `keys` list, as written in the config file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyConfig {
    pub id: String,
    pub key_env: String,
    #[serde(default)]
    pub models: Option<Vec<String>>,
}

#[derive(Debug)]
struct Entry {
    id: Arc<str>,
    /// `None` when the environment variable was unset: the entry matches nothing.
    digest: Option<[u8; 32]>,
    /// `None`: every model.
    models: Option<Arc<HashSet<String>>>,
}

/// The configured keys; immutable, rebuilt on reload.
#[derive(Debug, Default)]
pub struct Keys {
    entries: Vec<Entry>,
}

/// Who is calling. `id` is the configured key id (never the key), `None` on an open gateway.
#[derive(Debug, Clone, Default)]
pub struct Caller {
    pub id: Option<Arc<str>>,
    models: Option<Arc<HashSet<String>>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthError {
    /// No key in either header: 401.
    Missing,
    /// A key that matches no configured key: 401.
    Unknown,
    /// A valid key that may not use this model: 403.
    ModelNotAllowed,
}

impl AuthError {
    pub fn status(self) -> StatusCode {
        match self {
            AuthError::Missing | AuthError::Unknown => StatusCode::UNAUTHORIZED,
            AuthError::ModelNotAllowed => StatusCode::FORBIDDEN,
        }
    }

    pub fn message(self) -> &'static str {
        match self {
            AuthError::Missing => {
                "missing API key: send `Authorization: Bearer KEY` or `x-api-key: KEY`"
            }
            AuthError::Unknown => "invalid API key",
            AuthError::ModelNotAllowed => "this API key is not allowed to use this model",
        }
    }
}

impl From<AuthError> for GwError {
    fn from(e: AuthError) -> GwError {
        let mut g = GwError::new(e.status(), e.message());
        g.code = Some(match e {
            AuthError::Missing | AuthError::Unknown => "invalid_api_key",
            AuthError::ModelNotAllowed => "model_not_allowed",
        });
        g
    }
}

impl Keys {
    /// Builds the key set from the top-level `keys` value (absent = open gateway). Problems are
    /// pushed with their JSON path; what could be built is returned either way.
    pub fn from_config(c: &mut Checker, v: Option<&Value>) -> Keys {
        Self::from_config_with_env(c, v, &|name| std::env::var(name).ok())
    }

    /// [`Keys::from_config`] with the environment the key variables are read from.
    pub fn from_config_with_env(
        c: &mut Checker,
        v: Option<&Value>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Keys {
        let Some(v) = v else {
            return Keys::default();
        };
        let Some(list) = v.as_array() else {
            c.err("$.keys", "must be an array");
            return Keys::default();
        };
        let mut entries = Vec::with_capacity(list.len());
        let mut ids = HashSet::new();
        let mut digests: Vec<[u8; 32]> = Vec::new();
        for (i, item) in list.iter().enumerate() {
            let path = format!("$.keys[{i}]");
            let kc: KeyConfig = match KeyConfig::deserialize(item) {
                Ok(k) => k,
                Err(e) => {
                    c.err(path, e.to_string());
                    continue;
                }
            };
            if kc.id.is_empty() {
                c.err(format!("{path}.id"), "must not be empty");
                continue;
            }
            if !ids.insert(kc.id.clone()) {
                c.err(
                    format!("{path}.id"),
                    format!("duplicate key id {:?}", kc.id),
                );
                continue;
            }
            if kc.key_env.is_empty() {
                c.err(format!("{path}.key_env"), "must not be empty");
                continue;
            }
            if let Some(m) = &kc.models {
                if m.is_empty() {
                    c.err(
                        format!("{path}.models"),
                        "must name at least one model (omit it, or use \"*\", for all)",
                    );
                    continue;
                }
            }
            let digest = match env(&kc.key_env) {
                Some(k) if !k.is_empty() => {
                    let d = sha256(k.as_bytes());
                    if digests.contains(&d) {
                        c.err(
                            format!("{path}.key_env"),
                            format!("${} holds the same key as another entry", kc.key_env),
                        );
                        continue;
                    }
                    digests.push(d);
                    Some(d)
                }
                _ => {
                    c.warnings.push(format!(
                        "{path}.key_env: ${} is not set or empty; key {:?} cannot authenticate",
                        kc.key_env, kc.id
                    ));
                    None
                }
            };
            let models = kc.models.and_then(|m| {
                if m.iter().any(|s| s == "*") {
                    None
                } else {
                    Some(Arc::new(m.into_iter().collect()))
                }
            });
            entries.push(Entry {
                id: Arc::from(kc.id.as_str()),
                digest,
                models,
            });
        }
        // An entry list that is present but entirely invalid must not open the gateway: keep
        // one entry that matches nothing.
        if entries.is_empty() && !list.is_empty() {
            entries.push(Entry {
                id: Arc::from(""),
                digest: None,
                models: None,
            });
        }
        Keys { entries }
    }

    /// No key configured: every request is allowed, without identity.
    pub fn is_open(&self) -> bool {
        self.entries.is_empty()
    }

    /// Ids of the configured keys, in config order (for per-key rate-limit state).
    pub fn ids(&self) -> Vec<String> {
        self.entries
            .iter()
            .filter(|e| !e.id.is_empty())
            .map(|e| e.id.to_string())
            .collect()
    }

    /// Step 1, from the request headers alone (before the body is read): 401 or the caller.
    pub fn authenticate(&self, headers: &HeaderMap) -> Result<Caller, AuthError> {
        if self.is_open() {
            return Ok(Caller::default());
        }
        let presented = presented_key(headers).ok_or(AuthError::Missing)?;
        let d = sha256(presented);
        let mut found: Option<&Entry> = None;
        for e in &self.entries {
            // Entries without a digest compare against a digest no key can have (all ones is as
            // likely as any other value, but the flag below keeps them from ever matching).
            let (cand, valid) = match &e.digest {
                Some(c) => (c, true),
                None => (&[0xffu8; 32], false),
            };
            let eq = ct_eq(&d, cand) & valid;
            if eq && found.is_none() {
                found = Some(e);
            }
        }
        let e = found.ok_or(AuthError::Unknown)?;
        Ok(Caller {
            id: Some(e.id.clone()),
            models: e.models.clone(),
        })
    }
}

impl Caller {
    /// Step 2, once the model alias is known: 403 when this key may not use it.
    pub fn authorize(&self, model: &str) -> Result<(), AuthError> {
        match &self.models {
            Some(m) if !m.contains(model) => Err(AuthError::ModelNotAllowed),
            _ => Ok(()),
        }
    }

    /// The key id for logs and metrics ("-" on an open gateway).
    #[cfg(test)]
    pub fn id_str(&self) -> &str {
        self.id.as_deref().unwrap_or("-")
    }
}

/// The key from `x-api-key`, else from `Authorization: Bearer` (scheme case-insensitive).
fn presented_key(headers: &HeaderMap) -> Option<&[u8]> {
    if let Some(v) = headers.get("x-api-key") {
        let b = trim(v.as_bytes());
        if !b.is_empty() {
            return Some(b);
        }
    }
    let v = headers.get(http::header::AUTHORIZATION)?.as_bytes();
    let v = trim(v);
    if v.len() > 7 && v[..7].eq_ignore_ascii_case(b"bearer ") {
        let k = trim(&v[7..]);
        if !k.is_empty() {
            return Some(k);
        }
    }
    None
}

fn trim(mut b: &[u8]) -> &[u8] {
    while let [first, rest @ ..] = b {
        if first.is_ascii_whitespace() {
            b = rest;
        } else {
            break;
        }
    }
    while let [rest @ .., last] = b {
        if last.is_ascii_whitespace() {
            b = rest;
        } else {
            break;
        }
    }
    b
}

fn sha256(b: &[u8]) -> [u8; 32] {
    Sha256::digest(b).into()
}

/// Constant-time equality of two digests: every byte is examined whatever the data.
fn ct_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    let mut acc = 0u8;
    for i in 0..32 {
        acc |= a[i] ^ b[i];
    }
    std::hint::black_box(acc) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::ConfigError;
    use http::HeaderValue;

    fn keys(json: &str, env: &[(&str, &str)]) -> (Keys, Vec<ConfigError>, Vec<String>) {
        let v: Value = serde_json::from_str(json).unwrap();
        let mut c = Checker::default();
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        let k = Keys::from_config_with_env(&mut c, Some(&v), &|n| {
            env.iter().find(|(a, _)| a == n).map(|(_, b)| b.clone())
        });
        (k, c.errors, c.warnings)
    }

    fn hdr(name: &'static str, v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(name, HeaderValue::from_str(v).unwrap());
        h
    }

    const CFG: &str = r#"[{"id":"a","key_env":"KA","models":["m1"]},
                          {"id":"b","key_env":"KB"},
                          {"id":"c","key_env":"KC_UNSET"}]"#;

    #[test]
    fn bearer_and_x_api_key() {
        let (k, errs, warns) = keys(CFG, &[("KA", "sk-a"), ("KB", "sk-b")]);
        assert!(errs.is_empty(), "{errs:?}");
        assert_eq!(warns.len(), 1, "{warns:?}");
        assert!(!k.is_open());
        let c = k
            .authenticate(&hdr("authorization", "Bearer sk-a"))
            .unwrap();
        assert_eq!(c.id_str(), "a");
        let c = k
            .authenticate(&hdr("authorization", "bearer  sk-b "))
            .unwrap();
        assert_eq!(c.id_str(), "b");
        let c = k.authenticate(&hdr("x-api-key", "sk-b")).unwrap();
        assert_eq!(c.id_str(), "b");
    }

    #[test]
    fn missing_unknown_forbidden() {
        let (k, _, _) = keys(CFG, &[("KA", "sk-a"), ("KB", "sk-b")]);
        assert_eq!(
            k.authenticate(&HeaderMap::new()).unwrap_err(),
            AuthError::Missing
        );
        assert_eq!(
            k.authenticate(&hdr("authorization", "Basic abc"))
                .unwrap_err(),
            AuthError::Missing
        );
        assert_eq!(
            k.authenticate(&hdr("x-api-key", "sk-zz")).unwrap_err(),
            AuthError::Unknown
        );
        // The unset variable's entry matches nothing, not even the empty key.
        assert_eq!(
            k.authenticate(&hdr("x-api-key", " ")).unwrap_err(),
            AuthError::Missing
        );
        let a = k.authenticate(&hdr("x-api-key", "sk-a")).unwrap();
        assert!(a.authorize("m1").is_ok());
        assert_eq!(a.authorize("m2").unwrap_err(), AuthError::ModelNotAllowed);
        assert_eq!(AuthError::ModelNotAllowed.status(), 403);
        assert_eq!(AuthError::Unknown.status(), 401);
        let b = k.authenticate(&hdr("x-api-key", "sk-b")).unwrap();
        assert!(b.authorize("anything").is_ok());
    }

    #[test]
    fn open_when_no_keys() {
        let k = Keys::from_config(&mut Checker::default(), None);
        assert!(k.is_open());
        let c = k.authenticate(&HeaderMap::new()).unwrap();
        assert_eq!(c.id_str(), "-");
        assert!(c.authorize("x").is_ok());
        let (k, _, _) = keys("[]", &[]);
        assert!(k.is_open());
    }

    #[test]
    fn all_invalid_entries_keep_gateway_closed() {
        let (k, errs, _) = keys(r#"[{"id":"a"}]"#, &[]);
        assert_eq!(errs.len(), 1);
        assert!(!k.is_open());
        assert_eq!(
            k.authenticate(&hdr("x-api-key", "x")).unwrap_err(),
            AuthError::Unknown
        );
    }

    #[test]
    fn config_errors_have_paths() {
        let (_, errs, _) = keys(
            r#"[{"id":"a","key_env":"K1"},{"id":"a","key_env":"K2"},{"id":"b","key_env":"K3","models":[]},
                {"id":"c","key_env":"K4","extra":1},{"id":"d","key_env":"K5"}]"#,
            &[("K1", "s"), ("K2", "t"), ("K5", "s")],
        );
        let paths: Vec<_> = errs.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "$.keys[1].id",
                "$.keys[2].models",
                "$.keys[3]",
                "$.keys[4].key_env"
            ],
            "{errs:?}"
        );
        let (_, errs, _) = keys(r#"{"id":"a"}"#, &[]);
        assert_eq!(errs[0].path, "$.keys");
    }

    #[test]
    fn stores_only_digests() {
        let (k, _, _) = keys(CFG, &[("KA", "sk-secret-a")]);
        let dbg = format!("{k:?}");
        assert!(!dbg.contains("sk-secret-a"));
    }

    #[test]
    fn ct_eq_works() {
        let a = [7u8; 32];
        let mut b = a;
        assert!(ct_eq(&a, &b));
        b[31] = 8;
        assert!(!ct_eq(&a, &b));
    }
}
