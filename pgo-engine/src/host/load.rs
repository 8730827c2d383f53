//! How busy the rest of the machine was while a training ran.
//!
//! A BOLT profile counts the branches the binary's code took, and on a small machine how often an
//! async worker parks and wakes depends on what else runs beside it: a BOLT training of the
//! gateway that ran beside another chain's builds overlapped a quiet training by 94.0%, where two
//! quiet trainings overlap by 99.4% (docs/bench-results/streams.md). So `pgo-engine train`
//! records the share of the machine's CPU time that neither it nor the training command's process
//! tree (the binary, its helpers, an emulator) used, and `pgo-engine pin` refuses a profile
//! trained beside other work: a profile pinned from a busy machine fails the freshness check of
//! the next quiet one.

use anyhow::Result;
use serde::Serialize;
use std::time::{Duration, Instant};

use super::stat::{self, CpuTimes};

/// The most CPU time, in percent of the machine, that other work may take while a training runs
/// for its profile to be pinned (`pgo-engine pin`), or for a stale freshness verdict to be final
/// (`pgo-engine check`); `wait-quiet` waits for it. A quiet machine measures under 2%
/// (profiles/README.md); a build beside the training takes 30% and more.
pub const QUIET_MAX_OTHER_CPU_PCT: f64 = 10.0;

/// What a training measured of the machine it ran on (the training record's `machine`).
#[derive(Serialize, Clone, Copy, Debug, PartialEq)]
pub struct MachineLoad {
    /// The machine's CPUs (`/proc/stat`'s `cpuN` lines, not this process's affinity).
    pub cpus: usize,
    /// Wall-clock seconds the measurement spans.
    pub seconds: f64,
    /// CPU time of the engine and its children (the training command's whole tree, once
    /// reaped), in percent of the whole machine over that time.
    pub own_cpu_pct: f64,
    /// CPU time of everything else (other processes and kernel threads; interrupt time, charged
    /// to no process, left out), in percent of the whole machine over that time.
    pub other_cpu_pct: f64,
}

/// A measurement under way: the machine's and this process tree's CPU time at its start.
pub struct Watch {
    started: Instant,
    machine: Option<CpuTimes>,
    own_seconds: f64,
}

impl Watch {
    pub fn start() -> Watch {
        Watch {
            started: Instant::now(),
            machine: read_machine(),
            own_seconds: own_cpu_seconds(),
        }
    }

    /// The load since `start`, once every child whose time should count has been waited for
    /// (a child's CPU time reaches this process's `RUSAGE_CHILDREN` when it is reaped). `None`
    /// where `/proc/stat` cannot be read.
    pub fn finish(&self) -> Option<MachineLoad> {
        let seconds = self.started.elapsed().as_secs_f64();
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        let (before, after) = (self.machine?, stat::parse_machine_line(&stat)?);
        let cpus = stat::parse_cpu_count(&stat);
        let hz = stat::clock_ticks_per_sec() as f64;
        let busy = |t: CpuTimes| (t.busy - t.irq) as f64;
        let machine_seconds = (busy(after) - busy(before)).max(0.0) / hz;
        let own = (own_cpu_seconds() - self.own_seconds).max(0.0);
        Some(shares(cpus, seconds, machine_seconds, own))
    }
}

/// The shares of `cpus` CPUs over `seconds` that this tree (`own` CPU seconds) and everything
/// else (the rest of `machine` busy seconds) used.
fn shares(cpus: usize, seconds: f64, machine: f64, own: f64) -> MachineLoad {
    let capacity = cpus.max(1) as f64 * seconds;
    let pct = |s: f64| {
        if capacity > 0.0 {
            (s / capacity * 1000.0).round() / 10.0
        } else {
            0.0
        }
    };
    MachineLoad {
        cpus,
        seconds: (seconds * 10.0).round() / 10.0,
        own_cpu_pct: pct(own),
        other_cpu_pct: pct((machine - own).max(0.0)),
    }
}

/// Which machine a training ran on (the training record's `host`), so that a stale freshness
/// verdict can say whether the pinned profile was trained on another one: two quiet machines have
/// trained BOLT profiles of one binary that overlap by 92-94% over all functions with no code
/// changed, which the same machine throttled to a third of its CPU does not do (99.3%), hence the
/// checks' overlap of the work alone (nix/README.md, Thresholds). Each part is `None` where the
/// build sandbox cannot read it.
#[derive(Serialize, Debug)]
pub struct Host {
    /// `/proc/cpuinfo`'s first `model name`.
    pub cpu_model: Option<String>,
    /// `/proc/sys/kernel/osrelease`.
    pub kernel: Option<String>,
    /// The kernel's clock source (`tsc`, `kvm-clock`, ...): how the runtime's timer reads time.
    pub clocksource: Option<String>,
}

impl Host {
    pub fn read() -> Host {
        let line = |path: &str| {
            std::fs::read_to_string(path)
                .ok()
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
        };
        Host {
            cpu_model: std::fs::read_to_string("/proc/cpuinfo")
                .ok()
                .and_then(|s| cpu_model(&s)),
            kernel: line("/proc/sys/kernel/osrelease"),
            clocksource: line("/sys/devices/system/clocksource/clocksource0/current_clocksource"),
        }
    }
}

