//! The mock over the wire: directives, faults, renderings.

use super::*;

#[test]
fn text() {
    assert_eq!(wire::expected_text(1), "Hello from the mock upstream.");
    assert_eq!(
        wire::expected_text(3),
        "Hello from the mock upstream. word2 word3"
    );
}

fn all_json(frames: &[Bytes]) {
    for f in frames {
        let s = std::str::from_utf8(f).unwrap();
        assert!(s.ends_with("\n\n"), "{s}");
        let data = s.lines().find_map(|l| l.strip_prefix("data: ")).unwrap();
        if data != "[DONE]" {
            serde_json::from_str::<serde_json::Value>(data)
                .unwrap_or_else(|e| panic!("{e}: {data}"));
        }
    }
}

/// One request through the real server with the load driver; returns the outcome and the
/// (status, body) the check saw.
fn roundtrip(
    mock: &MockServer,
    path: &str,
    body: &str,
    timeout_ms: u64,
) -> (crate::load::Outcome, Option<(u16, Vec<u8>)>) {
    use std::sync::{Arc, Mutex};
    let seen = Arc::new(Mutex::new(None));
    let s2 = seen.clone();
    let check: crate::load::Check = Arc::new(move |status, body| {
        *s2.lock().unwrap() = Some((status, body.to_vec()));
        Ok(())
    });
    let mut opts = crate::load::Options::new(mock.addr(), 1, crate::load::Stop::Total(1));
    opts.timeout = Some(std::time::Duration::from_millis(timeout_ms));
    let req = crate::load::Request::post_json(path, body.to_owned());
    let out = crate::load::run_blocking(&opts, &req, check).unwrap();
    let seen = seen.lock().unwrap().take();
    (out, seen)
}

/// One request on a fresh connection with `connection: close`; everything the mock sent.
fn raw(addr: SocketAddr, method: &str, path: &str, body: &str) -> String {
    raw_with(addr, method, path, "", body)
}

