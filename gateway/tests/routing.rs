//! Aliases with several deployments against real mocks, one mock per deployment (a mock started
//! with `--directives` is a failing, stalling or slow one): the weighted split, the least-loaded
//! strategy, fallbacks, the attempt cap and retry budget, cooldowns and `retry-after`, streams,
//! what the access log and the metrics say, and `gateway validate`. The same through the official
//! SDKs is in tests/gateway/test_routing.py.

mod common;
mod posture_support;

use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use posture_support as ps;
use serde_json::{json, Value};

/// Providers `a`, `b`, `c` (openai) and `b-anthropic` at the given mocks, the alias `pool` over
/// `deployments`, and the other top-level sections in `extra`.
fn config(mocks: &[SocketAddr], pool: Value, extra: Value) -> Value {
    let mut providers = serde_json::Map::new();
    for (name, m) in ["a", "b", "c"].iter().zip(mocks) {
        providers.insert(
            name.to_string(),
            json!({"kind": "openai", "base_url": format!("http://{m}"), "api_key_env": "GW_TEST_OPENAI_KEY"}),
        );
    }
    if let Some(m) = mocks.get(1) {
        providers.insert(
            "b-anthropic".into(),
            json!({"kind": "anthropic", "base_url": format!("http://{m}"), "api_key_env": "GW_TEST_ANTHROPIC_KEY"}),
        );
    }
    let mut c = json!({
        "listen": "127.0.0.1:0",
        "workers": 1,
        "timeouts": {"upstream_ms": 5000},
        "providers": providers,
        "models": {"pool": pool},
    });
    for (k, v) in extra.as_object().unwrap() {
        c[k] = v.clone();
    }
    c
}

fn deployments(list: &[(&str, u64, u64)]) -> Value {
    let d: Vec<Value> = list
        .iter()
        .map(|(p, w, prio)| json!({"provider": p, "model": "x", "weight": w, "priority": prio}))
        .collect();
    json!({ "deployments": d })
}

fn chat(text: &str) -> Value {
    json!({"model": "pool", "messages": [{"role": "user", "content": text}]})
}

