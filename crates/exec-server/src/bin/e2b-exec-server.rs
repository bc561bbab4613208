//! `e2b-exec-server`: the MCP exec server as a standalone program (the CLI has it as
//! `e2b exec-server`).

use clap::Parser;

/// An MCP server whose exec and file tools run in an E2B sandbox.
#[derive(Debug, Parser)]
#[command(name = "e2b-exec-server", version)]
struct Cli {
    #[command(flatten)]
    args: e2b_exec_server::ExecServerArgs,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    // Logs go to stderr: stdout carries the MCP stream in stdio mode.
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let cli = Cli::parse();
    match e2b_exec_server::run(cli.args).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("e2b-exec-server: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
