//! How the mock decides its answer from a request body: the directives of the last user
//! message (`[[mock:...]]`, see `docs/contracts.md`) and the scripted tool-call turn of an agent
//! session (`[[mock:call:NAME:ARGS]]`).

use super::wire::{self, Dialect, Plan};
use serde::Deserialize;
use std::borrow::Cow;

#[derive(Deserialize)]
struct Head<'a> {
    #[serde(borrow, default)]
    model: Option<Cow<'a, str>>,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    stream_options: Option<StreamOptions>,
}

#[derive(Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: Option<bool>,
}

/// Decide the answer to a request body in `dialect`. Errors are messages for a 400.
pub fn plan(dialect: Dialect, body: &[u8]) -> Result<Plan, String> {
    let head: Head =
        serde_json::from_slice(body).map_err(|e| format!("mock: request is not JSON: {e}"))?;
    let model = head.model.as_deref().unwrap_or("mock");
    let mut plan = Plan::plain(
        wire::json_str(model),
        head.stream.unwrap_or(false),
        body.len(),
    );
    plan.include_usage = head
        .stream_options
        .and_then(|o| o.include_usage)
        .unwrap_or(false);
    // Only look for directives (a full parse) when a marker appears anywhere in the body.
    if contains(body, b"[[mock:") {
        let v: serde_json::Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
        if let Some(text) = last_user_text(dialect, &v) {
            plan.apply_directives(&text);
        }
        if contains(body, b"[[mock:call:") {
            script_tool_turn(dialect, &v, &mut plan)?;
        }
    }
    Ok(plan)
}

/// The scripted tool-call turn of an agent session (`[[mock:call:NAME:ARGS]]` in any user
/// message, not only the last: an agent's last user message is often its tool result). While
/// the conversation holds no tool result the answer is a call of the tool NAME, which the
/// request must offer; once it holds one, the answer is text quoting the last tool result, so
/// that the client sees its result crossed back.
fn script_tool_turn(
    dialect: Dialect,
    v: &serde_json::Value,
    plan: &mut Plan,
) -> Result<(), String> {
    if plan.call.is_none() {
        let texts = user_texts(dialect, v);
        if let Some(t) = texts.iter().rev().find(|t| t.contains("[[mock:call:")) {
            plan.apply_directives(t);
        }
    }
    let Some((name, _)) = &plan.call else {
        return Ok(());
    };
    if let Some(result) = last_tool_result(dialect, v) {
        let quoted: String = result.chars().take(2000).collect();
        plan.call = None;
        plan.answer = Some(format!("The tool said: {quoted}"));
        return Ok(());
    }
    if !offered_tools(dialect, v).any(|t| t == name) {
        return Err(format!("mock: the request offers no tool named {name:?}"));
    }
    Ok(())
}

/// A message's text: a string content, or its parts' `text` members joined by newlines.
fn content_text(content: &serde_json::Value) -> Option<String> {
    if let Some(s) = content.as_str() {
        return Some(s.to_owned());
    }
    let mut out = String::new();
    for part in content.as_array()? {
        if let Some(t) = part.get("text").and_then(|t| t.as_str()) {
            out.push_str(t);
            out.push('\n');
        }
    }
    Some(out)
}

/// The conversation's messages (chat and Anthropic `messages`, Responses `input` items).
fn conversation(dialect: Dialect, v: &serde_json::Value) -> &[serde_json::Value] {
    let list = match dialect {
        Dialect::Chat | Dialect::Messages => v.get("messages"),
        Dialect::Responses => v.get("input"),
    };
    list.and_then(|l| l.as_array()).map_or(&[], Vec::as_slice)
}

/// The text of every user message, in order.
fn user_texts(dialect: Dialect, v: &serde_json::Value) -> Vec<String> {
    if let Some(s) = v.get("input").and_then(|i| i.as_str()) {
        return vec![s.to_owned()];
    }
    conversation(dialect, v)
        .iter()
        .filter(|m| m.get("role").and_then(|r| r.as_str()) == Some("user"))
        .filter_map(|m| content_text(m.get("content")?))
        .collect()
}

/// The text of the conversation's last tool result: chat's `tool` messages, Anthropic's
/// `tool_result` blocks, Responses' `function_call_output` items.
fn last_tool_result(dialect: Dialect, v: &serde_json::Value) -> Option<String> {
    let mut last = None;
    for m in conversation(dialect, v) {
        match dialect {
            Dialect::Chat if m.get("role").and_then(|r| r.as_str()) == Some("tool") => {
                last = m.get("content").and_then(content_text);
            }
            Dialect::Messages => {
                for b in m
                    .get("content")
                    .and_then(|c| c.as_array())
                    .into_iter()
                    .flatten()
                {
                    if b.get("type").and_then(|t| t.as_str()) == Some("tool_result") {
                        last = Some(b.get("content").and_then(content_text).unwrap_or_default());
                    }
                }
            }
            Dialect::Responses
                if m.get("type").and_then(|t| t.as_str()) == Some("function_call_output") =>
            {
                last = m.get("output").and_then(content_text);
            }
            _ => {}
        }
    }
    last
}

