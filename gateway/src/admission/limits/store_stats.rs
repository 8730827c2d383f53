//! What the metrics show of the shared store (rendered by `telemetry::metrics`, which reads them
//! here): its state and transitions, its calls by result, the round trips of those calls as the
//! gateway sees them, and the admissions that waited for it or were decided by `on_store_error`.
//!
//! Every call is made and timed on the store's own thread, so the round-trip histogram has one
//! writer; admissions are counted from the workers.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::time::Duration;

use super::store_config::OnError;

/// Upper bounds of the round-trip histogram's buckets, in microseconds: about 1.5x apart from
/// 50 µs to 2 s, fine enough to read a p50 and a p99 from (`bench/limits-hiccups` does) and to
/// see where a `timeout_ms` would cut.
pub const ROUND_TRIP_BOUNDS_US: [u64; 28] = [
    50, 75, 100, 150, 200, 300, 500, 750, 1_000, 1_500, 2_000, 3_000, 5_000, 7_500, 10_000, 15_000,
    20_000, 30_000, 50_000, 75_000, 100_000, 150_000, 200_000, 300_000, 500_000, 750_000,
    1_000_000, 2_000_000,
];
const NBOUNDS: usize = ROUND_TRIP_BOUNDS_US.len();

struct Stats {
    configured: AtomicU8,
    up: AtomicU8,
    to_up: AtomicU64,
    to_down: AtomicU64,
    calls_ok: AtomicU64,
    calls_failed: AtomicU64,
    calls_timed_out: AtomicU64,
    late: AtomicU64,
    waited: AtomicU64,
    fallback: [AtomicU64; 3],
    /// Answered calls by round trip (the last slot: above every bound), their sum and the
    /// longest.
    round_trips: [AtomicU64; NBOUNDS + 1],
    round_trip_sum_us: AtomicU64,
    round_trip_max_us: AtomicU64,
}

#[allow(clippy::declare_interior_mutable_const)]
const ZERO: AtomicU64 = AtomicU64::new(0);

static STATS: Stats = Stats {
    configured: AtomicU8::new(0),
    up: AtomicU8::new(0),
    to_up: ZERO,
    to_down: ZERO,
    calls_ok: ZERO,
    calls_failed: ZERO,
    calls_timed_out: ZERO,
    late: ZERO,
    waited: ZERO,
    fallback: [ZERO; 3],
    round_trips: [ZERO; NBOUNDS + 1],
    round_trip_sum_us: ZERO,
    round_trip_max_us: ZERO,
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
    /// Calls answered after `timeout_ms` (counted in `calls_timed_out` too), whose answer was
    /// still applied.
    pub late: u64,
    /// Admissions that waited for a store answer.
    pub waited: u64,
    /// Admissions decided by `on_store_error`, by decision (local, admit, reject).
    pub fallback: [u64; 3],
    /// Answered calls per bucket of [`ROUND_TRIP_BOUNDS_US`] (not cumulative; the last: above
    /// every bound).
    pub round_trips: [u64; NBOUNDS + 1],
    pub round_trip_sum: Duration,
    pub round_trip_max: Duration,
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
        late: l(&s.late),
        waited: l(&s.waited),
        fallback: [l(&s.fallback[0]), l(&s.fallback[1]), l(&s.fallback[2])],
        round_trips: std::array::from_fn(|i| l(&s.round_trips[i])),
        round_trip_sum: Duration::from_micros(l(&s.round_trip_sum_us)),
        round_trip_max: Duration::from_micros(l(&s.round_trip_max_us)),
    })
}

/// A store was started in this process (its metrics are shown from now on).
pub(super) fn configured() {
    STATS.configured.store(1, Ordering::Relaxed);
}

/// The store entered `up` (true) or `down`.
pub(super) fn transition(up: bool) {
    STATS.up.store(u8::from(up), Ordering::Relaxed);
    let n = if up { &STATS.to_up } else { &STATS.to_down };
    n.fetch_add(1, Ordering::Relaxed);
}

/// How a call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CallEnd {
    /// Answered within `timeout_ms`.
    Ok,
    /// Redis answered with an error, or the connection failed.
    Failed,
    /// No answer within `timeout_ms`.
    TimedOut,
}

pub(super) fn count_call(end: CallEnd) {
    let n = match end {
        CallEnd::Ok => &STATS.calls_ok,
        CallEnd::Failed => &STATS.calls_failed,
        CallEnd::TimedOut => &STATS.calls_timed_out,
    };
    n.fetch_add(1, Ordering::Relaxed);
}

/// An answer that came after `timeout_ms` and was applied all the same.
pub(super) fn count_late() {
    STATS.late.fetch_add(1, Ordering::Relaxed);
}

/// An answered call took `rtt` from sending to its answer (on the store's thread).
pub(super) fn round_trip(rtt: Duration) {
    let us = rtt.as_micros().min(u128::from(u64::MAX)) as u64;
    let b = ROUND_TRIP_BOUNDS_US.partition_point(|&bound| bound < us);
    STATS.round_trips[b].fetch_add(1, Ordering::Relaxed);
    STATS.round_trip_sum_us.fetch_add(us, Ordering::Relaxed);
    STATS.round_trip_max_us.fetch_max(us, Ordering::Relaxed);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_trip_lands_in_the_first_bucket_at_or_above_it() {
        let at = |us: u64| ROUND_TRIP_BOUNDS_US.partition_point(|&b| b < us);
        assert_eq!(at(0), 0);
        assert_eq!(at(50), 0, "le is inclusive");
        assert_eq!(at(51), 1);
        assert_eq!(at(49_000), 18);
        assert_eq!(ROUND_TRIP_BOUNDS_US[18], 50_000);
        assert_eq!(at(3_000_000), NBOUNDS, "above every bound");
    }
}
