//! Anthropic-style upstreams: messages, `x-api-key` and `anthropic-version`.

use http::{header, HeaderName, HeaderValue, Method, Request};

use crate::http::body::UpBody;
use crate::provider::upstream::Provider;

/// The API version the translator's Messages shapes follow.
const VERSION: HeaderValue = HeaderValue::from_static("2023-06-01");
static X_API_KEY: HeaderName = HeaderName::from_static("x-api-key");
static ANTHROPIC_VERSION: HeaderName = HeaderName::from_static("anthropic-version");

pub fn request(p: &Provider, body: UpBody) -> Request<UpBody> {
    let mut r = Request::new(body);
    *r.method_mut() = Method::POST;
    *r.uri_mut() = p.messages_uri.clone();
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.insert(ANTHROPIC_VERSION.clone(), VERSION);
    if let Some(a) = &p.auth {
        h.insert(X_API_KEY.clone(), a.clone());
    }
    r
}
