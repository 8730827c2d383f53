//! The local limiter's behaviour through [`Limits`], on the tests' clock.

use super::*;
use crate::admission::limits::clock::WINDOW_NS;
use crate::admission::limits::limiter::Local;
use crate::admission::limits::response::fmt_duration;
use crate::checker::ConfigError;
use http::HeaderMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

const S: u64 = 1_000_000_000;

fn limits(json: &str, keys: &[&str], models: &[&str]) -> (Limits, Vec<ConfigError>) {
    let v: Value = serde_json::from_str(json).unwrap();
    let keys: Vec<String> = keys.iter().map(|s| s.to_string()).collect();
    let mut c = Checker::default();
    let l = Limits::from_config(&mut c, Some(&v), &keys, models, StoreSource::CheckOnly);
    (l, c.errors)
}

#[test]
fn requests_per_minute_burst_then_refill() {
    let (l, e) = limits(r#"{"keys":{"a":{"requests_per_minute":60}}}"#, &["a"], &[]);
    assert!(e.is_empty());
    let t0 = 100 * S;
    for i in 0..60 {
        assert!(l.admit_at(t0, Some("a"), "m", 0).is_ok(), "request {i}");
    }
    let r = l.admit_at(t0, Some("a"), "m", 0).unwrap_err();
    assert_eq!(r.kind, Kind::Requests);
    assert_eq!(r.retry_after_secs(), 1);
    // One per second refills.
    assert!(l.admit_at(t0 + S, Some("a"), "m", 0).is_ok());
    assert!(l.admit_at(t0 + S, Some("a"), "m", 0).is_err());
    // Other keys and the open path are not affected.
    assert!(l.admit_at(t0, Some("b"), "m", 0).is_ok());
    assert!(l.admit_at(t0, None, "m", 0).is_ok());
}

#[test]
fn tokens_checked_before_charged_after() {
    let (l, _) = limits(
        r#"{"models":{"m":{"tokens_per_minute":1000}}}"#,
        &[],
        &["m"],
    );
    let t0 = 100 * S;
    let mut a = l.admit_at(t0, None, "m", 100).unwrap();
    // Real usage far above the estimate: the bucket goes into debt (overshoot).
    a.settle(5000);
    let r = l.admit_at(t0, None, "m", 10).unwrap_err();
    assert_eq!(r.kind, Kind::Tokens);
    // Debt of 4000 tokens at 1000/min: about 4 minutes until any budget returns.
    assert!(
        r.retry_after >= Duration::from_secs(239),
        "{:?}",
        r.retry_after
    );
    assert!(l.admit_at(t0 + 241 * S, None, "m", 10).is_ok());
}

#[test]
fn settle_refunds_overestimate() {
    let (l, _) = limits(
        r#"{"models":{"m":{"tokens_per_minute":1000}}}"#,
        &[],
        &["m"],
    );
    let t0 = 100 * S;
    let mut a = l.admit_at(t0, None, "m", 900).unwrap();
    a.settle(100);
    let st = &l.models["m"];
    let rem = st.local.tokens.as_ref().unwrap().remaining(t0);
    assert!((899..=900).contains(&rem), "{rem}");
}

#[test]
fn concurrency_guard_releases_on_drop() {
    let (l, _) = limits(
        r#"{"default_key":{"max_concurrent":2},"models":{"m":{"requests_per_minute":1000}}}"#,
        &["a", "b"],
        &["m"],
    );
    let a1 = l.admit_at(now_ns(), Some("a"), "m", 0).unwrap();
    let a2 = l.admit_at(now_ns(), Some("a"), "m", 0).unwrap();
    let r = l.admit_at(now_ns(), Some("a"), "m", 0).unwrap_err();
    assert_eq!(r.kind, Kind::Concurrency);
    assert_eq!(r.scope, Scope::Key);
    // Key b has its own slots.
    let _b = l.admit_at(now_ns(), Some("b"), "m", 0).unwrap();
    drop(a1);
    let a3 = l.admit_at(now_ns(), Some("a"), "m", 0).unwrap();
    drop((a2, a3));
    assert_eq!(l.keys["a"].local.inflight.load(Ordering::Relaxed), 0);
}

#[test]
fn rejection_rolls_back_earlier_policies() {
    let (l, _) = limits(
        r#"{"keys":{"a":{"requests_per_minute":100,"max_concurrent":5}},
            "models":{"m":{"requests_per_minute":1}}}"#,
        &["a"],
        &["m"],
    );
    let t0 = 100 * S;
    let _first = l.admit_at(t0, Some("a"), "m", 0).unwrap();
    let r = l.admit_at(t0, Some("a"), "m", 0).unwrap_err();
    assert_eq!((r.scope, r.kind), (Scope::Model, Kind::Requests));
    let k = &l.keys["a"];
    assert_eq!(
        k.local.inflight.load(Ordering::Relaxed),
        1,
        "the rejected request's slot was released"
    );
    assert_eq!(k.local.requests.as_ref().unwrap().remaining(t0), 99);
}