/// The names of the function tools a request offers.
fn offered_tools(dialect: Dialect, v: &serde_json::Value) -> impl Iterator<Item = &str> {
    let tools = v
        .get("tools")
        .and_then(|t| t.as_array())
        .map_or(&[][..], Vec::as_slice);
    tools.iter().filter_map(move |t| {
        let t = match dialect {
            Dialect::Chat => t.get("function")?,
            _ => t,
        };
        t.get("name")?.as_str()
    })
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    let first = needle[0];
    let mut i = 0;
    while let Some(p) = hay[i..].iter().position(|&b| b == first) {
        let at = i + p;
        if hay[at..].starts_with(needle) {
            return true;
        }
        i = at + 1;
    }
    false
}

/// Text of the last user message: chat `messages`, Anthropic `messages`, or Responses `input`
/// (a string, or a list of items). String contents and lists of text parts are both read.
pub fn last_user_text(dialect: Dialect, v: &serde_json::Value) -> Option<String> {
    let list = match dialect {
        Dialect::Chat | Dialect::Messages => v.get("messages")?,
        Dialect::Responses => {
            let input = v.get("input")?;
            if let Some(s) = input.as_str() {
                return Some(s.to_owned());
            }
            input
        }
    };
    let msg = list
        .as_array()?
        .iter()
        .rev()
        .find(|m| m.get("role").and_then(|r| r.as_str()) == Some("user"))?;
    content_text(msg.get("content")?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(d: Dialect, body: &str) -> Plan {
        plan(d, body.as_bytes()).unwrap()
    }

    #[test]
    fn plain_plan() {
        let body = r#"{"model":"mock-gpt","messages":[{"role":"user","content":"hi"}]}"#;
        let pl = p(Dialect::Chat, body);
        assert_eq!(pl.model_json, "\"mock-gpt\"");
        assert!(!pl.stream);
        assert_eq!(pl.frames, 8);
        assert_eq!(pl.input_tokens, body.len() as u64 / 4);
    }

    #[test]
    fn scripted_call_then_the_tool_result_quoted() {
        let marker = r#"go [[mock:call:Bash:{\"command\":\"ls\"}]]"#;
        // Anthropic: the call, while no tool result is there.
        let first = format!(
            r#"{{"model":"m","messages":[{{"role":"user","content":"{marker}"}}],"tools":[{{"name":"Bash"}}]}}"#
        );
        let pl = p(Dialect::Messages, &first);
        assert_eq!(pl.tool(), ("Bash", r#"{"command":"ls"}"#));
        assert_eq!(pl.arg_pieces().concat(), r#"{"command":"ls"}"#);
        // A tool that is not offered is refused.
        let unoffered = first.replace(r#"{"name":"Bash"}"#, r#"{"name":"Read"}"#);
        assert!(plan(Dialect::Messages, unoffered.as_bytes()).is_err());
        // Then the result, quoted, whichever dialect carries it.
        let anthropic = format!(
            r#"{{"model":"m","messages":[{{"role":"user","content":"{marker}"}},{{"role":"assistant","content":[{{"type":"tool_use","id":"t","name":"Bash","input":{{}}}}]}},{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"t","content":[{{"type":"text","text":"a.txt"}}]}}]}}]}}"#
        );
        let chat = format!(
            r#"{{"model":"m","messages":[{{"role":"user","content":"{marker}"}},{{"role":"tool","tool_call_id":"t","content":"a.txt"}}]}}"#
        );
        let responses = format!(
            r#"{{"model":"m","input":[{{"role":"user","content":"{marker}"}},{{"type":"function_call_output","call_id":"t","output":"a.txt"}}]}}"#
        );
        for (d, body) in [
            (Dialect::Messages, anthropic),
            (Dialect::Chat, chat),
            (Dialect::Responses, responses),
        ] {
            let pl = p(d, &body);
            assert!(!pl.calls_tool(), "{d:?}");
            assert_eq!(pl.text().trim_end(), "The tool said: a.txt", "{d:?}");
            assert_eq!(pl.output_tokens(), 1);
        }
    }

    #[test]
    fn directives_only_from_last_user_message() {
        let body = r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"[[mock:stall]]"},{"role":"assistant","content":"x"},{"role":"user","content":[{"type":"text","text":"a [[mock:frames:3]] [[mock:tool_call]]"}]}]}"#;
        let pl = p(Dialect::Messages, body);
        assert!(!pl.stall);
        assert!(pl.tool_call);
        assert_eq!(pl.frames, 3);
        let body = r#"{"model":"m","input":"[[mock:status:429]]"}"#;
        assert_eq!(p(Dialect::Responses, body).status, Some(429));
        let body = r#"{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"[[mock:fail_mid_stream]][[mock:malformed_sse]]"}]}]}"#;
        let pl = p(Dialect::Responses, body);
        assert!(pl.fail_mid_stream && pl.malformed_sse);
    }
}
