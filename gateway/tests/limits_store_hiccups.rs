//! The shared limits through store hiccups, against a real `redis-server` (issue 45): a Redis
//! paused (SIGSTOP) under load costs at most what this replica's part of the limit refills while
//! it lasts, never a fresh bucket, for requests, tokens, a spend budget and concurrency; flapping
//! adds up to no more than the outages' length; and whatever the fallback admitted is paid to
//! the shared bucket afterwards, so that Redis' own ledger matches what the clients were served.
//!
//! Each test sets the bucket in Redis to a known state at a known Redis time, so that what it
//! holds at the end tells exactly what the gateway took: no wall-clock threshold but the outage
//! windows, whose bounds are counted in units of refill. `bench/limits-hiccups` measures the
//! same under three replicas and CPU contention for 20 s (docs/operations.md, "Shared limits").

mod common;
mod posture_support;
mod redis_support;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use posture_support as ps;
use redis_support as rs;
use serde_json::{json, Value};

const KEY_ENV: (&str, &str) = ("GW_HICCUP_TEST_KEY", "sk-soak");
const PRICE: (f64, f64) = (2.5, 10.0);
const TIMEOUT_MS: u64 = 50;

/// Redis' clock, microseconds (the scripts' `TIME`).
fn redis_now_us(redis: &rs::Redis) -> u64 {
    let t = redis.cmd(&["TIME"]).items();
    t[0].text().parse::<u64>().unwrap() * 1_000_000 + t[1].text().parse::<u64>().unwrap()
}

/// The bucket `key` as the script keeps it: (units left, when, µs).
fn bucket(redis: &rs::Redis, key: &str) -> (f64, f64) {
    let v = redis.cmd(&["HMGET", key, "t", "ts"]).items();
    (v[0].text().parse().unwrap(), v[1].text().parse().unwrap())
}

/// What the test serves: one policy of one kind on key `k`, the limit per window.
struct Case {
    kind: &'static str,
    limit: f64,
    window_us: f64,
    /// Units in the bucket when the test starts (a spend budget refills too slowly to start
    /// empty).
    start: f64,
    /// The units one answer counts, from its usage.
    units: fn(&Value) -> f64,
    /// Units a pause may admit beyond its refill: what the lease held when it began (a unit or
    /// two near the limit) and, for tokens and spend, the request the fallback admitted last,
    /// charged in full after it (as the local limiter's tokens overshoot).
    slack: f64,
}

impl Case {
    fn rate_per_us(&self) -> f64 {
        self.limit / self.window_us
    }
    fn part_interval(&self) -> Duration {
        Duration::from_secs_f64(3.0 * self.window_us / 1e6 / self.limit)
    }
}

/// One gateway sharing `policies` (or `budgets`) through the store, as one of three replicas.
fn gateway(mock: SocketAddr, redis: &rs::Redis, prefix: &str, section: &str, p: Value) -> ps::Gw {
    let store = json!({"url": redis.url(), "prefix": prefix, "replicas": 3,
                       "timeout_ms": TIMEOUT_MS});
    let mut e = json!({"keys": [{"id": "k", "key_env": KEY_ENV.0}], "limits": {"store": store}});
    if section == "limits" {
        e["limits"]["keys"] = json!({"k": p});
    } else {
        e["budgets"] = json!({"keys": {"k": p}});
    }
    let mut models = common::config(mock, 1000)["models"].clone();
    models["gpt"]["price"] = json!({"input": PRICE.0, "output": PRICE.1});
    e["models"] = models;
    rs::replicas(1, mock, &e, &[KEY_ENV]).remove(0)
}

/// Answers as the clients saw them: when, the status, and the usage of a 200.
type Answers = Arc<Mutex<Vec<(Instant, u16, Value)>>>;

