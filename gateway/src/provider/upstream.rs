//! The `providers` config section: each upstream with everything needed to address it computed
//! once at load (URIs, the credential header value), so that no request formats one.

use std::collections::HashMap;
use std::sync::Arc;

use http::{HeaderValue, Uri};
use serde_json::{Map, Value};

use crate::checker::Checker;
use crate::dialect::chat::request::MaxTokensField;
use crate::http::client::Origin;

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
    /// Where its connections go (and its `host` header).
    pub origin: Origin,
    /// Each dialect's endpoint in origin-form (the base URL's path included), as HTTP/1.1 sends it.
    pub chat_path: Uri,
    pub messages_path: Uri,
    pub responses_path: Uri,
    /// `Authorization: Bearer …` for openai, `x-api-key` for anthropic; `None` when the
    /// environment variable is unset (the upstream then decides whether that is acceptable).
    pub auth: Option<HeaderValue>,
    /// Where a translated chat request puts its output cap (`max_tokens_field`, openai kind):
    /// `max_completion_tokens` unless the server knows only `max_tokens`.
    pub max_tokens_field: MaxTokensField,
}

impl Provider {
    /// A provider at `http://h` without credentials, for tests of the layers above.
    #[cfg(test)]
    pub fn stub(name: &str, kind: ProviderKind) -> Provider {
        Provider {
            name: name.into(),
            kind,
            origin: Origin::of(&Uri::from_static("http://h")).unwrap(),
            chat_path: Uri::from_static("/v1/chat/completions"),
            messages_path: Uri::from_static("/v1/messages"),
            responses_path: Uri::from_static("/v1/responses"),
            auth: None,
            max_tokens_field: MaxTokensField::default(),
        }
    }
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
    let max_tokens_field = max_tokens_field(c, o, path, kind);
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
    let base: Uri = base.parse().expect("base_url was checked to parse");
    let origin = match Origin::of(&base) {
        Ok(o) => o,
        Err(e) => {
            c.err(format!("{path}.base_url"), e);
            return None;
        }
    };
    let prefix = base.path().trim_end_matches('/');
    let path = |suffix: &str| -> Uri {
        format!("{prefix}{suffix}")
            .parse()
            .expect("a checked URL's path stays a path")
    };
    Some(Provider {
        name: name.to_owned(),
        kind,
        origin,
        chat_path: path("/v1/chat/completions"),
        messages_path: path("/v1/messages"),
        responses_path: path("/v1/responses"),
        auth,
        max_tokens_field: max_tokens_field?,
    })
}

/// `max_tokens_field`: the member a translated chat request carries its output cap in. OpenAI's
/// own API takes `max_completion_tokens` (its reasoning models refuse `max_tokens`, which it
/// deprecates); an OpenAI-compatible server that knows only `max_tokens` sets that instead.
fn max_tokens_field(
    c: &mut Checker,
    o: &Map<String, Value>,
    path: &str,
    kind: Option<ProviderKind>,
) -> Option<MaxTokensField> {
    let Some(v) = o.get("max_tokens_field") else {
        return Some(MaxTokensField::default());
    };
    let at = format!("{path}.max_tokens_field");
    if kind == Some(ProviderKind::Anthropic) {
        c.err(
            at,
            "applies to openai providers only (Anthropic takes max_tokens)",
        );
        return None;
    }
    let field = v
        .as_str()
        .and_then(|s| MaxTokensField::ALL.into_iter().find(|f| f.name() == s));
    if field.is_none() {
        c.err(at, "must be \"max_completion_tokens\" or \"max_tokens\"");
    }
    field
}
