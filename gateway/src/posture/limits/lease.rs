//! Leases: the part of a shared policy this replica holds. Requests are admitted from the lease
//! with the same atomic operations as the local limiter; only refilling, giving back and
//! renewing a lease talk to the store, from the store's thread, in one script call each.
//!
//! - A [`RateLease`] (requests or tokens per minute) holds units taken from the policy's bucket
//!   in Redis (`scripts::BUCKET`). It asks for more when it falls below half of its size, before it runs
//!   out, so that a steady stream of requests never waits for Redis; its size is what this replica
//!   used in the last [`HORIZON`], and Redis grants at most 1/[`SHARE`] of what is left, so near
//!   the limit leases shrink to single units. Token charges after the response (real usage) are
//!   taken from the lease; a lease in debt hands the debt to Redis at once. A lease unused for a
//!   maintenance tick is given back.
//! - A [`SlotLease`] (max_concurrent) holds concurrency slots registered in Redis under this
//!   replica's holder name with a time to live (`scripts::SLOTS`), renewed every tick while any is held:
//!   a replica that dies frees its slots within the TTL. Spare slots (held, not in use: up to the
//!   recent peak in use plus a quarter) are kept only while Redis has at least as many free for
//!   the others; otherwise a released slot goes back at once.
//!
//! What this gives (docs/operations.md, "Shared limits", has the measurements):
//! - Never more admitted than the shared bucket or the shared slot count allows, since every
//!   admitted request was paid for in Redis before it was admitted; the exceptions are a Redis
//!   restarted empty (its buckets start full again) and a holder whose heartbeats stop while it
//!   still serves (its slots expire). Tokens overshoot as the local limiter's do: by the usage of
//!   requests admitted while the bucket was not yet in debt.
//! - Fewer admitted than allowed by at most what other replicas hold unused: their leases (a few
//!   units near the limit, one [`HORIZON`] of their own rate far from it) until they use or
//!   return them.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Weak};
use std::time::Duration;

use tokio::sync::Notify;

use crate::posture::limits::clock::now_ns;
use crate::posture::limits::scripts;
use crate::posture::limits::store::Store;

/// A lease is sized to last this long at this replica's own rate.
pub const HORIZON: Duration = Duration::from_millis(100);
/// A grant is at most 1/SHARE of what is left in Redis.
pub const SHARE: i64 = 4;
/// How often idle leases are given back and held slots renewed (at most; a third of the slot
/// TTL when that is shorter).
const TICK: Duration = Duration::from_secs(1);

static BUCKET: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(scripts::BUCKET));
static SLOTS: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(scripts::SLOTS));

/// What a lease could do for a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Got {
    /// Taken from the lease.
    Yes,
    /// The shared policy has nothing left; retry after this long.
    Empty(Duration),
    /// The store cannot answer: `on_store_error` decides.
    Unavailable,
    /// Only the store can tell (the caller did not want to wait).
    WouldWait,
}

/// A request's share of the wait for the store: returns `Got::Unavailable` past `deadline`.
async fn wait_answer(notified: impl Future<Output = ()>, deadline: tokio::time::Instant) -> bool {
    tokio::time::timeout_at(deadline, notified).await.is_ok()
}

// --- rate (requests or tokens per minute) ---

/// What a bucket call asks for.
#[derive(Debug, Clone, Copy)]
enum Ask {
    /// Top the lease up (at least this many units).
    Need(i64),
    /// Give everything back (the lease sat idle).
    Release,
}

