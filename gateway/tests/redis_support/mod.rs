//! Shared by the `limits_store*` tests: a real `redis-server` per test on a free loopback port
//! (stopped, paused, restarted empty at will), a minimal RESP client to look inside it, and
//! several gateway replicas sharing it. Builds on `tests/common` and `tests/posture_support`.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common;
use crate::posture_support as ps;

/// `$REDIS_SERVER`, else Debian's `/usr/bin/redis-server`.
pub fn redis_server_bin() -> PathBuf {
    let bin = std::env::var_os("REDIS_SERVER")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/redis-server"));
    assert!(
        bin.is_file(),
        "{} not found: these tests run a real Redis (apt-get install redis-server, or set REDIS_SERVER)",
        bin.display()
    );
    bin
}

/// A port free right now on 127.0.0.1.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One `redis-server` on 127.0.0.1, no persistence (a restart is a restart empty).
pub struct Redis {
    child: Option<Child>,
    pub port: u16,
    dir: PathBuf,
    extra: Vec<String>,
    /// From `--requirepass`: every command here authenticates first.
    password: Option<String>,
}

impl Redis {
    pub fn start() -> Redis {
        Self::start_with(free_port(), &[])
    }

    /// On `port`, with extra `redis-server` arguments (`--requirepass`, TLS, ...).
    pub fn start_with(port: u16, extra: &[&str]) -> Redis {
        let mut r = Redis {
            child: None,
            port,
            dir: common::tmpdir("redis"),
            extra: extra.iter().map(|s| s.to_string()).collect(),
            password: extra
                .iter()
                .position(|a| *a == "--requirepass")
                .map(|i| extra[i + 1].to_string()),
        };
        r.spawn();
        r
    }

