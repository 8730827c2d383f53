//! The limiter's clock: nanoseconds on a monotonic clock, shared by the local limiter and the
//! leases (a lease's "empty until" is written by the store's thread and read by the workers).

use std::sync::OnceLock;

/// One minute: the limits' unit of time and the local limiter's burst tolerance.
pub const WINDOW_NS: u64 = 60_000_000_000;

/// `CLOCK_MONOTONIC` (the clock of `std::time::Instant`) in nanoseconds, read directly: an
/// `Instant` and the `Duration` between two of them cost a limited request their checked
/// arithmetic on every read.
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write; CLOCK_MONOTONIC is always available on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}

fn epoch() -> u64 {
    static E: OnceLock<u64> = OnceLock::new();
    *E.get_or_init(monotonic_ns)
}

/// Nanoseconds on a monotonic clock; starts at one window so that `now - WINDOW` never wraps.
pub fn now_ns() -> u64 {
    let epoch = epoch();
    monotonic_ns().saturating_sub(epoch) + WINDOW_NS
}
