//! The shared quota store (`limits.store`): the Redis that replicas take their leases from.
//!
//! ```json
//! "limits": { "store": {
//!     "url": "rediss://redis.internal:6380/0",
//!     "username_env": "GW_REDIS_USER", "password_env": "GW_REDIS_PASSWORD",
//!     "ca_file": "/etc/gateway/redis-ca.pem",
//!     "prefix": "gateway:", "timeout_ms": 50,
//!     "on_store_error": "local", "replicas": 3, "slot_ttl_ms": 10000
//! } }
//! ```
//!
//! This module is the connection and its health; what is asked of Redis (the lease scripts) is in
//! `lease.rs`.
//!
//! # Where the connection lives
//! One multiplexed redis-rs connection per process, on a thread of its own (`gw-limits-store`)
//! with a current-thread runtime. Workers never touch it: a lease that needs quota spawns a task
//! on that runtime ([`Store::spawn`]) and the requests that must wait for the answer wait on the
//! lease. Not one connection per worker, because leases are per process (atomics shared by the
//! workers, like the local limiter): one refill serves every worker, Redis sees one connection per
//! replica, heartbeats and the reconnect loop have one home, and the workers' runtimes do no
//! Redis I/O at all. The price is a cross-thread wake-up per Redis call, paid only by a request
//! that waits for one.
//!
//! # Health
//! Up or down, with a log line and a metric for every transition. A call that fails or gets no
//! answer within `timeout_ms` marks the store down; while down, calls fail at once (requests use
//! `on_store_error`) and the supervisor reconnects (connection lost, Redis restarted) or probes
//! the open connection with `PING` (Redis slow or stopped) until it answers. No restart needed.
//!
//! # Secrets
//! The URL carries no credentials (`validate` refuses them); user name and password come from the
//! environment variables named here and are read once, at startup. Keys in Redis are named only
//! by the prefix, key ids and model aliases (`lease.rs`).

use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::IntoConnectionInfo;
use serde::Deserialize;
use serde_json::Value;
use tokio::sync::Notify;

use crate::checker::Checker;

/// What admission does while the store cannot be reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnError {
    /// Every policy falls back to its local limiter with its limits divided by `replicas`.
    Local,
    /// Requests are admitted without limits.
    Admit,
    /// Requests are refused with a 503 in the client's dialect.
    Reject,
}

impl OnError {
    pub fn as_str(self) -> &'static str {
        match self {
            OnError::Local => "local",
            OnError::Admit => "admit",
            OnError::Reject => "reject",
        }
    }
}

/// The `limits.store` section as written in the config file.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    url: String,
    #[serde(default)]
    username_env: Option<String>,
    #[serde(default)]
    password_env: Option<String>,
    #[serde(default)]
    ca_file: Option<String>,
    #[serde(default = "default_prefix")]
    prefix: String,
    #[serde(default = "default_timeout_ms")]
    timeout_ms: u64,
    #[serde(default = "default_on_error")]
    on_store_error: OnError,
    #[serde(default = "one")]
    replicas: u32,
    #[serde(default = "default_slot_ttl_ms")]
    slot_ttl_ms: u64,
}

fn default_prefix() -> String {
    "gateway:".into()
}
fn default_timeout_ms() -> u64 {
    50
}
fn default_on_error() -> OnError {
    OnError::Local
}
fn one() -> u32 {
    1
}
fn default_slot_ttl_ms() -> u64 {
    10_000
}

/// The checked `limits.store` section. Holds the names of the credential variables, never their
/// values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreConfig {
    /// `redis://host:port/db` or `rediss://...`, without credentials.
    pub url: String,
    pub username_env: Option<String>,
    pub password_env: Option<String>,
    /// PEM roots for `rediss://` (instead of the built-in webpki roots).
    pub ca_file: Option<String>,
    /// Every key the gateway writes starts with it.
    pub prefix: String,
    /// The longest a request waits for Redis, and the bound on every call.
    pub timeout: Duration,
    pub on_error: OnError,
    /// Replicas sharing the store: `on_store_error: local` divides every limit by it.
    pub replicas: u32,
    /// How long a replica's concurrency slots outlive its last heartbeat.
    pub slot_ttl: Duration,
}