    fn spawn(&mut self) {
        let tls = self.extra.iter().any(|a| a == "--tls-port");
        let mut cmd = Command::new(redis_server_bin());
        if tls {
            cmd.args(["--port", "0", "--tls-port", &self.port.to_string()]);
        } else {
            cmd.args(["--port", &self.port.to_string()]);
        }
        cmd.args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .args(self.extra.iter().filter(|a| *a != "--tls-port"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = cmd.spawn().expect("start redis-server");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < deadline, "redis-server never listened");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    fn pid(&self) -> i32 {
        self.child.as_ref().expect("running").id() as i32
    }

    /// SIGKILL: the connection is lost, every key with it.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Killed and started again on the same port: up, and empty.
    pub fn restart_empty(&mut self) {
        self.kill();
        self.spawn();
    }

    /// SIGSTOP: connections stay open, nothing answers.
    pub fn pause(&self) {
        unsafe {
            libc::kill(self.pid(), libc::SIGSTOP);
        }
    }

    pub fn resume(&self) {
        unsafe {
            libc::kill(self.pid(), libc::SIGCONT);
        }
    }

    /// A fresh connection, authenticated when the server wants a password.
    fn connect(&self) -> (TcpStream, BufReader<TcpStream>) {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut r = BufReader::new(s.try_clone().unwrap());
        if let Some(p) = &self.password {
            s.write_all(&encode(&["AUTH", p])).unwrap();
            assert_eq!(read_resp(&mut r), Resp::Text("OK".into()));
        }
        (s, r)
    }

    /// One command on a fresh connection.
    pub fn cmd(&self, args: &[&str]) -> Resp {
        let (mut s, mut r) = self.connect();
        s.write_all(&encode(args)).unwrap();
        read_resp(&mut r)
    }

    /// Every key under `prefix`.
    pub fn keys(&self, prefix: &str) -> Vec<String> {
        let mut k: Vec<String> = self
            .cmd(&["KEYS", &format!("{prefix}*")])
            .items()
            .into_iter()
            .map(|r| r.text())
            .collect();
        k.sort();
        k
    }

    /// `MONITOR` in the background: every command Redis runs from now on, as text lines.
    pub fn monitor(&self) -> Monitor {
        let (mut s, mut r) = self.connect();
        s.set_read_timeout(None).unwrap();
        s.write_all(&encode(&["MONITOR"])).unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (l, st) = (lines.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut line = String::new();
            while !st.load(Ordering::Relaxed) {
                line.clear();
                match r.read_line(&mut line) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => l.lock().unwrap().push(line.trim_end().to_owned()),
                }
            }
        });
        Monitor {
            lines,
            stop,
            conn: s,
        }
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        if self.child.is_some() {
            self.resume();
        }
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub struct Monitor {
    lines: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    conn: TcpStream,
}

impl Monitor {
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.conn.shutdown(std::net::Shutdown::Both);
    }
}

fn encode(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// A RESP reply.
#[derive(Debug, Clone, PartialEq)]
pub enum Resp {
    Text(String),
    Error(String),
    Int(i64),
    Nil,
    Array(Vec<Resp>),
}

impl Resp {
    pub fn text(&self) -> String {
        match self {
            Resp::Text(s) => s.clone(),
            Resp::Int(i) => i.to_string(),
            other => panic!("not text: {other:?}"),
        }
    }
    pub fn items(&self) -> Vec<Resp> {
        match self {
            Resp::Array(v) => v.clone(),
            Resp::Nil => Vec::new(),
            other => panic!("not an array: {other:?}"),
        }
    }
    /// A `HGETALL` reply as pairs.
    pub fn pairs(&self) -> Vec<(String, String)> {
        self.items()
            .chunks(2)
            .map(|c| (c[0].text(), c[1].text()))
            .collect()
    }
}

fn read_resp(r: &mut impl BufRead) -> Resp {
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    let line = line.trim_end();
    let (tag, rest) = line.split_at(1);
    match tag {
        "+" => Resp::Text(rest.to_owned()),
        "-" => Resp::Error(rest.to_owned()),
        ":" => Resp::Int(rest.parse().unwrap()),
        "$" => {
            let n: i64 = rest.parse().unwrap();
            if n < 0 {
                return Resp::Nil;
            }
            let mut b = vec![0; n as usize + 2];
            r.read_exact(&mut b).unwrap();
            b.truncate(n as usize);
            Resp::Text(String::from_utf8_lossy(&b).into_owned())
        }
        "*" => {
            let n: i64 = rest.parse().unwrap();
            if n < 0 {
                return Resp::Nil;
            }
            Resp::Array((0..n).map(|_| read_resp(r)).collect())
        }
        _ => panic!("bad RESP line {line:?}"),
    }
}

// --- gateways sharing the store ---

/// A minimal chat completion, for the tests' own upstreams.
pub fn chat_completion() -> Value {
    serde_json::json!({"id": "c", "object": "chat.completion", "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})
}

/// The `limits` section with `policies` (keys/models/default_key...) and a store at `url`.
pub fn limits_with_store(policies: Value, store: Value) -> Value {
    let mut l = policies;
    l["store"] = store;
    l
}

/// `n` gateway replicas on one config (same policies, same store), each with its metrics and
/// an access-log file.
pub fn replicas(n: usize, mock: SocketAddr, extra: &Value, env: &[(&str, &str)]) -> Vec<ps::Gw> {
    (0..n)
        .map(|i| {
            let mut e = extra.clone();
            e["metrics"] = serde_json::json!({"listen": "127.0.0.1:0"});
            let dir = common::tmpdir(&format!("replica-{i}"));
            e["access_log"] =
                serde_json::json!({"path": dir.join("access.jsonl").to_string_lossy()});
            let cfg = ps::config(mock, e);
            ps::start(&cfg, env)
        })
        .collect()
}

/// The access-log path `replicas` gave a gateway.
pub fn access_log_of(gw: &ps::Gw) -> PathBuf {
    let cfg: Value =
        serde_json::from_slice(&std::fs::read(gw.dir.join("config.json")).unwrap()).unwrap();
    PathBuf::from(cfg["access_log"]["path"].as_str().unwrap())
}

/// Waits (up to `secs`) until `f` holds, polling every 20 ms.
pub fn eventually(secs: u64, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if f() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Every stderr line the gateway printed so far (startup lines included), kept across calls.
pub struct Log {
    pub lines: Vec<String>,
}

impl Log {
    pub fn new(gw: &ps::Gw) -> Log {
        Log {
            lines: gw.startup.clone(),
        }
    }
    pub fn update(&mut self, gw: &ps::Gw) -> &[String] {
        self.lines.extend(gw.drain_stderr());
        &self.lines
    }
    pub fn has(&mut self, gw: &ps::Gw, needle: &str) -> bool {
        self.update(gw).iter().any(|l| l.contains(needle))
    }
}
