//! CPU pinning with sched_setaffinity.

use anyhow::{bail, Result};

/// Pin the calling thread (threads it creates afterwards inherit the mask) to one CPU.
pub fn pin_current_thread(cpu: usize) -> Result<()> {
    if set_affinity_raw(0, cpu) != 0 {
        bail!(
            "sched_setaffinity(cpu {cpu}): {}",
            std::io::Error::last_os_error()
        );
    }
    Ok(())
}

/// Async-signal-safe form for `pre_exec`: pins the calling (child) process, returns the raw
/// result (0 on success).
pub fn set_affinity_raw(pid: libc::pid_t, cpu: usize) -> libc::c_int {
    // SAFETY: cpu_set_t is plain data; CPU_ZERO/CPU_SET write within it (CPU_SET ignores
    // indices past its capacity); sched_setaffinity only reads the set.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_ZERO(&mut set);
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(pid, std::mem::size_of::<libc::cpu_set_t>(), &set)
    }
}

/// The CPUs this process may run on.
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: as above; sched_getaffinity fills the set.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pin_a_thread_to_an_allowed_cpu() {
        let cpus = allowed_cpus();
        assert!(!cpus.is_empty());
        let target = *cpus.last().unwrap();
        std::thread::spawn(move || {
            pin_current_thread(target).unwrap();
            let now = allowed_cpus();
            assert_eq!(now, vec![target]);
        })
        .join()
        .unwrap();
    }
}
