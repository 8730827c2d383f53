//! Limits shared across replicas through a real Redis (`limits.store`): three gateway processes,
//! the trainer mock and a `redis-server` on loopback; 16 or more keep-alive clients spread over
//! the replicas for a few seconds. Each accuracy test also runs without the store, where every
//! replica admits the whole limit (the N x over-admission the store removes), so that it can fail.
//!
//! The figures each test prints (`--nocapture`) are the ones in docs/operations.md, "Shared
//! limits".

mod common;
mod posture_support;
mod redis_support;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use posture_support as ps;
use redis_support as rs;
use serde_json::{json, Value};

const KEY: &str = "sk-soak";
const KEY_ENV: (&str, &str) = ("GW_STORE_TEST_KEY", KEY);

/// What the clients saw.
#[derive(Debug, Default)]
struct Tally {
    ok: u64,
    limited: u64,
    other: Vec<u16>,
    /// `prompt + completion` tokens of the admitted answers.
    tokens: u64,
}

/// `clients` keep-alive clients, client `i` on replica `i % n`, sending `body` (with the caller
/// key) until `run` is over; a client refused with 429 pauses `pause` before its next request.
/// Returns what they saw and how long they ran (from the first request to the last answer).
fn hammer(
    gws: &[SocketAddr],
    clients: usize,
    run: Duration,
    body: &[u8],
    pause: Duration,
) -> (Tally, Duration) {
    let start = Instant::now();
    let deadline = start + run;
    let threads: Vec<_> = (0..clients)
        .map(|i| {
            let addr = gws[i % gws.len()];
            let body = body.to_vec();
            std::thread::spawn(move || {
                let mut t = Tally::default();
                let mut c = ps::KeepAlive::connect(addr);
                while Instant::now() < deadline {
                    match c.post_key("/v1/chat/completions", &body) {
                        Some((200, b)) => {
                            t.ok += 1;
                            let v: Value = serde_json::from_slice(&b).unwrap();
                            t.tokens += v["usage"]["prompt_tokens"].as_u64().unwrap()
                                + v["usage"]["completion_tokens"].as_u64().unwrap();
                        }
                        Some((429, _)) => {
                            t.limited += 1;
                            std::thread::sleep(pause);
                        }
                        Some((s, _)) => t.other.push(s),
                        None => {
                            t.other.push(0);
                            c = ps::KeepAlive::connect(addr);
                        }
                    }
                }
                t
            })
        })
        .collect();
    let mut all = Tally::default();
    for th in threads {
        let t = th.join().unwrap();
        all.ok += t.ok;
        all.limited += t.limited;
        all.tokens += t.tokens;
        all.other.extend(t.other);
    }
    (all, start.elapsed())
}

fn chat_body(text: &str) -> Vec<u8> {
    serde_json::to_vec(&ps::chat("gpt", text)).unwrap()
}

/// The config of every replica: a caller key `k`, the given `limits`.
fn extra(limits: Value) -> Value {
    json!({
        "keys": [{"id": "k", "key_env": KEY_ENV.0}],
        "limits": limits,
    })
}

fn store(redis: &rs::Redis, prefix: &str) -> Value {
    json!({"url": redis.url(), "prefix": prefix, "replicas": 3, "timeout_ms": 200})
}

fn addrs(gws: &[ps::Gw]) -> Vec<SocketAddr> {
    gws.iter().map(|g| g.addr).collect()
}

fn stop_all(gws: Vec<ps::Gw>) {
    for g in gws {
        assert_eq!(g.terminate(), Some(0), "gateway exit status after SIGTERM");
    }
}

/// Admissions that waited for Redis, summed over the replicas, and the requests they served.
fn waits(gws: &[ps::Gw]) -> (f64, f64) {
    let mut w = 0.0;
    let mut n = 0.0;
    for g in gws {
        let s = g.scrape();
        w += ps::metric(&s, "gateway_limits_store_waits_total").unwrap_or(0.0);
        for l in s
            .lines()
            .filter(|l| l.starts_with("gateway_requests_total{"))
        {
            n += l.rsplit(' ').next().unwrap().parse::<f64>().unwrap();
        }
    }
    (w, n)
}

