//! OpenAI-style upstreams: chat completions and responses, `Authorization: Bearer`.

use http::{header, HeaderValue, Method, Request};

use crate::dialect::Dialect;
use crate::http::body::UpBody;
use crate::provider::upstream::Provider;

pub fn request(p: &Provider, dialect: Dialect, body: UpBody) -> Request<UpBody> {
    let uri = match dialect {
        Dialect::Responses => p.responses_uri.clone(),
        _ => p.chat_uri.clone(),
    };
    let mut r = Request::new(body);
    *r.method_mut() = Method::POST;
    *r.uri_mut() = uri;
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Some(a) = &p.auth {
        h.insert(header::AUTHORIZATION, a.clone());
    }
    r
}
