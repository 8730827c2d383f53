//! Leases: the part of a shared policy this replica holds. Requests are admitted from the lease
//! with the same atomic operations as the local limiter; only refilling, giving back and
//! renewing a lease talk to the store, from the store's thread, in one script call each.
//!
//! - A [`RateLease`] (requests or tokens per minute) holds units taken from the policy's bucket
//!   in Redis (`scripts::BUCKET`). It asks for more when it falls below half of its size, before
//!   it runs out, so that a steady stream of requests never waits for Redis; its size is what
//!   this replica used in the last [`HORIZON`], and Redis grants at most 1/[`SHARE`] of what is
//!   left, so near the limit leases shrink to single units. Token charges after the response
//!   (real usage) are taken from the lease; a lease in debt hands the debt to Redis at once. A
//!   lease unused for a maintenance tick is given back. What the fallback of
//!   `on_store_error: local` admitted while the store could not answer is owed to the bucket
//!   and handed over with the next call ([`RateLease::owe`]).
//! - A [`SlotLease`](super::slot_lease::SlotLease) (max_concurrent) holds concurrency slots.
//!
//! What this gives (docs/operations.md, "Shared limits", has the measurements):
//! - Never more admitted than the shared bucket or the shared slot count allows, since every
//!   admitted request was paid for in Redis before it was admitted, or, admitted by the fallback
//!   during an outage, is paid for when the store answers again; the exceptions are a Redis
//!   restarted empty (its buckets start full again) and a holder whose heartbeats stop while it
//!   still serves (its slots expire). Tokens overshoot as the local limiter's do: by the usage of
//!   requests admitted while the bucket was not yet in debt.
//! - Fewer admitted than allowed by at most what other replicas hold unused: their leases (a few
//!   units near the limit, one [`HORIZON`] of their own rate far from it) until they use or
//!   return them.
//! - A call whose outcome is unknown (sent, never answered) is undone only where undoing cannot
//!   admit more: debt and owed units are kept to hand over again (charged twice at worst),
//!   units given back are not taken back, and a grant that never came is not counted.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use tokio::sync::Notify;

use crate::admission::limits::clock::now_ns;
use crate::admission::limits::scripts;
use crate::admission::limits::store::{Store, Unanswered};

/// A lease is sized to last this long at this replica's own rate.
pub const HORIZON: Duration = Duration::from_millis(100);
/// A grant is at most 1/SHARE of what is left in Redis.
pub const SHARE: i64 = 4;
/// How long a dropped lease (a reload) waits for a store that is down to hand back what it
/// holds and owes.
const DROPPED_WAIT: Duration = Duration::from_secs(10);

