//! `trainer train`: run every training shape through a fresh instrumented gateway against a fresh
//! mock upstream, check every response, require a clean exit, and collect each shape's profile
//! files into `OUT/SHAPE.FILENAME` with a manifest (`docs/contracts.md`, "Training").

use anyhow::{anyhow, bail, Context, Result};
use serde::Serialize;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crate::check::Expect;
use crate::load;
use crate::mock::MockServer;
use crate::shapes::{self, Loaded};

/// How long a gateway may take to announce itself and answer `/livez`.
const READY_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a gateway may take to exit after SIGTERM.
const EXIT_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(clap::Args, Debug)]
pub struct TrainArgs {
    /// The (instrumented) gateway binary.
    #[arg(long)]
    pub gateway: PathBuf,
    /// Directory of shape files.
    #[arg(long)]
    pub shapes: PathBuf,
    /// Output directory: SHAPE.FILENAME profile files and manifest.json.
    #[arg(long)]
    pub out: PathBuf,
    /// `llvm`: set LLVM_PROFILE_FILE=PROFILE_DIR/SHAPE-%p-%m.profraw; `bolt`: the binary writes
    /// where llvm-bolt was told, a path relative to its working directory, which is PROFILE_DIR.
    #[arg(long, value_parser = ["llvm", "bolt"], default_value = "llvm")]
    pub profile_kind: String,
    /// Where the gateway writes its profiles (default: a scratch directory under OUT, removed
    /// afterwards; required for bolt).
    #[arg(long)]
    pub profile_dir: Option<PathBuf>,
    /// Profile files at or below this size do not count.
    #[arg(long, default_value_t = 1024)]
    pub min_profile_bytes: u64,
    /// Train only these shapes (comma-separated names); default: every non-holdout shape.
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// Cap every shape's request count (quick runs and tests).
    #[arg(long)]
    pub max_requests: Option<u64>,
}

#[derive(Serialize, Debug, Clone)]
pub struct ShapeResult {
    pub name: String,
    pub requests_sent: u64,
    pub requests_checked: u64,
    pub profile_files: u64,
    pub profile_bytes: u64,
    pub seconds: f64,
}

#[derive(Serialize, Debug)]
pub struct Manifest {
    pub profile_kind: String,
    pub shapes: Vec<ShapeResult>,
    pub holdout: String,
    pub requests_sent: u64,
    pub requests_checked: u64,
    pub profile_files: u64,
    pub profile_bytes: u64,
}

pub fn run(args: TrainArgs) -> Result<()> {
    let all = shapes::load_dir(&args.shapes).context("training: loading the shapes")?;
    let holdout = all
        .iter()
        .find(|s| s.shape.holdout)
        .map(|s| s.shape.name.clone())
        .expect("load_dir guarantees one holdout");
    let selected = select(&all, &args.only)?;
    if !args.gateway.is_file() {
        bail!(
            "training: the gateway binary {} does not exist",
            args.gateway.display()
        );
    }
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("training: creating {}", args.out.display()))?;
    let out = args.out.canonicalize()?;
    let (profile_dir, scratch_profiles) = match &args.profile_dir {
        Some(d) => (d.clone(), false),
        None if args.profile_kind == "bolt" => {
            bail!("training: --profile-kind bolt needs --profile-dir (where llvm-bolt -instrument told the binary to write)")
        }
        None => (out.join(".profiles"), true),
    };
    std::fs::create_dir_all(&profile_dir)
        .with_context(|| format!("training: creating {}", profile_dir.display()))?;
    let profile_dir = profile_dir.canonicalize()?;
    let scratch = tempdir("trainer-train")?;

    let mut results = Vec::new();
    let outcome = (|| -> Result<()> {
        for s in &selected {
            eprintln!(
                "training: shape {} ({} {}{} -> {}, {} requests x{})",
                s.shape.name,
                s.shape.endpoint,
                s.body.len(),
                if s.shape.stream { " B, stream" } else { " B" },
                s.shape.upstream,
                requests_of(s, args.max_requests),
                s.shape.concurrency
            );
            let r = train_shape(s, &args, &out, &profile_dir, &scratch)
                .map_err(|e| anyhow!("training: shape {}: {e:#}", s.shape.name))?;
            eprintln!(
                "training: shape {}: {} checked, {} profile file(s), {} bytes, {:.2} s",
                r.name, r.requests_checked, r.profile_files, r.profile_bytes, r.seconds
            );
            results.push(r);
        }
        Ok(())
    })();
    let _ = std::fs::remove_dir_all(&scratch);
    if scratch_profiles {
        let _ = std::fs::remove_dir_all(&profile_dir);
    }
    outcome?;

    let manifest = Manifest {
        profile_kind: args.profile_kind.clone(),
        holdout,
        requests_sent: results.iter().map(|r| r.requests_sent).sum(),
        requests_checked: results.iter().map(|r| r.requests_checked).sum(),
        profile_files: results.iter().map(|r| r.profile_files).sum(),
        profile_bytes: results.iter().map(|r| r.profile_bytes).sum(),
        shapes: results,
    };
    let text = serde_json::to_string_pretty(&manifest)? + "\n";
    crate::mock::write_atomically(&out.join("manifest.json"), text.as_bytes())
        .context("training: writing manifest.json")?;
    eprintln!(
        "training: {} shape(s), {} requests checked, {} profile file(s), {} bytes; holdout {} not trained",
        manifest.shapes.len(),
        manifest.requests_checked,
        manifest.profile_files,
        manifest.profile_bytes,
        manifest.holdout
    );
    Ok(())
}