impl StoreConfig {
    /// Checks `limits.store`. Unset credential variables are warnings (so that `validate` runs
    /// where the secrets are not); everything else is an error with its path.
    pub fn from_config(c: &mut Checker, v: &Value) -> Option<StoreConfig> {
        let err = |c: &mut Checker, field: &str, message: String| {
            let path = if field.is_empty() {
                "$.limits.store".to_string()
            } else {
                format!("$.limits.store.{field}")
            };
            c.err(path, message);
        };
        let raw = match Raw::deserialize(v) {
            Ok(r) => r,
            Err(e) => {
                err(c, "", e.to_string());
                return None;
            }
        };
        let before = c.errors.len();
        let tls = match check_url(&raw.url) {
            Ok(tls) => tls,
            Err(m) => {
                err(c, "url", m);
                false
            }
        };
        for (field, name) in [
            ("username_env", &raw.username_env),
            ("password_env", &raw.password_env),
        ] {
            match name.as_deref() {
                Some("") => err(c, field, "must name an environment variable".into()),
                Some(n) if std::env::var_os(n).is_none() => c.warnings.push(format!(
                    "$.limits.store.{field}: {n} is not set; connecting without it"
                )),
                _ => {}
            }
        }
        if let Some(ca) = &raw.ca_file {
            if !tls {
                err(c, "ca_file", "applies to rediss:// URLs only".into());
            } else if let Err(e) = std::fs::read(ca) {
                err(c, "ca_file", format!("cannot read {ca}: {e}"));
            }
        }
        if raw.prefix.is_empty()
            || raw.prefix.len() > 64
            || !raw.prefix.bytes().all(|b| b.is_ascii_graphic())
        {
            err(
                c,
                "prefix",
                "must be 1 to 64 visible ASCII characters".into(),
            );
        }
        if !(1..=10_000).contains(&raw.timeout_ms) {
            err(c, "timeout_ms", "must be 1 to 10000".into());
        }
        if !(1..=10_000).contains(&raw.replicas) {
            err(c, "replicas", "must be 1 to 10000".into());
        }
        if !(500..=3_600_000).contains(&raw.slot_ttl_ms) {
            err(c, "slot_ttl_ms", "must be 500 to 3600000".into());
        }
        (c.errors.len() == before).then(|| StoreConfig {
            url: raw.url,
            username_env: raw.username_env,
            password_env: raw.password_env,
            ca_file: raw.ca_file,
            prefix: raw.prefix,
            timeout: Duration::from_millis(raw.timeout_ms),
            on_error: raw.on_store_error,
            replicas: raw.replicas,
            slot_ttl: Duration::from_millis(raw.slot_ttl_ms),
        })
    }
}

/// `redis://` or `rediss://` (Ok(true)), a host, no credentials, and what redis-rs accepts.
fn check_url(url: &str) -> Result<bool, String> {
    let (tls, rest) = if let Some(r) = url.strip_prefix("rediss://") {
        (true, r)
    } else if let Some(r) = url.strip_prefix("redis://") {
        (false, r)
    } else {
        return Err("must start with redis:// or rediss://".into());
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if authority.contains('@') {
        return Err(
            "must not carry credentials: name their variables in username_env / password_env"
                .into(),
        );
    }
    if authority.is_empty() || authority.starts_with(':') {
        return Err("must name a host".into());
    }
    if rest.contains('#') {
        return Err("must not have a fragment".into());
    }
    url.into_connection_info()
        .map_err(|e| format!("is not a Redis URL: {e}"))?;
    Ok(tls)
}

// --- the store and its health ---

const STARTING: u8 = 0;
const UP: u8 = 1;
const DOWN: u8 = 2;

/// Reconnect back-off bounds and the probe interval while the connection is open but silent.
const MIN_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(2);
const PROBE_INTERVAL: Duration = Duration::from_millis(250);

/// Counters for the metrics (rendered by `posture::metrics`, which reads them here).
#[derive(Default)]
struct Stats {
    configured: AtomicU8,
    up: AtomicU8,
    to_up: AtomicU64,
    to_down: AtomicU64,
    calls_ok: AtomicU64,
    calls_failed: AtomicU64,
    calls_timed_out: AtomicU64,
    waited: AtomicU64,
    fallback: [AtomicU64; 3],
}

static STATS: Stats = Stats {
    configured: AtomicU8::new(0),
    up: AtomicU8::new(0),
    to_up: AtomicU64::new(0),
    to_down: AtomicU64::new(0),
    calls_ok: AtomicU64::new(0),
    calls_failed: AtomicU64::new(0),
    calls_timed_out: AtomicU64::new(0),
    waited: AtomicU64::new(0),
    fallback: [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)],
};

/// What the metrics show of the store; `None` when no store is configured.
#[derive(Debug, Clone, Copy)]
pub struct StatsView {
    pub up: bool,
    pub to_up: u64,
    pub to_down: u64,
    pub calls_ok: u64,
    pub calls_failed: u64,
    pub calls_timed_out: u64,
    /// Admissions that waited for a store answer.
    pub waited: u64,
    /// Admissions decided by `on_store_error`, by decision (local, admit, reject).
    pub fallback: [u64; 3],
}

