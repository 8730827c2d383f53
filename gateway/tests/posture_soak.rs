//! Soak: many requests at concurrency 256 through the full posture (keys, limits, metrics,
//! access log) on every route, native and translated; zero failures, bounded peak RSS, in-flight
//! back to zero. `POSTURE_SOAK_REQUESTS` sets the count (default 20,000; the figure in
//! docs/operations.md is 100,000 against the release binary, `GW_POSTURE_BIN=target/release/gateway`).

mod common;
mod posture_support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use posture_support as ps;
use serde_json::json;

#[test]
fn soak_concurrency_256() {
    let total: u64 = std::env::var("POSTURE_SOAK_REQUESTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let conns: u64 = 256;
    let mock = common::start_mock();
    let dir = common::tmpdir("soak");
    let log = dir.join("access.jsonl");
    let mut cfg = ps::config(
        mock.addr,
        json!({
            "workers": 2,
            "keys": [{"id": "soak", "key_env": "GW_POSTURE_SOAK_KEY"}],
            "limits": {
                "default_key": {"requests_per_minute": 100_000_000u64, "tokens_per_minute": 1_000_000_000_000u64, "max_concurrent": 100_000},
                "models": {"gpt": {"max_concurrent": 100_000}, "claude": {"requests_per_minute": 100_000_000u64}}
            },
            "metrics": {"listen": "127.0.0.1:0"},
            "access_log": {"path": log},
        }),
    );
    cfg["workers"] = json!(2);
    let gw = ps::start(&cfg, &[("GW_POSTURE_SOAK_KEY", "sk-soak")]);
    let pid = gw.child.id();
    let idle_rss = ps::proc_kib(pid, "VmRSS");

    let bodies: Vec<(&str, Vec<u8>)> = vec![
        (
            "/v1/chat/completions",
            serde_json::to_vec(&ps::chat("gpt", "soak")).unwrap(),
        ),
        (
            "/v1/messages",
            serde_json::to_vec(&ps::messages("claude", "soak", false)).unwrap(),
        ),
        (
            "/v1/messages",
            serde_json::to_vec(&ps::messages("gpt", "soak", false)).unwrap(),
        ),
        (
            "/v1/responses",
            serde_json::to_vec(&json!({"model": "gpt", "input": "soak"})).unwrap(),
        ),
        (
            "/v1/chat/completions",
            serde_json::to_vec(&ps::chat("claude", "soak")).unwrap(),
        ),
    ];
    let bodies = Arc::new(bodies);
    let ok = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let first_failure = Arc::new(std::sync::Mutex::new(None::<String>));
    let start = Instant::now();
    let addr = gw.addr;
    let threads: Vec<_> = (0..conns)
        .map(|t| {
            let (bodies, ok, failed, first) = (
                bodies.clone(),
                ok.clone(),
                failed.clone(),
                first_failure.clone(),
            );
            let n = total / conns + u64::from(t < total % conns);
            std::thread::Builder::new()
                .stack_size(256 * 1024)
                .spawn(move || {
                    let mut c = KeepAliveKey::connect(addr);
                    for i in 0..n {
                        let (path, body) = &bodies[((t + i) % bodies.len() as u64) as usize];
                        match c.0.post_key(path, body) {
                            Some((200, b))
                                if serde_json::from_slice::<serde_json::Value>(&b).is_ok() =>
                            {
                                ok.fetch_add(1, Ordering::Relaxed);
                            }
                            other => {
                                failed.fetch_add(1, Ordering::Relaxed);
                                let mut f = first.lock().unwrap();
                                if f.is_none() {
                                    *f = Some(format!(
                                        "{path}: {:?}",
                                        other.map(|(s, b)| (
                                            s,
                                            String::from_utf8_lossy(&b).into_owned()
                                        ))
                                    ));
                                }
                                c = KeepAliveKey::connect(addr);
                            }
                        }
                    }
                })
                .unwrap()
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let secs = start.elapsed().as_secs_f64();
    let peak = ps::proc_kib(pid, "VmHWM");
    std::thread::sleep(std::time::Duration::from_secs(1));
    let after = ps::proc_kib(pid, "VmRSS");
    let ok = ok.load(Ordering::Relaxed);
    let failed = failed.load(Ordering::Relaxed);
    eprintln!(
        "soak: {ok} ok, {failed} failed, {total} requests at concurrency {conns} in {secs:.1} s ({:.0} rps); \
         gateway RSS idle {idle_rss} KiB, peak {peak} KiB, 1 s after {after} KiB",
        total as f64 / secs
    );
    assert_eq!(
        failed,
        0,
        "first failure: {:?}",
        first_failure.lock().unwrap()
    );
    assert_eq!(ok, total);
    assert!(peak < 512 * 1024, "peak RSS {peak} KiB");

    let m = gw.scrape();
    let sum: f64 = m
        .lines()
        .filter(|l| l.starts_with("gateway_requests_total{") && l.contains("status=\"200\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert_eq!(sum as u64, total, "every request counted once");
    for r in ["/v1/chat/completions", "/v1/messages", "/v1/responses"] {
        assert_eq!(
            ps::metric(&m, &format!("gateway_requests_in_flight{{route=\"{r}\"}}")),
            Some(0.0)
        );
    }
    assert_eq!(gw.terminate(), Some(0), "clean exit after the soak");
    // The access log was flushed at exit: one line per request.
    let lines = std::fs::read_to_string(&log).unwrap().lines().count() as u64;
    assert_eq!(lines, total);
}

/// A keep-alive connection that sends the soak key.
struct KeepAliveKey(ps::KeepAlive);

impl KeepAliveKey {
    fn connect(addr: std::net::SocketAddr) -> Self {
        KeepAliveKey(ps::KeepAlive::connect(addr))
    }
}
