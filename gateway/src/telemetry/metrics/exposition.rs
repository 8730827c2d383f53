//! The metrics' way out: the Prometheus text of the summed shards ([`render`]), the `metrics`
//! section, and the listener that serves `GET /metrics` off the workers ([`serve`]).

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use super::*;
use crate::checker::Checker;

fn sum(shards: &[Arc<Shard>], f: impl Fn(&Shard) -> &AtomicU64) -> u64 {
    shards
        .iter()
        .map(|s| f(s).load(Ordering::Relaxed))
        .fold(0, u64::wrapping_add)
}

fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => o.push_str("\\\\"),
            '"' => o.push_str("\\\""),
            '\n' => o.push_str("\\n"),
            c => o.push(c),
        }
    }
    o
}

/// The Prometheus text exposition (format 0.0.4) of everything recorded so far.
pub fn render() -> String {
    let shards: Vec<Arc<Shard>> = registry().shards.lock().unwrap().clone();
    let models: Vec<String> = registry().models.lock().unwrap().clone();
    let mut o = String::with_capacity(16 * 1024);

    o.push_str("# HELP gateway_requests_total Requests by route, model alias and status.\n");
    o.push_str("# TYPE gateway_requests_total counter\n");
    for (r, route) in ROUTES.iter().enumerate() {
        for (m, model) in models.iter().enumerate() {
            for st in 0..NSTATUS {
                let v = sum(&shards, |s| &s.requests[(r * NMODELS + m) * NSTATUS + st]);
                if v > 0 {
                    let code = STATUSES
                        .get(st)
                        .map(|c| c.to_string())
                        .unwrap_or_else(|| "other".into());
                    let _ = writeln!(
                        o,
                        "gateway_requests_total{{route=\"{route}\",model=\"{}\",status=\"{code}\"}} {v}",
                        esc(model)
                    );
                }
            }
        }
    }

    o.push_str("# HELP gateway_tokens_total Tokens reported by the upstream, by direction.\n");
    o.push_str("# TYPE gateway_tokens_total counter\n");
    for (r, route) in ROUTES.iter().enumerate() {
        for (m, model) in models.iter().enumerate() {
            for (d, dir) in ["in", "out", "cached"].iter().enumerate() {
                let v = sum(&shards, |s| &s.tokens[(r * NMODELS + m) * 3 + d]);
                if v > 0 {
                    let _ = writeln!(
                        o,
                        "gateway_tokens_total{{route=\"{route}\",model=\"{}\",direction=\"{dir}\"}} {v}",
                        esc(model)
                    );
                }
            }
        }
    }

    render_spend(&mut o, &shards, &models);
    if crate::telemetry::traces::enabled() {
        let (dropped, ok, failed) = crate::telemetry::traces::counters();
        o.push_str("# HELP gateway_trace_spans_dropped_total Spans not exported: a worker's buffer was full, or their export failed.\n");
        o.push_str("# TYPE gateway_trace_spans_dropped_total counter\n");
        let _ = writeln!(o, "gateway_trace_spans_dropped_total {dropped}");
        o.push_str("# HELP gateway_trace_exports_total OTLP exports (one POST of a batch of spans) by result.\n");
        o.push_str("# TYPE gateway_trace_exports_total counter\n");
        let _ = writeln!(o, "gateway_trace_exports_total{{result=\"ok\"}} {ok}");
        let _ = writeln!(
            o,
            "gateway_trace_exports_total{{result=\"failed\"}} {failed}"
        );
    }

    o.push_str("# HELP gateway_rate_limited_total Requests refused by a rate-limit policy.\n");
    o.push_str("# TYPE gateway_rate_limited_total counter\n");
    for (r, route) in ROUTES.iter().enumerate() {
        for (m, model) in models.iter().enumerate() {
            for (sc, scope) in ["key", "model"].iter().enumerate() {
                for (k, kind) in ["requests", "tokens", "concurrency"].iter().enumerate() {
                    let v = sum(&shards, |s| {
                        &s.rejections[((r * NMODELS + m) * NSCOPES + sc) * NKINDS + k]
                    });
                    if v > 0 {
                        let _ = writeln!(
                            o,
                            "gateway_rate_limited_total{{route=\"{route}\",model=\"{}\",scope=\"{scope}\",kind=\"{kind}\"}} {v}",
                            esc(model)
                        );
                    }
                }
            }
        }
    }

    o.push_str(
        "# HELP gateway_requests_in_flight Requests being served (streams until they end).\n",
    );
    o.push_str("# TYPE gateway_requests_in_flight gauge\n");
    for (r, route) in ROUTES.iter().enumerate() {
        let v: i64 = shards
            .iter()
            .map(|s| s.inflight[r].load(Ordering::Relaxed))
            .sum();
        let _ = writeln!(o, "gateway_requests_in_flight{{route=\"{route}\"}} {v}");
    }

    for (h, (name, help)) in HIST_NAMES.iter().enumerate() {
        let _ = writeln!(o, "# HELP {name} {help}");
        let _ = writeln!(o, "# TYPE {name} histogram");
        for (r, route) in ROUTES.iter().enumerate() {
            let base = (h * NROUTES + r) * NBUCKETS;
            let counts: Vec<u64> = (0..NBUCKETS)
                .map(|b| sum(&shards, |s| &s.hist[base + b]))
                .collect();
            let total: u64 = counts.iter().sum();
            if total == 0 {
                continue;
            }
            let mut cum = 0;
            for (b, c) in counts.iter().enumerate() {
                cum += c;
                let le = BUCKETS
                    .get(b)
                    .map(|x| x.to_string())
                    .unwrap_or_else(|| "+Inf".into());
                let _ = writeln!(o, "{name}_bucket{{route=\"{route}\",le=\"{le}\"}} {cum}");
            }
            let ns = sum(&shards, |s| &s.hist_sum_ns[h * NROUTES + r]);
            let _ = writeln!(o, "{name}_sum{{route=\"{route}\"}} {}", ns as f64 / 1e9);
            let _ = writeln!(o, "{name}_count{{route=\"{route}\"}} {total}");
        }
    }

    render_routing(&mut o, &shards);

    let dropped = ACCESS_LOG_DROPPED.load(Ordering::Relaxed);
    o.push_str("# HELP gateway_access_log_dropped_total Access-log lines dropped because the sink could not keep up.\n");
    o.push_str("# TYPE gateway_access_log_dropped_total counter\n");
    let _ = writeln!(o, "gateway_access_log_dropped_total {dropped}");
    if let Some(st) = crate::admission::limits::store::stats() {
        render_store(&mut o, &st);
    }
    o
}

