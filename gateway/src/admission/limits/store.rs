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
//! A call past `timeout_ms` still waits for its answer up to a second (Redis paused, or this
//! thread not scheduled, usually answers late rather than never) and its answer is applied: the
//! units Redis granted or charged then are neither lost nor counted twice. The store also keeps
//! when the current outage began ([`Store::outage_began`]): the fallback of
//! `on_store_error: local` refills from that moment, never from a full bucket.
//!
//! # Secrets
//! The URL carries no credentials (`validate` refuses them); user name and password come from the
//! environment variables named here and are read once, at startup. Keys in Redis are named only
//! by the prefix, key ids and model aliases (`lease.rs`).

use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::IntoConnectionInfo;
use tokio::sync::Notify;

use super::clock::now_ns;
pub use super::store_config::{OnError, StoreConfig};
use super::store_stats::{self as stats, CallEnd};
pub use super::store_stats::{count_fallback, count_wait, stats, StatsView, ROUND_TRIP_BOUNDS_US};

const STARTING: u8 = 0;
const UP: u8 = 1;
const DOWN: u8 = 2;

/// Reconnect back-off bounds and the probe interval while the connection is open but silent.
const MIN_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(2);
const PROBE_INTERVAL: Duration = Duration::from_millis(250);

/// A call that produced no answer to use, and whether Redis may have run it all the same: the
/// caller undoes what it handed over only when Redis surely did not take it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unanswered {
    /// Not sent (the store is down), or refused by Redis with an error: nothing was applied.
    NotRun,
    /// Sent and never answered (past the late bound, or the connection was lost): Redis may
    /// have run it.
    MaybeRun,
}

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
    /// Every return to up (a reconnection, or a probe answered) wakes the leases' maintenance.
    reconnected: Notify,
    /// Tasks spawned and not finished ([`Store::close`] waits for them).
    outstanding: AtomicUsize,
    /// `now_ns` since when this replica has been without answers (`timeout_ms` before a call or a
    /// request first found the store silent); 0 while the store answers. The fallback of
    /// `on_store_error: local` refills from this moment only ([`Store::outage_began`]).
    outage_since: AtomicU64,
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
            outage_since: AtomicU64::new(0),
            replica: replica_id(),
        });
        stats::configured();
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

    /// Resolves when the store is next up again.
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

    /// The start of the outage this replica is in (`now_ns`), the caller having found the store
    /// without an answer: if none had begun, one begins now, dated `timeout_ms` back (the wait
    /// that shows an outage: a request that found the store silent waited that long, and an
    /// outage nobody noticed cost nothing). It ends when the store answers in time again.
    pub fn outage_began(&self) -> u64 {
        let at = now_ns().saturating_sub(self.cfg.timeout.as_nanos() as u64);
        match self
            .outage_since
            .compare_exchange(0, at, Ordering::Relaxed, Ordering::Relaxed)
        {
            Ok(_) => at,
            Err(since) => since,
        }
    }

    fn outage_ended(&self) {
        if self.outage_since.load(Ordering::Relaxed) != 0 {
            self.outage_since.store(0, Ordering::Relaxed);
        }
    }

    /// How long a call's answer is awaited in all: past `timeout_ms` the store is down and the
    /// requests have moved on by `on_store_error`, but an answer that still comes within this
    /// bound is applied (what Redis granted or charged is then neither lost nor counted twice).
    fn late_bound(&self) -> Duration {
        self.connect_timeout()
    }

    /// One script call. Fails at once while the store is down; without an answer within the
    /// timeout the store goes down, and the call keeps waiting up to [`Store::late_bound`].
    pub async fn call(&self, inv: &redis::ScriptInvocation<'_>) -> Result<Vec<i64>, Unanswered> {
        if !self.is_up() {
            return Err(Unanswered::NotRun);
        }
        let Some(mut conn) = self.conn.lock().unwrap().clone() else {
            return Err(Unanswered::NotRun);
        };
        let started = Instant::now();
        let mut answer = std::pin::pin!(inv.invoke_async::<Vec<i64>>(&mut conn));
        let (res, late) = match tokio::time::timeout(self.cfg.timeout, answer.as_mut()).await {
            Ok(r) => (r, false),
            Err(_) => {
                stats::count_call(CallEnd::TimedOut);
                self.trouble(false, &self.no_answer());
                let rest = self.late_bound().saturating_sub(self.cfg.timeout);
                match tokio::time::timeout(rest, answer).await {
                    Ok(r) => (r, true),
                    Err(_) => return Err(Unanswered::MaybeRun),
                }
            }
        };
        match res {
            Ok(v) => {
                stats::round_trip(started.elapsed());
                if late {
                    stats::count_late();
                } else {
                    stats::count_call(CallEnd::Ok);
                    if self.is_up() {
                        self.outage_ended();
                    }
                }
                Ok(v)
            }
            // redis-rs' own bound, the late one.
            Err(e) if e.is_timeout() => {
                if !late {
                    stats::count_call(CallEnd::TimedOut);
                    self.trouble(false, &self.no_answer());
                }
                Err(Unanswered::MaybeRun)
            }
            Err(e) => {
                if !late {
                    stats::count_call(CallEnd::Failed);
                }
                let lost =
                    e.is_io_error() || e.is_connection_dropped() || e.is_unrecoverable_error();
                self.trouble(lost, &e.to_string());
                Err(if lost {
                    Unanswered::MaybeRun
                } else {
                    Unanswered::NotRun
                })
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
        self.outage_began();
        self.set_state(DOWN, reason);
        self.trouble.notify_one();
    }

    fn set_state(&self, to: u8, reason: &str) {
        let from = self.state.swap(to, Ordering::Relaxed);
        if from == to {
            return;
        }
        stats::transition(to == UP);
        let url = &self.cfg.url;
        if to == UP {
            self.outage_ended();
            eprintln!(
                "limits store: up: {url} (replica {}); limits are shared",
                self.replica
            );
            // The leases hand over at once what was admitted while it was down.
            self.reconnected.notify_waiters();
        } else {
            self.outage_began();
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
            .set_response_timeout(Some(self.late_bound()));
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
