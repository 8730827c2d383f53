//! `trainer`: the gateway's driver, everything that drives the gateway from outside: the mock
//! upstream, the training shapes and the gateway's training command, the load driver, the A/B
//! bench, the cachegrind instruction counts and the holdout and coverage gates. What any crate's
//! chain needs (profile keys, pins, freshness checks, the proof marker) is the engine's
//! (`pgo-engine`), which this uses as a library where the two share code.
//!
//! The modules are layered (ARCHITECTURE.md, "Code map: the trainer"; `tests/layers.rs`):
//! `mock` and `host` at the bottom, `drive` on them, `measure` on top.

mod drive;
mod host;
mod legacy;
mod measure;
mod mock;

// The mock's tests drive it with the load driver by its old path.
#[cfg(test)]
use drive::load;

use clap::{Parser, Subcommand};
use drive::{fake_gateway, load as load_driver, train};
use measure::{bench, coverage, holdout, instructions, memory, stream_instructions};

#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Deterministic upstream: OpenAI chat/responses and Anthropic messages, streaming and not.
    Mock(mock::MockArgs),
    /// Train every non-holdout shape through an instrumented gateway; collect its profiles.
    Train(train::TrainArgs),
    /// Write the proof marker (`pgo-engine proof` with the gateway's arguments; until the
    /// stages call the engine).
    Proof(legacy::OldProofArgs),
    /// Check a proof marker (`pgo-engine verify-proof`).
    VerifyProof(pgo_engine::proof::marker::VerifyProofArgs),
    /// Stand-in gateway for the trainer's own tests.
    #[command(hide = true)]
    FakeGateway(fake_gateway::FakeGatewayArgs),
    /// Drive one prepared request at an address over keep-alive connections (rig check).
    Load(load_driver::LoadArgs),
    /// A/B benchmark of gateway binaries on one shape.
    Bench(bench::BenchArgs),
    /// Fail if the optimized binary is slower than the plain one on the holdout shape.
    Holdout(holdout::HoldoutArgs),
    /// Fail unless every request path and posture the gateway lists has a training shape.
    Coverage(coverage::CoverageArgs),
    /// How much of the gateway crate a merged profile (text form) reached.
    ProfileCoverage(coverage::ProfileCoverageArgs),
    /// Instructions, I1 misses and mispredicted branches per request of a shape (cachegrind).
    Instructions(instructions::InstructionsArgs),
    /// Fail unless the optimized binary executes fewer instructions per request than plain on
    /// the holdout and board shapes (cachegrind; deterministic verdict).
    InstructionsGate(instructions::GateArgs),
    /// Instructions per streamed event and per stream of stream shapes (cachegrind, difference
    /// of streams of many events and of one event).
    StreamInstructions(stream_instructions::StreamInstructionsArgs),
    /// Memory per open stream: resident set at many concurrent slow streams above idle.
    StreamMemory(memory::StreamMemoryArgs),
    /// Memory per idle client keep-alive connection, before and after one request each.
    IdleConnections(memory::IdleConnectionsArgs),
    /// Pinned profiles (`pgo-engine manifest|verify|check|compare|use-diagnostics|pin` with the
    /// gateway's arguments; until the stages call the engine).
    Profile(legacy::ProfileArgs),
    /// Wait until the machine is quiet (`pgo-engine wait-quiet`).
    WaitQuiet(pgo_engine::host::load::WaitQuietArgs),
}

/// Exit status 1 on an error, 3 on a stale freshness verdict of a training that ran beside other
/// work (`BusyTraining`: the training check trains again).
fn main() -> std::process::ExitCode {
    match run(Cli::parse().command) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("Error: {e:?}");
            let busy = e.is::<pgo_engine::pinned::freshness::BusyTraining>();
            std::process::ExitCode::from(if busy { 3 } else { 1 })
        }
    }
}

fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Mock(args) => mock::run(args),
        Command::Train(args) => train::run(args),
        Command::Proof(args) => legacy::proof(args),
        Command::VerifyProof(args) => legacy::verify_proof(args),
        Command::FakeGateway(args) => fake_gateway::run(args),
        Command::Load(args) => load_driver::cli(args),
        Command::Bench(args) => bench::run(args),
        Command::Holdout(args) => holdout::run(args),
        Command::Coverage(args) => coverage::run(args),
        Command::ProfileCoverage(args) => coverage::profile_run(args),
        Command::Instructions(args) => instructions::run(args),
        Command::InstructionsGate(args) => instructions::gate(args),
        Command::StreamInstructions(args) => stream_instructions::run(args),
        Command::StreamMemory(args) => memory::stream_memory(args),
        Command::IdleConnections(args) => memory::idle_connections(args),
        Command::Profile(args) => legacy::profile(args),
        Command::WaitQuiet(args) => legacy::wait_quiet(args),
    }
}
