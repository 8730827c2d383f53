//! `trainer train`: run every training shape through a fresh instrumented gateway against a fresh
//! mock upstream, check every response, require a clean exit, and collect each shape's profile
//! files into `OUT/SHAPE.FILENAME` with a manifest (`docs/contracts.md`, "Training").

use anyhow::{anyhow, bail, Context, Result};
use bytes::Bytes;
use serde::Serialize;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crate::drive::check::Expect;
use crate::drive::load;
use crate::drive::shapes::{self, Loaded};
use crate::mock::MockServer;
use pgo_engine::host::load::{Host, MachineLoad, Watch};

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
    /// `redis-server` for the shapes of the `shared-limits` posture: each gets its own on
    /// 127.0.0.1 as the gateway's shared quota store.
    #[arg(long)]
    pub redis_server: Option<PathBuf>,
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
    /// How busy the rest of the machine was while the shapes ran (`machine_load.rs`); absent
    /// where `/proc/stat` cannot be read.
    pub machine: Option<MachineLoad>,
    /// Which machine the shapes ran on (`machine_load::Host`).
    pub host: Host,
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
    let watch = Watch::start();
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
    let machine = watch.finish();
    if let Some(m) = &machine {
        eprintln!(
            "training: the machine's {} CPU(s) over {:.1} s: {:.1}% used by the training, {:.1}% by other work",
            m.cpus, m.seconds, m.own_cpu_pct, m.other_cpu_pct
        );
    }

    let manifest = Manifest {
        profile_kind: args.profile_kind.clone(),
        holdout,
        requests_sent: results.iter().map(|r| r.requests_sent).sum(),
        requests_checked: results.iter().map(|r| r.requests_checked).sum(),
        profile_files: results.iter().map(|r| r.profile_files).sum(),
        profile_bytes: results.iter().map(|r| r.profile_bytes).sum(),
        shapes: results,
        machine,
        host: Host::read(),
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

/// The address the gateway whose log is `log` printed on a line starting with `prefix`: its
/// listener (`listening on ADDR`) or its metrics listener (`metrics listening on ADDR`, printed
/// before it serves). Only a line that starts with the prefix counts.
fn printed_addr(log: &Path, prefix: &str) -> Option<SocketAddr> {
    let text = std::fs::read_to_string(log).ok()?;
    text.lines().find_map(|l| {
        l.strip_prefix(prefix)
            .and_then(|a| a.split_whitespace().next())
            .and_then(|a| a.parse().ok())
    })
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
///   above what training sends, so the quota path runs on every request and never refuses;
/// - `keys`: the same plus one caller key (read from [`CALLER_KEY_ENV`], which the gateway gets
///   from [`gateway_env`]), which every request presents ([`request`]);
/// - `multi-deployment`: the same, with the shape's alias over two healthy deployments of its
///   upstream kind weighted 3:1 (a second provider at the mock), so every request takes the
///   routed path (choice, lease, per-deployment counts) and none falls back.
/// - `shared-limits`: the `rate-limited` policy shared through a Redis ([`with_store`] adds it),
///   so that admissions run from the replica's leases.
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
    if !shape.drop.is_empty() {
        models[&shape.model]["drop"] = serde_json::json!(shape.drop);
    }
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
    if shape.posture == "keys" {
        with_caller_key(&mut cfg);
    }
    if shape.posture == "multi-deployment" {
        let (kind, provider, model) = if shape.upstream == "anthropic" {
            ("anthropic", "up-anthropic", "mock-claude")
        } else {
            ("openai", "up-openai", "mock-gpt")
        };
        let second = format!("{provider}-b");
        let env = cfg["providers"][provider]["api_key_env"].clone();
        cfg["providers"][&second] =
            serde_json::json!({ "kind": kind, "base_url": base, "api_key_env": env });
        cfg["models"][&shape.model] = serde_json::json!({ "deployments": [
            { "provider": provider, "model": model, "weight": 3 },
            { "provider": second, "model": format!("{model}-b"), "weight": 1 },
        ] });
    }
    if shape.posture == "rate-limited" || shape.posture == "shared-limits" {
        with_unreached_limits(&mut cfg, &shape.model);
    }
    if shape.posture == "budgets" {
        with_unreached_budget(&mut cfg, &shape.model);
    }
    if shape.posture == "traced" {
        // Every request sampled; nothing listens at the endpoint, so the exports fail off the
        // request path (counted), which is all training needs of them.
        cfg["tracing"] = serde_json::json!({
            "endpoint": "http://127.0.0.1:9/v1/traces", "sample_ratio": 1.0
        });
    }
    cfg
}

/// The `budgets` posture: the shape's alias priced, with a spend budget far above what training
/// sends, so every request reserves and settles its cost without ever being refused.
pub fn with_unreached_budget(cfg: &mut serde_json::Value, model: &str) {
    cfg["models"][model]["price"] =
        serde_json::json!({ "input": 2.5, "output": 10, "cached_input": 1.25 });
    cfg["budgets"] =
        serde_json::json!({ "models": { model: { "usd": 1_000_000_000, "period": "day" } } });
}

/// The `keys` posture: one caller key ([`CALLER_KEY`]), which every request must present.
pub fn with_caller_key(cfg: &mut serde_json::Value) {
    cfg["keys"] = serde_json::json!([{ "id": "trainer", "key_env": CALLER_KEY_ENV }]);
}

/// The `rate-limited` posture: a policy for `model` with limits far above what training and the
/// benches send, so the quota path runs on every request without ever refusing one.
pub fn with_unreached_limits(cfg: &mut serde_json::Value, model: &str) {
    cfg["limits"] = serde_json::json!({
        "models": {
            model: {
                "requests_per_minute": 1_000_000_000u64,
                "tokens_per_minute": 1_000_000_000_000u64,
                "max_concurrent": 100_000
            }
        }
    });
}

/// The environment variable the `keys` posture's caller key is read from, and the key.
pub const CALLER_KEY_ENV: &str = "TRAINER_CALLER_KEY";
pub const CALLER_KEY: &str = "sk-trainer-caller";

/// The environment of a gateway under training or bench: upstream keys the mock ignores, and the
/// caller key of the `keys` posture.
pub fn gateway_env() -> Vec<(&'static str, String)> {
    vec![
        ("UPSTREAM_OPENAI_KEY", "sk-mock-openai".to_string()),
        ("UPSTREAM_ANTHROPIC_KEY", "sk-mock-anthropic".to_string()),
        (CALLER_KEY_ENV, CALLER_KEY.to_string()),
    ]
}

/// The headers a shape's requests carry beyond the content type: the caller key where its posture
/// configures one.
pub fn caller_headers(shape: &shapes::Shape) -> Vec<(String, String)> {
    if shape.posture == "keys" {
        vec![("authorization".into(), format!("Bearer {CALLER_KEY}"))]
    } else {
        Vec::new()
    }
}

/// The request a shape sends: its payload to its endpoint, with [`caller_headers`].
pub fn request(shape: &shapes::Shape, body: Bytes) -> load::Request {
    caller_headers(shape).iter().fold(
        load::Request::post_json(&shape.endpoint, body),
        |r, (k, v)| r.header(k, v),
    )
}

/// Whether a shape's posture shares its limits through a Redis (one is started for it).
pub fn needs_redis(shape: &shapes::Shape) -> bool {
    shape.posture == "shared-limits"
}

/// The `shared-limits` posture's store: the shape's Redis at `redis`. `on_store_error: reject`
/// keeps the run honest: a store that does not answer makes requests 503, which the response
/// checks refuse, so a shape cannot pass on the fallback.
pub fn with_store(cfg: &mut serde_json::Value, redis: SocketAddr) {
    cfg["limits"]["store"] = serde_json::json!({
        "url": format!("redis://{redis}/0"),
        "prefix": "trainer:",
        "timeout_ms": 1000,
        "on_store_error": "reject"
    });
}

/// After a `shared-limits` shape: the gateway's metrics must show the store up and answering.
fn check_store_used(metrics: SocketAddr) -> Result<()> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect_timeout(&metrics, Duration::from_secs(2))
        .context("connecting to the gateway's metrics")?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    let req = format!("GET /metrics HTTP/1.1\r\nhost: {metrics}\r\nconnection: close\r\n\r\n");
    s.write_all(req.as_bytes())?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    let value = |series: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or(0.0)
    };
    if value("gateway_limits_store_up") != 1.0
        || value("gateway_limits_store_calls_total{result=\"ok\"}") < 1.0
    {
        bail!("the gateway's shared quota store was not up and answering (gateway_limits_store_up, gateway_limits_store_calls_total)");
    }
    Ok(())
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
    let redis = match (needs_redis(&s.shape), &args.redis_server) {
        (true, Some(bin)) => Some(
            crate::drive::redis::RedisServer::start(bin, scratch).context("starting its Redis")?,
        ),
        (true, None) => {
            bail!("posture shared-limits needs a Redis: pass --redis-server PATH")
        }
        (false, _) => None,
    };
    let config_path = scratch.join(format!("{name}.config.json"));
    // Port 0: the gateway binds the metrics listener itself and prints where. A port found free
    // beforehand could be taken by an outgoing connection before the gateway binds it.
    let mut cfg = gateway_config(
        &s.shape,
        mock.addr(),
        0,
        &scratch.join(format!("{name}.access.jsonl")),
    );
    if let Some(r) = &redis {
        with_store(&mut cfg, r.addr());
    }
    std::fs::write(&config_path, serde_json::to_vec_pretty(&cfg)?)?;
    let mut env = gateway_env();
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
    let req = request(&s.shape, s.body.clone());
    let mut opts = load::Options::new(addr, s.shape.concurrency, load::Stop::Total(requests));
    opts.record_latency = false;
    opts.stop_on_failure = true;
    let e = expect.clone();
    let check: load::Check = Arc::new(move |status, body| e.check(status, body));
    let outcome = load::run_blocking(&opts, &req, check)?;
    if let Err(e) = outcome.all_ok(requests) {
        bail!("wrong response: {e}; {}", gw.log_tail());
    }
    if redis.is_some() {
        let metrics = printed_addr(&log, "metrics listening on ").with_context(|| {
            format!(
                "the gateway never printed \"metrics listening on ADDR\"; {}",
                gw.log_tail()
            )
        })?;
        check_store_used(metrics)?;
    }
    gw.stop()?;
    drop(mock);
    if let Some(r) = redis {
        r.stop()?;
    }

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
        assert!(c["limits"].get("store").is_none());
        let mut c = gateway_config(
            &shape("shared-limits", "gpt-4o-mini", "openai"),
            mock,
            5000,
            log,
        );
        assert_eq!(
            c["limits"]["models"]["gpt-4o-mini"], *p,
            "the same policy, shared"
        );
        with_store(&mut c, "127.0.0.1:6390".parse().unwrap());
        assert_eq!(c["limits"]["store"]["url"], "redis://127.0.0.1:6390/0");
        assert_eq!(c["limits"]["store"]["on_store_error"], "reject");
        let c = gateway_config(
            &shape("multi-deployment", "gpt-4o-mini", "openai"),
            mock,
            5000,
            log,
        );
        let d = c["models"]["gpt-4o-mini"]["deployments"]
            .as_array()
            .unwrap();
        assert_eq!(d.len(), 2);
        assert_eq!(
            (&d[0]["provider"], &d[0]["weight"]),
            (&"up-openai".into(), &3.into())
        );
        assert_eq!(
            (&d[1]["provider"], &d[1]["weight"]),
            (&"up-openai-b".into(), &1.into())
        );
        assert_eq!(
            c["providers"]["up-openai-b"]["base_url"],
            "http://127.0.0.1:9"
        );
        assert!(c.get("limits").is_none());
    }
}
