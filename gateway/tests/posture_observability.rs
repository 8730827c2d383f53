//! Metrics and access log against the real gateway and mock: every series the issue names,
//! bounded `model` labels, one JSON line per request (a stream's written when it ends, with its
//! usage), `x-request-id` echoed or generated.

mod common;
mod posture_support;

use posture_support as ps;
use serde_json::json;

#[test]
fn metrics_and_access_log() {
    let mock = common::start_mock();
    let dir = common::tmpdir("obs");
    let log = dir.join("access.jsonl");
    let cfg = ps::config(
        mock.addr,
        json!({"metrics": {"listen": "127.0.0.1:0"}, "access_log": {"path": log}}),
    );
    let gw = ps::start(&cfg, &[]);
    let a = gw.addr;

    // 1: buffered chat, client request id echoed.
    let r = ps::post_with(
        a,
        "/v1/chat/completions",
        &[("x-request-id", "posture-req-1")],
        &ps::chat("gpt", "hi"),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-request-id"), Some("posture-req-1"));
    // 2: translated stream (messages client, openai upstream).
    let r = ps::post_with(
        a,
        "/v1/messages",
        &[],
        &ps::messages("gpt", "[[mock:frames:5]]", true),
    );
    assert_eq!(r.status, 200);
    assert!(r.text().contains("message_stop"));
    let generated = r.header("x-request-id").unwrap().to_owned();
    assert_eq!(generated.len(), 24, "{generated}");
    // 3: native responses stream.
    let r = ps::post_with(
        a,
        "/v1/responses",
        &[],
        &json!({"model": "gpt", "input": "hi", "stream": true}),
    );
    assert_eq!(r.status, 200);
    // 4, 5: unknown models share the `other` label; a bad request id is replaced.
    let r = ps::post_with(
        a,
        "/v1/chat/completions",
        &[("x-request-id", "has space")],
        &ps::chat("nope-1", "hi"),
    );
    assert_eq!(r.status, 404);
    assert_ne!(r.header("x-request-id"), Some("has space"));
    let r = ps::post_with(a, "/v1/chat/completions", &[], &ps::chat("nope-2", "hi"));
    assert_eq!(r.status, 404);
    // 6: malformed JSON, before any model is known.
    let r = common::request(
        a,
        "POST",
        "/v1/chat/completions",
        &[("content-type", "application/json")],
        b"{nope",
    );
    assert_eq!(r.status, 400);
    // 7: an upstream error carried over.
    let r = ps::post_with(
        a,
        "/v1/messages",
        &[],
        &ps::messages("claude", "[[mock:status:529]]", false),
    );
    assert_eq!(r.status, 529);

    let lines = ps::log_lines(&log, 7);
    assert_eq!(lines.len(), 7, "{lines:#?}");
    let l = &lines[0];
    assert_eq!(l["request_id"], "posture-req-1");
    assert_eq!(l["route"], "/v1/chat/completions");
    assert_eq!(l["model"], "gpt");
    assert_eq!(l["provider"], "up-openai");
    assert_eq!(l["status"], 200);
    assert!(l["latency_ms"].as_f64().unwrap() > 0.0);
    assert!(l["upstream_latency_ms"].as_f64().unwrap() > 0.0);
    assert!(l["tokens_in"].as_u64().unwrap() > 0);
    assert_eq!(l["tokens_out"], 8);
    assert!(l["ts"].as_str().unwrap().ends_with('Z'));
    let l = &lines[1];
    assert_eq!(l["request_id"], generated.as_str());
    assert_eq!(l["stream"], true);
    assert_eq!(l["tokens_out"], 5, "stream usage in the line: {l}");
    assert!(l["ttft_ms"].as_f64().is_some(), "{l}");
    assert!(l.get("stream_error").is_none(), "{l}");
    assert_eq!(lines[2]["route"], "/v1/responses");
    assert_eq!(lines[2]["tokens_out"], 8, "{}", lines[2]);
    assert_eq!(lines[3]["model"], "nope-1");
    assert_eq!(lines[3]["status"], 404);
    assert_eq!(lines[5]["status"], 400);
    assert_eq!(lines[5]["model"], serde_json::Value::Null);
    assert_eq!(lines[6]["status"], 529);
    assert!(
        lines[5]["error"].as_str().unwrap().contains("JSON"),
        "{}",
        lines[5]
    );

    let m = gw.scrape();
    let get = |s: &str| ps::metric(&m, s);
    assert_eq!(
        get("gateway_requests_total{route=\"/v1/chat/completions\",model=\"gpt\",status=\"200\"}"),
        Some(1.0),
        "{m}"
    );
    assert_eq!(
        get(
            "gateway_requests_total{route=\"/v1/chat/completions\",model=\"other\",status=\"404\"}"
        ),
        Some(2.0)
    );
    assert_eq!(
        get("gateway_requests_total{route=\"/v1/chat/completions\",model=\"none\",status=\"400\"}"),
        Some(1.0)
    );
    assert_eq!(
        get("gateway_requests_total{route=\"/v1/messages\",model=\"claude\",status=\"other\"}"),
        Some(1.0)
    );
    assert!(
        !m.contains("nope-1"),
        "unconfigured models never become labels"
    );
    assert_eq!(
        get("gateway_tokens_total{route=\"/v1/messages\",model=\"gpt\",direction=\"out\"}"),
        Some(5.0)
    );
    assert_eq!(
        get("gateway_request_duration_seconds_count{route=\"/v1/chat/completions\"}"),
        Some(4.0)
    );
    assert_eq!(
        get("gateway_upstream_duration_seconds_count{route=\"/v1/chat/completions\"}"),
        Some(1.0)
    );
    assert_eq!(
        get("gateway_overhead_seconds_count{route=\"/v1/chat/completions\"}"),
        Some(1.0)
    );
    assert_eq!(
        get("gateway_time_to_first_token_seconds_count{route=\"/v1/messages\"}"),
        Some(1.0)
    );
    assert_eq!(
        get("gateway_time_to_first_token_seconds_count{route=\"/v1/responses\"}"),
        Some(1.0)
    );
    assert_eq!(
        get("gateway_requests_in_flight{route=\"/v1/messages\"}"),
        Some(0.0)
    );
    assert!(
        m.contains("gateway_overhead_seconds_bucket{route=\"/v1/chat/completions\",le=\"+Inf\"} 1")
    );
    for line in m.lines().filter(|l| !l.starts_with('#')) {
        assert!(
            line.rsplit(' ').next().unwrap().parse::<f64>().is_ok(),
            "{line}"
        );
    }
    let other = common::get(gw.metrics.unwrap(), "/nope");
    assert_eq!(other.status, 404);
    assert_eq!(gw.terminate(), Some(0));
}

#[test]
fn access_log_to_stderr_by_default_and_off() {
    let mock = common::start_mock();
    let gw = ps::start(&ps::config(mock.addr, json!({})), &[]);
    let r = ps::post_with(
        gw.addr,
        "/v1/chat/completions",
        &[("x-request-id", "stderr-1")],
        &ps::chat("gpt", "hi"),
    );
    assert_eq!(r.status, 200);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let mut seen = Vec::new();
    loop {
        seen.extend(gw.drain_stderr());
        if seen
            .iter()
            .any(|l| l.contains("\"request_id\":\"stderr-1\""))
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no access-log line on stderr: {seen:#?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(gw.terminate(), Some(0));

    let gw = ps::start(
        &ps::config(mock.addr, json!({"access_log": {"enabled": false}})),
        &[],
    );
    let r = ps::post_with(
        gw.addr,
        "/v1/chat/completions",
        &[("x-request-id", "off-1")],
        &ps::chat("gpt", "hi"),
    );
    assert_eq!(r.status, 200);
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert!(!gw.drain_stderr().iter().any(|l| l.contains("off-1")));
    assert_eq!(gw.terminate(), Some(0));
}

#[test]
fn stream_cut_by_the_client_is_logged_when_it_ends() {
    use std::io::Read;
    let mock = common::start_mock();
    let dir = common::tmpdir("obs-cut");
    let log = dir.join("access.jsonl");
    let cfg = ps::config(
        mock.addr,
        json!({"metrics": {"listen": "127.0.0.1:0"}, "access_log": {"path": log}}),
    );
    let gw = ps::start(&cfg, &[]);
    let body = serde_json::to_vec(&ps::messages("claude", "[[mock:frames:50000]]", true)).unwrap();
    let mut s = common::send_request(
        gw.addr,
        "POST",
        "/v1/messages",
        &[
            ("x-request-id", "cut-1"),
            ("content-type", "application/json"),
        ],
        &body,
    );
    let mut first = [0u8; 256];
    let n = s.read(&mut first).unwrap();
    assert!(n > 0);
    drop(s);
    let lines = ps::log_lines(&log, 1);
    assert_eq!(lines.len(), 1, "{lines:#?}");
    let l = &lines[0];
    assert_eq!(l["request_id"], "cut-1");
    assert_eq!(l["status"], 200);
    assert_eq!(l["stream"], true);
    assert_eq!(l["stream_error"], "client disconnected", "{l}");
    assert!(
        l["tokens_in"].as_u64().unwrap() > 0,
        "input usage from message_start: {l}"
    );
    let m = gw.scrape();
    assert_eq!(
        ps::metric(&m, "gateway_requests_in_flight{route=\"/v1/messages\"}"),
        Some(0.0)
    );
    assert_eq!(gw.terminate(), Some(0));
}