/// `clients` keep-alive clients posting until stopped; a refused one pauses 20 ms.
fn load(
    addr: SocketAddr,
    clients: usize,
    stop: &Arc<AtomicBool>,
) -> (Answers, Vec<std::thread::JoinHandle<()>>) {
    let answers: Answers = Arc::default();
    let body =
        serde_json::to_vec(&ps::chat("gpt", &"lorem ipsum dolor sit amet ".repeat(13))).unwrap();
    let threads = (0..clients)
        .map(|_| {
            let (stop, answers, body) = (stop.clone(), answers.clone(), body.clone());
            std::thread::spawn(move || {
                let mut c = ps::KeepAlive::connect(addr);
                while !stop.load(Ordering::Relaxed) {
                    let (status, usage) = match c.post_key("/v1/chat/completions", &body) {
                        Some((200, b)) => {
                            let v: Value = serde_json::from_slice(&b).unwrap();
                            (200, v["usage"].clone())
                        }
                        Some((s, _)) => (s, Value::Null),
                        None => (0, Value::Null),
                    };
                    answers
                        .lock()
                        .unwrap()
                        .push((Instant::now(), status, usage));
                    if status != 200 {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                }
            })
        })
        .collect();
    (answers, threads)
}

/// Under load: the store paused once for 800 ms, then four times for 400 ms with 300 ms
/// between. Each pause admits at most what the lease held (a unit or two near the limit) and
/// what this replica's third of the limit refilled from `timeout_ms` before the pause to its
/// end; before issue 45 the first pause alone admitted a full third of the limit. When every
/// lease went back, Redis' bucket has been charged exactly what the clients were served.
fn pauses_cost_their_length_and_are_paid_back(case: Case, section: &str, policy: Value) {
    let mock = common::start_mock();
    let redis = rs::Redis::start();
    let prefix = format!("hic-{}:", case.kind);
    let kind_key = if section == "budgets" {
        "spend"
    } else {
        case.kind
    };
    let key = format!("{prefix}key:k:{kind_key}");
    let gw = gateway(mock.addr, &redis, &prefix, section, policy);
    let set_at = redis_now_us(&redis);
    redis.cmd(&[
        "HSET",
        &key,
        "t",
        &case.start.to_string(),
        "ts",
        &set_at.to_string(),
    ]);

    let stop = Arc::new(AtomicBool::new(false));
    let (answers, threads) = load(gw.addr, 4, &stop);
    std::thread::sleep(Duration::from_millis(700));
    let mut windows = Vec::new();
    for (i, len) in [800u64, 400, 400, 400, 400].into_iter().enumerate() {
        let from = Instant::now();
        redis.pause();
        std::thread::sleep(Duration::from_millis(len));
        redis.resume();
        windows.push((from, Instant::now()));
        std::thread::sleep(Duration::from_millis(if i == 0 { 700 } else { 300 }));
    }
    std::thread::sleep(Duration::from_millis(400));
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    // Idle leases go back within two maintenance ticks; what was owed went with the first.
    std::thread::sleep(Duration::from_millis(2500));
    let (left, ts) = bucket(&redis, &key);
    let answers = answers.lock().unwrap();
    let served: f64 = answers
        .iter()
        .filter(|a| a.1 == 200)
        .map(|a| (case.units)(&a.2))
        .sum();
    let paid = case.start + case.rate_per_us() * (ts - set_at as f64) - left;
    let part = case.part_interval();
    let mut report = Vec::new();
    for (from, to) in &windows {
        let during: Vec<_> = answers
            .iter()
            .filter(|a| a.1 == 200 && a.0 >= *from && a.0 <= *to)
            .collect();
        let units: f64 = during.iter().map(|a| (case.units)(&a.2)).sum();
        let outage = *to - *from + Duration::from_millis(TIMEOUT_MS);
        let refill = (outage.as_secs_f64() / part.as_secs_f64()).floor();
        report.push(format!(
            "{} admitted ({units} units) in {:?}, refill bound {refill} units",
            during.len(),
            *to - *from
        ));
        assert!(
            units <= refill + case.slack,
            "{}: {units} units admitted while Redis was paused for {:?}, bound {refill} + {}",
            case.kind,
            *to - *from,
            case.slack
        );
    }
    println!(
        "{}: served {served} units, Redis was paid {paid:.1} (left {left:.1}); pauses: {report:#?}",
        case.kind
    );
    assert!(
        answers.iter().all(|a| a.1 == 200 || a.1 == 429),
        "only 200 and 429"
    );
    assert!(
        answers.iter().any(|a| a.1 == 429),
        "the limit was never reached"
    );
    assert!(
        (paid - served).abs() <= 1.0 + served * 0.002,
        "{}: the clients were served {served} units, Redis was paid {paid:.1}",
        case.kind
    );
    // A pause is noticed when a call goes out during it (a lease that Redis said is empty until
    // later asks nothing).
    let downs = ps::metric(
        &gw.scrape(),
        "gateway_limits_store_transitions_total{state=\"down\"}",
    );
    println!("{}: the store went down {downs:?} times", case.kind);
    assert!(downs.is_some_and(|n| n >= 1.0), "no pause was noticed");
    // The round trips the gateway saw, the late answers (applied after the store went down)
    // among them.
    let m = gw.scrape();
    let rtt = |s: &str| ps::metric(&m, s).unwrap_or(-1.0);
    let count = rtt("gateway_limits_store_round_trip_seconds_count");
    assert!(count >= 1.0, "{m}");
    assert_eq!(
        rtt("gateway_limits_store_round_trip_seconds_bucket{le=\"+Inf\"}"),
        count
    );
    println!(
        "{}: {count} round trips, longest {} s, {} answered late",
        case.kind,
        rtt("gateway_limits_store_round_trip_max_seconds"),
        rtt("gateway_limits_store_late_answers_total")
    );
    assert_eq!(gw.terminate(), Some(0));
}

#[test]
fn requests_per_minute_through_pauses() {
    // 600 a minute: 10 a second shared, one every 300 ms for this replica's part.
    pauses_cost_their_length_and_are_paid_back(
        Case {
            kind: "requests",
            limit: 600.0,
            window_us: 60e6,
            start: 0.0,
            units: |_| 1.0,
            slack: 2.0,
        },
        "limits",
        json!({"requests_per_minute": 600}),
    );
}

#[test]
fn tokens_per_minute_through_pauses() {
    // About 110 tokens a request; 60,000 a minute: ~9 requests a second shared.
    pauses_cost_their_length_and_are_paid_back(
        Case {
            kind: "tokens",
            limit: 60_000.0,
            window_us: 60e6,
            start: 0.0,
            units: |u| u["total_tokens"].as_f64().unwrap(),
            slack: 3.0 * 120.0,
        },
        "limits",
        json!({"tokens_per_minute": 60_000}),
    );
}

#[test]
fn a_spend_budget_through_pauses() {
    // 100 $ a day refills 1157 µ$ a second, about four requests of ~290 µ$; this replica's part
    // a third of that. 3000 µ$ of it are left when the test starts.
    pauses_cost_their_length_and_are_paid_back(
        Case {
            kind: "spend",
            limit: 100e6,
            window_us: 86_400e6,
            start: 3000.0,
            units: |u| {
                let p = u["prompt_tokens"].as_f64().unwrap();
                let c = u["completion_tokens"].as_f64().unwrap();
                (p * PRICE.0 + c * PRICE.1).ceil()
            },
            slack: 3.0 * 300.0,
        },
        "budgets",
        json!({"usd": 100, "period": "day"}),
    );
}

/// `scripts::BUCKET` with the owed units of replicas that could not reach Redis: the bucket (100
/// a 100 ms window, one unit a millisecond) is emptied, then 300 ms later three replicas each
/// owe 100 as of then. Charged as of the outage, the three hundred were what refilled in it:
/// the bucket is empty again, not 200 in debt, whichever replica answers first.
#[test]
fn owed_units_are_paid_from_what_refilled_during_the_outage() {
    let redis = rs::Redis::start();
    let script = gateway::admission::limits::scripts::BUCKET;
    let eval = |args: &[&str]| -> Vec<i64> {
        let mut a = vec!["EVAL", script, "1", "owed:b"];
        a.extend_from_slice(args);
        redis
            .cmd(&a)
            .items()
            .iter()
            .map(|r| r.text().parse().unwrap())
            .collect()
    };
    // limit, delta, want, share, window_us[, owed, owed_age_us]
    assert_eq!(eval(&["100", "0", "100", "1", "100000"])[0], 100);
    let (_, emptied) = bucket(&redis, "owed:b");
    std::thread::sleep(Duration::from_millis(300));
    for _ in 0..3 {
        let age = (redis_now_us(&redis) as f64 - emptied).to_string();
        eval(&["100", "0", "0", "4", "100000", "100", &age]);
    }
    let (left, at) = bucket(&redis, "owed:b");
    // What refilled after the outage's 300 ms: the few milliseconds the calls took.
    let after_ms = (at - emptied) / 1000.0 - 300.0;
    println!("left {left:.1} units, {after_ms:.1} ms after the outage");
    assert!(
        left >= -1.0 && left <= after_ms + 1.0,
        "left {left} (charged at the answer, capped at the limit: -200)"
    );
    // A gateway from before the owed arguments still calls it with five.
    std::thread::sleep(Duration::from_millis(20));
    assert!(eval(&["100", "0", "5", "1", "100000"])[0] >= 1);
}

/// An upstream that holds a request whose body says "hold" until `release` is set.
fn holding_upstream(release: Arc<AtomicBool>) -> common::RawUpstream {
    common::raw_upstream(move |_, body, s| {
        if String::from_utf8_lossy(body).contains("hold") {
            while !release.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        common::write_json(s, 200, &rs::chat_completion());
    })
}

/// `max_concurrent: 6` over 3 replicas: a part of 2. This replica holds all six slots from its
/// lease when Redis stops: its fallback adds none, where it added its part (two more in flight)
/// before issue 45.
#[test]
fn fallback_slots_count_the_ones_held_from_the_lease() {
    let redis = rs::Redis::start();
    let release = Arc::new(AtomicBool::new(false));
    let up = holding_upstream(release.clone());
    let store = json!({"url": redis.url(), "prefix": "slots:", "replicas": 3,
                       "timeout_ms": TIMEOUT_MS});
    let e = json!({"keys": [{"id": "k", "key_env": KEY_ENV.0}],
                   "limits": {"models": {"gpt": {"max_concurrent": 6}}, "store": store}});
    let gw = rs::replicas(1, up.addr, &e, &[KEY_ENV]).remove(0);
    let hold = serde_json::to_vec(&ps::chat("gpt", "hold")).unwrap();
    let held: Vec<_> = (0..6)
        .map(|_| {
            common::send_request(
                gw.addr,
                "POST",
                "/v1/chat/completions",
                &[
                    ("content-type", "application/json"),
                    ("x-api-key", KEY_ENV.1),
                ],
                &hold,
            )
        })
        .collect();
    let in_redis = || -> u64 {
        redis
            .cmd(&["HGETALL", "slots:model:gpt:concurrency"])
            .pairs()
            .iter()
            .filter(|(k, _)| k.starts_with("c:"))
            .map(|(_, v)| v.parse::<u64>().unwrap())
            .sum()
    };
    assert!(rs::eventually(10, || in_redis() == 6));
    let quick = || {
        ps::post_with(
            gw.addr,
            "/v1/chat/completions",
            &[("x-api-key", KEY_ENV.1)],
            &ps::chat("gpt", "quick"),
        )
    };
    redis.pause();
    let during: Vec<_> = (0..3).map(|_| quick()).collect();
    redis.resume();
    for r in &during {
        assert_eq!(r.status, 429, "a slot beyond the six held: {}", r.text());
        assert!(r.text().contains("concurren"), "{}", r.text());
    }
    assert!(ps::metric(
        &gw.scrape(),
        "gateway_limits_store_fallback_total{decision=\"local\"}"
    )
    .is_some_and(|n| n >= 1.0));
    release.store(true, Ordering::Relaxed);
    drop(held);
    assert!(rs::eventually(10, || quick().status == 200));
    assert_eq!(gw.terminate(), Some(0));
}

/// The documented exception: Redis restarted empty starts the bucket full again. Over the run
/// the clients are served at most what the bucket refilled, one more limit, and the units the
/// lease held: the fallback's admissions while Redis was away are charged to the new bucket.
#[test]
fn redis_restarted_empty_grants_one_fresh_limit_at_most() {
    let mock = common::start_mock();
    let mut redis = rs::Redis::start();
    let key = "restart:key:k:requests";
    let gw = gateway(
        mock.addr,
        &redis,
        "restart:",
        "limits",
        json!({"requests_per_minute": 600}),
    );
    redis.cmd(&[
        "HSET",
        key,
        "t",
        "0",
        "ts",
        &redis_now_us(&redis).to_string(),
    ]);
    let started = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let (answers, threads) = load(gw.addr, 4, &stop);
    std::thread::sleep(Duration::from_millis(500));
    redis.restart_empty();
    std::thread::sleep(Duration::from_millis(1500));
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    let served = answers
        .lock()
        .unwrap()
        .iter()
        .filter(|a| a.1 == 200)
        .count() as f64;
    let refilled = 10.0 * started.elapsed().as_secs_f64();
    println!(
        "served {served} in {:?}: refill {refilled:.1} + one limit (600)",
        started.elapsed()
    );
    assert!(served <= refilled + 600.0 + 5.0, "served {served}");
    assert_eq!(gw.terminate(), Some(0));
}
