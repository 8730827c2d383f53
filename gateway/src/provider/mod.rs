//! Upstream providers: the `providers` config section ([`upstream`]), which dialects each kind
//! speaks, and the request each expects ([`openai`], [`anthropic`]) with the client's headers
//! that belong to its API ([`forward`]); a deployment's price and what a request costs at it
//! ([`price`]).

pub mod anthropic;
pub mod forward;
pub mod openai;
pub mod price;
pub mod upstream;

use http::{header, HeaderMap, HeaderValue, Method, Request, Uri};

use crate::dialect::Dialect;
use crate::http::arena;
use crate::http::body::UpBody;
use crate::provider::forward::Forwarded;
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

/// The request for `p` in `dialect` carrying `body`, with the client's allowed headers
/// `forwarded` that belong to `p`'s API; `native` when the body is the client's own (its
/// dialect's version headers then go on too). `headers` is a map to write its headers into
/// (emptied here: a used one is passed so that its capacity is reused).
pub fn request(
    p: &Provider,
    dialect: Dialect,
    body: UpBody,
    headers: HeaderMap,
    forwarded: Option<&Forwarded>,
    native: bool,
) -> Request<UpBody> {
    match p.kind {
        ProviderKind::OpenAi => openai::request(p, dialect, body, headers, forwarded),
        ProviderKind::Anthropic => anthropic::request(p, body, headers, forwarded, native),
    }
}

/// A POST of a JSON `body` to `uri` (origin-form) at `p`, with what every upstream request
/// carries: `host`, `content-type` and `content-length` (set here so that hyper does not build it).
fn request_to(p: &Provider, uri: Uri, body: UpBody, mut headers: HeaderMap) -> Request<UpBody> {
    headers.clear();
    headers.insert(header::HOST, p.origin.host.clone());
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(header::CONTENT_LENGTH, arena::decimal(body.len()));
    let mut r = Request::new(body);
    *r.method_mut() = Method::POST;
    *r.uri_mut() = uri;
    *r.headers_mut() = headers;
    r
}
