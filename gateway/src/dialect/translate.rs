//! Translation between dialects, for routes where the client's dialect is not one the provider
//! speaks: the client's request is decoded by its dialect into the neutral form and encoded for the
//! upstream's; the answer goes back the same way, a complete one at once ([`Translation::response`])
//! and a stream event by event ([`Translation::stream`]).
//!
//! ```text
//! requests:  chat | messages | responses  ->  neutral  ->  chat | messages
//! answers:   chat | messages              ->  neutral  ->  chat | messages | responses
//! ```
//!
//! Parts of a request that have no translation are refused with a 400 in the client's dialect
//! naming them, or left out when the alias's `drop` list names them, and then reported
//! (docs/translation-policy.md); never dropped silently.

use bytes::{Bytes, BytesMut};

use crate::dialect::chat::request::MaxTokensField;
use crate::dialect::error::GwError;
use crate::dialect::neutral::{Decoder, Encoder, Event, Unmapped};
use crate::dialect::transform::StreamTransform;
use crate::dialect::{chat, messages, responses, Dialect};
use crate::sse::SseEvent;

/// What the response side of a translated exchange needs to remember from the request.
pub struct Translation {
    pub client: Dialect,
    pub upstream: Dialect,
    pub include_usage: bool,
    /// Namespaces whose tools the request flattened: their calls go back under them.
    pub namespaces: Vec<String>,
    /// The parts dropped because the alias's `drop` list names them (empty when none), comma
    /// separated, for the response header and the access log.
    pub dropped: String,
}

impl Translation {
    /// A complete upstream answer in the client's dialect, naming the model `alias`.
    pub fn response(&self, upstream: &[u8], alias: &str) -> Result<Bytes, GwError> {
        let resp = match self.upstream {
            Dialect::Chat => chat::response::decode(upstream)?,
            Dialect::Messages => messages::response::decode(upstream)?,
            Dialect::Responses => {
                return Err(GwError::bad_upstream(
                    "responses upstreams are only used natively",
                ))
            }
        };
        let v = match self.client {
            Dialect::Chat => chat::response::encode(&resp, alias),
            Dialect::Messages => messages::response::encode(&resp, alias),
            Dialect::Responses => responses::response::encode(&resp, alias, &self.namespaces),
        };
        Ok(Bytes::from(
            serde_json::to_vec(&v).expect("serializing a Value cannot fail"),
        ))
    }

    /// The transform of an upstream stream into the client's dialect, naming the model `alias`.
    pub fn stream(self, alias: &str) -> Box<dyn StreamTransform> {
        let decoder: Box<dyn Decoder> = match self.upstream {
            Dialect::Messages => Box::<messages::stream::StreamDecoder>::default(),
            _ => Box::<chat::stream::StreamDecoder>::default(),
        };
        let alias = alias.to_owned();
        let encoder: Box<dyn Encoder> = match self.client {
            Dialect::Chat => Box::new(chat::stream::StreamEncoder::new(alias, self.include_usage)),
            Dialect::Messages => Box::new(messages::stream::StreamEncoder::new(alias)),
            Dialect::Responses => Box::new(responses::stream::StreamEncoder::new(
                alias,
                self.namespaces,
            )),
        };
        Box::new(Translate {
            decoder,
            encoder,
            done: false,
        })
    }
}

struct Translate {
    decoder: Box<dyn Decoder>,
    encoder: Box<dyn Encoder>,
    done: bool,
}

impl StreamTransform for Translate {
    fn on_event(&mut self, ev: &SseEvent, out: &mut BytesMut) -> Result<(), GwError> {
        if self.done {
            return Ok(());
        }
        let enc = &mut self.encoder;
        let done = &mut self.done;
        self.decoder.event(ev, &mut |e| {
            if matches!(e, Event::Done) {
                *done = true;
            }
            enc.event(e, out)
        })
    }

    fn on_end(&mut self, _out: &mut BytesMut) -> Result<(), GwError> {
        if self.done {
            Ok(())
        } else {
            Err(GwError::bad_upstream(
                "upstream closed the stream before its final event",
            ))
        }
    }

    fn on_error(&mut self, err: &GwError, out: &mut BytesMut) {
        self.encoder.error(err, out);
    }
}

