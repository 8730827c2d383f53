//! Errors: every failure in the client's dialect with the right status, mid-stream failures end
//! the stream with the dialect's error event, and a client that leaves cancels the upstream.

mod common;

use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

const PATHS: [&str; 3] = ["/v1/chat/completions", "/v1/messages", "/v1/responses"];

fn body_for(path: &str, model: &str, text: &str, stream: bool) -> Value {
    match path {
        "/v1/responses" => json!({"model": model, "input": text, "stream": stream}),
        "/v1/messages" => {
            json!({"model": model, "max_tokens": 32, "messages": user(text), "stream": stream})
        }
        _ => json!({"model": model, "messages": user(text), "stream": stream}),
    }
}

#[test]
fn malformed_json_is_400_in_each_dialect() {
    let st = Stack::start();
    for path in PATHS {
        for bad in [
            &b"{\"model\": "[..],
            b"not json",
            b"[1,2]",
            b"{\"model\":\"gpt\",\"model\":\"gpt\"}",
        ] {
            let r = request(st.gateway.addr, "POST", path, &[], bad);
            assert_eq!(r.status, 400, "{path} {:?}", String::from_utf8_lossy(bad));
            assert_error_shape(path, &r);
        }
    }
    let r = request(st.gateway.addr, "POST", "/v1/messages", &[], b"{");
    assert_eq!(r.json()["error"]["type"], "invalid_request_error");
    st.stop();
}

#[test]
fn unknown_model_is_404_in_each_dialect() {
    let st = Stack::start();
    for path in PATHS {
        let r = st.post(path, &body_for(path, "no-such-model", "hi", false));
        assert_eq!(r.status, 404, "{path}");
        let msg = assert_error_shape(path, &r);
        assert!(msg.contains("no-such-model"));
    }
    let r = st.post(
        "/v1/messages",
        &body_for("/v1/messages", "nope", "hi", false),
    );
    assert_eq!(r.json()["error"]["type"], "not_found_error");
    st.stop();
}

#[test]
fn upstream_unreachable_is_502() {
    // A port that was just free: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let gw = start_gateway(&config(port, 5000));
    for path in PATHS {
        for model in ["gpt", "claude"] {
            for stream in [false, true] {
                let r = post(gw.addr, path, &body_for(path, model, "hi", stream));
                assert_eq!(r.status, 502, "{path} {model} {stream}");
                assert_error_shape(path, &r);
            }
        }
    }
    assert_eq!(gw.terminate(), Some(0));
}

#[test]
fn upstream_timeout_is_504() {
    let st = Stack::with_timeout(300);
    for path in PATHS {
        for model in ["gpt", "claude"] {
            let t = Instant::now();
            let r = st.post(path, &body_for(path, model, "[[mock:stall]]", false));
            assert_eq!(r.status, 504, "{path} {model}");
            assert_error_shape(path, &r);
            assert!(t.elapsed() < Duration::from_secs(5));
        }
    }
    st.stop();
}

#[test]
fn upstream_4xx_5xx_carried_over_in_client_dialect() {
    let st = Stack::start();
    for path in PATHS {
        for model in ["gpt", "claude"] {
            for (status, stream) in [(429u16, false), (500, false), (503, true), (400, true)] {
                let r = st.post(
                    path,
                    &body_for(path, model, &format!("[[mock:status:{status}]]"), stream),
                );
                assert_eq!(r.status, status, "{path} {model}");
                assert_error_shape(path, &r);
            }
        }
    }
    let r = st.post(
        "/v1/messages",
        &body_for("/v1/messages", "gpt", "[[mock:status:429]]", false),
    );
    assert_eq!(r.json()["error"]["type"], "rate_limit_error");
    let r = st.post(
        "/v1/chat/completions",
        &body_for(
            "/v1/chat/completions",
            "claude",
            "[[mock:status:401]]",
            false,
        ),
    );
    assert_eq!(r.json()["error"]["type"], "authentication_error");
    st.stop();
}

/// The last SSE event must be the dialect's error event.
fn assert_stream_ends_in_error(path: &str, r: &Resp, ctx: &str) {
    assert_eq!(r.status, 200, "{ctx}");
    let evs = r.events();
    let (name, data) = evs.last().unwrap_or_else(|| panic!("{ctx}: empty stream"));
    let v: Value = serde_json::from_str(data).unwrap();
    match path {
        "/v1/chat/completions" => {
            assert!(v["error"]["message"].is_string(), "{ctx}: {data}");
            assert!(
                !evs.iter().any(|(_, d)| d == "[DONE]"),
                "{ctx}: no [DONE] after failure"
            );
        }
        "/v1/messages" => {
            assert_eq!(name, "error", "{ctx}");
            assert_eq!(v["type"], "error");
            assert!(v["error"]["message"].is_string());
            assert!(!evs.iter().any(|(e, _)| e == "message_stop"), "{ctx}");
        }
        _ => {
            assert_eq!(name, "error", "{ctx}");
            assert_eq!(v["type"], "error");
            assert!(v["message"].is_string());
            assert!(v["sequence_number"].is_u64());
            assert!(!evs.iter().any(|(e, _)| e == "response.completed"), "{ctx}");
        }
    }
    assert!(
        evs.len() > 1,
        "{ctx}: some frames came through before the failure"
    );
}

