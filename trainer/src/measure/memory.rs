//! `trainer stream-memory` and `trainer idle-connections`: what an open stream and an idle client
//! connection cost a gateway binary in memory (issue 29). The gateway's resident set is read from
//! `/proc/PID/smaps_rollup` (`Rss`, `Anonymous`), sampled every 20 ms while the load runs; its
//! open descriptors are counted from `/proc/PID/fd` at the same time, which shows how many
//! connections were open together at the peak. The config is the training config of the shape
//! with keys, limits, metrics and the access log all on: every request presents the caller key.
//!
//! Figures are the resident set above the idle gateway (after one request, one second later),
//! divided by the streams or connections: what the kernel charges the process, allocator slack
//! and freed-but-kept pages included, which is what a deployment has to provision.

use anyhow::{anyhow, bail, Context, Result};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::drive::check::Expect;
use crate::drive::config;
use crate::drive::gateway::{self, Launch};
use crate::drive::load;
use crate::drive::shapes::{self, Loaded};
use crate::mock::{MockOptions, MockServer};

/// A gateway under `ulimit -n` and a flood of connections may take a while to answer `/livez`.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(clap::Args, Debug)]
pub struct StreamMemoryArgs {
    /// The gateway binary to measure (any build, or bench/nginx-as-gateway).
    #[arg(long)]
    pub gateway: PathBuf,
    /// A stream shape file: its endpoint, payload and upstream kind.
    #[arg(long)]
    pub shape: PathBuf,
    /// Streams opened together (one client connection each).
    #[arg(long, default_value_t = 4000)]
    pub streams: u64,
    /// Content events of each stream.
    #[arg(long, default_value_t = 20)]
    pub events: u64,
    /// Pause of the mock before each frame after the first, in milliseconds.
    #[arg(long, default_value_t = 250)]
    pub frame_interval_ms: u64,
    /// Also write the figures as JSON.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

#[derive(clap::Args, Debug)]
pub struct IdleConnectionsArgs {
    /// The gateway binary to measure (any build, or bench/nginx-as-gateway).
    #[arg(long)]
    pub gateway: PathBuf,
    /// The shape of the one request each connection sends (non-streaming is the usual case).
    #[arg(long)]
    pub shape: PathBuf,
    /// Client keep-alive connections held open.
    #[arg(long, default_value_t = 8000)]
    pub connections: usize,
    /// Requests in flight at once when each connection sends its one request, so that the
    /// gateway's upstream pool stays small and the figure is the client connections'.
    #[arg(long, default_value_t = 64)]
    pub window: usize,
    /// Also write the figures as JSON.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// One reading of the gateway process.
#[derive(Serialize, Clone, Copy, Debug, Default)]
pub struct Reading {
    pub rss_kib: u64,
    pub anonymous_kib: u64,
    pub open_fds: u64,
}

/// `Rss` and `Anonymous` of `/proc/PID/smaps_rollup`, and the entries of `/proc/PID/fd`.
pub fn read(pid: i32) -> Result<Reading> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
        .with_context(|| format!("reading /proc/{pid}/smaps_rollup"))?;
    let field = |name: &str| -> Result<u64> {
        text.lines()
            .find_map(|l| {
                l.strip_prefix(name)?
                    .trim()
                    .strip_suffix("kB")?
                    .trim()
                    .parse()
                    .ok()
            })
            .ok_or_else(|| anyhow!("/proc/{pid}/smaps_rollup has no {name} line"))
    };
    let open_fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count() as u64)
        .unwrap_or(0);
    Ok(Reading {
        rss_kib: field("Rss:")?,
        anonymous_kib: field("Anonymous:")?,
        open_fds,
    })
}

