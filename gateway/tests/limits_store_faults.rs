//! The shared quota store failing under a serving gateway, against a real `redis-server`:
//! unreachable at start, lost mid-run, paused past the timeout (SIGSTOP), restarted empty. In
//! every case the gateway keeps serving by `on_store_error`, logs and counts each transition,
//! recovers without a restart, answers every request promptly and writes every access-log line.

mod common;
mod posture_support;
mod redis_support;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use posture_support as ps;
use redis_support as rs;
use serde_json::{json, Value};

const KEY: &str = "sk-soak";
const KEY_ENV: (&str, &str) = ("GW_FAULT_TEST_KEY", KEY);

fn extra(policies: Value, store: Value) -> Value {
    json!({
        "keys": [{"id": "k", "key_env": KEY_ENV.0}],
        "limits": rs::limits_with_store(policies, store),
    })
}

fn store_at(port: u16, prefix: &str, more: Value) -> Value {
    let mut s =
        json!({"url": format!("redis://127.0.0.1:{port}/0"), "prefix": prefix, "replicas": 3});
    for (k, v) in more.as_object().unwrap() {
        s[k] = v.clone();
    }
    s
}

fn one_gateway(upstream: SocketAddr, extra: &Value) -> ps::Gw {
    rs::replicas(1, upstream, extra, &[KEY_ENV]).remove(0)
}

fn post(gw: &ps::Gw) -> common::Resp {
    ps::post_with(
        gw.addr,
        "/v1/chat/completions",
        &[("x-api-key", KEY)],
        &ps::chat("gpt", "hi"),
    )
}

fn metric(gw: &ps::Gw, series: &str) -> f64 {
    ps::metric(&gw.scrape(), series).unwrap_or(0.0)
}

/// Keep-alive clients posting until stopped: every status, the slowest answer, and how many
/// were answered while `mark` was set.
struct Load {
    stop: Arc<AtomicBool>,
    mark: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<(Vec<u16>, Duration, u64)>>,
}

impl Load {
    fn start(addr: SocketAddr, clients: usize) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let mark = Arc::new(AtomicBool::new(false));
        let body = serde_json::to_vec(&ps::chat("gpt", "hi")).unwrap();
        let threads = (0..clients)
            .map(|_| {
                let (stop, mark, body) = (stop.clone(), mark.clone(), body.clone());
                std::thread::spawn(move || {
                    let mut c = ps::KeepAlive::connect(addr);
                    let mut statuses = Vec::new();
                    let mut slowest = Duration::ZERO;
                    let mut marked = 0;
                    while !stop.load(Ordering::Relaxed) {
                        let t = Instant::now();
                        let s = c.post_key("/v1/chat/completions", &body).map_or(0, |r| r.0);
                        slowest = slowest.max(t.elapsed());
                        statuses.push(s);
                        if mark.load(Ordering::Relaxed) {
                            marked += 1;
                        }
                        if s == 0 {
                            c = ps::KeepAlive::connect(addr);
                        }
                        std::thread::sleep(Duration::from_millis(2));
                    }
                    (statuses, slowest, marked)
                })
            })
            .collect();
        Load {
            stop,
            mark,
            threads,
        }
    }

    fn mark(&self, on: bool) {
        self.mark.store(on, Ordering::Relaxed);
    }

    /// (every status, the slowest answer, answers while marked)
    fn stop(self) -> (Vec<u16>, Duration, u64) {
        self.stop.store(true, Ordering::Relaxed);
        let mut all = (Vec::new(), Duration::ZERO, 0);
        for t in self.threads {
            let (s, d, m) = t.join().unwrap();
            all.0.extend(s);
            all.1 = all.1.max(d);
            all.2 += m;
        }
        all
    }
}

/// Every answer a 200, none slow, and one access-log line per request.
fn assert_served(gw: &ps::Gw, statuses: &[u16], slowest: Duration, also_sent: usize) {
    let bad: Vec<_> = statuses.iter().filter(|s| **s != 200).collect();
    assert!(
        bad.is_empty(),
        "{} answers were not 200: {bad:?}",
        bad.len()
    );
    assert!(
        slowest < Duration::from_secs(1),
        "an answer took {slowest:?}"
    );
    let want = statuses.len() + also_sent;
    let lines = ps::log_lines(&rs::access_log_of(gw), want);
    assert_eq!(lines.len(), want, "access-log lines");
}

