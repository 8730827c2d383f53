//! `pgo-engine train`: the training contract (`docs/contracts.md`, "The training contract"). A
//! crate's own training command drives its instrumented binary; the engine gives it the binary,
//! a profile directory (its working directory) and a scratch directory, measures the machine while
//! it runs, requires a clean exit and profiles above a floor, and writes the training record.
//!
//! What the command does is its own business: the gateway's (`trainer train`) starts a mock
//! upstream and sends every training shape's requests, checking each answer; another crate's may
//! run its binary over a corpus. Both are held to the same rules here.

pub mod record;

use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Value};
use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::host::load::{Host, Watch};
use crate::json_file;
use crate::profile::Kind;
use record::{Workload, RECORD_SCHEMA};

#[derive(clap::Args, Debug)]
pub struct TrainArgs {
    /// Which instrumentation the binary carries: `llvm` (-Cprofile-generate: it writes
    /// LLVM_PROFILE_FILE at exit) or `bolt` (llvm-bolt -instrument: it writes the relative
    /// -instrumentation-file in its working directory at exit).
    #[arg(long, value_enum)]
    pub kind: Kind,
    /// The instrumented binary the command drives (PGO_BINARY).
    #[arg(long)]
    pub binary: PathBuf,
    /// Where the profiles must end up (PGO_PROFILE_DIR, the command's working directory); it may
    /// hold no profile before the command runs.
    #[arg(long)]
    pub profile_dir: PathBuf,
    /// Where to write the training record.
    #[arg(long)]
    pub record: PathBuf,
    /// The command's scratch directory (PGO_SCRATCH; default: a fresh one under $TMPDIR, removed
    /// afterwards).
    #[arg(long)]
    pub scratch: Option<PathBuf>,
    /// Where the command may write its workload report (PGO_REPORT; default SCRATCH/report.json).
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// Profile files at or below this size do not count, and are removed: a process that ran
    /// next to nothing (a `--version`, a config check) is not training.
    #[arg(long, default_value_t = 1024)]
    pub min_profile_bytes: u64,
    /// The training command and its arguments (after `--`; run as it is, without a shell).
    #[arg(last = true, required = true)]
    pub command: Vec<OsString>,
}

/// The profile files a binary of `kind` writes: `*.profraw` (LLVM), `*.fdata` (BOLT).
pub fn is_profile_file(kind: Kind, name: &str) -> bool {
    match kind {
        Kind::Llvm => name.ends_with(".profraw"),
        Kind::Bolt => name.ends_with(".fdata"),
    }
}

/// The profile files directly in `dir`, sorted by name, with their sizes.
fn profile_files(kind: Kind, dir: &Path) -> Result<Vec<(PathBuf, u64)>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let e = e?;
        let md = e.metadata()?;
        if md.is_file() && is_profile_file(kind, &e.file_name().to_string_lossy()) {
            out.push((e.path(), md.len()));
        }
    }
    out.sort();
    Ok(out)
}

/// How a process ended, in words.
pub fn describe_exit(st: std::process::ExitStatus) -> String {
    match (st.code(), st.signal()) {
        (Some(c), _) => format!("exited with status {c}"),
        (None, Some(s)) => format!("was killed by signal {s}"),
        _ => format!("ended: {st}"),
    }
}

pub fn run(a: &TrainArgs) -> Result<()> {
    let kind = a.kind.name();
    let binary = std::fs::canonicalize(&a.binary)
        .with_context(|| format!("train: the binary {} does not exist", a.binary.display()))?;
    if !binary.is_file() {
        bail!("train: the binary {} is not a file", binary.display());
    }
    std::fs::create_dir_all(&a.profile_dir)
        .with_context(|| format!("train: creating {}", a.profile_dir.display()))?;
    let profile_dir = std::fs::canonicalize(&a.profile_dir)?;
    let before = profile_files(a.kind, &profile_dir)?;
    if !before.is_empty() {
        bail!(
            "train: the profile directory {} already holds {} {kind} profile file(s) ({}): a training starts from an empty one",
            profile_dir.display(),
            before.len(),
            before[0].0.display()
        );
    }
    let (scratch, own_scratch) = match &a.scratch {
        Some(s) => (s.clone(), false),
        None => (
            std::env::temp_dir().join(format!("pgo-engine-train-{}", std::process::id())),
            true,
        ),
    };
    std::fs::create_dir_all(&scratch)
        .with_context(|| format!("train: creating {}", scratch.display()))?;
    let scratch = std::fs::canonicalize(&scratch)?;
    let report = a
        .report
        .clone()
        .unwrap_or_else(|| scratch.join("report.json"));
    let _ = std::fs::remove_file(&report);
    let outcome = train(a, &binary, &profile_dir, &scratch, &report);
    if own_scratch {
        let _ = std::fs::remove_dir_all(&scratch);
    }
    outcome
}

