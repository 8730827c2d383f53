//! Test harness: the real gateway binary and the real trainer mock as processes on 127.0.0.1, a
//! minimal HTTP/1.1 client, and a scriptable raw-TCP upstream for what the mock cannot show
//! (request capture, slow answers, cancellation).

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::Value;

pub fn gateway_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_gateway"))
}

/// The trainer binary the tests run as the mock upstream: `TRAINER_BIN` when set (tests/quick
/// sets it), else the one next to the gateway's (`target/debug/trainer`), which is built with
/// `cargo build -p trainer` when it is not there yet, saying so. One that is there is used as it
/// is: after a change to the trainer, build it (`cargo build -p trainer`) or set `TRAINER_BIN`.
pub fn trainer_bin() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            if let Some(bin) = std::env::var_os("TRAINER_BIN") {
                return PathBuf::from(bin);
            }
            let bin = gateway_bin().with_file_name("trainer");
            if !bin.exists() {
                eprintln!(
                    "gateway tests: {} is missing; building it (cargo build -p trainer)",
                    bin.display()
                );
                let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
                let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
                let st = Command::new(cargo)
                    .args(["build", "-p", "trainer"])
                    .current_dir(root)
                    .status()
                    .expect("run cargo build -p trainer");
                assert!(st.success(), "cargo build -p trainer failed");
            }
            bin
        })
        .clone()
}

pub fn tmpdir(tag: &str) -> PathBuf {
    static N: Mutex<u32> = Mutex::new(0);
    let n = {
        let mut g = N.lock().unwrap();
        *g += 1;
        *g
    };
    let d = std::env::temp_dir().join(format!("gw-test-{}-{tag}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

pub struct Proc {
    pub child: Child,
    pub addr: SocketAddr,
    pub stderr: mpsc::Receiver<String>,
}

impl Proc {
    /// SIGTERM, then the exit status (None if it died by a signal).
    pub fn terminate(mut self) -> Option<i32> {
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                return st.code();
            }
            assert!(
                Instant::now() < deadline,
                "process did not exit after SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn signal(&self, sig: i32) {
        unsafe {
            libc::kill(self.child.id() as i32, sig);
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn wait_listening(child: &mut Child, prefix: &'static str) -> (SocketAddr, mpsc::Receiver<String>) {
    let err = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                // Keep draining so the child never blocks on a full pipe.
                continue;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => {
                if let Some(a) = line.strip_prefix(prefix) {
                    return (a.trim().parse().unwrap(), rx);
                }
                seen.push(line);
            }
            Err(_) => panic!("process never printed {prefix:?}; stderr: {seen:#?}"),
        }
    }
}

pub fn start_mock() -> Proc {
    start_mock_args(&[])
}

/// A mock with its own directives for every request (`trainer mock --directives`), or for its
/// first `first` requests only: one deployment of a routed alias that fails, stalls or is slow.
pub fn start_mock_with(directives: &str, first: Option<u64>) -> Proc {
    let n = first.map(|n| n.to_string());
    let mut args = vec!["--directives", directives];
    if let Some(n) = &n {
        args.extend(["--directive-requests", n.as_str()]);
    }
    start_mock_args(&args)
}

/// `gateway validate --config FILE` for the JSON `cfg`: whether it passed, and its stderr.
pub fn validate(cfg: &Value) -> (bool, String) {
    let path = tmpdir("validate").join("config.json");
    std::fs::write(&path, serde_json::to_vec(cfg).unwrap()).unwrap();
    let out = Command::new(gateway_bin())
        .args(["validate", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.success(), err)
}

/// Requests a mock has received (`GET /mock/requests`).
pub fn mock_requests(mock: SocketAddr) -> u64 {
    get(mock, "/mock/requests").json()["requests"]
        .as_u64()
        .unwrap()
}

fn start_mock_args(extra: &[&str]) -> Proc {
    let mut child = Command::new(trainer_bin())
        .args(["mock", "--listen", "127.0.0.1:0"])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start trainer mock");
    let (addr, stderr) = wait_listening(&mut child, "mock listening on ");
    Proc {
        child,
        addr,
        stderr,
    }
}

/// The standard test config: `gpt` → openai provider, `claude` → anthropic provider, both at
/// `upstream`.
pub fn config(upstream: SocketAddr, upstream_ms: u64) -> Value {
    serde_json::json!({
        "listen": "127.0.0.1:0",
        "workers": 1,
        "timeouts": {"upstream_ms": upstream_ms},
        "providers": {
            "up-openai": {"kind": "openai", "base_url": format!("http://{upstream}"), "api_key_env": "GW_TEST_OPENAI_KEY"},
            "up-anthropic": {"kind": "anthropic", "base_url": format!("http://{upstream}"), "api_key_env": "GW_TEST_ANTHROPIC_KEY"},
        },
        "models": {
            "gpt": {"provider": "up-openai", "model": "mock-gpt"},
            "claude": {"provider": "up-anthropic", "model": "mock-claude"},
        }
    })
}

pub fn start_gateway(cfg: &Value) -> Proc {
    let dir = tmpdir("gw");
    let path = dir.join("config.json");
    std::fs::write(&path, serde_json::to_vec_pretty(cfg).unwrap()).unwrap();
    let mut child = Command::new(gateway_bin())
        .arg("--config")
        .arg(&path)
        .env("GW_TEST_OPENAI_KEY", "sk-test-openai")
        .env("GW_TEST_ANTHROPIC_KEY", "sk-test-anthropic")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start gateway");
    let (addr, stderr) = wait_listening(&mut child, "listening on ");
    Proc {
        child,
        addr,
        stderr,
    }
}

/// Mock + gateway in front of it.
pub struct Stack {
    pub gateway: Proc,
    pub mock: Proc,
}

impl Stack {
    pub fn start() -> Stack {
        Self::with_timeout(10_000)
    }
    pub fn with_timeout(upstream_ms: u64) -> Stack {
        let mock = start_mock();
        let gateway = start_gateway(&config(mock.addr, upstream_ms));
        Stack { gateway, mock }
    }
    pub fn post(&self, path: &str, body: &Value) -> Resp {
        post(self.gateway.addr, path, body)
    }
    /// Stops the gateway and requires the clean exit the profile depends on.
    pub fn stop(self) {
        let code = self.gateway.terminate();
        assert_eq!(code, Some(0), "gateway exit status after SIGTERM");
    }
}

#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "body is not JSON ({e}): {}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
    /// SSE events as (event name, data).
    pub fn events(&self) -> Vec<(String, String)> {
        parse_sse(&self.text())
    }
}

pub fn parse_sse(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for block in text.split("\n\n") {
        let mut ev = String::new();
        let mut data = String::new();
        for line in block.lines() {
            if let Some(v) = line.strip_prefix("event: ") {
                ev = v.to_owned();
            } else if let Some(v) = line.strip_prefix("data: ") {
                data = v.to_owned();
            }
        }
        if !data.is_empty() {
            out.push((ev, data));
        }
    }
    out
}

pub fn post(addr: SocketAddr, path: &str, body: &Value) -> Resp {
    request(
        addr,
        "POST",
        path,
        &[("content-type", "application/json")],
        &serde_json::to_vec(body).unwrap(),
    )
}

pub fn get(addr: SocketAddr, path: &str) -> Resp {
    request(addr, "GET", path, &[], b"")
}

pub fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Resp {
    let mut all = vec![("connection", "close")];
    all.extend_from_slice(headers);
    let mut s = send_request(addr, method, path, &all, body);
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    parse_response(&raw)
}

/// Sends one request on a fresh connection and hands the connection back unread: for tests
/// that read only part of the answer, or leave before it.
pub fn send_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    s
}

/// [`send_request`] of a JSON POST.
pub fn send_json(addr: SocketAddr, path: &str, body: &Value) -> TcpStream {
    let body = serde_json::to_vec(body).unwrap();
    send_request(
        addr,
        "POST",
        path,
        &[("content-type", "application/json")],
        &body,
    )
}

pub fn parse_response(raw: &[u8]) -> Resp {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no header end in {:?}", String::from_utf8_lossy(raw)));
    let head = std::str::from_utf8(&raw[..end]).unwrap();
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let rest = &raw[end + 4..];
    let chunked = headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"));
    let body = if chunked {
        dechunk(rest)
    } else {
        rest.to_vec()
    };
    Resp {
        status,
        headers,
        body,
    }
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(nl) = b.windows(2).position(|w| w == b"\r\n") {
        let size_str = std::str::from_utf8(&b[..nl]).unwrap();
        let size = usize::from_str_radix(size_str.split(';').next().unwrap().trim(), 16).unwrap();
        b = &b[nl + 2..];
        if size == 0 {
            break;
        }
        out.extend_from_slice(&b[..size.min(b.len())]);
        b = &b[(size + 2).min(b.len())..];
    }
    out
}

/// A one-connection-at-a-time upstream driven by a closure, for behaviour the mock does not have.
/// The closure gets the request head and body and the socket to answer on.
pub struct RawUpstream {
    pub addr: SocketAddr,
    pub requests: mpsc::Receiver<(String, Vec<u8>)>,
}

pub fn raw_upstream<F>(handler: F) -> RawUpstream
where
    F: Fn(&str, &[u8], &mut TcpStream) + Send + Sync + 'static,
{
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let (tx, rx) = mpsc::channel();
    let handler = std::sync::Arc::new(handler);
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { break };
            let tx = tx.clone();
            let handler = handler.clone();
            std::thread::spawn(move || loop {
                let Some((head, body)) = read_request(&mut s) else {
                    return;
                };
                let _ = tx.send((head.clone(), body.clone()));
                handler(&head, &body, &mut s);
            });
        }
    });
    RawUpstream { addr, requests: rx }
}