/// This replica's lease on one shared rate policy.
pub struct RateLease {
    store: Arc<Store>,
    /// The Redis key (prefix, scope, name and kind: no secret).
    key: String,
    /// The limit: units per window (a minute; a spend budget's period).
    per_minute: u64,
    /// The window, microseconds (`scripts::BUCKET`'s ARGV[5]).
    window_us: u64,
    /// Units held; below zero it is debt not yet handed to Redis.
    balance: AtomicI64,
    /// Below this the lease is refilled before it runs out.
    low: AtomicI64,
    /// A call is in flight (at most one per lease).
    pending: AtomicBool,
    /// `now_ns` until which the store said the bucket has nothing left.
    empty_until: AtomicU64,
    /// Units refunded while the store said the bucket was empty, owed to Redis: not the lease's
    /// to admit with (an over-estimate's refund would otherwise admit request after request
    /// while the shared bucket is in debt), handed over with the next call.
    give_back: AtomicI64,
    /// Units left in Redis after its last answer (for `x-ratelimit-remaining-*`).
    left: AtomicI64,
    /// The size estimate, kept by the store's thread: when the last answer came, the balance
    /// right after it, and the size it gave.
    last_answer: AtomicU64,
    balance_after: AtomicI64,
    target: AtomicI64,
    /// Balance seen at the last maintenance tick: unchanged and positive means idle.
    seen: AtomicI64,
    /// Requests waiting for an answer: a refill brings enough for all of them.
    waiting: AtomicI64,
    answered: Notify,
}

impl std::fmt::Debug for RateLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLease")
            .field("key", &self.key)
            .field("balance", &self.balance.load(Ordering::Relaxed))
            .finish()
    }
}

impl RateLease {
    /// A lease of `per_minute` units per `window_ns` (a minute, except for a spend budget).
    pub fn new(store: &Arc<Store>, key: String, per_minute: u64, window_ns: u64) -> Arc<RateLease> {
        Arc::new(RateLease {
            store: store.clone(),
            key,
            per_minute,
            window_us: window_ns / 1000,
            balance: AtomicI64::new(0),
            low: AtomicI64::new(1),
            pending: AtomicBool::new(false),
            empty_until: AtomicU64::new(0),
            give_back: AtomicI64::new(0),
            left: AtomicI64::new(per_minute as i64),
            last_answer: AtomicU64::new(0),
            balance_after: AtomicI64::new(0),
            target: AtomicI64::new(1),
            seen: AtomicI64::new(0),
            waiting: AtomicI64::new(0),
            answered: Notify::new(),
        })
    }

    /// Takes `n` units (`n = 0`: only checks that one is left, as tokens are checked before the
    /// call and charged after it).
    fn take(&self, n: i64) -> bool {
        let need = n.max(1);
        let mut b = self.balance.load(Ordering::Relaxed);
        loop {
            if b < need {
                return false;
            }
            if n == 0 {
                return true;
            }
            match self
                .balance
                .compare_exchange_weak(b, b - n, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return true,
                Err(x) => b = x,
            }
        }
    }

    /// Takes `n` units from the lease if it can without waiting (asking for more ahead of time
    /// when it runs low).
    pub fn try_now(self: &Arc<Self>, n: i64) -> Got {
        if self.take(n) {
            self.top_up();
            return Got::Yes;
        }
        let until = self.empty_until.load(Ordering::Relaxed);
        if until != 0 {
            let now = now_ns();
            if until > now {
                return Got::Empty(Duration::from_nanos(until - now));
            }
        }
        if !self.store.is_up() {
            return Got::Unavailable;
        }
        Got::WouldWait
    }

    /// [`RateLease::try_now`], waiting for the store (until `deadline`) when only it can tell;
    /// `need` is what a refill must bring at least.
    pub async fn acquire(
        self: &Arc<Self>,
        n: i64,
        need: i64,
        deadline: tokio::time::Instant,
    ) -> Got {
        self.waiting.fetch_add(need, Ordering::Relaxed);
        // Until the lease serves this request, the store says the bucket is empty, or the store
        // cannot answer in time: an answer that others took first is asked again.
        let got = loop {
            let notified = self.answered.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            match self.try_now(n) {
                Got::WouldWait => {}
                g => break g,
            }
            self.call(Ask::Need(need));
            if !wait_answer(notified, deadline).await {
                break Got::Unavailable;
            }
        };
        self.waiting.fetch_sub(need, Ordering::Relaxed);
        got
    }

