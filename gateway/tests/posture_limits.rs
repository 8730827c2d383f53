//! Rate-limit policies against the real gateway and mock: requests per minute per key, tokens
//! per minute per model (charged after the call with the real usage), concurrency released when
//! a request ends, fails or its client disconnects; 429s with `retry-after` and `x-ratelimit-*`
//! in the client's dialect, counted in the metrics.

mod common;
mod posture_support;

use std::time::{Duration, Instant};

use posture_support as ps;
use serde_json::json;

const KEY: &str = "sk-limits-key";

#[test]
fn requests_per_minute_per_key() {
    let mock = common::start_mock();
    let cfg = ps::config(
        mock.addr,
        json!({
            "keys": [{"id": "k", "key_env": "GW_POSTURE_LIMIT_KEY"}],
            "limits": {"keys": {"k": {"requests_per_minute": 3}}, "headers_on_success": true},
            "metrics": {"listen": "127.0.0.1:0"},
            "access_log": {"enabled": false},
        }),
    );
    let gw = ps::start(&cfg, &[("GW_POSTURE_LIMIT_KEY", KEY)]);
    for i in 0..3 {
        let r = ps::post_with(
            gw.addr,
            "/v1/chat/completions",
            &[("x-api-key", KEY)],
            &ps::chat("gpt", "hi"),
        );
        assert_eq!(r.status, 200, "request {i}: {}", r.text());
        // Successful answers carry the policy's state too.
        assert_eq!(r.header("x-ratelimit-limit-requests"), Some("3"));
        let left = (2 - i).to_string();
        assert_eq!(
            r.header("x-ratelimit-remaining-requests"),
            Some(left.as_str())
        );
    }
    let r = ps::post_with(
        gw.addr,
        "/v1/chat/completions",
        &[("x-api-key", KEY)],
        &ps::chat("gpt", "hi"),
    );
    assert_eq!(r.status, 429, "{}", r.text());
    assert_eq!(r.json()["error"]["type"], "rate_limit_error");
    assert_eq!(r.json()["error"]["code"], "rate_limit_exceeded");
    let retry: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=20).contains(&retry), "retry-after {retry}");
    assert_eq!(r.header("x-ratelimit-limit-requests"), Some("3"));
    assert_eq!(r.header("x-ratelimit-remaining-requests"), Some("0"));
    assert!(r.header("x-ratelimit-reset-requests").is_some());
    assert!(r.header("retry-after-ms").is_some());

    // Same refusal in the Messages dialect.
    let r = ps::post_with(
        gw.addr,
        "/v1/messages",
        &[("x-api-key", KEY)],
        &ps::messages("claude", "hi", false),
    );
    assert_eq!(r.status, 429);
    assert_eq!(r.json()["type"], "error");
    assert_eq!(r.json()["error"]["type"], "rate_limit_error");
    assert!(r.header("retry-after").is_some());

    let scrape = gw.scrape();
    assert_eq!(
        ps::metric(&scrape, "gateway_rate_limited_total{route=\"/v1/chat/completions\",model=\"gpt\",scope=\"key\",kind=\"requests\"}"),
        Some(1.0),
        "{scrape}"
    );
    assert_eq!(
        ps::metric(
            &scrape,
            "gateway_requests_total{route=\"/v1/messages\",model=\"claude\",status=\"429\"}"
        ),
        Some(1.0)
    );
    assert_eq!(gw.terminate(), Some(0));
}

