//! A gateway process: started with a config, awaited until it announced its address and `/livez`
//! answers, stopped with SIGTERM and required to exit 0 (a profile is written at a clean exit
//! only), killed if dropped before that; its log's tail names why it failed.

use anyhow::{bail, Context, Result};
use std::net::SocketAddr;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a gateway may take to announce itself and answer `/livez`.
pub const READY_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a gateway may take to exit after SIGTERM.
const EXIT_TIMEOUT: Duration = Duration::from_secs(30);

/// The address the gateway whose log is `log` printed on a line starting with `prefix`: its
/// listener (`listening on ADDR`) or its metrics listener (`metrics listening on ADDR`, printed
/// before it serves). Only a line that starts with the prefix counts.
pub fn printed_addr(log: &Path, prefix: &str) -> Option<SocketAddr> {
    let text = std::fs::read_to_string(log).ok()?;
    text.lines().find_map(|l| {
        l.strip_prefix(prefix)
            .and_then(|a| a.split_whitespace().next())
            .and_then(|a| a.parse().ok())
    })
}

/// A gateway child process, killed (SIGKILL) if dropped before it was reaped.
pub(crate) struct Gateway {
    child: Option<Child>,
    log: PathBuf,
}

impl Gateway {
    pub(crate) fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(12)..].join("\n  ");
        if tail.is_empty() {
            "(gateway log empty)".into()
        } else {
            format!("gateway log tail:\n  {tail}")
        }
    }

    pub(crate) fn pid(&self) -> i32 {
        self.child.as_ref().map(|c| c.id() as i32).unwrap_or(0)
    }

    /// Exit status if it already exited.
    fn try_exited(&mut self) -> Option<std::process::ExitStatus> {
        let c = self.child.as_mut()?;
        match c.try_wait() {
            Ok(Some(st)) => {
                self.child = None;
                Some(st)
            }
            _ => None,
        }
    }

    /// SIGTERM, then wait (bounded) and require exit status 0.
    pub(crate) fn stop(&mut self) -> Result<()> {
        let pid = self.pid();
        if let Some(st) = self.try_exited() {
            bail!(
                "the gateway (pid {pid}) exited before SIGTERM: {}; {}",
                describe(st),
                self.log_tail()
            );
        }
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
        let deadline = Instant::now() + EXIT_TIMEOUT;
        loop {
            if let Some(st) = self.try_exited() {
                if st.success() {
                    return Ok(());
                }
                bail!(
                    "the gateway (pid {pid}) did not exit cleanly after SIGTERM: {}; {}",
                    describe(st),
                    self.log_tail()
                );
            }
            if Instant::now() > deadline {
                bail!(
                    "the gateway (pid {pid}) did not exit within {EXIT_TIMEOUT:?} of SIGTERM; {}",
                    self.log_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn describe(st: std::process::ExitStatus) -> String {
    match (st.code(), st.signal()) {
        (Some(c), _) => format!("exit status {c}"),
        (None, Some(s)) => format!("killed by signal {s}{}", signal_name(s)),
        _ => format!("{st}"),
    }
}

fn signal_name(s: i32) -> &'static str {
    match s {
        libc::SIGTERM => " (SIGTERM: it did not handle the signal)",
        libc::SIGKILL => " (SIGKILL)",
        libc::SIGSEGV => " (SIGSEGV)",
        libc::SIGABRT => " (SIGABRT)",
        libc::SIGBUS => " (SIGBUS)",
        libc::SIGILL => " (SIGILL)",
        _ => "",
    }
}

/// How a gateway process is started: the program and the arguments before `--config` (the
/// gateway binary itself, or a wrapper such as valgrind followed by it), the working directory
/// (where a BOLT-instrumented binary writes its relative profile path), and how long it may take
/// to answer `/livez`.
pub struct Launch<'a> {
    pub argv: &'a [std::ffi::OsString],
    pub cwd: &'a Path,
    pub ready_timeout: Duration,
}

/// Start the gateway and wait until it announced its address and `/livez` answers 200.
pub(crate) fn start_gateway(
    launch: &Launch,
    config: &Path,
    log: &Path,
    env: &[(&str, String)],
) -> Result<(Gateway, SocketAddr)> {
    let logf = std::fs::File::create(log)?;
    let (program, before) = launch
        .argv
        .split_first()
        .context("starting the gateway: empty command line")?;
    let mut cmd = Command::new(program);
    cmd.args(before)
        .arg("--config")
        .arg(config)
        .current_dir(launch.cwd)
        .stdin(Stdio::null())
        .stdout(logf.try_clone()?)
        .stderr(logf)
        .env_remove("LLVM_PROFILE_FILE");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let child = cmd
        .spawn()
        .with_context(|| format!("starting the gateway {}", Path::new(program).display()))?;
    let mut gw = Gateway {
        child: Some(child),
        log: log.to_owned(),
    };
    let ready_timeout = launch.ready_timeout;
    let deadline = Instant::now() + ready_timeout;
    let mut addr: Option<SocketAddr> = None;
    loop {
        if let Some(st) = gw.try_exited() {
            bail!(
                "the gateway exited during startup: {}; {}",
                describe(st),
                gw.log_tail()
            );
        }
        if addr.is_none() {
            addr = printed_addr(log, "listening on ");
        }
        if let Some(a) = addr {
            if livez(a) {
                return Ok((gw, a));
            }
        }
        if Instant::now() > deadline {
            bail!(
                "the gateway was not ready within {ready_timeout:?} ({}); {}",
                match addr {
                    None => "it never printed \"listening on ADDR\"".to_string(),
                    Some(a) => format!("GET http://{a}/livez never answered 200"),
                },
                gw.log_tail()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `GET /livez` answers 200.
pub fn livez(addr: SocketAddr) -> bool {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(500)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(1000)));
    let req = format!("GET /livez HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n");
    if s.write_all(req.as_bytes()).is_err() {
        return false;
    }
    let mut buf = [0u8; 16];
    let mut n = 0;
    while n < 12 {
        match s.read(&mut buf[n..]) {
            Ok(0) | Err(_) => break,
            Ok(k) => n += k,
        }
    }
    buf[..n].starts_with(b"HTTP/1.1 200") || buf[..n].starts_with(b"HTTP/1.0 200")
}
