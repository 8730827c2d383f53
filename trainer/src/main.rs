//! `trainer`: the gateway's driver, everything that drives the gateway from outside: the mock
//! upstream, the training shapes and the gateway's training command, the load driver, the A/B
//! bench, the cachegrind instruction counts and the holdout and coverage gates. What any crate's
//! chain needs (the training contract, profile keys, pins, freshness checks, the proof marker) is
//! the engine's (`pgo-engine`), which this uses as a library where the two share code.
//!
//! The modules are layered (ARCHITECTURE.md, "Code map: the trainer"; `tests/layers.rs`):
//! `mock` and `host` at the bottom, `drive` on them, `measure` on top.

mod drive;
mod host;
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
}

fn main() -> anyhow::Result<()> {
    run(Cli::parse().command)
}

fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Mock(args) => mock::run(args),
        Command::Train(args) => train::run(args),
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
    }
}
