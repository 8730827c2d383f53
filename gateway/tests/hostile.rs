//! Hostile input: every malformed, oversized, slow or strange request gets a dialect-correct 4xx
//! from the real gateway process, and the process keeps serving afterwards.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::*;
use serde_json::json;

const PATHS: [&str; 3] = ["/v1/chat/completions", "/v1/messages", "/v1/responses"];

/// Asserts `r` is `status` with the error body of the dialect `path` speaks.
fn assert_dialect_error(path: &str, r: &Resp, status: u16) {
    assert_eq!(r.status, status, "{path}: {}", r.text());
    assert_error_shape(path, r);
}

fn send(addr: std::net::SocketAddr, path: &str, ct: &str, body: &[u8]) -> Resp {
    request(addr, "POST", path, &[("content-type", ct)], body)
}

/// The gateway at `addr` still answers a plain chat completion.
fn still_serves(addr: std::net::SocketAddr) {
    let r = post(
        addr,
        "/v1/chat/completions",
        &json!({"model": "gpt", "messages": user("still there?")}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
}

/// Mock + gateway whose standard test config is changed by `patch`.
fn stack_with(patch: impl FnOnce(&mut serde_json::Value)) -> Stack {
    let mock = start_mock();
    let mut cfg = config(mock.addr, 10_000);
    patch(&mut cfg);
    let gateway = start_gateway(&cfg);
    Stack { gateway, mock }
}

#[test]
fn malformed_bodies_get_dialect_400s() {
    let stack = Stack::start();
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let deep_body = format!(r#"{{"model":"gpt","messages":{deep}}}"#);
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("not json", b"{not json".to_vec()),
        (
            "non-UTF-8",
            b"{\"model\":\"gpt\",\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\"}]}"
                .to_vec(),
        ),
        (
            "duplicate model key",
            br#"{"model":"gpt","model":"claude","messages":[]}"#.to_vec(),
        ),
        ("deep nesting", deep_body.into_bytes()),
        (
            "model not a string",
            br#"{"model":12,"messages":[]}"#.to_vec(),
        ),
        ("top level not an object", b"[1,2,3]".to_vec()),
        ("empty body", Vec::new()),
    ];
    for path in PATHS {
        for (what, body) in &cases {
            let r = send(stack.gateway.addr, path, "application/json", body);
            assert_eq!(r.status, 400, "{path} {what}: {}", r.text());
            assert_dialect_error(path, &r, 400);
        }
    }
    still_serves(stack.gateway.addr);
    stack.stop();
}

#[test]
fn huge_numbers_do_not_crash() {
    let stack = Stack::start();
    let body = format!(
        r#"{{"model":"gpt","max_tokens":1{},"temperature":1e999999,"messages":[{{"role":"user","content":"hi"}}]}}"#,
        "0".repeat(5000)
    );
    for path in PATHS {
        let r = send(
            stack.gateway.addr,
            path,
            "application/json",
            body.as_bytes(),
        );
        assert!(r.status < 500, "{path}: {} {}", r.status, r.text());
    }
    still_serves(stack.gateway.addr);
    stack.stop();
}

#[test]
fn wrong_content_type_is_415() {
    let stack = Stack::start();
    let body = serde_json::to_vec(&json!({"model": "gpt", "messages": user("hi")})).unwrap();
    for path in PATHS {
        let r = send(stack.gateway.addr, path, "text/plain", &body);
        assert_dialect_error(path, &r, 415);
        let r = send(
            stack.gateway.addr,
            path,
            "application/json; charset=utf-8",
            &body,
        );
        assert_ne!(r.status, 415, "{path}: a JSON type with parameters is JSON");
    }
    still_serves(stack.gateway.addr);
    stack.stop();
}

#[test]
fn oversized_body_is_413() {
    let stack = stack_with(|cfg| cfg["limits_body_bytes"] = json!(1024));
    let gateway = &stack.gateway;
    let big = json!({"model": "gpt", "messages": user(&"x".repeat(4096))});
    for path in PATHS {
        let r = post(gateway.addr, path, &big);
        assert_dialect_error(path, &r, 413);
    }
    still_serves(gateway.addr);
    stack.stop();
}

#[test]
fn slow_body_gets_408_and_does_not_block_others() {
    let stack = stack_with(|cfg| cfg["timeouts"]["body_read_ms"] = json!(300));
    let gateway = &stack.gateway;
    // Headers promise 100 bytes; the body trickles and never completes.
    let mut slow = TcpStream::connect(gateway.addr).unwrap();
    slow.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    slow.write_all(
        format!(
            "POST /v1/messages HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{{\"model\"",
            gateway.addr
        )
        .as_bytes(),
    )
    .unwrap();
    // Meanwhile the same single worker serves another client.
    let t = Instant::now();
    still_serves(gateway.addr);
    assert!(t.elapsed() < Duration::from_secs(2));
    let mut raw = Vec::new();
    let _ = slow.read_to_end(&mut raw);
    let resp = parse_response(&raw);
    assert_dialect_error("/v1/messages", &resp, 408);
    stack.stop();
}

/// Reads until the peer closes; true when it closed within `within`.
fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    s.set_read_timeout(Some(within)).unwrap();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(_) => return false,
        }
    }
}

#[test]
fn slow_headers_and_idle_keep_alive_are_closed() {
    let stack = stack_with(|cfg| cfg["timeouts"]["header_ms"] = json!(300));
    let gateway = &stack.gateway;
    // Half a request line, then nothing.
    let mut slow = TcpStream::connect(gateway.addr).unwrap();
    slow.write_all(b"POST /v1/chat").unwrap();
    // A keep-alive client that got its answer and then idles.
    let mut idle = TcpStream::connect(gateway.addr).unwrap();
    idle.write_all(format!("GET /livez HTTP/1.1\r\nhost: {}\r\n\r\n", gateway.addr).as_bytes())
        .unwrap();
    let t = Instant::now();
    assert!(
        closed_within(&mut slow, Duration::from_secs(5)),
        "slow headers kept open"
    );
    assert!(
        closed_within(&mut idle, Duration::from_secs(5)),
        "idle keep-alive kept open"
    );
    assert!(t.elapsed() < Duration::from_secs(5));
    still_serves(gateway.addr);
    stack.stop();
}

#[test]
fn connections_beyond_the_cap_are_closed_and_the_rest_served() {
    let stack = stack_with(|cfg| cfg["max_connections"] = json!(4));
    let gateway = &stack.gateway;
    let held: Vec<TcpStream> = (0..4)
        .map(|_| TcpStream::connect(gateway.addr).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let mut extra = TcpStream::connect(gateway.addr).unwrap();
    assert!(
        closed_within(&mut extra, Duration::from_secs(5)),
        "a fifth connection was kept"
    );
    drop(held);
    std::thread::sleep(Duration::from_millis(200));
    still_serves(gateway.addr);
    stack.stop();
}
