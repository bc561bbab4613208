//! `e2b`: the command-line entry point.

use std::process::ExitCode;

use clap::Parser as _;
use e2b_cli::{Cli, Command};

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("E2B_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match cli.command {
        Command::Envd(args) => match e2b_envd::run_cli(args).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("e2b envd: {e}");
                ExitCode::FAILURE
            }
        },
    }
}
