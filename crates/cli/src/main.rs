//! `e2b`: the command-line entry point.

use std::process::ExitCode;

use clap::Parser as _;
use e2b_cli::{Cli, Command};

fn main() -> ExitCode {
    // Builds the sandbox when this is the re-execution for `--isolate` (before any thread).
    e2b_envd::isolated::enter_if_child();
    // `e2b serve`'s per-sandbox shim, before the runtime and the command line (memory per
    // sandbox).
    e2b_serve::run_sandbox_init_if_asked(&["serve"]);
    async_main()
}

#[tokio::main]
async fn async_main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("E2B_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let (name, result) = match cli.command {
        Command::Envd(args) => (
            "envd",
            e2b_envd::run_cli(args)
                .await
                .map(|()| 0)
                .map_err(|e| e.to_string()),
        ),
        Command::Run(args) => ("run", e2b_cli::run(args).await.map_err(|e| e.to_string())),
        Command::Acp(args) => ("acp", e2b_cli::acp(args).await.map_err(|e| e.to_string())),
        Command::Sandbox(args) => (
            "sandbox",
            e2b_cli::sandbox_cmd::sandbox(args)
                .await
                .map_err(|e| e.to_string()),
        ),
        Command::Files(args) => (
            "files",
            e2b_cli::files_cmd::files(args)
                .await
                .map_err(|e| e.to_string()),
        ),
        Command::Serve(args) => ("serve", e2b_cli::serve(args).await),
        Command::ExecServer(args) => (
            "exec-server",
            e2b_cli::exec_server(args)
                .await
                .map(|()| 0)
                .map_err(|e| e.to_string()),
        ),
    };
    match result {
        Ok(code) => ExitCode::from(u8::try_from(code.clamp(0, 255)).unwrap_or(1)),
        Err(e) => {
            eprintln!("e2b {name}: {e}");
            ExitCode::FAILURE
        }
    }
}
