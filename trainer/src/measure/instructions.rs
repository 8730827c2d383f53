//! `trainer instructions`: what one request of a shape costs a gateway binary, counted by
//! valgrind's cachegrind rather than timed, so that other load on the machine does not change the
//! figure: instructions, simulated L1 instruction-cache misses (32 KiB, 8-way, 64-byte lines) and
//! mispredicted conditional branches per request. Each measurement is two runs under cachegrind,
//! one serving N requests of the shape and one serving none, subtracted, so that start-up and
//! shutdown cancel out. The gateway gets the config training and the bench use for the shape
//! (`config::gateway_config`); the mock upstream and the load driver run in this process, outside
//! valgrind, and every response is checked as training checks it.
//!
//! `trainer instructions-gate`: the holdout gate that cannot be noisy. Plain and optimized
//! binaries on the holdout shape and on the board shape; fails unless the optimized one executes
//! at least `--min-reduction` percent fewer instructions per request on both. The verdict it
//! writes names only the gate's settings, so a rebuild writes the same bytes; the figures go to
//! stderr and `--json`.

use anyhow::{anyhow, bail, Context, Result};
use serde::Serialize;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::drive::check::Expect;
use crate::drive::config;
use crate::drive::gateway::{self, Launch};
use crate::drive::load;
use crate::drive::shapes::{self, Loaded};
use crate::mock::MockServer;

/// Start-up under cachegrind takes seconds, more on a loaded machine.
const READY_TIMEOUT: Duration = Duration::from_secs(180);

