//! `e2b-envd`: the local envd-compatible daemon.

use clap::Parser;

#[derive(Debug, Parser)]
#[command(
    name = "e2b-envd",
    version,
    about = "A local envd-compatible daemon (Process service over gRPC, gRPC-Web and Connect)"
)]
struct Cli {
    #[command(flatten)]
    args: e2b_envd::EnvdArgs,
}

fn main() -> std::process::ExitCode {
    // Builds the sandbox when this is the re-execution for `--isolate` (before any thread).
    e2b_envd::isolated::enter_if_child();
    async_main()
}

#[tokio::main]
async fn async_main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("E2B_ENVD_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    raise_nofile_limit();
    become_subreaper();
    match e2b_envd::run_cli(cli.args).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("e2b-envd: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Each command holds up to three pipes in the daemon; raise the soft descriptor limit to the
/// hard one so thousands of concurrent commands fit.
fn raise_nofile_limit() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE)
        && soft < hard
    {
        let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
    }
}

/// Orphaned descendants of commands are re-parented to the daemon instead of init, so it can
/// reap them and they stay findable (the process module reaps them when this is set).
fn become_subreaper() {
    // SAFETY: PR_SET_CHILD_SUBREAPER takes an integer flag and touches no memory.
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong);
    }
}
