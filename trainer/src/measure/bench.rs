//! `trainer bench`: an anchored, interleaved A/B benchmark of gateway binaries on one shape.
//!
//! One batch: start the mock (pinned to the rig CPU), measure the rig floor (load generator
//! straight to the mock), then run the legs `A V1 V2 .. A V1 V2 .. A` — the baseline `A` first,
//! last and between every round — each leg in a fresh gateway process pinned to the gateway
//! CPU: preflight the port, warm up, measure one fixed-length window, SIGTERM. Any failed
//! request, a gateway that does not exit 0, or a port held by someone else makes the batch
//! invalid. See docs/bench.md.

mod batch_report;
mod cleanup;
mod driver;
mod pin;
mod rig;
mod stats;
mod table;

#[cfg(test)]
pub use batch_report::synthetic as report_synthetic;
pub use batch_report::{Report, DRIFT_FLAG_PCT, RIG_HEADROOM_FLAG_X};
pub use table::render_table;

use crate::drive::{check, config, load, shapes};
use crate::host::procfs;
use anyhow::{bail, Context, Result};
use batch_report::{Binary, Leg, RigFloor, Settings, Window};
use bytes::Bytes;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// `LABEL=PATH`.
#[derive(Clone, Debug)]
pub struct Labeled {
    pub label: String,
    pub path: PathBuf,
}

impl std::str::FromStr for Labeled {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (label, path) = s
            .split_once('=')
            .ok_or_else(|| format!("expected LABEL=PATH, got `{s}`"))?;
        if label.is_empty() || path.is_empty() {
            return Err(format!("expected LABEL=PATH, got `{s}`"));
        }
        Ok(Labeled {
            label: label.to_string(),
            path: PathBuf::from(path),
        })
    }
}

/// Knobs shared by `bench` and `holdout`.
#[derive(clap::Args, Clone, Debug)]
pub struct Knobs {
    /// Rounds: each round is one leg of every variant followed by a baseline leg; the batch
    /// opens with a baseline leg too, so the baseline runs N+1 times.
    #[arg(long, default_value_t = 3)]
    pub legs: usize,
    /// Length of each measurement window.
    #[arg(long, default_value_t = 5.0)]
    pub window_secs: f64,
    /// Load before each window that is not measured.
    #[arg(long, default_value_t = 2.0)]
    pub warmup_secs: f64,
    /// Concurrent keep-alive connections of the load generator.
    #[arg(long, default_value_t = 16)]
    pub connections: usize,
    /// Write the report as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// CPU for the gateway (one worker).
    #[arg(long, default_value_t = 0)]
    pub gateway_cpu: usize,
    /// CPU for the load generator (and for the mock, unless it gets one of its own).
    #[arg(long, default_value_t = 1)]
    pub rig_cpu: usize,
    /// CPU for the mock upstream. Default: the lowest available CPU that is neither the
    /// gateway's nor the rig's, else the rig's. On two cores the load generator and the mock share
    /// one, which keeps the rig floor near 1.3x a streaming gateway, under the 2x a valid holdout
    /// batch needs; a third core lifts it.
    #[arg(long)]
    pub mock_cpu: Option<usize>,
    /// Run without CPU pinning (for machines with one CPU; the figures then mean less).
    #[arg(long)]
    pub no_pin: bool,
    /// Nice value for the gateway, the mock and the load generator (best effort: raising the
    /// priority needs CAP_SYS_NICE; without it they keep theirs and the report says so). It
    /// shields the legs from other work on a shared machine.
    #[arg(long, default_value_t = -20, allow_hyphen_values = true)]
    pub nice: i32,
    /// Leave priorities alone.
    #[arg(long)]
    pub no_nice: bool,
    /// The noise band is never narrower than this (percent).
    #[arg(long, default_value_t = 1.0)]
    pub min_band_pct: f64,
    /// Binary providing `mock` (default: this trainer).
    #[arg(long)]
    pub mock_bin: Option<PathBuf>,
    /// `redis-server` for a shape of the `shared-limits` posture (one for the batch, on
    /// 127.0.0.1, shared by every leg's gateway).
    #[arg(long)]
    pub redis_server: Option<PathBuf>,
}

