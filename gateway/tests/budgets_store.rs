//! Spend budgets shared across replicas through a real Redis (`limits.store`, the same leases as
//! the rate limits): three gateway processes spend what one does, within 1%, where without the
//! store they spend three budgets; a replica killed mid-stream loses at most its lease.
//!
//! The figures each test prints (`--nocapture`) are the ones in docs/operations.md, `budgets`,
//! "Across replicas".

mod common;
mod posture_support;
mod redis_support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use posture_support as ps;
use redis_support as rs;
use serde_json::{json, Value};

const KEY_ENV: (&str, &str) = ("GW_BUDGET_STORE_KEY", "sk-soak");
const PRICE: (f64, f64) = (2.5, 10.0);

/// Every replica's config: caller key `k` with a budget of `usd` a day on the priced `gpt`, and
/// the store when there is one.
fn extra(usd: f64, store: Option<Value>) -> Value {
    let mut e = json!({
        "keys": [{"id": "k", "key_env": KEY_ENV.0}],
        "budgets": {"keys": {"k": {"usd": usd, "period": "day"}}},
    });
    if let Some(s) = store {
        e["limits"] = json!({ "store": s });
    }
    e
}

/// The replicas, with `gpt` priced.
fn replicas(n: usize, mock: SocketAddr, extra: &Value) -> Vec<ps::Gw> {
    let mut e = extra.clone();
    let mut models = common::config(mock, 1000)["models"].clone();
    models["gpt"]["price"] = json!({"input": PRICE.0, "output": PRICE.1});
    e["models"] = models;
    rs::replicas(n, mock, &e, &[KEY_ENV])
}

fn store(redis: &rs::Redis, prefix: &str) -> Value {
    json!({"url": redis.url(), "prefix": prefix, "replicas": 3, "timeout_ms": 200})
}

/// What key `k` spent on `gpt` over all replicas, in nanodollars (their metrics).
fn spent(gws: &[ps::Gw]) -> u64 {
    gws.iter()
        .filter_map(|g| {
            let m = g.scrape();
            let l = m
                .lines()
                .find(|l| l.starts_with("gateway_spend_usd_total{key=\"k\",model=\"gpt\"} "))?
                .rsplit(' ')
                .next()?
                .to_owned();
            let (whole, frac) = l.split_once('.')?;
            Some(whole.parse::<u64>().ok()? * 1_000_000_000 + frac.parse::<u64>().ok()?)
        })
        .sum()
}

/// `clients` keep-alive clients, client `i` on replica `i % n`, sending `body` for `run`; a
/// refused one pauses 20 ms. Returns (answered 200, refused 429); anything else fails.
fn hammer(gws: &[ps::Gw], clients: usize, run: Duration, body: &[u8]) -> (u64, u64) {
    let deadline = Instant::now() + run;
    let addrs: Vec<SocketAddr> = gws.iter().map(|g| g.addr).collect();
    let threads: Vec<_> = (0..clients)
        .map(|i| {
            let addr = addrs[i % addrs.len()];
            let body = body.to_vec();
            std::thread::spawn(move || {
                let (mut ok, mut refused) = (0, 0);
                let mut c = ps::KeepAlive::connect(addr);
                while Instant::now() < deadline {
                    match c.post_key("/v1/chat/completions", &body) {
                        Some((200, _)) => ok += 1,
                        Some((429, b)) => {
                            assert!(String::from_utf8_lossy(&b).contains("budget exceeded"));
                            refused += 1;
                            std::thread::sleep(Duration::from_millis(20));
                        }
                        other => panic!("unexpected answer {other:?}"),
                    }
                }
                (ok, refused)
            })
        })
        .collect();
    threads
        .into_iter()
        .map(|t| t.join().unwrap())
        .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
}

fn body() -> Vec<u8> {
    serde_json::to_vec(&ps::chat("gpt", &"lorem ipsum dolor sit amet ".repeat(13))).unwrap()
}

fn stop_all(gws: Vec<ps::Gw>) {
    for g in gws {
        assert_eq!(g.terminate(), Some(0), "gateway exit status after SIGTERM");
    }
}

