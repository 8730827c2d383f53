//! Anthropic-style upstreams: messages, `x-api-key` and `anthropic-version`.

use http::{HeaderMap, HeaderName, HeaderValue, Request};

use crate::http::body::UpBody;
use crate::provider::upstream::Provider;

/// The API version the translator's Messages shapes follow.
const VERSION: HeaderValue = HeaderValue::from_static("2023-06-01");
static X_API_KEY: HeaderName = HeaderName::from_static("x-api-key");
static ANTHROPIC_VERSION: HeaderName = HeaderName::from_static("anthropic-version");

/// The request to `p`, its headers written into `headers` (an emptied map whose capacity is
/// reused).
pub fn request(p: &Provider, body: UpBody, headers: HeaderMap) -> Request<UpBody> {
    let mut r = super::request_to(p, p.messages_path.clone(), body, headers);
    let h = r.headers_mut();
    h.insert(ANTHROPIC_VERSION.clone(), VERSION);
    if let Some(a) = &p.auth {
        h.insert(X_API_KEY.clone(), a.clone());
    }
    r
}