#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// Shape file (shapes/NAME.json); its payload path is relative to the file's directory.
    #[arg(long)]
    pub shape: PathBuf,
    /// The baseline binary, LABEL=PATH (its legs are the anchors).
    #[arg(long)]
    pub baseline: Labeled,
    /// A binary to compare, LABEL=PATH; repeatable.
    #[arg(long = "variant", required = true)]
    pub variants: Vec<Labeled>,
    #[command(flatten)]
    pub knobs: Knobs,
}

pub fn run(args: BenchArgs) -> Result<()> {
    let report = run_batch(&args.shape, &args.baseline, &args.variants, &args.knobs)?;
    print!("{}", render_table(&report));
    write_json(&report, args.knobs.json.as_deref())?;
    if !report.valid {
        bail!("bench batch invalid: {}", report.problems.join("; "));
    }
    Ok(())
}

pub fn write_json(report: &Report, path: Option<&Path>) -> Result<()> {
    if let Some(p) = path {
        let mut text = serde_json::to_string_pretty(report)?;
        text.push('\n');
        std::fs::write(p, text).with_context(|| format!("writing {}", p.display()))?;
        eprintln!("bench: report written to {}", p.display());
    }
    Ok(())
}

fn check_binary(p: &Path) -> Result<PathBuf> {
    let abs = std::fs::canonicalize(p).with_context(|| format!("binary {}", p.display()))?;
    if !abs.is_file() {
        bail!("{} is not a file", abs.display());
    }
    Ok(abs)
}

fn secs(x: f64) -> Duration {
    Duration::from_secs_f64(x.max(0.0))
}

fn window_figures(o: &load::Outcome, warm: &load::Outcome) -> Window {
    let mut lat = o.latencies_us.clone();
    lat.sort_unstable();
    let ms = |p| stats::percentile(&lat, p).map_or(f64::NAN, |us| us as f64 / 1000.0);
    let seconds = o.elapsed.as_secs_f64();
    Window {
        requests: o.ok,
        failed: o.failed,
        failed_outside_window: warm.failed,
        seconds,
        rps: if seconds > 0.0 {
            o.ok as f64 / seconds
        } else {
            0.0
        },
        p50_ms: ms(50.0),
        p99_ms: ms(99.0),
        first_error: o
            .first_failure
            .clone()
            .or_else(|| warm.first_failure.clone()),
        ..Default::default()
    }
}

fn window_problem(what: &str, w: &Window) -> Option<String> {
    if w.failed == 0 && w.failed_outside_window == 0 && w.requests > 0 {
        return None;
    }
    let cause = w.first_error.as_deref().unwrap_or("no error recorded");
    if w.requests == 0 && w.failed == 0 {
        return Some(format!(
            "{what}: no request completed in the window ({cause})"
        ));
    }
    Some(format!(
        "{what}: {} failed requests in the window, {} outside it; first: {cause}",
        w.failed, w.failed_outside_window
    ))
}

/// Shares of a core over the window, in percent: (busy, interrupt work, busy with neither
/// interrupts nor the `ours` ticks — i.e. other processes).
fn core_share(
    a: Option<procfs::CpuTimes>,
    b: Option<procfs::CpuTimes>,
    ours: u64,
) -> Option<(f64, f64, f64)> {
    let (a, b) = (a?, b?);
    let total = b.total.saturating_sub(a.total);
    if total == 0 {
        return None;
    }
    let busy = b.busy.saturating_sub(a.busy);
    let irq = b.irq.saturating_sub(a.irq);
    let pct = |x: u64| x as f64 / total as f64 * 100.0;
    Some((
        pct(busy),
        pct(irq),
        pct(busy.saturating_sub(irq).saturating_sub(ours)),
    ))
}

