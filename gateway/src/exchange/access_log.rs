//! The access log: one JSON line per request, formatted from the request's [`Facts`] when it
//! ends, and the sink the lines go to. Lines go to stderr (default) or a file:
//!
//! ```json
//! "access_log": { "path": "/var/log/gateway/access.jsonl" }   // "enabled": false turns it off
//! ```
//!
//! Writing never blocks a worker: each worker appends to its own buffer (its own mutex, which only
//! the log writer thread also takes, every 50 ms), and that thread does the `write`. A sink that
//! cannot keep up (a full pipe) makes lines be dropped past 4 MiB buffered per worker, counted in
//! `gateway_access_log_dropped_total`.

use std::cell::{Cell, RefCell};
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use serde::Deserialize;
use serde_json::Value;

use super::facts::Facts;
use crate::checker::Checker;
use crate::dialect::Dialect;
use crate::json;
use crate::telemetry::metrics;

const MAX_BUFFERED: usize = 4 << 20;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccessLogConfig {
    #[serde(default = "yes")]
    pub enabled: bool,
    /// A file to append to; stderr when absent.
    #[serde(default)]
    pub path: Option<String>,
}

fn yes() -> bool {
    true
}

impl Default for AccessLogConfig {
    fn default() -> Self {
        AccessLogConfig {
            enabled: true,
            path: None,
        }
    }
}

impl AccessLogConfig {
    pub fn from_config(c: &mut Checker, v: Option<&Value>) -> AccessLogConfig {
        let Some(v) = v else {
            return AccessLogConfig::default();
        };
        match AccessLogConfig::deserialize(v) {
            Ok(cfg) => {
                if cfg.path.as_deref() == Some("") {
                    c.err(
                        "$.access_log.path",
                        "must not be empty (omit it for stderr)",
                    );
                }
                cfg
            }
            Err(e) => {
                c.err("$.access_log", e.to_string());
                AccessLogConfig::default()
            }
        }
    }
}

struct Sink {
    enabled: AtomicBool,
    buffers: Mutex<Vec<Arc<Mutex<Vec<u8>>>>>,
    /// The sink, and the emptied buffer the next full one is swapped with (so a worker's buffer
    /// keeps its capacity across flushes instead of growing again from nothing).
    out: Mutex<(Box<dyn Write + Send>, Vec<u8>)>,
}

fn sink() -> &'static Sink {
    static S: OnceLock<Sink> = OnceLock::new();
    S.get_or_init(|| {
        std::thread::Builder::new()
            .name("gw-access-log".into())
            .spawn(|| loop {
                std::thread::sleep(Duration::from_millis(50));
                flush();
            })
            .expect("spawn the access-log writer");
        Sink {
            enabled: AtomicBool::new(true),
            buffers: Mutex::new(Vec::new()),
            out: Mutex::new((Box::new(std::io::stderr()), Vec::with_capacity(64 * 1024))),
        }
    })
}

/// Applies the `access_log` section at startup (stderr and enabled until then). The sink is not
/// changed by a reload.
pub fn init(cfg: &AccessLogConfig) -> anyhow::Result<()> {
    let s = sink();
    s.enabled.store(cfg.enabled, Ordering::Relaxed);
    if let (true, Some(p)) = (cfg.enabled, &cfg.path) {
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(p)
            .map_err(|e| anyhow::anyhow!("cannot open access log {p}: {e}"))?;
        s.out.lock().unwrap().0 = Box::new(f);
    }
    Ok(())
}

/// Writes out everything buffered. Called by the writer thread every 50 ms; call it once more at
/// exit so that the last lines are not lost.
pub fn flush() {
    let s = sink();
    let bufs: Vec<_> = s.buffers.lock().unwrap().clone();
    let mut guard = s.out.lock().unwrap();
    let (out, spare) = &mut *guard;
    for b in bufs {
        {
            let mut g = b.lock().unwrap();
            if g.is_empty() {
                continue;
            }
            std::mem::swap(&mut *g, spare);
        }
        let _ = out.write_all(spare);
        spare.clear();
    }
    let _ = out.flush();
}

thread_local! {
    static BUF: Arc<Mutex<Vec<u8>>> = {
        let b = Arc::new(Mutex::new(Vec::with_capacity(64 * 1024)));
        sink().buffers.lock().unwrap().push(b.clone());
        b
    };
    static LINE: RefCell<Vec<u8>> = RefCell::new(Vec::with_capacity(512));
}

fn emit(line: &[u8]) {
    let s = sink();
    if !s.enabled.load(Ordering::Relaxed) {
        return;
    }
    BUF.with(|b| {
        let mut g = b.lock().unwrap();
        if g.len() + line.len() > MAX_BUFFERED {
            metrics::access_log_line_dropped();
        } else {
            g.extend_from_slice(line);
        }
    });
}