#[test]
fn rejection_headers() {
    let (l, _) = limits(
        r#"{"keys":{"a":{"requests_per_minute":2,"tokens_per_minute":1000}},"headers_on_success":true}"#,
        &["a"],
        &[],
    );
    let t0 = 100 * S;
    let _a = l.admit_at(t0, Some("a"), "m", 10).unwrap();
    let h: HeaderMap = _a.headers().into_iter().collect();
    assert_eq!(h["x-ratelimit-limit-requests"], "2");
    assert_eq!(h["x-ratelimit-limit-tokens"], "1000");
    let _b = l.admit_at(t0, Some("a"), "m", 10).unwrap();
    let r = l.admit_at(t0, Some("a"), "m", 10).unwrap_err();
    let mut h = HeaderMap::new();
    r.apply_headers(&mut h);
    assert_eq!(h["retry-after"], "30");
    assert_eq!(h["x-ratelimit-limit-requests"], "2");
    assert_eq!(h["x-ratelimit-remaining-requests"], "0");
    assert_eq!(h["x-ratelimit-limit-tokens"], "1000");
    assert!(h.contains_key("x-ratelimit-reset-tokens"));
    assert!(h.contains_key("x-ratelimit-reset-requests"));
    let e = r.to_gw_error();
    assert_eq!(e.status, 429);
    assert_eq!(e.retry_after, Some(30));
}

#[test]
fn config_errors_have_paths() {
    let (_, e) = limits(
        r#"{"keys":{"zz":{"requests_per_minute":1}},"models":{"m":{"max_concurrent":0},"q":{}}}"#,
        &["a"],
        &["m"],
    );
    let p: Vec<_> = e.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        p,
        [
            "$.limits.keys.zz",
            "$.limits.models.m.max_concurrent",
            "$.limits.models.q"
        ]
    );
    let (_, e) = limits(r#"{"modles":{}}"#, &[], &[]);
    assert_eq!(e[0].path, "$.limits");
}

#[test]
fn store_section_is_checked_and_divides_the_fallback() {
    let (l, e) = limits(
        r#"{"models":{"m":{"requests_per_minute":10,"max_concurrent":5}},
            "store":{"url":"redis://h:1/0","replicas":3}}"#,
        &[],
        &["m"],
    );
    assert!(e.is_empty(), "{e:?}");
    // Divided by the replicas, rounded up, never below one.
    let fb = Local::divided(&l.models["m"].policy, 3);
    assert_eq!(fb.max_concurrent, Some(2));
    assert_eq!(fb.requests.unwrap().interval, WINDOW_NS / 4);
    let fb = Local::divided(&l.models["m"].policy, 50);
    assert_eq!(fb.max_concurrent, Some(1));
    let (_, e) = limits(r#"{"store":{"url":"ftp://h"}}"#, &[], &[]);
    assert_eq!(e[0].path, "$.limits.store.url");
    // Without a connected store admission is the local one, even with the section.
    assert!(matches!(l.admit(None, "m", 0), Admit::Now(Ok(_))));
}

