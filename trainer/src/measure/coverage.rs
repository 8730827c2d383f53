//! `trainer coverage`: the training set checked against the gateway's own list of its request
//! paths (`gateway paths`), so that the rule "a new hot path lands with its shape" is enforced
//! rather than kept by hand. Every combination of client route, stream flag and provider kind
//! (native or bridged), and every config posture that changes the request path, must be trained
//! by at least one shape; a shape whose route, stream flag or provider kind names no combination
//! the gateway serves is an error too. Which postures a shape trains is not taken from the shape
//! file: the gateway is asked, for the config training gives that shape, which postures it turns on.
//!
//! `trainer profile-coverage` reads a merged profile in its text form and reports how much of the
//! gateway crate the training reached, listing the request-path functions no shape reaches.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use serde::Serialize;
use serde_json::Value;

use crate::drive::config;
use crate::drive::shapes::{self, Shape};

#[derive(clap::Args)]
pub struct CoverageArgs {
    /// A gateway binary, run for `gateway paths` (any build of the source; an instrumented one
    /// writes a profile at each exit, so point LLVM_PROFILE_FILE at scratch, as
    /// nix/stages/coverage.nix does).
    #[arg(long)]
    pub gateway: PathBuf,
    /// The shapes directory.
    #[arg(long)]
    pub shapes: PathBuf,
    /// Also write the report as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// One request path and the training shapes that take it.
#[derive(Debug, Serialize)]
pub struct RequestPath {
    pub endpoint: String,
    pub stream: bool,
    pub upstream: String,
    /// `native` or `bridged`.
    pub route: String,
    pub shapes: Vec<String>,
}

/// One posture and the training shapes whose config turns it on.
#[derive(Debug, Serialize)]
pub struct Posture {
    pub name: String,
    pub what: String,
    pub shapes: Vec<String>,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub paths: Vec<RequestPath>,
    pub postures: Vec<Posture>,
    /// Shapes that name a combination the gateway does not serve, with why.
    pub unknown: Vec<String>,
    pub training_shapes: usize,
}

impl Report {
    /// Every reason the training set does not match the gateway, each naming the combination.
    pub fn problems(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .paths
            .iter()
            .filter(|p| p.shapes.is_empty())
            .map(|p| {
                format!(
                    "no training shape for {} stream={} upstream={} ({})",
                    p.endpoint, p.stream, p.upstream, p.route
                )
            })
            .collect();
        out.extend(
            self.postures
                .iter()
                .filter(|p| p.shapes.is_empty())
                .map(|p| format!("no training shape with posture {} ({})", p.name, p.what)),
        );
        out.extend(self.unknown.iter().cloned());
        out
    }