    /// Gives units back to the lease (a rolled-back admission, an over-estimate of tokens).
    pub fn refund(self: &Arc<Self>, n: i64) {
        if self.empty_until.load(Ordering::Relaxed) != 0 {
            // The shared bucket is empty: the units go back to it, not to this lease.
            self.give_back.fetch_add(n, Ordering::Relaxed);
            if self.store.is_up() {
                self.call(Ask::Need(0));
            }
            return;
        }
        let b = self.balance.fetch_add(n, Ordering::Relaxed) + n;
        if b > 2 * self.target.load(Ordering::Relaxed) + 1 && self.store.is_up() {
            self.call(Ask::Need(0));
        }
    }

    /// Charges units to the lease, past zero if need be (tokens after the response).
    pub fn charge(self: &Arc<Self>, n: i64) {
        self.balance.fetch_sub(n, Ordering::Relaxed);
        self.top_up();
    }

    /// Refills (and hands debt over) when the balance fell below the low mark.
    fn top_up(self: &Arc<Self>) {
        if self.balance.load(Ordering::Relaxed) < self.low.load(Ordering::Relaxed)
            && self.store.is_up()
        {
            self.call(Ask::Need(0));
        }
    }

    /// Time for one unit to come back at the policy's rate.
    fn unit_time(&self) -> Duration {
        Duration::from_micros(self.window_us / self.per_minute.max(1))
    }

    /// `(remaining, time until full)` as this replica knows them, for `x-ratelimit-*`.
    pub fn remaining(&self) -> (u64, Duration) {
        let left = self.left.load(Ordering::Relaxed) + self.balance.load(Ordering::Relaxed);
        let left = left.clamp(0, self.per_minute as i64) as u64;
        let missing = self.per_minute - left;
        (left, self.unit_time() * missing.min(u32::MAX as u64) as u32)
    }

    /// Starts a call unless one is in flight (its answer serves the waiters of both).
    fn call(self: &Arc<Self>, ask: Ask) {
        if self.pending.swap(true, Ordering::Acquire) {
            return;
        }
        let me = self.clone();
        self.store.spawn(async move { me.run(ask).await });
    }

    /// On the store's thread: size the lease from this replica's rate, hand over debt or an
    /// excess, ask for what is missing, and wake the waiters.
    async fn run(&self, ask: Ask) {
        let now = now_ns();
        let last = self.last_answer.load(Ordering::Relaxed);
        let b = self.balance.load(Ordering::Relaxed);
        let mut target = self.target.load(Ordering::Relaxed);
        if last != 0 && now > last {
            let used = (self.balance_after.load(Ordering::Relaxed) - b).max(0) as f64;
            let per_horizon = used * HORIZON.as_nanos() as f64 / (now - last) as f64;
            target = (per_horizon.ceil() as i64).clamp(1, self.per_minute as i64);
        }
        let (delta, want) = match ask {
            Ask::Release => {
                let give = self.balance.swap(0, Ordering::Relaxed);
                (give, 0)
            }
            Ask::Need(need) => {
                target = target.max(need).max(self.waiting.load(Ordering::Relaxed));
                let mut delta = 0;
                if b < 0 {
                    // The debt goes to Redis; the lease starts again from zero.
                    self.balance.fetch_add(-b, Ordering::Relaxed);
                    delta = b;
                } else if b > 2 * target
                    && self
                        .balance
                        .compare_exchange(b, target, Ordering::Relaxed, Ordering::Relaxed)
                        .is_ok()
                {
                    delta = b - target;
                }
                let have = self.balance.load(Ordering::Relaxed).max(0);
                let want = (target - have).max(need - have).max(0);
                (delta, if delta > 0 { 0 } else { want })
            }
        };
        let back = self.give_back.swap(0, Ordering::Relaxed);
        let delta = delta + back;
        if delta != 0 || want != 0 {
            let mut inv = BUCKET.prepare_invoke();
            inv.key(&self.key)
                .arg(self.per_minute)
                .arg(delta)
                .arg(want)
                .arg(SHARE)
                .arg(self.window_us);
            match self.store.call(&inv).await {
                Ok(v) if v.len() == 3 => {
                    let (grant, left, wait_us) = (v[0], v[1], v[2]);
                    let b = self.balance.fetch_add(grant, Ordering::Relaxed) + grant;
                    self.left.store(left, Ordering::Relaxed);
                    let until = if wait_us > 0 && b < 1 {
                        now_ns() + wait_us as u64 * 1000
                    } else {
                        0
                    };
                    self.empty_until.store(until, Ordering::Relaxed);
                    self.balance_after.store(b, Ordering::Relaxed);
                    self.last_answer.store(now_ns(), Ordering::Relaxed);
                    self.target.store(target, Ordering::Relaxed);
                    self.low.store((target / 2).max(1), Ordering::Relaxed);
                }
                // Unanswered (or malformed): what was handed over is the lease's again.
                _ => {
                    self.balance.fetch_add(delta - back, Ordering::Relaxed);
                    self.give_back.fetch_add(back, Ordering::Relaxed);
                }
            }
        }
        self.pending.store(false, Ordering::Release);
        self.answered.notify_waiters();
    }