/// Writes the line of a finished request (`duration`, `upstream` and `first_token` as the
/// settlement computed them), unless the log is off.
#[inline]
pub(super) fn write(
    i: &Facts,
    duration: Duration,
    upstream: Option<Duration>,
    first_token: Option<Duration>,
) {
    if !sink().enabled.load(Ordering::Relaxed) {
        return;
    }
    LINE.with(|l| {
        let mut l = l.borrow_mut();
        l.clear();
        write_line(&mut l, i, duration, upstream, first_token);
        emit(&l);
    });
}

/// `n` as exactly `width` digits (zero-padded; `n` must fit).
fn push_padded(out: &mut Vec<u8>, n: u64, width: usize) {
    let mut buf = [b'0'; 20];
    let start = json::digits_into(&mut buf, n);
    out.extend_from_slice(&buf[(20 - width).min(start)..]);
}

/// Milliseconds with microsecond precision: `12.345`, written in one piece.
fn push_ms(out: &mut Vec<u8>, d: Duration) {
    let us = d.as_micros().min(u128::from(u64::MAX)) as u64;
    let frac = us % 1000;
    let mut buf = [0u8; 24];
    buf[20] = b'.';
    buf[21] = b'0' + (frac / 100) as u8;
    buf[22] = b'0' + (frac / 10 % 10) as u8;
    buf[23] = b'0' + (frac % 10) as u8;
    let whole: &mut [u8; 20] = (&mut buf[..20]).try_into().expect("twenty bytes");
    let start = json::digits_into(whole, us / 1000);
    out.extend_from_slice(&buf[start..]);
}