/// The per-deployment counters: only pairs that counted something are listed.
/// `gateway_spend_usd_total{key, model}`: summed in integer nanodollars, written in dollars with
/// nine decimals (exact: no float is summed). `key` is the caller's key id, `none` on an open
/// gateway.
fn render_spend(o: &mut String, shards: &[Arc<Shard>], models: &[String]) {
    let mut total: std::collections::BTreeMap<(Option<Arc<str>>, u16), u64> = Default::default();
    for s in shards {
        for ((_, m), (key, v)) in s.spend.lock().unwrap().iter() {
            let t = total.entry((key.clone(), *m)).or_insert(0);
            *t = t.wrapping_add(*v);
        }
        let open = s.spend_open.iter().zip(&s.spend_open_seen);
        for (m, (v, seen)) in open.enumerate() {
            if seen.load(Ordering::Relaxed) {
                let t = total.entry((None, m as u16)).or_insert(0);
                *t = t.wrapping_add(v.load(Ordering::Relaxed));
            }
        }
    }
    o.push_str("# HELP gateway_spend_usd_total What priced requests cost, in US dollars, by key and model alias.\n");
    o.push_str("# TYPE gateway_spend_usd_total counter\n");
    let mut usd = Vec::with_capacity(24);
    for ((key, m), nano) in total {
        usd.clear();
        crate::provider::price::write_usd(&mut usd, nano);
        let model = models.get(m as usize).map_or("other", String::as_str);
        let _ = writeln!(
            o,
            "gateway_spend_usd_total{{key=\"{}\",model=\"{}\"}} {}",
            esc(key.as_deref().unwrap_or("none")),
            esc(model),
            std::str::from_utf8(&usd).unwrap_or("0")
        );
    }
}

