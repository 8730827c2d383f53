//! The upkeep of one build of the policies' leases, on the store's thread: idle rate leases given
//! back, debt and what the fallback admitted handed over, held slots renewed, every tick and at
//! once when the store is up again.

use std::sync::{Arc, Weak};
use std::time::Duration;

use super::lease::RateLease;
use super::slot_lease::SlotLease;
use super::store::Store;

/// How often idle leases are given back and held slots renewed (at most; a third of the slot
/// TTL when that is shorter).
const TICK: Duration = Duration::from_secs(1);

/// Every lease of one build of the policies, for the maintenance task.
#[derive(Default)]
pub struct Leases {
    pub rates: Vec<Weak<RateLease>>,
    pub slots: Vec<Weak<SlotLease>>,
}

/// Runs on the store's thread until every lease of `leases` is gone (the policies were
/// reloaded or the gateway stops): renews, gives back and hands over each tick, and at once
/// when the store is up again.
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
