//! Errors in the client's dialect. A client that speaks Anthropic Messages must be able to parse
//! every failure with its own SDK, so the shape is chosen by the route the client called, never by
//! the upstream that failed.

use bytes::Bytes;
use http::StatusCode;

use crate::dialect::Dialect;

#[derive(Debug, Clone)]
pub struct GwError {
    pub status: StatusCode,
    pub message: String,
    /// OpenAI's `code` field (e.g. `model_not_found`); Anthropic has no equivalent.
    pub code: Option<&'static str>,
    pub param: Option<&'static str>,
    pub retry_after: Option<u64>,
}

impl GwError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        GwError {
            status,
            message: message.into(),
            code: None,
            param: None,
            retry_after: None,
        }
    }
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }
    pub fn unknown_model(model: &str) -> Self {
        GwError {
            code: Some("model_not_found"),
            param: Some("model"),
            ..Self::new(
                StatusCode::NOT_FOUND,
                format!("The model `{model}` does not exist or you do not have access to it."),
            )
        }
    }
    pub fn unreachable(detail: impl std::fmt::Display) -> Self {
        Self::new(
            StatusCode::BAD_GATEWAY,
            format!("upstream unreachable: {detail}"),
        )
    }
    pub fn bad_upstream(detail: impl std::fmt::Display) -> Self {
        Self::new(
            StatusCode::BAD_GATEWAY,
            format!("invalid upstream response: {detail}"),
        )
    }
    pub fn timeout() -> Self {
        Self::new(StatusCode::GATEWAY_TIMEOUT, "upstream timed out")
    }

    /// OpenAI error `type` for a status.
    fn openai_type(&self) -> &'static str {
        match self.status.as_u16() {
            400 | 404 | 405 | 408 | 409 | 413 | 415 | 422 => "invalid_request_error",
            401 => "authentication_error",
            403 => "permission_error",
            429 if self.code == Some("insufficient_quota") => "insufficient_quota",
            429 => "rate_limit_error",
            504 => "timeout_error",
            _ => "api_error",
        }
    }

    /// Anthropic error `type` for a status.
    fn anthropic_type(&self) -> &'static str {
        match self.status.as_u16() {
            401 => "authentication_error",
            403 => "permission_error",
            404 => "not_found_error",
            413 => "request_too_large",
            429 => "rate_limit_error",
            504 => "timeout_error",
            529 | 503 => "overloaded_error",
            400..=499 => "invalid_request_error",
            _ => "api_error",
        }
    }

    /// The JSON body for this error in `dialect` (no trailing newline).
    pub fn body(&self, dialect: Dialect) -> Vec<u8> {
        let v = match dialect {
            Dialect::Chat | Dialect::Responses => serde_json::json!({
                "error": {
                    "message": self.message,
                    "type": self.openai_type(),
                    "param": self.param,
                    "code": self.code,
                }
            }),
            Dialect::Messages => serde_json::json!({
                "type": "error",
                "error": { "type": self.anthropic_type(), "message": self.message },
            }),
        };
        serde_json::to_vec(&v).expect("serializing a Value cannot fail")
    }

    /// The SSE event that ends a stream that failed after its headers were sent.
    pub fn sse_event(&self, dialect: Dialect, sequence_number: u64) -> Bytes {
        let mut out = Vec::with_capacity(160);
        match dialect {
            Dialect::Chat => {
                out.extend_from_slice(b"data: ");
                out.extend_from_slice(&self.body(dialect));
                out.extend_from_slice(b"\n\n");
            }
            Dialect::Messages => {
                out.extend_from_slice(b"event: error\ndata: ");
                out.extend_from_slice(&self.body(dialect));
                out.extend_from_slice(b"\n\n");
            }
            Dialect::Responses => {
                let v = serde_json::json!({
                    "type": "error",
                    "code": self.code.unwrap_or(self.openai_type()),
                    "message": self.message,
                    "param": self.param,
                    "sequence_number": sequence_number,
                });
                out.extend_from_slice(b"event: error\ndata: ");
                out.extend_from_slice(&serde_json::to_vec(&v).expect("Value serializes"));
                out.extend_from_slice(b"\n\n");
            }
        }
        Bytes::from(out)
    }
}