    pub fn render(&self) -> String {
        let mut s = format!(
            "coverage: {} request paths, {} postures, {} training shapes\n",
            self.paths.len(),
            self.postures.len(),
            self.training_shapes
        );
        for p in &self.paths {
            s += &format!(
                "  {:<22} stream={:<5} {:<9} {:<7} {}\n",
                p.endpoint,
                p.stream,
                p.upstream,
                p.route,
                list(&p.shapes)
            );
        }
        for p in &self.postures {
            s += &format!("  posture {:<20} {}\n", p.name, list(&p.shapes));
        }
        for u in &self.unknown {
            s += &format!("  {u}\n");
        }
        s
    }
}

fn list(shapes: &[String]) -> String {
    if shapes.is_empty() {
        "-- NONE --".into()
    } else {
        shapes.join(", ")
    }
}

pub fn run(args: CoverageArgs) -> Result<()> {
    let report = check(&args.gateway, &args.shapes)?;
    print!("{}", report.render());
    if let Some(p) = &args.json {
        std::fs::write(p, serde_json::to_vec_pretty(&report)?)
            .with_context(|| format!("writing {}", p.display()))?;
    }
    let problems = report.problems();
    if !problems.is_empty() {
        bail!(
            "the training set does not match the gateway's request paths:\n  - {}",
            problems.join("\n  - ")
        );
    }
    println!("coverage: every request path and posture is trained");
    Ok(())
}

/// The report for the shapes in `dir` against `gateway`'s request paths.
pub fn check(gateway: &Path, dir: &Path) -> Result<Report> {
    let matrix = paths(gateway, None)?;
    let mut report = Report {
        paths: Vec::new(),
        postures: Vec::new(),
        unknown: Vec::new(),
        training_shapes: 0,
    };
    for c in matrix["combinations"].as_array().into_iter().flatten() {
        report.paths.push(RequestPath {
            endpoint: str_of(c, "endpoint"),
            stream: c["stream"].as_bool().unwrap_or(false),
            upstream: str_of(c, "upstream"),
            route: str_of(c, "route"),
            shapes: Vec::new(),
        });
    }
    for p in matrix["postures"].as_array().into_iter().flatten() {
        report.postures.push(Posture {
            name: str_of(p, "name"),
            what: str_of(p, "what"),
            shapes: Vec::new(),
        });
    }
    if report.paths.is_empty() {
        bail!("{} paths listed no request path", gateway.display());
    }
    let scratch = std::env::temp_dir().join(format!("trainer-coverage-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)?;
    let result = (|| -> Result<()> {
        for shape in read_shapes(dir)? {
            let found = report.paths.iter_mut().find(|p| {
                p.endpoint == shape.endpoint
                    && p.stream == shape.stream
                    && p.upstream == shape.upstream
            });
            let Some(path) = found else {
                report.unknown.push(format!(
                    "shape {} names {} stream={} upstream={}, which is not a request path the \
                     gateway serves",
                    shape.name, shape.endpoint, shape.stream, shape.upstream
                ));
                continue;
            };
            if !shapes::POSTURES.contains(&shape.posture.as_str()) {
                report.unknown.push(format!(
                    "shape {} names posture {:?}, which training has no config for (one of {:?})",
                    shape.name,
                    shape.posture,
                    shapes::POSTURES
                ));
                continue;
            }
            if shape.holdout {
                continue;
            }
            report.training_shapes += 1;
            path.shapes.push(shape.name.clone());
            // What this shape's training config turns on, as the gateway reads it.
            let mut cfg = config::gateway_config(
                &shape,
                "127.0.0.1:9".parse().unwrap(),
                9,
                &scratch.join("access.jsonl"),
            );
            if config::needs_redis(&shape) {
                // Where the Redis is does not change what the config turns on.
                config::with_store(&mut cfg, "127.0.0.1:9".parse().unwrap());
            }
            let cfg_path = scratch.join(format!("{}.json", shape.name));
            std::fs::write(&cfg_path, serde_json::to_vec_pretty(&cfg)?)?;
            let m = paths(gateway, Some(&cfg_path))?;
            for name in m["enabled_postures"].as_array().into_iter().flatten() {
                let name = name.as_str().unwrap_or_default();
                if let Some(p) = report.postures.iter_mut().find(|p| p.name == name) {
                    p.shapes.push(shape.name.clone());
                }
            }
        }
        Ok(())
    })();
    let _ = std::fs::remove_dir_all(&scratch);
    result?;
    Ok(report)
}

fn str_of(v: &Value, k: &str) -> String {
    v[k].as_str().unwrap_or_default().to_owned()
}

/// `gateway paths [--config CONFIG]`, parsed.
fn paths(gateway: &Path, config: Option<&Path>) -> Result<Value> {
    let mut cmd = Command::new(gateway);
    cmd.arg("paths");
    if let Some(c) = config {
        cmd.arg("--config").arg(c);
    }
    let out = cmd
        .output()
        .with_context(|| format!("running {} paths", gateway.display()))?;
    if !out.status.success() {
        bail!(
            "{} paths{} failed ({}): {}",
            gateway.display(),
            config
                .map(|c| format!(" --config {}", c.display()))
                .unwrap_or_default(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    serde_json::from_slice(&out.stdout)
        .with_context(|| format!("{} paths printed no JSON", gateway.display()))
}

/// Every shape file in `dir`, read as written (the coverage check itself judges their routes).
fn read_shapes(dir: &Path) -> Result<Vec<Shape>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading shapes dir {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && p.extension().and_then(|x| x.to_str()) == Some("json"))
        .collect();
    files.sort();
    files
        .iter()
        .map(|p| {
            let text = std::fs::read_to_string(p)?;
            serde_json::from_str(&text).with_context(|| format!("parsing shape {}", p.display()))
        })
        .collect()
}

// ---- function coverage of a merged profile ----

#[derive(clap::Args)]
pub struct ProfileCoverageArgs {
    /// The merged profile in text form (`llvm-profdata merge --text`).
    #[arg(long)]
    pub proftext: PathBuf,
    /// Write the report as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// Modules of the gateway whose functions run per request (everything but start-up, config
/// loading and signal handling).
const REQUEST_PATH_MODULES: &[&str] = &[
    "gateway::admission",
    "gateway::dialect",
    "gateway::exchange",
    "gateway::http",
    "gateway::json",
    "gateway::provider",
    "gateway::routing",
    "gateway::serve::proxy",
    "gateway::serve::worker",
    "gateway::sse",
    "gateway::telemetry",
];

#[derive(Debug, Serialize)]
pub struct ProfileCoverage {
    /// Functions of the gateway crate in the profile, and how many any shape ran.
    pub gateway_functions: usize,
    pub gateway_functions_reached: usize,
    /// Request-path functions (see `REQUEST_PATH_MODULES`), reached and not.
    pub request_path_functions: usize,
    pub request_path_functions_reached: usize,
    /// The request-path functions with no count, by module: not reached by any shape, or (for a
    /// small function) only ever run inlined into its callers, whose counters then hold it.
    pub unreached: BTreeMap<String, Vec<String>>,
}

pub fn profile_run(args: ProfileCoverageArgs) -> Result<()> {
    let text = std::fs::read_to_string(&args.proftext)
        .with_context(|| format!("reading {}", args.proftext.display()))?;
    let c = profile_coverage(&text)?;
    let pct = |a: usize, b: usize| 100.0 * a as f64 / b.max(1) as f64;
    println!(
        "profile coverage: gateway crate {}/{} functions reached ({:.1}%); request path {}/{} ({:.1}%)",
        c.gateway_functions_reached,
        c.gateway_functions,
        pct(c.gateway_functions_reached, c.gateway_functions),
        c.request_path_functions_reached,
        c.request_path_functions,
        pct(c.request_path_functions_reached, c.request_path_functions),
    );
    // A zero count also means "only ever inlined into its callers before instrumentation"
    // (LLVM's PGO pre-inliner): the list names where to look, the JSON has every name.
    println!("  request-path functions with no count, by module:");
    for (module, fns) in &c.unreached {
        println!("    {:>4}  {module}", fns.len());
    }
    if let Some(p) = &args.json {
        std::fs::write(p, serde_json::to_vec_pretty(&c)?)
            .with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(())
}

/// Coverage of the gateway crate in a text-form profile: a function is reached when any of its
/// counters is non-zero (IR-level profiles count edges, not only entries).
pub fn profile_coverage(text: &str) -> Result<ProfileCoverage> {
    if !text.contains(":ir") {
        bail!("not an IR-level text profile (llvm-profdata merge --text of rustc's profile)");
    }
    // Several symbols (generic instances, local copies) demangle to one path: count paths.
    let mut fns: BTreeMap<String, bool> = BTreeMap::new();
    for record in text.split("\n\n") {
        // The file starts with its header lines (`# IR level ...`, `:ir`) before the first record.
        let mut lines = record
            .lines()
            .filter(|l| !l.is_empty())
            .skip_while(|l| l.starts_with('#') || l.starts_with(':'));
        let Some(name) = lines.next() else { continue };
        let symbol = name.rsplit(';').next().unwrap_or(name);
        let path = demangled_path(symbol);
        let Some(path) = path.filter(|p| crate_of(p) == Some("gateway")) else {
            continue;
        };
        let mut counters = lines.skip_while(|l| *l != "# Counter Values:");
        counters.next();
        let reached = counters
            .take_while(|l| !l.starts_with('#'))
            .any(|l| l.trim().parse::<u64>().map(|n| n > 0).unwrap_or(false));
        *fns.entry(path).or_insert(false) |= reached;
    }
    if fns.is_empty() {
        bail!("the profile has no function of the gateway crate");
    }
    let on_path = |p: &str| {
        REQUEST_PATH_MODULES
            .iter()
            .any(|m| p.trim_start_matches('<').starts_with(&format!("{m}::")))
    };
    let mut c = ProfileCoverage {
        gateway_functions: fns.len(),
        gateway_functions_reached: fns.values().filter(|r| **r).count(),
        request_path_functions: 0,
        request_path_functions_reached: 0,
        unreached: BTreeMap::new(),
    };
    for (f, reached) in &fns {
        if !on_path(f) {
            continue;
        }
        c.request_path_functions += 1;
        if *reached {
            c.request_path_functions_reached += 1;
        } else {
            let module = module_of(f);
            c.unreached.entry(module).or_default().push(f.clone());
        }
    }
    Ok(c)
}

/// The demangled path of a Rust symbol without its hash suffix, or None if it is not Rust's.
fn demangled_path(symbol: &str) -> Option<String> {
    let d = rustc_demangle::try_demangle(symbol).ok()?;
    // `{:#}` leaves out the hash.
    Some(format!("{d:#}"))
}

/// The crate a demangled path belongs to: its first segment, or for `<T as Trait>::f` the crate of
/// `T` (an impl in the gateway for a foreign trait is the gateway's code).
fn crate_of(path: &str) -> Option<&str> {
    let p = path.trim_start_matches('<').trim_start_matches('&');
    let end = p.find("::")?;
    Some(&p[..end])
}

/// The module of a function path: `gateway::dialect::chat` of `gateway::dialect::chat::decode`,
/// `gateway::dialect::chat::stream` of `<gateway::dialect::chat::stream::StreamEncoder as ..>::event`
/// and of `gateway::dialect::chat::stream::StreamEncoder::new`.
fn module_of(path: &str) -> String {
    // serde's derives put their impls in an anonymous `const _` inside the module.
    if let Some(at) = path.find("::_::") {
        return path[..at].trim_start_matches('<').to_owned();
    }
    let is_impl = path.starts_with('<');
    let p = path.trim_start_matches('<');
    let head = p.split([' ', '<', '>']).next().unwrap_or(p);
    let mut segs: Vec<&str> = head.split("::").collect();
    // A closure is named after the function it is in.
    while segs.last().is_some_and(|s| s.starts_with('{')) {
        segs.pop();
    }
    if !is_impl {
        segs.pop();
    }
    while segs.len() > 1
        && segs
            .last()
            .is_some_and(|s| s.starts_with(char::is_uppercase))
    {
        segs.pop();
    }
    segs.join("::")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_profile_counts_gateway_functions() {
        let text = ":ir\n\
            _ZN7gateway5serve5proxy3run17h0123456789abcdefE\n# Func Hash:\n1\n# Num Counters:\n2\n# Counter Values:\n0\n5\n\n\
            _ZN7gateway6config4load17h0123456789abcdefE\n# Func Hash:\n1\n# Num Counters:\n1\n# Counter Values:\n1\n\n\
            _ZN7gateway7dialect4chat6decode17h0123456789abcdefE\n# Func Hash:\n1\n# Num Counters:\n1\n# Counter Values:\n0\n\n\
            _ZN5hyper5other17h0123456789abcdefE\n# Func Hash:\n1\n# Num Counters:\n1\n# Counter Values:\n9\n";
        let c = profile_coverage(text).unwrap();
        assert_eq!(c.gateway_functions, 3);
        assert_eq!(c.gateway_functions_reached, 2);
        assert_eq!(c.request_path_functions, 2);
        assert_eq!(c.request_path_functions_reached, 1);
        assert_eq!(
            c.unreached["gateway::dialect::chat"],
            ["gateway::dialect::chat::decode"]
        );
        assert_eq!(
            module_of("<gateway::dialect::chat::stream::StreamEncoder as gateway::dialect::neutral::Encoder>::error"),
            "gateway::dialect::chat::stream"
        );
        assert_eq!(
            module_of("<gateway::dialect::decode::_::<impl serde_core::de::Deserialize for gateway::dialect::decode::NamedFn>::deserialize::__Visitor as serde_core::de::Visitor>::expecting"),
            "gateway::dialect::decode"
        );
        assert_eq!(
            module_of("gateway::http::body::UpBody::one"),
            "gateway::http::body"
        );
        assert_eq!(
            module_of("gateway::json::find_model_span::{{closure}}"),
            "gateway::json"
        );
    }
}