pub fn stats() -> Option<StatsView> {
    let s = &STATS;
    if s.configured.load(Ordering::Relaxed) == 0 {
        return None;
    }
    let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
    Some(StatsView {
        up: s.up.load(Ordering::Relaxed) == 1,
        to_up: l(&s.to_up),
        to_down: l(&s.to_down),
        calls_ok: l(&s.calls_ok),
        calls_failed: l(&s.calls_failed),
        calls_timed_out: l(&s.calls_timed_out),
        waited: l(&s.waited),
        fallback: [l(&s.fallback[0]), l(&s.fallback[1]), l(&s.fallback[2])],
    })
}

/// One admission waited for the store.
pub fn count_wait() {
    STATS.waited.fetch_add(1, Ordering::Relaxed);
}

/// One admission was decided by `on_store_error`.
pub fn count_fallback(d: OnError) {
    let i = match d {
        OnError::Local => 0,
        OnError::Admit => 1,
        OnError::Reject => 2,
    };
    STATS.fallback[i].fetch_add(1, Ordering::Relaxed);
}

/// A call that did not produce an answer (the store is down, the call failed or timed out).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unavailable;

/// The connection to the shared store and its health. Started once per process.
pub struct Store {
    cfg: StoreConfig,
    client: redis::Client,
    handle: tokio::runtime::Handle,
    conn: Mutex<Option<MultiplexedConnection>>,
    state: AtomicU8,
    /// Bumped on every (re)connection, so that leases re-assert what they hold (Redis may have
    /// restarted empty).
    generation: AtomicU64,
    /// A failed call wakes the supervisor.
    trouble: Notify,
    /// Every (re)connection wakes the leases' maintenance.
    reconnected: Notify,
    /// Tasks spawned and not finished ([`Store::close`] waits for them).
    outstanding: AtomicUsize,
    /// This process' name in Redis (the holder of its concurrency slots): random, per start.
    replica: String,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("url", &self.cfg.url)
            .field("up", &self.is_up())
            .finish()
    }
}

impl Store {
    /// Connects (waiting at most about the connect timeout for the first answer, so that a
    /// reachable store is up before the first request) and keeps the connection from then on. An
    /// unreachable store is not an error: the gateway serves with `on_store_error` until Redis
    /// answers.
    pub fn start(cfg: &StoreConfig) -> anyhow::Result<Arc<Store>> {
        let info = cfg
            .url
            .as_str()
            .into_connection_info()
            .map_err(|e| anyhow::anyhow!("limits.store.url: {e}"))?;
        let mut redis_info = info.redis_settings().clone();
        let var = |name: &Option<String>| name.as_ref().and_then(|n| std::env::var(n).ok());
        if let Some(u) = var(&cfg.username_env) {
            redis_info = redis_info.set_username(u);
        }
        if let Some(p) = var(&cfg.password_env) {
            redis_info = redis_info.set_password(p);
        }
        let info = info.set_redis_settings(redis_info);
        let client = match &cfg.ca_file {
            Some(ca) => {
                let pem = std::fs::read(ca)
                    .map_err(|e| anyhow::anyhow!("limits.store.ca_file {ca}: {e}"))?;
                redis::Client::build_with_tls(
                    info,
                    redis::TlsCertificates {
                        client_tls: None,
                        root_cert: Some(pem),
                    },
                )
            }
            None => redis::Client::open(info),
        }
        .map_err(|e| anyhow::anyhow!("limits.store: {e}"))?;
        // rediss:// builds its rustls config with the process default provider: the gateway's.
        let _ = rustls::crypto::ring::default_provider().install_default();

        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let store = Arc::new(Store {
            cfg: cfg.clone(),
            client,
            handle: rt.handle().clone(),
            conn: Mutex::new(None),
            state: AtomicU8::new(STARTING),
            generation: AtomicU64::new(0),
            trouble: Notify::new(),
            reconnected: Notify::new(),
            outstanding: AtomicUsize::new(0),
            replica: replica_id(),
        });
        STATS.configured.store(1, Ordering::Relaxed);
        let (first_tx, first_rx) = std::sync::mpsc::sync_channel(1);
        let s = store.clone();
        std::thread::Builder::new()
            .name("gw-limits-store".into())
            .spawn(move || rt.block_on(s.supervise(first_tx)))?;
        let _ = first_rx.recv_timeout(store.connect_timeout() + Duration::from_millis(500));
        Ok(store)
    }

