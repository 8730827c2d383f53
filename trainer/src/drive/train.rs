//! `trainer train`: the gateway's training command (`docs/contracts.md`, "Training"). Every
//! training shape runs through a fresh instrumented gateway against a fresh mock upstream; every
//! response is checked, a clean exit required, and each shape's profile files are collected into
//! `OUT/SHAPE.FILENAME`; its report (the engine's workload report: the shapes trained, the
//! holdout, the responses checked, and each shape's figures) goes to `--report`.

use anyhow::{anyhow, bail, Context, Result};
use serde::Serialize;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crate::drive::check::Expect;
use crate::drive::config::{gateway_config, gateway_env, needs_redis, request, with_store};
use crate::drive::gateway::{printed_addr, start_gateway, Launch, READY_TIMEOUT};
use crate::drive::shapes::{self, Loaded};
use crate::drive::{load, tempdir};
use crate::mock::MockServer;

#[derive(clap::Args, Debug)]
pub struct TrainArgs {
    /// The (instrumented) gateway binary.
    #[arg(long)]
    pub gateway: PathBuf,
    /// Directory of shape files.
    #[arg(long)]
    pub shapes: PathBuf,
    /// Output directory: SHAPE.FILENAME profile files (and the report, by default).
    #[arg(long)]
    pub out: PathBuf,
    /// Where to write the report (default OUT/manifest.json); under `pgo-engine train`, its
    /// PGO_REPORT.
    #[arg(long)]
    pub report: Option<PathBuf>,
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

/// What `trainer train` reports: the engine's workload fields (`workloads`, `holdout`,
/// `checked`: docs/contracts.md, "The training contract") and the gateway's own figures.
#[derive(Serialize, Debug)]
pub struct Report {
    /// The shapes trained, by name.
    pub workloads: Vec<String>,
    pub holdout: String,
    /// The responses checked, all of them.
    pub checked: u64,
    pub profile_kind: String,
    pub shapes: Vec<ShapeResult>,
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

    let checked = results.iter().map(|r| r.requests_checked).sum();
    let manifest = Report {
        workloads: results.iter().map(|r| r.name.clone()).collect(),
        checked,
        profile_kind: args.profile_kind.clone(),
        holdout,
        requests_sent: results.iter().map(|r| r.requests_sent).sum(),
        requests_checked: checked,
        profile_files: results.iter().map(|r| r.profile_files).sum(),
        profile_bytes: results.iter().map(|r| r.profile_bytes).sum(),
        shapes: results,
    };
    let text = serde_json::to_string_pretty(&manifest)? + "\n";
    let report = args
        .report
        .clone()
        .unwrap_or_else(|| out.join("manifest.json"));
    crate::mock::write_atomically(&report, text.as_bytes())
        .with_context(|| format!("training: writing {}", report.display()))?;
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
