//! Prometheus metrics, collected per worker and summed when scraped.
//!
//! Every thread that records gets its own [`Shard`] (a thread-local, registered once): plain
//! relaxed loads and stores of atomics that only that thread writes, so the request path takes no
//! lock and writes no cache line another worker writes. `/metrics` on its own listener sums the
//! shards at scrape time.
//!
//! Label cardinality is bounded by construction: `route` is one of the three client routes,
//! `status` one of a fixed list of codes or `other`, and `model` one of the configured aliases
//! (at most [`MAX_MODELS`], interned at config load, append-only across reloads), `other` for an
//! alias that is not configured and `none` when the request failed before its model was known.
//! Per-deployment counters (attempts, fallbacks, cooldowns) are labelled by the deployment's
//! `provider` and `upstream_model`, at most [`MAX_UPSTREAMS`] pairs interned the same way, the
//! rest `other`; `outcome` is one of a fixed list.
//!
//! ```json
//! "metrics": { "listen": "127.0.0.1:9464" }      // "enabled": false turns the listener off
//! ```
//!
//! Recording is here; the Prometheus text, the section and the listener are in [`exposition`].

pub mod exposition;

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use crate::admission::limits::{Kind, Scope};
use crate::dialect::Dialect;
use crate::routing::AliasMap;

/// The most aliases that get their own `model` label value; the rest count as `other`.
pub const MAX_MODELS: usize = 64;
/// Label index for "no model known" and for "alias not configured".
pub const MODEL_NONE: u16 = 0;
pub const MODEL_OTHER: u16 = 1;
const NMODELS: usize = MAX_MODELS + 2;

const ROUTES: [&str; 3] = ["/v1/chat/completions", "/v1/messages", "/v1/responses"];
const NROUTES: usize = ROUTES.len();

const STATUSES: [u16; 18] = [
    200, 400, 401, 403, 404, 405, 408, 409, 413, 415, 422, 429, 431, 499, 500, 502, 503, 504,
];
const NSTATUS: usize = STATUSES.len() + 1;

/// Histogram upper bounds in seconds (plus +Inf): 50 µs (gateway overhead) to 60 s (a stream).
const BUCKETS: [f64; 19] = [
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5, 5.0, 10.0, 30.0, 60.0,
];
const NBUCKETS: usize = BUCKETS.len() + 1;

const NKINDS: usize = 3;
const NSCOPES: usize = 2;

/// The most (provider, upstream model) pairs that get their own labels; the rest count as `other`.
pub const MAX_UPSTREAMS: usize = 64;
/// Label index for an upstream past [`MAX_UPSTREAMS`].
const UPSTREAM_OTHER: u16 = 0;
const NUPSTREAMS: usize = MAX_UPSTREAMS + 1;

/// How one upstream attempt ended (`outcome` label of `gateway_upstream_attempts_total`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttemptOutcome {
    /// A 2xx answer.
    Ok = 0,
    /// An error status that is not retried (the request's own fault, as a 400).
    Status = 1,
    /// A status in `routing.retry_on`.
    RetryableStatus = 2,
    /// No answer: the connection failed, was reset, or the body broke off.
    Connection = 3,
    /// No answer within `timeouts.upstream_ms`.
    Timeout = 4,
}
const OUTCOMES: [&str; 5] = ["ok", "status", "retryable_status", "connection", "timeout"];
const NOUTCOMES: usize = OUTCOMES.len();

impl AttemptOutcome {
    /// The `outcome` label value (also the access log's name for it).
    pub fn as_str(self) -> &'static str {
        OUTCOMES[self as usize]
    }
}

#[derive(Clone, Copy, Debug)]
pub enum Hist {
    /// Whole request, as the client sees it (for a stream: until the stream ends).
    Duration = 0,
    /// From sending the upstream request to the end of the upstream response.
    Upstream = 1,
    /// From the request's arrival to the first content event of a stream.
    FirstToken = 2,
    /// Duration minus upstream duration: the gateway's own time.
    Overhead = 3,
}
const NHIST: usize = 4;
const HIST_NAMES: [(&str, &str); NHIST] = [
    (
        "gateway_request_duration_seconds",
        "Request duration as seen by the client (streams: until the stream ends).",
    ),
    (
        "gateway_upstream_duration_seconds",
        "Upstream request duration (sent to last byte received).",
    ),
    (
        "gateway_time_to_first_token_seconds",
        "Streaming requests: arrival to first content event.",
    ),
    (
        "gateway_overhead_seconds",
        "Gateway overhead: request duration minus upstream duration.",
    ),
];