    pub fn config(&self) -> &StoreConfig {
        &self.cfg
    }

    pub fn replica(&self) -> &str {
        &self.replica
    }

    pub fn is_up(&self) -> bool {
        self.state.load(Ordering::Relaxed) == UP
    }

    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Relaxed)
    }

    fn connect_timeout(&self) -> Duration {
        self.cfg.timeout.max(Duration::from_secs(1))
    }

    /// Runs `fut` on the store's thread (from any thread).
    pub fn spawn<F>(self: &Arc<Self>, fut: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        self.outstanding.fetch_add(1, Ordering::Relaxed);
        let s = self.clone();
        self.handle.spawn(async move {
            fut.await;
            s.outstanding.fetch_sub(1, Ordering::Relaxed);
        });
    }

    /// Runs a task for the life of the process on the store's thread ([`Store::close`] does not
    /// wait for it).
    pub fn spawn_background<F>(&self, fut: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        self.handle.spawn(fut);
    }

    /// Resolves at the next (re)connection.
    pub async fn reconnected(&self) {
        self.reconnected.notified().await
    }

    /// At shutdown, after the limits were dropped (which gives leases back): waits at most the
    /// timeout for those calls to finish.
    pub fn close(&self) {
        let deadline = std::time::Instant::now() + self.cfg.timeout.max(Duration::from_millis(200));
        while self.outstanding.load(Ordering::Relaxed) > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// One script call, bounded by the timeout. Fails at once while the store is down.
    pub async fn call(&self, inv: &redis::ScriptInvocation<'_>) -> Result<Vec<i64>, Unavailable> {
        if !self.is_up() {
            return Err(Unavailable);
        }
        let Some(mut conn) = self.conn.lock().unwrap().clone() else {
            return Err(Unavailable);
        };
        match tokio::time::timeout(self.cfg.timeout, inv.invoke_async::<Vec<i64>>(&mut conn)).await
        {
            Ok(Ok(v)) => {
                STATS.calls_ok.fetch_add(1, Ordering::Relaxed);
                Ok(v)
            }
            Ok(Err(e)) if e.is_timeout() => {
                STATS.calls_timed_out.fetch_add(1, Ordering::Relaxed);
                self.trouble(false, &self.no_answer());
                Err(Unavailable)
            }
            Ok(Err(e)) => {
                STATS.calls_failed.fetch_add(1, Ordering::Relaxed);
                let lost =
                    e.is_io_error() || e.is_connection_dropped() || e.is_unrecoverable_error();
                self.trouble(lost, &e.to_string());
                Err(Unavailable)
            }
            Err(_) => {
                STATS.calls_timed_out.fetch_add(1, Ordering::Relaxed);
                self.trouble(false, &self.no_answer());
                Err(Unavailable)
            }
        }
    }

    fn no_answer(&self) -> String {
        format!("no answer within {} ms", self.cfg.timeout.as_millis())
    }

    /// Marks the store down (dropping the connection when it is lost) and wakes the supervisor.
    fn trouble(&self, lost: bool, reason: &str) {
        if lost {
            *self.conn.lock().unwrap() = None;
        }
        self.set_state(DOWN, reason);
        self.trouble.notify_one();
    }

    fn set_state(&self, to: u8, reason: &str) {
        let from = self.state.swap(to, Ordering::Relaxed);
        if from == to {
            return;
        }
        STATS.up.store(u8::from(to == UP), Ordering::Relaxed);
        let url = &self.cfg.url;
        if to == UP {
            STATS.to_up.fetch_add(1, Ordering::Relaxed);
            eprintln!(
                "limits store: up: {url} (replica {}); limits are shared",
                self.replica
            );
        } else {
            STATS.to_down.fetch_add(1, Ordering::Relaxed);
            let what = match self.cfg.on_error {
                OnError::Local => {
                    format!("local limits divided by {} replica(s)", self.cfg.replicas)
                }
                OnError::Admit => "admitting without limits".into(),
                OnError::Reject => "refusing with 503".into(),
            };
            let when = if from == STARTING { " at start" } else { "" };
            eprintln!(
                "limits store: down{when}: {url}: {reason}; on_store_error={} ({what}) until it answers",
                self.cfg.on_error.as_str()
            );
        }
    }

    async fn connect(&self) -> Result<MultiplexedConnection, String> {
        let cfg = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect_timeout()))
            .set_response_timeout(Some(self.cfg.timeout));
        match tokio::time::timeout(
            self.connect_timeout(),
            self.client
                .get_multiplexed_async_connection_with_config(&cfg),
        )
        .await
        {
            Ok(Ok(c)) => Ok(c),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!(
                "no connection within {} ms",
                self.connect_timeout().as_millis()
            )),
        }
    }

    /// The reconnect and probe loop, on the store's thread for the life of the process.
    async fn supervise(self: Arc<Self>, first: std::sync::mpsc::SyncSender<()>) {
        let mut first = Some(first);
        let mut backoff = MIN_BACKOFF;
        loop {
            let conn = self.conn.lock().unwrap().clone();
            match conn {
                None => match self.connect().await {
                    Ok(c) => {
                        *self.conn.lock().unwrap() = Some(c);
                        self.generation.fetch_add(1, Ordering::Relaxed);
                        self.set_state(UP, "");
                        self.reconnected.notify_waiters();
                        backoff = MIN_BACKOFF;
                    }
                    Err(reason) => {
                        self.set_state(DOWN, &reason);
                        if let Some(f) = first.take() {
                            let _ = f.send(());
                        }
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(MAX_BACKOFF);
                        continue;
                    }
                },
                Some(mut c) if !self.is_up() => {
                    let ping = redis::cmd("PING");
                    match tokio::time::timeout(
                        self.connect_timeout(),
                        ping.query_async::<String>(&mut c),
                    )
                    .await
                    {
                        Ok(Ok(_)) => self.set_state(UP, ""),
                        Ok(Err(e)) if !e.is_timeout() => {
                            *self.conn.lock().unwrap() = None;
                        }
                        _ => tokio::time::sleep(PROBE_INTERVAL).await,
                    }
                    continue;
                }
                Some(_) => {}
            }
            if let Some(f) = first.take() {
                let _ = f.send(());
            }
            self.trouble.notified().await;
        }
    }
}