static BUCKET: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(scripts::BUCKET));

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
pub(super) async fn wait_answer(
    notified: impl Future<Output = ()>,
    deadline: tokio::time::Instant,
) -> bool {
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
    /// Units the fallback admitted while the store could not answer ([`RateLease::owe`]), owed to
    /// Redis, and since when (`now_ns`; 0: nothing owed): charged as of then with the next call.
    owed: AtomicI64,
    owed_since: AtomicU64,
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
            owed: AtomicI64::new(0),
            owed_since: AtomicU64::new(0),
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

    /// Owes the shared bucket `n` units (`n` < 0: gives them back) that the fallback of
    /// `on_store_error: local` admitted, or refunded, while the store could not answer, as of
    /// `at` (`now_ns`: when the outage began). The next call hands them over: the bucket is then
    /// charged what the replicas admitted during the outage, as of its start (the script's GCRA
    /// form), so that over the outage and after it they admit together what the shared limit
    /// allows, not that plus every replica's fallback.
    pub fn owe(&self, n: i64, at: u64) {
        self.owed.fetch_add(n, Ordering::Relaxed);
        if at != 0 {
            let _ = self
                .owed_since
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| {
                    (t == 0 || at < t).then_some(at)
                });
        }
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

    /// On the store's thread: size the lease from this replica's rate, hand over debt, an excess
    /// and what is owed, ask for what is missing, and wake the waiters.
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
        let (own, want) = match ask {
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
        let owed = self.owed.swap(0, Ordering::Relaxed);
        let owed_at = self.owed_since.swap(0, Ordering::Relaxed);
        // Owed units are charged as of the outage; owed refunds (of units handed over already)
        // are given back now.
        let (charge, refund) = (owed.max(0), (-owed).max(0));
        let delta = own + back + refund;
        if delta != 0 || want != 0 || charge != 0 {
            let age_us = if charge > 0 {
                now_ns().saturating_sub(owed_at) / 1000
            } else {
                0
            };
            let mut inv = BUCKET.prepare_invoke();
            inv.key(&self.key)
                .arg(self.per_minute)
                .arg(delta)
                .arg(want)
                .arg(SHARE)
                .arg(self.window_us)
                .arg(charge)
                .arg(age_us);
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
                // Answered, but not as the script answers: nothing to apply.
                Ok(_) => self.undo(Unanswered::NotRun, own, back, owed, owed_at),
                Err(how) => self.undo(how, own, back, owed, owed_at),
            }
        }
        self.pending.store(false, Ordering::Release);
        self.answered.notify_waiters();
    }

    /// After a call without an answer: what it handed over is the lease's again where Redis
    /// surely did not take it. Where it may have, only what cannot admit more comes back (debt
    /// and owed units, handed over again: charged twice at worst); what was given back stays
    /// given, and a grant that never came is not counted.
    fn undo(&self, how: Unanswered, own: i64, back: i64, owed: i64, owed_at: u64) {
        let surely_not = how == Unanswered::NotRun;
        if surely_not || own < 0 {
            self.balance.fetch_add(own, Ordering::Relaxed);
        }
        if surely_not {
            self.give_back.fetch_add(back, Ordering::Relaxed);
        }
        if surely_not || owed > 0 {
            self.owe(owed, owed_at);
        }
    }

    /// Maintenance: hands over debt and owed units left while the store was down; gives back a
    /// lease that sat unused for a whole tick.
    pub(super) fn tick(self: &Arc<Self>) {
        if self.pending.load(Ordering::Relaxed) || !self.store.is_up() {
            return;
        }
        let b = self.balance.load(Ordering::Relaxed);
        let seen = self.seen.swap(b, Ordering::Relaxed);
        if b < 0
            || self.give_back.load(Ordering::Relaxed) != 0
            || self.owed.load(Ordering::Relaxed) != 0
        {
            self.call(Ask::Need(0));
        } else if b > 0 && b == seen {
            self.call(Ask::Release);
        }
    }
}

impl Drop for RateLease {
    /// A reload or the shutdown dropped the policy: what the lease holds (or owes) goes back.
    fn drop(&mut self) {
        let owed = *self.owed.get_mut();
        let (charge, refund) = (owed.max(0), (-owed).max(0));
        let b = *self.balance.get_mut() + *self.give_back.get_mut() + refund;
        if b == 0 && charge == 0 {
            return;
        }
        let since = *self.owed_since.get_mut();
        let store = self.store.clone();
        let key = std::mem::take(&mut self.key);
        let (per_minute, window_us) = (self.per_minute, self.window_us);
        self.store.spawn(async move {
            // A reload during an outage: what is owed waits a while for the store to be back.
            if !store.is_up() {
                let _ = tokio::time::timeout(DROPPED_WAIT, store.reconnected()).await;
            }
            let mut inv = BUCKET.prepare_invoke();
            inv.key(&key)
                .arg(per_minute)
                .arg(b)
                .arg(0)
                .arg(SHARE)
                .arg(window_us)
                .arg(charge)
                .arg(now_ns().saturating_sub(since) / 1000);
            let _ = store.call(&inv).await;
        });
    }
}
