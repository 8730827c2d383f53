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

/// `/autogroup-9 nice 0` → 0.
pub fn parse_autogroup_nice(text: &str) -> Option<i32> {
    text.split_whitespace()
        .skip_while(|w| *w != "nice")
        .nth(1)?
        .parse()
        .ok()
}

fn autogroup_path(pid: Option<u32>) -> String {
    match pid {
        Some(p) => format!("/proc/{p}/autogroup"),
        None => "/proc/self/autogroup".into(),
    }
}

/// The nice value of a process's scheduler autogroup (`None`: no autogroups here).
pub fn autogroup_nice(pid: Option<u32>) -> Option<i32> {
    parse_autogroup_nice(&std::fs::read_to_string(autogroup_path(pid)).ok()?)
}

/// Set it. With autogroups on, the kernel shares CPU between sessions first and only then
/// between the processes of a session, so a process's own nice does not lift it above another
/// session's work; the autogroup's does.
pub fn set_autogroup_nice(pid: Option<u32>, nice: i32) -> bool {
    std::fs::write(autogroup_path(pid), nice.to_string()).is_ok()
        && autogroup_nice(pid) == Some(nice)
}

/// Restores this process's autogroup nice on drop.
pub struct AutogroupGuard(Option<i32>);

impl AutogroupGuard {
    /// Set this process's autogroup nice; remembers the old value when it worked.
    pub fn raise(nice: i32) -> (AutogroupGuard, bool) {
        let old = autogroup_nice(None);
        let ok = old.is_some() && set_autogroup_nice(None, nice);
        (AutogroupGuard(if ok { old } else { None }), ok)
    }
}

impl Drop for AutogroupGuard {
    fn drop(&mut self) {
        if let Some(old) = self.0 {
            let _ = set_autogroup_nice(None, old);
        }
    }
}

#[cfg(test)]
mod autogroup_tests {
    use super::*;

    #[test]
    fn parse() {
        assert_eq!(parse_autogroup_nice("/autogroup-9 nice 0\n"), Some(0));
        assert_eq!(parse_autogroup_nice("/autogroup-61 nice -20"), Some(-20));
        assert_eq!(parse_autogroup_nice("garbage"), None);
    }
}
