//! The global allocator, chosen by measurement (figures in docs/operations.md), and the
//! housekeeping that lets the resident set return to near its idle level after a burst.
//!
//! The default build uses the system allocator (glibc malloc): in the bench its CPU per request
//! was within noise of jemalloc's and mimalloc's, and its idle and peak RSS were the lowest. glibc
//! keeps freed memory in its per-thread arenas, so [`spawn_housekeeping`] calls `malloc_trim(0)`
//! every few seconds from a thread of its own, which hands free pages back to the kernel.
//!
//! `--features mimalloc` or `--features tikv-jemallocator` swaps the allocator, for measuring
//! again on other hardware or workloads; jemalloc then runs its own background purge thread.

use std::time::Duration;

#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[cfg(all(feature = "tikv-jemallocator", not(feature = "mimalloc")))]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read at its initialisation: purge unused dirty pages from a background
/// thread within about a second, instead of only when the allocator is next called.
#[cfg(all(feature = "tikv-jemallocator", not(feature = "mimalloc")))]
#[used]
#[export_name = "_rjem_malloc_conf"]
static JEMALLOC_CONF: &[u8; 53] = b"background_thread:true,dirty_decay_ms:1000,narenas:8\0";

/// The allocator this binary was built with.
pub const NAME: &str = if cfg!(feature = "mimalloc") {
    "mimalloc"
} else if cfg!(feature = "tikv-jemallocator") {
    "jemalloc"
} else {
    "system"
};

const TRIM_EVERY: Duration = Duration::from_secs(5);

/// Returns free heap memory to the kernel (glibc's allocator only; a no-op otherwise).
pub fn release_free_memory() {
    #[cfg(all(
        target_os = "linux",
        target_env = "gnu",
        not(feature = "mimalloc"),
        not(feature = "tikv-jemallocator")
    ))]
    // SAFETY: malloc_trim only walks glibc's own arenas under their locks.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Starts the thread that periodically returns free memory to the kernel. Call once at startup.
pub fn spawn_housekeeping() {
    if NAME != "system" {
        return;
    }
    let _ = std::thread::Builder::new()
        .name("gw-housekeeping".into())
        .stack_size(64 * 1024)
        .spawn(|| loop {
            std::thread::sleep(TRIM_EVERY);
            release_free_memory();
        });
}
