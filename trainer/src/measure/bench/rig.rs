//! Child processes of a batch: the mock upstream and one fresh gateway per leg, each pinned to
//! its CPU; the gateway's config, readiness, port-ownership preflight and clean stop.

use super::procfs;
use anyhow::{bail, Context, Result};
use std::net::SocketAddr;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

const READY_TIMEOUT: Duration = Duration::from_secs(20);
const STOP_TIMEOUT: Duration = Duration::from_secs(20);

/// A scratch directory removed on drop.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new() -> Result<Scratch> {
        let base = std::env::temp_dir();
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let dir = base.join(format!("trainer-bench-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(Scratch(dir))
    }
}

/// Remove scratch directories left by benches that were killed (`trainer-bench-PID-*` whose
/// PID no longer runs).
pub fn sweep_stale_scratch() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix("trainer-bench-")) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Pin the child to `cpu`, give it `nice` (best effort: without the privilege it keeps its
/// priority, which the caller reads back), and make it a session leader: its own process group,
/// so that whatever it spawns can be killed with it, and its own scheduler autogroup, whose nice
/// the caller sets.
fn pinned(cmd: &mut Command, cpu: Option<usize>, nice: Option<i32>) {
    // SAFETY: the closure only makes async-signal-safe syscalls.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            if let Some(cpu) = cpu {
                if super::pin::set_affinity_raw(0, cpu) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            if let Some(n) = nice {
                let _ = libc::setpriority(libc::PRIO_PROCESS, 0, n);
            }
            Ok(())
        });
    }
}

fn tail(path: &Path, max: usize) -> String {
    let Ok(bytes) = std::fs::read(path) else {
        return String::new();
    };
    let start = bytes.len().saturating_sub(max);
    String::from_utf8_lossy(&bytes[start..]).trim().to_string()
}

/// A child that is killed on drop unless it was stopped cleanly.
pub struct Proc {
    pub child: Option<Child>,
    pub log: PathBuf,
    pub what: String,
    /// Its slot in the interrupt cleanup's list of process groups.
    slot: Option<usize>,
}