#[derive(clap::Args, Debug)]
pub struct InstructionsArgs {
    /// The gateway binary to measure (any build).
    #[arg(long)]
    pub gateway: PathBuf,
    /// A shape file (shapes/NAME.json): its endpoint, payload, model and posture.
    #[arg(long)]
    pub shape: PathBuf,
    #[command(flatten)]
    pub run: RunArgs,
    /// Measure this many times and report the spread (repeatability).
    #[arg(long, default_value_t = 1)]
    pub repeat: usize,
    /// Also write the figures as JSON.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// How each measurement runs.
#[derive(clap::Args, Debug, Clone)]
pub struct RunArgs {
    /// Requests in the measured run.
    #[arg(long, default_value_t = 2000)]
    pub requests: u64,
    /// Keep-alive connections of the load driver.
    #[arg(long, default_value_t = 16)]
    pub connections: usize,
    /// valgrind, by absolute path.
    #[arg(long, default_value = "/usr/bin/valgrind")]
    pub valgrind: PathBuf,
    /// `redis-server` for a shape of the `shared-limits` posture (its store runs outside valgrind).
    #[arg(long)]
    pub redis_server: Option<PathBuf>,
}

#[derive(clap::Args, Debug)]
pub struct GateArgs {
    /// The plain build: the baseline.
    #[arg(long)]
    pub plain: PathBuf,
    /// The released (PGO+BOLT) build.
    #[arg(long)]
    pub optimized: PathBuf,
    /// Directory of shape files: its holdout shape is measured, and the board shape.
    #[arg(long)]
    pub shapes: PathBuf,
    /// The board shape's name.
    #[arg(long, default_value = "chat-minimal")]
    pub board: String,
    /// Least reduction of instructions per request, in percent, on every shape.
    #[arg(long)]
    pub min_reduction: f64,
    #[command(flatten)]
    pub run: RunArgs,
    /// Where to write the verdict (JSON; no measured figure in it).
    #[arg(long)]
    pub verdict: PathBuf,
    /// Also write the figures as JSON.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// cachegrind's totals of one run.
#[derive(Serialize, Clone, Copy, Debug, Default, PartialEq)]
pub struct Counts {
    pub instructions: u64,
    pub i1_misses: u64,
    pub mispredicted_branches: u64,
}

#[derive(Serialize, Clone, Copy, Debug, PartialEq)]
pub struct PerRequest {
    pub instructions: f64,
    pub i1_misses: f64,
    pub mispredicted_branches: f64,
}

#[derive(Serialize, Clone, Debug)]
pub struct Measurement {
    pub gateway: String,
    pub shape: String,
    pub requests: u64,
    pub connections: usize,
    pub idle: Counts,
    pub loaded: Counts,
    pub per_request: PerRequest,
}

/// The totals of a cachegrind output file: its `summary:` line, columns named by `events:`.
pub fn parse_cachegrind(text: &str) -> Result<Counts> {
    let events: Vec<&str> = text
        .lines()
        .find_map(|l| l.strip_prefix("events:"))
        .ok_or_else(|| anyhow!("no \"events:\" line"))?
        .split_whitespace()
        .collect();
    let summary: Vec<u64> = text
        .lines()
        .find_map(|l| l.strip_prefix("summary:"))
        .ok_or_else(|| anyhow!("no \"summary:\" line"))?
        .split_whitespace()
        .map(|n| {
            n.parse()
                .map_err(|_| anyhow!("summary value {n:?} is not a number"))
        })
        .collect::<Result<_>>()?;
    let col = |name: &str| -> Result<u64> {
        let i = events.iter().position(|e| *e == name).ok_or_else(|| {
            anyhow!("cachegrind counted no {name} (run with --cache-sim=yes --branch-sim=yes)")
        })?;
        summary
            .get(i)
            .copied()
            .ok_or_else(|| anyhow!("the summary has no {name} column"))
    };
    Ok(Counts {
        instructions: col("Ir")?,
        i1_misses: col("I1mr")?,
        mispredicted_branches: col("Bcm")?,
    })
}

/// Loaded minus idle, per request, each counter as it comes: a difference of simulated I1
/// misses or mispredictions between two runs of different work can be below zero by noise.
pub fn per_request_signed(idle: Counts, loaded: Counts, requests: u64) -> PerRequest {
    let d = |l: u64, i: u64| (l as f64 - i as f64) / requests as f64;
    PerRequest {
        instructions: d(loaded.instructions, idle.instructions),
        i1_misses: d(loaded.i1_misses, idle.i1_misses),
        mispredicted_branches: d(loaded.mispredicted_branches, idle.mispredicted_branches),
    }
}

/// Loaded minus idle, per request.
pub fn per_request(idle: Counts, loaded: Counts, requests: u64) -> Result<PerRequest> {
    let d = |l: u64, i: u64, what: &str| -> Result<f64> {
        if l < i {
            bail!("the run serving {requests} requests counted fewer {what} ({l}) than the idle run ({i})");
        }
        Ok((l - i) as f64 / requests as f64)
    };
    Ok(PerRequest {
        instructions: d(loaded.instructions, idle.instructions, "instructions")?,
        i1_misses: d(loaded.i1_misses, idle.i1_misses, "I1 misses")?,
        mispredicted_branches: d(
            loaded.mispredicted_branches,
            idle.mispredicted_branches,
            "mispredicted branches",
        )?,
    })
}

/// What the mock upstream does in one run beyond what the shape's payload asks for: its own
/// directives (`[[mock:frames:41]]`), and a name for the run's files.
#[derive(Clone, Copy, Debug)]
pub struct Upstream<'a> {
    pub directives: Option<&'a str>,
    pub label: &'a str,
}

/// The shape's payload answered as it asks.
pub const AS_THE_PAYLOAD_ASKS: Upstream<'static> = Upstream {
    directives: None,
    label: "payload",
};

