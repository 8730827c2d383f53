//! The client-facing API dialects and everything each one needs, beside the neutral form they are
//! translated through.
//!
//! - [`chat`], [`messages`], [`responses`]: one module per dialect, each with its `request`,
//!   `response` and `stream` halves (into and out of the neutral form).
//! - [`neutral`]: the neutral form; [`decode`] and [`encode`]: helpers the dialect modules share;
//!   [`members`]: the members of a request no field reads, which translation refuses or drops.
//! - [`translate`]: pairs a client dialect with an upstream dialect through the neutral form.
//! - [`native`]: the stream of a route whose upstream speaks the client's own dialect;
//!   [`body_head`]: the native route's minimal parse of a request body (`model`, `stream`);
//!   [`stream_usage`]: the native chat stream's request for usage and the chunk it drops.
//! - [`transform`]: what a stream translation is; [`error`]: the error every layer returns, in
//!   each dialect's shape.
//!
//! Nothing here knows about HTTP connections, configuration, admission or telemetry: the modules
//! take bytes and return bytes (or neutral values), which is what lets the fuzz targets drive them
//! directly.

pub mod body_head;
pub mod chat;
pub mod decode;
pub mod encode;
pub mod error;
pub mod members;
pub mod messages;
pub mod native;
pub mod neutral;
pub mod responses;
pub mod stream_usage;
pub mod transform;
pub mod translate;

/// The three client-facing API dialects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialect {
    Chat,
    Messages,
    Responses,
}

impl Dialect {
    /// The dialect's short name (`chat`, `messages`, `responses`), as tools and reports print it.
    pub fn name(self) -> &'static str {
        match self {
            Dialect::Chat => "chat",
            Dialect::Messages => "messages",
            Dialect::Responses => "responses",
        }
    }
}

/// Whether an upstream stream event of this name can carry token usage: Anthropic Messages'
/// `message_start` and `message_delta`, OpenAI Responses' `response.completed` and
/// `response.incomplete`. Chat Completions frames have no name (their data is searched).
#[inline]
pub fn event_carries_usage(name: &[u8]) -> bool {
    matches!(
        name,
        b"message_start" | b"message_delta" | b"response.completed" | b"response.incomplete"
    )
}