/// Warm up, measure one window against `target`; returns the window and, when `gateway_pid`
/// is given, the gateway's CPU ticks over it (user and system) and its peak RSS.
fn measure(
    target: &driver::Target,
    k: &Knobs,
    cores: Option<(usize, usize)>,
    mock_pid: u32,
    mock_on_rig_core: bool,
    gateway_pid: Option<u32>,
    check: load::Check,
) -> Result<(Window, Option<procfs::ProcCpu>, Option<u64>)> {
    let hz = procfs::clock_ticks_per_sec() as f64;
    let watch = driver::Watch {
        gateway: gateway_pid,
        mock: mock_pid,
        cores,
    };
    let m = driver::measure(
        target,
        k.connections,
        secs(k.warmup_secs),
        secs(k.window_secs),
        watch,
        check,
    )?;
    let (s0, s1) = (&m.before, &m.after);
    let mut w = window_figures(&m.window, &m.warm);
    let gw_cpu = match (s0.gateway, s1.gateway) {
        (Some(a), Some(b)) => Some(b.since(a)),
        _ => None,
    };
    let gw_ticks = gw_cpu.map(procfs::ProcCpu::total);
    let per_req = |ticks: u64| {
        if w.requests > 0 {
            ticks as f64 / hz * 1e6 / w.requests as f64
        } else {
            f64::NAN
        }
    };
    let mock_ticks = s1.mock.saturating_sub(s0.mock);
    let me_ticks = s1.me.saturating_sub(s0.me);
    w.loadgen_cpu_us_per_req = per_req(me_ticks);
    w.mock_cpu_us_per_req = per_req(mock_ticks);
    if let Some((busy, irq, other)) = core_share(s0.gw_core, s1.gw_core, gw_ticks.unwrap_or(0)) {
        w.gateway_core_busy_pct = Some(busy);
        w.gateway_core_irq_pct = Some(irq);
        w.gateway_core_other_pct = Some(other);
    }
    let rig_ticks = me_ticks + if mock_on_rig_core { mock_ticks } else { 0 };
    if let Some((busy, irq, other)) = core_share(s0.rig_core, s1.rig_core, rig_ticks) {
        w.rig_core_busy_pct = Some(busy);
        w.rig_core_irq_pct = Some(irq);
        w.rig_core_other_pct = Some(other);
    }
    Ok((w, gw_cpu, m.gateway_rss_kib))
}

