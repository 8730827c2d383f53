//! Cleanup when the bench is interrupted. The mock and the gateways run in their own sessions
//! (for their autogroups), so a Ctrl-C at the terminal does not reach them; and the bench's
//! autogroup nice would stay raised. On SIGINT/SIGTERM/SIGHUP the handler kills the children's
//! process groups, restores the autogroup nice, and exits — with async-signal-safe calls only.

use std::sync::atomic::{AtomicI32, Ordering};

const SLOTS: usize = 4;
static GROUPS: [AtomicI32; SLOTS] = [const { AtomicI32::new(0) }; SLOTS];
/// The autogroup nice to restore; `i32::MIN` for none.
static RESTORE_NICE: AtomicI32 = AtomicI32::new(i32::MIN);

/// Remember a child's process group (its pid: it is a session leader); returns its slot.
pub fn track(pgid: u32) -> Option<usize> {
    for (i, slot) in GROUPS.iter().enumerate() {
        if slot
            .compare_exchange(0, pgid as i32, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            return Some(i);
        }
    }
    None
}

pub fn untrack(slot: Option<usize>) {
    if let Some(i) = slot {
        GROUPS[i].store(0, Ordering::SeqCst);
    }
}

pub fn restore_nice_on_signal(nice: Option<i32>) {
    RESTORE_NICE.store(nice.unwrap_or(i32::MIN), Ordering::SeqCst);
}

/// Decimal digits of `n` into `buf`; returns the used length.
fn itoa(mut n: i32, buf: &mut [u8; 12]) -> usize {
    let neg = n < 0;
    let mut tmp = [0u8; 12];
    let mut len = 0;
    if n == 0 {
        tmp[0] = b'0';
        len = 1;
    }
    while n != 0 {
        let d = (n % 10).unsigned_abs() as u8;
        tmp[len] = b'0' + d;
        len += 1;
        n /= 10;
    }
    let mut out = 0;
    if neg {
        buf[0] = b'-';
        out = 1;
    }
    for i in (0..len).rev() {
        buf[out] = tmp[i];
        out += 1;
    }
    out
}

extern "C" fn on_signal(sig: libc::c_int) {
    for slot in &GROUPS {
        let g = slot.load(Ordering::SeqCst);
        if g > 0 {
            // SAFETY: kill is async-signal-safe.
            unsafe {
                libc::kill(-g, libc::SIGKILL);
            }
        }
    }
    let nice = RESTORE_NICE.load(Ordering::SeqCst);
    if nice != i32::MIN {
        let mut buf = [0u8; 12];
        let n = itoa(nice, &mut buf);
        // SAFETY: open/write/close are async-signal-safe; the path is a NUL-terminated literal.
        unsafe {
            let fd = libc::open(c"/proc/self/autogroup".as_ptr(), libc::O_WRONLY);
            if fd >= 0 {
                libc::write(fd, buf.as_ptr().cast(), n);
                libc::close(fd);
            }
        }
    }
    // SAFETY: _exit is async-signal-safe.
    unsafe { libc::_exit(128 + sig) }
}

/// Install the handler for SIGINT, SIGTERM and SIGHUP.
pub fn install() {
    // SAFETY: the handler only makes async-signal-safe calls; sigaction reads `sa`.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digits() {
        let mut b = [0u8; 12];
        for n in [0, 7, -20, 19, 12345, i32::MIN + 1] {
            let k = itoa(n, &mut b);
            assert_eq!(std::str::from_utf8(&b[..k]).unwrap(), n.to_string());
        }
    }

    #[test]
    fn slots() {
        let a = track(4_000_001).unwrap();
        let b = track(4_000_002).unwrap();
        assert_ne!(a, b);
        untrack(Some(a));
        untrack(Some(b));
        untrack(None);
    }
}