fn train(
    a: &TrainArgs,
    binary: &Path,
    profile_dir: &Path,
    scratch: &Path,
    report: &Path,
) -> Result<()> {
    let kind = a.kind.name();
    let (program, args) = a
        .command
        .split_first()
        .context("train: no training command")?;
    let mut cmd = Command::new(program);
    cmd.args(args)
        .current_dir(profile_dir)
        .stdin(Stdio::null())
        .env("PGO_BINARY", binary)
        .env("PGO_PROFILE_KIND", kind)
        .env("PGO_PROFILE_DIR", profile_dir)
        .env("PGO_SCRATCH", scratch)
        .env("PGO_REPORT", report);
    match a.kind {
        Kind::Llvm => cmd.env("LLVM_PROFILE_FILE", profile_dir.join("%p-%m.profraw")),
        Kind::Bolt => cmd.env_remove("LLVM_PROFILE_FILE"),
    };
    let shown = Path::new(program).display().to_string();
    eprintln!(
        "train: {kind} training of {} by {shown} in {}",
        binary.display(),
        profile_dir.display()
    );
    let watch = Watch::start();
    let status = cmd
        .status()
        .with_context(|| format!("train: starting the training command {shown}"))?;
    let machine = watch.finish();
    if !status.success() {
        bail!(
            "train: the training command {shown} {} (its output above says why)",
            describe_exit(status)
        );
    }

    let mut files = 0u64;
    let mut bytes = 0u64;
    let mut small = Vec::new();
    for (path, len) in profile_files(a.kind, profile_dir)? {
        if len <= a.min_profile_bytes {
            small.push(format!("{} ({len} bytes)", path.display()));
            std::fs::remove_file(&path)
                .with_context(|| format!("train: removing {}", path.display()))?;
        } else {
            files += 1;
            bytes += len;
        }
    }
    if !small.is_empty() {
        eprintln!(
            "train: {} profile file(s) at or below {} bytes removed: {}",
            small.len(),
            a.min_profile_bytes,
            small.join(", ")
        );
    }
    if files == 0 {
        bail!(
            "train: the training left no profile file above {} bytes in {} ({}){}: is {} instrumented ({}), and did every run of it exit cleanly (a profile is written at exit)?",
            a.min_profile_bytes,
            profile_dir.display(),
            match a.kind {
                Kind::Llvm => "*.profraw",
                Kind::Bolt => "*.fdata",
            },
            if small.is_empty() { String::new() } else { format!(" (only {})", small.join(", ")) },
            binary.display(),
            match a.kind {
                Kind::Llvm => "-Cprofile-generate; LLVM_PROFILE_FILE under PGO_PROFILE_DIR",
                Kind::Bolt => "llvm-bolt -instrument with a relative -instrumentation-file; run in PGO_PROFILE_DIR",
            }
        );
    }
    let workload = if report.exists() {
        let v = json_file::read(report, "workload report").map_err(|e| anyhow!("train: {e:#}"))?;
        Workload::read(&v)
            .map_err(|e| anyhow!("train: the workload report {} {e}", report.display()))?;
        v
    } else {
        Value::Null
    };
    if let Some(m) = &machine {
        eprintln!(
            "train: the machine's {} CPU(s) over {:.1} s: {:.1}% used by the training, {:.1}% by other work",
            m.cpus, m.seconds, m.own_cpu_pct, m.other_cpu_pct
        );
    }
    let record = json!({
        "schema": RECORD_SCHEMA,
        "profile_kind": kind,
        "profile_files": files,
        "profile_bytes": bytes,
        "machine": machine,
        "host": Host::read(),
        "workload": workload,
    });
    if let Some(dir) = a.record.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    json_file::write(&a.record, &record)?;
    eprintln!(
        "train: {files} {kind} profile file(s), {bytes} bytes; record {}",
        a.record.display()
    );
    Ok(())
}