pub fn run_batch(
    shape_path: &Path,
    baseline: &Labeled,
    variants: &[Labeled],
    k: &Knobs,
) -> Result<Report> {
    if k.legs == 0 {
        bail!("--legs must be at least 1");
    }
    if k.window_secs <= 0.0 {
        bail!("--window-secs must be positive");
    }
    let loaded = shapes::load(shape_path)?;
    let (shape, body) = (loaded.shape.clone(), loaded.body.clone());
    // Every response is checked the way training checks it: the dialect's body or stream and
    // the mock's exact text.
    let expect = check::Expect::for_payload(loaded.dialect, &body)
        .map_err(|e| anyhow::anyhow!("shape {}: {e}", shape.name))?;
    let check: load::Check = Arc::new(move |status, body| expect.check(status, body));
    let base_bin = check_binary(&baseline.path)?;
    let mut var_bins = Vec::new();
    for v in variants {
        if v.label == baseline.label {
            bail!("variant label `{}` is the baseline's label", v.label);
        }
        var_bins.push(check_binary(&v.path)?);
    }
    let mock_bin = match &k.mock_bin {
        Some(p) => check_binary(p)?,
        None => std::env::current_exe().context("locating this trainer for `mock`")?,
    };

    // A Ctrl-C must not leave the children (in their own sessions) running; what an earlier,
    // killed bench left in the temp dir goes.
    cleanup::install();
    rig::sweep_stale_scratch();

    // Pinning: this process (and so the load thread and the mock) on the rig CPU, each gateway
    // on the gateway CPU.
    let (gw_cpu, rig_cpu) = if k.no_pin {
        (None, None)
    } else {
        let allowed = pin::allowed_cpus();
        if k.gateway_cpu == k.rig_cpu {
            bail!("--gateway-cpu and --rig-cpu must differ (or pass --no-pin)");
        }
        for c in [k.gateway_cpu, k.rig_cpu] {
            if !allowed.contains(&c) {
                bail!("cpu {c} is not available to this process (allowed: {allowed:?}); choose others with --gateway-cpu/--rig-cpu, or pass --no-pin");
            }
        }
        pin::pin_current_thread(k.rig_cpu)?;
        (Some(k.gateway_cpu), Some(k.rig_cpu))
    };
    let mock_cpu = match (k.no_pin, k.mock_cpu) {
        (true, _) => None,
        (false, Some(c)) => {
            if !pin::allowed_cpus().contains(&c) || c == k.gateway_cpu {
                bail!("--mock-cpu {c} must be an available CPU other than the gateway's");
            }
            Some(c)
        }
        (false, None) => pin::allowed_cpus()
            .into_iter()
            .find(|&c| c != k.gateway_cpu && c != k.rig_cpu)
            .or(rig_cpu),
    };
    // Priority: this thread now (the load thread inherits it) and this process's autogroup
    // (restored when the batch ends); the children at exec, each in its own autogroup.
    let nice = (!k.no_nice).then_some(k.nice);
    let mut nice_flags = Vec::new();
    let mut _autogroup = None;
    if let Some(n) = nice {
        // SAFETY: setpriority has no memory-safety preconditions; who = 0 is this thread.
        unsafe {
            libc::setpriority(libc::PRIO_PROCESS, 0, n);
        }
        let got = procfs::nice_of_thread();
        let before = pin::autogroup_nice(None);
        let (guard, group_ok) = pin::AutogroupGuard::raise(n);
        if group_ok {
            cleanup::restore_nice_on_signal(before);
        }
        _autogroup = Some(guard);
        if got != Some(n as i64) || (!group_ok && pin::autogroup_nice(None).is_some()) {
            nice_flags.push(format!(
                "could not set nice {n} (the load generator runs at nice {}, autogroup nice {}): \
                 other work on the machine competes with the legs on equal terms",
                got.map_or("?".into(), |g| g.to_string()),
                pin::autogroup_nice(None).map_or("-".into(), |g| g.to_string())
            ));
        }
    }

    let mut binaries = vec![Binary {
        label: baseline.label.clone(),
        path: base_bin.display().to_string(),
        role: "baseline",
    }];
    for (v, p) in variants.iter().zip(&var_bins) {
        binaries.push(Binary {
            label: v.label.clone(),
            path: p.display().to_string(),
            role: "variant",
        });
    }
    let settings = Settings {
        shape: shape.name.clone(),
        endpoint: shape.endpoint.clone(),
        stream: shape.stream,
        posture: shape.posture.clone(),
        connections: k.connections,
        rounds: k.legs,
        window_secs: k.window_secs,
        warmup_secs: k.warmup_secs,
        min_band_pct: k.min_band_pct,
        gateway_cpu: gw_cpu,
        rig_cpu,
        mock_cpu,
        gateway_workers: 1,
        nice,
        load_client: "trainer load".into(),
        binaries: binaries.clone(),
    };
    let mut report = Report {
        schema: 1,
        valid: true,
        problems: Vec::new(),
        flags: nice_flags,
        settings,
        rig_floor: None,
        anchors: None,
        summaries: Vec::new(),
        between_variants: Vec::new(),
        legs: Vec::new(),
    };

    // Order: A, then per round every variant followed by A.
    let mut order: Vec<usize> = vec![0];
    for _ in 0..k.legs {
        order.extend(1..binaries.len());
        order.push(0);
    }
    let total = order.len();
    let per_leg = k.warmup_secs + k.window_secs + 0.5;
    eprintln!(
        "bench: shape {} — {} legs + rig floor, about {:.0} s",
        shape.name,
        total,
        per_leg * (total + 1) as f64
    );

    let scratch = rig::Scratch::new()?;
    let (mut mock, mock_addr) = rig::start_mock(&mock_bin, &scratch.0, mock_cpu, nice)?;
    eprintln!("bench: mock at {mock_addr} (pid {})", mock.pid());
    let hz = procfs::clock_ticks_per_sec() as f64;
    let cores = gw_cpu.zip(rig_cpu);
    let mock_pid = mock.pid();
    let started = Instant::now();

    // Rig floor: the same load straight at the mock.
    let floor_target = driver::Target {
        addr: mock_addr,
        path: shape.endpoint.clone(),
        body: body.clone(),
        headers: Vec::new(),
    };
    let mock_on_rig_core = mock_cpu == rig_cpu;
    let (fw, _, _) = measure(
        &floor_target,
        k,
        cores,
        mock.pid(),
        mock_on_rig_core,
        None,
        check.clone(),
    )?;
    eprintln!(
        "bench: [rig floor] {:.0} rps, p50 {:.3} ms, p99 {:.3} ms; rig cpu per request: load \
         generator {:.2} us, mock {:.2} us",
        fw.rps, fw.p50_ms, fw.p99_ms, fw.loadgen_cpu_us_per_req, fw.mock_cpu_us_per_req
    );
    if let Some(p) = window_problem("rig floor", &fw) {
        report.problems.push(p);
    }
    report.rig_floor = Some(RigFloor {
        window: fw,
        headroom_x: f64::NAN,
        flagged: false,
    });

    let redis = match (config::needs_redis(&shape), &k.redis_server) {
        (true, Some(bin)) => Some(crate::drive::redis::RedisServer::start(bin, &scratch.0)?),
        (true, None) => {
            bail!(
                "bench: shape {} (posture shared-limits) needs --redis-server PATH",
                shape.name
            )
        }
        (false, _) => None,
    };
    let rig_info = RigInfo {
        mock_addr,
        mock_pid,
        mock_on_rig_core,
        cores,
        nice,
        hz,
        redis: redis.as_ref().map(|r| r.addr()),
    };
    for (i, &bi) in order.iter().enumerate() {
        if !report.problems.is_empty() {
            break;
        }
        let bin = &binaries[bi];
        let path = if bi == 0 {
            &base_bin
        } else {
            &var_bins[bi - 1]
        };
        let work = Work {
            shape: &shape,
            body: &body,
            check: &check,
        };
        match run_leg(i + 1, bin, path, &work, &rig_info, k) {
            Ok((leg, problem)) => {
                eprintln!(
                    "bench: [{}/{total}] {:<10} {:>8.0} rps  p50 {:.3} ms  p99 {:.3} ms  {:.2} us/req \
                     ({:.2} user)  gw cpu {:.0}%  rss {:.1} MiB  ({:.0} s elapsed)",
                    i + 1,
                    leg.label,
                    leg.window.rps,
                    leg.window.p50_ms,
                    leg.window.p99_ms,
                    leg.cpu_us_per_req,
                    leg.user_us_per_req,
                    leg.gateway_cpu_pct,
                    leg.peak_rss_kib as f64 / 1024.0,
                    started.elapsed().as_secs_f64()
                );
                report.legs.push(leg);
                if let Some(p) = problem {
                    report.problems.push(p);
                }
            }
            Err(e) => report
                .problems
                .push(format!("leg {} ({}): {e:#}", i + 1, bin.label)),
        }
    }
    if let Err(e) = mock.terminate() {
        report.flags.push(format!("mock stop: {e:#}"));
    }
    if let Some(Err(e)) = redis.map(|r| r.stop()) {
        report.flags.push(format!("redis stop: {e:#}"));
    }
    report.valid = report.problems.is_empty();
    batch_report::summarize(&mut report);
    Ok(report)
}