/// The same load against 3 replicas sharing a store and against 3 replicas on their own.
/// `charged` reads what the limit counts from the clients' tally; the budget is the limit plus
/// what refills while the clients run (the bucket starts full). With the store the charge must
/// be within 1% of the budget; without it about 3 times the budget.
fn shared_then_local(
    what: &str,
    policies: Value,
    prefix: &str,
    limit: f64,
    body: &[u8],
    charged: fn(&Tally) -> u64,
) {
    let mock = common::start_mock();
    let redis = rs::Redis::start();
    let run = Duration::from_secs(4);
    let pause = Duration::from_millis(20);

    let shared = rs::limits_with_store(policies.clone(), store(&redis, prefix));
    let gws = rs::replicas(3, mock.addr, &extra(shared), &[KEY_ENV]);
    let (t, took) = hammer(&addrs(&gws), 16, run, body, pause);
    let budget = limit + limit / 60.0 * took.as_secs_f64();
    let ratio = charged(&t) as f64 / budget;
    let (w, n) = waits(&gws);
    println!(
        "shared {what}: {} charged in {} admitted / budget {budget:.1} = {ratio:.4} ({} refused, {:.2} s, {:.1}% of requests waited for Redis)",
        charged(&t),
        t.ok,
        t.limited,
        took.as_secs_f64(),
        100.0 * w / n
    );
    assert!(t.other.is_empty(), "unexpected answers: {:?}", t.other);
    assert!(t.limited > 0, "the limit was never reached");
    assert!(
        (ratio - 1.0).abs() <= 0.01,
        "{what}: {} charged against a budget of {budget:.1} (ratio {ratio:.4})",
        charged(&t)
    );
    assert_eq!(
        redis.keys(prefix),
        [format!("{prefix}key:k:{what}")],
        "one bucket, named by prefix, scope, key id and kind"
    );
    stop_all(gws);

    // Local only: each replica admits the whole limit.
    let gws = rs::replicas(3, mock.addr, &extra(policies), &[KEY_ENV]);
    let (t, took) = hammer(&addrs(&gws), 16, run, body, pause);
    let ratio = charged(&t) as f64 / (limit + limit / 60.0 * took.as_secs_f64());
    println!(
        "local {what}: {} charged = {ratio:.3} x the budget",
        charged(&t)
    );
    assert!(
        ratio > 2.5,
        "without the store 3 replicas admit ~3x: {ratio:.3}"
    );
    stop_all(gws);
}

#[test]
fn requests_per_minute_across_three_replicas() {
    shared_then_local(
        "requests",
        json!({"keys": {"k": {"requests_per_minute": 600}}}),
        "rpm:",
        600.0,
        &chat_body("hi"),
        |t| t.ok,
    );
}

#[test]
fn tokens_per_minute_across_three_replicas_with_real_usage() {
    // About 110 tokens a request: ~100 in (body bytes / 4), 8 out.
    shared_then_local(
        "tokens",
        json!({"keys": {"k": {"tokens_per_minute": 200_000}}}),
        "tpm:",
        200_000.0,
        &chat_body(&"lorem ipsum dolor sit amet ".repeat(13)),
        |t| t.tokens,
    );
}

/// An upstream that holds every request `hold` before answering, and counts how many it holds
/// at once: what max_concurrent must bound.
struct Counting {
    up: common::RawUpstream,
    now: Arc<AtomicUsize>,
    peak: Arc<AtomicUsize>,
}

fn counting_upstream(hold: Duration) -> Counting {
    let now = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let (n, p) = (now.clone(), peak.clone());
    let up = common::raw_upstream(move |_, body, s| {
        let cur = n.fetch_add(1, Ordering::SeqCst) + 1;
        p.fetch_max(cur, Ordering::SeqCst);
        let hold_this = !String::from_utf8_lossy(body).contains("quick");
        if hold_this {
            std::thread::sleep(hold);
        }
        n.fetch_sub(1, Ordering::SeqCst);
        common::write_json(s, 200, &rs::chat_completion());
    });
    Counting { up, now, peak }
}

#[test]
fn max_concurrent_across_three_replicas() {
    const MAX: usize = 6;
    let hold = Duration::from_millis(100);
    let redis = rs::Redis::start();
    let policies = json!({"models": {"gpt": {"max_concurrent": MAX}}});
    let run = Duration::from_secs(3);
    let body = chat_body("hi");

    let up = counting_upstream(hold);
    let gws = rs::replicas(
        3,
        up.up.addr,
        &extra(rs::limits_with_store(
            policies.clone(),
            store(&redis, "conc:"),
        )),
        &[KEY_ENV],
    );
    let (t, took) = hammer(&addrs(&gws), 18, run, &body, Duration::from_millis(5));
    let peak = up.peak.load(Ordering::SeqCst);
    // At most MAX requests at a time, each held `hold`: the most that could be admitted.
    let most = MAX as f64 * took.as_secs_f64() / hold.as_secs_f64();
    let (w, n) = waits(&gws);
    println!(
        "shared max_concurrent: peak {peak} / {MAX}; admitted {} of at most {most:.0} ({:.3}); {} refused; {:.1}% waited",
        t.ok,
        t.ok as f64 / most,
        t.limited,
        100.0 * w / n
    );
    assert!(t.other.is_empty(), "unexpected answers: {:?}", t.other);
    assert!(
        peak <= MAX,
        "{peak} requests at once across replicas, max {MAX}"
    );
    assert!(peak >= MAX - 1, "the slots were not used: peak {peak}");
    assert!(t.limited > 0, "the limit was never reached");
    stop_all(gws);
    let left: Vec<_> = redis
        .keys("conc:")
        .iter()
        .map(|k| redis.cmd(&["HGETALL", k]))
        .collect();
    assert!(left.is_empty(), "slots given back at exit: {left:?}");

    let up = counting_upstream(hold);
    let gws = rs::replicas(3, up.up.addr, &extra(policies), &[KEY_ENV]);
    let (_, _) = hammer(&addrs(&gws), 18, run, &body, Duration::from_millis(5));
    let peak = up.peak.load(Ordering::SeqCst);
    println!("local max_concurrent: peak {peak} / {MAX}");
    assert!(
        peak > 2 * MAX,
        "without the store 3 replicas hold ~3x: {peak}"
    );
    stop_all(gws);
}