/// One gateway process under cachegrind serving `requests` requests of `shape` (0: none).
pub fn run_once(
    gateway: &Path,
    shape: &Loaded,
    requests: u64,
    run: &RunArgs,
    upstream: Upstream,
    scratch: &Path,
) -> Result<Counts> {
    let tag = format!("{}-{}-{requests}", shape.shape.name, upstream.label);
    let mock_opts = crate::mock::MockOptions {
        directives: upstream.directives.map(str::to_owned),
        directive_requests: None,
    };
    let mock = MockServer::start_opts("127.0.0.1:0".parse().unwrap(), 1, mock_opts)
        .context("starting the mock")?;
    let mut config = config::gateway_config(
        &shape.shape,
        mock.addr(),
        0, // the metrics listener on a port the gateway picks: nothing here scrapes it
        &scratch.join(format!("{tag}.access.jsonl")),
    );
    let redis = match (config::needs_redis(&shape.shape), &run.redis_server) {
        (true, Some(bin)) => Some(crate::drive::redis::RedisServer::start(bin, scratch)?),
        (true, None) => bail!(
            "instructions: shape {} (posture shared-limits) needs --redis-server PATH",
            shape.shape.name
        ),
        (false, _) => None,
    };
    if let Some(r) = &redis {
        config::with_store(&mut config, r.addr());
    }
    let config_path = scratch.join(format!("{tag}.config.json"));
    std::fs::write(&config_path, serde_json::to_vec_pretty(&config)?)?;
    // Children are traced, so that a wrapper that execs the real server (bench/nginx-as-gateway)
    // is measured as that server: its file is the one named by the pid of the process started.
    let out_pattern = scratch.join(format!("{tag}.cachegrind.%p"));
    let mut out_arg = OsString::from("--cachegrind-out-file=");
    out_arg.push(&out_pattern);
    let argv: Vec<OsString> = vec![
        run.valgrind.clone().into(),
        "--tool=cachegrind".into(),
        "--cache-sim=yes".into(),
        "--branch-sim=yes".into(),
        "--I1=32768,8,64".into(),
        "--D1=32768,8,64".into(),
        "--LL=8388608,16,64".into(),
        "--vgdb=no".into(),
        "--trace-children=yes".into(),
        out_arg,
        gateway.into(),
    ];
    let env = config::gateway_env();
    let launch = Launch {
        argv: &argv,
        cwd: scratch,
        ready_timeout: READY_TIMEOUT,
    };
    let log = scratch.join(format!("{tag}.gateway.log"));
    let (mut gw, addr) = gateway::start_gateway(&launch, &config_path, &log, &env)?;
    if requests > 0 {
        let expect = Arc::new(
            Expect::for_payload_and_upstream(shape.dialect, &shape.body, upstream.directives)
                .map_err(|e| anyhow!("{e}"))?,
        );
        let req = config::request(&shape.shape, shape.body.clone());
        let mut opts = load::Options::new(addr, run.connections, load::Stop::Total(requests));
        opts.record_latency = false;
        opts.stop_on_failure = true;
        let check: load::Check = Arc::new(move |status, body| expect.check(status, body));
        let outcome = load::run_blocking(&opts, &req, check)?;
        if let Err(e) = outcome.all_ok(requests) {
            bail!("wrong response: {e}; {}", gw.log_tail());
        }
    }
    let pid = gw.pid();
    gw.stop()?;
    drop(mock);
    if let Some(r) = redis {
        r.stop()?;
    }
    let out = scratch.join(format!("{tag}.cachegrind.{pid}"));
    let text = std::fs::read_to_string(&out)
        .with_context(|| format!("valgrind wrote no cachegrind output {}", out.display()))?;
    parse_cachegrind(&text).with_context(|| format!("reading {}", out.display()))
}

/// The gateway binary by absolute path: the gateway starts in the scratch directory.
pub fn absolute_gateway(gateway: &Path) -> Result<PathBuf> {
    std::fs::canonicalize(gateway)
        .with_context(|| format!("instructions: resolving {}", gateway.display()))
}