/// What every leg needs to know about the rig.
#[derive(Clone, Copy)]
struct RigInfo {
    mock_addr: SocketAddr,
    mock_pid: u32,
    mock_on_rig_core: bool,
    cores: Option<(usize, usize)>,
    nice: Option<i32>,
    hz: f64,
    /// The batch's Redis, for a shape of the `shared-limits` posture.
    redis: Option<SocketAddr>,
}

/// The shape's request and how to check its answers.
struct Work<'a> {
    shape: &'a shapes::Shape,
    body: &'a Bytes,
    check: &'a load::Check,
}

fn run_leg(
    index: usize,
    bin: &Binary,
    path: &Path,
    work: &Work,
    rig: &RigInfo,
    k: &Knobs,
) -> Result<(Leg, Option<String>)> {
    let Work { shape, body, check } = *work;
    let RigInfo {
        mock_addr,
        mock_pid,
        mock_on_rig_core,
        cores,
        nice,
        hz,
        redis,
    } = *rig;
    let port = rig::free_port()?;
    let listen: SocketAddr = ([127, 0, 0, 1], port).into();
    let scratch = rig::Scratch::new()?;
    // The config training uses for the shape's posture (observability on; the rate-limited
    // posture adds its never-hit policy), on the bench's port.
    let access_log = scratch.0.join("access.log");
    let mut config = config::gateway_config(shape, mock_addr, rig::free_port()?, &access_log);
    config["listen"] = serde_json::Value::String(listen.to_string());
    if let Some(r) = redis {
        config::with_store(&mut config, r);
    }
    let mut gw = rig::start_gateway(
        path,
        &config,
        listen,
        &scratch.0,
        index,
        cores.map(|c| c.0),
        nice,
    )?;
    let pid = gw.pid();
    let listeners = rig::check_port_owner(port, pid)?;
    let cpus_allowed = procfs::cpus_allowed_list(pid);
    let gw_nice = procfs::nice_of(pid);
    let gw_group_nice = pin::autogroup_nice(Some(pid));
    let target = driver::Target {
        addr: listen,
        path: shape.endpoint.clone(),
        body: body.clone(),
        headers: config::caller_headers(shape),
    };
    let (w, ticks, rss) = measure(
        &target,
        k,
        cores,
        mock_pid,
        mock_on_rig_core,
        Some(pid),
        check.clone(),
    )?;
    let ticks = ticks.unwrap_or_default();
    let cpu_secs = ticks.total() as f64 / hz;
    let user_secs = ticks.user as f64 / hz;
    let exit = match gw.terminate() {
        Ok(st) => rig::describe_exit(st),
        Err(e) => format!("{e:#}"),
    };
    let mut problem = window_problem(&format!("leg {index} ({})", bin.label), &w);
    if problem.is_none() && exit != "exit status 0" {
        problem = Some(format!(
            "leg {index} ({}): gateway did not exit cleanly after SIGTERM: {exit}; log: {}",
            bin.label,
            gw.log_tail()
        ));
    }
    let leg = Leg {
        index,
        label: bin.label.clone(),
        role: bin.role,
        pid,
        cpu_us_per_req: if w.requests > 0 {
            cpu_secs * 1e6 / w.requests as f64
        } else {
            f64::NAN
        },
        user_us_per_req: if w.requests > 0 {
            user_secs * 1e6 / w.requests as f64
        } else {
            f64::NAN
        },
        gateway_cpu_pct: if w.seconds > 0.0 {
            cpu_secs / w.seconds * 100.0
        } else {
            0.0
        },
        peak_rss_kib: rss.unwrap_or(0),
        listeners,
        cpus_allowed,
        nice: gw_nice,
        autogroup_nice: gw_group_nice,
        exit,
        window: w,
    };
    Ok((leg, problem))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labeled_parse() {
        let l: Labeled = "pgo-bolt=/nix/store/x/bin/gateway".parse().unwrap();
        assert_eq!(l.label, "pgo-bolt");
        assert_eq!(l.path, PathBuf::from("/nix/store/x/bin/gateway"));
        assert!("noequals".parse::<Labeled>().is_err());
        assert!("=path".parse::<Labeled>().is_err());
        assert!("label=".parse::<Labeled>().is_err());
    }

    #[test]
    fn window_problems() {
        let ok = Window {
            requests: 10,
            ..Default::default()
        };
        assert!(window_problem("x", &ok).is_none());
        let failed = Window {
            requests: 10,
            failed: 1,
            first_error: Some("status 502".into()),
            ..Default::default()
        };
        assert!(window_problem("x", &failed).unwrap().contains("status 502"));
        let warm = Window {
            requests: 10,
            failed_outside_window: 2,
            ..Default::default()
        };
        assert!(window_problem("x", &warm).is_some());
        let empty = Window::default();
        assert!(window_problem("x", &empty).unwrap().contains("no request"));
    }
}
