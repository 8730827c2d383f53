//! The native route's bodies: the client's request with only its `model` value replaced, and the
//! upstream's complete answer with only its top-level `model` put back to the alias. The one seam
//! of the `bench-dom-native` measurement aid: built with that feature, both are done the obvious
//! way instead (the whole body parsed into a DOM and serialized again), to put a figure on what
//! the targeted rewrite saves; nothing else in the request path knows of it.

use bytes::Bytes;

use crate::http::pieces::UpBody;

/// The request for the upstream: `body` with the bytes at `model_span` (the `model` value)
/// replaced by `model_json` (the upstream model as a JSON string).
#[inline]
pub fn request(
    body: &Bytes,
    model_span: (usize, usize),
    model_json: &Bytes,
    model: &str,
) -> UpBody {
    #[cfg(feature = "bench-dom-native")]
    if let Some(b) = dom_rewrite(body, model) {
        return b;
    }
    let _ = model;
    UpBody::replacing(body, model_span, model_json)
}

/// The answer for the client: `answer` with its top-level `model` value replaced by `alias_json`
/// (the alias as a JSON string). The walk for it stops there (it comes early in every dialect's
/// answer); an answer that is not a JSON object, or has no `model`, goes back unchanged.
#[inline]
pub fn answer(answer: Bytes, alias_json: &Bytes, alias: &str) -> UpBody {
    #[cfg(feature = "bench-dom-native")]
    if let Some(b) = dom_rewrite(&answer, alias) {
        return b;
    }
    let _ = alias;
    let [model] = crate::json::find_members(&answer, ["model"]).unwrap_or_default();
    match model {
        Some(span) => UpBody::replacing(&answer, span, alias_json),
        None => UpBody::one(answer),
    }
}

/// The measurement aid's rewrite: the body parsed whole, its `model` set, serialized again.
#[cfg(feature = "bench-dom-native")]
fn dom_rewrite(body: &[u8], model: &str) -> Option<UpBody> {
    let mut v: serde_json::Value = serde_json::from_slice(body).ok()?;
    v.as_object_mut()?.insert("model".into(), model.into());
    Some(UpBody::one(Bytes::from(serde_json::to_vec(&v).ok()?)))
}