/// The first `model name` of a `/proc/cpuinfo`.
fn cpu_model(cpuinfo: &str) -> Option<String> {
    cpuinfo.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k.trim() == "model name").then(|| v.trim().to_owned())
    })
}

/// `pgo-engine wait-quiet`: before a training is run again because the last one ran beside other
/// work (a training check whose `check` exited with status 3), wait until the machine is quiet.
#[derive(clap::Args)]
pub struct WaitQuietArgs {
    /// The busiest the machine may be, in percent of its CPU over one window, to count as quiet.
    #[arg(long, default_value_t = QUIET_MAX_OTHER_CPU_PCT)]
    pub max_busy_pct: f64,
    /// Seconds over which one busy share is measured.
    #[arg(long, default_value_t = 5)]
    pub window_s: u64,
    /// Seconds to wait at most; then it goes on (exit status 0) and says the machine stayed busy,
    /// since the training that follows measures and records the load itself.
    #[arg(long, default_value_t = 600)]
    pub timeout_s: u64,
}

pub fn wait_quiet_cli(a: WaitQuietArgs) -> Result<()> {
    let started = Instant::now();
    let window = Duration::from_secs(a.window_s.max(1));
    loop {
        let busy = busy_pct_over(window)?;
        let waited = started.elapsed().as_secs();
        if busy <= a.max_busy_pct {
            eprintln!(
                "machine quiet: {busy:.1}% busy over {}s, after {waited}s",
                a.window_s
            );
            return Ok(());
        }
        if waited >= a.timeout_s {
            eprintln!("machine still {busy:.1}% busy after {waited}s; going on");
            return Ok(());
        }
    }
}

/// The whole machine's busy share over `window` (every process, this one included, which only
/// sleeps), in percent; interrupt time is left out, as in [`Watch::finish`].
fn busy_pct_over(window: Duration) -> Result<f64> {
    let read = || read_machine().ok_or_else(|| anyhow::anyhow!("/proc/stat is not readable"));
    let before = read()?;
    std::thread::sleep(window);
    let after = read()?;
    Ok(busy_pct(before, after))
}

/// The busy share, in percent, between two readings of the machine's line.
fn busy_pct(before: CpuTimes, after: CpuTimes) -> f64 {
    let busy = (after.busy - after.irq).saturating_sub(before.busy - before.irq) as f64;
    let total = after.total.saturating_sub(before.total) as f64;
    if total > 0.0 {
        (busy / total * 1000.0).round() / 10.0
    } else {
        0.0
    }
}

fn read_machine() -> Option<CpuTimes> {
    stat::parse_machine_line(&std::fs::read_to_string("/proc/stat").ok()?)
}

/// User and system CPU seconds of this process (every thread) and its reaped children.
fn own_cpu_seconds() -> f64 {
    let of = |who| {
        // SAFETY: getrusage writes the struct it is given and nothing else.
        let mut u: libc::rusage = unsafe { std::mem::zeroed() };
        if unsafe { libc::getrusage(who, &mut u) } != 0 {
            return 0.0;
        }
        let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        tv(u.ru_utime) + tv(u.ru_stime)
    };
    of(libc::RUSAGE_SELF) + of(libc::RUSAGE_CHILDREN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_of_the_machine() {
        // 2 CPUs for 100 s: 200 CPU seconds. The machine was busy 130, the tree used 110.
        let l = shares(2, 100.0, 130.0, 110.0);
        assert_eq!((l.own_cpu_pct, l.other_cpu_pct), (55.0, 10.0));
        // The tree's precise time may exceed the machine's tick count: nothing else ran.
        assert_eq!(shares(2, 100.0, 100.0, 101.0).other_cpu_pct, 0.0);
        assert_eq!(shares(0, 0.0, 1.0, 0.0).other_cpu_pct, 0.0);
    }

    #[test]
    fn busy_share_between_two_readings() {
        let at = |busy, total, irq| CpuTimes { busy, total, irq };
        // 200 ticks passed, 30 busy of which 10 interrupts: 10%.
        assert_eq!(busy_pct(at(100, 1000, 5), at(130, 1200, 15)), 10.0);
        assert_eq!(busy_pct(at(100, 1000, 5), at(100, 1000, 5)), 0.0);
        // A short window on an idle machine measures under any sane threshold.
        assert!(busy_pct_over(Duration::from_millis(50)).unwrap() <= 100.0);
    }

    #[test]
    fn the_host_is_named_by_its_cpu_model() {
        let info = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC\n\nprocessor\t: 1\nmodel name\t: other\n";
        assert_eq!(cpu_model(info).as_deref(), Some("AMD EPYC"));
        assert_eq!(cpu_model("processor\t: 0\n"), None);
        // Here, outside a sandbox, the kernel is readable.
        assert!(Host::read().kernel.is_some());
    }

    #[test]
    fn a_child_counts_as_own_once_reaped() {
        let w = Watch::start();
        // A child that spins for a moment: its time is the tree's, not the machine's rest.
        let st = std::process::Command::new("sh")
            .args(["-c", "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done"])
            .status()
            .unwrap();
        assert!(st.success());
        let l = w.finish().expect("/proc/stat is readable here");
        assert!(l.cpus >= 1 && l.seconds > 0.0);
        assert!(l.own_cpu_pct > 0.0, "{l:?}");
    }
}