/// As [`raw`], with more header lines (each ending in `\r\n`).
fn raw_with(addr: SocketAddr, method: &str, path: &str, headers: &str, body: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nhost: m\r\nconnection: close\r\n{headers}content-length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn what_the_real_api_refuses_is_refused_over_the_wire() {
    let mock = MockServer::start("127.0.0.1:0".parse().unwrap(), 1).unwrap();
    let body = r#"{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[{"role":"user","content":"hi"}],"context_management":{"edits":[]}}"#;
    let out = raw(mock.addr(), "POST", "/v1/messages?beta=true", body);
    assert!(out.starts_with("HTTP/1.1 400"), "{out}");
    assert!(
        out.ends_with(r#"{"type":"error","error":{"type":"invalid_request_error","message":"context_management: Extra inputs are not permitted"},"request_id":"req_mock"}"#),
        "{out}"
    );
    let beta = "anthropic-beta: claude-code-20250219,context-management-2025-06-27\r\n";
    let out = raw_with(mock.addr(), "POST", "/v1/messages", beta, body);
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    let out = raw(
        mock.addr(),
        "POST",
        "/v1/chat/completions",
        r#"{"model":"gpt-5","max_tokens":64,"messages":[{"role":"user","content":"hi"}]}"#,
    );
    assert!(out.starts_with("HTTP/1.1 400"), "{out}");
    assert!(
        out.contains(r#""param":"max_tokens","code":"unsupported_parameter""#),
        "{out}"
    );
}

#[test]
fn instance_directives_count_and_faults() {
    let opts = MockOptions {
        directives: Some("[[mock:status:503]][[mock:retry_after:7]]".into()),
        directive_requests: Some(1),
    };
    let mock = MockServer::start_opts("127.0.0.1:0".parse().unwrap(), 1, opts).unwrap();
    let body = r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;
    let first = raw(mock.addr(), "POST", "/v1/chat/completions", body);
    assert!(first.starts_with("HTTP/1.1 503"), "{first}");
    assert!(first.contains("retry-after: 7\r\n"), "{first}");
    let second = raw(mock.addr(), "POST", "/v1/chat/completions", body);
    assert!(
        second.starts_with("HTTP/1.1 200"),
        "only the first request: {second}"
    );
    // Reset: the connection closes with no answer at all.
    let reset =
        r#"{"model":"m","max_tokens":64,"messages":[{"role":"user","content":"[[mock:reset]]"}]}"#;
    assert_eq!(raw(mock.addr(), "POST", "/v1/messages", reset), "");
    // Delay: the answer comes no sooner.
    let slow = r#"{"model":"m","max_tokens":64,"messages":[{"role":"user","content":"[[mock:delay_ms:150]]"}]}"#;
    let t = std::time::Instant::now();
    assert!(raw(mock.addr(), "POST", "/v1/messages", slow).starts_with("HTTP/1.1 200"));
    assert!(t.elapsed() >= std::time::Duration::from_millis(150));
    // Paced frames: 3 content frames of a stream, then the finish frame and [DONE], each 60 ms
    // after the one before.
    let paced = r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"[[mock:frames:3]][[mock:frame_interval_ms:60]]"}]}"#;
    let t = std::time::Instant::now();
    let sse = raw(mock.addr(), "POST", "/v1/chat/completions", paced);
    assert!(sse.contains("data: [DONE]"), "{sse}");
    assert!(t.elapsed() >= std::time::Duration::from_millis(4 * 60));
    let count = raw(mock.addr(), "GET", "/mock/requests", "");
    assert!(count.ends_with(r#"{"requests":5}"#), "{count}");
}

#[test]
fn directives_over_the_wire() {
    let mock = MockServer::start("127.0.0.1:0".parse().unwrap(), 2).unwrap();
    let chat = |text: &str, stream: bool| {
        format!(
            r#"{{"model":"m","max_tokens":64,"stream":{stream},"messages":[{{"role":"user","content":"{text}"}}]}}"#
        )
    };
    // Status: the provider's error body.
    let (_, seen) = roundtrip(
        &mock,
        "/v1/messages",
        &chat("[[mock:status:429]]", false),
        2000,
    );
    let (status, body) = seen.unwrap();
    assert_eq!(status, 429);
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["error"]["type"], "rate_limit_error");
    let (_, seen) = roundtrip(
        &mock,
        "/v1/chat/completions",
        &chat("[[mock:status:500]]", true),
        2000,
    );
    let (status, body) = seen.unwrap();
    assert_eq!(status, 500);
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["error"]["type"], "server_error");
    // Stall: no answer.
    let (out, seen) = roundtrip(
        &mock,
        "/v1/responses",
        r#"{"model":"m","input":"[[mock:stall]]"}"#,
        300,
    );
    assert!(seen.is_none());
    assert!(out.first_failure.unwrap().contains("no complete response"));
    // Fail mid-stream: the connection drops before the last chunk.
    let (out, seen) = roundtrip(
        &mock,
        "/v1/chat/completions",
        &chat("[[mock:fail_mid_stream]]", true),
        2000,
    );
    assert!(seen.is_none());
    let f = out.first_failure.unwrap();
    assert!(f.contains("closed the connection mid-body"), "{f}");
    // Non-streaming too: fewer bytes than promised.
    let (out, _) = roundtrip(
        &mock,
        "/v1/messages",
        &chat("[[mock:fail_mid_stream]]", false),
        2000,
    );
    assert!(out.first_failure.unwrap().contains("body bytes"));
    // Malformed SSE: a frame that is not JSON, then a normal end.
    let (_, seen) = roundtrip(
        &mock,
        "/v1/messages",
        &chat("[[mock:malformed_sse]] [[mock:frames:20]]", true),
        2000,
    );
    let body = String::from_utf8(seen.unwrap().1).unwrap();
    assert!(body.contains("not json"));
    assert!(!body.contains("message_stop"));
    // Many frames, tool calls.
    let (_, seen) = roundtrip(
        &mock,
        "/v1/responses",
        r#"{"model":"m","stream":true,"input":"[[mock:frames:50]]"}"#,
        2000,
    );
    let body = String::from_utf8(seen.unwrap().1).unwrap();
    assert_eq!(
        body.matches("event: response.output_text.delta").count(),
        50
    );
    assert!(body.contains(" word50"));
    let (_, seen) = roundtrip(
        &mock,
        "/v1/chat/completions",
        &chat("[[mock:tool_call]]", false),
        2000,
    );
    let v: serde_json::Value = serde_json::from_slice(&seen.unwrap().1).unwrap();
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(
        v["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"],
        r#"{"city":"Paris"}"#
    );
}

#[test]
fn every_rendering_is_valid_json() {
    for d in [Dialect::Chat, Dialect::Responses, Dialect::Messages] {
        for stream in [false, true] {
            for tool in [false, true] {
                let mut pl = Plan::plain("\"m\"".into(), stream, 100);
                pl.tool_call = tool;
                pl.include_usage = true;
                match wire::render(d, &pl) {
                    Rendered::Json(b) => {
                        serde_json::from_slice::<serde_json::Value>(&b).unwrap();
                    }
                    Rendered::Sse { frames, abort } => {
                        assert!(!abort);
                        all_json(&frames);
                    }
                }
            }
        }
        for code in [400u16, 401, 429, 500, 529] {
            serde_json::from_slice::<serde_json::Value>(&wire::error_body(d, code, "x")).unwrap();
        }
    }
}