fn render_routing(o: &mut String, shards: &[Arc<Shard>]) {
    let upstreams: Vec<(String, String)> = registry().upstreams.lock().unwrap().clone();
    let labels = |u: usize| {
        let (p, m) = &upstreams[u];
        format!("provider=\"{}\",upstream_model=\"{}\"", esc(p), esc(m))
    };
    o.push_str("# HELP gateway_upstream_attempts_total Upstream requests by deployment and how they ended.\n");
    o.push_str("# TYPE gateway_upstream_attempts_total counter\n");
    for u in 0..upstreams.len() {
        for (k, outcome) in OUTCOMES.iter().enumerate() {
            let v = sum(shards, |s| &s.attempts[u * NOUTCOMES + k]);
            if v > 0 {
                let _ = writeln!(
                    o,
                    "gateway_upstream_attempts_total{{{},outcome=\"{outcome}\"}} {v}",
                    labels(u)
                );
            }
        }
    }
    for (name, help, field) in [
        (
            "gateway_fallbacks_total",
            "Failed attempts on a deployment that were retried on another.",
            (|s: &Shard| -> &[AtomicU64] { &s.fallbacks }) as fn(&Shard) -> &[AtomicU64],
        ),
        (
            "gateway_cooldowns_total",
            "Times a deployment was rested after failures or its retry-after (per worker).",
            |s: &Shard| -> &[AtomicU64] { &s.cooldowns },
        ),
    ] {
        let _ = writeln!(o, "# HELP {name} {help}");
        let _ = writeln!(o, "# TYPE {name} counter");
        for u in 0..upstreams.len() {
            let v = sum(shards, |s| &field(s)[u]);
            if v > 0 {
                let _ = writeln!(o, "{name}{{{}}} {v}", labels(u));
            }
        }
    }
    let v = sum(shards, |s| &s.retry_budget_exhausted);
    o.push_str("# HELP gateway_retry_budget_exhausted_total Retries not made because the worker's retry budget was spent.\n");
    o.push_str("# TYPE gateway_retry_budget_exhausted_total counter\n");
    let _ = writeln!(o, "gateway_retry_budget_exhausted_total {v}");
}

/// The shared quota store's metrics (only when one is configured).
fn render_store(o: &mut String, st: &crate::admission::limits::store::StatsView) {
    o.push_str("# HELP gateway_limits_store_up Whether the rate-limit store answers (1) or on_store_error applies (0).\n");
    o.push_str("# TYPE gateway_limits_store_up gauge\n");
    let _ = writeln!(o, "gateway_limits_store_up {}", u8::from(st.up));
    o.push_str("# HELP gateway_limits_store_transitions_total Changes of the rate-limit store's state, by the state entered.\n");
    o.push_str("# TYPE gateway_limits_store_transitions_total counter\n");
    let _ = writeln!(
        o,
        "gateway_limits_store_transitions_total{{state=\"up\"}} {}",
        st.to_up
    );
    let _ = writeln!(
        o,
        "gateway_limits_store_transitions_total{{state=\"down\"}} {}",
        st.to_down
    );
    o.push_str(
        "# HELP gateway_limits_store_calls_total Lease calls to the rate-limit store, by result.\n",
    );
    o.push_str("# TYPE gateway_limits_store_calls_total counter\n");
    for (result, v) in [
        ("ok", st.calls_ok),
        ("error", st.calls_failed),
        ("timeout", st.calls_timed_out),
    ] {
        let _ = writeln!(
            o,
            "gateway_limits_store_calls_total{{result=\"{result}\"}} {v}"
        );
    }
    o.push_str("# HELP gateway_limits_store_late_answers_total Calls answered after timeout_ms, whose answer was applied all the same.\n");
    o.push_str("# TYPE gateway_limits_store_late_answers_total counter\n");
    let _ = writeln!(o, "gateway_limits_store_late_answers_total {}", st.late);
    render_round_trips(o, st);
    o.push_str("# HELP gateway_limits_store_waits_total Admissions that waited for the rate-limit store (their replica's lease could not tell).\n");
    o.push_str("# TYPE gateway_limits_store_waits_total counter\n");
    let _ = writeln!(o, "gateway_limits_store_waits_total {}", st.waited);
    o.push_str("# HELP gateway_limits_store_fallback_total Admissions decided by on_store_error, by decision.\n");
    o.push_str("# TYPE gateway_limits_store_fallback_total counter\n");
    for (d, v) in ["local", "admit", "reject"].iter().zip(st.fallback) {
        let _ = writeln!(
            o,
            "gateway_limits_store_fallback_total{{decision=\"{d}\"}} {v}"
        );
    }
}

