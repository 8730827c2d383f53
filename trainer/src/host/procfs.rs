//! The bits of /proc the bench and the measurements read: CPU time, nice value and peak RSS of the
//! gateway, and who owns a listening TCP port. The machine's and each CPU's CPU time are the
//! engine's (`pgo_engine::host::stat`, which measures how busy the machine is while a training
//! runs), re-exported here.

use anyhow::{bail, Context, Result};

pub use pgo_engine::host::stat::{clock_ticks_per_sec, cpu_times, CpuTimes};

/// CPU time of a process (all its threads), in clock ticks: user space and kernel apart, because
/// PGO and BOLT only change the former.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProcCpu {
    pub user: u64,
    pub system: u64,
}

impl ProcCpu {
    pub fn total(self) -> u64 {
        self.user + self.system
    }

    /// Ticks spent since `earlier`.
    pub fn since(self, earlier: ProcCpu) -> ProcCpu {
        ProcCpu {
            user: self.user.saturating_sub(earlier.user),
            system: self.system.saturating_sub(earlier.system),
        }
    }
}

/// utime and stime of a process from `/proc/PID/stat`.
pub fn parse_stat_cpu(stat: &str) -> Result<ProcCpu> {
    // `pid (comm) state ppid ...`; comm may contain spaces and parentheses, so split after the
    // last ')'. Field 3 (state) is then index 0; utime is field 14, stime field 15.
    let rest = stat
        .rfind(')')
        .map(|i| &stat[i + 1..])
        .context("/proc/PID/stat: no ')' after comm")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    if fields.len() < 13 {
        bail!("/proc/PID/stat: only {} fields after comm", fields.len());
    }
    let utime: u64 = fields[11].parse().context("/proc/PID/stat: utime")?;
    let stime: u64 = fields[12].parse().context("/proc/PID/stat: stime")?;
    Ok(ProcCpu {
        user: utime,
        system: stime,
    })
}

/// The nice value (field 19) from `/proc/PID/stat`.
pub fn parse_stat_nice(stat: &str) -> Option<i64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(16)?.parse().ok()
}

pub fn nice_of(pid: u32) -> Option<i64> {
    parse_stat_nice(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// The calling thread's nice value.
pub fn nice_of_thread() -> Option<i64> {
    parse_stat_nice(&std::fs::read_to_string("/proc/thread-self/stat").ok()?)
}

pub fn proc_cpu(pid: u32) -> Result<ProcCpu> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    parse_stat_cpu(&text)
}

pub fn cpu_ticks(pid: u32) -> Result<u64> {
    proc_cpu(pid).map(ProcCpu::total)
}

/// A `Key:   value` line of `/proc/PID/status`.
pub fn status_field<'a>(status: &'a str, key: &str) -> Option<&'a str> {
    status.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k == key).then(|| v.trim())
    })
}

/// `VmHWM` (peak resident set size) in KiB.
pub fn parse_vm_hwm_kib(status: &str) -> Option<u64> {
    let v = status_field(status, "VmHWM")?;
    v.trim_end_matches("kB").trim().parse().ok()
}

pub fn peak_rss_kib(pid: u32) -> Result<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    parse_vm_hwm_kib(&text).context("no VmHWM in /proc/PID/status")
}

pub fn cpus_allowed_list(pid: u32) -> Option<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status_field(&text, "Cpus_allowed_list").map(str::to_string)
}

/// Inodes of the sockets in state LISTEN on local `port` in a `/proc/net/tcp{,6}` table.
pub fn parse_listen_inodes(table: &str, port: u16) -> Vec<u64> {
    let mut out = Vec::new();
    for line in table.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode ...
        if f.len() < 10 || f[3] != "0A" {
            continue;
        }
        let Some((_, port_hex)) = f[1].rsplit_once(':') else {
            continue;
        };
        if u16::from_str_radix(port_hex, 16).ok() != Some(port) {
            continue;
        }
        if let Ok(inode) = f[9].parse::<u64>() {
            out.push(inode);
        }
    }
    out
}

/// Every LISTEN socket on `port`, IPv4 and IPv6, as seen by this network namespace.
pub fn listen_inodes(port: u16) -> Vec<u64> {
    let mut out = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        if let Ok(text) = std::fs::read_to_string(table) {
            out.extend(parse_listen_inodes(&text, port));
        }
    }
    out
}