/// One measurement: an idle run and a loaded run.
pub fn measure(gateway: &Path, shape: &Loaded, run: &RunArgs) -> Result<Measurement> {
    if run.requests == 0 {
        bail!("instructions: --requests must be positive");
    }
    if !run.valgrind.is_absolute() {
        bail!(
            "instructions: --valgrind must be an absolute path, not {}",
            run.valgrind.display()
        );
    }
    let gateway = &absolute_gateway(gateway)?;
    let scratch = crate::drive::tempdir("trainer-instructions")?;
    let result = (|| -> Result<Measurement> {
        let idle = run_once(gateway, shape, 0, run, AS_THE_PAYLOAD_ASKS, &scratch)?;
        let loaded = run_once(
            gateway,
            shape,
            run.requests,
            run,
            AS_THE_PAYLOAD_ASKS,
            &scratch,
        )?;
        Ok(Measurement {
            gateway: gateway.display().to_string(),
            shape: shape.shape.name.clone(),
            requests: run.requests,
            connections: run.connections,
            idle,
            loaded,
            per_request: per_request(idle, loaded, run.requests)?,
        })
    })();
    let _ = std::fs::remove_dir_all(&scratch);
    result.with_context(|| {
        format!(
            "instructions: {} on shape {}",
            gateway.display(),
            shape.shape.name
        )
    })
}

/// The lines `bench/instructions-per-request` has always printed.
pub fn report_lines(m: &Measurement) -> String {
    format!(
        "requests: {}\ninstructions per request: {}\n\
         L1 instruction-cache misses per request (simulated 32 KiB): {}\n\
         mispredicted conditional branches per request: {}\n",
        m.requests,
        m.per_request.instructions as u64,
        m.per_request.i1_misses as u64,
        m.per_request.mispredicted_branches as u64
    )
}

/// Largest minus smallest, in percent of the mean.
pub fn spread_pct(values: &[f64]) -> f64 {
    let (min, max) = values
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &v| {
            (a.min(v), b.max(v))
        });
    let mean = values.iter().sum::<f64>() / values.len() as f64;
    if mean > 0.0 {
        (max - min) * 100.0 / mean
    } else {
        0.0
    }
}

