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

/// Isolated daemons started by `--isolation on`; each dies with this process (parent-death
/// signal) and takes its sandbox along.
static ISOLATED: std::sync::Mutex<Vec<std::process::Child>> = std::sync::Mutex::new(Vec::new());

fn start_isolated_envd() -> Result<String, CliError> {
    let exe = std::env::current_exe()
        .map_err(|e| CliError::Isolation(format!("find the e2b binary: {e}")))?;
    let extra = ["--network".to_string(), "none".to_string()];
    let (url, child) = e2b_envd::EnvdArgs::spawn_isolated(&exe, &["envd"], &extra)
        .map_err(|e| CliError::Isolation(e.to_string()))?;
    if let Ok(mut all) = ISOLATED.lock() {
        all.push(child);
    }
    Ok(url)
}

/// Opens the sandbox the flags name: an existing sandbox of E2B's API at `--sandbox-id`, an
/// envd at `--sandbox`, else the embedded local one.
pub async fn open_sandbox(args: &SandboxArgs) -> Result<Sandbox, CliError> {
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
        None if args.isolation == "on" => {
            let url = start_isolated_envd()?;
            Sandbox::connect(EnvdEndpoint::new(url)).await?
        }
        None if args.isolation != "none" => {
            return Err(CliError::Isolation(format!(
                "unknown --isolation {:?}: expected on or none",
                args.isolation
            )));
        }
        None => Sandbox::local().await?,
    })
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
