//! A Messages client's `anthropic-beta` header on a route to a chat upstream: each beta is a
//! request part like the body's (docs/translation-policy.md, "Anthropic betas"). A beta that only
//! enables body parts asks nothing beyond them (they have their own rules); one that asks nothing
//! a chat upstream does not do anyway passes; any other is refused, or dropped when the alias's
//! `drop` list names its family (`anthropic-beta.<family>`, the beta without its date).

use crate::dialect::neutral::Request;

/// What a beta asks of a chat upstream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Asks {
    /// It enables request parts, and each has its own rule: the beta asks nothing more.
    Parts,
    /// Nothing a chat upstream does not do anyway, or nothing of the model at all.
    Nothing,
}

/// The beta families (a beta's name without its date) whose meaning is known, by prefix.
const KNOWN: &[(&str, Asks)] = &[
    // Identifies the client to Anthropic.
    ("claude-code-", Asks::Nothing),
    // The kind of credential the client holds: the upstream gets the gateway's own.
    ("oauth-", Asks::Nothing),
    // Thinking between tool calls: a chat reasoning model reasons afresh on each turn, after
    // every tool result.
    ("interleaved-thinking-", Asks::Nothing),
    // Tool arguments streamed as they come: chat streams them in fragments.
    ("fine-grained-tool-streaming-", Asks::Nothing),
    // How Anthropic encodes tool calls internally: nothing the answer shows.
    ("token-efficient-tools-", Asks::Nothing),
    // Tools that change between turns: every chat request carries its own tool list.
    ("mid-conversation-tool-changes-", Asks::Nothing),
    // `role: system` messages inside `messages`: chat takes them in place.
    ("mid-conversation-system-", Asks::Parts),
    ("context-management-", Asks::Parts),
    ("compact-", Asks::Parts),
    ("advanced-tool-use-", Asks::Parts),
    ("tool-search-tool-", Asks::Parts),
    ("effort-", Asks::Parts),
    ("prompt-caching-", Asks::Parts),
    ("extended-cache-ttl-", Asks::Parts),
    ("structured-outputs-", Asks::Parts),
    ("mcp-client-", Asks::Parts),
    ("code-execution-", Asks::Parts),
    ("web-fetch-", Asks::Parts),
    ("computer-use-", Asks::Parts),
    ("files-api-", Asks::Parts),
    ("pdfs-", Asks::Parts),
    ("search-results-", Asks::Parts),
    ("skills-", Asks::Parts),
    ("output-128k-", Asks::Parts),
];

/// A beta's family: its name without a trailing `-YYYY-MM-DD`.
pub fn family(beta: &str) -> &str {
    let is_date = |s: &[u8]| {
        s.iter().enumerate().all(|(i, &c)| match i {
            0 | 5 | 8 => c == b'-',
            _ => c.is_ascii_digit(),
        })
    };
    match beta.len().checked_sub(11) {
        Some(cut) if cut > 0 && is_date(&beta.as_bytes()[cut..]) => &beta[..cut],
        _ => beta,
    }
}

fn asks(beta: &str) -> Option<Asks> {
    KNOWN
        .iter()
        .find(|(prefix, _)| beta.starts_with(prefix))
        .map(|&(_, a)| a)
}

/// Notes each beta of the header value `header` (comma-separated, any number of header lines
/// joined) that asks for something a chat upstream cannot do.
pub fn note(r: &mut Request<'_>, header: &[u8]) {
    let Ok(header) = std::str::from_utf8(header) else {
        r.unmapped("anthropic-beta", || "anthropic-beta (not UTF-8)".to_owned());
        return;
    };
    for beta in header.split(',').map(str::trim).filter(|b| !b.is_empty()) {
        if asks(beta).is_none() {
            r.unmapped(format!("anthropic-beta.{}", family(beta)), || {
                format!("anthropic-beta: {beta}")
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_lose_their_dates_only() {
        assert_eq!(family("context-1m-2025-08-07"), "context-1m");
        assert_eq!(
            family("thinking-token-count-2026-05-13"),
            "thinking-token-count"
        );
        assert_eq!(family("no-date"), "no-date");
        assert_eq!(family("x-2025-8-07"), "x-2025-8-07");
    }

    #[test]
    fn claude_codes_betas_ask_for_parts_or_nothing_but_one() {
        let mut r = Request::default();
        note(
            &mut r,
            b"claude-code-20250219,interleaved-thinking-2025-05-14, context-management-2025-06-27,\
              thinking-token-count-2026-05-13,advanced-tool-use-2025-11-20,effort-2025-11-24,\
              mid-conversation-tool-changes-2026-07-01,mid-conversation-system-2026-04-07,\
              prompt-caching-scope-2026-01-05,context-1m-2025-08-07",
        );
        let got: Vec<(&str, &str)> = r.unmapped.iter().map(|u| (&*u.part, &*u.at)).collect();
        assert_eq!(
            got,
            [
                (
                    "anthropic-beta.thinking-token-count",
                    "anthropic-beta: thinking-token-count-2026-05-13"
                ),
                (
                    "anthropic-beta.context-1m",
                    "anthropic-beta: context-1m-2025-08-07"
                ),
            ]
        );
    }
}
