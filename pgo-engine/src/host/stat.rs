//! The machine's CPU time from `/proc/stat`: every CPU's line and the whole machine's, in clock
//! ticks. The machine-load measurement reads the machine's line; a bench reads one CPU's.

pub fn clock_ticks_per_sec() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as u64
    } else {
        100
    }
}

/// Clock ticks of one CPU from `/proc/stat`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuTimes {
    /// Everything but idle and iowait.
    pub busy: u64,
    pub total: u64,
    /// irq + softirq (part of busy): interrupt work, charged to no process.
    pub irq: u64,
}

/// `cpuN user nice system idle iowait irq softirq steal ...`.
pub fn parse_cpu_line(stat: &str, cpu: usize) -> Option<CpuTimes> {
    parse_cpu_tag(stat, &format!("cpu{cpu}"))
}

/// The machine's line, `cpu user nice ...`: every CPU's ticks summed.
pub fn parse_machine_line(stat: &str) -> Option<CpuTimes> {
    parse_cpu_tag(stat, "cpu")
}

/// How many `cpuN` lines `/proc/stat` has: the machine's CPUs, whatever this process's affinity.
pub fn parse_cpu_count(stat: &str) -> usize {
    stat.lines()
        .filter_map(|l| l.split_whitespace().next()?.strip_prefix("cpu"))
        .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        .count()
}

fn parse_cpu_tag(stat: &str, tag: &str) -> Option<CpuTimes> {
    let line = stat
        .lines()
        .find(|l| l.split_whitespace().next() == Some(tag))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    if v.len() < 7 {
        return None;
    }
    let total: u64 = v.iter().sum();
    let idle = v[3] + v[4];
    Some(CpuTimes {
        busy: total - idle,
        total,
        irq: v[5] + v[6],
    })
}

pub fn cpu_times(cpu: usize) -> Option<CpuTimes> {
    parse_cpu_line(&std::fs::read_to_string("/proc/stat").ok()?, cpu)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_stat_cpu_lines() {
        let stat = "cpu  21682 0 5934 87253 618 0 489 22 0 0\n\
                    cpu0 9216 0 2552 45927 103 0 200 9 0 0\n\
                    cpu1 12466 0 3381 41326 514 0 288 12 0 0\nintr 1 2 3\n";
        // cpu1: total 57987, idle+iowait 41840.
        assert_eq!(
            parse_cpu_line(stat, 1),
            Some(CpuTimes {
                busy: 57987 - 41840,
                total: 57987,
                irq: 288
            })
        );
        let c0 = parse_cpu_line(stat, 0).unwrap();
        assert_eq!(
            (c0.busy, c0.total, c0.irq),
            (9216 + 2552 + 200 + 9, 58007, 200)
        );
        assert_eq!(parse_cpu_line(stat, 2), None);
        assert!(cpu_times(0).is_some());
        let all = parse_machine_line(stat).unwrap();
        assert_eq!((all.busy, all.irq), (21682 + 5934 + 489 + 22, 489));
        assert_eq!(parse_cpu_count(stat), 2);
        assert_eq!(parse_cpu_count("cpu  1 2 3 4 5 6 7\ncpufreq 1\n"), 0);
    }

    #[test]
    fn clock_ticks_are_known() {
        assert!(clock_ticks_per_sec() > 0);
    }
}