fn route_idx(d: Dialect) -> usize {
    match d {
        Dialect::Chat => 0,
        Dialect::Messages => 1,
        Dialect::Responses => 2,
    }
}

fn status_idx(s: u16) -> usize {
    STATUSES
        .iter()
        .position(|&c| c == s)
        .unwrap_or(STATUSES.len())
}

fn bucket_idx(secs: f64) -> usize {
    BUCKETS
        .iter()
        .position(|&b| secs <= b)
        .unwrap_or(BUCKETS.len())
}

/// Single-writer counter bump: only the owning thread writes a shard, so a load and a store
/// (plain `mov`s on x86) replace a locked read-modify-write.
#[inline]
fn bump(a: &AtomicU64, n: u64) {
    a.store(a.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
}

fn zeros(n: usize) -> Box<[AtomicU64]> {
    (0..n).map(|_| AtomicU64::new(0)).collect()
}

/// One thread's counters.
pub struct Shard {
    requests: Box<[AtomicU64]>,    // route × model × status
    tokens: Box<[AtomicU64]>,      // route × model × {in, out, cached}
    rejections: Box<[AtomicU64]>,  // route × model × scope × kind
    hist: Box<[AtomicU64]>,        // hist × route × bucket
    hist_sum_ns: Box<[AtomicU64]>, // hist × route
    inflight: [AtomicI64; NROUTES],
    attempts: Box<[AtomicU64]>,  // upstream × outcome
    fallbacks: Box<[AtomicU64]>, // upstream
    cooldowns: Box<[AtomicU64]>, // upstream
    retry_budget_exhausted: AtomicU64,
    /// Nanodollars spent by (key, model label): priced requests of a key only. A map, not a
    /// table: keys are as many as the config lists. Its lock is this thread's and the scrape's,
    /// never another worker's.
    spend: Mutex<SpendMap>,
    /// Nanodollars spent without a key, by model label (an open gateway: no lock, no map), and
    /// whether any was recorded (a priced request may cost nothing, and is still listed).
    spend_open: Box<[AtomicU64]>,
    spend_open_seen: Box<[AtomicBool]>,
}

/// (the key id's allocation; model label) → (the key id, nanodollars). The key's
/// `Arc` is the config's own, shared by every request of that key, so its address names it; a
/// reload's new `Arc` is another entry, summed with it by name at the scrape.
type SpendMap = HashMap<(usize, u16), (Option<Arc<str>>, u64), BuildHasherDefault<AddrHasher>>;

/// One multiply per word: the spend map's keys are an address and a label, already spread, and
/// SipHash over them was most of a priced request's bookkeeping.
#[derive(Default)]
struct AddrHasher(u64);

impl std::hash::Hasher for AddrHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
    fn write_u16(&mut self, n: u16) {
        self.write_u64(u64::from(n));
    }
}

impl Shard {
    fn new() -> Self {
        Shard {
            requests: zeros(NROUTES * NMODELS * NSTATUS),
            tokens: zeros(NROUTES * NMODELS * 3),
            rejections: zeros(NROUTES * NMODELS * NSCOPES * NKINDS),
            hist: zeros(NHIST * NROUTES * NBUCKETS),
            hist_sum_ns: zeros(NHIST * NROUTES),
            inflight: Default::default(),
            attempts: zeros(NUPSTREAMS * NOUTCOMES),
            fallbacks: zeros(NUPSTREAMS),
            cooldowns: zeros(NUPSTREAMS),
            retry_budget_exhausted: AtomicU64::new(0),
            spend: Mutex::new(HashMap::default()),
            spend_open: zeros(NMODELS),
            spend_open_seen: (0..NMODELS).map(|_| AtomicBool::new(false)).collect(),
        }
    }
}

