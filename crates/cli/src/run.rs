//! The subcommands that need a sandbox.

use std::io::Write as _;

use e2b::{EnvdEndpoint, Sandbox};
use e2b_commands::{CommandLine, CommandOptions, OutputCallback};

use crate::args::{RunArgs, SandboxArgs};

/// What can stop a subcommand.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CliError {
    /// The sandbox could not be started or reached.
    #[error("sandbox: {0}")]
    Sandbox(#[from] e2b::SandboxError),
    /// The command could not run.
    #[error("command: {0}")]
    Command(#[from] e2b_commands::CommandError),
    /// The ACP bridge failed.
    #[error("acp: {0}")]
    Acp(#[from] e2b_acp::AcpError),
    /// `--isolation on` could not start the isolated sandbox.
    #[error("isolation: {0} (use --isolation none to run without isolation)")]
    Isolation(String),
}

/// Opens the sandbox the flags name: an existing sandbox of E2B's API at `--sandbox-id`, an
/// envd at `--sandbox`, else the local one (isolated unless `--isolation none`).
pub async fn open_sandbox(args: &SandboxArgs) -> Result<Sandbox, CliError> {
    open_sandbox_with_mounts(args, &[]).await
}

/// Like [`open_sandbox`]; an isolated local sandbox also shows `extra_mounts` (host paths,
/// read-only at the same path) besides `--mount-ro`.
pub(crate) async fn open_sandbox_with_mounts(
    args: &SandboxArgs,
    extra_mounts: &[std::path::PathBuf],
) -> Result<Sandbox, CliError> {
    if let Some(id) = &args.sandbox_id {
        return Ok(crate::sandbox_cmd::open_by_id(id).await?);
    }
    Ok(match &args.sandbox {
        Some(url) => {
            let mut endpoint = EnvdEndpoint::new(url.clone());
            if let Some(token) = &args.access_token {
                endpoint = endpoint.access_token(token.clone());
            }
            Sandbox::connect(endpoint).await?
        }
        None => {
            let isolated = args.local.isolation == "on";
            let mut opts = args
                .local
                .options()
                .map_err(|e| CliError::Isolation(e.to_string()))?;
            if isolated {
                for p in extra_mounts {
                    tracing::info!(path = %p.display(), "shown read-only in the sandbox");
                    opts = opts.mount_ro(p.display().to_string());
                }
            }
            match Sandbox::local_with_options(opts).await {
                Err(e2b::SandboxError::Isolated(m)) => return Err(CliError::Isolation(m)),
                other => other?,
            }
        }
    })
}

/// `e2b exec-server`: in an existing sandbox through E2B's API with `--sandbox-id` (see
/// [`crate::sandbox_cmd::exec_server`]), at `--sandbox URL`, or else in an isolated local
/// sandbox (`--isolation on`, the default) or on this machine (`--isolation none`).
///
/// # Errors
///
/// The server's error, or [`CliError::Isolation`] as a message when the isolated sandbox
/// cannot start.
///
/// # Cancel safety
///
/// Dropping the future stops the server; an isolated daemon it started dies with this
/// process.
pub async fn exec_server(cmd: crate::args::ExecServerCmd) -> Result<(), String> {
    crate::sandbox_cmd::exec_server(cmd.args)
        .await
        .map_err(|e| e.to_string())
}

pub(crate) fn command_line(argv: &[String]) -> CommandLine {
    match argv {
        [script] => CommandLine::shell(script.clone()),
        [program, rest @ ..] => CommandLine::exec(program.clone(), rest.iter().cloned()),
        [] => CommandLine::shell(String::new()),
    }
}

/// The exit code of `e2b run` when the command timeout expired (as `timeout(1)`).
pub const TIMEOUT_EXIT_CODE: i32 = 124;

/// `e2b run`: runs the command, streams its output live, and returns the exit code to exit
/// with (the command's, 128+N when signal N ended it, [`TIMEOUT_EXIT_CODE`] on timeout).
pub async fn run(args: RunArgs) -> Result<i32, CliError> {
    let sandbox = open_sandbox(&args.sandbox).await?;
    let mut opts = CommandOptions::new()
        .on_stdout(OutputCallback::bytes(|b: &[u8]| {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(b).and_then(|()| out.flush());
        }))
        .on_stderr(OutputCallback::bytes(|b: &[u8]| {
            let mut err = std::io::stderr().lock();
            let _ = err.write_all(b).and_then(|()| err.flush());
        }))
        .retain_output(false);
    opts = match args.timeout() {
        Some(t) => opts.timeout(t),
        None => opts.no_timeout(),
    };
    if let Some(cwd) = &args.cwd {
        opts = opts.cwd(cwd.clone());
    }
    if let Some(user) = &args.user {
        opts = opts.user(user.clone());
    }
    for (k, v) in &args.envs {
        opts = opts.env(k.clone(), v.clone());
    }
    let result = sandbox
        .commands()
        .run(command_line(&args.command), opts)
        .await;
    let code = match result {
        Ok(out) => exit_code(Some(out.exit_code), out.signal),
        // The command timeout expired and the process group was killed: exit like timeout(1).
        Err(e @ e2b_commands::CommandError::DeadlineExceeded { .. }) => {
            eprintln!("e2b run: {e}");
            TIMEOUT_EXIT_CODE
        }
        Err(e) => {
            let _ = sandbox.kill().await;
            return Err(e.into());
        }
    };
    let _ = sandbox.kill().await;
    Ok(code)
}

/// The exit code for a process that exited with `code` or was ended by `signal`.
pub(crate) fn exit_code(code: Option<i32>, signal: Option<i32>) -> i32 {
    match (code, signal) {
        (_, Some(sig)) => 128 + sig,
        (Some(code), None) => code,
        (None, None) => 1,
    }
}
