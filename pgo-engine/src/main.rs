//! `pgo-engine`: the engine's command line, what a crate's PGO+BOLT chain runs between its builds
//! (`docs/contracts.md`, "The engine"; the library is `lib.rs`).

use clap::{Parser, Subcommand};

use pgo_engine::host::load::{self, WaitQuietArgs};
use pgo_engine::pinned::freshness::{self, BusyTraining, CheckArgs};
use pgo_engine::pinned::manifest::{self, ManifestArgs};
use pgo_engine::pinned::pin::{self, PinArgs};
use pgo_engine::pinned::use_diagnostics::{self, UseDiagnosticsArgs};
use pgo_engine::pinned::verify::{self, VerifyArgs};
use pgo_engine::pinned::vouch::{self, VouchArgs};
use pgo_engine::profile::compare::{self, CompareArgs};
use pgo_engine::proof::marker::{self, VerifyProofArgs};
use pgo_engine::proof::{self, ProofArgs};
use pgo_engine::training::{self, TrainArgs};

#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a crate's training command against its instrumented binary (the training contract);
    /// write the training record.
    Train(TrainArgs),
    /// Write the manifest of a freshly trained profile.
    Manifest(ManifestArgs),
    /// Check a pinned profile directory against this toolchain (and PGO binary); fail closed.
    Verify(VerifyArgs),
    /// The freshness gate: a fresh profile against the pinned one; writes the verdict.
    Check(CheckArgs),
    /// Print how TEST differs from BASE (overlap, changed functions, largest moves).
    Compare(CompareArgs),
    /// The PGO build's profile-use warnings against the profile it read: fail on a function
    /// the profile has counts for whose control flow changed.
    UseDiagnostics(UseDiagnosticsArgs),
    /// Copy a fresh profile into a profiles directory, recording the profile it replaces.
    Pin(PinArgs),
    /// Record in a pinned manifest that another machine's training agrees with the profile.
    Vouch(VouchArgs),
    /// Wait until the machine is quiet (its busy share under the pin's threshold), up to a limit.
    WaitQuiet(WaitQuietArgs),
    /// Write the proof marker from the manifests, verdicts, BOLT log and toolchain versions.
    Proof(ProofArgs),
    /// Check a proof marker: present, consistent, non-zero counts, holdout not trained.
    VerifyProof(VerifyProofArgs),
}

/// Exit status 1 on an error, 3 on a stale freshness verdict of a training that ran beside other
/// work (`BusyTraining`: the training check trains again).
fn main() -> std::process::ExitCode {
    let result = match Cli::parse().command {
        Command::Train(a) => training::run(&a),
        Command::Manifest(a) => manifest::write(&a),
        Command::Verify(a) => verify::verify(&a).map(|_| ()),
        Command::Check(a) => freshness::check(&a),
        Command::Compare(a) => compare::compare_cli(&a),
        Command::UseDiagnostics(a) => use_diagnostics::use_diagnostics(&a),
        Command::Pin(a) => pin::pin(&a),
        Command::Vouch(a) => vouch::vouch(&a),
        Command::WaitQuiet(a) => load::wait_quiet_cli(a),
        Command::Proof(a) => proof::run(&a),
        Command::VerifyProof(a) => marker::verify_cli(&a),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("Error: {e:?}");
            std::process::ExitCode::from(if e.is::<BusyTraining>() { 3 } else { 1 })
        }
    }
}