#[test]
fn three_replicas_spend_what_one_does() {
    const USD: f64 = 0.3;
    let budget = (USD * 1e9) as u64;
    let mock = common::start_mock();
    let redis = rs::Redis::start();
    let run = Duration::from_secs(3);
    let mut figures = Vec::new();
    for (n, prefix) in [(1, "one:"), (3, "three:")] {
        let gws = replicas(n, mock.addr, &extra(USD, Some(store(&redis, prefix))));
        let (ok, refused) = hammer(&gws, 3, run, &body());
        let s = spent(&gws);
        println!(
            "{n} replica(s) on the store: {ok} answered, {refused} refused, spent {:.6} $ of a {USD} $ budget = {:.4}",
            s as f64 / 1e9,
            s as f64 / budget as f64
        );
        assert!(refused > 0, "the budget was never spent");
        assert_eq!(
            redis.keys(prefix),
            [format!("{prefix}key:k:spend")],
            "one bucket per budget, beside the rate limits'"
        );
        figures.push(s);
        stop_all(gws);
    }
    let (one, three) = (figures[0] as f64, figures[1] as f64);
    assert!(
        (three / one - 1.0).abs() <= 0.01,
        "three replicas spent {three} nanodollars, one {one}"
    );
    assert!(
        (one / budget as f64 - 1.0).abs() <= 0.01,
        "{one} of {budget}"
    );

    // Without the store each replica holds the whole budget.
    let gws = replicas(3, mock.addr, &extra(USD, None));
    let (ok, _) = hammer(&gws, 6, run + run, &body());
    let s = spent(&gws);
    println!(
        "3 replicas without the store: {ok} answered, spent {:.3} x the budget",
        s as f64 / budget as f64
    );
    assert!(s as f64 > 2.5 * budget as f64);
    stop_all(gws);
}

#[test]
fn a_replica_killed_mid_stream_loses_at_most_its_lease() {
    const USD: f64 = 0.05;
    let budget = (USD * 1e9) as u64;
    let mock = common::start_mock();
    let redis = rs::Redis::start();
    let mut gws = replicas(2, mock.addr, &extra(USD, Some(store(&redis, "kill:"))));
    // Replica A starts a long stream that its client does not read: it stays in flight.
    let stream = serde_json::to_vec(&json!({"model": "gpt", "stream": true, "max_tokens": 16,
        "messages": [{"role": "user", "content": "x [[mock:frames:200000]]"}]}))
    .unwrap();
    let _held = common::send_request(
        gws[0].addr,
        "POST",
        "/v1/chat/completions",
        &[
            ("content-type", "application/json"),
            ("x-api-key", KEY_ENV.1),
        ],
        &stream,
    );
    let bucket = "kill:key:k:spend";
    assert!(
        rs::eventually(10, || !redis.keys("kill:").is_empty()),
        "A never took a lease"
    );
    let left = || -> Option<f64> { redis.cmd(&["HGET", bucket, "t"]).text().parse().ok() };
    std::thread::sleep(Duration::from_millis(300));
    // What Redis has left once A took its lease (microdollars).
    let before = left().unwrap();
    let lease = budget as f64 / 1000.0 - before;
    let mut a = gws.remove(0);
    let _ = a.child.kill();
    let _ = a.child.wait();

    let (ok, refused) = hammer(&gws, 2, Duration::from_secs(3), &body());
    let s = spent(&gws);
    let lost = budget.saturating_sub(s);
    println!(
        "a replica SIGKILLed mid-stream held {lease:.0} microdollars; the other then spent {:.6} $ of {USD} $ ({ok} answered, {refused} refused): {:.0} microdollars lost",
        s as f64 / 1e9,
        lost as f64 / 1000.0
    );
    assert!(refused > 0, "the budget was never spent");
    assert!(
        (lost as f64 / 1000.0) <= lease + budget as f64 / 1e6 * 0.01,
        "lost {lost} nanodollars, more than the lease of {lease} microdollars"
    );
    // A grant is at most a quarter of what is left (`lease::SHARE`).
    assert!(
        lease < budget as f64 / 1000.0 / 2.0,
        "a lease of {lease} microdollars"
    );
    stop_all(gws);
}
