//! The `providers` config section: each upstream with everything needed to address it computed
//! once at load (URIs, the credential header value), so that no request formats one.

use std::collections::HashMap;
use std::sync::Arc;

use http::{HeaderValue, Uri};
use serde_json::{Map, Value};

use crate::config::check::Checker;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProviderKind {
    OpenAi,
    Anthropic,
}

impl ProviderKind {
    /// Every kind, as the config's `kind` field names it.
    pub const ALL: [ProviderKind; 2] = [ProviderKind::OpenAi, ProviderKind::Anthropic];

    pub fn name(self) -> &'static str {
        match self {
            ProviderKind::OpenAi => "openai",
            ProviderKind::Anthropic => "anthropic",
        }
    }
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

/// The `providers` section: every provider that passes its checks, by name.
pub fn section(c: &mut Checker, top: &Map<String, Value>) -> HashMap<String, Arc<Provider>> {
    let mut providers = HashMap::new();
    let Some(entries) = c.named_section(top, "providers", "provider") else {
        return providers;
    };
    for (name, v) in entries {
        let path = format!("$.providers.{name}");
        if let Some(prov) = from_config(c, name, v, &path) {
            providers.insert(name.clone(), Arc::new(prov));
        }
    }
    providers
}

/// One provider's entry, checked field by field.
pub fn from_config(c: &mut Checker, name: &str, v: &Value, path: &str) -> Option<Provider> {
    let o = c.obj(v, path)?;
    let kind = c.string(o, "kind", path).and_then(|k| {
        let kind = ProviderKind::ALL.into_iter().find(|p| p.name() == k);
        if kind.is_none() {
            let names: Vec<String> = ProviderKind::ALL
                .iter()
                .map(|p| format!("{:?}", p.name()))
                .collect();
            c.err(
                format!("{path}.kind"),
                format!("{k:?} is not one of {}", names.join(", ")),
            );
        }
        kind
    });
    let base = c.string(o, "base_url", path).and_then(|b| {
        let b = b.trim_end_matches('/');
        if !(b.starts_with("http://") || b.starts_with("https://")) {
            c.err(
                format!("{path}.base_url"),
                "must be an http:// or https:// URL",
            );
            return None;
        }
        if b.ends_with("/v1") {
            c.err(
                format!("{path}.base_url"),
                "must not end in /v1 (the gateway appends /v1/...)",
            );
            return None;
        }
        match b.parse::<Uri>() {
            Ok(u) if u.host().is_some() => Some(b.to_owned()),
            _ => {
                c.err(format!("{path}.base_url"), format!("{b:?} is not a URL"));
                None
            }
        }
    });
    let env = c.string(o, "api_key_env", path);
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
                    c.err(
                        format!("{path}.api_key_env"),
                        format!("${env} holds characters not allowed in a header"),
                    );
                    None
                }
            }
        }
        Err(_) => {
            c.warnings.push(format!(
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