/// The fallback of a shared policy with `policy`, divided over three replicas.
fn fallback(policy: &str) -> Local {
    let (l, e) = limits(&format!(r#"{{"models":{{"m":{policy}}}}}"#), &[], &["m"]);
    assert!(e.is_empty(), "{e:?}");
    Local::divided(&l.models["m"].policy, 3)
}

/// Requests offered every `every` ns from `from` to `to` to a fallback in an outage that began
/// at `from`: how many it admitted.
fn offered(fb: &Local, from: u64, to: u64, every: u64) -> u64 {
    (from..to)
        .step_by(every as usize)
        .filter(|&t| fb.take_fallback(Kind::Requests, t, from, 0).is_ok())
        .count() as u64
}

#[test]
fn an_outage_admits_what_the_part_refills_while_it_lasts_not_a_full_bucket() {
    // 600 a minute over 3 replicas: this replica's part is 200 a minute, one every 300 ms.
    let fb = fallback(r#"{"requests_per_minute":600}"#);
    let t0 = 100 * S;
    // Never used before, so full as a local limiter: the fallback does not start from that.
    assert!(fb.take_fallback(Kind::Requests, t0, t0, 0).is_err());
    let r = fb.take_fallback(Kind::Requests, t0, t0, 0).unwrap_err();
    assert_eq!(r, Duration::from_millis(300));
    // 3 s of outage under a request every millisecond: one at 0.3 s, 0.6 s, ... 2.7 s, where a
    // fresh bucket gave 200.
    assert_eq!(offered(&fb, t0, t0 + 3 * S, 1_000_000), 9);
    // The local limiter of the same part, as the fallback was before: a full bucket.
    assert_eq!(
        (0..300)
            .filter(|_| fb.take(Kind::Requests, t0).is_ok())
            .count(),
        0,
        "the fallback's state carries on"
    );
    let fresh = fallback(r#"{"requests_per_minute":600}"#);
    assert_eq!(
        (0..300)
            .filter(|_| fresh.take(Kind::Requests, t0).is_ok())
            .count(),
        200
    );
}

#[test]
fn flapping_admits_no_more_than_the_outages_total_length() {
    let fb = fallback(r#"{"requests_per_minute":600}"#);
    let (mut t, mut admitted, mut down) = (100 * S, 0, 0);
    // Twenty outages of 450 ms, each after 200 ms of store: 9 s down in all, 30 parts' worth.
    for _ in 0..20 {
        let len = 450_000_000;
        admitted += offered(&fb, t, t + len, 1_000_000);
        down += len;
        t += len + 200_000_000;
    }
    let bound = down / 300_000_000;
    assert!(admitted <= bound, "{admitted} admitted over {down} ns down");
    assert_eq!(
        admitted, 20,
        "one an outage: 450 ms holds one part's unit, not two"
    );
    // The local limiter before: a full bucket at the first outage, refilled while up.
    let (mut t, mut before) = (100 * S, 0);
    let old = fallback(r#"{"requests_per_minute":600}"#);
    for _ in 0..20 {
        before += (t..t + 450_000_000)
            .step_by(1_000_000)
            .filter(|&n| old.take(Kind::Requests, n).is_ok())
            .count();
        t += 650_000_000;
    }
    assert!(before > 200, "{before}");
}

#[test]
fn a_fallback_in_debt_stays_in_debt_across_outages() {
    // 3000 tokens a minute: 1000 for this replica's part, 60 ms a token.
    let fb = fallback(r#"{"tokens_per_minute":3000}"#);
    let t0 = 100 * S;
    let t = t0 + 120_000_000;
    assert!(fb.take_fallback(Kind::Tokens, t, t0, 0).is_ok());
    // A request's real usage charged past what refilled: 500 tokens of debt, 30 s of refill.
    fb.tokens.as_ref().unwrap().charge(t, 502);
    // The store answered, then went again 1 s later: the debt is still there.
    let t1 = t + S;
    let wait = fb.take_fallback(Kind::Tokens, t1 + S, t1, 0).unwrap_err();
    assert!(wait > Duration::from_secs(25), "{wait:?}");
}

#[test]
fn fallback_slots_count_the_ones_held_from_the_lease() {
    // 6 slots over 3 replicas: 2 for this one, the lease's in use included.
    let fb = fallback(r#"{"max_concurrent":6}"#);
    let t = 100 * S;
    assert!(fb.take_fallback(Kind::Concurrency, t, t, 2).is_err());
    assert!(fb.take_fallback(Kind::Concurrency, t, t, 1).is_ok());
    assert!(fb.take_fallback(Kind::Concurrency, t, t, 1).is_err());
    fb.release_slot();
    assert!(fb.take_fallback(Kind::Concurrency, t, t, 0).is_ok());
    assert!(fb.take_fallback(Kind::Concurrency, t, t, 0).is_ok());
    assert!(fb.take_fallback(Kind::Concurrency, t, t, 0).is_err());
}

#[test]
fn durations() {
    assert_eq!(fmt_duration(Duration::from_millis(250)), "250ms");
    assert_eq!(fmt_duration(Duration::from_millis(1200)), "2s");
    assert_eq!(fmt_duration(Duration::from_secs(90)), "1m30s");
}

/// Cost of one admission against one shared policy, single-threaded and with every core
/// hammering the same policy (the worst case for the global atomics). Run with
/// `cargo test -p gateway --release limits::tests::bench_admit -- --ignored --nocapture`.
#[test]
#[ignore]
fn bench_admit() {
    let (l, _) = limits(
        r#"{"keys":{"a":{"requests_per_minute":1000000000,"tokens_per_minute":1000000000,"max_concurrent":100000}}}"#,
        &["a"],
        &[],
    );
    let l = Arc::new(l);
    let n = 2_000_000u64;
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    for t in [1, threads] {
        let start = Instant::now();
        let hs: Vec<_> = (0..t)
            .map(|_| {
                let l = l.clone();
                std::thread::spawn(move || {
                    for _ in 0..n {
                        let mut a = l.admit_at(now_ns(), Some("a"), "m", 10).unwrap();
                        a.settle(12);
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        let el = start.elapsed();
        println!(
            "admit+settle+drop, {t} thread(s): {:.1} ns per request per thread",
            el.as_nanos() as f64 / n as f64
        );
    }
}