    /// Maintenance: hands over debt left while the store was down; gives back a lease that sat
    /// unused for a whole tick.
    fn tick(self: &Arc<Self>) {
        if self.pending.load(Ordering::Relaxed) || !self.store.is_up() {
            return;
        }
        let b = self.balance.load(Ordering::Relaxed);
        let seen = self.seen.swap(b, Ordering::Relaxed);
        if b < 0 || self.give_back.load(Ordering::Relaxed) != 0 {
            self.call(Ask::Need(0));
        } else if b > 0 && b == seen {
            self.call(Ask::Release);
        }
    }
}

impl Drop for RateLease {
    /// A reload or the shutdown dropped the policy: what the lease holds (or owes) goes back.
    fn drop(&mut self) {
        let b = *self.balance.get_mut() + *self.give_back.get_mut();
        if b == 0 {
            return;
        }
        let store = self.store.clone();
        let key = std::mem::take(&mut self.key);
        let (per_minute, window_us) = (self.per_minute, self.window_us);
        self.store.spawn(async move {
            let mut inv = BUCKET.prepare_invoke();
            inv.key(&key)
                .arg(per_minute)
                .arg(b)
                .arg(0)
                .arg(SHARE)
                .arg(window_us);
            let _ = store.call(&inv).await;
        });
    }
}

// --- concurrency (max_concurrent) ---

/// What a slots call asks for.
#[derive(Debug, Clone, Copy)]
enum Want {
    /// Enough for the waiting requests, plus a spare.
    More,
    /// What this replica keeps: gives back an excess, renews the rest.
    Fit,
}

/// This replica's concurrency slots of one shared max_concurrent policy.
pub struct SlotLease {
    store: Arc<Store>,
    key: String,
    /// This instance's name in Redis: the replica and which build of the policies.
    holder: String,
    max: u32,
    /// `held << 32 | in_use`, so that a take checks both in one compare-and-swap.
    state: AtomicU64,
    pending: AtomicBool,
    /// Slots this replica keeps held after a release: its recent peak in use plus a spare while
    /// Redis has free slots for the others too; 0 (give back at once) when it has none.
    keep: AtomicU32,
    /// The most in use since the last maintenance tick.
    peak: AtomicU32,
    /// Slots free across replicas after the last answer.
    free: AtomicU32,
    /// In use at the last maintenance tick (idle detection).
    seen: AtomicU64,
    /// Requests waiting for a slot: a call asks for all of them.
    waiting: AtomicU32,
    answered: Notify,
}

impl std::fmt::Debug for SlotLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (held, in_use) = split(self.state.load(Ordering::Relaxed));
        f.debug_struct("SlotLease")
            .field("key", &self.key)
            .field("held", &held)
            .field("in_use", &in_use)
            .finish()
    }
}

fn split(s: u64) -> (u32, u32) {
    ((s >> 32) as u32, s as u32)
}