struct Registry {
    shards: Mutex<Vec<Arc<Shard>>>,
    /// Interned alias names; index = label index.
    models: Mutex<Vec<String>>,
    /// Interned (provider, upstream model) pairs; index = label index, 0 is `other`.
    upstreams: Mutex<Vec<(String, String)>>,
}

fn registry() -> &'static Registry {
    static R: OnceLock<Registry> = OnceLock::new();
    R.get_or_init(|| Registry {
        shards: Mutex::new(Vec::new()),
        models: Mutex::new(vec!["none".into(), "other".into()]),
        upstreams: Mutex::new(vec![("other".into(), "other".into())]),
    })
}

thread_local! {
    static SHARD: Arc<Shard> = {
        let s = Arc::new(Shard::new());
        registry().shards.lock().unwrap().push(s.clone());
        s
    };
}

#[inline]
fn with_shard<R>(f: impl FnOnce(&Shard) -> R) -> R {
    SHARD.with(|s| f(s))
}

/// Alias → `model` label index, built at config load and kept in the config snapshot, so the
/// request path needs no lock to find a label.
#[derive(Debug, Default)]
pub struct ModelLabels {
    map: AliasMap<u16>,
}

impl ModelLabels {
    /// Interns `aliases` (sorted for stable indices); past [`MAX_MODELS`] they map to `other`.
    pub fn new<'a>(aliases: impl IntoIterator<Item = &'a str>) -> Self {
        let mut sorted: Vec<&str> = aliases.into_iter().collect();
        sorted.sort_unstable();
        let mut names = registry().models.lock().unwrap();
        let mut map = AliasMap::with_capacity_and_hasher(sorted.len(), Default::default());
        for a in sorted {
            let idx = match names.iter().skip(2).position(|n| n == a) {
                Some(i) => (i + 2) as u16,
                None if names.len() < NMODELS => {
                    names.push(a.to_owned());
                    (names.len() - 1) as u16
                }
                None => MODEL_OTHER,
            };
            map.insert(a.to_owned(), idx);
        }
        ModelLabels { map }
    }

    pub fn index(&self, alias: &str) -> u16 {
        self.map.get(alias).copied().unwrap_or(MODEL_OTHER)
    }
}

/// Upstream slot of the configuration's routing table → label index, built at config load like
/// [`ModelLabels`] (interned, append-only across reloads).
#[derive(Debug, Default)]
pub struct UpstreamLabels {
    by_slot: Vec<u16>,
}

impl UpstreamLabels {
    /// Interns every (provider, upstream model) of `upstreams` (indexed by slot).
    pub fn new(upstreams: &[(String, String)]) -> Self {
        let mut names = registry().upstreams.lock().unwrap();
        let by_slot = upstreams
            .iter()
            .map(|key| match names.iter().skip(1).position(|n| n == key) {
                Some(i) => (i + 1) as u16,
                None if names.len() < NUPSTREAMS => {
                    names.push(key.clone());
                    (names.len() - 1) as u16
                }
                None => UPSTREAM_OTHER,
            })
            .collect();
        UpstreamLabels { by_slot }
    }

    pub fn index(&self, slot: usize) -> u16 {
        self.by_slot.get(slot).copied().unwrap_or(UPSTREAM_OTHER)
    }
}

// --- recording (request path) ---

/// How one upstream attempt ended, as its counters see it (reported to the request's record,
/// counted from it when the request ends).
#[derive(Clone, Copy, Debug)]
pub struct Attempted {
    /// The deployment's (provider, upstream model) label.
    pub upstream: u16,
    pub outcome: AttemptOutcome,
    /// It started the deployment's cooldown (repeated failures or its `retry-after`) on its
    /// worker.
    pub cooled: bool,
}

/// An attempt that ended and after which another deployment was tried (the request's last
/// attempt is counted with its [`Sample`]).
pub fn fallback(a: Attempted) {
    with_shard(|s| {
        count_attempt(s, a);
        bump(&s.fallbacks[(a.upstream as usize).min(NUPSTREAMS - 1)], 1);
    });
}

