//! A [`SlotLease`]: this replica's concurrency slots of one shared `max_concurrent` policy,
//! registered in Redis under this replica's holder name with a time to live (`scripts::SLOTS`),
//! renewed every maintenance tick while any is held: a replica that dies frees its slots within
//! the TTL. Spare slots (held, not in use: up to the recent peak in use plus a quarter) are kept
//! only while Redis has at least as many free for the others; otherwise a released slot goes
//! back at once.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use tokio::sync::Notify;

use super::lease::{wait_answer, Got};
use super::scripts;
use super::store::Store;

static SLOTS: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(scripts::SLOTS));

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

    /// Slots this replica's requests hold from the lease now.
    pub fn in_use(&self) -> u32 {
        split(self.state.load(Ordering::Relaxed)).1
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
    pub(super) fn tick(self: &Arc<Self>) {
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
