//! Shared by the `posture_*` tests: the real gateway with caller-key environment variables and
//! its metrics address, a metrics scraper and an access-log reader. Builds on `tests/common`.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common;

pub struct Gw {
    pub child: Child,
    pub addr: SocketAddr,
    pub metrics: Option<SocketAddr>,
    pub stderr: mpsc::Receiver<String>,
    /// Every stderr line seen before `listening on`.
    pub startup: Vec<String>,
    pub dir: PathBuf,
}

impl Gw {
    /// SIGTERM; the exit status (None: killed by a signal).
    pub fn terminate(mut self) -> Option<i32> {
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                return st.code();
            }
            assert!(
                Instant::now() < deadline,
                "gateway did not exit after SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn signal_hup(&self) {
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGHUP);
        }
    }

    /// All stderr lines received so far (after startup).
    pub fn drain_stderr(&self) -> Vec<String> {
        self.stderr.try_iter().collect()
    }

    pub fn scrape(&self) -> String {
        let m = self.metrics.expect("metrics listener configured");
        let r = common::get(m, "/metrics");
        assert_eq!(r.status, 200);
        r.text()
    }
}

impl Drop for Gw {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Starts the gateway on `cfg` with extra environment variables (caller keys).
#[allow(clippy::zombie_processes)] // reaped by `Gw`'s Drop; a failed start panics the test
pub fn start(cfg: &Value, env: &[(&str, &str)]) -> Gw {
    let dir = common::tmpdir("posture");
    let path = dir.join("config.json");
    std::fs::write(&path, serde_json::to_vec_pretty(cfg).unwrap()).unwrap();
    // GW_POSTURE_BIN runs the tests against another build (the release binary for the soak).
    let bin = std::env::var_os("GW_POSTURE_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(common::gateway_bin);
    let mut cmd = Command::new(bin);
    cmd.arg("--config")
        .arg(&path)
        .env("GW_TEST_OPENAI_KEY", "sk-upstream-openai-SECRET")
        .env("GW_TEST_ANTHROPIC_KEY", "sk-upstream-anthropic-SECRET")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("start gateway");
    let err = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines() {
            let Ok(line) = line else { break };
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut startup = Vec::new();
    let mut metrics = None;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = rx.recv_timeout(left).unwrap_or_else(|_| {
            panic!("gateway never printed `listening on`; stderr: {startup:#?}")
        });
        if let Some(a) = line.strip_prefix("metrics listening on ") {
            metrics = Some(a.trim().parse().unwrap());
        } else if let Some(a) = line.strip_prefix("listening on ") {
            return Gw {
                child,
                addr: a.trim().parse().unwrap(),
                metrics,
                stderr: rx,
                startup,
                dir,
            };
        }
        startup.push(line);
    }
}

/// The standard test config (`gpt` → openai, `claude` → anthropic, both at the mock) plus the
/// given top-level sections.
pub fn config(mock: SocketAddr, extra: Value) -> Value {
    let mut c = common::config(mock, 5_000);
    for (k, v) in extra.as_object().unwrap() {
        c[k] = v.clone();
    }
    c
}

pub fn chat(model: &str, text: &str) -> Value {
    serde_json::json!({"model": model, "messages": [{"role": "user", "content": text}], "max_tokens": 16})
}

pub fn messages(model: &str, text: &str, stream: bool) -> Value {
    serde_json::json!({"model": model, "max_tokens": 16, "stream": stream,
                       "messages": [{"role": "user", "content": text}]})
}

pub fn post_with(
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
    body: &Value,
) -> common::Resp {
    let mut h = vec![("content-type", "application/json")];
    h.extend_from_slice(headers);
    common::request(addr, "POST", path, &h, &serde_json::to_vec(body).unwrap())
}

/// The value of one sample line of a scrape, by exact `name{labels}` prefix.
pub fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// Access-log lines in `path`, waiting up to 5 s for at least `n`.
pub fn log_lines(path: &Path, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
            .collect();
        if lines.len() >= n || Instant::now() > deadline {
            return lines;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A keep-alive HTTP/1.1 connection for load (responses with content-length or chunked).
pub struct KeepAlive {
    s: TcpStream,
    buf: Vec<u8>,
}

impl KeepAlive {
    pub fn connect(addr: SocketAddr) -> KeepAlive {
        let s = TcpStream::connect(addr).unwrap();
        s.set_nodelay(true).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        KeepAlive { s, buf: Vec::new() }
    }

    /// Sends one request; returns (status, body) or None on a transport error.
    pub fn post(&mut self, path: &str, body: &[u8]) -> Option<(u16, Vec<u8>)> {
        self.send(path, "", body)
    }

    /// Same, with `x-api-key: sk-soak`.
    pub fn post_key(&mut self, path: &str, body: &[u8]) -> Option<(u16, Vec<u8>)> {
        self.send(path, "x-api-key: sk-soak\r\n", body)
    }

    fn send(&mut self, path: &str, extra: &str, body: &[u8]) -> Option<(u16, Vec<u8>)> {
        let head = format!(
            "POST {path} HTTP/1.1\r\nhost: gw\r\ncontent-type: application/json\r\n{extra}content-length: {}\r\n\r\n",
            body.len()
        );
        self.s.write_all(head.as_bytes()).ok()?;
        self.s.write_all(body).ok()?;
        let end = loop {
            if let Some(p) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break p;
            }
            self.fill()?;
        };
        let head = String::from_utf8_lossy(&self.buf[..end]).to_ascii_lowercase();
        let status: u16 = head.split(' ').nth(1)?.parse().ok()?;
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())?;
        self.buf.drain(..end + 4);
        while self.buf.len() < len {
            self.fill()?;
        }
        let body: Vec<u8> = self.buf.drain(..len).collect();
        Some((status, body))
    }

    fn fill(&mut self) -> Option<()> {
        let mut tmp = [0u8; 16 * 1024];
        let n = self.s.read(&mut tmp).ok()?;
        if n == 0 {
            return None;
        }
        self.buf.extend_from_slice(&tmp[..n]);
        Some(())
    }
}

/// `VmHWM` / `VmRSS` of a process in KiB.
pub fn proc_kib(pid: u32, field: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| {
            v.trim_start_matches(':')
                .trim()
                .split(' ')
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or(0)
}