/// `socket:[123]` → 123.
pub fn parse_socket_link(link: &str) -> Option<u64> {
    link.strip_prefix("socket:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

/// Socket inodes held open by a process (its fd table).
pub fn socket_inodes_of(pid: u32) -> Result<Vec<u64>> {
    let dir = format!("/proc/{pid}/fd");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&dir).with_context(|| format!("reading {dir}"))? {
        let Ok(entry) = entry else { continue };
        if let Ok(target) = std::fs::read_link(entry.path()) {
            if let Some(inode) = target.to_str().and_then(parse_socket_link) {
                out.push(inode);
            }
        }
    }
    Ok(out)
}

/// Which process holds each socket inode: scans `/proc/*/fd` (best effort; processes of other
/// users may be unreadable).
pub fn owners_of(inodes: &[u64]) -> Vec<(u64, Option<u32>)> {
    let mut owners: Vec<(u64, Option<u32>)> = inodes.iter().map(|&i| (i, None)).collect();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return owners;
    };
    for p in procs.flatten() {
        let Some(pid) = p.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(held) = socket_inodes_of(pid) else {
            continue;
        };
        for (inode, owner) in owners.iter_mut() {
            if owner.is_none() && held.contains(inode) {
                *owner = Some(pid);
            }
        }
    }
    owners
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_with_awkward_comm() {
        // comm with a space and a ')' in it; utime 1234, stime 56.
        let stat = "4242 (gate way) x) S 1 4242 4242 0 -1 4194560 1000 0 0 0 1234 56 0 0 20 0 \
                    3 0 100 123456 789 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0";
        assert_eq!(parse_stat_cpu(stat).unwrap().total(), 1290);
        assert_eq!(
            parse_stat_cpu(stat).unwrap(),
            ProcCpu {
                user: 1234,
                system: 56
            }
        );
        let later = ProcCpu {
            user: 1300,
            system: 60,
        };
        assert_eq!(
            later.since(parse_stat_cpu(stat).unwrap()),
            ProcCpu {
                user: 66,
                system: 4
            }
        );
        assert_eq!(parse_stat_nice(stat), Some(0));
        let niced = stat.replace(" 20 0 3 0 ", " 39 19 3 0 ");
        assert_eq!(parse_stat_nice(&niced), Some(19));
        assert!(parse_stat_cpu("1 (x) S 1 2").is_err());
        assert!(parse_stat_cpu("no paren").is_err());
    }

    #[test]
    fn stat_of_self_parses() {
        let ticks = cpu_ticks(std::process::id()).unwrap();
        // Just that it parses; a test process may well have used under one tick.
        let _ = ticks;
    }

    #[test]
    fn vm_hwm() {
        let status = "Name:\tgateway\nVmPeak:\t  20000 kB\nVmHWM:\t    8192 kB\nVmRSS:\t 4096 kB\n\
                      Cpus_allowed_list:\t0\n";
        assert_eq!(parse_vm_hwm_kib(status), Some(8192));
        assert_eq!(status_field(status, "Cpus_allowed_list"), Some("0"));
        assert_eq!(parse_vm_hwm_kib("Name: x\n"), None);
        assert!(peak_rss_kib(std::process::id()).unwrap() > 0);
    }

    #[test]
    fn net_tcp_listeners() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 111 1 0000000000000000 100 0 0 10 0\n\
   1: 0100007F:1F90 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 222 1 0000000000000000 20 4 30 10 -1\n\
   2: 00000000:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 333 1 0000000000000000 100 0 0 10 0\n\
   3: 0100007F:1F91 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 444 1 0000000000000000 100 0 0 10 0\n";
        // Port 8080 = 0x1F90: two listeners (the established socket on it does not count).
        assert_eq!(parse_listen_inodes(table, 8080), vec![111, 333]);
        assert_eq!(parse_listen_inodes(table, 8081), vec![444]);
        assert!(parse_listen_inodes(table, 9).is_empty());
        let v6 = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 00000000000000000000000001000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 555 1 0000000000000000 100 0 0 10 0\n";
        assert_eq!(parse_listen_inodes(v6, 8080), vec![555]);
    }

    #[test]
    fn socket_links() {
        assert_eq!(parse_socket_link("socket:[98765]"), Some(98765));
        assert_eq!(parse_socket_link("pipe:[1]"), None);
        assert_eq!(parse_socket_link("/dev/null"), None);
    }

    #[test]
    fn finds_own_listener() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let inodes = listen_inodes(port);
        assert_eq!(inodes.len(), 1, "one listener on {port}");
        let mine = socket_inodes_of(std::process::id()).unwrap();
        assert!(mine.contains(&inodes[0]));
        drop(l);
        assert!(listen_inodes(port).is_empty());
    }
}