/// What a translated request is written for: the upstream's dialect and model, and what its
/// provider's settings change in the body.
#[derive(Clone, Copy)]
pub struct Target<'a> {
    pub dialect: Dialect,
    /// The upstream model, as a JSON string literal.
    pub model_json: &'a [u8],
    /// Where a chat upstream takes the output cap (the provider's `max_tokens_field`).
    pub max_tokens: MaxTokensField,
}

/// Decodes the client's request and encodes it for `target`. `betas` is the client's
/// `anthropic-beta` header (its lines joined), which a Messages client's request carries as parts
/// too. A part with no counterpart upstream is a 400 naming it unless `drop` (the alias's `drop`
/// list) names it; then it is left out and listed in [`Translation::dropped`].
pub fn request(
    client: Dialect,
    target: &Target,
    body: &[u8],
    betas: Option<&[u8]>,
    drop: &[String],
) -> Result<(Bytes, Translation), GwError> {
    let mut req = match client {
        Dialect::Chat => chat::request::decode(body)?,
        Dialect::Messages => messages::request::decode(body)?,
        Dialect::Responses => responses::request::decode(body)?,
    };
    if let (Dialect::Messages, Some(b)) = (client, betas) {
        messages::betas::note(&mut req, b);
    }
    if target.dialect == Dialect::Messages && req.temperature.is_some() && req.top_p.is_some() {
        // Anthropic's current models refuse the two together; dropping `top_p` keeps the one
        // Anthropic's documentation recommends.
        req.top_p = None;
        req.unmapped("top_p", || "top_p and temperature together".to_owned());
    }
    let dropped = settle_unmapped(&req.unmapped, target.dialect, drop)?;
    let bytes = match target.dialect {
        Dialect::Chat => chat::request::encode(&req, target.model_json, target.max_tokens),
        Dialect::Messages => messages::request::encode(&req, target.model_json),
        Dialect::Responses => {
            return Err(GwError::new(
                http::StatusCode::INTERNAL_SERVER_ERROR,
                "no translation into the responses dialect",
            ))
        }
    };
    Ok((
        bytes,
        Translation {
            client,
            upstream: target.dialect,
            include_usage: req.include_usage,
            namespaces: std::mem::take(&mut req.namespaces),
            dropped,
        },
    ))
}

/// Why a `drop` entry is refused when the config loads: one that would leave a restriction out
/// alone and so widen its tool (`tools.web_search.external_web_access`). A member of a hosted
/// tool that cannot cross takes its tool with it, reported as the tool (`tools.web_search`), which
/// is what the entry must name; `search_context_size`, which restricts nothing, is the one member
/// dropped alone.
pub fn drop_entry_error(entry: &str) -> Option<String> {
    let rest = entry.strip_prefix("tools.")?;
    let (tool, member) = rest.split_once('.')?;
    if member == "search_context_size" {
        return None;
    }
    Some(format!(
        "{entry:?} would drop a member of a tool alone, which may be a restriction (the tool \
         would then do more than the client allowed): a tool member that cannot cross takes its \
         tool with it, so name the tool, \"tools.{tool}\" (docs/translation-policy.md)"
    ))
}

/// The parts with no counterpart upstream: a 400 naming those the alias does not drop, else the
/// dropped ones' names, comma separated.
fn settle_unmapped(
    unmapped: &[Unmapped],
    upstream: Dialect,
    drop: &[String],
) -> Result<String, GwError> {
    let refused: Vec<&Unmapped> = unmapped
        .iter()
        .filter(|u| !drop.iter().any(|d| *d == u.part))
        .collect();
    if !refused.is_empty() {
        let names: Vec<String> = refused
            .iter()
            .map(|u| {
                if u.at == u.part {
                    u.part.to_string()
                } else {
                    format!("{} (at {})", u.part, u.at)
                }
            })
            .collect();
        let target = match upstream {
            Dialect::Chat => "OpenAI Chat Completions",
            Dialect::Messages => "Anthropic Messages",
            Dialect::Responses => "OpenAI Responses",
        };
        return Err(GwError::bad_request(format!(
            "this model's upstream speaks {target}, which has no counterpart for: {}; the gateway \
             refuses rather than drop them (the model's `drop` setting can allow dropping them)",
            names.join(", ")
        )));
    }
    let mut dropped = String::new();
    for u in unmapped {
        if !dropped.is_empty() {
            dropped.push(',');
        }
        dropped.push_str(&u.part);
    }
    Ok(dropped)
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod to_chat_tests;
#[cfg(test)]
mod to_messages_tests;
