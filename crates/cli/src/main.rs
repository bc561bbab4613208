//! `e2b`: the command-line entry point.

use std::process::ExitCode;

use clap::Parser as _;
use e2b_cli::{Cli, Command};

fn main() -> ExitCode {
    // Builds the sandbox when this is the re-execution for `--isolate` (before any thread).
    e2b_envd::isolated::enter_if_child();
    let cli = Cli::parse();
    // A sandbox's envd under `e2b serve` (`e2b serve envd …`) serves one sandbox: one thread,
    // so each idle sandbox costs little memory.
    let one_sandbox = matches!(
        &cli.command,
        Command::Serve(args) if matches!(args.internal, Some(e2b_serve::Internal::Envd(_)))
    );
    let runtime = if one_sandbox {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
    };
    match runtime {
        Ok(runtime) => runtime.block_on(async_main(cli)),
        Err(e) => {
            eprintln!("e2b: cannot start the async runtime: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn async_main(cli: Cli) -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("E2B_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
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