#[inline]
fn count_attempt(s: &Shard, a: Attempted) {
    let u = (a.upstream as usize).min(NUPSTREAMS - 1);
    bump(&s.attempts[u * NOUTCOMES + a.outcome as usize], 1);
    if a.cooled {
        bump(&s.cooldowns[u], 1);
    }
}

/// A retry that the worker's retry budget did not allow.
pub fn retry_budget_exhausted() {
    with_shard(|s| bump(&s.retry_budget_exhausted, 1));
}

/// Access-log lines the sink could not take (`gateway_access_log_dropped_total`). Counted here, not
/// in the access log, so that the scrape reads it without the metrics depending on the log.
static ACCESS_LOG_DROPPED: AtomicU64 = AtomicU64::new(0);

/// One access-log line dropped because its worker's buffer was full.
pub fn access_log_line_dropped() {
    ACCESS_LOG_DROPPED.fetch_add(1, Ordering::Relaxed);
}

pub fn inflight_add(route: Dialect, delta: i64) {
    with_shard(|s| {
        let a = &s.inflight[route_idx(route)];
        a.store(a.load(Ordering::Relaxed) + delta, Ordering::Relaxed);
    })
}

/// What a priced request cost (`gateway_spend_usd_total{key, model}`), in nanodollars.
pub fn spend(key: Option<&Arc<str>>, model: u16, nano: u64) {
    let Some(k) = key else {
        let m = (model as usize).min(NMODELS - 1);
        return with_shard(|s| {
            bump(&s.spend_open[m], nano);
            s.spend_open_seen[m].store(true, Ordering::Relaxed);
        });
    };
    let addr = Arc::as_ptr(k) as *const u8 as usize;
    with_shard(|s| {
        let mut m = s.spend.lock().unwrap();
        let e = m.entry((addr, model)).or_insert_with(|| (key.cloned(), 0));
        e.1 = e.1.wrapping_add(nano);
    })
}

/// Everything one finished request contributes.
pub struct Sample {
    pub route: Dialect,
    pub model: u16,
    pub status: u16,
    pub duration: Duration,
    pub upstream: Option<Duration>,
    pub first_token: Option<Duration>,
    pub tokens_in: u64,
    pub tokens_out: u64,
    pub tokens_cached: u64,
    pub rejected: Option<(Scope, Kind)>,
    /// The request's last upstream attempt, once it ended (the earlier ones: [`fallback`]).
    pub attempt: Option<Attempted>,
}

pub fn record(x: &Sample) {
    let r = route_idx(x.route);
    let m = (x.model as usize).min(NMODELS - 1);
    with_shard(|s| {
        bump(
            &s.requests[(r * NMODELS + m) * NSTATUS + status_idx(x.status)],
            1,
        );
        if x.tokens_in > 0 {
            bump(&s.tokens[(r * NMODELS + m) * 3], x.tokens_in);
        }
        if x.tokens_out > 0 {
            bump(&s.tokens[(r * NMODELS + m) * 3 + 1], x.tokens_out);
        }
        if x.tokens_cached > 0 {
            bump(&s.tokens[(r * NMODELS + m) * 3 + 2], x.tokens_cached);
        }
        if let Some((scope, kind)) = x.rejected {
            let sc = match scope {
                Scope::Key => 0,
                Scope::Model => 1,
            };
            let k = match kind {
                Kind::Requests => 0,
                Kind::Tokens => 1,
                Kind::Concurrency => 2,
            };
            bump(
                &s.rejections[((r * NMODELS + m) * NSCOPES + sc) * NKINDS + k],
                1,
            );
        }
        let obs = |h: Hist, d: Duration| {
            let base = (h as usize * NROUTES + r) * NBUCKETS;
            bump(&s.hist[base + bucket_idx(d.as_secs_f64())], 1);
            bump(
                &s.hist_sum_ns[h as usize * NROUTES + r],
                d.as_nanos() as u64,
            );
        };
        obs(Hist::Duration, x.duration);
        if let Some(u) = x.upstream {
            obs(Hist::Upstream, u);
            obs(Hist::Overhead, x.duration.saturating_sub(u));
        }
        if let Some(t) = x.first_token {
            obs(Hist::FirstToken, t);
        }
        if let Some(a) = x.attempt {
            count_attempt(s, a);
        }
    })
}