/// Samples the gateway every 20 ms on a thread of its own and keeps the largest readings.
struct PeakSampler {
    stop: Arc<AtomicBool>,
    peak: Arc<Mutex<(Reading, u64)>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl PeakSampler {
    fn start(pid: i32) -> PeakSampler {
        let stop = Arc::new(AtomicBool::new(false));
        let peak = Arc::new(Mutex::new((Reading::default(), 0u64)));
        let (s, p) = (stop.clone(), peak.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                if let Ok(r) = read(pid) {
                    let mut p = p.lock().unwrap();
                    if r.rss_kib > p.0.rss_kib {
                        p.0.rss_kib = r.rss_kib;
                        p.0.anonymous_kib = r.anonymous_kib;
                    }
                    p.1 = p.1.max(r.open_fds);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        PeakSampler {
            stop,
            peak,
            thread: Some(thread),
        }
    }

    /// The peak resident set (with its anonymous part) and the most descriptors seen open.
    fn finish(mut self) -> Reading {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let (mut r, fds) = *self.peak.lock().unwrap();
        r.open_fds = fds;
        r
    }
}

/// The mock and the gateway of one measurement, the gateway configured for `shape` with keys,
/// limits, metrics and the access log on.
struct Rig {
    gateway: gateway::Gateway,
    addr: std::net::SocketAddr,
    request: load::Request,
    expect: Arc<Expect>,
    scratch: PathBuf,
    _mock: MockServer,
}

impl Rig {
    fn start(gateway: &Path, shape: &Loaded, upstream_directives: Option<String>) -> Result<Rig> {
        let gateway = crate::measure::instructions::absolute_gateway(gateway)?;
        let scratch = crate::drive::tempdir("trainer-memory")?;
        let expect = Arc::new(
            Expect::for_payload_and_upstream(
                shape.dialect,
                &shape.body,
                upstream_directives.as_deref(),
            )
            .map_err(|e| anyhow!("{e}"))?,
        );
        let mock = MockServer::start_opts(
            "127.0.0.1:0".parse().unwrap(),
            2,
            MockOptions {
                directives: upstream_directives,
                directive_requests: None,
            },
        )
        .context("starting the mock")?;
        let mut config =
            config::gateway_config(&shape.shape, mock.addr(), 0, &scratch.join("access.jsonl"));
        config::with_caller_key(&mut config);
        config::with_unreached_limits(&mut config, &shape.shape.model);
        // Idle connections are closed after `header_ms` (30 s by default): long enough for
        // 8,000 connections to open on a loaded machine, not for a margin.
        config["timeouts"] = serde_json::json!({ "header_ms": 600_000 });
        let config_path = scratch.join("config.json");
        std::fs::write(&config_path, serde_json::to_vec_pretty(&config)?)?;
        let argv = [gateway.into_os_string()];
        let launch = Launch {
            argv: &argv,
            cwd: &scratch,
            ready_timeout: READY_TIMEOUT,
        };
        let (gw, addr) = gateway::start_gateway(
            &launch,
            &config_path,
            &scratch.join("gateway.log"),
            &config::gateway_env(),
        )?;
        let request = config::request(&shape.shape, shape.body.clone())
            .header("authorization", &format!("Bearer {}", config::CALLER_KEY));
        Ok(Rig {
            gateway: gw,
            addr,
            request,
            expect,
            scratch,
            _mock: mock,
        })
    }

    fn check(&self) -> load::Check {
        let expect = self.expect.clone();
        Arc::new(move |status, body| expect.check(status, body))
    }

    /// `requests` requests over `connections` connections; every response must pass the check.
    fn drive(&self, connections: usize, requests: u64, timeout: Duration) -> Result<Duration> {
        let mut opts = load::Options::new(self.addr, connections, load::Stop::Total(requests));
        opts.record_latency = false;
        opts.timeout = Some(timeout);
        let out = load::run_blocking(&opts, &self.request, self.check())?;
        if let Err(e) = out.all_ok(requests) {
            bail!("{e}; {}", self.gateway.log_tail());
        }
        Ok(out.elapsed)
    }

    /// One request, then a second's rest: the idle gateway, its lazy start-up work done.
    fn idle_reading(&self) -> Result<Reading> {
        self.drive(1, 1, Duration::from_secs(60))?;
        std::thread::sleep(Duration::from_secs(1));
        read(self.gateway.pid())
    }

    fn stop(mut self) -> Result<()> {
        let r = self.gateway.stop();
        let _ = std::fs::remove_dir_all(&self.scratch);
        r
    }
}

fn kib_per(above: u64, below: u64, n: u64) -> f64 {
    above.saturating_sub(below) as f64 / n as f64
}

#[derive(Serialize, Debug)]
pub struct StreamMemory {
    pub gateway: String,
    pub shape: String,
    pub streams: u64,
    pub events: u64,
    pub frame_interval_ms: u64,
    pub idle: Reading,
    pub peak: Reading,
    pub load_seconds: f64,
    pub kib_per_stream: f64,
    pub after_1s: Reading,
    pub after_10s: Reading,
}

pub fn stream_memory(args: StreamMemoryArgs) -> Result<()> {
    let shape = shapes::load(&args.shape)?;
    if !shape.shape.stream {
        bail!("stream-memory: shape {} does not stream", shape.shape.name);
    }
    let directives = format!(
        "[[mock:frames:{}]][[mock:frame_interval_ms:{}]]",
        args.events, args.frame_interval_ms
    );
    let rig = Rig::start(&args.gateway, &shape, Some(directives))?;
    let pid = rig.gateway.pid();
    let result = (|| -> Result<StreamMemory> {
        let idle = rig.idle_reading()?;
        let sampler = PeakSampler::start(pid);
        let stream_time = Duration::from_millis(args.frame_interval_ms * (args.events + 4));
        let drove = rig.drive(
            args.streams as usize,
            args.streams,
            stream_time + Duration::from_secs(60),
        );
        let end = Instant::now();
        let peak = sampler.finish();
        let elapsed = drove?;
        std::thread::sleep(Duration::from_secs(1).saturating_sub(end.elapsed()));
        let after_1s = read(pid)?;
        std::thread::sleep(Duration::from_secs(10).saturating_sub(end.elapsed()));
        let after_10s = read(pid)?;
        Ok(StreamMemory {
            gateway: args.gateway.display().to_string(),
            shape: shape.shape.name.clone(),
            streams: args.streams,
            events: args.events,
            frame_interval_ms: args.frame_interval_ms,
            idle,
            peak,
            load_seconds: elapsed.as_secs_f64(),
            kib_per_stream: kib_per(peak.rss_kib, idle.rss_kib, args.streams),
            after_1s,
            after_10s,
        })
    })();
    let stopped = rig.stop();
    let m = result?;
    stopped?;
    println!(
        "{} streams of {} events {} ms apart (shape {}), all completed in {:.1} s",
        m.streams, m.events, m.frame_interval_ms, m.shape, m.load_seconds
    );
    println!(
        "idle RSS {} KiB (anonymous {}); peak RSS {} KiB (anonymous {}) with {} descriptors open",
        m.idle.rss_kib, m.idle.anonymous_kib, m.peak.rss_kib, m.peak.anonymous_kib, m.peak.open_fds
    );
    println!(
        "memory per open stream: {:.1} KiB (anonymous {:.1} KiB)",
        m.kib_per_stream,
        kib_per(m.peak.anonymous_kib, m.idle.anonymous_kib, m.streams)
    );
    println!(
        "RSS 1 s after the load: {} KiB; 10 s after: {} KiB (idle + {:.1} MiB)",
        m.after_1s.rss_kib,
        m.after_10s.rss_kib,
        m.after_10s.rss_kib.saturating_sub(m.idle.rss_kib) as f64 / 1024.0
    );
    if let Some(p) = &args.json {
        crate::measure::instructions::write_json(p, &m)?;
    }
    Ok(())
}

#[derive(Serialize, Debug)]
pub struct IdleConnections {
    pub gateway: String,
    pub shape: String,
    pub connections: usize,
    pub idle: Reading,
    pub before_first_request: Reading,
    pub after_one_request: Reading,
    pub kib_per_connection_before: f64,
    pub kib_per_connection_after: f64,
}

/// Open `n` connections to `addr`, at most 256 connecting at once.
async fn connect_all(addr: std::net::SocketAddr, n: usize) -> Result<Vec<tokio::net::TcpStream>> {
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..(n - out.len()).min(256) {
            set.spawn(tokio::net::TcpStream::connect(addr));
        }
        while let Some(r) = set.join_next().await {
            let s = r?.with_context(|| format!("connecting to {addr}"))?;
            let _ = s.set_nodelay(true);
            out.push(s);
        }
    }
    Ok(out)
}

/// One request on every connection, `window` at a time; the connections stay open.
async fn one_request_each(
    conns: Vec<tokio::net::TcpStream>,
    wire: bytes::Bytes,
    check: load::Check,
    window: usize,
) -> Result<Vec<tokio::net::TcpStream>> {
    let mut done = Vec::with_capacity(conns.len());
    let mut rest = conns.into_iter();
    loop {
        let mut set = tokio::task::JoinSet::new();
        for mut s in rest.by_ref().take(window.max(1)) {
            let wire = wire.clone();
            set.spawn(async move {
                let r = load::request_on(&mut s, &wire).await;
                (s, r)
            });
        }
        if set.is_empty() {
            return Ok(done);
        }
        while let Some(r) = set.join_next().await {
            let (s, r) = r?;
            let (status, body) = r.map_err(|e| anyhow!("{e}"))?;
            check(status, &body).map_err(|e| anyhow!("{e}"))?;
            done.push(s);
        }
    }
}

/// Wait until the gateway holds at least `fds` descriptors (it accepted the connections), at
/// most `limit`; then a second's rest.
fn settle(pid: i32, fds: u64, limit: Duration) -> Result<Reading> {
    let deadline = Instant::now() + limit;
    while read(pid)?.open_fds < fds && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_secs(1));
    read(pid)
}

pub fn idle_connections(args: IdleConnectionsArgs) -> Result<()> {
    let shape = shapes::load(&args.shape)?;
    let rig = Rig::start(&args.gateway, &shape, None)?;
    let pid = rig.gateway.pid();
    let result = (|| -> Result<IdleConnections> {
        let idle = rig.idle_reading()?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let conns = rt.block_on(connect_all(rig.addr, args.connections))?;
        let n = args.connections as u64;
        let before = settle(pid, idle.open_fds + n, Duration::from_secs(30))?;
        let conns = rt.block_on(one_request_each(
            conns,
            rig.request.encode(rig.addr),
            rig.check(),
            args.window,
        ))?;
        let after = settle(pid, idle.open_fds + n, Duration::from_secs(30))?;
        drop(conns);
        Ok(IdleConnections {
            gateway: args.gateway.display().to_string(),
            shape: shape.shape.name.clone(),
            connections: args.connections,
            idle,
            before_first_request: before,
            after_one_request: after,
            kib_per_connection_before: kib_per(before.rss_kib, idle.rss_kib, n),
            kib_per_connection_after: kib_per(after.rss_kib, idle.rss_kib, n),
        })
    })();
    let stopped = rig.stop();
    let m = result?;
    stopped?;
    println!(
        "{} idle keep-alive client connections (shape {} for the one request each)",
        m.connections, m.shape
    );
    println!(
        "idle RSS {} KiB; {} descriptors open before the first request, {} after one request each",
        m.idle.rss_kib, m.before_first_request.open_fds, m.after_one_request.open_fds
    );
    println!(
        "before the first request: RSS {} KiB, {:.2} KiB per connection",
        m.before_first_request.rss_kib, m.kib_per_connection_before
    );
    println!(
        "after one request each:   RSS {} KiB, {:.2} KiB per connection",
        m.after_one_request.rss_kib, m.kib_per_connection_after
    );
    if let Some(p) = &args.json {
        crate::measure::instructions::write_json(p, &m)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process() {
        let r = read(std::process::id() as i32).unwrap();
        assert!(
            r.rss_kib > 0 && r.anonymous_kib > 0 && r.open_fds >= 3,
            "{r:?}"
        );
        assert_eq!(kib_per(3000, 1000, 4), 500.0);
        assert_eq!(kib_per(1000, 3000, 4), 0.0);
    }
}