#[test]
fn unreachable_at_start_then_shared_once_it_answers() {
    let mock = common::start_mock();
    let port = rs::free_port();
    let started = Instant::now();
    let gw = one_gateway(
        mock.addr,
        &extra(
            json!({"keys": {"k": {"requests_per_minute": 600}}}),
            store_at(port, "f1:", json!({"timeout_ms": 100})),
        ),
    );
    let mut log = rs::Log::new(&gw);
    assert!(
        log.has(&gw, "limits store: down at start"),
        "{:?}",
        log.lines
    );
    assert!(log.has(&gw, "on_store_error=local (local limits divided by 3"));
    assert_eq!(metric(&gw, "gateway_limits_store_up"), 0.0);
    // The fallback: 600 a minute over 3 replicas is one every 300 ms here, refilled from the
    // outage's start (the first attempt to connect), not a full bucket of 200.
    let statuses: Vec<u16> = (0..40)
        .map(|_| {
            std::thread::sleep(Duration::from_millis(25));
            post(&gw).status
        })
        .collect();
    let admitted = statuses.iter().filter(|s| **s == 200).count() as f64;
    let refilled = started.elapsed().as_secs_f64() / 0.3;
    assert!(admitted >= 1.0, "the fallback never refilled: {statuses:?}");
    assert!(
        admitted <= refilled.floor() + 1.0,
        "{admitted} admitted in {:?}: {statuses:?}",
        started.elapsed()
    );
    assert!(
        statuses.iter().all(|s| *s == 200 || *s == 429),
        "{statuses:?}"
    );
    assert_eq!(
        metric(
            &gw,
            "gateway_limits_store_fallback_total{decision=\"local\"}"
        ),
        40.0
    );

    let redis = rs::Redis::start_with(port, &[]);
    assert!(
        rs::eventually(10, || log.has(&gw, "limits store: up")),
        "{:?}",
        log.lines
    );
    assert_eq!(metric(&gw, "gateway_limits_store_up"), 1.0);
    assert_eq!(
        metric(&gw, "gateway_limits_store_transitions_total{state=\"up\"}"),
        1.0
    );
    // Shared now: the bucket in Redis is new and full, charged what the fallback admitted.
    let r = post(&gw);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(redis.keys("f1:"), ["f1:key:k:requests"]);
    assert_eq!(ps::log_lines(&rs::access_log_of(&gw), 41).len(), 41);
    assert_eq!(gw.terminate(), Some(0));
}

/// A store outage under load: `fail` breaks Redis, the gateway must log `down` (with
/// `down_says`) and serve on the fallback; `heal` brings Redis back and the gateway must be
/// shared again without a restart. Every answer a prompt 200, every access-log line written.
fn outage(
    what: &str,
    store_more: Value,
    fail: fn(&mut rs::Redis),
    down_says: &str,
    heal: fn(&mut rs::Redis),
) -> ps::Gw {
    let mock = common::start_mock();
    let mut redis = rs::Redis::start();
    let prefix = format!("{what}:");
    let gw = one_gateway(
        mock.addr,
        &extra(
            json!({"keys": {"k": {"requests_per_minute": 1_000_000, "max_concurrent": 64}}}),
            store_at(redis.port, &prefix, store_more),
        ),
    );
    let mut log = rs::Log::new(&gw);
    assert!(log.has(&gw, "limits store: up"), "{:?}", log.lines);
    let load = Load::start(gw.addr, 4);
    std::thread::sleep(Duration::from_millis(300));

    fail(&mut redis);
    assert!(
        rs::eventually(10, || log.has(&gw, down_says)),
        "{:?}",
        log.lines
    );
    assert_eq!(metric(&gw, "gateway_limits_store_up"), 0.0);
    load.mark(true);
    std::thread::sleep(Duration::from_millis(500));
    load.mark(false);

    heal(&mut redis);
    assert!(
        rs::eventually(10, || metric(&gw, "gateway_limits_store_up") == 1.0),
        "{:?}",
        log.update(&gw)
    );
    assert!(log.has(&gw, "limits store: up"));
    assert_eq!(
        metric(&gw, "gateway_limits_store_transitions_total{state=\"up\"}"),
        2.0
    );
    std::thread::sleep(Duration::from_millis(300));
    let (statuses, slowest, while_down) = load.stop();
    println!(
        "{what}: {} requests, {while_down} while down, slowest {slowest:?}",
        statuses.len()
    );
    assert!(
        while_down > 0,
        "nothing was served while the store was down"
    );
    assert!(
        redis
            .keys(&prefix)
            .contains(&format!("{prefix}key:k:requests")),
        "shared again"
    );
    assert_served(&gw, &statuses, slowest, 0);
    gw
}

#[test]
fn lost_mid_run_then_restarted_empty() {
    let gw = outage(
        "lost",
        json!({}),
        rs::Redis::kill,
        "limits store: down:",
        rs::Redis::restart_empty,
    );
    assert_eq!(gw.terminate(), Some(0));
}

#[test]
fn paused_past_the_timeout() {
    let gw = outage(
        "paused",
        json!({"timeout_ms": 50}),
        |r| r.pause(),
        "no answer within 50 ms",
        |r| r.resume(),
    );
    assert!(metric(&gw, "gateway_limits_store_calls_total{result=\"timeout\"}") >= 1.0);
    assert_eq!(gw.terminate(), Some(0));
}