fn join(held: u32, in_use: u32) -> u64 {
    u64::from(held) << 32 | u64::from(in_use)
}

impl SlotLease {
    pub fn new(store: &Arc<Store>, key: String, holder: String, max: u32) -> Arc<SlotLease> {
        Arc::new(SlotLease {
            store: store.clone(),
            key,
            holder,
            max,
            state: AtomicU64::new(0),
            pending: AtomicBool::new(false),
            keep: AtomicU32::new(0),
            peak: AtomicU32::new(0),
            free: AtomicU32::new(max),
            seen: AtomicU64::new(0),
            waiting: AtomicU32::new(0),
            answered: Notify::new(),
        })
    }

    fn take(&self) -> bool {
        let mut s = self.state.load(Ordering::Relaxed);
        loop {
            let (held, in_use) = split(s);
            if in_use >= held {
                return false;
            }
            match self.state.compare_exchange_weak(
                s,
                join(held, in_use + 1),
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    if in_use + 1 > self.peak.load(Ordering::Relaxed) {
                        self.peak.fetch_max(in_use + 1, Ordering::Relaxed);
                    }
                    return true;
                }
                Err(x) => s = x,
            }
        }
    }

    /// A slot if one is held spare; never waits.
    pub fn try_now(self: &Arc<Self>) -> Got {
        if self.take() {
            return Got::Yes;
        }
        if !self.store.is_up() {
            return Got::Unavailable;
        }
        Got::WouldWait
    }

    /// [`SlotLease::try_now`], asking the store for a slot (until `deadline`) when none is spare.
    pub async fn acquire(self: &Arc<Self>, deadline: tokio::time::Instant) -> Got {
        self.waiting.fetch_add(1, Ordering::Relaxed);
        // Until a slot is this request's, the store says none is free, or it cannot answer in
        // time: a slot that another request took first is asked again.
        let mut asked = false;
        let got = loop {
            let notified = self.answered.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            match self.try_now() {
                Got::WouldWait if asked && self.free.load(Ordering::Relaxed) == 0 => {
                    break Got::Empty(Duration::from_secs(1));
                }
                Got::WouldWait => {}
                g => break g,
            }
            self.call(Want::More);
            if !wait_answer(notified, deadline).await {
                break Got::Unavailable;
            }
            asked = true;
        };
        self.waiting.fetch_sub(1, Ordering::Relaxed);
        got
    }

    /// A request ended: its slot is spare now, or goes back when more are held than kept.
    pub fn release(self: &Arc<Self>) {
        let (held, in_use) = split(self.state.fetch_sub(1, Ordering::Relaxed) - 1);
        if held > in_use && held > self.keep.load(Ordering::Relaxed) && self.store.is_up() {
            self.call(Want::Fit);
        }
    }

    /// Slots free for this replica as it knows them (its spare plus Redis' free after the last
    /// answer), for `x-ratelimit-remaining-concurrency`.
    pub fn remaining(&self) -> u64 {
        let (held, in_use) = split(self.state.load(Ordering::Relaxed));
        u64::from(self.free.load(Ordering::Relaxed) + held.saturating_sub(in_use))
    }

    fn call(self: &Arc<Self>, want: Want) {
        if self.pending.swap(true, Ordering::Acquire) {
            return;
        }
        let me = self.clone();
        self.store.spawn(async move { me.run(want).await });
    }

    /// On the store's thread: state how many slots this holder wants (shrinking the local count
    /// first, so that no take runs past what Redis is told), renew their TTL, wake the waiters.
    async fn run(&self, want: Want) {
        let mut s = self.state.load(Ordering::Relaxed);
        let wanted = loop {
            let (held, in_use) = split(s);
            let keep = self.keep.load(Ordering::Relaxed);
            let wanted = match want {
                Want::More => {
                    let spare = (self.peak.load(Ordering::Relaxed) / 4).max(1);
                    keep.max(in_use + self.waiting.load(Ordering::Relaxed).max(1) + spare)
                }
                Want::Fit => in_use.max(keep.min(held)),
            };
            if wanted >= held {
                break wanted;
            }
            match self.state.compare_exchange_weak(
                s,
                join(wanted, in_use),
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => break wanted,
                Err(x) => s = x,
            }
        };
        let (_, in_use) = split(self.state.load(Ordering::Relaxed));
        let mut inv = SLOTS.prepare_invoke();
        inv.key(&self.key)
            .arg(&self.holder)
            .arg(self.max)
            .arg(in_use)
            .arg(wanted.max(in_use))
            .arg(self.store.config().slot_ttl.as_micros() as u64);
        if let Ok(v) = self.store.call(&inv).await {
            if v.len() == 2 {
                let (held, free) = (v[0].max(0) as u32, v[1].max(0) as u32);
                let mut s = self.state.load(Ordering::Relaxed);
                loop {
                    let (_, in_use) = split(s);
                    match self.state.compare_exchange_weak(
                        s,
                        join(held.max(in_use), in_use),
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    ) {
                        Ok(_) => break,
                        Err(x) => s = x,
                    }
                }
                self.free.store(free, Ordering::Relaxed);
                let (_, in_use) = split(self.state.load(Ordering::Relaxed));
                let peak = self.peak.load(Ordering::Relaxed).max(in_use);
                let spare = (peak / 4).max(1);
                let keep = if free >= spare { peak + spare } else { 0 };
                self.keep.store(keep, Ordering::Relaxed);
            }
        }
        self.pending.store(false, Ordering::Release);
        self.answered.notify_waiters();
    }

    /// Maintenance: renews held slots (re-asserting them after a reconnection, in case Redis
    /// restarted empty) and gives back spare slots of an idle policy.
    fn tick(self: &Arc<Self>) {
        if self.pending.load(Ordering::Relaxed) || !self.store.is_up() {
            return;
        }
        let (held, in_use) = split(self.state.load(Ordering::Relaxed));
        let seen = self.seen.swap(u64::from(in_use), Ordering::Relaxed);
        // The peak decays to what is in use now; an idle policy keeps nothing.
        self.peak.store(in_use, Ordering::Relaxed);
        if held == 0 {
            return;
        }
        if in_use == 0 && seen == 0 {
            self.keep.store(0, Ordering::Relaxed);
        }
        self.call(Want::Fit);
    }
}

