//! The request head's size limit of our own (`limits_header_bytes`, default 32 KiB): one past it
//! is a 431 in the client's dialect, like the body's 413; far past it (beyond the read buffer,
//! twice the limit) hyper's own 431 and the connection closed, never a head held in memory.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::*;
use serde_json::json;

/// A POST of a valid request of `path`'s dialect with one `x-padding` header of `pad` bytes;
/// write errors are ignored (the gateway may close before reading it all) and whatever answer
/// came is parsed.
fn padded(addr: std::net::SocketAddr, path: &str, pad: usize) -> Resp {
    let body = if path == "/v1/responses" {
        json!({"model": "gpt", "max_output_tokens": 8, "input": "hi"})
    } else {
        json!({"model": "gpt", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]})
    };
    let body = serde_json::to_vec(&body).unwrap();
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nhost: gw\r\nconnection: close\r\ncontent-type: application/json\r\nx-padding: {}\r\ncontent-length: {}\r\n\r\n",
        "a".repeat(pad),
        body.len()
    );
    let _ = s.write_all(head.as_bytes());
    let _ = s.write_all(&body);
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    parse_response(&raw)
}

#[test]
fn heads_past_the_limit_get_431_in_the_clients_dialect() {
    let mock = start_mock();
    let gw = start_gateway(&config(mock.addr, 5_000));

    let r = padded(gw.addr, "/v1/chat/completions", 20 << 10);
    assert_eq!(
        r.status, 200,
        "20 KiB of headers are under the default limit"
    );

    let r = padded(gw.addr, "/v1/chat/completions", 40 << 10);
    assert_eq!(r.status, 431);
    let msg = assert_error_shape("/v1/chat/completions", &r);
    assert!(msg.contains("32768"), "{msg}");
    assert!(r.header("x-request-id").is_some());

    let r = padded(gw.addr, "/v1/messages", 40 << 10);
    assert_eq!(r.status, 431);
    assert_error_shape("/v1/messages", &r);

    // The 256 KiB header hyper's default buffer let through: refused before it is all read.
    let r = padded(gw.addr, "/v1/chat/completions", 256 << 10);
    assert_eq!(r.status, 431);
    assert_eq!(gw.terminate(), Some(0));
}

#[test]
fn the_limit_is_configurable_and_checked() {
    let mock = start_mock();
    let mut cfg = config(mock.addr, 5_000);
    cfg["limits_header_bytes"] = json!(4096);
    let gw = start_gateway(&cfg);
    assert_eq!(padded(gw.addr, "/v1/responses", 2 << 10).status, 200);
    let r = padded(gw.addr, "/v1/responses", 5 << 10);
    assert_eq!(r.status, 431);
    assert_error_shape("/v1/responses", &r);
    assert_eq!(gw.terminate(), Some(0));

    cfg["limits_header_bytes"] = json!(100);
    let dir = tmpdir("header-limit");
    let path = dir.join("c.json");
    std::fs::write(&path, serde_json::to_vec(&cfg).unwrap()).unwrap();
    let out = std::process::Command::new(gateway_bin())
        .args(["validate", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("$.limits_header_bytes"), "{err}");
}
