//! `trainer`: everything that drives the gateway from outside — the mock upstream, the PGO/BOLT
//! training run, the proof marker, the A/B bench and the holdout gate.

mod bench;
mod holdout;
mod load;
mod mock;

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
    /// Drive one prepared request at an address over keep-alive connections (rig check).
    Load(load::LoadArgs),
    /// A/B benchmark of gateway binaries on one shape.
    Bench(bench::BenchArgs),
    /// Fail if the optimized binary is slower than the plain one on the holdout shape.
    Holdout(holdout::HoldoutArgs),
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Mock(args) => mock::run(args),
        Command::Load(args) => load::cli(args),
        Command::Bench(args) => bench::run(args),
        Command::Holdout(args) => holdout::run(args),
    }
}
