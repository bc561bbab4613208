//! `e2b`: the command-line entry point.

use std::process::ExitCode;

use clap::Parser as _;
use e2b_cli::{Cli, Command};

// `e2b serve envd …`, what each sandbox of `e2b serve` runs: parsed on its own rather than
// through the whole command line (whose every subcommand clap would build), so an idle sandbox
// maps as little of this binary as it can.
#[derive(Debug, clap::Parser)]
#[command(
    name = "e2b serve envd",
    about = "A sandbox's envd, as `e2b serve` runs it (internal)"
)]
struct SandboxEnvd {
    #[command(flatten)]
    args: e2b_envd::EnvdArgs,
}

fn main() -> ExitCode {
    // Builds the sandbox when this is the re-execution for `--isolate` (before any thread).
    e2b_envd::isolated::enter_if_child();
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if argv.get(1).is_some_and(|a| a == "serve") && argv.get(2).is_some_and(|a| a == "envd") {
        // One sandbox: one thread, so each idle sandbox costs little memory.
        let name = std::ffi::OsString::from("e2b serve envd");
        let envd = SandboxEnvd::parse_from(std::iter::once(name).chain(argv[3..].iter().cloned()));
        return run(tokio::runtime::Builder::new_current_thread(), async move {
            let result = e2b_envd::run_cli(envd.args).await.map(|()| 0);
            ("serve envd", result.map_err(|e| e.to_string()))
        });
    }
    let cli = Cli::parse();
    run(tokio::runtime::Builder::new_multi_thread(), dispatch(cli))
}

/// Runs `job` (a command's name and outcome) on a runtime from `builder`, with logging set up.
fn run(
    mut builder: tokio::runtime::Builder,
    job: impl std::future::Future<Output = (&'static str, Result<i32, String>)>,
) -> ExitCode {
    let runtime = match builder.enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("e2b: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("E2B_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    match runtime.block_on(job) {
        (_, Ok(code)) => ExitCode::from(u8::try_from(code.clamp(0, 255)).unwrap_or(1)),
        (name, Err(e)) => {
            eprintln!("e2b {name}: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn dispatch(cli: Cli) -> (&'static str, Result<i32, String>) {
    match cli.command {
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
    }
}