pub(super) fn write_line(
    out: &mut Vec<u8>,
    i: &Facts,
    duration: Duration,
    upstream: Option<Duration>,
    first_token: Option<Duration>,
) {
    out.extend_from_slice(b"{\"ts\":\"");
    write_rfc3339(out, i.start_wall);
    out.extend_from_slice(b"\",\"request_id\":");
    // A request id is visible ASCII from a set that needs no escaping (see `request_id`).
    out.push(b'"');
    out.extend_from_slice(i.request_id.as_bytes());
    out.push(b'"');
    out.extend_from_slice(b",\"route\":\"");
    out.extend_from_slice(match i.route {
        Dialect::Chat => b"/v1/chat/completions".as_slice(),
        Dialect::Messages => b"/v1/messages",
        Dialect::Responses => b"/v1/responses",
    });
    out.extend_from_slice(b"\",\"model\":");
    match (&i.target, &i.asked_model) {
        (Some(r), _) => out.extend_from_slice(&r.alias_json),
        (None, Some(m)) => json::write_str(out, m),
        (None, None) => out.extend_from_slice(b"null"),
    }
    // The deployment that served (or was tried last); one that was never tried is named only
    // when the alias has no other.
    let deployment = i.target.as_ref().and_then(|r| {
        let n = match i.deployment {
            Some(n) => n as usize,
            None if r.deployments.len() == 1 => 0,
            None => return None,
        };
        r.deployments.get(n)
    });
    out.extend_from_slice(b",\"provider\":");
    match deployment {
        Some(d) => out.extend_from_slice(&d.provider_json),
        None => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(b",\"upstream_model\":");
    match deployment {
        Some(d) => out.extend_from_slice(&d.upstream_json),
        None => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(b",\"attempts\":");
    match i.attempts {
        n @ 0..=9 => out.push(b'0' + n),
        n => json::write_u64(out, u64::from(n)),
    }
    if let (Some(r), false) = (&i.target, i.failed.is_empty()) {
        out.extend_from_slice(b",\"failed_attempts\":[");
        for (n, t) in i.failed.iter().enumerate() {
            let (d, outcome, status) = (
                &r.deployments[usize::from(t.deployment)],
                t.counted.outcome,
                t.status,
            );
            if n > 0 {
                out.push(b',');
            }
            out.extend_from_slice(b"{\"provider\":");
            out.extend_from_slice(&d.provider_json);
            out.extend_from_slice(b",\"upstream_model\":");
            out.extend_from_slice(&d.upstream_json);
            out.extend_from_slice(b",\"outcome\":\"");
            out.extend_from_slice(outcome.as_str().as_bytes());
            out.push(b'"');
            if status > 0 {
                out.extend_from_slice(b",\"status\":");
                json::write_u64(out, u64::from(status));
            }
            out.push(b'}');
        }
        out.push(b']');
    }
    out.extend_from_slice(b",\"status\":");
    json::write_u64(out, u64::from(i.status));
    out.extend_from_slice(if i.stream {
        b",\"stream\":true,\"latency_ms\":".as_slice()
    } else {
        b",\"stream\":false,\"latency_ms\":"
    });
    push_ms(out, duration);
    match upstream {
        Some(u) => {
            out.extend_from_slice(b",\"upstream_latency_ms\":");
            push_ms(out, u);
        }
        None => out.extend_from_slice(b",\"upstream_latency_ms\":null"),
    }
    if let Some(t) = first_token {
        out.extend_from_slice(b",\"ttft_ms\":");
        push_ms(out, t);
    }
    match i.usage.input {
        Some(n) => {
            out.extend_from_slice(b",\"tokens_in\":");
            json::write_u64(out, n);
        }
        None => out.extend_from_slice(b",\"tokens_in\":null"),
    }
    match i.usage.output {
        Some(n) => {
            out.extend_from_slice(b",\"tokens_out\":");
            json::write_u64(out, n);
        }
        None => out.extend_from_slice(b",\"tokens_out\":null"),
    }
    if let Some(c) = i.usage.cached {
        out.extend_from_slice(b",\"tokens_cached\":");
        json::write_u64(out, c);
    }
    if let Some(nano) = i.cost {
        out.extend_from_slice(b",\"cost_usd\":");
        crate::provider::price::write_usd(out, nano);
    }
    out.extend_from_slice(b",\"key_id\":");
    match &i.key_id {
        Some(k) => json::write_str(out, k),
        None => out.extend_from_slice(b"null"),
    }
    if let Some(r) = &i.rejected {
        out.extend_from_slice(b",\"rate_limited\":\"");
        out.extend_from_slice(r.scope.as_str().as_bytes());
        out.push(b':');
        out.extend_from_slice(r.kind.as_str().as_bytes());
        out.push(b'"');
    }
    if let Some(scope) = i.over_budget {
        out.extend_from_slice(b",\"over_budget\":\"");
        out.extend_from_slice(scope.as_str().as_bytes());
        out.push(b'"');
    }
    if let Some(e) = &i.error {
        out.extend_from_slice(b",\"error\":");
        json::write_str(out, e);
    }
    if let Some(e) = &i.stream_error {
        out.extend_from_slice(b",\"stream_error\":");
        json::write_str(out, e);
    }
    if let Some(d) = &i.dropped {
        out.extend_from_slice(b",\"dropped\":");
        json::write_str(out, d);
    }
    out.extend_from_slice(b"}\n");
}

/// `2026-11-29T23:59:59.123Z`. The part up to the seconds is cached per thread and only
/// rebuilt when the second changes.
fn write_rfc3339(out: &mut Vec<u8>, t: SystemTime) {
    thread_local! {
        static CACHE: Cell<(u64, [u8; 19])> = const { Cell::new((u64::MAX, [0; 19])) };
    }
    let d = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or(Duration::ZERO);
    let secs = d.as_secs();
    let (cached, mut prefix) = CACHE.get();
    if cached != secs {
        let mut v = Vec::with_capacity(19);
        civil_prefix(&mut v, secs);
        prefix.copy_from_slice(&v[..19]);
        CACHE.set((secs, prefix));
    }
    out.extend_from_slice(&prefix);
    out.push(b'.');
    push_padded(out, u64::from(d.subsec_millis()), 3);
    out.push(b'Z');
}

/// `YYYY-MM-DDTHH:MM:SS` for seconds since the epoch (years 0..=9999).
fn civil_prefix(out: &mut Vec<u8>, secs: u64) {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = if month <= 2 { y + 1 } else { y };
    push_padded(out, year.clamp(0, 9999) as u64, 4);
    out.push(b'-');
    push_padded(out, month as u64, 2);
    out.push(b'-');
    push_padded(out, day as u64, 2);
    out.push(b'T');
    push_padded(out, rem / 3600, 2);
    out.push(b':');
    push_padded(out, rem / 60 % 60, 2);
    out.push(b':');
    push_padded(out, rem % 60, 2);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers() {
        let mut o = Vec::new();
        json::write_u64(&mut o, 0);
        o.push(b' ');
        json::write_u64(&mut o, u64::MAX);
        o.push(b' ');
        push_ms(&mut o, Duration::from_micros(12_045));
        o.push(b' ');
        push_ms(&mut o, Duration::from_micros(7));
        assert_eq!(
            String::from_utf8(o).unwrap(),
            "0 18446744073709551615 12.045 0.007"
        );
        for us in [
            0,
            9,
            10,
            99,
            100,
            999,
            1000,
            1001,
            99_999,
            123_456_789,
            u64::MAX,
        ] {
            let mut o = Vec::new();
            push_ms(&mut o, Duration::from_micros(us));
            assert_eq!(
                String::from_utf8(o).unwrap(),
                format!("{}.{:03}", us / 1000, us % 1000)
            );
        }
        for (n, width) in [(0, 2), (7, 2), (42, 2), (5, 3), (999, 3), (2026, 4), (9, 4)] {
            let mut o = Vec::new();
            push_padded(&mut o, n, width);
            assert_eq!(String::from_utf8(o).unwrap(), format!("{n:0width$}"));
        }
    }

    #[test]
    fn rfc3339() {
        let mut o = Vec::new();
        write_rfc3339(
            &mut o,
            SystemTime::UNIX_EPOCH + Duration::from_millis(1_764_460_799_123),
        );
        assert_eq!(String::from_utf8(o).unwrap(), "2025-11-29T23:59:59.123Z");
        let mut o = Vec::new();
        write_rfc3339(
            &mut o,
            SystemTime::UNIX_EPOCH + Duration::from_secs(951_782_400),
        );
        assert_eq!(String::from_utf8(o).unwrap(), "2000-02-29T00:00:00.000Z");
    }
}
