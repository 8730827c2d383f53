//! The limiter's clock: nanoseconds on a monotonic clock, shared by the local limiter and the
//! leases (a lease's "empty until" is written by the store's thread and read by the workers).

use std::sync::OnceLock;
use std::time::Instant;

/// One minute: the limits' unit of time and the local limiter's burst tolerance.
pub const WINDOW_NS: u64 = 60_000_000_000;

fn epoch() -> Instant {
    static E: OnceLock<Instant> = OnceLock::new();
    *E.get_or_init(Instant::now)
}

/// Nanoseconds on a monotonic clock; starts at one window so that `now - WINDOW` never wraps.
pub fn now_ns() -> u64 {
    epoch().elapsed().as_nanos() as u64 + WINDOW_NS
}
