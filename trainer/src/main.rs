//! `trainer`: everything that drives the gateway from outside — the mock upstream, the PGO/BOLT
//! training run, the pinned profiles' manifests and freshness checks, the proof marker, the A/B
//! bench, the cachegrind instruction counts and the holdout gates.

mod bench;
mod check;
mod coverage;
mod fake_gateway;
mod holdout;
mod instructions;
mod load;
mod machine_load;
mod memory;
mod mock;
mod pinned;
mod procfs;
mod profiles;
mod proof;
mod redis;
mod shapes;
mod stream_instructions;
mod train;

use clap::{Parser, Subcommand};

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
    /// Write the proof marker from the manifests, profiles, BOLT log and toolchain versions.
    Proof(proof::ProofArgs),
    /// Check a proof marker: present, consistent, non-zero counts, holdout not trained.
    VerifyProof(proof::VerifyArgs),
    /// Stand-in gateway for the trainer's own tests.
    #[command(hide = true)]
    FakeGateway(fake_gateway::FakeGatewayArgs),
    /// Drive one prepared request at an address over keep-alive connections (rig check).
    Load(load::LoadArgs),
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
    /// Pinned profiles: manifest, verify, freshness check, compare.
    Profile(pinned::ProfileArgs),
    /// Wait until the machine is quiet (its busy share under the pin's threshold), up to a limit.
    WaitQuiet(machine_load::WaitQuietArgs),
}

/// Exit status 1 on an error, 3 on a stale freshness verdict of a training that ran beside other
/// work (`pinned::BusyTraining`: the training check trains again).
fn main() -> std::process::ExitCode {
    match run(Cli::parse().command) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("Error: {e:?}");
            std::process::ExitCode::from(if e.is::<pinned::BusyTraining>() { 3 } else { 1 })
        }
    }
}

fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Mock(args) => mock::run(args),
        Command::Train(args) => train::run(args),
        Command::Proof(args) => proof::run(args),
        Command::VerifyProof(args) => proof::verify_cli(args),
        Command::FakeGateway(args) => fake_gateway::run(args),
        Command::Load(args) => load::cli(args),
        Command::Bench(args) => bench::run(args),
        Command::Holdout(args) => holdout::run(args),
        Command::Coverage(args) => coverage::run(args),
        Command::ProfileCoverage(args) => coverage::profile_run(args),
        Command::Instructions(args) => instructions::run(args),
        Command::InstructionsGate(args) => instructions::gate(args),
        Command::StreamInstructions(args) => stream_instructions::run(args),
        Command::StreamMemory(args) => memory::stream_memory(args),
        Command::IdleConnections(args) => memory::idle_connections(args),
        Command::Profile(args) => pinned::run(args),
        Command::WaitQuiet(args) => machine_load::wait_quiet_cli(args),
    }
}