#[test]
fn a_killed_replica_gives_its_slots_back_within_the_ttl() {
    const TTL_MS: u64 = 2000;
    let redis = rs::Redis::start();
    let up = counting_upstream(Duration::from_secs(30));
    let mut st = store(&redis, "ttl:");
    st["slot_ttl_ms"] = json!(TTL_MS);
    let limits = rs::limits_with_store(json!({"models": {"gpt": {"max_concurrent": 3}}}), st);
    let mut gws = rs::replicas(2, up.up.addr, &extra(limits), &[KEY_ENV]);
    let (a, b) = (gws[0].addr, gws[1].addr);

    // Replica A holds all three slots with requests the upstream keeps for 30 s.
    let hold = serde_json::to_vec(&ps::chat("gpt", "hold")).unwrap();
    let _held: Vec<_> = (0..3)
        .map(|_| {
            common::send_request(
                a,
                "POST",
                "/v1/chat/completions",
                &[("content-type", "application/json"), ("x-api-key", KEY)],
                &hold,
            )
        })
        .collect();
    assert!(rs::eventually(10, || up.now.load(Ordering::SeqCst) == 3));
    let quick = |addr| {
        ps::post_with(
            addr,
            "/v1/chat/completions",
            &[("x-api-key", KEY)],
            &ps::chat("gpt", "quick"),
        )
    };
    let r = quick(b);
    assert_eq!(r.status, 429, "{}", r.text());
    assert!(r.text().contains("concurrent"), "{}", r.text());
    // A renews them while it lives: still held well past one TTL.
    std::thread::sleep(Duration::from_millis(TTL_MS * 3 / 2));
    assert_eq!(quick(b).status, 429, "a live replica's slots expired");

    // SIGKILL: A never gives its slots back; they expire with its heartbeats.
    let killed = Instant::now();
    let mut a_gw = gws.remove(0);
    let _ = a_gw.child.kill();
    let _ = a_gw.child.wait();
    let mut back = None;
    while killed.elapsed() < Duration::from_millis(TTL_MS * 3) {
        if quick(b).status == 200 {
            back = Some(killed.elapsed());
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let back = back.expect("the killed replica's slots never came back");
    println!(
        "slots of a SIGKILLed replica back after {:.2} s (slot_ttl_ms {TTL_MS})",
        back.as_secs_f64()
    );
    assert!(
        back <= Duration::from_millis(TTL_MS + 500),
        "back after {back:?}, TTL {TTL_MS} ms"
    );
    assert!(
        back >= Duration::from_millis(TTL_MS / 2),
        "back after {back:?}: sooner than the TTL allows, so not the TTL"
    );
    stop_all(gws);
}

#[test]
fn only_key_ids_and_aliases_reach_redis_and_credentials_come_from_the_environment() {
    let mock = common::start_mock();
    let redis = rs::Redis::start_with(rs::free_port(), &["--requirepass", "redis-pw-SECRET"]);
    let monitor = redis.monitor();
    let mut st = store(&redis, "sec:");
    st["password_env"] = json!("GW_STORE_TEST_REDIS_PW");
    let limits = rs::limits_with_store(
        json!({"keys": {"k": {"requests_per_minute": 1000, "tokens_per_minute": 100000, "max_concurrent": 8}},
               "models": {"claude": {"requests_per_minute": 1000}}}),
        st,
    );
    let gws = rs::replicas(
        1,
        mock.addr,
        &extra(limits),
        &[KEY_ENV, ("GW_STORE_TEST_REDIS_PW", "redis-pw-SECRET")],
    );
    let gw = &gws[0];
    let mut log = rs::Log::new(gw);
    assert!(log.has(gw, "limits store: up"), "{:?}", log.lines);
    for path in ["/v1/chat/completions", "/v1/messages"] {
        let body = if path == "/v1/messages" {
            ps::messages("claude", "hi", false)
        } else {
            ps::chat("gpt", "hi")
        };
        let r = ps::post_with(gw.addr, path, &[("x-api-key", KEY)], &body);
        assert_eq!(r.status, 200, "{}", r.text());
    }
    assert!(rs::eventually(5, || redis
        .keys("sec:")
        .contains(&"sec:model:claude:requests".to_string())));
    let seen = monitor.lines();
    assert!(
        seen.iter().any(|l| l.contains("sec:key:k:requests")),
        "{seen:#?}"
    );
    for l in &seen {
        assert!(!l.contains(KEY), "the caller's key reached Redis: {l}");
        assert!(
            !l.contains("sk-upstream"),
            "an upstream key reached Redis: {l}"
        );
    }
    for k in redis.keys("") {
        assert!(k.starts_with("sec:"), "a key outside the prefix: {k}");
    }
    // The password is in no log line and no metric.
    let scrape = gw.scrape();
    assert!(!scrape.contains("redis-pw"));
    assert!(log.update(gw).iter().all(|l| !l.contains("redis-pw")));
    stop_all(gws);
}

#[test]
fn rediss_with_a_ca_file_and_refused_without_it() {
    let fx = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tls");
    let f = |n: &str| fx.join(n).to_string_lossy().into_owned();
    let (cert, key, ca) = (f("upstream.pem"), f("upstream.key"), f("ca.pem"));
    let port = rs::free_port();
    let _redis = rs::Redis::start_with(
        port,
        &[
            "--tls-port",
            "--tls-cert-file",
            &cert,
            "--tls-key-file",
            &key,
            "--tls-ca-cert-file",
            &ca,
            "--tls-auth-clients",
            "no",
        ],
    );
    let mock = common::start_mock();
    let url = format!("rediss://127.0.0.1:{port}/0");
    let policies = json!({"keys": {"k": {"requests_per_minute": 3}}});
    let with_ca = json!({"url": url, "prefix": "tls:", "ca_file": ca});
    let gws = rs::replicas(
        1,
        mock.addr,
        &extra(rs::limits_with_store(policies.clone(), with_ca)),
        &[KEY_ENV],
    );
    let mut log = rs::Log::new(&gws[0]);
    assert!(
        log.has(&gws[0], "limits store: up: rediss://"),
        "{:?}",
        log.lines
    );
    let statuses: Vec<u16> = (0..4)
        .map(|_| {
            ps::post_with(
                gws[0].addr,
                "/v1/chat/completions",
                &[("x-api-key", KEY)],
                &ps::chat("gpt", "hi"),
            )
            .status
        })
        .collect();
    assert_eq!(statuses, [200, 200, 200, 429]);
    stop_all(gws);

    // The test CA is not among the built-in roots: the store is down, named with the cause.
    let without = json!({"url": url, "prefix": "tls2:"});
    let gws = rs::replicas(
        1,
        mock.addr,
        &extra(rs::limits_with_store(policies, without)),
        &[KEY_ENV],
    );
    let mut log = rs::Log::new(&gws[0]);
    assert!(
        log.has(&gws[0], "limits store: down at start"),
        "{:?}",
        log.lines
    );
    assert!(
        log.lines
            .iter()
            .any(|l| l.to_lowercase().contains("certificate")),
        "{:?}",
        log.lines
    );
    stop_all(gws);
}

#[test]
fn a_reload_keeps_the_shared_counters_and_the_store() {
    let mock = common::start_mock();
    let redis = rs::Redis::start();
    let limits = rs::limits_with_store(
        json!({"keys": {"k": {"requests_per_minute": 5}}}),
        store(&redis, "reload:"),
    );
    let gws = rs::replicas(1, mock.addr, &extra(limits), &[KEY_ENV]);
    let gw = &gws[0];
    let post = || {
        ps::post_with(
            gw.addr,
            "/v1/chat/completions",
            &[("x-api-key", KEY)],
            &ps::chat("gpt", "hi"),
        )
        .status
    };
    assert_eq!([post(), post(), post()], [200; 3]);
    let path = gw.dir.join("config.json");
    let mut cfg: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    std::fs::write(&path, serde_json::to_vec(&cfg).unwrap()).unwrap();
    let mut log = rs::Log::new(gw);
    gw.signal_hup();
    assert!(rs::eventually(5, || log.has(gw, "config reloaded")));
    // The bucket is in Redis: a reload does not refill it.
    assert_eq!([post(), post(), post()], [200, 200, 429]);

    cfg["limits"]["store"]["prefix"] = json!("other:");
    std::fs::write(&path, serde_json::to_vec(&cfg).unwrap()).unwrap();
    gw.signal_hup();
    assert!(rs::eventually(5, || log
        .has(gw, "$.limits.store: startup-only; the running store")));
    assert_eq!(post(), 429, "still the running store and its bucket");
    assert!(redis.keys("other:").is_empty());
    stop_all(gws);
}
