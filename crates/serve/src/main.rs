//! `e2b-serve`: E2B's sandbox API on one machine (the same program as `e2b serve`).

use clap::Parser as _;

#[derive(Debug, clap::Parser)]
#[command(
    name = "e2b-serve",
    version,
    about = "E2B's sandbox API on one machine: point E2B_API_URL and E2B_SANDBOX_URL at it"
)]
struct Cli {
    #[command(flatten)]
    args: e2b_serve::ServeArgs,
}

fn main() -> std::process::ExitCode {
    // An isolated sandbox is built by a re-execution of this binary: before anything else.
    e2b_isolation::run_if_child();
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("E2B_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    // A sandbox's envd runs on one thread: it serves one sandbox, and each idle sandbox should
    // cost little memory.
    let runtime = if matches!(cli.args.internal, Some(e2b_serve::Internal::Envd(_))) {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
    };
    let runtime = match runtime {
        Ok(r) => r,
        Err(e) => {
            eprintln!("e2b-serve: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(e2b_serve::run_cli_with(cli.args, &[], true)) {
        Ok(code) => std::process::ExitCode::from(u8::try_from(code.clamp(0, 255)).unwrap_or(1)),
        Err(e) => {
            eprintln!("e2b-serve: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
