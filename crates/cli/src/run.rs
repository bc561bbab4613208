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

/// A random access token for an isolated daemon (only this process can then call it).
fn random_token() -> Result<String, CliError> {
    use std::io::Read as _;
    let mut bytes = [0u8; 24];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| CliError::Isolation(format!("read /dev/urandom for a token: {e}")))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Starts this binary as `e2b envd --isolate --network none [--mount-ro …]` on a free
/// loopback port with a random access token (passed in its environment, not its command
/// line); returns its URL and the token.
fn start_isolated_envd(mounts: &[String]) -> Result<(String, String), CliError> {
    if let Err(e) = e2b_isolation::probe().check(e2b_isolation::Network::None) {
        return Err(CliError::Isolation(match e {
            e2b_isolation::IsolationError::Unsupported { what, reason } => {
                format!("{what} is not available: {reason}")
            }
            other => other.to_string(),
        }));
    }
    let exe = std::env::current_exe()
        .map_err(|e| CliError::Isolation(format!("find the e2b binary: {e}")))?;
    let mut extra = vec!["--network".to_string(), "none".to_string()];
    for m in mounts {
        extra.push("--mount-ro".into());
        extra.push(m.clone());
    }
    let token = random_token()?;
    let env = [("E2B_ENVD_ACCESS_TOKEN".to_string(), token.clone())];
    let (url, child) = e2b_envd::isolated::spawn_with_env(&exe, &["envd"], &extra, &env)
        .map_err(|e| CliError::Isolation(e.to_string()))?;
    if let Ok(mut all) = ISOLATED.lock() {
        all.push(child);
    }
    Ok((url, token))
}

/// Stops the isolated daemons this process started: SIGTERM (the supervisor stops its
/// sandbox and removes its cgroups), SIGKILL after 6 s. Without it they still die with this
/// process (parent-death signal), but their empty cgroups would be left behind.
pub(crate) async fn stop_isolated() {
    let children: Vec<std::process::Child> = match ISOLATED.lock() {
        Ok(mut all) => all.drain(..).collect(),
        Err(_) => return,
    };
    for mut child in children {
        if let Ok(pid) = i32::try_from(child.id()) {
            // SAFETY: plain kill of our own child (not yet reaped, so the pid is still ours).
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(6);
        loop {
            match child.try_wait() {
                Ok(Some(_)) | Err(_) => break,
                Ok(None) if std::time::Instant::now() > deadline => {
                    let _ = child.kill();
                    let _ = child.wait();
                    break;
                }
                Ok(None) => tokio::time::sleep(std::time::Duration::from_millis(10)).await,
            }
        }
    }
}

/// Whether `--isolation` asks for isolation (`on`) or not (`none`, said on stderr).
fn isolation_on(value: &str) -> Result<bool, CliError> {
    match value {
        "on" => Ok(true),
        "none" => {
            eprintln!(
                "e2b: --isolation none: the local sandbox is not isolated; commands run directly \
                 on this machine as this user"
            );
            Ok(false)
        }
        other => Err(CliError::Isolation(format!(
            "unknown --isolation {other:?}: expected on or none"
        ))),
    }
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
        None if isolation_on(&args.local.isolation)? => {
            let mut mounts = args.local.mount_ro.clone();
            for p in extra_mounts {
                tracing::info!(path = %p.display(), "shown read-only in the sandbox");
                mounts.push(p.display().to_string());
            }
            let (url, token) = start_isolated_envd(&mounts)?;
            Sandbox::connect(EnvdEndpoint::new(url).access_token(token)).await?
        }
        None => Sandbox::local().await?,
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
    let mut args = cmd.args;
    let in_api_sandbox = crate::sandbox_cmd::exec_server_api_id(&args).is_some();
    if !in_api_sandbox
        && args.sandbox.is_none()
        && isolation_on(&cmd.local.isolation).map_err(|e| e.to_string())?
    {
        let (url, token) = start_isolated_envd(&cmd.local.mount_ro).map_err(|e| e.to_string())?;
        // As `Sandbox::local_isolated()` names it (not the daemon's URL).
        if args.sandbox_id.is_none() {
            let port = url.rsplit(':').next().unwrap_or_default();
            args.sandbox_id = Some(format!("local-isolated-{port}"));
        }
        args.sandbox = Some(url);
        args.access_token = Some(token);
    }
    let result = crate::sandbox_cmd::exec_server(args)
        .await
        .map_err(|e| e.to_string());
    stop_isolated().await;
    result
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
            stop_isolated().await;
            return Err(e.into());
        }
    };
    let _ = sandbox.kill().await;
    stop_isolated().await;
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