#[test]
fn restarted_empty_the_held_slots_are_stated_again() {
    let mut redis = rs::Redis::start();
    let held = Arc::new(AtomicBool::new(true));
    let h = held.clone();
    let up = common::raw_upstream(move |_, body, s| {
        if String::from_utf8_lossy(body).contains("hold") {
            while h.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        common::write_json(s, 200, &rs::chat_completion());
    });
    let gw = one_gateway(
        up.addr,
        &extra(
            json!({"models": {"gpt": {"max_concurrent": 2}}}),
            store_at(redis.port, "f4:", json!({"slot_ttl_ms": 3000})),
        ),
    );
    let body = serde_json::to_vec(&ps::chat("gpt", "hold")).unwrap();
    let conns: Vec<_> = (0..2)
        .map(|_| {
            common::send_request(
                gw.addr,
                "POST",
                "/v1/chat/completions",
                &[("content-type", "application/json"), ("x-api-key", KEY)],
                &body,
            )
        })
        .collect();
    let held_in_redis = |redis: &rs::Redis| -> u64 {
        redis
            .cmd(&["HGETALL", "f4:model:gpt:concurrency"])
            .pairs()
            .iter()
            .filter(|(k, _)| k.starts_with("c:"))
            .map(|(_, v)| v.parse::<u64>().unwrap())
            .sum()
    };
    assert!(rs::eventually(10, || held_in_redis(&redis) == 2));

    redis.restart_empty();
    assert!(
        rs::eventually(10, || held_in_redis(&redis) == 2),
        "the gateway did not state its slots again"
    );
    let r = post(&gw);
    assert_eq!(r.status, 429, "both slots are still in use: {}", r.text());
    held.store(false, Ordering::Relaxed);
    drop(conns);
    assert!(rs::eventually(10, || post(&gw).status == 200));
    assert_eq!(gw.terminate(), Some(0));
}

#[test]
fn on_store_error_reject_and_admit() {
    let mock = common::start_mock();
    let port = rs::free_port();
    let gw = one_gateway(
        mock.addr,
        &extra(
            json!({"keys": {"k": {"requests_per_minute": 1000}}}),
            store_at(port, "f5:", json!({"on_store_error": "reject"})),
        ),
    );
    let r = post(&gw);
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.header("retry-after"), Some("1"));
    let msg = common::assert_error_shape("/v1/chat/completions", &r);
    assert!(msg.contains("rate-limit store is unavailable"), "{msg}");
    let r = ps::post_with(
        gw.addr,
        "/v1/messages",
        &[("x-api-key", KEY)],
        &ps::messages("claude", "hi", false),
    );
    assert_eq!(r.status, 503);
    common::assert_error_shape("/v1/messages", &r);
    let scrape = gw.scrape();
    assert_eq!(
        ps::metric(
            &scrape,
            "gateway_limits_store_fallback_total{decision=\"reject\"}"
        ),
        Some(2.0)
    );
    assert!(
        !scrape.contains("gateway_rate_limited_total{"),
        "a 503 is no rate limit"
    );
    let lines = ps::log_lines(&rs::access_log_of(&gw), 2);
    assert_eq!(lines[0]["status"], 503);
    assert!(lines[0]["error"].as_str().unwrap().contains("store"));
    assert_eq!(gw.terminate(), Some(0));

    let gw = one_gateway(
        mock.addr,
        &extra(
            json!({"keys": {"k": {"requests_per_minute": 1}}}),
            store_at(port, "f5:", json!({"on_store_error": "admit"})),
        ),
    );
    let statuses: Vec<u16> = (0..5).map(|_| post(&gw).status).collect();
    assert_eq!(statuses, [200; 5]);
    assert_eq!(
        metric(
            &gw,
            "gateway_limits_store_fallback_total{decision=\"admit\"}"
        ),
        5.0
    );
    assert_eq!(gw.terminate(), Some(0));
}

#[test]
fn validate_checks_the_store_section() {
    let dir = common::tmpdir("validate-store");
    let cfg = json!({
        "listen": "127.0.0.1:0",
        "providers": {"o": {"kind": "openai", "base_url": "http://127.0.0.1:9", "api_key_env": "NOPE"}},
        "models": {"gpt": {"provider": "o", "model": "m"}},
        "limits": {"models": {"gpt": {"requests_per_minute": 1}},
                   "store": {"url": "redis://admin:hunter2@10.0.0.1:6379/0", "on_store_error": "local",
                             "replicas": 0, "timeout_ms": 50}}
    });
    let path = dir.join("c.json");
    std::fs::write(&path, serde_json::to_vec(&cfg).unwrap()).unwrap();
    let out = std::process::Command::new(common::gateway_bin())
        .arg("validate")
        .arg("--config")
        .arg(&path)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("$.limits.store.url: must not carry credentials"),
        "{err}"
    );
    assert!(err.contains("$.limits.store.replicas"), "{err}");
    assert!(!err.contains("hunter2"), "the secret is echoed: {err}");
}
