//! OpenAI-style upstreams: chat completions and responses, `Authorization: Bearer`, with the
//! client's `openai-beta` and `x-client-request-id` passed on ([`crate::provider::forward`]).

use http::{header, HeaderMap, Request};

use crate::dialect::Dialect;
use crate::http::body::UpBody;
use crate::provider::forward::Forwarded;
use crate::provider::upstream::Provider;

/// The request to `p` in `dialect`, its headers written into `headers` (an emptied map whose
/// capacity is reused).
pub fn request(
    p: &Provider,
    dialect: Dialect,
    body: UpBody,
    headers: HeaderMap,
    forwarded: Option<&Forwarded>,
) -> Request<UpBody> {
    let uri = match dialect {
        Dialect::Responses => p.responses_path.clone(),
        _ => p.chat_path.clone(),
    };
    let mut r = super::request_to(p, uri, body, headers);
    let h = r.headers_mut();
    Forwarded::openai(forwarded, h);
    if let Some(a) = &p.auth {
        h.insert(header::AUTHORIZATION, a.clone());
    }
    r
}