#[test]
fn tokens_per_minute_charged_with_real_usage() {
    let mock = common::start_mock();
    // The mock reports input = body bytes / 4 and output = frames (8): one request of about 100
    // bytes costs about 33 tokens, more than the whole per-minute budget of 20.
    let cfg = ps::config(
        mock.addr,
        json!({
            "limits": {"models": {"claude": {"tokens_per_minute": 20}}},
            "metrics": {"listen": "127.0.0.1:0"},
            "access_log": {"enabled": false},
        }),
    );
    let gw = ps::start(&cfg, &[]);
    let r = ps::post_with(
        gw.addr,
        "/v1/messages",
        &[],
        &ps::messages("claude", "hi", true),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.text().contains("message_stop"));
    assert_eq!(
        r.header("x-ratelimit-limit-tokens"),
        None,
        "off unless headers_on_success"
    );
    // The stream's usage was charged when it ended: the bucket is in debt now.
    let r = ps::post_with(
        gw.addr,
        "/v1/messages",
        &[],
        &ps::messages("claude", "hi", false),
    );
    assert_eq!(r.status, 429, "{}", r.text());
    assert_eq!(r.header("x-ratelimit-limit-tokens"), Some("20"));
    assert_eq!(r.header("x-ratelimit-remaining-tokens"), Some("0"));
    let retry: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!(
        retry >= 10,
        "a debt of ~13 tokens at 20/min is ~40 s: {retry}"
    );
    // Other models are not limited.
    let r = ps::post_with(gw.addr, "/v1/chat/completions", &[], &ps::chat("gpt", "hi"));
    assert_eq!(r.status, 200);
    let scrape = gw.scrape();
    let out = ps::metric(
        &scrape,
        "gateway_tokens_total{route=\"/v1/messages\",model=\"claude\",direction=\"out\"}",
    );
    assert_eq!(out, Some(8.0), "{scrape}");
    assert_eq!(gw.terminate(), Some(0));
}

#[test]
fn concurrency_released_on_end_failure_and_disconnect() {
    let mock = common::start_mock();
    let mut cfg = ps::config(
        mock.addr,
        json!({
            "limits": {"models": {"gpt": {"max_concurrent": 1}}},
            "metrics": {"listen": "127.0.0.1:0"},
            "access_log": {"enabled": false},
        }),
    );
    cfg["timeouts"] = json!({"upstream_ms": 1500});
    let gw = ps::start(&cfg, &[]);
    let addr = gw.addr;

    // 1. A stalled request holds the only slot until the upstream timeout (504) releases it.
    let stalled = std::thread::spawn(move || {
        ps::post_with(
            addr,
            "/v1/chat/completions",
            &[],
            &ps::chat("gpt", "[[mock:stall]]"),
        )
    });
    std::thread::sleep(Duration::from_millis(300));
    let r = ps::post_with(addr, "/v1/chat/completions", &[], &ps::chat("gpt", "hi"));
    assert_eq!(r.status, 429, "{}", r.text());
    assert_eq!(r.header("x-ratelimit-limit-concurrency"), Some("1"));
    assert_eq!(stalled.join().unwrap().status, 504);
    let r = ps::post_with(addr, "/v1/chat/completions", &[], &ps::chat("gpt", "hi"));
    assert_eq!(
        r.status,
        200,
        "slot released after the timeout: {}",
        r.text()
    );

    // 2. A client that disconnects while waiting releases the slot.
    let s = common::send_json(
        addr,
        "/v1/chat/completions",
        &ps::chat("gpt", "[[mock:stall]]"),
    );
    std::thread::sleep(Duration::from_millis(300));
    drop(s);
    wait_ok(addr, &ps::chat("gpt", "hi"), "/v1/chat/completions");

    // 3. A stream holds the slot until it ends; a client that leaves mid-stream releases it.
    let body = json!({"model": "gpt", "stream": true,
        "messages": [{"role": "user", "content": "[[mock:frames:400]]"}]});
    let mut s = common::send_json(addr, "/v1/chat/completions", &body);
    let mut first = [0u8; 64];
    let _ = std::io::Read::read(&mut s, &mut first).unwrap();
    drop(s);
    wait_ok(addr, &ps::chat("gpt", "hi"), "/v1/chat/completions");

    let scrape = gw.scrape();
    assert_eq!(
        ps::metric(
            &scrape,
            "gateway_requests_in_flight{route=\"/v1/chat/completions\"}"
        ),
        Some(0.0),
        "{scrape}"
    );
    assert!(
        ps::metric(&scrape, "gateway_rate_limited_total{route=\"/v1/chat/completions\",model=\"gpt\",scope=\"model\",kind=\"concurrency\"}")
            >= Some(1.0)
    );
    assert_eq!(gw.terminate(), Some(0));
}

/// The slot comes back within a second (the gateway notices the disconnect).
fn wait_ok(addr: std::net::SocketAddr, body: &serde_json::Value, path: &str) {
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let r = ps::post_with(addr, path, &[], body);
        if r.status == 200 {
            return;
        }
        assert_eq!(r.status, 429, "{}", r.text());
        assert!(Instant::now() < deadline, "concurrency slot never released");
        std::thread::sleep(Duration::from_millis(50));
    }
}
