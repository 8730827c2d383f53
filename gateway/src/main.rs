//! `gateway`: an LLM gateway speaking OpenAI Chat Completions, Anthropic Messages and OpenAI
//! Responses to clients, in front of OpenAI- and Anthropic-style upstreams.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use gateway::admission::limits::StoreSource;
use gateway::{config, serve};

#[derive(Parser)]
#[command(name = "gateway", about = "LLM gateway", version)]
struct Cli {
    /// Config file (JSON); serving is the default command.
    #[arg(long, global = true)]
    config: Option<String>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Serve (the default).
    Serve,
    /// Check the config and print every error with its JSON path.
    Validate,
    /// Print the request paths (route x stream x provider kind) and the postures as JSON; with
    /// --config, also the postures that config turns on (the training coverage gate reads this).
    Paths,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let (Some(Command::Paths), None) = (&cli.command, &cli.config) {
        println!("{}", serve::paths::matrix(None));
        return ExitCode::SUCCESS;
    }
    let Some(path) = cli.config else {
        eprintln!("gateway: --config FILE is required");
        return ExitCode::from(2);
    };
    // Only serving starts the shared quota store the config names (where the config is
    // assembled, once); validate and paths check its section and start nothing.
    let store = match cli.command {
        None | Some(Command::Serve) => StoreSource::Start,
        Some(_) => StoreSource::CheckOnly,
    };
    let cfg = match config::load_file(&path, store) {
        Ok(c) => c,
        Err(errs) => {
            for e in &errs {
                eprintln!("{path}: {e}");
            }
            eprintln!("{path}: {} error(s)", errs.len());
            return ExitCode::from(1);
        }
    };
    for w in &cfg.warnings {
        eprintln!("config warning: {w}");
    }
    match cli.command {
        Some(Command::Validate) => {
            println!("{path}: ok");
            ExitCode::SUCCESS
        }
        Some(Command::Paths) => {
            println!("{}", serve::paths::matrix(Some(&cfg)));
            ExitCode::SUCCESS
        }
        None | Some(Command::Serve) => match serve::run(cfg, path) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("gateway: {e:#}");
                ExitCode::from(1)
            }
        },
    }
}