impl Drop for SlotLease {
    fn drop(&mut self) {
        let (held, _) = split(*self.state.get_mut());
        if held == 0 {
            return;
        }
        let store = self.store.clone();
        let key = std::mem::take(&mut self.key);
        let holder = std::mem::take(&mut self.holder);
        let (max, ttl) = (self.max, store.config().slot_ttl.as_micros() as u64);
        self.store.spawn(async move {
            let mut inv = SLOTS.prepare_invoke();
            inv.key(&key).arg(&holder).arg(max).arg(0).arg(0).arg(ttl);
            let _ = store.call(&inv).await;
        });
    }
}

// --- maintenance ---

/// Every lease of one build of the policies, for the maintenance task.
#[derive(Default)]
pub struct Leases {
    pub rates: Vec<Weak<RateLease>>,
    pub slots: Vec<Weak<SlotLease>>,
}

/// Runs on the store's thread until every lease of `leases` is gone (the policies were
/// reloaded or the gateway stops): renews and gives back each tick, and at once after a
/// reconnection.
pub fn maintain(store: &Arc<Store>, leases: Leases) {
    let tick = TICK.min(store.config().slot_ttl / 3);
    let s = store.clone();
    store.spawn_background(async move {
        let mut interval = tokio::time::interval(tick);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = interval.tick() => {}
                _ = s.reconnected() => {}
            }
            let mut alive = false;
            for r in leases.rates.iter().filter_map(Weak::upgrade) {
                alive = true;
                r.tick();
            }
            for l in leases.slots.iter().filter_map(Weak::upgrade) {
                alive = true;
                l.tick();
            }
            if !alive {
                return;
            }
        }
    });
}
