//! Anthropic-style upstreams: messages, `x-api-key` and `anthropic-version`, with the client's
//! `anthropic-beta` (and on the native route its `anthropic-version`) passed on
//! ([`crate::provider::forward`]).

use http::{HeaderMap, HeaderName, HeaderValue, Request};

use crate::http::body::UpBody;
use crate::provider::forward::Forwarded;
use crate::provider::upstream::Provider;

/// The API version the translator's Messages shapes follow, and the one sent for a client that
/// names none.
const VERSION: HeaderValue = HeaderValue::from_static("2023-06-01");
static X_API_KEY: HeaderName = HeaderName::from_static("x-api-key");

/// The request to `p`, its headers written into `headers` (an emptied map whose capacity is
/// reused); `native` when the body is the client's own Messages request.
pub fn request(
    p: &Provider,
    body: UpBody,
    headers: HeaderMap,
    forwarded: Option<&Forwarded>,
    native: bool,
) -> Request<UpBody> {
    let mut r = super::request_to(p, p.messages_path.clone(), body, headers);
    let h = r.headers_mut();
    Forwarded::anthropic(forwarded, h, VERSION, native);
    if let Some(a) = &p.auth {
        h.insert(X_API_KEY.clone(), a.clone());
    }
    r
}
