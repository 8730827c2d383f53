//! A throwaway `redis-server` on 127.0.0.1 for shapes of the `shared-limits` posture: the
//! gateway's shared quota store while the shape runs (in the training sandbox too, where the
//! network is loopback only). No persistence, a scratch directory, stopped with the shape.

use anyhow::{anyhow, bail, Context, Result};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The oldest Redis whose scripts may call `TIME` before writing (script effects replication).
const MIN_MAJOR: u32 = 5;
const READY_TIMEOUT: Duration = Duration::from_secs(10);

pub struct RedisServer {
    child: Option<Child>,
    addr: SocketAddr,
    dir: PathBuf,
}

/// The major version `bin --version` reports (`Redis server v=7.0.15 sha=...`).
fn major_version(bin: &Path) -> Result<u32> {
    let out = Command::new(bin)
        .arg("--version")
        .output()
        .with_context(|| format!("running {} --version", bin.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_whitespace()
        .find_map(|w| w.strip_prefix("v="))
        .and_then(|v| v.split('.').next()?.parse().ok())
        .ok_or_else(|| {
            anyhow!(
                "{} --version printed no version: {:?}",
                bin.display(),
                text.trim()
            )
        })
}

impl RedisServer {
    /// Starts `bin` on a free loopback port with its data directory under `scratch`, and waits
    /// until it answers `PING`.
    pub fn start(bin: &Path, scratch: &Path) -> Result<RedisServer> {
        let major = major_version(bin)?;
        if major < MIN_MAJOR {
            bail!(
                "{} is Redis {major}; {MIN_MAJOR} or newer is required",
                bin.display()
            );
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .context("finding a free port for redis-server")?
            .port();
        let dir = scratch.join(format!("redis-{port}"));
        std::fs::create_dir_all(&dir)?;
        let log = std::fs::File::create(dir.join("redis.log"))?;
        let child = Command::new(bin)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let mut r = RedisServer {
            child: Some(child),
            addr: ([127, 0, 0, 1], port).into(),
            dir,
        };
        let deadline = Instant::now() + READY_TIMEOUT;
        while !r.pong() {
            if let Some(c) = r.child.as_mut() {
                if let Some(st) = c.try_wait()? {
                    bail!("redis-server exited at start ({st}); {}", r.log_tail());
                }
            }
            if Instant::now() > deadline {
                bail!(
                    "redis-server did not answer PING within {READY_TIMEOUT:?}; {}",
                    r.log_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(r)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    fn pong(&self) -> bool {
        let Ok(mut s) = TcpStream::connect_timeout(&self.addr, Duration::from_millis(200)) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
        let mut buf = [0u8; 7];
        s.write_all(b"PING\r\n").is_ok() && s.read_exact(&mut buf).is_ok() && &buf == b"+PONG\r\n"
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        format!(
            "redis-server log tail:\n  {}",
            lines[lines.len().saturating_sub(8)..].join("\n  ")
        )
    }

    /// SIGTERM and wait (bounded); the shape's store is not needed past its gateway.
    pub fn stop(mut self) -> Result<()> {
        let Some(mut c) = self.child.take() else {
            return Ok(());
        };
        unsafe {
            libc::kill(c.id() as i32, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if c.try_wait()?.is_some() {
                return Ok(());
            }
            if Instant::now() > deadline {
                let _ = c.kill();
                let _ = c.wait();
                bail!("redis-server did not exit within 10 s of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_or_versionless_binary_is_refused_with_its_name() {
        let scratch = std::env::temp_dir();
        let e = RedisServer::start(Path::new("/nonexistent/redis-server"), &scratch)
            .err()
            .unwrap();
        assert!(
            format!("{e:#}").contains("/nonexistent/redis-server"),
            "{e:#}"
        );
        let e = RedisServer::start(Path::new("/bin/true"), &scratch)
            .err()
            .unwrap();
        assert!(format!("{e:#}").contains("printed no version"), "{e:#}");
    }
}
