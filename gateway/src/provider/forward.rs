//! The client's headers that belong to an upstream's API and go on to it: the allow-list of
//! docs/translation-policy.md, "Headers". Anthropic's `anthropic-beta` and `anthropic-version`,
//! OpenAI's `openai-beta` and `x-client-request-id`; nothing else the client sends reaches the
//! upstream (not its credentials, which the gateway replaces with the provider's own, not
//! hop-by-hop headers, not the gateway's own, not the client's telemetry).
//!
//! The request path finds them in the one pass it already makes over the client's headers
//! ([`allowed`], [`Forwarded::note`]); a request that carries none of them (the usual chat
//! request) allocates nothing for them.

use http::{HeaderMap, HeaderName, HeaderValue};

pub static ANTHROPIC_BETA: HeaderName = HeaderName::from_static("anthropic-beta");
pub static ANTHROPIC_VERSION: HeaderName = HeaderName::from_static("anthropic-version");
pub static OPENAI_BETA: HeaderName = HeaderName::from_static("openai-beta");
pub static CLIENT_REQUEST_ID: HeaderName = HeaderName::from_static("x-client-request-id");

/// An allow-listed header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Allowed {
    AnthropicBeta,
    AnthropicVersion,
    OpenAiBeta,
    ClientRequestId,
}

impl Allowed {
    fn name(self) -> &'static HeaderName {
        match self {
            Allowed::AnthropicBeta => &ANTHROPIC_BETA,
            Allowed::AnthropicVersion => &ANTHROPIC_VERSION,
            Allowed::OpenAiBeta => &OPENAI_BETA,
            Allowed::ClientRequestId => &CLIENT_REQUEST_ID,
        }
    }
}

/// Whether a header (its lowercase name, as hyper keeps it) is on the allow-list. The first byte
/// settles most headers (`host`, `content-length`, `connection`) without a comparison of names.
#[inline]
pub fn allowed(name: &str) -> Option<Allowed> {
    if !matches!(name.as_bytes().first(), Some(b'a' | b'o' | b'x')) {
        return None;
    }
    match name {
        "anthropic-beta" => Some(Allowed::AnthropicBeta),
        "anthropic-version" => Some(Allowed::AnthropicVersion),
        "openai-beta" => Some(Allowed::OpenAiBeta),
        "x-client-request-id" => Some(Allowed::ClientRequestId),
        _ => None,
    }
}

/// The allow-listed headers of one request, each with every line the client sent joined into
/// one value (`anthropic-beta: a` and `anthropic-beta: b` become `a,b`, which both APIs read as
/// the same list).
#[derive(Clone, Debug, Default)]
pub struct Forwarded {
    pub anthropic_beta: Option<HeaderValue>,
    pub anthropic_version: Option<HeaderValue>,
    pub openai_beta: Option<HeaderValue>,
    pub client_request_id: Option<HeaderValue>,
    /// A header came in more than one line: [`Forwarded::join_lines`] reads them all.
    repeated: bool,
}

impl Forwarded {
    fn slot(&mut self, a: Allowed) -> &mut Option<HeaderValue> {
        match a {
            Allowed::AnthropicBeta => &mut self.anthropic_beta,
            Allowed::AnthropicVersion => &mut self.anthropic_version,
            Allowed::OpenAiBeta => &mut self.openai_beta,
            Allowed::ClientRequestId => &mut self.client_request_id,
        }
    }

    /// Keeps one line of an allowed header (a shared reference to its bytes, not a copy).
    pub fn note(&mut self, a: Allowed, v: &HeaderValue) {
        let slot = self.slot(a);
        if slot.is_some() {
            self.repeated = true;
        } else {
            *slot = Some(v.clone());
        }
    }

    /// Whether a header came in more than one line.
    pub fn repeated(&self) -> bool {
        self.repeated
    }

    /// Joins every line of each allowed header of `headers` (the client's) with commas: the rare
    /// request that repeats one.
    pub fn join_lines(&mut self, headers: &HeaderMap) {
        for a in [
            Allowed::AnthropicBeta,
            Allowed::AnthropicVersion,
            Allowed::OpenAiBeta,
            Allowed::ClientRequestId,
        ] {
            let mut lines = headers.get_all(a.name()).iter();
            let (Some(first), Some(_)) = (lines.next(), lines.next()) else {
                continue;
            };
            let mut joined = first.as_bytes().to_vec();
            for v in headers.get_all(a.name()).iter().skip(1) {
                joined.push(b',');
                joined.extend_from_slice(v.as_bytes());
            }
            *self.slot(a) = HeaderValue::from_bytes(&joined).ok();
        }
        self.repeated = false;
    }

    /// Writes Anthropic's allowed headers into `h`: the client's `anthropic-version` when
    /// `version_of_client` (the native route, whose body is the client's) else `version` (the one
    /// the translation writes), and the client's `anthropic-beta`.
    pub fn anthropic(
        this: Option<&Self>,
        h: &mut HeaderMap,
        version: HeaderValue,
        version_of_client: bool,
    ) {
        let client_version = this
            .filter(|_| version_of_client)
            .and_then(|f| f.anthropic_version.clone());
        h.insert(ANTHROPIC_VERSION.clone(), client_version.unwrap_or(version));
        if let Some(b) = this.and_then(|f| f.anthropic_beta.clone()) {
            h.insert(ANTHROPIC_BETA.clone(), b);
        }
    }

    /// Writes OpenAI's allowed headers into `h`.
    pub fn openai(this: Option<&Self>, h: &mut HeaderMap) {
        let Some(f) = this else { return };
        if let Some(b) = &f.openai_beta {
            h.insert(OPENAI_BETA.clone(), b.clone());
        }
        if let Some(id) = &f.client_request_id {
            h.insert(CLIENT_REQUEST_ID.clone(), id.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_of_one_header_are_joined() {
        let mut h = HeaderMap::new();
        h.append("anthropic-beta", HeaderValue::from_static("a-1"));
        h.append("user-agent", HeaderValue::from_static("x"));
        h.append("anthropic-beta", HeaderValue::from_static("b-2, c-3"));
        h.append("openai-beta", HeaderValue::from_static("o"));
        let mut f = Forwarded::default();
        for (k, v) in &h {
            if let Some(a) = allowed(k.as_str()) {
                f.note(a, v);
            }
        }
        assert!(f.repeated());
        f.join_lines(&h);
        assert_eq!(f.anthropic_beta.unwrap(), "a-1,b-2, c-3");
        assert_eq!(f.openai_beta.unwrap(), "o");
        assert!(allowed("authorization").is_none() && allowed("x-api-key").is_none());
    }
}