#[test]
fn mid_stream_failure_ends_with_error_event() {
    let st = Stack::start();
    for path in PATHS {
        for model in ["gpt", "claude"] {
            let r = st.post(
                path,
                &body_for(path, model, "[[mock:fail_mid_stream]]", true),
            );
            assert_stream_ends_in_error(path, &r, &format!("{path} {model}"));
        }
    }
    st.stop();
}

#[test]
fn malformed_upstream_sse_ends_with_error_event() {
    let st = Stack::start();
    for path in PATHS {
        for model in ["gpt", "claude"] {
            let r = st.post(path, &body_for(path, model, "[[mock:malformed_sse]]", true));
            assert_stream_ends_in_error(path, &r, &format!("{path} {model}"));
        }
    }
    st.stop();
}

#[test]
fn unknown_route_and_method() {
    let st = Stack::start();
    let r = get(st.gateway.addr, "/v1/nothing");
    assert_eq!(r.status, 404);
    assert_error_shape("/v1/chat/completions", &r);
    let r = get(st.gateway.addr, "/v1/messages");
    assert_eq!(r.status, 405);
    assert_error_shape("/v1/messages", &r);
    st.stop();
}

/// An upstream that streams slowly forever and records when the gateway hangs up on it.
fn endless_upstream(cancelled: Arc<AtomicBool>) -> RawUpstream {
    raw_upstream(move |_head, _body, s| {
        let _ = s.write_all(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n",
        );
        let frame = b"data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"},\"finish_reason\":null}]}\n\n";
        let chunk = [
            format!("{:x}\r\n", frame.len()).into_bytes(),
            frame.to_vec(),
            b"\r\n".to_vec(),
        ]
        .concat();
        for _ in 0..400 {
            if s.write_all(&chunk).is_err() {
                cancelled.store(true, Ordering::SeqCst);
                return;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    })
}

#[test]
fn client_disconnect_cancels_upstream_stream() {
    let cancelled = Arc::new(AtomicBool::new(false));
    let up = endless_upstream(cancelled.clone());
    let gw = start_gateway(&config(up.addr, 5000));
    let mut s = send_json(
        gw.addr,
        "/v1/chat/completions",
        &json!({"model": "gpt", "stream": true, "messages": user("hi")}),
    );
    let mut buf = [0u8; 4096];
    let n = s.read(&mut buf).unwrap();
    assert!(n > 0);
    drop(s);
    let deadline = Instant::now() + Duration::from_secs(5);
    while !cancelled.load(Ordering::SeqCst) {
        assert!(
            Instant::now() < deadline,
            "upstream still streaming after client left"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(gw.terminate(), Some(0));
}

#[test]
fn client_disconnect_before_headers_cancels_upstream() {
    let closed = Arc::new(AtomicBool::new(false));
    let c2 = closed.clone();
    let up = raw_upstream(move |_head, _body, s| {
        // Never answer; wait for the gateway to close the connection.
        let mut b = [0u8; 16];
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        if let Ok(0) = s.read(&mut b) {
            c2.store(true, Ordering::SeqCst);
        }
    });
    let gw = start_gateway(&config(up.addr, 30_000));
    let s = send_json(
        gw.addr,
        "/v1/chat/completions",
        &json!({"model": "gpt", "messages": user("hi")}),
    );
    up.requests.recv_timeout(Duration::from_secs(5)).unwrap();
    drop(s);
    let deadline = Instant::now() + Duration::from_secs(5);
    while !closed.load(Ordering::SeqCst) {
        assert!(
            Instant::now() < deadline,
            "upstream connection kept open after client left"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(gw.terminate(), Some(0));
}

/// A stream whose upstream goes quiet after its first frame: the gateway writes nothing, so only
/// its hang-up watch (hyper is told not to read while a request is in flight) can see the client
/// leave, and it must close the upstream connection.
#[test]
fn client_disconnect_while_stream_is_quiet_cancels_upstream() {
    let closed = Arc::new(AtomicBool::new(false));
    let c2 = closed.clone();
    let up = raw_upstream(move |_head, _body, s| {
        let frame = b"data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"},\"finish_reason\":null}]}\n\n";
        let _ = s.write_all(
            format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n{:x}\r\n",
                frame.len()
            )
            .as_bytes(),
        );
        let _ = s.write_all(frame);
        let _ = s.write_all(b"\r\n");
        let mut b = [0u8; 16];
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        if let Ok(0) = s.read(&mut b) {
            c2.store(true, Ordering::SeqCst);
        }
    });
    let gw = start_gateway(&config(up.addr, 30_000));
    let mut s = send_json(
        gw.addr,
        "/v1/chat/completions",
        &json!({"model": "gpt", "stream": true, "messages": user("hi")}),
    );
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&got).contains("data:") {
        let n = s.read(&mut buf).unwrap();
        assert!(
            n > 0,
            "stream ended early: {}",
            String::from_utf8_lossy(&got)
        );
        got.extend_from_slice(&buf[..n]);
    }
    drop(s);
    let deadline = Instant::now() + Duration::from_secs(5);
    while !closed.load(Ordering::SeqCst) {
        assert!(
            Instant::now() < deadline,
            "upstream connection kept open after client left a quiet stream"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(gw.terminate(), Some(0));
}

/// Requests pipelined on one connection are answered in order: the next request's bytes, already
/// there while the first is in flight, end the first one's hang-up watch without being mistaken
/// for a hang-up, and hyper reads them once the first response is done.
#[test]
fn pipelined_requests_are_answered_in_order() {
    let up = raw_upstream(|_head, body, s| {
        // Slow enough that the second request is waiting while the first is in flight.
        std::thread::sleep(Duration::from_millis(100));
        let v: Value = serde_json::from_slice(body).unwrap();
        let text = v["messages"][0]["content"].as_str().unwrap().to_owned();
        write_json(
            s,
            200,
            &json!({"id": "c", "object": "chat.completion", "created": 1, "model": "m",
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                 "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}),
        );
    });
    let gw = start_gateway(&config(up.addr, 5000));
    let mut s = std::net::TcpStream::connect(gw.addr).unwrap();
    let mut wire = Vec::new();
    for (i, text) in ["first", "second", "third"].iter().enumerate() {
        let body = serde_json::to_vec(&json!({"model": "gpt", "messages": user(text)})).unwrap();
        let close = if i == 2 { "connection: close\r\n" } else { "" };
        wire.extend_from_slice(
            format!(
                "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n{close}content-length: {}\r\n\r\n",
                body.len()
            )
            .as_bytes(),
        );
        wire.extend_from_slice(&body);
    }
    s.write_all(&wire).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8_lossy(&raw);
    assert_eq!(text.matches("HTTP/1.1 200").count(), 3, "{text}");
    let (a, b, c) = (
        text.find("first").unwrap(),
        text.find("second").unwrap(),
        text.find("third").unwrap(),
    );
    assert!(a < b && b < c, "{text}");
    assert_eq!(gw.terminate(), Some(0));
}

/// An upstream that starts a stream in its dialect, then reports an error in-band and closes.
fn in_band_error_upstream() -> RawUpstream {
    raw_upstream(|head, _body, s| {
        let frames: Vec<String> = if head.starts_with("POST /v1/messages") {
            vec![
                "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"mock-claude\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":3,\"output_tokens\":0}}}\n\n".into(),
                "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n".into(),
                "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hel\"}}\n\n".into(),
                "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded upstream\"}}\n\n".into(),
            ]
        } else if head.starts_with("POST /v1/responses") {
            vec![
                "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_1\",\"object\":\"response\",\"status\":\"in_progress\",\"model\":\"mock-gpt\",\"output\":[]}}\n\n".into(),
                "event: error\ndata: {\"type\":\"error\",\"code\":\"server_error\",\"message\":\"Overloaded upstream\",\"param\":null,\"sequence_number\":1}\n\n".into(),
            ]
        } else {
            vec![
                "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"mock-gpt\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hel\"},\"finish_reason\":null}]}\n\n".into(),
                "data: {\"error\":{\"message\":\"Overloaded upstream\",\"type\":\"server_error\",\"param\":null,\"code\":null}}\n\n".into(),
            ]
        };
        let body: String = frames.concat();
        let _ = write!(
            s,
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        let _ = s.shutdown(std::net::Shutdown::Both);
    })
}

#[test]
fn upstream_in_band_error_event_ends_stream_with_dialect_error() {
    let up = in_band_error_upstream();
    let gw = start_gateway(&config(up.addr, 5000));
    for path in PATHS {
        for model in ["gpt", "claude"] {
            let r = post(gw.addr, path, &body_for(path, model, "hi", true));
            let ctx = format!("{path} {model}");
            assert_stream_ends_in_error(path, &r, &ctx);
            assert!(
                r.text().contains("Overloaded upstream"),
                "{ctx}: upstream message kept: {}",
                r.text()
            );
            let errors = r
                .events()
                .iter()
                .filter(|(e, d)| e == "error" || d.contains("\"error\":{"))
                .count();
            assert_eq!(errors, 1, "{ctx}: exactly one error event: {}", r.text());
        }
    }
    assert_eq!(gw.terminate(), Some(0));
}