/// `gateway_limits_store_round_trip_seconds`: every answered call, from sending it to its
/// answer as the store's thread saw it (late answers included), and the longest so far.
fn render_round_trips(o: &mut String, st: &crate::admission::limits::store::StatsView) {
    use crate::admission::limits::store::ROUND_TRIP_BOUNDS_US;
    let name = "gateway_limits_store_round_trip_seconds";
    let _ = writeln!(
        o,
        "# HELP {name} Round trips of the calls to the rate-limit store, sent to answered."
    );
    let _ = writeln!(o, "# TYPE {name} histogram");
    let mut cum = 0;
    for (i, n) in st.round_trips.iter().enumerate() {
        cum += n;
        match ROUND_TRIP_BOUNDS_US.get(i) {
            Some(us) => {
                let _ = writeln!(o, "{name}_bucket{{le=\"{}\"}} {cum}", *us as f64 / 1e6);
            }
            None => {
                let _ = writeln!(o, "{name}_bucket{{le=\"+Inf\"}} {cum}");
            }
        }
    }
    let _ = writeln!(o, "{name}_sum {}", st.round_trip_sum.as_secs_f64());
    let _ = writeln!(o, "{name}_count {cum}");
    let max = "gateway_limits_store_round_trip_max_seconds";
    let _ = writeln!(
        o,
        "# HELP {max} The longest round trip to the rate-limit store so far."
    );
    let _ = writeln!(o, "# TYPE {max} gauge");
    let _ = writeln!(o, "{max} {}", st.round_trip_max.as_secs_f64());
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsConfig {
    pub listen: SocketAddr,
    #[serde(default = "yes")]
    pub enabled: bool,
}

fn yes() -> bool {
    true
}

impl MetricsConfig {
    /// The `metrics` section; `None` when absent or disabled (metrics are still collected).
    pub fn from_config(c: &mut Checker, v: Option<&Value>) -> Option<MetricsConfig> {
        let v = v?;
        match MetricsConfig::deserialize(v) {
            Ok(cfg) if cfg.enabled => Some(cfg),
            Ok(_) => None,
            Err(e) => {
                c.err("$.metrics", e.to_string());
                None
            }
        }
    }
}

/// Binds `addr` now (so that a bad address fails startup) and serves `GET /metrics` from a thread
/// of its own, off the workers. Returns the bound address (for port 0).
pub fn serve(addr: SocketAddr) -> anyhow::Result<SocketAddr> {
    use anyhow::Context as _;
    let std_listener = std::net::TcpListener::bind(addr)
        .with_context(|| format!("cannot bind metrics listener {addr}"))?;
    std_listener.set_nonblocking(true)?;
    let bound = std_listener.local_addr()?;
    std::thread::Builder::new()
        .name("gw-metrics".into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("metrics: cannot start runtime: {e}");
                    return;
                }
            };
            rt.block_on(async move {
                let Ok(listener) = tokio::net::TcpListener::from_std(std_listener) else {
                    eprintln!("metrics: cannot register listener");
                    return;
                };
                loop {
                    let Ok((stream, _)) = listener.accept().await else {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    };
                    tokio::spawn(async move {
                        let svc = hyper::service::service_fn(|req| async move {
                            Ok::<_, std::convert::Infallible>(scrape_response(&req))
                        });
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                            .await;
                    });
                }
            });
        })?;
    Ok(bound)
}