/// One HTTP/1.1 request (head and content-length body) from any byte stream, TLS or not.
pub fn read_request(s: &mut impl Read) -> Option<(String, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        if s.read(&mut byte).ok()? == 0 {
            return None;
        }
        buf.push(byte[0]);
    }
    let head = String::from_utf8(buf).ok()?;
    let len = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse::<usize>().ok())?
        })
        .unwrap_or(0);
    let mut body = vec![0; len];
    s.read_exact(&mut body).ok()?;
    Some((head, body))
}

pub fn write_json(s: &mut impl Write, status: u16, body: &Value) {
    let b = serde_json::to_vec(body).unwrap();
    let _ = write!(
        s,
        "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        b.len()
    );
    let _ = s.write_all(&b);
}

pub fn user(text: &str) -> Value {
    serde_json::json!([{"role": "user", "content": text}])
}

/// Asserts the dialect's error body shape and returns its message.
pub fn assert_error_shape(path: &str, r: &Resp) -> String {
    let v = r.json();
    if path == "/v1/messages" {
        assert_eq!(v["type"], "error", "{v}");
        assert!(v["error"]["type"].is_string(), "{v}");
        v["error"]["message"].as_str().unwrap().to_owned()
    } else {
        let e = &v["error"];
        for k in ["message", "type", "param", "code"] {
            assert!(e.get(k).is_some(), "missing error.{k} in {v}");
        }
        e["message"].as_str().unwrap().to_owned()
    }
}