fn requests_of(s: &Loaded, cap: Option<u64>) -> u64 {
    match cap {
        Some(c) => s.shape.requests.min(c.max(1)),
        None => s.shape.requests,
    }
}

/// The shapes to train: `--only` (none of them the holdout), else every non-holdout shape.
pub fn select<'a>(all: &'a [Loaded], only: &[String]) -> Result<Vec<&'a Loaded>> {
    if only.is_empty() {
        return Ok(all.iter().filter(|s| !s.shape.holdout).collect());
    }
    let mut out = Vec::new();
    for name in only {
        let s = all
            .iter()
            .find(|s| &s.shape.name == name)
            .ok_or_else(|| anyhow!("training: --only names an unknown shape {name:?}"))?;
        if s.shape.holdout {
            bail!("training: --only names the holdout shape {name:?}, which is never trained");
        }
        out.push(s);
    }
    Ok(out)
}

/// A port free right now on 127.0.0.1 (bound, then released).
pub(crate) fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").context("finding a free port")?;
    Ok(l.local_addr()?.port())
}

/// A scratch directory under $TMPDIR.
pub(crate) fn tempdir(prefix: &str) -> Result<PathBuf> {
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let d = std::env::temp_dir().join(format!("{prefix}-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&d).with_context(|| format!("creating {}", d.display()))?;
    Ok(d)
}

/// The gateway config for a shape: one worker on a port the gateway picks (it reports it), both
/// providers at the mock, the standard aliases plus the shape's alias routed to its upstream
/// kind, and the shape's posture:
/// - `default`: observability on: Prometheus metrics on their own listener (`metrics_port`) and
///   the access log written to `access_log` (a file, so that the gateway log stays readable);
/// - `rate-limited`: the same plus a `limits.models` policy for the shape's alias with limits far
///   above what training sends, so the quota path runs on every request and never refuses.
pub fn gateway_config(
    shape: &shapes::Shape,
    mock: SocketAddr,
    metrics_port: u16,
    access_log: &Path,
) -> serde_json::Value {
    let base = format!("http://{mock}");
    let mut models = serde_json::Map::new();
    models.insert(
        "gpt-4o-mini".into(),
        serde_json::json!({ "provider": "up-openai", "model": "mock-gpt" }),
    );
    models.insert(
        "claude-haiku".into(),
        serde_json::json!({ "provider": "up-anthropic", "model": "mock-claude" }),
    );
    let route = if shape.upstream == "anthropic" {
        serde_json::json!({ "provider": "up-anthropic", "model": "mock-claude" })
    } else {
        serde_json::json!({ "provider": "up-openai", "model": "mock-gpt" })
    };
    models.insert(shape.model.clone(), route);
    let mut cfg = serde_json::json!({
        "listen": "127.0.0.1:0",
        "workers": 1,
        "providers": {
            "up-openai": { "kind": "openai", "base_url": base, "api_key_env": "UPSTREAM_OPENAI_KEY" },
            "up-anthropic": { "kind": "anthropic", "base_url": base, "api_key_env": "UPSTREAM_ANTHROPIC_KEY" }
        },
        "models": models,
        "metrics": { "listen": format!("127.0.0.1:{metrics_port}") },
        "access_log": { "path": access_log.to_string_lossy() },
    });
    if shape.posture == "rate-limited" {
        // High limits that training never reaches: the quota path runs on every request.
        cfg["limits"] = serde_json::json!({
            "models": {
                shape.model.clone(): {
                    "requests_per_minute": 1_000_000_000u64,
                    "tokens_per_minute": 1_000_000_000_000u64,
                    "max_concurrent": 100_000
                }
            }
        });
    }
    cfg
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

    fn pid(&self) -> i32 {
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
            let text = std::fs::read_to_string(log).unwrap_or_default();
            // Only the line that starts with it: `metrics listening on ADDR` is another listener.
            addr = text.lines().find_map(|l| {
                l.strip_prefix("listening on ")
                    .and_then(|a| a.split_whitespace().next())
                    .and_then(|a| a.parse().ok())
            });
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

type Snapshot = HashMap<PathBuf, (u64, Option<SystemTime>)>;

fn snapshot(dir: &Path) -> Result<Snapshot> {
    let mut m = HashMap::new();
    for e in std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let e = e?;
        let md = e.metadata()?;
        if md.is_file() {
            m.insert(e.path(), (md.len(), md.modified().ok()));
        }
    }
    Ok(m)
}

/// Move `from` to `to` (copying across filesystems).
fn move_file(from: &Path, to: &Path) -> Result<()> {
    if std::fs::rename(from, to).is_ok() {
        return Ok(());
    }
    std::fs::copy(from, to)
        .with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
    std::fs::remove_file(from).with_context(|| format!("removing {}", from.display()))?;
    Ok(())
}

fn train_shape(
    s: &Loaded,
    args: &TrainArgs,
    out: &Path,
    profile_dir: &Path,
    scratch: &Path,
) -> Result<ShapeResult> {
    let started = Instant::now();
    let name = &s.shape.name;
    let expect = Arc::new(Expect::for_payload(s.dialect, &s.body).map_err(|e| anyhow!("{e}"))?);
    let before = snapshot(profile_dir)?;

    let mock = MockServer::start("127.0.0.1:0".parse().unwrap(), 1).context("starting the mock")?;
    let config_path = scratch.join(format!("{name}.config.json"));
    let cfg = gateway_config(
        &s.shape,
        mock.addr(),
        free_port()?,
        &scratch.join(format!("{name}.access.jsonl")),
    );
    std::fs::write(&config_path, serde_json::to_vec_pretty(&cfg)?)?;
    let mut env = vec![
        ("UPSTREAM_OPENAI_KEY", "sk-mock-openai".to_string()),
        ("UPSTREAM_ANTHROPIC_KEY", "sk-mock-anthropic".to_string()),
    ];
    if args.profile_kind == "llvm" {
        env.push((
            "LLVM_PROFILE_FILE",
            profile_dir
                .join(format!("{name}-%p-%m.profraw"))
                .to_string_lossy()
                .into_owned(),
        ));
    }
    let log = scratch.join(format!("{name}.gateway.log"));
    // Absolute: the gateway starts in the profile directory.
    let bin = std::fs::canonicalize(&args.gateway)
        .with_context(|| format!("resolving {}", args.gateway.display()))?;
    let launch = Launch {
        argv: &[bin.into_os_string()],
        cwd: profile_dir,
        ready_timeout: READY_TIMEOUT,
    };
    let (mut gw, addr) = start_gateway(&launch, &config_path, &log, &env)?;

    let requests = requests_of(s, args.max_requests);
    let req = load::Request::post_json(&s.shape.endpoint, s.body.clone());
    let mut opts = load::Options::new(addr, s.shape.concurrency, load::Stop::Total(requests));
    opts.record_latency = false;
    opts.stop_on_failure = true;
    let e = expect.clone();
    let check: load::Check = Arc::new(move |status, body| e.check(status, body));
    let outcome = load::run_blocking(&opts, &req, check)?;
    if outcome.failed > 0 || outcome.ok != requests {
        let first = outcome.first_failure.unwrap_or_default();
        bail!(
            "wrong response: {} of {} requests failed (the first: {first}); {}",
            outcome.failed,
            outcome.sent,
            gw.log_tail()
        );
    }
    gw.stop()?;
    drop(mock);

    // This shape's profiles: files new or changed since before the gateway started.
    let after = snapshot(profile_dir)?;
    let mut files = 0u64;
    let mut bytes = 0u64;
    let mut small = Vec::new();
    let mut fresh: Vec<_> = after
        .iter()
        .filter(|(p, meta)| before.get(*p) != Some(meta))
        .collect();
    fresh.sort();
    for (path, (len, _)) in fresh {
        if *len <= args.min_profile_bytes {
            small.push(format!("{} ({len} bytes)", path.display()));
            continue;
        }
        let file_name = path.file_name().unwrap().to_string_lossy();
        let dest = out.join(format!("{name}.{file_name}"));
        move_file(path, &dest)?;
        files += 1;
        bytes += len;
    }
    if files == 0 {
        bail!(
            "no profile file above {} bytes appeared in {} ({}); is the gateway instrumented{}?",
            args.min_profile_bytes,
            profile_dir.display(),
            if small.is_empty() {
                "no new file at all".to_string()
            } else {
                format!("only {}", small.join(", "))
            },
            if args.profile_kind == "bolt" {
                " by llvm-bolt -instrument with -instrumentation-file in that directory"
            } else {
                " with -Cprofile-generate"
            }
        );
    }
    Ok(ShapeResult {
        name: name.clone(),
        requests_sent: outcome.sent,
        requests_checked: outcome.ok,
        profile_files: files,
        profile_bytes: bytes,
        seconds: (started.elapsed().as_secs_f64() * 1000.0).round() / 1000.0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(posture: &str, model: &str, upstream: &str) -> shapes::Shape {
        serde_json::from_value(serde_json::json!({
            "name": "s", "endpoint": "/v1/messages", "payload": "p.json", "model": model,
            "upstream": upstream, "requests": 1, "concurrency": 1, "posture": posture
        }))
        .unwrap()
    }

    #[test]
    fn config_per_posture() {
        let mock: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let log = Path::new("/tmp/a.jsonl");
        let c = gateway_config(&shape("default", "my-alias", "anthropic"), mock, 5000, log);
        assert_eq!(c["listen"], "127.0.0.1:0");
        assert_eq!(c["models"]["my-alias"]["provider"], "up-anthropic");
        assert_eq!(c["models"]["gpt-4o-mini"]["provider"], "up-openai");
        assert_eq!(
            c["providers"]["up-openai"]["base_url"],
            "http://127.0.0.1:9"
        );
        assert_eq!(c["metrics"]["listen"], "127.0.0.1:5000");
        assert_eq!(c["access_log"]["path"], "/tmp/a.jsonl");
        assert!(c.get("limits").is_none());
        let c = gateway_config(
            &shape("rate-limited", "gpt-4o-mini", "openai"),
            mock,
            5000,
            log,
        );
        let p = &c["limits"]["models"]["gpt-4o-mini"];
        assert!(p["requests_per_minute"].as_u64().unwrap() >= 1_000_000_000);
        assert!(p["tokens_per_minute"].as_u64().unwrap() >= 1_000_000_000_000);
    }
}