/// `trainer load` at the gateway: `n` chat requests over `connections` keep-alive connections,
/// each required to have `status`.
fn load(gw: SocketAddr, n: u64, connections: usize, status: u16) {
    let dir = common::tmpdir("routing-load");
    let body = dir.join("body.json");
    std::fs::write(
        &body,
        serde_json::to_vec(&chat("Hi [[mock:frames:2]]")).unwrap(),
    )
    .unwrap();
    let out = Command::new(common::trainer_bin())
        .args(["load", "--addr", &gw.to_string(), "--body"])
        .arg(&body)
        .args(["--connections", &connections.to_string()])
        .args(["--requests", &n.to_string()])
        .args(["--expect-status", &status.to_string()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "trainer load: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn counts(mocks: &[&common::Proc]) -> Vec<u64> {
    mocks
        .iter()
        .map(|m| common::mock_requests(m.addr))
        .collect()
}

fn stop(gw: ps::Gw) {
    assert_eq!(gw.terminate(), Some(0), "gateway exit status after SIGTERM");
}

#[test]
fn weights_3_to_1_split_10000_requests_75_25() {
    let (a, b) = (common::start_mock(), common::start_mock());
    let pool = deployments(&[("a", 3, 0), ("b", 1, 0)]);
    // Two workers: each balances on its own, and together they still split by weight.
    let mut cfg = config(&[a.addr, b.addr], pool, json!({}));
    cfg["workers"] = json!(2);
    let gw = ps::start(&cfg, &[]);
    load(gw.addr, 10_000, 4, 200);
    let n = counts(&[&a, &b]);
    let share = n[0] as f64 / (n[0] + n[1]) as f64;
    eprintln!(
        "weighted 3:1 over 10000 requests: a={} b={} ({:.2}% / {:.2}%)",
        n[0],
        n[1],
        100.0 * share,
        100.0 * (1.0 - share)
    );
    assert_eq!(n[0] + n[1], 10_000);
    assert!((share - 0.75).abs() <= 0.02, "a's share {share}");
    stop(gw);
}

#[test]
fn least_loaded_sends_less_to_the_slow_deployment() {
    let a = common::start_mock();
    let b = common::start_mock_with("[[mock:delay_ms:40]]", None);
    let mut shares = Vec::new();
    for strategy in ["weighted", "least-loaded"] {
        let mut pool = deployments(&[("a", 1, 0), ("b", 1, 0)]);
        pool["strategy"] = json!(strategy);
        let gw = ps::start(&config(&[a.addr, b.addr], pool, json!({})), &[]);
        let before = counts(&[&a, &b]);
        load(gw.addr, 600, 8, 200);
        let after = counts(&[&a, &b]);
        let (na, nb) = (after[0] - before[0], after[1] - before[1]);
        let share = nb as f64 / (na + nb) as f64;
        eprintln!(
            "{strategy}: fast a={na} slow b={nb} (b {:.1}%)",
            100.0 * share
        );
        shares.push(share);
        stop(gw);
    }
    assert!((shares[0] - 0.5).abs() <= 0.02, "weighted: {shares:?}");
    assert!(shares[1] < 0.2, "least-loaded: {shares:?}");
}

#[test]
fn attempt_cap_and_retry_budget_bound_upstream_requests_when_everything_fails() {
    let mocks: Vec<common::Proc> = (0..3)
        .map(|_| common::start_mock_with("[[mock:status:500]]", None))
        .collect();
    let addrs: Vec<SocketAddr> = mocks.iter().map(|m| m.addr).collect();
    let pool = deployments(&[("a", 1, 0), ("b", 1, 0), ("c", 1, 0)]);
    let no_cooldown = json!({"failures": 1_000_000});
    let n = 300u64;
    let total =
        |mocks: &[common::Proc]| -> u64 { counts(&mocks.iter().collect::<Vec<_>>()).iter().sum() };

    // A budget that never runs out: the attempt cap alone, exactly 2 per request.
    let routing = json!({"max_attempts": 2, "retry_budget": {"share": 1.0, "burst": 1000}, "cooldown": no_cooldown});
    let cfg = config(
        &addrs,
        pool.clone(),
        json!({"routing": routing, "metrics": {"listen": "127.0.0.1:0"}}),
    );
    let gw = ps::start(&cfg, &[]);
    load(gw.addr, n, 2, 500);
    let capped = total(&mocks);
    eprintln!(
        "all failing, max_attempts 2, ample budget: {n} requests -> {capped} upstream requests"
    );
    assert_eq!(capped, 2 * n);
    stop(gw);

    // The budget: at most burst + share x requests retries.
    let routing = json!({"max_attempts": 2, "retry_budget": {"share": 0.1, "burst": 5}, "cooldown": no_cooldown});
    let cfg = config(
        &addrs,
        pool,
        json!({"routing": routing, "metrics": {"listen": "127.0.0.1:0"}}),
    );
    let gw = ps::start(&cfg, &[]);
    load(gw.addr, n, 2, 500);
    let budgeted = total(&mocks) - capped;
    let bound = n + 5 + n / 10;
    eprintln!("all failing, retry budget 0.1 + 5: {n} requests -> {budgeted} upstream requests (bound {bound})");
    assert!(
        budgeted >= n && budgeted <= bound,
        "{budgeted} not in {n}..={bound}"
    );
    let text = gw.scrape();
    let refused = ps::metric(&text, "gateway_retry_budget_exhausted_total").unwrap();
    assert_eq!(refused as u64, 2 * n - budgeted, "{text}");
    stop(gw);
}

#[test]
fn cooldown_skips_a_failing_deployment_and_readmits_it_after_the_period() {
    // `a` fails its first two requests, then recovers.
    let a = common::start_mock_with("[[mock:status:503]]", Some(2));
    let b = common::start_mock();
    let pool = deployments(&[("a", 1, 0), ("b", 1, 0)]);
    let routing = json!({"cooldown": {"failures": 2, "window_ms": 10000, "period_ms": 1500}});
    let cfg = config(
        &[a.addr, b.addr],
        pool,
        json!({"routing": routing, "metrics": {"listen": "127.0.0.1:0"}}),
    );
    let gw = ps::start(&cfg, &[]);
    let mut sent = 0;
    while common::mock_requests(a.addr) < 2 {
        assert_eq!(
            common::post(gw.addr, "/v1/chat/completions", &chat("hi")).status,
            200
        );
        sent += 1;
        assert!(sent < 10, "a never got its two requests");
    }
    let cooled_at = Instant::now();
    for _ in 0..10 {
        assert_eq!(
            common::post(gw.addr, "/v1/chat/completions", &chat("hi")).status,
            200
        );
    }
    assert!(
        cooled_at.elapsed() < Duration::from_millis(1500),
        "the check ran too slowly"
    );
    assert_eq!(
        common::mock_requests(a.addr),
        2,
        "a is skipped while cooling down"
    );
    let text = gw.scrape();
    let series = "gateway_cooldowns_total{provider=\"a\",upstream_model=\"x\"}";
    assert_eq!(ps::metric(&text, series), Some(1.0), "{text}");

    std::thread::sleep(Duration::from_millis(1600));
    for _ in 0..10 {
        assert_eq!(
            common::post(gw.addr, "/v1/chat/completions", &chat("hi")).status,
            200
        );
    }
    let readmitted = common::mock_requests(a.addr) - 2;
    eprintln!(
        "cooldown: a got 0 of 10 requests while cooling, {readmitted} of 10 after the period"
    );
    assert!(readmitted >= 4, "a is back in rotation: {readmitted}");
    stop(gw);
}

#[test]
fn every_deployment_cooling_down_answers_the_last_upstream_error_at_once() {
    let a = common::start_mock_with("[[mock:status:503]]", None);
    let b = common::start_mock_with("[[mock:status:529]]", None);
    let pool = deployments(&[("a", 1, 0), ("b-anthropic", 1, 0)]);
    let routing = json!({"cooldown": {"failures": 1, "period_ms": 60000}});
    let gw = ps::start(
        &config(&[a.addr, b.addr], pool, json!({"routing": routing})),
        &[],
    );
    let msg =
        json!({"model": "pool", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]});
    let first = common::post(gw.addr, "/v1/messages", &msg);
    assert_eq!(counts(&[&a, &b]), [1, 1], "both tried");
    let t = Instant::now();
    let second = common::post(gw.addr, "/v1/messages", &msg);
    assert!(
        t.elapsed() < Duration::from_secs(1),
        "answered without waiting"
    );
    assert_eq!(
        counts(&[&a, &b]),
        [1, 1],
        "no upstream request while all cool down"
    );
    for r in [&first, &second] {
        assert!(r.status == 503 || r.status == 529, "{r:?}");
        let m = common::assert_error_shape("/v1/messages", r);
        assert!(m.starts_with("mock: status directive"), "{m}");
    }
    let ra: u64 = second
        .header("retry-after")
        .expect("retry-after")
        .parse()
        .unwrap();
    assert!((1..=60).contains(&ra), "{ra}");
    stop(gw);
}

#[test]
fn retry_after_keeps_a_deployment_out_for_that_long() {
    let a = common::start_mock_with("[[mock:status:429]][[mock:retry_after:1]]", Some(1));
    let b = common::start_mock();
    // Priorities make the order fixed: b serves only while a is out.
    let pool = deployments(&[("a", 1, 0), ("b", 1, 1)]);
    let gw = ps::start(&config(&[a.addr, b.addr], pool, json!({})), &[]);
    let t = Instant::now();
    for _ in 0..5 {
        assert_eq!(
            common::post(gw.addr, "/v1/chat/completions", &chat("hi")).status,
            200
        );
    }
    assert!(
        t.elapsed() < Duration::from_millis(900),
        "the check ran too slowly"
    );
    assert_eq!(counts(&[&a, &b]), [1, 5]);
    std::thread::sleep(Duration::from_millis(1200));
    assert_eq!(
        common::post(gw.addr, "/v1/chat/completions", &chat("hi")).status,
        200
    );
    assert_eq!(counts(&[&a, &b]), [2, 5], "a is back after its retry-after");
    stop(gw);
}

#[test]
fn stalls_and_resets_fall_back_and_streams_fail_over_only_before_their_first_byte() {
    let stalled = common::start_mock_with("[[mock:stall]]", None);
    let reset = common::start_mock_with("[[mock:reset]]", None);
    let ok = common::start_mock();
    for (bad, what) in [(&stalled, "stall"), (&reset, "reset")] {
        let pool = deployments(&[("a", 1, 0), ("b", 1, 1)]);
        let mut cfg = config(&[bad.addr, ok.addr], pool, json!({}));
        cfg["timeouts"]["upstream_ms"] = json!(300);
        let gw = ps::start(&cfg, &[]);
        let before = counts(&[bad, &ok]);
        let t = Instant::now();
        let r = common::post(gw.addr, "/v1/chat/completions", &chat("hi"));
        assert_eq!(r.status, 200, "{what}: {}", r.text());
        if what == "stall" {
            assert!(t.elapsed() >= Duration::from_millis(300));
        }
        let mut s = chat("hi [[mock:frames:3]]");
        s["stream"] = json!(true);
        let r = common::post(gw.addr, "/v1/chat/completions", &s);
        assert_eq!(r.status, 200);
        assert!(
            r.text().contains("word3") && r.text().ends_with("data: [DONE]\n\n"),
            "{}",
            r.text()
        );
        let after = counts(&[bad, &ok]);
        assert_eq!(
            (after[0] - before[0], after[1] - before[1]),
            (2, 2),
            "{what}"
        );
        stop(gw);
    }

    // After the first byte: the stream ends with the error event; the fallback is never asked.
    let mid = common::start_mock_with("[[mock:fail_mid_stream]]", None);
    let spare = common::start_mock();
    let pool = deployments(&[("a", 1, 0), ("b", 1, 1)]);
    let gw = ps::start(&config(&[mid.addr, spare.addr], pool, json!({})), &[]);
    let mut s = chat("hi");
    s["stream"] = json!(true);
    let r = common::post(gw.addr, "/v1/chat/completions", &s);
    assert_eq!(r.status, 200);
    let events = r.events();
    assert!(events.len() > 1, "{events:?}");
    assert!(events.last().unwrap().1.contains("\"error\""), "{events:?}");
    assert_eq!(counts(&[&mid, &spare]), [1, 0]);
    stop(gw);
}

#[test]
fn access_log_and_metrics_name_the_deployments_and_attempts() {
    let a = common::start_mock_with("[[mock:status:500]]", None);
    let b = common::start_mock();
    let dir = common::tmpdir("routing-obs");
    let log = dir.join("access.jsonl");
    let pool = deployments(&[("a", 1, 0), ("b-anthropic", 1, 1)]);
    let extra = json!({"metrics": {"listen": "127.0.0.1:0"}, "access_log": {"path": log}});
    let gw = ps::start(&config(&[a.addr, b.addr], pool, extra), &[]);
    let r = common::post(
        gw.addr,
        "/v1/chat/completions",
        &chat("hi [[mock:frames:2]]"),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["model"], "pool");
    let text = gw.scrape();
    let lines = ps::log_lines(&log, 1);
    let l = &lines[0];
    assert_eq!(l["model"], "pool");
    assert_eq!(l["provider"], "b-anthropic", "{l}");
    assert_eq!(l["upstream_model"], "x");
    assert_eq!(l["attempts"], 2);
    assert_eq!(
        l["failed_attempts"],
        json!([{"provider": "a", "upstream_model": "x", "outcome": "retryable_status", "status": 500}])
    );
    for (series, v) in [
        ("gateway_upstream_attempts_total{provider=\"a\",upstream_model=\"x\",outcome=\"retryable_status\"}", 1.0),
        ("gateway_upstream_attempts_total{provider=\"b-anthropic\",upstream_model=\"x\",outcome=\"ok\"}", 1.0),
        ("gateway_fallbacks_total{provider=\"a\",upstream_model=\"x\"}", 1.0),
    ] {
        assert_eq!(ps::metric(&text, series), Some(v), "{series} in\n{text}");
    }
    stop(gw);
}

#[test]
fn validate_checks_deployments_and_the_routing_section() {
    let cfg = json!({
        "listen": "127.0.0.1:0",
        "providers": {"a": {"kind": "openai", "base_url": "http://127.0.0.1:9", "api_key_env": "K"}},
        "models": {
            "w": {"strategy": "fastest", "deployments": [
                {"provider": "a", "model": "m", "weight": 0},
                {"provider": "nope", "model": "m"},
                {"provider": "a", "model": "n", "priority": -1},
                {"provider": "a", "model": "k"},
                {"provider": "a", "model": "k"}]},
            "none": {"deployments": []},
        },
        "routing": {"max_attempts": 0, "retry_on": ["500"], "retry_budget": {"share": 1.5}},
    });
    let (ok, err) = common::validate(&cfg);
    assert!(!ok);
    for path in [
        "$.models.w.strategy",
        "$.models.w.deployments[0].weight",
        "$.models.w.deployments[1].provider",
        "$.models.w.deployments[2].priority",
        "$.models.w.deployments[4]",
        "$.models.none.deployments",
        "$.routing.max_attempts",
        "$.routing.retry_on",
        "$.routing.retry_budget.share",
    ] {
        assert!(err.contains(path), "{path} not reported in:\n{err}");
    }
    // The short form and the list form together, with every optional field, pass.
    let mut good = config(
        &[
            "127.0.0.1:9".parse().unwrap(),
            "127.0.0.1:9".parse().unwrap(),
        ],
        deployments(&[("a", 3, 0), ("b-anthropic", 1, 1)]),
        json!({"routing": {"max_attempts": 2, "retry_on": [429, 503],
                           "retry_budget": {"share": 0.1, "burst": 3},
                           "cooldown": {"failures": 2, "window_ms": 1000, "period_ms": 5000}}}),
    );
    good["models"]["one"] = json!({"provider": "b", "model": "y"});
    good["models"]["pool"]["strategy"] = json!("least-loaded");
    let (ok, err) = common::validate(&good);
    assert!(ok, "{err}");
    assert!(!err.contains("unknown key"), "{err}");
}