pub fn write_json(path: &Path, v: &impl Serialize) -> Result<()> {
    let text = serde_json::to_string_pretty(v)? + "\n";
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

pub fn run(args: InstructionsArgs) -> Result<()> {
    let shape = shapes::load(&args.shape)?;
    let mut all = Vec::new();
    for i in 0..args.repeat.max(1) {
        let m = measure(&args.gateway, &shape, &args.run)?;
        if args.repeat > 1 {
            println!("== run {}", i + 1);
        }
        print!("{}", report_lines(&m));
        all.push(m);
    }
    if all.len() > 1 {
        for (what, pick) in [
            (
                "instructions",
                (|p: &PerRequest| p.instructions) as fn(&PerRequest) -> f64,
            ),
            ("L1 instruction-cache misses", |p| p.i1_misses),
            ("mispredicted conditional branches", |p| {
                p.mispredicted_branches
            }),
        ] {
            let v: Vec<f64> = all.iter().map(|m| pick(&m.per_request)).collect();
            println!(
                "repeatability over {} runs, {what} per request: {:.1} .. {:.1} (spread {:.3}% of the mean)",
                v.len(),
                v.iter().cloned().fold(f64::INFINITY, f64::min),
                v.iter().cloned().fold(f64::NEG_INFINITY, f64::max),
                spread_pct(&v)
            );
        }
    }
    if let Some(p) = &args.json {
        write_json(p, &all)?;
    }
    Ok(())
}

fn pct(from: f64, to: f64) -> f64 {
    (to - from) * 100.0 / from
}

pub fn gate(args: GateArgs) -> Result<()> {
    let all = shapes::load_dir(&args.shapes)?;
    let holdout = all
        .iter()
        .find(|s| s.shape.holdout)
        .context("instructions gate: no holdout shape")?;
    let board = all
        .iter()
        .find(|s| s.shape.name == args.board)
        .ok_or_else(|| {
            anyhow!(
                "instructions gate: no board shape {:?} in {}",
                args.board,
                args.shapes.display()
            )
        })?;
    let mut figures = Vec::new();
    let mut failures = Vec::new();
    for shape in [holdout, board] {
        let plain = measure(&args.plain, shape, &args.run)?;
        let opt = measure(&args.optimized, shape, &args.run)?;
        let (p, o) = (plain.per_request, opt.per_request);
        let reduction = -pct(p.instructions, o.instructions);
        eprintln!(
            "instructions gate, shape {}: instructions per request {:.0} (plain) -> {:.0} (optimized), {:+.2}% \
             (at least -{:.2}% required); I1 misses {:.0} -> {:.0} ({:+.1}%); mispredicted branches {:.0} -> {:.0} ({:+.1}%)",
            shape.shape.name,
            p.instructions,
            o.instructions,
            -reduction,
            args.min_reduction,
            p.i1_misses,
            o.i1_misses,
            pct(p.i1_misses, o.i1_misses),
            p.mispredicted_branches,
            o.mispredicted_branches,
            pct(p.mispredicted_branches, o.mispredicted_branches)
        );
        if reduction.is_nan() || reduction < args.min_reduction {
            failures.push(format!(
                "on shape {} the optimized gateway executes {:.0} instructions per request against plain {:.0} ({:+.2}%), not at least {:.2}% fewer",
                shape.shape.name, o.instructions, p.instructions, -reduction, args.min_reduction
            ));
        }
        figures.push(serde_json::json!({ "shape": shape.shape.name, "plain": plain, "optimized": opt, "reduction_pct": reduction }));
    }
    if let Some(p) = &args.json {
        write_json(p, &figures)?;
    }
    if !failures.is_empty() {
        bail!("instructions gate failed: {}", failures.join("; "));
    }
    let verdict = serde_json::json!({
        "schema": 1,
        "gate": "instructions per request under cachegrind, optimized vs plain",
        "shapes": [holdout.shape.name, board.shape.name],
        "min_reduction_pct": args.min_reduction,
        "requests": args.run.requests,
        "connections": args.run.connections,
        "verdict": "passed",
    });
    write_json(&args.verdict, &verdict)?;
    eprintln!(
        "instructions gate passed: the optimized gateway executes at least {:.2}% fewer instructions per request on {} and {}",
        args.min_reduction, holdout.shape.name, board.shape.name
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const OUT: &str = "desc: I1 cache: 32768 B, 64 B, 8-way associative\n\
        cmd: gateway --config x\nevents: Ir I1mr ILmr Dr D1mr DLmr Dw D1mw DLmw Bc Bcm Bi Bim\n\
        fl=a.rs\n1 2 3 4 5 6 7 8 9 10 11 12 13 14\n\
        summary: 1000 50 5 400 10 2 300 8 1 200 20 30 3\n";

    #[test]
    fn summary_columns_by_name() {
        let c = parse_cachegrind(OUT).unwrap();
        assert_eq!(
            c,
            Counts {
                instructions: 1000,
                i1_misses: 50,
                mispredicted_branches: 20
            }
        );
        assert!(parse_cachegrind("events: Ir\nsummary: 5\n")
            .unwrap_err()
            .to_string()
            .contains("I1mr"));
        assert!(parse_cachegrind("summary: 5\n").is_err());
    }

    #[test]
    fn idle_run_is_subtracted() {
        let idle = Counts {
            instructions: 100,
            i1_misses: 10,
            mispredicted_branches: 1,
        };
        let loaded = Counts {
            instructions: 2100,
            i1_misses: 410,
            mispredicted_branches: 41,
        };
        let p = per_request(idle, loaded, 4).unwrap();
        assert_eq!(
            p,
            PerRequest {
                instructions: 500.0,
                i1_misses: 100.0,
                mispredicted_branches: 10.0
            }
        );
        assert!(per_request(loaded, idle, 4).is_err());
        assert!((spread_pct(&[99.0, 101.0]) - 2.0).abs() < 1e-9);
    }
}