impl Proc {
    pub fn new(child: Child, log: PathBuf, what: String) -> Proc {
        let slot = super::cleanup::track(child.id());
        Proc {
            child: Some(child),
            log,
            what,
            slot,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    pub fn log_tail(&self) -> String {
        tail(&self.log, 1500)
    }

    fn exited(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// SIGTERM, then wait for the exit (SIGKILL after a timeout).
    pub fn terminate(&mut self) -> Result<ExitStatus> {
        let Some(mut child) = self.child.take() else {
            bail!("{}: already stopped", self.what);
        };
        // SAFETY: kill has no memory-safety preconditions; the pid is our unreaped child.
        unsafe {
            libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
        }
        let deadline = Instant::now() + STOP_TIMEOUT;
        loop {
            if let Some(st) = child.try_wait()? {
                super::cleanup::untrack(self.slot.take());
                return Ok(st);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                bail!(
                    "{} did not exit within {STOP_TIMEOUT:?} of SIGTERM (killed)",
                    self.what
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SAFETY: kill has no memory-safety preconditions; the group is the child's own.
            unsafe {
                libc::kill(-(c.id() as libc::pid_t), libc::SIGKILL);
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        super::cleanup::untrack(self.slot.take());
    }
}

pub fn describe_exit(st: ExitStatus) -> String {
    match (st.code(), st.signal()) {
        (Some(c), _) => format!("exit status {c}"),
        (None, Some(s)) => format!("killed by signal {s}"),
        _ => format!("{st}"),
    }
}

/// Start `MOCK_BIN mock --listen 127.0.0.1:0 --addr-file F`, pinned; returns once the address
/// file is written.
pub fn start_mock(
    mock_bin: &Path,
    scratch: &Path,
    cpu: Option<usize>,
    nice: Option<i32>,
) -> Result<(Proc, SocketAddr)> {
    let addr_file = scratch.join("mock.addr");
    let log = scratch.join("mock.log");
    let _ = std::fs::remove_file(&addr_file);
    let mut cmd = Command::new(mock_bin);
    cmd.arg("mock")
        .arg("--listen")
        .arg("127.0.0.1:0")
        .arg("--addr-file")
        .arg(&addr_file)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log)?);
    pinned(&mut cmd, cpu, nice);
    let child = cmd
        .spawn()
        .with_context(|| format!("starting the mock: {} mock", mock_bin.display()))?;
    if let Some(n) = nice {
        super::pin::set_autogroup_nice(Some(child.id()), n);
    }
    let mut proc = Proc::new(child, log, "mock".into());
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        if let Ok(text) = std::fs::read_to_string(&addr_file) {
            if let Ok(addr) = text.trim().parse::<SocketAddr>() {
                return Ok((proc, addr));
            }
        }
        if let Some(st) = proc.exited() {
            bail!(
                "the mock exited before writing its address ({}): {}",
                describe_exit(st),
                proc.log_tail()
            );
        }
        if Instant::now() > deadline {
            bail!(
                "the mock wrote no address within {READY_TIMEOUT:?}: {}",
                proc.log_tail()
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A free loopback port (bound and released; the preflight checks nobody took it since).
pub fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

/// Start a gateway for one leg, pinned, and wait for `/livez`. Refuses to start when something
/// already listens on the port.
pub fn start_gateway(
    bin: &Path,
    config: &serde_json::Value,
    listen: SocketAddr,
    scratch: &Path,
    leg: usize,
    cpu: Option<usize>,
    nice: Option<i32>,
) -> Result<Proc> {
    let before = procfs::listen_inodes(listen.port());
    if !before.is_empty() {
        bail!(
            "preflight: port {} already has a listener before the gateway starts (held by {:?})",
            listen.port(),
            procfs::owners_of(&before)
        );
    }
    let cfg_path = scratch.join(format!("gateway-{leg}.json"));
    std::fs::write(&cfg_path, serde_json::to_vec_pretty(config)?)?;
    let log = scratch.join(format!("gateway-{leg}.log"));
    let mut cmd = Command::new(bin);
    cmd.arg("--config")
        .arg(&cfg_path)
        .envs(crate::drive::config::gateway_env())
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&log)?)
        .stderr(std::fs::File::options().append(true).open(&log)?);
    pinned(&mut cmd, cpu, nice);
    let child = cmd
        .spawn()
        .with_context(|| format!("starting gateway {}", bin.display()))?;
    if let Some(n) = nice {
        super::pin::set_autogroup_nice(Some(child.id()), n);
    }
    let mut proc = Proc::new(child, log, format!("gateway {}", bin.display()));
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        if let Some(st) = proc.exited() {
            bail!(
                "{} exited before answering /livez ({}): {}",
                proc.what,
                describe_exit(st),
                proc.log_tail()
            );
        }
        if crate::drive::gateway::livez(listen) {
            return Ok(proc);
        }
        if Instant::now() > deadline {
            bail!(
                "{} did not answer GET /livez on {listen} within {READY_TIMEOUT:?}: {}",
                proc.what,
                proc.log_tail()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Port-ownership preflight: every LISTEN socket on the port is in the fd table of `pid`, and
/// there is at least one.
pub fn check_port_owner(port: u16, pid: u32) -> Result<usize> {
    let listeners = procfs::listen_inodes(port);
    if listeners.is_empty() {
        bail!("preflight: no LISTEN socket on port {port} although /livez answered");
    }
    let mine = procfs::socket_inodes_of(pid)?;
    let foreign: Vec<u64> = listeners
        .iter()
        .copied()
        .filter(|i| !mine.contains(i))
        .collect();
    if !foreign.is_empty() {
        bail!(
            "preflight: port {port} has listeners not owned by the gateway the bench started \
             (pid {pid}): {:?}",
            procfs::owners_of(&foreign)
        );
    }
    Ok(listeners.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_owner_preflight() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        assert_eq!(check_port_owner(port, std::process::id()).unwrap(), 1);
        // Held by this test process, so not by a child the bench would have started.
        let child = Command::new("sleep").arg("5").spawn().unwrap();
        let mut p = Proc::new(child, PathBuf::from("/nonexistent"), "sleep".into());
        let err = check_port_owner(port, p.pid()).unwrap_err().to_string();
        assert!(err.contains("not owned"), "{err}");
        drop(l);
        assert!(check_port_owner(port, p.pid())
            .unwrap_err()
            .to_string()
            .contains("no LISTEN"));
        // SIGTERM stop reports how it ended.
        let st = p.terminate().unwrap();
        assert_eq!(describe_exit(st), "killed by signal 15");
    }
}
