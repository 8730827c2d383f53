//! The trainer's subcommands of before the engine was split out of it (`profile ...`, `proof`,
//! `verify-proof`, `wait-quiet`), kept only until the chain's stages call `pgo-engine` for them:
//! each calls the engine with what the gateway's chain gives it (the sources the gateway is built
//! from, its shapes as the workload inputs, its function-coverage reports pinned beside the LLVM
//! profile). No logic of its own: to be deleted with the last stage that calls it.

use anyhow::Result;
use std::path::PathBuf;

use pgo_engine::host::load::{self, WaitQuietArgs};
use pgo_engine::pinned::freshness::{self, CheckArgs};
use pgo_engine::pinned::key::KeyArgs;
use pgo_engine::pinned::manifest::{self, ManifestArgs, SourceArgs};
use pgo_engine::pinned::pin::{self, PinArgs};
use pgo_engine::pinned::use_diagnostics::{self, UseDiagnosticsArgs};
use pgo_engine::pinned::verify::{self, VerifyArgs};
use pgo_engine::profile::compare::{self, CompareArgs};
use pgo_engine::profile::Kind;
use pgo_engine::proof::marker::{self, VerifyProofArgs};
use pgo_engine::proof::{self, ProofArgs};

/// What the gateway's source digest covers: the gateway crate, the workspace manifests and the
/// patched dependencies it is built with (third_party/README.md).
const GATEWAY_SOURCE: &[&str] = &[
    "Cargo.toml",
    "Cargo.lock",
    "gateway/Cargo.toml",
    "gateway/src",
    "third_party/hyper/Cargo.toml",
    "third_party/hyper/src",
];

/// The reports the gateway's fresh LLVM profile stage writes beside it (`trainer
/// profile-coverage`), pinned with it.
const GATEWAY_REPORTS: [&str; 2] = ["function-coverage.json", "function-coverage.txt"];

fn gateway_source(source: PathBuf) -> SourceArgs {
    SourceArgs {
        source,
        include: GATEWAY_SOURCE.iter().map(|s| s.to_string()).collect(),
    }
}

#[derive(clap::Args, Debug)]
pub struct ProfileArgs {
    #[command(subcommand)]
    pub command: ProfileCommand,
}

#[derive(clap::Subcommand, Debug)]
pub enum ProfileCommand {
    /// `pgo-engine manifest` with the gateway's sources and shapes.
    Manifest(OldManifestArgs),
    /// `pgo-engine verify`.
    Verify(VerifyArgs),
    /// `pgo-engine check`.
    Check(CheckArgs),
    /// `pgo-engine compare`.
    Compare(CompareArgs),
    /// `pgo-engine use-diagnostics`.
    UseDiagnostics(UseDiagnosticsArgs),
    /// `pgo-engine pin` keeping the gateway's function-coverage reports.
    Pin(OldPinArgs),
}

#[derive(clap::Args, Debug)]
pub struct OldManifestArgs {
    #[arg(long, value_enum)]
    pub kind: Kind,
    #[arg(long)]
    pub profile: PathBuf,
    #[arg(long)]
    pub training: PathBuf,
    #[command(flatten)]
    pub key: KeyArgs,
    #[arg(long)]
    pub system: String,
    #[arg(long)]
    pub provider: String,
    #[arg(long)]
    pub source: PathBuf,
    #[arg(long)]
    pub shapes: PathBuf,
    #[arg(long)]
    pub instrumented: PathBuf,
    #[arg(long)]
    pub pgo_binary: Option<PathBuf>,
    #[arg(long)]
    pub out: PathBuf,
}

#[derive(clap::Args, Debug)]
pub struct OldPinArgs {
    #[arg(long)]
    pub fresh: PathBuf,
    #[arg(long)]
    pub profiles: PathBuf,
    #[arg(long, default_value_t = freshness::DEFAULT_MAX_OTHER_CPU_PCT)]
    pub max_other_cpu_pct: f64,
}

pub fn profile(args: ProfileArgs) -> Result<()> {
    match args.command {
        ProfileCommand::Manifest(a) => manifest::write(&ManifestArgs {
            kind: a.kind,
            profile: a.profile,
            training: a.training,
            key: a.key,
            system: a.system,
            provider: a.provider,
            source: gateway_source(a.source),
            workload_inputs: Some(a.shapes),
            instrumented: a.instrumented,
            pgo_binary: a.pgo_binary,
            out: a.out,
        }),
        ProfileCommand::Verify(a) => verify::verify(&a).map(|_| ()),
        ProfileCommand::Check(a) => freshness::check(&a),
        ProfileCommand::Compare(a) => compare::compare_cli(&a),
        ProfileCommand::UseDiagnostics(a) => use_diagnostics::use_diagnostics(&a),
        ProfileCommand::Pin(a) => pin::pin(&PinArgs {
            fresh: a.fresh,
            profiles: a.profiles,
            max_other_cpu_pct: a.max_other_cpu_pct,
            keep: GATEWAY_REPORTS.iter().map(|s| s.to_string()).collect(),
        }),
    }
}

#[derive(clap::Args, Debug)]
pub struct OldProofArgs {
    #[arg(long)]
    pub llvm_profile: PathBuf,
    #[arg(long)]
    pub bolt_profile: PathBuf,
    #[arg(long, required_unless_present = "llvm_trained_in_build")]
    pub llvm_check: Option<PathBuf>,
    #[arg(long, required_unless_present = "bolt_trained_in_build")]
    pub bolt_check: Option<PathBuf>,
    #[arg(long, conflicts_with = "llvm_check")]
    pub llvm_trained_in_build: Option<String>,
    #[arg(long, conflicts_with = "bolt_check")]
    pub bolt_trained_in_build: Option<String>,
    #[arg(long)]
    pub refresh_command: String,
    #[arg(long)]
    pub bolt_log: PathBuf,
    #[arg(long)]
    pub versions: PathBuf,
    #[arg(long)]
    pub source: PathBuf,
    #[arg(long)]
    pub out: PathBuf,
}

/// `pgo-engine proof --package gateway --binary gateway` with the gateway's sources.
pub fn proof(a: OldProofArgs) -> Result<()> {
    proof::run(&ProofArgs {
        package: "gateway".into(),
        binary: "gateway".into(),
        llvm_profile: a.llvm_profile,
        bolt_profile: a.bolt_profile,
        llvm_check: a.llvm_check,
        bolt_check: a.bolt_check,
        llvm_trained_in_build: a.llvm_trained_in_build,
        bolt_trained_in_build: a.bolt_trained_in_build,
        refresh_command: a.refresh_command,
        bolt_log: a.bolt_log,
        versions: a.versions,
        source: gateway_source(a.source),
        out: a.out,
    })
}

pub fn verify_proof(a: VerifyProofArgs) -> Result<()> {
    marker::verify_cli(&a)
}

pub fn wait_quiet(a: WaitQuietArgs) -> Result<()> {
    load::wait_quiet_cli(a)
}
