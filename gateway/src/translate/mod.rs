//! Translation between dialects, for routes where the client's dialect is not the provider's.

use bytes::Bytes;

use crate::body::StreamTransform;
use crate::config::Route;
use crate::error::{Dialect, GwError};

pub struct Translation {}

impl Translation {
    pub fn stream(self) -> Box<dyn StreamTransform> {
        unimplemented!()
    }
    pub fn response(self, _upstream: &[u8]) -> Result<Bytes, GwError> {
        unimplemented!()
    }
}

pub fn request(
    _client: Dialect,
    _upstream: Dialect,
    _body: &[u8],
    _route: &Route,
) -> Result<(Bytes, Translation), GwError> {
    Err(GwError::new(
        http::StatusCode::NOT_IMPLEMENTED,
        "translation not implemented yet",
    ))
}