/// 16 hex digits, different for every start of every process.
fn replica_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    if let Ok(t) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        h.write_u128(t.as_nanos());
    }
    format!("{:016x}", h.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(v: Value) -> (Option<StoreConfig>, Vec<String>, Vec<String>) {
        let mut ch = Checker::default();
        let c = StoreConfig::from_config(&mut ch, &v);
        (
            c,
            ch.errors.into_iter().map(|e| e.path).collect(),
            ch.warnings,
        )
    }

    #[test]
    fn defaults_and_fields() {
        let (c, e, w) = parse(serde_json::json!({"url": "redis://127.0.0.1:6379/2"}));
        assert!(e.is_empty() && w.is_empty(), "{e:?} {w:?}");
        let c = c.unwrap();
        assert_eq!(c.prefix, "gateway:");
        assert_eq!(c.timeout, Duration::from_millis(50));
        assert_eq!(c.on_error, OnError::Local);
        assert_eq!(c.replicas, 1);
        let (c, e, w) = parse(serde_json::json!({
            "url": "rediss://redis.example:6380", "password_env": "GW_TEST_SURELY_UNSET_PW",
            "prefix": "gw-a:", "timeout_ms": 20, "on_store_error": "reject", "replicas": 3
        }));
        assert!(e.is_empty(), "{e:?}");
        assert!(w[0].contains("GW_TEST_SURELY_UNSET_PW"), "{w:?}");
        assert_eq!(c.unwrap().on_error, OnError::Reject);
    }

    #[test]
    fn every_problem_has_its_path() {
        let (c, e, _) = parse(serde_json::json!({
            "url": "redis://user:secret@h:1/0", "prefix": "", "timeout_ms": 0,
            "replicas": 0, "slot_ttl_ms": 10, "ca_file": "/nonexistent.pem"
        }));
        assert!(c.is_none());
        assert_eq!(
            e,
            [
                "$.limits.store.url",
                "$.limits.store.ca_file",
                "$.limits.store.prefix",
                "$.limits.store.timeout_ms",
                "$.limits.store.replicas",
                "$.limits.store.slot_ttl_ms"
            ]
        );
        for bad in ["http://h:1", "redis://", "redis://:6379", "redis://h:1/#x"] {
            let (_, e, _) = parse(serde_json::json!({ "url": bad }));
            assert_eq!(e, ["$.limits.store.url"], "{bad}");
        }
        let (_, e, _) = parse(serde_json::json!({"url": "redis://h", "on_store_error": "maybe"}));
        assert_eq!(e, ["$.limits.store"]);
        let (_, e, _) = parse(serde_json::json!({"url": "redis://h", "password": "x"}));
        assert_eq!(
            e,
            ["$.limits.store"],
            "an inline secret is an unknown field"
        );
    }
}