fn scrape_response<B>(
    req: &http::Request<B>,
) -> http::Response<http_body_util::Full<bytes::Bytes>> {
    let (status, ctype, body) = match (req.method(), req.uri().path()) {
        (&http::Method::GET, "/metrics") => {
            (200, "text/plain; version=0.0.4; charset=utf-8", render())
        }
        _ => (404, "text/plain", "not found\n".to_owned()),
    };
    http::Response::builder()
        .status(status)
        .header(http::header::CONTENT_TYPE, ctype)
        .body(http_body_util::Full::new(bytes::Bytes::from(body)))
        .expect("static parts")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dialect::Dialect;

    fn sample(model: u16, status: u16) -> Sample {
        Sample {
            route: Dialect::Messages,
            model,
            status,
            duration: Duration::from_millis(3),
            upstream: Some(Duration::from_millis(2)),
            first_token: None,
            tokens_in: 10,
            tokens_out: 5,
            tokens_cached: 0,
            rejected: None,
            attempt: None,
        }
    }

    #[test]
    fn spend_is_summed_across_threads_in_exact_dollars() {
        let labels = ModelLabels::new(["spend-test-model"]);
        let m = labels.index("spend-test-model");
        let key: Arc<str> = Arc::from("spend-test-key");
        let k = key.clone();
        std::thread::spawn(move || spend(Some(&k), m, 1_500_000_000))
            .join()
            .unwrap();
        spend(Some(&key), m, 250_000_001);
        spend(None, m, 7);
        // The label is `other` when other tests filled the table first.
        let name = registry().models.lock().unwrap()[m as usize].clone();
        let text = render();
        let line = |key: &str, v: &str| {
            format!("gateway_spend_usd_total{{key=\"{key}\",model=\"{name}\"}} {v}\n")
        };
        assert!(
            text.contains(&line("spend-test-key", "1.750000001")),
            "{text}"
        );
        assert!(text.contains(&line("none", "0.000000007")), "{text}");
    }

    #[test]
    fn labels_are_bounded() {
        let names: Vec<String> = (0..100)
            .map(|i| format!("zz-metrics-test-{i:03}"))
            .collect();
        let l = ModelLabels::new(names.iter().map(|s| s.as_str()));
        assert!(registry().models.lock().unwrap().len() <= NMODELS);
        assert_eq!(l.index("not-configured"), MODEL_OTHER);
        // Interning is stable across reloads.
        let again = ModelLabels::new(names.iter().map(|s| s.as_str()));
        assert_eq!(l.index(&names[0]), again.index(&names[0]));
    }

    #[test]
    fn records_and_renders_across_threads() {
        let l = ModelLabels::new(["metrics-test-model"]);
        let m = l.index("metrics-test-model");
        // Another test may have filled the label table first; then this alias is `other`.
        let name = registry().models.lock().unwrap()[m as usize].clone();
        record(&sample(m, 200));
        std::thread::spawn(move || record(&sample(m, 200)))
            .join()
            .unwrap();
        let mut rej = sample(MODEL_NONE, 429);
        rej.rejected = Some((Scope::Key, Kind::Tokens));
        record(&rej);
        inflight_add(Dialect::Messages, 1);
        inflight_add(Dialect::Messages, -1);
        let text = render();
        assert!(
            text.contains(&format!(
                "gateway_requests_total{{route=\"/v1/messages\",model=\"{name}\",status=\"200\"}}"
            )),
            "{text}"
        );
        assert!(text.contains("gateway_rate_limited_total{route=\"/v1/messages\",model=\"none\",scope=\"key\",kind=\"tokens\"} 1"));
        assert!(text.contains(&format!(
            "gateway_tokens_total{{route=\"/v1/messages\",model=\"{name}\",direction=\"in\"}}"
        )));
        assert!(
            text.contains("gateway_overhead_seconds_bucket{route=\"/v1/messages\",le=\"0.001\"}")
        );
        assert!(text.contains(
            "gateway_request_duration_seconds_bucket{route=\"/v1/messages\",le=\"+Inf\"}"
        ));
        assert!(text.contains("gateway_requests_in_flight{route=\"/v1/messages\"} 0"));
        // Every sample line is `name{labels} value` or `name value`.
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let v = line.rsplit(' ').next().unwrap();
            assert!(v.parse::<f64>().is_ok(), "{line}");
        }
    }

    #[test]
    fn deployment_counters_are_labelled_and_bounded() {
        let pairs: Vec<(String, String)> = (0..100)
            .map(|i| ("metrics-test-p".to_owned(), format!("m{i:03}")))
            .collect();
        let l = UpstreamLabels::new(&pairs);
        assert!(registry().upstreams.lock().unwrap().len() <= NUPSTREAMS);
        assert_eq!(l.index(99), UPSTREAM_OTHER);
        assert_eq!(l.index(1000), UPSTREAM_OTHER);
        let again = UpstreamLabels::new(&pairs[..1]);
        assert_eq!(again.index(0), l.index(0));
        let u = l.index(0);
        let (p, m) = registry().upstreams.lock().unwrap()[u as usize].clone();
        let a = Attempted {
            upstream: u,
            outcome: AttemptOutcome::RetryableStatus,
            cooled: true,
        };
        fallback(a);
        retry_budget_exhausted();
        let text = render();
        let labels = format!("provider=\"{p}\",upstream_model=\"{m}\"");
        assert!(
            text.contains(&format!(
                "gateway_upstream_attempts_total{{{labels},outcome=\"retryable_status\"}} 1"
            )),
            "{text}"
        );
        assert!(text.contains(&format!("gateway_fallbacks_total{{{labels}}} 1")));
        assert!(text.contains(&format!("gateway_cooldowns_total{{{labels}}} 1")));
        assert!(text.contains("gateway_retry_budget_exhausted_total "));
    }

    #[test]
    fn buckets_and_statuses() {
        assert_eq!(bucket_idx(0.00001), 0);
        assert_eq!(bucket_idx(0.001), 4);
        assert_eq!(bucket_idx(1e9), BUCKETS.len());
        assert_eq!(status_idx(200), 0);
        assert_eq!(status_idx(418), STATUSES.len());
    }

    #[test]
    fn config() {
        let mut e = Checker::default();
        let v: Value = serde_json::from_str(r#"{"listen":"127.0.0.1:0"}"#).unwrap();
        assert!(MetricsConfig::from_config(&mut e, Some(&v)).is_some());
        let v: Value = serde_json::from_str(r#"{"listen":"127.0.0.1:0","enabled":false}"#).unwrap();
        assert!(MetricsConfig::from_config(&mut e, Some(&v)).is_none());
        assert!(e.errors.is_empty());
        let v: Value = serde_json::from_str(r#"{"listen":"nope"}"#).unwrap();
        assert!(MetricsConfig::from_config(&mut e, Some(&v)).is_none());
        assert_eq!(e.errors[0].path, "$.metrics");
    }

    #[test]
    fn listener_serves_metrics() {
        use std::io::{Read, Write};
        let addr = serve("127.0.0.1:0".parse().unwrap()).unwrap();
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        assert!(out.starts_with("HTTP/1.1 200"), "{out}");
        assert!(out.contains("# TYPE gateway_requests_total counter"));
    }
}
