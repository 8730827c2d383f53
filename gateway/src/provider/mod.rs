//! Upstream providers: the `providers` config section ([`upstream`]), which dialects each kind
//! speaks, and the request each expects ([`openai`], [`anthropic`]).

pub mod anthropic;
pub mod openai;
pub mod upstream;

use http::Request;

use crate::dialect::Dialect;
use crate::http::body::UpBody;
use crate::provider::upstream::{Provider, ProviderKind};

/// The dialect the upstream is spoken to in, for a client dialect: the client's own when the
/// provider speaks it (the native route), otherwise the provider's main dialect.
pub fn upstream_dialect(client: Dialect, kind: ProviderKind) -> Dialect {
    match (kind, client) {
        (ProviderKind::OpenAi, Dialect::Chat | Dialect::Responses) => client,
        (ProviderKind::OpenAi, Dialect::Messages) => Dialect::Chat,
        (ProviderKind::Anthropic, _) => Dialect::Messages,
    }
}

pub fn request(p: &Provider, dialect: Dialect, body: UpBody) -> Request<UpBody> {
    match p.kind {
        ProviderKind::OpenAi => openai::request(p, dialect, body),
        ProviderKind::Anthropic => anthropic::request(p, body),
    }
}
