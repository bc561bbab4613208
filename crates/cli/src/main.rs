//! `e2b`: the command-line entry point.

use std::process::ExitCode;

use clap::Parser as _;
use e2b_cli::{Cli, Command, run_main};

fn main() -> ExitCode {
    // Builds the sandbox when this is the re-execution for `--isolate` (before any thread).
    e2b_envd::isolated::enter_if_child();
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if argv.get(1).is_some_and(|a| a == "serve") && argv.get(2).is_some_and(|a| a == "envd") {
        // `e2b serve envd …`, what each sandbox of `e2b serve` runs when `e2b-serve-envd` is not
        // beside this binary: parsed on its own rather than through the whole command line
        // (whose every subcommand clap would build).
        return e2b_cli::sandbox_envd_main("e2b serve envd", argv.into_iter().skip(3));
    }
    let cli = Cli::parse();
    run_main(tokio::runtime::Builder::new_multi_thread(), dispatch(cli))
}

async fn dispatch(cli: Cli) -> (&'static str, Result<i32, String>) {
    match cli.command {
        Command::Envd(args) => (
            "e2b envd",
            e2b_envd::run_cli(args)
                .await
                .map(|()| 0)
                .map_err(|e| e.to_string()),
        ),
        Command::Run(args) => (
            "e2b run",
            e2b_cli::run(args).await.map_err(|e| e.to_string()),
        ),
        Command::Acp(args) => (
            "e2b acp",
            e2b_cli::acp(args).await.map_err(|e| e.to_string()),
        ),
        Command::Sandbox(args) => (
            "e2b sandbox",
            e2b_cli::sandbox_cmd::sandbox(args)
                .await
                .map_err(|e| e.to_string()),
        ),
        Command::Files(args) => (
            "e2b files",
            e2b_cli::files_cmd::files(args)
                .await
                .map_err(|e| e.to_string()),
        ),
        Command::Serve(args) => ("e2b serve", e2b_cli::serve(args).await),
        Command::ExecServer(args) => (
            "e2b exec-server",
            e2b_cli::exec_server(args)
                .await
                .map(|()| 0)
                .map_err(|e| e.to_string()),
        ),
    }
}
